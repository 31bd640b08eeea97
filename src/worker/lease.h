/*-------------------------------------------------------------------------
 *
 * lease.h
 *		The worker's lease on a campaign for its admin work.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_LEASE_H
#define SECKILL_LEASE_H

#include "shared/call.h"

typedef struct SkLease SkLease;

extern SkLease *sk_lease_take(int64 campaign_id, SeckillReply *reply);
extern void sk_lease_keep(void);
extern void sk_lease_fence(void);
extern void sk_lease_give(void);
extern void sk_lease_give_if_held(void);
extern SkLease *sk_lease_detach(void);
extern void sk_lease_attach(SkLease *lease);

#endif							/* SECKILL_LEASE_H */
