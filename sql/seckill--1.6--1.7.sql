-- seckill 1.7: seckill.stats shows the request slots in use (slots_in_use,
-- in the row of all campaigns): with no calls under way it is 0, so a slot
-- lost to a fault shows.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.7'" to load this file. \quit

CREATE FUNCTION seckill.slots_in_use()
RETURNS int
AS 'MODULE_PATHNAME', 'seckill_slots_in_use_now'
LANGUAGE C VOLATILE PARALLEL SAFE;

-- a column added at the end: grants on the view stay
CREATE OR REPLACE VIEW seckill.stats AS
SELECT s.*, CASE WHEN s.campaign_id IS NULL THEN seckill.slots_in_use() END AS slots_in_use
FROM seckill.stats_rows() s;

SELECT seckill.sql_changed();

REVOKE ALL ON FUNCTION seckill.slots_in_use() FROM PUBLIC;
