#!/usr/bin/env bash
# Storefront reads: seckill.storefront tells each goods' state, countdown and
# remaining stock in seckill_buy's words, read in the caller's backend with
# the worker frozen.  Under a sale by 64 sessions, a reader polling it sees
# the stock only go down, never below zero, and no state seckill_buy would
# not answer; at the end it says sold_out with nothing left, as seckill_buy
# does; a cancel puts the goods back on sale there too; a close takes its
# row away.
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

psql_val "SELECT seckill_campaign_create('$soon', 10, now() + interval '1 hour')" >/dev/null
is "$(front "$soon" "state || ' ' || remaining || ' ' || total_stock")" "not_started 10 10" \
	"a draft campaign: not_started, all of its stock remaining"
psql_val "SELECT seckill_preheat('$soon')" >/dev/null
is "$(front "$soon" "state || ' ' || (starts_in BETWEEN interval '59 minutes' AND interval '1 hour')")" \
	"not_started true" "preheated, starting in an hour: not_started, counting down"
is "$(psql_val "SELECT status FROM seckill_buy('early-bird', '$soon')")" not_started "as seckill_buy answers"

psql_val "SELECT seckill_campaign_create('$past', 10, now() - interval '2 hours', now() - interval '1 hour')" >/dev/null
is "$(front "$past" "state || ' ' || starts_in")" "ended 00:00:00" "a campaign past its end: ended"
is "$(psql_val "SELECT count(*) FROM seckill.storefront WHERE goods = 'no-such-goods-$run'")" 0 \
	"no row for goods without a campaign"

psql_val "SELECT seckill_campaign_create('$live', $stock)" >/dev/null
psql_val "SELECT seckill_preheat('$live')" >/dev/null
is "$(front "$live" "state || ' ' || remaining")" "on_sale $stock" "preheated and started: on_sale, $stock left"

# read without the worker: frozen, it answers nothing, the storefront still does
worker=$(seckill_worker_pid)
kill -STOP "$worker"
frozen=$(PGOPTIONS='-c statement_timeout=2s' psql -XAtq -c "SELECT state FROM seckill.storefront WHERE goods = '$live'" 2>&1)
kill -CONT "$worker"
is "$frozen" on_sale "read while the worker is frozen"

# the sale: 64 sessions buy for 1,000 users while one polls the storefront
/usr/bin/python3 - "$live" "$PGPORT" "$out" <<'PY' >"$out/python.log" 2>&1
import sys, threading
import psycopg

goods, port, out = sys.argv[1], sys.argv[2], sys.argv[3]
users, sessions = 1000, 64
done = threading.Event()
answers = open(out + "/answers", "w")
seen = open(out + "/seen", "w")
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
polls=$(wc -l <"$out/seen")
ok "[ $polls -ge 10 ]" "the reader polled during the sale ($polls reads)"
is "$(awk '$1 != "on_sale" && $1 != "sold_out"' "$out/seen" | wc -l)" 0 "it saw only on_sale and sold_out"
is "$(awk '$2 < 0 || $2 > '"$stock"' || ($1 == "sold_out") != ($2 == 0)' "$out/seen" | wc -l)" 0 \
	"remaining within 0..$stock, and 0 exactly when sold_out"
is "$(awk 'NR > 1 && $2 > last { n++ } { last = $2 } END { print n + 0 }' "$out/seen")" 0 \
	"remaining never went up"
ok "[ \$(awk '\$1 == \"on_sale\" && \$2 < $stock && \$2 > 0' '$out/seen' | wc -l) -gt 0 ]" \
	"it saw the stock go down while on sale"
is "$(front "$live" "state || ' ' || remaining")" "sold_out 0" "after the sale: sold_out, nothing remaining"
is "$(psql_val "SELECT status FROM seckill_buy('latecomer', '$live')")" sold_out "as seckill_buy answers"
is "$(psql_val "SELECT c.total_stock - count(o.id) FROM seckill.campaigns c JOIN seckill.orders o ON o.campaign_id = c.id
	AND o.status <> 'cancelled' WHERE c.goods = '$live' GROUP BY c.id")" 0 "and PostgreSQL holds $stock orders"

# a cancel puts one back on sale, on the storefront as for seckill_buy
order=$(awk '$1 == "ok" { print $2; exit }' "$out/answers")
psql_val "SELECT seckill_cancel($order)" >/dev/null
# (in a subshell: a time-out ends it, and the check below tells)
(seckill_wait_for "[ \"\$(front '$live' \"state || ' ' || remaining\")\" = 'on_sale 1' ]" 10)
is "$(front "$live" "state || ' ' || remaining")" "on_sale 1" "a cancel: on_sale again, 1 remaining"
is "$(psql_val "SELECT status FROM seckill_buy('second-chance', '$live')")" ok "and seckill_buy sells it"

psql_val "SELECT seckill_close('$live')" >/dev/null
is "$(front "$live" "count(*)")" 0 "closed: no row, as for goods without a campaign"
psql_val "SELECT seckill_campaign_create('$live', 5, now() + interval '1 day')" >/dev/null
is "$(front "$live" "state || ' ' || remaining || ' ' || (campaign_id = (SELECT max(id) FROM seckill.campaigns))")" \
	"not_started 5 true" "a new campaign of the same goods: its row"

# who may read it: a role granted the view (and the schema's USAGE) only
psql_val "DROP ROLE IF EXISTS storefront_reader; CREATE ROLE storefront_reader;
	GRANT USAGE ON SCHEMA seckill TO storefront_reader; GRANT SELECT ON seckill.storefront TO storefront_reader" >/dev/null
is "$(psql_val "SET ROLE storefront_reader; SELECT state FROM seckill.storefront WHERE goods = '$soon'")" not_started \
	"a role granted SELECT on the view reads it"
ok "! psql_val 'SET ROLE storefront_reader; SELECT 1 FROM seckill.campaigns' 2>/dev/null" \
	"and not seckill.campaigns"
psql_val "REVOKE ALL ON seckill.storefront FROM storefront_reader; REVOKE USAGE ON SCHEMA seckill FROM storefront_reader;
	DROP ROLE storefront_reader" >/dev/null
psql_val "SELECT seckill_close('$soon')" >/dev/null
psql_val "SELECT seckill_close('$live')" >/dev/null
psql_val "SELECT seckill_close('$past')" >/dev/null
done_testing
