#!/usr/bin/env bash
# seckill builds on every PostgreSQL 15 minor release: every source file, and
# every header on its own, compiles with -Werror against the headers
# installed here and against those of the oldest 15.x that Debian 12's
# archive has (bookworm's release, postgresql-server-dev-15 15.18), unpacked
# from its package without installing it.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

# (at a lower priority, as a build beside the sales of other files)
check() { # check include_dir: make check-headers against those headers
	nice -n 10 make -s -C "$SECKILL_ROOT" check-headers PG_CONFIG="$SECKILL_PG_CONFIG" includedir_server="$1" 2>&1
}

out=$(check "$("$SECKILL_PG_CONFIG" --includedir-server)")
ok "[ $? -eq 0 ]" "every file and header compiles against the installed headers ($("$SECKILL_PG_CONFIG" --version))" ||
	diag "$out"

oldest=$(apt-cache madison postgresql-server-dev-15 2>/dev/null | awk '{ print $3 }' | sort -V | head -n 1)
if [ -z "$oldest" ]; then
	apt-get update -q >/dev/null 2>&1
	oldest=$(apt-cache madison postgresql-server-dev-15 2>/dev/null | awk '{ print $3 }' | sort -V | head -n 1)
fi
ok "[ -n '$oldest' ]" "the archive's oldest postgresql-server-dev-15: ${oldest:-none}" || done_testing

dir=$(mktemp -d -p "$SECKILL_TMP" headers.XXXXXX)
(cd "$dir" && apt-get download -q "postgresql-server-dev-15=$oldest" >/dev/null 2>&1 &&
	dpkg-deb -x ./*.deb root)
server=$dir/root/usr/include/postgresql/15/server
ok "[ -e '$server/pg_config.h' ]" "its headers unpacked, without installing the package" || done_testing
version=$(sed -n 's/^#define PG_VERSION "\(.*\)"/\1/p' "$server/pg_config.h")
out=$(check "$server")
ok "[ $? -eq 0 ]" "every file and header compiles against PostgreSQL $version's headers" || diag "$out"
rm -rf "$dir"
done_testing
