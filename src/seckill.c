/*-------------------------------------------------------------------------
 *
 * seckill.c
 *		Module entry: settings, shared memory and the background worker are
 *		set up here.  Must be loaded through shared_preload_libraries.
 *
 *-------------------------------------------------------------------------
 */
#include "seckill.h"

#include "backend/backend.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "shared/call.h"
#include "shared/campaign_cache.h"
#include "shared/lock_table.h"
#include "shared/queue_tickets.h"
#include "shared/redis_nodes.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static void
register_worker(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	strlcpy(worker.bgw_library_name, "seckill", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "seckill_worker_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "seckill worker", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "seckill worker", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_SECKILL_UNAVAILABLE),
				 errmsg("seckill must be loaded via shared_preload_libraries"),
				 errhint("Add seckill to shared_preload_libraries in postgresql.conf and restart the server.")));

	seckill_define_gucs();
	MarkGUCPrefixReserved("seckill");
	seckill_call_register();
	seckill_campaign_cache_register();
	seckill_tickets_register();
	seckill_stats_register();
	seckill_lock_table_register();
	seckill_redis_nodes_register();
	seckill_version_guard_register();
	seckill_shmem_init();
	register_worker();
}
