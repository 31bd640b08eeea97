/*-------------------------------------------------------------------------
 *
 * waiting_room.h
 *		The campaigns' waiting lines: places given, early joins drawn,
 *		buyers admitted from the head of each line.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_WAITING_ROOM_H
#define SECKILL_WAITING_ROOM_H

#include "worker/round_item.h"

extern void sk_waiting_room_start(void);
extern void sk_waiting_room_join(RoundItem *items, int nitems);
extern void sk_waiting_room_tick(void);
extern long sk_waiting_room_wait(void);

#endif							/* SECKILL_WAITING_ROOM_H */
