/*-------------------------------------------------------------------------
 *
 * store.h
 *		The worker's side of PostgreSQL: transactions, the group commit of
 *		orders, the compensation log, and campaign reads.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_STORE_H
#define SECKILL_STORE_H

#include "seckill.h"

#include "access/htup.h"
#include "access/xlogdefs.h"
#include "access/tupdesc.h"
#include "nodes/pg_list.h"

/* A reservation Redis granted, on its way into seckill.orders. */
typedef struct SkOrder
{
	int64		id;				/* order id, and the reservation's request id */
	int64		campaign_id;
	const char *user_id;
	int32		qty;
	SeckillStatus outcome;		/* SK_OK once committed, else what to answer */
	char	   *reason;			/* why PostgreSQL refused it */
	int			nshards;		/* the campaign's stock shards */
	int			home;			/* the user's home shard: its buyer entry */
	int			stock_shard;	/* the shard its stock came from */
	int64		held;			/* SK_DUPLICATE: the order the user holds, 0 if none */
} SkOrder;

typedef struct SkCampaignRow
{
	int64		id;
	char		goods[SECKILL_MAX_GOODS_LEN + 1];
	int32		total_stock;
	int32		sold;
	int32		per_user_limit;
	TimestampTz starts_at;
	TimestampTz ends_at;
	char		state[16];
	SeckillLimits limits;
	TimestampTz created_at;
	bool		rebuy_after_cancel;
} SkCampaignRow;

/*
 * A campaign's SeckillLimits as SQL select-list items, in the order
 * store_limits_from_tuple reads them; all but the token secret, which is
 * in seckill.token_secrets.
 */
#define LIMITS_COLUMNS \
	"coalesce(user_rate, 0), coalesce(user_burst, greatest(1, pg_catalog.ceil(user_rate)::int)), " \
	"coalesce(addr_rate, 0), coalesce(addr_burst, greatest(1, pg_catalog.ceil(addr_rate)::int)), " \
	"coalesce(max_in_flight, 0), token_required, " \
	"(extract(epoch FROM token_ttl) * 1000000)::int8, shards"

extern void store_token_secret_copy(const bytea *secret, SeckillLimits *limits);
extern void store_limits_from_tuple(HeapTuple tuple, TupleDesc desc, int first,
									SeckillLimits *limits);

/* Set by store_preheated_campaigns: the installed SQL is older than the library. */
extern bool store_sql_outdated;
/* Set by store_preheated_campaigns: the worker sold from PostgreSQL alone. */
extern bool store_sales_from_database;

extern void store_begin(const char *activity);
extern void store_commit(void);
extern XLogRecPtr store_commit_unflushed(void);
extern void store_abort(void);
extern void store_take_order_ids(int64 *ids, int n, int64 (*record) (int64 first, int64 last));
extern void store_forget_order_ids(void);
extern void store_commit_orders(SkOrder *orders, int n, bool reserved_in_redis);
extern int	store_refuse_rebuyers(SkOrder *orders, int n);
extern void store_log_compensation(int64 request_id, int64 campaign_id,
								   const char *user_id, int qty, const char *reason);
extern bool *store_orders_exist(const int64 *ids, int n);
extern bool *store_have_active_order(int64 campaign_id, const char **users, int n);
extern void store_name_held_orders(SkOrder *orders, int n);
extern bool store_campaign(int64 id, SkCampaignRow *row);
extern List *store_preheated_campaigns(void);
extern void store_set_database_mode(bool on);
extern List *store_buyers_page(int64 campaign_id, bool cancelled, const char *after, int limit);
extern int64 store_buyer_count(int64 campaign_id, bool rebuy_after_cancel);
extern void store_set_state(int64 campaign_id, const char *state);
extern void store_set_limits(int64 campaign_id, const SeckillLimits *limits);
extern bool store_fence_token_needs_block(void);
extern int64 store_fence_token(void);
extern void store_fence(const char *name, int64 token);

/* Orders given back by a cancellation: what Redis must get back. */
typedef struct SkCancelled
{
	int64		campaign_id;
	bool		rebuy;			/* may the buyers buy again? */
	int			qty;			/* total quantity */
	List	   *users;			/* char * */
	List	   *qtys;			/* int: each user's quantity */
	char		status[16];		/* for one order: its status before, or "" if none */
	TimestampTz last_created_at;	/* the last order in (created_at, id) order */
	int64		last_id;
} SkCancelled;

extern void store_cancel_order(int64 order_id, SkCancelled *out);
extern bool store_restock(int64 campaign_id, int delta, SkCampaignRow *row);
extern int	store_release_expired(int64 campaign_id, int limit, TimestampTz after_created_at,
								  int64 after_id, SkCancelled *out);

#endif							/* SECKILL_STORE_H */
