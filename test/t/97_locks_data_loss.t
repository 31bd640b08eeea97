#!/usr/bin/env bash
# One holder at a time within a PostgreSQL cluster, across a Redis data loss:
# 12 sessions take a fair lock in turn and 3 take it shared, in loops, each
# hold written to a table with its fencing token and its interval, while
# Redis is restarted empty and then flushed (FLUSHALL) under them, each
# time while a hold of 4 s is under way.  The
# worker puts back every lease it holds before it runs any other lock
# script: no exclusive hold overlaps another hold, the exclusive holds'
# tokens rise in the order they were granted, and every holder still held
# its lock when it released it.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

work=$(mktemp -d -p "$SECKILL_TMP" dataloss.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait; [ "${SECKILL_KEEP:-0}" = 1 ] || rm -rf "$work"' EXIT
log=$SECKILL_TMP/postgresql.log
seconds=24

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
psql -XAtq -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE dl_holds (id bigserial, kind text, session int, token bigint,
	t_asked timestamptz, t_from timestamptz, t_to timestamptz, kept boolean, err text);
-- k: 'x' takes the lock fair, 's' shared; holds it 10 ms (one hold in 20,
-- 4 s: the faults come during one of those); for secs seconds.
-- A taker waits up to 60 s, longer than the loops last.  Each session's
-- rows commit when its loop ends.
CREATE FUNCTION dl_loop(k text, s int, secs float8) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	tok bigint;
	hold bigint;
	asked timestamptz;
	stop timestamptz := clock_timestamp() + secs * interval '1 s';
BEGIN
	WHILE clock_timestamp() < stop LOOP
		asked := clock_timestamp();
		BEGIN
			tok := CASE k WHEN 'x' THEN seckill_lock_fair('dl', '60 s') ELSE seckill_lock_shared('dl', '60 s') END;
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO dl_holds (kind, session, err) VALUES (k, s, 'lock: ' || SQLERRM);
			PERFORM pg_sleep(0.05);
			CONTINUE;
		END;
		IF tok IS NULL THEN
			INSERT INTO dl_holds (kind, session, t_asked, err) VALUES (k, s, asked, 'lock: not taken within 60 s');
			CONTINUE;
		END IF;
		INSERT INTO dl_holds (kind, session, token, t_asked, t_from) VALUES (k, s, tok, asked, clock_timestamp())
			RETURNING id INTO hold;
		PERFORM pg_sleep(CASE WHEN random() < 0.05 THEN 4 ELSE 0.01 END);
		UPDATE dl_holds SET t_to = clock_timestamp() WHERE id = hold;
		BEGIN
			UPDATE dl_holds SET kept = CASE k WHEN 'x' THEN seckill_unlock('dl') ELSE seckill_unlock_shared('dl') END
				WHERE id = hold;
		EXCEPTION WHEN OTHERS THEN
			UPDATE dl_holds SET err = 'unlock: ' || SQLERRM WHERE id = hold;
		END;
	END LOOP;
END $$;
SQL

for s in $(seq 1 15); do
	kind=x
	[ "$s" -gt 12 ] && kind=s
	psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT dl_loop('$kind', $s, $seconds)" >"$work/out-$s" 2>&1 &
done
held() { [ "$(psql_val "SELECT count(*) FROM seckill.locks WHERE name = 'dl' AND state = 'held'")" -gt 0 ]; }
waiting() { [ "$(psql_val "SELECT count(*) FROM seckill.locks WHERE name = 'dl' AND state = 'waiting'")" -ge 8 ]; }
put_backs() { grep -c 'seckill worker put back [1-9]' "$log"; }
# a long hold under way, 3 s or more of it left: the fault and the put back
# come while it lasts, even on a busy machine
long_hold() {
	[ "$(psql_val "SELECT count(*) FROM seckill.locks WHERE name = 'dl' AND state = 'held'
		AND acquired_at BETWEEN clock_timestamp() - interval '1 s' AND clock_timestamp() - interval '300 ms'")" -gt 0 ]
}
seckill_wait_for "held && waiting" 10
ok "[ $? -eq 0 ]" "the lock held, 8 or more sessions waiting in line"

seckill_wait_for long_hold 15
before=$(put_backs)
seckill_redis_restart_empty 7>&-
seckill_wait_for "[ \$(put_backs) -gt $before ]" 10
ok "[ $? -eq 0 ]" "Redis restarted empty: the worker put the leases back"
seckill_wait_for "held && waiting" 10
ok "[ $? -eq 0 ]" "... and the line moves on"

seckill_wait_for long_hold 15
before=$(put_backs)
seckill_redis_cli FLUSHALL >/dev/null
seckill_wait_for "[ \$(put_backs) -gt $before ]" 10
ok "[ $? -eq 0 ]" "Redis flushed: the worker put the leases back"
seckill_wait_for "held && waiting" 10
ok "[ $? -eq 0 ]" "... and the line moves on"

wait
is "$(cat "$work"/out-* | grep -c .)" 0 "every session's loop ended without an error" || diag "$(cat "$work"/out-*)"
grep 'seckill worker put back\|seckill lost lock' "$log" | sed 's/^/# /'
holds=$(psql_val "SELECT count(*) FROM dl_holds WHERE token IS NOT NULL")
ok "[ $holds -ge 30 ]" "$holds holds, $(psql_val "SELECT count(DISTINCT session) FROM dl_holds WHERE token IS NOT NULL") sessions of 15 held the lock"
diag "longest wait for the lock: $(psql_val "SELECT max(t_from - t_asked) FROM dl_holds")"
overlapping="FROM dl_holds a JOIN dl_holds b ON a.id < b.id
	AND (a.kind = 'x' OR b.kind = 'x') AND a.token IS NOT NULL AND b.token IS NOT NULL
	AND tstzrange(a.t_from, a.t_to) && tstzrange(b.t_from, b.t_to)"
is "$(psql_val "SELECT count(*) $overlapping")" 0 "no exclusive hold overlaps another hold" ||
	diag "$(psql_val "SELECT a.kind, a.session, a.token, a.t_from, a.t_to, a.kept, a.err, '|', b.kind, b.session,
		b.token, b.t_from, b.t_to, b.kept, b.err $overlapping")"
is "$(psql_val "SELECT count(*) FROM (SELECT token < lag(token) OVER (ORDER BY t_from) AS older
	FROM dl_holds WHERE kind = 'x' AND token IS NOT NULL) g WHERE older")" 0 \
	"the exclusive holds' tokens rise in the order they were granted"
is "$(psql_val "SELECT count(*) FROM dl_holds WHERE kept = false")" 0 "every holder still held the lock when it released it"
errors=$(psql_val "SELECT count(*) FROM dl_holds WHERE err IS NOT NULL")
is "$(psql_val "SELECT count(*) FROM dl_holds WHERE err IS NOT NULL AND err NOT LIKE '%Redis%'")" 0 \
	"$errors call(s) failed while Redis was away, each naming Redis" ||
	diag "$(psql_val "SELECT err FROM dl_holds WHERE err IS NOT NULL LIMIT 5")"

done_testing_with_logs 30 "$log"
