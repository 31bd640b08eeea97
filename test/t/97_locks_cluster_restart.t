#!/usr/bin/env bash
# A fair lock on a Redis Cluster whose master holding it restarts empty (no
# persistence) while it is held and 4 sessions wait in its line: the worker
# finds that master new (its run_id), puts the holder's lease and the line
# back before any other lock script runs, nobody is granted the lock
# meanwhile, and once the holder lets go the waiters get it in the order
# they came, each with a newer fencing token.  Then 12 sessions take the
# lock fair and 3 take it shared, in loops (test/t/lock_crowd.sh), and that
# master restarts empty again while a hold of 4 s is under way: no
# exclusive hold overlaps another, the tokens rise in grant order, and
# every holder still held the lock when it released it.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"
# shellcheck source=test/t/fair_line.sh
. "$(dirname "$0")/fair_line.sh"
# shellcheck source=test/t/lock_crowd.sh
. "$(dirname "$0")/lock_crowd.sh"

base=$SECKILL_OWN_PORT
nodes=("$base" $((base + 1)) $((base + 2)))
waiters=4
own_servers lock-cluster
cleanup() {
	kill $(jobs -p) 2>/dev/null
	wait
	seckill_configure "RESET seckill.redis_cluster" "RESET seckill.redis_port" >/dev/null 2>&1
	seckill_cluster_stop "$work"
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
ports_free SECKILL_OWN_PORT "${nodes[@]}" $((base + 10)) $((base + 11)) $((base + 12))

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
seckill_cluster_create "$work" 0 "${nodes[@]}" 7>&-
ok "[ $? -eq 0 ]" "a Redis Cluster of three masters on ports ${nodes[*]}" || done_testing
seckill_configure "SET seckill.redis_cluster = on" "SET seckill.redis_port = ${nodes[0]}"
seckill_wait_for "[ \"\$(psql_val \"SELECT count(*) FROM seckill.redis_nodes WHERE connected\")\" = 3 ]" 15
ok "[ $? -eq 0 ]" "the worker is connected to all three" || done_testing_with_logs 20 "$log" "$work"/*/log

fair_line cl
fair_queue "$waiters" "$work"
is "$(fair_in_line)" "$waiters" "the lock held, $waiters sessions waiting in its line"

key="$prefix:{lock:cl}"
holder=none
for port in "${nodes[@]}"; do
	[ "$(rcli "$port" EXISTS "$key")" = 1 ] && holder=$port
done
ok "[ $holder != none ]" "its lease is on the master on port $holder" || done_testing_with_logs 20 "$log"

# that master restarts empty, on its own cluster configuration
run_id() { rcli "$1" INFO server | tr -d '\r' | sed -n 's/^run_id://p'; }
restart_empty() {
	local before pid
	before=$(run_id "$holder")
	pid=$(cat "$work/redis-$holder/pid")
	rcli "$holder" SHUTDOWN NOSAVE >/dev/null 2>&1
	seckill_wait_for "! seckill_running $pid" 10
	seckill_cluster_node_start "$work/redis-$holder" "$holder" 7>&-
	seckill_wait_for "seckill_cluster_ok ${nodes[*]}" 20
	ok "[ $? -eq 0 ] && [ \"\$(run_id $holder)\" != '$before' ]" \
		"$1: the master on port $holder restarted without its data (a new run_id), the cluster ok"
}
mark=$(wc -c <"$log")
restart_empty line
seckill_wait_for "tail -c +$((mark + 1)) '$log' | grep -q 'seckill worker put back 1 lock lease(s) and $waiters place(s)'" 20
ok "[ $? -eq 0 ]" "the worker put back the holder's lease and the $waiters places" ||
	diag "$(tail -c +$((mark + 1)) "$log" | grep -i 'put back\|kept\|lost\|run_id\|epoch')"
is "$(rcli "$holder" EXISTS "$key")" 1 "the lease is on that master again"
is "$(psql_val "SELECT count(*) FROM fair_grants")" 0 "nobody was granted the lock meanwhile"
is "$(psql_val "SELECT state FROM seckill.locks WHERE name = 'cl' AND owner_pid <> 0 AND state <> 'waiting'")" held \
	"the holder still holds it"

session_end "SELECT seckill_unlock('cl');"
seckill_wait_for "[ \$(psql_val 'SELECT count(*) FROM fair_grants') -eq $waiters ]" 30
ok "[ $? -eq 0 ]" "the holder let go: all $waiters waiters got the lock"
is "$(psql_val "SELECT string_agg(waiter::text, ' ' ORDER BY at) FROM fair_grants")" "$(seq -s ' ' 1 "$waiters")" \
	"in the order they came"
is "$(psql_val "SELECT count(*) FROM (SELECT token <= coalesce(lag(token) OVER (ORDER BY at), $fair_first) AS older
	FROM fair_grants) g WHERE older")" 0 "each with a newer fencing token than the one before"

# the crowd on the same lock, and the same master restarted empty under it
lock_crowd_start cl 20 "$work"
seckill_wait_for "lock_crowd_busy cl" 15
ok "[ $? -eq 0 ]" "crowd: the lock held, 8 or more sessions waiting in line"
seckill_wait_for "lock_crowd_long_hold cl" 15
ok "[ $? -eq 0 ]" "crowd: a hold of 4 s under way"
mark=$(wc -c <"$log")
restart_empty crowd
seckill_wait_for "tail -c +$((mark + 1)) '$log' | grep -q 'seckill worker put back [1-9]'" 20
ok "[ $? -eq 0 ]" "crowd: the worker put the leases back"
seckill_wait_for "lock_crowd_busy cl" 15
ok "[ $? -eq 0 ]" "crowd: ... and the line moves on"
lock_crowd_check cl crowd

done_testing_with_logs 20 "$log" "$work"/*/log
