//! `scalebricks bench failover`: what a node's death costs the UEs it served (issue 29), on a
//! namespace cluster with the control plane (root).
//!
//! One run: `cluster up` (`--nodes`, `--replicas`, `--flows`), then downlink traffic to the
//! victim's UEs (every flow `--victim` handles) entering at another node, at `--rate` packets
//! a second for `--seconds`, captured (tcpdump, `-Q in`) on every node's RAN side and read
//! back with tshark (each G-PDU's time and TEID). During it: the victim is killed with SIGKILL
//! at `--kill-at` seconds, a burst of `--updates` inserts goes through a live node once the
//! death is detected (the same burst was timed on the healthy cluster before the traffic),
//! and the victim is restarted (`cluster restart`) `--down` seconds after its death; later it
//! is cut off and healed (below).
//!
//! Rows (one per event):
//! - `kill`: per victim UE, the gap in its downlink around the kill (its last G-PDU before,
//!   to its first after, at any node's RAN side): `outage_ms_p50` / `outage_ms_p99`, also
//!   apart for the UEs whose flows the live owners moved to survivors (`moved`: their range's
//!   owner is alive) and those of the victim's own range (`own`: no one moves them; with
//!   replicas the next replica of the range stands in for the victim, without, they wait for
//!   the restart); `update_kops_during` against
//!   `update_kops_healthy`; `acked_lost` (acknowledged inserts the owners' RIBs lack at the
//!   end); `sessions_lost`: of `--sessions` PFCP sessions established through the victim's
//!   endpoint before the traffic, those not answered Request accepted to a Session
//!   Modification at the victim after the last event (`smf-sim --check`; the same figure in
//!   the wipe row: one check after every event; null with `--sessions 0`).
//! - `restart`: per victim UE, the largest gap in its downlink from its last G-PDU before the
//!   restart on, `moved` (given back to the victim, make-before-break) and `own` (back from
//!   the stand-in, or, without one, the outage that ends with the restart); `recovery_s`: from
//!   `cluster restart` to the
//!   victim serving with every flow given back.
//! - `partition` (at `--partition-at` seconds, once the victim recovered from the kill, for
//!   `--partitioned` seconds: its `fabric` and `ctl` links down, the process running): the
//!   gap per UE around it, as for the kill; `heal`: the largest gap from the heal on, and
//!   `recovery_s` to the victim serving again (it fenced itself while cut off: a new epoch)
//!   with every flow given back.
//! - `wipe` (at `--wipe-at` seconds, after the heal): the victim is killed, its log directory
//!   removed, and `--wiped-down` seconds later restarted with `cluster restart`: it finds its
//!   log lost, learns its epoch from its peers and gets its ranges from the other replicas
//!   (`sb_control`'s `rejoin`). The gap per UE around the kill, as for the kill; the largest
//!   gap from the restart on; `recovery_s` from `cluster restart` to the victim serving with
//!   every flow given back; its epoch before and after; `acked_lost` (the same end-of-run
//!   count as the kill's: every acknowledged insert must still be in the owners' RIBs after
//!   the victim's copy of its range was wiped).
//!
//! The per-UE packet interval is `victim flows / rate` on average (random flow choice), so a
//! gap of a few such intervals is no outage.

use crate::pfcp::{converged, status};
use crate::update::{fresh_ues, inserts_csv, me, scalebricks};
use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Nodes of the cluster.
    #[arg(long, default_value_t = 5)]
    nodes: u16,
    /// Replicas of each GPT range (`cluster up --replicas`).
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// Initial flows.
    #[arg(long, default_value_t = 2_000)]
    flows: usize,
    /// The node killed.
    #[arg(long, default_value_t = 1)]
    victim: u16,
    /// Downlink packets per second to the victim's UEs.
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Seconds of traffic.
    #[arg(long, default_value_t = 22.0)]
    seconds: f64,
    /// When the victim is killed, seconds into the traffic.
    #[arg(long, default_value_t = 2.0)]
    kill_at: f64,
    /// How long the victim stays dead, seconds.
    #[arg(long, default_value_t = 3.0)]
    down: f64,
    /// When the victim (restarted and recovered) is cut off from the fabric and the control
    /// network (its `fabric` and `ctl` links down), seconds into the traffic; 0: no partition.
    #[arg(long, default_value_t = 9.0)]
    partition_at: f64,
    /// How long the partition lasts, seconds.
    #[arg(long, default_value_t = 3.0)]
    partitioned: f64,
    /// When the victim (recovered from the partition) is killed and its log removed, seconds
    /// into the traffic; 0: no wipe.
    #[arg(long, default_value_t = 15.0)]
    wipe_at: f64,
    /// How long the wiped victim stays dead before `cluster restart`, seconds.
    #[arg(long, default_value_t = 2.0)]
    wiped_down: f64,
    /// Inserts of each update burst (healthy, then with the victim dead).
    #[arg(long, default_value_t = 5_000)]
    updates: usize,
    /// Seed of the cluster's flows.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// PFCP sessions established through the victim's endpoint before the traffic
    /// (`smf-sim --to VICTIM`), checked after every event (`smf-sim --check`): those not
    /// answered Request accepted are `sessions_lost`. 0: none (then `sessions_lost` is null).
    #[arg(long, default_value_t = 200)]
    sessions: u32,
    /// The cluster keeps PFCP sessions in memory only (`cluster up --pfcp-volatile`): the
    /// comparison for `sessions_lost`.
    #[arg(long)]
    pfcp_volatile: bool,
    /// Keep the run's files (captures, flow and update files, the cluster's state directory)
    /// in a new directory under this one instead of deleting them.
    #[arg(long)]
    keep_in: Option<std::path::PathBuf>,
    /// Print JSON (the only output; kept for scripts that pass it).
    #[arg(long)]
    json: bool,
}

fn wall_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// tcpdump capturing what arrives on `eth0` of namespace `ns` into `path`, once it listens.
fn capture(ns: &str, path: &Path) -> Result<Child> {
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "tcpdump", "-i", "eth0", "-Q", "in"])
        .args(["-U", "-n", "-s", "128", "-w"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("tcpdump (apt install tcpdump)")?;
    let mut err = BufReader::new(c.stderr.take().context("tcpdump stderr")?);
    let mut line = String::new();
    err.read_line(&mut line)?;
    ensure!(line.contains("listening on"), "tcpdump in {ns}: {line}");
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    Ok(c)
}

/// Stops a capture (SIGINT: tcpdump flushes its file).
fn stop(mut c: Child) -> Result<()> {
    let _ = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status();
    let t0 = Instant::now();
    while c.try_wait()?.is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            let _ = c.kill();
            bail!("tcpdump did not stop");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// (Unix time, TEID) of every G-PDU in a pcap file, as tshark reads it.
fn gpdus(path: &Path) -> Result<Vec<(f64, u32)>> {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(path)
        .args(["-Y", "gtp.message == 255", "-T", "fields"])
        .args(["-e", "frame.time_epoch", "-e", "gtp.teid"])
        .stdin(Stdio::null())
        .output()
        .context("tshark (apt install tshark)")?;
    ensure!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            let t: f64 = f.next()?.trim().parse().ok()?;
            let teid = f.next()?.trim();
            let teid = match teid.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16).ok()?,
                None => teid.parse().ok()?,
            };
            Some((t, teid))
        })
        .collect())
}

fn pct(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    Some(v[i])
}

/// One `scalebricks update` client through `node`: (acknowledged, thousands a second,
/// rejections by reason). A rejection is no failure here (the dead owner's range times out).
fn update_burst(d: &str, node: u16, csv: &Path) -> Result<(u64, f64, Value)> {
    let out = Command::new(me()?)
        .args(["update", "--dir", d, "--node", &node.to_string(), "--input"])
        .arg(csv)
        .stdin(Stdio::null())
        .output()
        .context("scalebricks update")?;
    let v: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "scalebricks update: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let acked = v["acked"].as_u64().unwrap_or(0);
    let secs = v["seconds"].as_f64().unwrap_or(f64::NAN);
    let mut reasons: std::collections::BTreeMap<String, u64> = Default::default();
    for r in v["rejected"].as_array().into_iter().flatten() {
        *reasons
            .entry(r["reason"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    Ok((acked, acked as f64 / secs / 1e3, json!(reasons)))
}

pub fn run(a: Args) -> Result<()> {
    ensure!(sb_io::netns::is_root(), "bench failover needs root");
    ensure!(
        a.nodes >= 3,
        "--nodes: at least 3 (a majority survives one death)"
    );
    ensure!(a.victim < a.nodes, "--victim: a node of the cluster");
    ensure!(
        a.kill_at > 0.0 && a.kill_at + a.down < a.seconds,
        "--kill-at + --down must end before --seconds"
    );
    ensure!(
        a.partition_at == 0.0
            || (a.partition_at > a.kill_at + a.down && a.partition_at + a.partitioned < a.seconds),
        "--partition-at: after the restart, and the partition ends before --seconds"
    );
    ensure!(
        a.wipe_at == 0.0
            || (a.wipe_at > (a.kill_at + a.down).max(a.partition_at + a.partitioned)
                && a.wipe_at + a.wiped_down < a.seconds),
        "--wipe-at: after the restart and the partition, and the restart before --seconds"
    );
    let tmp = match &a.keep_in {
        Some(d) => tempfile::Builder::new()
            .prefix("failover-")
            .disable_cleanup(true)
            .tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let dir = tmp.path().join("state");
    let d = dir.to_str().context("temporary path")?.to_string();
    let name = format!("sbf{}", std::process::id() % 100_000);
    let (nodes, seed) = (a.nodes.to_string(), a.seed.to_string());
    let (flows, capacity) = (
        a.flows.to_string(),
        ((a.flows + 2 * a.updates) * 2).to_string(),
    );
    let replicas = a.replicas.to_string();
    let mut up = vec![
        "cluster",
        "up",
        "--nodes",
        &nodes,
        "--name",
        &name,
        "--dir",
        &d,
        "--flows",
        &flows,
        "--seed",
        &seed,
        "--capacity",
        &capacity,
        "--replicas",
        &replicas,
    ];
    if a.pfcp_volatile {
        up.push("--pfcp-volatile");
    }
    scalebricks(&up)?;
    let r = measure(&a, tmp.path(), &d);
    let down = scalebricks(&["cluster", "down", "--dir", &d]);
    let r = r?;
    down?;
    println!("{}", serde_json::to_string_pretty(&r)?);
    Ok(())
}

fn measure(a: &Args, tmp: &Path, d: &str) -> Result<Value> {
    let dir = Path::new(d);
    converged(d, Duration::from_secs(60))?;
    let spec: sb_control::ClusterSpec =
        serde_json::from_str(&std::fs::read_to_string(dir.join("control.json"))?)
            .context("control.json")?;
    let desc: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("cluster.json"))?)
        .context("cluster.json")?;
    // The victim's flows: TEID -> whether its range's owner is another node (moved on death).
    let flows = std::fs::read_to_string(dir.join("flows.csv")).context("flows.csv")?;
    let mut csv = String::from("ue,teid,enb,node\n");
    let mut moved: HashMap<u32, bool> = HashMap::new();
    for l in flows.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        let (Some(ue), Some(teid), Some(node)) = (f.first(), f.get(1), f.get(3)) else {
            continue;
        };
        if node.parse::<u16>().ok() != Some(a.victim) {
            continue;
        }
        let key = sb_engine::lte::ue_key(ue.parse().context("flows.csv UE")?);
        moved.insert(teid.parse()?, spec.owner_of(&key) != a.victim);
        csv.push_str(l);
        csv.push('\n');
    }
    ensure!(!moved.is_empty(), "node {} handles no flow", a.victim);
    let victim_csv = tmp.join("victim.csv");
    std::fs::write(&victim_csv, csv)?;
    let entry = (a.victim + 1) % a.nodes;
    // Two bursts of new UEs' inserts, handled by the nodes that stay alive.
    let mut fresh = fresh_ues(&flows);
    let live: Vec<u16> = (0..a.nodes).filter(|&n| n != a.victim).collect();
    let (healthy_csv, during_csv) = (tmp.join("healthy.csv"), tmp.join("during.csv"));
    inserts_csv(&healthy_csv, &mut fresh, a.updates, &live)?;
    inserts_csv(&during_csv, &mut fresh, a.updates, &live)?;
    let (acked_healthy, kops_healthy, rej_healthy) = update_burst(d, entry, &healthy_csv)?;
    let rib0: u64 = rib_keys(&status(d)?);
    // PFCP sessions at the victim's endpoint (its range's records, replicated).
    let sessions_file = tmp.join("sessions.json");
    if a.sessions > 0 {
        let s: Value = serde_json::from_str(&scalebricks(&[
            "smf-sim",
            "--dir",
            d,
            "--sessions",
            &a.sessions.to_string(),
            "--to",
            &a.victim.to_string(),
            "--dump",
            sessions_file.to_str().unwrap_or_default(),
        ])?)?;
        ensure!(
            s["established"].as_u64() == Some(u64::from(a.sessions)),
            "smf-sim established {} of {} sessions: {s}",
            s["established"],
            a.sessions
        );
    }

    // Captures on every RAN side, then the traffic.
    let mut caps = Vec::new();
    for i in 0..a.nodes as usize {
        let ns = desc["nodes"][i]["ran_netns"]
            .as_str()
            .context("cluster.json ran_netns")?;
        let p = tmp.join(format!("ran{i}.pcap"));
        caps.push((capture(ns, &p)?, p));
    }
    let count = (a.rate as f64 * a.seconds) as u64;
    let gen_args: Vec<String> = [
        "gen",
        "--dir",
        d,
        "--flows",
        victim_csv.to_str().unwrap_or_default(),
        "--rate",
        &a.rate.to_string(),
        "--count",
        &count.to_string(),
        "--to",
        &entry.to_string(),
    ]
    .map(String::from)
    .to_vec();
    let pid = status(d)?["nodes"][a.victim as usize]["pid"]
        .as_u64()
        .context("victim pid")?;
    let t0 = Instant::now();
    let gen = std::thread::spawn(move || scalebricks(&gen_args));
    sleep_until(t0, a.kill_at);
    let t_kill = wall_s();
    kill(pid)?;
    // Detection, then the burst with the victim dead.
    std::thread::sleep(Duration::from_millis(800));
    let (acked_during, kops_during, rej_during) = update_burst(d, entry, &during_csv)?;
    sleep_until(t0, a.kill_at + a.down);
    let t_restart = wall_s();
    let r0 = Instant::now();
    restart(d, a.victim)?;
    let recovery_s = recovered(d, a.victim, r0)?;
    // The partition: the victim cut off, then healed.
    let ns = desc["nodes"][a.victim as usize]["netns"]
        .as_str()
        .context("cluster.json netns")?
        .to_string();
    let mut partition = None;
    if a.partition_at > 0.0 {
        sleep_until(t0, a.partition_at);
        let t_part = wall_s();
        links(&ns, "down")?;
        sleep_until(t0, a.partition_at + a.partitioned);
        let t_heal = wall_s();
        let h0 = Instant::now();
        links(&ns, "up")?;
        partition = Some((t_part, t_heal, recovered(d, a.victim, h0)?));
    }
    // The wipe: the victim killed, its log removed, restarted.
    let mut wipe = None;
    if a.wipe_at > 0.0 {
        sleep_until(t0, a.wipe_at);
        let row = status(d)?["nodes"][a.victim as usize].clone();
        let (pid, epoch) = (row["pid"].as_u64(), row["epoch"].as_u64());
        let pid = pid.context("victim pid before the wipe")?;
        let t_wipe = wall_s();
        kill(pid)?;
        sleep_until(t0, a.wipe_at + a.wiped_down);
        let wal = dir.join(format!("node{}.wal", a.victim));
        std::fs::remove_dir_all(&wal).with_context(|| format!("removing {}", wal.display()))?;
        let t_back = wall_s();
        let w0 = Instant::now();
        restart(d, a.victim)?;
        let rec = recovered(d, a.victim, w0)?;
        let after = status(d)?["nodes"][a.victim as usize]["epoch"].as_u64();
        wipe = Some((t_wipe, t_back, rec, epoch, after));
    }
    let g = gen.join().map_err(|_| anyhow::anyhow!("gen panicked"))??;
    std::thread::sleep(Duration::from_millis(500));
    let mut arrivals: HashMap<u32, Vec<f64>> = HashMap::new();
    for (c, p) in caps {
        stop(c)?;
        for (t, teid) in gpdus(&p)? {
            arrivals.entry(teid).or_default().push(t);
        }
    }
    // Acknowledged inserts the owners' RIBs lack (the status files lag: a few tries).
    let want = rib0 + acked_during;
    let mut rib = 0;
    for _ in 0..20 {
        rib = rib_keys(&status(d)?);
        if rib >= want {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let acked_lost = want.saturating_sub(rib);
    // The sessions after every event: modified (an empty modification) at the node they were
    // established through, the victim (back).
    let sessions_check = if a.sessions > 0 {
        let c: Value = serde_json::from_str(&scalebricks(&[
            "smf-sim",
            "--dir",
            d,
            "--check",
            sessions_file.to_str().unwrap_or_default(),
            "--first",
            "1000000",
        ])?)?;
        Some(c)
    } else {
        None
    };
    let sessions_lost = sessions_check
        .as_ref()
        .and_then(|c| Some(c["sessions"].as_u64()? - c["accepted"].as_u64()?));

    // Per UE: the gap around the kill, the largest gap from the restart on (to the
    // partition); the same for the partition and the heal (to the wipe), and the wipe.
    let t_end = wall_s() + 1.0;
    let t_part_end = wipe.map_or(t_end, |w| w.0);
    let k = gaps(
        &arrivals,
        &moved,
        t_kill,
        t_restart,
        partition.map_or(t_end, |p| p.0),
    );
    let silent = k.silent;
    let n_moved = moved.values().filter(|&&m| m).count();
    let interval_ms = moved.len() as f64 / a.rate as f64 * 1e3;
    let row_kill = json!({
        "event": "kill",
        "measured": true,
        "ues": moved.len(),
        "ues_silent": silent,
        "outage_ms_p50": k.all_p(0.5),
        "outage_ms_p99": k.all_p(0.99),
        "moved": k.around_row(1, n_moved),
        "own": k.around_row(0, moved.len() - n_moved),
        "acked_lost": acked_lost,
        "sessions_lost": sessions_lost,
        "sessions_check": sessions_check,
        "update_kops_healthy": kops_healthy,
        "update_kops_during": kops_during,
        "update_ratio": kops_during / kops_healthy,
        "updates_acked": [acked_healthy, acked_during],
        "updates_rejected": [rej_healthy, rej_during],
    });
    let row_restart = json!({
        "event": "restart",
        "measured": true,
        "moved": k.after_row(1),
        "own": k.after_row(0),
        "recovery_s": recovery_s,
    });
    let (row_part, row_heal) = match partition {
        Some((t_part, t_heal, heal_s)) => {
            let p = gaps(&arrivals, &moved, t_part, t_heal, t_part_end);
            (
                json!({
                    "event": "partition",
                    "measured": true,
                    "seconds": a.partitioned,
                    "outage_ms_p50": p.all_p(0.5),
                    "outage_ms_p99": p.all_p(0.99),
                    "moved": p.around_row(1, n_moved),
                    "own": p.around_row(0, moved.len() - n_moved),
                }),
                json!({
                    "event": "heal",
                    "measured": true,
                    "moved": p.after_row(1),
                    "own": p.after_row(0),
                    "recovery_s": heal_s,
                }),
            )
        }
        None => (
            json!({"event": "partition", "measured": false, "why": "--partition-at 0"}),
            json!({"event": "heal", "measured": false, "why": "--partition-at 0"}),
        ),
    };
    let row_wipe = match wipe {
        Some((t_wipe, t_back, rec, before, after)) => {
            let w = gaps(&arrivals, &moved, t_wipe, t_back, t_end);
            json!({
                "event": "wipe",
                "measured": true,
                "down_s": a.wiped_down,
                "outage_ms_p50": w.all_p(0.5),
                "outage_ms_p99": w.all_p(0.99),
                "moved": w.around_row(1, n_moved),
                "own": w.around_row(0, moved.len() - n_moved),
                "after_restart": {"moved": w.after_row(1), "own": w.after_row(0)},
                "recovery_s": rec,
                "epoch_before": before,
                "epoch_after": after,
                "acked_lost": acked_lost,
                "sessions_lost": sessions_lost,
            })
        }
        None => json!({"event": "wipe", "measured": false, "why": "--wipe-at 0"}),
    };
    Ok(json!({
        "bench": "failover",
        "nodes": a.nodes,
        "replicas": a.replicas,
        "flows": a.flows,
        "victim": a.victim,
        "entry_node": entry,
        "rate_pps": a.rate,
        "per_ue_interval_ms": interval_ms,
        "gen": serde_json::from_str::<Value>(g.trim()).unwrap_or(Value::Null),
        "rows": [row_kill, row_restart, row_part, row_heal, row_wipe],
    }))
}

/// Per victim UE, by group (0: the victim's own range, 1: moved): the gap in its downlink
/// around an event (its last G-PDU before to its first after) and its largest gap from its
/// last G-PDU before a later time to a time after.
struct Gaps {
    around: [Vec<f64>; 2],
    after: [Vec<f64>; 2],
    silent: usize,
}

impl Gaps {
    fn all_p(&self, p: f64) -> Option<f64> {
        let mut v: Vec<f64> = self.around.concat();
        pct(&mut v, p)
    }

    fn around_row(&self, g: usize, ues: usize) -> Value {
        let mut v = self.around[g].clone();
        json!({"ues": ues, "outage_ms_p50": pct(&mut v, 0.5), "outage_ms_p99": pct(&mut v, 0.99), "outage_ms_max": pct(&mut v, 1.0)})
    }

    fn after_row(&self, g: usize) -> Value {
        let mut v = self.after[g].clone();
        json!({"largest_gap_ms_p50": pct(&mut v, 0.5), "largest_gap_ms_p99": pct(&mut v, 0.99), "largest_gap_ms_max": pct(&mut v, 1.0)})
    }
}

/// [`Gaps`] around `at`, and after `from` until `until` (Unix seconds); each UE's arrivals
/// sorted.
fn gaps(
    arrivals: &HashMap<u32, Vec<f64>>,
    moved: &HashMap<u32, bool>,
    at: f64,
    from: f64,
    until: f64,
) -> Gaps {
    let mut g = Gaps {
        around: [Vec::new(), Vec::new()],
        after: [Vec::new(), Vec::new()],
        silent: 0,
    };
    for (teid, &is_moved) in moved {
        let i = usize::from(is_moved);
        let Some(ts) = arrivals.get(teid) else {
            g.silent += 1;
            continue;
        };
        // In time order whatever order the captures were read in.
        let mut ts = ts.clone();
        ts.sort_by(|a, b| a.total_cmp(b));
        let before = ts.iter().rev().find(|&&t| t < at);
        let next = ts.iter().find(|&&t| t >= at);
        if let (Some(b), Some(f)) = (before, next) {
            g.around[i].push((f - b) * 1e3);
        }
        let first = ts.iter().rev().find(|&&t| t < from).copied();
        let later: Vec<f64> = first
            .into_iter()
            .chain(ts.iter().copied().filter(|&t| t >= from && t < until))
            .collect();
        if let Some(m) = (later.windows(2))
            .map(|w| (w[1] - w[0]) * 1e3)
            .reduce(f64::max)
        {
            g.after[i].push(m);
        }
    }
    g
}

/// Sets the victim's `fabric` and `ctl` links in namespace `ns` up or down.
/// SIGKILLs process `pid`.
fn kill(pid: u64) -> Result<()> {
    let ok = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()?
        .success();
    ensure!(ok, "kill {pid}");
    Ok(())
}

/// `cluster restart` of node `victim` of the cluster in `d`.
fn restart(d: &str, victim: u16) -> Result<()> {
    scalebricks(&[
        "cluster",
        "restart",
        "--dir",
        d,
        "--node",
        &victim.to_string(),
    ])?;
    Ok(())
}

fn links(ns: &str, state: &str) -> Result<()> {
    for dev in ["fabric", "ctl"] {
        let ok = Command::new("ip")
            .args(["-n", ns, "link", "set", dev, state])
            .status()?
            .success();
        ensure!(ok, "ip -n {ns} link set {dev} {state}");
    }
    Ok(())
}

/// Waits until the victim serves and every flow moved off it is given back; seconds since
/// `t0`.
fn recovered(d: &str, victim: u16, t0: Instant) -> Result<f64> {
    loop {
        let st = status(d)?;
        let rows = st["nodes"].as_array().cloned().unwrap_or_default();
        let v = &rows[victim as usize];
        let away: u64 = (rows.iter())
            .map(|r| {
                r["moved_away"].as_u64().unwrap_or(0) + r["moves_pending"].as_u64().unwrap_or(0)
            })
            .sum();
        if v["ready"] == true && v["phase"] == "serving" && away == 0 {
            return Ok(t0.elapsed().as_secs_f64());
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(60),
            "no recovery in 60 s: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn sleep_until(t0: Instant, s: f64) {
    let at = t0 + Duration::from_secs_f64(s);
    if let Some(w) = at.checked_duration_since(Instant::now()) {
        std::thread::sleep(w);
    }
}

fn rib_keys(st: &Value) -> u64 {
    st["nodes"].as_array().map_or(0, |rows| {
        rows.iter()
            .map(|r| r["rib_keys"].as_u64().unwrap_or(0))
            .sum()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arrivals read from two captures one after the other (not in time order): the gap
    /// around the event is from the last arrival before it to the first after it, at any
    /// node, and the largest gap after `from` counts only arrivals up to `until`.
    #[test]
    fn gaps_are_taken_in_time_order_across_captures() {
        let mut arrivals = HashMap::new();
        // UE 1 (moved): at node A until 10.0, at node B from 10.6; read B's capture first.
        arrivals.insert(1, vec![10.6, 10.7, 13.0, 9.0, 9.5, 10.0]);
        // UE 2 (stuck): nothing between 10.0 and 13.0.
        arrivals.insert(2, vec![9.9, 13.0, 13.1]);
        let moved = HashMap::from([(1, true), (2, false), (3, true)]);
        let g = gaps(&arrivals, &moved, 10.2, 10.65, 12.0);
        assert_eq!(g.silent, 1);
        let ms = |v: &[f64]| v.iter().map(|x| x.round() as i64).collect::<Vec<_>>();
        assert_eq!(ms(&g.around[1]), [600]);
        assert_eq!(ms(&g.around[0]), [3100]);
        // UE 1 from its last arrival before 10.65 (10.6): 10.6, 10.7; 13.0 is past `until`.
        assert_eq!(ms(&g.after[1]), [100]);
        assert_eq!(g.all_p(1.0).map(|x| x.round() as i64), Some(3100));
    }
}
