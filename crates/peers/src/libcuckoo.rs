//! libcuckoo's `cuckoohash_map` (Debian `libcuckoo-dev`) with fixed-size byte-array keys and
//! values, through `csrc/libcuckoo_shim.cpp`. Supported sizes: keys of 4, 13, 16 or 40 bytes,
//! values of 8, 16 or 64 bytes (one C++ instantiation each). libcuckoo is fully concurrent
//! (fine-grained bucket locks), so every method takes `&self`.
#![allow(unsafe_code)]

use std::ffi::c_void;

extern "C" {
    fn sb_lc_create(key_len: usize, value_len: usize, n: usize, fixed: i32) -> *mut c_void;
    fn sb_lc_free(t: *mut c_void);
    fn sb_lc_insert(t: *mut c_void, k: *const u8, v: *const u8) -> i32;
    fn sb_lc_erase(t: *mut c_void, k: *const u8) -> i32;
    fn sb_lc_find(t: *const c_void, k: *const u8, out: *mut u8) -> i32;
    fn sb_lc_find_many(
        t: *const c_void,
        keys: *const u8,
        n: usize,
        key_len: usize,
        value_len: usize,
        values: *mut u8,
        found: *mut u8,
    ) -> usize;
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
        // SAFETY: plain constructor returning NULL for unsupported sizes.
        let t = unsafe { sb_lc_create(key_len, value_len, n, fixed as i32) };
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

    /// One `find` per key (libcuckoo has no batched lookup); keys back to back.
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
                self.key_len,
                self.value_len,
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
}
