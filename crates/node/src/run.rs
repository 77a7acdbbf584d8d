//! Running a node: load the tables, open the ports, drive one engine per worker thread.

use crate::config::{parse_mac, FibBackend, IoBackend, NodeFile};
use crate::tables::{read_entries, read_gpt, EntryKind, TableError};
use sb_engine::lte::{Lte, LteConfig};
use sb_engine::{App, Counters, CuckooFib, Engine, Fib, NodeConfig, Outputs, PortAddr, PortId};
use sb_io::{PacketBatch, Port, PortStats};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Why a node could not run.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration is wrong.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A table could not be loaded.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A table does not fit the application.
    #[error("{0}")]
    Tables(String),
    /// The engine refused its configuration.
    #[error(transparent)]
    Engine(#[from] sb_engine::EngineError),
    /// A port could not be opened.
    #[error("opening port {port}: {source}")]
    Port {
        /// The port.
        port: String,
        /// The error.
        #[source]
        source: sb_io::IoError,
    },
    /// Writing the counters failed.
    #[error("writing {path}: {source}")]
    Counters {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Something this build cannot do.
    #[error("{0}")]
    Unsupported(String),
    /// A worker thread panicked.
    #[error("worker {0} panicked")]
    Worker(usize),
    /// The control plane failed.
    #[error("control plane: {0}")]
    Control(#[from] crate::control::ControlError),
}

/// A node's tables, loaded and checked.
pub struct Tables {
    /// The GPT (ScaleBricks).
    pub gpt: Option<sb_engine::Gpt>,
    fib: FibHandle,
    uplink: sb_cuckoo::Reader,
    /// The uplink table's writer (for the control plane).
    uplink_writer: Option<sb_cuckoo::Writer>,
    /// The policy slots the workers apply and the control plane configures (one core per
    /// worker; as many slots as the FIB has room for).
    pub policies: Arc<sb_engine::policy::Policies>,
    /// Sizes for reports.
    pub sizes: TableSizes,
}

/// The keys of a live GPT: the control plane's count (its owners' pieces and deltas), since the
/// table itself keeps the count it was assembled with.
fn live_gpt_keys(status: &serde_json::Value) -> u64 {
    status["gpt_keys"].as_u64().unwrap_or(0)
}

/// Table sizes a node reports.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct TableSizes {
    /// GPT keys (0 without a GPT; with the control plane, the cluster's keys as this node's
    /// replica has them).
    pub gpt_keys: u64,
    /// GPT bytes.
    pub gpt_bytes: usize,
    /// FIB entries.
    pub fib_entries: usize,
    /// FIB bytes.
    pub fib_bytes: usize,
    /// Uplink entries.
    pub uplink_entries: usize,
    /// Uplink table bytes.
    pub uplink_bytes: usize,
}

enum FibHandle {
    /// The writer is taken by the control plane (None afterwards).
    Cuckoo(CuckooFib, Option<sb_cuckoo::Writer>),
    #[cfg(feature = "dpdk")]
    Rte(sb_engine::RteHashFib),
}

impl FibHandle {
    fn handle(&self) -> Result<Box<dyn Fib>, NodeError> {
        Ok(match self {
            FibHandle::Cuckoo(f, _) => Box::new(f.handle()),
            #[cfg(feature = "dpdk")]
            FibHandle::Rte(f) => {
                Box::new(f.handle().map_err(|e| NodeError::Tables(e.to_string()))?)
            }
        })
    }
    /// The cuckoo FIB (what the operator API reads).
    #[cfg(feature = "grpc")]
    fn cuckoo(&self) -> Option<&CuckooFib> {
        match self {
            FibHandle::Cuckoo(f, _) => Some(f),
            #[cfg(feature = "dpdk")]
            FibHandle::Rte(_) => None,
        }
    }
    fn sizes(&self) -> (usize, usize) {
        match self {
            FibHandle::Cuckoo(f, _) => (f.len(), f.memory_bytes()),
            #[cfg(feature = "dpdk")]
            FibHandle::Rte(f) => (f.len(), f.memory_bytes()),
        }
    }
}

/// Loads the node's tables and checks they belong to its cluster and node.
pub fn load_tables(cfg: &NodeFile) -> Result<Tables, NodeError> {
    let gpt = match &cfg.gpt {
        Some(p) if cfg.arch()? == sb_engine::Arch::ScaleBricks && cfg.control.is_none() => {
            let g = read_gpt(p, cfg.seed)?;
            Some(sb_engine::Gpt::from(g))
        }
        _ => None,
    };
    let fib_e = read_entries(&cfg.fib_table, cfg.cluster_id, cfg.node, EntryKind::Fib)?;
    if (fib_e.key_bytes, fib_e.value_bytes)
        != (sb_engine::lte::KEY_BYTES, sb_engine::lte::VALUE_BYTES)
    {
        return Err(NodeError::Tables(format!(
            "{}: entries of {}+{} bytes, the LTE application uses {}+{}",
            cfg.fib_table.display(),
            fib_e.key_bytes,
            fib_e.value_bytes,
            sb_engine::lte::KEY_BYTES,
            sb_engine::lte::VALUE_BYTES
        )));
    }
    // With a control plane the tables take inserts while shared: room for them up front.
    let room = cfg.control.as_ref().map_or(0, |c| c.fib_room);
    let fib = match cfg.fib {
        FibBackend::Cuckoo => {
            let (w, f) = CuckooFib::build_with_room(
                sb_engine::lte::KEY_BYTES,
                sb_engine::lte::VALUE_BYTES,
                cfg.seed,
                room,
                fib_e.iter(),
            )
            .map_err(|e| NodeError::Tables(e.to_string()))?;
            FibHandle::Cuckoo(f, Some(w))
        }
        #[cfg(feature = "dpdk")]
        FibBackend::RteHash => {
            let mb = (fib_e.len() as u64 * 256 / 1_000_000 + 128) as u32;
            sb_peers::dpdk::eal_init(mb).map_err(|e| NodeError::Tables(e.to_string()))?;
            FibHandle::Rte(
                sb_engine::RteHashFib::build(
                    sb_engine::lte::KEY_BYTES,
                    sb_engine::lte::VALUE_BYTES,
                    fib_e.iter(),
                )
                .map_err(|e| NodeError::Tables(e.to_string()))?,
            )
        }
        #[cfg(not(feature = "dpdk"))]
        FibBackend::RteHash => {
            return Err(NodeError::Unsupported(
                "the rte_hash FIB needs a build with the `dpdk` feature".into(),
            ))
        }
    };
    let up_e = read_entries(
        &cfg.uplink_table,
        cfg.cluster_id,
        cfg.node,
        EntryKind::Uplink,
    )?;
    if (up_e.key_bytes, up_e.value_bytes) != (4, sb_engine::lte::UPLINK_VALUE_BYTES) {
        return Err(NodeError::Tables(format!(
            "{}: uplink entries of the wrong size",
            cfg.uplink_table.display()
        )));
    }
    let t = sb_engine::fib::cuckoo_table_with_room(
        4,
        sb_engine::lte::UPLINK_VALUE_BYTES,
        cfg.seed,
        room,
        up_e.iter(),
    )
    .map_err(|e| NodeError::Tables(e.to_string()))?;
    let (uplink_entries, uplink_bytes) = (t.len(), t.memory_bytes());
    let (uplink_writer, uplink) = t.into_concurrent();
    let (fib_entries, fib_bytes) = fib.sizes();
    let sizes = TableSizes {
        gpt_keys: gpt.as_ref().map_or(0, |g| g.len()),
        gpt_bytes: gpt.as_ref().map_or(0, |g| g.stats().bytes as usize),
        fib_entries,
        fib_bytes,
        uplink_entries,
        uplink_bytes,
    };
    Ok(Tables {
        gpt,
        fib,
        uplink,
        uplink_writer: Some(uplink_writer),
        sizes,
        policies: {
            let p = sb_engine::policy::Policies::new(cfg.workers.max(1), room.max(1));
            // The node's share of the sessions (what its other per-key maps are allocated
            // for: crate::control::ControlFile::share).
            if let Some(c) = &cfg.control {
                p.reserve(c.share());
            }
            Arc::new(p)
        },
    })
}

impl Tables {
    /// The writers of the FIB and the uplink table, for the control plane (once).
    fn take_data_plane(&mut self) -> Result<crate::control::DataPlane, NodeError> {
        let fib = match &mut self.fib {
            FibHandle::Cuckoo(_, w) => w.take(),
            #[cfg(feature = "dpdk")]
            FibHandle::Rte(_) => None,
        };
        match (fib, self.uplink_writer.take()) {
            (Some(fib), Some(uplink)) => Ok(crate::control::DataPlane::with_policies(
                fib,
                uplink,
                self.policies.clone(),
            )),
            _ => Err(NodeError::Unsupported(
                "live updates need the cuckoo FIB".into(),
            )),
        }
    }
}

/// The engine configuration of a node file.
pub fn node_config(cfg: &NodeFile) -> Result<NodeConfig, NodeError> {
    let port = |p: &crate::config::PortFile| -> Result<PortAddr, NodeError> {
        Ok(PortAddr {
            mac: parse_mac(&p.mac)?,
            peer_mac: parse_mac(&p.peer_mac)?,
            ip: p.ip,
        })
    };
    Ok(NodeConfig {
        arch: cfg.arch()?,
        node: cfg.node,
        fabric_macs: cfg
            .fabric_macs
            .iter()
            .map(|m| parse_mac(m))
            .collect::<Result<_, _>>()?,
        inet: port(&cfg.inet)?,
        ran: port(&cfg.ran)?,
        seed: cfg.seed,
    })
}

/// The engine of worker `worker` over the loaded tables (its core among the policies'
/// counters).
pub fn make_engine(cfg: &NodeFile, t: &Tables, worker: usize) -> Result<Engine<Lte>, NodeError> {
    let app = Lte::new(
        LteConfig {
            ran_addrs: cfg.ran_addrs.clone(),
            ran_mtu: cfg.ran_mtu,
            // ICMP errors come from the node's inet address (its ran address if it has none).
            icmp_src: cfg
                .inet
                .ip
                .or(cfg.ran_addrs.get(usize::from(cfg.node)).copied())
                .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED),
            icmp_src6: sb_engine::lte::default_icmp_src6(cfg.node),
        },
        t.uplink.clone(),
    )
    .with_policies(t.policies.clone(), worker);
    Ok(Engine::new(
        node_config(cfg)?,
        t.gpt.clone(),
        t.fib.handle()?,
        app,
        cfg.batch,
    )?)
}

/// Nanoseconds since the process's first call: the clock every worker passes its engine
/// (one origin, since the policies' MBR buckets are shared by the workers).
pub fn clock_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The loop of one worker: pass the engine the clock ([`clock_ns`]) and let it do its work
/// between batches ([`Engine::poll`]: End Markers, a session's flushed buffer, whose outputs
/// go first), then receive on each port, run the batch to completion, transmit the
/// outputs; sleep on the ports when all are idle; publish the counters into `published`
/// every few hundred batches and when idle (and the ports' own statistics into `io` about once
/// a second); return when `stop` is set.
pub fn drive<A: App>(
    engine: &mut Engine<A>,
    ports: &mut [Box<dyn Port>; 3],
    batch: usize,
    stop: &AtomicBool,
    published: &Mutex<Counters>,
    io: Option<&Mutex<[PortStats; 3]>>,
) {
    let mut last_io = Instant::now();
    let buf_size = sb_io::batch::DEFAULT_BUF_SIZE;
    let mut rx = PacketBatch::with_buf_size(batch, buf_size);
    let mut out = Outputs::new(batch, buf_size);
    let mut ready = Vec::with_capacity(3);
    let mut since_publish = 0u32;
    let transmit = |out: &mut Outputs, ports: &mut [Box<dyn Port>; 3]| {
        for (qi, q) in PortId::ALL.into_iter().enumerate() {
            let b = out.get_mut(q);
            if !b.is_empty() {
                ports[qi].tx_batch(b);
                b.clear();
            }
        }
    };
    while !stop.load(Ordering::Relaxed) {
        // The engine's clock (its error messages' rate limit, the policies' buckets), once
        // per loop.
        engine.set_clock(clock_ns());
        // Everything the previous batches produced was transmitted: the engine's work between
        // batches, sent before anything received next.
        engine.poll(&mut out);
        transmit(&mut out, ports);
        let mut busy = false;
        for (pi, port) in PortId::ALL.into_iter().enumerate() {
            if ports[pi].rx_batch(&mut rx) == 0 {
                continue;
            }
            busy = true;
            engine.process(port, &mut rx, &mut out);
            transmit(&mut out, ports);
        }
        since_publish += 1;
        if !busy || since_publish >= 256 {
            *published.lock().unwrap_or_else(|e| e.into_inner()) = engine.counters().clone();
            since_publish = 0;
            if let Some(io) = io {
                if last_io.elapsed() >= Duration::from_secs(1) {
                    *io.lock().unwrap_or_else(|e| e.into_inner()) =
                        [ports[0].stats(), ports[1].stats(), ports[2].stats()];
                    last_io = Instant::now();
                }
            }
        }
        if !busy {
            let mut refs: Vec<&mut dyn Port> = ports
                .iter_mut()
                .map(|p| &mut **p as &mut dyn Port)
                .collect();
            let _ = sb_io::wait_any(&mut refs, Duration::from_millis(20), &mut ready);
        }
    }
    *published.lock().unwrap_or_else(|e| e.into_inner()) = engine.counters().clone();
    if let Some(io) = io {
        *io.lock().unwrap_or_else(|e| e.into_inner()) =
            [ports[0].stats(), ports[1].stats(), ports[2].stats()];
    }
}

/// The AF_XDP sockets of the XDP fast path's slow path among a worker's ports: (port index, fd).
type SlowPathSockets = Vec<(usize, std::os::fd::RawFd)>;

/// A kernel port `i` (0 `inet`, 1 `ran`, 2 `fabric`) named `name` with AF_PACKET settings `c`:
/// with the XDP fast path and one worker, a [`sb_io::xdp::SlowPathPort`] (its AF_XDP socket
/// put into `xsks` for the programs' XSKMAP; AF_PACKET alone, said on stderr, when AF_XDP
/// cannot be opened), else an AF_PACKET port.
#[cfg_attr(not(feature = "fastpath"), allow(unused_variables))]
fn kernel_port(
    cfg: &NodeFile,
    i: usize,
    name: &str,
    c: &sb_io::afpacket::AfPacketConfig,
    xsks: &mut SlowPathSockets,
) -> Result<Box<dyn Port>, sb_io::IoError> {
    #[cfg(feature = "fastpath")]
    if cfg.io == IoBackend::XdpFast && cfg.workers == 1 {
        let x = sb_io::xdp::XdpConfig {
            frames: 1024,
            frame_size: 4096,
            ring_size: 512,
            ..Default::default()
        };
        match sb_io::xdp::SlowPathPort::open(name, &x, c) {
            Ok(p) => {
                xsks.push((i, p.xsk_fd()));
                return Ok(Box::new(p));
            }
            Err(e) => eprintln!(
                "node {}: {name}: the slow path over AF_XDP cannot be opened ({e}): it goes \
                 up the kernel's path to AF_PACKET",
                cfg.node
            ),
        }
    }
    Ok(Box::new(sb_io::afpacket::AfPacketPort::open(name, c)?))
}

fn open_ports(
    cfg: &NodeFile,
    worker: usize,
) -> Result<([Box<dyn Port>; 3], SlowPathSockets), NodeError> {
    let open = || -> Result<([Box<dyn Port>; 3], SlowPathSockets), NodeError> {
        let mut xsks = Vec::new();
        let names = [&cfg.inet.ifname, &cfg.ran.ifname, &cfg.fabric.ifname];
        let mut v: Vec<Box<dyn Port>> = Vec::new();
        for (i, name) in names.into_iter().enumerate() {
            let err = |source| NodeError::Port {
                port: name.clone(),
                source,
            };
            let p: Box<dyn Port> = match cfg.io {
                // With the fast path, AF_PACKET ports are its slow path: they receive what the
                // XDP programs pass up (crate::fastpath).
                IoBackend::Afpacket | IoBackend::XdpFast => {
                    let c = sb_io::afpacket::AfPacketConfig {
                        promiscuous: i != 2,
                        rx_mode: sb_io::afpacket::RxMode::Frames,
                        fanout_group: (cfg.workers > 1)
                            .then(|| ((std::process::id() as u16) & 0x3fff) * 3 + i as u16),
                        ..Default::default()
                    };
                    kernel_port(cfg, i, name, &c, &mut xsks).map_err(err)?
                }
                #[cfg(feature = "xdp")]
                IoBackend::Xdp => {
                    if cfg.workers > 1 {
                        return Err(NodeError::Unsupported(
                            "AF_XDP ports take one worker (veth has one queue)".into(),
                        ));
                    }
                    let c = sb_io::xdp::XdpConfig::default();
                    Box::new(sb_io::xdp::XdpPort::open(name, &c).map_err(err)?)
                }
                #[cfg(not(feature = "xdp"))]
                IoBackend::Xdp => {
                    return Err(NodeError::Unsupported(
                        "AF_XDP ports need a build with the `xdp` feature".into(),
                    ))
                }
            };
            v.push(p);
        }
        let _ = worker;
        let ports = v.try_into().unwrap_or_else(|_| unreachable!("three ports"));
        Ok((ports, xsks))
    };
    match &cfg.netns {
        Some(ns) => sb_io::netns::in_netns(ns, open).map_err(|source| NodeError::Port {
            port: format!("namespace {ns}"),
            source,
        })?,
        None => open(),
    }
}

/// What the counters file says (besides the engine's counters).
fn counters_json(
    cfg: &NodeFile,
    sizes: &TableSizes,
    c: &Counters,
    io: &[[PortStats; 3]],
    running: bool,
    control: Option<serde_json::Value>,
    xdp: Option<serde_json::Value>,
) -> serde_json::Value {
    let mut io_sum = [PortStats::default(); 3];
    for w in io {
        for (a, b) in io_sum.iter_mut().zip(w) {
            a.rx_packets += b.rx_packets;
            a.rx_bytes += b.rx_bytes;
            a.tx_packets += b.tx_packets;
            a.tx_bytes += b.tx_bytes;
            a.rx_dropped += b.rx_dropped;
            a.tx_dropped += b.tx_dropped;
            a.rx_errors += b.rx_errors;
            a.tx_errors += b.tx_errors;
            a.rx_truncated += b.rx_truncated;
            a.rx_csum_completed += b.rx_csum_completed;
            a.rx_af_xdp += b.rx_af_xdp;
        }
    }
    let port = |s: &PortStats| {
        json!({"rx_packets": s.rx_packets, "rx_bytes": s.rx_bytes, "rx_dropped": s.rx_dropped,
               "rx_errors": s.rx_errors, "tx_packets": s.tx_packets, "tx_bytes": s.tx_bytes,
               "tx_dropped": s.tx_dropped, "tx_errors": s.tx_errors,
               "rx_truncated": s.rx_truncated, "rx_csum_completed": s.rx_csum_completed,
               "rx_af_xdp": s.rx_af_xdp})
    };
    json!({
        "node": cfg.node,
        "pid": std::process::id(),
        "running": running,
        "arch": cfg.arch,
        "fib": cfg.fib,
        "io": cfg.io,
        "workers": cfg.workers,
        "tables": sizes,
        "engine": c.report(),
        "ports": {"inet": port(&io_sum[0]), "ran": port(&io_sum[1]), "fabric": port(&io_sum[2])},
        "control": control,
        "xdp": xdp,
    })
}

fn write_json(path: &std::path::Path, v: &serde_json::Value) -> Result<(), NodeError> {
    let tmp = path.with_extension("json.tmp");
    let err = |source| NodeError::Counters {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(&tmp, serde_json::to_vec_pretty(v).expect("serializable")).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Runs a node until `stop` is set: loads its tables, starts its control plane (if it has one)
/// and waits for the GPT it assembles, opens its ports (in its namespace), runs `workers`
/// engines on their own threads, and writes the counters to `cfg.counters` once it is ready,
/// every second, and when it stops. `on_ready` is called once the ports are open.
pub fn run(
    cfg: &NodeFile,
    stop: &AtomicBool,
    on_ready: impl FnOnce(),
) -> Result<Counters, NodeError> {
    cfg.check()?;
    let mut tables = load_tables(cfg)?;
    // A bound UDP socket on the GTP-U port keeps the node's own kernel from answering G-PDUs
    // and echo requests to its ran address with ICMP port unreachable. Bound to that address
    // alone: the PFCP endpoint binds the port on its own address for the CP function's
    // G-PDUs (a wildcard here took the port from it, and the SMF's never arrived).
    let ran_ip = cfg.ran_addrs.get(cfg.node as usize).copied();
    let _gtpu_guard = match (&cfg.netns, ran_ip) {
        (Some(ns), Some(ip)) if !ip.is_unspecified() => {
            sb_io::netns::in_netns(ns, || std::net::UdpSocket::bind((ip, 2152)).ok())
                .ok()
                .flatten()
        }
        _ => None,
    };
    let ctl_pub = Arc::new(Mutex::new(crate::control::Published::default()));
    let ctl_failed = AtomicBool::new(false);
    // The XDP fast path's maps, once loaded (io xdp-fast): the control thread writes every
    // table change through it.
    let mirror = crate::mirror::empty_slot();
    std::thread::scope(|s| {
        let ctl_thread = match &cfg.control {
            Some(ctl) => {
                let spec = crate::control::read_spec(&ctl.spec)?;
                let mut dp = tables.take_data_plane()?;
                dp.mirror = mirror.clone();
                let slot = dp.gpt.clone();
                let (ctl_pub, ctl_failed) = (&ctl_pub, &ctl_failed);
                let h = s.spawn(move || {
                    let r = crate::control::run(cfg, ctl, spec, dp, stop, ctl_pub);
                    if r.is_err() {
                        ctl_failed.store(true, Ordering::Relaxed);
                    }
                    r
                });
                let flows = tables.sizes.fib_entries as u64 * cfg.fabric_macs.len() as u64;
                let timeout = Duration::from_secs(60 + flows / 100_000);
                let t0 = Instant::now();
                match crate::control::wait_ready(&slot, ctl_pub, timeout, ctl_failed) {
                    Ok(g) => {
                        eprintln!(
                            "node {}: GPT and FIB slices ready after {:.2} s",
                            cfg.node,
                            t0.elapsed().as_secs_f64()
                        );
                        tables.sizes.gpt_keys = g.len();
                        tables.sizes.gpt_bytes = g.stats().bytes as usize;
                        tables.gpt = Some(sb_engine::Gpt::from(g));
                    }
                    Err(e) => {
                        stop.store(true, Ordering::Relaxed);
                        return Err(match h.join() {
                            Ok(Err(ce)) => NodeError::Control(ce),
                            _ => NodeError::Control(e),
                        });
                    }
                }
                Some(h)
            }
            None => None,
        };
        let r = match start_fast_path(cfg, &tables, &mirror) {
            Ok(()) => forward(cfg, &tables, stop, on_ready, &ctl_pub, &mirror),
            Err(e) => Err(e),
        };
        stop.store(true, Ordering::Relaxed);
        if let Some(h) = ctl_thread {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(NodeError::Control(e)),
                Err(_) => return Err(NodeError::Unsupported("the control thread panicked".into())),
            }
        }
        r
    })
}

/// With `io: xdp-fast`: loads the fast path with the node's tables as they are now and puts it
/// into `slot`, holding its lock meanwhile, so that the control thread (waiting on the lock to
/// write its next change through it) has it miss no change.
#[cfg(feature = "fastpath")]
fn start_fast_path(
    cfg: &NodeFile,
    tables: &Tables,
    slot: &crate::mirror::MirrorSlot,
) -> Result<(), NodeError> {
    if cfg.io != IoBackend::XdpFast {
        return Ok(());
    }
    let mut m = crate::mirror::lock(slot);
    let fixed;
    // Full duplication and hash partitioning have none (the FIB holds what they need).
    let gpt = match &tables.gpt {
        Some(g) => {
            fixed = g.table().to_fixed().ok_or_else(|| {
                NodeError::Unsupported(
                    "the XDP fast path is loaded from a fixed or live GPT, not a mirror of it"
                        .into(),
                )
            })?;
            Some(&fixed)
        }
        None if cfg.arch()? != sb_engine::Arch::ScaleBricks => None,
        None => {
            return Err(NodeError::Unsupported(
                "the XDP fast path needs the scalebricks architecture's GPT".into(),
            ))
        }
    };
    let fib = tables
        .fib
        .cuckoo()
        .ok_or_else(|| NodeError::Unsupported("the XDP fast path needs the cuckoo FIB".into()))?;
    let mut fib_entries = Vec::with_capacity(fib.len());
    fib.reader()
        .for_each(|k, v| fib_entries.push((k.to_vec(), v.to_vec())));
    let mut up_entries = Vec::with_capacity(tables.uplink.len());
    tables
        .uplink
        .for_each(|k, v| up_entries.push((k.to_vec(), v.to_vec())));
    let room = cfg.control.as_ref().map_or(0, |c| c.fib_room);
    let fp = crate::fastpath::NodeFastPath::start(cfg, gpt, &fib_entries, &up_entries, room)?;
    *m = Some(Box::new(fp));
    Ok(())
}

/// Without the `fastpath` feature: `io: xdp-fast` is refused.
#[cfg(not(feature = "fastpath"))]
fn start_fast_path(
    cfg: &NodeFile,
    _tables: &Tables,
    _slot: &crate::mirror::MirrorSlot,
) -> Result<(), NodeError> {
    if cfg.io == IoBackend::XdpFast {
        return Err(NodeError::Unsupported(
            "the XDP fast path (io xdp-fast) needs a build with the `fastpath` feature".into(),
        ));
    }
    Ok(())
}

/// The fast path's state for the counters file (None without one).
fn xdp_json(slot: &crate::mirror::MirrorSlot) -> Option<serde_json::Value> {
    crate::mirror::lock(slot)
        .as_ref()
        .map(|m| m.report().to_json())
}

/// The forwarding part of [`run`]: engines, ports, workers, counters.
fn forward(
    cfg: &NodeFile,
    tables: &Tables,
    stop: &AtomicBool,
    on_ready: impl FnOnce(),
    ctl_pub: &Arc<Mutex<crate::control::Published>>,
    xdp: &crate::mirror::MirrorSlot,
) -> Result<Counters, NodeError> {
    let mut engines = Vec::new();
    let mut ports = Vec::new();
    for w in 0..cfg.workers {
        engines.push(make_engine(cfg, tables, w)?);
        let (p, xsks) = open_ports(cfg, w)?;
        // The slow path's AF_XDP sockets into the programs' XSKMAP (on failure the slow
        // path goes up the kernel's path to the same ports' AF_PACKET sockets).
        for (port, fd) in xsks {
            let mut m = crate::mirror::lock(xdp);
            let r = m.as_mut().map(|m| m.slow_path_socket(port, fd));
            if let Some(Err(e)) = r {
                eprintln!(
                    "node {}: {}: the slow path over AF_XDP is off ({e}): it goes up the \
                     kernel's path to AF_PACKET",
                    cfg.node,
                    p[port].name()
                );
            }
        }
        ports.push(p);
    }
    let published: Vec<Arc<Mutex<Counters>>> = (0..cfg.workers)
        .map(|_| Arc::new(Mutex::new(Counters::default())))
        .collect();
    let io_stats: Vec<Arc<Mutex<[PortStats; 3]>>> = (0..cfg.workers)
        .map(|_| Arc::new(Mutex::new([PortStats::default(); 3])))
        .collect();
    let sum = |published: &[Arc<Mutex<Counters>>]| {
        let mut c = Counters::default();
        for p in published {
            c.add(&p.lock().unwrap_or_else(|e| e.into_inner()));
        }
        c
    };
    let io_now = |io_stats: &[Arc<Mutex<[PortStats; 3]>>]| -> Vec<[PortStats; 3]> {
        io_stats
            .iter()
            .map(|s| *s.lock().unwrap_or_else(|e| e.into_inner()))
            .collect()
    };
    let control = || {
        cfg.control.as_ref().map(|_| {
            let p = ctl_pub.lock().unwrap_or_else(|e| e.into_inner());
            json!({"status": p.status, "log_bytes": p.log_bytes, "ready": p.ready,
                   "fib_insert_failed": p.fib_insert_failed})
        })
    };
    let sizes = || {
        let mut z = tables.sizes;
        z.fib_entries = tables.fib.sizes().0;
        z.uplink_entries = tables.uplink.len();
        if cfg.control.is_some() {
            z.gpt_keys = live_gpt_keys(&ctl_pub.lock().unwrap_or_else(|e| e.into_inner()).status);
        }
        z
    };
    write_json(
        &cfg.counters,
        &counters_json(
            cfg,
            &sizes(),
            &Counters::default(),
            &[],
            true,
            control(),
            xdp_json(xdp),
        ),
    )?;
    #[cfg(not(feature = "grpc"))]
    if cfg.api.is_some() {
        return Err(NodeError::Unsupported(
            "the operator API: this sb-node was built without its `grpc` feature".into(),
        ));
    }
    #[cfg(feature = "grpc")]
    let api = match &cfg.api {
        Some(a) if cfg.control.is_some() => {
            let token = std::fs::read_to_string(&a.token_file)
                .map_err(|e| {
                    NodeError::Unsupported(format!("API token {}: {e}", a.token_file.display()))
                })?
                .trim()
                .to_string();
            if token.is_empty() {
                return Err(NodeError::Unsupported(format!(
                    "API token {} is empty",
                    a.token_file.display()
                )));
            }
            let bind = || std::net::TcpListener::bind(a.addr);
            let l = match &cfg.netns {
                Some(ns) => sb_io::netns::in_netns(ns, bind).map_err(|source| NodeError::Port {
                    port: format!("namespace {ns}"),
                    source,
                })?,
                None => bind(),
            }
            .map_err(|e| NodeError::Unsupported(format!("API on {}: {e}", a.addr)))?;
            let fib = tables.fib.cuckoo().ok_or_else(|| {
                NodeError::Unsupported("the operator API needs the cuckoo FIB".into())
            })?;
            let (cfg2, published2, io2, ctl2) = (
                cfg.clone(),
                published.clone(),
                io_stats.clone(),
                ctl_pub.clone(),
            );
            let ctl3 = ctl_pub.clone();
            let xdp2 = xdp.clone();
            let (fib_r, uplink_r, sizes0) =
                (fib.reader().clone(), tables.uplink.clone(), tables.sizes);
            let backend = crate::api::NodeApi {
                node: cfg.node,
                gpt: tables.gpt.clone(),
                fib: fib.reader().clone(),
                uplink: tables.uplink.clone(),
                counters: Box::new(move || {
                    let mut c = Counters::default();
                    for p in &published2 {
                        c.add(&p.lock().unwrap_or_else(|e| e.into_inner()));
                    }
                    let io: Vec<[PortStats; 3]> = io2
                        .iter()
                        .map(|s| *s.lock().unwrap_or_else(|e| e.into_inner()))
                        .collect();
                    let mut z = sizes0;
                    z.fib_entries = fib_r.len();
                    z.uplink_entries = uplink_r.len();
                    let p = ctl2.lock().unwrap_or_else(|e| e.into_inner());
                    z.gpt_keys = live_gpt_keys(&p.status);
                    let control = json!({"status": p.status, "log_bytes": p.log_bytes,
                        "ready": p.ready, "fib_insert_failed": p.fib_insert_failed});
                    drop(p);
                    counters_json(&cfg2, &z, &c, &io, true, Some(control), xdp_json(&xdp2))
                }),
                control: Box::new(move || {
                    let p = ctl3.lock().unwrap_or_else(|e| e.into_inner());
                    json!({"status": p.status, "log_bytes": p.log_bytes, "ready": p.ready})
                }),
            };
            let server = sb_api::ServerConfig {
                token,
                peers: a.peers.clone(),
            };
            Some((l, server, Arc::new(backend)))
        }
        Some(_) => {
            return Err(NodeError::Unsupported(
                "the operator API needs the control plane".into(),
            ))
        }
        None => None,
    };
    let metrics = match cfg.metrics {
        Some(addr) => {
            let bind = || std::net::TcpListener::bind(addr);
            let l = match &cfg.netns {
                Some(ns) => sb_io::netns::in_netns(ns, bind).map_err(|source| NodeError::Port {
                    port: format!("namespace {ns}"),
                    source,
                })?,
                None => bind(),
            }
            .map_err(|e| NodeError::Unsupported(format!("metrics on {addr}: {e}")))?;
            Some(l)
        }
        None => None,
    };
    on_ready();
    let result = std::thread::scope(|s| {
        #[cfg(feature = "grpc")]
        if let Some((listener, server, backend)) = api {
            s.spawn(move || {
                // The thread stays in the node's namespace: the connections it makes to the
                // other nodes' APIs (forwarded lookups, status) go out on the control network.
                let serve = || sb_api::serve(listener, server, backend, stop);
                let r = match &cfg.netns {
                    Some(ns) => sb_io::netns::in_netns(ns, serve)
                        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string()))),
                    None => serve(),
                };
                if let Err(e) = r {
                    eprintln!("api: {e}");
                }
            });
        }
        if let Some(listener) = metrics {
            let (published, io_stats) = (&published, &io_stats);
            s.spawn(move || {
                let snapshot = || crate::metrics::Snapshot {
                    workers: published
                        .iter()
                        .map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).clone())
                        .collect(),
                    ports: io_now(io_stats),
                    tables: sizes(),
                    control: cfg.control.as_ref().map(|_| {
                        ctl_pub
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .status
                            .clone()
                    }),
                    log_bytes: cfg
                        .control
                        .as_ref()
                        .map(|_| ctl_pub.lock().unwrap_or_else(|e| e.into_inner()).log_bytes),
                    // (A lock guard made in a field's expression would live to the end of the
                    // literal: each is taken and dropped in a block of its own.)
                    pfcp: {
                        let p = ctl_pub.lock().unwrap_or_else(|e| e.into_inner());
                        p.pfcp.clone()
                    },
                    pfcp_sessions: {
                        let p = ctl_pub.lock().unwrap_or_else(|e| e.into_inner());
                        p.pfcp_sessions
                    },
                    xdp: crate::mirror::lock(xdp).as_ref().map(|m| m.report()),
                };
                if let Err(e) = crate::metrics::serve(listener, stop, snapshot) {
                    eprintln!("metrics: {e}");
                }
            });
        }
        let mut handles = Vec::new();
        for (w, (mut engine, mut p)) in engines.into_iter().zip(ports).enumerate() {
            let (pubc, ios) = (published[w].clone(), io_stats[w].clone());
            let batch = cfg.batch;
            handles.push(s.spawn(move || {
                drive(&mut engine, &mut p, batch, stop, &pubc, Some(&ios));
            }));
        }
        let mut last = Instant::now();
        while !stop.load(Ordering::Relaxed) && !handles.iter().any(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= Duration::from_secs(1) {
                write_json(
                    &cfg.counters,
                    &counters_json(
                        cfg,
                        &sizes(),
                        &sum(&published),
                        &io_now(&io_stats),
                        true,
                        control(),
                        xdp_json(xdp),
                    ),
                )?;
                last = Instant::now();
            }
        }
        stop.store(true, Ordering::Relaxed);
        for (w, h) in handles.into_iter().enumerate() {
            h.join().map_err(|_| NodeError::Worker(w))?;
        }
        Ok::<(), NodeError>(())
    });
    let c = sum(&published);
    write_json(
        &cfg.counters,
        &counters_json(
            cfg,
            &sizes(),
            &c,
            &io_now(&io_stats),
            false,
            control(),
            xdp_json(xdp),
        ),
    )?;
    result?;
    Ok(c)
}
