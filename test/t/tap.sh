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
	note "$@" >&2
}

# note message...: to stdout, shown by prove -v only.
note() {
	local text line
	printf -v text '%s\n' "$@"
	while IFS= read -r line; do
		printf '# %s\n' "$line"
	done <<<"${text%$'\n'}"
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

# psql_val SQL: the rows of one SQL statement as psql -XAtq -c prints them,
# its notices and errors on stderr, status 1 when it failed and 2 when the
# server could not be reached.  A new connection costs this machine about
# 50 ms of CPU (psql's start, the backend's fork), so psql_val sends its
# statement through one psql session kept open for the test (psql_session),
# unless that could change what the statement does: several statements,
# psql's own commands, what leaves something behind in a session or looks
# at the sessions (PSQL_OWN_CONNECTION), or every statement when
# SECKILL_PSQL_SESSION=0.  Those get a connection of their own.
PSQL_OWN_CONNECTION="[;\\]|seckill_[a-z_]*lock|advisory|set_config|backend_pid|pg_stat_activity|terminate|cancel_backend"
PSQL_OWN_CONNECTION+="|(^|[^a-z_])temp(orary)?[[:space:]]|listen|notify|prepare|declare|cursor|copy|stdin|reload_conf|dblink"
PSQL_OWN_CONNECTION+="|^[[:space:]]*(set|reset|begin|start|discard|alter[[:space:]]+(database|role|user|system))"
# library_number: the library's own number, after the SQL version
# (SECKILL_LIBRARY_VERSION in src/seckill.h); empty when it is not one
library_number() {
	sed -n 's/^#define SECKILL_LIBRARY_VERSION SECKILL_SQL_VERSION "\.\([0-9]*\)"$/\1/p' "$SECKILL_ROOT/src/seckill.h"
}

psql_val() {
	local quotes=${1//[^\']/}
	if [ "${SECKILL_PSQL_SESSION:-1}" = 1 ] && [ $((${#quotes} % 2)) = 0 ] && ! [[ ${1,,} =~ $PSQL_OWN_CONNECTION ]]; then
		psql_session "$1"
	else
		psql_own "$1"
	fi
}
# psql_own SQL: the statement on a connection of its own
psql_own() { psql -XAtq -v ON_ERROR_STOP=1 -c "$1"; }

# The sessions: psqls reading statements from a FIFO and writing rows to
# another, each statement followed by an \echo of a marker and :ERROR, their
# stderr in a file; one for each PG* environment the test uses (the servers
# it talks to), up to PSQL_SLOTS at once.  The test's shell holds the FIFOs
# open, so a psql reads EOF and ends when the test and everything it
# started have ended.  Every subshell of the test ($(psql_val ...), a job in
# the background) uses them, one statement at a time: a statement that
# comes while another is under way gets a connection of its own, and never
# waits for it.  A session starts on first use, and again when it ended (a
# server restarted, its connection killed: psql ends when it finds its
# connection lost).  A ping goes first, and the statement counts as sent
# once the ping came back, so none is run twice, and one that meets a lost
# connection fails with status 2, as on a connection of its own.
PSQL_SLOTS=4
PSQL_DIR=$(mktemp -d -p "${SECKILL_TMP:-/tmp}" psql.XXXXXX)
PSQL_REQ=()
PSQL_RESP=()
for ((PSQL_SLOT = 0; PSQL_SLOT < PSQL_SLOTS; PSQL_SLOT++)); do
	mkfifo "$PSQL_DIR/req.$PSQL_SLOT" "$PSQL_DIR/resp.$PSQL_SLOT"
	exec {PSQL_REQ[PSQL_SLOT]}<>"$PSQL_DIR/req.$PSQL_SLOT" {PSQL_RESP[PSQL_SLOT]}<>"$PSQL_DIR/resp.$PSQL_SLOT"
done
psql_session() {
	local key= v pid= fresh=0 marker=psql-session-$BASHPID-$RANDOM rc=0
	for v in ${!PG*}; do key+="$v=${!v} "; done
	if ! psql_session_lock; then
		psql_own "$1"
		return
	fi
	psql_session_slot "$key"
	[ -s "$PSQL_DIR/pid.$PSQL_SLOT" ] && read -r pid <"$PSQL_DIR/pid.$PSQL_SLOT"
	while :; do
		# (before a new psql starts: what it says when it cannot connect is kept)
		: >"$PSQL_DIR/err.$PSQL_SLOT"
		if ! psql_session_alive "$pid"; then
			psql_session_start "$key"
			read -r pid <"$PSQL_DIR/pid.$PSQL_SLOT"
			fresh=1
		fi
		# (then its statistics flushed, as at the end of a connection of
		# its own, for a statement that reads them next)
		printf 'SELECT 1 \\g /dev/null\n\\echo %s-ping\n%s\n;\n\\set psql_session_error :ERROR\n%s\n\\echo %s :psql_session_error\n' \
			"$marker" "$1" 'SELECT pg_stat_force_next_flush() \g /dev/null' "$marker" >&"${PSQL_REQ[PSQL_SLOT]}"
		PSQL_OUT=
		if ! psql_session_read "$pid" "$marker-ping"; then
			psql_session_drain
			# the connection was lost before the statement: a new session,
			# unless this one was new, as a connection of its own would fail
			[ $fresh = 1 ] && rc=2 && break
			pid=
			continue
		fi
		PSQL_OUT=
		if psql_session_read "$pid" "$marker"; then
			[ "${PSQL_LINE#"$marker "}" = true ] && rc=1
		else
			psql_session_drain
			rc=2
		fi
		break
	done
	[ -s "$PSQL_DIR/err.$PSQL_SLOT" ] &&
		while IFS= read -r v; do printf '%s\n' "$v"; done <"$PSQL_DIR/err.$PSQL_SLOT" >&2
	unlink "$PSQL_DIR/lock"
	[ -n "$PSQL_OUT" ] && printf '%s' "$PSQL_OUT"
	return $rc
}
# psql_session_lock: the sessions' lock taken, a file holding the taker's
# BASHPID that is created only where there is none (flock would cost a
# process a statement); false while another shell holds it.  A shell killed
# while it held it leaves it behind: the next to find it so takes it back,
# one shell at a time (lock.take, made as the lock is), and only while the
# lock still names the shell that ended.
psql_session_lock() {
	local - holder= again= rc
	set -C
	{ echo "$BASHPID" >"$PSQL_DIR/lock"; } 2>/dev/null && return 0
	{ read -r holder <"$PSQL_DIR/lock"; } 2>/dev/null && [ -n "$holder" ] && ! psql_session_alive "$holder" &&
		{ echo "$BASHPID" >"$PSQL_DIR/lock.take"; } 2>/dev/null || return 1
	{ read -r again <"$PSQL_DIR/lock"; } 2>/dev/null && [ "$again" = "$holder" ] && unlink "$PSQL_DIR/lock" &&
		{ echo "$BASHPID" >"$PSQL_DIR/lock"; } 2>/dev/null
	rc=$?
	unlink "$PSQL_DIR/lock.take"
	return $rc
}
# psql_session_slot key: PSQL_SLOT, the slot of the session for that key;
# else a free slot, else the next in turn, its session ended
psql_session_slot() {
	local slot old free= pid
	for ((slot = 0; slot < PSQL_SLOTS; slot++)); do
		old=
		[ -s "$PSQL_DIR/key.$slot" ] && IFS= read -r old <"$PSQL_DIR/key.$slot"
		[ "$old" = "$1" ] && PSQL_SLOT=$slot && return
		[ -z "$old" ] && [ -z "$free" ] && free=$slot
	done
	if [ -z "$free" ]; then
		read -r free <"$PSQL_DIR/turn" 2>/dev/null || free=0
		echo $(((free + 1) % PSQL_SLOTS)) >"$PSQL_DIR/turn"
		{ read -r pid <"$PSQL_DIR/pid.$free" && kill "$pid"; } 2>/dev/null
		rm -f "$PSQL_DIR/pid.$free"
	fi
	PSQL_SLOT=$free
	printf '%s\n' "$1" >"$PSQL_DIR/key.$PSQL_SLOT"
}
# psql_session_start: the slot's psql, none of the test's other files open
# in it, not a child of the shell (wait waits not for it)
psql_session_start() {
	(
		for v in /proc/$BASHPID/fd/*; do
			v=${v##*/}
			[ "$v" -gt 2 ] && eval "exec $v>&-"
		done
		psql -XAtq <"$PSQL_DIR/req.$PSQL_SLOT" >"$PSQL_DIR/resp.$PSQL_SLOT" 2>>"$PSQL_DIR/err.$PSQL_SLOT" &
		echo $! >"$PSQL_DIR/pid.$PSQL_SLOT"
	)
}
# psql_session_read pid marker: PSQL_OUT gains the lines before the one that
# begins with marker (in PSQL_LINE); false when the session ended first
psql_session_read() {
	local part=
	while :; do
		if IFS= read -r -t 1 -u "${PSQL_RESP[PSQL_SLOT]}" PSQL_LINE; then
			PSQL_LINE=$part$PSQL_LINE
			part=
			[[ $PSQL_LINE == "$2"* ]] && return 0
			PSQL_OUT+=$PSQL_LINE$'\n'
		else
			part+=$PSQL_LINE
			psql_session_alive "$1" || return 1
		fi
	done
}
# psql_session_alive pid: that psql runs (an ended one may stay a zombie
# for a while: init reaps it)
psql_session_alive() {
	local state=
	[ -n "$1" ] && { read -r _ _ state _ <"/proc/$1/stat"; } 2>/dev/null && [ "$state" != Z ]
}
# what a session that ended left in its FIFOs
# (bash reads a pipe a byte at a time: a read that times out in the middle
# of what is there keeps what it read and leaves the rest, so the drain
# goes on until a read finds nothing)
psql_session_drain() {
	local part
	while part=; IFS= read -r -d '' -t 0.05 -u "${PSQL_REQ[PSQL_SLOT]}" part || [ -n "$part" ]; do :; done
	while part=; IFS= read -r -d '' -t 0.05 -u "${PSQL_RESP[PSQL_SLOT]}" part || [ -n "$part" ]; do :; done
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
