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

#include "shared/campaign_cache.h"
#include "shared/queue_tickets.h"
#include "store/store.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "worker/worker_state.h"

#define TICK_MS 200
/* tickets read into the shared table a turn, for a line read anew */
#define TICKETS_PAGE 20000
/* how often the passes that ran out unused are counted, for seckill.stats */
#define EXPIRED_COUNT_MS 5000
/* how long a line whose passes out fill the stock left waits to look again */
#define FULL_WAIT_MS 1000

/* The worker's own pace of each line, which it needs not share. */
typedef struct LinePace
{
	int64		campaign_id;	/* 0: unused */
	double		tokens;			/* admissions admit_rate allows now */
	TimestampTz at;				/* when tokens and the pace were last updated */
	TimestampTz expired_at;		/* when the expired passes were last counted */
	int64		tickets_through;	/* every ticket up to it is in the shared
									 * table (or found no room there) */
	int64		early_kept;		/* early joins put in the shared table */
	bool		put_failed;		/* a place found no room there, or one the
								 * worker did not give was met */
	TimestampTz full_until;		/* the passes out filled the stock left: look
								 * again then */
} LinePace;

/* The pace of a campaign's line, new if need be. */
static LinePace *
pace_of(int64 campaign_id)
{
	LinePace   *paces;
	LinePace   *free_one = NULL;

	if (sk_worker.waiting_room.paces == NULL)
		sk_worker.waiting_room.paces = MemoryContextAllocZero(TopMemoryContext,
															  sizeof(LinePace) * seckill_max_campaigns);
	paces = sk_worker.waiting_room.paces;
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
	if (sk_worker.waiting_room.paces != NULL)
		memset(sk_worker.waiting_room.paces, 0, sizeof(LinePace) * seckill_max_campaigns);
	sk_worker.waiting_room.tick_due = 0;
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

/*
 * Inside a transaction: the early joins get their tickets, in the order of
 * the draw: by the campaign's seed, else by one nobody could know before.
 */
static void
draw(const SeckillCampaign *c, SeckillLine *line)
{
	int64		seed = c->row.limits.queue_seed;
	int64		n;

	if (!c->row.limits.has_queue_seed && !pg_strong_random(&seed, sizeof(seed)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not draw a seed for the line of campaign " INT64_FORMAT, c->row.id)));
	n = store_queue_draw(c->row.id, line->last, seed);

	line->last += n;
	line->early = 0;
	line->drawn = true;
	ereport(LOG,
			(errmsg("seckill drew the order of " INT64_FORMAT " early joins to the line of campaign " INT64_FORMAT " (\"%s\") with seed " INT64_FORMAT,
					n, c->row.id, c->row.goods, seed)));
}

/*
 * A client address's joins to a campaign with an addr_rate: a token bucket
 * as the purchases' in Redis, kept by the worker, which sees every join
 * (forgotten when it restarts, or when it keeps too many).
 */
typedef struct JoinBucket
{
	char		key[32 + SK_ADDR_LEN];	/* campaign id, address */
	double		tokens;
	TimestampTz at;
} JoinBucket;

#define MAX_JOIN_BUCKETS 100000

static bool
join_allowed(const SeckillCampaign *c, const char *addr, TimestampTz now)
{
	const SeckillLimits *limits = &c->row.limits;
	char		key[32 + SK_ADDR_LEN] = {0};
	JoinBucket *b;
	bool		found;

	if (limits->addr_rate <= 0 || addr[0] == '\0')
		return true;
	if (sk_worker.waiting_room.join_buckets != NULL &&
		hash_get_num_entries(sk_worker.waiting_room.join_buckets) >= MAX_JOIN_BUCKETS)
	{
		hash_destroy(sk_worker.waiting_room.join_buckets);
		sk_worker.waiting_room.join_buckets = NULL;
	}
	if (sk_worker.waiting_room.join_buckets == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(key);
		ctl.entrysize = sizeof(JoinBucket);
		sk_worker.waiting_room.join_buckets = hash_create("seckill join buckets", 1024, &ctl,
														  HASH_ELEM | HASH_BLOBS);
	}
	snprintf(key, sizeof(key), INT64_FORMAT " %s", c->row.id, addr);
	b = hash_search(sk_worker.waiting_room.join_buckets, key, HASH_ENTER, &found);
	if (!found)
		b->tokens = limits->addr_burst;
	else
		b->tokens = Min(limits->addr_burst, b->tokens + limits->addr_rate * (now - b->at) / 1000000.0);
	b->at = now;
	if (b->tokens < 1)
		return false;
	b->tokens -= 1;
	return true;
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

/*
 * A join that may take a place: its campaign has a waiting line and its
 * address has joins left; else its reply says why.
 */
static bool
join_admissible(RoundItem *item, TimestampTz now)
{
	const SeckillRequest *request = &item->request;
	SeckillCampaign *c = seckill_campaign_find(request->campaign_id);

	if (c == NULL || !c->row.limits.queue)
	{
		seckill_reply_error(&item->reply, SK_ERR_INVALID,
							"campaign " INT64_FORMAT " has no open waiting line", request->campaign_id);
		item->reply.sqlerrcode = ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE;
		return false;
	}
	if (!join_allowed(c, request->client_addr, now))
	{
		item->reply.status = SK_RATE_LIMITED;
		return false;
	}
	return true;
}

/* qsort_arg: joins by line and user, then in the order they came */
static int
join_cmp(const void *a, const void *b, void *arg)
{
	const SkJoin *joins = arg;
	int			i = *(const int *) a;
	int			k = *(const int *) b;
	int			c;

	if (joins[i].campaign_id != joins[k].campaign_id)
		return joins[i].campaign_id < joins[k].campaign_id ? -1 : 1;
	c = strcmp(joins[i].user_id, joins[k].user_id);
	return c != 0 ? c : (i > k) - (i < k);
}

/*
 * Of joins[0..n-1]: for each, the first of the joins of the same user to
 * the same line (itself, most often).
 */
static int *
first_of_user(const SkJoin *joins, int n)
{
	int		   *order = palloc(sizeof(int) * n);
	int		   *first = palloc(sizeof(int) * n);

	for (int k = 0; k < n; k++)
		order[k] = k;
	qsort_arg(order, n, sizeof(int), join_cmp, unconstify(SkJoin *, joins));
	for (int k = 0; k < n; k++)
	{
		const SkJoin *a = k > 0 ? &joins[order[k - 1]] : NULL;
		const SkJoin *b = &joins[order[k]];
		bool		same = a != NULL && a->campaign_id == b->campaign_id &&
			strcmp(a->user_id, b->user_id) == 0;

		first[order[k]] = same ? first[order[k - 1]] : order[k];
	}
	return first;
}

/*
 * Does the shared table of tickets hold every place of the line?  Then a
 * buyer it does not know has none, and the worker, which gives every place
 * and puts each in the table once committed, need not look in PostgreSQL.
 * (A buyer it knows is looked up all the same: the table keeps a hash.)  A
 * place written in SQL past the worker shows as a round's unique violation,
 * and the line's buyers are looked up from then on (put_failed).
 */
static bool
all_places_kept(const SeckillCampaign *c, const SeckillLine *line)
{
	const LinePace *pace = pace_of(c->row.id);

	return !pace->put_failed && pace->tickets_through >= line->last &&
		(line->drawn ? line->early == 0 : pace->early_kept == line->early);
}

/*
 * Inside a transaction: of the round's joins, those whose buyers held a
 * place before (held, with its ticket).
 */
static void
find_places_held(SkJoin *joins, SeckillCampaign **campaigns, SeckillLine **lines, int n)
{
	SkJoin	   *asked = palloc(sizeof(SkJoin) * n);
	int		   *at = palloc(sizeof(int) * n);
	int			m = 0;

	for (int k = 0; k < n; k++)
	{
		joins[k].held = false;
		joins[k].ticket = 0;
		if (all_places_kept(campaigns[k], lines[k]) &&
			seckill_ticket_find(&campaigns[k]->row, joins[k].user_id) == 0)
			continue;
		asked[m] = joins[k];
		at[m++] = k;
	}
	if (m == 0)
		return;
	store_queue_places_held(asked, m);
	for (int i = 0; i < m; i++)
	{
		joins[at[i]].held = asked[i].held;
		joins[at[i]].ticket = asked[i].ticket;
	}
}

/*
 * Inside a transaction: the round's joins take their places, each ticket
 * (0: none until the draw) into its reply.  A user who holds a place is told
 * it; a new place gets the next ticket of its line in the order the joins
 * came (none before the start), a user who joins twice in the round once.
 * A few statements for all the round's joins.
 */
static void
take_places(RoundItem *items, int nitems, Touched *touched, int *ntouched, TimestampTz now)
{
	SkJoin	   *joins = palloc(sizeof(SkJoin) * nitems);
	SeckillCampaign **campaigns = palloc(sizeof(SeckillCampaign *) * nitems);
	SeckillLine **lines = palloc(sizeof(SeckillLine *) * nitems);
	int		   *from = palloc(sizeof(int) * nitems);
	int		   *first;
	int			n = 0;

	for (int i = 0; i < nitems; i++)
	{
		SeckillCampaign *c;

		if (items[i].request.kind != SK_REQ_QUEUE_JOIN || !join_admissible(&items[i], now))
			continue;
		c = seckill_campaign_find(items[i].request.campaign_id);
		lines[n] = touched_line(touched, ntouched, c);
		if (now >= c->row.starts_at && !lines[n]->drawn)
			draw(c, lines[n]);
		campaigns[n] = c;
		joins[n].campaign_id = c->row.id;
		joins[n].user_id = items[i].request.user_id;
		from[n++] = i;
	}
	if (n == 0)
		return;
	find_places_held(joins, campaigns, lines, n);
	first = first_of_user(joins, n);
	for (int k = 0; k < n; k++)
	{
		SkJoin	   *j = &joins[k];
		RoundItem  *item = &items[from[k]];

		j->joined = !j->held && first[k] == k;
		if (j->joined && lines[k]->drawn)
			j->ticket = ++lines[k]->last;
		else if (j->joined)
		{
			j->ticket = 0;
			lines[k]->early++;
		}
		else if (!j->held)
			j->ticket = joins[first[k]].ticket;
		item->reply.status = SK_OK;
		item->reply.values[0] = j->ticket;
		item->reply.values[1] = j->joined;
	}
	store_queue_give_places(joins, n, now);
}

/*
 * A committed join's ticket into the shared table: an early one as such, a
 * numbered one if every ticket before it is there (else the line's turn
 * reads them all, in order).
 */
static void
keep_ticket(const RoundItem *item)
{
	int64		ticket = item->reply.values[0];
	SeckillCampaign *c = seckill_campaign_find(item->request.campaign_id);
	LinePace   *pace;

	if (item->reply.values[1] == 0 || c == NULL)
		return;					/* a second join; a campaign closed meanwhile */
	pace = pace_of(c->row.id);
	if (ticket == 0)
	{
		if (seckill_ticket_put(&c->row, item->request.user_id, SECKILL_TICKET_EARLY))
			pace->early_kept++;
		else
			pace->put_failed = true;
		return;
	}
	if (pace->tickets_through != ticket - 1)
		return;
	if (!seckill_ticket_put(&c->row, item->request.user_id, ticket))
		pace->put_failed = true;
	pace->tickets_through = ticket;
}

/*
 * Inside a transaction: the next page of the line's tickets not yet in the
 * shared table, after the worker read the line or drew it.
 */
static void
keep_tickets(const SeckillCampaign *c, LinePace *pace)
{
	char	  **users;
	int64	   *tickets;
	int			n = store_queue_tickets(c->row.id, pace->tickets_through, TICKETS_PAGE, &users, &tickets);

	for (int i = 0; i < n; i++)
		if (!seckill_ticket_put(&c->row, users[i], tickets[i]))
			pace->put_failed = true;
	if (n > 0)
		pace->tickets_through = tickets[n - 1];
}

/*
 * The round's joins (SK_REQ_QUEUE_JOIN), in one transaction, committed
 * and flushed before any is answered, as a round's orders are.  An ERROR
 * fails them all and gives nothing.
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
		take_places(items, nitems, touched, &ntouched, now);
		/* as a round's orders: one durable commit for all */
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
				SeckillCampaign *c = seckill_campaign_find(items[i].request.campaign_id);

				seckill_reply_error(&items[i].reply, SK_ERR_INVALID, "%s", edata->message);
				items[i].reply.sqlerrcode = edata->sqlerrcode;
				/* a place the worker did not give (written in SQL): look them all up */
				if (c != NULL && edata->sqlerrcode == ERRCODE_UNIQUE_VIOLATION)
					pace_of(c->row.id)->put_failed = true;
				/* read again before the next join: nothing of this round is */
				if (c != NULL && c->line.loaded)
				{
					SeckillLine line = c->line;

					line.loaded = false;
					seckill_campaign_set_line(c->row.id, &line);
				}
			}
	}
	PG_END_TRY();
	for (int i = 0; i < ntouched; i++)
		seckill_campaign_set_line(touched[i].campaign_id, &touched[i].line);
	for (int i = 0; ntouched > 0 && i < nitems; i++)
		if (items[i].request.kind == SK_REQ_QUEUE_JOIN && items[i].reply.status == SK_OK)
			keep_ticket(&items[i]);
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
	/* a pass used, or run out, frees room: looked for once a second */
	if (n <= 0)
		pace->full_until = TimestampTzPlusMilliseconds(now, FULL_WAIT_MS);
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
	bool		may_admit = started && !sold_out && line.last > line.admitted &&
		now >= pace->full_until;
	double		seconds = pace->at == 0 ? TICK_MS / 1000.0 : (now - pace->at) / 1000000.0;
	int64		admitted = 0;

	if (limits->queue_admit_rate > 0)
		pace->tokens = Min(pace->tokens + limits->queue_admit_rate * seconds,
						   Max(limits->queue_admit_rate, 1));
	if (line.loaded && !(started && !line.drawn) && !count_expired && !may_admit &&
		pace->tickets_through >= line.last)
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
	if (started && !sold_out && line.last > line.admitted && now >= pace->full_until)
		admitted = admit(c, &line, pace, now);
	if (count_expired)
		line.expired = store_queue_expired(c->row.id, now - limits->queue_pass_ttl);
	if (pace->tickets_through < line.last)
		keep_tickets(c, pace);
	store_commit();
	if (count_expired)
		pace->expired_at = now;
	pace->tokens -= admitted;
	/* a pace that forgets in about two seconds */
	line.pace = seconds > 0 ? 0.9 * line.pace + 0.1 * (admitted / seconds) : line.pace;
	pace->at = now;
	seckill_campaign_set_line(c->row.id, &line);
}

/*
 * A line's turn.  An ERROR (a lock or statement timeout, the line changed
 * under the worker) is logged and the line read again at its next turn; the
 * other lines have theirs.
 */
static void
turn(SeckillCampaign *c, TimestampTz now)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		advance(c, now);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		SeckillLine line = c->line;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		store_abort();
		MemoryContextSwitchTo(cxt);
		ereport(LOG,
				(errmsg("seckill could not advance the waiting line of campaign " INT64_FORMAT ": %s",
						c->row.id, edata->message),
				 errdetail("The worker reads the line again from seckill.queue_lines at its next turn.")));
		line.loaded = false;
		seckill_campaign_set_line(c->row.id, &line);
	}
	PG_END_TRY();
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

	bool		open = false;

	if (now < sk_worker.waiting_room.tick_due)
		return;
	sk_worker.waiting_room.tick_due = TimestampTzPlusMilliseconds(now, TICK_MS);
	for (int i = 0; i < seckill_max_campaigns; i++)
		if (line_open(&seckill_campaigns[i], now))
		{
			turn(&seckill_campaigns[i], now);
			open = true;
		}
	/* the shared table of tickets empties once no line is open */
	if (!open && seckill_tickets_used() > 0)
	{
		seckill_tickets_clear();
		for (int i = 0; sk_worker.waiting_room.paces != NULL && i < seckill_max_campaigns; i++)
		{
			sk_worker.waiting_room.paces[i].tickets_through = 0;
			sk_worker.waiting_room.paces[i].early_kept = 0;
			sk_worker.waiting_room.paces[i].put_failed = false;
		}
	}
}

/*
 * Milliseconds until the lines' next turn (-1: no line is open, and the
 * shared table of tickets is empty).
 */
long
sk_waiting_room_wait(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms;

	for (int i = 0; i < seckill_max_campaigns; i++)
		if (line_open(&seckill_campaigns[i], now))
			break;
		else if (i == seckill_max_campaigns - 1 && seckill_tickets_used() == 0)
			return -1;
	ms = TimestampDifferenceMilliseconds(now, sk_worker.waiting_room.tick_due);
	return ms > 0 ? ms : 0;
}
