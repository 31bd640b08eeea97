#!/usr/bin/env bash
# The benchmark, as root: bash scripts/bench.sh [--seconds N] [--clients "8 32 128"]
#                                               [--smoke] [--soak SECONDS] [--out DIR]
# Measures, in one run on one machine, seckill_buy against the plain
# PostgreSQL ways of selling stock and against Redis alone:
#   1 SELECT 1                      the ceiling of any SQL call here
#   2 naive PostgreSQL              UPDATE ... WHERE remaining > 0, then INSERT, one statement
#   3 pessimistic PostgreSQL        SELECT ... FOR UPDATE, UPDATE, INSERT, one transaction
#   4 seckill_buy while stock lasts every call a purchase committed to seckill.orders
#   5 seckill_buy after sell-out    answered from shared memory
#   5c a call of the same shape that does nothing (string_to_table), alternated
#      three times with row 5 at 32 clients
#   6 Redis alone                   redis-benchmark running lua/buy.lua, unpipelined / pipelined
# storefront reads, while 4 more clients buy from row 4's campaign all along:
#   1s SELECT 1
#   1f SELECT ... FROM seckill.storefront WHERE goods = row 4's campaign
#   1g SELECT ... FROM seckill_storefront(row 4's campaign)
#   1j SELECT seckill_storefront_json(row 4's campaign)
# and the cost of each traffic feature, as row 4 on a campaign with it:
#   4r rate limits per user and per address (generous: every call passes both buckets)
#   4t one-time tokens (each call issues its token with seckill_token, then buys with it)
#   4s stock split into 8 shards (while every shard has stock)
#   4c the same on a Redis Cluster of three masters of our own (last, after
#      the soak: the worker is moved to the cluster and back)
# and the waiting room:
#   1n seckill_queue_status of a campaign whose line is not open yet: the
#      same call, answered before it does anything (the control)
#   1q seckill_queue_status of a buyer waiting in a line of 100,000; the
#      two alternated three times at 32 clients
#   5j seckill_queue_join, a new buyer each call (against row 5, the
#      sold-out answer)
#   and its fairness (scripts/fairness.py): 10,000 people who buy once (or
#   join, poll every second and buy once admitted) and 100 bots that call
#   seckill_buy 50 times a second, for 1,000 items, without the room and
#   with it, then with it and everyone arriving after the start (200
#   people, 10 bots, 40 items with --smoke)
# and the distributed locks against PostgreSQL's own, each client its own name:
#   7a seckill_lock + seckill_unlock
#   7b pg_advisory_lock + pg_advisory_unlock
#   7c seckill_lock_all + seckill_unlock_all of three names
#   7d seckill_lock_fair + seckill_unlock
#   7e seckill_lock_shared + seckill_unlock_shared, every client on one name
# and, every client on one name, a lock that only one holds at a time: the
# cycles/s are the grants/s, the latency a grant's wait in the queue
#   7f seckill_lock(name, wait) + seckill_unlock
#   7g seckill_lock_fair(name, wait) + seckill_unlock
#   7h pg_advisory_lock + pg_advisory_unlock
# and, through PgBouncer (transaction pooling, 64 server connections), many
# clients at once (1,024; 64 with --smoke), durable:
#   2p naive PostgreSQL
#   4p seckill_buy while stock lasts
# and, when a JDK with Debian's pgJDBC and HikariCP is present, the design of
# the flash-sale article in Java (scripts/ArticleFlow.java) against
# seckill_buy from the same JVM, then both through a Redis restart and a
# SIGKILL of the JVM (on servers of its own, or SECKILL_BENCH_FAULTS=1).
# Rows 2-4 run durable (synchronous_commit = on); their "off" figures are an
# extra column (the worker commits durably whatever the setting, so for row 4
# it only changes the callers' sessions).  Prints a Markdown table with ratios to rows 1 and 2, the
# worker's counters, checks that nothing was oversold or sold twice (and fails
# loudly if so), and writes throughput.svg and results.md into the output
# directory.  --smoke is the short run CI uses to check that all of it works.
# Without running servers it installs what it needs and starts its own.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

seconds=10
clients="8 32 128"
soak=0
out=
SECONDS=0
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--smoke) seconds=1; clients="8"; fair="200 10 40"; control_passes=1; shift ;;
	--soak) soak=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	*) echo "usage: $0 [--seconds N] [--clients \"8 32 128\"] [--smoke] [--soak SECONDS] [--out DIR]" >&2; exit 2 ;;
	esac
done

SECKILL_PACKAGES+=(pgbouncer)
bouncer_clients=1024
[ "$seconds" -le 1 ] && bouncer_clients=64
servers_of_our_own=0
if [ -z "${SECKILL_TMP:-}" ]; then
	seckill_install_deps
	seckill_build_install
	# row 7c holds three locks a client: 128 clients need more than the default 256
	seckill_start_servers "seckill.max_locks = 4096"
	servers_of_our_own=1
fi
out=${out:-$SECKILL_ROOT/bench-results}
work=$out/work
rm -rf "$work"
mkdir -p "$work"

psql_q() { psql -XAtq -v ON_ERROR_STOP=1 "$@"; }

# --- the contenders ----------------------------------------------------------
run_id=$(date +%s)
big=bench-stock-$run_id
gone=bench-gone-$run_id
rate=bench-rate-$run_id
tok=bench-token-$run_id
sharded=bench-shards-$run_id
clustered=bench-cluster-$run_id
psql_q <<SQL >/dev/null
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS seckill;
DROP SCHEMA IF EXISTS bench CASCADE;
CREATE SCHEMA bench;
CREATE TABLE bench.stock (id int PRIMARY KEY, remaining int NOT NULL CHECK (remaining >= 0));
INSERT INTO bench.stock VALUES (1, 2000000000), (2, 2000000000);
CREATE TABLE bench.orders (
	id bigserial PRIMARY KEY,
	item int NOT NULL REFERENCES bench.stock (id),
	user_id text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	UNIQUE (item, user_id));
SELECT seckill_campaign_create('$big', 2000000000);
SELECT seckill_campaign_create('$gone', 1);
SELECT seckill_campaign_create('$rate', 2000000000);
SELECT seckill_campaign_set('$rate', '{"user_rate": 1000, "user_burst": 1000, "addr_rate": 1000000, "addr_burst": 1000000}');
SELECT seckill_campaign_create('$tok', 2000000000);
SELECT seckill_campaign_set('$tok', '{"token_required": true}');
SELECT seckill_campaign_create('$sharded', 2000000000);
SELECT seckill_campaign_set('$sharded', '{"shards": 8}');
SELECT seckill_campaign_create('$clustered', 2000000000);
SELECT seckill_campaign_set('$clustered', '{"shards": 8}');
SQL
# The waiting room: a line of 100,000 buyers written in SQL before the
# preheat (the worker reads it then; the first 2,000 are admitted, 2 passes
# per item), a line not open yet, and a line to join.
line=bench-line-$run_id
later=bench-later-$run_id
joins=bench-joins-$run_id
psql_q <<SQL >/dev/null
SELECT seckill_campaign_create('$line', 1000);
SELECT seckill_campaign_set('$line', '{"queue": {"pass_ttl": "1 day"}}');
INSERT INTO seckill.queue_places (campaign_id, user_id, ticket, joined_at)
SELECT c.id, 'w' || i, i, now() FROM seckill.campaigns c, generate_series(1, 100000) i WHERE c.goods = '$line';
INSERT INTO seckill.queue_lines (campaign_id, drawn) SELECT id, true FROM seckill.campaigns WHERE goods = '$line';
SELECT seckill_campaign_create('$later', 1000, now() + interval '1 day');
SELECT seckill_campaign_set('$later', '{"queue": true}');
SELECT seckill_campaign_create('$joins', 1000);
SELECT seckill_campaign_set('$joins', '{"queue": true}');
DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'bench_poller') THEN CREATE ROLE bench_poller; END IF; END \$\$;
GRANT EXECUTE ON FUNCTION seckill_queue_status(text, text) TO bench_poller;
SQL
for g in "$big" "$gone" "$rate" "$tok" "$sharded" "$line" "$later" "$joins"; do
	psql_q -c "SELECT seckill_preheat('$g')" >/dev/null
done
# the line's tickets are in shared memory once a role that cannot read
# seckill.queue_places is told where its last buyer stands
seckill_wait_for "[ \"\$(psql_q -c 'SET ROLE bench_poller' -c \"SELECT state FROM seckill_queue_status('w100000', '$line')\" 2>/dev/null)\" = waiting ]" 30 ||
	exit 1
psql_q -c "SELECT seckill_buy('first-and-last', '$gone')" >/dev/null

cat >"$work/select1.sql" <<'SQL'
\set u random(1, 1000000000000000000)
SELECT 1;
SQL
cat >"$work/storefront.sql" <<SQL
SELECT state, starts_in, remaining FROM seckill.storefront WHERE goods = '$big';
SQL
cat >"$work/storefront_fn.sql" <<SQL
SELECT state, starts_in, remaining FROM seckill_storefront('$big');
SQL
cat >"$work/storefront_json.sql" <<SQL
SELECT seckill_storefront_json('$big');
SQL
cat >"$work/queue_later.sql" <<SQL
\set u random(2001, 100000)
SELECT state FROM seckill_queue_status('w' || :u, '$later');
SQL
cat >"$work/queue_status.sql" <<SQL
\set u random(2001, 100000)
SELECT state FROM seckill_queue_status('w' || :u, '$line');
SQL
cat >"$work/queue_join.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT state FROM seckill_queue_join('j' || :u, '$joins');
SQL
cat >"$work/naive.sql" <<'SQL'
\set u random(1, 1000000000000000000)
WITH s AS (UPDATE bench.stock SET remaining = remaining - 1 WHERE id = 1 AND remaining > 0 RETURNING id)
INSERT INTO bench.orders (item, user_id) SELECT id, 'n' || :u FROM s;
SQL
cat >"$work/pessimistic.sql" <<'SQL'
\set u random(1, 1000000000000000000)
BEGIN;
SELECT remaining FROM bench.stock WHERE id = 2 FOR UPDATE;
UPDATE bench.stock SET remaining = remaining - 1 WHERE id = 2 AND remaining > 0;
INSERT INTO bench.orders (item, user_id) VALUES (2, 'p' || :u);
COMMIT;
SQL
# buy_script file goods [token]: a purchase by a new user each call (with a
# token issued for it in the same statement)
buy_script() {
	local token=
	[ "${3:-}" = token ] && token=", 1, seckill_token('u' || :u, '$2')"
	printf '%s\n' '\set u random(1, 1000000000000000000)' \
		"SELECT status FROM seckill_buy('u' || :u, '$2'$token);" >"$work/$1"
}
buy_script buy.sql "$big"
buy_script rate.sql "$rate"
buy_script token.sql "$tok" token
buy_script shards.sql "$sharded"
buy_script cluster.sql "$clustered"
buy_script soldout.sql "$gone"
# row 5's control: a call of the same shape that does nothing, a set-returning
# function of PostgreSQL's own (in C) with the same random text argument
# (the goods, which the user's text never holds, as its delimiter: one row)
printf '%s\n' '\set u random(1, 1000000000000000000)' \
	"SELECT status FROM pg_catalog.string_to_table('u' || :u, '$gone') AS t(status);" >"$work/control.sql"
cat >"$work/lock.sql" <<SQL
SELECT seckill_lock('bench-$run_id-' || :client_id) IS NOT NULL;
SELECT seckill_unlock('bench-$run_id-' || :client_id);
SQL
cat >"$work/lock_all.sql" <<SQL
SELECT seckill_lock_all(ARRAY['bench-$run_id-c-' || :client_id, 'bench-$run_id-a-' || :client_id,
	'bench-$run_id-b-' || :client_id]) IS NOT NULL;
SELECT seckill_unlock_all(ARRAY['bench-$run_id-c-' || :client_id, 'bench-$run_id-a-' || :client_id,
	'bench-$run_id-b-' || :client_id]);
SQL
cat >"$work/advisory.sql" <<'SQL'
SELECT pg_advisory_lock(:client_id);
SELECT pg_advisory_unlock(:client_id);
SQL
cat >"$work/fair.sql" <<SQL
SELECT seckill_lock_fair('bench-$run_id-' || :client_id) IS NOT NULL;
SELECT seckill_unlock('bench-$run_id-' || :client_id);
SQL
cat >"$work/shared.sql" <<SQL
SELECT seckill_lock_shared('bench-$run_id-shared') IS NOT NULL;
SELECT seckill_unlock_shared('bench-$run_id-shared');
SQL
cat >"$work/lock_one.sql" <<SQL
SELECT 1 / (seckill_lock('bench-$run_id-one', '60 s') IS NOT NULL)::int;
SELECT seckill_unlock('bench-$run_id-one');
SQL
cat >"$work/fair_one.sql" <<SQL
SELECT 1 / (seckill_lock_fair('bench-$run_id-fair-one', '60 s') IS NOT NULL)::int;
SELECT seckill_unlock('bench-$run_id-fair-one');
SQL
cat >"$work/advisory_one.sql" <<'SQL'
SELECT pg_advisory_lock(1);
SELECT pg_advisory_unlock(1);
SQL

# synchronous_commit for every session and for the worker's commits
set_sync() {
	seckill_configure "SET synchronous_commit = $1"
}

counters() {
	psql_q -c "SELECT purchases || ' ' || rounds || ' ' || redis_round_trips || ' ' || commits FROM seckill.worker_counters()"
}

# Where the CPU goes in a cell: the machine's busy, idle and stolen time
# (/proc/stat), the worker's and Redis' own (/proc/PID/stat), pgbench's (its
# own times); what is left of the busy time is the callers' sessions, the
# other PostgreSQL processes and the kernel's work for them.
hz=$(getconf CLK_TCK)
# pass_ratios row control: "pass control row row/control" for each pass of
# a row alternated with its control at control_clients
pass_ratios() {
	awk -v c="$control_clients" -v row="$1" -v ctl="$2" '$2 == "on" && $3 == c { t[$1] = $4 }
		END { for (p = 1; p <= 3; p++) if ((ctl p) in t && (row p) in t && t[ctl p] > 0)
			printf "%d %s %s %.6f\n", p, t[ctl p], t[row p], t[row p] / t[ctl p] }' "$results"
}
# pass_table row control row_name: the table of the passes
pass_table() {
	echo "| pass | the control, calls/s | $3, calls/s | × the control |"
	echo "|---|---:|---:|---:|"
	pass_ratios "$1" "$2" | awk '{ printf "| %d | %s | %s | %.2f |\n", $1, $2, $3, $4 }'
}
# pass_target row control least label: the target line of the median of
# three passes (none with --smoke's one)
pass_target() {
	pass_ratios "$1" "$2" | LC_ALL=C sort -k4,4g | awk -v least="$3" -v label="$4" '
		NR == 2 { m = $4 }
		END { if (NR == 3) printf "  %-44s %s\n", sprintf("%s (%.2fx)", label, m), (m >= least ? "met" : "NOT met") }'
}
process_ticks() { # user + system of a process; 0 once it is gone
	awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}
redis_pid=$(cat "$SECKILL_TMP/redis.pid")

# results: one line per cell: row sync clients tps p50 p99
# cpu: one line per cell: row sync clients calls worker redis pgbench rest idle stolen
# (seconds, the machine's summed over its cores) switches (the machine's context switches)
results=$out/cells.txt
cpu=$out/cpu.txt
: >"$results"
: >"$cpu"
cell() { # row sync clients script [seconds]
	local span=${5:-$seconds} figures tps avg p50 p99 worker busy0 idle0 stolen0 switches0 worker0 redis0 busy1 idle1 stolen1 switches1 calls
	worker=$(seckill_worker_pid)
	rm -rf "$work/$1-$2-$3"
	read -r busy0 idle0 stolen0 switches0 <<<"$(seckill_machine_ticks)"
	worker0=$(process_ticks "$worker")
	redis0=$(process_ticks "$redis_pid")
	figures=$(seckill_pgbench "$work/$1-$2-$3" "$3" "$span" "$work/$4") ||
		{ cat "$work/$1-$2-$3/pgbench.out" >&2; echo "seckill: pgbench failed for row $1" >&2; exit 1; }
	read -r busy1 idle1 stolen1 switches1 <<<"$(seckill_machine_ticks)"
	calls=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/$1-$2-$3/pgbench.out")
	# pgbench's duration includes its connections: on a busy machine they can
	# take all of a short cell, and pgbench then reports no call and no rate
	if [ "${calls:-0}" -eq 0 ]; then
		if [ "$span" -ge $((seconds * 8)) ]; then
			cat "$work/$1-$2-$3/pgbench.out" >&2
			echo "seckill: no call of row $1 finished in $span s" >&2
			exit 1
		fi
		echo "  row $1: no call finished in $span s (pgbench's connections took it all); measuring again for $((span * 2)) s" >&2
		cell "$1" "$2" "$3" "$4" $((span * 2))
		return
	fi
	read -r tps avg p50 p99 <<<"$figures"
	echo "$1 $2 $3 $tps $p50 $p99" >>"$results"
	awk -v hz="$hz" -v cell="$1 $2 $3" -v calls="$calls" -v w="$(($(process_ticks "$worker") - worker0))" \
		-v r="$(($(process_ticks "$redis_pid") - redis0))" -v b="$((busy1 - busy0))" \
		-v i="$((idle1 - idle0))" -v s="$((stolen1 - stolen0))" -v x="$((switches1 - switches0))" '
		{ p = $1 + $2; printf "%s %d %.2f %.2f %.2f %.2f %.2f %.2f %d\n", cell, calls, w / hz, r / hz, p, b / hz - w / hz - r / hz - p, i / hz, s / hz, x }' \
		"$work/$1-$2-$3/cpu" >>"$cpu"
	printf '  row %s, synchronous_commit=%s, %3s clients: %8s calls/s, p50 %s ms, p99 %s ms\n' \
		"$1" "$2" "$3" "$tps" "$p50" "$p99" >&2
}

echo "Benchmark: ${seconds}s per cell, clients: $clients, $(nproc) cores" >&2
read -r p0 r0 t0 c0 <<<"$(counters)"
set_sync on
# each feature right after row 4, so that its ratio compares like with like
# (the tables grow, and the machine's state drifts, over the run)
for c in $clients; do
	cell 1 on "$c" select1.sql
	cell 2 on "$c" naive.sql
	cell 3 on "$c" pessimistic.sql
	cell 4 on "$c" buy.sql
	cell 4r on "$c" rate.sql
	cell 4t on "$c" token.sql
	cell 4s on "$c" shards.sql
	cell 5 on "$c" soldout.sql
	cell 5j on "$c" queue_join.sql
done
# row 5 against its control, alternated three times (once with --smoke), at
# 32 clients (or the first count of clients asked for): 5c1 5s1 5c2 5s2 5c3 5s3
control_clients=32
[[ " $clients " == *" 32 "* ]] || control_clients=${clients%% *}
for pass in $(seq 1 "${control_passes:-3}"); do
	cell "5c$pass" on "$control_clients" control.sql
	cell "5s$pass" on "$control_clients" soldout.sql
done
read -r p1 r1 t1 c1 <<<"$(counters)"
# storefront reads while a sale runs: 4 buyers all along the four cells
pgbench -n -M prepared -c 4 -j 1 -T $((4 * seconds * $(echo "$clients" | wc -w) + 60)) -f "$work/buy.sql" \
	>"$work/sale.out" 2>&1 &
sale=$!
for c in $clients; do
	cell 1s on "$c" select1.sql
	cell 1f on "$c" storefront.sql
	cell 1g on "$c" storefront_fn.sql
	cell 1j on "$c" storefront_json.sql
done
# TERM: a command started with & in a script ignores SIGINT
kill -TERM "$sale" 2>/dev/null
wait "$sale" || true
for c in $clients; do
	cell 1n on "$c" queue_later.sql
	cell 1q on "$c" queue_status.sql
done
# the poll against its control, alternated as row 5 and its control are
# (1n1 1q1 1n2 1q2 1n3 1q3): whatever the machine does meanwhile (an
# autovacuum after the sale, say) falls on both
for pass in $(seq 1 "${control_passes:-3}"); do
	cell "1n$pass" on "$control_clients" queue_later.sql
	cell "1q$pass" on "$control_clients" queue_status.sql
done
for c in $clients; do
	cell 7a on "$c" lock.sql
	cell 7b on "$c" advisory.sql
	cell 7c on "$c" lock_all.sql
	cell 7d on "$c" fair.sql
	cell 7e on "$c" shared.sql
	cell 7f on "$c" lock_one.sql
	cell 7g on "$c" fair_one.sql
	cell 7h on "$c" advisory_one.sql
done

# The waiting room's fairness: people and bots, without the room and with it
read -r fair_people fair_bots fair_stock <<<"${fair:-10000 100 1000}"
/usr/bin/python3 "$SECKILL_ROOT/scripts/fairness.py" "bench-fair-$run_id" "$fair_stock" "$fair_people" "$fair_bots" 50 \
	>"$work/fairness.txt" || { echo "seckill: the fairness run failed" >&2; exit 1; }
sed 's/^/  fairness: /' "$work/fairness.txt" >&2

# Many clients through PgBouncer, in transaction pooling: the statements go
# unprepared (PgBouncer 1.18 keeps no prepared statements across server
# connections).  Each client is a socket for pgbench and for PgBouncer.
ulimit -n $((bouncer_clients + 2048)) 2>/dev/null ||
	{ echo "seckill: the open files limit is below $((bouncer_clients + 2048)): raise it (ulimit -Hn)" >&2; exit 1; }
bouncer_dir=$(mktemp -d -p "$SECKILL_TMP")
# below 32768, the kernel's ephemeral ports: no client socket holds it
bouncer_port=${SECKILL_BENCH_BOUNCER_PORT:-$SECKILL_OWN_PORT}
if ! seckill_port_free "$bouncer_port"; then
	seckill_die "port $bouncer_port is in use (set SECKILL_BENCH_BOUNCER_PORT)"
	exit 1
fi
bouncer_end() {
	[ -f "$bouncer_dir/pid" ] && kill "$(cat "$bouncer_dir/pid")" 2>/dev/null
	rm -f "$bouncer_dir/pid"
}
if [ "$servers_of_our_own" = 1 ]; then
	trap 'bouncer_end; seckill_on_exit' EXIT
else
	trap bouncer_end EXIT
fi
seckill_pgbouncer_start "$bouncer_dir" "$bouncer_port" 64 "$((bouncer_clients + 64))" ||
	{ echo "seckill: PgBouncer did not start on port $bouncer_port" >&2; exit 1; }
PGPORT=$bouncer_port SECKILL_PGBENCH_PROTOCOL=simple cell 2p on "$bouncer_clients" naive.sql
PGPORT=$bouncer_port SECKILL_PGBENCH_PROTOCOL=simple cell 4p on "$bouncer_clients" buy.sql
bouncer_end
if [ "$servers_of_our_own" = 1 ]; then
	trap seckill_on_exit EXIT
else
	trap - EXIT
fi

set_sync off
for c in $clients; do
	cell 2 off "$c" naive.sql
	cell 3 off "$c" pessimistic.sql
	cell 4 off "$c" buy.sql
done
seckill_configure "RESET synchronous_commit"

# Redis alone: the purchase script on a campaign of its own, random users,
# one purchase a call
sha=$(seckill_redis_cli SCRIPT LOAD "$(cat "$SECKILL_ROOT/lua/buy.lua")")
rkey="seckill-bench:{c:0}"
rkeys=("$rkey:meta" "$rkey:buyers" "$rkey:journal" "$rkey:rate:u" "$rkey:rate:a" "$rkey:token")
seckill_redis_cli DEL "${rkeys[@]}" >/dev/null
seckill_redis_cli HSET "$rkey:meta" stock 2000000000 starts 0 ends inf limit 1 state open >/dev/null
redis_cell() { # label pipeline clients
	local csv n=$((seconds * 20000))
	csv=$(redis-benchmark -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" -c "$3" -n "$n" -P "$2" -r 1000000000 --csv \
		EVALSHA "$sha" 6 "${rkeys[@]}" '' '' u:__rand_int__ 1 __rand_int__ '' '' | tail -1)
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	echo "$csv" | tr -d '"' | awk -F, -v row="$1" -v c="$3" '{ printf "%s on %s %d %.3f %.3f\n", row, c, $2, $5, $7 }' >>"$results"
	tail -1 "$results" | awk '{ printf "  row %s, %3s clients: %8s calls/s, p50 %s ms, p99 %s ms\n", $1, $3, $4, $5, $6 }' >&2
}
for c in $clients; do
	redis_cell 6a 1 "$c"
	redis_cell 6b 16 "$c"
done
seckill_redis_cli DEL "${rkeys[@]}" >/dev/null

# --- memory over a longer run of row 4 ----------------------------------------------
# Private memory (RssAnon): what a leak grows.  VmRSS also counts the pages of
# shared_buffers a process has touched, which grows with the tables.
anon_kb() { awk '/^RssAnon/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
if [ "$soak" -gt 0 ]; then
	wpid=$(seckill_worker_pid)
	pgbench -n -M prepared -c 32 -j "$(nproc)" -T "$soak" -f "$work/buy.sql" >"$work/soak.out" 2>&1 &
	bench=$!
	echo "Soak: row 4 at 32 clients for ${soak}s; private memory (kB) every $((soak / 10))s:" >&2
	for _ in $(seq 1 10); do
		sleep $((soak / 10)) # a sampling interval, not a wait for a condition
		backends=$(psql_q -c "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity WHERE application_name = 'pgbench'")
		max=0
		for b in $backends; do
			kb=$(anon_kb "$b")
			[ "$kb" -gt "$max" ] && max=$kb
		done
		printf '  %4ss  worker %6s  largest backend %6s\n' "$((SECONDS))" "$(anon_kb "$wpid")" "$max" | tee -a "$out/soak.txt" >&2
	done
	wait "$bench" || { cat "$work/soak.out" >&2; exit 1; }
fi

# --- row 4c: the sharded campaign on a Redis Cluster ----------------------------------
# Three masters on ports below the ephemeral range; the other campaigns are
# closed first, lest the worker rebuild them in the new Redis meanwhile.
cluster_base=${SECKILL_BENCH_CLUSTER_PORT:-$((SECKILL_OWN_PORT + 20))}
cluster_ports=("$cluster_base" $((cluster_base + 1)) $((cluster_base + 2)))
# where postgres, who runs the nodes, may write
cluster_dir=$(mktemp -d -p "$SECKILL_TMP" bench-cluster.XXXXXX)
chown postgres: "$cluster_dir"
cluster_end() {
	local rc=$?
	seckill_configure "RESET seckill.redis_cluster" "RESET seckill.redis_port" >/dev/null 2>&1
	seckill_cluster_stop "$cluster_dir"
	rm -rf "$cluster_dir"
	return $rc
}
if [ "$servers_of_our_own" = 1 ]; then
	trap 'cluster_end; seckill_on_exit' EXIT
else
	trap cluster_end EXIT
fi
for g in "$big" "$gone" "$rate" "$tok" "$sharded"; do
	psql_q -c "SELECT seckill_close('$g')" >/dev/null
done
for port in "${cluster_ports[@]}"; do
	for p in "$port" $((port + 10)); do
		if ! seckill_port_free "$p"; then
			seckill_die "port $p is in use (set SECKILL_BENCH_CLUSTER_PORT)"
			exit 1
		fi
	done
done
seckill_cluster_create "$cluster_dir" 0 "${cluster_ports[@]}" || exit 1
seckill_configure "SET seckill.redis_cluster = on" "SET seckill.redis_port = $cluster_base" || exit 1
psql_q -c "SELECT seckill_preheat('$clustered')" >/dev/null
for c in $clients; do
	cell 4c on "$c" cluster.sql
done
psql_q -c "SELECT seckill_close('$clustered')" >/dev/null
cluster_end
if [ "$servers_of_our_own" = 1 ]; then
	trap seckill_on_exit EXIT
else
	trap - EXIT
fi

# --- the article's design in Java, beside seckill from the same JVM -----------------
# scripts/ArticleFlow.java, on when a JDK and Debian's pgJDBC and HikariCP are
# present: throughput at each clients count, then a Redis restart and a SIGKILL
# of the JVM in the middle of a sale (on throwaway servers only: the restart
# empties Redis).  java_sale mode goods stock threads seconds [restart | kill]
# runs one sale and appends its figures to java.txt:
#   mode threads fault seconds calls ok errors p50 p99 landed_in_window landed refused cpu_s cpu_drained_s answered lost unsold
java_jars=/usr/share/java/postgresql.jar:/usr/share/java/HikariCP.jar:/usr/share/java/slf4j-api.jar
java_faults=$servers_of_our_own
[ "${SECKILL_BENCH_FAULTS:-0}" = 1 ] && java_faults=1
java_sale() {
	local mode=$1 goods=$2 stock=$3 threads=$4 secs=$5 fault=${6:-none} pid rc figures landed runs=1 left run_secs
	if [ "$mode" = article ]; then
		psql_q -c "INSERT INTO article.stock VALUES ('$goods', $stock, $stock)" >/dev/null
		seckill_redis_cli SET "stock:$goods" "$stock" >/dev/null
	else
		psql_q -c "SELECT seckill_campaign_create('$goods', $stock)" -c "SELECT seckill_preheat('$goods')" >/dev/null
	fi
	[ "$fault" = kill ] && runs=2
	for run in $(seq 1 $runs); do
		# the second run of a killed shop: started again, it sells what is
		# left (the article's after the killed JVM's lock ran out: 10 s; the
		# smoke run does not wait for it)
		run_secs=$secs
		[ "$run" = 2 ] && [ "$seconds" -gt 1 ] && run_secs=$((secs + 10))
		REDIS_PORT=$SECKILL_REDIS_PORT java -cp "$work/java:$java_jars" ArticleFlow "$mode" "$goods" "$threads" "$run_secs" \
			"$work/$goods.answers.$run" >"$work/$goods.out.$run" 2>"$work/$goods.err.$run" &
		pid=$!
		if [ "$run" = 1 ] && [ "$fault" != none ]; then
			seckill_wait_for "grep -q '^window' '$work/$goods.err.1'" 60 || { cat "$work/$goods.err.1" >&2; exit 1; }
			sleep 1 # a second into the sale, not a wait for a condition
			if [ "$fault" = restart ]; then
				seckill_redis_restart_empty || exit 1
				redis_pid=$(cat "$SECKILL_TMP/redis.pid")
			else
				kill -KILL "$pid"
			fi
		fi
		rc=0
		# (without the shell's own line about the killed job)
		{ wait "$pid"; } 2>/dev/null || rc=$?
		if [ "$rc" != 0 ] && ! { [ "$fault" = kill ] && [ "$run" = 1 ]; }; then
			cat "$work/$goods.err.$run" >&2
			echo "seckill: the Java $mode sale failed" >&2
			exit 1
		fi
		# a killed JVM's sessions end once their statements are done
		seckill_wait_for "[ \"\$(psql_q -c \"SELECT count(*) FROM pg_stat_activity WHERE application_name = '$mode'\")\" = 0 ]" 60 ||
			{ echo "seckill: the Java $mode sale's sessions did not end" >&2; exit 1; }
	done
	figures=$(head -1 "$work/$goods.out.1")
	[ -n "$figures" ] || figures="- - - - - - - - - -"
	if [ "$mode" = article ]; then
		landed="SELECT user_id FROM article.orders WHERE goods = '$goods'"
	else
		landed="SELECT o.user_id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
			WHERE c.goods = '$goods' AND o.status <> 'cancelled'"
	fi
	cat "$work/$goods".answers.* >"$work/$goods.answers"
	# answered, lost (answered ok, no order), unsold (stock without an order)
	left=$(psql_q <<SQL
CREATE TEMP TABLE answered (user_id text);
\copy answered FROM '$work/$goods.answers'
SELECT count(*), count(*) FILTER (WHERE user_id NOT IN ($landed)), $stock - (SELECT count(*) FROM ($landed) l)
FROM answered;
SQL
)
	echo "$mode $threads $fault $secs $figures ${left//|/ }" >>"$out/java.txt"
	printf '  Java, %s, %s threads, %s: %s\n' "$mode" "$threads" "$fault" "$figures ${left//|/ }" >&2
	if [ "$mode" = seckill ]; then
		psql_q -c "SELECT seckill_close('$goods')" >/dev/null
	else
		# the article's keys: its buyers', its stock and its lock
		{ seckill_redis_cli --scan --pattern "seckill:bought:$goods:*"; echo "stock:$goods"; echo "lock:seckill:$goods"; } |
			xargs -r -n 1000 redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" UNLINK >/dev/null
	fi
	return 0
}
: >"$out/java.txt"
article_check=
article_note=
if command -v javac >/dev/null && ls ${java_jars//:/ } >/dev/null 2>&1; then
	mkdir -p "$work/java"
	javac -cp "$java_jars" -d "$work/java" "$SECKILL_ROOT/scripts/ArticleFlow.java" || exit 1
	psql_q <<SQL >/dev/null
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS article CASCADE;
CREATE SCHEMA article;
CREATE TABLE article.stock (goods text PRIMARY KEY, total int NOT NULL, remaining int NOT NULL CHECK (remaining >= 0));
CREATE TABLE article.orders (
	id bigserial PRIMARY KEY,
	goods text NOT NULL REFERENCES article.stock,
	user_id text NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	UNIQUE (goods, user_id));
SQL
	# the article's stock: what is left and what landed make what it had
	article_check="UNION ALL SELECT s.remaining + (SELECT count(*) FROM article.orders o WHERE o.goods = s.goods) = s.total
		FROM article.stock s"
	article_note=", the article's Java shop"
	for c in $clients; do
		for mode in article seckill; do
			java_sale "$mode" "java-$mode-$c-$run_id" 2000000000 "$c" "$seconds"
		done
	done
	if [ "$java_faults" = 1 ]; then
		# the other campaigns closed, lest a restart of Redis rebuild them
		psql_q -c "SELECT count(seckill_close(goods)) FROM seckill.campaigns
			WHERE goods LIKE 'bench-%$run_id%' AND state <> 'closed'" >/dev/null
		fault_threads=32
		[ "$seconds" -le 1 ] && fault_threads=8
		fault_stock=$((seconds <= 1 ? 2000 : 20000))
		for fault in restart kill; do
			for mode in article seckill; do
				java_sale "$mode" "java-$mode-$fault-$run_id" "$fault_stock" "$fault_threads" $((seconds <= 1 ? 2 : 10)) "$fault"
			done
		done
	fi
fi

# --- the invariants: nothing oversold, nobody twice -------------------------------
check=$(psql_q <<SQL
SELECT count(*) FILTER (WHERE NOT ok) FROM (
	SELECT c.sold = (SELECT coalesce(sum(qty), 0) FROM seckill.orders o
					 WHERE o.campaign_id = c.id AND o.status <> 'cancelled')
		AND c.sold <= c.total_stock
		AND (SELECT count(*) FROM seckill.orders o WHERE o.campaign_id = c.id AND o.status <> 'cancelled')
		  = (SELECT count(DISTINCT user_id) FROM seckill.orders o WHERE o.campaign_id = c.id AND o.status <> 'cancelled') AS ok
	FROM seckill.campaigns c WHERE c.goods IN ('$big', '$gone', '$rate', '$tok', '$sharded', '$clustered')
		OR c.goods LIKE 'java-seckill-%-$run_id'
	UNION ALL
	SELECT s.remaining + (SELECT count(*) FROM bench.orders o WHERE o.item = s.id) = 2000000000
	FROM bench.stock s
	$article_check) v;
SQL
)
if [ "$check" != 0 ]; then
	echo "seckill: INVARIANT BROKEN: an oversell or a double purchase in the benchmark" >&2
	psql -X -c "SELECT * FROM seckill_status('$big')" -c "SELECT * FROM bench.stock" >&2
	exit 1
fi
echo "Invariants: no oversell, no double purchase (seckill and both PostgreSQL contenders$article_note)." >&2

# --- the report --------------------------------------------------------------------
# table rows labels ratio-rows sync-off: a Markdown line per row (labels
# separated by ;) and clients count from the cells, with calls/s as a ratio
# to each ratio row, and the synchronous_commit = off figure when asked
table() {
	awk -v clients="$clients" -v rows="$1" -v labels="$2" -v ratios="$3" -v off="$4" '
		BEGIN {
			n = split(clients, cl, " "); nr = split(rows, row, " "); split(labels, label, ";")
			nq = split(ratios, ratio, " ")
		}
		{ key = $1 " " $2 " " $3; tps[key] = $4; p50[key] = $5; p99[key] = $6 }
		END {
			for (r = 1; r <= nr; r++)
				for (i = 1; i <= n; i++) {
					c = cl[i]; k = row[r] " on " c
					if (!(k in tps)) continue
					line = sprintf("| %s | %s | %s | %s | %s | %s |", row[r], label[r], c, tps[k], p50[k], p99[k])
					for (q = 1; q <= nq; q++)
						line = line sprintf(" %.2f |", tps[k] / tps[ratio[q] " on " c])
					if (off)
						line = line sprintf(" %s |", (row[r] " off " c) in tps ? tps[row[r] " off " c] : "–")
					print line
				}
		}' "$results"
}

purchases=$((p1 - p0))
{
	echo "| row | what | clients | calls/s | p50 ms | p99 ms | × row 1 | × row 2 | calls/s, sync off |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
	table "1 2 3 4 5 6a 6b" "SELECT 1;naive UPDATE + INSERT;SELECT FOR UPDATE, UPDATE, INSERT;seckill_buy, stock lasts;seckill_buy, sold out;Redis alone, buy.lua;Redis alone, buy.lua, pipeline 16" "1 2" 1
	echo
	echo "The sold-out answer (row 5) against a call of the same shape that does nothing (\`string_to_table\`"
	echo "with the same random text argument), each pass the two alternated, at $control_clients clients:"
	echo
	pass_table 5s 5c "row 5"
	echo
	echo "Storefront reads of row 4's campaign while 4 more clients buy from it:"
	echo
	echo "| row | read | clients | calls/s | p50 ms | p99 ms | × row 1s |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	table "1s 1f 1g 1j" "SELECT 1;seckill.storefront;seckill_storefront();seckill_storefront_json()" "1s" 0
	echo
	echo "The waiting room: a poll of a buyer waiting in a line of 100,000, against the same call answered"
	echo "before it does anything (the line not open yet) and SELECT 1; a join, against the sold-out answer:"
	echo
	echo "| row | call | clients | calls/s | p50 ms | p99 ms | × row 1n | × row 1 | × row 5 |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
	table "1n 1q 5j" "seckill_queue_status, line not open;seckill_queue_status, waiting;seckill_queue_join, new buyer" "1n 1 5" 0
	echo
	echo "The poll (1q) against its control (1n), each pass the two alternated, at $control_clients clients:"
	echo
	pass_table 1q 1n "the poll"
	echo
	echo "Fairness (scripts/fairness.py): $fair_people people (buy once on arrival; or join, poll every second and"
	echo "buy once admitted) and $fair_bots bots (seckill_buy 50 times a second), arriving alike from 5 s before the"
	echo "start to 10 s after it, for $fair_stock items (fewer than the early crowd), without the room and with it;"
	echo "then with the room and everyone arriving in the 10 s after the start. The room admits 50 a second."
	echo "Kendall's tau: the people who joined after the start and bought, their order of purchase against their"
	echo "order of joining:"
	echo
	echo "| waiting room | arrivals | items | items sold | bots' items | bots' share of items | bots' share of buyers | Kendall's tau | such people | calls failed |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -v stock="$fair_stock" '{ printf "| %s | %s | %d | %s | %s | %.1f %% | %.1f %% | %s | %s | %s |\n", ($1 == "none" ? "no" : "yes"),
		($1 == "fifo" ? "after the start" : "−5 s to +10 s"), stock, $2, $3, 100 * $4, 100 * $5, $6, ($1 == "none" ? "–" : $7), $8 }' \
		"$work/fairness.txt"
	echo
	echo "What each traffic feature costs a purchase (row 4 on a campaign with it):"
	echo
	echo "| row | feature | clients | calls/s | p50 ms | p99 ms | × row 4 |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	table "4r 4t 4s" "rate limits per user and address;one-time token, issued and spent;8 stock shards" "4" 0
	echo
	echo "Redis Cluster: the 8 shards of row 4s spread over three masters (all on this machine's cores):"
	echo
	echo "| row | Redis | clients | calls/s | p50 ms | p99 ms | × row 4s |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	table "4s 4c" "one node;Redis Cluster, 3 masters" "4s" 0
	echo
	echo "Many clients through PgBouncer (transaction pooling, 64 server connections), durable, against row 4 at"
	echo "the most clients measured directly:"
	echo
	echo "| row | what | clients | calls/s | p50 ms | p99 ms | × row 4 |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	awk '
		BEGIN { name["2p"] = "naive UPDATE + INSERT"; name["4p"] = "seckill_buy, stock lasts" }
		$1 == "4" && $2 == "on" && $3 + 0 >= direct { direct = $3 + 0; base = $4 }
		$1 == "2p" || $1 == "4p" { c[$1] = $3; tps[$1] = $4; p50[$1] = $5; p99[$1] = $6 }
		END {
			split("2p 4p", rows, " ")
			for (r = 1; r <= 2; r++) {
				k = rows[r]
				if (!(k in tps)) continue
				printf "| %s | %s | %s | %s | %s | %s | %s |\n", k, name[k], c[k], tps[k], p50[k], p99[k],
					(base > 0 ? sprintf("%.2f (row 4 at %d clients: %d)", tps[k] / base, direct, base) : "–")
			}
		}' "$results"
	echo
	if [ -s "$out/java.txt" ]; then
		echo "The article's design in Java (scripts/ArticleFlow.java: a per-user SET NX, a lock taken with SET NX EX"
		echo "and waited for as Redisson waits, released by a Lua compare-and-delete, DECR, an in-process queue drained"
		echo "by 8 consumers that decrement the stock and insert the order in one transaction), against seckill_buy from the same"
		echo "JVM, driver and pool (pgJDBC, HikariCP), durable. Answered: ok answers a second; landed: orders in"
		echo "PostgreSQL a second, over the same window; CPU: the machine's until the queue was drained, per order"
		echo "landed by then:"
		echo
		echo "| design | threads | calls/s | answered ok/s | landed/s | p50 ms | p99 ms | CPU ms per landed order | landed/s × article |"
		echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
		awk '$3 == "none" && $5 != "-" { k = $1 " " $2; landed[k] = $10 / $4
				printf "| %s | %s | %.0f | %.0f | %.0f | %s | %s | %s | %s |\n", $1, $2, $5 / $4, $6 / $4, $10 / $4, $8, $9,
					($11 > 0 ? sprintf("%.2f", $14 * 1000 / $11) : "–"),
					($1 == "seckill" && landed["article " $2] > 0 ? sprintf("%.2f", landed[k] / landed["article " $2]) : "–") }' \
			"$out/java.txt"
		if grep -qv ' none ' "$out/java.txt"; then
			echo
			echo "A fault a second into a sale of $fault_stock items ($fault_threads threads, new buyers): Redis restarted empty, or"
			echo "the JVM killed (SIGKILL) and the shop started again. Answered: ok answers; landed: orders in"
			echo "PostgreSQL; lost: answered ok without an order; unsold: items without an order at the end:"
			echo
			echo "| design | fault | answered ok | landed | lost | unsold |"
			echo "|---|---|---:|---:|---:|---:|"
			awk -v stock="$fault_stock" '$3 != "none" { printf "| %s | %s | %s | %s | %s | %s |\n", $1, ($3 == "kill" ? "SIGKILL of the JVM, shop started again" : "Redis restarted empty"), $15, stock - $17, $16, $17 }' \
				"$out/java.txt"
		fi
		echo
	fi
	echo "Distributed locks, uncontended (each client its own name), a cycle of lock and unlock per call:"
	echo
	echo "| row | lock | clients | cycles/s | p50 ms | p99 ms | × row 7b |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	table "7a 7b 7c 7d 7e" "seckill_lock + seckill_unlock;pg_advisory_lock + pg_advisory_unlock;seckill_lock_all + seckill_unlock_all, 3 names;seckill_lock_fair + seckill_unlock;seckill_lock_shared + seckill_unlock_shared, one name for all" "7b" 0
	echo
	echo "Distributed locks, contended (every client waits for one name): cycles/s are grants/s, the"
	echo "latency a grant's wait:"
	echo
	echo "| row | lock | clients | grants/s | p50 ms | p99 ms | × row 7h |"
	echo "|---|---|---:|---:|---:|---:|---:|"
	table "7f 7g 7h" "seckill_lock + seckill_unlock;seckill_lock_fair + seckill_unlock;pg_advisory_lock + pg_advisory_unlock" "7h" 0
	echo
	echo "Where the CPU goes: µs of CPU per call in each cell (the worker's, Redis', pgbench's, and the rest:"
	echo "the callers' sessions, the other PostgreSQL processes, the kernel), all of it in units of row 1's"
	echo "(a SELECT 1) at as many clients, the share of the $(nproc) cores idle and stolen by the host, and the"
	echo "calls/s the cell's mix would reach with every core busy; last, the machine's context switches per call"
	echo "(on a virtual machine, each costs the more as the host intercepts it):"
	echo
	echo "| row | clients | calls/s | worker | Redis | pgbench | the rest | all | all, × row 1 | idle | stolen | calls/s, cores busy | switches |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	awk -v clients="$clients $bouncer_clients" -v rows="1 1s 1f 1g 1j 1n 1q 2 3 4 4r 4t 4s 4c 5 5j 7a 7b 7c 7d 7e 7f 7g 7h 2p 4p" -v cores="$(nproc)" '
		BEGIN { n = split(clients, cl, " "); nr = split(rows, row, " ") }
		$2 == "on" { k = $1 " " $3; seen[k] = 1; calls[k] = $4; w[k] = $5; r[k] = $6; p[k] = $7; x[k] = $8; i[k] = $9; s[k] = $10; sw[k] = $11 }
		END {
			for (a = 1; a <= nr; a++)
				for (b = 1; b <= n; b++) {
					k = row[a] " " cl[b]
					if (!(k in seen) || calls[k] == 0) continue
					all = w[k] + r[k] + p[k] + x[k]; wall = all + i[k] + s[k]
					one = "1 " cl[b]
					unit = (one in seen && calls[one] > 0) ? (w[one] + r[one] + p[one] + x[one]) / calls[one] : 0
					printf "| %s | %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %.0f %% | %.0f %% | %.0f | %.2f |\n",
						row[a], cl[b], calls[k] * cores / wall, w[k] * 1e6 / calls[k], r[k] * 1e6 / calls[k],
						p[k] * 1e6 / calls[k], x[k] * 1e6 / calls[k], all * 1e6 / calls[k],
						(unit > 0 ? sprintf("%.2f", all / calls[k] / unit) : "–"),
						100 * i[k] / wall, 100 * s[k] / wall, calls[k] * cores / all, sw[k] / calls[k]
				}
		}' "$cpu"
	echo
	if [ "$purchases" -gt 0 ]; then
		echo "Worker, rows 4, 4r, 4t, 4s and 5 with synchronous_commit = on: $purchases purchases in $((r1 - r0)) rounds" \
			"($((purchases / (r1 - r0 + 1))) a round); per 1,000 purchases $(((t1 - t0) * 1000 / purchases))" \
			"Redis round trips and $(((c1 - c0) * 1000 / purchases)) commits."
	fi
} >"$out/results.md"

awk '$2 == "on" { print $1, $3, $4 }' "$results" | sort -k1,1 -k2n >"$work/plot.dat"
if command -v gnuplot >/dev/null; then
	{
		echo "set terminal svg size 800,500 dynamic font 'sans,12'"
		echo "set output '$out/throughput.svg'"
		echo "set title 'Throughput against clients ($(nproc) cores, synchronous_commit = on)'"
		echo "set xlabel 'clients'; set ylabel 'calls/s'; set logscale x 2; set logscale y"
		echo "set key outside right; set grid"
		printf "plot "
		sep=
		for row in 1 2 3 4 5 6a 6b; do
			awk -v r="$row" '$1 == r { print $2, $3 }' "$work/plot.dat" >"$work/row$row.dat"
			[ -s "$work/row$row.dat" ] || continue
			printf "%s'%s' using 1:2 with linespoints title 'row %s'" "$sep" "$work/row$row.dat" "$row"
			sep=", "
		done
		echo
	} >"$work/plot.gp"
	gnuplot "$work/plot.gp" 2>/dev/null
fi

cat "$out/results.md"
echo
echo "Targets (ratios of this run):"
awk '$1 == "room" { printf "  %-44s %s\n", sprintf("bots'"'"' items <= their share of buyers + 1 point (%.1f %% against %.1f %%)", 100 * $4, 100 * $5), ($4 <= $5 + 0.01 ? "met" : "NOT met") }
	$1 == "fifo" { printf "  %-44s %s\n", "Kendall'"'"'s tau of the late buyers >= 0.95 (" $6 ")", ($6 != "-" && $6 >= 0.95 ? "met" : "NOT met") }' \
	"$work/fairness.txt"
awk '
	{ t[$1 " " $2 " " $3] = $4; p99[$1 " " $2 " " $3] = $6 }
	function target(name, ok) { printf "  %-44s %s\n", name, ok ? "met" : "NOT met" }
	END {
		if (("4 on 8") in t)
			target("row 4 >= 4x row 2 at 8 clients (" sprintf("%.1fx", t["4 on 8"] / t["2 on 8"]) ")", t["4 on 8"] >= 4 * t["2 on 8"])
		if (("4 on 32") in t) {
			target("row 4 >= 10x row 2 at 32 clients (" sprintf("%.1fx", t["4 on 32"] / t["2 on 32"]) ")", t["4 on 32"] >= 10 * t["2 on 32"])
			target("p99 of row 4 at 32 clients <= 5 ms (" p99["4 on 32"] " ms)", p99["4 on 32"] <= 5)
			target("row 5 >= 0.9x row 1 at 32 clients (" sprintf("%.2fx", t["5 on 32"] / t["1 on 32"]) ")", t["5 on 32"] >= 0.9 * t["1 on 32"])
			target("row 4r >= 0.9x row 4 at 32 clients (" sprintf("%.2fx", t["4r on 32"] / t["4 on 32"]) ")", t["4r on 32"] >= 0.9 * t["4 on 32"])
			target("row 4t >= 0.9x row 4 at 32 clients (" sprintf("%.2fx", t["4t on 32"] / t["4 on 32"]) ")", t["4t on 32"] >= 0.9 * t["4 on 32"])
			target("row 1j >= 0.9x row 1s at 32 clients (" sprintf("%.2fx", t["1j on 32"] / t["1s on 32"]) ")", t["1j on 32"] >= 0.9 * t["1s on 32"])
		}
		if (("4 on 128") in t)
			target("row 4 >= 15x row 2 at 128 clients (" sprintf("%.1fx", t["4 on 128"] / t["2 on 128"]) ")", t["4 on 128"] >= 15 * t["2 on 128"])
	}' "$results"
# the sold-out answer and the poll against their controls: the median of
# the three passes
pass_target 5s 5c 0.95 "row 5 >= 0.95x its control at $control_clients clients, median of 3"
pass_target 1q 1n 0.95 "row 1q >= 0.95x row 1n at $control_clients clients, median of 3"
# a join's cost against a sold-out answer's: the machine's CPU a call (at 32
# clients neither cell fills the cores, and a join's calls/s are bounded by
# the wait for its flush, not by what it costs)
awk -v jt="$(awk '$1 == "5j" && $2 == "on" && $3 == 32 { print $4 }' "$results")" \
	-v st="$(awk '$1 == "5" && $2 == "on" && $3 == 32 { print $4 }' "$results")" '
	$2 == "on" && $3 == 32 && $4 > 0 { all[$1] = ($5 + $6 + $7 + $8) / $4 }
	END {
		if (!(("5j") in all) || !(("5") in all)) exit
		r = all["5j"] / all["5"]
		printf "  %-44s %s\n", sprintf("row 5j'"'"'s CPU a call <= 2x row 5'"'"'s at 32 clients (%.2fx; calls/s %.2fx)", r, jt / st),
			(r <= 2 ? "met" : "NOT met")
	}' "$cpu"
rm -rf "$work"
echo "Written: $out/results.md$( [ -f "$out/throughput.svg" ] && echo ", $out/throughput.svg")"
