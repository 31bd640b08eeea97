#!/usr/bin/env bash
# The entrypoint of the seckill image.
#
# On the first start (no cluster in PGDATA) it makes one from the
# environment: initdb with POSTGRES_PASSWORD (scram-sha-256, connections from
# the network with a password), seckill and pg_cron preloaded, both extensions
# created in SECKILL_DATABASE and the housekeeping jobs scheduled there.  On
# every start it writes the Redis settings from the environment, then runs
# postgres as its child: SIGTERM or SIGINT stop it with a fast shutdown,
# SIGHUP reloads its configuration.
#
#   IMAGE [postgres] [-c name=value ...]   postgres, with these options
#   IMAGE COMMAND...                       any other command, as is
set -euo pipefail

PGDATA=${PGDATA:-/var/lib/postgresql/data/pgdata}
SOCKETS=/var/run/postgresql
# seckill refuses a password file that anyone but its owner may read
# (chmod 600), which a mounted secret seldom is: it reads a copy.
REDIS_PASSWORD_COPY=/var/lib/postgresql/seckill-redis.pass
CONTAINER_CONF=seckill-container.conf

die() {
	echo "seckill-entrypoint: $*" >&2
	exit 1
}

as_postgres() {
	setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
}

# a value quoted for postgresql.conf, where a backslash escapes too
conf_quote() {
	local value=${1//\\/\\\\}
	printf "'%s'" "${value//\'/\'\'}"
}

# The Redis settings, from the environment of this start: a container made
# anew with other values takes them.  ALTER SYSTEM still overrides them.
write_container_conf() {
	local dir=$1 port=${SECKILL_REDIS_PORT:-6379} password_file=
	case $port in
	'' | *[!0-9]*) die "SECKILL_REDIS_PORT must be a port number, not '$port'" ;;
	esac
	if [ -n "${SECKILL_REDIS_PASSWORD_FILE:-}" ]; then
		[ -r "$SECKILL_REDIS_PASSWORD_FILE" ] ||
			die "SECKILL_REDIS_PASSWORD_FILE: cannot read $SECKILL_REDIS_PASSWORD_FILE"
		install -m 600 -o postgres -g postgres "$SECKILL_REDIS_PASSWORD_FILE" "$REDIS_PASSWORD_COPY"
		password_file=$REDIS_PASSWORD_COPY
	else
		rm -f "$REDIS_PASSWORD_COPY"
	fi
	{
		echo "# Written at every start of the container from its environment"
		echo "# (SECKILL_REDIS_*): change that, not this file."
		echo "seckill.redis_host = $(conf_quote "${SECKILL_REDIS_HOST:-redis}")"
		echo "seckill.redis_port = $port"
		echo "seckill.redis_user = $(conf_quote "${SECKILL_REDIS_USER:-}")"
		echo "seckill.redis_password_file = $(conf_quote "$password_file")"
	} >"$dir/$CONTAINER_CONF"
	chown postgres:postgres "$dir/$CONTAINER_CONF"
}

# Made aside and moved into PGDATA with PG_VERSION last, so that a first
# start that fails half-way is done again from the start next time.
initialize() {
	local password=${POSTGRES_PASSWORD:-} db=${SECKILL_DATABASE:-postgres}
	local work=${PGDATA%/}.initializing
	if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
		password=$(head -n 1 "$POSTGRES_PASSWORD_FILE") ||
			die "POSTGRES_PASSWORD_FILE: cannot read $POSTGRES_PASSWORD_FILE"
	fi
	[ -n "$password" ] ||
		die "set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) for the first start: the password of the superuser postgres"
	if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
		die "$PGDATA is not empty but holds no cluster (no PG_VERSION): empty it or set PGDATA elsewhere"
	fi

	echo "seckill-entrypoint: first start: a new cluster in $PGDATA, seckill in database \"$db\""
	rm -rf "$work"
	install -d -o postgres -g postgres -m 700 "$work"
	printf '%s\n' "$password" >"$work/password"
	chown postgres:postgres "$work/password"
	if ! as_postgres initdb -D "$work/pgdata" -U postgres --pwfile="$work/password" \
		--auth-local=peer --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$work/initdb.log" 2>&1; then
		cat "$work/initdb.log" >&2
		die "initdb failed"
	fi
	rm -f "$work/password"
	echo 'host all all all scram-sha-256' >>"$work/pgdata/pg_hba.conf"
	cat >>"$work/pgdata/postgresql.conf" <<EOF

# seckill's container (docker/entrypoint.sh)
listen_addresses = '*'
shared_preload_libraries = 'seckill,pg_cron'
seckill.database = $(conf_quote "$db")
cron.database_name = $(conf_quote "$db")
# pg_cron's jobs run in background workers: no connection, no password
cron.use_background_workers = on
max_worker_processes = 16
include = '$CONTAINER_CONF'
EOF
	write_container_conf "$work/pgdata"

	# Only through a socket nobody else knows of, until it is all set up.
	as_postgres pg_ctl -D "$work/pgdata" -l "$work/setup.log" -w start \
		-o "-c listen_addresses='' -c unix_socket_directories='$work'" >/dev/null ||
		{ cat "$work/setup.log" >&2; die "the new cluster did not start"; }
	if [ "$db" != postgres ]; then
		echo 'CREATE DATABASE :"db"' |
			as_postgres psql -XAtq -v ON_ERROR_STOP=1 -h "$work" -d postgres -v db="$db" ||
			{ cat "$work/setup.log" >&2; die "could not create database \"$db\""; }
	fi
	as_postgres psql -XAtq -v ON_ERROR_STOP=1 -h "$work" -d "$db" \
		-c 'CREATE EXTENSION seckill' -c 'CREATE EXTENSION pg_cron' \
		-c "SELECT cron.schedule('seckill-reconcile', '* * * * *', 'SELECT count(*) FROM seckill_reconcile()')" \
		-c "SELECT cron.schedule('seckill-release', '* * * * *', 'SELECT count(*) FROM seckill_release_expired()')" \
		>/dev/null || { cat "$work/setup.log" >&2; die "could not create the extensions in \"$db\""; }
	as_postgres pg_ctl -D "$work/pgdata" -w -m fast stop >/dev/null ||
		die "the new cluster did not stop"

	[ -d "$PGDATA" ] || install -d -o postgres -g postgres -m 700 "$PGDATA"
	chown postgres:postgres "$PGDATA"
	chmod 700 "$PGDATA"
	find "$work/pgdata" -mindepth 1 -maxdepth 1 ! -name PG_VERSION -exec mv -t "$PGDATA" {} +
	mv "$work/pgdata/PG_VERSION" "$PGDATA/"
	rm -rf "$work"
	echo "seckill-entrypoint: cluster ready"
}

if [ "${1:-}" = postgres ]; then
	shift
fi
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
	exec "$@"
fi
[ "$(id -u)" = 0 ] || die "run the container as root: postgres runs as the user postgres"

install -d -o postgres -g postgres -m 2775 "$SOCKETS"
# PID 1 ignores the signals it has no handler for: without these, a stop
# during the first start would wait for SIGKILL.
trap 'exit 143' TERM
trap 'exit 130' INT
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	initialize
fi
write_container_conf "$PGDATA"

# setpriv execs postgres: the signals below reach the postmaster itself.
setpriv --reuid=postgres --regid=postgres --init-groups -- postgres -D "$PGDATA" "$@" &
pid=$!
# SIGTERM is what docker stop sends: postgres takes it as a smart shutdown,
# which waits for every client to leave.  SIGINT is its fast shutdown.
trap 'kill -INT "$pid"' TERM INT
trap 'kill -HUP "$pid"' HUP
trap 'kill -QUIT "$pid"' QUIT
# A trapped signal ends a wait early: wait again until postgres is gone.
while kill -0 "$pid" 2>/dev/null; do
	wait "$pid" || true
done
status=0
wait "$pid" || status=$?
exit "$status"
