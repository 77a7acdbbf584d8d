#!/usr/bin/env bash
# Cluster benchmarks (the paper's Figures 8, 9, 10): per-node throughput of the three
# architectures with our cuckoo FIB and DPDK's rte_hash over FIB sizes (on one core, and on
# one core per port as the paper's node had, given 2 CPUs), the same under the half-L3 bubble,
# and one-way latency through a namespace cluster; then the figures and the table. Every run's
# JSON is kept under docs/bench/raw/ (timestamped); `scalebricks-bench plot` takes the medians
# and regenerates docs/bench/fig8-node-throughput.png, fig8-node-throughput-per-port.png,
# fig9-node-throughput-bubble.png, fig10-latency.png and cluster-tables.md. PLOT_ONLY=1 takes
# every run directly in raw/: keep other machines' runs in a subfolder.
# See docs/bench/cluster.md.
#
# Usage: scripts/bench-cluster.sh        (as root for the latency part and to install DPDK)
# Environment knobs (defaults in brackets):
#   SIZES            FIB entries in the cluster    [1000000 2000000 4000000 8000000 16000000 32000000]
#   RUNS             runs of each benchmark        [3]
#   NODES            nodes in the cluster          [4]
#   FIBS             FIB backends                  [cuckoo,rte_hash]
#   SECS             engine seconds per node row   [2]
#   LATENCY_FLOWS    tunnels of the latency cluster [1000000]
#   LATENCY_PACKETS  packets per architecture      [5000]
#   LATENCY_RATE     packets per second            [1000]
#   SKIP_LATENCY=1   skip the latency part (it needs root: namespaces)
#   PLOT_ONLY=1      only redo the figures from every JSON already in docs/bench/raw/
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"1000000 2000000 4000000 8000000 16000000 32000000"}
RUNS=${RUNS:-3}
NODES=${NODES:-4}
FIBS=${FIBS:-cuckoo,rte_hash}
SECS=${SECS:-2}
LATENCY_FLOWS=${LATENCY_FLOWS:-1000000}
LATENCY_PACKETS=${LATENCY_PACKETS:-5000}
LATENCY_RATE=${LATENCY_RATE:-1000}
SKIP_LATENCY=${SKIP_LATENCY:-0}
PLOT_ONLY=${PLOT_ONLY:-0}

RAW=docs/bench/raw
mkdir -p "$RAW"
BIN=target/release/scalebricks-bench
stamp=$(date -u +%Y%m%dT%H%M%SZ)

if [ "$(id -u)" -eq 0 ]; then
    scripts/apt-install.sh pkg-config build-essential libdpdk-dev iproute2 util-linux
fi
cargo build --release -p sb-bench --features dpdk
cargo build --release -p scalebricks

# One comma-separated list for --fib-entries.
sizes_csv=$(echo "$SIZES" | xargs | tr ' ' ',')

machine() {
    echo "$(uname -r), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)"
}

if [ "$PLOT_ONLY" != 1 ]; then
    echo "== $(machine)" >&2
    for r in $(seq 1 "$RUNS"); do
        f="$RAW/node-$stamp-run$r.json"
        echo "== node run $r/$RUNS: sizes $sizes_csv, fib $FIBS, $NODES nodes -> $f" >&2
        "$BIN" node --arch scalebricks,full-dup,hash-part --fib "$FIBS" --nodes "$NODES" \
            --fib-entries "$sizes_csv" --secs "$SECS" --json > "$f.tmp"
        mv "$f.tmp" "$f"
    done
    if [ "$(nproc)" -ge 2 ]; then
        for r in $(seq 1 "$RUNS"); do
            f="$RAW/node-per-port-$stamp-run$r.json"
            echo "== node --layout per-port run $r/$RUNS (one core per port, the paper's node) -> $f" >&2
            "$BIN" node --arch scalebricks,full-dup,hash-part --fib "$FIBS" --nodes "$NODES" \
                --fib-entries "$sizes_csv" --secs "$SECS" --layout per-port --json > "$f.tmp"
            mv "$f.tmp" "$f"
        done
    fi
    for r in $(seq 1 "$RUNS"); do
        f="$RAW/node-bubble-$stamp-run$r.json"
        echo "== node --bubble run $r/$RUNS -> $f" >&2
        "$BIN" node --arch scalebricks,full-dup,hash-part --fib "$FIBS" --nodes "$NODES" \
            --fib-entries "$sizes_csv" --secs "$SECS" --bubble --json > "$f.tmp"
        mv "$f.tmp" "$f"
    done
    if [ "$SKIP_LATENCY" != 1 ]; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "the latency benchmark needs root (network namespaces); SKIP_LATENCY=1 skips it" >&2
            exit 1
        fi
        for r in $(seq 1 "$RUNS"); do
            f="$RAW/latency-$stamp-run$r.json"
            echo "== latency run $r/$RUNS: $LATENCY_FLOWS tunnels, $LATENCY_PACKETS packets at $LATENCY_RATE pps -> $f" >&2
            "$BIN" latency --arch scalebricks,full-dup,hash-part --nodes "$NODES" \
                --flows "$LATENCY_FLOWS" --packets "$LATENCY_PACKETS" --rate "$LATENCY_RATE" \
                --json > "$f.tmp"
            mv "$f.tmp" "$f"
        done
    fi
fi

# The figures: from this invocation's runs, or with PLOT_ONLY=1 from every run kept in raw/.
pick() {
    local kind=$1
    if [ "$PLOT_ONLY" = 1 ]; then
        ls "$RAW"/"$kind"-2*.json 2>/dev/null || true
    else
        ls "$RAW"/"$kind"-"$stamp"-run*.json 2>/dev/null || true
    fi
}
mapfile -t node_files < <(pick node)
mapfile -t bubble_files < <(pick node-bubble)
mapfile -t per_port_files < <(pick node-per-port)
mapfile -t latency_files < <(pick latency)
if [ ${#node_files[@]} -eq 0 ]; then
    echo "no node results to plot in $RAW" >&2
    exit 1
fi
args=(--node "${node_files[@]}")
[ ${#bubble_files[@]} -gt 0 ] && args+=(--node-bubble "${bubble_files[@]}")
[ ${#per_port_files[@]} -gt 0 ] && args+=(--node-per-port "${per_port_files[@]}")
[ ${#latency_files[@]} -gt 0 ] && args+=(--latency "${latency_files[@]}")
"$BIN" plot "${args[@]}" --out-dir docs/bench
{
    echo
    if [ "$PLOT_ONLY" = 1 ]; then
        echo "Replotted $(date -u '+%Y-%m-%d %H:%M UTC') from every run kept in $RAW. Raw JSON:"
    else
        echo "Measured $(date -u '+%Y-%m-%d %H:%M UTC') on $(machine);"
        echo "node: \`--nodes $NODES --fib $FIBS --secs $SECS\`, $RUNS run(s) each; latency:"
        echo "\`--flows $LATENCY_FLOWS --packets $LATENCY_PACKETS --rate $LATENCY_RATE\`. Raw JSON:"
    fi
    for f in "${node_files[@]}" "${per_port_files[@]}" "${bubble_files[@]}" "${latency_files[@]}"; do
        echo "- \`$f\`"
    done
} >> docs/bench/cluster-tables.md
echo "== wrote docs/bench/fig8-node-throughput.png, fig8-node-throughput-per-port.png (given 2 CPUs), fig9-node-throughput-bubble.png, fig10-latency.png, cluster-tables.md" >&2
