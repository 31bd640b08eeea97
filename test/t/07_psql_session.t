#!/usr/bin/env bash
# psql_val, through the test's psql session (test/t/tap.sh), answers as a
# connection of its own would: the same rows, notices and errors in the
# same order, status 1 for an error and 2 for a server it cannot reach; a
# statement after a server restart runs once; a statement never waits for
# one of a job in the background; what a statement did is in the
# statistics at once.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

# same "SQL": psql_val and a connection of its own print the same,
# stderr and stdout together, and end with the same status
same() {
	local a b
	a=$(psql_val "$1" 2>&1; echo "status $?")
	b=$(psql_own "$1" 2>&1; echo "status $?")
	if [ "$a" = "$b" ]; then
		tap_result 1 "as a connection of its own: ${a//$'\n'/ | }"
	else
		tap_result 0 "as a connection of its own: $1"
		diag "session: $a" "its own: $b"
	fi
}

psql_val "CREATE TABLE session_rows (v int)" >/dev/null
same "SELECT g, 'a' || chr(10) || 'b', NULL FROM generate_series(1, 3) g"
same "SELECT 1/0"
same "SELECT nosuch"
same "DO \$\$BEGIN RAISE NOTICE 'first'; RAISE WARNING 'then'; END\$\$"
same "SELECT 1 WHERE false"
psql_val "CREATE FUNCTION noisy() RETURNS int LANGUAGE plpgsql AS \$\$BEGIN RAISE NOTICE 'before the row'; RETURN 7; END\$\$" \
	>/dev/null
same "SELECT noisy()"

port=$(psql_val "SELECT inet_client_port()")
is "$(psql_val "SELECT inet_client_port()")" "$port" "the statements share one connection (client port $port)"
pid=$(psql_own "SELECT pid FROM pg_stat_activity WHERE client_port = $port")

seckill_pg_restart
ok "[ $? -eq 0 ]" "the server restarted: the session's connection is gone"
psql_val "INSERT INTO session_rows VALUES (1)"
ok "[ $? -eq 0 ]" "the next statement succeeds, on a new session"
is "$(psql_own "SELECT count(*) FROM session_rows")" 1 "and ran once"
ok "[ -n '$pid' ] && [ \"\$(psql_val \"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid\")\" = 0 ]" \
	"the session before the restart is gone"

out=$(PGPORT=1 psql_val "SELECT 1" 2>&1)
is "$?" 2 "a server it cannot reach: status 2"
ok "[[ \"\$out\" == *'port 1 failed'* ]]" "and psql's error: ${out%%$'\n'*}"

# a statement of a job in the background holds the session for 3 s
psql_val "SELECT pg_sleep(3)" >/dev/null &
job=$!
seckill_wait_for "[ \"\$(psql_own \"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(3)%'\")\" = 1 ]" 5
is "$(psql_val "SELECT 42")" 42 "a statement while the job's runs is answered"
ok "kill -0 $job" "before the job's ended: it did not wait for it"
wait "$job"
ok "[ $? -eq 0 ]" "the job's statement ended well"

# a job killed in the middle of its statement leaves the sessions' lock
# behind: the next statement, of a subshell too, takes it back and runs in
# the session, once the statement the job left is done
port=$(psql_val "SELECT inet_client_port()")
psql_val "SELECT pg_sleep(1)" >/dev/null &
job=$!
seckill_wait_for "[ \"\$(psql_own \"SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(1)%'\")\" = 1 ]" 5
{ kill -KILL "$job" && wait "$job"; } 2>/dev/null
ok "[ \"\$(cat '$PSQL_DIR/lock' 2>/dev/null)\" = $job ]" "a job killed in its statement leaves the sessions' lock behind"
is "$(psql_val "SELECT inet_client_port()")" "$port" "the next statement, of a subshell, takes it back and runs in the session"
ok "[ ! -e '$PSQL_DIR/lock' ] && [ ! -e '$PSQL_DIR/lock.take' ]" "and gives it back"

# what a psql that ended left unread in its FIFO is drained to the last
# byte, however long the reading takes (bash reads a pipe a byte at a
# time: 60 KB, about what a FIFO holds, take longer than a read's timeout
# of 50 ms), and the next statement runs alone in a new session
psql_val "SELECT 1" >/dev/null
read -r pid <"$PSQL_DIR/pid.$PSQL_SLOT"
kill "$pid"
seckill_wait_for "! psql_session_alive $pid" 5
head -c 60000 /dev/zero | tr '\0' x >&"${PSQL_REQ[PSQL_SLOT]}"
psql_session_drain
left=$(timeout 1 cat <&"${PSQL_REQ[PSQL_SLOT]}" | wc -c)
is "$left" 0 "a session's leftover of 60 KB drained to the last byte"
is "$(psql_val "SELECT 'alone'" 2>&1)" alone "the next statement runs alone in a new session"

scans() { psql_own "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'session_rows'"; }
before=$(scans)
psql_val "SELECT count(*) FROM session_rows" >/dev/null
is "$(scans)" $((before + 1)) "a scan through the session is in the statistics at once"
done_testing
