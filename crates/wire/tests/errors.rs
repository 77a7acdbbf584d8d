//! The 5G and error-message builders: the PDU Session Container round trip, ICMP / ICMPv6
//! errors (checksums verified by an independent computation, quotes, refusals) and the GTP-U
//! Error Indication.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sb_wire::icmp::{error_in_place, ErrorMessage, Refused};
use sb_wire::{
    parse_frame, EthernetAddress, FrameKind, GtpuPacket, GtpuTunnel, OuterIp, PacketBuilder,
    PduSession,
};

/// The Internet checksum, written here from RFC 1071 without the crate's code.
fn rfc1071(chunks: &[&[u8]]) -> u16 {
    let mut bytes = Vec::new();
    for c in chunks {
        bytes.extend_from_slice(c);
    }
    if bytes.len() % 2 == 1 {
        bytes.push(0);
    }
    let mut sum: u32 = 0;
    for w in bytes.chunks(2) {
        sum += u32::from(w[0]) << 8 | u32::from(w[1]);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

const MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const ROUTER4: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const ROUTER6: Ipv6Addr = Ipv6Addr::new(0xfd73, 0x6200, 0, 0, 0, 0, 0, 1);

/// A frame from `src` to `dst` with `payload` UDP bytes, at offset 128 of a 4096-byte buffer;
/// returns the buffer, the IP packet's start and length.
fn packet(src: IpAddr, dst: IpAddr, payload: usize, df: bool) -> (Vec<u8>, usize, usize) {
    let b = PacketBuilder::udp(MAC, MAC, src, dst, 443, 5000);
    let mut buf = vec![0u8; 4096];
    let data: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    let n = b.build(&data, &mut buf[128..]).unwrap();
    if src.is_ipv4() {
        // PacketBuilder sets no DF: set it when asked, and fix the header checksum.
        if df {
            buf[128 + 14 + 6] |= 0x40;
        }
        buf[128 + 14 + 10..128 + 14 + 12].fill(0);
        let c = rfc1071(&[&buf[128 + 14..128 + 34]]);
        buf[128 + 14 + 10..128 + 14 + 12].copy_from_slice(&c.to_be_bytes());
    }
    (buf, 128 + 14, n - 14)
}

#[test]
fn pdu_session_container_round_trips() {
    for (qfi, rqi) in [(1u8, false), (9, true), (63, false)] {
        let c = PduSession::downlink(qfi, rqi);
        let h = c.ext_header();
        assert_eq!(h[0], 1, "length 1 (4 bytes)");
        assert_eq!(h[1] >> 4, PduSession::DL);
        assert_eq!(h[2], u8::from(rqi) << 6 | qfi);
        assert_eq!(h[3], 0, "no next extension");
        assert_eq!(PduSession::parse(&h[1..3]), Some(c));
        // In a G-PDU: 44 outer bytes, the container found again, the inner packet intact.
        let (buf, s, n) = packet(
            Ipv4Addr::new(203, 0, 113, 5).into(),
            Ipv4Addr::new(100, 64, 0, 9).into(),
            100,
            true,
        );
        let inner = buf[s..s + n].to_vec();
        let t = GtpuTunnel {
            pdu_session: Some(c),
            ..GtpuTunnel::new(
                MAC,
                MAC,
                OuterIp::V4 {
                    src: Ipv4Addr::new(10, 2, 0, 1),
                    dst: Ipv4Addr::new(10, 2, 0, 2),
                },
                0x1234,
            )
        };
        assert_eq!(t.header_len(), 14 + 44);
        let mut out = vec![0u8; 2048];
        let len = t.encap_into(&inner, &mut out).unwrap();
        let f = &out[..len];
        let p = parse_frame(f).unwrap();
        let FrameKind::Gtpu(g) = p.kind else {
            panic!("G-PDU")
        };
        assert_eq!(g.first_ext_type, Some(0x85));
        assert_eq!(f[14 + 28] & 0x07, 0x04, "E set, S and PN clear");
        let gp = GtpuPacket::new_checked(&f[g.gtpu_offset..]).unwrap();
        assert_eq!(gp.pdu_session(), Some(c));
        assert_eq!(gp.length() as usize, 8 + inner.len());
        assert_eq!(g.inner.unwrap().packet, &inner[..]);
    }
    // An uplink container (PDU type 1) with QMP and a delay field: the QFI is read, the
    // new IE flag is not taken for an RQI.
    let ul = PduSession::parse(&[0x18, 0x45, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    assert_eq!((ul.pdu_type, ul.qfi, ul.rqi), (PduSession::UL, 5, false));
    assert_eq!(PduSession::parse(&[0x10]), None);
}

#[test]
fn icmpv4_errors_quote_the_packet_with_good_checksums() {
    let server: IpAddr = Ipv4Addr::new(203, 0, 113, 5).into();
    let ue: IpAddr = Ipv4Addr::new(100, 64, 0, 9).into();
    for (msg, want) in [
        (
            ErrorMessage::TooBig { mtu: 1456 },
            (3u8, 4u8, [0u8, 0, 0x05, 0xb0]),
        ),
        (ErrorMessage::TimeExceeded, (11, 0, [0, 0, 0, 0])),
    ] {
        let (mut buf, s, n) = packet(server, ue, 1472, true);
        let orig = buf[s..s + n].to_vec();
        let (e, len) = error_in_place(&mut buf, s, n, ROUTER4, ROUTER6, msg).unwrap();
        assert_eq!(e, s - 28, "headers written in front, the packet not moved");
        assert_eq!(
            len,
            20 + 8 + 28,
            "IPv4 header + ICMP header + quote of 20 + 8"
        );
        let ip = &buf[e..e + len];
        assert_eq!(ip[0], 0x45);
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]) as usize, len);
        assert_eq!(ip[9], 1, "ICMP");
        assert_eq!(&ip[12..16], &ROUTER4.octets());
        assert_eq!(&ip[16..20], &orig[12..16], "back to the sender");
        assert_eq!(rfc1071(&[&ip[..20]]), 0, "IPv4 header checksum");
        let icmp = &ip[20..];
        assert_eq!((icmp[0], icmp[1]), (want.0, want.1));
        assert_eq!(&icmp[4..8], &want.2);
        assert_eq!(rfc1071(&[icmp]), 0, "ICMP checksum");
        assert_eq!(&icmp[8..], &orig[..28], "quote: the header and 8 bytes");
    }
}

#[test]
fn icmpv6_errors_fit_1280_bytes_with_good_checksums() {
    let server: IpAddr = "2001:db8:ffff::5".parse::<Ipv6Addr>().unwrap().into();
    let ue: IpAddr = "2001:db8:45::9".parse::<Ipv6Addr>().unwrap().into();
    for (payload, msg) in [
        (1600, ErrorMessage::TooBig { mtu: 1456 }),
        (100, ErrorMessage::TimeExceeded),
    ] {
        let (mut buf, s, n) = packet(server, ue, payload, false);
        let orig = buf[s..s + n].to_vec();
        let (e, len) = error_in_place(&mut buf, s, n, ROUTER4, ROUTER6, msg).unwrap();
        assert_eq!(len, (n + 48).min(1280));
        let ip = &buf[e..e + len];
        assert_eq!(ip[6], 58, "ICMPv6");
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]) as usize, len - 40);
        assert_eq!(&ip[8..24], &ROUTER6.octets());
        assert_eq!(&ip[24..40], &orig[8..24], "back to the sender");
        let icmp = &ip[40..];
        let plen = (icmp.len() as u32).to_be_bytes();
        let pseudo = [&ip[8..40], &plen[..], &[0, 0, 0, 58][..], icmp];
        assert_eq!(
            rfc1071(&pseudo),
            0,
            "ICMPv6 checksum with the pseudo-header"
        );
        match msg {
            ErrorMessage::TooBig { mtu } => {
                assert_eq!((icmp[0], icmp[1]), (2, 0));
                assert_eq!(&icmp[4..8], &u32::from(mtu).to_be_bytes());
            }
            ErrorMessage::TimeExceeded => assert_eq!((icmp[0], icmp[1]), (3, 0)),
        }
        assert_eq!(&icmp[8..], &orig[..len - 48]);
    }
}

#[test]
fn errors_are_refused_where_the_rfcs_say_so() {
    let server: IpAddr = Ipv4Addr::new(203, 0, 113, 5).into();
    let ue: IpAddr = Ipv4Addr::new(100, 64, 0, 9).into();
    let te = ErrorMessage::TimeExceeded;
    // To a multicast or broadcast destination, from an unspecified source.
    for (s, d) in [
        (server, Ipv4Addr::new(224, 0, 0, 5).into()),
        (server, Ipv4Addr::BROADCAST.into()),
        (Ipv4Addr::UNSPECIFIED.into(), ue),
    ] {
        let (mut buf, st, n) = packet(s, d, 10, false);
        assert_eq!(
            error_in_place(&mut buf, st, n, ROUTER4, ROUTER6, te),
            Err(Refused::NotUnicast)
        );
    }
    // A non-first fragment.
    let (mut buf, st, n) = packet(server, ue, 10, false);
    buf[st + 7] = 0x10;
    assert_eq!(
        error_in_place(&mut buf, st, n, ROUTER4, ROUTER6, te),
        Err(Refused::Fragment)
    );
    // An ICMP error about an ICMP error.
    let (mut buf, st, n) = packet(server, ue, 100, false);
    let (e, len) = error_in_place(&mut buf, st, n, ROUTER4, ROUTER6, te).unwrap();
    assert_eq!(
        error_in_place(&mut buf, e, len, ROUTER4, ROUTER6, te),
        Err(Refused::AboutIcmpError)
    );
    // No headroom.
    let (mut buf, st, n) = packet(server, ue, 10, false);
    assert_eq!(
        error_in_place(&mut buf[st - 10..], 10, n, ROUTER4, ROUTER6, te),
        Err(Refused::NoHeadroom)
    );
}

#[test]
fn error_indication_names_the_teid_and_our_address() {
    let (buf, s, n) = packet(
        Ipv4Addr::new(100, 64, 0, 9).into(),
        Ipv4Addr::new(203, 0, 113, 5).into(),
        50,
        false,
    );
    let t = GtpuTunnel {
        udp_src_port: 40001,
        ..GtpuTunnel::new(
            EthernetAddress([2, 0, 0, 0, 0, 7]),
            MAC,
            OuterIp::V4 {
                src: Ipv4Addr::new(10, 2, 0, 2),
                dst: Ipv4Addr::new(10, 2, 0, 1),
            },
            0xdead_beef,
        )
    };
    let mut f = vec![0u8; 2048];
    let len = t.encap_into(&buf[s..s + n], &mut f).unwrap();
    let mut out = [0u8; 256];
    let m = sb_wire::error_indication(&f[..len], &mut out)
        .unwrap()
        .unwrap();
    let p = parse_frame(&out[..m]).unwrap();
    assert_eq!(&out[..6], &[2, 0, 0, 0, 0, 7], "MACs swapped");
    let FrameKind::Gtpu(g) = p.kind else {
        panic!("GTP-U on 2152")
    };
    assert_eq!(g.outer.src_addr, IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)));
    assert_eq!(g.outer.dst_addr, IpAddr::V4(Ipv4Addr::new(10, 2, 0, 2)));
    assert_eq!((g.msg_type, g.teid, g.seq_number), (26, 0, Some(0)));
    let gp = GtpuPacket::new_checked(&out[g.gtpu_offset..m]).unwrap();
    let e: Vec<_> = gp.extensions().collect();
    assert_eq!(
        (e.len(), e[0].ext_type, e[0].content),
        (1, 0x40, &40001u16.to_be_bytes()[..])
    );
    assert_eq!(
        gp.payload(),
        &[16, 0xde, 0xad, 0xbe, 0xef, 133, 0, 4, 10, 2, 0, 1][..]
    );
    // Not a G-PDU: no indication.
    assert_eq!(
        sb_wire::error_indication(&buf[128..128 + 14 + n], &mut out).unwrap(),
        None
    );
}

#[test]
fn end_marker_parses_back_on_the_old_tunnel() {
    for outer in [
        OuterIp::V4 {
            src: Ipv4Addr::new(10, 2, 0, 1),
            dst: Ipv4Addr::new(10, 2, 7, 9),
        },
        OuterIp::V6 {
            src: "2001:db8:ff::1".parse().unwrap(),
            dst: "2001:db8:ff::9".parse().unwrap(),
        },
    ] {
        let mut out = [0u8; 128];
        let n = sb_wire::end_marker(
            EthernetAddress([2, 0, 0, 0, 0, 7]),
            MAC,
            outer,
            0x0102_0304,
            &mut out,
        )
        .unwrap();
        let ip = if matches!(outer, OuterIp::V4 { .. }) {
            20
        } else {
            40
        };
        assert_eq!(n, 14 + ip + 8 + 8, "headers only, no IEs");
        let p = parse_frame(&out[..n]).unwrap();
        let FrameKind::Gtpu(g) = p.kind else {
            panic!("GTP-U on 2152")
        };
        let (s, d) = match outer {
            OuterIp::V4 { src, dst } => (IpAddr::V4(src), IpAddr::V4(dst)),
            OuterIp::V6 { src, dst } => (IpAddr::V6(src), IpAddr::V6(dst)),
        };
        assert_eq!((g.outer.src_addr, g.outer.dst_addr), (s, d));
        assert_eq!((g.msg_type, g.teid, g.seq_number), (254, 0x0102_0304, None));
        assert!(g.inner.is_none(), "not a G-PDU");
        let gp = GtpuPacket::new_checked(&out[g.gtpu_offset..n]).unwrap();
        assert_eq!(gp.payload(), &[] as &[u8]);
        // Independently: flags 0x30 (version 1, PT 1), type 254, length 0, the TEID.
        assert_eq!(&out[g.gtpu_offset..n], &[0x30, 254, 0, 0, 1, 2, 3, 4][..]);
        // The UDP checksum checks out (RFC 1071 over the pseudo-header).
        let udp = &out[14 + ip..n];
        let sum = match (s, d) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                rfc1071(&[&s.octets(), &d.octets(), &[0, 17, 0, 16], udp])
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                rfc1071(&[&s.octets(), &d.octets(), &[0, 0, 0, 16, 0, 0, 0, 17], udp])
            }
            _ => unreachable!(),
        };
        assert_eq!(sum, 0, "UDP checksum");
        assert_eq!(&udp[..4], &[0x08, 0x68, 0x08, 0x68], "2152 -> 2152");
    }
    // A buffer too small is an error, not a panic.
    let mut small = [0u8; 40];
    assert!(sb_wire::end_marker(
        MAC,
        MAC,
        OuterIp::V4 {
            src: Ipv4Addr::new(10, 2, 0, 1),
            dst: Ipv4Addr::new(10, 2, 7, 9),
        },
        1,
        &mut small
    )
    .is_err());
}
