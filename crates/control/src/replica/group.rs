//! One range's Raft group at one replica: raft-rs's `RawNode` over a [`RaftStore`], driven
//! without I/O. [`Group::collect`] takes every `Ready` the node has: the records to persist
//! (entries, hard state, a snapshot received), the messages that may go now (a leader's
//! appends go out while its own copy syncs), the committed entries to apply; the messages that
//! may only go once the records are durable (a follower's acknowledgement, a vote) are held
//! until [`Group::release`] is told the log is durable up to them.

use super::storage::{self, RaftStore};
use super::transport::{node_of, raft_id};
use crate::NodeId;
use raft::prelude::{Entry, Message, MessageType, Snapshot};
use raft::{RawNode, StateRole};
use std::collections::VecDeque;

/// The timers of a group, in ticks of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupTiming {
    /// Ticks without a leader's message before a follower campaigns (fixed per replica: see
    /// [`Group::new`]).
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// Bytes of entries per append message at most.
    pub max_msg_bytes: u64,
}

struct Held {
    /// The driver's persist number that makes this ready durable.
    persist: u64,
    number: u64,
    msgs: Vec<Message>,
}

/// What one [`Group::collect`] produced.
#[derive(Default)]
pub struct Collected {
    /// Records to append to the node's log (then [`Group::assign`] their persist number).
    pub records: Vec<Vec<u8>>,
    /// Messages to send now.
    pub send: Vec<Message>,
    /// A snapshot received from the leader: the state machine restores it before applying
    /// `committed`.
    pub snapshot: Option<Snapshot>,
    /// Committed entries to apply, in order.
    pub committed: Vec<Entry>,
}

/// A range's group at this replica.
pub struct Group {
    /// The range.
    pub range: u32,
    /// The replicas (voters), in the order of the assignment: the first is the range's home.
    pub voters: Vec<NodeId>,
    me: NodeId,
    raw: RawNode<RaftStore>,
    held: VecDeque<Held>,
    last_persist: u64,
    /// Applied by the state machine.
    applied: u64,
    /// This replica's log was lost ([`Group::withhold_votes`]): no vote, no campaign until it
    /// followed a leader and applied what that leader committed.
    withhold: bool,
    /// Vote requests (and leadership hand-overs) ignored while withholding.
    withheld: u64,
    /// The term in which the home, this follower's leader, restarted: the election clock is
    /// not held for it in that term ([`Group::tick`]).
    home_restarted_in: Option<u64>,
    /// Ticks a follower's election clock was held for its live home ([`Group::tick`]).
    held_ticks: u64,
}

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

impl Group {
    /// The group of `range` at `me` with these voters (the first is the range's home, which
    /// has the highest election priority), over `store`. Election timeouts are fixed per
    /// replica and distinct within the group: the `k`-th voter waits `e + k e / R` ticks (`e`:
    /// [`GroupTiming::election_ticks`], `R` voters), plus `salt % (e / R)` (raft-rs would draw
    /// them from the thread's RNG, which a reproducible simulation cannot have; equal fixed
    /// timeouts on aligned ticks split the votes forever).
    pub fn new(
        range: u32,
        voters: Vec<NodeId>,
        me: NodeId,
        store: RaftStore,
        timing: GroupTiming,
        salt: u64,
    ) -> Result<Group, raft::Error> {
        let base = timing.election_ticks.max(timing.heartbeat_ticks + 1);
        let r = voters.len().max(1);
        let k = voters.iter().position(|&v| v == me).unwrap_or(0);
        let step = (base / r).max(1);
        let e = base + k * step + (salt % step as u64) as usize;
        let applied = store.snapshot_index();
        let cfg = raft::Config {
            id: raft_id(me),
            election_tick: e,
            min_election_tick: e,
            max_election_tick: e + 1,
            heartbeat_tick: timing.heartbeat_ticks,
            max_size_per_msg: timing.max_msg_bytes,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            applied,
            // By the replicas' order: the home first, then the one that stands in for it
            // when it is gone (`node::standin`), and so on. With logs alike, a voter refuses
            // a candidate of a lower priority than its own, so the first live replica in that
            // order leads: the stand-in leads the range's group while the home is gone.
            priority: (voters.len() - voters.iter().position(|&v| v == me).unwrap_or(voters.len()))
                as i64,
            ..raft::Config::default()
        };
        let raw = RawNode::new(&cfg, store, &logger())?;
        Ok(Group {
            range,
            voters,
            me,
            raw,
            held: VecDeque::new(),
            last_persist: 0,
            applied,
            withhold: false,
            withheld: 0,
            home_restarted_in: None,
            held_ticks: 0,
        })
    }

    /// This replica lost its log (a wiped or replaced disk): the votes it gave before are
    /// forgotten, so giving another in the same term could elect two leaders. Until it has
    /// heard a leader and applied every entry that leader told it committed, it neither votes
    /// (vote and pre-vote requests are ignored) nor campaigns (its clock does not run; a
    /// leadership hand-over is ignored). Then it is an ordinary follower: raft-rs grants no
    /// vote in a term whose leader it knows, and it knows the terms up to its leader's. (The
    /// complete answer, a membership change to a new replica id, is not done; the module
    /// documentation of `node` says what is left.)
    pub fn withhold_votes(&mut self) {
        self.withhold = true;
    }

    /// Whether this replica still withholds its votes ([`Group::withhold_votes`]).
    pub fn withholding(&self) -> bool {
        self.withhold
    }

    /// Vote requests and hand-overs ignored while withholding.
    pub fn withheld(&self) -> u64 {
        self.withheld
    }

    /// Ticks this follower's election clock was held for its live home ([`Group::tick`]).
    pub fn held_ticks(&self) -> u64 {
        self.held_ticks
    }

    /// Ends the withholding once this replica follows a leader with every committed entry it
    /// knows applied. (A group that never committed anything, one whose replicas all crashed
    /// during the cluster's first start, goes on with its leader's first heartbeat.)
    fn check_caught_up(&mut self) {
        let r = &self.raw.raft;
        if self.withhold
            && r.leader_id != raft::INVALID_ID
            && r.leader_id != r.id
            && r.raft_log.applied >= r.raft_log.committed
        {
            self.withhold = false;
        }
    }

    /// The range's home: the replica that leads when it can.
    pub fn home(&self) -> NodeId {
        self.voters[0]
    }

    /// One tick of the group's clock. A leader other than the home hands the leadership to
    /// the home once the home's log has caught up with its own.
    ///
    /// `home_alive`: the node's failure detection hears the range's home (within its
    /// lease). A follower whose leader is the home then holds its election clock (at
    /// the election timeout at most: it grants votes past it, but does not campaign): a
    /// home that is slow (a control thread not scheduled for longer than the election timeout,
    /// on a loaded machine) is not replaced, which would fence it and restart it from its
    /// log, holding its thread again (the restart loop under load); a home that is gone is
    /// replaced once failure detection says so, one election timeout later. The clock runs
    /// again in the term in which the home restarted ([`Group::peer_restarted`]), so that the
    /// restarted home, or another replica when the home cannot lead (its log was lost), is
    /// elected as without the hold.
    pub fn tick(&mut self, home_alive: bool) {
        self.check_caught_up();
        let r = &self.raw.raft;
        let hold = home_alive
            && self.home() != self.me
            && r.state == StateRole::Follower
            && r.leader_id == raft_id(self.home())
            && self.home_restarted_in != Some(r.term);
        self.held_ticks += u64::from(hold);
        // No campaign while a snapshot is not yet applied in raft (see `step`), nor while
        // this replica withholds its votes.
        if !self.restoring() && !self.withhold {
            if hold {
                // The clock runs up to the election timeout and stops there: past it the
                // leader's lease is over here (raft-rs grants a vote then: the home's own
                // campaign after it stepped down is granted), but this follower does not
                // campaign itself.
                let r = &mut self.raw.raft;
                r.election_elapsed = (r.election_elapsed + 1).min(r.election_timeout());
            } else {
                self.raw.tick();
            }
        }
        let home = self.home();
        if self.is_leader() && home != self.me {
            let last = self.raw.raft.raft_log.last_index();
            let caught_up = self
                .raw
                .raft
                .prs()
                .get(raft_id(home))
                .is_some_and(|p| p.matched == last);
            if caught_up && self.raw.raft.lead_transferee.is_none() {
                self.raw.transfer_leader(raft_id(home));
            }
        }
    }

    /// Peer `p` started again (a new epoch): a leader forgets what it knew `p`'s log to hold
    /// and probes it from its own last entry. raft-rs takes a follower's acknowledged entries
    /// to be kept forever; one whose log was lost would be told a commit index past its last
    /// entry (which raft-rs takes for a broken log) and its refusals of the appends after its
    /// old match would be ignored as stale. A restarted follower with its log intact answers
    /// the probe at once.
    /// A follower whose leader was `p`, the home, runs its election clock again in this term
    /// ([`Group::tick`]).
    pub fn peer_restarted(&mut self, p: NodeId) {
        if p == self.home() && self.raw.raft.leader_id == raft_id(p) {
            self.home_restarted_in = Some(self.raw.raft.term);
        }
        if !self.is_leader() || p == self.me {
            return;
        }
        let last = self.raw.raft.raft_log.last_index();
        if let Some(pr) = self.raw.raft.mut_prs().get_mut(raft_id(p)) {
            pr.become_probe();
            pr.matched = 0;
            pr.next_idx = last + 1;
        }
    }

    /// Steps a message from a peer (checked by [`super::transport::accept`]).
    pub fn step(&mut self, m: Message) {
        // A campaign reads the entries after raft's applied index, which a snapshot just
        // taken into the store (applied in raft once durable: `release`) no longer holds:
        // the leader's leadership transfer waits (it is asked again).
        if self.restoring() && m.get_msg_type() == MessageType::MsgTimeoutNow {
            return;
        }
        // A commit index past this replica's last entry: a leader that has not yet learnt that
        // this replica lost its log (`peer_restarted`). Ignored (raft-rs would abort).
        if m.get_msg_type() == MessageType::MsgHeartbeat
            && m.commit > self.raw.raft.raft_log.last_index()
        {
            self.withheld += 1;
            return;
        }
        if self.withhold
            && matches!(
                m.get_msg_type(),
                MessageType::MsgRequestVote
                    | MessageType::MsgRequestPreVote
                    | MessageType::MsgTimeoutNow
            )
        {
            self.withheld += 1;
            return;
        }
        // An error is a message raft ignores (of another term, from an unknown peer).
        let _ = self.raw.step(m);
    }

    /// A snapshot is in the store that raft has not applied yet.
    fn restoring(&self) -> bool {
        self.raw.raft.raft_log.applied < self.raw.store().snapshot_index()
    }

    /// Proposes `data` with `context` if this replica leads: the index the entry will have.
    pub fn propose(&mut self, context: Vec<u8>, data: Vec<u8>) -> Option<u64> {
        if !self.is_leader() || self.raw.raft.lead_transferee.is_some() {
            return None;
        }
        let before = self.raw.raft.raft_log.last_index();
        self.raw.propose(context, data).ok()?;
        let after = self.raw.raft.raft_log.last_index();
        (after > before).then_some(after)
    }

    /// Whether this replica leads the group.
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The leader as this replica knows it.
    pub fn leader(&self) -> Option<NodeId> {
        node_of(self.raw.raft.leader_id)
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The commit index as this replica knows it.
    pub fn committed(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// The index applied here as raft knows it (applied and durable).
    pub fn applied(&self) -> u64 {
        self.raw.raft.raft_log.applied
    }

    /// The index of the last entry of the log here.
    pub fn last_index(&self) -> u64 {
        self.raw.raft.raft_log.last_index()
    }

    /// The term of the entry at `index`, if held.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        self.raw.raft.raft_log.term(index).ok()
    }

    /// Whether this replica leads and the log is committed up to an entry of its own term
    /// (so every entry committed before, by any leader, is known committed here).
    pub fn leading_with_commit(&self) -> bool {
        self.is_leader() && self.term_at(self.committed()) == Some(self.term())
    }

    /// The store.
    pub fn store(&self) -> &RaftStore {
        self.raw.store()
    }

    /// Takes every ready the node has (see the module documentation).
    pub fn collect(&mut self) -> Collected {
        let mut out = Collected::default();
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            out.send.extend(rd.take_messages());
            if !rd.snapshot().is_empty() {
                let s = rd.snapshot().clone();
                out.records.push(storage::snapshot_record(self.range, &s));
                // The store keeps the metadata: the data goes to the driver's log in the
                // record and to the range's state through `out.snapshot`
                // (storage::RaftStore).
                let mut kept = Snapshot::default();
                kept.set_metadata(s.get_metadata().clone());
                self.raw.mut_store().apply_snapshot(kept);
                // The driver restores the range's state from it at once: applied here, and in
                // raft once durable (`release`).
                self.applied = self.applied.max(s.get_metadata().index);
                out.snapshot = Some(s);
                out.committed.clear();
            }
            out.committed.extend(rd.take_committed_entries());
            if !rd.entries().is_empty() {
                out.records
                    .push(storage::entries_record(self.range, rd.entries()));
                let es = rd.take_entries();
                self.raw
                    .mut_store()
                    .append(&es)
                    .expect("raft hands out entries that follow the log");
            }
            if let Some(hs) = rd.hs() {
                out.records.push(storage::hard_record(self.range, hs));
                self.raw.mut_store().set_hard_state(hs.clone());
            }
            let msgs = rd.take_persisted_messages();
            let number = rd.number();
            self.raw.advance_append_async(rd);
            self.held.push_back(Held {
                persist: u64::MAX,
                number,
                msgs,
            });
        }
        out
    }

    /// The records of the last [`Group::collect`] are the driver's persist number `n` (0: it
    /// made none, the readies wait for the earlier ones).
    pub fn assign(&mut self, n: u64) {
        if n > 0 {
            self.last_persist = n;
        }
        for h in self.held.iter_mut().filter(|h| h.persist == u64::MAX) {
            h.persist = self.last_persist;
        }
    }

    /// The driver's log is durable through persist number `durable`: the readies it covers
    /// are persisted; their held messages, to send now.
    pub fn release(&mut self, durable: u64) -> Vec<Message> {
        let mut out = Vec::new();
        let mut last = None;
        while self.held.front().is_some_and(|h| h.persist <= durable) {
            let h = self.held.pop_front().expect("front");
            last = Some(h.number);
            out.extend(h.msgs);
        }
        if let Some(n) = last {
            self.raw.on_persist_ready(n);
            self.tell_applied();
        }
        out
    }

    /// Entries up to `index` are applied (raft learns it once they are also durable here: a
    /// snapshot is applied before its record is).
    pub fn applied_to(&mut self, index: u64) {
        self.applied = self.applied.max(index);
        self.tell_applied();
    }

    fn tell_applied(&mut self) {
        let log = &self.raw.raft.raft_log;
        let a = self.applied.min(log.committed).min(log.persisted);
        if a > log.applied {
            self.raw.advance_apply_to(a);
        }
    }

    /// The index raft knows applied (entries applied here, committed and durable here): a
    /// compaction may cover up to it, not past it (raft still hands out the entries after).
    pub fn raft_applied(&self) -> u64 {
        self.raw.raft.raft_log.applied
    }

    /// Compacts the log behind a snapshot at `index` (applied here) whose data is `data`:
    /// the record to persist (the replication tests' checkpoint; the node's is
    /// [`Group::put_snapshot`], then the store's records).
    #[cfg(test)]
    pub fn compact(&mut self, index: u64, data: Vec<u8>) -> Option<Vec<u8>> {
        let s = self.raw.store().make_snapshot(index, data)?;
        let rec = storage::snapshot_record(self.range, &s);
        self.raw.mut_store().apply_snapshot(s);
        Some(rec)
    }

    /// Compacts the in-memory log once it holds more than `over` entries: behind what is
    /// applied here and, while leading, what every replica has (so that none needs a
    /// snapshot for it). The node's log keeps the entries until its next checkpoint
    /// ([`RaftStore::trim_to`]). Whether it compacted.
    pub fn trim(&mut self, over: usize) -> bool {
        if self.raw.store().held_entries() <= over {
            return false;
        }
        let mut index = self.raw.raft.raft_log.applied;
        if self.raw.raft.state == StateRole::Leader {
            for (_, p) in self.raw.raft.prs().iter() {
                index = index.min(p.matched);
            }
        }
        self.raw.mut_store().trim_to(index)
    }

    /// Drops the latest snapshot's data from the store ([`RaftStore::drop_snapshot_data`]).
    pub fn drop_snapshot_data(&mut self) {
        self.raw.mut_store().drop_snapshot_data();
    }

    /// Makes the store's latest snapshot one at `index` (applied here) with `data`, compacting
    /// behind it or giving its dropped data again ([`RaftStore::put_snapshot`]); no record
    /// (the checkpoint writes the store's records after).
    pub fn put_snapshot(&mut self, index: u64, data: Vec<u8>) -> bool {
        self.raw.mut_store().put_snapshot(index, data)
    }

    /// The node `to`'s snapshot message went out (the leader resumes probing it).
    pub fn snapshot_sent(&mut self, to: NodeId) {
        self.raw
            .report_snapshot(raft_id(to), raft::SnapshotStatus::Finish);
    }

    /// A message to `to` could not go (the peer is unreachable).
    pub fn unreachable(&mut self, to: NodeId) {
        self.raw.report_unreachable(raft_id(to));
    }
}
