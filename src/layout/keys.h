/*-------------------------------------------------------------------------
 *
 * keys.h
 *		Where seckill keeps its state in Redis: the key names, their hash
 *		tags, and how a campaign's stock and buyers spread over its shards.
 *
 * Key names: prefix:{c:<id>}:<part>, one hash tag per campaign; a campaign
 * whose stock is split into shards has a hash tag per shard,
 * prefix:{c:<id>:<shard>}:<part>, so that the shards can live on different
 * Redis Cluster nodes.  A user's buyer entry, rate-limit buckets and spent
 * tokens live in its home shard, which also serves its purchases while it
 * has stock; the others lend theirs when it has none.  The keys of the
 * whole prefix (the epoch, the master's identity, the order ids) share one
 * tag, prefix:{prefix}:<part>; a SQL caller's lock is prefix:{lock:<name>},
 * and its shared holders, fair line and the like are keys under its tag.
 *
 * The worker builds every key it sends from here, and the backend's
 * seckill_campaign_nodes() finds a shard's slot from the same names.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_KEYS_H
#define SECKILL_KEYS_H

#include "seckill.h"

extern char *sk_keys_prefixed(const char *part);
extern char *sk_keys_campaign(int64 campaign_id, const char *part);
extern char *sk_keys_shard(int64 campaign_id, int shard, int nshards, const char *part);
extern int	sk_keys_home_shard(const char *user_id, int nshards);
extern int	sk_keys_shard_stock(int stock, int shard, int nshards);

/* The keys of one shard of a campaign: meta, buyers, journal. */
extern void sk_keys_shard_set(int64 campaign_id, int shard, int nshards, const char **keys);

extern char *sk_keys_lock(const char *name);

/* The keys of a lock and its kin (sk_keys_lock_set), by index. */
#define SK_LOCK_KEY 0
#define SK_LOCK_SHARED 1
#define SK_LOCK_CLAIM 2
#define SK_LOCK_LINE 3
#define SK_LOCK_LINE_LEASES 4
#define SK_LOCK_NKEYS 5
extern void sk_keys_lock_set(const char *name, const char **keys);
extern char *sk_keys_lock_name(const char *key);
extern char *sk_keys_lock_channel(void);

#endif							/* SECKILL_KEYS_H */
