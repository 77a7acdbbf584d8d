//! Standing in for a gone node's own flows (with replication).
//!
//! The flows of a gone node's range that it handled itself have no live owner to move them
//! ([`super::failover`] moves the others): their GPT entries keep naming the gone node. Each
//! other replica of that range holds the range's RIB, so one of them serves those flows in its
//! place, without any GPT change:
//!
//! - Each node, once failure detection declares node `o` gone, names `o`'s *stand-in*: the
//!   first of `o`'s range's other replicas ([`crate::replica::replicas_of`], in order) that is
//!   not gone. Every node computes it from the same order; views of who is gone may differ
//!   for a moment.
//! - The stand-in installs, from its replica of the range's RIB, every key of the range that
//!   `o` handles (by the RIB, or by this node's GPT: a change committed whose delta had not
//!   gone out when `o` died), with the value's copy of the handling node
//!   ([`crate::Tuning::handler_field`]) set to itself; then it hands its driver the table of
//!   stand-ins ([`crate::Event::StandIns`]), as every node does: the data plane's GPT lookups
//!   that find `o` go to the stand-in instead (`LiveSetSep::set_redirects`). Entries the
//!   range's log commits later (applied at the stand-in after it installed) are installed too.
//!   So the stand-in has the entries before its own data plane sends it the flows; another
//!   node may redirect a moment before the stand-in installed (both act on their own
//!   detection), and those packets miss.
//! - The range's changes that keep a key's handler, and its deletions, are applied by the
//!   stand-in, which leads the range's group ([`super::guest`]); the entries the range's log
//!   commits while this node stands in change in its FIB as they are applied
//!   ([`Node::stand_in_apply`]). Inserts and handler changes wait for `o`. The stand-in
//!   installs only while it holds `o` gone: once it hears `o` again, `o`'s slice and prune
//!   may have come already.
//! - When `o` is back *and serving* (this node installed a piece of `o` from an epoch newer
//!   than the one it had when `o` went: `o` rebuilt its table from the range's log and synced
//!   every live node's slice first), the redirect ends. `o`'s new epoch sent the stand-in its
//!   slice and then a prune, which removes the stand-in's entries that are not its own
//!   (without [`crate::Tuning::fib_map`], the driver's [`crate::Event::FibPrune`]); the
//!   stand-in prunes with `o`'s next stream even if it is the first it gets from `o` (it
//!   restarted while `o` was gone).
//!
//! With one replica per range nothing stands in (no other node has the range's RIB).

use super::{Node, Phase, Source};
use crate::record::{self, Record};
use crate::{Bytes, Event, NodeId, Op};

/// A node's stand-in state.
#[derive(Default)]
pub(super) struct StandIns {
    /// The stand-ins as this incarnation last handed them to its driver (None: not yet, or
    /// a new GPT since).
    told: Option<Vec<Option<NodeId>>>,
    /// Per node: declared gone (and not serving again since), with the epoch of its piece this
    /// node held then.
    gone_at: Vec<Option<u32>>,
    /// Per node this one stands in for: the index of the range's log applied when its flows
    /// were installed here.
    mine: Vec<Option<u64>>,
    /// Per node: this node installed stand-in entries for it that no prune of its has removed
    /// yet (its next stream prunes, even a first one).
    unpruned: Vec<bool>,
    /// Flows installed here as a stand-in.
    pub installed: u64,
}

impl StandIns {
    /// The stand-ins in force: per node, the node standing in for it.
    pub fn table(&self) -> &[Option<NodeId>] {
        self.told.as_deref().unwrap_or(&[])
    }

    /// Whether this node installed stand-in entries for node `o` since `o`'s last prune here;
    /// forgets it (the caller prunes with `o`'s next slice).
    pub fn take_unpruned(&mut self, o: NodeId) -> bool {
        self.unpruned
            .get_mut(o as usize)
            .is_some_and(std::mem::take)
    }

    /// The next GPT the driver installs replaces the one holding the redirects: hand them
    /// over again.
    pub fn gpt_replaced(&mut self) {
        self.told = None;
    }
}

impl Node {
    /// One look at the gone nodes: installs the flows this node stands in for, and hands the
    /// driver the stand-ins when they changed.
    pub(super) fn stand_in_step(&mut self) {
        if !self.replicated() || self.phase == Phase::Boot || self.fenced {
            return;
        }
        let n = self.spec.nodes as usize;
        if self.si.gone_at.len() != n {
            self.si.gone_at = vec![None; n];
            self.si.mine = vec![None; n];
            self.si.unpruned = vec![false; n];
        }
        // The common case, on every datagram: nobody gone, nobody stood in for.
        let quiet =
            (0..self.spec.nodes).all(|o| self.si.gone_at[o as usize].is_none() && !self.gone(o));
        if quiet
            && self
                .si
                .told
                .as_ref()
                .is_some_and(|t| t.iter().all(Option::is_none))
        {
            return;
        }
        let mut table = vec![None; n];
        for o in 0..self.spec.nodes {
            let oi = o as usize;
            if o == self.me {
                continue;
            }
            let gone = self.gone(o);
            if gone {
                // The newest epoch of `o` seen while it is gone (a piece relayed meanwhile is
                // of an epoch before its return, not of its return).
                let e = self.reps[oi].epoch;
                self.si.gone_at[oi] = Some(self.si.gone_at[oi].map_or(e, |g| g.max(e)));
            }
            let serving_again = !gone
                && self.si.gone_at[oi]
                    .is_some_and(|e| self.reps[oi].have && self.reps[oi].epoch > e);
            if serving_again {
                self.si.gone_at[oi] = None;
            }
            if self.si.gone_at[oi].is_none() {
                self.si.mine[oi] = None;
                continue;
            }
            let by = self.stand_in_of(o);
            table[oi] = by;
            if by != Some(self.me) {
                self.si.mine[oi] = None;
            } else if gone {
                // Only while gone: once `o` is heard again, its new epoch's slice and prune
                // may have come already, and what was installed after would stay.
                self.stand_in_for(o);
            }
        }
        if self.si.told.as_ref() != Some(&table) {
            self.si.told = Some(table.clone());
            self.events.push_back(Event::StandIns(table));
        }
    }

    /// Installs the flows of gone node `o`'s range that it handles, from this replica's RIB,
    /// once, and again when more of the range's log was applied since.
    fn stand_in_for(&mut self, o: NodeId) {
        let oi = o as usize;
        let Some(st) = self.gstates.get(oi).and_then(|s| s.as_ref()) else {
            return;
        };
        if self.si.mine[oi].is_some_and(|a| a >= st.applied) {
            return;
        }
        let applied = st.applied;
        let gpt = self.gpt.as_ref();
        let add: Vec<(Bytes, Bytes)> = (st.rib.iter())
            .filter(|&(k, h, _)| h == o || gpt.is_some_and(|g| g.lookup(k) == o))
            .map(|(k, _, v)| (Bytes::from_slice(k), self.with_handler(v, self.me)))
            .collect();
        self.si.installed += add.len() as u64;
        self.si.unpruned[oi] |= !add.is_empty();
        for (k, v) in add {
            self.fib_insert(k, v, Source::Slice);
        }
        self.si.mine[oi] = Some(applied);
    }

    /// A committed entry of gone node `gi`'s range, before this replica applies it at
    /// `index`, while this node stands in for it (it installed the range's flows that the
    /// gone node handles): the entry's changes of those flows, in this node's FIB. A key
    /// whose handler is now the gone node is installed (its value's handler copy this node);
    /// one it handled that is deleted is removed. An entry that moves a key off the gone node
    /// (none is made while it is gone but a previous leader's, committed late) leaves the
    /// installs to [`Node::stand_in_for`]'s next pass over the RIB.
    pub(super) fn stand_in_apply(&mut self, gi: usize, index: u64, data: &[u8]) {
        let Some(mine) = self.si.mine.get(gi).copied().flatten() else {
            return;
        };
        let Some(st) = self.gstates[gi].as_ref() else {
            return;
        };
        let o = gi as NodeId;
        let current = mine >= st.applied;
        let mut whole = true;
        let mut ops: Vec<(Bytes, Option<Bytes>)> = Vec::new();
        if !data.is_empty() {
            match record::decode(data) {
                Ok(Record::Changes { updates, .. }) => {
                    for u in updates {
                        let old = st.rib.get(&u.key).map(|(n, _)| n);
                        match u.op {
                            Op::Delete if old == Some(o) => ops.push((u.key, None)),
                            Op::Delete => {}
                            Op::Insert | Op::Change if u.node == o => {
                                let v = self.with_handler(&u.value, self.me);
                                ops.push((u.key, Some(v)));
                            }
                            _ if old == Some(o) => whole = false,
                            _ => {}
                        }
                    }
                }
                Ok(Record::State { .. }) => {}
                _ => whole = false,
            }
        }
        for (k, v) in ops {
            match v {
                Some(v) => {
                    self.si.installed += 1;
                    self.si.unpruned[gi] = true;
                    self.fib_insert(k, v, Source::Slice);
                }
                None => self.fib_remove(&k),
            }
        }
        if whole && current {
            self.si.mine[gi] = Some(index);
        }
    }

    /// The stand-ins this node's data plane applies: per node, the node standing in for it.
    pub fn stand_ins(&self) -> &[Option<NodeId>] {
        self.si.table()
    }
}
