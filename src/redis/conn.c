/*-------------------------------------------------------------------------
 *
 * conn.c
 *		The connections of the worker's Redis client, and what every other
 *		file of redis/ does with them: the last error, the wait set and the
 *		waits on the sockets, a connection failing, disconnecting, dropping
 *		them all; the subscription's connection heard and read with them.
 *
 * It calls nothing of redis/ above it.  Dropping the connections marks
 * their masters unreached in seckill.redis_nodes and closes the
 * subscription here; the backoff after a disconnection is redis.c's, which
 * learns of it from sk_conn_lost_at.  The subscription's messages are kept
 * for the worker to take (pubsub.c), never acted upon within a wait.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "redis/cluster.h"
#include "shared/redis_nodes.h"

/*
 * The index of the master being connected to while the worker connects to
 * a Redis Cluster, -1 otherwise: its failure (a master dying as the worker
 * reaches it) closes only it, and it is noted down.
 */
int			sk_handshaking = -1;

/* The connections (redis_int.h); connected when all of them are. */
SkNode		sk_nodes[SK_MAX_NODES];
int			sk_nnodes = 0;
bool		sk_connected = false;
bool		sk_conn_cluster = false;

char	   *sk_own_key = NULL;	/* sk_redis_init's */
char		sk_last_error[256] = "not connected yet";

/*
 * The address the connection was made to (the sentinels' master, when they
 * are set), as redis.c remembered it with the other settings.
 */
char	   *sk_conn_host = NULL;
int			sk_conn_port = 0;

/*
 * The master's run_id at connection; in a Redis Cluster a digest of the
 * masters' (a new master in any of them changes it).
 */
char		sk_run_id[64] = "";

/* A pipeline is out and its replies not all read: the connection is mid-request. */
bool		sk_in_flight = false;

/*
 * The masters CLUSTER SLOTS named that could not be reached at this
 * connection: their slots are left unserved, the others sell on.  Watched
 * once a second (sk_redis_watch) for their return or their replacement
 * (topology.c).
 */
SkKnown		sk_down[SK_MAX_NODES];
int			sk_ndown = 0;

/* Each node's entry in seckill.redis_nodes (shared/redis_nodes.h); -1: none. */
int			sk_published[SK_MAX_NODES];

/* The subscription (redis_int.h): pubsub.c opens it, conn.c hears it. */
SkSubscription sk_sub = {.pos = -1};

/*
 * When sk_conn_disconnect last dropped the connections, 0 once redis.c has
 * looked: it backs off from then (redis.c's connect_now).
 */
TimestampTz sk_conn_lost_at = 0;

/* latch, postmaster death, and the sockets when connected */
static WaitEventSet *wait_set = NULL;

void
sk_conn_rebuild_wait_set(void)
{
	if (wait_set)
		FreeWaitEventSet(wait_set);
	/* latch, postmaster death, the connections and the subscription */
	wait_set = CreateWaitEventSet(TopMemoryContext, 3 + sk_nnodes);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int i = 0; i < sk_nnodes; i++)
		sk_nodes[i].pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, sk_nodes[i].ctx->fd, NULL, NULL);
	sk_sub.pos = -1;
	if (sk_sub.ctx)
		sk_sub.pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, sk_sub.ctx->fd, NULL, NULL);
}

void
sk_conn_set_error(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(sk_last_error, sizeof(sk_last_error), fmt, ap);
	va_end(ap);
}

/*
 * Close the subscription, logging why when given; the caller rebuilds the
 * wait set.  The messages kept stay for the worker to take.
 */
void
sk_conn_close_subscription(const char *why)
{
	if (sk_sub.ctx == NULL)
		return;
	if (why)
		ereport(LOG,
				(errmsg("seckill worker dropped its subscription to Redis channel \"%s\": %s",
						sk_sub.channel, why)));
	sk_tls_free(sk_sub.ctx);
	sk_sub.ctx = NULL;
}

/*
 * Read what the subscription has and keep its messages for the worker
 * (sk_pubsub_take); an error closes it, and the wait set is rebuilt.
 */
static void
drain_subscription(void)
{
	void	   *raw = NULL;

	if (sk_tls_read(sk_sub.ctx) == REDIS_ERR)
	{
		sk_conn_close_subscription(sk_sub.ctx->errstr[0] ? sk_sub.ctx->errstr : "read failed");
		sk_conn_rebuild_wait_set();
		return;
	}
	while (sk_sub.ctx != NULL && redisGetReplyFromReader(sk_sub.ctx, &raw) == REDIS_OK && raw != NULL)
	{
		redisReply *r = raw;

		if (r->type == REDIS_REPLY_ERROR)
		{
			/* AUTH or SUBSCRIBE refused (an ACL without the channel) */
			char	   *why = pstrdup(r->str);

			freeReplyObject(raw);
			sk_conn_close_subscription(why);
			sk_conn_rebuild_wait_set();
			return;
		}
		if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
			r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
			r->element[2]->type == REDIS_REPLY_STRING)
		{
			const char *message = r->element[2]->str;
			bool		kept = false;

			/* the same message again (a lock released twice) is kept once */
			for (int i = 0; i < sk_sub.count && !kept; i++)
				kept = strcmp(sk_sub.messages[i], message) == 0;
			if (!kept && sk_sub.count < SK_SUB_KEPT)
				sk_sub.messages[sk_sub.count++] = MemoryContextStrdup(TopMemoryContext, message);
			else if (!kept)
				sk_sub.overflowed = true;
		}
		freeReplyObject(raw);	/* messages copied; the confirmations of AUTH and SUBSCRIBE */
	}
}

/*
 * The connections are gone: every master of seckill.redis_nodes unreached,
 * the last error saying why.
 */
static void
unpublish(void)
{
	SeckillRedisNodes *pub = seckill_redis_nodes;

	LWLockAcquire(pub->lock, LW_EXCLUSIVE);
	for (int i = 0; i < pub->count; i++)
		if (pub->node[i].connected)
		{
			pub->node[i].connected = false;
			strlcpy(pub->node[i].error, sk_last_error, sizeof(pub->node[i].error));
		}
	LWLockRelease(pub->lock);
}

/* Close every connection and the subscription, saying nothing. */
void
sk_conn_drop(void)
{
	for (int i = 0; i < sk_nnodes; i++)
		sk_tls_free(sk_nodes[i].ctx);
	if (sk_connected)
		unpublish();
	sk_nnodes = 0;
	sk_ndown = 0;
	sk_connected = false;
	sk_in_flight = false;
	sk_cluster_map_reset();
	sk_conn_close_subscription(NULL);
	sk_conn_rebuild_wait_set();
}

/*
 * Close the connections, why (when given) the error, and say so, marking
 * the time for redis.c's backoff (sk_conn_lost_at); the one to a master of
 * a Redis Cluster being reached alone goes alone, quietly.
 */
void
sk_conn_disconnect(const char *why)
{
	if (sk_nnodes == 0)
		return;
	if (why)
		sk_conn_set_error("%s", why);
	if (sk_handshaking >= 0 && sk_handshaking == sk_nnodes - 1)
	{
		sk_tls_free(sk_nodes[--sk_nnodes].ctx);
		sk_handshaking = -1;
		sk_in_flight = false;
		sk_conn_rebuild_wait_set();
		return;
	}
	ereport(LOG,
			(errmsg("seckill worker disconnected from Redis%s at %s:%d: %s",
					sk_conn_cluster ? " Cluster" : "", sk_conn_host, sk_conn_port, sk_last_error)));
	sk_conn_drop();
	sk_conn_lost_at = GetCurrentTimestamp();
}

static SkNode *
node_at(int pos)
{
	for (int i = 0; i < sk_nnodes; i++)
		if (sk_nodes[i].pos == pos)
			return &sk_nodes[i];
	return NULL;
}

bool
sk_conn_fail(SkNode *node, const char *what)
{
	sk_conn_set_error("%s (%s:%d): %s", what, node->host, node->port,
					  node->ctx->errstr[0] ? node->ctx->errstr : "connection lost");
	/* another than the master being reached: all go */
	if (sk_handshaking >= 0 && node != &sk_nodes[sk_handshaking])
		sk_handshaking = -1;
	sk_conn_disconnect(NULL);
	return false;
}

/*
 * Wait until target's socket is ready for `events`, or with no target until
 * any connection had data, read into its buffer; false at the deadline, or
 * when a connection failed (then all are closed).  Data for the other
 * connections is read as it comes, so that all masters answer at once, and
 * the subscription's messages are kept for the worker to take.  The
 * latch is reset when it wakes us: the caller re-checks the queue after its
 * round anyway.  Interrupts (SIGTERM) are served here.
 */
bool
sk_conn_wait_socket(SkNode *target, uint32 events, TimestampTz deadline)
{
	WaitEvent	ev;
	bool		ready = false;

	if (target)
		ModifyWaitEvent(wait_set, target->pos, events, NULL);
	while (!ready)
	{
		long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		SkNode	   *node;

		if (ms <= 0)
			break;
		if (WaitEventSetWait(wait_set, ms, &ev, 1, PG_WAIT_EXTENSION) == 0)
			continue;
		if (ev.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		if (ev.pos == sk_sub.pos)
		{
			drain_subscription();
			/* closed, the wait set was rebuilt: target waits for events again */
			if (ev.pos != sk_sub.pos && target)
				ModifyWaitEvent(wait_set, target->pos, events, NULL);
			continue;
		}
		node = node_at(ev.pos);
		if (node == NULL)
			continue;
		if (node == target && (ev.events & events))
			ready = true;
		else if (ev.events & WL_SOCKET_READABLE)
		{
			if (sk_tls_read(node->ctx) == REDIS_ERR)
				return sk_conn_fail(node, "read from Redis failed");
			ready = target == NULL;
		}
	}
	if (target && events != WL_SOCKET_READABLE)
		ModifyWaitEvent(wait_set, target->pos, WL_SOCKET_READABLE, NULL);
	return ready;
}

/* Is the master of the key's slot connected?  (Off a cluster, there is one.) */
bool
sk_conn_serves(const char *key)
{
	return !sk_conn_cluster || sk_cluster_node_of(sk_cluster_key_slot(key, strlen(key))) >= 0;
}

/*
 * The first line of the file a setting names, a password; NULL (and the
 * error set) when unusable.  Read with read(2) into a buffer cleared after,
 * not through stdio, whose buffer is freed uncleared.
 */
char *
sk_conn_read_secret(const char *path, const char *setting)
{
	int			fd;
	struct stat st;
	char		line[1024];
	ssize_t		n;
	char	   *secret;

	fd = OpenTransientFile(path, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		/* the messages reach application roles: the setting, not its value */
		sk_conn_set_error("could not open the file named by %s: %m", setting);
		return NULL;
	}
	if (fstat(fd, &st) != 0 || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		CloseTransientFile(fd);
		sk_conn_set_error("the file named by %s must be readable by its owner only (chmod 600)", setting);
		return NULL;
	}
	n = read(fd, line, sizeof(line) - 1);
	CloseTransientFile(fd);
	line[Max(n, 0)] = '\0';
	line[strcspn(line, "\r\n")] = '\0';
	secret = pstrdup(line);
	explicit_bzero(line, sizeof(line));
	return secret;
}

/* The password of seckill.redis_password_file (sk_conn_read_secret). */
char *
sk_conn_read_password(void)
{
	return sk_conn_read_secret(seckill_redis_password_file, "seckill.redis_password_file");
}

/*
 * Sleep until the latch is set, the timeout passes or the subscription
 * brings a message (kept: the worker takes it on return).  An idle
 * connection that turns readable has been closed by Redis (it sends
 * nothing unasked): notice it now rather than at the next purchase.
 */
void
sk_conn_wait_idle(long timeout_ms)
{
	WaitEvent	ev;
	SkNode	   *node;

	if (WaitEventSetWait(wait_set, timeout_ms, &ev, 1, PG_WAIT_EXTENSION) != 1)
		return;
	if (ev.events & WL_LATCH_SET)
		ResetLatch(MyLatch);
	else if (ev.pos == sk_sub.pos)
		drain_subscription();
	else if ((ev.events & WL_SOCKET_READABLE) && (node = node_at(ev.pos)) != NULL)
	{
		if (sk_tls_read(node->ctx) == REDIS_ERR)
			sk_conn_fail(node, "Redis closed the connection");
	}
}
