-- seckill 1.3: the worker's durable state.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.3'" to load this file. \quit

-- What the worker must remember across its restarts and the server's, in one
-- row.  sales_from_database: Redis was unreachable and the worker sold from
-- PostgreSQL alone, so Redis' stock is stale; every preheated campaign is
-- rebuilt from PostgreSQL before Redis sells again.  Only the worker writes
-- it.  Not dumped: a restored database starts with a Redis of its own.
CREATE TABLE seckill.worker_state (
	one boolean PRIMARY KEY DEFAULT true CHECK (one),
	sales_from_database boolean NOT NULL DEFAULT false,
	changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO seckill.worker_state DEFAULT VALUES;

-- The worker logs a give-back in the transaction of its round.  Checking this
-- key took a share lock on the campaign's row, so a session holding that row
-- FOR UPDATE made every purchase of the round wait; campaigns are closed,
-- never deleted, and the log keeps their ids without the key.
ALTER TABLE seckill.compensations DROP CONSTRAINT compensations_campaign_id_fkey;
