#!/usr/bin/env bash
# Packet I/O benchmark: one pinned thread forwards frames between two veths in network
# namespaces with each backend (AF_PACKET with both transmit paths, AF_XDP copy mode, in-memory
# ports), for 64- and 1500-byte frames, next to what `tcpreplay --topspeed` achieves into the same
# veth. Writes JSON to target/bench-io/io.json and keeps the pcaps tcpreplay replayed.
# Needs root. Usage: scripts/bench-io.sh [SECONDS_PER_ROW]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-5}
out=target/bench-io
mkdir -p "$out"

if [ "$(id -u)" -ne 0 ]; then
    echo "bench-io needs root (network namespaces, AF_PACKET, AF_XDP)" >&2
    exit 1
fi
scripts/apt-install.sh tcpreplay iproute2 util-linux

cargo build --release -p sb-bench --features xdp

echo "kernel $(uname -r), $(nproc) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
target/release/scalebricks-bench io \
    --backend afpacket,xdp,memory --tx-mode sendmmsg,ring --rx-mode blocks,frames --size 64,1500 \
    --seconds "$secs" --tcpreplay --pcap-dir "$out" --json | tee "$out/io.json"

# A table for docs/bench/io.md.
python3 - "$out/io.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("\n| backend | tx path | rx ring | frame | forwarded pps (wall) | pps per core | thread s (stat) | CPU softirq s | pps per core (schedstat + ksoftirqd) |")
print("|---|---|---|---|---|---|---|---|---|")
for x in r["rows"]:
    print(f"| {x['backend']} | {x['tx_mode'] or '-'} | {x['rx_mode'] or '-'} | {x['size']} | {x['pps']:,.0f} | **{x['pps_per_core']:,.0f}** | {x['fwd_thread_cpu_s']:.2f} | {x['cpu_softirq_s']:.2f} | {x['pps_per_core_sched']:,.0f} |")
for t in r["tcpreplay"]:
    f = t["forwarder"]
    print(f"| tcpreplay --topspeed into g0 (its own rate) | PF_PACKET send() | - | {t['size']} | {t['pps']:,.0f} | {t['pps_per_core']:,.0f} (per tcpreplay CPU s) | {t['cpu_s']:.2f} | - | - |")
    print(f"| afpacket fed by tcpreplay | sendmmsg | blocks | {t['size']} | {f['pps']:,.0f} | **{f['pps_per_core']:,.0f}** | {f['fwd_thread_cpu_s']:.2f} | {f['cpu_softirq_s']:.2f} | {f['pps_per_core_sched']:,.0f} |")
PY
