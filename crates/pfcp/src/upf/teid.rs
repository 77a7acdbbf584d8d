//! F-TEIDs (TS 29.244 5.5.3): CHOOSE (we allocate; CHOOSE ID shares one) and F-TEIDs the SMF
//! allocated (honoured when unique here and of no other endpoint's prefix, placing the
//! session on the node whose address they name).

use super::*;

impl<S: Sessions> Upf<S> {
    /// Gives each PDR of `ids` (created or updated by this request) that asks CHOOSE a TEID;
    /// PDRs with one CHOOSE ID share one. A PDR that already held a TEID (`old`) keeps it, and
    /// an explicit F-TEID of such a PDR must be the one it holds. A new PDR's explicit F-TEID
    /// (allocated by the SMF, CH not set: free5GC) is honoured when no session of this
    /// endpoint holds it and no other endpoint of the cluster allocates TEIDs of its prefix
    /// (this endpoint's allocator skips the TEIDs it holds); several PDRs of one request may
    /// name it. Returns the PDRs given a new TEID by us.
    pub(super) fn allocate_teids(
        &mut self,
        rules: &mut Rules,
        old: &VecMap<u16, (CreatePdr, Option<u32>)>,
        ids: &[u16],
    ) -> Result<Vec<(u16, u32)>, Reject> {
        let mut by_choose_id: HashMap<u8, u32> = HashMap::default();
        let mut taken: Vec<u32> = Vec::new();
        let mut given_here: Vec<u32> = Vec::new();
        let mut created = Vec::new();
        for id in ids {
            let held = old.get(id).and_then(|(_, t)| *t);
            let Some((p, _)) = rules.pdrs.get(id) else {
                continue;
            };
            let teid = match p.pdi.local_f_teid {
                None => None,
                Some(FTeid::Assigned { teid: given, .. }) if held == Some(given) => held,
                Some(FTeid::Assigned { .. }) if held.is_some() => {
                    // A PDR's TEID does not change under it.
                    return Err(Reject::ie(
                        Cause::INVALID_F_TEID_ALLOCATION_OPTION,
                        ie_type::F_TEID,
                    ));
                }
                Some(FTeid::Assigned {
                    teid: given, ipv4, ..
                }) => {
                    let top = (given >> 24) as u8;
                    let others_prefix =
                        top != self.config.allocator_id && top != 0 && top <= self.config.endpoints;
                    let fresh = !self.teids.contains(given) && !taken.contains(&given);
                    if given == 0
                        || ipv4.is_none()
                        || others_prefix
                        || !(fresh || given_here.contains(&given))
                    {
                        return Err(Reject::rule(FailedRuleId::Pdr(*id)));
                    }
                    given_here.push(given);
                    Some(given)
                }
                Some(FTeid::Choose {
                    ipv4, choose_id, ..
                }) => {
                    if !ipv4 {
                        return Err(Reject::rule(FailedRuleId::Pdr(*id)));
                    }
                    match held {
                        Some(h) => Some(h),
                        None => {
                            let shared = choose_id.and_then(|c| by_choose_id.get(&c).copied());
                            let t = match shared {
                                Some(t) => t,
                                None => {
                                    let mut not = taken.clone();
                                    not.extend_from_slice(&given_here);
                                    let t = self
                                        .pick_teid(&not)
                                        .ok_or(Reject::cause(Cause::NO_RESOURCES_AVAILABLE))?;
                                    taken.push(t);
                                    if let Some(c) = choose_id {
                                        by_choose_id.insert(c, t);
                                    }
                                    t
                                }
                            };
                            created.push((*id, t));
                            Some(t)
                        }
                    }
                }
            };
            if let Some((_, t)) = rules.pdrs.get_mut(id) {
                *t = teid;
            }
        }
        Ok(created)
    }

    /// The address the SMF gave in the F-TEIDs it allocated (CH not set) among `rules`, if
    /// any, with the first PDR naming it: where the gNB will send that session's uplink, so
    /// the node the session is placed on. Several different addresses: the PDR naming the
    /// second is refused.
    pub(super) fn smf_teid_addr(rules: &Rules) -> Result<Option<(Ipv4Addr, u16)>, Reject> {
        let mut found: Option<(Ipv4Addr, u16)> = None;
        for (id, (p, _)) in &rules.pdrs {
            if let Some(FTeid::Assigned { ipv4: Some(a), .. }) = p.pdi.local_f_teid {
                match found {
                    Some((b, _)) if b != a => return Err(Reject::rule(FailedRuleId::Pdr(*id))),
                    Some(_) => {}
                    None => found = Some((a, *id)),
                }
            }
        }
        Ok(found)
    }

    pub(super) fn pick_teid(&mut self, taken: &[u32]) -> Option<u32> {
        let prefix = u32::from(self.config.allocator_id) << 24;
        for _ in 0..(1u32 << 24) {
            let t = prefix | (self.next_teid & 0xff_ffff);
            self.next_teid = self.next_teid.wrapping_add(1);
            if t & 0xff_ffff != 0 && !self.teids.contains(t) && !taken.contains(&t) {
                return Some(t);
            }
        }
        None
    }
}
