#!/usr/bin/env bash
# Traffic governance under load: per-user rate limits (exact bursts, refill,
# changes without reset), one-time tokens raced by concurrent callers,
# admission control per campaign while Redis is stalled, and seckill.stats
# counting exactly what the callers were answered.
# Runs alone: rate limits are checked against the time a burst took, and
# the stall is sampled every 50 ms.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

redis_pid=$(cat "$SECKILL_TMP/redis.pid")
trap 'kill -CONT "$redis_pid" 2>/dev/null; rm -rf "$work"' EXIT
work=$(mktemp -d)
chmod 755 "$work"
run=$(date +%s)-$$

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"

# answers_of user: "admitted/rate_limited" of that user's recorded answers
answers_of() {
	psql_val "SELECT count(*) FILTER (WHERE status <> 'rate_limited') || '/' ||
		count(*) FILTER (WHERE status = 'rate_limited') FROM stampede_answers WHERE user_id = '$1'"
}

# campaign goods stock settings: created with these limits, preheated
campaign() {
	psql_val "SELECT seckill_campaign_create('$1', $2)" >/dev/null &&
		psql_val "SELECT seckill_campaign_set('$1', '$3')" >/dev/null &&
		psql_val "SELECT seckill_preheat('$1')" >/dev/null
}

# burst user goods: 40 calls of one user from 8 connections at once; prints
# how long it took, in ms
burst() {
	local t0
	cat >"$work/burst.sql" <<SQL
SELECT try_buy('$1', '$2');
SQL
	t0=$(seckill_now_ms)
	pgbench -n -c 8 -j 2 -t 5 -f "$work/burst.sql" >"$work/burst.out" 2>&1
	echo $(($(seckill_now_ms) - t0))
}

# --- rate limit: 0.5 calls/s, bursts of 5 ---------------------------------
rl="rl-$run"
campaign "$rl" 100000 '{"user_rate": 0.5, "user_burst": 5}'
ok "[ $? -eq 0 ]" "a campaign with 0.5 calls/s and bursts of 5 per user"

took=$(burst burster "$rl")
ok "[ $took -lt 2000 ]" "a burst of 40 calls from one user took ${took} ms (under 2 s: less than one token refills)"
is "$(answers_of burster)" "5/35" "exactly the burst of 5 got through, 35 were rate_limited"
is "$(psql_val "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n
	FROM stampede_answers WHERE user_id = 'burster' GROUP BY 1 ORDER BY 1) s")" \
	"duplicate 4, ok 1, rate_limited 35" "one purchase, four duplicates, the rest refused before the stock"

# The refill is a matter of time: wait it out, measured.
t0=$(seckill_now_ms)
sleep 4.5
psql_val "DELETE FROM stampede_answers" >/dev/null
burst burster "$rl" >/dev/null
waited=$(($(seckill_now_ms) - t0))
admitted=$(answers_of burster | cut -d/ -f1)
low=$(((waited - 2000) / 2000))
high=$((waited / 2000 + 1))
ok "[ $admitted -ge $low ] && [ $admitted -le $high ]" \
	"after ${waited} ms at 0.5/s, $admitted calls got through (expected $low..$high)"

psql_val "SELECT seckill_campaign_set('$rl', '{\"user_rate\": 0.4}')" >/dev/null
psql_val "DELETE FROM stampede_answers" >/dev/null
burst burster "$rl" >/dev/null
is "$(answers_of burster | cut -d/ -f1)" 0 "a change of rate keeps the emptied bucket: no call got through"

# Many users at once: nobody passes more than burst + rate x time.
psql_val "SELECT seckill_campaign_set('$rl', '{\"user_rate\": 2, \"user_burst\": 3}')" >/dev/null
psql_val "DELETE FROM stampede_answers" >/dev/null
cat >"$work/crowd.sql" <<SQL
\set u random(1, 50)
SELECT try_buy('crowd-' || :u, '$rl');
SQL
t0=$(seckill_now_ms)
pgbench -n -c 32 -j 2 -T 3 -f "$work/crowd.sql" >"$work/crowd.out" 2>&1
elapsed=$(($(seckill_now_ms) - t0))
max=$((3 + 2 * (elapsed + 999) / 1000))
worst=$(psql_val "SELECT max(n) FROM (SELECT count(*) n FROM stampede_answers
	WHERE status <> 'rate_limited' GROUP BY user_id) s")
calls=$(psql_val "SELECT count(*) FROM stampede_answers")
ok "[ $worst -le $max ] && [ $worst -ge 3 ]" \
	"$calls calls of 50 users in ${elapsed} ms: at most $worst got through for one user (bound $max)"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'error'")" 0 "no errors"

# One address's bucket, shared by many users whose purchases go to Redis in
# the same calls of the purchase script: exact as well.  The callers all
# connect from 127.0.0.1.
addr="addr-$run"
campaign "$addr" 100000 '{"addr_rate": 0.001, "addr_burst": 12}'
psql_val "DELETE FROM stampede_answers" >/dev/null
cat >"$work/addr.sql" <<SQL
\set u random(1, 1000000000000)
SELECT try_buy('addr-' || :u, '$addr');
SQL
read -r rounds0 purchases0 <<<"$(psql_val "SELECT rounds || ' ' || purchases FROM seckill.worker_counters()")"
pgbench -n -c 32 -j 2 -t 10 -f "$work/addr.sql" >"$work/addr.out" 2>&1
read -r rounds1 purchases1 <<<"$(psql_val "SELECT rounds || ' ' || purchases FROM seckill.worker_counters()")"
ok "[ $((purchases1 - purchases0)) -gt $((rounds1 - rounds0)) ]" \
	"$((purchases1 - purchases0)) purchases of many users from one address came in $((rounds1 - rounds0)) rounds"
is "$(psql_val "SELECT count(*) FILTER (WHERE status <> 'rate_limited') || '/' ||
	count(*) FILTER (WHERE status = 'rate_limited') FROM stampede_answers")" "12/308" \
	"exactly the address's burst of 12 got through, 308 were rate_limited"

# --- one-time tokens ---------------------------------------------------------
tk="tk-$run"
campaign "$tk" 1000 '{"token_required": true}'
ok "[ $? -eq 0 ]" "a campaign that requires tokens"
psql_val "DROP TABLE IF EXISTS tokens; CREATE TABLE tokens AS
	SELECT i, 'tok-' || i AS user_id, seckill_token('tok-' || i, '$tk') AS token
	FROM generate_series(1, 300) i" >/dev/null
psql_val "DELETE FROM stampede_answers" >/dev/null
# every token is presented by 4 connections at about the same time
cat >"$work/tokens.sql" <<SQL
\set i random(1, 300)
SELECT try_buy(user_id, '$tk', token) FROM tokens WHERE i = :i;
SQL
pgbench -n -c 32 -j 2 -t 40 -f "$work/tokens.sql" >"$work/tokens.out" 2>&1
is "$(psql_val "SELECT count(*) FROM (SELECT user_id FROM stampede_answers
	WHERE status <> 'invalid_token' GROUP BY user_id HAVING count(*) > 1) d")" 0 \
	"no token got past its check twice, among $(psql_val "SELECT count(*) FROM stampede_answers") racing calls"
is "$(psql_val "SELECT (SELECT count(DISTINCT user_id) FROM stampede_answers) =
	(SELECT count(*) FROM stampede_answers WHERE status = 'ok')")" t "each token presented bought exactly once"
is "$(psql_val "SELECT count(*) FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = '$tk'")" "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'ok'")" \
	"every ok is an order, and no order came without one"
is "$(psql_val "SELECT string_agg(DISTINCT status, ',') FROM stampede_answers")" "invalid_token,ok" \
	"the other calls were answered invalid_token"

# a cancelled order does not revive its spent token; a fresh one works
oid=$(psql_val "SELECT order_id FROM stampede_answers WHERE status = 'ok' LIMIT 1")
u=$(psql_val "SELECT user_id FROM stampede_answers WHERE order_id = $oid")
psql_val "SELECT seckill_cancel($oid)" >/dev/null
is "$(psql_val "SELECT status FROM tokens, seckill_buy(user_id, '$tk', 1, token) WHERE user_id = '$u'")" \
	invalid_token "after a cancel, the spent token is still spent"
is "$(psql_val "SELECT status FROM seckill_buy('$u', '$tk', 1, seckill_token('$u', '$tk'))")" ok \
	"a fresh token buys again"
# A token's MAC is the first 16 bytes of HMAC-SHA256 over
# "<campaign id>:<expiry>:<nonce>:<user id>", keyed with the campaign's
# secret: worked out again here with pgcrypto, for tokens of two campaigns
# issued in turn (each session keys a MAC once a campaign).
psql_val "CREATE EXTENSION IF NOT EXISTS pgcrypto" >/dev/null
is "$(psql_val "SELECT count(*) FILTER (WHERE split_part(t, '-', 3) = left(encode(hmac(convert_to(
		c.id || ':' || ('x' || lpad(split_part(t, '-', 1), 16, '0'))::bit(64)::bigint || ':' ||
		split_part(t, '-', 2) || ':' || u, 'UTF8'), seckill.token_secret(c.id), 'sha256'), 'hex'), 32)) || '/' || count(*)
	FROM generate_series(1, 6) i,
		LATERAL (SELECT CASE WHEN i % 2 = 0 THEN '$tk' ELSE '$rl' END AS g, 'mac-' || i AS u) a,
		LATERAL (SELECT seckill_token(a.u, a.g) AS t) b,
		seckill.campaigns c
	WHERE c.goods = a.g AND c.state <> 'closed'")" "6/6" \
	"every token's MAC is HMAC-SHA256 of its campaign, expiry, nonce and user, keyed with the campaign's secret"
psql_val "SELECT seckill_campaign_set('$tk', '{\"token_ttl\": \"1 second\"}')" >/dev/null
expiring=$(psql_val "SELECT seckill_token('late', '$tk')")
expiry="('x' || lpad('${expiring%%-*}', 16, '0'))::bit(64)::bigint"
seckill_wait_for "[ \$(psql_val \"SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint > $expiry\") = t ]" 5
is "$(psql_val "SELECT status FROM seckill_buy('late', '$tk', 1, '$expiring')")" invalid_token \
	"an expired token is refused"

# --- admission control per campaign, with Redis stalled ---------------------
ad="ad-$run"
campaign "$ad" 100000 '{"max_in_flight": 8}'
ok "[ $? -eq 0 ]" "a campaign with at most 8 purchases in flight"
psql_val "DELETE FROM stampede_answers" >/dev/null
psql_val "SELECT seckill_stats_reset()" >/dev/null
cat >"$work/admit.sql" <<SQL
\set u random(1, 1000000000)
SELECT try_buy('ad-' || :u, '$ad');
SQL
kill -STOP "$redis_pid"
pgbench -n -c 32 -j 2 -T 3 -f "$work/admit.sql" >"$work/admit.out" 2>&1 &
crowd=$!
in_flight="SELECT in_flight FROM seckill.stats WHERE goods = '$ad'"
seckill_wait_for "[ \$(psql_val \"$in_flight\") -ge 8 ]" 5
ok "[ $? -eq 0 ]" "8 purchases wait on the stalled Redis"
terminated=$(psql_val "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
	WHERE wait_event_type = 'Extension' AND query LIKE '%try_buy%' LIMIT 3) w")
is "$terminated" 3 "3 of the waiting callers terminated"
peak=0
while kill -0 "$crowd" 2>/dev/null; do
	n=$(psql_val "$in_flight")
	[ "$n" -gt "$peak" ] && peak=$n
	sleep 0.05
done
kill -CONT "$redis_pid"
is "$peak" 8 "in flight never above max_in_flight (8), sampled through the stall"
busy=$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'busy'")
busy_p99=$(psql_val "SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY took_ms)::numeric, 2)
	FROM stampede_answers WHERE status = 'busy'")
ok "[ $busy -gt 100 ]" "the other callers were answered busy at once: $busy times, p99 $busy_p99 ms"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE took_ms > 6000")" 0 "no call took 6 s or more"
answered=$(psql_val "SELECT count(*) FILTER (WHERE status = 'ok') || ' ok, ' ||
	count(*) FILTER (WHERE status = 'busy') || ' busy, ' || count(*) FILTER (WHERE status = 'error') ||
	' errors, ' || count(*) || ' in all' FROM stampede_answers")
is "$(psql_val "SELECT ok || ' ok, ' || busy || ' busy, ' || errors || ' errors, ' || calls || ' in all'
	FROM seckill.stats WHERE goods = '$ad'")" "$answered" "seckill.stats counted every answer the callers got"
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('after-stall', '$ad')\" 2>/dev/null)\" = ok ]" 10
ok "[ $? -eq 0 ]" "Redis back: sales resume by themselves"
is "$(psql_val "$in_flight") $(psql_val "SELECT in_flight FROM seckill.stats WHERE campaign_id IS NULL")" "0 0" \
	"nothing left in flight, for the campaign and for all: the terminated callers took themselves off"
diag "stats of all: $(psql -XAt -F' ' -c "SELECT 'calls', calls, 'p50/p95/p99 ms', call_p50_ms, call_p95_ms, call_p99_ms,
	'redis p99 ms', redis_p99_ms, 'per round', round(purchases_per_round::numeric, 1) FROM seckill.stats WHERE campaign_id IS NULL")"

done_testing
