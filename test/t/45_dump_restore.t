#!/usr/bin/env bash
# A backup restores: pg_dump of a database with campaigns, orders (reserved,
# paid, cancelled), a compensation, a fence and token secrets, restored into
# fresh databases by psql --single-transaction -v ON_ERROR_STOP=1 (plain
# format) and by pg_restore --single-transaction --exit-on-error (custom
# format), holds the same rows.  The worker then serves a restored database:
# a token issued before the dump still buys, a buyer of the dump is still a
# buyer, the rest sells exactly.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

work=$(mktemp -d -p "$SECKILL_TMP")
served=$(psql_val "SHOW seckill.database")
trap 'rm -rf "$work"; psql -XAtq -c "ALTER SYSTEM RESET seckill.database" >/dev/null 2>&1
	[ "$(psql_val "SHOW seckill.database" 2>/dev/null)" = "$served" ] || seckill_pg_restart' EXIT

tag="$(date +%s)-$$"
plain_db="restored_plain_${tag//-/_}"
custom_db="restored_custom_${tag//-/_}"
goods="dumped-$tag"
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -Xq -v ON_ERROR_STOP=1 <<SQL
SELECT seckill_campaign_create('$goods', 10, per_user_limit => 1) \g /dev/null
SELECT seckill_campaign_set('$goods', '{"token_required": true, "token_ttl": "1 day"}') \g /dev/null
SELECT seckill_preheat('$goods') \g /dev/null
SELECT seckill_fence_check('dumped-fence-$tag', 42) \g /dev/null
SQL
ok "[ $? -eq 0 ]" "a campaign that needs tokens, preheated; a fence"
buy() { psql_val "SELECT status FROM seckill_buy('$1', '$goods', 1, seckill_token('$1', '$goods'))"; }
for u in a b c d; do buy "$u" >/dev/null; done
psql_val "SELECT seckill_pay(order_id) FROM seckill_order('a', '$goods')" >/dev/null
psql_val "SELECT seckill_cancel(order_id) FROM seckill_order('b', '$goods')" >/dev/null
cid=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$goods'")
psql_val "INSERT INTO seckill.compensations (request_id, campaign_id, user_id, qty, reason)
	VALUES (-$$, $cid, 'z', 1, 'dump test')" >/dev/null
is "$(psql_val "SELECT string_agg(user_id || '=' || status, ',' ORDER BY user_id) FROM seckill.orders WHERE campaign_id = $cid")" \
	"a=paid,b=cancelled,c=reserved,d=reserved" "orders paid, cancelled and reserved"
token=$(psql_val "SELECT seckill_token('e', '$goods')")

# the rows of every table pg_dump saves, as one digest per table
digest() {
	psql -XAtq -d "$1" <<'SQL'
SELECT string_agg(t || ' ' || d, ', ' ORDER BY t) FROM (
	SELECT 'campaigns' t, md5(string_agg(c::text, '|' ORDER BY c.id)) d FROM seckill.campaigns c
	UNION ALL SELECT 'orders', md5(string_agg(o::text, '|' ORDER BY o.id)) FROM seckill.orders o
	UNION ALL SELECT 'compensations', md5(string_agg(k::text, '|' ORDER BY k.request_id)) FROM seckill.compensations k
	UNION ALL SELECT 'fences', md5(string_agg(f::text, '|' ORDER BY f.name)) FROM seckill.fences f
	UNION ALL SELECT 'token_secrets', md5(string_agg(s::text, '|' ORDER BY s.campaign_id)) FROM seckill.token_secrets s
	UNION ALL SELECT 'order_ids', last_value::text FROM seckill.order_ids) x
SQL
}
before=$(digest "$served")
ok "[[ \"\$before\" == *'campaigns '*'order_ids '*'orders '*'token_secrets '* ]]" "a digest of each table's rows"

pg_dump -d "$served" -e seckill -f "$work/dump.sql" && pg_dump -d "$served" -e seckill -Fc -f "$work/dump.custom"
ok "[ $? -eq 0 ]" "pg_dump, plain and custom format"
psql_val "CREATE DATABASE $plain_db" >/dev/null && psql_val "CREATE DATABASE $custom_db" >/dev/null
psql -Xq -d "$plain_db" --single-transaction -v ON_ERROR_STOP=1 -f "$work/dump.sql" >"$work/plain.out" 2>&1
ok "[ $? -eq 0 ]" "psql --single-transaction -v ON_ERROR_STOP=1 restores the plain dump" ||
	diag "$(grep -m3 ERROR "$work/plain.out")"
pg_restore -d "$custom_db" --single-transaction --exit-on-error "$work/dump.custom" >"$work/custom.out" 2>&1
ok "[ $? -eq 0 ]" "pg_restore --single-transaction --exit-on-error restores the custom dump" ||
	diag "$(grep -m3 ERROR "$work/custom.out")"
is "$(digest "$plain_db")" "$before" "the plain restore holds the same rows, token secrets included"
is "$(digest "$custom_db")" "$before" "so does the custom one"

# the worker serves the restored database
psql_val "ALTER SYSTEM SET seckill.database = '$plain_db'" >/dev/null
seckill_pg_restart
ok "[ $? -eq 0 ]" "the worker serves the restored database"
rbuy() { psql -XAtq -d "$plain_db" -c "SELECT status FROM seckill_buy('$1', '$goods', 1, $2)" 2>&1; }
is "$(rbuy e "'$token'")" ok "a token issued before the dump buys"
is "$(rbuy c "seckill_token('c', '$goods')")" duplicate "a buyer of the dump is still a buyer"
for u in $(seq 1 20); do rbuy "f$u" "seckill_token('f$u', '$goods')" >/dev/null; done
is "$(psql -XAtq -d "$plain_db" -c "SELECT count(*) || ' ' || (SELECT sold FROM seckill.campaigns WHERE id = $cid)
	|| ' ' || (SELECT redis_stock FROM seckill_status('$goods'))
	FROM seckill.orders WHERE campaign_id = $cid AND status <> 'cancelled'")" "10 10 0" \
	"the rest sells exactly: 10 orders for 10 items, Redis at 0"

psql_val "ALTER SYSTEM RESET seckill.database" >/dev/null
seckill_pg_restart
psql -XAtq -c "DROP DATABASE $plain_db" -c "DROP DATABASE $custom_db" >/dev/null
psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
