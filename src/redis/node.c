/*-------------------------------------------------------------------------
 *
 * node.c
 *		One connection of the worker's Redis client opened, within
 *		seckill.redis_timeout: connected, authenticated, and made a master
 *		(its role checked, the scripts loaded).
 *
 * Which nodes to open is redis.c's (the master) and topology.c's (the
 * masters of a Redis Cluster); the table they go in is conn.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include <sys/socket.h>

#include "redis/sentinel.h"

static bool
authenticate(SkNode *node)
{
	SkPipeline	p;
	SkReply		reply;
	char	   *password;
	bool		ok;

	if (seckill_redis_password_file[0] == '\0')
		return true;
	password = sk_conn_read_password();
	if (password == NULL)
	{
		sk_conn_disconnect(NULL);
		return false;
	}
	sk_pipeline_init(&p);
	p.secret = true;
	/* room for all at once: a buffer that grows leaves the old one uncleared */
	enlargeStringInfo(&p.buf, 64 + strlen(password) + strlen(seckill_redis_user));
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
		sk_conn_set_error("Redis refused the credentials of seckill.redis_user: %s", reply.str);
		sk_conn_disconnect(NULL);
		return false;
	}
	return true;
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
	if (!sk_pipeline_send_to_node(node, &p, r))
		return false;
	role = r[0].type == REDIS_REPLY_ARRAY && r[0].elements > 0 ? r[0].element[0].str : NULL;
	if (role != NULL && strcmp(role, "master") != 0)
	{
		sk_conn_set_error("Redis at %s:%d is a %s, not a master: seckill writes to the master only%s",
						  node->host, node->port, strcmp(role, "slave") == 0 ? "replica" : role,
						  sk_sentinel_enabled() ? " (the sentinels named it; it may be changing role)" :
						  "; point seckill.redis_host at the master, or set seckill.redis_sentinels");
		sk_conn_disconnect(NULL);
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
 * A connection could not be opened: close them all, and say so when the
 * worker was connected (a master met through a redirection).
 */
void
sk_node_connect_failed(void)
{
	if (sk_connected)
		sk_conn_disconnect(NULL);
	else
		sk_conn_drop();
}

/*
 * Open a connection to host:port and authenticate on it, within
 * seckill.redis_timeout: its index, or -1 with the error set and every
 * connection closed; when alone, only this one (a master that cannot be
 * reached while the others sell on).  An error of AUTH closes them all.
 */
int
sk_node_connect(const char *host, int port, bool alone)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);
	redisContext *ctx;
	SkNode	   *node;
	int			soerr = 0;
	socklen_t	soerrlen = sizeof(soerr);
	char		error[256] = "";

	if (sk_nnodes == SK_MAX_NODES)
	{
		sk_conn_set_error("the Redis Cluster has more than %d masters, more than seckill connects to",
						  SK_MAX_NODES);
		if (!alone)
			sk_node_connect_failed();
		return -1;
	}
	ctx = redisConnectNonBlock(host, port);
	if (ctx == NULL || ctx->err)
	{
		sk_conn_set_error("could not connect to Redis at %s:%d: %s", host, port,
						  ctx ? ctx->errstr : "out of memory");
		if (ctx)
			redisFree(ctx);
		if (!alone)
			sk_node_connect_failed();
		return -1;
	}
	sk_published[sk_nnodes] = -1;
	node = &sk_nodes[sk_nnodes++];
	node->ctx = ctx;
	strlcpy(node->host, host, sizeof(node->host));
	node->port = port;
	node->master = false;
	node->run_id[0] = '\0';
	sk_conn_rebuild_wait_set();
	/* an error (a cancel) in the wait must not leave this half-open node */
	sk_in_flight = true;
	if (!sk_conn_wait_socket(node, WL_SOCKET_WRITEABLE, deadline) ||
		getsockopt(ctx->fd, SOL_SOCKET, SO_ERROR, &soerr, &soerrlen) != 0 || soerr != 0)
		snprintf(error, sizeof(error), "could not connect to Redis at %s:%d: %s", host, port,
				 soerr ? strerror(soerr) : "timed out");
	else if (seckill_redis_tls)
		(void) sk_tls_start(ctx, host, port, deadline, error, sizeof(error));
	/* the wait fails after closing every connection: nothing is left to close */
	if (error[0] != '\0' && sk_nnodes > 0)
	{
		sk_conn_set_error("%s", error);
		if (!alone)
			sk_node_connect_failed();
		else
		{
			sk_tls_free(sk_nodes[--sk_nnodes].ctx);
			sk_conn_rebuild_wait_set();
		}
	}
	sk_in_flight = false;
	if (error[0] != '\0' || !authenticate(node))
		return -1;
	return node - sk_nodes;
}

/* A node connected, and checked to be a master with the scripts loaded. */
bool
sk_node_make_master(SkNode *node)
{
	if (!node->master && (!check_role(node) || !sk_pipeline_load_scripts(node)))
		return false;
	node->master = true;
	return true;
}
