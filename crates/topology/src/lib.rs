//! The cluster topology on one machine: network namespaces, veths and a Linux bridge, created and
//! removed exactly.
//!
//! [`up`] builds an N-node cluster from a deterministic [`plan`](plan::plan): a switch namespace
//! `P-sw` with bridge `br0`; per node `i` a namespace `P-node{i}` with ports `inet`, `ran` and
//! `fabric` (the fabric peer is a port of `br0`), an Internet-side namespace `P-inet{i}` behind
//! `inet` and a base-station-side namespace `P-ran{i}` behind `ran`; and a control network: a
//! namespace `P-cp` for control-plane peers (an SMF, an operator's tools) whose bridge `cpbr0`
//! joins every node's `ctl` port, so `P-cp` reaches each node's control address, where the node
//! serves PFCP, gRPC and Prometheus metrics. The address and MAC plan is documented in
//! [`plan`]. It writes the [`Description`] as JSON (`cluster.json`) into the state
//! directory and records every object in a [`journal`] *before* creating it, so [`down`] removes
//! exactly what exists, also after `up` died halfway. `up` on a directory holding a journal is an
//! error ([`TopoError::AlreadyUp`]).
//!
//! Everything is done by running iproute2 (`ip`, `bridge`) and `sysctl`, except the offloads:
//! every veth end gets transmit checksumming, TSO, GSO and GRO switched off (the equivalent of
//! `ethtool -K DEV tx off tso off gso off gro off`, through [`sb_io::netns::set_offloads`], no
//! `ethtool` needed), so a packet socket on a link sees complete, checksummed, MTU-sized frames
//! also from the kernel's own TCP/UDP sockets (with [`UpOptions::napi_peers`], for the XDP fast
//! path, the nodes' peers get GRO back on). MTUs: 1500 on `inet`/`ran`, 9000 on the fabric
//! (see [`plan`]). No link is ever created in the caller's namespace (veths are created directly
//! inside their namespaces), so deleting the namespaces removes every link.
//!
//! ```no_run
//! use sb_topology::{down, load, up, Forwarding, UpOptions};
//! let opts = UpOptions::new("demo", 2, "/var/lib/scalebricks/demo".into());
//! let desc = up(&opts).unwrap(); // needs root
//! assert_eq!(desc.nodes[1].netns, "demo-node1");
//! assert_eq!(load(&desc.dir).unwrap(), desc);
//! down(&desc.dir).unwrap();
//! ```
//!
//! Cost: about 36 + 32·N short-lived `ip` processes for `up` (2 nodes: 0.35 s, median of 3 runs
//! of `scalebricks cluster up --forwarding none --nodes 2` on a noisy 2-core VM), one
//! `ip netns delete` per namespace for `down`; the kernel frees namespaces asynchronously.

pub mod journal;
pub mod plan;
pub mod sys;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use plan::{
    Cidr, ControlDesc, Description, Forwarding, Iface, Link, Mac, NodeDesc, Route, SwitchDesc,
};

use journal::{Entry, Journal};

/// Name of the description file inside the state directory.
pub const DESCRIPTION_FILE: &str = "cluster.json";

/// Default UE pool routed to the RAN side.
pub const DEFAULT_UE_POOL: &str = "100.64.0.0/10";

/// Errors of topology operations. Every variant is printable as a complete, actionable message.
#[derive(Debug, thiserror::Error)]
pub enum TopoError {
    /// The state directory already holds a journal.
    #[error("cluster already up (journal in {0}); run `scalebricks cluster down --dir {0}` first")]
    AlreadyUp(PathBuf),
    /// Links still had no carrier, or bridge ports did not forward, long after `up` set them up.
    #[error("links not ready: {0}")]
    LinksDown(String),
    /// Preparing the nodes' files failed.
    #[error("preparing the nodes: {0}")]
    Prepare(String),
    /// No journal in the state directory.
    #[error("no cluster is up in {0} (no journal there)")]
    NotUp(PathBuf),
    /// A namespace `up` would create exists already, and is not recorded in this state directory.
    #[error("network namespace {0} already exists (another cluster with this prefix? run `scalebricks cluster down`, or `ip netns delete {0}` if it is stale)")]
    NamespaceExists(String),
    /// The state directory exists and holds files that are not ours.
    #[error("state directory {0} exists and is not empty")]
    DirNotEmpty(PathBuf),
    /// The name prefix has characters namespaces cannot carry.
    #[error("bad name prefix {0:?}: use 1-24 characters of [A-Za-z0-9_-], not starting with '-'")]
    BadPrefix(String),
    /// Node count out of range.
    #[error("bad node count {0}: want 1..={max}", max = plan::MAX_NODES)]
    BadNodeCount(usize),
    /// A node index beyond the cluster.
    #[error("no node {node}: the cluster has {nodes} nodes (0..{nodes})")]
    NoSuchNode {
        /// The index asked for.
        node: usize,
        /// How many nodes there are.
        nodes: usize,
    },
    /// A program could not be started.
    #[error("cannot run `{cmd}`: {source} (is iproute2 installed?)")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
    /// A program exited with failure.
    #[error("`{cmd}` failed (exit {status}): {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: i32,
        /// Its standard error.
        stderr: String,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Setting a link's offloads (off, or GRO on) failed.
    #[error("setting the offloads of {dev} in namespace {netns}: {source}")]
    Offloads {
        /// The namespace.
        netns: String,
        /// The interface.
        dev: String,
        /// Why.
        #[source]
        source: sb_io::IoError,
    },
    /// Text that should be a MAC, prefix or JSON description is not.
    #[error("parse error: {0}")]
    Parse(String),
    /// A forwarder process did not get ready.
    #[error("forwarder of node {node} did not start: {why}")]
    Forwarder {
        /// Node index.
        node: usize,
        /// What happened (with its log's tail).
        why: String,
    },
    /// `up` was asked to stop after a node (a test hook simulating a crash); nothing was removed.
    #[error("aborted on purpose after node {0} (simulated crash); run `scalebricks cluster down`")]
    Aborted(usize),
    /// `up` failed and then rolling back failed too.
    #[error("{first}; rolling back failed too: {rollback}")]
    RollbackFailed {
        /// The error that stopped `up`.
        first: Box<TopoError>,
        /// The error rolling back.
        rollback: Box<TopoError>,
    },
}

impl TopoError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> TopoError {
        TopoError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Builds the command that runs node `i`'s user-space forwarder (see [`Forwarding::User`]). The
/// process must write [`forwarder_stats_path`] once it is ready to forward.
pub type SpawnFn<'a> = &'a dyn Fn(&Description, usize) -> Command;

/// Writes files the node processes need (their configuration, their tables) into the state
/// directory once the description exists, before any process starts; returns their names
/// (relative to the directory), which are journaled so `down` removes them.
pub type PrepareFn<'a> = &'a dyn Fn(&Description) -> Result<Vec<String>, String>;

/// What [`up`] should build.
pub struct UpOptions<'a> {
    /// Name prefix of every namespace.
    pub prefix: String,
    /// Number of nodes.
    pub nodes: usize,
    /// State directory (must not exist, or be empty).
    pub dir: PathBuf,
    /// UE pool routed to the RAN side.
    pub ue_pool: Cidr,
    /// How nodes forward downstream traffic.
    pub forwarding: Forwarding,
    /// For [`Forwarding::User`]: how to start a node's forwarder. Without it no process is started.
    pub spawn: Option<SpawnFn<'a>>,
    /// Called after the description is written and before the namespaces are made.
    pub prepare: Option<PrepareFn<'a>>,
    /// Test hook: stop (as if crashed, removing nothing) right after node `k` is complete.
    pub abort_after_node: Option<usize>,
    /// How long to wait for each forwarder to become ready.
    pub ready_timeout: Duration,
    /// GRO on for the peer ends of every node's `inet`, `ran` and `fabric` links (their other
    /// offloads stay off): a veth receives the frames that a native XDP program redirects
    /// into its pair only when it has a NAPI instance, which GRO gives it (for nodes running
    /// the XDP fast path). GRO merges no UDP here (no socket asks for it) and no fabric frame;
    /// TCP segments arriving at a peer may be merged, as a NIC with GRO would.
    pub napi_peers: bool,
}

impl<'a> UpOptions<'a> {
    /// Defaults: UE pool [`DEFAULT_UE_POOL`], kernel forwarding, no forwarder processes.
    pub fn new(prefix: &str, nodes: usize, dir: PathBuf) -> UpOptions<'a> {
        UpOptions {
            prefix: prefix.to_string(),
            nodes,
            dir,
            ue_pool: DEFAULT_UE_POOL.parse().expect("valid default pool"),
            forwarding: Forwarding::Kernel,
            spawn: None,
            prepare: None,
            abort_after_node: None,
            ready_timeout: Duration::from_secs(10),
            napi_peers: false,
        }
    }
}

/// Where node `i`'s forwarder writes its counters (JSON, rewritten about every second).
pub fn forwarder_stats_path(dir: &Path, node: usize) -> PathBuf {
    dir.join(format!("forward-node{node}.json"))
}

/// Where node `i`'s forwarder's standard output and error go.
pub fn forwarder_log_path(dir: &Path, node: usize) -> PathBuf {
    dir.join(format!("forward-node{node}.log"))
}

/// The parent of the default state directories.
pub const DEFAULT_STATE_ROOT: &str = "/var/lib/scalebricks";

/// Default state directory for a prefix: `/var/lib/scalebricks/PREFIX`. Persistent (not a
/// tmpfs like `/run`): the nodes' logs there survive a reboot, so an acknowledged update
/// does. `cluster up --dir` puts it elsewhere; `cluster down` removes it (it removes the
/// directory `up` created, logs included).
pub fn default_dir(prefix: &str) -> PathBuf {
    PathBuf::from(DEFAULT_STATE_ROOT).join(prefix)
}

/// Reads the description of the cluster whose state directory is `dir`.
pub fn load(dir: &Path) -> Result<Description, TopoError> {
    let path = dir.join(DESCRIPTION_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            TopoError::NotUp(dir.to_path_buf())
        } else {
            TopoError::io(&path, e)
        }
    })?;
    let d: Description = serde_json::from_str(&text)
        .map_err(|e| TopoError::Parse(format!("{}: {e}", path.display())))?;
    if d.version != plan::DESCRIPTION_VERSION {
        return Err(TopoError::Parse(format!(
            "{}: description version {} (this build reads {})",
            path.display(),
            d.version,
            plan::DESCRIPTION_VERSION
        )));
    }
    Ok(d)
}

/// Creates the cluster. On an ordinary failure everything created so far is removed again (the
/// error says if that failed too); with [`UpOptions::abort_after_node`] it stops without removing.
pub fn up(opts: &UpOptions<'_>) -> Result<Description, TopoError> {
    let desc = plan::plan(
        &opts.prefix,
        opts.nodes,
        opts.ue_pool,
        opts.forwarding,
        opts.dir.clone(),
    )?;
    let dir = &opts.dir;
    if dir.join(journal::JOURNAL_FILE).exists() {
        return Err(TopoError::AlreadyUp(dir.clone()));
    }
    for ns in desc.namespaces() {
        if sys::netns_exists(&ns) {
            return Err(TopoError::NamespaceExists(ns));
        }
    }
    let created_dir = match std::fs::read_dir(dir) {
        Ok(mut it) => {
            if it.next().is_some() {
                return Err(TopoError::DirNotEmpty(dir.clone()));
            }
            false
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| TopoError::io(dir, e))?;
            true
        }
        Err(e) => return Err(TopoError::io(dir, e)),
    };
    let mut j = Journal::create(dir)?;
    if created_dir {
        j.record(&Entry::DirCreated(dir.clone()))?;
    }
    match build(&desc, opts, &mut j) {
        Ok(()) => Ok(desc),
        Err(e @ TopoError::Aborted(_)) => Err(e),
        Err(e) => match down(dir) {
            Ok(_) => Err(e),
            Err(r) => Err(TopoError::RollbackFailed {
                first: Box::new(e),
                rollback: Box::new(r),
            }),
        },
    }
}

fn write_file(j: &mut Journal, dir: &Path, name: &str, data: &[u8]) -> Result<(), TopoError> {
    j.record(&Entry::File(name.to_string()))?;
    let path = dir.join(name);
    std::fs::write(&path, data).map_err(|e| TopoError::io(&path, e))
}

fn create_netns(j: &mut Journal, name: &str, forward: bool) -> Result<(), TopoError> {
    j.record(&Entry::Netns(name.to_string()))?;
    if let Err(e) = sys::ip(&["netns", "add", name]) {
        j.record(&Entry::NetnsFailed(name.to_string()))?;
        return Err(e);
    }
    let fwd = format!("net.ipv4.ip_forward={}", u8::from(forward));
    let mut args = vec![
        "netns",
        "exec",
        name,
        "sysctl",
        "-q",
        "-w",
        fwd.as_str(),
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
    ];
    if Path::new("/proc/sys/net/ipv6").exists() {
        args.push("net.ipv6.conf.all.disable_ipv6=1");
        args.push("net.ipv6.conf.default.disable_ipv6=1");
    }
    // With br_netfilter loaded (Docker loads it), a new namespace's bridges hand every frame
    // to the IP hooks; a switch does not, and each frame pays for it (the settings are per
    // namespace: the host's are left as they are).
    if Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists() {
        args.push("net.bridge.bridge-nf-call-iptables=0");
        args.push("net.bridge.bridge-nf-call-ip6tables=0");
        args.push("net.bridge.bridge-nf-call-arptables=0");
    }
    sys::ip(&args)?;
    sys::ip(&["-n", name, "link", "set", "lo", "up"])?;
    Ok(())
}

/// Sets the interface's MTU, switches its offloads off, adds its address and brings it up.
fn addr_up(i: &Iface) -> Result<(), TopoError> {
    let mtu = i.mtu.to_string();
    sys::ip(&["-n", &i.netns, "link", "set", "dev", &i.name, "mtu", &mtu])?;
    offloads_off(i)?;
    if let Some(a) = &i.addr {
        sys::ip(&["-n", &i.netns, "addr", "add", a, "dev", &i.name])?;
    }
    sys::ip(&["-n", &i.netns, "link", "set", &i.name, "up"])?;
    Ok(())
}

/// `ethtool -K DEV tx off tso off gso off gro off`, inside the interface's namespace.
fn offloads_off(i: &Iface) -> Result<(), TopoError> {
    let err = |source| TopoError::Offloads {
        netns: i.netns.clone(),
        dev: i.name.clone(),
        source,
    };
    sb_io::netns::in_netns(&i.netns, || {
        sb_io::netns::set_offloads(&i.name, &sb_io::netns::Offloads::OFF)
    })
    .map_err(err)?
    .map_err(err)
}

/// GRO on (the other offloads as [`offloads_off`] left them): see [`UpOptions::napi_peers`].
fn gro_on(i: &Iface) -> Result<(), TopoError> {
    let err = |source| TopoError::Offloads {
        netns: i.netns.clone(),
        dev: i.name.clone(),
        source,
    };
    let o = sb_io::netns::Offloads {
        gro: true,
        ..sb_io::netns::Offloads::OFF
    };
    sb_io::netns::in_netns(&i.netns, || sb_io::netns::set_offloads(&i.name, &o))
        .map_err(err)?
        .map_err(err)
}

fn veth(l: &Link) -> Result<(), TopoError> {
    let (a, b) = (l.local.mac.to_string(), l.peer.mac.to_string());
    sys::ip(&[
        "link",
        "add",
        &l.local.name,
        "netns",
        &l.local.netns,
        "address",
        &a,
        "type",
        "veth",
        "peer",
        "name",
        &l.peer.name,
        "netns",
        &l.peer.netns,
        "address",
        &b,
    ])?;
    Ok(())
}

fn neigh(netns: &str, dev: &str, ip: &str, mac: Mac) -> Result<(), TopoError> {
    let m = mac.to_string();
    sys::ip(&[
        "-n",
        netns,
        "neigh",
        "replace",
        ip,
        "lladdr",
        &m,
        "dev",
        dev,
        "nud",
        "permanent",
    ])?;
    Ok(())
}

fn routes(netns: &str, rs: &[Route]) -> Result<(), TopoError> {
    for r in rs {
        let via = r.via.to_string();
        sys::ip(&[
            "-n", netns, "route", "add", &r.dst, "via", &via, "dev", &r.dev,
        ])?;
    }
    Ok(())
}

fn ip_of(i: &Iface) -> String {
    i.ip().map(|a| a.to_string()).unwrap_or_default()
}

/// Creates a bridge without STP or multicast snooping (not yet up).
fn bridge(netns: &str, name: &str, mac: Mac, mtu: u32) -> Result<(), TopoError> {
    let (mac, mtu) = (mac.to_string(), mtu.to_string());
    sys::ip(&[
        "-n",
        netns,
        "link",
        "add",
        name,
        "address",
        &mac,
        "mtu",
        &mtu,
        "type",
        "bridge",
        "stp_state",
        "0",
        "mcast_snooping",
        "0",
    ])?;
    Ok(())
}

fn build(desc: &Description, opts: &UpOptions<'_>, j: &mut Journal) -> Result<(), TopoError> {
    let dir = &desc.dir;
    let json = serde_json::to_vec_pretty(desc).map_err(|e| TopoError::Parse(e.to_string()))?;
    write_file(j, dir, DESCRIPTION_FILE, &json)?;
    if let Some(prepare) = opts.prepare {
        let files = prepare(desc).map_err(TopoError::Prepare)?;
        for f in files {
            j.record(&Entry::File(f))?;
        }
    }

    let sw = &desc.switch;
    create_netns(j, &sw.netns, false)?;
    bridge(&sw.netns, &sw.bridge, sw.mac, sw.mtu)?;
    sys::ip(&["-n", &sw.netns, "link", "set", &sw.bridge, "up"])?;
    if let Some(cp) = &desc.control {
        create_netns(j, &cp.netns, false)?;
        bridge(&cp.netns, &cp.bridge, cp.mac, cp.mtu)?;
        sys::ip(&["-n", &cp.netns, "addr", "add", &cp.addr, "dev", &cp.bridge])?;
        sys::ip(&["-n", &cp.netns, "link", "set", &cp.bridge, "up"])?;
    }

    let kernel = desc.forwarding == Forwarding::Kernel;
    let mut spawned = Vec::new();
    for n in &desc.nodes {
        create_netns(j, &n.netns, kernel)?;
        create_netns(j, &n.inet_netns, false)?;
        create_netns(j, &n.ran_netns, false)?;
        for l in [&n.inet, &n.ran, &n.fabric] {
            veth(l)?;
            addr_up(&l.local)?;
        }
        addr_up(&n.inet.peer)?;
        addr_up(&n.ran.peer)?;
        // The control link: `ctl` in the node, a port of the (learning) control bridge.
        if let (Some(cp), Some(ctl)) = (&desc.control, &n.control) {
            veth(ctl)?;
            addr_up(&ctl.local)?;
            addr_up(&ctl.peer)?;
            sys::ip(&[
                "-n",
                &cp.netns,
                "link",
                "set",
                &ctl.peer.name,
                "master",
                &cp.bridge,
            ])?;
        }
        // Bridge port: static forwarding entry for the node's fabric MAC, no learning, no
        // flooding of unknown unicast (broadcast still reaches everyone, e.g. ARP on the fabric).
        // Its MTU is set first, so the bridge (whose MTU follows its smallest port's unless
        // set) stays at the fabric MTU.
        let port = &n.fabric.peer;
        addr_up(port)?;
        if opts.napi_peers {
            for p in [&n.inet.peer, &n.ran.peer, port] {
                gro_on(p)?;
            }
        }
        sys::ip(&[
            "-n", &sw.netns, "link", "set", &port.name, "master", &sw.bridge,
        ])?;
        sys::run(
            "bridge",
            &[
                "-n", &sw.netns, "link", "set", "dev", &port.name, "learning", "off", "flood",
                "off",
            ],
        )?;
        let fm = n.fabric.local.mac.to_string();
        sys::run(
            "bridge",
            &[
                "-n", &sw.netns, "fdb", "replace", &fm, "dev", &port.name, "master", "static",
            ],
        )?;
        // Static neighbours on every data link: no ARP needed.
        neigh(&n.netns, "inet", &ip_of(&n.inet.peer), n.inet.peer.mac)?;
        neigh(&n.netns, "ran", &ip_of(&n.ran.peer), n.ran.peer.mac)?;
        neigh(
            &n.inet_netns,
            "eth0",
            &ip_of(&n.inet.local),
            n.inet.local.mac,
        )?;
        neigh(&n.ran_netns, "eth0", &ip_of(&n.ran.local), n.ran.local.mac)?;
        for m in &desc.nodes {
            if m.index != n.index {
                neigh(
                    &n.netns,
                    "fabric",
                    &ip_of(&m.fabric.local),
                    m.fabric.local.mac,
                )?;
            }
        }
        routes(&n.netns, &n.routes)?;
        routes(&n.inet_netns, &n.inet_routes)?;
        routes(&n.ran_netns, &n.ran_routes)?;

        if let (Forwarding::User, Some(spawn)) = (desc.forwarding, opts.spawn) {
            spawned.push(spawn_forwarder(desc, n.index, spawn, j)?);
        }
        if opts.abort_after_node == Some(n.index) {
            return Err(TopoError::Aborted(n.index));
        }
    }
    for (node, pid, start) in spawned {
        wait_ready(dir, node, pid, start, opts.ready_timeout)?;
    }
    if opts.abort_after_node.is_none() {
        wait_links_ready(desc, Duration::from_secs(10))?;
    }
    Ok(())
}

/// What is not ready yet: links without carrier in any of the cluster's namespaces, and ports
/// of the switch's and the control network's bridges that do not forward. (A veth's carrier reaches the bridge through the kernel's
/// linkwatch, up to a second after the link is set up; until then the bridge drops what it
/// should forward to that port, and nothing counts it.)
fn links_not_ready(desc: &Description) -> Result<Vec<String>, TopoError> {
    let mut bad = Vec::new();
    for ns in desc.namespaces() {
        let out = sys::ip(&["-n", &ns, "-o", "link", "show"])?;
        bad.extend(
            out.lines()
                .filter(|l| l.contains("NO-CARRIER"))
                .map(|l| format!("{ns}: {l}")),
        );
    }
    let bridges = std::iter::once(&desc.switch.netns).chain(desc.control.iter().map(|c| &c.netns));
    for ns in bridges {
        let out = sys::run("bridge", &["-n", ns, "link", "show"])?;
        bad.extend(
            out.lines()
                .filter(|l| !l.trim().is_empty() && !l.contains("state forwarding"))
                .map(|l| format!("{ns}: {l}")),
        );
    }
    Ok(bad)
}

/// Waits until every link has carrier and every bridge port forwards, so that `up` returns a
/// cluster that carries traffic at once.
fn wait_links_ready(desc: &Description, timeout: Duration) -> Result<(), TopoError> {
    let t0 = Instant::now();
    loop {
        let bad = links_not_ready(desc)?;
        if bad.is_empty() {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            return Err(TopoError::LinksDown(bad.join("; ")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_forwarder(
    desc: &Description,
    node: usize,
    spawn: SpawnFn<'_>,
    j: &mut Journal,
) -> Result<(usize, i32, u64), TopoError> {
    use std::os::unix::process::CommandExt;
    let dir = &desc.dir;
    let log = forwarder_log_path(dir, node);
    let stats = forwarder_stats_path(dir, node);
    for p in [&log, &stats] {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        j.record(&Entry::File(name.to_string()))?;
    }
    // Appended to, so a restarted node's log follows its predecessor's.
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| TopoError::io(&log, e))?;
    let err = out.try_clone().map_err(|e| TopoError::io(&log, e))?;
    let mut cmd = spawn(desc, node);
    // Own process group: a Ctrl-C at the terminal that ran `up` does not reach it.
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let child = cmd.spawn().map_err(|e| TopoError::Forwarder {
        node,
        why: format!("spawn {cmd:?}: {e}"),
    })?;
    let pid = child.id() as i32;
    // Not waited on: it outlives `up`; `down` stops it. Dropping `Child` does not kill it.
    drop(child);
    let start = sys::proc_start(pid).ok_or_else(|| TopoError::Forwarder {
        node,
        why: "exited at once".into(),
    })?;
    j.record(&Entry::Pid {
        pid,
        start,
        label: format!("forward-node{node}"),
    })?;
    Ok((node, pid, start))
}

fn wait_ready(
    dir: &Path,
    node: usize,
    pid: i32,
    start: u64,
    timeout: Duration,
) -> Result<(), TopoError> {
    let stats = forwarder_stats_path(dir, node);
    let t0 = Instant::now();
    loop {
        if stats.exists() {
            return Ok(());
        }
        let gone = sys::proc_start(pid) != Some(start);
        if gone || t0.elapsed() > timeout {
            let log = std::fs::read_to_string(forwarder_log_path(dir, node)).unwrap_or_default();
            let tail: String = log
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ");
            let what = if gone { "exited" } else { "not ready in time" };
            return Err(TopoError::Forwarder {
                node,
                why: format!("{what}; log: {tail}"),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Node `node`'s forwarder process as the journal records it (the last one started, also by
/// [`respawn`]): its pid and whether it is still running (same pid and start time).
pub fn node_process(dir: &Path, node: usize) -> Result<Option<(i32, bool)>, TopoError> {
    let label = format!("forward-node{node}");
    Ok(journal::read(dir)?.iter().rev().find_map(|e| match e {
        Entry::Pid {
            pid,
            start,
            label: l,
        } if *l == label => Some((*pid, sys::proc_start(*pid) == Some(*start))),
        _ => None,
    }))
}

/// Starts node `node`'s forwarder again (after it died or was killed) with `spawn`, records it
/// in the journal (so [`down`] stops it) and waits until it is ready, like [`up`] does. Refuses
/// while the recorded process still runs. Returns the new pid.
pub fn respawn(
    dir: &Path,
    node: usize,
    spawn: SpawnFn<'_>,
    ready_timeout: Duration,
) -> Result<i32, TopoError> {
    let desc = load(dir)?;
    if node >= desc.nodes.len() {
        return Err(TopoError::Forwarder {
            node,
            why: format!("the cluster has {} nodes", desc.nodes.len()),
        });
    }
    if let Some((pid, true)) = node_process(dir, node)? {
        return Err(TopoError::Forwarder {
            node,
            why: format!("still running (pid {pid}); stop it first"),
        });
    }
    let stats = forwarder_stats_path(dir, node);
    match std::fs::remove_file(&stats) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(TopoError::io(&stats, e)),
    }
    let mut j = Journal::open(dir)?;
    let (node, pid, start) = spawn_forwarder(&desc, node, spawn, &mut j)?;
    wait_ready(dir, node, pid, start, ready_timeout)?;
    Ok(pid)
}

/// What [`down`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DownReport {
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
    /// Processes stopped (labels).
    pub processes: Vec<String>,
}

/// Removes everything the journal in `dir` records: stops the processes (all at once,
/// [`sys::stop_processes`]), deletes the namespaces
/// (which removes their links), then the files and (if `up` made it) the directory. If anything
/// cannot be removed the journal stays, so `down` can be run again.
pub fn down(dir: &Path) -> Result<DownReport, TopoError> {
    let entries = journal::read(dir)?;
    let mut report = DownReport::default();
    let (labels, ids): (Vec<&String>, Vec<(i32, u64)>) = (entries.iter().rev())
        .filter_map(|e| match e {
            Entry::Pid { pid, start, label } => Some((label, (*pid, *start))),
            _ => None,
        })
        .unzip();
    let running = sys::stop_processes(&ids, Duration::from_secs(3));
    for (label, _) in labels.into_iter().zip(running).filter(|(_, was)| *was) {
        report.processes.push(label.clone());
    }
    let failed: std::collections::HashSet<&str> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::NetnsFailed(n) => Some(n.as_str()),
            _ => None,
        })
        .collect();
    let mut first_err = None;
    for e in entries.iter().rev() {
        if let Entry::Netns(n) = e {
            if failed.contains(n.as_str()) || !sys::netns_exists(n) {
                continue;
            }
            match sys::ip(&["netns", "delete", n]) {
                Ok(_) => report.namespaces.push(n.clone()),
                Err(err) => {
                    if sys::netns_exists(n) {
                        first_err.get_or_insert(err);
                    }
                }
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let created_dir = entries.iter().any(|e| matches!(e, Entry::DirCreated(_)));
    if created_dir {
        std::fs::remove_dir_all(dir).map_err(|e| TopoError::io(dir, e))?;
    } else {
        for e in &entries {
            if let Entry::File(f) = e {
                // Also a temporary `NAME.tmp` a writer may have left while replacing NAME.
                // A recorded name may be a directory (a node's log directory).
                for p in [dir.join(f), dir.join(format!("{f}.tmp"))] {
                    let removed = if p.is_dir() {
                        std::fs::remove_dir_all(&p)
                    } else {
                        std::fs::remove_file(&p)
                    };
                    match removed {
                        Ok(()) => {}
                        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                        Err(err) => return Err(TopoError::io(&p, err)),
                    }
                }
            }
        }
        let jp = dir.join(journal::JOURNAL_FILE);
        std::fs::remove_file(&jp).map_err(|e| TopoError::io(&jp, e))?;
    }
    Ok(report)
}
