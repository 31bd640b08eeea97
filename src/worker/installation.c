/*-------------------------------------------------------------------------
 *
 * installation.c
 *		The extension as installed in the worker's database: the campaign
 *		cache loaded from its tables, again after each CREATE EXTENSION or
 *		ALTER EXTENSION UPDATE, and whether its SQL objects are of this
 *		library's version.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/installation.h"

#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "store/store.h"
#include "worker/journal.h"
#include "worker/worker_state.h"

/* Fill the campaign cache from PostgreSQL: what backends may answer alone. */
static void
load_campaign_cache(void)
{
	List	   *rows;
	ListCell   *lc;

	sk_worker.installation.cache_loaded = false;
	rows = store_preheated_campaigns();
	/* what the table says: a restart during an outage remembers that Redis is stale */
	if (!store_sql_outdated)
		seckill_shared->sales_from_database = store_sales_from_database;

	foreach(lc, rows)
	{
		SeckillCampaignRow *row = lfirst(lc);

		if (!seckill_campaign_store(row, row->sold >= row->total_stock))
			ereport(WARNING,
					(errmsg("seckill cannot cache campaign " INT64_FORMAT " (\"%s\"): more campaigns are preheated than seckill.max_campaigns (%d)",
							row->id, row->goods, seckill_max_campaigns),
					 errhint("Its sales go through the worker without the sold-out shortcut; close finished campaigns or raise seckill.max_campaigns.")));
	}
	sk_worker.installation.cache_loaded = true;
}

/*
 * The extension's SQL was installed or updated since the cache was loaded:
 * load it again.  Until ALTER EXTENSION seckill UPDATE, requests fail with a
 * hint; once the SQL matches, the journals are replayed.  True when the SQL
 * matches.
 */
bool
sk_installation_current(void)
{
	if (!sk_worker.installation.cache_loaded ||
		pg_atomic_read_u32(&seckill_shared->install_generation) != sk_worker.installation.cache_generation)
	{
		sk_worker.installation.cache_generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		load_campaign_cache();
		if (store_sql_outdated)
			return false;
	}
	if (!store_sql_outdated)
		return true;
	load_campaign_cache();
	if (store_sql_outdated)
		return false;
	sk_journal_lost();
	ereport(LOG, (errmsg("seckill worker found its SQL objects updated: serving again")));
	return true;
}

/* Is the campaign cache loaded: false until a load has run to its end. */
bool
sk_installation_loaded(void)
{
	return sk_worker.installation.cache_loaded;
}
