#!/usr/bin/env bash
# The entrypoint of the seckill image, with the conventions of the official
# postgres image.
#
# On the first start (no cluster in PGDATA) it makes one from the
# environment: initdb with the superuser POSTGRES_USER (default postgres),
# its password POSTGRES_PASSWORD and the options POSTGRES_INITDB_ARGS
# (scram-sha-256 from the network, peer through the socket); seckill and
# pg_cron preloaded; the database POSTGRES_DB (default: POSTGRES_USER's name)
# created, both extensions created in SECKILL_DATABASE (default POSTGRES_DB)
# and the housekeeping jobs scheduled there; then the files of
# /docker-entrypoint-initdb.d, in the order of their names: *.sql and *.sql.gz
# run by psql in POSTGRES_DB as POSTGRES_USER, *.sh run (if executable) or
# sourced, as the user postgres.  A file that fails stops the first start,
# and the next start begins it again.  On every start it writes the Redis
# settings from the environment, then runs postgres as its child: SIGTERM or
# SIGINT stop it with a fast shutdown, SIGHUP reloads its configuration.
#
#   IMAGE [postgres] [-c name=value ...]   postgres, with these options
#   IMAGE COMMAND...                       any other command, as is
set -euo pipefail

PGDATA=${PGDATA:-/var/lib/postgresql/data/pgdata}
SOCKETS=/var/run/postgresql
INITDB_D=/docker-entrypoint-initdb.d
# seckill refuses a password file that anyone but its owner may read
# (chmod 600), which a mounted secret seldom is: it reads a copy.
REDIS_PASSWORD_COPY=/var/lib/postgresql/seckill-redis.pass
CONTAINER_CONF=seckill-container.conf
# As the official image: the superuser's name, the database made for it, and
# seckill's database, each defaulting to the one before.
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
SECKILL_DATABASE=${SECKILL_DATABASE:-$POSTGRES_DB}

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

# a name quoted for pg_ident.conf
ident_quote() {
	printf '"%s"' "${1//\"/\"\"}"
}

# on or off, from a boolean of the environment
conf_bool() {
	case ${2,,} in
	on | true | yes | 1) echo on ;;
	'' | off | false | no | 0) echo off ;;
	*) die "$1 must be on or off, not '$2'" ;;
	esac
}

# The Redis settings, from the environment of this start: a container made
# anew with other values takes them.  ALTER SYSTEM still overrides them.
write_container_conf() {
	local dir=$1 port=${SECKILL_REDIS_PORT:-6379} password_file='' cluster tls
	case $port in
	'' | *[!0-9]*) die "SECKILL_REDIS_PORT must be a port number, not '$port'" ;;
	esac
	cluster=$(conf_bool SECKILL_REDIS_CLUSTER "${SECKILL_REDIS_CLUSTER:-off}")
	tls=$(conf_bool SECKILL_REDIS_TLS "${SECKILL_REDIS_TLS:-off}")
	if [ "$cluster" = on ] && [ -n "${SECKILL_REDIS_SENTINELS:-}" ]; then
		die "set SECKILL_REDIS_CLUSTER or SECKILL_REDIS_SENTINELS, not both: a Redis Cluster names its masters itself"
	fi
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
		echo "seckill.redis_sentinels = $(conf_quote "${SECKILL_REDIS_SENTINELS:-}")"
		echo "seckill.redis_master_name = $(conf_quote "${SECKILL_REDIS_MASTER_NAME:-mymaster}")"
		echo "seckill.redis_cluster = $cluster"
		echo "seckill.redis_tls = $tls"
		echo "seckill.redis_tls_ca_file = $(conf_quote "${SECKILL_REDIS_TLS_CA_FILE:-}")"
		echo "seckill.redis_tls_cert_file = $(conf_quote "${SECKILL_REDIS_TLS_CERT_FILE:-}")"
		echo "seckill.redis_tls_key_file = $(conf_quote "${SECKILL_REDIS_TLS_KEY_FILE:-}")"
		echo "seckill.redis_tls_server_name = $(conf_quote "${SECKILL_REDIS_TLS_SERVER_NAME:-}")"
	} >"$dir/$CONTAINER_CONF"
	chown postgres:postgres "$dir/$CONTAINER_CONF"
}

# shellcheck disable=SC2317 # run by process_init_files in a shell of its own
# The official image's helper, for the scripts of /docker-entrypoint-initdb.d
# written for it: psql into POSTGRES_DB as POSTGRES_USER, stopping at the
# first error.
docker_process_sql() {
	psql -X -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --dbname "$POSTGRES_DB" "$@"
}

# shellcheck disable=SC2317 # run by process_init_files in a shell of its own
# Run as the user postgres in a shell of its own (process_init_files below):
# the files of /docker-entrypoint-initdb.d in the order of their names, the
# name of each written to INIT_CURRENT first.  As in the official image, a
# sourced script runs in this shell, under set -e.
run_init_files() {
	local f
	for f in "$INITDB_D"/*; do
		[ -e "$f" ] || continue
		printf '%s\n' "$f" >"$INIT_CURRENT"
		case $f in
		*.sh)
			if [ -x "$f" ]; then
				echo "seckill-entrypoint: running $f"
				"$f"
			else
				echo "seckill-entrypoint: sourcing $f"
				# shellcheck disable=SC1090 # the user's script
				. "$f"
			fi
			;;
		*.sql)
			echo "seckill-entrypoint: running $f"
			docker_process_sql -f "$f"
			;;
		*.sql.gz)
			echo "seckill-entrypoint: running $f"
			gunzip -c "$f" | docker_process_sql
			;;
		*) echo "seckill-entrypoint: ignoring $f (neither *.sh, *.sql nor *.sql.gz)" ;;
		esac
	done
	: >"$INIT_CURRENT.done"
}

# The files of /docker-entrypoint-initdb.d, against the new cluster in work
# (running, its socket in work), with the environment the official image
# gives them: PGHOST, PGUSER and PGPASSWORD to reach it, PGDATA where it is.
process_init_files() {
	local work=$1 password=$2 status=0 current
	[ -d "$INITDB_D" ] || return 0
	# Unreadable, its files would be skipped without a word.
	as_postgres test -r "$INITDB_D" -a -x "$INITDB_D" ||
		init_failed "$work" "$INITDB_D: the user postgres cannot read it (mode $(stat -c %a "$INITDB_D"), owner $(stat -c %U "$INITDB_D"))"
	# C: the order of the names is the order of their bytes.
	as_postgres env LC_ALL=C HOME=/var/lib/postgresql PGDATA="$work/pgdata" \
		PGHOST="$work" PGPORT=5432 PGUSER="$POSTGRES_USER" PGPASSWORD="$password" \
		POSTGRES_USER="$POSTGRES_USER" POSTGRES_DB="$POSTGRES_DB" POSTGRES_PASSWORD="$password" \
		INITDB_D="$INITDB_D" INIT_CURRENT="$work/init-current" \
		bash -c "set -Eeo pipefail; $(declare -f docker_process_sql run_init_files); run_init_files" ||
		status=$?
	current=$(cat "$work/init-current" 2>/dev/null) || current=$INITDB_D
	if [ "$status" -ne 0 ]; then
		init_failed "$work" "init script $current failed (exit status $status)"
	elif [ ! -e "$work/init-current.done" ]; then
		init_failed "$work" "init script $current ended the first start early (exit in a sourced script?)"
	fi
	rm -f "$work/init-current" "$work/init-current.done"
}

# A file of /docker-entrypoint-initdb.d failed: the new cluster goes down and
# the first start fails; the next start begins it again.
init_failed() {
	as_postgres pg_ctl -D "$1/pgdata" -w -m immediate stop >/dev/null 2>&1 || true
	die "$2: no cluster is kept, the next start begins again"
}

# Made aside and moved into PGDATA with PG_VERSION last, so that a first
# start that fails half-way is done again from the start next time.
initialize() {
	local password=${POSTGRES_PASSWORD:-} user=$POSTGRES_USER db=$SECKILL_DATABASE
	local work=${PGDATA%/}.initializing initdb_args=()
	if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
		password=$(head -n 1 "$POSTGRES_PASSWORD_FILE") ||
			die "POSTGRES_PASSWORD_FILE: cannot read $POSTGRES_PASSWORD_FILE"
	fi
	[ -n "$password" ] ||
		die "set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) for the first start: the password of the superuser $user"
	if [ -d "$PGDATA" ] && [ -n "$(ls -A "$PGDATA")" ]; then
		die "$PGDATA is not empty but holds no cluster (no PG_VERSION): empty it or set PGDATA elsewhere"
	fi
	# Split as a shell would, quotes and all, as the official image does.
	eval "initdb_args=(${POSTGRES_INITDB_ARGS:-})"

	echo "seckill-entrypoint: first start: a new cluster in $PGDATA, superuser \"$user\", seckill in database \"$db\""
	rm -rf "$work"
	install -d -o postgres -g postgres -m 700 "$work"
	printf '%s\n' "$password" >"$work/password"
	chown postgres:postgres "$work/password"
	# POSTGRES_INITDB_ARGS last: initdb takes the last of an option given twice.
	if ! as_postgres initdb -D "$work/pgdata" -U "$user" --pwfile="$work/password" \
		--auth-local=peer --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 "${initdb_args[@]}" \
		>"$work/initdb.log" 2>&1; then
		cat "$work/initdb.log" >&2
		die "initdb failed"
	fi
	rm -f "$work/password"
	# Peer authentication lets the OS user postgres, which runs the server,
	# this script and the health check, in as the superuser, whatever its name.
	sed -i -E 's/^(local[[:space:]].*[[:space:]]peer)[[:space:]]*$/\1 map=container/' "$work/pgdata/pg_hba.conf"
	echo 'host all all all scram-sha-256' >>"$work/pgdata/pg_hba.conf"
	cat >>"$work/pgdata/pg_ident.conf" <<EOF

# seckill's container (docker/entrypoint.sh): an OS user connects through the
# socket as the role of its name, and the OS user postgres as the superuser
container	postgres	$(ident_quote "$user")
container	/^(.*)\$	\1
EOF
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
	# POSTGRES_DB for the superuser, as the official image makes it, and
	# seckill's database, each unless it exists.
	if ! as_postgres env PGPASSWORD="$password" psql -XAtq -v ON_ERROR_STOP=1 -h "$work" -U "$user" -d postgres \
		-v db="$POSTGRES_DB" -v seckill_db="$db" >/dev/null <<'SQL'
SELECT format('CREATE DATABASE %I', d) FROM (VALUES (:'db'), (:'seckill_db')) v (d)
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = d) GROUP BY d \gexec
SQL
	then
		cat "$work/setup.log" >&2
		die "could not create database \"$POSTGRES_DB\" or \"$db\""
	fi
	as_postgres env PGPASSWORD="$password" psql -XAtq -v ON_ERROR_STOP=1 -h "$work" -U "$user" -d "$db" \
		-c 'CREATE EXTENSION seckill' -c 'CREATE EXTENSION pg_cron' \
		-c "SELECT cron.schedule('seckill-reconcile', '* * * * *', 'SELECT count(*) FROM seckill_reconcile()')" \
		-c "SELECT cron.schedule('seckill-release', '* * * * *', 'SELECT count(*) FROM seckill_release_expired()')" \
		>/dev/null || { cat "$work/setup.log" >&2; die "could not create the extensions in \"$db\""; }
	process_init_files "$work" "$password"
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
# A volume the official postgres image made keeps its cluster right in
# the volume, the parent of this image's PGDATA: say so rather than make a
# new, empty cluster beside it.
official=$(dirname "${PGDATA%/}")
if [ ! -s "$PGDATA/PG_VERSION" ] && [ -s "$official/PG_VERSION" ]; then
	die "$official holds a cluster (PostgreSQL $(cat "$official/PG_VERSION")), laid out as the official postgres image lays it out, and this image's PGDATA is $PGDATA: set PGDATA=$official to use that cluster (made by PostgreSQL 15), or mount an empty volume"
fi
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
