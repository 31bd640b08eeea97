#!/usr/bin/env bash
# PgBouncer in transaction pooling in front of a sale: 32 clients give up
# after 100 ms (SET LOCAL seckill.request_timeout), 16 keep the default 5 s,
# on 8 server connections they share, while Redis stalls for 1.5 s, twice.
# The impatient clients time out; the patient ones, whose server connections
# served requests given up on by others, never see an error.  Nothing is
# oversold or sold twice.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"

redis_pid=$(cat "$SECKILL_TMP/redis.pid")
bouncer_dir=$(mktemp -d -p "$SECKILL_TMP")
# Below 32768, the start of the kernel's range of ephemeral ports: a client
# socket of the tests before never holds it.
bouncer_port=${SECKILL_BOUNCER_PORT:-$SECKILL_OWN_PORT}
ports_free SECKILL_BOUNCER_PORT "$bouncer_port"
trap 'kill -CONT "$redis_pid" 2>/dev/null; [ -f "$bouncer_dir/pid" ] && kill "$(cat "$bouncer_dir/pid")" 2>/dev/null' EXIT

seckill_pgbouncer_start "$bouncer_dir" "$bouncer_port" 8 200
ok "[ $? -eq 0 ]" "PgBouncer in transaction pooling, 8 server connections"

# Redis stalls shorter than the worker's wait for it: calls are slow, not failed
seckill_configure "SET seckill.redis_timeout = '3s'"
ok "[ $? -eq 0 ]" "seckill.redis_timeout = 3s"
sale_begin "bouncer-$(date +%s)-$$" 20000
psql -Xq -v ON_ERROR_STOP=1 <<'SQL'
-- a client that gives up after 100 ms, set for its transaction only
CREATE OR REPLACE FUNCTION try_buy_impatient(u text, g text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('seckill.request_timeout', '100ms', true);
	PERFORM try_buy(u, g);
EXCEPTION WHEN SQLSTATE 'SK001' OR SQLSTATE 'SK002' THEN
	INSERT INTO stampede_answers VALUES (u, 'error', NULL, SQLSTATE || ' ' || SQLERRM, NULL);
END
$$;
SQL
cat >"$SALE_WORK/impatient.sql" <<SQL
\set u random(1, 100000)
SELECT try_buy_impatient('impatient-' || :u, '$SALE_GOODS');
SQL
cat >"$SALE_WORK/patient.sql" <<SQL
\set u random(1, 100000)
SELECT try_buy('patient-' || :u, '$SALE_GOODS');
SQL
pgbench -n -h 127.0.0.1 -p "$bouncer_port" -c 32 -j 2 -R 800 -T 8 -f "$SALE_WORK/impatient.sql" \
	>"$SALE_WORK/impatient.out" 2>&1 &
impatient=$!
pgbench -n -h 127.0.0.1 -p "$bouncer_port" -c 16 -j 2 -R 400 -T 8 -f "$SALE_WORK/patient.sql" \
	>"$SALE_WORK/patient.out" 2>&1 &
patient=$!
for stall in 1 2; do
	seckill_wait_for "[ \$(psql_val \"SELECT count(*) FROM stampede_answers\") -ge $((stall * 1500)) ]" 20
	kill -STOP "$redis_pid"
	sleep 1.5 # the stall itself
	kill -CONT "$redis_pid"
done
wait "$impatient" "$patient"
ok "grep -q 'number of failed transactions: 0' '$SALE_WORK/impatient.out' &&
	grep -q 'number of failed transactions: 0' '$SALE_WORK/patient.out'" "both crowds ran to their end"
diag "answers: $(psql_val "SELECT string_agg(who || ' ' || answer || ' ' || n, ', ')
	FROM (SELECT split_part(user_id, '-', 1) who, coalesce(split_part(err, ' ', 1), status) answer, count(*) n
		FROM stampede_answers GROUP BY 1, 2 ORDER BY 1, 3 DESC) a")"
ok "[ \$(psql_val \"SELECT count(*) FROM stampede_answers WHERE user_id LIKE 'impatient-%' AND err LIKE 'SK00%'\") -gt 0 ]" \
	"the impatient clients gave up during the stalls"
is "$(psql_val "SELECT count(*) FROM stampede_answers WHERE user_id LIKE 'patient-%' AND status = 'error'")" 0 \
	"the patient clients, on the same server connections, saw no error"

seckill_configure "RESET seckill.redis_timeout"
sale_finish
done_testing
