/*-------------------------------------------------------------------------
 *
 * redis_nodes.c
 *		The Redis masters as the worker last saw them (redis_nodes.h).
 *
 *-------------------------------------------------------------------------
 */
#include "shared/redis_nodes.h"

#include "shared/shmem.h"

SeckillRedisNodes *seckill_redis_nodes = NULL;

static Size
nodes_size(void)
{
	return sizeof(SeckillRedisNodes);
}

/* No master known yet. */
static void
nodes_init(void *base, bool found, LWLockPadded *lwlocks)
{
	seckill_redis_nodes = base;
	if (found)
		return;
	memset(seckill_redis_nodes, 0, sizeof(SeckillRedisNodes));
	seckill_redis_nodes->lock = &lwlocks[0].lock;
	for (int i = 0; i < SK_REDIS_NODES; i++)
		pg_atomic_init_u64(&seckill_redis_nodes->node[i].round_trips, 0);
	for (int s = 0; s < SK_REDIS_SLOTS; s++)
		seckill_redis_nodes->slot_node[s] = -1;
}

void
seckill_redis_nodes_register(void)
{
	static const SeckillShmemPart part = {"seckill redis nodes", 1, nodes_size, nodes_init};

	seckill_shmem_register(&part);
}
