//! The storage adapter: raft-rs's [`Storage`] over memory (the entries since the last snapshot,
//! the hard state, the snapshot), and the log records that make it durable.
//!
//! A group's durable state is a sequence of records in the node's log (handed out in
//! [`crate::Event::Persist`], so the driver's one `sb-wal` log and its fsync cover them):
//! entries (type 5), the hard state (type 6) and snapshots (type 7). [`RaftStore::replay`]
//! rebuilds the in-memory store from them in order: entries overwrite the log from their first
//! index on (raft's truncation of a conflicting tail), the last hard state wins, and a snapshot
//! replaces the entries it covers. Record layouts (integers little-endian):
//!
//! | type | body |
//! |---|---|
//! | 5 | group u32, count u32, (length u32, protobuf `Entry`) each |
//! | 6 | group u32, term u64, vote u64, commit u64 |
//! | 7 | group u32, length u32, protobuf `Snapshot` (metadata and the range's state) |

// The protobuf types are filled field by field (raft-proto's own style).
#![allow(clippy::field_reassign_with_default)]

use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

/// One group's log in memory.
///
/// The latest snapshot's metadata is always held; its data (the range's state at its index:
/// the RIB and the PFCP state records, hundreds of MB per range at millions of sessions, a
/// copy of what the range's state machine holds) only while it is needed: from its making
/// until the driver wrote it to the log ([`RaftStore::drop_snapshot_data`]), and from a
/// leader's need to send it to a replica too far behind for the entries until the next
/// checkpoint. Asked for a snapshot whose data it does not hold ([`Storage::snapshot`]), the
/// store answers that it is temporarily unavailable, as raft-rs lets a store do, and notes
/// the want ([`RaftStore::snapshot_wanted`]): the node makes a new snapshot from the range's
/// state ([`crate::Node::serve_snapshots`]) and raft sends it at its next try.
#[derive(Clone, Debug)]
pub struct RaftStore {
    hard: HardState,
    conf: ConfState,
    /// The latest snapshot (index 0: none), its data dropped while not needed; the entries
    /// follow it.
    snap: Snapshot,
    entries: Vec<Entry>,
    /// Raft asked for the snapshot while its data was not held.
    wanted: std::cell::Cell<bool>,
}

/// A durable record of a group's store, decoded ([`decode`]).
#[derive(Clone, Debug, PartialEq)]
pub enum StoreRecord {
    /// Entries, overwriting the log from the first one's index.
    Entries(Vec<Entry>),
    /// The hard state.
    Hard(HardState),
    /// A snapshot (replaces the entries up to its index).
    Snapshot(Snapshot),
}

impl RaftStore {
    /// An empty store of a group whose voters are `voters` (raft ids).
    pub fn new(voters: Vec<u64>) -> RaftStore {
        let mut conf = ConfState::default();
        conf.set_voters(voters);
        // Term 1 from the start: raft-rs refuses to send a (pre-)vote answer of term 0.
        let mut hard = HardState::default();
        hard.term = 1;
        RaftStore {
            hard,
            conf,
            snap: Snapshot::default(),
            entries: Vec::new(),
            wanted: std::cell::Cell::new(false),
        }
    }

    /// Compacts the in-memory log behind `index` (an entry held, applied here) with a
    /// snapshot of metadata only: the node's log on disk keeps the entries until its next
    /// checkpoint, and a replica that needs what went gets a snapshot made anew
    /// ([`Storage::snapshot`]). False (nothing changed) for an index not held past the
    /// snapshot, or not committed.
    pub fn trim_to(&mut self, index: u64) -> bool {
        if index > self.hard.commit {
            return false;
        }
        index > self.snapshot_index() && self.put_snapshot(index, Vec::new())
    }

    /// Makes the latest snapshot one at `index` (an entry held, or the snapshot's own index)
    /// whose data is `data`: the log compacted behind it, or the snapshot's dropped data given
    /// again. False (nothing changed) for an index before the snapshot or not held.
    pub fn put_snapshot(&mut self, index: u64, data: Vec<u8>) -> bool {
        if index > self.snapshot_index() {
            let Some(s) = self.make_snapshot(index, data) else {
                return false;
            };
            self.apply_snapshot(s);
            true
        } else {
            self.set_snapshot_data(index, data)
        }
    }

    /// Entries held past the snapshot.
    pub fn held_entries(&self) -> usize {
        self.entries.len()
    }

    /// Whether the latest snapshot's data is held (always true without a snapshot).
    pub fn holds_snapshot_data(&self) -> bool {
        self.snapshot_index() == 0 || !self.snap.get_data().is_empty()
    }

    /// Drops the latest snapshot's data (its metadata stays): once it is in the log, and
    /// not wanted by raft, nothing needs it in memory.
    pub fn drop_snapshot_data(&mut self) {
        self.snap.clear_data();
    }

    /// Gives the latest snapshot its data again, made anew from the range's state at the
    /// snapshot's index; false (nothing changed) for another index.
    pub fn set_snapshot_data(&mut self, index: u64, data: Vec<u8>) -> bool {
        if index == 0 || index != self.snapshot_index() {
            return false;
        }
        self.snap.set_data(data.into());
        self.wanted.set(false);
        true
    }

    /// Raft asked for the snapshot while its data was not held (and it still is not).
    pub fn snapshot_wanted(&self) -> bool {
        self.wanted.get() && !self.holds_snapshot_data()
    }

    /// Bytes the store holds: its entries' data (and their fixed parts) and the snapshot's
    /// data (Raft's own bookkeeping aside).
    pub fn held_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self
                .entries
                .iter()
                .map(|e| e.get_data().len() + e.get_context().len())
                .sum::<usize>()
            + self.snap.get_data().len()
    }

    /// The index the snapshot covers (0: none).
    pub fn snapshot_index(&self) -> u64 {
        self.snap.get_metadata().index
    }

    /// The latest snapshot.
    pub fn latest_snapshot(&self) -> &Snapshot {
        &self.snap
    }

    /// The hard state.
    pub fn hard_state(&self) -> &HardState {
        &self.hard
    }

    /// The index of the last entry (or the snapshot's).
    pub fn last(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snapshot_index(), |e| e.index)
    }

    /// The index of the first entry held.
    pub fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    /// Entries `lo..=hi` held (those of them past the snapshot).
    pub fn range(&self, lo: u64, hi: u64) -> &[Entry] {
        let f = self.first();
        let lo = lo.max(f);
        if hi < lo || self.entries.is_empty() {
            return &[];
        }
        let a = (lo - f) as usize;
        let b = ((hi - f + 1) as usize).min(self.entries.len());
        if a >= b {
            return &[];
        }
        &self.entries[a..b]
    }

    /// Appends `ents`, dropping whatever the log held from the first one's index on. Entries
    /// the snapshot covers are skipped. Err if they would leave a gap.
    pub fn append(&mut self, ents: &[Entry]) -> Result<(), &'static str> {
        let s = self.snapshot_index();
        let ents: Vec<&Entry> = ents.iter().filter(|e| e.index > s).collect();
        let Some(first) = ents.first() else {
            return Ok(());
        };
        if first.index > self.last() + 1 {
            return Err("entries after a gap");
        }
        for w in ents.windows(2) {
            if w[1].index != w[0].index + 1 {
                return Err("entries not consecutive");
            }
        }
        let keep = (first.index - self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend(ents.into_iter().cloned());
        Ok(())
    }

    /// Sets the hard state.
    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard = hs;
    }

    /// Installs `snap` (received from the leader, or made here at an applied index): the
    /// entries it covers go; those after it stay if the snapshot's last entry is in the log
    /// with its term, else every entry goes.
    pub fn apply_snapshot(&mut self, snap: Snapshot) {
        let m = snap.get_metadata();
        let (index, term) = (m.index, m.term);
        if index <= self.snapshot_index() {
            return;
        }
        let keeps_tail = self
            .entries
            .iter()
            .find(|e| e.index == index)
            .is_some_and(|e| e.term == term);
        if keeps_tail {
            self.entries.retain(|e| e.index > index);
        } else {
            self.entries.clear();
        }
        if self.hard.commit < index {
            self.hard.commit = index;
        }
        if self.hard.term < term {
            self.hard.term = term;
        }
        self.conf = m.get_conf_state().clone();
        self.snap = snap;
        self.wanted.set(false);
    }

    /// A snapshot of this group at `index` (an entry held, or the snapshot's), whose data is
    /// `data`.
    pub fn make_snapshot(&self, index: u64, data: Vec<u8>) -> Option<Snapshot> {
        let term = self.term_of(index)?;
        let mut s = Snapshot::default();
        s.set_data(data.into());
        let m = s.mut_metadata();
        m.index = index;
        m.term = term;
        m.set_conf_state(self.conf.clone());
        Some(s)
    }

    fn term_of(&self, idx: u64) -> Option<u64> {
        if idx == self.snapshot_index() {
            return Some(self.snap.get_metadata().term);
        }
        if idx < self.first() {
            return None;
        }
        self.entries
            .get((idx - self.first()) as usize)
            .map(|e| e.term)
    }

    /// Rebuilds a store from its durable records, in order.
    pub fn replay(voters: Vec<u64>, records: Vec<StoreRecord>) -> Result<RaftStore, &'static str> {
        let mut s = RaftStore::new(voters);
        for r in records {
            match r {
                StoreRecord::Entries(e) => s.append(&e)?,
                StoreRecord::Hard(h) => s.hard = h,
                StoreRecord::Snapshot(snap) => s.apply_snapshot(snap),
            }
        }
        if s.hard.commit > s.last() {
            return Err("commit index past the log");
        }
        Ok(s)
    }
}

impl Storage for RaftStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard.clone(), self.conf.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let mut out = self.range(low, high - 1).to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.snapshot_index() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_of(idx)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() == 0 {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        if !self.holds_snapshot_data() {
            // Made anew by the node; raft tries again at its next append or heartbeat.
            self.wanted.set(true);
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snap.clone())
    }
}

/// The record of `entries` of group `group`.
pub fn entries_record(group: u32, entries: &[Entry]) -> Vec<u8> {
    let mut r = vec![5];
    r.extend_from_slice(&group.to_le_bytes());
    r.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        let b = e.write_to_bytes().expect("an entry encodes");
        r.extend_from_slice(&(b.len() as u32).to_le_bytes());
        r.extend_from_slice(&b);
    }
    r
}

/// The record of group `group`'s hard state.
pub fn hard_record(group: u32, hs: &HardState) -> Vec<u8> {
    let mut r = vec![6];
    r.extend_from_slice(&group.to_le_bytes());
    r.extend_from_slice(&hs.term.to_le_bytes());
    r.extend_from_slice(&hs.vote.to_le_bytes());
    r.extend_from_slice(&hs.commit.to_le_bytes());
    r
}

/// The record of a snapshot of group `group`.
pub fn snapshot_record(group: u32, s: &Snapshot) -> Vec<u8> {
    // Written in place: a snapshot's data is hundreds of MB at millions of sessions, and a
    // checkpoint makes one record per group (no second copy in between).
    let len = s.compute_size() as usize;
    let mut r = Vec::with_capacity(9 + len);
    r.push(7);
    r.extend_from_slice(&group.to_le_bytes());
    r.extend_from_slice(&(len as u32).to_le_bytes());
    s.write_to_vec(&mut r).expect("a snapshot encodes");
    debug_assert_eq!(r.len(), 9 + len);
    r
}

/// Whether `b` is a record of this module (type 5, 6 or 7).
pub fn is_store_record(b: &[u8]) -> bool {
    matches!(b.first(), Some(5..=7))
}

/// Parses a record of this module: its group and content (never panics).
pub fn decode(b: &[u8]) -> Result<(u32, StoreRecord), &'static str> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Result<&'a [u8], &'static str> {
        if n > b.len() {
            return Err("truncated");
        }
        let (x, rest) = b.split_at(n);
        *b = rest;
        Ok(x)
    }
    fn u32_(b: &mut &[u8]) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(take(b, 4)?.try_into().expect("4")))
    }
    fn u64_(b: &mut &[u8]) -> Result<u64, &'static str> {
        Ok(u64::from_le_bytes(take(b, 8)?.try_into().expect("8")))
    }
    let mut r = b;
    let t = take(&mut r, 1)?[0];
    let group = u32_(&mut r)?;
    let rec = match t {
        5 => {
            let n = u32_(&mut r)? as usize;
            let mut es = Vec::with_capacity(n.min(r.len() / 4));
            for _ in 0..n {
                let l = u32_(&mut r)? as usize;
                let e = Entry::parse_from_bytes(take(&mut r, l)?).map_err(|_| "bad entry")?;
                es.push(e);
            }
            StoreRecord::Entries(es)
        }
        6 => {
            let mut h = HardState::default();
            h.term = u64_(&mut r)?;
            h.vote = u64_(&mut r)?;
            h.commit = u64_(&mut r)?;
            StoreRecord::Hard(h)
        }
        7 => {
            let l = u32_(&mut r)? as usize;
            let s = Snapshot::parse_from_bytes(take(&mut r, l)?).map_err(|_| "bad snapshot")?;
            StoreRecord::Snapshot(s)
        }
        _ => return Err("not a raft record"),
    };
    if !r.is_empty() {
        return Err("trailing bytes");
    }
    Ok((group, rec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ent(index: u64, term: u64) -> Entry {
        let mut e = Entry::default();
        e.index = index;
        e.term = term;
        e.set_data(vec![index as u8; 3].into());
        e
    }

    #[test]
    fn append_truncates_a_conflicting_tail_and_refuses_gaps() {
        let mut s = RaftStore::new(vec![1, 2, 3]);
        s.append(&[ent(1, 1), ent(2, 1), ent(3, 1)]).unwrap();
        s.append(&[ent(2, 2)]).unwrap();
        assert_eq!(s.last(), 2);
        assert_eq!(s.term(2).unwrap(), 2);
        assert!(s.append(&[ent(5, 2)]).is_err());
        assert_eq!(
            s.entries(1, 3, None, GetEntriesContext::empty(false))
                .unwrap(),
            vec![ent(1, 1), ent(2, 2)]
        );
    }

    #[test]
    fn snapshots_compact_and_keep_a_matching_tail() {
        let mut s = RaftStore::new(vec![1, 2, 3]);
        s.append(&[ent(1, 1), ent(2, 1), ent(3, 2)]).unwrap();
        let snap = s.make_snapshot(2, vec![9]).unwrap();
        s.apply_snapshot(snap.clone());
        assert_eq!((s.first(), s.last()), (3, 3));
        assert_eq!(s.term(2).unwrap(), 1);
        assert!(matches!(
            s.entries(1, 3, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert_eq!(Storage::snapshot(&s, 0, 0).unwrap(), snap);
        // A snapshot past the log (from a leader) drops every entry.
        let mut t = RaftStore::new(vec![1, 2, 3]);
        t.append(&[ent(1, 1)]).unwrap();
        let mut far = snap.clone();
        far.mut_metadata().index = 7;
        far.mut_metadata().term = 3;
        t.apply_snapshot(far);
        assert_eq!((t.first(), t.last(), t.hard_state().commit), (8, 7, 7));
    }

    /// A snapshot's data dropped (it is in the log) is not handed to raft: the store says it
    /// is temporarily unavailable and notes the want, until the data is given again for the
    /// same index (another index is refused); the entries and the metadata stay throughout.
    #[test]
    fn a_dropped_snapshot_is_wanted_until_made_again() {
        let mut s = RaftStore::new(vec![1, 2, 3]);
        s.append(&[ent(1, 1), ent(2, 1), ent(3, 2)]).unwrap();
        let snap = s.make_snapshot(2, vec![9; 1000]).unwrap();
        s.apply_snapshot(snap.clone());
        let held = s.held_bytes();
        assert!(s.holds_snapshot_data() && !s.snapshot_wanted());
        assert_eq!(s.snapshot(2, 2).unwrap(), snap);
        s.drop_snapshot_data();
        assert_eq!(held - s.held_bytes(), 1000);
        assert!(!s.holds_snapshot_data() && !s.snapshot_wanted());
        assert_eq!(
            s.snapshot(2, 2),
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable
            ))
        );
        assert!(s.snapshot_wanted());
        assert_eq!((s.snapshot_index(), s.first(), s.last()), (2, 3, 3));
        assert!(!s.set_snapshot_data(3, vec![1]), "another index");
        assert!(s.snapshot_wanted());
        assert!(s.set_snapshot_data(2, vec![9; 1000]));
        assert!(!s.snapshot_wanted());
        assert_eq!(s.snapshot(2, 2).unwrap(), snap);
    }

    /// Trimming keeps the entries after the index and the hard state, and leaves a snapshot
    /// of metadata only (wanted when raft asks for it); past the commit index, at or before
    /// the snapshot, it does nothing.
    #[test]
    fn a_trimmed_log_keeps_its_tail_and_wants_its_snapshot_made() {
        let mut s = RaftStore::new(vec![1, 2, 3]);
        s.append(&[ent(1, 1), ent(2, 1), ent(3, 2), ent(4, 2)])
            .unwrap();
        let mut hs = HardState::default();
        hs.term = 2;
        hs.commit = 3;
        s.set_hard_state(hs.clone());
        assert!(!s.trim_to(4), "past the commit index");
        assert!(s.trim_to(2));
        assert_eq!((s.snapshot_index(), s.first(), s.last()), (2, 3, 4));
        assert_eq!((s.held_entries(), s.term(3).unwrap()), (2, 2));
        assert_eq!(s.hard_state(), &hs);
        assert!(!s.trim_to(2) && !s.trim_to(1), "at or before the snapshot");
        assert!(!s.holds_snapshot_data());
        assert!(s.snapshot(2, 2).is_err() && s.snapshot_wanted());
    }

    #[test]
    fn records_round_trip_and_replay_to_the_same_store() {
        let mut hs = HardState::default();
        hs.term = 2;
        hs.vote = 3;
        hs.commit = 2;
        let mut s = RaftStore::new(vec![1, 2, 3]);
        s.append(&[ent(1, 1), ent(2, 1), ent(3, 2)]).unwrap();
        let snap = s.make_snapshot(1, vec![4, 5]).unwrap();
        let recs = vec![
            entries_record(4, &[ent(1, 1), ent(2, 1), ent(3, 1)]),
            entries_record(4, &[ent(3, 2)]),
            hard_record(4, &hs),
            snapshot_record(4, &snap),
        ];
        let mut decoded = Vec::new();
        for r in &recs {
            assert!(is_store_record(r));
            let (g, d) = decode(r).unwrap();
            assert_eq!(g, 4);
            decoded.push(d);
            for cut in 0..r.len() {
                assert!(decode(&r[..cut]).is_err(), "cut {cut}");
            }
        }
        let t = RaftStore::replay(vec![1, 2, 3], decoded).unwrap();
        assert_eq!((t.first(), t.last()), (2, 3));
        assert_eq!(t.term(3).unwrap(), 2);
        assert_eq!(t.hard_state(), &hs);
        assert_eq!(t.latest_snapshot(), &snap);
    }
}
