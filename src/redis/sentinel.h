/*-------------------------------------------------------------------------
 *
 * sentinel.h
 *		Finding the Redis master through Redis Sentinel.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_SENTINEL_H
#define SECKILL_SENTINEL_H

#include "seckill.h"

extern bool sk_sentinel_enabled(void);
extern bool sk_sentinel_master(const char *user, const char *password, char *host, size_t hostlen, int *port,
							   char *why, size_t whylen);
extern bool sk_sentinel_poll(const char *user, const char *password, char *host, size_t hostlen, int *port,
							 char *why, size_t whylen);
extern bool sk_sentinel_connected(void);
extern void sk_sentinel_close(void);

#endif							/* SECKILL_SENTINEL_H */
