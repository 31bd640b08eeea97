/*-------------------------------------------------------------------------
 *
 * redis.h
 *		The worker's Redis client: one non-blocking hiredis connection,
 *		pipelines with deadlines, and Lua scripts run by SHA.
 *
 * Every wait goes through one WaitEventSet holding the worker's latch,
 * postmaster death and the Redis socket, so signals are always heard.
 * Replies are copied into palloc'd memory at once; hiredis memory never
 * outlives the call that read it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REDIS_H
#define SECKILL_REDIS_H

#include "seckill.h"

#include <hiredis/read.h>

#include "lib/stringinfo.h"

/* One script on one key with a few arguments: the lease scripts' shape. */
typedef struct SkScriptCall
{
	int			script;			/* its index among sk_redis_init's scripts */
	const char *key;
	int			nargs;
	const char *args[4];
} SkScriptCall;

/* A Redis reply, palloc'd. type is one of hiredis' REDIS_REPLY_* */
typedef struct SkReply
{
	int			type;
	long long	integer;
	char	   *str;
	size_t		len;
	size_t		elements;
	struct SkReply *element;
} SkReply;

/* A pipeline under construction: commands in RESP, ready to send. */
typedef struct SkPipeline
{
	StringInfoData buf;
	int			count;
	int		   *ends;			/* where each command ends in buf */
	int		   *slots;			/* each command's Redis Cluster slot, -1: none */
	int			max;			/* room in ends and slots */
} SkPipeline;

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

extern void sk_pipeline_init(SkPipeline *p);
extern void sk_pipeline_add(SkPipeline *p, int argc, const char **argv, const size_t *lens);
extern void sk_pipeline_script(SkPipeline *p, int script,
							   int nkeys, const char **keys, int nargs, const char **args);
extern SkReply *sk_pipeline_exec(SkPipeline *p);
extern SkReply *sk_pipeline_exec_meanwhile(SkPipeline *p, void (*work) (void));

extern const char *sk_pipeline_script_source(int script);

extern bool sk_reply_is_error(const SkReply *r);
extern bool sk_reply_is_moving(const SkReply *r);
extern bool sk_reply_is_unreachable(const SkReply *r);
extern long long sk_reply_int(const SkReply *r);

#endif							/* SECKILL_REDIS_H */
