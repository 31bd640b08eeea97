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
#include "shared/campaign_cache.h"

#include "access/tupdesc.h"
#include "fmgr.h"

extern char *seckill_id_arg(FunctionCallInfo fcinfo, int argno, const char *name, int maxlen);
extern TupleDesc seckill_result_desc(FunctionCallInfo fcinfo);
extern void seckill_client_addr(FunctionCallInfo fcinfo, int argno, char *out, size_t len);
extern int64 seckill_open_campaign_id(const char *goods);
extern SeckillReply seckill_call_checked(SeckillRequestKind kind, int64 campaign_id,
										 const char *user_id, int qty);
extern SeckillReply seckill_request_checked(const SeckillRequest *request);
extern SeckillReply seckill_reply_checked(SeckillRequestKind kind, SeckillReply reply);
extern void seckill_version_guard_register(void);
extern bool seckill_queue_admits(const SeckillCampaign *c, const char *user_id, TimestampTz now);

#endif							/* SECKILL_BACKEND_H */
