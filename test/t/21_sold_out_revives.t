#!/usr/bin/env bash
# Live after a loss of Redis' data: a sold-out campaign whose Redis restarted
# empty sells again, within seconds and without a reconcile, as soon as stock
# comes back in PostgreSQL: by a release of unpaid orders, a cancel or a
# restock.  The backends answer sold_out from their cache without asking the
# worker, so the worker must learn of the loss by itself; and Redis agrees
# with PostgreSQL again for every preheated campaign, sold out or not.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

log=$SECKILL_TMP/postgresql.log
tag="$(date +%s)-$$"
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
buy() { psql_val "SELECT status FROM seckill_buy('$1', '$2')" 2>/dev/null; }
# agrees goods: Redis holds the stock PostgreSQL has unsold, and nothing in flight
agrees() {
	[ "$(psql_val "SELECT redis_stock IS NOT DISTINCT FROM pg_stock AND in_flight = 0 FROM seckill_status('$1')" 2>/dev/null)" = t ]
}
# sold_out_campaign goods stock [payment_timeout]: preheated, every item sold
sold_out_campaign() {
	is "$(psql_val "SELECT seckill_campaign_create('$1', $2, payment_timeout => '${3:-1 hour}') > 0")" t \
		"campaign $1 of $2"
	is "$(psql_val "SELECT seckill_preheat('$1')")" "$2" "preheated"
	for i in $(seq 1 "$2"); do buy "$1-buyer-$i" "$1" >/dev/null; done
	is "$(buy "$1-late" "$1")" sold_out "$1 sold out: $2 orders"
}
# revives goods what: fresh buyers get ok within 10 s; reports how long it took
revives() {
	local start=$(seckill_now_ms) n=0
	seckill_wait_for "n=\$((n + 1)); [ \"\$(buy \"$1-fresh-\$n\" '$1')\" = ok ]" 10
	ok "[ $? -eq 0 ]" "$2: a fresh buyer is told ok after $(($(seckill_now_ms) - start)) ms and $n call(s)"
}

sold_out_campaign "revive-release-$tag" 3 '1 second'
sold_out_campaign "revive-cancel-$tag" 2
sold_out_campaign "revive-restock-$tag" 2
is "$(psql_val "SELECT count(*) FROM seckill.campaigns c, seckill_status(c.goods) s
	WHERE c.goods LIKE 'revive-%-$tag' AND s.sold_out_cached")" 3 "all three answered sold_out from the backends' cache"

lost_before=$(grep -c 'missing or stale in Redis' "$log" || true)
seckill_redis_restart_empty
ok "[ $? -eq 0 ]" "Redis restarted empty"

# a sold-out campaign is rebuilt too, though no purchase reaches the worker
seckill_wait_for "agrees revive-cancel-$tag" 10
ok "[ $? -eq 0 ]" "without a purchase or a reconcile, Redis holds the sold-out campaign again (stock 0)"
ok "[ $(grep -c 'missing or stale in Redis' "$log") -gt $lost_before ]" "the worker logged the loss it found"

# a release of the unpaid orders past the payment timeout
released=0
seckill_wait_for "released=\$((released + \$(psql_val \"SELECT coalesce(sum(released), 0) FROM seckill_release_expired()
	WHERE campaign_goods = 'revive-release-$tag'\"))); [ \$released -ge 3 ]" 10
ok "[ $? -eq 0 ]" "the 3 unpaid orders released ($released)"
revives "revive-release-$tag" "after a release"
# a cancel
order=$(psql_val "SELECT o.id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = 'revive-cancel-$tag' ORDER BY o.id LIMIT 1")
ok "[ -n \"$order\" ] && psql_val \"SELECT seckill_cancel($order)\" >/dev/null" "an order cancelled"
revives "revive-cancel-$tag" "after a cancel"
# a restock
is "$(psql_val "SELECT seckill_restock('revive-restock-$tag', 2)")" 4 "restocked by 2"
revives "revive-restock-$tag" "after a restock"
is "$(buy "revive-restock-$tag-second" "revive-restock-$tag")" ok "and the second item sells too"

for kind in release cancel restock; do
	seckill_wait_for "agrees revive-$kind-$tag" 10
	ok "[ $? -eq 0 ]" "revive-$kind: Redis' stock = total - sold, journal empty, without a reconcile"
	psql_val "SELECT seckill_close('revive-$kind-$tag')" >/dev/null
done
done_testing
