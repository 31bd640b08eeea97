#!/usr/bin/env bash
# The client examples of docs/CLIENTS.md, examples/node (node-postgres),
# examples/python (psycopg 3), examples/java (pgJDBC with a HikariCP pool) and
# examples/go (pgx v4 with pgxpool), each buy for 300 users on 16 connections
# while Redis stalls past their request timeout and some of their connections
# are terminated.  Every call whose outcome was unknown asks seckill_order(),
# and every answer they report matches seckill.orders: a user reported as a
# buyer holds exactly that order, every other user holds none.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

redis_pid=$(cat "$SECKILL_TMP/redis.pid")
work=$(mktemp -d -p "$SECKILL_TMP")
trap 'kill -CONT "$redis_pid" 2>/dev/null; rm -rf "$work"' EXIT
export DATABASE_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
psql_val "CREATE EXTENSION seckill" >/dev/null

cp -r "$SECKILL_ROOT/examples/node" "$work/node"
(cd "$work/node" && npm ci --no-audit --no-fund >"$work/npm.out" 2>&1)
ok "[ $? -eq 0 ]" "npm ci: pg for the Node.js example" || diag "$(tail -5 "$work/npm.out")"

# the Java example against Debian's jars, and slf4j-simple for HikariCP's log
jars=/usr/share/java/postgresql.jar:/usr/share/java/HikariCP.jar
jars+=:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar
mkdir "$work/java"
javac -cp "$jars" -d "$work/java" "$SECKILL_ROOT/examples/java/Shop.java" >"$work/javac.out" 2>&1
ok "[ $? -eq 0 ]" "javac: the Java example, with pgJDBC and HikariCP" || diag "$(tail -5 "$work/javac.out")"

# the Go example against Debian's pgx v4, offline in GOPATH mode
(cd "$SECKILL_ROOT/examples/go" && GOPATH=/usr/share/gocode GO111MODULE=off go build -o "$work/go-shop" shop.go) \
	>"$work/go.out" 2>&1
ok "[ $? -eq 0 ]" "go build: the Go example, with pgx v4" || diag "$(tail -5 "$work/go.out")"

# Redis answers within seckill.redis_timeout (5 s), after the examples'
# seckill.request_timeout (2 s): calls time out while their purchase goes on
seckill_configure "SET seckill.redis_timeout = '5s'"
ok "[ $? -eq 0 ]" "seckill.redis_timeout = 5s"

# run name command...: the example buys for user-1 .. user-300 of a fresh
# campaign of 150 items; Redis is frozen when it starts and for 3 s, and 4 of
# its connections are terminated while they wait; then its report is checked
# against the orders
run() {
	local name=$1 goods out client waiting
	shift
	goods="$name-$(date +%s)-$$"
	out="$work/$name.out"
	psql_val "SELECT seckill_campaign_create('$goods', 150)" >/dev/null
	psql_val "SELECT seckill_preheat('$goods')" >/dev/null
	kill -STOP "$redis_pid"
	"$@" "$goods" 1 300 >"$out" 2>"$work/$name.err" &
	client=$!
	# a call in seckill_buy that timed out goes on to seckill_order(), which
	# waits too: both count, so that the state lasts while Redis is frozen
	# (the pool opens its connections one by one meanwhile)
	waiting="SELECT pid, query LIKE '%FROM seckill_buy(%' AS buying FROM pg_stat_activity
		WHERE wait_event_type = 'Extension' AND query ~ 'FROM seckill_(buy|order)\\('"
	seckill_wait_for "[ \$(psql_val \"SELECT count(*) FROM ($waiting) w\") -ge 16 ]" 30
	ok "[ $? -eq 0 ]" "$name: its 16 connections wait on the frozen Redis"
	psql_val "SELECT count(pg_terminate_backend(pid)) FROM ($waiting ORDER BY buying DESC LIMIT 4) w" >/dev/null
	sleep 3 # the rest of the stall, longer than the examples' request timeout
	kill -CONT "$redis_pid"
	wait "$client"
	ok "[ $? -eq 0 ]" "$name: the example ran to its end" || diag "$(tail -5 "$work/$name.err")"
	is "$(wc -l <"$out")" 300 "$name: it reported every user"
	diag "$name: $(awk '{ print $2 " " ($4 == "answer" ? "answered" : "asked") }' "$out" | sort | uniq -c |
		awk '{ printf "%s%s %s %s", sep, $1, $2, $3; sep = ", " }')"
	ok "grep -q ' asked:' '$out'" "$name: some calls failed or timed out, and the example asked seckill_order()"
	result=$(psql -XAtq -v ON_ERROR_STOP=1 2>&1 <<SQL
CREATE TEMP TABLE report (user_id text, status text, order_id text, how text);
\copy report FROM '$out' WITH (DELIMITER ' ')
SELECT count(*) FILTER (WHERE r.status IN ('ok', 'reserved') AND o.id::text IS DISTINCT FROM r.order_id)
	|| '|' || count(*) FILTER (WHERE r.status NOT IN ('ok', 'reserved') AND o.id IS NOT NULL)
	|| '|' || (count(o.id) = max(c.sold) AND max(c.sold) <= 150)
FROM report r
JOIN seckill.campaigns c ON c.goods = '$goods'
LEFT JOIN seckill.orders o ON o.user_id = r.user_id AND o.campaign_id = c.id AND o.status <> 'cancelled';
SQL
)
	is "$result" "0|0|true" \
		"$name: every reported buyer holds that order, nobody else holds one, the orders are what was sold"
	psql_val "SELECT seckill_close('$goods')" >/dev/null
}

run node node "$work/node/shop.js"
run python /usr/bin/python3 "$SECKILL_ROOT/examples/python/shop.py"
run java java -cp "$work/java:$jars" Shop
run go "$work/go-shop"

seckill_configure "RESET seckill.redis_timeout"
done_testing
