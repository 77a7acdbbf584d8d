//! Sessions (TS 29.244 7.5.2, 7.5.4, 7.5.6): establishment, modification and deletion, the
//! rules a session holds ([`Rules`]), and how an installed session is kept ([`Stored`]: packed,
//! as differences from a template, in the slab) and its UE addresses and TEIDs reserved.

use super::*;

/// A session's rules as installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Rules {
    pub(super) pdrs: VecMap<u16, (CreatePdr, Option<u32>)>,
    pub(super) fars: VecMap<u32, CreateFar>,
    pub(super) qers: VecMap<u32, Qer>,
    pub(super) urrs: VecMap<u32, Urr>,
    pub(super) bar: Option<Bar>,
}

/// A session being set up or changed: its rules decoded, and what they forward.
#[derive(Clone, Debug)]
pub(super) struct Session {
    pub(super) node_id: NodeId,
    pub(super) cp_f_seid: FSeid,
    pub(super) placement: Placement,
    pub(super) rules: Rules,
    pub(super) fwd: Forwarding,
}

impl Session {
    /// The session packed for keeping ([`pack_session`]); a rule too long to pack (a PDR whose
    /// updates made it longer than one IE holds) is refused with its id.
    pub(super) fn pack(&self) -> Result<Box<[u8]>, Reject> {
        let (r, node, fseid) = (&self.rules, &self.node_id, &self.cp_f_seid);
        let pdrs = r.pdrs.values().map(|(p, t)| (p, *t));
        let (fars, qers, urrs) = (r.fars.values(), r.qers.values(), r.urrs.values());
        pack_session(node, fseid, pdrs, fars, qers, urrs, r.bar.as_ref()).map_err(|_| {
            let alone =
                |p: &CreatePdr| pack_session(node, fseid, [(p, None)], [], [], [], None).is_err();
            let far_alone =
                |f: &CreateFar| pack_session(node, fseid, [], [f], [], [], None).is_err();
            let failed = if let Some((id, _)) = r.pdrs.iter().find(|(_, (p, _))| alone(p)) {
                FailedRuleId::Pdr(*id)
            } else if let Some((id, _)) = r.fars.iter().find(|(_, f)| far_alone(f)) {
                FailedRuleId::Far(*id)
            } else {
                FailedRuleId::Qer(r.qers.keys().next().copied().unwrap_or(0))
            };
            Reject::rule(failed)
        })
    }
}

/// An installed session as kept: its placement, the rest packed ([`Session::pack`]: the CP's
/// Node ID and F-SEID and the rules, less than the bytes of the request that made them) and
/// kept as its differences from the first packed session of its length ([`Shapes`]: an SMF's
/// sessions differ in a few fields), in the endpoint's [`Slab`] under its SEID; decoded again
/// ([`Stored::unpack`]) only when a request changes or removes it; its placement is the kept
/// bytes' first byte (one of the few placements the endpoint has seen:
/// [`Shapes::encode_with_head`]). Its forwarding follows from its rules. 8 bytes of slot and
/// the kept ones, where the decoded session took 190 and 700.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stored<'a> {
    /// The placement and the packed session as [`Shapes::encode_with_head`] keeps them.
    pub(super) kept: &'a [u8],
}

/// A placement as a head of [`Shapes::encode_with_head`]: the node (little-endian), the
/// `ran` address.
pub(super) fn placement_head(p: Placement) -> [u8; crate::shapes::HEAD] {
    let [a, b] = p.node.to_le_bytes();
    let [c, d, e, f] = p.ran.octets();
    [a, b, c, d, e, f]
}

/// The placement [`placement_head`] made `head` of.
pub(super) fn placement_of_head([a, b, c, d, e, f]: [u8; crate::shapes::HEAD]) -> Placement {
    Placement {
        node: u16::from_le_bytes([a, b]),
        ran: Ipv4Addr::new(c, d, e, f),
    }
}

impl Stored<'_> {
    /// The bytes to keep of `session`, packed as `packed` (in `shapes`' scratch buffer).
    pub(super) fn encode<'s>(shapes: &'s mut Shapes, session: &Session, packed: &[u8]) -> &'s [u8] {
        shapes.encode_with_head_in(placement_head(session.placement), packed)
    }

    /// The placement and the packed session.
    pub(super) fn packed(&self, shapes: &Shapes) -> (Placement, Vec<u8>) {
        let mut out = Vec::with_capacity(256);
        let head = shapes
            .decode_with_head(self.kept, &mut out)
            .expect("kept sessions decode");
        (placement_of_head(head), out)
    }

    /// Whether the session is `node`'s.
    pub(super) fn is_of(&self, shapes: &Shapes, node: &NodeId) -> bool {
        packed_node_id(&self.packed(shapes).1).is_ok_and(|n| n == *node)
    }

    /// The session, decoded, forwarding as installed with the URRs `stopped` (their quota
    /// used up).
    pub(super) fn unpack(&self, shapes: &Shapes, stopped: &[u32]) -> Session {
        let (placement, packed) = self.packed(shapes);
        Self::session(placement, &packed, stopped)
    }

    /// The session of placement `placement` whose packed bytes are `packed` ([`Stored::unpack`]).
    pub(super) fn session(placement: Placement, packed: &[u8], stopped: &[u32]) -> Session {
        Self::try_session(placement, packed, stopped).expect("kept sessions read back and forward")
    }

    /// [`Stored::session`], checked: Err where the bytes do not parse or the rules do not
    /// forward (bytes from outside: a restore's records).
    pub(super) fn try_session(
        placement: Placement,
        packed: &[u8],
        stopped: &[u32],
    ) -> Result<Session, &'static str> {
        let p = unpack_session(packed).map_err(|_| "the packed session does not parse")?;
        let rules = Rules {
            pdrs: p
                .pdrs
                .into_iter()
                .map(|(r, t)| (r.pdr_id.0, (r, t)))
                .collect(),
            fars: p.fars.into_iter().map(|f| (f.far_id.0, f)).collect(),
            qers: p.qers.into_iter().map(|q| (q.qer_id.0, q)).collect(),
            urrs: p.urrs.into_iter().map(|u| (u.urr_id.0, u)).collect(),
            bar: p.bar,
        };
        let live = Live {
            stopped,
            end_marker: &[],
        };
        let fwd = forwarding(&rules, &live).map_err(|_| "the rules do not forward")?;
        Ok(Session {
            node_id: p.node_id,
            cp_f_seid: p.cp_f_seid,
            placement,
            rules,
            fwd,
        })
    }
}

impl<S: Sessions> Upf<S> {
    pub(super) fn establish(
        &mut self,
        from: SocketAddr,
        seq: u32,
        r: SessionEstablishmentRequest,
    ) -> Option<Message> {
        let t = msg_type::SESSION_ESTABLISHMENT_REQUEST;
        let reply_seid = Some(r.cp_f_seid.seid);
        let Some(node) = self.association_of(from) else {
            self.stats.rejected_no_association += 1;
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::NO_ESTABLISHED_PFCP_ASSOCIATION),
            ));
        };
        if self.busy_nodes.contains(&node) {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        if self.sessions.len() + self.establishing >= self.config.max_sessions {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::NO_RESOURCES_AVAILABLE),
            ));
        }
        if r.cp_f_seid.ipv4.is_none() && r.cp_f_seid.ipv6.is_none() {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::ie(Cause::MANDATORY_IE_INCORRECT, ie_type::F_SEID),
            ));
        }
        let mut rules = Rules {
            pdrs: VecMap::new(),
            fars: VecMap::new(),
            qers: VecMap::new(),
            urrs: VecMap::new(),
            bar: None,
        };
        let mut created_ids = Vec::new();
        let built = (|| {
            bar::create(&mut rules.bar, r.create_bar)?;
            urr::create(&mut rules.urrs, r.create_urr)?;
            qer::create(&mut rules.qers, r.create_qer)?;
            far::create(&mut rules.fars, r.create_far)?;
            pdr::create(&mut rules.pdrs, r.create_pdr, &mut created_ids)
        })();
        if let Err(rej) = built {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        let chosen = match self.choose_ues(&mut rules, (None, None)) {
            Ok(c) => c,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let ues = ues_of(&rules);
        if ues.is_empty() {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::ie(Cause::CONDITIONAL_IE_MISSING, ie_type::UE_IP_ADDRESS),
            ));
        }
        if let Err(rej) = self.check_ues(&rules, None) {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        let created = match self.allocate_teids(&mut rules, &VecMap::new(), &created_ids) {
            Ok(c) => c,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let placed = match Self::smf_teid_addr(&rules) {
            Err(rej) => Err(rej),
            Ok(None) => (self.sessions_impl.place(&ues)).map_err(|f| Reject::cause(f.cause())),
            Ok(Some((a, id))) => {
                (self.sessions_impl.placement_at(a)).ok_or(Reject::rule(FailedRuleId::Pdr(id)))
            }
        };
        let placement = match placed {
            Ok(p) => p,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let fwd = match forwarding(&rules, &Live::default()) {
            Ok(f) => f,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let created = created_pdrs(
            created,
            chosen,
            placement.ran,
            (&rules, self.config.pfcp_addr),
        );
        let changes = Forwarding::default().changes(&fwd, placement.node);
        let session = Session {
            node_id: node,
            cp_f_seid: r.cp_f_seid,
            placement,
            rules,
            fwd,
        };
        let packed = match session.pack() {
            Ok(p) => p,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let seid = self.sessions.reserve();
        self.reserve(&session, seid);
        self.busy.insert(seid);
        self.establishing += 1;
        self.apply(
            from,
            seq,
            t,
            reply_seid,
            changes,
            Commit::Establish {
                seid,
                session: Box::new(session),
                packed,
                created,
            },
        )
    }

    pub(super) fn modify(
        &mut self,
        from: SocketAddr,
        seq: u32,
        seid: u64,
        r: SessionModificationRequest,
    ) -> Option<Message> {
        let t = msg_type::SESSION_MODIFICATION_REQUEST;
        if !self.by_addr.contains_key(&from.ip()) {
            self.stats.dropped_no_association += 1;
            return None;
        }
        let Some((placement, packed)) = self.owned(from, seid) else {
            return Some(self.reject(
                t,
                Some(0),
                seq,
                Reject::cause(Cause::SESSION_CONTEXT_NOT_FOUND),
            ));
        };
        let reply_seid = Some(packed_cp_seid(&packed).expect("packed sessions read back"));
        if self.busy.contains(&seid) || self.releasing_from(from) {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        let mut session = Stored::session(placement, &packed, &self.stopped_of(seid));
        if let Some(f) = r.cp_f_seid {
            session.cp_f_seid = f;
        }
        let has_quota = |u: &Urr| {
            (u.other.iter())
                .any(|ie| matches!(ie.ie_type, ie_type::VOLUME_QUOTA | ie_type::TIME_QUOTA))
        };
        let query_all = r
            .pfcpsmreq_flags
            .is_some_and(|f| f.0 & PfcpSmReqFlags::QAURR != 0);
        let meter = MeterEdit {
            regranted: (r.update_urr.iter())
                .filter(|u| has_quota(u))
                .map(|u| u.urr_id.0)
                .collect(),
            query: r.query_urr.iter().map(|u| u.0).collect(),
            query_all,
            far_changed: !(r.create_far.is_empty()
                && r.update_far.is_empty()
                && r.remove_far.is_empty()),
        };
        let end_marker: Few<u32> = (r.update_far.iter())
            .filter(|u| {
                u.pfcpsmreq_flags
                    .is_some_and(|f| f.0 & PfcpSmReqFlags::SNDEM != 0)
            })
            .map(|u| u.far_id.0)
            .collect();
        let old_pdrs = session.rules.pdrs.clone();
        let old_fwd = session.fwd.clone();
        let (old_ues, old_teids) = (ue_slots(&session.rules), teids_of(&session.rules));
        let mut touched = Vec::new();
        let edited = (|| {
            let rules = &mut session.rules;
            // In this order, which says which of several bad rules is named.
            urr::remove(&mut rules.urrs, &r.remove_urr)?;
            urr::create(&mut rules.urrs, r.create_urr)?;
            urr::update(&mut rules.urrs, r.update_urr)?;
            pdr::remove(&mut rules.pdrs, &r.remove_pdr)?;
            far::remove(&mut rules.fars, &r.remove_far)?;
            qer::remove(&mut rules.qers, &r.remove_qer)?;
            qer::create(&mut rules.qers, r.create_qer)?;
            qer::update(&mut rules.qers, r.update_qer)?;
            far::create(&mut rules.fars, r.create_far)?;
            far::update(&mut rules.fars, r.update_far)?;
            pdr::create(&mut rules.pdrs, r.create_pdr, &mut touched)?;
            pdr::update(&mut rules.pdrs, r.update_pdr, &mut touched)?;
            bar::edit(&mut rules.bar, r.create_bar, r.update_bar, r.remove_bar)?;
            urr::exist(&rules.urrs, &r.query_urr)
        })();
        if let Err(rej) = edited {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        // CHV4/CHV6 in a created or updated PDR: the session's address, or one of the pool.
        let chosen = match self.choose_ues(&mut session.rules, pool::held_ues(&old_pdrs)) {
            Ok(c) => c,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        if ues_of(&session.rules).is_empty() {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::ie(Cause::CONDITIONAL_IE_MISSING, ie_type::UE_IP_ADDRESS),
            ));
        }
        if let Err(rej) = self.check_ues(&session.rules, Some(seid)) {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        let created = match self.allocate_teids(&mut session.rules, &old_pdrs, &touched) {
            Ok(c) => c,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        // An F-TEID the SMF allocated names the session's node, which does not change.
        let moved = match Self::smf_teid_addr(&session.rules) {
            Ok(Some((a, id))) if a != session.placement.ran => {
                Err(Reject::rule(FailedRuleId::Pdr(id)))
            }
            other => other.map(|_| ()),
        };
        if let Err(rej) = moved {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        // URRs whose quota is used up stay stopped, unless given a new one.
        let stopped: Few<u32> = (self.metering.get(&seid))
            .map(|m| m.stopped())
            .unwrap_or_default()
            .into_iter()
            .filter(|id| !meter.regranted.contains(id) && session.rules.urrs.contains_key(id))
            .collect();
        let live = Live {
            stopped: &stopped,
            end_marker: &end_marker,
        };
        let fwd = match forwarding(&session.rules, &live) {
            Ok(f) => f,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let cp = (&session.rules, self.config.pfcp_addr);
        let created = created_pdrs(created, chosen, session.placement.ran, cp);
        let packed = match session.pack() {
            Ok(p) => p,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let changes = old_fwd.changes(&fwd, session.placement.node);
        session.fwd = fwd;
        self.reserve(&session, seid);
        self.busy.insert(seid);
        self.apply(
            from,
            seq,
            t,
            reply_seid,
            changes,
            Commit::Modify {
                seid,
                session: Box::new(session),
                packed,
                created,
                old_ues,
                old_teids,
                meter,
                stopped,
            },
        )
    }

    pub(super) fn delete(&mut self, from: SocketAddr, seq: u32, seid: u64) -> Option<Message> {
        let t = msg_type::SESSION_DELETION_REQUEST;
        if !self.by_addr.contains_key(&from.ip()) {
            self.stats.dropped_no_association += 1;
            return None;
        }
        let Some((placement, packed)) = self.owned(from, seid) else {
            return Some(self.reject(
                t,
                Some(0),
                seq,
                Reject::cause(Cause::SESSION_CONTEXT_NOT_FOUND),
            ));
        };
        let reply_seid = Some(packed_cp_seid(&packed).expect("packed sessions read back"));
        if self.busy.contains(&seid) || self.releasing_from(from) {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        let changes = Stored::session(placement, &packed, &self.stopped_of(seid))
            .fwd
            .changes(&Forwarding::default(), placement.node);
        self.busy.insert(seid);
        self.apply(from, seq, t, reply_seid, changes, Commit::Delete { seid })
    }

    /// The session `seid` if `from`'s association holds it: its placement and packed bytes
    /// (decoded from what is kept once, for the check, the response's SEID and the rules).
    pub(super) fn owned(&self, from: SocketAddr, seid: u64) -> Option<(Placement, Vec<u8>)> {
        let node = self.by_addr.get(&from.ip())?;
        let kept = self.sessions.get(seid)?;
        let (placement, packed) = Stored { kept }.packed(&self.shapes);
        packed_node_id(&packed)
            .is_ok_and(|n| n == *node)
            .then_some((placement, packed))
    }

    /// Marks the UE addresses and TEIDs of `s` as taken by `seid`.
    pub(super) fn reserve(&mut self, s: &Session, seid: u64) {
        for ue in ue_slots(&s.rules) {
            self.ue_index.insert(ue, Slab::slot_of(seid));
        }
        for t in teids_of(&s.rules) {
            self.teids.insert(t);
        }
    }

    /// Every UE address of `rules` is free or already `seid`'s (`None`: a new session's).
    pub(super) fn check_ues(&self, rules: &Rules, seid: Option<u64>) -> Result<(), Reject> {
        for (id, (p, _)) in &rules.pdrs {
            for ue in pdr_ues(p) {
                if self
                    .ue_holder(&ue_slot(&ue))
                    .is_some_and(|s| Some(s) != seid)
                {
                    return Err(Reject::rule(FailedRuleId::Pdr(*id)));
                }
            }
        }
        Ok(())
    }

    pub(super) fn remove_session(&mut self, seid: u64) {
        if let Some(kept) = self.sessions.get(seid) {
            let session = Stored { kept }.unpack(&self.shapes, &[]);
            // While its slot still names it (the UE index holds slots).
            self.forget(&session, seid);
            self.sessions.remove(seid);
            self.session_changed(seid);
        }
    }

    /// The session (reserved or kept) holding UE address `ue` ([`ue_slot`]).
    pub(super) fn ue_holder(&self, ue: &[u8; 16]) -> Option<u64> {
        self.sessions.seid_at(self.ue_index.get(ue)?)
    }

    /// Frees the UE addresses and TEIDs `s` holds (call while its SEID is reserved or kept).
    pub(super) fn forget(&mut self, s: &Session, seid: u64) {
        for ue in ue_slots(&s.rules) {
            if self.ue_holder(&ue) == Some(seid) {
                self.ue_index.remove(&ue);
            }
        }
        for teid in teids_of(&s.rules) {
            self.teids.remove(teid);
        }
    }

    /// The association of `from`, if any.
    pub(super) fn association_of(&self, from: SocketAddr) -> Option<NodeId> {
        self.by_addr.get(&from.ip()).cloned()
    }
}

/// A UE address as the cluster's FIB keys it: IPv4 as IPv4-mapped IPv6 (`::ffff:a.b.c.d`), so
/// that an IPv4 address and its mapped IPv6 form are one UE to the endpoint as they are one key
/// to the FIB (two sessions cannot claim one FIB entry); 16 bytes where an `IpAddr` takes 17.
pub(super) fn ue_slot(ue: &IpAddr) -> [u8; 16] {
    // The FIB keys an IPv6 UE by its /64: one session holds a /64.
    sb_common::ue_key(*ue)
}

/// A session's few UE addresses or TEIDs, sorted, each once (inline up to 4: no allocation).
pub(super) type Few<T> = SmallVec<[T; 4]>;

pub(super) fn sorted_once<T: Ord>(mut v: Few<T>) -> Few<T> {
    v.sort_unstable();
    v.dedup();
    v
}

/// The UE addresses of `rules` as the UE index keys them ([`ue_slot`]), each once.
pub(super) fn ue_slots(rules: &Rules) -> Few<[u8; 16]> {
    sorted_once(
        rules
            .pdrs
            .values()
            .flat_map(|(p, _)| pdr_ues(p))
            .map(|u| ue_slot(&u))
            .collect(),
    )
}

/// Every TEID a session's PDRs hold.
pub(super) fn teids_of(rules: &Rules) -> Few<u32> {
    sorted_once(rules.pdrs.values().filter_map(|(_, t)| *t).collect())
}

/// The Created PDR IEs: the F-TEIDs we allocated (`teids`, at the handling node's `ran`
/// address; a PDR of `rules` whose source is the CP function at the endpoint's PFCP address,
/// `cp.1`, where the node takes the CP function's G-PDUs) and the UE addresses we chose
/// (`ues`), one IE per PDR.
fn created_pdrs(
    teids: Vec<(u16, u32)>,
    ues: Vec<(u16, UeIpAddress)>,
    ran: Ipv4Addr,
    cp: (&Rules, Ipv4Addr),
) -> Vec<CreatedPdr> {
    let from_cp = |id: u16| {
        (cp.0.pdrs.get(&id)).is_some_and(|(p, _)| p.pdi.source_interface == Interface::CP_FUNCTION)
    };
    let mut out: Vec<CreatedPdr> = (teids.into_iter())
        .map(|(id, teid)| CreatedPdr {
            pdr_id: PdrId(id),
            local_f_teid: Some(FTeid::Assigned {
                teid,
                ipv4: Some(if from_cp(id) { cp.1 } else { ran }),
                ipv6: None,
            }),
            ue_ip_address: None,
        })
        .collect();
    for (id, ue) in ues {
        match out.iter_mut().find(|c| c.pdr_id.0 == id) {
            Some(c) => c.ue_ip_address = Some(ue),
            None => out.push(CreatedPdr {
                pdr_id: PdrId(id),
                local_f_teid: None,
                ue_ip_address: Some(ue),
            }),
        }
    }
    out
}
