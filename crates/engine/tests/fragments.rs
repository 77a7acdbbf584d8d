//! Outer IPv4 fragmentation: a downlink IPv4 packet without DF whose tunnel exceeds the `ran`
//! MTU leaves as outer fragments that fit it, at its handling node's `ran` port, in every
//! architecture; put back together they are the encapsulation the engine makes when the MTU
//! is large enough (the oracle), but for the identification and the flags. With DF, and for
//! IPv6, the packet is dropped and answered instead (ICMP Fragmentation Needed / Packet Too
//! Big, `lte_5g.rs`).

use proptest::prelude::*;
use sb_engine::cluster::{generate_tunnels, SimCluster};
use sb_engine::lte::Tunnel;
use sb_engine::{Arch, Drop, PortId};
use sb_wire::{decapsulate, EthernetAddress, Ipv4Packet, PacketBuilder};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, OnceLock};

const NODES: u16 = 3;
const SEED: u64 = 11;

/// Even tunnels are LTE bearers (36 outer bytes), odd ones 5G QoS flows (44).
fn tunnels() -> Vec<Tunnel> {
    generate_tunnels(60, NODES.into(), SEED, 0)
        .into_iter()
        .enumerate()
        .map(|(i, t)| Tunnel {
            qfi: if i % 2 == 1 { 9 } else { 0 },
            ..t
        })
        .collect()
}

fn clusters() -> &'static [Mutex<SimCluster>; 3] {
    static C: OnceLock<[Mutex<SimCluster>; 3]> = OnceLock::new();
    C.get_or_init(|| {
        let ts = tunnels();
        Arch::ALL.map(|a| Mutex::new(SimCluster::new(a, &ts, NODES, SEED, 16).unwrap()))
    })
}

/// A downstream frame of `ip_len` bytes of IPv4 to `ue`, DF as `df`.
fn downstream(ue: IpAddr, ip_len: usize, df: bool) -> Vec<u8> {
    let mac = |x| EthernetAddress([2, 0, 0, 0, 0, x]);
    let server = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 5));
    let b = PacketBuilder::udp(mac(1), mac(2), server, ue, 443, 5000);
    let payload: Vec<u8> = (0..ip_len - 28).map(|i| (i * 31 + i / 256) as u8).collect();
    let mut out = vec![0u8; b.header_len() + payload.len()];
    let n = b.build(&payload, &mut out).unwrap();
    out.truncate(n);
    if df {
        out[14 + 6] |= 0x40;
        Ipv4Packet::new_unchecked(&mut out[14..]).fill_checksum();
    }
    out
}

/// The outer IPv4 fragments `frags` (Ethernet frames) put back together, after checking each:
/// within `mtu`, its header checksum, one identification, DF clear, 8-byte units, one Ethernet
/// header, and that they cover the packet exactly once. The identification, flags and offset of
/// the result are 0 (see [`normalized`]).
fn reassemble(frags: &[Vec<u8>], mtu: usize) -> Vec<u8> {
    let first = Ipv4Packet::new_checked(&frags[0][14..]).unwrap();
    let mut data: Vec<Option<u8>> = Vec::new();
    let mut lasts = 0;
    for f in frags {
        assert_eq!(f[..14], frags[0][..14]);
        let p = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(p.packet().len(), f.len() - 14);
        assert!(p.packet().len() <= mtu, "{} > {mtu}", p.packet().len());
        assert!(p.verify_checksum());
        assert!(!p.dont_frag());
        assert_eq!(p.ident(), first.ident());
        assert_eq!(p.packet()[8..10], first.packet()[8..10]);
        assert_eq!(p.packet()[12..20], first.packet()[12..20]);
        let off = usize::from(p.frag_offset());
        if p.more_frags() {
            assert_eq!(p.payload().len() % 8, 0);
        } else {
            lasts += 1;
        }
        for (i, &b) in p.payload().iter().enumerate() {
            if data.len() <= off + i {
                data.resize(off + i + 1, None);
            }
            assert!(data[off + i].replace(b).is_none(), "overlapping fragments");
        }
    }
    assert_eq!(lasts, 1);
    let mut out = frags[0][..14 + 20].to_vec();
    out.extend(data.iter().map(|b| b.expect("a hole in the fragments")));
    let n = (out.len() - 14) as u16;
    out[14 + 2..14 + 4].copy_from_slice(&n.to_be_bytes());
    normalized(out)
}

/// A frame with its outer identification and flags zeroed and the checksum recomputed.
fn normalized(mut f: Vec<u8>) -> Vec<u8> {
    f[14 + 4..14 + 8].fill(0);
    Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    f
}

fn set_mtu(c: &mut SimCluster, mtu: usize) {
    for e in &mut c.engines {
        e.app_mut().set_ran_mtu(mtu);
    }
}

/// Sends `frame` into node `ingress` and returns what left the `ran` ports (all nodes).
fn send(c: &mut SimCluster, ingress: u16, frame: &[u8]) -> Vec<(usize, Vec<u8>)> {
    for o in &mut c.ran_out {
        o.clear();
    }
    c.inject(ingress, PortId::Inet, &[frame.to_vec()]);
    let mut got = Vec::new();
    for (n, o) in c.ran_out.iter_mut().enumerate() {
        got.extend(o.drain(..).map(|f| (n, f)));
    }
    got
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    /// Any size that does not fit, any MTU from 576 (IPv4's least) to 1500, any ingress node,
    /// LTE or 5G: the fragments reassemble into the unfragmented encapsulation, at the handling
    /// node, as few as 8-byte units allow, counted.
    #[test]
    fn fragments_reassemble_into_the_unfragmented_tunnel(
        arch in 0usize..3,
        t in 0usize..60,
        ingress in 0u16..NODES,
        mtu in 576usize..=1500,
        extra in 1usize..1400,
    ) {
        let ts = tunnels();
        let t = &ts[t];
        let overhead = if t.qfi == 0 { 36 } else { 44 };
        // Oversize by `extra`; whole, with its tunnel and a fabric shim, within a batch
        // buffer's frame (1920 bytes: the simulated fabric copies frames into one).
        let ip_len = (mtu - overhead + extra).min(1920 - 14 - 44 - 6);
        prop_assume!(ip_len + overhead > mtu);
        let mut c = clusters()[arch].lock().unwrap_or_else(|e| e.into_inner());
        let frame = downstream(t.ue, ip_len, false);
        set_mtu(&mut c, 9000);
        let whole = send(&mut c, ingress, &frame);
        prop_assert_eq!(whole.len(), 1);
        let (node, whole) = whole.into_iter().next().unwrap();
        prop_assert_eq!(node, usize::from(t.node));
        prop_assert_eq!(decapsulate(&whole).unwrap().inner.len(), ip_len);
        set_mtu(&mut c, mtu);
        let before = c.counters();
        let frags = send(&mut c, ingress, &frame);
        let after = c.counters();
        prop_assert!(frags.iter().all(|(n, _)| *n == usize::from(t.node)));
        let frags: Vec<Vec<u8>> = frags.into_iter().map(|(_, f)| f).collect();
        let step = (mtu - 20) & !7;
        let want = (ip_len + overhead - 20).div_ceil(step);
        prop_assert_eq!(frags.len(), want);
        prop_assert_eq!(after.fragmented, before.fragmented + 1);
        prop_assert_eq!(after.fragments, before.fragments + want as u64);
        prop_assert_eq!(after.dropped(Drop::Mtu), before.dropped(Drop::Mtu));
        prop_assert_eq!(reassemble(&frags, mtu), normalized(whole));
        set_mtu(&mut c, 1500);
    }
}

/// Frames cut one after the other get distinct identifications; a DF packet of the same size is
/// dropped and answered; more cut frames than a batch holds all leave (the outputs have room
/// for every frame of a batch cut in two).
#[test]
fn a_batch_of_cut_packets_leaves_whole_and_df_is_answered() {
    let ts = tunnels();
    let t = ts.iter().find(|t| t.qfi == 0).unwrap();
    let mut c = SimCluster::new(Arch::ScaleBricks, &ts, NODES, SEED, 16).unwrap();
    let frames: Vec<Vec<u8>> = (0..16).map(|_| downstream(t.ue, 1500, false)).collect();
    c.inject(t.node, PortId::Inet, &frames);
    let out = std::mem::take(&mut c.ran_out[usize::from(t.node)]);
    assert_eq!(out.len(), 32);
    let ids: std::collections::BTreeSet<u16> = out
        .iter()
        .map(|f| Ipv4Packet::new_checked(&f[14..]).unwrap().ident())
        .collect();
    assert_eq!(ids.len(), 16);
    let cn = c.counters();
    assert_eq!((cn.fragmented, cn.fragments), (16, 32));
    assert_eq!(cn.ports[PortId::Ran as usize].tx, 32);
    assert_eq!(cn.dropped(Drop::NoRoom), 0);
    c.inject(t.node, PortId::Inet, &[downstream(t.ue, 1500, true)]);
    let cn = c.counters();
    assert_eq!(
        (cn.fragmented, cn.dropped(Drop::Mtu), cn.icmp_errors),
        (16, 1, 1)
    );
    assert!(c.ran_out[usize::from(t.node)].is_empty());
}
