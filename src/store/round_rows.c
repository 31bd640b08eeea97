/*-------------------------------------------------------------------------
 *
 * round_rows.c
 *		A round's rows, written without a statement, as COPY writes them:
 *		each campaign's row locked and its "sold" counted, then the orders'
 *		tuples formed in C with the table's defaults for the other columns,
 *		their NOT NULLs and CHECK constraints checked, inserted by one
 *		table_multi_insert, then each one's index entries.  No statement is
 *		planned, started or ended per round.
 *
 * A table's shape (its defaults and CHECK expressions, planned) is read
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
 * SessionReplicationRole).  Likewise a campaign's row is counted by an
 * UPDATE statement when an UPDATE of seckill.campaigns would fire anything
 * but the checks of the keys that reference it, which an unchanged key
 * skips.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/int.h"
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
#include "utils/snapmgr.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* What the rows of a round need to know of a table of seckill's. */
typedef struct Shape
{
	Oid			relid;
	bool		valid;			/* until its relcache entry is invalidated */
	MemoryContext cxt;			/* what follows */
	bool		key_only;		/* orders: only the campaign key's check fires on INSERT */
	bool		direct;			/* rows may be written without a statement */
	AttrNumber	col[4];			/* the columns seckill writes, by name below */
	int			ndefaults;		/* orders: the other columns' defaults, planned */
	AttrNumber *default_att;
	Expr	  **default_expr;
	int			ncheck;			/* the CHECK constraints, planned, in the */
	Expr	  **check_expr;		/* relcache's order (ExecRelCheck's) */
} Shape;

/* orders' columns */
#define O_ID 0
#define O_CAMPAIGN 1
#define O_USER 2
#define O_QTY 3
/* campaigns' columns */
#define C_ID 0
#define C_STATE 1
#define C_SOLD 2

static Shape orders_shape;
static Shape campaigns_shape;

/*
 * Forget a shape when its table's relcache entry goes.  Only marked here:
 * it is read again by the next round, never while one uses it.
 */
static void
forget_shape(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == orders_shape.relid)
		orders_shape.valid = false;
	if (!OidIsValid(relid) || relid == campaigns_shape.relid)
		campaigns_shape.valid = false;
}

/* A function or a type changed: a default or CHECK may have been planned with it. */
static void
forget_shapes(Datum arg, int cacheid, uint32 hashvalue)
{
	orders_shape.valid = false;
	campaigns_shape.valid = false;
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

/*
 * Does an UPDATE of campaigns that changes no key fire nothing?  The
 * checks of the keys that reference it are skipped when the key is
 * unchanged; any other trigger fires.
 */
static bool
no_update_fires(Relation campaigns)
{
	TriggerDesc *triggers = campaigns->trigdesc;

	for (int i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		Trigger    *t = &triggers->triggers[i];

		if (!TRIGGER_FOR_UPDATE(t->tgtype))
			continue;
		if (!t->tgisinternal ||
			(t->tgfoid != F_RI_FKEY_NOACTION_UPD && t->tgfoid != F_RI_FKEY_RESTRICT_UPD &&
			 t->tgfoid != F_RI_FKEY_CASCADE_UPD && t->tgfoid != F_RI_FKEY_SETNULL_UPD &&
			 t->tgfoid != F_RI_FKEY_SETDEFAULT_UPD))
			return false;
	}
	return true;
}

/* A column of the table, if it has the type given. */
static AttrNumber
column(Relation rel, const char *name, Oid type)
{
	AttrNumber	att = get_attnum(RelationGetRelid(rel), name);

	if (att == InvalidAttrNumber ||
		TupleDescAttr(RelationGetDescr(rel), att - 1)->atttypid != type)
		return InvalidAttrNumber;
	return att;
}

/* Does the shape know every column seckill writes? */
static bool
has_columns(const Shape *shape, int ncols)
{
	for (int i = 0; i < ncols; i++)
		if (shape->col[i] == InvalidAttrNumber)
			return false;
	return true;
}

/*
 * A plain table: no partition, no rule, its CHECK constraints all known, no
 * stored column generated.
 */
static bool
plain_table(Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	return rel->rd_rel->relkind == RELKIND_RELATION && !rel->rd_rel->relispartition &&
		rel->rd_rules == NULL &&
		!(constr != NULL && constr->has_generated_stored) &&
		(constr == NULL ? rel->rd_rel->relchecks == 0 :
		 constr->num_check == rel->rd_rel->relchecks);
}

/* The table's CHECK expressions, planned, into the shape (its context current). */
static void
read_checks(Shape *shape, Relation rel)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	shape->ncheck = constr != NULL ? constr->num_check : 0;
	shape->check_expr = palloc(sizeof(Expr *) * Max(shape->ncheck, 1));
	for (int i = 0; i < shape->ncheck; i++)
		shape->check_expr[i] = expression_planner(stringToNode(constr->check[i].ccbin));
}

/*
 * The columns' defaults but those seckill writes, planned, into the shape.
 * False when a statement must write the rows: a written column is an
 * identity, or a column left to its default has a domain type and no
 * default (the statement checks the domain on its NULL).
 */
static bool
read_defaults(Shape *shape, Relation rel, int ncols)
{
	TupleDesc	desc = RelationGetDescr(rel);

	shape->default_att = palloc(sizeof(AttrNumber) * desc->natts);
	shape->default_expr = palloc(sizeof(Expr *) * desc->natts);
	for (AttrNumber att = 1; att <= desc->natts; att++)
	{
		Form_pg_attribute attr = TupleDescAttr(desc, att - 1);
		bool		written = false;
		Node	   *expr;

		for (int i = 0; i < ncols; i++)
			written |= shape->col[i] == att;
		if (written && attr->attidentity)
			return false;
		if (written || attr->attisdropped)
			continue;
		expr = build_column_default(rel, att);
		if (expr == NULL && get_typtype(attr->atttypid) == TYPTYPE_DOMAIN)
			return false;
		if (expr == NULL)
			continue;
		shape->default_att[shape->ndefaults] = att;
		shape->default_expr[shape->ndefaults++] = expression_planner((Expr *) expr);
	}
	return true;
}

/* The shape of seckill.orders or seckill.campaigns (rel, locked), read if need be. */
static Shape *
shape_of(Shape *shape, Relation rel)
{
	MemoryContext old;

	if (shape->valid && shape->relid == RelationGetRelid(rel))
		return shape;
	if (shape->cxt == NULL)
	{
		static bool callback_registered = false;

		shape->cxt = AllocSetContextCreate(CacheMemoryContext, "seckill table shape",
										   ALLOCSET_SMALL_SIZES);
		if (!callback_registered)
		{
			CacheRegisterRelcacheCallback(forget_shape, (Datum) 0);
			CacheRegisterSyscacheCallback(PROCOID, forget_shapes, (Datum) 0);
			CacheRegisterSyscacheCallback(TYPEOID, forget_shapes, (Datum) 0);
		}
		callback_registered = true;
	}
	shape->valid = false;		/* until read whole */
	MemoryContextReset(shape->cxt);
	old = MemoryContextSwitchTo(shape->cxt);
	shape->relid = RelationGetRelid(rel);
	shape->ndefaults = shape->ncheck = 0;
	if (shape == &orders_shape)
	{
		shape->col[O_ID] = column(rel, "id", INT8OID);
		shape->col[O_CAMPAIGN] = column(rel, "campaign_id", INT8OID);
		shape->col[O_USER] = column(rel, "user_id", TEXTOID);
		shape->col[O_QTY] = column(rel, "qty", INT4OID);
		/* the statement fires no trigger, nor a partition's or a rule's */
		shape->key_only = only_key_fires(rel, get_attnum(shape->relid, "campaign_id")) &&
			rel->rd_rel->relkind == RELKIND_RELATION && rel->rd_rules == NULL;
		shape->direct = shape->key_only && plain_table(rel) && has_columns(shape, 4);
		if (shape->direct)
			shape->direct = read_defaults(shape, rel, 4);
	}
	else
	{
		Bitmapset  *keys = RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_KEY);
		Bitmapset  *pkey = RelationGetIndexAttrBitmap(rel, INDEX_ATTR_BITMAP_PRIMARY_KEY);

		shape->col[C_ID] = column(rel, "id", INT8OID);
		shape->col[C_STATE] = column(rel, "state", TEXTOID);
		shape->col[C_SOLD] = column(rel, "sold", INT4OID);
		/*
		 * The row is found by its primary key, id; no key a foreign key could
		 * reference holds sold, so none changes.
		 */
		shape->direct = no_update_fires(rel) && plain_table(rel) && has_columns(shape, 3) &&
			!bms_is_member(shape->col[C_SOLD] - FirstLowInvalidHeapAttributeNumber, keys) &&
			bms_num_members(pkey) == 1 &&
			bms_is_member(shape->col[C_ID] - FirstLowInvalidHeapAttributeNumber, pkey);
	}
	if (shape->direct)
		read_checks(shape, rel);
	MemoryContextSwitchTo(old);
	shape->valid = true;
	return shape;
}

/* A result relation of the table, its CHECKs' execution state built from its shape. */
static ResultRelInfo *
result_rel(Relation rel, const Shape *shape)
{
	ResultRelInfo *rri = makeNode(ResultRelInfo);

	InitResultRelInfo(rri, rel, 0, NULL, 0);
	rri->ri_ConstraintExprs = palloc(sizeof(ExprState *) * Max(shape->ncheck, 1));
	for (int i = 0; i < shape->ncheck; i++)
		rri->ri_ConstraintExprs[i] = ExecInitExpr(shape->check_expr[i], NULL);
	return rri;
}

/* The UPDATE statement, for a table whose rows may not be updated directly. */
static bool
count_by_statement(int64 campaign_id, int32 qty)
{
	static SPIPlanPtr count_plan = NULL;
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

/*
 * The same, directly: the row found by its primary key in a new snapshot,
 * locked (skipped when another transaction holds it, its newest version
 * when one updated it meanwhile), its state checked again, then updated
 * with its CHECKs checked, and its index entries added when the update
 * could not stay on its page (HOT).
 */
static bool
count_directly(Relation campaigns, const Shape *shape, int64 campaign_id, int32 qty)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext old = MemoryContextSwitchTo(estate->es_query_cxt);
	Snapshot	snapshot;
	TupleTableSlot *row = table_slot_create(campaigns, &estate->es_tupleTable);
	TupleTableSlot *updated = table_slot_create(campaigns, &estate->es_tupleTable);
	TupleDesc	desc = RelationGetDescr(campaigns);
	Relation	pkey = index_open(RelationGetPrimaryKeyIndex(campaigns), AccessShareLock);
	ScanKeyData key;
	IndexScanDesc scan;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	bool		update_indexes;
	bool		found,
				isnull;
	int32		sold;
	Datum		state;
	ItemPointerData tid;
	ResultRelInfo *rri;

	/* a new snapshot, as a statement would take */
	PushActiveSnapshot(GetTransactionSnapshot());
	snapshot = GetActiveSnapshot();
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(campaign_id));
	scan = index_beginscan(campaigns, pkey, snapshot, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, row);
	index_endscan(scan);
	index_close(pkey, NoLock);
	if (found)
		found = table_tuple_lock(campaigns, &row->tts_tid, snapshot, row,
								 GetCurrentCommandId(true), LockTupleNoKeyExclusive,
								 LockWaitSkip, TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
								 &tmfd) == TM_Ok;
	if (found)
	{
		state = slot_getattr(row, shape->col[C_STATE], &isnull);
		found = !isnull && strcmp(TextDatumGetCString(state), "preheated") == 0 &&
			DatumGetInt64(slot_getattr(row, shape->col[C_ID], &isnull)) == campaign_id;
	}
	if (found)
	{
		slot_getallattrs(row);
		ExecClearTuple(updated);
		memcpy(updated->tts_values, row->tts_values, sizeof(Datum) * desc->natts);
		memcpy(updated->tts_isnull, row->tts_isnull, sizeof(bool) * desc->natts);
		if (updated->tts_isnull[shape->col[C_SOLD] - 1] ||
			pg_add_s32_overflow(DatumGetInt32(updated->tts_values[shape->col[C_SOLD] - 1]), qty, &sold))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("integer out of range")));
		updated->tts_values[shape->col[C_SOLD] - 1] = Int32GetDatum(sold);
		ExecStoreVirtualTuple(updated);

		rri = result_rel(campaigns, shape);
		CheckCmdReplicaIdentity(campaigns, CMD_UPDATE);
		ExecConstraints(rri, updated, estate);
		tid = row->tts_tid;
		if (table_tuple_update(campaigns, &tid, updated, GetCurrentCommandId(true), snapshot,
							   InvalidSnapshot, true, &tmfd, &lockmode, &update_indexes) != TM_Ok)
			elog(ERROR, "could not update the row of campaign " INT64_FORMAT, campaign_id);
		if (update_indexes)
		{
			ExecOpenIndices(rri, false);
			(void) ExecInsertIndexTuples(rri, updated, estate, true, false, NULL, NIL);
			ExecCloseIndices(rri);
		}
	}
	ExecResetTupleTable(estate->es_tupleTable, false);
	PopActiveSnapshot();
	MemoryContextSwitchTo(old);
	FreeExecutorState(estate);
	/* the rest of the transaction sees it */
	CommandCounterIncrement();
	return found;
}

/*
 * Lock the campaign's row, if it is on sale and no other transaction holds
 * it (a purchase never waits for an application's or a DBA's open
 * transaction), and count qty more in its "sold".  True if counted.
 */
bool
store_count_sold(int64 campaign_id, int32 qty)
{
	Relation	campaigns = table_openrv(makeRangeVar("seckill", "campaigns", -1), RowExclusiveLock);
	Shape	   *shape = shape_of(&campaigns_shape, campaigns);
	bool		counted;

	counted = shape->direct ? count_directly(campaigns, shape, campaign_id, qty) :
		count_by_statement(campaign_id, qty);
	table_close(campaigns, NoLock);
	return counted;
}

/* The INSERT statement, for a table the rows may not be written to directly. */
static void
insert_by_statement(const Shape *shape, const SkOrder *orders, const int *which, int n)
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
insert_directly(Relation orders, const Shape *shape, const SkOrder *rows, const int *which, int n)
{
	EState	   *estate = CreateExecutorState();
	MemoryContext old = MemoryContextSwitchTo(estate->es_query_cxt);
	ResultRelInfo *rri = result_rel(orders, shape);
	TupleTableSlot **slots = palloc(sizeof(TupleTableSlot *) * n);
	ExprState **defaults = palloc(sizeof(ExprState *) * Max(shape->ndefaults, 1));
	ExprContext *econtext = GetPerTupleExprContext(estate);
	TupleDesc	desc = RelationGetDescr(orders);
	CommandId	cid = GetCurrentCommandId(true);

	for (int i = 0; i < shape->ndefaults; i++)
		defaults[i] = ExecInitExpr(shape->default_expr[i], NULL);
	ExecOpenIndices(rri, false);
	/* a new snapshot, as a statement would take, for what the defaults and CHECKs call */
	PushActiveSnapshot(GetTransactionSnapshot());

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
		slot->tts_values[shape->col[O_ID] - 1] = Int64GetDatum(o->id);
		slot->tts_values[shape->col[O_CAMPAIGN] - 1] = Int64GetDatum(o->campaign_id);
		slot->tts_values[shape->col[O_USER] - 1] = CStringGetTextDatum(o->user_id);
		slot->tts_values[shape->col[O_QTY] - 1] = Int32GetDatum(o->qty);
		for (int c = 0; c < 4; c++)
			slot->tts_isnull[shape->col[c] - 1] = false;
		ExecStoreVirtualTuple(slot);
		if (desc->constr != NULL)
			ExecConstraints(rri, slot, estate);
		slots[i] = slot;
	}
	table_multi_insert(orders, slots, n, cid, 0, NULL);
	for (int i = 0; i < n; i++)
		if (rri->ri_NumIndices > 0)
			(void) ExecInsertIndexTuples(rri, slots[i], estate, false, false, NULL, NIL);

	PopActiveSnapshot();
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
	Shape	   *shape = shape_of(&orders_shape, orders);

	if (shape->direct)
		insert_directly(orders, shape, rows, which, n);
	else
		insert_by_statement(shape, rows, which, n);
	table_close(orders, NoLock);
}
