#!/usr/bin/env bash
# One holder at a time within a PostgreSQL cluster, across a Redis data loss:
# 12 sessions take a fair lock in turn and 3 take it shared, in loops, each
# hold written to a table with its fencing token and its interval
# (test/t/lock_crowd.sh), while
# Redis is restarted empty and then flushed (FLUSHALL) under them, each
# time while a hold of 4 s is under way.  The
# worker puts back every lease it holds before it runs any other lock
# script: no exclusive hold overlaps another hold, the exclusive holds'
# tokens rise in the order they were granted, and every holder still held
# its lock when it released it.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/lock_crowd.sh
. "$(dirname "$0")/lock_crowd.sh"

work=$(mktemp -d -p "$SECKILL_TMP" dataloss.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait; [ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"' EXIT
log=$SECKILL_TMP/postgresql.log
seconds=24

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
lock_crowd_start dl "$seconds" "$work"
put_backs() { grep -c 'seckill worker put back [1-9]' "$log"; }
seckill_wait_for "lock_crowd_busy dl" 10
ok "[ $? -eq 0 ]" "the lock held, 8 or more sessions waiting in line"

seckill_wait_for "lock_crowd_long_hold dl" 15
ok "[ $? -eq 0 ]" "a hold of 4 s under way"
before=$(put_backs)
seckill_redis_restart_empty 7>&-
seckill_wait_for "[ \$(put_backs) -gt $before ]" 10
ok "[ $? -eq 0 ]" "Redis restarted empty: the worker put the leases back"
seckill_wait_for "lock_crowd_busy dl" 10
ok "[ $? -eq 0 ]" "... and the line moves on"

seckill_wait_for "lock_crowd_long_hold dl" 15
ok "[ $? -eq 0 ]" "a hold of 4 s under way"
before=$(put_backs)
seckill_redis_cli FLUSHALL >/dev/null
seckill_wait_for "[ \$(put_backs) -gt $before ]" 10
ok "[ $? -eq 0 ]" "Redis flushed: the worker put the leases back"
seckill_wait_for "lock_crowd_busy dl" 10
ok "[ $? -eq 0 ]" "... and the line moves on"

grep 'seckill worker put back\|seckill lost lock' "$log" | sed 's/^/# /'
lock_crowd_check dl "restart and flush"

done_testing_with_logs 30 "$log"
