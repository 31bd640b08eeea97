#!/usr/bin/env bash
# The benchmark's short run: every contender runs, the report and the chart
# are written, and the benchmark's own invariant check passes.  (The figures
# themselves are not judged here: see docs/PERFORMANCE.md.)
# It runs beside other files: its figures are the smoke run's, not the
# machine's (scripts/bench.sh without --smoke, alone, gives those).
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# (its servers are this file's own: the Java cells may restart Redis empty)
SECKILL_BENCH_FAULTS=1 bash "$SECKILL_ROOT/scripts/bench.sh" --smoke --out "$out" >"$out/bench.log" 2>&1
ok "[ $? -eq 0 ]" "scripts/bench.sh --smoke ran" || diag "$(tail -30 "$out/bench.log")"
ok "grep -q '^Invariants: no oversell, no double purchase' '$out/bench.log'" "its invariant check passed"
# the switches' account: perf sees every process of the machine, this
# file's neighbours' too, so only the purchase's own cause is judged
bash "$SECKILL_ROOT/scripts/handoffs.sh" --clients 4 --seconds 1 >"$out/handoffs.md" 2>"$out/handoffs.log"
ok "[ $? -eq 0 ]" "scripts/handoffs.sh ran" || diag "$(tail -30 "$out/handoffs.log")"
ok "grep -Eq '^\\| backend \\| waits for its client \\| [0-9.]+ \\| [0-9.]+ \\|' '$out/handoffs.md'" \
	"it finds the backends waiting for their client"
ok "grep -Eq '^\\| backend \\| waits for the worker.s answer \\| [0-9.]+ \\| ([1-9]|0\\.[5-9])' '$out/handoffs.md'" \
	"a purchase's caller waits for the worker's answer, at least every other call" || diag "$(cat "$out/handoffs.md")"
for row in 1 1s 1f 1g 1j 1n 1q 2 3 4 4s 4c 5 5j 6a 6b 7a 7b 7c 7d 7e 7f 7g 7h; do
	ok "grep -Eq '^\\| $row \\| .* \\| 8 \\| [0-9]+ \\|' '$out/results.md'" "row $row measured"
done
for row in 2p 4p; do
	ok "grep -Eq '^\\| $row \\| .* \\| 64 \\| [0-9]+ \\|' '$out/results.md'" "row $row measured, 64 clients through PgBouncer"
done
ok "grep -q 'per 1,000 purchases' '$out/results.md'" "the worker's counters are reported"
for design in article seckill; do
	ok "grep -Eq '^\\| $design \\| 8 \\| [0-9]+ \\| [0-9]+ \\| [0-9]+ \\|' '$out/results.md'" \
		"the Java cell: $design measured from the same JVM"
done
for fault in 'Redis restarted empty' 'SIGKILL of the JVM, shop started again'; do
	ok "grep -Eq '^\\| article \\| $fault \\| [0-9]+ \\| [0-9]+ \\| [0-9]+ \\| [0-9]+ \\|' '$out/results.md'" \
		"the Java cell: the article's design through a fault ($fault)"
	ok "grep -Eq '^\\| seckill \\| $fault \\| [0-9]*[1-9][0-9]* \\| [0-9]+ \\| 0 \\| [0-9]+ \\|' '$out/results.md'" \
		"the Java cell: seckill through a fault ($fault) lost no order it answered ok"
done
ok "grep -Eq '^\\| yes \\| after the start \\| [0-9]+ \\| [0-9]+ \\| [0-9]+ \\|' '$out/results.md' && grep -Eq '^\\| no \\| [^|]+ \\| [0-9]+ \\| [0-9]+ \\|' '$out/results.md'" \
	"the fairness of people and bots is measured, without the waiting room and with it"
# (each pass table: its heading, a blank line, the header and the rule, the passes)
ok "grep -A5 '^The sold-out answer (row 5) against' '$out/results.md' | grep -Eq '^\\| 1 \\| [0-9]+ \\| [0-9]+ \\| [0-9]+\\.[0-9]+ \\|\$'" \
	"the sold-out answer is measured against its control"
ok "grep -A4 '^The poll (1q) against its control' '$out/results.md' | grep -Eq '^\\| 1 \\| [0-9]+ \\| [0-9]+ \\| [0-9]+\\.[0-9]+ \\|\$'" \
	"the poll is measured against its control, the two alternated"
# row 4's CPU line: the worker and Redis worked for it, row 1's worker hardly
ok "grep -Eq '^\\| 4 \\| 8 \\| [0-9]+ \\| [0-9]*[1-9][0-9]*\\.[0-9] \\| [0-9]*[1-9][0-9]*\\.[0-9] \\|' '$out/results.md'" \
	"the CPU of row 4 is accounted: the worker's and Redis' per call"
# (row 1 does not use the worker: what it has of the worker's CPU is the
# worker's own timers, the audit of each second among them, shared out
# over the cell's calls)
worker_us() { awk -F'|' -v row="$1" '$2 == " " row " " && $3 == " 8 " && $4 ~ /^ [0-9]+ $/ { print $5 + 0 }' "$out/results.md"; }
row1_worker=$(worker_us 1)
row4_worker=$(worker_us 4)
ok "awk -v a='$row1_worker' -v b='$row4_worker' 'BEGIN { exit !(a != \"\" && b != \"\" && a * 10 < b) }'" \
	"the CPU of row 1 is accounted: the worker's, $row1_worker µs a call, under a tenth of row 4's ($row4_worker µs)"
ok "grep -Eq '^\\| 4 \\| 8 \\| .* \\| [0-9]*[1-9][0-9]*\\.[0-9]{2} \\|$' '$out/results.md'" \
	"the context switches of row 4 are accounted: at least one a call"
ok "grep -q '<svg' '$out/throughput.svg'" "the chart is drawn"
diag "$(grep -E '^\| [0-9]' "$out/results.md" | cut -d'|' -f2-6)"
done_testing
