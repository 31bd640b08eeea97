#!/usr/bin/env bash
# Fair and shared locks under load and faults: 32 sessions queued one after
# another on a fair lock are granted in exactly that order, each grant after
# the last holder's release and with a newer fencing token; 32 sessions
# waiting a bounded time give up within it and leave no place in line; a
# waiter stalled (SIGSTOP) blocks the line for no longer than its place's
# lease, while a taker that does not wait still cannot jump the line; a
# terminated waiter leaves the line at once; an exclusive taker waits for
# a stream of shared holders for a bounded time only, while shared holders
# coexist; and Redis restarted empty under a holder and its queued waiters:
# the worker puts the holder's lease back, the waiters get the lock only
# after its release, one at a time, each with a newer token (a waiter rides
# out Redis away until its wait ends, then fails naming Redis).
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

work=$(mktemp -d)
chmod 755 "$work"
stopped=
trap '[ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null; kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "DROP TABLE IF EXISTS fam_grants;
	CREATE TABLE fam_grants (name text, k int, token bigint, granted_at timestamptz DEFAULT clock_timestamp(),
		released_at timestamptz)" >/dev/null
waiting() { psql_val "SELECT count(*) FROM seckill.locks WHERE name = '$1' AND state = 'waiting'"; }
line_len() { seckill_redis_cli ZCARD "seckill:{lock:$1}:line"; }

# fair_taker name k wait hold: in the background, a session named fam-<k>
# that waits for the fair lock, records its grant, holds it for hold
# seconds and releases it; its pid is recorded in $work/pid-<name>-<k>
fair_taker() {
	PGAPPNAME="fam-$1-$2" psql -XAtq -v ON_ERROR_STOP=1 >"$work/out-$1-$2" 2>&1 7>&- <<SQL &
SELECT seckill_lock_fair('$1', '$3') AS token \gset
INSERT INTO fam_grants (name, k, token) VALUES ('$1', $2, NULLIF(:'token', '')::bigint);
SELECT pg_sleep($4);
UPDATE fam_grants SET released_at = clock_timestamp() WHERE name = '$1' AND k = $2;
SELECT CASE WHEN :'token' <> '' THEN seckill_unlock('$1') END;
SQL
	echo $! >"$work/pid-$1-$2"
}
backend_of() { psql_val "SELECT pid FROM pg_stat_activity WHERE application_name = 'fam-$1-$2'"; }
place_of() {
	psql_val "SELECT coalesce(max(l.queue_position), 0) FROM seckill.locks l JOIN pg_stat_activity a ON a.pid = l.owner_pid
		WHERE l.name = '$1' AND a.application_name = 'fam-$1-$2'"
}

# --- 32 sessions queued one after another: granted in that order -------------
session_hold "SELECT seckill_lock_fair('order');"
first=$(psql_val "SELECT token FROM seckill.locks WHERE name = 'order' AND state = 'held'")
arrived=0
for k in $(seq 1 32); do
	fair_taker order "$k" '60 s' 0.02
	seckill_wait_for "[ \$(waiting order) -ge $k ]" 10 && [ "$(place_of order "$k")" = "$k" ] &&
		arrived=$((arrived + 1))
done
is "$arrived" 32 "32 fair takers queued one after another, each seen waiting at its place in line (1 to 32)"
is "$(line_len order)" 32 "the line in Redis holds the 32"
# the holder, as k 0: let go from the moment its unlock began
session_end "SELECT clock_timestamp() AS t0 \\gset
SELECT seckill_unlock('order');
INSERT INTO fam_grants VALUES ('order', 0, $first, :'t0', :'t0');"
wait
is "$(psql_val "SELECT string_agg(k::text, ',' ORDER BY granted_at) FROM fam_grants WHERE name = 'order'")" \
	"$(seq -s, 0 32)" "granted in the order they came to wait"
is "$(psql_val "SELECT count(*) FROM (SELECT k, token > lag(token) OVER w AS newer,
		granted_at >= lag(released_at) OVER w AS after
		FROM fam_grants WHERE name = 'order' WINDOW w AS (ORDER BY granted_at)) g WHERE k > 0 AND newer AND after")" 32 \
	"each grant came after the last holder let go, with a newer fencing token"
is "$(line_len order)$(waiting order)" "00" "nobody is left in line"

# --- 32 bounded waiters: none waits past its wait, none stays in line ------
session_hold "SELECT seckill_lock_fair('bound');"
cat >"$work/bound.sql" <<'SQL'
WITH t AS MATERIALIZED (SELECT seckill_lock_fair('bound', '300 ms') AS token)
SELECT 1 / (token IS NULL AND clock_timestamp() - statement_timestamp() BETWEEN '300 ms' AND '1 s')::int FROM t;
SQL
pgbench -n -c 32 -j 4 -t 5 -f "$work/bound.sql" >"$work/bound.out" 2>&1
ok "grep -q 'number of transactions actually processed: 160/160' '$work/bound.out'" \
	"32 sessions waited 300 ms for a held fair lock, 5 times each: every call gave up after 300 ms to 1 s" ||
	diag "$(tail -5 "$work/bound.out")"
seckill_wait_for "[ \$(line_len bound) = 0 ] && [ \$(waiting bound) = 0 ]" 5
is "$(line_len bound)/$(waiting bound)" "0/0" "each left the line when it gave up (Redis and seckill.locks)"
session_end "SELECT seckill_unlock('bound');"

# --- a stalled waiter, then a terminated one ---------------------------------
session_hold "SELECT seckill_lock_fair('stall');"
fair_taker stall 1 '60 s' 0.05
seckill_wait_for "[ \$(place_of stall 1) = 1 ]" 10
fair_taker stall 2 '60 s' 0.05
seckill_wait_for "[ \$(place_of stall 2) = 2 ]" 10
stopped=$(backend_of stall 1)
kill -STOP "$stopped"
session_end "SELECT seckill_unlock('stall');"
t0=$(seckill_now_ms)
is "$(psql_val "SELECT seckill_lock_fair('stall') IS NULL")" t \
	"while the first in line is stalled, a taker that does not wait does not jump the line"
seckill_wait_for "[ \$(psql_val \"SELECT count(*) FROM fam_grants WHERE name = 'stall' AND k = 2\") = 1 ]" 10
t1=$(seckill_now_ms)
ok "[ $((t1 - t0)) -le 2000 ]" \
	"the second in line got the lock $((t1 - t0)) ms after the release: the stalled first's place lapsed (seckill.lock_queue_lease 1 s)"
kill -CONT "$stopped"
stopped=
wait
is "$(psql_val "SELECT string_agg(k::text, ',' ORDER BY granted_at) || ' ' || bool_and(token IS NOT NULL)
	FROM fam_grants WHERE name = 'stall'")" "2,1 true" "the stalled waiter, woken, queued again and got the lock after the second"

seckill_configure "SET seckill.lock_queue_lease = '20s'"
session_hold "SELECT seckill_lock_fair('term');"
fair_taker term 1 '60 s' 0.05
seckill_wait_for "[ \$(place_of term 1) = 1 ]" 10
fair_taker term 2 '60 s' 0.05
seckill_wait_for "[ \$(place_of term 2) = 2 ]" 10
psql_val "SELECT pg_terminate_backend($(backend_of term 1))" >/dev/null
session_end "SELECT seckill_unlock('term');"
t0=$(seckill_now_ms)
seckill_wait_for "[ \$(psql_val \"SELECT count(*) FROM fam_grants WHERE name = 'term' AND k = 2\") = 1 ]" 15
t1=$(seckill_now_ms)
wait
ok "[ $((t1 - t0)) -le 2000 ]" \
	"a waiter terminated while first in line left it at once: the second got the lock $((t1 - t0)) ms after the release (places last 20 s)"
seckill_configure "RESET seckill.lock_queue_lease"

# --- a stream of shared holders and an exclusive taker ------------------------
cat >"$work/shared.sql" <<'SQL'
SELECT 1 / (seckill_lock_shared('rw', '10 s') IS NOT NULL)::int;
SELECT count(*) AS holders FROM seckill.locks WHERE name = 'rw' AND mode = 'shared' AND state = 'held' \gset
INSERT INTO fam_grants (name, k) VALUES ('rw', :holders);
SELECT pg_sleep(0.01);
SELECT seckill_unlock_shared('rw');
SQL
pgbench -n -c 16 -j 4 -T 6 -f "$work/shared.sql" >"$work/shared.out" 2>&1 &
stream=$!
seckill_wait_for "[ \$(psql_val \"SELECT count(*) FROM fam_grants WHERE name = 'rw'\") -ge 100 ]" 10
t0=$(seckill_now_ms)
got=$(psql -XAtq -v ON_ERROR_STOP=1 <<'SQL'
SELECT seckill_lock('rw', '10 s') IS NOT NULL AS got \gset
SELECT :'got' || ' ' || count(*) FROM seckill.locks WHERE name = 'rw' AND state = 'held';
SELECT seckill_unlock('rw');
SQL
)
t1=$(seckill_now_ms)
wait "$stream"
rc=$?
ok "[ $rc -eq 0 ] && ! grep -q aborted '$work/shared.out'" \
	"16 sessions took the lock shared for 6 s, every call granted within its wait" || diag "$(tail -5 "$work/shared.out")"
is "$(head -1 <<<"$got")" "t 1" "an exclusive taker got the lock amid the stream, alone"
ok "[ $((t1 - t0)) -le 2000 ]" "... after $((t1 - t0)) ms: its claim kept new shared holders out until the last left"
ok "[ \$(psql_val \"SELECT max(k) FROM fam_grants WHERE name = 'rw'\") -gt 1 ]" \
	"shared holders held it together (up to $(psql_val "SELECT max(k) FROM fam_grants WHERE name = 'rw'") at once)"

# --- Redis restarted empty under queued waiters --------------------------------
session_hold "SELECT seckill_lock_fair('boom');"
first=$(psql_val "SELECT token FROM seckill.locks WHERE name = 'boom' AND state = 'held'")
for k in $(seq 1 8); do
	fair_taker boom "$k" '20 s' 0.1
done
seckill_wait_for "[ \$(waiting boom) -ge 8 ]" 10
put_backs() { grep -c 'seckill worker put back 1 lock lease' "$SECKILL_TMP/postgresql.log"; }
before=$(put_backs)
seckill_redis_restart_empty 7>&-	# the daemon must not hold the holder's input open
seckill_wait_for "[ \$(put_backs) -gt $before ]" 10
ok "[ $? -eq 0 ]" "Redis restarted empty under the holder: the worker put its lease back"
seckill_wait_for "[ \$(waiting boom) -ge 8 ]" 10
is "$(psql_val "SELECT count(*) FROM fam_grants WHERE name = 'boom'")" 0 "... the 8 waiters still wait in line, none granted"
# the holder releases, held to the end: its hold is row k = 0, ending
# before its unlock (as the waiters' do), which the next holder may beat
session_end "SELECT clock_timestamp() AS released \gset
INSERT INTO fam_grants (name, k, token, granted_at, released_at)
	SELECT 'boom', 0, $first, '-infinity', :'released' FROM seckill_unlock('boom') AS held WHERE held;"
wait $(cat "$work"/pid-boom-*)
is "$(psql_val "SELECT count(*) FROM fam_grants WHERE name = 'boom' AND k = 0")" 1 "... and it still held the lock at its release"
failed=$(grep -l ERROR "$work"/out-boom-* | wc -l)
is "$(psql_val "SELECT count(*) FILTER (WHERE newer) || '/' || count(*) FROM (SELECT
	token > lag(token, 1, $first) OVER (ORDER BY granted_at) AS newer FROM fam_grants WHERE name = 'boom' AND k > 0) g") $failed" \
	"$((8 - failed))/$((8 - failed)) $failed" \
	"then the 8 fair waiters: $((8 - failed)) got the lock, each with a token newer than the last holder's; $failed failed"
ok "[ $failed -lt 8 ]" "... the line moved on"
is "$(psql_val "SELECT count(*) FROM fam_grants a JOIN fam_grants b ON a.name = b.name AND a.k < b.k
	WHERE a.name = 'boom' AND a.granted_at < b.released_at AND b.granted_at < a.released_at")" 0 \
	"... one at a time, after the holder: no two holds overlap" ||
	diag "$(psql_val "SELECT k, token, granted_at, released_at FROM fam_grants WHERE name = 'boom' ORDER BY granted_at")"
is "$(cat "$work"/out-boom-* | grep ERROR | grep -vc 'seckill could not reach Redis')" 0 \
	"... each failure named Redis as its cause" || diag "$(cat "$work"/out-boom-*)"

# --- Redis away for longer than the wait -------------------------------------
seckill_redis_stop
t0=$(seckill_now_ms)
out=$(psql -XAtq -c "SELECT seckill_lock_fair('away', '1 s')" 2>&1)
t1=$(seckill_now_ms)
seckill_redis_start 7>&-
ok "grep -q 'ERROR:  seckill could not reach Redis' <<<\"\$out\" && [ $((t1 - t0)) -ge 1000 ] && [ $((t1 - t0)) -le 3000 ]" \
	"Redis down: a fair taker asked again until its wait of 1 s ran out ($((t1 - t0)) ms), then failed naming Redis" ||
	diag "$out"

done_testing
