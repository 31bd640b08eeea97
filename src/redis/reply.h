/*-------------------------------------------------------------------------
 *
 * reply.h
 *		A Redis reply as the worker's Redis client hands it out, copied
 *		into palloc'd memory, and what it says.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REPLY_H
#define SECKILL_REPLY_H

#include "seckill.h"

#include <hiredis/read.h>

/* A Redis reply, palloc'd. type is one of hiredis' REDIS_REPLY_* */
typedef struct SkReply
{
	int			type;
	long long	integer;
	char	   *str;
	size_t		len;
	size_t		elements;
	struct SkReply *element;
} SkReply;

extern bool sk_reply_is_error(const SkReply *r);
extern bool sk_reply_refused(const SkReply *r, const char **why);
extern bool sk_reply_is_moving(const SkReply *r);
extern bool sk_reply_is_unreachable(const SkReply *r);
extern long long sk_reply_int(const SkReply *r);

#endif							/* SECKILL_REPLY_H */
