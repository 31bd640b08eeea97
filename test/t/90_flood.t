#!/usr/bin/env bash
# A flood past the admission bound while the worker is stuck on a stalled
# Redis: past seckill.max_queue purchases are answered busy at once; callers
# cancelled or terminated while they wait lose nothing; once Redis is back no
# slot is lost and the worker serves everyone.
# Runs alone: it catches callers while they wait, in windows of seconds.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

redis_pid=$(cat "$SECKILL_TMP/redis.pid")
trap 'kill -CONT "$redis_pid" 2>/dev/null
	seckill_configure "RESET seckill.max_queue" >/dev/null 2>&1' EXIT

seckill_configure "SET seckill.max_queue = 16"
ok "[ $? -eq 0 ]" "seckill.max_queue = 16"

sale_begin "flood-$(date +%s)-$$" 5000
goods=$SALE_GOODS
work=$SALE_WORK

cat >"$work/flood.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT try_buy('flood-' || :u, '$goods');
SQL
kill -STOP "$redis_pid"
waiting="SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%try_buy%'"
psql -XAtq -c "SELECT try_buy('gone-away', '$goods')" >/dev/null 2>&1 &
client=$!
seckill_wait_for "[ \$(psql_val \"$waiting AND query LIKE '%gone-away%'\") -ge 1 ]" 10
kill -9 "$client"
ok "[ $? -eq 0 ]" "a waiting client disconnected (its process killed)"
pgbench -n -c 128 -j 2 -T 8 -f "$work/flood.sql" --log --log-prefix="$work/txn" >"$work/flood.out" 2>&1 &
flood=$!
seckill_wait_for "[ \$(psql_val \"$waiting\") -ge 10 ]" 15
ok "[ $? -eq 0 ]" "callers wait on the stuck worker"
# The worker fails a stalled round's callers all at once, and callers that
# come while it knows Redis stalled are answered at once: at one look few may
# be waiting.  Cancel and terminate in the same looks, every other caller.
signal_waiting() {
	local c t
	read -r c t < <(psql_val "SELECT count(*) FILTER (WHERE c), count(*) FILTER (WHERE t)
		FROM (SELECT CASE WHEN n % 2 = 0 THEN pg_cancel_backend(pid) END c,
				CASE WHEN n % 2 = 1 THEN pg_terminate_backend(pid) END t
			FROM (SELECT pid, row_number() OVER () n FROM pg_stat_activity
				WHERE wait_event_type = 'Extension' AND query LIKE '%try_buy%' LIMIT 10) w) s" | tr '|' ' ')
	cancelled=$((cancelled + c)) terminated=$((terminated + t))
	[ "$cancelled" -gt 0 ] && [ "$terminated" -gt 0 ]
}
cancelled=0 terminated=0
seckill_wait_for signal_waiting 5
ok "[ $cancelled -gt 0 ] && [ $terminated -gt 0 ]" "$cancelled waiting callers cancelled, $terminated terminated"
wait "$flood"
kill -CONT "$redis_pid"

diag "flood answers: $(psql_val "SELECT string_agg(status || '=' || n || ' (max ' || round(m) || ' ms)', ', ')
	FROM (SELECT status, count(*) n, max(took_ms) m FROM stampede_answers GROUP BY 1 ORDER BY 1) s")"
ok "[ $(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'busy'") -gt 100 ]" "past the bound: busy"
p99=$(psql_val "SELECT round(percentile_cont(0.99) WITHIN GROUP (ORDER BY took_ms)::numeric, 2)
	FROM stampede_answers WHERE status = 'busy'")
# The stalled ones wait for the worker, a second or more; busy answers never
# do.  The bound leaves room for 128 clients on two cores.
ok "awk -v p='$p99' 'BEGIN { exit !(p < 500) }'" "busy answers come without waiting for the worker: p99 $p99 ms (the stalled ones wait 1-2 s)"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE took_ms > 6000")" 0 \
	"no call waited past the request timeout"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status NOT IN ('busy', 'error')")" 0 \
	"no call claimed an outcome while Redis was stalled"

# Redis back: every connection's slot still works, the worker serves them all
seckill_configure "RESET seckill.max_queue"
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('probe', '$goods')\" 2>/dev/null)\" = ok ]" 15
ok "[ $? -eq 0 ]" "Redis back: purchases resume"
psql_val "TRUNCATE stampede_answers" >/dev/null
pgbench -n -c 250 -j 2 -T 1 -f "$work/flood.sql" >"$work/after.out" 2>&1
ok "grep -q 'number of failed transactions: 0' '$work/after.out'" "250 connections at once afterwards"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status NOT IN ('ok', 'sold_out')")" 0 \
	"every one of them bought, or was told sold_out"
sale_finish
done_testing
