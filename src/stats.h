/*-------------------------------------------------------------------------
 *
 * stats.h
 *		Purchase figures in shared memory: counts per status, latency
 *		histograms, in-flight purchases; read through the seckill.stats view.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_STATS_H
#define SECKILL_STATS_H

#include "shmem.h"

extern void seckill_stats_init(SeckillStats *st);
extern void seckill_stats_zero(SeckillStats *st);
extern void seckill_hist_record(SeckillHistogram *h, int64 usec);
extern void seckill_stats_count(int stats, SeckillStatus status, int64 usec);
extern void seckill_stats_compensated(int64 campaign_id, int n);

#endif							/* SECKILL_STATS_H */
