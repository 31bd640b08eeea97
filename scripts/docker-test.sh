#!/usr/bin/env bash
# docker/ built and run for real, as root, with podman: bash scripts/docker-test.sh
#
# Installs podman, runc, podman-compose and debootstrap if missing and sets
# podman up for this machine; makes the base images a registry would give,
# debian:bookworm-slim (debootstrap from this machine's apt source) and
# redis:7 on it, when absent; brings docker/compose.yaml up, built from this
# work tree, with PostgreSQL on 127.0.0.1:${SECKILL_DOCKER_PG_PORT:-15432};
# sells a campaign out from the host with pgbench, 16 clients, and checks the
# invariants; stops PostgreSQL's container, makes the stack anew on the same
# volumes and checks that the orders are still there.  The stack and its
# volumes are removed at the end, whatever happens; the images stay, so the
# next run builds from cache.  Prints TAP (test/t/99_docker.t runs it).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

DOCKER_PG_PORT=${SECKILL_DOCKER_PG_PORT:-15432}
PROJECT=seckill-test
# podman-compose's name for the image it builds for the service postgres
PG_IMAGE=localhost/${PROJECT}_postgres:latest
DB=shop
STOCK=500
HEALTH_TIMEOUT=180
# iptables: the firewall driver of netavark, podman's network stack
SECKILL_PACKAGES=(podman runc podman-compose debootstrap netavark aardvark-dns iptables postgresql-15)
# Keeps the Dockerfile's HEALTHCHECK, which the OCI format has no field for.
export BUILDAH_FORMAT=docker

START=$(date +%s)
WORK=$(mktemp -d /tmp/seckill-docker.XXXXXX)
export PGHOST=127.0.0.1 PGPORT=$DOCKER_PG_PORT PGUSER=postgres PGDATABASE=$DB PGPASSWORD=seckill-test
# tap.sh's servers are the containers
export SECKILL_TMP=$WORK

bail() {
	echo "Bail out! $*"
	exit 1
}
TAP_STARTED=

# The stack, always this project's, with this test's settings whatever the
# environment says; its chatter goes to a log shown when something fails.
compose() {
	SECKILL_PG_PORT=$DOCKER_PG_PORT SECKILL_PG_ADDR=127.0.0.1 POSTGRES_PASSWORD=$PGPASSWORD \
		SECKILL_DATABASE=$DB \
		podman-compose -p "$PROJECT" -f "$SECKILL_ROOT/docker/compose.yaml" "$@" >>"$WORK/compose.log" 2>&1
}

# container_of service: its container's id, running or not
container_of() {
	podman ps -aq --filter "label=com.docker.compose.project=$PROJECT" \
		--filter "label=com.docker.compose.service=$1"
}

# Without systemd, podman runs no health check by itself: run it here.
# shellcheck disable=SC2317 # run by seckill_wait_for
healthy() {
	local id
	id=$(container_of "$1")
	[ -n "$id" ] && podman healthcheck run "$id" >/dev/null 2>&1
}

# shellcheck disable=SC2317 # run by seckill_wait_for
stack_healthy() {
	healthy redis && healthy postgres && seckill_pg_ready
}

# Where tap.sh's done_testing looks for the servers' logs.
save_logs() {
	local id
	id=$(container_of postgres)
	[ -n "$id" ] && podman logs "$id" >"$SECKILL_TMP/postgresql.log" 2>&1
	id=$(container_of redis)
	[ -n "$id" ] && podman logs "$id" >"$SECKILL_TMP/redis.log" 2>&1
	return 0
}

# shellcheck disable=SC2317 # run by the trap
on_exit() {
	local rc=$? net
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
	compose down -v -t 30
	# podman-compose 1.0 leaves the network behind
	for net in $(podman network ls -q --filter "label=io.podman.compose.project=$PROJECT" 2>/dev/null); do
		podman network rm -f "$net" >/dev/null 2>&1
	done
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
compose down -v -t 5 || true
if seckill_pg_ready; then
	bail "port $DOCKER_PG_PORT is already in use (set SECKILL_DOCKER_PG_PORT)"
fi

t=$(date +%s)
# podman-compose goes on after a failed build: without the tag, the image
# shows whether this build made it.  The layers stay as the build's cache.
podman untag "$PG_IMAGE" 2>/dev/null || true
compose up -d --build || bail "podman-compose up failed"
if ! podman image exists "$PG_IMAGE"; then
	grep -m 20 -E ' error: |^Error: building' "$WORK/compose.log" | sed 's/^/# /' >&2 || true
	bail "the image of docker/Dockerfile did not build"
fi
seckill_wait_for stack_healthy "$HEALTH_TIMEOUT" || bail "the stack was not healthy within ${HEALTH_TIMEOUT}s"
up_took=$(($(date +%s) - t))

# From here on each check reports and the next goes on.
set +e
# shellcheck source=test/t/tap.sh
. "$SECKILL_ROOT/test/t/tap.sh"
# shellcheck source=test/t/sale.sh
. "$SECKILL_ROOT/test/t/sale.sh"
TAP_STARTED=1

if [ ${#made[@]} -gt 0 ]; then
	diag "made ${made[*]} in ${base_took}s; built the image and started the stack in ${up_took}s"
else
	diag "base images reused; built the image and started the stack in ${up_took}s"
fi
ok true "the image built and the stack healthy in ${up_took}s: Redis, PostgreSQL and its seckill worker"
is "$(psql_val "SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_extension WHERE extname IN ('seckill', 'pg_cron')")" \
	pg_cron,seckill "seckill and pg_cron are created in database $DB"
is "$(psql_val "SELECT string_agg(jobname || ' ' || schedule, ',' ORDER BY jobname) FROM cron.job")" \
	"seckill-reconcile * * * * *,seckill-release * * * * *" "pg_cron runs reconcile and release every minute"
ok "! PGPASSWORD=wrong psql -XAtq -c 'SELECT 1' >/dev/null 2>&1" "a wrong password is refused"

goods=docker-$(date +%s)-$$
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql" || bail "could not load test/helpers.sql"
is "$(psql_val "SELECT seckill_campaign_create('$goods', $STOCK) > 0")" t "a campaign of $STOCK" || done_testing
is "$(psql_val "SELECT seckill_preheat('$goods')")" "$STOCK" "preheated into the Redis container" || done_testing
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")

# 2,400 calls of 2,000 users: many buy twice, far more than 500 want one.
cat >"$WORK/buy.sql" <<SQL
\set u random(1, 2000)
SELECT try_buy('user-' || :u, '$goods');
SQL
figures=$(seckill_pgbench "$WORK/sale" 16 "-t 150" "$WORK/buy.sql")
ok "[ $? -eq 0 ]" "16 clients sold it from the host through the published port"
read -r rate _ p50 p99 <<<"$figures"
diag "sale: $rate calls/s, p50 $p50 ms, p99 $p99 ms;" \
	"answers: $(psql_val "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n
		FROM stampede_answers GROUP BY 1 ORDER BY 1) s")"

# The invariants of shared/DESIGN.md, as test/t/sale.sh checks them.
check_orders() {
	local active="o.campaign_id = $cid AND o.status <> 'cancelled'" when=$1
	is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE $active")" "$STOCK" \
		"$when: exactly $STOCK orders"
	sale_invariants "$cid" "$STOCK" "$when"
	is "$(psql_val "SELECT redis_stock || '/' || in_flight || '/' || redis_buyers FROM seckill_status('$goods')")" \
		"0/0/$STOCK" "$when: Redis has stock 0, an empty journal, one buyer per order"
	is "$(psql_val "SELECT status FROM seckill_buy('late-buyer', '$goods')")" sold_out \
		"$when: a late buyer is told sold_out"
}
is "$(psql_val "SELECT count(*) FILTER (WHERE status = 'ok') || '/' || count(*) FILTER (WHERE status = 'error')
	FROM stampede_answers")" "$STOCK/0" "$STOCK calls answered ok, none failed"
check_orders "after the sale"

pg=$(container_of postgres)
t=$(date +%s%3N)
compose stop -t 60 postgres
took=$(($(date +%s%3N) - t))
is "$(podman inspect --format '{{.State.ExitCode}}' "$pg")" 0 "PostgreSQL's container stopped cleanly, in $took ms"
podman logs "$pg" >"$WORK/stopped.log" 2>&1
ok "grep -q 'received fast shutdown request' '$WORK/stopped.log'" "SIGTERM made a fast shutdown"

# New containers on the same volumes: the data lives in the volumes only.
compose down -t 30
compose up -d
seckill_wait_for stack_healthy 60
ok "[ $? -eq 0 ]" "the stack made anew on its volumes is healthy"
pg_new=$(container_of postgres)
ok "[ '$pg_new' != '$pg' ]" "PostgreSQL runs in a new container"
podman logs "$pg_new" >"$WORK/new.log" 2>&1
ok "grep -q 'database system is ready' '$WORK/new.log' && ! grep -q 'first start' '$WORK/new.log'" \
	"which found its cluster and set nothing up again"
check_orders "in the new containers"
is "$(psql_val "SELECT count(*) FROM cron.job")" 2 "the pg_cron jobs are there once"

[ "$TAP_FAILED" -gt 0 ] && save_logs
done_testing
