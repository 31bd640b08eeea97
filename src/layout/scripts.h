/*-------------------------------------------------------------------------
 *
 * scripts.h
 *		seckill's Lua scripts (the files of lua/), by name, and the
 *		arguments the campaign's scripts share.
 *
 * The scripts are embedded at build time (lua/embed.sh writes
 * layout/lua_scripts.h) and handed to the Redis client at the worker's
 * start (sk_redis_init), which loads them into every master and runs them
 * by their index here.  Each script's header comment says its KEYS and
 * ARGV.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_SCRIPTS_H
#define SECKILL_SCRIPTS_H

#include "seckill.h"

typedef enum SkScript
{
	SK_SCRIPT_BUY,
	SK_SCRIPT_COMPENSATE,
	SK_SCRIPT_LOAD,
	SK_SCRIPT_RESTOCK,
	SK_SCRIPT_TAKE,
	SK_SCRIPT_LOCK,
	SK_SCRIPT_UNLOCK,
	SK_SCRIPT_ACQUIRE,
	SK_SCRIPT_RENEW,
	SK_SCRIPT_ACQUIRE_FAIR,
	SK_SCRIPT_ACQUIRE_SHARED,
	SK_SCRIPT_RENEW_SHARED,
	SK_SCRIPT_UNLOCK_SHARED,
	SK_SCRIPT_PUT_BACK,
	SK_SCRIPT_EPOCH,
	SK_SCRIPT_TAKE_OVER,
	SK_SCRIPT_UNSTALE,
	SK_SCRIPT_IDS,
	SK_NSCRIPTS
} SkScript;

/* Each script's Lua source, by SkScript. */
extern const char *const sk_scripts_sources[SK_NSCRIPTS];

/* The campaign's traffic limits as fields of its hash (lua/buy.lua reads them). */
#define SK_LIMIT_ARGS 10
extern int	sk_scripts_limit_args(const SeckillLimits *limits, const char **argv);

#endif							/* SECKILL_SCRIPTS_H */
