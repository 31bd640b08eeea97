/*-------------------------------------------------------------------------
 *
 * lease_scripts.c
 *		The lease scripts: the keys and arguments each takes, as its header
 *		in lua/ says, and its reply read as an answer.
 *
 *-------------------------------------------------------------------------
 */
#include "layout/lease_scripts.h"

#include "layout/keys.h"
#include "layout/scripts.h"

SkScriptCall
sk_campaign_lease_call(SkCampaignLeaseStep step, int64 campaign_id, const char *token, int lease_ms,
					   const char *cluster, const char *epoch)
{
	SkScriptCall call = {0};

	call.nkeys = 1;
	call.keys[0] = sk_keys_campaign(campaign_id, "lock");
	call.args[call.nargs++] = token;
	switch (step)
	{
		case SK_CAMPAIGN_LEASE_TAKE:
			call.script = SK_SCRIPT_LOCK;
			call.args[call.nargs++] = psprintf("%d", lease_ms);
			call.args[call.nargs++] = cluster;
			call.args[call.nargs++] = epoch;
			break;
		case SK_CAMPAIGN_LEASE_RENEW:
			call.script = SK_SCRIPT_RENEW;
			call.args[call.nargs++] = psprintf("%d", lease_ms);
			break;
		case SK_CAMPAIGN_LEASE_GIVE:
			call.script = SK_SCRIPT_UNLOCK;
			break;
	}
	return call;
}

SkScriptCall
sk_lock_call(SkLockStep step, SeckillLockMode mode, const char *name, const char *owner, int lease_ms,
			 bool waits)
{
	const char *keys[SK_LOCK_NKEYS];
	SkScriptCall call = {0};
	const int	take[] = {SK_LOCK_KEY, SK_LOCK_SHARED, SK_LOCK_CLAIM, SK_LOCK_LINE, SK_LOCK_LINE_LEASES};
	const int	give_shared[] = {SK_LOCK_SHARED, SK_LOCK_KEY};
	const int	give[] = {SK_LOCK_KEY, SK_LOCK_CLAIM, SK_LOCK_LINE, SK_LOCK_LINE_LEASES};
	const int  *k = take;

	sk_keys_lock_set(name, keys);
	call.args[call.nargs++] = owner;
	switch (step)
	{
		case SK_LOCK_TAKE:
			call.args[call.nargs++] = psprintf("%d", lease_ms);
			if (mode == LOCK_SHARED)
			{
				call.script = SK_SCRIPT_ACQUIRE_SHARED;
				call.nkeys = 3;
				break;
			}
			call.args[call.nargs++] = psprintf("%d", seckill_lock_queue_lease);
			call.args[call.nargs++] = waits ? "1" : "0";
			call.script = mode == LOCK_FAIR ? SK_SCRIPT_ACQUIRE_FAIR : SK_SCRIPT_ACQUIRE;
			call.nkeys = mode == LOCK_FAIR ? 5 : 3;
			break;
		case SK_LOCK_RENEW:
			call.args[call.nargs++] = psprintf("%d", lease_ms);
			call.script = mode == LOCK_SHARED ? SK_SCRIPT_RENEW_SHARED : SK_SCRIPT_RENEW;
			call.nkeys = 1;
			k = mode == LOCK_SHARED ? give_shared : take;
			break;
		case SK_LOCK_PUT_BACK:
			call.args[call.nargs++] = psprintf("%d", lease_ms);
			call.args[call.nargs++] = mode == LOCK_SHARED ? "1" : "0";
			call.script = SK_SCRIPT_PUT_BACK;
			call.nkeys = 2;
			break;
		case SK_LOCK_GIVE:
			call.args[call.nargs++] = sk_keys_lock_channel();
			call.script = mode == LOCK_SHARED ? SK_SCRIPT_UNLOCK_SHARED : SK_SCRIPT_UNLOCK;
			call.nkeys = mode == LOCK_SHARED ? 2 : 4;
			k = mode == LOCK_SHARED ? give_shared : give;
			break;
	}
	for (int i = 0; i < call.nkeys; i++)
		call.keys[i] = keys[k[i]];
	return call;
}

void
sk_redlock_lock_calls(const char *name, const char *owner, int lease_ms, SkScriptCall *take, SkScriptCall *give)
{
	char	   *key = sk_keys_lock(name);

	*take = (SkScriptCall) {SK_SCRIPT_ACQUIRE, 1, {key}, 2, {owner, psprintf("%d", lease_ms)}};
	*give = (SkScriptCall) {SK_SCRIPT_UNLOCK, 1, {key}, 1, {owner}};
}

void
sk_lease_send(SkPipeline *p, const SkScriptCall *call)
{
	sk_pipeline_script(p, call->script, call->nkeys, (const char **) call->keys,
					   call->nargs, (const char **) call->args);
}

/* 1: yes; 0 (or any other number): no; -place: in the line at that place */
int
sk_lease_answer(const SkReply *r, int *place, const char **why)
{
	int64		answer;

	*place = 0;
	if (sk_reply_refused(r, why))
		return SK_LEASE_FAILED;
	answer = sk_reply_int(r);
	if (answer < 0)
		*place = (int) -answer;
	return answer == 1 ? SK_LEASE_YES : SK_LEASE_NO;
}
