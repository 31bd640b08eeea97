/*-------------------------------------------------------------------------
 *
 * request.c
 *		What every SQL-callable function of seckill needs: its arguments
 *		checked, the open campaign of a goods, and the worker's reply turned
 *		into a result or an ERROR a DBA can act on.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include "funcapi.h"
#include "shared/campaign_cache.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/inet.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

/* A text argument that is a user or goods id: not null, not empty, not too long. */
char *
seckill_id_arg(FunctionCallInfo fcinfo, int argno, const char *name, int maxlen)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", name)));
	t = PG_GETARG_TEXT_PP(argno);
	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", name)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("%s is too long", name),
				 errdetail("It is %d bytes long; the limit is %d bytes.", len, maxlen)));
	return text_to_cstring(t);
}

/*
 * The client address of a call, for a campaign's addr_rate: the inet
 * argument argno (NULL: none), else (argno -1) the session's, as
 * inet_client_addr() gives it; "" when there is none.  It costs a
 * getnameinfo(): only for a campaign that limits addresses.
 */
void
seckill_client_addr(FunctionCallInfo fcinfo, int argno, char *out, size_t len)
{
	Datum		addr;

	out[0] = '\0';
	if (argno >= 0)
	{
		if (PG_ARGISNULL(argno))
			return;
		addr = PG_GETARG_DATUM(argno);
	}
	else
	{
		LOCAL_FCINFO(fc, 0);

		InitFunctionCallInfoData(*fc, NULL, 0, InvalidOid, NULL, NULL);
		addr = inet_client_addr(fc);
		if (fc->isnull)
			return;
	}
	strlcpy(out, DatumGetCString(DirectFunctionCall1(inet_out, addr)), len);
}

/*
 * The row types of the functions' results, blessed once per backend and
 * function: the executor gives a function in FROM a new FmgrInfo at every
 * execution, so fn_extra alone would build the descriptor again at every
 * call of a hot path (a purchase, a sold-out answer, a poll of the waiting
 * room) from pg_proc's argument arrays.  A change to pg_proc has them
 * checked again; one that is still right is kept (a call's fn_extra may
 * point to it).
 */
typedef struct ResultDesc
{
	Oid			fn_oid;
	bool		checked;
	TupleDesc	desc;
} ResultDesc;

#define RESULT_DESCS 8

static ResultDesc result_descs[RESULT_DESCS];
static int	n_result_descs = 0;

/* the same columns: names and types (a blessed copy differs in its typmod) */
static bool
same_columns(TupleDesc a, TupleDesc b)
{
	if (a->natts != b->natts)
		return false;
	for (int i = 0; i < a->natts; i++)
		if (TupleDescAttr(a, i)->atttypid != TupleDescAttr(b, i)->atttypid ||
			namestrcmp(&TupleDescAttr(a, i)->attname, NameStr(TupleDescAttr(b, i)->attname)) != 0)
			return false;
	return true;
}

static void
check_result_descs_again(Datum arg, int cacheid, uint32 hashvalue)
{
	for (int i = 0; i < n_result_descs; i++)
		result_descs[i].checked = false;
}

TupleDesc
seckill_result_desc(FunctionCallInfo fcinfo)
{
	static bool callback_registered = false;
	static int	next_reused = 0;
	Oid			fn_oid = fcinfo->flinfo->fn_oid;
	ResultDesc *kept = NULL;
	MemoryContext old;
	TupleDesc	desc;

	if (fcinfo->flinfo->fn_extra != NULL)
		return (TupleDesc) fcinfo->flinfo->fn_extra;
	for (int i = 0; i < n_result_descs; i++)
		if (result_descs[i].fn_oid == fn_oid)
			kept = &result_descs[i];
	if (kept == NULL || !kept->checked)
	{
		if (!callback_registered)
		{
			CacheRegisterSyscacheCallback(PROCOID, check_result_descs_again, (Datum) 0);
			callback_registered = true;
		}
		if (kept != NULL)
			kept->checked = true;	/* (a change meanwhile has it checked again) */
		if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		if (kept == NULL || !same_columns(desc, kept->desc))
		{
			/*
			 * A new one, or one changed.  The one it replaces stays allocated:
			 * a call's fn_extra may still point to it.  (Beyond RESULT_DESCS
			 * functions, the functions of an extension created again, say, a
			 * slot is taken over in turn.)
			 */
			old = MemoryContextSwitchTo(TopMemoryContext);
			desc = BlessTupleDesc(CreateTupleDescCopy(desc));
			MemoryContextSwitchTo(old);
			if (kept == NULL)
			{
				kept = n_result_descs < RESULT_DESCS ? &result_descs[n_result_descs++]
					: &result_descs[next_reused++ % RESULT_DESCS];
				kept->fn_oid = fn_oid;
				kept->checked = true;
			}
			kept->desc = desc;
		}
	}
	return (TupleDesc) (fcinfo->flinfo->fn_extra = kept->desc);
}

/* Ask the worker; turn failures into ERRORs a DBA can act on. */
SeckillReply
seckill_call_checked(SeckillRequestKind kind, int64 campaign_id, const char *user_id, int qty)
{
	SeckillRequest request;

	memset(&request, 0, sizeof(request));
	request.kind = kind;
	request.campaign_id = campaign_id;
	request.qty = qty;
	if (user_id)
		strlcpy(request.user_id, user_id, sizeof(request.user_id));
	return seckill_request_checked(&request);
}

SeckillReply
seckill_request_checked(const SeckillRequest *request)
{
	return seckill_reply_checked(request->kind, seckill_call(request));
}

/*
 * The SQLSTATE of a failure the worker met while serving a request: its own
 * statement timeout is seckill's timeout, which the caller must be able to
 * tell from its own cancel or statement_timeout (57014).
 */
static int
failure_code(int cause, int otherwise)
{
	return cause == ERRCODE_QUERY_CANCELED ? ERRCODE_SECKILL_TIMEOUT : otherwise;
}

/* A failure in the reply becomes an ERROR a DBA can act on. */
SeckillReply
seckill_reply_checked(SeckillRequestKind kind, SeckillReply reply)
{
	switch (reply.status)
	{
		case SK_ERR_REDIS:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("seckill could not reach Redis"),
					 errdetail("%s", reply.message),
					 seckill_redis_sentinels[0] != '\0' ?
					 errhint("Check the sentinels of seckill.redis_sentinels (%s) and the master they name \"%s\"; the worker reconnects by itself.",
							 seckill_redis_sentinels, seckill_redis_master_name) :
					 errhint("Check that Redis answers at seckill.redis_host:seckill.redis_port (%s:%d); the worker reconnects by itself.",
							 seckill_redis_host, seckill_redis_port)));
			break;
		case SK_ERR_REDIS_REFUSED:
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("Redis refused seckill's request"),
					 errdetail("%s", reply.message),
					 errhint("Check Redis: a read-only replica, a full maxmemory, or an ACL that lacks a command refuses seckill.")));
			break;
		case SK_ERR_WORKER:
			ereport(ERROR,
					(errcode(failure_code(reply.sqlerrcode, ERRCODE_SECKILL_WORKER_FAILED)),
					 errmsg("%s", reply.message),
					 reply.sqlerrcode ? errdetail("Its cause's SQLSTATE is %s.", unpack_sql_state(reply.sqlerrcode)) : 0,
					 kind == SK_REQ_BUY ?
					 errhint("The purchase was either committed or will be given back; call seckill_order() to learn which.") :
					 errhint("Call the function again.")));
			break;
		case SK_ERR_INVALID:
			ereport(ERROR,
					(errcode(failure_code(reply.sqlerrcode, reply.sqlerrcode ? reply.sqlerrcode : ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE)),
					 errmsg("%s", reply.message),
					 reply.sqlerrcode == ERRCODE_QUERY_CANCELED ?
					 errdetail("The worker's transaction was canceled (seckill.worker_statement_timeout, or a cancel of the worker) and rolled back.") : 0));
			break;
		case SK_ERR_LOCKED:
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("%s", reply.message),
					 errhint("Its lease runs out within seckill.lock_lease; try again then, and give each cluster sharing a Redis its own seckill.redis_prefix.")));
			break;
		case SK_ERR_FENCED:
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("%s", reply.message),
					 errhint("This server was the primary before a failover: sell on the new primary, and rejoin this one as its standby (pg_rewind).")));
			break;
		case SK_ERR_EPOCH_LOST:
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("%s", reply.message),
					 errdetail("A primary left behind by a failover it never saw must not sell on through a Redis that forgot the failover (seckill.redis_epoch_lost)."),
					 errhint("On the primary, and there only, run SELECT seckill_epoch_claim(); a server that is not the primary rejoins as a standby (pg_rewind).")));
			break;
		default:
			break;
	}
	return reply;
}

/* The id of the open campaign for goods; ERROR when there is none. */
int64
seckill_open_campaign_id(const char *goods)
{
	SeckillCampaignRow row;

	/* its query reads the columns of this library's version */
	seckill_check_database();
	if (!store_campaign_by_goods(goods, &row) || strcmp(row.state, "closed") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("no open campaign for goods \"%s\"", goods),
				 errhint("Create one with seckill_campaign_create().")));
	return row.id;
}

