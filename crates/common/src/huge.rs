//! Zero-initialised arrays that the kernel can back with 2 MB transparent huge pages.
//!
//! On these machines THP is in `madvise` mode: an anonymous mapping gets 2 MB pages only if it is
//! 2 MB aligned and marked with `madvise(MADV_HUGEPAGE)`. [`HugeArray`] does both for arrays of at
//! least 2 MB, and [`HugeArray::page_info`] reads `/proc/self/smaps` to tell how much of the array
//! the kernel actually backed with huge pages, so a benchmark can state the page size it ran on.
//! [`set_huge_advice`]`(false)` makes later arrays `MADV_NOHUGEPAGE` instead (a 4 KB control).
#![allow(unsafe_code)]

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::pages::PageInfo;

/// The huge page size of x86-64.
pub const HUGE_PAGE: usize = 2 << 20;

/// Whether new arrays of 2 MB and more are advised for huge pages (the default) or kept off them.
static ADVISE_HUGE: AtomicBool = AtomicBool::new(true);

/// Sets how [`HugeArray`]s made from now on are advised, process-wide: `true` (the default)
/// `madvise(MADV_HUGEPAGE)`, `false` `madvise(MADV_NOHUGEPAGE)`, so they stay on 4 KB pages
/// whatever the system's THP mode (the benchmarks' `--pages 4k` control rows). Arrays already
/// made keep their advice.
pub fn set_huge_advice(huge: bool) {
    ADVISE_HUGE.store(huge, Ordering::Relaxed);
}

/// Whether new [`HugeArray`]s are advised for huge pages (see [`set_huge_advice`]).
pub fn huge_advice() -> bool {
    ADVISE_HUGE.load(Ordering::Relaxed)
}

/// Returns the free memory of the process's heap to the system (glibc's `malloc_trim(0)`,
/// which gives back every free page of every arena, not only the top of the heap; nothing
/// where the C library is not glibc). For after a large structure was dropped or rebuilt:
/// the heap keeps freed memory otherwise, and the process's RSS with it.
pub fn give_back_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heap and returns free pages of it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Types whose all-zero bit pattern is a valid value.
///
/// # Safety
/// Implement only for types for which `std::mem::zeroed()` is a valid, initialised value
/// (integers, atomics, arrays and `#[repr(C)]` structs of those).
pub unsafe trait Zeroable: Sized {}

macro_rules! zeroable {
    ($($t:ty),*) => { $(
        // SAFETY: all-zero is a valid value of every integer and atomic integer type.
        unsafe impl Zeroable for $t {}
    )* };
}
zeroable!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);
zeroable!(
    std::sync::atomic::AtomicU8,
    std::sync::atomic::AtomicU16,
    std::sync::atomic::AtomicU32,
    std::sync::atomic::AtomicU64,
    std::sync::atomic::AtomicUsize
);
// SAFETY: an array of zeroable elements is zeroable.
unsafe impl<T: Zeroable, const N: usize> Zeroable for [T; N] {}

/// A fixed-length, zero-initialised array in its own anonymous mapping, aligned to 2 MB and
/// advised for transparent huge pages when it is at least 2 MB long.
pub struct HugeArray<T: Zeroable> {
    ptr: NonNull<T>,
    len: usize,
    /// Bytes mapped at `ptr` (0 when nothing is mapped).
    map_len: usize,
    /// Whether the mapping was advised `MADV_HUGEPAGE`.
    advised: bool,
    _owns: PhantomData<T>,
}

// SAFETY: HugeArray owns its elements like a Box<[T]>.
unsafe impl<T: Zeroable + Send> Send for HugeArray<T> {}
// SAFETY: shared access only hands out &T.
unsafe impl<T: Zeroable + Sync> Sync for HugeArray<T> {}

impl<T: Zeroable> HugeArray<T> {
    /// A zeroed array of `len` elements.
    ///
    /// # Panics
    /// If the size overflows or the kernel refuses the mapping (out of memory), like `Vec`.
    pub fn zeroed(len: usize) -> Self {
        Self::zeroed_advised(len, huge_advice())
    }

    /// A zeroed array of `len` elements advised `MADV_HUGEPAGE` (`huge`) or `MADV_NOHUGEPAGE`
    /// when it is at least 2 MB, whatever [`set_huge_advice`] says.
    ///
    /// # Panics
    /// As [`HugeArray::zeroed`].
    pub fn zeroed_advised(len: usize, huge: bool) -> Self {
        let elem = std::mem::size_of::<T>();
        let bytes = len
            .checked_mul(elem)
            .expect("HugeArray size overflows usize");
        assert!(
            std::mem::align_of::<T>() <= 4096,
            "HugeArray supports alignments up to a page"
        );
        if bytes == 0 {
            return HugeArray {
                ptr: NonNull::dangling(),
                len,
                map_len: 0,
                advised: false,
                _owns: PhantomData,
            };
        }
        if bytes < HUGE_PAGE {
            let ptr = mmap_anon(bytes);
            return HugeArray {
                ptr: ptr.cast(),
                len,
                map_len: bytes,
                advised: false,
                _owns: PhantomData,
            };
        }
        let map_len = bytes.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        let raw = mmap_anon(map_len + HUGE_PAGE).as_ptr() as usize;
        let start = raw.next_multiple_of(HUGE_PAGE);
        let head = start - raw;
        let tail = HUGE_PAGE - head;
        // SAFETY: [raw, raw + map_len + HUGE_PAGE) is our fresh mapping; we give back the
        // unaligned head and the tail beyond start + map_len, both page-aligned ranges in it.
        unsafe {
            if head > 0 {
                libc::munmap(raw as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((start + map_len) as *mut libc::c_void, tail);
            }
            // A failure here only costs speed (the kernel may not do THP at all).
            let advice = if huge {
                libc::MADV_HUGEPAGE
            } else {
                libc::MADV_NOHUGEPAGE
            };
            libc::madvise(start as *mut libc::c_void, map_len, advice);
        }
        HugeArray {
            ptr: NonNull::new(start as *mut T).expect("mmap returned null"),
            len,
            map_len,
            advised: huge,
            _owns: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the elements (not of the mapping, which is rounded up to a page).
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// Raw pointer to the first element, for prefetching and SIMD loads.
    pub fn as_ptr(&self) -> *const T {
        self.ptr.as_ptr()
    }

    /// How much of this array the kernel backs with huge pages right now, from
    /// `/proc/self/smaps` (nothing is huge when it cannot be read).
    pub fn page_info(&self) -> PageInfo {
        let bytes = self.bytes();
        let measured = if self.map_len == 0 {
            crate::pages::SmapsPages::default()
        } else {
            crate::pages::measure_ranges(&[(self.ptr.as_ptr() as usize, self.map_len)])
                .unwrap_or_default()
        };
        PageInfo {
            bytes,
            thp_advised: self.advised,
            huge_bytes: (measured.thp + measured.hugetlb_2m).min(bytes),
            hugetlb_bytes: measured.hugetlb_2m.min(bytes),
        }
    }
}

fn mmap_anon(bytes: usize) -> NonNull<u8> {
    // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::alloc::handle_alloc_error(
            std::alloc::Layout::from_size_align(bytes, 4096).expect("layout"),
        );
    }
    NonNull::new(p as *mut u8).expect("mmap returned null")
}

impl<T: Zeroable> Deref for HugeArray<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr points to len zero-initialised (hence valid) elements that we own,
        // or is dangling with len 0 / a zero-sized T.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> DerefMut for HugeArray<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable + Copy> Clone for HugeArray<T> {
    fn clone(&self) -> Self {
        let mut out = HugeArray::zeroed(self.len);
        out.copy_from_slice(self);
        out
    }
}

impl<T: Zeroable + fmt::Debug> fmt::Debug for HugeArray<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HugeArray")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

impl<T: Zeroable> Drop for HugeArray<T> {
    fn drop(&mut self) {
        if std::mem::needs_drop::<T>() {
            // SAFETY: elements are valid and dropped exactly once.
            unsafe { std::ptr::drop_in_place(&mut **self as *mut [T]) };
        }
        if self.map_len > 0 {
            // SAFETY: [ptr, ptr+map_len) is the mapping this array created and still owns.
            unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.map_len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_empty_arrays() {
        let a: HugeArray<u64> = HugeArray::zeroed(0);
        assert!(a.is_empty());
        assert_eq!(a.page_info().label(), "4K");
        let mut b: HugeArray<u32> = HugeArray::zeroed(1000);
        assert!(b.iter().all(|&x| x == 0));
        b[999] = 7;
        let c = b.clone();
        assert_eq!(c[999], 7);
        assert!(!b.page_info().thp_advised);
    }

    #[test]
    fn multi_page_array_is_aligned_and_advised() {
        let mut a: HugeArray<u64> = HugeArray::zeroed(3 * HUGE_PAGE / 8 + 5);
        assert_eq!(a.as_ptr() as usize % HUGE_PAGE, 0);
        for (i, x) in a.iter_mut().enumerate() {
            *x = i as u64;
        }
        assert_eq!(a[a.len() - 1], (a.len() - 1) as u64);
        let info = a.page_info();
        assert!(info.thp_advised);
        assert!(info.huge_bytes <= info.bytes);
    }

    #[test]
    fn no_huge_advice_keeps_arrays_on_small_pages() {
        let mut a: HugeArray<u64> = HugeArray::zeroed_advised(4 * HUGE_PAGE / 8, false);
        a.fill(1);
        let info = a.page_info();
        assert!(!info.thp_advised);
        assert_eq!(
            info.huge_bytes, 0,
            "MADV_NOHUGEPAGE array on 2 MB pages: {info:?}"
        );
        assert_eq!(info.label(), "4K");
    }
}
