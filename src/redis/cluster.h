/*-------------------------------------------------------------------------
 *
 * cluster.h
 *		Redis Cluster's key space: hash slots, the map of which master
 *		serves each, and the redirections a master answers with.
 *
 * Only the arithmetic and the parsing: the connections to the masters are
 * conn.c's, which names each by its index in its table of nodes.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CLUSTER_H
#define SECKILL_CLUSTER_H

#include "redis/reply.h"

#define SK_CLUSTER_SLOTS 16384

/* What a reply asks of the client before the command can run. */
typedef enum SkRedirect
{
	SK_REDIRECT_NONE,
	SK_REDIRECT_MOVED,			/* the slot is served elsewhere for good */
	SK_REDIRECT_ASK,			/* the key is being moved: ask there once */
	SK_REDIRECT_TRYAGAIN		/* the slot is mid-move: try again shortly */
} SkRedirect;

/*
 * Finds (or connects) the master at host:port: its index; SK_NODE_DOWN when
 * it cannot be reached (its slots are left unserved), SK_NODE_GONE when
 * every connection was lost meanwhile (the map is not usable).
 */
#define SK_NODE_DOWN (-1)
#define SK_NODE_GONE (-2)
typedef int (*SkNodeIndex) (const char *host, int port);

extern int	sk_cluster_key_slot(const char *key, size_t len);
extern void sk_cluster_map_reset(void);
extern int	sk_cluster_node_of(int slot);
extern void sk_cluster_map_set(int slot, int node);
extern bool sk_cluster_map_load(const SkReply *slots, const char *seed_host,
								SkNodeIndex node_index, char *why, size_t whylen);
extern SkRedirect sk_cluster_redirect(const SkReply *r, int *slot,
									  char *host, size_t hostlen, int *port);

#endif							/* SECKILL_CLUSTER_H */
