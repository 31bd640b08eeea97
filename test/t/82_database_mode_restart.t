#!/usr/bin/env bash
# seckill.redis_unavailable = database survives a restart: Redis freezes
# (its data kept, now stale), the worker sells from PostgreSQL, PostgreSQL
# restarts mid-outage, and when Redis thaws, before any purchase came, every
# campaign is rebuilt from PostgreSQL before Redis sells again.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

redis_pid=$(cat "$SECKILL_TMP/redis.pid")
trap 'kill -CONT "$redis_pid" 2>/dev/null
	seckill_configure "RESET seckill.redis_unavailable" >/dev/null 2>&1' EXIT

seckill_configure "SET seckill.redis_unavailable = 'database'"
ok "[ $? -eq 0 ]" "seckill.redis_unavailable = database"
sale_begin "dbmode-$(date +%s)-$$" 200
path() { psql_val "SELECT sales_path FROM seckill_status('$SALE_GOODS')" 2>/dev/null; }
# buy n: n more orders, new users one at a time (a call caught by the freeze
# gets an error and buys nothing: it is counted, not retried)
next_user=0
buy() {
	local target=$(($(sale_orders) + $1)) tries=0
	while [ "$(sale_orders)" -lt "$target" ] && [ $tries -lt $(($1 * 3)) ]; do
		next_user=$((next_user + 1))
		tries=$((tries + 1))
		psql_val "SELECT try_buy('user-$next_user', '$SALE_GOODS')" >/dev/null
	done
	[ "$(sale_orders)" -ge "$target" ]
}
buy 20
ok "[ $? -eq 0 ]" "20 sold through Redis"

multi="multi-$SALE_GOODS"
psql_val "SELECT seckill_campaign_create('$multi', 3, per_user_limit => 3)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$multi')")" 3 "a campaign of 3 items, up to 3 a buyer"
kill -STOP "$redis_pid"
buy 10
is "$?/$(path)" 0/database "Redis frozen: 10 more sold from PostgreSQL alone"
answers=
for call in "m1 2" "m2 2" "m3 1" "m4 1"; do
	set -- $call
	answers+="$1x$2=$(psql_val "SELECT status FROM seckill_buy('$1', '$multi', $2)" 2>&1) "
done
is "$answers" "m1x2=ok m2x2=sold_out m3x1=ok m4x1=sold_out " \
	"from PostgreSQL alone, quantities above one: 2 of 3, then 2 refused with 1 left, then the last 1"
is "$(psql_val "SELECT sales_from_database FROM seckill.worker_state")" t "the mode is recorded in seckill.worker_state"

seckill_pg_restart
ok "[ $? -eq 0 ]" "PostgreSQL restarted mid-outage"
is "$(path)" database "the new worker remembers that Redis is stale"
sold=$(sale_orders)

kill -CONT "$redis_pid"
seckill_wait_for "[ \"\$(path)\" = redis ]" 30
ok "[ $? -eq 0 ]" "Redis thawed with stale data: the worker leaves database mode by itself"
is "$(psql_val "SELECT redis_stock || '/' || pg_stock || ' ' || redis_buyers FROM seckill_status('$SALE_GOODS')")" \
	"$((200 - sold))/$((200 - sold)) $sold" \
	"Redis was rebuilt from PostgreSQL before it sold: stock $((200 - sold)), $sold buyers, before any reconcile"
is "$(psql_val "SELECT sales_from_database FROM seckill.worker_state")" f "the table says so too"
buy 10
ok "[ $? -eq 0 ]" "and sells on through Redis"
is "$(psql_val "SELECT sold || '/' || redis_stock || '/' || pg_stock FROM seckill_status('$multi')")" 3/0/0 \
	"the campaign sold from PostgreSQL alone is sold out in Redis too"
psql_val "SELECT seckill_close('$multi')" >/dev/null
sale_finish
done_testing
