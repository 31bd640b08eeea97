/*-------------------------------------------------------------------------
 *
 * lock_table.c
 *		The table of the SQL callers' locks in shared memory, which the
 *		backends that hold them and the worker that keeps their leases share.
 *
 *-------------------------------------------------------------------------
 */
#include "shared/lock_table.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "shared/shmem.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

SeckillLockTable *seckill_lock_table = NULL;

static Size
table_size(void)
{
	return add_size(offsetof(SeckillLockTable, entries),
					mul_size(seckill_max_locks, sizeof(SeckillLockEntry)));
}

/* The table starts zeroed: every entry free. */
static void
table_init(void *base, bool found, LWLockPadded *lwlocks)
{
	seckill_lock_table = base;
	if (found)
		return;
	memset(seckill_lock_table, 0, table_size());
	seckill_lock_table->lock = &lwlocks[0].lock;
	pg_atomic_init_u32(&seckill_lock_table->changed, 0);
}

void
seckill_lock_table_register(void)
{
	static const SeckillShmemPart part = {"seckill locks", 1, table_size, table_init};

	seckill_shmem_register(&part);
}

/* Never 0, which means "waits for no lock". */
uint32
seckill_lock_wait_hash(const char *name)
{
	uint32		h = hash_bytes((const unsigned char *) name, strlen(name));

	return h ? h : 1;
}

/*
 * Is the lease of a held lock still running?  It runs from its last renewal
 * (the watchdog's every third of it), less an allowance for clock drift:
 * a lock the worker could not renew in time counts as gone.
 */
bool
seckill_lock_live(const SeckillLockEntry *e, TimestampTz now)
{
	if (e->state != LOCK_HELD)
		return false;
	return now < TimestampTzPlusMilliseconds(e->renewed_at, e->lease_ms - (e->lease_ms / 100 + 2));
}

/* Tell the worker that locks wait to be released. */
void
seckill_lock_wake_keeper(void)
{
	pg_atomic_write_u32(&seckill_lock_table->changed, 1);
	if (seckill_shared->worker_latch)
		SetLatch(seckill_shared->worker_latch);
}

/* The table's entry of this owner token, in any state but free; under locks_lock. */
SeckillLockEntry *
seckill_lock_of_owner(const char *owner)
{
	for (int i = 0; i < seckill_max_locks; i++)
		if (seckill_locks[i].state != LOCK_FREE && strcmp(seckill_locks[i].owner, owner) == 0)
			return &seckill_locks[i];
	return NULL;
}

/*
 * Hand the lock of this owner token, if held or waited for, to the worker
 * to release (or to give up its claim or place in line): its caller gave up
 * or could not release it now.
 */
void
seckill_lock_hand_back(const char *owner)
{
	SeckillLockEntry *e;

	LWLockAcquire(seckill_lock_table->lock, LW_EXCLUSIVE);
	e = seckill_lock_of_owner(owner);
	if (e != NULL && (e->state == LOCK_HELD || e->state == LOCK_WAITING))
		e->state = LOCK_RELEASE;
	LWLockRelease(seckill_lock_table->lock);
	seckill_lock_wake_keeper();
}

