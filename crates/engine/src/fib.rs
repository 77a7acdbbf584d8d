//! FIB backends: the exact-match table a node looks flow keys up in. A run-time choice: our
//! cuckoo table ([`sb_cuckoo`]) or DPDK's `rte_hash` (feature `dpdk`).

use sb_common::KeyHash;

/// An exact-match table of fixed-size keys and values, looked up in batches. Each engine owns
/// its handle (workers get their own reader of a shared table).
pub trait Fib: Send {
    /// The backend's name in reports (`cuckoo`, `rte_hash`).
    fn name(&self) -> &'static str;
    /// Key size in bytes.
    fn key_bytes(&self) -> usize;
    /// Value size in bytes.
    fn value_bytes(&self) -> usize;
    /// Entries held.
    fn len(&self) -> usize;
    /// True when empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of memory the table occupies.
    fn memory_bytes(&self) -> usize;
    /// Looks up the keys stored back to back in `keys` (`hashes[i]` is `hash128(key_i, seed)`
    /// with the cluster's seed; backends that hash on their own ignore it); for a hit
    /// `found[i]` is set and the value copied to `values[i * value_bytes..]`. Returns the hits.
    fn lookup_batch(
        &mut self,
        keys: &[u8],
        hashes: &[KeyHash],
        values: &mut [u8],
        found: &mut [bool],
    ) -> usize;
}

/// A cuckoo table holding `entries` (key, value) pairs, sized for a load of about 0.9 (4-slot
/// buckets), hashing with `seed` (the cluster's key-hash seed, so the GPT's hash is reused).
/// Every exact-match table of a node (the FIB, the LTE uplink table) is built this way.
pub fn cuckoo_table<'a>(
    key_bytes: usize,
    value_bytes: usize,
    seed: u64,
    entries: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<sb_cuckoo::CuckooTable, FibError> {
    cuckoo_table_with_room(key_bytes, value_bytes, seed, 0, entries)
}

/// [`cuckoo_table`] sized for at least `room` entries at that load: a table that takes inserts
/// after it is shared (a concurrent table does not grow) needs room for them up front.
pub fn cuckoo_table_with_room<'a>(
    key_bytes: usize,
    value_bytes: usize,
    seed: u64,
    room: usize,
    entries: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
) -> Result<sb_cuckoo::CuckooTable, FibError> {
    let n = entries.len().max(room);
    let mut p = sb_cuckoo::Params::fast(key_bytes, value_bytes, (n * 10 / 9).max(64));
    p.seed = seed;
    p.grow = true;
    let mut t = sb_cuckoo::CuckooTable::new(p).map_err(|e| FibError::Create(e.to_string()))?;
    for (k, v) in entries {
        t.insert(k, v)
            .map_err(|e| FibError::Insert(e.to_string()))?;
    }
    Ok(t)
}

/// Our cuckoo table (a reader: many engines share one table).
pub struct CuckooFib {
    reader: sb_cuckoo::Reader,
}

impl CuckooFib {
    /// Wraps a reader of a table whose seed is the cluster's key-hash seed.
    pub fn new(reader: sb_cuckoo::Reader) -> Self {
        CuckooFib { reader }
    }

    /// The table (for lookups and walks outside the data path).
    pub fn reader(&self) -> &sb_cuckoo::Reader {
        &self.reader
    }

    /// A table holding `entries` (key, value) pairs ([`cuckoo_table`]), with its writer.
    pub fn build<'a>(
        key_bytes: usize,
        value_bytes: usize,
        seed: u64,
        entries: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<(sb_cuckoo::Writer, CuckooFib), FibError> {
        Self::build_with_room(key_bytes, value_bytes, seed, 0, entries)
    }

    /// [`CuckooFib::build`] with room for at least `room` entries (for inserts through the
    /// writer while the engines read: [`cuckoo_table_with_room`]).
    pub fn build_with_room<'a>(
        key_bytes: usize,
        value_bytes: usize,
        seed: u64,
        room: usize,
        entries: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<(sb_cuckoo::Writer, CuckooFib), FibError> {
        let (w, r) =
            cuckoo_table_with_room(key_bytes, value_bytes, seed, room, entries)?.into_concurrent();
        Ok((w, CuckooFib { reader: r }))
    }

    /// Another handle on the same table (for another worker).
    pub fn handle(&self) -> CuckooFib {
        CuckooFib {
            reader: self.reader.clone(),
        }
    }
}

impl Fib for CuckooFib {
    fn name(&self) -> &'static str {
        "cuckoo"
    }
    fn key_bytes(&self) -> usize {
        self.reader.key_bytes()
    }
    fn value_bytes(&self) -> usize {
        self.reader.value_bytes()
    }
    fn len(&self) -> usize {
        self.reader.len()
    }
    fn memory_bytes(&self) -> usize {
        self.reader.memory_bytes()
    }
    #[inline]
    fn lookup_batch(
        &mut self,
        keys: &[u8],
        hashes: &[KeyHash],
        values: &mut [u8],
        found: &mut [bool],
    ) -> usize {
        self.reader.lookup_batch_hashes(keys, hashes, values, found)
    }
}

/// Why a FIB could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FibError {
    /// The backend refused the table's parameters (or, for `rte_hash`, the EAL is not up).
    #[error("creating the FIB: {0}")]
    Create(String),
    /// An entry could not be inserted.
    #[error("filling the FIB: {0}")]
    Insert(String),
}

/// DPDK `rte_hash` (lock-free reader/writer mode) as a FIB: it hashes keys itself (CRC32 or
/// jhash), so the engine's hash is not reused. Start the EAL first
/// ([`sb_peers::dpdk::eal_init`]).
#[cfg(feature = "dpdk")]
pub struct RteHashFib {
    table: std::sync::Arc<sb_peers::dpdk::hash::RteHash>,
    reader: Option<sb_peers::dpdk::hash::RteHashReader>,
    key_bytes: usize,
    value_bytes: usize,
}

#[cfg(feature = "dpdk")]
impl RteHashFib {
    /// A table holding `entries`.
    pub fn build<'a>(
        key_bytes: usize,
        value_bytes: usize,
        entries: impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<RteHashFib, FibError> {
        let n = entries.len();
        let mut t = sb_peers::dpdk::hash::RteHash::new(
            (n as u32).saturating_mul(10) / 9 + 64,
            key_bytes,
            value_bytes,
        )
        .map_err(|e| FibError::Create(e.to_string()))?;
        for (k, v) in entries {
            t.insert(k, v)
                .map_err(|e| FibError::Insert(e.to_string()))?;
        }
        Ok(RteHashFib {
            table: std::sync::Arc::new(t),
            reader: None,
            key_bytes,
            value_bytes,
        })
    }

    /// Another handle on the same table, with its own registered reader (at most 8).
    pub fn handle(&self) -> Result<RteHashFib, FibError> {
        Ok(RteHashFib {
            table: self.table.clone(),
            reader: Some(
                self.table
                    .reader()
                    .map_err(|e| FibError::Create(e.to_string()))?,
            ),
            key_bytes: self.key_bytes,
            value_bytes: self.value_bytes,
        })
    }
}

#[cfg(feature = "dpdk")]
impl Fib for RteHashFib {
    fn name(&self) -> &'static str {
        "rte_hash"
    }
    fn key_bytes(&self) -> usize {
        self.key_bytes
    }
    fn value_bytes(&self) -> usize {
        self.value_bytes
    }
    fn len(&self) -> usize {
        self.table.len()
    }
    fn memory_bytes(&self) -> usize {
        self.table.memory_bytes()
    }
    fn lookup_batch(
        &mut self,
        keys: &[u8],
        _hashes: &[KeyHash],
        values: &mut [u8],
        found: &mut [bool],
    ) -> usize {
        match &mut self.reader {
            Some(r) => r.lookup_bulk(keys, values, found),
            None => self.table.lookup_bulk(keys, values, found),
        }
    }
}
