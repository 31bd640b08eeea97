#!/usr/bin/env bash
# What a release says of itself agrees: the license, the PGXN metadata, the
# changelog, the upgrade scripts and the library all name the version of
# seckill.control, and the upgrade scripts chain from 1.0 to it.
set -uo pipefail
# shellcheck source=test/t/tap.sh
. "$(dirname "$0")/tap.sh"

cd "$SECKILL_ROOT" || exit 1
version=$(sed -n "s/^default_version = '\(.*\)'$/\1/p" seckill.control)
ok "[ -n '$version' ]" "seckill.control's default_version: $version" || done_testing

ok "head -n 1 LICENSE | grep -qx 'PostgreSQL License'" "LICENSE: the PostgreSQL License"

meta() { python3 -c 'import json, sys; m = json.load(open("META.json")); print(eval(sys.argv[1]))' "$1" 2>&1; }
is "$(meta 'm["meta-spec"]["version"]')" 1.0.0 "META.json follows the PGXN meta spec 1.0.0"
is "$(python3 test/t/pgxn_meta.py META.json)" "" "META.json is valid under the PGXN meta spec (test/t/pgxn_meta.py)"
library=$(library_number)
ok "[ -n '$library' ]" "the library's version is the SQL version's and a number: $version.$library"
library=$version.$library
is "$(meta 'm["version"]')" "$library" "META.json's version is the library's, in SemVer"
is "$(meta 'm["provides"]["seckill"]["version"]')" "$version.0" "the extension it provides is at default_version, in SemVer"
is "$(meta 'm["prereqs"]["runtime"]["requires"]["PostgreSQL"]')" ">= 15.0.0, < 16.0.0" "it requires PostgreSQL 15, no other major"
is "$(meta 'm["license"]')" postgresql "META.json names the license"
file=$(meta 'm["provides"]["seckill"]["file"]')
ok "[ -f '$file' ]" "the file it names exists: $file"

is "$(sed -n '1s/^seckill (\(.*\)) .*/\1/p' debian/changelog)" "$library" \
	"debian/changelog's newest entry is the library's version"

is "$(sed -n 's/^#define SECKILL_SQL_VERSION "\(.*\)"$/\1/p' src/seckill.h)" "$version" \
	"the library expects the extension at default_version"

# the chain: 1.0, then each script from the version before it
at=1.0 steps=0
while next=$(find sql -name "seckill--$at--*.sql" | sed "s/.*--$at--\(.*\)\.sql/\1/") && [ -n "$next" ]; do
	at=$next
	steps=$((steps + 1))
done
is "$at" "$version" "the upgrade scripts go from 1.0 to $version in $steps steps"
is "$(find sql -name 'seckill--*--*.sql' | wc -l)" "$steps" "every upgrade script is on that path"

missing=
for v in 1.0 $(find sql -name 'seckill--*--*.sql' | sed 's/.*--\(.*\)\.sql/\1/'); do
	grep -Eqx "## $v — [0-9]{4}-[0-9]{2}-[0-9]{2}" CHANGELOG.md || missing="$missing $v"
done
is "${missing:-none}" none "CHANGELOG.md has a dated section for every version"
is "$(grep -m1 '^## ' CHANGELOG.md | cut -d' ' -f2)" "$version" "its newest is default_version"
# the Debian package's entries: the same versions, on the same days
differ=$(awk '/^seckill \(/ { v = substr($2, 2, length($2) - 2) } /^ -- / && v != "" { print v, $0; v = "" }' debian/changelog |
	while read -r v line; do
		day=$(date -u -d "$(echo "$line" | sed 's/.*>  //')" +%F)
		grep -Eqx "###? $v — $day" CHANGELOG.md || echo "$v"
	done)
is "${differ:-none}" none "debian/changelog's versions are CHANGELOG.md's, on the same days"
# (a version's first library, 1.14.0, was packaged as 1.14)
missing=$(sed -nE 's/^###? ([0-9.]+) — .*/\1/p' CHANGELOG.md | while read -r v; do
	case $v in *.*.0) v=${v%.0} ;; esac
	grep -q "^seckill ($v) " debian/changelog || echo "$v"
done)
is "${missing:-none}" none "and every version of CHANGELOG.md has its entry there"
ok "grep -Eqx '### $library — [0-9]{4}-[0-9]{2}-[0-9]{2}' CHANGELOG.md || [ '$library' = '$version.0' ]" \
	"CHANGELOG.md lists the library's release $library"
done_testing
