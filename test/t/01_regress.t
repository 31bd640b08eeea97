#!/usr/bin/env bash
# The pg_regress suite (sql/*.sql against expected/*.out, as make installcheck
# would run it) against the running server, one TAP line per test.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

tests=()
for f in "$SECKILL_ROOT"/sql/*.sql; do
	name=$(basename "$f" .sql)
	[[ -e $f && $name != seckill--* ]] && tests+=("$name")
done
if [ ${#tests[@]} -eq 0 ]; then
	echo "1..0 # SKIP no regression tests under sql/"
	exit 0
fi
plan ${#tests[@]}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The worker serves one database (seckill.database, postgres by default): the
# tests run there, as with the Makefile's REGRESS_OPTS.
"$(pg_config --pkglibdir)/pgxs/src/test/regress/pg_regress" \
	--inputdir="$SECKILL_ROOT" --outputdir="$out" --use-existing \
	--host=127.0.0.1 --port="$PGPORT" --user=postgres \
	--dbname=postgres "${tests[@]}" >"$out/pg_regress.out" 2>&1

for t in "${tests[@]}"; do
	result=$(sed -nE "s/^(test| ) +$t +\.\.\. +(ok|FAILED|failed \(ignored\)).*/\2/p" \
		"$out/pg_regress.out")
	is "$result" ok "regress: $t"
done

if [ "$TAP_FAILED" -gt 0 ]; then
	diag "$(cat "$out/pg_regress.out")"
	[ -f "$out/regression.diffs" ] && diag "$(cat "$out/regression.diffs")"
fi
done_testing
