#!/usr/bin/env bash
# Where an update burst's CPU goes (root; installs Debian's linux-perf if `perf` is missing): a 4-node namespace cluster of 100K
# flows, then 4 x PER inserts from one `scalebricks update` client per node at once (what
# `bench update --cluster` runs). During the burst only, counts glibc `malloc` calls of every
# process with a uprobe and samples every CPU; prints malloc calls per acknowledged update and
# the share of CPU samples in glibc's malloc/free functions.
#
#   scripts/profile-update.sh [BIN_DIR (from the repository root; default target/release)] [PER (default 50000)]
#
# The uprobe slows the burst; the rate it prints is not the cluster's (use `bench update`).
set -euo pipefail
trap 'echo "profile-update: failed at line $LINENO" >&2' ERR
cd "$(dirname "$0")/.."
command -v perf >/dev/null || scripts/apt-install.sh linux-perf
B=${1:-target/release}
PER=${2:-50000}
LIBC=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64/ {print $NF; exit}')
work=$(mktemp -d)
name=sbprof$$
cleanup() {
    "$B/scalebricks" cluster down --dir "$work/state" >/dev/null 2>&1 || true
    perf probe -d probe_libc:malloc >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
perf probe -d probe_libc:malloc >/dev/null 2>&1 || true
perf probe -x "$LIBC" --add malloc >/dev/null 2>&1
"$B/scalebricks" cluster up --nodes 4 --name "$name" --dir "$work/state" --flows 100000 \
    --seed 1 --capacity 600000 >/dev/null
python3 - "$work/state" "$PER" <<'PY'
import ipaddress, sys
d, per = sys.argv[1], int(sys.argv[2])
taken = set(l.split(',')[0] for l in open(d + '/flows.csv'))
fresh = ((n, str(ipaddress.IPv4Address(0x64400000 | n))) for n in range(0x400000))
fresh = (x for x in fresh if x[1] not in taken)
for i in range(4):
    with open(f"{d}/ins{i}.csv", "w") as f:
        f.write("op,ue,teid,enb,node\n")
        for _ in range(per):
            n, ue = next(fresh)
            f.write(f"insert,{ue},{0xb0000000 + n},10.2.{n % 4}.2,{n % 4}\n")
PY
burst() {
    for i in 0 1 2 3; do
        "$B/scalebricks" update --dir "$work/state" --node "$i" --input "$work/state/ins$i.csv" \
            >"$work/out$i.json" &
    done
    wait
}
export -f burst
export B work
# One burst under both: samples of every CPU around the count of malloc calls.
perf record -a -g -e cpu-clock -F 999 -o "$work/perf.data" -- \
    perf stat -a -x, -e probe_libc:malloc -o "$work/stat" -- bash -c burst >/dev/null 2>&1
python3 - "$work" <<'PY'
import json, subprocess, sys
w = sys.argv[1]
acked = sum(json.load(open(f"{w}/out{i}.json"))["acked"] for i in range(4))
calls = next(int(float(l.split(',')[0])) for l in open(f"{w}/stat") if 'probe_libc:malloc' in l)
rep = subprocess.run(["perf", "report", "-i", f"{w}/perf.data", "--no-children", "--sort", "sym",
                      "-g", "none", "--stdio"], capture_output=True, text=True).stdout
names = ("malloc", "_int_malloc", "_int_free", "cfree", "malloc_consolidate", "unlink_chunk",
         "__libc_calloc", "_int_realloc", "realloc")
share = sum(float(l.split('%')[0]) for l in rep.splitlines()
            if l.strip().endswith(names) and '%' in l and l.split()[-1].split('@')[0].split('.')[0] in names)
print(json.dumps({"acked_per_burst": acked, "malloc_calls_per_update": calls / acked,
                  "malloc_free_share_of_samples": share / 100}))
PY
