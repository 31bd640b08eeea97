/*-------------------------------------------------------------------------
 *
 * epoch.c
 *		Who sells through this Redis: the PostgreSQL timeline.
 *
 * The worker's epoch is the timeline it writes on.  Redis keeps the newest
 * one under the key prefix, and every campaign it loads carries the epoch
 * that loaded it.  A promoted standby (a newer timeline) takes the prefix
 * over and marks every preheated campaign stale: each is rebuilt from
 * PostgreSQL before it sells again, its journal settled against the
 * promoted primary's orders.  A primary left behind by a failover (an older
 * timeline, restarted on its own or cut off while it ran) is fenced: the
 * scripts refuse its purchases, give-backs, restocks and loads, and the
 * worker stops selling, replaying and reconciling until it restarts.
 *
 * Order ids: each block is recorded in Redis before its first id is used.
 * A promoted primary whose sequence lost the last blocks to asynchronous
 * replication skips past them, so an id once answered is never another
 * user's.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/epoch.h"

#include "access/xlog.h"
#include "redis/redis.h"
#include "store/store.h"
#include "utils/memutils.h"

static TimeLineID timeline = 0;
static char epoch_arg[16];

/* Set when Redis records a newer epoch than ours. */
static int64 fenced_by = 0;

/* The campaigns a take-over marked stale, for the worker to rebuild. */
static int64 *taken_over = NULL;
static int	ntaken_over = 0;

/* Our timeline, as the scripts' epoch argument. */
const char *
sk_epoch_arg(void)
{
	if (timeline == 0)
	{
		timeline = GetWALInsertionTimeLine();
		snprintf(epoch_arg, sizeof(epoch_arg), "%u", timeline);
	}
	return epoch_arg;
}

bool
sk_epoch_fenced(void)
{
	return fenced_by != 0;
}

/* A script said a newer primary sells through this Redis. */
void
sk_epoch_fence(const char *what, int64 newer)
{
	if (fenced_by != 0)
		return;
	fenced_by = Max(newer, (int64) timeline + 1);
	ereport(WARNING,
			(errmsg("seckill worker stops selling: timeline %u is older than timeline " INT64_FORMAT ", which sells through this Redis (%s)",
					timeline, fenced_by, what),
			 errhint("This server was the primary before a failover. Rejoin it as a standby of the new primary (pg_rewind), or give it its own seckill.redis_prefix.")));
}

void
sk_epoch_reply_fenced(SeckillReply *reply)
{
	reply->status = SK_ERR_FENCED;
	snprintf(reply->message, sizeof(reply->message),
			 "seckill does not sell on this server: its timeline %u is older than timeline " INT64_FORMAT ", which sells through this Redis since a failover",
			 timeline, fenced_by);
}

/*
 * A newer timeline than Redis knows: mark every preheated campaign stale (in
 * each of its shards), so that neither an older primary nor this one sells
 * it before it is rebuilt; sk_epoch_stale_campaigns() hands them over.  The
 * buyers Redis counted that PostgreSQL has no order of are logged: after a
 * promotion, mostly purchases the old primary answered that never reached
 * this one.
 */
static bool
take_over(const char *why)
{
	List	   *rows = store_preheated_campaigns();
	ListCell   *lc;
	SkPipeline	p;
	SkReply    *r;
	int			reply = 0;

	sk_pipeline_init(&p);
	foreach(lc, rows)
	{
		SkCampaignRow *row = lfirst(lc);
		int			nshards = Max(row->limits.shards, 1);

		for (int shard = 0; shard < nshards; shard++)
		{
			sk_pipeline_add(&p, 6, (const char *[]) {"HSET", sk_shard_key(row->id, shard, nshards, "meta"),
								"epoch", sk_epoch_arg(), "stale", "1"}, NULL);
			sk_pipeline_add(&p, 2, (const char *[]) {"SCARD", sk_shard_key(row->id, shard, nshards, "buyers")}, NULL);
		}
	}
	if (p.count > 0 && (r = sk_pipeline_exec(&p)) != NULL)
	{
		store_begin("seckill: count buyers");
		foreach(lc, rows)
		{
			SkCampaignRow *row = lfirst(lc);
			int64		in_redis = 0,
						in_postgres = store_buyer_count(row->id, row->rebuy_after_cancel);

			for (int shard = 0; shard < Max(row->limits.shards, 1); shard++, reply += 2)
				in_redis += r[reply + 1].type == REDIS_REPLY_INTEGER ? r[reply + 1].integer : 0;
			if (in_redis > in_postgres)
				ereport(LOG,
						(errmsg("seckill worker found " INT64_FORMAT " buyer(s) of campaign " INT64_FORMAT " (\"%s\") in Redis without an order here: purchases answered before the take-over that this server does not have (a PostgreSQL failover lost them), or still in the journal",
								in_redis - in_postgres, row->id, row->goods)));
		}
		store_commit();
	}
	else if (p.count > 0)
		return false;
	if (taken_over != NULL)
		pfree(taken_over);
	taken_over = MemoryContextAlloc(TopMemoryContext, sizeof(int64) * (list_length(rows) + 1));
	ntaken_over = 0;
	foreach(lc, rows)
		taken_over[ntaken_over++] = ((SkCampaignRow *) lfirst(lc))->id;
	ereport(LOG,
			(errmsg("seckill worker takes this Redis over (%s): %d preheated campaign(s) are rebuilt from PostgreSQL before they sell again",
					why, list_length(rows))));
	return true;
}

/* The campaigns the last take-over marked stale, handed out once: to be rebuilt. */
int
sk_epoch_stale_campaigns(const int64 **ids)
{
	int			n = ntaken_over;

	*ids = taken_over;
	ntaken_over = 0;
	return n;
}

/*
 * Once per Redis connection, before its journals are replayed: record our
 * epoch, or learn that a newer primary sells through this Redis.  False
 * when fenced or when Redis failed.
 */
bool
sk_epoch_check(void)
{
	SkPipeline	p;
	SkReply    *r;
	const char *keys[2] = {sk_prefix_key("epoch"), sk_prefix_key("master")};
	int64		recorded;

	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_EPOCH, 2, keys, 2, (const char *[]) {sk_epoch_arg(), sk_redis_run_id()});
	r = sk_pipeline_exec(&p);
	if (r == NULL)
		return false;
	if (r[0].type != REDIS_REPLY_ARRAY || r[0].elements != 2)
	{
		sk_redis_disconnect(psprintf("Redis refused seckill's epoch script: %s",
									 r[0].str ? r[0].str : "unexpected reply"));
		return false;
	}
	recorded = sk_reply_int(&r[0].element[0]);
	fenced_by = 0;
	if (recorded > (int64) timeline)
	{
		sk_epoch_fence("recorded in Redis", recorded);
		return false;
	}
	if (recorded != 0 && recorded < (int64) timeline)
		return take_over(psprintf("timeline %u after timeline " INT64_FORMAT ": a promoted standby",
								  timeline, recorded));
	if (sk_reply_int(&r[0].element[1]) == 1)
		return take_over(psprintf("a new Redis master, run_id %s: it may lack writes the old one acknowledged",
								  sk_redis_run_id()));
	return true;
}

/*
 * Record the block of order ids [first, last] in Redis before it is used.
 * Returns the highest id Redis has seen when the block is not past it (the
 * sequence skips past it), else 0: recorded, or Redis failed (the ids are
 * used all the same: sales from PostgreSQL alone go on without Redis).
 */
int64
sk_epoch_record_ids(int64 first, int64 last)
{
	SkPipeline	p;
	SkReply    *r;
	const char *key = sk_prefix_key("order-ids");

	if (!sk_redis_connect())
		return 0;
	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_IDS, 1, &key, 2,
					   (const char *[]) {psprintf(INT64_FORMAT, first), psprintf(INT64_FORMAT, last)});
	r = sk_pipeline_exec(&p);
	if (r == NULL || r[0].type != REDIS_REPLY_INTEGER)
		return 0;
	return r[0].integer;
}
