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

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "backend/token.h"
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "storage/ipc.h"
#include "storage/lmgr.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/inet.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_buy);
PG_FUNCTION_INFO_V1(seckill_order);

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
	bool		nulls[2] = {false, order_id == 0};

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

	pg_atomic_fetch_sub_u32(&seckill_figures->all.in_flight, 1);
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
 * stale pair is caught after locking, in held_order().
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
static int64
held_order(int64 campaign_id, const char *user_id)
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
	/* named to the caller: durable first */
	if (id != 0)
		seckill_orders_flush();
	return id;
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

	/* no answer from this server's data once a newer primary sells */
	if (seckill_shared->fenced)
	{
		memset(&reply, 0, sizeof(reply));
		reply.status = SK_ERR_FENCED;
		strlcpy(reply.message, "seckill does not sell on this server: a newer timeline sells through its Redis since a failover",
				sizeof(reply.message));
		seckill_reply_checked(SK_REQ_BUY, reply);
	}
	if (seckill_campaign_lookup(goods, &cached))
	{
		*stats = cached.stats;
		check_qty(request->qty, cached.per_user_limit);
		if (now < cached.starts_at)
			return SK_NOT_STARTED;
		if (now >= cached.ends_at)
			return SK_ENDED;
		request->campaign_id = cached.id;
		if (pg_atomic_read_u32(&cached.sold_out))
		{
			/* a buyer who asks again is told duplicate, with the order's id */
			*order_id = held_order(cached.id, request->user_id);
			return *order_id != 0 ? SK_DUPLICATE : SK_SOLD_OUT;
		}
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
	if (seckill_max_queue > 0 && seckill_calls->len >= (uint32) seckill_max_queue)
		return SK_BUSY;
	if (limits->addr_rate > 0)
		client_addr(fcinfo, request->client_addr, sizeof(request->client_addr));
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
			*order_id = held_order(request->campaign_id, request->user_id);
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

		SPIPlanPtr	plan;

		(void) seckill_call_checked(SK_REQ_BARRIER, info.id, NULL, 0);
		level = seckill_spi_begin();
		plan = SPI_prepare("SELECT status, id, qty, created_at FROM seckill.orders "
						   "WHERE campaign_id = $1 AND user_id = $2 "
						   "ORDER BY status <> 'cancelled' DESC, id DESC LIMIT 1",
						   2, types);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed: %s", SPI_result_code_string(SPI_result));

		/*
		 * What the worker committed while we waited, whatever the caller's
		 * snapshot: the statement's (taken before the wait, or before the
		 * purchase in the same statement) or a repeatable read's would
		 * answer none for an order that exists.
		 */
		if (SPI_execute_snapshot(plan, args, NULL, GetLatestSnapshot(), InvalidSnapshot,
								 true, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "reading seckill.orders failed");
		if (SPI_processed > 0)
		{
			HeapTuple	tup = SPI_tuptable->vals[0];
			bool		isnull;

			/* the fate told is durable: the worker may not have flushed it yet */
			seckill_orders_flush();

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
