#!/usr/bin/env bash
# An A/B run, as root: bash scripts/ab.sh [--passes N] [--seconds S] [--clients C] [--row R] REF
# Row 4 of the benchmark (seckill_buy while stock lasts, durable; --row 4r
# with the rate limits of bench.sh's row 4r, 4t with its one-time tokens) with the
# library built from REF (A) and from the work tree (B), alternated on one
# pair of servers: each pass installs A, restarts PostgreSQL, measures,
# then the same with B.  Prints each cell's purchases/s, the machine's CPU
# and context switches per purchase (/proc/stat around the cell), the
# purchases a commit (seckill.worker_counters()) and p99, their medians,
# and B/A.
# A change of speed is measured here, not assumed; both sides must expect
# the same version of the extension's SQL.  Starts its own servers, on a
# free slot of ports (or SECKILL_PG_PORT, SECKILL_REDIS_PORT).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

passes=3
seconds=10
clients=32
row=4
while [ $# -gt 1 ]; do
	case $1 in
	--passes) passes=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--clients) clients=$2; shift 2 ;;
	--row) row=$2; shift 2 ;;
	*) break ;;
	esac
done
[ $# -eq 1 ] || { echo "usage: $0 [--passes N] [--seconds S] [--clients C] [--row 4|4r|4t] REF" >&2; exit 2; }
case $row in
4) limits='{}'; token= ;;
4r) limits='{"user_rate": 1000, "user_burst": 1000, "addr_rate": 1000000, "addr_burst": 1000000}'; token= ;;
4t) limits='{"token_required": true}'; token=", 1, seckill_token('u' || :u, 'ab-stock')" ;;
*) echo "seckill: --row is 4, 4r or 4t" >&2; exit 2 ;;
esac
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
SELECT seckill_campaign_set('ab-stock', '$limits');
SELECT seckill_preheat('ab-stock');
SQL
printf '%s\n' '\set u random(1, 1000000000000000000)' \
	"SELECT status FROM seckill_buy('u' || :u, 'ab-stock'$token);" >"$work/buy.sql"

# one purchase by user $1, as the cells make them
warm_buy() {
	local token=
	[ "$row" = 4t ] && token=", 1, seckill_token('$1', 'ab-stock')"
	psql -XAtq -c "SELECT status FROM seckill_buy('$1', 'ab-stock'$token)" 2>/dev/null
}
commits() { psql -XAtq -c 'SELECT commits FROM seckill.worker_counters()'; }
hz=$(getconf CLK_TCK)

# A library put in place by a rename: the running server keeps the one it
# mapped, where a copy over it could crash it.
put_library() {
	install -m 755 "$1" "$lib.ab" && mv -f "$lib.ab" "$lib"
}

# side: install its library, restart, wait for the worker, measure
cell() {
	local side=$1 pass=$2 b0 b1 x0 x1 c0 c1 calls figures
	put_library "$work/$side.so"
	seckill_pg_restart
	seckill_wait_for '[ -n "$(seckill_worker_pid)" ]' 30
	# one purchase first: the worker has loaded its cache and reached Redis
	seckill_wait_for "[ \"\$(warm_buy warm-$side-$pass)\" = ok ]" 30
	c0=$(commits)
	read -r b0 _ _ x0 <<<"$(seckill_machine_ticks)"
	figures=$(seckill_pgbench "$work/$side-$pass" "$clients" "$seconds" "$work/buy.sql") ||
		{ cat "$work/$side-$pass/pgbench.out" >&2; exit 1; }
	read -r b1 _ _ x1 <<<"$(seckill_machine_ticks)"
	c1=$(commits)
	calls=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/$side-$pass/pgbench.out")
	awk -v s="$side" -v p="$pass" -v c="$calls" -v b="$((b1 - b0))" -v hz="$hz" -v k="$((c1 - c0))" \
		-v f="$figures" -v x="$((x1 - x0))" 'BEGIN {
			split(f, v, " ")
			printf "%s %s %d %.1f %.1f %s %.2f\n", s, p, v[1], b / hz * 1e6 / c, c / (k > 0 ? k : 1), v[4], x / c
		}' >>"$work/cells"
	tail -1 "$work/cells" | awk '{
		printf "  pass %s, %s: %6d purchases/s, %6.1f µs of CPU a purchase, %4.1f purchases a commit, p99 %s ms, %.2f switches a purchase\n",
			$2, toupper($1), $3, $4, $5, $6, $7 }' >&2
}

echo "A/B: A = $ref ($(git -C "$tree" log -1 --format=%h)), B = the work tree; row $row, $clients clients, ${seconds}s a cell, $passes passes" >&2
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
	{ n[$1]++; tps[$1, n[$1]] = $3; cpu[$1, n[$1]] = $4; per[$1, n[$1]] = $5; p99[$1, n[$1]] = $6; sw[$1, n[$1]] = $7 }
	END {
		for (s in n) {
			for (i = 1; i <= n[s]; i++) { t[i] = tps[s, i]; c[i] = cpu[s, i]; g[i] = per[s, i]; q[i] = p99[s, i]; w[i] = sw[s, i] }
			mt[s] = median(t, n[s]); mc[s] = median(c, n[s]); mg[s] = median(g, n[s]); mq[s] = median(q, n[s]); mw[s] = median(w, n[s])
		}
		printf "| side | purchases/s | µs of CPU a purchase | purchases a commit | p99, ms | switches a purchase |\n|---|---:|---:|---:|---:|---:|\n"
		printf "| A | %d | %.1f | %.1f | %.2f | %.2f |\n", mt["a"], mc["a"], mg["a"], mq["a"], mw["a"]
		printf "| B | %d | %.1f | %.1f | %.2f | %.2f |\n", mt["b"], mc["b"], mg["b"], mq["b"], mw["b"]
		printf "\nmedians; B/A: %.3f of the purchases/s, %.3f of the CPU a purchase, %.3f of the switches a purchase\n", mt["b"] / mt["a"], mc["b"] / mc["a"], mw["b"] / mw["a"]
	}' "$work/cells"
