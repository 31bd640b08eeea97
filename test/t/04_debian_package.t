#!/usr/bin/env bash
# The Debian package: debian/ builds postgresql-15-seckill with pg_buildext
# (dpkg-buildpackage -us -uc -b, Debian's packages only) from a copy of the
# work tree; lintian accepts it; apt would install it here; and its
# autopkgtest passes against the package's files: its server runs from a
# copy of this machine's PostgreSQL 15 installation with the package
# unpacked into it (PostgreSQL finds its library and extension directories
# relative to its binaries), so that the suite's own build stays the one
# installed.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

port=${SECKILL_PACKAGE_PORT:-$SECKILL_OWN_PORT}
ports_free SECKILL_PACKAGE_PORT "$port" $((port + 1))
version=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" "$SECKILL_ROOT/seckill.control")
library=$version.$(library_number)
work=$(mktemp -d -p "$SECKILL_TMP" package.XXXXXX)
chmod 755 "$work"
root=$work/root
pkgbin=$root/usr/lib/postgresql/15/bin
trap 'rm -rf "$work"' EXIT

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
# The package's autopkgtest (debian/tests/sale), run against the copy: a
# cluster with seckill preloaded and a Redis of their own (which it stops
# and removes) create the extension and sell
SECKILL_PGBIN=$pkgbin SECKILL_PG_PORT=$port SECKILL_REDIS_PORT=$((port + 1)) \
	sh "$SECKILL_ROOT/debian/tests/sale" >"$work/autopkgtest.out" 2>&1
ok "[ $? -eq 0 ]" "its autopkgtest (debian/tests/sale) passes against a copy of PostgreSQL 15 with the package in it" ||
	diag "$(cat "$work/autopkgtest.out")"
field() { sed -n "s/^$1: //p" "$work/autopkgtest.out"; }
is "$(field pkglibdir)" "$root/usr/lib/postgresql/15/lib" "its server's library directory is the copy's, where the package put seckill.so"
is "$(field extension)" "$version" "CREATE EXTENSION seckill installs $version from the package's scripts"
is "$(field library)" "$library" "the package's library says its version, $library, to a role with no grant"
is "$(field answers)" "ok ok sold_out " "a campaign of 2: three buyers, ok, ok, sold_out"
is "$(field orders)" 2 "two orders committed"
done_testing
