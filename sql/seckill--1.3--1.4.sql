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
