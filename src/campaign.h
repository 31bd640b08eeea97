/*-------------------------------------------------------------------------
 *
 * campaign.h
 *		One campaign, as a row of seckill.campaigns: the one type that the
 *		store reads (store/campaigns.c), the worker works with and the
 *		campaign cache in shared memory keeps.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CAMPAIGN_H
#define SECKILL_CAMPAIGN_H

#include "seckill.h"

#include "datatype/timestamp.h"

typedef struct SeckillCampaignRow
{
	int64		id;
	char		goods[SECKILL_MAX_GOODS_LEN + 1];
	int32		total_stock;
	int32		sold;
	int32		per_user_limit;
	TimestampTz starts_at;
	TimestampTz ends_at;
	char		state[16];		/* draft, preheated or closed */
	SeckillLimits limits;		/* its token secret only where read by the worker */
	TimestampTz created_at;
	bool		rebuy_after_cancel;
} SeckillCampaignRow;

#endif							/* SECKILL_CAMPAIGN_H */
