/*-------------------------------------------------------------------------
 *
 * orders.c
 *		seckill.orders and seckill.compensations: blocks of order ids, the rebuyers
 *		refused and the holders named after a round, cancels and releases,
 *		and the reads of orders that backends make (the order a buyer holds,
 *		an order's fate).  The group commit itself is group_commit.c.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "storage/lmgr.h"
#include "store/sql.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

static SPIPlanPtr compensation_plan = NULL;
static SPIPlanPtr exist_plan = NULL;

/*
 * A new block of SK_ORDER_ID_BLOCK order ids from seckill.order_ids (one
 * nextval, in a transaction of its own): the first of them.
 */
int64
store_order_id_block(void)
{
	bool		isnull;
	int64		start;

	store_begin("seckill: order ids");
	store_run("SELECT pg_catalog.nextval('seckill.order_ids')", 0, NULL, NULL, SPI_OK_SELECT);
	start = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));

	/*
	 * nextval() alone assigns no xid, so its commit does not flush WAL:
	 * after a crash the sequence could hand the same block out again, while
	 * reservations in Redis' journal still carry its ids.
	 */
	XLogFlush(XactLastRecEnd);
	store_commit();
	return start;
}

/* The sequence of order ids goes on past id, which was handed out before. */
void
store_skip_order_ids(int64 id)
{
	Datum		past = Int64GetDatum(id);

	store_begin("seckill: order ids");
	store_run("SELECT pg_catalog.setval('seckill.order_ids', $1)", 1, (Oid[]) {INT8OID}, &past,
			  SPI_OK_SELECT);
	XLogFlush(XactLastRecEnd);
	store_commit();
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
	store_run_kept(sql, 2, types, values, SPI_OK_SELECT);
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

/* Inside a transaction: log a give-back, once per request id. */
void
store_log_compensation(int64 request_id, int64 campaign_id, const char *user_id,
					   int qty, const char *reason)
{
	Oid			types[5] = {INT8OID, INT8OID, TEXTOID, INT4OID, TEXTOID};
	Datum		values[5];
	int			rc;

	if (compensation_plan == NULL)
		compensation_plan = store_prepare(
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
	bool	   *exists = MemoryContextAllocZero(store_caller_cxt, sizeof(bool) * n);
	int64	   *found;
	int			rc;

	if (exist_plan == NULL)
		exist_plan = store_prepare("SELECT id FROM seckill.orders WHERE id = ANY ($1)", 1, types);
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
	bool	   *active = MemoryContextAllocZero(store_caller_cxt, sizeof(bool) * n);

	for (int i = 0; i < n; i++)
		texts[i] = CStringGetTextDatum(users[i]);
	values[0] = Int64GetDatum(campaign_id);
	values[1] = PointerGetDatum(construct_array(texts, n, TEXTOID, -1, false, TYPALIGN_INT));
	store_run("SELECT user_id FROM seckill.orders"
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

	store_run_kept(sql, nargs, types, values, SPI_OK_SELECT);
	spi_cxt = MemoryContextSwitchTo(store_caller_cxt);
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

	store_run("SELECT (SELECT 'process ' || l.pid FROM pg_catalog.pg_locks l"
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
	store_run("SELECT status, campaign_id FROM seckill.orders WHERE id = $1 FOR UPDATE SKIP LOCKED",
		1, types, values, SPI_OK_SELECT);
	if (SPI_processed == 0)
	{
		store_run("SELECT 1 FROM seckill.orders WHERE id = $1", 1, types, values, SPI_OK_SELECT);
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
 * seckill.orders and its index orders_one_active_per_user, looked up once
 * per backend: the sold-out answer probes them on every call.  Forgotten
 * when either changes (a REINDEX CONCURRENTLY gives the index a new OID, a
 * DROP EXTENSION drops both).
 */
static Oid	orders_oid = InvalidOid;
static Oid	holder_index_oid = InvalidOid;

static void
forget_orders_oids(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == orders_oid || relid == holder_index_oid)
		orders_oid = holder_index_oid = InvalidOid;
}

/*
 * Both OIDs are set together, after both lookups: a lookup may take in a
 * relcache reset (an invalidation queue overflow) that forgets the OIDs,
 * and one forgotten while the other was kept would be opened as OID 0.  A
 * stale pair is caught after locking, in store_held_order().
 */
static bool
look_up_orders_oids(void)
{
	static bool callback_registered = false;
	Oid			nsp;
	Oid			table;
	Oid			index;

	if (OidIsValid(orders_oid) && OidIsValid(holder_index_oid))
		return true;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_orders_oids, (Datum) 0);
		callback_registered = true;
	}
	nsp = get_namespace_oid("seckill", true);
	if (!OidIsValid(nsp))
		return false;
	table = get_relname_relid("orders", nsp);
	index = get_relname_relid("orders_one_active_per_user", nsp);
	if (!OidIsValid(table) || !OidIsValid(index))
		return false;
	orders_oid = table;
	holder_index_oid = index;
	return true;
}

/*
 * The user's active order of the campaign, as the statement's snapshot
 * sees it, or 0.  A probe of orders_one_active_per_user without SPI: it
 * runs for every sold-out answer of the cache.  It never waits for a lock:
 * while another session holds the table or its index exclusively (a DBA's
 * REINDEX, say), it answers 0 and the caller is told sold_out.
 */
int64
store_held_order(int64 campaign_id, const char *user_id)
{
	Oid			table_oid;
	Oid			index_oid;
	Relation	orders,
				index;
	ScanKeyData keys[2];
	Snapshot	snapshot;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	int64		id = 0;

	if (!look_up_orders_oids())
		return 0;
	table_oid = orders_oid;
	index_oid = holder_index_oid;
	if (!ConditionalLockRelationOid(table_oid, AccessShareLock))
		return 0;
	if (!ConditionalLockRelationOid(index_oid, AccessShareLock))
	{
		UnlockRelationOid(table_oid, AccessShareLock);
		return 0;
	}
	/* the locks took in invalidations: a change meanwhile forgot the OIDs */
	if (orders_oid != table_oid || holder_index_oid != index_oid)
	{
		UnlockRelationOid(index_oid, AccessShareLock);
		UnlockRelationOid(table_oid, AccessShareLock);
		return 0;
	}
	orders = table_open(table_oid, NoLock);
	index = index_open(index_oid, NoLock);
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(campaign_id));
	ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[1], F_TEXTEQ, CStringGetTextDatum(user_id));
	snapshot = GetActiveSnapshot();
	slot = table_slot_create(orders, NULL);
	scan = index_beginscan(orders, index, snapshot, 2, 0);
	index_rescan(scan, keys, 2, NULL, 0);
	if (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;

		id = DatumGetInt64(slot_getattr(slot, 1, &isnull));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, AccessShareLock);
	table_close(orders, AccessShareLock);
	return id;
}

/*
 * In a backend: the user's order of the campaign, active first, else the
 * latest cancelled one, as committed now, whatever the caller's snapshot:
 * the statement's (taken before the wait for the worker, or before the
 * purchase in the same statement) or a repeatable read's would answer none
 * for an order that exists.  False when there is none.  The fate told is
 * durable: the worker's commits wait for their WAL flush.
 */
bool
store_order_fate(int64 campaign_id, const char *user_id, SkOrderFate *fate)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		args[2] = {Int64GetDatum(campaign_id), CStringGetTextDatum(user_id)};
	int			level = store_backend_spi_begin();
	static SPIPlanPtr plan = NULL;
	bool		found = false;

	if (plan == NULL)
		plan = store_prepare("SELECT status, id, qty, created_at FROM seckill.orders "
							 "WHERE campaign_id = $1 AND user_id = $2 "
							 "ORDER BY status <> 'cancelled' DESC, id DESC LIMIT 1",
							 2, types);
	if (SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(), InvalidSnapshot,
							 true, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading seckill.orders failed");
	if (SPI_processed > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;

		strlcpy(fate->status, TextDatumGetCString(SPI_getbinval(tup, desc, 1, &isnull)),
				sizeof(fate->status));
		fate->id = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
		fate->qty = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		fate->created_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull));
		found = true;
	}
	store_backend_spi_end(level);
	return found;
}
