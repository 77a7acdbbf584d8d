//! A prefetch hint, the only thing the lookup path needs from `core::arch`.
#![allow(unsafe_code)]

/// Asks the CPU to start loading the cache line holding `slice[i]` (a no-op when out of range or
/// not on x86-64).
#[inline(always)]
pub fn prefetch<T>(slice: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(r) = slice.get(i) {
        // SAFETY: prefetch never faults and never changes memory; the pointer is in bounds.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                (r as *const T).cast::<i8>(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slice, i);
}
