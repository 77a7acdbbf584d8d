//! The LTE application as a 5G gNB and the Internet expect it, through `Engine::process` on
//! in-memory batches (`SimCluster`): PDU Session Containers down and up, ICMP errors for
//! packets too big or out of TTL (down and up), GTP-U Error Indications, the error rate limit,
//! and broadcast / multicast kept off the fabric.

use sb_engine::cluster::{generate_tunnels, sim_mac, sim_ran_addr, SimCluster};
use sb_engine::lte::Tunnel;
use sb_engine::{Arch, Drop, PortId};
use sb_wire::{
    decapsulate, parse_frame, EthernetAddress, FrameKind, GtpuPacket, GtpuTunnel, OuterIp,
    PacketBuilder, PduSession,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const NODES: u16 = 4;
const SEED: u64 = 9;

fn mac(x: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, x])
}

fn server_for(ue: IpAddr) -> IpAddr {
    match ue {
        IpAddr::V4(_) => Ipv4Addr::new(203, 0, 113, 5).into(),
        IpAddr::V6(_) => "2001:db8:ffff::5".parse::<Ipv6Addr>().unwrap().into(),
    }
}

/// A downstream frame to `ue` with an IP packet of `ip_len` bytes; `df` sets IPv4's DF.
fn downstream(ue: IpAddr, ttl: u8, ip_len: usize, df: bool) -> Vec<u8> {
    let b = PacketBuilder {
        ttl,
        ..PacketBuilder::udp(mac(1), mac(2), server_for(ue), ue, 443, 5000)
    };
    let payload = vec![0x5a; ip_len - b.header_len() + 14];
    let mut out = vec![0u8; b.header_len() + payload.len()];
    let n = b.build(&payload, &mut out).unwrap();
    out.truncate(n);
    if df && ue.is_ipv4() {
        out[14 + 6] |= 0x40;
        out[24..26].fill(0);
        let c = sb_wire::checksum::checksum(&out[14..34]);
        out[24..26].copy_from_slice(&c.to_be_bytes());
    }
    out
}

/// A G-PDU from `t`'s UE (TTL `ttl`) with an optional uplink container naming `qfi`; the outer
/// source is some N3 address that is not `t.enb`.
fn uplink(t: &Tunnel, ttl: u8, qfi: Option<u8>) -> Vec<u8> {
    let b = PacketBuilder {
        ttl,
        ..PacketBuilder::udp(mac(3), mac(4), t.ue, server_for(t.ue), 5000, 443)
    };
    let mut inner = vec![0u8; b.header_len() + 20];
    let n = b.build(&[7; 20], &mut inner).unwrap();
    let ip = inner[14..n].to_vec();
    let tunnel = GtpuTunnel {
        pdu_session: qfi.map(|q| PduSession {
            pdu_type: PduSession::UL,
            qfi: q,
            rqi: false,
        }),
        ..GtpuTunnel::new(
            mac(5),
            EthernetAddress(sim_mac(PortId::Ran, t.node, false)),
            OuterIp::V4 {
                src: Ipv4Addr::new(198, 51, 100, 77),
                dst: sim_ran_addr(t.node),
            },
            t.uplink_teid(),
        )
    };
    let mut f = vec![0u8; tunnel.header_len() + ip.len()];
    tunnel.encap_into(&ip, &mut f).unwrap();
    f
}

/// Every other tunnel is a 5G QoS flow (QFI 1..=63, RQI on some).
fn tunnels() -> Vec<Tunnel> {
    generate_tunnels(200, NODES.into(), SEED, 4)
        .into_iter()
        .enumerate()
        .map(|(i, t)| Tunnel {
            qfi: if i % 2 == 1 { 1 + (i % 63) as u8 } else { 0 },
            rqi: i % 4 == 1,
            ..t
        })
        .collect()
}

fn cluster(ts: &[Tunnel]) -> SimCluster {
    SimCluster::new(Arch::ScaleBricks, ts, NODES, SEED, 32).unwrap()
}

#[test]
fn downlink_g_pdus_carry_the_flows_qfi() {
    let ts = tunnels();
    let mut c = cluster(&ts);
    for t in &ts {
        let f = downstream(t.ue, 64, 100, true);
        c.inject(0, PortId::Inet, &[f]);
        let out = c.ran_out[usize::from(t.node)].last().unwrap();
        let d = decapsulate(out).unwrap();
        assert_eq!((d.teid, d.inner.len()), (t.teid, 100));
        let p = parse_frame(out).unwrap();
        let FrameKind::Gtpu(g) = p.kind else {
            panic!("G-PDU")
        };
        let gp = GtpuPacket::new_checked(&out[g.gtpu_offset..]).unwrap();
        if t.qfi == 0 {
            assert_eq!(g.first_ext_type, None, "LTE: no container");
            assert_eq!(d.inner_offset, 14 + 36);
        } else {
            assert_eq!(gp.pdu_session(), Some(PduSession::downlink(t.qfi, t.rqi)));
            assert_eq!(d.inner_offset, 14 + 44);
        }
    }
}

#[test]
fn too_big_downlink_packets_get_frag_needed_or_packet_too_big() {
    let ts = tunnels();
    let v4_qfi = ts.iter().find(|t| t.ue.is_ipv4() && t.qfi != 0).unwrap();
    let v4_lte = ts.iter().find(|t| t.ue.is_ipv4() && t.qfi == 0).unwrap();
    let v6 = ts.iter().find(|t| t.ue.is_ipv6()).unwrap();
    let mut c = cluster(&ts);
    // The largest that fits (ran MTU 1500 here) arrives; one byte more gets an error, from
    // the handling node's inet, back to the sender, with the MTU that fits.
    for (t, fits) in [
        (v4_qfi, 1456),
        (v4_lte, 1464),
        (v6, if v6.qfi == 0 { 1464 } else { 1456 }),
    ] {
        c.inject(0, PortId::Inet, &[downstream(t.ue, 64, fits, true)]);
        let last = c.ran_out[usize::from(t.node)].last().unwrap();
        assert_eq!(decapsulate(last).unwrap().inner.len(), fits);
        assert_eq!(last.len(), 14 + 1500);
        let before = c.counters();
        let big = downstream(t.ue, 64, fits + 1, true);
        c.inject(0, PortId::Inet, std::slice::from_ref(&big));
        let after = c.counters();
        assert_eq!(after.dropped(Drop::Mtu), before.dropped(Drop::Mtu) + 1);
        assert_eq!(after.icmp_errors, before.icmp_errors + 1);
        let e = c.inet_out[usize::from(t.node)].pop().unwrap();
        assert_eq!(&e[..6], &sim_mac(PortId::Inet, t.node, true));
        let p = parse_frame(&e).unwrap();
        let ip = p.ip().unwrap();
        assert_eq!(ip.dst_addr, server_for(t.ue));
        let m = &ip.packet[ip.l4_offset - ip.offset..];
        if t.ue.is_ipv4() {
            assert_eq!((m[0], m[1]), (3, 4));
            assert_eq!(u16::from_be_bytes([m[6], m[7]]) as usize, fits);
            assert_eq!(sb_wire::checksum::checksum(m), 0);
            assert_eq!(&m[8..], &big[14..14 + 28]);
        } else {
            assert_eq!((m[0], m[1]), (2, 0));
            assert_eq!(u32::from_be_bytes([m[4], m[5], m[6], m[7]]) as usize, fits);
            // As much of the packet as keeps the error within 1280 bytes.
            assert_eq!(ip.packet.len(), 1280);
            assert_eq!(&m[8..], &big[14..14 + 1232]);
        }
    }
}

#[test]
fn downlink_ttl_expiry_gets_time_exceeded_from_the_ingress_node() {
    let ts = tunnels();
    let mut c = cluster(&ts);
    let t4 = ts.iter().find(|t| t.ue.is_ipv4()).unwrap();
    let t6 = ts.iter().find(|t| t.ue.is_ipv6()).unwrap();
    c.inject(
        2,
        PortId::Inet,
        &[
            downstream(t4.ue, 1, 60, false),
            downstream(t6.ue, 1, 80, false),
        ],
    );
    let cn = c.counters();
    assert_eq!((cn.dropped(Drop::Ttl), cn.icmp_errors), (2, 2));
    let out = &c.inet_out[2];
    assert_eq!(out.len(), 2);
    let m4 = parse_frame(&out[0]).unwrap();
    let ip4 = m4.ip().unwrap();
    assert_eq!(
        ip4.src_addr,
        IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1)),
        "the inet address"
    );
    assert_eq!(ip4.packet[20], 11, "Time Exceeded");
    let m6 = parse_frame(&out[1]).unwrap();
    let ip6 = m6.ip().unwrap();
    assert_eq!(
        ip6.src_addr,
        IpAddr::V6(sb_engine::lte::default_icmp_src6(2))
    );
    assert_eq!(
        (ip6.packet[40], ip6.packet[41]),
        (3, 0),
        "ICMPv6 Time Exceeded"
    );
    // Never sent over the fabric.
    assert_eq!(cn.ports[PortId::Inet as usize].to_fabric, 0);
}

#[test]
fn uplink_containers_are_checked_against_the_flows_qfi() {
    let ts = tunnels();
    let mut c = cluster(&ts);
    let q = ts.iter().find(|t| t.ue.is_ipv4() && t.qfi != 0).unwrap();
    let lte = ts.iter().find(|t| t.ue.is_ipv4() && t.qfi == 0).unwrap();
    let cases = [
        (q, Some(q.qfi), true),
        (q, None, true),
        (q, Some(q.qfi % 63 + 1), false),
        (lte, Some(7), true),
        (lte, None, true),
    ];
    for (t, qfi, ok) in cases {
        let n = usize::from(t.node);
        let before = c.inet_out[n].len();
        c.inject(t.node, PortId::Ran, &[uplink(t, 64, qfi)]);
        assert_eq!(
            c.inet_out[n].len(),
            before + usize::from(ok),
            "{qfi:?} on {}",
            t.qfi
        );
    }
    assert_eq!(c.counters().dropped(Drop::QfiMismatch), 1);
    assert_eq!(c.counters().upstream, 4, "any outer source is accepted");
}

#[test]
fn uplink_ttl_expiry_sends_time_exceeded_down_the_ues_tunnel() {
    let ts = tunnels();
    let mut c = cluster(&ts);
    let t = ts.iter().find(|t| t.ue.is_ipv4() && t.qfi != 0).unwrap();
    let n = usize::from(t.node);
    let sent = uplink(t, 1, Some(t.qfi));
    c.inject(t.node, PortId::Ran, std::slice::from_ref(&sent));
    let cn = c.counters();
    assert_eq!(
        (cn.dropped(Drop::Ttl), cn.icmp_errors, cn.upstream),
        (1, 1, 0)
    );
    assert!(c.inet_out[n].is_empty());
    // The error to the UE leaves ran in the UE's own tunnel, with its container.
    let out = c.ran_out[n].last().unwrap();
    let d = decapsulate(out).unwrap();
    assert_eq!(d.teid, t.teid);
    assert_eq!(d.outer_dst, IpAddr::V4(t.enb));
    let inner = d.inner;
    assert_eq!(
        &inner[16..20],
        &match t.ue {
            IpAddr::V4(a) => a.octets(),
            _ => unreachable!(),
        }
    );
    assert_eq!(
        &inner[12..16],
        &sim_ran_addr(t.node).octets(),
        "from our N3 address"
    );
    assert_eq!(inner[8], 63, "TTL 64, decremented on the way down");
    assert_eq!((inner[20], inner[21]), (11, 0));
    assert_eq!(sb_wire::checksum::checksum(&inner[20..]), 0);
    let quoted = &sent[sent.len() - 48..][..28];
    assert_eq!(&inner[28..], quoted, "quotes the UE's packet");
}

#[test]
fn unknown_teids_get_error_indications_within_the_rate_limit() {
    let ts = tunnels();
    let mut c = cluster(&ts);
    let t = ts[0];
    let n = usize::from(t.node);
    c.engines[n].set_error_rate(10, 3);
    let bad = Tunnel {
        ul_teid: 0x7777_0001,
        ..t
    };
    let frames: Vec<Vec<u8>> = (0..5).map(|_| uplink(&bad, 64, None)).collect();
    c.inject(t.node, PortId::Ran, &frames);
    let cn = c.counters();
    assert_eq!(cn.dropped(Drop::UnknownTeid), 5, "every one is counted");
    assert_eq!((cn.error_indications, cn.errors_rate_limited), (3, 2));
    for f in &c.ran_out[n] {
        let p = parse_frame(f).unwrap();
        let FrameKind::Gtpu(g) = p.kind else {
            panic!("GTP-U")
        };
        assert_eq!((g.msg_type, g.teid), (26, 0));
        assert_eq!(
            g.outer.dst_addr,
            IpAddr::V4(Ipv4Addr::new(198, 51, 100, 77))
        );
        assert_eq!(g.outer.src_addr, IpAddr::V4(sim_ran_addr(t.node)));
    }
    // A tenth of a second later the bucket holds one more.
    c.engines[n].set_clock(100_000_000);
    c.inject(t.node, PortId::Ran, &frames[..2]);
    let cn = c.counters();
    assert_eq!((cn.error_indications, cn.errors_rate_limited), (4, 3));
}

#[test]
fn broadcast_and_multicast_never_cross_the_fabric() {
    let ts = tunnels();
    let mut c = cluster(&ts);
    let t = ts[0];
    let mut bcast_mac = downstream(t.ue, 64, 60, false);
    bcast_mac[..6].fill(0xff);
    let mut mcast_mac = downstream(t.ue, 64, 60, false);
    mcast_mac[..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0, 0, 5]);
    let frames = vec![
        bcast_mac,
        mcast_mac,
        downstream(Ipv4Addr::new(224, 0, 0, 5).into(), 64, 60, false),
        downstream(Ipv4Addr::BROADCAST.into(), 64, 60, false),
        downstream("ff02::1".parse::<Ipv6Addr>().unwrap().into(), 64, 80, false),
    ];
    for node in 0..NODES {
        c.inject(node, PortId::Inet, &frames);
    }
    let cn = c.counters();
    assert_eq!(cn.dropped(Drop::Multicast), 5 * u64::from(NODES));
    assert_eq!(cn.ports[PortId::Inet as usize].to_fabric, 0);
    assert_eq!(cn.ports[PortId::Fabric as usize].rx, 0);
    assert_eq!(cn.icmp_errors, 0);
}

/// A session whose gNB tunnel is not known yet (or idle) is an entry with downlink TEID 0 and
/// gNB 0.0.0.0: its uplink forwards, its downlink is dropped (`no_tunnel`), never tunnelled
/// to 0.0.0.0.
#[test]
fn an_entry_without_a_downlink_tunnel_forwards_uplink_only() {
    let ts: Vec<Tunnel> = tunnels()
        .into_iter()
        .map(|t| Tunnel {
            teid: 0,
            enb: Ipv4Addr::UNSPECIFIED,
            ul_teid: 0x0100_0000 | t.teid & 0xff_ffff,
            ..t
        })
        .collect();
    let mut c = cluster(&ts);
    let t = ts.iter().find(|t| t.ue.is_ipv4()).unwrap();
    let n = usize::from(t.node);
    c.inject(
        t.node,
        PortId::Ran,
        &[uplink(t, 64, Some(t.qfi).filter(|&q| q != 0))],
    );
    assert_eq!(c.inet_out[n].len(), 1, "the uplink forwards");
    let ran_before: usize = c.ran_out.iter().map(|r| r.len()).sum();
    for t in ts.iter().take(20) {
        c.inject(0, PortId::Inet, &[downstream(t.ue, 64, 100, true)]);
    }
    let ran_after: usize = c.ran_out.iter().map(|r| r.len()).sum();
    assert_eq!(ran_after, ran_before, "nothing tunnelled");
    assert_eq!(c.counters().dropped(Drop::NoTunnel), 20);
}

/// An IPv6 UE is its /64: downlink to any interface identifier in it reaches its tunnel, and
/// uplink from any address in it is accepted; another /64 is not the UE.
#[test]
fn ipv6_ues_are_forwarded_by_their_slash_64_both_ways() {
    let ts = tunnels();
    let mut c = cluster(&ts);
    let t = ts.iter().find(|t| t.ue.is_ipv6()).unwrap();
    let IpAddr::V6(ue) = t.ue else { unreachable!() };
    let n = usize::from(t.node);
    let with_iid = |iid: u64| -> IpAddr {
        let mut o = ue.octets();
        o[8..].copy_from_slice(&iid.to_be_bytes());
        IpAddr::V6(o.into())
    };
    for (i, iid) in [0x1u64, 0xdead_beef_0bad_f00d, 0x0200_5eff_fe00_5301]
        .into_iter()
        .enumerate()
    {
        let addr = with_iid(iid);
        c.inject(
            ((i as u16) + 1) % NODES,
            PortId::Inet,
            &[downstream(addr, 64, 120, false)],
        );
        let out = c.ran_out[n].last().unwrap();
        let d = decapsulate(out).unwrap();
        assert_eq!(d.teid, t.teid, "{addr}");
        // The inner destination is the address the packet was sent to.
        let dst: [u8; 16] = d.inner[24..40].try_into().unwrap();
        assert_eq!(IpAddr::V6(dst.into()), addr);
        let before = c.inet_out[n].len();
        let from = Tunnel { ue: addr, ..*t };
        c.inject(t.node, PortId::Ran, &[uplink(&from, 64, None)]);
        assert_eq!(c.inet_out[n].len(), before + 1, "uplink from {addr}");
    }
    // Another /64 in the same tunnel: not the UE's.
    let mut o = ue.octets();
    o[7] ^= 1;
    let other = Tunnel {
        ue: IpAddr::V6(o.into()),
        ..*t
    };
    c.inject(t.node, PortId::Ran, &[uplink(&other, 64, None)]);
    assert_eq!(c.counters().dropped(Drop::UplinkMismatch), 1);
}
