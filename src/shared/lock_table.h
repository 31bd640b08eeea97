/*-------------------------------------------------------------------------
 *
 * lock_table.h
 *		The table of the SQL callers' distributed locks in shared memory:
 *		leases in Redis with an owner token per acquisition, held and
 *		renewed by the worker, recorded here so that every backend and the
 *		worker see them.
 *
 * A backend asks the worker to take a lease (lua/acquire.lua) and, while it
 * waits, asks again with a jittered backoff.  The worker records the lock
 * in the shared table, renews it (lua/renew.lua) every third of its lease
 * while its owner lives, unless the caller gave an explicit lease, and
 * releases it (lua/unlock.lua, owner only) when the owner unlocks, ends
 * its transaction (xact locks) or exits.  Each acquisition gets a fencing
 * token from a PostgreSQL sequence, which only grows.
 *
 * A shared lock (lua/acquire_shared.lua) coexists with other shared
 * holders of its name, not with an exclusive one; a fair lock
 * (lua/acquire_fair.lua) is exclusive, granted in the order its takers
 * came to wait.  The table also shows the takers that wait, a fair
 * waiter with its place in line.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_LOCK_TABLE_H
#define SECKILL_LOCK_TABLE_H

#include "seckill.h"

#include "port/atomics.h"
#include "storage/lwlock.h"

typedef enum SeckillLockState
{
	LOCK_FREE,
	LOCK_HELD,
	LOCK_RELEASE,				/* its owner is done with it: the worker releases it */
	LOCK_LOST,					/* a renewal found the lease gone */
	LOCK_WAITING				/* its owner waits for it (fair: in its line) */
} SeckillLockState;

/* How a lock is held: the SQL function that took it. */
typedef enum SeckillLockMode
{
	LOCK_EXCLUSIVE,				/* seckill_lock, seckill_lock_all */
	LOCK_FAIR,					/* seckill_lock_fair: exclusive, in order of arrival */
	LOCK_SHARED					/* seckill_lock_shared */
} SeckillLockMode;

typedef struct SeckillLockEntry
{
	SeckillLockState state;
	char		name[SK_LOCK_NAME_LEN + 1];
	char		owner[SK_LOCK_OWNER_LEN];	/* the lease's value in Redis */
	int			owner_pid;
	SeckillLockMode mode;
	int32		place;			/* fair and waiting: its place in line at the last ask */
	bool		xact;			/* released at the end of its transaction */
	bool		watchdog;		/* renewed by the worker */
	int32		depth;			/* times taken by its owner, less the unlocks */
	int64		token;			/* fencing token */
	int32		lease_ms;
	TimestampTz acquired_at;
	TimestampTz renewed_at;		/* the lease runs from here */
	int32		renewals;
} SeckillLockEntry;

typedef struct SeckillLockTable
{
	LWLock	   *lock;			/* guards the entries */
	pg_atomic_uint32 changed;	/* a lock was taken or handed back: the keeper looks */
	SeckillLockEntry entries[FLEXIBLE_ARRAY_MEMBER];	/* seckill.max_locks of them */
} SeckillLockTable;

extern SeckillLockTable *seckill_lock_table;
#define seckill_locks (seckill_lock_table->entries)

extern void seckill_lock_table_register(void);
extern uint32 seckill_lock_wait_hash(const char *name);
extern bool seckill_lock_live(const SeckillLockEntry *e, TimestampTz now);
extern SeckillLockEntry *seckill_lock_of_owner(const char *owner);
extern void seckill_lock_hand_back(const char *owner);
extern void seckill_lock_wake_keeper(void);

#endif							/* SECKILL_LOCK_TABLE_H */
