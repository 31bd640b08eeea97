#!/usr/bin/env bash
# seckill.redis_unavailable = database: Redis stops for the middle of a sale
# and comes back empty.  Meanwhile the worker sells from PostgreSQL alone, its
# constraints arbitrating; when Redis is back every campaign is rebuilt from
# PostgreSQL before Redis takes over again.  The invariants hold throughout.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

log=$SECKILL_TMP/postgresql.log
stock=15000
goods=fallback-$(date +%s)-$$
work=$(mktemp -d)
trap 'psql -XAtq -c "ALTER SYSTEM RESET seckill.redis_unavailable" -c "SELECT pg_reload_conf()" >/dev/null 2>&1;
	seckill_redis_ready || seckill_redis_start; rm -rf "$work"' EXIT

count() { grep -c "$1" "$log" || true; }
before=$(count 'seckill worker reloaded its configuration')
psql -XAtq -c "ALTER SYSTEM SET seckill.redis_unavailable = 'database'" -c "SELECT pg_reload_conf()" >/dev/null
seckill_wait_for "[ \$(count 'seckill worker reloaded its configuration') -gt $before ]" 10
ok "[ $? -eq 0 ]" "seckill.redis_unavailable = database"

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
is "$(psql_val "SELECT seckill_campaign_create('$goods', $stock) > 0")" t "campaign of $stock created"
is "$(psql_val "SELECT seckill_preheat('$goods')")" $stock "preheated"
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
orders_sql="SELECT count(*) FROM seckill.orders WHERE campaign_id = $cid"
orders_at_least() { [ "$(psql_val "$orders_sql")" -ge "$1" ]; }
path() { psql_val "SELECT sales_path FROM seckill_status('$goods')" 2>/dev/null; }

cat >"$work/crowd.sql" <<SQL
\set u random(1, 60000)
SELECT try_buy('user-' || :u, '$goods');
SQL
pgbench -n -c 64 -j 2 -R 1500 -T 15 -f "$work/crowd.sql" >"$work/crowd.out" 2>&1 &
crowd=$!
seckill_wait_for "orders_at_least 300" 30
ok "[ $? -eq 0 ]" "the sale is under way through Redis"

seckill_redis_stop
down=$(psql_val "$orders_sql")
seckill_wait_for "orders_at_least $((down + 300))" 30
ok "[ $? -eq 0 ]" "with Redis stopped, sales go on from PostgreSQL ($down orders when it stopped)"
is "$(path)" database "seckill_status shows sales_path = database"

seckill_redis_start
seckill_wait_for "[ \"\$(path)\" = redis ]" 30
ok "[ $? -eq 0 ]" "Redis back, empty: the campaign is rebuilt and Redis takes over again"
wait "$crowd"
ok "grep -q 'number of failed transactions: 0' '$work/crowd.out'" "every call of the crowd returned"
ok "grep -q 'seckill worker sells from PostgreSQL alone' '$log' && grep -q 'sales go through Redis again' '$log'" \
	"both switches are logged"
diag "answers: $(psql_val "SELECT string_agg(status || '=' || n, ' ') FROM (SELECT status, count(*) n
	FROM stampede_answers GROUP BY 1 ORDER BY 1) s")"
diag "errors: $(psql_val "SELECT coalesce(string_agg(n || ' x ' || err, '; '), 'none') FROM (SELECT left(err, 80) err, count(*) n
	FROM stampede_answers WHERE status = 'error' GROUP BY 1) s")"

cat >"$work/rest.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT try_buy('fresh-' || :u, '$goods');
SQL
sold_out() { [ "$(psql_val "SELECT sold FROM seckill.campaigns WHERE id = $cid")" -eq $stock ]; }
for _ in $(seq 1 10); do
	sold_out && break
	pgbench -n -c 32 -j 2 -T 2 -f "$work/rest.sql" >/dev/null 2>&1
done
ok sold_out "fresh buyers sold the rest"

active="campaign_id = $cid AND status <> 'cancelled'"
is "$(psql_val "SELECT count(*) || '/' || sum(qty) FROM seckill.orders WHERE $active")" "$stock/$stock" \
	"exactly $stock orders: no oversell"
is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders WHERE $active GROUP BY user_id HAVING count(*) > 1) d")" 0 \
	"no user bought twice"
is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok'
	AND NOT EXISTS (SELECT 1 FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id)")" 0 \
	"every ok answer has its order"
is "$(psql_val "SELECT redis_stock || '/' || in_flight || '/' || redis_buyers || '/' || sales_path FROM seckill_status('$goods')")" \
	"0/0/$stock/redis" "Redis: stock 0, journal empty, one buyer per order"
done_testing
