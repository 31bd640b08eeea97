#!/usr/bin/env bash
# Redlock on three independent Redis nodes on loopback: a lock is held only
# when a majority granted it.  With one node stopped the locks still work
# (and stay exclusive under 16 sessions); with two stopped none can be taken,
# with a clear error, and a held lock is reported lost; back to three, all
# works again.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

base=$SECKILL_OWN_PORT
ports="$((base + 1)) $((base + 2)) $((base + 3))"
work=$(mktemp -d)
chmod 755 "$work"

node_start() { # port
	seckill_as_postgres redis-server --bind 127.0.0.1 --port "$1" --save '' --appendonly no \
		--daemonize yes --dir "$SECKILL_TMP" --pidfile "$SECKILL_TMP/redlock-$1.pid" \
		--logfile "$SECKILL_TMP/redlock-$1.log" &&
		seckill_wait_for "[ \"\$(redis-cli -p $1 ping 2>/dev/null)\" = PONG ]" 10
}
node_stop() { # port
	redis-cli -p "$1" shutdown nosave >/dev/null 2>&1
	seckill_wait_for "! redis-cli -p $1 ping >/dev/null 2>&1" 10
}
cleanup() {
	for p in $ports; do node_stop "$p"; done
	psql -XAtq -c "ALTER SYSTEM RESET seckill.redlock_nodes" >/dev/null 2>&1 && seckill_pg_restart
	rm -rf "$work"
}
trap cleanup EXIT
holders() { # key: the owners of the lease on each node
	for p in $ports; do redis-cli -p "$p" GET "$1" 2>/dev/null | grep -c . ; done | paste -sd' '
}

for p in $ports; do node_start "$p"; done
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "ALTER SYSTEM SET seckill.redlock_nodes = '127.0.0.1:$base'" >/dev/null 2>&1
ok "[ $? -ne 0 ]" "one node is refused: Redlock needs an odd number of nodes, at least 3"
psql_val "ALTER SYSTEM SET seckill.redlock_nodes = '$(echo "$ports" | sed 's/\([0-9]*\)/127.0.0.1:\1/g; s/ /,/g')'" >/dev/null &&
	seckill_pg_restart && seckill_wait_for "[ -n \"\$(seckill_worker_pid 2>/dev/null)\" ]" 10
ok "[ $? -eq 0 ]" "three Redlock nodes configured (a restart)"
prefix=$(psql_val "SHOW seckill.redis_prefix")
key="$prefix:{lock:rl}"

# the holder keeps it until its session ends
session_hold "SELECT seckill_lock('rl');"
seckill_wait_for "[ \"\$(psql_val \"SELECT count(*) FROM seckill.locks WHERE name = 'rl'\")\" = 1 ]" 5
is "$(holders "$key")" "1 1 1" "a lock is a lease on every node"
is "$(seckill_redis_cli EXISTS "$key")" 0 "and not on the main Redis"
is "$(psql_val "SELECT seckill_lock('rl', '200 ms') IS NULL")" t "another session does not get it"
session_end "SELECT 1;"
seckill_wait_for "[ \"\$(holders '$key')\" = '0 0 0' ]" 5
ok "[ $? -eq 0 ]" "released on every node when its session ends"

set -- $ports
cat >"$work/counter.sql" <<'SQL'
SELECT seckill_lock('rl-counter', '30 s', '2 s') AS t \gset
SELECT n FROM redlock_counter \gset
UPDATE redlock_counter SET n = :n + 1 WHERE seckill_fence_check('rl-counter', :t) = :t;
SELECT seckill_unlock('rl-counter');
SQL
# a node that hangs (SIGSTOP) is not waited for once a majority answered;
# what it got meanwhile it runs when it resumes, so the leases are short:
# a late grant there expires on its own
hung=$(cat "$SECKILL_TMP/redlock-$1.pid")
kill -STOP "$hung"
psql_val "DROP TABLE IF EXISTS redlock_counter; CREATE TABLE redlock_counter (n int); INSERT INTO redlock_counter VALUES (0)" >/dev/null
t0=$(seckill_now_ms)
pgbench -n -c 16 -j 2 -t 20 -f "$work/counter.sql" >"$work/counter.out" 2>&1
ok "[ $? -eq 0 ]" "one node hung: 16 sessions x 20 lock/unlock cycles ran in $(($(seckill_now_ms) - t0)) ms" ||
	diag "$(tail -5 "$work/counter.out")"
kill -CONT "$hung"
is "$(psql_val "SELECT n FROM redlock_counter")" 320 "and the counter they protect is exact: 320"

node_stop "$3"
psql_val "DROP TABLE IF EXISTS redlock_counter; CREATE TABLE redlock_counter (n int); INSERT INTO redlock_counter VALUES (0)" >/dev/null
pgbench -n -c 16 -j 2 -t 20 -f "$work/counter.sql" >"$work/counter.out" 2>&1
ok "[ $? -eq 0 ]" "one node stopped: 16 sessions x 20 lock/unlock cycles ran" || diag "$(tail -5 "$work/counter.out")"
is "$(psql_val "SELECT n FROM redlock_counter")" 320 "and the counter they protect is exact: 320"

seckill_configure "SET seckill.lock_lease = '900ms'"
psql -XAtq -c "SELECT seckill_lock('rl-held')" -c "SELECT pg_sleep(6)" -c "SELECT seckill_unlock('rl-held')" \
	>"$work/held.out" 2>&1 &
holder=$!
seckill_wait_for "[ \"\$(psql_val \"SELECT state FROM seckill.locks WHERE name = 'rl-held'\")\" = held ]" 5
node_stop "$2"
err=$(psql_val "SELECT seckill_lock('rl-other')" 2>&1)
ok "[[ \"\$err\" == *'only 1 of 3 Redlock nodes'* ]]" "two nodes stopped: taking a lock fails with a clear error: ${err//$'\n'/ }"
seckill_wait_for "[ \"\$(psql_val \"SELECT state FROM seckill.locks WHERE name = 'rl-held'\")\" = lost ]" 10
ok "[ $? -eq 0 ]" "and a lock held before is reported lost when its renewal finds no majority"
wait "$holder"
ok "grep -q 'had run out' '$work/held.out'" "its holder's unlock says so"
seckill_configure "RESET seckill.lock_lease"

node_start "$2"
node_start "$3"
is "$(psql_val "SELECT seckill_lock('rl-back') IS NOT NULL AND seckill_unlock('rl-back')")" t \
	"all three nodes back: locks work again"

# seckill.redis_tls turned on by a reload while a lock is held: the Redlock
# nodes are not reached over TLS, so nothing goes to them in clear any more.
# The lock is shown lost within a renewal period, its lease runs out on the
# nodes unrenewed, and a new lock is refused.
seckill_configure "SET seckill.lock_lease = '900ms'"
psql -XAtq -c "SELECT seckill_lock('rl-tls')" -c "SELECT pg_sleep(4)" -c "SELECT seckill_unlock('rl-tls')" \
	>"$work/tls.out" 2>&1 &
holder=$!
seckill_wait_for "[ \"\$(psql_val \"SELECT state FROM seckill.locks WHERE name = 'rl-tls'\")\" = held ]" 5
mark=$(wc -c <"$SECKILL_TMP/postgresql.log")
seckill_configure "SET seckill.redis_tls = on"
seckill_wait_for "[ \"\$(psql_val \"SELECT state FROM seckill.locks WHERE name = 'rl-tls'\")\" = lost ]" 3
ok "[ $? -eq 0 ]" "TLS turned on: a Redlock lock held before is shown lost" ||
	diag "$(psql_val "SELECT state, renewals FROM seckill.locks WHERE name = 'rl-tls'")"
ok "tail -c +$((mark + 1)) '$SECKILL_TMP/postgresql.log' | grep -q 'does not speak to the Redlock nodes in clear'" \
	"the log says why"
seckill_wait_for "[ \"\$(holders '$prefix:{lock:rl-tls}')\" = '0 0 0' ]" 3
ok "[ $? -eq 0 ]" "its lease ran out on every node, unrenewed"
err=$(psql_val "SELECT seckill_lock('rl-tls-new')" 2>&1)
ok "[[ \"\$err\" == *'does not speak TLS to the Redlock nodes'* ]]" "a new lock is refused: ${err//$'\n'/ }"
wait "$holder"
ok "grep -q 'had run out' '$work/tls.out'" "its holder's unlock says it was lost"
seckill_configure "RESET seckill.redis_tls" "RESET seckill.lock_lease"
is "$(psql_val "SELECT seckill_lock('rl-plain') IS NOT NULL AND seckill_unlock('rl-plain')")" t \
	"TLS off again: locks work again"

done_testing
