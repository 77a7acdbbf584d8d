//! The endpoint's set of uplink TEIDs given out.
//!
//! The endpoint hands out TEIDs of its own prefix (`allocator_id << 24`, the low 24 bits from
//! a counter), so a bitmap of those 2^24 TEIDs holds each in a bit, where a hash set of `u32`
//! took 4 bytes and a control byte per TEID at hashbrown's load (8.4 bytes per session at 10M
//! sessions). The bitmap comes in 64 KiB chunks of 2^19 TEIDs, each allocated when the first
//! TEID lands in it: a counter's TEIDs fill one chunk after the other. TEIDs of other prefixes
//! (a session installed with explicit F-TEIDs) go to a hash set.

type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

const LOW_BITS: u32 = 24;
const CHUNK_BITS: u32 = 19;
const CHUNKS: usize = 1 << (LOW_BITS - CHUNK_BITS);
const CHUNK_WORDS: usize = (1 << CHUNK_BITS) / 64;

/// A set of TEIDs, a bitmap for the endpoint's own prefix.
#[derive(Debug)]
pub(crate) struct TeidSet {
    /// The endpoint's prefix: the top 8 bits of its TEIDs.
    prefix: u8,
    /// One bit per TEID of the prefix, by chunk (each allocated at its first TEID).
    chunks: Vec<Option<Box<[u64]>>>,
    /// In `bits`.
    in_bits: usize,
    others: HashSet<u32>,
}

impl TeidSet {
    /// An empty set for an endpoint whose TEIDs start with `prefix`.
    pub(crate) fn new(prefix: u8) -> TeidSet {
        TeidSet {
            prefix,
            chunks: (0..CHUNKS).map(|_| None).collect(),
            in_bits: 0,
            others: HashSet::default(),
        }
    }

    /// Chunk, word and bit of `t`, when it has the prefix.
    fn at(&self, t: u32) -> Option<(usize, usize, u64)> {
        ((t >> LOW_BITS) as u8 == self.prefix).then(|| {
            let low = (t & ((1 << LOW_BITS) - 1)) as usize;
            (
                low >> CHUNK_BITS,
                (low % (1 << CHUNK_BITS)) / 64,
                1u64 << (low % 64),
            )
        })
    }

    fn word(&self, c: usize, w: usize) -> u64 {
        self.chunks[c].as_ref().map_or(0, |x| x[w])
    }

    pub(crate) fn contains(&self, t: u32) -> bool {
        match self.at(t) {
            Some((c, w, b)) => self.word(c, w) & b != 0,
            None => self.others.contains(&t),
        }
    }

    /// Adds `t`; whether it was new.
    pub(crate) fn insert(&mut self, t: u32) -> bool {
        match self.at(t) {
            Some((c, w, b)) => {
                let chunk = self.chunks[c].get_or_insert_with(|| vec![0; CHUNK_WORDS].into());
                let new = chunk[w] & b == 0;
                chunk[w] |= b;
                self.in_bits += usize::from(new);
                new
            }
            None => self.others.insert(t),
        }
    }

    /// Removes `t`; whether it was there.
    pub(crate) fn remove(&mut self, t: u32) -> bool {
        match self.at(t) {
            Some((c, w, b)) => {
                let had = self.word(c, w) & b != 0;
                if let Some(chunk) = self.chunks[c].as_mut().filter(|_| had) {
                    chunk[w] &= !b;
                    self.in_bits -= 1;
                }
                had
            }
            None => self.others.remove(&t),
        }
    }

    /// TEIDs in the set.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.in_bits + self.others.len()
    }

    /// Bytes: the chunks allocated, their index and the other TEIDs' table.
    pub(crate) fn bytes(&self) -> usize {
        self.chunks.iter().flatten().count() * CHUNK_WORDS * 8
            + self.chunks.capacity() * std::mem::size_of::<Option<Box<[u64]>>>()
            + sb_common::hash_table_bytes(self.others.capacity(), std::mem::size_of::<u32>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet as Oracle;

    fn teid() -> impl Strategy<Value = u32> {
        prop_oneof![
            // The endpoint's prefix (7), a few, at both ends of the 24 bits.
            (0u32..6).prop_map(|x| 7 << 24 | x),
            (0u32..3).prop_map(|x| 7 << 24 | (0xff_ffff - x)),
            // Others, including the neighbouring prefixes.
            (0u32..4).prop_map(|x| (6 << 24) | (0xff_ffff - x)),
            (0u32..4).prop_map(|x| 8 << 24 | x),
            any::<u32>(),
        ]
    }

    proptest! {
        /// Any sequence of inserts and removes answers as a HashSet does.
        #[test]
        fn matches_a_hashset(ops in proptest::collection::vec((any::<bool>(), teid()), 0..200)) {
            let mut s = TeidSet::new(7);
            let mut o = Oracle::new();
            for &(add, t) in &ops {
                if add {
                    prop_assert_eq!(s.insert(t), o.insert(t));
                } else {
                    prop_assert_eq!(s.remove(t), o.remove(&t));
                }
                prop_assert_eq!(s.len(), o.len());
            }
            for &(_, t) in &ops {
                prop_assert_eq!(s.contains(t), o.contains(&t));
            }
        }
    }

    #[test]
    fn chunks_come_as_teids_land_in_them() {
        let mut s = TeidSet::new(1);
        let index = s.bytes();
        assert_eq!(index, 32 * 16);
        assert!(!s.contains(1 << 24 | 5));
        assert!(!s.remove(1 << 24 | 5));
        assert_eq!(s.bytes(), index, "a lookup or a removal allocates nothing");
        // A counter's first 2^19 TEIDs: one chunk of 64 KiB.
        for t in 1..(1 << 19) {
            assert!(s.insert(1 << 24 | t));
        }
        assert_eq!(s.bytes(), index + (64 << 10));
        assert!(s.insert(1 << 24 | 1 << 19));
        assert_eq!(s.bytes(), index + (128 << 10));
        assert!(s.contains((1 << 24) | (1 << 19)) && !s.contains((1 << 24) | ((1 << 19) + 1)));
    }
}
