//! `scalebricks-bench io`: forwards frames between two veths in network namespaces with each
//! packet I/O backend and reports packets per second per core of the forwarding core.
//!
//! Topology (made for the run, deleted after, names include the process id):
//! ```text
//!  [gen ns] g0 ==veth== a [fwd ns] b ==veth== s0 [sink ns]
//!  generator           forwarder (1 thread, pinned)      sink
//! ```
//! The generator blasts UDP frames addressed to `a`'s MAC through an AF_PACKET socket (or
//! `tcpreplay --topspeed` with `--tcpreplay`); the forwarder receives on `a` and transmits every
//! frame unchanged on `b`; the sink counts.
//!
//! Per core (`pps_per_core`) = forwarded frames / (the forwarding thread's utime + stime from
//! `/proc/self/task/TID/stat` + the pinned CPU's softirq time from `/proc/stat`), both sampled
//! over the measured interval. On kernels without `CONFIG_IRQ_TIME_ACCOUNTING` (this one) a
//! softirq tick that lands while the thread runs is counted in both terms, so this is a
//! conservative figure; the pinned CPU's softirq column also holds other tasks' softirqs.
//! `pps_per_core_sched` divides instead by the thread's scheduler run time
//! (`/proc/self/task/TID/schedstat`, ns; it includes softirqs run on the thread's stack, such as
//! the veth transmit and the sink's receive processing raised by its `sendmmsg`) plus the pinned
//! CPU's `ksoftirqd` run time: the other end of the range. Receive-side softirq work for
//! `a` runs on the generator's CPU (the veth transmit of `g0`) and is not charged.
//!
//! `--size` is the Ethernet frame size including the 4-byte FCS that veth does not carry
//! (64 -> 60-byte buffers, 1500 -> 1496), as in RFC 2544.
//!
//! With `--engine` the forwarding thread runs, instead of the plain forwarder, the engine of a
//! one-node ScaleBricks cluster (`sb-engine`, `nodes = 1`): `a` is its `inet` port, `b` its `ran`
//! port; every frame goes through the GPT lookup (SetSep, batched), the cuckoo FIB lookup and
//! GTP-U encapsulation (36 bytes more on `b`), over `--engine-flows` tunnels. The generator sends
//! to UE addresses of those tunnels (`--engine-frames` distinct frames, drawn uniformly), so
//! every lookup hits. Nothing crosses a fabric with one node, so the engine has no fabric port:
//! what it would send there is counted (`fabric_out`, 0 expected). Frames of `--size 1500` are
//! cut to 1482 so that the encapsulated frame fits the 1500-byte MTU of `b`. The same per-core
//! figures with and without `--engine` show how much of the packet budget the lookups and the
//! encapsulation take.
//!
//! `--direction uplink` (with `--engine`) runs the other way: `a` is the engine's `ran` port,
//! `b` its `inet` port; the generator sends the tunnels' G-PDUs (from their eNodeBs to the
//! node's ran address, on their uplink TEIDs, carrying a user frame from the UE of `--size`
//! less the FCS), and the decapsulated user frames leave `b`.
//!
//! `--backend xdp-fast` (with `--engine`, cargo feature `fastpath`) runs instead the sb-xdp
//! fast path (`sb_inet` in XDP on `a`) on the same tables, fed by an XDP generator and counted by
//! an XDP sink: module `fastpath` says how, and how its cores are counted.

#[cfg(feature = "fastpath")]
mod fastpath;
mod frames;

use anyhow::{bail, ensure, Context, Result};
use sb_engine::cluster;
use sb_engine::lte::{Lte, LteConfig, Tunnel};
use sb_engine::{Arch, Engine, NodeConfig, Outputs, PortAddr, PortId};
use sb_io::afpacket::{self, AfPacketConfig, AfPacketPort, RxMode, TxMode};
use sb_io::netns::{self, Netns};
use sb_io::{cpu, memory, PacketBatch, Port};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Backend {
    /// AF_PACKET, TPACKET_V3 receive ring, qdisc-bypassing transmit.
    Afpacket,
    /// AF_XDP copy mode (needs the `xdp` cargo feature).
    Xdp,
    /// In-memory port pairs (no kernel; measures the crate's own overhead).
    Memory,
    /// The sb-xdp fast path in the kernel's XDP hook (`sb_inet` on `a`), fed by an XDP
    /// generator and counted by an XDP sink; needs `--engine` and the `fastpath` cargo feature.
    XdpFast,
}

/// `--direction` (with `--engine`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// User frames to tunnels' UEs in at `a` (the node's `inet`), GTP-U G-PDUs out of `b`
    /// (`ran`).
    Downlink,
    /// GTP-U G-PDUs from the tunnels' eNodeBs in at `a` (the node's `ran`), the decapsulated
    /// user frames out of `b` (`inet`).
    Uplink,
}

/// `--xdp-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpModeArg {
    /// Native (driver) mode; generic when attaching natively fails (the row says so).
    Native,
    /// Generic (SKB) mode.
    Generic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum TxArg {
    Sendmmsg,
    Ring,
}

impl From<TxArg> for TxMode {
    fn from(t: TxArg) -> TxMode {
        match t {
            TxArg::Sendmmsg => TxMode::Sendmmsg,
            TxArg::Ring => TxMode::Ring,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum RxArg {
    Blocks,
    Frames,
}

impl From<RxArg> for RxMode {
    fn from(t: RxArg) -> RxMode {
        match t {
            RxArg::Blocks => RxMode::Blocks,
            RxArg::Frames => RxMode::Frames,
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// Backends to run (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "afpacket")]
    backend: Vec<Backend>,
    /// Frame sizes in bytes including FCS (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = vec![64usize, 1500])]
    size: Vec<usize>,
    /// Measured seconds per row (after 0.5 s of warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// AF_PACKET transmit paths to measure (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "sendmmsg")]
    tx_mode: Vec<TxArg>,
    /// AF_PACKET receive rings to measure (comma-separated): blocks (TPACKET_V3), frames (V2).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "blocks")]
    rx_mode: Vec<RxArg>,
    /// Frames per batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// CPU the forwarder is pinned to (default: the last one). Generator and sink share another.
    #[arg(long)]
    cpu: Option<usize>,
    /// Also measure `tcpreplay --topspeed` into the same veth (as a generator for the AF_PACKET
    /// forwarder) and report its own rate.
    #[arg(long)]
    tcpreplay: bool,
    /// Keep the pcap files written for tcpreplay in this directory (default: a temporary one).
    #[arg(long)]
    pcap_dir: Option<std::path::PathBuf>,
    /// Run a one-node ScaleBricks engine (GPT + cuckoo FIB + GTP-U encapsulation) between the
    /// veths instead of the plain forwarder: `a` is its inet port, `b` its ran port.
    #[arg(long)]
    engine: bool,
    /// Tunnels in the engine's GPT and FIB (`--engine`).
    #[arg(long, default_value_t = 1_000_000)]
    engine_flows: usize,
    /// Distinct frames the generator cycles through with `--engine` (UEs drawn uniformly from
    /// the tunnels).
    #[arg(long, default_value_t = 1 << 16)]
    engine_frames: usize,
    /// Seed of the engine's tunnels, tables and the generator's choice of UEs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directions of the `--engine` rows (comma-separated): downlink (user frames in at `a`,
    /// `a` is the node's inet port, `b` its ran port) and uplink (G-PDUs in at `a`, `a` is the
    /// node's ran port, `b` its inet port). `--size` is the user frame's size both ways.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "downlink")]
    direction: Vec<Direction>,
    /// XDP attachment mode of `--backend xdp-fast` (native falls back to generic on failure).
    #[arg(long, value_enum, default_value = "native")]
    xdp_mode: XdpModeArg,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Frames leave `b` this much longer with `--engine` (outer IPv4 20 + UDP 8 + GTP-U 8).
const TUNNEL_OVERHEAD: usize = 36;
/// The generator's source MAC.
const GEN_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x10];
/// The sink's MAC as the engine's `ran` peer (the sink is promiscuous).
const SINK_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x20];

/// What the engine of `--engine` did in one row.
#[derive(Serialize, Clone, Debug)]
struct EngineRow {
    flows: usize,
    generator_frames: usize,
    gpt_bytes: u64,
    fib_entries: usize,
    fib_bytes: usize,
    /// Frames the engine emitted for the fabric (none expected with one node).
    fabric_out: u64,
    /// Frames the engine dropped, over the whole row (warm-up included), by reason.
    dropped: u64,
    drops: std::collections::BTreeMap<String, u64>,
}

/// What the fast path did in one row.
#[derive(Serialize, Clone, Debug)]
struct FastPathRow {
    /// `native` or `generic` (the mode that ran).
    xdp_mode: &'static str,
    /// Why native mode was not used, when it was asked for and failed.
    native_error: Option<String>,
    /// Seconds the `napi/a-N` thread ran (`sb_inet`, the redirect into `s0`'s ring).
    napi_thread_s: f64,
    /// Busy seconds of the forwarding CPU (/proc/stat, every task on it).
    fwd_cpu_busy_s: f64,
    /// sink frames / fwd_cpu_busy_s.
    pps_per_busy_cpu: f64,
    /// Frames the generator handed to the kernel over the row (dropped ones included).
    generator_runs: u64,
    /// The program's counters over the measured interval (nonzero ones).
    counters: std::collections::BTreeMap<String, u64>,
    /// Frames passed to the slow path over the whole row (warm-up included).
    slow_path: u64,
    /// Bytes per frame the sink received (the encapsulated size).
    sink_frame_bytes: f64,
}

/// The tables of the one-node engine, built once per invocation.
struct EngineTables {
    tunnels: Vec<Tunnel>,
    /// The GPT as built (the fast path's maps are filled from it).
    #[cfg_attr(not(feature = "fastpath"), allow(dead_code))]
    setsep: sb_setsep::SetSep,
    gpt: sb_engine::Gpt,
    seed: u64,
    frames: usize,
}

impl EngineTables {
    fn build(args: &Args) -> Result<EngineTables> {
        ensure!(args.engine_flows >= 1, "--engine-flows must be at least 1");
        ensure!(
            args.engine_frames >= 1,
            "--engine-frames must be at least 1"
        );
        // IPv4 UEs only (the generator's frames are IPv4), from 16.0.0.0/4 as `bench node`.
        let tunnels = cluster::generate_tunnels_in(
            std::net::Ipv4Addr::new(16, 0, 0, 0),
            4,
            args.engine_flows,
            1,
            args.seed,
            0,
        );
        let setsep = cluster::build_gpt(&tunnels, 1, args.seed, 0)?;
        let gpt = sb_engine::Gpt::from(setsep.clone());
        Ok(EngineTables {
            tunnels,
            setsep,
            gpt,
            seed: args.seed,
            frames: args.engine_frames,
        })
    }

    /// A fresh engine (its own FIB and uplink table, every tunnel) whose port at `a` has MAC
    /// `a_mac` and at `b` `b_mac`: downlink, `a` is its `inet` and `b` its `ran`; uplink the
    /// other way round. The generator is the peer at `a`, the sink at `b`.
    fn engine(
        &self,
        dir: Direction,
        a_mac: [u8; 6],
        b_mac: [u8; 6],
        batch: usize,
    ) -> Result<Engine<Lte>> {
        let fib = cluster::build_cuckoo_fib(Arch::ScaleBricks, &self.tunnels, 0, 1, self.seed)?;
        let at_a = PortAddr {
            mac: a_mac,
            peer_mac: GEN_MAC,
            ip: None,
        };
        let at_b = PortAddr {
            mac: b_mac,
            peer_mac: SINK_MAC,
            ip: None,
        };
        let (inet, ran) = match dir {
            Direction::Downlink => (at_a, at_b),
            Direction::Uplink => (at_b, at_a),
        };
        let cfg = NodeConfig {
            arch: Arch::ScaleBricks,
            node: 0,
            fabric_macs: vec![cluster::sim_mac(PortId::Fabric, 0, false)],
            inet,
            ran,
            seed: self.seed,
        };
        let app = Lte::new(
            LteConfig {
                ran_addrs: vec![cluster::sim_ran_addr(0)],
                ran_mtu: 1500,
                icmp_src: cluster::sim_ran_addr(0),
                icmp_src6: sb_engine::lte::default_icmp_src6(0),
            },
            Lte::uplink_table(&self.tunnels, self.seed)?,
        );
        Ok(Engine::new(
            cfg,
            Some(self.gpt.clone()),
            Box::new(fib),
            app,
            batch,
        )?)
    }

    /// The generator's frames, `frame_bytes` long: downlink, user frames to UEs of the
    /// tunnels, drawn uniformly; uplink, the G-PDUs of such tunnels (outer source the
    /// eNodeB, destination the node's ran address, the uplink TEID) carrying a user frame of
    /// `frame_bytes - 36` bytes from the UE to a server (the frame that leaves `b`).
    fn frames(&self, dir: Direction, dst_mac: [u8; 6], frame_bytes: usize) -> Vec<Vec<u8>> {
        use rand::{Rng, SeedableRng};
        use sb_wire::{EthernetAddress, GtpuTunnel, OuterIp};
        let mut rng = rand::rngs::StdRng::seed_from_u64(self.seed ^ 0xf4a3e5);
        (0..self.frames)
            .map(|i| {
                let t = &self.tunnels[rng.gen_range(0..self.tunnels.len())];
                let std::net::IpAddr::V4(ue) = t.ue else {
                    unreachable!("IPv4 tunnels only")
                };
                match dir {
                    Direction::Downlink => {
                        frames::udp_frame_to(dst_mac, GEN_MAC, frame_bytes, i as u16, ue.octets())
                    }
                    Direction::Uplink => {
                        let user = frames::udp_frame_between(
                            SINK_MAC,
                            GEN_MAC,
                            frame_bytes - TUNNEL_OVERHEAD,
                            i as u16,
                            ue.octets(),
                            [198, 19, 0, 1],
                        );
                        let tun = GtpuTunnel::new(
                            EthernetAddress(GEN_MAC),
                            EthernetAddress(dst_mac),
                            OuterIp::V4 {
                                src: t.enb,
                                dst: cluster::sim_ran_addr(0),
                            },
                            t.uplink_teid(),
                        );
                        let mut f = vec![0u8; frame_bytes];
                        let n = tun
                            .encap_into(&user[14..], &mut f)
                            .expect("a G-PDU fits its buffer");
                        debug_assert_eq!(n, frame_bytes);
                        f
                    }
                }
            })
            .collect()
    }
}

#[derive(Serialize, Clone, Debug)]
struct Row {
    /// `forward` (frames unchanged) or `engine` (`--engine`).
    mode: &'static str,
    /// `downlink` or `uplink` with `--engine`; null when forwarding frames unchanged.
    direction: Option<Direction>,
    backend: Backend,
    tx_mode: Option<&'static str>,
    rx_mode: Option<&'static str>,
    generator: &'static str,
    size: usize,
    /// Bytes of the frames the generator sends (uplink: the user frame + 36).
    frame_bytes: usize,
    /// Bytes of the frames leaving on `b` (downlink: frame_bytes + 36, uplink: - 36).
    out_frame_bytes: usize,
    batch: usize,
    seconds: f64,
    forwarded: u64,
    pps: f64,
    fwd_cpu: usize,
    /// Forwarding thread utime + stime from /proc/self/task/TID/stat (clock ticks).
    fwd_thread_cpu_s: f64,
    /// Softirq time of the pinned CPU from /proc/stat.
    ksoftirqd_cpu_s: f64,
    cpu_softirq_s: f64,
    /// forwarded / (fwd_thread_cpu_s + cpu_softirq_s): the headline number.
    pps_per_core: f64,
    /// Forwarding thread run time from /proc/self/task/TID/schedstat (ns clock).
    fwd_thread_runtime_s: f64,
    /// forwarded / (fwd_thread_runtime_s + ksoftirqd_cpu_s).
    pps_per_core_sched: f64,
    generated: u64,
    sink_received: u64,
    fwd_rx_dropped: u64,
    fwd_tx_dropped: u64,
    engine: Option<EngineRow>,
    /// `--backend xdp-fast` only.
    fastpath: Option<FastPathRow>,
}

#[derive(Serialize, Debug)]
struct TcpreplayRow {
    size: usize,
    frame_bytes: usize,
    packets: u64,
    seconds: f64,
    pps: f64,
    cpu_s: f64,
    pps_per_core: f64,
    forwarder: Row,
}

#[derive(Serialize)]
struct Report {
    bench: &'static str,
    kernel: String,
    cpus: usize,
    rows: Vec<Row>,
    tcpreplay: Vec<TcpreplayRow>,
}

/// The three namespaces and two veth pairs.
struct Lab {
    gen: Netns,
    fwd: Netns,
    sink: Netns,
}

impl Lab {
    fn create() -> Result<Lab> {
        // Unique per lab: tests make labs in parallel threads of one process.
        static LABS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let id = format!(
            "{}-{}",
            std::process::id(),
            LABS.fetch_add(1, Ordering::Relaxed)
        );
        let gen = Netns::create(&format!("sbio-{id}-gen"))?;
        let fwd = Netns::create(&format!("sbio-{id}-fwd"))?;
        let sink = Netns::create(&format!("sbio-{id}-sink"))?;
        netns::veth_pair(gen.name(), "g0", fwd.name(), "a")?;
        netns::veth_pair(fwd.name(), "b", sink.name(), "s0")?;
        Ok(Lab { gen, fwd, sink })
    }
}

struct Ports {
    gen: Box<dyn Port>,
    fwd_a: Box<dyn Port>,
    fwd_b: Box<dyn Port>,
    sink: Box<dyn Port>,
    dst_mac: [u8; 6],
    /// MAC of `b` (the engine's `ran` port).
    ran_mac: [u8; 6],
}

fn afp(ns: &Netns, dev: &str, cfg: &AfPacketConfig) -> Result<Box<dyn Port>> {
    let p = ns.run(|| AfPacketPort::open(dev, cfg))??;
    Ok(Box::new(p))
}

fn open_ports(lab: &Lab, backend: Backend, tx: TxMode, rx: RxMode) -> Result<Ports> {
    let gen_cfg = AfPacketConfig {
        tx_only: true,
        ..AfPacketConfig::default()
    };
    let sink_cfg = AfPacketConfig {
        promiscuous: true,
        ..AfPacketConfig::default()
    };
    let dst_mac = lab.fwd.run(|| afpacket::mac_address("a"))??;
    let ran_mac = lab.fwd.run(|| afpacket::mac_address("b"))??;
    let (fwd_a, fwd_b): (Box<dyn Port>, Box<dyn Port>) = match backend {
        Backend::Afpacket => {
            let cfg = AfPacketConfig {
                promiscuous: true,
                tx_mode: tx,
                rx_mode: rx,
                ..AfPacketConfig::default()
            };
            (afp(&lab.fwd, "a", &cfg)?, afp(&lab.fwd, "b", &cfg)?)
        }
        Backend::Xdp => open_xdp(lab)?,
        Backend::Memory => bail!("memory backend has no veth ports"),
        Backend::XdpFast => bail!("xdp-fast opens no ports"),
    };
    Ok(Ports {
        gen: afp(&lab.gen, "g0", &gen_cfg)?,
        fwd_a,
        fwd_b,
        sink: afp(&lab.sink, "s0", &sink_cfg)?,
        dst_mac,
        ran_mac,
    })
}

#[cfg(feature = "xdp")]
fn open_xdp(lab: &Lab) -> Result<(Box<dyn Port>, Box<dyn Port>)> {
    use sb_io::xdp::{XdpConfig, XdpPort};
    let cfg = XdpConfig::default();
    let a = lab.fwd.run(|| XdpPort::open("a", &cfg))??;
    let b = lab.fwd.run(|| XdpPort::open("b", &cfg))??;
    Ok((Box::new(a), Box::new(b)))
}

#[cfg(not(feature = "xdp"))]
fn open_xdp(_lab: &Lab) -> Result<(Box<dyn Port>, Box<dyn Port>)> {
    bail!("the xdp backend needs scalebricks-bench built with `-p sb-bench --features xdp`")
}

fn memory_ports() -> Ports {
    let (gen, fwd_a) = memory::pair("in", 4096);
    let (fwd_b, sink) = memory::pair("out", 4096);
    Ports {
        gen: Box::new(gen),
        fwd_a: Box::new(fwd_a),
        fwd_b: Box::new(fwd_b),
        sink: Box::new(sink),
        dst_mac: [0x02, 0, 0, 0, 0, 1],
        ran_mac: [0x02, 0, 0, 0, 0, 2],
    }
}

/// Counters sampled at the start and end of the measured interval.
#[derive(Clone, Copy)]
struct Sample {
    at: Instant,
    forwarded: u64,
    thread: u64,
    thread_ns: u64,
    ksoftirqd: u64,
    ksoftirqd_ns: u64,
    softirq: u64,
}

fn sample(fwd: &AtomicU64, tid: i32, ksoft: Option<i32>, cpu_id: usize) -> Sample {
    Sample {
        at: Instant::now(),
        forwarded: fwd.load(Ordering::Relaxed),
        thread: cpu::thread_ticks(tid).unwrap_or(0),
        thread_ns: cpu::thread_runtime_ns(tid).unwrap_or(0),
        ksoftirqd: ksoft.and_then(cpu::pid_ticks).unwrap_or(0),
        ksoftirqd_ns: ksoft.and_then(cpu::pid_runtime_ns).unwrap_or(0),
        softirq: cpu::cpu_times(cpu_id).map(|t| t.softirq).unwrap_or(0),
    }
}

struct RunOut {
    row: Row,
}

/// What feeds the forwarder.
enum Feed {
    Builtin,
    /// tcpreplay on this pcap; returns (packets, seconds, pps, cpu seconds) through the slot.
    Tcpreplay(std::path::PathBuf, String),
}

/// A named thread (the name shows in `top -H` and `perf report --comm`).
fn spawn_named<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawning a benchmark thread")
}

fn pick_cpus(args: &Args) -> (usize, usize) {
    let n = cpu::online_cpus();
    let fwd = args.cpu.unwrap_or(n.saturating_sub(1));
    let other = if fwd == 0 && n > 1 { 1 } else { 0 };
    (fwd, other)
}

#[allow(clippy::too_many_arguments)]
fn run_one(
    ports: Ports,
    backend: Backend,
    modes: Option<(TxMode, RxMode)>,
    size: usize,
    args: &Args,
    feed: &Feed,
    tcpreplay_out: &mut Option<(u64, f64, f64, f64)>,
    tables: Option<(&EngineTables, Direction)>,
) -> Result<RunOut> {
    let (fwd_cpu, side_cpu) = pick_cpus(args);
    let (frame_bytes, out_frame_bytes) = frame_sizes(size, tables.map(|(_, d)| d));
    let Ports {
        mut gen,
        mut fwd_a,
        mut fwd_b,
        mut sink,
        dst_mac,
        ran_mac,
    } = ports;
    let batch_size = args.batch.max(1);
    let (templates, mut engine) = match tables {
        Some((t, dir)) => (
            t.frames(dir, dst_mac, frame_bytes),
            Some(t.engine(dir, dst_mac, ran_mac, batch_size)?),
        ),
        None => (
            (0..64)
                .map(|i| frames::udp_frame(dst_mac, GEN_MAC, frame_bytes, i))
                .collect(),
            None,
        ),
    };
    let engine_info = engine.as_ref().map(|e| {
        (
            e.gpt().map_or(0, |g| g.stats().bytes),
            e.fib().len(),
            e.fib().memory_bytes(),
        )
    });
    let stop = Arc::new(AtomicBool::new(false));
    let forwarded = Arc::new(AtomicU64::new(0));
    let tid = Arc::new(AtomicI32::new(0));

    let sink_t = {
        let stop = stop.clone();
        spawn_named("sb-sink", move || {
            let _ = cpu::pin_current_thread(side_cpu);
            let mut b = PacketBatch::new(256);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                b.clear();
                let k = sink.rx_batch(&mut b);
                if k == 0 {
                    let _ = sink.wait_rx(Duration::from_millis(10));
                }
                n += k as u64;
            }
            n
        })
    };
    // Frames arrive at `a`: the engine's inet port downlink, its ran port uplink.
    let in_port = match tables.map(|(_, d)| d) {
        Some(Direction::Uplink) => PortId::Ran,
        _ => PortId::Inet,
    };
    let fwd_t = {
        let (stop, forwarded, tid) = (stop.clone(), forwarded.clone(), tid.clone());
        spawn_named("sb-fwd", move || {
            let pinned = cpu::pin_current_thread(fwd_cpu);
            tid.store(cpu::current_tid(), Ordering::Release);
            let mut b = PacketBatch::new(batch_size);
            let mut total = 0u64;
            let mut fabric_out = 0u64;
            match engine.as_mut() {
                None => {
                    while !stop.load(Ordering::Relaxed) {
                        if fwd_a.rx_batch(&mut b) == 0 {
                            let _ = fwd_a.wait_rx(Duration::from_millis(10));
                            continue;
                        }
                        total += fwd_b.tx_batch(&mut b) as u64;
                        forwarded.store(total, Ordering::Relaxed);
                    }
                }
                Some(engine) => {
                    // One worker of a node, as sb-node's `drive` runs it, on the inet port only.
                    let mut out = Outputs::new(batch_size, b.buf_size());
                    while !stop.load(Ordering::Relaxed) {
                        if fwd_a.rx_batch(&mut b) == 0 {
                            let _ = fwd_a.wait_rx(Duration::from_millis(10));
                            continue;
                        }
                        engine.process(in_port, &mut b, &mut out);
                        b.clear();
                        // Forwarded frames leave the other port (at `b`), answers (ICMP errors,
                        // echo responses) the port they came in at (`a`).
                        let (to_b, to_a) = match in_port {
                            PortId::Ran => (&mut out.inet, &mut out.ran),
                            _ => (&mut out.ran, &mut out.inet),
                        };
                        if !to_b.is_empty() {
                            total += fwd_b.tx_batch(to_b) as u64;
                            to_b.clear();
                        }
                        if !to_a.is_empty() {
                            fwd_a.tx_batch(to_a);
                            to_a.clear();
                        }
                        fabric_out += out.fabric.len() as u64;
                        out.fabric.clear();
                        forwarded.store(total, Ordering::Relaxed);
                    }
                }
            }
            let counters = engine.map(|e| (e.counters().clone(), fabric_out));
            (pinned, fwd_a.stats(), fwd_b.stats(), counters)
        })
    };
    let gen_t = match feed {
        Feed::Builtin => {
            let stop = stop.clone();
            Some(spawn_named("sb-gen", move || {
                let _ = cpu::pin_current_thread(side_cpu);
                let mut b = PacketBatch::new(64);
                while !stop.load(Ordering::Relaxed) {
                    for chunk in templates.chunks(64) {
                        for t in chunk {
                            b.push(t);
                        }
                        gen.tx_batch(&mut b);
                        b.clear();
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                }
                gen.stats().tx_packets
            }))
        }
        Feed::Tcpreplay(..) => None,
    };
    while tid.load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let tid = tid.load(Ordering::Acquire);
    let ksoft = cpu::ksoftirqd_pid(fwd_cpu);

    let warmup = Duration::from_millis(500);
    let measure = Duration::from_secs_f64(args.seconds.max(0.1));
    let (s0, s1) = match feed {
        Feed::Builtin => {
            std::thread::sleep(warmup);
            let s0 = sample(&forwarded, tid, ksoft, fwd_cpu);
            std::thread::sleep(measure);
            (s0, sample(&forwarded, tid, ksoft, fwd_cpu))
        }
        Feed::Tcpreplay(pcap, gen_ns) => {
            // tcpreplay runs for warm-up + measured time; we sample inside its run.
            let secs = (warmup + measure + Duration::from_millis(500))
                .as_secs()
                .max(2);
            let before_cpu = cpu::children_cpu_seconds();
            let child = std::process::Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    gen_ns,
                    "taskset",
                    "-c",
                    &side_cpu.to_string(),
                    "tcpreplay",
                ])
                .args([
                    "--topspeed",
                    "-K",
                    "--loop=0",
                    &format!("--duration={secs}"),
                    "-i",
                    "g0",
                ])
                .arg(pcap)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .context("running tcpreplay (install it: scripts/bench-io.sh does)")?;
            std::thread::sleep(warmup + Duration::from_millis(300));
            let s0 = sample(&forwarded, tid, ksoft, fwd_cpu);
            std::thread::sleep(measure);
            let s1 = sample(&forwarded, tid, ksoft, fwd_cpu);
            let out = child.wait_with_output()?;
            let cpu_s = cpu::children_cpu_seconds() - before_cpu;
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            let (packets, seconds) = parse_tcpreplay(&text)
                .with_context(|| format!("could not read tcpreplay's output:\n{text}"))?;
            *tcpreplay_out = Some((packets, seconds, packets as f64 / seconds.max(1e-9), cpu_s));
            (s0, s1)
        }
    };
    stop.store(true, Ordering::Relaxed);
    let generated = gen_t.map(|t| t.join().unwrap_or(0)).unwrap_or(0);
    let (pinned, a_stats, b_stats, counters) = fwd_t
        .join()
        .map_err(|_| anyhow::anyhow!("forwarder panicked"))?;
    pinned.context("pinning the forwarder")?;
    let sink_received = sink_t.join().unwrap_or(0);

    let hz = cpu::ticks_per_sec() as f64;
    let seconds = (s1.at - s0.at).as_secs_f64();
    let fwd_n = s1.forwarded - s0.forwarded;
    let thread_stat_s = (s1.thread - s0.thread) as f64 / hz;
    let ksoft_stat_s = (s1.ksoftirqd - s0.ksoftirqd) as f64 / hz;
    // Prefer the scheduler's nanosecond clock; fall back to the tick-sampled stat times.
    let thread_s = match s1.thread_ns - s0.thread_ns {
        0 => thread_stat_s,
        ns => ns as f64 * 1e-9,
    };
    let ksoft_s = if s1.ksoftirqd_ns > 0 {
        (s1.ksoftirqd_ns - s0.ksoftirqd_ns) as f64 * 1e-9
    } else {
        ksoft_stat_s
    };
    let softirq_s = (s1.softirq - s0.softirq) as f64 / hz;
    let core_s = thread_stat_s + softirq_s;
    let sched_s = thread_s + ksoft_s;
    let per = |secs: f64| if secs > 0.0 { fwd_n as f64 / secs } else { 0.0 };
    Ok(RunOut {
        row: Row {
            mode: if tables.is_some() {
                "engine"
            } else {
                "forward"
            },
            direction: tables.map(|(_, d)| d),
            backend,
            tx_mode: modes.map(|(t, _)| {
                if t == TxMode::Ring {
                    "ring"
                } else {
                    "sendmmsg"
                }
            }),
            rx_mode: modes.map(|(_, r)| {
                if r == RxMode::Frames {
                    "frames"
                } else {
                    "blocks"
                }
            }),
            generator: match feed {
                Feed::Builtin => "builtin",
                Feed::Tcpreplay(..) => "tcpreplay",
            },
            size,
            frame_bytes,
            out_frame_bytes,
            batch: batch_size,
            seconds,
            forwarded: fwd_n,
            pps: fwd_n as f64 / seconds,
            fwd_cpu,
            fwd_thread_cpu_s: thread_stat_s,
            fwd_thread_runtime_s: thread_s,
            ksoftirqd_cpu_s: ksoft_s,
            cpu_softirq_s: softirq_s,
            pps_per_core_sched: per(sched_s),
            pps_per_core: per(core_s),
            generated,
            sink_received,
            fwd_rx_dropped: a_stats.rx_dropped,
            fwd_tx_dropped: b_stats.tx_dropped,
            engine: match (tables, counters, engine_info) {
                (
                    Some((t, _)),
                    Some((c, fabric_out)),
                    Some((gpt_bytes, fib_entries, fib_bytes)),
                ) => Some(EngineRow {
                    flows: t.tunnels.len(),
                    generator_frames: t.frames,
                    gpt_bytes,
                    fib_entries,
                    fib_bytes,
                    fabric_out,
                    dropped: c.ports.iter().map(|p| p.dropped).sum(),
                    drops: c.drops_by_reason(),
                }),
                _ => None,
            },
            fastpath: None,
        },
    })
}

/// The bytes of the generator's frames and of the frames leaving `b` for `--size size`
/// (with the 4-byte FCS veth does not carry, at least 60): the user frame is `size - 4`, cut
/// with `--engine` so that a G-PDU carrying it fits the 1500-byte MTU; downlink it is sent and
/// leaves encapsulated, uplink it is sent encapsulated and leaves as it is.
fn frame_sizes(size: usize, dir: Option<Direction>) -> (usize, usize) {
    let user = size.saturating_sub(4).max(60);
    match dir {
        None => (user, user),
        Some(d) => {
            let user = user.min(14 + 1500 - TUNNEL_OVERHEAD);
            match d {
                Direction::Downlink => (user, user + TUNNEL_OVERHEAD),
                Direction::Uplink => (user + TUNNEL_OVERHEAD, user),
            }
        }
    }
}

/// Reads "Actual: N packets (B bytes) sent in S seconds" from tcpreplay's summary.
fn parse_tcpreplay(text: &str) -> Option<(u64, f64)> {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("Actual:"))?;
    let w: Vec<&str> = line.split_whitespace().collect();
    let packets = w.get(1)?.parse().ok()?;
    let i = w.iter().position(|x| *x == "in")?;
    let secs = w.get(i + 1)?.parse().ok()?;
    Some((packets, secs))
}

pub fn run(args: Args) -> Result<()> {
    let is_root = sb_io::netns::is_root();
    let needs_lab = args.tcpreplay || args.backend.iter().any(|b| *b != Backend::Memory);
    if needs_lab && !is_root {
        bail!("bench io needs root (network namespaces, AF_PACKET)");
    }
    let lab = if needs_lab {
        Some(Lab::create()?)
    } else {
        None
    };
    if args.engine && args.tcpreplay {
        bail!("--tcpreplay replays plain frames: run it without --engine");
    }
    if !args.engine && args.direction.contains(&Direction::Uplink) {
        bail!("--direction uplink runs the engine's uplink: run it with --engine");
    }
    // The engine rows' directions; one plain-forwarding pass without --engine.
    let directions: Vec<Option<Direction>> = if args.engine {
        args.direction.iter().map(|d| Some(*d)).collect()
    } else {
        vec![None]
    };
    let tables = if args.engine {
        if !args.json {
            eprintln!(
                "building the engine's tables: {} tunnels",
                args.engine_flows
            );
        }
        Some(EngineTables::build(&args)?)
    } else {
        None
    };
    let mut rows = Vec::new();
    let mut tcp_rows = Vec::new();
    for &backend in &args.backend {
        let modes: Vec<Option<(TxMode, RxMode)>> = if backend == Backend::Afpacket {
            let mut v = Vec::new();
            for rx in &args.rx_mode {
                for tx in &args.tx_mode {
                    v.push(Some(((*tx).into(), (*rx).into())));
                }
            }
            v
        } else {
            vec![None]
        };
        if backend == Backend::XdpFast {
            let (Some(_), Some(tables)) = (&lab, &tables) else {
                bail!("--backend xdp-fast measures the fast path: run it with --engine");
            };
            for &dir in &args.direction {
                for &size in &args.size {
                    // Veths of its own per row: a veth's NAPI thread outlives turning threaded
                    // NAPI off, so a second row on the same veths would find no new thread to pin.
                    let row_lab = Lab::create()?;
                    let row = fastpath_row(&row_lab, tables, dir, size, &args)?;
                    drop(row_lab);
                    if !args.json {
                        print_row(&row);
                    }
                    rows.push(row);
                }
            }
            continue;
        }
        for (mode, &dir) in modes
            .iter()
            .flat_map(|m| directions.iter().map(move |d| (*m, d)))
        {
            for &size in &args.size {
                let ports = match (backend, &lab) {
                    (Backend::Memory, _) => memory_ports(),
                    (_, Some(lab)) => {
                        let (tx, rx) = mode.unwrap_or((TxMode::Sendmmsg, RxMode::Blocks));
                        open_ports(lab, backend, tx, rx)?
                    }
                    (_, None) => unreachable!("lab exists for kernel backends"),
                };
                let out = run_one(
                    ports,
                    backend,
                    mode,
                    size,
                    &args,
                    &Feed::Builtin,
                    &mut None,
                    tables.as_ref().zip(dir),
                )?;
                if !args.json {
                    print_row(&out.row);
                }
                rows.push(out.row);
            }
        }
    }
    if args.tcpreplay {
        let lab = lab.as_ref().expect("lab exists with --tcpreplay");
        let (dir, keep) = match &args.pcap_dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (d.clone(), true)
            }
            None => (tempfile_dir()?, false),
        };
        for &size in &args.size {
            let frame_bytes = size.saturating_sub(4).max(60);
            let dst = lab.fwd.run(|| afpacket::mac_address("a"))??;
            let frames: Vec<Vec<u8>> = (0..64)
                .map(|i| frames::udp_frame(dst, [0x02, 0, 0, 0, 0, 0x10], frame_bytes, i))
                .collect();
            let pcap = dir.join(format!("udp-{size}.pcap"));
            frames::write_pcap(&pcap, &frames)?;
            let ports = open_ports(lab, Backend::Afpacket, TxMode::Sendmmsg, RxMode::Blocks)?;
            let mut tr = None;
            let feed = Feed::Tcpreplay(pcap, lab.gen.name().to_string());
            let out = run_one(
                ports,
                Backend::Afpacket,
                Some((TxMode::Sendmmsg, RxMode::Blocks)),
                size,
                &args,
                &feed,
                &mut tr,
                None,
            )?;
            let (packets, seconds, pps, cpu_s) = tr.unwrap_or((0, 0.0, 0.0, 0.0));
            let row = TcpreplayRow {
                size,
                frame_bytes,
                packets,
                seconds,
                pps,
                cpu_s,
                pps_per_core: if cpu_s > 0.0 {
                    packets as f64 / cpu_s
                } else {
                    0.0
                },
                forwarder: out.row,
            };
            if !args.json {
                println!(
                    "tcpreplay --topspeed size {size}: {pps:.0} pps sent ({:.0} pps/core of tcpreplay); forwarder fed by it: {:.0} pps, {:.0} pps/core",
                    row.pps_per_core, row.forwarder.pps, row.forwarder.pps_per_core
                );
            }
            tcp_rows.push(row);
        }
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    drop(lab);
    if args.json {
        let report = Report {
            bench: "io",
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            cpus: cpu::online_cpus(),
            rows,
            tcpreplay: tcp_rows,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(())
}

#[cfg(feature = "fastpath")]
fn fastpath_row(
    lab: &Lab,
    tables: &EngineTables,
    dir: Direction,
    size: usize,
    args: &Args,
) -> Result<Row> {
    fastpath::run_row(lab, tables, dir, size, args)
}

#[cfg(not(feature = "fastpath"))]
fn fastpath_row(_: &Lab, _: &EngineTables, _: Direction, _: usize, _: &Args) -> Result<Row> {
    bail!("--backend xdp-fast needs scalebricks-bench built with `-p sb-bench --features fastpath` (clang: scripts/install-bpf-tools.sh)")
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("sbio-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn print_row(r: &Row) {
    println!(
        "{:<7} {:<8} {:<9} {:<9} {:<7} size {:>4}: {:>9.0} pps, {:>9.0} pps/core (thread {:.2} s + cpu softirq {:.2} s over {:.2} s; sched: {:.0} pps/core), rx drop {}, tx drop {}",
        r.mode,
        r.direction.map_or("-", |d| match d {
            Direction::Downlink => "downlink",
            Direction::Uplink => "uplink",
        }),
        format!("{:?}", r.backend).to_lowercase(),
        r.tx_mode.unwrap_or("-"),
        r.rx_mode.unwrap_or("-"),
        r.size,
        r.pps,
        r.pps_per_core,
        r.fwd_thread_cpu_s,
        r.cpu_softirq_s,
        r.seconds,
        r.pps_per_core_sched,
        r.fwd_rx_dropped,
        r.fwd_tx_dropped
    );
    if let Some(f) = &r.fastpath {
        println!(
            "        xdp {} mode: napi thread {:.2} s, fwd CPU busy {:.2} s ({:.0} pps/busy CPU), out {:.0} B/frame, generator {} frames, slow path {}, counters {:?}",
            f.xdp_mode,
            f.napi_thread_s,
            f.fwd_cpu_busy_s,
            f.pps_per_busy_cpu,
            f.sink_frame_bytes,
            f.generator_runs,
            f.slow_path,
            f.counters
        );
    }
    if let Some(e) = &r.engine {
        println!(
            "        engine: {} tunnels, GPT {:.2} MB, FIB {} entries {:.1} MB, frames out {} B, dropped {} {:?}, to fabric {}",
            e.flows,
            e.gpt_bytes as f64 / 1e6,
            e.fib_entries,
            e.fib_bytes as f64 / 1e6,
            r.out_frame_bytes,
            e.dropped,
            e.drops,
            e.fabric_out
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_backend_forwards_and_reports() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::parse_from([
            "x",
            "--backend",
            "memory",
            "--size",
            "64",
            "--seconds",
            "0.2",
        ]);
        let mut tr = None;
        let out = run_one(
            memory_ports(),
            Backend::Memory,
            None,
            64,
            &cli.args,
            &Feed::Builtin,
            &mut tr,
            None,
        )
        .unwrap();
        assert!(out.row.forwarded > 0);
        // The scheduler's run time counts nanoseconds; utime + stime count 10 ms ticks, of
        // which a 0.2 s run on a loaded machine may get none (then the headline is 0, as its
        // docs say: no CPU time measured), which made this test fail under load.
        assert!(out.row.pps_per_core_sched > 0.0);
        assert!(out.row.pps_per_core > 0.0 || out.row.fwd_thread_cpu_s == 0.0);
        assert_eq!(out.row.frame_bytes, 60);
        assert!(out.row.sink_received > 0);
    }

    #[test]
    fn memory_backend_runs_the_engine_and_encapsulates() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::parse_from([
            "x",
            "--backend",
            "memory",
            "--seconds",
            "0.2",
            "--engine",
            "--engine-flows",
            "5000",
            "--engine-frames",
            "300",
        ]);
        let tables = EngineTables::build(&cli.args).unwrap();
        for (dir, size, sent, out) in [
            (Direction::Downlink, 64, 60, 96),
            (Direction::Downlink, 1500, 1478, 1514),
            (Direction::Uplink, 64, 96, 60),
            (Direction::Uplink, 1500, 1514, 1478),
        ] {
            let out_row = run_one(
                memory_ports(),
                Backend::Memory,
                None,
                size,
                &cli.args,
                &Feed::Builtin,
                &mut None,
                Some((&tables, dir)),
            )
            .unwrap();
            let r = &out_row.row;
            assert_eq!((r.mode, r.direction), ("engine", Some(dir)));
            assert!(r.forwarded > 0 && r.sink_received > 0, "{r:?}");
            assert_eq!((r.frame_bytes, r.out_frame_bytes), (sent, out));
            let e = r.engine.as_ref().unwrap();
            // Every UE the generator sends to is in the tables: no drop, nothing to the fabric.
            assert_eq!((e.dropped, e.fabric_out), (0, 0), "{e:?}");
            assert_eq!((e.flows, e.fib_entries), (5000, 5000));
            assert!(e.gpt_bytes > 0);
        }
    }

    #[test]
    fn engine_frames_are_encapsulated_for_their_tunnel() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::parse_from(["x", "--engine-flows", "1000", "--engine-frames", "64"]);
        let t = EngineTables::build(&cli.args).unwrap();
        let frames = t.frames(Direction::Downlink, [2, 0, 0, 0, 0, 1], 60);
        let mut e = t
            .engine(
                Direction::Downlink,
                [2, 0, 0, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
                64,
            )
            .unwrap();
        let mut b = PacketBatch::new(64);
        for f in &frames {
            b.push(f);
        }
        let mut out = Outputs::new(64, b.buf_size());
        e.process(PortId::Inet, &mut b, &mut out);
        assert_eq!(out.ran.len(), 64);
        for (i, f) in out.ran.iter().enumerate() {
            assert_eq!(f.len(), 96);
            // Outer destination: the eNodeB of the tunnel whose UE the inner frame is sent to.
            let ue = &frames[i][30..34];
            let tun = t
                .tunnels
                .iter()
                .find(|x| x.ue == std::net::IpAddr::from([ue[0], ue[1], ue[2], ue[3]]))
                .unwrap();
            assert_eq!(&f[30..34], &tun.enb.octets());
            assert_eq!(&f[14 + 36 + 16..14 + 36 + 20], ue);
            assert_eq!(u32::from_be_bytes([f[46], f[47], f[48], f[49]]), tun.teid);
        }
    }

    #[test]
    fn uplink_frames_are_decapsulated_for_their_tunnel() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let cli = Cli::parse_from(["x", "--engine-flows", "1000", "--engine-frames", "64"]);
        let t = EngineTables::build(&cli.args).unwrap();
        let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let frames = t.frames(Direction::Uplink, a, 96);
        let mut e = t.engine(Direction::Uplink, a, b, 64).unwrap();
        let mut rx = PacketBatch::new(64);
        for f in &frames {
            assert_eq!(f.len(), 96);
            rx.push(f);
        }
        let mut out = Outputs::new(64, rx.buf_size());
        e.process(PortId::Ran, &mut rx, &mut out);
        assert_eq!((out.inet.len(), out.ran.len()), (64, 0));
        for (i, f) in out.inet.iter().enumerate() {
            // The user frame as the UE sent it, out of `b` (the engine's inet) to the sink.
            let sent = &frames[i];
            assert_eq!(f.len(), 60);
            assert_eq!(&f[..6], &SINK_MAC);
            assert_eq!(&f[6..12], &b);
            // The inner packet unchanged but for its TTL, one less, and its checksum.
            let (inner, sent_inner) = (&f[14..], &sent[14 + 36..]);
            assert_eq!(inner.len(), sent_inner.len());
            assert_eq!(inner[8] + 1, sent_inner[8]);
            for (j, (x, y)) in inner.iter().zip(sent_inner).enumerate() {
                assert!(matches!(j, 8 | 10 | 11) || x == y, "byte {j} of frame {i}");
            }
            let mut sum = 0u32;
            for c in inner[..20].chunks(2) {
                sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            assert_eq!(sum, 0xffff, "IPv4 header checksum of frame {i}");
            let ue = &f[26..30];
            let tun = t
                .tunnels
                .iter()
                .find(|x| x.ue == std::net::IpAddr::from([ue[0], ue[1], ue[2], ue[3]]))
                .unwrap();
            assert_eq!(&sent[26..30], &tun.enb.octets());
            assert_eq!(
                u32::from_be_bytes([sent[46], sent[47], sent[48], sent[49]]),
                tun.uplink_teid()
            );
        }
    }

    #[test]
    fn afpacket_backend_forwards_over_veth() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        if !sb_io::netns::root_or_skip("afpacket_backend_forwards_over_veth") {
            return;
        }
        let cli = Cli::parse_from(["x", "--size", "64", "--seconds", "0.3"]);
        let lab = Lab::create().unwrap();
        for (mode, rx) in [
            (TxMode::Sendmmsg, RxMode::Blocks),
            (TxMode::Ring, RxMode::Frames),
        ] {
            let ports = open_ports(&lab, Backend::Afpacket, mode, rx).unwrap();
            let out = run_one(
                ports,
                Backend::Afpacket,
                Some((mode, rx)),
                64,
                &cli.args,
                &Feed::Builtin,
                &mut None,
                None,
            )
            .unwrap();
            assert!(out.row.forwarded > 0, "{mode:?}: nothing forwarded");
            assert!(out.row.sink_received > 0, "{mode:?}: sink saw nothing");
            assert!(out.row.generated >= out.row.sink_received);
        }
        let name = lab.gen.name().to_string();
        drop(lab);
        assert!(!std::path::Path::new(&format!("/var/run/netns/{name}")).exists());
    }

    /// The fast path's row through real veths (root, feature `fastpath`; CI is root): every
    /// frame the generator sends to a tunnel's UE is encapsulated by `sb_inet`, none takes the
    /// slow path, and the sink receives the 96-byte frames.
    #[cfg(feature = "fastpath")]
    #[test]
    fn xdp_fast_row_forwards_over_veth() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        if !sb_io::netns::root_or_skip("xdp_fast_row_forwards_over_veth") {
            return;
        }
        let cli = Cli::parse_from([
            "x",
            "--engine",
            "--engine-flows",
            "3000",
            "--engine-frames",
            "500",
            "--seconds",
            "0.5",
        ]);
        let tables = EngineTables::build(&cli.args).unwrap();
        for (dir, out_bytes, rx, tx) in [
            (Direction::Downlink, 96.0, "rx_inet", "to_ran"),
            (Direction::Uplink, 60.0, "rx_ran", "up_to_inet"),
        ] {
            // A lab per row, as `run` makes them.
            let lab = Lab::create().unwrap();
            let r = fastpath::run_row(&lab, &tables, dir, 64, &cli.args).unwrap();
            let f = r.fastpath.as_ref().unwrap();
            assert_eq!(r.direction, Some(dir));
            assert!(r.forwarded > 0 && r.pps_per_core > 0.0, "{r:?}");
            assert_eq!(f.slow_path, 0, "{f:?}");
            // Frames and bytes are read a moment apart: the mean is right within a frame's worth.
            assert!((f.sink_frame_bytes - out_bytes).abs() < 0.5, "{f:?}");
            // Counters are read one by one under traffic: a NAPI batch or two apart, more on a
            // loaded machine where the reading thread waits between two reads (5%).
            let c = |k: &str| f.counters.get(k).copied().unwrap_or(0);
            assert!(c(rx).abs_diff(c(tx)) <= 512.max(c(rx) / 20), "{f:?}");
            assert!(c(tx) > 0, "{f:?}");
            assert!(f.xdp_mode == "native" || f.native_error.is_some(), "{f:?}");
        }
    }

    #[test]
    fn parses_tcpreplay_summary() {
        let t = "Actual: 1234567 packets (79012288 bytes) sent in 3.02 seconds\nRated: 26159035.4 Bps, 209.27 Mbps, 408651.99 pps\n";
        assert_eq!(parse_tcpreplay(t), Some((1234567, 3.02)));
        assert_eq!(parse_tcpreplay("nothing"), None);
    }
}
