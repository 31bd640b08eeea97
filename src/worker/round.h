/*-------------------------------------------------------------------------
 *
 * round.h
 *		The worker's rounds: the requests taken from the queue, their
 *		purchases moved through their stages beside the last round's
 *		commit, then the other requests.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_ROUND_H
#define SECKILL_ROUND_H

#include "seckill.h"

#include "utils/timestamp.h"

extern void sk_rounds_init(void);
extern bool sk_rounds_serve(MemoryContext cxt, TimestampTz until);
extern void sk_rounds_forget(void);

#endif							/* SECKILL_ROUND_H */
