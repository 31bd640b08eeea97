# shellcheck shell=bash
# PostgreSQL servers of a test's own, a primary and its standbys (made with
# pg_basebackup -R), that share the suite's Redis under a key prefix of
# their own; and a client outside PostgreSQL that logs every answer
# (test/t/failover_client.py), so that acknowledged orders lost by a
# failover can be counted.  Source it after tap.sh, with work (a directory
# the postgres user may write) and prefix set; the test's cleanup calls
# pair_cleanup.

pair_client=

# at port psql-arguments...
at() {
	local port=$1
	shift
	psql -XAtq -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"
}
# val port SQL: psql_val on that server
val() { PGHOST=127.0.0.1 PGPORT=$1 PGUSER=postgres PGDATABASE=postgres psql_val "$2"; }
# pgctl server pg_ctl-arguments...
pgctl() {
	local dir=$1
	shift
	seckill_as_postgres pg_ctl -D "$work/$dir" -l "$work/$dir.log" "$@"
}
ready() { pg_isready -q -h 127.0.0.1 -p "$1"; }
dsn() { echo "host=127.0.0.1 port=$1 user=postgres dbname=postgres"; }

# on the suite's Redis, under the pair's prefix
rcli() { redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" "$@"; }
prefix_keys() { rcli --scan --pattern "$prefix:*" | wc -l; }
# answer port user: a purchase of $goods, its answer once it is final (not
# the worker starting, a timeout or busy), with its SQLSTATE, detail and hint
final() {
	last=$(at "$1" -v VERBOSITY=verbose -c "SELECT status FROM seckill_buy('$2', '$goods')" 2>&1)
	! grep -qE 'SK00[12]|^busy|not running' <<<"$last"
}
answer() {
	last=
	seckill_wait_for "final $1 $2" 30
	echo "$last"
}

# primary name port: a new server that preloads seckill, on Redis under $prefix
primary() {
	seckill_initdb "$work/$1" "$work/$1-initdb.out" || return 1
	{
		echo "listen_addresses = '127.0.0.1'"
		echo "port = $2"
		echo "unix_socket_directories = '$work'"
		echo "shared_preload_libraries = 'seckill'"
		echo "seckill.redis_host = '127.0.0.1'"
		echo "seckill.redis_port = $SECKILL_REDIS_PORT"
		echo "seckill.redis_prefix = '$prefix'"
		echo "wal_level = replica"
		echo "max_wal_senders = 10"
		echo "hot_standby = on"
		echo "logging_collector = off"
		echo "log_min_messages = info"
	} >>"$work/$1/postgresql.conf"
	pgctl "$1" -w start >/dev/null && seckill_wait_for "ready $2" 30
}

# standby name source_port port: a base backup of the server on source_port,
# started as its standby on port
standby() {
	seckill_as_postgres pg_basebackup -h 127.0.0.1 -p "$2" -U postgres -D "$work/$1" \
		-R -X stream -c fast >"$work/$1-basebackup.out" 2>&1 || return 1
	echo "port = $3" >>"$work/$1/postgresql.conf"
	pgctl "$1" -w start >/dev/null && seckill_wait_for "ready $3" 30
}

# streaming port n: the server on port has n standbys streaming
streaming() {
	[ "$(val "$1" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")" = "$2" ]
}

# sale name goods threads dsn...: the client in the background, its log
# $work/name.answers; stop_sale ends it
sale() {
	local name=$1 goods=$2 threads=$3
	shift 3
	rm -f "$work/stop"
	: >"$work/$name.answers"
	/usr/bin/python3 "$SECKILL_ROOT/test/t/failover_client.py" "$work/$name.answers" "$goods" "$threads" 300 \
		"$work/stop" "$@" 2>"$work/$name.client.err" &
	pair_client=$!
}
stop_sale() {
	touch "$work/stop"
	wait "$pair_client"
	pair_client=
}
oks() { grep -c ' ok ' "$1"; }
oks_after() { tail -n +"$(($2 + 1))" "$1" | grep -c ' ok '; }
statuses() {
	awk '{ print $2 == "error" ? "error " $3 : $2 }' "$1" | sort | uniq -c |
		awk '{ printf "%s%s %s", sep, $2 ($3 == "" ? "" : " " $3), $1; sep = ", " }'
}

# load name port: the client's log into table answers_<name> on that server
load() {
	at "$2" <<SQL
CREATE TABLE answers_$1 (line serial, user_id text, status text, order_id text, at_ms bigint);
\copy answers_$1 (user_id, status, order_id, at_ms) FROM '$work/$1.answers' WITH (DELIMITER ' ')
SQL
}

# Redis as PostgreSQL says: stock = total - sold, one buyer per active order
agrees() {
	val "$1" "SELECT s.redis_stock = s.pg_stock AND s.redis_buyers = (SELECT count(*) FROM seckill.orders o
		WHERE o.campaign_id = s.campaign_id AND o.status <> 'cancelled') FROM seckill_status('$2') s" 2>/dev/null
}
figures() {
	val "$1" "SELECT 'sold ' || sold || ', pg_stock ' || pg_stock || ', redis_stock ' || redis_stock
		|| ', redis_buyers ' || redis_buyers || ', in_flight ' || in_flight || ', active orders '
		|| (SELECT count(*) FROM seckill.orders o WHERE o.campaign_id = s.campaign_id AND o.status <> 'cancelled')
		FROM seckill_status('$2') s" 2>&1
}

# pair_cleanup server...: the client and those servers stopped, the prefix's
# keys gone from Redis
pair_cleanup() {
	local dir
	[ -n "$pair_client" ] && kill "$pair_client" 2>/dev/null && wait "$pair_client"
	for dir in "$@"; do
		[ -f "$work/$dir/postmaster.pid" ] && pgctl "$dir" -w -m immediate stop >/dev/null 2>&1
	done
	redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" --scan --pattern "$prefix:*" |
		xargs -r redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" del >/dev/null
}
