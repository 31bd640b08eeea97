#!/usr/bin/env bash
# What a database owner who is not a superuser can do must not reach the
# worker, which runs as one (I8), nor stop it (I6):
# - operators and functions planted in public and in the superuser's "$user"
#   schema, and a database search_path that puts them first: neither the
#   worker nor a superuser calling seckill runs them;
# - database defaults that made every commit fail (read-only, serializable,
#   tight lock and statement timeouts, exit_on_error): a 1,000-item sale
#   sells exactly, with no restart of the worker;
# - seckill.database naming a database that does not exist: the worker
#   retries at most once a minute, and callers are told why.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

log=$SECKILL_TMP/postgresql.log
# This test's own sessions keep sane settings whatever the database says.
export PGOPTIONS='-c default_transaction_read_only=off -c default_transaction_isolation=read\ committed -c statement_timeout=0 -c lock_timeout=0 -c exit_on_error=off -c search_path=public'
cleanup() {
	psql -Xq -c "ALTER DATABASE postgres RESET ALL" -c "ALTER DATABASE postgres OWNER TO postgres" \
		-c "DROP SCHEMA IF EXISTS postgres CASCADE" -c "DROP OPERATOR IF EXISTS public.* (numeric, integer)" \
		-c "DROP FUNCTION IF EXISTS public.unnest(bigint[])" -c "DROP FUNCTION IF EXISTS public.trap_mul(numeric, integer)" \
		-c "DROP TABLE IF EXISTS public.trap_log" -c "DROP ROLE IF EXISTS shop_owner" >/dev/null 2>&1
}
trap cleanup EXIT
cleanup

# restart_worker: a new worker, which reads the database's settings anew
restart_worker() {
	local old
	old=$(seckill_worker_pid)
	psql_val "SELECT pg_terminate_backend($old)" >/dev/null
	seckill_wait_for "[ -n \"\$(seckill_worker_pid)\" ] && [ \"\$(seckill_worker_pid)\" != $old ]" 15
}

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null

# 1. The superuser trap
psql -Xq -v ON_ERROR_STOP=1 <<'SQL'
CREATE ROLE shop_owner LOGIN;
ALTER DATABASE postgres OWNER TO shop_owner;
SQL
psql -Xq -v ON_ERROR_STOP=1 -U shop_owner <<'SQL'
CREATE TABLE public.trap_log (who text, super boolean, what text);
CREATE FUNCTION public.trap_mul(numeric, integer) RETURNS numeric LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.trap_log SELECT current_user, rolsuper, 'numeric * integer' FROM pg_catalog.pg_roles WHERE rolname = current_user;
	RETURN $1 OPERATOR(pg_catalog.*) $2::numeric;
END $$;
CREATE OPERATOR public.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.trap_mul);
CREATE FUNCTION public.unnest(bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.trap_log SELECT current_user, rolsuper, 'unnest' FROM pg_catalog.pg_roles WHERE rolname = current_user;
	RETURN QUERY SELECT pg_catalog.unnest($1);
END $$;
CREATE SCHEMA postgres;
CREATE OPERATOR postgres.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = public.trap_mul);
GRANT ALL ON public.trap_log TO PUBLIC;
ALTER DATABASE postgres SET search_path = "$user", public, pg_catalog;
SQL
ok "[ $? -eq 0 ]" "a database owner who is not a superuser plants operators and functions, and the database's search_path"
PGOPTIONS= psql -XAtq -U shop_owner -c "SELECT 2.5 * 2" -c "SELECT count(*) FROM unnest(ARRAY[1, 2]::bigint[])" >/dev/null
is "$(psql_val "SELECT string_agg(DISTINCT what, ', ') FROM public.trap_log")" "numeric * integer, unnest" \
	"the traps catch unqualified calls under that search_path"
psql_val "TRUNCATE public.trap_log" >/dev/null
restart_worker
ok "[ $? -eq 0 ]" "the worker restarted under the database's search_path"

goods="trap-$(date +%s)-$$"
# the superuser's session gets the database's search_path too
PGOPTIONS= psql -XAtq -v ON_ERROR_STOP=1 >"$SECKILL_TMP/trap.out" 2>&1 <<SQL
SELECT seckill_campaign_create('$goods', 10, payment_timeout => '1 second');
SELECT seckill_campaign_set('$goods', '{"user_rate": 5, "token_required": false}');
SELECT seckill_preheat('$goods');
SELECT * FROM seckill_buy('alice', '$goods');
SELECT * FROM seckill_buy('bob', '$goods');
SELECT * FROM seckill_order('alice', '$goods');
SELECT * FROM seckill_status('$goods');
SELECT seckill_cancel((SELECT o.id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = '$goods' AND o.user_id = 'bob'));
UPDATE seckill.orders o SET created_at = now() - interval '1 hour' FROM seckill.campaigns c
	WHERE c.id = o.campaign_id AND c.goods = '$goods' AND o.user_id = 'alice';
SELECT * FROM seckill_release_expired();
SELECT * FROM seckill_restock('$goods', 5);
SELECT * FROM seckill_reconcile('$goods');
SELECT seckill_close('$goods');
SQL
ok "[ $? -eq 0 ]" "a superuser runs a campaign through: create, set, preheat, buy, order, status, cancel, release, restock, reconcile, close" ||
	diag "$(tail -5 "$SECKILL_TMP/trap.out")"
is "$(psql_val "SELECT count(*) FROM public.trap_log")" 0 "no planted operator or function ran, in the worker or in the superuser's backend"
is "$(psql_val "SELECT rolsuper FROM pg_roles WHERE rolname = 'shop_owner'")" f "the database owner is not a superuser"
cleanup

# 2. Hostile database defaults
psql -Xq -v ON_ERROR_STOP=1 <<'SQL'
ALTER DATABASE postgres SET default_transaction_read_only = on;
ALTER DATABASE postgres SET default_transaction_isolation = 'serializable';
ALTER DATABASE postgres SET lock_timeout = '100ms';
ALTER DATABASE postgres SET statement_timeout = '100ms';
ALTER DATABASE postgres SET exit_on_error = on;
SQL
restart_worker
ok "[ $? -eq 0 ]" "the worker restarted under read-only, serializable, lock and statement timeouts of 100 ms, exit_on_error"
worker=$(seckill_worker_pid)
sale_begin "hostile-$(date +%s)-$$" 1000
sale_crowd 3 hostile 5000
wait "$SALE_CROWD"
# the same crowd on while stock is left (a busy machine serves fewer in 3 s)
sed "s/;\$/ FROM crowd_on('hostile-on');/" "$SALE_WORK/hostile.sql" >"$SALE_WORK/hostile-on.sql"
sell_until sale_orders 1000 "$SALE_WORK/hostile-on.sql" 64
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status = 'ok'")" 1000 "the crowd bought exactly 1,000"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE status NOT IN ('ok', 'sold_out', 'duplicate')")" 0 \
	"every other answer was sold_out or duplicate: no errors"
is "$(seckill_worker_pid)" "$worker" "the same worker served the whole sale"
sale_finish
psql_val "ALTER DATABASE postgres RESET ALL" >/dev/null
restart_worker

# 3. seckill.database names no database
psql_val "ALTER SYSTEM SET seckill.database = 'no_such_db'" >/dev/null
seckill_pg_restart
seckill_wait_for "grep -q 'database \"no_such_db\" does not exist' '$log'" 10
ok "[ $? -eq 0 ]" "seckill.database = no_such_db: the worker cannot connect"
before=$(grep -c 'database "no_such_db" does not exist' "$log")
err=$(psql -XAtq -v VERBOSITY=verbose -c "SELECT * FROM seckill_buy('alice', '$SALE_GOODS')" 2>&1)
ok "[[ \"\$err\" == *'SK002: the seckill worker cannot connect to database \"no_such_db\"'*'set seckill.database'* ]]" \
	"callers are told, with SQLSTATE SK002 (not made): $err"
# the attempts seen in a window of 8 seconds: a restart a second would make 8
sleep 8
attempts=$(($(grep -c 'database "no_such_db" does not exist' "$log") - before))
ok "[ $attempts -le 3 ]" "$attempts attempts to connect in 8 s: each waits longer, up to a minute"
psql_val "ALTER SYSTEM RESET seckill.database" >/dev/null
seckill_pg_restart
seckill_wait_for "[ -n \"\$(seckill_worker_pid)\" ]" 15
ok "[ $? -eq 0 ]" "seckill.database reset: the worker is back"
done_testing
