//! The owner's update rate per core: a cluster of `NODES` nodes in one process over a perfect
//! network (no faults, FIFO, commits at once), a client sending updates that node 0 owns
//! (inserts, changes that move the flow, deletes) to node 0 in requests of 256; the CPU time of
//! node 0's calls (decode, validate, log record, FIB install messages, re-search, delta encode,
//! authentication of every datagram, acks, reply) is the owner's work. One JSON line per owner
//! batch size, with the CPU time and bytes of node 0's checkpoint at the end
//! (`Node::checkpoint`, which a node process runs on its control thread) and of a restart
//! from it (`Node::with_tuning` on those records: the replay before syncing). Times are the
//! thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
//!
//! `cargo run --release -p sb-control --example owner_rate -- [FLOWS] [NODES] [UPDATES]`
//! (defaults 1000000 4 200000), `[BATCHES]` (comma-separated, default 1,16,256), `[REPLICAS]`
//! (default 1; 3: each range a Raft group on three nodes).

#![allow(unsafe_code)] // one clock_gettime call
use sb_control::{client, wire, ClusterSpec, Event, Flow, GptSpec, Node, Peer, Tuning, Update};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// CPU time of this thread (what the owner's calls cost, not the time other processes of this
/// shared machine took from it).
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Like `Instant`, on the thread's CPU clock.
#[derive(Clone, Copy)]
struct CpuInstant(Duration);

impl CpuInstant {
    fn now() -> Self {
        CpuInstant(cpu_now())
    }
    fn elapsed(&self) -> Duration {
        cpu_now() - self.0
    }
}

fn rnd(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key(x: &mut u64) -> Vec<u8> {
    let mut k = rnd(x).to_le_bytes().to_vec();
    k.extend_from_slice(&rnd(x).to_le_bytes());
    k
}

struct Run {
    /// CPU time of the owner's `Node::checkpoint` at the end, and its records' bytes.
    checkpoint_cpu: Duration,
    checkpoint_bytes: usize,
    /// CPU time of `Node::with_tuning` from those records (a restart's replay).
    replay_cpu: Duration,
    batch: usize,
    updates: u64,
    owner_cpu: Duration,
    delta_bytes: u64,
    deltas: u64,
    wall: Duration,
}

fn run(flows: usize, nodes: u16, updates: u64, batch: usize, replicas: usize) -> Run {
    let mut rng = 12345u64;
    let total_blocks = sb_setsep::num_blocks(flows as u64 * 5 / 4);
    let total_blocks = total_blocks.div_ceil(nodes as u64) * nodes as u64;
    let per = total_blocks / nodes as u64;
    let spec = ClusterSpec {
        cluster_id: 1,
        nodes,
        key: [3; 32],
        gpt: GptSpec {
            index_bits: 16,
            array_bits: 8,
            value_bits: 16 - (nodes.leading_zeros() as u8).min(15),
            seed: 99,
            build_id: 7,
            total_blocks,
            build_threads: 0,
        },
        ranges: (0..nodes as u64).map(|i| i * per..(i + 1) * per).collect(),
        key_bytes: 16,
        value_bytes: 16,
    };
    let mut slices: Vec<Vec<Flow>> = vec![Vec::new(); nodes as usize];
    let mut owned: Vec<Vec<u8>> = Vec::new();
    for _ in 0..flows {
        let k = key(&mut rng);
        let o = spec.owner_of(&k);
        if o == 0 {
            owned.push(k.clone());
        }
        slices[o as usize].push(Flow {
            key: k.into(),
            node: (rnd(&mut rng) % nodes as u64) as u16,
            value: sb_control::Bytes::from_elem(1, 16),
        });
    }
    let tuning = Tuning {
        max_batch: batch,
        replicas,
        ..Tuning::default()
    };
    let mut ns: Vec<Node> = slices
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            Node::with_tuning(
                spec.clone(),
                i as u16,
                f,
                Vec::new(),
                0,
                i as u64,
                tuning.clone(),
            )
            .expect("node")
        })
        .collect();
    let client_addr: std::net::SocketAddr = "10.0.0.1:5000".parse().expect("addr");
    let mut net: VecDeque<(usize, Peer, Vec<u8>)> = VecDeque::new();
    let mut now = 0u64;
    let mut owner_cpu = Duration::ZERO;
    let (mut delta_bytes, mut deltas) = (0u64, 0u64);
    let mut acked = 0u64;
    let mut sent = 0u64;
    let mut inflight = 0usize;
    let mut next_id = 1u64;
    let mut measuring = false;
    let wall = Instant::now();
    // Pump: events (persist commits at once), then datagrams onto the network.
    let mut pump = |ns: &mut Vec<Node>,
                    i: usize,
                    now: u64,
                    net: &mut VecDeque<(usize, Peer, Vec<u8>)>,
                    replies: &mut Vec<Vec<u8>>,
                    cpu: &mut Duration,
                    measuring: bool| {
        let t = CpuInstant::now();
        let mut persisted = false;
        loop {
            while let Some(ev) = ns[i].poll_event() {
                if let Event::Persist { .. } = ev {
                    persisted = true;
                }
            }
            if persisted {
                ns[i].persisted(now);
                persisted = false;
                continue;
            }
            break;
        }
        while let Some((to, d)) = ns[i].poll_transmit() {
            match to {
                Peer::Node(j) => {
                    if i == 0 && j == 1 && measuring {
                        if let Ok((_, wire::Body::Deltas { deltas: ds, .. })) = wire::peek(1, &d) {
                            delta_bytes += ds.iter().map(|x| x.len() as u64 + 2).sum::<u64>();
                            deltas += ds.len() as u64;
                        }
                    }
                    net.push_back((j as usize, Peer::Node(i as u16), d));
                }
                Peer::Client(_) => replies.push(d),
            }
        }
        if i == 0 {
            *cpu += t.elapsed();
        }
    };
    let mut replies = Vec::new();
    for i in 0..nodes as usize {
        pump(
            &mut ns,
            i,
            now,
            &mut net,
            &mut replies,
            &mut owner_cpu,
            false,
        );
    }
    let mut existing = owned.clone();
    loop {
        now += 10_000;
        // Client: keep 8 requests of 256 updates in flight, once every owner serves.
        if ns.iter().all(|n| n.serving() && n.ready()) {
            if !measuring {
                measuring = true;
                owner_cpu = Duration::ZERO;
            }
            while inflight < 8 && sent < updates {
                let mut us = Vec::new();
                let mut used = std::collections::HashSet::new();
                while us.len() < 256 {
                    let r = rnd(&mut rng) % 10;
                    let u = if r < 4 || existing.len() < 1000 {
                        let mut k = key(&mut rng);
                        while spec.owner_of(&k) != 0 {
                            k = key(&mut rng);
                        }
                        existing.push(k.clone());
                        Update {
                            op: sb_control::Op::Insert,
                            key: k.into(),
                            node: (rnd(&mut rng) % nodes as u64) as u16,
                            value: sb_control::Bytes::from_elem(2, 16),
                        }
                    } else {
                        let j = (rnd(&mut rng) % existing.len() as u64) as usize;
                        let k = existing[j].clone();
                        if r < 8 {
                            Update {
                                op: sb_control::Op::Change,
                                key: k.into(),
                                node: (rnd(&mut rng) % nodes as u64) as u16,
                                value: sb_control::Bytes::from_elem(3, 16),
                            }
                        } else {
                            existing.swap_remove(j);
                            Update {
                                op: sb_control::Op::Delete,
                                key: k.into(),
                                node: 0,
                                value: sb_control::Bytes::new(),
                            }
                        }
                    };
                    if used.insert(u.key.clone()) {
                        us.push(u);
                    }
                }
                let stamp = client::Stamp {
                    client: 1,
                    seq: next_id,
                    time: now,
                };
                let bytes =
                    client::encode_request(&spec.client_key(), 1, 0, stamp, &us).expect("fits");
                next_id += 1;
                sent += us.len() as u64;
                inflight += 1;
                let t = CpuInstant::now();
                ns[0].handle(now, Peer::Client(client_addr), &bytes);
                owner_cpu += t.elapsed();
                pump(
                    &mut ns,
                    0,
                    now,
                    &mut net,
                    &mut replies,
                    &mut owner_cpu,
                    measuring,
                );
            }
        }
        for r in replies.drain(..) {
            let rep = client::decode_reply(&spec.client_key(), 1, &r).expect("reply");
            acked += rep.acked() as u64;
            inflight -= 1;
        }
        if sent >= updates && inflight == 0 {
            break;
        }
        // Deliver everything queued now.
        let n = net.len();
        for _ in 0..n {
            let (to, from, d) = net.pop_front().expect("queued");
            let t = CpuInstant::now();
            ns[to].handle(now, from, &d);
            if to == 0 {
                owner_cpu += t.elapsed();
            }
            pump(
                &mut ns,
                to,
                now,
                &mut net,
                &mut replies,
                &mut owner_cpu,
                measuring,
            );
        }
        for i in 0..nodes as usize {
            if ns[i].poll_timeout().is_some_and(|t| t <= now) {
                let t = CpuInstant::now();
                ns[i].handle_timeout(now);
                if i == 0 {
                    owner_cpu += t.elapsed();
                }
                pump(
                    &mut ns,
                    i,
                    now,
                    &mut net,
                    &mut replies,
                    &mut owner_cpu,
                    measuring,
                );
            }
        }
    }
    assert!(acked > 0);
    // The owner's checkpoint at the end (its state machine is quiet: nothing in flight).
    let t = CpuInstant::now();
    let ckpt = ns[0]
        .checkpoint()
        .expect("a quiet owner gives a checkpoint");
    let checkpoint_cpu = t.elapsed();
    let checkpoint_bytes = ckpt.iter().map(|r| r.len() + 4).sum();
    // A restart from it: the state machine rebuilt from the checkpoint's records alone (what
    // a node replays before it syncs with its peers).
    let t = CpuInstant::now();
    let restarted = Node::with_tuning(spec.clone(), 0, Vec::new(), ckpt, 0, 99, tuning.clone())
        .expect("a node from its checkpoint");
    let replay_cpu = t.elapsed();
    drop(restarted);
    Run {
        checkpoint_cpu,
        checkpoint_bytes,
        replay_cpu,
        batch,
        updates: acked,
        owner_cpu,
        delta_bytes,
        deltas,
        wall: wall.elapsed(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let flows = arg(1, 1_000_000) as usize;
    let nodes = arg(2, 4) as u16;
    let updates = arg(3, 200_000);
    let batches: Vec<usize> = match args.get(4) {
        Some(b) => b
            .split(',')
            .map(|x| x.parse().expect("batch sizes"))
            .collect(),
        None => vec![1, 16, 256],
    };
    let replicas = arg(5, 1) as usize;
    for batch in batches {
        let r = run(flows, nodes, updates, batch, replicas);
        let secs = r.owner_cpu.as_secs_f64();
        println!(
            "{{\"flows\": {flows}, \"nodes\": {nodes}, \"replicas\": {replicas}, \"owner_batch\": {}, \"updates_applied\": {}, \"owner_cpu_s\": {:.3}, \"owner_kops_per_core\": {:.1}, \"deltas\": {}, \"delta_bytes_per_update\": {:.1}, \"checkpoint_ms\": {:.1}, \"checkpoint_bytes\": {}, \"replay_from_checkpoint_ms\": {:.1}, \"wall_s\": {:.2}}}",
            r.batch,
            r.updates,
            secs,
            r.updates as f64 / secs / 1e3,
            r.deltas,
            r.delta_bytes as f64 / r.updates.max(1) as f64,
            r.checkpoint_cpu.as_secs_f64() * 1e3,
            r.checkpoint_bytes,
            r.replay_cpu.as_secs_f64() * 1e3,
            r.wall.as_secs_f64()
        );
    }
}
