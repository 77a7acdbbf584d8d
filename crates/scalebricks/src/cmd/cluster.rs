//! `scalebricks cluster up|down|status`: a cluster of node processes in network namespaces.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use sb_engine::lte::Tunnel;
use sb_engine::Arch;
use sb_node::config::{FibBackend, IoBackend, NodeFile, PortFile};
use sb_node::tables;
use sb_topology::{Cidr, Description, Forwarding, UpOptions};

/// Environment variable read by `up`: stop (as if crashed) after node K is complete. For tests.
pub const ABORT_ENV: &str = "SB_CLUSTER_ABORT_AFTER_NODE";

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FwdArg {
    /// A node process per node running the engine (`scalebricks node`); kernel forwarding off.
    User,
    /// Kernel IP forwarding with the UE pool routed to the RAN side (no engine: a baseline).
    Kernel,
    /// Nothing forwards.
    None,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ArchArg {
    /// GPT at every node, FIB entries at the handling node: one fabric crossing at most.
    Scalebricks,
    /// The whole FIB at every node.
    FullDup,
    /// FIB entries at the node their key hashes to: up to two crossings.
    HashPart,
}

impl From<ArchArg> for Arch {
    fn from(a: ArchArg) -> Arch {
        match a {
            ArchArg::Scalebricks => Arch::ScaleBricks,
            ArchArg::FullDup => Arch::FullDup,
            ArchArg::HashPart => Arch::HashPart,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum FibArg {
    /// Our cuckoo table.
    Cuckoo,
    /// DPDK rte_hash (build with `--features dpdk`).
    #[value(name = "rte_hash")]
    RteHash,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum IoArg {
    /// AF_PACKET.
    Afpacket,
    /// AF_XDP, copy mode (build with `--features xdp`).
    Xdp,
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// Number of nodes (1..=250).
    #[arg(long)]
    nodes: usize,
    /// Name prefix of the namespaces (PREFIX-sw, PREFIX-node0, PREFIX-inet0, PREFIX-ran0, ...).
    #[arg(long, default_value = "sb")]
    name: String,
    /// State directory (description, journal, tables, counters) [default: /run/scalebricks/PREFIX].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// UE address pool routed to the RAN side of every node (generated tunnels use it).
    #[arg(long, default_value = sb_topology::DEFAULT_UE_POOL)]
    ue_pool: String,
    /// Who forwards: the engine in a node process per node, the kernel, or nothing.
    #[arg(long, value_enum, default_value = "user")]
    forwarding: FwdArg,
    /// The architecture the nodes run.
    #[arg(long, value_enum, default_value = "scalebricks")]
    arch: ArchArg,
    /// Generate this many tunnels (UE address, TEID, eNodeB, handling node), written to
    /// flows.csv in the state directory.
    #[arg(long, default_value_t = 10_000, conflicts_with = "flows_file")]
    flows: usize,
    /// Read the tunnels from this CSV instead (`ue,teid,enb,node` per line, a header allowed).
    #[arg(long)]
    flows_file: Option<PathBuf>,
    /// The FIB backend.
    #[arg(long, value_enum, default_value = "cuckoo")]
    fib: FibArg,
    /// The nodes' packet I/O.
    #[arg(long, value_enum, default_value = "afpacket")]
    io: IoArg,
    /// Worker threads per node (AF_PACKET fanout over them).
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Frames per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Key-hash seed of the tables [default: random].
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(clap::Subcommand)]
pub enum ClusterCmd {
    /// Create the namespaces, bridge and veths of an N-node cluster, write its tables and start
    /// its nodes.
    Up(UpArgs),
    /// Stop the nodes and remove everything `up` created (also after a failed or crashed `up`).
    Down {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /run/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Print the cluster description (JSON) with every node's counters and table sizes.
    Status {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /run/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// The state directory from `--dir` or the prefix.
pub fn state_dir(dir: Option<PathBuf>, name: &str) -> PathBuf {
    dir.unwrap_or_else(|| sb_topology::default_dir(name))
}

/// Loads the description of a running cluster, with a hint when there is none.
pub fn load_cluster(dir: &Path) -> anyhow::Result<Description> {
    sb_topology::load(dir).with_context(|| {
        format!(
            "no cluster description in {} (run `scalebricks cluster up` first, or pass --dir)",
            dir.display()
        )
    })
}

/// Node `i`'s configuration file name.
pub fn node_file(i: usize) -> String {
    format!("node{i}.json")
}

fn tunnels_for(a: &UpArgs, pool: Cidr) -> anyhow::Result<Vec<Tunnel>> {
    match &a.flows_file {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let t = sb_engine::lte::read_flows(&text, a.nodes)
                .with_context(|| format!("{}", p.display()))?;
            if t.is_empty() {
                bail!("{}: no tunnels", p.display());
            }
            Ok(t)
        }
        None => {
            if a.flows == 0 {
                bail!("--flows must be at least 1");
            }
            let room = 1u64 << (32 - u32::from(pool.len.min(32)));
            if a.flows as u64 * 2 > room {
                bail!(
                    "--flows {} needs a UE pool of at least {} addresses; --ue-pool {}/{} has {room}",
                    a.flows,
                    a.flows * 2,
                    pool.addr,
                    pool.len
                );
            }
            Ok(sb_engine::cluster::generate_tunnels_in(
                pool.addr,
                pool.len,
                a.flows,
                a.nodes,
                a.seed.unwrap_or(1),
                0,
            ))
        }
    }
}

fn node_config(
    d: &Description,
    i: usize,
    a: &UpArgs,
    arch: Arch,
    seed: u64,
    cluster_id: u64,
) -> NodeFile {
    let n = &d.nodes[i];
    let port = |l: &sb_topology::plan::Link| PortFile {
        ifname: l.local.name.clone(),
        mac: l.local.mac.to_string(),
        peer_mac: l.peer.mac.to_string(),
        ip: l.local.ip(),
    };
    NodeFile {
        cluster_id,
        node: i as u16,
        arch: arch.label().to_string(),
        fib: match a.fib {
            FibArg::Cuckoo => FibBackend::Cuckoo,
            FibArg::RteHash => FibBackend::RteHash,
        },
        io: match a.io {
            IoArg::Afpacket => IoBackend::Afpacket,
            IoArg::Xdp => IoBackend::Xdp,
        },
        workers: a.workers,
        batch: a.batch,
        seed,
        netns: Some(n.netns.clone()),
        inet: port(&n.inet),
        ran: port(&n.ran),
        fabric: port(&n.fabric),
        fabric_macs: d
            .nodes
            .iter()
            .map(|m| m.fabric.local.mac.to_string())
            .collect(),
        ran_addrs: d
            .nodes
            .iter()
            .map(|m| m.ran.local.ip().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED))
            .collect(),
        ran_mtu: n.ran.local.mtu as usize,
        gpt: (arch == Arch::ScaleBricks).then(|| d.dir.join(tables::GPT_FILE)),
        fib_table: d.dir.join(tables::fib_file(i)),
        uplink_table: d.dir.join(tables::uplink_file(i)),
        counters: sb_topology::forwarder_stats_path(&d.dir, i),
    }
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    let dir = state_dir(a.dir.clone(), &a.name);
    let ue_pool: Cidr = a.ue_pool.parse()?;
    let arch: Arch = a.arch.into();
    if !(1..=sb_topology::plan::MAX_NODES).contains(&a.nodes) {
        bail!("--nodes must be 1 to {}", sb_topology::plan::MAX_NODES);
    }
    let engine = matches!(a.forwarding, FwdArg::User);
    let tunnels = if engine {
        tunnels_for(&a, ue_pool)?
    } else {
        Vec::new()
    };
    let seed = a.seed.unwrap_or_else(rand::random);
    let cluster_id: u64 = rand::random();
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let spawn = move |d: &Description, node: usize| {
        let mut c = Command::new(&exe);
        c.arg("node")
            .arg("--config")
            .arg(d.dir.join(node_file(node)));
        c
    };
    let prepare = |d: &Description| -> Result<Vec<String>, String> {
        let w =
            tables::write_cluster_tables(&d.dir, arch, &tunnels, a.nodes as u16, seed, cluster_id)
                .map_err(|e| e.to_string())?;
        let mut files = w.files;
        for i in 0..d.nodes.len() {
            let cfg = node_config(d, i, &a, arch, seed, cluster_id);
            let name = node_file(i);
            let json = serde_json::to_vec_pretty(&cfg).map_err(|e| e.to_string())?;
            std::fs::write(d.dir.join(&name), json).map_err(|e| format!("{name}: {e}"))?;
            files.push(name);
        }
        Ok(files)
    };
    let abort_after_node = match std::env::var(ABORT_ENV) {
        Ok(v) => Some(v.parse().with_context(|| format!("{ABORT_ENV}={v}"))?),
        Err(_) => None,
    };
    let mut opts = UpOptions::new(&a.name, a.nodes, dir);
    opts.ue_pool = ue_pool;
    opts.forwarding = match a.forwarding {
        FwdArg::User => Forwarding::User,
        FwdArg::Kernel => Forwarding::Kernel,
        FwdArg::None => Forwarding::None,
    };
    if engine {
        opts.spawn = Some(&spawn);
        opts.prepare = Some(&prepare);
    }
    opts.abort_after_node = abort_after_node;
    // Building a node's FIB from its table file takes about a second per million entries here.
    opts.ready_timeout = Duration::from_secs(30 + (tunnels.len() / 200_000) as u64);
    let d = sb_topology::up(&opts)?;
    if engine {
        println!(
            "cluster {} up: {} nodes running {} over {} tunnels ({}), description {}",
            d.prefix,
            d.nodes.len(),
            arch,
            tunnels.len(),
            d.dir.join(tables::FLOWS_FILE).display(),
            d.dir.join(sb_topology::DESCRIPTION_FILE).display()
        );
    } else {
        println!(
            "cluster {} up: {} nodes, forwarding {:?}, description {}",
            d.prefix,
            d.nodes.len(),
            d.forwarding,
            d.dir.join(sb_topology::DESCRIPTION_FILE).display()
        );
    }
    Ok(())
}

pub fn run(cmd: ClusterCmd) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Up(a) => up(a),
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
            v["node_status"] = serde_json::Value::Array(stats);
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(())
        }
    }
}
