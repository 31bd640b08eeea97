#!/usr/bin/env bash
# Distributed locks for SQL callers, with real sessions and real faults:
# mutual exclusion under 64 sessions on three names, bounded waits, release when a session
# ends, the watchdog renewing leases, a holder stalled past its lease whose
# late write the fencing check refuses, a holder killed with SIGKILL, and
# Redis restarted empty under a held lock (its lease put back).
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

work=$(mktemp -d)
chmod 755 "$work"
stopped=
trap '[ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null; rm -rf "$work"' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "DROP TABLE IF EXISTS lock_counter, lock_writes;
	CREATE TABLE lock_counter (k int); CREATE TABLE lock_writes (name text, token bigint, written_at timestamptz DEFAULT clock_timestamp())" >/dev/null
lock_state() { psql_val "SELECT coalesce(string_agg(state, ','), 'none') FROM seckill.locks WHERE name = '$1'"; }

# --- mutual exclusion: a read-modify-write in separate statements -----------
# 64 sessions, three lock names, a counter per name
psql_val "DROP TABLE lock_counter; CREATE TABLE lock_counter (k int PRIMARY KEY, n int NOT NULL);
	INSERT INTO lock_counter SELECT k, 0 FROM generate_series(1, 3) k" >/dev/null
cat >"$work/unlocked.sql" <<'SQL'
\set k random(1, 3)
SELECT n FROM lock_counter WHERE k = :k \gset
UPDATE lock_counter SET n = :n + 1 WHERE k = :k;
SQL
cat >"$work/locked.sql" <<'SQL'
\set k random(1, 3)
SELECT seckill_lock('counter-' || :k, '60 s') AS t \gset
SELECT n FROM lock_counter WHERE k = :k \gset
UPDATE lock_counter SET n = :n + 1 WHERE k = :k AND seckill_fence_check('counter-' || :k, :t) = :t;
SELECT seckill_unlock('counter-' || :k);
SQL
pgbench -n -c 64 -j 2 -t 20 -f "$work/unlocked.sql" >"$work/unlocked.out" 2>&1
lost=$((1280 - $(psql_val "SELECT sum(n) FROM lock_counter")))
ok "[ $lost -gt 0 ]" "without the locks, 64 sessions lose updates of the counters ($lost of 1,280 lost)"
psql_val "UPDATE lock_counter SET n = 0" >/dev/null
t0=$(seckill_now_ms)
pgbench -n -c 64 -j 2 -t 20 -f "$work/locked.sql" >"$work/locked.out" 2>&1
ok "[ $? -eq 0 ]" "64 sessions x 20 lock/unlock cycles on 3 names ran without an error" || diag "$(tail -5 "$work/locked.out")"
took=$(($(seckill_now_ms) - t0))
is "$(psql_val "SELECT sum(n) FROM lock_counter")" 1280 \
	"with seckill_lock, the counters are exact: 1,280 ($((1280000 / (took > 0 ? took : 1))) cycles/s)"
is "$(psql_val "SELECT count(*) FROM seckill.locks")" 0 "every lock was released"

# --- a release wakes the waiter at once --------------------------------------
# (the release's time is read once seckill_unlock has returned: a waiter
# woken at once may note its lock before, a delay of 0)
psql_val "DROP TABLE IF EXISTS lock_handoffs; CREATE TABLE lock_handoffs (i int, at timestamptz, who text)" >/dev/null
for i in 1 2 3 4 5; do
	psql -XAtq -c "SELECT seckill_lock('handoff')" -c "SELECT pg_sleep(0.3)" \
		-c "INSERT INTO lock_handoffs SELECT $i, clock_timestamp(), 'released' FROM seckill_unlock('handoff')" >/dev/null 2>&1 &
	holder=$!
	seckill_wait_for "[ \"\$(lock_state handoff)\" = held ]" 5
	psql_val "SELECT seckill_lock('handoff', '5 s') IS NOT NULL;
		INSERT INTO lock_handoffs VALUES ($i, clock_timestamp(), 'acquired'); SELECT seckill_unlock('handoff')" >/dev/null
	wait "$holder"
done
delays=$(psql_val "SELECT string_agg(greatest(0, round(extract(epoch FROM a.at - r.at) * 1000))::text, ' ' ORDER BY r.i)
	FROM lock_handoffs r JOIN lock_handoffs a ON a.i = r.i AND a.who = 'acquired' WHERE r.who = 'released'")
median=$(echo "$delays" | tr ' ' '\n' | sort -n | sed -n 3p)
ok "[ -n \"$median\" ] && [ \"$median\" -lt 50 ]" \
	"a waiter gets the lock right after the unlock, not at its next poll (ms after each of 5 unlocks: $delays)"

# --- a release by another cluster sharing the Redis wakes the waiter ---------
# (as that cluster's worker would: lua/unlock.lua announcing the release)
prefix=$(psql_val "SHOW seckill.redis_prefix")
unlock_sha=$(seckill_redis_cli SCRIPT LOAD "$(cat "$SECKILL_ROOT/lua/unlock.lua")")
foreign=""
for i in 1 2 3 4 5; do
	seckill_redis_cli SET "$prefix:{lock:foreign}" other-cluster PX 10000 >/dev/null
	psql -XAtq -c "SELECT seckill_lock('foreign', '5 s') IS NOT NULL" \
		-c "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint" -c "SELECT seckill_unlock('foreign')" \
		>"$work/foreign.out" 2>&1 &
	waiter=$!
	seckill_wait_for "[ -n \"\$(psql_val \"SELECT pid FROM pg_stat_activity WHERE query LIKE '%foreign'', ''5 s%'
		AND pid <> pg_backend_pid()\")\" ]" 5
	sleep 0.3 # the waiter's re-checks have reached their 100 ms ceiling by now
	# the release's time by Redis' clock, read right after it: no client start-up in the figure
	released=$(printf 'EVALSHA %s 1 %s other-cluster %s\nTIME\n' "$unlock_sha" "$prefix:{lock:foreign}" \
		"$prefix:lock-released" | seckill_redis_cli | sed -n '2,3p' | paste -sd' ' | awk '{ printf "%.0f", $1 * 1000 + int($2 / 1000) }')
	wait "$waiter"
	foreign="$foreign $(( $(sed -n 2p "$work/foreign.out") - released ))"
done
median=$(echo $foreign | tr ' ' '\n' | sort -n | sed -n 3p)
ok "[ -n \"$median\" ] && [ \"$median\" -lt 15 ]" \
	"another cluster's release wakes the waiter through Redis pub/sub (ms after each of 5:$foreign)"

# --- a waiter cancelled while it waits ---------------------------------------
psql -XAtq -c "SELECT seckill_lock('cancel-me')" -c "SELECT pg_sleep(2)" >/dev/null 2>&1 &
holder=$!
seckill_wait_for "[ \"\$(lock_state cancel-me)\" = held ]" 5
psql -XAtq -c "SELECT seckill_lock('cancel-me', '20 s')" >"$work/cancelled.out" 2>&1 &
waiter=$!
waiting="SELECT pid FROM pg_stat_activity WHERE query LIKE '%cancel-me'', ''20 s%' AND pid <> pg_backend_pid()"
seckill_wait_for "[ -n \"\$(psql_val \"$waiting\")\" ]" 5
t0=$(seckill_now_ms)
psql_val "SELECT pg_cancel_backend(pid) FROM ($waiting) w" >/dev/null
wait "$waiter"
ok "grep -q 'canceling statement' '$work/cancelled.out'" "a waiter is cancelled at once ($(($(seckill_now_ms) - t0)) ms)"
wait "$holder"
seckill_wait_for "[ \"\$(lock_state cancel-me)\" = none ]" 5
ok "[ $? -eq 0 ]" "and takes nothing behind its caller's back: the lock is free once its holder is gone"

# --- the watchdog renews a lease while its holder lives ---------------------
seckill_configure "SET seckill.lock_lease = '600ms'"
psql -XAtq -c "SELECT seckill_lock('renewed')" -c "SELECT pg_sleep(2.5)" >/dev/null 2>&1 &
holder=$!
seckill_wait_for "[ \"\$(lock_state renewed)\" = held ]" 5
is "$(psql_val "SELECT seckill_lock('renewed', '1500 ms') IS NULL")" t \
	"a 600 ms lease held for 2.5 s: nobody else gets it within 1.5 s"
renewals=$(psql_val "SELECT renewals FROM seckill.locks WHERE name = 'renewed'")
ok "[ ${renewals:-0} -ge 2 ]" "the worker renewed it $renewals times"
wait "$holder"
seckill_configure "RESET seckill.lock_lease"

# --- a holder stalls past its lease: its late write is refused --------------
cat >"$work/stall.sql" <<'SQL'
SELECT seckill_lock('fenced', '0', '1 s') AS t \gset
SELECT pg_sleep(0.5);
INSERT INTO lock_writes (name, token) SELECT 'fenced', seckill_fence_check('fenced', :t);
SQL
psql -XAtq -v ON_ERROR_STOP=1 -f "$work/stall.sql" >"$work/stall.out" 2>&1 &
holder=$!
seckill_wait_for "[ \"\$(lock_state fenced)\" = held ]" 5
stopped=$(psql_val "SELECT owner_pid FROM seckill.locks WHERE name = 'fenced'")
kill -STOP "$stopped"
second=$(psql_val "SELECT seckill_lock('fenced', '5 s', '5 s')")
ok "[ -n \"$second\" ]" "the holder stalled (SIGSTOP): another session takes the lock once the 1 s lease ran out"
psql_val "INSERT INTO lock_writes (name, token) SELECT 'fenced', seckill_fence_check('fenced', $second)" >/dev/null
ok "[ $? -eq 0 ]" "and writes with its token $second"
kill -CONT "$stopped"
stopped=
wait "$holder"
rc=$?
ok "[ $rc -ne 0 ] && grep -q 'is stale' '$work/stall.out'" "the stalled holder's write is refused: $(grep -o 'fencing token [0-9]* of lock "fenced" is stale' "$work/stall.out")"
is "$(psql_val "SELECT string_agg(token::text, ',') FROM lock_writes WHERE name = 'fenced'")" "$second" \
	"only the later holder's write is there"
is "$(psql_val "SELECT count(*) FROM (SELECT token, lag(token) OVER (ORDER BY written_at) AS prev FROM lock_writes) w
	WHERE token <= prev")" 0 "tokens that wrote only grow"

# --- Redis restarted empty under a held lock --------------------------------
# The worker puts the lease back (same owner, what is left of it, same
# token) before any other lock script runs: the holder keeps its lock.  (A
# lease that runs out before Redis is back is lost: 3 s outlasts the
# restart and the reconnection.)
seckill_configure "SET seckill.lock_lease = '3s'"
psql -XAtq -c "SELECT seckill_lock('survivor') AS t" -c "SELECT pg_sleep(6)" \
	-c "SELECT seckill_unlock('survivor')" >"$work/survivor.out" 2>&1 &
holder=$!
seckill_wait_for "[ \"\$(lock_state survivor)\" = held ]" 5
first=$(psql_val "SELECT token FROM seckill.locks WHERE name = 'survivor'")
before=$(grep -c 'seckill worker put back 1 lock lease' "$SECKILL_TMP/postgresql.log")
seckill_redis_restart_empty
seckill_wait_for "[ \$(grep -c 'seckill worker put back 1 lock lease' '$SECKILL_TMP/postgresql.log') -gt $before ]" 10
ok "[ $? -eq 0 ] && [ \"\$(seckill_redis_cli EXISTS '$prefix:{lock:survivor}')\" = 1 ]" \
	"Redis restarted empty: the worker put the lease back"
is "$(psql_val "SELECT seckill_lock('survivor', '1 s') IS NULL")" t "another session does not get the lock"
is "$(lock_state survivor) $(psql_val "SELECT token FROM seckill.locks WHERE name = 'survivor'")" "held $first" \
	"the holder still holds it, with its token $first"
wait "$holder"
ok "! grep -q 'had run out' '$work/survivor.out' && [ \"\$(tail -n 1 '$work/survivor.out')\" = t ]" \
	"and its unlock finds its lease"
seckill_wait_for "[ \"\$(lock_state survivor)\" = none ]" 5
ok "[ $? -eq 0 ]" "the lock is gone from seckill.locks"
seckill_configure "RESET seckill.lock_lease"

# --- a release Redis lost (a replica promoted before it received it) --------
# Before the worker puts leases back (after a data loss, or on a new
# connection) it releases again those it released lately: the lease
# released does not keep takers out until it runs out (30 s).
session_hold "SELECT seckill_lock('ghost');"
ghost=$(seckill_redis_cli GET "$prefix:{lock:ghost}")
session_end "SELECT seckill_unlock('ghost');"
is "$(tail -n 1 "$SESSION_OUT")" t "a lock taken and released"
seckill_redis_cli SET "$prefix:{lock:ghost}" "$ghost" PX 30000 >/dev/null
is "$(psql_val "SELECT seckill_lock('ghost') IS NULL")" t "its lease put back in Redis as if the release were lost: nobody gets the lock"
before=$(grep -c 'released again 1 lease' "$SECKILL_TMP/postgresql.log")
seckill_redis_cli CLIENT KILL TYPE normal >/dev/null
t0=$(seckill_now_ms)
is "$(psql_val "SELECT seckill_lock('ghost', '10 s') IS NOT NULL; SELECT seckill_unlock('ghost')")" "t
t" "once the worker reconnected, a taker has the lock ($(($(seckill_now_ms) - t0)) ms)"
ok "[ \$(grep -c 'released again 1 lease' '$SECKILL_TMP/postgresql.log') -gt $before ]" \
	"the worker released the lost release's lease again, as the server log says"

# --- the holder's backend killed with SIGKILL -------------------------------
psql -XAtq -c "SELECT seckill_lock('crashy', '0', '2 s')" -c "SELECT pg_sleep(30)" >/dev/null 2>&1 &
holder=$!
seckill_wait_for "[ \"\$(lock_state crashy)\" = held ]" 5
kill -9 "$(psql_val "SELECT owner_pid FROM seckill.locks WHERE name = 'crashy'")"
wait "$holder" 2>/dev/null
# the postmaster restarts every backend after a crash
seckill_wait_for "psql_val 'SELECT 1' >/dev/null 2>&1 && [ -n \"\$(seckill_worker_pid 2>/dev/null)\" ]" 30
t0=$(seckill_now_ms)
got=$(psql_val "SELECT seckill_lock('crashy', '10 s')" 2>&1)
ok "[[ \"$got\" =~ ^[0-9]+$ ]]" "after the holder was killed, the next waiter gets the lock once its lease ran out ($(($(seckill_now_ms) - t0)) ms)"
psql_val "SELECT seckill_unlock('crashy')" >/dev/null 2>&1

done_testing
