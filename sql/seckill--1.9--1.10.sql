-- seckill 1.10: storefront reads at the cost of SELECT 1.  The view
-- seckill.storefront reads seckill.campaigns through its index on every
-- call; seckill_storefront(goods) answers a preheated campaign from shared
-- memory alone (the row the worker cached, the sold-out flag, and the stock
-- the worker last saw in each Redis shard), and reads the table only for a
-- campaign that is not preheated.  seckill_storefront_json(goods) gives the
-- same as one JSON object.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.10'" to load this file. \quit

-- The open campaign of goods as seckill.storefront shows it; no row when
-- there is none.  It reads the table as the extension's owner, so a shop's
-- pages need only EXECUTE on it; nobody may call it until granted.
CREATE FUNCTION @extschema@.seckill_storefront(goods text)
RETURNS SETOF seckill.storefront
AS 'MODULE_PATHNAME', 'seckill_storefront'
LANGUAGE C STABLE ROWS 1 PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.seckill_storefront(text) IS 'the open campaign of goods as a storefront shows it (state, countdown, remaining stock), from shared memory for a preheated campaign';
REVOKE ALL ON FUNCTION @extschema@.seckill_storefront(text) FROM PUBLIC;

-- The same as one JSON object (the countdown in seconds), NULL when goods
-- has no open campaign: a scalar call, which costs its reader less than a
-- set-returning function's scan, for a page that passes it on as it is.
CREATE FUNCTION @extschema@.seckill_storefront_json(goods text)
RETURNS json
AS 'MODULE_PATHNAME', 'seckill_storefront_json'
LANGUAGE C STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION @extschema@.seckill_storefront_json(text) IS 'seckill_storefront(goods) as one JSON object, the countdown in seconds; NULL when goods has no open campaign';
REVOKE ALL ON FUNCTION @extschema@.seckill_storefront_json(text) FROM PUBLIC;

SELECT seckill.sql_changed();
