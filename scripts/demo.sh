#!/usr/bin/env bash
# The flash sale, as root: bash scripts/demo.sh
# 100 items, 5,000 eager buyers on 200 connections for 10 seconds; then what
# happened: answers, orders, oversell, double purchases, throughput and
# latency, as the clients and as seckill.stats saw them.
# --installed: use the seckill this machine has installed, as it is (the
# test suite's, which built it with its crash points), instead of
# installing the packages and building and installing this tree.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

stock=100
users=5000
clients=200
seconds=${SECKILL_DEMO_SECONDS:-10}
goods=demo-phone-$(date +%s)

case ${1:-} in
--installed) ;;
'') seckill_install_deps && seckill_build_install ;;
*) echo "usage: $0 [--installed]" >&2; exit 2 ;;
esac
seckill_start_servers

psql -Xq -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION seckill' \
	-f "$SECKILL_ROOT/test/helpers.sql"
psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT seckill_campaign_create('$goods', $stock)" \
	-c "SELECT seckill_preheat('$goods')" >/dev/null

cat >"$SECKILL_TMP/buy.sql" <<SQL
\set u random(1, $users)
SELECT try_buy('user-' || :u, '$goods');
SQL
echo "Selling $stock x $goods to $users users on $clients connections for ${seconds}s..."
# The answers log is the demo's own bookkeeping: it need not wait for a disk
# flush.  The worker's commits of the orders stay durable.
figures=$(PGOPTIONS='-c synchronous_commit=off' seckill_pgbench "$SECKILL_TMP/bench" $clients "$seconds" "$SECKILL_TMP/buy.sql") ||
	{ cat "$SECKILL_TMP/bench/pgbench.out" >&2; exit 1; }
read -r tps avg p50 p99 <<<"$figures"

echo
psql -XAtq -v ON_ERROR_STOP=1 <<SQL
SELECT format('%-22s %s', 'attempts', count(*)) FROM stampede_answers;
SELECT format('  %-20s %s', status, count(*)) FROM stampede_answers GROUP BY status ORDER BY status;
WITH o AS (
	SELECT o.* FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = '$goods' AND o.status IN ('reserved', 'paid'))
SELECT format('%-22s %s', 'orders in PostgreSQL', count(*))
	|| format(E'\n%-22s %s', 'oversold', greatest(coalesce(sum(qty), 0) - $stock, 0))
	|| format(E'\n%-22s %s', 'double purchases', count(*) - count(DISTINCT user_id))
FROM o;
SQL
printf '%-22s %s\n' 'throughput' "$tps calls/s" 'latency average' "$avg ms" \
	'latency p50' "$p50 ms" 'latency p99' "$p99 ms"
# the server's own view of the same sale: seckill.stats
psql -XAtq -v ON_ERROR_STOP=1 <<SQL
SELECT format('%-22s p50 %s µs, p99 %s µs (seckill_buy itself, mostly sold-out answers; seckill.stats)',
		'server time', round(call_p50_ms * 1000), round(call_p99_ms * 1000))
	|| format(E'\n%-22s %s a round, %s Redis round trips and %s commits',
		'worker', round(purchases_per_round::numeric, 1), redis_round_trips, commits)
FROM seckill.stats WHERE campaign_id IS NULL;
SQL
echo
psql -X -x -v ON_ERROR_STOP=1 -c "SELECT * FROM seckill_status('$goods')"
