#!/usr/bin/env bash
# Storefront reads: seckill.storefront and seckill_storefront(goods) tell
# each goods' state, countdown and remaining stock in seckill_buy's words,
# read in the caller's backend with the worker frozen; the function answers
# a preheated campaign without reading seckill.campaigns.  Under a sale by 64
# sessions, a reader polling both sees the stock only go down, never below
# zero, and no state seckill_buy would not answer; at the end they say
# sold_out with nothing left, as seckill_buy does; a cancel puts the goods
# back on sale there too; a close takes its row away.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

run=$(date +%s)-$$
soon=storefront-soon-$run
live=storefront-live-$run
past=storefront-past-$run
stock=300
out=$(mktemp -d -p "$SECKILL_TMP")
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null

front() { # goods columns
	psql_val "SELECT $2 FROM seckill.storefront WHERE goods = '$1'"
}
fn() { # goods columns
	psql_val "SELECT $2 FROM seckill_storefront('$1')"
}
# the view and both functions agree on every column (the countdown: whether it runs)
same() { # goods description
	local cols="goods, campaign_id, state, starts_at, ends_at, starts_in > interval '0', total_stock, remaining"
	local view
	view=$(front "$1" "$cols")
	is "$(fn "$1" "$cols")" "$view" "$2: seckill_storefront() agrees with the view"
	is "$(psql_val "SELECT j->>'goods', (j->>'campaign_id')::bigint, j->>'state', c.starts_at, c.ends_at,
		(j->>'starts_in_seconds')::numeric > 0, (j->>'total_stock')::int, (j->>'remaining')::int
		FROM (SELECT seckill_storefront_json('$1')::jsonb AS j) s JOIN seckill.campaigns c ON c.id = (j->>'campaign_id')::bigint")" \
		"$view" "$2: and so does seckill_storefront_json()"
}
# how often this transaction scanned seckill.campaigns, after reading the function
scans() { # goods
	psql_val "BEGIN; SELECT count(*) FROM seckill_storefront('$1');
		SELECT pg_stat_get_xact_numscans('seckill.campaigns'::regclass); COMMIT" | sed -n 2p
}

psql_val "SELECT seckill_campaign_create('$soon', 10, now() + interval '1 hour')" >/dev/null
is "$(front "$soon" "state || ' ' || remaining || ' ' || total_stock")" "not_started 10 10" \
	"a draft campaign: not_started, all of its stock remaining"
same "$soon" "a draft"
ok "[ \"\$(scans '$soon')\" -gt 0 ]" "a draft is read from seckill.campaigns"
psql_val "SELECT seckill_preheat('$soon')" >/dev/null
is "$(front "$soon" "state || ' ' || (starts_in BETWEEN interval '59 minutes' AND interval '1 hour')")" \
	"not_started true" "preheated, starting in an hour: not_started, counting down"
is "$(psql_val "SELECT status FROM seckill_buy('early-bird', '$soon')")" not_started "as seckill_buy answers"
same "$soon" "preheated, not started"
is "$(scans "$soon")" 0 "a preheated campaign is read from shared memory alone"
ok "[ \"\$(psql_val \"SELECT (seckill_storefront_json('$soon')::jsonb->>'starts_in_seconds')::numeric BETWEEN 3540 AND 3600\")\" = t ]" \
	"seckill_storefront_json(): the countdown in seconds"
is "$(psql_val "SELECT seckill_storefront_json('$soon')::jsonb->'ends_in_seconds'")" null "a sale without end: ends_in_seconds null"

psql_val "SELECT seckill_campaign_create('$past', 10, now() - interval '2 hours', now() - interval '1 hour')" >/dev/null
is "$(front "$past" "state || ' ' || starts_in")" "ended 00:00:00" "a campaign past its end: ended"
same "$past" "ended"
is "$(psql_val "SELECT count(*) FROM seckill.storefront WHERE goods = 'no-such-goods-$run'")" 0 \
	"no row for goods without a campaign"
is "$(fn "no-such-goods-$run" "count(*)")" 0 "nor from seckill_storefront()"
is "$(psql_val "SELECT seckill_storefront_json('no-such-goods-$run') IS NULL")" t "and NULL from seckill_storefront_json()"
is "$(psql_val "SELECT seckill_storefront_json('$past')::jsonb->>'ends_in_seconds'")" 0.000 "a sale past its end ends in 0 seconds"
is "$(psql_val "SELECT * FROM seckill_storefront(NULL)" 2>&1)" "ERROR:  goods must not be null" "a null goods: an error"
is "$(psql_val "SELECT * FROM seckill_storefront('')" 2>&1)" "ERROR:  goods must not be empty" "an empty goods: an error"

psql_val "SELECT seckill_campaign_create('$live', $stock)" >/dev/null
psql_val "SELECT seckill_preheat('$live')" >/dev/null
is "$(front "$live" "state || ' ' || remaining")" "on_sale $stock" "preheated and started: on_sale, $stock left"
same "$live" "on sale"

# read without the worker: frozen, it answers nothing, the storefront still does
worker=$(seckill_worker_pid)
kill -STOP "$worker"
frozen=$(PGOPTIONS='-c statement_timeout=2s' psql -XAtq -c "SELECT state FROM seckill.storefront WHERE goods = '$live'" \
	-c "SELECT state FROM seckill_storefront('$live')" 2>&1)
kill -CONT "$worker"
is "$(echo $frozen)" "on_sale on_sale" "read while the worker is frozen, both ways"

# stock split into 8 shards: the function sums what the worker saw of each
sharded=storefront-sharded-$run
psql_val "SELECT seckill_campaign_create('$sharded', 40)" >/dev/null
psql_val "SELECT seckill_campaign_set('$sharded', '{\"shards\": 8}')" >/dev/null
psql_val "SELECT seckill_preheat('$sharded')" >/dev/null
for u in $(seq 1 13); do psql_val "SELECT status FROM seckill_buy('shard-buyer-$u', '$sharded')"; done >"$out/sharded"
is "$(sort "$out/sharded" | uniq -c | xargs)" "13 ok" "13 bought from a campaign of 8 shards"
is "$(fn "$sharded" "state || ' ' || remaining")" "on_sale 27" "seckill_storefront(): 27 left over 8 shards"
same "$sharded" "8 shards"
is "$(scans "$sharded")" 0 "read from shared memory alone"
psql_val "SELECT seckill_close('$sharded')" >/dev/null

# the sale: 64 sessions buy for 1,000 users while one polls the storefront
/usr/bin/python3 - "$live" "$PGPORT" "$out" <<'PY' >"$out/python.log" 2>&1
import sys, threading
import psycopg

goods, port, out = sys.argv[1], sys.argv[2], sys.argv[3]
users, sessions = 1000, 64
done = threading.Event()
answers = open(out + "/answers", "w")
seen = open(out + "/seen", "w")
seen_fn = open(out + "/seen_fn", "w")
seen_json = open(out + "/seen_json", "w")
lock = threading.Lock()

def connect():
    return psycopg.connect(host="127.0.0.1", port=port, dbname="postgres", user="postgres", autocommit=True)

def buyer(s):
    conn = connect()
    for u in range(s, users, sessions):
        status, order_id = conn.execute("SELECT status, order_id FROM seckill_buy(%s, %s)",
                                        ("sf-%d" % u, goods)).fetchone()
        with lock:
            print(status, order_id if order_id is not None else "-", file=answers)

def poller():
    conn = connect()
    while not done.is_set():
        state, remaining = conn.execute("SELECT state, remaining FROM seckill.storefront WHERE goods = %s",
                                        (goods,)).fetchone()
        print(state, remaining, file=seen)
        state, remaining = conn.execute("SELECT state, remaining FROM seckill_storefront(%s)",
                                        (goods,)).fetchone()
        print(state, remaining, file=seen_fn)
        j = conn.execute("SELECT seckill_storefront_json(%s)::jsonb", (goods,)).fetchone()[0]
        print(j["state"], j["remaining"], file=seen_json)

p = threading.Thread(target=poller)
p.start()
threads = [threading.Thread(target=buyer, args=(s,)) for s in range(sessions)]
for t in threads: t.start()
for t in threads: t.join()
done.set()
p.join()
PY
ok "[ $? -eq 0 ]" "1,000 users bought through 64 sessions while a reader polled" || diag "$(tail -20 "$out/python.log")"
is "$(awk '$1 == "ok"' "$out/answers" | wc -l)" "$stock" "$stock answered ok"
for what in seen seen_fn seen_json; do
	polls=$(wc -l <"$out/$what")
	ok "[ $polls -ge 10 ]" "$what: the reader polled during the sale ($polls reads)"
	is "$(awk '$1 != "on_sale" && $1 != "sold_out"' "$out/$what" | wc -l)" 0 "$what: only on_sale and sold_out"
	is "$(awk '$2 < 0 || $2 > '"$stock"' || ($1 == "sold_out") != ($2 == 0)' "$out/$what" | wc -l)" 0 \
		"$what: remaining within 0..$stock, and 0 exactly when sold_out"
	is "$(awk 'NR > 1 && $2 > last { n++ } { last = $2 } END { print n + 0 }' "$out/$what")" 0 \
		"$what: remaining never went up"
	ok "[ \$(awk '\$1 == \"on_sale\" && \$2 < $stock && \$2 > 0' '$out/$what' | wc -l) -gt 0 ]" \
		"$what: the stock went down while on sale"
done
is "$(front "$live" "state || ' ' || remaining")" "sold_out 0" "after the sale: sold_out, nothing remaining"
same "$live" "sold out"
is "$(psql_val "SELECT status FROM seckill_buy('latecomer', '$live')")" sold_out "as seckill_buy answers"
is "$(psql_val "SELECT c.total_stock - count(o.id) FROM seckill.campaigns c JOIN seckill.orders o ON o.campaign_id = c.id
	AND o.status <> 'cancelled' WHERE c.goods = '$live' GROUP BY c.id")" 0 "and PostgreSQL holds $stock orders"

# a cancel puts one back on sale, on the storefront as for seckill_buy
order=$(awk '$1 == "ok" { print $2; exit }' "$out/answers")
psql_val "SELECT seckill_cancel($order)" >/dev/null
# (in a subshell: a time-out ends it, and the check below tells)
(seckill_wait_for "[ \"\$(front '$live' \"state || ' ' || remaining\")\" = 'on_sale 1' ]" 10)
is "$(front "$live" "state || ' ' || remaining")" "on_sale 1" "a cancel: on_sale again, 1 remaining"
(seckill_wait_for "[ \"\$(fn '$live' \"state || ' ' || remaining\")\" = 'on_sale 1' ]" 10)
same "$live" "after a cancel"
is "$(psql_val "SELECT status FROM seckill_buy('second-chance', '$live')")" ok "and seckill_buy sells it"
psql_val "SELECT seckill_restock('$live', 2)" >/dev/null
is "$(fn "$live" "state || ' ' || remaining || ' ' || total_stock")" "on_sale 2 $((stock + 2))" \
	"a restock of 2: on_sale, 2 remaining of $((stock + 2))"
same "$live" "after a restock"

psql_val "SELECT seckill_close('$live')" >/dev/null
is "$(front "$live" "count(*)")" 0 "closed: no row, as for goods without a campaign"
is "$(fn "$live" "count(*)")" 0 "nor from seckill_storefront()"
psql_val "SELECT seckill_campaign_create('$live', 5, now() + interval '1 day')" >/dev/null
is "$(front "$live" "state || ' ' || remaining || ' ' || (campaign_id = (SELECT max(id) FROM seckill.campaigns))")" \
	"not_started 5 true" "a new campaign of the same goods: its row"
same "$live" "a new campaign of the same goods"

# who may read it: a role granted the view (and the schema's USAGE) only
psql_val "DROP ROLE IF EXISTS storefront_reader; CREATE ROLE storefront_reader;
	GRANT USAGE ON SCHEMA seckill TO storefront_reader; GRANT SELECT ON seckill.storefront TO storefront_reader" >/dev/null
is "$(psql_val "SET ROLE storefront_reader; SELECT state FROM seckill.storefront WHERE goods = '$soon'")" not_started \
	"a role granted SELECT on the view reads it"
ok "! psql_val 'SET ROLE storefront_reader; SELECT 1 FROM seckill.campaigns' 2>/dev/null" \
	"and not seckill.campaigns"
psql_val "REVOKE ALL ON seckill.storefront FROM storefront_reader; REVOKE USAGE ON SCHEMA seckill FROM storefront_reader" >/dev/null
ok "! psql_val \"SET ROLE storefront_reader; SELECT * FROM seckill_storefront('$soon')\" 2>/dev/null" \
	"nobody calls seckill_storefront() until granted"
ok "! psql_val \"SET ROLE storefront_reader; SELECT seckill_storefront_json('$soon')\" 2>/dev/null" \
	"nor seckill_storefront_json()"
# a role granted the functions alone: it reads a preheated campaign and a draft
psql_val "GRANT EXECUTE ON FUNCTION seckill_storefront(text), seckill_storefront_json(text) TO storefront_reader" >/dev/null
is "$(psql_val "SET ROLE storefront_reader; SELECT state FROM seckill_storefront('$soon')")" not_started \
	"a role granted EXECUTE on seckill_storefront() reads a preheated campaign"
is "$(psql_val "SET ROLE storefront_reader; SELECT state || ' ' || remaining FROM seckill_storefront('$live')")" "not_started 5" \
	"and a draft, read as the extension's owner"
is "$(psql_val "SET ROLE storefront_reader; SELECT seckill_storefront_json('$live')::jsonb->>'state'")" not_started \
	"as JSON too"
ok "! psql_val 'SET ROLE storefront_reader; SELECT 1 FROM seckill.campaigns' 2>/dev/null" \
	"but not seckill.campaigns"
psql_val "REVOKE ALL ON FUNCTION seckill_storefront(text), seckill_storefront_json(text) FROM storefront_reader;
	DROP ROLE storefront_reader" >/dev/null
psql_val "SELECT seckill_close('$soon')" >/dev/null
psql_val "SELECT seckill_close('$live')" >/dev/null
psql_val "SELECT seckill_close('$past')" >/dev/null
done_testing
