/*-------------------------------------------------------------------------
 *
 * round_item.h
 *		One request of a worker's round, and how its caller is answered.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_ROUND_ITEM_H
#define SECKILL_ROUND_ITEM_H

#include "shared/call.h"

typedef struct RoundItem
{
	int			slot;
	uint64		seq;
	SeckillRequest request;
	SeckillReply reply;
} RoundItem;

/* Answer the caller; false when it gave up meanwhile. */
static inline bool
sk_answer(RoundItem *item)
{
	return seckill_slot_reply(item->slot, item->seq, &item->reply);
}

static inline void
sk_fail_all(RoundItem **items, int n, SeckillStatus status, const char *message)
{
	for (int i = 0; i < n; i++)
	{
		seckill_reply_error(&items[i]->reply, status, "%s", message);
		sk_answer(items[i]);
	}
}

#endif							/* SECKILL_ROUND_ITEM_H */
