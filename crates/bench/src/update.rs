//! `scalebricks bench update`: what an update costs (the paper's update rate, section 6.2).
//!
//! Two parts, in one JSON object:
//! - **Owner work per core** (no network): the GPT owner's part of an update, one thread. An
//!   [`Updatable`] of `--keys` keys (16-byte UE keys, values = handling node of `--nodes`,
//!   16+8), sized with 2x headroom; then `--updates` updates (half inserts of new keys, half
//!   moves of existing keys to another node), fed to [`Updatable::insert_batch`] in batches of
//!   each `--batch` size; every delta is serialized as the control protocol sends it. Rows:
//!   `owner_kops_per_core` and `delta_bytes_per_update` per batch size.
//! - **The cluster** (root, `--cluster`): a `--nodes`-node namespace cluster with the control
//!   plane (`cluster up`), once per replication factor of `--replicas` (default 1 then 3, one
//!   cluster after the other in the same run: `cluster_runs`, and `replicated_kops_ratio`, the
//!   rate with the most replicas over the rate with the fewest; `cluster`, `cluster_kops` and
//!   the propagation fields are the run with the most), `--cluster-updates` inserts sent by
//!   one `scalebricks update` client per node at once (`cluster_kops`: acknowledged updates per second over the slowest
//!   client's time; each acknowledgment comes after the owner's log commit, the handling
//!   node's FIB install and every node's GPT), then a paced client at 10% of that rate with one
//!   update per request: `propagation_p50_ms` / `propagation_p99_ms` are its request-to-
//!   acknowledgment times, an upper bound of the delta's propagation to every node (the
//!   acknowledgment waits for every node's GPT ack). `cluster.cpu` says where the burst's CPU
//!   time went (the machine's busy and I/O-wait shares from `/proc/stat`, the node processes'
//!   own CPU time) and names the limit: the cores when they were at least 90% busy.
//!   `cluster.retransmits`: what the nodes resent during the burst (deltas, FIB items,
//!   pieces, forwards: a timeout shorter than the loaded cluster's round trips shows here).

use anyhow::{bail, ensure, Context, Result};
use rand::{Rng, SeedableRng};
use sb_setsep::{BuildOptions, Config, Updatable};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Keys in the owner's table.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Updates per batch size.
    #[arg(long, default_value_t = 200_000)]
    updates: usize,
    /// Batch sizes (comma separated).
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    batch: Vec<usize>,
    /// Nodes (values of the GPT; nodes of the cluster).
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// Also measure a namespace cluster (root).
    #[arg(long)]
    cluster: bool,
    /// Initial flows of the cluster.
    #[arg(long, default_value_t = 100_000)]
    cluster_flows: usize,
    /// Inserts sent to the cluster (split over one client per node).
    #[arg(long, default_value_t = 200_000)]
    cluster_updates: usize,
    /// Updates of the paced propagation run.
    #[arg(long, default_value_t = 2_000)]
    paced_updates: usize,
    /// Replication factors of the cluster runs (comma separated; `cluster up --replicas`):
    /// one cluster per factor, one after the other in this run; the JSON has a row per
    /// factor and each row's rate as a share of the first's.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    replicas: Vec<usize>,
    /// Seed of keys and updates.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object (pretty).
    #[arg(long)]
    json: bool,
}

fn ue_key(i: u64) -> [u8; 16] {
    // IPv4-mapped addresses in 100.64.0.0/10, as the LTE application keys them.
    let a = 0x6440_0000u32 | (i as u32 & 0x003f_ffff);
    sb_engine::lte::ue_key(std::net::IpAddr::V4(a.into()))
}

/// The owner's work per core for one batch size.
fn owner(a: &Args, batch: usize) -> Result<Value> {
    let n = a.keys;
    let keys: Vec<[u8; 16]> = (0..n as u64).map(ue_key).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let nodes = a.nodes.max(2);
    let values: Vec<u16> = (0..n).map(|i| (i % nodes as usize) as u16).collect();
    let opts = BuildOptions {
        config: Config::C16_8,
        value_bits: sb_engine::cluster::value_bits(nodes.into()),
        threads: 0,
        seed: a.seed,
        build_id: a.seed,
        capacity: (n as u64 + a.updates as u64) * 2,
        ..BuildOptions::default()
    };
    let mut u = Updatable::build(&refs, &values, &opts).context("building the owner's table")?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed ^ batch as u64);
    // Half inserts of new keys, half moves of existing keys to another node.
    let mut next_new = n as u64;
    let ups: Vec<([u8; 16], u16)> = (0..a.updates)
        .map(|i| {
            if i % 2 == 0 {
                next_new += 1;
                (ue_key(next_new), rng.gen_range(0..nodes))
            } else {
                let k = rng.gen_range(0..n as u64);
                let v = ((k as usize % nodes as usize + 1) % nodes as usize) as u16;
                (ue_key(k), v)
            }
        })
        .collect();
    let mut delta_bytes = 0u64;
    let mut deltas = 0u64;
    let t0 = Instant::now();
    for chunk in ups.chunks(batch) {
        let items: Vec<(&[u8], u16)> = chunk.iter().map(|(k, v)| (&k[..], *v)).collect();
        u.insert_batch(&items, |d| {
            delta_bytes += d.to_bytes().len() as u64;
            deltas += 1;
        })
        .map_err(|e| anyhow::anyhow!("update: {e}"))?;
    }
    let secs = t0.elapsed().as_secs_f64();
    Ok(json!({
        "batch": batch,
        "updates": a.updates,
        "owner_kops_per_core": a.updates as f64 / secs / 1e3,
        "delta_bytes_per_update": delta_bytes as f64 / a.updates as f64,
        "deltas": deltas,
        "seconds": secs,
        "fallback_keys": u.table().stats().fallback_keys,
    }))
}

/// The `scalebricks` binary next to this one.
pub(crate) fn me() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let p = exe.with_file_name("scalebricks");
    ensure!(
        p.exists(),
        "{} not found: build it with `cargo build --release -p scalebricks`",
        p.display()
    );
    Ok(p)
}

pub(crate) fn scalebricks<S: AsRef<str>>(args: &[S]) -> Result<String> {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let out = Command::new(me()?)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running scalebricks {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "scalebricks {} failed: {} {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The UE addresses of the pool (`100.64.0.0/10` from its start: (index, address)) that no
/// flow of the flows CSV `flows` has (those are spread over the pool).
pub(crate) fn fresh_ues(flows: &str) -> impl Iterator<Item = (u64, std::net::Ipv4Addr)> {
    let taken: std::collections::HashSet<String> = (flows.lines())
        .filter_map(|l| l.split(',').next())
        .map(String::from)
        .collect();
    (0u64..0x0040_0000)
        .map(|n| (n, std::net::Ipv4Addr::from(0x6440_0000u32 | n as u32)))
        .filter(move |(_, ue)| !taken.contains(&ue.to_string()))
}

/// `count` inserts of new UEs (the next addresses of `fresh`), spread over the `handlers`, as
/// an update CSV.
pub(crate) fn inserts_csv(
    path: &std::path::Path,
    fresh: &mut impl Iterator<Item = (u64, std::net::Ipv4Addr)>,
    count: usize,
    handlers: &[u16],
) -> Result<()> {
    let mut s = String::from("op,ue,teid,enb,node\n");
    for _ in 0..count {
        let (n, ue) = fresh.next().context("the UE pool is used up")?;
        let node = handlers[(n % handlers.len() as u64) as usize];
        s.push_str(&format!(
            "insert,{ue},{},10.2.{node}.2,{node}\n",
            0xb000_0000u64 + n
        ));
    }
    std::fs::write(path, s).with_context(|| path.display().to_string())
}

/// The machine's CPU time so far, in seconds of all cores together, from the first line of
/// `/proc/stat`: `(busy, iowait, softirq, idle)`, busy counting user, nice, system, irq, softirq
/// and steal.
fn machine_cpu() -> Result<[f64; 4]> {
    let s = std::fs::read_to_string("/proc/stat").context("/proc/stat")?;
    let f: Vec<f64> = s
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .context("/proc/stat without a cpu line")?
        .split_whitespace()
        .map(|x| x.parse::<f64>().map(|t| t / 100.0)) // USER_HZ, as in pfcp::cpu
        .collect::<Result<_, _>>()?;
    ensure!(f.len() >= 8, "short cpu line in /proc/stat");
    let busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7];
    Ok([busy, f[4], f[6], f[3]])
}

/// Node processes' CPU seconds (user + system, all threads) so far.
fn nodes_cpu(pids: &[u64]) -> Result<f64> {
    pids.iter().try_fold(0.0, |acc, p| {
        let (u, s) = crate::pfcp::cpu(&p.to_string())?;
        Ok(acc + u + s)
    })
}

/// Where the CPU time of the burst went, and whether the machine's cores were the limit.
fn cpu_report(m0: [f64; 4], m1: [f64; 4], nodes: f64, wall: f64, acked: u64) -> Value {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let d = |i: usize| (m1[i] - m0[i]).max(0.0);
    let (busy, iowait, softirq, idle) = (d(0), d(1), d(2), d(3));
    let total = (busy + iowait + idle).max(1e-9);
    let busy_share = busy / total;
    let per = |x: f64| x * 1e6 / acked.max(1) as f64;
    // Clients, kernel threads and whatever else ran on the machine.
    let rest = (busy - nodes).max(0.0);
    let limit = if busy_share >= 0.9 {
        format!(
            "cpu: the {cores} cores were {:.0}% busy during the burst ({:.1} us of CPU per \
             update: node processes {:.1}, the rest (clients, kernel, other jobs) {:.1})",
            busy_share * 100.0,
            per(busy),
            per(nodes),
            per(rest)
        )
    } else {
        format!(
            "not the cores: {:.0}% busy, {:.0}% idle and {:.0}% waiting for I/O during the burst",
            busy_share * 100.0,
            idle / total * 100.0,
            iowait / total * 100.0
        )
    };
    json!({
        "seconds": wall,
        "cores": cores,
        "busy_share": busy_share,
        "iowait_share": iowait / total,
        "busy_cpu_s": busy,
        "nodes_cpu_s": nodes,
        "softirq_cpu_s": softirq,
        "rest_cpu_s": rest,
        "cpu_us_per_update": per(busy),
        "nodes_cpu_us_per_update": per(nodes),
        "limit": limit,
    })
}

/// Retransmissions (deltas, FIB items, pieces, forwards) of every node so far.
fn retransmits(status: &Value) -> i64 {
    status["nodes"]
        .as_array()
        .map(|ns| ns.iter().filter_map(|n| n["retransmits"].as_i64()).sum())
        .unwrap_or(0)
}

/// One cluster run with `replicas` replicas per range.
fn cluster(a: &Args, replicas: usize) -> Result<Value> {
    ensure!(sb_io::netns::is_root(), "bench update --cluster needs root");
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("state");
    let d = dir.to_str().context("temporary path")?.to_string();
    let name = format!("sbu{}", std::process::id() % 100_000);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    scalebricks(&s(&[
        "cluster",
        "up",
        "--nodes",
        &a.nodes.to_string(),
        "--name",
        &name,
        "--dir",
        &d,
        "--flows",
        &a.cluster_flows.to_string(),
        "--seed",
        &a.seed.to_string(),
        "--capacity",
        &((a.cluster_flows + a.cluster_updates + a.paced_updates) * 2).to_string(),
        "--replicas",
        &replicas.to_string(),
    ]))?;
    let r = (|| -> Result<Value> {
        let flows = std::fs::read_to_string(dir.join("flows.csv")).context("flows.csv")?;
        let mut fresh = fresh_ues(&flows);
        let all: Vec<u16> = (0..a.nodes).collect();
        let per = a.cluster_updates / a.nodes as usize;
        let mut files = Vec::new();
        for i in 0..a.nodes as usize {
            let p = tmp.path().join(format!("ins{i}.csv"));
            inserts_csv(&p, &mut fresh, per, &all)?;
            files.push(p);
        }
        let st0 = crate::pfcp::status(&d)?;
        let pids = crate::pfcp::pids(&st0)?;
        let (m0, n0) = (machine_cpu()?, nodes_cpu(&pids)?);
        let t0 = Instant::now();
        let outs: Vec<Result<String>> = std::thread::scope(|sc| {
            let hs: Vec<_> = files
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let args = s(&[
                        "update",
                        "--dir",
                        &d,
                        "--node",
                        &i.to_string(),
                        "--input",
                        p.to_str().unwrap_or_default(),
                    ]);
                    sc.spawn(move || scalebricks(&args))
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail!("client thread panicked")))
                .collect()
        });
        let wall = t0.elapsed().as_secs_f64();
        let (m1, n1) = (machine_cpu()?, nodes_cpu(&pids)?);
        let mut acked = 0u64;
        let mut slowest = 0f64;
        for o in outs {
            let v: Value = serde_json::from_str(o?.trim()).context("update output")?;
            acked += v["acked"].as_u64().unwrap_or(0);
            slowest = slowest.max(v["seconds"].as_f64().unwrap_or(wall));
        }
        let cluster_kops = acked as f64 / slowest / 1e3;
        let cpu = cpu_report(m0, m1, n1 - n0, wall, acked);
        // Retransmissions of the burst, from the nodes' published status (it lags by up to
        // 200 ms).
        std::thread::sleep(std::time::Duration::from_millis(300));
        let retransmits = retransmits(&crate::pfcp::status(&d)?) - retransmits(&st0);
        // Propagation at 10% of that rate, one update per request.
        let p = tmp.path().join("paced.csv");
        inserts_csv(&p, &mut fresh, a.paced_updates, &all)?;
        let rate = (cluster_kops * 1e3 * 0.1).max(1.0);
        let v: Value = serde_json::from_str(
            scalebricks(&s(&[
                "update",
                "--dir",
                &d,
                "--node",
                "0",
                "--input",
                p.to_str().unwrap_or_default(),
                "--batch",
                "1",
                "--window",
                "64",
                "--rate",
                &format!("{rate}"),
            ]))?
            .trim(),
        )?;
        Ok(json!({
            "nodes": a.nodes,
            "replicas": replicas,
            "initial_flows": a.cluster_flows,
            "cluster_updates": acked,
            "cluster_seconds": slowest,
            "cluster_kops": cluster_kops,
            "retransmits": retransmits,
            "paced_rate_per_s": rate,
            "paced_updates": v["acked"],
            "propagation_p50_ms": v["ack_ms"]["p50"],
            "propagation_p99_ms": v["ack_ms"]["p99"],
            "cpu": cpu,
        }))
    })();
    let down = scalebricks(&s(&["cluster", "down", "--dir", &d]));
    let r = r?;
    down?;
    Ok(r)
}

pub fn run(a: Args) -> Result<()> {
    ensure!(
        a.keys >= 2 && a.updates >= 1,
        "--keys and --updates must be positive"
    );
    let mut rows = Vec::new();
    for &b in &a.batch {
        ensure!(b >= 1, "batch sizes must be at least 1");
        let r = owner(&a, b)?;
        if !a.json {
            eprintln!(
                "owner, batch {b:>4}: {:.0} K updates/s per core, {:.1} delta bytes per update",
                r["owner_kops_per_core"].as_f64().unwrap_or(0.0),
                r["delta_bytes_per_update"].as_f64().unwrap_or(0.0)
            );
        }
        rows.push(r);
    }
    let best = rows
        .iter()
        .filter_map(|r| r["owner_kops_per_core"].as_f64())
        .fold(0.0, f64::max);
    let dbytes = rows
        .last()
        .and_then(|r| r["delta_bytes_per_update"].as_f64())
        .unwrap_or(0.0);
    let mut runs: Vec<Value> = Vec::new();
    if a.cluster {
        ensure!(
            !a.replicas.is_empty() && a.replicas.iter().all(|&r| r >= 1),
            "--replicas needs factors of at least 1"
        );
        for &r in &a.replicas {
            let mut v = cluster(&a, r)?;
            if !a.json {
                eprintln!(
                    "cluster, {r} replica(s): {:.1} K updates/s, propagation p99 {} ms",
                    v["cluster_kops"].as_f64().unwrap_or(0.0),
                    v["propagation_p99_ms"]
                );
            }
            let base = runs.first().unwrap_or(&v)["cluster_kops"]
                .as_f64()
                .unwrap_or(0.0);
            let kops = v["cluster_kops"].as_f64().unwrap_or(0.0);
            v["kops_vs_first"] = json!(if base > 0.0 { kops / base } else { 0.0 });
            runs.push(v);
        }
    }
    // The rate and propagation of the run with the most replicas, and that rate as a share
    // of the run with the fewest (the target: R=3 at 60% of R=1 or more).
    let most = runs
        .iter()
        .max_by_key(|r| r["replicas"].as_u64().unwrap_or(0));
    let fewest = runs
        .iter()
        .min_by_key(|r| r["replicas"].as_u64().unwrap_or(0));
    let ratio = match (most, fewest) {
        (Some(m), Some(f)) if f["cluster_kops"].as_f64().unwrap_or(0.0) > 0.0 => Some(
            m["cluster_kops"].as_f64().unwrap_or(0.0) / f["cluster_kops"].as_f64().unwrap_or(1.0),
        ),
        _ => None,
    };
    let cl = most.cloned();
    let v = json!({
        "benchmark": "update",
        "keys": a.keys,
        "owner_kops_per_core": best,
        "delta_bytes_per_update": dbytes,
        "owner": rows,
        "cluster": cl,
        "cluster_runs": runs,
        "replicated_kops_ratio": ratio,
        "replicated_kops_ratio_of": most.zip(fewest).map(|(m, f)| json!([m["replicas"], f["replicas"]])),
        "cluster_kops": cl.as_ref().map(|c| c["cluster_kops"].clone()),
        "propagation_p50_ms": cl.as_ref().map(|c| c["propagation_p50_ms"].clone()),
        "propagation_p99_ms": cl.as_ref().map(|c| c["propagation_p99_ms"].clone()),
        "cluster_limit": cl.as_ref().map(|c| c["cpu"]["limit"].clone()),
    });
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
