/*-------------------------------------------------------------------------
 *
 * lock_waiters.c
 *		The backends waiting for the SQL callers' locks, woken: when the
 *		worker releases a lock (worker/lock_keeper.c), and when a release
 *		is announced on the channel, by this cluster or another sharing the
 *		Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/lock_waiters.h"

#include "layout/keys.h"
#include "redis/pubsub.h"
#include "shared/call.h"
#include "shared/lock_table.h"
#include "storage/proc.h"
#include "storage/procarray.h"

/*
 * Wake the backends waiting for this lock: it was just released (or a
 * waiter left its line); under locks_lock.  An exclusive lock goes to one
 * taker at a time: when no shared taker waits here, only the one that has
 * waited longest is woken, not all to find that they must wait on (the
 * others ask again within 100 ms, which keeps a fair waiter's place).  It is
 * the first in a fair line among this cluster's waiters: they stand in line
 * in the order of their first asks, which the worker sent in the order it
 * recorded them.
 */
void
sk_lock_wake_waiters_locked(const char *name)
{
	uint32		h = seckill_lock_wait_hash(name);
	int			head_pid = 0;
	TimestampTz head_since = 0;
	bool		exclusive = true;

	for (int i = 0; i < seckill_max_locks && exclusive; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];

		if (e->state != LOCK_WAITING || strcmp(e->name, name) != 0)
			continue;
		exclusive = e->mode != LOCK_SHARED;
		if (exclusive && (head_pid == 0 || e->acquired_at < head_since))
		{
			head_since = e->acquired_at;
			head_pid = e->owner_pid;
		}
	}
	if (exclusive && head_pid != 0)
	{
		PGPROC	   *head = BackendPidGetProc(head_pid);

		if (head != NULL)
		{
			SetLatch(&head->procLatch);
			return;
		}
	}
	for (int i = 0; i < seckill_slot_count(); i++)
		if (seckill_slots[i].lock_wait == h && seckill_slots[i].latch != NULL)
			SetLatch(seckill_slots[i].latch);
}

void
sk_lock_wake_waiters(const char *name)
{
	LWLockAcquire(seckill_lock_table->lock, LW_SHARED);
	sk_lock_wake_waiters_locked(name);
	LWLockRelease(seckill_lock_table->lock);
}

/*
 * A release announced on the channel (by this cluster or another sharing
 * the Redis): wake the local waiters of that lock.
 */
static void
lock_released(const char *key)
{
	char	   *name = sk_keys_lock_name(key);

	if (name != NULL)
		sk_lock_wake_waiters(name);
}

/*
 * Releases were announced that the subscription could not keep: any lock
 * waited for here may have been released, so each is woken as a release
 * wakes it (its longest waiter, or all when a shared taker waits), once.
 */
static void
lock_released_any(void)
{
	LWLockAcquire(seckill_lock_table->lock, LW_SHARED);
	for (int i = 0; i < seckill_max_locks; i++)
	{
		SeckillLockEntry *e = &seckill_locks[i];
		bool		woken = false;

		if (e->state != LOCK_WAITING)
			continue;
		for (int j = 0; j < i && !woken; j++)
			woken = seckill_locks[j].state == LOCK_WAITING && strcmp(seckill_locks[j].name, e->name) == 0;
		if (!woken)
			sk_lock_wake_waiters_locked(e->name);
	}
	LWLockRelease(seckill_lock_table->lock);
}

/*
 * The lock releases announced on the channel since the last look, by this
 * cluster or another sharing the Redis: their local waiters are woken.  The
 * subscription keeps them as any Redis wait reads them (redis/pubsub.c);
 * the worker takes them after each round, between rounds and around the
 * idle wait, which a message ends.  Too many to keep: any lock waited for
 * may have been released.
 */
void
sk_lock_hear_releases(void)
{
	char	  **keys;
	bool		overflowed;
	int			n = sk_pubsub_take(&keys, &overflowed);

	if (overflowed)
		lock_released_any();
	else
		for (int i = 0; i < n; i++)
			lock_released(keys[i]);
}
