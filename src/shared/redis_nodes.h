/*-------------------------------------------------------------------------
 *
 * redis_nodes.h
 *		The Redis masters the worker is connected to, as it last saw them,
 *		for the seckill.redis_nodes view: each master's address, whether it
 *		is reached, how many slots it serves and how many round trips went
 *		to it; and which master serves each slot.
 *
 * The worker alone writes it (redis/topology.c; redis/conn.c marks the
 * masters unreached when the connections are lost), under its LWLock.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REDIS_NODES_H
#define SECKILL_REDIS_NODES_H

#include "seckill.h"

#include "port/atomics.h"
#include "storage/lwlock.h"

#define SK_REDIS_NODES 32
#define SK_REDIS_SLOTS 16384

typedef struct SeckillRedisNode
{
	char		addr[280];		/* host:port */
	bool		connected;
	int32		slots;			/* the slots it serves */
	pg_atomic_uint64 round_trips;	/* since the worker connected to it */
	char		error[160];		/* why it is not reached */
} SeckillRedisNode;

typedef struct SeckillRedisNodes
{
	LWLock	   *lock;
	int32		count;
	bool		cluster;		/* a Redis Cluster; else one Redis serves every slot */
	SeckillRedisNode node[SK_REDIS_NODES];
	int16		slot_node[SK_REDIS_SLOTS];	/* index in node[], -1: none */
} SeckillRedisNodes;

extern SeckillRedisNodes *seckill_redis_nodes;

extern void seckill_redis_nodes_register(void);

#endif							/* SECKILL_REDIS_NODES_H */
