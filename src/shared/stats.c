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
#include "shared/stats.h"

#include "port/pg_bitutils.h"
#include "shared/shmem.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

SeckillFigures *seckill_figures = NULL;

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
bool
seckill_hist_quantile(SeckillHistogram *h, double p, double *ms)
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
	if (status == SK_NOT_ADMITTED)
		pg_atomic_fetch_add_u64(&st->not_admitted, 1);
	else
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
	stats_add(&seckill_figures->all, status, usec);
	if (stats >= 0)
		stats_add(&seckill_stats[stats], status, usec);
}

/* Worker: reservations of a campaign given back. */
void
seckill_stats_compensated(int64 campaign_id, int n)
{
	SeckillStats *st = seckill_stats_find(campaign_id);

	pg_atomic_fetch_add_u64(&seckill_figures->counters.compensations, n);
	pg_atomic_fetch_add_u64(&seckill_figures->all.compensations, n);
	if (st != NULL)
		pg_atomic_fetch_add_u64(&st->compensations, n);
}

SeckillStats *
seckill_stats_find(int64 campaign_id)
{
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_stats[i].campaign_id == campaign_id)
			return &seckill_stats[i];
	return NULL;
}

/*
 * The entry of a campaign being cached: its own, else an unused one, else
 * that of a campaign no longer cached (in_use says which are; there is
 * always one, as there are as many entries as cache entries).  Under the
 * campaign cache's lock.
 */
int
seckill_stats_claim(int64 id, const char *goods, bool (*in_use) (int64 campaign_id))
{
	SeckillStats *st = seckill_stats_find(id);

	if (st == NULL)
		st = seckill_stats_find(0);
	for (int i = 0; st == NULL && i < seckill_max_campaigns; i++)
		if (!in_use(seckill_stats[i].campaign_id))
			st = &seckill_stats[i];
	Assert(st != NULL);
	if (st->campaign_id != id)
	{
		/*
		 * Counts start afresh; in_flight is left to the callers of the
		 * previous campaign still counted there, which take themselves off.
		 */
		seckill_stats_zero(st);
		st->campaign_id = id;
		strlcpy(st->goods, goods, sizeof(st->goods));
	}
	return st - seckill_stats;
}

static void
stats_init(SeckillStats *st)
{
	for (int s = 0; s <= SK_STAT_ERRORS; s++)
		pg_atomic_init_u64(&st->calls[s], 0);
	pg_atomic_init_u64(&st->not_admitted, 0);
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
	pg_atomic_write_u64(&st->not_admitted, 0);
	pg_atomic_write_u64(&st->compensations, 0);
	for (int b = 0; b < SK_HIST_BUCKETS; b++)
		pg_atomic_write_u64(&st->latency.counts[b], 0);
}

static Size
figures_size(void)
{
	return add_size(offsetof(SeckillFigures, campaigns),
					mul_size(seckill_max_campaigns, sizeof(SeckillStats)));
}

static void
figures_init(void *base, bool found, LWLockPadded *lwlocks)
{
	seckill_figures = base;
	if (found)
		return;
	memset(seckill_figures, 0, figures_size());
	pg_atomic_init_u64(&seckill_figures->counters.rounds, 0);
	pg_atomic_init_u64(&seckill_figures->counters.purchases, 0);
	pg_atomic_init_u64(&seckill_figures->counters.redis_round_trips, 0);
	pg_atomic_init_u64(&seckill_figures->counters.commits, 0);
	pg_atomic_init_u64(&seckill_figures->counters.compensations, 0);
	stats_init(&seckill_figures->all);
	for (int b = 0; b < SK_HIST_BUCKETS; b++)
		pg_atomic_init_u64(&seckill_figures->redis_latency.counts[b], 0);
	for (int i = 0; i < seckill_max_campaigns; i++)
		stats_init(&seckill_stats[i]);
	SpinLockInit(&seckill_figures->mutex);
	seckill_figures->since = GetCurrentTimestamp();
}

void
seckill_stats_register(void)
{
	static const SeckillShmemPart part = {"seckill figures", 0, figures_size, figures_init};

	seckill_shmem_register(&part);
}

/*
 * Zero every figure (not the in-flight counts, which are live), and start
 * the worker's counters afresh from their values now.  Returns now.
 */
TimestampTz
seckill_stats_reset_all(void)
{
	SeckillCounters *c = &seckill_figures->counters;
	TimestampTz now = GetCurrentTimestamp();

	seckill_stats_zero(&seckill_figures->all);
	for (int b = 0; b < SK_HIST_BUCKETS; b++)
		pg_atomic_write_u64(&seckill_figures->redis_latency.counts[b], 0);
	for (int i = 0; i < seckill_max_campaigns; i++)
		seckill_stats_zero(&seckill_stats[i]);

	SpinLockAcquire(&seckill_figures->mutex);
	seckill_figures->since = now;
	seckill_figures->base[0] = pg_atomic_read_u64(&c->rounds);
	seckill_figures->base[1] = pg_atomic_read_u64(&c->purchases);
	seckill_figures->base[2] = pg_atomic_read_u64(&c->redis_round_trips);
	seckill_figures->base[3] = pg_atomic_read_u64(&c->commits);
	SpinLockRelease(&seckill_figures->mutex);
	return now;
}
