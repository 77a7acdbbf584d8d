//! The fuzz targets' entry points (`fuzz/`: `pfcp_message`, `pfcp_restore`, `sdf_filter`), also run by
//! the property tests.

use crate::ie::{NodeId, RecoveryTimeStamp};
use crate::message::{
    pack_session, packed_cp_seid, packed_node_id, unpack_session, AssociationSetupRequest, Body,
    Message, PackedSession,
};
use crate::relay::{Relay, RelayKind};
use crate::upf::{
    Applied, Config, Failure, FibChange, Placement, Sessions, Token, UeChange, Upf, Usage,
    UsageRead,
};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// A cluster that accepts everything (the first change of every third call is left pending
/// and completed on the next datagram).
#[derive(Default)]
struct Accept {
    calls: u64,
    pending: Vec<Token>,
    /// Usage reads left pending (every other one).
    reads: Vec<Token>,
}

impl Sessions for Accept {
    fn place(&mut self, ues: &[IpAddr]) -> Result<Placement, Failure> {
        let node = ues.len() as u16 % 4;
        Ok(Placement {
            node,
            ran: Ipv4Addr::new(10, 1, 0, node as u8 + 1),
        })
    }
    fn apply(&mut self, token: Token, _: &[FibChange], _: &[UeChange]) -> Result<Applied, Failure> {
        self.calls += 1;
        match self.calls % 5 {
            0 => Err(Failure::NoResources),
            3 => {
                self.pending.push(token);
                Ok(Applied::Pending)
            }
            _ => Ok(Applied::Done),
        }
    }
    fn read_usage(&mut self, token: Token, ul_teids: &[u32]) -> UsageRead {
        self.calls += 1;
        if self.calls % 2 == 0 {
            self.reads.push(token);
            return UsageRead::Pending;
        }
        let u = |t: u32| Usage {
            ul_bytes: u64::from(t) << 20,
            dl_bytes: u64::from(t),
            ul_packets: 3,
            dl_packets: u64::from(t >> 8),
        };
        UsageRead::Now(ul_teids.iter().map(|&t| (t, u(t))).collect())
    }
}

/// The SDF Filter reader (outside bytes from an SMF's PDI): a value or an error, never a
/// panic.
pub fn sdf_filter(data: &[u8]) {
    let _ = crate::sdf::SdfFilter::read(data);
}

/// Parses `data` as a datagram; whatever parses must build, and parse again to itself. Then
/// feeds `data` to a UPF endpoint (one of a cluster's, relaying) with an association from the
/// sender, twice (the second time is a retransmission), then as a relayed session request and
/// a replicated association request from another endpoint, and checks that everything it
/// sends (to peers, and the responses it relays back) parses. `data` as a relay datagram
/// must not panic either, nor `data` read as a packed session or a kept one.
pub fn pfcp_message(data: &[u8]) {
    let _ = Relay::parse(data, b"fuzz key");
    // A usage relay's payload (its tag verified, its sender another version).
    let _ = crate::relay::Meter::parse(data);
    // Bytes as a kept session: an error or a session, never a panic.
    let _ = unpack_session(data);
    let _ = packed_node_id(data);
    let _ = packed_cp_seid(data);
    // And as a kept session's differences from a template (the first half of the data).
    {
        let mut shapes = crate::shapes::Shapes::default();
        let (t, k) = data.split_at(data.len() / 2);
        shapes.encode(t);
        let mut out = Vec::new();
        let _ = shapes.decode(k, &mut out);
        // What is encoded decodes to itself.
        let kept = shapes.encode(k);
        out.clear();
        assert!(shapes.decode(&kept, &mut out).is_some());
        assert_eq!(out, k);
        // And with a head (a session's placement).
        out.clear();
        let _ = shapes.decode_with_head(k, &mut out);
        let head = [t.len() as u8, 0, 10, 2, 0, 1];
        let kept = shapes.encode_with_head(head, k);
        out.clear();
        assert_eq!(shapes.decode_with_head(&kept, &mut out), Some(head));
        assert_eq!(out, k);
    }
    if let Ok(msg) = Message::parse(data) {
        let bytes = msg
            .to_bytes()
            .expect("a parsed message can be written again");
        assert_eq!(Message::parse(&bytes).as_ref(), Ok(&msg));
        if let Body::SessionEstablishmentRequest(r) = &msg.body {
            // The session the endpoint keeps packed reads back as it was.
            let pdrs: Vec<_> = (r.create_pdr.iter())
                .enumerate()
                .map(|(i, p)| (p.clone(), (i % 2 == 1).then_some(i as u32)))
                .collect();
            let packed = pack_session(
                &r.node_id,
                &r.cp_f_seid,
                pdrs.iter().map(|(p, t)| (p, *t)),
                &r.create_far,
                &r.create_qer,
                &r.create_urr,
                r.create_bar.as_ref(),
            )
            .expect("a session that parsed packs");
            let want = PackedSession {
                node_id: r.node_id.clone(),
                cp_f_seid: r.cp_f_seid,
                pdrs,
                fars: r.create_far.clone(),
                qers: r.create_qer.clone(),
                urrs: r.create_urr.clone(),
                bar: r.create_bar,
            };
            assert_eq!(unpack_session(&packed), Ok(want));
            assert_eq!(packed_node_id(&packed), Ok(r.node_id.clone()));
            assert_eq!(packed_cp_seid(&packed), Ok(r.cp_f_seid.seid));
        }
    }
    let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 8805);
    let cfg = Config::new(
        NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 100)),
        RecoveryTimeStamp(1),
        Ipv4Addr::new(10, 0, 0, 100),
    );
    let mut cfg = cfg;
    cfg.relay = true;
    cfg.allocator_id = 1;
    cfg.ue_pool_v4 = vec![(Ipv4Addr::new(10, 200, 0, 0), 30)];
    cfg.ue_pool_v6 = vec![("2001:db8::".parse().expect("an address"), 63)];
    let mut upf = Upf::new(cfg, Accept::default());
    let setup = Message {
        seid: None,
        sequence: 0xff_fff0,
        priority: None,
        body: Body::AssociationSetupRequest(AssociationSetupRequest {
            node_id: NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
            recovery_time_stamp: RecoveryTimeStamp(1),
            up_function_features: None,
            cp_function_features: None,
        }),
    };
    let bytes = setup.to_bytes().expect("buildable");
    let mut out = upf.handle(Duration::ZERO, peer, &bytes);
    for i in 1..3 {
        out.extend(upf.handle(Duration::from_secs(i), peer, data));
        for t in std::mem::take(&mut upf.sessions_impl_mut().pending) {
            out.extend(upf.complete(Duration::from_secs(i), t, Ok(())));
        }
    }
    for (i, kind) in [RelayKind::Session, RelayKind::Association]
        .into_iter()
        .enumerate()
    {
        let relay = Relay {
            to: 1,
            kind,
            peer,
            bytes: data.to_vec(),
        };
        out.extend(upf.handle_relay(Duration::from_secs(3 + i as u64), 2, relay));
        for t in std::mem::take(&mut upf.sessions_impl_mut().pending) {
            out.extend(upf.complete(Duration::from_secs(3 + i as u64), t, Ok(())));
        }
    }
    // The handling node's counts and buffered-data notices for every metered TEID, reads
    // answered late, then the timers: thresholds, quotas, periods, reports retransmitted and
    // given up, reads that time out.
    let teids: Vec<u32> = upf.metered_teids().collect();
    for (i, t) in teids.into_iter().enumerate() {
        let n = data.len() as u64 * (i as u64 + 1);
        let u = Usage {
            ul_bytes: n << 10,
            dl_bytes: n << 20,
            ul_packets: n,
            dl_packets: n,
        };
        out.extend(upf.usage(Duration::from_secs(5), t, u));
        out.extend(upf.usage(Duration::from_secs(5), t, Usage::default()));
        out.extend(upf.downlink_data(Duration::from_secs(5), t));
    }
    for t in std::mem::take(&mut upf.sessions_impl_mut().reads) {
        out.extend(upf.complete_usage(Duration::from_secs(5), t, &[(1, Usage::default())]));
    }
    for s in [6, 9, 12, 100, 4000] {
        out.extend(upf.poll(Duration::from_secs(s)));
    }
    while let Some(r) = upf.poll_relay() {
        if r.kind == RelayKind::Response {
            assert!(
                Message::parse(&r.bytes).is_ok(),
                "we relay only what parses"
            );
        }
    }
    for t in out {
        assert!(Message::parse(&t.bytes).is_ok(), "we send only what parses");
    }
}

/// A cluster that accepts every change at once.
pub(crate) struct AcceptAll;

impl Sessions for AcceptAll {
    fn place(&mut self, _: &[IpAddr]) -> Result<Placement, Failure> {
        Ok(Placement {
            node: 1,
            ran: Ipv4Addr::new(10, 1, 0, 2),
        })
    }
    fn apply(&mut self, _: Token, _: &[FibChange], _: &[UeChange]) -> Result<Applied, Failure> {
        Ok(Applied::Done)
    }
}

fn restore_endpoint() -> Upf<AcceptAll> {
    let mut c = Config::new(
        NodeId::Fqdn("upf.fuzz".into()),
        RecoveryTimeStamp(1),
        Ipv4Addr::new(10, 0, 0, 100),
    );
    c.allocator_id = 2;
    c.incarnation = 3;
    Upf::new(c, AcceptAll)
}

/// State records ([`Upf::restore_state`], fuzz target `pfcp_restore`): the data as a record
/// under a SEID and under an association's key, its first 8 bytes as the key of a real
/// session's record, and as flips of a real session's and
/// association's records. A restore is an error or a whole endpoint that then takes a
/// modification and a deletion of every session it restored, and whose records restore again.
pub fn pfcp_restore(data: &[u8]) {
    let smf = Ipv4Addr::new(10, 0, 0, 1);
    let peer = SocketAddr::new(IpAddr::V4(smf), 8805);
    // A real session's records.
    let mut real = restore_endpoint();
    real.track_state(true);
    let ue = IpAddr::V4(Ipv4Addr::new(10, 45, 0, 7));
    for m in [
        crate::smf::association_setup(1, smf, 5),
        crate::smf::establishment(2, smf, 9, ue, 77, Ipv4Addr::new(10, 2, 0, 2)),
    ] {
        real.handle(Duration::ZERO, peer, &m.to_bytes().expect("buildable"));
    }
    let records: Vec<(u64, Vec<u8>)> = (real.take_state_changes().into_iter())
        .filter_map(|(k, v)| Some((k, v?)))
        .collect();
    assert_eq!(records.len(), 2, "a session and its association");
    let try_restore = |recs: &[(u64, Vec<u8>)]| {
        let mut upf = restore_endpoint();
        upf.track_state(true);
        if upf
            .restore_state(recs.iter().map(|(k, v)| (*k, v.as_slice())))
            .is_err()
        {
            assert_eq!(
                upf.session_count(),
                0,
                "nothing restored from a refused record"
            );
            return;
        }
        let seids: Vec<u64> = upf.session_ids().collect();
        // Its records restore again.
        let again: Vec<(u64, Vec<u8>)> = (seids.iter())
            .filter_map(|&s| Some((s, upf.session_record(s)?)))
            .collect();
        let mut copy = restore_endpoint();
        assert!(copy
            .restore_state(again.iter().map(|(k, v)| (*k, v.as_slice())))
            .is_ok());
        for (i, s) in seids.into_iter().enumerate() {
            let m = Message {
                seid: Some(s),
                sequence: 10 + i as u32 * 2,
                priority: None,
                body: Body::SessionModificationRequest(Default::default()),
            };
            upf.handle(
                Duration::from_secs(1),
                peer,
                &m.to_bytes().expect("buildable"),
            );
            let d = Message {
                seid: Some(s),
                sequence: 11 + i as u32 * 2,
                priority: None,
                body: Body::SessionDeletionRequest,
            };
            upf.handle(
                Duration::from_secs(1),
                peer,
                &d.to_bytes().expect("buildable"),
            );
        }
        upf.poll(Duration::from_secs(100));
        let _ = upf.take_state_changes();
    };
    // The data as records of their own.
    let (seid, assoc) = (records[0].0, records[1].0);
    try_restore(&[(seid, data.to_vec())]);
    try_restore(&[(assoc, data.to_vec())]);
    // A real session's record under a key of the data (a damaged key: any slot, prefix,
    // generation).
    if let Some((key, _)) = data.split_first_chunk::<8>() {
        let key = u64::from_le_bytes(*key);
        try_restore(&[(key, records[0].1.clone())]);
        try_restore(&[(key, records[0].1.clone()), records[1].clone()]);
    }
    // The real records with bytes flipped: (position, xor) pairs from the data.
    for (k, rec) in &records {
        let mut r = rec.clone();
        for p in data.chunks(2) {
            if let [at, x] = p {
                let n = r.len();
                r[*at as usize % n] ^= x;
            }
        }
        let mut recs = records.clone();
        recs.retain(|(key, _)| key != k);
        recs.push((*k, r));
        try_restore(&recs);
    }
}
