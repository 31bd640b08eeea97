/*-------------------------------------------------------------------------
 *
 * redis.c
 *		The entry points of the worker's Redis client (redis.h): connecting
 *		(to the master, or to every master of a Redis Cluster), backing off,
 *		reloading, disconnecting, and what comes between the worker's rounds.
 *
 * The table of connections, the wait set and the waits are conn.c's, the
 * opening of one connection node.c's, pipelines pipeline.c's, the masters of
 * a cluster topology.c's, the watch for a failover failover.c's, the
 * subscription pubsub.c's.  sk_redis_init hands pipeline.c topology.c's
 * redirections (redis_int.h); a disconnection reaches the backoff here
 * through conn.c's mark, sk_conn_lost_at.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include "utils/memutils.h"

#include "redis/sentinel.h"

/*
 * The settings the connection was made with, to notice changes on reload
 * (the address it was made to is conn.c's sk_conn_host and sk_conn_port).
 */
static char *conn_user = NULL;
static char *conn_password_file = NULL;
/* the sentinels', for the sentinel connection only: its own setting */
static char *conn_sentinel_password_file = NULL;
static char *conn_tls = NULL;	/* the TLS settings, as tls_settings() says them */
static char *conn_sentinels = NULL;
static char *conn_master_name = NULL;

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

/*
 * scripts[0..count-1] are the Lua sources loaded into every master, kept
 * (not copied), and run by their index (sk_pipeline_script).  own_key is a
 * key in the slot of the client's own state (seckill's epoch): a Redis
 * Cluster whose master of that slot cannot be reached is no connection.
 */
void
sk_redis_init(const char *const *scripts, int count, const char *own_key_in)
{
	sk_pipeline_set_redirect(sk_topology_redirect);
	sk_pipeline_use_scripts(scripts, count);
	sk_own_key = MemoryContextStrdup(TopMemoryContext, own_key_in);
	sk_conn_rebuild_wait_set();
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

/*
 * Redis answered a command with an error the connection survives (NOPERM,
 * OOM...): the caller's request failed, and this is why.
 */
void
sk_redis_refused(const char *why)
{
	sk_conn_set_error("%s", why);
}

/* Close the connections, why (when given) the error (conn.c). */
void
sk_redis_disconnect(const char *why)
{
	sk_conn_disconnect(why);
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
}

/* A pipeline is out, its replies not read yet: Redis may not be used. */
bool
sk_redis_in_flight(void)
{
	return sk_in_flight;
}

/* The TLS settings as one string: a change of any of them reconnects. */
static char *
tls_settings(void)
{
	return psprintf("%d|%s|%s|%s|%s", seckill_redis_tls, seckill_redis_tls_ca_file,
					seckill_redis_tls_cert_file, seckill_redis_tls_key_file,
					seckill_redis_tls_server_name);
}

/*
 * After a configuration reload: reconnect when the Redis settings changed,
 * and retry at once when disconnected, since the new settings may be the fix.
 * A disconnection for new settings is no failure: the next request connects
 * at once, without the back-off of a connection that never proved usable.
 */
void
sk_redis_reload(void)
{
	if (conn_sentinels != NULL &&
		(strcmp(conn_sentinels, seckill_redis_sentinels) != 0 ||
		 strcmp(conn_master_name, seckill_redis_master_name) != 0))
		sk_sentinel_close();
	if (conn_sentinel_password_file == NULL ||
		strcmp(conn_sentinel_password_file, seckill_redis_sentinel_password_file) != 0)
	{
		if (conn_sentinel_password_file != NULL)
		{
			sk_sentinel_close();
			pfree(conn_sentinel_password_file);
		}
		conn_sentinel_password_file = MemoryContextStrdup(TopMemoryContext, seckill_redis_sentinel_password_file);
	}
	if (sk_connected &&
		(sk_conn_cluster != seckill_redis_cluster ||
		 strcmp(conn_sentinels, seckill_redis_sentinels) != 0 ||
		 strcmp(conn_master_name, seckill_redis_master_name) != 0 ||
		 (!sk_sentinel_enabled() &&
		  (strcmp(sk_conn_host, seckill_redis_host) != 0 || sk_conn_port != seckill_redis_port)) ||
		 strcmp(conn_user, seckill_redis_user) != 0 ||
		 strcmp(conn_password_file, seckill_redis_password_file) != 0 ||
		 strcmp(conn_tls, tls_settings()) != 0))
	{
		sk_sentinel_close();
		sk_redis_disconnect("the Redis settings changed");
	}
	if (!sk_connected)
	{
		next_attempt = 0;
		backoff_ms = 0;
		sk_conn_lost_at = 0;
	}
}

/* Is the master of the key's slot connected?  (Off a cluster, there is one.) */
bool
sk_redis_serves(const char *key)
{
	return sk_conn_serves(key);
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
		pfree(conn_tls);
		pfree(conn_sentinels);
		pfree(conn_master_name);
	}
	sk_conn_host = pstrdup(host);
	sk_conn_port = port;
	conn_user = pstrdup(seckill_redis_user);
	conn_password_file = pstrdup(seckill_redis_password_file);
	conn_tls = tls_settings();
	conn_sentinels = pstrdup(seckill_redis_sentinels);
	conn_master_name = pstrdup(seckill_redis_master_name);
	if (conn_sentinel_password_file == NULL)
		conn_sentinel_password_file = pstrdup(seckill_redis_sentinel_password_file);
	MemoryContextSwitchTo(old);
}

/* The next attempt waits longer, counted from the failure at from. */
static void
back_off(TimestampTz from)
{
	backoff_ms = backoff_ms == 0 ? 100 : Min(backoff_ms * 2, 1000);
	next_attempt = TimestampTzPlusMilliseconds(from, backoff_ms);
}

static void
attempt_failed(void)
{
	if (backoff_ms == 0)
		ereport(LOG,
				(errmsg("seckill worker cannot reach Redis: %s", sk_last_error),
				 errhint("Purchases fail with an error until it is back; the worker retries every second.")));
	back_off(GetCurrentTimestamp());
}

/*
 * A disconnection since the last attempt (conn.c's mark): back off from its
 * time, unless the connection had proved usable.  Those while connecting
 * are not counted: sk_redis_connect backs off itself.
 */
static void
note_disconnection(void)
{
	if (sk_conn_lost_at != 0 && !proven)
		back_off(sk_conn_lost_at);
	sk_conn_lost_at = 0;
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

/* One master (seckill.redis_host's, or the sentinels'). */
static bool
connect_master(void)
{
	if (sk_node_connect(sk_conn_host, sk_conn_port, false) < 0 || !sk_node_make_master(&sk_nodes[0]))
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
	note_disconnection();
	if (GetCurrentTimestamp() < next_attempt)
		return false;

	if (seckill_redis_cluster && sk_sentinel_enabled())
	{
		sk_conn_set_error("seckill.redis_cluster is on and seckill.redis_sentinels is set: a Redis Cluster names its masters itself; "
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
	sk_conn_cluster = seckill_redis_cluster;
	if (!(sk_conn_cluster ? sk_topology_connect() : connect_master()))
	{
		sk_conn_drop();
		attempt_failed();
		return false;
	}
	/* not reset until the connection has proved usable (sk_redis_proven) */
	next_attempt = 0;
	generation++;
	sk_connected = true;
	sk_topology_publish();
	sk_pubsub_open();
	sk_conn_rebuild_wait_set();
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
		sk_handshaking = -1;
		sk_conn_drop();
		sk_conn_lost_at = 0;
		PG_RE_THROW();
	}
	PG_END_TRY();
	/* the disconnections of the attempt: its failure backed off already */
	sk_conn_lost_at = 0;
	return ok;
}

/*
 * Sleep until the latch is set, the timeout passes or the subscription
 * brings a message (kept for sk_pubsub_take), noticing an idle connection
 * that Redis closed (conn.c).
 */
void
sk_redis_wait_idle(long timeout_ms)
{
	sk_conn_wait_idle(timeout_ms);
}
