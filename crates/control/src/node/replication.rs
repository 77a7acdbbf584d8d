//! The replication layer as the node drives it ([`crate::replica`]): the groups of the ranges
//! this node is a replica of, their readies, committed entries and messages, and the owner's
//! election before it builds its table.

use super::{Node, Phase};
use crate::record;
use crate::replica::group::Group;
use crate::replica::transport;
use crate::{Flow, NodeId};
use sb_setsep::Updatable;

impl Node {
    /// A chunk of a Raft message of range `g`'s group from `p`.
    pub(super) fn on_raft(
        &mut self,
        p: NodeId,
        g: u32,
        msg: u64,
        index: u16,
        count: u16,
        data: Vec<u8>,
    ) {
        let me = self.me;
        let Some(grp) = self.groups.get_mut(g as usize).and_then(|x| x.as_mut()) else {
            return self.drop_msg("raft_not_a_replica");
        };
        match self.reasm.take(p, g, msg, index, count, data) {
            Ok(Some(m)) if transport::accept(&m, p, me, &grp.voters) => grp.step(m),
            Ok(Some(_)) => self.drop_msg("raft_wrong_ends"),
            Ok(None) => {}
            Err(_) => self.drop_msg("bad_raft"),
        }
    }

    // ----- replication ------------------------------------------------------------------------

    pub(super) fn replicated(&self) -> bool {
        self.groups.iter().any(|g| g.is_some())
    }

    /// The context of this incarnation's proposals: its node and epoch.
    pub(super) fn own_ctx(&self) -> Vec<u8> {
        let mut c = self.me.to_le_bytes().to_vec();
        c.extend_from_slice(&self.epoch.to_le_bytes());
        c
    }

    /// Runs every group's readies: persists their records, applies committed entries, sends
    /// what may go. Whether anything happened.
    pub(super) fn drive_groups(&mut self) -> bool {
        let mut any = false;
        for gi in 0..self.groups.len() {
            loop {
                let Some(mut g) = self.groups[gi].take() else {
                    break;
                };
                let c = g.collect();
                let n = if c.records.is_empty() {
                    0
                } else {
                    self.persist(c.records)
                };
                g.assign(n);
                let mut acted =
                    n > 0 || !c.send.is_empty() || !c.committed.is_empty() || c.snapshot.is_some();
                if let Some(s) = &c.snapshot {
                    self.restore_range(gi, s);
                }
                let mut last = None;
                for e in &c.committed {
                    self.apply_entry(gi, e);
                    last = Some(e.index);
                }
                if let Some(l) = last {
                    g.applied_to(l);
                }
                let released = g.release(self.durable);
                acted |= !released.is_empty();
                for m in c.send.into_iter().chain(released) {
                    self.send_raft(&mut g, m);
                }
                if gi == self.me as usize && self.phase >= Phase::SyncFib {
                    if g.leader().is_some_and(|l| l != self.me) {
                        // Another replica leads the range now: this owner's table may miss
                        // its entries. It stops, to be restarted from its log.
                        self.fence("another_leader");
                    }
                    // Without a leader (raft's check-quorum stepped this owner down: its
                    // followers did not answer for an election timeout, on a loaded
                    // machine), it waits: no batch starts and no state change is taken until
                    // it leads again, normally by its own campaign (the range's highest
                    // priority). Its table stays right: an entry another leader committed
                    // meanwhile fences it when it is applied here (`apply_entry`), and a
                    // batch whose entry another leader replaced when its term is checked.
                    // Restarting from the log instead held the thread for the replay, so its
                    // followers' groups lost their quorums in turn: a restart loop of every
                    // node under load.
                    let leads = g.is_leader();
                    self.step_downs += u64::from(self.led && !leads);
                    self.led = leads;
                }
                self.groups[gi] = Some(g);
                any |= acted;
                if !acted {
                    break;
                }
            }
        }
        any
    }

    fn send_raft(&mut self, g: &mut Group, m: raft::prelude::Message) {
        let Some(to) = transport::node_of(m.to).filter(|&t| t < self.spec.nodes && t != self.me)
        else {
            return;
        };
        let snapshot = m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot;
        self.raft_msgs += 1;
        for body in transport::chunks(g.range, self.raft_msgs, &m, transport::CHUNK) {
            let id = self.new_id();
            self.send(to, id, body);
        }
        if snapshot {
            g.snapshot_sent(to);
        }
    }

    /// Applies a committed entry of range `gi`'s group.
    fn apply_entry(&mut self, gi: usize, e: &raft::prelude::Entry) {
        if gi == self.me as usize && self.phase >= Phase::SyncFib {
            // The owner's batches keep its table: its own entries are in it already.
            if !e.data.is_empty() && e.context[..] != self.own_ctx()[..] {
                self.drop_msg("foreign_entry");
                self.fence("foreign_entry");
            }
            return;
        }
        if self.gstates[gi].is_none() {
            return;
        }
        // Standing in for the range's gone home: its own flows' changes, in this FIB.
        self.stand_in_apply(gi, e.index, &e.data);
        let st = self.gstates[gi].as_mut().expect("checked");
        st.applied = e.index;
        if st.apply(&e.data).is_err() {
            self.drop_msg("bad_entry");
        }
    }

    /// Replaces range `gi`'s state with a snapshot from its leader.
    fn restore_range(&mut self, gi: usize, s: &raft::prelude::Snapshot) {
        if gi == self.me as usize && self.phase >= Phase::SyncFib {
            self.fence("snapshot_received");
            return;
        }
        let Some(st) = self.gstates[gi].as_mut() else {
            return;
        };
        let r = crate::replica::state::RangeSnapshot::decode(s.get_data())
            .and_then(|x| st.restore(&x, s.get_metadata().index));
        if r.is_err() {
            self.drop_msg("bad_snapshot");
        }
    }

    /// With replication, before the owner starts: once it leads its range's group with every
    /// committed entry applied, it proposes its initial flows if the group has none, else
    /// builds its table from the range's RIB. Whether it may go on.
    pub(super) fn elect(&mut self) -> bool {
        let me = self.me as usize;
        let (leading, committed) = match &self.groups[me] {
            Some(g) => (g.leading_with_commit(), g.committed()),
            None => return true,
        };
        if !leading {
            return false;
        }
        let term = self.groups[me].as_ref().map_or(0, |g| g.term());
        let st = self.gstates[me].as_ref().expect("the home's state");
        if st.applied < committed {
            return false;
        }
        if !st.base_done {
            // Proposed once per term: a leadership lost and won again between two calls may
            // have dropped the entries.
            if self.base_term != term {
                self.base_term = term;
                let flows = self.initial.clone().unwrap_or_default();
                let ctx = self.own_ctx();
                let g = self.groups[me].as_mut().expect("home group");
                let refs: Vec<(&[u8], NodeId, &[u8])> = (flows.iter())
                    .map(|f| (f.key.as_slice(), f.node, f.value.as_slice()))
                    .collect();
                for c in refs.chunks(record::BASE_PER_RECORD / 8) {
                    g.propose(ctx.clone(), record::base(c));
                }
                g.propose(ctx, record::base_end());
            }
            return false;
        }
        let mut st = self.gstates[me].take().expect("the home's state");
        self.own_state = std::mem::take(&mut st.state);
        let (mut keys, mut nodes, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for (k, n, v) in st.rib.iter() {
            keys.push(k);
            nodes.push(n);
            values.extend_from_slice(v);
        }
        match Updatable::build_with_key_prefix(
            &keys,
            &nodes,
            &values,
            self.spec.value_bytes,
            &self.tuning.rib_key_prefix,
            &self.spec.gpt.build_options(),
        ) {
            Ok(t) => {
                self.table = t;
                self.initial = None;
                true
            }
            Err(_) => {
                self.drop_msg("table_build");
                self.fence("table_build");
                false
            }
        }
    }

    /// Whether this owner lost its range's leadership to another replica (with replication),
    /// or a peer knows a newer epoch of this node (its log was lost): it handles nothing
    /// more; the driver restarts it from its log, first replaced by [`Node::rejoin_records`]
    /// where there are some.
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// The driver's data plane holds this cluster's GPT already, its workers reading it (a
    /// node restarted inside its process after [`Node::fenced`]): once this node has every
    /// owner's piece, they reach the data plane as one [`crate::Event::GptPiece`] per range,
    /// written in place, instead of an [`crate::Event::GptInstall`] of a new table. Until
    /// then the data plane keeps serving the table it has; it lags the other owners' deltas
    /// meanwhile, which is safe, since an owner removes an old handler's entry only once
    /// every node (this one included) acknowledged the delta that moved the key.
    pub fn keep_live_gpt(&mut self) {
        self.live_gpt = true;
    }

    /// Whether the owner's table is built (it is past its boot; with replication, past its
    /// election).
    #[doc(hidden)]
    pub fn table_built(&self) -> bool {
        self.phase >= Phase::SyncFib
    }

    /// Range `range`'s RIB as this node's replica of its group holds it (None where this node
    /// is no follower of it).
    #[doc(hidden)]
    pub fn replica_rib(&self, range: NodeId) -> Option<Vec<Flow>> {
        self.gstates
            .get(range as usize)?
            .as_ref()
            .map(|s| s.flows())
    }

    /// Range `range`'s group at this node: (leader, term, index applied here, last index of
    /// its log), if a replica.
    #[doc(hidden)]
    pub fn group_state(&self, range: NodeId) -> Option<(Option<NodeId>, u64, u64, u64)> {
        let g = self.groups.get(range as usize)?.as_ref()?;
        Some((g.leader(), g.term(), g.applied(), g.last_index()))
    }
}
