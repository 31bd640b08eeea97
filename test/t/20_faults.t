#!/usr/bin/env bash
# Faults during a stampede: the worker is killed with SIGKILL (the postmaster
# then restarts the whole cluster), PostgreSQL stops at once (immediate) and
# starts again, and Redis restarts empty.  Afterwards a reconcile, then fresh
# buyers sell the rest; the invariants must hold: exactly the stock sold, no
# oversell, no duplicate, every ok answer backed by its order, and every
# reservation Redis granted either an order or a logged compensation, with
# nothing left in the journal.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

sale_begin "faults-$(date +%s)-$$" 20000
worker_up() { seckill_pg_ready && [ -n "$(seckill_worker_pid 2>/dev/null)" ]; }

# under way: the crowd's answers so far, when it is not
crowd_tail() { diag "$(tail -n 5 "$SALE_WORK/$1.out")"; }

# 1. kill -9 the worker mid-sale, twice (each crowd lasts until its
# connections die with the cluster)
for round in 1 2; do
	sale_crowd 60 "kill-$round"
	before=$(sale_orders)
	seckill_wait_for "sale_orders_at_least $((before + 1000))" 30
	ok "[ $? -eq 0 ]" "kill $round: the sale is under way ($before+ orders)" || crowd_tail "kill-$round"
	wpid=$(seckill_worker_pid)
	started=$(seckill_now_ms)
	kill -9 "$wpid"
	seckill_wait_for worker_up 60
	ok "[ $? -eq 0 ]" "kill $round: cluster and worker back after SIGKILL of worker $wpid"
	diag "kill $round: worker back in $(($(seckill_now_ms) - started)) ms"
	wait "$SALE_CROWD" # the crowd's connections died with the cluster
done

# 2. PostgreSQL stops at once (immediate: crash recovery at start) mid-sale
sale_crowd 60 pg-immediate
before=$(sale_orders)
seckill_wait_for "sale_orders_at_least $((before + 1000))" 30
ok "[ $? -eq 0 ]" "immediate stop: the sale is under way" || crowd_tail pg-immediate
started=$(seckill_now_ms)
seckill_pg_ctl -m immediate stop >/dev/null
seckill_pg_ctl -w start >/dev/null
seckill_wait_for worker_up 60
ok "[ $? -eq 0 ]" "PostgreSQL restarted after an immediate stop, worker up"
diag "immediate stop: worker back in $(($(seckill_now_ms) - started)) ms"
wait "$SALE_CROWD"

# 3. Redis restarts empty mid-sale: buying resumes only after the rebuild
# (a crowd that buys until sales have resumed)
sale_crowd until redis
before=$(sale_orders)
seckill_wait_for "sale_orders_at_least $((before + 1000))" 30
ok "[ $? -eq 0 ]" "redis: the sale is under way" || crowd_tail redis
started=$(seckill_now_ms)
seckill_redis_restart_empty
ok "[ $? -eq 0 ]" "redis restarted empty"
restarted_orders=$(sale_orders)
seckill_wait_for "sale_orders_at_least $((restarted_orders + 500))" 30
ok "[ $? -eq 0 ]" "redis: sales resume after the campaign is rebuilt"
diag "redis: sales resumed $(($(seckill_now_ms) - started)) ms after the restart began"
crowd_done redis
diag "errors: $(psql_val "SELECT coalesce(string_agg(n || ' x ' || err, '; '), 'none')
	FROM (SELECT left(err, 90) err, count(*) n FROM stampede_answers
		WHERE status = 'error' GROUP BY 1 ORDER BY 2 DESC LIMIT 5) s")"

sale_finish
done_testing
