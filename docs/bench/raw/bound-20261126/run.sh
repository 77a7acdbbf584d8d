#!/usr/bin/env bash
# The one-core bound on ScaleBricks / full duplication (docs/bench/cluster.md, "Why not 1.15x on
# one core"): the batched lookup cost of our cuckoo FIB at a ScaleBricks node's slice (1/4 of the
# entries) and at full duplication's whole table, and of the GPT, each alone on one core.
# Usage (from the repository root, after `cargo build --release -p sb-bench`):
#   docs/bench/raw/bound-20261126/run.sh [OUT_DIR]
set -euo pipefail
B=target/release/scalebricks-bench
OUT=${1:-docs/bench/raw/bound-20261126}
for n in 4000000 8000000 16000000 32000000; do
    # The node benchmark's FIB: 16-byte keys (UE address), 16-byte values (tunnel), load 0.9.
    $B fib --entries "$n" --key-bytes 16 --value-bytes 16 --only scalebricks-cuckoo --json > "$OUT/fib-$n.json"
done
for n in 16000000 32000000; do
    # The GPT of a 4-node cluster: 2-bit values.
    $B gpt --keys "$n" --value-bits 2 --key-bytes 16 --peers setsep --json > "$OUT/gpt-$n.json"
done
