/*-------------------------------------------------------------------------
 *
 * queue_tickets.h
 *		The waiting lines' tickets in shared memory, so that a backend
 *		answers a waiting buyer's poll without reading PostgreSQL.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_QUEUE_TICKETS_H
#define SECKILL_QUEUE_TICKETS_H

#include "campaign.h"

/* The ticket of a buyer who joined before the start, until the draw. */
#define SECKILL_TICKET_EARLY (-1)

extern void seckill_tickets_register(void);

/* backends: the buyer's ticket, SECKILL_TICKET_EARLY, or 0 (not kept) */
extern int64 seckill_ticket_find(const SeckillCampaignRow *campaign, const char *user_id);

/* worker */
extern bool seckill_ticket_put(const SeckillCampaignRow *campaign, const char *user_id, int64 ticket);
extern uint32 seckill_tickets_used(void);
extern void seckill_tickets_clear(void);

#endif							/* SECKILL_QUEUE_TICKETS_H */
