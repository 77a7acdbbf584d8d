//! `scalebricks bench pfcp` (root): how fast a namespace cluster takes PFCP sessions, and what a
//! session costs in memory.
//!
//! `cluster up` with the control plane (`--nodes`, `--flows` initial flows, capacity for the
//! sessions), then `scalebricks smf-sim` (our load generator: an SMF in the control namespace
//! establishing `--sessions` sessions over real UDP, spread over every node, `--window`
//! outstanding per node; each response is checked) and the nodes' resident memory before and
//! after (`VmRSS` of each node process). One JSON object:
//! - `sessions_per_s`, `latency_ms` (`p50`, `p99`): from `smf-sim`;
//! - `rss_bytes_per_session`: per node, (RSS after - RSS before) / the sessions that node
//!   handles and holds (the growth of its state: the PFCP session's rules on the node that
//!   took it, the RIB entry at the owner, the FIB and uplink entries at the handling node;
//!   the tables themselves are allocated for the capacity at start);
//! - `table_bytes_per_session`: the bound the issue names, the node's GPT bytes over the
//!   cluster's sessions plus its FIB slice and uplink table bytes over its sessions (both
//!   allocated for the capacity, so this is the cost at the capacity: `--capacity` near the
//!   sessions makes it the cost per session).
//! - `cpu_us_per_session`: CPU time per established session, measured: the nodes' user and
//!   system time (`utime`/`stime` of every node process over the run, all its threads) and the
//!   generator's (its `getrusage`), summed over the cluster; `cpu_bound_sessions_per_s` is the
//!   rate the machine's cores would give were they all busy with nothing else (cores x 10^6 /
//!   the total): the ceiling of the rate on this machine, computed, not measured;
//!   `kernel_bound_sessions_per_s` the same from the system time alone (the nodes' and the
//!   generator's): the ceiling were the user-space work free, computed, not measured;
//! - `estimate_rss_bytes_per_node_10m_sessions_4_nodes`: an estimate, not a measurement: the
//!   mean node's RSS before the sessions plus 2.5M times its growth per session;
//!   `..._log_compacted` the same with the Raft log entries the nodes hold (`held_bytes_per_session`'s
//!   `raft_logs`, which a run of this size may not yet have compacted) replaced by what a
//!   checkpoint leaves: the snapshots' copy of the state records (`state_records`) and up to
//!   64 MiB of entries (the default checkpoint threshold). Also an estimate.
//!
//! `--replicas R` and `--detect-ms MS` are passed to `cluster up` (not given: its defaults, 3
//! replicas with 3 nodes or more and 500 ms); each run's `replicas` and `detect_ms` are what
//! node 0's control file says.
//!
//! `--pfcp-state durable,volatile` measures each shape with the sessions as the GPT ranges'
//! durable, replicated records (`durable`, the default) and in the endpoints' memory only
//! (`cluster up --pfcp-volatile`), each on fresh clusters; each run says its `pfcp_state`, and
//! the object adds `rate_ratio_durable_to_volatile` per shape.
//!
//! `--shapes minimal,open5gs` (the default) runs the measurement once per request shape, each
//! on a fresh cluster of the same size (`smf-sim --shape`: today's minimal request, and the
//! request open5gs's SMF sends: four PDRs, three FARs, a URR, a QER, a BAR), and prints
//! `{"benchmark": "pfcp", "runs": [one object as above per shape, with its "shape"],
//! "rate_ratio_open5gs_to_minimal": ..., "target_rate_ratio": 0.6}`; one shape prints its
//! object alone.

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

use crate::update::scalebricks;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Nodes of the cluster.
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// Sessions to establish.
    #[arg(long, default_value_t = 100_000)]
    sessions: u32,
    /// Initial flows of the cluster (flows.csv).
    #[arg(long, default_value_t = 1000)]
    flows: u64,
    /// Requests outstanding per node.
    #[arg(long, default_value_t = 128)]
    window: usize,
    /// The cluster's capacity (default: 1.25 x (flows + sessions)).
    #[arg(long)]
    capacity: Option<u64>,
    /// Seed of the cluster.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Request shapes to measure, each on its own cluster (`smf-sim --shape`).
    #[arg(long, value_delimiter = ',', default_value = "minimal,open5gs")]
    shapes: Vec<String>,
    /// Each range's replicas (`cluster up --replicas`; default: cluster up's, 3 with 3 nodes
    /// or more).
    #[arg(long)]
    replicas: Option<usize>,
    /// Failure detection's time (`cluster up --detect-ms`; default: cluster up's, 500 ms).
    #[arg(long)]
    detect_ms: Option<u64>,
    /// Where the sessions live, each measured on its own clusters: `durable` (the GPT
    /// ranges' records, durable and replicated before each answer: the default of `cluster
    /// up`) and `volatile` (`cluster up --pfcp-volatile`: in the endpoint's memory only).
    #[arg(long, value_delimiter = ',', default_value = "durable")]
    pfcp_state: Vec<String>,
    /// Print one JSON object (pretty).
    #[arg(long)]
    json: bool,
}

/// VmRSS of `pid` in bytes.
fn rss(pid: u64) -> Result<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("/proc/{pid}/status"))?;
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<u64>().ok())
        .context("no VmRSS")?;
    Ok(kb * 1024)
}

/// User and system CPU seconds of process `pid` so far (all its threads).
pub(crate) fn cpu(pid: &str) -> Result<(f64, f64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("/proc/{pid}/stat"))?;
    // The fields after the command name (which may hold spaces) in parentheses; utime and
    // stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let rest = s
        .rsplit_once(')')
        .context("/proc/PID/stat without a name")?
        .1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks =
        |i: usize| -> Result<f64> { Ok(f.get(i).context("short /proc/PID/stat")?.parse::<f64>()?) };
    // In USER_HZ, 100 on x86 and ARM Linux (the crate has no unsafe for sysconf).
    Ok((ticks(11)? / 100.0, ticks(12)? / 100.0))
}

pub(crate) fn status(d: &str) -> Result<Value> {
    let s = scalebricks(&["cluster", "status", "--dir", d, "--json"].map(String::from))?;
    serde_json::from_str(s.trim()).context("cluster status output")
}

/// Waits until every node is ready with the same GPT digest; the status.
pub(crate) fn converged(d: &str, timeout: Duration) -> Result<Value> {
    let t0 = Instant::now();
    loop {
        let st = status(d)?;
        let rows = st["nodes"].as_array().cloned().unwrap_or_default();
        let d0 = rows.first().map(|r| r["gpt_digest"].clone());
        if !rows.is_empty()
            && rows.iter().all(|r| r["up"] == true && r["ready"] == true)
            && rows.iter().all(|r| Some(&r["gpt_digest"]) == d0.as_ref())
        {
            return Ok(st);
        }
        ensure!(
            t0.elapsed() < timeout,
            "the cluster did not converge in {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub(crate) fn pids(st: &Value) -> Result<Vec<u64>> {
    st["nodes"]
        .as_array()
        .context("status without nodes")?
        .iter()
        .map(|r| r["pid"].as_u64().context("a node without pid"))
        .collect()
}

pub fn run(a: Args) -> Result<()> {
    ensure!(sb_io::netns::is_root(), "bench pfcp needs root");
    ensure!(
        a.nodes >= 1 && a.sessions >= 1,
        "--nodes and --sessions must be positive"
    );
    ensure!(!a.shapes.is_empty(), "--shapes names none");
    for s in &a.shapes {
        ensure!(
            matches!(s.as_str(), "minimal" | "open5gs"),
            "--shapes: unknown shape `{s}` (minimal, open5gs)"
        );
    }
    ensure!(!a.pfcp_state.is_empty(), "--pfcp-state names none");
    for s in &a.pfcp_state {
        ensure!(
            matches!(s.as_str(), "durable" | "volatile"),
            "--pfcp-state: unknown `{s}` (durable, volatile)"
        );
    }
    let mut runs = Vec::new();
    for state in &a.pfcp_state {
        for shape in &a.shapes {
            let mut r = one(&a, shape, state == "volatile")?;
            r["pfcp_state"] = json!(state);
            runs.push(r);
        }
    }
    let r = if runs.len() == 1 {
        runs.pop().expect("one")
    } else {
        let rate = |state: &str, shape: &str| {
            (runs.iter())
                .find(|r| r["shape"] == shape && r["pfcp_state"] == state)
                .and_then(|r| r["sessions_per_s"].as_f64())
        };
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(x), Some(y)) if y > 0.0 => json!(x / y),
            _ => Value::Null,
        };
        let first = a.pfcp_state[0].as_str();
        let durable_to_volatile: serde_json::Map<String, Value> = (a.shapes.iter())
            .map(|s| {
                let r = ratio(rate("durable", s), rate("volatile", s));
                (s.clone(), r)
            })
            .collect();
        json!({
            "benchmark": "pfcp",
            "runs": runs,
            "rate_ratio_open5gs_to_minimal": ratio(rate(first, "open5gs"), rate(first, "minimal")),
            "target_rate_ratio": 0.6,
            "rate_ratio_durable_to_volatile": durable_to_volatile,
        })
    };
    println!(
        "{}",
        if a.json {
            serde_json::to_string_pretty(&r)?
        } else {
            serde_json::to_string(&r)?
        }
    );
    Ok(())
}

/// One measurement: a fresh cluster, `smf-sim --shape shape`, the cluster down.
fn one(a: &Args, shape: &str, volatile: bool) -> Result<Value> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("state");
    let d = dir.to_str().context("temporary path")?.to_string();
    let name = format!("sbp{}", std::process::id() % 100_000);
    let capacity = a
        .capacity
        .unwrap_or((a.flows + u64::from(a.sessions)) * 5 / 4);
    let t_up = Instant::now();
    let mut up = vec![
        "cluster".to_string(),
        "up".into(),
        "--nodes".into(),
        a.nodes.to_string(),
        "--name".into(),
        name,
        "--dir".into(),
        d.clone(),
        "--flows".into(),
        a.flows.to_string(),
        "--seed".into(),
        a.seed.to_string(),
        "--capacity".into(),
        capacity.to_string(),
    ];
    if let Some(r) = a.replicas {
        up.extend(["--replicas".into(), r.to_string()]);
    }
    if let Some(ms) = a.detect_ms {
        up.extend(["--detect-ms".into(), ms.to_string()]);
    }
    if volatile {
        up.push("--pfcp-volatile".into());
    }
    if capacity > 3_000_000 {
        // Room in the UE pool for the initial flows (the sessions' UEs are outside it).
        up.extend(["--ue-pool".into(), "100.0.0.0/7".into()]);
    }
    scalebricks(&up)?;
    let r = (|| -> Result<Value> {
        let before_st = converged(&d, Duration::from_secs(120))?;
        let control: Value = std::fs::read_to_string(format!("{d}/node0.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default();
        let (replicas, detect_ms) = (
            control["control"]["replicas"].clone(),
            control["control"]["detect_ms"].clone(),
        );
        let up_secs = t_up.elapsed().as_secs_f64();
        let pid = pids(&before_st)?;
        let before: Vec<u64> = pid.iter().map(|&p| rss(p)).collect::<Result<_>>()?;
        let cpu_before: Vec<(f64, f64)> = pid
            .iter()
            .map(|p| cpu(&p.to_string()))
            .collect::<Result<_>>()?;
        let out = scalebricks(&[
            "smf-sim".into(),
            "--dir".into(),
            d.clone(),
            "--sessions".into(),
            a.sessions.to_string(),
            "--window".into(),
            a.window.to_string(),
            "--timeout".into(),
            (600 + u64::from(a.sessions) / 1000).to_string(),
            "--shape".into(),
            shape.into(),
        ])?;
        let sim: Value = serde_json::from_str(out.trim()).context("smf-sim output")?;
        let cpu_after: Vec<(f64, f64)> = pid
            .iter()
            .map(|p| cpu(&p.to_string()))
            .collect::<Result<_>>()?;
        let after_st = converged(&d, Duration::from_secs(60))?;
        ensure!(pids(&after_st)? == pid, "a node restarted during the run");
        let after: Vec<u64> = pid.iter().map(|&p| rss(p)).collect::<Result<_>>()?;
        let mut nodes = Vec::new();
        for (i, st) in after_st["node_status"]
            .as_array()
            .context("no node_status")?
            .iter()
            .enumerate()
        {
            let handled = sim["per_node"][i]["handled"].as_u64().unwrap_or(0).max(1);
            let t = &st["tables"];
            let gpt = t["gpt_bytes"].as_u64().unwrap_or(0) as f64;
            let fib = t["fib_bytes"].as_u64().unwrap_or(0) as f64;
            let upl = t["uplink_bytes"].as_u64().unwrap_or(0) as f64;
            let grown = after[i].saturating_sub(before[i]);
            let (user, system) = (
                cpu_after[i].0 - cpu_before[i].0,
                cpu_after[i].1 - cpu_before[i].1,
            );
            nodes.push(json!({
                "node": i,
                "sessions_handled": handled,
                "rss_before_bytes": before[i],
                "rss_after_bytes": after[i],
                "rss_bytes_per_session": grown as f64 / handled as f64,
                "cpu_user_seconds": user,
                "cpu_system_seconds": system,
                "gpt_bytes": gpt,
                "fib_bytes": fib,
                "uplink_bytes": upl,
                "table_bytes_per_session":
                    gpt / f64::from(a.sessions) + (fib + upl) / handled as f64,
                "memory": held(&st["control"]["status"]["memory"]),
            }));
        }
        // What the nodes count they hold, by structure, per session handled (mean over nodes).
        let mut held_per_session = serde_json::Map::new();
        for (i, n) in nodes.iter().enumerate() {
            let handled = sim["per_node"][i]["handled"].as_u64().unwrap_or(0).max(1) as f64;
            if let Some(m) = n["memory"].as_object() {
                for (k, v) in m {
                    let x = v.as_f64().unwrap_or(0.0) / handled / nodes.len() as f64;
                    let e = held_per_session.entry(k.clone()).or_insert(json!(0.0));
                    *e = json!(e.as_f64().unwrap_or(0.0) + x);
                }
            }
        }
        let per_session = |k: &str| {
            held_per_session
                .get(k)
                .and_then(Value::as_f64)
                .unwrap_or(0.0)
        };
        let mean = |k: &str| {
            nodes.iter().filter_map(|n| n[k].as_f64()).sum::<f64>() / nodes.len().max(1) as f64
        };
        let sum = |k: &str| nodes.iter().filter_map(|n| n[k].as_f64()).sum::<f64>();
        let per = |x: f64| x * 1e6 / f64::from(a.sessions);
        let (nu, ns) = (per(sum("cpu_user_seconds")), per(sum("cpu_system_seconds")));
        let gu = per(sim["cpu_seconds"]["user"].as_f64().unwrap_or(0.0));
        let gs = per(sim["cpu_seconds"]["system"].as_f64().unwrap_or(0.0));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cores_f = cores as f64;
        let total = nu + ns + gu + gs;
        let ceiling = |us: f64| if us > 0.0 { cores_f * 1e6 / us } else { 0.0 };
        Ok(json!({
            "benchmark": "pfcp",
            "shape": shape,
            "nodes": a.nodes,
            "sessions": a.sessions,
            "initial_flows": a.flows,
            "capacity": capacity,
            // What each node's control file says (cluster up's default when not given).
            "replicas": replicas,
            "detect_ms": detect_ms,
            "window_per_node": a.window,
            "cluster_up_seconds": up_secs,
            "established": sim["established"],
            "seconds": sim["seconds"],
            "sessions_per_s": sim["sessions_per_s"],
            "latency_ms": sim["latency_ms"],
            "failures": sim["failures"],
            "timeouts": sim["timeouts"],
            "retransmissions": sim["retransmissions"],
            "rss_bytes_per_session": mean("rss_bytes_per_session"),
            // An estimate (a linear extrapolation of this run, not a measurement): a node's
            // resident memory with 10M sessions on 4 nodes, 2.5M handled and held per node.
            "estimate_rss_bytes_per_node_10m_sessions_4_nodes":
                mean("rss_before_bytes") + mean("rss_bytes_per_session") * 2.5e6,
            // The same with the Raft logs compacted, as a long run's checkpoints keep them
            // (also an estimate): the growth less the log entries the nodes count holding,
            // plus the snapshots' copy of the state records (as compact as the nodes' own),
            // plus a log's worth of entries before the next checkpoint (64 MiB by default).
            "estimate_rss_bytes_per_node_10m_sessions_4_nodes_log_compacted":
                mean("rss_before_bytes")
                    + (mean("rss_bytes_per_session") - per_session("raft_logs")
                        + per_session("state_records"))
                        * 2.5e6
                    + (64u64 << 20) as f64,
            "table_bytes_per_session": mean("table_bytes_per_session"),
            "held_bytes_per_session": held_per_session,
            "cpu_us_per_session": {
                "nodes_user": nu,
                "nodes_system": ns,
                "generator_user": gu,
                "generator_system": gs,
                "total": total,
            },
            "cores": cores,
            "cpu_bound_sessions_per_s": ceiling(total),
            "kernel_bound_sessions_per_s": ceiling(ns + gs),
            "per_node": nodes,
        }))
    })();
    let down = scalebricks(&["cluster", "down", "--dir", &d].map(String::from));
    let r = r?;
    down?;
    if r["established"].as_u64() != Some(u64::from(a.sessions)) {
        bail!("not every session was established ({shape}): {r}");
    }
    Ok(r)
}

/// A node's `memory` status flattened to `structure: bytes` (the PFCP endpoint's as
/// `pfcp_structure`), plus `total`.
fn held(m: &Value) -> Value {
    let mut out = serde_json::Map::new();
    let mut total = 0u64;
    if let Some(o) = m.as_object() {
        for (k, v) in o {
            match v {
                Value::Object(p) => {
                    for (pk, pv) in p {
                        // The chunks count the packed bytes again, with malloc's overhead.
                        if pk != "packed" {
                            total += pv.as_u64().unwrap_or(0);
                        }
                        out.insert(format!("{k}_{pk}"), pv.clone());
                    }
                }
                v => {
                    // The table RIB's entries are within its bytes.
                    if k != "table_rib_entries" {
                        total += v.as_u64().unwrap_or(0);
                    }
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    out.insert("total".into(), total.into());
    Value::Object(out)
}
