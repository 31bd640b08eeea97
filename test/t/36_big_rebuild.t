#!/usr/bin/env bash
# A campaign with 1,500,000 buyers: preheated, then lost by Redis and
# rebuilt from PostgreSQL by the worker on the next purchase.  The buyers are
# staged in pipelines that each fit seckill.redis_timeout, so the rebuild
# succeeds, and every one of them is still a buyer after it.  A 16-client
# sale of another campaign runs meanwhile: its figures are printed.
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
start=$(date +%s%3N)
is "$(PGOPTIONS='-c seckill.request_timeout=120s' psql_val "SELECT seckill_preheat('$big')")" 500000 \
	"a campaign of 1,500,000 buyers preheated in $(($(date +%s%3N) - start)) ms"
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
start=$(date +%s%3N)
first=$(psql_val "SELECT status FROM seckill_buy('new-buyer', '$big')")
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('new-buyer', '$big')\")\" = ok ]" 60
ok "[ $? -eq 0 ]" "Redis lost the campaign: the first purchase was answered $first, and the rebuild ended in $(($(date +%s%3N) - start)) ms"
wait "$load"
read -r during _ _ p99 <"$work/during.figures"
slowest=$(cat "$work"/during/txn.* | awk '$3 ~ /^[0-9]+$/ && $3 > m { m = $3 } END { printf "%d", m / 1000 }')
diag "the sale alone: $alone calls/s, p99 $p99_alone ms; during the rebuild: $during calls/s, p99 $p99 ms," \
	"the slowest call $slowest ms (the rebuild runs in one piece)"
is "$(psql_val "SELECT string_agg(DISTINCT status, ',') FROM (SELECT (seckill_buy('buyer-' || o.id, '$big')).status
	FROM seckill.orders o WHERE o.campaign_id = $cid ORDER BY o.id LIMIT 1000) s")" duplicate \
	"the first 1,000 of the 1,500,000 buyers are still buyers: duplicate"
is "$(psql_val "SELECT redis_buyers || '/' || redis_stock || '/' || pg_stock FROM seckill_status('$big')")" \
	"1500001/499999/499999" "Redis: every buyer and the new one, stock as PostgreSQL says"
ok "grep -q 'number of failed transactions: 0' '$work/during/pgbench.out'" "no purchase of the sale failed meanwhile"

for goods in "$big" "$sale"; do
	psql_val "SELECT seckill_close('$goods')" >/dev/null
done
done_testing
