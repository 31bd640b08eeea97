/*-------------------------------------------------------------------------
 *
 * version_guard.c
 *		No write to seckill's tables while the extension's SQL and the
 *		library disagree on the version (the library updated, ALTER
 *		EXTENSION seckill UPDATE not run yet).
 *
 * The C functions check the version themselves (seckill_check_database);
 * the SQL and PL/pgSQL functions of an older schema cannot, and would write
 * rows the library then misreads.  So every statement that writes a table
 * of schema seckill is checked when its executor starts, in the backends,
 * outside the extension's own install and update scripts.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include "catalog/namespace.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "parser/parsetree.h"
#include "shared/call.h"
#include "shared/shmem.h"
#include "utils/lsyscache.h"

static ExecutorStart_hook_type prev_executor_start = NULL;

/* Does the statement write a table of schema seckill? */
static bool
writes_seckill(const PlannedStmt *stmt)
{
	Oid			schema = InvalidOid;
	ListCell   *lc;

	foreach(lc, stmt->resultRelations)
	{
		RangeTblEntry *rte = rt_fetch(lfirst_int(lc), stmt->rtable);

		if (!OidIsValid(schema))
			schema = get_namespace_oid("seckill", true);
		if (!OidIsValid(schema))
			return false;
		if (get_rel_namespace(rte->relid) == schema)
			return true;
	}
	return false;
}

static void
guarded_executor_start(QueryDesc *query, int eflags)
{
	if (seckill_shared != NULL && MyBackendType == B_BACKEND && !creating_extension &&
		!(eflags & EXEC_FLAG_EXPLAIN_ONLY) &&
		query->plannedstmt->resultRelations != NIL && writes_seckill(query->plannedstmt))
		seckill_check_version();
	if (prev_executor_start)
		prev_executor_start(query, eflags);
	else
		standard_ExecutorStart(query, eflags);
}

void
seckill_version_guard_register(void)
{
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = guarded_executor_start;
}
