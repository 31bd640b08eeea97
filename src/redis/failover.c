/*-------------------------------------------------------------------------
 *
 * failover.c
 *		Is the Redis the worker writes to still the master?  The replies
 *		that say it is one no longer, and the sentinels, asked at connection
 *		and twice a second after, which master they name (sentinel.c holds
 *		their connection).  Its role at connection is checked with the rest
 *		of its handshake (node.c).
 *
 * A failover leaves the old master accepting writes for a while: the worker
 * leaves it as soon as anything says so, and connects to the new one.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include "redis/sentinel.h"

/*
 * When the sentinels are next asked whether the master is still the same:
 * twice a second, or after 5 s when none answered the last time.
 */
static TimestampTz sentinels_due = 0;
#define SENTINEL_POLL_MS 500
#define SENTINEL_RETRY_MS 5000

/*
 * The sentinels' password, NULL when none is set: the one of
 * seckill.redis_sentinel_password_file for their default user (*user NULL),
 * else the master's, as seckill.redis_user.
 */
static char *
sentinel_password(const char **user)
{
	*user = NULL;
	if (seckill_redis_sentinel_password_file[0] != '\0')
		return sk_conn_read_secret(seckill_redis_sentinel_password_file,
								   "seckill.redis_sentinel_password_file");
	*user = seckill_redis_user;
	return seckill_redis_password_file[0] != '\0' ? sk_conn_read_password() : NULL;
}

/*
 * The master the sentinels name, to connect to: false, with the error set,
 * when none of them names it.
 */
bool
sk_failover_master(char *host, size_t hostlen, int *port)
{
	char		why[256];
	const char *user;
	char	   *password = sentinel_password(&user);
	bool		named;

	named = sk_sentinel_master(user, password, host, hostlen, port, why, sizeof(why));
	if (password)
		memset(password, 0, strlen(password));
	if (!named)
	{
		sk_conn_set_error("no sentinel of seckill.redis_sentinels named the master \"%s\": %s",
						  seckill_redis_master_name, why);
		return false;
	}
	sentinels_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), SENTINEL_POLL_MS);
	return true;
}

/*
 * Replies that say this Redis no longer serves as a master (a failover made
 * it a replica, it is loading its data, or it is a replica whose master is
 * down): nothing was written; drop the connection, so that the next one goes
 * to the master (the sentinels', when set).
 */
bool
sk_failover_serving(const SkReply *r, const SkNode *node)
{
	static const char *const codes[][2] = {
		{"READONLY", "it is a replica now (after a failover?)"},
		{"LOADING", "it is loading its data set"},
		{"MASTERDOWN", "it is a replica that lost its master"},
	};

	if (r->type != REDIS_REPLY_ERROR)
		return true;
	for (int c = 0; c < lengthof(codes); c++)
		if (strncmp(r->str, codes[c][0], strlen(codes[c][0])) == 0)
		{
			sk_conn_set_error("Redis at %s:%d answered %s: %s; seckill reconnects%s",
							  node->host, node->port, codes[c][0], codes[c][1],
							  sk_sentinel_enabled() ? " to the master the sentinels name" : "");
			sk_conn_disconnect(NULL);
			return false;
		}
	return true;
}

/*
 * Twice a second, while connected through the sentinels: do they still name
 * the master this connection goes to?  A failover leaves the old master
 * accepting writes for a while, which its successor would never see.
 */
void
sk_failover_watch(void)
{
	char		host[256];
	int			port;
	char		why[256];
	char	   *password = NULL;
	const char *user = NULL;
	bool		named;

	if (!sk_connected || !sk_sentinel_enabled() || GetCurrentTimestamp() < sentinels_due)
		return;
	/* the password only to open a sentinel connection: it is kept */
	if (!sk_sentinel_connected())
	{
		char		error[sizeof(sk_last_error)];

		strlcpy(error, sk_last_error, sizeof(error));
		password = sentinel_password(&user);
		strlcpy(sk_last_error, error, sizeof(sk_last_error));
	}
	named = sk_sentinel_poll(user, password, host, sizeof(host), &port, why, sizeof(why));
	if (password)
		memset(password, 0, strlen(password));
	sentinels_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												named ? SENTINEL_POLL_MS : SENTINEL_RETRY_MS);
	if (named && (strcmp(host, sk_conn_host) != 0 || port != sk_conn_port))
		sk_conn_disconnect(psprintf("the sentinels name a new master, %s:%d", host, port));
}
