-- seckill 1.2: distributed locks for SQL callers, with fencing tokens.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.2'" to load this file. \quit

-- Every acquisition of a lock gets a fencing token that only grows, even
-- across a Redis failover (a Redis counter could go back).  The worker takes
-- them in blocks of 1000 (one nextval per block) and hands them out in the
-- order of the grants.
CREATE SEQUENCE seckill.fence_tokens INCREMENT BY 1000;

-- The newest token that wrote under each lock name.
CREATE TABLE seckill.fences (
	name text PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 128),
	token bigint NOT NULL,
	checked_at timestamptz NOT NULL DEFAULT now()
);

SELECT pg_catalog.pg_extension_config_dump('seckill.fences', '');
SELECT pg_catalog.pg_extension_config_dump('seckill.fence_tokens', '');

CREATE FUNCTION @extschema@.seckill_lock(name text, wait interval DEFAULT '0',
	lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'seckill_lock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_lock_xact(name text, wait interval DEFAULT '0',
	lease interval DEFAULT NULL)
RETURNS bigint
AS 'MODULE_PATHNAME', 'seckill_lock_xact'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_unlock(name text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'seckill_unlock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Called by a write that a lock protects, in the write's own transaction:
-- refuses (SQLSTATE 55P03) a token older than one that already wrote under
-- this name, so a holder whose lease ran out during a stall cannot write
-- after the next holder.  Returns the token.
CREATE FUNCTION @extschema@.seckill_fence_check(name text, token bigint)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	newest bigint;
BEGIN
	IF name IS NULL OR token IS NULL THEN
		RAISE EXCEPTION 'name and token must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	IF name LIKE 'seckill:%' THEN
		RAISE EXCEPTION 'lock names that begin with "seckill:" are seckill''s own'
			USING ERRCODE = 'reserved_name';
	END IF;
	-- a token never issued would fence the name off for good
	IF token > (SELECT s.last_value + 999 FROM seckill.fence_tokens s) THEN
		RAISE EXCEPTION 'fencing token % was never issued', token
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Pass the token seckill_lock() returned.';
	END IF;
	INSERT INTO seckill.fences AS f (name, token) VALUES (seckill_fence_check.name, seckill_fence_check.token)
	ON CONFLICT ON CONSTRAINT fences_pkey DO UPDATE SET token = EXCLUDED.token, checked_at = now()
		WHERE f.token <= EXCLUDED.token
	RETURNING f.token INTO newest;
	IF NOT FOUND THEN
		SELECT f.token INTO newest FROM seckill.fences f WHERE f.name = seckill_fence_check.name;
		RAISE EXCEPTION 'fencing token % of lock "%" is stale', token, name
			USING ERRCODE = 'lock_not_available',
				  DETAIL = format('Token %s of a later holder already wrote.', newest),
				  HINT = 'The lock''s lease ran out while this session held it: take the lock again before writing.';
	END IF;
	RETURN newest;
END
$$;

-- The locks the worker holds for SQL callers.
CREATE FUNCTION seckill.locks_rows(OUT name text, OUT owner_pid int, OUT scope text,
	OUT token bigint, OUT depth int, OUT state text, OUT acquired_at timestamptz,
	OUT lease_left interval, OUT renewals int)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'seckill_locks_rows'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW seckill.locks AS SELECT * FROM seckill.locks_rows();

SELECT seckill.sql_changed();

REVOKE ALL ON FUNCTION @extschema@.seckill_lock(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_lock_xact(text, interval, interval) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_unlock(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_fence_check(text, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.locks_rows() FROM PUBLIC;
