//! The word arrays of a table: 2 MB-page-backed [`HugeArray`]s of `AtomicU64` normally, plain
//! vectors of loom atomics under `--cfg loom`.
#![allow(unsafe_code)]

use crate::sync::AtomicU64;
use sb_common::PageInfo;

/// A zeroed array of atomic 64-bit words.
pub(crate) struct Words {
    #[cfg(not(loom))]
    a: sb_common::HugeArray<AtomicU64>,
    #[cfg(loom)]
    a: Vec<AtomicU64>,
}

impl Words {
    pub(crate) fn zeroed(len: usize) -> Self {
        #[cfg(not(loom))]
        let a = sb_common::HugeArray::zeroed(len);
        #[cfg(loom)]
        let a = (0..len).map(|_| AtomicU64::new(0)).collect();
        Words { a }
    }

    /// Word `i`. Every index the table computes is below the length by construction (bucket
    /// `< n`, slot `< n * s`, word `< slots * words per slot`), so release builds skip the check.
    #[inline(always)]
    pub(crate) fn w(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.a.len(), "word {i} of {}", self.a.len());
        #[cfg(not(debug_assertions))]
        // SAFETY: `i < len` as argued above (and checked in debug builds, which all tests run).
        return unsafe { self.a.get_unchecked(i) };
        #[cfg(debug_assertions)]
        return &self.a[i];
    }

    /// A copyable view for hot loops (a slice held in registers, not re-read through `self`).
    #[inline(always)]
    pub(crate) fn view(&self) -> WordsRef<'_> {
        WordsRef(&self.a)
    }

    pub(crate) fn bytes(&self) -> usize {
        self.a.len() * 8
    }

    pub(crate) fn page_info(&self) -> PageInfo {
        #[cfg(not(loom))]
        return self.a.page_info();
        #[cfg(loom)]
        return PageInfo {
            bytes: self.bytes(),
            ..PageInfo::default()
        };
    }
}

/// A borrowed [`Words`]: what the lookup paths index, so that the compiler keeps the base and
/// length in registers across the protocol's acquire loads (which force re-reads of anything
/// behind `&Shared`).
#[derive(Clone, Copy)]
pub(crate) struct WordsRef<'a>(&'a [AtomicU64]);

impl<'a> WordsRef<'a> {
    /// Word `i` (in bounds by construction, as for [`Words::w`]).
    #[inline(always)]
    pub(crate) fn w(self, i: usize) -> &'a AtomicU64 {
        debug_assert!(i < self.0.len(), "word {i} of {}", self.0.len());
        #[cfg(not(debug_assertions))]
        // SAFETY: `i < len` as argued at `Words::w` (and checked in debug builds).
        return unsafe { self.0.get_unchecked(i) };
        #[cfg(debug_assertions)]
        return &self.0[i];
    }

    /// Address of word `i` for a prefetch (never dereferenced through this pointer).
    #[inline(always)]
    pub(crate) fn addr(self, i: usize) -> *const u8 {
        self.0.as_ptr().wrapping_add(i) as *const u8
    }
}
