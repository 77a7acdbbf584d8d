#!/usr/bin/env bash
# Partial FIB benchmark (issue 3): our cuckoo table against DPDK rte_hash, libcuckoo, hashbrown
# and dashmap. Installs the peers' Debian packages, builds with every peer, runs each
# configuration RUNS times (default 3) and prints the per-row medians as a Markdown table.
# Raw JSON goes to target/bench-fib/ (target/bench-fib-4k/ for PAGES=4k).
# PAGES=2m (default): our arrays on 2 MB pages, and as root each run gets 2 MB hugepages
# reserved and mounted by scripts/hugepages.sh (undone after the run) so DPDK runs on them too;
# PAGES=4k: the control, no huge pages for anyone (`--pages 4k`). Every row's page is measured.
# Usage: scripts/bench-fib.sh [quick|targets]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
PAGES=${PAGES:-2m}
OUT=target/bench-fib
[ "$PAGES" = 2m ] || OUT=target/bench-fib-$PAGES
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

# MB of 2 MB hugepages a run needs: rte_hash's ~132 bytes per slot (twice with --max-load) and
# 256 MB of EAL margin; none for PAGES=4k.
huge_mb() {
  local entries=1048576 load=0.9 tables=1
  while [ $# -gt 0 ]; do
    case $1 in
      --entries) entries=$2; shift ;;
      --load) load=$2; shift ;;
      --max-load) tables=2 ;;
    esac
    shift
  done
  python3 -c "print(int($entries / $load * 136 * $tables / 2**20) + 320)"
}
run_fib() {
  if [ "$PAGES" = 2m ]; then
    scripts/hugepages.sh "$(huge_mb "$@")" "$BIN" fib "$@"
  else
    "$BIN" fib "$@"
  fi
}

for c in "${CONFIGS[@]}"; do
  name=${c%%|*}
  args=${c#*|}
  for r in $(seq 1 "$RUNS"); do
    echo "== $name run $r: scalebricks-bench fib $args --pages $PAGES --json" >&2
    # shellcheck disable=SC2086
    run_fib $args --pages "$PAGES" --json > "$OUT/$name.$r.json"
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
    eal = docs[0]["params"].get("dpdk_eal") or {}
    print(f"\n### {name}\n\n`scalebricks-bench fib {args} --pages {docs[0]['params'].get('pages')} --json` (median of {runs}; "
          f"DPDK {'on hugepages' if eal.get('hugepages') else 'without hugepages'})\n")
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
