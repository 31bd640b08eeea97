/*-------------------------------------------------------------------------
 *
 * queue_tickets.c
 *		The waiting lines' tickets in shared memory: an open-addressing
 *		table from a buyer (campaign and user) to its ticket, written by the
 *		worker as it gives places, read by backends without a lock.
 *
 * A slot's value is written before its key (a write barrier) and read after
 * it (a read barrier); a ticket never changes once given, but a join before
 * the start is kept as SECKILL_TICKET_EARLY until the draw numbers it (one
 * atomic write of the value).  The worker clears the table only while no
 * line is open, and a cleared slot reads as missing.  A slot keeps 88 bits of the buyer: a 64-bit hash as
 * its key, 24 more bits beside the ticket (tickets below 2^40), so that two
 * buyers of a line of a million share a slot about once in 10^14.  The
 * table only answers polls (seckill_queue_status); a purchase reads the
 * buyer's place in PostgreSQL.  A buyer missing (the table full, or its
 * line not read yet) is read there too.
 *
 *-------------------------------------------------------------------------
 */
#include "shared/queue_tickets.h"

#include "common/hashfn.h"
#include "port/atomics.h"
#include "shared/shmem.h"

/* probes before a buyer is taken for missing, or the table for full */
#define MAX_PROBES 64
#define TICKET_BITS 40
#define TICKET_MASK ((UINT64CONST(1) << TICKET_BITS) - 1)
/* SECKILL_TICKET_EARLY in a slot */
#define EARLY_VALUE TICKET_MASK

typedef struct TicketSlot
{
	pg_atomic_uint64 key;		/* 0: free */
	pg_atomic_uint64 value;		/* check bits << TICKET_BITS | ticket */
} TicketSlot;

typedef struct SeckillTickets
{
	pg_atomic_uint32 used;		/* slots taken, the worker's count */
	TicketSlot	slots[FLEXIBLE_ARRAY_MEMBER];	/* seckill_queue_tickets of them */
} SeckillTickets;

static SeckillTickets *tickets = NULL;

static Size
tickets_size(void)
{
	return add_size(offsetof(SeckillTickets, slots),
					mul_size(seckill_queue_tickets, sizeof(TicketSlot)));
}

static void
tickets_init(void *base, bool found, LWLockPadded *lwlocks)
{
	tickets = base;
	if (found)
		return;
	pg_atomic_init_u32(&tickets->used, 0);
	for (int i = 0; i < seckill_queue_tickets; i++)
	{
		pg_atomic_init_u64(&tickets->slots[i].key, 0);
		pg_atomic_init_u64(&tickets->slots[i].value, 0);
	}
}

void
seckill_tickets_register(void)
{
	static const SeckillShmemPart part = {"seckill queue tickets", 0, tickets_size, tickets_init};

	seckill_shmem_register(&part);
}

/*
 * The buyer's key (never 0) and check bits: of the user in the campaign,
 * named by its id and creation time (a campaign of a later installation of
 * the extension may have the same id).
 */
static uint64
buyer_hash(const SeckillCampaignRow *campaign, const char *user_id, uint64 *check)
{
	size_t		len = strlen(user_id);
	uint64		seed = hash_bytes_extended((const unsigned char *) &campaign->id, sizeof(campaign->id),
										   (uint64) campaign->created_at);
	uint64		key = hash_bytes_extended((const unsigned char *) user_id, len, seed);

	*check = hash_bytes_extended((const unsigned char *) user_id, len,
								 seed ^ UINT64CONST(0x9e3779b97f4a7c15)) >> TICKET_BITS;
	return key != 0 ? key : 1;
}

/* Backends: the buyer's ticket, 0 when the table does not have it. */
int64
seckill_ticket_find(const SeckillCampaignRow *campaign, const char *user_id)
{
	uint64		check;
	uint64		key;

	if (seckill_queue_tickets == 0)
		return 0;
	key = buyer_hash(campaign, user_id, &check);
	for (int p = 0; p < MAX_PROBES; p++)
	{
		TicketSlot *slot = &tickets->slots[(key + p) % seckill_queue_tickets];
		uint64		k = pg_atomic_read_u64(&slot->key);
		uint64		v;

		if (k == 0)
			return 0;
		if (k != key)
			continue;
		pg_read_barrier();
		v = pg_atomic_read_u64(&slot->value);
		if (v >> TICKET_BITS == check)
			return (v & TICKET_MASK) == EARLY_VALUE ? SECKILL_TICKET_EARLY : (int64) (v & TICKET_MASK);
	}
	return 0;
}

/*
 * Worker: keep the buyer's ticket (or SECKILL_TICKET_EARLY); false when the
 * table has no room for it (its polls then read PostgreSQL).
 */
bool
seckill_ticket_put(const SeckillCampaignRow *campaign, const char *user_id, int64 ticket)
{
	uint64		check;
	uint64		key;
	uint64		value;

	if (seckill_queue_tickets == 0 || (ticket <= 0 && ticket != SECKILL_TICKET_EARLY) ||
		ticket >= (int64) EARLY_VALUE)
		return false;
	key = buyer_hash(campaign, user_id, &check);
	value = check << TICKET_BITS | (ticket == SECKILL_TICKET_EARLY ? EARLY_VALUE : (uint64) ticket);
	for (int p = 0; p < MAX_PROBES; p++)
	{
		TicketSlot *slot = &tickets->slots[(key + p) % seckill_queue_tickets];
		uint64		k = pg_atomic_read_u64(&slot->key);

		if (k == key && pg_atomic_read_u64(&slot->value) >> TICKET_BITS == check)
		{
			/* the draw numbers an early join */
			pg_atomic_write_u64(&slot->value, value);
			return true;
		}
		if (k != 0)
			continue;
		pg_atomic_write_u64(&slot->value, value);
		pg_write_barrier();
		pg_atomic_write_u64(&slot->key, key);
		pg_atomic_fetch_add_u32(&tickets->used, 1);
		return true;
	}
	return false;
}

uint32
seckill_tickets_used(void)
{
	return seckill_queue_tickets == 0 ? 0 : pg_atomic_read_u32(&tickets->used);
}

/* Worker, while no line is open: every slot free again. */
void
seckill_tickets_clear(void)
{
	for (int i = 0; i < seckill_queue_tickets; i++)
	{
		pg_atomic_write_u64(&tickets->slots[i].key, 0);
		pg_atomic_write_u64(&tickets->slots[i].value, 0);
	}
	pg_atomic_write_u32(&tickets->used, 0);
}
