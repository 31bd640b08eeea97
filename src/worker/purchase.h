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
/*
 * A round's accepted orders wait in the commit stage for the next round's
 * pipeline, or for sk_purchase_flush(), which whatever is not a purchase
 * round (a replay, admin work, an idle wait) calls first.
 */
extern bool sk_purchase_staged(void);
extern void sk_purchase_flush(void);
extern void sk_purchase_forget(void);

#endif							/* SECKILL_PURCHASE_H */
