#!/usr/bin/env bash
# seckill.redis_unavailable = database: Redis stops for the middle of a sale
# and comes back empty.  Meanwhile the worker sells from PostgreSQL alone, its
# constraints arbitrating, and the storefront tells PostgreSQL's stock; when
# Redis is back every campaign is rebuilt from PostgreSQL before Redis takes
# over again.  The invariants hold throughout.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

log=$SECKILL_TMP/postgresql.log
trap 'seckill_configure "RESET seckill.redis_unavailable" >/dev/null 2>&1
	seckill_redis_ready || seckill_redis_start' EXIT

seckill_configure "SET seckill.redis_unavailable = 'database'"
ok "[ $? -eq 0 ]" "seckill.redis_unavailable = database"

sale_begin "fallback-$(date +%s)-$$" 15000
path() { psql_val "SELECT sales_path FROM seckill_status('$SALE_GOODS')" 2>/dev/null; }
sale_crowd until crowd 60000
seckill_wait_for "sale_orders_at_least 300" 30
ok "[ $? -eq 0 ]" "the sale is under way through Redis"

started=$(seckill_now_ms)
seckill_redis_stop
down=$(sale_orders)
seckill_wait_for "sale_orders_at_least $((down + 300))" 30
ok "[ $? -eq 0 ]" "with Redis stopped, sales go on from PostgreSQL ($down orders when it stopped)"
is "$(path)" database "seckill_status shows sales_path = database"
# Redis' last stock stands still meanwhile: the storefront reads PostgreSQL's
is "$(psql_val "SELECT f.remaining = v.remaining AND f.remaining <= 15000 - $down - 300
	FROM seckill_storefront('$SALE_GOODS') f, seckill.storefront v WHERE v.goods = '$SALE_GOODS'")" t \
	"seckill_storefront() tells PostgreSQL's stock, as the view does"

seckill_redis_start
seckill_wait_for "[ \"\$(path)\" = redis ]" 30
ok "[ $? -eq 0 ]" "Redis back, empty: the campaign is rebuilt and Redis takes over again"
diag "Redis was away, and the campaign rebuilt, within $(($(seckill_now_ms) - started)) ms"
crowd_done crowd
ok "grep -q 'seckill worker sells from PostgreSQL alone' '$log' && grep -q 'sales go through Redis again' '$log'" \
	"both switches are logged"

sale_finish
done_testing
