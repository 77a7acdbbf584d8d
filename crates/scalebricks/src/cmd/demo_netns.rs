//! `scalebricks demo --netns`: the demo's comparison on real node processes in network
//! namespaces. For each architecture: `cluster up` (a fresh cluster with the same seed, so the
//! same tunnels), a `sink` on every node's RAN side, `gen` sending stamped downstream packets
//! to the tunnels' UE addresses into every node's `inet`, then the nodes' counters and CPU
//! time, and `cluster down`. Needs root.

use anyhow::{bail, ensure, Context, Result};
use sb_engine::Arch;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NetnsArgs {
    pub nodes: u16,
    pub flows: usize,
    pub packets: usize,
    pub seed: u64,
    pub io: Io,
    pub json: bool,
}

/// The nodes' packet I/O (`cluster up --io`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Io {
    /// AF_PACKET rings.
    Afpacket,
    /// AF_XDP in copy mode (a build with `--features xdp`).
    Xdp,
    /// The XDP fast path (a build with `--features fastpath`): sb-xdp's programs on every
    /// node's inet, ran and fabric, under each architecture, AF_PACKET for what they pass up.
    XdpFast,
}

impl Io {
    fn as_str(self) -> &'static str {
        match self {
            Io::Afpacket => "afpacket",
            Io::Xdp => "xdp",
            Io::XdpFast => "xdp-fast",
        }
    }
}

fn me() -> Result<std::path::PathBuf> {
    std::env::current_exe().context("cannot find our own executable")
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

fn wait_json(mut c: Child, limit: Duration) -> Result<Value> {
    let t0 = Instant::now();
    loop {
        if c.try_wait()?.is_some() {
            break;
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            bail!("a sink did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = c.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).with_context(|| format!("sink output {text:?}"))
}

/// Starts a sink on node `k`'s RAN side and waits until it listens.
fn start_sink(d: &str, k: u16, secs: u64) -> Result<Child> {
    let mut c = Command::new(me()?)
        .args([
            "sink",
            "--dir",
            d,
            "--node",
            &k.to_string(),
            "--side",
            "ran",
        ])
        .args(["--duration", &secs.to_string(), "--json"])
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting a sink")?;
    let mut err = BufReader::new(c.stderr.take().context("sink stderr")?);
    let mut line = String::new();
    err.read_line(&mut line)
        .context("reading the sink's stderr")?;
    if !line.contains("sink ready") {
        let _ = c.kill();
        let _ = c.wait();
        bail!("the sink of node {k} did not start: {}", line.trim());
    }
    // Keep draining its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
    });
    Ok(c)
}

/// The lines of `flows.csv` (`ue,teid,enb,node`) by handling node.
fn flows_by_node(path: &Path, nodes: u16) -> Result<Vec<Vec<String>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut by = vec![Vec::new(); nodes as usize];
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("ue,") || line.starts_with('#') {
            continue;
        }
        let node: usize = line
            .rsplit(',')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .with_context(|| format!("{}:{}: no handling node", path.display(), i + 1))?;
        by.get_mut(node)
            .with_context(|| format!("{}:{}: node {node} out of range", path.display(), i + 1))?
            .push(line.to_string());
    }
    Ok(by)
}

pub fn run(a: &NetnsArgs, archs: &[Arch]) -> Result<()> {
    ensure!(
        sb_io::netns::is_root(),
        "--netns needs root (network namespaces)"
    );
    let packets = a.packets.min(200_000);
    let rate = 5000.0f64;
    ensure!(!archs.is_empty(), "no architecture to run");
    if !a.json {
        println!(
            "scalebricks demo --netns: {} node processes in network namespaces (cluster up, {} ports, an L2 bridge as the switch), {} tunnels, {} packets per architecture from gen at {rate} pps, counted by a sink on every node's RAN side",
            a.nodes,
            a.io.as_str(),
            a.flows,
            packets
        );
    }
    let tmp = tempfile::tempdir()?;
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for &arch in archs {
        let dir = tmp.path().join(arch.label());
        let d = dir.to_str().context("temporary path")?.to_string();
        let name = format!("sbd{}", std::process::id() % 100_000);
        let (nodes, flows, seed) = (a.nodes.to_string(), a.flows.to_string(), a.seed.to_string());
        if !a.json {
            eprintln!(
                "{arch}: cluster up ({} nodes, {} tunnels)",
                a.nodes, a.flows
            );
        }
        let up = run_ok(&[
            "cluster",
            "up",
            "--io",
            a.io.as_str(),
            "--nodes",
            &nodes,
            "--name",
            &name,
            "--dir",
            &d,
            "--arch",
            arch.label(),
            "--flows",
            &flows,
            "--seed",
            &seed,
        ]);
        if let Err(e) = up {
            // `down` removes whatever a failed `up` left.
            let _ = run_ok(&["cluster", "down", "--dir", &d]);
            return Err(e.context(format!("{arch}: cluster up")));
        }
        let result = (|| -> Result<Value> {
            // The tunnels of each handling node: every node's packets are sent on their own
            // (into every node's inet, round robin), so each sink must get exactly those.
            let by_node = flows_by_node(&dir.join("flows.csv"), a.nodes)?;
            let secs = (packets as f64 / rate).ceil() as u64 + 2 * u64::from(a.nodes) + 4;
            let mut sinks = Vec::new();
            for k in 0..a.nodes {
                sinks.push(start_sink(&d, k, secs)?);
            }
            let mut sent_to = vec![0u64; a.nodes as usize];
            let mut left = packets;
            let total: usize = by_node.iter().map(Vec::len).sum();
            for (k, lines) in by_node.iter().enumerate() {
                // Packets in proportion to the node's tunnels (the last node takes the rest).
                let count = if k + 1 == by_node.len() {
                    left
                } else {
                    (packets * lines.len()).checked_div(total).unwrap_or(0)
                };
                left -= count;
                if count == 0 || lines.is_empty() {
                    continue;
                }
                let file = dir.join(format!("demo-flows-node{k}.csv"));
                std::fs::write(&file, lines.join("\n") + "\n")
                    .with_context(|| format!("writing {}", file.display()))?;
                let flows_csv = file.to_str().context("temporary path")?.to_string();
                let g = run_ok(&[
                    "gen",
                    "--dir",
                    &d,
                    "--flows",
                    &flows_csv,
                    "--count",
                    &count.to_string(),
                    "--rate",
                    &rate.to_string(),
                    "--to",
                    "all",
                    "--nodes",
                    &nodes,
                    "--seed",
                    &(a.seed + k as u64).to_string(),
                ])?;
                let g: Value = serde_json::from_str(g.trim()).context("gen output")?;
                sent_to[k] = g["sent"].as_u64().unwrap_or(0);
            }
            let reports: Vec<Value> = sinks
                .into_iter()
                .map(|c| wait_json(c, Duration::from_secs(secs + 20)))
                .collect::<Result<_>>()?;
            let status: Value =
                serde_json::from_str(&run_ok(&["cluster", "status", "--dir", &d, "--json"])?)
                    .context("cluster status --json output")?;
            let mut cpu = 0.0;
            let (mut crossings, mut drops) = ([0u64; 4], serde_json::Map::new());
            // The XDP fast path's counters summed over the nodes, and its ports' modes.
            let (mut xdp, mut xdp_modes) = (serde_json::Map::new(), Vec::new());
            let (mut fib_entries, mut fib_bytes, mut gpt_bytes) = (0u64, 0u64, 0u64);
            for s in status["node_status"].as_array().into_iter().flatten() {
                if let Some(pid) = s["pid"].as_i64() {
                    cpu += sb_io::cpu::pid_runtime_ns(pid as i32).unwrap_or(0) as f64 / 1e9;
                }
                for (i, c) in crossings.iter_mut().enumerate() {
                    *c += s["engine"]["crossings"][i].as_u64().unwrap_or(0);
                }
                // What XDP finished: encapsulated at the ingress node (0 crossings), or
                // finished off the fabric (1, or 2 under hash partitioning).
                crossings[0] += s["xdp"]["counters"]["to_ran"].as_u64().unwrap_or(0);
                crossings[1] += s["xdp"]["counters"]["fabric_to_ran"].as_u64().unwrap_or(0);
                crossings[2] += s["xdp"]["counters"]["fabric_to_ran_2"]
                    .as_u64()
                    .unwrap_or(0);
                for (k, v) in s["xdp"]["counters"].as_object().into_iter().flatten() {
                    let e = xdp.entry(k.clone()).or_insert(json!(0));
                    *e = json!(e.as_u64().unwrap_or(0) + v.as_u64().unwrap_or(0));
                }
                for (port, mode) in s["xdp"]["attached"].as_object().into_iter().flatten() {
                    xdp_modes.push(format!(
                        "node{} {port} {}",
                        s["node"],
                        mode.as_str().unwrap_or("?")
                    ));
                }
                for (k, v) in s["engine"]["drops"].as_object().into_iter().flatten() {
                    let e = drops.entry(k.clone()).or_insert(json!(0));
                    *e = json!(e.as_u64().unwrap_or(0) + v.as_u64().unwrap_or(0));
                }
                fib_entries += s["tables"]["fib_entries"].as_u64().unwrap_or(0);
                fib_bytes += s["tables"]["fib_bytes"].as_u64().unwrap_or(0);
                gpt_bytes = gpt_bytes.max(s["tables"]["gpt_bytes"].as_u64().unwrap_or(0));
            }
            let unique: u64 = reports
                .iter()
                .map(|r| r["unique"].as_u64().unwrap_or(0))
                .sum();
            let dups: u64 = reports
                .iter()
                .map(|r| r["duplicates"].as_u64().unwrap_or(0))
                .sum();
            let bad: u64 = reports
                .iter()
                .map(|r| r["malformed"].as_u64().unwrap_or(0))
                .sum();
            let sent: u64 = sent_to.iter().sum();
            // Per node: what its sink got of the packets of its own tunnels, and packets that
            // reached its RAN side though another node handles them.
            let at_node = |r: &Value| r["unique"].as_u64().unwrap_or(0);
            let delivered: u64 = reports
                .iter()
                .zip(&sent_to)
                .map(|(r, &s)| at_node(r).min(s))
                .sum();
            let misrouted: u64 = reports
                .iter()
                .zip(&sent_to)
                .map(|(r, &s)| at_node(r).saturating_sub(s))
                .sum();
            let n: u64 = crossings.iter().sum();
            let mean = if n == 0 {
                0.0
            } else {
                (crossings[1] + 2 * crossings[2] + 3 * crossings[3]) as f64 / n as f64
            };
            let nn = f64::from(a.nodes);
            Ok(json!({
                "arch": arch.label(),
                "io": a.io.as_str(),
                "xdp": (a.io == Io::XdpFast).then(|| json!({"counters": xdp, "attached": xdp_modes})),
                "mpps_per_core": sent as f64 / cpu.max(1e-9) / 1e6,
                "note": "packets per node CPU second at the generator's rate (nodes idle most of the time): not a peak rate; bench node measures that",
                "node_cpu_seconds": cpu,
                "mean_fabric_crossings": mean,
                "crossings": crossings,
                "fib_entries_per_node": fib_entries as f64 / nn,
                "fib_bytes_per_node": fib_bytes as f64 / nn,
                "gpt_bytes": gpt_bytes,
                "drops": drops,
                "sent": sent,
                "received": unique,
                "lost": sent.saturating_sub(delivered),
                "wrong": dups + bad + misrouted,
                "duplicates": dups,
                "malformed": bad,
                "misrouted": misrouted,
                "latency_p50_us": reports.iter().filter_map(|r| r["latency_us"]["p50"].as_f64()).fold(0.0, f64::max),
            }))
        })();
        let down = run_ok(&["cluster", "down", "--dir", &d]);
        let row = result?;
        down?;
        if row["lost"].as_u64() != Some(0) || row["wrong"].as_u64() != Some(0) {
            failed.push(format!(
                "{arch}: lost {} wrong {}",
                row["lost"], row["wrong"]
            ));
        }
        rows.push(row);
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"mode": "netns", "nodes": a.nodes, "flows": a.flows, "packets": packets, "results": rows, "ok": failed.is_empty()})
            )?
        );
    } else {
        super::demo::print_table(&rows);
        for r in &rows {
            println!(
                "{:<12} sent {} received {} at the handling node's RAN side, lost {}, misrouted {}, duplicates {}, malformed {}, latency p50 {:.0} us",
                r["arch"].as_str().unwrap_or(""),
                r["sent"],
                r["received"],
                r["lost"],
                r["misrouted"],
                r["duplicates"],
                r["malformed"],
                r["latency_p50_us"].as_f64().unwrap_or(0.0)
            );
        }
        for r in rows.iter().filter(|r| !r["xdp"].is_null()) {
            let c = &r["xdp"]["counters"];
            println!(
                "{:<12} XDP fast path ({}): {} frames encapsulated at their ingress node, {} sent over the fabric, {} uplink decapsulated, {} passed to the engine",
                r["arch"].as_str().unwrap_or(""),
                r["xdp"]["attached"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                c["to_ran"].as_u64().unwrap_or(0),
                c["to_fabric"].as_u64().unwrap_or(0),
                c["up_to_inet"].as_u64().unwrap_or(0),
                c["slow"].as_u64().unwrap_or(0)
            );
        }
        println!("(namespaces: Mpps per node CPU second at the generator's {rate} pps, the nodes idle most of the time: not a peak rate, which `scalebricks bench node` measures)");
    }
    if !failed.is_empty() {
        bail!("checks failed: {}", failed.join("; "));
    }
    if !a.json {
        println!("every packet came out once, at its handling node's RAN side (GTP-U, stamp intact); nothing lost, duplicated or malformed");
    }
    Ok(())
}
