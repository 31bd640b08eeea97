/*-------------------------------------------------------------------------
 *
 * seckill.h
 *		Names shared by every part of seckill: limits, statuses, GUCs.
 *
 * A purchase travels: backend (backend/buy.c) -> a request slot in shared
 * memory (shared/call.c) -> the background worker (worker/worker.c's loop;
 * worker/round.c moves each round of purchases through its stages, the work
 * of each in worker/purchase.c) -> Redis (redis/pipeline.c and the Lua
 * scripts of layout/) -> the group commit in PostgreSQL (store/store.c) ->
 * back to the waiting backend.
 *
 * Settings are defined in settings.c, the names below in names.c, and the
 * module's entry is seckill.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_H
#define SECKILL_H

#include "postgres.h"

#include "datatype/timestamp.h"

/* The version of the extension's SQL objects this library works with. */
#define SECKILL_SQL_VERSION "1.14"

/*
 * The library's own version: the SQL version's, then a number raised by
 * every change to the library alone.  The Debian package has this version;
 * SHOW seckill.library_version reports it.
 */
#define SECKILL_LIBRARY_VERSION SECKILL_SQL_VERSION ".3"

/* Documented limits of ids, in bytes. */
#define SECKILL_MAX_USER_LEN	128
#define SECKILL_MAX_GOODS_LEN	64
#define SK_LOCK_NAME_LEN		128
#define SK_LOCK_OWNER_LEN		64	/* a lease's owner token */

/* Outcomes of a request.  The first ones are business statuses of seckill_buy. */
typedef enum SeckillStatus
{
	SK_OK = 0,
	SK_SOLD_OUT,
	SK_DUPLICATE,
	SK_NOT_STARTED,
	SK_ENDED,
	SK_UNKNOWN_GOODS,
	SK_BUSY,
	SK_RATE_LIMITED,
	SK_INVALID_TOKEN,
	/* failures, raised as ERRORs by the caller; reply.message says more */
	SK_ERR_REDIS,				/* Redis unreachable, or failed mid-request */
	SK_ERR_REDIS_REFUSED,		/* Redis answered with an error */
	SK_ERR_WORKER,				/* the worker restarted while it held the request */
	SK_ERR_INVALID,				/* the request does not make sense (closed campaign...) */
	SK_ERR_LOCKED,				/* the campaign's lock is held elsewhere */
	SK_ERR_FENCED,				/* a newer primary sells through this Redis */
	SK_ERR_EPOCH_LOST,			/* Redis lost the epoch: seckill_epoch_claim() */
	/* the worker's own: the reply waits for the rebuild of the campaign */
	SK_PENDING,
	/* a campaign's waiting room refused a buyer without a valid pass (backend/queue.c) */
	SK_NOT_ADMITTED
} SeckillStatus;

extern const char *seckill_status_name(SeckillStatus status);

/*
 * seckill's own SQLSTATEs, class SK (docs/REFERENCE.md's table of errors): a caller
 * can tell them from business refusals (55000 and the like) and from its own
 * cancel or statement_timeout (57014).
 */
#define ERRCODE_SECKILL_TIMEOUT			MAKE_SQLSTATE('S','K','0','0','1')	/* fate unknown */
#define ERRCODE_SECKILL_UNAVAILABLE		MAKE_SQLSTATE('S','K','0','0','2')	/* not made */
#define ERRCODE_SECKILL_WORKER_FAILED	MAKE_SQLSTATE('S','K','0','0','3')	/* fate unknown */

#define SK_TOKEN_SECRET_LEN 32

/*
 * A campaign's traffic limits and stock shards: columns of
 * seckill.campaigns, copied into the campaign cache and into the campaign's
 * hash in Redis.  0 or false: none.
 */
typedef struct SeckillLimits
{
	double		user_rate;		/* purchase calls per second per user */
	int32		user_burst;		/* bucket size of user_rate */
	double		addr_rate;		/* purchase calls per second per client address */
	int32		addr_burst;
	int32		max_in_flight;	/* purchases with the worker at once */
	bool		token_required; /* purchases need a token from seckill_token() */
	int64		token_ttl;		/* microseconds a token stays valid */
	bool		has_token_secret;	/* token_secret is loaded */
	uint8		token_secret[SK_TOKEN_SECRET_LEN];
	int32		shards;			/* stock shards in Redis; fixed once preheated */
	/* the waiting room (backend/queue.c, worker/waiting_room.c); not in Redis */
	bool		queue;			/* purchases need a pass from the line */
	int64		queue_pass_ttl; /* microseconds a pass stays valid */
	double		queue_admit_rate;	/* buyers admitted per second at most; 0: no bound */
	double		queue_admit_factor; /* admitted, not yet bought <= this x stock left */
	int64		queue_opens_before; /* microseconds before starts_at that joins are taken */
	int64		queue_seed;		/* the draw's seed */
	bool		has_queue_seed; /* else drawn at random at the start */
} SeckillLimits;

#define SK_MAX_SHARDS 64

/* GUCs (settings.c) */
extern char *seckill_redis_host;
extern int	seckill_redis_port;
extern char *seckill_redis_user;
extern char *seckill_redis_password_file;
extern char *seckill_redis_sentinel_password_file;
extern bool seckill_redis_tls;
extern char *seckill_redis_tls_ca_file;
extern char *seckill_redis_tls_cert_file;
extern char *seckill_redis_tls_key_file;
extern char *seckill_redis_tls_server_name;
extern char *seckill_redis_prefix;
extern char *seckill_redis_sentinels;
extern char *seckill_redis_master_name;
extern bool seckill_redis_cluster;
extern char *seckill_database;
extern int	seckill_request_timeout;
extern bool seckill_caller_sched_batch;
extern int	seckill_redis_timeout;
extern int	seckill_audit_interval;
extern int	seckill_batch_size;
extern int	seckill_max_queue;
extern int	seckill_max_campaigns;
extern int	seckill_queue_tickets;
extern int	seckill_lock_lease;
extern int	seckill_max_locks;
extern int	seckill_lock_max_hold;
extern int	seckill_lock_queue_lease;
extern int	seckill_worker_lock_timeout;
extern int	seckill_worker_statement_timeout;
extern char *seckill_redlock_nodes;

/* What purchases do while Redis cannot be reached. */
typedef enum SeckillRedisUnavailable
{
	SK_UNAVAILABLE_ERROR,		/* fail with an error */
	SK_UNAVAILABLE_DATABASE		/* sell from PostgreSQL alone */
} SeckillRedisUnavailable;

extern int	seckill_redis_unavailable;

/*
 * What a server does when Redis lost the epoch it recorded there
 * (worker/epoch.c).
 */
typedef enum SeckillRedisEpochLost
{
	SK_EPOCH_LOST_AUTO,			/* wait where a failover is possible, else rebuild */
	SK_EPOCH_LOST_REBUILD,		/* record it again, rebuild from PostgreSQL */
	SK_EPOCH_LOST_WAIT			/* sell nothing until claimed or promoted */
} SeckillRedisEpochLost;

extern int	seckill_redis_epoch_lost;

/*
 * For fault tests: where the worker (or a caller) dies on purpose
 * (seckill.crash_point, a superuser's setting), in a build made with
 * CRASH_POINTS=1 only, as PostgreSQL's injection points.
 */
typedef enum SeckillCrashPoint
{
	SK_CRASH_NONE,
	SK_CRASH_AFTER_GATHER,		/* a round's purchases taken, nothing sent */
	SK_CRASH_AFTER_RESERVE,		/* Redis reserved, nothing committed */
	SK_CRASH_AFTER_COMMIT,		/* committed, journal not settled, nobody woken */
	SK_CRASH_BEFORE_WAKE,		/* committed and settled, nobody woken */
	SK_CRASH_OVERLAPPED,		/* a round committed while the next one's
								 * reservations are in Redis, nobody woken */
	SK_CRASH_AFTER_ANSWER		/* a round answered, the next one's replies
								 * read, PostgreSQL's refusals not given back */
} SeckillCrashPoint;

#ifdef SECKILL_CRASH_POINTS
extern int	seckill_crash_point;
extern void seckill_crash_if(SeckillCrashPoint point);
#else
#define seckill_crash_point SK_CRASH_NONE
#define seckill_crash_if(point) ((void) 0)
#endif

extern void seckill_define_gucs(void);

extern char *seckill_installed_version(void);
extern Oid	seckill_extension_owner(void);

/* Timestamps travel to Redis as microseconds since the Unix epoch. */
extern int64 seckill_unix_usec(TimestampTz ts);

#endif							/* SECKILL_H */
