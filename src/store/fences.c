/*-------------------------------------------------------------------------
 *
 * fences.c
 *		Fencing tokens (seckill.fence_tokens) and the writes they guard
 *		(seckill.fences).
 *
 *-------------------------------------------------------------------------
 */
#include "store/store.h"

#include "catalog/pg_type.h"
#include "shared/shmem.h"
#include "store/sql.h"
#include "utils/builtins.h"

/*
 * Fencing tokens come in blocks of FENCE_BLOCK from seckill.fence_tokens
 * (INCREMENT BY 1000), handed out in the order of the grants: the worker is
 * their only giver, and a new worker (or installation) starts a new block,
 * above every token given before.
 */
#define FENCE_BLOCK 1000

static int64 fence_next = 0;
static int64 fence_last = -1;
static uint32 fence_generation = 0;

/* Does the next fencing token need a transaction (a new block)? */
bool
store_fence_token_needs_block(void)
{
	if (pg_atomic_read_u32(&seckill_shared->install_generation) != fence_generation)
	{
		fence_generation = pg_atomic_read_u32(&seckill_shared->install_generation);
		fence_next = 0;
		fence_last = -1;
	}
	return fence_next > fence_last;
}

/* The next fencing token; inside a transaction when a new block is needed. */
int64
store_fence_token(void)
{
	if (store_fence_token_needs_block())
	{
		bool		isnull;

		store_run("SELECT pg_catalog.nextval('seckill.fence_tokens')", 0, NULL, NULL, SPI_OK_SELECT);
		fence_next = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		fence_last = fence_next + FENCE_BLOCK - 1;
	}
	return fence_next++;
}

/*
 * Inside a transaction about to write under a lock: refuse (55P03) a
 * fencing token older than one that already wrote under that name, as
 * seckill_fence_check() does for SQL callers.
 */
void
store_fence(const char *name, int64 token)
{
	Oid			types[2] = {TEXTOID, INT8OID};
	Datum		values[2] = {CStringGetTextDatum(name), Int64GetDatum(token)};

	store_run_kept("INSERT INTO seckill.fences AS f (name, token) VALUES ($1, $2) "
		"ON CONFLICT ON CONSTRAINT fences_pkey DO UPDATE SET token = EXCLUDED.token, checked_at = pg_catalog.now() "
		"WHERE f.token <= EXCLUDED.token", 2, types, values, SPI_OK_INSERT);
	if (SPI_processed == 0)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("fencing token " INT64_FORMAT " of \"%s\" is stale", token, name),
				 errdetail("A later holder of the lock already wrote; this one's lease ran out.")));
}
