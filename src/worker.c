/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The seckill background worker: drains the request queue in rounds.
 *
 * One round serves every pending request: all purchases go to Redis as one
 * pipeline of EVALSHA calls, all accepted orders are committed in one
 * transaction, then the callers are woken.  The journal entries of the
 * committed orders are dropped by the next round's pipeline; reservations
 * PostgreSQL refused are given back at once.  Admin requests follow, one at
 * a time.
 *
 *-------------------------------------------------------------------------
 */
#include "seckill.h"

#include <setjmp.h>

#include "access/xact.h"
#include "campaign_ops.h"
#include "locks.h"
#include "redlock.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "redis.h"
#include "shmem.h"
#include "stats.h"
#include "storage/ipc.h"
#include "storage/condition_variable.h"
#include "storage/proc.h"
#include "store.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timeout.h"

PGDLLEXPORT void seckill_worker_main(Datum main_arg);

/* One request of a round. */
typedef struct RoundItem
{
	int			slot;
	uint64		seq;
	SeckillRequest request;
	SeckillReply reply;
} RoundItem;

static MemoryContext round_cxt = NULL;

static void serve_admin(const SeckillRequest *request, SeckillReply *reply);

/*
 * Set when Redis may hold reservations nobody has settled yet: after a failed
 * round trip, and for every new connection (Redis may have restarted from a
 * snapshot that holds old journal entries).
 */
static bool needs_replay = true;
static uint64 replayed_generation = 0;

/*
 * Committed orders whose journal entries Redis still holds.  They are dropped
 * by HDELs at the head of the next round's pipeline, so that a busy round
 * costs one Redis round trip, or by their own pipeline before the worker
 * sleeps or serves admin requests.  Until then the journal over-counts, never
 * under-counts: a replay finds their orders and just drops the entries.
 */
static SkOrder *settled = NULL;	/* .home: the shard whose journal holds it */
static int	nsettled = 0;
static int	max_settled = 0;

/* When the locks' watchdog is next due (lock_keeper.c). */
static TimestampTz keeper_due = 0;

/* The install_generation our order ids belong to. */
static uint32 seen_generation = 0;

static void
take_order_ids(int64 *ids, int n)
{
	if (pg_atomic_read_u32(&seckill_shared->install_generation) != seen_generation)
	{
		seen_generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		store_forget_order_ids();
	}
	store_take_order_ids(ids, n);
}

static void
worker_exit(int code, Datum arg)
{
	seckill_shared->worker_latch = NULL;
	seckill_fail_taken_slots("the seckill worker stopped while it held this request", 0);
}

/*
 * Connected to Redis, with its journals replayed since this connection was
 * made?  Purchases and admin work wait for both.
 */
static bool
redis_ready(void)
{
	if (!sk_redis_connect())
		return false;
	if (needs_replay || replayed_generation != sk_redis_generation())
	{
		if (!sk_replay_all())
		{
			needs_replay = true;
			return false;
		}
		needs_replay = false;
		replayed_generation = sk_redis_generation();
		nsettled = 0;			/* the replay dropped their entries */
	}
	return true;
}

static bool
answer(RoundItem *item)
{
	return seckill_slot_reply(item->slot, item->seq, &item->reply);
}

static void
fail_all(RoundItem **items, int n, SeckillStatus status, const char *message)
{
	for (int i = 0; i < n; i++)
	{
		sk_reply_error(&items[i]->reply, status, "%s", message);
		answer(items[i]);
	}
}

static SeckillStatus
status_from_script(const char *s)
{
	static const SeckillStatus statuses[] = {SK_OK, SK_SOLD_OUT, SK_DUPLICATE,
	SK_NOT_STARTED, SK_ENDED, SK_BUSY, SK_RATE_LIMITED, SK_INVALID_TOKEN};

	for (int i = 0; i < lengthof(statuses); i++)
		if (strcmp(s, seckill_status_name(statuses[i])) == 0)
			return statuses[i];
	return SK_ERR_REDIS_REFUSED;
}


static void flush_settles(void);

static void
defer_settle_in(const SkOrder *order, int shard)
{
	if (nsettled == max_settled)
		flush_settles();
	if (nsettled == max_settled)
		nsettled = 0;			/* Redis failed: the replay drops them */
	settled[nsettled].campaign_id = order->campaign_id;
	settled[nsettled].id = order->id;
	settled[nsettled].home = shard;
	settled[nsettled].nshards = order->nshards;
	nsettled++;
}

/* A committed order's journal entries: in its home shard, and where its stock came from. */
static void
defer_settle(const SkOrder *order)
{
	defer_settle_in(order, order->home);
	if (order->stock_shard != order->home)
		defer_settle_in(order, order->stock_shard);
}

/* Add one HDEL per journal for the deferred entries; returns the count. */
static int
add_settles(SkPipeline *p)
{
	int			ncommands = 0;
	const char **argv = palloc(sizeof(char *) * (nsettled + 2));
	bool	   *done = palloc0(sizeof(bool) * nsettled);

	for (int i = 0; i < nsettled; i++)
	{
		int			argc = 0;

		if (done[i])
			continue;
		argv[argc++] = "HDEL";
		argv[argc++] = sk_shard_key(settled[i].campaign_id, settled[i].home,
									settled[i].nshards, "journal");
		for (int j = i; j < nsettled; j++)
		{
			if (done[j] || settled[j].campaign_id != settled[i].campaign_id ||
				settled[j].home != settled[i].home)
				continue;
			argv[argc++] = psprintf(INT64_FORMAT, settled[j].id);
			done[j] = true;
		}
		sk_pipeline_add(p, argc, argv, NULL);
		ncommands++;
	}
	nsettled = 0;
	return ncommands;
}

static void
flush_settles(void)
{
	SkPipeline	p;

	if (nsettled == 0)
		return;
	sk_pipeline_init(&p);
	add_settles(&p);
	if (sk_pipeline_exec(&p) == NULL)
		needs_replay = true;
}

/*
 * Add a give-back (lua/compensate.lua) of an order's journal entry in one
 * shard: its stock, and its buyer unless keep.
 */
static void
add_give_back(SkPipeline *p, const SkOrder *order, int shard, bool keep)
{
	const char *keys[3] = {
		sk_shard_key(order->campaign_id, shard, order->nshards, "meta"),
		sk_shard_key(order->campaign_id, shard, order->nshards, "buyers"),
		sk_shard_key(order->campaign_id, shard, order->nshards, "journal")
	};
	const char *args[2] = {psprintf(INT64_FORMAT, order->id), keep ? "keep" : "drop"};

	sk_pipeline_script(p, SK_SCRIPT_COMPENSATE, 3, keys, 2, args);
}

/*
 * Give back, at once, the reservations PostgreSQL refused: the stock to its
 * shard, and the buyer's place in its home shard (kept when PostgreSQL
 * refused a duplicate).
 */
static void
compensate(SkOrder *orders, int n)
{
	SkPipeline	p;
	SkReply    *replies;
	int			ncomp = 0;

	sk_pipeline_init(&p);
	for (int i = 0; i < n; i++)
	{
		bool		keep = orders[i].outcome == SK_DUPLICATE;

		if (orders[i].outcome == SK_OK)
			continue;
		add_give_back(&p, &orders[i], orders[i].stock_shard, keep);
		if (orders[i].stock_shard != orders[i].home)
			add_give_back(&p, &orders[i], orders[i].home, keep);
		ncomp++;
	}
	if (ncomp == 0)
		return;
	replies = sk_pipeline_exec(&p);
	if (replies == NULL)
	{
		needs_replay = true;
		return;
	}
	for (int i = 0, r = 0; i < n; i++)
	{
		if (orders[i].outcome == SK_OK)
			continue;
		seckill_stats_compensated(orders[i].campaign_id, 1);
		/*
		 * The CHECK on sold refused one item: PostgreSQL has none left,
		 * whatever Redis' stock says (reconcile brings Redis in line).
		 */
		if (orders[i].outcome == SK_SOLD_OUT && orders[i].qty == 1)
			sk_note_sold_out(orders[i].campaign_id);
		else if (replies[r].type == REDIS_REPLY_ARRAY && replies[r].elements == 2)
			sk_note_stock(orders[i].campaign_id, orders[i].stock_shard,
						  sk_reply_int(&replies[r].element[1]));
		r += orders[i].stock_shard != orders[i].home ? 2 : 1;
	}
}

/*
 * Redis is unreachable and seckill.redis_unavailable = database: sell from
 * PostgreSQL alone.  The same group commit decides, by the CHECK on sold
 * and the unique index, who gets an item; the sale window was checked by
 * the callers.  Redis knows nothing of these orders: it is rebuilt from
 * PostgreSQL before it takes over again.
 */
static void
serve_from_database(RoundItem **items, int n)
{
	SkOrder    *orders = palloc0(sizeof(SkOrder) * n);
	int64	   *ids = palloc(sizeof(int64) * n);
	bool		entering = !seckill_shared->sales_from_database;

	pg_atomic_fetch_add_u64(&seckill_shared->counters.purchases, n);
	take_order_ids(ids, n);
	for (int i = 0; i < n; i++)
	{
		orders[i].id = ids[i];
		orders[i].campaign_id = items[i]->request.campaign_id;
		orders[i].user_id = items[i]->request.user_id;
		orders[i].qty = items[i]->request.qty;
	}
	store_begin("seckill: commit orders without Redis");
	/* durable before the first order Redis does not know of */
	if (entering)
		store_set_database_mode(true);
	store_commit_orders(orders, n, false);
	store_commit();
	if (entering)
	{
		seckill_shared->sales_from_database = true;
		ereport(LOG,
				(errmsg("seckill worker sells from PostgreSQL alone while Redis is unreachable: %s",
						sk_redis_error())));
	}
	pg_atomic_fetch_add_u64(&seckill_shared->counters.commits, 1);
	for (int i = 0; i < n; i++)
	{
		items[i]->reply.status = orders[i].outcome;
		if (orders[i].outcome == SK_OK)
			items[i]->reply.order_id = orders[i].id;
		else if (orders[i].outcome == SK_SOLD_OUT && orders[i].qty == 1)
			sk_note_sold_out(orders[i].campaign_id);
		answer(items[i]);
	}
}

/*
 * Redis is back after sales from PostgreSQL alone: rebuild every preheated
 * campaign from PostgreSQL before Redis takes over.  False when that failed.
 */
static bool
leave_database_mode(void)
{
	List	   *rows = store_preheated_campaigns();
	ListCell   *lc;

	foreach(lc, rows)
	{
		SkCampaignRow *row = lfirst(lc);
		SeckillRequest preheat = {.kind = SK_REQ_PREHEAT, .campaign_id = row->id};
		SeckillReply reply = {0};

		serve_admin(&preheat, &reply);
		if (reply.status != SK_OK)
		{
			ereport(LOG,
					(errmsg("seckill worker could not rebuild campaign " INT64_FORMAT " in Redis: %s",
							row->id, reply.message)));
			return false;
		}
	}
	store_begin("seckill: leave database mode");
	store_set_database_mode(false);
	store_commit();
	seckill_shared->sales_from_database = false;
	ereport(LOG,
			(errmsg("seckill worker rebuilt %d campaign(s) from PostgreSQL: sales go through Redis again",
					list_length(rows))));
	return true;
}

/* buy.lua for one purchase, in its home shard. */
static void
add_buy(SkPipeline *p, const SeckillRequest *req, const SkOrder *order)
{
	SeckillCampaign *c = seckill_campaign_find(req->campaign_id);
	int64		instance = c ? c->created_at : 0;
	int64		id = req->campaign_id;
	int			home = order->home,
				nshards = order->nshards;
	const char *keys[6] = {
		sk_shard_key(id, home, nshards, "meta"),
		sk_shard_key(id, home, nshards, "buyers"),
		sk_shard_key(id, home, nshards, "journal"),
		sk_shard_key(id, home, nshards, psprintf("rate:" INT64_FORMAT ":u:%s", instance, req->user_id)),
		sk_shard_key(id, home, nshards, psprintf("rate:" INT64_FORMAT ":a:%s", instance, req->client_addr)),
		sk_shard_key(id, home, nshards, psprintf("token:%s", req->token_nonce))
	};
	const char *args[6] = {
		req->user_id,
		psprintf("%d", req->qty),
		psprintf(INT64_FORMAT, order->id),
		req->token_nonce[0] ? psprintf(INT64_FORMAT, req->token_expiry) : "",
		req->client_addr[0] ? "1" : "",
		nshards > 1 ? "1" : ""
	};

	sk_pipeline_script(p, SK_SCRIPT_BUY, 6, keys, 6, args);
}

/* A purchase of a round, with what Redis has said of it so far. */
typedef struct Purchase
{
	RoundItem  *item;
	SkOrder		order;
} Purchase;

static int
purchase_cmp(const void *a, const void *b)
{
	int64		x = ((const Purchase *) a)->order.id;
	int64		y = ((const Purchase *) b)->order.id;

	return x < y ? -1 : x > y;
}

/*
 * The purchases whose home shard had too little stock: each asks the next
 * shard round the ring (lua/take.lua), all of them in one pipeline per step,
 * until one lends the stock or none is left.  Those served join accepted;
 * the others get their answer once their place in the home shard is given
 * back.  When Redis fails, those still waiting for stock get an error, and
 * the replay settles whatever was done.
 */
static void
take_elsewhere(Purchase *pending, int npending, Purchase *accepted, int *naccepted,
			   int64 *rebuild, int *nrebuild)
{
	Purchase   *done = palloc(sizeof(Purchase) * npending);
	int			ndone = 0;
	SkPipeline	p;
	SkReply    *r;

	for (int step = 1; npending > 0; step++)
	{
		int			nsent = 0,
					nleft = 0;

		sk_pipeline_init(&p);
		for (int i = 0; i < npending; i++)
		{
			SkOrder    *o = &pending[i].order;
			int			shard = (o->home + step) % o->nshards;
			const char *keys[2] = {sk_shard_key(o->campaign_id, shard, o->nshards, "meta"),
			sk_shard_key(o->campaign_id, shard, o->nshards, "journal")};
			const char *args[3] = {psprintf(INT64_FORMAT, o->id), psprintf("%d", o->qty),
			o->user_id};

			if (step >= o->nshards)
			{
				/* every shard is short: sold out, exactly */
				pending[i].item->reply.status = SK_SOLD_OUT;
				done[ndone++] = pending[i];
				continue;
			}
			o->stock_shard = shard;
			sk_pipeline_script(&p, SK_SCRIPT_TAKE, 2, keys, 3, args);
			pending[nsent++] = pending[i];
		}
		if (nsent == 0)
			break;
		r = sk_pipeline_exec(&p);
		if (r == NULL)
		{
			needs_replay = true;
			for (int i = 0; i < nsent; i++)
			{
				sk_reply_error(&pending[i].item->reply, SK_ERR_REDIS, "%s", sk_redis_error());
				done[ndone++] = pending[i];
			}
			break;
		}
		for (int i = 0; i < nsent; i++)
		{
			SkOrder    *o = &pending[i].order;
			const char *status = r[i].type == REDIS_REPLY_ARRAY && r[i].elements == 2 ?
			r[i].element[0].str : NULL;

			if (status == NULL)
			{
				sk_reply_error(&pending[i].item->reply, SK_ERR_REDIS_REFUSED,
							   "the stock script failed: %s", r[i].str ? r[i].str : "unexpected reply");
				done[ndone++] = pending[i];
				continue;
			}
			sk_note_stock(o->campaign_id, o->stock_shard, sk_reply_int(&r[i].element[1]));
			if (strcmp(status, "ok") == 0)
				accepted[(*naccepted)++] = pending[i];
			else if (strcmp(status, "empty") == 0)
				pending[nleft++] = pending[i];
			else
			{
				/* closed meanwhile, or the shard was lost: rebuilt after the round */
				pending[i].item->reply.status = strcmp(status, "ended") == 0 ? SK_ENDED : SK_BUSY;
				if (pending[i].item->reply.status == SK_BUSY)
					rebuild[(*nrebuild)++] = o->campaign_id;
				done[ndone++] = pending[i];
			}
		}
		npending = nleft;
	}

	/* their place in the home shard goes (or the replay drops it), then they hear */
	if (!needs_replay && ndone > 0)
	{
		sk_pipeline_init(&p);
		for (int i = 0; i < ndone; i++)
			add_give_back(&p, &done[i].order, done[i].order.home, false);
		if (sk_pipeline_exec(&p) == NULL)
			needs_replay = true;
	}
	for (int i = 0; i < ndone; i++)
		answer(done[i].item);
}

static void
serve_purchases(RoundItem **items, int n)
{
	SkPipeline	p;
	SkReply    *replies;
	Purchase   *all = palloc0(sizeof(Purchase) * n);
	Purchase   *accepted = palloc(sizeof(Purchase) * n);
	Purchase   *pending = palloc(sizeof(Purchase) * n);
	SkOrder    *orders;
	int			naccepted = 0,
				npending = 0;
	int64	   *ids;
	int			nsettles;
	int64	   *rebuild = palloc(sizeof(int64) * n);
	int			nrebuild = 0;

	if (!redis_ready() || (seckill_shared->sales_from_database && !leave_database_mode()))
	{
		if (seckill_redis_unavailable == SK_UNAVAILABLE_DATABASE)
			serve_from_database(items, n);
		else
			fail_all(items, n, SK_ERR_REDIS, sk_redis_error());
		return;
	}
	pg_atomic_fetch_add_u64(&seckill_shared->counters.purchases, n);
	ids = palloc(sizeof(int64) * n);
	take_order_ids(ids, n);

	sk_pipeline_init(&p);
	nsettles = add_settles(&p);
	for (int i = 0; i < n; i++)
	{
		SeckillRequest *req = &items[i]->request;
		SkOrder    *o = &all[i].order;

		all[i].item = items[i];
		o->id = ids[i];
		o->campaign_id = req->campaign_id;
		o->user_id = req->user_id;
		o->qty = req->qty;
		o->nshards = Max(req->shards, 1);
		o->home = o->stock_shard = sk_home_shard(req->user_id, o->nshards);
		add_buy(&p, req, o);
	}
	replies = sk_pipeline_exec(&p);
	if (replies == NULL)
	{
		/* Some reservations may have been made: the replay gives them back. */
		needs_replay = true;
		fail_all(items, n, SK_ERR_REDIS,
				 psprintf("%s; no purchase of this request was made", sk_redis_error()));
		return;
	}

	for (int i = 0; i < n; i++)
	{
		SkReply    *r = &replies[nsettles + i];
		SeckillReply *reply = &items[i]->reply;
		SkOrder    *o = &all[i].order;

		if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
			r->element[0].str == NULL)
		{
			sk_reply_error(reply, SK_ERR_REDIS_REFUSED, "the purchase script failed: %s",
						   r->str ? r->str : "unexpected reply");
			answer(items[i]);
			continue;
		}
		if (strcmp(r->element[0].str, "not_loaded") == 0)
		{
			/* Redis lost the campaign: rebuild it from PostgreSQL after this round. */
			reply->status = SK_BUSY;
			answer(items[i]);
			rebuild[nrebuild++] = o->campaign_id;
			continue;
		}
		if (strcmp(r->element[0].str, "need_stock") == 0)
		{
			sk_note_stock(o->campaign_id, o->home, sk_reply_int(&r->element[1]));
			pending[npending++] = all[i];
			continue;
		}
		reply->status = status_from_script(r->element[0].str);
		if (reply->status == SK_ERR_REDIS_REFUSED)
			snprintf(reply->message, sizeof(reply->message),
					 "the purchase script answered \"%s\"", r->element[0].str);
		if (reply->status == SK_OK)
			accepted[naccepted++] = all[i];
		else
			answer(items[i]);
		if (reply->status == SK_OK || reply->status == SK_SOLD_OUT)
			sk_note_stock(o->campaign_id, o->home, sk_reply_int(&r->element[1]));
	}
	if (npending > 0)
		take_elsewhere(pending, npending, accepted, &naccepted, rebuild, &nrebuild);

	if (naccepted > 0)
	{
		/* the group commit wants them by id; those served by other shards came last */
		qsort(accepted, naccepted, sizeof(Purchase), purchase_cmp);
		orders = palloc(sizeof(SkOrder) * naccepted);
		for (int i = 0; i < naccepted; i++)
			orders[i] = accepted[i].order;
		seckill_crash_if(SK_CRASH_AFTER_RESERVE);
		store_begin("seckill: commit orders");
		store_commit_orders(orders, naccepted, true);
		store_commit();
		pg_atomic_fetch_add_u64(&seckill_shared->counters.commits, 1);
		seckill_crash_if(SK_CRASH_AFTER_COMMIT);
		for (int i = 0; i < naccepted; i++)
			if (orders[i].outcome == SK_OK)
				defer_settle(&orders[i]);
		if (seckill_crash_point == SK_CRASH_BEFORE_WAKE)
		{
			flush_settles();
			seckill_crash_if(SK_CRASH_BEFORE_WAKE);
		}
		for (int i = 0; i < naccepted; i++)
		{
			accepted[i].item->reply.status = orders[i].outcome;
			if (orders[i].outcome == SK_OK)
				accepted[i].item->reply.order_id = orders[i].id;
			answer(accepted[i].item);
		}
		compensate(orders, naccepted);
	}

	for (int i = 0; i < nrebuild; i++)
	{
		SeckillRequest preheat = {.kind = SK_REQ_PREHEAT, .campaign_id = rebuild[i]};
		SeckillReply reply = {0};
		bool		seen = false;

		for (int j = 0; j < i; j++)
			seen |= rebuild[j] == rebuild[i];
		if (!seen)
			serve_admin(&preheat, &reply);
	}
}

/*
 * Admin work may raise errors (SPI, constraints, a full campaign cache):
 * they become the reply, and the worker carries on.
 */
static void
serve_admin(const SeckillRequest *request, SeckillReply *reply)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		sk_serve_admin(request, reply);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		store_abort();
		MemoryContextSwitchTo(cxt);
		/* a connection left mid-request cannot give the lease back */
		sk_redis_abandon();
		sk_release_lock();
		sk_reply_error(reply, SK_ERR_INVALID, "%s", edata->message);
		reply->sqlerrcode = edata->sqlerrcode;
	}
	PG_END_TRY();
}

/* A round's requests: allocated once, so that nothing can fail between drain and take. */
static RoundItem *items = NULL;
static RoundItem **buys = NULL;

static void load_campaign_cache(void);

/* The install_generation the campaign cache was loaded for. */
static uint32 cache_generation = 0;
static bool cache_loaded = false;

/*
 * The extension's SQL was installed or updated since the cache was loaded:
 * load it again.  Until ALTER EXTENSION seckill UPDATE, requests fail with a
 * hint; once the SQL matches, the journals are replayed.  True when the SQL
 * matches.
 */
static bool
sql_current(void)
{
	if (!cache_loaded ||
		pg_atomic_read_u32(&seckill_shared->install_generation) != cache_generation)
	{
		cache_generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		load_campaign_cache();
		if (store_sql_outdated)
			return false;
	}
	if (!store_sql_outdated)
		return true;
	load_campaign_cache();
	if (store_sql_outdated)
		return false;
	needs_replay = true;
	ereport(LOG, (errmsg("seckill worker found its SQL objects updated: serving again")));
	return true;
}

static void
serve_round(const int *slots, int n)
{
	int			nitems = 0,
				nbuys = 0;

	for (int i = 0; i < n; i++)
	{
		RoundItem  *item = &items[nitems];

		memset(item, 0, sizeof(RoundItem));
		if (!seckill_slot_take(slots[i], &item->request, &item->seq))
			continue;
		item->slot = slots[i];
		nitems++;
		if (item->request.kind == SK_REQ_BUY)
			buys[nbuys++] = item;
	}
	pg_atomic_fetch_add_u64(&seckill_shared->counters.rounds, 1);
	if (!sql_current())
	{
		for (int i = 0; i < nitems; i++)
		{
			sk_reply_error(&items[i].reply, SK_ERR_INVALID,
						   "the seckill extension in database \"%s\" is older than its library (version " SECKILL_SQL_VERSION "): run ALTER EXTENSION seckill UPDATE there",
						   seckill_database);
			answer(&items[i]);
		}
		return;
	}
	if (nbuys > 0)
		serve_purchases(buys, nbuys);

	/* Admin requests come after the round's purchases, settled. */
	if (nitems > nbuys && sk_redis_connected())
		flush_settles();
	for (int i = 0; i < nitems; i++)
	{
		if (items[i].request.kind == SK_REQ_BUY)
			continue;
		if (items[i].request.kind == SK_REQ_BARRIER)
		{
			items[i].reply.status = SK_OK;
			answer(&items[i]);
			continue;
		}
		/* the locks on Redlock nodes do without the main Redis */
		if (!((items[i].request.kind == SK_REQ_LOCK || items[i].request.kind == SK_REQ_UNLOCK) &&
			  sk_redlock_enabled()) && !redis_ready())
		{
			sk_reply_error(&items[i].reply, SK_ERR_REDIS, "%s", sk_redis_error());
			answer(&items[i]);
			continue;
		}
		serve_admin(&items[i].request, &items[i].reply);
		if (!answer(&items[i]) && items[i].request.kind == SK_REQ_LOCK &&
			items[i].reply.status == SK_OK)
			seckill_lock_hand_back(items[i].request.lock.owner);
	}
}

/* Fill the campaign cache from PostgreSQL: what backends may answer alone. */
static void
load_campaign_cache(void)
{
	List	   *rows;
	ListCell   *lc;

	cache_loaded = false;
	rows = store_preheated_campaigns();
	/* what the table says: a restart during an outage remembers that Redis is stale */
	if (!store_sql_outdated)
		seckill_shared->sales_from_database = store_sales_from_database;

	foreach(lc, rows)
	{
		SkCampaignRow *row = lfirst(lc);

		if (!seckill_campaign_store(row->id, row->goods, row->starts_at, row->ends_at,
									row->per_user_limit, &row->limits, row->created_at,
									row->sold >= row->total_stock))
			ereport(WARNING,
					(errmsg("seckill cannot cache campaign " INT64_FORMAT " (\"%s\"): more campaigns are preheated than seckill.max_campaigns (%d)",
							row->id, row->goods, seckill_max_campaigns),
					 errhint("Its sales go through the worker without the sold-out shortcut; close finished campaigns or raise seckill.max_campaigns.")));
	}
	cache_loaded = true;
}

/*
 * The worker's own settings, whatever ALTER DATABASE or ALTER ROLE set: it
 * runs as a superuser, so nothing a database owner can create may be found
 * through its search_path, and no inherited default may make its commits
 * fail, wait without bound or end the process.
 */
static void
pin_environment(void)
{
	static const char *const pinned[][2] = {
		{"search_path", ""},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_read_only", "off"},
		{"default_transaction_deferrable", "off"},
		{"session_replication_role", "origin"},
		{"exit_on_error", "off"},
		{"transform_null_equals", "off"},
		/* "ok" means committed: nothing may make a commit less durable */
		{"synchronous_commit", "on"},
		/* armed per transaction by store_begin, from seckill.worker_statement_timeout */
		{"statement_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
	};

	for (int i = 0; i < lengthof(pinned); i++)
		SetConfigOption(pinned[i][0], pinned[i][1], PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", psprintf("%d", seckill_worker_lock_timeout),
					PGC_SUSET, PGC_S_OVERRIDE);
}

/* Wait until then, hearing SIGTERM and the postmaster's death meanwhile. */
static void
pause_until(TimestampTz until)
{
	while (GetCurrentTimestamp() < until)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until), 1),
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * A start that could not connect to seckill.database (it does not exist, or
 * refuses connections) ends in a FATAL error and a restart: wait longer
 * before each new attempt, up to a minute, instead of a restart a second.
 */
static void
wait_before_connecting(void)
{
	int			failures = seckill_shared->connect_failures;

	if (failures == 0)
		return;
	pause_until(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											Min(1000 << Min(failures, 6), 60000)));
	ereport(LOG,
			(errmsg("seckill worker tries again to connect to database \"%s\" (attempt %d)",
					seckill_database, failures + 1)));
}

/* After a failed rebuild on leaving database mode: when to try again. */
static TimestampTz leave_retry_at = 0;

/* Errors in a row: each waits longer before the next round, up to a second. */
static int	errors_in_row = 0;

/* The last error logged, so that a persistent one is logged once a minute. */
static char last_error_logged[SK_MESSAGE_LEN];
static TimestampTz last_error_logged_at = 0;
static int	errors_not_logged = 0;

static void
log_round_error(const ErrorData *edata)
{
	TimestampTz now = GetCurrentTimestamp();

	if (strcmp(last_error_logged, edata->message) == 0 &&
		now < TimestampTzPlusMilliseconds(last_error_logged_at, 60 * 1000))
	{
		errors_not_logged++;
		return;
	}
	ereport(LOG,
			(errcode(edata->sqlerrcode),
			 errmsg("seckill worker could not finish a round: %s", edata->message),
			 edata->detail ? errdetail("%s", edata->detail) : 0,
			 errors_not_logged > 0 ?
			 errhint("The same error happened %d more time(s) since it was last logged; it is logged at most once a minute.",
					 errors_not_logged) : 0));
	strlcpy(last_error_logged, edata->message, sizeof(last_error_logged));
	last_error_logged_at = now;
	errors_not_logged = 0;
}

/*
 * The error boundary, reached by longjmp from any ERROR the round did not
 * catch itself (a lock or statement timeout, a cancel, a broken table).
 * Shaped like the recovery of PostgreSQL's own long-lived workers: abort the
 * transaction, release what is held, answer the round's callers with the
 * cause, and carry on.  Anything Redis reserved for them is settled by the
 * replay: a caller learns its purchase's fate from seckill_order().
 */
static void
recover_from_error(void)
{
	ErrorData  *edata;
	char		message[SK_MESSAGE_LEN];

	/* not PG_TRY: the error context stack still points into the frames left */
	error_context_stack = NULL;
	HOLD_INTERRUPTS();
	disable_all_timeouts(false);
	QueryCancelPending = false;
	MemoryContextSwitchTo(TopMemoryContext);
	edata = CopyErrorData();
	FlushErrorState();
	store_abort();
	LWLockReleaseAll();
	ConditionVariableCancelSleep();
	pgstat_report_wait_end();

	sk_redis_abandon();
	sk_release_lock();
	needs_replay = true;
	snprintf(message, sizeof(message), "the seckill worker failed while serving this request: %s",
			 edata->message);
	seckill_fail_taken_slots(message, edata->sqlerrcode);
	log_round_error(edata);
	FreeErrorData(edata);
	MemoryContextReset(round_cxt);
	MemoryContextSwitchTo(round_cxt);
	RESUME_INTERRUPTS();

	/* a persistent cause: requests fail fast meanwhile, the log stays quiet */
	errors_in_row++;
	pause_until(TimestampTzPlusMilliseconds(GetCurrentTimestamp(), Min(10 << Min(errors_in_row, 7), 1000)));
}

void
seckill_worker_main(Datum main_arg)
{
	int		   *slots;
	sigjmp_buf	local_sigjmp_buf;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	/* SIGINT: a cancel, and how lock_timeout and statement_timeout fire */
	pqsignal(SIGINT, StatementCancelHandler);
	BackgroundWorkerUnblockSignals();
	wait_before_connecting();
	seckill_shared->connect_failures++;
	BackgroundWorkerInitializeConnection(seckill_database, NULL, 0);
	seckill_shared->connect_failures = 0;
	pin_environment();

	round_cxt = AllocSetContextCreate(TopMemoryContext, "seckill round", ALLOCSET_DEFAULT_SIZES);
	slots = MemoryContextAlloc(TopMemoryContext, sizeof(int) * MaxBackends);
	/* up to two journal entries per purchase: home shard, and the one lending stock */
	max_settled = 2 * MaxBackends;
	settled = MemoryContextAlloc(TopMemoryContext, sizeof(SkOrder) * max_settled);
	items = MemoryContextAlloc(TopMemoryContext, sizeof(RoundItem) * MaxBackends);
	buys = MemoryContextAlloc(TopMemoryContext, sizeof(RoundItem *) * MaxBackends);

	seckill_fail_taken_slots("the seckill worker restarted while it held this request", 0);
	before_shmem_exit(worker_exit, 0);
	sk_redis_init();
	/* releases by other clusters sharing the Redis wake our lock waiters */
	if (!sk_redlock_enabled())
		sk_redis_subscribe(sk_lock_channel(), sk_lock_released);

	MemoryContextSwitchTo(round_cxt);
	seen_generation = pg_atomic_read_u32(&seckill_shared->install_generation);

	seckill_shared->database_id = MyDatabaseId;
	seckill_shared->worker_latch = MyLatch;
	ereport(LOG, (errmsg("seckill worker started for database \"%s\"", seckill_database)));

	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
		recover_from_error();
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		int			n;
		long		due;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			pin_environment();
			ereport(LOG, (errmsg("seckill worker reloaded its configuration")));
			sk_redis_reload();
		}
		MemoryContextReset(round_cxt);
		MemoryContextSwitchTo(round_cxt);

		if (!cache_loaded)
			(void) sql_current();
		if (needs_replay)
			(void) redis_ready();
		/* Redis is back after sales from PostgreSQL alone: rebuild it before it sells */
		if (seckill_shared->sales_from_database && GetCurrentTimestamp() >= leave_retry_at &&
			redis_ready() && !leave_database_mode())
			leave_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);

		/* the locks' watchdog, also while rounds keep the worker busy */
		if (GetCurrentTimestamp() >= keeper_due ||
			pg_atomic_exchange_u32(&seckill_shared->locks_changed, 0) != 0)
		{
			due = sk_redlock_enabled() || redis_ready() ? sk_lock_keeper_tick() : 1000;
			keeper_due = due < 0 ? DT_NOEND : TimestampTzPlusMilliseconds(GetCurrentTimestamp(), due);
		}

		n = seckill_queue_drain(slots, Min(seckill_batch_size, MaxBackends));
		if (n > 0)
		{
			serve_round(slots, n);
			errors_in_row = 0;
			continue;
		}
		/*
		 * Idle: settle first, then look at the queue again: requests may
		 * have come in meanwhile.
		 */
		if (nsettled > 0 && sk_redis_connected())
		{
			flush_settles();
			continue;
		}
		errors_in_row = 0;
		/* retry Redis, or look for updated SQL, now and then; renew leases when due */
		if (store_sql_outdated)
			(void) sql_current();
		due = -1;
		if (keeper_due != DT_NOEND)
			due = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), keeper_due) + 1;
		if (needs_replay || store_sql_outdated || seckill_shared->sales_from_database)
			due = due < 0 ? 1000 : Min(due, 1000);
		sk_redis_wait_idle(due);
	}
}
