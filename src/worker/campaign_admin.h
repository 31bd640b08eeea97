/*-------------------------------------------------------------------------
 *
 * campaign_admin.h
 *		The worker's admin work on campaigns, a handler per request kind.
 *		Those that write hold the campaign's lease (worker/dispatch.c takes
 *		it around them).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CAMPAIGN_ADMIN_H
#define SECKILL_CAMPAIGN_ADMIN_H

#include "shared/call.h"

extern void sk_admin_preheat(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_close(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_status(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_reconcile(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_cancel(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_release(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_restock(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_limits(const SeckillRequest *request, SeckillReply *reply);
extern void sk_admin_settle_take_over(void);

#endif							/* SECKILL_CAMPAIGN_ADMIN_H */
