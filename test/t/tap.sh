# shellcheck shell=bash
# A small TAP producer for the bash tests under test/t, which run against the
# servers that test/run.sh started for them (the environment says where).
# Source it; then plan N (or done_testing at the end), ok, is, diag.

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

TAP_COUNT=0
TAP_FAILED=0
TAP_PLANNED=

plan() {
	TAP_PLANNED=$1
	echo "1..$1"
}

# diag message...: to stderr, as Test::More does, so prove shows it.
diag() {
	printf '%s\n' "$@" | sed 's/^/# /' >&2
}

# note message...: to stdout, shown by prove -v only.
note() {
	printf '%s\n' "$@" | sed 's/^/# /'
}

tap_result() {
	local passed=$1 desc=${2//#/\\#}
	TAP_COUNT=$((TAP_COUNT + 1))
	if [ "$passed" = 1 ]; then
		echo "ok $TAP_COUNT - $desc"
	else
		echo "not ok $TAP_COUNT - $desc"
		# on stderr too, as Test::More does: prove -j shows no "not ok" line
		diag "  Failed test $TAP_COUNT of ${0##*/}: $2"
		TAP_FAILED=$((TAP_FAILED + 1))
	fi
}

# ok 'shell condition' description
ok() {
	if eval "$1"; then
		tap_result 1 "$2"
	else
		tap_result 0 "$2"
		diag "  failed: $1"
		return 1
	fi
}

# is got expected description
is() {
	if [ "$1" = "$2" ]; then
		tap_result 1 "$3"
	else
		tap_result 0 "$3"
		diag "       got: '$1'" "  expected: '$2'"
		return 1
	fi
}

psql_val() {
	psql -XAtq -v ON_ERROR_STOP=1 -c "$1"
}

# session_hold "SQL": a psql session in the background that runs the SQL and
# stays open, in its transaction if the SQL began one.  Its process is
# SESSION_PID; its output goes to SESSION_OUT, with a line pid=<its backend's
# pid> once the SQL ran.  session_end "SQL" sends the last SQL and waits.
SESSION_PID=
session_hold() {
	SESSION_DIR=$(mktemp -d -p "$SECKILL_TMP")
	SESSION_OUT=$SESSION_DIR/out
	mkfifo "$SESSION_DIR/in"
	psql -XAtq <"$SESSION_DIR/in" >"$SESSION_OUT" 2>&1 &
	SESSION_PID=$!
	exec 7>"$SESSION_DIR/in"
	echo "$1 SELECT 'pid=' || pg_backend_pid();" >&7
	seckill_wait_for "grep -q '^pid=' '$SESSION_OUT'" 10
}
session_end() {
	echo "$1" >&7
	exec 7>&-
	wait "$SESSION_PID"
	SESSION_PID=
}

# Ends the test: prints the plan if none was given and exits with the number
# of failures, after the servers' last log lines when something failed.
# ports_free setting port...: for a test's servers of its own; bail out when a
# port is taken (setting: the variable that moves them)
ports_free() {
	local setting=$1 port
	shift
	for port in "$@"; do
		if ! seckill_port_free "$port"; then
			echo "Bail out! port $port is in use (set $setting)"
			exit 255
		fi
	done
}

# done_testing_with_logs lines file...: done_testing, showing first the last
# lines of those servers' logs when a check failed
done_testing_with_logs() {
	local lines=$1 f
	shift
	if [ "$TAP_FAILED" -gt 0 ]; then
		for f in "$@"; do
			[ -s "$f" ] && diag "----- last lines of $f -----" "$(tail -n "$lines" "$f")"
		done
	fi
	done_testing
}

done_testing() {
	[ -n "$TAP_PLANNED" ] || echo "1..$TAP_COUNT"
	if [ "$TAP_FAILED" -gt 0 ]; then
		diag "$(seckill_print_logs 30)"
	fi
	exit $((TAP_FAILED > 254 ? 254 : TAP_FAILED))
}

if [ -z "${SECKILL_TMP:-}" ] || ! seckill_pg_ready; then
	echo "Bail out! no seckill test servers here: run bash scripts/test.sh"
	exit 255
fi
