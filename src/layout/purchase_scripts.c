/*-------------------------------------------------------------------------
 *
 * purchase_scripts.c
 *		lua/buy.lua, lua/take.lua and lua/compensate.lua as typed calls: the
 *		keys and arguments each script's header gives, and its replies read
 *		into answers; the same for the journal's read and settling.
 *
 *-------------------------------------------------------------------------
 */
#include "layout/purchase_scripts.h"

#include "layout/keys.h"
#include "layout/scripts.h"

/*
 * The round's purchases of one campaign's shard, at most SK_BUYS_PER_CALL,
 * are one call of lua/buy.lua: the campaign's hash, the clock and the
 * journal are read once for them all.
 */
#define SK_BUYS_PER_CALL 128

typedef struct BuyCall
{
	int64		campaign_id;
	int			home;
	int			nshards;
	int			n;				/* purchases in it */
	const char **keys;			/* 3 + 3 a purchase */
	const char **args;			/* 2 + 5 a purchase */
} BuyCall;

struct SkBuyCalls
{
	BuyCall    *calls;
	int			ncalls;
	int		   *call_of;		/* each purchase's call */
	int		   *place;			/* and its place there */
	int			npurchases;
	int			first;			/* the first call's command in the pipeline */
};

SkBuyCalls *
sk_buy_calls_new(int max_purchases)
{
	SkBuyCalls *calls = palloc0(sizeof(SkBuyCalls));

	calls->calls = palloc(sizeof(BuyCall) * Max(max_purchases, 1));
	calls->call_of = palloc(sizeof(int) * Max(max_purchases, 1));
	calls->place = palloc(sizeof(int) * Max(max_purchases, 1));
	return calls;
}

/*
 * Put a purchase into the call of its home shard: its rate-limit buckets
 * belong to the campaign's instance (its created_at), so that a campaign
 * made anew under the same id starts with full ones; epoch is the
 * worker's (worker/epoch.c).
 */
void
sk_buy_calls_add(SkBuyCalls *calls, const SeckillRequest *req, const SkOrder *order,
				 int64 instance, const char *epoch)
{
	int64		id = req->campaign_id;
	int			home = order->home,
				nshards = order->nshards;
	BuyCall    *call = NULL;
	const char **keys;
	const char **args;

	for (int i = calls->ncalls - 1; i >= 0 && call == NULL; i--)
		if (calls->calls[i].campaign_id == id && calls->calls[i].home == home &&
			calls->calls[i].nshards == nshards && calls->calls[i].n < SK_BUYS_PER_CALL)
			call = &calls->calls[i];
	if (call == NULL)
	{
		call = &calls->calls[calls->ncalls++];
		call->campaign_id = id;
		call->home = home;
		call->nshards = nshards;
		call->n = 0;
		call->keys = palloc(sizeof(char *) * (3 + 3 * SK_BUYS_PER_CALL));
		call->args = palloc(sizeof(char *) * (2 + 5 * SK_BUYS_PER_CALL));
		sk_keys_shard_set(id, home, nshards, call->keys);
		call->args[0] = nshards > 1 ? "1" : "";
		call->args[1] = epoch;
	}
	calls->call_of[calls->npurchases] = call - calls->calls;
	calls->place[calls->npurchases++] = call->n;
	keys = &call->keys[3 + 3 * call->n];
	keys[0] = sk_keys_shard(id, home, nshards, psprintf("rate:" INT64_FORMAT ":u:%s", instance, req->user_id));
	keys[1] = sk_keys_shard(id, home, nshards, psprintf("rate:" INT64_FORMAT ":a:%s", instance, req->client_addr));
	keys[2] = sk_keys_shard(id, home, nshards, psprintf("token:%s", req->token_nonce));
	args = &call->args[2 + 5 * call->n];
	args[0] = req->user_id;
	args[1] = psprintf("%d", req->qty);
	args[2] = psprintf(INT64_FORMAT, order->id);
	args[3] = req->token_nonce[0] ? psprintf(INT64_FORMAT, req->token_expiry) : "";
	args[4] = req->client_addr[0] ? "1" : "";
	call->n++;
}

/* Append the calls to the pipeline, in the order of their first purchase. */
void
sk_buy_calls_send(SkBuyCalls *calls, SkPipeline *p)
{
	calls->first = p->count;
	for (int i = 0; i < calls->ncalls; i++)
		sk_pipeline_script(p, SK_SCRIPT_BUY, 3 + 3 * calls->calls[i].n, calls->calls[i].keys,
						   2 + 5 * calls->calls[i].n, calls->calls[i].args);
}

static SeckillStatus
status_named(const char *s)
{
	static const SeckillStatus statuses[] = {SK_OK, SK_SOLD_OUT, SK_DUPLICATE,
	SK_NOT_STARTED, SK_ENDED, SK_BUSY, SK_RATE_LIMITED, SK_INVALID_TOKEN};

	for (int i = 0; i < lengthof(statuses); i++)
		if (strcmp(s, seckill_status_name(statuses[i])) == 0)
			return statuses[i];
	return SK_ERR_REDIS_REFUSED;
}

/*
 * A {status, stock} pair of either script: what the call said of its
 * purchase; which statuses mean an answer is the caller's to say.
 */
static void
read_pair(const SkReply *r, const char *script, SkScriptAnswer *out)
{
	const char *status;

	memset(out, 0, sizeof(*out));
	if (sk_reply_is_moving(r))
	{
		out->verdict = SK_VERDICT_MOVING;
		return;
	}
	if (sk_reply_is_unreachable(r))
	{
		out->verdict = SK_VERDICT_UNREACHABLE;
		out->text = r->str;
		return;
	}
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0].str == NULL)
	{
		out->verdict = SK_VERDICT_FAILED;
		out->text = psprintf("the %s script failed: %s", script, r->str ? r->str : "unexpected reply");
		return;
	}
	status = r->element[0].str;
	out->said = status;
	out->stock = sk_reply_int(&r->element[1]);
	if (strcmp(status, "fenced") == 0)
		out->verdict = SK_VERDICT_FENCED;
	else if (strcmp(status, "not_loaded") == 0)
		out->verdict = SK_VERDICT_NOT_LOADED;
	else if (strcmp(status, "need_stock") == 0)
		out->verdict = SK_VERDICT_NEED_STOCK;
	else if (strcmp(status, "empty") == 0)
		out->verdict = SK_VERDICT_EMPTY;
	else
	{
		out->verdict = SK_VERDICT_ANSWER;
		out->status = status_named(status);
		if (out->status == SK_ERR_REDIS_REFUSED)
		{
			out->verdict = SK_VERDICT_FAILED;
			out->text = psprintf("the %s script answered \"%s\"", script, status);
		}
	}
	/* fenced and not_loaded carry no stock of the shard */
	out->has_stock = out->verdict != SK_VERDICT_FENCED && out->verdict != SK_VERDICT_NOT_LOADED;
}

/* What lua/buy.lua said of the purchase-th purchase added, from the pipeline's replies. */
void
sk_buy_answer(const SkBuyCalls *calls, SkReply *replies, int purchase, SkScriptAnswer *out)
{
	int			call = calls->call_of[purchase];
	SkReply    *r = &replies[calls->first + call];

	if (r->type == REDIS_REPLY_ARRAY && r->elements != calls->calls[call].n)
	{
		memset(out, 0, sizeof(*out));
		out->verdict = SK_VERDICT_FAILED;
		out->text = "the purchase script failed: unexpected reply";
		out->unaccounted = true;
		return;
	}
	/* a call that failed failed each of its purchases */
	read_pair(r->type == REDIS_REPLY_ARRAY ? &r->element[calls->place[purchase]] : r, "purchase", out);
}

/* Ask shard, not the order's home, to lend the order's stock (lua/take.lua). */
void
sk_take_send(SkPipeline *p, const SkOrder *order, int shard, const char *epoch)
{
	const char *keys[2] = {sk_keys_shard(order->campaign_id, shard, order->nshards, "meta"),
	sk_keys_shard(order->campaign_id, shard, order->nshards, "journal")};
	const char *args[4] = {psprintf(INT64_FORMAT, order->id), psprintf("%d", order->qty),
	order->user_id, epoch};

	sk_pipeline_script(p, SK_SCRIPT_TAKE, 2, keys, 4, args);
}

/* What lua/take.lua answered: ok, empty, ended, not_loaded or fenced. */
void
sk_take_answer(const SkReply *r, SkScriptAnswer *out)
{
	read_pair(r, "stock", out);
}

/*
 * Give back a reservation's journal entry in one shard (lua/compensate.lua):
 * its stock, and its buyer unless keep_buyer.  Only an entry still in the
 * journal is given back, once; a worker of an older epoch gives nothing.
 */
void
sk_give_back_send(SkPipeline *p, int64 campaign_id, int shard, int nshards,
				  int64 request_id, bool keep_buyer, const char *epoch)
{
	const char *keys[3];
	const char *args[3] = {psprintf(INT64_FORMAT, request_id), keep_buyer ? "keep" : "drop", epoch};

	sk_keys_shard_set(campaign_id, shard, nshards, keys);
	sk_pipeline_script(p, SK_SCRIPT_COMPENSATE, 3, keys, 3, args);
}

/*
 * Whether the script ran (an error did not: why, unless NULL, is its
 * text), and the shard's stock after it in stock: negative when the script
 * says none (the campaign is not in Redis, or a newer epoch's).
 */
bool
sk_give_back_answer(const SkReply *r, int64 *stock, const char **why)
{
	*stock = -1;
	if (sk_reply_refused(r, why))
		return false;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
		*stock = sk_reply_int(&r->element[1]);
	return true;
}

/* Read a shard's journal, and its hash's epoch and take-over mark: two commands. */
void
sk_journal_read_send(SkPipeline *p, int64 campaign_id, int shard, int nshards)
{
	const char *keys[3];

	sk_keys_shard_set(campaign_id, shard, nshards, keys);
	sk_pipeline_add(p, 2, (const char *[]) {"HGETALL", keys[2]}, NULL);
	sk_pipeline_add(p, 4, (const char *[]) {"HMGET", keys[0], "epoch", "stale"}, NULL);
}

/*
 * The two replies of sk_journal_read_send: each entry is request id ->
 * "qty:user" (lua/buy.lua).
 */
void
sk_journal_read_answer(SkReply *replies, SkJournalEntries *out)
{
	SkReply    *all = &replies[0];
	SkReply    *marks = &replies[1];

	memset(out, 0, sizeof(*out));
	if (all->type != REDIS_REPLY_ARRAY)
	{
		out->refused = all->str ? all->str : "unexpected reply";
		return;
	}
	if (marks->type != REDIS_REPLY_ARRAY || marks->elements != 2)
	{
		out->refused = marks->str ? marks->str : "unexpected reply";
		out->epoch_refused = true;
		return;
	}
	out->epoch = marks->element[0].str ? strtoll(marks->element[0].str, NULL, 10) : 0;
	out->stale = marks->element[1].str;
	out->n = all->elements / 2;
	out->ids = palloc(sizeof(int64) * Max(out->n, 1));
	out->qtys = palloc(sizeof(int) * Max(out->n, 1));
	out->users = palloc(sizeof(char *) * Max(out->n, 1));
	for (int i = 0; i < out->n; i++)
	{
		const char *entry = all->element[2 * i + 1].str;
		const char *sep = entry ? strchr(entry, ':') : NULL;

		out->ids[i] = strtoll(all->element[2 * i].str, NULL, 10);
		out->qtys[i] = entry ? atoi(entry) : 0;
		out->users[i] = sep ? sep + 1 : NULL;
	}
}

/* Drop the journal entries of committed orders, ids[0..n-1], from one shard: one HDEL. */
void
sk_journal_settle_send(SkPipeline *p, int64 campaign_id, int shard, int nshards,
					   const int64 *ids, int n)
{
	const char **argv = palloc(sizeof(char *) * (n + 2));

	argv[0] = "HDEL";
	argv[1] = sk_keys_shard(campaign_id, shard, nshards, "journal");
	for (int i = 0; i < n; i++)
		argv[2 + i] = psprintf(INT64_FORMAT, ids[i]);
	sk_pipeline_add(p, n + 2, argv, NULL);
}

bool
sk_journal_settle_answer(const SkReply *r, const char **why)
{
	return !sk_reply_refused(r, why);
}
