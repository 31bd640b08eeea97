/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The seckill background worker: drains the request queue in rounds.
 *
 * One round serves every pending request: all purchases go to Redis as one
 * pipeline of EVALSHA calls, all accepted orders are committed in one
 * transaction, then the callers are woken.  While purchases keep coming,
 * rounds run back to back and each one's transaction commits while the next
 * one's pipeline is in Redis (worker/purchase.c).  The journal entries of the
 * committed orders are dropped by a later round's pipeline; reservations
 * PostgreSQL refused are given back once the pipeline in flight is read.
 * Admin requests follow, one at a time, after the round's orders are
 * committed.
 *
 *-------------------------------------------------------------------------
 */
#include "seckill.h"

#include <setjmp.h>

#include "access/xact.h"
#include "layout/keys.h"
#include "layout/scripts.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "redis/pubsub.h"
#include "redis/redis.h"
#include "redis/redlock.h"
#include "shared/call.h"
#include "shared/campaign_cache.h"
#include "shared/lock_table.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "store/store.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timeout.h"
#include "worker/audit.h"
#include "worker/campaign_admin.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/lease.h"
#include "worker/lock_keeper.h"
#include "worker/purchase.h"
#include "worker/rebuild.h"

PGDLLEXPORT void seckill_worker_main(Datum main_arg);

static MemoryContext round_cxt = NULL;

static void serve_admin(const SeckillRequest *request, SeckillReply *reply);

/* When the locks' watchdog is next due (lock_keeper.c). */
static TimestampTz keeper_due = 0;

static void
worker_exit(int code, Datum arg)
{
	seckill_shared->worker_latch = NULL;
	seckill_fail_taken_slots("the seckill worker stopped while it held this request", 0);
}

/*
 * Redis is back after sales from PostgreSQL alone: every preheated campaign
 * is rebuilt from PostgreSQL, in steps between rounds, before Redis sells
 * it again; its purchases are answered busy meanwhile.  True while Redis may
 * sell the campaigns not being rebuilt: all rebuilds so far succeeded.
 * After a failure, sales go on from PostgreSQL alone, and all campaigns are
 * rebuilt again a second later.
 */
static bool leaving_database_mode = false;
static uint64 failures_before_leaving;
static TimestampTz leave_retry_at = 0;

static bool
leave_database_mode(void)
{
	List	   *rows;
	ListCell   *lc;

	if (!leaving_database_mode)
	{
		if (GetCurrentTimestamp() < leave_retry_at)
			return false;
		rows = store_preheated_campaigns();
		foreach(lc, rows)
			sk_rebuild_request(((SkCampaignRow *) lfirst(lc))->id);
		failures_before_leaving = sk_rebuild_failures();
		leaving_database_mode = true;
		ereport(LOG,
				(errmsg("seckill worker rebuilds %d campaign(s) from PostgreSQL before Redis sells again",
						list_length(rows))));
	}
	if (sk_rebuild_failures() != failures_before_leaving)
	{
		/* logged by the rebuild */
		leaving_database_mode = false;
		leave_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		return false;
	}
	if (sk_rebuild_pending())
		return true;
	leaving_database_mode = false;
	store_begin("seckill: leave database mode");
	store_set_database_mode(false);
	store_commit();
	seckill_shared->sales_from_database = false;
	ereport(LOG, (errmsg("seckill worker rebuilt Redis from PostgreSQL: sales go through Redis again")));
	return true;
}

/* Where the work of a request kind needs Redis. */
typedef enum KindRedis
{
	NO_REDIS,
	MAIN_REDIS,
	LOCK_REDIS					/* the main Redis, unless the locks live on Redlock nodes */
} KindRedis;

typedef struct RequestKind
{
	void		(*handler) (const SeckillRequest *request, SeckillReply *reply);
	KindRedis	redis;
	bool		leased;			/* done under the campaign's lease */
	bool		paced;			/* a batch of long work its caller sends batch by
								 * batch (values[2]: more to come): paced by
								 * long_work_at, its lease kept between batches */
	int			budget_ms;		/* the longest purchases should wait for one */
} RequestKind;

/* Answered once every earlier request of its caller's session is settled. */
static void
answer_barrier(const SeckillRequest *request, SeckillReply *reply)
{
	reply->status = SK_OK;
}

/*
 * Every request kind but purchases, which a round serves together.  Long
 * work is sliced, so that purchases are served between slices: by its
 * callers, a request per slice (the release of expired orders), or by the
 * worker (the rebuild of a campaign, in worker/rebuild.c).  Both are paced
 * alike (see long_work_at).
 */
static const RequestKind request_kinds[] = {
	/* the rebuild takes the lease itself, for all its steps */
	[SK_REQ_PREHEAT] = {sk_admin_preheat, MAIN_REDIS, false, false, 5},
	[SK_REQ_CLOSE] = {sk_admin_close, MAIN_REDIS, true, false, 20},
	[SK_REQ_STATUS] = {sk_admin_status, MAIN_REDIS, false, false, 5},
	/* it counts the campaign's buyers */
	[SK_REQ_RECONCILE] = {sk_admin_reconcile, MAIN_REDIS, true, false, 200},
	[SK_REQ_CANCEL] = {sk_admin_cancel, MAIN_REDIS, false, false, 10},
	/* a batch sized to about 2 ms */
	[SK_REQ_RELEASE] = {sk_admin_release, MAIN_REDIS, true, true, 20},
	[SK_REQ_RESTOCK] = {sk_admin_restock, MAIN_REDIS, true, false, 20},
	[SK_REQ_LIMITS] = {sk_admin_limits, MAIN_REDIS, true, false, 20},
	/* no handler: a round's locks are served together, by serve_locks() */
	[SK_REQ_LOCK] = {NULL, LOCK_REDIS, false, false, 10},
	[SK_REQ_UNLOCK] = {NULL, LOCK_REDIS, false, false, 10},
	[SK_REQ_BARRIER] = {answer_barrier, NO_REDIS, false, false, 1},
};

/* When each kind last went over its budget unlogged, and how often since. */
static struct
{
	TimestampTz logged_at;
	int			unlogged;
}			over_budget[lengthof(request_kinds)];

/*
 * A request kept purchases waiting longer than its kind's budget: say so in
 * the log, at most once a minute per kind, with how often it happened.
 */
static void
note_over_budget(const SeckillRequest *request, long took_ms)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now < TimestampTzPlusMilliseconds(over_budget[request->kind].logged_at, 60 * 1000))
	{
		over_budget[request->kind].unlogged++;
		return;
	}
	ereport(LOG,
			(errmsg("seckill worker spent %ld ms on a %s request of campaign " INT64_FORMAT ", over its budget of %d ms",
					took_ms, seckill_request_kind_name(request->kind), request->campaign_id,
					request_kinds[request->kind].budget_ms),
			 errdetail("Purchases waited meanwhile. %d more such request(s) since this was last logged.",
					   over_budget[request->kind].unlogged)));
	over_budget[request->kind].logged_at = now;
	over_budget[request->kind].unlogged = 0;
}

/*
 * After an ERROR in work done for a request: the reply says why, and the
 * worker carries on.
 */
static void
reply_with_error(MemoryContext cxt, SeckillReply *reply)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	store_abort();
	MemoryContextSwitchTo(cxt);
	/* a connection left mid-request cannot give the lease back */
	sk_redis_abandon();
	sk_redlock_abandon();
	sk_lease_give_if_held();
	seckill_reply_error(reply, SK_ERR_INVALID, "%s", edata->message);
	reply->sqlerrcode = edata->sqlerrcode;
}

/* The journals are replayed, when the kind's work goes through the main Redis. */
static bool
journal_ready_for(const RequestKind *kind)
{
	if (kind->redis == NO_REDIS || (kind->redis == LOCK_REDIS && sk_redlock_enabled()))
		return true;
	return sk_journal_ready();
}

/*
 * Serve one request that is not a purchase.  Its errors (SPI, constraints,
 * a full campaign cache, a lock timeout) become its reply, and the worker
 * carries on.
 */
static void
serve_admin(const SeckillRequest *request, SeckillReply *reply)
{
	const RequestKind *kind = &request_kinds[request->kind];
	MemoryContext cxt = CurrentMemoryContext;
	TimestampTz begun = GetCurrentTimestamp();
	long		took_ms;

	Assert(request->kind < lengthof(request_kinds) && kind->handler != NULL);
	if (!journal_ready_for(kind))
	{
		sk_journal_not_ready(reply);
		return;
	}
	PG_TRY();
	{
		if (!kind->leased)
			kind->handler(request, reply);
		else if ((kind->paced ? sk_lease_resume : sk_lease_take) (request->campaign_id, reply) != NULL)
		{
			kind->handler(request, reply);
			/* more batches to come: they resume this lease */
			if (kind->paced && reply->status == SK_OK && reply->values[2] != 0)
				sk_lease_keep_for_next();
			else
				sk_lease_give();
		}
	}
	PG_CATCH();
	{
		reply_with_error(cxt, reply);
	}
	PG_END_TRY();
	took_ms = TimestampDifferenceMilliseconds(begun, GetCurrentTimestamp());
	if (took_ms > kind->budget_ms)
		note_over_budget(request, took_ms);
}

/*
 * Serve a request that is not a purchase and answer it, unless it waits for
 * the rebuild of its campaign.
 */
static void
serve_item(RoundItem *item)
{
	if (sk_rebuild_defer(item))
		return;
	serve_admin(&item->request, &item->reply);
	if (item->reply.status == SK_PENDING)
		sk_rebuild_wait(item);
	else
		sk_answer(item);
}

/*
 * While purchases keep coming, long work (rebuild steps, release batches)
 * takes at most a fifth of the worker's time: after a step or a batch, four
 * times its length go to rounds before the next.  Paced requests that come
 * before then wait in held_slices, their callers still waiting.  The queue
 * is empty for a moment after each round, while its callers send their next
 * purchases: only when no purchase came since the last step or batch does
 * long work go on at once.
 */
static TimestampTz long_work_at = 0;
static bool purchases_since_long_work = false;
static List *held_slices = NIL;

static void
pace_long_work(TimestampTz begun)
{
	TimestampTz now = GetCurrentTimestamp();

	long_work_at = now + 4 * (now - begun);
	purchases_since_long_work = false;
}

/* Milliseconds until long work may go on: 0 when now. */
static long
long_work_wait(void)
{
	if (!purchases_since_long_work)
		return 0;
	return TimestampDifferenceMilliseconds(GetCurrentTimestamp(), long_work_at);
}

static void
serve_slice(RoundItem *item)
{
	TimestampTz begun = GetCurrentTimestamp();

	serve_item(item);
	pace_long_work(begun);
}

/* Serve a request that is not a purchase, unless it is a slice to hold. */
static void
serve_or_hold(RoundItem *item)
{
	MemoryContext old;

	if (!request_kinds[item->request.kind].paced)
		serve_item(item);
	else if (long_work_wait() == 0)
		serve_slice(item);
	else
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		held_slices = lappend(held_slices, memcpy(palloc(sizeof(RoundItem)), item, sizeof(RoundItem)));
		MemoryContextSwitchTo(old);
	}
}

/* The oldest held slice, served now: its turn has come. */
static void
serve_held_slice(void)
{
	RoundItem  *item = linitial(held_slices);

	held_slices = list_delete_first(held_slices);
	/* as in a round: after the purchases served before it, settled */
	if (sk_journal_has_settles() && sk_redis_connected())
		sk_journal_flush_settles();
	serve_slice(item);
	pfree(item);
}

/* After an error that failed every taken slot: the held ones were among them. */
static void
forget_held_slices(void)
{
	list_free_deep(held_slices);
	held_slices = NIL;
}

/*
 * A step of the rebuild under way; then the requests that waited for it, if
 * it ended, are served.
 */
static void
step_rebuilds(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *served = NIL;
	ListCell   *lc;
	TimestampTz begun = GetCurrentTimestamp();

	PG_TRY();
	{
		served = sk_rebuild_step();
	}
	PG_CATCH();
	{
		SeckillReply reply = {0};

		reply_with_error(cxt, &reply);
		served = sk_rebuild_failed(&reply);
	}
	PG_END_TRY();
	foreach(lc, served)
		serve_item(lfirst(lc));
	list_free_deep(served);
	pace_long_work(begun);
}

/*
 * The round's lock requests of one kind (SK_REQ_LOCK or SK_REQ_UNLOCK), all
 * in one pipeline, and their answers.
 */
static void
serve_locks(RoundItem *items, int nitems, SeckillRequestKind kind)
{
	const SeckillRequest **requests = palloc(sizeof(SeckillRequest *) * nitems);
	SeckillReply **replies = palloc(sizeof(SeckillReply *) * nitems);
	MemoryContext cxt = CurrentMemoryContext;
	int			n = 0;

	for (int i = 0; i < nitems; i++)
		if (items[i].request.kind == kind)
		{
			requests[n] = &items[i].request;
			replies[n++] = &items[i].reply;
		}
	if (n == 0)
		return;
	if (!journal_ready_for(&request_kinds[kind]))
	{
		for (int i = 0; i < n; i++)
			sk_journal_not_ready(replies[i]);
	}
	else
	{
		PG_TRY();
		{
			if (kind == SK_REQ_LOCK)
				sk_lock_acquire_many(requests, replies, n);
			else
				sk_lock_release_many(requests, replies, n);
		}
		PG_CATCH();
		{
			reply_with_error(cxt, replies[0]);
			for (int i = 1; i < n; i++)
				*replies[i] = *replies[0];
		}
		PG_END_TRY();
	}
	for (int i = 0; i < nitems; i++)
		if (items[i].request.kind == kind &&
			!sk_answer(&items[i]) && kind == SK_REQ_LOCK && items[i].reply.status == SK_OK)
			seckill_lock_hand_back(items[i].request.lock.owner);
}

/* Rounds served back to back, each one's commit beside the next one's Redis stage. */
#define OVERLAPPED_ROUNDS 16

/* A round's requests: allocated once, so that nothing can fail between drain and take. */
static int *slots = NULL;
static RoundItem *items = NULL;
static RoundItem **buys = NULL;

static void load_campaign_cache(void);

/* The install_generation the campaign cache was loaded for. */
static uint32 cache_generation = 0;
static bool cache_loaded = false;

/*
 * The round's purchases: through Redis once it is connected, its journals
 * replayed and, after sales from PostgreSQL alone, rebuilt; else from
 * PostgreSQL alone or with an error, as seckill.redis_unavailable says.
 * Those of campaigns being rebuilt are answered busy; campaigns Redis lost
 * are rebuilt after the round.
 */
static void
serve_purchases(RoundItem **buys, int n)
{
	int64	   *rebuild = palloc(sizeof(int64) * n);
	int			nrebuild = 0;
	int			nserved = 0;
	bool		through_redis;

	/* a replay, and sales without Redis, find the last round's orders committed */
	if (sk_journal_needs_replay() || seckill_shared->sales_from_database)
		sk_purchase_flush();
	/* first, as it may queue rebuilds */
	through_redis = sk_journal_ready() &&
		(!seckill_shared->sales_from_database || leave_database_mode());
	for (int i = 0; i < n; i++)
	{
		const char *why;

		if (sk_rebuild_busy(buys[i]->request.campaign_id))
		{
			buys[i]->reply.status = SK_BUSY;
			sk_answer(buys[i]);
		}
		else if (through_redis && sk_journal_blocked(buys[i]->request.campaign_id, &why))
		{
			seckill_reply_error(&buys[i]->reply, SK_ERR_REDIS_REFUSED,
								"the journal of this campaign cannot be replayed: %s", why);
			sk_answer(buys[i]);
		}
		else
			buys[nserved++] = buys[i];
	}
	if (nserved == 0)
		return;
	if (!through_redis)
	{
		sk_purchase_flush();
		/* a primary left behind by a failover never sells, not even from PostgreSQL */
		if (sk_epoch_fenced())
		{
			SeckillReply fenced = {0};

			sk_epoch_reply_fenced(&fenced);
			sk_fail_all(buys, nserved, fenced.status, fenced.message);
		}
		else if (seckill_redis_unavailable == SK_UNAVAILABLE_DATABASE || seckill_shared->sales_from_database)
		{
			/*
			 * Campaigns rebuilt so far while leaving database mode go stale
			 * again: the next time Redis is back, all are rebuilt anew.
			 */
			leaving_database_mode = false;
			sk_purchase_from_database(buys, nserved);
		}
		else
			sk_fail_all(buys, nserved, SK_ERR_REDIS, sk_redis_error());
		return;
	}
	sk_purchase_round(buys, nserved, rebuild, &nrebuild);
	for (int i = 0; i < nrebuild; i++)
		sk_rebuild_lost(rebuild[i]);
}

/* A promotion marked the preheated campaigns stale: rebuild them. */
static void
rebuild_stale_campaigns(void)
{
	const int64 *ids;
	int			n = sk_epoch_stale_campaigns(&ids);

	for (int i = 0; i < n; i++)
		sk_rebuild_lost(ids[i]);
}

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
	sk_journal_lost();
	ereport(LOG, (errmsg("seckill worker found its SQL objects updated: serving again")));
	return true;
}

static void
serve_round(int nitems, int nbuys)
{
	pg_atomic_fetch_add_u64(&seckill_figures->counters.rounds, 1);
	if (!sql_current())
	{
		for (int i = 0; i < nitems; i++)
		{
			seckill_reply_error(&items[i].reply, SK_ERR_INVALID,
						   "the seckill extension in database \"%s\" is older than its library (version " SECKILL_SQL_VERSION "): run ALTER EXTENSION seckill UPDATE there",
						   seckill_database);
			items[i].reply.sqlerrcode = ERRCODE_SECKILL_UNAVAILABLE;
			sk_answer(&items[i]);
		}
		return;
	}
	if (nbuys > 0)
	{
		serve_purchases(buys, nbuys);
		purchases_since_long_work = true;
	}

	/* Admin requests come after the round's purchases, committed and settled. */
	if (nitems > nbuys)
		sk_purchase_flush();
	if (nitems > nbuys && sk_redis_connected())
		sk_journal_flush_settles();
	/* releases first: a lock given back in this round can be taken in it */
	serve_locks(items, nitems, SK_REQ_UNLOCK);
	serve_locks(items, nitems, SK_REQ_LOCK);
	for (int i = 0; i < nitems; i++)
		if (items[i].request.kind != SK_REQ_BUY && items[i].request.kind != SK_REQ_LOCK &&
			items[i].request.kind != SK_REQ_UNLOCK)
			serve_or_hold(&items[i]);
}

/*
 * Take the queued requests of a round into items (the purchases also into
 * buys): the number taken, and *nbuys.  Drained and taken with interrupts
 * held, so that a cancel or SIGTERM never leaves a request out of the queue
 * and not taken: every taken one is answered, or failed by the error
 * boundary or the exit.
 */
static int
take_round(int *nbuys)
{
	int			n,
				nitems = 0;

	*nbuys = 0;
	HOLD_INTERRUPTS();
	n = seckill_queue_drain(slots, Min(seckill_batch_size, seckill_slot_count()));
	for (int i = 0; i < n; i++)
	{
		RoundItem  *item = &items[nitems];

		memset(item, 0, sizeof(RoundItem));
		if (!seckill_slot_take(slots[i], &item->request, &item->seq))
			continue;
		item->slot = slots[i];
		nitems++;
		if (item->request.kind == SK_REQ_BUY)
			buys[(*nbuys)++] = item;
	}
	RESUME_INTERRUPTS();
	return nitems;
}

/*
 * Serve a drained round, then, while purchases keep coming, the next ones
 * back to back: each round's orders commit while the next round's pipeline
 * is in Redis.  What comes between rounds (settings, replays, leases, long
 * work) waits at most OVERLAPPED_ROUNDS rounds.
 */
static void
serve_rounds(int nitems, int nbuys)
{
	serve_round(nitems, nbuys);
	for (int more = 0; more < OVERLAPPED_ROUNDS && sk_purchase_staged() &&
		 !ConfigReloadPending && GetCurrentTimestamp() < keeper_due &&
		 (nitems = take_round(&nbuys)) > 0; more++)
	{
		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(round_cxt);
		serve_round(nitems, nbuys);
	}
	sk_purchase_flush();
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
	/* remote_apply, where set, is more durable still: kept (read before the first pin) */
	static const char *commit_level = NULL;
	static const char *const pinned[][2] = {
		{"search_path", ""},
		{"default_transaction_isolation", "read committed"},
		{"default_transaction_read_only", "off"},
		{"default_transaction_deferrable", "off"},
		{"session_replication_role", "origin"},
		{"exit_on_error", "off"},
		{"transform_null_equals", "off"},
		/* armed per transaction by store_begin, from seckill.worker_statement_timeout */
		{"statement_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
	};

	for (int i = 0; i < lengthof(pinned); i++)
		SetConfigOption(pinned[i][0], pinned[i][1], PGC_SUSET, PGC_S_OVERRIDE);
	/* "ok" means committed: nothing may make a commit less durable */
	if (commit_level == NULL)
		commit_level = strcmp(GetConfigOption("synchronous_commit", false, false), "remote_apply") == 0 ?
			"remote_apply" : "on";
	SetConfigOption("synchronous_commit", commit_level, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", psprintf("%d", seckill_worker_lock_timeout),
					PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Wait for requests, at most timeout_ms (-1: no limit).  Callers set the
 * worker's latch only while it says it waits (call.c): it says so, then
 * looks at the queue once more.
 */
static void
wait_for_requests(long timeout_ms)
{
	pg_atomic_write_u32(&seckill_shared->worker_idle, 1);
	pg_memory_barrier();
	if (seckill_queue_empty())
		sk_redis_wait_idle(timeout_ms);
	pg_atomic_write_u32(&seckill_shared->worker_idle, 0);
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
	sk_redlock_abandon();
	sk_rebuild_abort();
	sk_lease_give_if_held();
	sk_journal_lost();
	sk_purchase_forget();
	pg_atomic_write_u32(&seckill_shared->worker_idle, 0);
	forget_held_slices();
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
	slots = MemoryContextAlloc(TopMemoryContext, sizeof(int) * seckill_slot_count());
	sk_journal_init();
	items = MemoryContextAlloc(TopMemoryContext, sizeof(RoundItem) * seckill_slot_count());
	buys = MemoryContextAlloc(TopMemoryContext, sizeof(RoundItem *) * seckill_slot_count());

	seckill_fail_taken_slots("the seckill worker restarted while it held this request", 0);
	/* a predecessor's orders are on disk before anyone is told of them again */
	seckill_orders_flush();
	pg_atomic_write_u64(&seckill_shared->orders_lsn, InvalidXLogRecPtr);
	before_shmem_exit(worker_exit, 0);
	sk_redis_init(sk_script_sources, SK_NSCRIPTS, sk_prefix_key("epoch"));
	/* releases by other clusters sharing the Redis wake our lock waiters */
	if (!sk_redlock_enabled())
		sk_pubsub_subscribe(sk_lock_channel(), sk_lock_released);

	MemoryContextSwitchTo(round_cxt);

	seckill_shared->database_id = MyDatabaseId;
	seckill_shared->worker_pid = MyProcPid;
	seckill_shared->fenced = false;	/* until its first Redis connection says otherwise */
	seckill_shared->worker_latch = MyLatch;
	ereport(LOG, (errmsg("seckill worker started for database \"%s\"", seckill_database)));

	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
		recover_from_error();
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		int			n,
					nbuys;
		long		due;
		long		kept_due;

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
		sk_redis_watch();
		if (sk_journal_needs_replay())
			(void) sk_journal_ready();
		rebuild_stale_campaigns();
		/* Redis is back after sales from PostgreSQL alone: rebuild it before it sells */
		if (seckill_shared->sales_from_database && sk_journal_ready())
			(void) leave_database_mode();

		/* the locks' watchdog, also while rounds keep the worker busy */
		if (GetCurrentTimestamp() >= keeper_due ||
			pg_atomic_exchange_u32(&seckill_lock_table->changed, 0) != 0)
		{
			due = sk_redlock_enabled() || sk_journal_ready() ? sk_lock_keeper_tick() : 1000;
			keeper_due = due < 0 ? DT_NOEND : TimestampTzPlusMilliseconds(GetCurrentTimestamp(), due);
		}
		/* a lease kept for a caller's next batch, and the caller stopped asking */
		kept_due = sk_lease_give_kept_if_idle();

		/* the replays Redis refused; Redis held against PostgreSQL */
		if (sk_journal_retry_wait() == 0)
			sk_journal_retry_blocked();
		if (sk_audit_wait() == 0)
			sk_audit();

		n = take_round(&nbuys);
		if (n > 0)
		{
			serve_rounds(n, nbuys);
			errors_in_row = 0;
			if (long_work_wait() > 0)
				continue;
			if (held_slices != NIL)
				serve_held_slice();
			else if (sk_rebuild_pending())
				step_rebuilds();
			continue;
		}
		if (held_slices != NIL || sk_rebuild_pending())
		{
			/* the next purchases are on their way: wait for them, or the turn */
			due = long_work_wait();
			if (due > 0)
				wait_for_requests(due);
			else if (held_slices != NIL)
				serve_held_slice();
			else
				step_rebuilds();
			continue;
		}
		/*
		 * Idle: settle first, then look at the queue again: requests may
		 * have come in meanwhile.
		 */
		if (sk_journal_has_settles() && sk_redis_connected())
		{
			sk_journal_flush_settles();
			continue;
		}
		errors_in_row = 0;
		/* retry Redis, or look for updated SQL, now and then; renew leases when due */
		if (store_sql_outdated)
			(void) sql_current();
		due = -1;
		if (keeper_due != DT_NOEND)
			due = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), keeper_due) + 1;
		if (sk_journal_needs_replay() || store_sql_outdated || seckill_shared->sales_from_database)
			due = due < 0 ? 1000 : Min(due, 1000);
		if (kept_due >= 0)
			due = due < 0 ? kept_due + 1 : Min(due, kept_due + 1);
		if (sk_audit_wait() >= 0)
			due = due < 0 ? sk_audit_wait() + 1 : Min(due, sk_audit_wait() + 1);
		if (sk_journal_retry_wait() >= 0)
			due = due < 0 ? sk_journal_retry_wait() + 1 : Min(due, sk_journal_retry_wait() + 1);
		wait_for_requests(due);
	}
}
