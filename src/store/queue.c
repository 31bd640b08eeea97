/*-------------------------------------------------------------------------
 *
 * queue.c
 *		seckill.queue_places and seckill.queue_lines: the campaigns' waiting
 *		lines.  The worker gives the places, draws the early joins' order
 *		and admits; backends read a buyer's place and, until the worker has
 *		read it, a line.
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "catalog/pg_type.h"
#include "store/sql.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/*
 * "The user has no order in campaign $1, of any status", in the two
 * partial indexes of seckill.orders (orders_one_active_per_user and
 * orders_cancelled): one condition on the user's orders would read them all.
 */
#define NO_ORDER_OF(user) \
	"(NOT EXISTS (SELECT FROM seckill.orders o WHERE o.campaign_id = $1 AND o.user_id = " user \
	" AND o.status <> 'cancelled') AND NOT EXISTS (SELECT FROM seckill.orders o " \
	" WHERE o.campaign_id = $1 AND o.user_id = " user " AND o.status = 'cancelled'))"

static int64
int64_column(int row, int column, int64 if_null)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, column, &isnull);

	return isnull ? if_null : DatumGetInt64(d);
}

#define LINE_QUERY \
	"SELECT coalesce(l.admitted_through, 0), coalesce(l.drawn, false), " \
	" (SELECT coalesce(pg_catalog.max(p.ticket), 0) FROM seckill.queue_places p WHERE p.campaign_id = $1), " \
	" (SELECT pg_catalog.count(*) FROM seckill.queue_places p WHERE p.campaign_id = $1 AND p.ticket IS NULL) " \
	"FROM (SELECT) x LEFT JOIN seckill.queue_lines l ON l.campaign_id = $1"

static void
line_from_result(SeckillLine *line)
{
	bool		isnull;

	memset(line, 0, sizeof(SeckillLine));
	line->admitted = int64_column(0, 1, 0);
	line->drawn = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	line->last = int64_column(0, 3, 0);
	line->early = int64_column(0, 4, 0);
}

/* Inside a transaction: the campaign's line as PostgreSQL holds it. */
void
store_queue_line(int64 campaign_id, SeckillLine *line)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(campaign_id)};

	store_run_kept(LINE_QUERY, 1, types, values, SPI_OK_SELECT);
	line_from_result(line);
}

/* In a backend, with its privileges: the same, before the worker has read it. */
void
store_queue_line_now(int64 campaign_id, SeckillLine *line)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[1] = {INT8OID};
	Datum		values[1] = {Int64GetDatum(campaign_id)};
	int			level = store_backend_spi_begin();

	if (plan == NULL)
		plan = store_prepare(LINE_QUERY, 1, types);
	/* not read-only: a statement's own snapshot, which sees the worker's latest commits */
	if (SPI_execute_plan(plan, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading seckill.queue_lines failed");
	line_from_result(line);
	store_backend_spi_end(level);
}

/*
 * Inside a transaction: which of joins[0..n-1] come from users who hold a
 * place in the line already: held, with their ticket.  One statement for a
 * round's joins.
 */
void
store_queue_places_held(SkJoin *joins, int n)
{
	Oid			types[2] = {INT8ARRAYOID, TEXTARRAYOID};
	Datum		values[2];
	Datum	   *campaigns = palloc(sizeof(Datum) * n);
	Datum	   *users = palloc(sizeof(Datum) * n);

	for (int i = 0; i < n; i++)
	{
		campaigns[i] = Int64GetDatum(joins[i].campaign_id);
		users[i] = CStringGetTextDatum(joins[i].user_id);
		joins[i].held = false;
	}
	values[0] = PointerGetDatum(construct_array(campaigns, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(construct_array(users, n, TEXTOID, -1, false, TYPALIGN_INT));
	/* LIMIT 1: a look-up in the primary key a join, whatever the line's length */
	store_run_kept("SELECT j.i, coalesce(p.ticket, 0) "
				   "FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) "
				   "  WITH ORDINALITY AS j(campaign_id, user_id, i), "
				   " LATERAL (SELECT q.ticket FROM seckill.queue_places q "
				   "          WHERE q.campaign_id = j.campaign_id AND q.user_id = j.user_id LIMIT 1) p",
				   2, types, values, SPI_OK_SELECT);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		SkJoin	   *j = &joins[int64_column((int) r, 1, 0) - 1];

		j->held = true;
		j->ticket = int64_column((int) r, 2, 0);
	}
}

/*
 * Inside a transaction: the new places of joins[0..n-1] (those joined), with
 * their tickets (0: none until the draw), in one statement.
 */
void
store_queue_give_places(const SkJoin *joins, int n, TimestampTz now)
{
	Oid			types[4] = {INT8ARRAYOID, TEXTARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID};
	Datum		values[4];
	Datum	   *campaigns = palloc(sizeof(Datum) * n);
	Datum	   *users = palloc(sizeof(Datum) * n);
	Datum	   *tickets = palloc(sizeof(Datum) * n);
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		if (!joins[i].joined)
			continue;
		campaigns[m] = Int64GetDatum(joins[i].campaign_id);
		users[m] = CStringGetTextDatum(joins[i].user_id);
		tickets[m++] = Int64GetDatum(joins[i].ticket);
	}
	if (m == 0)
		return;
	values[0] = PointerGetDatum(construct_array(campaigns, m, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[1] = PointerGetDatum(construct_array(users, m, TEXTOID, -1, false, TYPALIGN_INT));
	values[2] = PointerGetDatum(construct_array(tickets, m, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[3] = TimestampTzGetDatum(now);
	store_run_kept("INSERT INTO seckill.queue_places (campaign_id, user_id, ticket, joined_at) "
				   "SELECT j.campaign_id, j.user_id, nullif(j.ticket, 0), $4 "
				   "FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3)) "
				   "  AS j(campaign_id, user_id, ticket)",
				   4, types, values, SPI_OK_INSERT);
	if (SPI_processed != (uint64) m)
		elog(ERROR, "%d places given in the waiting lines, " UINT64_FORMAT " stored", m, SPI_processed);
}

/*
 * Inside a transaction: the draw.  The early joins of the campaign get the
 * tickets after "after", in the order of hashtextextended(user_id, seed),
 * and the line is marked drawn with its seed.  The number of tickets given.
 *
 * The statistics of seckill.queue_places are mostly older than the line (a
 * campaign made minutes ago): the planner takes its places for one row and
 * would join them to the drawn order in a nested loop, each place against
 * every early join (3,290 of them held the worker 5 s, 16 s with 10,100
 * places).  Without a nested loop it is a hash join, whatever the line.
 */
int64
store_queue_draw(int64 campaign_id, int64 after, int64 seed)
{
	Oid			types[3] = {INT8OID, INT8OID, INT8OID};
	Datum		values[3] = {Int64GetDatum(campaign_id), Int64GetDatum(after), Int64GetDatum(seed)};
	int64		drawn;
	int			level = store_setting_save("enable_nestloop", "off");

	store_run("UPDATE seckill.queue_places p SET ticket = $2 + d.n "
			  "FROM (SELECT user_id, pg_catalog.row_number() OVER "
			  "       (ORDER BY pg_catalog.hashtextextended(user_id, $3), user_id) AS n "
			  "      FROM seckill.queue_places WHERE campaign_id = $1 AND ticket IS NULL) d "
			  "WHERE p.campaign_id = $1 AND p.user_id = d.user_id",
			  3, types, values, SPI_OK_UPDATE);
	drawn = (int64) SPI_processed;
	store_setting_restore(level);
	store_run("INSERT INTO seckill.queue_lines (campaign_id, drawn, seed) VALUES ($1, true, $3) "
			  "ON CONFLICT (campaign_id) DO UPDATE SET drawn = true, seed = $3",
			  3, types, values, SPI_OK_INSERT);
	return drawn;
}

/*
 * Inside a transaction: what bounds the next admission of the campaign's
 * line.  The stock PostgreSQL has not sold, and the passes still valid
 * (given since live_since) whose holders have not bought.
 */
void
store_queue_capacity(int64 campaign_id, TimestampTz live_since, int64 *stock_left,
					 int64 *live_passes)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int64GetDatum(campaign_id), TimestampTzGetDatum(live_since)};

	store_run_kept("SELECT c.total_stock - c.sold, "
				   " (SELECT pg_catalog.count(*) FROM seckill.queue_places p "
				   "  WHERE p.campaign_id = $1 AND p.admitted_at > $2 "
				   "  AND " NO_ORDER_OF("p.user_id") ") "
				   "FROM seckill.campaigns c WHERE c.id = $1",
				   2, types, values, SPI_OK_SELECT);
	*stock_left = SPI_processed == 1 ? int64_column(0, 1, 0) : 0;
	*live_passes = SPI_processed == 1 ? int64_column(0, 2, 0) : 0;
}

/*
 * Inside a transaction: the passes that ran out unused (given before
 * live_since, their holders never bought).
 */
int64
store_queue_expired(int64 campaign_id, TimestampTz live_since)
{
	Oid			types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum		values[2] = {Int64GetDatum(campaign_id), TimestampTzGetDatum(live_since)};

	store_run_kept("SELECT pg_catalog.count(*) FROM seckill.queue_places p "
				   "WHERE p.campaign_id = $1 AND p.admitted_at <= $2 "
				   "AND " NO_ORDER_OF("p.user_id"),
				   2, types, values, SPI_OK_SELECT);
	return int64_column(0, 1, 0);
}

/*
 * Inside a transaction: the places of the campaign's line numbered after
 * "after", in ticket order, at most limit of them: their users and tickets
 * (allocated in the caller's context).  How many.
 */
int
store_queue_tickets(int64 campaign_id, int64 after, int limit, char ***users, int64 **tickets)
{
	Oid			types[3] = {INT8OID, INT8OID, INT4OID};
	Datum		values[3] = {Int64GetDatum(campaign_id), Int64GetDatum(after), Int32GetDatum(limit)};
	MemoryContext spi_cxt;
	int			n;

	store_run_kept("SELECT user_id, ticket FROM seckill.queue_places "
				   "WHERE campaign_id = $1 AND ticket > $2 ORDER BY ticket LIMIT $3",
				   3, types, values, SPI_OK_SELECT);
	n = (int) SPI_processed;
	spi_cxt = MemoryContextSwitchTo(store_caller_cxt);
	*users = palloc(sizeof(char *) * Max(n, 1));
	*tickets = palloc(sizeof(int64) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		bool		isnull;

		(*users)[i] = TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		(*tickets)[i] = int64_column(i, 2, 0);
	}
	MemoryContextSwitchTo(spi_cxt);
	return n;
}

/*
 * Inside a transaction: admit the tickets after "after" up to "through" of
 * the campaign's line, now.
 */
void
store_queue_admit(int64 campaign_id, int64 after, int64 through, TimestampTz now)
{
	Oid			types[4] = {INT8OID, INT8OID, INT8OID, TIMESTAMPTZOID};
	Datum		values[4] = {Int64GetDatum(campaign_id), Int64GetDatum(after),
	Int64GetDatum(through), TimestampTzGetDatum(now)};

	store_run_kept("UPDATE seckill.queue_places SET admitted_at = $4 "
				   "WHERE campaign_id = $1 AND ticket > $2 AND ticket <= $3 AND admitted_at IS NULL",
				   4, types, values, SPI_OK_UPDATE);
	store_run_kept("INSERT INTO seckill.queue_lines (campaign_id, admitted_through) VALUES ($1, $3) "
				   "ON CONFLICT (campaign_id) DO UPDATE SET admitted_through = $3 "
				   "WHERE seckill.queue_lines.admitted_through = $2",
				   4, types, values, SPI_OK_INSERT);
	if (SPI_processed != 1)
		elog(ERROR, "the line of campaign " INT64_FORMAT " moved past ticket " INT64_FORMAT " meanwhile",
			 campaign_id, after);
}

/*
 * In a backend, with its privileges: the user's place in the campaign's
 * line; false when the user has none.
 */
bool
store_queue_place(int64 campaign_id, const char *user_id, SkQueuePlace *place)
{
	static SPIPlanPtr plan = NULL;
	Oid			types[2] = {INT8OID, TEXTOID};
	Datum		values[2] = {Int64GetDatum(campaign_id), CStringGetTextDatum(user_id)};
	int			level = store_backend_spi_begin();
	bool		found;

	if (plan == NULL)
		plan = store_prepare("SELECT coalesce(p.ticket, 0), p.admitted_at, " NO_ORDER_OF("$2") ", "
							 " EXISTS (SELECT FROM seckill.orders o "
							 "         WHERE o.campaign_id = $1 AND o.user_id = $2 AND o.status <> 'cancelled') "
							 "FROM seckill.queue_places p WHERE p.campaign_id = $1 AND p.user_id = $2",
							 2, types);
	/* not read-only: a statement's own snapshot, which sees the worker's latest commits */
	if (SPI_execute_plan(plan, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading seckill.queue_places failed");
	found = SPI_processed == 1;
	memset(place, 0, sizeof(SkQueuePlace));
	if (found)
	{
		bool		isnull;
		HeapTuple	tuple = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		Datum		at;

		place->ticket = int64_column(0, 1, 0);
		at = SPI_getbinval(tuple, desc, 2, &isnull);
		place->admitted_at = isnull ? 0 : DatumGetTimestampTz(at);
		place->bought = !DatumGetBool(SPI_getbinval(tuple, desc, 3, &isnull));
		place->holds_order = DatumGetBool(SPI_getbinval(tuple, desc, 4, &isnull));
	}
	store_backend_spi_end(level);
	return found;
}
