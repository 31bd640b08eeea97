#!/usr/bin/env bash
# The worker as a Redis ACL user limited to seckill's keys and commands, its
# password in a 0600 file: purchases work, and the secret shows in no log
# line, no setting a non-superuser can read, no error message, and in no
# byte of the worker's memory once it is sent.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

goods=auth-$(date +%s)-$$
secret="S3cret-$RANDOM-$RANDOM"
wrong="Wr0ng-$RANDOM-$RANDOM"
log=$SECKILL_TMP/postgresql.log
trap 'seckill_configure "RESET seckill.redis_user" "RESET seckill.redis_password_file" >/dev/null 2>&1
	seckill_redis_cli ACL DELUSER seckill >/dev/null 2>&1' EXIT

# the ACL the README documents, as it stands there: it grants every command
# seckill's Lua scripts call
readme_acl=$(grep -m 1 '^ACL SETUSER seckill on >the-password ' "$(dirname "$0")/../../README.md")
ok "[ -n \"\$readme_acl\" ]" "the README gives an ACL line for user seckill"
missing=
for cmd in $(grep -ohE "redis\.p?call\('[A-Za-z]+'" "$(dirname "$0")"/../../lua/*.lua | sed -E "s/.*\('//; s/'//" | tr A-Z a-z | sort -u); do
	[[ " $readme_acl " == *" +$cmd "* ]] || missing="$missing $cmd"
done
is "${missing:-none}" none "the README's ACL grants every command of lua/*.lua"
set -f
read -ra acl <<<"${readme_acl/>the-password/>$secret}"
set +f
is "$(seckill_redis_cli "${acl[@]}")" OK "Redis ACL user seckill created from the README's line"

password_file() { # name content mode
	printf '%s\n' "$2" >"$SECKILL_TMP/$1"
	chown postgres "$SECKILL_TMP/$1"
	chmod "$3" "$SECKILL_TMP/$1"
}
use_settings() { # user file
	seckill_configure "SET seckill.redis_user = '$1'" "SET seckill.redis_password_file = '$SECKILL_TMP/$2'"
}

password_file good.pass "$secret" 600
use_settings seckill good.pass
ok "[ $? -eq 0 ]" "settings reloaded"
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
is "$(psql_val "SELECT seckill_campaign_create('$goods', 5) > 0")" t "campaign created"
is "$(psql_val "SELECT seckill_preheat('$goods')")" 5 "preheat works as the ACL user"
is "$(psql_val "SELECT status FROM seckill_buy('alice', '$goods')")" ok "a purchase works as the ACL user"
is "$(psql_val "SELECT status FROM seckill_buy('alice', '$goods')")" duplicate "and a duplicate"
psql_val "SELECT seckill_campaign_set('$goods', '{\"user_rate\": 0.01, \"user_burst\": 1, \"token_required\": true}')" >/dev/null
is "$(psql_val "SELECT status FROM seckill_buy('carol', '$goods', 1, seckill_token('carol', '$goods'))")" ok \
	"a purchase with a token and a rate limit works as the ACL user"
is "$(psql_val "SELECT status FROM seckill_buy('carol', '$goods', 1, seckill_token('carol', '$goods'))")" rate_limited \
	"and its rate limit"
psql_val "SELECT seckill_campaign_set('$goods', '{\"user_rate\": null, \"token_required\": false}')" >/dev/null
ok "seckill_redis_cli CLIENT LIST | grep -q 'user=seckill'" "the worker is connected as user seckill"
is "$(psql_val "SELECT repaired FROM seckill_reconcile('$goods')")" f "reconcile works as the ACL user"

# every lock kind as the ACL user, each taken, waited for and released
lk="acl-lock-$$"
# (session locks: taken and released in one session)
is "$(psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT seckill_lock('$lk-x') IS NOT NULL, seckill_lock('$lk-l', lease => '5 s') IS NOT NULL,
	seckill_lock_fair('$lk-f') IS NOT NULL, seckill_lock_shared('$lk-s') IS NOT NULL,
	seckill_lock_all(ARRAY['$lk-a', '$lk-b']) IS NOT NULL" \
	-c "SELECT seckill_unlock('$lk-x') AND seckill_unlock('$lk-l') AND seckill_unlock('$lk-f')
	AND seckill_unlock_shared('$lk-s') AND seckill_unlock_all(ARRAY['$lk-a', '$lk-b'])" | tr '\n' ' ')" "t|t|t|t|t t " \
	"seckill_lock (watchdog and lease), _fair, _shared and _all as the ACL user, each released"
is "$(psql_val "BEGIN; SELECT seckill_lock_xact('$lk-tx') IS NOT NULL AND seckill_lock_shared_xact('$lk-ts') IS NOT NULL; COMMIT")" t \
	"seckill_lock_xact and seckill_lock_shared_xact as the ACL user"
for kind in fair shared ''; do
	fn=seckill_lock${kind:+_$kind}
	session_hold "SELECT seckill_lock${kind:+_$kind}('$lk-w${kind}');"
	if [ "$kind" = shared ]; then
		# a shared holder keeps an exclusive taker out
		is "$(psql_val "SELECT seckill_lock('$lk-w$kind', '300 ms') IS NULL")" t "a wait on a lock held shared times out as the ACL user"
	else
		is "$(psql_val "SELECT $fn('$lk-w$kind', '300 ms') IS NULL")" t "a wait for $fn times out as the ACL user"
	fi
	session_end "SELECT 1;"
	is "$(psql_val "SELECT $fn('$lk-w$kind', '5 s') IS NOT NULL")" t "$fn is granted once its holder left"
done

# a wrong password: a clear error that names neither password
password_file wrong.pass "$wrong" 600
use_settings seckill wrong.pass
err=$(psql_val "SELECT status FROM seckill_buy('bob', '$goods')" 2>&1)
ok "[[ \"\$err\" == *'refused the credentials'* ]]" "a wrong password gives a clear error: ${err//$'\n'/ }"
ok "[[ \"\$err\" != *\"\$wrong\"* && \"\$err\" != *\"\$secret\"* ]]" "the error names no password"

# a password file others can read is refused
password_file open.pass "$secret" 644
use_settings seckill open.pass
err=$(psql_val "SELECT status FROM seckill_buy('bob', '$goods')" 2>&1)
ok "[[ \"\$err\" == *'chmod 600'* ]]" "a world-readable password file is refused"
# what application roles read names the setting, never its value
psql -XAtq -c "DROP ROLE IF EXISTS seckill_app" -c "CREATE ROLE seckill_app" \
	-c "GRANT USAGE ON SCHEMA seckill TO seckill_app" -c "GRANT SELECT ON seckill.campaigns, seckill.orders TO seckill_app" \
	-c "GRANT EXECUTE ON FUNCTION seckill_buy(text, text, int) TO seckill_app" >/dev/null
err=$(psql -XAtq -c "SET ROLE seckill_app" -c "\\set VERBOSITY verbose" -c "SELECT status FROM seckill_buy('bob', '$goods')" 2>&1)
ok "[[ \"\$err\" == *'seckill.redis_password_file'* && \"\$err\" != *\"\$SECKILL_TMP\"* && \"\$err\" != *'open.pass'* ]]" \
	"an application role's error names the setting, not the file: ${err//$'\n'/ }"
nodes=$(psql_val "SELECT string_agg(coalesce(error, ''), ';') FROM seckill.redis_nodes")
ok "[[ \"\$nodes\" != *'open.pass'* && \"\$nodes\" != *'\"seckill\"'* ]]" "seckill.redis_nodes names neither the file nor the user: $nodes"
psql -XAtq -c "DROP OWNED BY seckill_app" -c "DROP ROLE seckill_app" >/dev/null

# back to the good file: purchases resume
use_settings seckill good.pass
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('bob', '$goods')\" 2>/dev/null)\" = ok ]" 10
ok "[ $? -eq 0 ]" "purchases resume with the right password"

# An ACL that refuses a command the journal replay needs: the purchases fail
# with Redis' own answer, and the worker keeps its connection rather than
# reconnecting in a loop; once the ACL is mended, sales resume by themselves.
seckill_redis_cli ACL SETUSER seckill -hgetall >/dev/null
connections=$(seckill_redis_cli INFO stats | tr -d '\r' | sed -n 's/^total_connections_received://p')
seckill_redis_cli CLIENT KILL USER seckill >/dev/null
refusals=0
refused() {
	local err
	err=$(psql_val "SELECT status FROM seckill_buy('nohgetall-$refusals', '$goods')" 2>&1)
	refusals=$((refusals + 1))
	[[ "$err" == *NOPERM*hgetall* ]]
}
seckill_wait_for refused 10
ok "[ $? -eq 0 ]" "without HGETALL, a purchase fails with Redis' NOPERM for it"
# three seconds of calls, each refused
started=$(seckill_now_ms)
all_refused=1
while [ $(($(seckill_now_ms) - started)) -lt 3000 ]; do
	refused || all_refused=0
done
ok "[ $all_refused -eq 1 ]" "each of $refusals calls is refused the same way"
# less this test's own two (CLIENT KILL, and the INFO that counts); the
# worker's reconnection after the kill makes one or two (with its subscription)
made=$(($(seckill_redis_cli INFO stats | tr -d '\r' | sed -n 's/^total_connections_received://p') - connections - 2))
ok "[ $made -le 4 ]" "no reconnect storm: the worker made $made connection(s) in 3 s"
seckill_redis_cli ACL SETUSER seckill +hgetall >/dev/null
seckill_wait_for "[ \"\$(psql_val \"SELECT status FROM seckill_buy('hgetall-back', '$goods')\" 2>/dev/null)\" = ok ]" 10
ok "[ $? -eq 0 ]" "with HGETALL granted again, purchases resume by themselves"

# a sale as the ACL user: 64 connections, then the invariants
# shellcheck source=test/t/sale.sh
. "$(dirname "$0")/sale.sh"
sale_begin "$goods-sale" 3000
sale_crowd 3 acl
wait "$SALE_CROWD"
ok "grep -q 'number of failed transactions: 0' '$SALE_WORK/acl.out'" "a 64-connection sale as the ACL user"
sale_finish

# the secret is nowhere to be read
ok "! grep -q -e '$secret' -e '$wrong' '$log'" "the server log holds neither password"
# nor the worker's own memory, after its connections, its subscription and
# its reconnections sent them: AUTH goes to the socket past hiredis' buffers,
# which are freed and grown uncleared, and every copy made is cleared
copies=$(python3 - "$(seckill_worker_pid)" "$secret" "$wrong" <<'PY'
import re
import sys

pid, needles = sys.argv[1], [a.encode() for a in sys.argv[2:]]
found = []
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
    for line in maps:
        span, perms = line.split()[:2]
        if perms != "rw-p":
            continue
        lo, hi = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except OSError:
            continue
        found += [f"{n.decode()}@{lo + m.start():#x}" for n in needles for m in re.finditer(re.escape(n), data)]
print(len(found), *found[:5])
PY
)
is "${copies%% *}" 0 "the worker's memory holds no copy of either password (its private mappings scanned: $copies)"
is "$(psql_val "SELECT count(*) FROM pg_settings WHERE setting LIKE '%$secret%'")" 0 "no setting holds the password"
psql -XAtq -c "DROP ROLE IF EXISTS seckill_reader" -c "CREATE ROLE seckill_reader" >/dev/null
err=$(psql -XAtq -c "SET ROLE seckill_reader" -c "SHOW seckill.redis_password_file" 2>&1)
ok "[[ \"\$err\" == *'permission denied'* || \"\$err\" == *'must be superuser'* ]]" \
	"a non-superuser cannot read the password file's name: ${err//$'\n'/ }"
psql -XAtq -c "DROP ROLE seckill_reader" >/dev/null
psql_val "SELECT seckill_close('$goods')" >/dev/null
done_testing
