//! Policies (QER gates and MBR, URR counting, FAR buffering and End Markers) through
//! `Engine::process` and `Engine::poll`, on one node whose FIB and uplink table change as the
//! control thread would change them (`lte::local_entry` / `local_commit` / `local_release`).

use sb_engine::cluster::{sim_engine, sim_mac, sim_ran_addr};
use sb_engine::lte::{self, Lte, Policy, Tunnel, KEY_BYTES, UPLINK_VALUE_BYTES, VALUE_BYTES};
use sb_engine::policy::{Policies, Usage};
use sb_engine::{Arch, CuckooFib, Drop, Engine, Outputs, PortId};
use sb_packet::PacketBatch;
use sb_wire::{
    decapsulate, parse_frame, EthernetAddress, FrameKind, GtpuTunnel, OuterIp, PacketBuilder,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

const SEED: u64 = 3;

struct Node {
    engine: Engine<Lte>,
    fib: sb_cuckoo::Writer,
    uplink: sb_cuckoo::Writer,
    policies: Arc<Policies>,
    out: Outputs,
    ran: Vec<Vec<u8>>,
    inet: Vec<Vec<u8>>,
}

impl Node {
    /// One node (full duplication of a one-node cluster: every entry is local), empty tables.
    fn new() -> Node {
        let none: [(&[u8], &[u8]); 0] = [];
        let (fib, reader) =
            CuckooFib::build_with_room(KEY_BYTES, VALUE_BYTES, SEED, 1000, none.into_iter())
                .unwrap();
        let (uplink, up_reader) = sb_engine::fib::cuckoo_table_with_room(
            4,
            UPLINK_VALUE_BYTES,
            SEED,
            1000,
            none.into_iter(),
        )
        .unwrap()
        .into_concurrent();
        let mut engine = sim_engine(
            Arch::FullDup,
            0,
            1,
            SEED,
            None,
            Box::new(reader),
            up_reader,
            32,
        )
        .unwrap();
        let policies = Arc::new(Policies::new(1, 100));
        engine.app_mut().set_policies(policies.clone(), 0);
        Node {
            engine,
            fib,
            uplink,
            policies,
            out: Outputs::new(32, sb_packet::DEFAULT_BUF_SIZE),
            ran: Vec::new(),
            inet: Vec::new(),
        }
    }

    /// What the node's control thread does with a FIB insert.
    fn install(&mut self, t: &Tunnel) {
        let key = t.key();
        let old = self.fib.lookup(&key);
        if let Some(o) = &old {
            let (k, _) = Tunnel::from_entry(&key, o).uplink_entry();
            self.uplink.remove(&k);
        }
        let e = lte::local_entry(&self.policies, &key, &t.value()).unwrap();
        self.fib.insert(&key, &e.value).unwrap();
        self.uplink.insert(&e.uplink_key, &e.uplink_value).unwrap();
        lte::local_commit(&self.policies, &key, old.as_deref(), &e);
    }

    fn remove(&mut self, t: &Tunnel) -> Option<Usage> {
        let key = t.key();
        let old = self.fib.lookup(&key)?;
        let (k, _) = Tunnel::from_entry(&key, &old).uplink_entry();
        self.uplink.remove(&k);
        self.fib.remove(&key);
        lte::local_release(&self.policies, &key, &old)
    }

    fn collect(&mut self) {
        for f in self.out.ran.iter() {
            self.ran.push(f.to_vec());
        }
        for f in self.out.inet.iter() {
            self.inet.push(f.to_vec());
        }
        self.out.ran.clear();
        self.out.inet.clear();
        self.out.fabric.clear();
    }

    fn inject(&mut self, port: PortId, frames: &[Vec<u8>]) {
        let mut rx = PacketBatch::new(32);
        for chunk in frames.chunks(32) {
            for f in chunk {
                assert!(rx.push(f));
            }
            self.engine.process(port, &mut rx, &mut self.out);
            self.collect();
        }
    }

    /// One turn of the worker's loop between batches.
    fn poll(&mut self) {
        self.engine.poll(&mut self.out);
        self.collect();
    }

    fn clock(&mut self, ns: u64) {
        self.engine.set_clock(ns);
    }
}

fn tunnel(i: u8, policy: Policy) -> Tunnel {
    Tunnel {
        ue: IpAddr::V4(Ipv4Addr::new(100, 64, 0, i)),
        teid: 0x100 + u32::from(i),
        enb: Ipv4Addr::new(10, 2, 0, i),
        node: 0,
        qci: 9,
        ul_teid: 0x0300_0000 + u32::from(i),
        qfi: 0,
        rqi: false,
        policy,
        owner: 1,
    }
}

fn server_for(ue: IpAddr) -> IpAddr {
    match ue {
        IpAddr::V4(_) => Ipv4Addr::new(203, 0, 113, 5).into(),
        IpAddr::V6(_) => "2001:db8:ffff::5".parse::<Ipv6Addr>().unwrap().into(),
    }
}

/// A downstream frame to `ue` with an IP packet of `ip_len` bytes whose payload starts with
/// `seq`.
fn downstream(ue: IpAddr, ip_len: usize, seq: u32) -> Vec<u8> {
    let b = PacketBuilder::udp(
        EthernetAddress(sim_mac(PortId::Inet, 0, true)),
        EthernetAddress(sim_mac(PortId::Inet, 0, false)),
        server_for(ue),
        ue,
        443,
        5000,
    );
    let mut payload = vec![0x5a; ip_len - b.header_len() + 14];
    payload[..4].copy_from_slice(&seq.to_be_bytes());
    let mut out = vec![0u8; b.header_len() + payload.len()];
    let n = b.build(&payload, &mut out).unwrap();
    out.truncate(n);
    out
}

/// A G-PDU from `t`'s UE with an inner IP packet of `ip_len` bytes.
fn uplink(t: &Tunnel, ip_len: usize) -> Vec<u8> {
    let b = PacketBuilder::udp(
        EthernetAddress([2; 6]),
        EthernetAddress([2; 6]),
        t.ue,
        server_for(t.ue),
        5000,
        443,
    );
    let payload = vec![7u8; ip_len - b.header_len() + 14];
    let mut inner = vec![0u8; b.header_len() + payload.len()];
    let n = b.build(&payload, &mut inner).unwrap();
    let ip = inner[14..n].to_vec();
    let tun = GtpuTunnel::new(
        EthernetAddress([2, 0, 0, 0, 0, 5]),
        EthernetAddress(sim_mac(PortId::Ran, 0, false)),
        OuterIp::V4 {
            src: Ipv4Addr::new(198, 51, 100, 7),
            dst: sim_ran_addr(0),
        },
        t.uplink_teid(),
    );
    let mut f = vec![0u8; tun.header_len() + ip.len()];
    tun.encap_into(&ip, &mut f).unwrap();
    f
}

/// The TEID, the outer destination and the sequence number of a downlink G-PDU.
fn g_pdu(f: &[u8]) -> (u32, IpAddr, u32) {
    let d = decapsulate(f).unwrap();
    let udp = &d.inner[20 + 8..];
    (
        d.teid,
        d.outer_dst,
        u32::from_be_bytes([udp[0], udp[1], udp[2], udp[3]]),
    )
}

#[test]
fn closed_gates_drop_both_ways() {
    let mut n = Node::new();
    let t = tunnel(
        1,
        Policy {
            dl_gate_closed: true,
            ul_gate_closed: true,
            count: true,
            ..Policy::default()
        },
    );
    n.install(&t);
    n.inject(PortId::Inet, &[downstream(t.ue, 100, 0)]);
    n.inject(PortId::Ran, &[uplink(&t, 100)]);
    assert!(n.ran.is_empty() && n.inet.is_empty());
    let c = n.engine.counters();
    assert_eq!(c.dropped(Drop::Gate), 2);
    assert_eq!(
        c.drops[PortId::Inet as usize][Drop::OTHERS.iter().position(|d| *d == Drop::Gate).unwrap()],
        1
    );
    assert_eq!(n.policies.usage(t.ul_teid), Some(Usage::default()));
    // Opened: both ways forward and count.
    let open = Tunnel {
        policy: Policy {
            count: true,
            ..Policy::default()
        },
        ..t
    };
    n.install(&open);
    n.inject(PortId::Inet, &[downstream(t.ue, 100, 0)]);
    n.inject(PortId::Ran, &[uplink(&t, 100)]);
    assert_eq!((n.ran.len(), n.inet.len()), (1, 1));
    // The FAR drops downlink only.
    n.install(&Tunnel {
        policy: Policy {
            drop_dl: true,
            ..Policy::default()
        },
        ..t
    });
    n.inject(PortId::Inet, &[downstream(t.ue, 100, 0)]);
    n.inject(PortId::Ran, &[uplink(&t, 100)]);
    assert_eq!((n.ran.len(), n.inet.len()), (1, 2));
    assert_eq!(n.engine.counters().dropped(Drop::FarDrop), 1);
}

#[test]
fn the_mbr_drops_what_exceeds_the_rate_and_counts_what_passes() {
    let mut n = Node::new();
    // 1 Mbit/s: 125 000 bytes a second, a bucket of 100 ms = 12 500 bytes.
    let t = tunnel(
        2,
        Policy {
            dl_mbr_kbps: 1000,
            ul_mbr_kbps: 1000,
            count: true,
            ..Policy::default()
        },
    );
    n.install(&t);
    n.clock(1_000_000);
    let down: Vec<Vec<u8>> = (0..30).map(|i| downstream(t.ue, 1000, i)).collect();
    n.inject(PortId::Inet, &down);
    assert_eq!(n.ran.len(), 12, "the burst: 12 packets of 1000 bytes");
    assert_eq!(n.engine.counters().dropped(Drop::Mbr), 18);
    // The sequence that passed is the first 12.
    let seqs: Vec<u32> = n.ran.iter().map(|f| g_pdu(f).2).collect();
    assert_eq!(seqs, (0..12).collect::<Vec<_>>());
    // 40 ms later: 5000 bytes more.
    n.clock(41_000_000);
    n.inject(PortId::Inet, &down);
    assert_eq!(n.ran.len(), 17);
    // Uplink has a bucket of its own.
    let up: Vec<Vec<u8>> = (0..20).map(|_| uplink(&t, 1000)).collect();
    n.inject(PortId::Ran, &up);
    assert_eq!(n.inet.len(), 12);
    let u = n.policies.usage(t.ul_teid).unwrap();
    assert_eq!(
        u,
        Usage {
            ul_bytes: 12_000,
            ul_packets: 12,
            dl_bytes: 17_000,
            dl_packets: 17,
        }
    );
    assert_eq!(n.engine.counters().dropped(Drop::Mbr), 18 + 25 + 8);
}

#[test]
fn usage_counts_inner_ip_bytes_exactly_both_ways() {
    let mut n = Node::new();
    let count = Policy {
        count: true,
        ..Policy::default()
    };
    let a = tunnel(3, count);
    let b = tunnel(4, count);
    // A dual-stack session: a second UE entry with a's uplink TEID shares its slot.
    let a6 = Tunnel {
        ue: IpAddr::V6("2001:db8:7:1::".parse().unwrap()),
        ..a
    };
    let plain = tunnel(5, Policy::default());
    for t in [&a, &a6, &b, &plain] {
        n.install(t);
    }
    assert_eq!(n.policies.stats().slots, 2);
    let mut want = [Usage::default(); 2];
    let mut frames = Vec::new();
    let mut ups = Vec::new();
    for i in 0..40usize {
        let (t, k) = match i % 4 {
            0 => (&a, 0),
            1 => (&a6, 0),
            2 => (&b, 1),
            _ => (&plain, 2),
        };
        let len = 60 + 29 * i;
        let ue = if i % 4 == 1 {
            IpAddr::V6("2001:db8:7:1::99".parse().unwrap())
        } else {
            t.ue
        };
        frames.push(downstream(ue, len, i as u32));
        // (The uplink table holds one UE key per TEID: the dual-stack session's last
        // installed entry's, its IPv6 prefix.)
        let up_ue = if k == 0 { a6.ue } else { ue };
        let up_t = Tunnel { ue: up_ue, ..*t };
        ups.push(uplink(&up_t, len + 3));
        if k < 2 {
            want[k].dl_bytes += len as u64;
            want[k].dl_packets += 1;
            want[k].ul_bytes += len as u64 + 3;
            want[k].ul_packets += 1;
        }
    }
    n.inject(PortId::Inet, &frames);
    n.inject(PortId::Ran, &ups);
    assert_eq!((n.ran.len(), n.inet.len()), (40, 40));
    assert_eq!(n.policies.usage(a.ul_teid), Some(want[0]));
    assert_eq!(n.policies.usage(b.ul_teid), Some(want[1]));
    assert_eq!(n.policies.usage(plain.ul_teid), None, "no policy, no slot");
    // The session's usage stays readable until its last entry goes.
    assert_eq!(n.remove(&a), None);
    assert_eq!(n.policies.usage(a.ul_teid), Some(want[0]));
    assert_eq!(n.remove(&a6), Some(want[0]));
    assert_eq!(n.policies.usage(a.ul_teid), None);
}

#[test]
fn buffered_downlink_is_flushed_in_order_before_newer_packets() {
    let mut n = Node::new();
    let idle = Tunnel {
        teid: 0,
        enb: Ipv4Addr::UNSPECIFIED,
        ..tunnel(
            6,
            Policy {
                buffer: true,
                notify: true,
                count: true,
                ..Policy::default()
            },
        )
    };
    n.install(&idle);
    let frames: Vec<Vec<u8>> = (0..5).map(|i| downstream(idle.ue, 200, i)).collect();
    n.inject(PortId::Inet, &frames);
    n.poll();
    assert!(n.ran.is_empty());
    let c = n.engine.counters();
    assert_eq!(
        (c.buffered, c.ports[0].dropped),
        (5, 0),
        "buffered, not dropped"
    );
    assert_eq!(
        n.policies.take_notifications(),
        vec![idle.ul_teid],
        "one report"
    );
    assert_eq!(n.policies.buffered(idle.ul_teid), 5);
    // The gNB's tunnel arrives (FAR to FORW): the flush is pending; packets arriving before
    // the worker gets to it join the buffer's tail.
    let forw = Tunnel {
        teid: 0x777,
        enb: Ipv4Addr::new(10, 2, 0, 66),
        policy: Policy {
            count: true,
            ..Policy::default()
        },
        ..idle
    };
    n.install(&forw);
    n.inject(PortId::Inet, &[downstream(idle.ue, 200, 5)]);
    assert!(n.ran.is_empty());
    n.poll();
    let got: Vec<(u32, IpAddr, u32)> = n.ran.iter().map(|f| g_pdu(f)).collect();
    let want: Vec<(u32, IpAddr, u32)> = (0..6)
        .map(|i| (0x777, IpAddr::V4(Ipv4Addr::new(10, 2, 0, 66)), i))
        .collect();
    assert_eq!(got, want, "in order, on the new tunnel");
    // Each TTL decremented once, checksums good (seq 5 was tunnelled before the slot, still
    // flushing, buffered it: its TTL was given back).
    for f in &n.ran {
        let inner = decapsulate(f).unwrap().inner;
        assert_eq!(inner[8], 63, "TTL");
        assert_eq!(
            sb_wire::checksum::checksum(&inner[..20]),
            0,
            "header checksum"
        );
    }
    // Until the worker comes round again (its outputs transmitted), newer packets still queue
    // behind; then they forward directly.
    n.inject(PortId::Inet, &[downstream(idle.ue, 200, 6)]);
    assert_eq!(n.ran.len(), 6);
    n.poll();
    assert_eq!(n.ran.len(), 7, "a round of its own");
    n.poll();
    // The round ended with the buffer empty: forwarding directly.
    n.inject(PortId::Inet, &[downstream(idle.ue, 200, 7)]);
    assert_eq!(n.ran.len(), 8);
    let seqs: Vec<u32> = n.ran.iter().map(|f| g_pdu(f).2).collect();
    assert_eq!(seqs, (0..8).collect::<Vec<_>>());
    let c = n.engine.counters();
    assert_eq!((c.buffered, c.released, c.ports[0].rx), (7, 7, 8));
    assert_eq!(c.ports[PortId::Ran as usize].tx, 8);
    // Counted once each, when they went out.
    assert_eq!(n.policies.usage(idle.ul_teid).unwrap().dl_packets, 8);
    assert_eq!(n.policies.usage(idle.ul_teid).unwrap().dl_bytes, 8 * 200);
    // Overflow of the session's buffer (64 packets) is dropped and counted.
    n.install(&idle);
    let many: Vec<Vec<u8>> = (0..70).map(|i| downstream(idle.ue, 100, i)).collect();
    n.inject(PortId::Inet, &many);
    assert_eq!(n.engine.counters().dropped(Drop::BufferFull), 6);
    assert_eq!(n.policies.buffered(idle.ul_teid), 64);
    assert_eq!(
        n.policies.take_notifications(),
        vec![idle.ul_teid],
        "a new period"
    );
}

#[test]
fn a_handover_with_sndem_sends_an_end_marker_on_the_old_tunnel() {
    let mut n = Node::new();
    let count = Policy {
        count: true,
        ..Policy::default()
    };
    let before = tunnel(7, count);
    n.install(&before);
    n.inject(PortId::Inet, &[downstream(before.ue, 100, 0)]);
    let after = Tunnel {
        teid: 0x999,
        enb: Ipv4Addr::new(10, 2, 9, 9),
        policy: Policy {
            end_marker: true,
            ..count
        },
        ..before
    };
    n.install(&after);
    n.inject(PortId::Inet, &[downstream(before.ue, 100, 1)]);
    n.poll();
    n.inject(PortId::Inet, &[downstream(before.ue, 100, 2)]);
    assert_eq!(n.ran.len(), 4);
    assert_eq!(g_pdu(&n.ran[0]).0, before.teid);
    assert_eq!(g_pdu(&n.ran[1]).0, 0x999);
    let em = &n.ran[2];
    let p = parse_frame(em).unwrap();
    let FrameKind::Gtpu(g) = p.kind else {
        panic!("GTP-U")
    };
    assert_eq!((g.msg_type, g.teid), (254, before.teid));
    assert_eq!(g.outer.dst_addr, IpAddr::V4(before.enb));
    assert_eq!(g.outer.src_addr, IpAddr::V4(sim_ran_addr(0)));
    assert_eq!(
        &em[..6],
        &sim_mac(PortId::Ran, 0, true),
        "to the ran port's peer"
    );
    assert_eq!(&em[6..12], &sim_mac(PortId::Ran, 0, false));
    assert_eq!(n.engine.counters().end_markers, 1);
    // No End Marker without SNDEM, or when the tunnel did not move.
    n.install(&Tunnel {
        teid: 0xaaa,
        policy: count,
        ..after
    });
    n.install(&Tunnel {
        teid: 0xaaa,
        ..after
    });
    n.poll();
    assert_eq!(n.engine.counters().end_markers, 1);
    assert_eq!(n.policies.stats().end_markers_queued, 0);
}

#[test]
fn entries_without_a_policy_forward_as_before() {
    let mut n = Node::new();
    let t = tunnel(8, Policy::default());
    n.install(&t);
    assert_eq!(lte::local_slot(&n.fib.lookup(&t.key()).unwrap()), 0);
    assert_eq!(n.fib.lookup(&t.key()).unwrap(), t.value().to_vec());
    n.inject(PortId::Inet, &[downstream(t.ue, 100, 0)]);
    n.inject(PortId::Ran, &[uplink(&t, 100)]);
    assert_eq!((n.ran.len(), n.inet.len()), (1, 1));
    assert_eq!(n.policies.stats().slots, 0);
}

/// A G-PDU on `t`'s uplink TEID around an ICMPv6 Router Solicitation from a link-local
/// address to all routers (what a UE sends when its PDU session comes up).
fn router_solicitation(t: &Tunnel) -> (Vec<u8>, Vec<u8>) {
    let src: Ipv6Addr = "fe80::1234".parse().unwrap();
    let dst: Ipv6Addr = "ff02::2".parse().unwrap();
    let mut ip = vec![0u8; 40 + 8];
    ip[0] = 0x60;
    ip[4..6].copy_from_slice(&8u16.to_be_bytes());
    ip[6] = 58;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&src.octets());
    ip[24..40].copy_from_slice(&dst.octets());
    ip[40] = 133;
    let c = sb_wire::checksum::upper_layer(src.into(), dst.into(), 58, &ip[40..]).unwrap();
    ip[42..44].copy_from_slice(&c.to_be_bytes());
    let tunnel = GtpuTunnel::new(
        EthernetAddress([2, 0, 0, 0, 0, 5]),
        EthernetAddress(sim_mac(PortId::Ran, 0, false)),
        OuterIp::V4 {
            src: t.enb,
            dst: sim_ran_addr(0),
        },
        t.uplink_teid(),
    );
    let mut f = vec![0u8; tunnel.header_len() + ip.len()];
    tunnel.encap_into(&ip, &mut f).unwrap();
    (f, ip)
}

#[test]
fn router_solicitations_go_to_the_control_plane_and_its_frames_out_of_ran() {
    let mut n = Node::new();
    let t = Tunnel {
        ue: IpAddr::V6("2001:db8:7::".parse().unwrap()),
        ..tunnel(9, Policy::default())
    };
    n.install(&t);
    let (rs, ip) = router_solicitation(&t);
    n.inject(PortId::Ran, std::slice::from_ref(&rs));
    assert!(n.inet.is_empty(), "not forwarded to the Internet");
    let c = n.engine.counters();
    assert_eq!((c.to_cp, c.ports[PortId::Ran as usize].dropped), (1, 0));
    assert_eq!(n.policies.take_to_cp(), Some((t.uplink_teid(), ip)));
    assert_eq!(n.policies.take_to_cp(), None);
    // An unknown TEID is not the CP function's.
    let other = Tunnel {
        ul_teid: 0x0300_00ff,
        ..t
    };
    n.inject(PortId::Ran, &[router_solicitation(&other).0]);
    assert_eq!(n.engine.counters().dropped(Drop::UnknownTeid), 1);
    assert_eq!(n.policies.take_to_cp(), None);
    // The queue is bounded: the rest are counted lost (and as no room).
    let many = vec![rs; sb_engine::policy::CP_QUEUE + 3];
    n.inject(PortId::Ran, &many);
    assert_eq!(n.policies.stats().cp_lost, 3);
    assert_eq!(n.engine.counters().dropped(Drop::NoRoom), 3);
    while n.policies.take_to_cp().is_some() {}
    // A frame the control plane made for the UE leaves ran on the next loop, MACs set.
    let frame = uplink(&tunnel(1, Policy::default()), 60);
    assert!(n.policies.queue_access_frame(frame.clone()));
    n.ran.clear(); // The Error Indication of the unknown TEID.
    n.poll();
    assert_eq!(n.ran.len(), 1);
    assert_eq!(n.ran[0][12..], frame[12..]);
    assert_eq!(n.ran[0][..6], sim_mac(PortId::Ran, 0, true));
    let c = n.engine.counters();
    assert_eq!((c.from_cp, c.end_markers), (1, 0));
}

/// The maps of the sessions given slots are allocated for the sessions a node expects
/// (`Policies::reserve`): they do not double (holding the control thread, at every node
/// together) before that many came.
#[test]
fn reserved_slot_maps_do_not_grow_before_their_sessions_came() {
    let p = Policies::new(1, 10_000);
    p.reserve(5_000);
    let room = p.reserved();
    assert!(room >= 5_000, "{room}");
    let policy = Policy {
        dl_mbr_kbps: 1_000,
        ul_mbr_kbps: 1_000,
        count: true,
        ..Policy::default()
    };
    for teid in 1..=5_000u32 {
        p.acquire(teid, &policy).unwrap();
    }
    assert_eq!(p.reserved(), room, "a slot map grew");
}
