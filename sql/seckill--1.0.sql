-- seckill 1.0: flash sales gated by Redis, recorded in PostgreSQL.
\echo Use "CREATE EXTENSION seckill" to load this file. \quit

CREATE SCHEMA seckill;
COMMENT ON SCHEMA seckill IS 'seckill campaigns, orders and the compensation log';

-- One row per campaign.  "sold" is kept by the worker in the same transaction
-- as the orders it commits; the CHECK makes an oversell impossible even when
-- Redis is wrong.  The low fillfactor keeps its frequent updates HOT.
CREATE TABLE seckill.campaigns (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	goods text NOT NULL CHECK (octet_length(goods) BETWEEN 1 AND 64),
	total_stock int NOT NULL CHECK (total_stock >= 0),
	sold int NOT NULL DEFAULT 0 CHECK (sold >= 0),
	starts_at timestamptz NOT NULL DEFAULT now(),
	ends_at timestamptz NOT NULL DEFAULT 'infinity',
	per_user_limit int NOT NULL DEFAULT 1 CHECK (per_user_limit >= 1),
	state text NOT NULL DEFAULT 'draft'
		CHECK (state IN ('draft', 'preheated', 'closed')),
	-- a reserved order not paid within this is cancelled by
	-- seckill_release_expired(); NULL: never
	payment_timeout interval CHECK (payment_timeout > interval '0'),
	-- may a buyer whose order was cancelled buy again?
	rebuy_after_cancel boolean NOT NULL DEFAULT true,
	created_at timestamptz NOT NULL DEFAULT now(),
	closed_at timestamptz,
	CONSTRAINT campaigns_sold_within_stock CHECK (sold <= total_stock),
	CONSTRAINT campaigns_window CHECK (starts_at < ends_at)
) WITH (fillfactor = 50);
CREATE UNIQUE INDEX campaigns_one_open_per_goods
	ON seckill.campaigns (goods) WHERE state <> 'closed';

-- The worker takes order ids in blocks of 1000 (one nextval per block); the
-- id is also the request id of the reservation in Redis' journal.
CREATE SEQUENCE seckill.order_ids INCREMENT BY 1000;

CREATE TABLE seckill.orders (
	id bigint PRIMARY KEY,
	campaign_id bigint NOT NULL REFERENCES seckill.campaigns (id),
	user_id text NOT NULL CHECK (octet_length(user_id) BETWEEN 1 AND 128),
	qty int NOT NULL CHECK (qty >= 1),
	status text NOT NULL DEFAULT 'reserved'
		CHECK (status IN ('reserved', 'paid', 'cancelled')),
	created_at timestamptz NOT NULL DEFAULT now(),
	paid_at timestamptz,
	cancelled_at timestamptz
);
CREATE INDEX orders_reserved ON seckill.orders (campaign_id, created_at) WHERE status = 'reserved';
CREATE UNIQUE INDEX orders_one_active_per_user
	ON seckill.orders (campaign_id, user_id) WHERE status <> 'cancelled';

-- Every reservation that Redis granted but PostgreSQL did not keep: its stock
-- went back to Redis.  The request id makes the log (and the give-back) idempotent.
CREATE TABLE seckill.compensations (
	request_id bigint PRIMARY KEY,
	campaign_id bigint NOT NULL REFERENCES seckill.campaigns (id),
	user_id text NOT NULL,
	qty int NOT NULL,
	reason text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION @extschema@.seckill_campaign_create(
	goods text,
	total_stock int,
	starts_at timestamptz DEFAULT now(),
	ends_at timestamptz DEFAULT 'infinity',
	per_user_limit int DEFAULT 1,
	payment_timeout interval DEFAULT NULL,
	rebuy_after_cancel boolean DEFAULT true)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	new_id bigint;
BEGIN
	IF goods IS NULL OR goods = '' OR octet_length(goods) > 64 THEN
		RAISE EXCEPTION 'invalid goods id'
			USING ERRCODE = 'invalid_parameter_value',
				  DETAIL = 'A goods id must be between 1 and 64 bytes long.';
	END IF;
	IF total_stock IS NULL OR total_stock < 0 THEN
		RAISE EXCEPTION 'total_stock must be zero or more'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF per_user_limit IS NULL OR per_user_limit < 1 THEN
		RAISE EXCEPTION 'per_user_limit must be at least 1'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF payment_timeout <= interval '0' THEN
		RAISE EXCEPTION 'payment_timeout must be positive'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Pass NULL for orders that never expire.';
	END IF;
	IF starts_at IS NULL OR ends_at IS NULL OR starts_at >= ends_at THEN
		RAISE EXCEPTION 'the sale window must start before it ends'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Pass starts_at earlier than ends_at; ends_at defaults to infinity.';
	END IF;
	IF EXISTS (SELECT 1 FROM seckill.campaigns c
			   WHERE c.goods = seckill_campaign_create.goods AND c.state <> 'closed') THEN
		RAISE EXCEPTION 'goods "%" already has an open campaign', goods
			USING ERRCODE = 'unique_violation',
				  HINT = 'Close it with seckill_close() first.';
	END IF;
	INSERT INTO seckill.campaigns (goods, total_stock, starts_at, ends_at, per_user_limit,
		payment_timeout, rebuy_after_cancel)
	VALUES (goods, total_stock, starts_at, ends_at, per_user_limit,
		payment_timeout, coalesce(rebuy_after_cancel, true))
	RETURNING id INTO new_id;
	RETURN new_id;
END
$$;

CREATE FUNCTION @extschema@.seckill_preheat(goods text)
RETURNS int
AS 'MODULE_PATHNAME', 'seckill_preheat'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_buy(user_id text, goods text, qty int DEFAULT 1,
	OUT status text, OUT order_id bigint)
AS 'MODULE_PATHNAME', 'seckill_buy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_order(user_id text, goods text,
	OUT status text, OUT order_id bigint, OUT qty int, OUT created_at timestamptz)
AS 'MODULE_PATHNAME', 'seckill_order'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_close(goods text)
RETURNS int
AS 'MODULE_PATHNAME', 'seckill_close'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Payment of a reserved order.  Idempotent: paying a paid order is a no-op.
CREATE FUNCTION @extschema@.seckill_pay(order_id bigint)
RETURNS text
LANGUAGE plpgsql
-- the application role that may pay needs no UPDATE on seckill.orders
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s text;
BEGIN
	IF order_id IS NULL THEN
		RAISE EXCEPTION 'order_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	SELECT o.status INTO s FROM seckill.orders o WHERE o.id = seckill_pay.order_id FOR UPDATE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no order %', order_id USING ERRCODE = 'no_data_found';
	END IF;
	IF s = 'cancelled' THEN
		RAISE EXCEPTION 'order % is cancelled', order_id
			USING ERRCODE = 'object_not_in_prerequisite_state',
				  HINT = 'Its stock went back on sale; the buyer may buy again if the campaign allows it.';
	END IF;
	IF s = 'reserved' THEN
		UPDATE seckill.orders o SET status = 'paid', paid_at = now() WHERE o.id = seckill_pay.order_id;
	END IF;
	RETURN 'paid';
END
$$;

-- Cancellation of a reserved order: its stock goes back on sale, in
-- PostgreSQL and in Redis.  Idempotent: cancelling a cancelled order is a no-op.
CREATE FUNCTION @extschema@.seckill_cancel(order_id bigint)
RETURNS text
AS 'MODULE_PATHNAME', 'seckill_cancel'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Cancels the reserved orders of one campaign that outlived its
-- payment_timeout, in batches, under the campaign's lock.
CREATE FUNCTION seckill.release_campaign(campaign_id bigint,
	OUT released int, OUT released_qty int)
AS 'MODULE_PATHNAME', 'seckill_release_campaign'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_release_expired()
RETURNS TABLE (campaign_id bigint, campaign_goods text, released int, released_qty int)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT c.id, c.goods, r.*
	FROM seckill.campaigns c,
		 LATERAL seckill.release_campaign(c.id) r
	WHERE c.state = 'preheated' AND c.payment_timeout IS NOT NULL
	ORDER BY c.id
$$;

-- More stock for the open campaign of this goods, or less (never below what
-- is sold), in PostgreSQL and Redis together.  Returns the new total_stock.
CREATE FUNCTION @extschema@.seckill_restock(goods text, delta int)
RETURNS int
AS 'MODULE_PATHNAME', 'seckill_restock'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The Redis side of one campaign, as the worker sees it.
CREATE FUNCTION seckill.redis_state(campaign_id bigint,
	OUT redis_stock int, OUT redis_buyers bigint, OUT in_flight bigint,
	OUT sold_out_cached bool)
AS 'MODULE_PATHNAME', 'seckill_redis_state'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_status(goods text)
RETURNS TABLE (campaign_id bigint, state text, total_stock int,
	sold int, pg_stock int, redis_stock int, redis_buyers bigint,
	in_flight bigint, sold_out_cached bool, starts_at timestamptz,
	ends_at timestamptz, sales_path text)
LANGUAGE plpgsql
-- runs as the extension's owner, so that a role granted this function needs
-- no grant on the internal seckill.redis_state
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	c seckill.campaigns;
BEGIN
	SELECT * INTO c FROM seckill.campaigns k WHERE k.goods = seckill_status.goods
	ORDER BY k.state <> 'closed' DESC, k.id DESC LIMIT 1;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no campaign for goods "%"', seckill_status.goods
			USING ERRCODE = 'undefined_object',
				  HINT = 'Create one with seckill_campaign_create().';
	END IF;
	campaign_id := c.id; state := c.state;
	total_stock := c.total_stock; sold := c.sold; pg_stock := c.total_stock - c.sold;
	starts_at := c.starts_at; ends_at := c.ends_at;
	SELECT CASE WHEN w.sales_from_database THEN 'database' ELSE 'redis' END
	INTO sales_path FROM seckill.worker_counters() w;
	IF c.state = 'preheated' THEN
		BEGIN
			SELECT r.redis_stock, r.redis_buyers, r.in_flight, r.sold_out_cached
			INTO redis_stock, redis_buyers, in_flight, sold_out_cached
			FROM seckill.redis_state(c.id) r;
		EXCEPTION WHEN connection_failure OR object_not_in_prerequisite_state THEN
			-- PostgreSQL's side is still worth showing when Redis or the worker is down
			RAISE WARNING '%', SQLERRM;
		END;
	END IF;
	RETURN NEXT;
END
$$;

-- The worker's totals since the server started: why the figures are what they are.
CREATE FUNCTION seckill.worker_counters(OUT rounds bigint, OUT purchases bigint,
	OUT redis_round_trips bigint, OUT commits bigint, OUT compensations bigint,
	OUT sales_from_database boolean)
AS 'MODULE_PATHNAME', 'seckill_worker_counters'
LANGUAGE C VOLATILE PARALLEL SAFE;

-- Compares one campaign in Redis with PostgreSQL under the campaign's lock,
-- settles its journal and rebuilds it from PostgreSQL when they differ.
CREATE FUNCTION seckill.reconcile_campaign(campaign_id bigint,
	OUT redis_stock_before int, OUT expected_stock int, OUT buyers_before bigint,
	OUT buyers_expected bigint, OUT journal_committed int,
	OUT journal_compensated int, OUT repaired bool)
AS 'MODULE_PATHNAME', 'seckill_reconcile_campaign'
LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;

CREATE FUNCTION @extschema@.seckill_reconcile(goods text DEFAULT NULL)
RETURNS TABLE (campaign_id bigint, campaign_goods text, redis_stock_before int,
	expected_stock int, buyers_before bigint, buyers_expected bigint,
	journal_committed int, journal_compensated int, repaired bool)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
	SELECT c.id, c.goods, r.*
	FROM seckill.campaigns c,
		 LATERAL seckill.reconcile_campaign(c.id) r
	WHERE c.state = 'preheated'
	  AND (seckill_reconcile.goods IS NULL OR c.goods = seckill_reconcile.goods)
	ORDER BY c.id
$$;

-- A new installation of the extension must not inherit the state a dropped
-- one left in shared memory: its cached campaigns, and the block of order ids
-- the worker took from its sequence.
CREATE FUNCTION seckill.reset_shared_state()
RETURNS void
AS 'MODULE_PATHNAME', 'seckill_reset_shared_state'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

SELECT seckill.reset_shared_state();

-- Admin functions are for the DBA; applications get seckill_buy and
-- seckill_order through explicit GRANTs (see the README).
REVOKE ALL ON FUNCTION @extschema@.seckill_campaign_create(text, int, timestamptz, timestamptz, int, interval, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_pay(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_cancel(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_release_expired() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_restock(text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.release_campaign(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_preheat(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_close(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_status(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_reconcile(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.redis_state(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.reconcile_campaign(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.reset_shared_state() FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.worker_counters() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_buy(text, text, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_order(text, text) FROM PUBLIC;
