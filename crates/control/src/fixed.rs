//! Maps of fixed-width byte strings for the per-key state of a node: the handler's FIB map
//! and the owner's RIB as its log gives it at boot hold millions of keys, all of the
//! cluster's key and value widths.
//!
//! A [`FixedMap`] keeps its entries back to back in one array (key, then value, no pointers,
//! no per-entry allocation) and its hash table holds only each entry's 4-byte index, so an
//! entry costs its key and value bytes plus about 8 bytes of table at hashbrown's load. A
//! `HashMap<SmallVec<[u8; 16]>, _>` of the same entries took 24 bytes per key and per value
//! (the vectors' own size) plus the table's control byte over the same load: about 96 bytes
//! per RIB entry and 82 per FIB entry for 16-byte keys and values, against 43 and 41 here.
//! Removal moves the last entry into the hole, so the entries stay dense and iteration reads
//! one array in order (deterministic: the same operations give the same order).

use crate::NodeId;
use hashbrown::HashTable;
use std::hash::BuildHasher;

/// A hash map from keys of `key_len` bytes to values of `value_len` bytes.
///
/// Every key and value given must have its map's width: the callers check widths where bytes
/// come from outside (updates, log records, FIB items), and a wrong width here is a bug (it
/// panics).
pub(crate) struct FixedMap {
    key_len: usize,
    width: usize,
    /// Entry indices, hashed by their keys.
    table: HashTable<u32>,
    /// `len() * width` bytes: entry `i` at `i * width`, its key first.
    entries: Vec<u8>,
    hasher: foldhash::fast::FixedState,
}

impl std::fmt::Debug for FixedMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FixedMap")
            .field("key_len", &self.key_len)
            .field("value_len", &(self.width - self.key_len))
            .field("len", &self.len())
            .finish()
    }
}

impl FixedMap {
    /// An empty map with room for `capacity` entries before either of its arrays grows.
    pub(crate) fn with_capacity(key_len: usize, value_len: usize, capacity: usize) -> FixedMap {
        let width = key_len + value_len;
        FixedMap {
            key_len,
            width,
            table: HashTable::with_capacity(capacity),
            entries: Vec::with_capacity(capacity * width),
            hasher: foldhash::fast::FixedState::default(),
        }
    }

    /// Entries in the map.
    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// Entries the map holds before its hash table grows.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Bytes of the map: its hash table (4-byte indices and hashbrown's control bytes, sized
    /// from its capacity: every bucket is touched as entries land at random) and its entries
    /// as held (the array's unused capacity is reserved, not touched).
    pub(crate) fn bytes(&self) -> usize {
        sb_common::hash_table_bytes(self.table.capacity(), std::mem::size_of::<u32>())
            + self.entries.len()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    fn key_of(entries: &[u8], width: usize, key_len: usize, i: u32) -> &[u8] {
        let at = i as usize * width;
        &entries[at..at + key_len]
    }

    /// The index of `key`, whose hash is `h`.
    fn find(&self, h: u64, key: &[u8]) -> Option<u32> {
        let (e, w, kl) = (&self.entries, self.width, self.key_len);
        self.table
            .find(h, |&i| Self::key_of(e, w, kl, i) == key)
            .copied()
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let i = self.find(self.hash(key), key)? as usize * self.width;
        Some(&self.entries[i + self.key_len..i + self.width])
    }

    /// Sets `key`'s value to the concatenation of `parts`; returns whether the key was present.
    pub(crate) fn insert(&mut self, key: &[u8], parts: &[&[u8]]) -> bool {
        assert_eq!(key.len(), self.key_len, "key width");
        assert_eq!(
            parts.iter().map(|p| p.len()).sum::<usize>(),
            self.width - self.key_len,
            "value width"
        );
        let h = self.hash(key);
        let (present, at) = match self.find(h, key) {
            Some(i) => (true, i as usize * self.width + self.key_len),
            None => {
                let i = u32::try_from(self.len()).expect("at most 2^32 entries");
                self.entries.extend_from_slice(key);
                let at = self.entries.len();
                self.entries.resize(at + self.width - self.key_len, 0);
                let (e, w, kl, s) = (&self.entries, self.width, self.key_len, &self.hasher);
                self.table
                    .insert_unique(h, i, |&j| s.hash_one(Self::key_of(e, w, kl, j)));
                (false, at)
            }
        };
        let mut at = at;
        for p in parts {
            self.entries[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        present
    }

    /// Removes `key`; returns whether it was present.
    pub(crate) fn remove(&mut self, key: &[u8]) -> bool {
        let h = self.hash(key);
        let (e, w, kl) = (&self.entries, self.width, self.key_len);
        let Ok(slot) = self
            .table
            .find_entry(h, |&i| Self::key_of(e, w, kl, i) == key)
        else {
            return false;
        };
        let (i, _) = slot.remove();
        // The table has one index fewer: the last entry's is the new length.
        let (last, w) = (self.len() as u32, self.width);
        if i != last {
            // The last entry moves into the hole; its index in the table follows it.
            let lk = Self::key_of(&self.entries, w, self.key_len, last);
            let lh = self.hash(lk);
            let j = self
                .table
                .find_mut(lh, |&j| j == last)
                .expect("every entry is in the table");
            *j = i;
            self.entries
                .copy_within(last as usize * w..(last as usize + 1) * w, i as usize * w);
        }
        self.entries.truncate(last as usize * w);
        true
    }

    /// Every entry (key, value), in the order of the array.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.entries
            .chunks_exact(self.width)
            .map(|e| e.split_at(self.key_len))
    }
}

/// The owner's RIB as read from its log at boot: key -> (handling node, FIB value), a
/// [`FixedMap`] whose values are the node (2 bytes, little-endian) and the FIB value. The
/// owner's table is built from it; afterwards the table's RIB holds the same entries.
#[derive(Debug)]
pub(crate) struct Rib(FixedMap);

impl Rib {
    /// An empty RIB for keys and FIB values of these widths, with room for `capacity` keys.
    pub(crate) fn with_capacity(key_len: usize, value_len: usize, capacity: usize) -> Rib {
        Rib(FixedMap::with_capacity(key_len, 2 + value_len, capacity))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Keys the RIB holds before its hash table grows.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// `key`'s entry (handling node, value).
    pub(crate) fn get(&self, key: &[u8]) -> Option<(NodeId, &[u8])> {
        self.0.get(key).map(split_node)
    }

    /// Sets `key`'s entry; returns whether the key was present.
    pub(crate) fn insert(&mut self, key: &[u8], node: NodeId, value: &[u8]) -> bool {
        self.0.insert(key, &[&node.to_le_bytes(), value])
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> bool {
        self.0.remove(key)
    }

    /// Every entry (key, handling node, value).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], NodeId, &[u8])> + '_ {
        self.0.iter().map(|(k, v)| {
            let (n, v) = split_node(v);
            (k, n, v)
        })
    }
}

fn split_node(v: &[u8]) -> (NodeId, &[u8]) {
    (NodeId::from_le_bytes([v[0], v[1]]), &v[2..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, u8),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k % 64, v)),
            any::<u8>().prop_map(|k| Op::Remove(k % 64)),
        ]
    }

    fn key(k: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| k.wrapping_mul(31).wrapping_add(i as u8))
            .collect()
    }

    proptest! {
        /// The map agrees with a `HashMap` after every operation: lookups of every key that
        /// was ever used, the length, and the whole content by iteration. Small keys (64 of
        /// them) and a small starting capacity, so removals hit, move the last entry, and the
        /// table grows.
        #[test]
        fn agrees_with_a_hashmap(
            ops in proptest::collection::vec(op(), 1..400),
            key_len in 1usize..20,
            value_len in 0usize..20,
            capacity in 0usize..8,
        ) {
            let mut m = FixedMap::with_capacity(key_len, value_len, capacity);
            let mut oracle: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let (k, v) = (key(k, key_len), vec![v; value_len]);
                        // The value in two parts, as the RIB gives it.
                        let cut = value_len / 2;
                        let had = m.insert(&k, &[&v[..cut], &v[cut..]]);
                        prop_assert_eq!(had, oracle.insert(k, v).is_some());
                    }
                    Op::Remove(k) => {
                        let k = key(k, key_len);
                        prop_assert_eq!(m.remove(&k), oracle.remove(&k).is_some());
                    }
                }
                prop_assert_eq!(m.len(), oracle.len());
                for k in 0..64 {
                    let k = key(k, key_len);
                    prop_assert_eq!(m.get(&k), oracle.get(&k).map(|v| v.as_slice()));
                }
                let mut all: Vec<(Vec<u8>, Vec<u8>)> =
                    m.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
                all.sort();
                let mut want: Vec<(Vec<u8>, Vec<u8>)> = oracle.clone().into_iter().collect();
                want.sort();
                prop_assert_eq!(all, want);
            }
        }
    }

    #[test]
    fn the_rib_keeps_the_node_with_the_value() {
        let mut r = Rib::with_capacity(4, 3, 2);
        assert!(!r.insert(&[1; 4], 0x1234, &[7, 8, 9]));
        assert!(!r.insert(&[2; 4], 3, &[1, 1, 1]));
        assert_eq!(r.get(&[1; 4]), Some((0x1234, &[7u8, 8, 9][..])));
        assert!(r.insert(&[1; 4], 5, &[0, 0, 0]));
        assert_eq!(r.get(&[1; 4]), Some((5, &[0u8, 0, 0][..])));
        assert!(r.remove(&[2; 4]));
        assert!(!r.remove(&[2; 4]));
        assert_eq!(r.len(), 1);
        let all: Vec<_> = r.iter().collect();
        assert_eq!(all, vec![(&[1u8; 4][..], 5, &[0u8, 0, 0][..])]);
    }

    #[test]
    #[should_panic(expected = "value width")]
    fn a_value_of_another_width_is_a_bug() {
        FixedMap::with_capacity(2, 2, 0).insert(&[1, 2], &[&[1]]);
    }
}
