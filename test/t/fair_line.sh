# shellcheck shell=bash
# A fair lock's line for a test, its holder and its waiters (source it after
# tap.sh, with the extension created):
#   fair_line name: the table fair_grants (waiter, token, at) and the
#     function fair_take(w), which waits up to 60 s for the fair lock name,
#     records its grant, holds it 20 ms and releases it; the holder takes
#     the lock in a session of its own (session_hold), its token in
#     fair_first; then fair_queue n dir starts n waiters one after another,
#     each once the one before it stands in line (their order is known),
#     each one's output in dir/waiter-N.out, their pids in fair_pids
#   fair_in_line: how many wait in its line (seckill.locks)

fair_line() {
	fair_name=$1
	fair_pids=()
	psql -XAtq -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE TABLE fair_grants (waiter int, token bigint, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION fair_take(w int) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
	tok bigint := seckill_lock_fair('$fair_name', '60 s');
BEGIN
	INSERT INTO fair_grants (waiter, token) VALUES (w, tok);
	PERFORM pg_sleep(0.02);
	PERFORM seckill_unlock('$fair_name');
END \$\$;
SQL
	session_hold "SELECT seckill_lock_fair('$fair_name');"
	fair_first=$(psql_val "SELECT token FROM seckill.locks WHERE name = '$fair_name' AND state = 'held'")
}

fair_in_line() {
	psql_val "SELECT count(*) FROM seckill.locks WHERE name = '$fair_name' AND state = 'waiting'"
}

fair_queue() {
	local w
	for w in $(seq 1 "$1"); do
		# without the holder's session input, which would never close
		psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT fair_take($w)" >"$2/waiter-$w.out" 2>&1 7>&- &
		fair_pids+=($!)
		seckill_wait_for "[ \$(fair_in_line) -eq $w ]" 10 || return 1
	done
}
