/*-------------------------------------------------------------------------
 *
 * call.c
 *		The call transport: a backend puts its request in its own slot,
 *		queues it and sets the worker's latch; the worker drains the queue
 *		in rounds and answers each slot, setting its caller's latch.
 *
 *-------------------------------------------------------------------------
 */
#include "shared/call.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "shared/shmem.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

SeckillCalls *seckill_calls = NULL;

static bool exit_callback_registered = false;
static uint32 checked_generation = PG_UINT32_MAX;	/* see seckill_check_database */

static Size
calls_size(void)
{
	return add_size(MAXALIGN(add_size(offsetof(SeckillCalls, slots),
									  mul_size(MaxBackends, sizeof(SeckillSlot)))),
					mul_size(MaxBackends, sizeof(int)));
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
									MAXALIGN(offsetof(SeckillCalls, slots) + MaxBackends * sizeof(SeckillSlot)));
	for (int i = 0; i < MaxBackends; i++)
	{
		SpinLockInit(&seckill_slots[i].mutex);
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
 * Returns the reply's slot to FREE when the answer had already arrived.
 */
static void
slot_abandon(SeckillSlot *slot, uint64 seq)
{
	SpinLockAcquire(&slot->mutex);
	if (slot->seq == seq)
	{
		if (slot->state == SLOT_PENDING || slot->state == SLOT_TAKEN)
			slot->state = SLOT_ABANDONED;
		else if (slot->state == SLOT_DONE)
			slot->state = SLOT_FREE;
	}
	SpinLockRelease(&slot->mutex);
}

static void
backend_exit(int code, Datum arg)
{
	SeckillSlot *slot = &seckill_slots[MyBackendId - 1];
	uint64		seq;

	SpinLockAcquire(&slot->mutex);
	seq = slot->seq;
	SpinLockRelease(&slot->mutex);
	slot_abandon(slot, seq);
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
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("seckill is not loaded"),
				 errhint("Add seckill to shared_preload_libraries in postgresql.conf and restart the server.")));
	if (OidIsValid(seckill_shared->database_id) && MyDatabaseId != seckill_shared->database_id)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("seckill serves database \"%s\" only", seckill_database),
				 errhint("Connect to that database, or set seckill.database and restart the server.")));
	/* looked at again whenever the extension is installed or updated */
	if (pg_atomic_read_u32(&seckill_shared->install_generation) != checked_generation)
	{
		uint32		generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		char	   *version = seckill_installed_version();

		if (version != NULL && strcmp(version, SECKILL_SQL_VERSION) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
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
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the seckill worker cannot connect to database \"%s\"", seckill_database),
				 errhint("Create that database, or set seckill.database to an existing one and restart the server; the worker tries again at most once a minute.")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
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

static void
request_timed_out(const SeckillRequest *request)
{
	if (seckill_shared->worker_latch == NULL)
		worker_not_running();
	ereport(ERROR,
			(errcode(ERRCODE_QUERY_CANCELED),
			 errmsg("seckill request timed out after %d ms", seckill_request_timeout),
			 request->kind == SK_REQ_BUY ?
			 errhint("The purchase may still complete: call seckill_order() to learn its fate before buying again.") :
			 request->kind == SK_REQ_PREHEAT || request->kind == SK_REQ_RECONCILE ?
			 errhint("Loading a campaign of many buyers into Redis goes on without the caller; the server log says when it is done. Raise seckill.request_timeout to wait for it.") :
			 errhint("The seckill worker may be stalled: see its wait_event in pg_stat_activity (backend_type 'seckill worker') and the server log.")));
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
	TimestampTz deadline;
	uint64		seq;
	SeckillReply reply;
	Latch	   *worker_latch;

	seckill_check_database();
	if (!OidIsValid(seckill_shared->database_id))
		worker_not_running();	/* it never started: nothing to wait for */
	seckill_backend_prepare();
	slot = &seckill_slots[MyBackendId - 1];
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_request_timeout);

	/* An earlier request we gave up on may still hold the slot: wait for it. */
	for (;;)
	{
		bool		claimed = false;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == SLOT_FREE || slot->state == SLOT_DONE)
		{
			slot->state = SLOT_PENDING;
			slot->queued = true;
			seq = ++slot->seq;
			slot->latch = MyLatch;
			slot->request = *request;
			claimed = true;
		}
		SpinLockRelease(&slot->mutex);
		if (claimed)
			break;
		if (ms_until(deadline) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("seckill request timed out after %d ms", seckill_request_timeout),
					 errdetail("An earlier request of this session, given up on, was still being served; this one was not made."),
					 errhint("Call again; call seckill_order() to learn the fate of the earlier purchase.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(ms_until(deadline), 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	LWLockAcquire(seckill_calls->lock, LW_EXCLUSIVE);
	seckill_calls->queue[(seckill_calls->head + seckill_calls->len) % MaxBackends] =
		MyBackendId - 1;
	seckill_calls->len++;
	LWLockRelease(seckill_calls->lock);

	worker_latch = seckill_shared->worker_latch;
	if (worker_latch)
		SetLatch(worker_latch);

	PG_TRY();
	{
		for (;;)
		{
			bool		done = false;

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
				slot_abandon(slot, seq);
				request_timed_out(request);
			}
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 ms_until(deadline), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		slot_abandon(slot, seq);
		PG_RE_THROW();
	}
	PG_END_TRY();

	return reply;
}

/* Worker: take up to max queued slot indexes, oldest first. */
int
seckill_queue_drain(int *slots, int max)
{
	int			n;

	LWLockAcquire(seckill_calls->lock, LW_EXCLUSIVE);
	n = Min((int) seckill_calls->len, max);
	for (int i = 0; i < n; i++)
		slots[i] = seckill_calls->queue[(seckill_calls->head + i) % MaxBackends];
	seckill_calls->head = (seckill_calls->head + n) % MaxBackends;
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
	if (latch)
		SetLatch(latch);
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
	for (int i = 0; i < MaxBackends; i++)
	{
		SeckillSlot *slot = &seckill_slots[i];
		Latch	   *latch = NULL;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == SLOT_TAKEN)
		{
			memset(&slot->reply, 0, sizeof(slot->reply));
			slot->reply.status = SK_ERR_WORKER;
			slot->reply.sqlerrcode = sqlerrcode;
			strlcpy(slot->reply.message, why, sizeof(slot->reply.message));
			slot->state = SLOT_DONE;
			latch = slot->latch;
		}
		else if (slot->state == SLOT_ABANDONED && !slot->queued)
		{
			slot->state = SLOT_FREE;
			latch = slot->latch;
		}
		SpinLockRelease(&slot->mutex);
		if (latch)
			SetLatch(latch);
	}
}

