/*-------------------------------------------------------------------------
 *
 * order_ids.c
 *		The worker's order ids.  It owns a block of SK_ORDER_ID_BLOCK ids
 *		at a time (one nextval of seckill.order_ids), so most rounds need no
 *		transaction for them.  Each new block is recorded in Redis before it
 *		is used (sk_epoch_record_ids): after a failover on asynchronous
 *		replication, the new primary's sequence may hand out a block the old
 *		one used, and Redis, which saw those ids, has it skip past them.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/order_ids.h"

#include "shared/shmem.h"
#include "store/store.h"
#include "worker/epoch.h"
#include "worker/worker_state.h"

static void
forget_block(void)
{
	sk_worker.order_ids.next_id = 0;
	sk_worker.order_ids.last_id = -1;
	sk_worker.order_ids.block_recorded = true;
}

/*
 * Record [first, last] in Redis.  False when Redis has seen ids past first:
 * the sequence then skips past the highest of them, and the block goes.  A
 * block that could not be recorded (Redis failed) is used all the same,
 * since sales from PostgreSQL alone go on without Redis, and recorded as
 * soon as it can be.
 */
static bool
record_block(int64 first, int64 last)
{
	int64		highest = sk_epoch_record_ids(first, last);

	if (highest <= 0)
	{
		sk_worker.order_ids.block_recorded = highest == 0;
		return true;
	}
	ereport(LOG,
			(errmsg("seckill worker skips order ids up to " INT64_FORMAT ": they were handed out before, by this server's sequence before a failover or by another server",
					highest)));
	store_skip_order_ids(highest);
	forget_block();
	return false;
}

/* Order ids for n purchases, in ids[]. */
void
sk_order_ids_take(int64 *ids, int n)
{
	if (pg_atomic_read_u32(&seckill_shared->install_generation) != sk_worker.order_ids.seen_generation)
	{
		sk_worker.order_ids.seen_generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		forget_block();
	}
	if (!sk_worker.order_ids.block_recorded &&
		sk_worker.order_ids.last_id >= sk_worker.order_ids.next_id)
	{
		int64		highest = sk_epoch_record_ids(sk_worker.order_ids.next_id,
												  sk_worker.order_ids.last_id);

		if (highest >= 0)
			sk_worker.order_ids.block_recorded = true;
		/* handed out by another server meanwhile: the rest of it goes */
		if (highest > 0)
			forget_block();
	}
	while (sk_worker.order_ids.last_id - sk_worker.order_ids.next_id + 1 < n)
	{
		int64		start = store_order_id_block();

		if (!record_block(start, start + SK_ORDER_ID_BLOCK - 1))
			continue;
		if (start != sk_worker.order_ids.last_id + 1)
			sk_worker.order_ids.next_id = start;
		sk_worker.order_ids.last_id = start + SK_ORDER_ID_BLOCK - 1;
	}
	for (int i = 0; i < n; i++)
		ids[i] = sk_worker.order_ids.next_id++;
}
