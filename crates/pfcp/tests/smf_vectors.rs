//! The message sequences stock SMFs put on the wire (open5gs and free5GC, IE for IE as their
//! code builds them: `tests/data/smf/README.md` names the source line of every IE), replayed
//! through the endpoint: every request is accepted, and the forwarding each step leaves is
//! what the SMF asked for.

use sb_pfcp::*;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

/// A cluster of four nodes whose `ran` addresses are 10.3.0.1-4, with HashMaps for tables.
#[derive(Default)]
struct Cluster {
    down: HashMap<IpAddr, (u32, Ipv4Addr)>,
    up: HashMap<u32, IpAddr>,
    /// The QoS flow of each UE address as the UE changes say.
    qfi: HashMap<IpAddr, u8>,
    /// What each UE's handling node is told to enforce, and the End Markers asked for.
    policy: HashMap<IpAddr, UePolicy>,
    end_markers: usize,
    next: u16,
}

fn ran(node: u16) -> Ipv4Addr {
    Ipv4Addr::new(10, 3, 0, node as u8 + 1)
}

impl Sessions for Cluster {
    fn place(&mut self, _: &[IpAddr]) -> Result<Placement, Failure> {
        let node = self.next % 4;
        self.next += 1;
        Ok(Placement {
            node,
            ran: ran(node),
        })
    }
    fn placement_at(&self, addr: Ipv4Addr) -> Option<Placement> {
        (0..4)
            .find(|&n| ran(n) == addr)
            .map(|node| Placement { node, ran: addr })
    }
    fn apply(
        &mut self,
        _: Token,
        changes: &[FibChange],
        ues: &[UeChange],
    ) -> Result<Applied, Failure> {
        for u in ues {
            self.qfi.insert(u.ue, u.after.qfi);
            self.end_markers += usize::from(u.after.policy.end_marker);
            self.policy.insert(u.ue, u.after.policy);
        }
        for c in changes {
            match *c {
                FibChange::SetDownlink { ue, teid, peer, .. } => {
                    self.down.insert(ue, (teid, peer));
                }
                FibChange::RemoveDownlink { ue, .. } => {
                    assert!(self.down.remove(&ue).is_some(), "{c:?}");
                }
                FibChange::SetUplink { teid, ue, .. } => {
                    self.up.insert(teid, ue);
                }
                FibChange::RemoveUplink { teid, .. } => {
                    assert!(self.up.remove(&teid).is_some(), "{c:?}");
                }
            }
        }
        Ok(Applied::Done)
    }
}

const SMF: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 3, 0, 254)), 8805);
const GNB: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
const GNB2: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 11);

fn upf() -> Upf<Cluster> {
    upf_at(Ipv4Addr::new(10, 3, 0, 1))
}

/// The endpoint with PFCP address `pfcp`.
fn upf_at(pfcp: Ipv4Addr) -> Upf<Cluster> {
    let mut c = Config::new(
        NodeId::Fqdn("upf.sb.scalebricks".into()),
        RecoveryTimeStamp(1000),
        pfcp,
    );
    c.allocator_id = 1;
    c.endpoints = 4;
    Upf::new(c, Cluster::default())
}

fn vector(smf: &str, name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/smf")
        .join(smf)
        .join(format!("{name}.bin"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Sends `name` (its UP SEID replaced by `seid` when it has one) and returns the answer.
fn send(upf: &mut Upf<Cluster>, smf: &str, name: &str, seid: u64, t: u64) -> Message {
    let mut bytes = vector(smf, name);
    // The request parses as it is: the SMF's encoding is one we read.
    let req = Message::parse(&bytes).unwrap_or_else(|e| panic!("{smf} {name}: {e:?}"));
    if req.seid.is_some_and(|s| s != 0) {
        bytes[4..12].copy_from_slice(&seid.to_be_bytes());
    }
    let out = upf.handle(Duration::from_millis(t), SMF, &bytes);
    assert_eq!(out.len(), 1, "{smf} {name}: {out:?}");
    assert_eq!(out[0].to, SMF);
    let m = Message::parse(&out[0].bytes).unwrap();
    assert_eq!(m.sequence, req.sequence, "{smf} {name}");
    m
}

fn cause(m: &Message) -> (Cause, Option<FailedRuleId>, Option<OffendingIe>) {
    match &m.body {
        Body::AssociationSetupResponse(r) => (r.cause, None, None),
        Body::SessionEstablishmentResponse(r) => (r.cause, r.failed_rule_id, r.offending_ie),
        Body::SessionModificationResponse(r) => (r.cause, r.failed_rule_id, r.offending_ie),
        Body::SessionDeletionResponse(r) => (r.cause, None, r.offending_ie),
        b => panic!("{b:?}"),
    }
}

fn accepted(m: &Message, what: &str) {
    assert_eq!(
        cause(m),
        (Cause::REQUEST_ACCEPTED, None, None),
        "{what}: {m:?}"
    );
}

/// Establishes the session of `est` and returns its UP SEID and Created PDRs.
fn establish(upf: &mut Upf<Cluster>, smf: &str, est: &str) -> (u64, Vec<CreatedPdr>) {
    let a = send(upf, smf, "01-association-setup-request", 0, 1);
    accepted(&a, "association");
    let m = send(upf, smf, est, 0, 2);
    accepted(&m, est);
    let Body::SessionEstablishmentResponse(r) = m.body else {
        unreachable!()
    };
    (r.up_f_seid.expect("an F-SEID").seid, r.created_pdr)
}

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

/// The downlink tunnel's TEID and address of the Outer Header Creation in `name`.
fn ohc_of(smf: &str, name: &str) -> (u32, Ipv4Addr) {
    let m = Message::parse(&vector(smf, name)).unwrap();
    let Body::SessionModificationRequest(r) = m.body else {
        panic!("{m:?}")
    };
    let p = r.update_far[0]
        .update_forwarding_parameters
        .as_ref()
        .unwrap();
    match p.outer_header_creation.clone().unwrap() {
        OuterHeaderCreation::GtpuIpv4 { teid, addr } => (teid, addr),
        o => panic!("{o:?}"),
    }
}

/// The endpoint's PFCP address in the open5gs lifecycle (apart from every `ran` address).
const PFCP_ADDR: Ipv4Addr = Ipv4Addr::new(10, 3, 0, 100);
/// open5gs's SMF GTP-U address and the TEID it gives its UP-to-CP FAR (the session index).
const SMF_GTPU: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 3, 0, 254)), 2152);

/// An ICMPv6 Router Solicitation from `src` to `dst` (no options).
fn router_solicitation(src: &str, dst: &str) -> Vec<u8> {
    let (s, d): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
        (src.parse().unwrap(), dst.parse().unwrap());
    let mut ip = vec![0u8; 48];
    ip[0] = 0x60;
    ip[5] = 8;
    ip[6] = 58;
    ip[7] = 255;
    ip[8..24].copy_from_slice(&s.octets());
    ip[24..40].copy_from_slice(&d.octets());
    ip[40] = 133;
    ip
}

/// `cp`: the session's CP-to-UP TEID (open5gs's PDR 3), whose downlink follows the session's.
fn modify_steps(upf: &mut Upf<Cluster>, smf: &str, seid: u64, ue: IpAddr, cp: Option<u32>) {
    // The gNB's tunnel: downlink forwards.
    let m = send(
        upf,
        smf,
        "03-session-modification-request-gnb-tunnel",
        seid,
        3,
    );
    accepted(&m, "03");
    let (teid, gnb) = ohc_of(smf, "03-session-modification-request-gnb-tunnel");
    assert_eq!(gnb, GNB);
    assert_eq!(upf.sessions_impl().down.get(&ue), Some(&(teid, GNB)));
    // The SMF's Router Advertisements go down the gNB's tunnel, with the flow's QFI.
    if let Some(cp) = cp {
        let d = upf.downlink_from_cp(cp).expect("a CP-to-UP path");
        assert_eq!((d.teid, d.gnb, d.qfi), (teid, GNB, 1));
    }
    let policy = |upf: &Upf<Cluster>| upf.sessions_impl().policy[&ue];
    assert!(
        !policy(upf).buffer && policy(upf).count,
        "{:?}",
        policy(upf)
    );
    // Idle (BUFF|NOCP): downlink stops; the handling node buffers and tells of the first
    // packet.
    let m = send(upf, smf, "04-session-modification-request-idle", seid, 4);
    accepted(&m, "04");
    assert_eq!(upf.sessions_impl().down.get(&ue), None);
    if let Some(cp) = cp {
        assert_eq!(upf.downlink_from_cp(cp), None, "idle: no tunnel");
    }
    assert!(
        policy(upf).buffer && policy(upf).notify,
        "{:?}",
        policy(upf)
    );
    // Active again.
    let m = send(
        upf,
        smf,
        "05-session-modification-request-reactivate",
        seid,
        5,
    );
    accepted(&m, "05");
    let (teid, gnb) = ohc_of(smf, "05-session-modification-request-reactivate");
    assert_eq!(gnb, GNB);
    assert_eq!(upf.sessions_impl().down.get(&ue), Some(&(teid, GNB)));
    // Xn handover (SNDEM): the new gNB's tunnel.
    let m = send(
        upf,
        smf,
        "06-session-modification-request-xn-handover",
        seid,
        6,
    );
    accepted(&m, "06");
    let (teid2, gnb2) = ohc_of(smf, "06-session-modification-request-xn-handover");
    assert_eq!(gnb2, GNB2);
    assert_eq!(upf.sessions_impl().down.get(&ue), Some(&(teid2, GNB2)));
    if let Some(cp) = cp {
        let d = upf.downlink_from_cp(cp).unwrap();
        assert_eq!((d.teid, d.gnb), (teid2, GNB2));
    }
    // With an End Marker on the old tunnel first (SNDEM), asked once.
    assert_eq!(upf.sessions_impl().end_markers, 1);
    // The uplink forwarded throughout.
    assert!(upf.sessions_impl().up.values().any(|u| *u == ue));
    // Heartbeat.
    let h = send(upf, smf, "08-heartbeat-request", 0, 7);
    assert!(matches!(h.body, Body::HeartbeatResponse(_)), "{h:?}");
    // Deletion: nothing left.
    let m = send(upf, smf, "07-session-deletion-request", seid, 8);
    accepted(&m, "07");
    // One final usage report per URR (the cluster here counts nothing).
    let Body::SessionDeletionResponse(d) = &m.body else {
        panic!("{m:?}")
    };
    assert!(!d.usage_report.is_empty(), "{d:?}");
    for u in &d.usage_report {
        assert_eq!(u.trigger, UsageReportTrigger(UsageReportTrigger::TERMR));
    }
    assert!(upf.sessions_impl().down.is_empty());
    assert!(upf.sessions_impl().up.is_empty());
    assert_eq!(upf.session_count(), 0);
    if let Some(cp) = cp {
        assert_eq!(upf.downlink_from_cp(cp), None, "deleted");
    }
}

#[test]
fn open5gs_session_lifecycle() {
    let mut upf = upf_at(PFCP_ADDR);
    let (seid, created) = establish(&mut upf, "open5gs", "02-session-establishment-request");
    // PDR 2 and PDR 4 share CHOOSE ID 5; PDR 3 (from the CP function) has its own TEID.
    let teid = |id: u16| {
        created
            .iter()
            .find(|c| c.pdr_id == PdrId(id))
            .and_then(|c| match c.local_f_teid {
                Some(FTeid::Assigned { teid, ipv4, .. }) => {
                    assert!(ipv4.is_some());
                    Some(teid)
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("no F-TEID for PDR {id}: {created:?}"))
    };
    assert_eq!(teid(2), teid(4));
    assert_ne!(teid(2), teid(3));
    let ue = v4([10, 45, 0, 2]);
    // Uplink forwards from the establishment; downlink waits for the gNB (BUFF|NOCP).
    assert_eq!(upf.sessions_impl().up.get(&teid(2)), Some(&ue));
    assert_eq!(upf.sessions_impl().down.get(&ue), None);
    // The QER's QFI (1) is the UE's QoS flow.
    assert_eq!(upf.sessions_impl().qfi.get(&ue), Some(&1));
    // PDR 3's F-TEID is at the endpoint's PFCP address (where the node takes the SMF's
    // G-PDUs), the others at the handling node's ran address.
    let addr = |id: u16| match created.iter().find(|c| c.pdr_id == PdrId(id)) {
        Some(CreatedPdr {
            local_f_teid: Some(FTeid::Assigned { ipv4, .. }),
            ..
        }) => *ipv4,
        c => panic!("{c:?}"),
    };
    assert_eq!(addr(3), Some(PFCP_ADDR));
    assert_ne!(addr(2), Some(PFCP_ADDR));
    // PDR 4: a Router Solicitation on the uplink TEID goes to the SMF's F-TEID (FAR 3: TEID
    // 1 at its GTP-U address) as a G-PDU; a packet the SDF filter does not match does not.
    let rs = router_solicitation("fe80::1", "ff02::2");
    let t = upf.uplink_to_cp(teid(2), &rs).expect("the UP-to-CP path");
    assert_eq!(t.to, SMF_GTPU);
    assert_eq!(t.bytes[..8], [0x30, 0xff, 0, 48, 0, 0, 0, 1]);
    assert_eq!(t.bytes[8..], rs[..]);
    assert_eq!(
        upf.uplink_to_cp(teid(2), &router_solicitation("fe80::1", "ff02::1")),
        None
    );
    assert_eq!(upf.uplink_to_cp(teid(3), &rs), None, "not an uplink TEID");
    // Idle until the gNB's tunnel comes: nothing goes down.
    assert_eq!(upf.downlink_from_cp(teid(3)), None);
    assert_eq!(upf.downlink_from_cp(teid(2)), None, "not a CP-to-UP TEID");
    let st = upf.stats();
    assert_eq!((st.cp_uplink, st.cp_downlink, st.cp_unmatched), (1, 0, 4));
    modify_steps(&mut upf, "open5gs", seid, ue, Some(teid(3)));
    assert_eq!(upf.uplink_to_cp(teid(2), &rs), None, "deleted");
}

#[test]
fn open5gs_dual_stack_session_is_established() {
    let mut upf = upf();
    establish(
        &mut upf,
        "open5gs",
        "02v6-session-establishment-request-ipv4v6",
    );
    assert_eq!(upf.session_count(), 1);
    assert!(upf
        .sessions_impl()
        .up
        .values()
        .any(|u| *u == v4([10, 45, 0, 2])));
}

#[test]
fn free5gc_session_lifecycle() {
    let mut upf = upf();
    let (seid, created) = establish(&mut upf, "free5gc", "02-session-establishment-request");
    // The SMF allocated the uplink F-TEID (TEID 2 at 10.3.0.1): honoured, none created by us,
    // and the session is on the node of that address.
    assert!(created.is_empty(), "{created:?}");
    let ue = v4([10, 60, 0, 1]);
    assert_eq!(upf.sessions_impl().up.get(&2), Some(&ue));
    // FORW downlink without outer header creation: nothing to send to yet.
    assert_eq!(upf.sessions_impl().down.get(&ue), None);
    let (_, place) = upf.session(seid).unwrap();
    assert_eq!(place.ran, Ipv4Addr::new(10, 3, 0, 1));
    assert_eq!(upf.sessions_impl().qfi.get(&ue), Some(&1));
    modify_steps(&mut upf, "free5gc", seid, ue, None);
}

#[test]
fn free5gc_offline_charging_session_is_established() {
    let mut upf = upf();
    establish(
        &mut upf,
        "free5gc",
        "02c-session-establishment-request-offline-charging",
    );
    assert_eq!(upf.session_count(), 1);
}

/// Sends `m`: refused with Rule creation/modification failure, Failed Rule ID PDR 1.
fn refused_by_pdr_1(upf: &mut Upf<Cluster>, m: &Message) {
    let out = upf.handle(Duration::from_secs(1), SMF, &m.to_bytes().unwrap());
    let back = Message::parse(&out[0].bytes).unwrap();
    assert_eq!(
        cause(&back),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Pdr(1)),
            None
        )
    );
}

/// An SMF-allocated F-TEID another session holds, or at an address that is no node's, is
/// refused by the PDR naming it, and nothing changes.
#[test]
fn smf_allocated_f_teids_must_be_unique_and_ours() {
    let mut upf = upf();
    establish(&mut upf, "free5gc", "02-session-establishment-request");
    let mut m = Message::parse(&vector("free5gc", "02-session-establishment-request")).unwrap();
    let Body::SessionEstablishmentRequest(r) = &mut m.body else {
        unreachable!()
    };
    // Another UE, the same TEID.
    for p in &mut r.create_pdr {
        if let Some(ue) = &mut p.pdi.ue_ip_address {
            ue.ipv4 = Some(UeAddr::Addr(Ipv4Addr::new(10, 60, 0, 2)));
        }
    }
    m.sequence = 40;
    refused_by_pdr_1(&mut upf, &m);
    // A fresh TEID at an address that is none of the nodes'.
    let Body::SessionEstablishmentRequest(r) = &mut m.body else {
        unreachable!()
    };
    for p in &mut r.create_pdr {
        if let Some(FTeid::Assigned { teid, ipv4, .. }) = &mut p.pdi.local_f_teid {
            *teid = 77;
            *ipv4 = Some(Ipv4Addr::new(192, 0, 2, 1));
        }
    }
    m.sequence = 41;
    refused_by_pdr_1(&mut upf, &m);
    assert_eq!(upf.session_count(), 1);
    assert_eq!(upf.sessions_impl().up.len(), 1);
}
