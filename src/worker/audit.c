/*-------------------------------------------------------------------------
 *
 * audit.c
 *		Redis held against PostgreSQL once a second (seckill.audit_interval).  The backends answer
 *		sold_out from their cache without asking the worker, so a campaign
 *		Redis lost (a restart empty, a FLUSHALL, an eviction) would never be
 *		noticed by a purchase; and stock PostgreSQL gets back while Redis
 *		cannot take it (a give-back that failed) would stay unsold.  Each
 *		second, for every preheated campaign, the worker reads each shard's
 *		stock and journal: a campaign Redis lost is rebuilt from PostgreSQL;
 *		one whose journal is empty (every reservation settled) must hold
 *		exactly total - sold, else it is rebuilt; and the backends'
 *		sold-out shortcut follows the stock Redis holds.
 *
 * Run between rounds, with the staged rounds committed and the settled
 * journal entries dropped, so that PostgreSQL's count and Redis' stock
 * describe the same moment: nothing else changes either meanwhile.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/audit.h"

#include "layout/campaign_commands.h"
#include "redis/redis.h"
#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "store/store.h"
#include "utils/timestamp.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/rebuild.h"
#include "worker/worker_state.h"

/* Milliseconds until the next audit is due: 0 when now, -1 when it is off (seckill.audit_interval). */
long
sk_audit_wait(void)
{
	long		ms;

	if (seckill_audit_interval == 0)
		return -1;
	ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
										 Min(sk_worker.audit.audit_at,
											 TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																		 seckill_audit_interval)));
	return ms > 0 ? ms : 0;
}

typedef enum Finding
{
	AUDIT_AGREES,
	AUDIT_LOST,					/* Redis does not hold the campaign, or holds it stale */
	AUDIT_DRIFT,				/* settled, yet its stock is not total - sold */
	AUDIT_UNKNOWN				/* refused, or a newer primary's: not ours to judge */
} Finding;

/*
 * One campaign's replies, SK_SHARD_AUDIT_REPLIES a shard.  Notes each
 * shard's stock in the campaign cache.
 */
static Finding
judge(const SeckillCampaignRow *row, const SkReply *r, int64 *in_redis)
{
	int			nshards = Max(row->limits.shards, 1);
	int64		ours = strtoll(sk_epoch_arg(), NULL, 10);
	int64		journaled = 0;
	bool		lost = false;

	*in_redis = 0;
	for (int shard = 0; shard < nshards; shard++, r += SK_SHARD_AUDIT_REPLIES)
	{
		SkShardAudit a;

		sk_shard_audit_answer(r, &a);
		if (!a.known || a.epoch > ours)
			return AUDIT_UNKNOWN;
		journaled += a.journaled;
		/* what lua/buy.lua answers not_loaded for */
		if (!a.loaded || (a.epoch != 0 && a.epoch < ours))
		{
			lost = true;
			continue;
		}
		*in_redis += a.stock;
		seckill_campaign_note_stock(row->id, shard, a.stock);
	}
	if (lost)
		return AUDIT_LOST;
	if (journaled == 0 && *in_redis != row->total_stock - row->sold)
		return AUDIT_DRIFT;
	return AUDIT_AGREES;
}

/*
 * The audit, when due: the staged rounds are committed (the worker
 * is between rounds).
 */
void
sk_audit(void)
{
	List	   *rows;
	List	   *audited = NIL;
	ListCell   *lc;
	SkPipeline	p;
	SkReply    *r;
	int			reply = 0;

	sk_worker.audit.audit_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_audit_interval);
	/* without Redis, or selling from PostgreSQL alone: the next audit, then */
	if (seckill_shared->sales_from_database || !sk_journal_ready())
		return;
	/* the last round's settled orders dropped, so that the journals count only what is unsettled */
	if (sk_journal_has_settles())
		sk_journal_flush_settles();
	if (sk_journal_needs_replay())
		return;
	rows = store_preheated_campaigns();
	if (store_sql_outdated || rows == NIL)
		return;
	sk_pipeline_init(&p);
	foreach(lc, rows)
	{
		SeckillCampaignRow *row = lfirst(lc);
		int			nshards = Max(row->limits.shards, 1);

		/* a campaign being rebuilt, or on a Cluster master down, waits for that */
		if (sk_rebuild_busy(row->id) || !sk_journal_campaign_served(row->id))
			continue;
		audited = lappend(audited, row);
		for (int shard = 0; shard < nshards; shard++)
			sk_shard_audit_send(&p, row->id, shard, nshards);
	}
	if (audited == NIL)
		return;
	r = sk_pipeline_exec(&p);
	if (r == NULL)
	{
		sk_journal_lost();
		return;
	}
	foreach(lc, audited)
	{
		SeckillCampaignRow *row = lfirst(lc);
		int64		in_redis;

		switch (judge(row, &r[reply], &in_redis))
		{
			case AUDIT_LOST:
				ereport(LOG,
						(errmsg("seckill worker found campaign " INT64_FORMAT " (\"%s\") missing or stale in Redis: it is rebuilt from PostgreSQL",
								row->id, row->goods),
						 errdetail("Redis restarted empty, was flushed, evicted the campaign's keys, or failed over to a replica that lacked them.")));
				sk_rebuild_lost(row->id);
				break;
			case AUDIT_DRIFT:
				ereport(LOG,
						(errmsg("seckill worker found campaign " INT64_FORMAT " (\"%s\") with stock " INT64_FORMAT " in Redis and %d unsold in PostgreSQL, its journal settled: it is rebuilt from PostgreSQL",
								row->id, row->goods, in_redis, row->total_stock - row->sold)));
				sk_rebuild_lost(row->id);
				break;
			case AUDIT_AGREES:
			case AUDIT_UNKNOWN:
				break;
		}
		reply += SK_SHARD_AUDIT_REPLIES * Max(row->limits.shards, 1);
	}
}
