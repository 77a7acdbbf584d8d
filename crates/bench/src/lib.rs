//! Benchmark harnesses: our structures and the peers we measure against, side by side on
//! identical inputs in one process, one JSON object out.
//!
//! Each module is one harness with its clap [`Args`](gpt::Args) and a `run` function; the
//! `scalebricks-bench` binary only parses arguments and calls them. They live in their own crate
//! so that the node process (`scalebricks`) does not carry the peers (sux, ptr_hash, dashmap,
//! DPDK, libcuckoo). Peers that need system libraries sit behind this crate's features `dpdk`
//! and `libcuckoo`; the AF_XDP backend of `io` behind `xdp`.
//!
//! - [`gpt`]: SetSep against DPDK EFD, sux VFunc, ptr_hash and hashbrown;
//! - [`fib`]: the partial FIB (cuckoo table) against rte_hash, libcuckoo, hashbrown and dashmap;
//! - [`io`]: packet I/O backends forwarding between two veths (root); `--engine` runs a one-node
//!   ScaleBricks engine between them instead of the plain forwarder;
//! - [`node`]: one node's engine per core for each architecture and FIB backend (Figures 8, 9);
//! - [`latency`]: one-way latency through a namespace cluster per architecture (Figure 10;
//!   root; runs the `scalebricks` binary next to this one);
//! - [`tea`]: the TEA switch over memory servers on loopback UDP (Figures 9, 10 of the TEA
//!   paper; the NF's rate with the cache, all lookups remote, and a local HashMap);
//! - [`plot`]: the PNG figures and the markdown table of `node` and `latency` results.

pub mod failover;
pub mod fib;
pub mod gpt;
pub mod io;
pub mod latency;
pub mod node;
pub mod pages;
pub mod pfcp;
pub mod plot;
pub mod tea;
pub mod update;
