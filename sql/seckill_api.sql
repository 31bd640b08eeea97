-- The SQL surface of seckill: every status, every argument check, privileges.
-- Runs against a server with seckill preloaded and its worker connected to Redis.
\set VERBOSITY default
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS seckill CASCADE;
DROP ROLE IF EXISTS seckill_app;
DROP ROLE IF EXISTS seckill_nobody;
RESET client_min_messages;
CREATE EXTENSION seckill;

-- campaign_create checks its arguments
SELECT seckill_campaign_create('', 10);
SELECT seckill_campaign_create(NULL, 10);
SELECT seckill_campaign_create(repeat('g', 65), 10);
SELECT seckill_campaign_create('phone', -1);
SELECT seckill_campaign_create('phone', 10, per_user_limit => 0);
SELECT seckill_campaign_create('phone', 10, now(), now() - interval '1 hour');
SELECT seckill_campaign_create('phone', 3) AS phone_id \gset
SELECT seckill_campaign_create('phone', 5);
SELECT count(*) FROM seckill.campaigns;

-- seckill_buy checks its arguments before anything else
SELECT * FROM seckill_buy(NULL, 'phone');
SELECT * FROM seckill_buy('', 'phone');
SELECT * FROM seckill_buy(repeat('u', 129), 'phone');
SELECT * FROM seckill_buy('alice', NULL);
SELECT * FROM seckill_buy('alice', '');
SELECT * FROM seckill_buy('alice', repeat('g', 65));
SELECT * FROM seckill_buy('alice', 'phone', 0);
SELECT * FROM seckill_buy('alice', 'phone', NULL);
SELECT * FROM seckill_buy('alice', 'phone', 2);

-- statuses before the sale
SELECT * FROM seckill_buy('alice', 'no-such-goods');
SELECT * FROM seckill_buy('alice', 'phone');           -- draft: not preheated yet
SELECT seckill_preheat('no-such-goods');
SELECT seckill_preheat('phone');
SELECT seckill_preheat('phone');                       -- idempotent
SELECT state FROM seckill.campaigns WHERE id = :phone_id;

-- the sale: three items, duplicates refused, then sold out
SELECT status, order_id IS NOT NULL AS has_order FROM seckill_buy('alice', 'phone');
SELECT status, order_id IS NOT NULL AS has_order FROM seckill_buy('alice', 'phone');
SELECT status FROM seckill_buy('bob', 'phone');
SELECT status FROM seckill_buy('carol', 'phone');
SELECT status, order_id FROM seckill_buy('dave', 'phone');
-- after the sell-out, a buyer who asks again holds an order: duplicate, with its id
SELECT b.status, b.order_id = o.id AS its_order FROM seckill_buy('alice', 'phone') b
JOIN seckill.orders o ON o.campaign_id = :phone_id AND o.user_id = 'alice';
SELECT state, total_stock, sold, pg_stock, redis_stock, redis_buyers, in_flight, sold_out_cached
FROM seckill_status('phone');
SELECT user_id, qty, status FROM seckill.orders WHERE campaign_id = :phone_id ORDER BY id;

-- where Redis keeps it: one Redis here, serving every slot
SELECT shard, slot BETWEEN 0 AND 16383 AS a_slot, redis_node IS NOT NULL AS reached
FROM seckill_campaign_nodes('phone');
SELECT count(*) AS masters, bool_and(connected) AS connected, sum(slots) AS slots,
	   sum(round_trips) > 0 AS used, count(error) AS errors
FROM seckill.redis_nodes;
SELECT * FROM seckill_campaign_nodes('no-such-goods');
SELECT * FROM seckill_campaign_nodes(NULL);
SELECT * FROM seckill.campaign_nodes_rows(:phone_id, 0);

-- the fate of an order, for a caller whose call failed
SELECT status, qty FROM seckill_order('bob', 'phone');
SELECT status, order_id, qty, created_at FROM seckill_order('dave', 'phone');
SELECT status FROM seckill_order('dave', 'no-such-goods');
SELECT * FROM seckill_order(NULL, 'phone');

-- reconcile finds nothing to repair
SELECT campaign_goods, redis_stock_before, expected_stock, buyers_before,
	   buyers_expected, journal_committed, journal_compensated, repaired
FROM seckill_reconcile('phone');

-- closing stops the sale at once; the goods may get a new campaign
SELECT seckill_close('phone');
SELECT * FROM seckill_buy('erin', 'phone');
SELECT seckill_close('phone');
SELECT seckill_preheat('phone');
SELECT state, total_stock, sold, redis_stock FROM seckill_status('phone');
SELECT seckill_campaign_create('phone', 1) > :phone_id AS new_campaign;
SELECT status FROM seckill_buy('alice', 'phone');
SELECT seckill_preheat('phone');
SELECT status FROM seckill_buy('alice', 'phone');
SELECT status FROM seckill_buy('frank', 'phone');
SELECT seckill_close('phone');

-- any text is an id, exactly as given: braces, spaces, quotes, newlines, Unicode
SELECT seckill_campaign_create(E'{c:1} gift\ncard ''"', 10) IS NOT NULL AS created;
SELECT seckill_preheat(E'{c:1} gift\ncard ''"');
SELECT u AS user_id, b.status
FROM unnest(ARRAY['{c:1}', 'a b', E'line\nbreak', 'quote''"', '秒杀-用户', ':1:x', repeat('é', 64)]) AS u,
	 LATERAL seckill_buy(u, E'{c:1} gift\ncard ''"') b;
SELECT o.user_id = u AS exact, octet_length(o.user_id)
FROM unnest(ARRAY['{c:1}', 'a b', E'line\nbreak', 'quote''"', '秒杀-用户', ':1:x', repeat('é', 64)]) AS u
JOIN seckill.orders o ON o.user_id = u
ORDER BY o.id;
SELECT status FROM seckill_buy(repeat('é', 65), E'{c:1} gift\ncard ''"');

-- per-user limit above one: one order of up to that quantity
SELECT seckill_campaign_create('tickets', 5, per_user_limit => 2) IS NOT NULL AS created;
SELECT seckill_preheat('tickets');
SELECT status FROM seckill_buy('alice', 'tickets', 2);
SELECT status FROM seckill_buy('alice', 'tickets', 1);
SELECT status FROM seckill_buy('bob', 'tickets', 3);
SELECT status FROM seckill_buy('bob', 'tickets', 2);
SELECT status FROM seckill_buy('carol', 'tickets', 2);  -- one left: not enough
SELECT status FROM seckill_buy('carol', 'tickets', 1);
SELECT total_stock, sold, redis_stock, sold_out_cached FROM seckill_status('tickets');

-- the sale window
SELECT seckill_campaign_create('later', 5, now() + interval '1 hour') IS NOT NULL AS created;
SELECT seckill_preheat('later');
SELECT status FROM seckill_buy('alice', 'later');
SELECT seckill_campaign_create('over', 5, now() - interval '2 hours', now() - interval '1 hour') IS NOT NULL AS created;
SELECT seckill_preheat('over');
SELECT status FROM seckill_buy('alice', 'over');

-- the database holds the line even if Redis were wrong
\set VERBOSITY terse
UPDATE seckill.campaigns SET sold = total_stock + 1 WHERE goods = 'tickets';
INSERT INTO seckill.orders (id, campaign_id, user_id, qty)
SELECT 999999999, campaign_id, 'alice', 1 FROM seckill_status('tickets');
\set VERBOSITY default

-- the order commits in the worker's transaction, not the caller's
SELECT seckill_campaign_create('rollback', 5) IS NOT NULL AS created;
SELECT seckill_preheat('rollback');
BEGIN;
SELECT status FROM seckill_buy('alice', 'rollback');
ROLLBACK;
SELECT status, qty FROM seckill_order('alice', 'rollback');

-- payment and cancellation
SELECT seckill_campaign_create('pay', 2) IS NOT NULL AS created;
SELECT seckill_preheat('pay');
SELECT order_id AS alice_order FROM seckill_buy('alice', 'pay') \gset
SELECT order_id AS bob_order FROM seckill_buy('bob', 'pay') \gset
SELECT seckill_pay(:alice_order);
SELECT seckill_pay(:alice_order);                      -- idempotent
SELECT seckill_cancel(:alice_order);                   -- paid: refunds are not seckill's
SELECT seckill_cancel(:bob_order);
SELECT seckill_cancel(:bob_order);                     -- idempotent
SELECT seckill_pay(:bob_order);
SELECT seckill_pay(-1);
SELECT seckill_cancel(-1);
SELECT seckill_pay(NULL);
SELECT seckill_cancel(NULL);
SELECT user_id, status, paid_at IS NOT NULL AS paid, cancelled_at IS NOT NULL AS cancelled
FROM seckill.orders WHERE id IN (:alice_order, :bob_order) ORDER BY id;
-- with the buyer's id: another user's order is answered as none
SELECT seckill_campaign_create('owned', 2) IS NOT NULL AS created;
SELECT seckill_preheat('owned');
SELECT order_id AS erin_order FROM seckill_buy('erin', 'owned') \gset
SELECT order_id AS gina_order FROM seckill_buy('gina', 'owned') \gset
SELECT seckill_pay(:erin_order, 'frank');
SELECT seckill_cancel(:erin_order, 'frank');
SELECT seckill_pay(:erin_order, NULL);
SELECT seckill_pay(-1, 'erin');
SELECT seckill_pay(:erin_order, 'erin');
SELECT seckill_cancel(:erin_order, 'erin');              -- paid
SELECT seckill_cancel(:gina_order, 'gina');
SELECT user_id, status FROM seckill.orders WHERE id IN (:erin_order, :gina_order) ORDER BY id;
SELECT seckill_close('owned');
SELECT sold, pg_stock, redis_stock, redis_buyers, sold_out_cached FROM seckill_status('pay');
SELECT status FROM seckill_buy('bob', 'pay');          -- the campaign lets him buy again
SELECT status FROM seckill_buy('carol', 'pay');
SELECT seckill_campaign_create('once', 2, rebuy_after_cancel => false) IS NOT NULL AS created;
SELECT seckill_preheat('once');
SELECT seckill_cancel(order_id) FROM seckill_buy('dave', 'once');
SELECT status FROM seckill_buy('dave', 'once');        -- this one does not
SELECT status FROM seckill_buy('erin', 'once');
-- restock: more stock, or less but never below what is sold
SELECT seckill_restock('pay', 2);
SELECT status FROM seckill_buy('carol', 'pay');
SELECT seckill_restock('pay', -2);
SELECT seckill_restock('pay', -1);
SELECT status FROM seckill_buy('frank', 'pay');
SELECT total_stock, sold, redis_stock, sold_out_cached FROM seckill_status('pay');
SELECT seckill_restock('no-such-goods', 1);
SELECT seckill_restock('pay', NULL);
SELECT seckill_campaign_create('bad', 1, payment_timeout => '0 seconds');
SELECT campaign_goods, released FROM seckill_release_expired();  -- no campaign has a timeout

-- privileges: admin functions are not for PUBLIC; an app role gets what the README grants
CREATE ROLE seckill_nobody;
CREATE ROLE seckill_app;
GRANT USAGE ON SCHEMA seckill TO seckill_app;
GRANT SELECT ON seckill.campaigns, seckill.orders TO seckill_app;
GRANT EXECUTE ON FUNCTION seckill_buy(text, text, int), seckill_buy(text, text, int, text, inet),
	seckill_order(text, text), seckill_token(text, text), seckill_pay(bigint),
	seckill_cancel(bigint) TO seckill_app;
SET ROLE seckill_nobody;
SELECT * FROM seckill_buy('mallory', 'rollback');
SELECT seckill_preheat('rollback');
SELECT seckill_campaign_create('free', 1000);
RESET ROLE;
SET ROLE seckill_app;
SELECT status FROM seckill_buy('app-user', 'rollback');
SELECT status FROM seckill_order('app-user', 'rollback');
SELECT seckill_pay(order_id) FROM seckill_order('app-user', 'rollback');
SELECT seckill_close('rollback');
SELECT * FROM seckill_reconcile();
SELECT * FROM seckill_status('rollback');
SELECT * FROM seckill.token_secrets;
SELECT seckill.token_secret(1);
SELECT count(*) FROM seckill.stats;
RESET ROLE;

-- traffic limits: checked, changed in place, returned whole
SELECT seckill_campaign_create('limited', 100) IS NOT NULL AS created;
SELECT seckill_campaign_set('limited', '[1]');
SELECT seckill_campaign_set('limited', NULL);
SELECT seckill_campaign_set('limited', '{"user_rates": 1}');
SELECT seckill_campaign_set('limited', '{"user_rate": "fast"}');
SELECT seckill_campaign_set('limited', '{"user_rate": 0}');
SELECT seckill_campaign_set('limited', '{"user_burst": 0}');
SELECT seckill_campaign_set('limited', '{"max_in_flight": 1.5}');
SELECT seckill_campaign_set('limited', '{"token_ttl": "8 days"}');
SELECT seckill_campaign_set('no-such-goods', '{}');
-- in REPEATABLE READ it could merge onto settings older than its lock: refused
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT seckill_campaign_set('limited', '{"user_rate": 2}');
ROLLBACK;
SELECT seckill_campaign_set('limited', '{"user_rate": 0.001, "user_burst": 2, "addr_rate": 0.001}');
SELECT seckill_preheat('limited');
SELECT seckill_stats_reset() >= now() AS reset;
-- two calls of one user in the bucket (ok, then duplicate), the third is refused
SELECT status FROM seckill_buy('alice', 'limited', 1, NULL, NULL);
SELECT status FROM seckill_buy('alice', 'limited', 1, NULL, NULL);
SELECT status FROM seckill_buy('alice', 'limited', 1, NULL, NULL);
-- one address: a burst of one (the rate rounded up), then refused; no address, no limit
SELECT status FROM seckill_buy('bob', 'limited', 1, NULL, '10.0.0.2');
SELECT status FROM seckill_buy('carol', 'limited', 1, NULL, '10.0.0.2');
SELECT status FROM seckill_buy('dave', 'limited', 1, NULL, NULL);
-- changed while the sale runs: no reset of the buckets
SELECT seckill_campaign_set('limited', '{"user_burst": 5, "addr_rate": null}');
SELECT status FROM seckill_buy('alice', 'limited', 1, NULL, NULL);
SELECT status FROM seckill_buy('carol', 'limited', 1, NULL, '10.0.0.2');
SELECT goods, calls, ok, duplicate, rate_limited, errors, in_flight, call_p50_ms > 0 AS timed
FROM seckill.stats WHERE goods = 'limited';
SELECT calls, ok, rate_limited, redis_p99_ms > 0 AS redis_timed, rounds > 0 AS rounds
FROM seckill.stats WHERE campaign_id IS NULL;

-- one-time tokens: a purchase needs one, it works once, for its user only
SELECT seckill_campaign_set('limited', '{"user_rate": null, "token_required": true, "token_ttl": "1 minute"}');
SELECT status FROM seckill_buy('erin', 'limited');
SELECT status FROM seckill_buy('erin', 'limited', 1, 'forged');
SELECT status FROM seckill_buy('erin', 'limited', 1, '1-0123456789abcdef-0123456789abcdef0123456789abcdef');
SELECT seckill_token('erin', 'limited') AS erin_token \gset
SELECT seckill_token('frank', 'limited') AS frank_token \gset
SELECT status FROM seckill_buy('frank', 'limited', 1, :'erin_token');
SELECT status FROM seckill_buy('erin', 'limited', 1, :'erin_token');
SELECT status FROM seckill_buy('erin', 'limited', 1, :'erin_token');
SELECT status FROM seckill_buy('frank', 'limited', 1, upper(:'frank_token'));
SELECT status FROM seckill_buy('frank', 'limited', 1, :'frank_token');
SELECT length(:'erin_token') AS token_length, :'erin_token' <> :'frank_token' AS distinct_tokens;
SELECT seckill_token('erin', 'no-such-goods');
SELECT seckill_token(NULL, 'limited');
SELECT seckill_close('limited');
SELECT seckill_token('erin', 'limited');
SELECT goods, calls, ok, duplicate, rate_limited, invalid_token FROM seckill.stats WHERE goods = 'limited';

-- a new installation starts afresh: no cached campaign; its order ids go on
-- past every id handed out through this Redis before, never one again
SELECT count(*) AS closed FROM seckill.campaigns c, LATERAL seckill_close(c.goods) WHERE c.state <> 'closed';
SELECT max(id) AS last_id FROM seckill.orders \gset
DROP EXTENSION seckill;
CREATE EXTENSION seckill;
SELECT * FROM seckill_buy('alice', 'tickets');
SELECT seckill_campaign_create('tickets', 1);
SELECT seckill_preheat('tickets');
SELECT status, order_id > :last_id AS past_earlier_ids FROM seckill_buy('alice', 'tickets');

SELECT seckill_close('tickets');

-- stock shards: a buyer whose home shard is empty gets stock from the others
SELECT seckill_campaign_create('sharded', 8) IS NOT NULL AS created;
SELECT seckill_campaign_set('sharded', '{"shards": 0}');
SELECT seckill_campaign_set('sharded', '{"shards": 65}');
SELECT seckill_campaign_set('sharded', '{"shards": 8}')->'shards' AS shards;
SELECT seckill_preheat('sharded');
SELECT seckill_campaign_set('sharded', '{"shards": 4}');
SELECT seckill_campaign_set('sharded', '{"shards": 8, "user_rate": null}')->'shards' AS unchanged;
-- nine users who all live in shard 0, which holds one item
CREATE TEMP TABLE homed AS
SELECT row_number() OVER () AS n, u FROM (
	SELECT 'homed-' || i AS u FROM generate_series(1, 1000) i
	WHERE (hashtext('homed-' || i)::bigint & 4294967295) % 8 = 0 ORDER BY i LIMIT 10) x;
SELECT h.n, b.status FROM homed h, LATERAL seckill_buy(h.u, 'sharded') b WHERE h.n <= 9 ORDER BY h.n;
SELECT sold, redis_stock, redis_buyers, in_flight, sold_out_cached FROM seckill_status('sharded');
SELECT seckill_cancel(o.id) FROM seckill.orders o JOIN homed h ON h.u = o.user_id WHERE h.n = 1;
SELECT redis_stock, redis_buyers, sold_out_cached FROM seckill_status('sharded');
SELECT status FROM homed h, LATERAL seckill_buy(h.u, 'sharded') WHERE h.n = 10;
SELECT campaign_goods, redis_stock_before, expected_stock, buyers_before, buyers_expected, repaired
FROM seckill_reconcile('sharded');
SELECT seckill_restock('sharded', 3);
SELECT status FROM seckill_buy('after-restock', 'sharded');
SELECT redis_stock, redis_buyers, sold_out_cached FROM seckill_status('sharded');
SELECT seckill_close('sharded');

-- distributed locks for SQL callers: arguments, reentrancy, scopes, fencing
SELECT seckill_lock(NULL);
SELECT seckill_lock('');
SELECT seckill_lock(repeat('n', 129));
SELECT seckill_lock('job', '-1 second');
SELECT seckill_lock('job', '0', '10 ms');
SELECT seckill_lock('job', '2 days');
SELECT seckill_lock('job') AS job_token \gset
SELECT seckill_lock('job') = :job_token AS same_token;
SELECT name, scope, depth, state, lease_left > '0' AS leased FROM seckill.locks;
SELECT seckill_unlock('job');
SELECT name, depth FROM seckill.locks;
SELECT seckill_unlock('job');
SELECT seckill_unlock('job');
SELECT count(*) AS held FROM seckill.locks WHERE state = 'held';
BEGIN;
SELECT seckill_lock_xact('batch') > :job_token AS newer_token;
SELECT seckill_unlock('batch');
SELECT seckill_lock('batch');
ROLLBACK;
SELECT seckill_lock('batch', '5 seconds') IS NOT NULL AS free_after_rollback;
SELECT seckill_unlock('batch');
SELECT seckill_lock('f1') AS f1 \gset
SELECT seckill_lock('f2') AS f2 \gset
SELECT :f2 > :f1 AS tokens_grow;
SELECT seckill_fence_check('job', :f1) = :f1 AS first, seckill_fence_check('job', :f2) = :f2 AS later,
	   seckill_fence_check('job', :f2) = :f2 AS again;
\set VERBOSITY sqlstate
SELECT seckill_fence_check('job', :f1);
SELECT seckill_fence_check('job', :f2 + 1000);
\set VERBOSITY default
SELECT seckill_fence_check('job', NULL);
SELECT seckill_fence_check('seckill:campaign:1', :f2);
SELECT seckill_unlock('f1'), seckill_unlock('f2');

-- seckill's own admin work writes behind fencing tokens too
SELECT seckill_campaign_create('fenced', 5) AS fenced_id \gset
SELECT seckill_preheat('fenced');
SELECT count(*) AS fenced FROM seckill.fences WHERE name = 'seckill:campaign:' || :fenced_id;
-- as if a later holder had written while this worker stalled past its lease
UPDATE seckill.fences SET token = token + 1000000 WHERE name = 'seckill:campaign:' || :fenced_id;
\set VERBOSITY sqlstate
SELECT seckill_close('fenced');
\set VERBOSITY default
SELECT state FROM seckill.campaigns WHERE id = :fenced_id;
UPDATE seckill.fences SET token = 0 WHERE name = 'seckill:campaign:' || :fenced_id;
SELECT seckill_close('fenced');

-- from 1.0 to 1.8: the campaigns keep their data and get token secrets;
-- the roles that could buy still can.  Until the update, the library
-- refuses every write to seckill's tables, also by the 1.0 schema's own
-- PL/pgSQL functions; the campaign is the row a 1.0 library wrote, loaded
-- as a restore of its dump would load it.
DROP EXTENSION seckill;
CREATE EXTENSION seckill VERSION '1.0';
GRANT EXECUTE ON FUNCTION seckill_buy(text, text, int) TO seckill_app;
SELECT seckill_campaign_create('old', 3) IS NOT NULL AS created;
UPDATE seckill.campaigns SET sold = 0;
SELECT count(*) AS campaigns FROM seckill.campaigns;
COPY seckill.campaigns (goods, total_stock) FROM stdin;
old	3
\.
SELECT * FROM seckill.reconcile_campaign(1);
SELECT seckill_preheat('old');
SELECT * FROM seckill_buy('alice', 'old');
ALTER EXTENSION seckill UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'seckill';
SELECT c.goods, octet_length(t.secret) FROM seckill.campaigns c JOIN seckill.token_secrets t ON t.campaign_id = c.id;
SELECT has_function_privilege('seckill_app', 'seckill_buy(text, text, int)', 'EXECUTE') AS app_buys,
	   has_function_privilege('seckill_app', 'seckill_buy(text, text, int, text, inet)', 'EXECUTE') AS app_buys_with_tokens,
	   has_function_privilege('seckill_nobody', 'seckill_buy(text, text, int)', 'EXECUTE') AS nobody_buys;
SELECT count(*) AS dumped FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'seckill';
SELECT seckill_preheat('old');
SELECT status FROM seckill_buy('alice', 'old');
SELECT seckill_close('old');

-- clean up
DROP EXTENSION seckill;
DROP ROLE seckill_app;
DROP ROLE seckill_nobody;
