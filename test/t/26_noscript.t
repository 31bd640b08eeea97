#!/usr/bin/env bash
# Redis forgets the scripts (SCRIPT FLUSH) again and again while 20,000
# expired orders of a campaign in 8 shards are released: each give-back
# pipeline holds a script call per shard, and a flush that lands between
# two of them leaves some run and the others answered NOSCRIPT.  Only those
# are sent again: no item goes back to Redis twice.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

log=$SECKILL_TMP/postgresql.log
flusher=
trap '[ -n "$flusher" ] && kill "$flusher" 2>/dev/null' EXIT
goods="noscript-$(date +%s)-$$"

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
is "$(expired_campaign "$goods" 20000 8)" 0 "a campaign in 8 shards, 20,000 orders unpaid past the timeout"

reloads=$(grep -c 'reloads its Lua scripts' "$log")
# a few hundred flushes a second, from one connection
redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" -r -1 -i 0.003 SCRIPT FLUSH >/dev/null 2>&1 &
flusher=$!
released=$(psql_val "SELECT released FROM seckill_release_expired() WHERE campaign_goods = '$goods'")
kill "$flusher"
wait "$flusher" 2>/dev/null
flusher=
is "$released" 20000 "all 20,000 released while Redis kept forgetting its scripts"
reloads=$(($(grep -c 'reloads its Lua scripts' "$log") - reloads))
ok "[ $reloads -gt 0 ]" "the worker loaded its scripts again $reloads times"

# A give-back refused again after the reload (the scripts flushed once more)
# is logged with its items, and reconcile puts them back; one sent twice
# would leave Redis over.  A pipeline cut short after some of its shards
# ran logs all of them (which ran is not known): Redis may be short by less.
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
failed=$(sed -n "s/.*could not give \([0-9]*\) item(s) of campaign $cid back to Redis.*/\1/p" "$log" |
	awk '{ s += $1 } END { print s + 0 }')
read -r before expected <<<"$(psql_val "SELECT redis_stock_before || ' ' || expected_stock FROM seckill_reconcile('$goods')")"
ok "[ $before -le $expected ] && [ $before -ge $((expected - failed)) ]" \
	"no item went back twice: Redis had $before of $expected, short by at most the $failed logged as not given back"
is "$(psql_val "SELECT redis_stock || '/' || pg_stock FROM seckill_status('$goods')")" "20000/20000" \
	"after reconcile both stores agree"
psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
