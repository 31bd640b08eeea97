#!/usr/bin/env bash
# seckill_order() tells the real fate of a purchase whatever the caller's
# snapshot: in the same statement as the purchase, and inside a repeatable
# read or serializable transaction whose snapshot predates the order.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

goods="truth-$(date +%s)-$$"
work=$(mktemp -d)
holder_pid=
trap '[ -n "$holder_pid" ] && kill "$holder_pid" 2>/dev/null; rm -rf "$work"' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "SELECT seckill_campaign_create('$goods', 100000)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$goods')")" 100000 "a campaign on sale"

is "$(psql_val "SELECT (seckill_buy('same', '$goods')).status || ' ' || (seckill_order('same', '$goods')).status")" \
	"ok reserved" "in the same statement as the purchase: reserved"

# isolation level: a transaction that took its snapshot, then a purchase elsewhere
for level in 'repeatable read' serializable; do
	user="rr-${level// /-}"
	rm -f "$work/in" "$work/out"
	mkfifo "$work/in"
	psql -XAtq <"$work/in" >"$work/out" 2>&1 &
	holder_pid=$!
	exec 7>"$work/in"
	echo "BEGIN ISOLATION LEVEL $level; SELECT count(*) FROM seckill.orders; SELECT 'ready';" >&7
	seckill_wait_for "grep -q '^ready' '$work/out'" 10
	bought=$(psql_val "SELECT status FROM seckill_buy('$user', '$goods')")
	echo "SELECT 'fate=' || status FROM seckill_order('$user', '$goods'); COMMIT;" >&7
	exec 7>&-
	wait "$holder_pid"
	holder_pid=
	is "$bought/$(sed -n 's/^fate=//p' "$work/out")" "ok/reserved" \
		"$level, snapshot taken before the purchase: seckill_order says reserved"
done

psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
