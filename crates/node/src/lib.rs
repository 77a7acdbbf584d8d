//! A scalebricks node: loads the tables `cluster up` wrote (refusing any that belong to
//! another cluster or node), opens its three ports inside its network namespace, and drives
//! one [`sb_engine::Engine`] per worker thread over them; it writes its counters as JSON every
//! second and when it stops, sleeps when its ports are idle, and stops when told to
//! (`scalebricks node` sets the flag on SIGTERM).
//!
//! - [`config`]: the node file (`node{i}.json`): ports, architecture, backends, table paths.
//! - [`tables`]: the table files and [`tables::write_cluster_tables`], which `cluster up`
//!   calls to write them.
//! - [`run`](mod@run): [`run::run`] (the node process), [`run::drive`] (one worker's loop over
//!   any three ports: the demo drives in-memory ports with it).
//! - [`control`]: the control plane's thread ([`sb_control`] over UDP on the control network,
//!   its log, and the live GPT, FIB and uplink table it changes while the workers forward).
//! - [`pfcp`]: the node's PFCP endpoint (the cluster is one UPF; sessions become control-plane
//!   updates, answered once durable and installed).
//! - [`metrics`]: the node's state as Prometheus metrics, and the HTTP server for `/metrics`.
//! - [`mirror`]: copies of the tables kept in step with the control plane's changes (the XDP
//!   fast path's maps).
//! - `fastpath` (feature `fastpath`): the XDP fast path of a node with `io: xdp-fast`
//!   (`sb-xdp`'s programs on `inet` and `ran`, their maps filled from the node's tables).
//! - [`inproc`]: the cluster in one process (node threads, in-memory ports and switch, every
//!   packet checked): what `scalebricks demo` runs.

#![warn(missing_docs)]

#[cfg(feature = "grpc")]
pub mod api;
pub mod config;
pub mod control;
#[cfg(feature = "fastpath")]
pub mod fastpath;
pub mod inproc;
pub mod logwriter;
pub mod metrics;
pub mod mirror;
pub mod pfcp;
mod pfcp_state;
pub mod run;
pub mod tables;

pub use config::NodeFile;
pub use run::{drive, run, NodeError};
