#!/usr/bin/env bash
# The test suite, as root: bash scripts/test.sh [quick | faults | docker | test files...]
# Installs what is missing, builds and installs seckill, and runs
# test/t/*.t (bash, TAP) and test/pgtap/*.pg (pgTAP) with prove, several
# files at once (SECKILL_TEST_JOBS), each on throwaway PostgreSQL and Redis
# servers of its own (test/run.sh).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

# the client examples' drivers (test/t/47_clients.t): psycopg 3, a JDK with
# pgJDBC, HikariCP and slf4j, Go with pgx v4, and Node.js with npm unless the
# machine has them (pg itself comes from the npm registry); PgBouncer
# (test/t/48_pgbouncer.t); postgres_exporter (test/t/62_exporter.t); the
# Debian package's build and lintian (test/t/04_debian_package.t)
SECKILL_PACKAGES+=(python3-psycopg default-jdk-headless libpostgresql-jdbc-java libhikaricp-java libslf4j-java
	golang-go golang-github-jackc-pgx-v4-dev pgbouncer prometheus-postgres-exporter debhelper postgresql-server-dev-all lintian)
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

# The longest files start first, so that none of them is left running
# alone at the end; a file whose header says "Runs alone" runs before the
# others, with the machine to itself but for the container image's build
# (test/t/99_docker.t, at nice 10: it waits on downloads and disks for
# minutes and would otherwise take a slot from the files after them).
first=(test/t/99_docker.t test/t/24_random_faults.t test/t/89_sentinel.t test/t/04_debian_package.t
	test/t/88_epoch_lost.t test/t/36_big_rebuild.t test/t/41_redis_tls.t test/t/70_crash_points.t
	test/t/10_stampede.t test/t/60_cron.t test/t/16_group_commit.t)
files=()
for f in "${first[@]}"; do
	[[ " $* " == *" $f "* ]] && files+=("$f")
done
for f in "$@"; do
	[[ " ${first[*]} " == *" $f "* ]] || files+=("$f")
done
rules=$template/rules.yml
beside=test/t/99_docker.t
{
	if [[ " ${files[*]} " == *" $beside "* ]]; then
		printf 'par:\n  - %s\n  - seq:\n' "$beside"
	else
		printf 'seq:\n  - seq:\n'
	fi
	for f in "${files[@]}"; do
		grep -q '^# Runs alone' "$f" && echo "      - seq: $f"
	done
	echo "      - par: '**'"
} >"$rules"

HARNESS_RULESFILE=$rules prove --timer -j "${SECKILL_TEST_JOBS:-2}" --exec "bash $SECKILL_ROOT/test/run.sh" \
	"${files[@]}"
