/*-------------------------------------------------------------------------
 *
 * purchase.h
 *		A round's purchases, through Redis or from PostgreSQL alone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_PURCHASE_H
#define SECKILL_PURCHASE_H

#include "worker/round.h"

/* rebuild: room for n campaign ids that Redis lost, to rebuild after the round */
extern void sk_purchase_round(RoundItem **items, int n, int64 *rebuild, int *nrebuild);
extern void sk_purchase_from_database(RoundItem **items, int n);

#endif							/* SECKILL_PURCHASE_H */
