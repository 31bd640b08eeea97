/*-------------------------------------------------------------------------
 *
 * storefront.c
 *		seckill_storefront(goods) and seckill_storefront_json(goods): what a
 *		shop's page shows of a sale (its state, countdown and remaining
 *		stock), read in the caller's backend without the worker or Redis.
 *
 * A preheated campaign is answered from the campaign cache in shared
 * memory alone: the row the worker cached, the sold-out flag the backends
 * answer by, and each shard's stock as the worker last saw it in Redis.  A
 * campaign not in the cache (a draft, or one the worker has not loaded yet)
 * is read from seckill.campaigns as the seckill.storefront view reads it,
 * as the extension's owner, so that the functions need no grant but their
 * own.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_storefront);
PG_FUNCTION_INFO_V1(seckill_storefront_json);

#define STOREFRONT_COLUMNS 8

/* The campaign's state in seckill_buy's words, as its view computes it. */
static const char *
storefront_state(const SeckillStorefront *c, bool draft, TimestampTz now)
{
	if (now >= c->ends_at)
		return "ended";
	if (draft || now < c->starts_at)
		return "not_started";
	if (c->sold_out || c->remaining <= 0)
		return "sold_out";
	return "on_sale";
}

static int32
storefront_remaining(const SeckillStorefront *c)
{
	return c->sold_out ? 0 : (int32) Min(Max(c->remaining, 0), PG_INT32_MAX);
}

/*
 * The open campaign of goods read from seckill.campaigns, as the extension's
 * owner; false when there is none.
 */
static bool
read_campaign(const char *goods, SeckillStorefront *out, bool *draft)
{
	SeckillCampaignRow row;
	Oid			owner = seckill_extension_owner();
	Oid			save_user;
	int			save_sec;
	bool		found;

	if (!OidIsValid(owner))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the seckill extension is not installed in this database")));
	/* its query reads the columns of this library's version */
	seckill_check_version();
	GetUserIdAndSecContext(&save_user, &save_sec);
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
	found = store_campaign_by_goods(goods, &row);
	SetUserIdAndSecContext(save_user, save_sec);
	if (!found || strcmp(row.state, "closed") == 0)
		return false;
	out->id = row.id;
	out->starts_at = row.starts_at;
	out->ends_at = row.ends_at;
	out->total_stock = row.total_stock;
	out->remaining = (int64) row.total_stock - row.sold;
	out->sold_out = seckill_campaign_sold_out(row.id);
	out->queue_length = -1;
	*draft = strcmp(row.state, "draft") == 0;
	return true;
}

/*
 * The open campaign of goods: from the cache when it is preheated and the
 * worker has seen the stock of each of its shards, else from the table.
 */
static bool
find_campaign(FunctionCallInfo fcinfo, char **goods, SeckillStorefront *c, bool *draft)
{
	*goods = seckill_id_arg(fcinfo, 0, "goods", SECKILL_MAX_GOODS_LEN);
	seckill_check_database();
	*draft = false;
	/* while the worker sells from PostgreSQL alone, Redis' stock stands still */
	return (!seckill_shared->sales_from_database &&
			seckill_campaign_storefront(*goods, c) && c->remaining >= 0) ||
		read_campaign(*goods, c, draft);
}

/*
 * seckill_storefront(goods text) RETURNS SETOF seckill.storefront
 *
 * The open campaign of goods as seckill.storefront shows it, no row when
 * there is none.  Its remaining stock is Redis' for a preheated campaign
 * (a purchase Redis granted counts as sold before its order commits),
 * PostgreSQL's otherwise.
 */
Datum
seckill_storefront(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	SeckillStorefront c;
	char	   *goods;
	bool		draft;
	Datum		values[STOREFRONT_COLUMNS];
	bool		nulls[STOREFRONT_COLUMNS] = {false};

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	if (rsinfo->setDesc->natts != STOREFRONT_COLUMNS)
		elog(ERROR, "seckill_storefront must return the %d columns of seckill.storefront", STOREFRONT_COLUMNS);
	if (!find_campaign(fcinfo, &goods, &c, &draft))
		return (Datum) 0;
	values[0] = CStringGetTextDatum(goods);
	values[1] = Int64GetDatum(c.id);
	values[2] = CStringGetTextDatum(storefront_state(&c, draft, now));
	values[3] = TimestampTzGetDatum(c.starts_at);
	values[4] = TimestampTzGetDatum(c.ends_at);
	values[5] = c.starts_at > now ?
		DirectFunctionCall2(timestamp_mi, TimestampTzGetDatum(c.starts_at), TimestampTzGetDatum(now)) :
		IntervalPGetDatum(palloc0(sizeof(Interval)));
	values[6] = Int32GetDatum(c.total_stock);
	values[7] = Int32GetDatum(storefront_remaining(&c));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return (Datum) 0;
}

/* A JSON member: the seconds from now to t, to the millisecond; 0 once past, null at +infinity. */
static void
json_seconds_to(StringInfo buf, const char *member, TimestampTz t, TimestampTz now)
{
	char		digits[MAXINT8LEN + 1];
	int64		ms = t > now ? (t - now) / 1000 : 0;

	appendStringInfoString(buf, member);
	if (TIMESTAMP_IS_NOEND(t))
	{
		appendStringInfoString(buf, "null");
		return;
	}
	pg_lltoa(ms / 1000, digits);
	appendStringInfoString(buf, digits);
	appendStringInfoChar(buf, '.');
	appendStringInfoChar(buf, '0' + (ms % 1000) / 100);
	appendStringInfoChar(buf, '0' + (ms % 100) / 10);
	appendStringInfoChar(buf, '0' + ms % 10);
}

static void
json_int(StringInfo buf, const char *member, int64 value)
{
	char		digits[MAXINT8LEN + 1];

	pg_lltoa(value, digits);
	appendStringInfoString(buf, member);
	appendStringInfoString(buf, digits);
}

/*
 * seckill_storefront_json(goods text) RETURNS json
 *
 * The same as one JSON object for a page to pass on as it is, its times as
 * countdowns in seconds (starts_in_seconds, ends_in_seconds: null for a sale
 * without end), and, for a campaign with a waiting room whose line the
 * worker has read, the buyers waiting in it (queue_length), at the cost of
 * a scalar call: a set-returning function in
 * FROM costs its reader a table function scan.  NULL when goods has no open
 * campaign.
 */
Datum
seckill_storefront_json(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	SeckillStorefront c;
	char	   *goods;
	bool		draft;
	StringInfoData buf;

	if (!find_campaign(fcinfo, &goods, &c, &draft))
		PG_RETURN_NULL();
	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"goods\": ");
	escape_json(&buf, goods);
	json_int(&buf, ", \"campaign_id\": ", c.id);
	appendStringInfoString(&buf, ", \"state\": \"");
	appendStringInfoString(&buf, storefront_state(&c, draft, now));
	appendStringInfoChar(&buf, '"');
	json_seconds_to(&buf, ", \"starts_in_seconds\": ", c.starts_at, now);
	json_seconds_to(&buf, ", \"ends_in_seconds\": ", c.ends_at, now);
	json_int(&buf, ", \"total_stock\": ", c.total_stock);
	json_int(&buf, ", \"remaining\": ", storefront_remaining(&c));
	if (c.queue_length >= 0)
		json_int(&buf, ", \"queue_length\": ", c.queue_length);
	appendStringInfoChar(&buf, '}');
	PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));
}
