/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *		Pipelines: commands built in RESP, sent to every master they go to
 *		at once, their replies read back into palloc'd memory by one
 *		deadline; commands Redis did not run sent again where it says; the
 *		Lua scripts loaded by SHA and reloaded after NOSCRIPT.
 *
 * Where a redirection sends a command is topology.c's, handed down by
 * sk_redis_init (SkRedirectFn); the replies that say a node is a master no
 * longer are failover.c's, their copies reply.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "redis/cluster.h"
#include "shared/redis_nodes.h"
#include "shared/stats.h"
#include "utils/memutils.h"

/*
 * The client's user's Lua scripts (sk_redis_init), loaded into every master
 * at connection and run by their index, and their SHA1s.
 */
static const char *const *script_source = NULL;
static int	nscripts = 0;
static char (*script_sha)[41] = NULL;

/* Where a command that did not run goes next (topology.c's). */
static SkRedirectFn redirect = NULL;

/* sk_redis_init's scripts: kept, not copied. */
void
sk_pipeline_use_scripts(const char *const *scripts, int count)
{
	script_source = scripts;
	nscripts = count;
	script_sha = MemoryContextAllocZero(TopMemoryContext, sizeof(*script_sha) * Max(count, 1));
}

/* Set by sk_redis_init: sk_topology_redirect. */
void
sk_pipeline_set_redirect(SkRedirectFn fn)
{
	redirect = fn;
}

static bool
flush_output(SkNode *node, TimestampTz deadline)
{
	int			done = 0;

	while (!done)
	{
		if (sk_tls_write(node->ctx, &done) == REDIS_ERR)
			return sk_conn_fail(node, "write to Redis failed");
		if (!done && !sk_conn_wait_socket(node, WL_SOCKET_WRITEABLE, deadline))
		{
			if (sk_nnodes > 0)
			{
				sk_conn_set_error("Redis at %s:%d did not accept the request within seckill.redis_timeout (%d ms)",
								  node->host, node->port, seckill_redis_timeout);
				sk_conn_disconnect(NULL);
			}
			return false;
		}
	}
	return true;
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

		for (int n = 0; n < sk_nnodes && waiting == NULL; n++)
			while (share[n].got < share[n].count)
			{
				void	   *raw = NULL;
				int			cmd;

				if (redisGetReplyFromReader(sk_nodes[n].ctx, &raw) == REDIS_ERR)
					return sk_conn_fail(&sk_nodes[n], "bad reply from Redis");
				if (raw == NULL)
				{
					waiting = &sk_nodes[n];
					break;
				}
				cmd = share[n].cmds[share[n].got++];
				if (cmd >= 0)
					sk_reply_copy(&out[cmd], raw);
				freeReplyObject(raw);
			}
		if (waiting == NULL)
			return true;
		if (!sk_conn_wait_socket(NULL, 0, deadline))
		{
			if (sk_nnodes > 0)
			{
				sk_conn_set_error("Redis%s did not answer within seckill.redis_timeout (%d ms)",
								  sk_nnodes > 1 ? psprintf(" at %s:%d", waiting->host, waiting->port) : "",
								  seckill_redis_timeout);
				sk_conn_disconnect(NULL);
			}
			return false;
		}
	}
}

static void
append_command(StringInfo buf, const SkPipeline *p, int cmd)
{
	int			start = cmd == 0 ? 0 : p->ends[cmd - 1];

	appendBinaryStringInfo(buf, p->buf.data + start, p->ends[cmd] - start);
}

/*
 * Commands on their way: what each connection owes (NodeShare), and when
 * they went out.  The replies' deadline does not count the time between
 * the sending and the reading, which is the caller's (sk_pipeline_send).
 */
typedef struct Outbound
{
	NodeShare  *share;
	TimestampTz start;
	TimestampTz sent;
	TimestampTz deadline;
} Outbound;

/*
 * Send commands cmds[0..n-1] of p (all of them, in order, when cmds is
 * NULL), command k to node to[k] after an ASKING when asking[k], to every
 * node at once, by the deadline.  A command whose slot no node serves is
 * not sent: its reply, in out[], is a CLUSTERDOWN error.
 */
static bool
send_out(SkPipeline *p, int n, const int *cmds, const int *to, const bool *asking, SkReply *out,
		 TimestampTz deadline, Outbound *ob)
{
	NodeShare  *share = palloc0(sizeof(NodeShare) * sk_nnodes);
	bool		whole = cmds == NULL && asking == NULL;

	ob->start = GetCurrentTimestamp();
	ob->share = share;
	ob->deadline = deadline;
	for (int k = 0; k < n; k++)
	{
		int			cmd = cmds ? cmds[k] : k;
		NodeShare  *s = to[k] >= 0 ? &share[to[k]] : NULL;

		if (s == NULL)
		{
			out[cmd].type = REDIS_REPLY_ERROR;
			out[cmd].str = psprintf("CLUSTERDOWN no master of the Redis Cluster that seckill reaches serves slot %d%s",
									p->slots[cmd], sk_ndown > 0 ? psprintf(" (%s:%d: %s)", sk_down[0].host, sk_down[0].port,
																		   sk_down[0].error) : "");
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
	for (int i = 0; i < sk_nnodes; i++)
	{
		StringInfoData buf;
		int			rc;

		if (share[i].count == 0)
			continue;
		if (p->secret)
		{
			bool		written;

			Assert(whole);
			sk_in_flight = true;
			/* no cancel before the caller clears the buffer (the deadline bounds it) */
			HOLD_INTERRUPTS();
			written = sk_tls_write_secret(sk_nodes[i].ctx, p->buf.data, p->buf.len, deadline);
			RESUME_INTERRUPTS();
			if (!written)
				return sk_conn_fail(&sk_nodes[i], "write to Redis failed");
			continue;
		}
		if (whole)
			rc = redisAppendFormattedCommand(sk_nodes[i].ctx, p->buf.data, p->buf.len);
		else
		{
			initStringInfo(&buf);
			for (int k = 0; k < share[i].count; k++)
				if (share[i].cmds[k] < 0)
					appendStringInfoString(&buf, "*1\r\n$6\r\nASKING\r\n");
				else
					append_command(&buf, p, share[i].cmds[k]);
			rc = redisAppendFormattedCommand(sk_nodes[i].ctx, buf.data, buf.len);
			pfree(buf.data);
		}
		if (rc != REDIS_OK)
			return sk_conn_fail(&sk_nodes[i], "could not queue a Redis command");
		sk_in_flight = true;
	}
	for (int i = 0; i < sk_nnodes; i++)
		if (share[i].count > 0 && !flush_output(&sk_nodes[i], deadline))
			return false;
	pg_atomic_fetch_add_u64(&seckill_figures->counters.redis_round_trips, 1);
	for (int i = 0; sk_connected && i < sk_nnodes; i++)
		if (share[i].count > 0 && sk_published[i] >= 0)
			pg_atomic_fetch_add_u64(&seckill_redis_nodes->node[sk_published[i]].round_trips, 1);
	ob->sent = GetCurrentTimestamp();
	return true;
}

/*
 * Read the replies of send_out's commands into out[] by its deadline, moved
 * on by the time since they went out.
 */
static bool
read_back(Outbound *ob, int n, const int *cmds, const int *to, SkReply *out)
{
	TimestampTz away = GetCurrentTimestamp() - ob->sent;

	ob->deadline += away;
	if (!read_replies(ob->share, out, ob->deadline))
		return false;
	sk_in_flight = false;
	for (int k = 0; k < n; k++)
		if (to[k] >= 0 && !sk_failover_serving(&out[cmds ? cmds[k] : k], &sk_nodes[to[k]]))
			return false;
	seckill_hist_record(&seckill_figures->redis_latency, GetCurrentTimestamp() - ob->start - away);
	return true;
}

/* send_out, then read_back. */
static bool
send_to(SkPipeline *p, int n, const int *cmds, const int *to, const bool *asking, SkReply *out,
		TimestampTz *deadline)
{
	Outbound	ob;

	if (!send_out(p, n, cmds, to, asking, out, *deadline, &ob) ||
		!read_back(&ob, n, cmds, to, out))
		return false;
	*deadline = ob.deadline;
	return true;
}

/* Send the whole pipeline to one node. */
bool
sk_pipeline_send_to_node(SkNode *node, SkPipeline *p, SkReply *out)
{
	int		   *to = palloc(sizeof(int) * Max(p->count, 1));
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);

	for (int i = 0; i < p->count; i++)
		to[i] = node - sk_nodes;
	return send_to(p, p->count, NULL, to, NULL, out, &deadline);
}

void
sk_pipeline_init(SkPipeline *p)
{
	initStringInfo(&p->buf);
	p->count = 0;
	p->max = 16;
	p->ends = palloc(sizeof(int) * p->max);
	p->slots = palloc(sizeof(int) * p->max);
	p->secret = false;
}

/* The command's slot is its first key's: argv[1] when it has one. */
void
sk_pipeline_add_command(SkPipeline *p, int argc, const char **argv, const size_t *lens, int key)
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
	sk_pipeline_add_command(p, argc, argv, lens, 1);
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
	sk_pipeline_add_command(p, argc, argv, NULL, nkeys > 0 ? 3 : argc);
	pfree(argv);
}

bool
sk_pipeline_load_scripts(SkNode *node)
{
	SkPipeline p;
	SkReply    *replies = palloc(sizeof(SkReply) * Max(nscripts, 1));

	sk_pipeline_init(&p);
	for (int i = 0; i < nscripts; i++)
	{
		const char *argv[] = {"SCRIPT", "LOAD", script_source[i]};

		sk_pipeline_add(&p, 3, argv, NULL);
	}
	if (!sk_pipeline_send_to_node(node, &p, replies))
		return false;
	for (int i = 0; i < nscripts; i++)
	{
		if (replies[i].type != REDIS_REPLY_STRING || replies[i].len != 40)
		{
			sk_conn_set_error("SCRIPT LOAD failed: %s", replies[i].str ? replies[i].str : "unexpected reply");
			sk_conn_disconnect(NULL);
			return false;
		}
		memcpy(script_sha[i], replies[i].str, 41);
	}
	return true;
}

/*
 * Times one pipeline's commands are sent again (NOSCRIPT, MOVED, ASK,
 * TRYAGAIN) before their replies stand.  TRYAGAIN lasts while its slot's keys
 * move, and the whole round waits for it: a few short pauses, then the
 * caller hears busy (sk_reply_is_moving).
 */
#define RESEND_RETRIES 5
#define TRYAGAIN_PAUSE_MS 2

/* A pipeline on its way (sk_pipeline_send), its replies not read yet. */
struct SkFlight
{
	SkPipeline *p;
	SkReply    *replies;
	int		   *to;				/* each command's connection */
	Outbound	out;
	bool		failed;			/* Redis failed already */
};

/*
 * Send the pipeline to every master its commands go to, not waiting for the
 * replies: sk_pipeline_receive() reads them.  Until then Redis may not be
 * used (sk_redis_in_flight()); work done meanwhile is not counted against
 * seckill.redis_timeout, which bounds the sending and the reading.
 */
SkFlight *
sk_pipeline_send(SkPipeline *p)
{
	SkFlight   *f = palloc0(sizeof(SkFlight));

	f->p = p;
	if (!sk_connected || p->count == 0)
	{
		f->failed = true;
		return f;
	}
	f->replies = palloc0(sizeof(SkReply) * p->count);
	f->to = palloc(sizeof(int) * p->count);
	for (int i = 0; i < p->count; i++)
		f->to[i] = sk_conn_cluster ? sk_cluster_node_of(f->p->slots[i]) : 0;
	f->failed = !send_out(p, p->count, NULL, f->to, NULL, f->replies,
						  TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout),
						  &f->out);
	return f;
}

/*
 * Read a sent pipeline's replies, all of them.  NULL when Redis failed: the
 * connections are then closed and sk_redis_error() says why.  The commands
 * Redis answered without running them are sent again where the reply says
 * (sk_topology_redirect()), while time is left; the others ran and are not
 * repeated.
 */
SkReply *
sk_pipeline_receive(SkFlight *f)
{
	SkPipeline *p = f->p;
	SkReply    *replies = f->replies;
	int		   *to = f->to;
	int		   *cmds;
	bool	   *asking;
	bool	   *was_asking;
	bool	   *reload;
	TimestampTz deadline;

	if (f->failed || !read_back(&f->out, p->count, NULL, to, replies))
		return NULL;
	deadline = f->out.deadline;

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

			if (!sk_connected)
				return NULL;
			if (next < 0)
				continue;
			cmds[n] = i;
			to[n++] = next;
		}
		if (n == 0 || attempt >= RESEND_RETRIES || GetCurrentTimestamp() >= deadline)
			break;
		for (int i = 0; i < sk_nnodes; i++)
			if (reload[i])
			{
				ereport(LOG, (errmsg("seckill worker reloads its Lua scripts into Redis at %s:%d",
									 sk_nodes[i].host, sk_nodes[i].port)));
				if (!sk_pipeline_load_scripts(&sk_nodes[i]))
					return NULL;
			}
		if (pause)
		{
			/* not cut short by the latch, which every new request sets */
			(void) WaitLatch(NULL, WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, TRYAGAIN_PAUSE_MS, PG_WAIT_EXTENSION);
			CHECK_FOR_INTERRUPTS();
		}
		if (!send_to(p, n, cmds, to, asking, replies, &deadline))
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
 * Send the pipeline and read all its replies, all within one
 * seckill.redis_timeout (see sk_pipeline_receive).
 */
SkReply *
sk_pipeline_exec(SkPipeline *p)
{
	return sk_pipeline_receive(sk_pipeline_send(p));
}

/* A script's Lua source, for EVAL on connections other than the worker's main one. */
const char *
sk_pipeline_script_source(int script)
{
	return script_source[script];
}
