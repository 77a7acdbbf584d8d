//! Hand-built frames: every classification `parse_frame` makes, every malformation it names, the
//! ARP responder, TTL handling, flow-key bytes, and GTP-U encapsulation/decapsulation.

mod common;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use sb_wire::gtpu::{ext_type, msg_type};
use sb_wire::ipv4::protocol;
use sb_wire::*;

const A4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const B4: Ipv4Addr = Ipv4Addr::new(10, 1, 2, 3);
const A6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0xa);
const B6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0xb);

fn udp4(sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    let (p, seg) = l4_segment(A4.into(), B4.into(), L4Spec::Udp(sp, dp), payload);
    ip_packet(A4.into(), B4.into(), p, &seg, &[])
}

fn err(frame: &[u8]) -> &'static str {
    parse_frame(frame)
        .expect_err("frame must be rejected")
        .label()
}

fn fix_ipv4_checksum(frame: &mut [u8], l3: usize) {
    let hl = usize::from(frame[l3] & 0xf) * 4;
    let mut p = Ipv4Packet::new_unchecked(&mut frame[l3..l3 + hl]);
    p.fill_checksum();
}

#[test]
fn ipv4_udp_and_five_tuple_bytes() {
    let f = ip_frame(None, &udp4(1234, 80, b"data"));
    let p = parse_frame(&f).unwrap();
    assert_eq!(p.l3_offset, 14);
    let FrameKind::Ip(ip) = p.kind else {
        panic!("{:?}", p.kind)
    };
    assert_eq!(
        ip.l4,
        L4::Udp {
            src_port: 1234,
            dst_port: 80,
            len: 12
        }
    );
    assert_eq!((ip.ttl, ip.l4_offset, ip.packet.len()), (64, 34, 32));
    assert_eq!(p.dst_addr(), Some(IpAddr::V4(B4)));
    assert_eq!(p.src_addr(), Some(IpAddr::V4(A4)));
    let key = p.five_tuple().unwrap().key();
    assert_eq!(
        &key[..],
        &[17, 198, 51, 100, 7, 0x04, 0xd2, 10, 1, 2, 3, 0, 80]
    );
    // Checksums verify when asked.
    let opts = ParseOptions {
        verify_l4_checksum: true,
        ..Default::default()
    };
    assert!(parse_frame_with(&f, &opts).is_ok());
    let mut bad = f.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(
        parse_frame_with(&bad, &opts).unwrap_err().label(),
        "udp_bad_checksum"
    );
    assert!(
        parse_frame(&bad).is_ok(),
        "L4 checksums are not verified by default"
    );
}

#[test]
fn ipv6_five_tuple_is_37_bytes() {
    let (p, seg) = l4_segment(
        A6.into(),
        B6.into(),
        L4Spec::Tcp(40000, 443, TcpFlags::SYN),
        b"",
    );
    let f = ip_frame(None, &ip_packet(A6.into(), B6.into(), p, &seg, &[]));
    let t = parse_frame(&f).unwrap().five_tuple().unwrap();
    let k = t.key();
    assert_eq!(k.len(), 37);
    assert_eq!(k[0], 6);
    assert_eq!(&k[1..17], &A6.octets());
    assert_eq!(&k[17..19], &40000u16.to_be_bytes());
    assert_eq!(&k[19..35], &B6.octets());
    assert_eq!(&k[35..37], &443u16.to_be_bytes());
    assert_eq!(t.reversed().reversed(), t);
    assert_eq!(addr_key(B6.into()).len(), 16);
}

#[test]
fn vlan_tcp_flags() {
    let (p, seg) = l4_segment(
        A4.into(),
        B4.into(),
        L4Spec::Tcp(5555, 22, TcpFlags::SYN | TcpFlags::ACK),
        b"xyz",
    );
    let tag = VlanTag {
        pcp: 5,
        dei: true,
        vid: 100,
    };
    let f = ip_frame(Some(tag), &ip_packet(A4.into(), B4.into(), p, &seg, &[]));
    let pf = parse_frame_with(
        &f,
        &ParseOptions {
            verify_l4_checksum: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(pf.eth.vlan, Some(tag));
    assert_eq!(pf.l3_offset, 18);
    let ip = pf.ip().unwrap();
    let L4::Tcp {
        src_port,
        dst_port,
        flags,
    } = ip.l4
    else {
        panic!()
    };
    assert_eq!((src_port, dst_port), (5555, 22));
    assert!(
        flags.contains(TcpFlags::SYN)
            && flags.contains(TcpFlags::ACK)
            && !flags.contains(TcpFlags::FIN)
    );
    let t = TcpPacket::new_checked(&f[ip.l4_offset..]).unwrap();
    assert_eq!(
        (t.seq_number(), t.ack_number(), t.window(), t.header_len()),
        (1000, 2000, 8192, 20)
    );
    assert_eq!(t.payload(), b"xyz");
    assert_eq!(pf.l4_payload(), Some(&b"xyz"[..]));
}

#[test]
fn ipv4_options_are_skipped() {
    // Build a UDP packet, then insert 8 bytes of options (NOP NOP NOP NOP, then 4 x EOL).
    let plain = udp4(7, 9, b"opts");
    let mut ip = plain[..20].to_vec();
    ip.extend_from_slice(&[1, 1, 1, 1, 0, 0, 0, 0]);
    ip.extend_from_slice(&plain[20..]);
    ip[0] = 0x47;
    let tl = ip.len() as u16;
    ip[2..4].copy_from_slice(&tl.to_be_bytes());
    let mut f = ip_frame(None, &ip);
    fix_ipv4_checksum(&mut f, 14);
    let pf = parse_frame(&f).unwrap();
    let ipi = pf.ip().unwrap();
    assert_eq!(ipi.l4_offset, 14 + 28);
    assert_eq!(
        ipi.l4,
        L4::Udp {
            src_port: 7,
            dst_port: 9,
            len: 12
        }
    );
    let v = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert_eq!(v.options(), &[1, 1, 1, 1, 0, 0, 0, 0]);
    assert_eq!(v.header_len(), 28);
}

#[test]
fn ethernet_padding_is_not_payload() {
    let mut f = ip_frame(None, &udp4(1, 2, b""));
    assert_eq!(f.len(), 42);
    f.resize(60, 0);
    let pf = parse_frame(&f).unwrap();
    let ip = pf.ip().unwrap();
    assert_eq!(ip.packet.len(), 28);
    assert_eq!(
        Ipv4Packet::new_checked(&f[14..]).unwrap().payload().len(),
        8
    );
}

#[test]
fn ipv4_fragments_are_reported() {
    let ip = udp4(1000, 2000, &[0u8; 32]);
    for (flags_off, offset, more) in [
        (0x2000u16, 0u16, true),
        (0x0004, 32, false),
        (0x2004, 32, true),
    ] {
        let mut f = ip_frame(None, &ip);
        f[14 + 6..14 + 8].copy_from_slice(&flags_off.to_be_bytes());
        fix_ipv4_checksum(&mut f, 14);
        let pf = parse_frame(&f).unwrap();
        assert!(pf.is_fragment());
        let ipi = pf.ip().unwrap();
        assert_eq!(
            ipi.fragment,
            Some(Fragment {
                offset,
                more,
                ident: 0
            })
        );
        assert_eq!(ipi.l4, L4::Unparsed);
        assert_eq!(pf.five_tuple(), None);
        assert_eq!(
            pf.dst_addr(),
            Some(IpAddr::V4(B4)),
            "the downstream key survives fragmentation"
        );
    }
    // DF alone is not a fragment.
    let mut f = ip_frame(None, &ip);
    f[14 + 6] = 0x40;
    fix_ipv4_checksum(&mut f, 14);
    assert!(!parse_frame(&f).unwrap().is_fragment());
}

#[test]
fn ipv6_extension_headers_are_walked() {
    let (p, seg) = l4_segment(A6.into(), B6.into(), L4Spec::Udp(53, 5353), b"q");
    let exts = [
        Ext6::HopByHop(0),
        Ext6::Routing(1),
        Ext6::Auth(4),
        Ext6::DestOpts(2),
    ];
    let ip = ip_packet(A6.into(), B6.into(), p, &seg, &exts);
    let f = ip_frame(None, &ip);
    let pf = parse_frame_with(
        &f,
        &ParseOptions {
            verify_l4_checksum: true,
            ..Default::default()
        },
    )
    .unwrap();
    let ipi = pf.ip().unwrap();
    let ext_len = 8 + 16 + 24 + 24;
    assert_eq!(ipi.l4_offset, 14 + 40 + ext_len);
    assert_eq!(ipi.protocol, protocol::UDP);
    assert_eq!(
        ipi.l4,
        L4::Udp {
            src_port: 53,
            dst_port: 5353,
            len: 9
        }
    );
    let up = Ipv6Packet::new_checked(&ip[..])
        .unwrap()
        .upper_layer()
        .unwrap();
    assert_eq!((up.offset, up.ext_headers, up.fragment), (ext_len, 4, None));
}

#[test]
fn ipv6_fragments_are_reported() {
    let (p, seg) = l4_segment(A6.into(), B6.into(), L4Spec::Udp(1, 2), &[7u8; 24]);
    for (off, more) in [(0u16, true), (1208, false)] {
        let ip = ip_packet(
            A6.into(),
            B6.into(),
            p,
            &seg,
            &[Ext6::DestOpts(0), Ext6::Fragment(off, more, 0xabcdef01)],
        );
        let f = ip_frame(None, &ip);
        let pf = parse_frame(&f).unwrap();
        let ipi = pf.ip().unwrap();
        assert_eq!(
            ipi.fragment,
            Some(Fragment {
                offset: off,
                more,
                ident: 0xabcdef01
            })
        );
        assert_eq!(ipi.protocol, protocol::UDP);
        assert_eq!(ipi.l4_offset, 14 + 40 + 16);
        assert_eq!(ipi.l4, L4::Unparsed);
        assert!(pf.is_fragment());
    }
}

#[test]
fn ipv6_bad_extension_chains() {
    let (p, seg) = l4_segment(A6.into(), B6.into(), L4Spec::Udp(1, 2), b"");
    let ip = ip_packet(
        A6.into(),
        B6.into(),
        p,
        &seg,
        &[Ext6::Routing(0), Ext6::HopByHop(0)],
    );
    assert_eq!(err(&ip_frame(None, &ip)), "ipv6_hop_by_hop_not_first");
    let many = [Ext6::DestOpts(0); 9];
    let ip = ip_packet(A6.into(), B6.into(), p, &seg, &many);
    assert_eq!(err(&ip_frame(None, &ip)), "ipv6_too_many_ext_headers");
    let ok = [Ext6::DestOpts(0); 8];
    assert!(parse_frame(&ip_frame(
        None,
        &ip_packet(A6.into(), B6.into(), p, &seg, &ok)
    ))
    .is_ok());
    // A destination-options header claiming 16 bytes in a 12-byte payload.
    let mut ip = ip_packet(
        A6.into(),
        B6.into(),
        protocol::IPV6_NONXT,
        &[],
        &[Ext6::DestOpts(0)],
    );
    ip[41] = 1;
    assert_eq!(err(&ip_frame(None, &ip)), "ipv6_ext_truncated");
    // ESP: nothing past it is parsed.
    let ip = ip_packet(
        A6.into(),
        B6.into(),
        protocol::ESP,
        &[0u8; 16],
        &[Ext6::HopByHop(0)],
    );
    let f = ip_frame(None, &ip);
    let pf = parse_frame(&f).unwrap();
    assert_eq!(pf.ip().unwrap().protocol, protocol::ESP);
    assert_eq!(pf.ip().unwrap().l4, L4::Unparsed);
}

#[test]
fn icmp_echo_v4_and_v6() {
    let echo = IcmpRepr::EchoRequest {
        ident: 0x4242,
        seq: 7,
    };
    let opts = ParseOptions {
        verify_l4_checksum: true,
        ..Default::default()
    };
    for (s, d) in [
        (IpAddr::V4(A4), IpAddr::V4(B4)),
        (IpAddr::V6(A6), IpAddr::V6(B6)),
    ] {
        let (p, seg) = l4_segment(s, d, L4Spec::Icmp(echo), b"ping");
        let f = ip_frame(None, &ip_packet(s, d, p, &seg, &[]));
        let pf = parse_frame_with(&f, &opts).unwrap();
        let ver = if s.is_ipv6() {
            IcmpVersion::V6
        } else {
            IcmpVersion::V4
        };
        assert_eq!(
            pf.ip().unwrap().l4,
            L4::Icmp {
                version: ver,
                repr: echo
            }
        );
        assert_eq!(pf.five_tuple().unwrap().src_port, 0);
        let raw = IcmpPacket::new_checked(&seg[..]).unwrap();
        assert_eq!(raw.msg_type(), if s.is_ipv6() { 128 } else { 8 });
        let mut bad = f.clone();
        *bad.last_mut().unwrap() ^= 0x80;
        assert_eq!(
            parse_frame_with(&bad, &opts).unwrap_err().label(),
            "icmp_bad_checksum"
        );
    }
    let other = IcmpRepr::Other {
        msg_type: 3,
        code: 1,
        rest: [0; 4],
    };
    let (p, seg) = l4_segment(A4.into(), B4.into(), L4Spec::Icmp(other), b"");
    let f = ip_frame(None, &ip_packet(A4.into(), B4.into(), p, &seg, &[]));
    assert_eq!(
        parse_frame(&f).unwrap().ip().unwrap().l4,
        L4::Icmp {
            version: IcmpVersion::V4,
            repr: other
        }
    );
}

fn gtpu_frame(outer6: bool, repr: &GtpuRepr<'_>, inner: &[u8]) -> Vec<u8> {
    let msg = gtpu_message(repr, inner);
    let (s, d): (IpAddr, IpAddr) = if outer6 {
        (A6.into(), B6.into())
    } else {
        (A4.into(), B4.into())
    };
    let (p, seg) = l4_segment(s, d, L4Spec::Udp(40000, 2152), &msg);
    ip_frame(None, &ip_packet(s, d, p, &seg, &[]))
}

#[test]
fn gtpu_with_sequence_npdu_and_extensions() {
    let ue = Ipv4Addr::new(10, 45, 0, 9);
    let server = Ipv4Addr::new(8, 8, 8, 8);
    let (p, seg) = l4_segment(ue.into(), server.into(), L4Spec::Udp(33333, 53), b"dns?");
    let inner = ip_packet(ue.into(), server.into(), p, &seg, &[]);
    let mut chain = [0u8; 12];
    let (first, n) = gtpu::write_ext_chain(
        &[
            GtpuExt {
                ext_type: ext_type::PDU_SESSION_CONTAINER,
                content: &[0x10, 0x09],
            },
            GtpuExt {
                ext_type: ext_type::PDCP_PDU_NUMBER,
                content: &[0, 1, 2, 3, 4, 5],
            },
        ],
        &mut chain,
    )
    .unwrap();
    assert_eq!((first, n), (0x85, 12));
    let repr = GtpuRepr {
        msg_type: msg_type::G_PDU,
        teid: 0x0102_0304,
        seq_number: Some(0xbeef),
        npdu_number: Some(0x42),
        extensions: Some((first, &chain[..n])),
    };
    for outer6 in [false, true] {
        let f = gtpu_frame(outer6, &repr, &inner);
        let pf = parse_frame_with(
            &f,
            &ParseOptions {
                verify_l4_checksum: true,
                ..Default::default()
            },
        )
        .unwrap();
        let FrameKind::Gtpu(g) = pf.kind else {
            panic!("{:?}", pf.kind)
        };
        assert_eq!(
            (g.teid, g.seq_number, g.npdu_number, g.first_ext_type),
            (0x0102_0304, Some(0xbeef), Some(0x42), Some(0x85))
        );
        let outer_l3 = if outer6 { 40 } else { 20 };
        assert_eq!(g.gtpu_offset, 14 + outer_l3 + 8);
        let i = g.inner.unwrap();
        assert_eq!(i.offset, g.gtpu_offset + 12 + 12);
        assert_eq!(i.packet, &inner[..]);
        assert_eq!(pf.l4_payload(), Some(&b"dns?"[..]));
        assert_eq!(pf.dst_addr(), Some(IpAddr::V4(server)));
        assert_eq!(
            pf.src_addr(),
            Some(IpAddr::V4(ue)),
            "the upstream key is the inner source"
        );
        assert_eq!(pf.five_tuple().unwrap().dst_port, 53);
        assert_eq!(pf.outer_ip().unwrap().dst_addr.is_ipv6(), outer6);
        let view = GtpuPacket::new_checked(&f[g.gtpu_offset..]).unwrap();
        let exts: Vec<_> = view
            .extensions()
            .map(|e| (e.ext_type, e.content.len()))
            .collect();
        assert_eq!(exts, vec![(0x85, 2), (0xc0, 6)]);
        let d = decapsulate(&f).unwrap();
        assert_eq!(
            (d.teid, d.inner, d.inner_offset),
            (0x0102_0304, &inner[..], i.offset)
        );
    }
}

#[test]
fn gtpu_echo_and_plain_udp() {
    let echo = GtpuRepr {
        msg_type: msg_type::ECHO_REQUEST,
        teid: 0,
        seq_number: Some(1),
        npdu_number: None,
        extensions: None,
    };
    let f = gtpu_frame(false, &echo, &[]);
    let pf = parse_frame(&f).unwrap();
    let FrameKind::Gtpu(g) = pf.kind else {
        panic!()
    };
    assert_eq!((g.msg_type, g.seq_number, g.inner), (1, Some(1), None));
    assert_eq!(pf.ip(), None);
    assert_eq!(decapsulate(&f), Err(DecapError::NotGPdu(1)));
    // UDP to another port is not GTP-U; GTP-U parsing can be switched off.
    let f2 = ip_frame(None, &udp4(2152, 2153, &[0x30, 0xff, 0, 0, 0, 0, 0, 1]));
    assert!(matches!(parse_frame(&f2).unwrap().kind, FrameKind::Ip(_)));
    assert_eq!(decapsulate(&f2), Err(DecapError::NotGtpu));
    let off = ParseOptions {
        parse_gtpu: false,
        ..Default::default()
    };
    assert!(matches!(
        parse_frame_with(&f, &off).unwrap().kind,
        FrameKind::Ip(_)
    ));
}

#[test]
fn malformed_frames_are_named() {
    let good = ip_frame(None, &udp4(1, 2, b"abcd"));
    assert_eq!(err(&good[..13]), "eth_truncated");
    let tagged = ip_frame(Some(VlanTag::default()), &udp4(1, 2, b""));
    assert_eq!(err(&tagged[..16]), "eth_vlan_truncated");
    assert_eq!(err(&good[..30]), "ipv4_truncated");
    let mut f = good.clone();
    f[14] = 0x55;
    assert_eq!(err(&f), "ipv4_bad_version");
    f[14] = 0x44;
    assert_eq!(err(&f), "ipv4_bad_header_len");
    f[14] = 0x4f; // 60-byte header in a 32-byte packet
    assert_eq!(err(&f), "ipv4_bad_header_len");
    let mut f = good.clone();
    f[16..18].copy_from_slice(&100u16.to_be_bytes());
    assert_eq!(err(&f), "ipv4_bad_total_len");
    f[16..18].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(err(&f), "ipv4_bad_total_len");
    let mut f = good.clone();
    f[14 + 8] ^= 1; // TTL changed, checksum not
    assert_eq!(err(&f), "ipv4_bad_checksum");
    assert!(parse_frame_with(
        &f,
        &ParseOptions {
            verify_ipv4_checksum: false,
            ..Default::default()
        }
    )
    .is_ok());
    let mut f = good.clone();
    f[34 + 4..34 + 6].copy_from_slice(&13u16.to_be_bytes()); // UDP length past the IP payload
    assert_eq!(err(&f), "udp_bad_length");
    f[34 + 4..34 + 6].copy_from_slice(&7u16.to_be_bytes());
    assert_eq!(err(&f), "udp_bad_length");
    // IPv4 total length says the UDP header is cut short.
    let mut f = good.clone();
    f[16..18].copy_from_slice(&25u16.to_be_bytes());
    fix_ipv4_checksum(&mut f, 14);
    assert_eq!(err(&f), "udp_truncated");
    // TCP data offset below 5.
    let (p, seg) = l4_segment(A4.into(), B4.into(), L4Spec::Tcp(1, 2, TcpFlags::ACK), b"");
    let mut f = ip_frame(None, &ip_packet(A4.into(), B4.into(), p, &seg, &[]));
    f[34 + 12] = 0x40;
    assert_eq!(err(&f), "tcp_bad_data_offset");
    f[34 + 12] = 0x60;
    assert_eq!(err(&f), "tcp_bad_data_offset");
    assert_eq!(err(&f[..40]), "ipv4_bad_total_len");
    // ICMP shorter than 8 bytes.
    let f = ip_frame(
        None,
        &ip_packet(A4.into(), B4.into(), protocol::ICMP, &[8, 0, 0, 0], &[]),
    );
    assert_eq!(err(&f), "icmp_truncated");
    // IPv6.
    let ip6 = ip_packet(A6.into(), B6.into(), protocol::IPV6_NONXT, &[], &[]);
    let f6 = ip_frame(None, &ip6);
    assert_eq!(err(&f6[..50]), "ipv6_truncated");
    let mut f = f6.clone();
    f[14] = 0x40;
    assert_eq!(err(&f), "ipv6_bad_version");
    let mut f = f6.clone();
    f[18..20].copy_from_slice(&1u16.to_be_bytes());
    assert_eq!(err(&f), "ipv6_bad_payload_len");
    // ARP.
    let arp = eth_frame(None, EtherType::ARP, &[0u8; 20]);
    assert_eq!(err(&arp), "arp_truncated");
    let arp = eth_frame(None, EtherType::ARP, &[0u8; 28]);
    assert_eq!(err(&arp), "arp_unsupported");
}

#[test]
fn malformed_gtpu_is_named() {
    let inner = udp4(5, 6, b"inner");
    let g = GtpuRepr::g_pdu(77);
    let build = |msg: &[u8]| {
        let (p, seg) = l4_segment(A4.into(), B4.into(), L4Spec::Udp(2152, 2152), msg);
        ip_frame(None, &ip_packet(A4.into(), B4.into(), p, &seg, &[]))
    };
    let msg = gtpu_message(&g, &inner);
    assert!(parse_frame(&build(&msg)).is_ok());
    assert_eq!(err(&build(&msg[..7])), "gtpu_truncated");
    let mut m = msg.clone();
    m[0] = 0x50; // version 2
    assert_eq!(err(&build(&m)), "gtpu_bad_version");
    m[0] = 0x20; // PT = 0 (GTP')
    assert_eq!(err(&build(&m)), "gtpu_bad_protocol_type");
    let mut m = msg.clone();
    m[2..4].copy_from_slice(&(inner.len() as u16 + 1).to_be_bytes());
    assert_eq!(err(&build(&m)), "gtpu_bad_length");
    // S flag with a length too short for the optional word.
    let m = [0x32, 0xff, 0, 2, 0, 0, 0, 1, 0, 0];
    assert_eq!(err(&build(&m)), "gtpu_bad_length");
    // E flag, extension with length 0.
    let m = [0x34, 0xff, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 0, 0, 0, 0];
    assert_eq!(err(&build(&m)), "gtpu_bad_extension");
    // E flag, extension running past the message.
    let m = [0x34, 0xff, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0x85, 2, 0, 0, 0];
    assert_eq!(err(&build(&m)), "gtpu_bad_extension");
    // E flag, next type 0 right away: no extensions, fine (empty G-PDU payload though).
    let m = [0x34, 0xff, 0, 4, 0, 0, 0, 1, 0, 0, 0, 0];
    assert_eq!(err(&build(&m)), "gtpu_inner_not_ip");
    // G-PDU whose inner IPv4 header checksum is wrong.
    let mut bad_inner = inner.clone();
    bad_inner[8] ^= 1;
    assert_eq!(
        err(&build(&gtpu_message(&g, &bad_inner))),
        "ipv4_bad_checksum"
    );
    assert!(matches!(
        decapsulate(&build(&gtpu_message(&g, &bad_inner))),
        Err(DecapError::Malformed(_))
    ));
    // The inner packet is bounded by the GTP-U length, not the UDP datagram.
    let mut m = gtpu_message(&g, &inner);
    m[2..4].copy_from_slice(&(inner.len() as u16 - 1).to_be_bytes());
    assert_eq!(err(&build(&m)), "ipv4_bad_total_len");
}

#[test]
fn error_labels_and_indices_are_unique() {
    let labels: HashSet<_> = WireError::ALL.iter().map(|e| e.label()).collect();
    assert_eq!(labels.len(), WireError::COUNT);
    for (i, e) in WireError::ALL.iter().enumerate() {
        assert_eq!(e.index(), i);
    }
}

#[test]
fn arp_requests_for_own_addresses_are_answered() {
    let me = EthernetAddress([2, 0, 0, 0, 0, 0x11]);
    let asker = EthernetAddress([2, 0, 0, 0, 0, 0x22]);
    let mine = Ipv4Addr::new(10, 0, 0, 1);
    let req = ArpRepr {
        operation: ArpOperation::Request,
        sender_hw: asker,
        sender_ip: Ipv4Addr::new(10, 0, 0, 2),
        target_hw: EthernetAddress([0; 6]),
        target_ip: mine,
    };
    let mut body = [0u8; 28];
    req.emit(&mut body).unwrap();
    for vlan in [
        None,
        Some(VlanTag {
            pcp: 0,
            dei: false,
            vid: 7,
        }),
    ] {
        let f = eth_frame(vlan, EtherType::ARP, &body);
        let pf = parse_frame(&f).unwrap();
        assert_eq!(pf.kind, FrameKind::Arp(req));
        let mut out = [0u8; 128];
        let n = answer_request(&f, me, &[Ipv4Addr::new(10, 9, 9, 9), mine], &mut out)
            .unwrap()
            .unwrap();
        assert_eq!(n, 60);
        let rf = parse_frame(&out[..n]).unwrap();
        assert_eq!(
            (rf.eth.dst_addr, rf.eth.src_addr, rf.eth.vlan),
            (asker, me, vlan)
        );
        let FrameKind::Arp(rep) = rf.kind else {
            panic!()
        };
        assert_eq!(rep.operation, ArpOperation::Reply);
        assert_eq!(
            (rep.sender_hw, rep.sender_ip, rep.target_hw, rep.target_ip),
            (me, mine, asker, req.sender_ip)
        );
        // Not ours, or not a request: no answer.
        assert_eq!(
            answer_request(&f, me, &[Ipv4Addr::new(10, 0, 0, 3)], &mut out),
            Ok(None)
        );
        let rn = n;
        assert_eq!(
            answer_request(&{ out }[..rn], me, &[mine], &mut out),
            Ok(None)
        );
        assert!(matches!(
            answer_request(&f, me, &[mine], &mut [0u8; 20]),
            Err(arp::ArpAnswerError::Emit(_))
        ));
    }
    assert_eq!(
        answer_request(
            &ip_frame(None, &udp4(1, 2, b"")),
            me,
            &[mine],
            &mut [0u8; 64]
        ),
        Err(arp::ArpAnswerError::NotArp)
    );
}

#[test]
fn ttl_decrement_patches_the_checksum() {
    let mut ip = udp4(1, 2, b"x");
    for ttl in [64u8, 2, 255, 128] {
        ip[8] = ttl;
        Ipv4Packet::new_unchecked(&mut ip[..]).fill_checksum();
        let mut p = Ipv4Packet::new_checked(&mut ip[..]).unwrap();
        assert_eq!(p.decrement_ttl(), Some(ttl - 1));
        assert!(p.verify_checksum());
    }
    ip[8] = 1;
    Ipv4Packet::new_unchecked(&mut ip[..]).fill_checksum();
    let before = ip.clone();
    assert_eq!(
        Ipv4Packet::new_checked(&mut ip[..])
            .unwrap()
            .decrement_ttl(),
        None
    );
    assert_eq!(ip, before);
}

#[test]
fn encapsulation_in_place_v4_and_v6() {
    let ue = Ipv4Addr::new(10, 45, 0, 1);
    let (p, seg) = l4_segment(A4.into(), ue.into(), L4Spec::Udp(443, 50000), &[0x5a; 100]);
    let inner = ip_packet(A4.into(), ue.into(), p, &seg, &[]);
    let macs = (
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
    );
    let outers = [
        OuterIp::V4 {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(192, 0, 2, 2),
        },
        OuterIp::V6 { src: A6, dst: B6 },
    ];
    for (outer, csum, seq, vlan) in [
        (outers[0], false, None, None),
        (
            outers[0],
            true,
            Some(9),
            Some(VlanTag {
                pcp: 1,
                dei: false,
                vid: 10,
            }),
        ),
        (outers[1], false, None, None),
        (outers[1], false, Some(1), None),
    ] {
        let t = GtpuTunnel {
            udp_checksum_v4: csum,
            seq_number: seq,
            vlan,
            ident: 77,
            ..GtpuTunnel::new(macs.0, macs.1, outer, 0xabcd)
        };
        let mut buf = vec![0u8; 128 + inner.len()];
        buf[128..].copy_from_slice(&inner);
        let start = t.encap_in_place(&mut buf, 128, inner.len()).unwrap();
        assert_eq!(start, 128 - t.header_len());
        let frame = &buf[start..];
        assert_eq!(&frame[t.header_len()..], &inner[..], "payload not moved");
        let opts = ParseOptions {
            verify_l4_checksum: true,
            ..Default::default()
        };
        let pf = parse_frame_with(frame, &opts).unwrap();
        assert_eq!(pf.eth.vlan, vlan);
        let FrameKind::Gtpu(g) = pf.kind else {
            panic!()
        };
        assert_eq!((g.teid, g.seq_number, g.msg_type), (0xabcd, seq, 255));
        assert_eq!(g.inner.unwrap().packet, &inner[..]);
        let o = g.outer;
        let udp = UdpPacket::new_checked(&frame[o.l4_offset..]).unwrap();
        let gtpu_len = if seq.is_some() { 12 } else { 8 };
        assert_eq!(usize::from(udp.len()), 8 + gtpu_len + inner.len());
        assert_eq!((udp.src_port(), udp.dst_port()), (2152, 2152));
        let has_csum = udp.checksum() != 0;
        assert_eq!(has_csum, csum || matches!(outer, OuterIp::V6 { .. }));
        assert!(udp.verify_checksum(o.src_addr, o.dst_addr));
        assert_eq!(o.packet.len(), frame.len() - pf.l3_offset);
        if let OuterIp::V4 { .. } = outer {
            let v = Ipv4Packet::new_checked(&frame[pf.l3_offset..]).unwrap();
            assert!(v.verify_checksum() && v.dont_frag() && v.ident() == 77 && v.ttl() == 64);
        }
        let d = decapsulate(frame).unwrap();
        assert_eq!(
            (d.teid, d.inner, d.inner_offset),
            (0xabcd, &inner[..], t.header_len())
        );
        // The copying form gives the same bytes.
        let mut out = vec![0u8; 2048];
        let n = t.encap_into(&inner, &mut out).unwrap();
        assert_eq!(&out[..n], frame);
    }
    // Errors.
    let t = GtpuTunnel::new(macs.0, macs.1, outers[0], 1);
    let mut buf = vec![0u8; 100];
    assert_eq!(
        t.encap_in_place(&mut buf, 10, 20),
        Err(EncapError::NoHeadroom {
            needed: 50,
            available: 10
        })
    );
    assert_eq!(
        t.encap_in_place(&mut buf, 60, 41),
        Err(EncapError::InnerOutOfBounds)
    );
    assert_eq!(
        t.encap_in_place(&mut buf, 60, usize::MAX),
        Err(EncapError::InnerOutOfBounds)
    );
    let mut big = vec![0u8; 70_000];
    assert_eq!(
        t.encap_in_place(&mut big, 100, 65_500),
        Err(EncapError::TooLong)
    );
    assert!(t.encap_into(&[0u8; 10], &mut [0u8; 59]).is_err());
}

#[test]
fn packet_builder_frames_parse_back() {
    let macs = (
        EthernetAddress([2, 0, 0, 0, 0, 1]),
        EthernetAddress([2, 0, 0, 0, 0, 2]),
    );
    let opts = ParseOptions {
        verify_l4_checksum: true,
        ..Default::default()
    };
    for (s, d) in [
        (IpAddr::V4(A4), IpAddr::V4(B4)),
        (IpAddr::V6(A6), IpAddr::V6(B6)),
    ] {
        for l4 in [
            L4Header::Udp {
                src_port: 9,
                dst_port: 10,
            },
            L4Header::Tcp {
                src_port: 11,
                dst_port: 12,
                seq_number: 5,
                ack_number: 6,
                flags: TcpFlags::ACK,
                window: 100,
            },
        ] {
            for vlan in [
                None,
                Some(VlanTag {
                    pcp: 2,
                    dei: false,
                    vid: 3,
                }),
            ] {
                let b = PacketBuilder {
                    l4,
                    vlan,
                    ttl: 9,
                    ..PacketBuilder::udp(macs.0, macs.1, s, d, 0, 0)
                };
                let payload = [0x11u8; 37];
                let mut out = [0u8; 256];
                let n = b.build(&payload, &mut out).unwrap();
                assert_eq!(n, b.header_len() + payload.len());
                let pf = parse_frame_with(&out[..n], &opts).unwrap();
                let ip = pf.ip().unwrap();
                assert_eq!((ip.src_addr, ip.dst_addr, ip.ttl), (s, d, 9));
                assert_eq!(&out[b.header_len()..n], &payload[..]);
                assert_eq!(pf.l4_payload(), Some(&payload[..]));
                let t = pf.five_tuple().unwrap();
                match l4 {
                    L4Header::Udp { .. } => {
                        assert_eq!((t.protocol, t.src_port, t.dst_port), (17, 9, 10))
                    }
                    L4Header::Tcp { .. } => {
                        assert_eq!((t.protocol, t.src_port, t.dst_port), (6, 11, 12))
                    }
                }
                assert_eq!(pf.eth.vlan, vlan);
            }
        }
    }
    let mixed = PacketBuilder::udp(macs.0, macs.1, A4.into(), B6.into(), 1, 2);
    assert_eq!(
        mixed.build(b"x", &mut [0u8; 128]),
        Err(EmitError::AddressFamilyMismatch)
    );
    let b = PacketBuilder::udp(macs.0, macs.1, A4.into(), B4.into(), 1, 2);
    assert!(matches!(
        b.build(b"x", &mut [0u8; 40]),
        Err(EmitError::BufferTooSmall { .. })
    ));
}

#[test]
fn ipv6_routing_header_final_destination_is_used_for_checksums() {
    // A type-0 routing header with one address left: the UDP checksum is computed against the
    // final destination (RFC 8200 sec. 8.1), not the header's current destination.
    let final_dst = Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 9);
    let (_, seg) = l4_segment(A6.into(), final_dst.into(), L4Spec::Udp(1, 2), b"routed");
    let mut rh = vec![protocol::UDP, 2, 0, 1, 0, 0, 0, 0];
    rh.extend_from_slice(&final_dst.octets());
    let mut payload = rh.clone();
    payload.extend_from_slice(&seg);
    let ip = ip_packet(A6.into(), B6.into(), protocol::IPV6_ROUTE, &payload, &[]);
    let f = ip_frame(None, &ip);
    let opts = ParseOptions {
        verify_l4_checksum: true,
        ..Default::default()
    };
    let pf = parse_frame_with(&f, &opts).unwrap();
    assert_eq!(pf.dst_addr(), Some(IpAddr::V6(B6)));
    assert_eq!(
        pf.ip().unwrap().l4,
        L4::Udp {
            src_port: 1,
            dst_port: 2,
            len: 14
        }
    );
    let up = Ipv6Packet::new_checked(&ip[..])
        .unwrap()
        .upper_layer()
        .unwrap();
    assert_eq!(up.final_dst, Some(final_dst));
    // With segments left 0 the header's destination is final.
    let mut f0 = f.clone();
    f0[14 + 40 + 3] = 0;
    assert_eq!(
        parse_frame_with(&f0, &opts).unwrap_err().label(),
        "udp_bad_checksum"
    );
    // SRv6 (type 4): segment list[0] is the final segment.
    let mut srh = vec![protocol::UDP, 2, 4, 1, 0, 0, 0, 0];
    srh.extend_from_slice(&final_dst.octets());
    let mut payload = srh;
    payload.extend_from_slice(&seg);
    let ip = ip_packet(A6.into(), B6.into(), protocol::IPV6_ROUTE, &payload, &[]);
    assert!(parse_frame_with(&ip_frame(None, &ip), &opts).is_ok());
}
