#!/usr/bin/env bash
# Runs one test file on servers of its own: bash test/run.sh FILE
# prove runs every file through it (scripts/test.sh), several at once.  It
# takes a slot of ports (scripts/lib.sh), starts PostgreSQL with seckill
# preloaded and Redis there, runs the file (a bash TAP test under test/t, or
# a pgTAP file under test/pgtap through psql), and stops and removes the
# servers however the file ended.  Where the machine lets it, it also counts
# the CPU time the file cost, its servers' included (a cpuacct cgroup), and
# prints it last.
set -uo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/../scripts/lib.sh"

file=$1
cgroup=/sys/fs/cgroup/cpuacct/seckill-test-$$
# those of files that ended (rmdir removes only a group no process is in)
rmdir /sys/fs/cgroup/cpuacct/seckill-test-* 2>/dev/null
if mkdir "$cgroup" 2>/dev/null && echo $$ >"$cgroup/cgroup.procs"; then
	cpu_report() {
		local ns
		ns=$(cat "$cgroup/cpuacct.usage")
		echo "# ${file##*/}: $(awk -v ns="$ns" 'BEGIN { printf "%.1f", ns / 1e9 }') s of CPU, its servers' included" >&2
	}
else
	rmdir "$cgroup" 2>/dev/null
	cpu_report() { :; }
fi

if ! seckill_start_servers >&2; then
	echo "Bail out! could not start the servers for $file"
	exit 255
fi
# A failing file prints the servers' log tails itself.
SECKILL_LOGS_ON_FAILURE=0
case $file in
*.pg) psql -XAtq -v ON_ERROR_STOP=1 --pset pager=off -f "$file" ;;
*) bash "$file" ;;
esac
rc=$?
cpu_report
exit $rc
