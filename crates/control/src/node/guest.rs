//! Serving a gone node's range's updates that need no GPT change (with replication).
//!
//! While node `o` is gone its range has no owner: [`super::standin`] keeps its flows
//! forwarded, and the range's group elects the stand-in, the first of the range's other
//! replicas that is not gone, as its leader (by the replicas' priorities). Two kinds of
//! update change no GPT entry, and the stand-in applies them in `o`'s place:
//!
//! - a [`crate::Op::Change`] that keeps the key's handler (a new FIB value: a PFCP session
//!   modified, a tunnel moved to another gNB), and
//! - a [`crate::Op::Delete`] (the GPT keeps a deleted key's bits, as the owner's table may:
//!   a lookup of a key that is no flow gives some node, whose FIB lacks it).
//!
//! An insert, or a change of the key's handler, needs the range's table, which only its home
//! builds: it is refused with [`crate::Outcome::OwnerDown`] (not applied).
//!
//! How: a node forwards an update of a gone owner's range to the owner's stand-in (its own
//! view of it; a node that does not take itself for the stand-in forwards it on, or answers
//! [`crate::Outcome::Timeout`]). The stand-in validates the updates against its replica of
//! the range's RIB, proposes them as one changes record in the range's group (as the owner's
//! batches are), and once the record is committed and applied to its replica, installs the
//! new values and removes the deleted keys at their handlers: through its own FIB stream to
//! each handler as [`crate::wire::FibItem::GuestInstall`] / `GuestRemove` items, locally for
//! keys this node handles, and, for the keys the gone node handled itself, in the stand-in's
//! own FIB (`stand_in_apply`, for every entry the range's log commits while this node stands
//! in). It answers once the handlers acknowledged (a gone handler is not waited for).
//!
//! Why it is safe with the home's return: the changes are entries of the range's log, so the
//! home, which leads again only once its log has caught up, rebuilds its table from a RIB
//! that has them, and its new epoch's slice to each handler carries them. A guest item still
//! in flight could arrive after that slice and after a newer update of the home: the item
//! names the epoch of the home that went, and a handler that has heard of a newer epoch of the
//! home drops it (`guest_stale`). The home's updates reach a handler only after the handler
//! acknowledged the home's new piece (the home serves once every live node has it), by which
//! time the handler knows that epoch. A guest item dropped before the slice arrives leaves
//! the old value at the handler until the slice comes (the home is back by then). A handler
//! never takes guest items for its own range, nor for the sender's.
//!
//! What is not done: inserts and handler changes (above); a stand-in that restarts loses its
//! queue (the clients' retransmissions find the next one).

use super::{Node, Phase};
use crate::record;
use crate::replica::replicas_of;
use crate::wire::FibItem;
use crate::{Nanos, NodeId, Op, Outcome, Update};
use std::collections::VecDeque;

/// How long an update waits for this node to lead the gone node's range's group (its
/// election, after failure detection) before it is answered [`Outcome::Timeout`].
const LEAD_WAIT: Nanos = 2_000_000_000;

/// How long a proposed batch waits for its entry to be committed (the range's group lost
/// its majority) before its updates are answered [`Outcome::Timeout`] (they may be applied).
const COMMIT_WAIT: Nanos = 5_000_000_000;

struct Waiting {
    range: NodeId,
    origin: u64,
    index: u32,
    u: Update,
    since: Nanos,
}

struct GuestItem {
    origin: u64,
    index: u32,
    u: Update,
    outcome: Outcome,
    /// The key's handling node (the RIB's).
    handler: NodeId,
}

struct GuestBatch {
    range: NodeId,
    items: Vec<GuestItem>,
    /// The entry's index and term in the range's group.
    at: u64,
    term: u64,
    proposed_at: Nanos,
    /// Committed and applied here; the FIB operations went out.
    committed: bool,
    /// The FIB stream items to wait for: (handler, stream number, the item).
    waits: Vec<(NodeId, u64, FibItem)>,
}

/// A node's guest updates: those of gone nodes' ranges it stands in for.
#[derive(Default)]
pub(super) struct Guests {
    queue: VecDeque<Waiting>,
    batch: Option<GuestBatch>,
    /// Updates applied in a gone node's place.
    pub applied: u64,
    /// Guest FIB items a handler dropped as stale (the range's home was back).
    pub stale_items: u64,
}

impl Guests {
    /// Nothing queued or in flight.
    pub fn idle(&self) -> bool {
        self.queue.is_empty() && self.batch.is_none()
    }

    /// For [`Node::busy`].
    pub fn describe(&self) -> Option<String> {
        (!self.idle()).then(|| {
            format!(
                "guest queue {} batch {:?}",
                self.queue.len(),
                self.batch.as_ref().map(|b| {
                    let w: Vec<(NodeId, u64)> = b.waits.iter().map(|w| (w.0, w.1)).collect();
                    (b.range, b.at, b.committed, w)
                })
            )
        })
    }
}

impl Node {
    /// The node standing in for node `o` (as this node sees it): the first of `o`'s range's
    /// other replicas that is not gone (None without replication).
    pub(super) fn stand_in_of(&self, o: NodeId) -> Option<NodeId> {
        (replicas_of(o, self.spec.nodes, self.tuning.replicas).into_iter())
            .skip(1)
            .find(|&q| !self.gone(q))
    }

    /// Whether this node takes gone node `o`'s range's updates now (it serves, and stands
    /// in for `o`).
    pub(super) fn guest_range(&self, o: NodeId) -> bool {
        o != self.me
            && self.phase == Phase::Serving
            && !self.fenced
            && self.replicated()
            && self.gone(o)
            && self.stand_in_of(o) == Some(self.me)
    }

    /// Queues updates of gone node `range`'s range (origin `token`).
    pub(super) fn guest_enqueue(&mut self, range: NodeId, token: u64, list: Vec<(u32, Update)>) {
        if self.guests.queue.len() + list.len() > self.tuning.max_queue {
            for (i, _) in list {
                self.set_result(token, i, Outcome::Busy);
            }
            return;
        }
        for (index, u) in list {
            self.guests.queue.push_back(Waiting {
                range,
                origin: token,
                index,
                u,
                since: self.now,
            });
        }
    }

    /// Moves the guest updates along as far as they go now. Whether anything moved.
    pub(super) fn guest_step(&mut self) -> bool {
        if self.fenced || self.phase != Phase::Serving {
            return false;
        }
        let mut moved = false;
        loop {
            let step = if self.guests.batch.is_some() {
                self.guest_batch_step()
            } else {
                self.guest_start()
            };
            if !step {
                return moved;
            }
            moved = true;
        }
    }

    /// Takes the updates of one range from the queue's front into a batch, if this node may.
    fn guest_start(&mut self) -> bool {
        let Some(front) = self.guests.queue.front() else {
            return false;
        };
        let (o, since) = (front.range, front.since);
        if !self.guest_range(o) {
            // The home is back, or another node stands in now: forwarded there.
            let mut by_origin: Vec<(u64, Vec<(u32, Update)>)> = Vec::new();
            for w in self.take_range(o) {
                match by_origin.iter_mut().find(|(t, _)| *t == w.origin) {
                    Some((_, l)) => l.push((w.index, w.u)),
                    None => by_origin.push((w.origin, vec![(w.index, w.u)])),
                }
            }
            for (token, list) in by_origin {
                self.forward(o, token, list);
            }
            return true;
        }
        let oi = o as usize;
        let ready = match (&self.groups[oi], &self.gstates[oi]) {
            // Committed up to an entry of its own term: the previous leader's entries that
            // will commit are committed, and applied to the RIB the updates are checked on.
            (Some(g), Some(st)) => g.leading_with_commit() && st.applied >= g.committed(),
            _ => false,
        };
        if !ready {
            if since + LEAD_WAIT > self.now {
                return false;
            }
            for w in self.take_range(o) {
                self.set_result(w.origin, w.index, Outcome::Timeout);
            }
            return true;
        }
        // One batch: the front's run of this range, each key once.
        let mut items: Vec<GuestItem> = Vec::new();
        let st = self.gstates[oi].as_ref().expect("checked");
        while let Some(w) = self.guests.queue.front() {
            if w.range != o
                || items.len() >= self.tuning.max_batch
                || items.iter().any(|it| it.u.key == w.u.key)
            {
                break;
            }
            let w = self.guests.queue.pop_front().expect("front");
            let old = st.rib.get(&w.u.key).map(|(n, _)| n);
            let outcome = match (w.u.op, old) {
                (Op::Insert, Some(_)) => Outcome::Exists,
                (Op::Insert, None) => Outcome::OwnerDown,
                (Op::Change | Op::Delete, None) => Outcome::Missing,
                (Op::Change, Some(n)) if n != w.u.node => Outcome::OwnerDown,
                (Op::Change, Some(n)) if n != o && self.gone(n) => Outcome::HandlerDown,
                _ => Outcome::Applied,
            };
            items.push(GuestItem {
                origin: w.origin,
                index: w.index,
                u: w.u,
                outcome,
                handler: old.unwrap_or(o),
            });
        }
        let accepted: Vec<&Update> = (items.iter())
            .filter(|it| it.outcome == Outcome::Applied)
            .map(|it| &it.u)
            .collect();
        let proposed = if accepted.is_empty() {
            None
        } else {
            let rec = record::changes(1, accepted.into_iter());
            let ctx = self.own_ctx();
            let g = self.groups[oi].as_mut().expect("checked");
            g.propose(ctx, rec).map(|at| (at, g.term()))
        };
        match proposed {
            Some((at, term)) => {
                self.guests.batch = Some(GuestBatch {
                    range: o,
                    items,
                    at,
                    term,
                    proposed_at: self.now,
                    committed: false,
                    waits: Vec::new(),
                });
            }
            None => {
                for it in items {
                    let o = match it.outcome {
                        // Not proposed (no longer the leader): not applied.
                        Outcome::Applied => Outcome::Timeout,
                        o => o,
                    };
                    self.count_outcome(o);
                    self.set_result(it.origin, it.index, o);
                }
            }
        }
        true
    }

    /// The queued updates of range `o`, out of the queue.
    fn take_range(&mut self, o: NodeId) -> Vec<Waiting> {
        let (mine, rest): (VecDeque<Waiting>, VecDeque<Waiting>) =
            std::mem::take(&mut self.guests.queue)
                .into_iter()
                .partition(|w| w.range == o);
        self.guests.queue = rest;
        mine.into()
    }

    /// The batch in flight: committed, then installed, then answered. Whether it moved.
    fn guest_batch_step(&mut self) -> bool {
        let b = self.guests.batch.as_ref().expect("batch");
        let oi = b.range as usize;
        if !b.committed {
            let (committed, term_at) = match &self.groups[oi] {
                Some(g) => (g.committed(), g.term_at(b.at)),
                None => (0, None),
            };
            let applied = self.gstates[oi].as_ref().map_or(0, |s| s.applied);
            if committed < b.at || applied < b.at {
                if b.proposed_at + COMMIT_WAIT > self.now {
                    return false;
                }
                let b = self.guests.batch.take().expect("batch");
                self.guest_answer(b, Outcome::Timeout);
                return true;
            }
            if term_at != Some(b.term) {
                // Another leader's entry took its place: not applied.
                let b = self.guests.batch.take().expect("batch");
                self.guest_answer(b, Outcome::Timeout);
                return true;
            }
            let mut b = self.guests.batch.take().expect("batch");
            b.committed = true;
            self.guest_fib_ops(&mut b);
            self.guests.batch = Some(b);
            return true;
        }
        let installed = b
            .waits
            .iter()
            .all(|&(h, seq, _)| self.out[h as usize].fib.acked >= seq || self.gone(h));
        if !installed {
            return false;
        }
        let b = self.guests.batch.take().expect("batch");
        self.guest_answer(b, Outcome::Applied);
        true
    }

    /// The committed batch's FIB operations at the keys' handlers.
    fn guest_fib_ops(&mut self, b: &mut GuestBatch) {
        let o = b.range;
        let home_epoch = self.peers[o as usize]
            .epoch
            .max(self.reps[o as usize].epoch);
        let mut to = Vec::new();
        for it in b.items.iter().filter(|it| it.outcome == Outcome::Applied) {
            let (h, key) = (it.handler, it.u.key.clone());
            if h == o {
                // The gone node's own flows: this stand-in's FIB (`stand_in_apply`).
                continue;
            }
            if h != self.me && self.gone(h) {
                // Its slice of the range is sent again when it returns.
                continue;
            }
            let item = match it.u.op {
                Op::Delete => FibItem::GuestRemove { home_epoch, key },
                _ => FibItem::GuestInstall {
                    home_epoch,
                    key,
                    value: it.u.value.clone(),
                },
            };
            // Here (a key this node handles): applied at once, nothing to wait for.
            let seq = self.fib_op(h, item.clone());
            if h != self.me {
                b.waits.push((h, seq, item));
                if !to.contains(&h) {
                    to.push(h);
                }
            }
        }
        for h in to {
            self.flush_fib(h);
        }
    }

    /// The FIB stream to peer `p` was started anew (its restart, or a resync): the batch's
    /// items for it that it had not acknowledged go again, after its slice.
    pub(super) fn guest_stream_restarted(&mut self, p: NodeId) {
        let Some(b) = self.guests.batch.as_mut() else {
            return;
        };
        let s = &mut self.out[p as usize].fib;
        for w in b.waits.iter_mut().filter(|w| w.0 == p) {
            let seq = s.next;
            s.push(seq, w.2.clone());
            w.1 = seq;
        }
    }

    /// Answers a batch: its accepted updates with `accepted`, the others with their outcome.
    fn guest_answer(&mut self, b: GuestBatch, accepted: Outcome) {
        for it in b.items {
            let o = match it.outcome {
                Outcome::Applied => accepted,
                o => o,
            };
            if o == Outcome::Applied {
                self.guests.applied += 1;
            }
            self.count_outcome(o);
            self.set_result(it.origin, it.index, o);
        }
    }

    /// Whether a guest FIB item for `key` from `from`, naming `home_epoch` as the epoch of
    /// the range's home that went, comes too late: the handler has heard of a newer epoch of
    /// the home (it is back, and its own slice has or will have the key), or the key is of
    /// this node's range or of the sender's (no stand-in sends those).
    pub(super) fn guest_stale(&self, from: NodeId, key: &[u8], home_epoch: u32) -> bool {
        let r = self.spec.owner_of(key);
        if r == self.me || r == from {
            return true;
        }
        let ri = r as usize;
        let newest = (self.peers[ri].epoch)
            .max(self.fin[ri].epoch)
            .max(self.reps[ri].epoch);
        newest > home_epoch
    }
}
