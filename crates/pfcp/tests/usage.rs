//! Usage reporting, buffering notices, quotas, UE address pools and what the handling node
//! is told to enforce (`UePolicy`), through the endpoint against a fake cluster that keeps
//! each UE's whole entry as the `UeChange`s say and answers `read_usage` from counters the
//! test sets.

use sb_pfcp::*;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// The cluster: each UE's entry, the slots' cumulative counts, reads left pending.
#[derive(Default)]
struct Node {
    ues: HashMap<IpAddr, UeFib>,
    counts: HashMap<u32, Usage>,
    defer_reads: bool,
    reads: Vec<(Token, Vec<u32>)>,
    /// The UE entries removed, in order (the node keeps their counts until read).
    removed_at: Vec<IpAddr>,
    /// Changes that asked for an End Marker.
    end_markers: usize,
    /// The next change is refused with this.
    fail_next: Option<Failure>,
}

impl Sessions for Node {
    fn place(&mut self, _: &[IpAddr]) -> Result<Placement, Failure> {
        Ok(Placement {
            node: 1,
            ran: Ipv4Addr::new(10, 1, 0, 2),
        })
    }
    fn apply(&mut self, _: Token, _: &[FibChange], ues: &[UeChange]) -> Result<Applied, Failure> {
        if let Some(f) = self.fail_next.take() {
            return Err(f);
        }
        for c in ues {
            assert_eq!(self.ues.get(&c.ue).copied().unwrap_or_default(), c.before);
            assert!(!c.before.policy.end_marker);
            self.end_markers += usize::from(c.after.policy.end_marker);
            if c.after == UeFib::default() {
                self.ues.remove(&c.ue);
                self.removed_at.push(c.ue);
            } else {
                // The End Marker is an instruction of this change: never in a `before`.
                let mut kept = c.after;
                kept.policy.end_marker = false;
                self.ues.insert(c.ue, kept);
            }
        }
        Ok(Applied::Done)
    }
    fn read_usage(&mut self, token: Token, teids: &[u32]) -> UsageRead {
        if self.defer_reads {
            self.reads.push((token, teids.to_vec()));
            return UsageRead::Pending;
        }
        UsageRead::Now(teids.iter().map(|t| (*t, self.counts[t])).collect())
    }
}

const SMF: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const ENB: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
const NTP0: u32 = 3_900_000_000;

fn smf() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(SMF), PORT)
}

fn config() -> Config {
    let me = Ipv4Addr::new(10, 0, 0, 100);
    let mut c = Config::new(NodeId::Ipv4(me), RecoveryTimeStamp(NTP0), me);
    c.heartbeat_interval = Duration::ZERO;
    c
}

struct T {
    upf: Upf<Node>,
    seq: u32,
    now: Duration,
}

impl T {
    fn new(config: Config) -> T {
        let mut t = T {
            upf: Upf::new(config, Node::default()),
            seq: 0,
            now: Duration::ZERO,
        };
        let r = t.send(
            None,
            Body::AssociationSetupRequest(AssociationSetupRequest {
                node_id: NodeId::Ipv4(SMF),
                recovery_time_stamp: RecoveryTimeStamp(1),
                up_function_features: None,
                cp_function_features: None,
            }),
        );
        assert!(matches!(r.unwrap().body, Body::AssociationSetupResponse(_)));
        t
    }

    fn send(&mut self, seid: Option<u64>, body: Body) -> Option<Message> {
        self.seq += 1;
        let m = Message {
            seid,
            sequence: self.seq,
            priority: None,
            body,
        };
        let out = self.upf.handle(self.now, smf(), &m.to_bytes().unwrap());
        assert!(out.len() <= 1, "{out:?}");
        out.first().map(|t| Message::parse(&t.bytes).unwrap())
    }

    fn establish(&mut self, req: SessionEstablishmentRequest) -> SessionEstablishmentResponse {
        match self
            .send(Some(0), Body::SessionEstablishmentRequest(req))
            .unwrap()
            .body
        {
            Body::SessionEstablishmentResponse(r) => r,
            b => panic!("{b:?}"),
        }
    }

    fn modify(&mut self, seid: u64, req: SessionModificationRequest) -> Option<Message> {
        self.send(Some(seid), Body::SessionModificationRequest(req))
    }

    /// The node's counts of slot `teid` grow by `ul`/`dl` bytes (one packet each way); fed to
    /// the endpoint.
    fn traffic(&mut self, teid: u32, ul: u64, dl: u64) -> Vec<Transmit> {
        let c = self.upf.sessions_impl_mut().counts.entry(teid).or_default();
        c.ul_bytes += ul;
        c.dl_bytes += dl;
        c.ul_packets += 1;
        c.dl_packets += 1;
        let c = *c;
        self.upf.usage(self.now, teid, c)
    }
}

/// Session Report Requests among `out`: their sequence numbers and bodies.
fn reports(out: &[Transmit]) -> Vec<(u32, Option<u64>, SessionReportRequest)> {
    out.iter()
        .map(|t| {
            assert_eq!(t.to, smf());
            let m = Message::parse(&t.bytes).unwrap();
            match m.body {
                Body::SessionReportRequest(r) => (m.sequence, m.seid, r),
                b => panic!("{b:?}"),
            }
        })
        .collect()
}

fn answer(t: &mut T, seq: u32, cause: Cause) {
    let m = Message {
        seid: Some(0),
        sequence: seq,
        priority: None,
        body: Body::SessionReportResponse(SessionReportResponse {
            cause,
            offending_ie: None,
        }),
    };
    assert!(t
        .upf
        .handle(t.now, smf(), &m.to_bytes().unwrap())
        .is_empty());
}

fn raw(ie_type: u16, value: Vec<u8>) -> RawIe {
    RawIe { ie_type, value }
}

/// A Volume Threshold/Quota IE of `total` bytes.
fn volume(ie_type: u16, total: u64) -> RawIe {
    let mut v = vec![0x01];
    v.extend_from_slice(&total.to_be_bytes());
    raw(ie_type, v)
}

fn secs(ie_type: u16, s: u32) -> RawIe {
    raw(ie_type, s.to_be_bytes().to_vec())
}

/// A URR measuring volume and duration with reporting triggers `(octet 5, octet 6)`.
fn urr(id: u32, triggers: (u8, u8), other: Vec<RawIe>) -> Urr {
    Urr {
        urr_id: UrrId(id),
        measurement_method: Some(MeasurementMethod(
            MeasurementMethod::VOLUM | MeasurementMethod::DURAT,
        )),
        reporting_triggers: Some(ReportingTriggers(vec![triggers.0, triggers.1, 0])),
        other,
    }
}

fn ue() -> Ipv4Addr {
    Ipv4Addr::new(10, 45, 0, 7)
}

/// open5gs-like: a downlink and an uplink PDR, both naming URR 1 and QER 1.
fn request(urrs: Vec<Urr>, down_action: u16, qers: Vec<Qer>) -> SessionEstablishmentRequest {
    let ue_ip = |destination| UeIpAddress {
        ipv4: Some(UeAddr::Addr(ue())),
        ipv6: None,
        destination,
        ipv6_prefix_delegation: None,
        ipv6_prefix_length: None,
    };
    let urr_ids: Vec<UrrId> = urrs.iter().map(|u| u.urr_id).collect();
    let qer_ids: Vec<QerId> = qers.iter().map(|q| q.qer_id).collect();
    SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(SMF),
        cp_f_seid: FSeid {
            seid: 0x77,
            ipv4: Some(SMF),
            ipv6: None,
        },
        create_pdr: vec![
            CreatePdr {
                pdr_id: PdrId(1),
                precedence: Precedence(200),
                pdi: Pdi {
                    source_interface: Interface::CORE,
                    local_f_teid: None,
                    network_instance: None,
                    ue_ip_address: Some(ue_ip(true)),
                    other: vec![],
                },
                outer_header_removal: None,
                far_id: Some(FarId(1)),
                urr_ids: urr_ids.clone(),
                qer_ids: qer_ids.clone(),
            },
            CreatePdr {
                pdr_id: PdrId(2),
                precedence: Precedence(200),
                pdi: Pdi {
                    source_interface: Interface::ACCESS,
                    local_f_teid: Some(FTeid::Choose {
                        ipv4: true,
                        ipv6: false,
                        choose_id: None,
                    }),
                    network_instance: None,
                    ue_ip_address: Some(ue_ip(false)),
                    other: vec![],
                },
                outer_header_removal: Some(OuterHeaderRemoval {
                    description: 0,
                    extension_header_deletion: None,
                }),
                far_id: Some(FarId(2)),
                urr_ids,
                qer_ids,
            },
        ],
        create_far: vec![
            CreateFar {
                far_id: FarId(1),
                apply_action: ApplyAction(down_action),
                forwarding_parameters: (down_action == ApplyAction::FORW).then_some(
                    ForwardingParameters {
                        destination_interface: Some(Interface::ACCESS),
                        network_instance: None,
                        outer_header_creation: Some(OuterHeaderCreation::GtpuIpv4 {
                            teid: 0x100,
                            addr: ENB,
                        }),
                    },
                ),
            },
            CreateFar {
                far_id: FarId(2),
                apply_action: ApplyAction(ApplyAction::FORW),
                forwarding_parameters: Some(ForwardingParameters {
                    destination_interface: Some(Interface::CORE),
                    network_instance: None,
                    outer_header_creation: None,
                }),
            },
        ],
        create_urr: urrs,
        create_qer: qers,
        create_bar: Some(Bar {
            bar_id: BarId(1),
            dl_data_notification_delay: None,
            suggested_buffering_packets_count: Some(SuggestedBufferingPacketsCount(10)),
        }),
    }
}

/// Establishes `req`: the UP SEID and the uplink TEID.
fn establish(t: &mut T, req: SessionEstablishmentRequest) -> (u64, u32) {
    let r = t.establish(req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let teid = match r.created_pdr[0].local_f_teid {
        Some(FTeid::Assigned { teid, .. }) => teid,
        ref f => panic!("{f:?}"),
    };
    (r.up_f_seid.unwrap().seid, teid)
}

fn policy(t: &T) -> UePolicy {
    t.upf.sessions_impl().ues[&IpAddr::V4(ue())].policy
}

#[test]
fn a_volume_threshold_crossed_is_reported_at_once_and_retransmitted_until_answered() {
    let mut t = T::new(config());
    let vt = volume(ie_type::VOLUME_THRESHOLD, 10_000);
    let (_, teid) = establish(
        &mut t,
        request(vec![urr(1, (0x02, 0), vec![vt])], ApplyAction::FORW, vec![]),
    );
    assert!(policy(&t).count);
    assert_eq!(t.upf.metered_teids().collect::<Vec<_>>(), [teid]);
    assert!(t.upf.memory().usage > 0);
    t.now = Duration::from_secs(5);
    assert!(t.traffic(teid, 4000, 5000).is_empty());
    t.now = Duration::from_secs(7);
    let out = t.traffic(teid, 500, 600);
    let r = reports(&out);
    assert_eq!(r.len(), 1);
    let (_, seid, req) = &r[0];
    assert_eq!(*seid, Some(0x77));
    assert_eq!(req.report_type, ReportType(ReportType::USAR));
    let u = req.usage_report[0];
    assert_eq!((u.urr_id, u.ur_seqn), (UrrId(1), UrSeqn(0)));
    assert_eq!(u.trigger, UsageReportTrigger(UsageReportTrigger::VOLTH));
    let v = u.volume_measurement.unwrap();
    assert_eq!(
        (v.total, v.ul, v.dl),
        (Some(10_100), Some(4500), Some(5600))
    );
    assert_eq!((v.ul_packets, v.dl_packets), (Some(2), Some(2)));
    assert_eq!(u.duration_measurement, Some(DurationMeasurement(7)));
    assert_eq!(u.start_time, Some(StartTime(NTP0)));
    assert_eq!(u.end_time, Some(EndTime(NTP0 + 7)));
    // Unanswered: sent again after T1, then given up after N1 sendings.
    t.now = Duration::from_secs(10);
    let again = t.upf.poll(t.now);
    assert_eq!(again, out);
    t.now = Duration::from_secs(13);
    assert_eq!(t.upf.poll(t.now).len(), 1);
    t.now = Duration::from_secs(16);
    assert!(t.upf.poll(t.now).is_empty());
    assert_eq!(t.upf.stats().reports_unanswered, 1);
    assert_eq!(t.upf.stats().report_retransmissions, 2);
    // The next crossing (from what the last report left) is answered: nothing is resent.
    t.now = Duration::from_secs(20);
    let out = t.traffic(teid, 10_000, 0);
    let r = reports(&out);
    assert_eq!(r[0].2.usage_report[0].ur_seqn, UrSeqn(1));
    assert_eq!(
        r[0].2.usage_report[0].volume_measurement.unwrap().ul,
        Some(10_000)
    );
    answer(&mut t, r[0].0, Cause::REQUEST_ACCEPTED);
    t.now = Duration::from_secs(30);
    assert!(t.upf.poll(t.now).is_empty());
    assert_eq!(t.upf.stats().reports_accepted, 1);
}

#[test]
fn a_used_up_quota_stops_forwarding_until_a_new_one() {
    let mut t = T::new(config());
    let q = volume(ie_type::VOLUME_QUOTA, 1000);
    let (seid, teid) = establish(
        &mut t,
        request(vec![urr(1, (0, 0x01), vec![q])], ApplyAction::FORW, vec![]),
    );
    assert!(!policy(&t).dl_gate_closed);
    let out = t.traffic(teid, 600, 500);
    let r = reports(&out);
    assert_eq!(
        r[0].2.usage_report[0].trigger,
        UsageReportTrigger(UsageReportTrigger::VOLQU)
    );
    // The entry stays (its counts with it), both gates closed.
    let p = policy(&t);
    assert!(p.dl_gate_closed && p.ul_gate_closed, "{p:?}");
    assert!(t.upf.sessions_impl().ues[&IpAddr::V4(ue())].down.is_some());
    // More counts (packets in flight) report nothing again.
    assert!(t.traffic(teid, 10, 10).is_empty());
    // A modification that gives no quota keeps it stopped.
    let r = t
        .modify(seid, SessionModificationRequest::default())
        .unwrap();
    assert!(
        matches!(r.body, Body::SessionModificationResponse(ref m) if m.cause == Cause::REQUEST_ACCEPTED)
    );
    assert!(policy(&t).dl_gate_closed);
    // A new quota opens the gates.
    let update = SessionModificationRequest {
        update_urr: vec![Urr {
            urr_id: UrrId(1),
            measurement_method: None,
            reporting_triggers: None,
            other: vec![volume(ie_type::VOLUME_QUOTA, 5000)],
        }],
        ..Default::default()
    };
    t.modify(seid, update).unwrap();
    let p = policy(&t);
    assert!(!p.dl_gate_closed && !p.ul_gate_closed, "{p:?}");
    // Counted from the new quota on.
    assert!(t.traffic(teid, 2000, 2000).is_empty());
    assert_eq!(reports(&t.traffic(teid, 500, 500)).len(), 1);
    assert!(policy(&t).dl_gate_closed);
}

#[test]
fn periods_and_time_thresholds_fire_from_poll() {
    let mut t = T::new(config());
    let p = secs(ie_type::MEASUREMENT_PERIOD, 60);
    let (_, teid) = establish(
        &mut t,
        request(vec![urr(1, (0x01, 0), vec![p])], ApplyAction::FORW, vec![]),
    );
    t.now = Duration::from_secs(30);
    assert!(t.traffic(teid, 100, 200).is_empty());
    t.now = Duration::from_secs(59);
    assert!(t.upf.poll(t.now).is_empty());
    t.now = Duration::from_secs(60);
    let r = reports(&t.upf.poll(t.now));
    let u = r[0].2.usage_report[0];
    assert_eq!(u.trigger, UsageReportTrigger(UsageReportTrigger::PERIO));
    assert_eq!(u.volume_measurement.unwrap().total, Some(300));
    assert_eq!(u.duration_measurement, Some(DurationMeasurement(60)));
    t.now = Duration::from_secs(121);
    let r = reports(&t.upf.poll(t.now));
    assert_eq!(
        r[0].2.usage_report[0].volume_measurement.unwrap().total,
        Some(0)
    );
    assert_eq!(r[0].2.usage_report[0].ur_seqn, UrSeqn(1));
    // A time threshold of its own.
    let mut t = T::new(config());
    let th = secs(ie_type::TIME_THRESHOLD, 10);
    establish(
        &mut t,
        request(vec![urr(3, (0x04, 0), vec![th])], ApplyAction::FORW, vec![]),
    );
    t.now = Duration::from_secs(10);
    let r = reports(&t.upf.poll(t.now));
    assert_eq!(
        r[0].2.usage_report[0].trigger,
        UsageReportTrigger(UsageReportTrigger::TIMTH)
    );
}

#[test]
fn the_deletion_report_is_what_the_node_counted_after_the_removal() {
    let mut t = T::new(config());
    let (seid, teid) = establish(
        &mut t,
        request(
            vec![urr(1, (0, 0), vec![]), urr(2, (0, 0), vec![])],
            ApplyAction::FORW,
            vec![],
        ),
    );
    t.now = Duration::from_secs(3);
    t.traffic(teid, 1000, 2000);
    // The node counts more than it fed; the deletion reads the final counts.
    let c = t.upf.sessions_impl_mut().counts.get_mut(&teid).unwrap();
    c.ul_bytes += 7;
    c.dl_packets += 3;
    t.upf.sessions_impl_mut().defer_reads = true;
    t.now = Duration::from_secs(9);
    assert!(t.send(Some(seid), Body::SessionDeletionRequest).is_none());
    // Read after the entry's removal was applied.
    assert_eq!(t.upf.sessions_impl().removed_at, [IpAddr::V4(ue())]);
    let (token, teids) = t.upf.sessions_impl().reads[0].clone();
    assert_eq!(teids, [teid]);
    let counts = [(teid, t.upf.sessions_impl().counts[&teid])];
    let out = t.upf.complete_usage(t.now, token, &counts);
    let m = Message::parse(&out[0].bytes).unwrap();
    assert_eq!(m.seid, Some(0x77));
    let Body::SessionDeletionResponse(r) = m.body else {
        panic!()
    };
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
    assert_eq!(r.usage_report.len(), 2);
    for u in &r.usage_report {
        assert_eq!(u.trigger, UsageReportTrigger(UsageReportTrigger::TERMR));
        let v = u.volume_measurement.unwrap();
        assert_eq!((v.ul, v.dl, v.total), (Some(1007), Some(2000), Some(3007)));
        assert_eq!((v.ul_packets, v.dl_packets), (Some(1), Some(4)));
        assert_eq!(u.duration_measurement, Some(DurationMeasurement(9)));
    }
    assert_eq!(t.upf.metered_teids().count(), 0);
    // A late answer gives nothing; a retransmission gets the cached answer.
    assert!(t.upf.complete_usage(t.now, token, &counts).is_empty());
}

/// A session with a URR and 30 bytes counted, deleted while the node's counts are pending
/// (the answer waits for them); its uplink TEID.
fn delete_with_counts_pending(t: &mut T) -> u32 {
    let (seid, teid) = establish(
        t,
        request(vec![urr(1, (0, 0), vec![])], ApplyAction::FORW, vec![]),
    );
    t.traffic(teid, 10, 20);
    t.upf.sessions_impl_mut().defer_reads = true;
    assert!(t.send(Some(seid), Body::SessionDeletionRequest).is_none());
    teid
}

#[test]
fn a_deletion_whose_counts_do_not_come_is_answered_on_time() {
    let mut t = T::new(config());
    delete_with_counts_pending(&mut t);
    t.now = Duration::from_secs(1);
    assert!(t.upf.poll(t.now).is_empty());
    t.now = Duration::from_secs(2);
    let out = t.upf.poll(t.now);
    let Body::SessionDeletionResponse(r) = Message::parse(&out[0].bytes).unwrap().body else {
        panic!()
    };
    assert_eq!(
        r.usage_report[0].volume_measurement.unwrap().total,
        Some(30)
    );
    assert_eq!(t.upf.stats().usage_read_timeouts, 1);
}

/// A stand-in's guest endpoint is polled for its reports alone: the late deletion answer
/// goes out, no heartbeat does (the association's heartbeats are its own endpoint's); its
/// requests are numbered from where it is told.
#[test]
fn poll_reports_answers_what_is_due_and_sends_no_heartbeat() {
    let mut c = config();
    c.heartbeat_interval = Duration::from_secs(1);
    let mut t = T::new(c);
    let teid = delete_with_counts_pending(&mut t);
    t.upf.sequences_from(0x80_0000);
    assert_eq!(t.upf.next_sequence(), 0x80_0000);
    t.now = Duration::from_secs(3);
    let out = t.upf.poll_reports(t.now);
    assert_eq!(out.len(), 1, "{out:?}");
    let Body::SessionDeletionResponse(r) = Message::parse(&out[0].bytes).unwrap().body else {
        panic!("{out:?}")
    };
    assert_eq!(
        r.usage_report[0].volume_measurement.unwrap().total,
        Some(30)
    );
    assert_eq!(t.upf.stats().usage_read_timeouts, 1);
    assert!(!t.upf.meters(teid));
    // The whole poll heartbeats the SMF, numbered from where it was told.
    let out = t.upf.poll(t.now);
    let m = Message::parse(&out[0].bytes).unwrap();
    assert!(matches!(m.body, Body::HeartbeatRequest(_)), "{m:?}");
    assert_eq!(m.sequence, 0x80_0000);
    // Numbers stay in PFCP's 24 bits.
    t.upf.sequences_from(0);
    assert!((1..=0xff_ffff).contains(&t.upf.next_sequence()));
    t.upf.sequences_from(0xff_ffff);
    assert_eq!(t.upf.next_sequence(), 0xff_ffff);
}

#[test]
fn query_urr_answers_with_the_usage_now() {
    let mut t = T::new(config());
    let (seid, teid) = establish(
        &mut t,
        request(
            vec![urr(1, (0, 0), vec![]), urr(2, (0, 0), vec![])],
            ApplyAction::FORW,
            vec![],
        ),
    );
    t.traffic(teid, 100, 50);
    t.upf
        .sessions_impl_mut()
        .counts
        .get_mut(&teid)
        .unwrap()
        .dl_bytes += 1;
    let q = SessionModificationRequest {
        query_urr: vec![UrrId(2)],
        ..Default::default()
    };
    let Body::SessionModificationResponse(r) = t.modify(seid, q).unwrap().body else {
        panic!()
    };
    assert_eq!(r.usage_report.len(), 1);
    let u = r.usage_report[0];
    assert_eq!(
        (u.urr_id, u.trigger),
        (UrrId(2), UsageReportTrigger(UsageReportTrigger::IMMER))
    );
    assert_eq!(u.volume_measurement.unwrap().dl, Some(51));
    // An unknown URR is refused by its id.
    let q = SessionModificationRequest {
        query_urr: vec![UrrId(9)],
        ..Default::default()
    };
    let Body::SessionModificationResponse(r) = t.modify(seid, q).unwrap().body else {
        panic!()
    };
    assert_eq!(r.failed_rule_id, Some(FailedRuleId::Urr(9)));
    // Removing a URR reports it (TERMR); QAURR reports the rest.
    let rm = SessionModificationRequest {
        remove_urr: vec![UrrId(1)],
        update_pdr: (1..=2)
            .map(|p| UpdatePdr {
                pdr_id: PdrId(p),
                outer_header_removal: None,
                precedence: None,
                pdi: None,
                far_id: None,
                urr_ids: vec![UrrId(2)],
                qer_ids: vec![],
            })
            .collect(),
        pfcpsmreq_flags: Some(PfcpSmReqFlags(PfcpSmReqFlags::QAURR)),
        ..Default::default()
    };
    let Body::SessionModificationResponse(r) = t.modify(seid, rm).unwrap().body else {
        panic!()
    };
    let got: Vec<_> = r
        .usage_report
        .iter()
        .map(|u| (u.urr_id.0, u.trigger.0))
        .collect();
    assert_eq!(
        got,
        [
            (2, UsageReportTrigger::IMMER),
            (1, UsageReportTrigger::TERMR)
        ]
    );
    assert_eq!(
        r.usage_report[1].volume_measurement.unwrap().total,
        Some(151)
    );
}

fn buff(far: u32, action: u16, ohc: Option<u32>) -> UpdateFar {
    UpdateFar {
        far_id: FarId(far),
        apply_action: Some(ApplyAction(action)),
        update_forwarding_parameters: ohc.map(|teid| ForwardingParameters {
            destination_interface: Some(Interface::ACCESS),
            network_instance: None,
            outer_header_creation: Some(OuterHeaderCreation::GtpuIpv4 { teid, addr: ENB }),
        }),
        pfcpsmreq_flags: None,
    }
}

#[test]
fn buffered_downlink_is_reported_once_per_episode_after_the_delay() {
    let mut t = T::new(config());
    let mut req = request(vec![], ApplyAction::BUFF | ApplyAction::NOCP, vec![]);
    req.create_bar.as_mut().unwrap().dl_data_notification_delay = Some(DlDataNotificationDelay(4));
    let (seid, teid) = establish(&mut t, req);
    let p = policy(&t);
    assert!(p.buffer && p.notify && !p.count, "{p:?}");
    assert_eq!(t.upf.sessions_impl().ues[&IpAddr::V4(ue())].down, None);
    t.now = Duration::from_secs(1);
    // Delayed by 4 x 50 ms.
    assert!(t.upf.downlink_data(t.now, teid).is_empty());
    assert!(t.upf.poll(t.now + Duration::from_millis(199)).is_empty());
    t.now += Duration::from_millis(200);
    let r = reports(&t.upf.poll(t.now));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].2.report_type, ReportType(ReportType::DLDR));
    assert_eq!(
        r[0].2.downlink_data_report.as_ref().unwrap().pdr_id,
        [PdrId(1)]
    );
    answer(&mut t, r[0].0, Cause::REQUEST_ACCEPTED);
    // Once per episode.
    assert!(t.upf.downlink_data(t.now, teid).is_empty());
    t.now += Duration::from_secs(1);
    assert!(t.upf.poll(t.now).is_empty());
    // Paged: FORW with the gNB's tunnel ends the episode (the node flushes).
    let fwd = SessionModificationRequest {
        update_far: vec![buff(1, ApplyAction::FORW, Some(0x200))],
        ..Default::default()
    };
    t.modify(seid, fwd).unwrap();
    let f = t.upf.sessions_impl().ues[&IpAddr::V4(ue())];
    assert_eq!(f.down, Some((0x200, ENB)));
    assert!(!f.policy.buffer);
    // Idle again: a new episode reports again.
    let idle = SessionModificationRequest {
        update_far: vec![buff(1, ApplyAction::BUFF | ApplyAction::NOCP, None)],
        ..Default::default()
    };
    t.modify(seid, idle).unwrap();
    assert!(policy(&t).notify);
    t.upf.downlink_data(t.now, teid);
    t.now += Duration::from_millis(200);
    assert_eq!(reports(&t.upf.poll(t.now)).len(), 1);
    assert_eq!(t.upf.stats().downlink_data_reports, 2);
}

#[test]
fn policy_carries_rates_gates_and_the_end_marker() {
    let mut t = T::new(config());
    let qer = |id: u32, ul: u64, dl: u64| Qer {
        qer_id: QerId(id),
        correlation_id: None,
        gate_status: Some(GateStatus::OPEN),
        mbr: Some(Mbr(Bitrate { ul, dl })),
        gbr: None,
        qfi: Some(Qfi(1)),
        other: vec![],
    };
    // A flow QER and the session AMBR QER: the least of each direction.
    let (seid, _) = establish(
        &mut t,
        request(
            vec![],
            ApplyAction::FORW,
            vec![qer(1, 5000, 20_000), qer(2, 8000, 10_000)],
        ),
    );
    let p = policy(&t);
    assert_eq!((p.ul_mbr_kbps, p.dl_mbr_kbps), (5000, 10_000));
    assert!(!p.end_marker);
    // A handover: SNDEM marks this change, and only this one.
    let mut u = buff(1, ApplyAction::FORW, Some(0x300));
    u.pfcpsmreq_flags = Some(PfcpSmReqFlags(PfcpSmReqFlags::SNDEM));
    let ho = SessionModificationRequest {
        update_far: vec![u],
        ..Default::default()
    };
    t.modify(seid, ho).unwrap();
    let f = t.upf.sessions_impl().ues[&IpAddr::V4(ue())];
    assert_eq!(f.down, Some((0x300, ENB)));
    assert_eq!(t.upf.sessions_impl().end_markers, 1);
    t.modify(
        seid,
        SessionModificationRequest {
            update_far: vec![buff(1, ApplyAction::FORW, Some(0x301))],
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!policy(&t).end_marker);
}

#[test]
fn chv4_takes_addresses_from_the_pool_until_none_is_free() {
    let mut c = config();
    c.ue_pool_v4 = vec![(Ipv4Addr::new(10, 60, 0, 0), 30)];
    let mut t = T::new(c);
    let choose = |cp: u64| {
        let mut r = request(vec![], ApplyAction::FORW, vec![]);
        r.cp_f_seid.seid = cp;
        for p in &mut r.create_pdr {
            p.pdi.ue_ip_address.as_mut().unwrap().ipv4 = Some(UeAddr::Choose);
        }
        r
    };
    let mut given = Vec::new();
    let mut seids = Vec::new();
    for cp in 1..=2 {
        let r = t.establish(choose(cp));
        assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
        let ues: Vec<_> = (r.created_pdr.iter())
            .map(|c| c.ue_ip_address.unwrap().ipv4.unwrap())
            .collect();
        assert_eq!(ues.len(), 2);
        assert_eq!(ues[0], ues[1]);
        given.push(ues[0]);
        seids.push(r.up_f_seid.unwrap().seid);
    }
    given.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(
        given,
        [
            UeAddr::Addr(Ipv4Addr::new(10, 60, 0, 1)),
            UeAddr::Addr(Ipv4Addr::new(10, 60, 0, 2))
        ]
    );
    assert!(t
        .upf
        .sessions_impl()
        .ues
        .contains_key(&IpAddr::V4(Ipv4Addr::new(10, 60, 0, 1))));
    assert_eq!(
        t.establish(choose(3)).cause,
        Cause::ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED
    );
    // Released at deletion.
    let m = t
        .send(Some(seids[0]), Body::SessionDeletionRequest)
        .unwrap();
    assert!(
        matches!(m.body, Body::SessionDeletionResponse(ref d) if d.cause == Cause::REQUEST_ACCEPTED)
    );
    assert_eq!(t.establish(choose(4)).cause, Cause::REQUEST_ACCEPTED);
    // Without a pool: the same cause.
    let mut t = T::new(config());
    assert_eq!(
        t.establish(choose(1)).cause,
        Cause::ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED
    );
}

/// A downlink PDR (Core, FAR 1) whose UE IP Address is `ue`.
fn core_pdr(id: u16, ue: UeIpAddress) -> CreatePdr {
    CreatePdr {
        pdr_id: PdrId(id),
        precedence: Precedence(150),
        pdi: Pdi {
            source_interface: Interface::CORE,
            local_f_teid: None,
            network_instance: None,
            ue_ip_address: Some(ue),
            other: vec![],
        },
        outer_header_removal: None,
        far_id: Some(FarId(1)),
        urr_ids: vec![],
        qer_ids: vec![],
    }
}

fn ue_ip(ipv4: Option<UeAddr<Ipv4Addr>>, ipv6: Option<UeAddr<Ipv6Addr>>) -> UeIpAddress {
    UeIpAddress {
        ipv4,
        ipv6,
        destination: true,
        ipv6_prefix_delegation: None,
        ipv6_prefix_length: None,
    }
}

/// A modification creating `pdrs`: its cause and Created PDRs.
fn create_pdrs(t: &mut T, seid: u64, pdrs: Vec<CreatePdr>) -> SessionModificationResponse {
    let req = SessionModificationRequest {
        create_pdr: pdrs,
        ..Default::default()
    };
    match t.modify(seid, req).unwrap().body {
        Body::SessionModificationResponse(r) => r,
        b => panic!("{b:?}"),
    }
}

/// The request of `request` with CP SEID `cp` and the UE address `ue` in both PDRs.
fn with_ue(cp: u64, v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) -> SessionEstablishmentRequest {
    let mut r = request(vec![], ApplyAction::FORW, vec![]);
    r.cp_f_seid.seid = cp;
    for p in &mut r.create_pdr {
        let u = p.pdi.ue_ip_address.as_mut().unwrap();
        u.ipv4 = v4.map(UeAddr::Addr);
        u.ipv6 = v6.map(UeAddr::Addr);
    }
    r
}

#[test]
fn chv4_and_chv6_in_a_modification_give_the_sessions_address_or_one_of_the_pool() {
    let mut c = config();
    c.ue_pool_v4 = vec![(Ipv4Addr::new(10, 60, 0, 0), 30)];
    c.ue_pool_v6 = vec![("2001:db8:60::".parse().unwrap(), 63)];
    let mut t = T::new(c);
    let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    // A session with an IPv4 address the SMF gave: a new PDR asking CHV4 gets that address
    // (one address per family and session), one asking CHV6 the pool's first /64.
    let (a, _) = establish(&mut t, with_ue(1, Some(ue()), None));
    let r = create_pdrs(
        &mut t,
        a,
        vec![
            core_pdr(3, ue_ip(Some(UeAddr::Choose), None)),
            core_pdr(4, ue_ip(None, Some(UeAddr::Choose))),
        ],
    );
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let given: Vec<_> = (r.created_pdr.iter())
        .map(|c| (c.pdr_id.0, c.local_f_teid, c.ue_ip_address))
        .collect();
    let mut p4 = ue_ip(None, Some(UeAddr::Addr(v6("2001:db8:60::"))));
    p4.ipv6_prefix_length = Some(64);
    assert_eq!(
        given,
        [
            (3, None, Some(ue_ip(Some(UeAddr::Addr(ue())), None))),
            (4, None, Some(p4)),
        ]
    );
    // The cluster forwards the new /64 down the session's tunnel; the IPv4 entry stays.
    let ues = &t.upf.sessions_impl().ues;
    assert_eq!(ues.len(), 2, "{ues:?}");
    let tunnel = |ue: IpAddr| ues[&ue].down;
    assert_eq!(tunnel(IpAddr::V6(v6("2001:db8:60::"))), Some((0x100, ENB)));
    assert_eq!(tunnel(IpAddr::V4(ue())), Some((0x100, ENB)));
    // An IPv6-only session: CHV4 gives the pool's address, CHV6 the session's own /64 (the
    // prefix of the address the SMF gave).
    let (b, _) = establish(&mut t, with_ue(2, None, Some(v6("2001:db8:77:1::5"))));
    let r = create_pdrs(
        &mut t,
        b,
        vec![core_pdr(
            3,
            ue_ip(Some(UeAddr::Choose), Some(UeAddr::Choose)),
        )],
    );
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    let mut both = ue_ip(
        Some(UeAddr::Addr(Ipv4Addr::new(10, 60, 0, 1))),
        Some(UeAddr::Addr(v6("2001:db8:77:1::"))),
    );
    both.ipv6_prefix_length = Some(64);
    assert_eq!(r.created_pdr.len(), 1);
    assert_eq!(r.created_pdr[0].ue_ip_address, Some(both));
    // The second /64 and the second IPv4 address to a third session.
    let (c3, _) = establish(&mut t, with_ue(3, Some(Ipv4Addr::new(10, 45, 0, 9)), None));
    let r = create_pdrs(
        &mut t,
        c3,
        vec![core_pdr(3, ue_ip(None, Some(UeAddr::Choose)))],
    );
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    assert_eq!(
        r.created_pdr[0].ue_ip_address.unwrap().ipv6,
        Some(UeAddr::Addr(v6("2001:db8:60:1::")))
    );
    let (d, _) = establish(&mut t, with_ue(4, None, Some(v6("2001:db8:77:2::1"))));
    let r = create_pdrs(
        &mut t,
        d,
        vec![core_pdr(3, ue_ip(Some(UeAddr::Choose), None))],
    );
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    assert_eq!(
        r.created_pdr[0].ue_ip_address.unwrap().ipv4,
        Some(UeAddr::Addr(Ipv4Addr::new(10, 60, 0, 2)))
    );
    // Both pools used up: a session without an address of the family asking is refused All
    // dynamic addresses are occupied, and nothing of its request is applied.
    let (e, _) = establish(&mut t, with_ue(5, Some(Ipv4Addr::new(10, 45, 0, 10)), None));
    let before = t.upf.sessions_impl().ues.clone();
    let r = create_pdrs(
        &mut t,
        e,
        vec![core_pdr(3, ue_ip(None, Some(UeAddr::Choose)))],
    );
    assert_eq!(r.cause, Cause::ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED, "{r:?}");
    assert!(r.created_pdr.is_empty());
    assert_eq!(t.upf.sessions_impl().ues, before);
    // PDR 3 was not created: creating it again is not a duplicate.
    let given = ue_ip(None, Some(UeAddr::Addr(v6("2001:db8:99::"))));
    let r = create_pdrs(&mut t, e, vec![core_pdr(3, given)]);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    // The first session goes: its /64 is the pool's again, for a modification of another.
    let m = t.send(Some(a), Body::SessionDeletionRequest).unwrap();
    assert!(
        matches!(m.body, Body::SessionDeletionResponse(ref d) if d.cause == Cause::REQUEST_ACCEPTED)
    );
    let (f, _) = establish(&mut t, with_ue(6, Some(Ipv4Addr::new(10, 45, 0, 11)), None));
    let r = create_pdrs(
        &mut t,
        f,
        vec![core_pdr(3, ue_ip(None, Some(UeAddr::Choose)))],
    );
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    assert_eq!(
        r.created_pdr[0].ue_ip_address.unwrap().ipv6,
        Some(UeAddr::Addr(v6("2001:db8:60::")))
    );
}

#[test]
fn a_refused_chv4_modification_reserves_nothing() {
    let mut c = config();
    // One address.
    c.ue_pool_v4 = vec![(Ipv4Addr::new(10, 60, 0, 9), 32)];
    let mut t = T::new(c);
    let only = Ipv4Addr::new(10, 60, 0, 9);
    let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let (a, _) = establish(&mut t, with_ue(1, None, Some(v6("2001:db8:1::"))));
    let before = t.upf.sessions_impl().ues.clone();
    // A rule of the same request fails after the address was picked (PDR 4 names no FAR).
    let mut bad = core_pdr(4, ue_ip(None, Some(UeAddr::Addr(v6("2001:db8:2::")))));
    bad.far_id = Some(FarId(9));
    let r = create_pdrs(
        &mut t,
        a,
        vec![core_pdr(3, ue_ip(Some(UeAddr::Choose), None)), bad],
    );
    assert_eq!(
        (r.cause, r.failed_rule_id),
        (
            Cause::RULE_CREATION_MODIFICATION_FAILURE,
            Some(FailedRuleId::Pdr(4))
        )
    );
    assert!(r.created_pdr.is_empty());
    // The cluster refuses the change.
    t.upf.sessions_impl_mut().fail_next = Some(Failure::NoResources);
    let r = create_pdrs(
        &mut t,
        a,
        vec![core_pdr(3, ue_ip(Some(UeAddr::Choose), None))],
    );
    assert_eq!(r.cause, Cause::NO_RESOURCES_AVAILABLE, "{r:?}");
    assert!(r.created_pdr.is_empty());
    assert_eq!(t.upf.sessions_impl().ues, before);
    // The address is still free: another session's establishment gets it, and then the first
    // session's CHV4 finds none.
    let mut req = with_ue(2, None, None);
    for p in &mut req.create_pdr {
        p.pdi.ue_ip_address.as_mut().unwrap().ipv4 = Some(UeAddr::Choose);
    }
    let r = t.establish(req);
    assert_eq!(r.cause, Cause::REQUEST_ACCEPTED, "{r:?}");
    assert_eq!(
        r.created_pdr[0].ue_ip_address.unwrap().ipv4,
        Some(UeAddr::Addr(only))
    );
    let r = create_pdrs(
        &mut t,
        a,
        vec![core_pdr(3, ue_ip(Some(UeAddr::Choose), None))],
    );
    assert_eq!(r.cause, Cause::ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED, "{r:?}");
}

#[test]
fn the_features_advertised_are_the_implemented_ones() {
    let features = |c: Config| {
        let mut upf = Upf::new(c, Node::default());
        let m = Message {
            seid: None,
            sequence: 1,
            priority: None,
            body: Body::AssociationSetupRequest(AssociationSetupRequest {
                node_id: NodeId::Ipv4(SMF),
                recovery_time_stamp: RecoveryTimeStamp(1),
                up_function_features: None,
                cp_function_features: None,
            }),
        };
        let out = upf.handle(Duration::ZERO, smf(), &m.to_bytes().unwrap());
        let Body::AssociationSetupResponse(r) = Message::parse(&out[0].bytes).unwrap().body else {
            panic!()
        };
        (r.up_function_features.unwrap(), r.recovery_time_stamp)
    };
    let (f, _) = features(config());
    assert_eq!(f.0, [0x12, 0, 0]);
    assert!(f.has(UpFunctionFeatures::FTUP) && f.has(UpFunctionFeatures::DDND));
    for no in [
        UpFunctionFeatures::BUCP,
        UpFunctionFeatures::QUOAC,
        UpFunctionFeatures::UEIP,
        UpFunctionFeatures::MNOP,
    ] {
        assert!(!f.has(no));
    }
    let mut c = config();
    c.ue_pool_v4 = vec![(Ipv4Addr::new(10, 60, 0, 0), 16)];
    assert!(features(c).0.has(UpFunctionFeatures::UEIP));
    // The Recovery Time Stamp is the node's to change.
    let mut upf = Upf::new(config(), Node::default());
    upf.set_recovery_time_stamp(RecoveryTimeStamp(NTP0 + 5));
    let hb = Message {
        seid: None,
        sequence: 9,
        priority: None,
        body: Body::HeartbeatRequest(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(1),
        }),
    };
    let out = upf.handle(Duration::ZERO, smf(), &hb.to_bytes().unwrap());
    let Body::HeartbeatResponse(h) = Message::parse(&out[0].bytes).unwrap().body else {
        panic!()
    };
    assert_eq!(h.recovery_time_stamp, RecoveryTimeStamp(NTP0 + 5));
}

/// A dual-stack session of two flows (an IPv4 and an IPv6 UE address, each with its own
/// downlink PDR, uplink PDR and F-TEID, each PDR pair linked to the flow's QER of 8 Mbit/s
/// and to the session-AMBR QER of 10 Mbit/s, as open5gs and free5GC link it): each flow is
/// policed at its own MBR and both name the same session key and the AMBR, which the handling
/// node polices over both together (`sb_engine::policy`'s `a_sessions_flows_share_its_ambr`:
/// flows of one key held to the AMBR together). A session of one flow keeps the least of
/// its QERs and no AMBR.
#[test]
fn a_sessions_flows_share_its_ambr_qer() {
    let mut t = T::new(config());
    let qer = |id: u32, rate: u64| Qer {
        qer_id: QerId(id),
        correlation_id: None,
        gate_status: Some(GateStatus::OPEN),
        mbr: Some(Mbr(Bitrate { ul: rate, dl: rate })),
        gbr: None,
        qfi: Some(Qfi(1)),
        other: vec![],
    };
    let mut req = request(
        vec![],
        ApplyAction::FORW,
        vec![qer(1, 8000), qer(9, 10_000)],
    );
    let v6 = Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 1);
    let mut more = req.create_pdr.clone();
    for (p, id) in more.iter_mut().zip([3, 4]) {
        p.pdr_id = PdrId(id);
        p.qer_ids = vec![QerId(2), QerId(9)];
        let ue = p.pdi.ue_ip_address.as_mut().unwrap();
        (ue.ipv4, ue.ipv6) = (None, Some(UeAddr::Addr(v6)));
    }
    req.create_pdr.extend(more);
    req.create_qer.push(qer(2, 8000));
    establish(&mut t, req);
    let ues = &t.upf.sessions_impl().ues;
    let (a, b) = (ues[&IpAddr::V4(ue())], ues[&IpAddr::V6(v6)]);
    let (ta, tb) = (a.up.unwrap(), b.up.unwrap());
    assert_ne!(ta, tb, "two flows: two uplink TEIDs");
    for f in [a, b] {
        let p = f.policy;
        assert_eq!((p.dl_mbr_kbps, p.ul_mbr_kbps), (8000, 8000), "{p:?}");
        assert_eq!((p.dl_ambr_kbps, p.ul_ambr_kbps), (10_000, 10_000), "{p:?}");
        assert_eq!(p.session, ta.min(tb), "one key for the session");
    }
    // One flow: the AMBR QER is no more than another QER of it.
    let mut t = T::new(config());
    establish(
        &mut t,
        request(
            vec![],
            ApplyAction::FORW,
            vec![qer(1, 8000), qer(9, 10_000)],
        ),
    );
    let p = policy(&t);
    assert_eq!((p.dl_mbr_kbps, p.dl_ambr_kbps, p.session), (8000, 0, 0));
}
