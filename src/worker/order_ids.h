/*-------------------------------------------------------------------------
 *
 * order_ids.h
 *		The worker's order ids: blocks of PostgreSQL's sequence, each
 *		recorded in Redis before it is used.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_ORDER_IDS_H
#define SECKILL_ORDER_IDS_H

#include "postgres.h"

extern void sk_order_ids_take(int64 *ids, int n);

#endif							/* SECKILL_ORDER_IDS_H */
