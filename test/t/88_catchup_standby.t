#!/usr/bin/env bash
# A standby the primary sees only in catch-up counts as one: on servers of
# our own that share the suite's Redis under their own key prefix
# (test/t/pg_pair.sh), a standby streams through a relay that forwards 1 MB
# a second while the primary has tens of megabytes of WAL it lacks, so its
# walsender stays in catch-up.  The primary remembers it had a standby
# (seckill.worker_state.had_standby) while it is still catching up.  The
# standby is then promoted, still in catch-up; the old primary crashes and
# Redis restarts empty; the old primary, restarted under the default
# seckill.redis_epoch_lost = auto, refuses to sell (55P03) instead of
# rebuilding: its standby was promoted behind its back.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/pg_pair.sh
. "$(dirname "$0")/pg_pair.sh"

base=${SECKILL_EPOCH_PORT:-$SECKILL_OWN_PORT}
a_port=$base
b_port=$((base + 1))
relay_port=$((base + 2))
prefix="catchup$$"
work=$(mktemp -d -p "$SECKILL_TMP" catchup.XXXXXX)
chown -R postgres: "$work"
relay=
cleanup() {
	[ -n "$relay" ] && kill "$relay" 2>/dev/null && wait "$relay" 2>/dev/null
	pair_cleanup a b
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
finish() { done_testing_with_logs 25 "$work"/*.log; }
ports_free SECKILL_EPOCH_PORT "$a_port" "$b_port" "$relay_port"
goods="catchup-$$"

primary a "$a_port"
ok "[ $? -eq 0 ]" "a primary of our own on port $a_port, Redis prefix $prefix" || finish
val "$a_port" "CREATE EXTENSION seckill" >/dev/null
val "$a_port" "SELECT seckill_campaign_create('$goods', 1000)" >/dev/null
is "$(val "$a_port" "SELECT seckill_preheat('$goods')")" 1000 "a campaign of 1,000, preheated"
is "$(answer "$a_port" a-1)" ok "the primary sells"

# the standby: a base backup, then WAL it lacks, streamed through a slow relay
seckill_as_postgres pg_basebackup -h 127.0.0.1 -p "$a_port" -U postgres -D "$work/b" -R -X stream -c fast \
	>"$work/b-basebackup.out" 2>&1
echo "port = $b_port" >>"$work/b/postgresql.conf"
# after the one pg_basebackup -R wrote there, so that it wins
echo "primary_conninfo = 'host=127.0.0.1 port=$relay_port user=postgres'" >>"$work/b/postgresql.auto.conf"
val "$a_port" "CREATE TABLE filler AS SELECT g, repeat(md5(g::text), 8) AS pad FROM generate_series(1, 200000) g" \
	>/dev/null
backlog=$(val "$a_port" "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') / 1048576")
python3 "$(dirname "$0")/slow_relay.py" "$relay_port" "$a_port" 1048576 &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
pgctl b -w start >/dev/null && seckill_wait_for "ready $b_port" 60
ok "[ $? -eq 0 ]" "its standby on port $b_port started, streaming through a relay of 1 MB/s" ||
	{ diag "$(cat "$work/b-basebackup.out")"; finish; }
catching_up() {
	[ "$(val "$a_port" "SELECT state || ' ' || (replay_lsn IS NOT NULL) FROM pg_stat_replication")" = "catchup true" ]
}
seckill_wait_for catching_up 30
ok "[ $? -eq 0 ]" "the primary's walsender is in catch-up, the standby reporting its replay (WAL up to $backlog MB)" ||
	{ diag "$(val "$a_port" "SELECT state, sent_lsn, replay_lsn, pg_current_wal_lsn() FROM pg_stat_replication")"; finish; }
seckill_wait_for "[ \"\$(val $a_port 'SELECT had_standby FROM seckill.worker_state')\" = t ]" 15
ok "[ $? -eq 0 ]" "the primary remembers it had a standby (had_standby)"
ok catching_up "while the standby is still in catch-up, never seen streaming"

# the standby is promoted while still in catch-up (its relay stops; it ends
# recovery with the WAL it has) and takes its timeline; it then stops, the
# old primary crashes, and Redis restarts empty
kill "$relay" && wait "$relay" 2>/dev/null
relay=
pgctl b -w promote >/dev/null && seckill_wait_for "[ \"\$(val $b_port 'SELECT pg_is_in_recovery()')\" = f ]" 30
ok "[ $? -eq 0 ]" "the standby, promoted while in catch-up, is a primary"
is "$(val "$b_port" "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int")" 2 \
	"... on timeline 2"
pgctl b -w -m fast stop >/dev/null
pgctl a -w -m immediate stop >/dev/null
seckill_redis_restart_empty
ok "[ $? -eq 0 ] && [ \"\$(rcli DBSIZE)\" = 0 ]" "Redis restarted empty: every key of the prefix lost, the epoch too"
pgctl a -w start >/dev/null && seckill_wait_for "ready $a_port" 30
ok "[ $? -eq 0 ]" "the old primary restarted (timeline 1), next to the emptied Redis" || finish
refused=$(answer "$a_port" a-2)
grep -q 'ERROR:  55P03:.*lost the epoch' <<<"$refused"
ok "[ $? -eq 0 ]" "under auto, the old primary refuses to sell (55P03: Redis lost the epoch) rather than rebuild" ||
	diag "$refused"
is "$(prefix_keys)" 0 "and writes nothing to Redis"
finish
