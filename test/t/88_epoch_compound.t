#!/usr/bin/env bash
# Two faults at once around the epoch (worker/epoch.c), on the suite's own
# server, a lone primary on timeline 1, and its Redis:
#  1. a base backup (pg_basebackup -X stream) and pg_receivewal are no
#     standby: they replay nothing.  With seckill.redis_epoch_lost left at
#     auto, a Redis restarted empty after them (no persistence) is taken
#     for a new one, and the server sells again within 5 s without a claim;
#  2. a claim is all or nothing: one that errors (a lock timeout while it
#     reads the campaigns) or whose caller gave up (seckill.request_timeout,
#     or a cancel) before it was recorded records nothing, and purchases
#     still wait; the next claim sells;
#  3. a promotion id that cannot be written (a directory where its file
#     goes) fails closed: purchases are refused, naming it, until it can be
#     written, and then sell within seconds;
#  4. a take-over never lowers the epoch a newer primary wrote into the
#     campaigns' hashes: after a Redis failover that kept the hashes but lost
#     the newer primary's epoch key, this server, finding a new master and
#     its own epoch, answers 55P03 (fenced), and the hashes keep the newer
#     epoch; a lock held with the watchdog is still renewed while the
#     server is fenced.  Last: the server stays fenced.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

goods=compound-$$
work=$(mktemp -d -p "$SECKILL_TMP" compound.XXXXXX)
chown postgres: "$work"
RECEIVER=
cleanup() {
	[ -n "$RECEIVER" ] && kill "$RECEIVER" 2>/dev/null && wait "$RECEIVER"
	[ -n "$SESSION_PID" ] && kill "$SESSION_PID" 2>/dev/null
	seckill_configure "RESET seckill.redis_epoch_lost" "RESET seckill.worker_lock_timeout" \
		"RESET seckill.lock_lease" >/dev/null 2>&1
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
log=$SECKILL_TMP/postgresql.log

# answer user: a purchase's status, or its error
answer() { psql_val "SELECT status FROM seckill_buy('$1', '$goods')" 2>&1; }
n=0
sells() {
	n=$((n + 1))
	[ "$(answer "buyer-$n")" = ok ]
}
waits() { # a purchase is refused: Redis lost the epoch
	n=$((n + 1))
	[[ "$(answer "buyer-$n")" == *'lost the epoch'* ]]
}
epoch_key='seckill:{seckill}:epoch'
had_standby() { psql_val "SELECT had_standby FROM seckill.worker_state"; }
# waits_for ms: for that long, every purchase waits and Redis holds no epoch
# and no key of a campaign (a claim that does not hold marks none)
waits_for() {
	local until=$(($(seckill_now_ms) + $1)) all=0
	while [ "$(seckill_now_ms)" -lt "$until" ]; do
		waits || all=1
		[ "$(seckill_redis_cli EXISTS "$epoch_key")" = 0 ] || all=1
		[ -z "$(seckill_redis_cli --scan --pattern 'seckill:{c:*')" ] || all=1
	done
	return $all
}

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "SELECT seckill_campaign_create('$goods', 100000)" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$goods')")" 100000 "a campaign of 100,000, preheated"
ok sells "a purchase"
seckill_wait_for "[ \"\$(psql_val 'SELECT epoch_recorded_timeline FROM seckill.worker_state')\" = 1 ]" 10
ok "[ $? -eq 0 ]" "seckill.worker_state remembers that this server recorded timeline 1 in Redis"

# 1. A base backup with its WAL stream, then pg_receivewal for 3 s of sales
seckill_as_postgres pg_basebackup -h 127.0.0.1 -p "$PGPORT" -U postgres -D "$work/backup" \
	-X stream -c fast >"$work/basebackup.out" 2>&1
ok "[ $? -eq 0 ]" "pg_basebackup -X stream of this server" || diag "$(cat "$work/basebackup.out")"
mkdir "$work/wal" && chown postgres: "$work/wal"
(cd "$work" && exec runuser -u postgres -- pg_receivewal -h 127.0.0.1 -p "$PGPORT" -U postgres \
	-D "$work/wal" >"$work/receivewal.out" 2>&1) &
RECEIVER=$!
seckill_wait_for "[ \"\$(psql_val \"SELECT count(*) FROM pg_stat_replication WHERE application_name = 'pg_receivewal' AND state = 'streaming'\")\" = 1 ]" 10
ok "[ $? -eq 0 ]" "pg_receivewal streams WAL from this server"
until=$(($(seckill_now_ms) + 3000))
all=0
while [ "$(seckill_now_ms)" -lt "$until" ]; do sells || all=1; done
ok "[ $all -eq 0 ]" "every purchase sells for 3 s while pg_receivewal streams"
kill "$RECEIVER" && wait "$RECEIVER"
RECEIVER=
is "$(had_standby)" f "seckill.worker_state: neither the base backup nor pg_receivewal counts as a standby"
seckill_redis_restart_empty
t0=$(seckill_now_ms)
seckill_wait_for sells 5
ok "[ $? -eq 0 ]" "Redis restarted without persistence: the lone server sells again in $(($(seckill_now_ms) - t0)) ms, unclaimed"

# 2. The claim, with seckill.redis_epoch_lost = wait
seckill_configure "SET seckill.redis_epoch_lost = wait"
seckill_redis_cli FLUSHALL >/dev/null
seckill_wait_for waits 10
ok "[ $? -eq 0 ]" "with wait, Redis emptied: purchases wait for a claim"
session_hold "BEGIN; LOCK TABLE seckill.campaigns IN ACCESS EXCLUSIVE MODE;"
err=$(psql_val "SELECT seckill_epoch_claim()" 2>&1)
ok "[[ \"\$err\" == *lock* ]]" "a claim while an application locks seckill.campaigns fails: ${err//$'\n'/ }"
session_end "COMMIT;"
waits_for 3000
ok "[ $? -eq 0 ]" "for 3 s after it, the lock gone, every purchase still waits and Redis holds no epoch, no campaign key"

seckill_configure "SET seckill.worker_lock_timeout = 3000"
session_hold "BEGIN; LOCK TABLE seckill.campaigns IN ACCESS EXCLUSIVE MODE;"
before=$(grep -c 'drops seckill_epoch_claim()' "$log")
err=$(psql -XAtq -c "SET seckill.request_timeout = 300" -c "SELECT seckill_epoch_claim()" 2>&1)
ok "[[ \"\$err\" == *'did not answer'* || \"\$err\" == *timeout* || \"\$err\" == *'timed out'* ]]" \
	"a claim that waits longer than its caller's seckill.request_timeout fails for it: ${err//$'\n'/ }"
session_end "COMMIT;"
seckill_wait_for "[ \$(grep -c 'drops seckill_epoch_claim()' '$log') -gt $before ]" 10
ok "[ $? -eq 0 ]" "the worker, free of the lock, drops the claim its caller gave up on"
waits_for 2000
ok "[ $? -eq 0 ]" "and for 2 s after, every purchase still waits and Redis holds no epoch, no campaign key"

# a claim whose caller is cancelled while the worker waits for the lock
session_hold "BEGIN; LOCK TABLE seckill.campaigns IN ACCESS EXCLUSIVE MODE;"
before=$(grep -c 'drops seckill_epoch_claim()' "$log")
psql -XAtq -c "SELECT seckill_epoch_claim()" >"$work/cancelled.out" 2>&1 7>&- &
claimer=$!
# its caller waits, and the worker, serving it, waits for the table's lock
claiming() {
	psql_val "SELECT count(*) FILTER (WHERE query = 'SELECT seckill_epoch_claim()' AND state = 'active')
		|| ' ' || count(*) FILTER (WHERE backend_type = 'seckill worker' AND wait_event_type = 'Lock')
		FROM pg_stat_activity"
}
seckill_wait_for "[ \"\$(claiming)\" = '1 1' ]" 10
psql_val "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query = 'SELECT seckill_epoch_claim()'" >/dev/null
wait "$claimer"
ok "grep -q 'canceling statement due to user request' '$work/cancelled.out'" \
	"a claim cancelled while the worker waits for the lock fails for its caller: $(tr '\n' ' ' <"$work/cancelled.out")"
session_end "COMMIT;"
seckill_wait_for "[ \$(grep -c 'drops seckill_epoch_claim()' '$log') -gt $before ]" 10
ok "[ $? -eq 0 ]" "the worker, free of the lock, drops the cancelled claim"
waits_for 2000
ok "[ $? -eq 0 ]" "and for 2 s after, every purchase still waits and Redis holds no epoch, no campaign key"
seckill_configure "RESET seckill.worker_lock_timeout"

is "$(psql_val "SELECT seckill_epoch_claim()" 2>&1)" 1 "a claim that nothing stops records timeline 1"
seckill_wait_for sells 10
ok "[ $? -eq 0 ]" "and the server sells"
seckill_configure "RESET seckill.redis_epoch_lost"

# 3. The promotion id cannot be written
pgdata=${PGDATA:-$SECKILL_TMP/pgdata}
rm -f "$pgdata/seckill_promotion"
mkdir "$pgdata/seckill_promotion.tmp"
# the id to come is new: Redis, which recorded the old one for timeline 1,
# would fence it as another promotion onto the same timeline; it is emptied
# while the server is down
seckill_pg_ctl -w -m fast stop >/dev/null
seckill_redis_cli FLUSHALL >/dev/null
seckill_pg_ctl -w start >/dev/null && seckill_wait_for seckill_pg_ready 30
unkept() { [[ "$(answer "buyer-unkept-$RANDOM")" == *'could not write its promotion id'* ]]; }
seckill_wait_for unkept 10
ok "[ $? -eq 0 ]" "the promotion id cannot be written: purchases are refused, naming it"
ok "grep -q 'does not sell: it could not write \"seckill_promotion.tmp\"' '$log'" "the log says why"
rmdir "$pgdata/seckill_promotion.tmp"
t0=$(seckill_now_ms)
seckill_wait_for sells 10
ok "[ $? -eq 0 ]" "the way cleared, the worker writes it and sells again in $(($(seckill_now_ms) - t0)) ms"
ok "[ -s '$pgdata/seckill_promotion' ]" "the promotion id is kept in the data directory"

# 4. A newer primary (timeline 2) took the campaigns over; a Redis failover
# lost its epoch key (this server's 1 is back there) and gave a new master.
# A lock is held meanwhile, its lease 600 ms, renewed by the watchdog.
seckill_configure "SET seckill.lock_lease = 600"
session_hold "SELECT seckill_lock('compound-lock');"
renewals() { psql_val "SELECT renewals FROM seckill.locks WHERE name = 'compound-lock' AND state = 'held'"; }
seckill_wait_for "[ \"\$(renewals)\" -ge 1 ]" 5
ok "[ $? -eq 0 ]" "a lock held with a lease of 600 ms, renewed by the watchdog"
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
meta="seckill:{c:$cid}:meta"
seckill_redis_cli HSET "$meta" epoch 2 stale promotion >/dev/null
is "$(seckill_redis_cli HGET "$meta" epoch)" 2 "the campaign's hash marked by timeline 2"
seckill_redis_cli SET "$epoch_key" 1 >/dev/null
seckill_redis_cli SET 'seckill:{seckill}:master' 0000000000000000000000000000000000000000 >/dev/null
seckill_redis_cli CLIENT KILL TYPE normal >/dev/null
fenced() { [[ "$(answer "buyer-fenced-$RANDOM")" == *'another primary sells'* ]]; }
seckill_wait_for fenced 10
ok "[ $? -eq 0 ]" "this server, on timeline 1, finds a new master: its take-over is refused, fenced"
refused=$(psql -XAtq -v VERBOSITY=verbose -c "SELECT status FROM seckill_buy('buyer-fenced-code', '$goods')" 2>&1)
ok "[[ \"\$refused\" == *'ERROR:  55P03:'* ]]" "... with SQLSTATE 55P03" || diag "$refused"
is "$(seckill_redis_cli HGET "$meta" epoch)" 2 "the campaign's hash keeps epoch 2"
ok "grep -q 'another primary sells through this Redis' '$log'" "the log says why"
is "$(psql_val "SELECT fenced_by_timeline FROM seckill.worker_state")" 2 "seckill.worker_state remembers the fence"
r0=$(renewals)
seckill_wait_for "[ \"\$(renewals)\" -ge $((r0 + 5)) ]" 5
ok "[ $? -eq 0 ]" "while the server is fenced, the lock is still renewed ($r0 renewals, then $(renewals))"
is "$(seckill_redis_cli EXISTS 'seckill:{lock:compound-lock}')" 1 "... and its lease is in Redis"
session_end "SELECT seckill_unlock('compound-lock');"
is "$(tail -n 1 "$SESSION_OUT")" t "... and its holder releases it, held to the end"

done_testing
