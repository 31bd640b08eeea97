/*-------------------------------------------------------------------------
 *
 * group_commit.c
 *		The group commit of a round's orders: each campaign's row locked and
 *		its "sold" counted, then the orders written in one pass
 *		(round_rows.c), in the worker's transaction.
 *
 * When that fails (a stale Redis let a duplicate or an oversell through,
 * and a constraint caught it), each order is retried alone in a
 * subtransaction, so one bad row does not sink the others; the refused ones
 * are logged as compensations in the same transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "store/sql.h"

static SPIPlanPtr on_sale_plan = NULL;

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
		counted = store_count_sold(campaign_id, qty);
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
		store_insert_order_rows(orders, insert, ninsert);
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

