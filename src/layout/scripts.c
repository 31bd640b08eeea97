/*-------------------------------------------------------------------------
 *
 * scripts.c
 *		The Lua scripts as the build embedded them, and the campaign's
 *		traffic limits as script arguments (scripts.h).
 *
 *-------------------------------------------------------------------------
 */
#include "layout/scripts.h"

#include "layout/lua_scripts.h"

const char *const sk_scripts_sources[SK_NSCRIPTS] = {
	[SK_SCRIPT_BUY] = LUA_BUY,
	[SK_SCRIPT_COMPENSATE] = LUA_COMPENSATE,
	[SK_SCRIPT_LOAD] = LUA_LOAD,
	[SK_SCRIPT_RESTOCK] = LUA_RESTOCK,
	[SK_SCRIPT_TAKE] = LUA_TAKE,
	[SK_SCRIPT_LOCK] = LUA_LOCK,
	[SK_SCRIPT_UNLOCK] = LUA_UNLOCK,
	[SK_SCRIPT_ACQUIRE] = LUA_ACQUIRE,
	[SK_SCRIPT_RENEW] = LUA_RENEW,
	[SK_SCRIPT_ACQUIRE_FAIR] = LUA_ACQUIRE_FAIR,
	[SK_SCRIPT_ACQUIRE_SHARED] = LUA_ACQUIRE_SHARED,
	[SK_SCRIPT_RENEW_SHARED] = LUA_RENEW_SHARED,
	[SK_SCRIPT_UNLOCK_SHARED] = LUA_UNLOCK_SHARED,
	[SK_SCRIPT_PUT_BACK] = LUA_PUT_BACK,
	[SK_SCRIPT_EPOCH] = LUA_EPOCH,
	[SK_SCRIPT_TAKE_OVER] = LUA_TAKE_OVER,
	[SK_SCRIPT_UNSTALE] = LUA_UNSTALE,
	[SK_SCRIPT_IDS] = LUA_IDS,
};

/*
 * The traffic limits as field/value pairs of the campaign's hash in Redis,
 * where the purchase script reads them (lua/buy.lua).  Returns the count,
 * SK_LIMIT_ARGS.
 */
int
sk_scripts_limit_args(const SeckillLimits *l, const char **argv)
{
	int			n = 0;

	argv[n++] = "user_rate";
	argv[n++] = psprintf("%.17g", l->user_rate);
	argv[n++] = "user_burst";
	argv[n++] = psprintf("%d", l->user_burst);
	argv[n++] = "addr_rate";
	argv[n++] = psprintf("%.17g", l->addr_rate);
	argv[n++] = "addr_burst";
	argv[n++] = psprintf("%d", l->addr_burst);
	argv[n++] = "token";
	argv[n++] = l->token_required ? "1" : "0";
	Assert(n == SK_LIMIT_ARGS);
	return n;
}
