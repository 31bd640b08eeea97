-- seckill 1.13: a Redis that lost the epoch.  seckill.worker_state
-- remembers the timeline this server recorded as the epoch in Redis, so a
-- missing epoch is told from a Redis never used, and whether it has
-- streamed WAL to a standby; where a failover is possible
-- (seckill.redis_epoch_lost) the server then sells nothing until
-- seckill_epoch_claim() is run on the primary.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.13'" to load this file. \quit

ALTER TABLE seckill.worker_state ADD COLUMN epoch_recorded_timeline bigint;
COMMENT ON COLUMN seckill.worker_state.epoch_recorded_timeline IS
	'the timeline this server last recorded as the epoch in Redis: Redis holding none since means it lost it; NULL: never recorded';
ALTER TABLE seckill.worker_state ADD COLUMN had_standby boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN seckill.worker_state.had_standby IS
	'this server has streamed WAL to a standby: a failover it may never learn of is possible, so with seckill.redis_epoch_lost = auto it waits when Redis lost its epoch';

CREATE FUNCTION @extschema@.seckill_epoch_claim()
RETURNS bigint
AS 'MODULE_PATHNAME', 'seckill_epoch_claim'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.seckill_epoch_claim() IS 'this server is the primary: its worker records its epoch in Redis again, also where Redis lost the one it recorded (seckill.redis_epoch_lost = wait), checks the campaigns against PostgreSQL and sells; returns its timeline. Never on a primary left behind by a failover';
REVOKE ALL ON FUNCTION @extschema@.seckill_epoch_claim() FROM PUBLIC;

SELECT seckill.sql_changed();
