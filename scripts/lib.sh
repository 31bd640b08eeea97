# shellcheck shell=bash
# Helpers for the test and demo scripts: dependencies, build, and a pair of
# throwaway servers (PostgreSQL with seckill preloaded, and Redis) that live
# in a temporary directory and are removed on exit.
#
# Source it; it does nothing by itself.  Tests started by scripts/test.sh
# source it too: every helper below works from the exported environment.

SECKILL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECKILL_PG_BIN=/usr/lib/postgresql/15/bin
SECKILL_PG_CONFIG=$SECKILL_PG_BIN/pg_config
SECKILL_PACKAGES=(
	postgresql-15 postgresql-server-dev-15 libhiredis-dev libssl-dev
	redis-server redis-tools
	postgresql-15-pgtap libipc-run-perl
	postgresql-15-cron gnuplot-nox socat
)
PATH=$SECKILL_PG_BIN:$PATH
export PATH
# Bash's loadable sleep and unlink where Debian's bash-builtins is installed
# (scripts/test.sh installs it): a process costs a machine like the one CI
# uses about 5 ms of CPU, a fork and an exec, and the tests' waits sleep
# thousands of times.
enable -f /usr/lib/bash/sleep sleep 2>/dev/null || true
enable -f /usr/lib/bash/unlink unlink 2>/dev/null || true

seckill_die() {
	echo "seckill: $*" >&2
	return 1
}

seckill_install_deps() {
	local pkg missing=() log
	for pkg in "${SECKILL_PACKAGES[@]}"; do
		if [ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null)" != installed ]; then
			missing+=("$pkg")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return 0

	# We run our own servers on other ports: keep the packages from creating
	# the 15/main cluster and from starting any service while installing.
	local cluster_conf=/etc/postgresql-common/createcluster.d/seckill-no-main.conf
	local policy=/usr/sbin/policy-rc.d own_policy=
	mkdir -p "$(dirname "$cluster_conf")"
	echo 'create_main_cluster = off' >"$cluster_conf"
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
		own_policy=1
	fi

	log=$(mktemp)
	local rc=0
	{
		apt-get update -q &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
				--no-install-recommends "${missing[@]}"
	} >"$log" 2>&1 || rc=$?
	rm -f "$cluster_conf"
	rmdir --ignore-fail-on-non-empty "$(dirname "$cluster_conf")"
	[ -n "$own_policy" ] && rm -f "$policy"
	if [ $rc -ne 0 ]; then
		cat "$log" >&2
		rm -f "$log"
		seckill_die "could not install: ${missing[*]}"
		return 1
	fi
	rm -f "$log"
}

# seckill_build_install [make variables...], such as CRASH_POINTS=1.  Quiet
# unless something fails: then the whole build output is shown.
seckill_build_install() {
	local log
	log=$(mktemp)
	if ! { make -C "$SECKILL_ROOT" -j"$(nproc)" PG_CONFIG="$SECKILL_PG_CONFIG" "$@" &&
		make -C "$SECKILL_ROOT" install PG_CONFIG="$SECKILL_PG_CONFIG" "$@"; } >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		seckill_die "build or install failed"
		return 1
	fi
	rm -f "$log"
}

# Runs a command as postgres, from a directory postgres can read.
seckill_as_postgres() {
	(cd "$SECKILL_TMP" && runuser -u postgres -- "$@")
}

seckill_redis_cli() {
	redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" "$@"
}

# seckill_machine_ticks: the machine's busy, idle and stolen clock ticks
# and its context switches so far (/proc/stat), for a cell's "after - before"
seckill_machine_ticks() {
	awk '$1 == "cpu" { t = $2 + $3 + $4 + $7 + $8 " " $5 + $6 " " $9 } $1 == "ctxt" { x = $2 } END { print t, x }' /proc/stat
}

# seckill_now_ms: milliseconds since the epoch, from bash's own clock
seckill_now_ms() {
	echo $((${EPOCHREALTIME/[.,]/} / 1000))
}

# seckill_wait_for 'shell condition' timeout_seconds [interval_seconds]:
# the condition tried every interval (0.1 s; longer for a costly one), both
# may be fractional
seckill_wait_for() {
	local cond=$1 timeout=$2 interval=${3:-0.1} deadline whole frac
	# (in milliseconds, from bash's own clock: a date or an awk a try would
	# cost more than most conditions)
	whole=${timeout%%.*}
	frac=${timeout#"$whole"}
	frac=${frac#.}000
	deadline=$((${EPOCHREALTIME/[.,]/} / 1000 + 10#${whole:-0} * 1000 + 10#${frac:0:3}))
	until eval "$cond"; do
		if [ $((${EPOCHREALTIME/[.,]/} / 1000)) -ge "$deadline" ]; then
			seckill_die "timed out after ${timeout}s waiting for: $cond"
			return 1
		fi
		sleep "$interval"
	done
}

seckill_pg_ready() {
	pg_isready -q -h 127.0.0.1 -p "$PGPORT"
}

seckill_redis_ready() {
	[ "$(seckill_redis_cli ping 2>/dev/null)" = PONG ]
}

seckill_redis_start() {
	seckill_as_postgres redis-server --bind 127.0.0.1 --port "$SECKILL_REDIS_PORT" \
		--save '' --appendonly no --enable-debug-command local \
		--daemonize yes --dir "$SECKILL_TMP" \
		--pidfile "$SECKILL_TMP/redis.pid" --logfile "$SECKILL_TMP/redis.log" ||
		{ seckill_die "redis-server did not start"; return 1; }
	seckill_wait_for seckill_redis_ready 10
}

# seckill_running pid: the process runs (a daemon that exited stays a zombie
# until the machine's init reaps it, which may take seconds)
seckill_running() {
	local stat
	{ read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
	stat=${stat##*) }
	[ "${stat%% *}" != Z ]
}

seckill_redis_stop() {
	local pid
	pid=$(cat "$SECKILL_TMP/redis.pid" 2>/dev/null) || return 0
	seckill_redis_cli shutdown nosave >/dev/null 2>&1 || true
	seckill_wait_for "! seckill_running $pid" 10 || kill -9 "$pid" 2>/dev/null || true
	rm -f "$SECKILL_TMP/redis.pid"
}

seckill_redis_restart_empty() {
	seckill_redis_stop && seckill_redis_start
}

# seckill_cluster_node_start dir port: a Redis Cluster node of our own,
# without persistence, its bus port ten above (below the ephemeral range
# when port is), serving its slots while another master is down;
# restarted on the same dir, it rejoins the cluster with the node
# configuration it wrote there
seckill_cluster_node_start() {
	mkdir -p "$1" && chown postgres: "$1"
	seckill_as_postgres redis-server --bind 127.0.0.1 --port "$2" --cluster-enabled yes \
		--cluster-port $(($2 + 10)) --cluster-config-file "$1/nodes.conf" --cluster-node-timeout 2000 \
		--cluster-require-full-coverage no \
		--save '' --appendonly no --daemonize yes --dir "$1" --pidfile "$1/pid" --logfile "$1/log" &&
		seckill_wait_for "[ \"\$(redis-cli -h 127.0.0.1 -p $2 PING 2>/dev/null)\" = PONG ]" 10
}

# seckill_cluster_ok port...: each of those nodes finds the cluster ok
seckill_cluster_ok() {
	local port
	for port in "$@"; do
		redis-cli -h 127.0.0.1 -p "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
}

# seckill_cluster_create dir replicas port...: a Redis Cluster of nodes on
# those ports (each in dir/redis-<port>), with that many replicas a master,
# the slots split evenly among the masters
seckill_cluster_create() {
	local dir=$1 replicas=$2 port
	shift 2
	for port in "$@"; do
		seckill_cluster_node_start "$dir/redis-$port" "$port" || return 1
	done
	redis-cli -h 127.0.0.1 -p "$1" --cluster create "${@/#/127.0.0.1:}" --cluster-replicas "$replicas" \
		--cluster-yes >"$dir/create.out" 2>&1 ||
		{ cat "$dir/create.out" >&2; seckill_die "redis-cli --cluster create failed"; return 1; }
	seckill_wait_for "seckill_cluster_ok $*" 20
}

# seckill_cluster_stop dir: the nodes of seckill_cluster_create dir, killed
seckill_cluster_stop() {
	local f pid
	for f in "$1"/redis-*/pid; do
		pid=$(cat "$f" 2>/dev/null) && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = redis-server ] &&
			kill -KILL "$pid"
		rm -f "$f"
	done
	return 0
}

# The server's log: SECKILL_PGLOG, where a test that moves the primary to
# another server (test/t/24_random_faults.t) says it is
seckill_pg_log() { echo "${SECKILL_PGLOG:-$SECKILL_TMP/postgresql.log}"; }

seckill_pg_ctl() {
	seckill_as_postgres pg_ctl -D "$SECKILL_PGDATA" -l "$(seckill_pg_log)" "$@"
}

seckill_pg_restart() {
	seckill_pg_ctl -w -m fast restart >/dev/null ||
		{ seckill_die "PostgreSQL did not restart"; return 1; }
	seckill_wait_for seckill_pg_ready 30
}

# seckill_configure "SET name = value" | "RESET name" ...: ALTER SYSTEM, reload,
# and wait until the worker has reloaded its configuration (it logs it).
seckill_configure() {
	local before args=() change log
	log=$(seckill_pg_log)
	before=$(grep -c 'seckill worker reloaded its configuration' "$log" || true)
	for change in "$@"; do
		args+=(-c "ALTER SYSTEM $change")
	done
	psql -XAtq -v ON_ERROR_STOP=1 "${args[@]}" -c "SELECT pg_reload_conf()" >/dev/null || return 1
	seckill_wait_for "[ \$(grep -c 'seckill worker reloaded its configuration' '$log') -gt $before ]" 10
}

seckill_worker_pid() {
	psql -XAtq -v ON_ERROR_STOP=1 \
		-c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'seckill worker'"
}

# A pair of servers takes a slot: SECKILL_SLOT_PORTS ports from
# SECKILL_PORT_BASE + slot * SECKILL_SLOT_PORTS (PostgreSQL on the first,
# Redis on the second, the rest from SECKILL_OWN_PORT on for servers a test
# starts of its own), below the ephemeral range.  A slot is held by a lock on
# a file that every process started with the servers inherits: it is free
# again once the servers and everything left of the run are gone, so runs
# side by side (prove -j, or two clones) never share a port.
SECKILL_PORT_BASE=${SECKILL_PORT_BASE:-20000}
SECKILL_SLOT_PORTS=100
SECKILL_SLOTS=64
SECKILL_SLOT_LOCKS=/tmp/seckill-slots

seckill_port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# seckill_claim_slot: sets SECKILL_SLOT and the slot's first port, SECKILL_SLOT_BASE
seckill_claim_slot() {
	local slot fd base
	mkdir -p "$SECKILL_SLOT_LOCKS" || return 1
	for ((slot = 0; slot < SECKILL_SLOTS; slot++)); do
		exec {fd}>"$SECKILL_SLOT_LOCKS/$slot.lock" || return 1
		base=$((SECKILL_PORT_BASE + slot * SECKILL_SLOT_PORTS))
		if flock -n "$fd" && seckill_port_free "$base" && seckill_port_free $((base + 1)); then
			export SECKILL_SLOT=$slot SECKILL_SLOT_BASE=$base
			return 0
		fi
		exec {fd}>&-
	done
	seckill_die "no free slot of $SECKILL_SLOT_PORTS ports from $SECKILL_PORT_BASE (set SECKILL_PORT_BASE)"
}

# seckill_initdb dir log: a new data directory, copied from SECKILL_TEMPLATE
# (made once by seckill_make_template) when there is one
seckill_initdb() {
	if [ -n "${SECKILL_TEMPLATE:-}" ]; then
		cp -a "$SECKILL_TEMPLATE" "$1" >"$2" 2>&1
	else
		# from the new directory's parent, which postgres may read
		(cd "$(dirname "$1")" && runuser -u postgres -- initdb -D "$1" -U postgres --auth=trust \
			-E UTF8 --locale=C.UTF-8 --no-sync) >"$2" 2>&1
	fi
}

# seckill_make_template dir: initdb once into dir, for every seckill_initdb
# after it (exports SECKILL_TEMPLATE)
seckill_make_template() {
	mkdir -p "$1" && chown postgres: "$1" && chmod 755 "$1" || return 1
	SECKILL_TEMPLATE='' seckill_initdb "$1/pgdata" "$1/initdb.log" ||
		{ cat "$1/initdb.log" >&2; seckill_die "initdb failed"; return 1; }
	export SECKILL_TEMPLATE=$1/pgdata
}

# seckill_start_servers [extra postgresql.conf lines...]: on SECKILL_PG_PORT
# and SECKILL_REDIS_PORT when set, else on a slot of their own
# shellcheck disable=SC2120 # the extra lines are optional
seckill_start_servers() {
	export PGHOST=127.0.0.1 PGUSER=postgres PGDATABASE=postgres
	if [ -n "${SECKILL_PG_PORT:-}" ]; then
		export PGPORT=$SECKILL_PG_PORT
		export SECKILL_REDIS_PORT=${SECKILL_REDIS_PORT:-$((PGPORT + 1))}
		export SECKILL_OWN_PORT=${SECKILL_OWN_PORT:-$((PGPORT + 10))}
	else
		seckill_claim_slot || return 1
		export PGPORT=$SECKILL_SLOT_BASE SECKILL_REDIS_PORT=$((SECKILL_SLOT_BASE + 1))
		export SECKILL_OWN_PORT=$((SECKILL_SLOT_BASE + 10))
	fi
	SECKILL_TMP=$(mktemp -d /tmp/seckill.XXXXXX) || return 1
	export SECKILL_TMP SECKILL_PGDATA=$SECKILL_TMP/pgdata
	chown postgres: "$SECKILL_TMP"
	chmod 755 "$SECKILL_TMP"
	trap seckill_on_exit EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
	trap 'exit 141' PIPE

	# Never talk to someone else's servers by mistake.
	if seckill_pg_ready || seckill_redis_ready; then
		seckill_die "port $PGPORT or $SECKILL_REDIS_PORT is already in use" \
			"(set SECKILL_PG_PORT / SECKILL_REDIS_PORT)"
		return 1
	fi

	seckill_redis_start || return 1

	seckill_initdb "$SECKILL_PGDATA" "$SECKILL_TMP/initdb.log" ||
		{ cat "$SECKILL_TMP/initdb.log" >&2; seckill_die "initdb failed"; return 1; }
	{
		echo "listen_addresses = '127.0.0.1'"
		echo "port = $PGPORT"
		echo "unix_socket_directories = '$SECKILL_TMP'"
		echo "shared_preload_libraries = 'seckill,pg_cron'"
		echo "cron.database_name = 'postgres'"
		echo "cron.use_background_workers = on"
		echo "max_worker_processes = 16"
		echo "seckill.redis_host = '127.0.0.1'"
		echo "seckill.redis_port = $SECKILL_REDIS_PORT"
		echo "max_connections = 300"
		echo "max_prepared_transactions = 8"
		echo "shared_buffers = 256MB"
		echo "logging_collector = off"
		echo "log_min_messages = info"
		local line
		for line in "$@"; do
			echo "$line"
		done
	} >>"$SECKILL_PGDATA/postgresql.conf"

	seckill_pg_ctl -w start >/dev/null ||
		{ seckill_die "PostgreSQL did not start"; return 1; }
	seckill_wait_for seckill_pg_ready 30
}

seckill_stop_servers() {
	[ -n "${SECKILL_TMP:-}" ] || return 0
	if [ -f "$SECKILL_PGDATA/postmaster.pid" ]; then
		seckill_pg_ctl -w -m fast stop >/dev/null 2>&1 ||
			seckill_pg_ctl -w -m immediate stop >/dev/null 2>&1 || true
	fi
	seckill_redis_stop
}

# seckill_print_logs lines
seckill_print_logs() {
	local f
	for f in "$(seckill_pg_log)" "$SECKILL_TMP/redis.log"; do
		[ -s "$f" ] || continue
		echo "----- last lines of $f -----"
		tail -n "$1" "$f"
	done
}

# Set SECKILL_LOGS_ON_FAILURE=0 when the failure was already reported with
# the logs (the TAP tests print them themselves).
seckill_on_exit() {
	local rc=$?
	trap - EXIT
	# Output may go to a reader that is gone (| head): the cleanup must go on.
	trap '' PIPE
	set +e
	if [ $rc -ne 0 ] && [ "${SECKILL_LOGS_ON_FAILURE:-1}" = 1 ]; then
		seckill_print_logs 40 >&2
	fi
	seckill_stop_servers
	if [ "${SECKILL_KEEP:-0}" = 1 ]; then
		echo "seckill: kept $SECKILL_TMP (servers stopped)" >&2
	else
		rm -rf "$SECKILL_TMP"
	fi
	exit $rc
}

# seckill_pgbench dir clients seconds script: runs pgbench with the script,
# keeping its output, per-transaction log and own CPU time (dir/cpu: user
# and system seconds) in dir, and prints "calls/s latency-average p50 p99"
# (ms).  Returns pgbench's status.
# seconds may also be "-t N": N calls per client, however long they take.
# seckill_pgbouncer_start dir port pool clients: PgBouncer in transaction
# pooling in front of the suite's PostgreSQL, pool server connections for up
# to clients clients; its pid in dir/pid, its log in dir/pgbouncer.log.
# Returns once it answers, or 1 with its log.
seckill_pgbouncer_start() {
	local dir=$1 port=$2 pool=$3 clients=$4
	cat >"$dir/pgbouncer.ini" <<INI
[databases]
${PGDATABASE:-postgres} = host=127.0.0.1 port=$PGPORT user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = $pool
max_client_conn = $clients
pidfile = $dir/pid
logfile = $dir/pgbouncer.log
INI
	chown -R postgres "$dir"
	# runuser's PAM session resets the soft limit of open files: raised again
	runuser -u postgres -- sh -c 'ulimit -n "$1" && exec pgbouncer -d "$2"' sh "$((clients + 1024))" \
		"$dir/pgbouncer.ini" &&
		seckill_wait_for "psql -XAtq -p $port -c 'SELECT 1' >/dev/null 2>&1" 10 ||
		{ cat "$dir/pgbouncer.log" >&2 2>/dev/null; return 1; }
}

seckill_pgbench() {
	local dir=$1 clients=$2 seconds=$3 script=$4 rc=0 tps avg pct limit
	case $seconds in
	-t*) read -ra limit <<<"$seconds" ;;
	*) limit=(-T "$seconds") ;;
	esac
	mkdir -p "$dir"
	# times, in a subshell of its own, counts pgbench's CPU and nothing else
	(
		pgbench -n -M "${SECKILL_PGBENCH_PROTOCOL:-prepared}" -c "$clients" -j "$(nproc)" "${limit[@]}" -f "$script" \
			--log --log-prefix="$dir/txn" >"$dir/pgbench.out" 2>&1
		rc=$?
		times >"$dir/cpu" # not in a pipeline: its subshell would count nothing
		sed -i -nE '2s/^([0-9]+)m([0-9.]+)s ([0-9]+)m([0-9.]+)s$/\1 \2 \3 \4/p' "$dir/cpu"
		awk '{ printf "%.2f %.2f\n", $1 * 60 + $2, $3 * 60 + $4 }' "$dir/cpu" >"$dir/cpu.s" &&
			mv "$dir/cpu.s" "$dir/cpu"
		exit $rc
	) || rc=$?
	tps=$(sed -nE 's/^tps = ([0-9]+)\..*/\1/p' "$dir/pgbench.out")
	avg=$(sed -nE 's/^latency average = ([0-9.]+) ms$/\1/p' "$dir/pgbench.out")
	# The third field of each log line is the latency in microseconds (or
	# "failed" for a transaction that failed).
	pct=$(cat "$dir"/txn.* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ { print $3 }' | sort -n | awk '
		{ v[NR] = $1 }
		END {
			if (NR == 0) exit
			i50 = int(NR * 0.50); if (i50 < NR * 0.50) i50++
			i99 = int(NR * 0.99); if (i99 < NR * 0.99) i99++
			printf "%.3f %.3f", v[i50] / 1000, v[i99] / 1000
		}')
	echo "${tps:-?} ${avg:-?} ${pct:-? ?}"
	return $rc
}
