/*-------------------------------------------------------------------------
 *
 * seckill.c
 *		Module entry: GUCs, shared memory hooks, and the background worker's
 *		registration.  Must be loaded through shared_preload_libraries.
 *
 *-------------------------------------------------------------------------
 */
#include "seckill.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "locks.h"
#include "redlock.h"
#include "shmem.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

char	   *seckill_redis_host = NULL;
int			seckill_redis_port = 6379;
char	   *seckill_redis_user = NULL;
char	   *seckill_redis_password_file = NULL;
char	   *seckill_redis_prefix = NULL;
char	   *seckill_database = NULL;
int			seckill_request_timeout = 5000;
int			seckill_redis_timeout = 1000;
int			seckill_batch_size = 1000;
int			seckill_max_queue = 0;
int			seckill_max_campaigns = 64;
int			seckill_lock_lease = 30000;
int			seckill_worker_lock_timeout = 100;
int			seckill_worker_statement_timeout = 10000;
int			seckill_max_locks = 256;
int			seckill_lock_max_hold = 3600 * 1000;
int			seckill_crash_point = SK_CRASH_NONE;
int			seckill_redis_unavailable = SK_UNAVAILABLE_ERROR;

static const struct config_enum_entry redis_unavailable_modes[] = {
	{"error", SK_UNAVAILABLE_ERROR, false},
	{"database", SK_UNAVAILABLE_DATABASE, false},
	{NULL, 0, false}
};

static const struct config_enum_entry crash_points[] = {
	{"none", SK_CRASH_NONE, false},
	{"after_reserve", SK_CRASH_AFTER_RESERVE, false},
	{"after_commit", SK_CRASH_AFTER_COMMIT, false},
	{"before_wake", SK_CRASH_BEFORE_WAKE, false},
	{NULL, 0, false}
};

/*
 * Die here if the fault tests asked for it: the worker exits as after a
 * fatal error, and the postmaster starts a new one, which must settle
 * whatever this one left.
 */
void
seckill_crash_if(SeckillCrashPoint point)
{
	if (seckill_crash_point == point)
	{
		ereport(LOG, (errmsg("seckill worker stops at crash point \"%s\" (seckill.crash_point)",
							 crash_points[point].name)));
		proc_exit(1);
	}
}

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

static void
define_gucs(void)
{
	DefineCustomStringVariable("seckill.redis_host",
							   "Address of the Redis server the worker uses.",
							   "An IP address is best: a host name is resolved with a blocking lookup.",
							   &seckill_redis_host, "127.0.0.1",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.redis_port",
							"TCP port of the Redis server.",
							NULL, &seckill_redis_port, 6379, 1, 65535,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_user",
							   "Redis ACL user the worker authenticates as; empty for the default user.",
							   NULL, &seckill_redis_user, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_password_file",
							   "File holding the Redis password (first line), readable by the server's OS user only.",
							   "The password itself is never a setting, so it cannot show in pg_settings or in the log of changed settings.",
							   &seckill_redis_password_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_prefix",
							   "Prefix of every Redis key seckill uses.",
							   "Give each PostgreSQL cluster sharing one Redis its own prefix.",
							   &seckill_redis_prefix, "seckill",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.database",
							   "The database whose seckill the worker serves.",
							   NULL, &seckill_database, "postgres",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.request_timeout",
							"How long a call waits for the worker's answer.",
							"A purchase that times out may still complete; seckill_order() tells.",
							&seckill_request_timeout, 5000, 10, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.redis_timeout",
							"How long the worker waits for Redis to connect or answer.",
							"Keep it well below seckill.request_timeout.",
							&seckill_redis_timeout, 1000, 10, 600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.batch_size",
							"Most requests the worker serves in one round (one Redis pipeline, one commit).",
							NULL, &seckill_batch_size, 1000, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.max_queue",
							"Most purchases waiting for the worker; past it, seckill_buy answers busy at once.",
							"0: no bound other than the number of connections.",
							&seckill_max_queue, 0, 0, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.max_campaigns",
							"Most campaigns preheated at once.",
							NULL, &seckill_max_campaigns, 64, 1, 10000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.lock_lease",
							"Lease of the Redis lock the worker holds over a campaign's admin work.",
							NULL, &seckill_lock_lease, 30000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.worker_lock_timeout",
							"Longest wait of the worker for a row or table lock held by another transaction.",
							"Past it the request that needed the lock fails with SQLSTATE 55P03; purchases never wait for a campaign's row.  The database's and roles' lock_timeout do not apply to the worker.",
							&seckill_worker_lock_timeout, 100, 1, 600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.worker_statement_timeout",
							"Longest time one transaction of the worker may run.",
							"Past it the transaction is rolled back and its request fails with SQLSTATE 57014; the database's and roles' statement_timeout do not apply to the worker.",
							&seckill_worker_statement_timeout, 10000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.max_locks",
							"Most locks held at once for SQL callers (seckill_lock).",
							NULL, &seckill_max_locks, 256, 1, 100000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.lock_max_hold",
							"Longest time the worker renews a SQL caller's lock; 0: no limit.",
							"Past it the lease is no longer renewed and runs out.",
							&seckill_lock_max_hold, 3600 * 1000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redlock_nodes",
							   "Independent Redis nodes (host:port, comma separated, an odd number, at least 3) that hold the SQL callers' locks by Redlock.",
							   "Empty: the locks live on seckill.redis_host.  The nodes need no password.  A restart, so that no lock held on the old nodes is taken again on new ones.",
							   &seckill_redlock_nodes, "",
							   PGC_POSTMASTER, 0, sk_redlock_check_nodes, NULL, NULL);
	DefineCustomEnumVariable("seckill.redis_unavailable",
							 "What purchases do while Redis cannot be reached: error, or database.",
							 "With database, the worker sells from PostgreSQL alone (its constraints arbitrate), and rebuilds every campaign in Redis from PostgreSQL before Redis takes over again.",
							 &seckill_redis_unavailable, SK_UNAVAILABLE_ERROR, redis_unavailable_modes,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("seckill.crash_point",
							 "Makes the worker stop at a point of a round, for fault tests.",
							 "Never set it in production: every round would stop there.",
							 &seckill_crash_point, SK_CRASH_NONE, crash_points,
							 PGC_SIGHUP, GUC_SUPERUSER_ONLY | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
	MarkGUCPrefixReserved("seckill");
}

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
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("seckill must be loaded via shared_preload_libraries"),
				 errhint("Add seckill to shared_preload_libraries in postgresql.conf and restart the server.")));

	define_gucs();
	seckill_shmem_init();
	register_worker();
}
