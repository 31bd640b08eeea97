#!/usr/bin/env bash
# The worker runs in the database it serves, and only there.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

is "$(psql_val "SELECT datname FROM pg_stat_activity WHERE backend_type = 'seckill worker'")" postgres \
	"the seckill worker serves seckill.database (postgres)"
psql -XAtq -c "DROP DATABASE IF EXISTS seckill_elsewhere" -c "CREATE DATABASE seckill_elsewhere" >/dev/null
out=$(psql -XAtq -d seckill_elsewhere -c "CREATE EXTENSION seckill" \
	-c "SELECT * FROM seckill_buy('alice', 'anything')" 2>&1)
ok "[[ \"\$out\" == *'seckill serves database \"postgres\" only'* ]]" \
	"another database gets a clear error: ${out//$'\n'/ }"
out=$(psql -XAtq -d seckill_elsewhere -c "SELECT seckill_campaign_create('x', 1)" \
	-c "SELECT seckill_preheat('x')" 2>&1)
ok "[[ \"\$out\" == *'seckill serves database \"postgres\" only'* ]]" "preheat there too"
psql -XAtq -c "DROP DATABASE seckill_elsewhere" >/dev/null

# seckill.max_campaigns (64) preheated at once: the next preheat gets a clear
# error, the worker carries on, and the campaign's lock is not left behind.
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
open=$(psql_val "SELECT count(*) FROM seckill.campaigns WHERE state = 'preheated'")
psql_val "SELECT seckill_campaign_create('cap-' || i, 1) FROM generate_series(1, 64 - $open) i" >/dev/null
is "$(psql_val "SELECT count(seckill_preheat('cap-' || i)) FROM generate_series(1, 64 - $open) i")" \
	$((64 - open)) "64 campaigns preheated"
psql_val "SELECT seckill_campaign_create('cap-over', 1)" >/dev/null
out=$(psql_val "SELECT seckill_preheat('cap-over')" 2>&1)
ok "[[ \"\$out\" == *'too many preheated campaigns'* ]]" "the 65th: ${out//$'\n'/ }"
out=$(psql_val "SELECT seckill_preheat('cap-over')" 2>&1)
ok "[[ \"\$out\" == *'too many preheated campaigns'* ]]" "again: the same error, not a lock left held"
is "$(psql_val "SELECT status FROM seckill_buy('u', 'cap-over')")" not_started "the refused campaign is not on sale"
is "$(psql_val "SELECT count(*) FROM seckill.campaigns c, LATERAL seckill_close(c.goods)
	WHERE c.goods LIKE 'cap-%' AND c.state <> 'closed'")" $((65 - open)) "closed again"
done_testing
