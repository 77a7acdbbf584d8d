//! The peers we measure against, behind cargo features: DPDK EFD and rte_hash (`dpdk`),
//! libcuckoo (`libcuckoo`). Each is a thin FFI wrapper over a small C/C++ shim in `csrc/`,
//! compiled by `build.rs` only when its feature is on, so the default build is pure Rust.
//!
//! `scripts/install-peers.sh` installs the Debian packages these features link against.

#[cfg(feature = "dpdk")]
pub mod dpdk;
#[cfg(feature = "libcuckoo")]
pub mod libcuckoo;
