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
done_testing
