/*-------------------------------------------------------------------------
 *
 * campaign_cache.h
 *		The preheated campaigns in shared memory, so that backends answer
 *		what they can (unknown, not started, ended, sold out) without the
 *		worker.  The worker keeps it; backends read it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CAMPAIGN_CACHE_H
#define SECKILL_CAMPAIGN_CACHE_H

#include "campaign.h"

#include "port/atomics.h"
#include "storage/lwlock.h"

/*
 * A preheated campaign: its row as the worker read it when it loaded the
 * campaign (or changed its limits; "sold" is not kept up to date), and what
 * the worker keeps of Redis' stock.
 */
/* A campaign's stock shards: 1 to 64 (seckill.campaigns' check), a bit each in a uint64. */
#define SECKILL_MAX_SHARDS 64

typedef struct SeckillCampaign
{
	SeckillCampaignRow row;		/* row.id 0: entry unused */
	int			stats;			/* its entry in seckill_stats */
	uint64		empty_shards;	/* the worker's: a bit per shard with no stock */
	uint64		known_shards;	/* a bit per shard whose stock[] the worker saw */
	int32		stock[SECKILL_MAX_SHARDS];	/* each shard's stock in Redis as last seen */
	pg_atomic_uint32 sold_out;	/* every shard is empty */
	SeckillLine line;			/* its waiting line, where row.limits.queue */
} SeckillCampaign;

/*
 * What a storefront shows of a preheated campaign: its row's times and
 * stock, the sold-out flag, the stock left in Redis (-1 while the worker
 * has not seen every shard's stock since it cached the campaign), and the
 * length of its waiting line.
 */
typedef struct SeckillStorefront
{
	int64		id;
	TimestampTz starts_at;
	TimestampTz ends_at;
	int32		total_stock;
	int64		remaining;
	bool		sold_out;
	int64		queue_length;	/* its waiting line's, or -1: none, or not read yet */
} SeckillStorefront;

typedef struct SeckillCampaignCache
{
	LWLock	   *lock;			/* guards the entries */
	SeckillCampaign entries[FLEXIBLE_ARRAY_MEMBER];	/* seckill.max_campaigns of them */
} SeckillCampaignCache;

extern SeckillCampaignCache *seckill_campaign_cache;
#define seckill_campaigns (seckill_campaign_cache->entries)

extern void seckill_campaign_cache_register(void);

/* backends */
extern bool seckill_campaign_lookup(const char *goods, SeckillCampaign *out);
extern bool seckill_campaign_sold_out(int64 id);
extern bool seckill_campaign_storefront(const char *goods, SeckillStorefront *out);

/* worker */
extern SeckillCampaign *seckill_campaign_find(int64 id);
extern bool seckill_campaign_has_room(int64 id);
extern bool seckill_campaign_store(const SeckillCampaignRow *row, bool sold_out);
extern void seckill_campaign_set_limits(int64 id, const SeckillLimits *limits);
extern void seckill_campaign_set_total_stock(int64 id, int32 total_stock);
extern void seckill_campaign_forget(int64 id);
extern bool seckill_campaign_cached(int64 id);
extern void seckill_campaign_note_stock(int64 campaign_id, int shard, long long stock);
extern void seckill_campaign_note_sold_out(int64 campaign_id);
extern void seckill_campaign_set_line(int64 id, const SeckillLine *line);
extern void seckill_campaign_lines_unloaded(void);

#endif							/* SECKILL_CAMPAIGN_CACHE_H */
