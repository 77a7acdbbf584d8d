//! A 4-node cluster in one process for each architecture: downstream packets of known flows
//! enter random nodes and must leave exactly once, at the handling node's `ran` port, as the
//! right GTP-U tunnel around the same packet (TTL one lower); unknown flows, malformed frames,
//! TTL 1 and oversized packets are dropped by the right reason; the fabric-crossing histogram
//! matches what the architecture promises; upstream G-PDUs leave `inet` byte-identical, echo
//! requests are answered, bad upstream and bad fabric frames are dropped and counted.

use rand::{rngs::StdRng, Rng, SeedableRng};
use sb_engine::cluster::{generate_tunnels, sim_mac, sim_ran_addr, SimCluster};
use sb_engine::lte::Tunnel;
use sb_engine::{fabric, indirection_node, Arch, Drop, PortId};
use sb_wire::{
    decapsulate, parse_frame, EthernetAddress, GtpuRepr, GtpuTunnel, OuterIp, PacketBuilder,
};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const NODES: u16 = 4;
const SEED: u64 = 42;

fn mac(x: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 0, 0, x])
}

fn server_for(ue: IpAddr) -> IpAddr {
    match ue {
        IpAddr::V4(_) => Ipv4Addr::new(203, 0, 113, 5).into(),
        IpAddr::V6(_) => "2001:db8:ffff::5".parse::<Ipv6Addr>().unwrap().into(),
    }
}

/// A downstream frame to `ue` whose payload names packet `id`.
fn downstream(ue: IpAddr, id: u64, ttl: u8, payload_len: usize) -> Vec<u8> {
    let b = PacketBuilder {
        ttl,
        ..PacketBuilder::udp(mac(1), mac(2), server_for(ue), ue, 443, 5000)
    };
    let mut payload = vec![0u8; payload_len.max(8)];
    payload[..8].copy_from_slice(&id.to_be_bytes());
    let mut out = vec![0u8; b.header_len() + payload.len()];
    let n = b.build(&payload, &mut out).unwrap();
    out.truncate(n);
    out
}

/// The IP packet of a frame built by `downstream`.
fn ip_of(frame: &[u8]) -> &[u8] {
    &frame[14..]
}

fn gpdu(t: &Tunnel, inner_src: IpAddr, outer_src: Ipv4Addr, teid: u32) -> (Vec<u8>, Vec<u8>) {
    let b = PacketBuilder::udp(mac(3), mac(4), inner_src, server_for(inner_src), 5000, 443);
    let mut inner = vec![0u8; b.header_len() + 20];
    let n = b.build(b"upstream payload 123", &mut inner).unwrap();
    inner.truncate(n);
    let ip = inner[14..].to_vec();
    let tunnel = GtpuTunnel::new(
        mac(5),
        EthernetAddress(sim_mac(PortId::Ran, t.node, false)),
        OuterIp::V4 {
            src: outer_src,
            dst: sim_ran_addr(t.node),
        },
        teid,
    );
    let mut f = vec![0u8; tunnel.header_len() + ip.len()];
    tunnel.encap_into(&ip, &mut f).unwrap();
    (f, ip)
}

fn echo_request(node: u16, seq: u16) -> Vec<u8> {
    let g = GtpuRepr {
        msg_type: sb_wire::gtpu::msg_type::ECHO_REQUEST,
        teid: 0,
        seq_number: Some(seq),
        npdu_number: None,
        extensions: None,
    };
    let mut msg = vec![0u8; g.header_len()];
    g.emit(&mut msg, 0).unwrap();
    let b = PacketBuilder::udp(
        mac(5),
        EthernetAddress(sim_mac(PortId::Ran, node, false)),
        Ipv4Addr::new(192, 0, 2, 77).into(),
        sim_ran_addr(node).into(),
        40000,
        2152,
    );
    let mut f = vec![0u8; b.header_len() + msg.len()];
    let n = b.build(&msg, &mut f).unwrap();
    f.truncate(n);
    f
}

/// Sets DF on the IPv4 packet of a frame built by `downstream`.
fn set_df(f: &mut [u8]) {
    f[14 + 6] |= 0x40;
    sb_wire::Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
}

/// The frame the outer IPv4 fragments `frags` (Ethernet frames, each within `mtu` bytes of IP)
/// make: their data placed by offset, checked to cover the packet once; the first one's
/// Ethernet and IP headers, the length, flags and checksum of a whole packet.
fn reassemble(frags: &[Vec<u8>], mtu: usize) -> Vec<u8> {
    let first = sb_wire::Ipv4Packet::new_checked(&frags[0][14..]).unwrap();
    let mut data: Vec<Option<u8>> = Vec::new();
    let mut last = 0;
    for f in frags {
        assert_eq!(f[..14], frags[0][..14], "one Ethernet header");
        let p = sb_wire::Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(p.packet().len() <= mtu && p.verify_checksum() && !p.dont_frag());
        assert_eq!(p.ident(), first.ident());
        let off = usize::from(p.frag_offset());
        if !p.more_frags() {
            last += 1;
        }
        for (i, &b) in p.payload().iter().enumerate() {
            if data.len() <= off + i {
                data.resize(off + i + 1, None);
            }
            assert!(data[off + i].replace(b).is_none(), "overlap");
        }
    }
    assert_eq!(last, 1, "one last fragment");
    let mut out = frags[0][..14 + 20].to_vec();
    out.extend(data.iter().map(|b| b.expect("a hole")));
    let n = (out.len() - 14) as u16;
    out[14 + 2..14 + 4].copy_from_slice(&n.to_be_bytes());
    out[14 + 6..14 + 8].fill(0);
    sb_wire::Ipv4Packet::new_unchecked(&mut out[14..]).fill_checksum();
    out
}

fn run_arch(arch: Arch) {
    let tunnels = generate_tunnels(2000, NODES.into(), SEED, 5);
    let mut c = SimCluster::new(arch, &tunnels, NODES, SEED, 32).unwrap();
    let mut rng = StdRng::seed_from_u64(7);

    // Known flows, from random ingress nodes.
    let mut sent: HashMap<u64, (usize, u16, Vec<u8>)> = HashMap::new();
    let mut per_ingress: Vec<Vec<Vec<u8>>> = vec![Vec::new(); NODES.into()];
    let mut expect_hops = [0u64; 4];
    for id in 0..3000u64 {
        let ti = rng.gen_range(0..tunnels.len());
        let ingress = rng.gen_range(0..NODES);
        let f = downstream(
            tunnels[ti].ue,
            id,
            rng.gen_range(2..=64),
            rng.gen_range(8..600),
        );
        sent.insert(id, (ti, ingress, ip_of(&f).to_vec()));
        per_ingress[ingress as usize].push(f);
        let t = &tunnels[ti];
        let hops = match arch {
            Arch::ScaleBricks | Arch::FullDup => u8::from(ingress != t.node),
            Arch::HashPart => {
                let ind = indirection_node(sb_common::hash128(&t.key(), SEED), NODES);
                u8::from(ingress != ind) + u8::from(ind != t.node)
            }
        };
        expect_hops[hops as usize] += 1;
    }
    // Unknown UEs, TTL 1, an oversized packet and malformed frames, at node 1.
    let mut bad = Vec::new();
    for i in 0..20u32 {
        bad.push(downstream(
            Ipv4Addr::from(0x0a63_0000 + i).into(),
            1_000_000,
            64,
            20,
        ));
    }
    let t0 = &tunnels[0];
    bad.push(downstream(t0.ue, 1_000_001, 1, 20)); // TTL 1
    bad.push(downstream(t0.ue, 1_000_002, 0, 20)); // TTL 0
                                                   // The IP packets the Time Exceeded messages quote, by TTL.
    let sent_bad = [ip_of(&bad[21]).to_vec(), ip_of(&bad[20]).to_vec()];
    let mut bad_csum = downstream(t0.ue, 1_000_003, 64, 20);
    bad_csum[14 + 10] ^= 0xff; // IPv4 header checksum
    let truncated = downstream(t0.ue, 1_000_004, 64, 20)[..30].to_vec();
    let mut arp = vec![0xffu8; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]); // a malformed ARP body (hardware type 0)
    bad.extend([bad_csum, truncated, arp]);
    let v4_tunnel = tunnels.iter().find(|t| t.ue.is_ipv4()).unwrap();
    let mut oversized = downstream(v4_tunnel.ue, 1_000_005, 64, 1480 - 28);
    set_df(&mut oversized);
    bad.push(oversized);
    // Without DF the same size leaves as two outer fragments (checked below).
    let cut = downstream(v4_tunnel.ue, 1_000_006, 64, 1480 - 28);
    sent.insert(1_000_006, (0, 1, ip_of(&cut).to_vec()));
    let cut_ti = tunnels.iter().position(|t| t == v4_tunnel).unwrap();
    sent.get_mut(&1_000_006).unwrap().0 = cut_ti;
    expect_hops[match arch {
        Arch::ScaleBricks | Arch::FullDup => usize::from(v4_tunnel.node != 1),
        Arch::HashPart => {
            let ind = indirection_node(sb_common::hash128(&v4_tunnel.key(), SEED), NODES);
            usize::from(ind != 1) + usize::from(ind != v4_tunnel.node)
        }
    }] += 2; // Two fragments.
    bad.push(cut);
    for (n, frames) in per_ingress.iter().enumerate() {
        c.inject(n as u16, PortId::Inet, frames);
    }
    c.inject(1, PortId::Inet, &bad);

    // Every known packet leaves exactly once, at its handling node's ran, correctly tunnelled.
    let mut seen = HashMap::new();
    let mut fragments = Vec::new();
    for (node, frames) in c.ran_out.iter_mut().enumerate() {
        // The outer fragments of the one packet cut, put back together.
        let (frags, whole): (Vec<Vec<u8>>, Vec<Vec<u8>>) = frames
            .drain(..)
            .partition(|f| f[14 + 6] & 0x3f != 0 || f[14 + 7] != 0);
        *frames = whole;
        if !frags.is_empty() {
            fragments.push((node, frags.len()));
            frames.push(reassemble(&frags, 1500));
        }
    }
    assert_eq!(
        fragments,
        [(usize::from(v4_tunnel.node), 2)],
        "{arch}: one packet cut in two, at its handling node"
    );
    for (node, frames) in c.ran_out.iter().enumerate() {
        for f in frames {
            assert_eq!(
                &f[..6],
                &sim_mac(PortId::Ran, node as u16, true),
                "{arch}: dst MAC"
            );
            assert_eq!(
                &f[6..12],
                &sim_mac(PortId::Ran, node as u16, false),
                "{arch}: src MAC"
            );
            let d = decapsulate(f).unwrap_or_else(|e| panic!("{arch}: not a G-PDU: {e}"));
            // The id sits at the start of the UDP payload.
            let p = parse_frame(f).unwrap();
            let pl = p.l4_payload().unwrap();
            let id2 = u64::from_be_bytes(pl[..8].try_into().unwrap());
            let (ti, _ingress, ip) = sent
                .get(&id2)
                .unwrap_or_else(|| panic!("{arch}: unknown id {id2}"));
            let t = &tunnels[*ti];
            assert_eq!(
                node as u16, t.node,
                "{arch}: packet {id2} left the wrong node"
            );
            assert_eq!(d.teid, t.teid, "{arch}: TEID");
            assert_eq!(d.outer_dst, IpAddr::V4(t.enb), "{arch}: eNodeB");
            assert_eq!(
                d.outer_src,
                IpAddr::V4(sim_ran_addr(t.node)),
                "{arch}: S1-U address"
            );
            // The inner packet: identical except the TTL (and, for IPv4, its header checksum).
            let inner = d.inner;
            assert_eq!(inner.len(), ip.len());
            match t.ue {
                IpAddr::V4(_) => {
                    assert_eq!(inner[8] + 1, ip[8], "{arch}: TTL decremented");
                    assert_eq!(&inner[..8], &ip[..8]);
                    assert_eq!(&inner[12..], &ip[12..]);
                    assert_eq!(
                        sb_wire::checksum::checksum(&inner[..20]),
                        0,
                        "{arch}: IPv4 checksum"
                    );
                }
                IpAddr::V6(_) => {
                    assert_eq!(inner[7] + 1, ip[7], "{arch}: hop limit decremented");
                    assert_eq!(&inner[..7], &ip[..7]);
                    assert_eq!(&inner[8..], &ip[8..]);
                }
            }
            *seen.entry(id2).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), sent.len(), "{arch}: every known packet arrives");
    assert!(seen.values().all(|&n| n == 1), "{arch}: exactly once");

    let cn = c.counters();
    assert_eq!(cn.crossings, expect_hops, "{arch}: crossings histogram");
    assert_eq!(c.fabric_lost, 0);
    let unknown = cn.dropped(Drop::UnknownFlow) + cn.dropped(Drop::FibMissAfterGpt);
    assert_eq!(
        unknown,
        20,
        "{arch}: unknown flows, {:?}",
        cn.drops_by_reason()
    );
    if arch != Arch::ScaleBricks {
        assert_eq!(cn.dropped(Drop::FibMissAfterGpt), 0);
    }
    assert_eq!(cn.dropped(Drop::Ttl), 2, "{arch}");
    assert_eq!(cn.dropped(Drop::Mtu), 1, "{arch}");
    // ... each answered with an ICMP error out of inet: Time Exceeded from the ingress node,
    // Fragmentation Needed (MTU 1500 - 36) from the node that applied the tunnel.
    assert_eq!(cn.icmp_errors, 3, "{arch}");
    let mut icmp: Vec<(u8, u8, u16)> = Vec::new();
    for (node, out) in c.inet_out.iter_mut().enumerate() {
        for f in out.drain(..) {
            assert_eq!(&f[..6], &sim_mac(PortId::Inet, node as u16, true));
            let p = parse_frame(&f).unwrap();
            let ip = p.ip().unwrap();
            assert_eq!(ip.dst_addr, server_for(t0.ue), "{arch}: back to the sender");
            assert_eq!(ip.src_addr, IpAddr::V4(Ipv4Addr::new(10, 0, node as u8, 1)));
            let icmp_msg = &ip.packet[20..];
            assert_eq!(
                sb_wire::checksum::checksum(icmp_msg),
                0,
                "{arch}: ICMP checksum"
            );
            if node == 1 && icmp_msg[0] == 11 {
                assert_eq!(&icmp_msg[8..], &sent_bad[icmp_msg[8 + 8] as usize][..28]);
            }
            icmp.push((
                icmp_msg[0],
                icmp_msg[1],
                u16::from_be_bytes([icmp_msg[6], icmp_msg[7]]),
            ));
        }
    }
    icmp.sort();
    assert_eq!(icmp, [(3, 4, 1464), (11, 0, 0), (11, 0, 0)], "{arch}");
    assert_eq!(
        cn.dropped(Drop::Malformed(sb_wire::WireError::ALL[0])),
        3,
        "{arch}"
    );
    assert_eq!(cn.dropped(Drop::InvalidFabric), 0);
    match arch {
        Arch::ScaleBricks | Arch::FullDup => assert_eq!(cn.crossings[2], 0),
        Arch::HashPart => assert!(cn.crossings[2] > 0),
    }

    // Upstream: each node's tunnels, from their eNodeBs.
    let mut expect_up = HashMap::new();
    for t in tunnels.iter().take(200) {
        let (f, ip) = gpdu(t, t.ue, t.enb, t.teid);
        expect_up.entry(t.node).or_insert_with(Vec::new).push(ip);
        c.inject(t.node, PortId::Ran, &[f]);
    }
    for (node, ips) in &expect_up {
        let out = &c.inet_out[usize::from(*node)];
        assert_eq!(
            out.len(),
            ips.len(),
            "{arch}: upstream packets of node {node}"
        );
        for (f, ip) in out.iter().zip(ips) {
            // Byte-identical but the TTL (decremented, IPv4 header checksum patched).
            let got = &f[14..];
            assert_eq!(got.len(), ip.len());
            if ip[0] >> 4 == 4 {
                assert_eq!(
                    (&got[..8], got[8] + 1, &got[12..]),
                    (&ip[..8], ip[8], &ip[12..])
                );
                assert_eq!(sb_wire::checksum::checksum(&got[..20]), 0, "{arch}");
            } else {
                assert_eq!(
                    (&got[..7], got[7] + 1, &got[8..]),
                    (&ip[..7], ip[7], &ip[8..])
                );
            }
            assert_eq!(&f[..6], &sim_mac(PortId::Inet, *node, true));
        }
    }
    let t = &tunnels[0];
    let other = tunnels.iter().find(|x| x.node != t.node).unwrap();
    let (unknown_teid, _) = gpdu(t, t.ue, t.enb, 0x7777_7777);
    let (wrong_node, _) = gpdu(other, other.ue, other.enb, other.teid);
    let (spoofed, _) = gpdu(t, other.ue, t.enb, t.teid);
    let (wrong_enb, _) = gpdu(t, t.ue, Ipv4Addr::new(198, 51, 100, 1), t.teid);
    let plain = downstream(t.ue, 5, 64, 20);
    c.inject(
        t.node,
        PortId::Ran,
        &[
            unknown_teid,
            wrong_node,
            spoofed,
            wrong_enb,
            plain,
            echo_request(t.node, 99),
        ],
    );
    let cn = c.counters();
    assert_eq!(
        cn.dropped(Drop::UnknownTeid),
        2,
        "{arch}: unknown TEID and a TEID of another node"
    );
    // The outer source is not checked (an N3 address need not be the known one): the
    // wrong-eNodeB G-PDU is forwarded; the spoofed inner source is not.
    assert_eq!(cn.dropped(Drop::UplinkMismatch), 1, "{arch}");
    // Each unknown TEID is answered with a GTP-U Error Indication out of ran.
    assert_eq!(cn.error_indications, 2, "{arch}");
    let eis: Vec<&Vec<u8>> = c.ran_out[usize::from(t.node)]
        .iter()
        .filter(|f| {
            matches!(sb_wire::parse_frame(f).map(|p| p.kind),
                Ok(sb_wire::FrameKind::Gtpu(g)) if g.msg_type == 26)
        })
        .collect();
    assert_eq!(eis.len(), 2, "{arch}");
    assert_eq!(cn.dropped(Drop::NotGpdu), 1, "{arch}");
    assert_eq!(cn.echo_replies, 1);
    let reply = c.ran_out[usize::from(t.node)].last().unwrap();
    // The response goes to the request's source port (40000): parse GTP-U there.
    let opts = sb_wire::ParseOptions {
        gtpu_port: 40000,
        ..Default::default()
    };
    let p = sb_wire::parse_frame_with(reply, &opts).unwrap();
    let sb_wire::FrameKind::Gtpu(g) = p.kind else {
        panic!("echo response is GTP-U")
    };
    assert_eq!((g.msg_type, g.seq_number), (2, Some(99)));

    // Fabric frames that are not valid for the architecture.
    let before = c.counters().dropped(Drop::InvalidFabric);
    let s = fabric::Shim {
        kind: fabric::Kind::Transmit,
        hops: 1,
        ingress: 0,
    };
    let mut buf = vec![0u8; 6];
    buf.extend_from_slice(&downstream(t.ue, 6, 64, 20));
    let len = buf.len() - 6;
    let start = fabric::push(
        &mut buf,
        6,
        len,
        sim_mac(PortId::Fabric, 1, false),
        sim_mac(PortId::Fabric, 0, false),
        s,
    )
    .unwrap();
    let shim_transmit = buf[start..].to_vec();
    let mut too_many = shim_transmit.clone();
    too_many[15] = 3;
    let invalid = vec![too_many, shim_transmit];
    c.inject(1, PortId::Fabric, &invalid);
    let added = c.counters().dropped(Drop::InvalidFabric) - before;
    // 3 hops are invalid everywhere; a Transmit frame only under ScaleBricks.
    let want = if arch == Arch::ScaleBricks { 2 } else { 1 };
    assert_eq!(added, want, "{arch}: invalid fabric frames");
    // A plain IPv4 frame on the fabric is the nodes' kernels' traffic (the control plane):
    // left to the kernel, counted as `host`, never forwarded or taken for a fabric frame.
    let host = |c: &SimCluster| c.counters().ports[PortId::Fabric as usize].host;
    let dropped = |c: &SimCluster| c.counters().ports.iter().map(|p| p.dropped).sum::<u64>();
    let (host_before, dropped_before) = (host(&c), dropped(&c));
    c.inject(1, PortId::Fabric, &[downstream(t.ue, 7, 64, 20)]);
    assert_eq!(host(&c) - host_before, 1, "{arch}");
    assert_eq!(dropped(&c), dropped_before, "{arch}: not a drop");
    assert_eq!(c.counters().dropped(Drop::InvalidFabric) - before, want);
}

#[test]
fn scalebricks_forwards_every_packet_right() {
    run_arch(Arch::ScaleBricks);
}

#[test]
fn full_duplication_forwards_every_packet_right() {
    run_arch(Arch::FullDup);
}

#[test]
fn hash_partitioning_forwards_every_packet_right() {
    run_arch(Arch::HashPart);
}

mod random_frames {
    proptest::proptest! {
        /// The fuzz target's entry point on random inputs (the same checks it makes).
        #[test]
        fn fuzz_entry_point_on_random_bytes(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            sb_engine::fuzzing::run_frames(&data);
        }
    }

    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Arbitrary bytes on any port of any node, raw or behind a valid fabric shim, never
        /// make an engine panic, and every frame is either forwarded or counted as dropped.
        #[test]
        fn arbitrary_frames_never_panic(
            arch in 0usize..3,
            frames in proptest::collection::vec(
                (0u16..4, 0usize..3, any::<bool>(), proptest::collection::vec(any::<u8>(), 0..300)), 1..40),
        ) {
            let arch = Arch::ALL[arch];
            let tunnels = generate_tunnels(50, 4, 9, 3);
            let mut c = SimCluster::new(arch, &tunnels, 4, 9, 8).unwrap();
            let mut injected = 0u64;
            for (node, port, shim, mut bytes) in frames {
                let port = PortId::ALL[port];
                if shim && bytes.len() >= 14 {
                    let mut buf = vec![0u8; fabric::SHIM_LEN];
                    buf.extend_from_slice(&bytes);
                    let len = bytes.len();
                    let kind = if bytes[0] % 2 == 0 { fabric::Kind::Lookup } else { fabric::Kind::Transmit };
                    let s = fabric::push(&mut buf, fabric::SHIM_LEN, len,
                        sim_mac(PortId::Fabric, node, false), sim_mac(PortId::Fabric, (node + 1) % 4, false),
                        fabric::Shim { kind, hops: 1 + bytes[1] % 2, ingress: u16::from(bytes[2] % 4) }).unwrap();
                    bytes = buf[s..].to_vec();
                }
                c.inject(node, port, &[bytes]);
                injected += 1;
            }
            let cn = c.counters();
            let rx: u64 = cn.ports.iter().map(|p| p.rx).sum();
            let out: u64 = cn.ports.iter().map(|p| p.tx).sum();
            let dropped: u64 = cn.ports.iter().map(|p| p.dropped).sum();
            // Plain IP/ARP on the fabric is the nodes' kernels' traffic, counted as `host`
            // (as the fuzz target counts it).
            let host: u64 = cn.ports.iter().map(|p| p.host).sum();
            // Every frame received (injected or forwarded over the fabric) left once, was
            // dropped, or was left to the host.
            prop_assert_eq!(rx, out + dropped + host);
            prop_assert!(rx >= injected);
        }
    }
}

/// Tunnels with an uplink TEID of their own (what PFCP allocates): downstream packets carry
/// the eNodeB's TEID, upstream G-PDUs are accepted with the uplink TEID only.
#[test]
fn tunnels_with_their_own_uplink_teid() {
    let tunnels: Vec<Tunnel> = generate_tunnels(200, NODES.into(), SEED, 5)
        .into_iter()
        .enumerate()
        .map(|(i, t)| Tunnel {
            ul_teid: 0x0100_0000 | (i as u32 + 1),
            ..t
        })
        .collect();
    let mut c = SimCluster::new(Arch::ScaleBricks, &tunnels, NODES, SEED, 32).unwrap();
    for (i, t) in tunnels.iter().take(50).enumerate() {
        // Downstream: the eNodeB's TEID.
        c.inject(0, PortId::Inet, &[downstream(t.ue, i as u64, 64, 20)]);
        let f = c.ran_out[usize::from(t.node)].last().unwrap().clone();
        let d = decapsulate(&f).unwrap();
        assert_eq!(d.teid, t.teid);
        // Upstream: the uplink TEID is accepted, the downlink one is not.
        let before = c.inet_out[usize::from(t.node)].len();
        let (good, ip) = gpdu(t, t.ue, t.enb, t.ul_teid);
        c.inject(t.node, PortId::Ran, &[good]);
        let out = &c.inet_out[usize::from(t.node)];
        assert_eq!(out.len(), before + 1, "tunnel {i}");
        let got = &out.last().unwrap()[14..];
        let ttl = if ip[0] >> 4 == 4 { 8 } else { 7 };
        assert_eq!(got[ttl] + 1, ip[ttl], "TTL decremented");
        // After the TTL (and IPv4's patched header checksum).
        let rest = if ttl == 8 { 12 } else { 8 };
        assert_eq!(&got[rest..], &ip[rest..]);
        let unknown = c.counters().dropped(Drop::UnknownTeid);
        let (old, _) = gpdu(t, t.ue, t.enb, t.teid);
        c.inject(t.node, PortId::Ran, &[old]);
        assert_eq!(c.counters().dropped(Drop::UnknownTeid), unknown + 1);
        assert_eq!(c.inet_out[usize::from(t.node)].len(), before + 1);
    }
}

/// A fuzzer find: a plain IPv4 frame on a fabric port is left to the host (counted as `host`),
/// which the frames property must count alongside transmitted and dropped frames.
#[test]
fn fuzz_find_ipv4_on_the_fabric_is_host_traffic() {
    sb_engine::fuzzing::run_frames(&[
        245, 8, 0, 8, 0, 64, 245, 245, 0, 0, 0, 0, 8, 0, 8, 0, 64, 245, 245, 0, 89, 32, 245, 129, 0,
    ]);
}

/// A fuzzer find (the suite's engine_frames run): a G-PDU with an unknown TEID on a `ran` port
/// is dropped and answered with a GTP-U Error Indication, a frame the engine made, which the
/// frames property must count beside those it received.
#[test]
fn fuzz_find_an_error_indication_is_a_frame_the_engine_made() {
    sb_engine::fuzzing::run_frames(&[
        104, 37, 145, 10, 0, 18, 122, 1, 0, 0, 0, 0, 0, 0, 8, 0, 79, 1, 0, 96, 37, 10, 0, 0, 0, 37,
        0, 1, 252, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 96, 255, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 62, 255, 255, 255, 255, 255, 255,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 37, 145, 10, 0, 0, 0, 0, 0, 18, 122, 1,
        40, 145, 10, 0, 18, 122, 1, 0, 75, 91, 0, 0, 0, 255, 166, 75, 75, 1, 0, 0, 8, 2, 82, 21,
    ]);
}
