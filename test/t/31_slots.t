#!/usr/bin/env bash
# No request slot is lost to a cancel or a SIGTERM of the worker under load:
# a drained request is taken before any interrupt is served, and every taken
# one is answered or failed.  Once the load stops, seckill.stats says no slot
# is in use, and fresh sessions on every backend id are served at once.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

log=$SECKILL_TMP/postgresql.log
worker_pid() { psql_val "SELECT pid FROM pg_stat_activity WHERE backend_type = 'seckill worker'"; }
slots_in_use() { psql_val "SELECT slots_in_use FROM seckill.stats WHERE campaign_id IS NULL"; }

sale_begin "slots-$(date +%s)-$$" 1000000
is "$(slots_in_use)" 0 "no slot in use before the load"
sale_crowd until crowd 1000000000 32 100000
seckill_wait_for "sale_orders_at_least 2000" 30
ok "[ $? -eq 0 ]" "32 sessions buy as fast as they can"

# cancels in bursts, a SIGTERM after every 25th: the worker restarts
cancels=0 terms=0 cancel_errors_before=$(grep -c 'canceling statement due to user request' "$log" || true)
for round in $(seq 1 4); do
	for _ in $(seq 1 25); do
		psql_val "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE backend_type = 'seckill worker'" \
			>/dev/null 2>&1 && cancels=$((cancels + 1))
		sleep 0.02
	done
	pid=$(worker_pid)
	if [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; then
		terms=$((terms + 1))
		seckill_wait_for "[ -n \"\$(worker_pid)\" ] && [ \"\$(worker_pid)\" != $pid ]" 10
	fi
done
cancel_errors=$(($(grep -c 'canceling statement due to user request' "$log" || true) - cancel_errors_before))
ok "[ $cancels -ge 90 ] && [ $terms -eq 4 ]" "$cancels cancels and $terms SIGTERMs of the worker under load"
ok "[ $cancel_errors -gt 0 ]" "$cancel_errors cancel(s) broke into a round"
crowd_done crowd
ok "[ $(sale_orders) -gt 0 ]" "the sale went on: $(sale_orders) orders"

seckill_wait_for "[ \"\$(slots_in_use)\" = 0 ]" 10
ok "[ $? -eq 0 ]" "once the load stopped, no slot is in use (seckill.stats: $(slots_in_use))"

# 40 fresh sessions, 4 calls each, on the backend ids the crowd used
cat >"$SALE_WORK/fresh.sql" <<SQL
\set u random(1, 1000000000000)
SELECT status FROM seckill_buy('fresh-' || :u, '$SALE_GOODS');
SQL
pgbench -n -C -c 40 -j 2 -t 4 -f "$SALE_WORK/fresh.sql" >"$SALE_WORK/fresh.out" 2>&1
ok "grep -q 'number of failed transactions: 0' '$SALE_WORK/fresh.out' && grep -q 'number of transactions actually processed: 160/160' '$SALE_WORK/fresh.out'" \
	"160 calls of 40 fresh sessions all served"
ok "! grep -q 'before it was made' '$SALE_WORK/fresh.out'" "none waited for a slot held by a request lost earlier"
is "$(slots_in_use)" 0 "no slot in use after them"

# seckill.caller_sched_batch: a session that waits for the worker runs under
# SCHED_BATCH (policy 3 in /proc/PID/stat), back under the default (0) as
# soon as it is off, and again under it when on; a policy given with chrt
# beforehand is left alone
policy="split_part(pg_read_file('/proc/self/stat'), ' ', 41)"
policies=$(psql -XAtq -v ON_ERROR_STOP=1 <<SQL 2>&1
SELECT 'before ' || $policy;
SELECT status FROM seckill_buy('policy-1', '$SALE_GOODS');
SELECT 'waited ' || $policy;
SET seckill.caller_sched_batch = off;
SELECT 'off ' || $policy;
SELECT status FROM seckill_buy('policy-2', '$SALE_GOODS');
SELECT 'waited ' || $policy;
SET seckill.caller_sched_batch = on;
SELECT status FROM seckill_buy('policy-5', '$SALE_GOODS');
SELECT 'on again ' || $policy;
SQL
)
is "$(echo $policies)" "before 0 ok waited 3 off 0 ok waited 0 ok on again 3" \
	"a session waits for the worker under SCHED_BATCH, goes back as soon as the setting is off, and switches again when it is on"
policies=$(psql -XAtq -v ON_ERROR_STOP=1 <<SQL 2>&1
SELECT pg_backend_pid() AS pid \gset
\setenv SECKILL_BACKEND :pid
\! chrt --batch -p 0 "\$SECKILL_BACKEND"
SELECT status FROM seckill_buy('policy-3', '$SALE_GOODS');
SET seckill.caller_sched_batch = off;
SELECT status FROM seckill_buy('policy-4', '$SALE_GOODS');
SELECT 'given ' || $policy;
SQL
)
is "$(echo $policies)" "ok ok given 3" "a session put under SCHED_BATCH with chrt beforehand stays there when the setting is off"
rm -rf "$SALE_WORK"
psql_val "SELECT seckill_close('$SALE_GOODS')" >/dev/null
done_testing
