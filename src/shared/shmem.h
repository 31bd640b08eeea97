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
	pg_atomic_uint64 orders_lsn;	/* the end of the worker's last commit of
									 * orders, maybe not flushed yet;
									 * PG_UINT64_MAX while it commits */
} SeckillShared;

extern SeckillShared *seckill_shared;


#endif							/* SECKILL_SHMEM_H */
