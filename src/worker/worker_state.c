/*-------------------------------------------------------------------------
 *
 * worker_state.c
 *		The worker's state (worker_state.h), as it starts.
 *
 *-------------------------------------------------------------------------
 */
#include "worker/worker_state.h"

/* All zero but these. */
SkWorkerState sk_worker = {
	/* Redis may have restarted from a snapshot that holds old journal entries */
	.journal.needs_replay = true,
	/* no block of order ids yet */
	.order_ids.last_id = -1,
	.order_ids.block_recorded = true,
};
