/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		Shared memory: request slots, the queue the worker drains, and the
 *		campaign cache that lets backends answer without the worker.
 *
 *-------------------------------------------------------------------------
 */
#include "shmem.h"

#include "locks.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "stats.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

SeckillShared *seckill_shared = NULL;
SeckillCampaign *seckill_campaigns = NULL;
SeckillSlot *seckill_slots = NULL;
SeckillStats *seckill_stats = NULL;
static int *seckill_queue = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static bool exit_callback_registered = false;
static uint32 checked_generation = PG_UINT32_MAX;	/* see seckill_check_database */

static Size
seckill_shmem_size(void)
{
	Size		size = MAXALIGN(sizeof(SeckillShared));

	size = add_size(size, mul_size(seckill_max_campaigns, sizeof(SeckillCampaign)));
	size = add_size(size, mul_size(seckill_max_campaigns, sizeof(SeckillStats)));
	size = add_size(size, mul_size(MaxBackends, sizeof(SeckillSlot)));
	size = add_size(size, mul_size(MaxBackends, sizeof(int)));
	size = add_size(size, MAXIMUM_ALIGNOF);
	size = add_size(size, seckill_locks_shmem_size());
	return size;
}

static void
seckill_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(seckill_shmem_size());
	RequestNamedLWLockTranche("seckill", 3);
}

static void
seckill_shmem_startup(void)
{
	bool		found;
	char	   *p;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	seckill_shared = ShmemInitStruct("seckill", seckill_shmem_size(), &found);
	p = (char *) seckill_shared + MAXALIGN(sizeof(SeckillShared));
	seckill_campaigns = (SeckillCampaign *) p;
	p += seckill_max_campaigns * sizeof(SeckillCampaign);
	seckill_stats = (SeckillStats *) p;
	p += seckill_max_campaigns * sizeof(SeckillStats);
	seckill_slots = (SeckillSlot *) p;
	p += MaxBackends * sizeof(SeckillSlot);
	seckill_queue = (int *) p;
	p += MaxBackends * sizeof(int);
	seckill_locks_shmem_init((char *) MAXALIGN(p), found);

	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche("seckill");

		memset(seckill_shared, 0, seckill_shmem_size());
		seckill_shared->queue_lock = &locks[0].lock;
		seckill_shared->campaigns_lock = &locks[1].lock;
		seckill_shared->locks_lock = &locks[2].lock;
		pg_atomic_init_u32(&seckill_shared->install_generation, 0);
		pg_atomic_init_u32(&seckill_shared->locks_changed, 0);
		pg_atomic_init_u64(&seckill_shared->counters.rounds, 0);
		pg_atomic_init_u64(&seckill_shared->counters.purchases, 0);
		pg_atomic_init_u64(&seckill_shared->counters.redis_round_trips, 0);
		pg_atomic_init_u64(&seckill_shared->counters.commits, 0);
		pg_atomic_init_u64(&seckill_shared->counters.compensations, 0);
		seckill_stats_init(&seckill_shared->all);
		for (int b = 0; b < SK_HIST_BUCKETS; b++)
			pg_atomic_init_u64(&seckill_shared->redis_latency.counts[b], 0);
		for (int i = 0; i < seckill_max_campaigns; i++)
			seckill_stats_init(&seckill_stats[i]);
		SpinLockInit(&seckill_shared->stats_mutex);
		seckill_shared->stats_since = GetCurrentTimestamp();
		for (int i = 0; i < seckill_max_campaigns; i++)
			pg_atomic_init_u32(&seckill_campaigns[i].sold_out, 0);
		for (int i = 0; i < MaxBackends; i++)
		{
			SpinLockInit(&seckill_slots[i].mutex);
			seckill_slots[i].state = SLOT_FREE;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

void
seckill_shmem_init(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = seckill_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = seckill_shmem_startup;
}

/*
 * Give up on the request with this sequence number, if it is still ours.
 * Returns the reply's slot to FREE when the answer had already arrived.
 */
static void
slot_abandon(SeckillSlot *slot, uint64 seq)
{
	SpinLockAcquire(&slot->mutex);
	if (slot->seq == seq)
	{
		if (slot->state == SLOT_PENDING || slot->state == SLOT_TAKEN)
			slot->state = SLOT_ABANDONED;
		else if (slot->state == SLOT_DONE)
			slot->state = SLOT_FREE;
	}
	SpinLockRelease(&slot->mutex);
}

static void
backend_exit(int code, Datum arg)
{
	SeckillSlot *slot = &seckill_slots[MyBackendId - 1];
	uint64		seq;

	SpinLockAcquire(&slot->mutex);
	seq = slot->seq;
	SpinLockRelease(&slot->mutex);
	slot_abandon(slot, seq);
}

/*
 * Once per backend: give up its request when it exits.  Callers that
 * register their own exit callbacks around a request call it first, so
 * that theirs stay the latest registered.
 */
void
seckill_backend_prepare(void)
{
	if (!exit_callback_registered)
	{
		before_shmem_exit(backend_exit, 0);
		exit_callback_registered = true;
	}
}

/*
 * Is seckill usable from this backend?  The database check needs the worker
 * to have started once (it records the database it serves).
 */
void
seckill_check_database(void)
{
	if (seckill_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("seckill is not loaded"),
				 errhint("Add seckill to shared_preload_libraries in postgresql.conf and restart the server.")));
	if (OidIsValid(seckill_shared->database_id) && MyDatabaseId != seckill_shared->database_id)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("seckill serves database \"%s\" only", seckill_database),
				 errhint("Connect to that database, or set seckill.database and restart the server.")));
	/* looked at again whenever the extension is installed or updated */
	if (pg_atomic_read_u32(&seckill_shared->install_generation) != checked_generation)
	{
		uint32		generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		char	   *version = seckill_installed_version();

		if (version != NULL && strcmp(version, SECKILL_SQL_VERSION) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("the seckill extension in this database is version %s; its library is version %s",
							version, SECKILL_SQL_VERSION),
					 errhint("Run ALTER EXTENSION seckill UPDATE.")));
		checked_generation = generation;
	}
}

static void
worker_not_running(void)
{
	if (seckill_shared->connect_failures > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the seckill worker cannot connect to database \"%s\"", seckill_database),
				 errhint("Create that database, or set seckill.database to an existing one and restart the server; the worker tries again at most once a minute.")));
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("the seckill worker is not running"),
			 errhint("The postmaster restarts it within a second; if this persists, look for \"seckill worker\" in the server log.")));
}

/* Milliseconds left until the deadline; 0 when past it. */
static long
ms_until(TimestampTz deadline)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

	return ms > 0 ? ms : 0;
}

static void
request_timed_out(const SeckillRequest *request)
{
	if (seckill_shared->worker_latch == NULL)
		worker_not_running();
	ereport(ERROR,
			(errcode(ERRCODE_QUERY_CANCELED),
			 errmsg("seckill request timed out after %d ms", seckill_request_timeout),
			 request->kind == SK_REQ_BUY ?
			 errhint("The purchase may still complete: call seckill_order() to learn its fate before buying again.") :
			 errhint("The seckill worker may be stalled: see its wait_event in pg_stat_activity (backend_type 'seckill worker') and the server log.")));
}

/*
 * Hand a request to the worker and wait for its reply, at most
 * seckill.request_timeout.  Cancel-safe: on any error the slot is abandoned
 * and the worker finishes or drops the request on its own.  A request made
 * while the worker restarts waits in the queue for the new worker.
 */
SeckillReply
seckill_call(const SeckillRequest *request)
{
	SeckillSlot *slot;
	TimestampTz deadline;
	uint64		seq;
	SeckillReply reply;
	Latch	   *worker_latch;

	seckill_check_database();
	if (!OidIsValid(seckill_shared->database_id))
		worker_not_running();	/* it never started: nothing to wait for */
	seckill_backend_prepare();
	slot = &seckill_slots[MyBackendId - 1];
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_request_timeout);

	/* An earlier request we gave up on may still hold the slot: wait for it. */
	for (;;)
	{
		bool		claimed = false;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == SLOT_FREE || slot->state == SLOT_DONE)
		{
			slot->state = SLOT_PENDING;
			slot->queued = true;
			seq = ++slot->seq;
			slot->latch = MyLatch;
			slot->request = *request;
			claimed = true;
		}
		SpinLockRelease(&slot->mutex);
		if (claimed)
			break;
		if (ms_until(deadline) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("seckill request timed out after %d ms", seckill_request_timeout),
					 errdetail("An earlier request of this session, given up on, was still being served; this one was not made."),
					 errhint("Call again; call seckill_order() to learn the fate of the earlier purchase.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(ms_until(deadline), 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}

	LWLockAcquire(seckill_shared->queue_lock, LW_EXCLUSIVE);
	seckill_queue[(seckill_shared->queue_head + seckill_shared->queue_len) % MaxBackends] =
		MyBackendId - 1;
	seckill_shared->queue_len++;
	LWLockRelease(seckill_shared->queue_lock);

	worker_latch = seckill_shared->worker_latch;
	if (worker_latch)
		SetLatch(worker_latch);

	PG_TRY();
	{
		for (;;)
		{
			bool		done = false;

			SpinLockAcquire(&slot->mutex);
			if (slot->state == SLOT_DONE && slot->seq == seq)
			{
				reply = slot->reply;
				slot->state = SLOT_FREE;
				done = true;
			}
			SpinLockRelease(&slot->mutex);
			if (done)
				break;
			if (ms_until(deadline) == 0)
			{
				slot_abandon(slot, seq);
				request_timed_out(request);
			}
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 ms_until(deadline), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	PG_CATCH();
	{
		slot_abandon(slot, seq);
		PG_RE_THROW();
	}
	PG_END_TRY();

	return reply;
}

/* Copy the cached campaign open for this goods; false when none is cached. */
bool
seckill_campaign_lookup(const char *goods, SeckillCampaign *out)
{
	bool		found = false;

	LWLockAcquire(seckill_shared->campaigns_lock, LW_SHARED);
	for (int i = 0; i < seckill_max_campaigns; i++)
	{
		SeckillCampaign *c = &seckill_campaigns[i];

		if (c->id != 0 && strcmp(c->goods, goods) == 0)
		{
			out->id = c->id;
			strlcpy(out->goods, c->goods, sizeof(out->goods));
			out->starts_at = c->starts_at;
			out->ends_at = c->ends_at;
			out->per_user_limit = c->per_user_limit;
			out->limits = c->limits;
			out->stats = c->stats;
			pg_atomic_init_u32(&out->sold_out, pg_atomic_read_u32(&c->sold_out));
			found = true;
			break;
		}
	}
	LWLockRelease(seckill_shared->campaigns_lock);
	return found;
}

/* Worker: take up to max queued slot indexes, oldest first. */
int
seckill_queue_drain(int *slots, int max)
{
	int			n;

	LWLockAcquire(seckill_shared->queue_lock, LW_EXCLUSIVE);
	n = Min((int) seckill_shared->queue_len, max);
	for (int i = 0; i < n; i++)
		slots[i] = seckill_queue[(seckill_shared->queue_head + i) % MaxBackends];
	seckill_shared->queue_head = (seckill_shared->queue_head + n) % MaxBackends;
	seckill_shared->queue_len -= n;
	LWLockRelease(seckill_shared->queue_lock);
	return n;
}

/*
 * Worker: start work on a drained slot.  False when its caller gave up
 * before the worker began: the request is dropped and the slot freed.
 */
bool
seckill_slot_take(int index, SeckillRequest *request, uint64 *seq)
{
	SeckillSlot *slot = &seckill_slots[index];
	bool		taken = false;
	Latch	   *latch = NULL;

	SpinLockAcquire(&slot->mutex);
	slot->queued = false;
	if (slot->state == SLOT_PENDING)
	{
		slot->state = SLOT_TAKEN;
		*request = slot->request;
		*seq = slot->seq;
		taken = true;
	}
	else if (slot->state == SLOT_ABANDONED)
	{
		slot->state = SLOT_FREE;
		latch = slot->latch;
	}
	SpinLockRelease(&slot->mutex);
	if (latch)
		SetLatch(latch);
	return taken;
}

/*
 * Worker: answer a taken request and wake its caller.  False when the
 * caller had given up: nobody reads the answer.
 */
bool
seckill_slot_reply(int index, uint64 seq, const SeckillReply *reply)
{
	SeckillSlot *slot = &seckill_slots[index];
	Latch	   *latch = NULL;
	bool		delivered = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->seq == seq)
	{
		if (slot->state == SLOT_TAKEN)
		{
			slot->reply = *reply;
			slot->state = SLOT_DONE;
			delivered = true;
		}
		else if (slot->state == SLOT_ABANDONED)
			slot->state = SLOT_FREE;
		latch = slot->latch;
	}
	SpinLockRelease(&slot->mutex);
	if (latch)
		SetLatch(latch);
	return delivered;
}

/*
 * Worker start (or exit): requests a previous worker took have an unknown
 * fate; tell their callers so, instead of letting them wait for the timeout.
 * The journal replay then settles every reservation they may have made.
 */
void
seckill_fail_taken_slots(const char *why, int sqlerrcode)
{
	for (int i = 0; i < MaxBackends; i++)
	{
		SeckillSlot *slot = &seckill_slots[i];
		Latch	   *latch = NULL;

		SpinLockAcquire(&slot->mutex);
		if (slot->state == SLOT_TAKEN)
		{
			memset(&slot->reply, 0, sizeof(slot->reply));
			slot->reply.status = SK_ERR_WORKER;
			slot->reply.sqlerrcode = sqlerrcode;
			strlcpy(slot->reply.message, why, sizeof(slot->reply.message));
			slot->state = SLOT_DONE;
			latch = slot->latch;
		}
		else if (slot->state == SLOT_ABANDONED && !slot->queued)
		{
			slot->state = SLOT_FREE;
			latch = slot->latch;
		}
		SpinLockRelease(&slot->mutex);
		if (latch)
			SetLatch(latch);
	}
}

SeckillCampaign *
seckill_campaign_find(int64 id)
{
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_campaigns[i].id == id)
			return &seckill_campaigns[i];
	return NULL;
}

/* Worker: is there an entry for this campaign, or a free one? */
bool
seckill_campaign_has_room(int64 id)
{
	return seckill_campaign_find(id) != NULL || seckill_campaign_find(0) != NULL;
}

SeckillStats *
seckill_stats_find(int64 campaign_id)
{
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_stats[i].campaign_id == campaign_id)
			return &seckill_stats[i];
	return NULL;
}

/*
 * The stats entry of a campaign being cached: its own, else an unused one,
 * else that of a campaign no longer cached (there is always one, as there
 * are as many entries as cache entries).  Under campaigns_lock.
 */
static int
stats_entry_for(int64 id, const char *goods)
{
	SeckillStats *st = seckill_stats_find(id);

	if (st == NULL)
		st = seckill_stats_find(0);
	for (int i = 0; st == NULL && i < seckill_max_campaigns; i++)
		if (seckill_campaign_find(seckill_stats[i].campaign_id) == NULL)
			st = &seckill_stats[i];
	Assert(st != NULL);
	if (st->campaign_id != id)
	{
		/*
		 * Counts start afresh; in_flight is left to the callers of the
		 * previous campaign still counted there, which take themselves off.
		 */
		seckill_stats_zero(st);
		st->campaign_id = id;
		strlcpy(st->goods, goods, sizeof(st->goods));
	}
	return st - seckill_stats;
}

/* Worker: add or update a cached campaign; false when the cache is full. */
bool
seckill_campaign_store(int64 id, const char *goods, TimestampTz starts_at,
					   TimestampTz ends_at, int per_user_limit,
					   const SeckillLimits *limits, TimestampTz created_at,
					   bool sold_out)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_shared->campaigns_lock, LW_EXCLUSIVE);
	/* one goods, one cached campaign: drop a stale entry of an earlier campaign */
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (seckill_campaigns[i].id != id && strcmp(seckill_campaigns[i].goods, goods) == 0)
			seckill_campaigns[i].id = 0;
	c = seckill_campaign_find(id);
	if (c == NULL)
		c = seckill_campaign_find(0);
	if (c == NULL)
	{
		LWLockRelease(seckill_shared->campaigns_lock);
		return false;
	}
	c->id = id;
	strlcpy(c->goods, goods, sizeof(c->goods));
	c->starts_at = starts_at;
	c->ends_at = ends_at;
	c->per_user_limit = per_user_limit;
	c->limits = *limits;
	c->created_at = created_at;
	c->stats = stats_entry_for(id, goods);
	c->empty_shards = sold_out ? ~UINT64CONST(0) : 0;
	pg_atomic_write_u32(&c->sold_out, sold_out ? 1 : 0);
	LWLockRelease(seckill_shared->campaigns_lock);
	return true;
}

/* Worker: new traffic limits of a cached campaign. */
void
seckill_campaign_set_limits(int64 id, const SeckillLimits *limits)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_shared->campaigns_lock, LW_EXCLUSIVE);
	c = seckill_campaign_find(id);
	if (c != NULL)
		c->limits = *limits;
	LWLockRelease(seckill_shared->campaigns_lock);
}

void
seckill_campaign_forget(int64 id)
{
	SeckillCampaign *c;

	LWLockAcquire(seckill_shared->campaigns_lock, LW_EXCLUSIVE);
	c = seckill_campaign_find(id);
	if (c != NULL)
		c->id = 0;
	LWLockRelease(seckill_shared->campaigns_lock);
}
