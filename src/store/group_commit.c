/*-------------------------------------------------------------------------
 *
 * group_commit.c
 *		The group commit of a round's orders: each campaign's row locked and
 *		its "sold" counted, then the orders inserted by one statement, in
 *		the worker's transaction.
 *
 * When that fails (a stale Redis let a duplicate or an oversell through,
 * and a constraint caught it), each order is retried alone in a
 * subtransaction, so one bad row does not sink the others; the refused ones
 * are logged as compensations in the same transaction.
 *
 * The foreign key of seckill.orders to seckill.campaigns would re-prove,
 * row by row, what the round holds already: the campaign's row, locked and
 * updated by the same transaction until it commits, so that a campaign
 * deleted or closed meanwhile gets no order.  While that key's check is the
 * only trigger an INSERT into seckill.orders fires, the round's INSERT runs
 * as a replica's would (SessionReplicationRole), which fires none of it;
 * any other trigger on INSERT (an audit, another foreign key) keeps them
 * all firing.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "nodes/makefuncs.h"
#include "store/sql.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

static SPIPlanPtr count_plan = NULL;
static SPIPlanPtr on_sale_plan = NULL;
static SPIPlanPtr insert_plan = NULL;

/*
 * Does an INSERT into seckill.orders fire nothing but the campaign key's
 * check?  Kept for the table orders_verdict_oid until its relcache entry is
 * invalidated, as CREATE TRIGGER and ALTER TABLE do.
 */
typedef enum
{
	VERDICT_UNKNOWN,
	VERDICT_KEY_ONLY,
	VERDICT_OTHERS
} KeyVerdict;

static Oid	orders_verdict_oid = InvalidOid;
static KeyVerdict orders_verdict = VERDICT_UNKNOWN;

static void
forget_verdict(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == orders_verdict_oid)
		orders_verdict = VERDICT_UNKNOWN;
}

/* Is constraint conoid a key of seckill.orders (campaign_id) alone? */
static bool
is_campaign_key(Oid conoid, AttrNumber campaign_id)
{
	HeapTuple	tuple = SearchSysCache1(CONSTROID, ObjectIdGetDatum(conoid));
	bool		isnull;
	Datum		conkey;
	ArrayType  *keys;
	bool		match;

	if (!HeapTupleIsValid(tuple))
		return false;
	conkey = SysCacheGetAttr(CONSTROID, tuple, Anum_pg_constraint_conkey, &isnull);
	keys = isnull ? NULL : DatumGetArrayTypeP(conkey);
	match = keys != NULL && ARR_NDIM(keys) == 1 && ARR_DIMS(keys)[0] == 1 &&
		!ARR_HASNULL(keys) && ((int16 *) ARR_DATA_PTR(keys))[0] == campaign_id;
	ReleaseSysCache(tuple);
	return match;
}

static KeyVerdict
judge_insert_triggers(Relation orders)
{
	TriggerDesc *triggers = orders->trigdesc;
	Oid			campaigns = get_relname_relid("campaigns", RelationGetNamespace(orders));
	AttrNumber	campaign_id = get_attnum(RelationGetRelid(orders), "campaign_id");

	for (int i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		Trigger    *t = &triggers->triggers[i];

		if (!TRIGGER_FOR_INSERT(t->tgtype))
			continue;
		if (!t->tgisinternal || t->tgfoid != F_RI_FKEY_CHECK_INS ||
			t->tgconstrrelid != campaigns || !is_campaign_key(t->tgconstraint, campaign_id))
			return VERDICT_OTHERS;
	}
	return VERDICT_KEY_ONLY;
}

/* orders, locked: may its INSERT skip the campaign key's check? */
static bool
key_check_only(Relation orders)
{
	static bool callback_registered = false;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(forget_verdict, (Datum) 0);
		callback_registered = true;
	}
	if (orders_verdict == VERDICT_UNKNOWN || orders_verdict_oid != RelationGetRelid(orders))
	{
		orders_verdict_oid = RelationGetRelid(orders);
		orders_verdict = judge_insert_triggers(orders);
	}
	return orders_verdict == VERDICT_KEY_ONLY;
}

/*
 * Lock the campaign's row, if it is on sale and no other transaction holds
 * it (a purchase never waits for an application's or a DBA's open
 * transaction), and count qty more in its "sold".  True if counted.
 */
static bool
count_sold(int64 campaign_id, int32 qty)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(campaign_id), Int32GetDatum(qty)};
	int			rc;

	if (count_plan == NULL)
		count_plan = store_prepare(
								   "WITH locked AS ("
								   "  SELECT id FROM seckill.campaigns"
								   "  WHERE id = $1 AND state = 'preheated'"
								   "  FOR NO KEY UPDATE SKIP LOCKED"
								   ") "
								   "UPDATE seckill.campaigns c SET sold = c.sold + $2"
								   "  FROM locked WHERE c.id = locked.id",
								   2, types);
	rc = SPI_execute_plan(count_plan, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE)
		elog(ERROR, "counting a round's orders failed: %s", SPI_result_code_string(rc));
	return SPI_processed == 1;
}

/* Is the campaign on sale, as the transaction's snapshot sees it? */
static bool
on_sale(int64 campaign_id)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(campaign_id)};
	int			rc;

	if (on_sale_plan == NULL)
		on_sale_plan = store_prepare("SELECT FROM seckill.campaigns WHERE id = $1 AND state = 'preheated'",
									 1, types);
	rc = SPI_execute_plan(on_sale_plan, values, NULL, true, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading a campaign failed: %s", SPI_result_code_string(rc));
	return SPI_processed == 1;
}

/* Insert orders[which[0..n-1]], all of them or none (an error). */
static void
insert_rows(const SkOrder *orders, const int *which, int n)
{
	Oid			types[4] = {INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID};
	Datum		values[4];
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *campaigns = palloc(sizeof(Datum) * n);
	Datum	   *users = palloc(sizeof(Datum) * n);
	Datum	   *qtys = palloc(sizeof(Datum) * n);
	Relation	rel;
	int			role = SessionReplicationRole;
	volatile int rc = 0;

	if (insert_plan == NULL)
		insert_plan = store_prepare(
									"INSERT INTO seckill.orders (id, campaign_id, user_id, qty) "
									"SELECT * FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
									"                         pg_catalog.unnest($3), pg_catalog.unnest($4))",
									4, types);
	for (int i = 0; i < n; i++)
	{
		const SkOrder *o = &orders[which[i]];

		ids[i] = Int64GetDatum(o->id);
		campaigns[i] = Int64GetDatum(o->campaign_id);
		users[i] = CStringGetTextDatum(o->user_id);
		qtys[i] = Int32GetDatum(o->qty);
	}
	values[0] = PointerGetDatum(construct_array(ids, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(construct_array(campaigns, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(users, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(qtys, n, INT4OID, 4, true, TYPALIGN_INT));

	/* locked first: a trigger created since the verdict is seen now */
	rel = table_openrv(makeRangeVar("seckill", "orders", -1), RowExclusiveLock);
	if (key_check_only(rel))
		SessionReplicationRole = SESSION_REPLICATION_ROLE_REPLICA;
	PG_TRY();
	{
		rc = SPI_execute_plan(insert_plan, values, NULL, false, 0);
	}
	PG_FINALLY();
	{
		SessionReplicationRole = role;
	}
	PG_END_TRY();
	table_close(rel, NoLock);
	if (rc != SPI_OK_INSERT || SPI_processed != n)
		elog(ERROR, "inserting a round's orders failed: %s", SPI_result_code_string(rc));
}

/*
 * Insert the orders of orders[0..n-1] whose campaign is still on sale, and
 * count them in the campaigns' "sold".  Marks the inserted ones SK_OK, and
 * SK_BUSY those whose campaign's row another transaction has locked.
 */
static void
insert_orders(SkOrder *orders, int n)
{
	int		   *insert = palloc(sizeof(int) * n);
	int			ninsert = 0;

	/* each campaign of the round once, in the order of its first order */
	for (int i = 0; i < n; i++)
	{
		int64		campaign_id = orders[i].campaign_id;
		bool		seen = false;
		int32		qty = 0;
		bool		counted,
					busy;

		for (int j = 0; j < i && !seen; j++)
			seen = orders[j].campaign_id == campaign_id;
		if (seen)
			continue;
		for (int j = i; j < n; j++)
			if (orders[j].campaign_id == campaign_id)
				qty += orders[j].qty;
		counted = count_sold(campaign_id, qty);
		busy = !counted && on_sale(campaign_id);
		for (int j = i; j < n; j++)
		{
			if (orders[j].campaign_id != campaign_id)
				continue;
			if (counted)
				insert[ninsert++] = j;
			else if (busy)
			{
				orders[j].outcome = SK_BUSY;
				orders[j].reason = "the campaign's row was locked by another transaction";
			}
		}
	}
	if (ninsert > 0)
		insert_rows(orders, insert, ninsert);
	for (int i = 0; i < ninsert; i++)
		orders[insert[i]].outcome = SK_OK;
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

