#!/usr/bin/env bash
# pg_cron runs the housekeeping: a job of seckill_release_expired() gives the
# stock of unpaid orders back, and a job of seckill_reconcile() repairs a
# drift in Redis.  pg_cron's shortest schedule is a minute: this test waits
# for one run of each.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

goods=cron-$(date +%s)-$$
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "CREATE EXTENSION IF NOT EXISTS pg_cron" >/dev/null
ok "[ $? -eq 0 ]" "pg_cron installed"
is "$(psql_val "SELECT seckill_campaign_create('$goods', 5, payment_timeout => '1 second') > 0")" t \
	"a campaign of 5 whose orders must be paid within a second"
is "$(psql_val "SELECT seckill_preheat('$goods')")" 5 "preheated"
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
is "$(psql_val "SELECT string_agg(b.status, ',') FROM unnest(ARRAY['a', 'b', 'c']) u, LATERAL seckill_buy(u, '$goods') b")" \
	ok,ok,ok "three buyers"
paid=$(psql_val "SELECT order_id FROM seckill_order('a', '$goods')")
is "$(psql_val "SELECT seckill_pay($paid)")" paid "one of them pays"

# a drift for reconcile to repair: Redis counts 4 phantom items
seckill_redis_cli HINCRBY "seckill:{c:$cid}:meta" stock 4 >/dev/null
seckill_wait_for "[ \"\$(psql_val \"SELECT count(*) FROM seckill.orders WHERE campaign_id = $cid
	AND status = 'reserved' AND created_at < now() - interval '1 second'\")\" = 2 ]" 10
ok "[ $? -eq 0 ]" "two unpaid orders are past their payment timeout"

psql -XAtq -c "SELECT cron.unschedule(jobname) FROM cron.job WHERE jobname LIKE 'seckill-%'" >/dev/null
psql_val "SELECT cron.schedule('seckill-release', '* * * * *', 'SELECT count(*) FROM seckill_release_expired()')" >/dev/null
psql_val "SELECT cron.schedule('seckill-reconcile', '* * * * *', 'SELECT count(*) FROM seckill_reconcile()')" >/dev/null
ok "[ $? -eq 0 ]" "jobs scheduled every minute"
done_sql="SELECT count(DISTINCT j.jobname) FROM cron.job_run_details d JOIN cron.job j USING (jobid)
	WHERE j.jobname LIKE 'seckill-%' AND d.status = 'succeeded'"
seckill_wait_for "[ \"\$(psql_val \"$done_sql\")\" = 2 ]" 75
ok "[ $? -eq 0 ]" "pg_cron ran both jobs" ||
	diag "$(psql_val "SELECT jobid, status, return_message FROM cron.job_run_details ORDER BY runid DESC LIMIT 5")"
psql -XAtq -c "SELECT cron.unschedule(jobname) FROM cron.job WHERE jobname LIKE 'seckill-%'" >/dev/null

is "$(psql_val "SELECT string_agg(user_id || '=' || status, ',' ORDER BY user_id) FROM seckill.orders WHERE campaign_id = $cid")" \
	"a=paid,b=cancelled,c=cancelled" "the unpaid orders were cancelled, the paid one kept"
is "$(psql_val "SELECT sold || '/' || pg_stock || '/' || redis_stock || '/' || redis_buyers FROM seckill_status('$goods')")" \
	"1/4/4/1" "their stock is back in both stores and the phantom items are gone"
is "$(psql_val "SELECT status FROM seckill_buy('b', '$goods')")" ok "a released buyer may buy again"
psql_val "SELECT seckill_close('$goods')" >/dev/null

# One campaign that cannot be released (another cluster holds its lease)
# does not stop the release of the others.
stuck="stuck-$goods" free="free-$goods"
expired_campaign "$stuck" 1000 >/dev/null
expired_campaign "$free" 1000 >/dev/null
stuck_id=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$stuck'")
lock_key="$(psql_val "SHOW seckill.redis_prefix"):{c:$stuck_id}:lock"
seckill_redis_cli SET "$lock_key" "another-cluster:1:1" PX 60000 >/dev/null
out=$(psql -XAtq -c "SELECT campaign_goods || '=' || coalesce(released::text, 'failed')
	FROM seckill_release_expired() WHERE campaign_goods IN ('$stuck', '$free') ORDER BY 1" 2>&1)
ok "[[ \"\$out\" == *'WARNING:'*'$stuck'*'locked by another PostgreSQL cluster'* ]]" \
	"the campaign whose lease another cluster holds fails with a warning that says why"
ok "[[ \"\$out\" == *\"$free=1000\"* && \"\$out\" == *\"$stuck=failed\"* ]]" \
	"its row says so, and the other campaign is released"
seckill_redis_cli DEL "$lock_key" >/dev/null
is "$(psql_val "SELECT released FROM seckill_release_expired() WHERE campaign_goods = '$stuck'")" 1000 \
	"once the lease is free, the next run releases it"
for g in "$stuck" "$free"; do psql_val "SELECT seckill_close('$g')" >/dev/null; done
done_testing
