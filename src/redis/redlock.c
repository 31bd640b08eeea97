/*-------------------------------------------------------------------------
 *
 * redlock.c
 *		The SQL callers' locks on several independent Redis nodes
 *		(seckill.redlock_nodes): a lock is held only when a majority of the
 *		nodes granted it within its validity time.
 *
 * The worker sends each lock script (lua/acquire.lua, renew.lua,
 * unlock.lua) to every node at once, then reads the answers, each node
 * bounded by seckill.redis_timeout; a node that fails is closed and
 * connected again at its next use.  The validity of a new lease is its
 * length less the time the acquisition took and an allowance for clock
 * drift (1 % of the lease and 2 ms); a majority that came too late does not
 * count, and a failed acquisition is released on every node.
 *
 * Redlock guards against the loss of one Redis node; it does not make a
 * lease safe against a holder that stalls past it, nor against clocks that
 * jump.  The fencing tokens do (shared/lock_table.h).
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redlock.h"

#include <hiredis/hiredis.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

typedef struct RedlockNode
{
	char		host[256];
	int			port;
	redisContext *ctx;			/* NULL: not connected */
	TimestampTz retry_at;		/* no new connection before */
} RedlockNode;

static RedlockNode *nodes = NULL;
static int	nnodes = 0;
static char *parsed = NULL;		/* the setting nodes[] was made from */
static bool in_flight = false;	/* commands sent, not all answers read */

static void
node_close(RedlockNode *n, const char *why)
{
	if (n->ctx == NULL)
		return;
	/* a slow node left behind is no news */
	if (why != NULL)
		ereport(LOG,
				(errmsg("seckill worker closed its connection to Redlock node %s:%d: %s",
						n->host, n->port, why)));
	redisFree(n->ctx);
	n->ctx = NULL;
}

/* (Re)read seckill.redlock_nodes: "host:port,host:port,...". */
static void
parse_nodes(void)
{
	char	   *list;
	char	   *item;
	char	   *save;

	if (parsed != NULL && strcmp(parsed, seckill_redlock_nodes) == 0)
		return;
	for (int i = 0; i < nnodes; i++)
		node_close(&nodes[i], "seckill.redlock_nodes changed");
	if (nodes)
		pfree(nodes);
	if (parsed)
		pfree(parsed);
	parsed = MemoryContextStrdup(TopMemoryContext, seckill_redlock_nodes);
	nodes = MemoryContextAllocZero(TopMemoryContext, sizeof(RedlockNode) * (strlen(parsed) / 2 + 1));
	nnodes = 0;
	list = pstrdup(parsed);
	for (item = strtok_r(list, ", ", &save); item; item = strtok_r(NULL, ", ", &save))
	{
		char	   *colon = strrchr(item, ':');

		if (colon == NULL)
			continue;			/* rejected by the setting's check */
		*colon = '\0';
		strlcpy(nodes[nnodes].host, item, sizeof(nodes[nnodes].host));
		nodes[nnodes].port = atoi(colon + 1);
		nnodes++;
	}
	pfree(list);
}

bool
sk_redlock_enabled(void)
{
	return seckill_redlock_nodes != NULL && seckill_redlock_nodes[0] != '\0';
}

/* Connect (without waiting) unless connected or in a backoff; false when unusable now. */
static bool
node_connect(RedlockNode *n)
{
	TimestampTz now = GetCurrentTimestamp();

	if (n->ctx != NULL)
		return true;
	if (now < n->retry_at)
		return false;
	n->ctx = redisConnectNonBlock(n->host, n->port);
	if (n->ctx == NULL || n->ctx->err)
	{
		if (n->ctx)
			node_close(n, n->ctx->errstr);
		n->retry_at = TimestampTzPlusMilliseconds(now, 1000);
		return false;
	}
	return true;
}

static int
quorum(void)
{
	return nnodes / 2 + 1;
}

/* Has a majority answered yes to every command, or can no longer? */
static bool
decided(const int *yes, const int *answered, int ncommands)
{
	for (int c = 0; c < ncommands; c++)
		if (yes[c] < quorum() && answered[c] - yes[c] <= nnodes - quorum())
			return false;
	return true;
}

/*
 * Run commands[0..ncommands-1] (lock scripts by EVAL) on every node at once:
 * each node gets them all in one pipeline, and the answers of all nodes are
 * awaited together in one wait set, until seckill.redis_timeout.  yes[c]
 * counts the nodes that answered 1 to command c, answered[c] those that
 * answered it at all.  Once the outcome of every command is decided (a
 * majority said yes, or can no longer), the slower nodes are not waited for:
 * one hung node costs nothing.  A node left with answers unread, or that
 * failed, is closed, so that its late answers can never be read; one that
 * failed is tried again after a second.
 */
static void
call_all(const SkScriptCall *commands, int ncommands, int *yes, int *answered)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);
	int		   *got = palloc0(sizeof(int) * nnodes);	/* answers read from each node */
	bool	   *writing = palloc0(sizeof(bool) * nnodes);
	bool	   *active = palloc0(sizeof(bool) * nnodes);

	memset(yes, 0, sizeof(int) * ncommands);
	memset(answered, 0, sizeof(int) * ncommands);
	in_flight = true;
	for (int i = 0; i < nnodes; i++)
	{
		RedlockNode *n = &nodes[i];

		if (!node_connect(n))
			continue;
		for (int c = 0; c < ncommands && n->ctx; c++)
		{
			const char *argv[3 + SK_SCRIPT_CALL_KEYS + lengthof(commands[c].args)];
			int			argc = 0;

			argv[argc++] = "EVAL";
			argv[argc++] = sk_pipeline_script_source(commands[c].script);
			argv[argc++] = psprintf("%d", commands[c].nkeys);
			for (int k = 0; k < commands[c].nkeys; k++)
				argv[argc++] = commands[c].keys[k];
			for (int a = 0; a < commands[c].nargs; a++)
				argv[argc++] = commands[c].args[a];
			if (redisAppendCommandArgv(n->ctx, argc, argv, NULL) != REDIS_OK)
				node_close(n, "could not queue a command");
		}
		active[i] = writing[i] = n->ctx != NULL;
	}

	for (;;)
	{
		WaitEventSet *set;
		WaitEvent	ev[16];
		int			nev;
		int			nactive = 0;
		long		ms;

		/* move every node as far as it goes without waiting */
		for (int i = 0; i < nnodes; i++)
		{
			RedlockNode *n = &nodes[i];
			int			done = 0;

			if (!active[i])
				continue;
			if (writing[i])
			{
				if (redisBufferWrite(n->ctx, &done) == REDIS_ERR)
				{
					node_close(n, n->ctx->errstr[0] ? n->ctx->errstr : "write failed");
					active[i] = false;
					continue;
				}
				writing[i] = !done;
			}
			while (!writing[i] && got[i] < ncommands)
			{
				void	   *raw = NULL;

				if (redisGetReplyFromReader(n->ctx, &raw) == REDIS_ERR)
				{
					node_close(n, "bad reply");
					active[i] = false;
					break;
				}
				if (raw == NULL)
					break;
				answered[got[i]]++;
				if (((redisReply *) raw)->type == REDIS_REPLY_INTEGER && ((redisReply *) raw)->integer == 1)
					yes[got[i]]++;
				got[i]++;
				freeReplyObject(raw);
			}
			if (active[i] && got[i] == ncommands)
				active[i] = false;
			nactive += active[i];
		}
		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (nactive == 0)
			break;
		if (decided(yes, answered, ncommands))
		{
			for (int i = 0; i < nnodes; i++)
				if (active[i])
					node_close(&nodes[i], NULL);	/* not waited for: the outcome is known */
			break;
		}
		if (ms <= 0)
		{
			for (int i = 0; i < nnodes; i++)
				if (active[i])
				{
					node_close(&nodes[i], "no answer within seckill.redis_timeout");
					nodes[i].retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
				}
			break;
		}

		/* PG15 cannot remove an event from a set: a set for this wait only */
		set = CreateWaitEventSet(CurrentMemoryContext, nactive + 2);
		AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		for (int i = 0; i < nnodes; i++)
			if (active[i])
				AddWaitEventToSet(set, writing[i] ? WL_SOCKET_WRITEABLE : WL_SOCKET_READABLE,
								  nodes[i].ctx->fd, NULL, (void *) &nodes[i]);
		nev = WaitEventSetWait(set, ms, ev, lengthof(ev), PG_WAIT_EXTENSION);
		FreeWaitEventSet(set);
		for (int e = 0; e < nev; e++)
		{
			RedlockNode *n = (RedlockNode *) ev[e].user_data;

			if (ev[e].events & WL_LATCH_SET)
			{
				/* requests queue meanwhile: the worker's loop looks again after this */
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
			}
			else if ((ev[e].events & WL_SOCKET_READABLE) && n != NULL &&
					 redisBufferRead(n->ctx) == REDIS_ERR)
			{
				int			i = n - nodes;

				node_close(n, n->ctx->errstr[0] ? n->ctx->errstr : "read failed");
				active[i] = false;
			}
		}
	}
	in_flight = false;
}

/*
 * After an error broke off a call to the nodes: their connections may still
 * owe answers, which the next call would take for its own.  Close them.
 */
void
sk_redlock_abandon(void)
{
	if (!in_flight)
		return;
	for (int i = 0; i < nnodes; i++)
		node_close(&nodes[i], "a call was broken off while the node was answering");
	in_flight = false;
}

/* One lock script on every node: the nodes that answered 1, and *answered. */
static int
call_one(const SkScriptCall *command, int *answered)
{
	int			yes;

	parse_nodes();
	call_all(command, 1, &yes, answered);
	return yes;
}

/*
 * Take a lease of lease_ms by majority: take answers 1 on a node that
 * granted it; give gives back what was granted when no lease came of it.
 */
SkRedlockResult
sk_redlock_acquire(const SkScriptCall *take, const SkScriptCall *give, int lease_ms, char *why, size_t whylen)
{
	TimestampTz start = GetCurrentTimestamp();
	int			answered;
	int			granted = call_one(take, &answered);
	long		took = TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
	long		validity = lease_ms - took - (lease_ms / 100 + 2);
	int			released;

	if (granted >= quorum() && validity > 0)
		return REDLOCK_ACQUIRED;
	/* a minority, or a majority too late: give back what was granted */
	(void) call_one(give, &released);
	if (answered < quorum() || granted >= quorum())
	{
		snprintf(why, whylen, granted >= quorum() ?
				 "the Redlock nodes granted the lock too late for its lease of %d ms" :
				 "only %d of %d Redlock nodes (seckill.redlock_nodes) answered: a lock needs a majority",
				 granted >= quorum() ? lease_ms : answered, nnodes);
		return REDLOCK_FAILED;
	}
	return REDLOCK_BUSY;
}

/*
 * The keeper's renewals and releases, all of them in one pipeline per node:
 * result[c] is 1 when a majority answered 1, 0 when a majority answered
 * otherwise, -1 when too few nodes answered.
 */
void
sk_redlock_batch(const SkScriptCall *commands, int ncommands, int *result)
{
	int		   *yes = palloc(sizeof(int) * ncommands);
	int		   *answered = palloc(sizeof(int) * ncommands);

	parse_nodes();
	call_all(commands, ncommands, yes, answered);
	for (int c = 0; c < ncommands; c++)
		result[c] = yes[c] >= quorum() ? 1 : answered[c] >= quorum() ? 0 : -1;
}
