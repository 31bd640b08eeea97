/*-------------------------------------------------------------------------
 *
 * pubsub.c
 *		A subscription to one Redis channel, on a connection of its own
 *		next to the worker's: opened after each connection, and its
 *		messages handed to the worker when it asks for them.
 *
 * Best effort: without it, whoever waits for a message looks again on a
 * timer.  Its connection is conn.c's (sk_sub), heard in the wait set with
 * the others, read in any wait, closed with them; the messages it reads
 * are kept there until the worker takes them (sk_pubsub_take), so that
 * nothing of the worker runs within a Redis wait.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/pubsub.h"

#include "pgstat.h"
#include "redis/redis_int.h"
#include "utils/memutils.h"

/* Open the subscription next to a new main connection; failures only logged. */
void
sk_pubsub_open(void)
{
	const char *argv[2];
	char	   *password = NULL;
	int			done = 0;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);

	if (sk_sub.channel == NULL || sk_sub.ctx != NULL)
		return;
	/* a cluster broadcasts its messages to every node: any master serves */
	sk_sub.ctx = redisConnectNonBlock(sk_nodes[0].host, sk_nodes[0].port);
	if (sk_sub.ctx == NULL || sk_sub.ctx->err)
	{
		if (sk_sub.ctx)
			sk_conn_close_subscription(sk_sub.ctx->errstr);
		sk_sub.ctx = NULL;
		return;
	}
	if (seckill_redis_tls)
	{
		char		error[256];

		if (!sk_tls_start(sk_sub.ctx, sk_nodes[0].host, sk_nodes[0].port, deadline, error, sizeof(error)))
		{
			sk_conn_close_subscription(error);
			return;
		}
	}
	if (seckill_redis_password_file[0] != '\0' && (password = sk_conn_read_password()) != NULL)
	{
		bool		sent = sk_tls_write_auth(sk_sub.ctx, seckill_redis_user, password, deadline);

		memset(password, 0, strlen(password));
		if (!sent)
		{
			sk_conn_close_subscription(sk_sub.ctx->errstr);
			return;
		}
	}
	argv[0] = "SUBSCRIBE";
	argv[1] = sk_sub.channel;
	(void) redisAppendCommandArgv(sk_sub.ctx, 2, argv, NULL);
	while (!done)
	{
		int			rc;

		if (sk_tls_write(sk_sub.ctx, &done) == REDIS_ERR)
		{
			sk_conn_close_subscription(sk_sub.ctx->errstr[0] ? sk_sub.ctx->errstr : "write failed");
			return;
		}
		if (done)
			break;
		rc = WaitLatchOrSocket(NULL, WL_SOCKET_WRITEABLE | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							   sk_sub.ctx->fd,
							   Max(TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline), 0),
							   PG_WAIT_EXTENSION);
		if (!(rc & WL_SOCKET_WRITEABLE))
		{
			sk_conn_close_subscription("no room to write within seckill.redis_timeout");
			return;
		}
	}
}

/*
 * Subscribe to this channel, from now on and after each reconnection; its
 * messages are kept until sk_pubsub_take.
 */
void
sk_pubsub_subscribe(const char *channel)
{
	sk_sub.channel = MemoryContextStrdup(TopMemoryContext, channel);
	if (sk_connected)
	{
		sk_pubsub_open();
		sk_conn_rebuild_wait_set();
	}
}

/*
 * The messages heard on the channel since the last call, palloc'd, in the
 * order they came: their count, and *messages.  *overflowed when more came
 * than were kept (SK_SUB_KEPT): those are lost.
 */
int
sk_pubsub_take(char ***messages, bool *overflowed)
{
	int			n = sk_sub.count;

	*messages = NULL;
	*overflowed = sk_sub.overflowed;
	if (n == 0)
		return 0;
	/* copied before any is freed: an error (out of memory) leaves them kept */
	*messages = palloc(sizeof(char *) * n);
	for (int i = 0; i < n; i++)
		(*messages)[i] = pstrdup(sk_sub.messages[i]);
	for (int i = 0; i < n; i++)
		pfree(sk_sub.messages[i]);
	sk_sub.count = 0;
	sk_sub.overflowed = false;
	return n;
}
