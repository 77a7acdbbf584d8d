//! Checkpoints: the node's log so far replaced by a few records that replay to the same state.
//!
//! A node's log only grows: every batch of changes, and with replication every Raft entry and
//! hard state of every group the node is a replica of. [`Node::checkpoint`] gives, at a quiet
//! moment, the records a restart needs instead of the whole log:
//! - without replication: this incarnation's epoch, the range's RIB as initial-flow records
//!   (`Base` ... `BaseEnd`), an empty `Changes` record that carries the change sequence on,
//!   and the range's PFCP state records ([`Node::put_state`]) as state records;
//! - with replication: the epoch, and per group its Raft store after compacting it behind a
//!   snapshot of the range's state at the applied index (the RIB and the PFCP state records,
//!   `replica::state`): the
//!   snapshot record, the entries after it, the hard state. Raft then sends that snapshot to a
//!   replica too far behind for the entries.
//!
//! The driver writes them with `sb_wal::Wal::checkpoint` after every record handed out
//! before, and replays them (followed by the records appended after) exactly as a log:
//! [`Node::with_tuning`] sees no difference. The simulation checks it (`SimConfig::
//! checkpoint_permille`): restarts from checkpointed logs keep every invariant.

use super::{Node, Phase};
use crate::replica::state::RangeSnapshot;
use crate::replica::storage;
use crate::{record, NodeId};

/// State records per checkpoint record at most (a session's record is a few hundred bytes:
/// records of about 1 MB at most).
const STATE_PER_RECORD: usize = 2048;

impl Node {
    /// The records that replace this node's log so far (everything handed out in
    /// [`crate::Event::Persist`] events until now): replayed alone by
    /// [`Node::with_tuning`], they give the state the whole log gives. Compacts the Raft
    /// logs of the node's groups behind snapshots.
    ///
    /// `None` when the node is not at a point where its state is its records': before it
    /// serves (booting, electing, syncing: its initial flows may not be in its log yet),
    /// while a batch is in flight (the RIB holds changes whose outcome is open), with events
    /// not yet taken ([`Node::poll_event`]: their records would follow the checkpoint and
    /// repeat what it holds), or once fenced. Try again later.
    pub fn checkpoint(&mut self) -> Option<Vec<Vec<u8>>> {
        if self.fenced
            || self.phase != Phase::Serving
            || self.batch.is_some()
            || !self.pending.is_empty()
            || !self.events.is_empty()
            // A lost log's mark stays until every group followed a leader again.
            || self.rejoining()
        {
            return None;
        }
        let mut out = vec![record::epoch(self.epoch)];
        if !self.replicated() {
            // Written straight from the table (no copy of the RIB in between: this runs on
            // the node's control thread, and a million keys cost it tens of milliseconds).
            let mut it = self.rib_entries().peekable();
            while it.peek().is_some() {
                let chunk: Vec<_> = it.by_ref().take(record::BASE_PER_RECORD).collect();
                let refs: Vec<(&[u8], NodeId, &[u8])> =
                    chunk.iter().map(|(k, n, v)| (&**k, *n, *v)).collect();
                out.push(record::base(&refs));
            }
            out.push(record::base_end());
            // No change: the next one's sequence number follows on.
            out.push(record::changes(self.change_seq + 1, [].iter()));
            // The PFCP state records, a few hundred per record.
            let mut it = self.own_state.iter().peekable();
            while it.peek().is_some() {
                let c: Vec<(u64, Vec<u8>)> = it.by_ref().take(STATE_PER_RECORD).collect();
                out.push(record::state(&c, &[]));
            }
            return Some(out);
        }
        // Whether every group is at a point to snapshot, before any is encoded (an encoding
        // costs the control thread a pass over the range's state: wasted on a `None`).
        if !(0..self.groups.len()).all(|gi| self.snapshot_ready(gi)) {
            return None;
        }
        // Every group's state at the index it is applied to.
        let snaps: Vec<(usize, u64, Vec<u8>)> = (0..self.groups.len())
            .filter_map(|gi| self.range_image(gi).map(|(index, data)| (gi, index, data)))
            .collect();
        // A snapshot's record needs its data: a store whose snapshot is newer than what is
        // applied here (cannot be: the snapshot's index was applied when it came) has none
        // to give again.
        for (gi, index, _) in &snaps {
            let g = self.groups[*gi].as_ref().expect("a group");
            if *index < g.store().snapshot_index() && !g.store().holds_snapshot_data() {
                return None;
            }
        }
        for (gi, index, data) in snaps {
            let g = self.groups[gi].as_mut().expect("a group");
            // Compacted behind it, or, nothing applied since the snapshot, its data (dropped
            // after the last checkpoint) given again. False: `index` is not held (cannot be:
            // it was applied from this store).
            g.put_snapshot(index, data);
            let s = g.store();
            let range = gi as u32;
            if s.snapshot_index() > 0 {
                out.push(storage::snapshot_record(range, s.latest_snapshot()));
            }
            if s.last() >= s.first() {
                out.push(storage::entries_record(range, s.range(s.first(), s.last())));
            }
            out.push(storage::hard_record(range, s.hard_state()));
            // In the log now: the data is held only while raft wants to send it.
            if !self.snapshot_wanted_by(gi) {
                self.groups[gi]
                    .as_mut()
                    .expect("a group")
                    .drop_snapshot_data();
            }
        }
        Some(out)
    }

    /// Whether group `gi`'s range state is at a point to snapshot (none to make: true).
    fn snapshot_ready(&self, gi: usize) -> bool {
        let Some(g) = self.groups[gi].as_ref() else {
            return true;
        };
        match self.gstates[gi].as_ref() {
            // Raft has not learnt yet that what is applied here is (it waits for it to be
            // durable): the snapshot would cover entries it still hands out.
            Some(st) => st.applied == g.raft_applied(),
            // The owner's range: its table is the RIB, and every entry it proposed is
            // committed (no batch in flight); wait until they are all applied here.
            None if gi == self.me as usize => {
                g.applied() >= g.last_index() && g.raft_applied() == g.applied()
            }
            None => true,
        }
    }

    /// Group `gi`'s range state at the index it is applied to, encoded as a snapshot's data
    /// (`replica::state`); None where the node holds no state of it.
    fn range_image(&self, gi: usize) -> Option<(u64, Vec<u8>)> {
        let g = self.groups[gi].as_ref()?;
        match self.gstates[gi].as_ref() {
            Some(st) => Some((
                st.applied,
                RangeSnapshot::encode_from(st.base_done, st.rib.len(), st.rib.iter(), &st.state),
            )),
            None if gi == self.me as usize => {
                let n = self.rib_entries().count();
                let data = RangeSnapshot::encode_from(true, n, self.rib_entries(), &self.own_state);
                Some((g.applied(), data))
            }
            None => None,
        }
    }

    /// Whether raft asked for group `gi`'s snapshot while its data was not held.
    fn snapshot_wanted_by(&self, gi: usize) -> bool {
        self.groups[gi]
            .as_ref()
            .is_some_and(|g| g.store().snapshot_wanted())
    }

    /// Whether a group this node leads needs a snapshot made to send to a replica too far
    /// behind for its entries ([`crate::replica::storage::RaftStore`] holds a snapshot's data
    /// only while needed): the driver calls [`Node::serve_snapshots`], which holds the
    /// control thread as long as a checkpoint of the range does (it announces a pause
    /// first, as for a checkpoint).
    pub fn snapshot_wanted(&self) -> bool {
        !self.fenced && (0..self.groups.len()).any(|gi| self.snapshot_wanted_by(gi))
    }

    /// Makes the snapshots raft asked for ([`Node::snapshot_wanted`]) from the ranges'
    /// states, for the groups at a point to snapshot (the others are tried again later): the
    /// log is compacted behind them in memory (the node's log keeps what it had until the
    /// next checkpoint) and raft sends them at its next try. Their data is held until the
    /// next checkpoint has written it. Returns how many were made.
    pub fn serve_snapshots(&mut self) -> usize {
        let mut made = 0;
        for gi in 0..self.groups.len() {
            if !self.snapshot_wanted_by(gi) || !self.snapshot_ready(gi) {
                continue;
            }
            let Some((index, data)) = self.range_image(gi) else {
                continue;
            };
            let g = self.groups[gi].as_mut().expect("a group");
            made += usize::from(g.put_snapshot(index, data));
        }
        made
    }
}
