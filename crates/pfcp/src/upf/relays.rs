//! The endpoints of one cluster to each other ([`crate::relay`]): session requests relayed to
//! the endpoint holding their session, association requests replicated to every endpoint, and
//! a relayed request's response routed back.

use super::*;

impl<S: Sessions> Upf<S> {
    /// Sends the response `bytes` to request `seq` of `to`: to the peer, back to the endpoint
    /// that relayed the request, or nowhere for a replicated request.
    pub(super) fn emit(
        &mut self,
        out: &mut Vec<Transmit>,
        to: SocketAddr,
        seq: Option<u32>,
        bytes: Vec<u8>,
    ) {
        if let Some(seq) = seq {
            if let Some(endpoint) = self.via.remove(&(to, seq)) {
                self.relays.push_back(Relay {
                    to: endpoint,
                    kind: RelayKind::Response,
                    peer: to,
                    bytes,
                });
                return;
            }
            if self.silent.remove(&(to, seq)) {
                return;
            }
        }
        out.push(Transmit { to, bytes });
    }

    /// The allocator id of the endpoint holding the session a session request from an
    /// associated peer is about, when that is another endpoint.
    pub(super) fn home_elsewhere(&self, from: SocketAddr, t: u8, seid: Option<u64>) -> Option<u8> {
        let seid = seid?;
        // Bits 48..56: the allocator id of the endpoint that gave the SEID (above them its
        // incarnation, which that endpoint checks).
        let home = (seid >> 48) as u8;
        let relayed = matches!(
            t,
            msg_type::SESSION_MODIFICATION_REQUEST | msg_type::SESSION_DELETION_REQUEST
        ) && home != 0
            && (self.config.endpoints == 0 || home <= self.config.endpoints)
            && home != self.config.allocator_id
            && !self.sessions.contains(seid)
            && self.by_addr.contains_key(&from.ip());
        relayed.then_some(home)
    }

    /// The next relay for other endpoints of the cluster (with [`Config::relay`]): send each
    /// to the endpoint it names (`to`), or to every other endpoint when `to` is 0.
    pub fn poll_relay(&mut self) -> Option<Relay> {
        self.relays.pop_front()
    }

    /// Handles a relay from endpoint `from` (its allocator id; authenticated by the caller,
    /// e.g. with [`Relay::parse`]): the datagrams to send to peers. The usage relays
    /// ([`RelayKind::Usage`] and its query and answer) are the node's to handle: given here,
    /// they are counted ignored. Afterwards drain
    /// [`Upf::poll_relay`] (a relayed request's response goes back as a relay).
    pub fn handle_relay(&mut self, now: Duration, from: u8, relay: Relay) -> Vec<Transmit> {
        self.stats.relayed_in += 1;
        let peer = relay.peer;
        let key = Header::peek_sequence(&relay.bytes).map(|seq| (peer, seq));
        // A relay holds one request, whole: its digest is the one `message` computes.
        let digest = self.cache.digest(&relay.bytes);
        match relay.kind {
            RelayKind::Response => {
                return vec![Transmit {
                    to: peer,
                    bytes: relay.bytes,
                }];
            }
            RelayKind::Association => {
                if let Some(k) = key {
                    self.silent.insert(k);
                }
            }
            RelayKind::Session => {
                if let Some(k) = key {
                    self.via.insert(k, from);
                }
            }
            // The usage relays are the node's (its handling-node counts), and so are the CP
            // function's packets: not for the endpoint.
            RelayKind::Usage
            | RelayKind::UsageQuery
            | RelayKind::UsageAnswer
            | RelayKind::ToCp
            | RelayKind::FromCp => {
                self.stats.ignored += 1;
                return Vec::new();
            }
        }
        self.replaying = true;
        let out = self.handle(now, peer, &relay.bytes);
        self.replaying = false;
        // A request answered at once, or never, leaves no route behind.
        if let Some(k) = key {
            if !self.in_flight.contains(&(k.0, k.1, digest)) {
                self.via.remove(&k);
                self.silent.remove(&k);
            }
        }
        out
    }
}
