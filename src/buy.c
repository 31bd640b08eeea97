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
#include "backend.h"

#include "access/htup_details.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "stats.h"
#include "storage/ipc.h"
#include "store.h"
#include "token.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inet.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_buy);
PG_FUNCTION_INFO_V1(seckill_order);

/* A text argument that is a user or goods id: not null, not empty, not too long. */
char *
seckill_id_arg(FunctionCallInfo fcinfo, int argno, const char *name, int maxlen)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", name),
				 errdetail("It is %d bytes long; the limit is %d bytes.", len, maxlen)));
	return text_to_cstring(t);
}

/*
 * SPI in a backend under an empty search_path, like the worker's: a
 * superuser who calls seckill runs nothing that the owner of a schema on
 * the caller's search_path planted (an operator, a function).  Returns the
 * GUC nest level for seckill_spi_end; an error unwinds both.
 */
int
seckill_spi_begin(void)
{
	int			level;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	level = NewGUCNestLevel();
	(void) set_config_option("search_path", "", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return level;
}

void
seckill_spi_end(int level)
{
	AtEOXact_GUC(true, level);
	SPI_finish();
}

/*
 * The campaign for this goods in seckill.campaigns: the open one, else the
 * latest closed one.  False when there is none.
 */
bool
seckill_campaign_by_goods(const char *goods, CampaignInfo *info)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(goods)};
	bool		found = false;
	bool		isnull;
	int			level = seckill_spi_begin();

	if (plan == NULL)
	{
		plan = SPI_prepare("SELECT id, state, starts_at, ends_at, per_user_limit, "
						   LIMITS_COLUMNS " FROM seckill.campaigns WHERE goods = $1 "
						   "ORDER BY state <> 'closed' DESC, id DESC LIMIT 1",
						   1, types);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
	}
	if (SPI_execute_plan(plan, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading seckill.campaigns failed");
	if (SPI_processed > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;

		info->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		strlcpy(info->state, TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull)),
				sizeof(info->state));
		info->starts_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 3, &isnull));
		info->ends_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull));
		info->per_user_limit = DatumGetInt32(SPI_getbinval(tup, desc, 5, &isnull));
		store_limits_from_tuple(tup, desc, 6, &info->limits);
		found = true;
	}
	seckill_spi_end(level);
	return found;
}

/* Ask the worker; turn failures into ERRORs a DBA can act on. */
SeckillReply
seckill_call_checked(SeckillRequestKind kind, int64 campaign_id, const char *user_id, int qty)
{
	SeckillRequest request;

	memset(&request, 0, sizeof(request));
	request.kind = kind;
	request.campaign_id = campaign_id;
	request.qty = qty;
	if (user_id)
		strlcpy(request.user_id, user_id, sizeof(request.user_id));
	return seckill_request_checked(&request);
}

SeckillReply
seckill_request_checked(const SeckillRequest *request)
{
	return seckill_reply_checked(request->kind, seckill_call(request));
}

/* A failure in the reply becomes an ERROR a DBA can act on. */
SeckillReply
seckill_reply_checked(SeckillRequestKind kind, SeckillReply reply)
{
	switch (reply.status)
	{
		case SK_ERR_REDIS:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("seckill could not reach Redis"),
					 errdetail("%s", reply.message),
					 errhint("Check that Redis answers at seckill.redis_host:seckill.redis_port (%s:%d); the worker reconnects by itself.",
							 seckill_redis_host, seckill_redis_port)));
			break;
		case SK_ERR_REDIS_REFUSED:
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("Redis refused seckill's request"),
					 errdetail("%s", reply.message),
					 errhint("Check Redis: a read-only replica, a full maxmemory, or an ACL that lacks a command refuses seckill.")));
			break;
		case SK_ERR_WORKER:
			ereport(ERROR,
					(errcode(reply.sqlerrcode ? reply.sqlerrcode : ERRCODE_CONNECTION_FAILURE),
					 errmsg("%s", reply.message),
					 kind == SK_REQ_BUY ?
					 errhint("The purchase was either committed or will be given back; call seckill_order() to learn which.") :
					 errhint("Call the function again.")));
			break;
		case SK_ERR_INVALID:
			ereport(ERROR,
					(errcode(reply.sqlerrcode ? reply.sqlerrcode : ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("%s", reply.message)));
			break;
		case SK_ERR_LOCKED:
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("%s", reply.message),
					 errhint("Its lease runs out within seckill.lock_lease; try again then, and give each cluster sharing a Redis its own seckill.redis_prefix.")));
			break;
		default:
			break;
	}
	return reply;
}

/* The result row type, blessed once per call site (this is the hot path). */
static TupleDesc
result_desc(FunctionCallInfo fcinfo)
{
	if (fcinfo->flinfo->fn_extra == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
		TupleDesc	desc;

		if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		fcinfo->flinfo->fn_extra = BlessTupleDesc(CreateTupleDescCopy(desc));
		MemoryContextSwitchTo(old);
	}
	return (TupleDesc) fcinfo->flinfo->fn_extra;
}

static Datum
buy_result(FunctionCallInfo fcinfo, SeckillStatus status, int64 order_id)
{
	Datum		values[2];
	bool		nulls[2] = {false, status != SK_OK};

	values[0] = CStringGetTextDatum(seckill_status_name(status));
	values[1] = Int64GetDatum(order_id);
	return HeapTupleGetDatum(heap_form_tuple(result_desc(fcinfo), values, nulls));
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

	pg_atomic_fetch_sub_u32(&seckill_shared->all.in_flight, 1);
	if (st != NULL)
		pg_atomic_fetch_sub_u32(&st->in_flight, 1);
}

/*
 * The client address of a purchase, for the campaign's addr_rate: the
 * argument of the five-argument seckill_buy (NULL: none), else the
 * session's, as inet_client_addr() gives it.  Only computed for a campaign
 * that limits addresses: it costs a getnameinfo().
 */
static void
client_addr(FunctionCallInfo fcinfo, char *out, size_t len)
{
	Datum		addr;

	if (PG_NARGS() >= 5)
	{
		if (PG_ARGISNULL(4))
			return;
		addr = PG_GETARG_DATUM(4);
	}
	else
	{
		LOCAL_FCINFO(fc, 0);

		InitFunctionCallInfoData(*fc, NULL, 0, InvalidOid, NULL, NULL);
		addr = inet_client_addr(fc);
		if (fc->isnull)
			return;
	}
	strlcpy(out, DatumGetCString(DirectFunctionCall1(inet_out, addr)), len);
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

	if (seckill_campaign_lookup(goods, &cached))
	{
		*stats = cached.stats;
		check_qty(request->qty, cached.per_user_limit);
		if (now < cached.starts_at)
			return SK_NOT_STARTED;
		if (now >= cached.ends_at)
			return SK_ENDED;
		if (pg_atomic_read_u32(&cached.sold_out))
			return SK_SOLD_OUT;
		request->campaign_id = cached.id;
		limits = &cached.limits;
		st = &seckill_stats[cached.stats];
	}
	else
	{
		CampaignInfo *info = palloc(sizeof(CampaignInfo));

		if (!seckill_campaign_by_goods(goods, info))
			return SK_UNKNOWN_GOODS;
		if (strcmp(info->state, "closed") == 0)
			return SK_ENDED;
		check_qty(request->qty, info->per_user_limit);
		if (strcmp(info->state, "draft") == 0)
			return SK_NOT_STARTED;
		request->campaign_id = info->id;
		limits = &info->limits;
		if (limits->token_required)
			seckill_token_secret_load(info->id, limits);
	}

	request->shards = limits->shards;
	if (limits->token_required &&
		(token == NULL ||
		 !seckill_token_verify(request->campaign_id, limits, request->user_id, token,
							   request->token_nonce, &request->token_expiry)))
		return SK_INVALID_TOKEN;

	/* admission control: shed load at once rather than grow the queue */
	if (seckill_max_queue > 0 && seckill_shared->queue_len >= (uint32) seckill_max_queue)
		return SK_BUSY;
	if (limits->addr_rate > 0)
		client_addr(fcinfo, request->client_addr, sizeof(request->client_addr));
	pg_atomic_fetch_add_u32(&seckill_shared->all.in_flight, 1);
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
	*order_id = reply.order_id;
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
	CampaignInfo info;
	TupleDesc	desc;
	Datum		values[4] = {0};
	bool		nulls[4] = {false, true, true, true};
	const char *status = "none";

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	seckill_check_database();
	if (!seckill_campaign_by_goods(goods, &info))
		status = "unknown_goods";
	else
	{
		Oid			types[2] = {INT8OID, TEXTOID};
		Datum		args[2] = {Int64GetDatum(info.id), CStringGetTextDatum(user_id)};

		int			level;

		(void) seckill_call_checked(SK_REQ_BARRIER, info.id, NULL, 0);
		level = seckill_spi_begin();
		if (SPI_execute_with_args("SELECT status, id, qty, created_at FROM seckill.orders "
								  "WHERE campaign_id = $1 AND user_id = $2 "
								  "ORDER BY status <> 'cancelled' DESC, id DESC LIMIT 1",
								  2, types, args, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "reading seckill.orders failed");
		if (SPI_processed > 0)
		{
			HeapTuple	tup = SPI_tuptable->vals[0];
			bool		isnull;

			status = TextDatumGetCString(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
			status = MemoryContextStrdup(CurTransactionContext, status);
			for (int i = 1; i < 4; i++)
			{
				values[i] = SPI_getbinval(tup, SPI_tuptable->tupdesc, i + 1, &isnull);
				nulls[i] = false;
			}
		}
		seckill_spi_end(level);
	}
	values[0] = CStringGetTextDatum(status);
	return HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls));
}
