-- seckill 1.5: releases of expired orders that never walk what they cancelled.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.5'" to load this file. \quit

-- seckill_release_expired() cancels a campaign's expired orders in batches,
-- each starting after the (created_at, id) of the last order the batch
-- before it cancelled.  With id in the index, each batch starts right
-- there, instead of stepping over the entries of every order cancelled
-- before it, which stay in the index until no transaction can see them: the
-- caller's own statement runs for the whole release.  The index is rebuilt
-- under a SHARE lock on seckill.orders, which holds purchases back for as
-- long as the build takes: run the update between sales.
DROP INDEX seckill.orders_reserved;
CREATE INDEX orders_reserved ON seckill.orders (campaign_id, created_at, id) WHERE status = 'reserved';
