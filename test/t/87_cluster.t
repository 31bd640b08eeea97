#!/usr/bin/env bash
# Redis Cluster, on servers of our own: three masters and their replicas on
# loopback, the bus ports below the ephemeral range.  The suite's PostgreSQL
# is pointed at one master as its seed (seckill.redis_cluster) and:
#  1. sells campaigns living on every master and a campaign of 6 stock shards
#     spread over them, under 64 connections, to the last item;
#  2. takes 30 SQL locks whose names live on every master, one by one and
#     all or none;
#  3. sells on while a campaign's slot moves to another master phase by
#     phase (importing, keys migrating, ASK, MOVED): the answers of each
#     phase are printed, and none may be an error (a purchase whose keys are
#     not all on one side yet is refused TRYAGAIN by Redis: it answers busy);
#  4. sells on after its connection to that master is killed, the moved slot
#     now known only by a fresh CLUSTER SLOTS: the journal replay follows it;
#  5. sells on when the seed's master is killed (SIGKILL): the worker
#     reaches the cluster through the other masters, a campaign on another
#     master sells while the killed one is down, and once its replica is
#     promoted the campaigns are rebuilt for the new master;
#  6. sells on when the killed node, back as a replica, takes over again by
#     CLUSTER FAILOVER.
# After each: no oversell, nobody twice, every ok an order.
# The crowds of the fault phases buy until each phase's checks are done.
# Runs alone: its six Redis nodes and crowds of 64 connections cost about
# 115 s of CPU in under a minute and a half, and beside another file its
# sales fell short of the conditions' bounds.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

# Below 32768, where the kernel's ephemeral ports begin; derived from the
# suite's port (apart from 88_failover.t's and 89_sentinel.t's)
base=${SECKILL_CLUSTER_PORT:-$SECKILL_OWN_PORT}
nodes=("$base" $((base + 1)) $((base + 2)) $((base + 3)) $((base + 4)) $((base + 5)))
masters=()
own_servers cluster

BYSTANDER=
cleanup() {
	[ -n "$CROWD" ] && kill "$CROWD" 2>/dev/null && wait "$CROWD"
	[ -n "$BYSTANDER" ] && kill "$BYSTANDER" 2>/dev/null && wait "$BYSTANDER"
	seckill_configure "RESET seckill.redis_cluster" "RESET seckill.redis_port" >/dev/null 2>&1
	seckill_cluster_stop "$work"
	[ -n "$SALE_WORK" ] && rm -rf "$SALE_WORK"
	[ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
finish() { done_testing_with_logs 15 "$work"/*/log; }
# owner key: the port of the master holding key
owner() {
	local port
	for port in "${masters[@]}"; do
		[ "$(rcli "$port" EXISTS "$1")" = 1 ] && echo "$port" && return
	done
	echo none
}
# keys_on port: how many of seckill's keys that master holds
keys_on() { rcli "$1" --scan --pattern "$prefix:*" | wc -l; }
# asked port: the purchases sent to that master, run or refused (TRYAGAIN
# while some of their keys are still missing there)
asked() {
	rcli "$1" INFO commandstats | tr -d '\r' |
		sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*rejected_calls=\([0-9]*\),.*/\1 \2/p' |
		awk '{ n = $1 + $2 } END { print n + 0 }'
}
error_count() { # error_count since [until]
	psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'error' AND at >= '$1'
		AND at < coalesce(nullif('${2:-}', ''), 'infinity')::timestamptz"
}
# unreachable_only name since: every call failed since then failed as Redis
# unreachable (08006), none with another error
unreachable_only() {
	is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'error' AND at >= '$2'
		AND err NOT LIKE '08006 %'")" 0 "$1: every failed call was told Redis could not be reached (08006)"
}

ports_free SECKILL_CLUSTER_PORT "${nodes[@]}" $((base + 10)) $((base + 11)) $((base + 12)) $((base + 13)) $((base + 14)) \
	$((base + 15))

# role port: master or slave
role() { rcli "$1" ROLE 2>/dev/null | head -1; }
# replica_of port: the port of that master's replica
replica_of() {
	rcli "$1" CLUSTER REPLICAS "$(rcli "$1" CLUSTER MYID)" | head -1 | sed 's/^[^ ]* [^:]*:\([0-9]*\)@.*/\1/'
}

# The cluster: three masters, the slots split evenly, a replica each
seckill_cluster_create "$work" 1 "${nodes[@]}"
for port in "${nodes[@]}"; do
	[ "$(role "$port")" = master ] && masters+=("$port")
done
ok "[ ${#masters[@]} -eq 3 ] && [ \$(rcli ${nodes[0]} CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_known_nodes://p') = 6 ]" \
	"a Redis Cluster of three masters on ports ${masters[*]}, and their replicas" || finish

# slot_owner slot: the port of the master serving it, as the master on port
# $other says
slot_owner() {
	rcli "$other" CLUSTER NODES | awk -v s="$1" '$3 ~ /master/ && $3 !~ /fail/ {
		for (i = 9; i <= NF; i++) {
			n = split($i, r, "-")
			if ($i !~ /^\[/ && s + 0 >= r[1] + 0 && s + 0 <= r[n] + 0) { split($2, a, "[:@]"); print a[2]; exit }
		}
	}'
}
# next_id_on port: make the next campaign id one whose slot that master
# serves (the ids skipped are never used)
next_id_on() {
	local next
	for _ in $(seq 1 50); do
		next=$(psql_val "SELECT last_value + 1 FROM seckill.campaigns_id_seq")
		[ "$(slot_owner "$(rcli "$1" CLUSTER KEYSLOT "$prefix:{c:$next}:meta")")" = "$1" ] && return
		psql_val "SELECT nextval('seckill.campaigns_id_seq')" >/dev/null
	done
}
# The seed is a master that does not hold seckill's own keys (the epoch and
# the order ids), so that section 5 can kill it with the others selling on;
# other is the one that holds them
other=${masters[0]}
other=$(slot_owner "$(rcli "$other" CLUSTER KEYSLOT "$prefix:{$prefix}:epoch")")
for port in "${masters[@]}"; do
	[ "$port" != "$other" ] && seed=$port && break
done

mark=$(wc -c <"$log")
seckill_configure "SET seckill.redis_cluster = on" "SET seckill.redis_port = $seed"
ok "[ $? -eq 0 ]" "the worker is given a master as its seed" || finish
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"
psql_val "ALTER TABLE stampede_answers ADD COLUMN at timestamptz DEFAULT clock_timestamp()"

# 1. Campaigns: one of 6 shards, then campaigns of 1,000 until every master
#    holds one (their slots follow from their ids)
goods=cluster-$$
shards=6
is "$(psql_val "SELECT seckill_campaign_create('$goods-1', 6000) > 0")" t "a campaign of 6,000 created" || finish
is "$(psql_val "SELECT seckill_campaign_set('$goods-1', '{\"shards\": $shards}')->>'shards'")" $shards \
	"its stock split into $shards shards" || finish
is "$(psql_val "SELECT seckill_preheat('$goods-1')")" 6000 "preheated on the cluster" || finish
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods-1'")
ok "[ $(logged "$mark" "connected to the Redis Cluster of 127.0.0.1:$seed: 3 masters") -gt 0 ]" \
	"the server log says the worker found the cluster's 3 masters"
shard_homes=
for s in $(seq 0 $((shards - 1))); do
	shard_homes+="$(owner "$prefix:{c:$cid:$s}:meta") "
done
ok "! grep -q none <<<'$shard_homes'" "every shard is on the master of its slot: ${shard_homes% }"
count=1
homes=" "
while [ $count -lt 40 ] && [ "$(wc -w <<<"$homes")" -lt 3 ]; do
	count=$((count + 1))
	psql_val "SELECT seckill_campaign_create('$goods-$count', 1000)" >/dev/null
	psql_val "SELECT seckill_preheat('$goods-$count')" >/dev/null
	id=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods-$count'")
	home=$(owner "$prefix:{c:$id}:meta")
	[[ $homes == *" $home "* ]] || homes+="$home "
done
ok "[ $(wc -w <<<"$homes") -eq 3 ] && ! grep -q none <<<'$homes'" \
	"$((count - 1)) campaigns of 1,000 preheated, on the masters$homes"
total=$((6000 + (count - 1) * 1000))

cat >"$work/sell.sql" <<SQL
\set u random(1, 40000)
\set g random(1, $count)
SELECT try_buy('user-' || :u, '$goods-' || :g) FROM crowd_on('sell');
SQL
started=$(date +%s)
sold_on_cluster() { psql_val "SELECT sum(sold) FROM seckill.campaigns WHERE goods LIKE '$goods-%'"; }
sell_until sold_on_cluster $total "$work/sell.sql" 64
crowd_stopped sell "$work/sell.out"
diag "sold $(sold_on_cluster) items of $total on $count campaigns in $(($(date +%s) - started)) s: $(answers '-infinity')"
is "$(error_count '-infinity')" 0 "every call answered without an error" || diag "$(errors '-infinity')"
is "$(psql_val "SELECT string_agg(goods, ' ') FROM seckill.campaigns c WHERE goods LIKE '$goods-%' AND NOT (
	c.sold = c.total_stock AND c.sold = (SELECT coalesce(sum(qty), 0) FROM seckill.orders o
		WHERE o.campaign_id = c.id AND o.status <> 'cancelled'))")" "" "no oversell: every campaign's orders = sold = stock"
is "$(psql_val "SELECT count(*) FROM (SELECT 1 FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods LIKE '$goods-%' AND o.status <> 'cancelled' GROUP BY o.campaign_id, o.user_id HAVING count(*) > 1) d")" 0 \
	"nobody bought any campaign twice"
is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok' AND NOT EXISTS (SELECT 1
	FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id AND o.status <> 'cancelled')")" 0 \
	"every ok answer has its committed order"
is "$(psql_val "SELECT count(*) FROM seckill.campaigns c, seckill_status(c.goods) s
	WHERE c.goods LIKE '$goods-%' AND NOT (s.redis_stock = 0 AND s.in_flight = 0 AND s.redis_buyers = c.sold)")" 0 \
	"seckill_status: every campaign's stock is 0 in Redis, its journal empty, a buyer per order"
shard_stock=
for s in $(seq 0 $((shards - 1))); do
	shard_stock+="$(rcli "$(owner "$prefix:{c:$cid:$s}:meta")" HGET "$prefix:{c:$cid:$s}:meta" stock) "
done
is "$shard_stock" "0 0 0 0 0 0 " "every shard sold to its last item, lending across masters"
for port in "${masters[@]}"; do
	ok "[ $(keys_on "$port") -gt 0 ]" "the master on port $port holds $(keys_on "$port") of seckill's keys"
done
is "$(psql_val "SELECT count(*) || ' ' || bool_and(connected) || ' ' || sum(slots) || ' ' || bool_and(round_trips > 0)
	FROM seckill.redis_nodes")" "3 true 16384 true" "seckill.redis_nodes: three masters reached, serving the 16384 slots, each used"
is "$(psql_val "SELECT string_agg(split_part(redis_node, ':', 2), ' ' ORDER BY shard) || ' '
	FROM seckill_campaign_nodes('$goods-1')")" "$shard_homes" "seckill_campaign_nodes names the master of each shard"

# A waiting room on the cluster: its line in PostgreSQL, its purchases
# through the masters of its 4 shards
room="$goods-room"
psql_val "SELECT seckill_campaign_create('$room', 4)" >/dev/null
psql_val "SELECT seckill_campaign_set('$room', '{\"shards\": 4, \"queue\": {\"admit_factor\": 1}}')" >/dev/null
psql_val "SELECT seckill_preheat('$room')" >/dev/null
for i in $(seq 1 10); do psql_val "SELECT state FROM seckill_queue_join('room-$i', '$room')" >/dev/null; done
seckill_wait_for "[ \"\$(psql_val \"SELECT state FROM seckill_queue_status('room-4', '$room')\")\" = admitted ]" 10
ok "[ $? -eq 0 ]" "a waiting room on the cluster admits the first 4 of its line (4 items, a pass an item)"
room_answers=""
for i in 5 1 2 3 4; do room_answers+="$(psql_val "SELECT status FROM seckill_buy('room-$i', '$room')") "; done
is "$room_answers" "not_admitted ok ok ok ok " "the fifth in line has no pass; the first 4 buy through the masters"

# 2. Locks: 30 names, spread over the masters by their slots
locks() { # locks "condition on name": how many of the 30 names meet it
	echo "SELECT count(*) FROM (SELECT 'cluster-lock-' || i AS name FROM generate_series(1, 30) i) l WHERE $1;"
}
session_hold "$(locks "seckill_lock(name) IS NOT NULL")"
is "$(head -1 "$SESSION_OUT")" 30 "30 SQL locks taken in one session"
lock_homes=
for port in "${masters[@]}"; do
	lock_homes+="$(rcli "$port" --scan --pattern "$prefix:{lock:cluster-lock-*" | wc -l) "
done
ok "! grep -qw 0 <<<'$lock_homes'" "the locks live on every master: ${lock_homes% }"
is "$(psql_val "$(locks "seckill_lock(name) IS NULL")")" 30 "another session is refused each of them"
session_end "$(locks "seckill_unlock(name)")"
is "$(tail -1 "$SESSION_OUT")" 30 "their holder releases them all"
is "$(psql -XAtq -c "$(locks "seckill_lock(name) IS NOT NULL")" -c "$(locks "seckill_unlock(name)")" | paste -sd/)" \
	30/30 "then another session takes and releases them all"
# all or none across the masters
all="(SELECT array_agg('cluster-lock-' || i ORDER BY i) FROM generate_series(1, 30) i)"
session_hold "SELECT seckill_lock('cluster-lock-17') IS NOT NULL;"
is "$(psql -XAtq -c "SELECT seckill_lock_all($all) IS NULL" \
	-c "SELECT count(*) FROM seckill.locks WHERE owner_pid = pg_backend_pid()" | paste -sd/)" t/0 \
	"seckill_lock_all of the 30 names while another session holds one of them: NULL, none held"
session_end "SELECT seckill_unlock('cluster-lock-17');"
is "$(psql -XAtq -c "SELECT array_length(seckill_lock_all($all), 1)" \
	-c "SELECT count(*) FROM seckill.locks WHERE owner_pid = pg_backend_pid() AND state = 'held'" \
	-c "SELECT seckill_unlock_all($all)" | paste -sd/)" 30/30/t \
	"once it is free, all 30 on every master taken as one, and released"

# 3. A slot moved mid-sale, phase by phase
sale_begin "$goods-move" 40000
psql_val "ALTER TABLE stampede_answers ADD COLUMN at timestamptz DEFAULT clock_timestamp()"
key="$prefix:{c:$SALE_CID}:meta"
slot=$(rcli "${masters[0]}" CLUSTER KEYSLOT "$key")
src=$(owner "$key")
for port in "${masters[@]}"; do
	[ "$port" != "$src" ] && dst=$port && break
done
src_id=$(rcli "$src" CLUSTER MYID)
dst_id=$(rcli "$dst" CLUSTER MYID)
sale_crowd until move 30000 64 2000
CROWD=$SALE_CROWD
seckill_wait_for "[ \$(oks_since '-infinity') -ge 2000 ]" 30
ok "[ $? -eq 0 ]" "move: the sale of campaign $SALE_CID (slot $slot, on port $src) is under way" || finish
t0=$(pg_now)
rcli "$dst" CLUSTER SETSLOT "$slot" IMPORTING "$src_id" >/dev/null
rcli "$src" CLUSTER SETSLOT "$slot" MIGRATING "$dst_id" >/dev/null
seckill_wait_for "[ \$(oks_since '$t0') -ge 500 ] || [ \$(error_count '$t0') -gt 0 ]" 3
t1=$(pg_now)
moved=0
while keys=$(rcli "$src" CLUSTER GETKEYSINSLOT "$slot" 1) && [ -n "$keys" ]; do
	[ "$(rcli "$src" MIGRATE 127.0.0.1 "$dst" "" 0 5000 KEYS $keys)" = OK ] && moved=$((moved + 1))
	before=$(psql_val "SELECT count(*) FROM stampede_answers")
	seckill_wait_for "[ \$(psql_val 'SELECT count(*) FROM stampede_answers') -ge $((before + 500)) ]" 3
done
t2=$(pg_now)
calls=$(asked "$dst")
seckill_wait_for "[ \$(asked $dst) -ge $((calls + 300)) ]" 5
ok "[ $? -eq 0 ]" "move: $moved keys migrated; the worker follows ASK to the new master"
t3=$(pg_now)
for port in "${masters[@]}"; do
	rcli "$port" CLUSTER SETSLOT "$slot" NODE "$dst_id" >/dev/null
done
seckill_wait_for "[ \$(oks_since '$t3') -ge 2000 ]" 15
ok "[ $? -eq 0 ]" "move: slot $slot given to port $dst (MOVED), sales go on"
t4=$(pg_now)
diag "move: before $(answers '-infinity' "$t0")" "move: importing/migrating $(answers "$t0" "$t1")" \
	"move: keys migrating $(answers "$t1" "$t2")" "move: ASK $(answers "$t2" "$t3")" "move: MOVED $(answers "$t3" "$t4")"
is "$(error_count "$t0" "$t4")" 0 "move: no call failed in any phase" || diag "move: $(errors "$t0")"
is "$(owner "$key")" "$dst" "move: the campaign is on port $dst now"
is "$(psql_val "SELECT redis_node FROM seckill_campaign_nodes('$goods-move')")" "127.0.0.1:$dst" \
	"move: seckill_campaign_nodes follows the MOVED answers to port $dst"

# 4. The worker's connection to the slot's new master killed: it drops them
#    all, comes back through the seed, learns the slot's new home from
#    CLUSTER SLOTS and replays its journal there
t5=$(pg_now)
mark=$(wc -c <"$log")
killed=$(rcli "$dst" CLIENT KILL TYPE normal SKIPME yes)
ok "[ $killed -ge 1 ]" "drop: the worker's connection to port $dst killed"
seckill_wait_for "[ \$(oks_since '$t5') -ge 2000 ]" 15
ok "[ $? -eq 0 ]" "drop: sales go on"
crowd_end move
diag "drop: $(answers "$t5"), errors: $(errors "$t5")"
ok "[ $(error_count "$t5") -le 64 ]" "drop: at most the calls in flight failed ($(error_count "$t5"))"
unreachable_only drop "$t5"
is "$(logged "$mark" 'MOVED|ASK|TRYAGAIN|CLUSTERDOWN')" 0 "drop: the server log shows no redirection error"
sale_finish

# 5. The seed's master killed (SIGKILL) mid-sale, with the campaign on it:
#    the worker finds the cluster through the other masters it knew, and
#    while the killed one is down, a campaign on another master sells on;
#    its replica is promoted, and the campaigns are rebuilt for the new set
#    of masters
replica=$(replica_of "$seed")
# under_way name: a crowd of 64 connections, 1,000 calls/s until its end, and the
# sale under way; since, mark and comp taken before it
under_way() {
	since=$(pg_now)
	mark=$(wc -c <"$log")
	comp=$(compensations)
	sale_crowd until "$1" 30000 64 1000
	CROWD=$SALE_CROWD
	seckill_wait_for "[ \$(oks_since '$since') -ge 1000 ]" 30
	ok "[ $? -eq 0 ]" "$1: the sale is under way" || finish
}
# the bystander: a campaign on another master, its answers in a table of their own
next_id_on "$other"
psql -Xq -v ON_ERROR_STOP=1 <<SQL
SET client_min_messages = warning;
DROP TABLE IF EXISTS bystander_answers;
CREATE TABLE bystander_answers (status text, err text, at timestamptz DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION bystander_buy(u text, g text) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
	INSERT INTO bystander_answers (status) SELECT b.status FROM seckill_buy(u, g) b;
EXCEPTION WHEN OTHERS THEN
	INSERT INTO bystander_answers (status, err) VALUES ('error', SQLSTATE || ' ' || SQLERRM);
END
\$\$;
SELECT seckill_campaign_create('$goods-bystander', 1000000) \g /dev/null
SELECT seckill_preheat('$goods-bystander') \g /dev/null
SQL
is "$(owner "$prefix:{c:$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods-bystander'")}:meta")" "$other" \
	"kill: a bystander campaign on port $other"
cat >"$work/bystander.sql" <<SQL
\set u random(1, 1000000000)
SELECT bystander_buy('bystander-' || :u, '$goods-bystander') FROM crowd_on('bystander');
SQL
crowd_stoppable bystander
bystander() { # bystander status since [until]
	psql_val "SELECT count(*) FROM bystander_answers WHERE status = '$1' AND at >= '$2'
		AND at < coalesce(nullif('${3:-}', ''), 'infinity')::timestamptz"
}
next_id_on "$seed"
sale_begin "$goods-failover" 40000
psql_val "ALTER TABLE stampede_answers ADD COLUMN at timestamptz DEFAULT clock_timestamp()"
is "$(owner "$prefix:{c:$SALE_CID}:meta")" "$seed" "kill: campaign $SALE_CID is on the seed, port $seed (its replica: $replica)"
under_way kill
pgbench -n -c 16 -j 2 -R 500 -T 900 -f "$work/bystander.sql" >"$work/bystander.out" 2>&1 &
BYSTANDER=$!
seckill_wait_for "[ \$(bystander ok '$since') -ge 200 ]" 10
kill -KILL "$(cat "$work/redis-$seed/pid")"
killed=$(pg_now)
started=$(seckill_now_ms)
seckill_wait_for "[ \"\$(psql_val \"SELECT connected FROM seckill.redis_nodes WHERE node = '127.0.0.1:$seed'\")\" = f ]" 5
ok "[ $? -eq 0 ]" "kill: seckill.redis_nodes shows port $seed unreached: $(psql_val "SELECT error FROM seckill.redis_nodes
	WHERE node = '127.0.0.1:$seed'")"
seckill_wait_for "[ \"\$(role $replica)\" = master ] && seckill_cluster_ok $other" 20
ok "[ $? -eq 0 ]" "kill: the seed's master killed, its replica promoted ($(($(seckill_now_ms) - started)) ms)" || finish
promoted=$(pg_now)
resumed kill "$replica"
crowd_stop bystander
wait "$BYSTANDER"
BYSTANDER=
crowd_stopped bystander "$work/bystander.out"
diag "kill: the bystander's answers while the master was down: $(psql_val "SELECT coalesce(string_agg(status || ' '
	|| n, ', '), 'none') FROM (SELECT status, count(*) n FROM bystander_answers WHERE at >= '$killed'
	AND at < '$promoted' GROUP BY 1 ORDER BY 1) s")"
ok "[ $(bystander ok "$(psql_val "SELECT '$killed'::timestamptz + interval '1 second'")" "$promoted") -ge 100 ]" \
	"kill: the bystander campaign on port $other sold while the killed master was down"
ok "[ $(bystander error "$killed") -le 16 ]" \
	"kill: of the bystander's calls at most those in flight at the kill failed ($(bystander error "$killed"))" ||
	diag "$(psql_val "SELECT string_agg(n || ' x ' || err, '; ') FROM (SELECT left(err, 150) err, count(*) n
		FROM bystander_answers WHERE status = 'error' GROUP BY 1 ORDER BY 2 DESC LIMIT 3) s")"
ok "[ $(logged "$mark" "cannot reach the master 127.0.0.1:$seed of the Redis Cluster") -gt 0 ]" \
	"kill: the server log names the master it cannot reach"
after kill "$since" "$mark" "$replica" "$comp"
unreachable_only kill "$since"
ok "[ $(logged "$mark" "connected to the Redis Cluster of 127.0.0.1:$seed through 127.0.0.1:") -gt 0 ]" \
	"kill: the worker reached the cluster through another master than its seed"

# 6. The killed node back, empty: it rejoins as the replica of its successor;
#    then CLUSTER FAILOVER makes it the master again, mid-sale
seckill_cluster_node_start "$work/redis-$seed" "$seed"
seckill_wait_for "replicates $seed $replica" 30
ok "[ $? -eq 0 ]" "failover: the killed node restarted as a replica of port $replica" || finish
under_way failover
is "$(rcli "$seed" CLUSTER FAILOVER)" OK "failover: CLUSTER FAILOVER on port $seed"
started=$(seckill_now_ms)
seckill_wait_for "[ \"\$(role $seed)\" = master ]" 20
ok "[ $? -eq 0 ]" "failover: port $seed is the master again ($(($(seckill_now_ms) - started)) ms)" || finish
resumed failover "$seed"
after failover "$since" "$mark" "$seed" "$comp"
unreachable_only failover "$since"
sale_finish
finish
