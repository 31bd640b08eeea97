/*-------------------------------------------------------------------------
 *
 * tls.h
 *		TLS under the Redis client's connections (seckill.redis_tls):
 *		hiredis 0.14 has none, so its reply reader is fed with what OpenSSL
 *		decrypts, and its output buffer is written through OpenSSL.
 *
 * Each function takes a hiredis context; on one without TLS it does what
 * hiredis itself does (redisBufferRead, redisBufferWrite, redisFree).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_TLS_H
#define SECKILL_TLS_H

#include "seckill.h"

#include <hiredis/hiredis.h>

#include "utils/timestamp.h"

extern bool sk_tls_start(redisContext *ctx, const char *host, int port, TimestampTz deadline,
						 char *error, size_t errorlen);
extern int	sk_tls_read(redisContext *ctx);
extern int	sk_tls_write(redisContext *ctx, int *done);
extern bool sk_tls_write_secret(redisContext *ctx, const char *buf, size_t len, TimestampTz deadline);
extern bool sk_tls_write_auth(redisContext *ctx, const char *user, const char *password,
							  TimestampTz deadline);
extern void sk_tls_free(redisContext *ctx);
extern bool sk_tls_wait(int fd, bool write, TimestampTz deadline);

#endif							/* SECKILL_TLS_H */
