//! Software prefetch, the one place this crate needs `unsafe`.
#![allow(unsafe_code)]

/// Asks the CPU to bring the cache line holding `p` into L1. `p` need not be valid: a prefetch
/// never faults and is never a memory access in the language's sense.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: `prefetcht0` has no architectural effect and cannot fault, whatever the address;
    // SSE is part of the x86-64 baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}
