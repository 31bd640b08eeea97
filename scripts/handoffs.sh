#!/usr/bin/env bash
# Where the context switches of a purchase go, as root:
#   bash scripts/handoffs.sh [--clients "8 32"] [--seconds 6]
# Runs SELECT 1 (row 1 of the benchmark) and seckill_buy while stock lasts
# (row 4) with pgbench at each number of clients, under
# `perf record -e sched:sched_switch -a -g`, and counts every switch by the
# task that left the CPU and what it was waiting for, read off its stack:
# a backend waiting for its client or for the worker's answer, the worker
# waiting for Redis, for its commit's WAL flush or for requests, a task
# preempted, an idle CPU taking a task, and so on.  Prints one table a
# number of clients: switches a call, for SELECT 1 and for a purchase, and
# the price of a switch on this machine (perf bench sched pipe).  The
# switches perf itself makes are counted apart.  Run alone, it installs
# what it needs and starts its own servers.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

clients="8 32"
seconds=6
while [ $# -gt 0 ]; do
	case $1 in
	--clients) clients=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	*) echo "usage: $0 [--clients \"8 32\"] [--seconds 6]" >&2; exit 2 ;;
	esac
done

# (under test/run.sh, the test's servers and the suite's build)
if [ -z "${SECKILL_TMP:-}" ]; then
	SECKILL_PACKAGES+=(linux-perf)
	seckill_install_deps
	seckill_build_install
	seckill_start_servers
fi

psql -XAtq -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS seckill;
SELECT seckill_campaign_create('handoffs', 2000000000);
SELECT seckill_preheat('handoffs');
SQL
work=$SECKILL_TMP/handoffs
mkdir -p "$work"
echo 'SELECT 1;' >"$work/one.sql"
printf '%s\n' '\set u random(1, 1000000000000000000)' \
	"SELECT status FROM seckill_buy('u' || :u, 'handoffs');" >"$work/buy.sql"
[ "$(psql -XAtq -c "SELECT status FROM seckill_buy('first', 'handoffs')")" = ok ] ||
	seckill_die "the first purchase failed"

# the switches of one perf.data, by who left the CPU and why: "who|why count"
causes() {
	perf script -i "$1" -F comm,event,trace,ip,sym 2>/dev/null | awk '
		function count() {
			if (head == "") return
			who = comm; why = "other"
			if (comm ~ /^swapper/) { who = "an idle CPU"; why = "takes a task" }
			else if (comm ~ /^pgbench/) who = "pgbench"
			else if (comm ~ /^redis/) who = "Redis"
			else if (comm == "perf") who = "perf (the measurement)"
			else if (comm ~ /^(kworker|ksoftirqd|rcu|migration|kcompactd|kdamond|khugepaged)/) who = "kernel threads"
			else if (comm == "postgres") {
				if (stack ~ / PostgresMain /) who = "backend"
				else if (stack ~ / (seckill_worker_main|StartBackgroundWorker) /) who = "worker"
				else who = "other PostgreSQL processes"
			}
			if (who == "an idle CPU") { }
			else if (state ~ /^R/) why = "preempted"
			else if (stack ~ / PGSemaphoreLock /) why = "waits for a lock"
			else if (who == "backend" && stack ~ / futex_wait / && stack ~ / seckill_/) why = "waits for the worker'"'"'s answer"
			else if (who == "backend" && stack ~ / (secure_read|pq_recvbuf|pq_getbyte) /) why = "waits for its client"
			else if (stack ~ / (XLogFlush|issue_xlog_fsync) /) why = "waits for a WAL flush"
			else if (who == "worker" && stack ~ / (sk_conn_wait_idle|sk_redis_wait_idle) /) why = "waits for requests"
			else if (who == "worker" && stack ~ / sk_(conn|pipeline|redis)/) why = "waits for Redis"
			else if (who == "Redis") why = "waits for requests"
			else if (who == "pgbench") why = "waits for answers"
			else if (who == "kernel threads") why = "do the kernel'"'"'s work (I/O completions among it)"
			n[who "|" why]++
			head = ""
		}
		/^[^ \t]/ && /sched:sched_switch/ {
			count()
			head = $0; comm = $1; stack = " "
			state = $0; sub(/.*prev_state=/, "", state); sub(/ .*/, "", state)
			next
		}
		/^[ \t]+[0-9a-f]+ / { s = $2; sub(/\+0x[0-9a-f]+$/, "", s); stack = stack s " " }
		END { count(); for (k in n) print k, n[k] }'
}

# a cell under perf: its calls, and its switches by cause in $work/$1-$2.causes
cell() {
	local name=$1 n=$2 calls
	pgbench -n -M prepared -c "$n" -j 2 -T $((seconds + 3)) -f "$work/$name.sql" >"$work/$name-$n.out" 2>&1 &
	sleep 1.5
	perf record -q -e sched:sched_switch -a -g -o "$work/$name-$n.data" -- sleep "$seconds" >/dev/null 2>&1
	wait $! || { cat "$work/$name-$n.out" >&2; seckill_die "pgbench failed for $name"; }
	calls=$(sed -nE 's/^tps = ([0-9.]+) .*/\1/p' "$work/$name-$n.out" | awk -v s="$seconds" '{ printf "%d", $1 * s }')
	[ "${calls:-0}" -gt 0 ] || seckill_die "pgbench made no call for $name"
	causes "$work/$name-$n.data" | awk -v c="$calls" '{ k = $0; sub(/ [0-9]+$/, "", k); printf "%s|%.3f\n", k, $NF / c }' \
		>"$work/$name-$n.causes"
	echo "$calls"
}

pipe=$(perf bench sched pipe -l 20000 2>/dev/null | awk '/usecs\/op/ { printf "%.1f", $1 }')
echo "# Context switches a call, by the task that left the CPU and why"
echo
echo "perf bench sched pipe on this machine: ${pipe:-?} µs a round trip between two processes (two switches and two wake-ups)."
for n in $clients; do
	one=$(cell one "$n")
	buy=$(cell buy "$n")
	echo
	echo "## $n clients ($((one / seconds)) SELECT 1/s, $((buy / seconds)) purchases/s under perf)"
	echo
	echo "| who | why | SELECT 1 | purchase | more a purchase |"
	echo "|---|---|---:|---:|---:|"
	# the causes, most switches more a purchase first; then the totals
	awk -F'|' '
		FILENAME ~ /one-/ { a[$1 "|" $2] = $3; keys[$1 "|" $2] = 1; next }
		{ b[$1 "|" $2] = $3; keys[$1 "|" $2] = 1 }
		END {
			for (k in keys) {
				split(k, p, "|")
				if (p[1] != "perf (the measurement)" && a[k] + b[k] >= 0.005)
					printf "%.3f\t| %s | %s | %.3f | %.3f | %+.3f |\n", b[k] - a[k], p[1], p[2], a[k], b[k], b[k] - a[k]
			}
		}' "$work/one-$n.causes" "$work/buy-$n.causes" | LC_ALL=C sort -t"$(printf '\t')" -k1,1 -g -r | cut -f2-
	awk -F'|' '
		FILENAME ~ /one-/ { if ($1 == "perf (the measurement)") pa += $3; else ta += $3; next }
		{ if ($1 == "perf (the measurement)") pb += $3; else tb += $3 }
		END {
			printf "| all but perf | | %.3f | %.3f | %+.3f |\n", ta, tb, tb - ta
			printf "| perf (the measurement) | | %.3f | %.3f | |\n", pa, pb
		}' "$work/one-$n.causes" "$work/buy-$n.causes"
done
