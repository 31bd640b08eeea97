/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The seckill background worker: its start, its loop, what it does
 *		between rounds and while idle, and its error boundary.
 *
 * The loop serves the request queue in rounds (worker/round.c: a round's
 * purchases through Redis and one group commit, back to back while they
 * keep coming; its admin requests after them, worker/dispatch.c); between
 * rounds come the settings, Redis' connection, the journal's replays, the
 * locks' watchdog, the audit and the waiting lines; long work is sliced
 * between rounds (worker/pacing.c).  Idle, it sleeps until a request comes
 * or something is due.
 *
 * What the worker keeps from one round to the next is one value, sk_worker
 * (worker/worker_state.h), a part per module; what an ERROR that broke a
 * round off resets of it is listed once, here (reset_after_error).
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
#include "worker/database_mode.h"
#include "worker/dispatch.h"
#include "worker/epoch.h"
#include "worker/installation.h"
#include "worker/journal.h"
#include "worker/lease.h"
#include "worker/lock_keeper.h"
#include "worker/lock_waiters.h"
#include "worker/pacing.h"
#include "worker/rebuild.h"
#include "worker/round.h"
#include "worker/waiting_room.h"
#include "worker/worker_state.h"

PGDLLEXPORT void seckill_worker_main(Datum main_arg);

static void
worker_exit(int code, Datum arg)
{
	seckill_shared->worker_latch = NULL;
	seckill_fail_taken_slots("the seckill worker stopped while it held this request", 0);
}

/*
 * What comes between rounds: the campaign cache, the fence remembered in
 * PostgreSQL, Redis' connection, the replays, the campaigns a promotion
 * marked stale, the rebuilds the way back from database mode asks for, the
 * locks' watchdog, a kept lease, the blocked replays and the audit.
 * Milliseconds until the kept lease is given back, if its caller asks no
 * more (-1: none is kept).
 */
static long
between_rounds(void)
{
	long		due;
	long		kept_due;

	if (!sk_installation_loaded())
		(void) sk_installation_current();
	/* a fence learned during the round, remembered in PostgreSQL */
	if (sk_installation_loaded())
		sk_epoch_recall();
	sk_redis_watch();
	if (sk_journal_needs_replay())
		(void) sk_journal_ready();
	sk_admin_settle_take_over();
	/* Redis is back after sales from PostgreSQL alone: rebuild it before it sells */
	if (seckill_shared->sales_from_database && sk_journal_ready())
		(void) sk_database_mode_leave();

	/*
	 * The locks' watchdog, also while rounds keep the worker busy, and
	 * whether or not purchases sell (the epoch lost, fenced): the epoch is
	 * checked first, so that leases Redis lost are put back, not given up.
	 */
	if (GetCurrentTimestamp() >= sk_worker.loop.keeper_due ||
		pg_atomic_exchange_u32(&seckill_lock_table->changed, 0) != 0)
	{
		if (!sk_redlock_enabled())
			(void) sk_journal_ready();
		due = sk_lock_keeper_tick();
		sk_worker.loop.keeper_due = due < 0 ? DT_NOEND :
			TimestampTzPlusMilliseconds(GetCurrentTimestamp(), due);
	}
	/* a lease kept for a caller's next batch, and the caller stopped asking */
	kept_due = sk_lease_give_kept_if_idle();

	/* the replays Redis refused; Redis held against PostgreSQL */
	if (sk_journal_retry_wait() == 0)
		sk_journal_retry_blocked();
	if (sk_audit_wait() == 0)
		sk_audit();
	/* the waiting lines: draws, admissions */
	if (sk_waiting_room_wait() == 0)
		sk_waiting_room_tick();
	sk_lock_hear_releases();
	return kept_due;
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
		/* armed per transaction by store_begin, from seckill.worker_statement_timeout */
		{"statement_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
	};

	for (int i = 0; i < lengthof(pinned); i++)
		SetConfigOption(pinned[i][0], pinned[i][1], PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * "ok" means committed: nothing may make a commit less durable;
	 * remote_apply, where set, is more durable still: kept (read before the
	 * first pin)
	 */
	if (sk_worker.loop.commit_level == NULL)
		sk_worker.loop.commit_level =
			strcmp(GetConfigOption("synchronous_commit", false, false), "remote_apply") == 0 ?
			"remote_apply" : "on";
	SetConfigOption("synchronous_commit", sk_worker.loop.commit_level, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("lock_timeout", psprintf("%d", seckill_worker_lock_timeout),
					PGC_SUSET, PGC_S_OVERRIDE);
}

/*
 * Wait for requests, at most timeout_ms (-1: no limit).  Callers set the
 * worker's latch only while it says it waits (call.c): it says so, then
 * looks at the queue once more.  A lock handed back sets the latch
 * whenever it marks the lock table changed, and a Redis wait since
 * between_rounds may have consumed that wake-up: the mark is looked at too.
 * The lock releases Redis waits heard since are served before the sleep,
 * and those whose message ends it right after.
 */
static void
wait_for_requests(long timeout_ms)
{
	sk_lock_hear_releases();
	pg_atomic_write_u32(&seckill_shared->worker_idle, 1);
	pg_memory_barrier();
	if (seckill_queue_empty() && pg_atomic_read_u32(&seckill_lock_table->changed) == 0)
		sk_redis_wait_idle(timeout_ms);
	pg_atomic_write_u32(&seckill_shared->worker_idle, 0);
	sk_lock_hear_releases();
}

/* The sooner of two waits in milliseconds, -1 being none. */
static long
sooner(long due, long ms)
{
	if (ms < 0)
		return due;
	return due < 0 ? ms : Min(due, ms);
}

/* A millisecond past a wait (-1: none), so that what it waits for is due. */
static long
just_after(long ms)
{
	return ms < 0 ? -1 : ms + 1;
}

/*
 * How long the idle worker may wait for requests (-1: no limit): until the
 * locks' watchdog, a kept lease, the audit, a blocked replay's retry or the
 * waiting lines' turn is due, and a second at most while a replay, updated
 * SQL or Redis after sales from PostgreSQL alone is awaited.
 */
static long
idle_timeout(long kept_due)
{
	long		due = -1;

	if (sk_worker.loop.keeper_due != DT_NOEND)
		due = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), sk_worker.loop.keeper_due) + 1;
	if (sk_journal_needs_replay() || store_sql_outdated || seckill_shared->sales_from_database)
		due = sooner(due, 1000);
	due = sooner(due, just_after(kept_due));
	due = sooner(due, just_after(sk_audit_wait()));
	due = sooner(due, just_after(sk_journal_retry_wait()));
	due = sooner(due, just_after(sk_waiting_room_wait()));
	return due;
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

static void
log_round_error(const ErrorData *edata)
{
	TimestampTz now = GetCurrentTimestamp();

	if (strcmp(sk_worker.loop.last_error_logged, edata->message) == 0 &&
		now < TimestampTzPlusMilliseconds(sk_worker.loop.last_error_logged_at, 60 * 1000))
	{
		sk_worker.loop.errors_not_logged++;
		return;
	}
	ereport(LOG,
			(errcode(edata->sqlerrcode),
			 errmsg("seckill worker could not finish a round: %s", edata->message),
			 edata->detail ? errdetail("%s", edata->detail) : 0,
			 sk_worker.loop.errors_not_logged > 0 ?
			 errhint("The same error happened %d more time(s) since it was last logged; it is logged at most once a minute.",
					 sk_worker.loop.errors_not_logged) : 0));
	strlcpy(sk_worker.loop.last_error_logged, edata->message,
			sizeof(sk_worker.loop.last_error_logged));
	sk_worker.loop.last_error_logged_at = now;
	sk_worker.loop.errors_not_logged = 0;
}

/*
 * What an ERROR that broke the round off resets of the worker's state
 * (sk_worker, worker/worker_state.h), through each module's own function,
 * in this order:
 *
 *	1. Redis' and the Redlock nodes' connections left mid-request, which
 *	   cannot be reused: their next reply would be an earlier command's.
 *	2. The rebuilds under way, forgotten, their leases and the one the work
 *	   in hand held given back; then the lease kept for a caller's next
 *	   batch.
 *	3. The journal, replayed at its next use: Redis may hold reservations
 *	   nobody settled.
 *	4. A seckill_epoch_claim() in hand, dropped: it records nothing later.
 *	5. The rounds of purchases, emptied; the worker no longer idle; the paced
 *	   requests held, forgotten (their callers' slots are failed by the
 *	   boundary right after, with every slot taken).
 *
 * The rest of sk_worker is kept: what was learned of PostgreSQL and Redis
 * (the epoch and the fence, the order id block, the campaign cache's
 * generation, the campaigns whose replay Redis refused, the locks' leases
 * as last put back), the paces, and what the logs count.
 *
 * Smaller failures are reset where they happen, at once, by the modules
 * below: the next request of the same round, or the next lock script, may
 * follow before the loop comes round again.  An ERROR in one request not a
 * purchase drops the connections left mid-request and gives the leases back
 * in sk_dispatch_reply_error (worker/dispatch.c).  A new Redis connection
 * is noticed at its first use by each part that depends on it, comparing
 * sk_redis_generation() with the connection it last did its work on: the
 * journal's replay (sk_journal_ready), the locks' put-back (lock_keeper.c)
 * and a rebuild's staged sets (rebuild.c).
 */
static void
reset_after_error(void)
{
	sk_redis_abandon();
	sk_redlock_abandon();
	sk_rebuild_abort();
	sk_lease_give_if_held();
	sk_journal_lost();
	sk_epoch_claim_drop();
	sk_rounds_forget();
	pg_atomic_write_u32(&seckill_shared->worker_idle, 0);
	sk_pacing_forget();
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

	reset_after_error();
	snprintf(message, sizeof(message), "the seckill worker failed while serving this request: %s",
			 edata->message);
	seckill_fail_taken_slots(message, edata->sqlerrcode);
	log_round_error(edata);
	FreeErrorData(edata);
	MemoryContextReset(sk_worker.loop.round_cxt);
	MemoryContextSwitchTo(sk_worker.loop.round_cxt);
	RESUME_INTERRUPTS();

	/* a persistent cause: requests fail fast meanwhile, the log stays quiet */
	sk_worker.loop.errors_in_row++;
	pause_until(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
											Min(10 << Min(sk_worker.loop.errors_in_row, 7), 1000)));
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

	sk_worker.loop.round_cxt = AllocSetContextCreate(TopMemoryContext, "seckill round",
													 ALLOCSET_DEFAULT_SIZES);
	sk_rounds_init();
	sk_journal_init();
	sk_lock_keeper_init();

	seckill_fail_taken_slots("the seckill worker restarted while it held this request", 0);
	before_shmem_exit(worker_exit, 0);
	sk_redis_init(sk_scripts_sources, SK_NSCRIPTS, sk_keys_prefixed("epoch"));
	/* releases by other clusters sharing the Redis wake our lock waiters */
	if (!sk_redlock_enabled())
		sk_pubsub_subscribe(sk_keys_lock_channel());

	MemoryContextSwitchTo(sk_worker.loop.round_cxt);

	sk_waiting_room_start();
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
		MemoryContextReset(sk_worker.loop.round_cxt);
		MemoryContextSwitchTo(sk_worker.loop.round_cxt);

		kept_due = between_rounds();

		if (sk_rounds_serve(sk_worker.loop.round_cxt, sk_worker.loop.keeper_due))
		{
			sk_worker.loop.errors_in_row = 0;
			if (sk_pacing_wait() == 0)
				sk_pacing_step();
			continue;
		}
		if (sk_pacing_pending())
		{
			/* the next purchases are on their way: wait for them, or the turn */
			due = sk_pacing_wait();
			if (due > 0)
				wait_for_requests(due);
			else
				sk_pacing_step();
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
		sk_worker.loop.errors_in_row = 0;
		/* retry Redis, or look for updated SQL, now and then; renew leases when due */
		if (store_sql_outdated)
			(void) sk_installation_current();
		wait_for_requests(idle_timeout(kept_due));
	}
}
