/*-------------------------------------------------------------------------
 *
 * store.c
 *		PostgreSQL work of the worker, through SPI with saved plans.
 *
 * All accepted purchases of a round are committed by one statement in one
 * transaction.  When that statement fails (a stale Redis let a duplicate or
 * an oversell through, and a constraint caught it), each order is retried
 * alone in a subtransaction, so one bad row does not sink the others; the
 * refused ones are logged as compensations in the same transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "replication/syncrep.h"
#include "shared/shmem.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

static SPIPlanPtr commit_plan = NULL;
static SPIPlanPtr compensation_plan = NULL;
static SPIPlanPtr exist_plan = NULL;
static SPIPlanPtr buyers_plan[2] = {NULL, NULL};	/* active, cancelled */

/* The block of order ids the worker owns: [next_id, last_id]. */
static int64 next_id = 0;
static int64 last_id = -1;
static bool block_recorded = true;	/* false: in use, not yet recorded */

#define ORDER_ID_BLOCK 1000

/*
 * The context current at store_begin: results that must outlive SPI_finish
 * are allocated there, and it is current again after store_commit.
 */
static MemoryContext caller_cxt = NULL;

void
store_begin(const char *activity)
{
	caller_cxt = CurrentMemoryContext;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	/* a background worker's statements get no statement_timeout of their own */
	enable_timeout_after(STATEMENT_TIMEOUT, seckill_worker_statement_timeout);
}

void
store_commit(void)
{
	SPI_finish();
	PopActiveSnapshot();
	disable_timeout(STATEMENT_TIMEOUT, false);
	CommitTransactionCommand();
	MemoryContextSwitchTo(caller_cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
}

/*
 * Commit without waiting for the WAL to reach the disk, where the commit
 * would wait for nothing more than that (no synchronous standby): returns
 * the commit record's end, which must be flushed (XLogFlush) before anyone
 * is told of the commit.  Returns InvalidXLogRecPtr when the commit waited
 * as usual, or wrote nothing.  seckill_shared->orders_lsn says how far the
 * WAL must be flushed before an order read may be reported
 * (seckill_orders_flush).
 */
XLogRecPtr
store_commit_unflushed(void)
{
	int			level = synchronous_commit;
	uint64		before = pg_atomic_read_u64(&seckill_shared->orders_lsn);
	XLogRecPtr	lsn;

	if (level > SYNCHRONOUS_COMMIT_LOCAL_FLUSH && SyncRepStandbyNames != NULL &&
		SyncRepStandbyNames[0] != '\0')
	{
		store_commit();
		return InvalidXLogRecPtr;
	}
	XactLastCommitEnd = InvalidXLogRecPtr;
	/* readers who see these orders before the end is known flush all */
	pg_atomic_write_u64(&seckill_shared->orders_lsn, PG_UINT64_MAX);
	pg_memory_barrier();
	synchronous_commit = SYNCHRONOUS_COMMIT_OFF;
	PG_TRY();
	{
		store_commit();
	}
	PG_CATCH();
	{
		/* the commit record, if written before the error, is what readers flush */
		synchronous_commit = level;
		pg_atomic_write_u64(&seckill_shared->orders_lsn,
							XactLastCommitEnd != InvalidXLogRecPtr ? XactLastCommitEnd : before);
		PG_RE_THROW();
	}
	PG_END_TRY();
	synchronous_commit = level;
	lsn = XactLastCommitEnd;
	pg_memory_barrier();
	pg_atomic_write_u64(&seckill_shared->orders_lsn, lsn != InvalidXLogRecPtr ? lsn : before);
	return lsn;
}

/* After an error: roll back whatever transaction is open. */
void
store_abort(void)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	AbortOutOfAnyTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
}

static SPIPlanPtr
prepare(const char *sql, int nargs, Oid *types)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

static void
run(const char *sql, int nargs, Oid *types, Datum *values, int expected)
{
	int			rc = SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);

	if (rc != expected)
		elog(ERROR, "SPI failed for \"%s\": %s", sql, SPI_result_code_string(rc));
}

/*
 * Statements run once per slice of long work, where parsing and planning
 * would cost as much as the work: planned once, by their text.
 */
#define KEPT_PLANS 8
static struct
{
	char	   *sql;
	SPIPlanPtr	plan;
}			kept[KEPT_PLANS];

static void
run_kept(const char *sql, int nargs, Oid *types, Datum *values, int expected)
{
	int			i;
	int			rc;

	for (i = 0; i < KEPT_PLANS && kept[i].sql != NULL; i++)
		if (strcmp(kept[i].sql, sql) == 0)
			break;
	if (i == KEPT_PLANS)
	{
		run(sql, nargs, types, values, expected);
		return;
	}
	if (kept[i].sql == NULL)
	{
		kept[i].plan = prepare(sql, nargs, types);
		kept[i].sql = MemoryContextStrdup(TopMemoryContext, sql);
	}
	rc = SPI_execute_plan(kept[i].plan, values, NULL, false, 0);
	if (rc != expected)
		elog(ERROR, "SPI failed for \"%s\": %s", sql, SPI_result_code_string(rc));
}

/* Forget the block of order ids: its sequence was dropped. */
void
store_forget_order_ids(void)
{
	next_id = 0;
	last_id = -1;
	block_recorded = true;
}

/*
 * Order ids for n purchases.  The worker owns blocks of ORDER_ID_BLOCK ids
 * (one nextval each), so most rounds need no transaction for this.  Each
 * new block is given to record(first, last) before it is used, which
 * answers 0 (recorded), -1 (could not be: it is used all the same, and
 * recorded as soon as it can be) or the highest id already handed out,
 * which the block does not pass: the sequence then skips past that id (it
 * lost blocks, to a failover on asynchronous replication).
 */
void
store_take_order_ids(int64 *ids, int n, int64 (*record) (int64 first, int64 last))
{
	if (!block_recorded && last_id >= next_id)
	{
		int64		highest = record(next_id, last_id);

		if (highest >= 0)
			block_recorded = true;
		/* handed out by another server meanwhile: the rest of it goes */
		if (highest > 0)
			store_forget_order_ids();
	}
	if (last_id - next_id + 1 < n)
	{
		store_begin("seckill: order ids");
		while (last_id - next_id + 1 < n)
		{
			bool		isnull;
			int64		start;
			int64		highest;

			run("SELECT pg_catalog.nextval('seckill.order_ids')", 0, NULL, NULL, SPI_OK_SELECT);
			start = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
			highest = record(start, start + ORDER_ID_BLOCK - 1);
			if (highest > 0)
			{
				Datum		past = Int64GetDatum(highest);

				ereport(LOG,
						(errmsg("seckill worker skips order ids up to " INT64_FORMAT ": they were handed out before, by this server's sequence before a failover or by another server",
								highest)));
				run("SELECT pg_catalog.setval('seckill.order_ids', $1)", 1, (Oid[]) {INT8OID}, &past,
					SPI_OK_SELECT);
				continue;
			}
			block_recorded = highest == 0;
			if (start != last_id + 1)
				next_id = start;
			last_id = start + ORDER_ID_BLOCK - 1;
		}

		/*
		 * nextval() alone assigns no xid, so its commit does not flush WAL:
		 * after a crash the sequence could hand the same block out again,
		 * while reservations in Redis' journal still carry its ids.
		 */
		XLogFlush(XactLastRecEnd);
		store_commit();
	}
	for (int i = 0; i < n; i++)
		ids[i] = next_id++;
}

static Datum
int8_array(const int64 *v, int n)
{
	Datum	   *d = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
		d[i] = Int64GetDatum(v[i]);
	return PointerGetDatum(construct_array(d, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * Insert the orders of orders[0..n-1] whose campaign is still on sale, and
 * count them in the campaigns' "sold".  Marks the inserted ones SK_OK, and
 * SK_BUSY those whose campaign's row another transaction has locked: a
 * purchase never waits for an application's or a DBA's open transaction.
 */
static void
insert_orders(SkOrder *orders, int n)
{
	Oid			types[4] = {INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID};
	Datum		values[4];
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *campaigns = palloc(sizeof(Datum) * n);
	Datum	   *users = palloc(sizeof(Datum) * n);
	Datum	   *qtys = palloc(sizeof(Datum) * n);
	int			rc;

	if (commit_plan == NULL)
		commit_plan = prepare(
							  "WITH req AS ("
							  "  SELECT * FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
							  "                  pg_catalog.unnest($4)) AS r(id, campaign_id, user_id, qty)"
							  "), locked AS ("
							  "  SELECT c.id FROM seckill.campaigns c"
							  "  WHERE c.id = ANY (SELECT campaign_id FROM req)"
							  "    AND c.state = 'preheated'"
							  "  FOR NO KEY UPDATE SKIP LOCKED"
							  "), counted AS ("
							  "  UPDATE seckill.campaigns c SET sold = c.sold + s.qty"
							  "  FROM (SELECT campaign_id, pg_catalog.sum(qty)::int4 AS qty FROM req"
							  "        WHERE campaign_id = ANY (SELECT id FROM locked)"
							  "        GROUP BY campaign_id) s"
							  "  WHERE c.id = s.campaign_id"
							  "  RETURNING c.id"
							  "), inserted AS ("
							  "  INSERT INTO seckill.orders (id, campaign_id, user_id, qty)"
							  "  SELECT r.id, r.campaign_id, r.user_id, r.qty"
							  "    FROM req r JOIN counted ON counted.id = r.campaign_id"
							  "  RETURNING id"
							  ") "
							  "SELECT id, true FROM inserted "
							  "UNION ALL "
							  "SELECT r.id, false FROM req r JOIN seckill.campaigns c ON c.id = r.campaign_id"
							  " WHERE c.state = 'preheated'"
							  "   AND NOT r.campaign_id = ANY (SELECT id FROM locked)",
							  4, types);

	for (int i = 0; i < n; i++)
	{
		ids[i] = Int64GetDatum(orders[i].id);
		campaigns[i] = Int64GetDatum(orders[i].campaign_id);
		users[i] = CStringGetTextDatum(orders[i].user_id);
		qtys[i] = Int32GetDatum(orders[i].qty);
	}
	values[0] = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(construct_array(campaigns, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(users, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(qtys, n, INT4OID, 4, true, TYPALIGN_INT));

	rc = SPI_execute_plan(commit_plan, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "committing orders failed: %s", SPI_result_code_string(rc));

	/* orders[] is sorted by id: find each one answered by binary search */
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
		bool		inserted = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
		int			lo = 0,
					hi = n - 1;

		while (lo <= hi)
		{
			int			mid = (lo + hi) / 2;

			if (orders[mid].id == id)
			{
				orders[mid].outcome = inserted ? SK_OK : SK_BUSY;
				if (!inserted)
					orders[mid].reason = "the campaign's row was locked by another transaction";
				break;
			}
			if (orders[mid].id < id)
				lo = mid + 1;
			else
				hi = mid - 1;
		}
	}
}

/*
 * Run insert_orders in a subtransaction.  Returns false, with the error's
 * SQLSTATE and message, when it failed; the subtransaction is then rolled back.
 */
static bool
try_insert_orders(SkOrder *orders, int n, int *sqlerrcode, char **message)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		insert_orders(orders, n);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		*sqlerrcode = edata->sqlerrcode;
		*message = edata->message;
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

static SeckillStatus
status_for_error(int sqlerrcode)
{
	if (sqlerrcode == ERRCODE_UNIQUE_VIOLATION)
		return SK_DUPLICATE;
	if (sqlerrcode == ERRCODE_CHECK_VIOLATION)
		return SK_SOLD_OUT;
	return SK_BUSY;
}

/*
 * Run sql (planned once) with $1 and $2 the campaigns and users of
 * orders[from[0..n-1]] (of orders[0..n-1] when from is NULL), as arrays;
 * its first column is each row's ordinal in them (row_ordinal()).
 */
static void
run_for_orders(const char *sql, const SkOrder *orders, const int *from, int n)
{
	Oid			types[2] = {INT8ARRAYOID, TEXTARRAYOID};
	Datum		values[2];
	Datum	   *campaigns = palloc(sizeof(Datum) * n);
	Datum	   *users = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
	{
		const SkOrder *o = &orders[from ? from[i] : i];

		campaigns[i] = Int64GetDatum(o->campaign_id);
		users[i] = CStringGetTextDatum(o->user_id);
	}
	values[0] = PointerGetDatum(construct_array(campaigns, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(construct_array(users, n, TEXTOID, -1, false, TYPALIGN_INT));
	run_kept(sql, 2, types, values, SPI_OK_SELECT);
}

/* Of run_for_orders()' result row r: the ordinal it names, from 0. */
static int
row_ordinal(uint64 r)
{
	bool		isnull;

	return (int) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull)) - 1;
}

/*
 * Inside a transaction, without Redis: which of orders[0..n-1] come from
 * buyers refused a rebuy (their order in a campaign with rebuy_after_cancel
 * = false was cancelled)?  Their outcome becomes SK_DUPLICATE; returns how
 * many.  Redis refuses them itself: they stay in its buyers.
 */
int
store_refuse_rebuyers(SkOrder *orders, int n)
{
	run_for_orders("SELECT r.i FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2))"
				   "  WITH ORDINALITY AS r(campaign_id, user_id, i)"
				   " WHERE EXISTS (SELECT FROM seckill.campaigns c"
				   "               WHERE c.id = r.campaign_id AND NOT c.rebuy_after_cancel)"
				   "   AND EXISTS (SELECT FROM seckill.orders o WHERE o.campaign_id = r.campaign_id"
				   "               AND o.user_id = r.user_id AND o.status = 'cancelled')",
				   orders, NULL, n);
	for (uint64 r = 0; r < SPI_processed; r++)
		orders[row_ordinal(r)].outcome = SK_DUPLICATE;
	return SPI_processed;
}

/*
 * Inside a transaction: commit what can be committed of orders[0..n-1]
 * (sorted by id), and log the rest as compensations when Redis had
 * reserved them.  Each order's outcome says what its caller is to be told.
 */
void
store_commit_orders(SkOrder *orders, int n, bool reserved_in_redis)
{
	int			sqlerrcode;
	char	   *message;

	for (int i = 0; i < n; i++)
	{
		orders[i].outcome = SK_ENDED;
		orders[i].reason = "campaign is no longer on sale in PostgreSQL";
	}
	if (!try_insert_orders(orders, n, &sqlerrcode, &message))
	{
		/*
		 * A constraint refused a row: find which, one by one.  Anything else
		 * (a lock or statement timeout) would only fail again, each time.
		 */
		if (ERRCODE_TO_CATEGORY(sqlerrcode) != ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION)
			ereport(LOG,
					(errcode(sqlerrcode),
					 errmsg("seckill worker could not commit the orders of a round: %s", message),
					 errdetail("Their reservations are given back, and their callers told busy.")));
		for (int i = 0; i < n; i++)
		{
			if (ERRCODE_TO_CATEGORY(sqlerrcode) != ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION)
			{
				orders[i].outcome = SK_BUSY;
				orders[i].reason = message;
				continue;
			}
			orders[i].outcome = SK_ENDED;
			if (!try_insert_orders(&orders[i], 1, &sqlerrcode, &message))
			{
				orders[i].outcome = status_for_error(sqlerrcode);
				orders[i].reason = message;
			}
		}
	}
	/* a purchase refused without a Redis reservation has nothing to give back */
	for (int i = 0; reserved_in_redis && i < n; i++)
		if (orders[i].outcome != SK_OK)
			store_log_compensation(orders[i].id, orders[i].campaign_id,
								   orders[i].user_id, orders[i].qty, orders[i].reason);
}

/* Inside a transaction: log a give-back, once per request id. */
void
store_log_compensation(int64 request_id, int64 campaign_id, const char *user_id,
					   int qty, const char *reason)
{
	Oid			types[5] = {INT8OID, INT8OID, TEXTOID, INT4OID, TEXTOID};
	Datum		values[5];
	int			rc;

	if (compensation_plan == NULL)
		compensation_plan = prepare(
									"INSERT INTO seckill.compensations (request_id, campaign_id, user_id, qty, reason) "
									"VALUES ($1, $2, $3, $4, $5) ON CONFLICT (request_id) DO NOTHING",
									5, types);
	values[0] = Int64GetDatum(request_id);
	values[1] = Int64GetDatum(campaign_id);
	values[2] = CStringGetTextDatum(user_id);
	values[3] = Int32GetDatum(qty);
	values[4] = CStringGetTextDatum(reason);
	rc = SPI_execute_plan(compensation_plan, values, NULL, false, 0);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "logging a compensation failed: %s", SPI_result_code_string(rc));
}

static int
int64_cmp(const void *a, const void *b)
{
	int64		x = *(const int64 *) a;
	int64		y = *(const int64 *) b;

	return x < y ? -1 : x > y;
}

/* Inside a transaction: which of these order ids were committed? */
bool *
store_orders_exist(const int64 *ids, int n)
{
	Oid			types[1] = {INT8ARRAYOID};
	Datum		values[1];
	bool	   *exists = MemoryContextAllocZero(caller_cxt, sizeof(bool) * n);
	int64	   *found;
	int			rc;

	/* an order committed without a flush is settled only once it is durable */
	seckill_orders_flush();
	if (exist_plan == NULL)
		exist_plan = prepare("SELECT id FROM seckill.orders WHERE id = ANY ($1)", 1, types);
	values[0] = int8_array(ids, n);
	rc = SPI_execute_plan(exist_plan, values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading orders failed: %s", SPI_result_code_string(rc));
	/* a journal left by a long outage may hold many: sorted, then searched */
	found = palloc(sizeof(int64) * Max(SPI_processed, 1));
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		found[r] = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));
	}
	qsort(found, SPI_processed, sizeof(int64), int64_cmp);
	for (int i = 0; i < n; i++)
		exists[i] = bsearch(&ids[i], found, SPI_processed, sizeof(int64), int64_cmp) != NULL;
	return exists;
}

/* Inside a transaction: which of these users hold an active order in the campaign? */
bool *
store_have_active_order(int64 campaign_id, const char **users, int n)
{
	Oid			types[2] = {INT8OID, TEXTARRAYOID};
	Datum		values[2];
	Datum	   *texts = palloc(sizeof(Datum) * n);
	bool	   *active = MemoryContextAllocZero(caller_cxt, sizeof(bool) * n);

	for (int i = 0; i < n; i++)
		texts[i] = CStringGetTextDatum(users[i]);
	values[0] = Int64GetDatum(campaign_id);
	values[1] = PointerGetDatum(construct_array(texts, n, TEXTOID, -1, false, TYPALIGN_INT));
	run("SELECT user_id FROM seckill.orders"
		" WHERE campaign_id = $1 AND status <> 'cancelled' AND user_id = ANY ($2)",
		2, types, values, SPI_OK_SELECT);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;
		char	   *user = TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 1, &isnull));

		for (int i = 0; i < n; i++)
			if (strcmp(users[i], user) == 0)
				active[i] = true;
	}
	return active;
}

/*
 * Inside a transaction: into held, the order held by the user of each order
 * whose outcome is SK_DUPLICATE: the active one, else, where the campaign
 * refuses a rebuy after a cancel, the cancelled one; 0 when the user holds
 * none (the reservation that made them a buyer in Redis was refused).
 * Orders this transaction inserted are seen.
 */
void
store_name_held_orders(SkOrder *orders, int n)
{
	int		   *from = palloc(sizeof(int) * n);
	int			nd = 0;

	for (int i = 0; i < n; i++)
		if (orders[i].outcome == SK_DUPLICATE)
			from[nd++] = i;
	if (nd == 0)
		return;
	/* each branch an index probe: orders_one_active_per_user, then orders_cancelled */
	run_for_orders("SELECT r.i, h.id"
				   " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) WITH ORDINALITY AS r(campaign_id, user_id, i),"
				   " LATERAL (SELECT o.id FROM seckill.orders o"
				   "          WHERE o.campaign_id = r.campaign_id AND o.user_id = r.user_id AND o.status <> 'cancelled'"
				   "          UNION ALL"
				   "          (SELECT o.id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id"
				   "           WHERE o.campaign_id = r.campaign_id AND o.user_id = r.user_id AND o.status = 'cancelled'"
				   "             AND NOT c.rebuy_after_cancel ORDER BY o.id DESC LIMIT 1)"
				   "          LIMIT 1) h",
				   orders, from, nd);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		orders[from[row_ordinal(r)]].held =
			DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, 2, &isnull));
	}
}

/* A campaign's token secret, as seckill.token_secrets holds it, into its limits. */
void
store_token_secret_copy(const bytea *secret, SeckillLimits *limits)
{
	if (VARSIZE_ANY_EXHDR(secret) != SK_TOKEN_SECRET_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a token secret must be %d bytes long", SK_TOKEN_SECRET_LEN)));
	memcpy(limits->token_secret, VARDATA_ANY(secret), SK_TOKEN_SECRET_LEN);
	limits->has_token_secret = true;
}

static void
row_from_tuple(HeapTuple tuple, TupleDesc desc, SkCampaignRow *row)
{
	bool		isnull;
	Datum		secret;
	char	   *goods = TextDatumGetCString(SPI_getbinval(tuple, desc, 2, &isnull));
	char	   *state = TextDatumGetCString(SPI_getbinval(tuple, desc, 8, &isnull));

	row->id = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
	strlcpy(row->goods, goods, sizeof(row->goods));
	row->total_stock = DatumGetInt32(SPI_getbinval(tuple, desc, 3, &isnull));
	row->sold = DatumGetInt32(SPI_getbinval(tuple, desc, 4, &isnull));
	row->per_user_limit = DatumGetInt32(SPI_getbinval(tuple, desc, 5, &isnull));
	row->starts_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 6, &isnull));
	row->ends_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 7, &isnull));
	strlcpy(row->state, state, sizeof(row->state));
	store_limits_from_tuple(tuple, desc, 9, &row->limits);
	row->created_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 17, &isnull));
	secret = SPI_getbinval(tuple, desc, 18, &isnull);
	if (!isnull)
		store_token_secret_copy(DatumGetByteaPP(secret), &row->limits);
	row->rebuy_after_cancel = DatumGetBool(SPI_getbinval(tuple, desc, 19, &isnull));
}

/* Read the LIMITS_COLUMNS that start at column first (1-based). */
void
store_limits_from_tuple(HeapTuple tuple, TupleDesc desc, int first, SeckillLimits *limits)
{
	bool		isnull;

	memset(limits, 0, sizeof(SeckillLimits));
	limits->user_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, first, &isnull));
	limits->user_burst = DatumGetInt32(SPI_getbinval(tuple, desc, first + 1, &isnull));
	limits->addr_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, first + 2, &isnull));
	limits->addr_burst = DatumGetInt32(SPI_getbinval(tuple, desc, first + 3, &isnull));
	limits->max_in_flight = DatumGetInt32(SPI_getbinval(tuple, desc, first + 4, &isnull));
	limits->token_required = DatumGetBool(SPI_getbinval(tuple, desc, first + 5, &isnull));
	limits->token_ttl = DatumGetInt64(SPI_getbinval(tuple, desc, first + 6, &isnull));
	limits->shards = DatumGetInt32(SPI_getbinval(tuple, desc, first + 7, &isnull));
}

#define CAMPAIGN_FIELDS \
	"id, goods, total_stock, sold, per_user_limit, starts_at, ends_at, state, " \
	LIMITS_COLUMNS ", created_at, (SELECT t.secret FROM seckill.token_secrets t " \
	"WHERE t.campaign_id = seckill.campaigns.id), rebuy_after_cancel"

#define CAMPAIGN_COLUMNS "SELECT " CAMPAIGN_FIELDS " FROM seckill.campaigns "

/* Inside a transaction: the campaign as this transaction sees it. */
bool
store_campaign(int64 id, SkCampaignRow *row)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};

	run(CAMPAIGN_COLUMNS "WHERE id = $1", 1, types, values, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	row_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, row);
	return true;
}

/*
 * After the result of the extversion query: does the installed SQL match
 * this library?  Until ALTER EXTENSION seckill UPDATE, the worker serves no
 * campaign and says so once.
 */
bool		store_sql_outdated = false;

static bool
sql_version_matches(void)
{
	static bool warned = false;
	bool		isnull;

	store_sql_outdated = !DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull));
	if (!store_sql_outdated)
		return true;
	if (!warned)
		ereport(WARNING,
				(errcode(ERRCODE_SECKILL_UNAVAILABLE),
				 errmsg("the seckill extension in database \"%s\" is older than its library (version " SECKILL_SQL_VERSION ")",
						get_database_name(MyDatabaseId)),
				 errhint("Run ALTER EXTENSION seckill UPDATE in that database.")));
	warned = true;
	return false;
}

/* Set by store_preheated_campaigns: seckill.worker_state.sales_from_database. */
bool		store_sales_from_database = false;

/*
 * Inside a transaction: record whether the worker sells from PostgreSQL
 * alone, so that a restart remembers that Redis is stale.
 */
void
store_set_database_mode(bool on)
{
	Oid			types[1] = {BOOLOID};
	Datum		values[1] = {BoolGetDatum(on)};

	run("INSERT INTO seckill.worker_state AS w (sales_from_database) VALUES ($1) "
		"ON CONFLICT (one) DO UPDATE SET sales_from_database = EXCLUDED.sales_from_database, "
		"changed_at = pg_catalog.now() "
		"WHERE w.sales_from_database IS DISTINCT FROM EXCLUDED.sales_from_database",
		1, types, values, SPI_OK_INSERT);
}

/*
 * Every preheated campaign, as SkCampaignRow *, in a transaction of its own;
 * none while the extension is not installed (the worker starts before it
 * may be).
 */
List *
store_preheated_campaigns(void)
{
	List	   *rows = NIL;
	MemoryContext spi_cxt;

	store_begin("seckill: list campaigns");
	store_sql_outdated = false;
	run("SELECT extversion = '" SECKILL_SQL_VERSION "' FROM pg_catalog.pg_extension "
		"WHERE extname = 'seckill'", 0, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0 && !sql_version_matches())
		SPI_processed = 0;
	else if (SPI_processed > 0)
	{
		bool		isnull;

		run("SELECT pg_catalog.bool_or(sales_from_database) FROM seckill.worker_state",
			0, NULL, NULL, SPI_OK_SELECT);
		store_sales_from_database =
			DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
			!isnull;
		run(CAMPAIGN_COLUMNS "WHERE state = 'preheated' ORDER BY id", 0, NULL, NULL, SPI_OK_SELECT);
		spi_cxt = MemoryContextSwitchTo(caller_cxt);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			SkCampaignRow *row = palloc(sizeof(SkCampaignRow));

			row_from_tuple(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, row);
			rows = lappend(rows, row);
		}
		MemoryContextSwitchTo(spi_cxt);
	}
	store_commit();
	return rows;
}

/* Inside a transaction: the users with an active order, as char *. */
/*
 * Inside a transaction: up to limit buyers of the campaign whose user id
 * comes after the given one (the first page: ""), in user id order; with
 * cancelled, those whose orders were all cancelled.  Keyset pages over
 * orders_one_active_per_user and orders_cancelled: each costs O(limit).
 */
List *
store_buyers_page(int64 campaign_id, bool cancelled, const char *after, int limit)
{
	Oid			types[3] = {INT8OID, TEXTOID, INT4OID};
	Datum		values[3] = {Int64GetDatum(campaign_id), CStringGetTextDatum(after), Int32GetDatum(limit)};
	List	   *users = NIL;
	MemoryContext spi_cxt;
	int			rc;

	if (buyers_plan[cancelled] == NULL)
		buyers_plan[cancelled] = prepare(cancelled ?
										 "SELECT DISTINCT user_id FROM seckill.orders WHERE campaign_id = $1"
										 " AND status = 'cancelled' AND user_id > $2 ORDER BY user_id LIMIT $3" :
										 "SELECT user_id FROM seckill.orders WHERE campaign_id = $1"
										 " AND status <> 'cancelled' AND user_id > $2 ORDER BY user_id LIMIT $3",
										 3, types);
	rc = SPI_execute_plan(buyers_plan[cancelled], values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI failed reading the buyers of campaign " INT64_FORMAT ": %s",
			 campaign_id, SPI_result_code_string(rc));
	spi_cxt = MemoryContextSwitchTo(caller_cxt);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		users = lappend(users, TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[r],
																  SPI_tuptable->tupdesc, 1, &isnull)));
	}
	MemoryContextSwitchTo(spi_cxt);
	return users;
}

/*
 * Inside a transaction: the campaign's buyers, as Redis should hold them:
 * users with an active order, and, unless they may buy again, those whose
 * orders were cancelled.
 */
int64
store_buyer_count(int64 campaign_id, bool rebuy)
{
	Oid			types[2] = {INT8OID, BOOLOID};
	Datum		values[2] = {Int64GetDatum(campaign_id), BoolGetDatum(rebuy)};
	bool		isnull;

	run("SELECT (SELECT pg_catalog.count(*) FROM seckill.orders"
		"        WHERE campaign_id = $1 AND status <> 'cancelled')"
		" + CASE WHEN $2 THEN 0 ELSE"
		"  (SELECT pg_catalog.count(DISTINCT o.user_id) FROM seckill.orders o"
		"   WHERE o.campaign_id = $1 AND o.status = 'cancelled'"
		"   AND NOT EXISTS (SELECT FROM seckill.orders a WHERE a.campaign_id = $1"
		"                   AND a.user_id = o.user_id"
		"                   AND a.status <> 'cancelled')) END",
		2, types, values, SPI_OK_SELECT);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

void
store_set_state(int64 campaign_id, const char *state)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(campaign_id), CStringGetTextDatum(state)};

	run("UPDATE seckill.campaigns SET state = $2, "
		"closed_at = CASE WHEN $2 = 'closed' THEN pg_catalog.now() END WHERE id = $1",
		2, types, values, SPI_OK_UPDATE);
}

/*
 * Fencing tokens come in blocks of FENCE_BLOCK from seckill.fence_tokens
 * (INCREMENT BY 1000), handed out in the order of the grants: the worker is
 * their only giver, and a new worker (or installation) starts a new block,
 * above every token given before.
 */
#define FENCE_BLOCK 1000

static int64 fence_next = 0;
static int64 fence_last = -1;
static uint32 fence_generation = 0;

/* Does the next fencing token need a transaction (a new block)? */
bool
store_fence_token_needs_block(void)
{
	if (pg_atomic_read_u32(&seckill_shared->install_generation) != fence_generation)
	{
		fence_generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		fence_next = 0;
		fence_last = -1;
	}
	return fence_next > fence_last;
}

/* The next fencing token; inside a transaction when a new block is needed. */
int64
store_fence_token(void)
{
	if (store_fence_token_needs_block())
	{
		bool		isnull;

		run("SELECT pg_catalog.nextval('seckill.fence_tokens')", 0, NULL, NULL, SPI_OK_SELECT);
		fence_next = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		fence_last = fence_next + FENCE_BLOCK - 1;
	}
	return fence_next++;
}

/*
 * Inside a transaction about to write under a lock: refuse (55P03) a
 * fencing token older than one that already wrote under that name, as
 * seckill_fence_check() does for SQL callers.
 */
void
store_fence(const char *name, int64 token)
{
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(name), Int64GetDatum(token)};

	run_kept("INSERT INTO seckill.fences AS f (name, token) VALUES ($1, $2) "
		"ON CONFLICT ON CONSTRAINT fences_pkey DO UPDATE SET token = EXCLUDED.token, checked_at = pg_catalog.now() "
		"WHERE f.token <= EXCLUDED.token", 2, types, values, SPI_OK_INSERT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("fencing token " INT64_FORMAT " of \"%s\" is stale", token, name),
				 errdetail("A later holder of the lock already wrote; this one's lease ran out.")));
}

/* Inside a transaction: the campaign's traffic limits (0 or false: none). */
void
store_set_limits(int64 campaign_id, const SeckillLimits *limits)
{
	Oid			types[9] = {INT8OID, FLOAT8OID, INT4OID, FLOAT8OID, INT4OID, INT4OID,
	BOOLOID, INT8OID, INT4OID};
	Datum		values[9] = {
		Int64GetDatum(campaign_id),
		Float8GetDatum(limits->user_rate), Int32GetDatum(limits->user_burst),
		Float8GetDatum(limits->addr_rate), Int32GetDatum(limits->addr_burst),
		Int32GetDatum(limits->max_in_flight), BoolGetDatum(limits->token_required),
		Int64GetDatum(limits->token_ttl), Int32GetDatum(limits->shards)
	};

	run("UPDATE seckill.campaigns SET user_rate = nullif($2, 0), user_burst = nullif($3, 0), "
		"addr_rate = nullif($4, 0), addr_burst = nullif($5, 0), "
		"max_in_flight = nullif($6, 0), token_required = $7, "
		"token_ttl = pg_catalog.make_interval(secs => $8 / 1000000.0), "
		"shards = CASE WHEN state = 'draft' THEN $9 ELSE shards END WHERE id = $1",
		9, types, values, SPI_OK_UPDATE);
}

/*
 * Inside a transaction: the unpaid orders in ids (NULL: this campaign's
 * orders past its payment timeout, at most limit of them) become cancelled,
 * and the campaign's "sold" drops by their quantity.  Returns how many.
 */
static int
cancel_orders(const char *which, int nargs, Oid *types, Datum *values, SkCancelled *out)
{
	char	   *sql = psprintf(
							   "WITH x AS (%s), "
							   "cancelled AS ("
							   "  UPDATE seckill.orders o SET status = 'cancelled', cancelled_at = pg_catalog.now()"
							   "  FROM x WHERE o.id = x.id AND o.status = 'reserved'"
							   "  RETURNING o.campaign_id, o.user_id, o.qty, o.created_at, o.id), "
							   "total AS (SELECT campaign_id, pg_catalog.sum(qty)::int AS qty FROM cancelled GROUP BY campaign_id), "
							   "counted AS ("
							   "  UPDATE seckill.campaigns c SET sold = c.sold - t.qty FROM total t"
							   "  WHERE c.id = t.campaign_id RETURNING c.id, c.rebuy_after_cancel) "
							   "SELECT k.campaign_id, k.user_id, k.qty, n.rebuy_after_cancel, k.created_at, k.id "
							   "FROM cancelled k JOIN counted n ON n.id = k.campaign_id",
							   which);
	MemoryContext spi_cxt;

	run_kept(sql, nargs, types, values, SPI_OK_SELECT);
	spi_cxt = MemoryContextSwitchTo(caller_cxt);
	out->qty = 0;
	out->users = NIL;
	out->qtys = NIL;
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		TimestampTz created_at;
		int64		id;

		out->campaign_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		out->users = lappend(out->users, TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull)));
		out->qtys = lappend_int(out->qtys, DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull)));
		out->qty += DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		out->rebuy = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));
		created_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 5, &isnull));
		id = DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));
		if (r == 0 || created_at > out->last_created_at ||
			(created_at == out->last_created_at && id > out->last_id))
		{
			out->last_created_at = created_at;
			out->last_id = id;
		}
	}
	MemoryContextSwitchTo(spi_cxt);
	return (int) SPI_processed;
}

/*
 * Who holds the row lock of this order: "process N", "prepared transaction
 * \"gid\"", or "another transaction" when it cannot be told.
 */
static char *
order_lock_holder(int64 order_id)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(order_id)};
	bool		isnull;
	Datum		d;

	run("SELECT (SELECT 'process ' || l.pid FROM pg_catalog.pg_locks l"
		"         WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock'"
		"           AND l.granted AND l.pid IS NOT NULL"
		"           AND l.transactionid = o.xmax LIMIT 1),"
		"       (SELECT 'prepared transaction \"' || p.gid || '\"' FROM pg_catalog.pg_prepared_xacts p"
		"         WHERE p.transaction = o.xmax)"
		"  FROM seckill.orders o WHERE o.id = $1",
		1, types, values, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return "another transaction";
	for (int col = 1; col <= 2; col++)
	{
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, &isnull);
		if (!isnull)
			return TextDatumGetCString(d);
	}
	return "another transaction";
}

/*
 * Inside a transaction: cancel one order if it is reserved; out->status says
 * what it was.  The order's row is locked without waiting: an application
 * that holds it in an open transaction (paying it, say) gets its own answer
 * first, and the cancel fails at once with SQLSTATE 55P03.
 */
void
store_cancel_order(int64 order_id, SkCancelled *out)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(order_id)};
	bool		isnull;

	out->status[0] = '\0';
	run("SELECT status, campaign_id FROM seckill.orders WHERE id = $1 FOR UPDATE SKIP LOCKED",
		1, types, values, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		run("SELECT 1 FROM seckill.orders WHERE id = $1", 1, types, values, SPI_OK_SELECT);
		if (SPI_processed == 0)
			return;
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("order " INT64_FORMAT " is locked by %s; end that transaction, then cancel again",
						order_id, order_lock_holder(order_id))));
	}
	strlcpy(out->status, TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)),
			sizeof(out->status));
	out->campaign_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	if (strcmp(out->status, "reserved") == 0)
		(void) cancel_orders("SELECT $1::int8 AS id", 1, types, values, out);
}

/*
 * Inside a transaction: cancel up to limit expired unpaid orders of a
 * campaign that come after (after_created_at, after_id), the oldest first;
 * out->last_* is where the next batch starts.  The partial index
 * orders_reserved serves them in that order from that key on, so a batch
 * costs O(limit) however many have expired, and however many were cancelled
 * before it that a long transaction elsewhere (the caller's own) keeps
 * from being vacuumed.  A payment timeout past a thousand years means never:
 * now() less it would be out of the range of a timestamp.
 */
int
store_release_expired(int64 campaign_id, int limit, TimestampTz after_created_at, int64 after_id,
					  SkCancelled *out)
{
	Oid			types[4] = {INT8OID, INT4OID, TIMESTAMPTZOID, INT8OID};
	Datum		values[4] = {Int64GetDatum(campaign_id), Int32GetDatum(limit),
	TimestampTzGetDatum(after_created_at), Int64GetDatum(after_id)};

	out->campaign_id = campaign_id;
	return cancel_orders("SELECT o.id FROM seckill.orders o"
						 " WHERE o.campaign_id = $1 AND o.status = 'reserved'"
						 "   AND (o.created_at, o.id) > ($3, $4)"
						 "   AND o.created_at < (SELECT pg_catalog.now() - LEAST(c.payment_timeout, interval '1000 years')"
						 "                         FROM seckill.campaigns c WHERE c.id = $1)"
						 " ORDER BY o.created_at, o.id LIMIT $2 FOR UPDATE OF o SKIP LOCKED",
						 4, types, values, out);
}

/*
 * Inside a transaction: change the campaign's total_stock by delta, never
 * below what is sold.  False (nothing changed) when it would go below.
 */
bool
store_restock(int64 campaign_id, int delta, SkCampaignRow *row)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(campaign_id), Int32GetDatum(delta)};

	run("UPDATE seckill.campaigns SET total_stock = total_stock + $2"
		" WHERE id = $1 AND total_stock + $2 >= sold"
		" RETURNING " CAMPAIGN_FIELDS,
		2, types, values, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 0)
		return false;
	row_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, row);
	return true;
}
