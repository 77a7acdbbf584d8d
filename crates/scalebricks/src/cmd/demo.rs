//! `scalebricks demo`: the main job until the cluster engine exists. It plays a ScaleBricks
//! cluster in one process, on generated flows, and checks every answer:
//!
//! 1. the RIB owner builds the Global Partition Table (SetSep) over every flow's UE address,
//!    mapping it to its handling node; each node gets a replica loaded from the serialized table;
//! 2. each node builds its partial FIB (cuckoo table) with only the flows it handles: the GTP-U
//!    tunnel (TEID, eNodeB address) of each;
//! 3. downstream packets (Ethernet/IPv4/UDP to a UE) enter random nodes; each ingress node parses
//!    the frame, looks the UE address up in its GPT replica in batches, sends the packet over the
//!    fabric at most once, and the handling node looks up its FIB and encapsulates in GTP-U;
//! 4. flows migrate between nodes: make before break (new FIB entry, GPT delta broadcast to the
//!    replicas, old FIB entry removed), and the replicas stay byte-identical to the owner's table.
//!
//! It prints what it measured and exits non-zero if any check failed.

use anyhow::{bail, ensure, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sb_cuckoo::{CuckooTable, Params};
use sb_setsep::{BuildOptions, Config, SetSep, Updatable};
use sb_wire::{
    parse_frame, EtherType, EthernetAddress, EthernetRepr, GtpuTunnel, Ipv4Repr, OuterIp,
    UdpChecksum, UdpRepr,
};
use serde_json::json;
use std::collections::HashSet;
use std::io::IsTerminal;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Nodes in the cluster (the GPT stores ceil(log2 nodes) bits per flow).
    #[arg(long, default_value_t = 4)]
    nodes: usize,
    /// Flows (FIB entries) in the whole cluster.
    #[arg(long, default_value_t = 1_000_000)]
    flows: usize,
    /// Downstream packets to push through the cluster.
    #[arg(long, default_value_t = 1_000_000)]
    packets: usize,
    /// Flows to migrate from one node to another.
    #[arg(long, default_value_t = 10_000)]
    migrate: usize,
    /// GPT build threads (0: all cores).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Seed of the generated flows and of the tables.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// FIB value of a flow: TEID (4 bytes, BE), eNodeB IPv4 address (4 bytes), QoS class (1 byte),
/// padding to 16 bytes.
const FIB_VALUE_BYTES: usize = 16;
const BATCH: usize = 32;
const HEADROOM: usize = 64;

fn fib_value(teid: u32, enb: Ipv4Addr, qci: u8) -> [u8; FIB_VALUE_BYTES] {
    let mut v = [0u8; FIB_VALUE_BYTES];
    v[..4].copy_from_slice(&teid.to_be_bytes());
    v[4..8].copy_from_slice(&enb.octets());
    v[8] = qci;
    v
}

struct Flow {
    ue: Ipv4Addr,
    node: u16,
    value: [u8; FIB_VALUE_BYTES],
}

pub fn run(args: Args) -> Result<()> {
    ensure!(
        (2..=1024).contains(&args.nodes),
        "--nodes must be 2 to 1024"
    );
    ensure!(args.flows >= 1, "--flows must be at least 1");
    ensure!(
        args.flows <= 64 << 20,
        "--flows above 64M needs more memory than this demo plans for"
    );
    let say = |s: String| {
        if !args.json {
            println!("{s}");
        }
    };
    let value_bits = (usize::BITS - (args.nodes - 1).leading_zeros()).max(1) as u8;
    let mut rng = StdRng::seed_from_u64(args.seed);

    // Flows: distinct UE addresses, each with a handling node and a tunnel.
    let mut seen = HashSet::with_capacity(args.flows);
    let mut flows = Vec::with_capacity(args.flows);
    while flows.len() < args.flows {
        let ue = Ipv4Addr::from(rng.gen::<u32>());
        if !seen.insert(ue) {
            continue;
        }
        let node = rng.gen_range(0..args.nodes) as u16;
        let enb = Ipv4Addr::new(192, 0, 2, rng.gen_range(1..=254));
        flows.push(Flow {
            ue,
            node,
            value: fib_value(rng.gen(), enb, rng.gen_range(1..=9)),
        });
    }
    drop(seen);
    say(format!(
        "scalebricks demo: {} nodes, {} flows, {} value bits per flow in the GPT",
        args.nodes, args.flows, value_bits
    ));

    // 1. The GPT, built by the RIB owner and replicated to every node.
    let keys: Vec<[u8; 4]> = flows.iter().map(|f| f.ue.octets()).collect();
    let key_refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let values: Vec<u16> = flows.iter().map(|f| f.node).collect();
    let opts = BuildOptions {
        config: Config::C16_8,
        value_bits,
        threads: args.threads,
        seed: args.seed,
        ..BuildOptions::default()
    };
    let t0 = Instant::now();
    let mut owner = Updatable::build(&key_refs, &values, &opts).context("building the GPT")?;
    let build_s = t0.elapsed().as_secs_f64();
    let image = owner.table().to_bytes();
    let mut replicas: Vec<SetSep> = (0..args.nodes)
        .map(|_| SetSep::from_bytes(&image))
        .collect::<Result<_, _>>()
        .context("loading a GPT replica")?;
    let stats = owner.table().stats();
    say(format!(
        "GPT: built in {:.2} s ({:.2} M flows/s), {:.3} bits/flow, {} bytes, {} fallback flows, pages {}",
        build_s,
        args.flows as f64 / build_s / 1e6,
        stats.bits_per_key,
        stats.bytes,
        stats.fallback_keys,
        stats.page_info.label()
    ));

    // 2. Each node's partial FIB holds only its own flows.
    let per_node = args.flows / args.nodes + 1;
    let mut fibs: Vec<CuckooTable> = (0..args.nodes)
        .map(|_| {
            let mut p = Params::new(4, FIB_VALUE_BYTES, (per_node * 10 / 9).max(64));
            p.seed = args.seed;
            p.grow = true;
            CuckooTable::new(p)
        })
        .collect::<Result<_, _>>()
        .context("creating the FIBs")?;
    for f in &flows {
        fibs[f.node as usize]
            .insert(&f.ue.octets(), &f.value)
            .context("filling a FIB")?;
    }
    let fib_bytes: usize = fibs.iter().map(|t| t.memory_bytes()).sum();
    let full_dup_bytes = fibs[0].memory_bytes() * args.nodes * args.nodes;
    say(format!(
        "FIBs: {} entries on node 0 .. {} on node {}; per node GPT + FIB = {:.1} MB, full duplication would need {:.1} MB per node",
        fibs[0].len(),
        fibs[args.nodes - 1].len(),
        args.nodes - 1,
        (stats.bytes as f64 + (fib_bytes / args.nodes) as f64) / 1e6,
        full_dup_bytes as f64 / args.nodes as f64 / 1e6,
    ));

    // 3. Downstream packets through the cluster.
    let progress = progress_bar(args.packets as u64, args.json);
    let mut dp = DataPlane::new(args.nodes);
    let t0 = Instant::now();
    let mut pending: Vec<(usize, usize)> = Vec::with_capacity(BATCH);
    for i in 0..args.packets {
        pending.push((rng.gen_range(0..args.flows), rng.gen_range(0..args.nodes)));
        if pending.len() == BATCH || i + 1 == args.packets {
            dp.forward(&pending, &flows, &replicas, &fibs)?;
            progress.inc(pending.len() as u64);
            pending.clear();
        }
    }
    progress.finish_and_clear();
    let dp_s = t0.elapsed().as_secs_f64();
    say(format!(
        "data plane: {} packets in {:.2} s ({:.2} Mpps on one core, frame build + parse + GPT + FIB + GTP-U encap); {} fabric crossings ({} packets stayed local); hash partitioning would have needed {}",
        dp.packets,
        dp_s,
        dp.packets as f64 / dp_s / 1e6,
        dp.fabric_hops,
        dp.packets - dp.fabric_hops,
        dp.hashpart_hops,
    ));
    ensure!(
        dp.wrong == 0,
        "{} packets were delivered with a wrong tunnel",
        dp.wrong
    );

    // 4. Flows migrate: make before break, deltas broadcast to the replicas.
    let t0 = Instant::now();
    let mut delta_bytes = 0usize;
    let migrate = args.migrate.min(args.flows);
    for _ in 0..migrate {
        let i = rng.gen_range(0..flows.len());
        let old = flows[i].node;
        let new = (old as usize + rng.gen_range(1..args.nodes)) % args.nodes;
        let key = flows[i].ue.octets();
        fibs[new]
            .insert(&key, &flows[i].value)
            .context("installing a migrated flow")?;
        let delta = owner.insert(&key, new as u16).context("updating the GPT")?;
        let wire = delta.to_bytes();
        delta_bytes += wire.len();
        let delta = sb_setsep::Delta::from_bytes(&wire).context("decoding a delta")?;
        for r in &mut replicas {
            r.apply_delta(&delta).context("applying a delta")?;
        }
        ensure!(fibs[old as usize].remove(&key), "old FIB entry missing");
        flows[i].node = new as u16;
    }
    let mig_s = t0.elapsed().as_secs_f64();
    let owner_image = owner.table().to_bytes();
    for (n, r) in replicas.iter().enumerate() {
        if r.to_bytes() != owner_image {
            bail!("replica on node {n} differs from the owner's table after the deltas");
        }
    }
    say(format!(
        "migration: {} flows moved in {:.2} s ({:.0} K/s incl. FIB changes), deltas {:.1} bytes on average, {} replicas byte-identical",
        migrate,
        mig_s,
        migrate as f64 / mig_s.max(1e-9) / 1e3,
        delta_bytes as f64 / migrate.max(1) as f64,
        replicas.len()
    ));

    // Every flow again, after the migration.
    let mut dp2 = DataPlane::new(args.nodes);
    let all: Vec<(usize, usize)> = (0..flows.len()).map(|i| (i, i % args.nodes)).collect();
    for chunk in all.chunks(BATCH) {
        dp2.forward(chunk, &flows, &replicas, &fibs)?;
    }
    ensure!(
        dp2.wrong == 0,
        "{} flows reached a wrong tunnel after migration",
        dp2.wrong
    );
    say(format!(
        "after migration: all {} flows reach their handling node and the right tunnel",
        flows.len()
    ));

    if args.json {
        println!(
            "{}",
            json!({
                "nodes": args.nodes,
                "flows": args.flows,
                "value_bits": value_bits,
                "gpt": {
                    "build_s": build_s,
                    "bits_per_key": stats.bits_per_key,
                    "bytes": stats.bytes,
                    "fallback_keys": stats.fallback_keys,
                    "page_size": stats.page_info.label(),
                },
                "fib_bytes_per_node": fib_bytes / args.nodes,
                "packets": dp.packets,
                "fabric_hops": dp.fabric_hops,
                "hash_partitioning_fabric_hops": dp.hashpart_hops,
                "wrong": dp.wrong + dp2.wrong,
                "mpps": dp.packets as f64 / dp_s / 1e6,
                "migrated": migrate,
                "delta_bytes_avg": delta_bytes as f64 / migrate.max(1) as f64,
                "replicas_identical": true,
            })
        );
    } else {
        println!("all checks passed");
    }
    Ok(())
}

fn progress_bar(len: u64, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({per_sec})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message("packets");
    pb
}

/// Per-batch state of the simulated data plane: frames, parsed keys, GPT answers.
struct DataPlane {
    nodes: usize,
    frames: Vec<Vec<u8>>,
    lens: Vec<usize>,
    keys: Vec<[u8; 4]>,
    handling: Vec<u16>,
    /// Reused per ingress node: the batch slots it received, their key hashes, GPT answers.
    idx: Vec<usize>,
    hashes: Vec<sb_common::KeyHash>,
    out: Vec<u16>,
    value: Vec<u8>,
    packets: usize,
    fabric_hops: usize,
    /// Fabric crossings the same packets would need under hash partitioning (ingress ->
    /// indirection node chosen by the key's hash -> handling node).
    hashpart_hops: usize,
    wrong: usize,
}

impl DataPlane {
    fn new(nodes: usize) -> Self {
        DataPlane {
            nodes,
            frames: vec![vec![0u8; 256]; BATCH],
            lens: vec![0; BATCH],
            keys: vec![[0; 4]; BATCH],
            handling: vec![0; BATCH],
            idx: Vec::with_capacity(BATCH),
            hashes: Vec::with_capacity(BATCH),
            out: vec![0; BATCH],
            value: vec![0; FIB_VALUE_BYTES],
            packets: 0,
            fabric_hops: 0,
            hashpart_hops: 0,
            wrong: 0,
        }
    }

    /// Pushes a batch of `(flow, ingress node)` packets through the cluster.
    fn forward(
        &mut self,
        batch: &[(usize, usize)],
        flows: &[Flow],
        gpts: &[SetSep],
        fibs: &[CuckooTable],
    ) -> Result<()> {
        // The Internet side sends one frame per packet towards the UE.
        for (slot, &(flow, _)) in batch.iter().enumerate() {
            self.lens[slot] = build_downstream(&mut self.frames[slot], flows[flow].ue)?;
        }
        // Ingress: parse, extract the UE address (the downstream key), GPT lookup. The demo
        // groups the batch per ingress node, as each node would see only its own packets.
        for (s, frame) in self.frames.iter().enumerate().take(batch.len()) {
            let frame = &frame[HEADROOM..HEADROOM + self.lens[s]];
            let parsed = parse_frame(frame).map_err(|e| anyhow::anyhow!("parse: {e}"))?;
            match parsed.dst_addr() {
                Some(IpAddr::V4(a)) => self.keys[s] = a.octets(),
                other => bail!("unexpected destination {other:?}"),
            }
        }
        for (ingress, gpt) in gpts.iter().enumerate() {
            self.idx.clear();
            self.idx
                .extend((0..batch.len()).filter(|&s| batch[s].1 == ingress));
            if self.idx.is_empty() {
                continue;
            }
            self.hashes.clear();
            self.hashes
                .extend(self.idx.iter().map(|&s| gpt.hash_key(&self.keys[s])));
            let out = &mut self.out[..self.idx.len()];
            gpt.lookup_batch_hashes(&self.hashes, out);
            for (&s, &h) in self.idx.iter().zip(out.iter()) {
                self.handling[s] = h;
                self.fabric_hops += usize::from(h as usize != ingress);
                let indirection =
                    (sb_common::hash128(&self.keys[s], 7).lo % self.nodes as u64) as usize;
                self.hashpart_hops +=
                    usize::from(indirection != ingress) + usize::from(indirection != h as usize);
            }
        }
        // Handling node: FIB lookup and GTP-U encapsulation towards the eNodeB.
        for (s, &(flow, _)) in batch.iter().enumerate() {
            let node = self.handling[s] as usize;
            let fib = fibs
                .get(node)
                .context("GPT named a node that does not exist")?;
            if !fib.lookup_into(&self.keys[s], &mut self.value) || self.value != flows[flow].value {
                self.wrong += 1;
                continue;
            }
            let teid = u32::from_be_bytes(self.value[..4].try_into().expect("4 bytes"));
            let enb = Ipv4Addr::new(self.value[4], self.value[5], self.value[6], self.value[7]);
            let tunnel = GtpuTunnel::new(
                EthernetAddress([2, 0, 0, 0, 2, node as u8]),
                EthernetAddress([2, 0, 0, 0, 3, 1]),
                OuterIp::V4 {
                    src: Ipv4Addr::new(192, 0, 2, 250),
                    dst: enb,
                },
                teid,
            );
            let ip_len = self.lens[s] - 14;
            tunnel
                .encap_in_place(&mut self.frames[s], HEADROOM + 14, ip_len)
                .map_err(|e| anyhow::anyhow!("encap: {e}"))?;
        }
        self.packets += batch.len();
        Ok(())
    }
}

/// Writes an Ethernet/IPv4/UDP frame to `ue` at `HEADROOM` in `buf`; returns its length.
fn build_downstream(buf: &mut [u8], ue: Ipv4Addr) -> Result<usize> {
    let server = Ipv4Addr::new(203, 0, 113, 9);
    let payload = 18;
    let frame_len = 14 + 20 + 8 + payload;
    let f = &mut buf[HEADROOM..HEADROOM + frame_len];
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("building a frame: {e}");
    EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 1, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 1, 2]),
        vlan: None,
        ethertype: EtherType::IPV4,
    }
    .emit(f)
    .map_err(|e| err(&e))?;
    Ipv4Repr::new(server, ue, 17, 8 + payload)
        .emit(&mut f[14..])
        .map_err(|e| err(&e))?;
    UdpRepr {
        src_port: 443,
        dst_port: 5000,
    }
    .emit(&mut f[34..], server.into(), ue.into(), UdpChecksum::Compute)
    .map_err(|e| err(&e))?;
    Ok(frame_len)
}
