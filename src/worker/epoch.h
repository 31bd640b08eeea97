/*-------------------------------------------------------------------------
 *
 * epoch.h
 *		Who sells through this Redis after a PostgreSQL failover: epochs,
 *		fencing, and order ids that are never handed out twice.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_EPOCH_H
#define SECKILL_EPOCH_H

#include "shared/call.h"

extern const char *sk_epoch_arg(void);
extern bool sk_epoch_check(void);
extern bool sk_epoch_recheck(void);
extern bool sk_epoch_fenced(void);
extern bool sk_epoch_lost(void);
extern void sk_epoch_claim(int slot, uint64 seq);
extern void sk_epoch_claim_drop(void);
extern uint32 sk_epoch_losses(void);
extern void sk_epoch_fence(const char *what);
extern void sk_epoch_recall(void);
extern void sk_epoch_reply_fenced(SeckillReply *reply);
extern int64 sk_epoch_record_ids(int64 first, int64 last);
extern int	sk_epoch_stale_campaigns(const int64 **ids);
extern bool sk_epoch_unstale(int64 id, int nshards);

#endif							/* SECKILL_EPOCH_H */
