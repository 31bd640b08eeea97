-- seckill 1.6: where Redis keeps each campaign.  The seckill.redis_nodes
-- view shows the masters the worker is connected to (one Redis, or the
-- masters of a Redis Cluster): whether each is reached, the slots it serves
-- and the round trips it took; seckill_campaign_nodes() shows which master
-- holds each stock shard of a campaign.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.6'" to load this file. \quit

CREATE FUNCTION seckill.redis_nodes_rows(OUT node text, OUT connected boolean, OUT slots int,
	OUT round_trips bigint, OUT error text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'seckill_redis_nodes_rows'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW seckill.redis_nodes AS SELECT * FROM seckill.redis_nodes_rows();
COMMENT ON VIEW seckill.redis_nodes IS 'the Redis masters the seckill worker is connected to, as it last saw them';

CREATE FUNCTION seckill.campaign_nodes_rows(campaign_id bigint, shards int,
	OUT shard int, OUT slot int, OUT redis_node text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'seckill_campaign_nodes_rows'
LANGUAGE C VOLATILE STRICT PARALLEL SAFE;

-- The Redis master of each stock shard of the campaign of goods (its open
-- one, else its latest): NULL where no master the worker reaches serves it.
CREATE FUNCTION @extschema@.seckill_campaign_nodes(goods text)
RETURNS TABLE (shard int, slot int, redis_node text)
LANGUAGE plpgsql
-- runs as the extension's owner, like seckill_status()
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	c seckill.campaigns;
BEGIN
	SELECT * INTO c FROM seckill.campaigns k WHERE k.goods = seckill_campaign_nodes.goods
	ORDER BY k.state <> 'closed' DESC, k.id DESC LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no campaign for goods "%"', seckill_campaign_nodes.goods
			USING ERRCODE = 'undefined_object',
				  HINT = 'Create one with seckill_campaign_create().';
	END IF;
	RETURN QUERY SELECT r.shard, r.slot, r.redis_node FROM seckill.campaign_nodes_rows(c.id, c.shards) r;
END
$$;

SELECT seckill.sql_changed();

REVOKE ALL ON FUNCTION seckill.redis_nodes_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.campaign_nodes_rows(bigint, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_campaign_nodes(text) FROM PUBLIC;
