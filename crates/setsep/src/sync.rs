//! The atomics and locks of [`crate::LiveSetSep`], swapped for `loom`'s under `--cfg loom` so
//! its protocol can be model-checked (`RUSTFLAGS="--cfg loom" cargo test -p sb-setsep --test
//! loom --release`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

/// What a reader does while a writer holds a block (odd version): a CPU hint normally, a
/// scheduling point under loom (a loom model must yield in a spin loop).
#[inline]
pub(crate) fn spin() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
