#!/usr/bin/env bash
# SetSep against its peers (DPDK EFD, sux VFunc, ptr_hash, hashbrown): installs the Debian
# packages, builds the release `scalebricks-bench` with every peer enabled, runs its `gpt` harness at
# each size / value width / thread count RUNS times, keeps every JSON under $OUT, and prints the
# median of each number per row as a markdown table (also written to $OUT/summary.md, with the
# medians as JSON in $OUT/summary.json).
#
# Settings (environment variables):
#   SIZES="1000000 4000000 16000000"  BITS="1 2"  THREADS="1 2"  RUNS=3
#   OUT=out/bench-gpt   BATCH=32   KEY_BYTES=13   UPDATES=200000
#   PEERS=setsep,dpdk-efd,sux-vfunc,ptr_hash,hashbrown   (the one-thread runs)
#   KEEP=1   keeps the runs already under $OUT (to add sizes to a table in several steps)
#   PAGES=2m (default: SetSep on 2 MB pages and, as root, each run gets 2 MB hugepages reserved
#            and mounted by scripts/hugepages.sh, undone after it, so DPDK EFD runs on them)
#         or 4k (the control: `--pages 4k`, no huge pages for anyone); rows' pages are measured
# Runs with more than one thread time only the structures that build in parallel
# (SetSep, sux VFunc, ptr_hash); the one-thread runs time everything.
#
# Usage: scripts/bench-gpt.sh          (full size: about an hour on 2 cores)
#        SIZES=100000 RUNS=1 scripts/bench-gpt.sh   (a quick check)
set -euo pipefail
cd "$(dirname "$0")/.."

SIZES=${SIZES:-"1000000 4000000 16000000"}
BITS=${BITS:-"1 2"}
THREADS=${THREADS:-"1 2"}
RUNS=${RUNS:-3}
OUT=${OUT:-out/bench-gpt}
BATCH=${BATCH:-32}
KEY_BYTES=${KEY_BYTES:-13}
UPDATES=${UPDATES:-200000}
PEERS=${PEERS:-setsep,dpdk-efd,sux-vfunc,ptr_hash,hashbrown}
KEEP=${KEEP:-0}
PAGES=${PAGES:-2m}

step() { printf '==> %s\n' "$*" >&2; }

step "installing the peers' Debian packages"
scripts/install-peers.sh >&2

step "building scalebricks-bench (release, --features dpdk)"
cargo build --release -p sb-bench --features dpdk >&2
BIN=target/release/scalebricks-bench

mkdir -p "$OUT"
[ "$KEEP" = 1 ] || rm -f "$OUT"/run-*.json
for n in $SIZES; do
    for v in $BITS; do
        for t in $THREADS; do
            if [ "$t" -eq 1 ]; then
                peers=$PEERS
                updates=$UPDATES
            else
                # Only the structures that build in parallel; untimed updates.
                peers=$(echo "$PEERS" | tr , '\n' | grep -E '^(setsep|sux-vfunc|ptr_hash)$' | paste -sd,)
                updates=0
            fi
            for r in $(seq 1 "$RUNS"); do
                f="$OUT/run-n$n-v$v-t$t-r$r.json"
                step "keys=$n value_bits=$v threads=$t run $r/$RUNS -> $f"
                # EFD's EAL memory (sb_peers::dpdk::efd::mem_mb_for) plus a margin.
                mb=0
                [ "$PAGES" = 2m ] && mb=$((n * (KEY_BYTES + 24) * 3 / 1048576 + 320))
                scripts/hugepages.sh "$mb" "$BIN" gpt --keys "$n" --value-bits "$v" --threads "$t" \
                    --batch "$BATCH" --key-bytes "$KEY_BYTES" --updates "$updates" \
                    --peers "$peers" --seed "$r" --pages "$PAGES" --json > "$f.tmp"
                mv "$f.tmp" "$f"
            done
        done
    done
done

step "medians"
python3 - "$OUT" "$BIN" <<'EOF'
import glob, json, os, statistics, sys
out, binary = sys.argv[1], sys.argv[2]
groups = {}
params_seen = None
peak_rss = {}
for f in sorted(glob.glob(os.path.join(out, "run-*.json"))):
    d = json.load(open(f))
    p = d["params"]
    params_seen = p
    k = (p["keys"], p["value_bits"], p["threads"])
    peak_rss[k] = max(peak_rss.get(k, 0), p.get("peak_rss_mib") or 0)
    for r in d["results"]:
        key = (p["keys"], p["value_bits"], p["threads"], r["name"])
        groups.setdefault(key, []).append(r)

fields = ["build_mkeys_per_s", "bits_per_key", "lookup_mops_single", "lookup_mops_batched",
          "update_kops", "fallback_ratio"]

def med(rows, f):
    xs = [r[f] for r in rows if r.get(f) is not None]
    return statistics.median(xs) if xs else None

summary = []
for (n, v, t, name), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
    s = {"keys": n, "value_bits": v, "threads": t, "name": name, "runs": len(rows),
         "correct": all(r["correct"] for r in rows), "wrong": sum(r.get("wrong", 0) for r in rows),
         "page_size": rows[0].get("page_size"), "note": rows[0].get("note", "")}
    for f in fields:
        s[f] = med(rows, f)
    summary.append(s)
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)

def fmt(x, digits=2):
    return "-" if x is None else f"{x:.{digits}f}"

def size(n):
    return f"{n // 1000000}M" if n % 1000000 == 0 else (f"{n // 1000}K" if n % 1000 == 0 else str(n))

lines = []
if params_seen:
    lines.append(f"CPU: {params_seen.get('cpu', '?')}, {params_seen.get('cores', '?')} cores; "
                 f"{params_seen['key_bytes']}-byte keys, batch {params_seen['batch']}, "
                 f"{params_seen['updates']} updates; median of the runs per row.")
    lines.append("")
lines.append("| keys | V | thr | structure | build M keys/s | bits/key | lookup Mops single | lookup Mops batched | updates K/s | fallback | pages | correct |")
lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
for s in summary:
    fb = "-" if s["fallback_ratio"] is None else f"{s['fallback_ratio'] * 100:.4f}%"
    ok = "yes" if s["correct"] else f"NO ({s['wrong']} wrong)"
    lines.append(f"| {size(s['keys'])} | {s['value_bits']} | {s['threads']} | {s['name']} | "
                 f"{fmt(s['build_mkeys_per_s'])} | {fmt(s['bits_per_key'], 3)} | "
                 f"{fmt(s['lookup_mops_single'])} | {fmt(s['lookup_mops_batched'])} | "
                 f"{fmt(s['update_kops'], 1)} | {fb} | {s['page_size']} | {ok} |")
notes = {}
for s in summary:
    notes.setdefault(s["name"], s["note"])
lines.append("")
for name, note in notes.items():
    if note:
        lines.append(f"- `{name}`: {note}")

# The issue's targets, checked on the medians (setsep-16+8 against the peers of the same size).
def get(n, v, t, name, f):
    for s in summary:
        if (s["keys"], s["value_bits"], s["threads"], s["name"]) == (n, v, t, name):
            return s[f]
    return None

checks = []
def check(what, ok, detail):
    if ok is None:
        return
    checks.append(f"- {'PASS' if ok else 'MISS'}: {what} ({detail})")

sizes = sorted({s["keys"] for s in summary})
biggest = max(sizes) if sizes else None
S = "setsep-16+8"
for n in sizes:
    for v in sorted({s["value_bits"] for s in summary}):
        bpk = get(n, v, 1, S, "bits_per_key")
        limit = {1: 2.05, 2: 3.55}.get(v)
        if bpk is not None and limit is not None:
            check(f"{size(n)} V={v}: bits/key <= {limit}", bpk <= limit, f"{bpk:.3f}")
        fb = get(n, v, 1, S, "fallback_ratio")
        if fb is not None:
            check(f"{size(n)} V={v}: fallback <= 0.01%", fb <= 0.0001, f"{fb * 100:.4f}%")
    v = 2
    b1, befd = get(n, v, 1, S, "build_mkeys_per_s"), get(n, v, 1, "dpdk-efd", "build_mkeys_per_s")
    if b1 is not None:
        check(f"{size(n)} V=2: build >= 4 M keys/s on one thread", b1 >= 4, f"{b1:.2f}")
        if befd:
            check(f"{size(n)} V=2: build >= 10x EFD insert", b1 >= 10 * befd, f"{b1 / befd:.1f}x")
        b2 = get(n, v, 2, S, "build_mkeys_per_s")
        if b2 is not None:
            check(f"{size(n)} V=2: 2 threads >= 1.8x 1 thread", b2 >= 1.8 * b1, f"{b2 / b1:.2f}x")
    lb, ls = get(n, v, 1, S, "lookup_mops_batched"), get(n, v, 1, S, "lookup_mops_single")
    if lb is not None:
        e, x = get(n, v, 1, "dpdk-efd", "lookup_mops_batched"), get(n, v, 1, "sux-vfunc", "lookup_mops_batched")
        if e:
            check(f"{size(n)} V=2: batched lookup >= 3x EFD bulk", lb >= 3 * e, f"{lb / e:.2f}x")
        if x:
            check(f"{size(n)} V=2: batched lookup >= sux VFunc", lb >= x, f"{lb / x:.2f}x")
        if ls:
            check(f"{size(n)} V=2: batched >= 1.5x single", lb >= 1.5 * ls, f"{lb / ls:.2f}x")
    if n == biggest:
        u, ue = get(n, v, 1, S, "update_kops"), get(n, v, 1, "dpdk-efd", "update_kops")
        if u is not None:
            check(f"{size(n)} V=2: updates >= 500 K/s", u >= 500, f"{u:.1f} K/s")
            if ue:
                check(f"{size(n)} V=2: updates >= 5x EFD", u >= 5 * ue, f"{u / ue:.2f}x")
if peak_rss:
    lines.append("")
    worst = max(peak_rss.items(), key=lambda kv: kv[1])
    lines.append(f"Peak memory of one benchmark process: {worst[1]} MiB "
                 f"(keys={size(worst[0][0])}, V={worst[0][1]}, threads={worst[0][2]}).")
if checks:
    lines.append("")
    lines.append("Targets of issue 2 (setsep-16+8, medians above):")
    lines.append("")
    lines.extend(checks)
text = "\n".join(lines) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
print(text, end="")
EOF
