/*-------------------------------------------------------------------------
 *
 * redlock.h
 *		The SQL callers' locks on several independent Redis nodes, opt-in
 *		through seckill.redlock_nodes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REDLOCK_H
#define SECKILL_REDLOCK_H

#include "redis/redis.h"

typedef enum SkRedlockResult
{
	REDLOCK_ACQUIRED,
	REDLOCK_BUSY,				/* another owner holds it on a majority */
	REDLOCK_FAILED				/* too few nodes answered */
} SkRedlockResult;

extern bool sk_redlock_enabled(void);
extern void sk_redlock_abandon(void);
extern SkRedlockResult sk_redlock_acquire(const SkScriptCall *take, const SkScriptCall *give, int lease_ms,
										  char *why, size_t whylen);
extern void sk_redlock_batch(const SkScriptCall *commands, int ncommands, int *result);

#endif							/* SECKILL_REDLOCK_H */
