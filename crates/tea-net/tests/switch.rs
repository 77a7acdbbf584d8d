//! The TEA switch against an oracle: every packet that leaves equals the NF (`sb-nf`'s NAT)
//! applied with the value a HashMap holds for its key; nothing leaves for a key the table does
//! not hold. Cache on and off; entries inserted while lookups run; a memory server taken down
//! mid-run (its ranges served from their secondaries, the packets of its reads in flight lost,
//! nothing mistranslated) and brought back (reads return to it).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use sb_engine::App;
use sb_io::PacketBatch;
use sb_nf::flow::FlowKey;
use sb_nf::nat::{Nat, NatConfig, Translation};
use sb_tea::zipf::{SplitMix64, Zipf};
use sb_tea::{FlowParams, HotParams, Layout, RangeTable, TableParams, TeaTable};
use sb_tea_net::driver::{Output, UdpSwitch};
use sb_tea_net::server::{servers_of, spawn, MemoryServer, ServerHandle};
use sb_tea_net::switch::{SwitchDrop, SwitchParams, TeaSwitch};
use sb_wire::{EthernetAddress, PacketBuilder};

const PUBLIC: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
const WINDOW: usize = 8;

fn nat() -> Nat {
    Nat::new(NatConfig {
        public: PUBLIC,
        ports: 1000..=60000,
        node: 0,
    })
    .unwrap()
}

fn key(rng: &mut SplitMix64) -> FlowKey {
    let r = rng.next_u64();
    let remote = Ipv4Addr::from((r >> 32) as u32 | 0x0100_0000);
    FlowKey::new(17, remote, r as u16 | 1, PUBLIC, (r >> 16) as u16 | 1)
}

fn value(rng: &mut SplitMix64) -> [u8; 8] {
    let r = rng.next_u64();
    Translation {
        addr: Ipv4Addr::from(0x0a00_0000 | (r as u32 & 0x00ff_ffff)),
        port: (r >> 32) as u16 | 1,
        node: 0,
    }
    .value()
}

fn frame(k: &FlowKey, seq: u32) -> Vec<u8> {
    let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
    let b = PacketBuilder::udp(
        mac,
        mac,
        k.src().into(),
        k.dst().into(),
        k.src_port(),
        k.dst_port(),
    );
    let mut f = vec![0u8; b.header_len() + 4];
    b.build(&seq.to_be_bytes(), &mut f).unwrap();
    f
}

fn seq_of(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[f.len() - 4..].try_into().unwrap())
}

/// What the NF does to `frame` with `value`: the oracle's output.
fn expected(frame: &[u8], value: &[u8]) -> Vec<u8> {
    let mut n = nat();
    let mut b = PacketBatch::new(1);
    b.push(frame);
    let mut k = [0u8; 13];
    let f = b.get(0).to_vec();
    n.downstream_key(&f, &mut k, b.meta_mut(0)).unwrap();
    n.apply(&mut b, 0, value).unwrap();
    b.get(0).to_vec()
}

#[derive(Default)]
struct Collect {
    out: HashMap<u32, Vec<u8>>,
    drops: HashMap<String, u64>,
}

impl Output for Collect {
    fn emit(&mut self, f: &[u8]) {
        assert!(
            self.out.insert(seq_of(f), f.to_vec()).is_none(),
            "a packet left twice"
        );
    }
    fn dropped(&mut self, why: SwitchDrop) {
        let k = match why {
            SwitchDrop::Flow(_) => "flow".to_string(),
            other => format!("{other:?}"),
        };
        *self.drops.entry(k).or_default() += 1;
    }
}

struct Rig {
    table: TeaTable,
    servers: Vec<ServerHandle>,
    sw: UdpSwitch<Nat>,
}

fn rig(n_servers: usize, params: SwitchParams) -> Rig {
    let layout = Layout::new(13, 8, 4).unwrap();
    let ids: Vec<u16> = (0..n_servers as u16).collect();
    let table = TeaTable::new(TableParams::new(
        layout,
        RangeTable::even(1024, &ids).unwrap(),
        0x7ea,
    ));
    let servers: Vec<ServerHandle> = servers_of(&table, n_servers)
        .into_iter()
        .map(|s| spawn(s, "127.0.0.1:0".parse().unwrap()).unwrap())
        .collect();
    let core = TeaSwitch::new(nat(), &table, n_servers, params).unwrap();
    let sw = UdpSwitch::new(
        core,
        "127.0.0.1:0".parse().unwrap(),
        servers.iter().map(|s| s.addr).collect(),
    )
    .unwrap();
    Rig { table, servers, sw }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Event {
    None,
    /// Inserts the absent keys, one every few packets, from this packet on.
    InsertAbsent,
    /// Server 0 down at this packet, up again 2/3 through.
    KillServer0,
}

struct Outcome {
    emitted: usize,
    present: usize,
    lost: u64,
    cache_hits: u64,
    stash_hits: u64,
    reads_per_server: Vec<u64>,
}

/// Runs `packets` packets (Zipf 0.9 over 3000 keys, 2000 of them in the table) through the
/// switch and checks every output against the oracle.
fn run(params: SwitchParams, packets: u32, event: Event) -> Outcome {
    let mut r = rig(2, params);
    let mut rng = SplitMix64::new(42);
    let keys: Vec<FlowKey> = (0..3000).map(|_| key(&mut rng)).collect();
    let mut oracle: HashMap<FlowKey, [u8; 8]> = HashMap::new();
    for k in &keys[..2000] {
        let v = value(&mut rng);
        r.sw.core_mut().insert(&mut r.table, &k.0, &v).unwrap();
        oracle.insert(*k, v);
    }
    let later: Vec<(FlowKey, [u8; 8])> =
        keys[2000..].iter().map(|k| (*k, value(&mut rng))).collect();
    let later_map: HashMap<FlowKey, [u8; 8]> = later.iter().copied().collect();
    let zipf = Zipf::new(keys.len(), 0.9);
    // Per packet: the value at injection (None: absent then).
    let mut sent: Vec<(Vec<u8>, Option<[u8; 8]>, FlowKey)> = Vec::new();
    let mut col = Collect::default();
    let kill_at = packets / 3;
    let revive_at = 2 * packets / 3;
    let mut inserted = 0;
    for seq in 0..packets {
        match event {
            Event::InsertAbsent if seq >= packets / 4 && seq % 4 == 0 && inserted < later.len() => {
                let (k, v) = later[inserted];
                r.sw.core_mut().insert(&mut r.table, &k.0, &v).unwrap();
                oracle.insert(k, v);
                inserted += 1;
            }
            Event::KillServer0 if seq == kill_at => r.servers[0].control.set_down(true),
            Event::KillServer0 if seq == revive_at => {
                r.servers[0].control.set_down(false);
                // Past a probe interval: the probe brings it back.
                let t = Instant::now();
                while t.elapsed() < Duration::from_millis(400) {
                    r.sw.pump(&mut col);
                }
            }
            _ => {}
        }
        let k = keys[zipf.sample(&mut rng)];
        let f = frame(&k, seq);
        while r.sw.core().in_flight() >= WINDOW {
            r.sw.pump(&mut col);
        }
        r.sw.inject(&f, &mut col);
        sent.push((f, oracle.get(&k).copied(), k));
        if seq % 64 == 0 {
            r.sw.core_mut().run_control(&r.table);
        }
    }
    r.sw.drain(&mut col, Duration::from_secs(2));
    // Every output is the NF applied with the oracle's value (at injection, or the value a
    // key inserted later got, for a read that saw the insert).
    for (seq, out) in &col.out {
        let (f, v, k) = &sent[*seq as usize];
        let v = v.or_else(|| later_map.get(k).copied());
        let v = v.unwrap_or_else(|| panic!("packet {seq} left for a key never in the table"));
        assert_eq!(out, &expected(f, &v), "packet {seq} mistranslated");
    }
    let present = sent.iter().filter(|s| s.1.is_some()).count();
    let c = r.sw.core().counters().clone();
    assert_eq!(c.packets, u64::from(packets));
    let o = Outcome {
        emitted: col.out.len(),
        present,
        lost: c.lost,
        cache_hits: c.cache_hits,
        stash_hits: c.stash_hits,
        reads_per_server: c.reads_per_server.clone(),
    };
    if event == Event::KillServer0 {
        // Every packet of a key in the table left, or was lost with a read that server 0
        // never answered (a window's worth at most: after that it is dead, its ranges read
        // from their secondaries); nothing else was dropped.
        let misses = col.drops.get("Miss").copied().unwrap_or(0);
        assert_eq!(
            o.emitted as u64 + o.lost + misses,
            u64::from(packets),
            "{:?}",
            col.drops
        );
        assert!(o.emitted as u64 + o.lost >= present as u64);
        assert_eq!(col.drops.len(), 1, "only misses: {:?}", col.drops);
        let f = r.sw.core().flow_counters();
        assert!(
            f.marked_dead >= 1 && f.recovered >= 1 && f.to_secondary > 0,
            "{f:?}"
        );
    } else {
        assert_eq!(o.lost, 0);
        if event == Event::None {
            assert_eq!(o.emitted, present, "drops {:?}", col.drops);
            assert_eq!(
                col.drops.get("Miss").copied().unwrap_or(0) as usize,
                packets as usize - present
            );
        } else {
            assert!(o.emitted >= present, "drops {:?}", col.drops);
        }
    }
    r.table.check_invariants().unwrap();
    o
}

fn params(cache: usize) -> SwitchParams {
    SwitchParams {
        cache_entries: cache,
        hot: HotParams {
            width: 4096,
            threshold: 4,
            bloom_bits: 8192,
            ..HotParams::default()
        },
        epoch_lookups: 2000,
        // Generous on a loaded test machine: a read not answered in 20 ms (the default) is
        // not a dead server here.
        flow: FlowParams {
            timeout: Duration::from_millis(150),
            ..FlowParams::default()
        },
        ..SwitchParams::default()
    }
}

#[test]
fn every_output_is_the_nf_with_the_oracles_value_cache_off() {
    let o = run(params(0), 6000, Event::None);
    assert_eq!(o.cache_hits, 0);
    assert!(
        o.reads_per_server.iter().all(|&r| r > 1000),
        "{:?}",
        o.reads_per_server
    );
}

#[test]
fn every_output_is_the_nf_with_the_oracles_value_cache_on() {
    let o = run(params(64), 6000, Event::None);
    assert!(o.cache_hits > 1000, "cache hits {}", o.cache_hits);
}

#[test]
fn inserts_while_lookups_run() {
    let o = run(params(64), 8000, Event::InsertAbsent);
    assert!(o.emitted >= o.present);
    let _ = o.stash_hits;
}

#[test]
fn a_server_down_mid_run_fails_over_and_back() {
    for cache in [0, 64] {
        let o = run(params(cache), 6000, Event::KillServer0);
        assert!(o.lost as usize <= 2 * WINDOW, "lost {}", o.lost);
        assert!(
            o.reads_per_server[1] > o.reads_per_server[0],
            "{:?}",
            o.reads_per_server
        );
    }
}

/// A full table: keys that find no bucket go to the stash, which the switch checks first.
#[test]
fn stash_entries_are_served_by_the_switch() {
    let mut r = rig(
        1,
        SwitchParams {
            cache_entries: 0,
            ..params(0)
        },
    );
    // 1024 buckets x 4 slots: fill until the stash holds something.
    let mut rng = SplitMix64::new(7);
    let mut oracle = Vec::new();
    while r.table.stash_len() < 3 {
        let (k, v) = (key(&mut rng), value(&mut rng));
        if r.sw.core_mut().insert(&mut r.table, &k.0, &v).is_err() {
            break;
        }
        oracle.push((k, v));
    }
    assert!(r.table.stash_len() > 0);
    let mut col = Collect::default();
    for (seq, (k, v)) in oracle.iter().enumerate() {
        let f = frame(k, seq as u32);
        while r.sw.core().in_flight() >= WINDOW {
            r.sw.pump(&mut col);
        }
        r.sw.inject(&f, &mut col);
        let _ = v;
    }
    r.sw.drain(&mut col, Duration::from_secs(2));
    assert_eq!(col.out.len(), oracle.len(), "drops {:?}", col.drops);
    for (seq, (k, v)) in oracle.iter().enumerate() {
        assert_eq!(col.out[&(seq as u32)], expected(&frame(k, seq as u32), v));
    }
    assert!(r.sw.core().counters().stash_hits >= r.table.stash_len() as u64);
}

/// A rig whose memory servers load their regions from images (as `scalebricks tea-server`
/// does): they share no memory with the table, so entries reach them only by the switch's
/// remote writes. Also returns a handle on each server's regions (a clone shares them).
fn remote_rig(buckets: u64, params: SwitchParams) -> (Rig, Vec<MemoryServer>) {
    let layout = Layout::new(13, 8, 4).unwrap();
    let mut table = TeaTable::new(TableParams::new(
        layout,
        RangeTable::even(buckets, &[0, 1]).unwrap(),
        0x7ea,
    ));
    table.log_writes(true);
    let mems: Vec<MemoryServer> = servers_of(&table, 2)
        .iter()
        .map(|s| MemoryServer::from_image(&s.image()).unwrap())
        .collect();
    let servers: Vec<ServerHandle> = mems
        .iter()
        .map(|s| spawn(s.clone(), "127.0.0.1:0".parse().unwrap()).unwrap())
        .collect();
    let core = TeaSwitch::new(nat(), &table, 2, params).unwrap();
    let sw = UdpSwitch::new(
        core,
        "127.0.0.1:0".parse().unwrap(),
        servers.iter().map(|s| s.addr).collect(),
    )
    .unwrap();
    (Rig { table, servers, sw }, mems)
}

/// Entries written by the control plane's remote writes while lookups run (Zipf 0.9 over
/// 3,000 keys; 3,000 entries in 764 4-slot buckets, 98%: displacements and the stash): every
/// packet that leaves is the NF with the oracle's value (at injection, or the one written
/// meanwhile), every write is acknowledged by both copies, the servers' copies end equal to
/// the table's images, and afterwards every entry written is found.
#[test]
fn remote_updates_while_lookups_run() {
    let (mut r, mems) = remote_rig(764, params(64));
    let mut rng = SplitMix64::new(7);
    let keys: Vec<FlowKey> = (0..3000).map(|_| key(&mut rng)).collect();
    let mut oracle: HashMap<FlowKey, [u8; 8]> = HashMap::new();
    let mut col = Collect::default();
    // The first 1000 before traffic, the rest while it runs.
    let mut written = 0;
    let mut full = 0;
    // Per key: the write acknowledgements after which it is on every copy (None: in the
    // stash, installed once the queue drains; not counted as present meanwhile).
    let mut settled: HashMap<FlowKey, Option<u64>> = HashMap::new();
    let mut write = |r: &mut Rig,
                     col: &mut Collect,
                     oracle: &mut HashMap<_, _>,
                     settled: &mut HashMap<FlowKey, Option<u64>>,
                     k: FlowKey| {
        let v = value(&mut SplitMix64::new(u64::from(k.src_port()) << 16 | 1));
        match r.sw.update(&mut r.table, &k.0, &v, col) {
            Ok(p) => {
                oracle.insert(k, v);
                let c = r.sw.core();
                let need = c.counters().write_acks + 2 * c.updates_pending() as u64;
                settled.insert(k, (p != sb_tea::Placed::Stash).then_some(need));
            }
            Err(sb_tea::InsertError::Full) => full += 1,
            Err(e) => panic!("{e}"),
        }
    };
    for k in &keys[..1000] {
        write(&mut r, &mut col, &mut oracle, &mut settled, *k);
        written += 1;
    }
    r.sw.drain_updates(&mut col, Duration::from_secs(10));
    let zipf = Zipf::new(keys.len(), 0.9);
    let mut sent: Vec<(Vec<u8>, Option<[u8; 8]>, FlowKey)> = Vec::new();
    for seq in 0..8000u32 {
        if seq % 4 == 0 && written < keys.len() {
            write(&mut r, &mut col, &mut oracle, &mut settled, keys[written]);
            written += 1;
        }
        let k = keys[zipf.sample(&mut rng)];
        let f = frame(&k, seq);
        while r.sw.core().in_flight() >= WINDOW {
            r.sw.pump(&mut col);
        }
        // Present: written, and its writes acknowledged by every copy.
        let acks = r.sw.core().counters().write_acks;
        let on_servers = settled
            .get(&k)
            .copied()
            .flatten()
            .is_some_and(|n| n <= acks);
        r.sw.inject(&f, &mut col);
        sent.push((f, oracle.get(&k).copied().filter(|_| on_servers), k));
        if seq % 64 == 0 {
            r.sw.core_mut().run_control(&r.table);
        }
    }
    r.sw.drain(&mut col, Duration::from_secs(2));
    r.sw.drain_updates(&mut col, Duration::from_secs(10));
    for (seq, out) in &col.out {
        let (f, _, k) = &sent[*seq as usize];
        let v = oracle
            .get(k)
            .unwrap_or_else(|| panic!("packet {seq} left for a key never written"));
        assert_eq!(out, &expected(f, v), "packet {seq} mistranslated");
    }
    let present = sent.iter().filter(|s| s.1.is_some()).count();
    assert!(col.out.len() >= present, "drops {:?}", col.drops);
    let c = r.sw.core().counters().clone();
    assert_eq!(c.lost, 0);
    assert_eq!(r.sw.core().updates_pending(), 0);
    assert_eq!(c.updates as usize + full, keys.len());
    assert_eq!(c.write_acks, c.bucket_writes, "{c:?}");
    assert_eq!((c.write_skipped, c.write_errors), (0, 0), "{c:?}");
    let served: u64 = r
        .servers
        .iter()
        .map(|s| {
            s.control
                .counters
                .writes
                .load(std::sync::atomic::Ordering::Relaxed)
        })
        .sum();
    // Retries may be stored twice (the same bytes).
    assert!(served >= c.bucket_writes && served <= c.bucket_writes + c.write_retries);
    for (i, (m, s)) in mems.iter().zip(servers_of(&r.table, 2)).enumerate() {
        assert!(m.image() == s.image(), "server {i}'s copies differ");
    }
    // Every entry written is found now (one packet each).
    let before = col.out.len();
    let all: Vec<FlowKey> = oracle.keys().copied().collect();
    for (i, k) in all.iter().enumerate() {
        let seq = 8000 + i as u32;
        let f = frame(k, seq);
        while r.sw.core().in_flight() >= WINDOW {
            r.sw.pump(&mut col);
        }
        r.sw.inject(&f, &mut col);
        sent.push((f, oracle.get(k).copied(), *k));
    }
    r.sw.drain(&mut col, Duration::from_secs(2));
    assert_eq!(col.out.len() - before, all.len(), "drops {:?}", col.drops);
    for (seq, out) in &col.out {
        let (f, _, k) = &sent[*seq as usize];
        assert_eq!(out, &expected(f, &oracle[k]), "packet {seq} mistranslated");
    }
    println!(
        "{} entries written ({} in the stash, {full} refused full), {} bucket writes, {} retries, \
         {} packets during the writes",
        c.updates,
        r.table.stash_len(),
        c.bucket_writes,
        c.write_retries,
        present
    );
    assert!(r.table.stash_len() > 0, "the stash was not used");
    r.table.check_invariants().unwrap();
}

/// A memory server down while entries are written: once the switch holds it dead its copies
/// are skipped (stale), the writes go on to the other copy; back up, `resync` rewrites its
/// regions and its copies equal the table's images again.
#[test]
fn a_server_that_missed_writes_is_resynced() {
    let (mut r, mems) = remote_rig(256, params(0));
    let mut rng = SplitMix64::new(9);
    let mut col = Collect::default();
    let first: Vec<FlowKey> = (0..200).map(|_| key(&mut rng)).collect();
    for k in &first {
        r.sw.update(&mut r.table, &k.0, &value(&mut rng), &mut col)
            .unwrap();
    }
    r.sw.drain_updates(&mut col, Duration::from_secs(10));
    assert!(mems[0].image() == servers_of(&r.table, 2)[0].image());
    // Server 0 down; packets of keys it is primary for time out until it is dead.
    r.servers[0].control.set_down(true);
    let t = Instant::now();
    let mut seq = 0;
    while !matches!(r.sw.core().flow().health(0), sb_tea::Health::Dead(_)) {
        assert!(t.elapsed() < Duration::from_secs(10), "never marked dead");
        let k = first[seq % first.len()];
        r.sw.inject(&frame(&k, seq as u32), &mut col);
        r.sw.pump(&mut col);
        seq += 1;
    }
    let later: Vec<FlowKey> = (0..100).map(|_| key(&mut rng)).collect();
    for k in &later {
        r.sw.update(&mut r.table, &k.0, &value(&mut rng), &mut col)
            .unwrap();
    }
    r.sw.drain_updates(&mut col, Duration::from_secs(10));
    let c = r.sw.core().counters().clone();
    assert!(c.write_skipped > 0, "{c:?}");
    assert_eq!(r.sw.core().stale_servers(), vec![0]);
    assert!(mems[0].image() != servers_of(&r.table, 2)[0].image());
    assert!(mems[1].image() == servers_of(&r.table, 2)[1].image());
    // Back: a probe brings it up, then resync.
    r.servers[0].control.set_down(false);
    let t = Instant::now();
    while !matches!(r.sw.core().flow().health(0), sb_tea::Health::Up) {
        assert!(t.elapsed() < Duration::from_secs(10), "never back");
        r.sw.pump(&mut col);
    }
    assert_eq!(r.sw.resync(&r.table, &mut col), 1);
    r.sw.drain_updates(&mut col, Duration::from_secs(10));
    assert!(r.sw.core().stale_servers().is_empty());
    assert!(
        mems[0].image() == servers_of(&r.table, 2)[0].image(),
        "not resynced"
    );
    assert_eq!(r.sw.core().counters().resyncs, 1);
}
