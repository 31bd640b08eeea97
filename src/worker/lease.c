/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The worker's lease on a campaign for its admin work: a Redis lock
 *		with an owner token per acquisition, renewed between the steps of
 *		long work, and a fencing token checked where PostgreSQL is written.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/lease.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "redis/redis.h"
#include "store/store.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

static uint64 lock_counter = 0;

/* The lease held now, if any, so that it can be released after an error. */
static int64 held_campaign = 0;
static char *held_token = NULL;
static int64 held_fence = 0;	/* its fencing token */
static TimestampTz held_renewed = 0;	/* when its lease last began */

/*
 * Take the campaign's lease.  Returns the owner token, or NULL with the
 * reply set when another cluster holds the lease or Redis failed.  The
 * token is unique per acquisition, so a late release can never free another
 * owner's lease.
 */
char *
sk_lease_take(int64 id, SeckillReply *reply)
{
	SkPipeline	p;
	SkReply    *r;
	char	   *key = sk_campaign_key(id, "lock");
	char	   *cluster = psprintf(UINT64_FORMAT ":", GetSystemIdentifier());
	char	   *token = psprintf("%s%d:" INT64_FORMAT ":" UINT64_FORMAT,
								 cluster, MyProcPid, MyStartTimestamp, ++lock_counter);
	const char *args[3] = {token, psprintf("%d", seckill_lock_lease), cluster};

	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_LOCK, 1, (const char **) &key, 3, args);
	r = sk_pipeline_exec(&p);
	if (r == NULL)
	{
		seckill_reply_error(reply, SK_ERR_REDIS, "%s", sk_redis_error());
		return NULL;
	}
	if (sk_reply_is_error(&r[0]))
	{
		seckill_reply_error(reply, SK_ERR_REDIS_REFUSED, "taking the campaign's lock: %s", r[0].str);
		return NULL;
	}
	if (sk_reply_int(&r[0]) != 1)
	{
		seckill_reply_error(reply, SK_ERR_LOCKED,
					   "campaign " INT64_FORMAT " is locked by another PostgreSQL cluster sharing this Redis (key %s)",
					   id, key);
		return NULL;
	}
	held_campaign = id;
	held_token = MemoryContextStrdup(TopMemoryContext, token);
	held_renewed = GetCurrentTimestamp();
	held_fence = 0;				/* taken by the first write under the lease */
	return token;
}

/*
 * Between the steps of long admin work (a rebuild shard by shard, releases
 * batch by batch): renew the campaign's lease once a third of it has gone,
 * and stop with an error if it is no longer ours.  Nothing when no lease is
 * held (the replay at the worker's start).
 */
void
sk_lease_keep(void)
{
	SkPipeline	p;
	SkReply    *r;
	const char *key;
	const char *args[2];

	if (held_token == NULL ||
		GetCurrentTimestamp() < TimestampTzPlusMilliseconds(held_renewed, seckill_lock_lease / 3))
		return;
	key = sk_campaign_key(held_campaign, "lock");
	args[0] = held_token;
	args[1] = psprintf("%d", seckill_lock_lease);
	held_renewed = GetCurrentTimestamp();
	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_RENEW, 1, &key, 2, args);
	r = sk_pipeline_exec(&p);
	if (r == NULL || sk_reply_is_error(&r[0]) || sk_reply_int(&r[0]) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("seckill lost the lease of campaign " INT64_FORMAT " during its admin work",
						held_campaign),
				 errhint("Raise seckill.lock_lease if this work takes longer; it is safe to run it again.")));
}

/*
 * In a transaction that writes under the campaign's lease: a stale holder
 * (its lease ran out while it stalled, and another took the campaign) is
 * refused, like a SQL caller's write behind seckill_fence_check().
 */
void
sk_lease_fence(void)
{
	if (held_fence == 0)
		held_fence = store_fence_token();
	store_fence(psprintf("seckill:campaign:" INT64_FORMAT, held_campaign), held_fence);
}

void
sk_lease_give(void)
{
	SkPipeline	p;
	const char *keys[1] = {sk_campaign_key(held_campaign, "lock")};
	const char *token = held_token;

	held_campaign = 0;
	held_token = NULL;
	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_UNLOCK, 1, keys, 1, &token);
	/* On failure the lease simply runs out. */
	(void) sk_pipeline_exec(&p);
	pfree((char *) token);
}

/* After an error in admin work: give the lease back rather than let it run out. */
void
sk_lease_give_if_held(void)
{
	if (held_token != NULL)
		sk_lease_give();
}
