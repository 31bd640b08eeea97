/*-------------------------------------------------------------------------
 *
 * redis.h
 *		The worker's Redis client: one non-blocking hiredis connection,
 *		pipelines with deadlines, and Lua scripts run by SHA.
 *
 * Every wait goes through one WaitEventSet holding the worker's latch,
 * postmaster death and the Redis socket, so signals are always heard.
 * Replies are copied into palloc'd memory at once; hiredis memory never
 * outlives the call that read it.  Pipelines and replies have headers of
 * their own (pipeline.h, reply.h), included here.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REDIS_H
#define SECKILL_REDIS_H

#include "seckill.h"

#include "redis/pipeline.h"
#include "redis/reply.h"

/*
 * One script on a few keys of one hash tag with a few arguments: the lease
 * scripts' shape.
 */
#define SK_SCRIPT_CALL_KEYS 5
typedef struct SkScriptCall
{
	int			script;			/* its index among sk_redis_init's scripts */
	int			nkeys;
	const char *keys[SK_SCRIPT_CALL_KEYS];
	int			nargs;
	const char *args[5];
} SkScriptCall;

extern void sk_redis_init(const char *const *scripts, int count, const char *own_key);
extern bool sk_redis_connect(void);
extern bool sk_redis_connected(void);
extern uint64 sk_redis_generation(void);
extern void sk_redis_disconnect(const char *why);
extern void sk_redis_refused(const char *why);
extern void sk_redis_abandon(void);
extern bool sk_redis_in_flight(void);
extern void sk_redis_reload(void);
extern const char *sk_redis_error(void);
extern void sk_redis_wait_idle(long timeout_ms);
extern void sk_redis_proven(void);
extern void sk_redis_watch(void);
extern bool sk_redis_serves(const char *key);
extern const char *sk_redis_run_id(void);

#endif							/* SECKILL_REDIS_H */
