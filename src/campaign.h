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

/*
 * A campaign's waiting line (seckill_queue_join), as the worker last
 * committed it to seckill.queue_places and seckill.queue_lines
 * (worker/waiting_room.c): backends answer its buyers from it.
 */
typedef struct SeckillLine
{
	bool		loaded;			/* read by the running worker: else backends read PostgreSQL */
	bool		drawn;			/* the early joins have their tickets */
	int64		last;			/* the last ticket given */
	int64		admitted;		/* every ticket up to it is admitted */
	int64		early;			/* joins before the start, waiting for the draw */
	int64		expired;		/* passes that ran out unused, as last counted */
	double		pace;			/* buyers admitted per second lately */
} SeckillLine;

#endif							/* SECKILL_CAMPAIGN_H */
