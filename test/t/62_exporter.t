#!/usr/bin/env bash
# Prometheus through Debian's postgres_exporter: the query file of
# docs/monitoring/postgres_exporter.yaml, run by the real exporter connected
# as a role that is only a member of pg_monitor, scraped while a sale runs
# and after it.  The metrics agree with seckill.stats and seckill.orders:
# calls, answers by status, rounds, latency, the Redis node, slots in use.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

exporter=/usr/bin/prometheus-postgres-exporter
port=${SECKILL_EXPORTER_PORT:-$SECKILL_OWN_PORT}
ports_free SECKILL_EXPORTER_PORT "$port"
goods="exported-$$"
work=$(mktemp -d -p "$SECKILL_TMP" exporter.XXXXXX)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	psql -XAtq -c "SELECT seckill_close('$goods')" -c "DROP ROLE IF EXISTS seckill_exporter" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

ok "[ -x $exporter ]" "prometheus-postgres-exporter is installed ($($exporter --version 2>&1 | head -n 1))" || done_testing
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
psql -XAtq -v ON_ERROR_STOP=1 -c "DROP ROLE IF EXISTS seckill_exporter" \
	-c "CREATE ROLE seckill_exporter LOGIN IN ROLE pg_monitor" \
	-c "SELECT seckill_campaign_create('$goods', 300)" -c "SELECT seckill_preheat('$goods')" >/dev/null
ok "[ $? -eq 0 ]" "a campaign of 300, and a role seckill_exporter that is only a member of pg_monitor" || done_testing

DATA_SOURCE_NAME="postgresql://seckill_exporter@127.0.0.1:$PGPORT/postgres?sslmode=disable" \
	"$exporter" --web.listen-address="127.0.0.1:$port" --disable-default-metrics --disable-settings-metrics \
	--extend.query-path="$SECKILL_ROOT/docs/monitoring/postgres_exporter.yaml" >"$work/exporter.log" 2>&1 &
pid=$!
scrape() { # scrape file: the exporter's metrics into file
	python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
		"http://127.0.0.1:$port/metrics" >"$1" 2>/dev/null
}
seckill_wait_for "scrape '$work/first'" 30
ok "[ $? -eq 0 ]" "the exporter answers on port $port" || { diag "$(cat "$work/exporter.log")"; done_testing; }
# metric name [label="value"...]: its value in the last scrape, in the
# series that has those labels (the exporter adds server= and sorts them)
metric() {
	local name=$1
	shift
	awk -v m="$name" -v want="$*" 'BEGIN { n = split(want, w, " ") }
		$1 ~ "^"m"({|$)" { for (i = 1; i <= n; i++) if (!index($1, w[i])) next; print $2; exit }' "$work/now"
}

# A sale of 300 items to 600 users buying twice each, in the background
cat >"$work/buy.sql" <<SQL
\set u random(1, 600)
SELECT try_buy('user-' || :u, '$goods');
SQL
pgbench -n -c 16 -j 2 -t 150 -f "$work/buy.sql" >"$work/pgbench.out" 2>&1 &
sale=$!
seckill_wait_for "[ \$(psql_val \"SELECT count(*) FROM stampede_answers\") -ge 200 ]" 30
scrape "$work/now"
ok "[ $? -eq 0 ] && [ \"\$(metric seckill_calls_total)\" -gt 0 ]" \
	"scraped during the sale: seckill_calls_total $(metric seckill_calls_total)"
wait "$sale"
ok "grep -q 'number of failed transactions: 0' '$work/pgbench.out'" "the sale: 2,400 calls, every one returned"

# The figures after the sale, as the exporter and as seckill.stats say them
scrape "$work/now"
ok "[ $? -eq 0 ]" "scraped after the sale"
is "$(metric pg_exporter_last_scrape_error)" 0 "the exporter's last scrape had no error"
is "$(metric pg_exporter_user_queries_load_error)" 0 "it loaded the query file without error"
stats=$(psql_val "SELECT calls || ' ' || ok || ' ' || sold_out || ' ' || duplicate || ' ' || rounds || ' ' || errors
	FROM seckill.stats WHERE campaign_id IS NULL")
read -r calls oks sold_out duplicate rounds errors <<<"$stats"
is "$(metric seckill_calls_total)" "$calls" "seckill_calls_total is seckill.stats' calls ($calls)"
is "$(metric seckill_answers_total 'goods=""' 'status="ok"')" "$oks" "seckill_answers_total{status=\"ok\"} is its ok ($oks)"
is "$(metric seckill_answers_total 'goods=""' 'status="sold_out"')" "$sold_out" "and sold_out ($sold_out)"
is "$(metric seckill_answers_total 'goods=""' 'status="duplicate"')" "$duplicate" "and duplicate ($duplicate)"
is "$(metric seckill_answers_total "goods=\"$goods\"" 'status="ok"')" 300 \
	"the campaign's own row: 300 ok, as many as its orders ($(psql_val "SELECT count(*) FROM seckill.orders o
		JOIN seckill.campaigns c ON c.id = o.campaign_id WHERE c.goods = '$goods'"))"
is "$(awk '$1 ~ /^seckill_answers_total\{goods="",/ { s += $2 } END { print s + 0 }' "$work/now")" "$calls" \
	"the answers by status add up to the calls"
is "$(metric seckill_rounds_total)" "$rounds" "seckill_rounds_total is its rounds ($rounds)"
is "$(metric seckill_errors_total)" "$errors" "seckill_errors_total is its errors ($errors)"
p99=$(metric seckill_latency_ms 'stage="call"' 'quantile="0.99"')
ok "awk -v v='$p99' 'BEGIN { exit !(v > 0) }'" "seckill_latency_ms{stage=\"call\",quantile=\"0.99\"}: $p99 ms"
is "$(metric seckill_redis_node_connected "node=\"127.0.0.1:$SECKILL_REDIS_PORT\"")" 1 \
	"seckill_redis_node_connected says the worker reaches 127.0.0.1:$SECKILL_REDIS_PORT"
is "$(metric seckill_slots_in_use)" 0 "seckill_slots_in_use is 0 with no call under way"
ok "[ \"\$(metric seckill_purchases_per_round)\" != '' ]" \
	"seckill_purchases_per_round: $(metric seckill_purchases_per_round)"

# A waiting room's line: 5 buyers joined before the start
room="$goods-room"
psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT seckill_campaign_create('$room', 2, now() + interval '1 hour')" \
	-c "SELECT seckill_campaign_set('$room', '{\"queue\": true}')" -c "SELECT seckill_preheat('$room')" >/dev/null
for i in 1 2 3 4 5; do psql_val "SELECT state FROM seckill_queue_join('room-$i', '$room')" >/dev/null; done
seckill_wait_for "scrape '$work/now' && [ \"\$(metric seckill_queue_length \"goods=\\\"$room\\\"\")\" = 5 ]" 10
ok "[ $? -eq 0 ]" "seckill_queue_length{goods=\"$room\"}: the 5 who joined before the start"
is "$(metric seckill_queue_admitted_total "goods=\"$room\"")" 0 "seckill_queue_admitted_total: none admitted before the start"
psql_val "SELECT seckill_close('$room')" >/dev/null
done_testing
