//! `scalebricks bench node`: one node's work per core under each architecture and FIB backend,
//! the paper's Figures 8 and 9 (`--bubble`).
//!
//! The node is node 0 of an `--nodes`-node cluster holding `--fib-entries` tunnels in all. Its
//! engine runs on the calling thread, on in-memory batches (no packet I/O: `bench io` measures
//! that), over two kinds of work in the proportions a symmetric cluster gives it:
//! - **external**: 64-byte downstream frames arriving on `inet`, UE addresses drawn uniformly
//!   (or Zipf) from every tunnel of the cluster;
//! - **internal**: what the other nodes send it over the fabric for every external packet it
//!   receives, as they would build them: ScaleBricks, `(N-1)/N` lookup frames of flows it
//!   handles; full duplication, `(N-1)/N` encapsulated frames of flows whose `ran` it serves;
//!   hash partitioning, `(N-1)/N` lookup frames of keys it holds plus `(N-1)/N` encapsulated
//!   frames of flows it serves that another node looked up.
//!
//! `mpps_per_core` is external packets per second of engine time (its `process` calls, timed
//! one batch at a time), the per-node throughput of a cluster whose nodes run one such core.
//! With `--bubble` a thread on another core streams over a buffer of half the last-level
//! cache while the engine runs (the paper's "half L3" experiment, Figure 9).
//!
//! `--policy none,qer-urr` (the default) measures every row twice in one run, on the same keys
//! and frames: without policies, and with a QER (an MBR of 100 Gbit/s each way: never
//! limiting) and a URR (usage counted) on every session, the node's policy slots attached to
//! its engines as a node's control thread attaches them (`lte::local_entry`). The two are
//! measured in alternating rounds (`--rounds`, 20), so that a noisy machine disturbs both alike;
//! the `qer-urr` row's `rate_vs_none` is its rate over the plain row's.
//!
//! `--layout per-port` runs the paper's node instead: one core per port. Two engines on the
//! same tables run at the same time on pinned cores 0 and 1, the external one on the `inet`
//! frames and the internal one on the `fabric` frames. Each core's engine time per external
//! packet of the node (the internal core's scaled by the fabric frames an external packet
//! brings) gives `external_core_mpps` and `internal_core_mpps`; `mpps_per_node` is the rate of
//! the busier of the two, and `mpps_per_core` the two cores' time added up.

use anyhow::{bail, ensure, Context};
use rand::{rngs::StdRng, Rng, SeedableRng};
use rand_distr::Distribution;
use sb_engine::cluster::{self, sim_mac, sim_ran_addr};
use sb_engine::lte::{self, Lte, Tunnel, VALUE_BYTES};
use sb_engine::policy::{Policies, Policy};
use sb_engine::{fabric, indirection_node, Arch, Engine, Fib, Outputs, PortId};
use sb_io::PacketBatch;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Architectures (comma separated): scalebricks, full-dup, hash-part.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "scalebricks,full-dup,hash-part"
    )]
    arch: Vec<String>,
    /// FIB backends (comma separated): cuckoo, rte_hash (needs `--features dpdk`).
    #[arg(long, value_delimiter = ',', default_value = "cuckoo")]
    fib: Vec<String>,
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 4)]
    nodes: u16,
    /// FIB entries (tunnels) in the whole cluster; a comma-separated list runs each.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    fib_entries: Vec<usize>,
    /// Zipf exponent of the flows' popularity (uniform when absent).
    #[arg(long)]
    zipf: Option<f64>,
    /// Run a cache-polluting thread on another core (half the last-level cache).
    #[arg(long)]
    bubble: bool,
    /// Frames per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Distinct prebuilt external frames (the sequence repeats after them).
    #[arg(long, default_value_t = 1 << 21)]
    pool: usize,
    /// Seconds of engine time per row.
    #[arg(long, default_value_t = 2.0)]
    secs: f64,
    /// Cores of the node: `one-core` runs the external (`inet`) and internal (`fabric`) work
    /// on one core, interleaved; `per-port` is the paper's node, one core per port: the two
    /// run at the same time on their own pinned cores (0 and 1), each with its own engine on
    /// the shared tables.
    #[arg(long, default_value = "one-core", value_parser = ["one-core", "per-port"])]
    layout: String,
    /// Seed of the tunnels and the traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Policies on every session (comma separated): `none`, `qer-urr` (an MBR of 100 Gbit/s
    /// each way, usage counted); each is a row of its own, measured in the same run.
    #[arg(long, value_delimiter = ',', default_value = "none,qer-urr", value_parser = ["none", "qer-urr"])]
    policy: Vec<String>,
    /// Rounds each row's `--secs` is split into, the policies' rows taking turns (short
    /// rounds: a noisy machine disturbs both alike).
    #[arg(long, default_value_t = 20)]
    rounds: u32,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

const FRAME: usize = 64;

/// A `FRAME`-byte downstream frame (IPv4; IPv6 ones are longer) to `ue` entering node 0.
fn downstream_frame(ue: IpAddr) -> Vec<u8> {
    let headers = match ue {
        IpAddr::V4(_) => 14 + 20 + 8,
        IpAddr::V6(_) => 14 + 40 + 8,
    };
    let payload = [0u8; FRAME];
    cluster::sim_downstream_frame(ue, 0, 64, &payload[..FRAME.saturating_sub(headers).max(4)])
}

/// A frame from node `from` to node `to` over the fabric: the downstream frame with the shim.
fn lookup_frame(t: &Tunnel, from: u16, to: u16) -> Vec<u8> {
    with_shim(
        &downstream_frame(t.ue),
        fabric::Kind::Lookup,
        1,
        from,
        from,
        to,
    )
}

/// The encapsulated frame node `from` sends to the egress node.
fn transmit_frame(t: &Tunnel, hops: u8, ingress: u16, from: u16) -> Vec<u8> {
    let f = downstream_frame(t.ue);
    let mut ip = f[14..].to_vec();
    ip[8] -= 1; // the TTL the looking-up node decremented (checksum not needed: not re-parsed)
    let tun = sb_wire::GtpuTunnel::new(
        sb_wire::EthernetAddress([0; 6]),
        sb_wire::EthernetAddress([0; 6]),
        sb_wire::OuterIp::V4 {
            src: sim_ran_addr(t.node),
            dst: t.enb,
        },
        t.teid,
    );
    let mut g = vec![0u8; tun.header_len() + ip.len()];
    tun.encap_into(&ip, &mut g).expect("fits");
    with_shim(&g, fabric::Kind::Transmit, hops, ingress, from, t.node)
}

fn with_shim(f: &[u8], kind: fabric::Kind, hops: u8, ingress: u16, from: u16, to: u16) -> Vec<u8> {
    let mut buf = vec![0u8; fabric::SHIM_LEN];
    buf.extend_from_slice(f);
    let s = fabric::push(
        &mut buf,
        fabric::SHIM_LEN,
        f.len(),
        sim_mac(PortId::Fabric, to, false),
        sim_mac(PortId::Fabric, from, false),
        fabric::Shim {
            kind,
            hops,
            ingress,
        },
    )
    .expect("room for the shim");
    buf[s..].to_vec()
}

/// Draws tunnel indices uniformly or by Zipf popularity (hot ranks spread by a permutation).
struct Draw {
    zipf: Option<(rand_distr::Zipf<f64>, Vec<u32>)>,
    n: usize,
}

impl Draw {
    fn new(n: usize, zipf: Option<f64>, rng: &mut StdRng) -> anyhow::Result<Draw> {
        let zipf = match zipf {
            Some(a) => {
                let mut perm: Vec<u32> = (0..n as u32).collect();
                for i in (1..n).rev() {
                    perm.swap(i, rng.gen_range(0..=i));
                }
                Some((
                    rand_distr::Zipf::new(n as u64, a).context("zipf exponent")?,
                    perm,
                ))
            }
            None => None,
        };
        Ok(Draw { zipf, n })
    }
    fn next(&self, rng: &mut StdRng) -> usize {
        match &self.zipf {
            Some((z, perm)) => perm[(z.sample(rng) as usize - 1).min(self.n - 1)] as usize,
            None => rng.gen_range(0..self.n),
        }
    }
}

struct Work {
    external: Vec<Vec<u8>>,
    internal: Vec<Vec<u8>>,
}

fn workload(arch: Arch, tunnels: &[Tunnel], a: &Args, seed: u64) -> anyhow::Result<Work> {
    let n = a.nodes;
    let mut rng = StdRng::seed_from_u64(seed);
    let draw = Draw::new(tunnels.len(), a.zipf, &mut rng)?;
    let external: Vec<Vec<u8>> = (0..a.pool)
        .map(|_| downstream_frame(tunnels[draw.next(&mut rng)].ue))
        .collect();
    // Internal frames: (N-1)/N per external packet of each kind.
    let per_kind = a.pool * usize::from(n - 1) / usize::from(n);
    let ind = |t: &Tunnel| indirection_node(sb_common::hash128(&t.key(), a.seed), n);
    let mut internal = Vec::new();
    let pick = |want: &dyn Fn(&Tunnel) -> bool,
                make: &dyn Fn(&Tunnel, &mut StdRng) -> Vec<u8>,
                rng: &mut StdRng| {
        let mut out = Vec::with_capacity(per_kind);
        while out.len() < per_kind {
            let t = &tunnels[draw.next(rng)];
            if want(t) {
                out.push(make(t, rng));
            }
        }
        out
    };
    let other = |rng: &mut StdRng| rng.gen_range(1..n);
    match arch {
        Arch::ScaleBricks => {
            internal = pick(
                &|t| t.node == 0,
                &|t, r| lookup_frame(t, other(r), 0),
                &mut rng,
            );
        }
        Arch::FullDup => {
            internal = pick(
                &|t| t.node == 0,
                &|t, r| {
                    let from = other(r);
                    transmit_frame(t, 1, from, from)
                },
                &mut rng,
            );
        }
        Arch::HashPart => {
            let lookups = pick(
                &|t| ind(t) == 0,
                &|t, r| lookup_frame(t, other(r), 0),
                &mut rng,
            );
            let transmits = pick(
                &|t| t.node == 0 && ind(t) != 0,
                &|t, r| {
                    let k = ind(t);
                    let ingress = r.gen_range(0..n);
                    transmit_frame(t, 1 + u8::from(ingress != k), ingress, k)
                },
                &mut rng,
            );
            // Interleave the two kinds.
            for (l, t) in lookups.into_iter().zip(transmits) {
                internal.push(l);
                internal.push(t);
            }
        }
    }
    Ok(Work { external, internal })
}

/// The node's FIB and `extra` more handles on the same table (one per engine), each tunnel's
/// value made by `value`.
fn make_fib(
    kind: &str,
    arch: Arch,
    tunnels: &[Tunnel],
    nodes: u16,
    seed: u64,
    extra: usize,
    value: &dyn Fn(&Tunnel) -> [u8; VALUE_BYTES],
) -> anyhow::Result<Vec<Box<dyn Fib>>> {
    match kind {
        "cuckoo" => {
            let f = cluster::build_cuckoo_fib_with(arch, tunnels, 0, nodes, seed, value)?;
            let mut v: Vec<Box<dyn Fib>> = (0..extra)
                .map(|_| Box::new(f.handle()) as Box<dyn Fib>)
                .collect();
            v.insert(0, Box::new(f));
            Ok(v)
        }
        #[cfg(feature = "dpdk")]
        "rte_hash" => {
            let slice = cluster::fib_slice(arch, tunnels, 0, nodes, seed);
            // The EAL was started once by `run`, sized for the largest table.
            let kv: Vec<([u8; 16], [u8; sb_engine::lte::VALUE_BYTES])> = slice
                .iter()
                .map(|&i| (tunnels[i].key(), value(&tunnels[i])))
                .collect();
            let f = sb_engine::RteHashFib::build(
                16,
                sb_engine::lte::VALUE_BYTES,
                kv.iter().map(|(k, v)| (&k[..], &v[..])),
            )?;
            let mut v: Vec<Box<dyn Fib>> = Vec::new();
            for _ in 0..extra {
                v.push(Box::new(f.handle()?));
            }
            v.insert(0, Box::new(f));
            Ok(v)
        }
        #[cfg(not(feature = "dpdk"))]
        "rte_hash" => bail!("the rte_hash FIB needs a build with --features dpdk"),
        other => bail!("unknown FIB backend {other:?} (cuckoo, rte_hash)"),
    }
}

/// Streams over `bytes` of memory until `stop` (the cache bubble).
fn bubble(bytes: usize, stop: &AtomicBool) -> u64 {
    let buf = vec![1u64; bytes / 8];
    let mut sum = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for chunk in buf.chunks(8) {
            sum = sum.wrapping_add(chunk[0]);
        }
        std::hint::black_box(&buf);
    }
    sum
}

fn llc_bytes() -> usize {
    for idx in 0..8 {
        let base = format!("/sys/devices/system/cpu/cpu0/cache/index{idx}");
        let level = std::fs::read_to_string(format!("{base}/level")).unwrap_or_default();
        if level.trim() == "3" {
            let s = std::fs::read_to_string(format!("{base}/size")).unwrap_or_default();
            let s = s.trim();
            if let Some(k) = s.strip_suffix('K') {
                return k.parse::<usize>().unwrap_or(8192) * 1024;
            }
            if let Some(m) = s.strip_suffix('M') {
                return m.parse::<usize>().unwrap_or(8) << 20;
            }
        }
    }
    8 << 20
}

struct Row {
    mpps: f64,
    /// Per-port layout: the node's rate, bounded by the busier core; and each core's rate in
    /// external packets per second.
    per_port: Option<PerPort>,
    fib_entries: usize,
    fib_bytes: usize,
    gpt_bytes: usize,
    mean_crossings_sent: f64,
    external: u64,
    internal: u64,
}

#[derive(Clone, Copy)]
struct PerPort {
    mpps_per_node: f64,
    external_core_mpps: f64,
    internal_core_mpps: f64,
}

fn check_drops(engine: &Engine<Lte>) -> anyhow::Result<()> {
    let c = engine.counters();
    let dropped: u64 = c.ports.iter().map(|p| p.dropped).sum();
    ensure!(
        dropped == 0,
        "the engine dropped {dropped} of the benchmark's packets: {:?}",
        c.drops_by_reason()
    );
    Ok(())
}

fn fabric_sends(engine: &Engine<Lte>) -> u64 {
    let c = engine.counters();
    c.ports[PortId::Inet as usize].to_fabric + c.ports[PortId::Fabric as usize].to_fabric
}

/// Pushes `batch` frames of `frames` into `rx` from `*next` on (cycling), then does what a
/// worker's loop does around them (the clock, the engine's work between batches) and runs
/// them through `engine` as arriving on `port`, and empties the outputs: the time of that
/// loop.
fn timed_batch(
    engine: &mut Engine<Lte>,
    port: PortId,
    frames: &[Vec<u8>],
    next: &mut usize,
    rx: &mut PacketBatch,
    out: &mut Outputs,
) -> Duration {
    for _ in 0..rx.capacity() {
        rx.push(&frames[*next]);
        *next = (*next + 1) % frames.len();
    }
    let t = Instant::now();
    engine.set_clock(clock_ns());
    engine.poll(out);
    engine.process(port, rx, out);
    let busy = t.elapsed();
    out.inet.clear();
    out.ran.clear();
    out.fabric.clear();
    busy
}

/// The workers' clock: nanoseconds since the first call.
fn clock_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Packets and engine time of one engine over rounds.
#[derive(Clone, Copy, Default)]
struct Sample {
    frames: u64,
    busy: Duration,
}

impl Sample {
    fn add(&mut self, o: Sample) {
        self.frames += o.frames;
        self.busy += o.busy;
    }
}

/// Runs the frames of `frames` arriving on `port` through `engine` (from `*next` on,
/// cycling) until `secs` of engine time, on a thread pinned to `cpu`.
fn one_port(
    engine: &mut Engine<Lte>,
    port: PortId,
    frames: &[Vec<u8>],
    next: &mut usize,
    a: &Args,
    secs: f64,
    cpu: usize,
) -> Sample {
    let _ = sb_io::cpu::pin_current_thread(cpu);
    let mut rx = PacketBatch::new(a.batch);
    let mut out = Outputs::new(a.batch, rx.buf_size());
    let mut count = 0u64;
    let mut busy = Duration::ZERO;
    let deadline = Duration::from_secs_f64(secs);
    let wall = Instant::now();
    while busy < deadline && wall.elapsed() < deadline * 20 {
        busy += timed_batch(engine, port, frames, next, &mut rx, &mut out);
        count += a.batch as u64;
    }
    Sample {
        frames: count,
        busy,
    }
}

/// One engine (or, per port, two) measured over rounds, where it left off.
struct Runner {
    policy: String,
    first: Engine<Lte>,
    second: Option<Engine<Lte>>,
    ext: Sample,
    int: Sample,
    next_ext: usize,
    next_int: usize,
}

/// The paper's node: the external core runs the `inet` frames while the internal core runs
/// the `fabric` frames, at the same time, for `secs` of engine time each.
fn round_per_port(r: &mut Runner, w: &Work, a: &Args, secs: f64) {
    let int = r.second.as_mut().expect("a second engine per port");
    let (ext, ni) = (&mut r.first, &mut r.next_int);
    let ne = &mut r.next_ext;
    let (e, i) = std::thread::scope(|s| {
        let ht = s.spawn(|| one_port(int, PortId::Fabric, &w.internal, ni, a, secs, 1));
        let he = one_port(ext, PortId::Inet, &w.external, ne, a, secs, 0);
        (he, ht.join().expect("internal core thread"))
    });
    r.ext.add(e);
    r.int.add(i);
}

/// One core doing both: external batches, and the internal batches they bring, interleaved,
/// for `secs` of engine time.
fn round_one_core(r: &mut Runner, w: &Work, a: &Args, secs: f64) {
    let engine = &mut r.first;
    let mut rx = PacketBatch::new(a.batch);
    let mut out = Outputs::new(a.batch, rx.buf_size());
    let ratio = w.internal.len() as f64 / w.external.len() as f64;
    let mut busy = Duration::ZERO;
    let deadline = Duration::from_secs_f64(secs);
    let wall = Instant::now();
    while busy < deadline && wall.elapsed() < deadline * 20 {
        busy += timed_batch(
            engine,
            PortId::Inet,
            &w.external,
            &mut r.next_ext,
            &mut rx,
            &mut out,
        );
        r.ext.frames += a.batch as u64;
        while (r.int.frames as f64) < r.ext.frames as f64 * ratio {
            busy += timed_batch(
                engine,
                PortId::Fabric,
                &w.internal,
                &mut r.next_int,
                &mut rx,
                &mut out,
            );
            r.int.frames += a.batch as u64;
        }
    }
    r.ext.busy += busy;
}

/// The row of a runner's rounds. Per port: each core's cost per external packet of the node
/// (the internal core's scaled by the internal frames an external packet brings) gives the
/// node's rate, bounded by the busier core.
fn row_of(r: &Runner, w: &Work) -> anyhow::Result<Row> {
    check_drops(&r.first)?;
    let engine = &r.first;
    let (e, i) = (r.ext.frames, r.int.frames);
    let base = |mpps, per_port, sends| Row {
        mpps,
        per_port,
        fib_entries: engine.fib().len(),
        fib_bytes: engine.fib().memory_bytes(),
        gpt_bytes: engine.gpt().map_or(0, |g| g.stats().bytes as usize),
        mean_crossings_sent: sends,
        external: e,
        internal: i,
    };
    let Some(int) = &r.second else {
        let sends = fabric_sends(engine) as f64 / e as f64;
        return Ok(base(e as f64 / r.ext.busy.as_secs_f64() / 1e6, None, sends));
    };
    check_drops(int)?;
    let ratio = w.internal.len() as f64 / w.external.len() as f64;
    // Seconds of each core per external packet of the node.
    let ce = r.ext.busy.as_secs_f64() / e as f64;
    let ci = if ratio > 0.0 && i > 0 {
        r.int.busy.as_secs_f64() / i as f64 * ratio
    } else {
        0.0
    };
    let ext_sends = fabric_sends(engine) as f64 / e as f64;
    let int_sends = if i > 0 {
        fabric_sends(int) as f64 / i as f64 * ratio
    } else {
        0.0
    };
    Ok(base(
        1.0 / (ce + ci) / 1e6,
        Some(PerPort {
            mpps_per_node: 1.0 / ce.max(ci) / 1e6,
            external_core_mpps: 1.0 / ce / 1e6,
            internal_core_mpps: if ci > 0.0 {
                1.0 / ci / 1e6
            } else {
                f64::INFINITY
            },
        }),
        ext_sends + int_sends,
    ))
}

/// The policy of every session in `qer-urr` rows: a QER whose MBR never limits (100 Gbit/s
/// each way) and a URR counting usage.
fn bench_policy() -> Policy {
    Policy {
        dl_mbr_kbps: 100_000_000,
        ul_mbr_kbps: 100_000_000,
        count: true,
        ..Policy::default()
    }
}

/// The plain row's per-node rate of a configuration, if already in `rows`.
fn plain_node(rows: &[serde_json::Value], arch: Arch, fib: &str, entries: usize) -> Option<f64> {
    rows.iter()
        .find(|r| {
            r["arch"] == arch.label()
                && r["fib"] == fib
                && r["fib_entries"] == entries
                && r["policy"] == "none"
        })
        .and_then(|r| r["mpps_per_node"].as_f64())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    ensure!((2..=64).contains(&a.nodes), "--nodes must be 2 to 64");
    ensure!(a.batch >= 1 && a.batch <= 1024, "--batch must be 1 to 1024");
    ensure!(a.pool >= 1024, "--pool must be at least 1024");
    let archs: Vec<Arch> = a
        .arch
        .iter()
        .map(|s| s.parse().map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()?;
    #[cfg(feature = "dpdk")]
    if a.fib.iter().any(|f| f == "rte_hash") {
        // One EAL per process: size it for the largest table of the run (full duplication
        // holds every entry; about 112 bytes per slot with its key and RCU queues, plus the
        // 16-byte value and its 4-byte free-list entry, all in DPDK's heap; tables are freed
        // between rows).
        let max = a.fib_entries.iter().copied().max().unwrap_or(0) as u64;
        let mb = (((max * 10 / 9 + 64) * 132) >> 20) as u32 + 512;
        sb_peers::dpdk::eal_init(mb).context("DPDK EAL")?;
    }
    let per_port = a.layout == "per-port";
    let cpus = sb_io::cpu::online_cpus();
    ensure!(
        !per_port || cpus >= 2 + usize::from(a.bubble),
        "--layout per-port needs {} CPUs (one per port{}), this machine has {cpus}",
        2 + usize::from(a.bubble),
        if a.bubble { " and the bubble's" } else { "" }
    );
    let _ = sb_io::cpu::pin_current_thread(0);
    let stop = Arc::new(AtomicBool::new(false));
    let bubble_thread = if a.bubble {
        let bytes = llc_bytes() / 2;
        let s = stop.clone();
        Some((
            bytes,
            std::thread::spawn(move || {
                let _ = sb_io::cpu::pin_current_thread(if per_port { 2 } else { 1 });
                bubble(bytes, &s)
            }),
        ))
    } else {
        None
    };
    let mut rows = Vec::new();
    for &entries in &a.fib_entries {
        ensure!(entries >= 1000, "--fib-entries must be at least 1000");
        if !a.json {
            eprintln!("generating {entries} tunnels");
        }
        let tunnels = cluster::generate_tunnels_in(
            Ipv4Addr::new(16, 0, 0, 0),
            4,
            entries,
            a.nodes.into(),
            a.seed,
            0,
        );
        let mut gpt = None;
        for &arch in &archs {
            if arch == Arch::ScaleBricks && gpt.is_none() {
                gpt = Some(sb_engine::Gpt::from(cluster::build_gpt(
                    &tunnels,
                    a.nodes.into(),
                    a.seed,
                    0,
                )?));
            }
            let w = workload(arch, &tunnels, &a, a.seed + 1)?;
            for fib_kind in &a.fib {
                // Node 0 serves no upstream traffic here: an empty uplink table.
                let uplink = Lte::uplink_table(std::iter::empty(), a.seed)?;
                let g = if arch == Arch::ScaleBricks {
                    gpt.clone()
                } else {
                    None
                };
                let engine = |fib: Box<dyn Fib>| {
                    cluster::sim_engine(
                        arch,
                        0,
                        a.nodes,
                        a.seed,
                        g.clone(),
                        fib,
                        uplink.clone(),
                        a.batch,
                    )
                };
                let mut runners = Vec::new();
                for policy in &a.policy {
                    let cores = 1 + usize::from(per_port);
                    let slice = cluster::fib_slice(arch, &tunnels, 0, a.nodes, a.seed).len();
                    let policies = Arc::new(Policies::new(cores, slice.max(1)));
                    let with = policy == "qer-urr";
                    let value = |t: &Tunnel| -> [u8; VALUE_BYTES] {
                        if !with {
                            return t.value();
                        }
                        let t = Tunnel {
                            policy: bench_policy(),
                            ..*t
                        };
                        lte::local_entry(&policies, &t.key(), &t.value())
                            .expect("a slot for every session")
                            .value
                    };
                    let mut fibs = make_fib(
                        fib_kind,
                        arch,
                        &tunnels,
                        a.nodes,
                        a.seed,
                        usize::from(per_port),
                        &value,
                    )?
                    .into_iter();
                    let mut first = engine(fibs.next().context("a FIB")?)?;
                    first.app_mut().set_policies(policies.clone(), 0);
                    let second = if per_port {
                        let mut e = engine(fibs.next().context("a second FIB handle")?)?;
                        e.app_mut().set_policies(policies.clone(), 1);
                        Some(e)
                    } else {
                        None
                    };
                    runners.push(Runner {
                        policy: policy.clone(),
                        first,
                        second,
                        ext: Sample::default(),
                        int: Sample::default(),
                        next_ext: 0,
                        next_int: 0,
                    });
                }
                let rounds = a.rounds.max(1);
                let secs = a.secs / f64::from(rounds);
                for _ in 0..rounds {
                    for r in runners.iter_mut() {
                        if per_port {
                            round_per_port(r, &w, &a, secs);
                        } else {
                            round_one_core(r, &w, &a, secs);
                        }
                    }
                }
                let mut plain_mpps = None;
                for runner in &runners {
                    let r = row_of(runner, &w)?;
                    if runner.policy == "none" {
                        plain_mpps = Some(r.mpps);
                    }
                    let vs = plain_mpps
                        .filter(|_| runner.policy != "none")
                        .map(|p| r.mpps / p);
                    if !a.json {
                        let node = r.per_port.map_or(String::new(), |p| {
                            format!(
                                " ({:.2} Mpps per node of 2 cores: external core {:.2}, internal {:.2})",
                                p.mpps_per_node, p.external_core_mpps, p.internal_core_mpps
                            )
                        });
                        let vs_s = vs.map_or(String::new(), |x| format!(", {:.3} of none", x));
                        eprintln!(
                            "{:>11} {:>8} {:>9} entries {:>7}: {:6.2} Mpps per core{node}{vs_s}, FIB {} entries {:.1} MB, GPT {:.2} MB",
                            arch.label(), fib_kind, entries, runner.policy, r.mpps, r.fib_entries,
                            r.fib_bytes as f64 / 1e6, r.gpt_bytes as f64 / 1e6
                        );
                    }
                    let mut row = json!({
                        "arch": arch.label(),
                        "fib": fib_kind,
                        "fib_entries": entries,
                        "policy": runner.policy,
                        "mpps_per_core": r.mpps,
                        "fib_entries_per_node": r.fib_entries,
                        "fib_bytes_per_node": r.fib_bytes,
                        "gpt_bytes": r.gpt_bytes,
                        "fabric_sends_per_external_packet": r.mean_crossings_sent,
                        "external_packets": r.external,
                        "internal_packets": r.internal,
                    });
                    if let Some(x) = vs {
                        row["rate_vs_none"] = json!(x);
                    }
                    if runner.policy != "none" {
                        let u = runner
                            .first
                            .app()
                            .policies()
                            .map(|p| p.stats().slots)
                            .unwrap_or(0);
                        row["policy_slots"] = json!(u);
                    }
                    if let Some(p) = r.per_port {
                        row["mpps_per_node"] = json!(p.mpps_per_node);
                        row["external_core_mpps"] = json!(p.external_core_mpps);
                        row["internal_core_mpps"] = json!(p.internal_core_mpps);
                        let plain = plain_node(&rows, arch, fib_kind, entries);
                        if let Some(pl) = plain.filter(|_| vs.is_some()) {
                            row["node_rate_vs_none"] = json!(p.mpps_per_node / pl);
                        }
                    }
                    rows.push(row);
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let bubble_bytes = match bubble_thread {
        Some((b, h)) => {
            let _ = h.join();
            Some(b)
        }
        None => None,
    };
    let out = json!({
        "benchmark": "node",
        "nodes": a.nodes,
        "batch": a.batch,
        "frame_bytes": FRAME,
        "zipf": a.zipf,
        "layout": a.layout,
        "bubble_bytes": bubble_bytes,
        "machine": { "cpus": sb_io::cpu::online_cpus(), "llc_bytes": llc_bytes() },
        "results": rows,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!("{}", serde_json::to_string(&out)?);
    }
    Ok(())
}
