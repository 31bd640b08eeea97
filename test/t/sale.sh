# shellcheck shell=bash
# A sale for the fault tests, sourced after tap.sh: a campaign, a crowd of 64
# connections whose users repeat, and the end every fault test shares:
# reconcile, sell the rest to fresh buyers, check the invariants of
# shared/DESIGN.md and print the figures.

# sale_begin goods stock [shards]: the campaign, preheated; sets SALE_GOODS,
# SALE_STOCK, SALE_CID
sale_begin() {
	SALE_GOODS=$1
	SALE_STOCK=$2
	SALE_WORK=$(mktemp -d)
	psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
	psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
	is "$(psql_val "SELECT seckill_campaign_create('$SALE_GOODS', $SALE_STOCK) > 0")" t \
		"campaign of $SALE_STOCK created" || done_testing
	if [ "${3:-1}" -gt 1 ]; then
		is "$(psql_val "SELECT seckill_campaign_set('$SALE_GOODS', '{\"shards\": $3}')->>'shards'")" "$3" \
			"its stock split into $3 shards" || done_testing
	fi
	is "$(psql_val "SELECT seckill_preheat('$SALE_GOODS')")" "$SALE_STOCK" "preheated" || done_testing
	SALE_CID=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$SALE_GOODS'")
}

# sale_crowd seconds name [users [connections [rate]]]: 64 connections,
# 2,000 calls/s in all, users drawn from [1, users] (default 30,000) so that
# many ask twice; in the background, its pid in SALE_CROWD, its pgbench
# output in $SALE_WORK/name.out
sale_crowd() {
	cat >"$SALE_WORK/$2.sql" <<SQL
\set u random(1, ${3:-30000})
SELECT try_buy('user-' || :u, '$SALE_GOODS');
SQL
	pgbench -n -c "${4:-64}" -j 2 -R "${5:-2000}" -T "$1" -f "$SALE_WORK/$2.sql" \
		--log --log-prefix="$SALE_WORK/$2-txn" >"$SALE_WORK/$2.out" 2>&1 &
	SALE_CROWD=$!
}

# expired_campaign goods n [shards]: a preheated campaign of n orders (a
# multiple of 1,000), all unpaid for two hours past a timeout of one; prints
# what the preheat printed (0: nothing left to sell).  The order ids come from
# the worker's own sequence, a block of 1,000 per nextval.
expired_campaign() {
	psql -Xq -v ON_ERROR_STOP=1 <<SQL
SELECT seckill_campaign_create('$1', $2, payment_timeout => '1 hour') AS id \gset
SELECT seckill_campaign_set('$1', '{"shards": ${3:-1}}') \g /dev/null
INSERT INTO seckill.orders (id, campaign_id, user_id, qty, created_at)
SELECT b.id + k, :id, 'expired-' || (b.id + k), 1, now() - interval '2 hours'
FROM (SELECT nextval('seckill.order_ids') AS id FROM generate_series(1, $2 / 1000)) b, generate_series(0, 999) k;
UPDATE seckill.campaigns SET sold = $2 WHERE id = :id;
SQL
	psql_val "SELECT seckill_preheat('$1')"
}

sale_orders() {
	psql_val "SELECT count(*) FROM seckill.orders WHERE campaign_id = $SALE_CID AND status <> 'cancelled'"
}

sale_orders_at_least() {
	[ "$(sale_orders 2>/dev/null || echo 0)" -ge "$1" ]
}

# sale_slowest name: the slowest call of that crowd, in ms.  Under -R the
# logged latency counts from the call's scheduled start; the 7th field is how
# late it started (its client was still waiting on an earlier call).
sale_slowest() {
	cat "$SALE_WORK/$1"-txn.* 2>/dev/null |
		awk '$3 ~ /^[0-9]+$/ { d = $3 - $7; if (d > m) m = d } END { printf "%d", m / 1000 }'
}

# sale_invariants campaign_id stock [label]: the invariants of
# shared/DESIGN.md on a campaign sold out and the answers its callers logged
# in stampede_answers: no oversell, nobody twice, every ok a committed order
sale_invariants() {
	local active="o.campaign_id = $1 AND o.status <> 'cancelled'" label=${3:+$3: }
	is "$(psql_val "SELECT coalesce(sum(qty), 0) || '/' || (SELECT sold FROM seckill.campaigns WHERE id = $1)
		FROM seckill.orders o WHERE $active")" "$2/$2" "${label}no oversell: ordered = sold = stock"
	is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders o WHERE $active
		GROUP BY o.user_id HAVING count(*) > 1) d")" 0 "${label}no user bought twice"
	is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok'
		AND NOT EXISTS (SELECT 1 FROM seckill.orders o WHERE $active AND o.id = a.order_id
			AND o.user_id = a.user_id)")" 0 "${label}every ok answer has its committed order"
}

# sale_finish: reconcile, sell the rest, check the invariants, print the figures
sale_finish() {
	local reconciled
	reconciled=$(psql_val "SELECT * FROM seckill_reconcile('$SALE_GOODS')")
	ok "[ $? -eq 0 ]" "reconcile: $reconciled"
	is "$(psql_val "SELECT redis_stock = pg_stock AND in_flight = 0 FROM seckill_status('$SALE_GOODS')")" t \
		"after reconcile: Redis' stock = total - sold, journal empty"
	cat >"$SALE_WORK/rest.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT try_buy('fresh-' || :u, '$SALE_GOODS');
SQL
	for _ in $(seq 1 20); do
		[ "$(sale_orders)" -ge "$SALE_STOCK" ] && break
		pgbench -n -c 32 -j 2 -T 2 -f "$SALE_WORK/rest.sql" >/dev/null 2>&1
	done
	is "$(sale_orders)" "$SALE_STOCK" "fresh buyers sold the rest: exactly $SALE_STOCK orders"
	sale_invariants "$SALE_CID" "$SALE_STOCK"
	is "$(psql_val "SELECT count(*) FROM seckill.compensations c JOIN seckill.orders o ON o.id = c.request_id")" 0 \
		"no reservation is both an order and a compensation"
	is "$(psql_val "SELECT redis_stock || '/' || in_flight || '/' || redis_buyers FROM seckill_status('$SALE_GOODS')")" \
		"0/0/$SALE_STOCK" "Redis: stock 0, journal empty, one buyer per order"
	diag "requests $(psql_val "SELECT count(*) FROM stampede_answers"):" \
		"$(psql_val "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n
			FROM stampede_answers GROUP BY 1 ORDER BY 1) s")" \
		"orders $(sale_orders), compensations $(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $SALE_CID")"
	rm -rf "$SALE_WORK"
}
