/*-------------------------------------------------------------------------
 *
 * store.h
 *		seckill's side of PostgreSQL, the worker's and the backends': every
 *		statement against seckill's tables, and the look-ups of its tables
 *		and functions, one file a table (store.c: transactions; campaigns.c;
 *		orders.c, with the compensation log; fences.c; queue.c, the
 *		waiting lines).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_STORE_H
#define SECKILL_STORE_H

#include "campaign.h"

#include "access/xlogdefs.h"
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

/* store.c: the worker's transactions */
extern void store_begin(const char *activity);
extern void store_commit(void);
extern void store_abort(void);
/* store.c: a backend's statements, under an empty search_path */
extern int	store_backend_spi_begin(void);
extern void store_backend_spi_end(int level);

/* campaigns.c */
/* Set by store_preheated_campaigns: the installed SQL is older than the library. */
extern bool store_sql_outdated;
/* Set by store_preheated_campaigns: the worker sold from PostgreSQL alone. */
extern bool store_sales_from_database;

extern bool store_campaign(int64 id, SeckillCampaignRow *row);
extern bool store_campaign_by_goods(const char *goods, SeckillCampaignRow *row);
extern List *store_preheated_campaigns(void);
extern void store_token_secret_load(int64 campaign_id, SeckillLimits *limits);
extern void store_set_database_mode(bool on);
extern bool store_epoch_state(int64 *fenced_by, int64 *recorded, bool *had_standby);
extern void store_remember_fence(int64 timeline);
extern void store_remember_epoch(int64 timeline, bool had_standby);
extern List *store_buyers_page(int64 campaign_id, bool cancelled, const char *after, int limit);
extern int64 store_buyer_count(int64 campaign_id, bool rebuy_after_cancel);
extern void store_set_state(int64 campaign_id, const char *state);
extern void store_set_limits(int64 campaign_id, const SeckillLimits *limits);
extern bool store_restock(int64 campaign_id, int delta, SeckillCampaignRow *row);

/* fences.c */
extern bool store_fence_token_needs_block(void);
extern int64 store_fence_token(void);
extern void store_fence(const char *name, int64 token);

/* group_commit.c */
extern void store_commit_orders(SkOrder *orders, int n, bool reserved_in_redis);

/* orders.c */
/* seckill.order_ids hands out blocks of this many ids (its INCREMENT BY) */
#define SK_ORDER_ID_BLOCK 1000
extern int64 store_order_id_block(void);
extern void store_skip_order_ids(int64 id);
extern int	store_refuse_rebuyers(SkOrder *orders, int n);
extern void store_log_compensation(int64 request_id, int64 campaign_id,
								   const char *user_id, int qty, const char *reason);
extern bool *store_orders_exist(const int64 *ids, int n);
extern bool *store_have_active_order(int64 campaign_id, const char **users, int n);
extern void store_name_held_orders(SkOrder *orders, int n);

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
extern int	store_release_expired(int64 campaign_id, int limit, TimestampTz after_created_at,
								  int64 after_id, SkCancelled *out);

/* An order's fate, as seckill_order() tells it. */
typedef struct SkOrderFate
{
	char		status[16];		/* reserved, paid or cancelled; "" for none */
	int64		id;
	int32		qty;
	TimestampTz created_at;
} SkOrderFate;

/* orders.c, for backends */
extern int64 store_held_order(int64 campaign_id, const char *user_id);
extern bool store_order_fate(int64 campaign_id, const char *user_id, SkOrderFate *fate);

/* queue.c: the waiting lines */
/* A buyer's place in a line, as a backend reads it. */
typedef struct SkQueuePlace
{
	int64		ticket;			/* 0: none yet (joined before the start) */
	TimestampTz admitted_at;	/* 0: not admitted */
	bool		bought;			/* the user has an order in the campaign, of any status */
	bool		holds_order;	/* ... that is not cancelled */
} SkQueuePlace;

extern void store_queue_line(int64 campaign_id, SeckillLine *line);
extern void store_queue_line_now(int64 campaign_id, SeckillLine *line);
/* A join of a round, to a line (store_queue_places_held, store_queue_give_places). */
typedef struct SkJoin
{
	int64		campaign_id;
	const char *user_id;
	int64		ticket;			/* the user's (0: none until the draw) */
	bool		held;			/* the user had a place before */
	bool		joined;			/* the place is new, with this ticket */
} SkJoin;

extern void store_queue_places_held(SkJoin *joins, int n);
extern void store_queue_give_places(const SkJoin *joins, int n, TimestampTz now);
extern int64 store_queue_draw(int64 campaign_id, int64 after, int64 seed);
extern void store_queue_capacity(int64 campaign_id, TimestampTz live_since,
								 int64 *stock_left, int64 *live_passes);
extern int64 store_queue_expired(int64 campaign_id, TimestampTz live_since);
extern int	store_queue_tickets(int64 campaign_id, int64 after, int limit, char ***users,
								int64 **tickets);
extern void store_queue_admit(int64 campaign_id, int64 after, int64 through, TimestampTz now);
extern bool store_queue_place(int64 campaign_id, const char *user_id, SkQueuePlace *place);

#endif							/* SECKILL_STORE_H */
