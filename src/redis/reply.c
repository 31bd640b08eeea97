/*-------------------------------------------------------------------------
 *
 * reply.c
 *		Redis replies: copied out of hiredis into palloc'd memory as soon as
 *		they are read, and what they say (an error, a slot moving, no master
 *		for the slot, a number).
 *
 *-------------------------------------------------------------------------
 */
#include "redis/redis_int.h"

#include "redis/cluster.h"

void
sk_reply_copy(SkReply *dst, const redisReply *src)
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
			sk_reply_copy(&dst->element[i], src->element[i]);
	}
}

bool
sk_reply_is_error(const SkReply *r)
{
	return r->type == REDIS_REPLY_ERROR;
}

/* An error reply: true, and *why (unless why is NULL) its text; else *why NULL. */
bool
sk_reply_refused(const SkReply *r, const char **why)
{
	bool		refused = sk_reply_is_error(r);

	if (why)
		*why = refused ? r->str : NULL;
	return refused;
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

long long
sk_reply_int(const SkReply *r)
{
	if (r->type == REDIS_REPLY_INTEGER)
		return r->integer;
	if (r->type == REDIS_REPLY_STRING)
		return strtoll(r->str, NULL, 10);
	return -1;
}
