/*-------------------------------------------------------------------------
 *
 * backend.h
 *		Helpers shared by the SQL-callable functions (request.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_BACKEND_H
#define SECKILL_BACKEND_H

#include "shared/call.h"

#include "fmgr.h"

/* A campaign row as a backend reads it from seckill.campaigns. */
typedef struct CampaignInfo
{
	int64		id;
	char		state[16];
	TimestampTz starts_at;
	TimestampTz ends_at;
	int32		per_user_limit;
	SeckillLimits limits;
} CampaignInfo;

extern int	seckill_spi_begin(void);
extern void seckill_spi_end(int level);
extern char *seckill_id_arg(FunctionCallInfo fcinfo, int argno, const char *name, int maxlen);
extern bool seckill_campaign_by_goods(const char *goods, CampaignInfo *info);
extern int64 seckill_open_campaign_id(const char *goods);
extern SeckillReply seckill_call_checked(SeckillRequestKind kind, int64 campaign_id,
										 const char *user_id, int qty);
extern SeckillReply seckill_request_checked(const SeckillRequest *request);
extern SeckillReply seckill_reply_checked(SeckillRequestKind kind, SeckillReply reply);

#endif							/* SECKILL_BACKEND_H */
