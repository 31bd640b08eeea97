#!/usr/bin/env bash
# PostgreSQL failover under a sale, on a primary and standby of our own (made
# with pg_basebackup -R) that share the suite's Redis under their own key
# prefix; the standby replicates through a TCP relay (socat) that is frozen
# with SIGSTOP to stall the link.  A client outside PostgreSQL logs every
# answer, so that acknowledged orders lost by the failover can be counted.
#  1. async: the link stalls 2 s, the primary stops at once, the standby is
#     promoted and sells on: no acked order id goes to another user, Redis
#     agrees with the new primary without a reconcile, the lost reservations
#     are logged as compensations, the invariants hold, a fresh sale works;
#  2. the old primary restarted on its own next to the same Redis refuses to
#     sell (55P03, pg_rewind in the hint) and leaves Redis alone; it
#     remembers the fence, and restarted once more after Redis lost every
#     key of the prefix, it still refuses and writes no epoch; the new
#     primary, which recorded its timeline and has no standby, sells again
#     unclaimed;
#  3. a standby says at once that it is in recovery;
#  4. sync: a new standby with synchronous_standby_names = '*', the same
#     crash: no acked order is lost; the cost in throughput is printed.  A
#     waiting line fills meanwhile: every place given before the crash is
#     on the promoted standby with its ticket, the line admits on from where
#     it was, no ticket goes to two buyers, and later joins queue behind.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/pg_pair.sh
. "$(dirname "$0")/pg_pair.sh"

# Below 32768, the start of the kernel's range of ephemeral ports: an outgoing
# connection never takes one of them first.  Derived from the suite's port, so
# that runs on other ports do not collide.
base=${SECKILL_FAILOVER_PORT:-$SECKILL_OWN_PORT}
primary_port=$base
standby_port=$((base + 1))
relay_port=$((base + 2))
sync_port=$((base + 3))
prefix="failover$$"
work=$(mktemp -d -p "$SECKILL_TMP" failover.XXXXXX)
chown postgres: "$work"
relay=
line_client=

# socat forks a process per connection: signal them all
relay_signal() { kill "-$1" "$relay" $(pgrep -P "$relay") 2>/dev/null; }
cleanup() {
	[ -n "$relay" ] && relay_signal KILL
	[ -n "$line_client" ] && kill "$line_client" 2>/dev/null
	pair_cleanup primary standby sync
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

lsn_diff() { val "$primary_port" "SELECT pg_wal_lsn_diff('$1', '$2')::bigint"; }
finish() { done_testing_with_logs 25 "$work"/*.log; }

ports_free SECKILL_FAILOVER_PORT "$primary_port" "$standby_port" "$relay_port" "$sync_port"

# answers/s of a client over a window of its steady load
throughput() {
	local n0 t0 n1
	n0=$(wc -l <"$1")
	t0=$(seckill_now_ms)
	sleep 2 # the window
	n1=$(wc -l <"$1")
	echo $(((n1 - n0) * 1000 / ($(seckill_now_ms) - t0)))
}

# The primary, and its standby behind the relay
primary primary "$primary_port"
ok "[ $? -eq 0 ]" "a primary of our own on port $primary_port, Redis prefix $prefix" || finish
val "$primary_port" "CREATE EXTENSION seckill" >/dev/null

socat TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$primary_port" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
standby standby "$relay_port" "$standby_port"
ok "[ $? -eq 0 ]" "its standby on port $standby_port, replicating through a relay on port $relay_port" ||
	{ diag "$(cat "$work/standby-basebackup.out")"; finish; }
seckill_wait_for "streaming $primary_port 1" 30
ok "[ $? -eq 0 ]" "the standby streams" || finish

goods="failover-async-$$"
val "$primary_port" "SELECT seckill_campaign_create('$goods', 1000000)" >/dev/null
is "$(val "$primary_port" "SELECT seckill_preheat('$goods')")" 1000000 "a campaign of 1,000,000, preheated" || finish
cid=$(val "$primary_port" "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
seckill_wait_for "[ \"\$(val $standby_port \"SELECT state FROM seckill.campaigns WHERE id = $cid\")\" = preheated ]" 30

# 3. On a standby, an answer at once that says why
started=$(seckill_now_ms)
standby_answer=$(at "$standby_port" -v VERBOSITY=verbose -c "SELECT * FROM seckill_buy('standby-1', '$goods')" 2>&1)
took=$(($(seckill_now_ms) - started))
diag "on the standby (${took} ms): $standby_answer"
grep -qiE 'recovery|standby' <<<"$standby_answer"
ok "[ $? -eq 0 ]" \
	"on a standby, seckill_buy says the server is in recovery (a standby)"
ok "[ $took -lt 1000 ]" "and says it at once ($took ms)"

# 1. Async: the link stalls, the primary dies, the standby is promoted
sale async "$goods" 24 "$(dsn "$primary_port")" "$(dsn "$standby_port")"
seckill_wait_for "[ \$(oks '$work/async.answers') -ge 2000 ]" 30
ok "[ $? -eq 0 ]" "async: the sale is under way" || finish
async_rate=$(throughput "$work/async.answers")

relay_signal STOP
lag() {
	lsn_diff "$(val "$primary_port" "SELECT pg_current_wal_lsn()")" \
		"$(val "$standby_port" "SELECT pg_last_wal_replay_lsn()")"
}
seckill_wait_for "[ \$(lag) -ge 1048576 ]" 15
ok "[ $? -eq 0 ]" "async: the relay stalled, the standby falls behind"
stall_replay=$(val "$standby_port" "SELECT pg_last_wal_replay_lsn()")
stall_primary=$(val "$primary_port" "SELECT pg_current_wal_lsn()")
# A sequence logs 32 values ahead, so a standby knows 32 blocks of order ids
# past the last it replayed; 40 more blocks on the primary alone put the ids
# the worker answers with from now on beyond what the standby's sequence knows.
val "$primary_port" "SELECT count(nextval('seckill.order_ids')) FROM generate_series(1, 40)" >/dev/null
sleep 2 # the stall
end_replay=$(val "$standby_port" "SELECT pg_last_wal_replay_lsn()")
end_primary=$(val "$primary_port" "SELECT pg_current_wal_lsn()")
ok "[ '$end_replay' = '$stall_replay' ] && [ \$(lsn_diff '$end_primary' '$stall_primary') -gt 0 ]" \
	"async: during the 2 s stall the standby replays nothing while the primary writes on"
diag "async: at the crash the standby is $(lsn_diff "$end_primary" "$end_replay") bytes of WAL behind"

pgctl primary -m immediate stop >/dev/null
ok "[ $? -eq 0 ]" "async: the primary stopped at once (immediate)"
pgctl standby -w promote >/dev/null &&
	seckill_wait_for "[ \"\$(val $standby_port 'SELECT pg_is_in_recovery()' 2>/dev/null)\" = f ]" 30
ok "[ $? -eq 0 ]" "async: the standby is promoted" || finish
{
	relay_signal KILL
	wait "$relay"
} 2>/dev/null
relay=
promoted_line=$(wc -l <"$work/async.answers")
seckill_wait_for "[ \$(oks_after '$work/async.answers' $promoted_line) -ge 2000 ]" 30
ok "[ $? -eq 0 ]" "async: the clients buy on from the new primary"
stop_sale
diag "async: answers $(statuses "$work/async.answers")" \
	"  after the promotion: $(tail -n +"$((promoted_line + 1))" "$work/async.answers" | statuses /dev/stdin)"

new=$standby_port
load async "$new"
is "$(val "$new" "SELECT count(*) FROM answers_async a JOIN seckill.orders o ON o.id = a.order_id::bigint
	WHERE a.status = 'ok' AND o.user_id <> a.user_id")" 0 \
	"async: no acked order id belongs to another user on the new primary"
ok "grep -q 'seckill worker skips order ids up to' '$work/standby.log'" \
	"async: the new primary's sequence skipped the ids the old one handed out ($(grep -o 'skips order ids up to [0-9]*' "$work/standby.log" | head -1))"
# line: the answer's line in the client's log
lost() {
	val "$new" "SELECT count(*) FROM answers_async a WHERE a.status = 'ok' AND $1 AND NOT EXISTS
		(SELECT 1 FROM seckill.orders o WHERE o.campaign_id = $cid AND o.user_id = a.user_id)"
}
lost=$(lost "a.line <= $promoted_line")
diag "async: the failover lost $lost of the old primary's $(head -n "$promoted_line" "$work/async.answers" |
	oks /dev/stdin) acks"
is "$(lost "a.line > $promoted_line")" 0 \
	"async: each of the new primary's $(oks_after "$work/async.answers" "$promoted_line") acks has its order"
seckill_wait_for "[ \"\$(agrees $new '$goods')\" = t ]" 30
ok "[ $? -eq 0 ]" "async: Redis agrees with the new primary without a reconcile"
diag "async: $(figures "$new" "$goods")"
failover_comp=$(val "$new" "SELECT count(*) FROM seckill.compensations
	WHERE campaign_id = $cid AND reason ILIKE '%failover%'")
diag "async: $failover_comp compensations for the failover; reasons:" \
	"$(val "$new" "SELECT coalesce(string_agg(reason || ' ' || n, ', '), 'none') FROM (SELECT reason, count(*) n
		FROM seckill.compensations WHERE campaign_id = $cid GROUP BY 1) r")"
# Reservations still in the journal at the crash are compensated; those
# settled on the old primary (its worker may settle a last round as the
# server goes down) are counted by the take-over, which rebuilds the campaign.
found=$(grep -o "found [0-9]* item(s) of campaign $cid (" "$work/standby.log" | grep -o '[0-9]*' | head -1)
ok "[ $lost -eq 0 ] || [ $failover_comp -ge 1 ] || [ ${found:-0} -ge $lost ]" \
	"async: the reservations the failover lost are logged: $failover_comp compensation(s), ${found:-no} item(s) found sold without an order by the take-over"
is "$(val "$new" "SELECT c.sold <= c.total_stock AND coalesce(sum(o.qty), 0) = c.sold FROM seckill.campaigns c
	LEFT JOIN seckill.orders o ON o.campaign_id = c.id AND o.status <> 'cancelled' WHERE c.id = $cid GROUP BY c.id")" t \
	"async: no oversell on the new primary (sum of active orders = sold <= stock)"
is "$(val "$new" "SELECT count(*) FROM (SELECT 1 FROM seckill.orders WHERE campaign_id = $cid AND status <> 'cancelled'
	GROUP BY user_id HAVING count(*) > 1) d")" 0 "async: no user holds two active orders"

# 2. The old primary comes back on its own, next to the same Redis
pgctl primary -w start >/dev/null && seckill_wait_for "ready $primary_port" 30
ok "[ $? -eq 0 ]" "old primary restarted standalone (timeline 1, same Redis and prefix)" || finish
# until its answer is final: not "not running yet", a timeout or busy
tries=0
old_buy() {
	tries=$((tries + 1))
	old_answer=$(at "$primary_port" -v VERBOSITY=verbose \
		-c "SELECT * FROM seckill_buy('old-$tries', '$goods')" 2>&1)
	! grep -qE 'SK00[12]|^busy' <<<"$old_answer"
}
seckill_wait_for old_buy 30
diag "old primary, call $tries: $old_answer"
grep -q 'ERROR:  55P03:' <<<"$old_answer"
ok "[ $? -eq 0 ]" "old primary: seckill_buy fails with SQLSTATE 55P03"
grep -q '^HINT: .*pg_rewind' <<<"$old_answer"
ok "[ $? -eq 0 ]" "old primary: its hint names pg_rewind"
old_reconcile=$(val "$primary_port" "SELECT count(*) FILTER (WHERE repaired) FROM seckill_reconcile()" 2>&1)
rc=$?
diag "old primary: seckill_reconcile() -> $old_reconcile"
ok "[ $rc -ne 0 ] || [ '$old_reconcile' = 0 ]" "old primary: seckill_reconcile() fails or repairs nothing"
is "$(agrees "$new" "$goods")" t "the new primary's Redis still agrees with it (no flip)" ||
	diag "$(figures "$new" "$goods")"
# the worker remembers the fence between its rounds, after it answered
remembered() { [ "$(val "$primary_port" "SELECT fenced_by_timeline FROM seckill.worker_state")" = 2 ]; }
seckill_wait_for remembered 10
ok "[ $? -eq 0 ]" "old primary: seckill.worker_state remembers that timeline 2 fenced it"
pgctl primary -w -m fast stop >/dev/null

# Redis loses the newer epoch (every key of the prefix gone), then the old
# primary comes back once more: it stays fenced, and writes nothing to Redis
redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" --scan --pattern "$prefix:*" |
	xargs -r redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" del >/dev/null
epoch_key="$prefix:{$prefix}:epoch"
is "$(redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" exists "$epoch_key")" 0 "Redis lost every key of the prefix, the epoch too"
pgctl primary -w start >/dev/null && seckill_wait_for "ready $primary_port" 30
ok "[ $? -eq 0 ]" "old primary restarted once more, next to the emptied Redis" || finish
tries=0
seckill_wait_for old_buy 30
diag "old primary, call $tries: $old_answer"
grep -q 'ERROR:  55P03:' <<<"$old_answer"
ok "[ $? -eq 0 ]" "old primary: still fenced (55P03), from what PostgreSQL remembers"
epoch_now=$(redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" get "$epoch_key")
ok "[ '$epoch_now' != 1 ]" "old primary: it did not record its timeline as Redis' epoch (epoch now: ${epoch_now:-none})"
pgctl primary -w -m fast stop >/dev/null

# the new primary finds its campaign gone from Redis with the epoch: it
# recorded its timeline there and has had no standby since its promotion,
# so it is the newest primary it knows of (seckill.redis_epoch_lost is
# auto): it records its epoch again, unclaimed, and rebuilds the campaign
fresh_n=0
fresh_answer=
fresh() {
	fresh_n=$((fresh_n + 1))
	fresh_answer=$(val "$new" "SELECT status FROM seckill_buy('fresh-$fresh_n', '$goods')" 2>&1)
	! grep -qE 'SK00[12]|^busy' <<<"$fresh_answer"
}
seckill_wait_for "fresh && [ \"\$fresh_answer\" = ok ]" 30
ok "[ $? -eq 0 ]" "the new primary sells again unclaimed, its campaign rebuilt: $fresh_answer"
is "$(redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" get "$epoch_key")" 2 "Redis holds its epoch again: timeline 2"
is "$(val "$new" "SELECT seckill_epoch_claim()")" 2 "seckill_epoch_claim() on the new primary changes nothing: timeline 2"

# 4. Sync: a new standby of the new primary, then the same crash
standby sync "$new" "$sync_port"
ok "[ $? -eq 0 ]" "sync: a new standby of the new primary on port $sync_port" ||
	{ diag "$(cat "$work/sync-basebackup.out")"; finish; }
val "$new" "ALTER SYSTEM SET synchronous_standby_names = '*'" >/dev/null
val "$new" "SELECT pg_reload_conf()" >/dev/null
seckill_wait_for "[ \"\$(val $new \"SELECT sync_state FROM pg_stat_replication\")\" = sync ]" 30
ok "[ $? -eq 0 ]" "sync: the standby is synchronous" || finish
sync_goods="failover-sync-$$"
val "$new" "SELECT seckill_campaign_create('$sync_goods', 1000000)" >/dev/null
is "$(val "$new" "SELECT seckill_preheat('$sync_goods')")" 1000000 "sync: a campaign of 1,000,000, preheated" || finish

line_goods="failover-line-$$"
val "$new" "SELECT seckill_campaign_create('$line_goods', 1000)" >/dev/null
val "$new" "SELECT seckill_campaign_set('$line_goods', '{\"queue\": {\"admit_rate\": 50, \"admit_factor\": 1, \"pass_ttl\": \"10 minutes\"}}')" >/dev/null
is "$(val "$new" "SELECT seckill_preheat('$line_goods')")" 1000 "sync: a campaign of 1,000 with a waiting room, preheated" ||
	finish
# placed_after ms: the joins answered with a place after that time
placed_after() { awk -v t="$1" '$4 > t && ($2 == "waiting" || $2 == "admitted")' "$work/line.answers" | wc -l; }
# line port: the mark the line has admitted through, as that server's table says
line() {
	val "$1" "SELECT coalesce((SELECT l.admitted_through FROM seckill.queue_lines l
		JOIN seckill.campaigns c ON c.id = l.campaign_id WHERE c.goods = '$line_goods'), 0)" 2>/dev/null
}

sale sync "$sync_goods" 24 "$(dsn "$new")" "$(dsn "$sync_port")"
seckill_wait_for "[ \$(oks '$work/sync.answers') -ge 2000 ]" 30
ok "[ $? -eq 0 ]" "sync: the sale is under way" || finish
sync_rate=$(throughput "$work/sync.answers")
: >"$work/line.answers"
/usr/bin/python3 "$SECKILL_ROOT/test/t/failover_client.py" --join "$work/line.answers" "$line_goods" 8 300 \
	"$work/stop" "$(dsn "$new")" "$(dsn "$sync_port")" 2>"$work/line.client.err" &
line_client=$!
seckill_wait_for "[ \$(placed_after 0) -ge 1000 ] && [ \$(line $new) -ge 100 ]" 30
ok "[ $? -eq 0 ]" "sync: a waiting line fills beside the sale, and admits" || finish
admitted=$(line "$new")
pgctl standby -m immediate stop >/dev/null
ok "[ $? -eq 0 ]" "sync: the primary stopped at once (immediate)"
# every answer logged until now came from the old primary
crashed_ms=$(seckill_now_ms)
pgctl sync -w promote >/dev/null &&
	seckill_wait_for "[ \"\$(val $sync_port 'SELECT pg_is_in_recovery()' 2>/dev/null)\" = f ]" 30
ok "[ $? -eq 0 ]" "sync: the standby is promoted" || finish
promoted_line=$(wc -l <"$work/sync.answers")
# every answer logged from now on comes from the new primary
promoted_ms=$(seckill_now_ms)
seckill_wait_for "[ \$(oks_after '$work/sync.answers' $promoted_line) -ge 500 ]" 30
ok "[ $? -eq 0 ]" "sync: the clients buy on from the new primary"
seckill_wait_for "[ \$(placed_after $promoted_ms) -ge 200 ]" 30
ok "[ $? -eq 0 ]" "sync: joins go on on the new primary"
stop_sale
wait "$line_client"
line_client=
diag "sync: answers $(statuses "$work/sync.answers")" "sync: joins $(statuses "$work/line.answers")"
load sync "$sync_port"
load line "$sync_port"
ok "[ \$(line $sync_port) -ge $admitted ]" "sync: the line admitted through ticket $admitted before the crash, $(line "$sync_port") on the promoted standby"
is "$(val "$sync_port" "SELECT count(*) FROM answers_line a WHERE a.status IN ('waiting', 'admitted') AND a.at_ms <= $crashed_ms
	AND NOT EXISTS (SELECT 1 FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
		WHERE c.goods = '$line_goods' AND p.user_id = a.user_id AND p.ticket::text = a.order_id)")" 0 \
	"sync: every place given before the crash is on the promoted standby, with its ticket ($(($(placed_after 0) - $(placed_after "$crashed_ms"))) places)"
is "$(val "$sync_port" "SELECT count(*) FROM answers_line a, seckill_queue_status(a.user_id, '$line_goods') s
	WHERE a.status IN ('waiting', 'admitted') AND s.state NOT IN ('waiting', 'admitted')")" 0 \
	"sync: and every buyer who got one is told waiting or admitted there"
is "$(val "$sync_port" "SELECT count(*) FROM (SELECT order_id FROM answers_line WHERE status IN ('waiting', 'admitted')
	GROUP BY 1 HAVING count(DISTINCT user_id) > 1) d")" 0 "sync: no ticket was given to two buyers"
is "$(val "$sync_port" "SELECT min(order_id::bigint) > (SELECT max(order_id::bigint) FROM answers_line
	WHERE status IN ('waiting', 'admitted') AND at_ms <= $crashed_ms)
	FROM answers_line WHERE status IN ('waiting', 'admitted') AND at_ms > $promoted_ms")" t \
	"sync: the joins after the promotion queue behind every place given before the crash"
# (its line's turns commit too: closed, it leaves the worker to section 5's purchase)
val "$sync_port" "SELECT seckill_close('$line_goods')" >/dev/null
is "$(val "$sync_port" "SELECT count(*) FROM answers_sync a WHERE a.status = 'ok' AND NOT EXISTS
	(SELECT 1 FROM seckill.orders o WHERE o.id = a.order_id::bigint AND o.user_id = a.user_id)")" 0 \
	"sync: every acked order is on the promoted standby, with its user ($(oks "$work/sync.answers") acks)"
diag "throughput before the crash: async $async_rate answers/s, sync $sync_rate answers/s" \
	"  (sync / async = $(awk -v s="$sync_rate" -v a="$async_rate" 'BEGIN { printf "%.2f", (a > 0 ? s / a : 0) }'))"

# 5. A synchronous standby that never answers: the caller's timeout names it,
#    and the purchase completes once the wait is lifted
val "$sync_port" "ALTER SYSTEM SET synchronous_standby_names = 'gone'" >/dev/null
val "$sync_port" "SELECT pg_reload_conf()" >/dev/null
waiting=$(at "$sync_port" -v VERBOSITY=verbose -c "SET seckill.request_timeout = '1s'" \
	-c "SELECT * FROM seckill_buy('sync-waiter', '$sync_goods')" 2>&1)
diag "with no synchronous standby: $waiting"
grep -q 'SK001: .*waits for synchronous replication' <<<"$waiting"
ok "[ $? -eq 0 ]" "no synchronous standby: the timeout is SK001 and says the worker waits for synchronous replication"
val "$sync_port" "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null
val "$sync_port" "SELECT pg_reload_conf()" >/dev/null
is "$(val "$sync_port" "SELECT status FROM seckill_order('sync-waiter', '$sync_goods')")" reserved \
	"once the wait is lifted, the purchase is committed"

finish
