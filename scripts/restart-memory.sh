#!/usr/bin/env bash
# What a control state machine's restart costs in memory (issue 29): a 4-node namespace cluster
# (root), SESSIONS open5gs-shaped sessions through `scalebricks smf-sim`, then node 0 stopped
# for 3 s (SIGSTOP: its peers elect other leaders for its ranges; when it runs again it is
# fenced and restarts its state machine from its log, in-process, as after a partition).
# Prints node 0's RSS before, and its peak (VmHWM, reset just before the stop) and RSS once
# the restart is done; then whether the cluster was ready again within 60 s, and takes it down.
#   scripts/restart-memory.sh [BIN_DIR (default target/release)] [SESSIONS (default 2000000)]
set -u
sb=${1:-target/release}/scalebricks
n=${2:-2000000}
. "$(dirname "$0")/lib/sessions-cluster.sh"
mib() { awk -v k="$1:" '$1 == k { print int($2 / 1024) }' "/proc/$pid0/status"; }
echo "node 0 before: rss_mib=$(mib VmRSS)"
echo 5 >"/proc/$pid0/clear_refs"
kill -STOP "$pid0"; sleep 3; kill -CONT "$pid0"
for _ in $(seq 1 240); do grep -q "restart: log read" "$d"/*.log 2>/dev/null && break; sleep 0.5; done
grep -h "is fenced\|restart: log read" "$d"/*.log | head -4
sleep 5
echo "node 0 after the restart: peak_mib=$(mib VmHWM) rss_mib=$(mib VmRSS)"
for _ in $(seq 1 120); do [ "$(ready)" = yes ] && break; sleep 0.5; done
echo "ready again within 60 s: $(ready)"
