/*-------------------------------------------------------------------------
 *
 * lease_scripts.h
 *		The lease scripts as typed calls: a campaign's lease for the
 *		worker's admin work (lua/lock.lua, lua/renew.lua, lua/unlock.lua)
 *		and the SQL callers' locks in each mode (lua/acquire*.lua,
 *		lua/renew*.lua, lua/unlock*.lua, lua/put_back.lua): their keys and
 *		arguments built into an SkScriptCall, which runs on the main Redis
 *		or by majority on the Redlock nodes, and a reply read as an answer.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_LEASE_SCRIPTS_H
#define SECKILL_LEASE_SCRIPTS_H

#include "seckill.h"

#include "redis/redis.h"
#include "shared/lock_table.h"

/* A lease script's answer (and sk_redlock_batch()'s, by majority). */
#define SK_LEASE_YES 1			/* taken, renewed or given back */
#define SK_LEASE_NO 0			/* held by another owner, or gone */
#define SK_LEASE_FAILED (-1)	/* refused, or too few Redlock nodes answered */

/* A campaign's lease: taken by a token of this cluster's, renewed, given back. */
typedef enum SkCampaignLeaseStep
{
	SK_CAMPAIGN_LEASE_TAKE,
	SK_CAMPAIGN_LEASE_RENEW,
	SK_CAMPAIGN_LEASE_GIVE
} SkCampaignLeaseStep;

extern SkScriptCall sk_campaign_lease_call(SkCampaignLeaseStep step, int64 campaign_id, const char *token,
										   int lease_ms, const char *cluster, const char *epoch);

/* What a lease script does to a SQL caller's lock. */
typedef enum SkLockStep
{
	SK_LOCK_TAKE,				/* waits: a fair taker joins the line when it cannot have it now */
	SK_LOCK_RENEW,
	SK_LOCK_GIVE,
	SK_LOCK_PUT_BACK			/* lease_ms: what is left of it */
} SkLockStep;

extern SkScriptCall sk_lock_call(SkLockStep step, SeckillLockMode mode, const char *name, const char *owner,
								 int lease_ms, bool waits);

/*
 * A lock on the Redlock nodes (seckill.redlock_nodes), taken by majority:
 * each node's plain lease on the lock's key, taken (lua/acquire.lua) and,
 * when no majority came of it, given back (lua/unlock.lua).
 */
extern void sk_redlock_lock_calls(const char *name, const char *owner, int lease_ms,
								  SkScriptCall *take, SkScriptCall *give);

/* A lease call (of any of the above) put into a pipeline of the caller's, on the main Redis. */
extern void sk_lease_send(SkPipeline *p, const SkScriptCall *call);

/*
 * A reply of a lease script: SK_LEASE_YES, _NO or _FAILED (why: the
 * refusal); *place, the owner's place in a fair line when the script
 * answered one, else 0.
 */
extern int	sk_lease_answer(const SkReply *r, int *place, const char **why);

#endif							/* SECKILL_LEASE_SCRIPTS_H */
