/*-------------------------------------------------------------------------
 *
 * shmem.h
 *		The boundary between backends and the worker: request slots, the
 *		queue of pending slots, and the cache of preheated campaigns.
 *
 * Each backend owns one slot (indexed by its BackendId).  A request moves
 * FREE -> PENDING (queued) -> TAKEN (in a worker round) -> DONE (reply
 * written, caller's latch set) -> FREE (caller read it).  A caller that gives
 * up (timeout, cancel, exit) marks the slot ABANDONED; the worker then drops
 * it if it had not started it, or finishes it and frees the slot.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_SHMEM_H
#define SECKILL_SHMEM_H

#include "seckill.h"

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

typedef enum SeckillRequestKind
{
	SK_REQ_BUY,
	SK_REQ_PREHEAT,
	SK_REQ_CLOSE,
	SK_REQ_STATUS,
	SK_REQ_RECONCILE,
	SK_REQ_CANCEL,				/* cancel one order (request.order_id) */
	SK_REQ_RELEASE,				/* cancel the unpaid orders past the payment timeout */
	SK_REQ_RESTOCK,				/* change total_stock by request.qty */
	SK_REQ_LIMITS,				/* set the campaign's traffic limits to request.limits */
	SK_REQ_LOCK,				/* take a lock for a SQL caller (request.lock) */
	SK_REQ_UNLOCK,				/* release it */
	SK_REQ_BARRIER				/* answered once every earlier request is settled */
} SeckillRequestKind;

typedef enum SeckillSlotState
{
	SLOT_FREE,
	SLOT_PENDING,
	SLOT_TAKEN,
	SLOT_DONE,
	SLOT_ABANDONED
} SeckillSlotState;

#define SK_REPLY_VALUES 8
#define SK_ADDR_LEN 64			/* an inet's text form */
#define SK_NONCE_LEN 16			/* hex digits of a token's nonce */
#define SK_MESSAGE_LEN 256

typedef struct SeckillReply
{
	SeckillStatus status;
	int			sqlerrcode;		/* for SK_ERR_INVALID; 0 for the default */
	int64		order_id;
	int64		values[SK_REPLY_VALUES];	/* per request kind */
	char		message[SK_MESSAGE_LEN];	/* for failures */
} SeckillReply;

typedef struct SeckillRequest
{
	SeckillRequestKind kind;
	int64		campaign_id;
	int64		order_id;		/* for SK_REQ_CANCEL */
	int32		qty;
	char		user_id[SECKILL_MAX_USER_LEN + 1];
	char		client_addr[SK_ADDR_LEN];	/* "" when unknown */
	char		token_nonce[SK_NONCE_LEN + 1];	/* of a verified token, else "" */
	int64		token_expiry;	/* its expiry, microseconds since the Unix epoch */
	int32		shards;			/* the campaign's stock shards */
	SeckillLimits limits;		/* for SK_REQ_LIMITS */
	struct
	{
		char		name[SK_LOCK_NAME_LEN + 1];
		char		owner[SK_LOCK_OWNER_LEN];
		int			pid;		/* the owner backend's */
		int32		lease_ms;
		bool		xact;
		bool		watchdog;
	}			lock;			/* for SK_REQ_LOCK and SK_REQ_UNLOCK */
} SeckillRequest;

typedef struct SeckillSlot
{
	slock_t		mutex;			/* guards state, seq and latch */
	SeckillSlotState state;
	bool		queued;			/* its index is in the queue */
	uint64		seq;			/* bumped by every new request */
	Latch	   *latch;			/* the caller's, set when DONE */
	uint32		lock_wait;		/* hash of the lock its caller waits for, or 0 */
	SeckillRequest request;
	SeckillReply reply;
} SeckillSlot;

/* A preheated campaign, as backends need it to answer without the worker. */
typedef struct SeckillCampaign
{
	int64		id;				/* 0: entry unused */
	char		goods[SECKILL_MAX_GOODS_LEN + 1];
	TimestampTz starts_at;
	TimestampTz ends_at;
	int32		per_user_limit;
	SeckillLimits limits;
	/*
	 * Tells this campaign's rate-limit buckets in Redis from those of a
	 * campaign with the same id in an earlier installation.
	 */
	TimestampTz created_at;
	int			stats;			/* its entry in seckill_stats */
	uint64		empty_shards;	/* the worker's: a bit per shard with no stock */
	pg_atomic_uint32 sold_out;	/* every shard is empty */
} SeckillCampaign;

/*
 * Latency histogram: 8 buckets per power of two of microseconds, so that a
 * percentile read from it is within 12.5 %.  Buckets 0-7 hold 0-7 us.
 */
#define SK_HIST_BUCKETS 256

typedef struct SeckillHistogram
{
	pg_atomic_uint64 counts[SK_HIST_BUCKETS];
} SeckillHistogram;

/* Index of the errors count: the business statuses come first. */
#define SK_STAT_ERRORS SK_ERR_REDIS

/*
 * Purchase figures of one campaign (or of all), for seckill.stats.  An
 * entry outlives its campaign in the cache until another campaign needs it.
 */
typedef struct SeckillStats
{
	int64		campaign_id;	/* 0: entry unused */
	char		goods[SECKILL_MAX_GOODS_LEN + 1];
	pg_atomic_uint64 calls[SK_STAT_ERRORS + 1];	/* per status, then errors */
	pg_atomic_uint64 compensations;
	pg_atomic_uint32 in_flight; /* purchases with the worker now */
	SeckillHistogram latency;	/* of seckill_buy, microseconds */
} SeckillStats;

/* Worker counters, for seckill_status and the benchmarks. */
typedef struct SeckillCounters
{
	pg_atomic_uint64 rounds;
	pg_atomic_uint64 purchases;
	pg_atomic_uint64 redis_round_trips;
	pg_atomic_uint64 commits;
	pg_atomic_uint64 compensations;
} SeckillCounters;

typedef struct SeckillShared
{
	LWLock	   *queue_lock;		/* guards the queue */
	LWLock	   *campaigns_lock; /* guards the campaign cache */
	LWLock	   *locks_lock;		/* guards seckill_locks */
	Latch	   *worker_latch;	/* NULL while no worker serves requests */
	Oid			database_id;	/* the database the worker serves */
	pg_atomic_uint32 install_generation;	/* bumped by each CREATE EXTENSION */
	pg_atomic_uint32 locks_changed;	/* a lock was taken or handed back: the keeper looks */
	bool		sales_from_database;	/* Redis unreachable: selling from PostgreSQL alone */
	int			connect_failures;	/* worker starts in a row that could not reach seckill.database */
	uint32		queue_head;		/* next entry to take */
	uint32		queue_len;		/* entries queued */
	SeckillCounters counters;
	SeckillStats all;			/* every campaign's purchases */
	SeckillHistogram redis_latency; /* of the worker's Redis round trips */
	slock_t		stats_mutex;	/* guards stats_since and stats_base */
	TimestampTz stats_since;	/* last reset */
	uint64		stats_base[4];	/* counters at the last reset: rounds, purchases, round trips, commits */
	/*
	 * then: campaigns[seckill_max_campaigns], stats[seckill_max_campaigns],
	 * slots[MaxBackends], queue[MaxBackends]
	 */
} SeckillShared;

extern SeckillShared *seckill_shared;
extern SeckillCampaign *seckill_campaigns;
extern SeckillSlot *seckill_slots;
extern SeckillStats *seckill_stats;

extern void seckill_shmem_init(void);

/* backends */
extern void seckill_check_database(void);
extern void seckill_backend_prepare(void);
extern SeckillReply seckill_call(const SeckillRequest *request);
extern bool seckill_campaign_lookup(const char *goods, SeckillCampaign *out);

/* worker */
extern int	seckill_queue_drain(int *slots, int max);
extern bool seckill_slot_take(int slot, SeckillRequest *request, uint64 *seq);
extern bool seckill_slot_reply(int slot, uint64 seq, const SeckillReply *reply);
extern void seckill_fail_taken_slots(const char *why, int sqlerrcode);
extern SeckillCampaign *seckill_campaign_find(int64 id);
extern bool seckill_campaign_has_room(int64 id);
extern bool seckill_campaign_store(int64 id, const char *goods, TimestampTz starts_at,
								   TimestampTz ends_at, int per_user_limit,
								   const SeckillLimits *limits, TimestampTz created_at,
								   bool sold_out);
extern void seckill_campaign_set_limits(int64 id, const SeckillLimits *limits);
extern SeckillStats *seckill_stats_find(int64 campaign_id);
extern void seckill_campaign_forget(int64 id);

#endif							/* SECKILL_SHMEM_H */
