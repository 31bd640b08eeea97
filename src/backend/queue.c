/*-------------------------------------------------------------------------
 *
 * queue.c
 *		The waiting room's calls: seckill_queue_join, seckill_queue_status,
 *		the pass seckill_buy asks for (seckill_queue_admits), and the
 *		lines' figures in seckill.stats.
 *
 * A buyer's standing is answered in the caller's backend: its ticket, from
 * the worker's table in shared memory (shared/queue_tickets.c), against the
 * line's admission mark in the campaign cache.  Only a buyer admitted
 * already (whose pass is read there: the table alone lets no purchase in),
 * or one the table does not keep, costs a read of seckill.queue_places.  A
 * join goes to the worker, which gives the place in its own transaction: it
 * stands even if the caller's rolls back.
 *
 *-------------------------------------------------------------------------
 */
#include "backend/backend.h"

#include <math.h>

#include "access/htup_details.h"
#include "funcapi.h"
#include "shared/campaign_cache.h"
#include "shared/queue_tickets.h"
#include "shared/shmem.h"
#include "shared/stats.h"
#include "store/store.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(seckill_queue_join);
PG_FUNCTION_INFO_V1(seckill_queue_status);
PG_FUNCTION_INFO_V1(seckill_queue_rows);

typedef enum QueueState
{
	QS_WAITING,
	QS_ADMITTED,
	QS_USED,					/* the pass bought */
	QS_EXPIRED,					/* the pass ran out unused */
	QS_SOLD_OUT,
	QS_NOT_JOINED,
	QS_NOT_STARTED,				/* the line is not open yet */
	QS_ENDED,
	QS_UNKNOWN_GOODS,
	QS_RATE_LIMITED				/* a join: its address's addr_rate is used up */
} QueueState;

static const char *const state_names[] = {
	[QS_WAITING] = "waiting",
	[QS_ADMITTED] = "admitted",
	[QS_USED] = "used",
	[QS_EXPIRED] = "expired",
	[QS_SOLD_OUT] = "sold_out",
	[QS_NOT_JOINED] = "not_joined",
	[QS_NOT_STARTED] = "not_started",
	[QS_ENDED] = "ended",
	[QS_UNKNOWN_GOODS] = "unknown_goods",
	[QS_RATE_LIMITED] = "rate_limited",
};

/* Where a buyer stands in a campaign's line. */
typedef struct Standing
{
	QueueState	state;
	int64		ticket;			/* 0: none (yet) */
	int64		position;		/* places up to the buyer's; 0: unknown */
	TimestampTz admitted_until; /* 0: no pass */
	double		wait_s;			/* estimated wait; < 0: unknown */
	bool		holds_order;	/* QS_USED: the order is not cancelled */
} Standing;

/*
 * The campaign of goods, as the cache holds it (a preheated one), else as
 * PostgreSQL does (a draft, a closed campaign, one not cached yet); false
 * when none.
 */
static bool
campaign_of(const char *goods, SeckillCampaign *c, bool *cached)
{
	*cached = seckill_campaign_lookup(goods, c);
	if (*cached)
		return true;
	memset(c, 0, sizeof(SeckillCampaign));
	c->stats = -1;
	return store_campaign_by_goods(goods, &c->row);
}

/*
 * The answer before the line is open or after it closed; else QS_WAITING.
 * A line opens once its campaign is preheated, queue_opens_before its start.
 */
static QueueState
window(const SeckillCampaign *c, bool cached, TimestampTz now)
{
	if (strcmp(c->row.state, "closed") == 0 || now >= c->row.ends_at)
		return QS_ENDED;
	if ((!cached && strcmp(c->row.state, "preheated") != 0) ||
		now < c->row.starts_at - c->row.limits.queue_opens_before)
		return QS_NOT_STARTED;
	return QS_WAITING;
}

static void
check_queue(const SeckillCampaign *c)
{
	if (!c->row.limits.queue)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the campaign of goods \"%s\" has no waiting room", c->row.goods),
				 errhint("Its buyers call seckill_buy() directly; a DBA turns the waiting room on with seckill_campaign_set(goods, '{\"queue\": true}').")));
}

/*
 * Where the user stands in the line of campaign c (cached or not).  joined:
 * the user's place is known to be ticket (0: not drawn yet); else it is
 * read, from the shared table of tickets, then (unless to_join) from
 * seckill.queue_places.
 */
static Standing
standing(const SeckillCampaign *c, const char *user_id, bool joined, int64 ticket,
		 bool to_join, TimestampTz now)
{
	Standing	s = {QS_WAITING, 0, 0, 0, -1, false};
	SeckillLine line = c->line;
	SkQueuePlace place;
	bool		have_place = false;
	bool		sold_out = pg_atomic_read_u32(unconstify(pg_atomic_uint32 *, &c->sold_out)) != 0;

	if (!line.loaded)
		store_queue_line_now(c->row.id, &line);
	if (!joined)
	{
		ticket = seckill_ticket_find(&c->row, user_id);
		joined = ticket != 0;
		if (ticket == SECKILL_TICKET_EARLY)
			ticket = 0;
	}
	/* a join the shared table does not know goes to the worker, which knows */
	if (!joined && to_join)
	{
		s.state = QS_NOT_JOINED;
		return s;
	}
	if (!joined)
	{
		if (!store_queue_place(c->row.id, user_id, &place))
		{
			s.state = QS_NOT_JOINED;
			return s;
		}
		have_place = true;
		ticket = place.ticket;
	}
	s.ticket = ticket;
	if (ticket == 0 || ticket > line.admitted)
	{
		/* waiting: before the draw, without a position */
		s.state = sold_out ? QS_SOLD_OUT : QS_WAITING;
		if (ticket != 0)
			s.position = ticket - line.admitted;
		if (s.position > 0 && line.pace > 0.001)
			s.wait_s = s.position / line.pace;
		else if (s.position > 0 && c->row.limits.queue_admit_rate > 0)
			s.wait_s = s.position / c->row.limits.queue_admit_rate;
		return s;
	}
	/* the pass itself is read from the table, always */
	if (!have_place && !store_queue_place(c->row.id, user_id, &place))
	{
		/* a place just given, in a snapshot older than its commit */
		if (joined)
		{
			s.position = 1;
			return s;
		}
		s.state = QS_NOT_JOINED;
		s.ticket = 0;
		return s;
	}
	if (place.admitted_at == 0)
	{
		/* admitted by a commit this snapshot does not show yet */
		s.position = 1;
		return s;
	}
	s.admitted_until = place.admitted_at + c->row.limits.queue_pass_ttl;
	s.holds_order = place.holds_order;
	if (place.bought)
		s.state = QS_USED;
	else if (now >= s.admitted_until)
		s.state = QS_EXPIRED;
	else if (sold_out)
		s.state = QS_SOLD_OUT;
	else
		s.state = QS_ADMITTED;
	return s;
}

/*
 * seckill_buy on a campaign with a waiting room: does the user hold a pass?
 * A buyer whose pass bought an order that stands is let through, to be told
 * duplicate with the order's id.
 */
bool
seckill_queue_admits(const SeckillCampaign *c, const char *user_id, TimestampTz now)
{
	Standing	s = standing(c, user_id, false, 0, false, now);

	return s.state == QS_ADMITTED || (s.state == QS_USED && s.holds_order);
}

static Datum
standing_tuple(FunctionCallInfo fcinfo, const Standing *s, bool with_ticket)
{
	Datum		values[4] = {0};
	bool		nulls[4] = {false, s->position <= 0, true, true};

	values[0] = CStringGetTextDatum(state_names[s->state]);
	values[1] = Int64GetDatum(s->position);
	if (with_ticket)
	{
		values[2] = Int64GetDatum(s->ticket);
		nulls[2] = s->ticket == 0;
	}
	else
	{
		values[2] = TimestampTzGetDatum(s->admitted_until);
		nulls[2] = s->admitted_until == 0;
		if (s->wait_s >= 0)
		{
			Interval   *wait = palloc0(sizeof(Interval));

			wait->time = (int64) ceil(Min(s->wait_s, 1e9)) * USECS_PER_SEC;
			values[3] = IntervalPGetDatum(wait);
			nulls[3] = false;
		}
	}
	return HeapTupleGetDatum(heap_form_tuple(seckill_result_desc(fcinfo), values, nulls));
}

static void
check_not_fenced(void)
{
	if (seckill_shared->fenced)
	{
		SeckillReply reply;

		memset(&reply, 0, sizeof(reply));
		reply.status = SK_ERR_FENCED;
		strlcpy(reply.message, "seckill does not sell on this server: another primary sells through its Redis since a failover",
				sizeof(reply.message));
		seckill_reply_checked(SK_REQ_QUEUE_JOIN, reply);
	}
}

/*
 * The call's user (argument 0) and the campaign of its goods (argument 1),
 * and where the user stands there; *c is set unless the goods are unknown.
 * to_join: a user the shared table does not know is taken for not joined
 * (the worker's join finds a place given before).
 */
static Standing
look_up(FunctionCallInfo fcinfo, char **user_id, SeckillCampaign *c, bool to_join,
		TimestampTz now)
{
	char	   *goods;
	bool		cached;
	Standing	s = {QS_UNKNOWN_GOODS, 0, 0, 0, -1, false};

	*user_id = seckill_id_arg(fcinfo, 0, "user_id", SECKILL_MAX_USER_LEN);
	goods = seckill_id_arg(fcinfo, 1, "goods", SECKILL_MAX_GOODS_LEN);
	seckill_check_database();
	if (campaign_of(goods, c, &cached))
	{
		check_queue(c);
		s.state = window(c, cached, now);
		if (s.state == QS_WAITING)
			s = standing(c, *user_id, false, 0, to_join, now);
	}
	return s;
}

/*
 * seckill_queue_join(user_id text, goods text, client_addr inet DEFAULT
 *		inet_client_addr()) RETURNS (state text, position bigint, ticket bigint)
 *
 * A place in the line, once per buyer: a buyer who has one is told where it
 * is, without the worker.  The campaign's addr_rate counts the joins of each
 * client address (client_addr, NULL: none), in the worker.
 */
Datum
seckill_queue_join(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	char	   *user_id;
	SeckillCampaign c;
	Standing	s = look_up(fcinfo, &user_id, &c, true, now);

	if (s.state == QS_NOT_JOINED)
	{
		SeckillRequest request;
		SeckillReply reply;

		check_not_fenced();
		memset(&request, 0, sizeof(request));
		request.kind = SK_REQ_QUEUE_JOIN;
		request.campaign_id = c.row.id;
		strlcpy(request.user_id, user_id, sizeof(request.user_id));
		if (c.row.limits.addr_rate > 0)
			seckill_client_addr(fcinfo, 2, request.client_addr, sizeof(request.client_addr));
		reply = seckill_request_checked(&request);
		if (reply.status == SK_RATE_LIMITED)
		{
			s.state = QS_RATE_LIMITED;
			return standing_tuple(fcinfo, &s, true);
		}
		/* the line as the worker published it with the join */
		(void) seckill_campaign_lookup(c.row.goods, &c);
		s = standing(&c, user_id, true, reply.values[0], false, now);
	}
	return standing_tuple(fcinfo, &s, true);
}

/*
 * seckill_queue_status(user_id text, goods text) RETURNS (state text,
 *		position bigint, admitted_until timestamptz, estimated_wait interval)
 */
Datum
seckill_queue_status(PG_FUNCTION_ARGS)
{
	char	   *user_id;
	SeckillCampaign c;
	Standing	s = look_up(fcinfo, &user_id, &c, false, GetCurrentTimestamp());

	return standing_tuple(fcinfo, &s, false);
}

/*
 * seckill.queue_rows(): for seckill.stats, the row of all campaigns
 * (campaign_id NULL), then a row per campaign it shows: the buyers the
 * waiting room refused, and its line's length (early joins included),
 * admissions, passes that ran out unused and the wait a new join faces.
 */
Datum
seckill_queue_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Datum		values[6];
	bool		nulls[6];

	seckill_check_database();
	InitMaterializedSRF(fcinfo, 0);
	memset(nulls, true, sizeof(nulls));
	nulls[1] = false;
	values[1] = Int64GetDatum((int64) pg_atomic_read_u64(&seckill_figures->all.not_admitted));
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);

	LWLockAcquire(seckill_campaign_cache->lock, LW_SHARED);
	for (int i = 0; i < seckill_max_campaigns; i++)
	{
		SeckillStats *st = &seckill_stats[i];
		SeckillCampaign *c;

		if (st->campaign_id == 0)
			continue;
		memset(nulls, false, sizeof(nulls));
		values[0] = Int64GetDatum(st->campaign_id);
		values[1] = Int64GetDatum((int64) pg_atomic_read_u64(&st->not_admitted));
		c = seckill_campaign_find(st->campaign_id);
		if (c != NULL && c->row.limits.queue && c->line.loaded)
		{
			int64		length = c->line.last - c->line.admitted + c->line.early;

			values[2] = Int64GetDatum(length);
			values[3] = Int64GetDatum(c->line.admitted);
			values[4] = Int64GetDatum(c->line.expired);
			values[5] = Float8GetDatum(c->line.pace > 0.001 ? length / c->line.pace : 0);
			nulls[5] = !(c->line.pace > 0.001) && length > 0;
		}
		else
			nulls[2] = nulls[3] = nulls[4] = nulls[5] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(seckill_campaign_cache->lock);
	return (Datum) 0;
}
