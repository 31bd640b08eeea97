/*-------------------------------------------------------------------------
 *
 * database_mode.c
 *		Sales from PostgreSQL alone while Redis cannot take them, and the
 *		way back: every preheated campaign rebuilt from PostgreSQL before
 *		Redis sells again.
 *
 * The worker enters database mode with the first orders it commits without
 * Redis (worker/purchase.c), and records it in seckill.worker_state, so that
 * a restart during an outage remembers that Redis is stale.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/database_mode.h"

#include "redis/redis.h"
#include "shared/shmem.h"
#include "store/store.h"
#include "utils/timestamp.h"
#include "worker/epoch.h"
#include "worker/purchase.h"
#include "worker/rebuild.h"
#include "worker/worker_state.h"

/*
 * Redis is back after sales from PostgreSQL alone: every preheated campaign
 * is rebuilt from PostgreSQL, in steps between rounds, before Redis sells
 * it again; its purchases are answered busy meanwhile.  True while Redis may
 * sell the campaigns not being rebuilt: all rebuilds so far succeeded.
 * After a failure, sales go on from PostgreSQL alone, and all campaigns are
 * rebuilt again a second later.
 */
bool
sk_database_mode_leave(void)
{
	List	   *rows;
	ListCell   *lc;

	if (!sk_worker.database_mode.leaving_database_mode)
	{
		if (GetCurrentTimestamp() < sk_worker.database_mode.leave_retry_at)
			return false;
		rows = store_preheated_campaigns();
		foreach(lc, rows)
			sk_rebuild_request(((SeckillCampaignRow *) lfirst(lc))->id);
		sk_worker.database_mode.failures_before_leaving = sk_rebuild_failures();
		sk_worker.database_mode.leaving_database_mode = true;
		ereport(LOG,
				(errmsg("seckill worker rebuilds %d campaign(s) from PostgreSQL before Redis sells again",
						list_length(rows))));
	}
	if (sk_rebuild_failures() != sk_worker.database_mode.failures_before_leaving)
	{
		/* logged by the rebuild */
		sk_worker.database_mode.leaving_database_mode = false;
		sk_worker.database_mode.leave_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
		return false;
	}
	if (sk_rebuild_pending())
		return true;
	sk_worker.database_mode.leaving_database_mode = false;
	store_begin("seckill: leave database mode");
	store_set_database_mode(false);
	store_commit();
	seckill_shared->sales_from_database = false;
	ereport(LOG, (errmsg("seckill worker rebuilt Redis from PostgreSQL: sales go through Redis again")));
	return true;
}

/*
 * The round's purchases while Redis cannot take them: from PostgreSQL
 * alone, as seckill.redis_unavailable or database mode says, else failed
 * with Redis' error.
 */
void
sk_database_mode_serve(RoundItem **buys, int nserved)
{
	/*
	 * A primary left behind by a failover never sells, not even from
	 * PostgreSQL; nor one that waits for a claim since Redis lost its epoch.
	 */
	if (sk_epoch_fenced() || sk_epoch_lost())
	{
		SeckillReply fenced = {0};

		sk_epoch_reply_fenced(&fenced);
		sk_fail_all(buys, nserved, fenced.status, fenced.message);
	}
	else if (seckill_redis_unavailable == SK_UNAVAILABLE_DATABASE || seckill_shared->sales_from_database)
	{
		/*
		 * Campaigns rebuilt so far while leaving database mode go stale
		 * again: the next time Redis is back, all are rebuilt anew.
		 */
		sk_worker.database_mode.leaving_database_mode = false;
		sk_purchase_from_database(buys, nserved);
	}
	else
		sk_fail_all(buys, nserved, SK_ERR_REDIS, sk_redis_error());
}
