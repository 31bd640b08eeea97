/*-------------------------------------------------------------------------
 *
 * purchase.h
 *		A round of purchases as one value, and the work of each of its
 *		stages: reserved in Redis, committed in PostgreSQL, answered, and
 *		what PostgreSQL refused given back.  worker/round.c moves the
 *		values through their stages; without Redis, the same group commit
 *		sells from PostgreSQL alone.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_PURCHASE_H
#define SECKILL_PURCHASE_H

#include "layout/purchase_scripts.h"
#include "worker/round_item.h"

/* A purchase of a round, with what Redis has said of it so far. */
typedef struct Purchase
{
	RoundItem  *item;
	SkOrder		order;
} Purchase;

/* Where a round of purchases is in its life. */
typedef enum RoundStage
{
	ROUND_EMPTY,				/* free for the next round */
	ROUND_RESERVING,			/* its pipeline is in Redis */
	ROUND_STAGED,				/* Redis reserved its orders: to commit */
	ROUND_COMMITTED				/* committed, settled and answered; what
								 * PostgreSQL refused is to give back */
} RoundStage;

/*
 * A round of purchases: its requests (copies, as the worker reuses its
 * own), the pipeline of its reservations, the orders Redis accepted with the
 * duplicates answered with them.  Everything it holds lives in cxt,
 * emptied with it.
 */
typedef struct Round
{
	RoundStage	stage;
	MemoryContext cxt;
	RoundItem  *items;
	Purchase   *all;			/* one per item, with its order */
	int			n;
	/* reserving */
	SkPipeline	pipeline;
	SkBuyCalls *calls;
	SkFlight   *flight;
	/* staged, then committed: by order id */
	SkOrder    *orders;
	RoundItem **order_items;
	int			norders;
	/* Redis has them among the buyers: answered with the commit */
	SkOrder    *dup_orders;
	RoundItem **dup_items;
	int			ndups;
	bool		waited;			/* its commit waited for a next round already
								 * (or it was reserved with none staged) */
} Round;

extern void sk_purchase_reserve(Round *r, RoundItem **items, int n);
/* rebuild: room for r->n campaign ids that Redis lost, to rebuild after the round */
extern void sk_purchase_receive(Round *r, int64 *rebuild, int *nrebuild);
extern void sk_purchase_commit(Round **rounds, int n);
extern void sk_purchase_give_back(Round *r);
extern void sk_purchase_empty(Round *r);

extern void sk_purchase_from_database(RoundItem **items, int n);

#endif							/* SECKILL_PURCHASE_H */
