/*-------------------------------------------------------------------------
 *
 * database_mode.h
 *		Sales from PostgreSQL alone while Redis cannot take them, and the
 *		way back to Redis.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_DATABASE_MODE_H
#define SECKILL_DATABASE_MODE_H

#include "worker/round_item.h"

extern bool sk_database_mode_leave(void);
extern void sk_database_mode_serve(RoundItem **buys, int nserved);

#endif							/* SECKILL_DATABASE_MODE_H */
