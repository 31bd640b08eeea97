-- seckill 1.9: storefront reads.  Before and during a sale most requests
-- only ask for a product's state, countdown and remaining stock.
-- seckill.storefront answers them from seckill.campaigns and the sold-out
-- flag in shared memory, in the caller's backend: no worker, no Redis, no
-- lock but the table's, so a storefront can poll it at any rate.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.9'" to load this file. \quit

-- The sold-out flag in shared memory by which backends answer sold_out.
-- STABLE, so that the view that calls it is flattened into its reader's
-- query (a volatile call would keep it a subquery of its own).  Harmless to
-- anyone (a campaign id in, a boolean out), and a view's reader needs
-- EXECUTE on the functions the view calls: left executable by PUBLIC.
CREATE FUNCTION seckill.sold_out_cached(campaign_id bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'seckill_sold_out_cached'
LANGUAGE C STABLE STRICT PARALLEL RESTRICTED;

-- One row per open campaign, found by its goods through the unique index
-- campaigns_one_open_per_goods.  Its state in seckill_buy's words, as a
-- buyer would be answered now.  "remaining" is the stock PostgreSQL has not
-- sold (committed orders only, so it may run a round behind Redis), and 0
-- once the backends answer sold_out.
CREATE VIEW seckill.storefront AS
SELECT
	c.goods,
	c.id AS campaign_id,
	CASE
		WHEN now() >= c.ends_at THEN 'ended'
		WHEN c.state = 'draft' OR now() < c.starts_at THEN 'not_started'
		WHEN c.sold >= c.total_stock OR seckill.sold_out_cached(c.id) THEN 'sold_out'
		ELSE 'on_sale'
	END AS state,
	c.starts_at,
	c.ends_at,
	CASE WHEN c.starts_at > now() THEN c.starts_at - now() ELSE interval '0' END AS starts_in,
	c.total_stock,
	CASE WHEN seckill.sold_out_cached(c.id) THEN 0 ELSE c.total_stock - c.sold END AS remaining
FROM seckill.campaigns c
WHERE c.state <> 'closed';
COMMENT ON VIEW seckill.storefront IS 'each open campaign as a storefront shows it: state, countdown, remaining stock; read without the worker or Redis';

SELECT seckill.sql_changed();
