-- seckill 1.4: rebuilds that keep refused rebuyers.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.4'" to load this file. \quit

-- A campaign with rebuy_after_cancel = false keeps its cancelled buyers as
-- buyers in Redis.  When the worker rebuilds such a campaign from
-- PostgreSQL, it reads them in keyset pages over this index, as it reads the
-- active buyers over orders_one_active_per_user.
CREATE INDEX orders_cancelled ON seckill.orders (campaign_id, user_id) WHERE status = 'cancelled';

-- One campaign's failure no longer stops the release of the others: its row
-- says released NULL, and a WARNING says why.
CREATE OR REPLACE FUNCTION @extschema@.seckill_release_expired()
RETURNS TABLE (campaign_id bigint, campaign_goods text, released int, released_qty int)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	c record;
BEGIN
	FOR c IN SELECT k.id, k.goods FROM seckill.campaigns k
			 WHERE k.state = 'preheated' AND k.payment_timeout IS NOT NULL ORDER BY k.id LOOP
		campaign_id := c.id;
		campaign_goods := c.goods;
		BEGIN
			SELECT r.released, r.released_qty INTO released, released_qty
			FROM seckill.release_campaign(c.id) r;
		EXCEPTION WHEN OTHERS THEN
			released := NULL;
			released_qty := NULL;
			RAISE WARNING 'seckill could not release the expired orders of campaign % ("%"): %', c.id, c.goods, SQLERRM
				USING HINT = 'The other campaigns were released; the batches of this one released before the error stay released. The next run tries again.';
		END;
		RETURN NEXT;
	END LOOP;
END
$$;

-- A restore of a dump copies seckill.campaigns, whose trigger mints a secret
-- for each campaign, then copies the saved secrets: each saved secret
-- replaces the one just minted, so that the restore neither fails nor
-- invalidates the tokens issued before the dump.
CREATE FUNCTION seckill.replace_token_secret()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	DELETE FROM seckill.token_secrets t WHERE t.campaign_id = NEW.campaign_id;
	RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION seckill.replace_token_secret() FROM PUBLIC;

CREATE TRIGGER token_secrets_replace BEFORE INSERT ON seckill.token_secrets
	FOR EACH ROW EXECUTE FUNCTION seckill.replace_token_secret();

-- Payment and cancellation with the buyer's id: an order of another user is
-- answered as no order at all, so that an application passing the ids its
-- users send cannot pay or cancel someone else's order, nor learn that it
-- exists.
CREATE FUNCTION seckill.check_order_owner(order_id bigint, user_id text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	IF order_id IS NULL OR user_id IS NULL THEN
		RAISE EXCEPTION 'order_id and user_id must not be null' USING ERRCODE = 'null_value_not_allowed';
	END IF;
	PERFORM FROM seckill.orders o WHERE o.id = check_order_owner.order_id AND o.user_id = check_order_owner.user_id;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no order % of user "%"', order_id, user_id USING ERRCODE = 'no_data_found';
	END IF;
END
$$;

CREATE FUNCTION @extschema@.seckill_pay(order_id bigint, user_id text)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM seckill.check_order_owner(order_id, user_id);
	RETURN @extschema@.seckill_pay(order_id);
END
$$;

CREATE FUNCTION @extschema@.seckill_cancel(order_id bigint, user_id text)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	PERFORM seckill.check_order_owner(order_id, user_id);
	RETURN @extschema@.seckill_cancel(order_id);
END
$$;

REVOKE ALL ON FUNCTION seckill.check_order_owner(bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_pay(bigint, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_cancel(bigint, text) FROM PUBLIC;
