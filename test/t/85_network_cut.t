#!/usr/bin/env bash
# The network to Redis is cut in the middle of a sale and restored: the worker
# reaches Redis through a TCP relay (socat) that is frozen with SIGSTOP, so
# packets stop without any reset, as in a real partition, then thawed.
# Callers get errors within the bound, never a hang; sales resume by
# themselves; after reconcile every reservation is accounted for.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

log=$SECKILL_TMP/postgresql.log
relay_port=$((SECKILL_REDIS_PORT + 1))
goods=netcut-$(date +%s)-$$
work=$(mktemp -d)
relay=
# socat forks a process per connection: freeze and thaw them all
relay_signal() { kill "-$1" "$relay" $(pgrep -P "$relay") 2>/dev/null; }
cleanup() {
	[ -n "$relay" ] && relay_signal CONT && relay_signal TERM
	psql -XAtq -c "ALTER SYSTEM RESET seckill.redis_port" -c "SELECT pg_reload_conf()" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

socat TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$SECKILL_REDIS_PORT" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
ok "[ $? -eq 0 ]" "a TCP relay to Redis on port $relay_port"
count() { grep -c "$1" "$log" || true; }
before=$(count 'seckill worker reloaded its configuration')
psql -XAtq -c "ALTER SYSTEM SET seckill.redis_port = $relay_port" -c "SELECT pg_reload_conf()" >/dev/null
seckill_wait_for "[ \$(count 'seckill worker reloaded its configuration') -gt $before ]" 10
ok "[ $? -eq 0 ]" "the worker goes through the relay"

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
stock=20000
is "$(psql_val "SELECT seckill_campaign_create('$goods', $stock) > 0")" t "campaign of $stock created"
is "$(psql_val "SELECT seckill_preheat('$goods')")" $stock "preheated through the relay"
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
orders_sql="SELECT count(*) FROM seckill.orders WHERE campaign_id = $cid"
orders_at_least() { [ "$(psql_val "$orders_sql")" -ge "$1" ]; }

cat >"$work/crowd.sql" <<SQL
\set u random(1, 60000)
SELECT try_buy('user-' || :u, '$goods');
SQL
pgbench -n -c 64 -j 2 -R 1500 -T 12 -f "$work/crowd.sql" --log --log-prefix="$work/txn" >"$work/crowd.out" 2>&1 &
crowd=$!
seckill_wait_for "orders_at_least 500" 30
ok "[ $? -eq 0 ]" "the sale is under way"

drops=$(count 'seckill worker disconnected from Redis')
relay_signal STOP
cut=$(psql_val "$orders_sql")
seckill_wait_for "[ \$(count 'seckill worker disconnected from Redis') -gt $drops ]" 15
ok "[ $? -eq 0 ]" "network cut: the worker gives up on the silent connection"
relay_signal CONT
restored=$(date +%s%3N)
seckill_wait_for "orders_at_least $((cut + 500))" 30
ok "[ $? -eq 0 ]" "network restored: sales resume"
diag "sales resumed $(($(date +%s%3N) - restored)) ms after the network came back"
wait "$crowd"
ok "grep -q 'number of failed transactions: 0' '$work/crowd.out'" "every call of the crowd returned"
slowest=$(cat "$work"/txn.* | awk '$3 > m { m = $3 } END { printf "%d", m / 1000 }')
ok "[ $slowest -lt 6000 ]" "the slowest call took $slowest ms (request timeout 5000 ms)"
diag "answers: $(psql_val "SELECT string_agg(status || '=' || n, ' ') FROM (SELECT status, count(*) n
	FROM stampede_answers GROUP BY 1 ORDER BY 1) s")"

psql_val "SELECT * FROM seckill_reconcile('$goods')" >"$work/reconcile.out"
ok "[ $? -eq 0 ]" "reconcile: $(cat "$work/reconcile.out")"
active="campaign_id = $cid AND status <> 'cancelled'"
is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders WHERE $active GROUP BY user_id HAVING count(*) > 1) d")" 0 \
	"no user bought twice"
is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok'
	AND NOT EXISTS (SELECT 1 FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id)")" 0 \
	"every ok answer has its order"
is "$(psql_val "SELECT (c.sold = (SELECT coalesce(sum(qty), 0) FROM seckill.orders WHERE $active))
	AND s.redis_stock = s.pg_stock AND s.in_flight = 0
	FROM seckill.campaigns c, seckill_status('$goods') s WHERE c.id = $cid")" t \
	"sold = orders, Redis' stock = total - sold, journal empty"
is "$(psql_val "SELECT count(*) FROM seckill.compensations c JOIN seckill.orders o ON o.id = c.request_id")" 0 \
	"no reservation is both an order and a compensation"
psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
