#!/usr/bin/env bash
# Stops a running `scalebricks-bench pfcp` before the machine runs out of memory: while the
# bench runs, every 2 s, if the available memory is under LIMIT MiB (default 700) it interrupts
# the load generator (`smf-sim`; the bench then tears its cluster down) and says when. The
# stop-44 10M runs of docs/bench/pfcp.md ran beside it, e.g.:
#   scripts/memory-guard.sh > guard.txt &
#   target/release/scalebricks-bench pfcp --sessions 10000000 --window 256 --shapes open5gs --json
set -u
limit=${1:-700}
sleep 3
while pgrep -f "scalebricks-bench pfcp" >/dev/null; do
    a=$(awk '/MemAvailable/{print int($2/1024)}' /proc/meminfo)
    if [ "$a" -lt "$limit" ]; then
        echo "LOW $a at $(date +%T)"
        pkill -INT -f "scalebricks smf-sim"
        exit 0
    fi
    sleep 2
done
