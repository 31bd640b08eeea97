#!/usr/bin/env bash
# A standby fed from the WAL archive alone (restore_command, no streaming),
# which its primary cannot see, declared by seckill.redis_epoch_lost = wait
# on the primary, on servers of our own that share the suite's Redis under
# their own key prefix (test/t/pg_pair.sh).  The primary sells and
# archives; its standby replays the archive; the primary crashes, the
# standby is promoted and sells; Redis then loses every key of the prefix.
# The old primary, restarted, never saw the failover: declared, it refuses
# to sell (55P03) and writes nothing to Redis.  The new primary, which
# recorded its timeline and has no standby, sells again unclaimed, and the
# old one is then fenced by its epoch.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/pg_pair.sh
. "$(dirname "$0")/pg_pair.sh"

base=${SECKILL_EPOCH_PORT:-$SECKILL_OWN_PORT}
a_port=$base
b_port=$((base + 1))
prefix="archived$$"
work=$(mktemp -d -p "$SECKILL_TMP" archived.XXXXXX)
mkdir "$work/archive"
chown -R postgres: "$work"
cleanup() {
	pair_cleanup a b
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
finish() { done_testing_with_logs 25 "$work"/*.log; }
ports_free SECKILL_EPOCH_PORT "$a_port" "$b_port"

epoch_key="$prefix:{$prefix}:epoch"
goods="archived-$$"

primary a "$a_port"
ok "[ $? -eq 0 ]" "a primary of our own on port $a_port, Redis prefix $prefix" || finish
{
	echo "archive_mode = on"
	echo "archive_command = 'cp %p $work/archive/%f'"
	echo "seckill.redis_epoch_lost = 'wait'"
} >>"$work/a/postgresql.conf"
pgctl a -w restart >/dev/null && seckill_wait_for "ready $a_port" 30
ok "[ $? -eq 0 ]" "it archives its WAL, and declares seckill.redis_epoch_lost = wait" || finish
val "$a_port" "CREATE EXTENSION seckill" >/dev/null
val "$a_port" "SELECT seckill_campaign_create('$goods', 100000)" >/dev/null
is "$(val "$a_port" "SELECT seckill_preheat('$goods')")" 100000 "a campaign of 100,000, preheated"
is "$(answer "$a_port" a-1)" ok "the primary sells"

# the standby: a base backup that replays the archive only
seckill_as_postgres pg_basebackup -h 127.0.0.1 -p "$a_port" -U postgres -D "$work/b" -X fetch -c fast \
	>"$work/b-basebackup.out" 2>&1
{
	echo "port = $b_port"
	echo "archive_mode = off"
	echo "seckill.redis_epoch_lost = 'auto'"
	echo "restore_command = 'cp $work/archive/%f %p'"
	echo "primary_conninfo = ''"
} >>"$work/b/postgresql.conf"
touch "$work/b/standby.signal" && chown postgres: "$work/b/standby.signal"
pgctl b -w start >/dev/null && seckill_wait_for "ready $b_port" 30
ok "[ $? -eq 0 ]" "its standby on port $b_port replays the archive, no streaming" ||
	{ diag "$(cat "$work/b-basebackup.out")"; finish; }
is "$(val "$a_port" "SELECT count(*) FROM pg_stat_replication")" 0 "the primary sees no standby"
for i in $(seq 2 101); do at "$a_port" -c "SELECT status FROM seckill_buy('a-$i', '$goods')" >/dev/null 2>&1; done
lsn=$(val "$a_port" "SELECT pg_current_wal_lsn()")
val "$a_port" "SELECT pg_switch_wal()" >/dev/null
seckill_wait_for "[ \"\$(val $b_port \"SELECT pg_last_wal_replay_lsn() >= '$lsn'\")\" = t ]" 30
ok "[ $? -eq 0 ]" "the standby replayed the archived WAL of 101 purchases"
is "$(val "$a_port" "SELECT had_standby FROM seckill.worker_state")" f "the primary never saw a standby (had_standby)"

# the primary crashes, the standby is promoted and sells
pgctl a -m immediate stop >/dev/null
pgctl b -w promote >/dev/null && seckill_wait_for "[ \"\$(val $b_port 'SELECT pg_is_in_recovery()')\" = f ]" 30
ok "[ $? -eq 0 ]" "the primary crashed, its standby is promoted (timeline 2)" || finish
is "$(answer "$b_port" b-1)" ok "the new primary sells"
is "$(rcli get "$epoch_key")" 2 "Redis holds the new primary's epoch: timeline 2"

# the new primary stops, Redis loses every key of the prefix, and the old
# primary comes back
pgctl b -w -m fast stop >/dev/null
rcli --scan --pattern "$prefix:*" | xargs -r redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" del >/dev/null
is "$(prefix_keys)" 0 "Redis lost every key of the prefix, the epoch too"
pgctl a -w start >/dev/null && seckill_wait_for "ready $a_port" 30
ok "[ $? -eq 0 ]" "the old primary restarted (timeline 1), next to the emptied Redis" || finish
old=$(answer "$a_port" old-1)
grep -q 'ERROR:  55P03:.*lost the epoch' <<<"$old"
ok "[ $? -eq 0 ]" "old primary, declared wait: seckill_buy fails with 55P03, Redis lost the epoch" || diag "$old"
is "$(prefix_keys)" 0 "old primary: Redis untouched, no key of the prefix written"

# the new primary comes back and sells again on its own, and its epoch
# fences the old one
pgctl b -w start >/dev/null && seckill_wait_for "ready $b_port" 30
t0=$(seckill_now_ms)
is "$(answer "$b_port" b-2)" ok "the new primary sells again unclaimed ($(($(seckill_now_ms) - t0)) ms)"
is "$(rcli get "$epoch_key")" 2 "Redis holds timeline 2"
old_fenced() { grep -q 'another primary sells through' <<<"$(answer "$a_port" "old-$RANDOM")"; }
seckill_wait_for old_fenced 15
ok "[ $? -eq 0 ]" "old primary: now fenced by the new primary's epoch (55P03)"
finish
