/*-------------------------------------------------------------------------
 *
 * lock_keeper.h
 *		The worker's side of the SQL callers' locks: it takes and releases
 *		their leases in Redis and renews them while their owners live.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_LOCK_KEEPER_H
#define SECKILL_LOCK_KEEPER_H

#include "shared/call.h"

extern void sk_lock_keeper_init(void);
extern void sk_lock_release(const SeckillRequest *request, SeckillReply *reply);
extern void sk_lock_acquire_many(const SeckillRequest *const *requests, SeckillReply *const *replies, int n);
extern void sk_lock_release_many(const SeckillRequest *const *requests, SeckillReply *const *replies, int n);
extern void sk_lock_asked_in_vain(const SeckillRequest *const *requests, int n);
extern long sk_lock_keeper_tick(void);

#endif							/* SECKILL_LOCK_KEEPER_H */
