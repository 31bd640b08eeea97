/*-------------------------------------------------------------------------
 *
 * shmem.h
 *		seckill's shared memory: the parts its modules register, and the
 *		worker's state that backends read.
 *
 * Each module that keeps something in shared memory (the call transport,
 * the campaign cache, the figures, the lock table) registers a part from
 * _PG_init, with its size, its LWLocks and its initialisation; this module
 * requests and sets them all up the PostgreSQL 15 way, and knows none of
 * them.
 *
 * The lock protocol.  What guards what: calls->lock (call.c, an LWLock)
 * the queue of pending slots; its len is also read bare, as a hint (the
 * admission of backend/buy.c, seckill.stats).  slot->mutex (call.c, a
 * spinlock per slot) all of a slot but its atomics and lock_wait.  The
 * lock waiters' wake-up (sk_lock_wake_waiters_locked and lock_released_any
 * in worker/lock_waiters.c) reads latch and lock_wait bare, a hint that a
 * waiter's backoff of 100 ms at most covers; answer_wake reads latch bare
 * off Linux, written under the mutex before the request was queued.
 * seckill_campaign_cache->lock
 * (campaign_cache.c) the campaign each entry holds (its row), and the
 * campaign_id and goods of the stats entries: the worker and
 * reset_shared_state (backend/admin.c) write them in exclusive mode,
 * backends read them in shared mode, the worker reads them bare.  An
 * entry's stock[], known_shards, empty_shards and sold_out have one
 * writer, the worker, which writes them bare.  seckill_lock_table->lock
 * (lock_table.c) the SQL callers' locks, written by both sides.
 * seckill_redis_nodes->lock (redis_nodes.c) the masters' view, written by
 * the worker alone (redis/topology.c, and redis/conn.c when the
 * connections are lost), which reads it bare.
 * seckill_figures->mutex (stats.c, a spinlock) since and base[].
 * SeckillShared's plain fields have one writer, the worker; backends read
 * them bare.  seckill keeps no condition variable.
 *
 * No two of these locks are ever held at once: seckill_call drops the
 * slot's mutex before it queues under calls->lock, the stats view the
 * figures' mutex before it takes the cache's lock, the worker's round
 * drains the queue before it takes the slots one by one.  Under the lock
 * table's lock the worker sets latches and takes ProcArrayLock
 * (BackendPidGetProc); nothing else of PostgreSQL's is taken under ours,
 * and none of ours under PostgreSQL's.
 *
 * A spinlock is held across assignments, copies and atomic reads only:
 * nothing that can fail or wait; latches are set after the release.  An
 * LWLock is held for scans and copies: never across a latch wait, Redis,
 * SQL or a seckill_call.  The worker copies the lock entries due out of the
 * table, releases it, talks to Redis, then finds them again by owner; under
 * the table's lock it may ereport LOG, never ERROR.  No Redis wait takes
 * it: the releases the subscription reads within one are kept there
 * (redis/conn.c), and the worker wakes their waiters after the wait, from
 * its loop (sk_lock_hear_releases in worker/lock_waiters.c).  Backends may
 * fail (out of memory) filling a view's tuplestore under a shared lock: the
 * abort releases it, before backend/locks.c's transaction callback takes
 * the lock table's lock.
 *
 * The lock-free parts.  worker_idle: a caller queues its slot, then (a full
 * barrier) reads worker_latch and worker_idle and sets the latch only when
 * worker_idle is 1; the worker sets worker_idle to 1, then (a full barrier)
 * looks at the queue once more before it sleeps.  Each reads after its own
 * write, so one sees the other's: no request waits for a sleeping worker.
 * The worker's Redis waits reset its latch (redis/conn.c), harmless here:
 * it looks at the queue after every round.  answers and sleeping, per slot:
 * the caller reads answers, then (a read barrier) the slot's state; a waker
 * writes the state under the mutex, then bumps answers and reads sleeping
 * (fetch-add: a full barrier); the caller sets sleeping by exchange (a full
 * barrier) before FUTEX_WAIT compares answers with the count it read.
 * Either the waker sees sleeping and wakes the futex, or the futex sees the
 * new count and does not sleep; a sleep is a slice of 10 ms at most anyway.
 * Off Linux the caller's latch is set after the state is written, and the
 * state read after each ResetLatch.  changed (lock table):
 * whoever hands a lock back sets it, then the worker's latch; the worker
 * clears it by exchange between rounds.  A Redis or SQL wait after that
 * exchange may reset the latch, so the idle worker reads changed beside
 * the queue after announcing itself idle, and does not sleep while it is
 * set; a later mark sets the latch it sleeps on.  A campaign's
 * stock[s] is written before its bit in known_shards (a write barrier) and
 * read after it (a read barrier, the storefront).  The waiting lines'
 * tickets (queue_tickets.c): one writer, the worker; a slot's value is
 * written before its key (a write barrier) and read after it (a read
 * barrier).  The figures,
 * install_generation and sold_out are read alone: no order is needed.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_SHMEM_H
#define SECKILL_SHMEM_H

#include "seckill.h"

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

typedef struct SeckillShmemPart
{
	const char *name;			/* of the struct, and of its LWLock tranche */
	int			nlwlocks;		/* LWLocks it needs */
	Size		(*size) (void);
	/* found: another process set it up already; lwlocks: NULL if none */
	void		(*init) (void *base, bool found, LWLockPadded *lwlocks);
} SeckillShmemPart;

extern void seckill_shmem_register(const SeckillShmemPart *part);
extern void seckill_shmem_init(void);

/* The worker's state, for backends and the worker's next incarnation. */
typedef struct SeckillShared
{
	Latch	   *worker_latch;	/* NULL while no worker serves requests */
	pg_atomic_uint32 worker_idle;	/* 1 while the worker waits for requests:
									 * a caller sets its latch only then */
	int			worker_pid;		/* its process, while it serves */
	Oid			database_id;	/* the database the worker serves */
	pg_atomic_uint32 install_generation;	/* bumped by each CREATE EXTENSION */
	bool		sales_from_database;	/* Redis unreachable: selling from PostgreSQL alone */
	int			connect_failures;	/* worker starts in a row that could not reach seckill.database */
	bool		fenced;			/* a newer primary sells through this Redis (worker/epoch.c) */
} SeckillShared;

extern SeckillShared *seckill_shared;


#endif							/* SECKILL_SHMEM_H */
