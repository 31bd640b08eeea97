#!/usr/bin/env bash
# TLS to Redis (seckill.redis_tls): a Redis of our own with a TLS port only,
# its certificate from a CA of our own, a password.  A 64-connection sale
# and a lock's waiter woken through the subscription work over TLS; a
# capture of the wire (a socat relay that logs every byte) holds neither
# the password nor AUTH nor any command in clear, where the same capture of
# a plain connection shows them.  Refused, each with a clear error and no
# reconnect storm: a CA that did not sign the server's certificate, an
# expired certificate, a server name the certificate does not carry, a
# plain-text port; and, once Redis asks for client certificates, a worker
# without one (with one, it sells again).  A Redis Cluster of three masters
# that speak TLS only, on their bus too: a campaign sharded over them sells
# over TLS.  Last, a sentinel that speaks TLS only and watches the master
# and a replica over TLS: the worker finds the master through it (nothing
# in clear on the sentinel's wire either), and follows a SENTINEL FAILOVER
# to the replica, where it sells on and Redis agrees with PostgreSQL.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

# Below 32768 (see 88_failover.t)
base=${SECKILL_TLS_PORT:-$SECKILL_OWN_PORT}
tls_port=$base
relay_port=$((base + 1))
cluster_ports="$((base + 2)) $((base + 3)) $((base + 4))"
replica_port=$((base + 5))
sentinel_port=$((base + 6))
sentinel_relay_port=$((base + 7))
own_servers tls
secret="Tls-$RANDOM-$RANDOM-$RANDOM"
relay=
alive() { # pid...: is any of them running?
	local pid
	for pid in "$@"; do kill -0 "$pid" 2>/dev/null && return 0; done
	return 1
}
cleanup() {
	[ -n "$relay" ] && kill "$relay" $(pgrep -P "$relay") 2>/dev/null
	local f pids=()
	for f in "$work"/*.pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
	[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null &&
		seckill_wait_for "! alive ${pids[*]}" 10
	seckill_configure "RESET seckill.redis_tls" "RESET seckill.redis_tls_ca_file" \
		"RESET seckill.redis_tls_cert_file" "RESET seckill.redis_tls_key_file" \
		"RESET seckill.redis_tls_server_name" "RESET seckill.redis_port" \
		"RESET seckill.redis_password_file" "RESET seckill.redis_cluster" \
		"RESET seckill.redis_sentinels" "RESET seckill.redis_master_name" >/dev/null 2>&1
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
# shellcheck disable=SC2086 # the list splits
ports_free SECKILL_TLS_PORT "$tls_port" "$relay_port" $cluster_ports "$replica_port" "$sentinel_port" \
	"$sentinel_relay_port"

# The certificates: a CA, the server's (for 127.0.0.1 and localhost), an
# expired one, another CA, and a client's
cd "$work" || exit 1
ca() { openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -subj "/CN=$1" -days 30 2>/dev/null; }
signed() { # name ca days [extension]
	openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null &&
		printf '%s\n' "${4:-subjectAltName=IP:127.0.0.1,DNS:localhost}" >"$1.ext" &&
		openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -out "$1.crt" \
			-days "$3" -extfile "$1.ext" 2>/dev/null
}
ca ca && ca other-ca && signed server ca 30 && signed expired ca -1 && signed client ca 30 'extendedKeyUsage=clientAuth'
ok "[ $? -eq 0 ]" "certificates made: a CA, the server's, an expired one, another CA, a client's" || done_testing
chown postgres: ./*
chmod 600 ./*.key
printf '%s\n' "$secret" >redis.pass
chown postgres redis.pass
chmod 600 redis.pass
cd - >/dev/null || exit 1

tcli() {
	redis-cli -h 127.0.0.1 -p "$tls_port" --tls --insecure --cert "$work/client.crt" --key "$work/client.key" \
		-a "$secret" --no-auth-warning "$@"
}
seckill_as_postgres redis-server --bind 127.0.0.1 --port 0 --tls-port "$tls_port" \
	--tls-cert-file "$work/server.crt" --tls-key-file "$work/server.key" --tls-ca-cert-file "$work/ca.crt" \
	--tls-auth-clients no --requirepass "$secret" --save '' --appendonly no \
	--daemonize yes --dir "$work" --logfile "$work/redis.log" --pidfile "$work/redis.pid" &&
	seckill_wait_for "[ \"\$(tcli ping 2>/dev/null)\" = PONG ]" 10
ok "[ $? -eq 0 ]" "a Redis with a TLS port only, on port $tls_port" || done_testing
connections() { tcli INFO stats | tr -d '\r' | sed -n 's/^total_connections_received://p'; }

# use [setting = value]...: the worker on the TLS Redis with the CA, as changed
use() {
	local changes=("SET seckill.redis_tls = on" "SET seckill.redis_port = $tls_port"
		"SET seckill.redis_password_file = '$work/redis.pass'" "SET seckill.redis_tls_ca_file = '$work/ca.crt'"
		"RESET seckill.redis_tls_server_name" "RESET seckill.redis_tls_cert_file" "RESET seckill.redis_tls_key_file"
		"RESET seckill.redis_sentinels" "RESET seckill.redis_cluster")
	local change
	for change in "$@"; do changes+=("SET $change"); done
	seckill_configure "${changes[@]}"
}
# buy: a purchase by a new user (called in $(...) too: the user comes from the clock)
buy() { psql_val "SELECT status FROM seckill_buy('tls-$(date +%s%N)', '$goods')" 2>&1; }

goods="tls-$(date +%s)-$$"
use
ok "[ $? -eq 0 ]" "seckill.redis_tls on, with the CA and the password file"
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql_val "SELECT seckill_campaign_create('$goods', 1000000)" >/dev/null
seckill_wait_for "[ \"\$(psql_val \"SELECT seckill_preheat('$goods')\" 2>/dev/null)\" = 1000000 ]" 10
ok "[ $? -eq 0 ]" "a campaign preheated over TLS"
is "$(buy)" ok "a purchase over TLS"
clients=$(tcli CLIENT LIST | grep -v 'cmd=client')
ok "[ \"\$(grep -c 'laddr=127.0.0.1:$tls_port' <<<'$clients')\" -ge 2 ] && grep -q 'cmd=subscribe' <<<'$clients'" \
	"the worker's connection and its subscription are on the TLS port"

# a lock's waiter is woken by the release's message, through the subscription over TLS
session_hold "SELECT seckill_lock('tls-lock');"
started=$(seckill_now_ms)
psql_val "SELECT seckill_lock('tls-lock', wait => '20 s') IS NOT NULL" >"$work/waiter" 2>&1 7>&- &
waiter=$!
seckill_wait_for "[ \"\$(psql_val \"SELECT count(*) FROM seckill.locks WHERE name = 'tls-lock' AND state = 'waiting'\")\" = 1 ]" 10
released=$(seckill_now_ms)
session_end "SELECT seckill_unlock('tls-lock');"
wait "$waiter"
got=$(seckill_now_ms)
is "$(cat "$work/waiter")" t "a waiter gets the lock over TLS once it is released"
ok "[ $((got - released)) -lt 2000 ]" "within $((got - released)) ms of the release (waited $((released - started)) ms before)"

# what crosses the wire: a relay that logs every byte, TLS through it, then plain text
socat -v TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$tls_port" 2>"$work/wire-tls" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
use "seckill.redis_port = $relay_port" "seckill.redis_tls_server_name = '127.0.0.1'"
seckill_wait_for "[ \"\$(buy)\" = ok ]" 10
ok "[ $? -eq 0 ]" "through the logging relay, purchases work"
for _ in 1 2 3 4 5; do buy >/dev/null; done
bytes=$(wc -c <"$work/wire-tls")
ok "[ $bytes -gt 2000 ] && ! grep -aq -e '$secret' -e AUTH -e EVALSHA -e HGETALL '$work/wire-tls'" \
	"the capture ($bytes bytes) holds neither the password nor AUTH nor any command in clear"
kill "$relay" $(pgrep -P "$relay") 2>/dev/null
wait "$relay" 2>/dev/null
socat -v TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$SECKILL_REDIS_PORT" 2>"$work/wire-plain" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
seckill_configure "SET seckill.redis_tls = off" "RESET seckill.redis_password_file" "SET seckill.redis_port = $relay_port"
seckill_wait_for "[ \"\$(buy)\" = ok ]" 10
ok "grep -aq EVALSHA '$work/wire-plain'" "while the same capture of a plain connection shows its commands"
kill "$relay" $(pgrep -P "$relay") 2>/dev/null
wait "$relay" 2>/dev/null
relay=

# refused: each with its error, and at most a connection a second or so.
# Redis counts no connection whose handshake failed: a relay counts them.
socat -d -d TCP-LISTEN:"$relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$tls_port" 2>"$work/relay-count" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$relay_port) 2>/dev/null" 10
attempts() { grep -c 'accepting connection' "$work/relay-count"; }
# refused name pattern [setting = value]...: through the counting relay
refused() {
	local name=$1 pattern=$2 before err made
	shift 2
	use "seckill.redis_port = $relay_port" "$@"
	err=$(buy)
	before=$(attempts)
	sleep 3 # the window in which connections are counted
	made=$(($(attempts) - before))
	grep -qE "$pattern" <<<"$err"
	ok "[ $? -eq 0 ]" "$name: refused, saying so: ${err//$'\n'/ }"
	ok "[ $made -ge 1 ] && [ $made -le 6 ]" "$name: the worker tries again, without a storm ($made connection(s) in 3 s)"
}
refused "another CA" 'certificate .* was refused: .*(issuer|self-signed)' "seckill.redis_tls_ca_file = '$work/other-ca.crt'"
refused "a server name the certificate lacks" 'was refused: .*(Hostname|hostname|mismatch)' \
	"seckill.redis_tls_server_name = 'redis.example'"
tcli CONFIG SET tls-cert-file "$work/expired.crt" tls-key-file "$work/expired.key" >/dev/null
refused "an expired certificate" 'was refused: certificate has expired'
tcli CONFIG SET tls-cert-file "$work/server.crt" tls-key-file "$work/server.key" >/dev/null
kill "$relay" $(pgrep -P "$relay") 2>/dev/null
wait "$relay" 2>/dev/null
relay=
use "seckill.redis_port = $SECKILL_REDIS_PORT"
err=$(buy)
grep -q 'TLS handshake with Redis at .*: is it a TLS port?' <<<"$err"
ok "[ $? -eq 0 ]" "a plain-text port: refused, saying so: ${err//$'\n'/ }" || diag "$err"

# client certificates
tcli CONFIG SET tls-auth-clients yes >/dev/null
use
seckill_wait_for "[[ \"\$(buy)\" != ok ]]" 10
ok "[ $? -eq 0 ]" "Redis asks for a client certificate: a worker without one is refused ($(buy | head -1))"
use "seckill.redis_tls_cert_file = '$work/client.crt'" "seckill.redis_tls_key_file = '$work/client.key'"
seckill_wait_for "[ \"\$(buy)\" = ok ]" 10
ok "[ $? -eq 0 ]" "with seckill.redis_tls_cert_file and _key_file, it sells again"
use "seckill.redis_tls_cert_file = '$work/client.crt'"
err=$(buy)
ok "[[ \"\$err\" == *'go together'* ]]" "a certificate without its key is refused: ${err//$'\n'/ }"
# a key file others can read, and an encrypted key (no terminal to ask for
# its passphrase on): refused at once, saying why
install -o postgres -m 644 "$work/client.key" "$work/open.key"
use "seckill.redis_tls_cert_file = '$work/client.crt'" "seckill.redis_tls_key_file = '$work/open.key'"
err=$(buy)
ok "[[ \"\$err\" == *'seckill.redis_tls_key_file'*'chmod 600'* ]]" "a key file others can read is refused: ${err//$'\n'/ }"
openssl pkey -in "$work/client.key" -out "$work/locked.key" -aes256 -passout pass:a-passphrase 2>/dev/null
chown postgres "$work/locked.key" && chmod 600 "$work/locked.key"
use "seckill.redis_tls_cert_file = '$work/client.crt'" "seckill.redis_tls_key_file = '$work/locked.key'"
t0=$(seckill_now_ms)
err=$(buy)
took=$(($(seckill_now_ms) - t0))
ok "[[ \"\$err\" == *'is encrypted'* ]] && [ $took -lt 2000 ]" \
	"an encrypted key is refused in $took ms, no passphrase asked: ${err//$'\n'/ }"

# a sale over TLS, with client certificates: 64 connections, the invariants
use "seckill.redis_tls_cert_file = '$work/client.crt'" "seckill.redis_tls_key_file = '$work/client.key'"
seckill_wait_for "[ \"\$(buy)\" = ok ]" 10
sale_begin "$goods-sale" 3000
sale_crowd 3 tls
wait "$SALE_CROWD"
ok "grep -q 'number of failed transactions: 0' '$SALE_WORK/tls.out'" "a 64-connection sale over TLS"
sale_finish
ok "! grep -q -e '$secret' '$log'" "the server log does not hold the password"

# A Redis Cluster over TLS, its bus too (each node's ten ports above)
for port in $cluster_ports; do
	seckill_as_postgres redis-server --bind 127.0.0.1 --port 0 --tls-port "$port" --tls-cluster yes \
		--tls-cert-file "$work/server.crt" --tls-key-file "$work/server.key" --tls-ca-cert-file "$work/ca.crt" \
		--tls-auth-clients no --cluster-enabled yes --cluster-port $((port + 10)) \
		--cluster-config-file "$work/nodes-$port.conf" --save '' --appendonly no \
		--daemonize yes --dir "$work" --logfile "$work/cluster-$port.log" --pidfile "$work/cluster-$port.pid"
done
ccli() { # port command...
	local port=$1
	shift
	redis-cli -h 127.0.0.1 -p "$port" --tls --cacert "$work/ca.crt" "$@"
}
cluster_ok() { # port...: each node finds the cluster ok
	local port
	for port in "$@"; do
		ccli "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' || return 1
	done
}
# shellcheck disable=SC2046 # the list splits
for port in $cluster_ports; do seckill_wait_for "[ \"\$(ccli $port PING 2>/dev/null)\" = PONG ]" 10; done &&
	ccli "${cluster_ports%% *}" --cluster create $(printf '127.0.0.1:%s ' $cluster_ports) --cluster-yes \
		>"$work/cluster-create.out" 2>&1 &&
	seckill_wait_for "cluster_ok $cluster_ports" 20
ok "[ $? -eq 0 ]" "a Redis Cluster of three masters speaking TLS only" || diag "$(cat "$work/cluster-create.out")"
seckill_configure "SET seckill.redis_cluster = on" "SET seckill.redis_port = ${cluster_ports%% *}" \
	"RESET seckill.redis_password_file" "RESET seckill.redis_tls_cert_file" "RESET seckill.redis_tls_key_file"
cluster_goods="$goods-cluster"
psql_val "SELECT seckill_campaign_create('$cluster_goods', 1600)" >/dev/null
psql_val "SELECT seckill_campaign_set('$cluster_goods', '{\"shards\": 16}')" >/dev/null
seckill_wait_for "[ \"\$(psql_val \"SELECT seckill_preheat('$cluster_goods')\" 2>/dev/null)\" = 1600 ]" 20
ok "[ $? -eq 0 ]" "seckill.redis_cluster with TLS: a campaign of 16 shards preheated"
bought=0
for i in $(seq 1 60); do
	[ "$(psql_val "SELECT status FROM seckill_buy('cluster-$i', '$cluster_goods')" 2>&1)" = ok ] && bought=$((bought + 1))
done
is "$bought" 60 "60 purchases over TLS to the cluster's masters"
# 16 shards over 3 masters: all on one would be a chance of 3 in 3^16
masters=$(psql_val "SELECT count(DISTINCT redis_node) FROM seckill_campaign_nodes('$cluster_goods')")
ok "[ ${masters:-0} -ge 2 ]" "the campaign's shards are served by $masters of the masters, over TLS"
is "$(psql_val "SELECT redis_stock || '/' || redis_buyers FROM seckill_status('$cluster_goods')")" "1540/60" \
	"Redis agrees with PostgreSQL: stock 1540, 60 buyers"

# Sentinels over TLS: a replica of the TLS master, a sentinel that speaks
# TLS only (to its clients, and to the servers it watches), behind a relay
# that logs every byte
tls_files=(--tls-cert-file "$work/server.crt" --tls-key-file "$work/server.key" --tls-ca-cert-file "$work/ca.crt")
seckill_as_postgres redis-server --bind 127.0.0.1 --port 0 --tls-port "$replica_port" "${tls_files[@]}" \
	--tls-replication yes --tls-auth-clients no --requirepass "$secret" --masterauth "$secret" \
	--replicaof 127.0.0.1 "$tls_port" --save '' --appendonly no \
	--daemonize yes --dir "$work" --logfile "$work/replica.log" --pidfile "$work/replica.pid"
mkdir -p "$work/sentinel" && cat >"$work/sentinel/sentinel.conf" <<CONF
bind 127.0.0.1
port 0
tls-port $sentinel_port
tls-cert-file $work/server.crt
tls-key-file $work/server.key
tls-ca-cert-file $work/ca.crt
tls-replication yes
tls-auth-clients no
daemonize yes
pidfile $work/sentinel.pid
logfile $work/sentinel.log
dir $work/sentinel
sentinel monitor mymaster 127.0.0.1 $tls_port 1
sentinel auth-pass mymaster $secret
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 5000
CONF
chown -R postgres: "$work/sentinel"
scli() { redis-cli -h 127.0.0.1 -p "$sentinel_port" --tls --cacert "$work/ca.crt" "$@"; }
named() { [ "$(scli SENTINEL get-master-addr-by-name mymaster 2>/dev/null | sed -n 2p)" = "$1" ]; }
sentinel_ready() { [ "$(scli SENTINEL replicas mymaster 2>/dev/null | grep -A1 -x flags | sed -n 2p)" = slave ]; }
seckill_as_postgres redis-server "$work/sentinel/sentinel.conf" --sentinel &&
	seckill_wait_for sentinel_ready 20 && named "$tls_port"
ok "[ $? -eq 0 ]" "a sentinel with a TLS port only names the master, and sees its replica, over TLS" || done_testing
socat -v TCP-LISTEN:"$sentinel_relay_port",bind=127.0.0.1,reuseaddr,fork TCP:127.0.0.1:"$sentinel_port" \
	2>"$work/wire-sentinel" &
relay=$!
seckill_wait_for "(exec 3<>/dev/tcp/127.0.0.1/$sentinel_relay_port) 2>/dev/null" 10
use "seckill.redis_sentinels = '127.0.0.1:$sentinel_relay_port'" "seckill.redis_master_name = 'mymaster'" \
	"seckill.redis_tls_cert_file = '$work/client.crt'" "seckill.redis_tls_key_file = '$work/client.key'"
seckill_wait_for "[ \"\$(buy)\" = ok ]" 10
ok "[ $? -eq 0 ]" "seckill.redis_sentinels with TLS: the worker finds the master through the sentinel and sells"
ok "grep -q 'connected to Redis at 127.0.0.1:$tls_port, the master the sentinels name' '$log'" \
	"the worker connected to the master the sentinel named"
sentinel_bytes=$(wc -c <"$work/wire-sentinel")
ok "[ $sentinel_bytes -gt 500 ] && ! grep -aq -e '$secret' -e AUTH -e get-master-addr -e mymaster '$work/wire-sentinel'" \
	"the capture of the sentinel's wire ($sentinel_bytes bytes) holds neither the password nor a command in clear"

# SENTINEL FAILOVER: the replica becomes the master, the worker follows
sale_begin "$goods-sentinel" 2000
sale_crowd 2 sentinel
is "$(scli SENTINEL FAILOVER mymaster)" OK "SENTINEL FAILOVER mymaster, during a sale"
seckill_wait_for "named $replica_port" 20
ok "[ $? -eq 0 ]" "the sentinel names the replica the master"
wait "$SALE_CROWD"
seckill_wait_for "[ \"\$(buy)\" = ok ]" 20
ok "[ $? -eq 0 ]" "the worker follows the sentinel to the new master over TLS, and sells"
ok "grep -q 'connected to Redis at 127.0.0.1:$replica_port, the master the sentinels name' '$log'" \
	"the worker connected to the new master"
seckill_wait_for "[ \"\$(psql_val \"SELECT redis_stock = pg_stock AND in_flight = 0 FROM seckill_status('$SALE_GOODS')\")\" = t ]" 20
ok "[ $? -eq 0 ]" "Redis on the new master agrees with PostgreSQL without a reconcile"
sale_finish
done_testing
