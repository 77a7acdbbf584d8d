//! `scalebricks cluster up|down|status` and the hidden per-node plain forwarder
//! (`cluster forward`), which `up` starts when forwarding is `user`.

mod forward;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use sb_topology::{Cidr, Description, Forwarding, UpOptions};

/// Environment variable read by `up`: stop (as if crashed) after node K is complete. For tests.
pub const ABORT_ENV: &str = "SB_CLUSTER_ABORT_AFTER_NODE";

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FwdArg {
    /// A user-space forwarder process per node (`cluster forward`), kernel forwarding off.
    User,
    /// Kernel IP forwarding with the UE pool routed to the RAN side.
    Kernel,
    /// Nothing forwards (for an engine to run in the node namespaces).
    None,
}

#[derive(clap::Subcommand)]
pub enum ClusterCmd {
    /// Create the namespaces, bridge and veths of an N-node cluster and write cluster.json.
    Up {
        /// Number of nodes (1..=250).
        #[arg(long)]
        nodes: usize,
        /// Name prefix of the namespaces (PREFIX-sw, PREFIX-node0, PREFIX-inet0, PREFIX-ran0, ...).
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory (description, journal, forwarder stats) [default: /run/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// UE address pool routed to the RAN side of every node.
        #[arg(long, default_value = sb_topology::DEFAULT_UE_POOL)]
        ue_pool: String,
        /// How nodes forward downstream (inet -> ran) traffic.
        #[arg(long, value_enum, default_value = "user")]
        forwarding: FwdArg,
    },
    /// Remove everything `up` created (also after a failed or crashed `up`).
    Down {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /run/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Print the cluster description (JSON), with the forwarders' counters if any.
    Status {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /run/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run node I's plain forwarder in the foreground (started by `up`).
    #[command(hide = true)]
    Forward {
        /// State directory of the cluster.
        #[arg(long)]
        dir: PathBuf,
        /// Node index.
        #[arg(long)]
        node: usize,
    },
}

/// The state directory from `--dir` or the prefix.
pub fn state_dir(dir: Option<PathBuf>, name: &str) -> PathBuf {
    dir.unwrap_or_else(|| sb_topology::default_dir(name))
}

/// Loads the description of a running cluster, with a hint when there is none.
pub fn load_cluster(dir: &std::path::Path) -> anyhow::Result<Description> {
    sb_topology::load(dir).with_context(|| {
        format!(
            "no cluster description in {} (run `scalebricks cluster up` first, or pass --dir)",
            dir.display()
        )
    })
}

pub fn run(cmd: ClusterCmd) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Up {
            nodes,
            name,
            dir,
            ue_pool,
            forwarding,
        } => {
            let dir = state_dir(dir, &name);
            let ue_pool: Cidr = ue_pool.parse()?;
            let exe = std::env::current_exe().context("cannot find our own executable")?;
            let spawn = move |d: &Description, node: usize| {
                let mut c = Command::new(&exe);
                c.arg("cluster")
                    .arg("forward")
                    .arg("--dir")
                    .arg(&d.dir)
                    .arg("--node")
                    .arg(node.to_string());
                c
            };
            let abort_after_node = match std::env::var(ABORT_ENV) {
                Ok(v) => Some(v.parse().with_context(|| format!("{ABORT_ENV}={v}"))?),
                Err(_) => None,
            };
            let mut opts = UpOptions::new(&name, nodes, dir);
            opts.ue_pool = ue_pool;
            opts.forwarding = match forwarding {
                FwdArg::User => Forwarding::User,
                FwdArg::Kernel => Forwarding::Kernel,
                FwdArg::None => Forwarding::None,
            };
            opts.spawn = Some(&spawn);
            opts.abort_after_node = abort_after_node;
            opts.ready_timeout = Duration::from_secs(10);
            let d = sb_topology::up(&opts)?;
            println!(
                "cluster {} up: {} nodes, forwarding {:?}, description {}",
                d.prefix,
                d.nodes.len(),
                d.forwarding,
                d.dir.join(sb_topology::DESCRIPTION_FILE).display()
            );
            Ok(())
        }
        ClusterCmd::Down { name, dir } => {
            let dir = state_dir(dir, &name);
            let r = sb_topology::down(&dir)?;
            println!(
                "cluster in {} down: {} namespaces deleted, {} processes stopped",
                dir.display(),
                r.namespaces.len(),
                r.processes.len()
            );
            Ok(())
        }
        ClusterCmd::Status { name, dir } => {
            let dir = state_dir(dir, &name);
            let d = load_cluster(&dir)?;
            let mut v = serde_json::to_value(&d)?;
            let mut stats = Vec::new();
            for n in &d.nodes {
                let p = sb_topology::forwarder_stats_path(&dir, n.index);
                let s = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .unwrap_or(serde_json::Value::Null);
                stats.push(s);
            }
            v["forwarders"] = serde_json::Value::Array(stats);
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(())
        }
        ClusterCmd::Forward { dir, node } => forward::run(&dir, node),
    }
}
