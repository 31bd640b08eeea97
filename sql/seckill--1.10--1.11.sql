-- seckill 1.11: several distributed locks taken as one.  seckill_lock_all
-- takes the session locks of all its names or of none; seckill_unlock_all
-- releases them.  seckill.worker_state remembers the timeline that fenced
-- this server, whatever Redis keeps.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.11'" to load this file. \quit

-- All the names or none: the fencing tokens in the order of names, or NULL
-- with nothing held when they could not all be had within wait.  The names
-- are taken in their sorted order whatever the order given, so two sessions
-- taking the same names in opposite orders never deadlock.
CREATE FUNCTION @extschema@.seckill_lock_all(names text[], wait interval DEFAULT '0',
	lease interval DEFAULT NULL)
RETURNS bigint[]
AS 'MODULE_PATHNAME', 'seckill_lock_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.seckill_lock_all(text[], interval, interval) IS 'the session locks of all the names or of none: their fencing tokens in the order of names, or NULL when they could not all be had within wait';

CREATE FUNCTION @extschema@.seckill_unlock_all(names text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'seckill_unlock_all'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.seckill_unlock_all(text[]) IS 'seckill_unlock() of each name, the last taken first: true when every one was released';

REVOKE ALL ON FUNCTION @extschema@.seckill_lock_all(text[], interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_unlock_all(text[]) FROM PUBLIC;

-- A primary left behind by a failover learns from Redis that a newer
-- timeline sells; the worker remembers it here, and stays fenced across
-- restarts even when Redis has lost that epoch since.
ALTER TABLE seckill.worker_state ADD COLUMN fenced_by_timeline bigint;
COMMENT ON COLUMN seckill.worker_state.fenced_by_timeline IS
	'a timeline at least this new sold through the Redis since a failover: the worker of an older timeline does not sell; NULL: never fenced';

SELECT seckill.sql_changed();
