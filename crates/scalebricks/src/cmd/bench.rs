//! `scalebricks bench ...`: runs the `scalebricks-bench` binary (crate `sb-bench`) that sits next
//! to this executable, with the same arguments. The harnesses and the peers they compare against
//! live there, so the node binary does not carry them.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

use anyhow::{bail, Context};

/// The benchmark binary's file name.
const BENCH_BIN: &str = "scalebricks-bench";

/// Replaces this process with `scalebricks-bench ARGS...`; returns only on failure.
pub fn run(args: Vec<OsString>) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding the current executable")?;
    let bench = exe.with_file_name(BENCH_BIN);
    if !bench.is_file() {
        bail!(
            "`scalebricks bench` runs the {BENCH_BIN} binary, which is not next to this one ({}); \
             build it with `cargo build --release -p sb-bench` (add `--features dpdk,libcuckoo` \
             for the DPDK and libcuckoo peers, `xdp` for AF_XDP) or run it directly",
            bench.display()
        );
    }
    let err = Command::new(&bench).args(args).exec();
    Err(err).with_context(|| format!("running {}", bench.display()))
}
