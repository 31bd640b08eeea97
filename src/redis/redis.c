/*-------------------------------------------------------------------------
 *
 * redis.c
 *		Non-blocking hiredis connection with deadlines, run from the
 *		worker's wait set: connecting (to the master, or to every master of
 *		a Redis Cluster), authenticating, backing off, disconnecting.
 *
 * Pipelines are pipeline.c's, the masters of a cluster topology.c's, the
 * watch for a failover failover.c's, the subscription pubsub.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include <sys/socket.h>
#include <sys/stat.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/fd.h"
#include "utils/memutils.h"

#include "redis/cluster.h"
#include "redis/sentinel.h"

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
 * The settings the connection was made with, to notice changes on reload,
 * and the address it was made to (the sentinels' master, when they are set).
 */
char	   *sk_conn_host = NULL;
int			sk_conn_port = 0;
static char *conn_user = NULL;
static char *conn_password_file = NULL;
static char *conn_sentinels = NULL;
static char *conn_master_name = NULL;

/*
 * The master's run_id at connection; in a Redis Cluster a digest of the
 * masters' (a new master in any of them changes it).
 */
char		sk_run_id[64] = "";

/* A pipeline is out and its replies not all read: the connection is mid-request. */
bool		sk_in_flight = false;

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

static void back_off(void);

void
sk_redis_rebuild_wait_set(void)
{
	if (wait_set)
		FreeWaitEventSet(wait_set);
	/* latch, postmaster death, the connections and the subscription */
	wait_set = CreateWaitEventSet(TopMemoryContext, 3 + sk_nnodes);
	AddWaitEventToSet(wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int i = 0; i < sk_nnodes; i++)
		sk_nodes[i].pos = AddWaitEventToSet(wait_set, WL_SOCKET_READABLE, sk_nodes[i].ctx->fd, NULL, NULL);
	sk_pubsub_add_event(wait_set);
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
	sk_pipeline_use_scripts(scripts, count);
	sk_own_key = MemoryContextStrdup(TopMemoryContext, own_key_in);
	sk_redis_rebuild_wait_set();
}

bool
sk_redis_connected(void)
{
	return sk_connected;
}

uint64
sk_redis_generation(void)
{
	return generation;
}

const char *
sk_redis_error(void)
{
	return sk_last_error;
}

void
sk_redis_set_error(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(sk_last_error, sizeof(sk_last_error), fmt, ap);
	va_end(ap);
}

/*
 * Redis answered a command with an error the connection survives (NOPERM,
 * OOM...): the caller's request failed, and this is why.
 */
void
sk_redis_refused(const char *why)
{
	sk_redis_set_error("%s", why);
}

/* Close every connection, saying nothing. */
static void
drop_nodes(void)
{
	for (int i = 0; i < sk_nnodes; i++)
		redisFree(sk_nodes[i].ctx);
	if (sk_connected)
		sk_topology_unpublish();
	sk_nnodes = 0;
	sk_ndown = 0;
	sk_connected = false;
	sk_in_flight = false;
	sk_cluster_map_reset();
	sk_pubsub_close(NULL);
	sk_redis_rebuild_wait_set();
}

void
sk_redis_disconnect(const char *why)
{
	if (sk_nnodes == 0)
		return;
	if (why)
		sk_redis_set_error("%s", why);
	if (sk_handshaking >= 0 && sk_handshaking == sk_nnodes - 1)
	{
		redisFree(sk_nodes[--sk_nnodes].ctx);
		sk_handshaking = -1;
		sk_in_flight = false;
		sk_redis_rebuild_wait_set();
		return;
	}
	ereport(LOG,
			(errmsg("seckill worker disconnected from Redis%s at %s:%d: %s",
					sk_conn_cluster ? " Cluster" : "", sk_conn_host, sk_conn_port, sk_last_error)));
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
	if (sk_in_flight)
		sk_redis_disconnect("a round was broken off while Redis was answering");
	sk_in_flight = false;
	sk_pipeline_forget_meanwhile();
}

/* A pipeline is out, its replies not read yet: Redis may not be used. */
bool
sk_redis_in_flight(void)
{
	return sk_in_flight;
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
	if (!sk_connected)
	{
		next_attempt = 0;
		backoff_ms = 0;
	}
	else if (sk_conn_cluster != seckill_redis_cluster ||
			 strcmp(conn_sentinels, seckill_redis_sentinels) != 0 ||
			 strcmp(conn_master_name, seckill_redis_master_name) != 0 ||
			 (!sk_sentinel_enabled() &&
			  (strcmp(sk_conn_host, seckill_redis_host) != 0 || sk_conn_port != seckill_redis_port)) ||
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
	for (int i = 0; i < sk_nnodes; i++)
		if (sk_nodes[i].pos == pos)
			return &sk_nodes[i];
	return NULL;
}

bool
sk_redis_fail(SkNode *node, const char *what)
{
	sk_redis_set_error("%s (%s:%d): %s", what, node->host, node->port,
					   node->ctx->errstr[0] ? node->ctx->errstr : "connection lost");
	/* another than the master being reached: all go */
	if (sk_handshaking >= 0 && node != &sk_nodes[sk_handshaking])
		sk_handshaking = -1;
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
bool
sk_redis_wait_socket(SkNode *target, uint32 events, TimestampTz deadline)
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
		if (sk_pubsub_at(ev.pos))
		{
			sk_pubsub_drain();
			if (!sk_pubsub_at(ev.pos) && target)
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
				return sk_redis_fail(node, "read from Redis failed");
			ready = target == NULL;
		}
	}
	if (target && events != WL_SOCKET_READABLE)
		ModifyWaitEvent(wait_set, target->pos, WL_SOCKET_READABLE, NULL);
	return ready;
}

/* Is the master of the key's slot connected?  (Off a cluster, there is one.) */
bool
sk_redis_serves(const char *key)
{
	return !sk_conn_cluster || sk_cluster_node_of(sk_cluster_key_slot(key, strlen(key))) >= 0;
}

/* The first line of the password file; NULL (and the error set) when unusable. */
char *
sk_redis_read_password(void)
{
	FILE	   *f;
	struct stat st;
	char		line[1024];
	size_t		len;

	f = AllocateFile(seckill_redis_password_file, "r");
	if (f == NULL)
	{
		/* the messages reach application roles: the setting, not its value */
		sk_redis_set_error("could not open the file named by seckill.redis_password_file: %m");
		return NULL;
	}
	if (fstat(fileno(f), &st) != 0 || (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		FreeFile(f);
		sk_redis_set_error("the file named by seckill.redis_password_file must be readable by its owner only (chmod 600)");
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
	password = sk_redis_read_password();
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
	ok = sk_pipeline_send_to_node(node, &p, &reply);
	memset(p.buf.data, 0, p.buf.len);
	if (!ok)
		return false;
	if (reply.type == REDIS_REPLY_ERROR)
	{
		/* Redis' own message names neither the password nor the user's secret. */
		sk_redis_set_error("Redis refused the credentials of seckill.redis_user: %s", reply.str);
		sk_redis_disconnect(NULL);
		return false;
	}
	return true;
}

static void
remember_settings(const char *host, int port)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	if (sk_conn_host == NULL || strcmp(sk_conn_host, host) != 0 || sk_conn_port != port)
		sk_topology_forget();
	if (sk_conn_host)
	{
		pfree(sk_conn_host);
		pfree(conn_user);
		pfree(conn_password_file);
		pfree(conn_sentinels);
		pfree(conn_master_name);
	}
	sk_conn_host = pstrdup(host);
	sk_conn_port = port;
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
				(errmsg("seckill worker cannot reach Redis: %s", sk_last_error),
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
	return sk_run_id;
}

/*
 * Between the worker's rounds: has a master of the cluster that was down
 * come back, do the sentinels still name this master?
 */
void
sk_redis_watch(void)
{
	sk_topology_watch();
	sk_failover_watch();
}

/*
 * A connection could not be opened: close them all, and say so when the
 * worker was connected (a master met through a redirection).
 */
void
sk_redis_connect_failed(void)
{
	if (sk_connected)
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
int
sk_redis_connect_node(const char *host, int port, bool alone)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);
	redisContext *ctx;
	SkNode	   *node;
	int			soerr = 0;
	socklen_t	soerrlen = sizeof(soerr);

	if (sk_nnodes == SK_MAX_NODES)
	{
		sk_redis_set_error("the Redis Cluster has more than %d masters, more than seckill connects to",
						   SK_MAX_NODES);
		if (!alone)
			sk_redis_connect_failed();
		return -1;
	}
	ctx = redisConnectNonBlock(host, port);
	if (ctx == NULL || ctx->err)
	{
		sk_redis_set_error("could not connect to Redis at %s:%d: %s", host, port,
						   ctx ? ctx->errstr : "out of memory");
		if (ctx)
			redisFree(ctx);
		if (!alone)
			sk_redis_connect_failed();
		return -1;
	}
	sk_published[sk_nnodes] = -1;
	node = &sk_nodes[sk_nnodes++];
	node->ctx = ctx;
	strlcpy(node->host, host, sizeof(node->host));
	node->port = port;
	node->master = false;
	node->run_id[0] = '\0';
	sk_redis_rebuild_wait_set();
	/* an error (a cancel) in the wait must not leave this half-open node */
	sk_in_flight = true;
	if (!sk_redis_wait_socket(node, WL_SOCKET_WRITEABLE, deadline) ||
		getsockopt(ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &soerrlen) != 0 || soerr != 0)
	{
		if (sk_nnodes > 0)
		{
			sk_redis_set_error("could not connect to Redis at %s:%d: %s", host, port,
							   soerr ? strerror(soerr) : "timed out");
			if (!alone)
				sk_redis_connect_failed();
			else
			{
				redisFree(sk_nodes[--sk_nnodes].ctx);
				sk_redis_rebuild_wait_set();
			}
		}
		sk_in_flight = false;
		return -1;
	}
	sk_in_flight = false;
	if (!authenticate(node))
		return -1;
	return node - sk_nodes;
}

/* A node connected, and checked to be a master with the scripts loaded. */
bool
sk_redis_make_master(SkNode *node)
{
	if (!node->master && (!sk_failover_check_role(node) || !sk_pipeline_load_scripts(node)))
		return false;
	node->master = true;
	return true;
}

/* One master (seckill.redis_host's, or the sentinels'). */
static bool
connect_master(void)
{
	if (sk_redis_connect_node(sk_conn_host, sk_conn_port, false) < 0 || !sk_redis_make_master(&sk_nodes[0]))
		return false;
	strlcpy(sk_run_id, sk_nodes[0].run_id, sizeof(sk_run_id));
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
	if (sk_connected)
		return true;
	if (GetCurrentTimestamp() < next_attempt)
		return false;

	if (seckill_redis_cluster && sk_sentinel_enabled())
	{
		sk_redis_set_error("seckill.redis_cluster is on and seckill.redis_sentinels is set: a Redis Cluster names its masters itself; "
						   "empty seckill.redis_sentinels");
		attempt_failed();
		return false;
	}
	if (sk_sentinel_enabled())
	{
		char		host[256];
		int			port;

		if (!sk_failover_master(host, sizeof(host), &port))
		{
			attempt_failed();
			return false;
		}
		remember_settings(host, port);
	}
	else
		remember_settings(seckill_redis_host, seckill_redis_port);
	proven = false;
	connecting = true;
	sk_conn_cluster = seckill_redis_cluster;
	if (!(sk_conn_cluster ? sk_topology_connect() : connect_master()))
	{
		drop_nodes();
		attempt_failed();
		return false;
	}
	/* not reset until the connection has proved usable (sk_redis_proven) */
	next_attempt = 0;
	generation++;
	sk_connected = true;
	sk_topology_publish();
	sk_pubsub_open();
	sk_redis_rebuild_wait_set();
	if (sk_conn_cluster)
		sk_topology_report();
	else
		ereport(LOG, (errmsg("seckill worker connected to Redis at %s:%d%s",
							 sk_conn_host, sk_conn_port, sk_sentinel_enabled() ? ", the master the sentinels name" : "")));
	return true;
}

bool
sk_redis_connect(void)
{
	bool		ok;

	if (sk_connected)
		return true;
	PG_TRY();
	{
		ok = connect_now();
	}
	PG_CATCH();
	{
		/* an ERROR (a cancel, a statement timeout) broke the handshake off */
		connecting = false;
		sk_handshaking = -1;
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
	else if (sk_pubsub_at(ev.pos))
		sk_pubsub_drain();
	else if ((ev.events & WL_SOCKET_READABLE) && (node = node_at(ev.pos)) != NULL)
	{
		if (redisBufferRead(node->ctx) == REDIS_ERR)
			sk_redis_fail(node, "Redis closed the connection");
	}
}
