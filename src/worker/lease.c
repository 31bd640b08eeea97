/*-------------------------------------------------------------------------
 *
 * lease.c
 *		Leases in Redis, and the worker's lease on a campaign for its admin
 *		work: a lease with an owner token per acquisition, renewed between
 *		the steps of long work, and a fencing token checked where PostgreSQL
 *		is written.  The SQL callers' locks (worker/lock_keeper.c) are leases
 *		too, run by the same sk_lease_run().
 *
 *-------------------------------------------------------------------------
 */
#include "worker/lease.h"

#include "access/xlog.h"
#include "miscadmin.h"
#include "redis/redlock.h"
#include "store/store.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "worker/epoch.h"
#include "worker/worker_state.h"

struct SkLease
{
	int64		campaign_id;
	char	   *token;			/* unique per acquisition */
	int64		fence;			/* its fencing token, 0 until the first write */
	TimestampTz renewed;		/* when it last began */
};

/*
 * A lease kept between the requests of one piece of work its caller sends
 * batch by batch (sk_worker.lease.kept): the next batch resumes it instead
 * of taking the lease anew, two round trips fewer; given back when no batch
 * came for this long.
 */
#define KEPT_IDLE_MS 50


/*
 * Run lease scripts (lock, acquire, renew, unlock), all in one pipeline, on
 * the main Redis or by majority on the Redlock nodes; result[i] is
 * SK_LEASE_YES, SK_LEASE_NO or SK_LEASE_FAILED, and places[i] (when places
 * is not NULL) the owner's place in the lock's fair line when the script
 * answered one (as -place), else 0.  False, with why set, when
 * the main Redis could not be reached at all (every result is then
 * SK_LEASE_FAILED), or a call found too few Redlock nodes; why also names
 * the first refusal.
 */
bool
sk_lease_run(const SkScriptCall *calls, int n, bool on_redlock, int *result, int *places,
			 char *why, size_t whylen)
{
	SkPipeline	p;
	SkReply    *r;

	why[0] = '\0';
	if (places != NULL)
		memset(places, 0, sizeof(int) * n);
	if (on_redlock)
	{
		sk_redlock_batch(calls, n, result);
		for (int i = 0; i < n; i++)
			if (result[i] == SK_LEASE_FAILED)
				strlcpy(why, "too few Redlock nodes answered", whylen);
		return why[0] == '\0';
	}
	sk_pipeline_init(&p);
	for (int i = 0; i < n; i++)
		sk_lease_send(&p, &calls[i]);
	r = sk_pipeline_exec(&p);
	if (r == NULL)
	{
		strlcpy(why, sk_redis_error(), whylen);
		for (int i = 0; i < n; i++)
			result[i] = SK_LEASE_FAILED;
		return false;
	}
	for (int i = 0; i < n; i++)
	{
		int			place;
		const char *refused;

		result[i] = sk_lease_answer(&r[i], &place, &refused);
		if (places != NULL)
			places[i] = place;
		if (refused != NULL && why[0] == '\0')
			strlcpy(why, refused, whylen);
	}
	return true;
}

/*
 * One lease script on the main Redis: SK_LEASE_YES, _NO or _FAILED, and
 * why; *reached is false when Redis could not be reached at all.
 */
static int
run_one(SkScriptCall call, bool *reached, char *why, size_t whylen)
{
	int			result;

	*reached = sk_lease_run(&call, 1, false, &result, NULL, why, whylen);
	return result;
}

/*
 * Take the campaign's lease, which becomes the one held.  Returns it, or
 * NULL with the reply set when another cluster holds the lease or Redis
 * failed.  The token is unique per acquisition, so a late release can never
 * free another owner's lease.
 */
SkLease *
sk_lease_take(int64 id, SeckillReply *reply)
{
	char	   *cluster = psprintf(UINT64_FORMAT ":", GetSystemIdentifier());
	char	   *token = psprintf("%stl%s:%d:" INT64_FORMAT ":" UINT64_FORMAT,
								 cluster, sk_epoch_arg(), MyProcPid, MyStartTimestamp,
								 ++sk_worker.lease.lock_counter);
	SkScriptCall call = sk_campaign_lease_call(SK_CAMPAIGN_LEASE_TAKE, id, token, seckill_lock_lease,
											   cluster, sk_epoch_arg());
	char		why[SK_MESSAGE_LEN];
	bool		reached;
	SkLease    *lease;

	/* our own kept lease would refuse us */
	sk_lease_give_kept();

	switch (run_one(call, &reached, why, sizeof(why)))
	{
		case SK_LEASE_YES:
			break;
		case SK_LEASE_FAILED:
			if (reached)
				seckill_reply_error(reply, SK_ERR_REDIS_REFUSED, "taking the campaign's lock: %s", why);
			else
				seckill_reply_error(reply, SK_ERR_REDIS, "%s", why);
			return NULL;
		default:
			seckill_reply_error(reply, SK_ERR_LOCKED,
								"campaign " INT64_FORMAT " is locked by another PostgreSQL cluster sharing this Redis, or by a newer primary of this one (key %s)",
								id, call.keys[0]);
			return NULL;
	}
	Assert(sk_worker.lease.held == NULL);
	lease = sk_worker.lease.held = MemoryContextAlloc(TopMemoryContext, sizeof(SkLease));
	lease->campaign_id = id;
	lease->token = MemoryContextStrdup(TopMemoryContext, token);
	lease->renewed = GetCurrentTimestamp();
	lease->fence = 0;
	return lease;
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
	SkLease    *held = sk_worker.lease.held;
	bool		reached;
	char		why[SK_MESSAGE_LEN];

	if (held == NULL ||
		GetCurrentTimestamp() < TimestampTzPlusMilliseconds(held->renewed, seckill_lock_lease / 3))
		return;
	held->renewed = GetCurrentTimestamp();
	if (run_one(sk_campaign_lease_call(SK_CAMPAIGN_LEASE_RENEW, held->campaign_id, held->token,
									   seckill_lock_lease, NULL, NULL),
				&reached, why, sizeof(why)) != SK_LEASE_YES)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("seckill lost the lease of campaign " INT64_FORMAT " during its admin work",
						held->campaign_id),
				 why[0] != '\0' ? errdetail("Renewing it failed: %s", why) : 0,
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
	SkLease    *held = sk_worker.lease.held;

	Assert(held != NULL);
	if (held->fence == 0)
		held->fence = store_fence_token();
	store_fence(psprintf("seckill:campaign:" INT64_FORMAT, held->campaign_id), held->fence);
}

/* Give the held lease back. */
void
sk_lease_give(void)
{
	SkLease    *lease = sk_worker.lease.held;
	bool		reached;
	char		why[SK_MESSAGE_LEN];

	sk_worker.lease.held = NULL;
	/* On failure the lease simply runs out. */
	(void) run_one(sk_campaign_lease_call(SK_CAMPAIGN_LEASE_GIVE, lease->campaign_id, lease->token, 0, NULL, NULL),
				   &reached, why, sizeof(why));
	pfree(lease->token);
	pfree(lease);
}

/* After an error in admin work: give the leases back rather than let them run out. */
void
sk_lease_give_if_held(void)
{
	if (sk_worker.lease.held != NULL)
		sk_lease_give();
	sk_lease_give_kept();
}

/*
 * Between the steps of work that spans rounds: the held lease, kept by that
 * work, is no longer the one held (the rounds meanwhile take their own).
 */
SkLease *
sk_lease_detach(void)
{
	SkLease    *lease = sk_worker.lease.held;

	sk_worker.lease.held = NULL;
	return lease;
}

/* The next step of that work: its lease is the one held again. */
void
sk_lease_attach(SkLease *lease)
{
	Assert(sk_worker.lease.held == NULL);
	sk_worker.lease.held = lease;
}

/*
 * Take the campaign's lease for a batch of work sent batch by batch: the
 * lease kept from the batch before, renewed when due, or a new one.
 */
SkLease *
sk_lease_resume(int64 id, SeckillReply *reply)
{
	if (sk_worker.lease.kept == NULL || sk_worker.lease.kept->campaign_id != id)
		return sk_lease_take(id, reply);
	Assert(sk_worker.lease.held == NULL);
	sk_worker.lease.held = sk_worker.lease.kept;
	sk_worker.lease.kept = NULL;
	sk_lease_keep();
	return sk_worker.lease.held;
}

/* The batch is done and more are to come: keep the held lease for them. */
void
sk_lease_keep_for_next(void)
{
	Assert(sk_worker.lease.held != NULL && sk_worker.lease.kept == NULL);
	sk_worker.lease.kept = sk_worker.lease.held;
	sk_worker.lease.held = NULL;
	sk_worker.lease.kept_at = GetCurrentTimestamp();
}

/* Give back the kept lease, if any. */
void
sk_lease_give_kept(void)
{
	if (sk_worker.lease.kept == NULL)
		return;
	Assert(sk_worker.lease.held == NULL);
	sk_worker.lease.held = sk_worker.lease.kept;
	sk_worker.lease.kept = NULL;
	sk_lease_give();
}

/*
 * Give back the kept lease once no batch came for it for KEPT_IDLE_MS (its
 * caller stopped asking).  Returns the milliseconds until that, or -1 when
 * none is kept.
 */
long
sk_lease_give_kept_if_idle(void)
{
	TimestampTz due;

	if (sk_worker.lease.kept == NULL)
		return -1;
	due = TimestampTzPlusMilliseconds(sk_worker.lease.kept_at, KEPT_IDLE_MS);
	if (GetCurrentTimestamp() < due)
		return TimestampDifferenceMilliseconds(GetCurrentTimestamp(), due);
	sk_lease_give_kept();
	return -1;
}
