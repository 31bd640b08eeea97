/*-------------------------------------------------------------------------
 *
 * waiting_room.c
 *		The campaigns' waiting lines (seckill_queue_join): the worker gives
 *		the places, draws the order of the joins made before a campaign's
 *		start, and admits buyers from the head of each line as fast as its
 *		stock can serve them.
 *
 * A line's truth is in PostgreSQL (store/queue.c): a place is answered
 * once committed, and an admission is published once committed, so a crash
 * or a failover loses no place given and admits nobody out of order.  What
 * backends read (the last ticket, the admission mark) is copied to the
 * campaign cache after each commit.  Admission runs between rounds, every
 * TICK_MS while a line is open: from the head of the line, as long as the
 * passes valid and unused stay within admit_factor times the stock
 * PostgreSQL has not sold, and at most admit_rate a second; never while the
 * campaign is sold out.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/waiting_room.h"

#include <math.h>

#include "common/pg_prng.h"
#include "shared/campaign_cache.h"
#include "store/store.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#define TICK_MS 200
/* how often the passes that ran out unused are counted, for seckill.stats */
#define EXPIRED_COUNT_MS 5000

/* The worker's own pace of each line, which it needs not share. */
typedef struct LinePace
{
	int64		campaign_id;	/* 0: unused */
	double		tokens;			/* admissions admit_rate allows now */
	TimestampTz at;				/* when tokens and the pace were last updated */
	TimestampTz expired_at;		/* when the expired passes were last counted */
} LinePace;

static LinePace *paces = NULL;
static TimestampTz tick_due = 0;

/* The pace of a campaign's line, new if need be. */
static LinePace *
pace_of(int64 campaign_id)
{
	LinePace   *free_one = NULL;

	if (paces == NULL)
		paces = MemoryContextAllocZero(TopMemoryContext, sizeof(LinePace) * seckill_max_campaigns);
	for (int i = 0; i < seckill_max_campaigns; i++)
	{
		if (paces[i].campaign_id == campaign_id)
			return &paces[i];
		if (free_one == NULL && (paces[i].campaign_id == 0 || !seckill_campaign_cached(paces[i].campaign_id)))
			free_one = &paces[i];
	}
	/* as many as the cache holds: there is one */
	if (free_one == NULL)
		elog(ERROR, "no room for the pace of the line of campaign " INT64_FORMAT, campaign_id);
	memset(free_one, 0, sizeof(LinePace));
	free_one->campaign_id = campaign_id;
	return free_one;
}

/* At the worker's start: every line is read again from PostgreSQL. */
void
sk_waiting_room_start(void)
{
	seckill_campaign_lines_unloaded();
	if (paces != NULL)
		memset(paces, 0, sizeof(LinePace) * seckill_max_campaigns);
	tick_due = 0;
}

/* Inside a transaction: the line of a cached campaign, read if need be. */
static void
line_of(const SeckillCampaign *c, SeckillLine *line)
{
	*line = c->line;
	if (!line->loaded)
	{
		store_queue_line(c->row.id, line);
		line->loaded = true;
	}
}

/* Inside a transaction: the early joins get their tickets, in the order of the draw. */
static void
draw(const SeckillCampaign *c, SeckillLine *line)
{
	int64		seed = c->row.limits.has_queue_seed ? c->row.limits.queue_seed :
		(int64) pg_prng_uint64(&pg_global_prng_state);
	int64		n = store_queue_draw(c->row.id, line->last, seed);

	line->last += n;
	line->early = 0;
	line->drawn = true;
	ereport(LOG,
			(errmsg("seckill drew the order of " INT64_FORMAT " early joins to the line of campaign " INT64_FORMAT " (\"%s\") with seed " INT64_FORMAT,
					n, c->row.id, c->row.goods, seed)));
}

/* A line touched by a round's joins, to be published once committed. */
typedef struct Touched
{
	int64		campaign_id;
	SeckillLine line;
} Touched;

static SeckillLine *
touched_line(Touched *touched, int *ntouched, const SeckillCampaign *c)
{
	for (int i = 0; i < *ntouched; i++)
		if (touched[i].campaign_id == c->row.id)
			return &touched[i].line;
	touched[*ntouched].campaign_id = c->row.id;
	line_of(c, &touched[*ntouched].line);
	return &touched[(*ntouched)++].line;
}

/* One join: the user's ticket (0: none until the draw) into its reply. */
static void
join(RoundItem *item, Touched *touched, int *ntouched, TimestampTz now)
{
	const SeckillRequest *request = &item->request;
	SeckillCampaign *c = seckill_campaign_find(request->campaign_id);
	SeckillLine *line;
	int64		ticket;
	bool		joined;

	if (c == NULL || !c->row.limits.queue)
	{
		seckill_reply_error(&item->reply, SK_ERR_INVALID,
							"campaign " INT64_FORMAT " has no open waiting line", request->campaign_id);
		item->reply.sqlerrcode = ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
		return;
	}
	line = touched_line(touched, ntouched, c);
	if (now >= c->row.starts_at && !line->drawn)
		draw(c, line);
	ticket = store_queue_join(c->row.id, request->user_id, line->drawn ? line->last + 1 : 0,
							  now, &joined);
	if (joined && line->drawn)
		line->last = ticket;
	else if (joined)
		line->early++;
	item->reply.status = SK_OK;
	item->reply.values[0] = ticket;
	item->reply.values[1] = joined;
}

/*
 * The round's joins (SK_REQ_QUEUE_JOIN), in one transaction, committed
 * before any is answered.  An ERROR fails them all and gives nothing.
 */
void
sk_waiting_room_join(RoundItem *items, int nitems)
{
	MemoryContext cxt = CurrentMemoryContext;
	Touched    *touched = palloc(sizeof(Touched) * nitems);
	int			ntouched = 0;
	int			njoins = 0;
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < nitems; i++)
		njoins += items[i].request.kind == SK_REQ_QUEUE_JOIN;
	if (njoins == 0)
		return;
	PG_TRY();
	{
		store_begin("seckill: join waiting lines");
		for (int i = 0; i < nitems; i++)
			if (items[i].request.kind == SK_REQ_QUEUE_JOIN)
				join(&items[i], touched, &ntouched, now);
		store_commit();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		store_abort();
		MemoryContextSwitchTo(cxt);
		ntouched = 0;
		for (int i = 0; i < nitems; i++)
			if (items[i].request.kind == SK_REQ_QUEUE_JOIN)
			{
				seckill_reply_error(&items[i].reply, SK_ERR_INVALID, "%s", edata->message);
				items[i].reply.sqlerrcode = edata->sqlerrcode;
			}
	}
	PG_END_TRY();
	for (int i = 0; i < ntouched; i++)
		seckill_campaign_set_line(touched[i].campaign_id, &touched[i].line);
	for (int i = 0; i < nitems; i++)
		if (items[i].request.kind == SK_REQ_QUEUE_JOIN)
			(void) sk_answer(&items[i]);
}

/*
 * Inside a transaction: admit from the head of the line as many as the
 * stock left, the passes already out and admit_rate allow.  How many.
 */
static int64
admit(const SeckillCampaign *c, SeckillLine *line, LinePace *pace, TimestampTz now)
{
	const SeckillLimits *limits = &c->row.limits;
	int64		stock_left;
	int64		live;
	int64		n = line->last - line->admitted;

	store_queue_capacity(c->row.id, now - limits->queue_pass_ttl, &stock_left, &live);
	n = Min(n, (int64) ceil(limits->queue_admit_factor * stock_left) - live);
	if (limits->queue_admit_rate > 0)
		n = Min(n, (int64) floor(pace->tokens));
	if (n <= 0)
		return 0;
	store_queue_admit(c->row.id, line->admitted, line->admitted + n, now);
	line->admitted += n;
	return n;
}

/*
 * One line's turn: read it if the worker has not, draw its early joins at
 * the start, admit, and now and then count the passes that ran out.
 */
static void
advance(SeckillCampaign *c, TimestampTz now)
{
	const SeckillLimits *limits = &c->row.limits;
	LinePace   *pace = pace_of(c->row.id);
	SeckillLine line = c->line;
	bool		started = now >= c->row.starts_at;
	bool		sold_out = pg_atomic_read_u32(&c->sold_out) != 0;
	bool		count_expired = started && line.admitted > 0 &&
		now >= TimestampTzPlusMilliseconds(pace->expired_at, EXPIRED_COUNT_MS);
	double		seconds = pace->at == 0 ? TICK_MS / 1000.0 : (now - pace->at) / 1000000.0;
	int64		admitted = 0;

	if (limits->queue_admit_rate > 0)
		pace->tokens = Min(pace->tokens + limits->queue_admit_rate * seconds,
						   Max(limits->queue_admit_rate, 1));
	if (line.loaded && !(started && !line.drawn) && !count_expired &&
		!(started && !sold_out && line.last > line.admitted))
	{
		line.pace = 0;
		pace->at = now;
		if (c->line.pace != 0)
			seckill_campaign_set_line(c->row.id, &line);
		return;
	}
	store_begin("seckill: admit from waiting lines");
	line_of(c, &line);
	if (started && !line.drawn)
		draw(c, &line);
	if (started && !sold_out && line.last > line.admitted)
		admitted = admit(c, &line, pace, now);
	if (count_expired)
		line.expired = store_queue_expired(c->row.id, now - limits->queue_pass_ttl);
	store_commit();
	if (count_expired)
		pace->expired_at = now;
	pace->tokens -= admitted;
	/* a pace that forgets in about two seconds */
	line.pace = seconds > 0 ? 0.9 * line.pace + 0.1 * (admitted / seconds) : line.pace;
	pace->at = now;
	seckill_campaign_set_line(c->row.id, &line);
}

/* A line is open from its campaign's preheat until its end. */
static bool
line_open(const SeckillCampaign *c, TimestampTz now)
{
	return c->row.id != 0 && c->row.limits.queue && now < c->row.ends_at;
}

/* Between rounds: every open line's turn, when due. */
void
sk_waiting_room_tick(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now < tick_due)
		return;
	tick_due = TimestampTzPlusMilliseconds(now, TICK_MS);
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (line_open(&seckill_campaigns[i], now))
			advance(&seckill_campaigns[i], now);
}

/* Milliseconds until the lines' next turn (-1: no line is open). */
long
sk_waiting_room_wait(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms;

	for (int i = 0; i < seckill_max_campaigns; i++)
		if (line_open(&seckill_campaigns[i], now))
		{
			ms = TimestampDifferenceMilliseconds(now, tick_due);
			return ms > 0 ? ms : 0;
		}
	return -1;
}
