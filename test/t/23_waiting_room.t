#!/usr/bin/env bash
# The waiting room (seckill_queue_join, seckill_queue_status, and the pass
# seckill_buy asks for): joins before the start ordered by a draw that its
# seed fixes, each joined user exactly once; later joins in the order they
# came, also under concurrent load; admission from the head of the line,
# only as many as the stock can serve, stopping at sell-out and resuming on
# a cancel; a pass used twice, an expired pass, a buyer without one; a
# worker restart and a Redis restart mid-line (no place lost, nobody
# admitted out of order); one campaign's line apart from another's; the
# figures in seckill.stats.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

tag="$(date +%s)-$$"
room="room-$tag"
other="other-$tag"
psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
join() { psql_val "SELECT concat_ws('|', state, coalesce(\"position\"::text, ''), coalesce(ticket::text, '')) FROM seckill_queue_join('$1', '$2')"; }
status() { psql_val "SELECT state FROM seckill_queue_status('$1', '$2')"; }
buy() { psql_val "SELECT concat_ws('|', status, order_id) FROM seckill_buy('$1', '$2')"; }
mark() { psql_val "SELECT coalesce((SELECT admitted_through FROM seckill.queue_lines l JOIN seckill.campaigns c
	ON c.id = l.campaign_id WHERE c.goods = '$1'), 0)"; }
# in_order goods: the admitted places are exactly the tickets up to the line's mark
in_order() {
	[ "$(psql_val "SELECT count(*) FILTER (WHERE (p.admitted_at IS NOT NULL) <> (p.ticket <= l.admitted_through)) = 0
		AND count(*) FILTER (WHERE p.admitted_at IS NOT NULL) = l.admitted_through
		FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
		JOIN seckill.queue_lines l ON l.campaign_id = c.id WHERE c.goods = '$1' GROUP BY l.admitted_through")" = t ]
}
isnt() { ok "[ \"$1\" != \"$2\" ]" "$3"; }
# watch_turns: three of the worker's turns at the lines (one each 200 ms)
watch_turns() { psql_val "SELECT pg_sleep(0.6)" >/dev/null; }
# user_of goods ticket
user_of() { psql_val "SELECT p.user_id FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	WHERE c.goods = '$1' AND p.ticket = $2"; }

# A campaign of 5 items whose line opens two hours before its start; at most
# 1 pass out per item left, each valid a minute.
psql_val "SELECT seckill_campaign_create('$room', 5, now() + interval '1 hour', now() + interval '3 hours')" >/dev/null
is "$(psql_val "SELECT seckill_campaign_set('$room', '{\"queue\": {\"pass_ttl\": \"1 minute\", \"admit_factor\": 1,
	\"opens_before\": \"2 hours\", \"seed\": 42}}')->'queue'->>'seed'")" 42 \
	"the waiting room turned on, with the draw's seed"
is "$(psql_val "SELECT seckill_preheat('$room')")" 5 "preheated"

# before the start: places without a number, the same one on a second join
for i in $(seq 1 30); do join "early-$i" "$room" >/dev/null; done
is "$(join early-7 "$room")" "waiting||" "a join before the start waits without a position or a ticket"
is "$(join early-7 "$room")" "waiting||" "a second join answers the same place"
is "$(psql_val "SELECT count(*) FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	WHERE c.goods = '$room' AND p.ticket IS NULL")" 30 "30 early places, none numbered yet"
# a restart empties the shared table of tickets, and the worker reads the
# early places again only at the draw: a second join goes to the worker,
# which looks it up in seckill.queue_places
seckill_pg_restart
seckill_wait_for "[ -n \"\$(seckill_worker_pid 2>/dev/null)\" ]" 30
is "$(join early-9 "$room")" "waiting||" "after a restart, a second join before the start answers the same place"
is "$(psql_val "SELECT count(*) FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	WHERE c.goods = '$room'")" 30 "and takes no place more"
is "$(buy early-1 "$room")" not_started "a purchase before the start: not_started"
seckill_wait_for "[ \"\$(psql_val \"SELECT seckill_storefront_json('$room')::jsonb->>'queue_length'\")\" = 30 ]" 5
ok "[ $? -eq 0 ]" "the storefront shows the line's length: 30"

# the start, brought forward to now by the DBA (and the campaign preheated again)
psql_val "UPDATE seckill.campaigns SET starts_at = now() WHERE goods = '$room'" >/dev/null
is "$(psql_val "SELECT seckill_preheat('$room')")" 5 "the start brought forward to now"
seckill_wait_for "[ \"\$(psql_val \"SELECT l.drawn FROM seckill.queue_lines l JOIN seckill.campaigns c ON c.id = l.campaign_id WHERE c.goods = '$room'\")\" = t ]" 15
ok "[ $? -eq 0 ]" "the early joins drawn at the start"
drawn=$(psql_val "SELECT string_agg(p.user_id, ',' ORDER BY p.ticket) FROM seckill.queue_places p
	JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$room'")
is "$drawn" "$(psql_val "SELECT string_agg(u, ',' ORDER BY hashtextextended(u, 42), u) FROM
	(SELECT 'early-' || i AS u FROM generate_series(1, 30) i) x")" "the draw's order is the one its seed fixes"
isnt "$drawn" "$(seq -f 'early-%g' -s, 1 30)" "and not the order of arrival"
is "$(psql_val "SELECT count(DISTINCT p.ticket) || ' ' || min(p.ticket) || ' ' || max(p.ticket) || ' ' || count(*)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$room'")" \
	"30 1 30 30" "each early join has exactly one ticket of 1..30"

# after the start: the order of arrival
for i in $(seq 1 5); do
	is "$(join "late-$i" "$room" | cut -d'|' -f3)" $((30 + i)) "late-$i joins with ticket $((30 + i))"
done

# admission: 1 pass per item left, from the head of the line
seckill_wait_for "[ \$(mark '$room') -ge 5 ]" 10
ok "[ $? -eq 0 ]" "the line admits from its head"
is "$(mark "$room")" 5 "as many as the 5 items left, no more"
ok "in_order '$room'" "the admitted places are exactly tickets 1..5"
first=$(user_of "$room" 1)
sixth=$(user_of "$room" 6)
is "$(psql_val "SELECT state || ' ' || (admitted_until > now()) FROM seckill_queue_status('$first', '$room')")" "admitted true" \
	"ticket 1 is admitted, with a pass valid until a time to come"
is "$(psql_val "SELECT concat_ws(' ', state, \"position\") FROM seckill_queue_status('$sixth', '$room')")" "waiting 1" \
	"ticket 6 waits, first in line"
psql_val "CREATE ROLE poller_$$; GRANT EXECUTE ON FUNCTION seckill_queue_status(text, text) TO poller_$$" >/dev/null
# poll_as_poller user goods: the state, as a role that cannot read seckill.queue_places
poll_as_poller() { psql -XAtq -c "SET ROLE poller_$$" -c "SELECT state FROM seckill_queue_status('$1', '$2')" 2>&1; }
is "$(poll_as_poller "$sixth" "$room")" waiting \
	"a waiting buyer's poll reads no table: a role without SELECT on seckill.queue_places is told"
is "$(buy "$sixth" "$room")" not_admitted "a buyer still in line: not_admitted"
is "$(buy stranger "$room")" not_admitted "a buyer who never joined: not_admitted"
is "$(status stranger "$room")" not_joined "and its status says not_joined"

# a pass serves one purchase
order=$(buy "$first" "$room")
is "${order%%|*}" ok "ticket 1 buys with its pass"
is "$(buy "$first" "$room")" "duplicate|${order#*|}" "a second purchase with the same pass: duplicate, the same order"
is "$(status "$first" "$room")" used "its status: used"

# a pass that ran out (given an hour ago): the line moves on, in order
second=$(user_of "$room" 2)
psql_val "UPDATE seckill.queue_places p SET admitted_at = admitted_at - interval '1 hour'
	FROM seckill.campaigns c WHERE c.id = p.campaign_id AND c.goods = '$room' AND p.ticket = 2" >/dev/null
is "$(status "$second" "$room")" expired "ticket 2's pass ran out unused: expired"
is "$(buy "$second" "$room")" not_admitted "an expired pass buys nothing"
seckill_wait_for "[ \$(mark '$room') -ge 6 ]" 10
ok "[ $? -eq 0 ]" "its item goes to the next in line (ticket 6)"

# the rest buy as they are admitted, until the stock is gone
bought=1
for t in $(seq 3 35); do
	u=$(user_of "$room" "$t")
	seckill_wait_for "s=\$(status '$u' '$room'); [ \"\$s\" != waiting ]" 15 || break
	s=$(status "$u" "$room")
	[ "$s" = expired ] && continue
	[ "$s" = admitted ] || break
	r=$(buy "$u" "$room")
	[ "${r%%|*}" = ok ] && bought=$((bought + 1))
	[ $bought -eq 5 ] && break
done
is "$bought" 5 "5 admitted buyers bought the 5 items"
ok "in_order '$room'" "every admission so far followed the line"
is "$(psql_val "SELECT count(*) FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = '$room' AND NOT EXISTS (SELECT FROM seckill.queue_places p WHERE p.campaign_id = o.campaign_id
	AND p.user_id = o.user_id AND p.admitted_at IS NOT NULL AND p.admitted_at <= o.created_at)")" 0 \
	"every order was bought with a pass given before it"
last=$(user_of "$room" 35)
seckill_wait_for "[ \"\$(status '$last' '$room')\" = sold_out ]" 10
ok "[ $? -eq 0 ]" "sold out: the last in line reads sold_out at once"
held=$(mark "$room")
watch_turns
is "$(mark "$room")" "$held" "nobody is admitted while the campaign is sold out"

# a cancel gives an item back: the next in line is admitted
next=$(user_of "$room" $((held + 1)))
oid=$(psql_val "SELECT o.id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id
	WHERE c.goods = '$room' ORDER BY o.id LIMIT 1")
psql_val "SELECT seckill_cancel($oid)" >/dev/null
seckill_wait_for "[ \"\$(status '$next' '$room')\" = admitted ]" 10
ok "[ $? -eq 0 ]" "after a cancel the next in line (ticket $((held + 1))) is admitted"
is "$(buy "$next" "$room" | cut -d'|' -f1)" ok "and buys the item given back"

# the figures (expired passes are counted every 5 s)
stats_ok() {
	[ "$(psql_val "SELECT not_admitted >= 3 AND queue_admitted = $(mark "$room") AND queue_expired >= 1 AND queue_length >= 1
		FROM seckill.stats s JOIN seckill.campaigns c ON c.id = s.campaign_id WHERE c.goods = '$room'")" = t ]
}
seckill_wait_for stats_ok 10
ok "[ $? -eq 0 ]" "seckill.stats: not_admitted, the line's length, admissions and expired passes" ||
	diag "$(psql -X -c "SELECT campaign_id, not_admitted, queue_length, queue_admitted, queue_expired, queue_wait_s FROM seckill.stats")"

# a worker restart, a Redis restart and a PostgreSQL restart mid-line lose no place
before=$(psql_val "SELECT string_agg(p.user_id || ':' || p.ticket || ':' || (p.admitted_at IS NOT NULL), ',' ORDER BY p.ticket)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$room'")
pid=$(seckill_worker_pid)
psql_val "SELECT pg_terminate_backend($pid)" >/dev/null
seckill_wait_for "p=\$(seckill_worker_pid); [ -n \"\$p\" ] && [ \"\$p\" != $pid ]" 20
ok "[ $? -eq 0 ]" "the worker restarted"
seckill_redis_restart_empty
ok "[ $? -eq 0 ]" "Redis restarted empty"
seckill_pg_restart
ok "[ $? -eq 0 ]" "PostgreSQL restarted (shared memory empty)"
seckill_wait_for "[ \"\$(poll_as_poller late-5 '$room')\" = sold_out ]" 20
ok "[ $? -eq 0 ]" "the worker read the line's tickets into shared memory again: polls read no table"
is "$(join "late-6" "$room" | cut -d'|' -f3)" 36 "the next join takes the next ticket (36)"
is "$(join "late-2" "$room" | cut -d'|' -f3)" 32 "a buyer who joined before the restarts keeps ticket 32"
is "$(psql_val "SELECT string_agg(p.user_id || ':' || p.ticket || ':' || (p.admitted_at IS NOT NULL), ',' ORDER BY p.ticket)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$room' AND p.ticket < 36")" \
	"$before" "every place and admission is as it was"
ok "in_order '$room'" "and the admissions still follow the line"

# two lines apart: a place in one is no pass in the other
psql_val "SELECT seckill_campaign_create('$other', 3)" >/dev/null
psql_val "SELECT seckill_campaign_set('$other', '{\"queue\": true}')" >/dev/null
psql_val "SELECT seckill_preheat('$other')" >/dev/null
is "$(status "$first" "$other")" not_joined "a buyer of one line has no place in the other"
is "$(buy "$next" "$other")" not_admitted "nor a pass there"
is "$(join "$first" "$other" | cut -d'|' -f3)" 1 "the other line numbers its own places from 1"
seckill_wait_for "[ \"\$(status '$first' '$other')\" = admitted ]" 10
ok "[ $? -eq 0 ]" "and admits from its own head"
is "$(buy "$first" "$other" | cut -d'|' -f1)" ok "where the buyer buys"

# many joins at once: one place each, numbered in the order of commit, no gap
cat >"$SECKILL_TMP/join.sql" <<SQL
\set u random(1, 400)
SELECT * FROM seckill_queue_join('crowd-' || :u, '$other');
SQL
pgbench -n -M prepared -c 8 -j 2 -t 200 -f "$SECKILL_TMP/join.sql" >"$SECKILL_TMP/join.out" 2>&1
ok "[ $? -eq 0 ]" "1,600 joins from 8 clients at once"
is "$(psql_val "SELECT count(*) = max(ticket) AND count(DISTINCT ticket) = count(*) AND count(DISTINCT user_id) = count(*)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$other'")" t \
	"one place per buyer, one buyer per place, numbered without a gap"
is "$(psql_val "SELECT bool_and(joined_at >= prev) FROM (SELECT joined_at, lag(joined_at) OVER (ORDER BY ticket) AS prev
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$other') x
	WHERE prev IS NOT NULL")" t "tickets follow the order of the joins"

# 8 sessions join the same 300 buyers in the same order: joins of one buyer
# meet in the worker's rounds, and every session is told the buyer's one place
for k in 1 2 3 4 5 6 7 8; do
	psql_own "SELECT 'same-' || i, j.ticket FROM generate_series(1, 300) i,
		LATERAL seckill_queue_join('same-' || i, '$other') j" >"$SECKILL_TMP/same.$k" 2>&1 &
done
wait
is "$(cat "$SECKILL_TMP"/same.? | sort -u | wc -l)" 300 "8 sessions joining the same 300 buyers: one ticket each in every answer"
is "$(cat "$SECKILL_TMP"/same.? | sort -u | psql -XAtq -v ON_ERROR_STOP=1 -c "CREATE TEMP TABLE told (user_id text, ticket bigint)" \
	-c "COPY told FROM STDIN (DELIMITER '|')" -c "SELECT count(*) FROM told t JOIN seckill.queue_places p USING (user_id, ticket)
	JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$other'" 2>&1 | tail -1)" 300 "the place each was told is the one stored"
is "$(psql_val "SELECT count(*) = max(ticket) AND count(DISTINCT ticket) = count(*)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$other'")" t \
	"still numbered without a gap"
# places written in SQL past the worker (by a DBA, say) are not in the
# shared table: the round that meets one fails, and the worker looks every
# buyer of the line up from then on
psql_val "UPDATE seckill.queue_places p SET user_id = 'renamed' FROM seckill.campaigns c
	WHERE c.id = p.campaign_id AND c.goods = '$other' AND p.user_id = 'same-5'" >/dev/null
join renamed "$other" >/dev/null 2>&1
is "$(join renamed "$other" 2>&1 | cut -d'|' -f3)" "$(psql_val "SELECT p.ticket FROM seckill.queue_places p
	JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$other' AND p.user_id = 'renamed'")" \
	"a place given to another buyer by hand: that buyer's next join is told it"
psql_val "INSERT INTO seckill.queue_places (campaign_id, user_id, ticket, joined_at)
	SELECT id, 'by-hand', NULL, now() FROM seckill.campaigns WHERE goods = '$other'" >/dev/null
join by-hand "$other" >/dev/null 2>&1
is "$(join by-hand "$other" 2>&1)" "waiting||" "a place written by hand: the buyer's next join is told it"
is "$(join after-hand "$other" 2>&1 | cut -d'|' -f1)" waiting "and the line goes on"

# browsers as examples/python/waiting_room.py runs them: 80 buyers polling
# every 0.2 s for 20 items; the first 20 in line buy, the rest read sold_out
crowd="crowd-$tag"
psql_val "SELECT seckill_campaign_create('$crowd', 20)" >/dev/null
psql_val "SELECT seckill_campaign_set('$crowd', '{\"queue\": {\"admit_factor\": 1, \"pass_ttl\": \"1 minute\"}}')" >/dev/null
psql_val "SELECT seckill_preheat('$crowd')" >/dev/null
DATABASE_URL="postgresql://postgres@127.0.0.1:$PGPORT/postgres" timeout 120 \
	/usr/bin/python3 "$SECKILL_ROOT/examples/python/waiting_room.py" "$crowd" 1 80 0.2 >"$SECKILL_TMP/crowd.out" 2>&1
ok "[ $? -eq 0 ]" "80 browsers joined, polled and bought or gave up"
is "$(awk '{ print $2 }' "$SECKILL_TMP/crowd.out" | sort | uniq -c | awk '{ printf "%s:%s ", $2, $1 }')" "ok:20 sold_out:60 " \
	"20 bought, 60 read sold_out"
is "$(psql_val "SELECT max(p.ticket) FILTER (WHERE o.id IS NOT NULL) || ' ' || min(p.ticket) FILTER (WHERE o.id IS NULL)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	LEFT JOIN seckill.orders o ON o.campaign_id = p.campaign_id AND o.user_id = p.user_id WHERE c.goods = '$crowd'")" "20 21" \
	"the buyers are the first 20 in line, whatever the clients' timing"

# joins from one client address, past the campaign's addr_rate
limited="limited-$tag"
psql_val "SELECT seckill_campaign_create('$limited', 10, now() + interval '1 hour')" >/dev/null
psql_val "SELECT seckill_campaign_set('$limited', '{\"addr_rate\": 0.001, \"addr_burst\": 2, \"queue\": true}')" >/dev/null
psql_val "SELECT seckill_preheat('$limited')" >/dev/null
answers=""
for i in 1 2 3; do answers+="$(psql_val "SELECT state FROM seckill_queue_join('bot-$i', '$limited', '10.0.0.1')") "; done
is "$answers" "waiting waiting rate_limited " "joins from one address past its addr_burst: rate_limited"
is "$(psql_val "SELECT state FROM seckill_queue_join('person-1', '$limited', '10.0.0.2')")" waiting "another address joins"
is "$(psql_val "SELECT state FROM seckill_queue_join('bot-1', '$limited', '10.0.0.1')")" waiting \
	"a buyer in line is told its place again, whatever its address's bucket"
is "$(psql_val "SELECT count(*) FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	WHERE c.goods = '$limited'")" 3 "the refused join took no place"

# a line longer than the table of tickets in shared memory: the buyers past
# it are read from seckill.queue_places, and told the same
psql_val "ALTER SYSTEM SET seckill.queue_tickets = 64" >/dev/null
seckill_pg_restart
seckill_wait_for "[ -n \"\$(seckill_worker_pid 2>/dev/null)\" ]" 30
is "$(psql_val "SHOW seckill.queue_tickets")" 64 "a table of 64 tickets (after a restart)"
small="small-$tag"
psql_val "SELECT seckill_campaign_create('$small', 100)" >/dev/null
psql_val "SELECT seckill_campaign_set('$small', '{\"queue\": {\"admit_factor\": 1, \"pass_ttl\": \"10 minutes\"}}')" >/dev/null
psql_val "SELECT seckill_preheat('$small')" >/dev/null
printf '%s\n' '\set r random(1, 1000000000000)' \
	"SELECT state FROM seckill_queue_join('small-' || :client_id || '-' || :r, '$small');" >"$SECKILL_TMP/small.sql"
pgbench -n -c 16 -j 2 -t 125 -f "$SECKILL_TMP/small.sql" >"$SECKILL_TMP/small.out" 2>&1
ok "grep -q 'number of failed transactions: 0' '$SECKILL_TMP/small.out'" "16 clients joined at once, 2,000 calls, none failed"
joined=$(psql_val "SELECT count(*) FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	WHERE c.goods = '$small'")
ok "[ $joined -gt 1900 ]" "$joined places, 30 times the table"
seckill_wait_for "[ \$(mark '$small') -ge 100 ]" 10
ok "[ $? -eq 0 ]" "the line admits the first 100, one per item"
scans() { psql_val "SELECT idx_scan FROM pg_stat_user_tables WHERE relid = 'seckill.queue_places'::regclass"; }
before=$(scans)
is "$(psql_val "SELECT count(*) FILTER (WHERE s.state = 'admitted' AND p.ticket <= 100) || ' '
		|| count(*) FILTER (WHERE s.state = 'waiting' AND s.\"position\" = p.ticket - 100) || ' ' || count(*)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id,
		seckill_queue_status(p.user_id, '$small') s WHERE c.goods = '$small'")" "100 $((joined - 100)) $joined" \
	"each is told its place: tickets 1..100 admitted, the others waiting at ticket - 100"
ok "[ \$((\$(scans) - before)) -ge $((joined - 64)) ]" "at least $((joined - 64)) of those polls read the table"
# joining again: a buyer the table has no room for goes to the worker, which
# must look the place up in seckill.queue_places, not take the table's
# silence for none
sevenths=$(psql_val "SELECT count(*) FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	WHERE c.goods = '$small' AND p.ticket % 7 = 0")
is "$(psql_val "SELECT count(*) FILTER (WHERE j.ticket = p.ticket) || ' ' || count(*)
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id,
		LATERAL seckill_queue_join(p.user_id, '$small') j WHERE c.goods = '$small' AND p.ticket % 7 = 0" 2>&1)" \
	"$sevenths $sevenths" "each of $sevenths buyers joining again is told the place it holds"
is "$(psql_val "SELECT count(*) FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id
	WHERE c.goods = '$small'")" "$joined" "and the line has no place more"
psql_val "ALTER SYSTEM RESET seckill.queue_tickets" >/dev/null
seckill_pg_restart

# bad input changes nothing
ok "! psql_val \"SELECT seckill_queue_join(NULL, '$room')\" 2>/dev/null" "a null user_id is an error"
psql_val "SELECT seckill_campaign_create('plain-$tag', 1)" >/dev/null
err=$(psql_val "SELECT seckill_queue_join('u', 'plain-$tag')" 2>&1)
ok "grep -q 'has no waiting room' <<<\"\$err\"" "a campaign without a waiting room says so"
is "$(status u "no-such-goods-$tag")" unknown_goods "unknown goods: unknown_goods"

# a line of 10,000 early joins on a campaign newer than the statistics of
# seckill.queue_places (autovacuum kept off meanwhile): the draw at the
# start takes the places for one row, and must still not hold the worker
# (joined to the drawn order in a nested loop, it did for minutes)
drawn_late="draw-$tag"
psql_val "ANALYZE seckill.queue_places" >/dev/null
psql_val "ALTER TABLE seckill.queue_places SET (autovacuum_enabled = false)" >/dev/null
psql_val "SELECT seckill_campaign_create('$drawn_late', 100, now() + interval '3 seconds')" >/dev/null
psql_val "SELECT seckill_campaign_set('$drawn_late', '{\"queue\": {\"opens_before\": \"1 hour\"}}')" >/dev/null
psql_val "INSERT INTO seckill.queue_places (campaign_id, user_id, ticket, joined_at)
	SELECT id, 'd' || i, NULL, now() FROM seckill.campaigns, generate_series(1, 10000) i WHERE goods = '$drawn_late'" >/dev/null
psql_val "SELECT seckill_preheat('$drawn_late')" >/dev/null
seckill_wait_for "[ \"\$(psql_val \"SELECT now() >= starts_at FROM seckill.campaigns WHERE goods = '$drawn_late'\")\" = t ]" 10
is "$(join late-1 "$drawn_late" 2>&1 | cut -d'|' -f1)" waiting \
	"a join at the start of a line of 10,000 early joins is answered within seckill.request_timeout"
is "$(psql_val "SELECT count(p.ticket) || ' ' || max(p.ticket) FILTER (WHERE p.user_id = 'late-1')
	FROM seckill.queue_places p JOIN seckill.campaigns c ON c.id = p.campaign_id WHERE c.goods = '$drawn_late'")" "10001 10001" \
	"the 10,000 drawn, then the late join"
psql_val "ALTER TABLE seckill.queue_places RESET (autovacuum_enabled)" >/dev/null

for g in "$room" "$other" "$crowd" "$limited" "$small" "$drawn_late" "plain-$tag"; do psql_val "SELECT seckill_close('$g')" >/dev/null 2>&1; done
psql_val "DROP OWNED BY poller_$$; DROP ROLE poller_$$" >/dev/null
done_testing
