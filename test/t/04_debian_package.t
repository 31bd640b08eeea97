#!/usr/bin/env bash
# The Debian package: debian/ builds postgresql-15-seckill with pg_buildext
# (dpkg-buildpackage -us -uc -b, Debian's packages only) from a copy of the
# work tree; apt would install it here; and a server run from the package's
# files sells.  That server is a copy of this machine's PostgreSQL 15
# installation with the package unpacked into it (PostgreSQL finds its
# library and extension directories relative to its binaries), so that the
# suite's own build stays the one installed.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

port=${SECKILL_PACKAGE_PORT:-$SECKILL_OWN_PORT}
ports_free SECKILL_PACKAGE_PORT "$port"
version=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$SECKILL_ROOT/seckill.control")
library=$version.$(sed -n 's/^#define SECKILL_LIBRARY_VERSION SECKILL_SQL_VERSION "\.\([0-9]*\)"$/\1/p' "$SECKILL_ROOT/src/seckill.h")
work=$(mktemp -d -p "$SECKILL_TMP" package.XXXXXX)
chmod 755 "$work"
prefix="package-$$"
root=$work/root
pkgbin=$root/usr/lib/postgresql/15/bin
cleanup() {
	[ -f "$work/data/postmaster.pid" ] && seckill_as_postgres "$pkgbin/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1
	seckill_redis_cli --scan --pattern "$prefix:*" | xargs -r redis-cli -h 127.0.0.1 -p "$SECKILL_REDIS_PORT" DEL >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

# The source: the files git knows of (not the suite's objects)
mkdir -p "$work/src/seckill-$version"
git -C "$SECKILL_ROOT" ls-files -z --cached --others --exclude-standard |
	(cd "$SECKILL_ROOT" && xargs -0 cp --parents -t "$work/src/seckill-$version" 2>/dev/null)
# at a lower priority, as a build beside the sales of other files
(cd "$work/src/seckill-$version" && nice -n 10 dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1
built=$?
deb=$(ls "$work/src"/postgresql-15-seckill_"$library"_*.deb 2>/dev/null)
ok "[ $built -eq 0 ] && [ -n '$deb' ]" "dpkg-buildpackage -us -uc -b builds ${deb##*/}" ||
	{ diag "$(tail -n 40 "$work/build.log")"; done_testing; }
ok "grep -q 'pg_buildext' '$work/build.log'" "with pg_buildext"
is "$(dpkg-deb -f "$deb" Version)" "$library" "its version is the library's"
depends=$(dpkg-deb -f "$deb" Depends)
ok "[[ '$depends' == *postgresql-15* && '$depends' == *libhiredis0.14* ]]" "it depends on PostgreSQL 15 and hiredis: $depends"
contents=$(dpkg-deb -c "$deb" | awk '{ print $6 }')
missing=
for f in usr/lib/postgresql/15/lib/seckill.so usr/share/postgresql/15/extension/seckill.control \
	$(cd "$SECKILL_ROOT" && ls sql/seckill--*.sql | sed 's|^sql/|usr/share/postgresql/15/extension/|'); do
	grep -qx "./$f" <<<"$contents" || missing="$missing $f"
done
is "${missing:-none}" none "it holds the library, the control file and every install and upgrade script"
missing=
# (dh_compress compresses those over 4 kB)
for f in copyright README.md changelog CHANGELOG.md CLIENTS.md OPERATIONS.md REFERENCE.md examples/postgres_exporter.yaml; do
	grep -Eqx "\./usr/share/doc/postgresql-15-seckill/$f(\.gz)?" <<<"$contents" || missing="$missing $f"
done
is "${missing:-none}" none \
	"and, in /usr/share/doc, its copyright, the README, its changelog and CHANGELOG.md, the client, operations and reference guides, the exporter's queries" ||
	diag "$(grep usr/share/doc <<<"$contents")"
# lintian, on the package and its .changes: clean but for the maintainer's
# address, seckill@localhost, which stays until the team has a real one
lint=$(nice -n 10 lintian --suppress-tags bogus-mail-host,bogus-mail-host-in-debian-changelog \
	"$deb" "$work/src/seckill_${library}_"*.changes 2>&1)
lint_rc=$?
lint_tags=$(grep -E '^[EW]: ' <<<"$lint")
is "$lint_rc ${lint_tags:-none}" "0 none" \
	"lintian finds no error and no warning (bogus-mail-host aside: the maintainer's address is not chosen)" ||
	diag "$lint"
out=$(apt-get install --simulate -q "$deb" 2>&1)
ok "[ $? -eq 0 ]" "apt would install it on this machine (apt-get install --simulate)" || diag "$out"

# A server from a copy of PostgreSQL 15 with the package in it
mkdir -p "$root/usr/lib/postgresql" "$root/usr/share/postgresql"
cp -a /usr/lib/postgresql/15 "$root/usr/lib/postgresql/" && cp -a /usr/share/postgresql/15 "$root/usr/share/postgresql/"
rm -f "$root/usr/lib/postgresql/15/lib/seckill.so" "$root/usr/share/postgresql/15/extension"/seckill*
dpkg-deb -x "$deb" "$root"
ok "zgrep -q '^## $version — ' '$root/usr/share/doc/postgresql-15-seckill/CHANGELOG.md.gz'" \
	"its CHANGELOG.md is the source's, with $version first"
chown -R postgres: "$work"
seckill_as_postgres "$pkgbin/initdb" -D "$work/data" -U postgres --auth=trust --no-sync >"$work/initdb.log" 2>&1
cat >>"$work/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$work'
shared_preload_libraries = 'seckill'
seckill.redis_host = '127.0.0.1'
seckill.redis_port = $SECKILL_REDIS_PORT
seckill.redis_prefix = '$prefix'
CONF
seckill_as_postgres "$pkgbin/pg_ctl" -D "$work/data" -l "$work/postgresql.log" -w start >/dev/null 2>&1
ok "[ $? -eq 0 ]" "a server of the copy, with seckill preloaded, started on port $port" ||
	{ diag "$(tail -n 20 "$work/postgresql.log" "$work/initdb.log" 2>&1)"; done_testing; }
pkg_val() { psql -XAtq -p "$port" -c "$1" 2>&1; }
is "$(pkg_val "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")" "$root/usr/lib/postgresql/15/lib" \
	"its library directory is the copy's, where the package put seckill.so"
is "$(pkg_val "CREATE EXTENSION seckill; SELECT extversion FROM pg_extension WHERE extname = 'seckill'")" "$version" \
	"CREATE EXTENSION seckill installs $version from the package's scripts"
is "$(pkg_val "SET ROLE pg_monitor; SHOW seckill.library_version")" "$library" \
	"the package's library says its version, $library, to any role"
seckill_wait_for "[ \"\$(pkg_val \"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'seckill worker'\")\" = 1 ]" 10
ok "[ $? -eq 0 ]" "the package's worker runs"
is "$(psql -XAtq -p "$port" -c "SELECT seckill_campaign_create('packaged', 2) > 0" -c "SELECT seckill_preheat('packaged')" 2>&1 |
	tail -n 1)" 2 \
	"a campaign of 2 preheated into Redis"
is "$(psql -XAtq -p "$port" -c "SELECT status FROM seckill_buy('a', 'packaged')" -c "SELECT status FROM seckill_buy('b', 'packaged')" \
	-c "SELECT status FROM seckill_buy('c', 'packaged')" 2>&1 | tr '\n' ' ')" "ok ok sold_out " "three buyers: ok, ok, sold_out"
is "$(pkg_val "SELECT count(*) FROM seckill.orders")" 2 "two orders committed"
done_testing
