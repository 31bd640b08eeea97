/*-------------------------------------------------------------------------
 *
 * topology.c
 *		The masters of a Redis Cluster: connecting to each master that
 *		CLUSTER SLOTS names, following MOVED, ASK and TRYAGAIN, watching the
 *		masters that could not be reached, the cluster's identity, and the
 *		masters and their slots as seckill.redis_nodes shows them.
 *
 * The slot arithmetic, the map and the parsing of redirections are
 * cluster.c's; the table of connections conn.c's, their opening node.c's,
 * and so is marking the masters unreached when the connections are lost.
 * sk_redis_init hands sk_topology_redirect to pipeline.c, which calls
 * nothing above it.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include "common/hashfn.h"
#include "redis/cluster.h"
#include "shared/redis_nodes.h"

/*
 * The masters of a Redis Cluster as last connected, those reached and those
 * not: tried in turn when the seed (seckill.redis_host) cannot be reached,
 * so that the loss of that one node does not cut the worker off the
 * cluster; and counted in the cluster's identity with the run_id they had
 * when last reached.
 */
static SkKnown known[SK_MAX_NODES];
static int	nknown = 0;

/*
 * When the masters CLUSTER SLOTS named that could not be reached at this
 * connection (sk_down, conn.c's) are next watched for their return or their
 * replacement: once a second (sk_redis_watch).
 */
static TimestampTz down_due = 0;
#define DOWN_POLL_MS 1000

/* A new seed: the masters known from the last one are not its. */
void
sk_topology_forget(void)
{
	nknown = 0;
}

/* Connected to a Redis Cluster: say so, naming the masters not reached. */
void
sk_topology_report(void)
{
	ereport(LOG, (errmsg("seckill worker connected to the Redis Cluster of %s:%d%s: %d masters",
						 sk_conn_host, sk_conn_port,
						 sk_nodes[0].port == sk_conn_port && strcmp(sk_nodes[0].host, sk_conn_host) == 0 ? "" :
						 psprintf(" through %s:%d, the seed being unreachable", sk_nodes[0].host, sk_nodes[0].port),
						 sk_nnodes - (sk_nodes[0].master ? 0 : 1))));
	for (int i = 0; i < sk_ndown; i++)
		ereport(LOG, (errmsg("seckill worker cannot reach the master %s:%d of the Redis Cluster: %s",
							 sk_down[i].host, sk_down[i].port, sk_down[i].error),
					  errhint("The campaigns in its slots fail with 08006 until it is back or replaced; the others sell on.")));
	down_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), DOWN_POLL_MS);
}

/*
 * Show the masters of this connection in seckill.redis_nodes: those
 * reached, those not (a Redis Cluster's), and which serves each slot.
 */
void
sk_topology_publish(void)
{
	SeckillRedisNodes *pub = seckill_redis_nodes;
	int			n = 0;

	LWLockAcquire(pub->lock, LW_EXCLUSIVE);
	for (int i = 0; i < sk_nnodes; i++)
	{
		sk_published[i] = -1;
		if (!sk_nodes[i].master || n == SK_REDIS_NODES)
			continue;
		sk_published[i] = n;
		snprintf(pub->node[n].addr, sizeof(pub->node[n].addr), "%s:%d", sk_nodes[i].host, sk_nodes[i].port);
		pub->node[n].connected = true;
		pub->node[n].slots = 0;
		pub->node[n].error[0] = '\0';
		pg_atomic_write_u64(&pub->node[n].round_trips, 0);
		n++;
	}
	for (int i = 0; i < sk_ndown && n < SK_REDIS_NODES; i++, n++)
	{
		snprintf(pub->node[n].addr, sizeof(pub->node[n].addr), "%s:%d", sk_down[i].host, sk_down[i].port);
		pub->node[n].connected = false;
		pub->node[n].slots = 0;
		strlcpy(pub->node[n].error, sk_down[i].error, sizeof(pub->node[n].error));
		pg_atomic_write_u64(&pub->node[n].round_trips, 0);
	}
	pub->count = n;
	pub->cluster = sk_conn_cluster;
	for (int s = 0; s < SK_REDIS_SLOTS; s++)
	{
		int			node = sk_conn_cluster ? sk_cluster_node_of(s) : 0;

		pub->slot_node[s] = node >= 0 ? sk_published[node] : -1;
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

	if (from == sk_published[node])
		return;
	LWLockAcquire(pub->lock, LW_EXCLUSIVE);
	if (from >= 0)
		pub->node[from].slots--;
	pub->slot_node[slot] = sk_published[node];
	if (sk_published[node] >= 0)
		pub->node[sk_published[node]].slots++;
	LWLockRelease(pub->lock);
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
	for (int i = 0; i < sk_ndown; i++)
		if (sk_down[i].port == port && strcmp(sk_down[i].host, host) == 0)
			return true;
	return false;
}

/* Is host:port one of the masters connected? */
static bool
known_master(const char *host, int port)
{
	for (int i = 0; i < sk_nnodes; i++)
		if (sk_nodes[i].master && sk_nodes[i].port == port && strcmp(sk_nodes[i].host, host) == 0)
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
int
sk_topology_redirect(const SkReply *r, int sent_to, bool was_asking,
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
	if (!sk_conn_cluster)
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
		strlcpy(host, sk_nodes[sent_to].host, sizeof(host));
	if (r->str[0] == 'A' && is_down(host, port))
	{
		/* its journals are replayed before anything else goes there */
		sk_conn_disconnect(psprintf("slot %d is moving to %s:%d, a master seckill could not reach: "
									"it reconnects to the cluster", slot, host, port));
		return -1;
	}
	if (r->str[0] == 'M' && !known_master(host, port))
	{
		/* the campaigns are rebuilt for the new set of masters (worker/epoch.c) */
		sk_conn_disconnect(psprintf("slot %d moved to %s:%d, a master seckill did not know (a failover, "
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
void
sk_topology_watch(void)
{
	SkPipeline	p;
	SkReply		r;
	char		addr[300];
	int			m;

	if (!sk_connected || !sk_conn_cluster || sk_ndown == 0 || GetCurrentTimestamp() < down_due)
		return;
	down_due = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), DOWN_POLL_MS);
	for (m = 0; m < sk_nnodes && !sk_nodes[m].master; m++)
		;
	sk_pipeline_init(&p);
	sk_pipeline_add_command(&p, 2, (const char *[]) {"CLUSTER", "NODES"}, NULL, 2);
	if (m == sk_nnodes || !sk_pipeline_send_to_node(&sk_nodes[m], &p, &r) || r.type != REDIS_REPLY_STRING)
		return;
	if (up_for_unserved(r.str, addr, sizeof(addr)))
		sk_conn_disconnect(psprintf("%s serves slots of the Redis Cluster whose master seckill could not "
									"reach: it reconnects", addr));
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

	for (i = 0; i < sk_nnodes; i++)
		if (sk_nodes[i].port == port && strcmp(sk_nodes[i].host, host) == 0)
			break;
	if (i == sk_nnodes && (i = sk_node_connect(host, port, false)) < 0)
		return -1;
	return sk_node_make_master(&sk_nodes[i]) ? i : -1;
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

	for (i = 0; i < sk_ndown; i++)
		if (sk_down[i].port == port && strcmp(sk_down[i].host, host) == 0)
			return SK_NODE_DOWN;
	for (i = 0; i < sk_nnodes; i++)
		if (sk_nodes[i].port == port && strcmp(sk_nodes[i].host, host) == 0)
			break;
	if (i < sk_nnodes)
		return sk_node_make_master(&sk_nodes[i]) ? i : SK_NODE_GONE;
	/* a reply naming more masters than there is room for is refused, not trusted */
	if (sk_nnodes + sk_ndown >= SK_MAX_NODES)
	{
		sk_conn_set_error("the Redis Cluster names more than %d masters, more than seckill connects to",
						  SK_MAX_NODES);
		sk_node_connect_failed();
		return SK_NODE_GONE;
	}
	sk_handshaking = sk_nnodes;
	i = sk_node_connect(host, port, true);
	if (i >= 0 && !sk_node_make_master(&sk_nodes[i]))
		i = -1;
	sk_handshaking = -1;
	if (i >= 0)
		return i;
	if (sk_nnodes == 0)
		return SK_NODE_GONE;
	strlcpy(sk_down[sk_ndown].host, host, sizeof(sk_down[sk_ndown].host));
	sk_down[sk_ndown].port = port;
	strlcpy(sk_down[sk_ndown].error, sk_last_error, sizeof(sk_down[sk_ndown].error));
	sk_ndown++;
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

	for (int i = 0; i < sk_nnodes; i++)
		if (sk_nodes[i].master && sk_nodes[i].run_id[0] != '\0')
			ids[n++] = sk_nodes[i].run_id;
	for (int i = 0; i < sk_ndown; i++)
	{
		const SkKnown *k = known_at(sk_down[i].host, sk_down[i].port);

		ids[n++] = k && k->run_id[0] ? pstrdup(k->run_id) : psprintf("%s:%d", sk_down[i].host, sk_down[i].port);
	}
	sk_run_id[0] = '\0';
	if (n == 0)
		return;
	qsort(ids, n, sizeof(char *), compare_strings);
	initStringInfo(&all);
	for (int i = 0; i < n; i++)
		appendStringInfoString(&all, ids[i]);
	snprintf(sk_run_id, sizeof(sk_run_id), "cluster-%016llx",
			 (unsigned long long) hash_bytes_extended((const unsigned char *) all.data, all.len, 0));
}

/* Keep the masters of this connection, reached or not, for the next. */
static void
remember_masters(void)
{
	SkKnown		now[SK_MAX_NODES];
	int			n = 0;

	for (int i = 0; i < sk_nnodes; i++)
		if (sk_nodes[i].master)
		{
			strlcpy(now[n].host, sk_nodes[i].host, sizeof(now[n].host));
			now[n].port = sk_nodes[i].port;
			strlcpy(now[n].run_id, sk_nodes[i].run_id, sizeof(now[n].run_id));
			now[n++].error[0] = '\0';
		}
	for (int i = 0; i < sk_ndown && n < SK_MAX_NODES; i++)
	{
		const SkKnown *k = known_at(sk_down[i].host, sk_down[i].port);

		now[n] = sk_down[i];
		strlcpy(now[n++].run_id, k ? k->run_id : "", sizeof(now[0].run_id));
	}
	memcpy(known, now, sizeof(SkKnown) * n);
	nknown = n;
}

/*
 * A Redis Cluster: ask seckill.redis_host (any node, a replica too) which
 * master serves each slot, and connect to each.
 */
bool
sk_topology_connect(void)
{
	SkPipeline	p;
	SkReply		slots;
	char		why[256];
	char		seed_error[sizeof(sk_last_error)];
	int			i;

	/* the seed, else the masters it knew, in turn, until one tells the slots */
	sk_ndown = 0;
	for (i = -1; i < nknown; i++)
	{
		if (i >= 0 && known[i].port == sk_conn_port && strcmp(known[i].host, sk_conn_host) == 0)
			continue;
		if (sk_node_connect(i < 0 ? sk_conn_host : known[i].host, i < 0 ? sk_conn_port : known[i].port, false) == 0)
		{
			sk_pipeline_init(&p);
			sk_pipeline_add_command(&p, 2, (const char *[]) {"CLUSTER", "SLOTS"}, NULL, 2);
			if (sk_pipeline_send_to_node(&sk_nodes[0], &p, &slots))
				break;
		}
		if (i < 0)
			strlcpy(seed_error, sk_last_error, sizeof(seed_error));
	}
	if (i == nknown)
	{
		sk_conn_set_error("%s%s", seed_error, nknown > 0 ? ", nor any other master it knew" : "");
		return false;
	}
	if (slots.type == REDIS_REPLY_ERROR)
	{
		sk_conn_set_error("Redis at %s:%d answered CLUSTER SLOTS with \"%s\": it is no Redis Cluster node; "
						  "set seckill.redis_cluster = off, or point seckill.redis_host at a node of the cluster",
						  sk_conn_host, sk_conn_port, slots.str);
		return false;
	}
	if (!sk_cluster_map_load(&slots, sk_nodes[0].host, reach_master, why, sizeof(why)))
	{
		if (sk_nnodes > 0)
			sk_conn_set_error("%s", why);
		return false;
	}
	if (slots.elements == 0)
	{
		sk_conn_set_error("Redis at %s:%d serves no slot (CLUSTER SLOTS is empty): the cluster is not created yet",
						  sk_nodes[0].host, sk_nodes[0].port);
		return false;
	}
	for (i = 0; i < sk_nnodes && !sk_nodes[i].master; i++)
		;
	if (i == sk_nnodes)
	{
		sk_conn_set_error("no master of the Redis Cluster could be reached: %s", sk_ndown > 0 ? sk_down[0].error : sk_last_error);
		return false;
	}
	/* the epoch, the master's identity and the order ids: without them nothing sells */
	if (!sk_conn_serves(sk_own_key))
	{
		sk_conn_set_error("the master of seckill's own keys (%s) cannot be reached: %s",
						  sk_own_key, sk_ndown > 0 ? sk_down[0].error : sk_last_error);
		return false;
	}
	cluster_run_id();
	remember_masters();
	return true;
}
