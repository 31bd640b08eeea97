/*-------------------------------------------------------------------------
 *
 * purchase_scripts.h
 *		The purchase path's Lua scripts as typed calls: lua/buy.lua (a
 *		campaign shard's purchases of a round, checked and reserved),
 *		lua/take.lua (stock lent by another shard) and lua/compensate.lua
 *		(a reservation given back); their keys and arguments built, their
 *		replies read into answers.  With them the reservation journal's
 *		plain commands: a shard's journal read, entries settled.
 *
 * The calls go into a pipeline of the caller's (redis/pipeline.h), which
 * sends them; the answers are read from its replies.  What the worker does
 * with an answer is the worker's (worker/purchase.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_PURCHASE_SCRIPTS_H
#define SECKILL_PURCHASE_SCRIPTS_H

#include "redis/pipeline.h"
#include "shared/call.h"
#include "store/store.h"

/* What a script said of one purchase. */
typedef enum SkScriptVerdict
{
	SK_VERDICT_ANSWER,			/* status is the answer (buy.lua), or ok (take.lua) */
	SK_VERDICT_NEED_STOCK,		/* buy.lua: the home shard is short, another may lend */
	SK_VERDICT_EMPTY,			/* take.lua: this shard is short too */
	SK_VERDICT_FENCED,			/* a newer primary sells the campaign */
	SK_VERDICT_NOT_LOADED,		/* Redis lost the campaign (or its shard) */
	SK_VERDICT_MOVING,			/* its Cluster slot is moving: nothing ran */
	SK_VERDICT_UNREACHABLE,		/* its master is down: nothing ran */
	SK_VERDICT_FAILED			/* the script failed or answered what it never does */
} SkScriptVerdict;

typedef struct SkScriptAnswer
{
	SkScriptVerdict verdict;
	SeckillStatus status;		/* SK_VERDICT_ANSWER */
	bool		has_stock;		/* the shard's stock after the call is in stock */
	int64		stock;
	const char *said;			/* the status word it answered, if it answered one */
	const char *text;			/* UNREACHABLE, FAILED: why, for an error */
	bool		unaccounted;	/* FAILED: what the call reserved is not known */
} SkScriptAnswer;

/* A round's calls of lua/buy.lua: one per campaign shard, up to 128 purchases each. */
typedef struct SkBuyCalls SkBuyCalls;

extern SkBuyCalls *sk_buy_calls_new(int max_purchases);
extern void sk_buy_calls_add(SkBuyCalls *calls, const SeckillRequest *req, const SkOrder *order,
							 int64 instance, const char *epoch);
extern void sk_buy_calls_send(SkBuyCalls *calls, SkPipeline *p);
extern void sk_buy_answer(const SkBuyCalls *calls, SkReply *replies, int purchase, SkScriptAnswer *out);

extern void sk_take_send(SkPipeline *p, const SkOrder *order, int shard, const char *epoch);
extern void sk_take_answer(const SkReply *r, SkScriptAnswer *out);

extern void sk_give_back_send(SkPipeline *p, int64 campaign_id, int shard, int nshards,
							  int64 request_id, bool keep_buyer, const char *epoch);
extern bool sk_give_back_answer(const SkReply *r, int64 *stock, const char **why);

/* A shard's journal as read: its entries, and the shard's epoch and mark. */
typedef struct SkJournalEntries
{
	int			n;
	int64	   *ids;			/* the reservations' request ids */
	int		   *qtys;			/* 0: the entry only holds the buyer's place */
	const char **users;			/* NULL for an entry seckill did not write */
	int64		epoch;			/* of the shard's hash; 0 when none */
	const char *stale;			/* its take-over's mark (worker/epoch.c), or NULL */
	const char *refused;		/* why Redis refused a read, or NULL */
	bool		epoch_refused;	/* that read: the epoch and mark's, not the journal's */
} SkJournalEntries;

extern void sk_journal_read_send(SkPipeline *p, int64 campaign_id, int shard, int nshards);
extern void sk_journal_read_answer(SkReply *replies, SkJournalEntries *out);
extern void sk_journal_settle_send(SkPipeline *p, int64 campaign_id, int shard, int nshards,
								   const int64 *ids, int n);
/* Whether the entries were dropped; false, with why, when Redis refused. */
extern bool sk_journal_settle_answer(const SkReply *r, const char **why);

#endif							/* SECKILL_PURCHASE_SCRIPTS_H */
