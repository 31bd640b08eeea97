#!/usr/bin/env bash
# Redis loses the epoch after a failover (seckill.redis_epoch_lost, left at
# its default, auto), on a primary and standby of our own that share the
# suite's Redis under their own key prefix (test/t/pg_pair.sh).  The
# primary sells and remembers that it streams to a standby, then crashes;
# its standby is promoted and sells on; Redis then loses every key of the
# prefix, the epoch too.  The old primary, restarted, never saw the
# failover: it finds no epoch where it recorded its own, and refuses to sell
# (55P03, status epoch_lost, the claim in the hint) without writing a key
# to Redis.  The new primary, set to wait, waits too, until a DBA runs
# seckill_epoch_claim() on it.  Then the new primary sells, Redis agrees
# with it without a reconcile, and the old one is fenced for good: its own
# claim is refused and it remembers the timeline that fenced it.  Redis
# emptied under the running primary makes it wait too, while the locks'
# watchdog goes on: a held lock's lease is put back and renewed, and an
# ended session's lock released.  With rebuild, a
# primary whose Redis lost the epoch records it again by itself and sells;
# so does the new primary with auto: it recorded its timeline and has had
# no standby of its own, so it is the newest primary it knows of (its
# inherited row, where the old primary had a standby, does not count).
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/pg_pair.sh
. "$(dirname "$0")/pg_pair.sh"

# Below 32768 (see 88_failover.t), beside its ports
base=${SECKILL_EPOCH_PORT:-$SECKILL_OWN_PORT}
a_port=$base
b_port=$((base + 1))
prefix="epochlost$$"
work=$(mktemp -d -p "$SECKILL_TMP" epochlost.XXXXXX)
chown postgres: "$work"
cleanup() {
	pair_cleanup a b
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
finish() { done_testing_with_logs 25 "$work"/*.log; }
ports_free SECKILL_EPOCH_PORT "$a_port" "$b_port"

flush_prefix() { rcli --scan --pattern "$prefix:*" | xargs -r redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" del >/dev/null; }
epoch_key="$prefix:{$prefix}:epoch"
buys() { # port n tag: n purchases, the count of ok
	local i n=0
	for i in $(seq 1 "$2"); do
		[ "$(val "$1" "SELECT status FROM seckill_buy('$3-$i', '$goods')" 2>&1)" = ok ] && n=$((n + 1))
	done
	echo "$n"
}

primary a "$a_port"
ok "[ $? -eq 0 ]" "a primary of our own on port $a_port, Redis prefix $prefix" || finish
val "$a_port" "CREATE EXTENSION seckill" >/dev/null
is "$(val "$a_port" "SHOW seckill.redis_epoch_lost")" auto "seckill.redis_epoch_lost is auto by default"
goods="epochlost-$$"
val "$a_port" "SELECT seckill_campaign_create('$goods', 100000)" >/dev/null
is "$(val "$a_port" "SELECT seckill_preheat('$goods')")" 100000 "a campaign of 100,000, preheated" || finish
sold_a=$(buys "$a_port" 200 a)
is "$sold_a" 200 "200 purchases on the primary"
seckill_wait_for "[ \"\$(val $a_port 'SELECT epoch_recorded_timeline FROM seckill.worker_state')\" = 1 ]" 10
ok "[ $? -eq 0 ]" "seckill.worker_state remembers that this server recorded timeline 1 in Redis"

standby b "$a_port" "$b_port"
ok "[ $? -eq 0 ]" "its standby on port $b_port" || { diag "$(cat "$work/b-basebackup.out")"; finish; }
seckill_wait_for "streaming $a_port 1" 30
caught_up() {
	[ "$(val "$b_port" "SELECT pg_last_wal_replay_lsn() >= '$(val "$a_port" "SELECT pg_current_wal_lsn()")'")" = t ]
}
seckill_wait_for caught_up 30
ok "[ $? -eq 0 ]" "the standby caught up"
seckill_wait_for "[ \"\$(val $a_port 'SELECT had_standby FROM seckill.worker_state')\" = t ]" 10
ok "[ $? -eq 0 ]" "the primary remembers it streams to a standby (had_standby)"
seckill_wait_for caught_up 30

# The primary crashes, the standby is promoted and sells on
pgctl a -m immediate stop >/dev/null
pgctl b -w promote >/dev/null && seckill_wait_for "[ \"\$(val $b_port 'SELECT pg_is_in_recovery()')\" = f ]" 30
ok "[ $? -eq 0 ]" "the primary crashed, its standby is promoted (timeline 2)" || finish
is "$(answer "$b_port" b-first)" ok "the new primary sells"
sold_b=$(buys "$b_port" 100 b)
is "$sold_b" 100 "100 purchases on the new primary"
is "$(rcli get "$epoch_key")" 2 "Redis holds the new primary's epoch: timeline 2"
seckill_wait_for "[ \"\$(val $b_port 'SELECT epoch_recorded_timeline FROM seckill.worker_state')\" = 2 ]" 10
ok "[ $? -eq 0 ]" "the new primary remembers it recorded timeline 2"

# Redis loses every key of the prefix; the old primary comes back: it never
# saw the failover, and its PostgreSQL says nothing of it
pgctl b -w -m fast stop >/dev/null
flush_prefix
is "$(prefix_keys)" 0 "Redis lost every key of the prefix, the epoch too"
pgctl a -w start >/dev/null && seckill_wait_for "ready $a_port" 30
ok "[ $? -eq 0 ]" "the old primary restarted (timeline 1), next to the emptied Redis" || finish
is "$(val "$a_port" "SELECT coalesce(fenced_by_timeline, 0) FROM seckill.worker_state")" 0 \
	"the old primary was never told of the failover"
old=$(answer "$a_port" old-1)
diag "old primary: $old"
grep -q 'ERROR:  55P03:.*lost the epoch' <<<"$old"
ok "[ $? -eq 0 ]" "old primary: seckill_buy fails with 55P03, Redis lost the epoch"
grep -q '^HINT: .*seckill_epoch_claim()' <<<"$old"
ok "[ $? -eq 0 ]" "old primary: the hint names seckill_epoch_claim() and where to run it"
is "$(prefix_keys)" 0 "old primary: Redis untouched, no key of the prefix written"
ok "grep -q 'Redis has lost the epoch this server recorded there (timeline 1)' '$work/a.log'" \
	"old primary: its log says why it does not sell"

# The new primary comes back too, set to wait: it waits as well, until claimed
echo "seckill.redis_epoch_lost = 'wait'" >>"$work/b/postgresql.conf"
pgctl b -w start >/dev/null && seckill_wait_for "ready $b_port" 30
new=$(answer "$b_port" new-1)
grep -q 'ERROR:  55P03:.*lost the epoch' <<<"$new"
ok "[ $? -eq 0 ]" "new primary: waits for a claim too (55P03)" || diag "$new"
is "$(prefix_keys)" 0 "Redis still untouched"
# a claim while Redis is down fails, saying so, and is not kept for later
seckill_redis_stop
claim=$(at "$b_port" -v VERBOSITY=verbose -c "SELECT seckill_epoch_claim()" 2>&1)
grep -q 'ERROR:  08006:' <<<"$claim"
ok "[ $? -eq 0 ]" "a claim while Redis is down fails with 08006" || diag "$claim"
seckill_redis_start
new=$(answer "$b_port" new-2)
grep -q 'ERROR:  55P03:.*lost the epoch' <<<"$new"
ok "[ $? -eq 0 ]" "Redis back (empty): the failed claim was dropped, the new primary still waits" || diag "$new"
# the worker reconnects to the restarted Redis at its own pace: claimed once it is connected
claimed=
claim() { claimed=$(val "$b_port" "SELECT seckill_epoch_claim()" 2>&1); [ "$claimed" = 2 ]; }
seckill_wait_for claim 15
is "$claimed" 2 "seckill_epoch_claim() on the new primary: timeline 2"
is "$(rcli get "$epoch_key")" 2 "Redis holds timeline 2 again"
is "$(answer "$b_port" b-claimed)" ok "the new primary sells again"
sold_c=$(buys "$b_port" 100 c)
is "$sold_c" 100 "100 more purchases on it"
seckill_wait_for "[ \"\$(agrees $b_port '$goods')\" = t ]" 30
ok "[ $? -eq 0 ]" "Redis agrees with the new primary without a reconcile" || diag "$(figures "$b_port" "$goods")"
# the standby had caught up: every ok of both, and the two single purchases
acked=$((sold_a + sold_b + sold_c + 2))
is "$(val "$b_port" "SELECT c.sold || ' ' || (SELECT count(DISTINCT user_id) || ' ' || count(*) FROM seckill.orders o
	WHERE o.campaign_id = c.id) FROM seckill.campaigns c WHERE goods = '$goods'")" "$acked $acked $acked" \
	"$acked acks: as many orders of as many users, and sold (nothing lost, nothing doubled)"
ok "grep -q 'takes this Redis over (Redis has lost the epoch this server recorded there; seckill_epoch_claim() was run)' '$work/b.log'" \
	"the claim checked the campaigns against PostgreSQL before they sold"

# The old primary now sees the newer epoch: fenced for good
old_fenced() {
	old=$(answer "$a_port" "old-$RANDOM")
	grep -q 'another primary sells through' <<<"$old" && ! grep -q 'lost the epoch' <<<"$old"
}
seckill_wait_for old_fenced 15
ok "[ $? -eq 0 ]" "old primary: now fenced by the newer primary, no longer waiting for a claim (55P03)" || diag "$old"
grep -q '^HINT: .*pg_rewind' <<<"$old"
ok "[ $? -eq 0 ]" "old primary: its hint names pg_rewind"
seckill_wait_for "[ \"\$(val $a_port 'SELECT fenced_by_timeline FROM seckill.worker_state')\" = 2 ]" 10
ok "[ $? -eq 0 ]" "old primary: it remembers that timeline 2 fenced it"
claim=$(at "$a_port" -v VERBOSITY=verbose -c "SELECT seckill_epoch_claim()" 2>&1)
grep -q 'ERROR:  55P03:.*another primary sells' <<<"$claim"
ok "[ $? -eq 0 ]" "old primary: its seckill_epoch_claim() is refused, fenced (55P03)" || diag "$claim"
is "$(rcli get "$epoch_key")" 2 "Redis still holds timeline 2"
pgctl a -w -m fast stop >/dev/null

# Bad input and the default
claim=$(at "$b_port" -c "SET ROLE pg_monitor" -c "SELECT seckill_epoch_claim()" 2>&1)
grep -q 'permission denied' <<<"$claim"
ok "[ $? -eq 0 ]" "seckill_epoch_claim() is not for PUBLIC: $claim"
is "$(val "$b_port" "SELECT seckill_epoch_claim()")" 2 "a claim where Redis holds this server's epoch changes nothing"
# Redis loses the keys under a running worker: the campaign found gone, the
# epoch is checked before it is rebuilt.  Two locks are held meanwhile,
# their leases 600 ms, renewed by the watchdog; the session of one ends
# while the server waits for the claim.
val "$b_port" "ALTER SYSTEM SET seckill.lock_lease = 600" >/dev/null && val "$b_port" "SELECT pg_reload_conf()" >/dev/null
PGHOST=127.0.0.1 PGPORT=$b_port PGUSER=postgres PGDATABASE=postgres session_hold "SELECT seckill_lock('kept-lock');"
at "$b_port" -c "SELECT seckill_lock('ended-lock')" -c "SELECT pg_sleep(120)" >/dev/null 2>&1 &
ended_session=$!
lock_row() { val "$b_port" "SELECT state || ' ' || renewals FROM seckill.locks WHERE name = '$1'"; }
renewals() { local row; row=$(lock_row kept-lock); echo "${row#held }"; }
seckill_wait_for "[ -n \"\$(lock_row ended-lock)\" ] && [ \"\$(renewals)\" -ge 1 ] 2>/dev/null" 10
ok "[ $? -eq 0 ]" "two locks held on the new primary, renewed by the watchdog"
flush_prefix
running=$(answer "$b_port" running-1)
grep -q 'ERROR:  55P03:.*lost the epoch' <<<"$running"
ok "[ $? -eq 0 ]" "Redis emptied under a running primary: it waits for a claim, rebuilding nothing" || diag "$running"
is "$(rcli --scan --pattern "$prefix:*" | grep -v ':order-ids$' | grep -vc ':{lock:')" 0 \
	"Redis holds no campaign or epoch key of the prefix"
# while the server waits for the claim, the watchdog runs: the lease Redis
# lost is put back and renewed, the ended session's lock released
r0=$(renewals)
seckill_wait_for "[ \"\$(renewals)\" -ge $((r0 + 4)) ] 2>/dev/null" 5
ok "[ $? -eq 0 ]" "waiting for the claim, the held lock is still renewed ($r0 renewals, then $(renewals)), shown $(lock_row kept-lock | cut -d' ' -f1)"
is "$(rcli EXISTS "$prefix:{lock:kept-lock}")" 1 "... its lease, lost with Redis' keys, is back in Redis"
kill "$ended_session" 2>/dev/null
val "$b_port" "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(120)%' AND pid <> pg_backend_pid()" >/dev/null
wait "$ended_session" 2>/dev/null
seckill_wait_for "[ -z \"\$(lock_row ended-lock)\" ]" 5
ok "[ $? -eq 0 ]" "the lock of a session that ended is released while the server waits for the claim"
is "$(rcli EXISTS "$prefix:{lock:ended-lock}")" 0 "... and its lease is gone from Redis"
session_end "SELECT seckill_unlock('kept-lock');"
is "$(tail -n 1 "$SESSION_OUT")" t "the held lock's holder releases it, held to the end"
val "$b_port" "ALTER SYSTEM RESET seckill.lock_lease" >/dev/null && val "$b_port" "SELECT pg_reload_conf()" >/dev/null
is "$(val "$b_port" "SELECT seckill_epoch_claim()")" 2 "claimed again"
is "$(answer "$b_port" running-2)" ok "it sells again"
val "$b_port" "ALTER SYSTEM SET seckill.redis_epoch_lost = rebuild" >/dev/null && val "$b_port" "SELECT pg_reload_conf()" >/dev/null
flush_prefix
is "$(answer "$b_port" rebuild-1)" ok "with rebuild, a primary whose Redis lost the epoch records it again and sells"
is "$(rcli get "$epoch_key")" 2 "Redis holds timeline 2"
is "$(val "$b_port" "SELECT had_standby FROM seckill.worker_state")" f \
	"the new primary's row: no standby on its timeline (the old primary's, inherited, was dropped when it recorded timeline 2)"
val "$b_port" "ALTER SYSTEM SET seckill.redis_epoch_lost = auto" >/dev/null && val "$b_port" "SELECT pg_reload_conf()" >/dev/null
flush_prefix
t0=$(seckill_now_ms)
seckill_wait_for "[ \"\$(answer $b_port auto-\$RANDOM)\" = ok ]" 10
ok "[ $? -eq 0 ]" "with auto, the new primary, newest of those it knows, sells again unclaimed in $(($(seckill_now_ms) - t0)) ms"
is "$(rcli get "$epoch_key")" 2 "Redis holds timeline 2"
done_testing
