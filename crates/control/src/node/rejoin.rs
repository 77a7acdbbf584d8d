//! A node whose log was lost (a wiped or replaced disk) rejoins (with replication).
//!
//! Two things of a node live only in its log: its **epoch** (its peers refuse an incarnation
//! whose epoch is not above the one they know, so a node that starts again at epoch 1 would
//! be a stranger forever) and its **Raft votes** (a replica that forgot whom it voted for in a
//! term may vote again in it, and two leaders of one term may be elected).
//!
//! - **The epoch is learnt from the peers.** A node refusing a hello whose epoch is not above
//!   the one it knows of the sender (`stale_epoch`, `epoch_reused`) answers it with
//!   [`Body::EpochTaken`]: the epoch it knows. The answer's tag binds the nonce of that hello,
//!   so it reaches only the incarnation that sent it (a replayed hello of an earlier one gets
//!   an answer its receiver's tag check refuses). The node then stops
//!   ([`Node::fenced`]); [`Node::rejoin_records`] are what its log must be replaced with: that
//!   epoch and the mark of a lost log. Restarted from them, it starts one epoch above the one
//!   its peers know and is a restarted node to them (new streams, its slices again).
//! - **Votes are withheld until the replica follows a leader again.** The driver tells a
//!   node whose log was lost ([`Node::mark_log_lost`]; `cluster up`'s first start is not), and
//!   a log replaced by [`Node::rejoin_records`] carries the mark: every group of the node
//!   ignores vote requests and does not campaign until it has heard a leader and applied what
//!   that leader committed (`Group::withhold_votes`); raft-rs grants no vote in a term whose
//!   leader it knows. A group that got there is recorded ([`crate::record`]'s `caught`), so a
//!   restart does not withhold again. Its entries come from the leader (a snapshot: the
//!   range's RIB); a lost home leads again once the leader hands its range back, as after any
//!   restart. While a group withholds, the node makes no checkpoint (it would drop the mark).
//!
//! What this does not do: the complete answer to a lost Raft log is a membership change that
//! adds the node as a new replica id; here it keeps its id. A vote it gave before the loss
//! still counts for its candidate, so a double vote remains possible in one case: the node
//! comes back, follows a leader of an older term than a vote it gave (a partition kept that
//! leader from learning the newer term) and is then asked for a vote in that newer term by
//! another candidate. With three replicas the candidate, the node and that leader are the
//! three, and a leader of an older term that the candidate of the newer one could not reach
//! had to be partitioned away from it. And if every replica of a range lost its log, the
//! range's state is gone: its group never elects (nothing to catch up from).

use super::Node;
use crate::record;
use crate::wire::Body;
use crate::NodeId;

impl Node {
    /// The driver found this node's log lost (an empty log where there was one: not the
    /// cluster's first start). Call once, right after [`Node::new`] with no recovered records:
    /// the node withholds its votes (see the module documentation) and records the loss.
    pub fn mark_log_lost(&mut self) {
        self.lost = true;
        let mut any = false;
        for g in self.groups.iter_mut().flatten() {
            g.withhold_votes();
            any = true;
        }
        if any {
            self.persist(vec![record::lost()]);
        }
    }

    /// The records this node's log must be replaced with before the driver restarts it from
    /// the log, once a peer said it knows a newer epoch of it ([`Node::fenced`] is set): the
    /// epoch the peers know and the mark of a lost log. None otherwise.
    pub fn rejoin_records(&self) -> Option<Vec<Vec<u8>>> {
        let e = self.rejoin_epoch?;
        Some(vec![record::epoch(e), record::lost()])
    }

    /// Whether this node's log was lost and some group still withholds its votes.
    pub fn rejoining(&self) -> bool {
        self.groups.iter().flatten().any(|g| g.withholding())
    }

    /// A peer refused our hello: it knows epoch `known` of this node.
    pub(super) fn on_epoch_taken(&mut self, p: NodeId, known: u32) {
        if known < self.epoch {
            return self.drop_msg("unexpected");
        }
        let _ = p;
        self.rejoin_epoch = Some(self.rejoin_epoch.unwrap_or(0).max(known));
        self.fence("newer_epoch_known");
    }

    /// A hello of peer `p` (nonce `nonce`) was refused: its epoch is not above
    /// the one we know. Tells it the epoch we know.
    pub(super) fn refuse_hello(&mut self, p: NodeId, nonce: u64) {
        let known = self.peers[p as usize].epoch;
        if known == 0 {
            return;
        }
        let id = self.new_id();
        self.send_to_nonce(p, id, Body::EpochTaken { known }, nonce);
    }

    /// Records the groups that stopped withholding since the last call.
    pub(super) fn note_caught_up(&mut self) {
        if !self.lost {
            return;
        }
        let mut recs = Vec::new();
        for (gi, g) in self.groups.iter().enumerate() {
            let Some(g) = g else { continue };
            if !g.withholding() && !self.caught[gi] {
                recs.push(record::caught(gi as u32));
            }
        }
        for r in &recs {
            let g = u32::from_le_bytes(r[1..5].try_into().expect("4"));
            self.caught[g as usize] = true;
        }
        if !recs.is_empty() {
            self.persist(recs);
        }
    }
}
