//! The atomics the reader/writer protocol uses, swapped for `loom`'s under `--cfg loom` so the
//! protocol can be model-checked (`RUSTFLAGS="--cfg loom" cargo test -p sb-cuckoo --test loom
//! --release`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// What a reader does while the writer holds a bucket (odd version): a CPU hint normally, a
/// scheduling point under loom (a loom model must yield in a spin loop).
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
