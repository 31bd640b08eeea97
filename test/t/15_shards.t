#!/usr/bin/env bash
# A stampede on a campaign whose stock is split into 8 shards (8 Redis hash
# tags): 1,000 items, 5,000 buyers on 200 connections, every buyer living in
# shard 0 or 1.  The other six shards must lend their stock: exactly 1,000
# orders come out, nobody twice, every shard sold to the last item, and the
# worker's figures show what the lending cost.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

stock=1000
shards=8
goods=shards-$(date +%s)-$$
work=$(mktemp -d)
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
is "$(psql_val "SELECT seckill_campaign_create('$goods', $stock) > 0")" t "campaign created" || done_testing
is "$(psql_val "SELECT seckill_campaign_set('$goods', '{\"shards\": $shards}')->>'shards'")" $shards \
	"split into $shards shards" || done_testing
is "$(psql_val "SELECT seckill_preheat('$goods')")" $stock "preheated" || done_testing
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
active="o.campaign_id = $cid AND o.status <> 'cancelled'"

# each shard holds its share of the stock under its own hash tag
prefix=$(psql_val "SHOW seckill.redis_prefix")
shard_stock() {
	seckill_redis_cli HGET "$prefix:{c:$cid:$1}:meta" stock
}
shares=$(for s in $(seq 0 $((shards - 1))); do shard_stock "$s"; done | paste -sd' ')
is "$shares" "125 125 125 125 125 125 125 125" "the stock is split evenly: $shares"

# 5,000 users whose home shard is 0 or 1 (the worker hashes as hashtext does)
psql_val "DROP TABLE IF EXISTS shard_users; CREATE TABLE shard_users AS
	SELECT row_number() OVER () AS n, u FROM (SELECT 'su-' || i AS u FROM generate_series(1, 50000) i
		WHERE (hashtext('su-' || i)::bigint & 4294967295) % $shards IN (0, 1) ORDER BY i LIMIT 5000) x;
	CREATE UNIQUE INDEX ON shard_users (n)" >/dev/null
cat >"$work/crowd.sql" <<SQL
\set n random(1, 5000)
SELECT try_buy(u, '$goods') FROM shard_users WHERE n = :n;
SQL
before=$(psql_val "SELECT rounds || ' ' || purchases || ' ' || redis_round_trips FROM seckill.worker_counters()")
# 6,000 calls by 5,000 users: more than enough distinct buyers for the stock,
# whatever the machine's speed
figures=$(seckill_pgbench "$work/crowd" 200 "-t 30" "$work/crowd.sql")
ok "[ $? -eq 0 ]" "pgbench: 200 connections, 30 calls each"
read -r tps _ p50 p99 <<<"$figures"
after=$(psql_val "SELECT rounds || ' ' || purchases || ' ' || redis_round_trips FROM seckill.worker_counters()")

is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'ok'")" $stock "exactly $stock ok answers"
is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE $active")" $stock "exactly $stock orders: the last items were sold"
is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders o WHERE $active GROUP BY user_id
	HAVING count(*) > 1) d")" 0 "nobody bought twice"
is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok' AND NOT EXISTS
	(SELECT 1 FROM seckill.orders o WHERE $active AND o.id = a.order_id AND o.user_id = a.user_id)")" 0 \
	"every ok answer has its order"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'error'")" 0 "no errors"
is "$(psql_val "SELECT sold || '/' || redis_stock || '/' || redis_buyers || '/' || in_flight || '/' || sold_out_cached
	FROM seckill_status('$goods')")" "$stock/0/$stock/0/true" \
	"sold = stock; Redis: no stock, a buyer per order, journals empty; backends know it is sold out"
shares=$(for s in $(seq 0 $((shards - 1))); do shard_stock "$s"; done | paste -sd' ')
is "$shares" "0 0 0 0 0 0 0 0" "every shard sold its last item, lent to buyers of shards 0 and 1"
is "$(psql_val "SELECT repaired FROM seckill_reconcile('$goods')")" f "reconcile finds nothing to repair"

read -r r0 p0 t0 <<<"$before"
read -r r1 p1 t1 <<<"$after"
diag "8 shards, buyers in 2: $tps calls/s, p50 $p50 ms, p99 $p99 ms;" \
	"$((p1 - p0)) purchases in $((r1 - r0)) rounds, $(((t1 - t0) * 1000 / (p1 - p0 > 0 ? p1 - p0 : 1))) Redis round trips per 1,000 purchases" \
	"$(psql_val "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n FROM stampede_answers GROUP BY 1 ORDER BY 1) s")"

done_testing
