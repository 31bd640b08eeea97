/*-------------------------------------------------------------------------
 *
 * campaign_ops.h
 *		The worker's multi-step work on a campaign: preheat (rebuild from
 *		PostgreSQL), close, status, reconcile, and the journal replay.  Each
 *		runs under the campaign's Redis lock.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_CAMPAIGN_OPS_H
#define SECKILL_CAMPAIGN_OPS_H

#include "shmem.h"

extern bool sk_replay_all(void);
extern void sk_serve_admin(const SeckillRequest *request, SeckillReply *reply);
extern void sk_release_lock(void);
extern void sk_note_stock(int64 campaign_id, int shard, long long stock);
extern void sk_note_sold_out(int64 campaign_id);
extern void sk_reply_error(SeckillReply *reply, SeckillStatus status, const char *fmt,...) pg_attribute_printf(3, 4);

#endif							/* SECKILL_CAMPAIGN_OPS_H */
