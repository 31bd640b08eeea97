/*-------------------------------------------------------------------------
 *
 * redis.c
 *		Non-blocking hiredis connection with deadlines, run from the
 *		worker's wait set.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include <hiredis/hiredis.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "shared/stats.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "redis/lua_scripts.h"
#include "redis/sentinel.h"

static const char *const script_source[SK_NSCRIPTS] = {
	[SK_SCRIPT_BUY] = LUA_BUY,
	[SK_SCRIPT_COMPENSATE] = LUA_COMPENSATE,
	[SK_SCRIPT_LOAD] = LUA_LOAD,
	[SK_SCRIPT_RESTOCK] = LUA_RESTOCK,
	[SK_SCRIPT_TAKE] = LUA_TAKE,
	[SK_SCRIPT_LOCK] = LUA_LOCK,
	[SK_SCRIPT_UNLOCK] = LUA_UNLOCK,
	[SK_SCRIPT_ACQUIRE] = LUA_ACQUIRE,
	[SK_SCRIPT_RENEW] = LUA_RENEW,
	[SK_SCRIPT_EPOCH] = LUA_EPOCH,
	[SK_SCRIPT_IDS] = LUA_IDS,
};

static redisContext *conn = NULL;
static char script_sha[SK_NSCRIPTS][41];
static char last_error[256] = "not connected yet";

/*
 * The settings the connection was made with, to notice changes on reload,
 * and the address it was made to (the sentinels' master, when they are set).
 */
static char *conn_host = NULL;
static int	conn_port = 0;
static char *conn_user = NULL;
static char *conn_password_file = NULL;
static char *conn_sentinels = NULL;
static char *conn_master_name = NULL;

/* The master's run_id, as INFO gave it at connection ("" when not allowed). */
static char run_id[64] = "";

/*
 * When the sentinels are next asked whether the master is still the same:
 * twice a second, or after 5 s when none answered the last time.
 */
static TimestampTz sentinels_due = 0;
#define SENTINEL_POLL_MS 500
#define SENTINEL_RETRY_MS 5000

/* A pipeline is out and its replies not all read: the connection is mid-request. */
static bool in_flight = false;

/* Bumped by every successful connection: the worker replays after each. */
static uint64 generation = 0;

/*
 * Reconnect backoff: 100 ms doubling up to 1 s, reset once a connection has
 * proved usable (the journal replay went through on it), so that a Redis
 * that accepts connections and then fails each one is not hammered.
 */
static TimestampTz next_attempt = 0;
static int	backoff_ms = 0;
static bool proven = false;
static bool connecting = false;	/* in sk_redis_connect, which backs off itself */

/* latch, postmaster death, and the sockets when connected */
static WaitEventSet *wait_set = NULL;
static int	socket_pos = -1;

/*
 * A second connection, subscribed to one channel: its messages go to a
 * callback (the lock releases of other clusters).  Best effort: without it,
 * whoever waits for the message looks again on a timer.
 */
static redisContext *sub_conn = NULL;
static int	sub_pos = -1;
static char *sub_channel = NULL;
static void (*sub_callback) (const char *message) = NULL;

static char *read_password(void);
static void back_off(void);

static void
rebuild_wait_set(void)
{
	if (wait_set)
		FreeWaitEventSet(wait_set);
	/* latch, postmaster death, the connection and the subscription */
	wait_set = CreateWaitEventSet(TopMemoryContext, 4);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	socket_pos = -1;
	sub_pos = -1;
	if (conn)
		socket_pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, conn->fd, NULL, NULL);
	if (sub_conn)
		sub_pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, sub_conn->fd, NULL, NULL);
}

static void
subscription_close(const char *why)
{
	if (sub_conn == NULL)
		return;
	if (why)
		ereport(LOG,
				(errmsg("seckill worker dropped its subscription to Redis channel \"%s\": %s",
						sub_channel, why)));
	redisFree(sub_conn);
	sub_conn = NULL;
}

/* Read what the subscription has and hand its messages to the callback. */
static void
subscription_drain(void)
{
	void	   *raw = NULL;

	if (redisBufferRead(sub_conn) == REDIS_ERR)
	{
		subscription_close(sub_conn->errstr[0] ? sub_conn->errstr : "read failed");
		rebuild_wait_set();
		return;
	}
	while (sub_conn != NULL && redisGetReplyFromReader(sub_conn, &raw) == REDIS_OK && raw != NULL)
	{
		redisReply *r = raw;

		if (r->type == REDIS_REPLY_ERROR)
		{
			/* AUTH or SUBSCRIBE refused (an ACL without the channel) */
			char	   *why = pstrdup(r->str);

			freeReplyObject(raw);
			subscription_close(why);
			rebuild_wait_set();
			return;
		}
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
			r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
			r->element[2]->type == REDIS_REPLY_STRING)
		{
			char	   *message = pstrdup(r->element[2]->str);

			freeReplyObject(raw);
			sub_callback(message);
			continue;
		}
		freeReplyObject(raw);	/* the confirmations of AUTH and SUBSCRIBE */
	}
}

/* Open the subscription next to a new main connection; failures only logged. */
static void
subscription_open(void)
{
	const char *argv[3];
	char	   *password = NULL;
	int			done = 0;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);

	if (sub_channel == NULL || sub_conn != NULL)
		return;
	sub_conn = redisConnectNonBlock(conn_host, conn_port);
	if (sub_conn == NULL || sub_conn->err)
	{
		if (sub_conn)
			subscription_close(sub_conn->errstr);
		sub_conn = NULL;
		return;
	}
	if (seckill_redis_password_file[0] != '\0' && (password = read_password()) != NULL)
	{
		int			argc = 0;

		argv[argc++] = "AUTH";
		if (seckill_redis_user[0] != '\0')
			argv[argc++] = seckill_redis_user;
		argv[argc++] = password;
		(void) redisAppendCommandArgv(sub_conn, argc, argv, NULL);
		memset(password, 0, strlen(password));
	}
	argv[0] = "SUBSCRIBE";
	argv[1] = sub_channel;
	(void) redisAppendCommandArgv(sub_conn, 2, argv, NULL);
	while (!done)
	{
		int			rc;

		if (redisBufferWrite(sub_conn, &done) == REDIS_ERR)
		{
			subscription_close(sub_conn->errstr[0] ? sub_conn->errstr : "write failed");
			return;
		}
		if (done)
			break;
		rc = WaitLatchOrSocket(NULL, WL_SOCKET_WRITEABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   sub_conn->fd,
							   Max(TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline), 0),
							   PG_WAIT_EXTENSION);
		if (!(rc & WL_SOCKET_WRITEABLE))
		{
			subscription_close("no room to write within seckill.redis_timeout");
			return;
		}
	}
}

/*
 * Have every message on this channel handed to callback, from now on and
 * after each reconnection.
 */
void
sk_redis_subscribe(const char *channel, void (*callback) (const char *message))
{
	sub_channel = MemoryContextStrdup(TopMemoryContext, channel);
	sub_callback = callback;
	if (conn != NULL)
	{
		subscription_open();
		rebuild_wait_set();
	}
}

void
sk_redis_init(void)
{
	rebuild_wait_set();
}

bool
sk_redis_connected(void)
{
	return conn != NULL;
}

uint64
sk_redis_generation(void)
{
	return generation;
}

const char *
sk_redis_error(void)
{
	return last_error;
}

static void
set_error(const char *fmt,...) pg_attribute_printf(1, 2);

static void
set_error(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

/*
 * Redis answered a command with an error the connection survives (NOPERM,
 * OOM...): the caller's request failed, and this is why.
 */
void
sk_redis_refused(const char *why)
{
	set_error("%s", why);
}

void
sk_redis_disconnect(const char *why)
{
	if (conn == NULL)
		return;
	if (why)
		set_error("%s", why);
	ereport(LOG,
			(errmsg("seckill worker disconnected from Redis at %s:%d: %s",
					conn_host, conn_port, last_error)));
	redisFree(conn);
	conn = NULL;
	subscription_close(NULL);
	rebuild_wait_set();
	if (!proven && !connecting)
		back_off();
}

/*
 * After an error broke off a round: a connection left mid-request cannot be
 * reused, since its next reply would be an earlier command's.
 */
void
sk_redis_abandon(void)
{
	if (in_flight)
		sk_redis_disconnect("a round was broken off while Redis was answering");
	in_flight = false;
}

/*
 * After a configuration reload: reconnect when the Redis settings changed,
 * and retry at once when disconnected, since the new settings may be the fix.
 */
void
sk_redis_reload(void)
{
	if (conn_sentinels != NULL &&
		(strcmp(conn_sentinels, seckill_redis_sentinels) != 0 ||
		 strcmp(conn_master_name, seckill_redis_master_name) != 0))
		sk_sentinel_close();
	if (conn == NULL)
	{
		next_attempt = 0;
		backoff_ms = 0;
	}
	else if (strcmp(conn_sentinels, seckill_redis_sentinels) != 0 ||
			 strcmp(conn_master_name, seckill_redis_master_name) != 0 ||
			 (!sk_sentinel_enabled() &&
			  (strcmp(conn_host, seckill_redis_host) != 0 || conn_port != seckill_redis_port)) ||
			 strcmp(conn_user, seckill_redis_user) != 0 ||
			 strcmp(conn_password_file, seckill_redis_password_file) != 0)
	{
		sk_sentinel_close();
		sk_redis_disconnect("the Redis settings changed");
	}
}

/*
 * Wait until the socket is ready for `events` or the deadline passes.  The
 * latch is reset when it wakes us: the caller re-checks the queue after its
 * round anyway.  Interrupts (SIGTERM) are served here.
 */
static bool
wait_socket(uint32 events, TimestampTz deadline)
{
	WaitEvent	ev;

	ModifyWaitEvent(wait_set, socket_pos, events, NULL);
	for (;;)
	{
		long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		int			n;

		if (ms <= 0)
			return false;
		n = WaitEventSetWait(wait_set, ms, &ev, 1, PG_WAIT_EXTENSION);
		if (n == 0)
			continue;
		if (ev.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		if (ev.pos == sub_pos && sub_pos >= 0)
		{
			subscription_drain();
			if (sub_pos < 0)
				ModifyWaitEvent(wait_set, socket_pos, events, NULL);
			continue;
		}
		if (ev.events & events)
			return true;
	}
}

static bool
fail(const char *what)
{
	set_error("%s: %s", what, conn && conn->errstr[0] ? conn->errstr : "connection lost");
	sk_redis_disconnect(NULL);
	return false;
}

static bool
flush_output(TimestampTz deadline)
{
	int			done = 0;

	while (!done)
	{
		if (redisBufferWrite(conn, &done) == REDIS_ERR)
			return fail("write to Redis failed");
		if (!done && !wait_socket(WL_SOCKET_WRITEABLE, deadline))
		{
			set_error("Redis did not accept the request within seckill.redis_timeout (%d ms)",
					  seckill_redis_timeout);
			sk_redis_disconnect(NULL);
			return false;
		}
	}
	return true;
}

static void
copy_reply(SkReply *dst, const redisReply *src)
{
	dst->type = src->type;
	dst->integer = src->integer;
	dst->str = NULL;
	dst->len = 0;
	dst->elements = 0;
	dst->element = NULL;
	if (src->type == REDIS_REPLY_STRING || src->type == REDIS_REPLY_STATUS ||
		src->type == REDIS_REPLY_ERROR)
	{
		dst->str = palloc(src->len + 1);
		memcpy(dst->str, src->str, src->len);
		dst->str[src->len] = '\0';
		dst->len = src->len;
	}
	else if (src->type == REDIS_REPLY_ARRAY)
	{
		dst->elements = src->elements;
		dst->element = palloc0(sizeof(SkReply) * Max(src->elements, 1));
		for (size_t i = 0; i < src->elements; i++)
			copy_reply(&dst->element[i], src->element[i]);
	}
}

/* Read n replies into out[], or fail (and disconnect) at the deadline. */
static bool
read_replies(SkReply *out, int n, TimestampTz deadline)
{
	for (int i = 0; i < n;)
	{
		void	   *raw = NULL;

		if (redisGetReplyFromReader(conn, &raw) == REDIS_ERR)
			return fail("bad reply from Redis");
		if (raw != NULL)
		{
			copy_reply(&out[i++], raw);
			freeReplyObject(raw);
			continue;
		}
		if (!wait_socket(WL_SOCKET_READABLE, deadline))
		{
			set_error("Redis did not answer within seckill.redis_timeout (%d ms)",
					  seckill_redis_timeout);
			sk_redis_disconnect(NULL);
			return false;
		}
		if (redisBufferRead(conn) == REDIS_ERR)
			return fail("read from Redis failed");
	}
	return true;
}

/*
 * Replies that say this Redis no longer serves as a master (a failover made
 * it a replica, it is loading its data, or it is a replica whose master is
 * down): nothing was written; drop the connection, so that the next one goes
 * to the master (the sentinels', when set).
 */
static bool
serving_master(const SkReply *r, int n)
{
	static const char *const codes[][2] = {
		{"READONLY", "it is a replica now (after a failover?)"},
		{"LOADING", "it is loading its data set"},
		{"MASTERDOWN", "it is a replica that lost its master"},
	};

	for (int i = 0; i < n; i++)
	{
		if (r[i].type != REDIS_REPLY_ERROR)
			continue;
		for (int c = 0; c < lengthof(codes); c++)
			if (strncmp(r[i].str, codes[c][0], strlen(codes[c][0])) == 0)
			{
				set_error("Redis at %s:%d answered %s: %s; seckill reconnects%s",
						  conn_host, conn_port, codes[c][0], codes[c][1],
						  sk_sentinel_enabled() ? " to the master the sentinels name" : "");
				sk_redis_disconnect(NULL);
				return false;
			}
	}
	return true;
}

static bool
send_and_read(SkPipeline *p, SkReply *out)
{
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz deadline = TimestampTzPlusMilliseconds(start, seckill_redis_timeout);

	if (redisAppendFormattedCommand(conn, p->buf.data, p->buf.len) != REDIS_OK)
		return fail("could not queue a Redis command");
	in_flight = true;
	if (!flush_output(deadline))
		return false;
	pg_atomic_fetch_add_u64(&seckill_figures->counters.redis_round_trips, 1);
	if (!read_replies(out, p->count, deadline))
		return false;
	in_flight = false;
	if (!serving_master(out, p->count))
		return false;
	seckill_hist_record(&seckill_figures->redis_latency, GetCurrentTimestamp() - start);
	return true;
}

void
sk_pipeline_init(SkPipeline *p)
{
	initStringInfo(&p->buf);
	p->count = 0;
	p->max = 16;
	p->ends = palloc(sizeof(int) * p->max);
}

/* Append one command, binary-safe, in RESP. */
void
sk_pipeline_add(SkPipeline *p, int argc, const char **argv, const size_t *lens)
{
	appendStringInfo(&p->buf, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++)
	{
		size_t		len = lens ? lens[i] : strlen(argv[i]);

		appendStringInfo(&p->buf, "$%zu\r\n", len);
		appendBinaryStringInfo(&p->buf, argv[i], len);
		appendBinaryStringInfo(&p->buf, "\r\n", 2);
	}
	if (p->count == p->max)
	{
		p->max *= 2;
		p->ends = repalloc(p->ends, sizeof(int) * p->max);
	}
	p->ends[p->count++] = p->buf.len;
}

void
sk_pipeline_script(SkPipeline *p, SkScript script,
				   int nkeys, const char **keys, int nargs, const char **args)
{
	const char **argv = palloc(sizeof(char *) * (3 + nkeys + nargs));
	char		nkeys_str[16];
	int			argc = 0;

	snprintf(nkeys_str, sizeof(nkeys_str), "%d", nkeys);
	argv[argc++] = "EVALSHA";
	argv[argc++] = script_sha[script];
	argv[argc++] = nkeys_str;
	for (int i = 0; i < nkeys; i++)
		argv[argc++] = keys[i];
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	sk_pipeline_add(p, argc, argv, NULL);
	pfree(argv);
}

static bool
load_scripts(void)
{
	SkPipeline p;
	SkReply		replies[SK_NSCRIPTS];

	sk_pipeline_init(&p);
	for (int i = 0; i < SK_NSCRIPTS; i++)
	{
		const char *argv[] = {"SCRIPT", "LOAD", script_source[i]};

		sk_pipeline_add(&p, 3, argv, NULL);
	}
	if (!send_and_read(&p, replies))
		return false;
	for (int i = 0; i < SK_NSCRIPTS; i++)
	{
		if (replies[i].type != REDIS_REPLY_STRING || replies[i].len != 40)
		{
			set_error("SCRIPT LOAD failed: %s", replies[i].str ? replies[i].str : "unexpected reply");
			sk_redis_disconnect(NULL);
			return false;
		}
		memcpy(script_sha[i], replies[i].str, 41);
	}
	return true;
}

static bool
is_noscript(const SkReply *r)
{
	return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static bool
any_noscript(const SkReply *r, int n)
{
	for (int i = 0; i < n; i++)
		if (is_noscript(&r[i]))
			return true;
	return false;
}

/* Times the scripts are loaded again for one pipeline before its NOSCRIPT replies stand. */
#define NOSCRIPT_RETRIES 3

/*
 * Send the pipeline and read all its replies.  NULL when Redis failed: the
 * connection is then closed and sk_redis_error() says why.  When Redis has
 * lost the scripts (SCRIPT FLUSH, a restart behind a proxy) they are loaded
 * again, and the commands that answered NOSCRIPT, which did not run, are
 * sent once more; the others ran and are not repeated.
 */
SkReply *
sk_pipeline_exec(SkPipeline *p)
{
	SkReply    *replies;

	if (conn == NULL)
		return NULL;
	if (p->count == 0)
		return NULL;
	replies = palloc0(sizeof(SkReply) * p->count);
	if (!send_and_read(p, replies))
		return NULL;

	for (int attempt = 0; attempt < NOSCRIPT_RETRIES && any_noscript(replies, p->count); attempt++)
	{
		SkPipeline	again;
		SkReply    *more;
		int		   *which = palloc(sizeof(int) * p->count);

		sk_pipeline_init(&again);
		for (int i = 0; i < p->count; i++)
		{
			int			start = i == 0 ? 0 : p->ends[i - 1];

			if (!is_noscript(&replies[i]))
				continue;
			appendBinaryStringInfo(&again.buf, p->buf.data + start, p->ends[i] - start);
			which[again.count++] = i;
		}
		ereport(LOG, (errmsg("seckill worker reloads its Lua scripts into Redis")));
		more = palloc0(sizeof(SkReply) * again.count);
		if (!load_scripts() || !send_and_read(&again, more))
			return NULL;
		for (int i = 0; i < again.count; i++)
			replies[which[i]] = more[i];
	}
	return replies;
}

/* A script's Lua source, for EVAL on connections other than the worker's main one. */
const char *
sk_script_source(SkScript script)
{
	return script_source[script];
}

bool
sk_reply_is_error(const SkReply *r)
{
	return r->type == REDIS_REPLY_ERROR;
}

long long
sk_reply_int(const SkReply *r)
{
	if (r->type == REDIS_REPLY_INTEGER)
		return r->integer;
	if (r->type == REDIS_REPLY_STRING)
		return strtoll(r->str, NULL, 10);
	return -1;
}

/*
 * A key of the whole prefix, not of one campaign: prefix:{prefix}:<part>,
 * all in one Redis Cluster slot, so that one script may use several.
 */
char *
sk_prefix_key(const char *part)
{
	return psprintf("%s:{%s}:%s", seckill_redis_prefix, seckill_redis_prefix, part);
}

char *
sk_campaign_key(int64 campaign_id, const char *part)
{
	return psprintf("%s:{c:" INT64_FORMAT "}:%s", seckill_redis_prefix, campaign_id, part);
}

char *
sk_shard_key(int64 campaign_id, int shard, int nshards, const char *part)
{
	if (nshards <= 1)
		return sk_campaign_key(campaign_id, part);
	return psprintf("%s:{c:" INT64_FORMAT ":%d}:%s", seckill_redis_prefix, campaign_id, shard, part);
}

/* The same as SQL's (hashtext(user_id)::bigint & 4294967295) % nshards. */
int
sk_home_shard(const char *user_id, int nshards)
{
	if (nshards <= 1)
		return 0;
	return (int) (hash_bytes((const unsigned char *) user_id, strlen(user_id)) % (uint32) nshards);
}

/* The first line of the password file; NULL (and the error set) when unusable. */
static char *
read_password(void)
{
	FILE	   *f;
	struct stat st;
	char		line[1024];
	size_t		len;

	f = AllocateFile(seckill_redis_password_file, "r");
	if (f == NULL)
	{
		set_error("could not open seckill.redis_password_file \"%s\": %m",
				  seckill_redis_password_file);
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		FreeFile(f);
		set_error("seckill.redis_password_file \"%s\" must be readable by its owner only (chmod 600)",
				  seckill_redis_password_file);
		return NULL;
	}
	if (fgets(line, sizeof(line), f) == NULL)
		line[0] = '\0';
	FreeFile(f);
	len = strcspn(line, "\r\n");
	line[len] = '\0';
	return pstrdup(line);
}

static bool
authenticate(void)
{
	SkPipeline	p;
	SkReply		reply;
	char	   *password;
	bool		ok;

	if (seckill_redis_password_file[0] == '\0')
		return true;
	password = read_password();
	if (password == NULL)
	{
		sk_redis_disconnect(NULL);
		return false;
	}
	sk_pipeline_init(&p);
	if (seckill_redis_user[0] != '\0')
	{
		const char *argv[] = {"AUTH", seckill_redis_user, password};

		sk_pipeline_add(&p, 3, argv, NULL);
	}
	else
	{
		const char *argv[] = {"AUTH", password};

		sk_pipeline_add(&p, 2, argv, NULL);
	}
	memset(password, 0, strlen(password));
	ok = send_and_read(&p, &reply);
	memset(p.buf.data, 0, p.buf.len);
	if (!ok)
		return false;
	if (reply.type == REDIS_REPLY_ERROR)
	{
		/* Redis' own message names neither the password nor the user's secret. */
		set_error("Redis refused the credentials of seckill.redis_user \"%s\": %s",
				  seckill_redis_user, reply.str);
		sk_redis_disconnect(NULL);
		return false;
	}
	return true;
}

static void
remember_settings(const char *host, int port)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (conn_host)
	{
		pfree(conn_host);
		pfree(conn_user);
		pfree(conn_password_file);
		pfree(conn_sentinels);
		pfree(conn_master_name);
	}
	conn_host = pstrdup(host);
	conn_port = port;
	conn_user = pstrdup(seckill_redis_user);
	conn_password_file = pstrdup(seckill_redis_password_file);
	conn_sentinels = pstrdup(seckill_redis_sentinels);
	conn_master_name = pstrdup(seckill_redis_master_name);
	MemoryContextSwitchTo(old);
}

static void
back_off(void)
{
	backoff_ms = backoff_ms == 0 ? 100 : Min(backoff_ms * 2, 1000);
	next_attempt = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), backoff_ms);
}

static void
attempt_failed(void)
{
	if (backoff_ms == 0)
		ereport(LOG,
				(errmsg("seckill worker cannot reach Redis: %s", last_error),
				 errhint("Purchases fail with an error until it is back; the worker retries every second.")));
	back_off();
}

/* The connection did its first work (the journal replay): it is usable. */
void
sk_redis_proven(void)
{
	proven = true;
	backoff_ms = 0;
	next_attempt = 0;
}

const char *
sk_redis_run_id(void)
{
	return run_id;
}

/*
 * After connecting: is this Redis a master?  A replica would refuse every
 * write, one at a time; say so once, naming its role.  Also learn its
 * run_id (a new one means a new master, or one restarted: worker/epoch.c).
 * ROLE and INFO refused by an ACL are not held against it.
 */
static bool
check_role(void)
{
	SkPipeline	p;
	SkReply		r[2];
	const char *role;

	sk_pipeline_init(&p);
	sk_pipeline_add(&p, 1, (const char *[]) {"ROLE"}, NULL);
	sk_pipeline_add(&p, 2, (const char *[]) {"INFO", "server"}, NULL);
	if (!send_and_read(&p, r))
		return false;
	role = r[0].type == REDIS_REPLY_ARRAY && r[0].elements > 0 ? r[0].element[0].str : NULL;
	if (role != NULL && strcmp(role, "master") != 0)
	{
		set_error("Redis at %s:%d is a %s, not a master: seckill writes to the master only%s",
				  conn_host, conn_port, strcmp(role, "slave") == 0 ? "replica" : role,
				  sk_sentinel_enabled() ? " (the sentinels named it; it may be changing role)" :
				  "; point seckill.redis_host at the master, or set seckill.redis_sentinels");
		sk_redis_disconnect(NULL);
		return false;
	}
	run_id[0] = '\0';
	if (r[1].type == REDIS_REPLY_STRING)
	{
		const char *at = strstr(r[1].str, "run_id:");

		if (at != NULL)
		{
			at += strlen("run_id:");
			strlcpy(run_id, at, Min(sizeof(run_id), strcspn(at, "\r\n") + 1));
		}
	}
	return true;
}

/*
 * Twice a second, while connected through the sentinels: do they still name
 * the master this connection goes to?  A failover leaves the old master
 * accepting writes for a while, which its successor would never see.
 */
void
sk_redis_watch(void)
{
	char		host[256];
	int			port;
	char		why[256];
	char	   *password = NULL;

	bool		named;

	if (conn == NULL || !sk_sentinel_enabled() || GetCurrentTimestamp() < sentinels_due)
		return;
	/* the password only to open a sentinel connection: it is kept */
	if (!sk_sentinel_connected() && seckill_redis_password_file[0] != '\0')
	{
		char		error[sizeof(last_error)];

		strlcpy(error, last_error, sizeof(error));
		password = read_password();
		strlcpy(last_error, error, sizeof(last_error));
	}
	named = sk_sentinel_poll(password, host, sizeof(host), &port, why, sizeof(why));
	if (password)
		memset(password, 0, strlen(password));
	sentinels_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												named ? SENTINEL_POLL_MS : SENTINEL_RETRY_MS);
	if (named && (strcmp(host, conn_host) != 0 || port != conn_port))
		sk_redis_disconnect(psprintf("the sentinels name a new master, %s:%d", host, port));
}

/*
 * Connect (to the master the sentinels name, when they are set),
 * authenticate, check the role and load the scripts, all within
 * seckill.redis_timeout.  While backing off after a failure, returns false at
 * once with the last error, so that callers fail fast instead of queueing.
 */
static bool
connect_now(void)
{
	TimestampTz deadline;
	int			soerr = 0;
	socklen_t	soerrlen = sizeof(soerr);

	if (conn != NULL)
		return true;
	if (GetCurrentTimestamp() < next_attempt)
		return false;

	if (sk_sentinel_enabled())
	{
		char		host[256];
		int			port;
		char		why[256];
		char	   *password = NULL;
		bool		named;

		if (seckill_redis_password_file[0] != '\0')
			password = read_password();
		named = sk_sentinel_master(password, host, sizeof(host), &port, why, sizeof(why));
		if (password)
			memset(password, 0, strlen(password));
		if (!named)
		{
			set_error("no sentinel of seckill.redis_sentinels named the master \"%s\": %s",
					  seckill_redis_master_name, why);
			attempt_failed();
			return false;
		}
		remember_settings(host, port);
		sentinels_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SENTINEL_POLL_MS);
	}
	else
		remember_settings(seckill_redis_host, seckill_redis_port);
	proven = false;
	connecting = true;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);
	conn = redisConnectNonBlock(conn_host, conn_port);
	if (conn == NULL || conn->err)
	{
		set_error("could not connect to Redis at %s:%d: %s", conn_host,
				  conn_port, conn ? conn->errstr : "out of memory");
		if (conn)
			redisFree(conn);
		conn = NULL;
		attempt_failed();
		return false;
	}
	rebuild_wait_set();
	if (!wait_socket(WL_SOCKET_WRITEABLE, deadline) ||
		getsockopt(conn->fd, SOL_SOCKET, SO_ERROR, &soerr, &soerrlen) != 0 || soerr != 0)
	{
		set_error("could not connect to Redis at %s:%d: %s", conn_host,
				  conn_port, soerr ? strerror(soerr) : "timed out");
		redisFree(conn);
		conn = NULL;
		rebuild_wait_set();
		attempt_failed();
		return false;
	}
	if (!authenticate() || !check_role() || !load_scripts())
	{
		if (conn != NULL)
			sk_redis_disconnect(NULL);
		attempt_failed();
		return false;
	}
	/* not reset until the connection has proved usable (sk_redis_proven) */
	next_attempt = 0;
	generation++;
	subscription_open();
	rebuild_wait_set();
	ereport(LOG, (errmsg("seckill worker connected to Redis at %s:%d%s",
						 conn_host, conn_port, sk_sentinel_enabled() ? ", the master the sentinels name" : "")));
	return true;
}

bool
sk_redis_connect(void)
{
	bool		ok;

	if (conn != NULL)
		return true;
	PG_TRY();
	{
		ok = connect_now();
	}
	PG_CATCH();
	{
		/* an ERROR (a cancel, a statement timeout) broke the handshake off */
		connecting = false;
		if (conn != NULL)
		{
			redisFree(conn);
			conn = NULL;
			rebuild_wait_set();
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	connecting = false;
	return ok;
}

/*
 * Sleep until the latch is set or the timeout passes.  An idle connection
 * that turns readable has been closed by Redis (it sends nothing unasked):
 * notice it now rather than at the next purchase.
 */
void
sk_redis_wait_idle(long timeout_ms)
{
	WaitEvent	ev;
	int			n;

	if (socket_pos >= 0)
		ModifyWaitEvent(wait_set, socket_pos, WL_SOCKET_READABLE, NULL);
	n = WaitEventSetWait(wait_set, timeout_ms, &ev, 1, PG_WAIT_EXTENSION);
	if (n == 1 && (ev.events & WL_LATCH_SET))
		ResetLatch(MyLatch);
	else if (n == 1 && ev.pos == sub_pos && sub_pos >= 0)
		subscription_drain();
	else if (n == 1 && (ev.events & WL_SOCKET_READABLE) && conn != NULL)
	{
		if (redisBufferRead(conn) == REDIS_ERR)
			fail("Redis closed the connection");
	}
}
