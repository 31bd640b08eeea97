#!/usr/bin/env bash
# Faults during a stampede: the worker is killed with SIGKILL (the postmaster
# then restarts the whole cluster), PostgreSQL stops at once (immediate) and
# starts again, and Redis restarts empty.  Afterwards a
# reconcile, then fresh buyers sell the rest; the invariants must hold:
# exactly the stock sold, no oversell, no duplicate, every ok answer backed by
# its order, and every reservation Redis granted either an order or a logged
# compensation, with nothing left in the journal.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

stock=20000
goods=faults-$(date +%s)-$$
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
is "$(psql_val "SELECT seckill_campaign_create('$goods', $stock) > 0")" t "campaign created" || done_testing
is "$(psql_val "SELECT seckill_preheat('$goods')")" $stock "preheated" || done_testing
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
active="o.campaign_id = $cid AND o.status IN ('reserved', 'paid')"
orders_sql="SELECT count(*) FROM seckill.orders o WHERE $active"

# A crowd of 64 connections, 2,000 attempts a second, users drawn from 30,000
# (so that many ask twice), that keeps going while the faults happen.
cat >"$work/crowd.sql" <<SQL
\set u random(1, 30000)
SELECT try_buy('user-' || :u, '$goods');
SQL
crowd() { # seconds, log name
	pgbench -n -c 64 -j 2 -R 2000 -T "$1" -f "$work/crowd.sql" >"$work/$2.out" 2>&1
}
worker_up() {
	seckill_pg_ready && [ -n "$(seckill_worker_pid 2>/dev/null)" ]
}
orders_at_least() {
	[ "$(psql_val "$orders_sql" 2>/dev/null || echo 0)" -ge "$1" ]
}

# 1. kill -9 the worker mid-sale, twice
for round in 1 2; do
	crowd 8 "kill-$round" &
	crowd_pid=$!
	before=$(psql_val "$orders_sql")
	seckill_wait_for "orders_at_least $((before + 1000))" 30
	ok "[ $? -eq 0 ]" "kill $round: the sale is under way ($before+ orders)"
	wpid=$(seckill_worker_pid)
	started=$(date +%s%3N)
	kill -9 "$wpid"
	seckill_wait_for worker_up 60
	ok "[ $? -eq 0 ]" "kill $round: cluster and worker back after SIGKILL of worker $wpid"
	diag "kill $round: worker back in $(($(date +%s%3N) - started)) ms"
	wait "$crowd_pid" # the crowd's connections died with the cluster
done

# 2. PostgreSQL stops at once (immediate: no checkpoint, crash recovery at
#    start) mid-sale, and starts again
crowd 8 pg-immediate &
crowd_pid=$!
before=$(psql_val "$orders_sql")
seckill_wait_for "orders_at_least $((before + 1000))" 30
ok "[ $? -eq 0 ]" "immediate stop: the sale is under way"
started=$(date +%s%3N)
seckill_pg_ctl -m immediate stop >/dev/null
seckill_pg_ctl -w start >/dev/null
seckill_wait_for worker_up 60
ok "[ $? -eq 0 ]" "PostgreSQL restarted after an immediate stop, worker up"
diag "immediate stop: worker back in $(($(date +%s%3N) - started)) ms"
wait "$crowd_pid"

# 3. Redis restarts empty mid-sale: buying resumes only after the rebuild
crowd 10 redis &
crowd_pid=$!
before=$(psql_val "$orders_sql")
seckill_wait_for "orders_at_least $((before + 1000))" 30
ok "[ $? -eq 0 ]" "redis: the sale is under way"
seckill_redis_restart_empty
ok "[ $? -eq 0 ]" "redis restarted empty"
restarted_orders=$(psql_val "$orders_sql")
seckill_wait_for "orders_at_least $((restarted_orders + 500))" 30
ok "[ $? -eq 0 ]" "redis: sales resume after the campaign is rebuilt"
wait "$crowd_pid"
ok "grep -q 'number of failed transactions: 0' '$work/redis.out'" \
	"redis: every call of the crowd returned (statuses or caught errors)"

diag "answers during the faults: $(psql_val "SELECT string_agg(status || '=' || n, ' ')
	FROM (SELECT status, count(*) n FROM stampede_answers GROUP BY 1 ORDER BY 1) s")"
diag "errors: $(psql_val "SELECT string_agg(n || ' x ' || err, '; ')
	FROM (SELECT left(err, 90) err, count(*) n FROM stampede_answers
		WHERE status = 'error' GROUP BY 1 ORDER BY 2 DESC LIMIT 5) s")"

# 4. reconcile, then fresh buyers sell what is left
psql_val "SELECT * FROM seckill_reconcile('$goods')" >"$work/reconcile.out"
ok "[ $? -eq 0 ]" "reconcile ran: $(cat "$work/reconcile.out")"
is "$(psql_val "SELECT redis_stock = pg_stock AND in_flight = 0 FROM seckill_status('$goods')")" t \
	"after reconcile: Redis stock = total - sold, journal empty"
cat >"$work/rest.sql" <<SQL
\set u random(1, 100000000)
SELECT try_buy('fresh-' || :u, '$goods');
SQL
sold_out() {
	[ "$(psql_val "SELECT sold FROM seckill.campaigns WHERE id = $cid")" -eq $stock ]
}
for _ in $(seq 1 10); do
	sold_out && break
	pgbench -n -c 32 -j 2 -T 3 -f "$work/rest.sql" >"$work/rest.out" 2>&1
done
ok sold_out "fresh buyers sold the rest"

is "$(psql_val "$orders_sql")" $stock "exactly $stock active orders"
is "$(psql_val "SELECT coalesce(sum(qty), 0) FROM seckill.orders o WHERE $active")" $stock \
	"ordered quantity = stock: no oversell"
is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders o WHERE $active
	GROUP BY o.user_id HAVING count(*) > 1) d")" 0 "no user bought twice"
is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok'
	AND NOT EXISTS (SELECT 1 FROM seckill.orders o
		WHERE $active AND o.id = a.order_id AND o.user_id = a.user_id)")" 0 \
	"every ok answer has its committed order"
is "$(psql_val "SELECT count(*) FROM seckill.compensations c
	JOIN seckill.orders o ON o.id = c.request_id")" 0 \
	"no reservation is both an order and a compensation"
is "$(psql_val "SELECT redis_stock || '/' || in_flight || '/' || redis_buyers FROM seckill_status('$goods')")" \
	"0/0/$stock" "Redis: stock 0, journal empty, one buyer per order"
is "$(psql_val "SELECT status FROM seckill_buy('after-all', '$goods')")" sold_out "sold_out at the end"
diag "compensations logged: $(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $cid")"
done_testing
