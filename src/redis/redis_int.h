/*-------------------------------------------------------------------------
 *
 * redis_int.h
 *		Internals of the worker's Redis client, shared by the files of
 *		redis/ and by no one else: the table of connections, the state of
 *		the current connection, and the calls the files make of each other.
 *
 * redis.c     connecting, authenticating, the wait set, disconnecting
 * pipeline.c  pipelines out to every master and their replies back,
 *             scripts by SHA
 * topology.c  the masters of a Redis Cluster, redirections, and the
 *             masters published to seckill.redis_nodes
 * failover.c  is the node still the master: its role, its replies, the
 *             sentinels
 * pubsub.c    the subscription to one channel
 *
 *-------------------------------------------------------------------------
 */
#ifndef SECKILL_REDIS_INT_H
#define SECKILL_REDIS_INT_H

#include "redis/redis.h"

#include <hiredis/hiredis.h>

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

/* redis.c */
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

extern void sk_redis_set_error(const char *fmt,...) pg_attribute_printf(1, 2);
extern char *sk_redis_read_password(void);
extern void sk_redis_rebuild_wait_set(void);
extern bool sk_redis_wait_socket(SkNode *target, uint32 events, TimestampTz deadline);
extern bool sk_redis_fail(SkNode *node, const char *what);
extern int	sk_redis_connect_node(const char *host, int port, bool alone);
extern bool sk_redis_make_master(SkNode *node);
extern void sk_redis_connect_failed(void);

/* pipeline.c */
extern void sk_pipeline_use_scripts(const char *const *scripts, int count);
extern bool sk_pipeline_load_scripts(SkNode *node);
extern void sk_pipeline_add_command(SkPipeline *p, int argc, const char **argv, const size_t *lens,
									int key);
extern bool sk_pipeline_send_to_node(SkNode *node, SkPipeline *p, SkReply *out);
extern void sk_pipeline_forget_meanwhile(void);

/* topology.c */
extern SkKnown sk_down[SK_MAX_NODES];
extern int	sk_ndown;
extern int	sk_published[SK_MAX_NODES];

extern bool sk_topology_connect(void);
extern void sk_topology_forget(void);
extern void sk_topology_report(void);
extern void sk_topology_publish(void);
extern void sk_topology_unpublish(void);
extern int	sk_topology_redirect(const SkReply *r, int sent_to, bool was_asking,
								 bool *asking, bool *reload, bool *pause);
extern void sk_topology_watch(void);

/* failover.c */
extern bool sk_failover_master(char *host, size_t hostlen, int *port);
extern bool sk_failover_check_role(SkNode *node);
extern bool sk_failover_serving(const SkReply *r, const SkNode *node);
extern void sk_failover_watch(void);

/* pubsub.c */
extern void sk_pubsub_open(void);
extern void sk_pubsub_close(const char *why);
extern void sk_pubsub_drain(void);
extern void sk_pubsub_add_event(WaitEventSet *set);
extern bool sk_pubsub_at(int pos);

#endif							/* SECKILL_REDIS_INT_H */
