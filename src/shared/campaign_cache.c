/*-------------------------------------------------------------------------
 *
 * campaign_cache.c
 *		The preheated campaigns in shared memory: written by the worker,
 *		read by backends to answer without it.
 *
 *-------------------------------------------------------------------------
 */
#include "shared/campaign_cache.h"

#include "shared/shmem.h"
#include "shared/stats.h"
#include "storage/shmem.h"

SeckillCampaignCache *seckill_campaign_cache = NULL;

/* The bits of a campaign's shards in empty_shards and known_shards. */
static uint64
all_shards(const SeckillCampaign *c)
{
	int			nshards = Max(c->row.limits.shards, 1);

	return nshards == 64 ? ~UINT64CONST(0) : (UINT64CONST(1) << nshards) - 1;
}

static Size
cache_size(void)
{
	return add_size(offsetof(SeckillCampaignCache, entries),
					mul_size(seckill_max_campaigns, sizeof(SeckillCampaign)));
}

static void
cache_init(void *base, bool found, LWLockPadded *lwlocks)
{
	seckill_campaign_cache = base;
	if (found)
		return;
	memset(seckill_campaign_cache, 0, cache_size());
	seckill_campaign_cache->lock = &lwlocks[0].lock;
	for (int i = 0; i < seckill_max_campaigns; i++)
		pg_atomic_init_u32(&seckill_campaigns[i].sold_out, 0);
}

void
seckill_campaign_cache_register(void)
{
	static const SeckillShmemPart part = {"seckill campaigns", 1, cache_size, cache_init};

	seckill_shmem_register(&part);
}

/* The cached campaign open for this goods, or NULL.  Under the cache's lock. */
static SeckillCampaign *
find_by_goods(const char *goods)
{
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_campaigns[i].row.id != 0 && strcmp(seckill_campaigns[i].row.goods, goods) == 0)
			return &seckill_campaigns[i];
	return NULL;
}

/* Copy the cached campaign open for this goods; false when none is cached. */
bool
seckill_campaign_lookup(const char *goods, SeckillCampaign *out)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_campaign_cache->lock, LW_SHARED);
	c = find_by_goods(goods);
	if (c != NULL)
	{
		out->row = c->row;
		out->stats = c->stats;
		pg_atomic_init_u32(&out->sold_out, pg_atomic_read_u32(&c->sold_out));
		out->line = c->line;
	}
	LWLockRelease(seckill_campaign_cache->lock);
	return c != NULL;
}

/* Backends: do this server's backends answer sold_out for the campaign? */
bool
seckill_campaign_sold_out(int64 id)
{
	SeckillCampaign *c;
	bool		sold_out;

	if (id == 0)				/* the id of a free entry */
		return false;
	LWLockAcquire(seckill_campaign_cache->lock, LW_SHARED);
	c = seckill_campaign_find(id);
	sold_out = c != NULL && pg_atomic_read_u32(&c->sold_out) != 0;
	LWLockRelease(seckill_campaign_cache->lock);
	return sold_out;
}

/*
 * Backends: a storefront's view of the cached campaign open for goods; false
 * when none is cached.  The stock is summed from what the worker last saw of
 * each shard: a reply to a purchase, a give-back, a restock, a rebuild or an
 * audit.
 */
bool
seckill_campaign_storefront(const char *goods, SeckillStorefront *out)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_campaign_cache->lock, LW_SHARED);
	c = find_by_goods(goods);
	if (c != NULL)
	{
		out->id = c->row.id;
		out->starts_at = c->row.starts_at;
		out->ends_at = c->row.ends_at;
		out->total_stock = c->row.total_stock;
		out->sold_out = pg_atomic_read_u32(&c->sold_out) != 0;
		out->queue_length = c->row.limits.queue && c->line.loaded ?
			c->line.last - c->line.admitted + c->line.early : -1;
		out->remaining = -1;
		if ((c->known_shards & all_shards(c)) == all_shards(c))
		{
			pg_read_barrier();
			out->remaining = 0;
			for (int s = 0; s < Max(c->row.limits.shards, 1); s++)
				out->remaining += c->stock[s];
		}
	}
	LWLockRelease(seckill_campaign_cache->lock);
	return c != NULL;
}

SeckillCampaign *
seckill_campaign_find(int64 id)
{
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_campaigns[i].row.id == id)
			return &seckill_campaigns[i];
	return NULL;
}

/* Worker: is there an entry for this campaign, or a free one? */
bool
seckill_campaign_has_room(int64 id)
{
	return seckill_campaign_find(id) != NULL || seckill_campaign_find(0) != NULL;
}

/* Is this campaign cached?  Under the cache's lock. */
bool
seckill_campaign_cached(int64 id)
{
	return id != 0 && seckill_campaign_find(id) != NULL;
}

/* Worker: add or update a cached campaign; false when the cache is full. */
bool
seckill_campaign_store(const SeckillCampaignRow *row, bool sold_out)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_campaign_cache->lock, LW_EXCLUSIVE);
	/* one goods, one cached campaign: drop a stale entry of an earlier campaign */
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_campaigns[i].row.id != row->id && strcmp(seckill_campaigns[i].row.goods, row->goods) == 0)
			seckill_campaigns[i].row.id = 0;
	c = seckill_campaign_find(row->id);
	if (c == NULL)
		c = seckill_campaign_find(0);
	if (c == NULL)
	{
		LWLockRelease(seckill_campaign_cache->lock);
		return false;
	}
	/* a new campaign: no line read yet */
	if (c->row.id != row->id)
		memset(&c->line, 0, sizeof(c->line));
	/* a new campaign, or new shards: no stock seen yet */
	if (c->row.id != row->id || c->row.limits.shards != row->limits.shards)
	{
		c->known_shards = 0;
		memset(c->stock, 0, sizeof(c->stock));
	}
	c->row = *row;
	c->stats = seckill_stats_claim(row->id, row->goods, seckill_campaign_cached);
	c->empty_shards = sold_out ? ~UINT64CONST(0) : 0;
	pg_atomic_write_u32(&c->sold_out, sold_out ? 1 : 0);
	LWLockRelease(seckill_campaign_cache->lock);
	return true;
}

/* Worker: the new total stock of a cached campaign, after a restock. */
void
seckill_campaign_set_total_stock(int64 id, int32 total_stock)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_campaign_cache->lock, LW_EXCLUSIVE);
	c = seckill_campaign_find(id);
	if (c != NULL)
		c->row.total_stock = total_stock;
	LWLockRelease(seckill_campaign_cache->lock);
}

/* Worker: new traffic limits of a cached campaign. */
void
seckill_campaign_set_limits(int64 id, const SeckillLimits *limits)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_campaign_cache->lock, LW_EXCLUSIVE);
	c = seckill_campaign_find(id);
	if (c != NULL)
		c->row.limits = *limits;
	LWLockRelease(seckill_campaign_cache->lock);
}

void
seckill_campaign_forget(int64 id)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_campaign_cache->lock, LW_EXCLUSIVE);
	c = seckill_campaign_find(id);
	if (c != NULL)
		c->row.id = 0;
	LWLockRelease(seckill_campaign_cache->lock);
}

/*
 * Keep the backends' sold-out shortcut and the storefront's stock in step
 * with Redis' stock: a campaign is sold out when every shard is empty.
 */
void
seckill_campaign_note_stock(int64 campaign_id, int shard, long long stock)
{
	SeckillCampaign *c = seckill_campaign_find(campaign_id);

	if (c == NULL || stock < 0 || shard < 0 || shard >= Max(c->row.limits.shards, 1))
		return;
	c->stock[shard] = (int32) Min(stock, PG_INT32_MAX);
	/* a backend that sees the shard known sees its stock */
	pg_write_barrier();
	c->known_shards |= UINT64CONST(1) << shard;
	if (stock == 0)
		c->empty_shards |= UINT64CONST(1) << shard;
	else
		c->empty_shards &= ~(UINT64CONST(1) << shard);
	pg_atomic_write_u32(&c->sold_out, (c->empty_shards & all_shards(c)) == all_shards(c) ? 1 : 0);
}

/* PostgreSQL says the campaign is sold out. */
void
seckill_campaign_note_sold_out(int64 campaign_id)
{
	SeckillCampaign *c = seckill_campaign_find(campaign_id);

	if (c == NULL)
		return;
	c->empty_shards = ~UINT64CONST(0);
	pg_atomic_write_u32(&c->sold_out, 1);
}

/* Worker: the line of a cached campaign, as just committed. */
void
seckill_campaign_set_line(int64 id, const SeckillLine *line)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_campaign_cache->lock, LW_EXCLUSIVE);
	c = seckill_campaign_find(id);
	if (c != NULL)
		c->line = *line;
	LWLockRelease(seckill_campaign_cache->lock);
}

/*
 * Worker, at its start: the lines are read again from PostgreSQL, and
 * backends read them there until then.
 */
void
seckill_campaign_lines_unloaded(void)
{
	LWLockAcquire(seckill_campaign_cache->lock, LW_EXCLUSIVE);
	for (int i = 0; i < seckill_max_campaigns; i++)
		seckill_campaigns[i].line.loaded = false;
	LWLockRelease(seckill_campaign_cache->lock);
}
