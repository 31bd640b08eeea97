/*-------------------------------------------------------------------------
 *
 * lease.h
 *		Leases in Redis: a key held by an owner token for a time, renewed and
 *		given back only by that owner.  One type for the campaigns' admin
 *		work and the SQL callers' locks.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_LEASE_H
#define SECKILL_LEASE_H

#include "layout/lease_scripts.h"
#include "shared/call.h"

/* Each call's SK_LEASE_YES, _NO or _FAILED (layout/lease_scripts.h). */
extern bool sk_lease_run(const SkScriptCall *calls, int n, bool on_redlock, int *result,
						 int *places, char *why, size_t whylen);

/* The worker's lease on a campaign, for its admin work. */
typedef struct SkLease SkLease;

extern SkLease *sk_lease_take(int64 campaign_id, SeckillReply *reply);
extern void sk_lease_keep(void);
extern void sk_lease_fence(void);
extern void sk_lease_give(void);
extern void sk_lease_give_if_held(void);
extern SkLease *sk_lease_resume(int64 campaign_id, SeckillReply *reply);
extern void sk_lease_keep_for_next(void);
extern void sk_lease_give_kept(void);
extern long sk_lease_give_kept_if_idle(void);
extern SkLease *sk_lease_detach(void);
extern void sk_lease_attach(SkLease *lease);

#endif							/* SECKILL_LEASE_H */
