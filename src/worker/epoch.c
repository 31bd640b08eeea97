/*-------------------------------------------------------------------------
 *
 * epoch.c
 *		Who sells through this Redis: the PostgreSQL timeline, and the
 *		promotion onto it.
 *
 * The worker's epoch is the timeline it writes on.  Redis keeps the newest
 * one under the key prefix with the id of the promotion onto it (of two
 * standbys promoted onto one timeline, the first to record itself sells;
 * the other is fenced), and every campaign it loads carries the epoch that
 * loaded it.  A promoted standby (a newer timeline) takes the prefix
 * over and marks every preheated campaign stale: none sells before its
 * journal is settled against the promoted primary's orders and Redis is
 * found to hold what PostgreSQL holds (nothing was lost, as in a clean
 * switchover: sk_epoch_unstale), or else it is rebuilt from PostgreSQL
 * (worker/campaign_admin.c).  A primary left behind by a failover (an older
 * timeline, restarted on its own or cut off while it ran) is fenced: the
 * scripts refuse its purchases, give-backs, restocks and loads, and the
 * worker stops selling, replaying and reconciling until it restarts; and
 * it remembers the fence in PostgreSQL, to stay fenced after a restart
 * whatever Redis keeps (sk_epoch_recall).
 *
 * Redis may lose the epoch (restarted without persistence, flushed, failed
 * over to a replica that missed it).  A primary left behind by a failover
 * it never saw would then find no newer epoch and sell on.  PostgreSQL
 * remembers the timeline this server recorded, so a missing epoch is told
 * from a Redis never used, and whether it has streamed WAL to a standby.
 * Where this server may have been superseded by a failover it did not see
 * (seckill.redis_epoch_lost = wait; or auto on a server that has seen a
 * standby on its timeline, or was promoted and has not recorded its
 * timeline yet) it does not sell (SK_ERR_EPOCH_LOST) until
 * seckill_epoch_claim() is run on it, the DBA's word that it is the primary
 * (sk_epoch_claim), or it is promoted onto a newer timeline; elsewhere it
 * is the newest primary it knows of, and records its epoch again.  Each
 * such loss is counted for the lock keeper, which puts back the leases it
 * holds (sk_epoch_losses).
 *
 * Order ids: each block is recorded in Redis before its first id is used.
 * A promoted primary whose sequence lost the last blocks to asynchronous
 * replication skips past them, so an id once answered is never another
 * user's.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/epoch.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "layout/epoch_commands.h"
#include "redis/redis.h"
#include "replication/walsender.h"
#include "replication/walsender_private.h"
#include "shared/shmem.h"
#include "storage/fd.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/spin.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "worker/worker_state.h"

/*
 * This server's promotion onto its timeline, recorded in Redis beside the
 * epoch: a random id kept in the data directory with the timeline it was
 * taken on (read_promotion); '' when it could not be kept: then nothing
 * sells (two standbys promoted onto one timeline would both sell), and it
 * is tried again every PROMOTION_RETRY_MS.
 */
#define PROMOTION_FILE "seckill_promotion"
#define PROMOTION_RETRY_MS 1000

/* A standby streaming from this server is looked for this often, until one is seen. */
#define STANDBY_CHECK_MS 1000

/* Our timeline, as the scripts' epoch argument. */
const char *
sk_epoch_arg(void)
{
	if (sk_worker.epoch.timeline == 0)
	{
		sk_worker.epoch.timeline = GetWALInsertionTimeLine();
		snprintf(sk_worker.epoch.epoch_arg, sizeof(sk_worker.epoch.epoch_arg), "%u",
				 sk_worker.epoch.timeline);
	}
	return sk_worker.epoch.epoch_arg;
}

bool
sk_epoch_fenced(void)
{
	return sk_worker.epoch.fenced;
}

uint32
sk_epoch_losses(void)
{
	return sk_worker.epoch.losses;
}

/* A script said a newer primary sells through this Redis. */
void
sk_epoch_fence(const char *what)
{
	if (sk_worker.epoch.fenced)
		return;
	sk_worker.epoch.fenced = true;
	sk_worker.epoch.fence_unremembered = true;
	/* backends stop answering from their cache too */
	seckill_shared->fenced = true;
	ereport(WARNING,
			(errmsg("seckill worker stops selling until it restarts: another primary sells through this Redis (%s); this server is on timeline %u",
					what, sk_worker.epoch.timeline),
			 errhint("This server was the primary before a failover. Rejoin it as a standby of the new primary (pg_rewind).")));
}

/*
 * The id of this server's promotion onto its timeline: the one kept in the
 * data directory (PROMOTION_FILE, "timeline id") when it was taken on this
 * timeline, else a new random one kept there.  pg_basebackup and pg_rewind
 * copy the file, so a standby starts with its primary's id and, promoted
 * onto a newer timeline, takes its own: two standbys promoted onto the same
 * timeline have different ids.  It is the server's, not the database's: a
 * restored or re-created extension keeps it.
 */
static void
read_promotion(void)
{
	FILE	   *f;
	unsigned int on;
	char		id[sizeof(sk_worker.epoch.promotion)];
	uint8		random[(sizeof(sk_worker.epoch.promotion) - 1) / 2];

	sk_worker.epoch.promotion_read = true;
	sk_worker.epoch.promotion_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), PROMOTION_RETRY_MS);
	if ((f = AllocateFile(PROMOTION_FILE, "r")) != NULL)
	{
		if (fscanf(f, "%u %16s", &on, id) == 2 && on == sk_worker.epoch.timeline &&
			strlen(id) == sizeof(id) - 1)
			strlcpy(sk_worker.epoch.promotion, id, sizeof(sk_worker.epoch.promotion));
		FreeFile(f);
		if (sk_worker.epoch.promotion[0] != '\0')
			return;
	}
	if (!pg_strong_random(random, sizeof(random)))
		return;
	id[hex_encode((const char *) random, sizeof(random), id)] = '\0';
	if ((f = AllocateFile(PROMOTION_FILE ".tmp", "w")) == NULL ||
		fprintf(f, "%u %s\n", sk_worker.epoch.timeline, id) < 0 || fflush(f) != 0 || pg_fsync(fileno(f)) != 0)
	{
		/* said once, until it is written */
		ereport(sk_worker.epoch.promotion_failed ? DEBUG1 : WARNING,
				(errcode_for_file_access(),
				 errmsg("seckill worker does not sell: it could not write \"%s\": %m", PROMOTION_FILE ".tmp"),
				 errdetail("Without this server's promotion id, two standbys promoted onto one timeline would both sell."),
				 errhint("Make the data directory writable by the server's user; the worker tries again every second.")));
		sk_worker.epoch.promotion_failed = true;
		if (f != NULL)
			FreeFile(f);
		return;
	}
	FreeFile(f);
	if (durable_rename(PROMOTION_FILE ".tmp", PROMOTION_FILE, WARNING) == 0)
		strlcpy(sk_worker.epoch.promotion, id, sizeof(sk_worker.epoch.promotion));
	if (sk_worker.epoch.promotion[0] != '\0' && sk_worker.epoch.promotion_failed)
		ereport(LOG, (errmsg("seckill worker wrote its promotion id in \"%s\": it sells again", PROMOTION_FILE)));
	sk_worker.epoch.promotion_failed = sk_worker.epoch.promotion[0] == '\0';
}

/* The promotion id could not be kept: nothing sells. */
static bool
promotion_unkept(void)
{
	return sk_worker.epoch.promotion_read && sk_worker.epoch.promotion[0] == '\0';
}

/*
 * Does a standby stream WAL from this server now: a walsender streaming or
 * catching up that is not connected to a database, as a logical one is,
 * and whose receiver reports a replay position?  A standby replays what it
 * receives; pg_basebackup's WAL stream and pg_receivewal only keep the WAL
 * (they report no replay position), and a base backup's own walsender is
 * in state backup: none of them can be promoted behind this server's back.
 */
static bool
standby_streams(void)
{
	for (int i = 0; WalSndCtl != NULL && i < max_wal_senders; i++)
	{
		WalSnd	   *walsnd = &WalSndCtl->walsnds[i];
		pid_t		pid;
		WalSndState state;
		XLogRecPtr	replayed;
		PGPROC	   *proc;

		SpinLockAcquire(&walsnd->mutex);
		pid = walsnd->pid;
		state = walsnd->state;
		replayed = walsnd->apply;
		SpinLockRelease(&walsnd->mutex);
		if (pid != 0 && (state == WALSNDSTATE_STREAMING || state == WALSNDSTATE_CATCHUP) &&
			!XLogRecPtrIsInvalid(replayed) &&
			(proc = BackendPidGetProc(pid)) != NULL && !OidIsValid(proc->databaseId))
			return true;
	}
	return false;
}

/*
 * Outside a transaction, before the worker uses Redis or sells without it:
 * take up the fence PostgreSQL remembers (seckill.worker_state), once after
 * the worker starts, and remember a fence learned from Redis since.  A
 * primary left behind by a failover thus stays fenced across its restarts
 * even when Redis has lost the newer epoch meanwhile (restarted empty,
 * flushed, failed over to a replica that missed it), until it is rewound
 * and promoted again: then its timeline is past the one remembered.
 */
void
sk_epoch_recall(void)
{
	(void) sk_epoch_arg();		/* sets timeline */
	if (!sk_worker.epoch.promotion_read ||
		(promotion_unkept() && GetCurrentTimestamp() >= sk_worker.epoch.promotion_retry_at))
		read_promotion();
	if (IsTransactionState())
		return;					/* at the next gate */
	if (sk_worker.epoch.recalled &&
		pg_atomic_read_u32(&seckill_shared->install_generation) != sk_worker.epoch.recalled_generation)
	{
		/* a new installation's row: it is told what this one knew */
		sk_worker.epoch.recalled = false;
		sk_worker.epoch.fence_unremembered = sk_worker.epoch.fenced;
		sk_worker.epoch.record_unremembered =
			sk_worker.epoch.recorded_here >= (int64) sk_worker.epoch.timeline;
		sk_worker.epoch.standby_unremembered = sk_worker.epoch.had_standby;
	}
	if (!sk_worker.epoch.recalled)
	{
		int64		by = 0;
		bool		remembered_standby = false;

		sk_worker.epoch.recalled_generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		sk_worker.epoch.recalled = store_epoch_state(&by, &sk_worker.epoch.recorded_here,
													 &remembered_standby);
		/* a standby of this timeline's: not one its old primary had, in the row it inherited */
		if (sk_worker.epoch.recorded_here >= (int64) sk_worker.epoch.timeline)
			sk_worker.epoch.had_standby |= remembered_standby;
		if (by > (int64) sk_worker.epoch.timeline && !sk_worker.epoch.fenced)
		{
			sk_worker.epoch.fenced = true;
			seckill_shared->fenced = true;
			ereport(WARNING,
					(errmsg("seckill worker does not sell: this server was fenced by timeline " INT64_FORMAT " or newer, and its own is %u",
							by, sk_worker.epoch.timeline),
					 errdetail("A newer primary sold through the same Redis since a failover; seckill.worker_state remembers it, whatever Redis keeps."),
					 errhint("Rejoin this server as a standby of the new primary (pg_rewind).")));
		}
	}
	if (sk_worker.epoch.fence_unremembered && sk_worker.epoch.recalled)
	{
		store_remember_fence((int64) sk_worker.epoch.timeline + 1);
		sk_worker.epoch.fence_unremembered = false;
	}
	if (!sk_worker.epoch.had_standby && GetCurrentTimestamp() >= sk_worker.epoch.standby_due)
	{
		sk_worker.epoch.standby_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), STANDBY_CHECK_MS);
		sk_worker.epoch.had_standby = sk_worker.epoch.standby_unremembered = standby_streams();
	}
	if ((sk_worker.epoch.record_unremembered || sk_worker.epoch.standby_unremembered) &&
		sk_worker.epoch.recalled)
	{
		store_remember_epoch(sk_worker.epoch.record_unremembered ? (int64) sk_worker.epoch.timeline : 0,
							 sk_worker.epoch.had_standby);
		if (sk_worker.epoch.record_unremembered)
			sk_worker.epoch.recorded_here = sk_worker.epoch.timeline;
		sk_worker.epoch.record_unremembered = sk_worker.epoch.standby_unremembered = false;
	}
}

/*
 * Is a failover this server may never learn of possible, so that it waits
 * when Redis lost its epoch?  Why, when it is.
 */
static const char *
failover_possible(void)
{
	switch (seckill_redis_epoch_lost)
	{
		case SK_EPOCH_LOST_WAIT:
			return "seckill.redis_epoch_lost is wait";
		case SK_EPOCH_LOST_AUTO:
			if (sk_worker.epoch.had_standby)
				return "this server has streamed WAL to a standby on its timeline and seckill.redis_epoch_lost is auto";
			if (sk_worker.epoch.timeline > 1 &&
				sk_worker.epoch.recorded_here < (int64) sk_worker.epoch.timeline)
				return "this server was promoted (or recovered to a point in time) and had not recorded its timeline in Redis yet, and seckill.redis_epoch_lost is auto";
			return NULL;
		default:
			return NULL;
	}
}

/*
 * Has Redis lost the epoch this server recorded (and it waits for a claim),
 * or could it not keep its promotion id?  It does not sell.
 */
bool
sk_epoch_lost(void)
{
	return (sk_worker.epoch.lost || promotion_unkept()) && !sk_worker.epoch.fenced;
}

/*
 * seckill_epoch_claim(), the request in this slot: the DBA says this server
 * is the primary; it records its epoch in Redis again, missing or not, at
 * the next check, while the caller still waits for the answer.
 */
void
sk_epoch_claim(int slot, uint64 seq)
{
	sk_worker.epoch.claim.on = true;
	sk_worker.epoch.claim.slot = slot;
	sk_worker.epoch.claim.seq = seq;
}

/* The claim was answered, or failed: it is dropped. */
void
sk_epoch_claim_drop(void)
{
	sk_worker.epoch.claim.on = false;
}

/*
 * Does the claim hold: made, and its caller still waiting?  Asked before
 * the claim writes to Redis: one given up on (a timeout, a cancel) is
 * dropped, and records nothing.
 */
static bool
claim_holds(void)
{
	if (sk_worker.epoch.claim.on &&
		seckill_slot_given_up(sk_worker.epoch.claim.slot, sk_worker.epoch.claim.seq))
	{
		sk_worker.epoch.claim.on = false;
		ereport(LOG,
				(errmsg("seckill worker drops seckill_epoch_claim(): its caller gave up (a timeout or a cancel) before the epoch was recorded, and nothing was recorded")));
	}
	return sk_worker.epoch.claim.on;
}

/*
 * Redis holds no epoch: lost, where a failover this server may not have
 * seen is possible (failover_possible) and it recorded its own timeline
 * there, or was promoted onto it, until claimed; otherwise a Redis never
 * used (or one whose loss is taken as such), where it records.  A lone
 * server that recorded its timeline is the newest primary it knows of.
 */
static bool
lost_here(void)
{
	bool		was = sk_worker.epoch.lost;
	const char *why = failover_possible();

	sk_worker.epoch.lost = why != NULL && !claim_holds() && !sk_worker.epoch.record_pending &&
		(sk_worker.epoch.recorded_here >= (int64) sk_worker.epoch.timeline || sk_worker.epoch.timeline > 1);
	if (sk_worker.epoch.lost && !was)
		ereport(WARNING,
				(errmsg("seckill worker does not sell: Redis has lost the epoch this server recorded there (timeline %u)",
						sk_worker.epoch.timeline),
				 errdetail("Redis was restarted empty, flushed or failed over to a replica that missed it; a newer primary may have sold since a failover this server did not see: %s.",
						   why),
				 errhint("On the primary, and there only, run SELECT seckill_epoch_claim(). A server that is not the primary rejoins as a standby (pg_rewind).")));
	return sk_worker.epoch.lost;
}

void
sk_epoch_reply_fenced(SeckillReply *reply)
{
	if (!sk_worker.epoch.fenced && promotion_unkept())
	{
		seckill_reply_error(reply, SK_ERR_INVALID,
							"seckill does not sell on this server: it could not write its promotion id (\"%s\" in the data directory); see the server log",
							PROMOTION_FILE);
		return;
	}
	if (sk_epoch_lost())
	{
		reply->status = SK_ERR_EPOCH_LOST;
		snprintf(reply->message, sizeof(reply->message),
				 "seckill does not sell on this server (timeline %u): Redis has lost the epoch it recorded there, and a failover it did not see is possible",
				 sk_worker.epoch.timeline);
		return;
	}
	reply->status = SK_ERR_FENCED;
	snprintf(reply->message, sizeof(reply->message),
			 "seckill does not sell on this server (timeline %u): another primary sells through this Redis since a failover",
			 sk_worker.epoch.timeline);
}

/*
 * Does the epoch Redis recorded (its timeline, the promotion's id) fence this
 * server?  A newer timeline does, and so does another promotion onto ours
 * that recorded itself first.  A fence is remembered at once.
 */
static bool
fenced_by(int64 recorded, const char *owner)
{
	if (recorded > (int64) sk_worker.epoch.timeline)
		sk_epoch_fence(psprintf("timeline " INT64_FORMAT ", recorded in Redis", recorded));
	else if (recorded == (int64) sk_worker.epoch.timeline && owner != NULL && owner[0] != '\0' &&
			 sk_worker.epoch.promotion[0] != '\0' && strcmp(owner, sk_worker.epoch.promotion) != 0)
		sk_epoch_fence(psprintf("another promotion onto timeline %u, %s, recorded itself in Redis first; this one is %s",
								sk_worker.epoch.timeline, owner, sk_worker.epoch.promotion));
	else
		return false;
	sk_epoch_recall();
	return true;
}

/*
 * A newer timeline than Redis knows: mark every preheated campaign stale (in
 * each of its shards), so that neither an older primary nor this one sells
 * it before it is rebuilt; sk_epoch_stale_campaigns() hands them over.  A
 * shard a newer primary already marked fences this server instead: the
 * epoch key may have lost that primary's record (a Redis failover that
 * missed the trailing write) while its campaigns kept it, and the script
 * never lowers it.  The items Redis had sold beyond what PostgreSQL counts
 * are logged: after a promotion, mostly purchases the old primary answered
 * that never reached this one.
 */
static bool
take_over(const char *why, const char *stale)
{
	List	   *rows = store_preheated_campaigns();
	ListCell   *lc;
	SkPipeline	p;
	SkReply    *r = NULL;
	int			reply = 0;

	if (store_sql_outdated)
		return false;
	/* a claim given up on while the campaigns were read marks nothing */
	if (sk_worker.epoch.claim.on && !claim_holds())
		return false;

	sk_pipeline_init(&p);
	foreach(lc, rows)
	{
		SeckillCampaignRow *row = lfirst(lc);
		int			nshards = Max(row->limits.shards, 1);

		for (int shard = 0; shard < nshards; shard++)
			sk_take_over_send(&p, row->id, shard, nshards, sk_epoch_arg(), stale);
	}
	if (p.count > 0 && (r = sk_pipeline_exec(&p)) == NULL)
		return false;
	foreach(lc, r != NULL ? rows : NIL)
	{
		SeckillCampaignRow *row = lfirst(lc);
		int64		in_redis = 0;
		bool		loaded = false;

		for (int shard = 0; shard < Max(row->limits.shards, 1); shard++, reply++)
		{
			SkTakeOverAnswer marked;

			sk_take_over_answer(&r[reply], &marked);
			if (!marked.marked && marked.why != NULL)
			{
				sk_redis_disconnect(psprintf("Redis refused seckill's take-over script: %s", marked.why));
				return false;
			}
			if (!marked.marked)
			{
				(void) fenced_by(marked.newer, NULL);
				return false;
			}
			if (marked.loaded)
			{
				in_redis += marked.stock;
				loaded = true;
			}
		}
		if (loaded && in_redis < row->total_stock - row->sold)
			ereport(LOG,
					(errmsg("seckill worker found %d item(s) of campaign " INT64_FORMAT " (\"%s\") sold in Redis without an order here: purchases answered before the take-over that this server does not have (a PostgreSQL failover lost them), or still in the journal",
							(int) (row->total_stock - row->sold - in_redis), row->id, row->goods)));
	}
	if (sk_worker.epoch.taken_over != NULL)
		pfree(sk_worker.epoch.taken_over);
	sk_worker.epoch.taken_over = MemoryContextAlloc(TopMemoryContext,
													sizeof(int64) * (list_length(rows) + 1));
	sk_worker.epoch.ntaken_over = 0;
	foreach(lc, rows)
		sk_worker.epoch.taken_over[sk_worker.epoch.ntaken_over++] = ((SeckillCampaignRow *) lfirst(lc))->id;
	ereport(LOG,
			(errmsg("seckill worker takes this Redis over (%s): %d preheated campaign(s) are checked against PostgreSQL, and rebuilt from it where they differ, before they sell again",
					why, list_length(rows))));
	return true;
}

/*
 * The campaigns the last take-over marked stale, handed out once: to be
 * checked against PostgreSQL, and rebuilt where they differ.
 */
int
sk_epoch_stale_campaigns(const int64 **ids)
{
	int			n = sk_worker.epoch.ntaken_over;

	*ids = sk_worker.epoch.taken_over;
	sk_worker.epoch.ntaken_over = 0;
	return n;
}

/*
 * A campaign a take-over marked stale holds in Redis what PostgreSQL holds:
 * it sells again without a rebuild, in each shard this epoch still holds.
 * False when Redis failed or a newer epoch holds a shard.
 */
bool
sk_epoch_unstale(int64 id, int nshards)
{
	SkPipeline	p;
	SkReply    *r;

	sk_pipeline_init(&p);
	for (int shard = 0; shard < nshards; shard++)
		sk_unstale_send(&p, id, shard, nshards, sk_epoch_arg());
	r = sk_pipeline_exec(&p);
	if (r == NULL)
		return false;
	for (int shard = 0; shard < nshards; shard++)
		if (!sk_unstale_answer(&r[shard]))
			return false;
	return true;
}

/*
 * Before each journal replay: learn whether another primary sells through
 * this Redis (fenced), or whether this is a new epoch or a new master (the
 * campaigns are marked stale first, then the epoch and master recorded, so
 * that a take-over broken off is done again next time).  False when fenced
 * or when Redis failed.
 */
bool
sk_epoch_check(void)
{
	SkPipeline	p;
	SkReply    *r;
	SkEpochRead read;
	int64		recorded,
				before;
	const char *master,
			   *owner,
			   *refused;
	char	   *why = NULL;
	const char *stale = NULL;

	sk_epoch_recall();
	if (sk_worker.epoch.fenced || promotion_unkept())
		return false;
	sk_pipeline_init(&p);
	sk_epoch_read_send(&p);
	r = sk_pipeline_exec(&p);
	if (r == NULL)
		return false;
	sk_epoch_read_answer(r, &read);
	recorded = read.recorded;
	master = read.master;
	/* restarted empty, flushed, failed over: whether or not it sells, it lost leases */
	if ((recorded == 0 && (sk_worker.epoch.recorded_here > 0 || sk_worker.epoch.recorded_by_us) &&
		 !sk_worker.epoch.lost) ||
		(master != NULL && sk_redis_run_id()[0] != '\0' && strcmp(master, sk_redis_run_id()) != 0))
		sk_worker.epoch.losses++;
	if (fenced_by(recorded, read.promotion) ||
		(recorded == 0 && lost_here()))
		return false;
	if (recorded != 0 && recorded < (int64) sk_worker.epoch.timeline)
	{
		why = psprintf("timeline %u after timeline " INT64_FORMAT ": a promoted standby",
					   sk_worker.epoch.timeline, recorded);
		stale = "promotion";
	}
	else if (recorded == 0 && sk_worker.epoch.claim.on)
	{
		/* what Redis still holds is checked against PostgreSQL */
		why = pstrdup("Redis has lost the epoch this server recorded there; seckill_epoch_claim() was run");
		stale = "redis";
	}
	else if (master != NULL && sk_redis_run_id()[0] != '\0' && strcmp(master, sk_redis_run_id()) != 0)
	{
		why = psprintf("a new Redis master, run_id %s: it may lack writes the old one acknowledged",
					   sk_redis_run_id());
		stale = "redis";
	}
	if (why != NULL && !take_over(why, stale))
		return false;
	/* a claim given up on meanwhile records nothing */
	if (recorded == 0 && sk_worker.epoch.claim.on && !claim_holds())
		return false;

	/*
	 * PostgreSQL remembers the epoch as recorded before Redis is written: a
	 * crash in between leaves it knowing more, never less (a Redis that then
	 * holds none is taken as having lost it).
	 */
	if (sk_worker.epoch.recorded_here < (int64) sk_worker.epoch.timeline)
	{
		sk_worker.epoch.record_unremembered = sk_worker.epoch.record_pending = true;
		sk_epoch_recall();
		if (sk_worker.epoch.recorded_here < (int64) sk_worker.epoch.timeline)
			return false;		/* in a transaction, or not installed: at the next check */
	}
	sk_pipeline_init(&p);
	sk_epoch_record_send(&p, sk_epoch_arg(), sk_redis_run_id(), sk_worker.epoch.promotion);
	r = sk_pipeline_exec(&p);
	if (r == NULL)
		return false;
	if (!sk_epoch_record_answer(&r[0], &before, &owner, &refused))
	{
		sk_redis_disconnect(psprintf("Redis refused seckill's epoch script: %s", refused));
		return false;
	}
	/* another primary recorded itself meanwhile */
	if (fenced_by(before, owner))
		return false;
	if (sk_worker.epoch.lost || sk_worker.epoch.claim.on)
		ereport(LOG,
				(errmsg("seckill worker recorded its epoch (timeline %u) in Redis again%s",
						sk_worker.epoch.timeline,
						sk_worker.epoch.claim.on ? ", as seckill_epoch_claim() asked" : "")));
	sk_worker.epoch.lost = sk_worker.epoch.claim.on = sk_worker.epoch.record_pending = false;
	sk_worker.epoch.recorded_by_us = true;
	if (sk_worker.epoch.recorded_here != (int64) sk_worker.epoch.timeline)
	{
		sk_worker.epoch.record_unremembered = true;
		sk_epoch_recall();
	}
	return true;
}

/*
 * Is the epoch still in Redis, as this server recorded it?  Read only, so
 * that a Redis refusing writes (maxmemory) still answers; when it is not,
 * the whole check (sk_epoch_check).  False when fenced, waiting for a
 * claim, or when Redis failed.
 */
bool
sk_epoch_recheck(void)
{
	SkPipeline	p;
	SkReply    *r;

	if (sk_worker.epoch.fenced)
		return false;
	sk_pipeline_init(&p);
	sk_epoch_get_send(&p);
	r = sk_pipeline_exec(&p);
	if (r == NULL)
		return false;
	if (!sk_worker.epoch.lost && !sk_worker.epoch.claim.on &&
		sk_epoch_get_answer(&r[0]) == (int64) sk_worker.epoch.timeline)
		return true;
	return sk_epoch_check();
}

/*
 * Record the block of order ids [first, last] in Redis before it is used.
 * Returns the highest id Redis has seen when the block is not past it (the
 * sequence skips past it), 0 when recorded, -1 when Redis failed (the ids
 * are used all the same, since sales from PostgreSQL alone go on without
 * Redis, and recorded later).
 */
int64
sk_epoch_record_ids(int64 first, int64 last)
{
	SkPipeline	p;
	SkReply    *r;

	if (!sk_redis_connect())
		return -1;
	sk_pipeline_init(&p);
	sk_ids_send(&p, first, last);
	r = sk_pipeline_exec(&p);
	return r == NULL ? -1 : sk_ids_answer(&r[0]);
}
