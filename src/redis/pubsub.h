/*-------------------------------------------------------------------------
 *
 * pubsub.h
 *		A subscription to one Redis channel, kept by the worker's Redis
 *		client across its reconnections.  Its messages, read within any
 *		Redis wait, are kept until the worker takes them: nothing of the
 *		worker is called from redis/.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_PUBSUB_H
#define SECKILL_PUBSUB_H

#include "seckill.h"

extern void sk_pubsub_subscribe(const char *channel);
extern int	sk_pubsub_take(char ***messages, bool *overflowed);

#endif							/* SECKILL_PUBSUB_H */
