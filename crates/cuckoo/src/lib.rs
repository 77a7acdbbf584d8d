//! The partial FIB: a concurrent cuckoo hash table with a separate value array (one writer,
//! lock-free readers).
//!
//! Each ScaleBricks node keeps the FIB entries it handles in this table (paper sec. 5.2). It is
//! the CuckooSwitch/MemC3 design -- set-associative buckets of 4 or 8 slots whose metadata fits a
//! cache line, 15-bit partial-key tags, two candidate buckets per key with the alternate derived
//! from the tag, a bounded BFS for a short displacement path, optimistic version counters so
//! readers take no lock -- with the ScaleBricks twist that values live in a separate array indexed
//! by slot number, so key and value sizes are chosen at run time (keys 4..=64 bytes, values
//! 1..=256 bytes).
//!
//! ```
//! use sb_cuckoo::{CuckooTable, Params};
//!
//! let mut t = CuckooTable::new(Params::new(13, 16, 1000)).unwrap();
//! t.insert(b"flow-key-0001", &[7u8; 16]).unwrap();
//! assert_eq!(t.lookup(b"flow-key-0001"), Some(vec![7u8; 16]));
//!
//! // Batched lookups: keys back to back, values copied into one buffer.
//! let keys = [*b"flow-key-0001", *b"flow-key-0002"].concat();
//! let (mut vals, mut found) = (vec![0u8; 32], vec![false; 2]);
//! assert_eq!(t.lookup_batch(&keys, &mut vals, &mut found), 1);
//! assert_eq!(found, [true, false]);
//!
//! // One writer, any number of lock-free readers on other threads.
//! let (mut writer, reader) = t.into_concurrent();
//! let r = std::thread::spawn(move || reader.lookup(b"flow-key-0001"));
//! writer.insert(b"flow-key-0002", &[8u8; 16]).unwrap();
//! assert_eq!(r.join().unwrap(), Some(vec![7u8; 16]));
//! ```
//!
//! # Cost model
//! - Memory per slot: `16/S` bytes of bucket metadata for 4-slot buckets (`32/8` for 8-slot),
//!   `8 * ceil(key_bytes / 8)` for the key and `8 * ceil(value_bytes / 8)` for the value; divide
//!   by the load factor for bytes per entry (13-byte keys, 16-byte values, 8 slots, load 0.9:
//!   36 bytes/slot, 40 bytes/entry). Arrays of 2 MB or more are advised for 2 MB pages.
//! - A lookup touches one bucket line, one key line and one value line when the key is in its
//!   primary bucket; a miss touches only the primary bucket's line unless some key of that bucket
//!   was displaced to its alternate (the bucket's overflow count, as in Horton tables), then the
//!   alternate's too. The batched form overlaps those misses across [`batch::CHUNK`] keys.
//! - Instructions (13-byte keys, 16-byte values, 4 slots, table in cache; counted with
//!   `valgrind --tool=callgrind` on `examples/lookupcost.rs`, instructions per lookup = the
//!   difference of `lookupcost MODE 120` and `lookupcost MODE 20` over 102,400 lookups): about
//!   131 per batched miss, 240 per batched hit, 193 per single miss and 207 per single hit, of
//!   which the key hash (`sb_common::hash128`, inlined, with the key loads) is about 36. The
//!   flood-resistant hash (crossed multiply-folds before the final multiplies) cost 5.5%,
//!   2.8%, 2.2% and 2.0% more than the first multiply-fold hash (124, 233, 189, 203; 32 in the
//!   hash).
//!   The lookup paths run on a register-held view of the table specialized for 4/8 slots and
//!   1/2 key words.
//! - Insert: two bucket reads when a candidate has room; otherwise a BFS over at most
//!   `max_bfs_buckets` buckets and `max_path` moves. With random keys the table fills to about
//!   0.97 (4 slots: 0.972 of 2^20 slots, 0.970 of 2^24) / 0.995 (8 slots, 2^20) before the
//!   first failed insert (docs/bench/fib.md: `cargo run --release -p sb-cuckoo --example
//!   maxload -- 1048576 4` and `... 8`, and `scalebricks bench fib ... --max-load`; the
//!   example re-run on 2026-11-23 after the key-hash rework printed 0.9735 and 0.9940).
//! - Readers never block; a reader retries a lookup only if the writer changed one of its two
//!   buckets meanwhile. See [`table`] for the protocol and its memory-ordering argument.

pub mod batch;
mod prefetch;
mod storage;
mod sync;
pub mod table;

pub use table::{Candidates, Iter, Shared};

use crate::sync::Arc;
use std::ops::Deref;

/// How a table is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Key size in bytes, 4..=64.
    pub key_bytes: usize,
    /// Value size in bytes, 1..=256.
    pub value_bytes: usize,
    /// Slots wanted (the table has `ceil(capacity / slots_per_bucket)` buckets).
    pub capacity: usize,
    /// Slots per bucket: 4 or 8.
    pub slots_per_bucket: usize,
    /// Hash seed: keys are hashed with `sb_common::hash128(key, seed)`. [`Params::new`] draws
    /// it from the OS ([`sb_common::random_seed`]), so nobody outside the process can craft
    /// keys that crowd one bucket; set it ([`Params::with_seed`]) for a reproducible table, or
    /// to the GPT's seed so a hash computed for the GPT lookup serves the FIB lookup too.
    pub seed: u64,
    /// Longest displacement path (moves), 1..=8.
    pub max_path: usize,
    /// Most buckets one BFS visits.
    pub max_bfs_buckets: usize,
    /// Whether [`CuckooTable::insert`] doubles the table when an insert finds no room (the
    /// concurrent [`Writer`] never grows: it reports [`InsertError::Full`]). Growth is bounded:
    /// see [`InsertError::Crowded`] and [`Params::max_capacity`].
    pub grow: bool,
    /// Most slots growth may reach (a bound on memory); a table that would have to grow past
    /// it reports [`InsertError::GrowthLimit`]. [`Params::new`]: 2^40, the largest capacity.
    pub max_capacity: usize,
}

/// Below this load factor a failed insert does not grow the table: keys crowd a few buckets
/// far beyond chance (about 0.97 of the slots with 4-slot buckets, 0.995 with 8, fill before the
/// first failure with random hashes), so doubling would not help.
pub const MIN_GROW_LOAD: f64 = 0.5;

/// Tables of fewer slots may grow at any load (a few buckets fill unevenly by chance).
const MIN_GROW_CHECK_SLOTS: usize = 1024;

impl Params {
    /// 8-slot buckets, a random seed from the OS ([`sb_common::random_seed`]), paths up to 5
    /// moves, BFS over up to 2048 buckets, no growth.
    pub fn new(key_bytes: usize, value_bytes: usize, capacity: usize) -> Self {
        Params {
            key_bytes,
            value_bytes,
            capacity,
            slots_per_bucket: 8,
            seed: sb_common::random_seed(),
            max_path: 5,
            max_bfs_buckets: 2048,
            grow: false,
            max_capacity: 1 << 40,
        }
    }

    /// The same parameters with an explicit hash seed: for reproducible tables (tests,
    /// benchmarks) and for a FIB that shares the GPT's hash.
    pub fn with_seed(self, seed: u64) -> Self {
        Params { seed, ..self }
    }

    /// Number of buckets a table with these parameters has.
    pub fn buckets(&self) -> usize {
        self.capacity.div_ceil(self.slots_per_bucket).max(1)
    }

    /// Where `key` goes in a table with these parameters (no table needed: tests use it to build
    /// keys that collide on purpose).
    pub fn candidates(&self, key: &[u8]) -> Candidates {
        table::candidates(self.buckets(), sb_common::hash128(key, self.seed))
    }

    /// 4-slot buckets: the fastest lookups (one tag word per bucket, a bucket's keys and values
    /// each in one cache line for keys and values up to 16 bytes); fills to about 0.97 (0.972
    /// measured at 2^20 slots, docs/bench/fib.md).
    pub fn fast(key_bytes: usize, value_bytes: usize, capacity: usize) -> Self {
        Params {
            slots_per_bucket: 4,
            ..Params::new(key_bytes, value_bytes, capacity)
        }
    }

    /// 8-slot buckets (the default of [`Params::new`]): fills to about 0.995 (measured at 2^20
    /// slots, docs/bench/fib.md), lookups a little
    /// slower than [`Params::fast`].
    pub fn compact(key_bytes: usize, value_bytes: usize, capacity: usize) -> Self {
        Params::new(key_bytes, value_bytes, capacity)
    }

    fn validate(&self) -> Result<(), ParamsError> {
        if !(4..=64).contains(&self.key_bytes) {
            return Err(ParamsError::KeyBytes(self.key_bytes));
        }
        if !(1..=256).contains(&self.value_bytes) {
            return Err(ParamsError::ValueBytes(self.value_bytes));
        }
        if self.slots_per_bucket != 4 && self.slots_per_bucket != 8 {
            return Err(ParamsError::SlotsPerBucket(self.slots_per_bucket));
        }
        if self.capacity == 0 || self.capacity > (1usize << 40) {
            return Err(ParamsError::Capacity(self.capacity));
        }
        if !(1..=table::MAX_PATH).contains(&self.max_path) {
            return Err(ParamsError::MaxPath(self.max_path));
        }
        Ok(())
    }
}

/// Why a table could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    /// Keys must be 4..=64 bytes.
    #[error("key size {0} bytes is outside 4..=64")]
    KeyBytes(usize),
    /// Values must be 1..=256 bytes.
    #[error("value size {0} bytes is outside 1..=256")]
    ValueBytes(usize),
    /// Buckets have 4 or 8 slots.
    #[error("{0} slots per bucket: must be 4 or 8")]
    SlotsPerBucket(usize),
    /// Capacity must be 1..=2^40 slots.
    #[error("capacity {0} is outside 1..=2^40")]
    Capacity(usize),
    /// The displacement path bound must be 1..=8.
    #[error("max_path {0} is outside 1..=8")]
    MaxPath(usize),
}

/// Why an insert or update did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InsertError {
    /// The key has the wrong size.
    #[error("key is {got} bytes, the table's keys are {expected}")]
    KeyLength { expected: usize, got: usize },
    /// The value has the wrong size.
    #[error("value is {got} bytes, the table's values are {expected}")]
    ValueLength { expected: usize, got: usize },
    /// No displacement path within the BFS bounds: the key was not inserted (the table is
    /// unchanged apart from keys moved between their two buckets).
    #[error("table full: no room for the key ({len} keys in {capacity} slots)")]
    Full { len: usize, capacity: usize },
    /// A growing table ([`Params::grow`]) found no room although it is less than
    /// [`MIN_GROW_LOAD`] full: keys crowd a few buckets far beyond chance (keys crafted by
    /// someone who knows the seed, or a seed shared with an attacker), so the table does not
    /// double (it would double for ever). The key was not inserted; the table is unchanged
    /// apart from keys moved between their two buckets.
    #[error(
        "{len} keys crowd a {capacity}-slot table that is less than half full: not growing \
         (keys crafted against the hash seed?)"
    )]
    Crowded { len: usize, capacity: usize },
    /// A growing table would have to grow past [`Params::max_capacity`]. The key was not
    /// inserted; the table is unchanged apart from keys moved between their two buckets.
    #[error("table full at {capacity} slots: growing would pass max_capacity {max_capacity}")]
    GrowthLimit {
        capacity: usize,
        max_capacity: usize,
    },
}

/// A table with a single owner: the simple API for single-threaded use (and the only handle that
/// can grow). [`CuckooTable::into_concurrent`] splits it into one [`Writer`] and [`Reader`]s.
/// Lookups and stats come from [`Shared`] through `Deref`.
pub struct CuckooTable {
    t: Shared,
    nodes: Vec<table::Node>,
}

impl std::fmt::Debug for CuckooTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.t.fmt(f)
    }
}

impl CuckooTable {
    /// An empty table.
    pub fn new(params: Params) -> Result<Self, ParamsError> {
        Ok(CuckooTable {
            t: Shared::new(params)?,
            nodes: Vec::new(),
        })
    }

    /// Inserts `key -> value`, or overwrites the value when `key` is present. `Ok(true)` when the
    /// key is new. With `params.grow`, a full table doubles (rehash) instead of failing, unless
    /// it is less than [`MIN_GROW_LOAD`] full ([`InsertError::Crowded`]) or would pass
    /// `params.max_capacity` ([`InsertError::GrowthLimit`]).
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, InsertError> {
        loop {
            match self.t.insert(key, value, &mut self.nodes) {
                Err(InsertError::Full { .. }) if self.t.params().grow => self.grow()?,
                r => return r,
            }
        }
    }

    /// Doubles the capacity, re-inserting every key (doubling again if a re-insert fails).
    /// Refuses, leaving the table as it was, when the table is less than [`MIN_GROW_LOAD`]
    /// full or a re-insert fails in a table less than that full ([`InsertError::Crowded`]),
    /// and when the capacity would pass `params.max_capacity` ([`InsertError::GrowthLimit`]).
    pub fn grow(&mut self) -> Result<(), InsertError> {
        let crowded = |len: usize, capacity: usize| {
            capacity >= MIN_GROW_CHECK_SLOTS && (len as f64) < MIN_GROW_LOAD * capacity as f64
        };
        let (len, capacity) = (self.t.len(), self.t.capacity());
        if crowded(len, capacity) {
            return Err(InsertError::Crowded { len, capacity });
        }
        let max_capacity = self.t.params().max_capacity;
        let mut cap = capacity * 2;
        loop {
            if cap > max_capacity {
                return Err(InsertError::GrowthLimit {
                    capacity,
                    max_capacity,
                });
            }
            let mut p = *self.t.params();
            p.capacity = cap;
            let bigger = Shared::new(p).expect("params were valid at half the capacity");
            let mut ok = true;
            self.t.for_each(|k, v| {
                if ok && bigger.insert(k, v, &mut self.nodes).is_err() {
                    ok = false;
                }
            });
            if ok {
                self.t = bigger;
                return Ok(());
            }
            if crowded(bigger.len(), bigger.capacity()) {
                return Err(InsertError::Crowded {
                    len: bigger.len(),
                    capacity: bigger.capacity(),
                });
            }
            cap *= 2;
        }
    }

    /// Overwrites the value of `key` in place; `Ok(false)` when the key is absent.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, InsertError> {
        self.t.update(key, value)
    }

    /// Removes `key`; false when absent (or of the wrong size).
    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.t.remove(key)
    }

    /// Splits the table into its one writer and a reader (clone the reader for more threads).
    pub fn into_concurrent(self) -> (Writer, Reader) {
        let t = Arc::new(self.t);
        (
            Writer {
                t: t.clone(),
                nodes: self.nodes,
            },
            Reader { t },
        )
    }
}

impl Deref for CuckooTable {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.t
    }
}

/// The one writer of a concurrent table. Not `Clone`: changes take `&mut self`, so there is
/// exactly one writer. Lookups through `Deref` see the writer's own changes.
pub struct Writer {
    t: Arc<Shared>,
    nodes: Vec<table::Node>,
}

impl Writer {
    /// As [`CuckooTable::insert`], but never grows: a full table is [`InsertError::Full`].
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, InsertError> {
        self.t.insert(key, value, &mut self.nodes)
    }

    /// As [`CuckooTable::update`].
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, InsertError> {
        self.t.update(key, value)
    }

    /// As [`CuckooTable::remove`].
    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.t.remove(key)
    }

    /// Another reader.
    pub fn reader(&self) -> Reader {
        Reader { t: self.t.clone() }
    }
}

impl Deref for Writer {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.t
    }
}

/// A lock-free reader of a concurrent table (`Send + Sync`, cheap to clone). All lookups come from
/// [`Shared`] through `Deref`.
#[derive(Clone)]
pub struct Reader {
    t: Arc<Shared>,
}

impl Deref for Reader {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.t
    }
}
