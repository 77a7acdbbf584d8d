//! A range's PFCP state records as a node keeps them in memory: each as its differences from
//! the first record of its length ([`sb_common::shapes`]).
//!
//! Every replica of a range holds the range's records ([`crate::Node::replica_state`]), and
//! the home its own ([`crate::Node::own_state`]): at replication factor 3, each node holds
//! three ranges' records. An open5gs session's record is ~700 bytes, and two records of one
//! SMF's sessions differ in a few dozen of them (the SEIDs, the TEIDs, the UE address), so a
//! record is kept as those differences; the templates (at most 255, one per length) are never
//! removed.
//!
//! A snapshot carries them in the same form ([`StateRecords::to_bytes`]: tag byte `0x5c`, the
//! template count u16 and each template as length u32 and its bytes, the record count u64 and
//! each record as key u64, length u32 and its kept bytes; little-endian), so a range's snapshot
//! held by the storage adapter is as compact as the map.

use crate::record::{Rd, MAX_STATE_BYTES};
use sb_common::shapes::{Shapes, MAX_TEMPLATES};
use std::collections::BTreeMap;

/// The first byte of [`StateRecords::to_bytes`] (a state log record's is 10).
pub(crate) const TAG: u8 = 0x5c;

/// A map from a record's key to its bytes, kept compact (see the module docs).
#[derive(Debug, Default)]
pub struct StateRecords {
    kept: BTreeMap<u64, Box<[u8]>>,
    shapes: Shapes,
    /// The kept forms' bytes, summed as they come and go ([`StateRecords::kept_bytes`] is
    /// read with every status, every 200 ms, over millions of records).
    kept_len: usize,
}

impl StateRecords {
    /// An empty map.
    pub fn new() -> StateRecords {
        StateRecords::default()
    }

    /// Keeps `record` under `key` (replacing the one it had).
    pub fn insert(&mut self, key: u64, record: &[u8]) {
        let kept = self.shapes.encode(record);
        self.kept_len += kept.len();
        if let Some(old) = self.kept.insert(key, kept) {
            self.kept_len -= old.len();
        }
    }

    /// Removes `key`'s record; whether there was one.
    pub fn remove(&mut self, key: u64) -> bool {
        let old = self.kept.remove(&key);
        self.kept_len -= old.as_ref().map_or(0, |v| v.len());
        old.is_some()
    }

    /// `key`'s record.
    pub fn get(&self, key: u64) -> Option<Vec<u8>> {
        self.kept.get(&key).map(|k| self.decode(k))
    }

    /// The records, in key order, each decoded when it is reached.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Vec<u8>)> + '_ {
        self.kept.iter().map(|(k, v)| (*k, self.decode(v)))
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.kept.keys().copied()
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The records as a plain map (for checks and tests).
    pub fn to_map(&self) -> BTreeMap<u64, Vec<u8>> {
        self.iter().collect()
    }

    /// Bytes the records are kept in: their kept forms and the templates (not the map's own
    /// nodes, nor malloc's rounding).
    pub fn kept_bytes(&self) -> usize {
        self.kept_len + self.shapes.bytes()
    }

    fn decode(&self, kept: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.shapes
            .decode(kept, &mut out)
            .expect("a kept record decodes with the shapes that encoded it");
        out
    }

    /// The records in the snapshot form (see the module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut r = vec![TAG];
        let templates: Vec<&[u8]> = self.shapes.templates().collect();
        r.extend_from_slice(&(templates.len() as u16).to_le_bytes());
        for t in templates {
            r.extend_from_slice(&(t.len() as u32).to_le_bytes());
            r.extend_from_slice(t);
        }
        r.extend_from_slice(&(self.kept.len() as u64).to_le_bytes());
        for (k, v) in &self.kept {
            r.extend_from_slice(&k.to_le_bytes());
            r.extend_from_slice(&(v.len() as u32).to_le_bytes());
            r.extend_from_slice(v);
        }
        r
    }

    /// Parses [`StateRecords::to_bytes`]'s form (never panics): every record must decode
    /// against the templates and be at most 64 KiB long (the most [`crate::Node::put_state`]
    /// takes), and each key come once.
    pub fn from_bytes(b: &[u8]) -> Result<StateRecords, &'static str> {
        let mut r = Rd(b);
        if r.u8()? != TAG {
            return Err("no state records");
        }
        let nt = r.u16()? as usize;
        if nt > MAX_TEMPLATES {
            return Err("too many state record templates");
        }
        let mut templates = Vec::with_capacity(nt);
        for _ in 0..nt {
            let len = r.u32()? as usize;
            if len > MAX_STATE_BYTES {
                return Err("state record template too long");
            }
            templates.push(Box::from(r.take(len)?));
        }
        let shapes = Shapes::from_templates(templates).ok_or("two templates of one length")?;
        let n = r.u64()?;
        let mut kept = BTreeMap::new();
        let mut kept_len = 0;
        let mut out = Vec::new();
        for _ in 0..n {
            let key = r.u64()?;
            let len = r.u32()? as usize;
            let v = r.take(len)?;
            out.clear();
            shapes
                .decode(v, &mut out)
                .ok_or("a state record that does not decode")?;
            if out.len() > MAX_STATE_BYTES {
                return Err("state record too long");
            }
            if kept.insert(key, Box::from(v)).is_some() {
                return Err("a state record's key given twice");
            }
            kept_len += len;
        }
        if !r.0.is_empty() {
            return Err("trailing bytes after the state records");
        }
        Ok(StateRecords {
            kept,
            shapes,
            kept_len,
        })
    }
}

/// Equal when they hold the same records (however each keeps them).
impl PartialEq for StateRecords {
    fn eq(&self, other: &StateRecords) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for StateRecords {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ops() -> impl Strategy<Value = Vec<(u64, Option<Vec<u8>>)>> {
        // Few keys (so puts replace and removals hit), records of a few shapes: a template's
        // near copies and some of any bytes.
        let rec = prop_oneof![
            (
                0u8..4,
                proptest::collection::vec((0usize..64, any::<u8>()), 0..4)
            )
                .prop_map(|(shape, edits)| {
                    let mut r = vec![shape; 40 + 8 * shape as usize];
                    for (i, b) in edits {
                        let n = r.len();
                        r[i % n] = b;
                    }
                    r
                }),
            proptest::collection::vec(any::<u8>(), 0..80),
        ];
        proptest::collection::vec((0u64..24, proptest::option::weighted(0.8, rec)), 0..120)
    }

    proptest! {
        /// Against a `BTreeMap` oracle: every get, the iteration, the count, and the snapshot
        /// form read back into an equal map.
        #[test]
        fn records_match_a_map(ops in ops()) {
            let mut m = StateRecords::new();
            let mut oracle: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            for (k, r) in ops {
                match r {
                    Some(r) => {
                        m.insert(k, &r);
                        oracle.insert(k, r);
                    }
                    None => prop_assert_eq!(m.remove(k), oracle.remove(&k).is_some()),
                }
                prop_assert_eq!(m.get(k), oracle.get(&k).cloned());
            }
            prop_assert_eq!(m.len(), oracle.len());
            prop_assert_eq!(
                m.kept_bytes(),
                m.kept.values().map(|v| v.len()).sum::<usize>() + m.shapes.bytes()
            );
            prop_assert_eq!(m.to_map(), oracle.clone());
            let back = StateRecords::from_bytes(&m.to_bytes()).unwrap();
            prop_assert_eq!(back.to_map(), oracle);
            prop_assert!(back == m);
        }

        /// Any bytes as the snapshot form: parsed or refused, never a panic.
        #[test]
        fn any_bytes_parse_or_fail(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut b = b;
            if let Some(x) = b.first_mut() {
                *x = TAG;
            }
            if let Ok(m) = StateRecords::from_bytes(&b) {
                // What parsed reads back.
                let _ = m.to_map();
            }
        }
    }

    #[test]
    fn near_copies_are_kept_small() {
        let mut m = StateRecords::new();
        let rec = |i: u32| {
            let mut r = vec![7u8; 700];
            r[100..104].copy_from_slice(&i.to_le_bytes());
            r[400..404].copy_from_slice(&(i * 3).to_le_bytes());
            r
        };
        for i in 0..1000 {
            m.insert(u64::from(i), &rec(i));
        }
        assert_eq!(m.get(17), Some(rec(17)));
        // 1000 records of 700 bytes: the template, then about a dozen bytes each.
        assert!(m.kept_bytes() < 700 + 1000 * 16, "{}", m.kept_bytes());
        let b = m.to_bytes();
        assert!(b.len() < 700 + 1000 * 30, "{}", b.len());
    }

    #[test]
    fn bad_forms_are_refused() {
        let mut m = StateRecords::new();
        m.insert(1, &[1, 2, 3]);
        m.insert(2, &[1, 2, 4]);
        let b = m.to_bytes();
        for cut in 0..b.len() {
            assert!(StateRecords::from_bytes(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(StateRecords::from_bytes(&long).is_err());
        // The second record's key made the first's.
        let mut twice = b.clone();
        let second_key_at = b.len() - (8 + 4 + 3);
        twice[second_key_at..second_key_at + 8].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(
            StateRecords::from_bytes(&twice).err(),
            Some("a state record's key given twice")
        );
    }
}
