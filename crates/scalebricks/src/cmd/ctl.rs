//! `scalebricks ctl`: the command-line client of the operator API (gRPC, `sb-api`) that every
//! node of a cluster started with the control plane serves on its `grpc_addr`.
//!
//! With `--dir` (or `--name`) it reads the cluster's description and token (`api.token`) and
//! connects from the cluster's control namespace (`PREFIX-cp`, where an operator's tools
//! sit); with `--addr` and `--token-file` it connects to any address from where it runs.
//! Human-readable output by default, one JSON object with `--json`. Exit status: 0 answered,
//! 1 refused or not found (the gRPC status is printed), 2 usage errors (clap's).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use anyhow::{bail, Context};
use sb_api::pb;
use serde_json::{json, Value};

use super::cluster::{load_cluster, state_dir, API_TOKEN_FILE};

#[derive(clap::Args)]
pub struct Args {
    /// The cluster's state directory.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Name prefix used with `cluster up` (when --dir is not given).
    #[arg(long, default_value = "sb")]
    name: String,
    /// The node to ask (any node answers for the cluster).
    #[arg(long, default_value_t = 0)]
    node: usize,
    /// Connect to this API address from here instead (with --token-file).
    #[arg(long, requires = "token_file")]
    addr: Option<SocketAddr>,
    /// The file holding the API token (default: the state directory's api.token).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// One JSON object on stdout.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// The node's counters and table sizes.
    Stats,
    /// The handling node and tunnel of a UE address or an uplink TEID.
    Lookup {
        /// A UE address (IPv4 or IPv6).
        #[arg(long, conflicts_with = "teid", required_unless_present = "teid")]
        ue: Option<IpAddr>,
        /// An uplink TEID (decimal or 0x-hex).
        #[arg(long, value_parser = parse_u32)]
        teid: Option<u32>,
    },
    /// The node's FIB slice (the sessions it handles), a page at a time.
    Sessions {
        /// Entries per page (1 to 10000).
        #[arg(long, default_value_t = 100)]
        page_size: u32,
        /// Where to go on (the previous page's `next_page_token`).
        #[arg(long, conflicts_with = "all")]
        page_token: Option<String>,
        /// Every page (the whole slice).
        #[arg(long)]
        all: bool,
    },
    /// Every node's control-plane state: up, GPT digest, lag per owner, resyncs, log size.
    Status,
}

fn parse_u32(s: &str) -> Result<u32, String> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("{s:?}: {e}"))
}

fn tunnel_json(t: &pb::Tunnel) -> Value {
    json!({
        "ue": sb_api::ip_of(&t.ue_address).map(|a| a.to_string()),
        "teid": t.teid,
        "enb": sb_api::ip_of(&t.enb_address).map(|a| a.to_string()),
        "node": t.node,
        "qci": t.qci,
        "uplink_teid": t.uplink_teid,
    })
}

pub fn run(a: Args) -> anyhow::Result<()> {
    // Where to connect, with which token, from which namespace.
    let (addr, token_path, netns) = match a.addr {
        Some(addr) => (addr, a.token_file.clone().expect("clap requires it"), None),
        None => {
            let dir = state_dir(a.dir.clone(), &a.name);
            let d = load_cluster(&dir)?;
            let Some(node) = d.nodes.get(a.node) else {
                bail!(
                    "--node {}: the cluster has nodes 0..{}",
                    a.node,
                    d.nodes.len()
                );
            };
            let Some(addr) = node.grpc_addr else {
                bail!(
                    "node {} has no API address (a cluster without a control network)",
                    a.node
                );
            };
            let Some(cp) = &d.control else {
                bail!("the cluster has no control namespace");
            };
            let token = a
                .token_file
                .clone()
                .unwrap_or_else(|| dir.join(API_TOKEN_FILE));
            (addr, token, Some(cp.netns.clone()))
        }
    };
    let token = std::fs::read_to_string(&token_path)
        .with_context(|| {
            format!(
                "reading the API token {} (a cluster started with --control on has one)",
                token_path.display()
            )
        })?
        .trim()
        .to_string();
    let work = || -> anyhow::Result<Value> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(call(addr, &token, &a.what))
    };
    // A one-thread runtime: every socket is made on this thread, inside the namespace.
    let out = match &netns {
        Some(ns) => sb_io::netns::in_netns(ns, work).with_context(|| format!("entering {ns}"))?,
        None => work(),
    };
    let v = match out {
        Ok(v) => v,
        Err(e) => {
            if let Some(s) = e.downcast_ref::<tonic::Status>() {
                if a.json {
                    println!(
                        "{}",
                        json!({"error": {"code": format!("{:?}", s.code()), "message": s.message()}})
                    );
                } else {
                    eprintln!("error: {:?}: {}", s.code(), s.message());
                }
                std::process::exit(1);
            }
            return Err(e);
        }
    };
    if a.json {
        println!("{v}");
    } else {
        print_human(&a.what, &v);
    }
    Ok(())
}

async fn call(addr: SocketAddr, token: &str, what: &What) -> anyhow::Result<Value> {
    let mut c = sb_api::connect(addr, token).await?;
    Ok(match what {
        What::Stats => {
            let r = c.stats(pb::StatsRequest {}).await?.into_inner();
            let counters: Value = serde_json::from_str(&r.json).unwrap_or(Value::Null);
            json!({"node": r.node, "counters": counters})
        }
        What::Lookup { ue, teid } => {
            let key = match (ue, teid) {
                (Some(ue), _) => pb::lookup_request::Key::UeAddress(sb_api::ip_bytes(*ue)),
                (None, Some(t)) => pb::lookup_request::Key::Teid(*t),
                (None, None) => bail!("--ue or --teid"),
            };
            let r = c
                .lookup(pb::LookupRequest {
                    key: Some(key),
                    forwarded: false,
                })
                .await?
                .into_inner();
            json!({
                "handling_node": r.handling_node,
                "answered_by": r.answered_by,
                "tunnel": r.tunnel.as_ref().map(tunnel_json),
            })
        }
        What::Sessions {
            page_size,
            page_token,
            all,
        } => {
            let mut token = page_token.clone().unwrap_or_default();
            let mut sessions = Vec::new();
            let mut pages = 0u64;
            let total = loop {
                let r = c
                    .list_sessions(pb::ListSessionsRequest {
                        page_size: *page_size,
                        page_token: token.clone(),
                    })
                    .await?
                    .into_inner();
                pages += 1;
                sessions.extend(r.sessions.iter().map(tunnel_json));
                token = r.next_page_token;
                if !*all || token.is_empty() {
                    break r.total;
                }
            };
            json!({"sessions": sessions, "next_page_token": token, "total": total, "pages": pages})
        }
        What::Status => {
            let r = c
                .cluster_status(pb::ClusterStatusRequest { local_only: false })
                .await?
                .into_inner();
            let nodes: Vec<Value> = r
                .nodes
                .iter()
                .map(|n| {
                    json!({
                        "node": n.node, "up": n.up, "error": n.error, "ready": n.ready,
                        "gpt_digest": n.gpt_digest, "epoch": n.epoch, "rib_keys": n.rib_keys,
                        "fib_entries": n.fib_entries, "log_bytes": n.log_bytes,
                        "owners": n.owners.iter().map(|o| json!({
                            "owner": o.owner, "applied_seq": o.applied_seq, "lag": o.lag,
                            "resyncs": o.resyncs})).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({"converged": r.converged, "nodes": nodes})
        }
    })
}

fn print_human(what: &What, v: &Value) {
    match what {
        What::Stats => println!(
            "{}",
            serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
        ),
        What::Lookup { .. } => {
            println!(
                "handling node {} (answered by node {})",
                v["handling_node"], v["answered_by"]
            );
            let t = &v["tunnel"];
            if t.is_object() {
                println!(
                    "{} teid {:#x} enb {} node {} qci {} uplink teid {:#x}",
                    t["ue"].as_str().unwrap_or("?"),
                    t["teid"].as_u64().unwrap_or(0),
                    t["enb"].as_str().unwrap_or("?"),
                    t["node"],
                    t["qci"],
                    t["uplink_teid"].as_u64().unwrap_or(0)
                );
            }
        }
        What::Sessions { .. } => {
            for s in v["sessions"].as_array().into_iter().flatten() {
                println!(
                    "{} teid {} enb {} node {} uplink teid {}",
                    s["ue"].as_str().unwrap_or("?"),
                    s["teid"],
                    s["enb"].as_str().unwrap_or("?"),
                    s["node"],
                    s["uplink_teid"]
                );
            }
            let next = v["next_page_token"].as_str().unwrap_or_default();
            println!(
                "{} listed of {} in the slice{}",
                v["sessions"].as_array().map_or(0, |a| a.len()),
                v["total"],
                if next.is_empty() {
                    String::new()
                } else {
                    format!("; next page: --page-token {next}")
                }
            );
        }
        What::Status => {
            println!(
                "cluster {}",
                if v["converged"] == true {
                    "converged"
                } else {
                    "NOT converged"
                }
            );
            println!("node  up     ready  digest            epoch  rib_keys  fib_entries  log_bytes  max_lag");
            for n in v["nodes"].as_array().into_iter().flatten() {
                let lag = n["owners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| o["lag"].as_u64())
                    .max()
                    .unwrap_or(0);
                println!(
                    "{:<5} {:<6} {:<6} {:<17} {:<6} {:<9} {:<12} {:<10} {}{}",
                    n["node"],
                    n["up"],
                    n["ready"],
                    n["gpt_digest"].as_str().unwrap_or(""),
                    n["epoch"],
                    n["rib_keys"],
                    n["fib_entries"],
                    n["log_bytes"],
                    lag,
                    n["error"]
                        .as_str()
                        .filter(|e| !e.is_empty())
                        .map(|e| format!("  ({e})"))
                        .unwrap_or_default()
                );
            }
        }
    }
}
