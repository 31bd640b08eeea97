#!/usr/bin/env bash
# An A/B run, as root: bash scripts/ab.sh [--passes N] [--seconds S] [--clients C] REF
# Row 4 of the benchmark (seckill_buy while stock lasts, durable) with the
# library built from REF (A) and from the work tree (B), alternated on one
# pair of servers: each pass installs A, restarts PostgreSQL, measures,
# then the same with B.  Prints each cell's purchases/s and the machine's
# CPU per purchase (/proc/stat around the cell), the medians, and B/A.
# A change of speed is measured here, not assumed; both sides must expect
# the same version of the extension's SQL.  Starts its own servers (ports
# from SECKILL_PG_PORT, SECKILL_REDIS_PORT).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

passes=3
seconds=10
clients=32
while [ $# -gt 1 ]; do
	case $1 in
	--passes) passes=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	*) break ;;
	esac
done
[ $# -eq 1 ] || { echo "usage: $0 [--passes N] [--seconds S] [--clients C] REF" >&2; exit 2; }
ref=$1
git -C "$SECKILL_ROOT" rev-parse --verify -q "$ref^{commit}" >/dev/null ||
	{ echo "seckill: $ref is not a commit of this repository" >&2; exit 2; }

seckill_install_deps
sql_version() { sed -n 's/^#define SECKILL_SQL_VERSION "\(.*\)"$/\1/p' "$1/src/seckill.h"; }

work=$(mktemp -d /tmp/seckill-ab.XXXXXX)
tree=$work/a
cleanup() {
	git -C "$SECKILL_ROOT" worktree remove --force "$tree" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
git -C "$SECKILL_ROOT" worktree add -q --detach "$tree" "$ref"
if [ "$(sql_version "$tree")" != "$(sql_version "$SECKILL_ROOT")" ]; then
	echo "seckill: $ref expects the extension's SQL at $(sql_version "$tree"), the work tree at $(sql_version "$SECKILL_ROOT"): no A/B across an update" >&2
	exit 2
fi
lib=$("$SECKILL_PG_CONFIG" --pkglibdir)/seckill.so
make -s -C "$tree" -j"$(nproc)" PG_CONFIG="$SECKILL_PG_CONFIG" >"$work/build-a.log" 2>&1 ||
	{ cat "$work/build-a.log" >&2; exit 1; }
cp "$tree/seckill.so" "$work/a.so"
seckill_build_install
cp "$lib" "$work/b.so"
# the A side's install scripts are the same as B's (same SQL version)
seckill_start_servers
# cleanup runs before the servers stop: chain both
trap 'cleanup; seckill_on_exit' EXIT

psql -XAtq -v ON_ERROR_STOP=1 <<SQL >/dev/null
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS seckill;
SELECT seckill_campaign_create('ab-stock', 2000000000);
SELECT seckill_preheat('ab-stock');
SQL
printf '%s\n' '\set u random(1, 1000000000000000000)' \
	"SELECT status FROM seckill_buy('u' || :u, 'ab-stock');" >"$work/buy.sql"

busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
hz=$(getconf CLK_TCK)

# A library put in place by a rename: the running server keeps the one it
# mapped, where a copy over it could crash it.
put_library() {
	install -m 755 "$1" "$lib.ab" && mv -f "$lib.ab" "$lib"
}

# side: install its library, restart, wait for the worker, measure
cell() {
	local side=$1 pass=$2 b0 b1 calls tps
	put_library "$work/$side.so"
	seckill_pg_restart
	seckill_wait_for '[ -n "$(seckill_worker_pid)" ]' 30
	# one purchase first: the worker has loaded its cache and reached Redis
	seckill_wait_for "[ \"\$(psql -XAtq -c \"SELECT status FROM seckill_buy('warm-$side-$pass', 'ab-stock')\" 2>/dev/null)\" = ok ]" 30
	b0=$(busy_ticks)
	seckill_pgbench "$work/$side-$pass" "$clients" "$seconds" "$work/buy.sql" >/dev/null ||
		{ cat "$work/$side-$pass/pgbench.out" >&2; exit 1; }
	b1=$(busy_ticks)
	calls=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/$side-$pass/pgbench.out")
	tps=$(sed -nE 's/^tps = ([0-9]+)\..*/\1/p' "$work/$side-$pass/pgbench.out")
	awk -v s="$side" -v p="$pass" -v t="$tps" -v c="$calls" -v b="$((b1 - b0))" -v hz="$hz" \
		'BEGIN { printf "%s %s %d %.1f\n", s, p, t, b / hz * 1e6 / c }' >>"$work/cells"
	tail -1 "$work/cells" | awk '{ printf "  pass %s, %s: %6d purchases/s, %6.1f µs of CPU a purchase\n", $2, toupper($1), $3, $4 }' >&2
}

echo "A/B: A = $ref ($(git -C "$tree" log -1 --format=%h)), B = the work tree; row 4, $clients clients, ${seconds}s a cell, $passes passes" >&2
: >"$work/cells"
for pass in $(seq "$passes"); do
	cell a "$pass"
	cell b "$pass"
done
put_library "$work/b.so"

awk '
	function median(v, n,    i, j, t) {
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
		return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	}
	{ n[$1]++; tps[$1, n[$1]] = $3; cpu[$1, n[$1]] = $4 }
	END {
		for (s in n) {
			for (i = 1; i <= n[s]; i++) { t[i] = tps[s, i]; c[i] = cpu[s, i] }
			mt[s] = median(t, n[s]); mc[s] = median(c, n[s])
		}
		printf "| side | purchases/s, median | µs of CPU a purchase, median |\n|---|---:|---:|\n"
		printf "| A | %d | %.1f |\n| B | %d | %.1f |\n", mt["a"], mc["a"], mt["b"], mc["b"]
		printf "\nB/A: %.3f of the purchases/s, %.3f of the CPU a purchase\n", mt["b"] / mt["a"], mc["b"] / mc["a"]
	}' "$work/cells"
