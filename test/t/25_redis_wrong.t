#!/usr/bin/env bash
# When Redis is wrong (it forgot a buyer, it counts stock that is not there),
# PostgreSQL's constraints refuse what Redis granted: the refused purchases get
# their honest status, their reservations are given back and logged, the
# purchases in the same rounds still commit, and reconcile repairs Redis.
# The worker's audit, which would repair Redis within a second by itself, is
# off until the last part, which checks it.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

trap 'seckill_configure "RESET seckill.audit_interval" >/dev/null 2>&1' EXIT
seckill_configure "SET seckill.audit_interval = 0"

goods=wrong-$(date +%s)-$$
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
is "$(psql_val "SELECT seckill_campaign_create('$goods', 10) > 0")" t "campaign of 10 created" || done_testing
is "$(psql_val "SELECT seckill_preheat('$goods')")" 10 "preheated" || done_testing
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
meta="seckill:{c:$cid}:meta"
buyers="seckill:{c:$cid}:buyers"

# buy_all user...: all at once, each on its own connection
buy_all() {
	local u pids=()
	for u in "$@"; do
		psql_val "SELECT try_buy('$u', '$goods')" >/dev/null &
		pids+=($!)
	done
	wait "${pids[@]}"
}
answer() {
	psql_val "SELECT string_agg(status, ',' ORDER BY status) FROM stampede_answers WHERE user_id = '$1'"
}

# 0. Redis forgets the scripts: they are loaded again and the purchase goes through.
is "$(seckill_redis_cli SCRIPT FLUSH)" OK "Redis forgets its scripts"
# 1. Redis forgets that alice bought.
buy_all alice
is "$(answer alice)" ok "alice buys"
ok "grep -q 'seckill worker reloads its Lua scripts' '$SECKILL_TMP/postgresql.log'" \
	"the worker reloaded the scripts after NOSCRIPT"
is "$(seckill_redis_cli SREM "$buyers" alice)" 1 "Redis forgets alice"
buy_all alice u1 u2 u3 u4 u5
is "$(answer alice)" duplicate,ok "alice's second purchase is refused by the unique index: duplicate"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE user_id ~ '^u[1-5]$' AND status = 'ok'")" 5 \
	"the five other buyers of those rounds got their orders"
is "$(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $cid AND user_id = 'alice'
	AND reason LIKE '%orders_one_active_per_user%'")" 1 "alice's refused reservation is logged"
is "$(seckill_redis_cli HGET "$meta" stock)" 4 "its stock went back to Redis (10 - 6)"
is "$(seckill_redis_cli SISMEMBER "$buyers" alice)" 1 "alice is a buyer in Redis again"

# 1b. A journal entry for alice that never became an order (as if the worker
#     had lost the answer): the replay gives it back but keeps alice a buyer,
#     since she holds an order.
seckill_redis_cli HSET "seckill:{c:$cid}:journal" 999999999 "1:alice" >/dev/null
seckill_redis_cli HINCRBY "$meta" stock -1 >/dev/null
seckill_redis_cli CLIENT KILL TYPE normal >/dev/null
is "$(psql_val "SELECT in_flight FROM seckill_status('$goods')")" 0 "the new connection replayed the journal"
is "$(seckill_redis_cli SISMEMBER "$buyers" alice)" 1 "alice is still a buyer"
is "$(seckill_redis_cli HGET "$meta" stock)" 4 "and the reserved item is back in stock"

# 2. Redis counts 3 items that are not there.
seckill_redis_cli HINCRBY "$meta" stock 3 >/dev/null
buy_all v1 v2 v3 v4 v5 v6 v7
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE user_id ~ '^v' AND status = 'ok'")" 4 \
	"4 of 7 buyers get the 4 real items"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE user_id ~ '^v' AND status = 'sold_out'")" 3 \
	"3 are told sold_out"
# The first refusal by CHECK (sold <= total_stock) marks the campaign sold
# out for the backends, whatever Redis counts: those that came later were
# answered without a reservation.
refused=$(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $cid
	AND reason LIKE '%campaigns_sold_within_stock%'")
ok "[ $refused -ge 1 ] && [ $refused -le 3 ]" "$refused of them refused by CHECK, their reservations logged"
is "$(psql_val "SELECT sold_out_cached::text FROM seckill_status('$goods')")" true \
	"the refusal marked the campaign sold out, though Redis still counts stock"
is "$(psql_val "SELECT count(*) || '/' || sum(qty) FROM seckill.orders WHERE campaign_id = $cid")" 10/10 \
	"10 orders for 10 items: no oversell"

# 3. reconcile puts Redis right
is "$(psql_val "SELECT redis_stock_before || ' ' || expected_stock || ' ' || repaired
	FROM seckill_reconcile('$goods')")" "3 0 true" "reconcile finds 3 phantom items and repairs"
is "$(psql_val "SELECT redis_stock || ' ' || redis_buyers || ' ' || sold_out_cached FROM seckill_status('$goods')")" \
	"0 10 true" "Redis: 0 left, 10 buyers; backends know it is sold out"
is "$(psql_val "SELECT repaired FROM seckill_reconcile('$goods')")" f "a second reconcile finds nothing"

# 4. A lease left by a dead worker of this cluster is taken over; one of
#    another cluster sharing the Redis is respected.
lock="seckill:{c:$cid}:lock"
sysid=$(psql_val "SELECT system_identifier FROM pg_control_system()")
seckill_redis_cli SET "$lock" "$sysid:1:1:1" PX 60000 >/dev/null
is "$(psql_val "SELECT repaired FROM seckill_reconcile('$goods')")" f "a dead worker's lease is taken over"
is "$(seckill_redis_cli EXISTS "$lock")" 0 "and released"
seckill_redis_cli SET "$lock" "12345:1:1:1" PX 60000 >/dev/null
out=$(psql -XAtq -v VERBOSITY=verbose -c "SELECT * FROM seckill_reconcile('$goods')" 2>&1)
ok "[[ \"\$out\" == *55P03*'locked by another PostgreSQL cluster'* ]]" "another cluster's lease is respected: ${out%%$'\n'*}"
seckill_redis_cli DEL "$lock" >/dev/null

# 5. Redis refuses writes (maxmemory): a clear error, and sales resume after.
psql_val "SELECT seckill_campaign_create('$goods-oom', 5)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$goods-oom')")" 5 "another campaign preheated"
seckill_redis_cli CONFIG SET maxmemory 1 >/dev/null
out=$(psql -XAtq -v VERBOSITY=verbose -c "SELECT * FROM seckill_buy('w1', '$goods-oom')" 2>&1)
seckill_redis_cli CONFIG SET maxmemory 0 >/dev/null
ok "[[ \"\$out\" == *38000*\"Redis refused seckill's request\"*OOM* ]]" "Redis out of memory: ${out%%$'\n'*}"
is "$(psql_val "SELECT status FROM seckill_buy('w1', '$goods-oom')")" ok "the next call buys"

# 6. Redis loses that campaign and refuses its rebuild (maxmemory): its
#    purchases are answered busy, the rebuild is tried again every 5 s, not
#    at every purchase, and succeeds once Redis takes writes again.
log=$SECKILL_TMP/postgresql.log
oomcid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods-oom'")
failed="could not rebuild campaign $oomcid in Redis"
before=$(grep -c "$failed" "$log")
seckill_redis_cli DEL "seckill:{c:$oomcid}:meta" >/dev/null
seckill_redis_cli CONFIG SET maxmemory 1 >/dev/null
start=$(date +%s)
answers=$(for i in $(seq 1 30); do psql_val "SELECT status FROM seckill_buy('x$i', '$goods-oom')"; done | sort | uniq -c | xargs)
took=$(($(date +%s) - start))
seckill_redis_cli CONFIG SET maxmemory 0 >/dev/null
tries=$(($(grep -c "$failed" "$log") - before))
is "$answers" "30 busy" "the lost campaign's purchases, its rebuild refused: busy"
ok "[ $tries -ge 1 ] && [ $tries -le $((took / 5 + 1)) ]" "30 purchases in $took s made $tries rebuild attempts"
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('x31', '$goods-oom')\")\" = ok ]" 15
ok "[ $? -eq 0 ]" "Redis takes writes again: the campaign is rebuilt and sells"

# 6b. A rate limit that gives a bucket no expiry in milliseconds (written
#     into Redis by hand): each purchase fails alone, before its buyer is
#     entered, and nothing of the call is lost.
psql_val "SELECT seckill_campaign_create('$goods-ttl', 10)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$goods-ttl')")" 10 "a campaign of 10 for the bad limit"
tcid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods-ttl'")
seckill_redis_cli HSET "seckill:{c:$tcid}:meta" user_rate 1e-300 user_burst 1 >/dev/null
psql_val "DELETE FROM stampede_answers" >/dev/null
pids=()
for u in t1 t2 t3 t4; do
	psql_val "SELECT try_buy('$u', '$goods-ttl')" >/dev/null &
	pids+=($!)
done
wait "${pids[@]}"
is "$(psql_val "SELECT string_agg(status, ',') FROM stampede_answers WHERE user_id ~ '^t[1-4]$'")" error,error,error,error \
	"four purchases under the bad limit: four errors"
refused=$(psql -XAtq -c "SELECT status FROM seckill_buy('t5', '$goods-ttl')" 2>&1)
is "$(grep -o 'gives no expiry in milliseconds' <<<"$refused")" "gives no expiry in milliseconds" \
	"a fifth one's error names the limit that gives no expiry"
is "$(seckill_redis_cli SCARD "seckill:{c:$tcid}:buyers")/$(seckill_redis_cli HLEN "seckill:{c:$tcid}:journal")/$(seckill_redis_cli HGET "seckill:{c:$tcid}:meta" stock)" \
	0/0/10 "no buyer entered, no journal entry, the stock untouched"
seckill_redis_cli HDEL "seckill:{c:$tcid}:meta" user_rate user_burst >/dev/null
is "$(psql_val "SELECT status FROM seckill_buy('t1', '$goods-ttl')")" ok "the limit taken away, the purchase goes through"

# 7. With the audit on (the default): Redis counting stock that is not there
#    is found and repaired within seconds, without a reconcile.
seckill_configure "RESET seckill.audit_interval"
seckill_redis_cli HINCRBY "$meta" stock 2 >/dev/null
seckill_wait_for "[ \"\$(psql_val \"SELECT redis_stock || '/' || pg_stock FROM seckill_status('$goods')\")\" = 0/0 ]" 10
ok "[ $? -eq 0 ]" "the audit found 2 phantom items and rebuilt the campaign: Redis' stock is 0 again"
ok "grep -q 'campaign $cid (\"$goods\") with stock 2 in Redis and 0 unsold in PostgreSQL' '$log'" "and logged it"
done_testing
