/*-------------------------------------------------------------------------
 *
 * stats.c
 *		Purchase figures: every seckill_buy call counts its answer and its
 *		latency, per campaign and for all; the worker adds its Redis round
 *		trips and compensations.  Lock-free atomics on the hot path; the
 *		seckill.stats view reads them, seckill_stats_reset() zeroes them.
 *
 *-------------------------------------------------------------------------
 */
#include "stats.h"

#include "fmgr.h"
#include "funcapi.h"
#include "port/pg_bitutils.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_stats_rows);
PG_FUNCTION_INFO_V1(seckill_stats_reset);

static int
hist_bucket(uint64 usec)
{
	int			e;

	if (usec < 8)
		return (int) usec;
	e = pg_leftmost_one_pos64(usec);
	return Min(8 * (e - 2) + (int) ((usec >> (e - 3)) & 7), SK_HIST_BUCKETS - 1);
}

/* The upper bound of a bucket, in microseconds. */
static double
hist_bucket_upper(int b)
{
	int			e = b / 8 + 2;

	if (b < 8)
		return b + 1;
	return (double) ((uint64) (8 + b % 8 + 1) << (e - 3));
}

void
seckill_hist_record(SeckillHistogram *h, int64 usec)
{
	pg_atomic_fetch_add_u64(&h->counts[hist_bucket(usec > 0 ? usec : 0)], 1);
}

/* The p-quantile in milliseconds (an upper bound within 12.5 %); false when empty. */
static bool
hist_quantile(SeckillHistogram *h, double p, double *ms)
{
	uint64		counts[SK_HIST_BUCKETS];
	uint64		total = 0,
				seen = 0;

	for (int b = 0; b < SK_HIST_BUCKETS; b++)
		total += counts[b] = pg_atomic_read_u64(&h->counts[b]);
	if (total == 0)
		return false;
	for (int b = 0; b < SK_HIST_BUCKETS; b++)
	{
		seen += counts[b];
		if (seen >= p * total)
		{
			*ms = hist_bucket_upper(b) / 1000.0;
			return true;
		}
	}
	*ms = hist_bucket_upper(SK_HIST_BUCKETS - 1) / 1000.0;
	return true;
}

static void
stats_add(SeckillStats *st, SeckillStatus status, int64 usec)
{
	pg_atomic_fetch_add_u64(&st->calls[Min(status, SK_STAT_ERRORS)], 1);
	seckill_hist_record(&st->latency, usec);
}

/*
 * One seckill_buy answer (or error: any status from SK_ERR_REDIS on) and its
 * latency; stats is the campaign's entry, or -1.
 */
void
seckill_stats_count(int stats, SeckillStatus status, int64 usec)
{
	stats_add(&seckill_shared->all, status, usec);
	if (stats >= 0)
		stats_add(&seckill_stats[stats], status, usec);
}

/* Worker: reservations of a campaign given back. */
void
seckill_stats_compensated(int64 campaign_id, int n)
{
	SeckillStats *st = seckill_stats_find(campaign_id);

	pg_atomic_fetch_add_u64(&seckill_shared->counters.compensations, n);
	pg_atomic_fetch_add_u64(&seckill_shared->all.compensations, n);
	if (st != NULL)
		pg_atomic_fetch_add_u64(&st->compensations, n);
}

#define STATS_COLUMNS 27

static void
put_quantiles(SeckillHistogram *h, Datum *values, bool *nulls)
{
	static const double ps[3] = {0.50, 0.95, 0.99};

	for (int i = 0; i < 3; i++)
	{
		double		ms;

		nulls[i] = !hist_quantile(h, ps[i], &ms);
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
	values[2] = Int64GetDatum((int64) calls);
	values[n++] = Int32GetDatum((int32) pg_atomic_read_u32(&st->in_flight));
	values[n++] = Int64GetDatum((int64) pg_atomic_read_u64(&st->compensations));
	put_quantiles(&st->latency, &values[n], &nulls[n]);
	n += 3;
	if (all)
	{
		SeckillCounters *c = &seckill_shared->counters;
		uint64		rounds = pg_atomic_read_u64(&c->rounds) - base[0];
		uint64		purchases = pg_atomic_read_u64(&c->purchases) - base[1];

		put_quantiles(&seckill_shared->redis_latency, &values[n], &nulls[n]);
		n += 3;
		values[n++] = Int64GetDatum((int64) rounds);
		values[n] = Float8GetDatum(rounds > 0 ? (double) purchases / rounds : 0);
		nulls[n++] = rounds == 0;
		values[n++] = Int64GetDatum((int64) (pg_atomic_read_u64(&c->redis_round_trips) - base[2]));
		values[n++] = Int64GetDatum((int64) (pg_atomic_read_u64(&c->commits) - base[3]));
		values[n++] = Int32GetDatum((int32) seckill_shared->queue_len);
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
	SpinLockAcquire(&seckill_shared->stats_mutex);
	since = seckill_shared->stats_since;
	memcpy(base, seckill_shared->stats_base, sizeof(base));
	SpinLockRelease(&seckill_shared->stats_mutex);

	stats_row(rsinfo, &seckill_shared->all, true, since, base);
	LWLockAcquire(seckill_shared->campaigns_lock, LW_SHARED);
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_stats[i].campaign_id != 0)
			stats_row(rsinfo, &seckill_stats[i], false, since, base);
	LWLockRelease(seckill_shared->campaigns_lock);
	return (Datum) 0;
}

void
seckill_stats_init(SeckillStats *st)
{
	for (int s = 0; s <= SK_STAT_ERRORS; s++)
		pg_atomic_init_u64(&st->calls[s], 0);
	pg_atomic_init_u64(&st->compensations, 0);
	pg_atomic_init_u32(&st->in_flight, 0);
	for (int b = 0; b < SK_HIST_BUCKETS; b++)
		pg_atomic_init_u64(&st->latency.counts[b], 0);
}

/* Zero the counts; in_flight is live, not a count. */
void
seckill_stats_zero(SeckillStats *st)
{
	for (int s = 0; s <= SK_STAT_ERRORS; s++)
		pg_atomic_write_u64(&st->calls[s], 0);
	pg_atomic_write_u64(&st->compensations, 0);
	for (int b = 0; b < SK_HIST_BUCKETS; b++)
		pg_atomic_write_u64(&st->latency.counts[b], 0);
}

/*
 * seckill_stats_reset() RETURNS timestamptz: zero every figure of
 * seckill.stats (not the in-flight counts, which are live), and start its
 * worker columns from the counters' values now.
 */
Datum
seckill_stats_reset(PG_FUNCTION_ARGS)
{
	SeckillCounters *c;
	TimestampTz now = GetCurrentTimestamp();

	seckill_check_database();
	c = &seckill_shared->counters;
	seckill_stats_zero(&seckill_shared->all);
	for (int b = 0; b < SK_HIST_BUCKETS; b++)
		pg_atomic_write_u64(&seckill_shared->redis_latency.counts[b], 0);
	LWLockAcquire(seckill_shared->campaigns_lock, LW_SHARED);
	for (int i = 0; i < seckill_max_campaigns; i++)
		seckill_stats_zero(&seckill_stats[i]);
	LWLockRelease(seckill_shared->campaigns_lock);

	SpinLockAcquire(&seckill_shared->stats_mutex);
	seckill_shared->stats_since = now;
	seckill_shared->stats_base[0] = pg_atomic_read_u64(&c->rounds);
	seckill_shared->stats_base[1] = pg_atomic_read_u64(&c->purchases);
	seckill_shared->stats_base[2] = pg_atomic_read_u64(&c->redis_round_trips);
	seckill_shared->stats_base[3] = pg_atomic_read_u64(&c->commits);
	SpinLockRelease(&seckill_shared->stats_mutex);
	PG_RETURN_TIMESTAMPTZ(now);
}
