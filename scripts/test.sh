#!/usr/bin/env bash
# The test suite, as root: bash scripts/test.sh [faults | docker | test files...]
# Installs what is missing, builds and installs seckill, starts throwaway
# PostgreSQL and Redis servers (ports from SECKILL_PG_PORT, SECKILL_REDIS_PORT)
# and runs test/t/*.t (bash, TAP) and test/pgtap/*.pg (pgTAP) with prove.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

# the client examples' drivers (test/t/47_clients.t): psycopg 3, and Node.js
# with npm unless the machine has them (pg itself comes from the npm
# registry); PgBouncer (test/t/48_pgbouncer.t); postgres_exporter
# (test/t/62_exporter.t); the Debian package's build (test/t/04_debian_package.t)
SECKILL_PACKAGES+=(python3-psycopg pgbouncer prometheus-postgres-exporter debhelper postgresql-server-dev-all)
command -v npm >/dev/null || SECKILL_PACKAGES+=(nodejs npm)
seckill_install_deps
# with the crash points of the fault tests (test/t/70_crash_points.t)
seckill_build_install CRASH_POINTS=1
seckill_start_servers

cd "$SECKILL_ROOT"
if [ $# -eq 0 ]; then
	shopt -s nullglob
	set -- test/t/*.t test/pgtap/*.pg
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

# Failing tests print the servers' log tails themselves: prove's summary
# stays the last thing printed.
SECKILL_LOGS_ON_FAILURE=0
prove --source pgTAP \
	--pgtap-option dbname=postgres --pgtap-option host=127.0.0.1 \
	--pgtap-option port="$PGPORT" --pgtap-option username=postgres \
	--source Perl --ext .t --ext .pg "$@"
