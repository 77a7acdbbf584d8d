# Test traffic for engine_e2e, built with scapy (run with /usr/bin/python3: Debian's scapy).
#
#   traffic.py down FLOWS_CSV CLUSTER_JSON OUTDIR SEED KNOWN UNKNOWN
#       writes OUTDIR/in{i}.pcap (the frames for node i's inet port) and OUTDIR/manifest.json
#       ([{"id", "ingress", "kind", "ue"}]: kind "known", "unknown" or "malformed:<reason>").
#   traffic.py up FLOWS_CSV CLUSTER_JSON OUTDIR NODE SEED KNOWN
#       run inside PREFIX-ran{NODE}: sends G-PDUs of KNOWN of the node's tunnels, G-PDUs that
#       must be dropped and one Echo Request out of eth0, and writes them to OUTDIR/up.pcap and
#       OUTDIR/up.json.
# Every IP packet of a known flow carries "SBE2E" and its id (8 digits) at the start of its
# payload, so a capture can be matched to what was sent.
import json
import random
import socket
import sys

from scapy.all import IP, TCP, UDP, Ether, Raw, sendp, wrpcap
from scapy.contrib.gtp import GTP_U_Header, GTPEchoRequest, GTPHeader

MARK = b"SBE2E"


def load(flows_csv, cluster_json):
    flows = []
    for line in open(flows_csv).read().splitlines()[1:]:
        if line:
            ue, teid, enb, node = line.split(",")[:4]
            flows.append((ue, int(teid), enb, int(node)))
    return flows, json.load(open(cluster_json))


def payload(pid, n):
    head = MARK + b"%08d" % pid
    return head + bytes((pid + i) % 251 for i in range(max(0, n - len(head))))


def inner(rng, pid, src, dst, ip_len, tcp, ttl):
    if tcp:
        l4 = TCP(sport=rng.randint(1024, 65535), dport=rng.choice([40001, 40002]),
                 seq=rng.randint(0, 2**32 - 1), flags="PA")
        hdr = 40
    else:
        l4 = UDP(sport=rng.randint(1024, 65535), dport=rng.choice([5000, 40003]))
        hdr = 28
    return IP(src=src, dst=dst, ttl=ttl, id=pid & 0xFFFF) / l4 / Raw(payload(pid, ip_len - hdr))


def down(flows_csv, cluster_json, outdir, seed, known, unknown):
    rng = random.Random(seed)
    flows, d = load(flows_csv, cluster_json)
    nodes = d["nodes"]
    n = len(nodes)
    ues = {f[0] for f in flows}
    frames = [[] for _ in range(n)]
    manifest = []

    def eth(i):
        return Ether(dst=nodes[i]["inet"]["local"]["mac"], src=nodes[i]["inet"]["peer"]["mac"],
                     type=0x0800)

    def internet():
        return "198.51.100.%d" % rng.randint(1, 254)

    pid = 0
    for k in range(known):
        ue = rng.choice(flows)[0]
        ingress = rng.randrange(n)
        ip_len = rng.randint(60, 1399)
        p = eth(ingress) / inner(rng, pid, internet(), ue, ip_len, k % 3 == 0, rng.randint(2, 64))
        frames[ingress].append(p)
        manifest.append({"id": pid, "ingress": ingress, "kind": "known", "ue": ue})
        pid += 1
    for k in range(unknown):
        while True:
            ue = "100.%d.%d.%d" % (rng.randint(64, 127), rng.randint(0, 255), rng.randint(1, 254))
            if ue not in ues:
                break
        ingress = k % n
        p = eth(ingress) / inner(rng, pid, internet(), ue, 200, False, 64)
        frames[ingress].append(p)
        manifest.append({"id": pid, "ingress": ingress, "kind": "unknown", "ue": ue})
        pid += 1
    # Malformed frames to known UEs: one of each kind into every node.
    for i in range(n):
        ue = rng.choice(flows)[0]
        bad = eth(i) / inner(rng, pid, internet(), ue, 300, False, 64)
        bad[IP].chksum = 0x1234 if IP(bytes(bad[IP])).chksum != 0x1234 else 0x4321
        bad = Ether(bytes(bad))
        truncated = eth(i) / Raw(b"\x45\x00\x00\x28\x00\x00")
        long = eth(i) / IP(src=internet(), dst=ue, len=400) / UDP(sport=1, dport=2) / Raw(b"x" * 20)
        for kind, f in [("ipv4_bad_checksum", bad), ("ipv4_truncated", truncated),
                        ("ipv4_bad_total_len", long)]:
            frames[i].append(f)
            manifest.append({"id": pid, "ingress": i, "kind": "malformed:" + kind, "ue": ue})
            pid += 1
    for i in range(n):
        rng.shuffle(frames[i])
        for k, f in enumerate(frames[i]):
            f.time = 1_700_000_000 + k / 2000
        wrpcap("%s/in%d.pcap" % (outdir, i), frames[i])
    json.dump(manifest, open(outdir + "/manifest.json", "w"))


def up(flows_csv, cluster_json, outdir, node, seed, known):
    rng = random.Random(seed)
    flows, d = load(flows_csv, cluster_json)
    me = d["nodes"][node]
    mine = [f for f in flows if f[3] == node]
    others = [f for f in flows if f[3] != node]
    teids = {f[1] for f in flows}
    ran = me["ran"]["local"]["addr"].split("/")[0]
    l2 = Ether(dst=me["ran"]["local"]["mac"], src=me["ran"]["peer"]["mac"])
    frames, sent = [], []

    def gpdu(enb, teid, ip):
        return l2 / IP(src=enb, dst=ran) / UDP(sport=2152, dport=2152) / \
            GTP_U_Header(teid=teid, gtp_type=255) / ip

    pid = 1_000_000
    for k, (ue, teid, enb, _) in enumerate(rng.sample(mine, known)):
        ip = inner(rng, pid, ue, "8.8.%d.%d" % (k, k + 1), rng.randint(60, 1400), k % 2 == 1, 64)
        frames.append(gpdu(enb, teid, ip))
        sent.append({"id": pid, "kind": "known", "ue": ue, "teid": teid})
        pid += 1
    # TEIDs no tunnel has, and tunnels of other nodes: unknown_teid.
    unknown = [t for t in (rng.randint(1, 2**32 - 1) for _ in range(10)) if t not in teids][:2]
    unknown += [f[1] for f in rng.sample(others, 1)]
    for teid in unknown:
        ip = inner(rng, pid, "100.64.0.1", "8.8.8.8", 100, False, 64)
        frames.append(gpdu("192.0.2.1", teid, ip))
        sent.append({"id": pid, "kind": "unknown_teid", "teid": teid})
        pid += 1
    # A known TEID with the wrong inner source (uplink_mismatch), and from another N3 address
    # than the tunnel's eNodeB (forwarded: the outer source is not checked).
    ue, teid, enb, _ = mine[0]
    other_n3 = "192.0.2.254" if enb != "192.0.2.254" else "192.0.2.253"
    for src, e, kind in [("100.64.0.99" if ue != "100.64.0.99" else "100.64.0.98", enb, "uplink_mismatch"),
                         (ue, other_n3, "other_n3")]:
        frames.append(gpdu(e, teid, inner(rng, pid, src, "8.8.8.8", 100, False, 64)))
        sent.append({"id": pid, "kind": kind, "teid": teid})
        pid += 1
    # An Echo Request from an odd source port: the response goes back to it.
    frames.append(l2 / IP(src=me["ran"]["peer"]["addr"].split("/")[0], dst=ran) /
                  UDP(sport=40000, dport=2152) / GTPHeader(seq=77, S=1, gtp_type=1) /
                  GTPEchoRequest())
    sent.append({"id": None, "kind": "echo_request"})
    wrpcap(outdir + "/up.pcap", frames)
    # Listen where the Echo Response goes (no ICMP port unreachable back into the node).
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 40000))
    sock.settimeout(5)
    sendp(frames, iface="eth0", inter=0.002, verbose=False)
    reply, addr = sock.recvfrom(2048)
    json.dump(sent, open(outdir + "/up.json", "w"))
    print(json.dumps({"echo_response": reply.hex(), "from": addr}))


if __name__ == "__main__":
    a = sys.argv
    if a[1] == "down":
        down(a[2], a[3], a[4], int(a[5]), int(a[6]), int(a[7]))
    elif a[1] == "up":
        up(a[2], a[3], a[4], int(a[5]), int(a[6]), int(a[7]))
    else:
        sys.exit("usage: traffic.py down|up ...")
