//! The node's log records (format in the crate documentation).

use crate::wire::{put_update, update_len};
use crate::{Flow, NodeId, Op, Update};

/// A decoded log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    Epoch(u32),
    Base(Vec<Flow>),
    BaseEnd,
    Changes {
        first: u64,
        updates: Vec<Update>,
    },
    /// The log was lost before this record: its Raft groups' votes are forgotten.
    Lost,
    /// Range `g`'s group at this node followed a leader again after [`Record::Lost`].
    Caught(u32),
    /// The range's PFCP state records ([`crate::Node::put_state`]): each of `puts` kept under
    /// its key (replacing the one it had), each of `dels` removed.
    State {
        puts: Vec<(u64, Vec<u8>)>,
        dels: Vec<u64>,
    },
}

/// Bytes of one state record at most ([`crate::Node::put_state`]).
pub const MAX_STATE_BYTES: usize = 65_536;

/// Initial flows per base record at most (keeps records under about 1 MB).
pub(crate) const BASE_PER_RECORD: usize = 8192;

pub(crate) fn epoch(e: u32) -> Vec<u8> {
    let mut r = vec![1];
    r.extend_from_slice(&e.to_le_bytes());
    r
}

pub(crate) fn base(flows: &[(&[u8], NodeId, &[u8])]) -> Vec<u8> {
    let mut r = vec![2];
    r.extend_from_slice(&(flows.len() as u32).to_le_bytes());
    for (k, n, v) in flows {
        r.push(k.len() as u8);
        r.extend_from_slice(k);
        r.extend_from_slice(&n.to_le_bytes());
        r.push(v.len() as u8);
        r.extend_from_slice(v);
    }
    r
}

pub(crate) fn base_end() -> Vec<u8> {
    vec![3]
}

pub(crate) fn lost() -> Vec<u8> {
    vec![8]
}

pub(crate) fn caught(g: u32) -> Vec<u8> {
    let mut r = vec![9];
    r.extend_from_slice(&g.to_le_bytes());
    r
}

/// The record of state changes: `puts` kept, `dels` removed (applied in that order).
pub(crate) fn state(puts: &[(u64, Vec<u8>)], dels: &[u64]) -> Vec<u8> {
    let len: usize = puts.iter().map(|(_, v)| 12 + v.len()).sum::<usize>() + 8 * dels.len();
    let mut r = Vec::with_capacity(9 + len);
    r.push(10);
    r.extend_from_slice(&(puts.len() as u32).to_le_bytes());
    for (k, v) in puts {
        r.extend_from_slice(&k.to_le_bytes());
        r.extend_from_slice(&(v.len() as u32).to_le_bytes());
        r.extend_from_slice(v);
    }
    r.extend_from_slice(&(dels.len() as u32).to_le_bytes());
    for k in dels {
        r.extend_from_slice(&k.to_le_bytes());
    }
    r
}

/// Whether a record is one of those a replicated node's log holds besides Raft's: the epoch
/// and the lost-log marks (types 5 to 7 are Raft's: `replica::storage`).
pub(crate) fn is_node_record(r: &[u8]) -> bool {
    matches!(r.first(), Some(1 | 8 | 9))
}

pub(crate) fn changes<'a>(
    first: u64,
    updates: impl Iterator<Item = &'a Update> + Clone,
) -> Vec<u8> {
    let n = updates.clone().count();
    let len: usize = updates.clone().map(update_len).sum();
    let mut r = Vec::with_capacity(13 + len);
    r.push(4);
    r.extend_from_slice(&first.to_le_bytes());
    r.extend_from_slice(&(n as u32).to_le_bytes());
    for u in updates {
        put_update(&mut r, u);
    }
    r
}

/// A cursor over a record's bytes (also the snapshot's state records').
pub(crate) struct Rd<'a>(pub(crate) &'a [u8]);

impl<'a> Rd<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("truncated");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, &'static str> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, &'static str> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes8(&mut self) -> Result<crate::Bytes, &'static str> {
        let n = self.u8()? as usize;
        Ok(crate::Bytes::from_slice(self.take(n)?))
    }
}

/// Parses a record (never panics).
pub(crate) fn decode(b: &[u8]) -> Result<Record, &'static str> {
    let mut r = Rd(b);
    let rec = match r.u8()? {
        1 => Record::Epoch(r.u32()?),
        2 => {
            let n = r.u32()? as usize;
            let mut flows = Vec::with_capacity(n.min(r.0.len() / 4));
            for _ in 0..n {
                let key = r.bytes8()?;
                let node = r.u16()?;
                let value = r.bytes8()?;
                flows.push(Flow { key, node, value });
            }
            Record::Base(flows)
        }
        3 => Record::BaseEnd,
        4 => {
            let first = r.u64()?;
            let n = r.u32()? as usize;
            let mut updates = Vec::with_capacity(n.min(r.0.len() / 5));
            for _ in 0..n {
                let op = match r.u8()? {
                    1 => Op::Insert,
                    2 => Op::Change,
                    3 => Op::Delete,
                    _ => return Err("bad op"),
                };
                let node = r.u16()?;
                let key = r.bytes8()?;
                let value = r.bytes8()?;
                updates.push(Update {
                    op,
                    key,
                    node,
                    value,
                });
            }
            Record::Changes { first, updates }
        }
        8 => Record::Lost,
        9 => Record::Caught(r.u32()?),
        10 => {
            let n = r.u32()? as usize;
            let mut puts = Vec::with_capacity(n.min(r.0.len() / 12));
            for _ in 0..n {
                let k = r.u64()?;
                let len = r.u32()? as usize;
                if len > MAX_STATE_BYTES {
                    return Err("state record too long");
                }
                puts.push((k, r.take(len)?.to_vec()));
            }
            let n = r.u32()? as usize;
            let mut dels = Vec::with_capacity(n.min(r.0.len() / 8));
            for _ in 0..n {
                dels.push(r.u64()?);
            }
            Record::State { puts, dels }
        }
        _ => return Err("unknown record type"),
    };
    if !r.0.is_empty() {
        return Err("trailing bytes");
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let u = Update {
            op: Op::Delete,
            key: crate::Bytes::from_elem(1, 16),
            node: 0,
            value: crate::Bytes::new(),
        };
        let k = [5u8; 16];
        let v = [6u8; 3];
        for (b, want) in [
            (epoch(7), Record::Epoch(7)),
            (
                base(&[(&k, 2, &v)]),
                Record::Base(vec![Flow {
                    key: crate::Bytes::from_slice(&k),
                    node: 2,
                    value: crate::Bytes::from_slice(&v),
                }]),
            ),
            (base_end(), Record::BaseEnd),
            (lost(), Record::Lost),
            (caught(3), Record::Caught(3)),
            (
                state(&[(7, vec![1, 2, 3]), (u64::MAX, vec![])], &[9, 10]),
                Record::State {
                    puts: vec![(7, vec![1, 2, 3]), (u64::MAX, vec![])],
                    dels: vec![9, 10],
                },
            ),
            (
                changes(9, [u.clone()].iter()),
                Record::Changes {
                    first: 9,
                    updates: vec![u],
                },
            ),
        ] {
            assert_eq!(decode(&b), Ok(want));
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err());
            }
        }
    }
}
