#!/usr/bin/env bash
# DROP EXTENSION and CREATE EXTENSION in the middle of a sale: the worker
# keeps running (the same process), every call in flight returns (an error,
# not a hang), and a sale in the new installation sells exactly its stock,
# with its journal settled.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

sale_begin "dropped-$(date +%s)-$$" 100000
worker=$(seckill_worker_pid)
sale_crowd until during 1000000
seckill_wait_for "sale_orders_at_least 300" 20
ok "[ $? -eq 0 ]" "a sale under way: 64 connections"
psql_val "DROP EXTENSION seckill CASCADE" >/dev/null
ok "[ $? -eq 0 ]" "DROP EXTENSION seckill in the middle of it"
psql_val "CREATE EXTENSION seckill" >/dev/null
ok "[ $? -eq 0 ]" "CREATE EXTENSION seckill at once"
answered=$(psql_val "SELECT count(*) FROM stampede_answers")
seckill_wait_for "[ \$(psql_val 'SELECT count(*) FROM stampede_answers') -ge $((answered + 2000)) ]" 20
ok "[ $? -eq 0 ]" "the crowd goes on calling the new extension: 2,000 more answers"
crowd_done during
slowest=$(sale_slowest during)
ok "[ $slowest -lt 6000 ]" "none waited past seckill.request_timeout (5 s): the slowest took $slowest ms"
diag "answers: $(psql_val "SELECT string_agg(n || ' ' || coalesce(split_part(err, ' ', 1), status), ', ')
	FROM (SELECT status, err, count(*) n FROM stampede_answers GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 6) a")"
is "$(seckill_worker_pid)" "$worker" "the worker kept running: the same process"

sale_begin "recreated-$(date +%s)-$$" 1000
sale_crowd until after
seckill_wait_for "sale_orders_at_least 1000" 10
crowd_done after
sale_finish
done_testing
