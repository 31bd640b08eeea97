#!/usr/bin/env bash
# docker/ built and run for real, as root, with podman: bash scripts/docker-test.sh
#
# Installs podman, runc, podman-compose and debootstrap if missing and sets
# podman up for this machine; makes the base images a registry would give,
# debian:bookworm-slim (debootstrap from this machine's apt source) and
# redis:7 on it, when absent.  Then, with PostgreSQL on
# 127.0.0.1:${SECKILL_DOCKER_PG_PORT:-15432}, each stack of docker/compose.yaml
# in turn, built from this work tree:
#  1. one Redis, with the official image's conventions: POSTGRES_USER,
#     POSTGRES_DB, POSTGRES_INITDB_ARGS and /docker-entrypoint-initdb.d
#     (*.sql, *.sql.gz, a sourced and an executed *.sh, a file ignored)
#     honoured; a campaign sold out from the host with pgbench, 16 clients,
#     and the invariants checked; PostgreSQL's container stopped, the stack
#     made anew on the same volumes: the orders are still there and the
#     init scripts did not run again;
#  2. the image alone, with an init script that fails: the first start
#     stops with an error naming it, and keeps no cluster; and on a volume
#     the official image made: refused, saying how to use it;
#  3. profile sentinel (a master, a replica, three sentinels; PostgreSQL
#     finds the master through them) and 4. profile cluster (three masters
#     made into a Redis Cluster by a one-shot service) and 5. profile tls (a
#     Redis with a TLS port only, its certificate from a demo CA a one-shot
#     service makes): each sells a campaign out from the host, exactly.
# Each stack and its volumes are removed after it, and whatever happens; the
# images stay, so that the next run of the same files builds nothing (the
# image is built once per tree: build_image).  Prints TAP
# (test/t/99_docker.t runs it).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

DOCKER_PG_PORT=${SECKILL_DOCKER_PG_PORT:-15432}
PROJECT=seckill-test
# podman-compose's name for the image it builds for a service
image_of() { echo "localhost/${PROJECT}_$1:latest"; }
PG_IMAGE=$(image_of postgres)
SUPERUSER=shop_admin
DB=shop
STOCK=500
PROFILE_STOCK=200
HEALTH_TIMEOUT=180
# iptables: the firewall driver of netavark, podman's network stack
SECKILL_PACKAGES=(podman runc podman-compose debootstrap netavark aardvark-dns iptables postgresql-15)
# Keeps the Dockerfile's HEALTHCHECK, which the OCI format has no field for.
export BUILDAH_FORMAT=docker

START=$(date +%s)
WORK=$(mktemp -d /tmp/seckill-docker.XXXXXX)
export PGHOST=127.0.0.1 PGPORT=$DOCKER_PG_PORT PGUSER=$SUPERUSER PGDATABASE=$DB PGPASSWORD=seckill-test
# tap.sh's servers are the containers
export SECKILL_TMP=$WORK

bail() {
	echo "Bail out! $*"
	exit 1
}
TAP_STARTED=

# The stack's variables (POSTGRES_USER=... for the first start) and the
# services it runs: podman-compose 1.0 knows no profiles, it is told which.
STACK_ENV=()
STACK=()
# The init scripts the stacks mount; the profiles' stacks get none.
INITDB_DIR=$WORK/initdb.d
NO_INITDB_DIR=$WORK/no-initdb.d

# The stack, always this project's, with this test's settings whatever the
# environment says; its chatter goes to a log shown when something fails.
compose() {
	env -u POSTGRES_USER -u POSTGRES_DB -u POSTGRES_INITDB_ARGS -u SECKILL_DATABASE \
		SECKILL_PG_PORT="$DOCKER_PG_PORT" SECKILL_PG_ADDR=127.0.0.1 POSTGRES_PASSWORD="$PGPASSWORD" \
		SECKILL_INITDB_DIR="$NO_INITDB_DIR" "${STACK_ENV[@]}" \
		podman-compose -p "$PROJECT" -f "$SECKILL_ROOT/docker/compose.yaml" "$@" >>"$WORK/compose.log" 2>&1
}

# container_of service: its container's id, running or not
container_of() {
	podman ps -aq --filter "label=com.docker.compose.project=$PROJECT" \
		--filter "label=com.docker.compose.service=$1"
}

# The image of docker/Dockerfile, built once per tree: its tag is a hash of
# what the build copies (the files docker/Dockerfile.dockerignore lets
# through, the Dockerfile) and of the base image, so that a later run of the
# same files builds nothing, from a fresh clone too (the build's own cache
# goes by the files' times as well, and a clone's are new).
IMAGE_REPO=localhost/$PROJECT-image
# the services built from docker/Dockerfile: PostgreSQL's of each stack, and
# the profile tls's tls-certs
BUILT_SERVICES=(postgres postgres-sentinel postgres-cluster postgres-tls tls-certs)
# build_files: what the build copies, NUL-separated, in order
build_files() {
	(cd "$SECKILL_ROOT" &&
		find Makefile seckill.control lua sql src docker/Dockerfile docker/Dockerfile.dockerignore \
			docker/entrypoint.sh docker/healthcheck.sh -type f ! -name '*.o' ! -name '*.bc' ! -name '*.so' \
			! -path src/layout/lua_scripts.h ! -path src/build_flags -print0 | LC_ALL=C sort -z)
}
# image_key: the hash of the base image and of those files, their modes too
image_key() {
	local base
	base=$(podman image inspect -f '{{.Id}}' debian:bookworm-slim) || return 1
	{
		echo "$base"
		build_files | (cd "$SECKILL_ROOT" && xargs -0 stat -c '%a %n' --)
		build_files | (cd "$SECKILL_ROOT" && xargs -0 sha256sum --)
	} | sha256sum | cut -c1-16
}
# build_image: sets IMAGE (the tree's image) and IMAGE_HOW (built or
# reused), and gives it to every service built from docker/Dockerfile under
# the name podman-compose gives that service's image, which it then uses as
# it is
build_image() {
	local service old
	IMAGE=$IMAGE_REPO:$(image_key) || return 1
	IMAGE_HOW=reused
	if ! podman image exists "$IMAGE"; then
		IMAGE_HOW=built
		podman build -f "$SECKILL_ROOT/docker/Dockerfile" -t "$IMAGE" "$SECKILL_ROOT" >"$WORK/build.log" 2>&1 ||
			{ grep -m 20 -E ' error: |^Error' "$WORK/build.log" | sed 's/^/# /' >&2; return 1; }
	fi
	for service in "${BUILT_SERVICES[@]}"; do
		podman tag "$IMAGE" "$(image_of "$service")" || return 1
	done
	# the images of other trees, named no more but by their hash, go
	for old in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep "^$IMAGE_REPO:" | grep -vxF "$IMAGE" || true); do
		podman rmi "$old" >/dev/null 2>&1 || true
	done
}
# tree_image service: that service's image is the tree's
tree_image() {
	[ "$(podman image inspect -f '{{.Id}}' "$(image_of "$1")" 2>/dev/null)" = \
		"$(podman image inspect -f '{{.Id}}' "$IMAGE")" ]
}

# Without systemd, podman runs no health check by itself: run it here.
# shellcheck disable=SC2317 # run by seckill_wait_for
healthy() {
	local id
	id=$(container_of "$1")
	[ -n "$id" ] && podman healthcheck run "$id" >/dev/null 2>&1
}

# stack_healthy service...: PostgreSQL's published port answers, and each
# service is healthy (a one-shot service: done, and well).  Each podman call
# costs a tenth of a second of CPU: they come after the cheap check, and the
# waits on them poll every PODMAN_POLL seconds.
PODMAN_POLL=0.5
# shellcheck disable=SC2317 # run by seckill_wait_for
stack_healthy() {
	local service
	seckill_pg_ready || return 1
	for service in "$@"; do
		case $service in
		cluster-create | tls-certs) [ "$(podman inspect -f '{{.State.Status}} {{.State.ExitCode}}' \
			"$(container_of "$service")" 2>/dev/null)" = "exited 0" ] || return 1 ;;
		*) healthy "$service" || return 1 ;;
		esac
	done
}

# Where tap.sh's done_testing looks for the servers' logs: PostgreSQL's, and
# those of the stack's other services.
save_logs() {
	local id service
	: >"$SECKILL_TMP/redis.log"
	for service in "${STACK[@]}"; do
		id=$(container_of "$service")
		[ -n "$id" ] || continue
		case $service in
		postgres*) podman logs "$id" >"$SECKILL_TMP/postgresql.log" 2>&1 ;;
		*) { echo "=== $service"; podman logs --tail 40 "$id" 2>&1; } >>"$SECKILL_TMP/redis.log" ;;
		esac
	done
	return 0
}

# compose down, and podman-compose 1.0 leaves the network behind
stack_down() {
	local net
	compose down -v -t "$1"
	for net in $(podman network ls -q --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null); do
		podman network rm -f "$net" >/dev/null 2>&1
	done
	return 0
}

# shellcheck disable=SC2317 # run by the trap
on_exit() {
	local rc=$?
	trap - EXIT
	trap '' PIPE
	set +e
	# Once the checks run, done_testing shows the logs of a failure.
	if [ "$rc" -ne 0 ] && [ -z "$TAP_STARTED" ]; then
		save_logs
		{
			echo "----- last lines of podman-compose's output -----"
			tail -n 30 "$WORK/compose.log"
			seckill_print_logs 30
		} 2>/dev/null | sed 's/^/# /' >&2
	fi
	stack_down 30
	podman rm -f "$PROJECT-bad-init" >/dev/null 2>&1
	rm -rf "$WORK"
	echo "# took $(($(date +%s) - START))s in all" >&2
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# runc: crun refuses this machine's hybrid cgroups.  Default ulimits within
# the host's hard limits: podman's own defaults are above them, and runc
# cannot start a container that asks for more.
podman_configure() {
	local nofile=20000 nproc=32768 hard
	hard=$(ulimit -Hn)
	[ "$hard" != unlimited ] && [ "$hard" -lt $nofile ] && nofile=$hard
	hard=$(ulimit -Hu)
	[ "$hard" != unlimited ] && [ "$hard" -lt $nproc ] && nproc=$hard
	mkdir -p /etc/containers/containers.conf.d
	cat >/etc/containers/containers.conf.d/seckill.conf <<EOF
# podman on this machine, for seckill's scripts/docker-test.sh
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"

[network]
# aardvark-dns: the containers find each other by service name
network_backend = "netavark"
EOF
}

# "URI suite components..." for each deb source of this machine's apt
apt_sources() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '$1 == "deb" {
			i = 2
			if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
			line = $i
			for (j = i + 1; j <= NF && $j !~ /^#/; j++) line = line " " $j
			print line
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
			function flush(  n, m, u, s, i, j) {
				if (types ~ /(^| )deb( |$)/ && enabled != "no") {
					n = split(uris, u, " "); m = split(suites, s, " ")
					for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j], comps
				}
				types = uris = suites = comps = enabled = ""
			}
			/^[ \t]*$/ { flush(); next }
			/^[ \t]*#/ { next }
			{ key = tolower($1); $1 = ""; sub(/^ +/, "") }
			key == "types:" { types = $0 }
			key == "uris:" { uris = $0 }
			key == "suites:" { suites = $0 }
			key == "components:" { comps = $0 }
			key == "enabled:" { enabled = tolower($0) }
			END { flush() }' "$f"
	done
}

# debian:bookworm-slim, as its registry would give it: a minimal bookworm
# whose apt uses the same archive as this machine.
make_base_image() {
	local sources mirror root=$WORK/rootfs
	sources=$(apt_sources | awk '$2 ~ /^bookworm(-updates|-security)?$/ && / main( |$)/')
	mirror=$(awk '$2 == "bookworm" { print $1; exit }' <<<"$sources")
	[ -n "$mirror" ] || { echo "no apt source of this machine serves bookworm main" >&2; return 1; }
	debootstrap --variant=minbase bookworm "$root" "$mirror" >"$WORK/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$WORK/debootstrap.log" >&2; return 1; }
	awk '!seen[$1 " " $2]++ { print "deb " $1 " " $2 " main" }' <<<"$sources" >"$root/etc/apt/sources.list"
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
		"$root/etc/hostname" "$root/etc/resolv.conf"
	tar -C "$root" -c . | podman import -q --change 'CMD ["bash"]' - debian:bookworm-slim >/dev/null
	rm -rf "$root"
}

make_redis_image() {
	mkdir -p "$WORK/redis"
	cat >"$WORK/redis/Containerfile" <<'EOF'
FROM debian:bookworm-slim
RUN apt-get update -q && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends redis-server && \
	rm -rf /var/lib/apt/lists/* && \
	install -d -o redis -g redis /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server", "--protected-mode", "no"]
EOF
	podman build -t redis:7 "$WORK/redis" >"$WORK/redis/build.log" 2>&1 ||
		{ tail -n 20 "$WORK/redis/build.log" >&2; return 1; }
}

seckill_install_deps || bail "could not install podman and the rest"
podman_configure

t=$(date +%s)
made=()
if ! podman image exists debian:bookworm-slim; then
	make_base_image || bail "could not make debian:bookworm-slim with debootstrap"
	made+=(debian:bookworm-slim)
fi
if ! podman image exists redis:7; then
	make_redis_image || bail "could not build redis:7"
	made+=(redis:7)
fi
base_took=$(($(date +%s) - t))

# A stack left by a run that was killed goes first; then the port must be free.
stack_down 5
podman rm -f "$PROJECT-bad-init" >/dev/null 2>&1 || true
if seckill_pg_ready; then
	bail "port $DOCKER_PG_PORT is already in use (set SECKILL_DOCKER_PG_PORT)"
fi

# The init scripts of the first stack, each leaving a row (10-schema.sql makes
# the table) and its name in a file: .sql, .sh sourced (it uses the
# entrypoint's docker_process_sql), .sh executable (its $0 is itself),
# .sql.gz, and a file that is neither, ignored.  The profiles' stacks mount an
# empty directory, not docker/initdb.d.
mkdir -p "$INITDB_DIR" "$NO_INITDB_DIR"
cat >"$INITDB_DIR/10-schema.sql" <<'SQL'
CREATE TABLE init_runs (id serial, script text, by_user text DEFAULT current_user, db text DEFAULT current_database());
INSERT INTO init_runs (script) VALUES ('10-schema.sql');
SQL
cat >"$INITDB_DIR/20-sourced.sh" <<'SH'
# shellcheck shell=bash
docker_process_sql -c "INSERT INTO init_runs (script) VALUES ('20-sourced.sh')" >/dev/null
echo 20-sourced.sh >>/var/lib/postgresql/data/init-marker
SH
cat >"$INITDB_DIR/30-run.sh" <<'SH'
#!/bin/bash
set -euo pipefail
psql -X -v ON_ERROR_STOP=1 -d "$POSTGRES_DB" -c "INSERT INTO init_runs (script) VALUES ('$(basename "$0")')" >/dev/null
echo "$(basename "$0")" >>/var/lib/postgresql/data/init-marker
SH
echo "INSERT INTO init_runs (script) VALUES ('40-rows.sql.gz');" | gzip >"$INITDB_DIR/40-rows.sql.gz"
echo "not a script" >"$INITDB_DIR/50-notes.txt"
chmod 755 "$INITDB_DIR" "$NO_INITDB_DIR" "$INITDB_DIR/30-run.sh"
chmod 644 "$INITDB_DIR/10-schema.sql" "$INITDB_DIR/20-sourced.sh" "$INITDB_DIR/40-rows.sql.gz" "$INITDB_DIR/50-notes.txt"
INIT_RUNS="10-schema.sql, 20-sourced.sh, 30-run.sh, 40-rows.sql.gz"

STACK_ENV=(POSTGRES_USER="$SUPERUSER" POSTGRES_DB="$DB" POSTGRES_INITDB_ARGS="--data-checksums"
	SECKILL_INITDB_DIR="$INITDB_DIR")
STACK=(redis postgres)
t=$(date +%s)
build_image || bail "the image of docker/Dockerfile did not build, or could not be named for the stacks"
compose up -d postgres || bail "podman-compose up failed"
seckill_wait_for "stack_healthy ${STACK[*]}" "$HEALTH_TIMEOUT" "$PODMAN_POLL" || bail "the stack was not healthy within ${HEALTH_TIMEOUT}s"
up_took=$(($(date +%s) - t))

# From here on each check reports and the next goes on.
set +e
# shellcheck source=test/t/tap.sh
. "$SECKILL_ROOT/test/t/tap.sh"
# shellcheck source=test/t/sale.sh
. "$SECKILL_ROOT/test/t/sale.sh"
TAP_STARTED=1

if [ ${#made[@]} -gt 0 ]; then
	diag "made ${made[*]} in ${base_took}s; $IMAGE_HOW the image and started the stack in ${up_took}s"
else
	diag "base images reused; $IMAGE_HOW the image and started the stack in ${up_took}s"
fi
ok true "the image $IMAGE_HOW and the stack healthy in ${up_took}s: Redis, PostgreSQL and its seckill worker"

# The official image's conventions, from the host.
is "$(psql_val "SELECT r.rolname || ' ' || r.rolsuper FROM pg_roles r WHERE r.oid = 10")/$(psql_val "SELECT count(*)
	FROM pg_roles WHERE rolname = 'postgres'")" "$SUPERUSER true/0" \
	"POSTGRES_USER: initdb made the superuser $SUPERUSER, and no role postgres"
is "$(psql_val "SELECT current_setting('seckill.database') || ' ' || current_setting('cron.database_name')")" \
	"$DB $DB" "POSTGRES_DB: database $DB, seckill's and pg_cron's (SECKILL_DATABASE unset)"
is "$(psql_val "SHOW data_checksums")" on "POSTGRES_INITDB_ARGS reached initdb (--data-checksums)"
is "$(psql_val "SELECT string_agg(script, ', ' ORDER BY id) || ' / ' || string_agg(DISTINCT by_user || ' in ' || db, ',')
	FROM init_runs")" "$INIT_RUNS / $SUPERUSER in $DB" \
	"the init scripts ran once each, in order, as $SUPERUSER in $DB: .sql, .sh sourced, .sh run, .sql.gz"
pg=$(container_of postgres)
podman logs "$pg" >"$WORK/first.log" 2>&1
ok "grep -q 'ignoring /docker-entrypoint-initdb.d/50-notes.txt' '$WORK/first.log'" "a file of another kind is ignored, and the log says so"
is "$(podman exec "$pg" cat /var/lib/postgresql/data/init-marker | paste -sd ' ')" "20-sourced.sh 30-run.sh" \
	"the .sh scripts wrote their marker, once each"

is "$(psql_val "SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_extension WHERE extname IN ('seckill', 'pg_cron')")" \
	pg_cron,seckill "seckill and pg_cron are created in database $DB"
is "$(psql_val "SELECT string_agg(jobname || ' ' || schedule, ',' ORDER BY jobname) FROM cron.job")" \
	"seckill-reconcile * * * * *,seckill-release * * * * *" "pg_cron runs reconcile and release every minute"
ok "! PGPASSWORD=wrong psql -XAtq -c 'SELECT 1' >/dev/null 2>&1" "a wrong password is refused"

# sell goods stock clients calls users [shards]: a campaign of stock items
# sold from the host, clients each making calls calls of users drawn from
# [1, users] (many buy twice); sets cid
sell() {
	local goods=$1 stock=$2 clients=$3 calls=$4 users=$5 shards=${6:-1} figures
	psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql" || bail "could not load test/helpers.sql"
	is "$(psql_val "SELECT seckill_campaign_create('$goods', $stock) > 0")" t "a campaign of $stock" || done_testing
	if [ "$shards" -gt 1 ]; then
		is "$(psql_val "SELECT seckill_campaign_set('$goods', '{\"shards\": $shards}')->>'shards'")" "$shards" \
			"its stock split into $shards shards" || done_testing
	fi
	is "$(psql_val "SELECT seckill_preheat('$goods')")" "$stock" "preheated into Redis" || done_testing
	cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
	cat >"$WORK/buy.sql" <<SQL
\set u random(1, $users)
SELECT try_buy('user-' || :u, '$goods');
SQL
	rm -rf "$WORK/sale"
	figures=$(seckill_pgbench "$WORK/sale" "$clients" "-t $calls" "$WORK/buy.sql")
	ok "[ $? -eq 0 ]" "$clients clients sold it from the host through the published port"
	read -r rate _ p50 p99 <<<"$figures"
	diag "sale: $rate calls/s, p50 $p50 ms, p99 $p99 ms;" \
		"answers: $(psql_val "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n
			FROM stampede_answers GROUP BY 1 ORDER BY 1) s")"
	is "$(psql_val "SELECT count(*) FILTER (WHERE status = 'ok') || '/' || count(*) FILTER (WHERE status = 'error')
		FROM stampede_answers")" "$stock/0" "$stock calls answered ok, none failed"
}

# check_orders goods stock when: the invariants of shared/DESIGN.md, as
# test/t/sale.sh checks them, on campaign cid
check_orders() {
	local goods=$1 stock=$2 when=$3
	is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE o.campaign_id = $cid AND o.status <> 'cancelled'")" \
		"$stock" "$when: exactly $stock orders"
	sale_invariants "$cid" "$stock" "$when"
	is "$(psql_val "SELECT redis_stock || '/' || in_flight || '/' || redis_buyers FROM seckill_status('$goods')")" \
		"0/0/$stock" "$when: Redis has stock 0, an empty journal, one buyer per order"
	is "$(psql_val "SELECT status FROM seckill_buy('late-buyer', '$goods')")" sold_out \
		"$when: a late buyer is told sold_out"
}

# 2,400 calls of 2,000 users: many buy twice, far more than 500 want one.
goods=docker-$(date +%s)-$$
sell "$goods" "$STOCK" 16 150 2000
check_orders "$goods" "$STOCK" "after the sale"

t=$(seckill_now_ms)
compose stop -t 60 postgres
took=$(($(seckill_now_ms) - t))
is "$(podman inspect --format '{{.State.ExitCode}}' "$pg")" 0 "PostgreSQL's container stopped cleanly, in $took ms"
podman logs "$pg" >"$WORK/stopped.log" 2>&1
ok "grep -q 'received fast shutdown request' '$WORK/stopped.log'" "SIGTERM made a fast shutdown"

# New containers on the same volumes: the data lives in the volumes only.
compose down -t 30
compose up -d postgres
seckill_wait_for "stack_healthy ${STACK[*]}" 60 "$PODMAN_POLL"
ok "[ $? -eq 0 ]" "the stack made anew on its volumes is healthy"
pg_new=$(container_of postgres)
ok "[ '$pg_new' != '$pg' ]" "PostgreSQL runs in a new container"
podman logs "$pg_new" >"$WORK/new.log" 2>&1
ok "grep -q 'database system is ready' '$WORK/new.log' && ! grep -q 'first start\|initdb.d' '$WORK/new.log'" \
	"which found its cluster and set nothing up again"
check_orders "$goods" "$STOCK" "in the new containers"
is "$(psql_val "SELECT count(*) FROM cron.job")" 2 "the pg_cron jobs are there once"
is "$(psql_val "SELECT string_agg(script, ', ' ORDER BY id) FROM init_runs")/$(podman exec "$pg_new" \
	cat /var/lib/postgresql/data/init-marker | wc -l)" "$INIT_RUNS/2" "the init scripts did not run again"
[ "$TAP_FAILED" -gt 0 ] && save_logs
stack_down 30

# The image alone, an init script failing: the first start stops, names it,
# runs nothing after it and keeps no cluster.
mkdir -p "$WORK/bad-init.d" "$WORK/bad-data"
echo "CREATE TABLE t (); SELECT no_such_function();" >"$WORK/bad-init.d/10-fails.sql"
echo "echo the script after it ran" >"$WORK/bad-init.d/20-after.sh"
chmod -R a+rX "$WORK/bad-init.d"
t=$(date +%s)
timeout 120 podman run --name "$PROJECT-bad-init" --network none -e POSTGRES_PASSWORD=x \
	-v "$WORK/bad-init.d:/docker-entrypoint-initdb.d:ro" -v "$WORK/bad-data:/var/lib/postgresql/data" \
	"$PG_IMAGE" >"$WORK/bad-init.log" 2>&1
rc=$?
is "$rc" 1 "a failing init script stops the first start: the container exits with 1, in $(($(date +%s) - t))s"
ok "grep -q 'seckill-entrypoint: init script /docker-entrypoint-initdb.d/10-fails.sql failed' '$WORK/bad-init.log'" \
	"its error names the script" || diag "$(tail -n 5 "$WORK/bad-init.log")"
ok "grep -q 'function no_such_function() does not exist' '$WORK/bad-init.log' && ! grep -q 'the script after it ran' '$WORK/bad-init.log'" \
	"psql's error is in the log, and the next script did not run"
ok "[ ! -e '$WORK/bad-data/pgdata/PG_VERSION' ]" "no cluster is kept: the next start begins again"
podman rm -f "$PROJECT-bad-init" >/dev/null 2>&1

# A volume laid out as the official image lays it out (its cluster right in
# /var/lib/postgresql/data): refused with a message, no new cluster beside it
mkdir -p "$WORK/official-data"
echo 15 >"$WORK/official-data/PG_VERSION"
timeout 60 podman run --name "$PROJECT-official" --network none -e POSTGRES_PASSWORD=x \
	-v "$WORK/official-data:/var/lib/postgresql/data" "$PG_IMAGE" >"$WORK/official.log" 2>&1
is "$?" 1 "an official image's volume: the container exits with 1"
ok "grep -q 'set PGDATA=/var/lib/postgresql/data to use that cluster' '$WORK/official.log' &&
	[ ! -e '$WORK/official-data/pgdata' ]" "saying how to use it, and makes no new cluster beside it" ||
	diag "$(tail -n 5 "$WORK/official.log")"
podman rm -f "$PROJECT-official" >/dev/null 2>&1

# The profiles' stacks, with the image's defaults: superuser postgres,
# seckill in database postgres.
export PGUSER=postgres PGDATABASE=postgres
STACK_ENV=()

# profile_up postgres_service service...: that stack, of the tree's image, healthy;
# podman-compose 1.0 starts only the services it is told, so it is told them
# all
profile_up() {
	local t
	t=$(date +%s)
	STACK=("$@")
	compose up -d "$@"
	ok "tree_image $1" "$1: the image of this tree" || return 1
	seckill_wait_for "stack_healthy ${STACK[*]}" "$HEALTH_TIMEOUT" "$PODMAN_POLL"
	ok "[ $? -eq 0 ]" "$1: healthy in $(($(date +%s) - t))s, with ${STACK[*]:1}"
}

# rcli service command...: redis-cli in that service's container
rcli_in() {
	local service=$1
	shift
	podman exec "$(container_of "$service")" redis-cli "$@" 2>/dev/null | tr -d '\r'
}

# "master-ip:port other-sentinels replicas", as that sentinel sees mymaster
# shellcheck disable=SC2317 # run by seckill_wait_for
sentinel_view() {
	rcli_in "$1" -p 26379 SENTINEL master mymaster | paste - - |
		awk -F'\t' '{ v[$1] = $2 } END { print v["ip"] ":" v["port"], v["num-other-sentinels"], v["num-slaves"] }'
}
# shellcheck disable=SC2317 # run by seckill_wait_for
sentinels_agree() {
	local view n
	view=$(sentinel_view sentinel-1)
	[ "$view" = "$1:6379 2 1" ] || return 1
	for n in 2 3; do
		[ "$(sentinel_view "sentinel-$n")" = "$view" ] || return 1
	done
}
ip_of() {
	podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$(container_of "$1")"
}

# the Redis masters the worker is connected to, and their slots
# shellcheck disable=SC2317 # run by seckill_wait_for
worker_nodes() {
	psql_val "SELECT string_agg(node, ',' ORDER BY node) || ' ' || sum(slots)
		FROM seckill.redis_nodes WHERE connected" 2>/dev/null
}

# 800 calls of 600 users for 200 items: about 440 want one, many ask twice.
if profile_up postgres-sentinel sentinel-redis-1 sentinel-redis-2 sentinel-1 sentinel-2 sentinel-3; then
	master=$(ip_of sentinel-redis-1)
	seckill_wait_for "sentinels_agree $master" 60 "$PODMAN_POLL"
	ok "[ $? -eq 0 ]" "sentinel: the three sentinels name sentinel-redis-1 ($master) the master, with its replica" ||
		diag "$(sentinel_view sentinel-1)"
	seckill_wait_for "[ \"\$(worker_nodes)\" = '$master:6379 16384' ]" 30
	ok "[ $? -eq 0 ]" "sentinel: the worker found the master through the sentinels" ||
		diag "$(psql_val "SELECT * FROM seckill.redis_nodes")"
	goods=sentinel-$(date +%s)-$$
	sell "$goods" "$PROFILE_STOCK" 8 100 600
	check_orders "$goods" "$PROFILE_STOCK" "sentinel"
	seckill_wait_for "[ \"\$(rcli_in sentinel-redis-2 HGET 'seckill:{c:$cid}:meta' stock)\" = 0 ]" 10 "$PODMAN_POLL"
	ok "[ $? -eq 0 ]" "sentinel: the replica has the campaign too, its stock 0"
fi
[ "$TAP_FAILED" -gt 0 ] && save_logs
stack_down 30

if profile_up postgres-cluster cluster-redis-1 cluster-redis-2 cluster-redis-3 cluster-create; then
	masters=$(for n in 1 2 3; do echo "$(ip_of "cluster-redis-$n"):6379"; done | LC_ALL=C sort | paste -sd,)
	seckill_wait_for "[ \"\$(worker_nodes)\" = '$masters 16384' ]" 30
	ok "[ $? -eq 0 ]" "cluster: the worker reaches three masters serving the 16384 slots" ||
		diag "$(psql_val "SELECT * FROM seckill.redis_nodes")"
	goods=cluster-$(date +%s)-$$
	sell "$goods" "$PROFILE_STOCK" 8 100 600 6
	diag "cluster: the campaign's 6 shards live on $(psql_val "SELECT count(DISTINCT redis_node)
		FROM seckill_campaign_nodes('$goods')") masters"
	check_orders "$goods" "$PROFILE_STOCK" "cluster"
fi
[ "$TAP_FAILED" -gt 0 ] && save_logs
stack_down 30

if profile_up postgres-tls tls-certs tls-redis; then
	seckill_wait_for "[ \"\$(psql_val 'SELECT count(*) FROM seckill.redis_nodes WHERE connected' 2>/dev/null)\" = 1 ]" 30
	ok "[ $? -eq 0 ]" "tls: the worker is connected to tls-redis" ||
		diag "$(psql_val "SELECT * FROM seckill.redis_nodes")"
	ok "[ \"\$(psql_val 'SHOW seckill.redis_tls')\" = on ]" "tls: with seckill.redis_tls on"
	ok "! rcli_in tls-redis PING | grep -q PONG" "tls: tls-redis answers no plain-text client"
	goods=tls-$(date +%s)-$$
	sell "$goods" "$PROFILE_STOCK" 8 100 600
	check_orders "$goods" "$PROFILE_STOCK" "tls"
fi
[ "$TAP_FAILED" -gt 0 ] && save_logs
done_testing
