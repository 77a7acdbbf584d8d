//! Packet detection rules (TS 29.244 5.2.1, 7.5.2.2, 7.5.4.2): a session's PDRs as created,
//! updated and removed, what their PDIs may filter on, and [`forwarding`], what a session's
//! rules (PDRs with their FARs and QERs) become in the data plane: per direction, the PDR of
//! lowest precedence is what the FIB entry follows.

use super::*;

/// Create PDR: each id once; every id goes into `touched` (the PDRs whose F-TEIDs to allocate).
pub(super) fn create(
    pdrs: &mut VecMap<u16, (CreatePdr, Option<u32>)>,
    create: Vec<CreatePdr>,
    touched: &mut Vec<u16>,
) -> Result<(), Reject> {
    for p in create {
        let id = p.pdr_id.0;
        touched.push(id);
        if pdrs.insert(id, (p, None)).is_some() {
            return Err(Reject::rule(FailedRuleId::Pdr(id)));
        }
    }
    Ok(())
}

/// Remove PDR: each must exist.
pub(super) fn remove(
    pdrs: &mut VecMap<u16, (CreatePdr, Option<u32>)>,
    ids: &[PdrId],
) -> Result<(), Reject> {
    for id in ids {
        pdrs.remove(&id.0)
            .ok_or(Reject::rule(FailedRuleId::Pdr(id.0)))?;
    }
    Ok(())
}

/// Update PDR: each must exist (its id goes into `touched`); each field it carries replaces
/// the PDR's (the PDI whole; URR and QER ids when it names any).
pub(super) fn update(
    pdrs: &mut VecMap<u16, (CreatePdr, Option<u32>)>,
    updates: Vec<UpdatePdr>,
    touched: &mut Vec<u16>,
) -> Result<(), Reject> {
    for u in updates {
        let id = u.pdr_id.0;
        let (p, _) = pdrs
            .get_mut(&id)
            .ok_or(Reject::rule(FailedRuleId::Pdr(id)))?;
        touched.push(id);
        if let Some(x) = u.outer_header_removal {
            p.outer_header_removal = Some(x);
        }
        if let Some(x) = u.precedence {
            p.precedence = x;
        }
        if let Some(x) = u.pdi {
            p.pdi = x;
        }
        if let Some(x) = u.far_id {
            p.far_id = Some(x);
        }
        if !u.urr_ids.is_empty() {
            p.urr_ids = u.urr_ids;
        }
        if !u.qer_ids.is_empty() {
            p.qer_ids = u.qer_ids;
        }
    }
    Ok(())
}

/// The UE addresses a PDR names.
pub(super) fn pdr_ues(p: &CreatePdr) -> impl Iterator<Item = IpAddr> + '_ {
    p.pdi.ue_ip_address.iter().flat_map(|ue| {
        let v4 = match ue.ipv4 {
            Some(UeAddr::Addr(a)) => Some(IpAddr::V4(a)),
            _ => None,
        };
        let v6 = match ue.ipv6 {
            Some(UeAddr::Addr(a)) => Some(IpAddr::V6(a)),
            _ => None,
        };
        v4.into_iter().chain(v6)
    })
}

/// Every UE address of a session's PDRs.
pub(super) fn ues_of(rules: &Rules) -> Few<IpAddr> {
    sorted_once(rules.pdrs.values().flat_map(|(p, _)| pdr_ues(p)).collect())
}

/// What a PDR's PDI filters on beyond its interface, F-TEID and UE address.
pub(super) enum Filter {
    /// Every packet of the UE (no SDF filter, or one that matches all).
    All,
    /// Some of them (an SDF filter that does not match all).
    Some,
}

/// The PDI's other IEs: QFI and 3GPP Interface Type are accepted (the QFI of uplink G-PDUs
/// is the data plane's to check, the interface type names what we already know), SDF
/// Filters are read; any other refuses the PDR.
pub(super) fn pdi_filter(p: &CreatePdr) -> Result<Filter, Reject> {
    let fail = Reject::rule(FailedRuleId::Pdr(p.pdr_id.0));
    // Several SDF filters match their union: all when one of them does.
    let (mut filtered, mut all) = (false, false);
    for ie in &p.pdi.other {
        match ie.ie_type {
            ie_type::QFI | ie_type::TGPP_INTERFACE_TYPE => {}
            ie_type::SDF_FILTER => {
                let f = crate::sdf::SdfFilter::read(&ie.value).map_err(|_| fail)?;
                filtered = true;
                all |= f.matches_all();
            }
            _ => return Err(fail),
        }
    }
    Ok(if filtered && !all {
        Filter::Some
    } else {
        Filter::All
    })
}

/// A candidate and the (precedence, PDR id) of the PDR giving it: the lowest wins.
pub(super) type Ranked<T> = ((u32, u16), T);

/// Keeps in `list` the candidate of lowest rank per key.
pub(super) fn rank_in<K: PartialEq, T>(
    list: &mut Few<(K, Ranked<T>)>,
    key: K,
    candidate: Ranked<T>,
) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, e)) if candidate.0 < e.0 => *e = candidate,
        Some(_) => {}
        None => list.push((key, candidate)),
    }
}

/// What a session's forwarding follows besides its rules: the URRs whose quota is used up
/// (their PDRs' gates close) and the FARs whose change of this request came with SNDEM.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Live<'a> {
    pub(super) stopped: &'a [u32],
    pub(super) end_marker: &'a [u32],
}

/// The least of two MBRs in kbit/s, 0 meaning none (a rate beyond `u32` is `u32::MAX`).
fn least(a: u32, b: u64) -> u32 {
    let b = u32::try_from(b).unwrap_or(u32::MAX);
    match (a, b) {
        (_, 0) => a,
        (0, b) => b,
        (a, b) => a.min(b),
    }
}

/// A session's AMBR shared by its flows ([`shared_ambr`]).
struct Shared {
    /// The session key: its lowest uplink TEID.
    session: u32,
    dl_ambr: u32,
    ul_ambr: u32,
    /// Per UE address of the session's flows, its flow's own downlink and uplink MBR.
    flows: Few<(IpAddr, u32, u32)>,
}

/// The session-AMBR of a session of several flows, if it has one. A flow is what the data
/// plane polices apart: the UE addresses of one uplink TEID (the handling node's slot). In a
/// direction where the session has two flows or more, a QER linked to the PDRs of more than
/// one of them (the session-AMBR QER both open5gs and free5GC link to every PDR) is shared:
/// the least MBR of the shared QERs polices the flows together, and each flow's own MBR is
/// the least of its other QERs. A session of one flow (or a UE without an uplink TEID) keeps
/// the least of all its QERs per UE, which polices the same packets.
fn shared_ambr(
    rules: &Rules,
    down: &Winners<IpAddr, (u32, Ipv4Addr)>,
    up: &Winners<u32, IpAddr>,
    uplink: &VecMap<u32, (IpAddr, Option<Ipv4Addr>)>,
) -> Option<Shared> {
    // Per UE address: its flow (the slot the handling node keys it by: the lowest uplink
    // TEID naming it, else its downlink TEID), and the PDR each direction follows.
    let mut ues: Few<(IpAddr, u32, Option<u16>, Option<u16>)> = Few::new();
    for (teid, (ue, _)) in uplink {
        if !ues.iter().any(|(u, ..)| u == ue) {
            let ul = up
                .iter()
                .find(|(k, _)| k == teid)
                .map(|(_, ((_, id), _))| *id);
            ues.push((*ue, *teid, None, ul));
        }
    }
    // The session key: one of our TEIDs (unique in the cluster).
    let session = ues.iter().map(|e| e.1).min()?;
    for (ue, ((_, id), (target, _))) in down {
        match ues.iter_mut().find(|(u, ..)| u == ue) {
            Some(e) => e.2 = Some(*id),
            // Without a downlink tunnel either, no entry in the data plane.
            None => {
                if let Some((teid, _)) = target {
                    ues.push((*ue, *teid, Some(*id), None));
                }
            }
        }
    }
    let mbr = |q: &Qer, dl: bool| q.mbr.map_or(0, |Mbr(m)| if dl { m.dl } else { m.ul });
    let qers_of = |pdr: Option<u16>| {
        pdr.and_then(|id| rules.pdrs.get(&id))
            .map(|(p, _)| p.qer_ids.as_slice())
            .unwrap_or(&[])
    };
    let mut ambr = [0u32; 2];
    let mut own: Few<[u32; 2]> = ues.iter().map(|_| [0, 0]).collect();
    for (d, dl) in [(0, true), (1, false)] {
        let pdr = |e: &(IpAddr, u32, Option<u16>, Option<u16>)| if dl { e.2 } else { e.3 };
        let mut flows: Few<u32> = ues
            .iter()
            .filter(|e| pdr(e).is_some())
            .map(|e| e.1)
            .collect();
        flows.sort_unstable();
        flows.dedup();
        // Is QER `q` linked to the PDRs of two flows or more in this direction?
        let is_shared = |q: u32| {
            let mut of = ues
                .iter()
                .filter(|e| qers_of(pdr(e)).iter().any(|x| x.0 == q))
                .map(|e| e.1);
            of.next().is_some_and(|first| of.any(|k| k != first))
        };
        for (i, e) in ues.iter().enumerate() {
            for q in qers_of(pdr(e)) {
                let Some(qer) = rules.qers.get(&q.0) else {
                    continue;
                };
                if flows.len() > 1 && is_shared(q.0) {
                    ambr[d] = least(ambr[d], mbr(qer, dl));
                } else {
                    own[i][d] = least(own[i][d], mbr(qer, dl));
                }
            }
        }
    }
    if ambr == [0, 0] {
        return None;
    }
    Some(Shared {
        session,
        dl_ambr: ambr[0],
        ul_ambr: ambr[1],
        flows: ues
            .iter()
            .zip(&own)
            .map(|(e, o)| (e.0, o[0], o[1]))
            .collect(),
    })
}

/// A UE's policy as one PDR gives it (the downlink half from its downlink PDR, the uplink
/// half from its uplink one).
#[derive(Clone, Copy, Debug, Default)]
struct Half {
    mbr_kbps: u32,
    gate_closed: bool,
    count: bool,
    buffer: bool,
    notify: bool,
    end_marker: bool,
    drop: bool,
}

/// Per key (a UE address downlink, a TEID uplink) the winning PDR's target and policy half.
type Winners<K, T> = Few<(K, Ranked<(Option<T>, Half)>)>;

/// A session's forwarding from its rules (and `live`), or the rule that cannot be applied.
pub(super) fn forwarding(rules: &Rules, live: &Live) -> Result<Forwarding, Reject> {
    for f in rules.fars.values() {
        far_action(f)?;
    }
    for q in rules.qers.values() {
        check_qer(q)?;
    }
    // The winner per key: its target and its half of the UE's policy.
    let mut down: Winners<IpAddr, (u32, Ipv4Addr)> = Few::new();
    let mut up: Winners<u32, IpAddr> = Few::new();
    let all_ues = ues_of(rules);
    let mut qfi = 0;
    for (&id, (p, teid)) in &rules.pdrs {
        let fail = Reject::rule(FailedRuleId::Pdr(id));
        let filter = pdi_filter(p)?;
        if p.urr_ids.iter().any(|u| !rules.urrs.contains_key(&u.0)) {
            return Err(fail);
        }
        if let Some(ue) = &p.pdi.ue_ip_address {
            if matches!(ue.ipv4, Some(UeAddr::Choose)) || matches!(ue.ipv6, Some(UeAddr::Choose)) {
                return Err(fail);
            }
        }
        let far = p.far_id.and_then(|f| rules.fars.get(&f.0)).ok_or(fail)?;
        let stopped = p.urr_ids.iter().any(|u| live.stopped.contains(&u.0));
        let (mut ul, mut dl) = (Half::default(), Half::default());
        (ul.gate_closed, dl.gate_closed) = (stopped, stopped);
        (ul.count, dl.count) = (!p.urr_ids.is_empty(), !p.urr_ids.is_empty());
        for q in &p.qer_ids {
            let q = rules.qers.get(&q.0).ok_or(fail)?;
            if qfi == 0 && p.pdi.source_interface != Interface::CP_FUNCTION {
                qfi = q.qfi.map_or(0, |Qfi(f)| f);
            }
            if let Some(g) = q.gate_status {
                ul.gate_closed |= g.ul != 0;
                dl.gate_closed |= g.dl != 0;
            }
            if let Some(Mbr(m)) = q.mbr {
                ul.mbr_kbps = least(ul.mbr_kbps, m.ul);
                dl.mbr_kbps = least(dl.mbr_kbps, m.dl);
            }
        }
        let action = far_action(far)?;
        let a = far.apply_action;
        dl.buffer = a.has(ApplyAction::BUFF);
        dl.notify = dl.buffer && a.has(ApplyAction::NOCP);
        dl.drop = a.has(ApplyAction::DROP);
        dl.end_marker = live.end_marker.contains(&far.far_id.0);
        let params = far.forwarding_parameters.as_ref();
        let ohc = params.and_then(|f| f.outer_header_creation.clone());
        let to_cp = params.and_then(|f| f.destination_interface) == Some(Interface::CP_FUNCTION);
        let rank = (p.precedence.0, id);
        // The paths between the UE and the SMF (open5gs's IPv6 router solicitations and
        // advertisements): a PDR from the CP function, or one whose FAR forwards to it, is
        // kept and answered (its F-TEID allocated); its packets go through the control plane
        // (`cp.rs`), never the FIB: it may not be what a direction's FIB entry follows.
        if p.pdi.source_interface == Interface::CP_FUNCTION
            || (to_cp && matches!(filter, Filter::Some))
        {
            continue;
        }
        // The data plane forwards a UE's packets one way per direction: a PDR that matches
        // only some of them cannot be told apart there.
        if matches!(filter, Filter::Some) {
            return Err(fail);
        }
        match p.pdi.source_interface {
            Interface::CORE => {
                if pdr_ues(p).next().is_none()
                    || p.pdi.local_f_teid.is_some()
                    || p.outer_header_removal.is_some()
                {
                    return Err(fail);
                }
                let target = match (action, &ohc) {
                    (Action::Forward, Some(OuterHeaderCreation::GtpuIpv4 { teid, addr })) => {
                        Some((*teid, *addr))
                    }
                    // FORW before the gNB's tunnel is known (free5GC): nowhere to send yet.
                    (Action::Forward, None) => None,
                    (Action::Forward, _) => {
                        return Err(Reject::rule(FailedRuleId::Far(far.far_id.0)))
                    }
                    (Action::Drop, _) => None,
                };
                for ue in pdr_ues(p) {
                    rank_in(&mut down, ue, (rank, (target, dl)));
                }
            }
            Interface::ACCESS => {
                let ohr_ok = p.outer_header_removal.is_some_and(|o| {
                    matches!(
                        o.description,
                        OuterHeaderRemoval::GTPU_UDP_IPV4
                            | OuterHeaderRemoval::GTPU_UDP_IPV6
                            | OuterHeaderRemoval::GTPU_UDP_IP
                    )
                });
                let Some(teid) = *teid else { return Err(fail) };
                if !ohr_ok {
                    return Err(fail);
                }
                let forward = match (action, &ohc) {
                    (Action::Forward, None) => true,
                    (Action::Forward, Some(_)) => {
                        return Err(Reject::rule(FailedRuleId::Far(far.far_id.0)))
                    }
                    (Action::Drop, _) => false,
                };
                let ue = pdr_ues(p).next().or(all_ues.first().copied());
                let target = ue.filter(|_| forward);
                rank_in(&mut up, teid, (rank, (target, ul)));
            }
            _ => return Err(fail),
        }
    }
    let downlink: VecMap<IpAddr, (u32, Ipv4Addr)> = (down.iter())
        .filter_map(|(ue, (_, (t, _)))| t.map(|t| (*ue, t)))
        .collect();
    let peer = downlink.values().next().map(|&(_, p)| p);
    let uplink: VecMap<u32, (IpAddr, Option<Ipv4Addr>)> = (up.iter())
        .filter_map(|(teid, (_, (ue, _)))| ue.map(|ue| (*teid, (ue, peer))))
        .collect();
    let shared = shared_ambr(rules, &down, &up, &uplink);
    let mut policy = VecMap::new();
    for ue in &all_ues {
        let d = down
            .iter()
            .find(|(u, _)| u == ue)
            .map(|(_, (_, (_, h)))| *h);
        // The UE's uplink is its lowest TEID ([`Forwarding::ue`]).
        let u = (uplink.iter())
            .find(|(_, (x, _))| x == ue)
            .and_then(|(t, _)| up.iter().find(|(k, _)| k == t))
            .map(|(_, (_, (_, h)))| *h);
        let (d, u) = (d.unwrap_or_default(), u.unwrap_or_default());
        let (mut dl_mbr, mut ul_mbr) = (d.mbr_kbps, u.mbr_kbps);
        let (mut dl_ambr_kbps, mut ul_ambr_kbps, mut session) = (0, 0, 0);
        if let Some(s) = &shared {
            if let Some((_, dl, ul)) = s.flows.iter().find(|(u, _, _)| u == ue) {
                (dl_mbr, ul_mbr) = (*dl, *ul);
                (dl_ambr_kbps, ul_ambr_kbps, session) = (s.dl_ambr, s.ul_ambr, s.session);
            }
        }
        let p = UePolicy {
            dl_mbr_kbps: dl_mbr,
            ul_mbr_kbps: ul_mbr,
            dl_ambr_kbps,
            ul_ambr_kbps,
            session,
            dl_gate_closed: d.gate_closed,
            ul_gate_closed: u.gate_closed,
            count: d.count || u.count,
            buffer: d.buffer,
            notify: d.notify,
            end_marker: d.end_marker,
            dl_drop: d.drop,
        };
        if p != UePolicy::default() {
            policy.insert(*ue, p);
        }
    }
    Ok(Forwarding {
        downlink,
        uplink,
        qfi,
        policy,
    })
}
