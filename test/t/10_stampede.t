#!/usr/bin/env bash
# The midnight stampede: 100 items, 5,000 would-be buyers on 200 connections.
# Exactly 100 orders must come out, nobody twice, every "ok" backed by an order;
# then the cost of a purchase after sell-out is measured.
set -uo pipefail # no -e: a failed check is reported, and the next one runs
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

stock=100
users=5000
goods=stampede-$(date +%s)-$$
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# measure label clients seconds script: one pgbench run, its figures as diagnostics.
measure() {
	local figures rc tps avg p50 p99
	figures=$(seckill_pgbench "$work/$4-$2" "$2" "$3" "$work/$4.sql")
	rc=$?
	ok "[ $rc -eq 0 ]" "pgbench: $1, $2 clients" || diag "$(cat "$work/$4-$2/pgbench.out")"
	read -r tps avg p50 p99 <<<"$figures"
	diag "$1, $2 clients: $tps calls/s, latency avg $avg ms, p50 $p50 ms, p99 $p99 ms"
}

# The worker serves seckill.database, postgres by default: test there.
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
ok "[ $? -eq 0 ]" "extension created" || done_testing
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
ok "[ $? -eq 0 ]" "helpers created" || done_testing
is "$(psql_val "SELECT seckill_campaign_create('$goods', $stock) > 0")" t \
	"campaign $goods created" || done_testing
is "$(psql_val "SELECT seckill_preheat('$goods')")" $stock \
	"preheat loads $stock into Redis" || done_testing
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
active="o.campaign_id = $cid AND o.status IN ('reserved', 'paid')"

# Before the crowd: one buyer asks twice, so that the duplicate answer is seen
# for sure (once sold out, a repeat buyer may well be told sold_out instead).
psql_val "SELECT try_buy('user-1', '$goods')" >/dev/null
is "$(psql_val "SELECT status FROM stampede_answers WHERE user_id = 'user-1'")" ok \
	"user-1 buys"
psql_val "SELECT try_buy('user-1', '$goods')" >/dev/null
is "$(psql_val "SELECT string_agg(status, ',' ORDER BY status) FROM stampede_answers
	WHERE user_id = 'user-1'")" duplicate,ok "user-1 asking again is told duplicate"

cat >"$work/stampede.sql" <<SQL
\set u random(1, $users)
SELECT try_buy('user-' || :u, '$goods');
SQL
# the answers log is the test's bookkeeping (the worker's commits stay durable)
PGOPTIONS='-c synchronous_commit=off' measure "stampede of $users users" 200 "${SECKILL_STAMPEDE_SECONDS:-15}" stampede
diag "$(psql_val "SELECT status || ': ' || count(*) FROM stampede_answers GROUP BY status ORDER BY status")"

is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE $active")" $stock \
	"exactly $stock orders"
is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders o WHERE $active
	GROUP BY o.user_id HAVING count(*) > 1) d")" 0 "no user bought twice"
is "$(psql_val "SELECT sum(qty) FROM seckill.orders o WHERE $active")" $stock \
	"ordered quantity = stock"
is "$(psql_val "SELECT sold FROM seckill.campaigns WHERE id = $cid")" $stock \
	"campaign sold = $stock"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'ok'")" $stock \
	"$stock ok answers"
is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok'
	AND NOT EXISTS (SELECT 1 FROM seckill.orders o
		WHERE $active AND o.id = a.order_id AND o.user_id = a.user_id)")" 0 \
	"every ok answer has its order row"
is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE $active
	AND NOT EXISTS (SELECT 1 FROM stampede_answers a
		WHERE a.status = 'ok' AND a.order_id = o.id)")" 0 \
	"every order was answered ok"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'error'")" 0 \
	"no call raised an error" ||
	diag "$(psql_val "SELECT count(*) || ' x ' || err FROM stampede_answers
		WHERE status = 'error' GROUP BY err ORDER BY count(*) DESC LIMIT 10")"
is "$(psql_val "SELECT bool_or(status = 'sold_out') AND bool_or(status = 'duplicate')
	FROM stampede_answers")" t "answers include sold_out and duplicate"
is "$(psql_val "SELECT sold || '/' || coalesce(redis_stock::text, 'null')
	FROM seckill_status('$goods')")" "$stock/0" "status: sold $stock, 0 left in Redis"
is "$(psql_val "SELECT status FROM seckill_buy('user-late', '$goods')")" sold_out \
	"a late buyer is told sold_out"

# After sell-out a purchase should cost about a SELECT 1.
secs=${SECKILL_BENCH_SECONDS:-5}
# The baseline has the same shape as the purchase: a \set, then one statement
# (pgbench 15 logs 0 us for most transactions of a script without a \set).
cat >"$work/select.sql" <<SQL
\set u random(1, $users)
SELECT :u;
SQL
cat >"$work/after.sql" <<SQL
\set u random(1, $users)
SELECT status FROM seckill_buy('user-' || :u, '$goods');
SQL
measure "baseline SELECT" 32 "$secs" select
measure "seckill_buy after sell-out" 32 "$secs" after
measure "seckill_buy after sell-out" 256 "$secs" after

is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE $active")" $stock \
	"still exactly $stock orders"

# While stock lasts: every call is a real purchase, committed durably.
big=$goods-big
psql_val "SELECT seckill_campaign_create('$big', 100000000)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$big')")" 100000000 "a campaign that cannot sell out"
cat >"$work/buy.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT status FROM seckill_buy('buyer-' || :u, '$big');
SQL
counters() {
	psql_val "SELECT rounds || ' ' || purchases || ' ' || redis_round_trips || ' ' || commits
		FROM seckill.worker_counters()"
}
read -r r0 p0 t0 c0 <<<"$(counters)"
measure "seckill_buy while stock lasts" 32 "$secs" buy
measure "seckill_buy while stock lasts" 256 "$secs" buy
read -r r1 p1 t1 c1 <<<"$(counters)"
diag "worker: $((p1 - p0)) purchases in $((r1 - r0)) rounds ($(((p1 - p0) / (r1 - r0 + 1))) a round);" \
	"per 1,000 purchases $(((t1 - t0) * 1000 / (p1 - p0 + 1))) Redis round trips, $(((c1 - c0) * 1000 / (p1 - p0 + 1))) commits"
ok "[ $((p1 - p0)) -gt 0 ]" "the worker counted the purchases" 
is "$(psql_val "SELECT c.sold = (SELECT count(*) FROM seckill.orders o WHERE o.campaign_id = c.id)
	AND c.sold + s.redis_stock = c.total_stock
	FROM seckill.campaigns c, seckill_status('$big') s WHERE c.goods = '$big'")" t \
	"every purchase is an order, and Redis' stock + sold = total"
psql_val "SELECT seckill_close('$big')" >/dev/null
done_testing
