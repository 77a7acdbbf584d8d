//! `scalebricks node --config FILE`: runs one node of a cluster in the foreground (`cluster up`
//! starts one per node). SIGTERM or SIGINT stops it cleanly: the workers finish their batch and
//! the counters are written a last time.
#![allow(unsafe_code)]

use anyhow::Context;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

fn install_handlers() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// The node's configuration (`node{i}.json` in the cluster's state directory).
    #[arg(long)]
    config: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    install_handlers();
    let cfg = sb_node::NodeFile::load(&args.config)?;
    let (node, arch) = (cfg.node, cfg.arch.clone());
    let c = sb_node::run(&cfg, &STOP, || {
        eprintln!("node {node}: {arch}, ports open, forwarding");
    })
    .with_context(|| format!("node {node}"))?;
    let r = c.report();
    eprintln!(
        "node {node}: stopped; received {} inet / {} ran / {} fabric, transmitted {} ran / {} inet / {} fabric, drops {:?}",
        r.ports["inet"].counters.rx,
        r.ports["ran"].counters.rx,
        r.ports["fabric"].counters.rx,
        r.ports["ran"].counters.tx,
        r.ports["inet"].counters.tx,
        r.ports["fabric"].counters.tx,
        r.drops
    );
    Ok(())
}
