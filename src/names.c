/*-------------------------------------------------------------------------
 *
 * names.c
 *		Names and conversions every part of seckill shares: the statuses'
 *		names, the installed SQL's version, timestamps for Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "seckill.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"

static const char *const status_names[] = {
	[SK_OK] = "ok",
	[SK_SOLD_OUT] = "sold_out",
	[SK_DUPLICATE] = "duplicate",
	[SK_NOT_STARTED] = "not_started",
	[SK_ENDED] = "ended",
	[SK_UNKNOWN_GOODS] = "unknown_goods",
	[SK_BUSY] = "busy",
	[SK_RATE_LIMITED] = "rate_limited",
	[SK_INVALID_TOKEN] = "invalid_token",
	[SK_ERR_REDIS] = "redis_error",
	[SK_ERR_REDIS_REFUSED] = "redis_refused",
	[SK_ERR_WORKER] = "worker_restarted",
	[SK_ERR_INVALID] = "invalid",
	[SK_ERR_LOCKED] = "locked",
	[SK_ERR_FENCED] = "fenced",
	[SK_PENDING] = "pending",
};

const char *
seckill_status_name(SeckillStatus status)
{
	return status_names[status];
}

/* The version of the seckill extension installed in this database, or NULL. */
char *
seckill_installed_version(void)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("seckill"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = text_to_cstring(DatumGetTextPP(d));
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

int64
seckill_unix_usec(TimestampTz ts)
{
	return ts + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

