//! Uplink frames handled in a batch (`App::access_batch`: the TEID lookups batched and
//! prefetched) give every frame the result that handling them one by one (`App::access`, one
//! lookup each, as the engine did before) gives it: the same verdict, the same bytes, the same
//! usage counted, MBR tokens taken and Router Solicitations queued. Random mixes of known and
//! unknown TEIDs, echo requests, malformed frames and every uplink check, at the application
//! and through `Engine::process` (against an engine whose application handles frames one by
//! one).

use proptest::prelude::*;
use sb_engine::app::{Access, App, ErrorReply};
use sb_engine::cluster::{sim_engine, sim_mac, sim_ran_addr};
use sb_engine::lte::{self, Lte, Policy, Tunnel, KEY_BYTES, UPLINK_VALUE_BYTES, VALUE_BYTES};
use sb_engine::policy::Policies;
use sb_engine::{Arch, CuckooFib, Drop, Engine, Outputs, PortId};
use sb_packet::{Meta, PacketBatch};
use sb_wire::{
    EthernetAddress, GtpuRepr, GtpuTunnel, OuterIp, PacketBuilder, PduSession, GTPU_PORT,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

const SEED: u64 = 5;
const BATCH: usize = 64;

/// The tunnels of the node: IPv4 and IPv6, with and without a QFI, no policy, counting, a
/// closed uplink gate, a small uplink MBR (6000 bytes of burst, then drops: the clock never
/// moves), two flows of a session sharing a small uplink AMBR.
fn tunnels() -> Vec<Tunnel> {
    let v4 = |i: u8| IpAddr::V4(Ipv4Addr::new(100, 64, 0, i));
    let v6 = |i: u16| IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, i, 0, 0, 0, 0, 0));
    let counting = Policy {
        count: true,
        ..Policy::default()
    };
    let shared = Policy {
        count: true,
        ul_ambr_kbps: 8,
        session: 0x0300_0007,
        ..Policy::default()
    };
    let policies = [
        (v4(1), 0, Policy::default()),
        (v4(2), 0, counting),
        (v6(3), 5, counting),
        (
            v4(4),
            0,
            Policy {
                ul_gate_closed: true,
                ..counting
            },
        ),
        (
            v4(5),
            9,
            Policy {
                ul_mbr_kbps: 8,
                ..counting
            },
        ),
        (v6(6), 0, Policy::default()),
        (v4(7), 0, shared),
        (v6(8), 17, shared),
    ];
    policies
        .into_iter()
        .enumerate()
        .map(|(i, (ue, qfi, policy))| Tunnel {
            ue,
            teid: 0x100 + i as u32,
            enb: Ipv4Addr::new(10, 2, 0, i as u8),
            node: 0,
            qci: 9,
            ul_teid: 0x0300_0001 + i as u32,
            qfi,
            rqi: false,
            policy,
            owner: 1,
        })
        .collect()
}

/// The node's uplink table and policies with `ts` installed as its control thread installs
/// them (`lte::local_entry`: slots given in order, so two setups have the same slot ids).
fn tables(ts: &[Tunnel]) -> (sb_cuckoo::Writer, sb_cuckoo::Reader, Arc<Policies>) {
    let none: [(&[u8], &[u8]); 0] = [];
    let (mut w, r) =
        sb_engine::fib::cuckoo_table_with_room(4, UPLINK_VALUE_BYTES, SEED, 100, none.into_iter())
            .unwrap()
            .into_concurrent();
    let policies = Arc::new(Policies::new(1, 100));
    for t in ts {
        let e = lte::local_entry(&policies, &t.key(), &t.value()).unwrap();
        w.insert(&e.uplink_key, &e.uplink_value).unwrap();
    }
    (w, r, policies)
}

/// Takes 5,800 of the 6,000 bytes of burst of the MBR and the AMBR tunnels (4, 6 and 7), so
/// that a batch finds them about to refuse: which of their packets pass depends on the order.
fn prime<A: App>(app: &mut A, ts: &[Tunnel]) {
    let mut batch = PacketBatch::new(BATCH);
    for t in [4, 6] {
        for _ in 0..5 {
            assert!(batch.push(&frame(ts, 0, t, 1160)));
        }
    }
    for i in 0..batch.len() {
        assert_eq!(app.access(&mut batch, i), Ok(Access::ToExternal));
    }
}

fn lte_app(reader: sb_cuckoo::Reader, policies: Arc<Policies>) -> Lte {
    Lte::new(
        lte::LteConfig {
            ran_addrs: vec![sim_ran_addr(0)],
            ran_mtu: 1500,
            icmp_src: Ipv4Addr::new(10, 0, 0, 1),
            icmp_src6: lte::default_icmp_src6(0),
        },
        reader,
    )
    .with_policies(policies, 0)
}

fn server_for(ue: IpAddr) -> IpAddr {
    match ue {
        IpAddr::V4(_) => Ipv4Addr::new(203, 0, 113, 5).into(),
        IpAddr::V6(_) => "2001:db8:ffff::5".parse::<Ipv6Addr>().unwrap().into(),
    }
}

fn to_ran(ip: &[u8], teid: u32, qfi: Option<u8>) -> Vec<u8> {
    let tunnel = GtpuTunnel {
        pdu_session: qfi.map(|q| PduSession {
            pdu_type: PduSession::UL,
            qfi: q,
            rqi: false,
        }),
        ..GtpuTunnel::new(
            EthernetAddress([2, 0, 0, 0, 0, 5]),
            EthernetAddress(sim_mac(PortId::Ran, 0, false)),
            OuterIp::V4 {
                src: Ipv4Addr::new(198, 51, 100, 7),
                dst: sim_ran_addr(0),
            },
            teid,
        )
    };
    let mut f = vec![0u8; tunnel.header_len() + ip.len()];
    tunnel.encap_into(ip, &mut f).unwrap();
    f
}

/// An inner IP packet from `src` of `len` bytes or so, TTL `ttl`.
fn inner(src: IpAddr, ttl: u8, len: usize) -> Vec<u8> {
    let b = PacketBuilder {
        ttl,
        ..PacketBuilder::udp(
            EthernetAddress([2; 6]),
            EthernetAddress([2; 6]),
            src,
            server_for(src),
            5000,
            443,
        )
    };
    let payload = vec![7u8; len.max(b.header_len()) - b.header_len() + 14];
    let mut f = vec![0u8; b.header_len() + payload.len()];
    let n = b.build(&payload, &mut f).unwrap();
    f[14..n].to_vec()
}

fn router_solicitation() -> Vec<u8> {
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
    ip
}

fn gtpu_message(msg_type: u8, teid: u32) -> Vec<u8> {
    let g = GtpuRepr {
        msg_type,
        teid,
        seq_number: Some(7),
        npdu_number: None,
        extensions: None,
    };
    let mut msg = vec![0u8; g.header_len()];
    g.emit(&mut msg, 0).unwrap();
    let b = PacketBuilder::udp(
        EthernetAddress([2, 0, 0, 0, 0, 5]),
        EthernetAddress(sim_mac(PortId::Ran, 0, false)),
        Ipv4Addr::new(192, 0, 2, 77).into(),
        sim_ran_addr(0).into(),
        40000,
        GTPU_PORT,
    );
    let mut f = vec![0u8; b.header_len() + msg.len()];
    let n = b.build(&msg, &mut f).unwrap();
    f.truncate(n);
    f
}

/// An ARP request for the node's `ran` address.
fn arp_request() -> Vec<u8> {
    let mut f = vec![0u8; 42];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 5]);
    f[12..14].copy_from_slice(&[0x08, 0x06]);
    f[14..22].copy_from_slice(&[0, 1, 0x08, 0, 6, 4, 0, 1]);
    f[22..28].copy_from_slice(&[2, 0, 0, 0, 0, 5]);
    f[28..32].copy_from_slice(&[10, 1, 0, 99]);
    f[38..42].copy_from_slice(&sim_ran_addr(0).octets());
    f
}

/// Frame of kind `kind` about tunnel `t` (of `ts`), inner packet of about `len` bytes.
fn frame(ts: &[Tunnel], kind: u8, t: usize, len: usize) -> Vec<u8> {
    let tun = &ts[t % ts.len()];
    let other = &ts[(t + 1) % ts.len()];
    let teid = tun.uplink_teid();
    let qfi = (tun.qfi != 0).then_some(tun.qfi);
    match kind {
        // Known TEID, the tunnel's UE (with its container when it has a QFI).
        0..=5 => to_ran(&inner(tun.ue, 64, len), teid, qfi),
        // Unknown TEID.
        6 => to_ran(&inner(tun.ue, 64, len), 0x0999_0000 + t as u32, None),
        7 => gtpu_message(sb_wire::gtpu::msg_type::ECHO_REQUEST, 0),
        // TTL out.
        8 => to_ran(&inner(tun.ue, 1, len), teid, qfi),
        // Another UE's source on this tunnel.
        9 => to_ran(&inner(other.ue, 64, len), teid, None),
        // A container naming another QFI (checked only when the tunnel has one).
        10 => to_ran(&inner(tun.ue, 64, len), teid, Some(tun.qfi % 63 + 1)),
        11 => to_ran(&router_solicitation(), teid, None),
        // Truncated.
        12 => {
            let f = to_ran(&inner(tun.ue, 64, len), teid, None);
            f[..f.len().min(14 + 20 + 8 + 4)].to_vec()
        }
        // Not GTP-U: a plain UDP packet to the node.
        13 => {
            let mut f = to_ran(&inner(tun.ue, 64, len), teid, None);
            f[14 + 22..14 + 24].copy_from_slice(&4000u16.to_be_bytes());
            f
        }
        // An outer fragment.
        14 => {
            let mut f = to_ran(&inner(tun.ue, 64, len), teid, None);
            f[14 + 6] |= 0x20;
            sb_wire::Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
            f
        }
        // An End Marker (not a G-PDU), or an echo request on a known TEID.
        15 => gtpu_message(254, teid),
        16 => gtpu_message(sb_wire::gtpu::msg_type::ECHO_REQUEST, teid),
        _ => arp_request(),
    }
}

/// What a run leaves: per frame its result (`None`: not handed to the application) and bytes,
/// the usage of every tunnel, the Router Solicitations queued for the control plane.
type Trace = (
    Vec<(Option<Result<Access, Drop>>, Vec<u8>)>,
    Vec<Option<sb_engine::policy::Usage>>,
    Vec<(u32, Vec<u8>)>,
);

fn trace(
    ts: &[Tunnel],
    policies: &Policies,
    batch: &PacketBatch,
    results: Vec<Option<Result<Access, Drop>>>,
) -> Trace {
    let frames = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| (r, batch.get(i).to_vec()))
        .collect();
    let usage = ts.iter().map(|t| policies.usage(t.uplink_teid())).collect();
    let mut to_cp = Vec::new();
    while let Some(x) = policies.take_to_cp() {
        to_cp.push(x);
    }
    (frames, usage, to_cp)
}

/// The frames through a fresh application: one by one (`access`) or in one batch
/// (`access_batch`), handing it the frames whose `pick` is true.
fn run_app(ts: &[Tunnel], frames: &[Vec<u8>], pick: &[bool], batched: bool) -> Trace {
    let (_w, reader, policies) = tables(ts);
    let mut app = lte_app(reader, policies.clone());
    prime(&mut app, ts);
    let mut batch = PacketBatch::new(BATCH);
    for f in frames {
        assert!(batch.push(f));
    }
    let idx: Vec<usize> = (0..frames.len()).filter(|&i| pick[i]).collect();
    let mut results = vec![None; frames.len()];
    if batched {
        let mut out = vec![Err(Drop::NoRoom); idx.len()];
        app.access_batch(&mut batch, &idx, &mut out);
        for (&i, r) in idx.iter().zip(out) {
            results[i] = Some(r);
        }
    } else {
        for &i in &idx {
            results[i] = Some(app.access(&mut batch, i));
        }
    }
    trace(ts, &policies, &batch, results)
}

/// The LTE application as it handled the access port before its lookups were batched: the
/// default `access_batch` (each frame through `access`, one lookup each); everything else
/// delegated.
struct OneByOne(Lte);

impl App for OneByOne {
    fn key_bytes(&self) -> usize {
        self.0.key_bytes()
    }
    fn value_bytes(&self) -> usize {
        self.0.value_bytes()
    }
    fn downstream_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop> {
        self.0.downstream_key(frame, key, meta)
    }
    fn fabric_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop> {
        self.0.fabric_key(frame, key, meta)
    }
    fn egress_node(&self, value: &[u8]) -> u16 {
        self.0.egress_node(value)
    }
    fn apply(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop> {
        self.0.apply(batch, i, value)
    }
    fn admit(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop> {
        self.0.admit(batch, i, value)
    }
    fn split(
        &mut self,
        batch: &mut PacketBatch,
        i: usize,
        pieces: &mut PacketBatch,
    ) -> Result<usize, Drop> {
        self.0.split(batch, i, pieces)
    }
    fn access(&mut self, batch: &mut PacketBatch, i: usize) -> Result<Access, Drop> {
        self.0.access(batch, i)
    }
    fn set_clock(&mut self, now_ns: u64) {
        self.0.set_clock(now_ns)
    }
    fn prefetch(&self, value: &[u8]) {
        self.0.prefetch(value)
    }
    fn poll(&mut self) {
        self.0.poll()
    }
    fn take_access_frames(&mut self, out: &mut PacketBatch) -> usize {
        self.0.take_access_frames(out)
    }
    fn take_from_cp(&mut self) -> u64 {
        self.0.take_from_cp()
    }
    fn take_released(&mut self, rx: &mut PacketBatch) -> usize {
        self.0.take_released(rx)
    }
    fn released_done(&mut self) {
        self.0.released_done()
    }
    fn answers(&self, why: Drop) -> bool {
        self.0.answers(why)
    }
    fn error_reply(
        &mut self,
        batch: &mut PacketBatch,
        i: usize,
        port: PortId,
        why: Drop,
    ) -> Option<ErrorReply> {
        self.0.error_reply(batch, i, port, why)
    }
}

/// What an engine run leaves: the frames out of each port, in order, and the counters.
type EngineTrace = (Vec<Vec<u8>>, Vec<Vec<u8>>, sb_engine::Counters);

fn empty_fib() -> Box<dyn sb_engine::Fib> {
    let none: [(&[u8], &[u8]); 0] = [];
    let (_w, fib) = CuckooFib::build(KEY_BYTES, VALUE_BYTES, SEED, none.into_iter()).unwrap();
    Box::new(fib)
}

fn drive<A: App>(engine: &mut Engine<A>, frames: &[Vec<u8>], cuts: &[usize]) -> EngineTrace {
    let mut out = Outputs::new(BATCH, sb_packet::DEFAULT_BUF_SIZE);
    let mut rx = PacketBatch::new(BATCH);
    let (mut inet, mut ran) = (Vec::new(), Vec::new());
    let mut at = 0;
    for &n in cuts.iter().chain(std::iter::once(&frames.len())) {
        let end = (at + n.max(1)).min(frames.len());
        for f in &frames[at..end] {
            assert!(rx.push(f));
        }
        engine.process(PortId::Ran, &mut rx, &mut out);
        inet.extend(out.inet.iter().map(<[u8]>::to_vec));
        ran.extend(out.ran.iter().map(<[u8]>::to_vec));
        assert!(out.fabric.is_empty());
        out.inet.clear();
        out.ran.clear();
        at = end;
        if at == frames.len() {
            break;
        }
    }
    (inet, ran, engine.counters().clone())
}

fn engine_of(reader: sb_cuckoo::Reader) -> Engine<Lte> {
    sim_engine(Arch::FullDup, 0, 1, SEED, None, empty_fib(), reader, BATCH).unwrap()
}

fn frames_of(ts: &[Tunnel], spec: &[(u8, usize, usize)]) -> Vec<Vec<u8>> {
    spec.iter()
        .map(|&(k, t, len)| frame(ts, k, t, len))
        .collect()
}

fn spec() -> impl Strategy<Value = Vec<(u8, usize, usize)>> {
    prop::collection::vec((0u8..18, 0usize..8, 40usize..400), 1..=BATCH)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The application: every frame's result, bytes, usage and queued RS are those of one
    /// by one, for a batch or any subset of it (the engine hands over the frames that are not
    /// ARP).
    #[test]
    fn a_batch_gives_each_frame_its_one_by_one_result(
        spec in spec(),
        pick in prop::collection::vec(prop::bool::weighted(0.85), BATCH),
    ) {
        let ts = tunnels();
        let frames = frames_of(&ts, &spec);
        let pick = &pick[..frames.len()];
        let one = run_app(&ts, &frames, pick, false);
        let all = run_app(&ts, &frames, pick, true);
        prop_assert_eq!(one, all);
    }

    /// The engine on the ran port: the frames out of inet and ran, in order, and every
    /// counter, as with an application that handles frames one by one, whatever the batches.
    #[test]
    fn the_engine_forwards_uplink_batches_as_one_by_one(
        spec in spec(),
        cuts in prop::collection::vec(1usize..BATCH, 0..6),
    ) {
        let ts = tunnels();
        let frames = frames_of(&ts, &spec);
        let (_w1, r1, p1) = tables(&ts);
        let mut batched = engine_of(r1);
        batched.app_mut().set_policies(p1.clone(), 0);
        prime(batched.app_mut(), &ts);
        // The one-by-one engine: the same configuration, its application wrapped.
        let (_w3, r3, p3) = tables(&ts);
        let cfg = batched.config().clone();
        let mut lte = lte_app(r3, p3.clone());
        prime(&mut lte, &ts);
        let mut one = Engine::new(cfg, None, empty_fib(), OneByOne(lte), BATCH).unwrap();
        let a = drive(&mut batched, &frames, &cuts);
        let b = drive(&mut one, &frames, &cuts);
        prop_assert_eq!(&a, &b);
        let usage = |p: &Policies| -> Vec<_> {
            ts.iter().map(|t| p.usage(t.uplink_teid())).collect()
        };
        prop_assert_eq!(usage(&p1), usage(&p3));
        let mut q1 = Vec::new();
        while let Some(x) = p1.take_to_cp() { q1.push(x); }
        let mut q3 = Vec::new();
        while let Some(x) = p3.take_to_cp() { q3.push(x); }
        prop_assert_eq!(q1, q3);
    }
}

/// One fixed mix, to see the cases are the ones meant: each check drops what it should.
#[test]
fn a_mixed_batch_covers_every_uplink_case() {
    let ts = tunnels();
    let spec: Vec<(u8, usize, usize)> = vec![
        (0, 0, 100),  // forwarded
        (6, 1, 100),  // unknown TEID
        (7, 0, 0),    // echo
        (0, 2, 100),  // IPv6, QFI 5: forwarded, counted
        (8, 1, 100),  // TTL
        (9, 0, 100),  // another UE's source
        (10, 2, 100), // another QFI
        (11, 5, 0),   // RS
        (12, 0, 100), // truncated
        (13, 0, 100), // not GTP-U
        (14, 0, 100), // outer fragment
        (15, 0, 0),   // End Marker
        (0, 3, 100),  // gate closed
        (6, 7, 100),  // unknown TEID
        (0, 1, 100),  // forwarded, counted
        (0, 4, 150),  // within the MBR's last 200 bytes
        (0, 4, 150),  // over it
        (0, 7, 150),  // within the session's AMBR (its other flow took 5,800 bytes)
        (0, 6, 150),  // over it
    ];
    let frames = frames_of(&ts, &spec);
    let pick = vec![true; frames.len()];
    let one = run_app(&ts, &frames, &pick, false);
    let all = run_app(&ts, &frames, &pick, true);
    assert_eq!(one, all);
    let got: Vec<Result<Access, Drop>> = all.0.iter().map(|(r, _)| r.unwrap()).collect();
    use Access::*;
    assert_eq!(got[0], Ok(ToExternal));
    assert_eq!(got[1], Err(Drop::UnknownTeid));
    assert_eq!(got[2], Ok(Reply));
    assert_eq!(got[3], Ok(ToExternal));
    assert_eq!(got[4], Err(Drop::Ttl));
    assert_eq!(got[5], Err(Drop::UplinkMismatch));
    assert_eq!(got[6], Err(Drop::QfiMismatch));
    assert_eq!(got[7], Err(Drop::ToCp));
    assert!(matches!(got[8], Err(Drop::Malformed(_))), "{:?}", got[8]);
    assert_eq!(got[9], Err(Drop::NotGpdu));
    assert_eq!(got[10], Err(Drop::OuterFragment));
    assert_eq!(got[11], Err(Drop::NotGpdu));
    assert_eq!(got[12], Err(Drop::Gate));
    assert_eq!(got[13], Err(Drop::UnknownTeid));
    assert_eq!(got[14], Ok(ToExternal));
    assert_eq!(got[15], Ok(ToExternal));
    assert_eq!(got[16], Err(Drop::Mbr));
    assert_eq!(got[17], Ok(ToExternal));
    assert_eq!(got[18], Err(Drop::Mbr));
    assert_eq!(all.2.len(), 1, "one RS for the control plane");
    let counted = all.1[1].unwrap();
    assert_eq!(counted.ul_packets, 1);
}
