/*-------------------------------------------------------------------------
 *
 * sentinel.c
 *		Finding the Redis master through Redis Sentinel.
 *
 * The sentinels of seckill.redis_sentinels are asked, in turn, for the
 * address of seckill.redis_master_name until one names it.  The connection
 * to the sentinel that answered is kept, so that asking again (the worker
 * does, twice a second, to follow a failover while the old master still
 * accepts writes) costs one round trip.  Sentinel connections are
 * non-blocking, each step (the connection, the TLS handshake, a command and
 * its reply) bounded by a short timeout and cancellable; with
 * seckill.redis_tls on they speak TLS, as the sentinels of a TLS
 * deployment do (tls-port, tls-replication), with the master's settings.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/sentinel.h"

#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "redis/tls.h"

static redisContext *sentinel = NULL;
static char sentinel_addr[256];

/*
 * A connection being opened, and whether a lookup is under way: a cancel
 * (an ERROR) in one of its waits leaves them set, and the next lookup
 * closes both, rather than reading a reply meant for the broken-off one.
 */
static redisContext *opening = NULL;
static bool looking_up = false;

bool
sk_sentinel_enabled(void)
{
	return seckill_redis_sentinels != NULL && seckill_redis_sentinels[0] != '\0';
}

void
sk_sentinel_close(void)
{
	sk_tls_free(sentinel);
	sentinel = NULL;
	sk_tls_free(opening);
	opening = NULL;
}

/* A lookup begins: what one broken off left is closed. */
static void
begin_lookup(void)
{
	if (looking_up)
		sk_sentinel_close();
	looking_up = true;
}

static bool
end_lookup(bool named)
{
	looking_up = false;
	return named;
}

/*
 * Each step's deadline: seckill.redis_timeout, at most 250 ms, since the
 * worker asks between its rounds and a sentinel that hangs must not stall
 * them.
 */
static TimestampTz
step_deadline(void)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), Min(seckill_redis_timeout, 250));
}

static redisReply *read_reply(redisContext *c, TimestampTz deadline);

/*
 * Send a command to the sentinel connection c and read its reply, within a
 * step: NULL, with c->errstr set, when it failed or timed out.
 */
static redisReply *
command(redisContext *c, int argc, const char **argv)
{
	TimestampTz deadline = step_deadline();
	int			done = 0;

	if (redisAppendCommandArgv(c, argc, argv, NULL) != REDIS_OK)
		return NULL;
	for (;;)
	{
		if (sk_tls_write(c, &done) != REDIS_OK)
			return NULL;
		if (done)
			break;
		if (!sk_tls_wait(c->fd, true, deadline))
		{
			strlcpy(c->errstr, "timed out", sizeof(c->errstr));
			return NULL;
		}
	}
	return read_reply(c, deadline);
}

/* Read one reply on the sentinel connection c by the deadline, as command(). */
static redisReply *
read_reply(redisContext *c, TimestampTz deadline)
{
	void	   *reply = NULL;

	for (;;)
	{
		if (redisGetReplyFromReader(c, &reply) != REDIS_OK)
			return NULL;
		if (reply != NULL)
			return reply;
		if (!sk_tls_wait(c->fd, false, deadline))
		{
			strlcpy(c->errstr, "timed out", sizeof(c->errstr));
			return NULL;
		}
		if (sk_tls_read(c) != REDIS_OK)
			return NULL;
	}
}

/*
 * Connect to one sentinel "host:port" (and AUTH, as user when one is given,
 * when a password is).
 */
static redisContext *
open_sentinel(const char *addr, const char *user, const char *password, char *why, size_t whylen)
{
	char		host[256];
	const char *colon = strrchr(addr, ':');
	TimestampTz deadline = step_deadline();
	redisContext *c;
	int			soerr = 0;
	socklen_t	soerrlen = sizeof(soerr);
	char		error[256] = "";

	if (colon == NULL || colon == addr || colon - addr >= (int) sizeof(host) || atoi(colon + 1) <= 0)
	{
		snprintf(why, whylen, "\"%s\" in seckill.redis_sentinels is not host:port", addr);
		return NULL;
	}
	memcpy(host, addr, colon - addr);
	host[colon - addr] = '\0';
	c = redisConnectNonBlock(host, atoi(colon + 1));
	if (c == NULL || c->err)
	{
		snprintf(why, whylen, "sentinel %s: %s", addr, c ? c->errstr : "out of memory");
		if (c)
			redisFree(c);
		return NULL;
	}
	opening = c;
	if (!sk_tls_wait(c->fd, true, deadline) ||
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &soerrlen) != 0 || soerr != 0)
		snprintf(error, sizeof(error), "%s", soerr ? strerror(soerr) : "timed out");
	else if (seckill_redis_tls)
		(void) sk_tls_start(c, host, atoi(colon + 1), step_deadline(), error, sizeof(error));
	if (error[0] == '\0' && password != NULL)
	{
		redisReply *r;

		/* a sentinel without a password refuses AUTH: that is fine */
		r = sk_tls_write_auth(c, user, password, step_deadline()) ? read_reply(c, step_deadline()) : NULL;
		if (r == NULL)
			strlcpy(error, c->errstr, sizeof(error));
		else
			freeReplyObject(r);
	}
	opening = NULL;
	if (error[0] != '\0')
	{
		snprintf(why, whylen, "sentinel %s: %s", addr, error);
		sk_tls_free(c);
		return NULL;
	}
	return c;
}

/* Ask the open sentinel; false (and why) when it cannot name the master. */
static bool
ask(char *host, size_t hostlen, int *port, char *why, size_t whylen)
{
	redisReply *r = command(sentinel, 3, (const char *[]) {"SENTINEL", "get-master-addr-by-name",
	seckill_redis_master_name});
	bool		named = false;

	if (r == NULL)
		snprintf(why, whylen, "sentinel %s: %s", sentinel_addr, sentinel->errstr);
	else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
			 r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING)
	{
		strlcpy(host, r->element[0]->str, hostlen);
		*port = atoi(r->element[1]->str);
		named = true;
	}
	else if (r->type == REDIS_REPLY_ERROR)
		snprintf(why, whylen, "sentinel %s refused: %s", sentinel_addr, r->str);
	else
		snprintf(why, whylen, "sentinel %s knows no master named \"%s\" (seckill.redis_master_name)",
				 sentinel_addr, seckill_redis_master_name);
	if (r != NULL)
		freeReplyObject(r);
	if (!named)
		sk_sentinel_close();
	return named;
}

/* Round robin over seckill.redis_sentinels for sk_sentinel_poll. */
static int	next_sentinel = 0;

bool
sk_sentinel_connected(void)
{
	return sentinel != NULL;
}

/* The sentinels of seckill.redis_sentinels, split; *n set to their count. */
static char **
sentinel_list(int *n)
{
	char	   *list = pstrdup(seckill_redis_sentinels);
	char	  **addrs = palloc(sizeof(char *) * (strlen(list) / 2 + 1));
	char	   *save = NULL;

	*n = 0;
	for (char *addr = strtok_r(list, ", ", &save); addr != NULL; addr = strtok_r(NULL, ", ", &save))
		addrs[(*n)++] = addr;
	return addrs;
}

/* Open the sentinel at addr and ask it. */
static bool
open_and_ask(const char *addr, const char *user, const char *password, char *host, size_t hostlen, int *port,
			 char *why, size_t whylen)
{
	sentinel = open_sentinel(addr, user, password, why, whylen);
	if (sentinel == NULL)
		return false;
	strlcpy(sentinel_addr, addr, sizeof(sentinel_addr));
	return ask(host, hostlen, port, why, whylen);
}

/*
 * Ask one sentinel only: the one asked last, or else the next of the list.
 * For the worker's periodic check, which must cost one bounded step, never a
 * walk through sentinels that do not answer.
 */
bool
sk_sentinel_poll(const char *user, const char *password, char *host, size_t hostlen, int *port,
				 char *why, size_t whylen)
{
	int			n;
	char	  **addrs;

	begin_lookup();
	if (sentinel != NULL)
		return end_lookup(ask(host, hostlen, port, why, whylen));
	addrs = sentinel_list(&n);
	if (n == 0)
		return end_lookup(false);
	return end_lookup(open_and_ask(addrs[next_sentinel++ % n], user, password, host, hostlen, port, why, whylen));
}

/*
 * The master's address, from the sentinel asked last or else from the first
 * of seckill.redis_sentinels that names one.  False, with why, when none did.
 */
bool
sk_sentinel_master(const char *user, const char *password, char *host, size_t hostlen, int *port,
				   char *why, size_t whylen)
{
	int			n;
	char	  **addrs;

	begin_lookup();
	if (sentinel != NULL && ask(host, hostlen, port, why, whylen))
		return end_lookup(true);
	addrs = sentinel_list(&n);
	snprintf(why, whylen, "seckill.redis_sentinels is empty");
	for (int i = 0; i < n; i++)
		if (open_and_ask(addrs[i], user, password, host, hostlen, port, why, whylen))
			return end_lookup(true);
	return end_lookup(false);
}
