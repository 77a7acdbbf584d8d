//! The structures `bench fib` compares, behind one trait, and their concurrent halves for the
//! mixed run.

use sb_common::pages::measure_mappings_holding;
use sb_common::PageInfo;
use sb_cuckoo::{CuckooTable, Params};
use std::sync::Arc;

/// The whole mappings holding up to 256 of `addrs` (element addresses spread over a structure
/// that does not say where its arrays are), measured.
fn pages_holding(addrs: impl Iterator<Item = usize>, len: usize) -> Option<PageInfo> {
    let step = (len / 256).max(1);
    let a: Vec<usize> = addrs.step_by(step).collect();
    if a.is_empty() {
        return None;
    }
    crate::pages::measured(measure_mappings_holding(&a))
}

/// A FIB as the benchmark drives it.
pub trait Fib {
    fn name(&self) -> &'static str;
    /// Inserts a new key; false when the structure is full.
    fn insert(&mut self, k: &[u8], v: &[u8]) -> bool;
    /// Lookups of keys stored back to back; `found[i]` and the value bytes of key `i`.
    fn lookup_batch(&self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize;
    /// Whether `lookup_batch` is a real batched path (else a loop of single lookups).
    fn batched(&self) -> bool;
    fn memory_bytes(&self) -> usize;
    /// Slots, for structures with a fixed number.
    fn capacity(&self) -> Option<usize>;
    /// What backs the structure, measured from `/proc/self/smaps` (`None`: nothing to measure).
    fn pages(&self) -> Option<PageInfo>;
}

/// The writer half of a concurrent FIB.
pub trait FibWriter: Send {
    fn insert(&mut self, k: &[u8], v: &[u8]) -> bool;
    fn remove(&mut self, k: &[u8]) -> bool;
    /// Keys moved by displacements so far, where the structure reports it.
    fn displacements(&self) -> Option<usize> {
        None
    }
}

/// The reader half of a concurrent FIB.
pub trait FibReader: Send {
    fn lookup_batch(&mut self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize;
}

// ---------------------------------------------------------------------------------------------
// Ours.

pub struct Ours {
    pub t: CuckooTable,
    pub single: bool,
}

impl Ours {
    pub fn new(
        kb: usize,
        vb: usize,
        slots: usize,
        spb: usize,
        batch: usize,
    ) -> anyhow::Result<Self> {
        let mut p = Params::new(kb, vb, slots);
        p.slots_per_bucket = spb;
        Ok(Ours {
            t: CuckooTable::new(p)?,
            single: batch == 1,
        })
    }
}

impl Fib for Ours {
    fn name(&self) -> &'static str {
        "scalebricks-cuckoo"
    }
    fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.t.insert(k, v).is_ok()
    }
    fn lookup_batch(&self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
        if self.single {
            let (kb, vb) = (self.t.key_bytes(), self.t.value_bytes());
            let mut hits = 0;
            for (i, f) in found.iter_mut().enumerate() {
                *f = self
                    .t
                    .lookup_into(&keys[i * kb..(i + 1) * kb], &mut vals[i * vb..(i + 1) * vb]);
                hits += *f as usize;
            }
            hits
        } else {
            self.t.lookup_batch(keys, vals, found)
        }
    }
    fn batched(&self) -> bool {
        !self.single
    }
    fn memory_bytes(&self) -> usize {
        self.t.memory_bytes()
    }
    fn capacity(&self) -> Option<usize> {
        Some(self.t.capacity())
    }
    fn pages(&self) -> Option<PageInfo> {
        Some(self.t.page_info())
    }
}

pub struct OursWriter(pub sb_cuckoo::Writer);
pub struct OursReader(pub sb_cuckoo::Reader, pub bool);

impl FibWriter for OursWriter {
    fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.0.insert(k, v).is_ok()
    }
    fn remove(&mut self, k: &[u8]) -> bool {
        self.0.remove(k)
    }
    fn displacements(&self) -> Option<usize> {
        Some(self.0.displacements())
    }
}

impl FibReader for OursReader {
    fn lookup_batch(&mut self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
        if self.1 {
            let (kb, vb) = (self.0.key_bytes(), self.0.value_bytes());
            let mut hits = 0;
            for (i, f) in found.iter_mut().enumerate() {
                *f = self
                    .0
                    .lookup_into(&keys[i * kb..(i + 1) * kb], &mut vals[i * vb..(i + 1) * vb]);
                hits += *f as usize;
            }
            hits
        } else {
            self.0.lookup_batch(keys, vals, found)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DPDK rte_hash.

#[cfg(feature = "dpdk")]
pub mod rte {
    use super::*;
    use sb_peers::dpdk::hash::{RteHash, RteHashReader};

    pub struct Rte {
        pub h: RteHash,
        pub kb: usize,
        pub vb: usize,
        pub single: bool,
    }

    impl Rte {
        pub fn new(kb: usize, vb: usize, entries: usize, batch: usize) -> anyhow::Result<Self> {
            Ok(Rte {
                h: RteHash::new(u32::try_from(entries)?, kb, vb)?,
                kb,
                vb,
                single: batch == 1,
            })
        }
    }

    impl Fib for Rte {
        fn name(&self) -> &'static str {
            "dpdk-rte_hash"
        }
        fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
            self.h.insert(k, v).is_ok()
        }
        fn lookup_batch(&self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
            if self.single {
                let (kb, vb) = (self.kb, self.vb);
                let mut hits = 0;
                for (i, f) in found.iter_mut().enumerate() {
                    *f = self
                        .h
                        .lookup(&keys[i * kb..(i + 1) * kb], &mut vals[i * vb..(i + 1) * vb]);
                    hits += *f as usize;
                }
                hits
            } else {
                self.h.lookup_bulk(keys, vals, found)
            }
        }
        fn batched(&self) -> bool {
            !self.single
        }
        fn memory_bytes(&self) -> usize {
            self.h.memory_bytes()
        }
        fn capacity(&self) -> Option<usize> {
            // rte_hash has align32pow2(entries) / 8 buckets of 8 slots (and `entries` key slots).
            Some((self.h.entries() as usize).next_power_of_two())
        }
        fn pages(&self) -> Option<PageInfo> {
            // DPDK's heap (the table, its key store, values and RCU queue) as DPDK reports it.
            sb_peers::dpdk::memory_pages().ok().map(|p| p.0)
        }
    }

    pub struct RteWriter(pub RteHash);
    /// A reader; with `single` (batch 1) each lookup is one `rte_hash_lookup_data`.
    pub struct RteReader(pub RteHashReader, pub bool);

    impl FibWriter for RteWriter {
        fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
            self.0.insert(k, v).is_ok()
        }
        fn remove(&mut self, k: &[u8]) -> bool {
            self.0.remove(k)
        }
    }

    impl FibReader for RteReader {
        fn lookup_batch(&mut self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
            if self.1 && found.len() == 1 {
                found[0] = self.0.lookup(keys, vals);
                found[0] as usize
            } else {
                self.0.lookup_bulk(keys, vals, found)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// libcuckoo.

#[cfg(feature = "libcuckoo")]
pub mod lc {
    use super::*;
    use sb_peers::libcuckoo::LibCuckoo;

    pub struct Lc(pub Arc<LibCuckoo>);

    impl Fib for Lc {
        fn name(&self) -> &'static str {
            "libcuckoo"
        }
        fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
            self.0.insert(k, v).is_ok()
        }
        fn lookup_batch(&self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
            self.0.lookup_many(keys, vals, found)
        }
        fn batched(&self) -> bool {
            false
        }
        fn memory_bytes(&self) -> usize {
            self.0.memory_bytes()
        }
        fn capacity(&self) -> Option<usize> {
            Some(self.0.capacity())
        }
        fn pages(&self) -> Option<PageInfo> {
            // The shim's large allocations (the bucket array), 2 MB aligned and advised.
            let r = sb_peers::libcuckoo::large_ranges();
            if r.is_empty() {
                return None;
            }
            crate::pages::measured(sb_common::pages::measure_ranges(&r))
        }
    }

    impl FibWriter for Lc {
        fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
            self.0.insert(k, v).is_ok()
        }
        fn remove(&mut self, k: &[u8]) -> bool {
            self.0.remove(k)
        }
    }

    impl FibReader for Lc {
        fn lookup_batch(&mut self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
            self.0.lookup_many(keys, vals, found)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// hashbrown and dashmap with fixed-size array keys and values.

fn map_bytes(cap: usize, entry: usize) -> usize {
    // SwissTable: buckets = next power of two of cap * 8 / 7, one control byte each.
    let buckets = (cap * 8 / 7).next_power_of_two().max(4);
    buckets * (entry + 1) + 16
}

pub struct Hb<const K: usize, const V: usize>(pub hashbrown::HashMap<[u8; K], [u8; V]>);

impl<const K: usize, const V: usize> Fib for Hb<K, V> {
    fn name(&self) -> &'static str {
        "hashbrown"
    }
    fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.0.insert(
            k.try_into().expect("key size"),
            v.try_into().expect("value size"),
        );
        true
    }
    fn lookup_batch(&self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
        let mut hits = 0;
        for ((k, v), f) in keys
            .chunks_exact(K)
            .zip(vals.chunks_exact_mut(V))
            .zip(found.iter_mut())
        {
            let k: &[u8; K] = k.try_into().expect("key size");
            *f = match self.0.get(k) {
                Some(x) => {
                    v.copy_from_slice(x);
                    true
                }
                None => false,
            };
            hits += *f as usize;
        }
        hits
    }
    fn batched(&self) -> bool {
        false
    }
    fn memory_bytes(&self) -> usize {
        map_bytes(self.0.capacity(), K + V)
    }
    fn capacity(&self) -> Option<usize> {
        None
    }
    fn pages(&self) -> Option<PageInfo> {
        pages_holding(
            self.0.iter().map(|(k, _)| k.as_ptr() as usize),
            self.0.len(),
        )
    }
}

pub struct Dm<const K: usize, const V: usize>(pub Arc<dashmap::DashMap<[u8; K], [u8; V]>>);

impl<const K: usize, const V: usize> Dm<K, V> {
    fn get_into(&self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
        let mut hits = 0;
        for ((k, v), f) in keys
            .chunks_exact(K)
            .zip(vals.chunks_exact_mut(V))
            .zip(found.iter_mut())
        {
            let k: &[u8; K] = k.try_into().expect("key size");
            *f = match self.0.get(k) {
                Some(x) => {
                    v.copy_from_slice(&*x);
                    true
                }
                None => false,
            };
            hits += *f as usize;
        }
        hits
    }
}

impl<const K: usize, const V: usize> Fib for Dm<K, V> {
    fn name(&self) -> &'static str {
        "dashmap"
    }
    fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.0.insert(
            k.try_into().expect("key size"),
            v.try_into().expect("value size"),
        );
        true
    }
    fn lookup_batch(&self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
        self.get_into(keys, vals, found)
    }
    fn batched(&self) -> bool {
        false
    }
    fn memory_bytes(&self) -> usize {
        // One SwissTable (RwLock-guarded) per shard.
        let shards =
            (std::thread::available_parallelism().map_or(1, |n| n.get()) * 4).next_power_of_two();
        shards * map_bytes(self.0.capacity() / shards, K + V)
    }
    fn capacity(&self) -> Option<usize> {
        None
    }
    fn pages(&self) -> Option<PageInfo> {
        // Every shard's table: element addresses spread over all of them.
        pages_holding(
            self.0.iter().map(|r| r.key().as_ptr() as usize),
            self.0.len(),
        )
    }
}

impl<const K: usize, const V: usize> FibWriter for Dm<K, V> {
    fn insert(&mut self, k: &[u8], v: &[u8]) -> bool {
        self.0.insert(
            k.try_into().expect("key size"),
            v.try_into().expect("value size"),
        );
        true
    }
    fn remove(&mut self, k: &[u8]) -> bool {
        let k: &[u8; K] = k.try_into().expect("key size");
        self.0.remove(k).is_some()
    }
}

impl<const K: usize, const V: usize> FibReader for Dm<K, V> {
    fn lookup_batch(&mut self, keys: &[u8], vals: &mut [u8], found: &mut [bool]) -> usize {
        self.get_into(keys, vals, found)
    }
}
