/*-------------------------------------------------------------------------
 *
 * lock_waiters.h
 *		The backends waiting for the SQL callers' locks, woken.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_LOCK_WAITERS_H
#define SECKILL_LOCK_WAITERS_H

#include "seckill.h"

/* under seckill_lock_table->lock, shared at least */
extern void sk_lock_wake_waiters_locked(const char *name);
extern void sk_lock_wake_waiters(const char *name);
extern void sk_lock_hear_releases(void);

#endif							/* SECKILL_LOCK_WAITERS_H */
