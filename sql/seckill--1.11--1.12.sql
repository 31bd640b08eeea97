-- seckill 1.12: the rest of the lock family.  seckill_lock_fair grants the
-- exclusive lock in the order its takers came to wait; seckill_lock_shared
-- (and its transaction-scoped twin) holds it beside other shared holders,
-- never beside an exclusive one.  seckill.locks shows each lock's mode and
-- the place in line of the fair takers that wait.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.12'" to load this file. \quit

CREATE FUNCTION @extschema@.seckill_lock_fair(name text, wait interval DEFAULT '0',
	lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'seckill_lock_fair'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.seckill_lock_fair(text, interval, interval) IS 'as seckill_lock, granted in the order its takers came to wait (with wait 0 only when nobody waits); released with seckill_unlock';

CREATE FUNCTION @extschema@.seckill_lock_shared(name text, wait interval DEFAULT '0',
	lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'seckill_lock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.seckill_lock_shared(text, interval, interval) IS 'the lock held beside other shared holders, never beside an exclusive one: its fencing token, or NULL when not acquired within wait';

CREATE FUNCTION @extschema@.seckill_lock_shared_xact(name text, wait interval DEFAULT '0',
	lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'seckill_lock_shared_xact'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.seckill_lock_shared_xact(text, interval, interval) IS 'as seckill_lock_shared, released at the end of the transaction';

CREATE FUNCTION @extschema@.seckill_unlock_shared(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'seckill_unlock_shared'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.seckill_unlock_shared(text) IS 'release a lock held with seckill_lock_shared: true when released';

REVOKE ALL ON FUNCTION @extschema@.seckill_lock_fair(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_lock_shared(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_lock_shared_xact(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_unlock_shared(text) FROM PUBLIC;

-- seckill.locks gains the mode and a fair waiter's place in line.
DROP VIEW seckill.locks;
DROP FUNCTION seckill.locks_rows();
CREATE FUNCTION seckill.locks_rows(OUT name text, OUT owner_pid int, OUT scope text,
	OUT token bigint, OUT depth int, OUT state text, OUT acquired_at timestamptz,
	OUT lease_left interval, OUT renewals int, OUT mode text, OUT queue_position int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'seckill_locks_rows'
LANGUAGE C VOLATILE PARALLEL SAFE;
CREATE VIEW seckill.locks AS SELECT * FROM seckill.locks_rows();
COMMENT ON VIEW seckill.locks IS 'the locks the worker holds for SQL callers (state held, releasing, lost), and the fair takers waiting in line (state waiting, with queue_position)';
REVOKE ALL ON FUNCTION seckill.locks_rows() FROM PUBLIC;
GRANT SELECT ON seckill.locks TO pg_monitor;
GRANT EXECUTE ON FUNCTION seckill.locks_rows() TO pg_monitor;

SELECT seckill.sql_changed();
