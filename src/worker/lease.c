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
#include "worker/epoch.h"

struct SkLease
{
	int64		campaign_id;
	char	   *token;			/* unique per acquisition */
	int64		fence;			/* its fencing token, 0 until the first write */
	TimestampTz renewed;		/* when it last began */
};

static uint64 lock_counter = 0;

/*
 * The lease the work in hand runs under, if any: renewed and fenced by the
 * calls below, and given back after an error.  Work that spans rounds (a
 * rebuild) detaches its lease between its steps.
 */
static SkLease *held = NULL;

/*
 * Take the campaign's lease, which becomes the one held.  Returns it, or
 * NULL with the reply set when another cluster holds the lease or Redis
 * failed.  The token is unique per acquisition, so a late release can never
 * free another owner's lease.
 */
SkLease *
sk_lease_take(int64 id, SeckillReply *reply)
{
	SkPipeline	p;
	SkReply    *r;
	char	   *key = sk_campaign_key(id, "lock");
	char	   *cluster = psprintf(UINT64_FORMAT ":", GetSystemIdentifier());
	char	   *token = psprintf("%stl%s:%d:" INT64_FORMAT ":" UINT64_FORMAT,
								 cluster, sk_epoch_arg(), MyProcPid, MyStartTimestamp, ++lock_counter);
	const char *args[4] = {token, psprintf("%d", seckill_lock_lease), cluster, sk_epoch_arg()};

	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_LOCK, 1, (const char **) &key, 4, args);
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
					   "campaign " INT64_FORMAT " is locked by another PostgreSQL cluster sharing this Redis, or by a newer primary of this one (key %s)",
					   id, key);
		return NULL;
	}
	Assert(held == NULL);
	held = MemoryContextAlloc(TopMemoryContext, sizeof(SkLease));
	held->campaign_id = id;
	held->token = MemoryContextStrdup(TopMemoryContext, token);
	held->renewed = GetCurrentTimestamp();
	held->fence = 0;
	return held;
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

	if (held == NULL ||
		GetCurrentTimestamp() < TimestampTzPlusMilliseconds(held->renewed, seckill_lock_lease / 3))
		return;
	key = sk_campaign_key(held->campaign_id, "lock");
	args[0] = held->token;
	args[1] = psprintf("%d", seckill_lock_lease);
	held->renewed = GetCurrentTimestamp();
	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_RENEW, 1, &key, 2, args);
	r = sk_pipeline_exec(&p);
	if (r == NULL || sk_reply_is_error(&r[0]) || sk_reply_int(&r[0]) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("seckill lost the lease of campaign " INT64_FORMAT " during its admin work",
						held->campaign_id),
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
	Assert(held != NULL);
	if (held->fence == 0)
		held->fence = store_fence_token();
	store_fence(psprintf("seckill:campaign:" INT64_FORMAT, held->campaign_id), held->fence);
}

/* Give the held lease back. */
void
sk_lease_give(void)
{
	SkPipeline	p;
	SkLease    *lease = held;
	const char *keys[1] = {sk_campaign_key(lease->campaign_id, "lock")};

	held = NULL;
	sk_pipeline_init(&p);
	sk_pipeline_script(&p, SK_SCRIPT_UNLOCK, 1, keys, 1, (const char **) &lease->token);
	/* On failure the lease simply runs out. */
	(void) sk_pipeline_exec(&p);
	pfree(lease->token);
	pfree(lease);
}

/* After an error in admin work: give the lease back rather than let it run out. */
void
sk_lease_give_if_held(void)
{
	if (held != NULL)
		sk_lease_give();
}

/*
 * Between the steps of work that spans rounds: the held lease, kept by that
 * work, is no longer the one held (the rounds meanwhile take their own).
 */
SkLease *
sk_lease_detach(void)
{
	SkLease    *lease = held;

	held = NULL;
	return lease;
}

/* The next step of that work: its lease is the one held again. */
void
sk_lease_attach(SkLease *lease)
{
	Assert(held == NULL);
	held = lease;
}
