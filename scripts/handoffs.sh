#!/usr/bin/env bash
# Where the context switches of a purchase go, as root:
#   bash scripts/handoffs.sh [--clients "8 32"] [--seconds 6]
# Runs SELECT 1 (row 1 of the benchmark) and seckill_buy while stock lasts
# (row 4) with pgbench at each number of clients, under `perf record -e
# sched:sched_switch -e cpu-clock -a -g`, and counts every switch by the
# task that left the CPU and what it was waiting for, read off its stack:
# a backend waiting for its client or for the worker's answer, the worker
# waiting for Redis, for its commit's WAL flush or for requests, a task
# preempted, an idle CPU taking a task, and so on.  Prints one table a
# number of clients: switches a call, for SELECT 1 and for a purchase, the
# CPU a call and the part of it the scheduler's switches and wake-ups take
# (cpu-clock samples), and the price of a switch on this machine (perf
# bench sched pipe).  The switches perf itself makes are counted apart.
# Run alone, it installs what it needs and starts its own servers.
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

# One perf.data, read: each switch by who left the CPU and why ("who|why
# count" lines), then "cpu busy-µs switching-µs" from the cpu-clock samples,
# one every $period ns of each CPU: the CPU not idle and, of it, what the
# scheduler's switches and wake-ups took (a stack through __schedule,
# try_to_wake_up or sched_ttwu_pending)
period=250000
read_perf() {
	perf script -i "$1" -F comm,event,trace,ip,sym | awk -v us="$((period / 1000))" '
		function switch_cause() {
			who = comm; why = "other"
			if (comm ~ /^swapper/) { who = "an idle CPU"; why = "takes a task" }
			else if (comm ~ /^pgbench/) who = "pgbench"
			else if (comm ~ /^redis/) who = "Redis"
			else if (comm == "perf") who = "perf (the measurement)"
			else if (comm ~ /^(kworker|ksoftirqd|rcu|migration|kcompactd|kdamond|khugepaged)/) who = "kernel threads"
			else if (comm == "postgres") {
				if (stack ~ / PostgresMain /) who = "backend"
				else if (stack ~ / seckill_worker_main /) who = "worker"
				else who = "other PostgreSQL processes"
			}
			if (who == "an idle CPU") { }
			else if (state ~ /^R/) why = "preempted"
			else if (stack ~ / (PGSemaphoreLock|LWLockAcquire|LWLockAcquireOrWait|LWLockWaitForVar) /) why = "waits for a lock"
			else if (who == "backend" && stack ~ / futex_wait / && stack ~ / seckill_/) why = "waits for the worker'"'"'s answer"
			else if (who == "backend" && stack ~ / (secure_read|pq_recvbuf|pq_getbyte) /) why = "waits for its client"
			else if (stack ~ / (XLogFlush|issue_xlog_fsync) /) why = "waits for a WAL flush"
			else if (who == "worker" && stack ~ / (sk_conn_wait_idle|sk_redis_wait_idle) /) why = "waits for requests"
			else if (who == "worker" && stack ~ / sk_(conn|pipeline|redis)/) why = "waits for Redis"
			else if (who == "Redis") why = "waits for requests"
			else if (who == "pgbench") why = "waits for answers"
			else if (who == "kernel threads") why = "do the kernel'"'"'s work (I/O completions among it)"
			n[who "|" why]++
		}
		function count() {
			if (event == "switch")
				switch_cause()
			else if (event == "cpu") {
				switching = stack ~ / (__schedule|try_to_wake_up|sched_ttwu_pending) /
				if (comm !~ /^swapper/ || switching) busy++
				if (switching) sw++
			}
			event = ""
		}
		/^[^ \t]/ {
			count()
			comm = $1; stack = " "
			if ($0 ~ /sched:sched_switch/) {
				event = "switch"
				# the state of the task that left: "prev_state=S ==>", or "S ==>"
				state = $0; sub(/ ==>.*/, "", state); sub(/.* /, "", state); sub(/^prev_state=/, "", state)
			} else if ($0 ~ /cpu-clock/)
				event = "cpu"
			next
		}
		/^[ \t]+[0-9a-f]+ / { s = $2; sub(/\+0x[0-9a-f]+$/, "", s); stack = stack s " " }
		END { count(); for (k in n) print k, n[k]; print "cpu", busy * us, sw * us }'
}

# A cell under perf, which records for exactly pgbench's run, so that the
# calls are the window's: its calls on stdout; its switches a call by cause
# in $work/$1-$2.causes, its CPU a call, busy and switching, in
# $work/$1-$2.cpu
cell() {
	local name=$1 n=$2 calls
	perf record -q -e sched:sched_switch -e "cpu-clock/period=$period/" -a -g -o "$work/$name-$n.data" -- \
		pgbench -n -M prepared -c "$n" -j 2 -T "$seconds" -f "$work/$name.sql" >"$work/$name-$n.out" 2>&1 ||
		{ cat "$work/$name-$n.out" >&2; seckill_die "perf record of pgbench failed for $name"; exit 1; }
	calls=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/$name-$n.out")
	[ "${calls:-0}" -gt 0 ] || { cat "$work/$name-$n.out" >&2; seckill_die "pgbench made no call for $name"; exit 1; }
	read_perf "$work/$name-$n.data" 2>"$work/$name-$n.script.log" >"$work/$name-$n.read" ||
		{ cat "$work/$name-$n.script.log" >&2; seckill_die "perf script failed for $name"; exit 1; }
	grep -q '^[^|]*|' "$work/$name-$n.read" || { seckill_die "perf recorded no switch for $name"; exit 1; }
	awk -v c="$calls" '$1 != "cpu" { k = $0; sub(/ [0-9]+$/, "", k); printf "%s|%.3f\n", k, $NF / c }' \
		"$work/$name-$n.read" >"$work/$name-$n.causes" &&
		awk -v c="$calls" '$1 == "cpu" { printf "%.1f %.1f\n", $2 / c, $3 / c }' "$work/$name-$n.read" >"$work/$name-$n.cpu" ||
		{ seckill_die "could not sum the switches of $name"; exit 1; }
	echo "$calls"
}

# a round trip of two switches, both processes on one CPU, then free to
# take a CPU each (a wake-up then crosses to the other CPU)
pipe_us() { "$@" perf bench sched pipe -l 20000 2>/dev/null | awk '/usecs\/op/ { printf "%.1f", $1 }' || true; }
pipe_one=$(pipe_us taskset -c 0)
pipe_two=$(pipe_us env)
echo "# Context switches a call, by the task that left the CPU and why"
echo
echo "perf bench sched pipe on this machine: ${pipe_one:-?} µs a round trip between two processes (two switches and two wake-ups) on one CPU, ${pipe_two:-?} µs free to use both."
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
	read -r one_busy one_sw <"$work/one-$n.cpu"
	read -r buy_busy buy_sw <"$work/buy-$n.cpu"
	echo
	echo "CPU a call (cpu-clock samples): SELECT 1 $one_busy µs, of which $one_sw in the scheduler's switches and wake-ups; a purchase $buy_busy µs, of which $buy_sw."
done
