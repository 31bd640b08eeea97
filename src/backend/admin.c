/*-------------------------------------------------------------------------
 *
 * admin.c
 *		The DBA's functions: preheat, close, and the worker's view of a
 *		campaign for seckill_status and seckill_reconcile.  The work itself
 *		happens in the worker (worker/campaign_admin.c), which owns Redis.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include "access/htup_details.h"
#include "access/xlog.h"
#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_preheat);
PG_FUNCTION_INFO_V1(seckill_close);
PG_FUNCTION_INFO_V1(seckill_redis_state);
PG_FUNCTION_INFO_V1(seckill_reconcile_campaign);
PG_FUNCTION_INFO_V1(seckill_reset_shared_state);
PG_FUNCTION_INFO_V1(seckill_worker_counters);
PG_FUNCTION_INFO_V1(seckill_cancel);
PG_FUNCTION_INFO_V1(seckill_restock);
PG_FUNCTION_INFO_V1(seckill_release_campaign);
PG_FUNCTION_INFO_V1(seckill_apply_limits);
PG_FUNCTION_INFO_V1(seckill_sql_changed);
PG_FUNCTION_INFO_V1(seckill_epoch_claim);

/* seckill_preheat(goods text) RETURNS int: the stock now in Redis */
Datum
seckill_preheat(PG_FUNCTION_ARGS)
{
	char	   *goods = seckill_id_arg(fcinfo, 0, "goods", SECKILL_MAX_GOODS_LEN);
	SeckillReply reply;

	reply = seckill_call_checked(SK_REQ_PREHEAT, seckill_open_campaign_id(goods), NULL, 0);
	PG_RETURN_INT32((int32) reply.values[0]);
}

/* seckill_close(goods text) RETURNS int: the quantity sold */
Datum
seckill_close(PG_FUNCTION_ARGS)
{
	char	   *goods = seckill_id_arg(fcinfo, 0, "goods", SECKILL_MAX_GOODS_LEN);
	SeckillReply reply;

	reply = seckill_call_checked(SK_REQ_CLOSE, seckill_open_campaign_id(goods), NULL, 0);
	PG_RETURN_INT32((int32) reply.values[0]);
}

/*
 * Build a row of the function's OUT columns from reply values; a negative
 * value (Redis had no such key) becomes NULL.
 */
static Datum
values_row(FunctionCallInfo fcinfo, const int64 *v, int n)
{
	TupleDesc	desc;
	Datum	   *values = palloc(sizeof(Datum) * n);
	bool	   *nulls = palloc0(sizeof(bool) * n);

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	for (int i = 0; i < n; i++)
	{
		switch (TupleDescAttr(desc, i)->atttypid)
		{
			case INT4OID:
				values[i] = Int32GetDatum((int32) v[i]);
				break;
			case BOOLOID:
				values[i] = BoolGetDatum(v[i] != 0);
				break;
			default:
				values[i] = Int64GetDatum(v[i]);
				break;
		}
		nulls[i] = v[i] < 0;
	}
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}

/* seckill.redis_state(campaign_id) RETURNS (redis_stock, redis_buyers, in_flight, sold_out_cached) */
Datum
seckill_redis_state(PG_FUNCTION_ARGS)
{
	SeckillReply reply = seckill_call_checked(SK_REQ_STATUS, PG_GETARG_INT64(0), NULL, 0);

	return values_row(fcinfo, reply.values, 4);
}

/* seckill.reconcile_campaign(campaign_id) RETURNS (...); see worker/campaign_admin.c */
Datum
seckill_reconcile_campaign(PG_FUNCTION_ARGS)
{
	SeckillReply reply = seckill_call_checked(SK_REQ_RECONCILE, PG_GETARG_INT64(0), NULL, 0);

	return values_row(fcinfo, reply.values, 7);
}

/*
 * seckill_epoch_claim() RETURNS bigint: this server is the primary; its
 * worker records its epoch in Redis again, also where Redis lost the one it
 * recorded (seckill.redis_epoch_lost = wait), and sells.  The timeline.
 */
Datum
seckill_epoch_claim(PG_FUNCTION_ARGS)
{
	SeckillReply reply;

	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("seckill_epoch_claim() cannot run on a standby"),
				 errhint("Run it on the primary.")));
	reply = seckill_call_checked(SK_REQ_EPOCH_CLAIM, 0, NULL, 0);
	PG_RETURN_INT64(reply.values[0]);
}

/*
 * seckill.reset_shared_state(): run by CREATE EXTENSION.  Empties the
 * campaign cache and tells the worker to drop its block of order ids, which
 * came from the sequence of a dropped installation.
 */
Datum
seckill_reset_shared_state(PG_FUNCTION_ARGS)
{
	/* an installation in a database the worker does not serve changes nothing */
	if (seckill_shared != NULL &&
		(!OidIsValid(seckill_shared->database_id) || MyDatabaseId == seckill_shared->database_id))
	{
		LWLockAcquire(seckill_campaign_cache->lock, LW_EXCLUSIVE);
		for (int i = 0; i < seckill_max_campaigns; i++)
		{
			seckill_campaigns[i].row.id = 0;
			seckill_stats[i].campaign_id = 0;
		}
		LWLockRelease(seckill_campaign_cache->lock);
		pg_atomic_fetch_add_u32(&seckill_shared->install_generation, 1);
	}
	PG_RETURN_VOID();
}

/*
 * seckill.worker_counters() RETURNS (rounds, purchases, redis_round_trips,
 * commits, compensations, sales_from_database): the worker's totals since the
 * server started, and whether it sells without Redis right now.
 */
Datum
seckill_worker_counters(PG_FUNCTION_ARGS)
{
	SeckillCounters *c;
	int64		v[6];

	seckill_check_database();
	c = &seckill_figures->counters;
	v[0] = pg_atomic_read_u64(&c->rounds);
	v[1] = pg_atomic_read_u64(&c->purchases);
	v[2] = pg_atomic_read_u64(&c->redis_round_trips);
	v[3] = pg_atomic_read_u64(&c->commits);
	v[4] = pg_atomic_read_u64(&c->compensations);
	v[5] = seckill_shared->sales_from_database;
	return values_row(fcinfo, v, 6);
}

/* seckill_cancel(order_id bigint) RETURNS text: 'cancelled' */
Datum
seckill_cancel(PG_FUNCTION_ARGS)
{
	SeckillRequest request = {.kind = SK_REQ_CANCEL};

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("order_id must not be null")));
	request.order_id = PG_GETARG_INT64(0);
	(void) seckill_request_checked(&request);
	PG_RETURN_TEXT_P(cstring_to_text("cancelled"));
}

/*
 * seckill.release_campaign(campaign_id) RETURNS (released, released_qty).
 * One request to the worker per batch: between them it serves the
 * purchases that came in, so a release of any size never stops a sale.
 */
Datum
seckill_release_campaign(PG_FUNCTION_ARGS)
{
	SeckillRequest request = {.kind = SK_REQ_RELEASE};
	int64		total[2] = {0, 0};
	SeckillReply reply;

	request.campaign_id = PG_GETARG_INT64(0);
	/* from the first order on: each batch starts after the last one's */
	request.after.created_at = DT_NOBEGIN;
	do
	{
		CHECK_FOR_INTERRUPTS();
		reply = seckill_request_checked(&request);
		total[0] += reply.values[0];
		total[1] += reply.values[1];
		request.after.created_at = reply.values[3];
		request.after.order_id = reply.values[4];
	} while (reply.values[2] != 0);
	if (total[0] > 0)
		ereport(LOG,
				(errmsg("seckill released " INT64_FORMAT " unpaid order(s) of campaign " INT64_FORMAT " (" INT64_FORMAT " item(s))",
						total[0], request.campaign_id, total[1])));
	return values_row(fcinfo, total, 2);
}

/* seckill_restock(goods text, delta int) RETURNS int: the new total_stock */
Datum
seckill_restock(PG_FUNCTION_ARGS)
{
	char	   *goods = seckill_id_arg(fcinfo, 0, "goods", SECKILL_MAX_GOODS_LEN);
	SeckillReply reply;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("delta must not be null")));
	reply = seckill_call_checked(SK_REQ_RESTOCK, seckill_open_campaign_id(goods), NULL,
								 PG_GETARG_INT32(1));
	PG_RETURN_INT32((int32) reply.values[0]);
}

/*
 * seckill.sql_changed() RETURNS void: an update of the extension's SQL tells
 * the worker to load its campaign cache again.
 */
Datum
seckill_sql_changed(PG_FUNCTION_ARGS)
{
	if (seckill_shared != NULL &&
		(!OidIsValid(seckill_shared->database_id) || MyDatabaseId == seckill_shared->database_id))
		pg_atomic_fetch_add_u32(&seckill_shared->install_generation, 1);
	PG_RETURN_VOID();
}

/*
 * seckill.apply_limits(campaign_id bigint, user_rate float8, user_burst int,
 *		addr_rate float8, addr_burst int, max_in_flight int,
 *		token_required bool, token_ttl_us bigint, shards int, queue bool,
 *		queue_pass_ttl_us bigint, queue_admit_rate float8,
 *		queue_admit_factor float8, queue_opens_before_us bigint,
 *		queue_seed bigint) RETURNS void
 *
 * The worker stores the campaign's traffic limits (NULL: none) and, while it
 * is a draft, its stock shards, validated by
 * seckill_campaign_set(), and passes them on to Redis and the campaign cache.
 */
Datum
seckill_apply_limits(PG_FUNCTION_ARGS)
{
	SeckillRequest request;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(6) || PG_ARGISNULL(7) || PG_ARGISNULL(8) ||
		PG_ARGISNULL(9) || PG_ARGISNULL(10) || PG_ARGISNULL(12) || PG_ARGISNULL(13))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("campaign_id, token_required, token_ttl_us, shards, queue, queue_pass_ttl_us, queue_admit_factor and queue_opens_before_us must not be null")));
	/*
	 * seckill_campaign_set merges the given settings onto the campaign's
	 * current ones, read after a lock that orders concurrent changes: a
	 * snapshot older than that lock would lose the change made before it.
	 */
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TRANSACTION_STATE),
				 errmsg("seckill_campaign_set() must run in a READ COMMITTED transaction"),
				 errdetail("It merges the settings given onto the campaign's current ones, which a REPEATABLE READ or SERIALIZABLE snapshot may not show."),
				 errhint("Call it outside this transaction, or in one begun with ISOLATION LEVEL READ COMMITTED.")));
	memset(&request, 0, sizeof(request));
	request.kind = SK_REQ_LIMITS;
	request.campaign_id = PG_GETARG_INT64(0);
	request.limits.user_rate = PG_ARGISNULL(1) ? 0 : PG_GETARG_FLOAT8(1);
	request.limits.user_burst = PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2);
	request.limits.addr_rate = PG_ARGISNULL(3) ? 0 : PG_GETARG_FLOAT8(3);
	request.limits.addr_burst = PG_ARGISNULL(4) ? 0 : PG_GETARG_INT32(4);
	request.limits.max_in_flight = PG_ARGISNULL(5) ? 0 : PG_GETARG_INT32(5);
	request.limits.token_required = PG_GETARG_BOOL(6);
	request.limits.token_ttl = PG_GETARG_INT64(7);
	request.limits.shards = PG_GETARG_INT32(8);
	request.limits.queue = PG_GETARG_BOOL(9);
	request.limits.queue_pass_ttl = PG_GETARG_INT64(10);
	request.limits.queue_admit_rate = PG_ARGISNULL(11) ? 0 : PG_GETARG_FLOAT8(11);
	request.limits.queue_admit_factor = PG_GETARG_FLOAT8(12);
	request.limits.queue_opens_before = PG_GETARG_INT64(13);
	request.limits.has_queue_seed = !PG_ARGISNULL(14);
	request.limits.queue_seed = PG_ARGISNULL(14) ? 0 : PG_GETARG_INT64(14);
	(void) seckill_request_checked(&request);
	PG_RETURN_VOID();
}
