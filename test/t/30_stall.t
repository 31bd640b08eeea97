#!/usr/bin/env bash
# Bounded waits: with Redis stalled (SIGSTOP), every call returns within its
# timeout with a clear error; callers cancelled, timed out or terminated while
# they wait leave neither their slot nor the worker in a bad state.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

redis_pid=$(cat "$SECKILL_TMP/redis.pid")
trap 'kill -CONT "$redis_pid" 2>/dev/null' EXIT

sale_begin "stall-$(date +%s)-$$" 5000
goods=$SALE_GOODS
is "$(psql_val "SELECT status FROM seckill_buy('before', '$goods')")" ok "a purchase before the stall"


# 1. One caller, Redis stalled: a clear error within seckill.redis_timeout (1 s).
kill -STOP "$redis_pid"
start=$(seckill_now_ms)
err=$(psql -XAtq -c "SELECT * FROM seckill_buy('stalled-1', '$goods')" 2>&1)
elapsed=$(($(seckill_now_ms) - start))
ok "[[ \"\$err\" == *'could not reach Redis'* ]]" "stalled Redis: a clear error ($err)"
ok "[ $elapsed -lt 3000 ]" "stalled Redis: the error came in $elapsed ms"
out=$(psql -XAt -c "SELECT state, pg_stock, redis_stock IS NULL FROM seckill_status('$goods')" 2>&1)
ok "[[ \"\$out\" == *'WARNING:'*'could not reach Redis'* && \"\$out\" == *'preheated|4999|t'* ]]" \
	"stalled Redis: seckill_status still shows PostgreSQL's side, with a warning"

# 2. A crowd of 64 against Redis stalled longer than the request timeout:
#    every call returns, none past the bound.
sale_crowd 6 stalled
wait "$SALE_CROWD"
ok "grep -q 'number of failed transactions: 0' '$SALE_WORK/stalled.out'" "stalled Redis: every call of the crowd returned"
calls=$(cat "$SALE_WORK"/stalled-txn.* | wc -l)
max_ms=$(sale_slowest stalled)
ok "[ $calls -gt 0 ] && [ $max_ms -lt 6000 ]" \
	"stalled Redis: $calls calls, the slowest took $max_ms ms (request timeout 5000 ms)"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status NOT IN ('error', 'busy')")" 0 \
	"stalled Redis: no call claimed an outcome"

# For the next steps the worker waits on a stalled Redis for 5 s.
kill -CONT "$redis_pid"
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('reconnected', '$goods')\" 2>/dev/null)\" = ok ]" 10
ok "[ $? -eq 0 ]" "Redis back: purchases resume"
seckill_configure "SET seckill.redis_timeout = '5s'"
ok "[ $? -eq 0 ]" "seckill.redis_timeout = 5s reloaded"
kill -STOP "$redis_pid"

# 3. A caller cancelled while it waits, then Redis comes back: the same
#    session buys again (its abandoned slot was recycled), and the fate of
#    the cancelled purchase is known.
out=$(psql -XAtq -v VERBOSITY=verbose 2>&1 <<SQL
SET statement_timeout = 300;
SELECT status FROM seckill_buy('cancelled-1', '$goods');
\! kill -CONT $redis_pid
RESET statement_timeout;
SELECT status FROM seckill_buy('after-cancel', '$goods');
SELECT status FROM seckill_order('cancelled-1', '$goods');
SQL
)
ok "[[ \"\$out\" == *'57014: canceling statement due to statement timeout'* ]]" \
	"a waiting caller can be cancelled: 57014, its own statement_timeout"
ok "[[ \"\$out\" == *\$'\nok\n'* ]]" "the same session buys after its cancelled call"
ok "[[ \"\$out\" == *none || \"\$out\" == *reserved ]]" "the cancelled purchase's fate is known: ${out##*$'\n'}"

# 3a. seckill's own timeout has its own SQLSTATE, SK001, and the hint says
#     how to learn the purchase's fate.
kill -STOP "$redis_pid"
out=$(psql -XAtq -v VERBOSITY=verbose 2>&1 <<SQL
SET seckill.request_timeout = '300ms';
SELECT status FROM seckill_buy('timed-out-1', '$goods');
\! kill -CONT $redis_pid
RESET seckill.request_timeout;
SELECT status FROM seckill_order('timed-out-1', '$goods');
SQL
)
ok "[[ \"\$out\" == *'SK001: seckill request timed out after 300 ms'*'call seckill_order()'* ]]" \
	"seckill.request_timeout runs out: SK001, with a hint to ask seckill_order()"
ok "[[ \"\$out\" == *\$'\nreserved' || \"\$out\" == *\$'\nnone' ]]" "then seckill_order() tells its fate: ${out##*$'\n'}"

# 3b. Requests given up on hold the session's two request slots while the
#     worker still serves the first: a third call fails within its own
#     timeout and says whose requests held them; once Redis is back the
#     session buys again.
kill -STOP "$redis_pid"
out=$(psql -XAtq -v VERBOSITY=verbose 2>&1 <<SQL
SET statement_timeout = 300;
SELECT status FROM seckill_buy('held-1', '$goods');
SELECT status FROM seckill_buy('held-2', '$goods');
RESET statement_timeout;
SET seckill.request_timeout = '300ms';
SELECT status FROM seckill_buy('held-3', '$goods');
\! kill -CONT $redis_pid
RESET seckill.request_timeout;
SELECT status FROM seckill_buy('held-4', '$goods');
SQL
)
ok "[[ \"\$out\" == *'SK002: seckill request timed out after 300 ms before it was made'*'purchase request of this session, given up on'*'purchase request of this session, given up on'* ]]" \
	"a third call while two given up on are served fails in its own time, saying why"
ok "[[ \"\$out\" == *\$'\nok' ]]" "once Redis is back the session buys again"

# 4. A caller terminated while it waits: the worker carries on.
kill -STOP "$redis_pid"
psql -XAtq -c "SELECT * FROM seckill_buy('terminated-1', '$goods')" >/dev/null 2>&1 &
waiter=$!
seckill_wait_for "[ \"\$(psql_val \"SELECT count(*) FROM pg_stat_activity
	WHERE wait_event_type = 'Extension' AND query LIKE '%terminated-1%'\")\" = 1 ]" 10
ok "[ $? -eq 0 ]" "a caller waits on the stalled worker"
is "$(psql_val "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
	WHERE wait_event_type = 'Extension' AND query LIKE '%terminated-1%'")" t "it is terminated"
wait "$waiter"
kill -CONT "$redis_pid"
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('after-terminate', '$goods')\" 2>/dev/null)\" = ok ]" 10
ok "[ $? -eq 0 ]" "the worker serves purchases after the terminated caller"

seckill_configure "RESET seckill.redis_timeout"

# A crowd after all that, then nothing may be lost or double counted.
sale_crowd 3 after
wait "$SALE_CROWD"
sale_finish
done_testing
