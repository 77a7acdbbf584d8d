#!/usr/bin/env bash
# Samples the machine's available memory, its load and every `scalebricks node` process's
# resident memory and its peak so far (VmHWM: a transient between two samples shows there)
# every INTERVAL seconds (default 30) until stopped, one line each:
#   HH:MM:SS avail=MiB load=1-min rss=[ MiB MiB ... ] peak=[ MiB MiB ... ]
# Run it beside a long benchmark, e.g. the 10M-session run of docs/bench/pfcp.md:
#   scripts/sample-memory.sh > monitor.txt &
#   target/release/scalebricks-bench pfcp --sessions 10000000 --window 256 --shapes open5gs --detect-ms 60000 --json
#   kill %1
set -u
interval=${1:-30}
while true; do
    t=$(date +%H:%M:%S)
    avail=$(awk '/MemAvailable/{print int($2/1024)}' /proc/meminfo)
    load=$(cut -d' ' -f1 /proc/loadavg)
    rss=""
    hwm=""
    for p in $(pgrep -f "scalebricks node"); do
        r=$(awk '/VmRSS/{print int($2/1024)}' "/proc/$p/status" 2>/dev/null)
        h=$(awk '/VmHWM/{print int($2/1024)}' "/proc/$p/status" 2>/dev/null)
        rss="$rss $r"
        hwm="$hwm $h"
    done
    echo "$t avail=$avail load=$load rss=[$rss ] peak=[$hwm ]"
    sleep "$interval"
done
