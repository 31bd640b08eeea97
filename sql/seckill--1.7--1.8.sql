-- seckill 1.8: monitoring by a monitoring role.  A view's reader needs
-- EXECUTE on the functions the view calls, as well as SELECT on the view:
-- members of pg_monitor (the role PostgreSQL's own statistics views serve)
-- get both for seckill.stats, seckill.locks and seckill.redis_nodes, and
-- nothing else of the schema (not the campaigns, orders or token secrets).
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.8'" to load this file. \quit

GRANT USAGE ON SCHEMA seckill TO pg_monitor;
GRANT SELECT ON seckill.stats, seckill.locks, seckill.redis_nodes TO pg_monitor;
GRANT EXECUTE ON FUNCTION seckill.stats_rows(), seckill.slots_in_use(), seckill.locks_rows(),
	seckill.redis_nodes_rows() TO pg_monitor;

SELECT seckill.sql_changed();
