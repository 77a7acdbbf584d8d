//! `scalebricks update --dir STATE --node N --input CSV`: sends the updates of a CSV
//! (`op,ue,teid,enb,node`) to node N of a running cluster over the control protocol and exits
//! once every one is acknowledged (durable at its owner, installed at its handling node, and
//! applied by every node's GPT), printing one JSON object: `acked`, `rejected` (line and reason),
//! `seconds`. A line that does not parse is rejected with its line number and never sent.
//! Exit status 0 when nothing was rejected, 1 otherwise.

use std::collections::HashMap;
use std::net::UdpSocket;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;

use super::cluster::{control_addrs, load_cluster, state_dir, CONTROL_CLIENT_FILE};

#[derive(clap::Args)]
pub struct Args {
    /// The cluster's state directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Name prefix used with `cluster up` (when --dir is not given).
    #[arg(long, default_value = "sb")]
    name: String,
    /// The node to send the updates to (any node: it forwards each to its block's owner).
    #[arg(long, default_value_t = 0)]
    node: usize,
    /// The updates: CSV with the header `op,ue,teid,enb,node` (`op`: insert, change, delete).
    #[arg(long)]
    input: PathBuf,
    /// Updates per request datagram.
    #[arg(long, default_value_t = 256)]
    batch: usize,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8)]
    window: usize,
    /// Give up after this many seconds without every update acknowledged.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// Requests per second at most (0: as fast as the window allows).
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let dir = state_dir(a.dir.clone(), &a.name);
    let d = load_cluster(&dir)?;
    // The client key alone: it signs requests and checks replies, and makes no node message.
    let spec =
        sb_node::control::ClientFile::read(&dir.join(CONTROL_CLIENT_FILE)).with_context(|| {
            "no client key: the cluster runs without a control plane (cluster up --control on)"
        })?;
    if a.node >= d.nodes.len() {
        bail!(
            "--node {}: the cluster has nodes 0..{}",
            a.node,
            d.nodes.len()
        );
    }
    let most = sb_control::client::max_updates(spec.key_bytes, spec.value_bytes);
    anyhow::ensure!(
        (1..=most).contains(&a.batch) && a.window >= 1,
        "--batch must be 1 to {most} and --window at least 1"
    );
    let text = std::fs::read_to_string(&a.input)
        .with_context(|| format!("reading {}", a.input.display()))?;
    let (lines, bad) = sb_node::control::read_updates(&text, d.nodes.len());
    let mut rejected: Vec<serde_json::Value> = bad
        .iter()
        .map(|(l, why)| json!({"line": l, "reason": why}))
        .collect();

    // The socket lives in the node's namespace: the node's control address is reachable there.
    let target = control_addrs(&d)[a.node];
    let ns = d.nodes[a.node].netns.clone();
    let sock = sb_io::netns::in_netns(&ns, || UdpSocket::bind((target.ip(), 0)))
        .with_context(|| format!("entering {ns}"))?
        .with_context(|| format!("binding a UDP socket on {}", target.ip()))?;
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;

    // Requests of up to `batch` updates; `window` in flight, each resent until answered.
    let chunks: Vec<&[sb_node::control::UpdateLine]> = lines.chunks(a.batch).collect();
    let mut next = 0usize;
    let mut inflight: HashMap<u64, (usize, Instant, u32)> = HashMap::new();
    let mut first_sent: HashMap<u64, Instant> = HashMap::new();
    let mut rtts_us: Vec<f64> = Vec::with_capacity(chunks.len());
    let mut acked = 0u64;
    let mut buf = vec![0u8; 65536];
    let deadline = t0 + Duration::from_secs(a.timeout);
    // A fresh client id per run: requests are numbered from 1 under it, each stamped with
    // the time it was first sent and resent as the same bytes (the node answers a request
    // once and refuses a copy it no longer remembers, or one made before it started).
    let client = sb_common::random_seed();
    let id_base = 1u64;
    let mut made: HashMap<usize, Vec<u8>> = HashMap::new();
    let send = |made: &mut HashMap<usize, Vec<u8>>, i: usize| -> anyhow::Result<()> {
        let bytes = match made.entry(i) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let updates: Vec<sb_control::Update> =
                    chunks[i].iter().map(|l| l.update()).collect();
                let stamp = sb_control::client::Stamp {
                    client,
                    seq: id_base + i as u64,
                    time: sb_control::client::unix_nanos(),
                };
                e.insert(sb_control::client::encode_request(
                    &spec.key,
                    spec.cluster_id,
                    a.node as u16,
                    stamp,
                    &updates,
                )?)
            }
        };
        sock.send_to(bytes, target)?;
        Ok(())
    };
    while next < chunks.len() || !inflight.is_empty() {
        if Instant::now() > deadline {
            bail!(
                "{} of {} updates acknowledged after {}s; the rest are unanswered (is node {} up?)",
                acked,
                lines.len(),
                a.timeout,
                a.node
            );
        }
        while inflight.len() < a.window && next < chunks.len() {
            if a.rate > 0.0 && t0.elapsed().as_secs_f64() * a.rate < next as f64 {
                break;
            }
            send(&mut made, next)?;
            let now = Instant::now();
            inflight.insert(id_base + next as u64, (next, now, 0));
            first_sent.insert(id_base + next as u64, now);
            next += 1;
        }
        match sock.recv_from(&mut buf) {
            Ok((n, from)) if from == target => {
                let Ok(reply) =
                    sb_control::client::decode_reply(&spec.key, spec.cluster_id, &buf[..n])
                else {
                    continue;
                };
                let Some((i, _, _)) = inflight.remove(&reply.id) else {
                    continue; // a late duplicate
                };
                made.remove(&i);
                if let Some(t) = first_sent.remove(&reply.id) {
                    rtts_us.push(t.elapsed().as_secs_f64() * 1e6);
                }
                for (line, r) in chunks[i].iter().zip(&reply.results) {
                    match r {
                        sb_control::Outcome::Applied => acked += 1,
                        why => rejected.push(json!({"line": line.line, "reason": why.name()})),
                    }
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e.into()),
        }
        // Resend what has waited too long (the node retries its own side; this covers a
        // lost request or reply), backing off.
        let now = Instant::now();
        let late: Vec<u64> = inflight
            .iter()
            .filter(|(_, (_, at, tries))| {
                now.duration_since(*at) > Duration::from_millis(200 << (*tries).min(4))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let (i, _, tries) = inflight[&id];
            send(&mut made, i)?;
            inflight.insert(id, (i, now, tries + 1));
        }
    }
    rejected.sort_by_key(|r| r["line"].as_u64());
    let ok = rejected.is_empty();
    rtts_us.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if rtts_us.is_empty() {
            0.0
        } else {
            rtts_us[((rtts_us.len() - 1) as f64 * p).round() as usize] / 1000.0
        }
    };
    println!(
        "{}",
        json!({
            "acked": acked,
            "rejected": rejected,
            "seconds": t0.elapsed().as_secs_f64(),
            "requests": rtts_us.len(),
            // From a request's first send to its acknowledgment (after the owner's log, the
            // handling node's FIB and every node's GPT): per request, in milliseconds.
            "ack_ms": {"p50": pct(0.5), "p99": pct(0.99)},
        })
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
