/*-------------------------------------------------------------------------
 *
 * rebuild_commands.h
 *		A campaign's rebuild in Redis as typed calls: its buyers staged
 *		beside the live sets, a stage emptied, a cancelled buyer taken out
 *		of it, and lua/load.lua, which swaps the staged sets in; their keys
 *		and arguments built, their replies read into answers.
 *
 * Like layout/campaign_commands.h, each call goes into a pipeline of the
 * caller's (redis/pipeline.h) and its answer is read from the reply at the
 * place the caller counted.  The paging, the phases and what a refusal
 * means are the worker's (worker/rebuild.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REBUILD_COMMANDS_H
#define SECKILL_REBUILD_COMMANDS_H

#include "seckill.h"

#include "campaign.h"
#include "nodes/pg_list.h"
#include "redis/pipeline.h"

/* A shard's staged buyers emptied, and its journal too when journal. */
extern void sk_staged_clear_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, bool journal);

/*
 * Buyers (user ids) staged in their home shards, a command for each shard
 * and each SK_STAGE_BATCH of them.  Returns the commands sent; shards, with
 * room for sk_staged_add_commands(), gets each one's shard.
 */
#define SK_STAGE_BATCH 1000
extern int	sk_staged_add_commands(int nusers, int nshards);
extern int	sk_staged_add_send(SkPipeline *p, int64 campaign_id, int nshards, List *users, int *shards);
/* how many of a command's buyers were new to the stage; false: refused (why) */
extern bool sk_staged_add_answer(const SkReply *r, int64 *added, const char **why);

/* A buyer taken out of their home shard's stage: 1 when they were there. */
extern void sk_staged_remove_send(SkPipeline *p, int64 campaign_id, int nshards, const char *user_id);
extern int64 sk_staged_remove_answer(const SkReply *r);

/*
 * lua/load.lua for a shard: the campaign's row, the shard's stock, the
 * buyers its stage should hold (staged) and the epoch.
 */
typedef enum SkLoadVerdict
{
	SK_LOAD_DONE,				/* buyers: the shard's buyers now */
	SK_LOAD_STAGED_AGAIN,		/* the stage is not what was staged: stage again */
	SK_LOAD_FENCED,				/* a newer primary sells the campaign */
	SK_LOAD_FAILED				/* why says why */
} SkLoadVerdict;

extern void sk_load_send(SkPipeline *p, const SeckillCampaignRow *row, int shard, int nshards, int stock,
						 int64 staged, const char *epoch);
extern SkLoadVerdict sk_load_answer(const SkReply *r, int64 *buyers, const char **why);

#endif							/* SECKILL_REBUILD_COMMANDS_H */
