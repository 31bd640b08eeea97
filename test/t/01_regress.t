#!/usr/bin/env bash
# The pg_regress suite (sql/*.sql against expected/*.out) and the isolation
# specs (specs/*.spec against expected/*.out), as make installcheck would
# run them, against the running server, one TAP line per test.
# Runs alone: the isolation specs interleave sessions around waits of
# 200 ms.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

names() { # dir extension: the tests there, but the extension's scripts
	local f name
	for f in "$SECKILL_ROOT/$1"/*."$2"; do
		name=$(basename "$f" ".$2")
		[[ -e $f && $name != seckill--* ]] && echo "$name"
	done
}
mapfile -t regress < <(names sql sql)
mapfile -t isolation < <(names specs spec)
plan $((${#regress[@]} + ${#isolation[@]}))

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# suite driver label tests...: run one suite, a TAP line per test.  The worker
# serves one database (seckill.database, postgres by default): the tests run
# there, as with the Makefile's REGRESS_OPTS.
suite() {
	local driver=$1 label=$2 t result
	shift 2
	[ $# -gt 0 ] || return 0
	mkdir -p "$out/$label"
	"$(pg_config --pkglibdir)/pgxs/src/test/$driver" \
		--inputdir="$SECKILL_ROOT" --outputdir="$out/$label" --use-existing \
		--host=127.0.0.1 --port="$PGPORT" --user=postgres \
		--dbname=postgres "$@" >"$out/$label/run.out" 2>&1
	for t in "$@"; do
		result=$(sed -nE "s/^(test| ) +$t +\.\.\. +(ok|FAILED|failed \(ignored\)).*/\2/p" \
			"$out/$label/run.out")
		is "$result" ok "$label: $t"
	done
	if [ "$TAP_FAILED" -gt 0 ]; then
		diag "$(cat "$out/$label/run.out")"
		[ -f "$out/$label/regression.diffs" ] && diag "$(cat "$out/$label/regression.diffs")"
	fi
}

suite regress/pg_regress regress "${regress[@]}"
suite isolation/pg_isolation_regress isolation "${isolation[@]}"
done_testing
