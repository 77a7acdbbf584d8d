//! The range state machine: a range's RIB as its replicas hold it, changed by the committed
//! entries of the range's group (the owner's log records: initial flows, their end, changes),
//! and its snapshot.
//!
//! A follower keeps the RIB alone (a compact map of key, handling node and FIB value); the
//! leader, the range's owner, builds its `sb_setsep::Updatable` from it once it has applied
//! every committed entry ([`crate::Node`]), and from then on its batches keep the table.
//!
//! A snapshot's data (the `data` of a Raft snapshot) is: version u8 (1), initial flows done u8,
//! count u64, then per key: key length u8, key, node u16, value length u8, value; then the
//! range's GPT piece (`sb_setsep::Piece::to_bytes`, length u32, 0 for none: a follower has no
//! table) and the range's PFCP state records (length u32, then their compact form,
//! [`StateRecords::to_bytes`]; a snapshot of an earlier version may hold one state log record
//! of them all instead, `record::state`, still read; 0: none).

use super::records::StateRecords;
use crate::fixed::Rib;
use crate::record::{self, Record};
use crate::{Bytes, Flow, NodeId, Op};

/// A range's replicated state at one of its replicas.
pub struct RangeState {
    /// The RIB.
    pub(crate) rib: Rib,
    /// The initial flows are all in (their end record applied).
    pub base_done: bool,
    /// The index of the last entry applied.
    pub applied: u64,
    /// The range's PFCP state records by key ([`crate::Node::put_state`]).
    pub(crate) state: StateRecords,
    key_bytes: usize,
    value_bytes: usize,
    /// Keys the RIB is allocated for at start and after a snapshot.
    expected_keys: usize,
}

/// A range's state as a snapshot holds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSnapshot {
    /// The initial flows are all in.
    pub base_done: bool,
    /// Every key of the range with its handling node and FIB value.
    pub flows: Vec<Flow>,
    /// The range's GPT piece, if the snapshot was made by a node holding the table.
    pub piece: Option<Vec<u8>>,
    /// The range's PFCP state records ([`crate::Node::put_state`]: sessions and
    /// associations) in their compact form ([`StateRecords::to_bytes`]; or, from an earlier
    /// version, one state log record of them all), empty: none.
    pub sessions: Vec<u8>,
}

impl RangeState {
    /// An empty state of a range with these key and value widths, its RIB allocated for
    /// `expected_keys` (the RIBs of a node's replicas all grow together: a map of a million
    /// keys that doubles holds the control thread for a fraction of a second; 0: it grows
    /// as keys come).
    pub fn new(key_bytes: usize, value_bytes: usize, expected_keys: usize) -> RangeState {
        RangeState {
            rib: Rib::with_capacity(key_bytes, value_bytes, expected_keys),
            base_done: false,
            applied: 0,
            state: StateRecords::new(),
            key_bytes,
            value_bytes,
            expected_keys,
        }
    }

    /// Applies a committed entry's data (an empty one: Raft's own, nothing to do). Err for data
    /// that is no record of a range's log (the state is unchanged).
    pub fn apply(&mut self, data: &[u8]) -> Result<(), &'static str> {
        if data.is_empty() {
            return Ok(());
        }
        match record::decode(data)? {
            Record::Base(flows) => {
                for f in flows {
                    self.check(&f.key, &f.value)?;
                    self.rib.insert(&f.key, f.node, &f.value);
                }
            }
            Record::BaseEnd => self.base_done = true,
            Record::Changes { updates, .. } => {
                for u in &updates {
                    match u.op {
                        Op::Insert | Op::Change => {
                            self.check(&u.key, &u.value)?;
                            self.rib.insert(&u.key, u.node, &u.value);
                        }
                        Op::Delete => {
                            if u.key.len() == self.key_bytes {
                                self.rib.remove(&u.key);
                            }
                        }
                    }
                }
            }
            Record::State { puts, dels } => apply_state(&mut self.state, puts, &dels),
            Record::Epoch(_) | Record::Lost | Record::Caught(_) => {
                return Err("a node's record in a range's log")
            }
        }
        Ok(())
    }

    fn check(&self, k: &[u8], v: &[u8]) -> Result<(), &'static str> {
        if k.len() != self.key_bytes || v.len() != self.value_bytes {
            return Err("a flow that does not fit the cluster");
        }
        Ok(())
    }

    /// The RIB's flows.
    pub fn flows(&self) -> Vec<Flow> {
        self.rib
            .iter()
            .map(|(k, n, v)| Flow {
                key: Bytes::from_slice(k),
                node: n,
                value: Bytes::from_slice(v),
            })
            .collect()
    }

    /// Replaces the state with a snapshot's, taken at `index`.
    pub fn restore(&mut self, s: &RangeSnapshot, index: u64) -> Result<(), &'static str> {
        let room = s.flows.len().max(self.expected_keys);
        let mut rib = Rib::with_capacity(self.key_bytes, self.value_bytes, room);
        for f in &s.flows {
            self.check(&f.key, &f.value)?;
            rib.insert(&f.key, f.node, &f.value);
        }
        self.state = s.state()?;
        self.rib = rib;
        self.base_done = s.base_done;
        self.applied = index;
        Ok(())
    }
}

/// Applies a state record's changes to `state`: the puts, then the removals.
pub(crate) fn apply_state(state: &mut StateRecords, puts: Vec<(u64, Vec<u8>)>, dels: &[u64]) {
    for (k, v) in puts {
        state.insert(k, &v);
    }
    for k in dels {
        state.remove(*k);
    }
}

/// The bytes of a snapshot's state records: their compact form (empty: none).
pub(crate) fn encode_state(state: &StateRecords) -> Vec<u8> {
    if state.is_empty() {
        return Vec::new();
    }
    state.to_bytes()
}

impl RangeSnapshot {
    /// A snapshot of `flows`.
    pub fn of<'a>(
        base_done: bool,
        flows: impl Iterator<Item = (&'a [u8], NodeId, &'a [u8])>,
        piece: Option<Vec<u8>>,
    ) -> RangeSnapshot {
        RangeSnapshot {
            base_done,
            flows: flows
                .map(|(k, n, v)| Flow {
                    key: Bytes::from_slice(k),
                    node: n,
                    value: Bytes::from_slice(v),
                })
                .collect(),
            piece,
            sessions: Vec::new(),
        }
    }

    /// The data of a snapshot of `n` flows, `flows`, without a piece, with the state records
    /// `state` (written straight from a RIB: as [`RangeSnapshot::of`] then
    /// [`RangeSnapshot::encode`], without the copy).
    pub fn encode_from<K: std::ops::Deref<Target = [u8]>>(
        base_done: bool,
        n: usize,
        flows: impl Iterator<Item = (K, NodeId, impl std::ops::Deref<Target = [u8]>)>,
        state: &StateRecords,
    ) -> Vec<u8> {
        let mut r = vec![1, base_done as u8];
        r.extend_from_slice(&(n as u64).to_le_bytes());
        let mut written = 0usize;
        for (k, node, v) in flows {
            r.push(k.len() as u8);
            r.extend_from_slice(&k);
            r.extend_from_slice(&node.to_le_bytes());
            r.push(v.len() as u8);
            r.extend_from_slice(&v);
            written += 1;
        }
        debug_assert_eq!(written, n, "the count given is the flows'");
        // No piece.
        r.extend_from_slice(&0u32.to_le_bytes());
        let state = encode_state(state);
        r.reserve_exact(4 + state.len());
        r.extend_from_slice(&(state.len() as u32).to_le_bytes());
        r.extend_from_slice(&state);
        // Held (as a snapshot's data) until the checkpoint wrote it: no doubling's slack.
        r.shrink_to_fit();
        r
    }

    /// The snapshot's data.
    pub fn encode(&self) -> Vec<u8> {
        let mut r = vec![1, self.base_done as u8];
        r.extend_from_slice(&(self.flows.len() as u64).to_le_bytes());
        for f in &self.flows {
            r.push(f.key.len() as u8);
            r.extend_from_slice(&f.key);
            r.extend_from_slice(&f.node.to_le_bytes());
            r.push(f.value.len() as u8);
            r.extend_from_slice(&f.value);
        }
        let piece = self.piece.as_deref().unwrap_or(&[]);
        r.extend_from_slice(&(piece.len() as u32).to_le_bytes());
        r.extend_from_slice(piece);
        r.extend_from_slice(&(self.sessions.len() as u32).to_le_bytes());
        r.extend_from_slice(&self.sessions);
        r
    }

    /// The state records the snapshot holds.
    pub(crate) fn state(&self) -> Result<StateRecords, &'static str> {
        let mut out = StateRecords::new();
        match self.sessions.first() {
            None => return Ok(out),
            Some(&super::records::TAG) => return StateRecords::from_bytes(&self.sessions),
            Some(_) => {}
        }
        match record::decode(&self.sessions)? {
            Record::State { puts, dels } if dels.is_empty() => {
                apply_state(&mut out, puts, &[]);
                Ok(out)
            }
            _ => Err("a snapshot's state that is no state record"),
        }
    }

    /// Parses a snapshot's data (never panics).
    pub fn decode(b: &[u8]) -> Result<RangeSnapshot, &'static str> {
        let mut r = b;
        let mut take = |n: usize| -> Result<&[u8], &'static str> {
            if n > r.len() {
                return Err("truncated snapshot");
            }
            let (a, rest) = r.split_at(n);
            r = rest;
            Ok(a)
        };
        if take(1)?[0] != 1 {
            return Err("unknown snapshot version");
        }
        let base_done = match take(1)?[0] {
            0 => false,
            1 => true,
            _ => return Err("bad snapshot flag"),
        };
        let n = u64::from_le_bytes(take(8)?.try_into().expect("8"));
        let mut flows = Vec::with_capacity((n as usize).min(b.len() / 4));
        for _ in 0..n {
            let kl = take(1)?[0] as usize;
            let key = Bytes::from_slice(take(kl)?);
            let node = u16::from_le_bytes(take(2)?.try_into().expect("2"));
            let vl = take(1)?[0] as usize;
            let value = Bytes::from_slice(take(vl)?);
            flows.push(Flow { key, node, value });
        }
        let pl = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
        let piece = take(pl)?;
        let piece = (pl > 0).then(|| piece.to_vec());
        let sl = u32::from_le_bytes(take(4)?.try_into().expect("4")) as usize;
        let sessions = take(sl)?.to_vec();
        if !r.is_empty() {
            return Err("trailing bytes in a snapshot");
        }
        Ok(RangeSnapshot {
            base_done,
            flows,
            piece,
            sessions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Update;

    fn b(x: u8, n: usize) -> Bytes {
        Bytes::from_elem(x, n)
    }

    /// A replica's RIB is allocated for the keys its node expects, at start and after a
    /// snapshot smaller than that: it does not double (holding the control thread, at every
    /// replica of the range together) before it holds them.
    #[test]
    fn the_rib_is_allocated_for_the_expected_keys() {
        let n = 20_000;
        let mut s = RangeState::new(8, 4, n);
        let room = s.rib.capacity();
        assert!(room >= n, "{room}");
        let flows: Vec<Flow> = (0..n as u64)
            .map(|i| Flow {
                key: Bytes::from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes()),
                node: 1,
                value: b(7, 4),
            })
            .collect();
        let refs: Vec<_> = flows
            .iter()
            .map(|f| (&f.key[..], f.node, &f.value[..]))
            .collect();
        for c in refs.chunks(record::BASE_PER_RECORD) {
            s.apply(&record::base(c)).unwrap();
        }
        assert_eq!(s.rib.len(), n);
        assert_eq!(s.rib.capacity(), room, "the RIB grew");
        let small = RangeSnapshot {
            flows: flows[..10].to_vec(),
            ..RangeSnapshot::default()
        };
        s.restore(&small, 5).unwrap();
        assert!(s.rib.capacity() >= n, "{}", s.rib.capacity());
    }

    #[test]
    fn records_apply_in_order_and_a_snapshot_restores_the_same_state() {
        let mut s = RangeState::new(8, 4, 0);
        let (k1, k2) = (b(1, 8), b(2, 8));
        s.apply(&record::base(&[(&k1, 0, &[9; 4]), (&k2, 1, &[8; 4])]))
            .unwrap();
        s.apply(&record::base_end()).unwrap();
        let us = [
            Update {
                op: Op::Change,
                key: k1.clone(),
                node: 2,
                value: b(7, 4),
            },
            Update {
                op: Op::Delete,
                key: k2.clone(),
                node: 0,
                value: Bytes::new(),
            },
        ];
        s.apply(&record::changes(1, us.iter())).unwrap();
        s.apply(&[]).unwrap();
        assert!(s.apply(&record::epoch(3)).is_err());
        assert!(s.base_done);
        let want = vec![Flow {
            key: k1.clone(),
            node: 2,
            value: b(7, 4),
        }];
        assert_eq!(s.flows(), want);
        let snap = RangeSnapshot::of(true, s.rib.iter(), Some(vec![1, 2, 3]));
        let bytes = snap.encode();
        assert_eq!(RangeSnapshot::decode(&bytes), Ok(snap.clone()));
        for cut in 0..bytes.len() {
            assert!(RangeSnapshot::decode(&bytes[..cut]).is_err());
        }
        let mut t = RangeState::new(8, 4, 0);
        t.restore(&snap, 17).unwrap();
        assert_eq!((t.flows(), t.base_done, t.applied), (want, true, 17));
        // Widths of another cluster are refused.
        assert!(t.apply(&record::base(&[(&[1; 5], 0, &[9; 4])])).is_err());
    }

    #[test]
    fn a_snapshot_carries_the_state_records_compact_and_reads_the_older_form() {
        let mut s = RangeState::new(8, 4, 0);
        let rec = |i: u8| {
            let mut r = vec![3u8; 700];
            r[10] = i;
            r
        };
        let puts: Vec<(u64, Vec<u8>)> = (0..50u8).map(|i| (u64::from(i), rec(i))).collect();
        s.apply(&record::state(&puts, &[7])).unwrap();
        let data = RangeSnapshot::encode_from(true, 0, s.rib.iter(), &s.state);
        // 49 records of 700 bytes: one template, then a few bytes each.
        assert!(data.len() < 700 + 49 * 20, "{} bytes", data.len());
        let snap = RangeSnapshot::decode(&data).unwrap();
        let mut t = RangeState::new(8, 4, 0);
        t.restore(&snap, 3).unwrap();
        assert!(t.state == s.state);
        assert_eq!(t.state.get(7), None);
        assert_eq!(t.state.get(8), Some(rec(8)));
        // A snapshot of the earlier version: one state log record of them all.
        let old = RangeSnapshot {
            sessions: record::state(&s.state.iter().collect::<Vec<_>>(), &[]),
            ..snap
        };
        let mut u = RangeState::new(8, 4, 0);
        u.restore(&RangeSnapshot::decode(&old.encode()).unwrap(), 3)
            .unwrap();
        assert!(u.state == s.state);
    }
}
