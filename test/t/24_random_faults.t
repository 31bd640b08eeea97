#!/usr/bin/env bash
# Randomized faults, Jepsen-style.  For SECKILL_FAULT_SECONDS (120) a client
# of 16 to 32 connections (test/t/fault_client.py) buys on three campaigns, a
# larger one, one of 4 stock shards and a tiny one, for pools of users that
# repeat, with double clicks and calls that time out, and logs every answer
# outside PostgreSQL.  Meanwhile a nemesis driven by a seed (printed first:
# SECKILL_FAULT_SEED=N reruns it) kills the worker, cancels it in bursts,
# stops Redis, restarts it empty, cuts the network to it (the worker reaches
# Redis through a socat relay that is frozen), restarts PostgreSQL at once,
# and acts as a DBA mid-sale: reconcile, restock, release of expired orders,
# cancellation of orders.  Beside the sale, 6 sessions take a fair lock in
# turn and log each hold.  Then everything is healed and the checker holds
# the log against the invariants of shared/DESIGN.md (I1-I9), each on a line
# of its own, and the holds: never two holders at once; with a standby, it
# holds the primary's orders row for row.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

seconds=${SECKILL_FAULT_SECONDS:-120}
seed=${SECKILL_FAULT_SEED:-$(((RANDOM << 15 | RANDOM) % 1000000))}
RANDOM=$seed
# a synchronous standby, for half the seeds (SECKILL_FAULT_PAIR=1 or 0 to choose)
pair=${SECKILL_FAULT_PAIR:-$((RANDOM % 2))}
diag "seed $seed, $([ "$pair" = 1 ] && echo "a primary and its standby" || echo "a lone server"); to rerun:" \
	"SECKILL_FAULT_SEED=$seed SECKILL_FAULT_PAIR=$pair SECKILL_FAULT_SECONDS=$seconds bash scripts/test.sh test/t/24_random_faults.t"
# a sold_out answer this long after the last fault or DBA action, while
# PostgreSQL holds unsold stock of the campaign, is false (I7, I9)
grace=5

work=$(mktemp -d -p "$SECKILL_TMP" faults.XXXXXX)
relay_port=$SECKILL_OWN_PORT
relay=
client=
holders=
ports_free SECKILL_REDIS_PORT "$relay_port"
standby_port=
if [ "$pair" = 1 ]; then
	standby_port=$((SECKILL_OWN_PORT + 1))
	standby_dir=$SECKILL_TMP/standby
	standby_log=$SECKILL_TMP/standby.log
	ports_free SECKILL_OWN_PORT "$standby_port"
	export SECKILL_PGLOG=$SECKILL_TMP/postgresql.log
fi
first_pgdata=$SECKILL_PGDATA

# socat forks a process per connection: signal them all
relay_signal() { kill "-$1" "$relay" $(pgrep -P "$relay") 2>/dev/null; }
redis_pid() { cat "$SECKILL_TMP/redis.pid" 2>/dev/null; }
worker_pid() { seckill_worker_pid 2>/dev/null; }
worker_up() { seckill_pg_ready && [ -n "$(worker_pid)" ]; }
# a worker other than the one given (killed, or gone with its server)
worker_replaced() {
	local pid
	seckill_pg_ready && pid=$(worker_pid) && [ -n "$pid" ] && [ "$pid" != "$1" ]
}
seconds_ms() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

# heal: every fault undone, whatever the nemesis left
heal() {
	local pid
	pid=$(redis_pid)
	[ -n "$pid" ] && kill -CONT "$pid" 2>/dev/null
	[ -n "$relay" ] && relay_signal CONT
	seckill_redis_ready || seckill_redis_start
	seckill_pg_ready || seckill_pg_ctl -w start >/dev/null
	seckill_wait_for worker_up 60
}
# the pair's servers other than the one test/run.sh stops
pair_stop() {
	local dir
	for dir in "$SECKILL_PGDATA" ${standby_dir:+"$standby_dir"}; do
		[ "$dir" != "$first_pgdata" ] && [ -f "$dir/postmaster.pid" ] &&
			seckill_as_postgres pg_ctl -D "$dir" -w -m immediate stop >/dev/null 2>&1
	done
}
cleanup() {
	[ -n "$client" ] && kill "$client" 2>/dev/null && wait "$client"
	[ -n "$holders" ] && kill "$holders" 2>/dev/null && wait "$holders"
	heal >/dev/null 2>&1
	seckill_configure "RESET seckill.redis_port" >/dev/null 2>&1
	[ -n "$relay" ] && relay_signal TERM
	pair_stop
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

# The worker reaches Redis through a relay for the whole run
socat TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$SECKILL_REDIS_PORT" \
	2>"$work/relay.err" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
ok "[ $? -eq 0 ]" "a TCP relay to Redis on port $relay_port" || done_testing
seckill_configure "SET seckill.redis_port = $relay_port"
ok "[ $? -eq 0 ]" "the worker reaches Redis through the relay" || done_testing

# The standby: a base backup of the primary (its settings with it), started
# on the other port, made synchronous once it streams, so that a failover
# loses no ok
sync_standby() {
	[ "$(psql_val "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync' AND state = 'streaming'")" = 1 ]
}
make_standby() {
	rm -rf "$standby_dir"
	seckill_as_postgres pg_basebackup -h 127.0.0.1 -p "$PGPORT" -U postgres -D "$standby_dir" -R -X stream -c fast \
		>"$work/basebackup.out" 2>&1 || return 1
	echo "port = $standby_port" >>"$standby_dir/postgresql.conf"
	seckill_as_postgres pg_ctl -D "$standby_dir" -l "$standby_log" -w start >/dev/null || return 1
	psql_val "ALTER SYSTEM SET synchronous_standby_names = '*'" >/dev/null &&
		psql_val "SELECT pg_reload_conf()" >/dev/null &&
		seckill_wait_for sync_standby 30
}
if [ "$pair" = 1 ]; then
	make_standby
	ok "[ $? -eq 0 ]" "a synchronous standby on port $standby_port" ||
		done_testing_with_logs 20 "$work/basebackup.out" "$standby_log"
fi
# the client's servers: the primary, and the standby it may become (libpq
# tries them in turn and keeps the one that takes writes)
client_env=()
[ "$pair" = 1 ] && client_env=(PGHOST=127.0.0.1,127.0.0.1 PGPORT="$PGPORT,$standby_port" PGTARGETSESSIONATTRS=read-write)

# The campaigns: a larger one whose buyers keep coming (a pool of users that
# grows), one of 4 stock shards and a tiny one for fixed pools of 400 users,
# so that both sell out and their buyers ask again; and one with a waiting
# room, whose 400 buyers join its line and buy once admitted.  Unpaid
# orders expire after 20 s, never, 3 s and 5 s.
tag="$seed-$$"
big=rf-big-$tag
sharded=rf-sharded-$tag
tiny=rf-tiny-$tag
tiny_stock=$((RANDOM % 8 + 3))
queued=rf-queue-$tag
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -XAtq -v ON_ERROR_STOP=1 >/dev/null <<SQL
SELECT seckill_campaign_create('$big', 100000, payment_timeout => '20 seconds');
SELECT seckill_campaign_create('$sharded', 200);
SELECT seckill_campaign_set('$sharded', '{"shards": 4}');
SELECT seckill_campaign_create('$tiny', $tiny_stock, payment_timeout => '3 seconds');
SELECT seckill_campaign_create('$queued', 40, payment_timeout => '5 seconds');
SELECT seckill_campaign_set('$queued', '{"queue": {"pass_ttl": "5 seconds", "admit_factor": 2}}');
SELECT seckill_preheat('$big'), seckill_preheat('$sharded'), seckill_preheat('$tiny'), seckill_preheat('$queued');
SQL
ok "[ $? -eq 0 ]" "campaigns preheated: $big (100000), $sharded (200 in 4 shards), $tiny ($tiny_stock), $queued (40, a waiting room)" || done_testing
ids=$(psql_val "SELECT string_agg(id::text, ',') FROM seckill.campaigns WHERE goods IN ('$big', '$sharded', '$tiny', '$queued')")

# The client
connections=$((RANDOM % 17 + 16))
pairs=4
: >"$work/answers.log"
env "${client_env[@]}" /usr/bin/python3 "$SECKILL_ROOT/test/t/fault_client.py" run "$work/answers.log" "$work/monitor.log" "$work/stop" \
	"$seed" "$connections" "$pairs" "$big:sliding:3" "$sharded:400" "$tiny:400" "$queued:400:1:queue" 2>"$work/client.err" &
client=$!
oks() { grep -c $'\tok\t' "$work/answers.log"; }
seckill_wait_for "[ \$(oks) -ge 100 ]" 30
ok "[ $? -eq 0 ]" "the sale is under way: $connections connections, $pairs of them pairs of double clicks" || done_testing
env "${client_env[@]}" /usr/bin/python3 "$SECKILL_ROOT/test/t/fault_client.py" locks "$work/locks.log" "$work/stop" 6 "rf-lock-$seed" \
	2>"$work/holders.err" &
holders=$!
started=$(seckill_now_ms)

# The nemesis: every kind of action once in an order of the seed's, then
# kinds of the seed's until the time is up, a pause of 0.5 to 9 s after each.
# Each is logged in nemesis.log with its start and end (ms) once it is over
# (a fault healed, a DBA's call returned).
pick_goods() {
	case $((RANDOM % 4)) in
	0 | 1) echo "$tiny" ;;
	2) echo "$sharded" ;;
	3) echo "$big" ;;
	esac
}
nemesis_kill_worker() {
	local pid
	pid=$(worker_pid)
	[ -n "$pid" ] || { detail="no worker to kill"; return; }
	kill -KILL "$pid"
	seckill_wait_for "worker_replaced $pid" 60 2>/dev/null
	detail="SIGKILL worker $pid; cluster and worker back: $(worker_pid)"
}
# a burst of 5 to 40 cancels of the worker, 0 to 20 ms apart, from one session
nemesis_cancel_worker() {
	local n=$((RANDOM % 36 + 5)) gap=$((RANDOM % 20)) pid cancelled
	pid=$(worker_pid)
	[ -n "$pid" ] || { detail="no worker to cancel"; return; }
	cancelled=$(for ((i = 0; i < n; i++)); do
		echo "SELECT pg_cancel_backend($pid); SELECT pg_sleep($gap / 1000.0);"
	done | psql -XAtq 2>/dev/null | grep -c '^t$')
	detail="pg_cancel_backend of worker $pid $cancelled/$n times, $gap ms apart"
}
# stalled: half the time the worker is also cancelled while Redis does not
# answer, as a DBA would a stuck worker
stalled() {
	local ms=$1 half
	if [ $((RANDOM % 2)) -eq 0 ]; then
		half=$((ms / 2))
		sleep "$(seconds_ms "$half")"
		nemesis_cancel_worker
		detail="meanwhile $detail"
		ms=$((ms - half))
	fi
	sleep "$(seconds_ms "$ms")"
}
nemesis_redis_stop() {
	local ms=$((RANDOM % 3000 + 1000)) pid
	pid=$(redis_pid)
	kill -STOP "$pid"
	stalled "$ms"
	kill -CONT "$pid"
	detail="Redis $pid stopped (SIGSTOP) for $ms ms${detail:+; $detail}"
}
# with a standby, the DBA's runbook (docs/OPERATIONS.md): the primary waits
# for seckill_epoch_claim() after Redis lost its data, run 0.2 to 3 s later
claimed() { timeline=$(psql_val "SELECT seckill_epoch_claim()" 2>/dev/null) && [ -n "$timeline" ]; }
nemesis_redis_empty() {
	local t0 timeline=
	seckill_redis_restart_empty
	detail="Redis restarted empty: $(seckill_redis_ready && echo up || echo down)"
	[ "$pair" = 1 ] || return 0
	sleep "$(seconds_ms $((RANDOM % 2800 + 200)))"
	t0=$(seckill_now_ms)
	seckill_wait_for claimed 30 2>/dev/null
	detail+="; seckill_epoch_claim(): ${timeline:-failed} after $(($(seckill_now_ms) - t0)) ms"
}
# the primary crashes, the standby is promoted and, once it sells, the old
# primary is made its synchronous standby (no synchronous standby is asked
# for meanwhile, as Patroni does, else its commits would wait)
nemesis_pg_failover() {
	local pid t0 took old_port=$PGPORT old_dir=$SECKILL_PGDATA old_log=$SECKILL_PGLOG
	pid=$(worker_pid)
	t0=$(seckill_now_ms)
	seckill_pg_ctl -m immediate stop >/dev/null 2>&1
	seckill_as_postgres pg_ctl -D "$standby_dir" -w promote >/dev/null 2>&1
	PGPORT=$standby_port SECKILL_PGDATA=$standby_dir SECKILL_PGLOG=$standby_log
	standby_port=$old_port standby_dir=$old_dir standby_log=$old_log
	psql_val "ALTER SYSTEM RESET synchronous_standby_names" >/dev/null 2>&1
	psql_val "SELECT pg_reload_conf()" >/dev/null 2>&1
	seckill_wait_for "worker_replaced ${pid:-none}" 60 2>/dev/null
	took=$(($(seckill_now_ms) - t0))
	detail="primary on port $old_port crashed, the standby on port $PGPORT promoted to timeline"
	detail+=" $(psql_val "SELECT ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int" 2>&1),"
	detail+=" worker $(worker_pid) in $took ms;"
	t0=$(seckill_now_ms)
	make_standby >/dev/null 2>&1
	detail+=" the old primary made its synchronous standby: $(sync_standby && echo done || echo failed)"
	detail+=" in $(($(seckill_now_ms) - t0)) ms"
}
nemesis_net_cut() {
	local ms=$((RANDOM % 4000 + 1000))
	relay_signal STOP
	stalled "$ms"
	relay_signal CONT
	detail="the relay to Redis frozen for $ms ms${detail:+; $detail}"
}
nemesis_pg_restart() {
	local pid
	pid=$(worker_pid)
	seckill_pg_ctl -m immediate stop >/dev/null 2>&1
	seckill_pg_ctl -w start >/dev/null 2>&1
	seckill_wait_for "worker_replaced ${pid:-none}" 60 2>/dev/null
	detail="PostgreSQL stopped (immediate) and started; worker $(worker_pid)"
}
nemesis_reconcile() {
	detail="seckill_reconcile(): $(psql_val "SELECT string_agg(campaign_goods || ' repaired ' || repaired, ', ')
		FROM seckill_reconcile()" 2>&1)"
}
nemesis_restock() {
	local goods delta
	goods=$(pick_goods)
	if [ "$goods" = "$tiny" ]; then delta=$((RANDOM % 3 + 1)); else delta=$((RANDOM % 20 + 5)); fi
	detail="seckill_restock('$goods', $delta): $(psql_val "SELECT seckill_restock('$goods', $delta)" 2>&1)"
}
nemesis_release() {
	detail="seckill_release_expired(): $(psql_val "SELECT string_agg(campaign_goods || ' ' ||
		coalesce(released::text, 'failed'), ', ') FROM seckill_release_expired()" 2>&1)"
}
nemesis_cancel_orders() {
	local goods n=$((RANDOM % 4 + 1)) salt=$RANDOM id
	goods=$(pick_goods)
	detail="seckill_cancel() of $n orders of $goods:"
	for id in $(psql_val "SELECT o.id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
		WHERE c.goods = '$goods' AND o.status = 'reserved' ORDER BY md5(o.id || '$salt') LIMIT $n" 2>/dev/null); do
		detail+=" $id $(psql_val "SELECT seckill_cancel($id)" 2>&1 | head -1)"
	done
}
act() {
	local t0 t1
	detail=
	t0=$(seckill_now_ms)
	"nemesis_$1"
	t1=$(seckill_now_ms)
	detail=$(printf '%s' "$detail" | tr '\t\n' '  ')
	printf '%s\t%s\t%s\t%s\n' "$t0" "$t1" "$1" "$detail" >>"$work/nemesis.log"
	note "nemesis at $(seconds_ms $((t0 - started))) s, $((t1 - t0)) ms: $1: $detail"
}

kinds=(kill_worker cancel_worker redis_stop redis_empty net_cut pg_restart reconcile restock release cancel_orders)
[ "$pair" = 1 ] && kinds+=(pg_failover)
order=("${kinds[@]}")
for ((i = ${#order[@]} - 1; i > 0; i--)); do
	j=$((RANDOM % (i + 1)))
	k=${order[i]}
	order[i]=${order[j]}
	order[j]=$k
done
: >"$work/nemesis.log"
deadline=$((started + seconds * 1000))
n=0
while [ "$(seckill_now_ms)" -lt "$deadline" ]; do
	if [ "$n" -lt ${#order[@]} ]; then kind=${order[n]}; else kind=${kinds[RANDOM % ${#kinds[@]}]}; fi
	n=$((n + 1))
	act "$kind"
	pause=$((RANDOM % 8500 + 500))
	left=$((deadline - $(seckill_now_ms)))
	[ "$left" -gt 0 ] && sleep "$(seconds_ms $((pause < left ? pause : left)))"
done
diag "the nemesis: $(cut -f3 "$work/nemesis.log" | sort | uniq -c | awk '{ printf "%s%s %d", (NR > 1 ? ", " : ""), $2, $1 }')"

# Heal, while the client goes on buying: thaw, restart what is down, then
# wait until every campaign with unsold stock in PostgreSQL sells again (a
# probe purchase by a fresh buyer answers ok)
nemesis_heal() {
	heal
	detail="healed: PostgreSQL, worker $(worker_pid), Redis $(redis_pid)"
}
act heal
ok worker_up "healed: Redis thawed and up, the relay thawed, PostgreSQL and its worker up"
probing=" ${ids//,/ } "
sells_again() {
	local cid goods unsold status
	for cid in $probing; do
		read -r goods unsold <<<"$(psql_val "SELECT goods, total_stock - sold FROM seckill.campaigns WHERE id = $cid" \
			2>/dev/null | tr '|' ' ')"
		[ -n "$unsold" ] || continue
		if [ "$unsold" -gt 0 ]; then
			status=$(psql_val "SELECT status FROM seckill_buy('heal-probe-$cid-$(seckill_now_ms)', '$goods')" 2>/dev/null)
			[ "$status" = ok ] || continue
		fi
		probing=${probing/ $cid / }
	done
	[ -z "${probing// /}" ]
}
healed=$(seckill_now_ms)
seckill_wait_for sells_again 20 2>/dev/null
ok "[ $? -eq 0 ]" "after the heal every campaign with unsold stock in PostgreSQL sells again, within 20 s" &&
	diag "every campaign sells again $(($(seckill_now_ms) - healed)) ms after the heal" ||
	diag "still not selling after 20 s: $(psql_val "SELECT string_agg(goods || ', ' || (total_stock - sold) || ' unsold', '; ')
		FROM seckill.campaigns WHERE id IN ($(echo "$probing" | xargs | tr ' ' ','))")"
# the client buys on for longer than the grace: a false sold_out shows
sleep $((grace + 2))
touch "$work/stop"
seckill_wait_for "! kill -0 $client 2>/dev/null" 60
ok "[ $? -eq 0 ]" "the client stopped"
wait "$client"
client=
[ -s "$work/client.err" ] && diag "client's stderr: $(head -20 "$work/client.err")"
seckill_wait_for "! kill -0 $holders 2>/dev/null" 30
wait "$holders"
holders=
[ -s "$work/holders.err" ] && diag "lock holders' stderr: $(head -20 "$work/holders.err")"

# What seckill_order() tells now of every purchase of unknown fate, and what
# the request slots of fresh sessions, more than the client had, find
/usr/bin/python3 "$SECKILL_ROOT/test/t/fault_client.py" resolve "$work/answers.log" "$work/resolved.log"
ok "[ $? -eq 0 ]" "seckill_order() asked after the heal for each purchase of unknown fate"

psql -Xq -v ON_ERROR_STOP=1 <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS rf_answers, rf_monitor, rf_nemesis, rf_resolved, rf_quiet, rf_false_sold_out;
CREATE TABLE rf_answers (kind text, t0 bigint, t1 bigint, conn int, user_id text, goods text, status text,
	order_id bigint, sqlstate text, timeout_ms int, ref bigint, message text);
\\copy rf_answers FROM '$work/answers.log'
CREATE TABLE rf_monitor (t0 bigint, t1 bigint, goods text, unsold int);
\\copy rf_monitor FROM '$work/monitor.log'
CREATE INDEX ON rf_monitor (goods, t0);
CREATE TABLE rf_nemesis (t0 bigint, t1 bigint, action text, detail text);
\\copy rf_nemesis FROM '$work/nemesis.log'
CREATE TABLE rf_resolved (user_id text, goods text, status text, order_id bigint, sqlstate text,
	table_status text, table_order_id bigint);
\\copy rf_resolved FROM '$work/resolved.log'
SQL
ok "[ $? -eq 0 ]" "the logs of the client, the monitor and the nemesis loaded for the checker" || done_testing
calls=$(psql_val "SELECT count(*) FROM rf_answers WHERE kind = 'A'")
diag "answers: $(psql_val "SELECT string_agg(s || ' ' || n, ', ' ORDER BY n DESC) FROM (SELECT
	CASE status WHEN 'error' THEN 'error ' || sqlstate ELSE status END s, count(*) n FROM rf_answers
	WHERE kind = 'A' GROUP BY 1) x")" \
	"slowest call: $(psql_val "SELECT max(t1 - t0) FROM rf_answers WHERE kind = 'A'") ms"
ok "[ $calls -ge 2000 ]" "the client made $calls calls"

# the errors after which a purchase may have been made (docs/REFERENCE.md: ask
# seckill_order()), and connections lost to a server going down
unknown_fate="(sqlstate IN ('SK001', 'SK003', '38000', '57014', 'conn') OR sqlstate LIKE '08%' OR sqlstate LIKE '57P%')"
# examples "SQL": a few rows, for the diagnostics of a failed check
examples() { psql -XAq -F ' ' -P footer=off -c "$1 LIMIT 5" 2>&1; }
campaign_of="JOIN seckill.campaigns c ON c.goods = a.goods AND c.id IN ($ids)"

# 1. I1: no oversell, and sold is what the active orders hold
is "$(psql_val "SELECT coalesce(string_agg(c.goods || ': stock ' || c.total_stock || ', sold ' || c.sold
	|| ', active orders ' || a.qty, '; '), '') FROM seckill.campaigns c, LATERAL (SELECT coalesce(sum(qty), 0) qty
	FROM seckill.orders o WHERE o.campaign_id = c.id AND o.status <> 'cancelled') a
	WHERE c.id IN ($ids) AND NOT (a.qty <= c.total_stock AND a.qty = c.sold)")" "" \
	"1. no oversell: per campaign active orders <= total_stock, and sold = active orders"

# 2. I2: one active order per user and campaign
is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders WHERE campaign_id IN ($ids)
	AND status <> 'cancelled' GROUP BY campaign_id, user_id HAVING count(*) > 1) d")" 0 \
	"2. no double order: one active order per campaign and user"

# 3. I3: every ok has its order, with that user (cancelled since, maybe)
lost="FROM rf_answers a $campaign_of WHERE a.kind = 'A' AND a.status = 'ok' AND NOT EXISTS (SELECT 1
	FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id AND o.campaign_id = c.id)"
n=$(psql_val "SELECT count(*) $lost")
is "$n" 0 "3. every ok answer ($(psql_val "SELECT count(*) FROM rf_answers WHERE kind = 'A' AND status = 'ok'")) has its order row, with its user" ||
	diag "$(examples "SELECT a.t0 - $started AS at_ms, a.user_id, a.goods, a.order_id $lost")"

# 4. I7: every duplicate names the user's real order
wrong="FROM rf_answers a $campaign_of WHERE a.kind = 'A' AND a.status = 'duplicate' AND NOT EXISTS (SELECT 1
	FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id AND o.campaign_id = c.id)"
n=$(psql_val "SELECT count(*) $wrong")
is "$n" 0 "4. every duplicate answer ($(psql_val "SELECT count(*) FROM rf_answers WHERE kind = 'A'
	AND status = 'duplicate'")) names the user's order in that campaign" ||
	diag "$(psql_val "SELECT count(*) FILTER (WHERE a.order_id IS NULL) || ' of them with a NULL order_id' $wrong")" \
		"$(examples "SELECT a.t0 - $started AS at_ms, a.user_id, a.goods, a.order_id $wrong")"

# 5. I7: the fate of every call of unknown outcome, as seckill_order() told
# it: during the run (when the client asked), a named order exists for that
# user and campaign, and "none" denies no order older than the call by more
# than the worker's longest transaction (worker_statement_timeout, 10 s);
# after the heal, seckill_order() answers, and what seckill.orders holds
unknown=$(psql_val "SELECT count(*) FROM rf_answers WHERE kind = 'A' AND status = 'error' AND $unknown_fate")
named="FROM rf_answers a $campaign_of WHERE a.kind = 'R' AND a.status IN ('reserved', 'paid', 'cancelled')
	AND NOT EXISTS (SELECT 1 FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id AND o.campaign_id = c.id)"
denied="FROM rf_answers a $campaign_of WHERE a.kind = 'R' AND a.status = 'none' AND EXISTS (SELECT 1
	FROM seckill.orders o WHERE o.campaign_id = c.id AND o.user_id = a.user_id
	AND o.created_at < to_timestamp((a.ref - 11000) / 1000.0))"
differ="FROM rf_resolved r WHERE r.status = 'error' OR (r.status, r.order_id) IS DISTINCT FROM (r.table_status, r.table_order_id)"
bad=$(psql_val "SELECT (SELECT count(*) $named) + (SELECT count(*) $denied) + (SELECT count(*) $differ)")
is "$bad" 0 "5. every unknown-fate error ($unknown, of $(psql_val "SELECT count(*) FROM rf_resolved") users) is resolved by seckill_order() to what seckill.orders holds" ||
	diag "during the run, named an order that is not theirs: $(psql_val "SELECT count(*) $named")" \
		"$(examples "SELECT a.t0 - $started AS at_ms, a.user_id, a.goods, a.status, a.order_id $named")" \
		"during the run, none for an older order: $(psql_val "SELECT count(*) $denied")" \
		"$(examples "SELECT a.ref - $started AS call_at_ms, a.user_id, a.goods $denied")" \
		"after the heal, an error or another answer than seckill.orders: $(psql_val "SELECT count(*) $differ")" \
		"$(examples "SELECT r.* $differ")"
diag "unknown-fate errors asked during the run: $(psql_val "SELECT string_agg(status || ' ' || n, ', ') FROM
	(SELECT status, count(*) n FROM rf_answers WHERE kind = 'R' GROUP BY 1) x")"

# Each answer with the nemesis' last action before its end (quiet_since:
# when that ended) and its next action (next_action: when it began)
psql -Xq -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE TABLE rf_quiet AS
SELECT a.*, coalesce(q.quiet_since, 0) AS quiet_since, q.last_action,
	coalesce(x.next_action, 9223372036854775807) AS next_action
FROM rf_answers a
LEFT JOIN LATERAL (SELECT n.t1 AS quiet_since, n.action || ' at ' || round((n.t0 - $started) / 1000.0, 1) || ' s'
	AS last_action FROM rf_nemesis n WHERE n.t0 <= a.t1 ORDER BY n.t1 DESC LIMIT 1) q ON true
LEFT JOIN LATERAL (SELECT min(n.t0) AS next_action FROM rf_nemesis n WHERE n.t0 > a.t1) x ON true
WHERE a.kind = 'A';
SQL

# 6. I7, I9: no sold_out while PostgreSQL holds unsold stock, once the
# grace after the last fault or DBA action has passed.  A sold_out answer
# (a call from t0 to t1) is false when nothing of the nemesis ran from t0 -
# grace to t1, and the first sample of the monitor 250 ms or more after
# t1, taken before the nemesis' next action, saw stock unsold in
# PostgreSQL.  Only the nemesis gives stock back, so stock unsold then was
# unsold at t1 too.  (Not the first sample after t1: the last items may be
# reserved in Redis by a round whose commit is staged for the next one's,
# a few milliseconds, during which PostgreSQL counts them unsold though no
# caller can have them: the sold_out answered then is true.)
psql -Xq -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE TABLE rf_false_sold_out AS
SELECT a.t0, a.t1, a.goods, a.quiet_since, a.last_action, m.unsold
FROM rf_quiet a
CROSS JOIN LATERAL (SELECT m.unsold FROM rf_monitor m WHERE m.goods = a.goods AND m.t0 >= a.t1 + 250
	AND m.t1 < a.next_action ORDER BY m.t0 LIMIT 1) m
WHERE a.status = 'sold_out' AND a.quiet_since < a.t0 - $grace * 1000 AND m.unsold > 0;
SQL
n=$(psql_val "SELECT count(*) FROM rf_false_sold_out")
is "$n" 0 "6. no sold_out answer more than $grace s after the last fault or DBA action while PostgreSQL had unsold stock" ||
	diag "$(psql_val "SELECT f.goods || ': ' || f.n || ' false sold_out; the latest ' || round((f.t1 - f.quiet_since) / 1000.0, 1)
		|| ' s after the end of ' || coalesce(f.last_action, 'nothing (the run had just begun)') || ', ' || f.unsold || ' unsold in PostgreSQL; meanwhile it answered '
		|| (SELECT string_agg(status || ' ' || c, ', ') FROM (SELECT status, count(*) c FROM rf_quiet b
			WHERE b.goods = f.goods AND b.t1 > f.quiet_since AND b.t1 <= f.t1 GROUP BY 1 ORDER BY 2 DESC) s)
		FROM (SELECT DISTINCT ON (goods) goods, count(*) OVER (PARTITION BY goods) n, quiet_since, last_action, t1, unsold
			FROM rf_false_sold_out ORDER BY goods, t1 - quiet_since DESC) f")"
diag "$(psql_val "SELECT 'check 6 held ' || count(*) FILTER (WHERE m.unsold IS NOT NULL) || ' sold_out answer(s) past the grace against PostgreSQL 250 ms later; '
	|| count(*) FILTER (WHERE m.unsold IS NULL) || ' more had no sample of the monitor before the next action'
	FROM rf_quiet a LEFT JOIN LATERAL (SELECT m.unsold FROM rf_monitor m WHERE m.goods = a.goods AND m.t0 >= a.t1 + 250
		AND m.t1 < a.next_action ORDER BY m.t0 LIMIT 1) m ON true
	WHERE a.status = 'sold_out' AND a.quiet_since < a.t0 - $grace * 1000")"

# 7. I9: after the heal, without a reconcile, Redis agrees with PostgreSQL for
# every campaign: stock = total - sold, journal settled, a buyer per active order
agreement="SELECT c.goods, s.redis_stock, s.pg_stock, s.in_flight, s.redis_buyers, (SELECT count(*) FROM seckill.orders o
	WHERE o.campaign_id = c.id AND o.status <> 'cancelled') AS active_orders
	FROM seckill.campaigns c, LATERAL seckill_status(c.goods) s WHERE c.id IN ($ids)"
agree() {
	[ "$(psql_val "SELECT count(*) FROM ($agreement) x WHERE (redis_stock, in_flight, redis_buyers)
		IS DISTINCT FROM (pg_stock, 0, active_orders)" 2>/dev/null)" = 0 ]
}
seckill_wait_for agree 10 2>/dev/null
ok "[ $? -eq 0 ]" "7. after the heal, without a reconcile, Redis agrees with PostgreSQL: stock = total_stock - sold, journal empty, a buyer per active order" ||
	diag "$(examples "$agreement")"

# 8. I4: no reservation both an order and a compensation
is "$(psql_val "SELECT count(*) FROM seckill.compensations k JOIN seckill.orders o ON o.id = k.request_id
	WHERE k.campaign_id IN ($ids)")" 0 "8. no compensation is also an order"

# 9. I9: no request slot lost to a cancel, a crash or a timeout.  In the
# run: no call of the default timeout (5 s) that began more than the grace
# after the nemesis' last action failed for want of a free slot of its
# connection (SK002 "... before it was made": both slots held by earlier
# requests given up on, which a live worker frees within milliseconds).
# After the heal, fresh sessions, more than the client had, all open at
# once: none lost a slot (fault_client.py slots: with the worker frozen, a
# request given up on holds one slot of each, and a second one finds the
# other free unless it was lost), and the worker frees what they gave up on.
starved="FROM rf_quiet WHERE sqlstate = 'SK002' AND message LIKE '%before it was made%' AND timeout_ms IS NULL
	AND quiet_since < t0 - $grace * 1000"
sessions=$((connections + 16))
/usr/bin/python3 "$SECKILL_ROOT/test/t/fault_client.py" slots "$sessions" "$big" "$work/slots.log"
probed=$(sed -n 's/^calls //p' "$work/slots.log")
is "$(psql_val "SELECT count(*) $starved")/$(grep -c 'before it was made' "$work/slots.log")" 0/0 \
	"9. no request slot leaked: no SK002 before it was made in the run after the grace, nor in ${probed:-no} calls of $sessions fresh sessions" ||
	diag "in the run: $(examples "SELECT round((t0 - $started) / 1000.0, 1) AS at_s, conn, last_action, message $starved")" \
		"fresh sessions: $(grep 'before it was made' "$work/slots.log" | cut -c1-200 | sort | uniq -c | sort -rn | head -3)"
diag "fresh sessions' answers: $(grep -v '^calls ' "$work/slots.log" | cut -d' ' -f1,2 | sort | uniq -c | xargs)"
is "$(grep -Ec '^(live|thawed) [^a]' "$work/slots.log")" 0 \
	"the fresh sessions' calls with the worker live all answered, before and after it was frozen"

# 10. I7: every error is one docs/REFERENCE.md documents for seckill_buy, or a
# connection lost to a server going down
is "$(psql_val "SELECT coalesce(string_agg(DISTINCT sqlstate || ' ' || left(message, 100), '; '), '') FROM rf_answers
	WHERE kind = 'A' AND status = 'error' AND NOT ($unknown_fate OR sqlstate IN ('SK002', '55P03'))")" "" \
	"10. every error has a documented SQLSTATE"

# 12-14. The waiting room: every place answered is kept, with its ticket,
# and one ticket per buyer; admissions follow the line; every order was
# bought with a pass given before it
queue_id=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$queued'")
lost_place="FROM rf_answers a WHERE a.kind = 'J' AND a.goods = '$queued' AND a.order_id IS NOT NULL
	AND NOT EXISTS (SELECT FROM seckill.queue_places p WHERE p.campaign_id = $queue_id AND p.user_id = a.user_id
	AND p.ticket = a.order_id)"
is "$(psql_val "SELECT count(*) $lost_place") $(psql_val "SELECT count(*) FROM (SELECT user_id FROM rf_answers
	WHERE kind = 'J' AND goods = '$queued' AND order_id IS NOT NULL GROUP BY user_id HAVING count(DISTINCT order_id) > 1) x")" "0 0" \
	"12. every place answered ($(psql_val "SELECT count(*) FROM rf_answers WHERE kind = 'J' AND order_id IS NOT NULL") joins) is kept with its ticket, one ticket per buyer" ||
	diag "$(examples "SELECT a.t0 - $started AS at_ms, a.user_id, a.order_id AS ticket $lost_place")"
is "$(psql_val "SELECT count(*) FILTER (WHERE (p.admitted_at IS NOT NULL) <> (p.ticket <= coalesce(l.admitted_through, 0)))
	|| ' ' || (count(*) = max(p.ticket)) FROM seckill.queue_places p LEFT JOIN seckill.queue_lines l USING (campaign_id)
	WHERE p.campaign_id = $queue_id")" "0 true" \
	"13. the admitted places ($(psql_val "SELECT admitted_through FROM seckill.queue_lines WHERE campaign_id = $queue_id")) are the line's first, numbered without a gap"
is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE o.campaign_id = $queue_id AND NOT EXISTS (SELECT
	FROM seckill.queue_places p WHERE p.campaign_id = o.campaign_id AND p.user_id = o.user_id AND p.admitted_at <= o.created_at)")" 0 \
	"14. every order of the waiting room ($(psql_val "SELECT count(*) FROM seckill.orders WHERE campaign_id = $queue_id")) was bought with a pass given before it"
diag "waiting room: $(psql_val "SELECT string_agg(s || ' ' || n, ', ' ORDER BY n DESC) FROM (SELECT CASE status WHEN 'error'
	THEN 'join error ' || sqlstate ELSE status END s, count(*) n FROM rf_answers WHERE goods = '$queued'
	GROUP BY 1) x")"

# 11. The lock's holds that ended: no two at once, each token newer than
# those granted before
alone=$(/usr/bin/python3 "$SECKILL_ROOT/test/t/fault_client.py" alone "$work/locks.log")
diag "lock holders: $alone; errors: $(awk -F'\t' '$1 == "E" { print $4 }' "$work/locks.log" | sort | uniq -c | xargs)"
read -r _ holds _ ended _ unlocked_false _ overlaps _ older <<<"$alone"
# (100 holds in the 120 s of a full run, as many a second in a shorter one:
# a restart of PostgreSQL and the 5 s leases of its ended sessions can keep
# the lock from everyone for a dozen seconds)
ok "[ ${ended:-0} -ge $((seconds * 5 / 6)) ]" "11. the lock was held $ended times through the faults (at least $((seconds * 5 / 6)))"
is "$overlaps $older" "0 0" "11. never two lock holders at once, tokens rising in grant order ($unlocked_false releases answered false)"

# 12. With a standby: it replays what the primary committed, and holds the
# same orders and campaigns, row for row
if [ "$pair" = 1 ]; then
	rows="SELECT md5(coalesce(string_agg(o.id || ' ' || o.user_id || ' ' || o.status, ',' ORDER BY o.id), '')) || ' '
		|| (SELECT string_agg(c.id || ':' || c.sold, ',' ORDER BY c.id) FROM seckill.campaigns c WHERE c.id IN ($ids))
		FROM seckill.orders o WHERE o.campaign_id IN ($ids)"
	lsn=$(psql_val "SELECT pg_current_wal_lsn()")
	seckill_wait_for "[ \"\$(psql -XAtq -p $standby_port -c \"SELECT pg_last_wal_replay_lsn() >= '$lsn'\")\" = t ]" 30
	is "$(psql -XAtq -p "$standby_port" -c "$rows" 2>&1)" "$(psql_val "$rows")" \
		"12. the standby on port $standby_port holds the orders and the sold counts of the primary on port $PGPORT, after $(grep -c $'\tpg_failover\t' "$work/nemesis.log") failovers"
fi

[ "$TAP_FAILED" -gt 0 ] && diag "the nemesis (s into the run, ms it took):" \
	"$(awk -F'\t' -v s="$started" '{ printf "%7.1f %6d %s: %s\n", ($1 - s) / 1000, $2 - $1, $3, $4 }' "$work/nemesis.log")"

# the campaigns closed, the tables dropped
psql -XAtq -c "SELECT seckill_close('$big'), seckill_close('$sharded'), seckill_close('$tiny'), seckill_close('$queued')" >/dev/null 2>&1
[ "${SECKILL_KEEP:-0}" = 1 ] ||
	psql_val "DROP TABLE rf_answers, rf_monitor, rf_nemesis, rf_resolved, rf_quiet, rf_false_sold_out" >/dev/null
seckill_configure "RESET seckill.redis_port"
ok "[ $? -eq 0 ]" "the worker reaches Redis on its own port again"
done_testing
