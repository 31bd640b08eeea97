/*-------------------------------------------------------------------------
 *
 * worker_state.h
 *		What the background worker keeps from one round to the next: one
 *		struct, a part per module, one instance (sk_worker).
 *
 * Each module reads and writes its own part (sk_worker.journal in
 * worker/journal.c, and so on), through its own functions for the others;
 * its constants, lookup tables and private types stay in the module (a
 * private type behind a pointer here).  What an ERROR that broke a round off
 * resets of it is listed once, by the error boundary (worker/worker.c).
 * Only the process's memory: what must outlive a restart is in the table
 * seckill.worker_state, and what backends see is in shared memory.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_WORKER_STATE_H
#define SECKILL_WORKER_STATE_H

#include "seckill.h"

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"
#include "shared/call.h"
#include "store/store.h"
#include "utils/hsearch.h"
#include "utils/palloc.h"
#include "utils/timestamp.h"
#include "worker/round_item.h"

/* The request kinds, for what the worker keeps per kind (worker/dispatch.c). */
#define SK_REQUEST_KINDS (SK_REQ_QUEUE_JOIN + 1)

/* Campaigns whose rebuild failed lately, each waiting before its next try. */
#define SK_REBUILD_FAILED_KEPT 16

/* The loop's own (worker.c). */
typedef struct SkLoopState
{
	MemoryContext round_cxt;
	/* when the locks' watchdog is next due (lock_keeper.c) */
	TimestampTz keeper_due;
	/* errors in a row: each waits longer before the next round, up to a second */
	int			errors_in_row;
	/* the last error logged, so that a persistent one is logged once a minute */
	char		last_error_logged[SK_MESSAGE_LEN];
	TimestampTz last_error_logged_at;
	int			errors_not_logged;
	/* synchronous_commit as read before the first pin (pin_environment) */
	const char *commit_level;
} SkLoopState;

/* The rounds (round.c). */
typedef struct SkRoundsState
{
	/* a round's requests: allocated once, so that nothing can fail between drain and take */
	int		   *slots;
	RoundItem  *items;
	RoundItem **buys;

	/*
	 * The rounds of purchases, taken in turn: two staged (one of which
	 * waited) and one reserving at most.  newest is the index of the last
	 * one taken; the one after it is the oldest.
	 */
	struct Round *rounds;
	int			newest;
} SkRoundsState;

/* Long work paced between the rounds (pacing.c). */
typedef struct SkPacingState
{
	TimestampTz long_work_at;
	bool		purchases_since_long_work;
	List	   *held_slices;	/* RoundItem *: paced requests waiting their turn */
} SkPacingState;

/* The request kinds (dispatch.c). */
typedef struct SkDispatchState
{
	/* when each kind last went over its budget unlogged, and how often since */
	struct
	{
		TimestampTz logged_at;
		int			unlogged;
	}			over_budget[SK_REQUEST_KINDS];
} SkDispatchState;

/* The campaigns' admin work (campaign_admin.c). */
typedef struct SkCampaignAdminState
{
	/* orders cancelled per release request, sized to its budget; 0: the fewest */
	int			release_batch;
} SkCampaignAdminState;

/* Redis held against PostgreSQL (audit.c): when it last was. */
typedef struct SkAuditState
{
	TimestampTz audit_at;
} SkAuditState;

/*
 * The way back from sales from PostgreSQL alone (database_mode.c): true
 * while Redis may sell the campaigns not being rebuilt (all rebuilds so far
 * succeeded); the rebuilds' failures before; when to try again.
 */
typedef struct SkDatabaseModeState
{
	bool		leaving_database_mode;
	uint64		failures_before_leaving;
	TimestampTz leave_retry_at;
} SkDatabaseModeState;

/* The SQL callers' locks (lock_keeper.c). */
typedef struct SkLockKeeperState
{
	/*
	 * The count of Redis' losses (sk_epoch_losses), and the connection
	 * (sk_redis_generation), the leases and the fair lines were last put
	 * back for.
	 */
	uint32		put_back_for;
	uint64		put_back_connection;
	/* the leases released lately, until they would have run out */
	struct Released *released_lately;
	int			released_next;
} SkLockKeeperState;

/* Loading campaigns into Redis (rebuild.c). */
typedef struct SkRebuildState
{
	List	   *rebuilds;		/* queued; the first takes the next step; in
								 * rebuild_cxt */
	MemoryContext rebuild_cxt;
	int			page_size;		/* buyers a step stages; 0: the fewest */
	uint64		failures;
	/* after a failed rebuild of a campaign Redis lost: when it failed */
	struct
	{
		int64		campaign_id;
		TimestampTz at;
	}			failed[SK_REBUILD_FAILED_KEPT];
} SkRebuildState;

/* The extension as installed (installation.c). */
typedef struct SkInstallationState
{
	/* the install_generation the campaign cache was loaded for */
	uint32		cache_generation;
	bool		cache_loaded;
} SkInstallationState;

/* The reservation journal (journal.c). */
typedef struct SkJournalState
{
	/*
	 * Set when Redis may hold reservations nobody has settled yet: after a
	 * failed round trip, and for every new connection (Redis may have
	 * restarted from a snapshot that holds old journal entries).
	 */
	bool		needs_replay;
	uint64		replayed_generation;
	/* after Redis refused a replay: not before then, on the same connection */
	TimestampTz replay_due;
	/* the epoch is checked at the next sk_journal_ready() (sk_journal_check_epoch) */
	bool		epoch_due;
	/* campaigns whose replay Redis refused: they do not sell, and are tried again */
	struct Blocked *blocked;
	int			nblocked;
	TimestampTz blocked_retry_at;
	/* committed orders whose journal entries Redis still holds */
	SkOrder    *settled;		/* .home: the shard whose journal holds it */
	int			nsettled;
	int			max_settled;
} SkJournalState;

/* Leases on campaigns (lease.c). */
typedef struct SkLeaseState
{
	uint64		lock_counter;

	/*
	 * The lease the work in hand runs under, if any: renewed and fenced by
	 * lease.c, and given back after an error.  Work that spans rounds (a
	 * rebuild) detaches its lease between its steps.
	 */
	struct SkLease *held;

	/*
	 * A lease kept between the requests of one piece of work its caller
	 * sends batch by batch (a release): the next batch resumes it.  Given
	 * back when the work ends, when another lease is taken, after an error,
	 * or when no batch came for a while (kept_at).
	 */
	struct SkLease *kept;
	TimestampTz kept_at;
} SkLeaseState;

/* The waiting lines (waiting_room.c). */
typedef struct SkWaitingRoomState
{
	struct LinePace *paces;		/* the worker's own pace of each line */
	TimestampTz tick_due;
	HTAB	   *join_buckets;	/* joins allowed per campaign and address */
} SkWaitingRoomState;

/* The block of order ids the worker owns (order_ids.c): [next_id, last_id]. */
typedef struct SkOrderIdsState
{
	int64		next_id;
	int64		last_id;
	bool		block_recorded; /* false: in use, not yet recorded */
	/* the install_generation the block belongs to: a new one has a new sequence */
	uint32		seen_generation;
} SkOrderIdsState;

/* Who sells through this Redis (epoch.c). */
typedef struct SkEpochState
{
	TimeLineID	timeline;
	char		epoch_arg[16];

	/*
	 * This server's promotion onto its timeline, recorded in Redis beside
	 * the epoch: a random id kept in the data directory with the timeline it
	 * was taken on; '' when it could not be kept: then nothing sells, and it
	 * is tried again a second later (promotion_retry_at).
	 */
	char		promotion[17];
	bool		promotion_read;
	TimestampTz promotion_retry_at;
	bool		promotion_failed;

	/* set when Redis records a newer epoch than ours; until the worker restarts */
	bool		fenced;

	/*
	 * A fence learned from Redis and not yet remembered in PostgreSQL;
	 * whether the fence PostgreSQL remembers was read since the worker
	 * started.
	 */
	bool		fence_unremembered;
	bool		recalled;
	uint32		recalled_generation;	/* install_generation it was read for */

	/*
	 * The timeline this server last recorded as the epoch in Redis, as
	 * PostgreSQL remembers it (0: never); a record not yet remembered.
	 */
	int64		recorded_here;
	bool		record_unremembered;

	/*
	 * Remembered as recorded before Redis was written, and not written yet:
	 * this worker decided to record, so a Redis without the epoch is not one
	 * that lost it (a restart forgets this: then it is, and the server
	 * waits).
	 */
	bool		record_pending;

	/*
	 * This server has streamed WAL to a standby (as PostgreSQL remembers it,
	 * or seen since), not yet remembered; when a standby is looked for next.
	 */
	bool		had_standby;
	bool		standby_unremembered;
	TimestampTz standby_due;

	/*
	 * Redis lost the epoch this server recorded, and
	 * seckill.redis_epoch_lost is wait: nothing sells until claimed
	 * (seckill_epoch_claim) or promoted.
	 */
	bool		lost;

	/*
	 * seckill_epoch_claim(), while its request is served (its slot and
	 * sequence number): dropped once answered, when it fails, or when its
	 * caller gives up first, so that a claim nobody waits for records
	 * nothing.
	 */
	struct
	{
		bool		on;
		int			slot;
		uint64		seq;
	}			claim;

	/*
	 * How often an epoch check found that Redis lost what this server wrote
	 * there, or may have (a new master): the lock keeper puts its leases
	 * back each time it changes (sk_epoch_losses).
	 */
	uint32		losses;
	bool		recorded_by_us; /* by this worker, since it started */

	/* the campaigns a take-over marked stale, for the worker to rebuild */
	int64	   *taken_over;
	int			ntaken_over;
} SkEpochState;

typedef struct SkWorkerState
{
	SkLoopState loop;
	SkRoundsState rounds;
	SkPacingState pacing;
	SkDispatchState dispatch;
	SkCampaignAdminState campaign_admin;
	SkAuditState audit;
	SkDatabaseModeState database_mode;
	SkLockKeeperState lock_keeper;
	SkRebuildState rebuild;
	SkInstallationState installation;
	SkJournalState journal;
	SkLeaseState lease;
	SkWaitingRoomState waiting_room;
	SkOrderIdsState order_ids;
	SkEpochState epoch;
} SkWorkerState;

extern SkWorkerState sk_worker;

#endif							/* SECKILL_WORKER_STATE_H */
