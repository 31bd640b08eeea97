/*-------------------------------------------------------------------------
 *
 * buy.c
 *		seckill_buy and seckill_order: the application's side.
 *
 * seckill_buy answers from the campaign cache in shared memory whatever it
 * can (not started, ended, sold out) and hands the rest to the worker.  The
 * order is committed by the worker in its own transaction, so it stands
 * even if the caller's transaction rolls back, as nextval() does.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include "access/htup_details.h"
#include "backend/token.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "storage/ipc.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_buy);
PG_FUNCTION_INFO_V1(seckill_order);

static Datum
buy_result(FunctionCallInfo fcinfo, SeckillStatus status, int64 order_id)
{
	Datum		values[2];
	bool		nulls[2] = {false, order_id == 0};

	values[0] = CStringGetTextDatum(seckill_status_name(status));
	values[1] = Int64GetDatum(order_id);
	return HeapTupleGetDatum(heap_form_tuple(seckill_result_desc(fcinfo), values, nulls));
}

static void
check_qty(int qty, int per_user_limit)
{
	if (qty > per_user_limit)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("qty %d is above the campaign's per-user limit of %d", qty, per_user_limit)));
}

static void
in_flight_done(int code, Datum arg)
{
	SeckillStats *st = (SeckillStats *) DatumGetPointer(arg);

	pg_atomic_fetch_sub_u32(&seckill_figures->all.in_flight, 1);
	if (st != NULL)
		pg_atomic_fetch_sub_u32(&st->in_flight, 1);
}

/*
 * Decide one purchase.  *stats is set to the campaign's stats entry as soon
 * as it is known, so that the caller can count an error too.
 */
static SeckillStatus
buy(FunctionCallInfo fcinfo, SeckillRequest *request, const char *goods, const char *token,
	TimestampTz now, volatile int *stats, int64 *order_id)
{
	SeckillCampaign cached;
	SeckillLimits *limits;
	SeckillStats *volatile st = NULL;
	uint32		in_flight;
	SeckillReply reply;

	/* no answer from this server's data once another primary sells */
	if (seckill_shared->fenced)
	{
		memset(&reply, 0, sizeof(reply));
		reply.status = SK_ERR_FENCED;
		strlcpy(reply.message, "seckill does not sell on this server: another primary sells through its Redis since a failover",
				sizeof(reply.message));
		seckill_reply_checked(SK_REQ_BUY, reply);
	}
	if (seckill_campaign_lookup(goods, &cached))
	{
		*stats = cached.stats;
		check_qty(request->qty, cached.row.per_user_limit);
		if (now < cached.row.starts_at)
			return SK_NOT_STARTED;
		if (now >= cached.row.ends_at)
			return SK_ENDED;
		request->campaign_id = cached.row.id;
		if (pg_atomic_read_u32(&cached.sold_out))
		{
			/* a buyer who asks again is told duplicate, with the order's id */
			*order_id = store_held_order(cached.row.id, request->user_id);
			return *order_id != 0 ? SK_DUPLICATE : SK_SOLD_OUT;
		}
		limits = &cached.row.limits;
		st = &seckill_stats[cached.stats];
		if (limits->queue && !seckill_queue_admits(&cached, request->user_id, now))
			return SK_NOT_ADMITTED;
	}
	else
	{
		SeckillCampaignRow *info = palloc(sizeof(SeckillCampaignRow));

		if (!store_campaign_by_goods(goods, info))
			return SK_UNKNOWN_GOODS;
		if (strcmp(info->state, "closed") == 0)
			return SK_ENDED;
		check_qty(request->qty, info->per_user_limit);
		if (strcmp(info->state, "draft") == 0)
			return SK_NOT_STARTED;
		request->campaign_id = info->id;
		limits = &info->limits;
		if (limits->queue)
		{
			SeckillCampaign *uncached = palloc0(sizeof(SeckillCampaign));

			uncached->row = *info;
			if (!seckill_queue_admits(uncached, request->user_id, now))
				return SK_NOT_ADMITTED;
		}
		if (limits->token_required)
			store_token_secret_load(info->id, limits);
	}

	request->shards = limits->shards;
	if (limits->token_required &&
		(token == NULL ||
		 !seckill_token_verify(request->campaign_id, limits, request->user_id, token,
							   request->token_nonce, &request->token_expiry)))
		return SK_INVALID_TOKEN;

	/* admission control: shed load at once rather than grow the queue */
	if (seckill_max_queue > 0 && seckill_calls->len >= (uint32) seckill_max_queue)
		return SK_BUSY;
	if (limits->addr_rate > 0)
		seckill_client_addr(fcinfo, PG_NARGS() >= 5 ? 4 : -1, request->client_addr,
							sizeof(request->client_addr));
	pg_atomic_fetch_add_u32(&seckill_figures->all.in_flight, 1);
	in_flight = st ? pg_atomic_fetch_add_u32(&st->in_flight, 1) : 0;
	if (limits->max_in_flight > 0 && in_flight >= (uint32) limits->max_in_flight)
	{
		in_flight_done(0, PointerGetDatum(st));
		return SK_BUSY;
	}
	/* counted out on every exit: an answer, an ERROR, or the backend's end */
	seckill_backend_prepare();
	PG_ENSURE_ERROR_CLEANUP(in_flight_done, PointerGetDatum(st));
	{
		reply = seckill_request_checked(request);
	}
	PG_END_ENSURE_ERROR_CLEANUP(in_flight_done, PointerGetDatum(st));
	in_flight_done(0, PointerGetDatum(st));
	if (reply.status == SK_OK)
		*order_id = reply.order_id;
	else if (reply.status == SK_DUPLICATE)
	{
		/* the worker read it after the reservation that made the user a buyer was settled */
		*order_id = reply.order_id;
		if (*order_id == 0)
			*order_id = store_held_order(request->campaign_id, request->user_id);
	}
	return reply.status;
}

/*
 * seckill_buy(user_id text, goods text, qty int DEFAULT 1, token text
 *			   DEFAULT NULL, client_addr inet DEFAULT inet_client_addr())
 *		RETURNS (status text, order_id bigint)
 *
 * The answer and its latency are counted in seckill.stats, errors too.
 */
Datum
seckill_buy(PG_FUNCTION_ARGS)
{
	char	   *user_id = seckill_id_arg(fcinfo, 0, "user_id", SECKILL_MAX_USER_LEN);
	char	   *goods = seckill_id_arg(fcinfo, 1, "goods", SECKILL_MAX_GOODS_LEN);
	char	   *token = NULL;
	SeckillRequest request;
	TimestampTz start;
	volatile int stats = -1;
	SeckillStatus status;
	int64		order_id = 0;

	memset(&request, 0, sizeof(request));
	request.kind = SK_REQ_BUY;
	strlcpy(request.user_id, user_id, sizeof(request.user_id));
	if (PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("qty must not be null")));
	request.qty = PG_GETARG_INT32(2);
	if (request.qty < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("qty must be at least 1")));
	/* seckill_buy(user_id, goods, qty) or (user_id, goods, qty, token, client_addr) */
	if (PG_NARGS() >= 5 && !PG_ARGISNULL(3))
		token = text_to_cstring(PG_GETARG_TEXT_PP(3));
	seckill_check_database();

	start = GetCurrentTimestamp();
	PG_TRY();
	{
		status = buy(fcinfo, &request, goods, token, start, &stats, &order_id);
	}
	PG_CATCH();
	{
		seckill_stats_count(stats, SK_STAT_ERRORS, GetCurrentTimestamp() - start);
		PG_RE_THROW();
	}
	PG_END_TRY();
	seckill_stats_count(stats, status, GetCurrentTimestamp() - start);
	return buy_result(fcinfo, status, order_id);
}

/*
 * seckill_order(user_id text, goods text)
 *		RETURNS (status text, order_id bigint, qty int, created_at timestamptz)
 *
 * Waits until the worker has settled every request made before it, so the
 * answer is final for a purchase whose call timed out or failed.
 */
Datum
seckill_order(PG_FUNCTION_ARGS)
{
	char	   *user_id = seckill_id_arg(fcinfo, 0, "user_id", SECKILL_MAX_USER_LEN);
	char	   *goods = seckill_id_arg(fcinfo, 1, "goods", SECKILL_MAX_GOODS_LEN);
	SeckillCampaignRow campaign;
	SkOrderFate fate;
	TupleDesc	desc;
	Datum		values[4] = {0};
	bool		nulls[4] = {false, true, true, true};
	const char *status = "none";

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	seckill_check_database();
	if (!store_campaign_by_goods(goods, &campaign))
		status = "unknown_goods";
	else
	{
		(void) seckill_call_checked(SK_REQ_BARRIER, campaign.id, NULL, 0);
		if (store_order_fate(campaign.id, user_id, &fate))
		{
			status = fate.status;
			values[1] = Int64GetDatum(fate.id);
			values[2] = Int32GetDatum(fate.qty);
			values[3] = TimestampTzGetDatum(fate.created_at);
			nulls[1] = nulls[2] = nulls[3] = false;
		}
	}
	values[0] = CStringGetTextDatum(status);
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}
