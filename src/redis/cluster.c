/*-------------------------------------------------------------------------
 *
 * cluster.c
 *		Hash slots, the slot map and redirections of Redis Cluster.
 *
 * A key's slot is CRC16 (XMODEM) of its hash tag, the part between the
 * first '{' and the next '}' when that part is not empty, else of the whole
 * key, modulo 16384.  seckill's keys all carry a tag: one per campaign or
 * stock shard, one for the keys of the whole prefix (layout/keys.h).
 *
 *-------------------------------------------------------------------------
 */
#include "redis/cluster.h"

#include <hiredis/read.h>

/* Which node serves each slot; -1 when none does (or none known). */
static int16 slot_node[SK_CLUSTER_SLOTS];

static uint16
crc16(const char *buf, size_t len)
{
	uint16		crc = 0;

	for (size_t i = 0; i < len; i++)
	{
		crc ^= (uint16) ((unsigned char) buf[i]) << 8;
		for (int bit = 0; bit < 8; bit++)
			crc = (crc & 0x8000) ? (uint16) ((crc << 1) ^ 0x1021) : (uint16) (crc << 1);
	}
	return crc;
}

int
sk_cluster_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open != NULL)
	{
		const char *close = memchr(open + 1, '}', len - (open + 1 - key));

		if (close != NULL && close > open + 1)
			return crc16(open + 1, close - open - 1) & (SK_CLUSTER_SLOTS - 1);
	}
	return crc16(key, len) & (SK_CLUSTER_SLOTS - 1);
}

void
sk_cluster_map_reset(void)
{
	for (int i = 0; i < SK_CLUSTER_SLOTS; i++)
		slot_node[i] = -1;
}

int
sk_cluster_node_of(int slot)
{
	return slot < 0 ? -1 : slot_node[slot];
}

void
sk_cluster_map_set(int slot, int node)
{
	slot_node[slot] = node;
}

/*
 * Fill the map from a CLUSTER SLOTS reply: an array of ranges, each [first,
 * last, master, replicas...], a node being [host, port, id, ...].  A master
 * that names no host (an empty or "?" endpoint) is reached at the seed's.
 * The ranges of a master that cannot be reached stay unserved.
 */
bool
sk_cluster_map_load(const SkReply *slots, const char *seed_host,
					SkNodeIndex node_index, char *why, size_t whylen)
{
	if (slots->type != REDIS_REPLY_ARRAY)
	{
		snprintf(why, whylen, "CLUSTER SLOTS answered %s", slots->str ? slots->str : "no array");
		return false;
	}
	sk_cluster_map_reset();
	for (size_t i = 0; i < slots->elements; i++)
	{
		const SkReply *range = &slots->element[i];
		const SkReply *master;
		const char *host;
		int			node;

		if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
			range->element[2].type != REDIS_REPLY_ARRAY || range->element[2].elements < 2)
		{
			snprintf(why, whylen, "CLUSTER SLOTS gave a range seckill cannot read");
			return false;
		}
		master = &range->element[2];
		host = master->element[0].str;
		if (host == NULL || host[0] == '\0' || strcmp(host, "?") == 0)
			host = seed_host;
		node = node_index(host, (int) master->element[1].integer);
		if (node == SK_NODE_GONE)
		{
			snprintf(why, whylen, "could not reach the master %s:%lld of slots %lld-%lld",
					 host, master->element[1].integer,
					 range->element[0].integer, range->element[1].integer);
			return false;
		}
		if (node == SK_NODE_DOWN)
			continue;
		for (long long s = Max(range->element[0].integer, 0);
			 s <= range->element[1].integer && s < SK_CLUSTER_SLOTS; s++)
			slot_node[s] = node;
	}
	return true;
}

/*
 * "MOVED <slot> <host>:<port>", "ASK <slot> <host>:<port>" or "TRYAGAIN ...":
 * none of them ran the command.
 */
SkRedirect
sk_cluster_redirect(const SkReply *r, int *slot, char *host, size_t hostlen, int *port)
{
	SkRedirect	kind;
	const char *at;
	const char *colon;

	if (r->type != REDIS_REPLY_ERROR || r->str == NULL)
		return SK_REDIRECT_NONE;
	if (strncmp(r->str, "TRYAGAIN", 8) == 0)
		return SK_REDIRECT_TRYAGAIN;
	if (strncmp(r->str, "MOVED ", 6) == 0)
		kind = SK_REDIRECT_MOVED;
	else if (strncmp(r->str, "ASK ", 4) == 0)
		kind = SK_REDIRECT_ASK;
	else
		return SK_REDIRECT_NONE;
	at = strchr(r->str, ' ') + 1;
	*slot = atoi(at);
	at = strchr(at, ' ');
	colon = at ? strrchr(at, ':') : NULL;
	if (colon == NULL || *slot < 0 || *slot >= SK_CLUSTER_SLOTS)
		return SK_REDIRECT_NONE;
	at++;
	snprintf(host, hostlen, "%.*s", (int) (colon - at), at);
	*port = atoi(colon + 1);
	return kind;
}
