//! libcuckoo's `cuckoohash_map` (Debian `libcuckoo-dev`) with fixed-size byte-array keys and
//! values, through `csrc/libcuckoo_shim.cpp`. Supported sizes: keys of 4, 13, 16 or 40 bytes,
//! values of 8, 16 or 64 bytes (one C++ instantiation each). libcuckoo is fully concurrent
//! (fine-grained bucket locks), so every method takes `&self`.
//!
//! The shim gives the map an allocator that puts every allocation of 2 MB or more (the bucket
//! array) in its own 2 MB-aligned mapping advised `MADV_HUGEPAGE`, as `sb_common::HugeArray`
//! does for our tables, or `MADV_NOHUGEPAGE` when `sb_common::huge::huge_advice()` is off at
//! [`LibCuckoo::new`] (the benchmarks' 4 KB control); [`large_ranges`] lists those mappings so
//! their pages can be measured. The hasher is `std::hash` of the key bytes (libstdc++'s
//! `_Hash_bytes`), and [`LibCuckoo::lookup_many`] is one call per batch into a loop compiled
//! inside the map's template.
#![allow(unsafe_code)]

use std::ffi::c_void;

extern "C" {
    fn sb_lc_create(
        key_len: usize,
        value_len: usize,
        n: usize,
        fixed: i32,
        huge: i32,
    ) -> *mut c_void;
    fn sb_lc_free(t: *mut c_void);
    fn sb_lc_insert(t: *mut c_void, k: *const u8, v: *const u8) -> i32;
    fn sb_lc_erase(t: *mut c_void, k: *const u8) -> i32;
    fn sb_lc_find(t: *const c_void, k: *const u8, out: *mut u8) -> i32;
    fn sb_lc_find_many(
        t: *const c_void,
        keys: *const u8,
        n: usize,
        values: *mut u8,
        found: *mut u8,
    ) -> usize;
    fn sb_lc_large_ranges(addr: *mut usize, len: *mut usize, max: usize) -> usize;
    fn sb_lc_size(t: *const c_void) -> usize;
    fn sb_lc_capacity(t: *const c_void) -> usize;
    fn sb_lc_memory(t: *const c_void) -> usize;
}

/// Why a libcuckoo call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LibCuckooError {
    /// No instantiation for this key/value size pair.
    #[error(
        "libcuckoo shim has no instantiation for {key_len}-byte keys and {value_len}-byte values"
    )]
    Unsupported { key_len: usize, value_len: usize },
    /// Key or value of the wrong size.
    #[error("key or value has the wrong size")]
    Size,
    /// A fixed-size table has no room for the key.
    #[error("libcuckoo table is full")]
    Full,
}

/// A libcuckoo map from `key_len`-byte keys to `value_len`-byte values.
pub struct LibCuckoo {
    t: *mut c_void,
    key_len: usize,
    value_len: usize,
}

// SAFETY: cuckoohash_map is a concurrent map: every operation is thread-safe.
unsafe impl Send for LibCuckoo {}
// SAFETY: as above.
unsafe impl Sync for LibCuckoo {}

impl Drop for LibCuckoo {
    fn drop(&mut self) {
        // SAFETY: created by sb_lc_create, freed once.
        unsafe { sb_lc_free(self.t) }
    }
}

impl LibCuckoo {
    /// A map sized for `n` keys. With `fixed`, it never grows: an insert that would need a
    /// bigger table fails with [`LibCuckooError::Full`] (libcuckoo rounds its buckets up to a
    /// power of two, 4 slots each).
    pub fn new(
        key_len: usize,
        value_len: usize,
        n: usize,
        fixed: bool,
    ) -> Result<Self, LibCuckooError> {
        let huge = sb_common::huge::huge_advice();
        // SAFETY: plain constructor returning NULL for unsupported sizes.
        let t = unsafe { sb_lc_create(key_len, value_len, n, fixed as i32, huge as i32) };
        if t.is_null() {
            return Err(LibCuckooError::Unsupported { key_len, value_len });
        }
        Ok(LibCuckoo {
            t,
            key_len,
            value_len,
        })
    }

    /// Inserts or overwrites; `Ok(true)` when the key is new.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool, LibCuckooError> {
        if key.len() != self.key_len || value.len() != self.value_len {
            return Err(LibCuckooError::Size);
        }
        // SAFETY: sizes match the instantiation.
        match unsafe { sb_lc_insert(self.t, key.as_ptr(), value.as_ptr()) } {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(LibCuckooError::Full),
        }
    }

    /// Removes a key; false when absent.
    pub fn remove(&self, key: &[u8]) -> bool {
        // SAFETY: size checked first.
        key.len() == self.key_len && unsafe { sb_lc_erase(self.t, key.as_ptr()) == 1 }
    }

    /// Copies the value of `key` into `out`.
    pub fn lookup(&self, key: &[u8], out: &mut [u8]) -> bool {
        if key.len() != self.key_len || out.len() != self.value_len {
            return false;
        }
        // SAFETY: sizes checked.
        unsafe { sb_lc_find(self.t, key.as_ptr(), out.as_mut_ptr()) == 1 }
    }

    /// One `find_fn` per key in a loop inside the C++ template (libcuckoo has no batched
    /// lookup; no virtual call per key); keys back to back.
    pub fn lookup_many(&self, keys: &[u8], values: &mut [u8], found: &mut [bool]) -> usize {
        let n = keys.len() / self.key_len;
        assert_eq!(keys.len(), n * self.key_len, "keys must be whole keys");
        assert_eq!(values.len(), n * self.value_len, "values buffer size");
        assert_eq!(found.len(), n, "found buffer size");
        // SAFETY: sizes checked; the shim writes 0 or 1 into each `bool`.
        unsafe {
            sb_lc_find_many(
                self.t,
                keys.as_ptr(),
                n,
                values.as_mut_ptr(),
                found.as_mut_ptr() as *mut u8,
            )
        }
    }

    /// Keys in the map.
    pub fn len(&self) -> usize {
        // SAFETY: read-only query.
        unsafe { sb_lc_size(self.t) }
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots (buckets x 4).
    pub fn capacity(&self) -> usize {
        // SAFETY: read-only query.
        unsafe { sb_lc_capacity(self.t) }
    }

    /// Estimated bytes: slots (pair + 2 bytes) plus the lock array.
    pub fn memory_bytes(&self) -> usize {
        // SAFETY: read-only query.
        unsafe { sb_lc_memory(self.t) }
    }
}

/// The live allocations of 2 MB or more of every libcuckoo table of this process (their bucket
/// arrays), as `(start, len)`: where to measure their pages.
pub fn large_ranges() -> Vec<(usize, usize)> {
    let mut n = 16;
    loop {
        let (mut a, mut l) = (vec![0usize; n], vec![0usize; n]);
        // SAFETY: two buffers of n elements; the shim writes at most n of each.
        let got = unsafe { sb_lc_large_ranges(a.as_mut_ptr(), l.as_mut_ptr(), n) };
        if got <= n {
            return a.into_iter().zip(l).take(got).collect();
        }
        n = got;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_remove_and_fixed_size_fills_up() {
        assert!(LibCuckoo::new(5, 8, 10, false).is_err());
        let t = LibCuckoo::new(13, 16, 1000, true).unwrap();
        let mut n = 0u32;
        loop {
            let mut k = [0u8; 13];
            k[..4].copy_from_slice(&n.to_le_bytes());
            match t.insert(&k, &[n as u8; 16]) {
                Ok(true) => n += 1,
                Ok(false) => unreachable!("keys are distinct"),
                Err(LibCuckooError::Full) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(t.len(), n as usize);
        assert!(
            n as usize > t.capacity() / 2,
            "filled {n} of {}",
            t.capacity()
        );
        let mut out = [0u8; 16];
        let mut k = [0u8; 13];
        k[..4].copy_from_slice(&5u32.to_le_bytes());
        assert!(t.lookup(&k, &mut out));
        assert_eq!(out, [5u8; 16]);
        assert!(t.remove(&k));
        assert!(!t.lookup(&k, &mut out));
        assert!(t.memory_bytes() > 0);
    }

    #[test]
    fn batch_lookup_and_large_arrays_on_their_own_mappings() {
        let t = LibCuckoo::new(16, 8, 1 << 18, false).unwrap();
        for i in 0u64..1000 {
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&i.to_le_bytes());
            t.insert(&k, &i.to_le_bytes()).unwrap();
        }
        let mut keys = Vec::new();
        for i in 0u64..2000 {
            keys.extend_from_slice(&i.to_le_bytes());
            keys.extend_from_slice(&[0u8; 8]);
        }
        let mut vals = vec![0u8; 2000 * 8];
        let mut found = vec![false; 2000];
        assert_eq!(t.lookup_many(&keys, &mut vals, &mut found), 1000);
        for i in 0..2000usize {
            assert_eq!(found[i], i < 1000);
            if i < 1000 {
                assert_eq!(vals[i * 8..i * 8 + 8], (i as u64).to_le_bytes());
            }
        }
        // 2^18 slots of 24+ bytes: the bucket array is a large, 2 MB-aligned allocation.
        let r = large_ranges();
        assert!(!r.is_empty());
        assert!(r
            .iter()
            .all(|&(a, l)| a % (2 << 20) == 0 && l % (2 << 20) == 0));
        drop(t);
    }
}
