/*-------------------------------------------------------------------------
 *
 * campaign_admin.c
 *		The worker's admin work on campaigns, a handler per request kind
 *		(the dispatch table is in worker/dispatch.c, which takes the campaign's
 *		lease around those that write): preheat (a rebuild from PostgreSQL,
 *		worker/rebuild.c), close, status, reconcile, cancel, release,
 *		restock, limits.  Each settles the campaign's journal first where its
 *		figures depend on it.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/campaign_admin.h"

#include "access/xlog.h"
#include "layout/campaign_commands.h"
#include "layout/keys.h"
#include "miscadmin.h"
#include "redis/redis.h"
#include "shared/call.h"
#include "shared/campaign_cache.h"
#include "shared/stats.h"
#include "store/store.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/lease.h"
#include "worker/rebuild.h"
#include "worker/worker_state.h"

/*
 * Orders cancelled per request by seckill_release_expired(): as many as take
 * about RELEASE_BUDGET_MS of the worker's time, so that the purchases queued
 * meanwhile wait no longer than that.
 */
#define RELEASE_BUDGET_MS 2
#define RELEASE_MIN_BATCH 50

void
sk_admin_close(const SeckillRequest *request, SeckillReply *reply)
{
	int64		id = request->campaign_id;
	SeckillCampaignRow row;
	SkPipeline	p;

	if (!sk_journal_replay_campaign(id, NULL, NULL))
	{
		sk_journal_not_ready(reply);
		return;
	}
	store_begin("seckill: close campaign");
	sk_lease_fence();
	if (!store_campaign(id, &row))
	{
		store_commit();
		seckill_reply_error(reply, SK_ERR_INVALID, "campaign " INT64_FORMAT " does not exist", id);
		reply->sqlerrcode = ERRCODE_UNDEFINED_OBJECT;
		return;
	}
	if (strcmp(row.state, "closed") != 0)
		store_set_state(id, "closed");
	store_commit();
	seckill_campaign_forget(id);

	/* Keep the closed campaign's keys a week for inspection, then let Redis drop them. */
	sk_pipeline_init(&p);
	for (int shard = 0; shard < Max(row.limits.shards, 1); shard++)
		sk_shard_close_send(&p, id, shard, Max(row.limits.shards, 1), 7 * 24 * 3600);
	if (sk_pipeline_exec(&p) == NULL)
	{
		seckill_reply_error(reply, SK_ERR_REDIS,
					   "campaign closed in PostgreSQL, but Redis failed: %s", sk_redis_error());
		return;
	}
	reply->status = SK_OK;
	reply->values[0] = row.sold;
}

static void
campaign_status(int64 id, SeckillReply *reply)
{
	SkPipeline	p;
	SkReply    *r;
	SeckillCampaign *c = seckill_campaign_find(id);
	int			nshards = sk_journal_campaign_shards(id);
	int64		stock = 0,
				buyers = 0,
				journaled = 0;

	sk_pipeline_init(&p);
	for (int shard = 0; shard < nshards; shard++)
		sk_shard_counts_send(&p, id, shard, nshards);
	r = sk_pipeline_exec(&p);
	if (r == NULL)
	{
		seckill_reply_error(reply, SK_ERR_REDIS, "%s", sk_redis_error());
		return;
	}
	/* the sums over the shards; the stock is unknown (-1) when a shard lost it */
	for (int shard = 0; shard < nshards; shard++, r += SK_SHARD_COUNTS_REPLIES)
	{
		SkShardCounts counts;

		sk_shard_counts_answer(r, &counts);
		if (counts.refused)
		{
			seckill_reply_error(reply, counts.unreachable ? SK_ERR_REDIS : SK_ERR_REDIS_REFUSED,
								"%s", counts.refused);
			return;
		}
		stock = !counts.has_stock || stock < 0 ? -1 : stock + counts.stock;
		buyers += counts.buyers;
		journaled += counts.journaled;
	}
	reply->status = SK_OK;
	memset(reply->values, 0, sizeof(reply->values));
	reply->values[0] = stock;
	reply->values[1] = buyers;
	reply->values[2] = journaled;
	reply->values[3] = c != NULL && pg_atomic_read_u32(&c->sold_out) != 0;
}

/*
 * Compare Redis with PostgreSQL, the journal settled: reply values 0-6 as
 * seckill_reconcile() returns them (6: they differ).  False with an error
 * in the reply when the campaign cannot be compared.
 */
static bool
compare(int64 id, SeckillReply *reply)
{
	int			committed,
				compensated;
	SeckillCampaignRow row;
	int64		buyers;
	long long	redis_stock,
				redis_buyers;
	int			expected;

	if (!sk_journal_replay_campaign(id, &committed, &compensated))
	{
		sk_journal_not_ready(reply);
		return false;
	}
	campaign_status(id, reply);
	if (reply->status != SK_OK)
		return false;
	redis_stock = reply->values[0];
	redis_buyers = reply->values[1];

	store_begin("seckill: compare campaign");
	if (!store_campaign(id, &row))
	{
		store_commit();
		seckill_reply_error(reply, SK_ERR_INVALID, "campaign " INT64_FORMAT " does not exist", id);
		reply->sqlerrcode = ERRCODE_UNDEFINED_OBJECT;
		return false;
	}
	buyers = store_buyer_count(id, row.rebuy_after_cancel);
	store_commit();

	expected = row.total_stock - row.sold;
	memset(reply->values, 0, sizeof(reply->values));
	reply->status = SK_OK;
	reply->values[0] = redis_stock;
	reply->values[1] = expected;
	reply->values[2] = redis_buyers;
	reply->values[3] = buyers;
	reply->values[4] = committed;
	reply->values[5] = compensated;
	reply->values[6] = redis_stock != expected || redis_buyers != buyers;
	return true;
}

/* Compare Redis with PostgreSQL; on drift, rebuild the campaign (the reply waits for it: SK_PENDING). */
void
sk_admin_reconcile(const SeckillRequest *request, SeckillReply *reply)
{
	int64		id = request->campaign_id;

	if (!compare(id, reply) || !reply->values[6])
		return;
	ereport(LOG,
			(errmsg("seckill reconcile found drift in campaign " INT64_FORMAT ": Redis stock %lld, expected %lld; Redis buyers %lld, expected %lld",
					id, (long long) reply->values[0], (long long) reply->values[1],
					(long long) reply->values[2], (long long) reply->values[3])));
	sk_rebuild_request(id);
	reply->status = SK_PENDING;
}

/*
 * The campaigns a promotion marked stale (worker/epoch.c), at once after the
 * take-over: each whose Redis, its journal settled, holds what the promoted
 * primary's PostgreSQL holds -- nothing was lost, as in a clean switchover
 * -- sells again without a rebuild; the others are rebuilt from PostgreSQL.
 * So a switchover costs the campaign a journal replay and a count of its
 * buyers, not a rebuild of every buyer.
 */
void
sk_admin_settle_take_over(void)
{
	const int64 *ids;
	int			n = sk_epoch_stale_campaigns(&ids);

	for (int i = 0; i < n; i++)
	{
		int64		id = ids[i];
		SeckillReply reply;

		if (!compare(id, &reply))
			ereport(LOG,
					(errmsg("seckill worker rebuilds campaign " INT64_FORMAT " after the take-over: it could not compare it with PostgreSQL: %s",
							id, reply.message)));
		else if (reply.values[6])
			ereport(LOG,
					(errmsg("seckill worker found campaign " INT64_FORMAT " in Redis unlike PostgreSQL after the take-over (stock %lld, expected %lld; buyers %lld, expected %lld): it is rebuilt from PostgreSQL",
							id, (long long) reply.values[0], (long long) reply.values[1],
							(long long) reply.values[2], (long long) reply.values[3])));
		else if (sk_epoch_unstale(id, sk_journal_campaign_shards(id)))
		{
			ereport(LOG,
					(errmsg("seckill worker found campaign " INT64_FORMAT " in Redis as PostgreSQL has it after the take-over (stock %lld, %lld buyers): it sells again without a rebuild",
							id, (long long) reply.values[0], (long long) reply.values[2])));
			continue;
		}
		sk_rebuild_lost(id);
	}
}

/*
 * Give back to Redis what PostgreSQL cancelled (committed already).  Should
 * Redis fail here, its stock stays short until the next reconcile, which
 * takes it from PostgreSQL: a cancelled item is never sold twice.
 */
static void
restock(const SkCancelled *c)
{
	SkPipeline	p;
	SkReply    *r;
	int			nshards = sk_journal_campaign_shards(c->campaign_id);
	int		   *sent = palloc(sizeof(int) * nshards);
	int		   *sent_qty = palloc(sizeof(int) * nshards);
	int			nsent,
				lost = 0;
	const char *why = NULL;

	if (sk_rebuild_note_cancel(c))
		return;

	/* each shard gets back the stock of the buyers whose home it is */
	sk_pipeline_init(&p);
	nsent = sk_restock_send(&p, c->campaign_id, nshards, c->rebuy, sk_epoch_arg(), c->users, c->qtys,
							sent, sent_qty);
	r = sk_pipeline_exec(&p);
	for (int i = 0; i < nsent; i++)
	{
		int64		stock;

		if (r == NULL)
		{
			lost += sent_qty[i];
			why = sk_redis_error();
			continue;
		}
		switch (sk_restock_answer(&r[i], &stock, &why))
		{
			case SK_RESTOCK_FAILED:
				lost += sent_qty[i];
				break;
			case SK_RESTOCK_FENCED:
				/* this one's cancel is on a timeline left behind */
				sk_epoch_fence("a restock was refused");
				break;
			case SK_RESTOCK_DONE:
				seckill_campaign_note_stock(c->campaign_id, sent[i], stock);
				break;
		}
	}
	if (lost > 0)
		ereport(WARNING,
				(errmsg("seckill could not give %d item(s) of campaign " INT64_FORMAT " back to Redis: %s",
						lost, c->campaign_id, why),
				 errhint("seckill_reconcile() puts them back from PostgreSQL.")));
}

void
sk_admin_cancel(const SeckillRequest *request, SeckillReply *reply)
{
	int64		order_id = request->order_id;
	SkCancelled c = {0};

	store_begin("seckill: cancel order");
	store_cancel_order(order_id, &c);
	store_commit();
	if (c.status[0] == '\0')
	{
		seckill_reply_error(reply, SK_ERR_INVALID, "no order " INT64_FORMAT, order_id);
		reply->sqlerrcode = ERRCODE_NO_DATA_FOUND;
		return;
	}
	if (strcmp(c.status, "paid") == 0)
	{
		seckill_reply_error(reply, SK_ERR_INVALID,
					   "order " INT64_FORMAT " is paid; a paid order is refunded outside seckill", order_id);
		return;
	}
	if (c.qty > 0)
		restock(&c);
	reply->status = SK_OK;
}

/*
 * Cancel one batch of the campaign's unpaid orders past its payment
 * timeout, after the request's last order; values[2] says whether more may
 * be left, and values[3] and [4] are the batch's last order (created_at,
 * id).  The caller asks again for the next batch from there, so that
 * purchases are served in between.
 */
void
sk_admin_release(const SeckillRequest *request, SeckillReply *reply)
{
	int64		id = request->campaign_id;
	SkCancelled c = {0};
	int			batch = Max(sk_worker.campaign_admin.release_batch, RELEASE_MIN_BATCH);
	int			n;
	TimestampTz start = GetCurrentTimestamp();
	int64		took;

	store_begin("seckill: release expired orders");
	sk_lease_fence();
	n = store_release_expired(id, batch, request->after.created_at, request->after.order_id, &c);
	store_commit();
	if (n > 0)
		restock(&c);
	reply->status = SK_OK;
	reply->values[0] = n;
	reply->values[1] = c.qty;
	reply->values[2] = n == batch;
	reply->values[3] = n > 0 ? c.last_created_at : request->after.created_at;
	reply->values[4] = n > 0 ? c.last_id : request->after.order_id;

	/*
	 * Half way towards the size that fits the budget.  Each batch also costs
	 * a commit and a Redis round trip, whatever its size: never below
	 * RELEASE_MIN_BATCH, or a slow commit would shrink the batches to
	 * nothing but that cost.
	 */
	took = Max(GetCurrentTimestamp() - start, 1);
	if (n == batch)
		sk_worker.campaign_admin.release_batch =
			Max(RELEASE_MIN_BATCH, Min(10000, (batch + batch * RELEASE_BUDGET_MS * 1000 / took) / 2));
}

/*
 * Change a campaign's stock in both stores.  Under the lease and with the
 * journal settled, Redis' stock is exactly total - sold: set it so.
 */
void
sk_admin_restock(const SeckillRequest *request, SeckillReply *reply)
{
	int64		id = request->campaign_id;
	int			delta = request->qty;
	SeckillCampaignRow row;
	bool		done;

	if (!sk_journal_replay_campaign(id, NULL, NULL))
	{
		sk_journal_not_ready(reply);
		return;
	}
	store_begin("seckill: restock campaign");
	sk_lease_fence();
	done = store_restock(id, delta, &row);
	store_commit();
	if (done)
		seckill_campaign_set_total_stock(id, row.total_stock);
	if (!done)
	{
		seckill_reply_error(reply, SK_ERR_INVALID,
					   "campaign " INT64_FORMAT " cannot lose %d item(s): fewer than that are unsold", id, -delta);
		reply->sqlerrcode = ERRCODE_CHECK_VIOLATION;
		return;
	}
	if (strcmp(row.state, "preheated") == 0)
	{
		SkPipeline	p;
		int			nshards = Max(row.limits.shards, 1);
		int			stock = row.total_stock - row.sold;

		/* the worker sells nothing meanwhile: the shards can be evened out */
		sk_pipeline_init(&p);
		for (int shard = 0; shard < nshards; shard++)
			sk_shard_stock_set_send(&p, id, shard, nshards, sk_keys_shard_stock(stock, shard, nshards));
		if (sk_pipeline_exec(&p) == NULL)
		{
			seckill_reply_error(reply, SK_ERR_REDIS,
						   "the stock changed in PostgreSQL, but Redis failed (seckill_reconcile() will catch up): %s",
						   sk_redis_error());
			return;
		}
		for (int shard = 0; shard < nshards; shard++)
			seckill_campaign_note_stock(id, shard, sk_keys_shard_stock(stock, shard, nshards));
	}
	reply->status = SK_OK;
	reply->values[0] = row.total_stock;
}

/*
 * New traffic limits: PostgreSQL first, then Redis' copy, which takes effect
 * with the next purchase; the rate limiters' buckets are left as they are.
 */
void
sk_admin_limits(const SeckillRequest *request, SeckillReply *reply)
{
	int64		id = request->campaign_id;
	const SeckillLimits *limits = &request->limits;
	SeckillCampaignRow row;
	bool		found;

	store_begin("seckill: set campaign limits");
	sk_lease_fence();
	store_set_limits(id, limits);
	found = store_campaign(id, &row);
	store_commit();
	if (!found)
	{
		seckill_reply_error(reply, SK_ERR_INVALID, "campaign " INT64_FORMAT " does not exist", id);
		reply->sqlerrcode = ERRCODE_UNDEFINED_OBJECT;
		return;
	}
	if (strcmp(row.state, "preheated") == 0)
	{
		SkPipeline	p;
		SkReply    *r;
		int			nshards = Max(row.limits.shards, 1);
		const char *why;

		sk_pipeline_init(&p);
		for (int shard = 0; shard < nshards; shard++)
			sk_shard_limits_send(&p, id, shard, nshards, &row.limits);
		r = sk_pipeline_exec(&p);
		for (int shard = 0; r != NULL && shard < nshards; shard++)
			if (!sk_shard_limits_answer(&r[shard], &why))
			{
				seckill_reply_error(reply, SK_ERR_REDIS_REFUSED,
							   "the limits changed in PostgreSQL, but Redis refused them: %s", why);
				return;
			}
		if (r == NULL)
		{
			seckill_reply_error(reply, SK_ERR_REDIS,
						   "the limits changed in PostgreSQL, but Redis failed (seckill_preheat() or seckill_reconcile() will catch up): %s",
						   sk_redis_error());
			return;
		}
		seckill_campaign_set_limits(id, &row.limits);
	}
	reply->status = SK_OK;
}

/* Preheat, or rebuild: the reply waits for the rebuild (SK_PENDING). */
void
sk_admin_preheat(const SeckillRequest *request, SeckillReply *reply)
{
	sk_rebuild_request(request->campaign_id);
	reply->status = SK_PENDING;
}

void
sk_admin_status(const SeckillRequest *request, SeckillReply *reply)
{
	campaign_status(request->campaign_id, reply);
}
