//! Pieces every scalebricks table shares: the key hash and arrays that the kernel can back with
//! 2 MB transparent huge pages.
//!
//! Invariant: nothing here does packet I/O; the only syscalls are `mmap`/`madvise`/`munmap`
//! in [`huge`], the read of `/proc/self/smaps` that reports the page size actually used
//! ([`pages`]), and
//! the OS random source behind [`random_seed`] (the default seed of every table).

pub mod hash;
pub mod huge;
pub mod pages;

pub use hash::{hash128, random_seed, splitmix64, splitmix64_mix, KeyHash, SPLITMIX64_GAMMA};
pub use huge::{set_huge_advice, HugeArray};
pub use pages::PageInfo;
