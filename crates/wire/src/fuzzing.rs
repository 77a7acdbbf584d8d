//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the random-bytes
//! property tests: each takes arbitrary bytes, runs one parser, touches every accessor, and
//! asserts the invariants that must hold for whatever it accepted (re-emitting a parsed header
//! and parsing it again gives the same fields; offsets stay inside the frame). A panic in any of
//! them is a bug.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::arp::{answer_request, ArpPacket, ArpRepr};
use crate::encap::{decapsulate, GtpuTunnel, OuterIp};
use crate::ethernet::{EthernetAddress, EthernetFrame, EthernetRepr};
use crate::frame::{parse_frame_with, FrameKind, IpInfo, ParseOptions, WireError, L4};
use crate::gtpu::{GtpuPacket, GtpuRepr};
use crate::icmp::{IcmpPacket, IcmpRepr, IcmpVersion};
use crate::ipv4::{Ipv4Packet, Ipv4Repr};
use crate::ipv6::{Ipv6Packet, Ipv6Repr};
use crate::tcp::{TcpPacket, TcpRepr};
use crate::udp::{UdpChecksum, UdpPacket, UdpRepr};

const V4A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const V4B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const V6A: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
const V6B: IpAddr = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));

/// Ethernet view and repr.
pub fn ethernet(data: &[u8]) {
    let Ok(f) = EthernetFrame::new_checked(data) else {
        return;
    };
    let r = EthernetRepr::parse(&f);
    assert_eq!(f.header_len() + f.payload().len(), data.len());
    let mut out = [0u8; 18];
    r.emit(&mut out).expect("18 bytes fit any Ethernet header");
    let h = r.header_len();
    assert_eq!(h, f.header_len());
    assert_eq!(&out[..h], &data[..h]);
}

/// ARP view, repr and the request answerer.
pub fn arp(data: &[u8]) {
    if let Ok(p) = ArpPacket::new_checked(data) {
        let r = ArpRepr::parse(&p);
        let mut out = [0u8; 28];
        r.emit(&mut out).expect("28 bytes fit");
        assert_eq!(&out[..], &data[..28]);
    }
    let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
    let mut out = [0u8; 64];
    if let Ok(Some(n)) = answer_request(data, mac, &[Ipv4Addr::new(10, 0, 0, 1)], &mut out) {
        let f = EthernetFrame::new_checked(&out[..n]).expect("we wrote a valid frame");
        let reply =
            ArpRepr::parse(&ArpPacket::new_checked(f.payload()).expect("we wrote valid ARP"));
        assert_eq!(reply.sender_hw, mac);
        assert_eq!(reply.sender_ip, Ipv4Addr::new(10, 0, 0, 1));
    }
}

/// IPv4 view and repr.
pub fn ipv4(data: &[u8]) {
    let Ok(p) = Ipv4Packet::new_checked(data) else {
        return;
    };
    let _ = (
        p.version(),
        p.dscp(),
        p.ecn(),
        p.checksum(),
        p.options(),
        p.fragment(),
        p.packet(),
    );
    assert!(p.header_len() + p.payload().len() <= data.len());
    let ok = p.verify_checksum();
    let r = Ipv4Repr::parse(&p, true);
    assert_eq!(r.is_ok(), ok);
    let r = Ipv4Repr::parse(&p, false).expect("no checksum check");
    let mut out = [0u8; 20];
    r.emit(&mut out).expect("20 bytes fit");
    let back = Ipv4Packet::new_unchecked(&out[..]);
    assert!(back.verify_checksum());
    assert_eq!(back.total_len(), 20 + p.payload().len() as u16);
    let mut copy = [0u8; 20];
    copy.copy_from_slice(&out);
    let mut full = [0u8; 20];
    full.copy_from_slice(&data[..20]);
    if p.header_len() == 20 && data[6] & 0x80 == 0 && ok {
        // Canonical header: re-emitting gives the same bytes, except that a checksum of 0xffff
        // (negative zero, which verifies) is emitted as 0x0000.
        if full[10..12] == [0xff, 0xff] && out[10..12] == [0, 0] {
            full[10..12].copy_from_slice(&[0, 0]);
        }
        assert_eq!(out, full);
    }
    // TTL decrement keeps the checksum valid.
    let mut m = Ipv4Packet::new_unchecked(&mut copy[..]);
    if m.decrement_ttl().is_some() {
        assert!(m.verify_checksum());
    }
}

/// IPv6 view, repr and extension-header walk.
pub fn ipv6(data: &[u8]) {
    let Ok(p) = Ipv6Packet::new_checked(data) else {
        return;
    };
    let _ = (p.traffic_class(), p.flow_label(), p.packet());
    if let Ok(up) = p.upper_layer() {
        assert!(up.offset <= p.payload().len());
        assert!(usize::from(up.ext_headers) <= crate::ipv6::MAX_EXT_HEADERS);
    }
    let r = Ipv6Repr::parse(&p);
    let mut out = [0u8; 40];
    r.emit(&mut out).expect("40 bytes fit");
    assert_eq!(&out[..], &data[..40]);
}

/// UDP view and repr, under both address families.
pub fn udp(data: &[u8]) {
    let Ok(p) = UdpPacket::new_checked(data) else {
        return;
    };
    let _ = (p.src_port(), p.dst_port(), p.checksum(), p.is_empty());
    assert_eq!(p.payload().len() + 8, usize::from(p.len()));
    for (s, d) in [(V4A, V4B), (V6A, V6B), (V4A, V6B)] {
        let ok = p.verify_checksum(s, d);
        assert_eq!(UdpRepr::parse(&p, Some((s, d))).is_ok(), ok);
    }
    let r = UdpRepr::parse(&p, None).expect("no checksum check");
    let mut buf = [0u8; 128];
    let n = usize::from(p.len()).min(buf.len());
    buf[..n].copy_from_slice(&data[..n]);
    for (s, d) in [(V4A, V4B), (V6A, V6B)] {
        r.emit(&mut buf[..n], s, d, UdpChecksum::Compute)
            .expect("fits");
        assert!(UdpPacket::new_checked(&buf[..n])
            .expect("valid")
            .verify_checksum(s, d));
    }
}

/// TCP view and repr.
pub fn tcp(data: &[u8]) {
    let Ok(p) = TcpPacket::new_checked(data) else {
        return;
    };
    let _ = (
        p.checksum(),
        p.options(),
        p.payload(),
        p.verify_checksum(V4A, V4B),
        p.verify_checksum(V6A, V6B),
    );
    let r = TcpRepr::parse(&p, None).expect("no checksum check");
    let mut buf = [0u8; 128];
    let n = data.len().min(buf.len());
    buf[..n].copy_from_slice(&data[..n]);
    r.emit(&mut buf[..n], V4A, V4B).expect("fits");
    let q = TcpPacket::new_unchecked(&buf[..n]);
    assert!(q.verify_checksum(V4A, V4B));
    assert_eq!(TcpRepr::parse(&q, None), Ok(r));
}

/// ICMP/ICMPv6 view and repr.
pub fn icmp(data: &[u8]) {
    let Ok(p) = IcmpPacket::new_checked(data) else {
        return;
    };
    let _ = (p.checksum(), p.data());
    for (v, a) in [(IcmpVersion::V4, (V4A, V4B)), (IcmpVersion::V6, (V6A, V6B))] {
        let _ = p.verify_checksum(v, Some(a));
        let r = IcmpRepr::parse(&p, v);
        let mut buf = [0u8; 128];
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        r.emit(&mut buf[..n], v, Some(a)).expect("fits");
        let q = IcmpPacket::new_unchecked(&buf[..n]);
        assert!(q.verify_checksum(v, Some(a)));
        assert_eq!(IcmpRepr::parse(&q, v), r);
    }
}

/// GTP-U view, extension iterator and repr.
pub fn gtpu(data: &[u8]) {
    let Ok(p) = GtpuPacket::new_checked(data) else {
        return;
    };
    let _ = (p.version(), p.flags());
    if let Some(c) = p.pdu_session() {
        assert!(c.qfi < 64);
        let h = c.ext_header();
        let back = crate::gtpu::PduSession::parse(&h[1..3]).expect("2 content bytes");
        assert_eq!((back.pdu_type, back.qfi), (c.pdu_type & 0xf, c.qfi));
    }
    assert!(p.header_len() <= 8 + usize::from(p.length()));
    let ext_total: usize = p.extensions().map(|e| e.content.len() + 2).sum();
    assert_eq!(ext_total, p.ext_bytes().len());
    let r = GtpuRepr::parse(&p);
    let payload = p.payload();
    let mut out = [0u8; 2048];
    let h = r.header_len();
    if h + payload.len() <= out.len() {
        r.emit(&mut out, payload.len())
            .expect("a parsed chain is valid");
        out[h..h + payload.len()].copy_from_slice(payload);
        let q = GtpuPacket::new_checked(&out[..h + payload.len()])
            .expect("re-emitted message is valid");
        assert_eq!(GtpuRepr::parse(&q), r);
        assert_eq!(q.payload(), payload);
    }
}

fn check_ip(frame: &[u8], ip: &IpInfo<'_>) {
    assert!(ip.offset <= ip.l4_offset);
    let pl = ip.l4_payload();
    assert!(pl.len() <= ip.packet.len());
    assert!(ip.offset + ip.packet.len() <= frame.len());
    assert_eq!(&frame[ip.offset..ip.offset + ip.packet.len()], ip.packet);
    if ip.fragment.is_none() {
        assert!(ip.l4_offset <= ip.offset + ip.packet.len());
        let t = ip.five_tuple().expect("not a fragment");
        assert_eq!(t.key().len(), if ip.is_ipv6() { 37 } else { 13 });
    } else {
        assert_eq!(ip.l4, L4::Unparsed);
    }
}

/// [`parse_frame_with`] under several option sets.
pub fn parse_frame(data: &[u8]) {
    for opts in [
        ParseOptions::default(),
        ParseOptions {
            verify_ipv4_checksum: false,
            verify_l4_checksum: true,
            ..ParseOptions::default()
        },
        ParseOptions {
            parse_gtpu: false,
            ..ParseOptions::default()
        },
    ] {
        match parse_frame_with(data, &opts) {
            Ok(p) => {
                assert!(p.l3_offset <= data.len());
                let _ = (p.dst_addr(), p.src_addr(), p.teid(), p.is_fragment());
                match &p.kind {
                    FrameKind::Ip(ip) => check_ip(data, ip),
                    FrameKind::Gtpu(g) => {
                        check_ip(data, &g.outer);
                        assert!(g.gtpu_offset <= data.len());
                        if let Some(i) = &g.inner {
                            check_ip(data, i);
                        }
                    }
                    FrameKind::Arp(_) | FrameKind::Other(_) => {}
                }
            }
            Err(e) => {
                assert_eq!(WireError::ALL[e.index()], e);
                assert!(!e.label().is_empty());
            }
        }
    }
}

/// Encapsulates arbitrary bytes as a user packet (IPv4 and IPv6 outer), checks the outer
/// headers, and decapsulates when the bytes form an IP packet.
pub fn encap(data: &[u8]) {
    let mut buf = [0u8; 2048];
    let data = &data[..data.len().min(1800)];
    for (outer, csum) in [
        (
            OuterIp::V4 {
                src: Ipv4Addr::new(192, 0, 2, 1),
                dst: Ipv4Addr::new(192, 0, 2, 2),
            },
            true,
        ),
        (
            OuterIp::V6 {
                src: Ipv6Addr::LOCALHOST,
                dst: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9),
            },
            false,
        ),
    ] {
        let t = GtpuTunnel {
            udp_checksum_v4: csum,
            seq_number: Some(7),
            ..GtpuTunnel::new(
                EthernetAddress([2, 0, 0, 0, 0, 1]),
                EthernetAddress([2, 0, 0, 0, 0, 2]),
                outer,
                0xdead_beef,
            )
        };
        let n = t.encap_into(data, &mut buf).expect("fits");
        let frame = &buf[..n];
        let opts = ParseOptions {
            parse_gtpu: false,
            verify_l4_checksum: true,
            ..ParseOptions::default()
        };
        let p = parse_frame_with(frame, &opts).expect("outer headers are valid");
        let FrameKind::Ip(ip) = p.kind else {
            panic!("outer is IP")
        };
        assert_eq!(
            ip.l4,
            L4::Udp {
                src_port: 2152,
                dst_port: 2152,
                len: (8 + 12 + data.len()) as u16
            }
        );
        match decapsulate(frame) {
            Ok(d) => {
                assert_eq!(d.teid, 0xdead_beef);
                assert_eq!(d.inner, &data[..d.inner.len()]);
            }
            Err(crate::encap::DecapError::Malformed(_)) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

/// The GTP-U echo responder: whatever it answers parses as an echo response to the asker.
pub fn echo(input: &[u8]) {
    // Repair the outer IPv4 header checksum first, so random inputs get past it.
    let mut buf = [0u8; 2048];
    let len = input.len().min(buf.len());
    buf[..len].copy_from_slice(&input[..len]);
    if let Ok(f) = EthernetFrame::new_checked(&buf[..len]) {
        let l3 = f.header_len();
        if f.ethertype() == crate::ethernet::EtherType::IPV4 {
            if let Ok(mut ip) = Ipv4Packet::new_checked(&mut buf[l3..len]) {
                ip.fill_checksum();
            }
        }
    }
    let data = &buf[..len];
    let mut out = [0u8; 128];
    if let Ok(Some(n)) = crate::encap::answer_echo_request(data, &mut out) {
        let req = crate::frame::parse_frame(data).expect("answered a valid request");
        let FrameKind::Gtpu(a) = req.kind else {
            panic!("answered something that is not GTP-U")
        };
        // The response goes to the request's source port, so it may read as plain UDP.
        let rep = crate::frame::parse_frame(&out[..n]).expect("response is valid");
        let ip = rep.outer_ip().expect("response is IP");
        assert_eq!(
            (ip.src_addr, ip.dst_addr),
            (a.outer.dst_addr, a.outer.src_addr)
        );
        let g = GtpuPacket::new_checked(ip.l4_payload()).expect("response is GTP-U");
        assert_eq!((g.msg_type(), g.teid()), (2, 0));
        assert_eq!(g.seq_number(), Some(a.seq_number.unwrap_or(0)));
    }
}

/// The ICMP error builder over an arbitrary "IP packet": whatever it builds is a valid IPv4 or
/// IPv6 packet with good checksums, sent back to the packet's source, quoting its first bytes.
pub fn icmp_error(data: &[u8]) {
    const HEADROOM: usize = 64;
    let mut buf = [0u8; 2048];
    let len = data.len().min(buf.len() - HEADROOM);
    let (a4, a6) = (
        Ipv4Addr::new(192, 0, 2, 1),
        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
    );
    for msg in [
        crate::icmp::ErrorMessage::TimeExceeded,
        crate::icmp::ErrorMessage::TooBig { mtu: 1400 },
    ] {
        buf[HEADROOM..HEADROOM + len].copy_from_slice(&data[..len]);
        let Ok((s, n)) = crate::icmp::error_in_place(&mut buf, HEADROOM, len, a4, a6, msg) else {
            continue;
        };
        let e = &buf[s..s + n];
        let quote_len = n - if e[0] >> 4 == 4 { 28 } else { 48 };
        assert_eq!(&e[n - quote_len..], &data[..quote_len]);
        match e[0] >> 4 {
            4 => {
                let ip = Ipv4Packet::new_checked(e).expect("a valid IPv4 packet");
                assert!(ip.verify_checksum());
                assert_eq!(ip.src_addr(), a4);
                assert_eq!(&ip.dst_addr().octets()[..], &data[12..16]);
                let m = IcmpPacket::new_checked(&e[20..]).expect("ICMP");
                assert!(m.verify_checksum(IcmpVersion::V4, None));
            }
            _ => {
                assert!(n <= crate::icmp::IPV6_MIN_MTU);
                let ip = Ipv6Packet::new_checked(e).expect("a valid IPv6 packet");
                assert_eq!(&ip.dst_addr().octets()[..], &data[8..24]);
                let m = IcmpPacket::new_checked(&e[40..]).expect("ICMPv6");
                let addrs = (IpAddr::V6(a6), IpAddr::V6(ip.dst_addr()));
                assert!(m.verify_checksum(IcmpVersion::V6, Some(addrs)));
            }
        }
    }
}

/// The Error Indication builder: whatever it answers parses as an Error Indication about the
/// G-PDU's TEID, back to its sender.
pub fn error_indication(input: &[u8]) {
    let mut buf = [0u8; 2048];
    let len = input.len().min(buf.len());
    buf[..len].copy_from_slice(&input[..len]);
    if let Ok(f) = EthernetFrame::new_checked(&buf[..len]) {
        let l3 = f.header_len();
        if f.ethertype() == crate::ethernet::EtherType::IPV4 {
            if let Ok(mut ip) = Ipv4Packet::new_checked(&mut buf[l3..len]) {
                ip.fill_checksum();
            }
        }
    }
    let data = &buf[..len];
    let mut out = [0u8; 160];
    if let Ok(Some(n)) = crate::encap::error_indication(data, &mut out) {
        let req = crate::frame::parse_frame(data).expect("answered a valid G-PDU");
        let FrameKind::Gtpu(a) = req.kind else {
            panic!("answered something that is not GTP-U")
        };
        let rep = crate::frame::parse_frame(&out[..n]).expect("the indication is valid");
        let FrameKind::Gtpu(g) = rep.kind else {
            panic!("the indication is not GTP-U on port 2152")
        };
        assert_eq!(
            (g.outer.src_addr, g.outer.dst_addr),
            (a.outer.dst_addr, a.outer.src_addr)
        );
        assert_eq!((g.msg_type, g.teid, g.seq_number), (26, 0, Some(0)));
        let p = GtpuPacket::new_checked(&out[g.gtpu_offset..n]).expect("GTP-U");
        let ies = p.payload();
        assert_eq!(ies[0], crate::encap::ie::TEID_DATA_I);
        assert_eq!(&ies[1..5], &a.teid.to_be_bytes());
        assert_eq!(ies[5], crate::encap::ie::GTPU_PEER_ADDRESS);
    }
}

/// Every entry point on the same bytes.
pub fn all(data: &[u8]) {
    ethernet(data);
    arp(data);
    ipv4(data);
    ipv6(data);
    udp(data);
    tcp(data);
    icmp(data);
    gtpu(data);
    parse_frame(data);
    encap(data);
    echo(data);
    icmp_error(data);
    error_indication(data);
}
