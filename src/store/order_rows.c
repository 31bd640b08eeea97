/*-------------------------------------------------------------------------
 *
 * order_rows.c
 *		Writing a round's rows into seckill.orders as COPY does: each tuple
 *		formed in C with the table's defaults for the other columns, its
 *		NOT NULLs and CHECK constraints checked, the tuples inserted by one
 *		table_multi_insert, then each one's index entries.  No statement is
 *		planned, started or ended per round.
 *
 * The table's shape (its defaults and CHECK expressions, planned) is read
 * from the catalogs once and kept until its relcache entry is invalidated,
 * as ALTER TABLE, CREATE INDEX and CREATE TRIGGER do: a round builds only
 * their execution state.  The table is locked before its shape is looked
 * at, so that DDL committed meanwhile is seen, and none commits while the
 * round writes.
 *
 * The foreign key of seckill.orders to seckill.campaigns would re-prove,
 * row by row, what the round holds already: the campaign's row, locked and
 * updated by the same transaction until it commits, so that a campaign
 * deleted or closed meanwhile gets no order.  So while that key's check is
 * the only trigger an INSERT into the table fires, the rows are written
 * directly, and no trigger fires.  Any other trigger on INSERT (a DBA's
 * audit, another foreign key), a partitioned table or a stored generated
 * column makes the round run an INSERT statement instead, which fires
 * every trigger (but the key's, while it is the only one: see
 * SessionReplicationRole).
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "store/sql.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* What the rows of a round need to know of seckill.orders. */
typedef struct OrdersShape
{
	Oid			relid;
	bool		key_only;		/* only the campaign key's check fires on INSERT */
	bool		direct;			/* and the rows may be written directly */
	AttrNumber	id,
				campaign_id,
				user_id,
				qty;
	int			ndefaults;		/* the other columns' defaults, planned */
	AttrNumber *default_att;
	Expr	  **default_expr;
	int			ncheck;			/* the CHECK constraints, planned, in the */
	Expr	  **check_expr;		/* relcache's order (ExecRelCheck's) */
} OrdersShape;

static MemoryContext shape_cxt = NULL;
static OrdersShape *shape = NULL;
static bool shape_valid = false;

/*
 * Forget the shape when the table's relcache entry goes.  Only marked here:
 * it is rebuilt by the next round, never while one uses it.
 */
static void
forget_shape(Datum arg, Oid relid)
{
	if (shape != NULL && (!OidIsValid(relid) || relid == shape->relid))
		shape_valid = false;
}

/* Is constraint conoid a key of the table on its column campaign_id alone? */
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

/* Does an INSERT into orders fire nothing but the campaign key's check? */
static bool
only_key_fires(Relation orders, AttrNumber campaign_id)
{
	TriggerDesc *triggers = orders->trigdesc;
	Oid			campaigns = get_relname_relid("campaigns", RelationGetNamespace(orders));

	for (int i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		Trigger    *t = &triggers->triggers[i];

		if (!TRIGGER_FOR_INSERT(t->tgtype))
			continue;
		if (!t->tgisinternal || t->tgfoid != F_RI_FKEY_CHECK_INS ||
			t->tgconstrrelid != campaigns || !is_campaign_key(t->tgconstraint, campaign_id))
			return false;
	}
	return true;
}

/* Column name of orders, if it has the type given. */
static AttrNumber
column(Relation orders, const char *name, Oid type)
{
	AttrNumber	att = get_attnum(RelationGetRelid(orders), name);

	if (att == InvalidAttrNumber ||
		TupleDescAttr(RelationGetDescr(orders), att - 1)->atttypid != type)
		return InvalidAttrNumber;
	return att;
}

/* Read the shape of orders (locked) from the catalogs, in shape_cxt. */
static void
read_shape(Relation orders)
{
	TupleDesc	desc = RelationGetDescr(orders);
	TupleConstr *constr = desc->constr;
	MemoryContext old;

	if (shape_cxt == NULL)
	{
		shape_cxt = AllocSetContextCreate(CacheMemoryContext, "seckill orders shape",
										  ALLOCSET_SMALL_SIZES);
		CacheRegisterRelcacheCallback(forget_shape, (Datum) 0);
	}
	MemoryContextReset(shape_cxt);
	shape = NULL;
	old = MemoryContextSwitchTo(shape_cxt);
	shape = palloc0(sizeof(OrdersShape));
	shape->relid = RelationGetRelid(orders);
	shape->id = column(orders, "id", INT8OID);
	shape->campaign_id = column(orders, "campaign_id", INT8OID);
	shape->user_id = column(orders, "user_id", TEXTOID);
	shape->qty = column(orders, "qty", INT4OID);
	shape->key_only = only_key_fires(orders, get_attnum(shape->relid, "campaign_id"));
	shape->direct = shape->key_only &&
		orders->rd_rel->relkind == RELKIND_RELATION &&
		!(constr != NULL && constr->has_generated_stored) &&
		shape->id != InvalidAttrNumber && shape->campaign_id != InvalidAttrNumber &&
		shape->user_id != InvalidAttrNumber && shape->qty != InvalidAttrNumber &&
		(constr == NULL || constr->num_check == orders->rd_rel->relchecks);
	if (shape->direct)
	{
		shape->default_att = palloc(sizeof(AttrNumber) * desc->natts);
		shape->default_expr = palloc(sizeof(Expr *) * desc->natts);
		for (AttrNumber att = 1; att <= desc->natts; att++)
		{
			Node	   *expr;

			if (TupleDescAttr(desc, att - 1)->attisdropped || att == shape->id ||
				att == shape->campaign_id || att == shape->user_id || att == shape->qty)
				continue;
			expr = build_column_default(orders, att);
			if (expr == NULL)
				continue;
			shape->default_att[shape->ndefaults] = att;
			shape->default_expr[shape->ndefaults++] = expression_planner((Expr *) expr);
		}
		shape->ncheck = constr != NULL ? constr->num_check : 0;
		shape->check_expr = palloc(sizeof(Expr *) * Max(shape->ncheck, 1));
		for (int i = 0; i < shape->ncheck; i++)
			shape->check_expr[i] = expression_planner(stringToNode(constr->check[i].ccbin));
	}
	MemoryContextSwitchTo(old);
	shape_valid = true;
}

/* The INSERT statement, for a table the rows may not be written to directly. */
static void
insert_by_statement(const SkOrder *orders, const int *which, int n)
{
	static SPIPlanPtr insert_plan = NULL;
	Oid			types[4] = {INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID};
	Datum		values[4];
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *campaigns = palloc(sizeof(Datum) * n);
	Datum	   *users = palloc(sizeof(Datum) * n);
	Datum	   *qtys = palloc(sizeof(Datum) * n);
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

	if (shape->key_only)
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
	if (rc != SPI_OK_INSERT || SPI_processed != n)
		elog(ERROR, "inserting a round's orders failed: %s", SPI_result_code_string(rc));
}

/* The rows, written directly into orders (locked), as COPY writes them. */
static void
insert_directly(Relation orders, const SkOrder *rows, const int *which, int n)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext old = MemoryContextSwitchTo(estate->es_query_cxt);
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	TupleTableSlot **slots = palloc(sizeof(TupleTableSlot *) * n);
	ExprState **defaults = palloc(sizeof(ExprState *) * Max(shape->ndefaults, 1));
	ExprContext *econtext = GetPerTupleExprContext(estate);
	TupleDesc	desc = RelationGetDescr(orders);
	CommandId	cid = GetCurrentCommandId(true);

	InitResultRelInfo(rri, orders, 0, NULL, 0);
	rri->ri_ConstraintExprs = palloc(sizeof(ExprState *) * Max(shape->ncheck, 1));
	for (int i = 0; i < shape->ncheck; i++)
		rri->ri_ConstraintExprs[i] = ExecInitExpr(shape->check_expr[i], NULL);
	for (int i = 0; i < shape->ndefaults; i++)
		defaults[i] = ExecInitExpr(shape->default_expr[i], NULL);
	ExecOpenIndices(rri, false);

	for (int i = 0; i < n; i++)
	{
		const SkOrder *o = &rows[which[i]];
		TupleTableSlot *slot = table_slot_create(orders, &estate->es_tupleTable);

		ExecClearTuple(slot);
		memset(slot->tts_isnull, true, sizeof(bool) * desc->natts);
		for (int d = 0; d < shape->ndefaults; d++)
		{
			AttrNumber	att = shape->default_att[d];

			slot->tts_values[att - 1] = ExecEvalExpr(defaults[d], econtext,
													 &slot->tts_isnull[att - 1]);
		}
		slot->tts_values[shape->id - 1] = Int64GetDatum(o->id);
		slot->tts_values[shape->campaign_id - 1] = Int64GetDatum(o->campaign_id);
		slot->tts_values[shape->user_id - 1] = CStringGetTextDatum(o->user_id);
		slot->tts_values[shape->qty - 1] = Int32GetDatum(o->qty);
		slot->tts_isnull[shape->id - 1] = slot->tts_isnull[shape->campaign_id - 1] =
			slot->tts_isnull[shape->user_id - 1] = slot->tts_isnull[shape->qty - 1] = false;
		ExecStoreVirtualTuple(slot);
		if (desc->constr != NULL)
			ExecConstraints(rri, slot, estate);
		slots[i] = slot;
	}
	table_multi_insert(orders, slots, n, cid, 0, NULL);
	for (int i = 0; i < n; i++)
		if (rri->ri_NumIndices > 0)
			(void) ExecInsertIndexTuples(rri, slots[i], estate, false, false, NULL, NIL);

	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	MemoryContextSwitchTo(old);
	FreeExecutorState(estate);
	/* the rest of the transaction sees them */
	CommandCounterIncrement();
}

/*
 * Insert rows[which[0..n-1]] into seckill.orders, all of them or none (an
 * error): a unique index or a CHECK refusing one raises its error.
 */
void
store_insert_order_rows(const SkOrder *rows, const int *which, int n)
{
	/* locked first: a trigger created, or a column added, since is seen now */
	Relation	orders = table_openrv(makeRangeVar("seckill", "orders", -1), RowExclusiveLock);

	if (!shape_valid || shape == NULL || shape->relid != RelationGetRelid(orders))
		read_shape(orders);
	if (shape->direct)
		insert_directly(orders, rows, which, n);
	else
		insert_by_statement(rows, which, n);
	table_close(orders, NoLock);
}
