#!/usr/bin/env bash
# docker/: the image built from this work tree and the compose stack, run
# with podman, a campaign sold out from the host through the published port,
# the orders still there in new containers on the same volumes.  The script
# prints this test's TAP; the suite's own servers play no part.
set -uo pipefail
exec bash "$(dirname "$0")/../../scripts/docker-test.sh"
