/*-------------------------------------------------------------------------
 *
 * pacing.h
 *		Long work paced between the worker's rounds.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_PACING_H
#define SECKILL_PACING_H

#include "worker/round_item.h"

extern void sk_pacing_note_purchases(void);
extern long sk_pacing_wait(void);
extern void sk_pacing_serve_or_hold(RoundItem *item);
extern bool sk_pacing_pending(void);
extern void sk_pacing_step(void);
extern void sk_pacing_forget(void);

#endif							/* SECKILL_PACING_H */
