/*-------------------------------------------------------------------------
 *
 * call.h
 *		The call transport between backends and the worker: a request slot
 *		per backend in shared memory, and the queue of pending slots.
 *
 * Each backend owns SK_SLOTS_PER_BACKEND slots (from its BackendId), and
 * makes a request in whichever is free: a request given up on, still with
 * the worker, delays nobody's next one.  A request moves
 * FREE -> PENDING (queued) -> TAKEN (in a worker round) -> DONE (reply
 * written, caller woken) -> FREE (caller read it).  A caller that gives
 * up (timeout, cancel, exit) marks the slot ABANDONED; the worker then drops
 * it if it had not started it, or finishes it and frees the slot.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CALL_H
#define SECKILL_CALL_H

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
	SK_REQ_BARRIER,				/* answered once every earlier request is settled */
	SK_REQ_EPOCH_CLAIM,			/* record this server's epoch in Redis again */
	SK_REQ_QUEUE_JOIN			/* a place in the campaign's waiting line */
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
		TimestampTz created_at;
		int64		order_id;
	}			after;			/* for SK_REQ_RELEASE: the last order released */
	struct
	{
		char		name[SK_LOCK_NAME_LEN + 1];
		char		owner[SK_LOCK_OWNER_LEN];
		int			pid;		/* the owner backend's */
		int32		lease_ms;
		bool		xact;
		bool		watchdog;
		bool		waits;		/* fair: joins the line when it cannot have it now */
		int			mode;		/* SeckillLockMode */
	}			lock;			/* for SK_REQ_LOCK and SK_REQ_UNLOCK */
} SeckillRequest;

typedef struct SeckillSlot
{
	slock_t		mutex;			/* guards state, seq and latch */
	SeckillSlotState state;
	bool		queued;			/* its index is in the queue */
	uint64		seq;			/* bumped by every new request */
	Latch	   *latch;			/* the caller's: a slot freed, a lock it waits for */
	pg_atomic_uint32 answers;	/* bumped when DONE; its caller sleeps on it */
	pg_atomic_uint32 sleeping;	/* its caller sleeps on answers */
	uint32		lock_wait;		/* hash of the lock its caller waits for, or 0 */
	int			caller_pid;		/* of the backend that made the request */
	TimestampTz abandoned_at;	/* when its caller gave up on it */
	SeckillRequest request;
	SeckillReply reply;
} SeckillSlot;

#define SK_SLOTS_PER_BACKEND 2

/* The queue of pending slots, and the slots. */
typedef struct SeckillCalls
{
	LWLock	   *lock;			/* guards the queue */
	uint32		head;			/* next entry to take */
	uint32		len;			/* entries queued */
	int		   *queue;			/* seckill_slot_count() entries */
	SeckillSlot slots[FLEXIBLE_ARRAY_MEMBER];	/* SK_SLOTS_PER_BACKEND per backend */
} SeckillCalls;

extern SeckillCalls *seckill_calls;
#define seckill_slots (seckill_calls->slots)

extern void seckill_call_register(void);
extern int	seckill_slot_count(void);
extern int	seckill_home_slot(void);
extern const char *seckill_request_kind_name(SeckillRequestKind kind);
extern int	seckill_slots_in_use(void);

/* backends */
extern void seckill_check_database(void);
extern void seckill_check_version(void);
extern void seckill_backend_prepare(void);
extern SeckillReply seckill_call(const SeckillRequest *request);
extern void seckill_caller_sched_batch_assign(bool newval, void *extra);

/* worker */
extern int	seckill_queue_drain(int *slots, int max);
extern bool seckill_queue_empty(void);
extern bool seckill_slot_take(int slot, SeckillRequest *request, uint64 *seq);
extern bool seckill_slot_reply(int slot, uint64 seq, const SeckillReply *reply);
extern bool seckill_slot_given_up(int slot, uint64 seq);
extern void seckill_fail_taken_slots(const char *why, int sqlerrcode);
extern void seckill_reply_error(SeckillReply *reply, SeckillStatus status, const char *fmt,...) pg_attribute_printf(3, 4);

#endif							/* SECKILL_CALL_H */
