#!/usr/bin/env bash
# The group commit writes a round's orders without the foreign key's check
# row by row, since the round holds the campaign's row locked; it must keep
# every guarantee that key gave, under a 16-client sale each time:
# - a campaign a DBA closes (UPDATE ... SET state = 'closed') gets no order
#   after the close commits; one a DBA deletes, with its orders, gets none
#   at all, and no order anywhere names a campaign that is not there;
# - a trigger of the DBA's on seckill.orders (an audit) fires for every
#   order, and a foreign key of the DBA's (user_id to a table of customers)
#   refuses every purchase of a user who is not a customer; once both are
#   dropped, the sale goes on without them;
# - the rows are written as COPY writes them: a column a DBA adds with a
#   default gets it in every order, a CHECK of the DBA's refuses its row
#   alone, an expression index has every order, and a stored generated
#   column (written by an INSERT statement instead) is computed;
# - a campaign's sold is counted as an UPDATE would: a DBA's CHECK on
#   seckill.campaigns caps the sale exactly, a DBA's trigger on its UPDATE
#   (run by an UPDATE statement instead) fires for every count.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

work=$(mktemp -d)
SALE_WORK=$work # (the load is a crowd of sale.sh)
cleanup() {
	psql -Xq -c "ALTER TABLE seckill.orders DROP CONSTRAINT IF EXISTS orders_customer" \
		-c "DROP TRIGGER IF EXISTS orders_audit ON seckill.orders" -c "DROP FUNCTION IF EXISTS public.gc_audit()" \
		-c "DROP TABLE IF EXISTS public.gc_audit_log, public.gc_customers" \
		-c "DROP INDEX IF EXISTS seckill.orders_user_upper" \
		-c "DROP TRIGGER IF EXISTS campaigns_audit ON seckill.campaigns" -c "DROP FUNCTION IF EXISTS public.gc_sold_audit()" \
		-c "DROP TABLE IF EXISTS public.gc_sold_log" \
		-c "ALTER TABLE seckill.campaigns DROP CONSTRAINT IF EXISTS campaigns_gc_cap" \
		-c "ALTER TABLE seckill.orders DROP CONSTRAINT IF EXISTS orders_no_banned,
			DROP COLUMN IF EXISTS channel, DROP COLUMN IF EXISTS user_len" >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
tag="$(date +%s)-$$"

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 -f "$SECKILL_ROOT/test/helpers.sql"

# campaign goods: created with stock for the whole test and preheated; prints its id
campaign() {
	psql_val "SELECT seckill_campaign_create('$1', 10000000)" >/dev/null &&
		[ "$(psql_val "SELECT seckill_preheat('$1')")" = 10000000 ] &&
		psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$1'"
}
# load goods [users]: 16 clients buying until load_until stops them, each
# answer kept in stampede_answers; users are "customer-N" for even N and
# "stranger-N" for odd N
load() {
	crowd_stoppable load
	cat >"$work/load.sql" <<SQL
\set u random(1, ${2:-1000000000000})
SELECT try_buy(CASE WHEN :u % 2 = 0 THEN 'customer-' ELSE 'stranger-' END || :u, '$1') FROM crowd_on('load');
SQL
	pgbench -n -c 16 -j 2 -T 120 -f "$work/load.sql" >"$work/load.out" 2>&1 &
	LOAD=$!
}
# load_until condition: the load buys until the condition holds (60 s at
# most), then stops; every call of it returned (sale.sh's crowd_done)
load_until() {
	seckill_wait_for "$1" 60 || diag "not reached in 60 s: $1"
	crowd_done load "$LOAD"
}
answer_count() { psql_val "SELECT count(*) FROM stampede_answers"; }
orders_of() { psql_val "SELECT count(*) FROM seckill.orders WHERE campaign_id = $1"; }
# counted id: "orders/sold" of a campaign
counted() {
	psql_val "SELECT count(*) || '/' || (SELECT sold FROM seckill.campaigns WHERE id = $1)
		FROM seckill.orders WHERE campaign_id = $1"
}
# capped: the reservations the DBA's cap on seckill.campaigns refused
capped() {
	psql_val "SELECT count(*) FROM seckill.compensations WHERE campaign_id = $oid AND reason LIKE '%campaigns_gc_cap%'"
}
oks() { psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'ok' AND user_id LIKE '$1'"; }

# 1. Closed while on sale
closed="closed-$tag"
cid=$(campaign "$closed")
ok "[ -n '$cid' ]" "a campaign on sale"
load "$closed"
seckill_wait_for "[ \$(orders_of $cid) -ge 2000 ]" 20
at_close=$(psql -XAtq -v ON_ERROR_STOP=1 <<SQL
BEGIN;
UPDATE seckill.campaigns SET state = 'closed' WHERE id = $cid;
SELECT count(*) || '/' || (SELECT sold FROM seckill.campaigns WHERE id = $cid)
FROM seckill.orders WHERE campaign_id = $cid;
COMMIT;
SQL
)
ok "[ $? -eq 0 ]" "a DBA closes it mid-sale, at $at_close orders/sold"
before=$(answer_count)
load_until "[ \$(answer_count) -ge $((before + 10000)) ]"
after=$(answer_count)
ok "[ $((after - before)) -ge 1000 ]" "the crowd kept asking after the close: $((after - before)) more calls"
is "$(counted "$cid")" "$at_close" "no order was added after the close committed"
is "$(psql_val "SELECT count(*) FROM stampede_answers a WHERE a.status = 'ok'
	AND NOT EXISTS (SELECT FROM seckill.orders o WHERE o.id = a.order_id AND o.user_id = a.user_id)")" 0 \
	"every ok has its committed order"

# 2. Deleted while on sale: the DBA locks its row, deletes its orders and it
deleted="deleted-$tag"
did=$(campaign "$deleted")
other="other-$tag"
oid=$(campaign "$other")
load "$deleted"
seckill_wait_for "[ \$(orders_of $did) -ge 2000 ]" 20
psql -Xq -v ON_ERROR_STOP=1 >"$work/delete.out" 2>&1 <<SQL
BEGIN;
SELECT FROM seckill.campaigns WHERE id = $did FOR UPDATE;
DELETE FROM seckill.orders WHERE campaign_id = $did;
DELETE FROM seckill.compensations WHERE campaign_id = $did;
DELETE FROM seckill.campaigns WHERE id = $did;
COMMIT;
SQL
ok "[ $? -eq 0 ]" "a DBA deletes it mid-sale, with its orders" || diag "$(cat "$work/delete.out")"
before=$(answer_count)
load_until "[ \$(answer_count) -ge $((before + 10000)) ]"
after=$(answer_count)
ok "[ $((after - before)) -ge 1000 ]" "the crowd kept asking after the delete: $((after - before)) more calls"
is "$(orders_of "$did")" 0 "no order of the deleted campaign was written after it"
is "$(psql_val "SELECT count(*) FROM seckill.orders o
	WHERE NOT EXISTS (SELECT FROM seckill.campaigns c WHERE c.id = o.campaign_id)")" 0 \
	"no order names a campaign that is not there"
is "$(psql_val "SELECT status FROM seckill_buy('after-delete-$tag', '$other')")" ok \
	"the worker sells another campaign after it"

# 3. A DBA's trigger and foreign key on seckill.orders
psql -Xq -v ON_ERROR_STOP=1 <<'SQL'
CREATE TABLE public.gc_audit_log (order_id bigint PRIMARY KEY, user_id text);
CREATE FUNCTION public.gc_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.gc_audit_log VALUES (NEW.id, NEW.user_id);
	RETURN NEW;
END $$;
CREATE TRIGGER orders_audit AFTER INSERT ON seckill.orders FOR EACH ROW EXECUTE FUNCTION public.gc_audit();
CREATE TABLE public.gc_customers (id text PRIMARY KEY);
INSERT INTO public.gc_customers SELECT 'customer-' || 2 * k FROM generate_series(1, 2000) k;
ALTER TABLE seckill.orders ADD CONSTRAINT orders_customer FOREIGN KEY (user_id)
	REFERENCES public.gc_customers (id) NOT VALID;
SQL
ok "[ $? -eq 0 ]" "a DBA adds an audit trigger and a foreign key to customers on seckill.orders"
psql_val "TRUNCATE stampede_answers" >/dev/null
load "$other" 4000
load_until "[ \$(oks 'customer-%') -ge 1000 ]"
customers=$(oks 'customer-%')
ok "[ $customers -ge 500 ]" "customers bought: $customers ok"
is "$(psql_val "SELECT count(*) FROM seckill.orders WHERE campaign_id = $oid AND user_id LIKE 'stranger-%'")" 0 \
	"no order of a user who is not a customer was written"
is "$(oks 'stranger-%')" 0 "no stranger was told ok"
is "$(psql_val "SELECT count(*) FROM seckill.orders o WHERE o.campaign_id = $oid AND o.user_id LIKE 'customer-%'
	AND NOT EXISTS (SELECT FROM public.gc_audit_log a WHERE a.order_id = o.id)")" 0 \
	"the audit trigger fired for every order"
is "$(psql_val "SELECT count(*) FROM public.gc_audit_log")" "$customers" "and for nothing else"

psql -Xq -v ON_ERROR_STOP=1 -c "DROP TRIGGER orders_audit ON seckill.orders" \
	-c "ALTER TABLE seckill.orders DROP CONSTRAINT orders_customer"
ok "[ $? -eq 0 ]" "both dropped"
audited=$(psql_val "SELECT count(*) FROM public.gc_audit_log")
load "$other"
load_until "[ \$(oks 'stranger-%') -ge 2000 ]"
ok "[ $(oks 'stranger-%') -ge 500 ]" "strangers buy again: $(oks 'stranger-%') ok"
is "$(psql_val "SELECT count(*) FROM public.gc_audit_log")" "$audited" "the dropped trigger fires no more"
is "$(psql_val "SELECT count(*) = (SELECT sold FROM seckill.campaigns WHERE id = $oid)
	FROM seckill.orders WHERE campaign_id = $oid")" t "every unit sold is an order, and no more"

# 4. A DBA's column with a default, CHECK and expression index, then a generated column
psql -Xq -v ON_ERROR_STOP=1 <<'SQL'
ALTER TABLE seckill.orders ADD COLUMN channel text NOT NULL DEFAULT 'web',
	ADD CONSTRAINT orders_no_banned CHECK (user_id NOT LIKE 'banned-%') NOT VALID;
CREATE INDEX orders_user_upper ON seckill.orders (upper(user_id));
SQL
ok "[ $? -eq 0 ]" "a DBA adds a column with a default, a CHECK and an expression index to seckill.orders"
before=$(orders_of "$oid")
load "$other"
psql_val "SELECT status FROM seckill_buy('banned-$tag', '$other')" >"$work/banned.out" 2>&1
load_until "[ \$((\$(orders_of $oid) - $before)) -ge 4000 ]"
new=$(( $(orders_of "$oid") - before ))
ok "[ $new -ge 500 ]" "the sale goes on: $new more orders"
is "$(psql_val "SELECT count(*) FROM seckill.orders WHERE campaign_id = $oid AND channel IS DISTINCT FROM 'web'")" 0 \
	"every order has the new column's default"
ok "[ \"$(cat "$work/banned.out")\" != ok ]" "a purchase the CHECK refuses is not told ok: $(cat "$work/banned.out")"
is "$(psql_val "SELECT count(*) FROM seckill.orders WHERE user_id = 'banned-$tag'")" 0 "and its order is not written"
is "$(psql_val "SELECT count(*) FROM seckill.compensations WHERE user_id = 'banned-$tag'")" 1 \
	"its reservation is logged as a compensation"
is "$(psql_val "SET enable_seqscan = off; SET enable_bitmapscan = off;
	SELECT count(*) FROM seckill.orders WHERE upper(user_id) > ''")" \
	"$(psql_val "SELECT count(*) FROM seckill.orders")" "the expression index has every order"
psql -Xq -v ON_ERROR_STOP=1 \
	-c "ALTER TABLE seckill.orders ADD COLUMN user_len int GENERATED ALWAYS AS (octet_length(user_id)) STORED"
ok "[ $? -eq 0 ]" "a DBA adds a stored generated column"
before=$(orders_of "$oid")
load "$other"
load_until "[ \$((\$(orders_of $oid) - $before)) -ge 3000 ]"
new=$(( $(orders_of "$oid") - before ))
ok "[ $new -ge 300 ]" "the sale goes on: $new more orders"
is "$(psql_val "SELECT count(*) FROM seckill.orders WHERE user_len IS DISTINCT FROM octet_length(user_id)
	OR channel IS DISTINCT FROM 'web'")" 0 "each has the generated column, and the default"
is "$(psql_val "SELECT count(*) = (SELECT sold FROM seckill.campaigns WHERE id = $oid)
	FROM seckill.orders WHERE campaign_id = $oid")" t "every unit sold is an order, and no more"

# 5. A DBA's CHECK and trigger on seckill.campaigns
cap=$(( $(psql_val "SELECT sold FROM seckill.campaigns WHERE id = $oid") + 300 ))
psql -Xq -v ON_ERROR_STOP=1 -c "ALTER TABLE seckill.campaigns ADD CONSTRAINT campaigns_gc_cap
	CHECK (id <> $oid OR sold <= $cap) NOT VALID"
ok "[ $? -eq 0 ]" "a DBA caps the campaign's sold at $cap by a CHECK on seckill.campaigns"
load "$other"
load_until "[ \$(capped) -ge 200 ]"
is "$(counted "$oid")" "$cap/$cap" "the sale stops at the cap exactly, every unit sold an order"
is "$(psql_val "SELECT count(*) > 0 FROM seckill.compensations WHERE campaign_id = $oid
	AND reason LIKE '%campaigns_gc_cap%'")" t "the reservations past it are refused by the CHECK, and compensated"
psql -Xq -v ON_ERROR_STOP=1 <<'SQL'
ALTER TABLE seckill.campaigns DROP CONSTRAINT campaigns_gc_cap;
CREATE TABLE public.gc_sold_log (campaign_id bigint, sold int);
CREATE FUNCTION public.gc_sold_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.gc_sold_log VALUES (NEW.id, NEW.sold);
	RETURN NEW;
END $$;
CREATE TRIGGER campaigns_audit AFTER UPDATE OF sold ON seckill.campaigns
	FOR EACH ROW EXECUTE FUNCTION public.gc_sold_audit();
SQL
ok "[ $? -eq 0 ]" "the cap dropped, a DBA's trigger on UPDATE OF sold added"
audited="audited-$tag"
aid=$(campaign "$audited")
load "$audited"
load_until "[ \$(psql_val 'SELECT count(*) FROM public.gc_sold_log WHERE campaign_id = $aid') -ge 100 ]"
is "$(psql_val "SELECT max(sold) FROM public.gc_sold_log WHERE campaign_id = $aid")" \
	"$(psql_val "SELECT sold FROM seckill.campaigns WHERE id = $aid")" "the trigger saw every count, the last one too"
ok "[ $(psql_val "SELECT count(*) FROM public.gc_sold_log WHERE campaign_id = $aid") -ge 10 ]" \
	"it fired for each round: $(psql_val "SELECT count(*) FROM public.gc_sold_log WHERE campaign_id = $aid") times"
is "$(counted "$aid")" "$(psql_val "SELECT sold || '/' || sold FROM seckill.campaigns WHERE id = $aid")" \
	"every unit sold is an order, and no more"

done_testing
