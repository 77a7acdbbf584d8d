//! `scalebricks sink`: receive in a node's neighbour namespace (RAN side or Internet side) and
//! report what the generator's stamps say: loss, duplicates, reordering, latency.
//!
//! The port uses the TPACKET_V2 frame ring ([`RxMode::Frames`]): each frame is handed over as
//! soon as the kernel wrote it. The default TPACKET_V3 block ring hands frames over only when a
//! block fills or its 1 ms timeout passes, which at the rates a sink sees would put that timeout
//! into every latency it reports.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Context;
use sb_io::afpacket::{AfPacketConfig, AfPacketPort, RxMode};

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Side {
    /// The base-station-side namespace PREFIX-ranN (downstream traffic arrives here).
    Ran,
    /// The Internet-side namespace PREFIX-inetN.
    Inet,
}

#[derive(clap::Args)]
pub struct Args {
    /// Node index.
    #[arg(long)]
    node: usize,
    /// Which neighbour namespace to listen in.
    #[arg(long, value_enum, default_value = "ran")]
    side: Side,
    /// Listen at most this many seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Print one JSON object (the default; kept for scripts that pass it).
    #[arg(long)]
    json: bool,
    /// Stop as soon as this many distinct stamped frames arrived (and every stream announced
    /// complete); also counts frames that never arrived as lost.
    #[arg(long)]
    expect: Option<u64>,
    /// Cluster name prefix.
    #[arg(long, default_value = "sb")]
    name: String,
    /// Cluster state directory [default: /var/lib/scalebricks/PREFIX].
    #[arg(long)]
    dir: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let dir = super::cluster::state_dir(a.dir.clone(), &a.name);
    let d = super::cluster::load_cluster(&dir)?;
    let n = d.node(a.node)?;
    let ns = match a.side {
        Side::Ran => &n.ran_netns,
        Side::Inet => &n.inet_netns,
    };
    anyhow::ensure!(
        a.duration > 0.0 && a.duration.is_finite(),
        "--duration must be > 0"
    );
    // The frame ring, for latency (module docs); deep (4096 frames, 8 MiB) so a descheduled
    // sink loses nothing at modest rates.
    let cfg = AfPacketConfig {
        rx_mode: RxMode::Frames,
        rx_frames: 4096,
        ..AfPacketConfig::default()
    };
    let mut port = sb_io::netns::in_netns(ns, || AfPacketPort::open("eth0", &cfg))
        .with_context(|| format!("entering namespace {ns}"))?
        .with_context(|| format!("opening eth0 in {ns}"))?;
    eprintln!("sink ready: {ns}/eth0");
    let stop = AtomicBool::new(false);
    let r = sb_traffic::sink::run_sink(
        &mut port,
        Duration::from_secs_f64(a.duration),
        a.expect,
        &stop,
    );
    let mut v = serde_json::to_value(&r)?;
    v["node"] = a.node.into();
    v["netns"] = ns.clone().into();
    println!("{}", serde_json::to_string(&v)?);
    Ok(())
}
