//! Changes through the cluster: a request's forwarding changes are handed to
//! [`Sessions::apply`]; the session is kept (or removed) and the response made once the
//! cluster confirms them, now or later ([`Upf::complete`]), and nothing is kept when it fails.

use super::association::Setup;
use super::*;

/// What an accepted change commits when the cluster confirms it.
#[derive(Debug)]
pub(super) enum Commit {
    Establish {
        seid: u64,
        session: Box<Session>,
        packed: Box<[u8]>,
        created: Vec<CreatedPdr>,
    },
    Modify {
        seid: u64,
        session: Box<Session>,
        packed: Box<[u8]>,
        created: Vec<CreatedPdr>,
        /// The UE addresses and TEIDs the session held before.
        old_ues: Few<[u8; 16]>,
        old_teids: Few<u32>,
        /// What it does to the usage state, and the stopped URRs its forwarding holds.
        meter: MeterEdit,
        stopped: Few<u32>,
    },
    Delete {
        seid: u64,
    },
    /// Removes a part of the sessions of `node` being released ([`Upf::apply_release`]),
    /// more parts to follow: answered to nobody.
    ReleasePart {
        node: NodeId,
        seids: Vec<u64>,
    },
    /// Removes the last part of the sessions of `node` being released; then the association
    /// is gone (release) or set up anew. `peer`: because our heartbeats found it restarted or
    /// dead (counted).
    Release {
        node: NodeId,
        seids: Vec<u64>,
        setup: Setup,
        peer: bool,
    },
    /// Closes or opens the gates of URRs whose quota is used up or given anew (no response).
    Enforce {
        seid: u64,
        stopped: Few<u32>,
    },
}

#[derive(Debug)]
pub(super) struct Pending {
    pub(super) to: SocketAddr,
    pub(super) sequence: u32,
    /// The digest of the request's bytes (with `to` and `sequence`, what names the request).
    pub(super) digest: u64,
    /// The SEID of the response header.
    pub(super) reply_seid: Option<u64>,
    /// The message type of the request.
    pub(super) request: u8,
    pub(super) commit: Commit,
}

impl<S: Sessions> Upf<S> {
    /// Hands `changes` to the cluster; commits now, later, or answers the failure.
    pub(super) fn apply(
        &mut self,
        from: SocketAddr,
        seq: u32,
        t: u8,
        reply_seid: Option<u64>,
        changes: Changes,
        commit: Commit,
    ) -> Option<Message> {
        let token = Token(self.next_token);
        self.next_token += 1;
        let result = if changes.0.is_empty() && changes.1.is_empty() {
            Ok(Applied::Done)
        } else {
            self.sessions_impl.apply(token, &changes.0, &changes.1)
        };
        match result {
            Ok(Applied::Pending) => {
                self.in_flight.insert((from, seq, self.digest));
                self.pending.insert(
                    token,
                    Pending {
                        to: from,
                        sequence: seq,
                        digest: self.digest,
                        reply_seid,
                        request: t,
                        commit,
                    },
                );
                None
            }
            Ok(Applied::Done) => {
                let key = (from, self.digest);
                self.finish(key, t, reply_seid, seq, commit, Ok(()))
            }
            Err(f) => self.finish((from, self.digest), t, reply_seid, seq, commit, Err(f)),
        }
    }

    /// Commits (or abandons) a change and gives the response to `to`'s request `seq` (none
    /// yet when it waits for the handling node's counts, [`Upf::read_then`]).
    pub(super) fn finish(
        &mut self,
        (to, digest): (SocketAddr, u64),
        t: u8,
        reply_seid: Option<u64>,
        seq: u32,
        commit: Commit,
        result: Result<(), Failure>,
    ) -> Option<Message> {
        Some(match commit {
            Commit::Establish {
                seid,
                session,
                packed,
                created,
            } => {
                self.busy.remove(&seid);
                self.establishing -= 1;
                if let Err(f) = result {
                    self.forget(&session, seid);
                    self.sessions.unreserve(seid);
                    return Some(self.reject(t, reply_seid, seq, Reject::cause(f.cause())));
                }
                let up_f_seid = FSeid {
                    seid,
                    ipv4: Some(self.config.pfcp_addr),
                    ipv6: None,
                };
                let kept = Stored::encode(&mut self.shapes, &session, &packed);
                self.sessions.keep(seid, kept);
                self.session_changed(seid);
                let smf = report_addr(&session.cp_f_seid);
                let edit = MeterEdit::default();
                let cp_seid = session.cp_f_seid.seid;
                let (m, _) = metering(&session.rules, smf, cp_seid, None, &edit, self.now);
                self.set_metering(seid, m);
                let cp = cp::cp_paths(&session.rules, &session.fwd, session.placement);
                self.set_cp_paths(seid, Some(cp));
                Message {
                    seid: reply_seid,
                    sequence: seq,
                    priority: None,
                    body: Body::SessionEstablishmentResponse(SessionEstablishmentResponse {
                        node_id: self.our_node(),
                        cause: Cause::REQUEST_ACCEPTED,
                        offending_ie: None,
                        up_f_seid: Some(up_f_seid),
                        created_pdr: created,
                        failed_rule_id: None,
                    }),
                }
            }
            Commit::Modify {
                seid,
                session,
                packed,
                created,
                old_ues,
                old_teids,
                meter,
                stopped,
            } => {
                self.busy.remove(&seid);
                if let Err(f) = result {
                    // Free what the new rules reserved and the old ones do not hold.
                    for ue in ue_slots(&session.rules)
                        .iter()
                        .filter(|u| !old_ues.contains(u))
                    {
                        self.ue_index.remove(ue);
                    }
                    for teid in teids_of(&session.rules)
                        .iter()
                        .filter(|t| !old_teids.contains(t))
                    {
                        self.teids.remove(*teid);
                    }
                    return Some(self.reject(t, reply_seid, seq, Reject::cause(f.cause())));
                }
                let (new_ues, new_teids) = (ue_slots(&session.rules), teids_of(&session.rules));
                let kept = Stored::encode(&mut self.shapes, &session, &packed);
                self.sessions.keep(seid, kept);
                self.session_changed(seid);
                for ue in old_ues.iter().filter(|u| !new_ues.contains(u)) {
                    self.ue_index.remove(ue);
                }
                for teid in old_teids.iter().filter(|t| !new_teids.contains(t)) {
                    self.teids.remove(*teid);
                }
                let old = self.metering.get(&seid).cloned();
                let smf = report_addr(&session.cp_f_seid);
                let cp_seid = session.cp_f_seid.seid;
                let (m, removed) = metering(
                    &session.rules,
                    smf,
                    cp_seid,
                    old.as_deref(),
                    &meter,
                    self.now,
                );
                let teids = m.as_ref().map(|m| m.teids.clone()).unwrap_or_default();
                let m = m.map(|mut m| {
                    m.applied_stopped = stopped;
                    m
                });
                self.set_metering(seid, m);
                let cp = cp::cp_paths(&session.rules, &session.fwd, session.placement);
                self.set_cp_paths(seid, Some(cp));
                self.enforce(seid);
                let query = meter.query_all || !meter.query.is_empty();
                if query || !removed.is_empty() {
                    let last = old.map(|o| o.last).unwrap_or_default();
                    let removed = Metering {
                        smf,
                        cp_seid,
                        teids: Few::new(),
                        last,
                        meters: removed,
                        applied_stopped: Few::new(),
                        ddr: Ddr::Idle,
                        ddr_delay: Duration::ZERO,
                        ddr_pdrs: Few::new(),
                        due: None,
                    };
                    let read = Read {
                        deadline: self.now + self.config.usage_read_timeout,
                        to,
                        sequence: seq,
                        digest,
                        reply_seid,
                        kind: ReadKind::Modify {
                            seid,
                            created,
                            query: (!meter.query_all).then_some(meter.query),
                            removed: Box::new(removed),
                        },
                    };
                    return self.read_then(read, &teids);
                }
                Message {
                    seid: reply_seid,
                    sequence: seq,
                    priority: None,
                    body: Body::SessionModificationResponse(SessionModificationResponse {
                        cause: Cause::REQUEST_ACCEPTED,
                        offending_ie: None,
                        created_pdr: created,
                        failed_rule_id: None,
                        usage_report: vec![],
                    }),
                }
            }
            Commit::Delete { seid } => {
                self.busy.remove(&seid);
                if let Err(f) = result {
                    return Some(self.reject(t, reply_seid, seq, Reject::cause(f.cause())));
                }
                self.remove_session(seid);
                let m = self.metering.get(&seid).cloned();
                self.set_metering(seid, None);
                self.set_cp_paths(seid, None);
                // The counts are read now that the session's forwarding is gone: the report
                // is what was forwarded.
                if let Some(m) = m.filter(|m| !m.meters.is_empty()) {
                    let teids = m.teids.clone();
                    let read = Read {
                        deadline: self.now + self.config.usage_read_timeout,
                        to,
                        sequence: seq,
                        digest,
                        reply_seid,
                        kind: ReadKind::Delete(m),
                    };
                    return self.read_then(read, &teids);
                }
                Message {
                    seid: reply_seid,
                    sequence: seq,
                    priority: None,
                    body: Body::SessionDeletionResponse(SessionDeletionResponse {
                        cause: Cause::REQUEST_ACCEPTED,
                        offending_ie: None,
                        usage_report: vec![],
                    }),
                }
            }
            Commit::Enforce { seid, stopped } => {
                self.busy.remove(&seid);
                match result {
                    Ok(()) => {
                        if let Some(m) = self.metering.get_mut(&seid) {
                            m.applied_stopped = stopped;
                        }
                    }
                    Err(_) => self.stats.quota_stops_failed += 1,
                }
                return None;
            }
            Commit::ReleasePart { node, seids } => {
                match result {
                    Ok(()) => {
                        self.release_removed(&node, &seids);
                        if let Some(r) = self.releases.get_mut(&node) {
                            r.in_flight = false;
                            // The request stays in flight until its last part is in.
                            self.in_flight.insert((to, seq, digest));
                        }
                        return None;
                    }
                    Err(f) => return self.release_refused(node, seids, None, f),
                }
            }
            Commit::Release {
                node,
                seids,
                setup,
                peer,
            } => {
                if let Err(f) = result {
                    return self.release_refused(node, seids, Some((setup, peer)), f);
                }
                self.release_removed(&node, &seids);
                self.releases.remove(&node);
                self.busy_nodes.remove(&node);
                if peer {
                    self.stats.peers_released += u64::from(setup.is_none());
                }
                match setup.map(|b| *b) {
                    Some((association, accepted)) => {
                        self.install_association(node, association);
                        accepted
                    }
                    None => {
                        if let Some(a) = self.associations.remove(&node) {
                            if self.by_addr.get(&a.addr) == Some(&node) {
                                self.by_addr.remove(&a.addr);
                            }
                        }
                        Message {
                            seid: None,
                            sequence: seq,
                            priority: None,
                            body: Body::AssociationReleaseResponse(AssociationReleaseResponse {
                                node_id: self.our_node(),
                                cause: Cause::REQUEST_ACCEPTED,
                            }),
                        }
                    }
                }
            }
        })
    }
}
