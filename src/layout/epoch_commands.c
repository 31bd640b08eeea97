/*-------------------------------------------------------------------------
 *
 * epoch_commands.c
 *		The epoch's commands: the keys and arguments each takes, and its
 *		replies read into answers.
 *
 *-------------------------------------------------------------------------
 */
#include "layout/epoch_commands.h"

#include "layout/keys.h"
#include "layout/scripts.h"

static void
epoch_keys(const char **keys)
{
	keys[0] = sk_keys_prefixed("epoch");
	keys[1] = sk_keys_prefixed("master");
	keys[2] = sk_keys_prefixed("promotion");
}

static const char *
string_or_null(const SkReply *r)
{
	return r->type == REDIS_REPLY_STRING ? r->str : NULL;
}

void
sk_epoch_read_send(SkPipeline *p)
{
	const char *keys[SK_EPOCH_READ_REPLIES];

	epoch_keys(keys);
	for (int i = 0; i < SK_EPOCH_READ_REPLIES; i++)
		sk_pipeline_add(p, 2, (const char *[]) {"GET", keys[i]}, NULL);
}

void
sk_epoch_read_answer(const SkReply *r, SkEpochRead *out)
{
	out->recorded = sk_epoch_get_answer(&r[0]);
	out->master = string_or_null(&r[1]);
	out->promotion = string_or_null(&r[2]);
}

void
sk_epoch_get_send(SkPipeline *p)
{
	sk_pipeline_add(p, 2, (const char *[]) {"GET", sk_keys_prefixed("epoch")}, NULL);
}

int64
sk_epoch_get_answer(const SkReply *r)
{
	return r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
}

void
sk_epoch_record_send(SkPipeline *p, const char *epoch, const char *run_id, const char *promotion)
{
	const char *keys[3];

	epoch_keys(keys);
	sk_pipeline_script(p, SK_SCRIPT_EPOCH, 3, keys, 3, (const char *[]) {epoch, run_id, promotion});
}

/* {the epoch recorded before, the promotion recorded with it} */
bool
sk_epoch_record_answer(const SkReply *r, int64 *recorded, const char **promotion, const char **why)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		r->element[0].type != REDIS_REPLY_INTEGER || r->element[1].type != REDIS_REPLY_STRING)
	{
		*why = r->str ? r->str : "unexpected reply";
		return false;
	}
	*recorded = r->element[0].integer;
	*promotion = r->element[1].str;
	return true;
}

void
sk_take_over_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, const char *epoch,
				  const char *stale)
{
	const char *key = sk_keys_shard(campaign_id, shard, nshards, "meta");

	sk_pipeline_script(p, SK_SCRIPT_TAKE_OVER, 1, &key, 2, (const char *[]) {epoch, stale});
}

/* {0, the shard's stock or nil} when marked, {1, the newer epoch} when not */
void
sk_take_over_answer(const SkReply *r, SkTakeOverAnswer *out)
{
	memset(out, 0, sizeof(*out));
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0].type != REDIS_REPLY_INTEGER)
	{
		out->why = r->str ? r->str : "unexpected reply";
		return;
	}
	if (r->element[0].integer == 1 && r->element[1].type == REDIS_REPLY_INTEGER)
	{
		out->newer = r->element[1].integer;
		return;
	}
	out->marked = true;
	if (r->element[1].type == REDIS_REPLY_STRING)
	{
		out->loaded = true;
		out->stock = strtoll(r->element[1].str, NULL, 10);
	}
}

void
sk_unstale_send(SkPipeline *p, int64 campaign_id, int shard, int nshards, const char *epoch)
{
	const char *key = sk_keys_shard(campaign_id, shard, nshards, "meta");

	sk_pipeline_script(p, SK_SCRIPT_UNSTALE, 1, &key, 1, (const char *[]) {epoch});
}

bool
sk_unstale_answer(const SkReply *r)
{
	return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
}

void
sk_ids_send(SkPipeline *p, int64 first, int64 last)
{
	const char *key = sk_keys_prefixed("order-ids");

	sk_pipeline_script(p, SK_SCRIPT_IDS, 1, &key, 2,
					   (const char *[]) {psprintf(INT64_FORMAT, first), psprintf(INT64_FORMAT, last)});
}

int64
sk_ids_answer(const SkReply *r)
{
	return r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}
