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
 * jump.  The fencing tokens do (locks.h).
 *
 *-------------------------------------------------------------------------
 */
#include "redlock.h"

#include <hiredis/hiredis.h>

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

char	   *seckill_redlock_nodes = NULL;

typedef struct RedlockNode
{
	char		host[256];
	int			port;
	redisContext *ctx;			/* NULL: not connected */
	bool		sent;			/* a command awaits its answer */
} RedlockNode;

static RedlockNode *nodes = NULL;
static int	nnodes = 0;
static char *parsed = NULL;		/* the setting nodes[] was made from */

static void
node_close(RedlockNode *n, const char *why)
{
	if (n->ctx == NULL)
		return;
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

/* Check hook of seckill.redlock_nodes: an odd count of host:port, at least 3. */
bool
sk_redlock_check_nodes(char **newval, void **extra, GucSource source)
{
	char	   *list;
	char	   *item;
	char	   *save;
	int			n = 0;

	if (*newval == NULL || (*newval)[0] == '\0')
		return true;
	list = pstrdup(*newval);
	for (item = strtok_r(list, ", ", &save); item; item = strtok_r(NULL, ", ", &save))
	{
		char	   *colon = strrchr(item, ':');
		int			port = colon ? atoi(colon + 1) : 0;

		if (colon == NULL || colon == item || port < 1 || port > 65535)
		{
			GUC_check_errdetail("\"%s\" is not host:port.", item);
			pfree(list);
			return false;
		}
		n++;
	}
	pfree(list);
	if (n < 3 || n % 2 == 0)
	{
		GUC_check_errdetail("Redlock needs an odd number of nodes, at least 3; %d given.", n);
		return false;
	}
	return true;
}

/* Wait for the node's socket, the latch and interrupts heard; false at the deadline. */
static bool
node_wait(RedlockNode *n, int events, TimestampTz deadline)
{
	for (;;)
	{
		long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		int			rc;

		if (ms <= 0)
			return false;
		rc = WaitLatchOrSocket(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | WL_TIMEOUT | events,
							   n->ctx->fd, ms, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
		{
			/* requests queue meanwhile: the worker's loop looks again after this */
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (rc & events)
			return true;
	}
}

/* Send one EVAL of the script to the node; false when it failed (and is closed). */
static bool
node_send(RedlockNode *n, SkScript script, const char *key, int nargs, const char **args,
		  TimestampTz deadline)
{
	const char *argv[8];
	int			argc = 0;
	int			done = 0;

	n->sent = false;
	if (n->ctx == NULL)
	{
		n->ctx = redisConnectNonBlock(n->host, n->port);
		if (n->ctx == NULL || n->ctx->err)
		{
			if (n->ctx)
				node_close(n, n->ctx->errstr);
			return false;
		}
	}
	argv[argc++] = "EVAL";
	argv[argc++] = sk_script_source(script);
	argv[argc++] = "1";
	argv[argc++] = key;
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	if (redisAppendCommandArgv(n->ctx, argc, argv, NULL) != REDIS_OK)
	{
		node_close(n, "could not queue a command");
		return false;
	}
	while (!done)
	{
		if (redisBufferWrite(n->ctx, &done) == REDIS_ERR)
		{
			node_close(n, n->ctx->errstr[0] ? n->ctx->errstr : "write failed");
			return false;
		}
		if (!done && !node_wait(n, WL_SOCKET_WRITEABLE, deadline))
		{
			node_close(n, "no room to write within seckill.redis_timeout");
			return false;
		}
	}
	n->sent = true;
	return true;
}

/* The integer answer of the node to what was sent; -1 when it failed (and is closed). */
static long long
node_read(RedlockNode *n, TimestampTz deadline)
{
	void	   *raw = NULL;
	long long	result = -1;

	if (!n->sent)
		return -1;
	n->sent = false;
	for (;;)
	{
		if (redisGetReplyFromReader(n->ctx, &raw) == REDIS_ERR)
		{
			node_close(n, "bad reply");
			return -1;
		}
		if (raw != NULL)
			break;
		if (!node_wait(n, WL_SOCKET_READABLE, deadline))
		{
			node_close(n, "no answer within seckill.redis_timeout");
			return -1;
		}
		if (redisBufferRead(n->ctx) == REDIS_ERR)
		{
			node_close(n, n->ctx->errstr[0] ? n->ctx->errstr : "read failed");
			return -1;
		}
	}
	if (((redisReply *) raw)->type == REDIS_REPLY_INTEGER)
		result = ((redisReply *) raw)->integer;
	freeReplyObject(raw);
	return result;
}

/*
 * Run a lock script on every node: returns how many answered 1, and in
 * *answered how many answered at all.
 */
static int
call_all(SkScript script, const char *key, int nargs, const char **args, int *answered)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), seckill_redis_timeout);
	int			yes = 0;

	parse_nodes();
	*answered = 0;
	for (int i = 0; i < nnodes; i++)
		(void) node_send(&nodes[i], script, key, nargs, args, deadline);
	for (int i = 0; i < nnodes; i++)
	{
		long long	r = node_read(&nodes[i], deadline);

		if (r >= 0)
			(*answered)++;
		if (r == 1)
			yes++;
	}
	return yes;
}

static int
quorum(void)
{
	return nnodes / 2 + 1;
}

SkRedlockResult
sk_redlock_acquire(const char *key, const char *owner, int lease_ms, char *why, size_t whylen)
{
	TimestampTz start = GetCurrentTimestamp();
	const char *args[2] = {owner, psprintf("%d", lease_ms)};
	int			answered;
	int			granted = call_all(SK_SCRIPT_ACQUIRE, key, 2, args, &answered);
	long		took = TimestampDifferenceMilliseconds(start, GetCurrentTimestamp());
	long		validity = lease_ms - took - (lease_ms / 100 + 2);

	if (granted >= quorum() && validity > 0)
		return REDLOCK_ACQUIRED;
	/* a minority, or a majority too late: give back what was granted */
	(void) call_all(SK_SCRIPT_UNLOCK, key, 1, args, &answered);
	if (answered < quorum())
	{
		snprintf(why, whylen, "only %d of %d Redlock nodes (seckill.redlock_nodes) answered: a lock needs a majority",
				 answered, nnodes);
		return REDLOCK_FAILED;
	}
	return REDLOCK_BUSY;
}

bool
sk_redlock_renew(const char *key, const char *owner, int lease_ms)
{
	const char *args[2] = {owner, psprintf("%d", lease_ms)};
	int			answered;

	return call_all(SK_SCRIPT_RENEW, key, 2, args, &answered) >= quorum();
}

int
sk_redlock_release(const char *key, const char *owner)
{
	int			answered;
	int			released = call_all(SK_SCRIPT_UNLOCK, key, 1, &owner, &answered);

	if (answered < quorum())
		return -1;
	return released >= quorum() ? 1 : 0;
}
