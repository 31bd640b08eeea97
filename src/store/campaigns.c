/*-------------------------------------------------------------------------
 *
 * campaigns.c
 *		seckill.campaigns and its neighbours: the one reader of a campaign
 *		row (SeckillCampaignRow), for the worker and for backends; the
 *		preheated campaigns; buyers, states, limits, stock; token secrets;
 *		the installed SQL's version and seckill.worker_state.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "parser/parse_func.h"
#include "store/sql.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

/*
 * A campaign's SeckillLimits as SQL select-list items, in the order
 * limits_from_tuple reads them; all but the token secret, which is in
 * seckill.token_secrets.
 */
#define LIMITS_COLUMNS \
	"coalesce(user_rate, 0), coalesce(user_burst, greatest(1, pg_catalog.ceil(user_rate)::int)), " \
	"coalesce(addr_rate, 0), coalesce(addr_burst, greatest(1, pg_catalog.ceil(addr_rate)::int)), " \
	"coalesce(max_in_flight, 0), token_required, " \
	"(extract(epoch FROM token_ttl) * 1000000)::int8, shards"

static void limits_from_tuple(HeapTuple tuple, TupleDesc desc, int first, SeckillLimits *limits);

/* The waiting room's settings, in the order queue_from_tuple reads them. */
#define QUEUE_COLUMNS \
	"queue, (extract(epoch FROM queue_pass_ttl) * 1000000)::int8, coalesce(queue_admit_rate, 0), " \
	"queue_admit_factor, (extract(epoch FROM queue_opens_before) * 1000000)::int8, queue_seed"

static void queue_from_tuple(HeapTuple tuple, TupleDesc desc, int first, SeckillLimits *limits);

static SPIPlanPtr buyers_plan[2] = {NULL, NULL};	/* active, cancelled */

/* A campaign's token secret, as seckill.token_secrets holds it, into its limits. */
static void
token_secret_copy(const bytea *secret, SeckillLimits *limits)
{
	if (VARSIZE_ANY_EXHDR(secret) != SK_TOKEN_SECRET_LEN)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a token secret must be %d bytes long", SK_TOKEN_SECRET_LEN)));
	memcpy(limits->token_secret, VARDATA_ANY(secret), SK_TOKEN_SECRET_LEN);
	limits->has_token_secret = true;
}

static void
row_from_tuple(HeapTuple tuple, TupleDesc desc, SeckillCampaignRow *row)
{
	bool		isnull;
	Datum		secret;
	char	   *goods = TextDatumGetCString(SPI_getbinval(tuple, desc, 2, &isnull));
	char	   *state = TextDatumGetCString(SPI_getbinval(tuple, desc, 8, &isnull));

	row->id = DatumGetInt64(SPI_getbinval(tuple, desc, 1, &isnull));
	strlcpy(row->goods, goods, sizeof(row->goods));
	row->total_stock = DatumGetInt32(SPI_getbinval(tuple, desc, 3, &isnull));
	row->sold = DatumGetInt32(SPI_getbinval(tuple, desc, 4, &isnull));
	row->per_user_limit = DatumGetInt32(SPI_getbinval(tuple, desc, 5, &isnull));
	row->starts_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 6, &isnull));
	row->ends_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 7, &isnull));
	strlcpy(row->state, state, sizeof(row->state));
	limits_from_tuple(tuple, desc, 9, &row->limits);
	row->created_at = DatumGetTimestampTz(SPI_getbinval(tuple, desc, 17, &isnull));
	secret = SPI_getbinval(tuple, desc, 18, &isnull);
	if (!isnull)
		token_secret_copy(DatumGetByteaPP(secret), &row->limits);
	row->rebuy_after_cancel = DatumGetBool(SPI_getbinval(tuple, desc, 19, &isnull));
	queue_from_tuple(tuple, desc, 20, &row->limits);
}

/* Read the QUEUE_COLUMNS that start at column first (1-based). */
static void
queue_from_tuple(HeapTuple tuple, TupleDesc desc, int first, SeckillLimits *limits)
{
	bool		isnull;
	Datum		seed;

	limits->queue = DatumGetBool(SPI_getbinval(tuple, desc, first, &isnull));
	limits->queue_pass_ttl = DatumGetInt64(SPI_getbinval(tuple, desc, first + 1, &isnull));
	limits->queue_admit_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, first + 2, &isnull));
	limits->queue_admit_factor = DatumGetFloat8(SPI_getbinval(tuple, desc, first + 3, &isnull));
	limits->queue_opens_before = DatumGetInt64(SPI_getbinval(tuple, desc, first + 4, &isnull));
	seed = SPI_getbinval(tuple, desc, first + 5, &isnull);
	limits->has_queue_seed = !isnull;
	limits->queue_seed = isnull ? 0 : DatumGetInt64(seed);
}

/* Read the LIMITS_COLUMNS that start at column first (1-based). */
static void
limits_from_tuple(HeapTuple tuple, TupleDesc desc, int first, SeckillLimits *limits)
{
	bool		isnull;

	memset(limits, 0, sizeof(SeckillLimits));
	limits->user_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, first, &isnull));
	limits->user_burst = DatumGetInt32(SPI_getbinval(tuple, desc, first + 1, &isnull));
	limits->addr_rate = DatumGetFloat8(SPI_getbinval(tuple, desc, first + 2, &isnull));
	limits->addr_burst = DatumGetInt32(SPI_getbinval(tuple, desc, first + 3, &isnull));
	limits->max_in_flight = DatumGetInt32(SPI_getbinval(tuple, desc, first + 4, &isnull));
	limits->token_required = DatumGetBool(SPI_getbinval(tuple, desc, first + 5, &isnull));
	limits->token_ttl = DatumGetInt64(SPI_getbinval(tuple, desc, first + 6, &isnull));
	limits->shards = DatumGetInt32(SPI_getbinval(tuple, desc, first + 7, &isnull));
}

/* A campaign row's columns, as row_from_tuple reads them. */
#define CAMPAIGN_FIELDS_WITH(secret) \
	"id, goods, total_stock, sold, per_user_limit, starts_at, ends_at, state, " \
	LIMITS_COLUMNS ", created_at, " secret ", rebuy_after_cancel, " QUEUE_COLUMNS

#define CAMPAIGN_FIELDS CAMPAIGN_FIELDS_WITH("(SELECT t.secret FROM seckill.token_secrets t " \
	"WHERE t.campaign_id = seckill.campaigns.id)")

#define CAMPAIGN_COLUMNS "SELECT " CAMPAIGN_FIELDS " FROM seckill.campaigns "

/*
 * The same row as a backend reads it, with the caller's privileges: without
 * the token secret, which only the extension's owner may read.
 */
#define CAMPAIGN_COLUMNS_BUT_SECRET "SELECT " CAMPAIGN_FIELDS_WITH("NULL::bytea") " FROM seckill.campaigns "

/* Inside a transaction: the campaign as this transaction sees it. */
bool
store_campaign(int64 id, SeckillCampaignRow *row)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(id)};

	store_run(CAMPAIGN_COLUMNS "WHERE id = $1", 1, types, values, SPI_OK_SELECT);
	if (SPI_processed == 0)
		return false;
	row_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, row);
	return true;
}

/*
 * In a backend: the campaign for this goods, the open one, else the latest
 * closed one, without its token secret (store_token_secret_load).  False
 * when there is none.
 */
bool
store_campaign_by_goods(const char *goods, SeckillCampaignRow *row)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(goods)};
	bool		found = false;
	int			level = store_backend_spi_begin();

	if (plan == NULL)
		plan = store_prepare(CAMPAIGN_COLUMNS_BUT_SECRET "WHERE goods = $1 "
							 "ORDER BY state <> 'closed' DESC, id DESC LIMIT 1",
							 1, types);
	if (SPI_execute_plan(plan, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading seckill.campaigns failed");
	if (SPI_processed > 0)
	{
		row_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, row);
		found = true;
	}
	store_backend_spi_end(level);
	return found;
}

/*
 * In a backend: the campaign's token secret into its limits, through
 * seckill.token_secret(), which runs as the extension's owner.
 */
void
store_token_secret_load(int64 campaign_id, SeckillLimits *limits)
{
	Oid			argtypes[1] = {INT8OID};
	Oid			fn = LookupFuncName(list_make2(makeString("seckill"), makeString("token_secret")),
									1, argtypes, false);

	token_secret_copy(DatumGetByteaPP(OidFunctionCall1(fn, Int64GetDatum(campaign_id))), limits);
}

/*
 * After the result of the extversion query: does the installed SQL match
 * this library?  Until ALTER EXTENSION seckill UPDATE, the worker serves no
 * campaign and says so once.
 */
bool		store_sql_outdated = false;

static bool
sql_version_matches(void)
{
	static bool warned = false;
	bool		isnull;

	store_sql_outdated = !DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull));
	if (!store_sql_outdated)
		return true;
	if (!warned)
		ereport(WARNING,
				(errcode(ERRCODE_SECKILL_UNAVAILABLE),
				 errmsg("the seckill extension in database \"%s\" is older than its library (version " SECKILL_SQL_VERSION ")",
						get_database_name(MyDatabaseId)),
				 errhint("Run ALTER EXTENSION seckill UPDATE in that database.")));
	warned = true;
	return false;
}

/* Set by store_preheated_campaigns: seckill.worker_state.sales_from_database. */
bool		store_sales_from_database = false;

/*
 * Inside a transaction: record whether the worker sells from PostgreSQL
 * alone, so that a restart remembers that Redis is stale.
 */
void
store_set_database_mode(bool on)
{
	Oid			types[1] = {BOOLOID};
	Datum		values[1] = {BoolGetDatum(on)};

	store_run("INSERT INTO seckill.worker_state AS w (sales_from_database) VALUES ($1) "
		"ON CONFLICT (one) DO UPDATE SET sales_from_database = EXCLUDED.sales_from_database, "
		"changed_at = pg_catalog.now() "
		"WHERE w.sales_from_database IS DISTINCT FROM EXCLUDED.sales_from_database",
		1, types, values, SPI_OK_INSERT);
}

/*
 * In a transaction of its own, what seckill.worker_state remembers of the
 * epochs: the timeline that fenced this server (*fenced_by, 0: none), the
 * one it last recorded in Redis itself (*recorded, 0: none), and whether it
 * has streamed WAL to a standby.  False while the extension is not
 * installed or its SQL is outdated.
 */
bool
store_epoch_state(int64 *fenced_by, int64 *recorded, bool *had_standby)
{
	bool		read = false;

	store_begin("seckill: read the worker's state");
	store_run("SELECT extversion = '" SECKILL_SQL_VERSION "' FROM pg_catalog.pg_extension "
			  "WHERE extname = 'seckill'", 0, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0 && sql_version_matches())
	{
		bool		isnull;

		store_run("SELECT COALESCE(pg_catalog.max(fenced_by_timeline), 0), "
				  "COALESCE(pg_catalog.max(epoch_recorded_timeline), 0), "
				  "COALESCE(pg_catalog.bool_or(had_standby), false) FROM seckill.worker_state",
				  0, NULL, NULL, SPI_OK_SELECT);
		*fenced_by = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		*recorded = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		*had_standby = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
		read = true;
	}
	store_commit();
	return read;
}

/*
 * In a transaction of its own: remember that a server of a timeline at
 * least timeline sells through this Redis, so that this one stays fenced
 * across restarts, whatever Redis keeps.
 */
void
store_remember_fence(int64 timeline)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(timeline)};

	store_begin("seckill: remember the fence");
	store_run("UPDATE seckill.worker_state SET fenced_by_timeline = "
			  "GREATEST(fenced_by_timeline, $1), changed_at = pg_catalog.now()",
			  1, types, values, SPI_OK_UPDATE);
	store_commit();
}

/*
 * In a transaction of its own: remember that this server recorded its
 * timeline as the epoch in Redis (timeline above 0), so that Redis losing
 * it is told from a Redis never used, and that it has streamed WAL to a
 * standby (had_standby), so that a failover it may never learn of is
 * possible (seckill.redis_epoch_lost).  A newer timeline recorded starts
 * had_standby afresh: a promoted standby inherits its old primary's row.
 */
void
store_remember_epoch(int64 timeline, bool had_standby)
{
	Oid			types[2] = {INT8OID, BOOLOID};
	Datum		values[2] = {Int64GetDatum(timeline), BoolGetDatum(had_standby)};

	store_begin("seckill: remember the epoch recorded");
	store_run("UPDATE seckill.worker_state SET "
			  "epoch_recorded_timeline = CASE WHEN $1 > 0 THEN $1 ELSE epoch_recorded_timeline END, "
			  "had_standby = CASE WHEN $1 > COALESCE(epoch_recorded_timeline, 0) THEN $2 ELSE had_standby OR $2 END, "
			  "changed_at = pg_catalog.now()",
			  2, types, values, SPI_OK_UPDATE);
	store_commit();
}

/*
 * Every preheated campaign, as SeckillCampaignRow *, in a transaction of its own;
 * none while the extension is not installed (the worker starts before it
 * may be).
 */
List *
store_preheated_campaigns(void)
{
	List	   *rows = NIL;
	MemoryContext spi_cxt;

	store_begin("seckill: list campaigns");
	store_sql_outdated = false;
	store_run("SELECT extversion = '" SECKILL_SQL_VERSION "' FROM pg_catalog.pg_extension "
		"WHERE extname = 'seckill'", 0, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed > 0 && !sql_version_matches())
		SPI_processed = 0;
	else if (SPI_processed > 0)
	{
		bool		isnull;

		store_run("SELECT pg_catalog.bool_or(sales_from_database) FROM seckill.worker_state",
			0, NULL, NULL, SPI_OK_SELECT);
		store_sales_from_database =
			DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
			!isnull;
		store_run(CAMPAIGN_COLUMNS "WHERE state = 'preheated' ORDER BY id", 0, NULL, NULL, SPI_OK_SELECT);
		spi_cxt = MemoryContextSwitchTo(store_caller_cxt);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			SeckillCampaignRow *row = palloc(sizeof(SeckillCampaignRow));

			row_from_tuple(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, row);
			rows = lappend(rows, row);
		}
		MemoryContextSwitchTo(spi_cxt);
	}
	store_commit();
	return rows;
}

/* Inside a transaction: the users with an active order, as char *. */
/*
 * Inside a transaction: up to limit buyers of the campaign whose user id
 * comes after the given one (the first page: ""), in user id order; with
 * cancelled, those whose orders were all cancelled.  Keyset pages over
 * orders_one_active_per_user and orders_cancelled: each costs O(limit).
 */
List *
store_buyers_page(int64 campaign_id, bool cancelled, const char *after, int limit)
{
	Oid			types[3] = {INT8OID, TEXTOID, INT4OID};
	Datum		values[3] = {Int64GetDatum(campaign_id), CStringGetTextDatum(after), Int32GetDatum(limit)};
	List	   *users = NIL;
	MemoryContext spi_cxt;
	int			rc;

	if (buyers_plan[cancelled] == NULL)
		buyers_plan[cancelled] = store_prepare(cancelled ?
										 "SELECT DISTINCT user_id FROM seckill.orders WHERE campaign_id = $1"
										 " AND status = 'cancelled' AND user_id > $2 ORDER BY user_id LIMIT $3" :
										 "SELECT user_id FROM seckill.orders WHERE campaign_id = $1"
										 " AND status <> 'cancelled' AND user_id > $2 ORDER BY user_id LIMIT $3",
										 3, types);
	rc = SPI_execute_plan(buyers_plan[cancelled], values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI failed reading the buyers of campaign " INT64_FORMAT ": %s",
			 campaign_id, SPI_result_code_string(rc));
	spi_cxt = MemoryContextSwitchTo(store_caller_cxt);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		bool		isnull;

		users = lappend(users, TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[r],
																  SPI_tuptable->tupdesc, 1, &isnull)));
	}
	MemoryContextSwitchTo(spi_cxt);
	return users;
}

/*
 * Inside a transaction: the campaign's buyers, as Redis should hold them:
 * users with an active order, and, unless they may buy again, those whose
 * orders were cancelled.
 */
int64
store_buyer_count(int64 campaign_id, bool rebuy)
{
	Oid			types[2] = {INT8OID, BOOLOID};
	Datum		values[2] = {Int64GetDatum(campaign_id), BoolGetDatum(rebuy)};
	bool		isnull;

	store_run("SELECT (SELECT pg_catalog.count(*) FROM seckill.orders"
		"        WHERE campaign_id = $1 AND status <> 'cancelled')"
		" + CASE WHEN $2 THEN 0 ELSE"
		"  (SELECT pg_catalog.count(DISTINCT o.user_id) FROM seckill.orders o"
		"   WHERE o.campaign_id = $1 AND o.status = 'cancelled'"
		"   AND NOT EXISTS (SELECT FROM seckill.orders a WHERE a.campaign_id = $1"
		"                   AND a.user_id = o.user_id"
		"                   AND a.status <> 'cancelled')) END",
		2, types, values, SPI_OK_SELECT);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

void
store_set_state(int64 campaign_id, const char *state)
{
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(campaign_id), CStringGetTextDatum(state)};

	store_run("UPDATE seckill.campaigns SET state = $2, "
		"closed_at = CASE WHEN $2 = 'closed' THEN pg_catalog.now() END WHERE id = $1",
		2, types, values, SPI_OK_UPDATE);
}

/* Inside a transaction: the campaign's traffic limits (0 or false: none). */
void
store_set_limits(int64 campaign_id, const SeckillLimits *limits)
{
	Oid			types[16] = {INT8OID, FLOAT8OID, INT4OID, FLOAT8OID, INT4OID, INT4OID,
		BOOLOID, INT8OID, INT4OID,
	BOOLOID, INT8OID, FLOAT8OID, FLOAT8OID, INT8OID, INT8OID, BOOLOID};
	Datum		values[16] = {
		Int64GetDatum(campaign_id),
		Float8GetDatum(limits->user_rate), Int32GetDatum(limits->user_burst),
		Float8GetDatum(limits->addr_rate), Int32GetDatum(limits->addr_burst),
		Int32GetDatum(limits->max_in_flight), BoolGetDatum(limits->token_required),
		Int64GetDatum(limits->token_ttl), Int32GetDatum(limits->shards),
		BoolGetDatum(limits->queue), Int64GetDatum(limits->queue_pass_ttl),
		Float8GetDatum(limits->queue_admit_rate), Float8GetDatum(limits->queue_admit_factor),
		Int64GetDatum(limits->queue_opens_before), Int64GetDatum(limits->queue_seed),
		BoolGetDatum(limits->has_queue_seed)
	};

	store_run("UPDATE seckill.campaigns SET user_rate = nullif($2, 0), user_burst = nullif($3, 0), "
		"addr_rate = nullif($4, 0), addr_burst = nullif($5, 0), "
		"max_in_flight = nullif($6, 0), token_required = $7, "
		"token_ttl = pg_catalog.make_interval(secs => $8 / 1000000.0), "
		"shards = CASE WHEN state = 'draft' THEN $9 ELSE shards END, "
		"queue = $10, queue_pass_ttl = pg_catalog.make_interval(secs => $11 / 1000000.0), "
		"queue_admit_rate = nullif($12, 0), queue_admit_factor = $13, "
		"queue_opens_before = pg_catalog.make_interval(secs => $14 / 1000000.0), "
		"queue_seed = CASE WHEN $16 THEN $15 END WHERE id = $1",
		16, types, values, SPI_OK_UPDATE);
}

/*
 * Inside a transaction: change the campaign's total_stock by delta, never
 * below what is sold.  False (nothing changed) when it would go below.
 */
bool
store_restock(int64 campaign_id, int delta, SeckillCampaignRow *row)
{
	Oid			types[2] = {INT8OID, INT4OID};
	Datum		values[2] = {Int64GetDatum(campaign_id), Int32GetDatum(delta)};

	store_run("UPDATE seckill.campaigns SET total_stock = total_stock + $2"
		" WHERE id = $1 AND total_stock + $2 >= sold"
		" RETURNING " CAMPAIGN_FIELDS,
		2, types, values, SPI_OK_UPDATE_RETURNING);
	if (SPI_processed == 0)
		return false;
	row_from_tuple(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, row);
	return true;
}
