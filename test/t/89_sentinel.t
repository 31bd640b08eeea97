#!/usr/bin/env bash
# Redis behind Sentinel, on servers of our own: a master, a replica and three
# sentinels on loopback.  The suite's PostgreSQL finds the master through the
# sentinels (seckill.redis_sentinels) and sells to a crowd of 32 connections:
#  1. discovery: a purchase goes to the master the sentinels name;
#  2. SENTINEL FAILOVER mid-sale: sales resume by themselves (the longest
#     time without an ok is printed) and Redis agrees with PostgreSQL without
#     a seckill_reconcile();
#  3. the master killed (SIGKILL) while the replica's link to it, through a
#     TCP relay (socat), is frozen with SIGSTOP: the promoted replica lacks
#     acknowledged purchases, and the rebuild repairs them without a reconcile;
#     a lock taken meanwhile, which it lacks too, is put back, still held;
#     and 12 sessions that take a lock fair and 3 shared, in loops
#     (test/t/lock_crowd.sh), never hold it together, their tokens rising;
#  4. the old master restarted empty: it rejoins as a replica, sales go on;
#     then 8 sessions waiting in a fair lock's line across a SENTINEL
#     FAILOVER each get the lock in turn with a newer token, or an error;
#  5. passwords on the master, its replica and the sentinels: the worker gives
#     the one of seckill.redis_password_file to the sentinels too, then as an
#     ACL user (seckill.redis_user), and the log never shows it; with
#     seckill.redis_sentinel_password_file, the sentinels get their own
#     password, never the master's (a dump of a sentinel's wire);
#  6. without sentinels, pointed at a replica: every call fails at once with
#     an error naming the role, without a storm of connections.
# After each: no oversell, nobody with two active orders, every ok an order.
# Then the shared end of the fault tests (test/t/sale.sh).
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"
# shellcheck source=test/t/lock_crowd.sh
. "$(dirname "$0")/lock_crowd.sh"

# Below 32768, where the kernel's ephemeral ports begin; derived from the
# suite's port (apart from 88_failover.t's) so that parallel runs differ.
base=${SECKILL_SENTINEL_PORT:-$SECKILL_OWN_PORT}
first_port=$base
second_port=$((base + 1))
relay_port=$((base + 2))
sentinel_ports=($((base + 3)) $((base + 4)) $((base + 5)))
sentinels=$(printf '127.0.0.1:%s,' "${sentinel_ports[@]}")
sentinels=${sentinels%,}
own_servers sentinel
relay=

# socat forks a process per connection: signal them all
relay_signal() { kill "-$1" "$relay" $(pgrep -P "$relay") 2>/dev/null; }
# stop dir: the server whose pid file is in dir (redis-server removes the file
# when it exits)
stop() {
	local pid
	pid=$(cat "$1/pid" 2>/dev/null) || return 0
	if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = redis-server ]; then
		kill -TERM "$pid"
		seckill_wait_for "[ ! -e '$1/pid' ]" 5 2>/dev/null || kill -KILL "$pid" 2>/dev/null
	fi
	rm -f "$1/pid"
}
cleanup() {
	[ -n "$CROWD" ] && kill "$CROWD" 2>/dev/null && wait "$CROWD"
	lock_crowd_kill
	seckill_configure "RESET seckill.redis_sentinels" "RESET seckill.redis_master_name" \
		"RESET seckill.redis_host" "RESET seckill.redis_port" "RESET seckill.redis_user" \
		"RESET seckill.redis_password_file" "RESET seckill.redis_sentinel_password_file" >/dev/null 2>&1
	# first the relay: a master does not shut down while a replica lags
	[ -n "$relay" ] && relay_signal KILL
	local dir
	for dir in "$work"/*/; do
		stop "$dir"
	done
	[ -n "$SALE_WORK" ] && rm -rf "$SALE_WORK"
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

finish() { done_testing_with_logs 15 "$work"/*/log; }

ports_free SECKILL_SENTINEL_PORT "$first_port" "$second_port" "$relay_port" "${sentinel_ports[@]}"

# redis_start port [options...]: a Redis of our own, empty.  A replica writes
# the data set it synced to dump.rdb even without persistence, and a restart
# would load it: it goes.
redis_start() {
	local port=$1 dir=$work/redis-$1
	shift
	mkdir -p "$dir" && rm -f "$dir"/*.rdb && chown postgres: "$dir"
	seckill_as_postgres redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
		--repl-diskless-sync-delay 0 --daemonize yes --dir "$dir" \
		--pidfile "$dir/pid" --logfile "$dir/log" "$@" &&
		seckill_wait_for "[ \"\$(rcli $port PING 2>/dev/null)\" = PONG ]" 10
}
# sentinel_start port: a sentinel of the master on first_port; it rewrites
# its configuration file, so postgres owns it
sentinel_start() {
	local dir=$work/sentinel-$1
	mkdir -p "$dir"
	cat >"$dir/sentinel.conf" <<CONF
port $1
bind 127.0.0.1
protected-mode no
daemonize yes
pidfile $dir/pid
logfile $dir/log
dir $dir
sentinel monitor mymaster 127.0.0.1 $first_port 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
CONF
	chown -R postgres: "$dir"
	seckill_as_postgres redis-server "$dir/sentinel.conf" --sentinel
}
sentinel_field() { # sentinel_field sentinel_port field
	rcli "$1" SENTINEL master mymaster 2>/dev/null | awk -v f="$2" 'prev == f { print; exit } { prev = $0 }'
}
sentinels_ready() {
	local s
	for s in "${sentinel_ports[@]}"; do
		rcli "$s" SENTINEL ckquorum mymaster 2>/dev/null | grep -q '^OK 3 usable' || return 1
		[ "$(sentinel_field "$s" num-slaves)" = 1 ] || return 1
	done
}
# named_by_all port: every sentinel names the server on port the master
named_by_all() {
	local s
	for s in "${sentinel_ports[@]}"; do
		[ "$(rcli "$s" SENTINEL get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p)" = "$1" ] || return 1
	done
}

# crowd name: 32 connections, 1,000 calls/s in all (sale.sh's sale_crowd),
# buying until its section's end stops it (crowd_end); its pid in CROWD
crowd() {
	sale_crowd until "$1" 30000 32 1000
	CROWD=$SALE_CROWD
}

# buys tag: a purchase by a new user answers ok; tries counts the calls
tries=0
buys() {
	tries=$((tries + 1))
	[ "$(psql_val "SELECT status FROM seckill_buy('$1-$tries', '$SALE_GOODS')" 2>/dev/null)" = ok ]
}
# must command...: refusals counts the commands that did not answer OK
refusals=0
must() { [ "$("$@" 2>&1)" = OK ] || refusals=$((refusals + 1)); }

# The servers: a master, its replica, three sentinels
redis_start "$first_port" && redis_start "$second_port" --replicaof 127.0.0.1 "$first_port" &&
	seckill_wait_for "replicates $second_port $first_port" 10
ok "[ $? -eq 0 ]" "a Redis master on port $first_port, its replica on port $second_port" || finish
for s in "${sentinel_ports[@]}"; do
	sentinel_start "$s"
done
seckill_wait_for sentinels_ready 20
ok "[ $? -eq 0 ]" "three sentinels on ports ${sentinel_ports[*]} see the master, its replica and each other" || finish

# 1. Discovery
seckill_configure "SET seckill.redis_sentinels = '$sentinels'" "SET seckill.redis_master_name = 'mymaster'"
ok "[ $? -eq 0 ]" "the worker asks the sentinels for the master" || finish
sale_begin "sentinel-$$" 40000
# when each answer came, for the gaps
psql_val "ALTER TABLE stampede_answers ADD COLUMN at timestamptz DEFAULT clock_timestamp()"
master=$first_port
replica=$second_port
is "$(psql_val "SELECT status FROM seckill_buy('first-buyer', '$SALE_GOODS')" 2>&1)" ok \
	"discovery: a purchase answers ok"
seckill_wait_for "[ \"\$(agrees)\" = t ]" 10
ok "[ $? -eq 0 ]" "discovery: seckill_status agrees with PostgreSQL" || diag "$(figures)"
is "$(held "$master")" "$(expected)" "discovery: the campaign is on the master the sentinels name"
seckill_wait_for "[ \"\$(held $replica)\" = \"\$(expected)\" ]" 10
ok "[ $? -eq 0 ]" "discovery: and on its replica"

# 2. SENTINEL FAILOVER: the old master stays writable until the sentinels
#    turn it into a replica, some 10 s later; the worker must not wait for that
since=$(pg_now)
mark=$(wc -c <"$log")
comp=$(compensations)
crowd failover
seckill_wait_for "[ \$(oks_since '$since') -ge 1000 ]" 30
ok "[ $? -eq 0 ]" "failover: the sale is under way" || finish
is "$(rcli "${sentinel_ports[0]}" SENTINEL FAILOVER mymaster)" OK "failover: SENTINEL FAILOVER mymaster"
started=$(seckill_now_ms)
seckill_wait_for "named_by_all $replica" 15
ok "[ $? -eq 0 ]" "failover: every sentinel names the replica the master ($(($(seckill_now_ms) - started)) ms)" || finish
resumed failover "$replica"
seckill_wait_for "replicates $master $replica" 30
ok "[ $? -eq 0 ]" "failover: the old master became a replica of the new one ($(($(seckill_now_ms) - started)) ms)" || finish
after failover "$since" "$mark" "$replica" "$comp"
master=$second_port
replica=$first_port

# 3. Lost writes: the replica's link goes through the relay, frozen, then the
#    master is killed.  The sentinels would point the replica back at the
#    master's own address failover-timeout after they see it moved (+fix-slave-
#    config), so the relay goes in only now, seconds before the kill.  The
#    lock's crowd starts first, and runs until its checks.
lock_crowd_start sentinel-crowd 30 "$work"
seckill_wait_for "lock_crowd_busy sentinel-crowd" 15
ok "[ $? -eq 0 ]" "kill: a lock held by a crowd, 8 or more sessions in its line"
since=$(pg_now)
mark=$(wc -c <"$log")
comp=$(compensations)
socat TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$master" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
crowd kill
rcli "$replica" REPLICAOF 127.0.0.1 "$relay_port" >/dev/null
seckill_wait_for "replicates $replica $relay_port" 10
ok "[ $? -eq 0 ]" "kill: the replica replicates through a relay on port $relay_port" || finish
seckill_wait_for "[ \$(oks_since '$since') -ge 500 ]" 30
ok "[ $? -eq 0 ]" "kill: the sale is under way" || finish
relay_signal STOP
# a lock taken now: the replica never hears of it
session_hold "SELECT seckill_lock('sentinel-lost');"
frozen=$(sale_orders)
seckill_wait_for "sale_orders_at_least $((frozen + 500))" 15
ok "[ $? -eq 0 ]" "kill: the link frozen, the master takes 500 more orders"
stale=$(held "$replica")
current=$(held "$master")
ok "[ ${stale%% *} -gt ${current%% *} ]" \
	"kill: the replica misses them (its stock ${stale%% *}, the master's ${current%% *})"
diag "kill: the replica is $(($(info "$master" replication master_repl_offset) -
	$(info "$replica" replication slave_repl_offset))) bytes of replication behind"
pid=$(cat "$work/redis-$master/pid")
kill -KILL "$pid"
rm -f "$work/redis-$master/pid"
started=$(seckill_now_ms)
seckill_wait_for "named_by_all $replica" 30
ok "[ $? -eq 0 ]" "kill: master killed, the sentinels promote the replica ($(($(seckill_now_ms) - started)) ms)" || finish
{
	relay_signal KILL
	wait "$relay"
} 2>/dev/null
relay=
resumed "kill" "$replica"
is "$(psql_val "SELECT seckill_lock('sentinel-lost', '300 ms') IS NULL")" t \
	"kill: a lock taken after the link froze is still its holder's: another session does not get it"
is "$(rcli "$replica" EXISTS "seckill:{lock:sentinel-lost}")" 1 "kill: the worker put its lease back on the promoted replica"
session_end "SELECT seckill_unlock('sentinel-lost');"
is "$(tail -n 1 "$SESSION_OUT")" t "kill: its holder releases it, held throughout"
seckill_wait_for "lock_crowd_busy sentinel-crowd" 15
ok "[ $? -eq 0 ]" "kill: the crowd's lock moves on on the promoted replica"
lock_crowd_check sentinel-crowd kill
after "kill" "$since" "$mark" "$replica" "$comp"
old=$master
master=$replica

# 4. The old master back, empty and a master of its own until the sentinels
#    turn it into a replica
since=$(pg_now)
crowd rejoin
seckill_wait_for "[ \$(oks_since '$since') -ge 300 ]" 30
ok "[ $? -eq 0 ]" "rejoin: the sale is under way" || finish
redis_start "$old"
ok "[ $? -eq 0 ] && [ \"\$(info $old replication role)\" = master ] && [ \"\$(rcli $old DBSIZE)\" = 0 ]" \
	"rejoin: the old master restarted empty, a master of its own"
restarted=$(pg_now)
started=$(seckill_now_ms)
seckill_wait_for "replicates $old $master" 30
ok "[ $? -eq 0 ]" "rejoin: the sentinels made it a replica of the master ($(($(seckill_now_ms) - started)) ms)" || finish
rejoined=$(oks_since "$restarted")
ok "[ $rejoined -ge 500 ]" "rejoin: sales went on meanwhile ($rejoined ok answers)"
crowd_end rejoin
diag "rejoin: answers $(answers "$since")" "rejoin: errors $(errors "$since")"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'error' AND at >= '$since'")" 0 \
	"rejoin: no call failed"
seckill_wait_for "[ \"\$(agrees)\" = t ]" 30
ok "[ $? -eq 0 ]" "rejoin: Redis agrees with PostgreSQL" || diag "rejoin: $(figures)"
seckill_wait_for "[ \"\$(held $old)\" = \"\$(expected)\" ]" 10
ok "[ $? -eq 0 ]" "rejoin: the new replica holds the master's data"
invariants rejoin
replica=$old

# 4b. Fair waiters queued across a SENTINEL FAILOVER: each gets the lock, one
#     at a time, with a token newer than the holder's before it, or fails
#     with an error that names the cause
mark=$(wc -c <"$log")
psql_val "DROP TABLE IF EXISTS line_grants;
	CREATE TABLE line_grants (k int, token bigint, granted_at timestamptz DEFAULT clock_timestamp(),
		released_at timestamptz)" >/dev/null
session_hold "SELECT seckill_lock_fair('sentinel-line');"
first=$(psql_val "SELECT token FROM seckill.locks WHERE name = 'sentinel-line' AND state = 'held'")
waiters=()
for k in $(seq 1 8); do
	psql -XAtq -v ON_ERROR_STOP=1 >"$work/line-$k.out" 2>&1 7>&- <<SQL &
SELECT seckill_lock_fair('sentinel-line', '40 s') AS token \gset
INSERT INTO line_grants (k, token) VALUES ($k, :'token');
SELECT pg_sleep(0.1);
UPDATE line_grants SET released_at = clock_timestamp() WHERE k = $k;
SELECT seckill_unlock('sentinel-line');
SQL
	waiters+=($!)
done
seckill_wait_for "[ \$(psql_val \"SELECT count(*) FROM seckill.locks WHERE name = 'sentinel-line' AND state = 'waiting'\") = 8 ]" 10
ok "[ $? -eq 0 ]" "line: 8 sessions wait in a fair lock's line behind a holder" || finish
is "$(rcli "${sentinel_ports[0]}" SENTINEL FAILOVER mymaster)" OK "line: SENTINEL FAILOVER mymaster while they wait"
seckill_wait_for "named_by_all $replica" 30
ok "[ $? -eq 0 ]" "line: every sentinel names the replica the master" || finish
session_end "SELECT seckill_unlock('sentinel-line');"
wait "${waiters[@]}"
failed=$(grep -l ERROR "$work"/line-*.out | wc -l)
is "$(psql_val "SELECT count(*) FILTER (WHERE newer) || '/' || count(*) FROM (SELECT
	token > lag(token, 1, $first) OVER (ORDER BY granted_at) AS newer FROM line_grants) g") $failed" \
	"$((8 - failed))/$((8 - failed)) $failed" \
	"line: $((8 - failed)) waiters got the lock, each with a token newer than the last holder's; $failed failed"
ok "[ $failed -lt 8 ]" "line: the line moved on after the failover"
is "$(psql_val "SELECT count(*) FROM line_grants a JOIN line_grants b ON a.k < b.k
	WHERE a.granted_at < b.released_at AND b.granted_at < a.released_at")" 0 "line: one holder at a time"
# A release the promoted replica had not received is made again by the
# worker: the next waiter does not wait for that lease to run out (30 s)
is "$(psql_val "SELECT coalesce(max(granted_at - before), '0') < interval '5 s' FROM (SELECT granted_at,
	lag(released_at) OVER (ORDER BY granted_at) AS before FROM line_grants) g")" t \
	"line: each waiter had the lock within 5 s of the release before it" ||
	diag "$(psql_val "SELECT string_agg(k || ' ' || granted_at::time || '-' || released_at::time, ', ' ORDER BY granted_at)
		FROM line_grants")"
is "$(logged "$mark" 'seckill lost lock "sentinel-line"')" 0 "line: no holder lost the lock in the failover"
is "$(cat "$work"/line-*.out | grep ERROR | grep -vc 'seckill could not reach Redis')" 0 \
	"line: each failure named Redis as its cause" || diag "$(cat "$work"/line-*.out)"
seckill_wait_for "replicates $master $replica" 30
ok "[ $? -eq 0 ]" "line: the old master became a replica of the new one" || finish
old=$master
master=$replica
replica=$old

# 5. Passwords.  The sentinels learn the servers' and each other's before
#    anyone asks for one, lest they lose sight of the master and fail it over.
secret="S3cret-$RANDOM-$RANDOM"
mark=$(wc -c <"$log")
refusals=0
for s in "${sentinel_ports[@]}"; do
	must rcli "$s" SENTINEL CONFIG SET sentinel-pass "$secret"
	must rcli "$s" SENTINEL SET mymaster auth-pass "$secret"
done
must rcli "$replica" CONFIG SET masterauth "$secret" requirepass "$secret"
must rcli "$master" CONFIG SET requirepass "$secret"
# a sentinel has no requirepass: its default user gets the password
for s in "${sentinel_ports[@]}"; do
	must rcli "$s" ACL SETUSER default resetpass ">$secret"
done
is "$refusals" 0 "passwords: required by the master, its replica and the sentinels" || finish
export REDISCLI_AUTH=$secret
refused=0
for port in "$master" "$replica" "${sentinel_ports[@]}"; do
	[[ $(env -u REDISCLI_AUTH redis-cli -h 127.0.0.1 -p "$port" PING 2>&1) == NOAUTH* ]] && refused=$((refused + 1))
done
is "$refused" 5 "passwords: all five refuse a client without it"
ok "sentinels_ready && named_by_all $master && replicates $replica $master" \
	"passwords: the sentinels still see the master, its replica and each other"
# the connections stay: the new setting makes the worker drop them
printf '%s\n' "$secret" >"$work/redis.pass"
chown postgres "$work/redis.pass"
chmod 600 "$work/redis.pass"
seckill_configure "SET seckill.redis_password_file = '$work/redis.pass'"
ok "[ $? -eq 0 ]" "passwords: seckill.redis_password_file set" || finish
tries=0
seckill_wait_for "buys auth" 15
ok "[ $? -eq 0 ]" "passwords: a purchase answers ok through the sentinels (call $tries)"
ok "[ $(logged "$mark" "disconnected from Redis at 127.0.0.1:$master: the Redis settings changed") -gt 0 ] &&
	[ $(logged "$mark" "connected to Redis at 127.0.0.1:$master, the master the sentinels name") -gt 0 ]" \
	"passwords: the worker reconnected with the password"
# an ACL user on all five (ACLs are not replicated), the same password
for port in "$master" "$replica" "${sentinel_ports[@]}"; do
	must rcli "$port" ACL SETUSER seckill on ">$secret" '~*' '&*' +@all
done
seckill_configure "SET seckill.redis_user = 'seckill'"
ok "[ $? -eq 0 ] && [ $refusals -eq 0 ]" "acl: a user seckill on all five, seckill.redis_user set" || finish
tries=0
seckill_wait_for "buys acl" 15
ok "[ $? -eq 0 ]" "acl: a purchase answers ok through the sentinels (call $tries)"
ok "rcli $master CLIENT LIST | grep -q 'user=seckill'" "acl: the worker is connected to the master as seckill"
asked=0
for s in "${sentinel_ports[@]}"; do
	rcli "$s" CLIENT LIST | grep -q 'user=seckill' && asked=$((asked + 1))
done
ok "[ $asked -ge 1 ]" "acl: and to a sentinel as seckill"
ok "! grep -qF -e '$secret' '$log'" "passwords: the server log never shows the password"
# The sentinels' own password (seckill.redis_sentinel_password_file): the
# worker gives it, and never the master's, to the sentinels.  Their default
# user takes it as a second password; one sentinel is named meanwhile, behind
# a relay that dumps what passes (socat -v).
sentinel_secret="Sent1nel-$RANDOM-$RANDOM"
for s in "${sentinel_ports[@]}"; do
	must rcli "$s" ACL SETUSER default ">$sentinel_secret"
done
printf '%s\n' "$sentinel_secret" >"$work/sentinel.pass"
chown postgres "$work/sentinel.pass"
chmod 600 "$work/sentinel.pass"
socat -v TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"${sentinel_ports[0]}" \
	2>"$work/sentinel.wire" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
seckill_configure "SET seckill.redis_sentinel_password_file = '$work/sentinel.pass'" \
	"SET seckill.redis_sentinels = '127.0.0.1:$relay_port'"
ok "[ $? -eq 0 ] && [ $refusals -eq 0 ]" \
	"sentinel password: a second one on the sentinels, in a file of its own; one sentinel named, through a relay" || finish
tries=0
seckill_wait_for "buys sentinel-pass" 15
ok "[ $? -eq 0 ]" "sentinel password: a purchase answers ok through the relayed sentinel (call $tries)"
ok "grep -qF -e 'AUTH' '$work/sentinel.wire' && grep -qF -e '$sentinel_secret' '$work/sentinel.wire' &&
	! grep -qF -e '$secret' '$work/sentinel.wire'" \
	"sentinel password: the sentinel's wire carried its own password, never the master's"
relay_signal KILL
wait "$relay" 2>/dev/null
relay=
seckill_configure "RESET seckill.redis_sentinel_password_file" "SET seckill.redis_sentinels = '$sentinels'"
for s in "${sentinel_ports[@]}"; do
	must rcli "$s" ACL SETUSER default "<$sentinel_secret"
done
tries=0
seckill_wait_for "buys sentinels-back" 15
ok "[ $? -eq 0 ] && [ $refusals -eq 0 ]" "sentinel password: dropped again, all sentinels named, a purchase answers ok"

# Undone without a broken link: the passwords first (connections made with
# them stay), then the settings, then the user
for s in "${sentinel_ports[@]}"; do
	must rcli "$s" ACL SETUSER default nopass
done
must rcli "$master" CONFIG SET requirepass ''
must rcli "$replica" CONFIG SET requirepass '' masterauth ''
unset REDISCLI_AUTH
for s in "${sentinel_ports[@]}"; do
	must rcli "$s" SENTINEL CONFIG SET sentinel-pass ''
	must rcli "$s" SENTINEL SET mymaster auth-pass ''
done
seckill_configure "RESET seckill.redis_user" "RESET seckill.redis_password_file"
ok "[ $? -eq 0 ] && [ $refusals -eq 0 ]" "passwords: off again, the settings reset" || finish
for port in "$master" "$replica" "${sentinel_ports[@]}"; do
	[ "$(rcli "$port" ACL DELUSER seckill)" = 1 ] || refusals=$((refusals + 1))
done
is "$refusals" 0 "acl: the user seckill deleted"
tries=0
seckill_wait_for "buys plain" 15
ok "[ $? -eq 0 ]" "passwords: without them, a purchase answers ok (call $tries)"
ok "sentinels_ready && named_by_all $master && replicates $replica $master" \
	"passwords: the same master throughout, its replica and the sentinels as before"
invariants passwords

# 6. Without sentinels, pointed at the replica: an error naming its role, at
#    once; the worker tries again at most a few times a second
seckill_configure "RESET seckill.redis_sentinels" "SET seckill.redis_host = '127.0.0.1'" \
	"SET seckill.redis_port = $replica"
ok "[ $? -eq 0 ]" "replica: the worker pointed at the replica on port $replica, without sentinels" || finish
connections=$(info "$replica" stats total_connections_received)
window=$(seckill_now_ms)
for n in 1 2 3; do
	started=$(seckill_now_ms)
	answer=$(psql -XAtq -v VERBOSITY=verbose -c "SELECT * FROM seckill_buy('replica-$n', '$SALE_GOODS')" 2>&1)
	took=$(($(seckill_now_ms) - started))
	[ "$n" = 1 ] && diag "replica: $answer"
	grep -q '^ERROR:' <<<"$answer" && grep -q 'is a replica, not a master' <<<"$answer"
	ok "[ $? -eq 0 ]" "replica: call $n fails with an error naming the role" || diag "replica: call $n: $answer"
	ok "[ $took -lt 2000 ]" "replica: call $n answers within 2 s ($took ms)"
done
sleep 2 # the window: a persistent error
window=$(($(seckill_now_ms) - window))
# less the connection that asks
connections=$(($(info "$replica" stats total_connections_received) - connections - 1))
ok "[ $((connections * 1000)) -le $((window * 5)) ]" \
	"replica: no reconnect storm ($connections connections in $window ms)"
seckill_configure "RESET seckill.redis_host" "RESET seckill.redis_port" "SET seckill.redis_sentinels = '$sentinels'"
tries=0
seckill_wait_for "buys back" 15
ok "[ $? -eq 0 ]" "replica: with the sentinels back, a purchase answers ok (call $tries)"
invariants replica

sale_finish
SALE_WORK=
psql_val "SELECT seckill_close('$SALE_GOODS')" >/dev/null

# The suite's Redis again, for the tests after this one
mark=$(wc -c <"$log")
seckill_configure "RESET seckill.redis_sentinels" "RESET seckill.redis_master_name"
ok "[ $? -eq 0 ]" "settings reset"
is "$(psql_val "SELECT seckill_lock('sentinel-$$') > 0 AND seckill_unlock('sentinel-$$')" 2>&1)" t \
	"a lock taken and released: the worker works with the suite's Redis again"
ok "[ $(logged "$mark" "connected to Redis at 127.0.0.1:$SECKILL_REDIS_PORT") -gt 0 ]" \
	"the worker is connected to the suite's Redis on port $SECKILL_REDIS_PORT"

finish
