//! `scalebricks bench latency`: one-way latency of downstream packets through a cluster of node
//! processes in network namespaces, per architecture (the paper's Figure 10).
//!
//! For each architecture: `cluster up` with `--flows` tunnels (the same seed, so the same
//! tunnels), one receiving thread per node on its RAN side (AF_PACKET, TPACKET_V2 frame ring:
//! each frame handed over at once), `gen` sending stamped packets at a low rate from every
//! node's Internet side, then `cluster down`. Latency is receive time minus the stamp's send
//! time (the same monotonic clock), over every packet of every node, so it includes the
//! generator's and the receiver's AF_PACKET paths, the veths and the bridge; those are the same
//! for the three architectures. Needs root.
//!
//! `--io xdp-fast` runs the nodes on the XDP fast path (`cluster up --io xdp-fast`: sb-xdp's
//! programs on every node's ports, AF_PACKET for what they pass up); the `scalebricks` binary
//! next to this one must be built with `--features fastpath`. The output says which I/O ran.

use anyhow::{bail, ensure, Context, Result};
use sb_engine::Arch;
use sb_io::afpacket::{AfPacketConfig, AfPacketPort, RxMode};
use sb_io::{PacketBatch, Port};
use sb_traffic::check::Checker;
use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Architectures (comma separated): scalebricks, full-dup, hash-part.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "scalebricks,full-dup,hash-part"
    )]
    arch: Vec<String>,
    /// Nodes.
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// Tunnels in the cluster.
    #[arg(long, default_value_t = 1_000_000)]
    flows: usize,
    /// Packets per architecture.
    #[arg(long, default_value_t = 5000)]
    packets: u64,
    /// Packets per second (low: latency, not load).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Seed of the tunnels and the traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The nodes' packet I/O, passed to `cluster up --io`: afpacket, xdp (AF_XDP copy mode) or
    /// xdp-fast (the XDP fast path).
    #[arg(long, default_value = "afpacket", value_parser = ["afpacket", "xdp", "xdp-fast"])]
    io: String,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// The `scalebricks` binary next to this one (for `cluster up`, `gen`, `cluster down`).
fn me() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let p = exe.with_file_name("scalebricks");
    ensure!(
        p.exists(),
        "{} not found: build it with `cargo build --release -p scalebricks`",
        p.display()
    );
    Ok(p)
}

fn run_ok(args: &[&str]) -> Result<String> {
    let out = Command::new(me()?)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running scalebricks {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "scalebricks {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn measure(a: &Args, arch: Arch, dir: &str, name: &str) -> Result<serde_json::Value> {
    let d = sb_topology::load(std::path::Path::new(dir))?;
    let checker = Mutex::new(Checker::new());
    let stop = AtomicBool::new(false);
    let cfg = AfPacketConfig {
        rx_mode: RxMode::Frames,
        rx_frames: 4096,
        ..AfPacketConfig::default()
    };
    let mut ports = Vec::new();
    for n in &d.nodes {
        let p = sb_io::netns::in_netns(&n.ran_netns, || AfPacketPort::open("eth0", &cfg))??;
        ports.push(p);
    }
    let (nodes, seed) = (a.nodes.to_string(), a.seed.to_string());
    let sent = std::thread::scope(|s| -> Result<u64> {
        for mut port in ports {
            let (checker, stop) = (&checker, &stop);
            s.spawn(move || {
                let mut batch = PacketBatch::new(64);
                while !stop.load(Ordering::Relaxed) {
                    let _ = port.wait_rx(Duration::from_millis(20));
                    loop {
                        batch.clear();
                        if port.rx_batch(&mut batch) == 0 {
                            break;
                        }
                        let now = sb_traffic::clock::monotonic_ns();
                        let mut c = checker.lock().unwrap_or_else(|e| e.into_inner());
                        for f in batch.iter() {
                            c.observe(f, now);
                        }
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(300));
        let flows_csv = format!("{dir}/flows.csv");
        let g = run_ok(&[
            "gen",
            "--dir",
            dir,
            "--name",
            name,
            "--flows",
            &flows_csv,
            "--count",
            &a.packets.to_string(),
            "--rate",
            &a.rate.to_string(),
            "--to",
            "all",
            "--nodes",
            &nodes,
            "--seed",
            &seed,
            "--size",
            "128",
        ]);
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
        let g: serde_json::Value = serde_json::from_str(g?.trim()).context("gen output")?;
        Ok(g["sent"].as_u64().unwrap_or(0))
    })?;
    let r = checker
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .report(Some(sent));
    Ok(json!({
        "arch": arch.label(),
        "p50_us": r.latency_us.p50,
        "p99_us": r.latency_us.p99,
        "mean_us": r.latency_us.mean,
        "max_us": r.latency_us.max,
        "packets": r.unique,
        "lost": sent.saturating_sub(r.unique),
        "duplicates": r.duplicates,
    }))
}

pub fn run(a: Args) -> Result<()> {
    ensure!(
        sb_io::netns::is_root(),
        "bench latency needs root (network namespaces)"
    );
    ensure!(
        a.rate > 0.0 && a.rate <= 100_000.0,
        "--rate must be in (0, 100000]"
    );
    let archs: Vec<Arch> = a
        .arch
        .iter()
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let tmp = tempfile::tempdir()?;
    let mut rows = Vec::new();
    for arch in archs {
        let dir = tmp.path().join(arch.label());
        let d = dir.to_str().context("temporary path")?.to_string();
        let name = format!("sbl{}", std::process::id() % 100_000);
        if !a.json {
            eprintln!(
                "{arch}: cluster up ({} nodes, {} tunnels)",
                a.nodes, a.flows
            );
        }
        run_ok(&[
            "cluster",
            "up",
            "--nodes",
            &a.nodes.to_string(),
            "--name",
            &name,
            "--dir",
            &d,
            "--arch",
            arch.label(),
            "--flows",
            &a.flows.to_string(),
            "--seed",
            &a.seed.to_string(),
            "--io",
            &a.io,
        ])?;
        let r = measure(&a, arch, &d, &name);
        let down = run_ok(&["cluster", "down", "--dir", &d]);
        let r = r?;
        down?;
        if !a.json {
            eprintln!(
                "{:>11}: p50 {:.1} us, p99 {:.1} us, mean {:.1} us, {} packets, {} lost",
                arch.label(),
                r["p50_us"].as_f64().unwrap_or(0.0),
                r["p99_us"].as_f64().unwrap_or(0.0),
                r["mean_us"].as_f64().unwrap_or(0.0),
                r["packets"],
                r["lost"]
            );
        }
        rows.push(r);
    }
    let v = json!({"benchmark": "latency", "io": a.io, "nodes": a.nodes, "flows": a.flows, "rate_pps": a.rate, "results": rows});
    println!(
        "{}",
        if a.json {
            serde_json::to_string_pretty(&v)?
        } else {
            serde_json::to_string(&v)?
        }
    );
    Ok(())
}
