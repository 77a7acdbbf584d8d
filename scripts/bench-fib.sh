#!/usr/bin/env bash
# Partial FIB benchmark (issue 3): our cuckoo table against DPDK rte_hash, libcuckoo, hashbrown
# and dashmap. Installs the peers' Debian packages, builds with every peer, runs each
# configuration RUNS times (default 3) and prints the per-row medians as a Markdown table.
# Raw JSON goes to target/bench-fib/. Usage: scripts/bench-fib.sh [quick|targets]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
OUT=target/bench-fib
mkdir -p "$OUT"
if [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; then
    scripts/install-peers.sh
fi
cargo build --release -p sb-bench --features dpdk,libcuckoo
BIN=target/release/scalebricks-bench

# name|arguments
CONFIGS=(
  "hits100-b32|--entries 16777216 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 100"
  "hits0-b32|--entries 16777216 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 0"
  "hits100-b1|--entries 16777216 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 1 --hit-ratio 100"
  "maxload-1M|--entries 1048576 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 100 --max-load --only scalebricks-cuckoo,dpdk-rte_hash,libcuckoo"
  "maxload-16M|--entries 16777216 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 100 --max-load --only scalebricks-cuckoo,dpdk-rte_hash,libcuckoo"
  "mixed-1M|--entries 1048576 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 50 --mixed --only scalebricks-cuckoo,dpdk-rte_hash,libcuckoo,dashmap"
  "zipf-b32|--entries 4194304 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 100 --zipf 0.99"
  "k40v64-b32|--entries 4194304 --key-bytes 40 --value-bytes 64 --load 0.9 --batch 32 --hit-ratio 50"
  "k4v8-b32|--entries 4194304 --key-bytes 4 --value-bytes 8 --load 0.95 --batch 32 --hit-ratio 100"
)
if [ "${1:-}" = targets ]; then
  # Only what issue 3's targets need, and only the rows they compare.
  CONFIGS=(
    "t-hits100-b32|--entries 16777216 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 100 --max-load --only scalebricks-cuckoo,dpdk-rte_hash"
    "t-hits0-b32|--entries 16777216 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 0 --only scalebricks-cuckoo,dpdk-rte_hash"
    "t-hits100-b1|--entries 16777216 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 1 --hit-ratio 100 --only scalebricks-cuckoo,hashbrown"
    "t-maxload-1M|--entries 1048576 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 100 --max-load --only scalebricks-cuckoo,dpdk-rte_hash,libcuckoo"
    "t-mixed-1M|--entries 1048576 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 50 --mixed --only scalebricks-cuckoo,dpdk-rte_hash"
  )
fi
if [ "${1:-}" = quick ]; then
  CONFIGS=("quick|--entries 1048576 --key-bytes 13 --value-bytes 16 --load 0.9 --batch 32 --hit-ratio 100 --max-load --mixed --mixed-secs 1")
  RUNS=1
fi

for c in "${CONFIGS[@]}"; do
  name=${c%%|*}
  args=${c#*|}
  for r in $(seq 1 "$RUNS"); do
    echo "== $name run $r: scalebricks-bench fib $args --json" >&2
    # shellcheck disable=SC2086
    "$BIN" fib $args --json > "$OUT/$name.$r.json"
  done
done

python3 - "$OUT" "$RUNS" "${CONFIGS[@]}" <<'PY'
import json, statistics, sys
out, runs, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
fields = ["lookup_mops", "lookup_mops_cpu", "insert_mops", "bytes_per_entry", "max_load_factor",
          "reader_mops_alone_cpu", "reader_mops_with_writer_cpu", "reader_drop_pct_cpu",
          "reader_drop_pct", "wrong_answers"]
for c in configs:
    name, args = c.split("|", 1)
    docs = [json.load(open(f"{out}/{name}.{r}.json")) for r in range(1, runs + 1)]
    print(f"\n### {name}\n\n`scalebricks-bench fib {args} --json` (median of {runs})\n")
    print("| structure | " + " | ".join(fields) + " | page | wrong (verify) |")
    print("|---" * (len(fields) + 3) + "|")
    for row in docs[0]["results"]:
        rows = [next(x for x in d["results"] if x["name"] == row["name"]) for d in docs]
        cells = []
        for f in fields:
            vals = [x.get(f) for x in rows if x.get(f) is not None]
            cells.append(f"{statistics.median(vals):.3g}" if vals else "-")
        wrong = sum(x.get("verify_wrong", 0) for x in rows)
        print(f"| {row['name']} | " + " | ".join(cells) + f" | {row['page_size']} | {wrong} |")
PY
