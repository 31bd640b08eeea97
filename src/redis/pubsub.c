/*-------------------------------------------------------------------------
 *
 * pubsub.c
 *		A subscription to one Redis channel, on a connection of its own
 *		next to the worker's, heard in the worker's wait set.
 *
 * conn.c, which holds the wait set and calls nothing above it, has its
 * socket added, heard and closed through the hooks sk_redis_init sets.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/pubsub.h"

#include "pgstat.h"
#include "redis/redis_int.h"
#include "utils/memutils.h"

/*
 * A second connection, subscribed to one channel: its messages go to a
 * callback (the lock releases of other clusters).  Best effort: without it,
 * whoever waits for the message looks again on a timer.
 */
static redisContext *sub_conn = NULL;
static int	sub_pos = -1;
static char *sub_channel = NULL;
static void (*sub_callback) (const char *message) = NULL;

/* Its socket in the wait set (conn.c), just rebuilt. */
void
sk_pubsub_add_event(WaitEventSet *set)
{
	sub_pos = -1;
	if (sub_conn)
		sub_pos = AddWaitEventToSet(set, WL_SOCKET_READABLE, sub_conn->fd, NULL, NULL);
}

/* Is the subscription's socket at this position of the wait set? */
bool
sk_pubsub_at(int pos)
{
	return pos == sub_pos && sub_pos >= 0;
}

void
sk_pubsub_close(const char *why)
{
	if (sub_conn == NULL)
		return;
	if (why)
		ereport(LOG,
				(errmsg("seckill worker dropped its subscription to Redis channel \"%s\": %s",
						sub_channel, why)));
	sk_tls_free(sub_conn);
	sub_conn = NULL;
}

/* Read what the subscription has and hand its messages to the callback. */
void
sk_pubsub_drain(void)
{
	void	   *raw = NULL;

	if (sk_tls_read(sub_conn) == REDIS_ERR)
	{
		sk_pubsub_close(sub_conn->errstr[0] ? sub_conn->errstr : "read failed");
		sk_conn_rebuild_wait_set();
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
			sk_pubsub_close(why);
			sk_conn_rebuild_wait_set();
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
void
sk_pubsub_open(void)
{
	const char *argv[2];
	char	   *password = NULL;
	int			done = 0;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);

	if (sub_channel == NULL || sub_conn != NULL)
		return;
	/* a cluster broadcasts its messages to every node: any master serves */
	sub_conn = redisConnectNonBlock(sk_nodes[0].host, sk_nodes[0].port);
	if (sub_conn == NULL || sub_conn->err)
	{
		if (sub_conn)
			sk_pubsub_close(sub_conn->errstr);
		sub_conn = NULL;
		return;
	}
	if (seckill_redis_tls)
	{
		char		error[256];

		if (!sk_tls_start(sub_conn, sk_nodes[0].host, sk_nodes[0].port, deadline, error, sizeof(error)))
		{
			sk_pubsub_close(error);
			return;
		}
	}
	if (seckill_redis_password_file[0] != '\0' && (password = sk_conn_read_password()) != NULL)
	{
		bool		sent = sk_tls_write_auth(sub_conn, seckill_redis_user, password, deadline);

		memset(password, 0, strlen(password));
		if (!sent)
		{
			sk_pubsub_close(sub_conn->errstr);
			return;
		}
	}
	argv[0] = "SUBSCRIBE";
	argv[1] = sub_channel;
	(void) redisAppendCommandArgv(sub_conn, 2, argv, NULL);
	while (!done)
	{
		int			rc;

		if (sk_tls_write(sub_conn, &done) == REDIS_ERR)
		{
			sk_pubsub_close(sub_conn->errstr[0] ? sub_conn->errstr : "write failed");
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
			sk_pubsub_close("no room to write within seckill.redis_timeout");
			return;
		}
	}
}

/*
 * Have every message on this channel handed to callback, from now on and
 * after each reconnection.
 */
void
sk_pubsub_subscribe(const char *channel, void (*callback) (const char *message))
{
	sub_channel = MemoryContextStrdup(TopMemoryContext, channel);
	sub_callback = callback;
	if (sk_connected)
	{
		sk_pubsub_open();
		sk_conn_rebuild_wait_set();
	}
}
