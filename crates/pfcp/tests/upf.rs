//! The UPF endpoint against an in-memory cluster whose tables are HashMaps, checked against
//! what the control plane was told (the oracle) after every step.

use proptest::prelude::*;
use sb_pfcp::upf::{association_key, is_association_key};
use sb_pfcp::*;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The cluster: downlink and uplink tables, a capacity, and optionally deferred installs.
#[derive(Default)]
struct Cluster {
    down: HashMap<IpAddr, (u32, Ipv4Addr, u16)>,
    up: HashMap<u32, (IpAddr, Option<Ipv4Addr>, u16)>,
    /// Each UE address's whole forwarding as the `UeChange`s say, checked against the tables.
    ues: HashMap<IpAddr, UeFib>,
    capacity: Option<usize>,
    defer: bool,
    deferred: Vec<(Token, Vec<FibChange>, Vec<UeChange>)>,
    fail_next: Option<Failure>,
    applies: usize,
}

fn node_of(ue: IpAddr) -> u16 {
    match ue {
        IpAddr::V4(a) => (a.octets()[3] % 4) as u16,
        IpAddr::V6(a) => (a.octets()[15] % 4) as u16,
    }
}

fn ran(node: u16) -> Ipv4Addr {
    Ipv4Addr::new(10, 1, 0, node as u8 + 1)
}

impl Cluster {
    fn install(&mut self, changes: &[FibChange], ue_changes: &[UeChange]) -> Result<(), Failure> {
        let mut down = self.down.clone();
        let mut up = self.up.clone();
        for c in changes {
            match *c {
                FibChange::SetDownlink {
                    ue,
                    teid,
                    peer,
                    node,
                } => {
                    down.insert(ue, (teid, peer, node));
                }
                FibChange::RemoveDownlink { ue, node } => {
                    assert_eq!(down.remove(&ue).map(|e| e.2), Some(node), "{c:?}");
                }
                FibChange::SetUplink {
                    teid,
                    ue,
                    peer,
                    node,
                } => {
                    up.insert(teid, (ue, peer, node));
                }
                FibChange::RemoveUplink { teid, node, .. } => {
                    assert_eq!(up.remove(&teid).map(|e| e.2), Some(node), "{c:?}");
                }
            }
        }
        if self.capacity.is_some_and(|cap| down.len() + up.len() > cap) {
            return Err(Failure::NoResources);
        }
        // The UE changes: each starts from what the last said (a UE address is one session's),
        // ends at what the tables now hold, and together they name every UE address the
        // changes touched whose forwarding moved.
        let mut ues = self.ues.clone();
        for c in ue_changes {
            if let Some(d) = down.get(&c.ue) {
                assert_eq!(c.node, d.2, "{c:?}");
            }
            let before = ues.get(&c.ue).copied().unwrap_or_default();
            assert_eq!(before, c.before, "{c:?}");
            assert_ne!(c.before, c.after, "{c:?}");
            let now = UeFib {
                down: down.get(&c.ue).map(|e| (e.0, e.1)),
                up: up
                    .iter()
                    .filter(|(_, e)| e.0 == c.ue)
                    .map(|(t, _)| *t)
                    .min(),
                // The QFI and the policy are no table's: the UE change carries them.
                qfi: c.after.qfi,
                policy: c.after.policy,
            };
            assert_eq!(now, c.after, "{c:?}");
            if c.after.is_empty() {
                ues.remove(&c.ue);
            } else {
                ues.insert(c.ue, c.after);
            }
        }
        for c in changes {
            let ue = match *c {
                FibChange::SetDownlink { ue, .. }
                | FibChange::RemoveDownlink { ue, .. }
                | FibChange::SetUplink { ue, .. }
                | FibChange::RemoveUplink { ue, .. } => ue,
            };
            let was = self.ues.get(&ue).copied().unwrap_or_default();
            let is = ues.get(&ue).copied().unwrap_or_default();
            let told = ue_changes.iter().any(|u| u.ue == ue);
            assert_eq!(told, was != is, "{c:?}");
        }
        self.down = down;
        self.up = up;
        self.ues = ues;
        Ok(())
    }
}

impl Sessions for Cluster {
    fn place(&mut self, ues: &[IpAddr]) -> Result<Placement, Failure> {
        let node = node_of(ues[0]);
        Ok(Placement {
            node,
            ran: ran(node),
        })
    }
    fn apply(
        &mut self,
        token: Token,
        changes: &[FibChange],
        ues: &[UeChange],
    ) -> Result<Applied, Failure> {
        self.applies += 1;
        if let Some(f) = self.fail_next.take() {
            return Err(f);
        }
        if self.defer {
            self.deferred.push((token, changes.to_vec(), ues.to_vec()));
            return Ok(Applied::Pending);
        }
        self.install(changes, ues).map(|()| Applied::Done)
    }
}

const SMF: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const UPF_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 100);

fn smf_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(SMF), 8805)
}

fn config() -> Config {
    let mut c = Config::new(
        NodeId::Fqdn("upf.cluster".into()),
        RecoveryTimeStamp(1000),
        UPF_ADDR,
    );
    c.allocator_id = 3;
    c
}

fn upf() -> Upf<Cluster> {
    Upf::new(config(), Cluster::default())
}

/// A control plane: sequence numbers and message builders.
struct Smf {
    addr: SocketAddr,
    node: NodeId,
    seq: u32,
    now: Duration,
}

impl Smf {
    fn new() -> Self {
        Smf {
            addr: smf_addr(),
            node: NodeId::Ipv4(SMF),
            seq: 0,
            now: Duration::ZERO,
        }
    }

    fn send(&mut self, upf: &mut Upf<Cluster>, seid: Option<u64>, body: Body) -> Option<Message> {
        self.seq += 1;
        let msg = Message {
            seid,
            sequence: self.seq,
            priority: None,
            body,
        };
        self.send_bytes(upf, &msg.to_bytes().unwrap())
    }

    fn send_bytes(&mut self, upf: &mut Upf<Cluster>, bytes: &[u8]) -> Option<Message> {
        self.now += Duration::from_millis(1);
        let out = upf.handle(self.now, self.addr, bytes);
        assert!(out.len() <= 1, "{out:?}");
        out.first().map(|t| {
            assert_eq!(t.to, self.addr);
            Message::parse(&t.bytes).unwrap()
        })
    }

    fn associate(&mut self, upf: &mut Upf<Cluster>) -> AssociationSetupResponse {
        let body = Body::AssociationSetupRequest(AssociationSetupRequest {
            node_id: self.node.clone(),
            recovery_time_stamp: RecoveryTimeStamp(77),
            up_function_features: None,
            cp_function_features: None,
        });
        match self.send(upf, None, body).unwrap().body {
            Body::AssociationSetupResponse(r) => r,
            b => panic!("{b:?}"),
        }
    }

    fn establish(
        &mut self,
        upf: &mut Upf<Cluster>,
        req: SessionEstablishmentRequest,
    ) -> SessionEstablishmentResponse {
        let m = self
            .send(upf, Some(0), Body::SessionEstablishmentRequest(req))
            .unwrap();
        match m.body {
            Body::SessionEstablishmentResponse(r) => r,
            b => panic!("{b:?}"),
        }
    }

    fn modify(
        &mut self,
        upf: &mut Upf<Cluster>,
        seid: u64,
        req: SessionModificationRequest,
    ) -> (Option<u64>, SessionModificationResponse) {
        let m = self
            .send(upf, Some(seid), Body::SessionModificationRequest(req))
            .unwrap();
        match m.body {
            Body::SessionModificationResponse(r) => (m.seid, r),
            b => panic!("{b:?}"),
        }
    }

    fn delete(
        &mut self,
        upf: &mut Upf<Cluster>,
        seid: u64,
    ) -> (Option<u64>, SessionDeletionResponse) {
        let m = self
            .send(upf, Some(seid), Body::SessionDeletionRequest)
            .unwrap();
        match m.body {
            Body::SessionDeletionResponse(r) => (m.seid, r),
            b => panic!("{b:?}"),
        }
    }
}

fn ue_ip(ue: IpAddr, destination: bool) -> UeIpAddress {
    let (ipv4, ipv6) = match ue {
        IpAddr::V4(a) => (Some(UeAddr::Addr(a)), None),
        IpAddr::V6(a) => (None, Some(UeAddr::Addr(a))),
    };
    UeIpAddress {
        ipv4,
        ipv6,
        destination,
        ipv6_prefix_delegation: None,
        ipv6_prefix_length: None,
    }
}

fn pdi(source: Interface, ue: IpAddr, fteid: Option<FTeid>) -> Pdi {
    Pdi {
        source_interface: source,
        local_f_teid: fteid,
        network_instance: None,
        ue_ip_address: Some(ue_ip(ue, source == Interface::CORE)),
        other: vec![],
    }
}

fn down_pdr(ue: IpAddr) -> CreatePdr {
    CreatePdr {
        pdr_id: PdrId(1),
        precedence: Precedence(200),
        pdi: pdi(Interface::CORE, ue, None),
        outer_header_removal: None,
        far_id: Some(FarId(1)),
        urr_ids: vec![],
        qer_ids: vec![],
    }
}

fn up_pdr(ue: IpAddr) -> CreatePdr {
    CreatePdr {
        pdr_id: PdrId(2),
        precedence: Precedence(100),
        pdi: pdi(
            Interface::ACCESS,
            ue,
            Some(FTeid::Choose {
                ipv4: true,
                ipv6: false,
                choose_id: None,
            }),
        ),
        outer_header_removal: Some(OuterHeaderRemoval {
            description: 0,
            extension_header_deletion: None,
        }),
        far_id: Some(FarId(2)),
        urr_ids: vec![],
        qer_ids: vec![],
    }
}

fn down_far(tunnel: Option<(u32, Ipv4Addr)>) -> CreateFar {
    CreateFar {
        far_id: FarId(1),
        apply_action: ApplyAction(if tunnel.is_some() {
            ApplyAction::FORW
        } else {
            ApplyAction::DROP
        }),
        forwarding_parameters: tunnel.map(|(teid, addr)| ForwardingParameters {
            destination_interface: Some(Interface::ACCESS),
            network_instance: None,
            outer_header_creation: Some(OuterHeaderCreation::GtpuIpv4 { teid, addr }),
        }),
    }
}

fn up_far() -> CreateFar {
    CreateFar {
        far_id: FarId(2),
        apply_action: ApplyAction(ApplyAction::FORW),
        forwarding_parameters: Some(ForwardingParameters {
            destination_interface: Some(Interface::CORE),
            network_instance: None,
            outer_header_creation: None,
        }),
    }
}

fn session(
    cp_seid: u64,
    ue: IpAddr,
    tunnel: Option<(u32, Ipv4Addr)>,
) -> SessionEstablishmentRequest {
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF),
        cp_f_seid: FSeid {
            seid: cp_seid,
            ipv4: Some(SMF),
            ipv6: None,
        },
        create_pdr: vec![down_pdr(ue), up_pdr(ue)],
        create_far: vec![down_far(tunnel), up_far()],
        create_urr: vec![],
        create_qer: vec![],
        create_bar: None,
    }
}

fn retunnel(teid: u32, enb: Ipv4Addr) -> SessionModificationRequest {
    SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: FarId(1),
            apply_action: Some(ApplyAction(ApplyAction::FORW)),
            update_forwarding_parameters: Some(ForwardingParameters {
                destination_interface: Some(Interface::ACCESS),
                network_instance: None,
                outer_header_creation: Some(OuterHeaderCreation::GtpuIpv4 { teid, addr: enb }),
            }),
            pfcpsmreq_flags: None,
        }],
        ..Default::default()
    }
}

fn drop_downlink() -> SessionModificationRequest {
    SessionModificationRequest {
        update_far: vec![UpdateFar {
            far_id: FarId(1),
            apply_action: Some(ApplyAction(ApplyAction::DROP)),
            update_forwarding_parameters: None,
            pfcpsmreq_flags: None,
        }],
        ..Default::default()
    }
}

fn v4(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 45, 0, last))
}

/// A downlink tunnel: TEID and eNodeB.
type Tunnel = (u32, Ipv4Addr);

const ENB: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);

/// The cluster's tables are exactly the union of the endpoint's sessions' forwarding.
fn check_consistent(upf: &Upf<Cluster>) {
    let mut down = HashMap::new();
    let mut up = HashMap::new();
    for seid in upf.session_ids() {
        let (fwd, place) = upf.session(seid).unwrap();
        for (ue, &(teid, peer)) in &fwd.downlink {
            assert!(down.insert(*ue, (teid, peer, place.node)).is_none());
        }
        for (teid, &(ue, peer)) in &fwd.uplink {
            assert!(up.insert(*teid, (ue, peer, place.node)).is_none());
        }
    }
    assert_eq!(upf.sessions_impl().down, down);
    assert_eq!(upf.sessions_impl().up, up);
    // The running byte counts agree with a walk over the sessions and responses.
    let m = upf.memory();
    assert_eq!(m, upf.recount_memory());
    assert_eq!(m.packed == 0, upf.session_count() == 0, "{m:?}");
    assert!(m.packed_chunks >= m.packed, "{m:?}");
    assert!(m.sessions >= 8 * upf.session_count(), "{m:?}");
}

#[test]
fn heartbeat_is_answered_with_our_recovery_time_stamp() {
    let mut upf = upf();
    let mut smf = Smf::new();
    let m = smf
        .send(
            &mut upf,
            None,
            Body::HeartbeatRequest(Heartbeat {
                recovery_time_stamp: RecoveryTimeStamp(5),
            }),
        )
        .unwrap();
    assert_eq!(m.sequence, smf.seq);
    assert_eq!(
        m.body,
        Body::HeartbeatResponse(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(1000)
        })
    );
    // A peer restart shows in its heartbeat.
    smf.associate(&mut upf);
    smf.send(
        &mut upf,
        None,
        Body::HeartbeatRequest(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(78),
        }),
    );
    assert_eq!(upf.stats().peer_restarts, 1);
}

#[test]
fn association_setup_update_release() {
    let mut upf = upf();
    let mut smf = Smf::new();
    let r = smf.associate(&mut upf);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(r.node_id, NodeId::Fqdn("upf.cluster".into()));
    assert_eq!(r.recovery_time_stamp, RecoveryTimeStamp(1000));
    assert!(r
        .up_function_features
        .unwrap()
        .has(UpFunctionFeatures::FTUP));
    assert!(upf.is_associated(&NodeId::Ipv4(SMF)));
    let upd = Body::AssociationUpdateRequest(AssociationUpdateRequest {
        node_id: NodeId::Ipv4(SMF),
        up_function_features: None,
        cp_function_features: None,
    });
    let Body::AssociationUpdateResponse(u) = smf.send(&mut upf, None, upd.clone()).unwrap().body
    else {
        panic!()
    };
    assert_eq!(u.cause, Cause::REQUEST_ACCEPTED);
    // Sessions go with the association.
    let e = smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    assert_eq!(e.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.sessions_impl().down.len(), 1);
    let rel = Body::AssociationReleaseRequest(AssociationReleaseRequest {
        node_id: NodeId::Ipv4(SMF),
    });
    let Body::AssociationReleaseResponse(r) = smf.send(&mut upf, None, rel.clone()).unwrap().body
    else {
        panic!()
    };
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.association_count(), 0);
    assert_eq!(upf.session_count(), 0);
    assert!(upf.sessions_impl().down.is_empty() && upf.sessions_impl().up.is_empty());
    // Without association: update and release are refused.
    let Body::AssociationUpdateResponse(u) = smf.send(&mut upf, None, upd).unwrap().body else {
        panic!()
    };
    assert_eq!(u.cause, Cause::NO_ESTABLISHED_PFCP_ASSOCIATION);
    let Body::AssociationReleaseResponse(r) = smf.send(&mut upf, None, rel).unwrap().body else {
        panic!()
    };
    assert_eq!(r.cause, Cause::NO_ESTABLISHED_PFCP_ASSOCIATION);
    assert_eq!(upf.stats().rejected_no_association, 2);
}

#[test]
fn setup_again_replaces_the_association_and_drops_its_sessions() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    assert_eq!(smf.associate(&mut upf).cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.session_count(), 0);
    assert!(upf.sessions_impl().down.is_empty());
    assert!(upf.is_associated(&NodeId::Ipv4(SMF)));
}

#[test]
fn session_without_association_is_rejected_and_counted() {
    let mut upf = upf();
    let mut smf = Smf::new();
    let r = smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    assert_eq!(r.cause, Cause::NO_ESTABLISHED_PFCP_ASSOCIATION);
    assert_eq!(upf.sessions_impl().applies, 0);
    assert_eq!(upf.stats().rejected_no_association, 1);
    // Modification and deletion from a stranger are dropped.
    assert!(smf
        .send(
            &mut upf,
            Some(5),
            Body::SessionModificationRequest(drop_downlink())
        )
        .is_none());
    assert!(smf
        .send(&mut upf, Some(5), Body::SessionDeletionRequest)
        .is_none());
    assert_eq!(upf.stats().dropped_no_association, 2);
}

#[test]
fn establish_installs_downlink_and_uplink() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let ue = v4(6);
    let r = smf.establish(&mut upf, session(0x77, ue, Some((0x1000, ENB))));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    let up = r.up_f_seid.unwrap();
    assert_eq!(up.ipv4, Some(UPF_ADDR));
    assert_eq!(up.seid >> 48, 3, "allocator id in the SEID");
    assert_eq!(r.created_pdr.len(), 1);
    assert_eq!(r.created_pdr[0].pdr_id, PdrId(2));
    let Some(FTeid::Assigned {
        teid,
        ipv4,
        ipv6: None,
    }) = r.created_pdr[0].local_f_teid
    else {
        panic!("{r:?}")
    };
    assert_eq!(teid >> 24, 3, "allocator id in the TEID");
    let node = node_of(ue);
    assert_eq!(ipv4, Some(ran(node)));
    let c = upf.sessions_impl();
    assert_eq!(c.down[&ue], (0x1000, ENB, node));
    assert_eq!(c.up[&teid], (ue, Some(ENB), node));
    check_consistent(&upf);
}

#[test]
fn ipv6_and_dual_stack_ue_addresses() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let ue6: Ipv6Addr = "2001:db8:45::9".parse().unwrap();
    let r = smf.establish(&mut upf, session(1, IpAddr::V6(ue6), Some((5, ENB))));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.sessions_impl().down[&IpAddr::V6(ue6)].0, 5);
    // One UE IP Address IE with both families: both are downlink keys.
    let mut req = session(2, v4(9), Some((6, ENB)));
    // (Another address in the first session's /64 is the first session's: the FIB keys an
    // IPv6 UE by its /64.)
    let mut taken = session(3, v4(10), Some((6, ENB)));
    taken.create_pdr[0].pdi.ue_ip_address.as_mut().unwrap().ipv6 =
        Some(UeAddr::Addr("2001:db8:45::a".parse().unwrap()));
    let r = smf.establish(&mut upf, taken);
    assert_eq!(
        (r.cause, r.failed_rule_id),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Pdr(1))
        )
    );
    let dual: Ipv6Addr = "2001:db8:46::a".parse().unwrap();
    req.create_pdr[0].pdi.ue_ip_address.as_mut().unwrap().ipv6 = Some(UeAddr::Addr(dual));
    assert_eq!(smf.establish(&mut upf, req).cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.sessions_impl().down[&v4(9)].0, 6);
    assert_eq!(upf.sessions_impl().down[&IpAddr::V6(dual)].0, 6);
    check_consistent(&upf);
}

#[test]
fn choose_id_shares_one_teid() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let mut req = session(1, v4(1), Some((7, ENB)));
    let mut second = up_pdr(v4(1));
    second.pdr_id = PdrId(3);
    second.precedence = Precedence(300);
    for p in [&mut req.create_pdr[1], &mut second] {
        p.pdi.local_f_teid = Some(FTeid::Choose {
            ipv4: true,
            ipv6: false,
            choose_id: Some(9),
        });
    }
    req.create_pdr.push(second);
    let r = smf.establish(&mut upf, req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(r.created_pdr.len(), 2);
    assert_eq!(r.created_pdr[0].local_f_teid, r.created_pdr[1].local_f_teid);
    assert_eq!(upf.sessions_impl().up.len(), 1);
}

#[test]
fn modify_follows_the_tunnel_and_drop_removes_forwarding() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let ue = v4(2);
    let up = smf
        .establish(&mut upf, session(0x55, ue, None))
        .up_f_seid
        .unwrap()
        .seid;
    // Established with DROP: no downlink yet.
    assert!(!upf.sessions_impl().down.contains_key(&ue));
    let enb2 = Ipv4Addr::new(192, 168, 1, 20);
    let (seid, r) = smf.modify(&mut upf, up, retunnel(0x2000, enb2));
    assert_eq!((seid, r.cause), (Some(0x55), Cause::REQUEST_ACCEPTED));
    assert_eq!(upf.sessions_impl().down[&ue], (0x2000, enb2, node_of(ue)));
    // The uplink entry learns the eNodeB.
    assert!(upf.sessions_impl().up.values().all(|e| e.1 == Some(enb2)));
    let (_, r) = smf.modify(&mut upf, up, drop_downlink());
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert!(!upf.sessions_impl().down.contains_key(&ue));
    let (_, r) = smf.modify(&mut upf, up, retunnel(0x3000, ENB));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.sessions_impl().down[&ue].0, 0x3000);
    check_consistent(&upf);
    // Remove the uplink PDR and FAR; then create a new one (a new TEID, in Created PDR).
    let old_teid = *upf.sessions_impl().up.keys().next().unwrap();
    let rm = SessionModificationRequest {
        remove_pdr: vec![PdrId(2)],
        remove_far: vec![FarId(2)],
        ..Default::default()
    };
    assert_eq!(
        smf.modify(&mut upf, up, rm).1.cause,
        Cause::REQUEST_ACCEPTED
    );
    assert!(upf.sessions_impl().up.is_empty());
    let add = SessionModificationRequest {
        create_pdr: vec![up_pdr(ue)],
        create_far: vec![up_far()],
        ..Default::default()
    };
    let (_, r) = smf.modify(&mut upf, up, add);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    let Some(FTeid::Assigned { teid, .. }) = r.created_pdr[0].local_f_teid else {
        panic!()
    };
    assert_ne!(teid, old_teid);
    assert!(upf.sessions_impl().up.contains_key(&teid));
    check_consistent(&upf);
}

#[test]
fn delete_then_session_context_not_found() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let up = smf
        .establish(&mut upf, session(0x55, v4(3), Some((1, ENB))))
        .up_f_seid
        .unwrap()
        .seid;
    let (seid, r) = smf.delete(&mut upf, up);
    assert_eq!((seid, r.cause), (Some(0x55), Cause::REQUEST_ACCEPTED));
    assert!(upf.sessions_impl().down.is_empty() && upf.sessions_impl().up.is_empty());
    let (seid, r) = smf.delete(&mut upf, up);
    assert_eq!((seid, r.cause), (Some(0), Cause::SESSION_CONTEXT_NOT_FOUND));
    let (_, r) = smf.modify(&mut upf, up, drop_downlink());
    assert_eq!(r.cause, Cause::SESSION_CONTEXT_NOT_FOUND);
    // The UE address is free again.
    let again = smf.establish(&mut upf, session(0x56, v4(3), Some((1, ENB))));
    assert_eq!(again.cause, Cause::REQUEST_ACCEPTED);
    // The new session has the old one's slot, not its SEID: the old SEID still names nothing.
    let again = again.up_f_seid.unwrap().seid;
    assert_eq!(again & 0xffff_ffff, up & 0xffff_ffff, "the slot is reused");
    assert_ne!(again, up);
    let (_, r) = smf.modify(&mut upf, up, drop_downlink());
    assert_eq!(r.cause, Cause::SESSION_CONTEXT_NOT_FOUND);
    let (seid, r) = smf.delete(&mut upf, up);
    assert_eq!((seid, r.cause), (Some(0), Cause::SESSION_CONTEXT_NOT_FOUND));
    assert_eq!(upf.session_count(), 1);
    check_consistent(&upf);
}

/// A restarted endpoint (the next incarnation) lost its sessions: requests about them find no
/// session, also once new sessions took the same slots, and its TEIDs start in another block.
#[test]
fn a_restarted_endpoint_gives_no_seid_or_first_teid_of_its_previous_incarnation() {
    let incarnation = |k: u8| {
        Upf::new(
            Config {
                incarnation: k,
                ..config()
            },
            Cluster::default(),
        )
    };
    let mut before = incarnation(7);
    let mut smf = Smf::new();
    smf.associate(&mut before);
    let r = smf.establish(&mut before, session(0x55, v4(3), Some((1, ENB))));
    let old = r.up_f_seid.unwrap().seid;
    let Some(FTeid::Assigned { teid: old_teid, .. }) = r.created_pdr[0].local_f_teid else {
        panic!("{r:?}")
    };
    assert_eq!(old >> 56, 7, "the incarnation is the SEID's top byte");
    // The restart: the same allocator, the next incarnation, no session.
    let mut after = incarnation(8);
    let mut smf = Smf::new();
    smf.associate(&mut after);
    let r = smf.establish(&mut after, session(0x56, v4(3), Some((1, ENB))));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    let new = r.up_f_seid.unwrap().seid;
    assert_eq!(
        new & 0x00ff_ffff_ffff_ffff,
        old & 0x00ff_ffff_ffff_ffff,
        "same slot and generation"
    );
    assert_ne!(new, old);
    let Some(FTeid::Assigned { teid: new_teid, .. }) = r.created_pdr[0].local_f_teid else {
        panic!("{r:?}")
    };
    assert_ne!(new_teid, old_teid);
    assert_eq!(new_teid >> 24, old_teid >> 24, "the allocator's TEIDs");
    assert_eq!((new_teid >> 16) & 0xff, 8, "from the incarnation's block");
    let (_, r) = smf.modify(&mut after, old, drop_downlink());
    assert_eq!(r.cause, Cause::SESSION_CONTEXT_NOT_FOUND);
    let (seid, r) = smf.delete(&mut after, old);
    assert_eq!((seid, r.cause), (Some(0), Cause::SESSION_CONTEXT_NOT_FOUND));
    let (_, r) = smf.modify(&mut after, new, drop_downlink());
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
}

/// Establishments the cluster refuses and deleted sessions give their SEIDs' slots back: a
/// thousand of each leave the endpoint holding as many slots as it did after the first, and
/// none of their SEIDs names a session after.
#[test]
fn failed_establishments_and_deletions_give_their_slots_back() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let first = smf.establish(&mut upf, session(1, v4(1), Some((1, ENB))));
    let first = first.up_f_seid.unwrap().seid;
    let mut gone = Vec::new();
    let mut slots = 0;
    for i in 0..1000u64 {
        upf.sessions_impl_mut().fail_next = Some(Failure::NoResources);
        let r = smf.establish(&mut upf, session(i + 2, v4(2), Some((1, ENB))));
        assert_eq!(r.cause, Cause::NO_RESOURCES_AVAILABLE);
        let r = smf.establish(&mut upf, session(i + 2, v4(2), Some((1, ENB))));
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        let seid = r.up_f_seid.unwrap().seid;
        assert!(!gone.contains(&seid), "a SEID is given out once");
        let (_, r) = smf.delete(&mut upf, seid);
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        gone.push(seid);
        if i == 0 {
            slots = upf.memory().sessions;
        }
        assert_eq!(upf.memory().sessions, slots, "after {i}");
    }
    for seid in gone.iter().step_by(97) {
        let (_, r) = smf.modify(&mut upf, *seid, drop_downlink());
        assert_eq!(r.cause, Cause::SESSION_CONTEXT_NOT_FOUND);
    }
    let (_, r) = smf.modify(&mut upf, first, drop_downlink());
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.session_count(), 1);
    check_consistent(&upf);
}

#[test]
fn another_peers_session_is_not_found() {
    let mut upf = upf();
    let mut a = Smf::new();
    a.associate(&mut upf);
    let up = a
        .establish(&mut upf, session(1, v4(1), Some((1, ENB))))
        .up_f_seid
        .unwrap()
        .seid;
    let mut b = Smf::new();
    b.addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 8805);
    b.node = NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 2));
    b.associate(&mut upf);
    assert_eq!(
        b.delete(&mut upf, up).1.cause,
        Cause::SESSION_CONTEXT_NOT_FOUND
    );
    assert_eq!(upf.session_count(), 1);
}

fn raw_establishment(
    smf: &mut Smf,
    upf: &mut Upf<Cluster>,
    req: &SessionEstablishmentRequest,
    edit: impl Fn(&mut Vec<u8>),
) -> SessionEstablishmentResponse {
    smf.seq += 1;
    let mut bytes = Message {
        seid: Some(0),
        sequence: smf.seq,
        priority: None,
        body: Body::SessionEstablishmentRequest(req.clone()),
    }
    .to_bytes()
    .unwrap();
    edit(&mut bytes);
    let l = (bytes.len() - 4) as u16;
    bytes[2..4].copy_from_slice(&l.to_be_bytes());
    match smf.send_bytes(upf, &bytes).unwrap().body {
        Body::SessionEstablishmentResponse(r) => r,
        b => panic!("{b:?}"),
    }
}

#[test]
fn malformed_requests_get_their_cause_and_offending_ie() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let req = session(1, v4(1), Some((1, ENB)));
    // No Create FAR at all: rename both Create FAR IEs to an unknown type.
    let r = raw_establishment(&mut smf, &mut upf, &req, |b| {
        for at in 16..b.len() - 4 {
            if b[at..at + 2] == [0, 3] && b[at + 4..at + 6] == [0, 108] {
                b[at + 1] = 200;
            }
        }
    });
    assert_eq!(
        (r.cause, r.offending_ie),
        (
            Cause::MANDATORY_IE_MISSING,
            Some(OffendingIe(ie_type::CREATE_FAR))
        )
    );
    // Node ID of type 7: incorrect.
    let r = raw_establishment(&mut smf, &mut upf, &req, |b| b[20] = 7);
    assert_eq!(
        (r.cause, r.offending_ie),
        (
            Cause::MANDATORY_IE_INCORRECT,
            Some(OffendingIe(ie_type::NODE_ID))
        )
    );
    // The last IE overruns the message.
    let r = raw_establishment(&mut smf, &mut upf, &req, |b| {
        b.truncate(b.len() - 1);
    });
    assert_eq!(r.cause, Cause::INVALID_LENGTH);
    assert_eq!(upf.sessions_impl().applies, 0);
    assert_eq!(upf.session_count(), 0);
}

/// An SDF Filter IE with flow description `flow`.
fn sdf(flow: &str) -> RawIe {
    let mut value = vec![1, 0];
    value.extend_from_slice(&(flow.len() as u16).to_be_bytes());
    value.extend_from_slice(flow.as_bytes());
    RawIe {
        ie_type: ie_type::SDF_FILTER,
        value,
    }
}

#[test]
fn rules_we_cannot_apply_are_refused_by_id() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let ue = v4(1);
    let refuse = |smf: &mut Smf,
                  upf: &mut Upf<Cluster>,
                  req: SessionEstablishmentRequest,
                  rule: FailedRuleId| {
        let r = smf.establish(upf, req);
        assert_eq!(
            (r.cause, r.failed_rule_id),
            (Cause::RULE_CREATION_MODIFICATION_FAILURE, Some(rule)),
            "{r:?}"
        );
        assert_eq!(upf.session_count(), 0);
        assert_eq!(upf.sessions_impl().applies, 0);
    };
    // A PDR naming a FAR the session lacks.
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_pdr[0].far_id = Some(FarId(9));
    refuse(&mut smf, &mut upf, req, FailedRuleId::Pdr(1));
    // A PDR naming a URR the session lacks.
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_pdr[0].urr_ids.push(UrrId(4));
    refuse(&mut smf, &mut upf, req, FailedRuleId::Pdr(1));
    // Two URRs with one id.
    let mut req = session(1, ue, Some((1, ENB)));
    let urr = Urr {
        urr_id: UrrId(4),
        measurement_method: Some(MeasurementMethod(2)),
        reporting_triggers: Some(ReportingTriggers(vec![2, 0])),
        other: vec![],
    };
    req.create_urr = vec![urr.clone(), urr];
    refuse(&mut smf, &mut upf, req, FailedRuleId::Urr(4));
    // A QER with an IE we do not know how to enforce (Packet Rate).
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_qer.push(Qer {
        qer_id: QerId(5),
        correlation_id: None,
        gate_status: Some(GateStatus::OPEN),
        mbr: Some(Mbr(Bitrate { ul: 1, dl: 1 })),
        gbr: None,
        qfi: None,
        other: vec![RawIe {
            ie_type: 94,
            value: vec![0],
        }],
    });
    refuse(&mut smf, &mut upf, req, FailedRuleId::Qer(5));
    // A malformed SDF filter in the PDI (a flow description without its length).
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_pdr[0].pdi.other.push(RawIe {
        ie_type: ie_type::SDF_FILTER,
        value: vec![1, 0],
    });
    refuse(&mut smf, &mut upf, req, FailedRuleId::Pdr(1));
    // An SDF filter matching some of the UE's packets, forwarding them like the rest: the
    // data plane keeps one way per direction.
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_pdr[0]
        .pdi
        .other
        .push(sdf("permit out 17 from any to assigned 53"));
    refuse(&mut smf, &mut upf, req, FailedRuleId::Pdr(1));
    // An unknown PDI IE (Application ID).
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_pdr[0].pdi.other.push(RawIe {
        ie_type: 24,
        value: b"app".to_vec(),
    });
    refuse(&mut smf, &mut upf, req, FailedRuleId::Pdr(1));
    // DUPL.
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_far[0].apply_action = ApplyAction(ApplyAction::FORW | ApplyAction::DUPL);
    refuse(&mut smf, &mut upf, req, FailedRuleId::Far(1));
    // An uplink FORW FAR with outer header creation (to anything but the CP function).
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_far[1]
        .forwarding_parameters
        .as_mut()
        .unwrap()
        .outer_header_creation = Some(OuterHeaderCreation::GtpuIpv4 { teid: 5, addr: ENB });
    refuse(&mut smf, &mut upf, req, FailedRuleId::Far(2));
    // An uplink PDR without outer header removal.
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_pdr[1].outer_header_removal = None;
    refuse(&mut smf, &mut upf, req, FailedRuleId::Pdr(2));
    // Two PDRs with one id.
    let mut req = session(1, ue, Some((1, ENB)));
    req.create_pdr[1].pdr_id = PdrId(1);
    refuse(&mut smf, &mut upf, req, FailedRuleId::Pdr(1));
    // No UE address anywhere: conditional IE missing.
    let mut req = session(1, ue, Some((1, ENB)));
    for p in &mut req.create_pdr {
        p.pdi.ue_ip_address = None;
    }
    let r = smf.establish(&mut upf, req);
    assert_eq!(
        (r.cause, r.offending_ie),
        (
            Cause::CONDITIONAL_IE_MISSING,
            Some(OffendingIe(ie_type::UE_IP_ADDRESS))
        )
    );
    // A UE address another session holds.
    assert_eq!(
        smf.establish(&mut upf, session(1, ue, Some((1, ENB))))
            .cause,
        Cause::REQUEST_ACCEPTED
    );
    let applies = upf.sessions_impl().applies;
    let r = smf.establish(&mut upf, session(2, ue, Some((2, ENB))));
    assert_eq!(
        (r.cause, r.failed_rule_id),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Pdr(1))
        )
    );
    assert_eq!(upf.sessions_impl().applies, applies);
    assert_eq!(upf.sessions_impl().down[&ue].0, 1);
    // The same address as IPv4-mapped IPv6 is the same FIB key: held too.
    let IpAddr::V4(ue4) = ue else { unreachable!() };
    let mapped = IpAddr::V6(ue4.to_ipv6_mapped());
    let r = smf.establish(&mut upf, session(3, mapped, Some((3, ENB))));
    assert_eq!(
        (r.cause, r.failed_rule_id),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Pdr(1))
        )
    );
    assert_eq!(upf.sessions_impl().applies, applies);
}

#[test]
fn a_failed_modification_changes_nothing() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let up = smf
        .establish(&mut upf, session(1, v4(1), Some((1, ENB))))
        .up_f_seid
        .unwrap()
        .seid;
    let before = (
        upf.sessions_impl().down.clone(),
        upf.sessions_impl().up.clone(),
    );
    // Retunnel and, in the same request, remove a FAR that does not exist.
    let mut req = retunnel(0x99, ENB);
    req.remove_far.push(FarId(42));
    let (_, r) = smf.modify(&mut upf, up, req);
    assert_eq!(
        (r.cause, r.failed_rule_id),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Far(42))
        )
    );
    assert_eq!(
        (
            upf.sessions_impl().down.clone(),
            upf.sessions_impl().up.clone()
        ),
        before
    );
    // A closed downlink gate is applied: it drops.
    let req = SessionModificationRequest {
        create_qer: vec![Qer {
            qer_id: QerId(1),
            correlation_id: None,
            gate_status: Some(GateStatus { ul: 0, dl: 1 }),
            mbr: None,
            gbr: None,
            qfi: None,
            other: vec![],
        }],
        update_pdr: vec![UpdatePdr {
            pdr_id: PdrId(1),
            outer_header_removal: None,
            precedence: None,
            pdi: None,
            far_id: None,
            urr_ids: vec![],
            qer_ids: vec![QerId(1)],
        }],
        ..Default::default()
    };
    assert_eq!(
        smf.modify(&mut upf, up, req).1.cause,
        Cause::REQUEST_ACCEPTED
    );
    // The entry stays (its counters and buffer with it) and says the gate is closed: the
    // handling node drops (UePolicy::dl_gate_closed).
    assert_eq!(upf.sessions_impl().down.len(), 1);
    assert_eq!(upf.sessions_impl().up.len(), 1);
    let policies: Vec<_> = upf.sessions_impl().ues.values().map(|f| f.policy).collect();
    assert!(
        policies
            .iter()
            .all(|p| p.dl_gate_closed && !p.ul_gate_closed),
        "{policies:?}"
    );
    check_consistent(&upf);
}

#[test]
fn no_resources_when_full() {
    let mut c = config();
    c.max_sessions = 2;
    let mut upf = Upf::new(c, Cluster::default());
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    for i in 0..2 {
        assert_eq!(
            smf.establish(&mut upf, session(i, v4(i as u8), Some((1, ENB))))
                .cause,
            Cause::REQUEST_ACCEPTED
        );
    }
    assert_eq!(
        smf.establish(&mut upf, session(9, v4(9), Some((1, ENB))))
            .cause,
        Cause::NO_RESOURCES_AVAILABLE
    );
    // The cluster full: its failure is the cause, and nothing changed.
    let mut upf2 = Upf::new(
        config(),
        Cluster {
            capacity: Some(3),
            ..Default::default()
        },
    );
    let mut smf = Smf::new();
    smf.associate(&mut upf2);
    assert_eq!(
        smf.establish(&mut upf2, session(1, v4(1), Some((1, ENB))))
            .cause,
        Cause::REQUEST_ACCEPTED
    );
    assert_eq!(
        smf.establish(&mut upf2, session(2, v4(2), Some((1, ENB))))
            .cause,
        Cause::NO_RESOURCES_AVAILABLE
    );
    assert_eq!(upf2.session_count(), 1);
    check_consistent(&upf2);
    // ... and the UE address is not held by the failed session.
    upf2.sessions_impl_mut().capacity = None;
    assert_eq!(
        smf.establish(&mut upf2, session(2, v4(2), Some((1, ENB))))
            .cause,
        Cause::REQUEST_ACCEPTED
    );
    check_consistent(&upf2);
}

#[test]
fn retransmissions_are_answered_from_the_cache_not_applied_twice() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    smf.seq += 1;
    let req = Message {
        seid: Some(0),
        sequence: smf.seq,
        priority: None,
        body: Body::SessionEstablishmentRequest(session(1, v4(1), Some((1, ENB)))),
    }
    .to_bytes()
    .unwrap();
    let first = upf.handle(Duration::from_secs(1), smf.addr, &req);
    let applies = upf.sessions_impl().applies;
    let again = upf.handle(Duration::from_secs(2), smf.addr, &req);
    assert_eq!(first, again);
    assert_eq!(upf.sessions_impl().applies, applies);
    assert_eq!(upf.session_count(), 1);
    assert_eq!(upf.stats().retransmissions, 1);
    // After the cache time, the same bytes are a new request (and the UE is taken).
    let late = upf.handle(Duration::from_secs(100), smf.addr, &req);
    let Body::SessionEstablishmentResponse(r) = Message::parse(&late[0].bytes).unwrap().body else {
        panic!()
    };
    assert_eq!(r.cause, Cause::RULE_CREATION_MODIFICATION_FAILURE);
    assert_eq!(upf.session_count(), 1);
}

/// An SMF restarts (new Recovery Time Stamp, sequence numbers from 1 again): its requests
/// under old sequence numbers are new requests, handled, never answered with what the old
/// process was told, whatever their type.
#[test]
fn a_restarted_smf_reusing_sequence_numbers_is_not_answered_from_the_cache() {
    let mut upf = upf();
    let mut old = Smf::new();
    old.associate(&mut upf); // seq 1
                             // seq 2: refused (a URR-less but FAR-less PDR: rule failure), cached.
    let mut bad = session(9, v4(9), Some((9, ENB)));
    bad.create_far.clear();
    let r = old.establish(&mut upf, bad);
    assert_ne!(r.cause, Cause::REQUEST_ACCEPTED);
    // seq 3: a heartbeat, cached.
    old.send(
        &mut upf,
        None,
        Body::HeartbeatRequest(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(77),
        }),
    )
    .unwrap();
    // The new process: same address and port, sequence numbers from 1.
    let mut new = Smf::new();
    let body = Body::AssociationSetupRequest(AssociationSetupRequest {
        node_id: new.node.clone(),
        recovery_time_stamp: RecoveryTimeStamp(78),
        up_function_features: None,
        cp_function_features: None,
    });
    let m = new.send(&mut upf, None, body).unwrap(); // seq 1
    let Body::AssociationSetupResponse(a) = m.body else {
        panic!("{m:?}")
    };
    assert_eq!(a.cause, Cause::REQUEST_ACCEPTED);
    new.seq = 1;
    // seq 2 again: another establishment, accepted (not the cached refusal).
    let r = new.establish(&mut upf, session(1, v4(1), Some((1, ENB))));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    // seq 3 again: a session establishment where a heartbeat was answered: an establishment
    // response, not the cached heartbeat response.
    let r = new.establish(&mut upf, session(2, v4(2), Some((2, ENB))));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.session_count(), 2);
    assert_eq!(upf.stats().retransmissions, 0);
    // Another request under a cached sequence number within the cache time, without a new
    // association (an SMF that wrapped its numbers): handled too.
    new.seq = 2;
    let r = new.establish(&mut upf, session(3, v4(3), Some((3, ENB))));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.session_count(), 3);
    assert_eq!(upf.stats().retransmissions, 0);
    assert!(upf.stats().responses_forgotten >= 3, "{:?}", upf.stats());
}

#[test]
fn deferred_installs_answer_on_completion() {
    let mut upf = Upf::new(
        config(),
        Cluster {
            defer: true,
            ..Default::default()
        },
    );
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    smf.seq += 1;
    let req = Message {
        seid: Some(0),
        sequence: smf.seq,
        priority: None,
        body: Body::SessionEstablishmentRequest(session(0x42, v4(1), Some((1, ENB)))),
    }
    .to_bytes()
    .unwrap();
    assert!(upf
        .handle(Duration::from_secs(1), smf.addr, &req)
        .is_empty());
    // A retransmission while installing is dropped, not applied again.
    assert!(upf
        .handle(Duration::from_secs(2), smf.addr, &req)
        .is_empty());
    assert_eq!(upf.stats().retransmissions_in_flight, 1);
    assert_eq!(upf.session_count(), 0);
    let (token, changes, ues) = upf.sessions_impl_mut().deferred.remove(0);
    assert!(upf.sessions_impl().deferred.is_empty());
    upf.sessions_impl_mut().install(&changes, &ues).unwrap();
    let out = upf.complete(Duration::from_secs(3), token, Ok(()));
    let m = Message::parse(&out[0].bytes).unwrap();
    assert_eq!(m.seid, Some(0x42));
    let Body::SessionEstablishmentResponse(r) = m.body else {
        panic!()
    };
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.session_count(), 1);
    check_consistent(&upf);
    // Now the retransmission is answered from the cache.
    assert_eq!(upf.handle(Duration::from_secs(4), smf.addr, &req), out);
    // A failed install: the cause, and nothing held.
    smf.seq += 1;
    let req = Message {
        seid: Some(0),
        sequence: smf.seq,
        priority: None,
        body: Body::SessionEstablishmentRequest(session(0x43, v4(2), Some((1, ENB)))),
    }
    .to_bytes()
    .unwrap();
    assert!(upf
        .handle(Duration::from_secs(5), smf.addr, &req)
        .is_empty());
    let (token, _, _) = upf.sessions_impl_mut().deferred.remove(0);
    let out = upf.complete(Duration::from_secs(6), token, Err(Failure::NoResources));
    let Body::SessionEstablishmentResponse(r) = Message::parse(&out[0].bytes).unwrap().body else {
        panic!()
    };
    assert_eq!(r.cause, Cause::NO_RESOURCES_AVAILABLE);
    assert_eq!(upf.session_count(), 1);
    assert!(
        upf.complete(Duration::from_secs(6), token, Ok(()))
            .is_empty(),
        "a token completes once"
    );
    // While a session's change installs, another request for it is congestion.
    let up = upf.session_ids().next().unwrap();
    let m1 = smf.send(
        &mut upf,
        Some(up),
        Body::SessionModificationRequest(drop_downlink()),
    );
    assert!(m1.is_none());
    let (_, r) = smf.modify(&mut upf, up, retunnel(5, ENB));
    assert_eq!(r.cause, Cause::PFCP_ENTITY_IN_CONGESTION);
}

#[test]
fn version_not_supported_and_garbage() {
    let mut upf = upf();
    let out = upf.handle(Duration::ZERO, smf_addr(), &[0x40, 1, 0, 4, 0, 0, 9, 0]);
    let m = Message::parse(&out[0].bytes).unwrap();
    assert_eq!((m.sequence, m.body), (9, Body::VersionNotSupportedResponse));
    assert!(upf
        .handle(Duration::ZERO, smf_addr(), &[0x20, 1])
        .is_empty());
    assert_eq!(upf.stats().malformed, 1);
}

/// What the control plane believes after each answer: UE -> downlink tunnel.
#[derive(Clone, Debug)]
enum Op {
    Establish { ue: u8, tunnel: Option<(u32, u8)> },
    Retunnel { which: usize, teid: u32, enb: u8 },
    Drop { which: usize },
    Delete { which: usize },
    Garbage(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..12, proptest::option::of((1u32..5, 1u8..4)))
            .prop_map(|(ue, tunnel)| Op::Establish { ue, tunnel }),
        (any::<usize>(), 1u32..5, 1u8..4).prop_map(|(which, teid, enb)| Op::Retunnel {
            which,
            teid,
            enb
        }),
        any::<usize>().prop_map(|which| Op::Drop { which }),
        any::<usize>().prop_map(|which| Op::Delete { which }),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Op::Garbage),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Random sessions over a small pool of UE addresses (so some collide) against the oracle
    /// of what the control plane was told: the cluster's downlink table is exactly the
    /// accepted sessions' tunnels, and every TEID is unique.
    #[test]
    fn random_operations_match_the_oracle(ops in proptest::collection::vec(op(), 1..40)) {
        let mut upf = upf();
        let mut smf = Smf::new();
        smf.associate(&mut upf);
        // up seid -> (ue, tunnel)
        let mut oracle: Vec<(u64, IpAddr, Option<Tunnel>)> = Vec::new();
        let enb = |n: u8| Ipv4Addr::new(192, 168, 1, n);
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Establish { ue, tunnel } => {
                    let ue = v4(ue);
                    let t = tunnel.map(|(teid, e)| (teid, enb(e)));
                    let r = smf.establish(&mut upf, session(i as u64, ue, t));
                    let taken = oracle.iter().any(|o| o.1 == ue);
                    prop_assert_eq!(r.cause == Cause::REQUEST_ACCEPTED, !taken);
                    if !taken {
                        oracle.push((r.up_f_seid.unwrap().seid, ue, t));
                    }
                }
                Op::Retunnel { which, teid, enb: e } if !oracle.is_empty() => {
                    let k = which % oracle.len();
                    let (_, r) = smf.modify(&mut upf, oracle[k].0, retunnel(teid, enb(e)));
                    prop_assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
                    oracle[k].2 = Some((teid, enb(e)));
                }
                Op::Drop { which } if !oracle.is_empty() => {
                    let k = which % oracle.len();
                    let (_, r) = smf.modify(&mut upf, oracle[k].0, drop_downlink());
                    prop_assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
                    oracle[k].2 = None;
                }
                Op::Delete { which } if !oracle.is_empty() => {
                    let k = which % oracle.len();
                    let (_, r) = smf.delete(&mut upf, oracle[k].0);
                    prop_assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
                    oracle.remove(k);
                }
                Op::Garbage(bytes) => {
                    upf.handle(Duration::from_secs(1), smf.addr, &bytes);
                }
                _ => {}
            }
            let expected: HashMap<IpAddr, (u32, Ipv4Addr, u16)> = oracle
                .iter()
                .filter_map(|&(_, ue, t)| t.map(|(teid, e)| (ue, (teid, e, node_of(ue)))))
                .collect();
            prop_assert_eq!(&upf.sessions_impl().down, &expected);
            prop_assert_eq!(upf.sessions_impl().up.len(), oracle.len());
            let ues: std::collections::HashSet<IpAddr> = upf.sessions_impl().up.values().map(|e| e.0).collect();
            prop_assert_eq!(ues.len(), oracle.len());
            prop_assert_eq!(upf.session_count(), oracle.len());
            check_consistent(&upf);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The state records an endpoint hands out (folded into a map, as a durable store keeps
    /// them) restore, in a new incarnation, the same sessions and association: the same
    /// SEIDs, forwarding and placement; the restored sessions are modified and deleted with
    /// Request accepted; a new session gets no SEID, TEID or UE address a restored one holds.
    #[test]
    fn state_records_restore_the_sessions_in_a_new_incarnation(
        ops in proptest::collection::vec(op(), 1..40),
    ) {
        let mut upf = upf();
        upf.track_state(true);
        let mut smf = Smf::new();
        smf.associate(&mut upf);
        let mut kept: HashMap<u64, Vec<u8>> = HashMap::new();
        let fold = |upf: &mut Upf<Cluster>, kept: &mut HashMap<u64, Vec<u8>>| {
            for (k, v) in upf.take_state_changes() {
                match v {
                    Some(v) => kept.insert(k, v),
                    None => kept.remove(&k),
                };
            }
        };
        fold(&mut upf, &mut kept);
        let mut live: Vec<u64> = Vec::new();
        // Every SEID given before the restart, deleted ones too.
        let mut ever: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let enb = |n: u8| Ipv4Addr::new(192, 168, 1, n);
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Establish { ue, tunnel } => {
                    let t = tunnel.map(|(teid, e)| (teid, enb(e)));
                    let r = smf.establish(&mut upf, session(i as u64, v4(ue), t));
                    if r.cause == Cause::REQUEST_ACCEPTED {
                        live.push(r.up_f_seid.unwrap().seid);
                        ever.insert(r.up_f_seid.unwrap().seid);
                    }
                }
                Op::Retunnel { which, teid, enb: e } if !live.is_empty() => {
                    smf.modify(&mut upf, live[which % live.len()], retunnel(teid, enb(e)));
                }
                Op::Drop { which } if !live.is_empty() => {
                    smf.modify(&mut upf, live[which % live.len()], drop_downlink());
                }
                Op::Delete { which } if !live.is_empty() => {
                    let seid = live.remove(which % live.len());
                    smf.delete(&mut upf, seid);
                }
                Op::Garbage(bytes) => {
                    upf.handle(Duration::from_secs(1), smf.addr, &bytes);
                }
                _ => {}
            }
            fold(&mut upf, &mut kept);
        }
        // The records: one per session and one for the association.
        let sessions: std::collections::BTreeSet<u64> = upf.session_ids().collect();
        prop_assert_eq!(kept.len(), sessions.len() + 1);
        // A new incarnation over the same cluster tables.
        let old = upf.sessions_impl();
        let cluster = Cluster {
            down: old.down.clone(),
            up: old.up.clone(),
            ues: old.ues.clone(),
            ..Cluster::default()
        };
        let mut c = config();
        c.incarnation = 2;
        let mut new = Upf::new(c, cluster);
        new.track_state(true);
        let n = new.restore_state(kept.iter().map(|(k, v)| (*k, v.as_slice()))).unwrap();
        prop_assert_eq!(n, kept.len());
        prop_assert!(new.take_state_changes().is_empty(), "a restore is no change");
        prop_assert_eq!(new.session_ids().collect::<std::collections::BTreeSet<u64>>(), sessions.clone());
        for &s in &sessions {
            prop_assert_eq!(new.session(s), upf.session(s));
        }
        prop_assert!(new.is_associated(&NodeId::Ipv4(SMF)));
        check_consistent(&new);
        // A restored session's UE address is not given to another session.
        let restored_ue = (sessions.iter())
            .find_map(|&s| new.session(s).unwrap().0.downlink.keys().next().copied());
        if let Some(ue) = restored_ue {
            let r = smf.establish(&mut new, session(998, ue, Some((7, ENB))));
            prop_assert_ne!(r.cause, Cause::REQUEST_ACCEPTED);
            prop_assert!(new.take_state_changes().is_empty(), "a refusal is no change");
        }
        // A new session: nothing of the restored ones'.
        let taken: std::collections::HashSet<IpAddr> = new.sessions_impl().up.values().map(|e| e.0).collect();
        let free = (0u8..=40).map(v4).find(|u| !taken.contains(u)).unwrap();
        let r = smf.establish(&mut new, session(999, free, Some((7, ENB))));
        prop_assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        let seid = r.up_f_seid.unwrap().seid;
        prop_assert!(!sessions.contains(&seid));
        prop_assert!(!ever.contains(&seid), "SEID {:#x} given again", seid);
        let teid = r.created_pdr.iter().find_map(|c| match c.local_f_teid {
            Some(FTeid::Assigned { teid, .. }) => Some(teid),
            _ => None,
        });
        if let Some(t) = teid {
            prop_assert!(!upf.sessions_impl().up.contains_key(&t), "TEID {} given again", t);
        }
        let changes = new.take_state_changes();
        prop_assert_eq!(changes.len(), 1);
        prop_assert_eq!(changes[0].0, seid);
        // The restored sessions are modified and deleted.
        for &s in &sessions {
            let (_, r) = smf.modify(&mut new, s, retunnel(9, ENB));
            prop_assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
            let (_, r) = smf.delete(&mut new, s);
            prop_assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        }
        check_consistent(&new);
        let gone: Vec<(u64, Option<Vec<u8>>)> = new.take_state_changes();
        for &s in &sessions {
            prop_assert!(gone.contains(&(s, None)), "session {:#x} removed", s);
        }
    }
}

/// Records that are not ours are refused (never a panic) and nothing is restored; a key that
/// names another record kind, or sessions of another allocator, too.
#[test]
fn garbage_records_do_not_restore() {
    let mut upf = upf();
    upf.track_state(true);
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let r = smf.establish(&mut upf, session(1, v4(1), Some((5, ENB))));
    let seid = r.up_f_seid.unwrap().seid;
    let records: HashMap<u64, Vec<u8>> = upf
        .take_state_changes()
        .into_iter()
        .map(|(k, v)| (k, v.unwrap()))
        .collect();
    let good = records[&seid].clone();
    let assoc = association_key(&NodeId::Ipv4(SMF));
    assert!(records.contains_key(&assoc) && is_association_key(assoc) && !is_association_key(seid));
    for cut in 0..good.len() {
        let mut fresh = upf_with_allocator(3);
        assert!(
            fresh.restore_state([(seid, &good[..cut])]).is_err(),
            "cut at {cut}"
        );
        assert_eq!(fresh.session_count(), 0);
    }
    let mut fresh = upf_with_allocator(3);
    assert!(fresh.restore_state([(assoc, &good[..])]).is_err());
    // Another allocator's session.
    let mut other = upf_with_allocator(4);
    assert!(matches!(
        other.restore_state([(seid, &good[..])]),
        Err(RestoreError::Foreign(_))
    ));
    // And the good ones restore.
    let mut fresh = upf_with_allocator(3);
    assert_eq!(
        fresh.restore_state(records.iter().map(|(k, v)| (*k, v.as_slice()))),
        Ok(2)
    );
    assert_eq!(
        fresh.restore_state([(seid, &good[..])]),
        Err(RestoreError::NotEmpty)
    );
}

/// Dropped sessions and associations are forgotten without a trace: no record change, no
/// change to the cluster's tables; their SEIDs name nothing; one with a change in flight is
/// kept until the change completed.
#[test]
fn dropped_state_is_forgotten_without_a_change() {
    let mut upf = upf();
    upf.track_state(true);
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let seids: Vec<u64> = (1..=3)
        .map(|i| {
            let r = smf.establish(&mut upf, session(i, v4(i as u8), Some((i as u32, ENB))));
            assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
            r.up_f_seid.unwrap().seid
        })
        .collect();
    let records: HashMap<u64, Option<Vec<u8>>> = upf.take_state_changes().into_iter().collect();
    assert_eq!(records.len(), 4);
    // Session 0 changed since the last take: dropped, its change is not handed out.
    smf.modify(&mut upf, seids[0], retunnel(40, ENB));
    let tables = (
        upf.sessions_impl().down.clone(),
        upf.sessions_impl().up.clone(),
    );
    // Session 2 with a modification in flight.
    upf.sessions_impl_mut().defer = true;
    smf.seq += 1;
    let m = Message {
        seid: Some(seids[2]),
        sequence: smf.seq,
        priority: None,
        body: Body::SessionModificationRequest(retunnel(41, ENB)),
    };
    assert!(upf
        .handle(smf.now, smf.addr, &m.to_bytes().unwrap())
        .is_empty());
    let left = upf.drop_state(&[seids[0], seids[2], 0x77, 1 << 63]);
    assert_eq!(left, vec![seids[2]]);
    assert_eq!(upf.session_count(), 2);
    assert!(upf.session(seids[0]).is_none());
    assert!(
        upf.take_state_changes().is_empty(),
        "a drop records nothing"
    );
    let (_, r) = smf.modify(&mut upf, seids[0], retunnel(42, ENB));
    assert_eq!(r.cause, Cause::SESSION_CONTEXT_NOT_FOUND);
    // The in-flight change completes; then the session drops.
    let (token, changes, ues) = upf.sessions_impl_mut().deferred.pop().unwrap();
    upf.sessions_impl_mut().install(&changes, &ues).unwrap();
    upf.sessions_impl_mut().defer = false;
    assert_eq!(upf.complete(smf.now, token, Ok(())).len(), 1);
    let changed = upf.take_state_changes();
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0].0, seids[2]);
    assert!(upf.drop_state(&[seids[2]]).is_empty());
    assert_eq!(upf.session_count(), 1);
    // The association: gone, and no record of its removal.
    let assoc = association_key(&NodeId::Ipv4(SMF));
    assert!(upf.drop_state(&[assoc]).is_empty());
    assert!(!upf.is_associated(&NodeId::Ipv4(SMF)));
    assert!(
        upf.take_state_changes().is_empty(),
        "a drop records nothing"
    );
    // The cluster's tables were not touched by the drops.
    assert_eq!(upf.sessions_impl().down.len(), tables.0.len());
    assert!(tables
        .0
        .keys()
        .all(|ue| upf.sessions_impl().down.contains_key(ue)));
    // What was dropped is free here again: its UE address is given to a new session.
    smf.associate(&mut upf);
    let _ = upf.take_state_changes();
    upf.sessions_impl_mut().down.remove(&v4(1));
    upf.sessions_impl_mut()
        .up
        .retain(|_, (ue, _, _)| *ue != v4(1));
    upf.sessions_impl_mut().ues.remove(&v4(1));
    let r = smf.establish(&mut upf, session(9, v4(1), Some((9, ENB))));
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_ne!(r.up_f_seid.unwrap().seid, seids[0]);
}

/// A restored association of a peer we heartbeat is heartbeated again, at its address.
#[test]
fn restored_associations_are_heartbeated_again() {
    let mut upf = upf();
    upf.track_state(true);
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let records: Vec<(u64, Vec<u8>)> = (upf.take_state_changes().into_iter())
        .map(|(k, v)| (k, v.unwrap()))
        .collect();
    assert_eq!(records.len(), 1);
    let mut c = config();
    c.incarnation = 2;
    let mut new = Upf::new(c, Cluster::default());
    new.track_state(true);
    assert!(new.poll(Duration::from_secs(1)).is_empty(), "no peer yet");
    let restored = new.restore_state(records.iter().map(|(k, v)| (*k, v.as_slice())));
    assert_eq!(restored, Ok(1));
    assert!(new.is_associated(&NodeId::Ipv4(SMF)));
    let out = new.poll(Duration::from_secs(2));
    heartbeat_seq(&out);
    assert!(out.iter().all(|t| t.to == smf_addr()), "{out:?}");
    // The restored association is no change, nor is a heartbeat.
    assert!(new.take_state_changes().is_empty());
}

/// An association replicated from another endpoint of the cluster is state of this one too:
/// recorded, restored (without our heartbeats: the endpoint it was set up with heartbeats
/// it), and its release recorded as the record's removal.
#[test]
fn replicated_associations_are_recorded_and_restored() {
    let mut c = TwoEndpoints::new();
    for ep in &mut c.eps {
        ep.track_state(true);
    }
    let setup = msg(1, None, setup_from(NodeId::Ipv4(SMF), 77));
    let (by, r) = c.send(0, &setup).unwrap();
    assert_eq!((by, cause_of(&r)), (0, Cause::REQUEST_ACCEPTED));
    let key = association_key(&NodeId::Ipv4(SMF));
    let mine = c.eps[0].take_state_changes();
    let replicated = c.eps[1].take_state_changes();
    assert_eq!(replicated.len(), 1);
    assert_eq!(replicated[0].0, key);
    assert_eq!(mine.len(), 1);
    assert_ne!(
        mine[0].1, replicated[0].1,
        "ours heartbeats it, the replica does not"
    );
    let record = replicated[0].1.clone().unwrap();
    let mut cfg = config();
    cfg.allocator_id = 2;
    cfg.incarnation = 9;
    let mut restored = Upf::new(cfg, Cluster::default());
    assert_eq!(restored.restore_state([(key, &record[..])]), Ok(1));
    assert!(restored.is_associated(&NodeId::Ipv4(SMF)));
    assert!(
        restored.poll(Duration::from_secs(30)).is_empty(),
        "no heartbeat"
    );
    // Released at endpoint 1: both endpoints remove the record.
    let release = msg(
        2,
        None,
        Body::AssociationReleaseRequest(AssociationReleaseRequest {
            node_id: NodeId::Ipv4(SMF),
        }),
    );
    let (_, r) = c.send(1, &release).unwrap();
    assert_eq!(cause_of(&r), Cause::REQUEST_ACCEPTED);
    for ep in &mut c.eps {
        assert_eq!(ep.take_state_changes(), vec![(key, None)]);
    }
}

fn upf_with_allocator(a: u8) -> Upf<Cluster> {
    let mut c = config();
    c.allocator_id = a;
    c.incarnation = 9;
    Upf::new(c, Cluster::default())
}

/// Two endpoints of one cluster (allocator ids 1 and 2, relaying) and what they sent the
/// SMF, by the endpoint that sent it. Relays travel as authenticated datagrams.
struct TwoEndpoints {
    eps: [Upf<Cluster>; 2],
    now: Duration,
    to_smf: Vec<(usize, Message)>,
}

const RELAY_KEY: &[u8] = b"the cluster's key";

impl TwoEndpoints {
    fn new() -> Self {
        Self::with(|_| {})
    }

    /// Endpoints whose configuration `f` changes.
    fn with(f: impl Fn(&mut Config)) -> Self {
        let ep = |id: u8| {
            let mut c = config();
            // Nodes that restarted a few times, each its own number of times: SEIDs with an
            // incarnation byte are relayed to their home all the same.
            c.incarnation = 4 + id;
            f(&mut c);
            c.allocator_id = id;
            c.relay = true;
            c.endpoints = 2;
            Upf::new(c, Cluster::default())
        };
        TwoEndpoints {
            eps: [ep(1), ep(2)],
            now: Duration::ZERO,
            to_smf: Vec::new(),
        }
    }

    /// Delivers every relay until none is left.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            for i in 0..2 {
                while let Some(r) = self.eps[i].poll_relay() {
                    moved = true;
                    let from = i as u8 + 1;
                    let wire = r.to_bytes(from, RELAY_KEY);
                    let (sender, r) = Relay::parse(&wire, RELAY_KEY).unwrap();
                    assert_eq!(sender, from);
                    let targets: Vec<usize> = match r.to {
                        0 => (0..2).filter(|&j| j != i).collect(),
                        t => vec![t as usize - 1],
                    };
                    for j in targets {
                        self.now += Duration::from_millis(1);
                        for t in self.eps[j].handle_relay(self.now, sender, r.clone()) {
                            assert_eq!(t.to, smf_addr());
                            self.to_smf.push((j, Message::parse(&t.bytes).unwrap()));
                        }
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// `bytes` from the SMF to endpoint `i`; the one answer (by the endpoint that sent it).
    fn send(&mut self, i: usize, bytes: &[u8]) -> Option<(usize, Message)> {
        self.now += Duration::from_millis(1);
        for t in self.eps[i].handle(self.now, smf_addr(), bytes) {
            self.to_smf.push((i, Message::parse(&t.bytes).unwrap()));
        }
        self.pump();
        assert!(self.to_smf.len() <= 1, "{:?}", self.to_smf);
        self.to_smf.pop()
    }
}

fn msg(seq: u32, seid: Option<u64>, body: Body) -> Vec<u8> {
    Message {
        seid,
        sequence: seq,
        priority: None,
        body,
    }
    .to_bytes()
    .unwrap()
}

fn cause_of(m: &Message) -> Cause {
    match &m.body {
        Body::AssociationSetupResponse(r) => r.cause,
        Body::AssociationReleaseResponse(r) => r.cause,
        Body::SessionEstablishmentResponse(r) => r.cause,
        Body::SessionModificationResponse(r) => r.cause,
        Body::SessionDeletionResponse(r) => r.cause,
        b => panic!("{b:?}"),
    }
}

#[test]
fn any_endpoint_of_a_cluster_takes_any_message() {
    let mut c = TwoEndpoints::new();
    let setup = msg(
        1,
        None,
        Body::AssociationSetupRequest(AssociationSetupRequest {
            node_id: NodeId::Ipv4(SMF),
            recovery_time_stamp: RecoveryTimeStamp(77),
            up_function_features: None,
            cp_function_features: None,
        }),
    );
    // The association set up with endpoint 0 reaches endpoint 1, which does not answer.
    let (by, r) = c.send(0, &setup).unwrap();
    assert_eq!((by, cause_of(&r)), (0, Cause::REQUEST_ACCEPTED));
    assert!(c.eps[1].is_associated(&NodeId::Ipv4(SMF)));
    assert_eq!(c.eps[1].stats().relayed_in, 1);

    // A session established at endpoint 0 carries its allocator id in its SEID.
    let est = msg(
        2,
        Some(0),
        Body::SessionEstablishmentRequest(session(0x51, v4(1), Some((0x100, ran(9))))),
    );
    let (by, r) = c.send(0, &est).unwrap();
    let Body::SessionEstablishmentResponse(e) = r.body else {
        panic!()
    };
    assert_eq!((by, e.cause), (0, Cause::REQUEST_ACCEPTED));
    let seid = e.up_f_seid.unwrap().seid;
    assert_eq!(
        seid >> 48,
        5 << 8 | 1,
        "endpoint 1's incarnation (5) and allocator id"
    );

    // Modified through endpoint 1: relayed to endpoint 0, answered by endpoint 1.
    let modify = msg(
        3,
        Some(seid),
        Body::SessionModificationRequest(retunnel(0x200, ran(8))),
    );
    let (by, r) = c.send(1, &modify).unwrap();
    assert_eq!(
        (by, r.seid, cause_of(&r)),
        (1, Some(0x51), Cause::REQUEST_ACCEPTED)
    );
    assert_eq!(c.eps[0].sessions_impl().down[&v4(1)].0, 0x200);
    assert_eq!(c.eps[1].sessions_impl().applies, 0);
    assert_eq!(c.eps[1].stats().relayed_out, 1);

    // A retransmission through endpoint 1 is answered from endpoint 0's cache.
    let applies = c.eps[0].sessions_impl().applies;
    let (by, again) = c.send(1, &modify).unwrap();
    assert_eq!((by, again), (1, r));
    assert_eq!(c.eps[0].sessions_impl().applies, applies);
    assert_eq!(c.eps[0].stats().retransmissions, 1);

    // A change the cluster installs later: the answer follows its completion.
    c.eps[0].sessions_impl_mut().defer = true;
    let modify = msg(
        4,
        Some(seid),
        Body::SessionModificationRequest(retunnel(0x300, ran(8))),
    );
    assert!(c.send(1, &modify).is_none());
    let (token, changes, ues) = c.eps[0].sessions_impl_mut().deferred.pop().unwrap();
    c.eps[0]
        .sessions_impl_mut()
        .install(&changes, &ues)
        .unwrap();
    c.eps[0].sessions_impl_mut().defer = false;
    c.now += Duration::from_millis(1);
    assert!(c.eps[0].complete(c.now, token, Ok(())).is_empty());
    c.pump();
    let (by, r) = c.to_smf.pop().unwrap();
    assert_eq!((by, cause_of(&r)), (1, Cause::REQUEST_ACCEPTED));

    // A SEID that names endpoint 1 but that it does not hold: its answer, through endpoint 0.
    let unknown = msg(5, Some((2 << 48) | 77), Body::SessionDeletionRequest);
    let (by, r) = c.send(0, &unknown).unwrap();
    assert_eq!((by, cause_of(&r)), (0, Cause::SESSION_CONTEXT_NOT_FOUND));

    // A SEID that names no endpoint of the cluster: answered where it came, nothing relayed.
    let out_before = c.eps[0].stats().relayed_out;
    let nowhere = msg(20, Some((7 << 48) | 77), Body::SessionDeletionRequest);
    let (by, r) = c.send(0, &nowhere).unwrap();
    assert_eq!((by, cause_of(&r)), (0, Cause::SESSION_CONTEXT_NOT_FOUND));
    assert_eq!(c.eps[0].stats().relayed_out, out_before);

    // Deleted through endpoint 1.
    let (by, r) = c
        .send(1, &msg(6, Some(seid), Body::SessionDeletionRequest))
        .unwrap();
    assert_eq!((by, cause_of(&r)), (1, Cause::REQUEST_ACCEPTED));
    assert_eq!(c.eps[0].session_count(), 0);
    assert!(c.eps[0].sessions_impl().down.is_empty());

    // A stranger's session request is neither answered nor relayed.
    let out_before = c.eps[1].stats().relayed_out;
    c.now += Duration::from_millis(1);
    let stranger = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)), 8805);
    let modify = msg(7, Some(seid), Body::SessionDeletionRequest);
    assert!(c.eps[1].handle(c.now, stranger, &modify).is_empty());
    assert!(c.eps[1].poll_relay().is_none());
    assert_eq!(c.eps[1].stats().relayed_out, out_before);

    // Released through endpoint 1: endpoint 0's sessions of that peer go too, unanswered.
    let est = msg(
        8,
        Some(0),
        Body::SessionEstablishmentRequest(session(0x52, v4(2), Some((0x101, ran(9))))),
    );
    assert_eq!(
        cause_of(&c.send(0, &est).unwrap().1),
        Cause::REQUEST_ACCEPTED
    );
    assert_eq!(c.eps[0].session_count(), 1);
    let release = msg(
        9,
        None,
        Body::AssociationReleaseRequest(AssociationReleaseRequest {
            node_id: NodeId::Ipv4(SMF),
        }),
    );
    let (by, r) = c.send(1, &release).unwrap();
    assert_eq!((by, cause_of(&r)), (1, Cause::REQUEST_ACCEPTED));
    assert_eq!(c.eps[0].session_count(), 0);
    assert!(!c.eps[0].is_associated(&NodeId::Ipv4(SMF)));
    assert!(c.eps[0].sessions_impl().down.is_empty());
}

#[test]
fn a_lone_endpoint_does_not_relay() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let (_, r) = smf.delete(&mut upf, (1 << 48) | 5);
    assert_eq!(r.cause, Cause::SESSION_CONTEXT_NOT_FOUND);
    assert!(upf.poll_relay().is_none());
}

/// The endpoint heartbeats the peers that set up their association with it (TS 29.244
/// 6.2.2): every interval, one request; an answer with a new Recovery Time Stamp counts a
/// restart; three unanswered in a row count the peer dead until it answers again.
#[test]
fn we_heartbeat_our_peers_and_count_the_dead() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    let node = NodeId::Ipv4(SMF);
    let at = |s: u64| Duration::from_secs(s);
    assert!(upf.poll(at(5)).is_empty(), "not due yet");
    let heartbeat = |upf: &mut Upf<Cluster>, s: u64| -> u32 {
        let out = upf.poll(at(s));
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].to, smf_addr());
        let m = Message::parse(&out[0].bytes).unwrap();
        let Body::HeartbeatRequest(h) = m.body else {
            panic!("{m:?}")
        };
        assert_eq!(h.recovery_time_stamp, RecoveryTimeStamp(1000));
        m.sequence
    };
    let answer = |upf: &mut Upf<Cluster>, seq: u32, ts: u32| {
        let bytes = Message {
            seid: None,
            sequence: seq,
            priority: None,
            body: Body::HeartbeatResponse(Heartbeat {
                recovery_time_stamp: RecoveryTimeStamp(ts),
            }),
        }
        .to_bytes()
        .unwrap();
        // A response is answered with nothing.
        assert!(upf.handle(at(0), smf_addr(), &bytes).is_empty());
    };
    let seq = heartbeat(&mut upf, 11);
    assert!(upf.poll(at(12)).is_empty(), "one per interval");
    answer(&mut upf, seq, 77);
    assert_eq!(upf.stats().peer_restarts, 0);
    // The SMF restarted: its answer says so.
    let seq = heartbeat(&mut upf, 22);
    answer(&mut upf, seq, 78);
    assert_eq!(upf.stats().peer_restarts, 1);
    // An answer to no request of ours changes nothing.
    answer(&mut upf, seq, 79);
    assert_eq!(upf.stats().peer_restarts, 1);
    // Silence: three unanswered in a row, then dead (counted once).
    for s in [33, 44, 55] {
        heartbeat(&mut upf, s);
        assert!(!upf.is_peer_dead(&node));
    }
    let seq = heartbeat(&mut upf, 66);
    assert!(upf.is_peer_dead(&node));
    heartbeat(&mut upf, 77);
    assert_eq!(upf.stats().peers_dead, 1);
    assert_eq!(upf.stats().heartbeats_sent, 7);
    // An answer to an older request is no answer; to the last one revives it.
    answer(&mut upf, seq, 78);
    assert!(upf.is_peer_dead(&node));
    let seq = heartbeat(&mut upf, 88);
    answer(&mut upf, seq, 78);
    assert!(!upf.is_peer_dead(&node));
    // Its sessions and association stay throughout.
    assert!(upf.is_associated(&node));
}

/// A heartbeat answer (or any message) from `from` to `upf` at `now`: what it sends back.
fn heartbeat_answer(upf: &mut Upf<Cluster>, now: Duration, seq: u32, ts: u32) -> Vec<Transmit> {
    let bytes = msg(
        seq,
        None,
        Body::HeartbeatResponse(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(ts),
        }),
    );
    upf.handle(now, smf_addr(), &bytes)
}

/// The sequence number of the Heartbeat Request among `out` (there must be one).
fn heartbeat_seq(out: &[Transmit]) -> u32 {
    let hb: Vec<Message> = (out.iter())
        .map(|t| Message::parse(&t.bytes).unwrap())
        .filter(|m| matches!(m.body, Body::HeartbeatRequest(_)))
        .collect();
    assert_eq!(hb.len(), 1, "{out:?}");
    hb[0].sequence
}

fn setup_from(node: NodeId, ts: u32) -> Body {
    Body::AssociationSetupRequest(AssociationSetupRequest {
        node_id: node,
        recovery_time_stamp: RecoveryTimeStamp(ts),
        up_function_features: None,
        cp_function_features: None,
    })
}

/// Issue 29: with `Config::allowed_peers` set, nothing from another address is handled: an
/// Association Setup is answered Request rejected (64), anything else is dropped; all counted.
/// Before, any address could associate.
#[test]
fn peers_outside_the_allowed_addresses_are_not_handled() {
    let mut c = config();
    c.allowed_peers = vec![sb_pfcp::prefix::parse("10.0.0.0/30").unwrap()];
    let mut upf = Upf::new(c, Cluster::default());
    let mut stranger = Smf::new();
    stranger.addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 8805);
    stranger.node = NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 9));
    let r = stranger.associate(&mut upf);
    assert_eq!(r.cause, Cause::REQUEST_REJECTED);
    assert!(r.up_function_features.is_none());
    assert_eq!(upf.association_count(), 0);
    let hb = Body::HeartbeatRequest(Heartbeat {
        recovery_time_stamp: RecoveryTimeStamp(5),
    });
    assert!(stranger.send(&mut upf, None, hb).is_none());
    let est = Body::SessionEstablishmentRequest(session(1, v4(1), Some((7, ENB))));
    assert!(stranger.send(&mut upf, Some(0), est).is_none());
    // A PFCP version we do not speak: not even Version Not Supported to a stranger.
    let mut v2 = msg(
        9,
        None,
        Body::HeartbeatRequest(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(5),
        }),
    );
    v2[0] = (v2[0] & 0x1f) | (2 << 5);
    assert!(upf
        .handle(Duration::from_secs(1), stranger.addr, &v2)
        .is_empty());
    assert_eq!(upf.stats().peers_refused, 4);
    assert_eq!(upf.stats().rx.values().sum::<u64>(), 0, "nothing handled");
    assert_eq!(upf.sessions_impl().applies, 0);
    // The configured SMF (10.0.0.1, in the /30) is served.
    let mut smf = Smf::new();
    assert_eq!(smf.associate(&mut upf).cause, Cause::REQUEST_ACCEPTED);
    let e = smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    assert_eq!(e.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.stats().peers_refused, 4);
}

/// Issue 29: an Association Setup with an associated Node ID from another address does not
/// take the association over (before, it replaced it and deleted every session of the SMF):
/// Request rejected, counted, the sessions stay. From the same address it replaces it (TS
/// 29.244 6.2.6.2.2); from another address once our heartbeats count the old peer dead.
#[test]
fn another_address_cannot_take_an_associated_node_id_over() {
    let mut c = config();
    c.dead_peer_grace = None;
    let mut upf = Upf::new(c, Cluster::default());
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    let mut attacker = Smf::new();
    attacker.addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 66)), 8805);
    let r = attacker.associate(&mut upf);
    assert_eq!(r.cause, Cause::REQUEST_REJECTED);
    assert_eq!(upf.stats().takeovers_refused, 1);
    assert_eq!(upf.session_count(), 1);
    assert_eq!(upf.sessions_impl().down.len(), 1);
    // The attacker got no association: its session requests are not served.
    let e = attacker.establish(&mut upf, session(2, v4(2), Some((8, ENB))));
    assert_eq!(e.cause, Cause::NO_ESTABLISHED_PFCP_ASSOCIATION);
    // The SMF's own requests still are.
    let seid = first_seid(&upf);
    let (_, m) = smf.modify(&mut upf, seid, drop_downlink());
    assert_eq!(m.cause, Cause::REQUEST_ACCEPTED);
    // The SMF silent for three heartbeats, then dead: another address may take over.
    for s in [11, 21, 31, 41] {
        upf.poll(Duration::from_secs(s));
    }
    assert!(upf.is_peer_dead(&NodeId::Ipv4(SMF)));
    assert_eq!(upf.session_count(), 1, "no grace: kept while dead");
    let r = attacker.associate(&mut upf);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.session_count(), 0);
    assert!(upf.sessions_impl().down.is_empty() && upf.sessions_impl().up.is_empty());
    assert_eq!(upf.stats().takeovers_refused, 1);
}

fn first_seid(upf: &Upf<Cluster>) -> u64 {
    upf.session_ids().next().unwrap()
}

/// TS 29.244 6.2.2 / TS 23.527: a heartbeat answer with a new Recovery Time Stamp (the SMF
/// restarted without setting up its association again) deletes the peer's sessions through
/// the cluster at the next poll (counted); the association stays, and later sessions live.
/// Also when the cluster installs the removal later: its answer goes to nobody.
#[test]
fn a_restarted_smf_loses_its_sessions_and_keeps_its_association() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    smf.establish(&mut upf, session(2, v4(2), Some((8, ENB))));
    let at = Duration::from_secs;
    let seq = heartbeat_seq(&upf.poll(at(11)));
    assert!(heartbeat_answer(&mut upf, at(11), seq, 77).is_empty());
    assert!(upf.poll(at(15)).is_empty());
    assert_eq!(upf.session_count(), 2, "same time stamp: nothing happens");
    let seq = heartbeat_seq(&upf.poll(at(21)));
    upf.sessions_impl_mut().defer = true;
    assert!(heartbeat_answer(&mut upf, at(21), seq, 78).is_empty());
    assert_eq!(upf.stats().peer_restarts, 1);
    assert!(upf.poll(at(21)).is_empty(), "nothing to the SMF");
    let (token, changes, ues) = upf.sessions_impl_mut().deferred.pop().unwrap();
    assert_eq!(changes.len(), 4, "{changes:?}");
    // While installed, a poll does not start it again.
    assert!(upf.poll(at(22)).is_empty());
    assert!(upf.sessions_impl().deferred.is_empty());
    upf.sessions_impl_mut().install(&changes, &ues).unwrap();
    upf.sessions_impl_mut().defer = false;
    assert!(
        upf.complete(at(23), token, Ok(())).is_empty(),
        "answered to nobody"
    );
    assert_eq!(upf.session_count(), 0);
    assert!(upf.sessions_impl().down.is_empty() && upf.sessions_impl().up.is_empty());
    assert_eq!(upf.stats().peer_sessions_deleted, 2);
    assert_eq!(upf.stats().peers_released, 0);
    check_consistent(&upf);
    // The association stays, heartbeated; new sessions are not deleted again.
    assert!(upf.is_associated(&NodeId::Ipv4(SMF)));
    let e = smf.establish(&mut upf, session(3, v4(3), Some((9, ENB))));
    assert_eq!(e.cause, Cause::REQUEST_ACCEPTED);
    let seq = heartbeat_seq(&upf.poll(at(31)));
    heartbeat_answer(&mut upf, at(31), seq, 78);
    upf.poll(at(32));
    assert_eq!(upf.session_count(), 1);
    assert_eq!(upf.stats().peer_sessions_deleted, 2);
}

/// A cluster refusing the removal: tried again at the next poll, until it goes through.
#[test]
fn a_refused_purge_is_tried_again() {
    let mut upf = upf();
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    let at = Duration::from_secs;
    let seq = heartbeat_seq(&upf.poll(at(11)));
    upf.sessions_impl_mut().fail_next = Some(Failure::System);
    heartbeat_answer(&mut upf, at(11), seq, 78);
    assert!(upf.poll(at(11)).is_empty());
    assert_eq!(upf.session_count(), 1);
    upf.poll(at(12));
    assert_eq!(upf.session_count(), 0);
    assert_eq!(upf.stats().peer_sessions_deleted, 1);
}

/// A peer counted dead for `Config::dead_peer_grace` is released: its association and its
/// sessions' forwarding go (counted); it may set up again afterwards.
#[test]
fn a_dead_smf_is_released_after_the_grace() {
    let mut c = config();
    c.dead_peer_grace = Some(Duration::from_secs(30));
    let mut upf = Upf::new(c, Cluster::default());
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    smf.establish(&mut upf, session(1, v4(1), Some((7, ENB))));
    let node = NodeId::Ipv4(SMF);
    // Heartbeats at 11, 21, 31, 41 unanswered: dead at 41.
    for s in [11, 21, 31, 41] {
        upf.poll(Duration::from_secs(s));
    }
    assert!(upf.is_peer_dead(&node));
    for s in [51, 61, 70] {
        upf.poll(Duration::from_secs(s));
    }
    assert!(upf.is_associated(&node), "within the grace");
    assert_eq!(upf.session_count(), 1);
    let out = upf.poll(Duration::from_secs(71));
    assert!(
        out.iter().all(|t| matches!(
            Message::parse(&t.bytes).unwrap().body,
            Body::HeartbeatRequest(_)
        )),
        "no answer to a release nobody asked: {out:?}"
    );
    assert!(!upf.is_associated(&node));
    assert_eq!(upf.session_count(), 0);
    assert!(upf.sessions_impl().down.is_empty() && upf.sessions_impl().up.is_empty());
    assert_eq!(upf.stats().peers_released, 1);
    assert_eq!(upf.stats().peer_sessions_deleted, 1);
    // Nobody is heartbeated any more; the SMF comes back and sets up anew.
    assert!(upf.poll(Duration::from_secs(81)).is_empty());
    assert_eq!(smf.associate(&mut upf).cause, Cause::REQUEST_ACCEPTED);
    // A peer that answers in time is never released.
    let mut t = 100;
    for _ in 0..10 {
        t += 10;
        let seq = heartbeat_seq(&upf.poll(Duration::from_secs(t)));
        heartbeat_answer(&mut upf, Duration::from_secs(t), seq, 77);
    }
    assert!(upf.is_associated(&node));
}

/// An endpoint whose SMF (of `Smf::new`) holds `n` sessions, released `part` at a time.
fn with_sessions(n: u8, part: usize) -> (Upf<Cluster>, Smf) {
    let mut c = config();
    c.dead_peer_grace = Some(Duration::from_secs(30));
    c.release_part = part;
    let mut upf = Upf::new(c, Cluster::default());
    let mut smf = Smf::new();
    smf.associate(&mut upf);
    for i in 1..=n {
        let tunnel = Some((u32::from(i) + 6, ENB));
        let e = smf.establish(&mut upf, session(u64::from(i), v4(i), tunnel));
        assert_eq!(e.cause, Cause::REQUEST_ACCEPTED);
    }
    (upf, smf)
}

/// Issue 29: a dead SMF's sessions are released `Config::release_part` at a time, one part
/// through the cluster at once, the next at the poll after it is installed (500,000 sessions
/// in one change held a node's control thread for seconds, until its peers fenced it); the
/// association goes with the last part. A refused part is tried again a second later.
#[test]
fn a_dead_smfs_sessions_are_released_a_part_at_a_time() {
    let (mut upf, _smf) = with_sessions(5, 2);
    let node = NodeId::Ipv4(SMF);
    let at = Duration::from_millis;
    for s in [11, 21, 31, 41] {
        upf.poll(Duration::from_secs(s));
    }
    upf.sessions_impl_mut().defer = true;
    let mut t = 71_000;
    upf.poll(at(t));
    let mut left = vec![];
    while let Some((token, changes, ues)) = upf.sessions_impl_mut().deferred.pop() {
        assert!(
            upf.sessions_impl().deferred.is_empty(),
            "one part at a time"
        );
        assert!(ues.len() <= 2, "{ues:?}");
        assert!(upf.is_associated(&node), "the association goes last");
        // Installed parts' sessions are gone; a poll meanwhile sends nothing more.
        t += 1;
        upf.poll(at(t));
        assert!(upf.sessions_impl().deferred.is_empty());
        upf.sessions_impl_mut().install(&changes, &ues).unwrap();
        assert!(upf.complete(at(t), token, Ok(())).is_empty());
        left.push(upf.session_count());
        check_consistent(&upf);
        if left.len() == 1 {
            // The next part refused: tried again a second later, not before.
            upf.sessions_impl_mut().fail_next = Some(Failure::System);
            upf.poll(at(t));
            let applies = upf.sessions_impl().applies;
            upf.poll(at(t + 999));
            assert_eq!(upf.sessions_impl().applies, applies);
            t += 1000;
        }
        upf.poll(at(t));
    }
    assert_eq!(left, [3, 1, 0]);
    assert_eq!(upf.stats().release_parts, 4);
    assert_eq!(upf.stats().release_parts_refused, 1);
    assert!(!upf.is_associated(&node));
    assert!(upf.sessions_impl().down.is_empty() && upf.sessions_impl().up.is_empty());
    assert_eq!(upf.stats().peers_released, 1);
    assert_eq!(upf.stats().peer_sessions_deleted, 5);
}

/// The SMF's own Association Release Request over more sessions than a part: answered once
/// the last part is installed (a retransmission meanwhile is dropped as in flight, one after
/// is answered from the cache); the SMF's requests about its sessions meanwhile meet
/// congestion. A refused part answers the request with the failure: the sessions removed so
/// far stay removed, the others and the association stay, and a release asked again works.
#[test]
fn an_smfs_release_of_many_sessions_is_answered_after_its_last_part() {
    let (mut upf, mut smf) = with_sessions(5, 2);
    let rel = |seq| {
        msg(
            seq,
            None,
            Body::AssociationReleaseRequest(AssociationReleaseRequest {
                node_id: NodeId::Ipv4(SMF),
            }),
        )
    };
    let first = rel(100);
    assert_eq!(smf.send_bytes(&mut upf, &first), None, "not yet");
    assert_eq!(upf.session_count(), 3);
    assert_eq!(smf.send_bytes(&mut upf, &first), None, "in flight");
    assert_eq!(upf.stats().retransmissions_in_flight, 1);
    let seid = first_seid(&upf);
    let (_, d) = smf.delete(&mut upf, seid);
    assert_eq!(d.cause, Cause::PFCP_ENTITY_IN_CONGESTION);
    assert!(upf.poll(smf.now).is_empty());
    assert_eq!(upf.session_count(), 1);
    let out = upf.poll(smf.now);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].to, smf_addr());
    let answer = Message::parse(&out[0].bytes).unwrap();
    assert_eq!(cause_of(&answer), Cause::REQUEST_ACCEPTED);
    assert_eq!(upf.session_count(), 0);
    assert_eq!(upf.association_count(), 0);
    assert!(upf.sessions_impl().down.is_empty() && upf.sessions_impl().up.is_empty());
    assert_eq!(smf.send_bytes(&mut upf, &first), Some(answer));
    assert_eq!(upf.stats().release_parts, 3);
    assert_eq!(upf.stats().peer_sessions_deleted, 0, "not a peer's purge");

    let (mut upf, mut smf) = with_sessions(5, 2);
    assert_eq!(smf.send_bytes(&mut upf, &rel(100)), None);
    upf.sessions_impl_mut().fail_next = Some(Failure::System);
    let out = upf.poll(smf.now);
    assert_eq!(out.len(), 1, "{out:?}");
    let answer = Message::parse(&out[0].bytes).unwrap();
    assert_eq!(cause_of(&answer), Cause::SYSTEM_FAILURE);
    assert_eq!(upf.session_count(), 3);
    assert_eq!(upf.association_count(), 1);
    check_consistent(&upf);
    assert!(upf.poll(smf.now).is_empty(), "over");
    let seid = first_seid(&upf);
    let (_, m) = smf.modify(&mut upf, seid, drop_downlink());
    assert_eq!(m.cause, Cause::REQUEST_ACCEPTED, "no longer busy");
    assert_eq!(smf.send_bytes(&mut upf, &rel(101)), None);
    let out = upf.poll(smf.now);
    assert_eq!(
        cause_of(&Message::parse(&out[0].bytes).unwrap()),
        Cause::REQUEST_ACCEPTED
    );
    assert_eq!(upf.session_count(), 0);
    assert_eq!(upf.association_count(), 0);
    assert_eq!(upf.stats().release_parts_refused, 1);
}

/// In a cluster the endpoint that heartbeats the SMF replicates what it found: a restart
/// deletes the SMF's sessions at every endpoint (the association stays everywhere), a dead
/// SMF is released at every endpoint. A takeover from another address is refused by both.
#[test]
fn a_cluster_acts_on_a_restarted_or_dead_smf_at_every_endpoint() {
    let mut c = TwoEndpoints::with(|c| c.dead_peer_grace = Some(Duration::from_secs(30)));
    let setup = msg(1, None, setup_from(NodeId::Ipv4(SMF), 77));
    assert_eq!(
        cause_of(&c.send(0, &setup).unwrap().1),
        Cause::REQUEST_ACCEPTED
    );
    let establish = |c: &mut TwoEndpoints, i: usize, seq: u32, last: u8| {
        let est = msg(
            seq,
            Some(0),
            Body::SessionEstablishmentRequest(session(u64::from(last), v4(last), Some((7, ENB)))),
        );
        assert_eq!(
            cause_of(&c.send(i, &est).unwrap().1),
            Cause::REQUEST_ACCEPTED
        );
    };
    establish(&mut c, 0, 2, 1);
    establish(&mut c, 1, 3, 2);
    assert_eq!((c.eps[0].session_count(), c.eps[1].session_count()), (1, 1));
    // An attacker's setup with the SMF's Node ID through endpoint 1: refused by both.
    let attacker = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 66)), 8805);
    c.now += Duration::from_millis(1);
    let out = c.eps[1].handle(c.now, attacker, &setup);
    assert_eq!(
        cause_of(&Message::parse(&out[0].bytes).unwrap()),
        Cause::REQUEST_REJECTED
    );
    c.pump();
    assert_eq!(c.eps[0].stats().takeovers_refused, 1);
    assert_eq!(c.eps[1].stats().takeovers_refused, 1);
    assert_eq!((c.eps[0].session_count(), c.eps[1].session_count()), (1, 1));
    // Endpoint 0 heartbeats the SMF (the setup came there); the answer says it restarted.
    let at = Duration::from_secs;
    assert!(c.eps[1].poll(at(11)).is_empty());
    let seq = heartbeat_seq(&c.eps[0].poll(at(11)));
    heartbeat_answer(&mut c.eps[0], at(11), seq, 78);
    c.eps[0].poll(at(12));
    c.pump();
    assert!(c.to_smf.is_empty(), "{:?}", c.to_smf);
    assert_eq!((c.eps[0].session_count(), c.eps[1].session_count()), (0, 0));
    assert!(c.eps[1].sessions_impl().down.is_empty());
    assert!(c.eps[0].is_associated(&NodeId::Ipv4(SMF)));
    assert!(c.eps[1].is_associated(&NodeId::Ipv4(SMF)));
    // Still heartbeated by endpoint 0 only.
    assert!(c.eps[1].poll(at(21)).is_empty());
    heartbeat_seq(&c.eps[0].poll(at(21)));
    // New sessions, then the SMF goes silent: released at both after the grace.
    establish(&mut c, 0, 4, 3);
    establish(&mut c, 1, 5, 4);
    for s in [31, 41, 51, 81] {
        c.eps[0].poll(at(s));
    }
    c.pump();
    assert!(c.to_smf.is_empty(), "{:?}", c.to_smf);
    assert_eq!((c.eps[0].session_count(), c.eps[1].session_count()), (0, 0));
    assert!(c.eps[1].sessions_impl().down.is_empty());
    assert!(!c.eps[0].is_associated(&NodeId::Ipv4(SMF)));
    assert!(!c.eps[1].is_associated(&NodeId::Ipv4(SMF)));
    assert_eq!(c.eps[0].stats().peers_released, 1);
    // Now another address may take the Node ID.
    c.now += Duration::from_millis(1);
    let setup = msg(6, None, setup_from(NodeId::Ipv4(SMF), 79));
    let out = c.eps[1].handle(c.now, attacker, &setup);
    assert_eq!(
        cause_of(&Message::parse(&out[0].bytes).unwrap()),
        Cause::REQUEST_ACCEPTED
    );
}

/// A release's walk over the session slab looks at `WALK_PER_PART` (8) parts' worth of slots
/// per poll, so another SMF's sessions between the released one's cost polls, not one long
/// call; a session with a change in flight holds the walk (a tenth of a second at a time)
/// until the change is done.
#[test]
fn a_releases_walk_is_bounded_and_waits_for_a_change_in_flight() {
    let (mut upf, mut smf) = with_sessions(1, 1);
    let other_ip = Ipv4Addr::new(10, 0, 0, 2);
    let mut other = Smf::new();
    other.addr = SocketAddr::new(IpAddr::V4(other_ip), 8805);
    other.node = NodeId::Ipv4(other_ip);
    other.associate(&mut upf);
    for i in 0..20u8 {
        let mut req = session(
            100 + u64::from(i),
            v4(100 + i),
            Some((100 + u32::from(i), ENB)),
        );
        req.node_id = other.node.clone();
        assert_eq!(
            other.establish(&mut upf, req).cause,
            Cause::REQUEST_ACCEPTED
        );
    }
    let e = smf.establish(&mut upf, session(2, v4(2), Some((8, ENB))));
    assert_eq!(e.cause, Cause::REQUEST_ACCEPTED);
    // The SMF's first session has a modification in flight.
    let seid = first_seid(&upf);
    upf.sessions_impl_mut().defer = true;
    smf.seq += 1;
    let body = Body::SessionModificationRequest(drop_downlink());
    assert_eq!(
        smf.send_bytes(&mut upf, &msg(smf.seq, Some(seid), body)),
        None
    );
    upf.sessions_impl_mut().defer = false;
    let rel = Body::AssociationReleaseRequest(AssociationReleaseRequest {
        node_id: NodeId::Ipv4(SMF),
    });
    assert_eq!(smf.send(&mut upf, None, rel), None);
    assert_eq!(upf.stats().release_parts, 0, "held by the modification");
    let at = smf.now;
    assert!(upf.poll(at + Duration::from_millis(50)).is_empty());
    assert_eq!(upf.stats().release_parts, 0);
    let (token, changes, ues) = upf.sessions_impl_mut().deferred.pop().unwrap();
    upf.sessions_impl_mut().install(&changes, &ues).unwrap();
    assert_eq!(
        upf.complete(at, token, Ok(())).len(),
        1,
        "the modification's answer"
    );
    // Then: its first part (slot 0); three polls walk the other SMF's 20 sessions, 8
    // slots each, the third finds the second session, the end of the slab, and answers.
    let mut answers = Vec::new();
    for ms in [100, 101, 102, 103] {
        answers.push(upf.poll(at + Duration::from_millis(ms)).len());
    }
    assert_eq!(answers, [0, 0, 0, 1]);
    assert_eq!(upf.stats().release_parts, 2);
    assert_eq!(upf.session_count(), 20);
    assert!(!upf.is_associated(&NodeId::Ipv4(SMF)));
    assert!(upf.is_associated(&other.node));
    check_consistent(&upf);
}

/// The same in parts ([`Config::release_part`] 1): each endpoint releases its own sessions of
/// the dead SMF a part at a time at its polls, the replicated release too, and nobody
/// answers the SMF.
#[test]
fn every_endpoint_releases_a_dead_smf_a_part_at_a_time() {
    let mut c = TwoEndpoints::with(|c| {
        c.dead_peer_grace = Some(Duration::from_secs(30));
        c.release_part = 1;
    });
    let setup = msg(1, None, setup_from(NodeId::Ipv4(SMF), 77));
    assert_eq!(
        cause_of(&c.send(0, &setup).unwrap().1),
        Cause::REQUEST_ACCEPTED
    );
    for (seq, last) in (2..6).zip(1u8..) {
        let body = Body::SessionEstablishmentRequest(session(
            u64::from(last),
            v4(last),
            Some((u32::from(last) + 6, ENB)),
        ));
        let (_, m) = c
            .send(usize::from(last % 2), &msg(seq, Some(0), body))
            .unwrap();
        assert_eq!(cause_of(&m), Cause::REQUEST_ACCEPTED);
    }
    assert_eq!((c.eps[0].session_count(), c.eps[1].session_count()), (2, 2));
    let at = Duration::from_secs;
    for s in [11, 21, 31, 41, 71] {
        c.eps[0].poll(at(s));
    }
    c.pump();
    // Endpoint 0's cluster installs at once: its first part went when the grace ended, its
    // second at the same poll's turn of the releases. Endpoint 1 took the replicated release
    // and sent its first part.
    assert_eq!((c.eps[0].session_count(), c.eps[1].session_count()), (0, 1));
    assert!(c.eps[1].is_associated(&NodeId::Ipv4(SMF)), "not yet");
    for i in 0..2 {
        assert!(c.eps[i].poll(at(72)).iter().all(|t| matches!(
            Message::parse(&t.bytes).unwrap().body,
            Body::HeartbeatRequest(_)
        )));
    }
    c.pump();
    assert!(c.to_smf.is_empty(), "{:?}", c.to_smf);
    assert_eq!((c.eps[0].session_count(), c.eps[1].session_count()), (0, 0));
    assert!(c.eps[0].sessions_impl().down.is_empty() && c.eps[1].sessions_impl().down.is_empty());
    assert!(!c.eps[0].is_associated(&NodeId::Ipv4(SMF)));
    assert!(!c.eps[1].is_associated(&NodeId::Ipv4(SMF)));
    assert_eq!(c.eps[0].stats().release_parts, 2);
    assert_eq!(c.eps[1].stats().release_parts, 2);
}

/// An SMF that sets the cluster's association up through two endpoints: the copy of its setup
/// at endpoint 0 reaches endpoint 1 after its own setup there and its first session (the
/// relays race the SMF). The same peer process (same address and Recovery Time Stamp) did not
/// restart: the session stays. A copy with a new stamp (a restarted SMF) still takes it.
#[test]
fn a_late_copy_of_the_peers_own_setup_keeps_its_sessions() {
    let mut c = TwoEndpoints::new();
    let node = NodeId::Ipv4(SMF);
    c.now += Duration::from_millis(1);
    let out = c.eps[0].handle(
        c.now,
        smf_addr(),
        &msg(1, None, setup_from(node.clone(), 77)),
    );
    assert_eq!(
        cause_of(&Message::parse(&out[0].bytes).unwrap()),
        Cause::REQUEST_ACCEPTED
    );
    let mut held = Vec::new();
    while let Some(r) = c.eps[0].poll_relay() {
        held.push(r);
    }
    assert_eq!(held.len(), 1);
    let again = msg(2, None, setup_from(node.clone(), 77));
    assert_eq!(
        cause_of(&c.send(1, &again).unwrap().1),
        Cause::REQUEST_ACCEPTED
    );
    let est = msg(
        3,
        Some(0),
        Body::SessionEstablishmentRequest(session(1, v4(1), Some((7, ENB)))),
    );
    assert_eq!(
        cause_of(&c.send(1, &est).unwrap().1),
        Cause::REQUEST_ACCEPTED
    );
    assert_eq!(c.eps[1].session_count(), 1);
    for r in held {
        c.now += Duration::from_millis(1);
        assert!(c.eps[1].handle_relay(c.now, 1, r).is_empty());
    }
    c.pump();
    assert_eq!(
        c.eps[1].session_count(),
        1,
        "the late copy kept the session"
    );
    assert_eq!(c.eps[1].stats().setup_copies_kept, 1);
    assert!(c.eps[1].sessions_impl().down.len() == 1);
    // The SMF restarted (a new stamp): its setup through endpoint 0 takes every session.
    let restarted = msg(4, None, setup_from(node, 78));
    assert_eq!(
        cause_of(&c.send(0, &restarted).unwrap().1),
        Cause::REQUEST_ACCEPTED
    );
    c.pump();
    assert_eq!(c.eps[1].session_count(), 0);
    assert!(c.eps[1].sessions_impl().down.is_empty());
}
