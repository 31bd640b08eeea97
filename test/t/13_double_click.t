#!/usr/bin/env bash
# A double click: the same user buys twice at once, from two sessions, so
# that both calls reach the worker in one round or in two rounds back to
# back.  One is told ok, the other duplicate with the id of that very order,
# durable and readable at once: the worker answers a duplicate only after
# the reservation that made the user a buyer is committed.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

goods="double-click-$(date +%s)-$$"
users=150
out=$(mktemp)
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
is "$(psql_val "SELECT seckill_campaign_create('$goods', 1000) > 0")" t "a campaign of 1000"
is "$(psql_val "SELECT seckill_preheat('$goods')")" 1000 "preheated"

# 16 pairs of sessions; each pair buys for one user at a time, both at once
/usr/bin/python3 - "$goods" "$users" "$PGPORT" >"$out" 2>&1 <<'PY'
import sys, threading
import psycopg

goods, users, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pairs = 16
lock = threading.Lock()

def pair(p):
    barrier = threading.Barrier(2)
    def click(side):
        conn = psycopg.connect(host="127.0.0.1", port=port, dbname="postgres", user="postgres", autocommit=True)
        for u in range(p, users, pairs):
            user = "dc-%d" % u
            barrier.wait()
            try:
                status, order_id = conn.execute("SELECT status, order_id FROM seckill_buy(%s, %s)",
                                                (user, goods)).fetchone()
                line = "%s %s %s" % (user, status, order_id if order_id is not None else "-")
            except psycopg.Error as e:
                line = "%s error %s" % (user, e.sqlstate)
            with lock:
                print(line, flush=True)
        conn.close()
    ts = [threading.Thread(target=click, args=(s,)) for s in (0, 1)]
    for t in ts: t.start()
    for t in ts: t.join()

threads = [threading.Thread(target=pair, args=(p,)) for p in range(pairs)]
for t in threads: t.start()
for t in threads: t.join()
PY
ok "[ $? -eq 0 ]" "$((users * 2)) calls by $users users, two at once each"
is "$(wc -l <"$out")" $((users * 2)) "every call answered"
is "$(awk '$2 == "ok"' "$out" | wc -l)" "$users" "one ok per user"
is "$(awk '$2 == "duplicate"' "$out" | wc -l)" "$users" "one duplicate per user"
is "$(awk '$2 == "duplicate" && $3 == "-"' "$out" | wc -l)" 0 "every duplicate names an order"
# the duplicate names the order of the ok answer to the same user
is "$(awk '$2 == "ok" { ok[$1] = $3 } $2 == "duplicate" { dup[$1] = $3 }
	END { n = 0; for (u in dup) if (dup[u] != ok[u]) n++; print n }' "$out")" 0 \
	"each duplicate names the order its user was told ok for"
is "$(psql_val "SELECT count(*) FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = '$goods' AND o.status <> 'cancelled'")" "$users" "$users orders committed"
grep -v -e ' ok ' -e ' duplicate ' "$out" | head -5 | while read -r line; do diag "other answer: $line"; done
psql_val "SELECT seckill_close('$goods')" >/dev/null
rm -f "$out"
done_testing
