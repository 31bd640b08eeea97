/*-------------------------------------------------------------------------
 *
 * dispatch.h
 *		The table of request kinds, and the serving of every request that
 *		is not a purchase.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_DISPATCH_H
#define SECKILL_DISPATCH_H

#include "shared/call.h"
#include "worker/round_item.h"

extern void sk_dispatch_serve(RoundItem *item);
extern bool sk_dispatch_paced(SeckillRequestKind kind);
extern void sk_dispatch_locks(RoundItem *items, int nitems, SeckillRequestKind kind);
extern void sk_dispatch_reply_error(MemoryContext cxt, SeckillReply *reply);

#endif							/* SECKILL_DISPATCH_H */
