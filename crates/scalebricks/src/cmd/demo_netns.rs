//! `scalebricks demo --netns`: the demo's comparison on real node processes in network
//! namespaces. For each architecture: `cluster up` (a fresh cluster with the same seed, so the
//! same tunnels), a `sink` on every node's RAN side, `gen` sending stamped downstream packets
//! to the tunnels' UE addresses into every node's `inet`, then the nodes' counters and CPU
//! time, and `cluster down`. Needs root.

use anyhow::{bail, ensure, Context, Result};
use sb_engine::Arch;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NetnsArgs {
    pub nodes: u16,
    pub flows: usize,
    pub packets: usize,
    pub seed: u64,
    pub json: bool,
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

pub fn run(a: &NetnsArgs, archs: &[Arch]) -> Result<()> {
    ensure!(
        sb_io::netns::is_root(),
        "--netns needs root (network namespaces)"
    );
    let packets = a.packets.min(200_000);
    let rate = 5000.0f64;
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
        run_ok(&[
            "cluster",
            "up",
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
        ])?;
        let result = (|| -> Result<Value> {
            let secs = (packets as f64 / rate).ceil() as u64 + 4;
            let mut sinks = Vec::new();
            for k in 0..a.nodes {
                let c = Command::new(me()?)
                    .args([
                        "sink",
                        "--dir",
                        &d,
                        "--node",
                        &k.to_string(),
                        "--side",
                        "ran",
                    ])
                    .args(["--duration", &secs.to_string(), "--json"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()?;
                sinks.push(c);
            }
            std::thread::sleep(Duration::from_millis(700));
            let flows_csv = format!("{d}/flows.csv");
            let g = run_ok(&[
                "gen",
                "--dir",
                &d,
                "--flows",
                &flows_csv,
                "--count",
                &packets.to_string(),
                "--rate",
                &rate.to_string(),
                "--to",
                "all",
                "--nodes",
                &nodes,
                "--seed",
                &seed,
            ])?;
            let g: Value = serde_json::from_str(g.trim()).context("gen output")?;
            let reports: Vec<Value> = sinks
                .into_iter()
                .map(|c| wait_json(c, Duration::from_secs(secs + 20)))
                .collect::<Result<_>>()?;
            let status: Value =
                serde_json::from_str(&run_ok(&["cluster", "status", "--dir", &d])?)?;
            let mut cpu = 0.0;
            let (mut crossings, mut drops) = ([0u64; 4], serde_json::Map::new());
            let (mut fib_entries, mut fib_bytes, mut gpt_bytes) = (0u64, 0u64, 0u64);
            for s in status["node_status"].as_array().into_iter().flatten() {
                if let Some(pid) = s["pid"].as_i64() {
                    cpu += sb_io::cpu::pid_runtime_ns(pid as i32).unwrap_or(0) as f64 / 1e9;
                }
                for (i, c) in crossings.iter_mut().enumerate() {
                    *c += s["engine"]["crossings"][i].as_u64().unwrap_or(0);
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
            let sent = g["sent"].as_u64().unwrap_or(0);
            let n: u64 = crossings.iter().sum();
            let mean = if n == 0 {
                0.0
            } else {
                (crossings[1] + 2 * crossings[2] + 3 * crossings[3]) as f64 / n as f64
            };
            let nn = f64::from(a.nodes);
            Ok(json!({
                "arch": arch.label(),
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
                "lost": sent.saturating_sub(unique),
                "wrong": dups + bad,
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
        println!("(namespaces: Mpps per node CPU second at the generator's {rate} pps, the nodes idle most of the time: not a peak rate, which `scalebricks bench node` measures)");
    }
    if !failed.is_empty() {
        bail!("checks failed: {}", failed.join("; "));
    }
    Ok(())
}
