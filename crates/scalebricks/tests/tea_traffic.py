"""Traffic for a TEA cluster's switch (tea_e2e.rs), run in the switch namespace.

usage: tea_traffic.py nat|firewall|lb|vpn FLOWS_CSV COUNT UNKNOWN

Sends COUNT packets of entries spread over the flows file, and UNKNOWN packets of keys no
entry has, on `wan-x` (the peer of the switch's `wan`), capturing on `lan-x` (the peer of its
`lan`). Prints one JSON object: what was sent and captured, and every captured packet's
problems (wrong addresses or ports, a VPN's wrong VNI or changed inner frame, bad outer
IP/UDP/TCP checksums, a firewall's packet not
byte for byte the one sent, a packet that should have been dropped) as scapy sees them.
"""
import csv
import json
import sys
import time

from scapy.all import IP, TCP, UDP, VXLAN, AsyncSniffer, Ether, Raw, raw, sendp

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


VPN_EXTERNAL, VPN_INTERNAL = "198.51.100.20", "192.168.255.1"
mac = dict(src="02:00:00:00:aa:01", dst="02:00:00:00:aa:02")


def make(r, i, known):
    """The packet of row r (known) or of a key no row has, and what should come out."""
    src = r.get("remote", r.get("client")) if known else "203.0.113.%d" % (201 + i % 50)
    if nf == "vpn":
        vni = int(r["customer_vni"]) if known else 77
        pkt = IP(src="203.0.113.250", dst=VPN_EXTERNAL) / UDP(
            sport=40000 + i, dport=4789
        ) / VXLAN(vni=vni, flags=0x08) / Ether(src="02:00:00:00:bb:01", dst="02:00:00:00:bb:02") / IP(
            src="10.200.0.1", dst=r["vm"]
        ) / UDP(sport=1111, dport=2222)
        return pkt, dict(
            src=VPN_INTERNAL, sport=40000 + i, dst=r["server"], dport=4789,
            vni=int(r["internal_vni"]), drop=not known,
        )
    if nf == "nat":
        dst, dport = r["public"], int(r["public_port"])
        out = (r["private"], int(r["private_port"]))
    elif nf == "firewall":
        dst, dport = r["inside"], int(r["inside_port"])
        out = (dst, dport)
    elif nf == "lb":
        dst, dport = r["vip"], int(r["vip_port"])
        out = (r["backend"], int(r["backend_port"]))
    else:
        sys.exit("tea_traffic.py: nat, firewall, lb or vpn, not " + nf)
    if known:
        sport = int(r.get("remote_port", r.get("client_port")))
        pkt = IP(src=src, dst=dst) / l4(int(r["proto"]), sport, dport)
    else:
        sport = 1000 + i
        pkt = IP(src=src, dst=dst) / UDP(sport=sport, dport=dport)
    drop = not known or (nf == "firewall" and r["state"] != "open")
    return pkt, dict(src=src, sport=sport, dst=out[0], dport=out[1], drop=drop)


sent = {}
frames = []
for i, r in enumerate(chosen):
    pkt, want = make(r, i, True)
    frames.append((pkt, want, "tea-%d" % i))
for i in range(unknown):
    pkt, want = make(rows[i], i, False)
    frames.append((pkt, want, "unknown-%d" % i))
out = []
for pkt, want, tag in frames:
    pkt = Ether(**mac) / pkt / Raw(tag.encode())
    want["frame"] = raw(pkt)
    sent[tag] = want
    out.append(pkt)
frames = out

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
    if nf == "vpn":
        have["vni"] = p[VXLAN].vni if VXLAN in p else None
        inner = bytes(p[VXLAN].payload) if VXLAN in p else b""
        if inner != bytes(Ether(w["frame"])[VXLAN].payload):
            problems.append("%s: the inner frame changed" % tag)
    for k in ("src", "sport", "dst", "dport", "vni"):
        if k not in w:
            continue
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
