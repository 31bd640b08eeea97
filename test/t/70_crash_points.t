#!/usr/bin/env bash
# The worker stops on purpose (seckill.crash_point) at each boundary of a
# round's stages (worker/round.c): right after taking its purchases, right
# after Redis reserved, right after the commit, right before waking the
# callers, right after committing a round while the next round's
# reservations are in Redis (the two stages overlapped), and right after
# reading the next round's replies, before what PostgreSQL refused of the
# committed round goes back.  The stops inside the commit stage can
# also fall while a next round is out: those callers' reservations are in
# Redis, uncommitted.  Each time the new worker must account for every
# reservation: the callers
# that got an error learn their order's real fate from seckill_order(), the
# journal is empty, and Redis and PostgreSQL agree.  Then again with a
# campaign of 4 stock shards whose buyers all live in one of them, so that
# the others lend their stock while the worker stops.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

log=$SECKILL_TMP/postgresql.log
count() { grep -c "$1" "$log" || true; }
worker_up() { [ -n "$(seckill_worker_pid 2>/dev/null)" ]; }

# crash_sale stock shards: the stops on one campaign, then sale_finish
crash_sale() {
	local goods cid tag
	tag=$([ "$2" -gt 1 ] && echo "$2 shards, " || true)
	sale_begin "crash-$2-$(date +%s)-$$" "$1" "$2"
	goods=$SALE_GOODS
	cid=$SALE_CID
	# with shards, every buyer lives in shard 0: it runs empty at once and
	# the other shards lend their stock through every stop
	psql_val "DROP TABLE IF EXISTS crash_users; CREATE TABLE crash_users AS
		SELECT p, row_number() OVER (PARTITION BY p ORDER BY i) - 1 AS n, p || '-' || i AS u
		FROM unnest(ARRAY['after_gather', 'after_reserve', 'after_commit', 'before_wake', 'overlapped', 'after_answer']) p, generate_series(1, 2000) i
		WHERE (hashtext(p || '-' || i)::bigint & 4294967295) % $2 = 0" >/dev/null
	for point in after_gather after_reserve after_commit before_wake overlapped after_answer; do
		seckill_configure "SET seckill.crash_point = '$point'"
		ok "[ $? -eq 0 ]" "$tag$point: set"
		crashes=$(count "stops at crash point \"$point\"")
		# 64 buyers at once (pgbench connects them all before the first call),
		# new buyers again until the worker stops: the stop overlapped needs
		# two rounds in flight, which one burst on a busy machine may not make
		stopped="[ \$(count 'stops at crash point \"$point\"') -gt $crashes ]"
		for batch in 0 1 2 3 4 5; do
			echo "SELECT try_buy(u, '$goods') FROM crash_users WHERE p = '$point' AND n = :client_id + 64 * $batch;" \
				>"$SALE_WORK/crash.sql"
			pgbench -n -c 64 -j 2 -t 1 -f "$SALE_WORK/crash.sql" >/dev/null 2>&1 &
			crowd=$!
			seckill_wait_for "$stopped || ! seckill_running $crowd" 15
			eval "$stopped" && break
			wait "$crowd"
		done
		ok "$stopped" "$tag$point: the worker stopped there (burst $((batch + 1)))"
		psql -XAtq -c "ALTER SYSTEM RESET seckill.crash_point" -c "SELECT pg_reload_conf()" >/dev/null
		wait "$crowd"
		seckill_wait_for worker_up 15
		ok "[ $? -eq 0 ]" "$tag$point: a new worker runs"

		failed=$(psql_val "SELECT count(*) FROM stampede_answers WHERE user_id LIKE '$point-%' AND status = 'error'")
		ok "[ $failed -gt 0 ]" "$tag$point: $failed caller(s) got an error"
		codes=$(psql_val "SELECT string_agg(code || ' ' || n, ', ') FROM (SELECT split_part(err, ' ', 1) code, count(*) n
			FROM stampede_answers WHERE user_id LIKE '$point-%' AND status = 'error' GROUP BY 1 ORDER BY 1) e")
		ok "[[ \"\$codes\" == SK003* && \"\$codes\" != *,* ]]" "$tag$point: each error is SK003, the worker failed while serving it ($codes)"
		# the fate of each failed call: reserved where its order was committed,
		# none where Redis' reservation was given back
		fates=$(psql_val "SELECT string_agg(o.status || ' ' || n, ', ') FROM (SELECT o.status, count(*) n
			FROM stampede_answers a, LATERAL seckill_order(a.user_id, '$goods') o
			WHERE a.user_id LIKE '$point-%' AND a.status = 'error' GROUP BY 1 ORDER BY 1) o")
		is "$(psql_val "SELECT count(*) FROM stampede_answers a, LATERAL seckill_order(a.user_id, '$goods') o
			WHERE a.user_id LIKE '$point-%' AND a.status = 'error' AND o.status <> CASE WHEN EXISTS (SELECT 1
			FROM seckill.orders r WHERE r.campaign_id = $cid AND r.user_id = a.user_id) THEN 'reserved' ELSE 'none' END")" 0 \
			"$tag$point: each of them learns from seckill_order() the fate PostgreSQL holds ($fates)"
		case $point in
		# (after_answer: those waiting were the next round's, staged, not committed)
		after_gather | after_reserve | after_answer) ok "[[ \"$fates\" != *reserved* ]]" "$tag$point: none of them has an order" ;;
		*) ok "[[ \"$fates\" == *reserved* ]]" "$tag$point: the orders committed before the stop stand" ;;
		esac
		is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.user_id LIKE '$point-%' AND a.status = 'ok'
			AND NOT EXISTS (SELECT 1 FROM seckill.orders o WHERE o.id = a.order_id)")" 0 \
			"$tag$point: every ok answer has its order"
		is "$(psql_val "SELECT in_flight || ' ' || (redis_stock = pg_stock) FROM seckill_status('$goods')")" "0 true" \
			"$tag$point: the journal is empty and Redis' stock = total - sold"
	done

	is "$(psql_val "SELECT count(*) FROM seckill.compensations c JOIN seckill.orders o ON o.id = c.request_id")" 0 \
		"no reservation is both an order and a compensation"
	is "$(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $cid AND user_id LIKE 'after_gather-%'")" 0 \
		"nothing was reserved for the purchases taken before the stop after_gather: nothing was given back"
	given_back=$(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $cid AND user_id LIKE 'after_reserve-%'")
	ok "[ $given_back -gt 0 ]" "the reservations made before the stop after_reserve were given back ($given_back, logged)"
	# (with shards, the next round's buyers find their home shard empty: they
	# hold only their place there, dropped without a compensation)
	if [ "$2" -eq 1 ]; then
		given_back=$(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $cid AND user_id LIKE 'overlapped-%'")
		ok "[ $given_back -gt 0 ]" "the next round's reservations, out at the stop overlapped, were given back ($given_back, logged)"
		given_back=$(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $cid AND user_id LIKE 'after_answer-%'")
		ok "[ $given_back -gt 0 ]" "the next round's reservations, staged at the stop after_answer, were given back ($given_back, logged)"
	fi
	sale_finish
}

crash_sale 2000 1
# (the quick check leaves out the variant with stock shards)
[ "${SECKILL_QUICK:-0}" = 1 ] || crash_sale 400 4
done_testing
