//! Associations with control-plane peers (TS 29.244 6.2.6): setup, update and release, our
//! heartbeats to the peers that set up their association here and theirs to us (6.2.2), and
//! what a restarted or dead peer means (we offer no session retention):
//! - a new setup with an associated Node ID from the association's address replaces it and
//!   its sessions go (6.2.6.2.2); from another address it is refused with Request rejected
//!   (counted, [`Stats::takeovers_refused`]) unless our heartbeats count the old peer dead
//!   (and this endpoint is the cluster's only one: in a cluster the other endpoints do not
//!   see our heartbeats, so the Node ID is free once the dead peer's association is
//!   released, after [`Config::dead_peer_grace`]). Anyone on the control network who knows
//!   the Node ID could otherwise delete every session of the SMF;
//! - a peer whose Recovery Time Stamp changed in a heartbeat (a restarted CP function that
//!   did not set its association up again; 6.2.2, and TS 23.527's SMF failure clause: "when
//!   a UPF detects that a peer PFCP entity in the SMF has restarted, the UPF shall delete all
//!   session contexts affected") keeps its association, and its sessions are deleted through
//!   [`Sessions::apply`] ([`Stats::peer_sessions_deleted`]);
//! - a peer counted dead ([`Config::heartbeat_misses`] heartbeats in a row unanswered) for
//!   [`Config::dead_peer_grace`] is released: its association and sessions go
//!   ([`Stats::peers_released`]; TS 23.527: a failed SMF's "PDU session contexts and PFCP
//!   associations ... may be deleted").
//!
//! Every release (and a restarted peer's purge, and an association set up anew) removes the
//! peer's sessions a part of [`Config::release_part`] at a time, found by a bounded walk over
//! the session slab and installed one part after the other ([`Upf::poll`] goes on): an SMF with
//! half a million sessions here held a node's control thread for seconds when they went in one
//! change.
//!
//! In a cluster ([`Config::relay`]) only the endpoint that heartbeats a peer (where it set up
//! its association) detects these; it does its own part and replicates the same to the other
//! endpoints as an Association Setup (restart: the other endpoints' sessions of the peer go,
//! as for a real new setup) or Association Release Request (dead) from the peer's address,
//! answered to nobody.

use super::*;

/// A control-plane peer with an association.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Association {
    pub(super) addr: IpAddr,
    pub(super) recovery_time_stamp: RecoveryTimeStamp,
    /// Our heartbeats to it, when it set the association up with this endpoint (not one
    /// replicated from another endpoint of the cluster, which heartbeats it itself).
    pub(super) heartbeat: Option<Heartbeats>,
    /// Its heartbeats showed a new Recovery Time Stamp: its sessions are to be deleted
    /// ([`Upf::poll`]).
    pub(super) restarted: bool,
}

/// An association set up anew at the end of a release, with the answer to its setup (None:
/// the association goes).
pub(super) type Setup = Option<Box<(Association, Message)>>;

/// How many parts' worth of slots a part's walk looks at, at most
/// ([`Upf::apply_release`]).
pub(super) const WALK_PER_PART: usize = 8;

/// A release under way ([`Upf::apply_release`]): the request it answers (the peer's, or ours
/// on its behalf), where its walk over the session slab is, what its end installs.
#[derive(Debug)]
pub(super) struct Releasing {
    to: SocketAddr,
    seq: u32,
    t: u8,
    digest: u64,
    /// The next slot of the session slab the walk looks at: each part takes the node's
    /// sessions from the next few slots, so that neither finding them nor removing them
    /// holds one call for all of them.
    cursor: usize,
    /// The sessions of a refused part, tried again first.
    retry: Vec<u64>,
    /// The association set up anew at the end (None: released); taken by the last part
    /// while it is installed.
    setup: Setup,
    peer: bool,
    /// A part is being installed.
    pub(super) in_flight: bool,
    /// The next part waits until then (a refused part: a second; a session with a change in
    /// flight in its way: a tenth).
    retry_at: Duration,
}

impl Releasing {
    /// Whether its next part may go at `now`.
    pub(super) fn ready(&self, now: Duration) -> bool {
        !self.in_flight && self.retry_at <= now
    }
}

/// Our heartbeats to a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Heartbeats {
    /// Its PFCP address (where the setup came from).
    pub(super) to: SocketAddr,
    /// When the next is due.
    pub(super) next: Duration,
    /// The sequence number of the one unanswered, if any.
    pub(super) waiting: Option<u32>,
    /// Unanswered in a row.
    pub(super) misses: u8,
    /// Counted dead (until it answers again), since when.
    pub(super) dead: bool,
    pub(super) dead_since: Duration,
}

impl<S: Sessions> Upf<S> {
    /// Answers a Heartbeat Request from `from`: a changed Recovery Time Stamp of an associated
    /// peer counts a restart.
    pub(super) fn heartbeat(&mut self, from: SocketAddr, seq: u32, h: Heartbeat) -> Message {
        if let Some(node) = self.by_addr.get(&from.ip()) {
            let a = self
                .associations
                .get_mut(node)
                .expect("by_addr names associations");
            if a.recovery_time_stamp != h.recovery_time_stamp {
                a.recovery_time_stamp = h.recovery_time_stamp;
                self.stats.peer_restarts += 1;
                // Its sessions go at the next poll, where we heartbeat it.
                a.restarted |= a.heartbeat.is_some();
            }
        }
        Message {
            seid: None,
            sequence: seq,
            priority: None,
            body: Body::HeartbeatResponse(Heartbeat {
                recovery_time_stamp: self.config.recovery_time_stamp,
            }),
        }
    }

    /// Sends the heartbeats due at `now` ([`Upf::poll`]).
    pub(super) fn heartbeats_due(&mut self, now: Duration, out: &mut Vec<Transmit>) {
        let interval = self.config.heartbeat_interval;
        if interval.is_zero() {
            return;
        }
        let recovery_time_stamp = self.config.recovery_time_stamp;
        for a in self.associations.values_mut() {
            let Some(h) = &mut a.heartbeat else { continue };
            if now < h.next {
                continue;
            }
            if h.waiting.is_some() {
                h.misses = h.misses.saturating_add(1);
                if h.misses >= self.config.heartbeat_misses && !h.dead {
                    h.dead = true;
                    h.dead_since = now;
                    self.stats.peers_dead += 1;
                }
            }
            let seq = self.next_seq;
            self.next_seq = self.next_seq % 0xff_ffff + 1;
            h.waiting = Some(seq);
            h.next = now + interval;
            let msg = Message {
                seid: None,
                sequence: seq,
                priority: None,
                body: Body::HeartbeatRequest(Heartbeat {
                    recovery_time_stamp,
                }),
            };
            if let Ok(bytes) = msg.to_bytes() {
                self.stats.heartbeats_sent += 1;
                out.push(Transmit { to: h.to, bytes });
            }
        }
    }

    /// Whether the peer of `node`'s association is counted dead (its heartbeats unanswered).
    pub fn is_peer_dead(&self, node: &NodeId) -> bool {
        (self.associations.get(node))
            .and_then(|a| a.heartbeat.as_ref())
            .is_some_and(|h| h.dead)
    }

    /// The UP Function Features we advertise: exactly what we do (docs/pfcp-interop.md):
    /// FTUP (we allocate F-TEIDs), DDND (the BAR's Downlink Data Notification Delay is
    /// applied), and UEIP (we allocate UE addresses) when a pool is configured.
    pub(super) fn up_features(&self) -> UpFunctionFeatures {
        let mut f = vec![0u8; 3];
        for (octet, bit) in [UpFunctionFeatures::FTUP, UpFunctionFeatures::DDND] {
            f[octet] |= bit;
        }
        if !self.config.ue_pool_v4.is_empty() || !self.config.ue_pool_v6.is_empty() {
            let (octet, bit) = UpFunctionFeatures::UEIP;
            f[octet] |= bit;
        }
        UpFunctionFeatures(f)
    }

    pub(super) fn association_setup(
        &mut self,
        now: Duration,
        from: SocketAddr,
        seq: u32,
        r: AssociationSetupRequest,
    ) -> Option<Message> {
        let t = msg_type::ASSOCIATION_SETUP_REQUEST;
        if let Some(old) = self.associations.get(&r.node_id) {
            // Another address asks for an associated Node ID: not a takeover unless the old
            // peer is dead to our heartbeats and no other endpoint holds its sessions.
            let dead = !self.config.relay && self.is_peer_dead(&r.node_id);
            if old.addr != from.ip() && !dead {
                self.stats.takeovers_refused += 1;
                return Some(self.reject(t, None, seq, Reject::cause(Cause::REQUEST_REJECTED)));
            }
        }
        // Another endpoint's copy of a setup from the same peer process (same address, same
        // Recovery Time Stamp) as the association we hold: the peer set up the cluster's one
        // association through several endpoints (an SMF that spreads its requests does), or
        // the copy arrived after the peer's own setup here and its first sessions. Nothing of
        // the peer restarted: its association, our heartbeats to it and its sessions stay.
        if self.replaying {
            if let Some(old) = self.associations.get(&r.node_id) {
                if old.addr == from.ip() && old.recovery_time_stamp == r.recovery_time_stamp {
                    self.stats.setup_copies_kept += 1;
                    return Some(self.reject(t, None, seq, Reject::cause(Cause::REQUEST_ACCEPTED)));
                }
            }
        }
        if self.busy_nodes.contains(&r.node_id) {
            return Some(self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        // The peer associates anew: what its previous process was answered answers nothing
        // of the new one's (which numbers its requests from 1 again).
        self.stats.responses_forgotten += self.cache.forget(from.ip()) as u64;
        let interval = self.config.heartbeat_interval;
        let association = Association {
            addr: from.ip(),
            recovery_time_stamp: r.recovery_time_stamp,
            heartbeat: (!self.replaying && !interval.is_zero()).then_some(Heartbeats {
                to: from,
                next: now + interval,
                waiting: None,
                misses: 0,
                dead: false,
                dead_since: Duration::ZERO,
            }),
            restarted: false,
        };
        let accepted = Message {
            seid: None,
            sequence: seq,
            priority: None,
            body: Body::AssociationSetupResponse(AssociationSetupResponse {
                node_id: self.our_node(),
                cause: Cause::REQUEST_ACCEPTED,
                recovery_time_stamp: self.config.recovery_time_stamp,
                up_function_features: Some(self.up_features()),
                cp_function_features: None,
            }),
        };
        if let Some(old) = self.associations.get(&r.node_id) {
            if old.recovery_time_stamp != r.recovery_time_stamp {
                self.stats.peer_restarts += 1;
            }
            // TS 29.244 6.2.6.2.2: a new setup from an associated peer replaces the
            // association, and its sessions go (we do not offer session retention).
            let setup = Some(Box::new((association, accepted)));
            return self.apply_release(from, seq, t, r.node_id, setup, false);
        }
        self.install_association(r.node_id, association);
        Some(accepted)
    }

    pub(super) fn install_association(&mut self, node: NodeId, association: Association) {
        if let Some(old) = self.associations.remove(&node) {
            self.by_addr.remove(&old.addr);
        }
        // An address names one association: a new node at an old address replaces it (its
        // sessions stay until that node is released).
        if let Some(prev) = self.by_addr.insert(association.addr, node.clone()) {
            if prev != node {
                if let Some(a) = self.associations.get_mut(&prev) {
                    a.addr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
                }
            }
        }
        self.associations.insert(node, association);
    }

    pub(super) fn association_update(
        &mut self,
        from: SocketAddr,
        seq: u32,
        r: AssociationUpdateRequest,
    ) -> Message {
        let t = msg_type::ASSOCIATION_UPDATE_REQUEST;
        if self.by_addr.get(&from.ip()) != Some(&r.node_id) {
            self.stats.rejected_no_association += 1;
            return self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::NO_ESTABLISHED_PFCP_ASSOCIATION),
            );
        }
        Message {
            seid: None,
            sequence: seq,
            priority: None,
            body: Body::AssociationUpdateResponse(AssociationUpdateResponse {
                node_id: self.our_node(),
                cause: Cause::REQUEST_ACCEPTED,
                up_function_features: Some(self.up_features()),
                cp_function_features: None,
            }),
        }
    }

    pub(super) fn association_release(
        &mut self,
        from: SocketAddr,
        seq: u32,
        r: AssociationReleaseRequest,
    ) -> Option<Message> {
        let t = msg_type::ASSOCIATION_RELEASE_REQUEST;
        if self.by_addr.get(&from.ip()) != Some(&r.node_id) {
            self.stats.rejected_no_association += 1;
            return Some(self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::NO_ESTABLISHED_PFCP_ASSOCIATION),
            ));
        }
        if self.busy_nodes.contains(&r.node_id) {
            return Some(self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        self.apply_release(from, seq, t, r.node_id, None, false)
    }

    /// Removes every session of `node` through the cluster, a part of at most
    /// [`Config::release_part`] at a time (the first now, each next one at the [`Upf::poll`]
    /// after the one before is installed; each part's sessions are found by a walk over the
    /// next slots of the session slab, at most [`WALK_PER_PART`] parts' worth), then the
    /// association goes, or is set up anew (`setup`). Meanwhile the peer's requests meet
    /// congestion ([`Upf::releasing_from`]); a session with a change in flight holds the walk
    /// until the change is done. The answer to request `seq` of `from` comes with the last part
    /// (None: not yet). `peer`: because our heartbeats found the peer restarted or dead (a part
    /// the cluster refuses is tried again; for the peer's own request the release ends there,
    /// answered with the failure).
    pub(super) fn apply_release(
        &mut self,
        from: SocketAddr,
        seq: u32,
        t: u8,
        node: NodeId,
        setup: Setup,
        peer: bool,
    ) -> Option<Message> {
        self.busy_nodes.insert(node.clone());
        let release = Releasing {
            to: from,
            seq,
            t,
            digest: self.digest,
            cursor: 0,
            retry: Vec::new(),
            setup,
            peer,
            in_flight: false,
            retry_at: Duration::ZERO,
        };
        self.releases.insert(node.clone(), release);
        self.release_next(node)
    }

    /// Hands the next part of `node`'s release to the cluster: the answer to its request when
    /// that came at once (the last part done, or the release refused).
    fn release_next(&mut self, node: NodeId) -> Option<Message> {
        let part = self.config.release_part.max(1);
        let now = self.now;
        let r = self.releases.get_mut(&node)?;
        let mut seids = std::mem::take(&mut r.retry);
        let end = self.sessions.slot_count();
        let budget = r.cursor.saturating_add(part.saturating_mul(WALK_PER_PART));
        let mut blocked = false;
        while seids.len() < part && r.cursor < end && r.cursor < budget {
            if let Some((seid, kept)) = self.sessions.at(r.cursor) {
                if (Stored { kept }).is_of(&self.shapes, &node) {
                    if self.busy.contains(&seid) {
                        blocked = true;
                        break;
                    }
                    seids.push(seid);
                }
            }
            r.cursor += 1;
        }
        let walked = r.cursor >= end && !blocked;
        if seids.is_empty() && !walked {
            // Other nodes' sessions filled the walk's budget, or a change is in flight in
            // its way: the walk goes on at the next poll.
            if blocked {
                r.retry_at = now + Duration::from_millis(100);
            }
            return None;
        }
        r.in_flight = true;
        let (from, seq, t, digest) = (r.to, r.seq, r.t, r.digest);
        let last = walked.then(|| (r.setup.take(), r.peer));
        let mut changes: Changes = Default::default();
        for s in &seids {
            let kept = self
                .sessions
                .get(*s)
                .expect("a release's sessions are kept");
            let sess = Stored { kept }.unpack(&self.shapes, &self.stopped_of(*s));
            let (fib, ues) = sess
                .fwd
                .changes(&Forwarding::default(), sess.placement.node);
            changes.0.extend(fib);
            changes.1.extend(ues);
        }
        self.busy.extend(seids.iter().copied());
        let commit = match last {
            Some((setup, peer)) => Commit::Release {
                node,
                seids,
                setup,
                peer,
            },
            None => Commit::ReleasePart { node, seids },
        };
        self.stats.release_parts += 1;
        self.digest = digest;
        self.apply(from, seq, t, None, changes, commit)
    }

    /// Whether `from`'s association is being released: its requests meet congestion.
    pub(super) fn releasing_from(&self, from: SocketAddr) -> bool {
        (self.by_addr.get(&from.ip())).is_some_and(|n| self.releases.contains_key(n))
    }

    /// The next parts of the releases under way whose part before is installed (or was
    /// refused a second ago), the answers to their requests in `out` when done at once.
    pub(super) fn releases_due(&mut self, now: Duration, out: &mut Vec<Transmit>) {
        if self.releases.is_empty() {
            return;
        }
        let due: Vec<(NodeId, SocketAddr, u32, u64)> = (self.releases.iter())
            .filter(|(_, r)| r.ready(now))
            .map(|(n, r)| (n.clone(), r.to, r.seq, r.digest))
            .collect();
        for (node, to, seq, digest) in due {
            if let Some(m) = self.release_next(node) {
                self.in_flight.remove(&(to, seq, digest));
                self.send(out, now, to, Some((seq, digest)), m);
            }
        }
    }

    /// The sessions `seids` of `node`'s release are removed from the cluster: they go here.
    pub(super) fn release_removed(&mut self, node: &NodeId, seids: &[u64]) {
        let peer = self.releases.get(node).is_some_and(|r| r.peer);
        if peer {
            self.stats.peer_sessions_deleted += seids.len() as u64;
        }
        for &s in seids {
            self.busy.remove(&s);
            self.remove_session(s);
            self.set_metering(s, None);
            self.set_cp_paths(s, None);
        }
    }

    /// The cluster refused part `seids` of `node`'s release (`last`: the last part's setup and
    /// peer flag): a peer's purge or release tries it again a second later; a request's
    /// release ends, answered with the failure (the sessions removed so far stay removed).
    pub(super) fn release_refused(
        &mut self,
        node: NodeId,
        seids: Vec<u64>,
        last: Option<(Setup, bool)>,
        f: Failure,
    ) -> Option<Message> {
        self.stats.release_parts_refused += 1;
        let now = self.now;
        let r = self.releases.get_mut(&node)?;
        if let Some((setup, _)) = last {
            r.setup = setup;
        }
        if r.peer {
            r.retry = seids;
            r.in_flight = false;
            r.retry_at = now + Duration::from_secs(1);
            self.in_flight.insert((r.to, r.seq, r.digest));
            return None;
        }
        let r = self.releases.remove(&node).expect("just found");
        for s in &seids {
            self.busy.remove(s);
        }
        self.busy_nodes.remove(&node);
        Some(self.reject(r.t, None, r.seq, Reject::cause(f.cause())))
    }

    /// A Heartbeat Response from `from` to our request `seq`: the peer lives; a changed
    /// Recovery Time Stamp counts a restart.
    pub(super) fn heartbeat_answered(&mut self, from: SocketAddr, seq: u32, body: &[u8]) {
        let Ok(Body::HeartbeatResponse(r)) = Body::decode(msg_type::HEARTBEAT_RESPONSE, body)
        else {
            self.stats.malformed += 1;
            return;
        };
        let a = (self.by_addr.get(&from.ip())).and_then(|n| self.associations.get_mut(n));
        let Some(a) = a else {
            self.stats.ignored += 1;
            return;
        };
        match &mut a.heartbeat {
            Some(h) if h.waiting == Some(seq) => {
                h.waiting = None;
                h.misses = 0;
                h.dead = false;
            }
            _ => {
                self.stats.ignored += 1;
                return;
            }
        }
        if a.recovery_time_stamp != r.recovery_time_stamp {
            a.recovery_time_stamp = r.recovery_time_stamp;
            self.stats.peer_restarts += 1;
            a.restarted = true;
        }
    }

    /// Acts on what our heartbeats found at `now` ([`Upf::poll`]): the sessions of restarted
    /// peers go, peers dead for [`Config::dead_peer_grace`] are released. An action the
    /// cluster refuses (or that meets a change being installed) is tried again at the next
    /// poll.
    pub(super) fn peers_due(&mut self, now: Duration) {
        let grace = self.config.dead_peer_grace;
        let mut due = Vec::new();
        for (node, a) in &self.associations {
            let Some(h) = &a.heartbeat else { continue };
            if self.busy_nodes.contains(node) {
                continue;
            }
            let expired = grace.is_some_and(|g| h.dead && now.saturating_sub(h.dead_since) >= g);
            if expired || a.restarted {
                due.push((node.clone(), expired));
            }
        }
        for (node, release) in due {
            self.purge_peer(node, release);
        }
    }

    /// Deletes the sessions of `node`'s peer (a restart: the association stays, with its new
    /// Recovery Time Stamp) or releases it whole (`release`), here through the cluster and at
    /// the other endpoints by a replicated request from the peer's address.
    fn purge_peer(&mut self, node: NodeId, release: bool) {
        let Some(a) = self.associations.get(&node).cloned() else {
            return;
        };
        let Some(h) = a.heartbeat.clone() else { return };
        let seq = self.next_seq;
        self.next_seq = self.next_seq % 0xff_ffff + 1;
        let (t, body) = if release {
            let r = AssociationReleaseRequest {
                node_id: node.clone(),
            };
            (
                msg_type::ASSOCIATION_RELEASE_REQUEST,
                Body::AssociationReleaseRequest(r),
            )
        } else {
            let r = AssociationSetupRequest {
                node_id: node.clone(),
                recovery_time_stamp: a.recovery_time_stamp,
                up_function_features: None,
                cp_function_features: None,
            };
            (
                msg_type::ASSOCIATION_SETUP_REQUEST,
                Body::AssociationSetupRequest(r),
            )
        };
        let request = Message {
            seid: None,
            sequence: seq,
            priority: None,
            body,
        };
        let Ok(bytes) = request.to_bytes() else {
            return;
        };
        if !release {
            // Its new process numbers its requests from 1 again.
            self.stats.responses_forgotten += self.cache.forget(h.to.ip()) as u64;
        }
        let setup = (!release).then(|| {
            let kept = Association {
                restarted: false,
                ..a
            };
            let accepted = self.reject(t, None, seq, Reject::cause(Cause::REQUEST_ACCEPTED));
            Box::new((kept, accepted))
        });
        self.digest = self.cache.digest(&bytes);
        let replicate = match self.apply_release(h.to, seq, t, node, setup, true) {
            // Being installed: its answer goes to nobody.
            None => {
                self.silent.insert((h.to, seq));
                true
            }
            Some(m) => matches!(
                m.body,
                Body::AssociationSetupResponse(AssociationSetupResponse {
                    cause: Cause::REQUEST_ACCEPTED,
                    ..
                }) | Body::AssociationReleaseResponse(AssociationReleaseResponse {
                    cause: Cause::REQUEST_ACCEPTED,
                    ..
                })
            ),
        };
        if replicate && self.config.relay {
            self.stats.relayed_out += 1;
            self.relays.push_back(Relay {
                to: 0,
                kind: RelayKind::Association,
                peer: h.to,
                bytes,
            });
        }
    }
}
