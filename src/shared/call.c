/*-------------------------------------------------------------------------
 *
 * call.c
 *		The call transport: a backend puts its request in its own slot,
 *		queues it and sets the worker's latch; the worker drains the queue
 *		in rounds and answers each slot, waking its caller.
 *
 *-------------------------------------------------------------------------
 */
#include "shared/call.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "access/xlog.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "shared/shmem.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

SeckillCalls *seckill_calls = NULL;

static bool exit_callback_registered = false;
static uint32 checked_generation = PG_UINT32_MAX;	/* see seckill_check_database */

static const char *const request_kind_names[] = {
	[SK_REQ_BUY] = "purchase",
	[SK_REQ_PREHEAT] = "preheat",
	[SK_REQ_CLOSE] = "close",
	[SK_REQ_STATUS] = "status",
	[SK_REQ_RECONCILE] = "reconcile",
	[SK_REQ_CANCEL] = "cancel",
	[SK_REQ_RELEASE] = "release",
	[SK_REQ_RESTOCK] = "restock",
	[SK_REQ_LIMITS] = "limits",
	[SK_REQ_LOCK] = "lock",
	[SK_REQ_UNLOCK] = "unlock",
	[SK_REQ_BARRIER] = "barrier",
	[SK_REQ_EPOCH_CLAIM] = "epoch_claim",
	[SK_REQ_QUEUE_JOIN] = "queue_join",
};

/* For messages: "a purchase request". */
const char *
seckill_request_kind_name(SeckillRequestKind kind)
{
	return request_kind_names[kind];
}

/*
 * Two slots per backend: a request is made in whichever is free, so that a
 * call is not made to wait for an earlier one given up on, still with the
 * worker (this session's, or, behind a pooler, another client's).
 */
int
seckill_slot_count(void)
{
	return MaxBackends * SK_SLOTS_PER_BACKEND;
}

/* The backend's first slot, where it waits for SQL locks. */
int
seckill_home_slot(void)
{
	return (MyBackendId - 1) * SK_SLOTS_PER_BACKEND;
}

static Size
calls_size(void)
{
	return add_size(MAXALIGN(add_size(offsetof(SeckillCalls, slots),
									  mul_size(seckill_slot_count(), sizeof(SeckillSlot)))),
					mul_size(seckill_slot_count(), sizeof(int)));
}

static void
calls_init(void *base, bool found, LWLockPadded *lwlocks)
{
	seckill_calls = base;
	if (found)
		return;
	memset(seckill_calls, 0, calls_size());
	seckill_calls->lock = &lwlocks[0].lock;
	seckill_calls->queue = (int *) ((char *) base +
									MAXALIGN(offsetof(SeckillCalls, slots) +
											 seckill_slot_count() * sizeof(SeckillSlot)));
	for (int i = 0; i < seckill_slot_count(); i++)
	{
		SpinLockInit(&seckill_slots[i].mutex);
		pg_atomic_init_u32(&seckill_slots[i].answers, 0);
		pg_atomic_init_u32(&seckill_slots[i].sleeping, 0);
		seckill_slots[i].state = SLOT_FREE;
	}
}

void
seckill_call_register(void)
{
	static const SeckillShmemPart part = {"seckill calls", 1, calls_size, calls_init};

	seckill_shmem_register(&part);
}

void
seckill_reply_error(SeckillReply *reply, SeckillStatus status, const char *fmt,...)
{
	va_list		ap;

	reply->status = status;
	va_start(ap, fmt);
	vsnprintf(reply->message, sizeof(reply->message), fmt, ap);
	va_end(ap);
}

/*
 * Give up on the request with this sequence number, if it is still ours.
 * Returns the reply's slot to FREE when the answer had already arrived,
 * unless keep_answer: then it stays to be read, and the result is false.
 */
static bool
slot_abandon(SeckillSlot *slot, uint64 seq, bool keep_answer)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		abandoned = true;

	SpinLockAcquire(&slot->mutex);
	if (slot->seq == seq)
	{
		if (slot->state == SLOT_PENDING || slot->state == SLOT_TAKEN)
		{
			slot->state = SLOT_ABANDONED;
			slot->abandoned_at = now;
		}
		else if (slot->state == SLOT_DONE && keep_answer)
			abandoned = false;
		else if (slot->state == SLOT_DONE)
			slot->state = SLOT_FREE;
	}
	SpinLockRelease(&slot->mutex);
	return abandoned;
}

static void
backend_exit(int code, Datum arg)
{
	for (int i = 0; i < SK_SLOTS_PER_BACKEND; i++)
	{
		SeckillSlot *slot = &seckill_slots[seckill_home_slot() + i];
		uint64		seq;

		SpinLockAcquire(&slot->mutex);
		seq = slot->seq;
		SpinLockRelease(&slot->mutex);
		(void) slot_abandon(slot, seq, false);
	}
}

/*
 * Once per backend: give up its request when it exits.  Callers that
 * register their own exit callbacks around a request call it first, so
 * that theirs stay the latest registered.
 */
void
seckill_backend_prepare(void)
{
	if (!exit_callback_registered)
	{
		before_shmem_exit(backend_exit, 0);
		exit_callback_registered = true;
	}
}

/*
 * Is seckill usable from this backend?  The database check needs the worker
 * to have started once (it records the database it serves).
 */
void
seckill_check_database(void)
{
	if (seckill_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_SECKILL_UNAVAILABLE),
				 errmsg("seckill is not loaded"),
				 errhint("Add seckill to shared_preload_libraries in postgresql.conf and restart the server.")));
	if (OidIsValid(seckill_shared->database_id) && MyDatabaseId != seckill_shared->database_id)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("seckill serves database \"%s\" only", seckill_database),
				 errhint("Connect to that database, or set seckill.database and restart the server.")));
	seckill_check_version();
}

/*
 * Does the extension's SQL in this database match the library?  An error
 * naming both versions when not.  Looked at again whenever the extension is
 * installed or updated.
 */
void
seckill_check_version(void)
{
	if (pg_atomic_read_u32(&seckill_shared->install_generation) != checked_generation)
	{
		uint32		generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		char	   *version = seckill_installed_version();

		if (version != NULL && strcmp(version, SECKILL_SQL_VERSION) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_SECKILL_UNAVAILABLE),
					 errmsg("the seckill extension in this database is version %s; its library is version %s",
							version, SECKILL_SQL_VERSION),
					 errhint("Run ALTER EXTENSION seckill UPDATE.")));
		checked_generation = generation;
	}
}

static void
worker_not_running(void)
{
	if (seckill_shared->connect_failures > 0)
		ereport(ERROR,
				(errcode(ERRCODE_SECKILL_UNAVAILABLE),
				 errmsg("the seckill worker cannot connect to database \"%s\"", seckill_database),
				 errhint("Create that database, or set seckill.database to an existing one and restart the server; the worker tries again at most once a minute.")));
	ereport(ERROR,
			(errcode(ERRCODE_SECKILL_UNAVAILABLE),
			 errmsg("the seckill worker is not running"),
			 errhint("The postmaster restarts it within a second; if this persists, look for \"seckill worker\" in the server log.")));
}

/* Milliseconds left until the deadline; 0 when past it. */
static long
ms_until(TimestampTz deadline)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

	return ms > 0 ? ms : 0;
}

/*
 * The worker has never started on this server (it was a standby promoted a
 * moment ago, or the server has just started): wait for it within the
 * caller's timeout, unless it cannot connect to its database.
 */
static void
wait_for_first_start(TimestampTz deadline)
{
	while (!OidIsValid(seckill_shared->database_id))
	{
		/* 1 while a start connects; more once one failed */
		if (seckill_shared->connect_failures > 1 || ms_until(deadline) == 0)
			worker_not_running();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(ms_until(deadline), 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Is the worker waiting for a synchronous standby to confirm its commit? */
static bool
worker_waits_for_sync_rep(void)
{
	PGPROC	   *proc = BackendPidGetProc(seckill_shared->worker_pid);

	return proc != NULL && proc->wait_event_info == WAIT_EVENT_SYNC_REP;
}

static void
request_timed_out(const SeckillRequest *request)
{
	if (seckill_shared->worker_latch == NULL)
		worker_not_running();
	if (worker_waits_for_sync_rep())
		ereport(ERROR,
				(errcode(ERRCODE_SECKILL_TIMEOUT),
				 errmsg("seckill request timed out after %d ms: the worker waits for synchronous replication",
						seckill_request_timeout),
				 errdetail("A commit of the worker waits for a standby named in synchronous_standby_names to confirm it."),
				 errhint("Bring a synchronous standby back or change synchronous_standby_names; once the commit is confirmed, seckill_order() tells a purchase's fate.")));
	ereport(ERROR,
			(errcode(ERRCODE_SECKILL_TIMEOUT),
			 errmsg("seckill request timed out after %d ms", seckill_request_timeout),
			 request->kind == SK_REQ_BUY ?
			 errhint("The purchase may still complete: call seckill_order() to learn its fate before buying again.") :
			 request->kind == SK_REQ_PREHEAT || request->kind == SK_REQ_RECONCILE ?
			 errhint("Loading a campaign of many buyers into Redis goes on without the caller; the server log says when it is done. Raise seckill.request_timeout to wait for it.") :
			 errhint("The seckill worker may be stalled: see its wait_event in pg_stat_activity (backend_type 'seckill worker') and the server log.")));
}

/*
 * Both slots of this backend held by earlier requests given up on, until the
 * caller's timeout: say whose and since when.
 */
static void
slots_held(void)
{
	StringInfoData held;

	initStringInfo(&held);
	for (int i = 0; i < SK_SLOTS_PER_BACKEND; i++)
	{
		SeckillSlot *s = &seckill_slots[seckill_home_slot() + i];
		int			pid;
		TimestampTz at;
		SeckillRequestKind kind;

		SpinLockAcquire(&s->mutex);
		pid = s->caller_pid;
		at = s->abandoned_at;
		kind = s->request.kind;
		SpinLockRelease(&s->mutex);
		appendStringInfo(&held, "%s%s request of %s, given up on %ld ms ago",
						 i > 0 ? "; " : "", seckill_request_kind_name(kind),
						 pid == MyProcPid ? "this session" : psprintf("an earlier session of this backend slot (pid %d)", pid),
						 (long) TimestampDifferenceMilliseconds(at, GetCurrentTimestamp()));
	}
	ereport(ERROR,
			(errcode(ERRCODE_SECKILL_UNAVAILABLE),
			 errmsg("seckill request timed out after %d ms before it was made", seckill_request_timeout),
			 errdetail("The worker was still serving earlier requests given up on: %s.", held.data),
			 errhint("Call again. Behind a pooler in transaction mode, an earlier request may be another client's; the fate of a purchase is told by seckill_order().")));
}

/*
 * Make the request in a free slot of this backend, waiting for one while
 * earlier requests given up on hold them all.  Returns the slot's index.
 */
static int
claim_slot(const SeckillRequest *request, TimestampTz deadline, uint64 *seq)
{
	for (;;)
	{
		for (int i = 0; i < SK_SLOTS_PER_BACKEND; i++)
		{
			int			index = seckill_home_slot() + i;
			SeckillSlot *s = &seckill_slots[index];
			bool		claimed = false;

			SpinLockAcquire(&s->mutex);
			if (s->state == SLOT_FREE || s->state == SLOT_DONE)
			{
				s->state = SLOT_PENDING;
				s->queued = true;
				*seq = ++s->seq;
				s->latch = MyLatch;
				s->caller_pid = MyProcPid;
				s->request = *request;
				claimed = true;
			}
			SpinLockRelease(&s->mutex);
			if (claimed)
				return index;
		}
		if (ms_until(deadline) == 0)
			slots_held();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(ms_until(deadline), 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The caller's sleep until its slot is answered.  On Linux it sleeps on the
 * slot's futex word, which the worker bumps and wakes: a system call on each
 * side, where a latch costs the worker a kill() and the caller an epoll wake
 * and a signalfd read for every answer.  A signal does not cut a futex wait
 * short (PostgreSQL's handlers restart system calls), so the sleep is cut
 * into slices of WAIT_SLICE_MS: a cancel, a statement_timeout or the
 * postmaster's death is seen within one.  Elsewhere the caller sleeps on its
 * latch, in the same slices.
 */
#define WAIT_SLICE_MS 10
/* answer_wait's timespec holds a slice in tv_nsec alone */
StaticAssertDecl(WAIT_SLICE_MS < 1000, "a wait slice is under a second");

static void
answer_wait(SeckillSlot *slot, uint32 answers, long timeout_ms)
{
	timeout_ms = Min(timeout_ms, WAIT_SLICE_MS);
#ifdef __linux__
	{
		struct timespec slice = {0, timeout_ms * 1000000L};

		pgstat_report_wait_start(PG_WAIT_EXTENSION);
		/* a full barrier: either the worker sees us asleep or we see its bump */
		(void) pg_atomic_exchange_u32(&slot->sleeping, 1);
		(void) syscall(SYS_futex, &slot->answers.value, FUTEX_WAIT, answers, &slice, NULL, 0);
		pg_atomic_write_u32(&slot->sleeping, 0);
		pgstat_report_wait_end();
		if (!PostmasterIsAlive())
			proc_exit(1);
	}
#else
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 timeout_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
#endif
}

/*
 * While seckill.caller_sched_batch is on, a caller about to sleep for its
 * answer switches its session to Linux's SCHED_BATCH, and it stays there
 * (the switch is one system call a session, not two a call): a task woken
 * under it does not preempt the one running.  The worker wakes a round's
 * callers one after another; each woken under the default policy preempted
 * it at once, before it woke the next or read Redis (docs/PERFORMANCE.md:
 * 3.22 context switches a purchase at 32 clients before, 2.80 after).  Only
 * the default policy is changed: a policy the server was given (chrt) is
 * left alone, and so is a session whose switch failed.  Turned off, the
 * setting's assign hook puts a session it switched back at once.
 */
#if defined(__linux__) && defined(SCHED_BATCH)
static enum
{
	POLICY_UNTOUCHED,			/* the default policy, not changed yet */
	POLICY_BATCH,				/* switched to SCHED_BATCH here */
	POLICY_NOT_OURS				/* another policy, or a switch refused: left alone */
}			caller_policy = POLICY_UNTOUCHED;
#endif

static void
caller_scheduling(void)
{
#if defined(__linux__) && defined(SCHED_BATCH)
	struct sched_param param = {0};

	if (!seckill_caller_sched_batch || caller_policy != POLICY_UNTOUCHED)
		return;
	if (sched_getscheduler(0) != SCHED_OTHER)
		caller_policy = POLICY_NOT_OURS;
	else if (sched_setscheduler(0, SCHED_BATCH, &param) == 0)
		caller_policy = POLICY_BATCH;
	else
	{
		elog(DEBUG1, "seckill could not switch the session to SCHED_BATCH: %m");
		caller_policy = POLICY_NOT_OURS;
	}
#endif
}

/*
 * seckill.caller_sched_batch's assign hook: turned off, a session switched
 * to SCHED_BATCH here goes back to the default policy, unless its policy
 * was changed meanwhile.  (Turned on, the next wait for the worker switches.)
 */
void
seckill_caller_sched_batch_assign(bool newval, void *extra)
{
#if defined(__linux__) && defined(SCHED_BATCH)
	struct sched_param param = {0};

	if (newval || caller_policy != POLICY_BATCH)
		return;
	if (sched_getscheduler(0) != SCHED_BATCH)
		caller_policy = POLICY_NOT_OURS;
	else if (sched_setscheduler(0, SCHED_OTHER, &param) == 0)
		caller_policy = POLICY_UNTOUCHED;
#endif
}

/* Wake the caller of a slot answered (after its mutex). */
static void
answer_wake(SeckillSlot *slot)
{
	(void) pg_atomic_fetch_add_u32(&slot->answers, 1);
#ifdef __linux__
	if (pg_atomic_read_u32(&slot->sleeping) != 0)
		(void) syscall(SYS_futex, &slot->answers.value, FUTEX_WAKE, 1, NULL, NULL, 0);
#else
	{
		Latch	   *latch = slot->latch;

		if (latch)
			SetLatch(latch);
	}
#endif
}

/*
 * Hand a request to the worker and wait for its reply, at most
 * seckill.request_timeout.  Cancel-safe: on any error the slot is abandoned
 * and the worker finishes or drops the request on its own.  A request made
 * while the worker restarts waits in the queue for the new worker.
 */
SeckillReply
seckill_call(const SeckillRequest *request)
{
	SeckillSlot *slot;
	int			index;
	TimestampTz deadline;
	uint64		seq;
	SeckillReply reply;
	Latch	   *worker_latch;

	seckill_check_database();
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("this server is a standby (in recovery): seckill sells on the primary"),
				 errhint("Connect to the primary; after a promotion, seckill sells here as soon as its worker has started.")));
	seckill_backend_prepare();
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_request_timeout);
	if (!OidIsValid(seckill_shared->database_id))
	{
		wait_for_first_start(deadline);
		/* now that the worker has said which database it serves */
		seckill_check_database();
	}
	index = claim_slot(request, deadline, &seq);
	slot = &seckill_slots[index];

	LWLockAcquire(seckill_calls->lock, LW_EXCLUSIVE);
	seckill_calls->queue[(seckill_calls->head + seckill_calls->len) % seckill_slot_count()] = index;
	seckill_calls->len++;
	LWLockRelease(seckill_calls->lock);

	/*
	 * A busy worker drains the queue after its round: the latch is set (a
	 * signal, and a wake-up) only when it waits for requests.  The worker
	 * says so before it looks at the queue a last time (seckill_queue_empty).
	 */
	pg_memory_barrier();
	worker_latch = seckill_shared->worker_latch;
	if (worker_latch && pg_atomic_read_u32(&seckill_shared->worker_idle) != 0)
		SetLatch(worker_latch);
	caller_scheduling();

	PG_TRY();
	{
		for (;;)
		{
			bool		done = false;
			uint32		answers = pg_atomic_read_u32(&slot->answers);

			pg_read_barrier();	/* the count before the state it may wake for */
			SpinLockAcquire(&slot->mutex);
			if (slot->state == SLOT_DONE && slot->seq == seq)
			{
				reply = slot->reply;
				slot->state = SLOT_FREE;
				done = true;
			}
			SpinLockRelease(&slot->mutex);
			if (done)
				break;
			if (ms_until(deadline) == 0)
			{
				if (slot_abandon(slot, seq, true))
					request_timed_out(request);
				continue;		/* answered meanwhile */
			}
			answer_wait(slot, answers, ms_until(deadline));
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		(void) slot_abandon(slot, seq, false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return reply;
}

/*
 * Slots not free: requests pending, with the worker, or answered and not yet
 * read, and those given up on that the worker has not dropped yet.  With no
 * calls under way it is 0: a higher figure then is a slot lost.
 */
int
seckill_slots_in_use(void)
{
	int			n = 0;

	for (int i = 0; i < seckill_slot_count(); i++)
	{
		SeckillSlot *slot = &seckill_slots[i];

		SpinLockAcquire(&slot->mutex);
		if (slot->state != SLOT_FREE)
			n++;
		SpinLockRelease(&slot->mutex);
	}
	return n;
}

/* Worker: nothing queued? */
bool
seckill_queue_empty(void)
{
	bool		empty;

	LWLockAcquire(seckill_calls->lock, LW_SHARED);
	empty = seckill_calls->len == 0;
	LWLockRelease(seckill_calls->lock);
	return empty;
}

/* Worker: take up to max queued slot indexes, oldest first. */
int
seckill_queue_drain(int *slots, int max)
{
	int			n;

	LWLockAcquire(seckill_calls->lock, LW_EXCLUSIVE);
	n = Min((int) seckill_calls->len, max);
	for (int i = 0; i < n; i++)
		slots[i] = seckill_calls->queue[(seckill_calls->head + i) % seckill_slot_count()];
	seckill_calls->head = (seckill_calls->head + n) % seckill_slot_count();
	seckill_calls->len -= n;
	LWLockRelease(seckill_calls->lock);
	return n;
}

/*
 * Worker: start work on a drained slot.  False when its caller gave up
 * before the worker began: the request is dropped and the slot freed.
 */
bool
seckill_slot_take(int index, SeckillRequest *request, uint64 *seq)
{
	SeckillSlot *slot = &seckill_slots[index];
	bool		taken = false;
	Latch	   *latch = NULL;

	SpinLockAcquire(&slot->mutex);
	slot->queued = false;
	if (slot->state == SLOT_PENDING)
	{
		slot->state = SLOT_TAKEN;
		*request = slot->request;
		*seq = slot->seq;
		taken = true;
	}
	else if (slot->state == SLOT_ABANDONED)
	{
		slot->state = SLOT_FREE;
		latch = slot->latch;
	}
	SpinLockRelease(&slot->mutex);
	if (latch)
		SetLatch(latch);
	return taken;
}

/*
 * Worker: answer a taken request and wake its caller.  False when the
 * caller had given up: nobody reads the answer.
 */
bool
seckill_slot_reply(int index, uint64 seq, const SeckillReply *reply)
{
	SeckillSlot *slot = &seckill_slots[index];
	Latch	   *latch = NULL;
	bool		delivered = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->seq == seq)
	{
		if (slot->state == SLOT_TAKEN)
		{
			slot->reply = *reply;
			slot->state = SLOT_DONE;
			delivered = true;
		}
		else if (slot->state == SLOT_ABANDONED)
			slot->state = SLOT_FREE;
		latch = slot->latch;
	}
	SpinLockRelease(&slot->mutex);
	if (delivered)
		answer_wake(slot);
	else if (latch)
		SetLatch(latch);		/* a slot freed: for a caller in claim_slot */
	return delivered;
}

/*
 * Has the caller given up on this taken request, which waits for work not
 * begun yet?  Then the slot is freed at once, so that the caller's next
 * request is not made to wait for it.
 */
bool
seckill_slot_given_up(int index, uint64 seq)
{
	SeckillSlot *slot = &seckill_slots[index];
	Latch	   *latch = NULL;
	bool		given_up = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->seq == seq && slot->state == SLOT_ABANDONED)
	{
		slot->state = SLOT_FREE;
		latch = slot->latch;
		given_up = true;
	}
	SpinLockRelease(&slot->mutex);
	if (latch)
		SetLatch(latch);
	return given_up;
}

/*
 * Worker start (or exit): requests a previous worker took have an unknown
 * fate; tell their callers so, instead of letting them wait for the timeout.
 * The journal replay then settles every reservation they may have made.
 */
void
seckill_fail_taken_slots(const char *why, int sqlerrcode)
{
	for (int i = 0; i < seckill_slot_count(); i++)
	{
		SeckillSlot *slot = &seckill_slots[i];
		Latch	   *latch = NULL;
		bool		answered = false;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == SLOT_TAKEN)
		{
			memset(&slot->reply, 0, sizeof(slot->reply));
			slot->reply.status = SK_ERR_WORKER;
			slot->reply.sqlerrcode = sqlerrcode;
			strlcpy(slot->reply.message, why, sizeof(slot->reply.message));
			slot->state = SLOT_DONE;
			answered = true;
			latch = slot->latch;
		}
		else if (slot->state == SLOT_ABANDONED && !slot->queued)
		{
			slot->state = SLOT_FREE;
			latch = slot->latch;
		}
		SpinLockRelease(&slot->mutex);
		if (answered)
			answer_wake(slot);
		else if (latch)
			SetLatch(latch);
	}
}

