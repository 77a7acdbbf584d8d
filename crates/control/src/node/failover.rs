//! Failover of handlers: an owner moves the flows of its range that a gone node handled to
//! live nodes, and gives them back, gradually, once that node is back.
//!
//! When failure detection declares peer `p` gone ([`Node::gone`]), the owner (serving, and
//! with replication its range's leader) collects the keys of its RIB that `p` handles and
//! moves each to a live node by an ordinary update of its own: a [`crate::Op::Change`] to the
//! survivor (the live nodes, this one included, taken by the key's hash), through the fast
//! path unchanged. So it is make-before-break as any update: the change is durable (with
//! replication, committed by a majority of the range's replicas), the survivor installs the
//! entry from the RIB, and only then do the GPT deltas point at it; the entry at `p` is
//! removed after that, in `p`'s stream (which a gone peer's bound,
//! [`crate::Tuning::peer_backlog_bytes`], may replace by a resync when `p` returns). Such a
//! move applies only while the key is still handled by `p` (a client's update of the key in
//! between wins: the move is dropped), and its value's copy of the handling node, if the
//! application keeps one ([`crate::Tuning::handler_field`]), is rewritten to the survivor.
//! Moves go into the queue a batch at a time, behind one batch's worth of other updates: the
//! two take turns, so neither waits for the other to be done.
//!
//! When `p` is back (not gone, its epoch known, its FIB stream from this owner drained, for
//! a lease), the keys moved off it that are still where the move put them go back to it, at
//! [`crate::Tuning::give_back_rate`] keys a second at most, by the same kind of update.
//!
//! What this does not do: the flows of a gone node's *own* range that it handled. Their
//! owner is the gone node itself; with replication its range's group elects another leader,
//! but that leader does not serve the range's updates: these flows keep their GPT entries,
//! and another replica of the range stands in for the gone node ([`super::standin`]). The moved set lives in the owner's memory only: an owner that
//! restarts leaves the flows it moved where they are (still correct, not given back).

use super::{Node, Origin, OriginKind, Queued};
use crate::{Bytes, Nanos, NodeId, Op, Outcome, Update};
use std::collections::VecDeque;

type Map<K, V> = super::Map<K, V>;

/// A move of a flow between handlers, applied ([`Node::take_moves`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    /// The key.
    pub key: Bytes,
    /// The handler it left.
    pub from: NodeId,
    /// The handler it went to.
    pub to: NodeId,
    /// Its value now.
    pub value: Bytes,
    /// A give-back to a returned node (else a move off a gone one).
    pub back: bool,
}

/// One move in the queue.
struct Pending {
    key: Bytes,
    from: NodeId,
    to: NodeId,
    value: Bytes,
    back: bool,
}

/// An owner's failover state.
#[derive(Default)]
pub(super) struct Failover {
    /// Per peer: gone at the last look.
    was_gone: Vec<bool>,
    /// Per peer: since when it is back (not gone after having been).
    back_since: Vec<Option<Nanos>>,
    /// Per peer: keys of this range it handled when it was declared gone, to move.
    todo: Vec<VecDeque<Bytes>>,
    /// Moves in the queue or in a batch, by origin token.
    inflight: Map<u64, Vec<Pending>>,
    /// Keys moved off a gone node and not given back: key -> (that node, the survivor).
    pub moved: Map<Bytes, (NodeId, NodeId)>,
    /// Give-backs allowed now (a token bucket of [`crate::Tuning::give_back_rate`]) and when
    /// it was last filled.
    allowance: u64,
    filled_at: Nanos,
    /// Applied moves kept for [`Node::take_moves`] (with [`crate::Tuning::keep_own_deltas`]).
    log: Vec<Move>,
    /// Flows moved off gone nodes, given back, and moves not applied (superseded by a
    /// client's update, or refused at the survivor).
    pub moved_total: u64,
    pub given_back: u64,
    pub not_applied: u64,
}

impl Failover {
    fn init(&mut self, nodes: usize) {
        if self.was_gone.len() != nodes {
            self.was_gone = vec![false; nodes];
            self.back_since = vec![None; nodes];
            self.todo = (0..nodes).map(|_| VecDeque::new()).collect();
        }
    }

    /// Keys waiting to move or in flight.
    pub fn pending(&self) -> usize {
        self.todo.iter().map(|t| t.len()).sum::<usize>()
            + self.inflight.values().map(|v| v.len()).sum::<usize>()
    }
}

/// 64-bit mix of a key (which survivor takes it).
fn spread(key: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in key {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ (h >> 29)
}

impl Node {
    /// Whether this node moves flows now: it serves its range (with replication, as leader).
    fn moves_flows(&self) -> bool {
        self.tuning.evacuate && !self.fenced && self.phase == super::Phase::Serving
    }

    /// One look at the peers: collects the flows of newly gone ones, drops what returned ones
    /// still had to move, and puts a batch of moves (or give-backs) into the queue.
    pub(super) fn failover_step(&mut self) {
        if !self.moves_flows() {
            return;
        }
        let n = self.spec.nodes as usize;
        self.fo.init(n);
        for p in 0..self.spec.nodes {
            let pi = p as usize;
            if p == self.me {
                continue;
            }
            let g = self.gone(p);
            if g && !self.fo.was_gone[pi] {
                let keys: VecDeque<Bytes> = (self.rib_entries())
                    .filter(|(_, h, _)| *h == p)
                    .map(|(k, _, _)| Bytes::from_slice(&k))
                    .collect();
                self.fo.todo[pi] = keys;
                self.fo.back_since[pi] = None;
            } else if !g && self.fo.was_gone[pi] {
                // Back before its flows all moved: what is left stays with it.
                self.fo.todo[pi].clear();
                self.fo.back_since[pi] = Some(self.now);
            }
            self.fo.was_gone[pi] = g;
        }
        // One batch of moves at a time, and nothing to build while nothing waits (the common
        // case: this runs at every step of a serving owner).
        let waiting = self.fo.todo.iter().any(|t| !t.is_empty()) || !self.fo.moved.is_empty();
        if !self.fo.inflight.is_empty() || !waiting {
            return;
        }
        let live: Vec<NodeId> = (0..self.spec.nodes).filter(|&q| !self.gone(q)).collect();
        let mut batch = Vec::new();
        for pi in 0..n {
            while batch.len() < self.tuning.max_batch {
                let Some(key) = self.fo.todo[pi].pop_front() else {
                    break;
                };
                let Some((h, v)) = self.rib_get(&key) else {
                    continue;
                };
                if h as usize != pi || live.is_empty() {
                    continue;
                }
                let to = live[(spread(&key) % live.len() as u64) as usize];
                let value = self.with_handler(v, to);
                batch.push(Pending {
                    key,
                    from: h,
                    to,
                    value,
                    back: false,
                });
            }
        }
        if batch.is_empty() {
            self.give_back_some(&mut batch);
        }
        if batch.is_empty() {
            return;
        }
        let token = self.new_id();
        self.origins.insert(
            token,
            Origin {
                kind: OriginKind::Internal,
                results: vec![u8::MAX; batch.len()],
                remaining: batch.len(),
            },
        );
        // Behind one batch's worth of the queue: moves and other updates take turns.
        let pos = self.queue.len().min(self.tuning.max_batch);
        let head: Vec<Queued> = self.queue.drain(..pos).collect();
        let mut moves = Vec::with_capacity(batch.len());
        for (i, m) in batch.iter().enumerate() {
            moves.push(Queued {
                origin: token,
                index: i as u32,
                u: Update {
                    op: Op::Change,
                    key: m.key.clone(),
                    node: m.to,
                    value: m.value.clone(),
                },
                expect: Some(m.from),
            });
        }
        for q in moves.into_iter().rev().chain(head.into_iter().rev()) {
            self.queue.push_front(q);
        }
        self.fo.inflight.insert(token, batch);
    }

    /// Give-backs to returned nodes, as many as the rate allows.
    fn give_back_some(&mut self, batch: &mut Vec<Pending>) {
        let rate = self.tuning.give_back_rate;
        if rate == 0 || self.fo.moved.is_empty() {
            return;
        }
        let cap = self.tuning.max_batch as u64;
        let since = self.now.saturating_sub(self.fo.filled_at);
        let add = (since as u128 * rate as u128 / 1_000_000_000) as u64;
        if add > 0 {
            self.fo.allowance = (self.fo.allowance + add).min(cap);
            self.fo.filled_at = self.now;
        }
        let ready: Vec<bool> = (0..self.spec.nodes)
            .map(|p| {
                let pi = p as usize;
                p != self.me
                    && self.fo.back_since[pi].is_some_and(|t| t + self.tuning.lease <= self.now)
                    && !self.gone(p)
                    && self.peers[pi].epoch != 0
                    && self.out[pi].fib.items().is_empty()
            })
            .collect();
        if !ready.iter().any(|&r| r) {
            return;
        }
        let mut stale = Vec::new();
        for (key, &(from, to)) in self.fo.moved.iter() {
            if batch.len() as u64 >= self.fo.allowance {
                break;
            }
            if !ready[from as usize] {
                continue;
            }
            match self.rib_get(key) {
                Some((h, v)) if h == to => batch.push(Pending {
                    key: key.clone(),
                    from: to,
                    to: from,
                    value: self.with_handler(v, from),
                    back: true,
                }),
                // A client moved or removed it since: it is no longer ours to give back.
                _ => stale.push(key.clone()),
            }
        }
        for k in stale {
            self.fo.moved.remove(&k);
        }
        self.fo.allowance -= batch.len() as u64;
    }

    /// `value` with its copy of the handling node ([`crate::Tuning::handler_field`]) set to
    /// `to`.
    pub(super) fn with_handler(&self, value: &[u8], to: NodeId) -> Bytes {
        let mut v = Bytes::from_slice(value);
        if let Some(at) = self.tuning.handler_field {
            if let Some(f) = v.get_mut(at..at + 2) {
                f.copy_from_slice(&to.to_be_bytes());
            }
        }
        v
    }

    /// With a handler copy in the values ([`crate::Tuning::handler_field`]: an application
    /// that tracks its flows' handlers, as the node process's PFCP sessions do), a client's
    /// change that names the gone handler its key was moved off (a PFCP modification of a
    /// session whose handling node died: the session still names it) goes to the survivor
    /// that handles the key now: its handler and its value's copy are the survivor's, and it
    /// is given back with the key. Other updates are left as they are (a change to a gone
    /// handler is refused with [`Outcome::HandlerDown`]).
    pub(super) fn to_survivor(&self, u: &mut Update) {
        if self.tuning.handler_field.is_none() || u.op != Op::Change || !self.gone(u.node) {
            return;
        }
        let Some(&(from, to)) = self.fo.moved.get(&u.key) else {
            return;
        };
        if from == u.node && self.rib_get(&u.key).map(|(n, _)| n) == Some(to) {
            u.value = self.with_handler(&u.value, to);
            u.node = to;
        }
    }

    /// The moves of origin `token` are answered.
    pub(super) fn moves_done(&mut self, token: u64, results: &[u8]) {
        let Some(batch) = self.fo.inflight.remove(&token) else {
            return;
        };
        for (m, &r) in batch.into_iter().zip(results) {
            if Outcome::from_code(r) != Some(Outcome::Applied) {
                self.fo.not_applied += 1;
                // Refused at the survivor (full, or gone meanwhile): tried again while its
                // handler stays gone.
                if !m.back
                    && matches!(
                        Outcome::from_code(r),
                        Some(Outcome::FibFull | Outcome::HandlerDown)
                    )
                    && self.gone(m.from)
                {
                    self.fo.todo[m.from as usize].push_back(m.key);
                }
                continue;
            }
            if m.back {
                self.fo.given_back += 1;
                self.fo.moved.remove(&m.key);
            } else {
                self.fo.moved_total += 1;
                // A key moved twice (its survivor went too) keeps the node it first left.
                let first = self.fo.moved.get(&m.key).map_or(m.from, |&(f, _)| f);
                self.fo.moved.insert(m.key.clone(), (first, m.to));
            }
            if self.tuning.keep_own_deltas {
                self.fo.log.push(Move {
                    key: m.key,
                    from: m.from,
                    to: m.to,
                    value: m.value,
                    back: m.back,
                });
            }
        }
    }

    /// When the failover wants to look again: the next give-back while keys wait for a
    /// returned node.
    pub(super) fn failover_timeout(&self) -> Option<Nanos> {
        if !self.moves_flows() || self.fo.moved.is_empty() || self.tuning.give_back_rate == 0 {
            return None;
        }
        let wait = self
            .fo
            .back_since
            .iter()
            .flatten()
            .map(|&t| t + self.tuning.lease);
        let step = 1_000_000_000 / self.tuning.give_back_rate.max(1);
        let next = self.now + step.max(1_000_000) * self.tuning.max_batch.min(64) as u64;
        wait.filter(|&t| t > self.now).chain([next]).min()
    }

    /// The moves this owner applied since the last call (kept only with
    /// [`crate::Tuning::keep_own_deltas`]).
    pub fn take_moves(&mut self) -> Vec<Move> {
        std::mem::take(&mut self.fo.log)
    }

    /// The moves in this owner's queue or batch: (key, from, to).
    pub fn moves_in_flight(&self) -> impl Iterator<Item = (&Bytes, NodeId, NodeId)> {
        (self.fo.inflight.values().flatten()).map(|m| (&m.key, m.from, m.to))
    }

    /// Keys moved off a gone node and not given back (yet).
    pub fn moved_away(&self) -> usize {
        self.fo.moved.len()
    }
}
