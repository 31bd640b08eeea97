/*-------------------------------------------------------------------------
 *
 * pubsub.h
 *		A subscription to one Redis channel, kept by the worker's Redis
 *		client across its reconnections.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_PUBSUB_H
#define SECKILL_PUBSUB_H

#include "seckill.h"

extern void sk_pubsub_subscribe(const char *channel, void (*callback) (const char *message));

#endif							/* SECKILL_PUBSUB_H */
