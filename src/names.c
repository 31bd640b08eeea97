/*-------------------------------------------------------------------------
 *
 * names.c
 *		Names and conversions every part of seckill shares: the statuses'
 *		names, the installed extension's version and owner, timestamps for
 *		Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "seckill.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_extension.h"
#include "utils/builtins.h"
#include "utils/datum.h"
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
	[SK_ERR_EPOCH_LOST] = "epoch_lost",
	[SK_PENDING] = "pending",
	[SK_NOT_ADMITTED] = "not_admitted",
};

const char *
seckill_status_name(SeckillStatus status)
{
	return status_names[status];
}

/*
 * A column of the seckill extension's row in pg_extension, copied into the
 * current memory context; false when it is not installed or the column is
 * null.
 */
static bool
extension_column(AttrNumber attnum, Datum *value)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		isnull = true;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("seckill"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);

		*value = heap_getattr(tup, attnum, RelationGetDescr(rel), &isnull);
		if (!isnull)
			*value = datumCopy(*value, att->attbyval, att->attlen);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return !isnull;
}

/* The version of the seckill extension installed in this database, or NULL. */
char *
seckill_installed_version(void)
{
	Datum		version;

	if (!extension_column(Anum_pg_extension_extversion, &version))
		return NULL;
	return text_to_cstring(DatumGetTextPP(version));
}

/* The owner of the seckill extension in this database; InvalidOid: none. */
Oid
seckill_extension_owner(void)
{
	Datum		owner;

	if (!extension_column(Anum_pg_extension_extowner, &owner))
		return InvalidOid;
	return DatumGetObjectId(owner);
}

int64
seckill_unix_usec(TimestampTz ts)
{
	return ts + (int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY;
}

