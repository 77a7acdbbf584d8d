#!/usr/bin/env bash
# What a PFCP session costs in heap, by where it was allocated (root; installs Debian's heaptrack
# if missing): a 4-node namespace cluster (capacity 1.25 x SESSIONS), heaptrack attached to
# node 0, then `scalebricks smf-sim` establishes SESSIONS sessions (a quarter through node 0, a
# quarter handled by it). Prints, per function of ours that allocated, the heap it held at node
# 0's peak divided by node 0's sessions (JSON, largest first), and node 0's RSS growth per
# session.
#
#   scripts/profile-pfcp-memory.sh [BIN_DIR (default target/release)] [SESSIONS (default 100000)]
#
# COST=allocations counts heap allocations (calls) instead, per session and by function (the
# allocator's CPU time is paid per call; see docs/bench/pfcp.md).
#
# heaptrack slows every allocation: the rate smf-sim prints is not the cluster's (use
# `bench pfcp`). Peak heap is what was allocated after heaptrack attached and not yet freed at
# the moment node 0 held the most: not RSS (malloc's own headers and free lists are not
# counted), and not what the node allocated at start: its tables and its per-session maps,
# allocated for its share of the capacity, whose pages count in RSS as sessions fill them.
set -euo pipefail
trap 'echo "profile-pfcp-memory: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
command -v heaptrack >/dev/null || scripts/apt-install.sh heaptrack
B=${1:-target/release}
N=${2:-100000}
COST=${COST:-peak}
case "$COST" in peak | allocations) ;; *) echo "COST must be peak or allocations" >&2; exit 2 ;; esac
work=$(mktemp -d)
name=sbmem$$
cleanup() {
    "$B/scalebricks" cluster down --dir "$work/state" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
"$B/scalebricks" cluster up --nodes 4 --name "$name" --dir "$work/state" --flows 1000 \
    --seed 1 --capacity $((N * 5 / 4 + 1000)) >/dev/null
for _ in $(seq 60); do
    "$B/scalebricks" cluster status --dir "$work/state" --json >"$work/st.json" 2>/dev/null &&
        python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if all(r["up"] and r["ready"] for r in d["nodes"]) else 1)' "$work/st.json" &&
        break
    sleep 1
done
pid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes"][0]["pid"])' "$work/st.json")
rss() { awk '/VmRSS/ {print $2 * 1024}' "/proc/$pid/status"; }
# Attached, heaptrack writes heaptrack.scalebricks.N.zst in its working directory.
(cd "$work" && exec heaptrack -p "$pid") >"$work/ht.log" 2>&1 &
ht=$!
# heaptrack injects itself with gdb: wait until it says so.
for _ in $(seq 60); do grep -q "injection finished" "$work/ht.log" && break; sleep 1; done
before=$(rss)
"$B/scalebricks" smf-sim --dir "$work/state" --sessions "$N" --window 256 >"$work/sim.json" || { cat "$work/ht.log" "$work/sim.json" >&2; exit 1; }
sleep 2
after=$(rss)
"$B/scalebricks" cluster down --dir "$work/state" >/dev/null
wait "$ht" || true
data=$(find "$work" -maxdepth 1 -name 'heaptrack.*.zst' | head -1)
[ -n "$data" ] || { cat "$work/ht.log" >&2; exit 1; }
heaptrack_print -f "$data" -F "$work/peak.txt" \
    --flamegraph-cost-type "$COST" >/dev/null 2>&1
python3 - "$work" "$before" "$after" "$COST" <<'PY'
import collections, json, re, sys
w, before, after, cost = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
sim = json.load(open(f"{w}/sim.json"))
handled = sim["per_node"][0]["handled"]
by = collections.Counter()
for line in open(f"{w}/peak.txt"):
    stack, n = line.rsplit(' ', 1)
    ours = [f for f in stack.split(';') if re.search(r'\bsb_\w+::', f)]
    # The innermost function of ours, without its hash and file.
    name = re.sub(r'::h[0-9a-f]{16}.*$', '', ours[-1]) if ours else "(not ours)"
    by[name] += int(n)
total = sum(by.values())
print(json.dumps({
    "sessions_node0": handled,
    ("peak_heap_bytes_per_session" if cost == "peak" else "allocations_per_session"): round(total / handled, 1),
    "rss_growth_bytes_per_session": round((after - before) / handled, 1),
    "by_function": {k: round(v / handled, 1) for k, v in by.most_common(12)},
}, indent=1))
PY
