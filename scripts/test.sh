#!/usr/bin/env bash
# The test suite, as root: bash scripts/test.sh [quick | faults | docker | test files...]
# Installs what is missing, builds and installs seckill, and runs
# test/t/*.t (bash, TAP) and test/pgtap/*.pg (pgTAP) with prove, several
# files at once (in lanes: SECKILL_TEST_JOBS of them for the files that
# work, below), each on throwaway PostgreSQL and Redis servers of its own
# (test/run.sh).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

# bash's loadable builtins (scripts/lib.sh: sleep without a process); the
# client examples' drivers (test/t/47_clients.t): psycopg 3, a JDK with
# pgJDBC, HikariCP and slf4j, Go with pgx v4, and Node.js with npm unless the
# machine has them (pg itself comes from the npm registry); PgBouncer
# (test/t/48_pgbouncer.t); postgres_exporter (test/t/62_exporter.t); the
# Debian package's build and lintian (test/t/04_debian_package.t)
SECKILL_PACKAGES+=(bash-builtins python3-psycopg default-jdk-headless libpostgresql-jdbc-java libhikaricp-java libslf4j-java
	golang-go golang-github-jackc-pgx-v4-dev pgbouncer prometheus-postgres-exporter debhelper postgresql-server-dev-all lintian
	linux-perf)
command -v npm >/dev/null || SECKILL_PACKAGES+=(nodejs npm)
seckill_install_deps
# with the crash points of the fault tests (test/t/70_crash_points.t)
seckill_build_install CRASH_POINTS=1

# One initdb for every server the files start (seckill_initdb)
template=$(mktemp -d /tmp/seckill-template.XXXXXX)
# (the groups of files another run still runs stay)
trap 'rm -rf "$template"; rmdir /sys/fs/cgroup/cpuacct/seckill-test-* 2>/dev/null || true' EXIT
seckill_make_template "$template"
# The files take slots of their own (seckill_start_servers)
unset SECKILL_PG_PORT SECKILL_REDIS_PORT SECKILL_OWN_PORT

cd "$SECKILL_ROOT"
if [ $# -eq 0 ]; then
	shopt -s nullglob
	set -- test/t/*.t test/pgtap/*.pg
elif [ "$1" = quick ]; then
	# the inner loop: the API, the schema, the purchase path, a fault of
	# each kind, and the randomized fault test for 20 s; SECKILL_QUICK
	# tells a file to leave out its variants of a fault the others check
	export SECKILL_FAULT_SECONDS=${SECKILL_FAULT_SECONDS:-20} SECKILL_QUICK=1
	set -- test/t/01_regress.t test/pgtap/schema.pg test/pgtap/monitoring.pg test/t/12_order_truth.t \
		test/t/13_double_click.t test/t/20_faults.t test/t/24_random_faults.t \
		test/t/30_stall.t test/t/31_slots.t test/t/32_row_locks.t test/t/70_crash_points.t \
		test/t/80_database_fallback.t
elif [ "$1" = faults ]; then
	# the fault suite: every failure the design claims to survive, under load
	set -- test/t/20_faults.t test/t/21_sold_out_revives.t test/t/24_random_faults.t test/t/25_redis_wrong.t \
		test/t/27_poisoned_replay.t test/t/30_stall.t test/t/31_slots.t test/t/40_redis_auth.t \
		test/t/70_crash_points.t test/t/80_database_fallback.t test/t/85_network_cut.t \
		test/t/86_garbage_replies.t test/t/90_flood.t
elif [ "$1" = docker ]; then
	# docker/'s image and compose stack, run with podman
	set -- test/t/99_docker.t
fi

# The schedule (prove's rules): a file whose header says "Runs first, alone"
# runs before everything, the container image's test included (a bound of
# time the product promises); then a file whose header says "Runs alone"
# runs, with the machine to itself but for the container image's test
# (test/t/99_docker.t, at nice 10, beside everything: it waits on downloads
# and disks for minutes); then the others in lanes, each lane one file at a
# time: SECKILL_TEST_JOBS lanes of the files that work (sales, builds),
# dealt longest first to the lane with the least time, and beside them (when
# there are two lanes or more) one lane of the files that mostly wait (less
# than half a core: cron's minute, locks' leases).  The times are those of docs/TESTING.md's table (a
# clean-clone run on a 2-core machine); a file not in it counts as working
# for 60 s.
jobs=${SECKILL_TEST_JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { seckill_die "SECKILL_TEST_JOBS must be a number of lanes, 1 or more"; exit 2; }
beside=test/t/99_docker.t
first=()
alone=()
rest=()
for f in "$@"; do
	if [ "$f" = "$beside" ]; then
		continue
	elif grep -q '^# Runs first, alone' "$f"; then
		first+=("$f")
	elif grep -q '^# Runs alone' "$f"; then
		alone+=("$f")
	else
		rest+=("$f")
	fi
done
rules=$template/rules.yml
{
	lanes=0
	[ "$jobs" -gt 1 ] && lanes=1
	if [[ " $* " == *" $beside "* ]]; then
		printf 'par:\n  - %s\n  - seq:\n' "$beside"
		lanes=$((lanes + 1))
	else
		printf 'seq:\n  - seq:\n'
	fi
	for f in "${alone[@]}"; do
		echo "      - seq: $f"
	done
	if [ ${#rest[@]} -gt 0 ]; then
		echo "      - par:"
		# shellcheck disable=SC2016 # (the table's names are in backquotes)
		sed -nE 's/^\| `([^`]+)` \| ([0-9]+) \| ([0-9]+) \|$/\1 \2 \3/p' docs/TESTING.md |
			awk -v files="${rest[*]}" '
				{ wall[$1] = $2; cpu[$1] = $3 }
				END {
					n = split(files, f, " ")
					for (i = 1; i <= n; i++) {
						base = f[i]; sub(/.*\//, "", base)
						if (!(base in wall)) {
							print "scripts/test.sh: " base " is not in docs/TESTING.md'"'"'s table: counted as working for 60 s" >"/dev/stderr"
							wall[base] = cpu[base] = 60
						}
						print (cpu[base] * 2 < wall[base] ? "wait" : "work"), wall[base], f[i]
					}
				}' | sort -k1,1 -k2,2nr |
			awk -v jobs="$jobs" '
				$1 == "wait" && jobs > 1 { waiting = waiting "\n            - " $3; next }
				{
					best = 1
					for (l = 2; l <= jobs; l++) if (load[l] < load[best]) best = l
					load[best] += $2
					lane[best] = lane[best] "\n            - " $3
				}
				END {
					for (l = 1; l <= jobs; l++) if (lane[l] != "") printf "        - seq:%s\n", lane[l]
					if (waiting != "") printf "        - seq:%s\n", waiting
				}'
	fi
} >"$rules.rest"
if [ ${#first[@]} -gt 0 ]; then
	{
		echo 'seq:'
		for f in "${first[@]}"; do
			echo "  - seq: $f"
		done
		sed '1s/^/  - /; 2,$s/^/    /' "$rules.rest"
	} >"$rules"
else
	mv "$rules.rest" "$rules"
fi
# (a lane more for the container's test, and one for the files that wait)
jobs=$((jobs + lanes))
files=("${first[@]}" "${alone[@]}" "${rest[@]}")
[[ " $* " == *" $beside "* ]] && files=("$beside" "${files[@]}")
# (the container's test alone needs no rules)
[ ${#files[@]} -gt 1 ] && export HARNESS_RULESFILE=$rules

prove --timer -j "$jobs" --exec "bash $SECKILL_ROOT/test/run.sh" "${files[@]}"
