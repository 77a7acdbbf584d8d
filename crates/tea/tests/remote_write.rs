//! The control plane's remote writes (`TeaTable::take_writes` shipped as one-sided write
//! requests, applied by `serve_write` to copies of the regions that share nothing with the
//! table): the remote copies always equal the table's images, lookups over them (read
//! requests served by `serve_datagram`, plus the switch's stash copy) match a HashMap oracle,
//! stash collisions included, and readers racing the writes never see a torn entry or miss a
//! key that never left.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use proptest::prelude::*;
use sb_tea::wire::{
    serve_datagram, serve_write, ReadRequest, ReadResponse, Status, WriteAck, WriteRequest,
};
use sb_tea::{
    BucketWrite, InsertError, Layout, Lookup, Placed, RangeTable, Region, Resolver, Step,
    TableParams, TeaTable,
};

type Stash = Vec<(Vec<u8>, Vec<u8>)>;

/// The memory servers' copies: `[region][copy]`, loaded from the table's images once.
struct Remote {
    copies: Vec<Vec<Region>>,
    next_id: u32,
    writes: u64,
}

impl Remote {
    fn of(t: &TeaTable) -> Remote {
        let n = t.resolver().ranges().entries().len();
        Remote {
            copies: (0..n as u32)
                .map(|r| {
                    t.region(r)
                        .iter()
                        .map(|c| Region::from_image(&c.snapshot()))
                        .collect()
                })
                .collect(),
            next_id: 0,
            writes: 0,
        }
    }

    /// Each write to every copy, as a datagram, acknowledged before the next (the order the
    /// switch keeps).
    fn apply(&mut self, writes: &[BucketWrite]) {
        for w in writes {
            for copy in &self.copies[w.address.region as usize] {
                self.next_id = self.next_id.wrapping_add(1);
                let mut d = Vec::new();
                WriteRequest {
                    request_id: self.next_id,
                    region: w.address.region,
                    offset: w.address.offset,
                    key: 0,
                    data: &w.image,
                }
                .emit(&mut d)
                .unwrap();
                let req = WriteRequest::parse(&d).unwrap();
                let mut ack = Vec::new();
                serve_write(Some(copy), &req, &mut ack);
                let ack = WriteAck::parse(&ack).unwrap();
                assert_eq!((ack.request_id, ack.status), (self.next_id, Status::Ok));
                self.writes += 1;
            }
        }
    }
}

/// The switch's lookup over the remote copies (copy `replica`, or the only one): the stash
/// first, then the `Lookup` protocol with read requests served from the copies.
fn lookup(
    resolver: &Resolver,
    copies: &[Vec<Region>],
    stash: &Stash,
    replica: usize,
    key: &[u8],
) -> Option<Vec<u8>> {
    if let Some((_, v)) = stash.iter().find(|(k, _)| k == key) {
        return Some(v.clone());
    }
    let layout = *resolver.layout();
    'again: loop {
        let mut l = Lookup::new(resolver, resolver.hash(key), 16);
        let mut bucket = l.first();
        loop {
            let a = resolver.address(bucket);
            let mut req = Vec::new();
            ReadRequest {
                request_id: 1,
                region: a.region,
                offset: a.offset,
                length: a.len,
                key: 0,
                packet: b"pkt",
            }
            .emit(&mut req)
            .unwrap();
            let c = &copies[a.region as usize];
            let mut resp = Vec::new();
            serve_datagram(|_| Some(&c[replica.min(c.len() - 1)]), &req, &mut resp).unwrap();
            let resp = ReadResponse::parse(&resp).unwrap();
            assert_eq!(resp.status, Status::Ok);
            match l.on_bucket(&layout, key, resp.data) {
                Ok(Step::Read(b)) => bucket = b,
                Ok(Step::Found(v)) => return Some(v.to_vec()),
                Ok(Step::Miss) => return None,
                Err(sb_tea::LookupError::Unstable(_)) => {
                    std::thread::yield_now();
                    continue 'again;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}

fn table(value_len: usize, slots: usize, buckets: u64, servers: u16, stash: usize) -> TeaTable {
    let ids: Vec<u16> = (0..servers).collect();
    let mut p = TableParams::new(
        Layout::new(6, value_len, slots).unwrap(),
        RangeTable::even(buckets, &ids).unwrap(),
        0x5eed,
    );
    p.stash_capacity = stash;
    let mut t = TeaTable::new(p);
    t.log_writes(true);
    t
}

fn key(k: u16, prefix: bool) -> Vec<u8> {
    if prefix {
        vec![0xaa, 0xaa, 0xaa, 0xaa, (k >> 8) as u8, k as u8]
    } else {
        let mut v = (k as u32).wrapping_mul(0x9e37_79b9).to_be_bytes().to_vec();
        v.extend_from_slice(&k.to_le_bytes());
        v
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u8),
    Remove(u16),
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Small tables (they fill, displace and stash) updated only through remote writes: after
    /// every operation the remote copies equal the table's regions, and every key's lookup
    /// over the remote copies (each copy) with the switch's stash equals the oracle's answer.
    #[test]
    fn remote_copies_match_a_hashmap(
        ops in prop::collection::vec(prop_oneof![
            4 => (0u16..60, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            1 => (0u16..60).prop_map(Op::Remove),
        ], 0..200),
        slots in 1usize..=4,
        buckets in 1u64..16,
        servers in 1u16..=3,
        stash in 0usize..6,
        prefix in any::<bool>(),
    ) {
        let servers = servers.min(buckets as u16);
        let mut t = table(4, slots, buckets, servers, stash);
        let mut remote = Remote::of(&t);
        let mut oracle: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut stashed = 0;
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    let (k, v) = (key(k, prefix), vec![v, v ^ 1, v ^ 2, v ^ 3]);
                    match t.insert(&k, &v) {
                        Ok(p) => {
                            stashed += usize::from(p == Placed::Stash);
                            oracle.insert(k, v);
                        }
                        Err(InsertError::Full) => prop_assert!(!oracle.contains_key(&k)),
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                }
                Op::Remove(k) => {
                    let k = key(k, prefix);
                    prop_assert_eq!(t.remove(&k), oracle.remove(&k));
                }
            }
            remote.apply(&t.take_writes());
            for (r, copies) in remote.copies.iter().enumerate() {
                for (c, copy) in copies.iter().enumerate() {
                    prop_assert!(
                        copy.snapshot() == t.region(r as u32)[c].snapshot(),
                        "region {} copy {} differs", r, c
                    );
                }
            }
        }
        let _ = stashed;
        let st = t.stash_entries();
        for k in 0..60 {
            let k = key(k, prefix);
            for replica in 0..2 {
                let got = lookup(t.resolver(), &remote.copies, &st, replica, &k);
                prop_assert_eq!(got.as_ref(), oracle.get(&k));
            }
        }
    }
}

/// The stash used through remote writes: a tiny table filled past its buckets; keys in the
/// stash found from the switch's copy, the rest over the remote copies; removes move stash
/// keys into buckets by remote writes.
#[test]
fn stash_collisions_over_remote_writes() {
    let mut t = table(4, 2, 4, 2, 6);
    let mut remote = Remote::of(&t);
    let mut oracle = HashMap::new();
    for k in 0..200u16 {
        let (kb, v) = (key(k, true), vec![k as u8; 4]);
        match t.insert(&kb, &v) {
            Ok(_) => {
                oracle.insert(kb, v);
            }
            Err(InsertError::Full) => break,
            Err(e) => panic!("{e}"),
        }
        remote.apply(&t.take_writes());
    }
    assert_eq!(t.stash_len(), 6, "the stash filled");
    let st = t.stash_entries();
    for (k, v) in &oracle {
        let got = lookup(t.resolver(), &remote.copies, &st, 1, k);
        assert_eq!(got.as_ref(), Some(v));
    }
    let in_buckets: Vec<Vec<u8>> = oracle
        .keys()
        .filter(|k| !st.iter().any(|(s, _)| s == *k))
        .cloned()
        .collect();
    for k in in_buckets.iter().take(3) {
        t.remove(k);
        oracle.remove(k);
        remote.apply(&t.take_writes());
    }
    assert!(t.stash_len() < 6, "no stash key moved back");
    let st = t.stash_entries();
    for (k, v) in &oracle {
        let got = lookup(t.resolver(), &remote.copies, &st, 0, k);
        assert_eq!(got.as_ref(), Some(v));
    }
}

/// Readers racing remote writes: a writer thread inserts, updates and removes (with
/// displacements and the stash), ships every bucket write as a write request to both copies
/// and then publishes its stash; reader threads look keys up over the copies with read
/// requests. No value is ever torn (each is 12 copies of one byte and the key's id), and no
/// key that never leaves is ever missed.
#[test]
fn readers_racing_remote_writes_never_see_a_torn_entry() {
    const STABLE: u32 = 300;
    const CHURN: u32 = 800;
    let ids = [0u16, 1];
    let mut p = TableParams::new(
        Layout::new(4, 16, 2).unwrap(),
        RangeTable::even(512, &ids).unwrap(),
        0x5eed,
    );
    p.stash_capacity = 16;
    let mut t = TeaTable::new(p);
    t.log_writes(true);
    let val = |id: u32, gen: u8| {
        let mut v = vec![gen; 12];
        v.extend_from_slice(&id.to_le_bytes());
        v
    };
    for id in 0..STABLE {
        t.insert(&id.to_le_bytes(), &val(id, 0)).unwrap();
    }
    t.take_writes();
    let remote = Arc::new(Remote::of(&t));
    let stash: Arc<RwLock<Stash>> = Arc::new(RwLock::new(t.stash_entries()));
    let resolver = t.resolver().clone();
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|replica| {
            let (remote, stash, resolver) =
                (Arc::clone(&remote), Arc::clone(&stash), resolver.clone());
            let (stop, lookups) = (Arc::clone(&stop), Arc::clone(&lookups));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for id in (0..STABLE + CHURN).step_by(5) {
                        let st = stash.read().unwrap().clone();
                        match lookup(&resolver, &remote.copies, &st, replica, &id.to_le_bytes()) {
                            Some(v) => {
                                assert!(v[..12].iter().all(|&b| b == v[0]), "torn value {v:?}");
                                assert_eq!(v[12..], id.to_le_bytes(), "another key's value");
                            }
                            None => assert!(id >= STABLE, "stable key {id} missed"),
                        }
                        n += 1;
                    }
                }
                lookups.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    // The writer: the remote copies are written only through write requests.
    let mut x = 7u32;
    let (mut moves, mut writes, mut next_id) = (0, 0u64, 0u32);
    for round in 0..60_000u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let id = x % (STABLE + CHURN);
        let gen = (round % 251) as u8;
        if id < STABLE || round % 3 != 0 {
            match t.insert(&id.to_le_bytes(), &val(id, gen)) {
                Ok(Placed::Bucket { moves: m, .. }) => moves += m,
                Ok(_) => {}
                Err(e) => assert!(id >= STABLE && e == InsertError::Full, "{e}"),
            }
        } else {
            t.remove(&id.to_le_bytes());
        }
        for w in t.take_writes() {
            for copy in &remote.copies[w.address.region as usize] {
                next_id = next_id.wrapping_add(1);
                let mut d = Vec::new();
                WriteRequest {
                    request_id: next_id,
                    region: w.address.region,
                    offset: w.address.offset,
                    key: 0,
                    data: &w.image,
                }
                .emit(&mut d)
                .unwrap();
                let mut ack = Vec::new();
                assert_eq!(
                    serve_write(Some(copy), &WriteRequest::parse(&d).unwrap(), &mut ack),
                    Status::Ok
                );
                writes += 1;
            }
        }
        // The switch installs its new stash copy once the writes are acknowledged.
        *stash.write().unwrap() = t.stash_entries();
    }
    stop.store(true, Ordering::Relaxed);
    for h in readers {
        h.join().unwrap();
    }
    for (r, copies) in remote.copies.iter().enumerate() {
        for (c, copy) in copies.iter().enumerate() {
            assert!(copy.snapshot() == t.region(r as u32)[c].snapshot());
        }
    }
    println!(
        "{writes} remote bucket writes ({moves} displacements), {} lookups raced them, stash {}",
        lookups.load(Ordering::Relaxed),
        t.stash_len()
    );
    assert!(lookups.load(Ordering::Relaxed) > 1000);
    assert!(moves > 100, "only {moves} displacements");
}
