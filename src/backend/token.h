/*-------------------------------------------------------------------------
 *
 * token.h
 *		One-time purchase tokens: issued by seckill_token(), checked by
 *		seckill_buy(), spent in Redis by the purchase script.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_TOKEN_H
#define SECKILL_TOKEN_H

#include "seckill.h"

extern bool seckill_token_verify(int64 campaign_id, const SeckillLimits *limits,
								 const char *user_id, const char *token,
								 char *nonce, int64 *expiry);

#endif							/* SECKILL_TOKEN_H */
