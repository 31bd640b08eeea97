-- seckill 1.14: a fair waiting room.  A campaign with a queue admits only
-- buyers who joined its line (seckill_queue_join) and were let in, in the
-- order of the line, at the pace its stock can serve; seckill_queue_status
-- tells a waiting buyer where they stand.  The line lives in PostgreSQL,
-- written by the worker, so no place given is lost to a crash or a
-- failover.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.14'" to load this file. \quit

ALTER TABLE seckill.campaigns
	ADD COLUMN queue boolean NOT NULL DEFAULT false,
	ADD COLUMN queue_pass_ttl interval NOT NULL DEFAULT '2 minutes'
		CHECK (queue_pass_ttl BETWEEN interval '1 second' AND interval '1 day'),
	ADD COLUMN queue_admit_rate float8
		CHECK (queue_admit_rate BETWEEN 0.001 AND 1000000),
	ADD COLUMN queue_admit_factor float8 NOT NULL DEFAULT 2
		CHECK (queue_admit_factor BETWEEN 0.01 AND 1000),
	ADD COLUMN queue_opens_before interval NOT NULL DEFAULT '1 hour'
		CHECK (queue_opens_before BETWEEN interval '0' AND interval '7 days'),
	ADD COLUMN queue_seed bigint;
COMMENT ON COLUMN seckill.campaigns.queue IS
	'a waiting room: seckill_buy serves only buyers admitted from the line of seckill_queue_join';
COMMENT ON COLUMN seckill.campaigns.queue_pass_ttl IS
	'how long an admitted buyer may buy (a pass serves one purchase)';
COMMENT ON COLUMN seckill.campaigns.queue_admit_rate IS
	'buyers admitted per second at most; NULL: no bound but queue_admit_factor';
COMMENT ON COLUMN seckill.campaigns.queue_admit_factor IS
	'buyers admitted and not yet bought stay at most this many times the stock left';
COMMENT ON COLUMN seckill.campaigns.queue_opens_before IS
	'joins are taken this long before starts_at; their order is drawn by lot at the start';
COMMENT ON COLUMN seckill.campaigns.queue_seed IS
	'the seed of the draw of early joins (hashtextextended(user_id, seed) order); NULL: drawn at random at the start';

-- A buyer's place in a campaign's line: one per buyer (the primary key), one
-- buyer per place (the unique ticket).  Tickets count 1, 2, 3... in the
-- order of admission; a join before the start has none until the draw.  No
-- foreign key: its check would lock the campaign's row for every join (the
-- worker writes places of preheated campaigns only).
CREATE TABLE seckill.queue_places (
	campaign_id bigint NOT NULL,
	user_id text NOT NULL CHECK (octet_length(user_id) BETWEEN 1 AND 128),
	ticket bigint CHECK (ticket >= 1),
	joined_at timestamptz NOT NULL,
	admitted_at timestamptz,
	PRIMARY KEY (campaign_id, user_id),
	CONSTRAINT queue_places_one_per_ticket UNIQUE (campaign_id, ticket),
	CONSTRAINT queue_places_admitted_in_line CHECK (admitted_at IS NULL OR ticket IS NOT NULL)
);
CREATE INDEX queue_places_admitted ON seckill.queue_places (campaign_id, admitted_at)
	WHERE admitted_at IS NOT NULL;
COMMENT ON TABLE seckill.queue_places IS
	'the places in the campaigns'' waiting lines, written by the worker: a place given is never lost or reordered';

-- How far each line has come: every ticket up to admitted_through is
-- admitted; drawn once the early joins have their tickets.
CREATE TABLE seckill.queue_lines (
	campaign_id bigint PRIMARY KEY REFERENCES seckill.campaigns (id),
	admitted_through bigint NOT NULL DEFAULT 0 CHECK (admitted_through >= 0),
	drawn boolean NOT NULL DEFAULT false,
	seed bigint
);
COMMENT ON TABLE seckill.queue_lines IS
	'each campaign''s waiting line: the last ticket admitted, and the draw of the early joins with its seed';

SELECT pg_catalog.pg_extension_config_dump('seckill.queue_places', '');
SELECT pg_catalog.pg_extension_config_dump('seckill.queue_lines', '');

-- The worker stores validated limits and passes them on to Redis.
DROP FUNCTION seckill.apply_limits(bigint, float8, int, float8, int, int, boolean, bigint, int);
CREATE FUNCTION seckill.apply_limits(campaign_id bigint, user_rate float8,
	user_burst int, addr_rate float8, addr_burst int, max_in_flight int,
	token_required boolean, token_ttl_us bigint, shards int,
	queue boolean, queue_pass_ttl_us bigint, queue_admit_rate float8,
	queue_admit_factor float8, queue_opens_before_us bigint, queue_seed bigint)
RETURNS void
AS 'MODULE_PATHNAME', 'seckill_apply_limits'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Change some traffic limits (or, before the first preheat, the stock
-- shards) of the open campaign of goods: the keys of settings are changed, a
-- JSON null clears a limit, the others stay.  "queue" is true (a waiting
-- room with the defaults), an object of its settings (merged onto the
-- current ones), or false or null (none).  Returns every setting as it is
-- now.  Runs as the extension's owner, so that a DBA role granted this
-- function needs no grant on the tables.
CREATE OR REPLACE FUNCTION @extschema@.seckill_campaign_set(goods text, settings jsonb)
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
		'max_in_flight', 'token_required', 'token_ttl', 'shards', 'queue'];
	queue_known constant text[] := ARRAY['pass_ttl', 'admit_rate', 'admit_factor',
		'opens_before', 'seed'];
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
				WHEN 'queue' THEN
					IF jsonb_typeof(v) = 'object' THEN
						c.queue := true;
						FOR k, v IN SELECT * FROM jsonb_each(v) LOOP
							IF NOT k = ANY (queue_known) THEN
								RAISE EXCEPTION 'unknown setting "%" of "queue"', k
									USING ERRCODE = 'invalid_parameter_value',
										  HINT = 'The settings of "queue" are ' || array_to_string(queue_known, ', ') || '.';
							END IF;
							s := v #>> '{}';
							CASE k
								WHEN 'pass_ttl' THEN c.queue_pass_ttl := coalesce(s::interval, interval '2 minutes');
								WHEN 'admit_rate' THEN c.queue_admit_rate := s::float8;
								WHEN 'admit_factor' THEN c.queue_admit_factor := coalesce(s::float8, 2);
								WHEN 'opens_before' THEN c.queue_opens_before := coalesce(s::interval, interval '1 hour');
								WHEN 'seed' THEN c.queue_seed := s::bigint;
							END CASE;
							k := 'queue';
						END LOOP;
					ELSIF jsonb_typeof(v) IN ('boolean', 'null') THEN
						c.queue := coalesce(s::boolean, false);
					ELSE
						RAISE EXCEPTION 'invalid value % for setting "queue"', v
							USING ERRCODE = 'invalid_parameter_value',
								  HINT = 'Use true, false, null or an object of its settings, such as {"pass_ttl": "2 minutes", "admit_rate": 50}.';
					END IF;
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
	IF c.queue_pass_ttl NOT BETWEEN interval '1 second' AND interval '1 day' THEN
		RAISE EXCEPTION 'the queue''s pass_ttl must be between 1 second and 1 day'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	IF NOT (c.queue_admit_rate BETWEEN 0.001 AND 1000000) THEN
		RAISE EXCEPTION 'the queue''s admit_rate must be between 0.001 and 1000000 buyers per second'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Use null for no bound but admit_factor.';
	END IF;
	IF c.queue_admit_factor NOT BETWEEN 0.01 AND 1000 THEN
		RAISE EXCEPTION 'the queue''s admit_factor must be between 0.01 and 1000'
			USING ERRCODE = 'invalid_parameter_value',
				  HINT = 'Buyers admitted and not yet bought stay at most admit_factor times the stock left.';
	END IF;
	IF c.queue_opens_before NOT BETWEEN interval '0' AND interval '7 days' THEN
		RAISE EXCEPTION 'the queue''s opens_before must be between 0 and 7 days'
			USING ERRCODE = 'invalid_parameter_value';
	END IF;
	PERFORM seckill.apply_limits(c.id, c.user_rate, c.user_burst, c.addr_rate, c.addr_burst,
		c.max_in_flight, c.token_required,
		(extract(epoch FROM c.token_ttl) * 1000000)::int8, c.shards,
		c.queue, (extract(epoch FROM c.queue_pass_ttl) * 1000000)::int8, c.queue_admit_rate,
		c.queue_admit_factor, (extract(epoch FROM c.queue_opens_before) * 1000000)::int8,
		c.queue_seed);
	RETURN jsonb_build_object('user_rate', c.user_rate, 'user_burst', c.user_burst,
		'addr_rate', c.addr_rate, 'addr_burst', c.addr_burst,
		'max_in_flight', c.max_in_flight, 'token_required', c.token_required,
		'token_ttl', c.token_ttl::text, 'shards', c.shards,
		'queue', CASE WHEN c.queue THEN jsonb_build_object('pass_ttl', c.queue_pass_ttl::text,
			'admit_rate', c.queue_admit_rate, 'admit_factor', c.queue_admit_factor,
			'opens_before', c.queue_opens_before::text, 'seed', c.queue_seed) END);
END
$$;

-- Join the line of the goods' campaign: once per buyer, a second join
-- answers the same place.  state is waiting, admitted, used, expired,
-- sold_out, or not_started (the line is not open yet), ended,
-- unknown_goods or rate_limited (client_addr past the campaign's
-- addr_rate); position counts the places up to the buyer's (NULL until the
-- draw, for a join before the start); ticket is the place's number.
CREATE FUNCTION @extschema@.seckill_queue_join(user_id text, goods text,
	client_addr inet DEFAULT inet_client_addr(),
	OUT state text, OUT "position" bigint, OUT ticket bigint)
AS 'MODULE_PATHNAME', 'seckill_queue_join'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Where a buyer stands: the states of seckill_queue_join, or not_joined;
-- admitted_until ends the pass; estimated_wait from the recent pace of
-- admission.  Answered in the caller's backend from shared memory.
CREATE FUNCTION @extschema@.seckill_queue_status(user_id text, goods text,
	OUT state text, OUT "position" bigint, OUT admitted_until timestamptz,
	OUT estimated_wait interval)
AS 'MODULE_PATHNAME', 'seckill_queue_status'
LANGUAGE C VOLATILE PARALLEL SAFE;

-- The lines' figures from shared memory, for seckill.stats.
CREATE FUNCTION seckill.queue_rows(
	OUT campaign_id bigint, OUT not_admitted bigint, OUT queue_length bigint,
	OUT queue_admitted bigint, OUT queue_expired bigint, OUT queue_wait_s float8)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'seckill_queue_rows'
LANGUAGE C VOLATILE PARALLEL SAFE;

-- columns added at the end: grants on the view stay
CREATE OR REPLACE VIEW seckill.stats AS
SELECT s.*, CASE WHEN s.campaign_id IS NULL THEN seckill.slots_in_use() END AS slots_in_use,
	q.not_admitted, q.queue_length, q.queue_admitted, q.queue_expired, q.queue_wait_s
FROM seckill.stats_rows() s
	LEFT JOIN seckill.queue_rows() q ON q.campaign_id IS NOT DISTINCT FROM s.campaign_id;

SELECT seckill.sql_changed();

REVOKE ALL ON FUNCTION seckill.apply_limits(bigint, float8, int, float8, int, int, boolean, bigint, int,
	boolean, bigint, float8, float8, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_queue_join(text, text, inet) FROM PUBLIC;
REVOKE ALL ON FUNCTION @extschema@.seckill_queue_status(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION seckill.queue_rows() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION seckill.queue_rows() TO pg_monitor;
