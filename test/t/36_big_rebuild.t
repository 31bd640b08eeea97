#!/usr/bin/env bash
# A campaign with 1,500,000 buyers: preheated, then lost by Redis and
# rebuilt from PostgreSQL by the worker on the next purchase, in steps between
# its rounds.  The rebuild succeeds, and every buyer is still a buyer after
# it.  A 16-client sale of another campaign runs meanwhile: its figures are
# printed.  During the rebuild the campaign's purchases are answered busy; a
# cancellation is done at once and its buyer may buy again after it; a
# restock waits for the rebuild; a preheat waits for it and answers its
# result; a caller that gives up on its preheat is not made to wait by its
# next call.  Then Redis restarts empty: a campaign preheated after the big
# one sells again before the big one's rebuild is done.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tag="$(date +%s)-$$"
big="big-$tag"
sale="sale-$tag"
prefix=$(psql_val "SHOW seckill.redis_prefix")

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 <<SQL
SELECT seckill_campaign_create('$sale', 100000000) \g /dev/null
SELECT seckill_campaign_create('$big', 2000000) AS id \gset
INSERT INTO seckill.orders (id, campaign_id, user_id, qty)
SELECT b.id + k, :id, 'buyer-' || (b.id + k), 1
FROM (SELECT nextval('seckill.order_ids') AS id FROM generate_series(1, 1500)) b, generate_series(0, 999) k;
UPDATE seckill.campaigns SET sold = 1500000 WHERE id = :id;
SQL
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$big'")
start=$(seckill_now_ms)
is "$(PGOPTIONS='-c seckill.request_timeout=120s' psql_val "SELECT seckill_preheat('$big')")" 500000 \
	"a campaign of 1,500,000 buyers preheated in $(($(seckill_now_ms) - start)) ms"
is "$(psql_val "SELECT redis_buyers FROM seckill_status('$big')")" 1500000 "Redis holds its 1,500,000 buyers"
is "$(psql_val "SELECT seckill_preheat('$sale')")" 100000000 "and another campaign on sale"

cat >"$work/buy.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT status FROM seckill_buy('u-' || :u, '$sale');
SQL
figures=$(seckill_pgbench "$work/alone" 16 3 "$work/buy.sql")
read -r alone _ _ p99_alone <<<"$figures"

# Redis loses the campaign; the next purchase of it starts the rebuild
seckill_redis_cli DEL "$prefix:{c:$cid}:meta" "$prefix:{c:$cid}:buyers" >/dev/null
seckill_pgbench "$work/during" 16 6 "$work/buy.sql" >"$work/during.figures" &
load=$!
start=$(seckill_now_ms)
first=$(psql_val "SELECT status FROM seckill_buy('new-buyer', '$big')")
is "$first" busy "Redis lost the campaign: its first purchase is answered busy and starts the rebuild"

# meanwhile: a preheat and a restock wait for the rebuild; a cancellation does not
PGOPTIONS='-c seckill.request_timeout=120s' psql_val "SELECT seckill_preheat('$big')" >"$work/preheat" 2>&1 &
preheat=$!
PGOPTIONS='-c seckill.request_timeout=120s' psql_val "SELECT seckill_restock('$big', 10)" >"$work/restock" 2>&1 &
restock=$!
IFS='|' read -r cancelled cancelled_user <<<"$(psql_val "SELECT id, user_id FROM seckill.orders
	WHERE campaign_id = $cid ORDER BY id DESC LIMIT 1")"
is "$(psql_val "SELECT seckill_cancel($cancelled)")" cancelled "a cancellation during the rebuild is done at once"
psql -XAtq -c "SET seckill.request_timeout = '200ms'" -c "SELECT seckill_preheat('$big')" \
	-c "SELECT 'next call: ' || pg_stock FROM seckill_status('$sale')" >"$work/given_up" 2>&1
ok "grep -q 'timed out' '$work/given_up' && grep -q '^next call: ' '$work/given_up'" "a session that gave up on its preheat is answered at once on its next call"
is "$(psql_val "SELECT status FROM seckill_buy('probe', '$big')")" busy \
	"all this while the rebuild went on: a purchase is still answered busy"

wait "$preheat"
is "$(cat "$work/preheat")" 500001 \
	"the preheat waited for the rebuild, which ended in $(($(seckill_now_ms) - start)) ms, and answers its stock, with the cancelled item"
wait "$restock"
is "$(psql_val "SELECT status FROM seckill_buy('new-buyer', '$big')")" ok "the campaign sells again"
is "$(cat "$work/restock")" 2000010 "the restock waited for the rebuild, then was done"
wait "$load"
read -r during _ _ p99 <"$work/during.figures"
slowest=$(cat "$work"/during/txn.* | awk '$3 ~ /^[0-9]+$/ && $3 > m { m = $3 } END { printf "%d", m / 1000 }')
diag "the sale alone: $alone calls/s, p99 $p99_alone ms; during the rebuild: $during calls/s, p99 $p99 ms," \
	"the slowest call $slowest ms"
is "$(psql_val "SELECT string_agg(DISTINCT status, ',') FROM (SELECT (seckill_buy('buyer-' || o.id, '$big')).status
	FROM seckill.orders o WHERE o.campaign_id = $cid AND o.status <> 'cancelled' ORDER BY o.id LIMIT 1000) s")" duplicate \
	"the first 1,000 of the 1,500,000 buyers are still buyers: duplicate"
is "$(psql_val "SELECT redis_buyers || '/' || redis_stock || '/' || pg_stock FROM seckill_status('$big')")" \
	"1500000/500010/500010" "Redis: every buyer but the cancelled one, and the new one; stock as PostgreSQL says"
is "$(psql_val "SELECT status FROM seckill_buy('$cancelled_user', '$big')")" ok "the cancelled buyer may buy again"
ok "grep -q 'number of failed transactions: 0' '$work/during/pgbench.out'" "no purchase of the sale failed meanwhile"

# Redis restarted empty: every preheated campaign is rebuilt, a step each in
# turn, so a campaign created after the big one sells again while the big
# one is still being rebuilt, not once its 1,500,000 buyers are all back
late="late-$tag"
psql_val "SELECT seckill_campaign_create('$late', 1000)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$late')")" 1000 \
	"a campaign created after the big one, preheated"
seckill_redis_restart_empty
restarted=$(seckill_now_ms)
# a buyer of the big one comes first: its rebuild is queued first
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('first-after-restart', '$big')\" 2>/dev/null)\" = busy ]" 30
ok "[ $? -eq 0 ]" "Redis restarted empty: a purchase of the big campaign is answered busy, its rebuild begun"
n=0
sells_again() {
	n=$((n + 1))
	[ "$(psql_val "SELECT status FROM seckill_buy('late-$n', '$late')" 2>/dev/null)" = ok ]
}
seckill_wait_for sells_again 30
ok "[ $? -eq 0 ]" "the late campaign sells again $(($(seckill_now_ms) - restarted)) ms after the restart (call $n)"
is "$(psql_val "SELECT status FROM seckill_buy('probe-after-restart', '$big')")" busy \
	"while the big one is still being rebuilt: busy"
rebuilt() {
	[ "$(psql_val "SELECT s.redis_stock = s.pg_stock AND s.redis_buyers = (SELECT count(*) FROM seckill.orders o
		WHERE o.campaign_id = $cid AND o.status <> 'cancelled') FROM seckill_status('$big') s" 2>/dev/null)" = t ]
}
seckill_wait_for rebuilt 120
ok "[ $? -eq 0 ]" "the big one rebuilt $(($(seckill_now_ms) - restarted)) ms after the restart, all its buyers back"

for goods in "$big" "$sale" "$late"; do
	psql_val "SELECT seckill_close('$goods')" >/dev/null
done
done_testing
