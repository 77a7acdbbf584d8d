//! The cluster in one process: N node threads, each running the engine with
//! [`drive`](crate::run::drive) over three in-memory ports (`inet` and `ran` are cables to the
//! caller, `fabric` a port of [`sb_io::memory::switch()`]), fed by a generator that keeps a window
//! of packets in flight and checked frame by frame as they leave the `ran` ports. `scalebricks
//! demo` runs it for each architecture on the same tunnels and [`Traffic`].

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sb_engine::cluster::{self, sim_mac, sim_ran_addr};
use sb_engine::lte::{Lte, Tunnel};
use sb_engine::{Arch, Counters, Fib, PortId};
use sb_io::memory::{self, MemPort};
use sb_io::{PacketBatch, Port};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Deliberate drops per run: packets to unknown UEs.
pub const UNKNOWN: usize = 1000;
/// Packets with TTL 1 in each run.
pub const TTL1: usize = 100;
/// Frames with a bad IPv4 header checksum in each run.
pub const MALFORMED: usize = 100;
/// Packets in flight at most (the cables' queues hold more, so nothing is lost for room).
const WINDOW: usize = 4096;

/// A downstream frame whose UDP payload starts with the packet's id (22 payload bytes).
fn frame(ue: IpAddr, id: u64, ttl: u8, ingress: u16) -> Vec<u8> {
    let mut p = [0u8; 22];
    p[..8].copy_from_slice(&id.to_be_bytes());
    cluster::sim_downstream_frame(ue, ingress, ttl, &p)
}

/// The traffic of a run: the same for every architecture.
pub struct Traffic {
    /// (ingress node, frame, tunnel index or `None` for a deliberate drop), in sending order.
    packets: Vec<(u16, Vec<u8>, Option<usize>)>,
    ttl: Vec<u8>,
    /// Packet id -> position in `packets`.
    ids: Vec<u32>,
}

impl Traffic {
    /// Frames in the run (known flows and deliberate drops).
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }
}

/// `count` downstream packets to random known tunnels entering random nodes, with the
/// deliberate drops ([`UNKNOWN`], [`TTL1`], [`MALFORMED`]) mixed in; reproducible from `seed`.
pub fn traffic(tunnels: &[Tunnel], o: &Options, count: usize) -> Traffic {
    let a = o;
    let mut rng = StdRng::seed_from_u64(a.seed ^ 0xdead);
    let total = count + UNKNOWN + TTL1 + MALFORMED;
    let mut packets = Vec::with_capacity(total);
    let mut ttl = Vec::with_capacity(total);
    for id in 0..total as u64 {
        let ingress = rng.gen_range(0..a.nodes);
        let i = id as usize;
        let (f, t, known) = if i < count {
            let ti = rng.gen_range(0..tunnels.len());
            let t = rng.gen_range(2..=64);
            (frame(tunnels[ti].ue, id, t, ingress), t, Some(ti))
        } else if i < count + UNKNOWN {
            // 198.18.0.0/15 (benchmarking addresses): never a UE of the generated tunnels.
            let ue = Ipv4Addr::from(0xc612_0000 | rng.gen_range(0..0x1_0000u32));
            (frame(ue.into(), id, 64, ingress), 64, None)
        } else if i < count + UNKNOWN + TTL1 {
            let ti = rng.gen_range(0..tunnels.len());
            (frame(tunnels[ti].ue, id, 1, ingress), 1, None)
        } else {
            let ti = rng.gen_range(0..tunnels.len());
            let mut f = frame(tunnels[ti].ue, id, 64, ingress);
            f[14 + 10] ^= 0x5a; // IPv4 header checksum
            (f, 64, None)
        };
        packets.push((ingress, f, known));
        ttl.push(t);
    }
    // Deliberate drops mixed in among the rest.
    for i in (1..packets.len()).rev() {
        let j = rng.gen_range(0..=i);
        packets.swap(i, j);
        ttl.swap(i, j);
    }
    let mut ids = vec![0u32; packets.len()];
    for (slot, (_, f, _)) in packets.iter().enumerate() {
        let id = u64::from_be_bytes(f[42..50].try_into().expect("8 bytes")) as usize;
        ids[id] = slot as u32;
    }
    Traffic { packets, ttl, ids }
}

/// Checks one frame that left node `node`'s ran port; returns the packet id if it is right.
fn check(f: &[u8], node: u16, tunnels: &[Tunnel], t: &Traffic) -> Option<usize> {
    let ids = &t.ids;
    if f.get(..6)? != sim_mac(PortId::Ran, node, true)
        || f.get(6..12)? != sim_mac(PortId::Ran, node, false)
    {
        return None;
    }
    let d = sb_wire::decapsulate(f).ok()?;
    let p = sb_wire::parse_frame(f).ok()?;
    let id = u64::from_be_bytes(p.l4_payload()?.get(..8)?.try_into().ok()?) as usize;
    let slot = *ids.get(id)? as usize;
    let (_, sent, known) = t.packets.get(slot)?;
    let tn = &tunnels[(*known)?];
    if tn.node != node
        || d.teid != tn.teid
        || d.outer_dst != IpAddr::V4(tn.enb)
        || d.outer_src != IpAddr::V4(sim_ran_addr(node))
    {
        return None;
    }
    // Inner packet: what was sent, TTL one lower, header checksum still right.
    let ip = &sent[14..];
    let inner = d.inner;
    if inner.len() != ip.len() || inner[8].checked_add(1)? != ip[8] || inner[8] + 1 != t.ttl[slot] {
        return None;
    }
    if inner[..8] != ip[..8]
        || inner[12..] != ip[12..]
        || sb_wire::checksum::checksum(&inner[..20]) != 0
    {
        return None;
    }
    Some(slot)
}

/// What one architecture's run measured and found.
pub struct RunResult {
    /// Packets (known and deliberately dropped) per second of the node threads' CPU time.
    pub mpps_per_core: f64,
    /// The node threads' CPU time, seconds.
    pub node_cpu_s: f64,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Every node's counters summed.
    pub counters: Counters,
    /// FIB entries per node.
    pub fib_entries: Vec<usize>,
    /// FIB bytes per node.
    pub fib_bytes: Vec<usize>,
    /// GPT bytes (0 without a GPT).
    pub gpt_bytes: usize,
    /// Frames that came out wrong (wrong node, tunnel, bytes) or twice.
    pub wrong: u64,
    /// Packets of known flows that never came out.
    pub lost: u64,
    /// Whether every deliberate drop was counted by its reason and nothing else was dropped.
    pub expected_drops_ok: bool,
}

/// The cluster a run builds.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Nodes.
    pub nodes: u16,
    /// Seed of the tables and the traffic.
    pub seed: u64,
    /// Frames per batch.
    pub batch: usize,
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InprocError {
    /// A table could not be built.
    #[error("building the tables: {0}")]
    Tables(String),
    /// An engine refused its configuration.
    #[error(transparent)]
    Engine(#[from] sb_engine::EngineError),
}

/// Runs `t` through a cluster of `o.nodes` node threads running `arch` over in-memory ports
/// and an in-memory switch, and checks every frame that leaves a `ran` port. `progress` is
/// called with the number of frames sent so far.
pub fn run_arch(
    arch: Arch,
    tunnels: &[Tunnel],
    t: &Traffic,
    o: &Options,
    progress: &dyn Fn(u64),
) -> Result<RunResult, InprocError> {
    let a = o;
    let n = a.nodes;
    let tables = |e: &dyn std::fmt::Display| InprocError::Tables(e.to_string());
    let gpt = match arch {
        Arch::ScaleBricks => Some(sb_engine::Gpt::from(
            cluster::build_gpt(tunnels, n.into(), a.seed, 0).map_err(|e| tables(&e))?,
        )),
        _ => None,
    };
    let mut engines = Vec::new();
    let (mut fib_entries, mut fib_bytes) = (Vec::new(), Vec::new());
    for node in 0..n {
        let fib =
            cluster::build_cuckoo_fib(arch, tunnels, node, n, a.seed).map_err(|e| tables(&e))?;
        fib_entries.push(fib.len());
        fib_bytes.push(fib.memory_bytes());
        let uplink = Lte::uplink_table(tunnels.iter().filter(|x| x.node == node), a.seed)
            .map_err(|e| tables(&e))?;
        engines.push(cluster::sim_engine(
            arch,
            node,
            n,
            a.seed,
            gpt.clone(),
            Box::new(fib),
            uplink,
            a.batch,
        )?);
    }
    let gpt_bytes = gpt.as_ref().map_or(0, |g| g.stats().bytes as usize);
    // The cables and the switch.
    let fabric_macs: Vec<[u8; 6]> = (0..n).map(|k| sim_mac(PortId::Fabric, k, false)).collect();
    let (switch, fabric_ports) = memory::switch("fabric", &fabric_macs, 4 * WINDOW + 1024);
    let mut inet_out: Vec<MemPort> = Vec::new();
    let mut ran_in: Vec<MemPort> = Vec::new();
    let stop = AtomicBool::new(false);
    let published: Vec<Mutex<Counters>> = (0..n).map(|_| Mutex::new(Counters::default())).collect();
    let cpu_ns: Vec<Mutex<u64>> = (0..n).map(|_| Mutex::new(0)).collect();
    let mut node_ports = Vec::new();
    for (k, fp) in fabric_ports.into_iter().enumerate() {
        let (outside_inet, node_inet) = memory::pair(&format!("inet{k}"), WINDOW + 1024);
        let (node_ran, outside_ran) = memory::pair(&format!("ran{k}"), 2 * WINDOW + 1024);
        inet_out.push(outside_inet);
        ran_in.push(outside_ran);
        let ports: [Box<dyn Port>; 3] = [Box::new(node_inet), Box::new(node_ran), Box::new(fp)];
        node_ports.push(ports);
    }
    let t0 = Instant::now();
    let outcome = std::thread::scope(|s| -> (u64, u64) {
        for (k, (mut engine, mut ports)) in engines.into_iter().zip(node_ports).enumerate() {
            let (stop, published, cpu) = (&stop, &published[k], &cpu_ns[k]);
            let batch = a.batch;
            s.spawn(move || {
                let tid = sb_io::cpu::current_tid();
                crate::run::drive(&mut engine, &mut ports, batch, stop, published, None);
                *cpu.lock().unwrap_or_else(|e| e.into_inner()) =
                    sb_io::cpu::thread_runtime_ns(tid).unwrap_or(0);
            });
        }
        // Generator and checker: this thread.
        let known_total = t.packets.iter().filter(|p| p.2.is_some()).count() as u64;
        let mut seen = vec![false; t.packets.len()];
        let (mut sent_known, mut got, mut wrong) = (0u64, 0u64, 0u64);
        let mut tx: Vec<PacketBatch> = (0..n).map(|_| PacketBatch::new(a.batch)).collect();
        let mut rx = PacketBatch::new(256);
        let mut next = 0usize;
        let mut last_progress = Instant::now();
        let deadline = Duration::from_secs(30 + (t.packets.len() / 20_000) as u64);
        while got < known_total {
            // Send while the window allows.
            while next < t.packets.len() && (sent_known - got) < WINDOW as u64 {
                let (ingress, f, known) = &t.packets[next];
                let b = &mut tx[usize::from(*ingress)];
                b.push(f);
                if known.is_some() {
                    sent_known += 1;
                }
                if b.is_full() {
                    inet_out[usize::from(*ingress)].tx_batch(b);
                }
                next += 1;
            }
            if next == t.packets.len() {
                for (k, b) in tx.iter_mut().enumerate() {
                    if !b.is_empty() {
                        inet_out[k].tx_batch(b);
                    }
                }
            }
            // Receive and check.
            let mut any = false;
            for (k, port) in ran_in.iter_mut().enumerate() {
                while port.rx_batch(&mut rx) > 0 {
                    any = true;
                    for f in rx.iter() {
                        match check(f, k as u16, tunnels, t) {
                            Some(slot) if !seen[slot] => {
                                seen[slot] = true;
                                got += 1;
                            }
                            _ => wrong += 1,
                        }
                    }
                    rx.clear();
                }
            }
            if any {
                last_progress = Instant::now();
                progress(next as u64);
            } else if last_progress.elapsed() > Duration::from_secs(5) || t0.elapsed() > deadline {
                break;
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // Let the nodes finish what is in flight (deliberate drops are counted as they go).
        let quiet_since = Instant::now();
        loop {
            let dropped: u64 = published
                .iter()
                .map(|p| {
                    p.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .ports
                        .iter()
                        .map(|x| x.dropped)
                        .sum::<u64>()
                })
                .sum();
            if dropped >= (UNKNOWN + TTL1 + MALFORMED) as u64
                || quiet_since.elapsed() > Duration::from_secs(3)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        (got, wrong)
    });
    let wall_s = t0.elapsed().as_secs_f64();
    let (got, wrong) = outcome;
    let mut counters = Counters::default();
    for p in &published {
        counters.add(&p.lock().unwrap_or_else(|e| e.into_inner()));
    }
    let node_cpu_s: f64 = cpu_ns
        .iter()
        .map(|c| *c.lock().unwrap_or_else(|e| e.into_inner()) as f64)
        .sum::<f64>()
        / 1e9;
    let external = t.packets.len() as f64;
    let known_total = t.packets.iter().filter(|p| p.2.is_some()).count() as u64;
    let unknown = counters.dropped(sb_engine::Drop::UnknownFlow)
        + counters.dropped(sb_engine::Drop::FibMissAfterGpt);
    let expected_drops_ok = unknown == UNKNOWN as u64
        && counters.dropped(sb_engine::Drop::Ttl) == TTL1 as u64
        && counters.dropped(sb_engine::Drop::Malformed(sb_wire::WireError::ALL[0]))
            == MALFORMED as u64
        && counters.ports.iter().map(|p| p.dropped).sum::<u64>()
            == (UNKNOWN + TTL1 + MALFORMED) as u64;
    let _ = switch.stats();
    Ok(RunResult {
        mpps_per_core: if node_cpu_s > 0.0 {
            external / node_cpu_s / 1e6
        } else {
            0.0
        },
        node_cpu_s,
        wall_s,
        counters,
        fib_entries,
        fib_bytes,
        gpt_bytes,
        wrong,
        lost: known_total - got,
        expected_drops_ok,
    })
}
