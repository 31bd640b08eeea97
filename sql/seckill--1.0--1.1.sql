-- seckill 1.1: traffic governance (rate limits, one-time purchase tokens,
-- admission control per campaign) and the seckill.stats view.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.1'" to load this file. \quit

-- A campaign's traffic limits; NULL: no limit.  seckill_campaign_set()
-- changes them, in Redis too, without a new preheat.
ALTER TABLE seckill.campaigns
	-- purchase calls per second of one user, and how many at once (the size
	-- of its token bucket; NULL: the rate rounded up)
	ADD COLUMN user_rate float8 CHECK (user_rate > 0),
	ADD COLUMN user_burst int CHECK (user_burst >= 1),
	-- the same per client address
	ADD COLUMN addr_rate float8 CHECK (addr_rate > 0),
	ADD COLUMN addr_burst int CHECK (addr_burst >= 1),
	-- purchases of this campaign with the worker at once; past it, busy
	ADD COLUMN max_in_flight int CHECK (max_in_flight >= 1),
	-- purchases need a one-time token from seckill_token()
	ADD COLUMN token_required boolean NOT NULL DEFAULT false,
	ADD COLUMN token_ttl interval NOT NULL DEFAULT '5 minutes'
		CHECK (token_ttl > interval '0' AND token_ttl <= interval '7 days'),
	-- the stock split over this many Redis hash tags (Redis Cluster slots);
	-- fixed once the campaign is preheated
	ADD COLUMN shards int NOT NULL DEFAULT 1 CHECK (shards BETWEEN 1 AND 64);

-- The key of each campaign's token HMAC (244 random bits), apart from
-- seckill.campaigns: a role that may read the campaigns cannot forge tokens.
CREATE TABLE seckill.token_secrets (
	campaign_id bigint PRIMARY KEY REFERENCES seckill.campaigns (id) ON DELETE CASCADE,
	secret bytea NOT NULL CHECK (octet_length(secret) = 32)
);

CREATE FUNCTION seckill.new_token_secret()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
	INSERT INTO seckill.token_secrets (campaign_id, secret)
	VALUES (NEW.id, decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));
	RETURN NULL;
END
$$;

CREATE TRIGGER campaigns_token_secret AFTER INSERT ON seckill.campaigns
	FOR EACH ROW EXECUTE FUNCTION seckill.new_token_secret();

INSERT INTO seckill.token_secrets (campaign_id, secret)
SELECT id, decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex')
FROM seckill.campaigns;

-- For seckill_buy and seckill_token, which call it from C (no EXECUTE grant
-- needed) for a campaign the worker has not cached.
CREATE FUNCTION seckill.token_secret(campaign_id bigint)
RETURNS bytea
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	s bytea;
BEGIN
	SELECT t.secret INTO s FROM seckill.token_secrets t WHERE t.campaign_id = token_secret.campaign_id;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'campaign % has no token secret', campaign_id
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
	RETURN s;
END
$$;

-- pg_dump saves the data of these extension tables (1.0 forgot to say so).
SELECT pg_catalog.pg_extension_config_dump('seckill.campaigns', '');
SELECT pg_catalog.pg_extension_config_dump('seckill.orders', '');
SELECT pg_catalog.pg_extension_config_dump('seckill.compensations', '');
SELECT pg_catalog.pg_extension_config_dump('seckill.token_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('seckill.order_ids', '');
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('seckill.campaigns', 'id')::pg_catalog.regclass, '');

-- The worker stores validated limits and passes them on to Redis.
CREATE FUNCTION seckill.apply_limits(campaign_id bigint, user_rate float8,
	user_burst int, addr_rate float8, addr_burst int, max_in_flight int,
	token_required boolean, token_ttl_us bigint, shards int)
RETURNS void
AS 'MODULE_PATHNAME', 'seckill_apply_limits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Change some traffic limits (or, before the first preheat, the stock
-- shards) of the open campaign of goods: the keys of settings are changed, a
-- JSON null clears a limit, the others stay.  Returns every setting as it is
-- now.  Runs as the extension's owner, so that a DBA role granted this
-- function needs no grant on the tables.
CREATE FUNCTION @extschema@.seckill_campaign_set(goods text, settings jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
	c seckill.campaigns;
	k text;
	v jsonb;
	s text;
	known constant text[] := ARRAY['user_rate', 'user_burst', 'addr_rate', 'addr_burst',
		'max_in_flight', 'token_required', 'token_ttl', 'shards'];
BEGIN
	IF settings IS NULL OR jsonb_typeof(settings) <> 'object' THEN
		RAISE EXCEPTION 'settings must be a JSON object'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'For example ''{"user_rate": 1, "user_burst": 3}''; null clears a limit.';
	END IF;
	SELECT k.id INTO c.id FROM seckill.campaigns k
	WHERE k.goods = seckill_campaign_set.goods AND k.state <> 'closed';
	IF FOUND THEN
		-- one change at a time, each merged into the last one's result (not
		-- a row lock, which would block the worker's update)
		PERFORM pg_advisory_xact_lock(hashtextextended('seckill_campaign_set:' || c.id, 0));
		SELECT * INTO c FROM seckill.campaigns k WHERE k.id = c.id AND k.state <> 'closed';
	END IF;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'no open campaign for goods "%"', goods
			USING ERRCODE = 'undefined_object',
				  HINT = 'Create one with seckill_campaign_create().';
	END IF;
	FOR k, v IN SELECT * FROM jsonb_each(settings) LOOP
		IF NOT k = ANY (known) THEN
			RAISE EXCEPTION 'unknown setting "%"', k
				USING ERRCODE = 'invalid_parameter_value',
					  HINT = 'The settings are ' || array_to_string(known, ', ') || '.';
		END IF;
		s := v #>> '{}';
		BEGIN
			CASE k
				WHEN 'user_rate' THEN c.user_rate := s::float8;
				WHEN 'user_burst' THEN c.user_burst := s::int;
				WHEN 'addr_rate' THEN c.addr_rate := s::float8;
				WHEN 'addr_burst' THEN c.addr_burst := s::int;
				WHEN 'max_in_flight' THEN c.max_in_flight := s::int;
				WHEN 'token_required' THEN c.token_required := coalesce(s::boolean, false);
				WHEN 'token_ttl' THEN c.token_ttl := coalesce(s::interval, interval '5 minutes');
				WHEN 'shards' THEN
					IF coalesce(s::int, 1) <> c.shards AND c.state <> 'draft' THEN
						RAISE EXCEPTION 'the shards of campaign % cannot change: it is preheated', c.id
							USING ERRCODE = 'object_not_in_prerequisite_state',
								  HINT = 'Set shards before seckill_preheat(), or close the campaign and create a new one.';
					END IF;
					c.shards := coalesce(s::int, 1);
			END CASE;
		EXCEPTION WHEN data_exception THEN
			RAISE EXCEPTION 'invalid value % for setting "%"', v, k
				USING ERRCODE = 'invalid_parameter_value', DETAIL = SQLERRM;
		END;
	END LOOP;
	IF NOT (c.user_rate BETWEEN 0.001 AND 1000000) OR NOT (c.addr_rate BETWEEN 0.001 AND 1000000) THEN
		RAISE EXCEPTION 'a rate must be between 0.001 and 1000000 calls per second'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use null for no limit.';
	END IF;
	IF NOT (c.user_burst BETWEEN 1 AND 1000000) OR NOT (c.addr_burst BETWEEN 1 AND 1000000)
	   OR c.max_in_flight < 1 THEN
		RAISE EXCEPTION 'user_burst and addr_burst must be between 1 and 1000000, max_in_flight at least 1'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use null for the default (a burst of the rate rounded up; no bound in flight).';
	END IF;
	IF c.shards NOT BETWEEN 1 AND 64 THEN
		RAISE EXCEPTION 'shards must be between 1 and 64'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF c.token_ttl <= interval '0' OR c.token_ttl > interval '7 days' THEN
		RAISE EXCEPTION 'token_ttl must be positive and at most 7 days'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM seckill.apply_limits(c.id, c.user_rate, c.user_burst, c.addr_rate, c.addr_burst,
		c.max_in_flight, c.token_required,
		(extract(epoch FROM c.token_ttl) * 1000000)::int8, c.shards);
	RETURN jsonb_build_object('user_rate', c.user_rate, 'user_burst', c.user_burst,
		'addr_rate', c.addr_rate, 'addr_burst', c.addr_burst,
		'max_in_flight', c.max_in_flight, 'token_required', c.token_required,
		'token_ttl', c.token_ttl::text, 'shards', c.shards);
END
$$;

-- A one-time token for one purchase of this user, valid for the campaign's
-- token_ttl; the application hands it out (after a captcha, say).
CREATE FUNCTION @extschema@.seckill_token(user_id text, goods text)
RETURNS text
AS 'MODULE_PATHNAME', 'seckill_token'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- seckill_buy with a purchase token and the client's address, for the
-- campaigns' traffic limits.  The three-argument seckill_buy stays: it buys
-- without a token, and limits by the session's client address.
CREATE FUNCTION @extschema@.seckill_buy(user_id text, goods text, qty int, token text,
	client_addr inet DEFAULT inet_client_addr(),
	OUT status text, OUT order_id bigint)
AS 'MODULE_PATHNAME', 'seckill_buy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Purchase figures from shared memory: a row for all campaigns
-- (campaign_id NULL), then one per campaign preheated since the last reset.
CREATE FUNCTION seckill.stats_rows(
	OUT campaign_id bigint, OUT goods text, OUT calls bigint,
	OUT ok bigint, OUT sold_out bigint, OUT duplicate bigint,
	OUT not_started bigint, OUT ended bigint, OUT unknown_goods bigint,
	OUT busy bigint, OUT rate_limited bigint, OUT invalid_token bigint,
	OUT errors bigint, OUT in_flight int, OUT compensations bigint,
	OUT call_p50_ms float8, OUT call_p95_ms float8, OUT call_p99_ms float8,
	OUT redis_p50_ms float8, OUT redis_p95_ms float8, OUT redis_p99_ms float8,
	OUT rounds bigint, OUT purchases_per_round float8,
	OUT redis_round_trips bigint, OUT commits bigint, OUT queue_depth int,
	OUT since timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'seckill_stats_rows'
LANGUAGE C VOLATILE PARALLEL SAFE;

CREATE VIEW seckill.stats AS SELECT * FROM seckill.stats_rows();
COMMENT ON VIEW seckill.stats IS 'seckill_buy answers, latencies and worker figures since seckill_stats_reset()';

-- Zero seckill.stats; returns the new "since".
CREATE FUNCTION @extschema@.seckill_stats_reset()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'seckill_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The worker loads its campaign cache again, with the new columns.
CREATE FUNCTION seckill.sql_changed()
RETURNS void
AS 'MODULE_PATHNAME', 'seckill_sql_changed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

SELECT seckill.sql_changed();

REVOKE ALL ON FUNCTION seckill.sql_changed() FROM PUBLIC;
REVOKE ALL ON TABLE seckill.token_secrets FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.new_token_secret() FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.token_secret(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.apply_limits(bigint, float8, int, float8, int, int, boolean, bigint, int) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_campaign_set(text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_token(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_buy(text, text, int, text, inet) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.stats_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_stats_reset() FROM PUBLIC;
