//! DPDK `rte_hash` in lock-free reader/writer mode (`RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF`),
//! with fixed-size values in a slot pool whose pointer is each key's data, and DPDK's own RCU
//! (QSBR defer queue) recycling key and value slots of deleted keys once readers are done.
//!
//! [`RteHash`] is the owner and only writer (`&mut self`); [`RteHash::reader`] hands out
//! registered readers for other threads, each reporting a quiescent state after every call.
//! Start the EAL first with [`super::eal_init`] or [`super::eal_init_pages`]: the table, its
//! value slots and their free list all sit in its memory (about `112 + value_len + 4` bytes per
//! entry), on the pages the EAL was given.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

extern "C" {
    fn sb_rte_hash_create(entries: u32, key_len: u32, value_len: u32) -> *mut c_void;
    fn sb_rte_hash_free(t: *mut c_void);
    fn sb_rte_hash_memory(t: *const c_void) -> usize;
    fn sb_rte_hash_insert(t: *mut c_void, key: *const u8, value: *const u8) -> i32;
    fn sb_rte_hash_delete(t: *mut c_void, key: *const u8) -> i32;
    fn sb_rte_hash_lookup(t: *const c_void, key: *const u8, out: *mut u8) -> i32;
    fn sb_rte_hash_lookup_bulk(
        t: *const c_void,
        keys: *const u8,
        n: u32,
        values: *mut u8,
        found: *mut u8,
    ) -> u32;
    fn sb_rte_hash_count(t: *const c_void) -> i32;
    fn sb_rte_hash_reader_register(t: *mut c_void, id: u32) -> i32;
    fn sb_rte_hash_reader_quiescent(t: *mut c_void, id: u32);
    fn sb_rte_hash_reader_unregister(t: *mut c_void, id: u32);
}

/// What went wrong with an `rte_hash`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// `rte_hash_create` failed (EAL not started, out of EAL memory, or bad sizes).
    #[error("rte_hash_create failed (entries {entries}, key {key_len} B, value {value_len} B)")]
    Create {
        entries: u32,
        key_len: usize,
        value_len: usize,
    },
    /// A key or value of the wrong size.
    #[error("key or value has the wrong size")]
    Size,
    /// No room for the key.
    #[error("rte_hash is full")]
    Full,
    /// Another error code from DPDK.
    #[error("rte_hash error {0}")]
    Dpdk(i32),
    /// All 8 reader ids are taken.
    #[error("no reader id left (at most 8 readers)")]
    TooManyReaders,
}

struct Raw {
    t: *mut c_void,
    key_len: usize,
    value_len: usize,
    reader_ids: AtomicU32,
}

// SAFETY: the C table is only mutated through `&mut RteHash` (one writer); lookups are safe from
// any thread in RW_CONCURRENCY_LF mode, and readers concurrent with the writer are registered with
// the table's RCU so no value slot is reused while they may read it.
unsafe impl Send for Raw {}
// SAFETY: as above.
unsafe impl Sync for Raw {}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: last reference to the table; no reader or writer remains.
        unsafe { sb_rte_hash_free(self.t) }
    }
}

impl Raw {
    fn lookup(&self, key: &[u8], out: &mut [u8]) -> bool {
        if key.len() != self.key_len || out.len() != self.value_len {
            return false;
        }
        // SAFETY: key/out have the table's sizes; the table is live.
        unsafe { sb_rte_hash_lookup(self.t, key.as_ptr(), out.as_mut_ptr()) == 1 }
    }

    fn lookup_bulk(&self, keys: &[u8], values: &mut [u8], found: &mut [bool]) -> usize {
        let n = keys.len() / self.key_len;
        assert_eq!(keys.len(), n * self.key_len, "keys must be whole keys");
        assert_eq!(values.len(), n * self.value_len, "values buffer size");
        assert_eq!(found.len(), n, "found buffer size");
        // SAFETY: sizes checked above; `bool` has the layout of a `u8` holding 0 or 1, which is
        // all the shim writes.
        unsafe {
            sb_rte_hash_lookup_bulk(
                self.t,
                keys.as_ptr(),
                n as u32,
                values.as_mut_ptr(),
                found.as_mut_ptr() as *mut u8,
            ) as usize
        }
    }
}

/// An `rte_hash` table with fixed-size keys and values; the owner is the one writer.
pub struct RteHash {
    raw: Arc<Raw>,
    entries: u32,
}

impl RteHash {
    /// A table for `entries` keys (DPDK rounds its buckets up to a power of two).
    pub fn new(entries: u32, key_len: usize, value_len: usize) -> Result<Self, HashError> {
        // SAFETY: plain constructor; returns NULL on failure.
        let t = unsafe { sb_rte_hash_create(entries, key_len as u32, value_len as u32) };
        if t.is_null() || key_len == 0 || value_len == 0 {
            return Err(HashError::Create {
                entries,
                key_len,
                value_len,
            });
        }
        Ok(RteHash {
            raw: Arc::new(Raw {
                t,
                key_len,
                value_len,
                reader_ids: AtomicU32::new(0),
            }),
            entries,
        })
    }

    /// The `entries` it was created with.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Inserts a new key (`Ok(true)`), or overwrites the value of a present one (`Ok(false)`;
    /// not atomic for readers).
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, HashError> {
        if key.len() != self.raw.key_len || value.len() != self.raw.value_len {
            return Err(HashError::Size);
        }
        // SAFETY: sizes checked; `&mut self` makes this the only writer.
        match unsafe { sb_rte_hash_insert(self.raw.t, key.as_ptr(), value.as_ptr()) } {
            0 => Ok(true),
            1 => Ok(false),
            r if r == -ENOSPC => Err(HashError::Full),
            r => Err(HashError::Dpdk(r)),
        }
    }

    /// Removes a key; false when absent.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        if key.len() != self.raw.key_len {
            return false;
        }
        // SAFETY: size checked; the only writer.
        unsafe { sb_rte_hash_delete(self.raw.t, key.as_ptr()) == 0 }
    }

    /// `rte_hash_lookup_data`, value copied into `out`.
    pub fn lookup(&self, key: &[u8], out: &mut [u8]) -> bool {
        self.raw.lookup(key, out)
    }

    /// `rte_hash_lookup_bulk_data` over chunks of 64 keys (stored back to back).
    pub fn lookup_bulk(&self, keys: &[u8], values: &mut [u8], found: &mut [bool]) -> usize {
        self.raw.lookup_bulk(keys, values, found)
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        // SAFETY: read-only query of a live table.
        unsafe { sb_rte_hash_count(self.raw.t).max(0) as usize }
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes DPDK allocated for the table and its RCU state, plus the value pool.
    pub fn memory_bytes(&self) -> usize {
        // SAFETY: read-only query of a live table.
        unsafe { sb_rte_hash_memory(self.raw.t) }
    }

    /// A reader for another thread, registered with the table's RCU (at most 8 at a time).
    pub fn reader(&self) -> Result<RteHashReader, HashError> {
        let ids = &self.raw.reader_ids;
        let mut cur = ids.load(Ordering::Relaxed);
        let id = loop {
            let free = (!cur).trailing_zeros();
            if free >= 8 {
                return Err(HashError::TooManyReaders);
            }
            match ids.compare_exchange(cur, cur | 1 << free, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break free,
                Err(now) => cur = now,
            }
        };
        // SAFETY: id < 8 is ours alone; registration is thread-safe in DPDK's QSBR.
        let r = unsafe { sb_rte_hash_reader_register(self.raw.t, id) };
        if r != 0 {
            ids.fetch_and(!(1 << id), Ordering::AcqRel);
            return Err(HashError::Dpdk(r));
        }
        Ok(RteHashReader {
            raw: self.raw.clone(),
            id,
        })
    }
}

/// Linux ENOSPC (rte_hash reports a full table as -ENOSPC).
const ENOSPC: i32 = 28;

/// A registered reader of an [`RteHash`] for one thread: after each lookup call it reports a
/// quiescent state (it holds no value pointer between calls).
pub struct RteHashReader {
    raw: Arc<Raw>,
    id: u32,
}

impl RteHashReader {
    /// As [`RteHash::lookup`].
    pub fn lookup(&mut self, key: &[u8], out: &mut [u8]) -> bool {
        let r = self.raw.lookup(key, out);
        // SAFETY: our registered id; no pointer into the table is held past the call.
        unsafe { sb_rte_hash_reader_quiescent(self.raw.t, self.id) };
        r
    }

    /// As [`RteHash::lookup_bulk`].
    pub fn lookup_bulk(&mut self, keys: &[u8], values: &mut [u8], found: &mut [bool]) -> usize {
        let r = self.raw.lookup_bulk(keys, values, found);
        // SAFETY: as in `lookup`.
        unsafe { sb_rte_hash_reader_quiescent(self.raw.t, self.id) };
        r
    }
}

impl Drop for RteHashReader {
    fn drop(&mut self) {
        // SAFETY: our registered id, unregistered once.
        unsafe { sb_rte_hash_reader_unregister(self.raw.t, self.id) };
        self.raw
            .reader_ids
            .fetch_and(!(1 << self.id), Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_remove_bulk() {
        crate::dpdk::eal_init(256).expect("EAL");
        let mut h = RteHash::new(1024, 13, 16).unwrap();
        for i in 0u32..500 {
            let mut k = [0u8; 13];
            k[..4].copy_from_slice(&i.to_le_bytes());
            assert!(h.insert(&k, &[i as u8; 16]).unwrap());
        }
        assert_eq!(h.len(), 500);
        let mut keys = Vec::new();
        for i in 0u32..1000 {
            let mut k = [0u8; 13];
            k[..4].copy_from_slice(&i.to_le_bytes());
            keys.extend_from_slice(&k);
        }
        let mut vals = vec![0u8; 1000 * 16];
        let mut found = vec![false; 1000];
        assert_eq!(h.lookup_bulk(&keys, &mut vals, &mut found), 500);
        for i in 0..1000 {
            assert_eq!(found[i], i < 500);
            if i < 500 {
                assert_eq!(vals[i * 16..(i + 1) * 16], [i as u8; 16]);
            }
        }
        let mut r = h.reader().unwrap();
        let mut out = [0u8; 16];
        assert!(r.lookup(&keys[..13], &mut out));
        assert!(h.remove(&keys[..13]));
        assert!(!h.lookup(&keys[..13], &mut out));
        assert!(h.memory_bytes() > 1024 * 16);
    }
}
