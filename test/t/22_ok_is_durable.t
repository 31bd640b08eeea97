#!/usr/bin/env bash
# "ok" means durable, by the clients' own record.  The worker's commit of
# each round waits for its WAL flush before any caller is told.  Sixteen
# psql sessions buy and write every answer to files
# outside PostgreSQL; mid-sale the worker is killed with SIGKILL (the
# postmaster restarts the cluster and drops the WAL it had not written),
# then, in a second crowd, PostgreSQL stops at once.  After each crash every
# ok a client got must have its committed order; at the end the sale's
# invariants hold: nothing oversold or lost, Redis agrees with PostgreSQL.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

sale_begin "durable-$(date +%s)-$$" 30000
worker_up() { seckill_pg_ready && [ -n "$(seckill_worker_pid 2>/dev/null)" ]; }
psql_val "DROP TABLE IF EXISTS told; CREATE TABLE told (crowd text, status text, order_id bigint, user_id text)" >/dev/null

# crowd name: 16 sessions of 1,500 purchases each, every tenth by a buyer of
# the session asking again, in the background (pids in CROWD_PIDS), each
# answer a line "status|order_id|user" in its own file
crowd() {
	CROWD_PIDS=()
	for c in $(seq 1 16); do
		awk -v name="$1" -v c="$c" -v goods="$SALE_GOODS" -v q="'" 'BEGIN {
			for (i = 1; i <= 1500; i++)
				printf "SELECT status, order_id, u FROM (SELECT %s%s-%d-%d%s::text AS u) x, seckill_buy(u, %s%s%s);\n",
					q, name, c, i % 10 == 0 ? i - 5 : i, q, q, goods, q
		}' >"$SALE_WORK/$1-$c.sql"
		psql -XAtq -f "$SALE_WORK/$1-$c.sql" >"$SALE_WORK/$1-$c.out" 2>"$SALE_WORK/$1-$c.err" &
		CROWD_PIDS+=($!)
	done
}

# told name: the orders the crowd's clients were told of (ok, and duplicate
# with the order held), and how many of each have no committed order:
# "oks lost duplicates lost"
told() {
	cat "$SALE_WORK/$1"-*.out | awk -F'|' -v name="$1" '($1 == "ok" || $1 == "duplicate") && $2 != "" {
		print name "|" $1 "|" $2 "|" $3 }' >"$SALE_WORK/$1.told"
	psql -Xq -v ON_ERROR_STOP=1 -c "\\copy told FROM '$SALE_WORK/$1.told' (FORMAT csv, DELIMITER '|')"
	psql_val "SELECT string_agg(n || ' ' || lost, ' ' ORDER BY status DESC) FROM (
		SELECT status, count(*) n, count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM seckill.orders o
			WHERE o.id = t.order_id AND o.user_id = t.user_id AND o.campaign_id = $SALE_CID
			AND o.status <> 'cancelled')) lost
		FROM told t WHERE crowd = '$1' GROUP BY status) s"
}

# crash name how: a crowd, the crash once 3,000 more orders are in, the
# cluster back, then what its clients were told
crash() {
	local before started figures
	crowd "$1"
	before=$(sale_orders)
	seckill_wait_for "sale_orders_at_least $((before + 3000))" 30
	ok "[ $? -eq 0 ]" "$1: the sale is under way"
	started=$(seckill_now_ms)
	case $2 in
	worker) kill -9 "$(seckill_worker_pid)" ;;
	immediate) seckill_pg_ctl -m immediate stop >/dev/null && seckill_pg_ctl -w start >/dev/null ;;
	esac
	seckill_wait_for worker_up 60
	ok "[ $? -eq 0 ]" "$1: cluster and worker back"
	diag "$1: back in $(($(seckill_now_ms) - started)) ms"
	wait "${CROWD_PIDS[@]}" # their connections died with the cluster
	read -r oks lost duplicates lost_duplicates <<<"$(told "$1")"
	ok "[ ${oks:-0} -ge 2000 ]" "$1: the clients were told ok ${oks:-0} times"
	is "${lost:-?}" 0 "$1: every ok a client was told has its committed order"
	# (their own ok came first, flushed: this checks the look-up, not its flush)
	ok "[ ${duplicates:-0} -gt 0 ]" "$1: buyers asking again were told duplicate ${duplicates:-0} times, with their order"
	is "${lost_duplicates:-?}" 0 "$1: every order a duplicate answer named is committed"
	diag "$1: answers $(cat "$SALE_WORK/$1"-*.out | cut -d'|' -f1 | sort | uniq -c | tr -s ' \n' ' ')"
}

crash kill-worker worker
crash stop-immediate immediate

# the journal settled by the replay, the rest sold to fresh buyers
seckill_wait_for "[ \"\$(agrees)\" = t ]" 30
ok "[ $? -eq 0 ]" "after the replays Redis agrees with PostgreSQL: stock = total - sold, journal empty"
diag "$(figures)"
sale_finish
done_testing
