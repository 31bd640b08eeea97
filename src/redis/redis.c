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

#include "redis/cluster.h"
#include "redis/sentinel.h"
#include "shared/redis_nodes.h"

/*
 * The connections: one to the master, or in a Redis Cluster one to each
 * master (and one to the seed, seckill.redis_host), named by their index
 * here in cluster.c's slot map.  Connected means all of them are: one that
 * fails drops them all, and the worker replays after the next connection.
 */
typedef struct SkNode
{
	redisContext *ctx;
	char		host[256];
	int			port;
	int			pos;			/* in the wait set */
	bool		master;			/* its role checked, the scripts loaded */
	char		run_id[64];		/* as INFO gave it ("" when not allowed) */
} SkNode;

#define SK_MAX_NODES 32
static SkNode nodes[SK_MAX_NODES];
static int	nnodes = 0;

/*
 * The masters of a Redis Cluster as last connected, those reached and those
 * not: tried in turn when the seed (seckill.redis_host) cannot be reached,
 * so that the loss of that one node does not cut the worker off the
 * cluster; and counted in the cluster's identity with the run_id they had
 * when last reached.
 */
typedef struct SkKnown
{
	char		host[256];
	int			port;
	char		run_id[64];		/* "" when never reached */
	char		error[160];		/* why it was not reached; "" when it was */
} SkKnown;
static SkKnown known[SK_MAX_NODES];
static int	nknown = 0;

/*
 * The masters CLUSTER SLOTS named that could not be reached at this
 * connection: their slots are left unserved, the others sell on.  Watched
 * once a second (sk_redis_watch) for their return or their replacement.
 */
static SkKnown down[SK_MAX_NODES];
static int	ndown = 0;
static TimestampTz down_due = 0;
#define DOWN_POLL_MS 1000

/*
 * The index of the master being connected to while the worker connects to
 * a Redis Cluster, -1 otherwise: its failure (a master dying as the worker
 * reaches it) closes only it, and it is noted down.
 */
static int	handshaking = -1;

/* Each node's entry in seckill.redis_nodes (shared/redis_nodes.h); -1: none. */
static int	published[SK_MAX_NODES];
static bool connected = false;
static bool conn_cluster = false;

/*
 * The client's user's Lua scripts (sk_redis_init), loaded into every master
 * at connection and run by their index, and their SHA1s.
 */
static const char *const *script_source = NULL;
static int	nscripts = 0;
static char (*script_sha)[41] = NULL;

static char *own_key = NULL;	/* sk_redis_init's */
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

/*
 * The master's run_id at connection; in a Redis Cluster a digest of the
 * masters' (a new master in any of them changes it).
 */
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

/*
 * Work to do once the next pipeline is on its way to Redis, before its
 * replies are read (sk_pipeline_exec_meanwhile), and the time it took, which
 * the replies' deadline does not count.
 */
static void (*meanwhile) (void) = NULL;
static TimestampTz meanwhile_took = 0;

static void
run_meanwhile(void)
{
	void		(*work) (void) = meanwhile;
	TimestampTz begun = GetCurrentTimestamp();

	meanwhile = NULL;
	if (work)
		work();
	meanwhile_took = GetCurrentTimestamp() - begun;
}

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
	/* latch, postmaster death, the connections and the subscription */
	wait_set = CreateWaitEventSet(TopMemoryContext, 3 + nnodes);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	sub_pos = -1;
	for (int i = 0; i < nnodes; i++)
		nodes[i].pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, nodes[i].ctx->fd, NULL, NULL);
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
	/* a cluster broadcasts its messages to every node: any master serves */
	sub_conn = redisConnectNonBlock(nodes[0].host, nodes[0].port);
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
	if (connected)
	{
		subscription_open();
		rebuild_wait_set();
	}
}

/*
 * scripts[0..count-1] are the Lua sources loaded into every master, kept
 * (not copied), and run by their index (sk_pipeline_script).  own_key is a
 * key in the slot of the client's own state (seckill's epoch): a Redis
 * Cluster whose master of that slot cannot be reached is no connection.
 */
void
sk_redis_init(const char *const *scripts, int count, const char *own_key_in)
{
	script_source = scripts;
	nscripts = count;
	script_sha = MemoryContextAllocZero(TopMemoryContext, sizeof(*script_sha) * Max(count, 1));
	own_key = MemoryContextStrdup(TopMemoryContext, own_key_in);
	rebuild_wait_set();
}

bool
sk_redis_connected(void)
{
	return connected;
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

/*
 * Show the masters of this connection in seckill.redis_nodes: those
 * reached, those not (a Redis Cluster's), and which serves each slot.
 */
static void
publish_nodes(void)
{
	SeckillRedisNodes *pub = seckill_redis_nodes;
	int			n = 0;

	LWLockAcquire(pub->lock, LW_EXCLUSIVE);
	for (int i = 0; i < nnodes; i++)
	{
		published[i] = -1;
		if (!nodes[i].master || n == SK_REDIS_NODES)
			continue;
		published[i] = n;
		snprintf(pub->node[n].addr, sizeof(pub->node[n].addr), "%s:%d", nodes[i].host, nodes[i].port);
		pub->node[n].connected = true;
		pub->node[n].slots = 0;
		pub->node[n].error[0] = '\0';
		pg_atomic_write_u64(&pub->node[n].round_trips, 0);
		n++;
	}
	for (int i = 0; i < ndown && n < SK_REDIS_NODES; i++, n++)
	{
		snprintf(pub->node[n].addr, sizeof(pub->node[n].addr), "%s:%d", down[i].host, down[i].port);
		pub->node[n].connected = false;
		pub->node[n].slots = 0;
		strlcpy(pub->node[n].error, down[i].error, sizeof(pub->node[n].error));
		pg_atomic_write_u64(&pub->node[n].round_trips, 0);
	}
	pub->count = n;
	pub->cluster = conn_cluster;
	for (int s = 0; s < SK_REDIS_SLOTS; s++)
	{
		int			node = conn_cluster ? sk_cluster_node_of(s) : 0;

		pub->slot_node[s] = node >= 0 ? published[node] : -1;
		if (pub->slot_node[s] >= 0)
			pub->node[pub->slot_node[s]].slots++;
	}
	LWLockRelease(pub->lock);
}

/* Slot slot has moved to node (a MOVED answer): show it in seckill.redis_nodes. */
static void
publish_slot(int slot, int node)
{
	SeckillRedisNodes *pub = seckill_redis_nodes;
	int			from = pub->slot_node[slot];

	if (from == published[node])
		return;
	LWLockAcquire(pub->lock, LW_EXCLUSIVE);
	if (from >= 0)
		pub->node[from].slots--;
	pub->slot_node[slot] = published[node];
	if (published[node] >= 0)
		pub->node[published[node]].slots++;
	LWLockRelease(pub->lock);
}

/* The connections are gone: every master of seckill.redis_nodes unreached. */
static void
unpublish_nodes(void)
{
	SeckillRedisNodes *pub = seckill_redis_nodes;

	LWLockAcquire(pub->lock, LW_EXCLUSIVE);
	for (int i = 0; i < pub->count; i++)
		if (pub->node[i].connected)
		{
			pub->node[i].connected = false;
			strlcpy(pub->node[i].error, last_error, sizeof(pub->node[i].error));
		}
	LWLockRelease(pub->lock);
}

/* Close every connection, saying nothing. */
static void
drop_nodes(void)
{
	for (int i = 0; i < nnodes; i++)
		redisFree(nodes[i].ctx);
	if (connected)
		unpublish_nodes();
	nnodes = 0;
	ndown = 0;
	connected = false;
	in_flight = false;
	sk_cluster_map_reset();
	subscription_close(NULL);
	rebuild_wait_set();
}

void
sk_redis_disconnect(const char *why)
{
	if (nnodes == 0)
		return;
	if (why)
		set_error("%s", why);
	if (handshaking >= 0 && handshaking == nnodes - 1)
	{
		redisFree(nodes[--nnodes].ctx);
		handshaking = -1;
		in_flight = false;
		rebuild_wait_set();
		return;
	}
	ereport(LOG,
			(errmsg("seckill worker disconnected from Redis%s at %s:%d: %s",
					conn_cluster ? " Cluster" : "", conn_host, conn_port, last_error)));
	drop_nodes();
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
	meanwhile = NULL;
}

/* A pipeline is out, its replies not read yet: Redis may not be used. */
bool
sk_redis_in_flight(void)
{
	return in_flight;
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
	if (!connected)
	{
		next_attempt = 0;
		backoff_ms = 0;
	}
	else if (conn_cluster != seckill_redis_cluster ||
			 strcmp(conn_sentinels, seckill_redis_sentinels) != 0 ||
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

static SkNode *
node_at(int pos)
{
	for (int i = 0; i < nnodes; i++)
		if (nodes[i].pos == pos)
			return &nodes[i];
	return NULL;
}

static bool
fail(SkNode *node, const char *what)
{
	set_error("%s (%s:%d): %s", what, node->host, node->port,
			  node->ctx->errstr[0] ? node->ctx->errstr : "connection lost");
	/* another than the master being reached: all go */
	if (handshaking >= 0 && node != &nodes[handshaking])
		handshaking = -1;
	sk_redis_disconnect(NULL);
	return false;
}

/*
 * Wait until target's socket is ready for `events`, or with no target until
 * any connection had data, read into its buffer; false at the deadline, or
 * when a connection failed (then all are closed).  Data for the other
 * connections is read as it comes, so that all masters answer at once.  The
 * latch is reset when it wakes us: the caller re-checks the queue after its
 * round anyway.  Interrupts (SIGTERM) are served here.
 */
static bool
wait_socket(SkNode *target, uint32 events, TimestampTz deadline)
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
		if (ev.pos == sub_pos && sub_pos >= 0)
		{
			subscription_drain();
			if (sub_pos < 0 && target)
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
			if (redisBufferRead(node->ctx) == REDIS_ERR)
				return fail(node, "read from Redis failed");
			ready = target == NULL;
		}
	}
	if (target && events != WL_SOCKET_READABLE)
		ModifyWaitEvent(wait_set, target->pos, WL_SOCKET_READABLE, NULL);
	return ready;
}

static bool
flush_output(SkNode *node, TimestampTz deadline)
{
	int			done = 0;

	while (!done)
	{
		if (redisBufferWrite(node->ctx, &done) == REDIS_ERR)
			return fail(node, "write to Redis failed");
		if (!done && !wait_socket(node, WL_SOCKET_WRITEABLE, deadline))
		{
			if (nnodes > 0)
			{
				set_error("Redis at %s:%d did not accept the request within seckill.redis_timeout (%d ms)",
						  node->host, node->port, seckill_redis_timeout);
				sk_redis_disconnect(NULL);
			}
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

/*
 * One connection's part of a pipeline out: the commands whose replies it
 * owes, in order (-1: an ASKING, whose reply is dropped), and how many came.
 */
typedef struct NodeShare
{
	int		   *cmds;
	int			count;
	int			got;
} NodeShare;

/* Read every connection's replies into out[], or fail (and disconnect) at the deadline. */
static bool
read_replies(NodeShare *share, SkReply *out, TimestampTz deadline)
{
	for (;;)
	{
		SkNode	   *waiting = NULL;

		for (int n = 0; n < nnodes && waiting == NULL; n++)
			while (share[n].got < share[n].count)
			{
				void	   *raw = NULL;
				int			cmd;

				if (redisGetReplyFromReader(nodes[n].ctx, &raw) == REDIS_ERR)
					return fail(&nodes[n], "bad reply from Redis");
				if (raw == NULL)
				{
					waiting = &nodes[n];
					break;
				}
				cmd = share[n].cmds[share[n].got++];
				if (cmd >= 0)
					copy_reply(&out[cmd], raw);
				freeReplyObject(raw);
			}
		if (waiting == NULL)
			return true;
		if (!wait_socket(NULL, 0, deadline))
		{
			if (nnodes > 0)
			{
				set_error("Redis%s did not answer within seckill.redis_timeout (%d ms)",
						  nnodes > 1 ? psprintf(" at %s:%d", waiting->host, waiting->port) : "",
						  seckill_redis_timeout);
				sk_redis_disconnect(NULL);
			}
			return false;
		}
	}
}

/*
 * Replies that say this Redis no longer serves as a master (a failover made
 * it a replica, it is loading its data, or it is a replica whose master is
 * down): nothing was written; drop the connection, so that the next one goes
 * to the master (the sentinels', when set).
 */
static bool
serving_master(const SkReply *r, const SkNode *node)
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
			set_error("Redis at %s:%d answered %s: %s; seckill reconnects%s",
					  node->host, node->port, codes[c][0], codes[c][1],
					  sk_sentinel_enabled() ? " to the master the sentinels name" : "");
			sk_redis_disconnect(NULL);
			return false;
		}
	return true;
}

static void
append_command(StringInfo buf, const SkPipeline *p, int cmd)
{
	int			start = cmd == 0 ? 0 : p->ends[cmd - 1];

	appendBinaryStringInfo(buf, p->buf.data + start, p->ends[cmd] - start);
}

/*
 * Send commands cmds[0..n-1] of p (all of them, in order, when cmds is
 * NULL), command k to node to[k] after an ASKING when asking[k], to every
 * node at once, and read the replies into out[] by command by the
 * deadline.  A command whose slot no node serves is not sent: its reply is
 * a CLUSTERDOWN error.
 */
static bool
send_to(SkPipeline *p, int n, const int *cmds, const int *to, const bool *asking, SkReply *out,
		TimestampTz deadline)
{
	TimestampTz start = GetCurrentTimestamp();
	NodeShare  *share = palloc0(sizeof(NodeShare) * nnodes);
	bool		whole = cmds == NULL && asking == NULL;

	for (int k = 0; k < n; k++)
	{
		int			cmd = cmds ? cmds[k] : k;
		NodeShare  *s = to[k] >= 0 ? &share[to[k]] : NULL;

		if (s == NULL)
		{
			out[cmd].type = REDIS_REPLY_ERROR;
			out[cmd].str = psprintf("CLUSTERDOWN no master of the Redis Cluster that seckill reaches serves slot %d%s",
									p->slots[cmd], ndown > 0 ? psprintf(" (%s:%d: %s)", down[0].host, down[0].port,
																		down[0].error) : "");
			out[cmd].len = strlen(out[cmd].str);
			whole = false;
			continue;
		}
		if (s->cmds == NULL)
			s->cmds = palloc(sizeof(int) * 2 * n);
		if (asking && asking[k])
			s->cmds[s->count++] = -1;
		s->cmds[s->count++] = cmd;
		whole = whole && to[k] == to[0];
	}
	for (int i = 0; i < nnodes; i++)
	{
		StringInfoData buf;
		int			rc;

		if (share[i].count == 0)
			continue;
		if (whole)
			rc = redisAppendFormattedCommand(nodes[i].ctx, p->buf.data, p->buf.len);
		else
		{
			initStringInfo(&buf);
			for (int k = 0; k < share[i].count; k++)
				if (share[i].cmds[k] < 0)
					appendStringInfoString(&buf, "*1\r\n$6\r\nASKING\r\n");
				else
					append_command(&buf, p, share[i].cmds[k]);
			rc = redisAppendFormattedCommand(nodes[i].ctx, buf.data, buf.len);
			pfree(buf.data);
		}
		if (rc != REDIS_OK)
			return fail(&nodes[i], "could not queue a Redis command");
		in_flight = true;
	}
	for (int i = 0; i < nnodes; i++)
		if (share[i].count > 0 && !flush_output(&nodes[i], deadline))
			return false;
	pg_atomic_fetch_add_u64(&seckill_figures->counters.redis_round_trips, 1);
	for (int i = 0; connected && i < nnodes; i++)
		if (share[i].count > 0 && published[i] >= 0)
			pg_atomic_fetch_add_u64(&seckill_redis_nodes->node[published[i]].round_trips, 1);
	if (meanwhile)
	{
		run_meanwhile();
		deadline += meanwhile_took;
		start += meanwhile_took;
	}
	if (!read_replies(share, out, deadline))
		return false;
	in_flight = false;
	for (int k = 0; k < n; k++)
		if (to[k] >= 0 && !serving_master(&out[cmds ? cmds[k] : k], &nodes[to[k]]))
			return false;
	seckill_hist_record(&seckill_figures->redis_latency, GetCurrentTimestamp() - start);
	return true;
}

/* Send the whole pipeline to one node. */
static bool
send_and_read(SkNode *node, SkPipeline *p, SkReply *out)
{
	int		   *to = palloc(sizeof(int) * Max(p->count, 1));

	for (int i = 0; i < p->count; i++)
		to[i] = node - nodes;
	return send_to(p, p->count, NULL, to, NULL, out,
				   TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout));
}

void
sk_pipeline_init(SkPipeline *p)
{
	initStringInfo(&p->buf);
	p->count = 0;
	p->max = 16;
	p->ends = palloc(sizeof(int) * p->max);
	p->slots = palloc(sizeof(int) * p->max);
}

/* The command's slot is its first key's: argv[1] when it has one. */
static void
add_command(SkPipeline *p, int argc, const char **argv, const size_t *lens, int key)
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
		p->slots = repalloc(p->slots, sizeof(int) * p->max);
	}
	p->slots[p->count] = key < argc ?
		sk_cluster_key_slot(argv[key], lens ? lens[key] : strlen(argv[key])) : -1;
	p->ends[p->count++] = p->buf.len;
}

/*
 * Append one command, binary-safe, in RESP: a command on keys, the first of
 * them argv[1] (it is sent to the master of that key's slot).
 */
void
sk_pipeline_add(SkPipeline *p, int argc, const char **argv, const size_t *lens)
{
	add_command(p, argc, argv, lens, 1);
}

void
sk_pipeline_script(SkPipeline *p, int script,
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
	add_command(p, argc, argv, NULL, nkeys > 0 ? 3 : argc);
	pfree(argv);
}

static bool
load_scripts(SkNode *node)
{
	SkPipeline p;
	SkReply    *replies = palloc(sizeof(SkReply) * Max(nscripts, 1));

	sk_pipeline_init(&p);
	for (int i = 0; i < nscripts; i++)
	{
		const char *argv[] = {"SCRIPT", "LOAD", script_source[i]};

		sk_pipeline_add(&p, 3, argv, NULL);
	}
	if (!send_and_read(node, &p, replies))
		return false;
	for (int i = 0; i < nscripts; i++)
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

static int	node_index(const char *host, int port);

/* Is host:port a master that could not be reached at this connection? */
static bool
is_down(const char *host, int port)
{
	for (int i = 0; i < ndown; i++)
		if (down[i].port == port && strcmp(down[i].host, host) == 0)
			return true;
	return false;
}

/* Is host:port one of the masters connected? */
static bool
known_master(const char *host, int port)
{
	for (int i = 0; i < nnodes; i++)
		if (nodes[i].master && nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
			return true;
	return false;
}

/*
 * Where a command that did not run goes next: after NOSCRIPT to the same
 * node, its scripts loaded again; after MOVED to the slot's new master, the
 * map updated; after ASK to the importing node, once, behind an ASKING;
 * after TRYAGAIN (its keys are being moved) to the same node, a little
 * later.  A command sent behind an ASKING is sent behind one again.  -1 when
 * the reply stands (redirections but in a Redis Cluster).
 */
static int
redirect(const SkReply *r, int sent_to, bool was_asking,
		 bool *asking, bool *reload, bool *pause)
{
	char		host[256];
	int			slot,
				port,
				node;

	*asking = was_asking;
	if (is_noscript(r))
	{
		reload[sent_to] = true;
		return sent_to;
	}
	if (!conn_cluster)
		return -1;
	switch (sk_cluster_redirect(r, &slot, host, sizeof(host), &port))
	{
		case SK_REDIRECT_NONE:
			return -1;
		case SK_REDIRECT_TRYAGAIN:
			*pause = true;
			return sent_to;
		case SK_REDIRECT_MOVED:
		case SK_REDIRECT_ASK:
			break;
	}
	if (host[0] == '\0')
		strlcpy(host, nodes[sent_to].host, sizeof(host));
	if (r->str[0] == 'A' && is_down(host, port))
	{
		/* its journals are replayed before anything else goes there */
		sk_redis_disconnect(psprintf("slot %d is moving to %s:%d, a master seckill could not reach: "
									 "it reconnects to the cluster", slot, host, port));
		return -1;
	}
	if (r->str[0] == 'M' && !known_master(host, port))
	{
		/* the campaigns are rebuilt for the new set of masters (worker/epoch.c) */
		sk_redis_disconnect(psprintf("slot %d moved to %s:%d, a master seckill did not know (a failover, "
									 "or a node added): it reconnects to the cluster's new masters",
									 slot, host, port));
		return -1;
	}
	node = node_index(host, port);
	if (node < 0)
		return -1;
	*asking = r->str[0] == 'A';
	if (!*asking)
	{
		sk_cluster_map_set(slot, node);
		publish_slot(slot, node);
	}
	return node;
}

/*
 * Times one pipeline's commands are sent again (NOSCRIPT, MOVED, ASK,
 * TRYAGAIN) before their replies stand.  TRYAGAIN lasts while its slot's keys
 * move, and the whole round waits for it: a few short pauses, then the
 * caller hears busy (sk_reply_is_moving).
 */
#define RESEND_RETRIES 5
#define TRYAGAIN_PAUSE_MS 2

/*
 * Send the pipeline and read all its replies, all within one
 * seckill.redis_timeout.  NULL when Redis failed: the connections are then
 * closed and sk_redis_error() says why.  The commands Redis answered
 * without running them are sent again where the reply says (redirect()),
 * while time is left; the others ran and are not repeated.
 */
SkReply *
sk_pipeline_exec(SkPipeline *p)
{
	SkReply    *replies;
	int		   *to;
	int		   *cmds;
	bool	   *asking;
	bool	   *was_asking;
	bool	   *reload;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);

	if (!connected || p->count == 0)
		return NULL;
	replies = palloc0(sizeof(SkReply) * p->count);
	to = palloc(sizeof(int) * p->count);
	for (int i = 0; i < p->count; i++)
		to[i] = conn_cluster ? sk_cluster_node_of(p->slots[i]) : 0;
	meanwhile_took = 0;
	if (!send_to(p, p->count, NULL, to, NULL, replies, deadline))
		return NULL;
	deadline += meanwhile_took;

	cmds = palloc(sizeof(int) * p->count);
	asking = palloc(sizeof(bool) * p->count);
	was_asking = palloc0(sizeof(bool) * p->count);
	reload = palloc(sizeof(bool) * SK_MAX_NODES);
	for (int attempt = 0;; attempt++)
	{
		int			n = 0;
		int		   *sent_to = palloc(sizeof(int) * p->count);
		bool		pause = false;

		memcpy(sent_to, to, sizeof(int) * p->count);
		memset(reload, 0, sizeof(bool) * SK_MAX_NODES);
		for (int i = 0; i < p->count; i++)
		{
			int			next = sent_to[i] >= 0 ?
				redirect(&replies[i], sent_to[i], was_asking[i], &asking[n], reload, &pause) : -1;

			if (!connected)
				return NULL;
			if (next < 0)
				continue;
			cmds[n] = i;
			to[n++] = next;
		}
		if (n == 0 || attempt >= RESEND_RETRIES || GetCurrentTimestamp() >= deadline)
			break;
		for (int i = 0; i < nnodes; i++)
			if (reload[i])
			{
				ereport(LOG, (errmsg("seckill worker reloads its Lua scripts into Redis at %s:%d",
									 nodes[i].host, nodes[i].port)));
				if (!load_scripts(&nodes[i]))
					return NULL;
			}
		if (pause)
		{
			/* not cut short by the latch, which every new request sets */
			(void) WaitLatch(NULL, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, TRYAGAIN_PAUSE_MS, PG_WAIT_EXTENSION);
			CHECK_FOR_INTERRUPTS();
		}
		if (!send_to(p, n, cmds, to, asking, replies, deadline))
			return NULL;
		/* where each command went this time, for its next redirection */
		for (int i = 0; i < p->count; i++)
			sent_to[i] = -1;
		for (int k = 0; k < n; k++)
		{
			sent_to[cmds[k]] = to[k];
			was_asking[cmds[k]] = asking[k];
		}
		memcpy(to, sent_to, sizeof(int) * p->count);
	}
	return replies;
}

/*
 * sk_pipeline_exec, and work() run once the pipeline is on its way, while
 * Redis runs it: the worker commits a round's orders while Redis serves the
 * next.  work() runs exactly once, also when Redis fails (then before this
 * returns NULL); it must not use Redis.  Its time does not count against
 * seckill.redis_timeout.
 */
SkReply *
sk_pipeline_exec_meanwhile(SkPipeline *p, void (*work) (void))
{
	SkReply    *replies;

	Assert(meanwhile == NULL);
	meanwhile = work;
	replies = sk_pipeline_exec(p);
	if (meanwhile)
		run_meanwhile();
	return replies;
}

/* A script's Lua source, for EVAL on connections other than the worker's main one. */
const char *
sk_redis_script_source(int script)
{
	return script_source[script];
}

bool
sk_reply_is_error(const SkReply *r)
{
	return r->type == REDIS_REPLY_ERROR;
}

/*
 * A redirection that still stood after the command was sent again: its slot
 * is moving between masters of a Redis Cluster, and the command did not run.
 */
bool
sk_reply_is_moving(const SkReply *r)
{
	int			slot,
				port;
	char		host[256];

	return sk_cluster_redirect(r, &slot, host, sizeof(host), &port) != SK_REDIRECT_NONE;
}

/*
 * A Redis Cluster refused the command for want of a master: the one of its
 * slot could not be reached, or the cluster is down.  Nothing ran.
 */
bool
sk_reply_is_unreachable(const SkReply *r)
{
	return r->type == REDIS_REPLY_ERROR && r->str != NULL && strncmp(r->str, "CLUSTERDOWN", 11) == 0;
}

/* Is the master of the key's slot connected?  (Off a cluster, there is one.) */
bool
sk_redis_serves(const char *key)
{
	return !conn_cluster || sk_cluster_node_of(sk_cluster_key_slot(key, strlen(key))) >= 0;
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
		/* the messages reach application roles: the setting, not its value */
		set_error("could not open the file named by seckill.redis_password_file: %m");
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		FreeFile(f);
		set_error("the file named by seckill.redis_password_file must be readable by its owner only (chmod 600)");
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
authenticate(SkNode *node)
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
	ok = send_and_read(node, &p, &reply);
	memset(p.buf.data, 0, p.buf.len);
	if (!ok)
		return false;
	if (reply.type == REDIS_REPLY_ERROR)
	{
		/* Redis' own message names neither the password nor the user's secret. */
		set_error("Redis refused the credentials of seckill.redis_user: %s", reply.str);
		sk_redis_disconnect(NULL);
		return false;
	}
	return true;
}

static void
remember_settings(const char *host, int port)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (conn_host == NULL || strcmp(conn_host, host) != 0 || conn_port != port)
		nknown = 0;
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
check_role(SkNode *node)
{
	SkPipeline	p;
	SkReply		r[2];
	const char *role;

	sk_pipeline_init(&p);
	sk_pipeline_add(&p, 1, (const char *[]) {"ROLE"}, NULL);
	sk_pipeline_add(&p, 2, (const char *[]) {"INFO", "server"}, NULL);
	if (!send_and_read(node, &p, r))
		return false;
	role = r[0].type == REDIS_REPLY_ARRAY && r[0].elements > 0 ? r[0].element[0].str : NULL;
	if (role != NULL && strcmp(role, "master") != 0)
	{
		set_error("Redis at %s:%d is a %s, not a master: seckill writes to the master only%s",
				  node->host, node->port, strcmp(role, "slave") == 0 ? "replica" : role,
				  sk_sentinel_enabled() ? " (the sentinels named it; it may be changing role)" :
				  "; point seckill.redis_host at the master, or set seckill.redis_sentinels");
		sk_redis_disconnect(NULL);
		return false;
	}
	node->run_id[0] = '\0';
	if (r[1].type == REDIS_REPLY_STRING)
	{
		const char *at = strstr(r[1].str, "run_id:");

		if (at != NULL)
		{
			at += strlen("run_id:");
			strlcpy(node->run_id, at, Min(sizeof(node->run_id), strcspn(at, "\r\n") + 1));
		}
	}
	return true;
}

/*
 * In a CLUSTER NODES reply, a master that is up (link connected, not
 * failing) with slots the worker has no master for (its own back, or one
 * that took them over): true, with its address in addr.
 */
static bool
up_for_unserved(const char *text, char *addr, size_t addrlen)
{
	char	   *copy = pstrdup(text);
	char	   *save = NULL;

	for (char *line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
	{
		char	   *f[SK_CLUSTER_SLOTS / 2 + 9];
		char	   *fs = NULL;
		char	   *fsave = NULL;
		int			n = 0;
		bool		up = true;

		for (char *t = strtok_r(line, " \r", &fs); t != NULL && n < lengthof(f); t = strtok_r(NULL, " \r", &fs))
			f[n++] = t;
		/* id addr flags master ping pong epoch link slot...: a master with slots */
		if (n < 9 || strcmp(f[7], "connected") != 0)
			continue;
		for (char *flag = strtok_r(f[2], ",", &fsave); flag != NULL; flag = strtok_r(NULL, ",", &fsave))
			if (strcmp(flag, "fail") == 0 || strcmp(flag, "fail?") == 0 || strcmp(flag, "slave") == 0 ||
				strcmp(flag, "handshake") == 0 || strcmp(flag, "noaddr") == 0)
				up = false;
		if (!up)
			continue;
		for (int i = 8; i < n; i++)
		{
			char	   *dash = strchr(f[i], '-');
			long		first = strtol(f[i], NULL, 10);
			long		last = dash ? strtol(dash + 1, NULL, 10) : first;

			if (f[i][0] == '[')
				continue;		/* a slot being moved */
			for (long slot = Max(first, 0); slot <= last && slot < SK_CLUSTER_SLOTS; slot++)
				if (sk_cluster_node_of((int) slot) < 0)
				{
					strlcpy(addr, f[1], addrlen);
					return true;
				}
		}
	}
	return false;
}

/*
 * Once a second while a master of the cluster is not reached: has it come
 * back, or has another taken its slots?  Then reconnect, so that its
 * campaigns' journals are replayed (and, for a new master, the campaigns
 * rebuilt) before they sell.  Needs CLUSTER NODES; refused, nothing is done.
 */
static void
watch_down_masters(void)
{
	SkPipeline	p;
	SkReply		r;
	char		addr[300];
	int			m;

	if (!connected || !conn_cluster || ndown == 0 || GetCurrentTimestamp() < down_due)
		return;
	down_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), DOWN_POLL_MS);
	for (m = 0; m < nnodes && !nodes[m].master; m++)
		;
	sk_pipeline_init(&p);
	add_command(&p, 2, (const char *[]) {"CLUSTER", "NODES"}, NULL, 2);
	if (m == nnodes || !send_and_read(&nodes[m], &p, &r) || r.type != REDIS_REPLY_STRING)
		return;
	if (up_for_unserved(r.str, addr, sizeof(addr)))
		sk_redis_disconnect(psprintf("%s serves slots of the Redis Cluster whose master seckill could not "
									 "reach: it reconnects", addr));
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

	watch_down_masters();
	if (!connected || !sk_sentinel_enabled() || GetCurrentTimestamp() < sentinels_due)
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
 * A connection could not be opened: close them all, and say so when the
 * worker was connected (a master met through a redirection).
 */
static void
connect_failed(void)
{
	if (connected)
		sk_redis_disconnect(NULL);
	else
		drop_nodes();
}

/*
 * Open a connection to host:port and authenticate on it, within
 * seckill.redis_timeout: its index, or -1 with the error set and every
 * connection closed; when alone, only this one (a master that cannot be
 * reached while the others sell on).  An error of AUTH closes them all.
 */
static int
connect_node(const char *host, int port, bool alone)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);
	redisContext *ctx;
	SkNode	   *node;
	int			soerr = 0;
	socklen_t	soerrlen = sizeof(soerr);

	if (nnodes == SK_MAX_NODES)
	{
		set_error("the Redis Cluster has more than %d masters, more than seckill connects to",
				  SK_MAX_NODES);
		if (!alone)
			connect_failed();
		return -1;
	}
	ctx = redisConnectNonBlock(host, port);
	if (ctx == NULL || ctx->err)
	{
		set_error("could not connect to Redis at %s:%d: %s", host, port,
				  ctx ? ctx->errstr : "out of memory");
		if (ctx)
			redisFree(ctx);
		if (!alone)
			connect_failed();
		return -1;
	}
	published[nnodes] = -1;
	node = &nodes[nnodes++];
	node->ctx = ctx;
	strlcpy(node->host, host, sizeof(node->host));
	node->port = port;
	node->master = false;
	node->run_id[0] = '\0';
	rebuild_wait_set();
	/* an error (a cancel) in the wait must not leave this half-open node */
	in_flight = true;
	if (!wait_socket(node, WL_SOCKET_WRITEABLE, deadline) ||
		getsockopt(ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &soerrlen) != 0 || soerr != 0)
	{
		if (nnodes > 0)
		{
			set_error("could not connect to Redis at %s:%d: %s", host, port,
					  soerr ? strerror(soerr) : "timed out");
			if (!alone)
				connect_failed();
			else
			{
				redisFree(nodes[--nnodes].ctx);
				rebuild_wait_set();
			}
		}
		in_flight = false;
		return -1;
	}
	in_flight = false;
	if (!authenticate(node))
		return -1;
	return node - nodes;
}

/* A node connected, and checked to be a master with the scripts loaded. */
static bool
make_master(SkNode *node)
{
	if (!node->master && (!check_role(node) || !load_scripts(node)))
		return false;
	node->master = true;
	return true;
}

/*
 * The master at host:port (a slot's, or a redirection's): its index,
 * connected first when it is new; -1 when it cannot be reached (then every
 * connection is closed).
 */
static int
node_index(const char *host, int port)
{
	int			i;

	for (i = 0; i < nnodes; i++)
		if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
			break;
	if (i == nnodes && (i = connect_node(host, port, false)) < 0)
		return -1;
	return make_master(&nodes[i]) ? i : -1;
}

/*
 * node_index() for the masters CLUSTER SLOTS names: one that cannot be
 * reached is noted down (SK_NODE_DOWN) and the others are connected all the
 * same; SK_NODE_GONE when every connection was lost meanwhile.
 */
static int
reach_master(const char *host, int port)
{
	int			i;

	for (i = 0; i < ndown; i++)
		if (down[i].port == port && strcmp(down[i].host, host) == 0)
			return SK_NODE_DOWN;
	for (i = 0; i < nnodes; i++)
		if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
			break;
	if (i < nnodes)
		return make_master(&nodes[i]) ? i : SK_NODE_GONE;
	/* a reply naming more masters than there is room for is refused, not trusted */
	if (nnodes + ndown >= SK_MAX_NODES)
	{
		set_error("the Redis Cluster names more than %d masters, more than seckill connects to",
				  SK_MAX_NODES);
		connect_failed();
		return SK_NODE_GONE;
	}
	handshaking = nnodes;
	i = connect_node(host, port, true);
	if (i >= 0 && !make_master(&nodes[i]))
		i = -1;
	handshaking = -1;
	if (i >= 0)
		return i;
	if (nnodes == 0)
		return SK_NODE_GONE;
	strlcpy(down[ndown].host, host, sizeof(down[ndown].host));
	down[ndown].port = port;
	strlcpy(down[ndown].error, last_error, sizeof(down[ndown].error));
	ndown++;
	return SK_NODE_DOWN;
}

static const SkKnown *
known_at(const char *host, int port)
{
	for (int i = 0; i < nknown; i++)
		if (known[i].port == port && strcmp(known[i].host, host) == 0)
			return &known[i];
	return NULL;
}

static int
compare_strings(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

/*
 * The cluster's identity: a digest of its masters' run_ids, a master not
 * reached counted with the run_id it had when last reached (or its address),
 * so that its absence alone does not make the cluster a new one.
 */
static void
cluster_run_id(void)
{
	const char *ids[2 * SK_MAX_NODES];
	int			n = 0;
	StringInfoData all;

	for (int i = 0; i < nnodes; i++)
		if (nodes[i].master && nodes[i].run_id[0] != '\0')
			ids[n++] = nodes[i].run_id;
	for (int i = 0; i < ndown; i++)
	{
		const SkKnown *k = known_at(down[i].host, down[i].port);

		ids[n++] = k && k->run_id[0] ? pstrdup(k->run_id) : psprintf("%s:%d", down[i].host, down[i].port);
	}
	run_id[0] = '\0';
	if (n == 0)
		return;
	qsort(ids, n, sizeof(char *), compare_strings);
	initStringInfo(&all);
	for (int i = 0; i < n; i++)
		appendStringInfoString(&all, ids[i]);
	snprintf(run_id, sizeof(run_id), "cluster-%016llx",
			 (unsigned long long) hash_bytes_extended((const unsigned char *) all.data, all.len, 0));
}

/* Keep the masters of this connection, reached or not, for the next. */
static void
remember_masters(void)
{
	SkKnown		now[SK_MAX_NODES];
	int			n = 0;

	for (int i = 0; i < nnodes; i++)
		if (nodes[i].master)
		{
			strlcpy(now[n].host, nodes[i].host, sizeof(now[n].host));
			now[n].port = nodes[i].port;
			strlcpy(now[n].run_id, nodes[i].run_id, sizeof(now[n].run_id));
			now[n++].error[0] = '\0';
		}
	for (int i = 0; i < ndown && n < SK_MAX_NODES; i++)
	{
		const SkKnown *k = known_at(down[i].host, down[i].port);

		now[n] = down[i];
		strlcpy(now[n++].run_id, k ? k->run_id : "", sizeof(now[0].run_id));
	}
	memcpy(known, now, sizeof(SkKnown) * n);
	nknown = n;
}

/* One master (seckill.redis_host's, or the sentinels'). */
static bool
connect_master(void)
{
	if (connect_node(conn_host, conn_port, false) < 0 || !make_master(&nodes[0]))
		return false;
	strlcpy(run_id, nodes[0].run_id, sizeof(run_id));
	return true;
}

/*
 * A Redis Cluster: ask seckill.redis_host (any node, a replica too) which
 * master serves each slot, and connect to each.
 */
static bool
connect_cluster(void)
{
	SkPipeline	p;
	SkReply		slots;
	char		why[256];
	char		seed_error[sizeof(last_error)];
	int			i;

	/* the seed, else the masters it knew, in turn, until one tells the slots */
	ndown = 0;
	for (i = -1; i < nknown; i++)
	{
		if (i >= 0 && known[i].port == conn_port && strcmp(known[i].host, conn_host) == 0)
			continue;
		if (connect_node(i < 0 ? conn_host : known[i].host, i < 0 ? conn_port : known[i].port, false) == 0)
		{
			sk_pipeline_init(&p);
			add_command(&p, 2, (const char *[]) {"CLUSTER", "SLOTS"}, NULL, 2);
			if (send_and_read(&nodes[0], &p, &slots))
				break;
		}
		if (i < 0)
			strlcpy(seed_error, last_error, sizeof(seed_error));
	}
	if (i == nknown)
	{
		set_error("%s%s", seed_error, nknown > 0 ? ", nor any other master it knew" : "");
		return false;
	}
	if (slots.type == REDIS_REPLY_ERROR)
	{
		set_error("Redis at %s:%d answered CLUSTER SLOTS with \"%s\": it is no Redis Cluster node; "
				  "set seckill.redis_cluster = off, or point seckill.redis_host at a node of the cluster",
				  conn_host, conn_port, slots.str);
		return false;
	}
	if (!sk_cluster_map_load(&slots, nodes[0].host, reach_master, why, sizeof(why)))
	{
		if (nnodes > 0)
			set_error("%s", why);
		return false;
	}
	if (slots.elements == 0)
	{
		set_error("Redis at %s:%d serves no slot (CLUSTER SLOTS is empty): the cluster is not created yet",
				  nodes[0].host, nodes[0].port);
		return false;
	}
	for (i = 0; i < nnodes && !nodes[i].master; i++)
		;
	if (i == nnodes)
	{
		set_error("no master of the Redis Cluster could be reached: %s", ndown > 0 ? down[0].error : last_error);
		return false;
	}
	/* the epoch, the master's identity and the order ids: without them nothing sells */
	if (!sk_redis_serves(own_key))
	{
		set_error("the master of seckill's own keys (%s) cannot be reached: %s",
				  own_key, ndown > 0 ? down[0].error : last_error);
		return false;
	}
	cluster_run_id();
	remember_masters();
	return true;
}

/*
 * Connect (to the master the sentinels name, when they are set; to every
 * master of a Redis Cluster), authenticate, check the role and load the
 * scripts, each connection within seckill.redis_timeout.  While backing off
 * after a failure, returns false at once with the last error, so that
 * callers fail fast instead of queueing.
 */
static bool
connect_now(void)
{
	if (connected)
		return true;
	if (GetCurrentTimestamp() < next_attempt)
		return false;

	if (seckill_redis_cluster && sk_sentinel_enabled())
	{
		set_error("seckill.redis_cluster is on and seckill.redis_sentinels is set: a Redis Cluster names its masters itself; "
				  "empty seckill.redis_sentinels");
		attempt_failed();
		return false;
	}
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
	conn_cluster = seckill_redis_cluster;
	if (!(conn_cluster ? connect_cluster() : connect_master()))
	{
		drop_nodes();
		attempt_failed();
		return false;
	}
	/* not reset until the connection has proved usable (sk_redis_proven) */
	next_attempt = 0;
	generation++;
	connected = true;
	publish_nodes();
	subscription_open();
	rebuild_wait_set();
	if (conn_cluster)
	{
		ereport(LOG, (errmsg("seckill worker connected to the Redis Cluster of %s:%d%s: %d masters",
							 conn_host, conn_port,
							 nodes[0].port == conn_port && strcmp(nodes[0].host, conn_host) == 0 ? "" :
							 psprintf(" through %s:%d, the seed being unreachable", nodes[0].host, nodes[0].port),
							 nnodes - (nodes[0].master ? 0 : 1))));
		for (int i = 0; i < ndown; i++)
			ereport(LOG, (errmsg("seckill worker cannot reach the master %s:%d of the Redis Cluster: %s",
								 down[i].host, down[i].port, down[i].error),
						  errhint("The campaigns in its slots fail with 08006 until it is back or replaced; the others sell on.")));
		down_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), DOWN_POLL_MS);
	}
	else
		ereport(LOG, (errmsg("seckill worker connected to Redis at %s:%d%s",
							 conn_host, conn_port, sk_sentinel_enabled() ? ", the master the sentinels name" : "")));
	return true;
}

bool
sk_redis_connect(void)
{
	bool		ok;

	if (connected)
		return true;
	PG_TRY();
	{
		ok = connect_now();
	}
	PG_CATCH();
	{
		/* an ERROR (a cancel, a statement timeout) broke the handshake off */
		connecting = false;
		handshaking = -1;
		drop_nodes();
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
	SkNode	   *node;

	if (WaitEventSetWait(wait_set, timeout_ms, &ev, 1, PG_WAIT_EXTENSION) != 1)
		return;
	if (ev.events & WL_LATCH_SET)
		ResetLatch(MyLatch);
	else if (ev.pos == sub_pos && sub_pos >= 0)
		subscription_drain();
	else if ((ev.events & WL_SOCKET_READABLE) && (node = node_at(ev.pos)) != NULL)
	{
		if (redisBufferRead(node->ctx) == REDIS_ERR)
			fail(node, "Redis closed the connection");
	}
}
