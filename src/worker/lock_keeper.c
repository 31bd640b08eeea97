/*-------------------------------------------------------------------------
 *
 * lock_keeper.c
 *		The worker's side of the SQL callers' locks: it takes and releases
 *		their leases in Redis, renews them while their owners live (the
 *		watchdog), and releases those whose owner is done or gone.
 *
 * Renewals and releases of all locks due go in one pipeline.  A renewal
 * that finds the lease no longer its owner's (it ran out during a stall,
 * Redis lost it) marks the lock lost: the owner hears it at unlock, and the
 * writes the lock protects are refused by seckill_fence_check() once a later
 * holder has written.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/lock_keeper.h"

#include "layout/keys.h"
#include "miscadmin.h"
#include "redis/redlock.h"
#include "shared/lock_table.h"
#include "shared/shmem.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "store/store.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/lease.h"
#include "worker/lock_waiters.h"
#include "worker/worker_state.h"

/*
 * The leases this worker released lately, each kept until it would have
 * run out in Redis anyway.  A Redis that lost the releases (a replica
 * promoted before it received them) holds them still, and would keep every
 * taker of those locks waiting until they expire: put_back_if_lost()
 * releases them again before it puts back what is held.  That is safe:
 * each one's owner let go, and a release deletes only its owner's lease.
 * The oldest are forgotten first; a forgotten one only runs out.
 */
typedef struct Released
{
	char		name[SK_LOCK_NAME_LEN + 1];
	char		owner[SK_LOCK_OWNER_LEN];
	SeckillLockMode mode;
	TimestampTz until;			/* when its lease would have run out */
} Released;

#define SK_RELEASED_KEPT 256

/* At the worker's start: room for the leases released lately. */
void
sk_lock_keeper_init(void)
{
	sk_worker.lock_keeper.released_lately = MemoryContextAllocZero(TopMemoryContext,
																   sizeof(Released) * SK_RELEASED_KEPT);
}

/* A lease just released in Redis (under the lock table's lock). */
static void
remember_released(const SeckillLockEntry *e)
{
	Released   *r = &sk_worker.lock_keeper.released_lately[sk_worker.lock_keeper.released_next];

	strlcpy(r->name, e->name, sizeof(r->name));
	strlcpy(r->owner, e->owner, sizeof(r->owner));
	r->mode = e->mode;
	r->until = TimestampTzPlusMilliseconds(e->renewed_at, e->lease_ms);
	sk_worker.lock_keeper.released_next = (sk_worker.lock_keeper.released_next + 1) % SK_RELEASED_KEPT;
}


/*
 * A table entry for the request's lock, in this state (LOCK_WAITING: at this
 * place in line); NULL when the table is full.
 */
static SeckillLockEntry *
record(const SeckillRequest *request, SeckillLockState state, int place, TimestampTz since)
{
	SeckillLockEntry *e = NULL;

	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	e = seckill_lock_of_owner(request->lock.owner);
	if (e != NULL && e->state != LOCK_WAITING)
		e = NULL;				/* a waiter's entry becomes its lock's */
	else if (e == NULL)
		for (int i = 0; e == NULL && i < seckill_max_locks; i++)
			if (seckill_locks[i].state == LOCK_FREE)
				e = &seckill_locks[i];
	if (e != NULL)
	{
		/*
		 * A waiter waits since its first ask, unless it lost its place since
		 * (place 0: an ask that did not reach Redis, or no place known yet).
		 */
		bool		waited = state == LOCK_WAITING && e->state == LOCK_WAITING &&
			(place == 0 || e->place == 0 || place <= e->place);
		TimestampTz waiting_since = waited ? e->acquired_at : since;

		/* a waiter's asks again are counted in its renewals */
		int			asks = waited ? e->renewals + 1 : 0;

		if (waited && place == 0)
			place = e->place;	/* an ask that did not reach Redis */

		memset(e, 0, sizeof(SeckillLockEntry));
		e->state = state;
		e->mode = (SeckillLockMode) request->lock.mode;
		e->place = place;
		strlcpy(e->name, request->lock.name, sizeof(e->name));
		strlcpy(e->owner, request->lock.owner, sizeof(e->owner));
		e->owner_pid = request->lock.pid;
		e->xact = request->lock.xact;
		e->watchdog = request->lock.watchdog;
		e->depth = 1;
		e->lease_ms = request->lock.lease_ms;
		e->acquired_at = waiting_since;
		e->renewed_at = since;
		e->renewals = asks;
	}
	LWLockRelease(seckill_lock_table->lock);
	if (state == LOCK_RELEASE)
		pg_atomic_write_u32(&seckill_lock_table->changed, 1);
	return e;
}

/*
 * The lease of the request's owner was won: take its fencing token, right
 * after the grant and before any other acquisition (tokens grow in the
 * order of the grants), and enter the lock in the table.
 */
static void
granted(const SeckillRequest *request, SeckillReply *reply, TimestampTz sent)
{
	SeckillLockEntry *e;
	int64		token;

	if (store_fence_token_needs_block())
	{
		store_begin("seckill: fencing tokens");
		token = store_fence_token();
		store_commit();
	}
	else
		token = store_fence_token();

	e = record(request, LOCK_HELD, 0, sent);
	if (e == NULL)
	{
		SeckillRequest undo = *request;
		SeckillReply ignored = {0};

		sk_lock_release(&undo, &ignored);
		seckill_reply_error(reply, SK_ERR_INVALID,
							"too many seckill locks held: seckill.max_locks is %d; raise it and restart the server",
							seckill_max_locks);
		reply->sqlerrcode = ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		return;
	}
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	e->token = token;
	LWLockRelease(seckill_lock_table->lock);
	pg_atomic_write_u32(&seckill_lock_table->changed, 1);
	reply->status = SK_OK;
	reply->values[0] = token;
}

/* A lock to put back in Redis, copied out of the table. */
typedef struct PutBack
{
	char		name[SK_LOCK_NAME_LEN + 1];
	char		owner[SK_LOCK_OWNER_LEN];
	SeckillLockMode mode;
	int32		lease_ms;		/* a holder's: what is left of it */
	bool		waiter;			/* a fair waiter, back in line */
	TimestampTz since;			/* a waiter's first ask */
} PutBack;

static int
waiters_in_order(const void *a, const void *b)
{
	const PutBack *x = a;
	const PutBack *y = b;

	if (x->waiter != y->waiter)
		return x->waiter ? 1 : -1;	/* the holders first */
	return x->since < y->since ? -1 : x->since > y->since;
}

/*
 * Redis lost its data since the leases were last written (an epoch check
 * found it restarted empty, flushed or failed over: sk_epoch_losses), or the
 * worker reconnected (places in a fair line lapse while their waiters cannot
 * reach Redis to keep them): put back every lease this cluster's callers
 * hold, with what is left of it, then the fair waiters in the order they
 * came, before any other lock script runs; first it releases again the
 * leases it released lately (released_lately), which such a Redis may
 * still hold.  Every taker of this cluster goes through this worker, so
 * none is granted a lock another of its sessions holds.  A lease another
 * owner took meanwhile (a taker of another cluster) is lost.  Tried again
 * at the next lock script when Redis could not be reached.
 */
static void
put_back_if_lost(void)
{
	uint32		losses = sk_epoch_losses();
	uint64		connection = sk_redis_generation();
	TimestampTz now = GetCurrentTimestamp();
	PutBack    *locks;
	Released   *again;
	SkScriptCall *calls;
	int		   *result;
	int		   *put;			/* the results of the put-backs */
	int			n = 0,
				nagain = 0,
				released = 0,
				holders = 0,
				lost = 0;
	bool		failed = false;
	char		why[SK_MESSAGE_LEN];

	if ((losses == sk_worker.lock_keeper.put_back_for &&
		 connection == sk_worker.lock_keeper.put_back_connection) || sk_redlock_enabled())
		return;
	again = palloc(sizeof(Released) * SK_RELEASED_KEPT);
	for (int i = 0; i < SK_RELEASED_KEPT; i++)
		if (sk_worker.lock_keeper.released_lately[i].until > now)
			again[nagain++] = sk_worker.lock_keeper.released_lately[i];
	locks = palloc(sizeof(PutBack) * seckill_max_locks);
	LWLockAcquire(seckill_lock_table->lock, LW_SHARED);
	for (int i = 0; i < seckill_max_locks; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];
		long		left = TimestampDifferenceMilliseconds(now, TimestampTzPlusMilliseconds(e->renewed_at, e->lease_ms));

		if (!(e->state == LOCK_HELD && left > 0) && !(e->state == LOCK_WAITING && e->mode == LOCK_FAIR))
			continue;
		strlcpy(locks[n].name, e->name, sizeof(locks[n].name));
		strlcpy(locks[n].owner, e->owner, sizeof(locks[n].owner));
		locks[n].mode = e->mode;
		locks[n].waiter = e->state == LOCK_WAITING;
		locks[n].lease_ms = locks[n].waiter ? e->lease_ms : (int32) left;
		locks[n].since = e->acquired_at;
		holders += !locks[n].waiter;
		n++;
	}
	LWLockRelease(seckill_lock_table->lock);
	if (n == 0 && nagain == 0)
	{
		sk_worker.lock_keeper.put_back_for = losses;
		sk_worker.lock_keeper.put_back_connection = connection;
		return;
	}
	qsort(locks, n, sizeof(PutBack), waiters_in_order);
	/* the releases again, then the holders, then the waiters in line */
	calls = palloc(sizeof(SkScriptCall) * (nagain + n));
	for (int i = 0; i < nagain; i++)
		calls[i] = sk_lock_call(SK_LOCK_GIVE, again[i].mode, again[i].name, again[i].owner, 0, false);
	for (int i = 0; i < n; i++)
		calls[nagain + i] = sk_lock_call(locks[i].waiter ? SK_LOCK_TAKE : SK_LOCK_PUT_BACK, locks[i].mode,
									  locks[i].name, locks[i].owner, locks[i].lease_ms, true);
	result = palloc(sizeof(int) * (nagain + n));
	if (!sk_lease_run(calls, nagain + n, false, result, NULL, why, sizeof(why)))
		return;
	for (int i = 0; i < nagain; i++)
	{
		failed |= result[i] == SK_LEASE_FAILED;
		released += result[i] == SK_LEASE_YES;
	}
	put = result + nagain;
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < holders; i++)
	{
		SeckillLockEntry *e = seckill_lock_of_owner(locks[i].owner);

		failed |= put[i] == SK_LEASE_FAILED;
		if (put[i] != SK_LEASE_NO || e == NULL || e->state != LOCK_HELD)
			continue;
		e->state = LOCK_LOST;
		lost++;
		ereport(LOG,
				(errmsg("seckill lost lock \"%s\" of backend %d: Redis lost its lease, and another owner took the lock before the worker put it back",
						e->name, e->owner_pid)));
	}
	LWLockRelease(seckill_lock_table->lock);
	for (int i = holders; i < n; i++)
		failed |= put[i] == SK_LEASE_FAILED;
	/* a lock whose lost release held up its takers: they look again */
	for (int i = 0; i < nagain; i++)
		if (result[i] == SK_LEASE_YES)
			sk_lock_wake_waiters(again[i].name);
	if (n > 0 || released > 0 || failed)
	{
		const char *again_said = released == 0 ? "" :
			psprintf(", and released again %d lease(s) whose release it had lost", released);
		const char *refused = failed ? "; some were refused and are tried again" : "";

		if (losses != sk_worker.lock_keeper.put_back_for)
			ereport(LOG,
					(errmsg("seckill worker put back %d lock lease(s) and %d place(s) in a fair line in Redis, which had lost them%s%s",
							holders - lost, n - holders, again_said, refused)));
		else
			ereport(LOG,
					(errmsg("seckill worker kept %d lock lease(s) and %d place(s) in a fair line in Redis across its reconnection%s%s",
							holders - lost, n - holders, again_said, refused)));
	}
	if (!failed)
	{
		sk_worker.lock_keeper.put_back_for = losses;
		sk_worker.lock_keeper.put_back_connection = connection;
	}
}

/*
 * Does another session of this cluster hold the request's lock, in a mode
 * that keeps the request out?
 */
static bool
held_here_by_another(const SeckillRequest *request)
{
	bool		held = false;

	LWLockAcquire(seckill_lock_table->lock, LW_SHARED);
	for (int i = 0; i < seckill_max_locks && !held; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];

		held = e->state == LOCK_HELD && strcmp(e->name, request->lock.name) == 0 &&
			strcmp(e->owner, request->lock.owner) != 0 &&
			!(e->mode == LOCK_SHARED && request->lock.mode == LOCK_SHARED);
	}
	LWLockRelease(seckill_lock_table->lock);
	return held;
}

/*
 * Has Redis lost its data, unnoticed so far (flushed under a connection
 * that stayed up)?  The epoch is checked again (worker/journal.c) and, when
 * it was lost, the leases are put back.  True when they were.
 */
static bool
put_back_if_flushed(void)
{
	uint32		before = sk_worker.lock_keeper.put_back_for;

	sk_journal_check_epoch();
	(void) sk_journal_ready();
	put_back_if_lost();
	return sk_worker.lock_keeper.put_back_for != before;
}

/*
 * Redis granted a lock that another session here holds: it lost its data
 * since it was last checked (flushed between the check and the grant).  The
 * grants are given back, the leases put back, and the takers told busy: they
 * ask again.  Where the give-back fails, the grant stands.
 */
static void
refuse_grants_held_here(const SeckillRequest *const *requests, int *result, const bool *contended, int n)
{
	SkScriptCall *calls = palloc(sizeof(SkScriptCall) * n);
	int		   *given = palloc(sizeof(int) * n);
	int		   *which = palloc(sizeof(int) * n);
	int			m = 0;
	char		why[SK_MESSAGE_LEN];

	for (int i = 0; i < n; i++)
		if (contended[i] && result[i] == SK_LEASE_YES)
		{
			calls[m] = sk_lock_call(SK_LOCK_GIVE, requests[i]->lock.mode, requests[i]->lock.name,
								 requests[i]->lock.owner, 0, false);
			which[m++] = i;
		}
	if (m == 0 || !sk_lease_run(calls, m, false, given, NULL, why, sizeof(why)))
		return;
	for (int k = 0; k < m; k++)
		if (given[k] != SK_LEASE_FAILED)
			result[which[k]] = SK_LEASE_NO;
	ereport(LOG,
			(errmsg("seckill worker gave back %d grant(s) of a lock another session here holds: Redis had lost its lease",
					m)));
	(void) put_back_if_flushed();
}

/*
 * seckill.redis_tls turned on by a reload while Redlock locks are held: the
 * Redlock nodes are not reached over TLS, and nothing goes to them in clear
 * any more.  The held locks are lost (their leases run out on the nodes by
 * themselves), the released ones forgotten.
 */
static void
drop_redlock_in_clear(void)
{
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < seckill_max_locks; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];

		if (e->state == LOCK_HELD)
		{
			e->state = LOCK_LOST;
			ereport(LOG,
					(errmsg("seckill lost lock \"%s\" of backend %d: seckill.redis_tls is on, and the worker does not speak to the Redlock nodes in clear",
							e->name, e->owner_pid),
					 errdetail("Its lease runs out on the nodes by itself.")));
		}
		else if (e->state == LOCK_RELEASE ||
				 (e->state != LOCK_FREE && BackendPidGetProc(e->owner_pid) == NULL))
		{
			e->state = LOCK_FREE;
			sk_lock_wake_waiters_locked(e->name);
		}
	}
	LWLockRelease(seckill_lock_table->lock);
}

/*
 * Lock requests that did not reach Redis (it is away): a waiter, which asks
 * again, keeps its place, or takes one in the order it came, which the
 * worker puts back in Redis once it is reached again.
 */
void
sk_lock_asked_in_vain(const SeckillRequest *const *requests, int n)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < n; i++)
		if (requests[i]->lock.waits)
			record(requests[i], LOCK_WAITING, 0, now);
}

/* On the Redlock nodes, by majority and in time for its lease: one lock. */
static void
acquire_by_redlock(const SeckillRequest *request, SeckillReply *reply)
{
	TimestampTz sent = GetCurrentTimestamp();
	char		why[SK_MESSAGE_LEN];
	SkScriptCall take,
				give;

	sk_redlock_lock_calls(request->lock.name, request->lock.owner, request->lock.lease_ms, &take, &give);
	switch (sk_redlock_acquire(&take, &give, request->lock.lease_ms, why, sizeof(why)))
	{
		case REDLOCK_BUSY:
			if (request->lock.waits)
				record(request, LOCK_WAITING, 0, sent);
			reply->status = SK_BUSY;
			return;
		case REDLOCK_FAILED:
			/* nodes that granted but missed the give-back: the keeper retries it */
			record(request, LOCK_RELEASE, 0, sent);
			/* not seckill.redis_host's fault: the generic hint would mislead */
			seckill_reply_error(reply, SK_ERR_INVALID, "%s", why);
			reply->sqlerrcode = ERRCODE_CONNECTION_FAILURE;
			return;
		case REDLOCK_ACQUIRED:
			break;
	}
	PG_TRY();
	{
		granted(request, reply, sent);
	}
	PG_CATCH();
	{
		/* no Redis I/O while the error is pending: the keeper gives the lease back */
		record(request, LOCK_RELEASE, 0, sent);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * Take the leases for the requests' owners, all in one pipeline (on the
 * Redlock nodes, one by one); SK_BUSY for those someone else holds.
 */
void
sk_lock_acquire_many(const SeckillRequest *const *requests, SeckillReply *const *replies, int n)
{
	TimestampTz sent = GetCurrentTimestamp();
	SkScriptCall *calls;
	int		   *result;
	int		   *places;
	bool	   *contended;
	bool		any_contended = false;
	char		why[SK_MESSAGE_LEN];
	volatile int i;

	if (sk_redlock_enabled())
	{
		for (i = 0; i < n; i++)
		{
			if (seckill_redis_tls)
			{
				/* as the backend says, which may not have read the reload yet */
				seckill_reply_error(replies[i], SK_ERR_INVALID, "seckill does not speak TLS to the Redlock nodes");
				replies[i]->sqlerrcode = ERRCODE_FEATURE_NOT_SUPPORTED;
			}
			else if (requests[i]->lock.mode == LOCK_EXCLUSIVE)
				acquire_by_redlock(requests[i], replies[i]);
			else
			{
				seckill_reply_error(replies[i], SK_ERR_INVALID,
									"shared and fair locks are not served by Redlock (seckill.redlock_nodes)");
				replies[i]->sqlerrcode = ERRCODE_FEATURE_NOT_SUPPORTED;
			}
		}
		return;
	}
	put_back_if_lost();
	/* a lock held here, which Redis would grant: has Redis lost its data? */
	contended = palloc(sizeof(bool) * n);
	for (i = 0; i < n; i++)
		any_contended |= contended[i] = held_here_by_another(requests[i]);
	if (any_contended)
		(void) put_back_if_flushed();
	calls = palloc(sizeof(SkScriptCall) * n);
	for (i = 0; i < n; i++)
	{
		const SeckillRequest *r = requests[i];

		calls[i] = sk_lock_call(SK_LOCK_TAKE, r->lock.mode, r->lock.name, r->lock.owner, r->lock.lease_ms,
							 r->lock.waits);
	}
	result = palloc(sizeof(int) * n);
	places = palloc(sizeof(int) * n);
	if (!sk_lease_run(calls, n, false, result, places, why, sizeof(why)))
	{
		/*
		 * The leases may have been taken: a waiter asks again (its next ask
		 * finds its lease, renewed), the keeper gives back the others'.
		 */
		sk_lock_asked_in_vain(requests, n);
		for (i = 0; i < n; i++)
		{
			if (!requests[i]->lock.waits)
				record(requests[i], LOCK_RELEASE, 0, sent);
			seckill_reply_error(replies[i], SK_ERR_REDIS, "%s", why);
		}
		return;
	}
	if (any_contended)
		refuse_grants_held_here(requests, result, contended, n);
	PG_TRY();
	{
		for (i = 0; i < n; i++)
		{
			if (result[i] == SK_LEASE_YES)
				granted(requests[i], replies[i], sent);
			else if (result[i] == SK_LEASE_NO)
			{
				/* a waiter (fair: with its place in line), shown in seckill.locks */
				if (requests[i]->lock.waits)
					record(requests[i], LOCK_WAITING, places[i], sent);
				replies[i]->status = SK_BUSY;
				replies[i]->values[0] = places[i];
			}
			else
				seckill_reply_error(replies[i], SK_ERR_REDIS_REFUSED, "taking lock \"%s\": %s",
									requests[i]->lock.name, why);
		}
	}
	PG_CATCH();
	{
		/* no Redis I/O while the error is pending: the keeper gives back the leases won */
		for (; i < n; i++)
			if (result[i] == SK_LEASE_YES)
				record(requests[i], LOCK_RELEASE, 0, sent);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/* The answer of Redis to the release of one lock. */
static void
released(const SeckillRequest *request, SeckillReply *reply, int result, bool reached, const char *why)
{
	const char *owner = request->lock.owner;
	SeckillLockEntry *e;

	if (result == SK_LEASE_FAILED)
	{
		/* the keeper tries again; until then the lease may run out */
		LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
		e = seckill_lock_of_owner(owner);
		if (e != NULL)
			e->state = LOCK_RELEASE;
		LWLockRelease(seckill_lock_table->lock);
		pg_atomic_write_u32(&seckill_lock_table->changed, 1);
		seckill_reply_error(reply, reached ? SK_ERR_REDIS_REFUSED : SK_ERR_REDIS, "releasing lock \"%s\": %s",
							request->lock.name, why);
		return;
	}
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	e = seckill_lock_of_owner(owner);
	if (e != NULL)
	{
		if (result == SK_LEASE_YES)
			remember_released(e);
		e->state = LOCK_FREE;
	}
	LWLockRelease(seckill_lock_table->lock);
	sk_lock_wake_waiters(request->lock.name);
	reply->status = SK_OK;
	reply->values[0] = result;
}

/*
 * Release the leases for the requests' owners, all in one pipeline, and
 * forget their locks; reply->values[0] is 1 when the lease was still the
 * owner's.
 */
void
sk_lock_release_many(const SeckillRequest *const *requests, SeckillReply *const *replies, int n)
{
	SkScriptCall *calls = palloc(sizeof(SkScriptCall) * n);
	int		   *result = palloc(sizeof(int) * n);
	char		why[SK_MESSAGE_LEN];
	bool		reached;

	if (sk_redlock_enabled() && seckill_redis_tls)
	{
		/* nothing in clear: the leases run out on the nodes by themselves */
		drop_redlock_in_clear();
		for (int i = 0; i < n; i++)
			released(requests[i], replies[i], SK_LEASE_NO, true, "");
		return;
	}
	put_back_if_lost();
	for (int i = 0; i < n; i++)
	{
		calls[i] = sk_lock_call(SK_LOCK_GIVE, requests[i]->lock.mode, requests[i]->lock.name,
							 requests[i]->lock.owner, 0, false);
	}
	reached = sk_lease_run(calls, n, sk_redlock_enabled(), result, NULL, why, sizeof(why));
	for (int i = 0; i < n; i++)
		released(requests[i], replies[i], result[i], reached, why);
}

void
sk_lock_release(const SeckillRequest *request, SeckillReply *reply)
{
	sk_lock_release_many(&request, &reply, 1);
}


/* Work the keeper found due, copied out of the table. */
typedef struct KeeperJob
{
	char		name[SK_LOCK_NAME_LEN + 1];
	char		owner[SK_LOCK_OWNER_LEN];
	SeckillLockMode mode;
	int32		lease_ms;
	bool		release;
} KeeperJob;

/*
 * Renew the watchdog leases due (a third of their lease after the last
 * renewal, within seckill.lock_max_hold) and release the locks whose owner
 * is done or gone, in one pipeline.  Returns the milliseconds until the next
 * renewal is due, or -1 when none is.
 */
long
sk_lock_keeper_tick(void)
{
	TimestampTz now = GetCurrentTimestamp();
	KeeperJob  *jobs = palloc(sizeof(KeeperJob) * seckill_max_locks);
	int			njobs = 0;
	long		next = -1;
	int		   *result;
	SkScriptCall *calls;
	char		why[SK_MESSAGE_LEN];
	bool		put_back = false;

	if (sk_redlock_enabled() && seckill_redis_tls)
	{
		drop_redlock_in_clear();
		return -1;
	}
	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < seckill_max_locks; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];
		TimestampTz due;
		bool		release;

		if (e->state == LOCK_FREE)
			continue;
		release = e->state == LOCK_RELEASE || BackendPidGetProc(e->owner_pid) == NULL;
		if (!release && e->state != LOCK_HELD)
			continue;
		if (!release && !seckill_lock_live(e, now))
		{
			/* an explicit lease, or one past seckill.lock_max_hold, ran out */
			e->state = LOCK_LOST;
			ereport(LOG,
					(errmsg("seckill lock \"%s\" of backend %d ran out of its lease while held%s",
							e->name, e->owner_pid, e->watchdog ? " (seckill.lock_max_hold reached)" : "")));
			continue;
		}
		if (!release && (!e->watchdog ||
						 (seckill_lock_max_hold > 0 &&
						  now >= TimestampTzPlusMilliseconds(e->acquired_at, seckill_lock_max_hold))))
		{
			/* nobody renews it: look again when its lease runs out */
			long		ms = TimestampDifferenceMilliseconds(now,
															 TimestampTzPlusMilliseconds(e->renewed_at, e->lease_ms)) + 1;

			next = next < 0 ? ms : Min(next, ms);
			continue;
		}
		due = TimestampTzPlusMilliseconds(e->renewed_at, e->lease_ms / 3);
		if (!release && now < due)
		{
			long		ms = TimestampDifferenceMilliseconds(now, due) + 1;

			next = next < 0 ? ms : Min(next, ms);
			continue;
		}
		strlcpy(jobs[njobs].name, e->name, sizeof(jobs[njobs].name));
		strlcpy(jobs[njobs].owner, e->owner, sizeof(jobs[njobs].owner));
		jobs[njobs].mode = e->mode;
		jobs[njobs].lease_ms = e->lease_ms;
		jobs[njobs].release = release;
		njobs++;
	}
	LWLockRelease(seckill_lock_table->lock);
	if (njobs == 0)
		return next;
	put_back_if_lost();

	/* the answer of each job: SK_LEASE_YES, _NO or _FAILED */
	calls = palloc(sizeof(SkScriptCall) * njobs);
	for (int i = 0; i < njobs; i++)
	{
		calls[i] = sk_lock_call(jobs[i].release ? SK_LOCK_GIVE : SK_LOCK_RENEW, jobs[i].mode, jobs[i].name,
							 jobs[i].owner, jobs[i].lease_ms, false);
	}
	result = palloc(sizeof(int) * njobs);
	if (!sk_lease_run(calls, njobs, sk_redlock_enabled(), result, NULL, why, sizeof(why)) &&
		!sk_redlock_enabled())
		return 1000;			/* Redis is away: try again soon */
	/* a lease gone: lost, unless Redis lost its data (then it is put back) */
	for (int i = 0; i < njobs && !put_back && !sk_redlock_enabled(); i++)
		if (!jobs[i].release && result[i] == SK_LEASE_NO)
		{
			put_back = put_back_if_flushed();
			break;
		}

	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	for (int i = 0; i < njobs; i++)
	{
		SeckillLockEntry *e = seckill_lock_of_owner(jobs[i].owner);

		if (e == NULL)
			continue;
		if (result[i] == SK_LEASE_FAILED)
		{
			/* Redis refused (loading, a failover) or too few nodes answered: again soon */
			next = next < 0 ? 100 : Min(next, 100);
			continue;
		}
		if (jobs[i].release)
		{
			if (result[i] == SK_LEASE_YES)
				remember_released(e);
			e->state = LOCK_FREE;
			sk_lock_wake_waiters_locked(jobs[i].name);
		}
		else if (result[i] == SK_LEASE_YES)
		{
			e->renewed_at = now;
			e->renewals++;
			next = next < 0 ? e->lease_ms / 3 : Min(next, e->lease_ms / 3);
		}
		else if (put_back)
			next = next < 0 ? 1 : Min(next, 1);	/* renewed next time */
		else if (e->state == LOCK_HELD)
		{
			e->state = LOCK_LOST;
			ereport(LOG,
					(errmsg("seckill lost lock \"%s\" of backend %d: its lease was gone when the worker renewed it",
							e->name, e->owner_pid)));
		}
	}
	LWLockRelease(seckill_lock_table->lock);
	return next;
}
