#!/usr/bin/env bash
# The control plane's numbers (issue 11), as root:
#   1. `scalebricks bench update --cluster --json`: the GPT owner's updates per core and delta
#      bytes (in process), a 4-node namespace cluster's aggregate update rate and the
#      propagation times at 10% of it.
#   2. Distributed construction: `cluster up` with FLOWS flows at 2, 4 and 8 nodes, timed from
#      the command's start until every node is ready (GPT assembled from every owner's piece,
#      every FIB slice installed), then `cluster down`.
# Environment: FLOWS (default 1000000), NODES ("2 4 8"), RUNS (1), OUT (docs/bench/raw/control).
set -euo pipefail
cd "$(dirname "$0")/.."
FLOWS=${FLOWS:-1000000}
NODES=${NODES:-"2 4 8"}
RUNS=${RUNS:-1}
OUT=${OUT:-docs/bench/raw/control}
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }
mkdir -p "$OUT"
cargo build --release -p scalebricks -p sb-bench
bin=target/release/scalebricks

for r in $(seq 1 "$RUNS"); do
    target/release/scalebricks-bench update --cluster --json | tee "$OUT/update-run$r.json"
done

for n in $NODES; do
    for r in $(seq 1 "$RUNS"); do
        dir=$(mktemp -d)/state
        t0=$(date +%s.%N)
        "$bin" cluster up --nodes "$n" --flows "$FLOWS" --seed 1 --name sbc --dir "$dir" >/dev/null
        t1=$(date +%s.%N)
        "$bin" cluster status --json --dir "$dir" >"$OUT/up-n$n-f$FLOWS-run$r.json"
        "$bin" cluster down --dir "$dir" >/dev/null
        printf '{"nodes": %s, "flows": %s, "up_seconds": %.2f}\n' "$n" "$FLOWS" \
            "$(python3 -c "print($t1 - $t0)")" | tee -a "$OUT/construction.jsonl"
    done
done
