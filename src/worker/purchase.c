/*-------------------------------------------------------------------------
 *
 * purchase.c
 *		A round's purchases: one pipeline of EVALSHA calls to Redis (the
 *		purchases of each campaign's shard checked and reserved by one call
 *		of lua/buy.lua in their home shard, the short ones lent stock by the
 *		next shards), one group commit of the accepted orders, then the
 *		callers are woken and whatever PostgreSQL refused is given back.
 *		The group commit is staged: it runs while the next round's pipeline
 *		is in Redis (a small one waits for that round's orders, once), or at
 *		once when no round follows.  Every reservation is journaled in Redis
 *		before its commit, so a stop anywhere in either stage is settled by
 *		the replay.  Without Redis, the same group commit sells from
 *		PostgreSQL alone.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/purchase.h"

#include "layout/keys.h"
#include "layout/purchase_scripts.h"
#include "redis/redis.h"
#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "store/store.h"
#include "utils/memutils.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/order_ids.h"

/*
 * The commit stage: the orders Redis accepted in the last round, committed
 * between the sending of the next round's pipeline and the reading of its
 * replies (sk_pipeline_send, sk_pipeline_receive), or by sk_purchase_flush()
 * when no round follows at once.  Its callers' items are copies, as the
 * worker reuses a round's; those PostgreSQL refused are given back once no
 * pipeline is in flight.
 *
 * With them, the round's duplicates: Redis has the user among the buyers,
 * but the reservation that put them there may be staged, or committed a
 * moment ago.  They are answered with the commit stage, with the id of the
 * order the user holds, or busy when PostgreSQL refused that reservation.
 */
typedef struct CommitStage
{
	MemoryContext cxt;			/* of the copies below */
	RoundItem  *items;
	SkOrder    *orders;
	int			n;
	RoundItem  *dups;
	SkOrder    *dup_orders;
	int			ndups;
	bool		committed;
	bool		waited;			/* its commit waited for a round already */
} CommitStage;

static CommitStage stage;

/* A stage of fewer purchases than this waits for the next round's, once. */
#define SK_GROUP_COMMIT_MIN 24

/*
 * A duplicate's answer: the order the user holds; busy when the user holds
 * none, since PostgreSQL refused the reservation that made them a buyer.
 */
static void
reply_duplicate(SeckillReply *reply, const SkOrder *order)
{
	reply->status = order->held != 0 ? SK_DUPLICATE : SK_BUSY;
	reply->order_id = order->held;
}

/*
 * Redis is unreachable and seckill.redis_unavailable = database: sell from
 * PostgreSQL alone.  The same group commit decides, by the CHECK on sold
 * and the unique index, who gets an item; the sale window was checked by
 * the callers.  Redis knows nothing of these orders: it is rebuilt from
 * PostgreSQL before it takes over again.
 */
void
sk_purchase_from_database(RoundItem **items, int n)
{
	SkOrder    *orders = palloc0(sizeof(SkOrder) * n);
	SkOrder    *sell = palloc(sizeof(SkOrder) * n);
	int		   *sell_from = palloc(sizeof(int) * n);
	int			nsell = 0;
	int64	   *ids = palloc(sizeof(int64) * n);
	bool		entering = !seckill_shared->sales_from_database;

	pg_atomic_fetch_add_u64(&seckill_figures->counters.purchases, n);
	sk_order_ids_take(ids, n);
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
	/* what Redis' buyers would refuse, the rest to the group commit (in id order) */
	if (store_refuse_rebuyers(orders, n) == 0)
		store_commit_orders(orders, n, false);
	else
	{
		for (int i = 0; i < n; i++)
			if (orders[i].outcome != SK_DUPLICATE)
			{
				sell_from[nsell] = i;
				sell[nsell++] = orders[i];
			}
		if (nsell > 0)
			store_commit_orders(sell, nsell, false);
		for (int i = 0; i < nsell; i++)
			orders[sell_from[i]] = sell[i];
	}
	store_name_held_orders(orders, n);
	store_commit();
	if (entering)
	{
		seckill_shared->sales_from_database = true;
		ereport(LOG,
				(errmsg("seckill worker sells from PostgreSQL alone while Redis is unreachable: %s",
						sk_redis_error())));
	}
	pg_atomic_fetch_add_u64(&seckill_figures->counters.commits, 1);
	for (int i = 0; i < n; i++)
	{
		items[i]->reply.status = orders[i].outcome;
		if (orders[i].outcome == SK_OK)
			items[i]->reply.order_id = orders[i].id;
		else if (orders[i].outcome == SK_DUPLICATE)
			reply_duplicate(&items[i]->reply, &orders[i]);
		else if (orders[i].outcome == SK_SOLD_OUT && orders[i].qty == 1)
			seckill_campaign_note_sold_out(orders[i].campaign_id);
		sk_answer(items[i]);
	}
}

/*
 * A script refused the purchase: a newer primary sells the campaign.  The
 * worker stops selling; what Redis holds is the newer primary's to settle.
 */
static void
fenced(RoundItem *item)
{
	sk_epoch_fence("a purchase was refused");
	sk_journal_lost();
	sk_epoch_reply_fenced(&item->reply);
}

/*
 * A purchase a script did not serve: its answer, busy or an error; its
 * campaign fenced, or rebuilt after the round.
 */
static void
not_served(RoundItem *item, const SkScriptAnswer *a, int64 *rebuild, int *nrebuild)
{
	SeckillReply *reply = &item->reply;

	switch (a->verdict)
	{
		case SK_VERDICT_MOVING:
			/* its slot is moving between masters of the Redis Cluster: nothing ran */
			reply->status = SK_BUSY;
			break;
		case SK_VERDICT_UNREACHABLE:
			/* its master is down: nothing ran */
			seckill_reply_error(reply, SK_ERR_REDIS, "%s", a->text);
			break;
		case SK_VERDICT_FENCED:
			fenced(item);
			break;
		case SK_VERDICT_NOT_LOADED:
			/* Redis lost the campaign or the shard: rebuilt from PostgreSQL after this round */
			reply->status = SK_BUSY;
			rebuild[(*nrebuild)++] = item->request.campaign_id;
			break;
		default:
			/* failed, or a word that script never says there */
			seckill_reply_error(reply, SK_ERR_REDIS_REFUSED, "%s",
								a->text ? a->text : psprintf("the script answered \"%s\"", a->said));
			break;
	}
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

			if (step >= o->nshards)
			{
				/* every shard is short: sold out, exactly */
				pending[i].item->reply.status = SK_SOLD_OUT;
				done[ndone++] = pending[i];
				continue;
			}
			o->stock_shard = shard;
			sk_take_send(&p, o, shard, sk_epoch_arg());
			pending[nsent++] = pending[i];
		}
		if (nsent == 0)
			break;
		r = sk_pipeline_exec(&p);
		if (r == NULL)
		{
			sk_journal_lost();
			for (int i = 0; i < nsent; i++)
			{
				seckill_reply_error(&pending[i].item->reply, SK_ERR_REDIS, "%s", sk_redis_error());
				done[ndone++] = pending[i];
			}
			break;
		}
		for (int i = 0; i < nsent; i++)
		{
			SkOrder    *o = &pending[i].order;
			SeckillReply *reply = &pending[i].item->reply;
			SkScriptAnswer a;

			sk_take_answer(&r[i], &a);
			if (a.has_stock)
				seckill_campaign_note_stock(o->campaign_id, o->stock_shard, a.stock);
			switch (a.verdict)
			{
				case SK_VERDICT_ANSWER:
					if (a.status == SK_OK)
					{
						accepted[(*naccepted)++] = pending[i];
						continue;
					}
					reply->status = a.status;	/* ended: closed meanwhile */
					break;
				case SK_VERDICT_EMPTY:
					pending[nleft++] = pending[i];
					continue;
				default:
					not_served(pending[i].item, &a, rebuild, nrebuild);
					break;
			}
			done[ndone++] = pending[i];
		}
		npending = nleft;
	}

	/* their place in the home shard goes (or the replay drops it), then they hear */
	if (!sk_journal_needs_replay() && ndone > 0)
	{
		sk_pipeline_init(&p);
		for (int i = 0; i < ndone; i++)
			sk_journal_add_give_back(&p, &done[i].order, done[i].order.home, false);
		if (sk_pipeline_exec(&p) == NULL)
			sk_journal_lost();
	}
	for (int i = 0; i < ndone; i++)
		sk_answer(done[i].item);
}

/*
 * Stage a round's accepted purchases and its duplicates for the group
 * commit, after those of an earlier round whose commit waited for them.
 */
static void
stage_purchases(Purchase *accepted, int n, RoundItem **dups, int nd)
{
	MemoryContext old;
	int			first = stage.n,
				firstd = stage.ndups;

	Assert(!stage.committed);
	if (stage.cxt == NULL)
		stage.cxt = AllocSetContextCreate(TopMemoryContext, "seckill commit stage", ALLOCSET_DEFAULT_SIZES);
	/* the group commit wants them by id; those served by other shards came last */
	qsort(accepted, n, sizeof(Purchase), purchase_cmp);
	old = MemoryContextSwitchTo(stage.cxt);
	if (first == 0 && firstd == 0)
	{
		stage.items = palloc(sizeof(RoundItem) * n);
		stage.orders = palloc(sizeof(SkOrder) * n);
		stage.dups = palloc(sizeof(RoundItem) * nd);
		stage.dup_orders = palloc0(sizeof(SkOrder) * nd);
	}
	else
	{
		stage.items = repalloc(stage.items, sizeof(RoundItem) * (first + n));
		stage.orders = repalloc(stage.orders, sizeof(SkOrder) * (first + n));
		stage.dups = repalloc(stage.dups, sizeof(RoundItem) * (firstd + nd));
		stage.dup_orders = repalloc(stage.dup_orders, sizeof(SkOrder) * (firstd + nd));
	}
	for (int i = 0; i < n; i++)
	{
		stage.items[first + i] = *accepted[i].item;
		stage.orders[first + i] = accepted[i].order;
	}
	for (int i = 0; i < nd; i++)
	{
		stage.dups[firstd + i] = *dups[i];
		memset(&stage.dup_orders[firstd + i], 0, sizeof(SkOrder));
		stage.dup_orders[firstd + i].campaign_id = dups[i]->request.campaign_id;
		stage.dup_orders[firstd + i].outcome = SK_DUPLICATE;
	}
	/* the copies may have moved */
	for (int i = 0; i < first + n; i++)
		stage.orders[i].user_id = stage.items[i].request.user_id;
	for (int i = 0; i < firstd + nd; i++)
		stage.dup_orders[i].user_id = stage.dups[i].request.user_id;
	MemoryContextSwitchTo(old);
	stage.n = first + n;
	stage.ndups = firstd + nd;
}

/*
 * Commit the staged orders in one transaction and answer their callers; the
 * journal entries of the committed ones are dropped by a later pipeline.
 * The commit waits for its WAL flush (and a synchronous standby, where one
 * must confirm it), so that "ok" means durable; it runs while the next
 * round's pipeline is in Redis, and the longer it takes, the more requests
 * the next round gathers: one flush serves them all.  (Callers that flushed
 * the WAL themselves, the worker going on at once, measured more context
 * switches and CPU a purchase: smaller rounds, more flushes, and a
 * wake-up more for each.)  Uses no Redis: it may run while a pipeline is
 * in flight.
 */
static void
commit_stage(void)
{
	if ((stage.n == 0 && stage.ndups == 0) || stage.committed)
		return;
	if (stage.n > 0)
		seckill_crash_if(SK_CRASH_AFTER_RESERVE);
	store_begin("seckill: commit orders");
	if (stage.n > 0)
	{
		store_commit_orders(stage.orders, stage.n, true);
		store_name_held_orders(stage.orders, stage.n);
	}
	store_name_held_orders(stage.dup_orders, stage.ndups);
	store_commit();
	stage.committed = true;
	if (stage.n > 0)
	{
		pg_atomic_fetch_add_u64(&seckill_figures->counters.commits, 1);
		seckill_crash_if(SK_CRASH_AFTER_COMMIT);
	}
	for (int i = 0; i < stage.n; i++)
		if (stage.orders[i].outcome == SK_OK)
			sk_journal_settle(&stage.orders[i]);
	if (sk_redis_in_flight())
		seckill_crash_if(SK_CRASH_OVERLAPPED);
	else if (seckill_crash_point == SK_CRASH_BEFORE_WAKE)
	{
		sk_journal_flush_settles();
		seckill_crash_if(SK_CRASH_BEFORE_WAKE);
	}
	for (int i = 0; i < stage.n; i++)
	{
		stage.items[i].reply.status = stage.orders[i].outcome;
		if (stage.orders[i].outcome == SK_OK)
			stage.items[i].reply.order_id = stage.orders[i].id;
		else if (stage.orders[i].outcome == SK_DUPLICATE)
			reply_duplicate(&stage.items[i].reply, &stage.orders[i]);
		sk_answer(&stage.items[i]);
	}
	for (int i = 0; i < stage.ndups; i++)
	{
		reply_duplicate(&stage.dups[i].reply, &stage.dup_orders[i]);
		sk_answer(&stage.dups[i]);
	}
}

static void
empty_stage(void)
{
	stage.n = 0;
	stage.ndups = 0;
	stage.waited = false;
	stage.committed = false;
	if (stage.cxt)
		MemoryContextReset(stage.cxt);
}

/* What PostgreSQL refused of the committed stage goes back to Redis; the stage empties. */
static void
give_back_refused(void)
{
	if ((stage.n == 0 && stage.ndups == 0) || !stage.committed)
		return;
	/* (the compensations logged with the orders are durable: committed before) */
	sk_journal_give_back(stage.orders, stage.n);
	empty_stage();
}

/*
 * While the next round's pipeline is in Redis: commit the stage, unless it
 * is small and has not waited yet; then it is committed with that round's
 * purchases (a bigger group commit costs less a purchase: one transaction,
 * one campaign row update, one WAL flush for more of them).
 */
static void
commit_stage_overlapped(void)
{
	if (!stage.waited && stage.n + stage.ndups < SK_GROUP_COMMIT_MIN)
	{
		stage.waited = true;
		return;
	}
	commit_stage();
}

bool
sk_purchase_staged(void)
{
	return stage.n > 0 || stage.ndups > 0;
}

void
sk_purchase_flush(void)
{
	commit_stage();
	give_back_refused();
}

/*
 * After an error broke a round off: the staged callers were answered with
 * it, and the replay settles what Redis reserved for them.
 */
void
sk_purchase_forget(void)
{
	/* their journal entries stay: the replay settles them */
	empty_stage();
}

void
sk_purchase_round(RoundItem **items, int n, int64 *rebuild, int *nrebuild)
{
	SkPipeline	p;
	SkFlight   *flight;
	SkReply    *replies;
	Purchase   *all = palloc0(sizeof(Purchase) * n);
	Purchase   *accepted = palloc(sizeof(Purchase) * n);
	Purchase   *pending = palloc(sizeof(Purchase) * n);
	RoundItem **dups = palloc(sizeof(RoundItem *) * n);
	int			naccepted = 0,
				npending = 0,
				nd = 0;
	int64	   *ids;
	SkBuyCalls *calls = sk_buy_calls_new(n);

	*nrebuild = 0;
	pg_atomic_fetch_add_u64(&seckill_figures->counters.purchases, n);
	ids = palloc(sizeof(int64) * n);
	sk_order_ids_take(ids, n);

	sk_pipeline_init(&p);
	(void) sk_journal_add_settles(&p);
	for (int i = 0; i < n; i++)
	{
		SeckillRequest *req = &items[i]->request;
		SkOrder    *o = &all[i].order;
		SeckillCampaign *c = seckill_campaign_find(req->campaign_id);

		all[i].item = items[i];
		o->id = ids[i];
		o->campaign_id = req->campaign_id;
		o->user_id = req->user_id;
		o->qty = req->qty;
		o->nshards = Max(req->shards, 1);
		o->home = o->stock_shard = sk_keys_home_shard(req->user_id, o->nshards);
		sk_buy_calls_add(calls, req, o, c ? c->row.created_at : 0, sk_epoch_arg());
	}
	sk_buy_calls_send(calls, &p);
	flight = sk_pipeline_send(&p);
	/* while Redis runs this round's purchases (or failed already) */
	commit_stage_overlapped();
	replies = sk_pipeline_receive(flight);
	if (replies == NULL)
	{
		give_back_refused();
		/* Some reservations may have been made: the replay gives them back. */
		sk_journal_lost();
		sk_fail_all(items, n, SK_ERR_REDIS,
				 psprintf("%s; no purchase of this request was made", sk_redis_error()));
		return;
	}

	for (int i = 0; i < n; i++)
	{
		SeckillReply *reply = &items[i]->reply;
		SkOrder    *o = &all[i].order;
		SkScriptAnswer a;

		sk_buy_answer(calls, replies, i, &a);
		if (a.unaccounted)
			sk_journal_lost();	/* whatever it reserved is settled by the replay */
		switch (a.verdict)
		{
			case SK_VERDICT_ANSWER:
				reply->status = a.status;
				if (a.status == SK_OK || a.status == SK_SOLD_OUT)
					seckill_campaign_note_stock(o->campaign_id, o->home, a.stock);
				if (a.status == SK_OK)
					accepted[naccepted++] = all[i];
				else if (a.status == SK_DUPLICATE)
					dups[nd++] = items[i];
				else
					sk_answer(items[i]);
				continue;
			case SK_VERDICT_NEED_STOCK:
				seckill_campaign_note_stock(o->campaign_id, o->home, a.stock);
				pending[npending++] = all[i];
				continue;
			default:
				not_served(items[i], &a, rebuild, nrebuild);
				break;
		}
		sk_answer(items[i]);
	}
	if (npending > 0)
		take_elsewhere(pending, npending, accepted, &naccepted, rebuild, nrebuild);

	/* after this round's replies, so that the stock it notes is the newest */
	give_back_refused();
	if (naccepted > 0 || nd > 0)
		stage_purchases(accepted, naccepted, dups, nd);
	/* a replay must find them committed: the stage waits for no next round then */
	if (sk_journal_needs_replay() || seckill_crash_point == SK_CRASH_BEFORE_WAKE)
		sk_purchase_flush();
}
