#!/usr/bin/env python3
"""The report half of scripts/reproduce.sh (run by it; standard library only).

  reproduce_report.py specs  RAW OUT   writes OUT/spec-fig7.json and OUT/spec-fig11.json, the
                                       line-chart specs `scalebricks-bench plot --lines` draws
  reproduce_report.py report RAW OUT   prints docs/reproduction.md (markdown) from the JSON in
                                       RAW, the environment reproduce.sh sets and OUT's files

The paper's numbers are copied from its text (shared/papers/000_*.txt: ScaleBricks, SIGCOMM
2015, sections 6.1-6.3): Table 1, the statements about Figures 7-10, the update rate and the
formula of section 6.3. Figures 7-11 survive only as captions and axis labels, so where the paper
gives no number the column says so.
"""
import glob
import json
import math
import os
import statistics
import subprocess
import sys

M_BITS = 16 * 2**20 * 8  # Figure 11: 16 MiB of memory per server


def load(path):
    with open(path) as f:
        return json.load(f)


def rows(d):
    return d.get("results") or d.get("rows") or []


def fmt(x, digits=2):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{digits}f}"


def size(n):
    n = int(n)
    if n % 1000000 == 0:
        return f"{n // 1000000}M"
    if n % 1000 == 0:
        return f"{n // 1000}K"
    return str(n)


def row(d, name):
    for r in rows(d):
        if r.get("name") == name:
            return r
    return None


def gpt_bits_per_key(raw):
    """Measured SetSep 16+8 bits/key per value width, from the Table 1 runs."""
    out = {}
    for v in range(1, 6):
        p = os.path.join(raw, f"t1-v{v}.json")
        if os.path.exists(p):
            r = row(load(p), "setsep-16+8")
            if r and r.get("bits_per_key"):
                out[v] = r["bits_per_key"]
    return out


def fig7(raw):
    """{keys: {batch: Mops}} (batch 1 = one key per call: the median of every run's single
    column at that size)."""
    pts = {}
    singles = {}
    for p in glob.glob(os.path.join(raw, "f7-n*-b*.json")):
        d = load(p)
        n, b = d["params"]["keys"], d["params"]["batch"]
        r = row(d, "setsep-16+8")
        if not r or not r.get("correct"):
            continue
        pts.setdefault(n, {})[b] = r["lookup_mops_batched"]
        singles.setdefault(n, []).append(r["lookup_mops_single"])
    for n, s in singles.items():
        pts[n][1] = statistics.median(s)
    return pts


def node_entry_bits(raw):
    """Bits per FIB entry of our cuckoo FIB (full duplication, the largest size measured):
    the table's bytes per node over its entries."""
    p = os.path.join(raw, "node.json")
    if not os.path.exists(p):
        return None, None
    best = None
    for r in rows(load(p)):
        if r.get("arch") == "full-dup" and r.get("fib") == "cuckoo" and r.get("fib_entries_per_node"):
            if best is None or r["fib_entries"] > best["fib_entries"]:
                best = r
    if best is None:
        return None, None
    return best["fib_bytes_per_node"] * 8 / best["fib_entries_per_node"], best["fib_entries"]


def fig11(raw):
    """Rows n -> dict of total FIB entries the cluster holds, each way."""
    bpk = gpt_bits_per_key(raw)
    ours_bits, _ = node_entry_bits(raw)
    out = []
    for n in [1, 2, 4, 8, 16, 32]:
        v = max(1, math.ceil(math.log2(n))) if n > 1 else 0
        r = {"n": n, "v": v}
        r["full_dup"] = M_BITS / 64
        r["hash_part"] = n * M_BITS / 64
        r["formula"] = M_BITS * n / (64 + (0.5 + 1.5 * math.log2(n)) * n)
        g = 0.0 if n == 1 else bpk.get(v)
        r["gpt_bits"] = g
        r["measured_gpt"] = None if g is None else M_BITS * n / (64 + g * n)
        if ours_bits:
            r["ours_full_dup"] = M_BITS / ours_bits
            r["ours_sb"] = None if g is None else M_BITS * n / (ours_bits + g * n)
        out.append(r)
    return out, ours_bits


def specs(raw, out):
    pts = fig7(raw)
    batches = sorted({b for v in pts.values() for b in v})
    series = []
    for b in batches:
        line = [[n, pts[n][b]] for n in sorted(pts) if b in pts[n]]
        series.append({"name": "no batching (one key per call)" if b == 1 else f"batch {b}",
                       "points": line})
    spec7 = {"file": "fig7-gpt-lookup.png",
             "title": "SetSep lookups, 2-bit values, 16+8, one thread (Fig. 7)",
             "x_label": "FIB entries (keys)", "y_label": "Mops (one thread)", "series": series}
    f11, ours_bits = fig11(raw)
    m = 1e6
    s11 = [
        {"name": "full duplication (64-bit entries)", "points": [[r["n"], r["full_dup"] / m] for r in f11], "thin": True},
        {"name": "hash partitioning (64-bit entries)", "points": [[r["n"], r["hash_part"] / m] for r in f11], "thin": True},
        {"name": "ScaleBricks, the paper's formula", "points": [[r["n"], r["formula"] / m] for r in f11], "thin": True},
        {"name": "ScaleBricks, our measured GPT bits/key (64-bit entries)",
         "points": [[r["n"], r["measured_gpt"] / m] for r in f11 if r["measured_gpt"]]},
    ]
    if ours_bits:
        s11.append({"name": f"ScaleBricks, our FIB entry ({ours_bits:.0f} bits) + measured GPT",
                    "points": [[r["n"], r["ours_sb"] / m] for r in f11 if r.get("ours_sb")]})
        s11.append({"name": f"full duplication, our FIB entry ({ours_bits:.0f} bits)",
                    "points": [[r["n"], r["ours_full_dup"] / m] for r in f11]})
    spec11 = {"file": "fig11-scalability.png",
              "title": "FIB entries a cluster holds with 16 MiB per server (Fig. 11)",
              "x_label": "servers", "y_label": "million FIB entries in the cluster",
              "x_ticks": [1, 2, 4, 8, 16, 32], "series": s11}
    for name, spec in (("spec-fig7.json", spec7), ("spec-fig11.json", spec11)):
        with open(os.path.join(out, name), "w") as f:
            json.dump(spec, f)


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def machine():
    model = sh("lscpu | sed -n 's/^Model name: *//p' | head -1")
    cpus = sh("nproc")
    mem_kb = sh("sed -n 's/^MemTotal: *\\([0-9]*\\) kB/\\1/p' /proc/meminfo")
    mem = f"{int(mem_kb) / 2**20:.1f} GiB" if mem_kb.isdigit() else "?"
    l3 = sh("lscpu | sed -n 's/^L3 cache: *//p' | head -1")
    virt = sh("lscpu | sed -n 's/^Hypervisor vendor: *//p' | head -1")
    return model, cpus, mem, l3, virt, sh("uname -r")


def commit():
    h = sh("git rev-parse --short HEAD")
    dirty = sh("git status --porcelain --untracked-files=no")
    paths = [l[3:] for l in dirty.splitlines() if l.strip()]
    in_crates = [p for p in paths if p.startswith("crates/")]
    return h, paths, in_crates


PAPER_T1 = {
    # (config, value bits, threads): (M keys/s, fallback %, total size MB at 64M keys, bits/key)
    ("16+8", 1, 1): (0.54, 0.00, 16.00, 2.00),
    ("8+16", 1, 1): (2.42, 1.15, 16.64, 2.08),
    ("16+16", 1, 1): (2.47, 0.00, 20.00, 2.50),
    ("16+8", 2, 1): (0.24, 0.00, 28.00, 3.50),
    ("16+8", 3, 1): (0.18, 0.00, 40.00, 5.00),
    ("16+8", 4, 1): (0.14, 0.00, 52.00, 6.50),
    ("16+8", 1, 2): (0.93, 0.00, 16.00, 2.00),
}


def table1(raw, lines):
    lines.append("| setting | config | value bits | threads | ours: build M keys/s | paper | ours: bits/key | paper | ours: fallback | paper | ours: size at 64M keys (MiB, from bits/key) | paper (MB) | correct |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    runs = [("x+y bits of a hash function", "t1-v1.json", ["16+8", "8+16", "16+16"], 1, 1),
            ("value size", "t1-v2.json", ["16+8"], 2, 1),
            ("value size", "t1-v3.json", ["16+8"], 3, 1),
            ("value size", "t1-v4.json", ["16+8"], 4, 1),
            ("value size (Fig. 11's 32 nodes)", "t1-v5.json", ["16+8"], 5, 1),
            ("threads", "t1-v1-t2.json", ["16+8"], 1, 2)]
    keys = None
    efd = []
    for what, file, configs, v, t in runs:
        p = os.path.join(raw, file)
        if not os.path.exists(p):
            continue
        d = load(p)
        keys = d["params"]["keys"]
        for c in configs:
            r = row(d, f"setsep-{c}")
            if r is None:
                continue
            paper = PAPER_T1.get((c, v, t))
            bpk = r.get("bits_per_key")
            fb = r.get("fallback_ratio")
            lines.append(
                f"| {what} | {c} | {v} | {t} | **{fmt(r.get('build_mkeys_per_s'))}** | "
                f"{fmt(paper[0]) if paper else '-'} | {fmt(bpk, 3)} | {fmt(paper[3]) if paper else '-'} | "
                f"{'-' if fb is None else f'{fb * 100:.4f}%'} | {f'{paper[1]:.2f}%' if paper else '-'} | "
                f"{fmt(bpk * 8) if bpk else '-'} | {fmt(paper[2]) if paper else '-'} | "
                f"{'yes' if r.get('correct') else 'NO'} |")
        e = row(d, "dpdk-efd")
        if e is not None:
            efd.append((v, e))
    lines.append("")
    lines.append(f"Ours: {size(keys) if keys else '?'} random 13-byte keys (an IPv4 5-tuple), one "
                 "run each; the paper: 64M keys, Xeon E5-2697 v2. The paper's multi-thread rows go "
                 "on to 4, 8 and 16 threads (1.56, 2.28, 2.97 M keys/s); this machine has 2 cores. "
                 "Ludo-style figures: no Ludo hashing implementation is among our peers, so none.")
    if efd:
        lines.append("")
        lines.append("DPDK EFD (Intel's product version of SetSep) in the same runs:")
        lines.append("")
        lines.append("| value bits | EFD build M keys/s (one `rte_efd_update` per key) | EFD bits/key (online table) | SetSep 16+8 build M keys/s | SetSep / EFD | EFD lookups Mops single / bulk | page size |")
        lines.append("|---|---|---|---|---|---|---|")
        for v, e in efd:
            s = row(load(os.path.join(raw, f"t1-v{v}.json")), "setsep-16+8")
            ratio = (s["build_mkeys_per_s"] / e["build_mkeys_per_s"]
                     if s and e.get("build_mkeys_per_s") else None)
            lines.append(f"| {v} | {fmt(e.get('build_mkeys_per_s'))} | {fmt(e.get('bits_per_key'), 2)} | "
                         f"{fmt(s.get('build_mkeys_per_s')) if s else '-'} | {fmt(ratio, 1)}x | "
                         f"{fmt(e.get('lookup_mops_single'))} / {fmt(e.get('lookup_mops_batched'))} | "
                         f"{e.get('page_size', '?')} |")
    elif os.environ.get("HAVE_DPDK") != "1":
        lines.append("")
        lines.append("**No EFD column**: this build has no `dpdk` feature (libdpdk-dev missing, not "
                     "root to install it, or `--no-dpdk`).")


def fig7_section(raw, lines):
    pts = fig7(raw)
    if not pts:
        lines.append("(no Figure 7 runs)")
        return
    batches = sorted({b for v in pts.values() for b in v})
    lines.append("| keys | " + " | ".join("no batching" if b == 1 else f"batch {b}" for b in batches)
                 + " | best batch / no batching |")
    lines.append("|---|" + "---|" * (len(batches) + 1))
    for n in sorted(pts):
        best = max(pts[n].get(b, 0) for b in batches if b != 1) if len(batches) > 1 else None
        single = pts[n].get(1)
        lines.append(f"| {size(n)} | " + " | ".join(fmt(pts[n].get(b)) for b in batches)
                     + f" | {fmt(best / single if best and single else None)}x |")
    lines.append("")
    lines.append("Ours: Mops of **one thread** (SetSep `lookup_batch`, the 3-stage prefetch "
                 "pipeline, in calls of B keys; \"no batching\" is one `lookup` per key, the median "
                 "over the runs at that size), 2-bit values, 16+8, every answer checked first.")
    lines.append("")
    lines.append("**Paper (sec. 6.1.2, Fig. 7; 2-bit values, 16+8, 16 threads):** about 520 Mops "
                 "with batch 17 even at 64M keys (520 / 16 = 32.5 Mops per thread, our division); "
                 "batches above 17 do not help; a sharp drop from 32M to 64M keys (the 28 MiB table "
                 "leaves the L3 cache); at small FIBs (500K) no batching is faster than batching. "
                 "Batching gives up to 1.8x (the talk slides). Its other points are only a curve.")


def latency_rows(d):
    return {r["arch"]: r for r in rows(d)}


def latency_section(raw, lines):
    files = [("AF_PACKET", "latency-afpacket.json"), ("XDP fast path", "latency-xdp-fast.json")]
    have = [(n, load(os.path.join(raw, f))) for n, f in files if os.path.exists(os.path.join(raw, f))]
    if not have:
        lines.append("Not run: it needs root and network namespaces (`--no-ports` or not root).")
        return
    d0 = have[0][1]
    lines.append(f"`scalebricks-bench latency --flows {d0['flows']} --packets "
                 f"{rows(d0)[0]['packets'] + rows(d0)[0]['lost']} --rate {d0['rate_pps']:.0f} --io IO`: "
                 "one-way latency of downstream packets through a 4-node cluster of node processes "
                 "in network namespaces (veths, a Linux bridge as the switch), per architecture; "
                 "the cuckoo FIB; microseconds.")
    lines.append("")
    lines.append("| nodes' I/O | arch | p50 | p99 | mean | max | packets | lost |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for name, d in have:
        for a, r in latency_rows(d).items():
            lines.append(f"| {name} | {a} | {fmt(r['p50_us'], 1)} | {fmt(r['p99_us'], 1)} | "
                         f"{fmt(r['mean_us'], 1)} | {fmt(r['max_us'], 1)} | {r['packets']} | {r['lost']} |")
    lines.append("")
    lines.append("| nodes' I/O | ScaleBricks / full dup., p50 | mean | hash part. / ScaleBricks, p50 | mean |")
    lines.append("|---|---|---|---|---|")
    for name, d in have:
        lr = latency_rows(d)
        def rat(a, b, k):
            return lr[a][k] / lr[b][k] if a in lr and b in lr and lr[b][k] else None
        lines.append(f"| {name} | {fmt(rat('scalebricks', 'full-dup', 'p50_us'))} | "
                     f"{fmt(rat('scalebricks', 'full-dup', 'mean_us'))} | "
                     f"{fmt(rat('hash-part', 'scalebricks', 'p50_us'))} | "
                     f"{fmt(rat('hash-part', 'scalebricks', 'mean_us'))} |")
    lines.append("| **paper** (Fig. 10, mean, Spirent RFC 2544, 1M tunnels) | - | 0.90 (up to 10% lower) | - | 1.52 (up to 34% lower) |")
    lines.append("")
    lines.append("The generator sends at 1000 packets/s: this is latency, not load; the mean and "
                 "the p99 carry the scheduling noise of a shared 2-core machine (four node "
                 "processes, the generator and the receivers on 2 CPUs), the median less so.")
    if os.environ.get("HAVE_FAST") != "1":
        lines.append("")
        lines.append("**No XDP fast path row**: the build has no `fastpath` feature (clang or "
                     "libbpf-dev missing, or `--no-ports`).")


def ports_section(raw, lines):
    p = os.path.join(raw, "io-engine.json")
    if not os.path.exists(p):
        lines.append("Not run: it needs root (network namespaces, AF_PACKET, XDP).")
        return
    d = load(p)
    lines.append("`scalebricks-bench io --engine --backend afpacket,xdp-fast --size 64 "
                 "--engine-flows 1000000 --direction downlink,uplink`: **one** node (GPT, cuckoo "
                 "FIB, GTP-U) between two veths, one pinned forwarding core.")
    lines.append("")
    lines.append("| direction | path | XDP mode | forwarded pps (wall) | pps per core | slow path |")
    lines.append("|---|---|---|---|---|---|")
    per = {}
    for r in rows(d):
        fp = r.get("fastpath") or {}
        lines.append(f"| {r['direction']} | {'XDP fast path' if r['backend'] == 'xdpfast' else r['backend']} | "
                     f"{fp.get('xdp_mode', '-')} | {fmt(r['pps'], 0)} | **{fmt(r['pps_per_core'], 0)}** | "
                     f"{fp.get('slow_path', '-')} |")
        per[(r["direction"], r["backend"])] = r["pps_per_core"]
    for direction in ("downlink", "uplink"):
        a, x = per.get((direction, "afpacket")), per.get((direction, "xdpfast"))
        if a and x:
            lines.append("")
            lines.append(f"{direction}: the XDP fast path {x / 1e6:.2f} Mpps per core, {x / a:.2f}x the "
                         "engine on AF_PACKET (issue 30's targets: >= 2 Mpps per core and >= 5x).")


def update_section(raw, lines):
    p = os.path.join(raw, "update.json")
    if not os.path.exists(p):
        return
    d = load(p)
    lines.append(f"`scalebricks-bench update --keys {d['keys']} --nodes 4 --json"
                 f"{' --cluster' if d.get('cluster') else ''}`:")
    lines.append("")
    lines.append("| what | ours | paper (sec. 6.2, Update Rate) |")
    lines.append("|---|---|---|")
    for o in d.get("owner", []):
        lines.append(f"| GPT owner, one core, batches of {o['batch']} (K updates/s; delta bytes per update {fmt(o['delta_bytes_per_update'], 1)}) | "
                     f"**{fmt(o['owner_kops_per_core'], 0)}** | 60 per core |")
    for c in d.get("cluster_runs", []):
        lines.append(f"| 4-node namespace cluster, {c['replicas']} replica(s) per range, {c['cluster_updates']} inserts "
                     f"(K updates/s; propagation p50 / p99 {fmt(c.get('propagation_p50_ms'), 1)} / "
                     f"{fmt(c.get('propagation_p99_ms'), 1)} ms) | **{fmt(c['cluster_kops'], 0)}** | 240 (one core on each of 4 nodes) |")
    lim = d.get("cluster_limit")
    p2 = os.path.join(raw, "t1-v2.json")
    if os.path.exists(p2):
        g = load(p2)
        s, e = row(g, "setsep-16+8"), row(g, "dpdk-efd")
        if s and s.get("update_kops"):
            lines.append(f"| SetSep value changes at {size(g['params']['keys'])} keys, 2-bit, `insert_batch` of 32 / one `insert` each (K/s; `bench gpt`) | "
                         f"**{fmt(s['update_kops'], 0)}** / {fmt(s.get('update_kops_single'), 0)} | - |")
        if e and e.get("update_kops"):
            lines.append(f"| DPDK EFD `rte_efd_update`, same keys and changes (K/s) | {fmt(e['update_kops'], 0)} | - |")
    if lim:
        lines.append("")
        lines.append(f"The cluster's limit as the harness measured it: {lim}.")
    lines.append("")
    lines.append("An update here is the owner's whole path (RIB change, group re-search, delta "
                 "emitted); the cluster figure includes the log (fsync, group commit), the FIB "
                 "install at the handling node and the delta broadcast to every node, all four "
                 "nodes and the clients sharing 2 CPUs.")


def fig11_section(raw, lines):
    f11, ours_bits = fig11(raw)
    lines.append("Total FIB entries (millions) the cluster holds with M = 16 MiB per server "
                 "(the paper's assumption); ScaleBricks holds F/n entries plus a GPT of F "
                 "entries on each server: F = M n / (entry bits + GPT bits/key x n).")
    lines.append("")
    head = "| servers n | value bits ceil(log2 n) | full dup. (64-bit) | hash part. (64-bit) | ScaleBricks, formula 0.5 + 1.5 log2 n | our GPT bits/key (measured) | ScaleBricks, measured GPT (64-bit) |"
    sep = "|---|---|---|---|---|---|---|"
    if ours_bits:
        head += f" full dup., our entry ({ours_bits:.0f} bits) | ScaleBricks, our entry + measured GPT |"
        sep += "---|---|"
    lines.append(head)
    lines.append(sep)
    m = 1e6
    for r in f11:
        s = (f"| {r['n']} | {r['v']} | {fmt(r['full_dup'] / m)} | {fmt(r['hash_part'] / m)} | "
             f"{fmt(r['formula'] / m)} | {fmt(r['gpt_bits'], 3)} | "
             f"{fmt(r['measured_gpt'] / m if r['measured_gpt'] else None)} |")
        if ours_bits:
            s += f" {fmt(r['ours_full_dup'] / m)} | {fmt(r['ours_sb'] / m if r.get('ours_sb') else None)} |"
        lines.append(s)
    last = f11[-1]
    lines.append("")
    lines.append(f"At 32 servers: the formula gives {last['formula'] / last['full_dup']:.2f}x full "
                 "duplication's entries"
                 + (f", our measured GPT {last['measured_gpt'] / last['full_dup']:.2f}x"
                    if last["measured_gpt"] else "")
                 + (f", and with our FIB's real entry size {last['ours_sb'] / last['ours_full_dup']:.2f}x"
                    if ours_bits and last.get("ours_sb") else "")
                 + ". **Paper (sec. 6.3):** \"a ScaleBricks cluster can scale up to handle 5.7 "
                 "times more FIB entries compared with a cluster using full FIB duplication\"; "
                 "its formula as printed, Mn/(64 + (0.5 + 1.5 log n) n), gives 6.4x at n = 32 "
                 "(its maximum), so the paper's 5.7 is not that formula's value; we print both. "
                 "As the paper says, larger FIB entries favour ScaleBricks: our entry (key, "
                 "value and the cuckoo table's slack) is far above 64 bits.")
    # The cluster's sizes as the node benchmark built them.
    p = os.path.join(raw, "node.json")
    if os.path.exists(p):
        lines.append("")
        lines.append("Measured in the 4-node tables `bench node` built (ScaleBricks, cuckoo FIB), "
                     "against the formula's 0.5 + 1.5 x 2 = 3.5 GPT bits per entry:")
        lines.append("")
        lines.append("| FIB entries (cluster) | FIB entries per node | FIB MB per node | GPT MB (every node) | GPT bits per entry | FIB + GPT MB per node / full dup.'s FIB MB |")
        lines.append("|---|---|---|---|---|---|")
        rs = rows(load(p))
        for r in rs:
            if r["arch"] != "scalebricks" or r["fib"] != "cuckoo":
                continue
            fd = next((x for x in rs if x["arch"] == "full-dup" and x["fib"] == "cuckoo"
                       and x["fib_entries"] == r["fib_entries"]), None)
            share = ((r["fib_bytes_per_node"] + r["gpt_bytes"]) / fd["fib_bytes_per_node"]
                     if fd else None)
            lines.append(f"| {size(r['fib_entries'])} | {r['fib_entries_per_node']:,} | "
                         f"{fmt(r['fib_bytes_per_node'] / 1e6, 1)} | {fmt(r['gpt_bytes'] / 1e6, 2)} | "
                         f"{fmt(r['gpt_bytes'] * 8 / r['fib_entries'], 2)} | {fmt(share)} |")
        lines.append("")
        lines.append("(The engine's GPT has as many value bits as the cluster needs: 2 for 4 nodes. "
                     "The paper: per-node hash table up to 75% smaller on 4 nodes, sec. 6.2.)")


def report(raw, out):
    env = os.environ
    model, cpus, mem, l3, virt, kernel = machine()
    h, dirty, dirty_crates = commit()
    mode = env.get("MODE", "?")
    elapsed = int(env.get("ELAPSED", "0"))
    steps = [s.split("=") for s in env.get("STEPS", "").split()]
    rel = os.path.basename(out)
    L = []
    L.append("# The ScaleBricks evaluation, reproduced")
    L.append("")
    L.append("<!-- written by scripts/reproduce.sh (scripts/reproduce_report.py); do not edit by hand -->")
    L.append("")
    L.append(f"- **Command**: `scripts/reproduce.sh --{mode}` (as {'root' if env.get('ROOT') == '1' else 'a user'}); "
             f"build features: `{env.get('FEATURES') or 'none'}`.")
    L.append(f"- **Commit**: `{h}`" + (f", **dirty**: {len(dirty)} tracked file(s) modified in the "
                                      f"working tree ({len(dirty_crates)} under crates/, built into "
                                      "the binaries: the tree is shared with other sessions)"
                                      if dirty else ", clean") + ".")
    L.append(f"- **Machine**: {model}, {cpus} CPUs, {mem} memory, L3 {l3 or '?'}"
             + (f", {virt} guest" if virt else "") + f", Linux {kernel}.")
    L.append(f"- **Load**: at the start `{env.get('UPTIME_START', '?').strip()}`; at the end "
             f"`{env.get('UPTIME_END', '?').strip()}` (other sessions compile on the same 2 cores: "
             "every rate below is a shared machine's).")
    build = sum(int(s) for n, s in steps if n in ("build", "apt"))
    L.append(f"- **Time**: {elapsed} s ({elapsed / 60:.1f} min) measured for this `--{mode}` run; "
             f"without the package check and the release build, {elapsed - build} s "
             f"({(elapsed - build) / 60:.1f} min). The build ({build} s here) depends on what "
             "`target/release` holds: nothing to do when it is up to date, 6-13 min on this "
             "machine after other sessions' builds (other features, other sources) replaced it. "
             "Steps (wall seconds): " + ", ".join(f"{n} {s}" for n, s in steps) + ".")
    L.append("- **The other mode**: " + (
        "`--full` was **not run** here; **estimate** (not measured): 1.5-2.5 hours on this "
        "machine: Table 1 at 16M keys (~16x the small run's keys, EFD's 16M inserts alone about "
        "a minute), Figure 7's 40 runs up to 64M keys (a 64M run builds 64M keys in ~15 s and "
        "times lookups in ~10 s), Figures 8/9 at 1-32M entries with 2 s per row (three layouts, "
        "two FIBs: the tunnels and tables of each size are built per row), Figure 10 with 1M "
        "tunnels (each `cluster up` builds the GPT and FIBs of 1M tunnels)."
        if mode == "small" else
        "`--small` takes under 10 minutes (see the committed small run in git history)."))
    L.append("")
    L.append("The paper is ScaleBricks (Zhou et al., SIGCOMM 2015); its numbers below are copied "
             "from its text, section by section. Its testbed: 4 dual-socket servers, 2x Xeon "
             "E5-2697 v2 (2.70 GHz, 30 MiB L3), 128 GiB DDR3, Intel 82599ES 10GbE NICs, DPDK, a "
             "Spirent SPT-N11U tester; one core per port. Ours: the machine above, packets through "
             "in-memory batches or veths. **Compare ratios, not absolute rates.**")
    L.append("")
    L.append("## Table 1: SetSep construction (sec. 6.1.1)")
    L.append("")
    table1(raw, L)
    L.append("")
    L.append("## Figure 7: GPT lookup rate by FIB size and batch size (sec. 6.1.2)")
    L.append("")
    L.append(f"![Figure 7]({rel}/fig7-gpt-lookup.png)")
    L.append("")
    fig7_section(raw, L)
    L.append("")
    L.append("## Figures 8 and 9: per-node throughput per architecture (sec. 6.2)")
    L.append("")
    L.append("`scalebricks-bench node --arch scalebricks,full-dup,hash-part --nodes 4 --policy none` "
             "(and `--layout per-port`, `--bubble`): **one node's engine on in-memory batches**, "
             "the external (`inet`) and internal (`fabric`) work of a 4-node cluster's node, per "
             "core. The tables and checks below are `scalebricks-bench plot`'s "
             f"([{rel}/cluster-tables.md]({rel}/cluster-tables.md)), inlined.")
    L.append("")
    for png, cap in (("fig8-node-throughput.png", "Figure 8, one core"),
                     ("fig8-node-throughput-per-port.png", "Figure 8, one core per port"),
                     ("fig9-node-throughput-bubble.png", "Figure 9, half the L3 taken")):
        if os.path.exists(os.path.join(out, png)):
            L.append(f"![{cap}]({rel}/{png})")
            L.append("")
    ct = os.path.join(out, "cluster-tables.md")
    if os.path.exists(ct):
        with open(ct) as f:
            for line in f.read().splitlines():
                if line.startswith("<!--"):
                    continue
                line = line.replace("the machine in `docs/bench/cluster.md`", "the machine above")
                L.append("#" + line if line.startswith("### ") else line)
    L.append("")
    L.append("### Through real ports")
    L.append("")
    L.append("**Figures 8 and 9 through real ports are not produced**, per architecture, because "
             "no harness here drives a multi-node cluster on real ports at a saturating rate: "
             "`bench io --engine` (below) is a one-node cluster (`nodes = 1`: nothing crosses a "
             "fabric, so the three architectures are the same engine), and the multi-node paths "
             "(`bench latency`, `scalebricks demo --netns`) send through `scalebricks gen` at a "
             "fixed low rate (1000 and 5000 packets/s), which measures latency and correctness, "
             "not throughput. On this 2-core VM four node processes plus a generator would share "
             "2 CPUs anyway, so a per-node rate through ports would measure the scheduler. What "
             "runs through real ports is the single node's rate, on AF_PACKET and on the XDP fast "
             "path:")
    L.append("")
    ports_section(raw, L)
    L.append("")
    L.append("## Figure 10: latency (sec. 6.2)")
    L.append("")
    if os.path.exists(os.path.join(out, "fig10-latency.png")):
        L.append(f"![Figure 10, AF_PACKET]({rel}/fig10-latency.png)")
        L.append("")
    latency_section(raw, L)
    L.append("")
    L.append("## Update rate (sec. 6.2)")
    L.append("")
    update_section(raw, L)
    L.append("")
    L.append("## Figure 11: scalability (sec. 6.3)")
    L.append("")
    L.append(f"![Figure 11]({rel}/fig11-scalability.png)")
    L.append("")
    fig11_section(raw, L)
    L.append("")
    L.append("## Raw data")
    L.append("")
    L.append(f"Every benchmark's JSON of this run is in [{rel}/raw/]({rel}/raw/): `t1-*.json` "
             "(`bench gpt`, Table 1 and Figure 11's bits/key), `f7-n<keys>-b<batch>.json` "
             "(`bench gpt`, Figure 7), `node*.json` (`bench node`), `latency-*.json`, "
             "`io-engine.json`, `update.json`.")
    print("\n".join(L))


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("specs", "report"):
        sys.exit("usage: reproduce_report.py specs|report RAW OUT")
    raw, out = sys.argv[2], sys.argv[3]
    if sys.argv[1] == "specs":
        specs(raw, out)
    else:
        report(raw, out)


if __name__ == "__main__":
    main()
