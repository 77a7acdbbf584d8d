#!/usr/bin/env bash
# The ScaleBricks paper's evaluation (SIGCOMM 2015, sec. 6), as far as it runs on this machine,
# in one command: Table 1 (SetSep construction), Figure 7 (GPT lookup rate by FIB size and
# batch size), Figures 8 and 9 (per-node throughput of the three architectures), Figure 10
# (latency through a namespace cluster, AF_PACKET and the XDP fast path), the update rate and
# Figure 11 (the scalability formula, computed and with our measured GPT bits/key and FIB
# entry size). It builds the release `scalebricks-bench` and `scalebricks` once, runs the
# existing `scalebricks-bench` commands, keeps their JSON under docs/reproduction/raw/, draws the
# PNGs with `scalebricks-bench plot` and writes docs/reproduction.md: our number beside the
# paper's, the machine, the commit and each step's seconds.
#
# Usage: scripts/reproduce.sh [--small | --full] [--no-install] [--no-dpdk] [--no-ports]
#   --small       (default) small sizes: under 10 minutes on the 2-core development VM once
#                 built (docs/reproduction.md states the measured time)
#   --full        the paper's sizes where memory allows (Table 1 at 16M keys instead of 64M,
#                 Figure 7 500K-64M keys, Figures 8/9 1M-32M entries, Figure 10 with 1M tunnels)
#   --no-install  do not install Debian packages as root (DPDK for EFD and rte_hash, clang and
#                 libbpf-dev for the XDP fast path); what is present is used
#   --no-dpdk     build without DPDK: no EFD column, no rte_hash rows
#   --no-ports    skip what needs root and real ports (latency, `bench io`, the cluster update rate)
# Environment: OUT (default docs/reproduction; the markdown goes to OUT.md).
# At the end (also when a step fails) it prints each step's wall seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=small
INSTALL=1
DPDK=1
PORTS=1
for arg in "$@"; do
    case $arg in
        --small) MODE=small ;;
        --full) MODE=full ;;
        --no-install) INSTALL=0 ;;
        --no-dpdk) DPDK=0 ;;
        --no-ports) PORTS=0 ;;
        -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "reproduce.sh: unknown argument \`$arg\` (--small --full --no-install --no-dpdk --no-ports)" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-docs/reproduction}
RAW=$OUT/raw
# The binaries this run uses: copied out of target/release once built, because other builds in
# the same tree (other features) may replace target/release's while this runs. `bench latency`
# runs the `scalebricks` next to it.
BINDIR=target/reproduce/bin
BIN=$BINDIR/scalebricks-bench
ROOT=0
[ "$(id -u)" -eq 0 ] && ROOT=1

# Step bookkeeping as in scripts/test.sh (headings to stderr: stdout is the report's).
STEPS_FD=2
. scripts/steps.sh

# Sizes per mode.
if [ "$MODE" = full ]; then
    T1_KEYS=16000000              # the paper: 64M (memory and time: 16M here)
    F7_SIZES="500000 1000000 2000000 4000000 8000000 16000000 32000000 64000000"
    F7_BATCHES="2 4 8 17 32"
    NODE_SIZES=1000000,2000000,4000000,8000000,16000000,32000000
    NODE_SECS=2
    LAT_FLOWS=1000000
    LAT_PACKETS=5000
    IO_SECS=5
    UPD_KEYS=4000000
    UPD_CLUSTER_FLOWS=1000000
    UPD_CLUSTER_UPDATES=200000
else
    T1_KEYS=1000000
    F7_SIZES="500000 1000000 4000000"
    F7_BATCHES="4 17 32"
    NODE_SIZES=1000000,4000000
    NODE_SECS=0.5
    LAT_FLOWS=100000
    LAT_PACKETS=1000
    IO_SECS=2
    UPD_KEYS=1000000
    UPD_CLUSTER_FLOWS=100000
    UPD_CLUSTER_UPDATES=20000
fi

load_now() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(load_now)
UPTIME_START=$(uptime)

if [ "$INSTALL" = 1 ] && [ "$ROOT" = 1 ]; then
    step apt "installing the peers' and the XDP fast path's Debian packages (scripts/install-peers.sh, install-bpf-tools.sh)"
    [ "$DPDK" = 1 ] && scripts/install-peers.sh >&2
    scripts/install-bpf-tools.sh >&2 || echo "note: clang/libbpf-dev not installed: no XDP fast path rows" >&2
    scripts/apt-install.sh iproute2 util-linux procps >&2
fi

# What this build can do.
features=()
HAVE_DPDK=0
HAVE_FAST=0
if [ "$DPDK" = 1 ] && pkg-config --exists libdpdk 2>/dev/null; then
    features+=(sb-bench/dpdk)
    HAVE_DPDK=1
fi
if [ "$PORTS" = 1 ] && command -v clang >/dev/null && [ -f /usr/include/bpf/bpf_helpers.h ]; then
    features+=(sb-bench/fastpath scalebricks/fastpath)
    HAVE_FAST=1
fi
feat_csv=$(IFS=,; echo "${features[*]:-}")

step build "cargo build --release -p sb-bench -p scalebricks${feat_csv:+ --features $feat_csv}"
if [ -n "$feat_csv" ]; then
    cargo build --release -p sb-bench -p scalebricks --features "$feat_csv"
else
    cargo build --release -p sb-bench -p scalebricks
fi
mkdir -p "$BINDIR"
cp target/release/scalebricks-bench target/release/scalebricks "$BINDIR/"

mkdir -p "$RAW"
rm -f "$RAW"/*.json "$RAW"/*.tmp "$RAW"/*.log "$OUT"/*.png "$OUT"/cluster-tables.md
PEERS=setsep
[ "$HAVE_DPDK" = 1 ] && PEERS=setsep,dpdk-efd

# `gpt_run FILE ARGS...`: one `bench gpt` run into RAW/FILE; with EFD as root on 2 MB hugepages
# (scripts/hugepages.sh, as scripts/bench-gpt.sh does), else as it is.
gpt_run() {
    local f=$RAW/$1 keys=$2
    shift 2
    local mb=0
    if [[ " $* " == *dpdk-efd* ]] && [ "$ROOT" = 1 ]; then
        mb=$((keys * (13 + 24) * 3 / 1048576 + 320))
    fi
    echo "gpt --keys $keys $* -> $f" >&2
    scripts/hugepages.sh "$mb" "$BIN" gpt --keys "$keys" "$@" --json >"$f.tmp" 2>"$f.log" ||
        { cat "$f.log" >&2; exit 1; }
    mv "$f.tmp" "$f"
    rm -f "$f.log"
}

step table1 "Table 1: SetSep construction at $T1_KEYS keys (configs, value bits 1-5, 1 and 2 threads; $PEERS)"
gpt_run t1-v1.json "$T1_KEYS" --value-bits 1 --configs 16+8,8+16,16+16 --peers "$PEERS" --updates 0
gpt_run t1-v2.json "$T1_KEYS" --value-bits 2 --peers "$PEERS" --updates 200000
for v in 3 4 5; do
    gpt_run "t1-v$v.json" "$T1_KEYS" --value-bits "$v" --peers setsep --updates 0
done
if [ "$(nproc)" -ge 2 ]; then
    gpt_run t1-v1-t2.json "$T1_KEYS" --value-bits 1 --threads 2 --peers setsep --updates 0
fi

step fig7 "Figure 7: SetSep lookups (2-bit values, 16+8, one thread) at $F7_SIZES keys, batches 1 $F7_BATCHES"
for n in $F7_SIZES; do
    for b in $F7_BATCHES; do
        gpt_run "f7-n$n-b$b.json" "$n" --value-bits 2 --peers setsep --updates 0 --batch "$b"
    done
done

node_run() {
    local f=$RAW/$1
    shift
    echo "node $* -> $f" >&2
    "$BIN" node --arch scalebricks,full-dup,hash-part --fib "$FIBS" --nodes 4 \
        --fib-entries "$NODE_SIZES" --secs "$NODE_SECS" --policy none "$@" --json >"$f.tmp"
    mv "$f.tmp" "$f"
}
FIBS=cuckoo
[ "$HAVE_DPDK" = 1 ] && FIBS=cuckoo,rte_hash
step fig8 "Figures 8 and 9: one node's engine per core, 4 nodes, $NODE_SIZES entries, FIB $FIBS"
node_run node.json
if [ "$(nproc)" -ge 2 ]; then
    node_run node-per-port.json --layout per-port
fi
node_run node-bubble.json --bubble

if [ "$PORTS" = 1 ] && [ "$ROOT" = 1 ]; then
    step fig10 "Figure 10: one-way latency through a 4-node namespace cluster, $LAT_FLOWS tunnels, AF_PACKET$([ "$HAVE_FAST" = 1 ] && echo ' and the XDP fast path')"
    "$BIN" latency --flows "$LAT_FLOWS" --packets "$LAT_PACKETS" --rate 1000 --io afpacket \
        --json >"$RAW/latency-afpacket.json.tmp"
    mv "$RAW/latency-afpacket.json.tmp" "$RAW/latency-afpacket.json"
    if [ "$HAVE_FAST" = 1 ]; then
        "$BIN" latency --flows "$LAT_FLOWS" --packets "$LAT_PACKETS" --rate 1000 --io xdp-fast \
            --json >"$RAW/latency-xdp-fast.json.tmp"
        mv "$RAW/latency-xdp-fast.json.tmp" "$RAW/latency-xdp-fast.json"
    fi

    step ports "one node through real veths: the engine on AF_PACKET$([ "$HAVE_FAST" = 1 ] && echo ' and the XDP fast path'), 1M tunnels, 64 B"
    backends=afpacket
    [ "$HAVE_FAST" = 1 ] && backends=afpacket,xdp-fast
    "$BIN" io --engine --backend "$backends" --size 64 --seconds "$IO_SECS" \
        --engine-flows 1000000 --direction downlink,uplink --json >"$RAW/io-engine.json.tmp"
    mv "$RAW/io-engine.json.tmp" "$RAW/io-engine.json"
fi

step update "update rate: the GPT owner per core$([ "$PORTS" = 1 ] && [ "$ROOT" = 1 ] && echo ', and a 4-node namespace cluster')"
upd=(--keys "$UPD_KEYS" --updates 200000 --nodes 4)
if [ "$PORTS" = 1 ] && [ "$ROOT" = 1 ]; then
    upd+=(--cluster --cluster-flows "$UPD_CLUSTER_FLOWS" --cluster-updates "$UPD_CLUSTER_UPDATES" --replicas 1,3)
fi
"$BIN" update "${upd[@]}" --json >"$RAW/update.json.tmp"
mv "$RAW/update.json.tmp" "$RAW/update.json"

step plot "the figures (scalebricks-bench plot) and docs/reproduction.md"
python3 scripts/reproduce_report.py specs "$RAW" "$OUT"
plot=(--node "$RAW/node.json" --node-bubble "$RAW/node-bubble.json")
[ -f "$RAW/node-per-port.json" ] && plot+=(--node-per-port "$RAW/node-per-port.json")
[ -f "$RAW/latency-afpacket.json" ] && plot+=(--latency "$RAW/latency-afpacket.json")
"$BIN" plot "${plot[@]}" --lines "$OUT"/spec-*.json --out-dir "$OUT" >&2
rm -f "$OUT"/spec-*.json

step_end
# Everything but the report itself: the report is the last step and takes well under a second.
elapsed=$(($(date +%s) - run_start))
step_table=""
for i in "${!steps[@]}"; do
    step_table+="${steps[$i]}=${secs[$i]} "
done
MODE=$MODE ELAPSED=$elapsed STEPS=$step_table LOAD_START=$LOAD_START LOAD_END=$(load_now) \
    UPTIME_START=$UPTIME_START UPTIME_END=$(uptime) HAVE_DPDK=$HAVE_DPDK HAVE_FAST=$HAVE_FAST \
    PORTS=$PORTS ROOT=$ROOT FEATURES=$feat_csv \
    python3 scripts/reproduce_report.py report "$RAW" "$OUT" >"$OUT.md.tmp"
mv "$OUT.md.tmp" "$OUT.md"
echo "==> wrote $OUT.md, its PNGs in $OUT/ and the raw JSON in $RAW/" >&2
