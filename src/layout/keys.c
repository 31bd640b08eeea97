/*-------------------------------------------------------------------------
 *
 * keys.c
 *		The names of seckill's keys in Redis, and the arithmetic of a
 *		campaign's shards (keys.h).
 *
 *-------------------------------------------------------------------------
 */
#include "layout/keys.h"

#include "common/hashfn.h"

/*
 * A key of the whole prefix, not of one campaign: prefix:{prefix}:<part>,
 * all in one Redis Cluster slot, so that one script may use several.
 */
char *
sk_keys_prefixed(const char *part)
{
	return psprintf("%s:{%s}:%s", seckill_redis_prefix, seckill_redis_prefix, part);
}

char *
sk_keys_campaign(int64 campaign_id, const char *part)
{
	return psprintf("%s:{c:" INT64_FORMAT "}:%s", seckill_redis_prefix, campaign_id, part);
}

char *
sk_keys_shard(int64 campaign_id, int shard, int nshards, const char *part)
{
	if (nshards <= 1)
		return sk_keys_campaign(campaign_id, part);
	return psprintf("%s:{c:" INT64_FORMAT ":%d}:%s", seckill_redis_prefix, campaign_id, shard, part);
}

/* The same as SQL's (hashtext(user_id)::bigint & 4294967295) % nshards. */
int
sk_keys_home_shard(const char *user_id, int nshards)
{
	if (nshards <= 1)
		return 0;
	return (int) (hash_bytes((const unsigned char *) user_id, strlen(user_id)) % (uint32) nshards);
}

int
sk_keys_shard_stock(int stock, int shard, int nshards)
{
	return stock / nshards + (shard < stock % nshards ? 1 : 0);
}

void
sk_keys_shard_set(int64 id, int shard, int nshards, const char **keys)
{
	keys[0] = sk_keys_shard(id, shard, nshards, "meta");
	keys[1] = sk_keys_shard(id, shard, nshards, "buyers");
	keys[2] = sk_keys_shard(id, shard, nshards, "journal");
}

char *
sk_keys_lock(const char *name)
{
	return psprintf("%s:{lock:%s}", seckill_redis_prefix, name);
}

/*
 * The keys of a lock and of its kin, under the lock's hash tag: the lock
 * (its exclusive holder), its shared holders, the claim of an exclusive
 * taker waiting for them, its fair line, and the line's leases.
 */
void
sk_keys_lock_set(const char *name, const char **keys)
{
	keys[SK_LOCK_KEY] = sk_keys_lock(name);
	keys[SK_LOCK_SHARED] = psprintf("%s:shared", keys[SK_LOCK_KEY]);
	keys[SK_LOCK_CLAIM] = psprintf("%s:claim", keys[SK_LOCK_KEY]);
	keys[SK_LOCK_LINE] = psprintf("%s:line", keys[SK_LOCK_KEY]);
	keys[SK_LOCK_LINE_LEASES] = psprintf("%s:line-leases", keys[SK_LOCK_KEY]);
}

/* The lock whose key sk_keys_lock() made, NULL for another key. */
char *
sk_keys_lock_name(const char *key)
{
	char	   *head = psprintf("%s:{lock:", seckill_redis_prefix);
	size_t		len = strlen(key);

	if (strncmp(key, head, strlen(head)) != 0 || len <= strlen(head) || key[len - 1] != '}')
		return NULL;
	return pnstrdup(key + strlen(head), len - strlen(head) - 1);
}

/* Where releases are announced, for the waiters of other clusters sharing the Redis. */
char *
sk_keys_lock_channel(void)
{
	return psprintf("%s:lock-released", seckill_redis_prefix);
}
