//! A prefetch hint for the policy slots a batch is about to touch.
#![allow(unsafe_code)]

/// How many frames ahead of their use the batch stages prefetch the policy slots (the FIB
/// stage downstream, [`crate::App::prefetch`]; the LTE application's uplink batch): a
/// rolling window rather than the whole batch at once, whose burst of misses would wait for
/// free miss buffers and stall the core. `scalebricks-bench node --arch full-dup` (1M
/// entries, a QER and a URR on every session; a noisy 2-core VM): of 4, 8 and 16, 8 gave the
/// best qer-urr/none ratio (medians of 3 runs: 0.82, 0.88, 0.84; 0.81 with the whole batch
/// prefetched at once).
pub(crate) const AHEAD: usize = 8;

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
