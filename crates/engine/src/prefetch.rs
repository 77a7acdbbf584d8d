//! A prefetch hint for the policy slots a batch is about to touch.
#![allow(unsafe_code)]

/// Asks the CPU to start loading the cache line holding `r` (a no-op off x86-64).
#[inline(always)]
pub(crate) fn read<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch never faults and never changes memory; the pointer is a reference's.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
            (r as *const T).cast::<i8>(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}
