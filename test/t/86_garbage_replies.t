#!/usr/bin/env bash
# Replies no Redis should send: the worker is pointed at a fake Redis
# (test/t/garbage_redis.py) that answers, at random from a printed seed,
# with replies of the wrong type, truncated, oversized, garbage bytes, and
# CLUSTER SLOTS replies naming more masters than seckill connects to (64
# unreachable, or 54 of which 40 accept connections), slots out of range,
# ranges that are no arrays, arrays nested 200 deep.  Nothing may crash the
# worker (a crash restarts the whole server) or hang a caller past its
# timeout; a reply naming too many masters is refused with a clear error;
# once pointed back at the real Redis, sales resume.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

log=$SECKILL_TMP/postgresql.log
seed=${SECKILL_GARBAGE_SEED:-$((RANDOM * 32768 + RANDOM))}
diag "seed $seed (SECKILL_GARBAGE_SEED=$seed reruns it)"
fake_port=$SECKILL_OWN_PORT
extra=40
work=$(mktemp -d)
fake=
cleanup() {
	[ -n "$fake" ] && kill "$fake" 2>/dev/null
	seckill_configure "RESET seckill.redis_port" "RESET seckill.redis_cluster" \
		"RESET seckill.redis_timeout" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
crashes() { grep -c -e 'terminated by signal' -e 'was terminated by' -e 'all server processes terminated' "$log" || true; }
worker_pid() { psql_val "SELECT pid FROM pg_stat_activity WHERE backend_type = 'seckill worker'"; }

goods="garbage-$(date +%s)-$$"
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
is "$(psql_val "SELECT seckill_campaign_create('$goods', 100000) > 0")" t "a campaign"
is "$(psql_val "SELECT seckill_preheat('$goods')")" 100000 "preheated"
crashes_before=$(crashes)
pid_before=$(worker_pid)

/usr/bin/python3 "$SECKILL_ROOT/test/t/garbage_redis.py" "$seed" "$fake_port" "$extra" "$work/replies" "$work/mode" &
fake=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$fake_port) 2>/dev/null" 10
ok "[ $? -eq 0 ]" "a fake Redis on port $fake_port (and $extra more)"

# A garbage reply to the epoch script may claim a newer timeline: the worker
# then stops selling until it restarts, as after a real failover.  Each
# phase starts with a fresh worker.
restart_worker() {
	local pid
	pid=$(worker_pid)
	[ -n "$pid" ] && kill -TERM "$pid"
	seckill_wait_for "[ -n \"\$(worker_pid)\" ] && [ \"\$(worker_pid)\" != '$pid' ]" 10
}

# buyers call all along, each call bounded by the request timeout
cat >"$work/buy.sql" <<SQL
\set u random(1, 1000000000)
SELECT try_buy('g-' || :u, '$goods') FROM crowd_on('buyers');
SQL
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
crowd_stoppable buyers
pgbench -n -c 8 -j 2 -T 900 -f "$work/buy.sql" >"$work/crowd.out" 2>&1 &
crowd=$!

# 1. one server, one reply of each connection garbage
seckill_configure "SET seckill.redis_timeout = 300" "SET seckill.redis_port = $fake_port"
ok "[ $? -eq 0 ]" "the worker points at the fake Redis, one server"
# garbage_until 'condition': until it holds (60 s at most), a worker fenced
# by a reply is restarted, so that the garbage goes on; restarts counts them
fenced() { grep -c 'stops selling until it restarts' "$log" || true; }
garbage_until() {
	local fences deadline=$((SECONDS + 60))
	fences=$(fenced) restarts=0
	until eval "$1" || [ $SECONDS -ge $deadline ]; do
		if [ "$(fenced)" -gt "$fences" ]; then
			restart_worker
			fences=$(fenced) restarts=$((restarts + 1))
		fi
		sleep 0.2
	done
}
garbage_until '[ "$(wc -l <"$work/replies")" -ge 300 ]'
ok "[ $(wc -l <"$work/replies") -ge 300 ]" \
	"phase 1: $(grep -vc ' fine$' "$work/replies") garbage replies of $(wc -l <"$work/replies"), $restarts worker(s) fenced by one"

# 2. a Redis Cluster, its CLUSTER SLOTS of every wrong shape too
restart_worker
seckill_configure "SET seckill.redis_cluster = on"
ok "[ $? -eq 0 ]" "the fake Redis as a Redis Cluster"
slots_before=$(grep -c 'CLUSTER SLOTS' "$work/replies")
garbage_until '[ "$(grep -c "CLUSTER SLOTS" "$work/replies")" -ge $((slots_before + 20)) ]'
slots_read=$(($(grep -c 'CLUSTER SLOTS' "$work/replies") - slots_before))
ok "[ $slots_read -ge 20 ]" "phase 2: $slots_read CLUSTER SLOTS replies read, $restarts worker(s) fenced by one"
for kind in many-unreachable many-reachable out-of-range wrong-types nested; do
	ok "grep -q 'CLUSTER SLOTS $kind' '$work/replies'" "CLUSTER SLOTS $kind was among them"
done

# 3. CLUSTER SLOTS naming more masters than seckill connects to, and nothing
#    else wrong: refused with a clear error
for kind in many-reachable many-unreachable; do
	echo "$kind" >"$work/mode"
	restart_worker
	seckill_wait_for "psql -XAtq -c \"SELECT seckill_buy('probe', '$goods')\" >'$work/probe' 2>&1; grep -q 'more than 32 masters' '$work/probe'" 20
	ok "[ $? -eq 0 ]" "phase 3: CLUSTER SLOTS $kind is refused: the Redis Cluster names more than 32 masters" ||
		diag "the last answer: $(cat "$work/probe")"
done
rm -f "$work/mode"
crowd_stop buyers
wait "$crowd"
crowd_stopped buyers "$work/crowd.out"
seckill_configure "RESET seckill.redis_cluster" "RESET seckill.redis_port" "RESET seckill.redis_timeout"
kill "$fake" 2>/dev/null
fake=

is "$(($(crashes) - crashes_before))" 0 "no process crashed: the server never restarted"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE took_ms > 1000 * extract(epoch FROM current_setting('seckill.request_timeout')::interval) + 1000")" 0 \
	"no call hung: $(psql_val "SELECT count(*) FROM stampede_answers") calls, the slowest in $(psql_val "SELECT round(max(took_ms)) FROM stampede_answers") ms"
diag "answers: $(psql_val "SELECT string_agg(coalesce(status, '') || ' ' || coalesce(err, '') || ' ' || n, ', ')
	FROM (SELECT status, split_part(err, ' ', 1) err, count(*) n FROM stampede_answers GROUP BY 1, 2 ORDER BY 3 DESC) s")"
restart_worker
ok "[ $? -eq 0 ]" "a fresh worker (pid $(worker_pid), was $pid_before)"
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('after-garbage', '$goods')\" 2>/dev/null)\" = ok ]" 20
ok "[ $? -eq 0 ]" "back on the real Redis, purchases succeed again"
seckill_wait_for "[ \"\$(psql_val \"SELECT redis_stock = pg_stock AND in_flight = 0 FROM seckill_status('$goods')\")\" = t ]" 10
ok "[ $? -eq 0 ]" "and Redis agrees with PostgreSQL"
psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
