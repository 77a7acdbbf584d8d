//! Failure detection: heartbeats between every pair of nodes, leases, and the peers an owner
//! no longer waits for.
//!
//! Every node sends each peer it knows a [`Body::Heartbeat`] every [`crate::Tuning::heartbeat`]:
//! its clock (`stamp`), the last stamp it received from that peer (`echo`) and the set of
//! nodes it heard from within [`crate::Tuning::lease`]. Node `p` holds a *lease* from `q` for
//! `lease * 3/5` from the stamp of its own that `q` echoed: `q` heard `p` at that stamp or
//! later. A node holds its *lease majority* while it holds leases from enough peers to make,
//! with itself, a majority of the cluster's nodes.
//!
//! An owner stops waiting for peer `p` (delta acknowledgements, FIB slices, pieces; an install
//! at `p` is refused with [`crate::Outcome::HandlerDown`]) once `p` is *gone*: the owner holds
//! its lease majority, has not heard `p` for `lease`, and a majority of the nodes (itself and
//! peers whose heartbeats arrived within the last `lease * 2/5`) say they have not heard `p`
//! for `lease`.
//!
//! # The safe lease
//! Each node of the majority `S` that declares `p` gone (`p` not in `S`) heard `p` last at
//! least a lease before, so at least a lease after the last stamp of `p`'s it echoed. So while
//! more of `p`'s peers than `n - 1 - (n/2 + 1)` (integer halves, `n` nodes) still echo a
//! stamp of `p`'s within a lease, no such `S` exists. `p` holds its *safe lease* while at
//! least `n - 1 - n/2` of its peers (for 4 nodes, 1 of 3; for 5, 2 of 4) gave it a lease, of
//! `lease * 3/5` ([`Node::safe_lease`]): it loses it at least `lease * 2/5` before an owner may
//! declare it gone. For odd `n` that is the lease majority; for even `n` one peer fewer: a
//! node that can reach half of the cluster alone keeps it (nor is it declared gone by the
//! other half, which lacks a majority). Clock rates are assumed equal (no offsets). A pause
//! announced before a long stop ([`Node::announce_pause`]) lengthens the leases of the peers
//! that echoed it.
//!
//! # When a node is fenced
//! A node is fenced ([`crate::Node::fenced`]: its driver restarts it from its log, in a new
//! epoch, with a GPT assembled again from every owner's current piece) once a peer tells it
//! that it declared it gone: a declaration is sticky for the declared node's epoch and said
//! in every heartbeat to it (`declared_you`). A node that lost the safe lease it held is a
//! *suspect* ([`Node::suspect`]) until it holds it again and every peer said, in a heartbeat
//! that echoed a stamp of its from then on, that it declared nothing: no peer had declared it
//! before (it would say so), and none can since (the safe lease holds). Then it goes on,
//! without a restart ([`Node::lease_losses`]). A suspect that stays one for
//! [`SUSPECT_LEASES`] leases (a peer that does not answer may have declared it and died) is
//! fenced. Between a declaration and the fence, the node's GPT may lag the owners that
//! stopped waiting for it, as it does while a fenced node restarts (its data plane keeps its
//! table, [`Node::keep_live_gpt`]); the simulation checks make-before-break at every node but
//! those (`Sim::lagging`).
//!
//! Until 2026-11-30 a node was fenced, and restarted from its log, when it lost its lease
//! *majority* (2 of 3 peers on 4 nodes, one peer more than safety needs on an even
//! cluster), whether or not a peer had declared it gone: on a loaded machine, late echoes
//! fenced nodes no one had declared, and each restart held its control thread for seconds,
//! so that others lost their leases in turn (docs/bench/pfcp.md).

use super::Node;
use crate::wire::{Body, HEARS_BYTES};
use crate::{Nanos, NodeId};
use std::cell::Cell;

/// What a node knows of its peers' liveness.
#[derive(Default)]
pub(super) struct Liveness {
    /// When each peer was last heard from (an authenticated datagram of its epoch newer than
    /// any before it).
    pub heard: Vec<Nanos>,
    /// The newest stamp of ours each peer echoed (0: none).
    pub lease_from: Vec<Nanos>,
    /// The last stamp each peer sent us.
    pub their_stamp: Vec<u64>,
    /// Each peer's last report (when it arrived, its bitmap of the nodes it hears).
    pub reports: Vec<Option<(Nanos, Vec<u8>)>>,
    /// When the next heartbeats go.
    pub next: Nanos,
    /// This incarnation held its safe lease once.
    pub had_lease: bool,
    /// Per peer: the end of the pause it announced (0: none), until which it counts as
    /// heard.
    pub held_until: Vec<Nanos>,
    /// This node's pause ([`Node::announce_pause`]): the first stamp that carried it and
    /// its end.
    pub pause: Option<(Nanos, Nanos)>,
    /// Per peer: its epoch in which this node declared it gone (0: none), said in every
    /// heartbeat to it while it is in that epoch (set by [`Node::gone`], a reader).
    pub declared: Vec<Cell<u32>>,
    /// This node lost its safe lease, having held it, and does not know yet whether a peer
    /// declared it gone.
    pub suspect: Option<Suspect>,
    /// Safe leases lost, and of those, resolved without a fence (every peer said it had
    /// declared nothing).
    pub losses: u64,
    pub recoveries: u64,
}

/// A node that lost its safe lease, until every peer told it that it did not declare it gone.
pub(super) struct Suspect {
    /// When it lost it.
    since: Nanos,
    /// Since when it holds it again (None: not yet, or lost again since).
    restored: Option<Nanos>,
    /// Per peer: said, in a heartbeat that echoed a stamp of this node's from `restored` on,
    /// that it has not declared it gone.
    cleared: Vec<bool>,
}

impl Liveness {
    pub fn new(nodes: u16, now: Nanos) -> Liveness {
        let n = nodes as usize;
        Liveness {
            heard: vec![now; n],
            lease_from: vec![0; n],
            their_stamp: vec![0; n],
            reports: vec![None; n],
            next: now,
            had_lease: false,
            held_until: vec![0; n],
            pause: None,
            declared: (0..n).map(|_| Cell::new(0)).collect(),
            suspect: None,
            losses: 0,
            recoveries: 0,
        }
    }
}

/// The longest pause a node announces or a peer takes (60 s).
const MAX_PAUSE: Nanos = 60_000_000_000;

/// Leases a node stays without knowing whether a peer declared it gone before it is fenced
/// (a peer that does not answer may have declared it and died).
const SUSPECT_LEASES: Nanos = 20;

fn bit(map: &[u8], j: NodeId) -> bool {
    map.get(j as usize / 8)
        .is_some_and(|b| b & (1 << (j % 8)) != 0)
}

impl Node {
    fn detecting(&self) -> bool {
        self.tuning.lease > 0 && self.spec.nodes > 1
    }

    fn own_lease(&self) -> Nanos {
        self.tuning.lease / 5 * 3
    }

    /// Whether this node holds leases from a majority of the nodes (itself counted); always
    /// without failure detection.
    pub fn lease_majority(&self) -> bool {
        if !self.detecting() {
            return true;
        }
        let l = self.own_lease();
        let held = (0..self.spec.nodes as usize)
            .filter(|&q| q != self.me as usize)
            .filter(|&q| {
                let f = self.live.lease_from[q];
                f > 0 && f + l > self.now
            })
            .count();
        (held + 1) * 2 > self.spec.nodes as usize
    }

    /// Whether this node holds its safe lease: leases from at least `n - 1 - n/2` peers, so
    /// no owner may declare it gone within `lease * 2/5` (see the module documentation);
    /// always without failure detection.
    pub fn safe_lease(&self) -> bool {
        if !self.detecting() {
            return true;
        }
        self.enough_leases(|q| self.lease_end(q) > self.now)
    }

    /// Whether at least `n - 1 - n/2` peers `q` pass `held` (the safe lease's count).
    fn enough_leases(&self, held: impl Fn(usize) -> bool) -> bool {
        let n = self.spec.nodes as usize;
        let held = (0..n).filter(|&q| q != self.me as usize && held(q)).count();
        held + 1 + n / 2 >= n
    }

    /// When this node's lease from peer `q` ends (0: none): `lease * 3/5` after the newest
    /// stamp of ours it echoed, or, once it echoed a stamp that carried this node's pause,
    /// `lease * 2/5` (and a millisecond of rounding) before the pause's end.
    fn lease_end(&self, q: usize) -> Nanos {
        let f = self.live.lease_from[q];
        if f == 0 {
            return 0;
        }
        let plain = f + self.own_lease();
        match self.live.pause {
            Some((first, until)) if f >= first => {
                let margin = self.tuning.lease - self.own_lease() + 1_000_000;
                plain.max(until.saturating_sub(margin))
            }
            _ => plain,
        }
    }

    /// When peer `p` counts as heard last: when it was, or a lease before the end of the
    /// pause it announced (it is not gone before that end).
    fn heard_at(&self, p: NodeId) -> Nanos {
        let held = self.live.held_until[p as usize].saturating_sub(self.tuning.lease);
        self.live.heard[p as usize].max(held)
    }

    /// Announces that this node's control thread may stop for up to `d` from now (a
    /// checkpoint of a large state: the driver calls this before one, and takes it once
    /// [`Node::pause_held`]). Until then every heartbeat carries the pause's end: a peer
    /// that receives one counts this node as heard until that end, so it declares it gone a
    /// lease after it at the earliest; and this node's lease from a peer that echoed such a
    /// heartbeat lasts until `lease * 2/5` before that end. So a stop shorter than that
    /// fences no one and is waited for (owners wait for this node's acknowledgements
    /// meanwhile), and a node that dies while paused is detected a lease after the pause's
    /// end. A pause still on is not replaced (nothing without failure detection).
    pub fn announce_pause(&mut self, d: Nanos) {
        if !self.detecting() || self.pausing() {
            return;
        }
        let now = self.now.max(1);
        self.live.pause = Some((now, now.saturating_add(d.min(MAX_PAUSE))));
        self.live.next = self.now;
        self.liveness_timers();
    }

    /// Whether this node's pause is on (announced, not over).
    pub fn pausing(&self) -> bool {
        self.live.pause.is_some_and(|(_, until)| until > self.now)
    }

    /// Whether this node may stop for `d` now without losing its safe lease: enough peers
    /// echoed a heartbeat that carried its pause, which lasts long enough (always without
    /// failure detection).
    pub fn pause_held(&self, d: Nanos) -> bool {
        if !self.detecting() {
            return true;
        }
        let Some((first, _)) = self.live.pause else {
            return false;
        };
        let at = self.now.saturating_add(d);
        self.enough_leases(|q| self.live.lease_from[q] >= first && self.lease_end(q) > at)
    }

    /// Whether this node stopped waiting for peer `p` (see the module documentation).
    pub(super) fn gone(&self, p: NodeId) -> bool {
        if !self.detecting() || p == self.me {
            return false;
        }
        let lease = self.tuning.lease;
        if self.heard_at(p) + lease > self.now || !self.lease_majority() {
            return false;
        }
        let fresh = lease - self.own_lease();
        let agree = (0..self.spec.nodes)
            .filter(|&q| q != self.me && q != p)
            .filter(|&q| {
                self.live.reports[q as usize]
                    .as_ref()
                    .is_some_and(|(at, m)| at + fresh > self.now && !bit(m, p))
            })
            .count();
        let gone = (agree + 1) * 2 > self.spec.nodes as usize;
        if gone {
            // Sticky for this epoch of `p`: told to it until it is in a new one.
            self.live.declared[p as usize].set(self.peers[p as usize].epoch);
        }
        gone
    }

    /// Whether this node heard peer `p` within the lease (false without failure detection).
    pub(super) fn hears(&self, p: NodeId) -> bool {
        self.detecting() && self.heard_at(p) + self.tuning.lease > self.now
    }

    /// Peer `p` was heard from (an authenticated datagram of its current epoch).
    pub(super) fn heard(&mut self, p: NodeId) {
        self.live.heard[p as usize] = self.now;
    }

    pub(super) fn on_heartbeat(
        &mut self,
        p: NodeId,
        stamp: u64,
        echo: u64,
        hears: Vec<u8>,
        hold_ms: u32,
        declared_you: bool,
    ) {
        let pi = p as usize;
        if declared_you {
            // An owner may have stopped waiting for this node: its GPT may lag.
            self.fence("declared_gone");
            return;
        }
        if let Some(s) = self.live.suspect.as_mut() {
            if s.restored.is_some_and(|r| echo >= r) {
                s.cleared[pi] = true;
            }
        }
        if hold_ms > 0 {
            let until = self.now + (hold_ms as Nanos * 1_000_000).min(MAX_PAUSE);
            self.live.held_until[pi] = self.live.held_until[pi].max(until);
        }
        self.live.their_stamp[pi] = self.live.their_stamp[pi].max(stamp);
        if echo <= self.now {
            self.live.lease_from[pi] = self.live.lease_from[pi].max(echo);
        }
        self.live.reports[pi] = Some((self.now, hears));
    }

    /// Sends the heartbeats due; fences this node if it lost its lease majority.
    pub(super) fn liveness_timers(&mut self) {
        if !self.detecting() {
            return;
        }
        self.check_lease();
        if self.live.next > self.now {
            return;
        }
        self.live.next = self.now + self.tuning.heartbeat.max(1);
        let mut hears = vec![0u8; (self.spec.nodes as usize).div_ceil(8).min(HEARS_BYTES)];
        for j in 0..self.spec.nodes.min(HEARS_BYTES as u16 * 8) {
            if j == self.me || self.hears(j) {
                hears[j as usize / 8] |= 1 << (j % 8);
            }
        }
        // The pause's time left, rounded down (a peer holds this node no longer than it).
        let hold_ms = match self.live.pause {
            Some((_, until)) if until > self.now => ((until - self.now) / 1_000_000) as u32,
            _ => 0,
        };
        for p in 0..self.spec.nodes {
            let pi = p as usize;
            if p == self.me || self.peers[pi].epoch == 0 {
                continue;
            }
            let body = Body::Heartbeat {
                stamp: self.now.max(1),
                echo: self.live.their_stamp[pi],
                hears: hears.clone(),
                hold_ms,
                declared_you: self.declared_gone(p),
            };
            let id = self.new_id();
            self.send(p, id, body);
        }
    }

    /// Watches this node's safe lease: once it lost the one it held, it is a suspect until
    /// it holds it again and every peer said, in a heartbeat that echoed a stamp of its from
    /// then on, that it has not declared it gone (a peer that did says so, and this node is
    /// fenced: [`Node::on_heartbeat`]). A suspect that stays one for
    /// [`SUSPECT_LEASES`] leases is fenced.
    pub(super) fn check_lease(&mut self) {
        if !self.detecting() {
            return;
        }
        let safe = self.safe_lease();
        if safe {
            self.live.had_lease = true;
        }
        let (now, me) = (self.now, self.me as usize);
        let limit = self.tuning.lease.saturating_mul(SUSPECT_LEASES);
        if let Some(s) = self.live.suspect.as_mut() {
            if !safe {
                s.restored = None;
            } else if s.restored.is_none() {
                s.restored = Some(now);
                s.cleared.fill(false);
            }
            let all = (0..s.cleared.len()).all(|q| q == me || s.cleared[q]);
            if s.restored.is_some() && all {
                self.live.suspect = None;
                self.live.recoveries += 1;
            } else if now >= s.since.saturating_add(limit) {
                self.drop_msg("lease_lost");
                self.fence("lease_lost");
            }
        } else if !safe && self.live.had_lease {
            self.live.suspect = Some(Suspect {
                since: now,
                restored: None,
                cleared: vec![false; self.spec.nodes as usize],
            });
            self.live.losses += 1;
        }
    }

    /// Safe leases this incarnation lost, and of those, resolved without a fence.
    pub fn lease_losses(&self) -> (u64, u64) {
        (self.live.losses, self.live.recoveries)
    }

    /// Whether this node declared peer `p` gone in `p`'s current epoch (tests).
    #[doc(hidden)]
    pub fn declared_gone(&self, p: NodeId) -> bool {
        let d = self.live.declared[p as usize].get();
        d != 0 && d == self.peers[p as usize].epoch
    }

    /// Whether this node lost its safe lease and does not know yet whether it was declared
    /// gone.
    pub fn suspect(&self) -> bool {
        self.live.suspect.is_some()
    }

    /// When the liveness timers want to run next: the next heartbeats, the end of a lease.
    pub(super) fn liveness_timeout(&self) -> Option<Nanos> {
        if !self.detecting() {
            return None;
        }
        let ends = (0..self.spec.nodes as usize)
            .map(|q| self.lease_end(q))
            .filter(|&e| e > self.now);
        ends.chain([self.live.next]).min()
    }
}

impl Node {
    /// This node's leases, for a log line: per peer, how old the newest echo of a stamp of
    /// its is and when the lease from it ends (ms, from now; negative: ended), and its pause.
    pub fn lease_report(&self) -> String {
        let ms = |x: Nanos| (x as i64 - self.now as i64) / 1_000_000;
        let mut out = String::new();
        for q in 0..self.spec.nodes as usize {
            if q == self.me as usize {
                continue;
            }
            let f = self.live.lease_from[q];
            if f == 0 {
                out += &format!("node {q}: no echo; ");
            } else {
                out += &format!(
                    "node {q}: echo of {} ms ago, lease ends in {} ms; ",
                    -ms(f),
                    ms(self.lease_end(q))
                );
            }
        }
        match self.live.pause {
            Some((first, until)) => {
                out += &format!("pause from {} ms to {} ms", ms(first), ms(until))
            }
            None => out += "no pause",
        }
        out
    }

    /// Whether failure detection declared peer `p` gone here (tests).
    #[doc(hidden)]
    pub fn holds_gone(&self, p: NodeId) -> bool {
        self.gone(p)
    }
}
