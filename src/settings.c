/*-------------------------------------------------------------------------
 *
 * settings.c
 *		seckill's settings (GUCs), and the crash points of the fault tests.
 *
 *-------------------------------------------------------------------------
 */
#include "seckill.h"

#include <limits.h>

#include "miscadmin.h"
#include "shared/call.h"
#include "storage/ipc.h"
#include "utils/guc.h"

char	   *seckill_redis_host = NULL;
int			seckill_redis_port = 6379;
char	   *seckill_redis_user = NULL;
char	   *seckill_redis_password_file = NULL;
char	   *seckill_redis_sentinel_password_file = NULL;
bool		seckill_redis_tls = false;
char	   *seckill_redis_tls_ca_file = NULL;
char	   *seckill_redis_tls_cert_file = NULL;
char	   *seckill_redis_tls_key_file = NULL;
char	   *seckill_redis_tls_server_name = NULL;
char	   *seckill_redis_prefix = NULL;
char	   *seckill_redis_sentinels = NULL;
char	   *seckill_redis_master_name = NULL;
bool		seckill_redis_cluster = false;
char	   *seckill_database = NULL;
int			seckill_request_timeout = 5000;
bool		seckill_caller_sched_batch = true;
int			seckill_redis_timeout = 1000;
int			seckill_audit_interval = 1000;
int			seckill_batch_size = 1000;
int			seckill_max_queue = 0;
int			seckill_max_campaigns = 64;
int			seckill_queue_tickets = 1048576;
int			seckill_lock_lease = 30000;
int			seckill_worker_lock_timeout = 100;
int			seckill_worker_statement_timeout = 10000;
int			seckill_max_locks = 256;
int			seckill_lock_max_hold = 3600 * 1000;
int			seckill_lock_queue_lease = 1000;
int			seckill_redis_unavailable = SK_UNAVAILABLE_ERROR;
int			seckill_redis_epoch_lost = SK_EPOCH_LOST_AUTO;
char	   *seckill_redlock_nodes = NULL;

static const struct config_enum_entry redis_unavailable_modes[] = {
	{"error", SK_UNAVAILABLE_ERROR, false},
	{"database", SK_UNAVAILABLE_DATABASE, false},
	{NULL, 0, false}
};

static const struct config_enum_entry redis_epoch_lost_modes[] = {
	{"auto", SK_EPOCH_LOST_AUTO, false},
	{"rebuild", SK_EPOCH_LOST_REBUILD, false},
	{"wait", SK_EPOCH_LOST_WAIT, false},
	{NULL, 0, false}
};

/* Check hook of seckill.redlock_nodes: an odd count of host:port, at least 3. */
static bool
check_redlock_nodes(char **newval, void **extra, GucSource source)
{
	char	   *list;
	char	   *item;
	char	   *save;
	int			n = 0;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	list = pstrdup(*newval);
	for (item = strtok_r(list, ", ", &save); item; item = strtok_r(NULL, ", ", &save))
	{
		char	   *colon = strrchr(item, ':');
		int			port = colon ? atoi(colon + 1) : 0;

		if (colon == NULL || colon == item || port < 1 || port > 65535)
		{
			GUC_check_errdetail("\"%s\" is not host:port.", item);
			pfree(list);
			return false;
		}
		n++;
	}
	pfree(list);
	if (n < 3 || n % 2 == 0)
	{
		GUC_check_errdetail("Redlock needs an odd number of nodes, at least 3; %d given.", n);
		return false;
	}
	return true;
}

#ifdef SECKILL_CRASH_POINTS
int			seckill_crash_point = SK_CRASH_NONE;

static const struct config_enum_entry crash_points[] = {
	{"none", SK_CRASH_NONE, false},
	{"after_gather", SK_CRASH_AFTER_GATHER, false},
	{"after_reserve", SK_CRASH_AFTER_RESERVE, false},
	{"after_commit", SK_CRASH_AFTER_COMMIT, false},
	{"before_wake", SK_CRASH_BEFORE_WAKE, false},
	{"overlapped", SK_CRASH_OVERLAPPED, false},
	{"after_answer", SK_CRASH_AFTER_ANSWER, false},
	{NULL, 0, false}
};

/*
 * Die here if the fault tests asked for it: the worker exits as after a
 * fatal error, and the postmaster starts a new one, which must settle
 * whatever this one left; a caller's session ends.
 */
void
seckill_crash_if(SeckillCrashPoint point)
{
	if (seckill_crash_point == point)
	{
		ereport(LOG, (errmsg("seckill %s stops at crash point \"%s\" (seckill.crash_point)",
							 IsBackgroundWorker ? "worker" : "caller", crash_points[point].name)));
		proc_exit(1);
	}
}
#endif

void
seckill_define_gucs(void)
{
	static char *library_version = NULL;

	DefineCustomStringVariable("seckill.library_version",
							   "Version of the seckill library this server loaded.",
							   "The SQL objects' version, then a number raised by each change to the library alone.",
							   &library_version, SECKILL_LIBRARY_VERSION,
							   PGC_INTERNAL, GUC_NOT_IN_SAMPLE | GUC_DISALLOW_IN_FILE, NULL, NULL, NULL);
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
	DefineCustomStringVariable("seckill.redis_sentinel_password_file",
							   "File holding the sentinels' password (first line), readable by the server's OS user only; given to their default user.",
							   "Empty: the sentinels get the master's credentials (seckill.redis_user, seckill.redis_password_file).",
							   &seckill_redis_sentinel_password_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomBoolVariable("seckill.redis_tls",
							 "Whether the worker speaks TLS to Redis (to its master, or to every master of a Redis Cluster).",
							 "The server's certificate is checked against seckill.redis_tls_ca_file (else the system's CAs) and its name against seckill.redis_tls_server_name (else the host connected to).",
							 &seckill_redis_tls, false,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_tls_ca_file",
							   "File of the CA certificates that Redis' certificate must chain to; empty: the system's.",
							   NULL, &seckill_redis_tls_ca_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_tls_cert_file",
							   "File of the client certificate the worker presents to Redis; empty: none.",
							   "For a Redis with tls-auth-clients yes.  Goes with seckill.redis_tls_key_file.",
							   &seckill_redis_tls_cert_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_tls_key_file",
							   "File of the client certificate's private key; empty: none.",
							   NULL, &seckill_redis_tls_key_file, "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_tls_server_name",
							   "The name Redis' certificate must carry; empty: the host connected to.",
							   "Set it when the worker connects by address to a server whose certificate names a host, or to the masters of a Redis Cluster by the addresses they announce.",
							   &seckill_redis_tls_server_name, "",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_sentinels",
							   "Redis Sentinels to ask for the master, as host:port,host:port,...; empty: none.",
							   "When set, seckill.redis_host and seckill.redis_port are not used: the worker follows the master the sentinels name.",
							   &seckill_redis_sentinels, "",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redis_master_name",
							   "Name of the master the sentinels monitor (their sentinel monitor <name>).",
							   NULL, &seckill_redis_master_name, "mymaster",
							   PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("seckill.redis_cluster",
							 "Whether Redis is a Redis Cluster, seckill.redis_host:seckill.redis_port one of its nodes.",
							 "The worker learns the slots from that node and sends each key to the master of its slot.",
							 &seckill_redis_cluster, false,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
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
	DefineCustomBoolVariable("seckill.caller_sched_batch",
							 "Whether a session that waits for the worker runs under Linux's SCHED_BATCH policy.",
							 "Its wake-up then does not preempt the worker, which is waking the round's other callers.  Only a session under the default policy is switched; turned off, it goes back.",
							 &seckill_caller_sched_batch, true,
							 PGC_USERSET, 0, NULL, seckill_caller_sched_batch_assign, NULL);
	DefineCustomIntVariable("seckill.redis_timeout",
							"How long the worker waits for Redis to connect or answer.",
							"Keep it well below seckill.request_timeout.",
							&seckill_redis_timeout, 1000, 10, 600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.batch_size",
							"Most requests the worker serves in one round (one Redis pipeline, one commit).",
							NULL, &seckill_batch_size, 1000, 1, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.audit_interval",
							"How often the worker holds Redis against PostgreSQL for every preheated campaign.",
							"A campaign Redis lost, or whose settled stock differs from PostgreSQL's, is rebuilt; 0 turns the audit off, leaving that to purchases and seckill_reconcile().",
							&seckill_audit_interval, 1000, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.max_queue",
							"Most purchases waiting for the worker; past it, seckill_buy answers busy at once.",
							"0: no bound other than the number of connections.",
							&seckill_max_queue, 0, 0, 100000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.max_campaigns",
							"Most campaigns preheated at once.",
							NULL, &seckill_max_campaigns, 64, 1, 10000,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("seckill.queue_tickets",
							"Buyers in waiting lines whose tickets shared memory keeps, so that their polls read no table.",
							"16 bytes each.  A buyer past them is read from seckill.queue_places; 0 keeps none.",
							&seckill_queue_tickets, 1048576, 0, 64 * 1048576,
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
							"Past it the transaction is rolled back and its request fails with SQLSTATE SK001; the database's and roles' statement_timeout do not apply to the worker.",
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
	DefineCustomIntVariable("seckill.lock_queue_lease",
							"How long a waiter's place in a fair lock's line, or its claim on a lock held shared, lasts after its last ask.",
							"A waiting session asks again at least every 100 ms; a waiter that stops asking (its server stalled or died) loses its place after this long, and no longer blocks the line.",
							&seckill_lock_queue_lease, 1000, 200, 60 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomEnumVariable("seckill.redis_unavailable",
							 "What purchases do while Redis cannot be reached: error, or database.",
							 "With database, the worker sells from PostgreSQL alone (its constraints arbitrate), and rebuilds every campaign in Redis from PostgreSQL before Redis takes over again.",
							 &seckill_redis_unavailable, SK_UNAVAILABLE_ERROR, redis_unavailable_modes,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("seckill.redis_epoch_lost",
							 "What a server does when Redis lost the epoch it recorded there: auto, rebuild, or wait.",
							 "With rebuild, the server takes Redis for a new one, records its epoch again and rebuilds the campaigns from PostgreSQL.  With wait, it does not sell until seckill_epoch_claim() is called on it or it is promoted: a primary left behind by a failover that it never saw then cannot sell on through a Redis that forgot the failover.  With auto, wait on a server that has streamed WAL to a standby on its timeline, or was promoted and has not recorded its timeline yet; rebuild on the others.",
							 &seckill_redis_epoch_lost, SK_EPOCH_LOST_AUTO, redis_epoch_lost_modes,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("seckill.redlock_nodes",
							   "Independent Redis nodes (host:port, comma separated, an odd number, at least 3) that hold the SQL callers' locks by Redlock.",
							   "Empty: the locks live on seckill.redis_host.  The nodes need no password.  A restart, so that no lock held on the old nodes is taken again on new ones.",
							   &seckill_redlock_nodes, "",
							   PGC_POSTMASTER, 0, check_redlock_nodes, NULL, NULL);
#ifdef SECKILL_CRASH_POINTS
	DefineCustomEnumVariable("seckill.crash_point",
							 "Makes the worker (or a caller) stop at a point of a round, for fault tests.",
							 "Never set it in production: every round would stop there.",
							 &seckill_crash_point, SK_CRASH_NONE, crash_points,
							 PGC_SIGHUP, GUC_SUPERUSER_ONLY | GUC_NOT_IN_SAMPLE, NULL, NULL, NULL);
#endif
}

