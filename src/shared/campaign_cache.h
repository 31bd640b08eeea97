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

#include "seckill.h"

#include "port/atomics.h"
#include "storage/lwlock.h"

/* A preheated campaign, as backends need it to answer without the worker. */
typedef struct SeckillCampaign
{
	int64		id;				/* 0: entry unused */
	char		goods[SECKILL_MAX_GOODS_LEN + 1];
	TimestampTz starts_at;
	TimestampTz ends_at;
	int32		per_user_limit;
	SeckillLimits limits;
	/*
	 * Tells this campaign's rate-limit buckets in Redis from those of a
	 * campaign with the same id in an earlier installation.
	 */
	TimestampTz created_at;
	int			stats;			/* its entry in seckill_stats */
	uint64		empty_shards;	/* the worker's: a bit per shard with no stock */
	pg_atomic_uint32 sold_out;	/* every shard is empty */
} SeckillCampaign;

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

/* worker */
extern SeckillCampaign *seckill_campaign_find(int64 id);
extern bool seckill_campaign_has_room(int64 id);
extern bool seckill_campaign_store(int64 id, const char *goods, TimestampTz starts_at,
								   TimestampTz ends_at, int per_user_limit,
								   const SeckillLimits *limits, TimestampTz created_at,
								   bool sold_out);
extern void seckill_campaign_set_limits(int64 id, const SeckillLimits *limits);
extern void seckill_campaign_forget(int64 id);
extern bool seckill_campaign_cached(int64 id);
extern void seckill_campaign_note_stock(int64 campaign_id, int shard, long long stock);
extern void seckill_campaign_note_sold_out(int64 campaign_id);

#endif							/* SECKILL_CAMPAIGN_CACHE_H */
