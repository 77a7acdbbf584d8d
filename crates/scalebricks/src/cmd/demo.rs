//! `scalebricks demo`: the main job. A ScaleBricks cluster of `--nodes` nodes, each a thread
//! running the engine (`sb_node::drive`) over three in-memory ports: `inet` and `ran` are
//! cables to this command, `fabric` a port of an in-memory switch that joins the nodes. The
//! three architectures run one after the other on the same tunnels and the same traffic:
//! downstream packets to known UEs entering random nodes, plus packets to unknown UEs, with
//! TTL 1 and malformed frames. Every frame that comes out of a `ran` port is checked (right
//! node, tunnel, eNodeB, inner packet byte for byte but the TTL), every deliberate drop must
//! be counted by its reason, and a table compares the architectures. `--netns` runs the same
//! comparison on real node processes in network namespaces (`cluster up`, root).

use anyhow::{bail, ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sb_engine::cluster;
use sb_engine::Arch;
use sb_node::inproc::{run_arch, traffic, Options, MALFORMED, TTL1, UNKNOWN};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::IsTerminal;

#[derive(clap::Args)]
pub struct Args {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// Tunnels (FIB entries) in the whole cluster.
    #[arg(long, default_value_t = 1_000_000)]
    flows: usize,
    /// Downstream packets of known flows per architecture.
    #[arg(long, default_value_t = 1_000_000)]
    packets: usize,
    /// Architectures, in order (comma separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "scalebricks,full-dup,hash-part"
    )]
    arch: Vec<String>,
    /// Seed of the tunnels, the tables and the traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Frames per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Run on real node processes in network namespaces (`cluster up`; needs root).
    #[arg(long)]
    netns: bool,
    /// With `--netns`: the nodes' packet I/O.
    #[arg(long, value_enum, default_value = "afpacket", requires = "netns")]
    io: super::demo_netns::Io,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    ensure!((2..=64).contains(&a.nodes), "--nodes must be 2 to 64");
    ensure!(
        a.flows >= 1 && a.flows <= 16 << 20,
        "--flows must be 1 to 16M"
    );
    ensure!(a.packets >= 1, "--packets must be at least 1");
    ensure!((1..=256).contains(&a.batch), "--batch must be 1 to 256");
    let archs: Vec<Arch> = a
        .arch
        .iter()
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    if a.netns {
        return super::demo_netns::run(&a.netns_args(), &archs);
    }
    let say = |s: String| {
        if !a.json {
            println!("{s}");
        }
    };
    say(format!(
        "scalebricks demo: {} nodes as threads on in-memory ports and an in-memory switch, {} tunnels, {} packets per architecture (+{} unknown UEs, {} TTL 1, {} malformed)",
        a.nodes, a.flows, a.packets, UNKNOWN, TTL1, MALFORMED
    ));
    let tunnels = cluster::generate_tunnels(a.flows, a.nodes.into(), a.seed, 0);
    let o = Options {
        nodes: a.nodes,
        seed: a.seed,
        batch: a.batch,
    };
    let t = traffic(&tunnels, &o, a.packets);
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for &arch in &archs {
        let bar = progress_bar(t.len() as u64, arch, a.json);
        let r = run_arch(arch, &tunnels, &t, &o, &|n| bar.set_position(n))
            .with_context(|| format!("{arch}"))?;
        bar.finish_and_clear();
        let n = f64::from(a.nodes);
        let drops: BTreeMap<String, u64> = r.counters.drops_by_reason();
        if r.wrong > 0 || r.lost > 0 || !r.expected_drops_ok {
            failed.push(format!(
                "{arch}: {} wrong, {} lost, drops {:?}",
                r.wrong, r.lost, drops
            ));
        }
        rows.push(json!({
            "arch": arch.label(),
            "mpps_per_core": r.mpps_per_core,
            "node_cpu_seconds": r.node_cpu_s,
            "wall_seconds": r.wall_s,
            "mean_fabric_crossings": r.counters.mean_crossings(),
            "crossings": r.counters.crossings,
            "fib_entries_per_node": r.fib_entries.iter().sum::<usize>() as f64 / n,
            "fib_bytes_per_node": r.fib_bytes.iter().sum::<usize>() as f64 / n,
            "gpt_bytes": r.gpt_bytes,
            "drops": drops,
            "wrong": r.wrong,
            "lost": r.lost,
        }));
    }
    if a.json {
        let v = json!({
            "nodes": a.nodes, "flows": a.flows, "packets": a.packets,
            "deliberate_drops": {"unknown_ue": UNKNOWN, "ttl": TTL1, "malformed": MALFORMED},
            "results": rows,
            "ok": failed.is_empty(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_table(&rows);
    }
    if !failed.is_empty() {
        bail!("checks failed: {}", failed.join("; "));
    }
    say("every packet came out once, at its handling node, in the right tunnel; every deliberate drop was counted by its reason".into());
    Ok(())
}

fn progress_bar(len: u64, arch: Arch, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(arch.label().to_string());
    pb
}

pub(crate) fn print_table(rows: &[Value]) {
    println!(
        "{:<12} {:>14} {:>10} {:>14} {:>13} {:>10} {:>7} {:>5}  drops",
        "arch",
        "Mpps/node core",
        "crossings",
        "FIB entries/n",
        "FIB MB/node",
        "GPT MB",
        "wrong",
        "lost"
    );
    for r in rows {
        let drops = r["drops"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        println!(
            "{:<12} {:>14.2} {:>10.3} {:>14.0} {:>13.1} {:>10.2} {:>7} {:>5}  {}",
            r["arch"].as_str().unwrap_or(""),
            r["mpps_per_core"].as_f64().unwrap_or(0.0),
            r["mean_fabric_crossings"].as_f64().unwrap_or(0.0),
            r["fib_entries_per_node"].as_f64().unwrap_or(0.0),
            r["fib_bytes_per_node"].as_f64().unwrap_or(0.0) / 1e6,
            r["gpt_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            r["wrong"].as_u64().unwrap_or(0),
            r["lost"].as_u64().unwrap_or(0),
            drops
        );
    }
}

impl Args {
    fn netns_args(&self) -> super::demo_netns::NetnsArgs {
        super::demo_netns::NetnsArgs {
            nodes: self.nodes,
            flows: self.flows,
            packets: self.packets,
            seed: self.seed,
            io: self.io,
            json: self.json,
        }
    }
}
