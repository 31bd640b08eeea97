/*-------------------------------------------------------------------------
 *
 * locks.c
 *		The SQL callers' side of the distributed locks: seckill_lock,
 *		seckill_lock_xact, seckill_unlock, seckill_lock_fair,
 *		seckill_lock_shared, seckill_lock_shared_xact, seckill_unlock_shared,
 *		seckill_lock_all, seckill_unlock_all, and the seckill.locks view.
 *
 * seckill_lock_fair takes the exclusive lock in the order its takers came to
 * wait; seckill_lock_shared beside other shared holders, never beside an
 * exclusive one.  seckill_lock_all and seckill_unlock_all take and release
 * several locks as one: all of them or none.
 *
 * A lock taken again by the session that holds it is counted, not taken
 * again: it is freed after as many unlocks.  A transaction-scoped lock is
 * released when its transaction ends, and every lock of a session when the
 * session ends; the worker does the releasing (worker/lock_keeper.c).
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "shared/lock_table.h"
#include "shared/shmem.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_lock);
PG_FUNCTION_INFO_V1(seckill_lock_xact);
PG_FUNCTION_INFO_V1(seckill_unlock);
PG_FUNCTION_INFO_V1(seckill_lock_fair);
PG_FUNCTION_INFO_V1(seckill_lock_shared);
PG_FUNCTION_INFO_V1(seckill_lock_shared_xact);
PG_FUNCTION_INFO_V1(seckill_unlock_shared);
PG_FUNCTION_INFO_V1(seckill_lock_all);
PG_FUNCTION_INFO_V1(seckill_unlock_all);
PG_FUNCTION_INFO_V1(seckill_locks_rows);

static bool callbacks_registered = false;
static uint32 acquisitions = 0;

/*
 * This session's lock of that name and scope, held shared or not (fair
 * counts as exclusive), its live one first; under locks_lock.
 */
static SeckillLockEntry *
own_lock(const char *name, bool xact, bool shared)
{
	TimestampTz now = GetCurrentTimestamp();
	SeckillLockEntry *found = NULL;

	for (int i = 0; i < seckill_max_locks; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];

		if ((e->state == LOCK_HELD || e->state == LOCK_LOST) && e->owner_pid == MyProcPid &&
			e->xact == xact && (e->mode == LOCK_SHARED) == shared && strcmp(e->name, name) == 0)
		{
			if (seckill_lock_live(e, now))
				return e;
			found = e;
		}
	}
	return found;
}

/*
 * Hand this session's locks (those of a transaction, or all, with its place
 * in a fair line) to the worker to release.
 */
static void
release_own(bool xact_only)
{
	bool		any = false;

	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < seckill_max_locks; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];

		if ((e->state == LOCK_HELD || e->state == LOCK_LOST ||
			 (e->state == LOCK_WAITING && !xact_only)) && e->owner_pid == MyProcPid &&
			(e->xact || !xact_only))
		{
			e->state = LOCK_RELEASE;
			any = true;
		}
	}
	LWLockRelease(seckill_lock_table->lock);
	if (any)
		seckill_lock_wake_keeper();
}

static void
xact_end(XactEvent event, void *arg)
{
	bool		held = false;

	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			/* released at PREPARE, the lock would not cover the commit */
			LWLockAcquire(seckill_lock_table->lock, LW_SHARED);
			for (int i = 0; i < seckill_max_locks && !held; i++)
				held = seckill_locks[i].state == LOCK_HELD && seckill_locks[i].xact &&
					seckill_locks[i].owner_pid == MyProcPid;
			LWLockRelease(seckill_lock_table->lock);
			if (held)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that holds a seckill_lock_xact() lock")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			release_own(true);
			break;
		default:
			break;
	}
}

static void
session_end(int code, Datum arg)
{
	release_own(false);
}

/*
 * Wait up to ms for a release of the lock: the worker sets our latch when it
 * releases it (a release by another cluster sharing the Redis is seen at the
 * next ask).  The latch is set in the backend's first slot, whoever used
 * that slot last.
 */
static void
wait_for_release(const char *name, long ms)
{
	SeckillSlot *home = &seckill_slots[seckill_home_slot()];

	SpinLockAcquire(&home->mutex);
	home->latch = MyLatch;
	SpinLockRelease(&home->mutex);
	home->lock_wait = seckill_lock_wait_hash(name);
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
	home->lock_wait = 0;
	ResetLatch(MyLatch);
}

/* Milliseconds of an interval argument; NULL gives dflt. */
static long
interval_ms_arg(FunctionCallInfo fcinfo, int argno, const char *name, long dflt)
{
	Interval   *iv;
	int64		usec;

	if (PG_ARGISNULL(argno))
		return dflt;
	iv = PG_GETARG_INTERVAL_P(argno);
	if (iv->month != 0 || iv->day < -1 || iv->day > 1 || iv->time < -USECS_PER_DAY * 2 ||
		iv->time > USECS_PER_DAY * 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 0 and one day", name)));
	usec = iv->time + (int64) iv->day * USECS_PER_DAY;
	if (usec < 0 || usec > USECS_PER_DAY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be between 0 and one day", name)));
	return (long) (usec / 1000);
}

/* The lease argument: NULL (renewed by the worker while held) or 100 ms at least. */
static long
lease_arg(FunctionCallInfo fcinfo, int argno)
{
	long		lease_ms = interval_ms_arg(fcinfo, argno, "lease", seckill_lock_lease);

	if (!PG_ARGISNULL(argno) && lease_ms < 100)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be at least 100 ms"),
				 errhint("Pass NULL to have the worker renew the lease while the lock is held.")));
	return lease_ms;
}

/* Before this session's first lock: release its locks when it ends. */
static void
prepare_session(void)
{
	seckill_check_database();
	if (!callbacks_registered)
	{
		seckill_backend_prepare();
		before_shmem_exit(session_end, 0);
		RegisterXactCallback(xact_end, NULL);
		callbacks_registered = true;
	}
}

/* A new owner token for the request: unique per acquisition. */
static void
new_owner(SeckillRequest *request)
{
	snprintf(request->lock.owner, sizeof(request->lock.owner), UINT64_FORMAT ":%d:" INT64_FORMAT ":%u",
			 GetSystemIdentifier(), MyProcPid, (int64) MyStartTimestamp, ++acquisitions);
}

/* One ask of the worker for a lock: its reply, unchecked. */
static SeckillReply
ask_for_lock(const SeckillRequest *request)
{
	SeckillReply reply;

	PG_TRY();
	{
		reply = seckill_call(request);
	}
	PG_CATCH();
	{
		/*
		 * The worker may have taken the lease for a caller that is gone: give
		 * it back, or the worker does when its answer finds nobody.
		 */
		seckill_lock_hand_back(request->lock.owner);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return reply;
}

/* The SQL function that takes a lock in this mode and scope. */
static const char *
taker_name(SeckillLockMode mode, bool xact)
{
	if (mode == LOCK_SHARED)
		return xact ? "seckill_lock_shared_xact()" : "seckill_lock_shared()";
	if (mode == LOCK_FAIR)
		return "seckill_lock_fair()";
	return xact ? "seckill_lock_xact()" : "seckill_lock()";
}

/*
 * Take lock name in mode for this session (xact: for its transaction),
 * asking again until deadline while it cannot be had.  True, with its
 * fencing token in *token, when taken (or taken again: counted); false when
 * not by then.  lease_ms, renewed by the worker while held when watchdog.
 * A taker that waits shows in seckill.locks (a fair one holds a place in
 * the lock's line), and gives up its claims when it stops waiting.
 */
static bool
take_lock(const char *name, SeckillLockMode mode, bool xact, TimestampTz deadline, long lease_ms,
		  bool watchdog, int64 *token)
{
	SeckillLockEntry *e;
	SeckillLockEntry *other;
	SeckillRequest request;
	volatile long backoff = 5;
	bool		again = false;
	bool		shared = mode == LOCK_SHARED;
	volatile bool taken = false;

	if (mode != LOCK_EXCLUSIVE && seckill_redlock_nodes[0] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s is not served by Redlock", taker_name(mode, xact)),
				 errdetail("seckill.redlock_nodes is set: the locks live on independent Redis nodes, where a shared hold or a place in line could not be agreed on by majority."),
				 errhint("Use seckill_lock(), or run without seckill.redlock_nodes.")));
	if (seckill_redis_tls && seckill_redlock_nodes[0] != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("seckill does not speak TLS to the Redlock nodes"),
				 errdetail("seckill.redis_tls is on, and seckill.redlock_nodes is set: its nodes would be reached in plain text."),
				 errhint("Run without seckill.redlock_nodes, or with seckill.redis_tls off on a trusted network.")));

	/* taken again by its holder: counted */
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	e = own_lock(name, xact, shared);
	if (e != NULL && seckill_lock_live(e, GetCurrentTimestamp()))
	{
		e->depth++;
		*token = e->token;
		again = true;
	}
	else if (e != NULL)
		e->state = LOCK_RELEASE;	/* its lease is gone: a new acquisition */
	else if ((other = own_lock(name, !xact, shared)) != NULL)
	{
		const char *holder = taker_name(other->mode, other->xact);

		LWLockRelease(seckill_lock_table->lock);
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("this session holds lock \"%s\" with %s scope", name,
						xact ? "session" : "transaction"),
				 errhint("Take it again with the same function, %s.", holder)));
	}
	else if ((other = own_lock(name, xact, !shared)) != NULL ||
			 (other = own_lock(name, !xact, !shared)) != NULL)
	{
		bool		other_xact = other->xact;

		LWLockRelease(seckill_lock_table->lock);
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("this session holds lock \"%s\" %s", name, shared ? "exclusive" : "shared"),
				 other_xact ?
				 errhint("A session holds a lock either shared or exclusive; that one is released at the end of its transaction.") :
				 errhint("A session holds a lock either shared or exclusive: release it with %s first.",
						 shared ? "seckill_unlock()" : "seckill_unlock_shared()")));
	}
	LWLockRelease(seckill_lock_table->lock);
	if (e != NULL && !again)
		seckill_lock_wake_keeper();
	if (again)
		return true;

	memset(&request, 0, sizeof(request));
	request.kind = SK_REQ_LOCK;
	strlcpy(request.lock.name, name, sizeof(request.lock.name));
	new_owner(&request);
	request.lock.pid = MyProcPid;
	request.lock.lease_ms = (int32) lease_ms;
	request.lock.xact = xact;
	request.lock.watchdog = watchdog;
	request.lock.mode = mode;
	request.lock.waits = GetCurrentTimestamp() < deadline;

	/*
	 * Held by someone else (fair: or others wait before us): ask again after
	 * a jittered backoff of at most 100 ms, which keeps a place in line,
	 * until the deadline.  Redis out of reach is waited out the same way,
	 * by the same owner, so that a fair waiter keeps its place (the worker
	 * puts the line back should Redis have lost it, in the order of the
	 * waiters' first asks); a lease the failed ask took is found by the next
	 * one, renewed.  At the deadline the error is raised.
	 */
	PG_TRY();
	{
		for (;;)
		{
			SeckillReply reply = ask_for_lock(&request);
			long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

			if (reply.status == SK_OK)
			{
				*token = reply.values[0];
				taken = true;
				break;
			}
			if (!((reply.status == SK_ERR_REDIS || reply.status == SK_ERR_REDIS_REFUSED) && left > 0))
				(void) seckill_reply_checked(request.kind, reply);	/* raises a failure */
			if (left <= 0)
				break;
			wait_for_release(name, Min(left, backoff / 2 +
									   (long) pg_prng_uint64_range(&pg_global_prng_state, 0, backoff / 2)));
			CHECK_FOR_INTERRUPTS();
			backoff = Min(backoff * 2, 100);
		}
	}
	PG_CATCH();
	{
		/* no longer waiting: give up the claim or place in line */
		seckill_lock_hand_back(request.lock.owner);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!taken && request.lock.waits)
		seckill_lock_hand_back(request.lock.owner);
	return taken;
}

static Datum
lock_common(FunctionCallInfo fcinfo, SeckillLockMode mode, bool xact)
{
	char	   *name = seckill_id_arg(fcinfo, 0, "name", SK_LOCK_NAME_LEN);
	long		wait_ms = interval_ms_arg(fcinfo, 1, "wait", 0);
	long		lease_ms = lease_arg(fcinfo, 2);
	int64		token;

	prepare_session();
	if (!take_lock(name, mode, xact, TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait_ms),
				   lease_ms, PG_ARGISNULL(2), &token))
		PG_RETURN_NULL();
	PG_RETURN_INT64(token);
}

/*
 * seckill_lock(name text, wait interval DEFAULT '0', lease interval DEFAULT NULL)
 *		RETURNS bigint: the fencing token, or NULL when not acquired within wait
 */
Datum
seckill_lock(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, LOCK_EXCLUSIVE, false);
}

/* seckill_lock_xact(...): the same, released at the end of the transaction */
Datum
seckill_lock_xact(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, LOCK_EXCLUSIVE, true);
}

/*
 * seckill_lock_fair(name text, wait interval DEFAULT '0', lease interval
 *		DEFAULT NULL) RETURNS bigint: as seckill_lock, granted in the order
 *		its takers came to wait; with wait 0 only when nobody waits.
 */
Datum
seckill_lock_fair(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, LOCK_FAIR, false);
}

/*
 * seckill_lock_shared(name text, wait interval DEFAULT '0', lease interval
 *		DEFAULT NULL) RETURNS bigint: held beside other shared holders,
 *		never beside an exclusive one; an exclusive taker that waits for the
 *		shared holders keeps new ones out.
 */
Datum
seckill_lock_shared(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, LOCK_SHARED, false);
}

/* seckill_lock_shared_xact(...): the same, released at the end of the transaction */
Datum
seckill_lock_shared_xact(PG_FUNCTION_ARGS)
{
	return lock_common(fcinfo, LOCK_SHARED, true);
}

/*
 * Release this session's lock name, held shared or not: true when released
 * (or held fewer times); false, with a WARNING, when this session did not
 * hold it or its lease had run out meanwhile.
 */
static bool
unlock_one(const char *name, bool shared)
{
	SeckillLockEntry *e;
	SeckillRequest request;
	SeckillReply reply;
	bool		xact_held;
	bool		other_held;
	bool		lost = false;

	seckill_check_database();
	memset(&request, 0, sizeof(request));
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	e = own_lock(name, false, shared);
	xact_held = own_lock(name, true, shared) != NULL;
	other_held = own_lock(name, false, !shared) != NULL;
	if (e != NULL && seckill_lock_live(e, GetCurrentTimestamp()) && e->depth > 1)
	{
		e->depth--;
		LWLockRelease(seckill_lock_table->lock);
		return true;
	}
	if (e != NULL && !seckill_lock_live(e, GetCurrentTimestamp()))
	{
		/* its lease is gone already: the worker tidies up in the background */
		e->state = LOCK_RELEASE;
		lost = true;
	}
	else if (e != NULL)
	{
		request.kind = SK_REQ_UNLOCK;
		strlcpy(request.lock.name, e->name, sizeof(request.lock.name));
		strlcpy(request.lock.owner, e->owner, sizeof(request.lock.owner));
		request.lock.mode = e->mode;
	}
	LWLockRelease(seckill_lock_table->lock);
	if (e == NULL)
	{
		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("this session does not hold lock \"%s\"%s", name, shared ? " shared" : ""),
				 xact_held ? errhint("A lock taken with %s is released at the end of its transaction.",
									 taker_name(shared ? LOCK_SHARED : LOCK_EXCLUSIVE, true)) :
				 other_held ? errhint("It holds it %s: release it with %s.", shared ? "exclusive" : "shared",
									  shared ? "seckill_unlock()" : "seckill_unlock_shared()") : 0));
		return false;
	}
	if (lost)
		seckill_lock_wake_keeper();
	else
	{
		reply = seckill_call(&request);
		if (reply.status == SK_ERR_REDIS || reply.status == SK_ERR_REDIS_REFUSED)
		{
			seckill_lock_hand_back(request.lock.owner);
			/* the worker gives the lease back once Redis answers */
			ereport(WARNING,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("lock \"%s\" could not be released now: %s", name, reply.message),
					 errhint("The seckill worker releases it when Redis answers again; until then its lease runs out by itself.")));
			return false;
		}
		reply = seckill_reply_checked(request.kind, reply);
		lost = reply.values[0] != 1;
	}
	if (lost)
	{
		ereport(WARNING,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("the lease of lock \"%s\" had run out before it was released", name),
				 errdetail("Another session may have held the lock meanwhile; writes it protects are safe only behind seckill_fence_check()."),
				 errhint("Give the lock a longer lease, or pass NULL for the worker to renew it.")));
		return false;
	}
	return true;
}

/* seckill_unlock(name text) RETURNS boolean: unlock_one() */
Datum
seckill_unlock(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(unlock_one(seckill_id_arg(fcinfo, 0, "name", SK_LOCK_NAME_LEN), false));
}

/* seckill_unlock_shared(name text) RETURNS boolean: unlock_one() of a shared hold */
Datum
seckill_unlock_shared(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(unlock_one(seckill_id_arg(fcinfo, 0, "name", SK_LOCK_NAME_LEN), true));
}

/* The most names seckill_lock_all takes at once. */
#define MAX_LOCK_NAMES 100

/*
 * The names argument of seckill_lock_all and seckill_unlock_all: 1 to
 * MAX_LOCK_NAMES distinct lock names.  Returns them in *names, and in
 * *order their indexes sorted by name: the order they are taken in.
 */
static int
names_arg(FunctionCallInfo fcinfo, int argno, char ***names, int **order)
{
	ArrayType  *a;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("names must not be null")));
	a = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(a) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("names must be a one-dimensional array")));
	deconstruct_array(a, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	if (n == 0 || n > MAX_LOCK_NAMES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("names must hold 1 to %d lock names", MAX_LOCK_NAMES),
				 errdetail("It holds %d.", n)));
	*names = palloc(sizeof(char *) * n);
	*order = palloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		int			len;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("names must not hold a null")));
		len = VARSIZE_ANY_EXHDR(DatumGetPointer(elems[i]));
		if (len == 0 || len > SK_LOCK_NAME_LEN)
			ereport(ERROR,
					(errcode(len == 0 ? ERRCODE_INVALID_PARAMETER_VALUE : ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("lock name %d of names is %s", i + 1, len == 0 ? "empty" : "too long"),
					 errdetail("A lock name is 1 to %d bytes long.", SK_LOCK_NAME_LEN)));
		(*names)[i] = TextDatumGetCString(elems[i]);
	}
	/* insertion sort: few names */
	for (int i = 0; i < n; i++)
	{
		int			j = i;

		for (; j > 0 && strcmp((*names)[(*order)[j - 1]], (*names)[i]) > 0; j--)
			(*order)[j] = (*order)[j - 1];
		(*order)[j] = i;
		if (j > 0 && strcmp((*names)[(*order)[j - 1]], (*names)[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("names holds lock \"%s\" twice", (*names)[i])));
	}
	return n;
}

/*
 * After an error: this session's locks names[order[0..n-1]] (session
 * scope) are handed to the worker to release, the last taken first; those
 * held before (counted) are held once less.  Raises no error.
 */
static void
hand_back_taken(char **names, const int *order, int n)
{
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	for (int i = n - 1; i >= 0; i--)
	{
		SeckillLockEntry *e = own_lock(names[order[i]], false, false);

		if (e != NULL && e->depth > 1)
			e->depth--;
		else if (e != NULL)
			e->state = LOCK_RELEASE;
	}
	LWLockRelease(seckill_lock_table->lock);
	seckill_lock_wake_keeper();
}

/*
 * seckill_lock_all(names text[], wait interval DEFAULT '0', lease interval
 *		DEFAULT NULL) RETURNS bigint[]: the session locks of all the names,
 *		their fencing tokens in the order of names; or NULL, holding none of
 *		them, when they could not all be had within wait.  They are taken one
 *		by one in the order of their names (by byte), whatever the order
 *		given, so that sessions taking overlapping sets never wait for each
 *		other in a circle; wait bounds the whole call.
 */
Datum
seckill_lock_all(PG_FUNCTION_ARGS)
{
	char	  **names;
	int		   *order;
	int			n = names_arg(fcinfo, 0, &names, &order);
	long		wait_ms = interval_ms_arg(fcinfo, 1, "wait", 0);
	long		lease_ms = lease_arg(fcinfo, 2);
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), wait_ms);
	int64	   *tokens = palloc(sizeof(int64) * n);
	Datum	   *values = palloc(sizeof(Datum) * n);
	volatile int taken = 0;

	prepare_session();
	PG_TRY();
	{
		while (taken < n && take_lock(names[order[taken]], LOCK_EXCLUSIVE, false, deadline, lease_ms,
									  PG_ARGISNULL(2), &tokens[order[taken]]))
			taken++;
	}
	PG_CATCH();
	{
		hand_back_taken(names, order, taken);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (taken < n)
	{
		/* all or none: the last taken first */
		for (int i = taken - 1; i >= 0; i--)
			(void) unlock_one(names[order[i]], false);
		PG_RETURN_NULL();
	}
	for (int i = 0; i < n; i++)
		values[i] = Int64GetDatum(tokens[i]);
	PG_RETURN_ARRAYTYPE_P(construct_array(values, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * seckill_unlock_all(names text[]) RETURNS boolean: seckill_unlock() of each
 *		name, the last taken first; true when every one was released (or
 *		held once less), false, with a WARNING for each, otherwise.
 */
Datum
seckill_unlock_all(PG_FUNCTION_ARGS)
{
	char	  **names;
	int		   *order;
	int			n = names_arg(fcinfo, 0, &names, &order);
	bool		all = true;

	for (int i = n - 1; i >= 0; i--)
		all = unlock_one(names[order[i]], false) && all;
	PG_RETURN_BOOL(all);
}

static const char *
state_name(SeckillLockState s)
{
	switch (s)
	{
		case LOCK_HELD:
			return "held";
		case LOCK_RELEASE:
			return "releasing";
		case LOCK_LOST:
			return "lost";
		case LOCK_WAITING:
			return "waiting";
		default:
			return "free";
	}
}

static const char *
mode_name(SeckillLockMode m)
{
	switch (m)
	{
		case LOCK_SHARED:
			return "shared";
		case LOCK_FAIR:
			return "fair";
		default:
			return "exclusive";
	}
}

/*
 * seckill.locks_rows() RETURNS SETOF (name, owner_pid, scope, token, depth,
 *		state, acquired_at, lease_left, renewals, mode, queue_position): the
 *		locks the worker holds for SQL callers, and the places in line of
 *		the fair takers that wait.
 */
Datum
seckill_locks_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();

	seckill_check_database();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(seckill_lock_table->lock, LW_SHARED);
	for (int i = 0; i < seckill_max_locks; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];
		Datum		values[11];
		bool		nulls[11] = {0};
		Interval   *left = palloc0(sizeof(Interval));
		TimestampTz ends;

		if (e->state == LOCK_FREE)
			continue;
		ends = TimestampTzPlusMilliseconds(e->renewed_at, e->lease_ms);
		left->time = Max(ends - now, 0);
		values[0] = CStringGetTextDatum(e->name);
		values[1] = Int32GetDatum(e->owner_pid);
		values[2] = CStringGetTextDatum(e->xact ? "transaction" : "session");
		values[3] = Int64GetDatum(e->token);
		values[4] = Int32GetDatum(e->depth);
		values[5] = CStringGetTextDatum(state_name(e->state));
		values[6] = TimestampTzGetDatum(e->acquired_at);
		values[7] = IntervalPGetDatum(left);
		values[8] = Int32GetDatum(e->renewals);
		values[9] = CStringGetTextDatum(mode_name(e->mode));
		values[10] = Int32GetDatum(e->place);
		nulls[10] = e->state != LOCK_WAITING || e->mode != LOCK_FAIR;
		nulls[3] = nulls[7] = e->state == LOCK_WAITING;	/* no token, no lease yet */
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(seckill_lock_table->lock);
	return (Datum) 0;
}
