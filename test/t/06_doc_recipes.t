#!/usr/bin/env bash
# Every fenced block of README.md and docs/OPERATIONS.md says, by the HTML
# comment on the line before it, what it is:
#   <!-- doc: sql -->              run here by the superuser
#   <!-- doc: sql as ROLE -->      run here as ROLE (shop_dba, shop_app),
#                                  after every superuser block, the DBA's
#                                  before the application's
#   <!-- doc: conf -->             postgresql.conf lines: PostgreSQL reads
#                                  them without an error, each a setting it
#                                  knows (not applied: they name hosts of
#                                  the reader's)
#   <!-- doc: sh -->               run here by bash as root, with the paths
#                                  under /etc/postgresql/ in a directory of
#                                  this file's
#   <!-- doc: quick start -->      the README's two commands: the demo runs
#                                  here (for 3 s), the suite is this run
#   <!-- doc: run by FILE -->      FILE runs it (it must exist)
#   <!-- doc: shown -->            an illustration: output, a diagram
#   <!-- doc: not run: REASON -->  a recipe no test can run, and why
# A block without a marker, or one that fails, fails this file.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

root=$SECKILL_ROOT
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# block files: work/NNN.txt (the block) and a line in work/index:
# NNN<TAB>file:line<TAB>marker
awk -v out="$work" '
	FNR == 1 { prev = "" }
	/^```/ && !inside {
		inside = 1; n++
		file = sprintf("%s/%03d.txt", out, n)
		printf "" >file
		marker = prev ~ /^<!-- doc: .* -->$/ ? prev : ""
		sub(/^<!-- doc: /, "", marker); sub(/ -->$/, "", marker)
		printf "%03d\t%s:%d\t%s\n", n, FILENAME, FNR, marker >(out "/index")
		prev = $0
		next
	}
	/^```/ && inside { inside = 0; close(file); prev = $0; next }
	inside { print >file }
	{ prev = $0 }' "$root/README.md" "$root/docs/OPERATIONS.md"
sed -i "s|$root/||" "$work/index"
blocks=$(wc -l <"$work/index")
ok "[ $blocks -ge 20 ]" "$blocks fenced blocks in README.md and docs/OPERATIONS.md"
unmarked=$(awk -F'\t' '$3 == "" { printf "%s%s", sep, $2; sep = ", " }' "$work/index")
is "${unmarked:-none}" none "every block says what it is (<!-- doc: ... --> on the line before it)"
unknown=$(awk -F'\t' '$3 != "" && $3 !~ /^(sql|sql as [a-z_]+|conf|sh|quick start|run by [^ ]+|shown|not run: .+)$/ {
	printf "%s%s (%s)", sep, $2, $3; sep = ", " }' "$work/index")
is "${unknown:-none}" none "every marker is one this file knows"

# blocks kind: the index lines of that marker, in the documents' order
blocks_of() { awk -F'\t' -v kind="$1" '$3 == kind' "$work/index"; }

psql_val "CREATE EXTENSION IF NOT EXISTS seckill" >/dev/null
# the roles the README's grants are for
psql_val "CREATE ROLE shop_app LOGIN; CREATE ROLE shop_dba LOGIN" >/dev/null

# run_sql role: each block of "sql" (role postgres) or "sql as role"
run_sql() {
	local kind=sql user=$1 n where marker out
	[ "$1" != postgres ] && kind="sql as $1"
	while IFS=$'\t' read -r n where marker; do
		out=$(psql -X -q -U "$user" -v ON_ERROR_STOP=1 -f "$work/$n.txt" 2>&1)
		ok "[ $? -eq 0 ]" "$where, as $user: runs" || diag "$out"
	done < <(blocks_of "$kind")
}
run_sql postgres
is "$(psql -XAtq -U shop_monitor -c "SELECT count(*) FROM seckill.stats" -c "SELECT count(*) FROM seckill.locks" \
	-c "SELECT count(*) FROM seckill.redis_nodes" 2>&1 | grep -c '^[0-9]*$')" 3 \
	"OPERATIONS.md's shop_monitor reads seckill.stats, seckill.locks and seckill.redis_nodes"
run_sql shop_dba
is "$(psql_val "SELECT count(*) FROM seckill.campaigns WHERE goods = 'iphone-17' AND per_user_limit = 1")" 1 \
	"the DBA's campaign was made as the README's block says"
run_sql shop_app
is "$(psql_val "SELECT count(*) FROM cron.job WHERE jobname IN ('seckill-reconcile', 'seckill-release')")" 2 \
	"pg_cron has the README's two jobs"
psql_val "SELECT cron.unschedule(jobname) FROM cron.job WHERE jobname IN ('seckill-reconcile', 'seckill-release')" >/dev/null

# conf: PostgreSQL parses each block as an included file of postgresql.conf
# (pg_file_settings reads the files when asked; nothing is reloaded, and a
# setting that takes a restart is read, not tried)
conf=$SECKILL_PGDATA/postgresql.conf
cp "$conf" "$work/postgresql.conf.orig"
while IFS=$'\t' read -r n where marker; do
	cp "$work/$n.txt" "$SECKILL_PGDATA/doc_block.conf"
	chown postgres "$SECKILL_PGDATA/doc_block.conf"
	{ cat "$work/postgresql.conf.orig"; echo "include 'doc_block.conf'"; } >"$conf"
	wrong=$(psql_val "SELECT string_agg(f.name || ': ' || coalesce(f.error, 'not a setting of this server'), ', ')
		FROM pg_file_settings f LEFT JOIN pg_settings s ON s.name = f.name
		WHERE f.sourcefile LIKE '%/doc_block.conf' AND (s.name IS NULL OR f.error IS NOT NULL
			AND NOT (f.error = 'setting could not be applied' AND s.context = 'postmaster'))")
	read_in=$(psql_val "SELECT count(*) FROM pg_file_settings WHERE sourcefile LIKE '%/doc_block.conf'")
	lines=$(grep -c '^[a-z_]' "$work/$n.txt")
	ok "[ -z '$wrong' ] && [ $read_in -eq $lines ]" "$where: $read_in settings, each known and well formed" ||
		diag "${wrong:-read $read_in of $lines}"
done < <(blocks_of conf)
cp "$work/postgresql.conf.orig" "$conf"
rm -f "$SECKILL_PGDATA/doc_block.conf"

# sh: as root, in a directory of its own, /etc/postgresql/ mapped there
mkdir -p "$work/etc"
while IFS=$'\t' read -r n where marker; do
	sed "s|/etc/postgresql/|$work/etc/|g" "$work/$n.txt" >"$work/$n.sh"
	out=$(cd "$work" && bash -e "$work/$n.sh" 2>&1)
	ok "[ $? -eq 0 ]" "$where: runs" || diag "$out"
done < <(blocks_of sh)
is "$(stat -c '%a %U' "$work/etc/seckill-redis.pass" 2>&1) $(cat "$work/etc/seckill-redis.pass" 2>&1)" \
	"600 postgres the-password" "the README's password file: the postgres user's alone, the password in it"

while IFS=$'\t' read -r n where marker; do
	f=${marker#run by }
	ok "[ -f '$root/$f' ]" "$where: run by $f"
done < <(awk -F'\t' '$3 ~ /^run by /' "$work/index")

while IFS=$'\t' read -r n where marker; do
	ok "grep -qx 'bash scripts/demo.sh .*' '$work/$n.txt' && grep -qx 'bash scripts/test.sh .*' '$work/$n.txt'" \
		"$where: the demo's and the suite's commands"
done < <(blocks_of "quick start")
# the demo, as the README runs it (its own servers), for 3 s, with the
# suite's build
demo=$(cd "$root" && SECKILL_DEMO_SECONDS=3 bash scripts/demo.sh --installed 2>&1)
ok "[ $? -eq 0 ]" "scripts/demo.sh runs its flash sale" || diag "$(tail -n 20 <<<"$demo")"
ok "grep -Eq '^oversold +0$' <<<\"\$demo\" && grep -Eq '^double purchases +0$' <<<\"\$demo\"" \
	"its report: nothing oversold, no double purchase" || diag "$(tail -n 20 <<<"$demo")"

diag "not run: $(awk -F'\t' '$3 ~ /^not run: / { printf "%s%s (%s)", sep, $2, substr($3, 10); sep = "; " }' "$work/index")"
done_testing
