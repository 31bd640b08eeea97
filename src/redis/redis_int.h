/*-------------------------------------------------------------------------
 *
 * redis_int.h
 *		Internals of the worker's Redis client, shared by the files of
 *		redis/ and by no one else: the table of connections, the state of
 *		the current connection, and the calls the files make of each other.
 *
 * The files, from the bottom up: each calls only files listed before it;
 * where pipeline.c needs topology.c's redirections, topology.c has handed
 * them down (SkRedirectFn) at sk_redis_init.  What dropping the
 * connections means above conn.c it does itself (seckill.redis_nodes, the
 * subscription) or leaves a mark for (sk_conn_lost_at, redis.c's backoff).
 *
 * conn.c      the table of connections, the last error, the wait set and
 *             the waits on the sockets, a connection failing, disconnecting;
 *             the subscription's socket heard, its messages kept
 * reply.c     the replies copied out of hiredis, and what they say
 * failover.c  is the node still the master: its replies, the sentinels
 * pipeline.c  pipelines out to every master and their replies back,
 *             scripts by SHA
 * node.c      one connection opened: connected, authenticated, its role
 *             checked and the scripts loaded
 * topology.c  the masters of a Redis Cluster, redirections, and the
 *             masters published to seckill.redis_nodes
 * pubsub.c    the subscription to one channel opened, its messages taken
 * redis.c     the client's entry points (redis.h): connecting, backing
 *             off, reloading, watching between rounds
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REDIS_INT_H
#define SECKILL_REDIS_INT_H

#include "redis/redis.h"

#include <hiredis/hiredis.h>

#include "redis/tls.h"

#include "storage/latch.h"
#include "utils/timestamp.h"

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

/*
 * A master of a Redis Cluster known from an earlier connection, or one not
 * reached at this one (topology.c).
 */
typedef struct SkKnown
{
	char		host[256];
	int			port;
	char		run_id[64];		/* "" when never reached */
	char		error[160];		/* why it was not reached; "" when it was */
} SkKnown;

/*
 * The subscription to one channel: a connection of its own next to the
 * others (pubsub.c opens it), heard in the same wait set and closed with
 * them (conn.c).  The messages read in any wait are kept here, not acted
 * upon, until the worker takes them (sk_pubsub_take), each distinct one
 * once; more than SK_SUB_KEPT are not kept, and overflowed says that some
 * were lost.
 */
#define SK_SUB_KEPT 256

typedef struct SkSubscription
{
	redisContext *ctx;			/* NULL while closed */
	int			pos;			/* in the wait set, -1: not in it */
	char	   *channel;		/* NULL: none asked for */
	int			count;			/* messages kept */
	char	   *messages[SK_SUB_KEPT];	/* in TopMemoryContext */
	bool		overflowed;		/* more came than were kept */
} SkSubscription;

/*
 * Where a command that did not run goes next (topology.c's
 * sk_topology_redirect): set by sk_redis_init, used by sk_pipeline_exec.
 */
typedef int (*SkRedirectFn) (const SkReply *r, int sent_to, bool was_asking,
							 bool *asking, bool *reload, bool *pause);

/* conn.c */
extern SkNode sk_nodes[SK_MAX_NODES];
extern int	sk_nnodes;
extern bool sk_connected;
extern bool sk_conn_cluster;
extern char *sk_conn_host;
extern int	sk_conn_port;
extern char sk_last_error[256];
extern char sk_run_id[64];
extern int	sk_handshaking;
extern bool sk_in_flight;
extern char *sk_own_key;
extern SkKnown sk_down[SK_MAX_NODES];
extern int	sk_ndown;
extern int	sk_published[SK_MAX_NODES];
extern SkSubscription sk_sub;
extern TimestampTz sk_conn_lost_at;

extern void sk_conn_set_error(const char *fmt,...) pg_attribute_printf(1, 2);
extern char *sk_conn_read_secret(const char *path, const char *setting);
extern char *sk_conn_read_password(void);
extern void sk_conn_rebuild_wait_set(void);
extern void sk_conn_drop(void);
extern void sk_conn_disconnect(const char *why);
extern bool sk_conn_wait_socket(SkNode *target, uint32 events, TimestampTz deadline);
extern bool sk_conn_fail(SkNode *node, const char *what);
extern bool sk_conn_serves(const char *key);
extern void sk_conn_wait_idle(long timeout_ms);
extern void sk_conn_close_subscription(const char *why);

/* reply.c */
extern void sk_reply_copy(SkReply *dst, const redisReply *src);

/* failover.c */
extern bool sk_failover_master(char *host, size_t hostlen, int *port);
extern bool sk_failover_serving(const SkReply *r, const SkNode *node);
extern void sk_failover_watch(void);

/* pipeline.c */
extern void sk_pipeline_use_scripts(const char *const *scripts, int count);
extern void sk_pipeline_set_redirect(SkRedirectFn fn);
extern bool sk_pipeline_load_scripts(SkNode *node);
extern void sk_pipeline_add_command(SkPipeline *p, int argc, const char **argv, const size_t *lens,
									int key);
extern bool sk_pipeline_send_to_node(SkNode *node, SkPipeline *p, SkReply *out);

/* node.c */
extern int	sk_node_connect(const char *host, int port, bool alone);
extern void sk_node_connect_failed(void);
extern bool sk_node_make_master(SkNode *node);

/* topology.c */
extern bool sk_topology_connect(void);
extern void sk_topology_forget(void);
extern void sk_topology_report(void);
extern void sk_topology_publish(void);
extern int	sk_topology_redirect(const SkReply *r, int sent_to, bool was_asking,
								 bool *asking, bool *reload, bool *pause);
extern void sk_topology_watch(void);

/* pubsub.c */
extern void sk_pubsub_open(void);

#endif							/* SECKILL_REDIS_INT_H */
