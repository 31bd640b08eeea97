#!/usr/bin/env bash
# A fair lock's line across a Redis outage that loses the data: 8 sessions
# queue, one after the other, behind a holder; Redis is stopped while they
# wait, so that their asks fail, and started again empty.  The waiters keep
# their places meanwhile (the same owners ask again), the worker puts the
# holder's lease and the line back in the order the waiters came, and once
# the holder lets go each waiter gets the lock in that order, with a newer
# fencing token.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/fair_line.sh
. "$(dirname "$0")/fair_line.sh"

log=$SECKILL_TMP/postgresql.log
waiters=8
trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
places() {
	psql_val "SELECT string_agg(queue_position::text, ' ' ORDER BY acquired_at) FROM seckill.locks
		WHERE name = 'line' AND state = 'waiting'"
}

fair_line line
fair_queue "$waiters" "$SECKILL_TMP"
is "$(places)" "$(seq -s ' ' 1 "$waiters")" "$waiters waiters in line behind the holder, in the order they came"

# Redis away: every waiter asks again at least every 100 ms, in vain (its
# asks are counted in seckill.locks.renewals)
mark=$(wc -c <"$log")
seckill_redis_stop
seckill_wait_for "tail -c +$((mark + 1)) '$log' | grep -q 'seckill worker cannot reach Redis'" 10
ok "[ $? -eq 0 ]" "Redis stopped: the worker cannot reach it"
before=$(psql_val "SELECT string_agg(format('(%s, %s)', owner_pid, renewals), ', ') FROM seckill.locks
	WHERE name = 'line' AND state = 'waiting'")
asked_again() { # how many waiters asked 3 times or more since
	psql_val "SELECT count(*) FROM seckill.locks l JOIN (VALUES $before) b (pid, n) ON l.owner_pid = b.pid
		WHERE l.name = 'line' AND l.state = 'waiting' AND l.renewals >= b.n + 3"
}
seckill_wait_for "[ \$(asked_again) -eq $waiters ]" 10
ok "[ $? -eq 0 ]" "each waiter asked again 3 times or more while Redis was away"
is "$(fair_in_line) / $(places)" "$waiters / $(seq -s ' ' 1 "$waiters")" "and kept its place"

seckill_redis_start 7>&-
seckill_wait_for "tail -c +$((mark + 1)) '$log' | grep -q 'seckill worker put back 1 lock lease(s) and $waiters place(s)'" 15
ok "[ $? -eq 0 ]" "Redis back, empty: the worker put back the holder's lease and the $waiters places" ||
	diag "$(tail -c +$((mark + 1)) "$log" | grep 'put back\|kept\|lost lock')"
is "$(psql_val "SELECT count(*) FROM fair_grants")" 0 "nobody was granted the lock meanwhile"

session_end "SELECT seckill_unlock('line');"
seckill_wait_for "[ \$(psql_val 'SELECT count(*) FROM fair_grants') -eq $waiters ]" 30
ok "[ $? -eq 0 ]" "the holder let go: all $waiters waiters got the lock"
is "$(psql_val "SELECT string_agg(waiter::text, ' ' ORDER BY at) FROM fair_grants")" "$(seq -s ' ' 1 "$waiters")" \
	"in the order they came"
is "$(psql_val "SELECT count(*) FROM (SELECT token <= coalesce(lag(token) OVER (ORDER BY at), $fair_first) AS older
	FROM fair_grants) g WHERE older")" 0 "each with a newer fencing token than the one before"
wait "${fair_pids[@]}"
is "$(cat "$SECKILL_TMP"/waiter-*.out | grep -c .)" 0 "no waiter saw an error"

done_testing_with_logs 30 "$log"
