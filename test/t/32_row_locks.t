#!/usr/bin/env bash
# Nobody else's work stops a sale (I6): while a 16-client sale runs on one
# campaign, an application holds an order's row in an open transaction and
# another session cancels that order; a prepared transaction holds another;
# a DBA holds a campaign's row; seckill_release_expired() cancels 200,000
# expired orders of a third campaign.  Each disturbance gets its own clear
# answer at once, and the sale goes on: calls/s and p99 during each are
# printed beside the sale alone.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

work=$(mktemp -d)
cleanup() {
	[ -n "$SESSION_PID" ] && kill "$SESSION_PID" 2>/dev/null
	psql -XAtq -c "ROLLBACK PREPARED 'seckill-test-held'" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
tag="$(date +%s)-$$"

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
sale="sale-$tag"
other="other-$tag"
psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT seckill_campaign_create('$sale', 10000000)" \
	-c "SELECT seckill_campaign_create('$other', 100)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$sale') || '/' || seckill_preheat('$other')")" 10000000/100 \
	"a campaign on sale, and another one"

cat >"$work/buy.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT status FROM seckill_buy('u-' || :u, '$sale');
SQL

# load name seconds: the 16-client sale, in the background; its pid in LOAD
load() {
	seckill_pgbench "$work/$1" 16 "$2" "$work/buy.sql" >"$work/$1.figures" &
	LOAD=$!
}
# figures name: "calls/s p99" of a finished load
figures() {
	awk '{ print $1, $4 }' "$work/$1.figures"
}
report() {
	local alone during
	read -r alone _ < <(figures alone)
	read -r during p99 < <(figures "$1")
	diag "$2: $during calls/s ($(awk -v a="$alone" -v d="$during" 'BEGIN { printf "%.2f", d / a }') of the sale alone), p99 $p99 ms"
	# A stalled worker answers nothing for seconds, and every call then
	# takes past the request timeout: no call may be that slow.
	ok "[ \$(cat $work/$1/txn.* | awk '\$3 > m { m = \$3 } END { print int(m / 1000) }') -lt 1000 ]" \
		"$2: no purchase of the sale waited a second"
}

load alone 4
wait "$LOAD"
ok "grep -q 'number of failed transactions: 0' '$work/alone/pgbench.out'" \
	"the sale alone: $(figures alone | awk '{ print $1 " calls/s, p99 " $2 " ms" }')"

# session_calls n interval SQL: one session, as an application's pooled
# connection, runs the SQL n times (%i in it: 1 to n), interval seconds
# apart; each result or error (verbose), then its time as "Time: ms", goes
# to the output
session_calls() {
	local i
	{
		echo '\timing on'
		for i in $(seq 1 "$1"); do
			echo "${3//%i/$i}"
			echo "SELECT pg_catalog.pg_sleep($2) \\g /dev/null"
		done
	} | psql -XAtq -v VERBOSITY=verbose 2>&1 | awk '
		# the pauses are timed too: keep the time after each call only
		/^Time: / { if (!pause) print; pause = !pause; next }
		{ print }'
}
# slowest_call output: the longest "Time:" of session_calls, in whole ms
slowest_call() {
	awk '/^Time: / { if ($2 > m) m = $2 } END { printf "%d", m }' "$1"
}

# 1. An application pays an order in an open transaction; another session
#    cancels it, ten times a second.
order=$(psql_val "SELECT order_id FROM seckill_buy('locker', '$other')")
session_hold "BEGIN; SELECT seckill_pay($order);"
locker=$(sed -n 's/^pid=//p' "$SESSION_OUT")
load row_lock 4
session_calls 30 0.1 "SELECT seckill_cancel($order);" >"$work/cancels"
wait "$LOAD"
cancels=$(grep -c '^Time: ' "$work/cancels")
refused=$(grep -c "55P03: order $order is locked by process $locker" "$work/cancels")
slowest=$(slowest_call "$work/cancels")
is "$refused/$cancels" "30/30" "each cancel of the order held open fails with 55P03 naming process $locker"
ok "[ $slowest -lt 1000 ]" "and at once: the slowest refusal took $slowest ms"
report row_lock "an order's row held open, cancelled $cancels times"
session_end "COMMIT;"
is "$(psql_val "SELECT status FROM seckill.orders WHERE id = $order")" paid \
	"the application's transaction committed its payment"
err=$(psql -XAtq -c "SELECT seckill_cancel($order)" 2>&1)
ok "[[ \"\$err\" == *'is paid'* ]]" "the cancel afterwards sees the payment: $err"

# 2. A prepared transaction holds an order's row.
order=$(psql_val "SELECT order_id FROM seckill_buy('prepared', '$other')")
psql -XAtq -v ON_ERROR_STOP=1 -c "BEGIN" -c "SELECT seckill_pay($order)" \
	-c "PREPARE TRANSACTION 'seckill-test-held'" >/dev/null
err=$(psql -XAtq -c "SELECT seckill_cancel($order)" 2>&1)
ok "[[ \"\$err\" == *'locked by prepared transaction \"seckill-test-held\"'* ]]" \
	"a row held by a prepared transaction: $err"
is "$(psql_val "SELECT status FROM seckill_buy('after-prepared', '$other')")" ok \
	"purchases go on meanwhile"
psql_val "ROLLBACK PREPARED 'seckill-test-held'" >/dev/null
is "$(psql_val "SELECT seckill_cancel($order)")" cancelled "rolled back, the order can be cancelled"

# 3. A DBA holds the other campaign's row: its purchases are answered busy
#    at once, and the sale goes on.
session_hold "BEGIN; SELECT 1 FROM seckill.campaigns WHERE goods = '$other' FOR UPDATE;"
load campaign_lock 4
session_calls 20 0.1 "SELECT status FROM seckill_buy('held-%i', '$other');" >"$work/held"
wait "$LOAD"
answers=$(grep -v '^Time: ' "$work/held" | sort | uniq -c | xargs)
is "$answers" "20 busy" "20 purchases of the campaign whose row is held: busy, the slowest in $(slowest_call "$work/held") ms"
report campaign_lock "a campaign's row held by a DBA"
session_end "COMMIT;"
is "$(psql_val "SELECT status FROM seckill_buy('held-1', '$other')")" ok "released, the campaign sells again"
is "$(psql_val "SELECT count(*) FROM seckill.compensations c JOIN seckill.campaigns k ON k.id = c.campaign_id
	WHERE k.goods = '$other' AND c.reason LIKE '%locked by another transaction%'")" 20 \
	"each busy reservation was given back and logged"

# 4. 200,000 expired unpaid orders, released while the sale runs.
expired="expired-$tag"
is "$(expired_campaign "$expired" 200000)" 0 "a campaign of 200,000 orders, all unpaid past the timeout"
# and one whose payment timeout means never: now() less it is no timestamp
forever="forever-$tag"
psql_val "SELECT seckill_campaign_create('$forever', 10, payment_timeout => '9999 years')" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$forever') || ' ' || (seckill_buy('patient', '$forever')).status")" "10 ok" \
	"a campaign whose payment timeout is 9,999 years, with an unpaid order"
load release 6
start=$(seckill_now_ms)
released=$(psql_val "SELECT released || '/' || released_qty FROM seckill_release_expired() WHERE campaign_goods = '$expired'")
took=$(($(seckill_now_ms) - start))
wait "$LOAD"
is "$released" "200000/200000" "seckill_release_expired() released all 200,000 in $took ms"
report release "a release of 200,000 expired orders"
is "$(psql_val "SELECT pg_stock || '/' || redis_stock || '/' || redis_buyers FROM seckill_status('$expired')")" \
	"200000/200000/0" "their stock is back on sale in both stores, their buyers gone from Redis"
is "$(psql_val "SELECT o.status FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = '$forever'")" reserved "the order of 9,999 years' timeout is still reserved"

for goods in "$sale" "$other" "$expired" "$forever"; do
	psql_val "SELECT seckill_close('$goods')" >/dev/null
done
done_testing
