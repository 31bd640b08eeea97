#!/usr/bin/env bash
# rebuy_after_cancel => false holds through every rebuild: a buyer whose
# order was cancelled stays a buyer when Redis loses the campaign and the
# worker rebuilds it, after seckill_preheat() and seckill_reconcile(), while
# Redis is away and the worker sells from PostgreSQL alone, and after Redis is
# rebuilt from PostgreSQL.  No user ever holds two orders of the campaign.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

redis_pid=$(cat "$SECKILL_TMP/redis.pid")
trap 'kill -CONT "$redis_pid" 2>/dev/null
	seckill_configure "RESET seckill.redis_unavailable" "RESET seckill.audit_interval" >/dev/null 2>&1' EXIT

goods="kept-$(date +%s)-$$"
prefix=$(psql_val "SHOW seckill.redis_prefix")
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
cid=$(psql_val "SELECT seckill_campaign_create('$goods', 100, rebuy_after_cancel => false)")
is "$(psql_val "SELECT seckill_preheat('$goods')")" 100 "a campaign whose cancelled buyers may not buy again, preheated"

buy() { psql_val "SELECT status FROM seckill_buy('$1', '$goods')" 2>&1; }
for u in $(seq 1 20); do buy "user-$u" >/dev/null; done
psql_val "SELECT seckill_cancel(id) FROM seckill.orders WHERE campaign_id = $cid
	AND user_id IN ('user-1', 'user-2', 'user-3', 'user-4', 'user-5')" >/dev/null
path() { psql_val "SELECT sales_path FROM seckill_status('$goods')" 2>/dev/null; }
# refused: what the five cancelled buyers are answered
refused() {
	for u in 1 2 3 4 5; do buy "user-$u"; done | sort | uniq -c | awk '{ printf "%s %s ", $1, $2 }'
}
is "$(psql_val "SELECT count(*) FILTER (WHERE status = 'cancelled') || '/' || count(*)
	FROM seckill.orders WHERE campaign_id = $cid")" 5/20 "20 sold, 5 of them cancelled"
is "$(refused)" "5 duplicate " "the cancelled buyers are refused"

# the audit (once a second) would find the campaign gone and rebuild it
# before the purchase below could: off while the purchase is to find it gone
seckill_configure "SET seckill.audit_interval = 0"
seckill_redis_cli DEL "$prefix:{c:$cid}:meta" "$prefix:{c:$cid}:buyers" >/dev/null
is "$(buy new-1)" busy "Redis lost the campaign: the next purchase starts its rebuild"
seckill_wait_for "[ \"\$(buy new-1)\" = ok ]" 30
ok "[ $? -eq 0 ]" "the campaign is rebuilt and sells again"
seckill_configure "RESET seckill.audit_interval"
is "$(refused)" "5 duplicate " "after the rebuild, the cancelled buyers are still refused"

is "$(psql_val "SELECT seckill_preheat('$goods')")" 84 "preheated again: 100 less 16 orders"
is "$(refused)" "5 duplicate " "after seckill_preheat(), still refused"
is "$(psql_val "SELECT buyers_before || ' ' || buyers_expected || ' ' || repaired FROM seckill_reconcile('$goods')")" \
	"21 21 false" "seckill_reconcile() counts them as PostgreSQL's buyers too: no drift"

seckill_configure "SET seckill.redis_unavailable = 'database'"
ok "[ $? -eq 0 ]" "seckill.redis_unavailable = database"
kill -STOP "$redis_pid"
seckill_wait_for "buy new-2 >/dev/null; [ \"\$(path)\" = database ]" 30
ok "[ $? -eq 0 ]" "Redis frozen: the worker sells from PostgreSQL alone"
is "$(refused)" "5 duplicate " "PostgreSQL alone refuses the cancelled buyers too"
is "$(buy new-3)" ok "and sells to a new buyer"
kill -CONT "$redis_pid"
seckill_wait_for "[ \"\$(path)\" = redis ]" 30
ok "[ $? -eq 0 ]" "Redis thawed: the worker rebuilt it from PostgreSQL"
is "$(refused)" "5 duplicate " "after that rebuild, still refused"
is "$(psql_val "SELECT count(*) FROM (SELECT user_id FROM seckill.orders WHERE campaign_id = $cid
	GROUP BY user_id HAVING count(*) > 1) twice")" 0 "no user holds two orders of the campaign"
is "$(psql_val "SELECT redis_stock = pg_stock FROM seckill_status('$goods')")" t "Redis' stock is PostgreSQL's"

psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
