/*-------------------------------------------------------------------------
 *
 * pacing.c
 *		Long work paced between the worker's rounds: the rebuild's steps
 *		and the batches of a paced request kind (worker/dispatch.c).
 *
 * While purchases keep coming, long work (rebuild steps, release batches)
 * takes at most a fifth of the worker's time: after a step or a batch, four
 * times its length go to rounds before the next.  Paced requests that come
 * before then wait in held_slices, their callers still waiting.  The queue
 * is empty for a moment after each round, while its callers send their next
 * purchases: only when no purchase came since the last step or batch does
 * long work go on at once.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/pacing.h"

#include "redis/redis.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "worker/dispatch.h"
#include "worker/journal.h"
#include "worker/rebuild.h"
#include "worker/worker_state.h"

/* Purchases were served: long work waits for its turn. */
void
sk_pacing_note_purchases(void)
{
	sk_worker.pacing.purchases_since_long_work = true;
}

static void
pace_long_work(TimestampTz begun)
{
	TimestampTz now = GetCurrentTimestamp();

	sk_worker.pacing.long_work_at = now + 4 * (now - begun);
	sk_worker.pacing.purchases_since_long_work = false;
}

/* Milliseconds until long work may go on: 0 when now. */
long
sk_pacing_wait(void)
{
	if (!sk_worker.pacing.purchases_since_long_work)
		return 0;
	return TimestampDifferenceMilliseconds(GetCurrentTimestamp(), sk_worker.pacing.long_work_at);
}

static void
serve_slice(RoundItem *item)
{
	TimestampTz begun = GetCurrentTimestamp();

	sk_dispatch_serve(item);
	pace_long_work(begun);
}

/* Serve a request that is not a purchase, unless it is a slice to hold. */
void
sk_pacing_serve_or_hold(RoundItem *item)
{
	MemoryContext old;

	if (!sk_dispatch_paced(item->request.kind))
		sk_dispatch_serve(item);
	else if (sk_pacing_wait() == 0)
		serve_slice(item);
	else
	{
		old = MemoryContextSwitchTo(TopMemoryContext);
		sk_worker.pacing.held_slices = lappend(sk_worker.pacing.held_slices,
											   memcpy(palloc(sizeof(RoundItem)), item, sizeof(RoundItem)));
		MemoryContextSwitchTo(old);
	}
}

/* The oldest held slice, served now: its turn has come. */
static void
serve_held_slice(void)
{
	RoundItem  *item = linitial(sk_worker.pacing.held_slices);

	sk_worker.pacing.held_slices = list_delete_first(sk_worker.pacing.held_slices);
	/* as in a round: after the purchases served before it, settled */
	if (sk_journal_has_settles() && sk_redis_connected())
		sk_journal_flush_settles();
	serve_slice(item);
	pfree(item);
}

/* After an error that failed every taken slot: the held ones were among them. */
void
sk_pacing_forget(void)
{
	list_free_deep(sk_worker.pacing.held_slices);
	sk_worker.pacing.held_slices = NIL;
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

		sk_dispatch_reply_error(cxt, &reply);
		served = sk_rebuild_failed(&reply);
	}
	PG_END_TRY();
	foreach(lc, served)
		sk_dispatch_serve(lfirst(lc));
	list_free_deep(served);
	pace_long_work(begun);
}

/* Long work is waiting: held slices, or a rebuild under way. */
bool
sk_pacing_pending(void)
{
	return sk_worker.pacing.held_slices != NIL || sk_rebuild_pending();
}

/* The next slice of long work, its turn come: the oldest held one first. */
void
sk_pacing_step(void)
{
	if (sk_worker.pacing.held_slices != NIL)
		serve_held_slice();
	else if (sk_rebuild_pending())
		step_rebuilds();
}
