/*-------------------------------------------------------------------------
 *
 * campaign_commands.c
 *		The admin path's commands on a campaign's shards: the keys and
 *		arguments each takes, and its replies read into answers.
 *
 *-------------------------------------------------------------------------
 */
#include "layout/campaign_commands.h"

#include "layout/keys.h"
#include "layout/scripts.h"

void
sk_shard_close_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, int ttl_s)
{
	const char *keys[3];
	char	   *ttl = psprintf("%d", ttl_s);

	sk_keys_shard_set(campaign_id, shard, nshards, keys);
	sk_pipeline_add(p, 4, (const char *[]) {"HSET", keys[0], "state", "closed"}, NULL);
	sk_pipeline_add(p, 3, (const char *[]) {"EXPIRE", keys[0], ttl}, NULL);
	sk_pipeline_add(p, 3, (const char *[]) {"EXPIRE", keys[1], ttl}, NULL);
}

/* HGET meta stock, SCARD buyers, HLEN journal */
void
sk_shard_counts_send(SkPipeline *p, int64 campaign_id, int shard, int nshards)
{
	const char *keys[3];

	sk_keys_shard_set(campaign_id, shard, nshards, keys);
	sk_pipeline_add(p, 3, (const char *[]) {"HGET", keys[0], "stock"}, NULL);
	sk_pipeline_add(p, 2, (const char *[]) {"SCARD", keys[1]}, NULL);
	sk_pipeline_add(p, 2, (const char *[]) {"HLEN", keys[2]}, NULL);
}

void
sk_shard_counts_answer(const SkReply *r, SkShardCounts *out)
{
	memset(out, 0, sizeof(*out));
	for (int i = 0; i < SK_SHARD_COUNTS_REPLIES; i++)
		if (sk_reply_is_error(&r[i]))
		{
			out->refused = r[i].str;
			out->unreachable = sk_reply_is_unreachable(&r[i]);
			return;
		}
	out->has_stock = r[0].type != REDIS_REPLY_NIL;
	out->stock = out->has_stock ? sk_reply_int(&r[0]) : 0;
	out->buyers = sk_reply_int(&r[1]);
	out->journaled = sk_reply_int(&r[2]);
}

/* HMGET meta stock state epoch stale, HLEN journal */
void
sk_shard_audit_send(SkPipeline *p, int64 campaign_id, int shard, int nshards)
{
	sk_pipeline_add(p, 6, (const char *[]) {"HMGET", sk_keys_shard(campaign_id, shard, nshards, "meta"),
						"stock", "state", "epoch", "stale"}, NULL);
	sk_pipeline_add(p, 2, (const char *[]) {"HLEN", sk_keys_shard(campaign_id, shard, nshards, "journal")}, NULL);
}

void
sk_shard_audit_answer(const SkReply *r, SkShardAudit *out)
{
	const SkReply *m = &r[0];

	memset(out, 0, sizeof(*out));
	if (m->type != REDIS_REPLY_ARRAY || m->elements != 4 || r[1].type != REDIS_REPLY_INTEGER)
		return;
	out->known = true;
	out->epoch = m->element[2].str ? strtoll(m->element[2].str, NULL, 10) : 0;
	out->journaled = r[1].integer;
	/* what lua/buy.lua answers not_loaded for, but for an older epoch */
	out->loaded = m->element[0].str != NULL && m->element[1].str != NULL && m->element[3].str == NULL;
	if (out->loaded)
		out->stock = strtoll(m->element[0].str, NULL, 10);
}

int
sk_restock_send(SkPipeline *p, int64 campaign_id, int nshards, bool rebuy, const char *epoch,
				List *users, List *qtys, int *shards, int *shard_qtys)
{
	const char **args = palloc(sizeof(char *) * (3 + list_length(users)));
	int			ncalls = 0;

	for (int shard = 0; shard < nshards; shard++)
	{
		const char *keys[2] = {sk_keys_shard(campaign_id, shard, nshards, "meta"),
		sk_keys_shard(campaign_id, shard, nshards, "buyers")};
		int			nargs = 3,
					qty = 0;
		ListCell   *lu,
				   *lq;

		forboth(lu, users, lq, qtys)
		{
			if (sk_keys_home_shard(lfirst(lu), nshards) != shard)
				continue;
			args[nargs++] = lfirst(lu);
			qty += lfirst_int(lq);
		}
		if (qty == 0)
			continue;
		args[0] = psprintf("%d", qty);
		args[1] = rebuy ? "1" : "0";
		args[2] = epoch;
		sk_pipeline_script(p, SK_SCRIPT_RESTOCK, 2, keys, nargs, args);
		shards[ncalls] = shard;
		shard_qtys[ncalls++] = qty;
	}
	return ncalls;
}

/* the stock now in Redis, -1 when the campaign is not loaded, -2 when fenced */
SkRestockVerdict
sk_restock_answer(const SkReply *r, int64 *stock, const char **why)
{
	if (sk_reply_is_error(r))
	{
		*why = r->str;
		return SK_RESTOCK_FAILED;
	}
	*stock = sk_reply_int(r);
	return *stock == -2 ? SK_RESTOCK_FENCED : SK_RESTOCK_DONE;
}

void
sk_shard_stock_set_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, int stock)
{
	sk_pipeline_add(p, 4, (const char *[]) {"HSET", sk_keys_shard(campaign_id, shard, nshards, "meta"),
						"stock", psprintf("%d", stock)}, NULL);
}

void
sk_shard_limits_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, const SeckillLimits *limits)
{
	const char *argv[2 + SK_LIMIT_ARGS] = {"HSET", sk_keys_shard(campaign_id, shard, nshards, "meta")};

	sk_pipeline_add(p, 2 + sk_scripts_limit_args(limits, &argv[2]), argv, NULL);
}

bool
sk_shard_limits_answer(const SkReply *r, const char **why)
{
	return !sk_reply_refused(r, why);
}
