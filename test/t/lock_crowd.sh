# shellcheck shell=bash
# A crowd on one lock for a fault test (source it after tap.sh, with the
# extension created): 12 sessions take the lock fair and 3 take it shared,
# in loops, each hold written to the table lock_holds with its fencing token
# and its interval; a hold lasts 10 ms, one in 20 lasts 4 s, so that a
# fault can come while one is under way.  A taker waits up to 60 s.
#   lock_crowd_start name seconds dir: the loops, in the background, for at
#     least that long, until lock_crowd_check (their pids in
#     lock_crowd_pids, each one's output in dir/crowd-N.out)
#   lock_crowd_busy name: the lock held and 8 or more sessions in its line
#   lock_crowd_long_hold name: a hold of 4 s under way, 3 s or more left
#   lock_crowd_check name label: once the loops ran their seconds, stops
#     them (each after its hold), waits for them, then checks that
#     every loop ended without an error, no exclusive hold overlapped
#     another hold, the exclusive holds' tokens rose in the order they were
#     granted, every holder still held the lock when it released it (a
#     release made while Redis could not be reached, or answered an error,
#     answers false with a warning of its own, and the worker makes it later: those are counted
#     apart, never a lease that ran out), and every call that failed named
#     Redis
#   lock_crowd_kill: ends the loops at once (a test's cleanup)

lock_crowd_pids=()
lock_crowd_kill() {
	[ ${#lock_crowd_pids[@]} -eq 0 ] || kill "${lock_crowd_pids[@]}" 2>/dev/null
}

lock_crowd_start() {
	local name=$1 seconds=$2 dir=$3 kind
	psql -XAtq -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
CREATE TABLE IF NOT EXISTS lock_holds (id bigserial, name text, kind text, session int, token bigint,
	t_asked timestamptz, t_from timestamptz, t_to timestamptz, kept boolean, err text);
CREATE TABLE IF NOT EXISTS lock_crowd_stops (name text PRIMARY KEY);
-- k: 'x' takes the lock fair, 's' shared; each session's rows commit when its loop ends
CREATE OR REPLACE FUNCTION lock_loop(lock text, k text, s int, secs float8) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	tok bigint;
	hold bigint;
	asked timestamptz;
	stop timestamptz := clock_timestamp() + secs * interval '1 s';
BEGIN
	WHILE clock_timestamp() < stop AND NOT EXISTS (SELECT 1 FROM lock_crowd_stops WHERE name = lock) LOOP
		asked := clock_timestamp();
		BEGIN
			tok := CASE k WHEN 'x' THEN seckill_lock_fair(lock, '60 s') ELSE seckill_lock_shared(lock, '60 s') END;
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO lock_holds (name, kind, session, err) VALUES (lock, k, s, 'lock: ' || SQLERRM);
			PERFORM pg_sleep(0.05);
			CONTINUE;
		END;
		IF tok IS NULL THEN
			INSERT INTO lock_holds (name, kind, session, t_asked, err)
				VALUES (lock, k, s, asked, 'lock: not taken within 60 s');
			CONTINUE;
		END IF;
		INSERT INTO lock_holds (name, kind, session, token, t_asked, t_from)
			VALUES (lock, k, s, tok, asked, clock_timestamp()) RETURNING id INTO hold;
		PERFORM pg_sleep(CASE WHEN random() < 0.05 THEN 4 ELSE 0.01 END);
		UPDATE lock_holds SET t_to = clock_timestamp() WHERE id = hold;
		BEGIN
			UPDATE lock_holds SET kept = CASE k WHEN 'x' THEN seckill_unlock(lock) ELSE seckill_unlock_shared(lock) END
				WHERE id = hold;
		EXCEPTION WHEN OTHERS THEN
			UPDATE lock_holds SET err = 'unlock: ' || SQLERRM WHERE id = hold;
		END;
	END LOOP;
END $$;
SQL
	lock_crowd_pids=()
	for s in $(seq 1 15); do
		kind=x
		[ "$s" -gt 12 ] && kind=s
		psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT lock_loop('$name', '$kind', $s, 300)" \
			>"$dir/crowd-$s.out" 2>&1 7>&- &
		lock_crowd_pids+=($!)
	done
	lock_crowd_dir=$dir
	lock_crowd_until=$(($(date +%s) + seconds))
}

lock_crowd_busy() {
	[ "$(psql_val "SELECT count(*) FILTER (WHERE state = 'held') > 0 AND count(*) FILTER (WHERE state = 'waiting') >= 8
		FROM seckill.locks WHERE name = '$1'")" = t ]
}

lock_crowd_long_hold() {
	[ "$(psql_val "SELECT count(*) FROM seckill.locks WHERE name = '$1' AND state = 'held'
		AND acquired_at BETWEEN clock_timestamp() - interval '1 s' AND clock_timestamp() - interval '300 ms'")" -gt 0 ]
}

lock_crowd_check() {
	local name=$1 label=$2 holds errors overlapping later left
	# (the crowd's length is a setting of the load, as pgbench's -T)
	left=$((lock_crowd_until - $(date +%s)))
	[ "$left" -gt 0 ] && sleep "$left"
	psql_val "INSERT INTO lock_crowd_stops VALUES ('$name')" >/dev/null
	wait "${lock_crowd_pids[@]}"
	lock_crowd_pids=()
	# (Redis unreachable, or answering an error such as a cluster's
	# CLUSTERDOWN while a node restarts: the hint names Redis)
	later=$(cat "$lock_crowd_dir"/crowd-* | grep -c "^WARNING:  lock \"$name\" could not be released now: ")
	is "$(cat "$lock_crowd_dir"/crowd-* | grep -v '^WARNING:  lock .* could not be released now: ' |
		grep -v '^HINT:  The seckill worker releases it when Redis answers again' | grep -c .)" 0 \
		"$label: every session's loop ended without an error ($later release(s) made while Redis could not be reached, left to the worker)" ||
		diag "$(cat "$lock_crowd_dir"/crowd-*)"
	holds=$(psql_val "SELECT count(*) FROM lock_holds WHERE name = '$name' AND token IS NOT NULL")
	ok "[ $holds -ge 30 ]" "$label: $holds holds, $(psql_val "SELECT count(DISTINCT session) FROM lock_holds
		WHERE name = '$name' AND token IS NOT NULL") sessions of 15 held the lock"
	diag "$label: longest wait for the lock: $(psql_val "SELECT max(t_from - t_asked) FROM lock_holds WHERE name = '$name'")"
	overlapping="FROM lock_holds a JOIN lock_holds b ON a.id < b.id AND a.name = '$name' AND b.name = '$name'
		AND (a.kind = 'x' OR b.kind = 'x') AND a.token IS NOT NULL AND b.token IS NOT NULL
		AND tstzrange(a.t_from, a.t_to) && tstzrange(b.t_from, b.t_to)"
	is "$(psql_val "SELECT count(*) $overlapping")" 0 "$label: no exclusive hold overlaps another hold" ||
		diag "$(psql_val "SELECT a.kind, a.session, a.token, a.t_from, a.t_to, a.kept, a.err, '|', b.kind, b.session,
			b.token, b.t_from, b.t_to, b.kept, b.err $overlapping")"
	is "$(psql_val "SELECT count(*) FROM (SELECT token < lag(token) OVER (ORDER BY t_from) AS older
		FROM lock_holds WHERE name = '$name' AND kind = 'x' AND token IS NOT NULL) g WHERE older")" 0 \
		"$label: the exclusive holds' tokens rise in the order they were granted"
	is "$(psql_val "SELECT count(*) FROM lock_holds WHERE name = '$name' AND kept = false")" "$later" \
		"$label: every holder still held the lock when it released it (but for the $later release(s) left to the worker)"
	errors=$(psql_val "SELECT count(*) FROM lock_holds WHERE name = '$name' AND err IS NOT NULL")
	is "$(psql_val "SELECT count(*) FROM lock_holds WHERE name = '$name' AND err IS NOT NULL AND err NOT LIKE '%Redis%'")" 0 \
		"$label: $errors call(s) failed while Redis was away, each naming Redis" ||
		diag "$(psql_val "SELECT err FROM lock_holds WHERE name = '$name' AND err IS NOT NULL LIMIT 5")"
}
