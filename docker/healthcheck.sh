#!/usr/bin/env bash
# The seckill image's health: postgres accepts connections and seckill's
# worker is running.  As the user postgres, whom peer authentication lets in
# as the superuser POSTGRES_USER (docker/entrypoint.sh).
set -euo pipefail

as_postgres() {
	setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
}

user=${POSTGRES_USER:-postgres}
as_postgres pg_isready -q -h /var/run/postgresql -U "$user" -d template1
workers=$(as_postgres psql -XAtq -h /var/run/postgresql -U "$user" -d template1 \
	-c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'seckill worker'")
[ "$workers" -ge 1 ]
