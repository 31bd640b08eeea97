/*-------------------------------------------------------------------------
 *
 * pipeline.h
 *		Pipelines of the worker's Redis client: commands built in RESP,
 *		sent to every master they go to at once, their replies read back by
 *		one deadline, at once or after the caller's other work; the Lua
 *		scripts run by their index.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_PIPELINE_H
#define SECKILL_PIPELINE_H

#include "redis/reply.h"

#include "lib/stringinfo.h"

/* A pipeline under construction: commands in RESP, ready to send. */
typedef struct SkPipeline
{
	StringInfoData buf;
	int			count;
	int		   *ends;			/* where each command ends in buf */
	int		   *slots;			/* each command's Redis Cluster slot, -1: none */
	int			max;			/* room in ends and slots */
	bool		secret;			/* holds a password: sk_tls_write_secret() */
} SkPipeline;

extern void sk_pipeline_init(SkPipeline *p);
extern void sk_pipeline_add(SkPipeline *p, int argc, const char **argv, const size_t *lens);
extern void sk_pipeline_script(SkPipeline *p, int script,
							   int nkeys, const char **keys, int nargs, const char **args);
/* A pipeline sent, its replies not read yet. */
typedef struct SkFlight SkFlight;

extern SkReply *sk_pipeline_exec(SkPipeline *p);
extern SkFlight *sk_pipeline_send(SkPipeline *p);
extern SkReply *sk_pipeline_receive(SkFlight *f);

extern const char *sk_pipeline_script_source(int script);

#endif							/* SECKILL_PIPELINE_H */
