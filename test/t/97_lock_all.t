#!/usr/bin/env bash
# seckill_lock_all and seckill_unlock_all: several locks as one, all of them
# or none.  Bad arguments are refused with nothing held; the tokens come in
# the order of the names; 1,000 takings of two names in opposite orders by
# two sessions never deadlock nor time out; 32 sessions taking overlapping
# pairs of four names round a ring (a circle of waits for any taker in the
# given order) each update both pairs' counters in separate statements, and
# no update is lost.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
held() { psql_val "SELECT count(*) FROM seckill.locks WHERE name LIKE '$1%'"; }

# --- bad arguments ------------------------------------------------------------
refused() { # sql sqlstate message-part label
	local out
	out=$(psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$1" 2>&1)
	ok "[ \$? -ne 0 ] && grep -q 'ERROR:  $2' <<<\"\$out\" && grep -q '$3' <<<\"\$out\"" "$4" ||
		diag "$out"
}
refused "SELECT seckill_lock_all(NULL)" 22004 "names must not be null" "names NULL: refused"
refused "SELECT seckill_lock_all('{}')" 22023 "names must hold 1 to 100 lock names" "no names: refused"
refused "SELECT seckill_lock_all(ARRAY['bad-1', NULL])" 22004 "must not hold a null" "a null name: refused"
refused "SELECT seckill_lock_all(ARRAY['bad-1', 'bad-2', 'bad-1'])" 22023 'holds lock "bad-1" twice' \
	"a name twice: refused"
refused "SELECT seckill_lock_all(ARRAY['bad-1', ''])" 22023 "lock name 2 of names is empty" "an empty name: refused"
refused "SELECT seckill_lock_all(ARRAY['bad-1', repeat('x', 129)])" 22001 "lock name 2 of names is too long" \
	"a name too long: refused"
refused "SELECT seckill_lock_all(ARRAY[['bad-1', 'bad-2'], ['bad-3', 'bad-4']])" 2202E "one-dimensional" \
	"a two-dimensional array: refused"
refused "SELECT seckill_lock_all(array_agg('bad-' || k)) FROM generate_series(1, 101) k" 22023 "It holds 101" \
	"101 names: refused"
refused "SELECT seckill_lock_all(ARRAY['bad-1'], '2 days')" 22023 "wait must be between 0 and one day" \
	"a wait of two days: refused"
refused "SELECT seckill_lock_all(ARRAY['bad-1'], '0', '10 ms')" 22023 "lease must be at least 100 ms" \
	"a lease of 10 ms: refused"
refused "SELECT seckill_unlock_all(ARRAY['bad-1', 'bad-1'])" 22023 'holds lock "bad-1" twice' \
	"seckill_unlock_all: a name twice refused"
is "$(held bad-)" 0 "after the refusals no lock is held"

# --- the tokens, in the order of the names -------------------------------------
is "$(psql -XAtq -v ON_ERROR_STOP=1 <<'SQL'
SELECT seckill_lock_all(ARRAY['ord-c', 'ord-a', 'ord-b']) AS tokens \gset
SELECT bool_and(l.token = (:'tokens'::bigint[])[i]) AND count(*) = 3
FROM unnest(ARRAY['ord-c', 'ord-a', 'ord-b']) WITH ORDINALITY AS n(name, i)
JOIN seckill.locks l ON l.name = n.name AND l.owner_pid = pg_backend_pid();
SELECT seckill_unlock_all(ARRAY['ord-a', 'ord-c', 'ord-b']);
SQL
)" "$(printf 't\nt')" "the tokens come in the order of the names; all three released"
is "$(held ord-)" 0 "none held after the session"

# --- opposite orders, 1,000 times ---------------------------------------------
for order in "opp-x', 'opp-y" "opp-y', 'opp-x"; do
	cat >"$work/${order:4:1}.sql" <<SQL
SELECT 1 / (seckill_lock_all(ARRAY['$order'], '10 s') IS NOT NULL)::int;
SELECT seckill_unlock_all(ARRAY['$order']);
SQL
done
t0=$(seckill_now_ms)
pgbench -n -c 2 -j 2 -t 500 -f "$work/x.sql" -f "$work/y.sql" >"$work/opposite.out" 2>&1
rc=$?
t1=$(seckill_now_ms)
ok "[ $rc -eq 0 ] && grep -q 'number of transactions actually processed: 1000/1000' '$work/opposite.out'" \
	"two sessions took opposite orders 1,000 times: none timed out ($((t1 - t0)) ms in all)" ||
	diag "$(tail -5 "$work/opposite.out")"
is "$(held opp-)" 0 "none held afterwards"

# --- 32 sessions round a ring of four names -----------------------------------
psql_val "DROP TABLE IF EXISTS lock_ring; CREATE TABLE lock_ring (k int PRIMARY KEY, n int NOT NULL);
	INSERT INTO lock_ring SELECT k, 0 FROM generate_series(1, 4) k" >/dev/null
cat >"$work/ring.sql" <<'SQL'
\set a random(1, 4)
\set b :a % 4 + 1
SELECT 1 / (seckill_lock_all(ARRAY['ring-' || :a, 'ring-' || :b], '20 s') IS NOT NULL)::int;
SELECT n AS na FROM lock_ring WHERE k = :a \gset
SELECT n AS nb FROM lock_ring WHERE k = :b \gset
UPDATE lock_ring SET n = :na + 1 WHERE k = :a;
UPDATE lock_ring SET n = :nb + 1 WHERE k = :b;
SELECT seckill_unlock_all(ARRAY['ring-' || :b, 'ring-' || :a]);
SQL
pgbench -n -c 32 -j 2 -T 8 -f "$work/ring.sql" >"$work/ring.out" 2>&1
rc=$?
done_n=$(sed -nE 's/^number of transactions actually processed: ([0-9]+).*/\1/p' "$work/ring.out")
ok "[ $rc -eq 0 ] && [ \"\${done_n:-0}\" -ge 200 ] && grep -q 'number of failed transactions: 0' '$work/ring.out'" \
	"32 sessions took overlapping pairs round the ring: ${done_n:-0} takings, none timed out" ||
	diag "$(tail -5 "$work/ring.out")"
is "$(psql_val "SELECT sum(n) FROM lock_ring")" "$((2 * ${done_n:-0}))" \
	"every taking updated both counters of its pair: no update lost"
is "$(held ring-)" 0 "none held afterwards"
psql_val "DROP TABLE lock_ring" >/dev/null

done_testing
