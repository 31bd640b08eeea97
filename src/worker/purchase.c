/*-------------------------------------------------------------------------
 *
 * purchase.c
 *		The work of each stage of a round of purchases (worker/round.c
 *		moves the rounds through them): reserved in Redis by one pipeline
 *		of EVALSHA calls (the purchases of each campaign's shard checked
 *		and reserved by one call of lua/buy.lua in their home shard, the
 *		short ones lent stock by the next shards); committed with other
 *		staged rounds in one group commit, then their callers answered;
 *		whatever PostgreSQL refused given back.  Every reservation is
 *		journaled in Redis before its commit, so a stop anywhere in a
 *		round is settled by the replay.  Without Redis, the same group
 *		commit sells from PostgreSQL alone.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/purchase.h"

#include "layout/keys.h"
#include "layout/purchase_scripts.h"
#include "redis/redis.h"
#include "shared/campaign_cache.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "store/store.h"
#include "utils/memutils.h"
#include "worker/epoch.h"
#include "worker/journal.h"
#include "worker/order_ids.h"

/*
 * A duplicate's answer: the order the user holds; busy when the user holds
 * none, since PostgreSQL refused the reservation that made them a buyer.
 */
static void
reply_duplicate(SeckillReply *reply, const SkOrder *order)
{
	reply->status = order->held != 0 ? SK_DUPLICATE : SK_BUSY;
	reply->order_id = order->held;
}

/*
 * Redis is unreachable and seckill.redis_unavailable = database: sell from
 * PostgreSQL alone.  The same group commit decides, by the CHECK on sold
 * and the unique index, who gets an item; the sale window was checked by
 * the callers.  Redis knows nothing of these orders: it is rebuilt from
 * PostgreSQL before it takes over again.
 */
void
sk_purchase_from_database(RoundItem **items, int n)
{
	SkOrder    *orders = palloc0(sizeof(SkOrder) * n);
	SkOrder    *sell = palloc(sizeof(SkOrder) * n);
	int		   *sell_from = palloc(sizeof(int) * n);
	int			nsell = 0;
	int64	   *ids = palloc(sizeof(int64) * n);
	bool		entering = !seckill_shared->sales_from_database;

	pg_atomic_fetch_add_u64(&seckill_figures->counters.purchases, n);
	sk_order_ids_take(ids, n);
	for (int i = 0; i < n; i++)
	{
		orders[i].id = ids[i];
		orders[i].campaign_id = items[i]->request.campaign_id;
		orders[i].user_id = items[i]->request.user_id;
		orders[i].qty = items[i]->request.qty;
	}
	store_begin("seckill: commit orders without Redis");
	/* durable before the first order Redis does not know of */
	if (entering)
		store_set_database_mode(true);
	/* what Redis' buyers would refuse, the rest to the group commit (in id order) */
	if (store_refuse_rebuyers(orders, n) == 0)
		store_commit_orders(orders, n, false);
	else
	{
		for (int i = 0; i < n; i++)
			if (orders[i].outcome != SK_DUPLICATE)
			{
				sell_from[nsell] = i;
				sell[nsell++] = orders[i];
			}
		if (nsell > 0)
			store_commit_orders(sell, nsell, false);
		for (int i = 0; i < nsell; i++)
			orders[sell_from[i]] = sell[i];
	}
	store_name_held_orders(orders, n);
	store_commit();
	if (entering)
	{
		seckill_shared->sales_from_database = true;
		ereport(LOG,
				(errmsg("seckill worker sells from PostgreSQL alone while Redis is unreachable: %s",
						sk_redis_error())));
	}
	pg_atomic_fetch_add_u64(&seckill_figures->counters.commits, 1);
	for (int i = 0; i < n; i++)
	{
		items[i]->reply.status = orders[i].outcome;
		if (orders[i].outcome == SK_OK)
			items[i]->reply.order_id = orders[i].id;
		else if (orders[i].outcome == SK_DUPLICATE)
			reply_duplicate(&items[i]->reply, &orders[i]);
		else if (orders[i].outcome == SK_SOLD_OUT && orders[i].qty == 1)
			seckill_campaign_note_sold_out(orders[i].campaign_id);
		sk_answer(items[i]);
	}
}

/*
 * A script refused the purchase: a newer primary sells the campaign.  The
 * worker stops selling; what Redis holds is the newer primary's to settle.
 */
static void
fenced(RoundItem *item)
{
	sk_epoch_fence("a purchase was refused");
	sk_journal_lost();
	sk_epoch_reply_fenced(&item->reply);
}

/*
 * A purchase a script did not serve: its answer, busy or an error; its
 * campaign fenced, or rebuilt after the round.
 */
static void
not_served(RoundItem *item, const SkScriptAnswer *a, int64 *rebuild, int *nrebuild)
{
	SeckillReply *reply = &item->reply;

	switch (a->verdict)
	{
		case SK_VERDICT_MOVING:
			/* its slot is moving between masters of the Redis Cluster: nothing ran */
			reply->status = SK_BUSY;
			break;
		case SK_VERDICT_UNREACHABLE:
			/* its master is down: nothing ran */
			seckill_reply_error(reply, SK_ERR_REDIS, "%s", a->text);
			break;
		case SK_VERDICT_FENCED:
			fenced(item);
			break;
		case SK_VERDICT_NOT_LOADED:
			/* Redis lost the campaign or the shard: rebuilt from PostgreSQL after this round */
			reply->status = SK_BUSY;
			rebuild[(*nrebuild)++] = item->request.campaign_id;
			break;
		default:
			/* failed, or a word that script never says there */
			seckill_reply_error(reply, SK_ERR_REDIS_REFUSED, "%s",
								a->text ? a->text : psprintf("the script answered \"%s\"", a->said));
			break;
	}
}

static int
purchase_cmp(const void *a, const void *b)
{
	int64		x = ((const Purchase *) a)->order.id;
	int64		y = ((const Purchase *) b)->order.id;

	return x < y ? -1 : x > y;
}

/*
 * The purchases whose home shard had too little stock: each asks the next
 * shard round the ring (lua/take.lua), all of them in one pipeline per step,
 * until one lends the stock or none is left.  Those served join accepted;
 * the others get their answer once their place in the home shard is given
 * back.  When Redis fails, those still waiting for stock get an error, and
 * the replay settles whatever was done.
 */
static void
take_elsewhere(Purchase *pending, int npending, Purchase *accepted, int *naccepted,
			   int64 *rebuild, int *nrebuild)
{
	Purchase   *done = palloc(sizeof(Purchase) * npending);
	int			ndone = 0;
	SkPipeline	p;
	SkReply    *r;

	for (int step = 1; npending > 0; step++)
	{
		int			nsent = 0,
					nleft = 0;

		sk_pipeline_init(&p);
		for (int i = 0; i < npending; i++)
		{
			SkOrder    *o = &pending[i].order;
			int			shard = (o->home + step) % o->nshards;

			if (step >= o->nshards)
			{
				/* every shard is short: sold out, exactly */
				pending[i].item->reply.status = SK_SOLD_OUT;
				done[ndone++] = pending[i];
				continue;
			}
			o->stock_shard = shard;
			sk_take_send(&p, o, shard, sk_epoch_arg());
			pending[nsent++] = pending[i];
		}
		if (nsent == 0)
			break;
		r = sk_pipeline_exec(&p);
		if (r == NULL)
		{
			sk_journal_lost();
			for (int i = 0; i < nsent; i++)
			{
				seckill_reply_error(&pending[i].item->reply, SK_ERR_REDIS, "%s", sk_redis_error());
				done[ndone++] = pending[i];
			}
			break;
		}
		for (int i = 0; i < nsent; i++)
		{
			SkOrder    *o = &pending[i].order;
			SeckillReply *reply = &pending[i].item->reply;
			SkScriptAnswer a;

			sk_take_answer(&r[i], &a);
			if (a.has_stock)
				seckill_campaign_note_stock(o->campaign_id, o->stock_shard, a.stock);
			switch (a.verdict)
			{
				case SK_VERDICT_ANSWER:
					if (a.status == SK_OK)
					{
						accepted[(*naccepted)++] = pending[i];
						continue;
					}
					reply->status = a.status;	/* ended: closed meanwhile */
					break;
				case SK_VERDICT_EMPTY:
					pending[nleft++] = pending[i];
					continue;
				default:
					not_served(pending[i].item, &a, rebuild, nrebuild);
					break;
			}
			done[ndone++] = pending[i];
		}
		npending = nleft;
	}

	/* their place in the home shard goes (or the replay drops it), then they hear */
	if (!sk_journal_needs_replay() && ndone > 0)
	{
		sk_pipeline_init(&p);
		for (int i = 0; i < ndone; i++)
			sk_journal_add_give_back(&p, &done[i].order, done[i].order.home, false);
		if (sk_pipeline_exec(&p) == NULL)
			sk_journal_lost();
	}
	for (int i = 0; i < ndone; i++)
		sk_answer(done[i].item);
}

/*
 * The round's purchases go to Redis: one pipeline of lua/buy.lua calls, one
 * per campaign shard, after the settles of the orders committed before
 * (their journal entries dropped).  The requests are copied into the round,
 * each with an order id, taken in advance for all of them.
 */
void
sk_purchase_reserve(Round *r, RoundItem **items, int n)
{
	MemoryContext old;
	int64	   *ids;

	Assert(r->stage == ROUND_EMPTY);
	if (r->cxt == NULL)
		r->cxt = AllocSetContextCreate(TopMemoryContext, "seckill round of purchases", ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(r->cxt);
	r->n = n;
	r->items = palloc(sizeof(RoundItem) * n);
	r->all = palloc0(sizeof(Purchase) * n);
	r->calls = sk_buy_calls_new(n);
	pg_atomic_fetch_add_u64(&seckill_figures->counters.purchases, n);
	ids = palloc(sizeof(int64) * n);
	sk_order_ids_take(ids, n);

	sk_pipeline_init(&r->pipeline);
	(void) sk_journal_add_settles(&r->pipeline);
	for (int i = 0; i < n; i++)
	{
		SeckillRequest *req = &r->items[i].request;
		SkOrder    *o = &r->all[i].order;
		SeckillCampaign *c;

		r->items[i] = *items[i];
		c = seckill_campaign_find(req->campaign_id);
		r->all[i].item = &r->items[i];
		o->id = ids[i];
		o->campaign_id = req->campaign_id;
		o->user_id = req->user_id;
		o->qty = req->qty;
		o->nshards = Max(req->shards, 1);
		o->home = o->stock_shard = sk_keys_home_shard(req->user_id, o->nshards);
		sk_buy_calls_add(r->calls, req, o, c ? c->row.created_at : 0, sk_epoch_arg());
	}
	sk_buy_calls_send(r->calls, &r->pipeline);
	r->flight = sk_pipeline_send(&r->pipeline);
	r->stage = ROUND_RESERVING;
	MemoryContextSwitchTo(old);
}

/*
 * Read what Redis said of the round's purchases: each one is answered now,
 * or lent stock by another shard, or staged for the commit with the
 * duplicates (by order id: the group commit wants them so).  The round is
 * then staged, or empty when nothing is left to commit.  When Redis failed,
 * every purchase of the round is answered with its error.
 */
void
sk_purchase_receive(Round *r, int64 *rebuild, int *nrebuild)
{
	MemoryContext old = MemoryContextSwitchTo(r->cxt);
	SkReply    *replies;
	Purchase   *accepted = palloc(sizeof(Purchase) * r->n);
	Purchase   *pending = palloc(sizeof(Purchase) * r->n);
	int			naccepted = 0,
				npending = 0;

	Assert(r->stage == ROUND_RESERVING);
	*nrebuild = 0;
	r->dup_items = palloc(sizeof(RoundItem *) * r->n);
	r->dup_orders = palloc0(sizeof(SkOrder) * r->n);
	replies = sk_pipeline_receive(r->flight);
	if (replies == NULL)
	{
		/* Some reservations may have been made: the replay gives them back. */
		sk_journal_lost();
		for (int i = 0; i < r->n; i++)
		{
			seckill_reply_error(&r->items[i].reply, SK_ERR_REDIS,
								"%s; no purchase of this request was made", sk_redis_error());
			sk_answer(&r->items[i]);
		}
		MemoryContextSwitchTo(old);
		sk_purchase_empty(r);
		return;
	}

	for (int i = 0; i < r->n; i++)
	{
		RoundItem  *item = &r->items[i];
		SkOrder    *o = &r->all[i].order;
		SkScriptAnswer a;

		sk_buy_answer(r->calls, replies, i, &a);
		if (a.unaccounted)
			sk_journal_lost();	/* whatever it reserved is settled by the replay */
		switch (a.verdict)
		{
			case SK_VERDICT_ANSWER:
				item->reply.status = a.status;
				if (a.status == SK_OK || a.status == SK_SOLD_OUT)
					seckill_campaign_note_stock(o->campaign_id, o->home, a.stock);
				if (a.status == SK_OK)
					accepted[naccepted++] = r->all[i];
				else if (a.status == SK_DUPLICATE)
				{
					r->dup_orders[r->ndups].campaign_id = o->campaign_id;
					r->dup_orders[r->ndups].user_id = o->user_id;
					r->dup_orders[r->ndups].outcome = SK_DUPLICATE;
					r->dup_items[r->ndups++] = item;
				}
				else
					sk_answer(item);
				continue;
			case SK_VERDICT_NEED_STOCK:
				seckill_campaign_note_stock(o->campaign_id, o->home, a.stock);
				pending[npending++] = r->all[i];
				continue;
			default:
				not_served(item, &a, rebuild, nrebuild);
				break;
		}
		sk_answer(item);
	}
	if (npending > 0)
		take_elsewhere(pending, npending, accepted, &naccepted, rebuild, nrebuild);

	/* the group commit wants them by id; those served by other shards came last */
	qsort(accepted, naccepted, sizeof(Purchase), purchase_cmp);
	r->orders = palloc(sizeof(SkOrder) * Max(naccepted, 1));
	r->order_items = palloc(sizeof(RoundItem *) * Max(naccepted, 1));
	for (int i = 0; i < naccepted; i++)
	{
		r->orders[i] = accepted[i].order;
		r->order_items[i] = accepted[i].item;
	}
	r->norders = naccepted;
	MemoryContextSwitchTo(old);
	if (r->norders > 0 || r->ndups > 0)
		r->stage = ROUND_STAGED;
	else
		sk_purchase_empty(r);
}

/*
 * Commit the staged rounds' orders in one transaction (they are in id
 * order, round after round) and answer their callers; the journal entries
 * of the committed ones are dropped by a later pipeline.  The commit waits
 * for its WAL flush (and a synchronous standby, where one must confirm
 * it), so that "ok" means durable; it runs while the next round's pipeline
 * is in Redis, and the longer it takes, the more requests the next round
 * gathers: one flush serves them all.  (Callers that flushed the WAL
 * themselves, the worker going on at once, measured more context switches
 * and CPU a purchase: smaller rounds, more flushes, and a wake-up more for
 * each.)  Uses no Redis: it may run while a pipeline is in flight.
 */
void
sk_purchase_commit(Round **rounds, int nrounds)
{
	SkOrder    *orders;
	SkOrder    *dups;
	int			n = 0,
				nd = 0;

	for (int k = 0; k < nrounds; k++)
	{
		Assert(rounds[k]->stage == ROUND_STAGED);
		n += rounds[k]->norders;
		nd += rounds[k]->ndups;
	}
	/* one round's orders are committed in place; more rounds' together */
	orders = nrounds == 1 ? rounds[0]->orders : palloc(sizeof(SkOrder) * Max(n, 1));
	dups = nrounds == 1 ? rounds[0]->dup_orders : palloc(sizeof(SkOrder) * Max(nd, 1));
	if (nrounds > 1)
		for (int k = 0, i = 0, j = 0; k < nrounds; k++)
		{
			memcpy(&orders[i], rounds[k]->orders, sizeof(SkOrder) * rounds[k]->norders);
			memcpy(&dups[j], rounds[k]->dup_orders, sizeof(SkOrder) * rounds[k]->ndups);
			i += rounds[k]->norders;
			j += rounds[k]->ndups;
		}

	if (n > 0)
		seckill_crash_if(SK_CRASH_AFTER_RESERVE);
	store_begin("seckill: commit orders");
	if (n > 0)
	{
		store_commit_orders(orders, n, true);
		store_name_held_orders(orders, n);
	}
	store_name_held_orders(dups, nd);
	store_commit();
	if (nrounds > 1)
		for (int k = 0, i = 0, j = 0; k < nrounds; k++)
		{
			memcpy(rounds[k]->orders, &orders[i], sizeof(SkOrder) * rounds[k]->norders);
			memcpy(rounds[k]->dup_orders, &dups[j], sizeof(SkOrder) * rounds[k]->ndups);
			i += rounds[k]->norders;
			j += rounds[k]->ndups;
		}
	for (int k = 0; k < nrounds; k++)
		rounds[k]->stage = ROUND_COMMITTED;
	if (n > 0)
	{
		pg_atomic_fetch_add_u64(&seckill_figures->counters.commits, 1);
		seckill_crash_if(SK_CRASH_AFTER_COMMIT);
	}
	for (int i = 0; i < n; i++)
		if (orders[i].outcome == SK_OK)
			sk_journal_settle(&orders[i]);
	if (sk_redis_in_flight())
		seckill_crash_if(SK_CRASH_OVERLAPPED);
	else if (seckill_crash_point == SK_CRASH_BEFORE_WAKE)
	{
		sk_journal_flush_settles();
		seckill_crash_if(SK_CRASH_BEFORE_WAKE);
	}
	for (int k = 0; k < nrounds; k++)
	{
		Round	   *r = rounds[k];

		for (int i = 0; i < r->norders; i++)
		{
			SeckillReply *reply = &r->order_items[i]->reply;

			reply->status = r->orders[i].outcome;
			if (r->orders[i].outcome == SK_OK)
				reply->order_id = r->orders[i].id;
			else if (r->orders[i].outcome == SK_DUPLICATE)
				reply_duplicate(reply, &r->orders[i]);
			sk_answer(r->order_items[i]);
		}
		for (int i = 0; i < r->ndups; i++)
		{
			reply_duplicate(&r->dup_items[i]->reply, &r->dup_orders[i]);
			sk_answer(r->dup_items[i]);
		}
	}
}

/* What PostgreSQL refused of the committed round goes back to Redis; the round empties. */
void
sk_purchase_give_back(Round *r)
{
	Assert(r->stage == ROUND_COMMITTED);
	/* (the compensations logged with the orders are durable: committed before) */
	sk_journal_give_back(r->orders, r->norders);
	sk_purchase_empty(r);
}

/*
 * Free the round for the next one.  After an error broke a round off, its
 * callers are answered with it by the error boundary, and the replay
 * settles what Redis reserved for them: their journal entries stay.
 */
void
sk_purchase_empty(Round *r)
{
	MemoryContext cxt = r->cxt;

	memset(r, 0, sizeof(Round));
	r->cxt = cxt;
	r->stage = ROUND_EMPTY;
	if (cxt)
		MemoryContextReset(cxt);
}
