#!/usr/bin/env python3
"""Writes a set of varied frames built with scapy, each with the field values scapy itself
decodes from it, as one JSON document on stdout. crates/wire/tests/scapy.rs runs this and checks
that sb-wire's parse_frame agrees field by field.

Every expected value here comes from scapy's own dissection of the bytes (layer fields, and offsets
computed as len(frame) - len(bytes(layer))), not from sb-wire's logic.
"""
import json
import sys

from scapy.all import (
    AH, ARP, Dot1Q, Ether, ICMP, ICMPv6EchoReply, ICMPv6EchoRequest, ICMPv6ND_NS, IP, IPOption_NOP,
    IPOption_RR, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting,
    Padding, Raw, TCP, UDP, fragment, fragment6, conf,
)
from scapy.contrib.gtp import (
    GTP_PDCP_PDU_ExtensionHeader, GTP_U_Header, GTP_UDPPort_ExtensionHeader, GTPEchoRequest,
    GTPEchoResponse, GTPPDUSessionContainer,
)

conf.verb = 0

SRC_MAC = "02:00:00:00:00:aa"
DST_MAC = "02:00:00:00:00:bb"
EXT6 = (IPv6ExtHdrHopByHop, IPv6ExtHdrRouting, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, AH)
GTP_EXT = (GTPPDUSessionContainer, GTP_PDCP_PDU_ExtensionHeader, GTP_UDPPort_ExtensionHeader)


def ext_len(x):
    return x.ExtHdrLen if isinstance(x, GTPPDUSessionContainer) else x.length


def ext_next(x):
    return x.NextExtHdr if isinstance(x, GTPPDUSessionContainer) else x.next_ex


def off(raw, layer):
    return len(raw) - len(bytes(layer))


def l4_expect(layer):
    if isinstance(layer, UDP):
        return {"udp": [layer.sport, layer.dport, layer.len]}
    if isinstance(layer, TCP):
        return {"tcp": [layer.sport, layer.dport, int(layer.flags)]}
    if isinstance(layer, ICMP):
        echo = layer.type in (0, 8) and layer.code == 0
        return {"icmp": [layer.type, layer.code, layer.id if echo else None, layer.seq if echo else None]}
    if layer.__class__.__name__.startswith("ICMPv6"):
        t = layer.type
        echo = t in (128, 129) and layer.code == 0
        return {"icmp": [t, layer.code, layer.id if echo else None, layer.seq if echo else None]}
    return None


def ip_expect(raw, ip, base=0):
    """Expected fields of an IP layer (scapy dissection) inside bytes `raw`, which start at
    offset `base` of the frame."""
    e = {"offset": base + off(raw, ip)}
    if isinstance(ip, IP):
        e.update(version=4, src=ip.src, dst=ip.dst, proto=ip.proto, ttl=ip.ttl, len=ip.len)
        frag = None
        if ip.flags.MF or ip.frag:
            frag = {"offset": ip.frag * 8, "more": bool(ip.flags.MF), "ident": ip.id}
        e["frag"] = frag
        e["l4_offset"] = e["offset"] + ip.ihl * 4
        upper = ip.payload
    else:
        e.update(version=6, src=ip.src, dst=ip.dst, ttl=ip.hlim, len=40 + ip.plen)
        nh = ip.nh
        layer = ip.payload
        frag = None
        while isinstance(layer, EXT6):
            nh = layer.nh
            if isinstance(layer, IPv6ExtHdrFragment):
                frag = {"offset": layer.offset * 8, "more": bool(layer.m), "ident": layer.id}
                if layer.offset:
                    layer = layer.payload
                    break
            layer = layer.payload
        e["proto"] = nh
        e["frag"] = frag
        e["l4_offset"] = base + off(raw, layer)
        upper = layer
    if not e["frag"] and isinstance(upper, Raw) and e["proto"] in (6, 17):
        # scapy does not bind every extension header (AH) to its next header: dissect the
        # upper-layer bytes on their own.
        upper = {6: TCP, 17: UDP}[e["proto"]](bytes(upper))
    e["l4"] = None if e["frag"] else l4_expect(upper)
    return e


def expect(frame):
    raw = bytes(frame)
    p = Ether(raw)
    e = {"eth": {"src": p.src, "dst": p.dst, "vlan": None}}
    layer = p.payload
    ethertype = p.type
    if isinstance(layer, Dot1Q):
        e["eth"]["vlan"] = {"vid": layer.vlan, "pcp": layer.prio, "dei": layer.id}
        ethertype = layer.type
        layer = layer.payload
    e["eth"]["ethertype"] = ethertype
    e["l3_offset"] = off(raw, layer)
    if isinstance(layer, ARP):
        e["kind"] = "arp"
        e["arp"] = {"op": layer.op, "sender_hw": layer.hwsrc, "sender_ip": layer.psrc,
                    "target_hw": layer.hwdst, "target_ip": layer.pdst}
    elif isinstance(layer, (IP, IPv6)):
        ip = ip_expect(raw, layer)
        g = p.getlayer(GTP_U_Header)
        if g is not None and ip["l4"] and "udp" in ip["l4"] and ip["l4"]["udp"][1] == 2152:
            e["kind"] = "gtpu"
            # scapy 2.5 builds extension chains but dissects only their first header, so the
            # extensions and the inner packet are read from the layers the frame was built from
            # (each layer's bytes() is its part of the same built frame).
            built = frame.getlayer(GTP_U_Header)
            exts = []
            next_type = built.next_ex if built.E else 0
            x = built.payload
            while isinstance(x, GTP_EXT):
                exts.append([next_type, len(bytes(x)) - len(bytes(x.payload)) - 2])
                next_type = ext_next(x)
                x = x.payload
            inner = None
            if g.gtp_type == 255 and isinstance(x, (IP, IPv6)):
                xb = bytes(x)
                inner = ip_expect(xb, x.__class__(xb), base=len(raw) - len(xb))
            e["gtpu"] = {
                "offset": off(raw, g), "msg_type": g.gtp_type, "teid": g.teid,
                "seq": g.seq if g.S else None, "npdu": g.npdu if g.PN else None,
                "next_ext": (g.next_ex or None) if g.E else None, "exts": exts,
                "outer": ip, "inner": inner,
            }
        else:
            e["kind"] = "ip"
            e["ip"] = ip
    else:
        e["kind"] = "other"
    return raw, e


def eth(*vlan):
    base = Ether(src=SRC_MAC, dst=DST_MAC)
    return base / Dot1Q(vlan=vlan[0], prio=vlan[1], id=vlan[2]) if vlan else base


A4, B4, UE4, SRV4 = "198.51.100.7", "10.1.2.3", "10.45.0.9", "8.8.8.8"
A6, B6, UE6, SRV6 = "2001:db8:1::a", "2001:db8:2::b", "2001:db8:45::9", "2001:4860::8888"
frames = []


def add(name, frame):
    raw, e = expect(frame)
    frames.append({"name": name, "hex": raw.hex(), "error": None, "expect": e})


def bad(name, raw, label):
    frames.append({"name": name, "hex": bytes(raw).hex(), "error": label, "expect": None})


# Plain IPv4 / IPv6 with every L4.
add("ipv4_udp", eth() / IP(src=A4, dst=B4) / UDP(sport=1234, dport=80) / b"hello")
add("ipv4_udp_padded", eth() / IP(src=A4, dst=B4) / UDP(sport=1, dport=2) / Padding(b"\0" * 18))
add("vlan_ipv4_tcp_syn_ack", eth(100, 5, 1) / IP(src=A4, dst=B4, ttl=17) / TCP(sport=5555, dport=22, flags="SA"))
add("vlan0_ipv4_tcp_fpu", eth(0, 0, 0) / IP(src=A4, dst=B4) / TCP(sport=1, dport=2, flags="FPU") / (b"x" * 10))
add("ipv4_tcp_rst_ece_cwr", eth() / IP(src=A4, dst=B4) / TCP(sport=3, dport=4, flags="RCE"))
add("ipv4_tcp_options", eth() / IP(src=A4, dst=B4) / TCP(sport=40000, dport=443, flags="S",
    options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 0)), ("NOP", None), ("WScale", 7)]))
add("ipv4_options_nop_rr", eth() / IP(src=A4, dst=B4, options=[IPOption_NOP(), IPOption_RR(routers=["1.1.1.1", "2.2.2.2"])])
    / UDP(sport=7, dport=9) / b"opts")
add("ipv4_tos_df", eth() / IP(src=A4, dst=B4, tos=0xb8, flags="DF", id=4321) / UDP(sport=10, dport=11) / b"z")
add("ipv4_icmp_echo_request", eth() / IP(src=A4, dst=B4) / ICMP(type=8, id=0x4242, seq=7) / b"ping")
add("ipv4_icmp_echo_reply", eth() / IP(src=B4, dst=A4) / ICMP(type=0, id=0x4242, seq=7) / b"pong")
add("ipv4_icmp_unreachable", eth() / IP(src=A4, dst=B4) / ICMP(type=3, code=1) / IP(src=B4, dst=A4) / UDP())
add("ipv4_gre_unparsed", eth() / IP(src=A4, dst=B4, proto=47) / Raw(b"\0\0\x08\0" + b"x" * 8))
for i, f in enumerate(fragment(eth() / IP(src=A4, dst=B4, id=777) / UDP(sport=5, dport=6) / (b"f" * 100), fragsize=40)):
    add(f"ipv4_fragment_{i}", f)
add("ipv6_udp", eth() / IPv6(src=A6, dst=B6, hlim=9, tc=0x20, fl=0x12345) / UDP(sport=53, dport=5353) / b"q")
add("ipv6_tcp", eth() / IPv6(src=A6, dst=B6) / TCP(sport=40000, dport=443, flags="PA") / b"data")
add("ipv6_ext_chain_tcp", eth() / IPv6(src=A6, dst=B6) / IPv6ExtHdrHopByHop() /
    IPv6ExtHdrRouting(addresses=["2001:db8::1", "2001:db8::2"]) / IPv6ExtHdrDestOpt() / TCP(sport=1, dport=2, flags="S"))
# scapy leaves the UDP checksum under AH at 0 (invalid over IPv6): take it from the same
# datagram built directly on IPv6 (AH is not part of the pseudo-header).
ah_csum = IPv6(bytes(IPv6(src=A6, dst=B6) / UDP(sport=500, dport=4500) / b"ike"))[UDP].chksum
add("ipv6_ah_udp", eth() / IPv6(src=A6, dst=B6) / AH(nh=17, payloadlen=4, spi=0x1234, seq=1, icv=b"\0" * 12)
    / UDP(sport=500, dport=4500, chksum=ah_csum) / b"ike")
add("ipv6_destopt_icmpv6_echo", eth() / IPv6(src=A6, dst=B6) / IPv6ExtHdrDestOpt() / ICMPv6EchoRequest(id=9, seq=10, data=b"hi"))
add("ipv6_icmpv6_echo_reply", eth() / IPv6(src=B6, dst=A6) / ICMPv6EchoReply(id=9, seq=10))
add("ipv6_icmpv6_ns", eth() / IPv6(src=A6, dst="ff02::1:ff00:b") / ICMPv6ND_NS(tgt=B6))
for i, f in enumerate(fragment6(IPv6(src=A6, dst=B6) / IPv6ExtHdrFragment(id=0xabcdef) / UDP(sport=7, dport=8) / (b"F" * 300), 200)):
    add(f"ipv6_fragment_{i}", eth() / f)
add("arp_request", eth() / ARP(op=1, hwsrc=SRC_MAC, psrc="10.0.0.2", pdst="10.0.0.1"))
add("vlan_arp_reply", eth(7, 0, 0) / ARP(op=2, hwsrc=SRC_MAC, psrc="10.0.0.1", hwdst=DST_MAC, pdst="10.0.0.2"))
add("other_ethertype_lldp", Ether(src=SRC_MAC, dst="01:80:c2:00:00:0e", type=0x88cc) / Raw(b"\x02\x07" + b"\0" * 20))

# GTP-U.
inner4 = IP(src=UE4, dst=SRV4) / UDP(sport=33333, dport=53) / b"dns?"
inner4_tcp = IP(src=UE4, dst=SRV4) / TCP(sport=44444, dport=80, flags="S")
inner6 = IPv6(src=UE6, dst=SRV6) / UDP(sport=1111, dport=2222) / b"six"
outer4 = IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=2152, dport=2152)
outer6 = IPv6(src="2001:db8:ff::1", dst="2001:db8:ff::2") / UDP(sport=40000, dport=2152)
add("gtpu_gpdu_plain", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=0x01020304) / inner4)
add("gtpu_gpdu_seq", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=0xffffffff, S=1, seq=0xbeef) / inner4_tcp)
add("gtpu_gpdu_npdu", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=5, PN=1, npdu=0x42) / inner4)
add("gtpu_gpdu_seq_npdu", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=6, S=1, seq=1, PN=1, npdu=2) / inner6)
add("gtpu_gpdu_pdu_session", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=7, E=1, next_ex=0x85) / GTPPDUSessionContainer(type=0, QFI=9) / inner4)
add("gtpu_gpdu_ext_chain", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=8, E=1, S=1, seq=77, next_ex=0xc0)
    / GTP_PDCP_PDU_ExtensionHeader(pdcp_pdu=1234, next_ex=0x85) / GTPPDUSessionContainer(type=1, QFI=5) / inner4)
add("gtpu_gpdu_udp_port_ext", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=9, E=1, next_ex=0x40)
    / GTP_UDPPort_ExtensionHeader(udp_port=2152) / inner6)
add("gtpu_outer_v6_inner_v4", eth() / outer6 / GTP_U_Header(gtp_type=255, teid=10) / inner4)
add("gtpu_outer_v6_inner_v6_seq", eth(33, 3, 0) / outer6 / GTP_U_Header(gtp_type=255, teid=11, S=1, seq=3) / inner6)
add("gtpu_echo_request", eth() / outer4 / GTP_U_Header(gtp_type=1, teid=0, S=1, seq=99) / GTPEchoRequest())
add("gtpu_echo_response", eth() / outer4 / GTP_U_Header(gtp_type=2, teid=0, S=1, seq=99) / GTPEchoResponse())
add("gtpu_gpdu_inner_icmp", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=12) / IP(src=UE4, dst=SRV4) / ICMP(type=8, id=1, seq=2))

# Malformed frames (expected: sb-wire's drop label for the reason scapy built in).
good = bytes(eth() / IP(src=A4, dst=B4) / UDP(sport=1, dport=2) / b"abcd")
bad("truncated_ethernet", good[:13], "eth_truncated")
bad("truncated_vlan", bytes(eth(5, 0, 0) / IP(src=A4, dst=B4))[:16], "eth_vlan_truncated")
bad("ipv4_bad_checksum", eth() / IP(src=A4, dst=B4, chksum=0x1234) / UDP(sport=1, dport=2), "ipv4_bad_checksum")
bad("ipv4_total_len_past_buffer", eth() / IP(src=A4, dst=B4, len=200) / UDP(sport=1, dport=2), "ipv4_bad_total_len")
bad("ipv4_ihl_4", eth() / IP(src=A4, dst=B4, ihl=4) / UDP(sport=1, dport=2), "ipv4_bad_header_len")
bad("ipv4_version_5", eth() / IP(src=A4, dst=B4, version=5) / UDP(sport=1, dport=2), "ipv4_bad_version")
bad("udp_len_past_ip", eth() / IP(src=A4, dst=B4) / UDP(sport=1, dport=2, len=100) / b"x", "udp_bad_length")
bad("tcp_dataofs_3", eth() / IP(src=A4, dst=B4) / TCP(sport=1, dport=2, dataofs=3), "tcp_bad_data_offset")
bad("ipv6_plen_past_buffer", eth() / IPv6(src=A6, dst=B6, plen=500) / UDP(sport=1, dport=2), "ipv6_bad_payload_len")
bad("gtpu_version_2", eth() / outer4 / GTP_U_Header(version=2, teid=1) / inner4, "gtpu_bad_version")
bad("gtpu_pt_0", eth() / outer4 / GTP_U_Header(PT=0, teid=1) / inner4, "gtpu_bad_protocol_type")
bad("gtpu_length_past_udp", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=1, length=500) / inner4, "gtpu_bad_length")
bad("gtpu_ext_len_0", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=1, E=1, next_ex=0x85) / GTPPDUSessionContainer(ExtHdrLen=0) / inner4,
    "gtpu_bad_extension")
bad("gtpu_gpdu_not_ip", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=1) / Raw(b"\x00" * 20), "gtpu_inner_not_ip")
bad("gtpu_inner_bad_checksum", eth() / outer4 / GTP_U_Header(gtp_type=255, teid=1) / IP(src=UE4, dst=SRV4, chksum=1) / UDP(), "ipv4_bad_checksum")

json.dump({"scapy_version": __import__("scapy").VERSION, "frames": frames}, sys.stdout, indent=1)
