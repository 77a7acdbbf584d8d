#!/usr/bin/env bash
# Issue 2's and issue 3's targets with both sides on the same pages: every configuration runs
# with PAGES=2m (our arrays on THP 2 MB pages, libcuckoo's too, DPDK on 2 MB hugepages reserved
# and mounted by scripts/hugepages.sh and undone after each run; needs root) and PAGES=4k
# (`--pages 4k`: nobody on huge pages), RUNS times each, interleaved, and prints per-row medians
# with the measured page sizes as a markdown table. Raw JSON under $OUT (default
# target/bench-pages). Settings: RUNS=3 FIB_SIZES="1048576 16777216" GPT_SIZES="1000000 4000000"
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
OUT=${OUT:-target/bench-pages}
FIB_SIZES=${FIB_SIZES:-"1048576 16777216"}
GPT_SIZES=${GPT_SIZES:-"1000000 4000000"}
BIN=${BIN:-target/release/scalebricks-bench}
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release -p sb-bench --features dpdk,libcuckoo >&2
mkdir -p "$OUT"

run() { # file, hugepage MB, args...
    local f=$1 mb=$2
    shift 2
    echo "== $f: scalebricks-bench $*" >&2
    scripts/hugepages.sh "$mb" "$BIN" "$@" > "$f.tmp"
    mv "$f.tmp" "$f"
}

for r in $(seq 1 "$RUNS"); do
    for n in $FIB_SIZES; do
        for hits in 100 0; do
            for p in 2m 4k; do
                mb=0
                [ $p = 2m ] && mb=$((n * 10 / 9 * 136 / 1048576 + 320))
                run "$OUT/fib-n$n-h$hits-$p-r$r.json" "$mb" fib --entries "$n" --key-bytes 13 \
                    --value-bytes 16 --load 0.9 --batch 32 --hit-ratio "$hits" \
                    --only scalebricks-cuckoo,dpdk-rte_hash,libcuckoo --pages $p --json
            done
        done
    done
    for n in $GPT_SIZES; do
        for p in 2m 4k; do
            mb=0
            [ $p = 2m ] && mb=$((n * 37 * 3 / 1048576 + 320))
            run "$OUT/gpt-n$n-$p-r$r.json" "$mb" gpt --keys "$n" --value-bits 2 \
                --peers setsep,dpdk-efd,sux-vfunc --seed "$r" --pages $p --json
        done
    done
done

python3 - "$OUT" <<'PY'
import glob, json, os, re, statistics, sys
out = sys.argv[1]
groups = {}
for f in sorted(glob.glob(os.path.join(out, "*-r*.json"))):
    m = re.match(r"(.*)-r\d+\.json", os.path.basename(f))
    groups.setdefault(m.group(1), []).append(json.load(open(f)))
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def fmt(x, d=2):
    return "-" if x is None else f"{x:.{d}f}"
def key(g):
    m = re.match(r"(fib|gpt)-n(\d+)(?:-h(\d+))?-(\w+)", g)
    return (m.group(1), int(m.group(2)), -int(m.group(3) or 0), m.group(4))
print("| bench | keys | hits | `--pages` | DPDK EAL | structure | page_size (measured) | lookup Mops/CPU-s (batched) | lookup Mops/wall-s (batched) | single Mops | insert / build M/s | updates K/s | runs |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for g in sorted(groups, key=key):
    docs = groups[g]
    p0 = docs[0]["params"]
    eal = p0.get("dpdk_eal") or {}
    ealtxt = "2 MB hugepages" if eal.get("hugepages") else "`--no-huge`"
    for row in docs[0]["results"]:
        rows = [next(x for x in d["results"] if x["name"] == row["name"]) for d in docs]
        pages = "/".join(sorted({x["page_size"] for x in rows}))
        if g.startswith("fib"):
            print(f"| fib | {p0['entries']} | {int(p0['hit_ratio']*100)}% | {p0['pages']} | {ealtxt} | {row['name']} | {pages} | "
                  f"{fmt(med([x['lookup_mops_cpu'] for x in rows]))} | {fmt(med([x['lookup_mops'] for x in rows]))} | - | {fmt(med([x['insert_mops'] for x in rows]))} | - | {len(rows)} |")
        else:
            print(f"| gpt | {p0['keys']} | - | {p0['pages']} | {ealtxt} | {row['name']} | {pages} | - | "
                  f"{fmt(med([x.get('lookup_mops_batched') for x in rows]))} | {fmt(med([x.get('lookup_mops_single') for x in rows]))} | "
                  f"{fmt(med([x.get('build_mkeys_per_s') for x in rows]))} | {fmt(med([x.get('update_kops') for x in rows]), 1)} | {len(rows)} |")
# ratios per run, medians
print()
def ratio_lines():
    for g in sorted(groups, key=key):
        docs = groups[g]
        p0 = docs[0]["params"]
        if g.startswith("fib"):
            rs = {}
            for d in docs:
                r = {x["name"]: x for x in d["results"]}
                o = r.get("scalebricks-cuckoo")
                for peer in ["dpdk-rte_hash", "libcuckoo"]:
                    if o and peer in r:
                        rs.setdefault(peer, []).append((o["lookup_mops_cpu"] / r[peer]["lookup_mops_cpu"], o["lookup_mops"] / r[peer]["lookup_mops"], o["insert_mops"] / r[peer]["insert_mops"]))
            for peer, v in rs.items():
                print(f"- fib {p0['entries']} hits {int(p0['hit_ratio']*100)}% --pages {p0['pages']}: ours/{peer} batched lookup per CPU-s "
                      + ", ".join(f"{a:.2f}" for a,_,_ in v) + f" (median {statistics.median(a for a,_,_ in v):.2f}x); per wall-s median {statistics.median(b for _,b,_ in v):.2f}x; insert median {statistics.median(c for _,_,c in v):.2f}x")
        else:
            v = []
            for d in docs:
                r = {x["name"]: x for x in d["results"]}
                s, e, x = r.get("setsep-16+8"), r.get("dpdk-efd"), r.get("sux-vfunc")
                if s and e and e.get("lookup_mops_batched"):
                    v.append((s["lookup_mops_batched"] / e["lookup_mops_batched"], s["build_mkeys_per_s"] / e["build_mkeys_per_s"], s["update_kops"] / e["update_kops"], s["lookup_mops_batched"] / x["lookup_mops_batched"] if x and x.get("lookup_mops_batched") else None))
            if v:
                print(f"- gpt {p0['keys']} --pages {p0['pages']}: setsep-16+8/EFD batched lookup " + ", ".join(f"{a[0]:.2f}" for a in v)
                      + f" (median {statistics.median(a[0] for a in v):.2f}x); build median {statistics.median(a[1] for a in v):.1f}x; updates median {statistics.median(a[2] for a in v):.2f}x; batched vs sux median {statistics.median(a[3] for a in v if a[3]):.2f}x")
ratio_lines()
PY
