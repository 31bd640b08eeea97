/*-------------------------------------------------------------------------
 *
 * journal.c
 *		The reservation journal in Redis, and its single owner in the
 *		worker: every reservation Redis granted stays journaled until it is
 *		settled, as an order (the entry is dropped) or a give-back (logged
 *		in PostgreSQL, then its stock returned in Redis; both idempotent
 *		under the request id, so a crash between them is harmless).
 *
 * Settling a committed order's entry is deferred to the head of the next
 * round's pipeline, so a busy round costs one Redis round trip; until then
 * the journal over-counts, never under-counts.  The replay settles whatever
 * a failed round trip, a restart or a new connection left.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/journal.h"

#include "layout/keys.h"
#include "layout/purchase_scripts.h"
#include "miscadmin.h"
#include "redis/redis.h"
#include "shared/campaign_cache.h"
#include "shared/stats.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "worker/epoch.h"
#include "worker/lease.h"
#include "worker/worker_state.h"

/* A replay Redis refused is tried again this much later, on the same connection. */
#define REPLAY_RETRY_MS 1000

/*
 * Campaigns whose replay Redis refused (an entry it cannot read, a master
 * over maxmemory, an ACL): they do not sell, and their replay is tried
 * again once a second, while the other campaigns sell.
 */
typedef struct Blocked
{
	int64		campaign_id;
	char		why[SK_MESSAGE_LEN];
} Blocked;

void
sk_journal_init(void)
{
	/* up to two journal entries per purchase: home shard, and the one lending stock */
	sk_worker.journal.max_settled = 2 * seckill_slot_count();
	sk_worker.journal.settled = MemoryContextAlloc(TopMemoryContext,
												   sizeof(SkOrder) * sk_worker.journal.max_settled);
	sk_worker.journal.blocked = MemoryContextAlloc(TopMemoryContext,
												   sizeof(Blocked) * seckill_max_campaigns);
}

static int
blocked_index(int64 id)
{
	for (int i = 0; i < sk_worker.journal.nblocked; i++)
		if (sk_worker.journal.blocked[i].campaign_id == id)
			return i;
	return -1;
}

/* The campaign's replay was refused: it waits for the next attempt. */
static void
block(int64 id, const char *why)
{
	int			i = blocked_index(id);

	if (i < 0)
	{
		if (sk_worker.journal.nblocked == seckill_max_campaigns)
			return;				/* more than are preheated: left to the next full replay */
		i = sk_worker.journal.nblocked++;
		sk_worker.journal.blocked[i].campaign_id = id;
		ereport(LOG,
				(errmsg("seckill worker could not replay the journal of campaign " INT64_FORMAT ": %s", id, why),
				 errdetail("The campaign does not sell until its replay succeeds; it is tried again every second, and the other campaigns sell meanwhile.")));
	}
	strlcpy(sk_worker.journal.blocked[i].why, why, sizeof(sk_worker.journal.blocked[i].why));
	sk_worker.journal.blocked_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REPLAY_RETRY_MS);
}

static void
unblock(int64 id)
{
	int			i = blocked_index(id);

	if (i < 0)
		return;
	sk_worker.journal.blocked[i] = sk_worker.journal.blocked[--sk_worker.journal.nblocked];
	ereport(LOG, (errmsg("seckill worker replayed the journal of campaign " INT64_FORMAT ": it sells again", id)));
}

/* Does the campaign wait for its replay?  Then *why says why it failed. */
bool
sk_journal_blocked(int64 id, const char **why)
{
	int			i = sk_worker.journal.nblocked > 0 ? blocked_index(id) : -1;

	if (i < 0)
		return false;
	*why = sk_worker.journal.blocked[i].why;
	return true;
}

/* Milliseconds until the refused replays are tried again: -1 when there are none. */
long
sk_journal_retry_wait(void)
{
	long		ms;

	if (sk_worker.journal.nblocked == 0)
		return -1;
	ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), sk_worker.journal.blocked_retry_at);
	return ms > 0 ? ms : 0;
}

/* Once a second: the replays Redis refused, tried again. */
void
sk_journal_retry_blocked(void)
{
	int64	   *ids;
	int			n = sk_worker.journal.nblocked;

	if (n == 0 || GetCurrentTimestamp() < sk_worker.journal.blocked_retry_at)
		return;
	sk_worker.journal.blocked_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REPLAY_RETRY_MS);
	if (!sk_journal_ready())
		return;					/* a new connection replays them all */
	ids = palloc(sizeof(int64) * n);
	for (int i = 0; i < n; i++)
		ids[i] = sk_worker.journal.blocked[i].campaign_id;
	for (int i = 0; i < n; i++)
	{
		if (sk_journal_replay_campaign(ids[i], NULL, NULL))
			unblock(ids[i]);
		else if (!sk_redis_connected() || sk_epoch_fenced())
			return;				/* a new connection replays them all */
		else
			block(ids[i], sk_redis_error());
	}
}

/* A round trip failed: Redis may hold reservations nobody settled. */
void
sk_journal_lost(void)
{
	sk_worker.journal.needs_replay = true;
}

/* Check the epoch and replay at the next sk_journal_ready(), without waiting. */
void
sk_journal_replay_now(void)
{
	sk_worker.journal.needs_replay = true;
	sk_worker.journal.replay_due = 0;
}

/* Check the epoch at the next sk_journal_ready() (Redis may have lost it). */
void
sk_journal_check_epoch(void)
{
	sk_worker.journal.epoch_due = true;
}

bool
sk_journal_needs_replay(void)
{
	return sk_worker.journal.needs_replay;
}

bool
sk_journal_has_settles(void)
{
	return sk_worker.journal.nsettled > 0;
}

/* The campaign's stock shards: from the cache, else from PostgreSQL. */
int
sk_journal_campaign_shards(int64 id)
{
	SeckillCampaign *c = seckill_campaign_find(id);
	SeckillCampaignRow row;
	bool		found;

	if (c != NULL)
		return Max(c->row.limits.shards, 1);
	store_begin("seckill: read campaign");
	found = store_campaign(id, &row);
	store_commit();
	return found ? Max(row.limits.shards, 1) : 1;
}

/*
 * Redis answered with an error (NOPERM, OOM, MOVED...): the replay failed
 * and is tried again a second later, on the same connection (an error reply
 * is not a broken connection; those that mean "not a master" drop it in
 * redis/failover.c).
 */
static bool
redis_refused(const char *what, const char *why)
{
	sk_redis_refused(psprintf("Redis refused %s: %s", what, why));
	sk_worker.journal.replay_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), REPLAY_RETRY_MS);
	return false;
}

/*
 * Settle every journal entry of one shard of a campaign, and count the
 * reservations of stock among them (an entry of quantity 0 only holds the
 * buyer's place in its home shard while another shard lends the stock).
 * False when Redis failed (nothing is lost: the next replay takes over).
 */
static bool
replay_shard(int64 id, int shard, int nshards, int *committed, int *compensated)
{
	SkPipeline	p;
	SkReply    *r;
	SkJournalEntries j;
	const char **users;
	bool	   *exists;
	bool	   *active;
	int			ncommitted = 0,
				ncompensated = 0;
	const char *reason = "not committed: replayed from the Redis journal";

	sk_pipeline_init(&p);
	sk_journal_read_send(&p, id, shard, nshards);
	r = sk_pipeline_exec(&p);
	if (r == NULL)
		return false;
	sk_journal_read_answer(r, &j);
	if (j.refused)
		return redis_refused(j.epoch_refused ? "reading the campaign's epoch" : "reading the journal",
							 j.refused);
	/* the journal of a newer primary's campaign is its own to settle */
	if (j.epoch > strtoll(sk_epoch_arg(), NULL, 10))
	{
		sk_epoch_fence("a journal replay");
		return false;
	}
	/* marked stale by a take-over (worker/epoch.c): say which */
	if (j.stale != NULL)
		reason = strcmp(j.stale, "promotion") == 0 ?
			"lost in a failover: not committed on the promoted primary" :
			"not committed: replayed from the Redis journal after a change of Redis master";
	if (j.n == 0)
		return true;

	users = palloc(sizeof(char *) * j.n);
	for (int i = 0; i < j.n; i++)
		users[i] = j.users[i] ? j.users[i] : "";
	store_begin("seckill: replay journal");
	exists = store_orders_exist(j.ids, j.n);
	/* a user with another, committed order stays a buyer in Redis */
	active = store_have_active_order(id, users, j.n);
	for (int i = 0; i < j.n; i++)
	{
		if (exists[i] || j.users[i] == NULL || j.qtys[i] == 0)
			continue;
		store_log_compensation(j.ids[i], id, j.users[i], j.qtys[i], reason);
	}
	store_commit();

	sk_pipeline_init(&p);
	for (int i = 0; i < j.n; i++)
	{
		bool		stock = j.qtys[i] > 0;

		if (exists[i])
		{
			sk_journal_settle_send(&p, id, shard, nshards, &j.ids[i], 1);
			ncommitted += stock;
		}
		else
		{
			sk_give_back_send(&p, id, shard, nshards, j.ids[i], active[i], sk_epoch_arg());
			ncompensated += stock;
		}
	}
	r = sk_pipeline_exec(&p);
	if (r == NULL)
		return false;
	for (int i = 0; i < j.n; i++)
	{
		int64		left;
		const char *why;

		if (exists[i] ? !sk_journal_settle_answer(&r[i], &why) :
			!sk_give_back_answer(&r[i], &left, &why))
			return redis_refused("settling the journal", why);
		if (!exists[i])
			seckill_campaign_note_stock(id, shard, left);
	}
	seckill_stats_compensated(id, ncompensated);
	ereport(LOG,
			(errmsg("seckill worker replayed the journal of campaign " INT64_FORMAT " (shard %d of %d): %d committed, %d given back",
					id, shard, nshards, ncommitted, ncompensated)));
	*committed += ncommitted;
	*compensated += ncompensated;
	return true;
}

/* Settle the journals of every shard of a campaign.  False when Redis failed. */
bool
sk_journal_replay_campaign(int64 id, int *committed, int *compensated)
{
	int			nshards = sk_journal_campaign_shards(id);
	int			ncommitted = 0,
				ncompensated = 0;

	for (int shard = 0; shard < nshards; shard++)
	{
		sk_lease_keep();
		if (!replay_shard(id, shard, nshards, &ncommitted, &ncompensated))
			return false;
	}
	if (committed)
		*committed = ncommitted;
	if (compensated)
		*compensated = ncompensated;
	return true;
}

/*
 * Is every shard of the campaign on a master the worker reaches?  (In a
 * Redis Cluster one may be down; its campaigns wait, nothing can reach them.)
 */
bool
sk_journal_campaign_served(int64 id)
{
	int			nshards = sk_journal_campaign_shards(id);

	for (int shard = 0; shard < nshards; shard++)
		if (!sk_redis_serves(sk_keys_shard(id, shard, nshards, "meta")))
			return false;
	return true;
}

/*
 * Replay the journals of every preheated campaign, but those in the slots
 * of a Redis Cluster master that is down: nothing can reach them.  A
 * campaign whose replay Redis refuses is blocked alone.  False when Redis
 * failed, or when the SQL is outdated (the campaigns cannot be read yet).
 */
static bool
replay_all(void)
{
	List	   *rows = store_preheated_campaigns();
	ListCell   *lc;
	int			unreached = 0;

	if (store_sql_outdated)
		return false;

	foreach(lc, rows)
	{
		SeckillCampaignRow *row = lfirst(lc);

		if (!sk_journal_campaign_served(row->id))
			unreached++;
		else if (sk_journal_replay_campaign(row->id, NULL, NULL))
			unblock(row->id);
		else if (!sk_redis_connected() || sk_epoch_fenced())
			return false;
		else
			block(row->id, sk_redis_error());
	}
	if (unreached > 0)
		ereport(LOG,
				(errmsg("seckill worker left the journals of %d campaign(s) on Redis Cluster masters it cannot reach",
						unreached),
				 errdetail("They are replayed once those masters are back or replaced; meanwhile those campaigns do not sell.")));
	return true;
}

/*
 * Connected to Redis, with its journals replayed since this connection was
 * made?  Purchases and admin work wait for both.
 */
bool
sk_journal_ready(void)
{
	/* a fence remembered in PostgreSQL holds with or without Redis */
	sk_epoch_recall();
	if (!sk_redis_connect())
		return false;
	if (sk_worker.journal.needs_replay || sk_worker.journal.replayed_generation != sk_redis_generation())
	{
		/* fenced until the worker restarts */
		if (sk_epoch_fenced())
			return false;
		if (sk_worker.journal.replayed_generation == sk_redis_generation() &&
			GetCurrentTimestamp() < sk_worker.journal.replay_due)
			return false;
		if (!sk_epoch_check() || !replay_all())
		{
			sk_journal_lost();
			return false;
		}
		sk_worker.journal.needs_replay = false;
		sk_worker.journal.replayed_generation = sk_redis_generation();
		sk_redis_proven();
		sk_worker.journal.nsettled = 0; /* the replay dropped their entries */
		sk_worker.journal.epoch_due = false;
	}
	else if (sk_worker.journal.epoch_due)
	{
		sk_worker.journal.epoch_due = false;
		if (!sk_epoch_recheck())
		{
			sk_journal_lost();
			return false;
		}
	}
	return true;
}

/* Why sk_journal_ready() said no, as a reply. */
void
sk_journal_not_ready(SeckillReply *reply)
{
	if (sk_epoch_fenced() || sk_epoch_lost())
		sk_epoch_reply_fenced(reply);
	else
		seckill_reply_error(reply, SK_ERR_REDIS, "%s", sk_redis_error());
}

static void
defer_settle_in(const SkOrder *order, int shard)
{
	SkOrder    *s;

	if (sk_worker.journal.nsettled == sk_worker.journal.max_settled && !sk_redis_in_flight())
		sk_journal_flush_settles();
	if (sk_worker.journal.nsettled == sk_worker.journal.max_settled)
	{
		/* Redis failed, or a pipeline is out: the replay drops them */
		sk_worker.journal.nsettled = 0;
		sk_journal_lost();
	}
	s = &sk_worker.journal.settled[sk_worker.journal.nsettled++];
	s->campaign_id = order->campaign_id;
	s->id = order->id;
	s->home = shard;
	s->nshards = order->nshards;
}

/* A committed order's journal entries: in its home shard, and where its stock came from. */
void
sk_journal_settle(const SkOrder *order)
{
	defer_settle_in(order, order->home);
	if (order->stock_shard != order->home)
		defer_settle_in(order, order->stock_shard);
}

/* Add one HDEL per journal for the deferred entries; returns the count. */
int
sk_journal_add_settles(SkPipeline *p)
{
	const SkOrder *settled = sk_worker.journal.settled;
	int			nsettled = sk_worker.journal.nsettled;
	int			ncommands = 0;
	int64	   *ids = palloc(sizeof(int64) * Max(nsettled, 1));
	bool	   *done = palloc0(sizeof(bool) * Max(nsettled, 1));

	for (int i = 0; i < nsettled; i++)
	{
		int			n = 0;

		if (done[i])
			continue;
		for (int j = i; j < nsettled; j++)
		{
			if (done[j] || settled[j].campaign_id != settled[i].campaign_id ||
				settled[j].home != settled[i].home)
				continue;
			ids[n++] = settled[j].id;
			done[j] = true;
		}
		sk_journal_settle_send(p, settled[i].campaign_id, settled[i].home, settled[i].nshards, ids, n);
		ncommands++;
	}
	sk_worker.journal.nsettled = 0;
	return ncommands;
}

void
sk_journal_flush_settles(void)
{
	SkPipeline	p;

	if (sk_worker.journal.nsettled == 0)
		return;
	sk_pipeline_init(&p);
	sk_journal_add_settles(&p);
	if (sk_pipeline_exec(&p) == NULL)
		sk_journal_lost();
}

/*
 * Add a give-back (lua/compensate.lua) of an order's journal entry in one
 * shard: its stock, and its buyer unless keep.
 */
void
sk_journal_add_give_back(SkPipeline *p, const SkOrder *order, int shard, bool keep)
{
	sk_give_back_send(p, order->campaign_id, shard, order->nshards, order->id, keep, sk_epoch_arg());
}

/*
 * Give back, at once, the reservations PostgreSQL refused: the stock to its
 * shard, and the buyer's place in its home shard (kept when PostgreSQL
 * refused a duplicate).
 */
void
sk_journal_give_back(SkOrder *orders, int n)
{
	SkPipeline	p;
	SkReply    *replies;
	int			ncomp = 0;

	sk_pipeline_init(&p);
	for (int i = 0; i < n; i++)
	{
		bool		keep = orders[i].outcome == SK_DUPLICATE;

		if (orders[i].outcome == SK_OK)
			continue;
		sk_journal_add_give_back(&p, &orders[i], orders[i].stock_shard, keep);
		if (orders[i].stock_shard != orders[i].home)
			sk_journal_add_give_back(&p, &orders[i], orders[i].home, keep);
		ncomp++;
	}
	if (ncomp == 0)
		return;
	replies = sk_pipeline_exec(&p);
	if (replies == NULL)
	{
		sk_journal_lost();
		return;
	}
	for (int i = 0, r = 0; i < n; i++)
	{
		int64		left;

		if (orders[i].outcome == SK_OK)
			continue;
		seckill_stats_compensated(orders[i].campaign_id, 1);
		/*
		 * The CHECK on sold refused one item: PostgreSQL has none left,
		 * whatever Redis' stock says (reconcile brings Redis in line).
		 */
		if (orders[i].outcome == SK_SOLD_OUT && orders[i].qty == 1)
			seckill_campaign_note_sold_out(orders[i].campaign_id);
		else if (sk_give_back_answer(&replies[r], &left, NULL))
			seckill_campaign_note_stock(orders[i].campaign_id, orders[i].stock_shard, left);
		r += orders[i].stock_shard != orders[i].home ? 2 : 1;
	}
}
