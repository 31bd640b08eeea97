#!/usr/bin/env bash
# seckill_order() tells the real fate of a purchase whatever the caller's
# snapshot: in the same statement as the purchase, and inside a repeatable
# read or serializable transaction whose snapshot predates the order.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

goods="truth-$(date +%s)-$$"
trap '[ -n "$SESSION_PID" ] && kill "$SESSION_PID" 2>/dev/null' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "SELECT seckill_campaign_create('$goods', 100000)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$goods')")" 100000 "a campaign on sale"

is "$(psql_val "SELECT (seckill_buy('same', '$goods')).status || ' ' || (seckill_order('same', '$goods')).status")" \
	"ok reserved" "in the same statement as the purchase: reserved"

# isolation level: a transaction that took its snapshot, then a purchase elsewhere
for level in 'repeatable read' serializable; do
	user="rr-${level// /-}"
	session_hold "BEGIN ISOLATION LEVEL $level; SELECT count(*) FROM seckill.orders;"
	bought=$(psql_val "SELECT status FROM seckill_buy('$user', '$goods')")
	session_end "SELECT 'fate=' || status FROM seckill_order('$user', '$goods'); COMMIT;"
	is "$bought/$(sed -n 's/^fate=//p' "$SESSION_OUT")" "ok/reserved" \
		"$level, snapshot taken before the purchase: seckill_order says reserved"
done

psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
