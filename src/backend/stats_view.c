/*-------------------------------------------------------------------------
 *
 * stats_view.c
 *		The seckill.stats view and seckill_stats_reset(), the
 *		seckill.redis_nodes view and seckill_campaign_nodes(): the figures
 *		in shared memory as rows; and the sold-out flag that seckill.storefront
 *		reads.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include "funcapi.h"
#include "layout/keys.h"
#include "redis/cluster.h"
#include "shared/campaign_cache.h"
#include "shared/redis_nodes.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_stats_rows);
PG_FUNCTION_INFO_V1(seckill_stats_reset);
PG_FUNCTION_INFO_V1(seckill_slots_in_use_now);
PG_FUNCTION_INFO_V1(seckill_redis_nodes_rows);
PG_FUNCTION_INFO_V1(seckill_campaign_nodes_rows);
PG_FUNCTION_INFO_V1(seckill_sold_out_cached);

#define STATS_COLUMNS 27

static void
put_quantiles(SeckillHistogram *h, Datum *values, bool *nulls)
{
	static const double ps[3] = {0.50, 0.95, 0.99};

	for (int i = 0; i < 3; i++)
	{
		double		ms;

		nulls[i] = !seckill_hist_quantile(h, ps[i], &ms);
		values[i] = Float8GetDatum(nulls[i] ? 0 : ms);
	}
}

/* One row of seckill.stats; the worker's columns only for the row of all. */
static void
stats_row(ReturnSetInfo *rsinfo, SeckillStats *st, bool all, TimestampTz since,
		  const uint64 *base)
{
	Datum		values[STATS_COLUMNS];
	bool		nulls[STATS_COLUMNS];
	int			n = 0;
	uint64		calls = 0;

	memset(nulls, 0, sizeof(nulls));
	values[n] = Int64GetDatum(st->campaign_id);
	nulls[n++] = all;
	values[n] = all ? (Datum) 0 : CStringGetTextDatum(st->goods);
	nulls[n++] = all;
	n++;						/* calls, once summed */
	for (int s = 0; s <= SK_STAT_ERRORS; s++)
	{
		uint64		c = pg_atomic_read_u64(&st->calls[s]);

		calls += c;
		values[n++] = Int64GetDatum((int64) c);
	}
	calls += pg_atomic_read_u64(&st->not_admitted);
	values[2] = Int64GetDatum((int64) calls);
	values[n++] = Int32GetDatum((int32) pg_atomic_read_u32(&st->in_flight));
	values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&st->compensations));
	put_quantiles(&st->latency, &values[n], &nulls[n]);
	n += 3;
	if (all)
	{
		SeckillCounters *c = &seckill_figures->counters;
		uint64		rounds = pg_atomic_read_u64(&c->rounds) - base[0];
		uint64		purchases = pg_atomic_read_u64(&c->purchases) - base[1];

		put_quantiles(&seckill_figures->redis_latency, &values[n], &nulls[n]);
		n += 3;
		values[n++] = Int64GetDatum((int64) rounds);
		values[n] = Float8GetDatum(rounds > 0 ? (double) purchases / rounds : 0);
		nulls[n++] = rounds == 0;
		values[n++] = Int64GetDatum((int64) (pg_atomic_read_u64(&c->redis_round_trips) - base[2]));
		values[n++] = Int64GetDatum((int64) (pg_atomic_read_u64(&c->commits) - base[3]));
		values[n++] = Int32GetDatum((int32) seckill_calls->len);
	}
	else
		for (int i = 0; i < 8; i++)
			nulls[n++] = true;
	values[n++] = TimestampTzGetDatum(since);
	Assert(n == STATS_COLUMNS);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

/*
 * seckill.stats_rows(): the row of all campaigns (campaign_id NULL), then a
 * row per campaign preheated since the last reset (or the server start).
 */
Datum
seckill_stats_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz since;
	uint64		base[4];

	seckill_check_database();
	InitMaterializedSRF(fcinfo, 0);
	SpinLockAcquire(&seckill_figures->mutex);
	since = seckill_figures->since;
	memcpy(base, seckill_figures->base, sizeof(base));
	SpinLockRelease(&seckill_figures->mutex);

	stats_row(rsinfo, &seckill_figures->all, true, since, base);
	LWLockAcquire(seckill_campaign_cache->lock, LW_SHARED);
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_stats[i].campaign_id != 0)
			stats_row(rsinfo, &seckill_stats[i], false, since, base);
	LWLockRelease(seckill_campaign_cache->lock);
	return (Datum) 0;
}

/*
 * seckill_stats_reset() RETURNS timestamptz: zero every figure of
 * seckill.stats (not the in-flight counts, which are live), and start its
 * worker columns from the counters' values now.
 */
Datum
seckill_stats_reset(PG_FUNCTION_ARGS)
{
	seckill_check_database();
	PG_RETURN_TIMESTAMPTZ(seckill_stats_reset_all());
}

/*
 * seckill.slots_in_use() RETURNS int: the request slots not free now
 * (seckill.stats' slots_in_use), live like in_flight.
 */
Datum
seckill_slots_in_use_now(PG_FUNCTION_ARGS)
{
	seckill_check_database();
	PG_RETURN_INT32(seckill_slots_in_use());
}

/*
 * seckill.sold_out_cached(campaign_id bigint) RETURNS boolean: whether this
 * server's backends answer sold_out for the campaign from shared memory, as
 * seckill_buy does; false for a campaign that is not preheated.
 */
Datum
seckill_sold_out_cached(PG_FUNCTION_ARGS)
{
	seckill_check_database();
	PG_RETURN_BOOL(seckill_campaign_sold_out(PG_GETARG_INT64(0)));
}

/*
 * seckill.redis_nodes_rows() RETURNS SETOF (node, connected, slots,
 *		round_trips, error): the Redis masters as the worker last saw them.
 */
Datum
seckill_redis_nodes_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	SeckillRedisNodes *pub = seckill_redis_nodes;

	seckill_check_database();
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(pub->lock, LW_SHARED);
	for (int i = 0; i < pub->count; i++)
	{
		SeckillRedisNode *node = &pub->node[i];
		Datum		values[5];
		bool		nulls[5] = {0};

		values[0] = CStringGetTextDatum(node->addr);
		values[1] = BoolGetDatum(node->connected);
		values[2] = Int32GetDatum(node->slots);
		values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&node->round_trips));
		values[4] = CStringGetTextDatum(node->error);
		nulls[4] = node->error[0] == '\0';
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(pub->lock);
	return (Datum) 0;
}

/*
 * seckill.campaign_nodes_rows(campaign_id bigint, shards int) RETURNS SETOF
 *		(shard, slot, redis_node): the slot of each stock shard's keys and the
 *		master serving it (NULL when none is reached).
 */
Datum
seckill_campaign_nodes_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64		id = PG_GETARG_INT64(0);
	int32		nshards = PG_GETARG_INT32(1);
	SeckillRedisNodes *pub = seckill_redis_nodes;

	seckill_check_database();
	if (nshards < 1 || nshards > SK_MAX_SHARDS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("shards must be between 1 and %d, not %d", SK_MAX_SHARDS, nshards)));
	InitMaterializedSRF(fcinfo, 0);
	LWLockAcquire(pub->lock, LW_SHARED);
	for (int shard = 0; shard < nshards; shard++)
	{
		char	   *key = sk_keys_shard(id, shard, nshards, "meta");
		int			slot = sk_cluster_key_slot(key, strlen(key));
		int			node = pub->count > 0 ? pub->slot_node[slot] : -1;
		Datum		values[3];
		bool		nulls[3] = {0};

		values[0] = Int32GetDatum(shard);
		values[1] = Int32GetDatum(slot);
		values[2] = node >= 0 ? CStringGetTextDatum(pub->node[node].addr) : (Datum) 0;
		nulls[2] = node < 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(pub->lock);
	return (Datum) 0;
}
