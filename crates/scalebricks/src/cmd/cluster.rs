//! `scalebricks cluster up|down|status`: a cluster of node processes in network namespaces.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use sb_engine::lte::Tunnel;
use sb_engine::Arch;
use sb_node::config::{FibBackend, IoBackend, NodeFile, PortFile};
use sb_node::control::{ControlFile, CONTROL_PORT};
use sb_node::tables;
use sb_topology::{Cidr, Description, Forwarding, UpOptions};
use std::net::SocketAddr;

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
    /// TEA: a switch process in the switch namespace runs the NF (`--nf`) over a table held
    /// in memory servers, one in each node's namespace, read over the fabric (no node
    /// processes, `--forwarding` is ignored; see `scalebricks::cmd::tea`).
    Tea,
}

impl ArchArg {
    /// The engine's architecture (`None` for TEA, which runs no engine in the nodes).
    fn engine(self) -> Option<Arch> {
        match self {
            ArchArg::Scalebricks => Some(Arch::ScaleBricks),
            ArchArg::FullDup => Some(Arch::FullDup),
            ArchArg::HashPart => Some(Arch::HashPart),
            ArchArg::Tea => None,
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
    /// The XDP fast path (build with `--features fastpath`): sb-xdp's programs on every
    /// node's inet, ran and fabric forward in the kernel, AF_PACKET takes what they pass up; the
    /// peers of the nodes' links get GRO on (a NAPI instance, which native redirects into a
    /// veth need). Every architecture (sb-xdp's programs run the node's).
    XdpFast,
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// Number of nodes (1..=250).
    #[arg(long)]
    nodes: usize,
    /// Name prefix of the namespaces (PREFIX-sw, PREFIX-node0, PREFIX-inet0, PREFIX-ran0, ...).
    #[arg(long, default_value = "sb")]
    name: String,
    /// State directory (description, journal, tables, counters, the nodes' logs) [default:
    /// /var/lib/scalebricks/PREFIX].
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
    /// The control plane (scalebricks with the cuckoo FIB): every node owns a range of the GPT,
    /// builds its part and takes updates (`scalebricks update`) while forwarding. `off`: the
    /// GPT is built here once and never changes.
    #[arg(long, value_enum, default_value = "on")]
    control: OnOff,
    /// Flows the GPT has room for (live inserts beyond the initial flows) [default: twice
    /// the initial flows, at least 65536].
    #[arg(long)]
    capacity: Option<u64>,
    /// The largest IP packet the engines send on `ran` (576-9000) [default: the ran link's
    /// MTU, 9000]: a lower value makes them answer bigger downstream packets with ICMP
    /// Fragmentation Needed / Packet Too Big (tests; a gNB link with a smaller MTU).
    #[arg(long)]
    ran_mtu: Option<usize>,
    /// The addresses PFCP peers (SMFs) may send from, comma-separated IP addresses or
    /// ADDR/LEN prefixes, or `any` [default: the control network 10.3.0.0/24, the control
    /// namespace's addresses]. The nodes do not handle PFCP from elsewhere (an Association
    /// Setup is answered Request rejected).
    #[arg(long, value_delimiter = ',')]
    smf_allow: Vec<String>,
    /// IPv4 UE pool (ADDR/LEN) the PFCP endpoints give addresses from when an SMF asks CHV4,
    /// split disjointly among the nodes (each endpoint allocates from its share only) [default:
    /// none: CHV4 is refused and UEIP not advertised]. Route it to the nodes' RAN side (inside
    /// --ue-pool) for downlink to reach its UEs.
    #[arg(long)]
    pfcp_ue_pool: Option<String>,
    /// IPv6 UE pool (ADDR/LEN, LEN at most 64 minus the bits of the split) for CHV6: each UE
    /// gets a /64 of its node's share.
    #[arg(long)]
    pfcp_ue_pool6: Option<String>,
    /// Keep PFCP sessions in memory only, as before they were the GPT ranges' records: a node
    /// restart loses its sessions (a new Recovery Time Stamp) and nobody serves them while it
    /// is down (for comparison: `bench pfcp --pfcp-state volatile`).
    #[arg(long)]
    pfcp_volatile: bool,
    /// Replicas of each GPT range (with the control plane): range i is a Raft group on nodes
    /// i, i+1, ... whose leader owns it; an update is acknowledged once a majority of them
    /// hold it durable. Capped at the node count; 1: no replication [default: 3 with 3 nodes
    /// or more, else 1].
    #[arg(long)]
    replicas: Option<usize>,
    /// Failure detection (with the control plane), in milliseconds: a node not heard for this
    /// long by a majority is no longer waited for (its handlers' installs are refused, the
    /// others' updates go on), and a range's followers elect a new leader after half of it to
    /// all of it without theirs. Raise it on a loaded machine, where a node's control thread
    /// may wait for a CPU that long (100 to 60000).
    #[arg(long, default_value_t = sb_node::control::DEFAULT_DETECT_MS,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    detect_ms: u64,
    /// A node checkpoints its log (replaces it by its state, atomically) once the log is this
    /// many KiB (default 64 MiB) and more than its last checkpoint, so that a restart replays at most about
    /// twice its state (with the control plane; 0: only every 2^20 records).
    #[arg(long, default_value_t = sb_node::control::DEFAULT_CHECKPOINT_KB)]
    checkpoint_kb: u64,
    /// With `--arch tea`: the network function the TEA switch runs (its table, `--flows`
    /// generated entries, in tea-flows.csv).
    #[arg(long, value_enum, default_value = "nat")]
    nf: super::tea::Nf,
    /// With `--arch tea`: the switch's hot-key cache entries (0: off, every lookup remote).
    #[arg(long, default_value_t = 1024)]
    tea_cache: usize,
    /// With `--arch tea`: reads in flight per memory server before the switch reads the
    /// secondary.
    #[arg(long, default_value_t = 16)]
    tea_max_outstanding: u32,
    /// With `--arch tea`: a read not answered within this many milliseconds loses its packet
    /// (and counts towards its server's failure).
    #[arg(long, default_value_t = 200)]
    tea_timeout_ms: u64,
}

impl UpArgs {
    /// The replication factor the nodes get.
    fn replicas(&self) -> usize {
        let n = self.nodes.max(1);
        match self.replicas {
            Some(r) => r.clamp(1, n),
            None if n >= 3 => 3,
            None => 1,
        }
    }
}

/// What `cluster up`'s PFCP flags give each node's control file.
struct PfcpSettings {
    /// The allowed peers; None: the control network's prefix.
    allow: Option<Vec<String>>,
    /// Each node's share of the UE pools (empty: no pool).
    v4: Vec<Vec<String>>,
    v6: Vec<Vec<String>>,
}

impl PfcpSettings {
    fn of(a: &UpArgs) -> anyhow::Result<PfcpSettings> {
        use sb_pfcp::prefix;
        let allow = if a.smf_allow.is_empty() {
            None
        } else if a.smf_allow.iter().any(|s| s.trim() == "any") {
            Some(Vec::new())
        } else {
            let parsed: Result<Vec<_>, _> = a.smf_allow.iter().map(|s| prefix::parse(s)).collect();
            let parsed = parsed.context("--smf-allow")?;
            Some(parsed.iter().map(|(ip, l)| format!("{ip}/{l}")).collect())
        };
        let shares =
            |flag: &str, pool: &Option<String>, v4: bool| -> anyhow::Result<Vec<Vec<String>>> {
                let Some(pool) = pool else {
                    return Ok(vec![Vec::new(); a.nodes]);
                };
                let p = prefix::parse(pool).with_context(|| flag.to_string())?;
                if p.0.is_ipv4() != v4 {
                    bail!(
                        "{flag} {pool}: not an {} prefix",
                        if v4 { "IPv4" } else { "IPv6" }
                    );
                }
                let split = prefix::split(p, a.nodes, if v4 { 30 } else { 64 })
                    .with_context(|| format!("{flag} among {} nodes", a.nodes))?;
                Ok(split
                    .into_iter()
                    .map(|share| share.iter().map(|(ip, l)| format!("{ip}/{l}")).collect())
                    .collect())
            };
        Ok(PfcpSettings {
            allow,
            v4: shares("--pfcp-ue-pool", &a.pfcp_ue_pool, true)?,
            v6: shares("--pfcp-ue-pool6", &a.pfcp_ue_pool6, false)?,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// The control spec's file in the state directory (readable by root only: it holds the key).
pub const CONTROL_SPEC_FILE: &str = "control.json";

/// The control plane's client file (the client key; mode 0600): all `update` reads.
pub const CONTROL_CLIENT_FILE: &str = "client.json";

/// The cluster's operator API token (`scalebricks ctl` and the nodes read it; mode 0600).
pub const API_TOKEN_FILE: &str = "api.token";

/// Writes a fresh random API token (32 bytes, hex) to `path`, readable by its owner only.
fn write_api_token(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let token: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{token}")
}

/// Node `i`'s log directory in the state directory.
pub fn wal_dir(i: usize) -> String {
    format!("node{i}.wal")
}

// Parsed once per command: the size of `Up`'s arguments costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand)]
pub enum ClusterCmd {
    /// Create the namespaces, bridge and veths of an N-node cluster, write its tables and start
    /// its nodes.
    Up(UpArgs),
    /// Stop the nodes and remove everything `up` created (also after a failed or crashed `up`,
    /// or after a reboot): the namespaces, and the state directory `up` made, the nodes' logs
    /// included.
    Down {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /var/lib/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Every node's state: pid, up or down, GPT digest, update lag per owner, resyncs, log
    /// size, table sizes (`--json`: also the description and every node's counters). A TEA
    /// cluster: a row for the switch and one per memory server (`--json`: `tea`, and the
    /// switch's counters as `switch_status`).
    Status {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /var/lib/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// One JSON object: `nodes` (a row per node), `node_status` (each node's counters file),
        /// `cluster` (the description).
        #[arg(long)]
        json: bool,
    },
    /// Give the cluster a new master secret, so new node pair keys and a new client key:
    /// rewrites `control.json` and `client.json`. The running nodes read it within 250 ms
    /// and take it without restarting or losing any state (they seal with the old pair keys
    /// for 2 s more, so that all have the new one first, and accept them for 30 s); a client
    /// with the old `client.json` (or a copy of its key) is refused from then on. Waits (10 s
    /// at most) until every running node's status names the new key (`key_fingerprint`),
    /// and fails naming those that do not.
    RotateKey {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /var/lib/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Start node N again (after it died or was killed) in its namespace: it recovers its
    /// updates from its log, its GPT and FIB slice from the other nodes. A TEA cluster: node
    /// N's memory server, from its image (the switch keeps it current).
    Restart {
        /// Name prefix used with `up`.
        #[arg(long, default_value = "sb")]
        name: String,
        /// State directory [default: /var/lib/scalebricks/PREFIX].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The node.
        #[arg(long)]
        node: usize,
    },
}

/// `cluster rotate-key`: a new master secret in the cluster's `control.json` (nothing else of
/// it changes) and the client key derived from it in `client.json`, each written atomically.
pub fn rotate_key(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(CONTROL_SPEC_FILE);
    let mut spec = sb_node::control::read_spec(&path).map_err(|e| {
        anyhow::anyhow!("{e} (a cluster without its control plane has no key to rotate)")
    })?;
    spec.key = sb_node::control::new_master();
    sb_node::control::write_spec(&path, &spec).map_err(|e| anyhow::anyhow!("{e}"))?;
    sb_node::control::ClientFile::of(&spec)
        .write(&dir.join(CONTROL_CLIENT_FILE))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// How long `cluster rotate-key` waits for the running nodes to take the new secret.
const ROTATE_CONFIRM: std::time::Duration = std::time::Duration::from_secs(10);

/// Waits until every running node of the cluster in `dir` says (its counters file's
/// `key_fingerprint`) it seals with the master secret `fingerprint` names; Ok with the nodes
/// that are down (they read the file when they start), Err naming the running nodes that did
/// not take it within `timeout`.
fn confirm_key(
    dir: &Path,
    fingerprint: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<Vec<usize>> {
    let d = load_cluster(dir)?;
    let t0 = std::time::Instant::now();
    loop {
        let (mut down, mut behind) = (Vec::new(), Vec::new());
        for n in &d.nodes {
            let up = sb_topology::node_process(dir, n.index)?.is_some_and(|p| p.1);
            if !up {
                down.push(n.index);
                continue;
            }
            let file = std::fs::read_to_string(sb_topology::forwarder_stats_path(dir, n.index))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .unwrap_or(serde_json::Value::Null);
            if file["control"]["status"]["key_fingerprint"].as_str() != Some(fingerprint) {
                behind.push(n.index);
            }
        }
        if behind.is_empty() {
            return Ok(down);
        }
        if t0.elapsed() >= timeout {
            anyhow::bail!(
                "node(s) {behind:?} still run on the old key {:.1} s after the rotation (their counters file's key_fingerprint is not {fingerprint}); the old client key is refused by the nodes that took the new one",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The command that runs node `node` of the cluster in `dir`.
fn node_command(exe: &Path, dir: &Path, node: usize) -> Command {
    let mut c = Command::new(exe);
    c.arg("node").arg("--config").arg(dir.join(node_file(node)));
    c
}

/// One row of `cluster status`: the process and what its counters file says.
fn node_row(
    dir: &Path,
    node: usize,
    file: &serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let proc = sb_topology::node_process(dir, node)?;
    let mut row = serde_json::json!({
        "node": node,
        "pid": proc.map(|p| p.0),
        "up": proc.is_some_and(|p| p.1),
        "fib_entries": file["tables"]["fib_entries"],
        "gpt_keys": file["tables"]["gpt_keys"],
        "log_bytes": file["control"]["log_bytes"],
    });
    if let Some(st) = file["control"]["status"].as_object() {
        // With a control plane the GPT's keys are the owners' RIB keys (`rib_keys`, summed over
        // the nodes); the count in the table sizes is the one it started with.
        row["gpt_keys"] = serde_json::Value::Null;
        for (k, v) in st {
            row[k.as_str()] = v.clone();
        }
        let resyncs: u64 = st
            .get("owners")
            .and_then(|o| o.as_array())
            .map_or(0, |o| o.iter().filter_map(|x| x["resyncs"].as_u64()).sum());
        row["resyncs"] = resyncs.into();
        row["ready"] = file["control"]["ready"].clone();
        row["fib_insert_failed"] = file["control"]["fib_insert_failed"].clone();
    }
    Ok(row)
}

fn status(dir: &Path, json: bool) -> anyhow::Result<()> {
    let d = load_cluster(dir)?;
    if dir.join(super::tea::CONFIG_FILE).exists() {
        return super::tea::status(dir, json);
    }
    let mut files = Vec::new();
    let mut rows = Vec::new();
    for n in &d.nodes {
        let p = sb_topology::forwarder_stats_path(dir, n.index);
        let s = std::fs::read_to_string(&p)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .unwrap_or(serde_json::Value::Null);
        rows.push(node_row(dir, n.index, &s)?);
        files.push(s);
    }
    if json {
        let v = serde_json::json!({"cluster": d, "nodes": rows, "node_status": files});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:>4} {:>8} {:>5} {:>18} {:>10} {:>10} {:>8} {:>10}",
        "node", "pid", "up", "gpt_digest", "rib_keys", "fib", "resyncs", "log_bytes"
    );
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    for r in &rows {
        println!(
            "{:>4} {:>8} {:>5} {:>18} {:>10} {:>10} {:>8} {:>10}",
            show(&r["node"]),
            show(&r["pid"]),
            show(&r["up"]),
            show(&r["gpt_digest"]),
            show(&r["rib_keys"]),
            show(&r["fib_entries"]),
            show(&r["resyncs"]),
            show(&r["log_bytes"])
        );
    }
    Ok(())
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

/// What every node of a new cluster shares.
#[derive(Clone, Copy)]
struct Shared {
    arch: Arch,
    seed: u64,
    cluster_id: u64,
    /// The control plane runs.
    control: bool,
    /// Flows the GPT and FIBs have room for.
    capacity: u64,
    /// The cluster's PFCP Recovery Time Stamp (seconds since 1900): every node's endpoint
    /// has it, as one UPF.
    recovery: u32,
}

fn node_config(d: &Description, i: usize, a: &UpArgs, sh: Shared, pfcp: &PfcpSettings) -> NodeFile {
    let Shared {
        arch,
        seed,
        cluster_id,
        control,
        capacity,
        recovery,
    } = sh;
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
            IoArg::XdpFast => IoBackend::XdpFast,
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
        ran_mtu: a.ran_mtu.unwrap_or(n.ran.local.mtu as usize),
        gpt: (arch == Arch::ScaleBricks && !control).then(|| d.dir.join(tables::GPT_FILE)),
        fib_table: d.dir.join(tables::fib_file(i)),
        uplink_table: d.dir.join(tables::uplink_file(i)),
        counters: sb_topology::forwarder_stats_path(&d.dir, i),
        control: control.then(|| ControlFile {
            spec: d.dir.join(CONTROL_SPEC_FILE),
            flows: d.dir.join(tables::FLOWS_FILE),
            wal: d.dir.join(wal_dir(i)),
            peers: control_addrs(d),
            // Room for the node's share of the GPT's capacity, with 50% for imbalance.
            fib_room: (capacity / d.nodes.len().max(1) as u64 * 3 / 2) as usize,
            replicas: a.replicas(),
            detect_ms: Some(a.detect_ms),
            checkpoint_kb: Some(a.checkpoint_kb),
            // Every node is a PFCP endpoint of one UPF: one Node ID, one Recovery Time Stamp.
            pfcp: n.pfcp_addr,
            pfcp_node_id: Some(format!("upf.{}.scalebricks", a.name)),
            pfcp_recovery_time_stamp: Some(recovery),
            pfcp_peers: d.nodes.iter().filter_map(|n| n.pfcp_addr).collect(),
            // Only the SMFs allowed (by default the control namespace's addresses).
            pfcp_allowed_peers: pfcp.allow.clone().unwrap_or_else(|| {
                (d.control.as_ref().and_then(|c| c.network()))
                    .map(|(ip, l)| vec![format!("{ip}/{l}")])
                    .unwrap_or_default()
            }),
            // The node's share of the CHV4/CHV6 pools: disjoint from every other node's.
            pfcp_ue_pool_v4: pfcp.v4.get(i).cloned().unwrap_or_default(),
            pfcp_ue_pool_v6: pfcp.v6.get(i).cloned().unwrap_or_default(),
            pfcp_volatile: a.pfcp_volatile,
        }),
        metrics: n.metrics_addr(),
        api: control
            .then(|| {
                n.grpc_addr.map(|addr| sb_node::config::ApiFile {
                    addr,
                    token_file: d.dir.join(API_TOKEN_FILE),
                    peers: d.nodes.iter().filter_map(|m| m.grpc_addr).collect(),
                })
            })
            .flatten(),
    }
}

/// Every node's control address, port [`CONTROL_PORT`]: its address on the control network
/// (`ctl`), or its fabric address in a description made before the control network existed.
/// The control network keeps the nodes' update traffic out of the fabric, where every datagram
/// was also copied into the data plane's AF_PACKET ring and woke its worker.
pub fn control_addrs(d: &Description) -> Vec<SocketAddr> {
    d.nodes
        .iter()
        .map(|m| {
            let ip = m
                .control_addr
                .or_else(|| m.fabric.local.ip())
                .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
            SocketAddr::from((ip, CONTROL_PORT))
        })
        .collect()
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    let dir = state_dir(a.dir.clone(), &a.name);
    let ue_pool: Cidr = a.ue_pool.parse()?;
    if !(1..=sb_topology::plan::MAX_NODES).contains(&a.nodes) {
        bail!("--nodes must be 1 to {}", sb_topology::plan::MAX_NODES);
    }
    let Some(arch) = a.arch.engine() else {
        return up_tea(a, dir, ue_pool);
    };
    let engine = matches!(a.forwarding, FwdArg::User);
    let fast_path = matches!(a.io, IoArg::XdpFast);
    let tunnels = if engine {
        tunnels_for(&a, ue_pool)?
    } else {
        Vec::new()
    };
    let pfcp = PfcpSettings::of(&a)?;
    let seed = a.seed.unwrap_or_else(rand::random);
    let cluster_id: u64 = rand::random();
    // The cluster's PFCP Recovery Time Stamp: now, in seconds since 1900.
    let recovery = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        + sb_node::pfcp::NTP_UNIX_OFFSET) as u32;
    let control = engine
        && a.control == OnOff::On
        && arch == Arch::ScaleBricks
        && matches!(a.fib, FibArg::Cuckoo);
    if a.control == OnOff::On && engine && !control {
        eprintln!("note: no control plane for {arch} with this FIB (it runs scalebricks with the cuckoo FIB); tables are fixed");
    }
    let capacity = a.capacity.unwrap_or((tunnels.len() as u64 * 2).max(65_536));
    if capacity < tunnels.len() as u64 {
        bail!(
            "--capacity {capacity} is below the {} initial flows",
            tunnels.len()
        );
    }
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let spawn = move |d: &Description, node: usize| node_command(&exe, &d.dir, node);
    let prepare = |d: &Description| -> Result<Vec<String>, String> {
        // With the control plane the nodes build the GPT themselves (each its range) and
        // only the initial FIB slices are written here.
        let w = tables::write_cluster_tables(
            &d.dir,
            arch,
            &tunnels,
            a.nodes as u16,
            seed,
            cluster_id,
            !control,
        )
        .map_err(|e| e.to_string())?;
        let mut files = w.files;
        if control {
            let spec = sb_node::control::new_spec(cluster_id, a.nodes as u16, seed, capacity);
            sb_node::control::write_spec(&d.dir.join(CONTROL_SPEC_FILE), &spec)
                .map_err(|e| e.to_string())?;
            files.push(CONTROL_SPEC_FILE.to_string());
            sb_node::control::ClientFile::of(&spec)
                .write(&d.dir.join(CONTROL_CLIENT_FILE))
                .map_err(|e| e.to_string())?;
            files.push(CONTROL_CLIENT_FILE.to_string());
            write_api_token(&d.dir.join(API_TOKEN_FILE))
                .map_err(|e| format!("{API_TOKEN_FILE}: {e}"))?;
            files.push(API_TOKEN_FILE.to_string());
            for i in 0..d.nodes.len() {
                files.push(wal_dir(i));
                // The node's first start (an empty log without this mark is a lost log).
                let mark = sb_node::control::first_start_mark(&d.dir.join(wal_dir(i)));
                std::fs::write(&mark, b"").map_err(|e| format!("{}: {e}", mark.display()))?;
                files.push(
                    mark.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into(),
                );
            }
        }
        for i in 0..d.nodes.len() {
            let sh = Shared {
                arch,
                seed,
                cluster_id,
                control,
                capacity,
                recovery,
            };
            let cfg = node_config(d, i, &a, sh, &pfcp);
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
    opts.napi_peers = fast_path && engine;
    // A node waits up to 60 s + 1 s per 100K flows for its GPT and FIB slice (construction and
    // distribution, `sb_node::run`); the cluster waits longer, so that a node that gives up says
    // why itself. An 8-node 10M-flow construction takes minutes on 2 cores.
    opts.ready_timeout = Duration::from_secs(90 + (tunnels.len() / 100_000) as u64);
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

/// `cluster up --arch tea`: the topology without forwarding, then the TEA switch and memory
/// servers ([`super::tea::start`]); taken down again if starting them fails.
fn up_tea(a: UpArgs, dir: PathBuf, ue_pool: Cidr) -> anyhow::Result<()> {
    if a.flows_file.is_some() {
        bail!(
            "--flows-file is a tunnels file; with --arch tea the entries are generated (--flows)"
        );
    }
    let t = super::tea::TeaUp {
        nf: a.nf,
        flows: a.flows,
        seed: a.seed.unwrap_or_else(rand::random),
        cache: a.tea_cache,
        max_outstanding: a.tea_max_outstanding.max(1),
        timeout_ms: a.tea_timeout_ms.max(1),
    };
    // Checked before anything is made.
    super::tea::generate(t.nf, t.flows.min(1), 1)?;
    if t.flows > super::tea::MAX_FLOWS {
        bail!(
            "--flows {}: at most {} with --arch tea",
            t.flows,
            super::tea::MAX_FLOWS
        );
    }
    let exe = std::env::current_exe().context("cannot find our own executable")?;
    let mut opts = UpOptions::new(&a.name, a.nodes, dir.clone());
    opts.ue_pool = ue_pool;
    opts.forwarding = Forwarding::None;
    let d = sb_topology::up(&opts)?;
    if let Err(e) = super::tea::start(&d, &t, &exe) {
        return match sb_topology::down(&dir) {
            Ok(_) => Err(e.context("cluster up --arch tea (rolled back)")),
            Err(r) => Err(e.context(format!(
                "cluster up --arch tea; rolling back failed too: {r}"
            ))),
        };
    }
    println!(
        "cluster {} up: TEA switch running {:?} over {} entries in {} memory servers (node namespaces); traffic in on {}/{} (send on its peer {}), out on {} (capture on {}); description {}",
        d.prefix,
        t.nf,
        t.flows,
        d.nodes.len(),
        d.switch.netns,
        super::tea::WAN.0,
        super::tea::WAN.1,
        super::tea::LAN.0,
        super::tea::LAN.1,
        d.dir.join(sb_topology::DESCRIPTION_FILE).display()
    );
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
        ClusterCmd::Status { name, dir, json } => status(&state_dir(dir, &name), json),
        ClusterCmd::RotateKey { name, dir } => {
            let dir = state_dir(dir, &name);
            let t0 = std::time::Instant::now();
            rotate_key(&dir)?;
            println!(
                "{}: new master secret in {CONTROL_SPEC_FILE} and client key in {CONTROL_CLIENT_FILE}",
                dir.display()
            );
            let spec = sb_node::control::read_spec(&dir.join(CONTROL_SPEC_FILE))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let fp = sb_control::wire::key_fingerprint(&spec.key);
            let down = confirm_key(&dir, &fp, ROTATE_CONFIRM)?;
            println!(
                "every running node took it within {:.1} s (key fingerprint {fp}); the old client key is refused from now on{}",
                t0.elapsed().as_secs_f64(),
                if down.is_empty() {
                    String::new()
                } else {
                    format!("; node(s) {down:?} are down and read it when they start")
                }
            );
            Ok(())
        }
        ClusterCmd::Restart { name, dir, node } => {
            let dir = state_dir(dir, &name);
            let exe = std::env::current_exe().context("cannot find our own executable")?;
            if dir.join(super::tea::CONFIG_FILE).exists() {
                let pid = super::tea::restart(&dir, node, &exe)?;
                println!("memory server {node} restarted (pid {pid})");
                return Ok(());
            }
            let spawn = |d: &Description, node: usize| node_command(&exe, &d.dir, node);
            let pid = sb_topology::respawn(&dir, node, &spawn, Duration::from_secs(120))?;
            println!("node {node} restarted (pid {pid})");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Up {
        #[command(flatten)]
        up: UpArgs,
    }

    fn settings(args: &[&str]) -> anyhow::Result<PfcpSettings> {
        let all = [&["up", "--nodes", "3"], args].concat();
        PfcpSettings::of(&Up::try_parse_from(all)?.up)
    }

    #[test]
    fn rotate_key_changes_the_master_and_the_client_key_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sb-rotate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = sb_node::control::new_spec(77, 3, 5, 1000);
        sb_node::control::write_spec(&dir.join(CONTROL_SPEC_FILE), &spec).unwrap();
        let client = sb_node::control::ClientFile::of(&spec);
        client.write(&dir.join(CONTROL_CLIENT_FILE)).unwrap();
        rotate_key(&dir).unwrap();
        let new = sb_node::control::read_spec(&dir.join(CONTROL_SPEC_FILE)).unwrap();
        assert_ne!(new.key, spec.key);
        assert_eq!(ClusterSpecNoKey::of(&new), ClusterSpecNoKey::of(&spec));
        let c = sb_node::control::ClientFile::read(&dir.join(CONTROL_CLIENT_FILE)).unwrap();
        assert_eq!(c.key, new.client_key());
        assert_ne!(c.key, client.key);
        for f in [CONTROL_SPEC_FILE, CONTROL_CLIENT_FILE] {
            let mode = std::fs::metadata(dir.join(f)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(rotate_key(&dir).is_err(), "no cluster there");
    }

    /// A spec's JSON without its key.
    #[derive(Debug, PartialEq)]
    struct ClusterSpecNoKey(serde_json::Value);

    impl ClusterSpecNoKey {
        fn of(s: &sb_control::ClusterSpec) -> Self {
            let mut v = serde_json::to_value(s).unwrap();
            v.as_object_mut().unwrap().remove("key");
            ClusterSpecNoKey(v)
        }
    }

    #[test]
    fn pfcp_flags_give_each_node_its_share() {
        let s = settings(&[]).unwrap();
        assert!(s.allow.is_none(), "default: the control network");
        assert_eq!(s.v4, vec![Vec::<String>::new(); 3]);
        let s = settings(&[
            "--smf-allow",
            "10.3.0.254,192.0.2.0/24",
            "--pfcp-ue-pool",
            "10.45.0.0/16",
            "--pfcp-ue-pool6",
            "2001:db8:cafe::/48",
        ])
        .unwrap();
        assert_eq!(s.allow.unwrap(), ["10.3.0.254/32", "192.0.2.0/24"]);
        assert_eq!(
            s.v4,
            [
                vec!["10.45.0.0/18", "10.45.192.0/18"],
                vec!["10.45.64.0/18"],
                vec!["10.45.128.0/18"]
            ]
        );
        assert_eq!(s.v6[1], ["2001:db8:cafe:4000::/50"]);
        assert_eq!(
            settings(&["--smf-allow", "any"]).unwrap().allow,
            Some(vec![])
        );
        assert!(settings(&["--smf-allow", "10.3.0/24"]).is_err());
        assert!(settings(&["--pfcp-ue-pool", "2001:db8::/48"]).is_err());
        assert!(settings(&["--pfcp-ue-pool", "10.45.0.0/29"]).is_err());
        assert!(settings(&["--pfcp-ue-pool6", "2001:db8::/63"]).is_err());
    }

    #[test]
    fn replicas_default_to_three_and_are_capped_at_the_node_count() {
        let r = |args: &[&str]| {
            Up::try_parse_from([&["up"], args].concat())
                .unwrap()
                .up
                .replicas()
        };
        assert_eq!(r(&["--nodes", "5"]), 3);
        assert_eq!(r(&["--nodes", "3"]), 3);
        assert_eq!(r(&["--nodes", "2"]), 1);
        assert_eq!(r(&["--nodes", "1"]), 1);
        assert_eq!(r(&["--nodes", "4", "--replicas", "1"]), 1);
        assert_eq!(r(&["--nodes", "4", "--replicas", "9"]), 4);
        assert_eq!(r(&["--nodes", "4", "--replicas", "0"]), 1);
    }

    #[test]
    fn detection_defaults_to_500_ms_and_is_bounded() {
        let d = |args: &[&str]| {
            Up::try_parse_from([&["up", "--nodes", "4"], args].concat()).map(|u| u.up.detect_ms)
        };
        assert_eq!(d(&[]).unwrap(), 500);
        assert_eq!(d(&["--detect-ms", "2000"]).unwrap(), 2000);
        assert!(d(&["--detect-ms", "99"]).is_err());
        assert!(d(&["--detect-ms", "60001"]).is_err());
        // What the nodes' state machines get from it.
        let file = |ms: Option<u64>| ControlFile {
            spec: "s".into(),
            flows: "f".into(),
            wal: "w".into(),
            peers: Vec::new(),
            fib_room: 0,
            pfcp: None,
            replicas: 3,
            pfcp_node_id: None,
            pfcp_recovery_time_stamp: None,
            pfcp_peers: Vec::new(),
            pfcp_allowed_peers: Vec::new(),
            pfcp_ue_pool_v4: Vec::new(),
            pfcp_ue_pool_v6: Vec::new(),
            pfcp_volatile: false,
            detect_ms: ms,
            checkpoint_kb: None,
        };
        assert_eq!(
            file(None).detection().unwrap(),
            (500_000_000, 50_000_000, 25)
        );
        assert_eq!(
            file(Some(2000)).detection().unwrap(),
            (2_000_000_000, 200_000_000, 100)
        );
        assert!(file(Some(50)).detection().is_err());
    }
}
