//! DPDK's EFD library (`rte_efd`): Intel's product version of SetSep, our main GPT peer.
//!
//! One table per [`Efd`], with its online (lookup) copy and its offline (update) side on socket 0.
//! Keys have the fixed length given at creation; values are `RTE_EFD_VALUE_NUM_BITS` wide
//! ([`Efd::value_bits`], 8 in Debian's build), so callers storing narrower values mask them.
//!
//! Correctness note: Debian's DPDK 22.11 EFD answers wrong from its AVX2 lookup path on our
//! machines (about 75% wrong); [`super::eal_init`] caps DPDK's SIMD width at 128 bits, with
//! which it is correct. The table sits in the EAL's memory: on 2 MB hugepages when the EAL was
//! started on them ([`super::eal_init_pages`]), else on 4 KB pages.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

#[repr(C)]
struct RteEfdTable {
    _private: [u8; 0],
}

extern "C" {
    fn sb_efd_value_bits() -> u32;
    fn sb_efd_burst_max() -> u32;
    fn sb_efd_create(
        name: *const std::ffi::c_char,
        max_rules: u32,
        key_len: u32,
        err: *mut c_int,
    ) -> *mut RteEfdTable;
    fn sb_efd_free(t: *mut RteEfdTable);
    fn sb_efd_update(t: *mut RteEfdTable, key: *const c_void, value: u32) -> c_int;
    fn sb_efd_delete(t: *mut RteEfdTable, key: *const c_void) -> c_int;
    fn sb_efd_lookup(t: *const RteEfdTable, key: *const c_void) -> u32;
    fn sb_efd_lookup_bulk(t: *const RteEfdTable, keys: *const *const c_void, n: u32, out: *mut u16);
}

/// Why an EFD operation failed.
#[derive(Debug, thiserror::Error)]
pub enum EfdError {
    /// DPDK's EAL did not start.
    #[error(transparent)]
    Eal(#[from] super::EalError),
    /// `rte_efd_create` returned NULL (usually: not enough EAL memory).
    #[error("rte_efd_create failed for {max_rules} keys of {key_len} bytes (rte_errno {errno})")]
    Create {
        /// Keys asked for.
        max_rules: u32,
        /// Key length asked for.
        key_len: u32,
        /// `rte_errno`.
        errno: i32,
    },
    /// A key does not have the table's key length.
    #[error("key of {got} bytes, the table's keys are {want} bytes")]
    KeyLength {
        /// The key's length.
        got: usize,
        /// The table's key length.
        want: usize,
    },
    /// A value does not fit in EFD's value width.
    #[error("value {0} does not fit in RTE_EFD_VALUE_NUM_BITS")]
    Value(u32),
    /// `rte_efd_update` returned `RTE_EFD_UPDATE_FAILED`: no perfect hash for the key's group,
    /// or the group is full. DPDK says the table is then in an indeterminate state.
    #[error("rte_efd_update failed (group full or no perfect hash found)")]
    UpdateFailed,
    /// `rte_efd_delete` did not find the key.
    #[error("key not in the table")]
    NotFound,
    /// More keys than `u32::MAX`.
    #[error("too many keys for EFD")]
    TooMany,
}

/// The outcome of a successful [`Efd::update`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Updated {
    /// The key was inserted or its value changed.
    Changed,
    /// Inserted, and the key's group just became full: later inserts there will fail.
    GroupFull,
    /// The key already had this value.
    NoChange,
}

/// An EFD table (`struct rte_efd_table`).
pub struct Efd {
    table: NonNull<RteEfdTable>,
    key_len: usize,
}

// SAFETY: the table is only mutated through &mut self (rte_efd_update/delete are single-writer);
// rte_efd_lookup(_bulk) are documented multi-thread safe, so &Efd may be shared.
unsafe impl Send for Efd {}
// SAFETY: see above.
unsafe impl Sync for Efd {}

/// EAL memory (MB) that a table of `max_rules` keys of `key_len` bytes needs, with room for the
/// power-of-two rounding of EFD's chunk count and its offline key store.
pub fn mem_mb_for(max_rules: usize, key_len: usize) -> u32 {
    let bytes = max_rules as u64 * (key_len as u64 + 24) * 3;
    (256 + bytes / (1 << 20)).min(u32::MAX as u64) as u32
}

impl Efd {
    /// Bits of each value (`RTE_EFD_VALUE_NUM_BITS`).
    pub fn value_bits() -> u32 {
        // SAFETY: returns a compile-time constant.
        unsafe { sb_efd_value_bits() }
    }

    /// Longest burst `rte_efd_lookup_bulk` takes (`RTE_EFD_BURST_MAX`);
    /// [`Efd::lookup_bulk`] loops over bursts of this size.
    pub fn burst_max() -> usize {
        // SAFETY: returns a compile-time constant.
        unsafe { sb_efd_burst_max() as usize }
    }

    /// Starts the EAL (with [`mem_mb_for`] memory, if this is the process's first start) and
    /// creates a table for at least `max_rules` keys of `key_len` bytes.
    pub fn new(max_rules: usize, key_len: usize) -> Result<Efd, EfdError> {
        super::eal_init(mem_mb_for(max_rules, key_len))?;
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = CString::new(format!("sb_efd_{}", SEQ.fetch_add(1, Ordering::Relaxed)))
            .expect("no NUL in the name");
        let max = u32::try_from(max_rules.max(1)).map_err(|_| EfdError::TooMany)?;
        let klen = u32::try_from(key_len).map_err(|_| EfdError::TooMany)?;
        let mut err: c_int = 0;
        // SAFETY: the EAL is started; name is a valid C string that outlives the call.
        let t = unsafe { sb_efd_create(name.as_ptr(), max, klen, &mut err) };
        match NonNull::new(t) {
            Some(table) => Ok(Efd { table, key_len }),
            None => Err(EfdError::Create {
                max_rules: max,
                key_len: klen,
                errno: err,
            }),
        }
    }

    /// The key length of this table.
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    fn check(&self, key: &[u8]) -> Result<(), EfdError> {
        if key.len() == self.key_len {
            Ok(())
        } else {
            Err(EfdError::KeyLength {
                got: key.len(),
                want: self.key_len,
            })
        }
    }

    /// Inserts `key` or changes its value (`rte_efd_update`).
    pub fn update(&mut self, key: &[u8], value: u32) -> Result<Updated, EfdError> {
        self.check(key)?;
        if Self::value_bits() < 32 && value >> Self::value_bits() != 0 {
            return Err(EfdError::Value(value));
        }
        // SAFETY: table is live; key has the table's key length.
        match unsafe { sb_efd_update(self.table.as_ptr(), key.as_ptr().cast(), value) } {
            0 => Ok(Updated::Changed),
            1 => Ok(Updated::GroupFull),
            2 => Ok(Updated::NoChange),
            _ => Err(EfdError::UpdateFailed),
        }
    }

    /// Removes `key` (`rte_efd_delete`).
    pub fn delete(&mut self, key: &[u8]) -> Result<(), EfdError> {
        self.check(key)?;
        // SAFETY: table is live; key has the table's key length.
        match unsafe { sb_efd_delete(self.table.as_ptr(), key.as_ptr().cast()) } {
            0 => Ok(()),
            _ => Err(EfdError::NotFound),
        }
    }

    /// The value of `key` (arbitrary for a key never inserted).
    ///
    /// # Panics
    /// If `key` does not have the table's key length (DPDK would read past it).
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> u32 {
        assert_eq!(key.len(), self.key_len, "EFD key length");
        // SAFETY: table is live; key has the table's key length.
        unsafe { sb_efd_lookup(self.table.as_ptr(), key.as_ptr().cast()) }
    }

    /// Looks up `keys` into `out` (any number, in bursts of [`Efd::burst_max`]).
    ///
    /// # Panics
    /// If the lengths of `keys` and `out` differ or a key has the wrong length.
    pub fn lookup_bulk(&self, keys: &[&[u8]], out: &mut [u16]) {
        assert_eq!(keys.len(), out.len());
        let burst = Self::burst_max();
        let mut ptrs = [std::ptr::null::<c_void>(); 64];
        let burst = burst.min(ptrs.len());
        for (kc, oc) in keys.chunks(burst).zip(out.chunks_mut(burst)) {
            for (p, k) in ptrs.iter_mut().zip(kc) {
                assert_eq!(k.len(), self.key_len, "EFD key length");
                *p = k.as_ptr().cast();
            }
            // SAFETY: table is live; kc.len() <= burst pointers to keys of the table's key
            // length, valid for the call; oc has kc.len() slots.
            unsafe {
                sb_efd_lookup_bulk(
                    self.table.as_ptr(),
                    ptrs.as_ptr(),
                    kc.len() as u32,
                    oc.as_mut_ptr(),
                )
            };
        }
    }
}

impl Drop for Efd {
    fn drop(&mut self) {
        // SAFETY: the table came from rte_efd_create and is freed once.
        unsafe { sb_efd_free(self.table.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64) -> [u8; 13] {
        let mut k = [0u8; 13];
        // A cheap mixer so keys are spread (EFD hashes them anyway).
        let x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i >> 7);
        k[..8].copy_from_slice(&x.to_le_bytes());
        k[8..12].copy_from_slice(&(i as u32).to_be_bytes());
        k[12] = 6;
        k
    }

    #[test]
    fn efd_answers_correctly_for_100k_keys() {
        let n = 100_000u64;
        let mut t = Efd::new(n as usize, 13).expect("create");
        let bits = Efd::value_bits().min(16);
        let val = |i: u64| (i.wrapping_mul(31) ^ (i >> 3)) as u32 & ((1 << bits) - 1);
        for i in 0..n {
            t.update(&key(i), val(i)).expect("insert");
        }
        let keys: Vec<[u8; 13]> = (0..n).map(key).collect();
        let wrong = (0..n)
            .filter(|&i| t.lookup(&keys[i as usize]) != val(i))
            .count();
        assert_eq!(wrong, 0, "single lookups wrong");
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let mut out = vec![0u16; refs.len()];
        t.lookup_bulk(&refs, &mut out);
        let wrong = (0..n).filter(|&i| out[i as usize] as u32 != val(i)).count();
        assert_eq!(wrong, 0, "bulk lookups wrong");
        // Change some values; the others stay.
        for i in (0..n).step_by(7) {
            t.update(&key(i), val(i) ^ 1).expect("change");
        }
        for i in 0..n {
            let want = if i % 7 == 0 { val(i) ^ 1 } else { val(i) };
            assert_eq!(t.lookup(&key(i)), want, "key {i} after change");
        }
        assert!(matches!(
            t.update(&[1, 2, 3], 0),
            Err(EfdError::KeyLength { got: 3, want: 13 })
        ));
        t.delete(&key(1)).expect("delete");
    }
}
