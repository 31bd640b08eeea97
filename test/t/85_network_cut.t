#!/usr/bin/env bash
# The network to Redis is cut in the middle of a sale and restored: the worker
# reaches Redis through a TCP relay (socat) that is frozen with SIGSTOP, so
# packets stop without any reset, as in a real partition, then thawed.
# Callers get errors within the bound, never a hang; sales resume by
# themselves; after reconcile every reservation is accounted for.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

log=$SECKILL_TMP/postgresql.log
relay_port=$SECKILL_OWN_PORT
relay=
# socat forks a process per connection: freeze and thaw them all
relay_signal() { kill "-$1" "$relay" $(pgrep -P "$relay") 2>/dev/null; }
cleanup() {
	[ -n "$relay" ] && relay_signal CONT && relay_signal TERM
	seckill_configure "RESET seckill.redis_port" >/dev/null 2>&1
}
trap cleanup EXIT
count() { grep -c "$1" "$log" || true; }

socat TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$SECKILL_REDIS_PORT" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
ok "[ $? -eq 0 ]" "a TCP relay to Redis on port $relay_port"
seckill_configure "SET seckill.redis_port = $relay_port"
ok "[ $? -eq 0 ]" "the worker goes through the relay"

sale_begin "netcut-$(date +%s)-$$" 20000
sale_crowd until crowd 60000
seckill_wait_for "sale_orders_at_least 500" 30
ok "[ $? -eq 0 ]" "the sale is under way"

drops=$(count 'seckill worker disconnected from Redis')
relay_signal STOP
cut=$(sale_orders)
seckill_wait_for "[ \$(count 'seckill worker disconnected from Redis') -gt $drops ]" 15
ok "[ $? -eq 0 ]" "network cut: the worker gives up on the silent connection"
relay_signal CONT
restored=$(seckill_now_ms)
seckill_wait_for "sale_orders_at_least $((cut + 500))" 30
ok "[ $? -eq 0 ]" "network restored: sales resume"
diag "sales resumed $(($(seckill_now_ms) - restored)) ms after the network came back"
crowd_done crowd
slowest=$(sale_slowest crowd)
ok "[ $slowest -lt 6000 ]" "the slowest call took $slowest ms (request timeout 5000 ms)"

sale_finish
done_testing
