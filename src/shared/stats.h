/*-------------------------------------------------------------------------
 *
 * stats.h
 *		Figures in shared memory: the worker's counters, latency histograms,
 *		and the purchases of each campaign (the seckill.stats view).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_STATS_H
#define SECKILL_STATS_H

#include "seckill.h"

#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/spin.h"

/*
 * Latency histogram: 8 buckets per power of two of microseconds, so that a
 * percentile read from it is within 12.5 %.  Buckets 0-7 hold 0-7 us.
 */
#define SK_HIST_BUCKETS 256

typedef struct SeckillHistogram
{
	pg_atomic_uint64 counts[SK_HIST_BUCKETS];
} SeckillHistogram;

/* Index of the errors count: the business statuses come first. */
#define SK_STAT_ERRORS SK_ERR_REDIS

/*
 * Purchase figures of one campaign (or of all), for seckill.stats.  An
 * entry outlives its campaign in the cache until another campaign needs it.
 */
typedef struct SeckillStats
{
	int64		campaign_id;	/* 0: entry unused */
	char		goods[SECKILL_MAX_GOODS_LEN + 1];
	pg_atomic_uint64 calls[SK_STAT_ERRORS + 1];	/* per status, then errors */
	pg_atomic_uint64 not_admitted;	/* refused by the waiting room */
	pg_atomic_uint64 compensations;
	pg_atomic_uint32 in_flight; /* purchases with the worker now */
	SeckillHistogram latency;	/* of seckill_buy, microseconds */
} SeckillStats;

/* Worker counters, for seckill_status and the benchmarks. */
typedef struct SeckillCounters
{
	pg_atomic_uint64 rounds;
	pg_atomic_uint64 purchases;
	pg_atomic_uint64 redis_round_trips;
	pg_atomic_uint64 commits;
	pg_atomic_uint64 compensations;
} SeckillCounters;

typedef struct SeckillFigures
{
	SeckillCounters counters;
	SeckillStats all;			/* every campaign's purchases */
	SeckillHistogram redis_latency; /* of the worker's Redis round trips */
	slock_t		mutex;			/* guards since and base */
	TimestampTz since;			/* last reset */
	uint64		base[4];		/* counters at the last reset: rounds, purchases, round trips, commits */
	SeckillStats campaigns[FLEXIBLE_ARRAY_MEMBER];	/* seckill.max_campaigns of them */
} SeckillFigures;

extern SeckillFigures *seckill_figures;
#define seckill_stats (seckill_figures->campaigns)

extern void seckill_stats_register(void);
extern void seckill_hist_record(SeckillHistogram *h, int64 usec);
extern bool seckill_hist_quantile(SeckillHistogram *h, double p, double *ms);
extern void seckill_stats_count(int stats, SeckillStatus status, int64 usec);
extern void seckill_stats_compensated(int64 campaign_id, int n);
extern SeckillStats *seckill_stats_find(int64 campaign_id);
extern int	seckill_stats_claim(int64 campaign_id, const char *goods, bool (*in_use) (int64 campaign_id));
extern void seckill_stats_zero(SeckillStats *st);
extern TimestampTz seckill_stats_reset_all(void);

#endif							/* SECKILL_STATS_H */
