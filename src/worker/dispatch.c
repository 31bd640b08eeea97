/*-------------------------------------------------------------------------
 *
 * dispatch.c
 *		The table of request kinds, and the serving of every request that
 *		is not a purchase: the campaigns' admin work under its lease and
 *		time budget, a round's lock requests in one pipeline, and an ERROR
 *		in that work turned into its reply.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/dispatch.h"

#include "redis/redis.h"
#include "redis/redlock.h"
#include "shared/lock_table.h"
#include "store/store.h"
#include "utils/timestamp.h"
#include "worker/campaign_admin.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/lease.h"
#include "worker/lock_keeper.h"
#include "worker/rebuild.h"
#include "worker/worker_state.h"

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
								 * worker/pacing.c, its lease kept between batches */
	int			budget_ms;		/* the longest purchases should wait for one */
} RequestKind;

/* Answered once every earlier request of its caller's session is settled. */
static void
answer_barrier(const SeckillRequest *request, SeckillReply *reply)
{
	reply->status = SK_OK;
}

/*
 * seckill_epoch_claim(): record this server's epoch in Redis now, also
 * where Redis lost the one it recorded (worker/epoch.c); the timeline.  The
 * claim was made for its caller (sk_dispatch_serve); it holds only while
 * it is answered: one that fails or errors records nothing later.
 */
static void
answer_epoch_claim(const SeckillRequest *request, SeckillReply *reply)
{
	bool		ready;

	sk_journal_replay_now();
	PG_TRY();
	{
		ready = sk_journal_ready();
	}
	PG_CATCH();
	{
		sk_epoch_claim_drop();
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!ready)
	{
		sk_epoch_claim_drop();
		if (sk_epoch_fenced())
			sk_epoch_reply_fenced(reply);
		else
			seckill_reply_error(reply, SK_ERR_REDIS, "seckill_epoch_claim() could not finish: %s",
								sk_redis_error());
		return;
	}
	sk_rebuild_forget_failures();
	reply->status = SK_OK;
	reply->values[0] = strtoll(sk_epoch_arg(), NULL, 10);
}

/*
 * Every request kind but purchases, which a round serves together.  Long
 * work is sliced, so that purchases are served between slices: by its
 * callers, a request per slice (the release of expired orders), or by the
 * worker (the rebuild of a campaign, in worker/rebuild.c).  Both are paced
 * alike (worker/pacing.c).
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
	/* no handler: a round's locks are served together, by sk_dispatch_locks() */
	[SK_REQ_LOCK] = {NULL, LOCK_REDIS, false, false, 10},
	[SK_REQ_UNLOCK] = {NULL, LOCK_REDIS, false, false, 10},
	[SK_REQ_BARRIER] = {answer_barrier, NO_REDIS, false, false, 1},
	/* it checks the epoch and replays the journals itself */
	[SK_REQ_EPOCH_CLAIM] = {answer_epoch_claim, NO_REDIS, false, false, 200},
	/* no handler: a round's joins are served together, by sk_waiting_room_join() */
	[SK_REQ_QUEUE_JOIN] = {NULL, NO_REDIS, false, false, 5},
};

StaticAssertDecl(lengthof(request_kinds) == SK_REQUEST_KINDS,
				 "the worker keeps a budget's log per request kind");

/*
 * A request kept purchases waiting longer than its kind's budget: say so in
 * the log, at most once a minute per kind, with how often it happened.
 */
static void
note_over_budget(const SeckillRequest *request, long took_ms)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz *logged_at = &sk_worker.dispatch.over_budget[request->kind].logged_at;
	int		   *unlogged = &sk_worker.dispatch.over_budget[request->kind].unlogged;

	if (now < TimestampTzPlusMilliseconds(*logged_at, 60 * 1000))
	{
		(*unlogged)++;
		return;
	}
	ereport(LOG,
			(errmsg("seckill worker spent %ld ms on a %s request of campaign " INT64_FORMAT ", over its budget of %d ms",
					took_ms, seckill_request_kind_name(request->kind), request->campaign_id,
					request_kinds[request->kind].budget_ms),
			 errdetail("Purchases waited meanwhile. %d more such request(s) since this was last logged.",
					   *unlogged)));
	*logged_at = now;
	*unlogged = 0;
}

/*
 * After an ERROR in work done for a request: the reply says why, and the
 * worker carries on.
 */
void
sk_dispatch_reply_error(MemoryContext cxt, SeckillReply *reply)
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
		sk_dispatch_reply_error(cxt, reply);
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
void
sk_dispatch_serve(RoundItem *item)
{
	if (sk_rebuild_defer(item))
		return;
	/* dropped if its caller gives up before it is recorded */
	if (item->request.kind == SK_REQ_EPOCH_CLAIM)
		sk_epoch_claim(item->slot, item->seq);
	serve_admin(&item->request, &item->reply);
	if (item->reply.status == SK_PENDING)
		sk_rebuild_wait(item);
	else
		sk_answer(item);
}

/* Is the kind long work, served in slices paced by worker/pacing.c? */
bool
sk_dispatch_paced(SeckillRequestKind kind)
{
	return request_kinds[kind].paced;
}

/*
 * The round's lock requests of one kind (SK_REQ_LOCK or SK_REQ_UNLOCK), all
 * in one pipeline, and their answers.
 */
void
sk_dispatch_locks(RoundItem *items, int nitems, SeckillRequestKind kind)
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
	/* the fence or a lost epoch stops sales and new locks, not their holders' releases */
	if (!journal_ready_for(&request_kinds[kind]) &&
		!(kind == SK_REQ_UNLOCK && (sk_epoch_fenced() || sk_epoch_lost())))
	{
		for (int i = 0; i < n; i++)
			sk_journal_not_ready(replies[i]);
		/* Redis away: the waiters keep their places, to be put back */
		if (kind == SK_REQ_LOCK && !sk_epoch_fenced() && !sk_epoch_lost())
			sk_lock_asked_in_vain(requests, n);
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
			sk_dispatch_reply_error(cxt, replies[0]);
			for (int i = 1; i < n; i++)
				*replies[i] = *replies[0];
		}
		PG_END_TRY();
	}
	/* a caller gone: its lock, its place in line, or the one kept for it */
	for (int i = 0; i < nitems; i++)
		if (items[i].request.kind == kind && !sk_answer(&items[i]) && kind == SK_REQ_LOCK)
			seckill_lock_hand_back(items[i].request.lock.owner);
}
