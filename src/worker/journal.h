/*-------------------------------------------------------------------------
 *
 * journal.h
 *		The reservation journal: settling, giving back and replaying.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_JOURNAL_H
#define SECKILL_JOURNAL_H

#include "redis/redis.h"
#include "shared/call.h"
#include "store/store.h"

extern void sk_journal_init(void);
extern bool sk_journal_ready(void);
extern void sk_journal_not_ready(SeckillReply *reply);
extern void sk_journal_lost(void);
extern bool sk_journal_needs_replay(void);
extern void sk_journal_replay_now(void);
extern void sk_journal_check_epoch(void);
extern bool sk_journal_has_settles(void);
extern void sk_journal_settle(const SkOrder *order);
extern int	sk_journal_add_settles(SkPipeline *p);
extern void sk_journal_flush_settles(void);
extern void sk_journal_add_give_back(SkPipeline *p, const SkOrder *order, int shard, bool keep);
extern void sk_journal_give_back(SkOrder *orders, int n);
extern bool sk_journal_replay_campaign(int64 campaign_id, int *committed, int *compensated);
extern bool sk_journal_blocked(int64 campaign_id, const char **why);
extern long sk_journal_retry_wait(void);
extern void sk_journal_retry_blocked(void);

/* A campaign's stock shards. */
extern int	sk_journal_campaign_shards(int64 campaign_id);
extern bool sk_journal_campaign_served(int64 campaign_id);

#endif							/* SECKILL_JOURNAL_H */
