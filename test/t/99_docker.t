#!/usr/bin/env bash
# docker/: the image built from this work tree and each stack of the compose
# file, run with podman.  The one-Redis stack honours the official image's
# POSTGRES_USER, POSTGRES_DB, POSTGRES_INITDB_ARGS and
# /docker-entrypoint-initdb.d (run once, not again on the same volumes), sells
# a campaign out from the host through the published port and keeps its
# orders in new containers; a failing init script stops the first start; the
# profiles sentinel, cluster and tls each sell a campaign out, exactly.  The script
# prints this test's TAP; the suite's own servers play no part.
# It runs at a lower priority (nice 10): a new tree's image build (and a new
# machine's base images) unpack packages and compile for minutes, and the
# files beside it sell against bounds in time.
set -uo pipefail
exec nice -n 10 bash "$(dirname "$0")/../../scripts/docker-test.sh"
