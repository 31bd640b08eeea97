/*-------------------------------------------------------------------------
 *
 * rebuild_commands.c
 *		A campaign's rebuild in Redis: the keys and arguments of each
 *		command, and its replies read into answers.
 *
 *-------------------------------------------------------------------------
 */
#include "layout/rebuild_commands.h"

#include "layout/keys.h"
#include "layout/scripts.h"
#include "utils/timestamp.h"

void
sk_staged_clear_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, bool journal)
{
	sk_pipeline_add(p, 2, (const char *[]) {"DEL", sk_keys_shard(campaign_id, shard, nshards, "staged-buyers")},
					NULL);
	if (journal)
		sk_pipeline_add(p, 2, (const char *[]) {"DEL", sk_keys_shard(campaign_id, shard, nshards, "journal")},
						NULL);
}

/* At most: a full batch for each SK_STAGE_BATCH buyers, and a part-filled one a shard. */
int
sk_staged_add_commands(int nusers, int nshards)
{
	return nusers / SK_STAGE_BATCH + 1 + nshards;
}

int
sk_staged_add_send(SkPipeline *p, int64 campaign_id, int nshards, List *users, int *shards)
{
	const char ***sadd = palloc(sizeof(char **) * nshards);
	int		   *nsadd = palloc0(sizeof(int) * nshards);
	int			nsent = 0;
	ListCell   *lc;

	for (int shard = 0; shard < nshards; shard++)
		sadd[shard] = palloc(sizeof(char *) * (SK_STAGE_BATCH + 2));
	foreach(lc, users)
	{
		int			shard = sk_keys_home_shard(lfirst(lc), nshards);

		if (nsadd[shard] == 0)
		{
			sadd[shard][nsadd[shard]++] = "SADD";
			sadd[shard][nsadd[shard]++] = sk_keys_shard(campaign_id, shard, nshards, "staged-buyers");
		}
		sadd[shard][nsadd[shard]++] = lfirst(lc);
		if (nsadd[shard] == SK_STAGE_BATCH + 2)
		{
			sk_pipeline_add(p, nsadd[shard], sadd[shard], NULL);
			shards[nsent++] = shard;
			nsadd[shard] = 0;
		}
	}
	for (int shard = 0; shard < nshards; shard++)
		if (nsadd[shard] > 0)
		{
			sk_pipeline_add(p, nsadd[shard], sadd[shard], NULL);
			shards[nsent++] = shard;
		}
	return nsent;
}

bool
sk_staged_add_answer(const SkReply *r, int64 *added, const char **why)
{
	*added = 0;
	*why = NULL;
	if (sk_reply_is_error(r))
	{
		*why = r->str;
		return false;
	}
	*added = sk_reply_int(r);
	return true;
}

void
sk_staged_remove_send(SkPipeline *p, int64 campaign_id, int nshards, const char *user_id)
{
	sk_pipeline_add(p, 3, (const char *[]) {"SREM",
					sk_keys_shard(campaign_id, sk_keys_home_shard(user_id, nshards), nshards, "staged-buyers"),
					user_id}, NULL);
}

int64
sk_staged_remove_answer(const SkReply *r)
{
	return sk_reply_is_error(r) ? 0 : sk_reply_int(r);
}

/* A bound of the sale window for lua/load.lua: microseconds since the Unix epoch. */
static char *
usec_arg(TimestampTz ts)
{
	if (TIMESTAMP_IS_NOEND(ts))
		return "inf";
	if (TIMESTAMP_IS_NOBEGIN(ts))
		return "0";
	return psprintf(INT64_FORMAT, seckill_unix_usec(ts));
}

void
sk_load_send(SkPipeline *p, const SeckillCampaignRow *row, int shard, int nshards, int stock,
			 int64 staged, const char *epoch)
{
	const char *keys[4];
	const char *args[7 + SK_LIMIT_ARGS];

	sk_keys_shard_set(row->id, shard, nshards, keys);
	keys[3] = sk_keys_shard(row->id, shard, nshards, "staged-buyers");
	args[0] = psprintf("%d", stock);
	args[1] = usec_arg(row->starts_at);
	args[2] = usec_arg(row->ends_at);
	args[3] = psprintf("%d", row->per_user_limit);
	args[4] = "open";
	args[5] = psprintf(INT64_FORMAT, staged);
	args[6] = epoch;
	sk_pipeline_script(p, SK_SCRIPT_LOAD, 4, keys, 7 + sk_scripts_limit_args(&row->limits, &args[7]), args);
}

SkLoadVerdict
sk_load_answer(const SkReply *r, int64 *buyers, const char **why)
{
	*buyers = 0;
	*why = NULL;
	if (!sk_reply_is_error(r))
	{
		*buyers = sk_reply_int(r);
		return SK_LOAD_DONE;
	}
	*why = r->str;
	if (strncmp(r->str, "SECKILL_STAGED", 14) == 0)
		return SK_LOAD_STAGED_AGAIN;
	if (strncmp(r->str, "SECKILL_FENCED", 14) == 0)
		return SK_LOAD_FENCED;
	return SK_LOAD_FAILED;
}
