# shellcheck shell=bash
# A sale for the fault tests, sourced after tap.sh: a campaign, a crowd of 64
# connections whose users repeat, and the end every fault test shares:
# reconcile, sell the rest to fresh buyers, check the invariants of
# shared/DESIGN.md and print the figures.

# sale_begin goods stock [shards]: the campaign, preheated; sets SALE_GOODS,
# SALE_STOCK, SALE_CID
sale_begin() {
	SALE_GOODS=$1
	SALE_STOCK=$2
	SALE_WORK=$(mktemp -d)
	psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
	psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
	is "$(psql_val "SELECT seckill_campaign_create('$SALE_GOODS', $SALE_STOCK) > 0")" t \
		"campaign of $SALE_STOCK created" || done_testing
	if [ "${3:-1}" -gt 1 ]; then
		is "$(psql_val "SELECT seckill_campaign_set('$SALE_GOODS', '{\"shards\": $3}')->>'shards'")" "$3" \
			"its stock split into $3 shards" || done_testing
	fi
	is "$(psql_val "SELECT seckill_preheat('$SALE_GOODS')")" "$SALE_STOCK" "preheated" || done_testing
	SALE_CID=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$SALE_GOODS'")
}

# crowd_stoppable name: crowd_on(name) lets a crowd's statement through
# until crowd_stop name, then ends each of its connections at its next call
# with the error "crowd <name> stopped"
crowd_stoppable() {
	psql_val "CREATE TABLE IF NOT EXISTS crowd_stops (name text PRIMARY KEY);
		DELETE FROM crowd_stops WHERE name = '$1';
		CREATE OR REPLACE FUNCTION crowd_on(crowd text) RETURNS void LANGUAGE plpgsql AS \$\$
		BEGIN
			IF EXISTS (SELECT 1 FROM crowd_stops WHERE name = crowd) THEN
				RAISE EXCEPTION 'crowd % stopped', crowd;
			END IF;
		END \$\$" >/dev/null
}
crowd_stop() { psql_val "INSERT INTO crowd_stops VALUES ('$1')" >/dev/null; }
# crowd_stopped name out: every connection of that crowd ended when told,
# on nothing else, as its pgbench output says
crowd_stopped() {
	local aborted
	aborted=$(grep -c 'aborted in command' "$2")
	ok "[ $aborted -gt 0 ] && [ $aborted -eq \$(grep -c 'crowd $1 stopped' '$2') ]" \
		"$1: the crowd's $aborted connections ended when told, on nothing else" ||
		diag "$(grep 'aborted in command' "$2" | grep -v 'stopped' | head -3)"
}

# crowd_done name [pid]: a crowd of sale_crowd waited for (pid, by default
# SALE_CROWD's), stopped first if it buys until told; every call it made
# returned (statuses or caught errors), and a stopped crowd's connections
# ended when told, on nothing else
crowd_done() {
	local until=0
	grep -q "crowd_on('$1')" "$SALE_WORK/$1.sql" && until=1 && crowd_stop "$1"
	wait "${2:-$SALE_CROWD}"
	ok "grep -q 'number of failed transactions: 0' '$SALE_WORK/$1.out'" "$1: every call of the crowd returned"
	[ $until = 0 ] || crowd_stopped "$1" "$SALE_WORK/$1.out"
}

# sale_crowd seconds|until name [users [connections [rate]]]: 64
# connections, 2,000 calls/s in all, users drawn from [1, users] (default
# 30,000) so that many ask twice; in the background, its pid in SALE_CROWD,
# its pgbench output in $SALE_WORK/name.out.  A crowd "until" buys until
# crowd_end stops it.
sale_crowd() {
	local seconds=$1 on=
	if [ "$1" = until ]; then
		seconds=900
		on=" FROM crowd_on('$2')"
		crowd_stoppable "$2"
	fi
	cat >"$SALE_WORK/$2.sql" <<SQL
\set u random(1, ${3:-30000})
SELECT try_buy('user-' || :u, '$SALE_GOODS')$on;
SQL
	pgbench -n -c "${4:-64}" -j 2 -R "${5:-2000}" -T "$seconds" -f "$SALE_WORK/$2.sql" \
		--log --log-prefix="$SALE_WORK/$2-txn" >"$SALE_WORK/$2.out" 2>&1 &
	SALE_CROWD=$!
}

# expired_campaign goods n [shards]: a preheated campaign of n orders (a
# multiple of 1,000), all unpaid for two hours past a timeout of one; prints
# what the preheat printed (0: nothing left to sell).  The order ids come from
# the worker's own sequence, a block of 1,000 per nextval.
expired_campaign() {
	psql -Xq -v ON_ERROR_STOP=1 <<SQL
SELECT seckill_campaign_create('$1', $2, payment_timeout => '1 hour') AS id \gset
SELECT seckill_campaign_set('$1', '{"shards": ${3:-1}}') \g /dev/null
INSERT INTO seckill.orders (id, campaign_id, user_id, qty, created_at)
SELECT b.id + k, :id, 'expired-' || (b.id + k), 1, now() - interval '2 hours'
FROM (SELECT nextval('seckill.order_ids') AS id FROM generate_series(1, $2 / 1000)) b, generate_series(0, 999) k;
UPDATE seckill.campaigns SET sold = $2 WHERE id = :id;
SQL
	psql_val "SELECT seckill_preheat('$1')"
}

sale_orders() {
	psql_val "SELECT count(*) FROM seckill.orders WHERE campaign_id = $SALE_CID AND status <> 'cancelled'"
}

sale_orders_at_least() {
	[ "$(sale_orders 2>/dev/null || echo 0)" -ge "$1" ]
}

# sale_slowest name: the slowest call of that crowd, in ms.  Under -R the
# logged latency counts from the call's scheduled start; the 7th field is how
# late it started (its client was still waiting on an earlier call).
sale_slowest() {
	cat "$SALE_WORK/$1"-txn.* 2>/dev/null |
		awk '$3 ~ /^[0-9]+$/ { d = $3 - $7; if (d > m) m = d } END { printf "%d", m / 1000 }'
}

# sale_invariants campaign_id stock [label]: the invariants of
# shared/DESIGN.md on a campaign sold out and the answers its callers logged
# in stampede_answers: no oversell, nobody twice, every ok a committed order
sale_invariants() {
	local active="o.campaign_id = $1 AND o.status <> 'cancelled'" label=${3:+$3: }
	# fresh statistics: planned from those of before the sale, the last check
	# joined tens of thousands of answers to every order in turn
	psql_val "ANALYZE seckill.orders, stampede_answers" >/dev/null
	is "$(psql_val "SELECT coalesce(sum(qty), 0) || '/' || (SELECT sold FROM seckill.campaigns WHERE id = $1)
		FROM seckill.orders o WHERE $active")" "$2/$2" "${label}no oversell: ordered = sold = stock"
	is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders o WHERE $active
		GROUP BY o.user_id HAVING count(*) > 1) d")" 0 "${label}no user bought twice"
	is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok'
		AND NOT EXISTS (SELECT 1 FROM seckill.orders o WHERE $active AND o.id = a.order_id
			AND o.user_id = a.user_id)")" 0 "${label}every ok answer has its committed order"
}

# sell_until count target script [connections]: one crowd of pgbench, 32
# connections kept open (new ones every round would cost more than the
# sale), running script, whose statement ends with FROM crowd_on('<the
# script's name>'), until the command count prints target or more, or 10 s
# pass without a sale; its output in script.out
sell_until() {
	local count=$1 target=$2 script=$3 name pid sold now idle_since
	[ "$($count)" -ge "$target" ] && return 0
	name=$(basename "$script" .sql)
	crowd_stoppable "$name"
	pgbench -n -c "${4:-32}" -j 2 -T 900 -f "$script" >"${script%.sql}.out" 2>&1 &
	pid=$!
	sold=$($count)
	idle_since=$(date +%s)
	while [ "$sold" -lt "$target" ] && [ $(($(date +%s) - idle_since)) -lt 10 ] && kill -0 "$pid" 2>/dev/null; do
		sleep 0.5
		now=$($count)
		[ "$now" -gt "$sold" ] && idle_since=$(date +%s)
		sold=$now
	done
	crowd_stop "$name"
	wait "$pid"
}

# sale_finish: reconcile, sell the rest, check the invariants, print the figures
sale_finish() {
	local reconciled
	reconciled=$(psql_val "SELECT * FROM seckill_reconcile('$SALE_GOODS')")
	ok "[ $? -eq 0 ]" "reconcile: $reconciled"
	is "$(psql_val "SELECT redis_stock = pg_stock AND in_flight = 0 FROM seckill_status('$SALE_GOODS')")" t \
		"after reconcile: Redis' stock = total - sold, journal empty"
	cat >"$SALE_WORK/rest.sql" <<SQL
\set u random(1, 1000000000000000000)
SELECT try_buy('fresh-' || :u, '$SALE_GOODS') FROM crowd_on('rest');
SQL
	sell_until sale_orders "$SALE_STOCK" "$SALE_WORK/rest.sql"
	is "$(sale_orders)" "$SALE_STOCK" "fresh buyers sold the rest: exactly $SALE_STOCK orders"
	sale_invariants "$SALE_CID" "$SALE_STOCK"
	is "$(psql_val "SELECT count(*) FROM seckill.compensations c JOIN seckill.orders o ON o.id = c.request_id")" 0 \
		"no reservation is both an order and a compensation"
	is "$(psql_val "SELECT redis_stock || '/' || in_flight || '/' || redis_buyers FROM seckill_status('$SALE_GOODS')")" \
		"0/0/$SALE_STOCK" "Redis: stock 0, journal empty, one buyer per order"
	diag "requests $(psql_val "SELECT count(*) FROM stampede_answers"):" \
		"$(psql_val "SELECT string_agg(status || ' ' || n, ', ') FROM (SELECT status, count(*) n
			FROM stampede_answers GROUP BY 1 ORDER BY 1) s")" \
		"orders $(sale_orders), compensations $(psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $SALE_CID")"
	rm -rf "$SALE_WORK"
}

# own_servers name: for a test running Redis servers of its own, their
# directory (postgres owns it) in work; the suite's server log in log, and
# its key prefix in prefix (seckill.redis_prefix takes a restart: the
# suite's serves)
own_servers() {
	log=$SECKILL_TMP/postgresql.log
	prefix=$(psql_val "SHOW seckill.redis_prefix")
	work=$(mktemp -d -p "$SECKILL_TMP" "$1.XXXXXX")
	chown postgres: "$work"
	CROWD=
	SALE_WORK=
}

rcli() { # rcli port command...: redis-cli on one of them
	local port=$1
	shift
	redis-cli -h 127.0.0.1 -p "$port" "$@"
}
pg_now() { psql_val "SELECT clock_timestamp()"; }
info() { # info port section field
	rcli "$1" INFO "$2" 2>/dev/null | tr -d '\r' | sed -n "s/^$3://p"
}
# replicates port master_port: a replica of master_port, its link up
replicates() {
	[ "$(info "$1" replication role)" = slave ] &&
		[ "$(info "$1" replication master_port)" = "$2" ] &&
		[ "$(info "$1" replication master_link_status)" = up ]
}
# purchases port: the scripts that server ran (replicas get their effects only)
purchases() {
	rcli "$1" INFO commandstats 2>/dev/null | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' |
		grep . || echo 0
}

# the campaign as the server on port holds it, and as PostgreSQL says it
# should be: "stock buyers"
held() {
	echo "$(rcli "$1" HGET "$prefix:{c:$SALE_CID}:meta" stock 2>&1) $(rcli "$1" SCARD "$prefix:{c:$SALE_CID}:buyers" 2>&1)"
}
expected() {
	psql_val "SELECT c.total_stock - c.sold || ' ' || (SELECT count(*) FROM seckill.orders o
		WHERE o.campaign_id = c.id AND o.status <> 'cancelled') FROM seckill.campaigns c WHERE c.id = $SALE_CID"
}
# Redis as the worker sees it, as PostgreSQL says: stock = total - sold, one
# buyer per active order, nothing in flight
agrees() {
	psql_val "SELECT s.redis_stock = s.pg_stock AND s.in_flight = 0 AND s.redis_buyers = (SELECT count(*)
		FROM seckill.orders o WHERE o.campaign_id = s.campaign_id AND o.status <> 'cancelled')
		FROM seckill_status('$SALE_GOODS') s" 2>/dev/null
}
figures() {
	psql_val "SELECT 'sold ' || sold || ', pg_stock ' || pg_stock || ', redis_stock ' || redis_stock
		|| ', redis_buyers ' || redis_buyers || ', in_flight ' || in_flight
		FROM seckill_status('$SALE_GOODS')" 2>&1
}

# After a crowd of sale_crowd (its pid in CROWD), of a test with Redis
# servers of its own: what became of the calls, and of the campaign
crowd_end() {
	crowd_done "$1" "$CROWD"
	CROWD=
	local slowest
	slowest=$(sale_slowest "$1")
	ok "[ $slowest -lt 6000 ]" "$1: the slowest call took $slowest ms (request timeout 5000 ms)"
}
oks_since() { psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'ok' AND at >= '$1'"; }
# gap since: the longest time without an ok answer, from a second before
# then to the last ok, in ms
gap() {
	psql_val "SELECT coalesce(round(extract(epoch FROM max(d)) * 1000), -1) FROM (SELECT at - lag(at) OVER (ORDER BY at) d
		FROM stampede_answers WHERE status = 'ok' AND at >= '$1'::timestamptz - interval '1 second') s"
}
answers() { # answers since [until]
	psql_val "SELECT coalesce(string_agg(status || ' ' || n, ', '), 'none') FROM (SELECT status, count(*) n
		FROM stampede_answers WHERE at >= '$1' AND at < coalesce(nullif('${2:-}', ''), 'infinity')::timestamptz
		GROUP BY 1 ORDER BY 1) s"
}
errors() { # errors since
	psql_val "SELECT coalesce(string_agg(n || ' x ' || err, '; '), 'none') FROM (SELECT left(err, 120) err, count(*) n
		FROM stampede_answers WHERE status = 'error' AND at >= '$1' GROUP BY 1 ORDER BY 2 DESC LIMIT 3) s"
}
compensations() { psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $SALE_CID"; }
logged() { # logged byte_offset regex: lines of the server log since then
	tail -c +"$(($1 + 1))" "$log" | grep -ciE "$2"
}
# after name since mark master compensations_before: what every failover is
# checked for once its crowd is done
after() {
	local name=$1 since=$2 mark=$3 master=$4 comp=$5
	crowd_end "$name"
	diag "$name: answers $(answers "$since")" "$name: errors $(errors "$since")" \
		"$name: the longest time without an ok answer: $(gap "$since") ms"
	seckill_wait_for "[ \"\$(agrees)\" = t ]" 30
	ok "[ $? -eq 0 ]" "$name: Redis agrees with PostgreSQL without a reconcile (seckill_status)" ||
		diag "$name: $(figures)"
	is "$(held "$master")" "$(expected)" "$name: the new master holds stock = total - sold, a buyer per order"
	ok "[ $(logged "$mark" 'takes this Redis over|rebuil') -gt 0 ]" \
		"$name: the server log says the campaigns were rebuilt for the new master"
	invariants "$name"
	diag "$name: compensations $(($(compensations) - comp)), the worker's disconnections from Redis $(logged \
		"$mark" 'disconnected from Redis') and connections $(logged "$mark" 'connected to (the )?Redis')"
}
invariants() {
	is "$(psql_val "SELECT c.sold <= c.total_stock AND coalesce(sum(o.qty), 0) = c.sold FROM seckill.campaigns c
		LEFT JOIN seckill.orders o ON o.campaign_id = c.id AND o.status <> 'cancelled'
		WHERE c.id = $SALE_CID GROUP BY c.id")" t "$1: no oversell (active orders = sold <= stock)"
	is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders WHERE campaign_id = $SALE_CID
		AND status <> 'cancelled' GROUP BY user_id HAVING count(*) > 1) d")" 0 "$1: nobody holds two active orders"
	is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok' AND NOT EXISTS (SELECT 1
		FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id AND o.status <> 'cancelled')")" 0 \
		"$1: every ok answer has its active order"
}
# resumed name new_master: sales go to the new master by themselves
resumed() {
	local calls orders started
	calls=$(purchases "$2")
	orders=$(sale_orders)
	started=$(seckill_now_ms)
	seckill_wait_for "[ \$(purchases $2) -ge $((calls + 500)) ] && sale_orders_at_least $((orders + 200))" 30
	ok "[ $? -eq 0 ]" "$1: sales resume by themselves, on the new master" ||
		diag "$1: $(figures)" "$1: the worker since then:" "$(tail -c +"$((${mark:-0} + 1))" "$log" | grep -i 'seckill' | tail -n 40)"
	diag "$1: 500 purchases on the new master within $(($(seckill_now_ms) - started)) ms of its taking over"
}
