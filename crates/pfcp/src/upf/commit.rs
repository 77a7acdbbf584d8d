//! Changes through the cluster: a request's forwarding changes are handed to
//! [`Sessions::apply`]; the session is kept (or removed) and the response made once the
//! cluster confirms them, now or later ([`Upf::complete`]), and nothing is kept when it fails.

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
    },
    Delete {
        seid: u64,
    },
    /// Removes every session of `node`; then the association is gone (release) or set up anew.
    Release {
        node: NodeId,
        setup: Option<Box<(Association, Message)>>,
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
            Ok(Applied::Done) => Some(self.finish(t, reply_seid, seq, commit, Ok(()))),
            Err(f) => Some(self.finish(t, reply_seid, seq, commit, Err(f))),
        }
    }

    /// Commits (or abandons) a change and gives the response.
    pub(super) fn finish(
        &mut self,
        t: u8,
        reply_seid: Option<u64>,
        seq: u32,
        commit: Commit,
        result: Result<(), Failure>,
    ) -> Message {
        match commit {
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
                    return self.reject(t, reply_seid, seq, Reject::cause(f.cause()));
                }
                let up_f_seid = FSeid {
                    seid,
                    ipv4: Some(self.config.pfcp_addr),
                    ipv6: None,
                };
                let kept = Stored::encode(&mut self.shapes, &session, &packed);
                self.sessions.keep(seid, kept);
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
                    return self.reject(t, reply_seid, seq, Reject::cause(f.cause()));
                }
                let (new_ues, new_teids) = (ue_slots(&session.rules), teids_of(&session.rules));
                let kept = Stored::encode(&mut self.shapes, &session, &packed);
                self.sessions.keep(seid, kept);
                for ue in old_ues.iter().filter(|u| !new_ues.contains(u)) {
                    self.ue_index.remove(ue);
                }
                for teid in old_teids.iter().filter(|t| !new_teids.contains(t)) {
                    self.teids.remove(*teid);
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
                    }),
                }
            }
            Commit::Delete { seid } => {
                self.busy.remove(&seid);
                if let Err(f) = result {
                    return self.reject(t, reply_seid, seq, Reject::cause(f.cause()));
                }
                self.remove_session(seid);
                Message {
                    seid: reply_seid,
                    sequence: seq,
                    priority: None,
                    body: Body::SessionDeletionResponse(SessionDeletionResponse {
                        cause: Cause::REQUEST_ACCEPTED,
                        offending_ie: None,
                    }),
                }
            }
            Commit::Release { node, setup } => {
                self.busy_nodes.remove(&node);
                let seids: Vec<u64> = self.sessions_of(&node).collect();
                for s in &seids {
                    self.busy.remove(s);
                }
                if let Err(f) = result {
                    return self.reject(t, None, seq, Reject::cause(f.cause()));
                }
                for s in seids {
                    self.remove_session(s);
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
        }
    }
}
