#!/usr/bin/env bash
# Watches a cluster through one node's fence and restart (issue 29): a 4-node namespace cluster
# (root), N open5gs-shaped sessions (default 2,000,000), node 0 stopped for 3 s (SIGSTOP: its
# peers elect other leaders for its ranges and stand in for it; running again, it is fenced and
# restarts its state machine), then every node's up/ready/GPT digest every 5 s, POLLS times
# (default 36). The node logs are copied to OUT (default ./restart-probe-logs). STOP=0 stops no
# node: the same watch after the load generator exits, as a control.
#   N=2000000 POLLS=36 STOP=1 scripts/restart-probe.sh [BIN_DIR (default target/release)]
set -u
sb=${1:-target/release}/scalebricks
n=${N:-2000000}
out=${OUT:-restart-probe-logs}
. "$(dirname "$0")/lib/sessions-cluster.sh"
echo "$(date +%T) before: $(rows)"
if [ "${STOP:-1}" = 1 ]; then kill -STOP "$pid0"; sleep 3; kill -CONT "$pid0"; fi
for _ in $(seq 1 "${POLLS:-36}"); do sleep 5; echo "$(date +%T) $(rows)"; done
mkdir -p "$out" && cp "$d"/*.log "$out"/
