//! Property tests: every parser on random bytes and on mutated valid frames (the same entry
//! points the fuzz targets call), round trips (emit then parse gives the same repr), and
//! `parse_frame` on randomly generated valid frames recovers what was built.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use proptest::prelude::*;
use sb_wire::gtpu::GtpuExt;
use sb_wire::*;

fn mac() -> impl Strategy<Value = EthernetAddress> {
    any::<[u8; 6]>().prop_map(EthernetAddress)
}

fn vlan() -> impl Strategy<Value = Option<VlanTag>> {
    proptest::option::of(
        (0u8..8, any::<bool>(), 0u16..4096).prop_map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
    )
}

fn addr_pair(v6: bool) -> BoxedStrategy<(IpAddr, IpAddr)> {
    if v6 {
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b))))
            .boxed()
    } else {
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b))))
            .boxed()
    }
}

fn l4() -> impl Strategy<Value = L4Spec> {
    prop_oneof![
        (any::<u16>(), any::<u16>())
            .prop_filter("not GTP-U", |(_, d)| *d != 2152)
            .prop_map(|(s, d)| L4Spec::Udp(s, d)),
        (any::<u16>(), any::<u16>(), 0u16..0x200).prop_map(|(s, d, f)| L4Spec::Tcp(
            s,
            d,
            TcpFlags(f)
        )),
        (any::<u16>(), any::<u16>())
            .prop_map(|(ident, seq)| L4Spec::Icmp(IcmpRepr::EchoRequest { ident, seq })),
        Just(L4Spec::Raw(47)),
    ]
}

fn exts6() -> impl Strategy<Value = Vec<Ext6>> {
    (
        proptest::option::of(0u8..3),
        proptest::collection::vec(
            prop_oneof![
                (0u8..3).prop_map(Ext6::Routing),
                (0u8..3).prop_map(Ext6::DestOpts),
                (1u8..5).prop_map(Ext6::Auth)
            ],
            0..3,
        ),
    )
        .prop_map(|(hbh, rest)| hbh.map(Ext6::HopByHop).into_iter().chain(rest).collect())
}

#[derive(Debug, Clone)]
struct PacketSpec {
    v6: bool,
    addrs: (IpAddr, IpAddr),
    l4: L4Spec,
    exts: Vec<Ext6>,
    payload: Vec<u8>,
}

fn packet_spec() -> impl Strategy<Value = PacketSpec> {
    any::<bool>()
        .prop_flat_map(|v6| {
            (
                Just(v6),
                addr_pair(v6),
                l4(),
                exts6(),
                proptest::collection::vec(any::<u8>(), 0..48),
            )
        })
        .prop_map(|(v6, addrs, l4, exts, payload)| PacketSpec {
            v6,
            addrs,
            l4,
            exts: if v6 { exts } else { vec![] },
            payload,
        })
}

impl PacketSpec {
    fn build(&self) -> Vec<u8> {
        let (p, seg) = l4_segment(self.addrs.0, self.addrs.1, self.l4, &self.payload);
        // Routing headers here have segments left 0, so the header's destination is final.
        ip_packet(self.addrs.0, self.addrs.1, p, &seg, &self.exts)
    }
    fn five_tuple(&self) -> FiveTuple {
        let (proto, sp, dp) = match self.l4 {
            L4Spec::Udp(s, d) => (17, s, d),
            L4Spec::Tcp(s, d, _) => (6, s, d),
            L4Spec::Icmp(_) => (if self.v6 { 58 } else { 1 }, 0, 0),
            L4Spec::Raw(p) => (p, 0, 0),
        };
        FiveTuple {
            protocol: proto,
            src_addr: self.addrs.0,
            src_port: sp,
            dst_addr: self.addrs.1,
            dst_port: dp,
        }
    }
}

#[derive(Debug, Clone)]
struct GtpuSpec {
    teid: u32,
    seq: Option<u16>,
    npdu: Option<u8>,
    exts: Vec<(u8, Vec<u8>)>,
    outer6: bool,
    outer: (IpAddr, IpAddr),
}

fn gtpu_spec() -> impl Strategy<Value = GtpuSpec> {
    (
        any::<u32>(),
        proptest::option::of(any::<u16>()),
        proptest::option::of(any::<u8>()),
        proptest::collection::vec(
            (1u8..=255, (0usize..3).prop_map(|n| vec![0xa5u8; 4 * n + 2])),
            0..3,
        ),
        any::<bool>(),
    )
        .prop_flat_map(|(teid, seq, npdu, exts, outer6)| {
            (Just((teid, seq, npdu, exts, outer6)), addr_pair(outer6))
        })
        .prop_map(|((teid, seq, npdu, exts, outer6), outer)| GtpuSpec {
            teid,
            seq,
            npdu,
            exts,
            outer6,
            outer,
        })
}

#[derive(Debug, Clone)]
struct FrameSpec {
    vlan: Option<VlanTag>,
    packet: PacketSpec,
    gtpu: Option<GtpuSpec>,
}

fn frame_spec() -> impl Strategy<Value = FrameSpec> {
    (vlan(), packet_spec(), proptest::option::of(gtpu_spec()))
        .prop_map(|(vlan, packet, gtpu)| FrameSpec { vlan, packet, gtpu })
}

impl FrameSpec {
    fn build(&self) -> Vec<u8> {
        let inner = self.packet.build();
        let Some(g) = &self.gtpu else {
            return ip_frame(self.vlan, &inner);
        };
        let parts: Vec<GtpuExt<'_>> = g
            .exts
            .iter()
            .map(|(t, c)| GtpuExt {
                ext_type: *t,
                content: c,
            })
            .collect();
        let mut chain = vec![0u8; 64];
        let ext = if parts.is_empty() {
            None
        } else {
            let (first, n) = gtpu::write_ext_chain(&parts, &mut chain).unwrap();
            Some((first, &chain[..n]))
        };
        let repr = GtpuRepr {
            msg_type: 255,
            teid: g.teid,
            seq_number: g.seq,
            npdu_number: g.npdu,
            extensions: ext,
        };
        let msg = gtpu_message(&repr, &inner);
        let (p, seg) = l4_segment(g.outer.0, g.outer.1, L4Spec::Udp(2152, 2152), &msg);
        ip_frame(self.vlan, &ip_packet(g.outer.0, g.outer.1, p, &seg, &[]))
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        sb_wire::fuzzing::all(&data);
    }

    #[test]
    fn random_frames_parse_to_what_was_built(spec in frame_spec()) {
        let f = spec.build();
        let opts = ParseOptions { verify_l4_checksum: true, ..ParseOptions::default() };
        let p = parse_frame_with(&f, &opts).map_err(|e| TestCaseError::fail(format!("{e} {}", e.label())))?;
        prop_assert_eq!(p.eth.vlan, spec.vlan);
        prop_assert_eq!(p.five_tuple(), Some(spec.packet.five_tuple()));
        prop_assert_eq!(p.dst_addr(), Some(spec.packet.addrs.1));
        match (&spec.gtpu, &p.kind) {
            (None, FrameKind::Ip(_)) => {}
            (Some(g), FrameKind::Gtpu(info)) => {
                prop_assert_eq!(info.teid, g.teid);
                prop_assert_eq!(info.seq_number, g.seq);
                prop_assert_eq!(info.npdu_number, g.npdu);
                prop_assert_eq!(info.first_ext_type, g.exts.first().map(|e| e.0));
                prop_assert_eq!(info.outer.dst_addr, g.outer.1);
                prop_assert_eq!(info.outer.is_ipv6(), g.outer6);
                let d = decapsulate(&f).unwrap();
                prop_assert_eq!(d.inner, &spec.packet.build()[..]);
            }
            (g, k) => prop_assert!(false, "spec {:?} parsed as {:?}", g, k),
        }
        sb_wire::fuzzing::all(&f);
    }

    #[test]
    fn mutated_frames_never_panic(
        spec in frame_spec(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let mut f = spec.build();
        for (i, b) in edits {
            let i = i.index(f.len());
            f[i] = b;
        }
        if let Some(c) = cut {
            let c = c.index(f.len());
            f.truncate(c);
        }
        sb_wire::fuzzing::all(&f);
    }

    #[test]
    fn ethernet_round_trip(src in mac(), dst in mac(), vlan in vlan(), et in any::<u16>().prop_filter("not a tag", |t| *t != 0x8100)) {
        let r = EthernetRepr { src_addr: src, dst_addr: dst, vlan, ethertype: EtherType(et) };
        let mut b = [0u8; 18];
        r.emit(&mut b).unwrap();
        let f = EthernetFrame::new_checked(&b[..r.header_len()]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&f), r);
    }

    #[test]
    fn arp_round_trip(op in any::<u16>(), s in mac(), t in mac(), si in any::<u32>(), ti in any::<u32>()) {
        let r = ArpRepr { operation: op.into(), sender_hw: s, sender_ip: si.into(), target_hw: t, target_ip: ti.into() };
        let mut b = [0u8; 28];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(ArpRepr::parse(&ArpPacket::new_checked(&b[..]).unwrap()), r);
    }

    #[test]
    fn ipv4_round_trip(
        (s, d) in addr_pair(false), proto in any::<u8>(), len in 0usize..200, ttl in any::<u8>(), tos in any::<u8>(),
        ident in any::<u16>(), df in any::<bool>(), mf in any::<bool>(), off in 0u16..8192,
    ) {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (s, d) else { unreachable!() };
        let r = Ipv4Repr { ttl, tos, ident, dont_frag: df, more_frags: mf, frag_offset: off * 8, ..Ipv4Repr::new(s, d, proto, len) };
        let mut b = vec![0u8; 20 + len];
        r.emit(&mut b).unwrap();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        prop_assert_eq!(Ipv4Repr::parse(&p, true).unwrap(), r);
    }

    #[test]
    fn ipv6_round_trip((s, d) in addr_pair(true), nh in any::<u8>(), len in 0usize..200, hl in any::<u8>(), tc in any::<u8>(), fl in 0u32..(1 << 20)) {
        let (IpAddr::V6(s), IpAddr::V6(d)) = (s, d) else { unreachable!() };
        let r = Ipv6Repr { hop_limit: hl, traffic_class: tc, flow_label: fl, ..Ipv6Repr::new(s, d, nh, len) };
        let mut b = vec![0u8; 40 + len];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(Ipv6Repr::parse(&Ipv6Packet::new_checked(&b[..]).unwrap()), r);
    }

    #[test]
    fn udp_tcp_icmp_round_trip(
        v6 in any::<bool>(), sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), ack in any::<u32>(),
        flags in 0u16..0x200, win in any::<u16>(), urg in any::<u16>(), payload in proptest::collection::vec(any::<u8>(), 0..64),
        icmp_type in any::<u8>(), code in any::<u8>(), rest in any::<[u8; 4]>(),
    ) {
        let (s, d) = if v6 {
            (IpAddr::V6(Ipv6Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)))
        } else {
            (IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)), IpAddr::V4(Ipv4Addr::new(5, 6, 7, 8)))
        };
        let mut b = vec![0u8; 20 + payload.len()];
        b[8..8 + payload.len()].copy_from_slice(&payload);
        let u = UdpRepr { src_port: sp, dst_port: dp };
        u.emit(&mut b[..8 + payload.len()], s, d, UdpChecksum::Compute).unwrap();
        prop_assert_eq!(UdpRepr::parse(&UdpPacket::new_checked(&b[..8 + payload.len()]).unwrap(), Some((s, d))), Ok(u));
        let t = TcpRepr { src_port: sp, dst_port: dp, seq_number: seq, ack_number: ack, flags: TcpFlags(flags), window: win, urgent: urg };
        t.emit(&mut b, s, d).unwrap();
        prop_assert_eq!(TcpRepr::parse(&TcpPacket::new_checked(&b[..]).unwrap(), Some((s, d))), Ok(t));
        let ver = if v6 { IcmpVersion::V6 } else { IcmpVersion::V4 };
        let echo = if v6 { [128u8, 129] } else { [8, 0] };
        let i = if code == 0 && echo.contains(&icmp_type) {
            IcmpRepr::EchoReply { ident: sp, seq: dp }
        } else {
            IcmpRepr::Other { msg_type: icmp_type, code, rest }
        };
        i.emit(&mut b, ver, Some((s, d))).unwrap();
        let p = IcmpPacket::new_checked(&b[..]).unwrap();
        prop_assert!(p.verify_checksum(ver, Some((s, d))));
        prop_assert_eq!(IcmpRepr::parse(&p, ver), i);
    }

    #[test]
    fn gtpu_round_trip(
        mt in any::<u8>(), teid in any::<u32>(), seq in proptest::option::of(any::<u16>()), npdu in proptest::option::of(any::<u8>()),
        exts in proptest::collection::vec((1u8..=255, (0usize..4).prop_map(|n| vec![0x5au8; 4 * n + 2])), 0..4),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let parts: Vec<GtpuExt<'_>> = exts.iter().map(|(t, c)| GtpuExt { ext_type: *t, content: c }).collect();
        let mut chain = vec![0u8; 128];
        let ext = if parts.is_empty() { None } else {
            let (first, n) = gtpu::write_ext_chain(&parts, &mut chain).unwrap();
            Some((first, &chain[..n]))
        };
        let r = GtpuRepr { msg_type: mt, teid, seq_number: seq, npdu_number: npdu, extensions: ext };
        let m = gtpu_message(&r, &payload);
        let p = GtpuPacket::new_checked(&m[..]).unwrap();
        prop_assert_eq!(GtpuRepr::parse(&p), r);
        prop_assert_eq!(p.payload(), &payload[..]);
        let got: Vec<(u8, usize)> = p.extensions().map(|e| (e.ext_type, e.content.len())).collect();
        let want: Vec<(u8, usize)> = exts.iter().map(|(t, c)| (*t, c.len())).collect();
        prop_assert_eq!(got, want);
    }
}
