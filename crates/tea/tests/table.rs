//! The TEA table against a HashMap oracle, and readers racing the writer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use sb_tea::{InsertError, Layout, Placed, RangeTable, TableParams, TeaTable};

fn table(
    key_len: usize,
    value_len: usize,
    slots: usize,
    buckets: u64,
    servers: u16,
    stash: usize,
) -> TeaTable {
    let ids: Vec<u16> = (0..servers).collect();
    let mut p = TableParams::new(
        Layout::new(key_len, value_len, slots).unwrap(),
        RangeTable::even(buckets, &ids).unwrap(),
        0x5eed,
    );
    p.stash_capacity = stash;
    TeaTable::new(p)
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u8),
    Remove(u16),
    Get(u16),
}

fn ops(keys: u16) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => (0..keys, any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0..keys).prop_map(Op::Remove),
            2 => (0..keys).prop_map(Op::Get),
        ],
        0..400,
    )
}

/// A 6-byte key from a number; `prefix` keys share their first bytes (adversarial for a weak
/// hash).
fn key(k: u16, prefix: bool) -> Vec<u8> {
    if prefix {
        vec![0xaa, 0xaa, 0xaa, 0xaa, (k >> 8) as u8, k as u8]
    } else {
        let mut v = (k as u32).wrapping_mul(0x9e37_79b9).to_be_bytes().to_vec();
        v.extend_from_slice(&k.to_le_bytes());
        v
    }
}

fn value(v: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| v.wrapping_add(i as u8)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random operation sequences on small tables (so they fill, displace and stash): every
    /// answer equals the oracle's, the invariants hold after every step, and every reader (the
    /// remote protocol over each copy) agrees with the oracle.
    #[test]
    fn matches_hashmap(
        ops in ops(120),
        slots in 1usize..=4,
        buckets in 1u64..24,
        servers in 1u16..=3,
        stash in 0usize..6,
        prefix in any::<bool>(),
        value_len in 0usize..5,
    ) {
        let servers = servers.min(buckets as u16);
        let mut t = table(6, value_len, slots, buckets, servers, stash);
        let readers = [t.reader(0), t.reader(1)];
        let mut oracle: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut stashed = 0;
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    let (k, v) = (key(k, prefix), value(v, value_len));
                    match t.insert(&k, &v) {
                        Ok(Placed::Updated) => prop_assert!(oracle.contains_key(&k)),
                        Ok(p) => {
                            prop_assert!(!oracle.contains_key(&k));
                            if p == Placed::Stash { stashed += 1; }
                        }
                        Err(InsertError::Full) => {
                            prop_assert!(!oracle.contains_key(&k));
                            prop_assert_eq!(t.stash_len(), stash);
                            continue;
                        }
                        Err(e) => prop_assert!(false, "{e}"),
                    }
                    oracle.insert(k, v);
                }
                Op::Remove(k) => {
                    let k = key(k, prefix);
                    prop_assert_eq!(t.remove(&k), oracle.remove(&k));
                }
                Op::Get(k) => {
                    let k = key(k, prefix);
                    prop_assert_eq!(t.get(&k), oracle.get(&k).cloned());
                }
            }
            prop_assert_eq!(t.len(), oracle.len());
            prop_assert!(t.stash_len() <= stash);
            t.check_invariants().map_err(TestCaseError::fail)?;
        }
        let _ = stashed;
        for k in 0..120 {
            let k = key(k, prefix);
            for r in &readers {
                let (got, reads) = r.lookup(&k).unwrap();
                prop_assert_eq!(got.as_ref(), oracle.get(&k));
                prop_assert!(reads <= 3);
            }
        }
    }
}

/// At high load the stash is used, and keys in it are found; deletes move them back.
#[test]
fn stash_at_high_load() {
    let mut t = table(8, 4, 2, 16, 2, 8);
    let mut oracle = HashMap::new();
    let mut i = 0u64;
    loop {
        let (k, v) = (i.to_le_bytes(), (i as u32).to_le_bytes());
        match t.insert(&k, &v) {
            Ok(_) => {
                oracle.insert(k, v);
            }
            Err(InsertError::Full) => break,
            Err(e) => panic!("{e}"),
        }
        i += 1;
    }
    assert_eq!(t.stash_len(), 8);
    assert!(
        t.len() as u64 > t.capacity() * 8 / 10,
        "{} of {}",
        t.len(),
        t.capacity()
    );
    let r = t.reader(1);
    for (k, v) in &oracle {
        assert_eq!(r.lookup(k).unwrap().0.as_deref(), Some(&v[..]));
        assert_eq!(t.get(k).as_deref(), Some(&v[..]));
    }
    // Removing bucket keys lets stash keys move into buckets.
    let bucket_keys: Vec<_> = oracle
        .keys()
        .copied()
        .filter(|k| !t.stash_entries().iter().any(|(s, _)| s == k))
        .collect();
    for k in bucket_keys.iter().take(10) {
        assert!(t.remove(k).is_some());
        oracle.remove(k);
    }
    assert!(t.stash_len() < 8, "stash still {}", t.stash_len());
    t.check_invariants().unwrap();
    for (k, v) in &oracle {
        assert_eq!(r.lookup(k).unwrap().0.as_deref(), Some(&v[..]));
    }
}

/// Fills a larger table with random keys until the first failure: the load reached (before the
/// stash) is what 4-slot bucketed cuckoo hashing with a BFS gives.
#[test]
fn load_factor_before_the_stash() {
    let mut t = table(13, 6, 4, 4096, 4, 16);
    let mut i = 0u64;
    let mut first_stash = None;
    while t
        .insert(&[&i.to_le_bytes()[..], &[7u8; 5]].concat(), &[1u8; 6])
        .is_ok()
    {
        if first_stash.is_none() && t.stash_len() > 0 {
            first_stash = Some(t.len() - 1);
        }
        i += 1;
    }
    let load = first_stash.unwrap() as f64 / t.capacity() as f64;
    println!(
        "load before the first stash entry: {load:.3} ({} slots)",
        t.capacity()
    );
    assert!(load > 0.93, "load {load}");
    t.check_invariants().unwrap();
}

/// Readers racing the writer: values are never torn, keys that never leave are never missed,
/// and the writer's inserts and deletes (with displacements) and value updates go on all the
/// while. Each value is 16 copies of one byte plus the key's own id, so a torn or misplaced
/// value shows.
#[test]
fn readers_never_see_torn_values() {
    const STABLE: u32 = 300;
    const CHURN: u32 = 800;
    // 2-slot buckets, 1024 slots, about 830 keys present: many displacements.
    let mut t = table(4, 20, 2, 512, 2, 16);
    let val = |id: u32, gen: u8| {
        let mut v = vec![gen; 16];
        v.extend_from_slice(&id.to_le_bytes());
        v
    };
    for id in 0..STABLE {
        t.insert(&id.to_le_bytes(), &val(id, 0)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let reader = t.reader(r);
            let (stop, lookups) = (Arc::clone(&stop), Arc::clone(&lookups));
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for id in (0..STABLE + CHURN).step_by(7) {
                        let (got, _) = reader.lookup(&id.to_le_bytes()).expect("lookup");
                        match got {
                            Some(v) => {
                                assert!(v[..16].iter().all(|&b| b == v[0]), "torn value {v:?}");
                                assert_eq!(v[16..], id.to_le_bytes(), "another key's value");
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
    let mut x = 1u32;
    let mut moves = 0;
    for round in 0..400_000u32 {
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
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    t.check_invariants().unwrap();
    println!(
        "{} bucket writes ({moves} displacements), {} lookups raced them, stash {}",
        t.bucket_writes(),
        lookups.load(Ordering::Relaxed),
        t.stash_len()
    );
    assert!(lookups.load(Ordering::Relaxed) > 1000);
    assert!(moves > 1000, "only {moves} displacements");
}
