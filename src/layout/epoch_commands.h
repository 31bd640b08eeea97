/*-------------------------------------------------------------------------
 *
 * epoch_commands.h
 *		The epoch's commands as typed calls: who sells through the key
 *		prefix read (its epoch, master and promotion keys), lua/epoch.lua
 *		(the worker's epoch recorded), lua/take_over.lua and
 *		lua/unstale.lua (a campaign's shard marked stale by a take-over,
 *		and selling again), lua/ids.lua (a block of order ids recorded);
 *		their keys and arguments built, their replies read into answers.
 *
 * Each call goes into a pipeline of the caller's (redis/pipeline.h); what
 * the worker makes of an answer (a take-over, a fence) is the worker's
 * (worker/epoch.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_EPOCH_COMMANDS_H
#define SECKILL_EPOCH_COMMANDS_H

#include "seckill.h"

#include "redis/pipeline.h"

/* The prefix's epoch, master and promotion, as read. */
#define SK_EPOCH_READ_REPLIES 3
typedef struct SkEpochRead
{
	int64		recorded;		/* the epoch recorded; 0 when none */
	const char *master;			/* the run_id of the master it was recorded on, or NULL */
	const char *promotion;		/* the promotion recorded with it, or NULL */
} SkEpochRead;

extern void sk_epoch_read_send(SkPipeline *p);
extern void sk_epoch_read_answer(const SkReply *r, SkEpochRead *out);

/* The epoch alone (read only: a Redis refusing writes still answers). */
extern void sk_epoch_get_send(SkPipeline *p);
extern int64 sk_epoch_get_answer(const SkReply *r);

/*
 * lua/epoch.lua: the worker's epoch, the master's run_id and the worker's
 * promotion recorded.  The answer: the epoch and promotion recorded
 * before; false, with why, when Redis refused the script or answered what
 * it never does.
 */
extern void sk_epoch_record_send(SkPipeline *p, const char *epoch, const char *run_id, const char *promotion);
extern bool sk_epoch_record_answer(const SkReply *r, int64 *recorded, const char **promotion, const char **why);

/* lua/take_over.lua on one shard of a campaign. */
typedef struct SkTakeOverAnswer
{
	bool		marked;			/* else a newer epoch holds the shard, or it failed */
	int64		newer;			/* that newer epoch; 0 when the script failed (why) */
	bool		loaded;			/* marked: the shard holds stock */
	int64		stock;
	const char *why;
} SkTakeOverAnswer;

extern void sk_take_over_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, const char *epoch,
							  const char *stale);
extern void sk_take_over_answer(const SkReply *r, SkTakeOverAnswer *out);

/* lua/unstale.lua on one shard: true when it sells again. */
extern void sk_unstale_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, const char *epoch);
extern bool sk_unstale_answer(const SkReply *r);

/*
 * lua/ids.lua: the block [first, last] recorded.  The answer: 0 when
 * recorded, the highest id recorded when the block is not past it, -1 when
 * the script failed.
 */
extern void sk_ids_send(SkPipeline *p, int64 first, int64 last);
extern int64 sk_ids_answer(const SkReply *r);

#endif							/* SECKILL_EPOCH_COMMANDS_H */
