//! `cluster up --arch tea --nf nat|firewall|lb|vpn` (issue 27, the TEA paper §4-6): a TEA
//! switch process in the switch namespace and a memory server in each node's namespace.
//!
//! What `up` adds to the ordinary topology (made with no forwarding: no node process, kernel
//! forwarding off in the nodes):
//! - **The fabric.** The bridge `br0` stays (it is the fabric: every node's `fabric` port is
//!   one of its ports) and gets the switch's fabric address [`SWITCH_FABRIC_IP`]`/24`, with
//!   static neighbour entries both ways; IP forwarding is off in the switch namespace.
//! - **The switch's front ports.** Two veth pairs inside the switch namespace: `wan` (the
//!   switch receives the NF's traffic there; its peer `wan-x` is where a generator sends) and
//!   `lan` (translated packets leave there; its peer `lan-x` is where they are captured).
//! - **The switch** (`scalebricks tea-switch`, in the switch namespace): the control plane
//!   builds the TEA table from the flows file ([`FLOWS_FILE`], generated: `--flows N`), writes
//!   each server's part as an image file ([`server_image`]), then the data plane runs the NF
//!   (`sb-nf`'s App) over the remote table ([`sb_tea_net::switch::TeaSwitch`]) with reads on
//!   UDP port [`TEA_PORT`] from `10.0.0.254`, packets in on `wan` and out on `lan`
//!   (AF_PACKET). Its counters: [`SWITCH_STATS`], rewritten every 500 ms.
//! - **The memory servers** (`scalebricks tea-server`, one in each node's namespace): each
//!   loads its image (range `i`'s primary copy on node `i`, and with more than one node range
//!   `i-1`'s secondary copy) and answers reads on its fabric address `10.0.0.{i+1}:4791`.
//!   Counters: [`server_stats`].
//!
//! - **Updates** (`scalebricks tea-insert`): entries in the flows file's format go to the
//!   switch's control socket ([`CONTROL_SOCKET`], a Unix datagram socket in the state
//!   directory); the switch places each in its table and writes the buckets it changed to
//!   the servers by one-sided writes ([`sb_tea_net::switch::TeaSwitch::update`]) while its
//!   lookups go on, rewrites the image files, and answers once every write is acknowledged.
//!   A server that missed writes (dead meanwhile) gets its regions rewritten when it answers
//!   again.
//!
//! `cluster down` stops them (their pids are in the journal) and removes the namespaces.
//! `cluster status` shows the switch's and each memory server's row ([`status`]);
//! `cluster restart --node N` starts node N's memory server again from its image
//! ([`restart`]).
//!
//! Limits: only the downstream direction (the FIB key's: `wan` to `lan`) runs in the switch,
//! the NFs' inside-to-outside direction is not wired (so no entry is created by the NF's own
//! first outbound packet: new entries come from `tea-insert`).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use sb_engine::App;
use sb_io::afpacket::{AfPacketConfig, AfPacketPort, RxMode};
use sb_io::{PacketBatch, Port};
use sb_nf::firewall::{Conn, ConnState, Firewall};
use sb_nf::flow::FlowKey;
use sb_nf::lb::{Backend, Lb, Vip};
use sb_nf::nat::{Nat, NatConfig, Translation};
use sb_nf::vpn::{self, Vpn, VpnConfig};
use sb_tea::{
    FlowParams, Health, Layout, Placed, RangeEntry, RangeTable, ServerId, TableParams, TeaTable,
};
use sb_tea_net::driver::{Output, UdpSwitch};
use sb_tea_net::server::{self, MemoryServer};
use sb_tea_net::switch::{SwitchDrop, SwitchParams, TeaSwitch};
use sb_topology::journal::{Entry, Journal};
use sb_topology::{sys, Description};

/// UDP port of the memory servers and the switch's reads (RoCE v2's).
pub const TEA_PORT: u16 = 4791;
/// The switch's address on the fabric, on `br0`.
pub const SWITCH_FABRIC_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);
/// The TEA configuration in the state directory.
pub const CONFIG_FILE: &str = "tea.json";
/// The table's entries (CSV, columns per NF: see [`Nf::header`]).
pub const FLOWS_FILE: &str = "tea-flows.csv";
/// The switch's counters (JSON).
pub const SWITCH_STATS: &str = "tea-switch.json";
/// The switch's control socket (Unix datagram) in the state directory: `tea-insert` sends
/// entries there.
pub const CONTROL_SOCKET: &str = "tea-switch.sock";
/// The switch's port where the NF's traffic comes in, and its peer.
pub const WAN: (&str, &str) = ("wan", "wan-x");
/// The switch's port where translated packets leave, and its peer.
pub const LAN: (&str, &str) = ("lan", "lan-x");
/// The NAT's public address (generated flows).
pub const NAT_PUBLIC: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
/// The load balancer's VIP (generated flows), port 80, TCP and UDP.
pub const LB_VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
/// The VPN gateway's customer-side and server-side addresses.
pub const VPN_ADDRS: (Ipv4Addr, Ipv4Addr) = (
    Ipv4Addr::new(198, 51, 100, 20),
    Ipv4Addr::new(192, 168, 255, 1),
);
/// Most generated flows (the generator's addresses are unique up to this).
pub const MAX_FLOWS: usize = 1_000_000;

/// Memory server `i`'s image file.
pub fn server_image(i: usize) -> String {
    format!("tea-mem{i}.img")
}

/// Memory server `i`'s counters (JSON).
pub fn server_stats(i: usize) -> String {
    format!("tea-mem{i}.json")
}

/// The network function the TEA switch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Nf {
    /// NAT: inbound 5-tuple to a private address and port.
    Nat,
    /// Stateful firewall: inbound packets of known open connections pass.
    Firewall,
    /// L4 load balancer: a client's flow to the VIP goes to its backend.
    Lb,
    /// VPN gateway: customer VNI + VM to server + internal VNI (VXLAN).
    Vpn,
}

impl Nf {
    /// Key and value bytes.
    fn sizes(self) -> (usize, usize) {
        match self {
            Nf::Nat => (sb_nf::flow::KEY_BYTES, sb_nf::nat::VALUE_BYTES),
            Nf::Firewall => (sb_nf::flow::KEY_BYTES, sb_nf::firewall::VALUE_BYTES),
            Nf::Lb => (sb_nf::flow::KEY_BYTES, sb_nf::lb::VALUE_BYTES),
            Nf::Vpn => (vpn::KEY_BYTES, vpn::VALUE_BYTES),
        }
    }

    /// The flows file's header.
    pub fn header(self) -> &'static str {
        match self {
            Nf::Nat => "proto,remote,remote_port,public,public_port,private,private_port,node",
            Nf::Firewall => "proto,remote,remote_port,inside,inside_port,state,node",
            Nf::Lb => "proto,client,client_port,vip,vip_port,backend,backend_port,node",
            Nf::Vpn => "customer_vni,vm,server,internal_vni,node",
        }
    }
}

/// The i-th generated address in 172.16.0.0/12 .. (unique below [`MAX_FLOWS`]).
fn nth(base: [u8; 2], i: usize) -> Ipv4Addr {
    Ipv4Addr::new(base[0], base[1] + (i >> 16) as u8, (i >> 8) as u8, i as u8)
}

/// `n` generated entries of `nf` as the flows file's text (header first), the egress nodes
/// `i % nodes`. Deterministic.
pub fn generate(nf: Nf, n: usize, nodes: usize) -> anyhow::Result<String> {
    if n > MAX_FLOWS {
        bail!("--flows {n}: at most {MAX_FLOWS} with --arch tea");
    }
    let mut s = String::with_capacity(64 * (n + 1));
    s.push_str(nf.header());
    s.push('\n');
    for i in 0..n {
        let node = i % nodes.max(1);
        let proto = if i % 2 == 0 { 17 } else { 6 };
        let remote = Ipv4Addr::new(203, 0, 113, (i % 200 + 1) as u8);
        let rport = 40_000 + (i / 200) % 20_000;
        let inside = nth([172, 16], i);
        let iport = 10_000 + i % 50_000;
        let line = match nf {
            Nf::Nat => {
                // (remote, remote port) is unique; the public ports may repeat across them.
                let pport = 1024 + i % 60_000;
                format!("{proto},{remote},{rport},{NAT_PUBLIC},{pport},{inside},{iport},{node}")
            }
            Nf::Firewall => {
                let state = if i % 10 == 9 { "closed" } else { "open" };
                format!("{proto},{remote},{rport},{inside},{iport},{state},{node}")
            }
            Nf::Lb => {
                let backend = Ipv4Addr::new(192, 168, 200, (i % 4 + 1) as u8);
                format!("{proto},{remote},{rport},{LB_VIP},80,{backend},8080,{node}")
            }
            Nf::Vpn => {
                let server = Ipv4Addr::new(192, 168, 100, (node % 250 + 1) as u8);
                format!(
                    "{},{inside},{server},{},{node}",
                    5000 + i % 8,
                    9000 + i % 1000
                )
            }
        };
        s.push_str(&line);
        s.push('\n');
    }
    Ok(s)
}

/// A parsed entry of the flows file.
type KeyValue = (Vec<u8>, Vec<u8>);

/// The entries of a flows file of `nf` (a header line allowed).
pub fn parse_flows(nf: Nf, text: &str) -> anyhow::Result<Vec<KeyValue>> {
    let mut out = Vec::new();
    for (ln, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || (ln == 0 && line == nf.header()) {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = || {
            format!(
                "{FLOWS_FILE} line {}: {line:?} (want {})",
                ln + 1,
                nf.header()
            )
        };
        let ip = |s: &str| s.parse::<Ipv4Addr>().with_context(bad);
        let port = |s: &str| s.parse::<u16>().with_context(bad);
        let want = nf.header().split(',').count();
        if f.len() != want {
            bail!(bad());
        }
        let kv = match nf {
            Nf::Nat | Nf::Firewall | Nf::Lb => {
                let proto = f[0].parse::<u8>().with_context(bad)?;
                let key = FlowKey::new(proto, ip(f[1])?, port(f[2])?, ip(f[3])?, port(f[4])?);
                let node = port(f[want - 1])?;
                let value = match nf {
                    Nf::Nat => Translation {
                        addr: ip(f[5])?,
                        port: port(f[6])?,
                        node,
                    }
                    .value()
                    .to_vec(),
                    Nf::Firewall => Conn {
                        state: match f[5] {
                            "open" => ConnState::Open,
                            "closed" => ConnState::Closed,
                            _ => bail!(bad()),
                        },
                        node,
                    }
                    .value()
                    .to_vec(),
                    _ => Backend {
                        addr: ip(f[5])?,
                        port: port(f[6])?,
                        node,
                    }
                    .value()
                    .to_vec(),
                };
                (key.0.to_vec(), value)
            }
            Nf::Vpn => {
                let vni = |s: &str| {
                    s.parse::<u32>()
                        .ok()
                        .filter(|v| *v <= vpn::MAX_VNI)
                        .with_context(bad)
                };
                let t = vpn::Tunnel {
                    customer_vni: vni(f[0])?,
                    customer_peer: Ipv4Addr::UNSPECIFIED,
                    vm: ip(f[1])?,
                    server: ip(f[2])?,
                    internal_vni: vni(f[3])?,
                    node: port(f[4])?,
                };
                (t.key().to_vec(), t.value().to_vec())
            }
        };
        out.push(kv);
    }
    Ok(out)
}

/// What the switch and the servers read (`tea.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TeaConfig {
    /// The NF.
    pub nf: Nf,
    /// The state directory.
    pub dir: PathBuf,
    /// The switch's read socket.
    pub switch_bind: SocketAddr,
    /// Memory server `i`'s address (node `i`'s fabric address).
    pub servers: Vec<SocketAddr>,
    /// The key-hash seed.
    pub seed: u64,
    /// Hot-key cache entries (0: off).
    pub cache: usize,
    /// Reads in flight per server.
    pub max_outstanding: u32,
    /// A read not answered within this many milliseconds is lost.
    pub timeout_ms: u64,
    /// Every range has a secondary copy on the next node (with more than one node).
    pub secondary: bool,
}

/// The TEA flags of `cluster up`.
pub struct TeaUp {
    /// The NF.
    pub nf: Nf,
    /// Generated entries.
    pub flows: usize,
    /// Key-hash seed.
    pub seed: u64,
    /// Cache entries.
    pub cache: usize,
    /// Reads in flight per server.
    pub max_outstanding: u32,
    /// Read timeout, ms.
    pub timeout_ms: u64,
}

fn ip_in(netns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut a = vec!["-n", netns];
    a.extend_from_slice(args);
    sys::ip(&a)?;
    Ok(())
}

fn write_journaled(j: &mut Journal, dir: &Path, name: &str, data: &[u8]) -> anyhow::Result<()> {
    j.record(&Entry::File(name.to_string()))?;
    std::fs::write(dir.join(name), data).with_context(|| name.to_string())
}

/// Writes `data` to `path` through `path.tmp` and a rename.
fn write_atomic(path: &Path, data: &[u8]) -> std::io::Result<()> {
    sb_node::control::replace_file(path, data, 0o666, false)
}

/// Starts `exe args...` in `netns`, its output appended to `log`, and journals its pid.
fn spawn_in(
    j: &mut Journal,
    dir: &Path,
    netns: &str,
    exe: &Path,
    args: &[&str],
    label: &str,
) -> anyhow::Result<(i32, u64)> {
    use std::os::unix::process::CommandExt;
    let log_name = format!("{label}.log");
    j.record(&Entry::File(log_name.clone()))?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(&log_name))
        .with_context(|| log_name.clone())?;
    let err = out.try_clone()?;
    // `ip netns exec` execs the program: the pid journaled is the program's.
    let child = Command::new("ip")
        .args(["netns", "exec", netns])
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {label}"))?;
    let pid = child.id() as i32;
    drop(child);
    let start = sys::proc_start(pid).with_context(|| format!("{label} exited at once"))?;
    j.record(&Entry::Pid {
        pid,
        start,
        label: label.to_string(),
    })?;
    Ok((pid, start))
}

/// Waits until `file` exists in `dir` (the process writes it once ready).
fn wait_file(dir: &Path, file: &str, pid: i32, start: u64, label: &str) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while !dir.join(file).exists() {
        if sys::proc_start(pid) != Some(start) || t0.elapsed() > Duration::from_secs(60) {
            let log = std::fs::read_to_string(dir.join(format!("{label}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "{label} did not start: {}; log: {}",
                if t0.elapsed() > Duration::from_secs(60) {
                    "not ready in 60 s"
                } else {
                    "exited"
                },
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// After the topology is up: the fabric address, the front ports, the files, the switch and
/// the memory servers. The caller takes the cluster down if this fails.
pub fn start(d: &Description, t: &TeaUp, exe: &Path) -> anyhow::Result<()> {
    let dir = &d.dir;
    let mut j = Journal::open(dir)?;
    let sw = d.switch.netns.as_str();
    let br = d.switch.bridge.as_str();
    // The fabric: the switch's address on the bridge, static neighbours both ways.
    ip_in(
        sw,
        &["addr", "add", &format!("{SWITCH_FABRIC_IP}/24"), "dev", br],
    )?;
    sys::ip(&[
        "netns",
        "exec",
        sw,
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ip_forward=0",
    ])?;
    let br_mac = d.switch.mac.to_string();
    let mut servers = Vec::new();
    for n in &d.nodes {
        let f = &n.fabric.local;
        let ip = f.ip().context("a node's fabric port has no address")?;
        ip_in(
            sw,
            &[
                "neigh",
                "replace",
                &ip.to_string(),
                "lladdr",
                &f.mac.to_string(),
                "dev",
                br,
                "nud",
                "permanent",
            ],
        )?;
        ip_in(
            &n.netns,
            &[
                "neigh",
                "replace",
                &SWITCH_FABRIC_IP.to_string(),
                "lladdr",
                &br_mac,
                "dev",
                &f.name,
                "nud",
                "permanent",
            ],
        )?;
        servers.push(SocketAddr::new(ip.into(), TEA_PORT));
    }
    // The front ports: both ends in the switch namespace (deleted with it).
    for (port, peer) in [WAN, LAN] {
        ip_in(
            sw,
            &["link", "add", port, "type", "veth", "peer", "name", peer],
        )?;
        for dev in [port, peer] {
            sb_io::netns::in_netns(sw, || {
                sb_io::netns::set_offloads(dev, &sb_io::netns::Offloads::OFF)
            })
            .map_err(|e| anyhow::anyhow!("offloads of {dev}: {e}"))?
            .map_err(|e| anyhow::anyhow!("offloads of {dev}: {e}"))?;
            ip_in(sw, &["link", "set", dev, "up"])?;
        }
    }
    // The files.
    let flows = generate(t.nf, t.flows, d.nodes.len())?;
    write_journaled(&mut j, dir, FLOWS_FILE, flows.as_bytes())?;
    let cfg = TeaConfig {
        nf: t.nf,
        dir: dir.clone(),
        switch_bind: SocketAddr::new(SWITCH_FABRIC_IP.into(), TEA_PORT),
        servers,
        seed: t.seed,
        cache: t.cache,
        max_outstanding: t.max_outstanding,
        timeout_ms: t.timeout_ms,
        secondary: d.nodes.len() > 1,
    };
    write_journaled(&mut j, dir, CONFIG_FILE, &serde_json::to_vec_pretty(&cfg)?)?;
    let cfg_path = dir.join(CONFIG_FILE);
    let cfg_arg = cfg_path.to_str().context("state directory is not UTF-8")?;
    // The switch writes the images, then its counters: then the servers may start.
    j.record(&Entry::File(SWITCH_STATS.to_string()))?;
    j.record(&Entry::File(CONTROL_SOCKET.to_string()))?;
    for i in 0..d.nodes.len() {
        j.record(&Entry::File(server_image(i)))?;
        j.record(&Entry::File(server_stats(i)))?;
    }
    let (pid, start) = spawn_in(
        &mut j,
        dir,
        sw,
        exe,
        &["tea-switch", "--config", cfg_arg],
        "tea-switch",
    )?;
    wait_file(dir, SWITCH_STATS, pid, start, "tea-switch")?;
    for n in &d.nodes {
        let label = format!("tea-mem{}", n.index);
        let node = n.index.to_string();
        let (pid, start) = spawn_in(
            &mut j,
            dir,
            &n.netns,
            exe,
            &["tea-server", "--config", cfg_arg, "--node", &node],
            &label,
        )?;
        wait_file(dir, &server_stats(n.index), pid, start, &label)?;
    }
    Ok(())
}

/// `scalebricks tea-switch`.
#[derive(clap::Args)]
pub struct SwitchArgs {
    /// The TEA configuration (`tea.json` in the state directory).
    #[arg(long)]
    config: PathBuf,
}

/// `scalebricks tea-server`.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// The TEA configuration (`tea.json` in the state directory).
    #[arg(long)]
    config: PathBuf,
    /// This server's node.
    #[arg(long)]
    node: usize,
}

fn read_config(path: &Path) -> anyhow::Result<TeaConfig> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    serde_json::from_str(&text).with_context(|| path.display().to_string())
}

/// The table of `entries` with one range per server, range `i`'s secondary on server `i+1`.
pub fn build_table(cfg: &TeaConfig, entries: &[KeyValue]) -> anyhow::Result<TeaTable> {
    let (kb, vb) = cfg.nf.sizes();
    let layout = Layout::new(kb, vb, 4)?;
    let n = cfg.servers.len().max(1) as u64;
    let buckets = (entries.len() as u64 * 5 / 16).max(64).max(n);
    let ranges = (0..n)
        .map(|i| RangeEntry {
            first_bucket: i * buckets / n,
            primary: i as ServerId,
            secondary: (cfg.secondary && n > 1).then_some(((i + 1) % n) as ServerId),
        })
        .collect();
    let ranges = RangeTable::new(buckets, ranges)?;
    let mut table = TeaTable::new(TableParams::new(layout, ranges, cfg.seed));
    for (k, v) in entries {
        table
            .insert(k, v)
            .map_err(|e| anyhow::anyhow!("inserting into the TEA table: {e}"))?;
    }
    Ok(table)
}

/// The switch process: builds the table, writes the images, runs the data plane.
pub fn run_switch(a: SwitchArgs) -> anyhow::Result<()> {
    let cfg = read_config(&a.config)?;
    let text = std::fs::read_to_string(cfg.dir.join(FLOWS_FILE)).context(FLOWS_FILE)?;
    let entries = parse_flows(cfg.nf, &text)?;
    let mut table = build_table(&cfg, &entries)?;
    // From now on every bucket write is shipped to the servers (updates).
    table.log_writes(true);
    write_images(&cfg, &table)?;
    eprintln!(
        "tea-switch: {} entries ({} in the stash), {} servers, images written",
        table.len(),
        table.stash_len(),
        cfg.servers.len()
    );
    match cfg.nf {
        Nf::Nat => serve(
            Nat::new(NatConfig {
                public: NAT_PUBLIC,
                ports: 1024..=65535,
                node: 0,
            })?,
            &mut table,
            &cfg,
        ),
        Nf::Firewall => serve(Firewall::new(0), &mut table, &cfg),
        Nf::Lb => {
            let mut lb = Lb::new();
            for proto in [6, 17] {
                let vip = Vip {
                    protocol: proto,
                    addr: LB_VIP,
                    port: 80,
                };
                let backends: Vec<Backend> = (1..=4)
                    .map(|b| Backend {
                        addr: Ipv4Addr::new(192, 168, 200, b),
                        port: 8080,
                        node: 0,
                    })
                    .collect();
                lb.add_service(vip, &backends);
            }
            serve(lb, &mut table, &cfg)
        }
        Nf::Vpn => serve(
            Vpn::new(VpnConfig {
                external: VPN_ADDRS.0,
                internal: VPN_ADDRS.1,
            }),
            &mut table,
            &cfg,
        ),
    }
}

/// Every memory server's image file from the table's current regions (through a rename: a
/// server starting meanwhile loads the old or the new one, whole), mode 0600: an image holds
/// its regions' access keys.
fn write_images(cfg: &TeaConfig, table: &TeaTable) -> anyhow::Result<()> {
    for (i, s) in server::servers_of(table, cfg.servers.len())
        .iter()
        .enumerate()
    {
        sb_node::control::replace_file(&cfg.dir.join(server_image(i)), &s.image(), 0o600, false)
            .context(server_image(i))?;
    }
    Ok(())
}

/// What one `tea-insert` datagram did, answered once its writes are acknowledged.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InsertReply {
    /// Entries in the datagram.
    pub entries: usize,
    /// New keys placed in a bucket.
    pub new: usize,
    /// New keys placed in the stash (kept in the switch).
    pub stash: usize,
    /// Present keys whose value was replaced.
    pub updated: usize,
    /// Refused: the table full.
    pub full: usize,
    /// Why the datagram was refused as a whole (a bad line), if it was.
    pub error: Option<String>,
}

/// The switch's side of its control socket: each datagram is flows-file text; its entries go
/// into the table and out to the servers ([`UdpSwitch::update`]); the reply waits until every
/// write is acknowledged.
fn control_datagram<A: App, O: Output>(
    sw: &mut UdpSwitch<A>,
    table: &mut TeaTable,
    nf: Nf,
    text: &[u8],
    out: &mut O,
) -> InsertReply {
    let mut r = InsertReply::default();
    let entries = match std::str::from_utf8(text)
        .map_err(anyhow::Error::from)
        .and_then(|t| parse_flows(nf, t))
    {
        Ok(e) => e,
        Err(e) => {
            r.error = Some(format!("{e:#}"));
            return r;
        }
    };
    r.entries = entries.len();
    for (k, v) in &entries {
        match sw.update(table, k, v, out) {
            Ok(Placed::Bucket { .. }) => r.new += 1,
            Ok(Placed::Stash) => r.stash += 1,
            Ok(Placed::Updated) => r.updated += 1,
            Err(_) => r.full += 1,
        }
    }
    r
}

struct Collect<'a> {
    frames: &'a mut Vec<Vec<u8>>,
    drops: &'a mut BTreeMap<String, u64>,
}

impl Output for Collect<'_> {
    fn emit(&mut self, frame: &[u8]) {
        self.frames.push(frame.to_vec());
    }
    fn dropped(&mut self, why: SwitchDrop) {
        *self.drops.entry(why.to_string()).or_default() += 1;
    }
}

fn serve<A: App>(app: A, table: &mut TeaTable, cfg: &TeaConfig) -> anyhow::Result<()> {
    let params = SwitchParams {
        cache_entries: cfg.cache,
        flow: FlowParams {
            max_outstanding: cfg.max_outstanding,
            timeout: Duration::from_millis(cfg.timeout_ms),
            ..FlowParams::default()
        },
        ..SwitchParams::default()
    };
    let core = TeaSwitch::new(app, table, cfg.servers.len(), params)?;
    let mut sw = UdpSwitch::new(core, cfg.switch_bind, cfg.servers.clone())
        .with_context(|| format!("binding {}", cfg.switch_bind))?;
    let mut wan = AfPacketPort::open(
        WAN.0,
        // A frame ring: a block ring retires a block per millisecond at low rates, so a
        // switch kept off the CPU for 16 ms would lose packets.
        &AfPacketConfig {
            promiscuous: true,
            rx_mode: RxMode::Frames,
            ..AfPacketConfig::default()
        },
    )?;
    let mut lan = AfPacketPort::open(
        LAN.0,
        &AfPacketConfig {
            tx_only: true,
            ..AfPacketConfig::default()
        },
    )?;
    let ctl_path = cfg.dir.join(CONTROL_SOCKET);
    let _ = std::fs::remove_file(&ctl_path);
    let ctl = UnixDatagram::bind(&ctl_path).with_context(|| ctl_path.display().to_string())?;
    ctl.set_nonblocking(true)?;
    let mut ctl_buf = vec![0u8; MAX_INSERT_DATAGRAM];
    // Replies waiting for their writes' acknowledgements: (client's socket, reply).
    let mut waiting: Vec<(PathBuf, InsertReply)> = Vec::new();
    let mut rx = PacketBatch::new(64);
    let mut tx = PacketBatch::new(64);
    let mut frames = Vec::new();
    let mut drops = BTreeMap::new();
    let mut sent = 0u64;
    let mut last_stats: Option<Instant> = None;
    let stats_path = cfg.dir.join(SWITCH_STATS);
    loop {
        rx.clear();
        wan.rx_batch(&mut rx);
        let mut out = Collect {
            frames: &mut frames,
            drops: &mut drops,
        };
        for i in 0..rx.len() {
            sw.inject(rx.get(i), &mut out);
        }
        // Control: entries to write (a datagram at a time, between batches of packets).
        if let Ok((n, from)) = ctl.recv_from(&mut ctl_buf) {
            let reply = control_datagram(&mut sw, table, cfg.nf, &ctl_buf[..n], &mut out);
            if let Some(p) = from.as_pathname() {
                waiting.push((p.to_path_buf(), reply));
            }
        }
        // Answers and acknowledgements: wait (at most 1 ms) when nothing came in or reads or
        // writes are in flight; at most 64 datagrams, then packets again.
        let busy = |sw: &UdpSwitch<A>| sw.core().in_flight() > 0 || sw.core().updates_pending() > 0;
        if rx.is_empty() || busy(&sw) {
            let mut n = 0;
            while n < 64 && sw.pump(&mut out) && busy(&sw) {
                n += 1;
            }
        }
        if !waiting.is_empty() && sw.core().updates_pending() == 0 {
            // Every write acknowledged: the images follow (a server restarted later loads the
            // entries), then the replies.
            write_images(cfg, table)?;
            for (to, reply) in waiting.drain(..) {
                let _ = ctl.send_to(&serde_json::to_vec(&reply)?, &to);
            }
        }
        let stats_due = last_stats.is_none_or(|t| t.elapsed() >= Duration::from_millis(500));
        if stats_due && !sw.core().stale_servers().is_empty() {
            // A server that missed writes and answers again: its regions rewritten.
            sw.resync(table, &mut out);
        }
        for f in frames.drain(..) {
            if tx.is_full() {
                sent += lan.tx_batch(&mut tx) as u64;
            }
            tx.push(&f);
        }
        if !tx.is_empty() {
            sent += lan.tx_batch(&mut tx) as u64;
        }
        if stats_due {
            last_stats = Some(Instant::now());
            sw.core_mut().run_control(table);
            let c = sw.core().counters();
            let f = sw.core().flow_counters();
            let health: Vec<&str> = (0..cfg.servers.len())
                .map(|s| match sw.core().flow().health(s as ServerId) {
                    Health::Up => "up",
                    Health::Overloaded(_) => "overloaded",
                    Health::Dead(_) => "dead",
                })
                .collect();
            let outstanding: Vec<u32> = (0..cfg.servers.len())
                .map(|s| sw.core().flow().outstanding(s as ServerId))
                .collect();
            let (w, l) = (wan.stats(), lan.stats());
            let v = serde_json::json!({
                "wan": {"rx_packets": w.rx_packets, "rx_dropped": w.rx_dropped, "rx_errors": w.rx_errors},
                "lan": {"tx_packets": l.tx_packets, "tx_dropped": l.tx_dropped},
                "nf": cfg.nf,
                "entries": table.len(),
                "stash": table.stash_len(),
                "packets": c.packets,
                "out": c.out,
                "sent": sent,
                "cache_hits": c.cache_hits,
                "stash_hits": c.stash_hits,
                "remote_lookups": c.remote_lookups,
                "reads": c.reads,
                "reads_per_server": c.reads_per_server,
                "fabric_payload_bytes": c.fabric_payload_bytes,
                "lost": c.lost,
                "late": c.late,
                "drop_nf": c.drop_nf,
                "drop_miss": c.drop_miss,
                "drop_flow": c.drop_flow,
                "drop_server": c.drop_server,
                "drop_other": c.drop_other,
                "drops": drops,
                "cached": sw.core().cached(),
                "send_errors": sw.send_errors(),
            });
            let more = serde_json::json!({
                "health": health,
                "outstanding": outstanding,
                "to_primary": f.to_primary,
                "to_secondary": f.to_secondary,
                "timeouts": f.timeouts,
                "marked_dead": f.marked_dead,
                "marked_overloaded": f.marked_overloaded,
                "recovered": f.recovered,
                "updates": c.updates,
                "update_failures": c.update_failures,
                "bucket_writes": c.bucket_writes,
                "write_acks": c.write_acks,
                "write_retries": c.write_retries,
                "write_skipped": c.write_skipped,
                "write_errors": c.write_errors,
                "resyncs": c.resyncs,
                "updates_pending": sw.core().updates_pending(),
                "stale_servers": sw.core().stale_servers(),
            });
            let mut v = v;
            if let (Some(o), serde_json::Value::Object(m)) = (v.as_object_mut(), more) {
                o.extend(m);
            }
            write_atomic(&stats_path, &serde_json::to_vec_pretty(&v)?).context(SWITCH_STATS)?;
        }
    }
}

/// The memory server process: loads its image, answers reads on its fabric address.
pub fn run_server(a: ServerArgs) -> anyhow::Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let cfg = read_config(&a.config)?;
    let Some(&addr) = cfg.servers.get(a.node) else {
        bail!("no node {} in {}", a.node, a.config.display());
    };
    let img_path = cfg.dir.join(server_image(a.node));
    let img = std::fs::read(&img_path).with_context(|| img_path.display().to_string())?;
    let mem = MemoryServer::from_image(&img)
        .with_context(|| format!("loading {}", img_path.display()))?;
    let regions = mem.region_numbers();
    let h = server::spawn(mem, addr).with_context(|| format!("binding {addr}"))?;
    eprintln!("tea-server {}: regions {regions:?} on {addr}", a.node);
    let stats = cfg.dir.join(server_stats(a.node));
    loop {
        let c = &h.control.counters;
        let v = serde_json::json!({
            "node": a.node,
            "addr": addr,
            "regions": regions,
            "reads": c.reads.load(Relaxed),
            "writes": c.writes.load(Relaxed),
            "bytes": c.bytes.load(Relaxed),
            "refused": c.refused.load(Relaxed),
            "denied": c.denied.load(Relaxed),
            "invalid": c.invalid.load(Relaxed),
        });
        write_atomic(&stats, &serde_json::to_vec_pretty(&v)?)
            .with_context(|| stats.display().to_string())?;
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Largest `tea-insert` datagram (its entries' text).
pub const MAX_INSERT_DATAGRAM: usize = 64 * 1024;

/// `scalebricks tea-insert`.
#[derive(clap::Args)]
pub struct InsertArgs {
    /// The TEA configuration (`tea.json` in the state directory).
    #[arg(long)]
    config: PathBuf,
    /// Entries in the cluster's flows-file format (`tea-flows.csv`'s columns for its NF; a
    /// header line allowed).
    #[arg(long, conflicts_with = "generate")]
    flows_file: Option<PathBuf>,
    /// Instead: this many generated entries, the generator's (`cluster up --flows`) from
    /// index `--first` on (`--first` at the cluster's `--flows`: entries it does not hold).
    #[arg(long)]
    generate: Option<usize>,
    /// The first generated index.
    #[arg(long, default_value_t = 0)]
    first: usize,
    /// Also write the entries sent (flows-file format) to this file.
    #[arg(long)]
    write_flows: Option<PathBuf>,
    /// Seconds to wait for each datagram's reply.
    #[arg(long, default_value_t = 30)]
    timeout_s: u64,
}

/// `scalebricks tea-insert`: sends entries to the running switch's control socket, in
/// datagrams of at most 200 lines, each answered once its writes are acknowledged; prints the
/// totals (JSON) and the time taken. Fails if a datagram is refused or not answered.
pub fn run_insert(a: InsertArgs) -> anyhow::Result<()> {
    let cfg = read_config(&a.config)?;
    let text = match (&a.flows_file, a.generate) {
        (Some(p), _) => std::fs::read_to_string(p).with_context(|| p.display().to_string())?,
        (None, Some(n)) => {
            let nodes = cfg.servers.len();
            let all = generate(cfg.nf, a.first + n, nodes)?;
            let mut t = String::from(cfg.nf.header());
            t.push('\n');
            for l in all.lines().skip(1 + a.first) {
                t.push_str(l);
                t.push('\n');
            }
            t
        }
        (None, None) => bail!("give --flows-file or --generate"),
    };
    if let Some(p) = &a.write_flows {
        std::fs::write(p, &text).with_context(|| p.display().to_string())?;
    }
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && l.trim() != cfg.nf.header())
        .collect();
    let me = std::env::temp_dir().join(format!("sb-tea-insert-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&me);
    let sock = UnixDatagram::bind(&me).with_context(|| me.display().to_string())?;
    let _cleanup = RemoveOnDrop(me.clone());
    sock.set_read_timeout(Some(Duration::from_secs(a.timeout_s.max(1))))?;
    let to = cfg.dir.join(CONTROL_SOCKET);
    let t0 = Instant::now();
    let mut total = InsertReply::default();
    let mut buf = vec![0u8; 4096];
    for chunk in lines.chunks(200) {
        let mut d = chunk.join("\n");
        d.push('\n');
        if d.len() > MAX_INSERT_DATAGRAM {
            bail!("200 lines longer than {MAX_INSERT_DATAGRAM} bytes");
        }
        sock.send_to(d.as_bytes(), &to)
            .with_context(|| format!("sending to {}", to.display()))?;
        let n = sock
            .recv(&mut buf)
            .with_context(|| format!("no reply from the switch in {} s", a.timeout_s))?;
        let r: InsertReply = serde_json::from_slice(&buf[..n]).context("the switch's reply")?;
        if let Some(e) = r.error {
            bail!("the switch refused the entries: {e}");
        }
        total.entries += r.entries;
        total.new += r.new;
        total.stash += r.stash;
        total.updated += r.updated;
        total.full += r.full;
    }
    let v = serde_json::json!({
        "entries": total.entries,
        "new": total.new,
        "stash": total.stash,
        "updated": total.updated,
        "full": total.full,
        "seconds": t0.elapsed().as_secs_f64(),
    });
    println!("{v}");
    if total.full > 0 {
        bail!("{} entries refused: the table is full", total.full);
    }
    Ok(())
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The latest journaled process labelled `label`: its pid and whether it still runs.
fn tea_process(dir: &Path, label: &str) -> anyhow::Result<Option<(i32, bool)>> {
    Ok(sb_topology::journal::read(dir)?
        .iter()
        .rev()
        .find_map(|e| match e {
            Entry::Pid {
                pid,
                start,
                label: l,
            } if l == label => Some((*pid, sys::proc_start(*pid) == Some(*start))),
            _ => None,
        }))
}

/// `cluster status` of a TEA cluster: a row for the switch and one per memory server (pid,
/// up, and their counters: the switch's packets, reads, lookups in flight, failovers and
/// updates; each server's reads and writes served, and its health as the switch sees it).
pub fn status(dir: &Path, json: bool) -> anyhow::Result<()> {
    let cfg = read_config(&dir.join(CONFIG_FILE))?;
    let file = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .unwrap_or(serde_json::Value::Null)
    };
    let sw = file(SWITCH_STATS);
    let proc = tea_process(dir, "tea-switch")?;
    let mut rows = vec![serde_json::json!({
        "process": "tea-switch",
        "pid": proc.map(|p| p.0),
        "up": proc.is_some_and(|p| p.1),
        "nf": cfg.nf,
        "entries": sw["entries"],
        "packets": sw["packets"],
        "out": sw["out"],
        "reads": sw["reads"],
        "outstanding": sw["outstanding"],
        "to_secondary": sw["to_secondary"],
        "marked_dead": sw["marked_dead"],
        "recovered": sw["recovered"],
        "lost": sw["lost"],
        "updates": sw["updates"],
        "write_acks": sw["write_acks"],
        "resyncs": sw["resyncs"],
    })];
    for i in 0..cfg.servers.len() {
        let label = format!("tea-mem{i}");
        let m = file(&server_stats(i));
        let proc = tea_process(dir, &label)?;
        rows.push(serde_json::json!({
            "process": label,
            "pid": proc.map(|p| p.0),
            "up": proc.is_some_and(|p| p.1),
            "switch_sees": sw["health"][i],
            "outstanding": sw["outstanding"][i],
            "reads_sent": sw["reads_per_server"][i],
            "reads": m["reads"],
            "writes": m["writes"],
            "refused": m["refused"],
            "denied": m["denied"],
            "regions": m["regions"],
        }));
    }
    if json {
        let v = serde_json::json!({"tea": rows, "switch_status": sw});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_string(),
        serde_json::Value::String(s) => s.clone(),
        v => v.to_string(),
    };
    println!(
        "{:>10} {:>8} {:>5} {:>10} {:>10} {:>12} {:>8} {:>9}",
        "process", "pid", "up", "health", "reads", "outstanding", "writes", "failovers"
    );
    for r in &rows {
        let switch = r["process"] == "tea-switch";
        println!(
            "{:>10} {:>8} {:>5} {:>10} {:>10} {:>12} {:>8} {:>9}",
            show(&r["process"]),
            show(&r["pid"]),
            show(&r["up"]),
            if switch {
                "-".to_string()
            } else {
                show(&r["switch_sees"])
            },
            show(&r["reads"]),
            show(&r["outstanding"]),
            show(if switch {
                &r["write_acks"]
            } else {
                &r["writes"]
            }),
            if switch {
                show(&r["marked_dead"])
            } else {
                "-".to_string()
            },
        );
    }
    Ok(())
}

/// `cluster restart --node N` of a TEA cluster: starts node N's memory server again in its
/// namespace from its image file (which the switch rewrites after every update, so it holds
/// the entries written so far); the switch's probes find it and reads go back to it as the
/// primary of its range. Refuses while the recorded server still runs.
pub fn restart(dir: &Path, node: usize, exe: &Path) -> anyhow::Result<i32> {
    let d = sb_topology::load(dir)?;
    let cfg = read_config(&dir.join(CONFIG_FILE))?;
    let Some(n) = d.nodes.iter().find(|n| n.index == node) else {
        bail!("the cluster has {} nodes", d.nodes.len());
    };
    let label = format!("tea-mem{node}");
    if let Some((pid, true)) = tea_process(dir, &label)? {
        bail!("{label} still running (pid {pid}); stop it first");
    }
    let stats = server_stats(node);
    match std::fs::remove_file(dir.join(&stats)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(anyhow::Error::from(e).context(stats)),
    }
    let mut j = Journal::open(dir)?;
    let cfg_path = dir.join(CONFIG_FILE);
    let cfg_arg = cfg_path.to_str().context("state directory is not UTF-8")?;
    let node_arg = node.to_string();
    let (pid, start) = spawn_in(
        &mut j,
        &cfg.dir,
        &n.netns,
        exe,
        &["tea-server", "--config", cfg_arg, "--node", &node_arg],
        &label,
    )?;
    wait_file(dir, &stats, pid, start, &label)?;
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every NF's generated flows parse back to distinct keys of the right sizes, and the
    /// table built from them holds each one.
    #[test]
    fn generated_flows_parse_and_build() {
        for nf in [Nf::Nat, Nf::Firewall, Nf::Lb, Nf::Vpn] {
            let text = generate(nf, 3000, 3).unwrap();
            let entries = parse_flows(nf, &text).unwrap();
            assert_eq!(entries.len(), 3000);
            let (kb, vb) = nf.sizes();
            let keys: std::collections::HashSet<&Vec<u8>> =
                entries.iter().map(|(k, _)| k).collect();
            assert_eq!(keys.len(), 3000, "{nf:?}: keys repeat");
            assert!(entries.iter().all(|(k, v)| k.len() == kb && v.len() == vb));
            let cfg = TeaConfig {
                nf,
                dir: PathBuf::new(),
                switch_bind: "127.0.0.1:0".parse().unwrap(),
                servers: vec!["127.0.0.1:1".parse().unwrap(); 3],
                seed: 7,
                cache: 0,
                max_outstanding: 16,
                timeout_ms: 100,
                secondary: true,
            };
            let t = build_table(&cfg, &entries).unwrap();
            for (k, v) in &entries {
                assert_eq!(t.get(k).as_ref(), Some(v));
            }
        }
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let e = parse_flows(Nf::Nat, "17,1.2.3.4,1,5.6.7.8,2,9.9.9.9,3\n").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let e = parse_flows(Nf::Firewall, "6,1.2.3.4,1,5.6.7.8,2,ajar,0").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        assert!(parse_flows(Nf::Vpn, "16777216,1.2.3.4,5.6.7.8,1,0").is_err());
        assert!(generate(Nf::Nat, MAX_FLOWS + 1, 1).is_err());
    }
}
