/*-------------------------------------------------------------------------
 *
 * campaign_commands.h
 *		The admin path's commands on a campaign's shards as typed calls:
 *		its close, its counts (seckill_status), the audit's read, stock
 *		given back (lua/restock.lua), the stock evened out, new limits;
 *		their keys and arguments built, their replies read into answers.
 *
 * Like layout/purchase_scripts.h, each call goes into a pipeline of the
 * caller's (redis/pipeline.h), and its answer is read from the replies at
 * the place the caller counted (a shard's read takes the number of replies
 * its _REPLIES says).  What the worker does with an answer is the
 * worker's (worker/campaign_admin.c, worker/audit.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CAMPAIGN_COMMANDS_H
#define SECKILL_CAMPAIGN_COMMANDS_H

#include "seckill.h"

#include "nodes/pg_list.h"
#include "redis/pipeline.h"

/* A closed shard's state, its keys kept ttl_s seconds for inspection. */
extern void sk_shard_close_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, int ttl_s);

/* A shard's figures as seckill_status() gives them. */
#define SK_SHARD_COUNTS_REPLIES 3
typedef struct SkShardCounts
{
	const char *refused;		/* why Redis refused a read, or NULL */
	bool		unreachable;	/* that refusal: no master for the shard's slot */
	bool		has_stock;		/* false: the shard's hash is gone */
	int64		stock;
	int64		buyers;
	int64		journaled;
} SkShardCounts;

extern void sk_shard_counts_send(SkPipeline *p, int64 campaign_id, int shard, int nshards);
extern void sk_shard_counts_answer(const SkReply *r, SkShardCounts *out);

/* A shard as the audit judges it. */
#define SK_SHARD_AUDIT_REPLIES 2
typedef struct SkShardAudit
{
	bool		known;			/* false: a refusal, or a reply of another shape */
	int64		epoch;			/* of the shard's hash; 0 when none */
	bool		loaded;			/* stock and state there, no take-over's mark */
	int64		stock;			/* when loaded */
	int64		journaled;		/* its journal's entries */
} SkShardAudit;

extern void sk_shard_audit_send(SkPipeline *p, int64 campaign_id, int shard, int nshards);
extern void sk_shard_audit_answer(const SkReply *r, SkShardAudit *out);

/*
 * lua/restock.lua: the items of cancelled orders back to their buyers' home
 * shards, one call a shard that is home to some of them (users: their
 * user ids, qtys: their quantities), the buyers dropped from their shards
 * when rebuy.  Returns the calls sent; shards and shard_qtys (room for
 * nshards) get each call's shard and quantity.
 */
typedef enum SkRestockVerdict
{
	SK_RESTOCK_DONE,			/* stock is the shard's stock now, -1 when it is not loaded */
	SK_RESTOCK_FENCED,			/* a newer primary sells the campaign */
	SK_RESTOCK_FAILED			/* why says why */
} SkRestockVerdict;

extern int	sk_restock_send(SkPipeline *p, int64 campaign_id, int nshards, bool rebuy, const char *epoch,
							List *users, List *qtys, int *shards, int *shard_qtys);
extern SkRestockVerdict sk_restock_answer(const SkReply *r, int64 *stock, const char **why);

/* A shard's stock set outright (the worker sells nothing meanwhile). */
extern void sk_shard_stock_set_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, int stock);

/*
 * A shard's copy of the campaign's traffic limits.  The answer: false, with
 * why, when Redis refused it.
 */
extern void sk_shard_limits_send(SkPipeline *p, int64 campaign_id, int shard, int nshards,
								 const SeckillLimits *limits);
extern bool sk_shard_limits_answer(const SkReply *r, const char **why);

#endif							/* SECKILL_CAMPAIGN_COMMANDS_H */
