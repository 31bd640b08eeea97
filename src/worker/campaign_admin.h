/*-------------------------------------------------------------------------
 *
 * campaign_admin.h
 *		The worker's admin work on campaigns.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CAMPAIGN_ADMIN_H
#define SECKILL_CAMPAIGN_ADMIN_H

#include "shared/call.h"

extern void sk_serve_admin(const SeckillRequest *request, SeckillReply *reply);

#endif							/* SECKILL_CAMPAIGN_ADMIN_H */
