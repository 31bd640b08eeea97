/*-------------------------------------------------------------------------
 *
 * rebuild.h
 *		Loading campaigns from PostgreSQL into Redis, in steps between the
 *		worker's rounds.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REBUILD_H
#define SECKILL_REBUILD_H

#include "store/store.h"
#include "worker/round_item.h"

extern void sk_rebuild_request(int64 campaign_id);
extern void sk_rebuild_lost(int64 campaign_id);
extern void sk_rebuild_forget_failures(void);
extern bool sk_rebuild_pending(void);
extern bool sk_rebuild_busy(int64 campaign_id);
extern uint64 sk_rebuild_failures(void);
extern void sk_rebuild_wait(const RoundItem *item);
extern bool sk_rebuild_defer(const RoundItem *item);
extern List *sk_rebuild_step(void);
extern List *sk_rebuild_failed(const SeckillReply *why);
extern void sk_rebuild_abort(void);
extern bool sk_rebuild_note_cancel(const SkCancelled *cancelled);

#endif							/* SECKILL_REBUILD_H */
