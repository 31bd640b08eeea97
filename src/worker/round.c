/*-------------------------------------------------------------------------
 *
 * round.c
 *		The worker's rounds.  A round takes every pending request from the
 *		queue; its purchases go through Redis as one value (a Round,
 *		worker/purchase.h) that this file moves through its stages, in
 *		this order:
 *
 *		gather		the purchases are taken from the queue, then copied
 *					into a free round
 *		reserve		their pipeline is sent to Redis ...
 *		commit		... and meanwhile the staged rounds before it are
 *					committed in one transaction, their journal entries
 *					settled and their callers answered
 *		receive		Redis' replies are read: each purchase is answered, or
 *					staged for the next round's commit
 *		give back	what PostgreSQL refused of the committed rounds goes
 *					back to Redis, and they are free again
 *
 * While purchases keep coming, rounds run back to back, so that each one's
 * commit runs while the next one's pipeline is in Redis; when none comes,
 * the staged rounds are committed at once (flush).  A small staged round
 * waits once for the next one, and the two are committed together: at most
 * two rounds are staged while a third reserves.  The admin requests of a
 * round come after its purchases, committed and settled.  Without Redis,
 * purchases sell from PostgreSQL alone (worker/database_mode.c).
 *
 * Crash points (seckill.crash_point) stop the worker at each boundary:
 * after_gather, after_reserve, after_commit, before_wake (overlapped when a
 * next round is in Redis), after_answer.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/round.h"

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "redis/redis.h"
#include "shared/call.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "utils/memutils.h"
#include "worker/campaign_admin.h"
#include "worker/database_mode.h"
#include "worker/dispatch.h"
#include "worker/installation.h"
#include "worker/journal.h"
#include "worker/lock_waiters.h"
#include "worker/pacing.h"
#include "worker/purchase.h"
#include "worker/rebuild.h"
#include "worker/waiting_room.h"
#include "worker/worker_state.h"

/* Rounds served back to back, each one's commit beside the next one's Redis stage. */
#define OVERLAPPED_ROUNDS 16

/* A staged round of fewer purchases than this waits for the next round's, once. */
#define SK_GROUP_COMMIT_MIN 24

/* The rounds of purchases taken in turn (sk_worker.rounds): two staged, one reserving. */
#define SK_ROUNDS 3

void
sk_rounds_init(void)
{
	int			n = seckill_slot_count();

	sk_worker.rounds.slots = MemoryContextAlloc(TopMemoryContext, sizeof(int) * n);
	sk_worker.rounds.items = MemoryContextAlloc(TopMemoryContext, sizeof(RoundItem) * n);
	sk_worker.rounds.buys = MemoryContextAlloc(TopMemoryContext, sizeof(RoundItem *) * n);
	sk_worker.rounds.rounds = MemoryContextAllocZero(TopMemoryContext, sizeof(Round) * SK_ROUNDS);
}

/* The rounds in the stage, oldest first, into out: their number. */
static int
rounds_in(RoundStage stage, Round **out)
{
	int			n = 0;

	for (int k = 1; k <= SK_ROUNDS; k++)
	{
		Round	   *r = &sk_worker.rounds.rounds[(sk_worker.rounds.newest + k) % SK_ROUNDS];

		if (r->stage == stage)
			out[n++] = r;
	}
	return n;
}

static bool
rounds_staged(void)
{
	Round	   *staged[SK_ROUNDS];

	return rounds_in(ROUND_STAGED, staged) > 0;
}

/*
 * Commit the staged rounds together.  While reserving's pipeline is in
 * Redis, a single staged round that is small and has not waited yet waits
 * instead; then it is committed with that round's purchases (a bigger group
 * commit costs less a purchase: one transaction, one campaign row update,
 * one WAL flush for more of them).  With none staged, the reserving round's
 * own flight was its wait: the first round of a burst is committed with the
 * next one's flight, not after it (measured: at 8 clients, 0.95x the
 * purchases a second when it waited too).  NULL: nothing is in Redis, all
 * are committed now.
 */
static void
commit_staged(Round *reserving)
{
	Round	   *staged[SK_ROUNDS];
	int			n = rounds_in(ROUND_STAGED, staged);

	if (reserving != NULL && n == 0)
		reserving->waited = true;
	if (reserving != NULL && n == 1 && !staged[0]->waited &&
		staged[0]->norders + staged[0]->ndups < SK_GROUP_COMMIT_MIN)
	{
		staged[0]->waited = true;
		return;
	}
	if (n > 0)
		sk_purchase_commit(staged, n);
}

/* What PostgreSQL refused of the committed rounds goes back; they are free again. */
static void
give_back_committed(void)
{
	Round	   *committed[SK_ROUNDS];
	int			n = rounds_in(ROUND_COMMITTED, committed);

	for (int k = 0; k < n; k++)
		sk_purchase_give_back(committed[k]);
}

/* Commit what is staged, and give back what PostgreSQL refused of it. */
static void
flush(void)
{
	commit_staged(NULL);
	give_back_committed();
}

/*
 * After an error broke the rounds off: their callers are answered with it
 * (seckill_fail_taken_slots), and the replay settles what Redis reserved
 * for them, and gives back what PostgreSQL refused of a committed round.
 */
void
sk_rounds_forget(void)
{
	for (int k = 0; k < SK_ROUNDS; k++)
		sk_purchase_empty(&sk_worker.rounds.rounds[k]);
}

/*
 * A round of purchases through Redis, in its stages (the file's header);
 * rebuild: room for the ids of the campaigns Redis lost, *nrebuild.
 */
static void
purchase_round(RoundItem **round_buys, int n, int64 *rebuild, int *nrebuild)
{
	Round	   *committed[SK_ROUNDS];
	Round	   *r;

	/* gather */
	seckill_crash_if(SK_CRASH_AFTER_GATHER);
	sk_worker.rounds.newest = (sk_worker.rounds.newest + 1) % SK_ROUNDS;
	r = &sk_worker.rounds.rounds[sk_worker.rounds.newest];
	if (r->stage != ROUND_EMPTY)
		elog(ERROR, "seckill worker found its round %d still in stage %d",
			 sk_worker.rounds.newest, (int) r->stage);
	/* reserve, and meanwhile commit */
	sk_purchase_reserve(r, round_buys, n);
	commit_staged(r);
	/* receive */
	sk_purchase_receive(r, rebuild, nrebuild);
	/* give back, after this round's replies, so that the stock it notes is the newest */
	if (r->stage == ROUND_STAGED && rounds_in(ROUND_COMMITTED, committed) > 0)
		seckill_crash_if(SK_CRASH_AFTER_ANSWER);
	give_back_committed();
	/* a replay must find them committed: the stage waits for no next round then */
	if (sk_journal_needs_replay() || seckill_crash_point == SK_CRASH_BEFORE_WAKE)
		flush();
}

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
		flush();
	/* first, as it may queue rebuilds */
	through_redis = sk_journal_ready() &&
		(!seckill_shared->sales_from_database || sk_database_mode_leave());
	/* a take-over in that replay: its campaigns sell again, or are rebuilt, first */
	if (through_redis)
		sk_admin_settle_take_over();
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
		flush();
		sk_database_mode_serve(buys, nserved);
		return;
	}
	purchase_round(buys, nserved, rebuild, &nrebuild);
	for (int i = 0; i < nrebuild; i++)
		sk_rebuild_lost(rebuild[i]);
}

static void
serve_round(int nitems, int nbuys)
{
	RoundItem  *items = sk_worker.rounds.items;

	pg_atomic_fetch_add_u64(&seckill_figures->counters.rounds, 1);
	if (!sk_installation_current())
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
		serve_purchases(sk_worker.rounds.buys, nbuys);
		sk_pacing_note_purchases();
	}

	/* Admin requests come after the round's purchases, committed and settled. */
	if (nitems > nbuys)
		flush();
	if (nitems > nbuys && sk_redis_connected())
		sk_journal_flush_settles();
	/* releases first: a lock given back in this round can be taken in it */
	sk_dispatch_locks(items, nitems, SK_REQ_UNLOCK);
	sk_dispatch_locks(items, nitems, SK_REQ_LOCK);
	sk_waiting_room_join(items, nitems);
	for (int i = 0; i < nitems; i++)
		if (items[i].request.kind != SK_REQ_BUY && items[i].request.kind != SK_REQ_LOCK &&
			items[i].request.kind != SK_REQ_UNLOCK && items[i].request.kind != SK_REQ_QUEUE_JOIN)
			sk_pacing_serve_or_hold(&items[i]);
	/* the lock releases its Redis waits heard */
	sk_lock_hear_releases();
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
	int		   *slots = sk_worker.rounds.slots;
	RoundItem  *items = sk_worker.rounds.items;
	RoundItem **buys = sk_worker.rounds.buys;
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
 * Serve the queue's requests: a round, then, while purchases keep coming,
 * the next ones back to back: each round's orders commit while the next
 * round's pipeline is in Redis.  What comes between rounds (settings,
 * replays, leases, long work) waits at most OVERLAPPED_ROUNDS rounds, and
 * no longer than until.  Each round's working memory is cxt, reset before
 * the next (a Round keeps what it holds in a context of its own).
 * False when the queue held nothing.
 */
bool
sk_rounds_serve(MemoryContext cxt, TimestampTz until)
{
	int			nitems,
				nbuys;

	nitems = take_round(&nbuys);
	if (nitems == 0)
		return false;
	serve_round(nitems, nbuys);
	for (int more = 0; more < OVERLAPPED_ROUNDS && rounds_staged() &&
		 !ConfigReloadPending && GetCurrentTimestamp() < until &&
		 (nitems = take_round(&nbuys)) > 0; more++)
	{
		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(cxt);
		serve_round(nitems, nbuys);
	}
	flush();
	return true;
}
