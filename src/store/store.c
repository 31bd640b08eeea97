/*-------------------------------------------------------------------------
 *
 * store.c
 *		The worker's transactions, and how every file of store/ runs its
 *		SQL: through SPI, with saved plans, under an empty search_path.
 *
 * store/ holds every statement seckill runs against its tables and every
 * catalog look-up, the worker's and the backends': campaigns.c,
 * orders.c (with the compensation log), group_commit.c (a round's orders),
 * round_rows.c (their rows, written without a statement) and fences.c.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "store/sql.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

/*
 * The context current at store_begin: results that must outlive SPI_finish
 * are allocated there, and it is current again after store_commit.
 */
MemoryContext store_caller_cxt = NULL;


void
store_begin(const char *activity)
{
	store_caller_cxt = CurrentMemoryContext;
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
	MemoryContextSwitchTo(store_caller_cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
}

/* After an error: roll back whatever transaction is open. */
void
store_abort(void)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	AbortOutOfAnyTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
}


SPIPlanPtr
store_prepare(const char *sql, int nargs, Oid *types)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

	if (plan == NULL)
		elog(ERROR, "SPI_prepare failed for \"%s\": %s", sql, SPI_result_code_string(SPI_result));
	SPI_keepplan(plan);
	return plan;
}

void
store_run(const char *sql, int nargs, Oid *types, Datum *values, int expected)
{
	int			rc = SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);

	if (rc != expected)
		elog(ERROR, "SPI failed for \"%s\": %s", sql, SPI_result_code_string(rc));
}

/*
 * Statements run once per slice of long work, where parsing and planning
 * would cost as much as the work: planned once, by their text.
 */
#define KEPT_PLANS 16
static struct
{
	char	   *sql;
	SPIPlanPtr	plan;
}			kept[KEPT_PLANS];

void
store_run_kept(const char *sql, int nargs, Oid *types, Datum *values, int expected)
{
	int			i;
	int			rc;

	for (i = 0; i < KEPT_PLANS && kept[i].sql != NULL; i++)
		if (strcmp(kept[i].sql, sql) == 0)
			break;
	if (i == KEPT_PLANS)
	{
		store_run(sql, nargs, types, values, expected);
		return;
	}
	if (kept[i].sql == NULL)
	{
		kept[i].plan = store_prepare(sql, nargs, types);
		kept[i].sql = MemoryContextStrdup(TopMemoryContext, sql);
	}
	rc = SPI_execute_plan(kept[i].plan, values, NULL, false, 0);
	if (rc != expected)
		elog(ERROR, "SPI failed for \"%s\": %s", sql, SPI_result_code_string(rc));
}


/*
 * A setting for the statements that follow, at session level, until
 * store_setting_restore(the level returned); an error unwinds it.
 */
int
store_setting_save(const char *name, const char *value)
{
	int			level = NewGUCNestLevel();

	(void) set_config_option(name, value, PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

void
store_setting_restore(int level)
{
	AtEOXact_GUC(true, level);
}

/*
 * SPI in a backend under an empty search_path, like the worker's: a
 * superuser who calls seckill runs nothing that the owner of a schema on
 * the caller's search_path planted (an operator, a function).  Returns the
 * GUC nest level for store_backend_spi_end; an error unwinds both.
 */
int
store_backend_spi_begin(void)
{
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	return store_setting_save("search_path", "");
}

void
store_backend_spi_end(int level)
{
	store_setting_restore(level);
	SPI_finish();
}
