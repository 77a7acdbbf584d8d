//! The word arrays of a table: 2 MB-page-backed [`HugeArray`]s of `AtomicU64` normally, plain
//! vectors of loom atomics under `--cfg loom`.

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

    #[inline(always)]
    pub(crate) fn w(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.a.len());
        &self.a[i]
    }

    /// Address of word `i` for a prefetch (never dereferenced through this pointer).
    #[inline(always)]
    pub(crate) fn addr(&self, i: usize) -> *const u8 {
        self.a.as_ptr().wrapping_add(i) as *const u8
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
