#!/usr/bin/env bash
# Watches the newest namespace cluster a benchmark started (its state directory under /tmp)
# every INTERVAL seconds (default 30) until stopped, and keeps copies of its node logs and
# status files in OUT (they go with the cluster when the benchmark ends). Per sample: the
# available memory and load, per node its `is fenced` lines and checkpoint lines, the fences
# by reason, and from each node's status its PFCP sessions, safe leases lost and recovered,
# and late wake-ups (count, longest ms). The stop-43 runs of docs/bench/pfcp.md, e.g.:
#   scripts/watch-cluster.sh /tmp/logs-10m > watch.txt &
#   scripts/sample-memory.sh > monitor.txt &
#   target/release/scalebricks-bench pfcp --sessions 10000000 --window 256 --shapes open5gs --json
#   kill %1 %2
set -u
out=${1:-/tmp/cluster-logs}
interval=${2:-30}
mkdir -p "$out"
while true; do
    d=$(ls -dt /tmp/.tmp*/state 2>/dev/null | head -1)
    if [ -n "$d" ] && [ -e "$d/forward-node0.log" ]; then
        echo "== $(date +%T) $d avail=$(awk '/MemAvailable/{print int($2/1024)}' /proc/meminfo) load=$(cut -d' ' -f1 /proc/loadavg)"
        for f in "$d"/forward-node*.log; do
            echo "$f fenced=$(grep -c 'is fenced' "$f") cp_warn=$(grep -c checkpoint "$f")"
        done
        grep -ho 'fenced ([a-z_]*)' "$d"/forward-node*.log | sort | uniq -c
        for j in "$d"/forward-node*.json; do
            python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['control']['status']; print(sys.argv[1].split('/')[-1], 'sessions', s.get('pfcp_sessions'), 'losses', s.get('lease_losses'), 'recoveries', s.get('lease_recoveries'), 'late', s.get('control_late_wakes'), s.get('control_late_wake_max_ms'))" "$j" 2>/dev/null
        done
        cp "$d"/forward-node*.log "$d"/forward-node*.json "$out"/ 2>/dev/null
    fi
    sleep "$interval"
done
