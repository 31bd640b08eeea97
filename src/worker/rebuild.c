/*-------------------------------------------------------------------------
 *
 * rebuild.c
 *		Loading campaigns from PostgreSQL into Redis: a preheat, the rebuild
 *		of a campaign Redis lost or that drifted, and of every campaign after
 *		sales from PostgreSQL alone.
 *
 * A campaign of millions of buyers takes seconds to load, so a rebuild runs
 * in steps of a few milliseconds between the worker's rounds, under the
 * campaign's lease, which it holds from its first step to its last.  The
 * campaigns queued take a step each in turn: after a Redis failover, a
 * campaign on sale is not held back by the whole rebuild of every other
 * campaign still preheated, however many buyers they have.  Each step
 * stages a keyset page of buyers in a staged set per shard; the last step
 * swaps the staged sets in with the stock PostgreSQL has then
 * (lua/load.lua).  Meanwhile the campaign's purchases are answered
 * busy, its other admin requests wait for the rebuild and are served after
 * it, and a cancellation of one of its orders removes the buyer from the
 * staged set.  Nothing else changes what PostgreSQL says about the campaign,
 * so what is swapped in is exact.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/rebuild.h"

#include "layout/keys.h"
#include "layout/rebuild_commands.h"
#include "miscadmin.h"
#include "redis/redis.h"
#include "shared/campaign_cache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/lease.h"
#include "worker/worker_state.h"

/*
 * A step's budget: purchases queued behind it wait no longer than that.
 * Pages of buyers are sized to fit it, between PAGE_MIN and PAGE_MAX users.
 */
#define STEP_BUDGET_MS 1
#define PAGE_MIN 200
#define PAGE_MAX 20000

/* A rebuild whose staged sets were lost is started again, this many times. */
#define MAX_ATTEMPTS 3

/* After a failed rebuild of a campaign Redis lost: when to try again. */
#define RETRY_MS 5000

typedef enum RebuildPhase
{
	STAGE_ACTIVE,				/* buyers with an active order */
	STAGE_KEPT,					/* cancelled buyers refused a rebuy */
	LOAD						/* swap the staged sets in */
} RebuildPhase;

typedef struct Rebuild
{
	int64		campaign_id;
	SkLease    *lease;			/* NULL until its first step */
	int			nshards;
	bool		draft;			/* never sold: its journal is emptied */
	bool		rebuy_after_cancel;
	RebuildPhase phase;
	char		after[SECKILL_MAX_USER_LEN + 1];	/* the last buyer staged in this phase */
	int64	   *staged;			/* per shard: buyers in its staged set */
	uint64		generation;		/* of the Redis connection it stages on */
	int			attempts;
	int			cancelled_qty;	/* cancelled meanwhile, for Redis at its end */
	TimestampTz started;
	List	   *waiters;		/* RoundItem *: answered when it ends */
	List	   *deferred;		/* RoundItem *: served when it ends */
} Rebuild;

static Rebuild *
find(int64 campaign_id)
{
	ListCell   *lc;

	foreach(lc, sk_worker.rebuild.rebuilds)
	{
		Rebuild    *r = lfirst(lc);

		if (r->campaign_id == campaign_id)
			return r;
	}
	return NULL;
}

/*
 * Queue a rebuild of the campaign, unless one is queued already.  Redis may
 * have lost the epoch with the campaign: the epoch is checked before the
 * rebuild's first step.
 */
void
sk_rebuild_request(int64 campaign_id)
{
	MemoryContext old;
	Rebuild    *r;

	if (find(campaign_id) != NULL)
		return;
	sk_journal_check_epoch();
	if (sk_worker.rebuild.rebuild_cxt == NULL)
		sk_worker.rebuild.rebuild_cxt = AllocSetContextCreate(TopMemoryContext, "seckill rebuilds",
															  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(sk_worker.rebuild.rebuild_cxt);
	r = palloc0(sizeof(Rebuild));
	r->campaign_id = campaign_id;
	r->started = GetCurrentTimestamp();
	sk_worker.rebuild.rebuilds = lappend(sk_worker.rebuild.rebuilds, r);
	MemoryContextSwitchTo(old);
}

/* Redis lost this campaign: rebuild it, unless that failed lately. */
void
sk_rebuild_lost(int64 campaign_id)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < SK_REBUILD_FAILED_KEPT; i++)
		if (sk_worker.rebuild.failed[i].campaign_id == campaign_id &&
			now < TimestampTzPlusMilliseconds(sk_worker.rebuild.failed[i].at, RETRY_MS))
			return;
	sk_rebuild_request(campaign_id);
}

/*
 * Whatever failed before may work now (a claim of the epoch): rebuilds are
 * tried again at once.
 */
void
sk_rebuild_forget_failures(void)
{
	memset(sk_worker.rebuild.failed, 0, sizeof(sk_worker.rebuild.failed));
}

bool
sk_rebuild_pending(void)
{
	return sk_worker.rebuild.rebuilds != NIL;
}

/* Is the campaign being rebuilt, or queued for it? */
bool
sk_rebuild_busy(int64 campaign_id)
{
	return sk_worker.rebuild.rebuilds != NIL && find(campaign_id) != NULL;
}

/* Rebuilds failed since the worker started. */
uint64
sk_rebuild_failures(void)
{
	return sk_worker.rebuild.failures;
}

static RoundItem *
copy_item(const RoundItem *item)
{
	RoundItem  *copy = MemoryContextAlloc(sk_worker.rebuild.rebuild_cxt, sizeof(RoundItem));

	*copy = *item;
	return copy;
}

/*
 * The item (a preheat, or a reconcile that found drift) is answered when the
 * rebuild of its campaign ends: with its result, or why it failed.
 */
void
sk_rebuild_wait(const RoundItem *item)
{
	Rebuild    *r = find(item->request.campaign_id);
	MemoryContext old = MemoryContextSwitchTo(sk_worker.rebuild.rebuild_cxt);

	Assert(r != NULL);
	r->waiters = lappend(r->waiters, copy_item(item));
	MemoryContextSwitchTo(old);
}

/*
 * A request that changes a campaign being rebuilt waits for the rebuild:
 * true when it was set aside, to be served when the rebuild ends.
 */
bool
sk_rebuild_defer(const RoundItem *item)
{
	Rebuild    *r;
	MemoryContext old;

	switch (item->request.kind)
	{
		case SK_REQ_CLOSE:
		case SK_REQ_RECONCILE:
		case SK_REQ_RELEASE:
		case SK_REQ_RESTOCK:
		case SK_REQ_LIMITS:
			break;
		default:
			return false;
	}
	r = find(item->request.campaign_id);
	if (r == NULL)
		return false;
	old = MemoryContextSwitchTo(sk_worker.rebuild.rebuild_cxt);
	r->deferred = lappend(r->deferred, copy_item(item));
	MemoryContextSwitchTo(old);
	return true;
}

/* Callers that gave up while they waited: their requests are dropped. */
static List *
drop_given_up(List *items)
{
	ListCell   *lc;

	foreach(lc, items)
	{
		RoundItem  *item = lfirst(lc);

		if (seckill_slot_given_up(item->slot, item->seq))
		{
			items = foreach_delete_current(items, lc);
			pfree(item);
		}
	}
	return items;
}

/* Empty the staged sets (and a draft's journal) and start from the first buyer. */
static bool
restart(Rebuild *r, SeckillReply *reply)
{
	SkPipeline	p;

	sk_pipeline_init(&p);
	for (int shard = 0; shard < r->nshards; shard++)
		sk_staged_clear_send(&p, r->campaign_id, shard, r->nshards, r->draft);
	if (sk_pipeline_exec(&p) == NULL)
	{
		seckill_reply_error(reply, SK_ERR_REDIS, "%s", sk_redis_error());
		return false;
	}
	r->attempts++;
	r->phase = STAGE_ACTIVE;
	r->after[0] = '\0';			/* user ids are never empty */
	memset(r->staged, 0, sizeof(int64) * r->nshards);
	r->generation = sk_redis_generation();
	return true;
}

/*
 * The first step: the lease, the campaign as PostgreSQL has it, its journal
 * settled.  False with the reply set when it cannot be loaded.
 */
static bool
start(Rebuild *r, SeckillReply *reply)
{
	SeckillCampaignRow row;
	bool		found;

	if (sk_lease_take(r->campaign_id, reply) == NULL)
		return false;
	store_begin("seckill: load campaign");
	found = store_campaign(r->campaign_id, &row);
	store_commit();
	if (!found)
	{
		seckill_reply_error(reply, SK_ERR_INVALID,
							"campaign " INT64_FORMAT " is not visible to the seckill worker; commit the transaction that created it first",
							r->campaign_id);
		return false;
	}
	if (strcmp(row.state, "closed") == 0)
	{
		seckill_reply_error(reply, SK_ERR_INVALID, "campaign " INT64_FORMAT " is closed", r->campaign_id);
		return false;
	}
	/*
	 * Before a campaign goes on sale, it must have room in the cache; one on
	 * sale already that has none is rebuilt all the same (it sells without
	 * the cache's shortcuts).
	 */
	if (strcmp(row.state, "draft") == 0 && !seckill_campaign_has_room(r->campaign_id))
	{
		seckill_reply_error(reply, SK_ERR_INVALID,
							"too many preheated campaigns: seckill.max_campaigns is %d; close finished campaigns with seckill_close(), or raise seckill.max_campaigns and restart the server",
							seckill_max_campaigns);
		reply->sqlerrcode = ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		return false;
	}

	/*
	 * A campaign that never sold owns nothing in Redis yet: whatever its keys
	 * hold is left by an earlier installation of the extension, whose
	 * campaign ids restarted.  Otherwise settle the journal first.
	 */
	r->draft = strcmp(row.state, "draft") == 0;
	r->rebuy_after_cancel = row.rebuy_after_cancel;
	r->nshards = Max(row.limits.shards, 1);
	r->staged = MemoryContextAllocZero(sk_worker.rebuild.rebuild_cxt, sizeof(int64) * r->nshards);
	if (!r->draft && !sk_journal_replay_campaign(r->campaign_id, NULL, NULL))
	{
		sk_journal_not_ready(reply);
		return false;
	}
	return restart(r, reply);
}

/*
 * Stage the next page of buyers, each in its home shard's staged set.
 * False with the reply set when Redis failed or refused.
 */
static bool
stage_page(Rebuild *r, SeckillReply *reply)
{
	TimestampTz begun = GetCurrentTimestamp();
	List	   *users;
	SkPipeline	p;
	SkReply    *replies;
	int			limit = Max(sk_worker.rebuild.page_size, PAGE_MIN);
	int		   *sent;
	int			nsent;

	store_begin("seckill: read buyers");
	users = store_buyers_page(r->campaign_id, r->phase == STAGE_KEPT, r->after, limit);
	store_commit();

	sk_pipeline_init(&p);
	sent = palloc(sizeof(int) * sk_staged_add_commands(list_length(users), r->nshards));
	nsent = sk_staged_add_send(&p, r->campaign_id, r->nshards, users, sent);
	if (nsent > 0)
	{
		replies = sk_pipeline_exec(&p);
		if (replies == NULL)
		{
			seckill_reply_error(reply, SK_ERR_REDIS, "%s", sk_redis_error());
			return false;
		}
		for (int i = 0; i < nsent; i++)
		{
			int64		added;
			const char *why;

			if (!sk_staged_add_answer(&replies[i], &added, &why))
			{
				seckill_reply_error(reply, SK_ERR_REDIS_REFUSED,
									"staging the buyers of campaign " INT64_FORMAT " in Redis failed: %s",
									r->campaign_id, why);
				return false;
			}
			r->staged[sent[i]] += added;
		}
	}

	if (list_length(users) < limit)
	{
		r->phase = r->phase == STAGE_ACTIVE && !r->rebuy_after_cancel ? STAGE_KEPT : LOAD;
		r->after[0] = '\0';
	}
	else
		strlcpy(r->after, llast(users), sizeof(r->after));

	/* half way towards the page that fits the budget */
	if (list_length(users) == limit)
	{
		int64		took = Max(GetCurrentTimestamp() - begun, 1);

		sk_worker.rebuild.page_size = Max(PAGE_MIN, Min(PAGE_MAX,
														(limit + limit * STEP_BUDGET_MS * 1000 / took) / 2));
	}
	sk_lease_keep();
	return true;
}

/*
 * The last step: swap each shard's staged buyers in, with its share of the
 * stock PostgreSQL has now, the sale window and the limits.  Returns false
 * with the reply set when it failed; true when it is done, or, the staged
 * sets being lost, it must stage them again.
 */
static bool
load(Rebuild *r, SeckillReply *reply, bool *again)
{
	SeckillCampaignRow row;
	SkPipeline	p;
	SkReply    *replies;
	int			stock;
	int64		buyers = 0;
	bool		found;

	*again = false;
	/* the swap overwrites the campaign in Redis: only while the lease is ours */
	sk_lease_keep();
	store_begin("seckill: load campaign");
	found = store_campaign(r->campaign_id, &row);
	store_commit();
	if (!found)
	{
		seckill_reply_error(reply, SK_ERR_INVALID, "campaign " INT64_FORMAT " no longer exists",
							r->campaign_id);
		reply->sqlerrcode = ERRCODE_UNDEFINED_OBJECT;
		return false;
	}
	stock = row.total_stock - row.sold;
	sk_pipeline_init(&p);
	for (int shard = 0; shard < r->nshards; shard++)
		sk_load_send(&p, &row, shard, r->nshards, sk_keys_shard_stock(stock, shard, r->nshards),
					 r->staged[shard], sk_epoch_arg());
	replies = sk_pipeline_exec(&p);
	if (replies == NULL)
	{
		seckill_reply_error(reply, SK_ERR_REDIS, "%s", sk_redis_error());
		return false;
	}
	for (int shard = 0; shard < r->nshards; shard++)
	{
		int64		loaded;
		const char *why;

		switch (sk_load_answer(&replies[shard], &loaded, &why))
		{
			case SK_LOAD_DONE:
				buyers += loaded;
				continue;
			case SK_LOAD_STAGED_AGAIN:
				if (r->attempts >= MAX_ATTEMPTS)
					break;
				ereport(LOG,
						(errmsg("seckill worker stages the buyers of campaign " INT64_FORMAT " again: %s",
								r->campaign_id, why)));
				*again = true;
				return restart(r, reply);
			case SK_LOAD_FENCED:
				sk_epoch_fence("a load was refused");
				sk_epoch_reply_fenced(reply);
				return false;
			case SK_LOAD_FAILED:
				break;
		}
		seckill_reply_error(reply, SK_ERR_REDIS_REFUSED, "loading campaign " INT64_FORMAT " into Redis failed: %s",
							r->campaign_id, why);
		return false;
	}

	if (r->draft)
	{
		store_begin("seckill: preheat campaign");
		sk_lease_fence();
		store_set_state(r->campaign_id, "preheated");
		store_commit();
	}
	(void) seckill_campaign_store(&row, stock <= 0);
	for (int shard = 0; shard < r->nshards; shard++)
		seckill_campaign_note_stock(r->campaign_id, shard, sk_keys_shard_stock(stock, shard, r->nshards));
	ereport(LOG,
			(errmsg("seckill worker loaded campaign " INT64_FORMAT " (\"%s\") into Redis in %ld ms: stock %d, " INT64_FORMAT " buyers, %d shard(s)",
					r->campaign_id, row.goods,
					(long) TimestampDifferenceMilliseconds(r->started, GetCurrentTimestamp()),
					stock, buyers, r->nshards)));
	reply->status = SK_OK;
	reply->values[0] = stock;
	reply->values[1] = buyers;
	return true;
}

/*
 * One step of the rebuild under way.  True when it ended, with the reply
 * set to its result.
 */
static bool
advance(Rebuild *r, SeckillReply *reply)
{
	bool		again;

	if (r->lease == NULL)
		return !start(r, reply);
	if (r->generation != sk_redis_generation())
	{
		/* a new connection: Redis may have restarted and lost what was staged */
		if (!r->draft && !sk_journal_replay_campaign(r->campaign_id, NULL, NULL))
		{
			sk_journal_not_ready(reply);
			return true;
		}
		return !restart(r, reply);
	}
	if (r->phase != LOAD)
		return !stage_page(r, reply);
	return !load(r, reply, &again) || !again;
}

/*
 * The rebuild ended: answer its waiters, give its lease back, and return
 * the requests that waited for it, to be served now (in the caller's memory
 * context; the caller frees them).
 */
static List *
finish(Rebuild *r, const SeckillReply *result)
{
	ListCell   *lc;
	List	   *deferred = list_copy(r->deferred);

	if (r->lease != NULL)
	{
		sk_lease_attach(r->lease);
		sk_lease_give();
	}
	foreach(lc, r->waiters)
	{
		RoundItem  *item = lfirst(lc);

		if (result->status != SK_OK)
			item->reply = *result;
		else
		{
			item->reply.status = SK_OK;
			if (item->request.kind == SK_REQ_PREHEAT)
			{
				item->reply.values[0] = result->values[0];
				item->reply.values[1] = result->values[1];
			}
		}
		sk_answer(item);
	}
	if (result->status != SK_OK)
	{
		int			slot = 0;

		sk_worker.rebuild.failures++;
		for (int i = 0; i < SK_REBUILD_FAILED_KEPT; i++)
		{
			if (sk_worker.rebuild.failed[i].campaign_id == r->campaign_id)
			{
				slot = i;
				break;
			}
			if (sk_worker.rebuild.failed[i].at < sk_worker.rebuild.failed[slot].at)
				slot = i;
		}
		sk_worker.rebuild.failed[slot].campaign_id = r->campaign_id;
		sk_worker.rebuild.failed[slot].at = GetCurrentTimestamp();
		ereport(LOG,
				(errmsg("seckill worker could not rebuild campaign " INT64_FORMAT " in Redis: %s",
						r->campaign_id, result->message),
				 r->cancelled_qty > 0 ?
				 errdetail("%d item(s) cancelled meanwhile are back on sale in PostgreSQL, not yet in Redis.",
						   r->cancelled_qty) : 0,
				 errhint("Its purchases are answered busy; the next purchase tries again after %d s, or run seckill_preheat() or seckill_reconcile().",
						 RETRY_MS / 1000)));
	}
	sk_worker.rebuild.rebuilds = list_delete_first(sk_worker.rebuild.rebuilds);
	list_free_deep(r->waiters);
	list_free(r->deferred);
	if (r->staged != NULL)
		pfree(r->staged);
	pfree(r);
	return deferred;
}

/*
 * One step of the first rebuild queued, a page of buyers sized to take
 * about STEP_BUDGET_MS; then that rebuild goes to the end of the queue.
 * Returns the requests that waited for it if it ended, for the caller to
 * serve.
 */
List *
sk_rebuild_step(void)
{
	Rebuild    *r = linitial(sk_worker.rebuild.rebuilds);
	SeckillReply reply = {0};
	bool		ended;

	r->waiters = drop_given_up(r->waiters);
	r->deferred = drop_given_up(r->deferred);
	if (!sk_journal_ready())
	{
		sk_journal_not_ready(&reply);
		ended = true;
	}
	else
	{
		if (r->lease != NULL)
			sk_lease_attach(r->lease);
		ended = advance(r, &reply);
		r->lease = sk_lease_detach();
	}
	if (ended)
		return finish(r, &reply);
	/* the next step is the next campaign's (the list, never emptied here, stays in rebuild_cxt) */
	if (list_length(sk_worker.rebuild.rebuilds) > 1)
		sk_worker.rebuild.rebuilds = lappend(list_delete_first(sk_worker.rebuild.rebuilds), r);
	return NIL;
}

/*
 * The step under way (of the first rebuild queued: it goes to the end of
 * the queue only once its step returned) failed with an ERROR, and the lease
 * it held was given back: the rebuild ends with that error.
 */
List *
sk_rebuild_failed(const SeckillReply *why)
{
	Rebuild    *r = linitial(sk_worker.rebuild.rebuilds);

	r->lease = NULL;
	return finish(r, why);
}

/*
 * The worker's error boundary: forget every rebuild, give their leases back.
 * Their callers, whose requests are taken, are answered by the boundary.
 */
void
sk_rebuild_abort(void)
{
	ListCell   *lc;
	SkLease    *held = sk_lease_detach();

	/* every lease the rebuilds hold, and one a first step had just taken */
	foreach(lc, sk_worker.rebuild.rebuilds)
	{
		Rebuild    *r = lfirst(lc);

		if (r->lease == NULL || r->lease == held)
			continue;
		sk_lease_attach(r->lease);
		sk_lease_give();
	}
	if (held != NULL)
	{
		sk_lease_attach(held);
		sk_lease_give();
	}
	/* they failed: leaving database mode must start over */
	if (sk_worker.rebuild.rebuilds != NIL)
		sk_worker.rebuild.failures++;
	sk_worker.rebuild.rebuilds = NIL;
	if (sk_worker.rebuild.rebuild_cxt != NULL)
		MemoryContextReset(sk_worker.rebuild.rebuild_cxt);
}

/*
 * Orders of a campaign being rebuilt were cancelled: the buyers who may buy
 * again leave its staged sets (the stock is read from PostgreSQL at its
 * end).  False when the campaign is not being rebuilt.
 */
bool
sk_rebuild_note_cancel(const SkCancelled *c)
{
	Rebuild    *r = find(c->campaign_id);
	SkPipeline	p;
	SkReply    *replies;
	ListCell   *lc;

	if (r == NULL)
		return false;
	r->cancelled_qty += c->qty;
	if (!c->rebuy || r->staged == NULL)
		return true;
	sk_pipeline_init(&p);
	foreach(lc, c->users)
		sk_staged_remove_send(&p, c->campaign_id, r->nshards, lfirst(lc));
	replies = sk_pipeline_exec(&p);
	if (replies == NULL)
	{
		/* the next step, on a new connection, stages every buyer again */
		ereport(LOG,
				(errmsg("seckill could not remove cancelled buyers from the staged buyers of campaign " INT64_FORMAT ": %s",
						c->campaign_id, sk_redis_error())));
		return true;
	}
	foreach(lc, c->users)
		r->staged[sk_keys_home_shard(lfirst(lc), r->nshards)] -=
			sk_staged_remove_answer(&replies[foreach_current_index(lc)]);
	return true;
}
