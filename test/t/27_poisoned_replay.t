#!/usr/bin/env bash
# One campaign cannot stop the others: the journal replay after a new
# connection is settled campaign by campaign.  A campaign whose replay Redis
# refuses (here its journal key holds a string, as after an operator's
# mistake) does not sell and says why, its replay is tried again every
# second, and every other campaign sells meanwhile; once the key is mended,
# it sells again by itself.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

log=$SECKILL_TMP/postgresql.log
tag="$(date +%s)-$$"
a="poisoned-$tag" b="healthy-$tag"
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
buy() { psql_val "SELECT status FROM seckill_buy('$1', '$2')" 2>&1; }
for g in "$a" "$b"; do
	is "$(psql_val "SELECT seckill_campaign_create('$g', 100) > 0")" t "campaign $g"
	is "$(psql_val "SELECT seckill_preheat('$g')")" 100 "preheated"
	is "$(buy "$g-first" "$g")" ok "it sells"
done
id=$(psql_val "SELECT id FROM seckill.campaigns WHERE goods = '$a'")
prefix=$(psql_val "SHOW seckill.redis_prefix")
journal="$prefix:{c:$id}:journal"

# a journal Redis cannot read as one, then a new connection: a replay
seckill_redis_cli DEL "$journal" >/dev/null
is "$(seckill_redis_cli SET "$journal" garbage)" OK "the journal of $a overwritten with a string"
seckill_redis_cli CLIENT KILL TYPE normal >/dev/null
n=0
seckill_wait_for "n=\$((n + 1)); [ \"\$(buy \"$b-fresh-\$n\" '$b')\" = ok ]" 10
ok "[ $? -eq 0 ]" "$b sells after the replay ($n call(s))"
ok "grep -q 'could not replay the journal of campaign $id' '$log'" "the refused replay of $a is logged"
err=$(buy "$a-late" "$a")
ok "[[ \"\$err\" == *'journal of this campaign cannot be replayed'* && \"\$err\" == *WRONGTYPE* ]]" \
	"$a answers why it does not sell: ${err//$'\n'/ }"
for i in 1 2 3; do
	is "$(buy "$b-more-$i" "$b")" ok "$b keeps selling ($i)"
done

seckill_redis_cli DEL "$journal" >/dev/null
n=0
seckill_wait_for "n=\$((n + 1)); [ \"\$(buy \"$a-fresh-\$n\" '$a')\" = ok ]" 10
ok "[ $? -eq 0 ]" "once the key is mended, $a sells again by itself ($n call(s))"
ok "grep -q 'replayed the journal of campaign $id: it sells again' '$log'" "and the log says so"
for g in "$a" "$b"; do
	seckill_wait_for "[ \"\$(psql_val \"SELECT redis_stock = pg_stock AND in_flight = 0 FROM seckill_status('$g')\")\" = t ]" 10
	ok "[ $? -eq 0 ]" "$g: Redis agrees with PostgreSQL"
	psql_val "SELECT seckill_close('$g')" >/dev/null
done
done_testing
