/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		seckill's shared memory: the parts registered by its modules, each
 *		a struct of its own with its own LWLocks, and the worker's state.
 *
 *-------------------------------------------------------------------------
 */
#include "shared/shmem.h"

#include "access/xlogdefs.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#define MAX_PARTS 8

SeckillShared *seckill_shared = NULL;

static const SeckillShmemPart *parts[MAX_PARTS];
static int	nparts = 0;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
shared_size(void)
{
	return sizeof(SeckillShared);
}

static void
shared_init(void *base, bool found, LWLockPadded *lwlocks)
{
	seckill_shared = base;
	if (found)
		return;
	memset(seckill_shared, 0, sizeof(SeckillShared));
	pg_atomic_init_u32(&seckill_shared->install_generation, 0);
	pg_atomic_init_u32(&seckill_shared->worker_idle, 1);
}

/* From _PG_init: a part to request and set up with the others. */
void
seckill_shmem_register(const SeckillShmemPart *part)
{
	if (nparts == MAX_PARTS)
		elog(ERROR, "too many parts of seckill's shared memory");
	parts[nparts++] = part;
}

static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	for (int i = 0; i < nparts; i++)
	{
		RequestAddinShmemSpace(parts[i]->size());
		if (parts[i]->nlwlocks > 0)
			RequestNamedLWLockTranche(parts[i]->name, parts[i]->nlwlocks);
	}
}

static void
shmem_startup(void)
{
	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	for (int i = 0; i < nparts; i++)
	{
		bool		found;
		void	   *base = ShmemInitStruct(parts[i]->name, parts[i]->size(), &found);

		parts[i]->init(base, found,
					   parts[i]->nlwlocks > 0 ? GetNamedLWLockTranche(parts[i]->name) : NULL);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* From _PG_init, after the modules registered their parts. */
void
seckill_shmem_init(void)
{
	static const SeckillShmemPart part = {"seckill", 0, shared_size, shared_init};

	seckill_shmem_register(&part);
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
}
