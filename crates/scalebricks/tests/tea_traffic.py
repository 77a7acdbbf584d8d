"""Traffic for a TEA cluster's switch (tea_e2e.rs), run in the switch namespace.

usage: tea_traffic.py NF FLOWS_CSV COUNT UNKNOWN

Sends COUNT packets of entries spread over the flows file, and UNKNOWN packets of keys no
entry has, on `wan-x` (the peer of the switch's `wan`), capturing on `lan-x` (the peer of its
`lan`). Prints one JSON object: what was sent and captured, and every captured packet's
problems (wrong addresses or ports, bad IP/UDP/TCP checksums, a firewall's packet not
byte for byte the one sent, a packet that should have been dropped) as scapy sees them.
"""
import csv
import json
import sys
import time

from scapy.all import IP, TCP, UDP, AsyncSniffer, Ether, Raw, raw, sendp

nf, path, count, unknown = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = list(csv.DictReader(open(path)))
# Rows i * (step + 1) (mod the count): spread over the file, both protocols, and rows
# i % 10 == 9 among them (the firewall's closed connections).
step = max(1, len(rows) // count)
chosen = [rows[(i * (step + 1)) % len(rows)] for i in range(count)]


def l4(proto, sport, dport):
    if proto == 17:
        return UDP(sport=sport, dport=dport)
    return TCP(sport=sport, dport=dport, flags="A", seq=1000, ack=2000)


def checksums_ok(p):
    """IP and L4 checksums as captured equal scapy's recomputation."""
    ip = p[IP].copy()
    want = ip.chksum
    del ip.chksum
    if IP(raw(ip)).chksum != want:
        return "ip checksum"
    t = p[IP].copy()
    layer = UDP if UDP in t else TCP
    want = t[layer].chksum
    del t[layer].chksum
    if IP(raw(t))[layer].chksum != want:
        return layer.__name__ + " checksum"
    return None


sent = {}
frames = []
mac = dict(src="02:00:00:00:aa:01", dst="02:00:00:00:aa:02")
for i, r in enumerate(chosen):
    tag = "tea-%d" % i
    if nf == "nat":
        proto = int(r["proto"])
        pkt = IP(src=r["remote"], dst=r["public"]) / l4(
            proto, int(r["remote_port"]), int(r["public_port"])
        )
        want = dict(
            src=r["remote"], sport=int(r["remote_port"]),
            dst=r["private"], dport=int(r["private_port"]), drop=False,
        )
    elif nf == "firewall":
        proto = int(r["proto"])
        pkt = IP(src=r["remote"], dst=r["inside"]) / l4(
            proto, int(r["remote_port"]), int(r["inside_port"])
        )
        want = dict(
            src=r["remote"], sport=int(r["remote_port"]),
            dst=r["inside"], dport=int(r["inside_port"]), drop=r["state"] != "open",
        )
    else:
        sys.exit("tea_traffic.py: nat or firewall, not " + nf)
    pkt = Ether(**mac) / pkt / Raw(tag.encode())
    want["frame"] = raw(pkt)
    sent[tag] = want
    frames.append(pkt)
for i in range(unknown):
    tag = "unknown-%d" % i
    # A source no generated entry has (203.0.113.201+), to the first entry's destination.
    r = rows[0]
    dst = r["public"] if nf == "nat" else r["inside"]
    dport = int(r["public_port"] if nf == "nat" else r["inside_port"])
    pkt = Ether(**mac) / IP(src="203.0.113.%d" % (201 + i % 50), dst=dst) / UDP(
        sport=1000 + i, dport=dport
    ) / Raw(tag.encode())
    sent[tag] = dict(drop=True)
    frames.append(pkt)

expect = sum(1 for w in sent.values() if not w["drop"])
caught = []
sniffer = AsyncSniffer(iface="lan-x", store=False, prn=caught.append)
sniffer.start()
time.sleep(1.0)
t0 = time.time()
sendp(frames, iface="wan-x", inter=0.002, verbose=False)
got = {}
problems = []
deadline = time.time() + 10
while time.time() < deadline:
    time.sleep(0.2)
    n = sum(1 for p in list(caught) if Raw in p)
    if n >= expect:
        time.sleep(0.5)  # packets that should not come get the time to
        break
sniffer.stop()
for p in caught:
    if IP not in p or Raw not in p:
        continue
    tag = p[Raw].load.decode(errors="replace")
    w = sent.get(tag)
    if w is None:
        problems.append("%s: not sent" % tag)
        continue
    if tag in got:
        problems.append("%s: twice" % tag)
    got[tag] = True
    if w["drop"]:
        problems.append("%s: should have been dropped" % tag)
        continue
    layer = UDP if UDP in p else TCP
    have = dict(src=p[IP].src, sport=p[layer].sport, dst=p[IP].dst, dport=p[layer].dport)
    for k in ("src", "sport", "dst", "dport"):
        if have[k] != w[k]:
            problems.append("%s: %s %s, want %s" % (tag, k, have[k], w[k]))
    if nf == "firewall" and raw(p) != w["frame"]:
        problems.append("%s: the firewall changed the packet" % tag)
    bad = checksums_ok(p)
    if bad:
        problems.append("%s: %s" % (tag, bad))
missing = [t for t, w in sent.items() if not w["drop"] and t not in got]
print(json.dumps(dict(
    sent=len(frames), expect=expect, got=len(got), missing=missing[:20],
    n_missing=len(missing), problems=problems[:50], n_problems=len(problems),
    seconds=round(time.time() - t0, 2),
)))
