//! The table against a `HashMap` oracle, batched against single lookups, and the edge cases.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use sb_cuckoo::{CuckooTable, InsertError, Params, ParamsError};
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Op {
    Insert(u16, u8),
    Update(u16, u8),
    Remove(u16),
    Lookup(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u16>(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
        1 => (any::<u16>(), any::<u8>()).prop_map(|(k, v)| Op::Update(k, v)),
        2 => any::<u16>().prop_map(Op::Remove),
        2 => any::<u16>().prop_map(Op::Lookup),
    ]
}

/// A key of `kb` bytes from a small id, with a shared prefix (adversarial for weak hashes).
fn key(id: u16, kb: usize) -> Vec<u8> {
    let mut k = vec![0xAB; kb];
    k[kb - 2..].copy_from_slice(&id.to_le_bytes());
    k
}

fn value(k: u16, v: u8, vb: usize) -> Vec<u8> {
    (0..vb)
        .map(|i| v ^ (k as u8).wrapping_add(i as u8))
        .collect()
}

fn check_all(t: &CuckooTable, oracle: &HashMap<Vec<u8>, Vec<u8>>, kb: usize, vb: usize) {
    assert_eq!(t.len(), oracle.len());
    t.check_invariants().unwrap();
    let mut seen = HashMap::new();
    for (k, v) in t.iter() {
        assert!(seen.insert(k, v).is_none(), "key listed twice");
    }
    assert_eq!(&seen, oracle);
    // The same walk bucket by bucket (how a paged listing reads the table).
    let mut by_bucket = HashMap::new();
    for b in 0..t.buckets() + 1 {
        for (k, v) in t.bucket_entries(b) {
            assert!(by_bucket.insert(k, v).is_none(), "key in two buckets");
        }
    }
    assert_eq!(&by_bucket, oracle);
    // Every key in the oracle plus some absent ones, single and batched.
    let mut keys: Vec<Vec<u8>> = oracle.keys().cloned().collect();
    keys.extend((0..50u16).map(|i| key(i.wrapping_mul(977), kb)));
    let flat = keys.concat();
    let mut vals = vec![0u8; keys.len() * vb];
    let mut found = vec![false; keys.len()];
    let hits = t.lookup_batch(&flat, &mut vals, &mut found);
    let hashes: Vec<_> = keys.iter().map(|k| t.hash(k)).collect();
    let mut vals2 = vec![0u8; keys.len() * vb];
    let mut found2 = vec![false; keys.len()];
    assert_eq!(
        t.lookup_batch_hashes(&flat, &hashes, &mut vals2, &mut found2),
        hits
    );
    assert_eq!(found, found2);
    for (i, k) in keys.iter().enumerate() {
        let single = t.lookup(k);
        assert_eq!(single.as_ref(), oracle.get(k));
        assert_eq!(found[i], single.is_some());
        if let Some(v) = single {
            assert_eq!(&vals[i * vb..(i + 1) * vb], &v[..]);
            assert_eq!(&vals2[i * vb..(i + 1) * vb], &v[..]);
        }
    }
    assert_eq!(hits, found.iter().filter(|&&f| f).count());
}

fn run_ops(kb: usize, vb: usize, cap: usize, slots: usize, ops: &[Op]) {
    let mut p = Params::new(kb, vb, cap).with_seed(0x5eed);
    p.slots_per_bucket = slots;
    let mut t = CuckooTable::new(p).unwrap();
    let mut oracle: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for op in ops {
        match *op {
            Op::Insert(k, v) => {
                let (k, v) = (key(k, kb), value(k, v, vb));
                match t.insert(&k, &v) {
                    Ok(new) => assert_eq!(new, oracle.insert(k, v).is_none()),
                    Err(InsertError::Full { len, capacity }) => {
                        assert!(
                            !oracle.contains_key(&k),
                            "a present key is always updatable"
                        );
                        assert_eq!(len, oracle.len());
                        assert_eq!(capacity, t.capacity());
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            Op::Update(k, v) => {
                let (k, v) = (key(k, kb), value(k, v, vb));
                let present = oracle.contains_key(&k);
                assert_eq!(t.update(&k, &v).unwrap(), present);
                if present {
                    oracle.insert(k, v);
                }
            }
            Op::Remove(k) => {
                let k = key(k, kb);
                assert_eq!(t.remove(&k), oracle.remove(&k).is_some());
            }
            Op::Lookup(k) => {
                let k = key(k, kb);
                assert_eq!(t.lookup(&k).as_ref(), oracle.get(&k));
            }
        }
    }
    check_all(&t, &oracle, kb, vb);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Small tables (they fill up and report Full), several key/value sizes.
    #[test]
    fn ops_match_oracle(
        kv in prop::sample::select(vec![(4usize, 1usize), (13, 16), (16, 8), (40, 64), (64, 256), (9, 3)]),
        slots in prop::sample::select(vec![4usize, 8]),
        cap in 1usize..200,
        ops in prop::collection::vec(op(), 0..600),
    ) {
        run_ops(kv.0, kv.1, cap, slots, &ops);
    }

    /// Keys drawn from a small id range: many updates, deletes and re-inserts of the same keys.
    #[test]
    fn churn_matches_oracle(
        slots in prop::sample::select(vec![4usize, 8]),
        ops in prop::collection::vec(op().prop_map(|o| match o {
            Op::Insert(k, v) => Op::Insert(k % 64, v),
            Op::Update(k, v) => Op::Update(k % 64, v),
            Op::Remove(k) => Op::Remove(k % 64),
            Op::Lookup(k) => Op::Lookup(k % 64),
        }), 0..800),
    ) {
        run_ops(13, 16, 72, slots, &ops);
    }
}

/// Fill to the first failure, delete most keys, refill: the oracle agrees at every stage.
#[test]
fn fill_to_max_then_delete_and_refill() {
    for (kb, vb, slots) in [(13, 16, 8), (13, 16, 4), (4, 8, 4), (40, 64, 8)] {
        let mut p = Params::new(kb, vb, 4000).with_seed(0x5eed);
        p.slots_per_bucket = slots;
        let mut t = CuckooTable::new(p).unwrap();
        let mut oracle = HashMap::new();
        let mut rng = rand::rngs::StdRng::seed_from_u64(kb as u64 * 31 + slots as u64);
        let mut fails = 0;
        while fails < 20 {
            let mut k = vec![0u8; kb];
            rng.fill(&mut k[..]);
            let v: Vec<u8> = (0..vb).map(|_| rng.gen()).collect();
            match t.insert(&k, &v) {
                Ok(_) => {
                    oracle.insert(k, v);
                }
                Err(InsertError::Full { .. }) => fails += 1,
                Err(e) => panic!("{e}"),
            }
        }
        let lf = t.load_factor();
        assert!(lf > 0.9, "{kb}/{vb}/{slots}: max load {lf}");
        check_all(&t, &oracle, kb, vb);
        let keys: Vec<_> = oracle.keys().cloned().collect();
        for k in keys.iter().take(keys.len() * 9 / 10) {
            assert!(t.remove(k));
            oracle.remove(k);
        }
        check_all(&t, &oracle, kb, vb);
        for i in 0..(t.capacity() / 2) {
            let k: Vec<u8> = (0..kb)
                .map(|j| (i * 7 + j) as u8 ^ (i >> 8) as u8)
                .collect();
            t.insert(&k, &vec![i as u8; vb]).unwrap();
            oracle.insert(k, vec![i as u8; vb]);
        }
        check_all(&t, &oracle, kb, vb);
    }
}

#[test]
fn growth_keeps_every_key() {
    let mut p = Params::new(16, 8, 64).with_seed(0x5eed);
    p.grow = true;
    let mut t = CuckooTable::new(p).unwrap();
    for i in 0u64..5000 {
        let k = [i.to_le_bytes(), (!i).to_le_bytes()].concat();
        assert!(t.insert(&k, &i.to_le_bytes()).unwrap());
    }
    assert!(t.capacity() >= 5000);
    assert_eq!(t.len(), 5000);
    for i in 0u64..5000 {
        let k = [i.to_le_bytes(), (!i).to_le_bytes()].concat();
        assert_eq!(t.lookup(&k), Some(i.to_le_bytes().to_vec()));
    }
}

#[test]
fn errors_are_typed() {
    assert_eq!(
        CuckooTable::new(Params::new(3, 8, 10).with_seed(0x5eed)).unwrap_err(),
        ParamsError::KeyBytes(3)
    );
    assert_eq!(
        CuckooTable::new(Params::new(65, 8, 10).with_seed(0x5eed)).unwrap_err(),
        ParamsError::KeyBytes(65)
    );
    assert_eq!(
        CuckooTable::new(Params::new(8, 0, 10).with_seed(0x5eed)).unwrap_err(),
        ParamsError::ValueBytes(0)
    );
    assert_eq!(
        CuckooTable::new(Params::new(8, 257, 10).with_seed(0x5eed)).unwrap_err(),
        ParamsError::ValueBytes(257)
    );
    assert_eq!(
        CuckooTable::new(Params::new(8, 8, 0).with_seed(0x5eed)).unwrap_err(),
        ParamsError::Capacity(0)
    );
    let mut p = Params::new(8, 8, 10).with_seed(0x5eed);
    p.slots_per_bucket = 6;
    assert_eq!(
        CuckooTable::new(p).unwrap_err(),
        ParamsError::SlotsPerBucket(6)
    );
    let mut t = CuckooTable::new(Params::new(8, 4, 10).with_seed(0x5eed)).unwrap();
    assert_eq!(
        t.insert(b"short", b"abcd"),
        Err(InsertError::KeyLength {
            expected: 8,
            got: 5
        })
    );
    assert_eq!(
        t.insert(b"12345678", b"abc"),
        Err(InsertError::ValueLength {
            expected: 4,
            got: 3
        })
    );
    assert_eq!(t.lookup(b"short"), None);
    assert!(!t.remove(b"short"));
    // A one-bucket table: the ninth key does not fit and the table says so.
    let mut t = CuckooTable::new(Params::new(8, 4, 8).with_seed(0x5eed)).unwrap();
    for i in 0u64..8 {
        t.insert(&i.to_le_bytes(), b"abcd").unwrap();
    }
    assert_eq!(
        t.insert(&99u64.to_le_bytes(), b"abcd"),
        Err(InsertError::Full {
            len: 8,
            capacity: 8
        })
    );
    assert_eq!(t.len(), 8);
    assert!(t.memory_bytes() > 0);
}

#[test]
fn batched_equals_single_on_every_key_and_batch_size() {
    let mut t = CuckooTable::new(Params::new(13, 16, 20_000).with_seed(0x5eed)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut keys = Vec::new();
    for i in 0..36_000u32 {
        let mut k = [0u8; 13];
        rng.fill(&mut k[..]);
        if i % 2 == 0 && t.insert(&k, &[i as u8; 16]).is_ok() {
            keys.push(k);
        } else {
            keys.push(k); // absent (never inserted)
        }
    }
    let flat = keys.concat();
    for batch in [1usize, 3, 17, 32, 33, 64, 1000] {
        for (ci, chunk) in flat.chunks(batch * 13).enumerate() {
            let n = chunk.len() / 13;
            let mut vals = vec![0u8; n * 16];
            let mut found = vec![false; n];
            t.lookup_batch(chunk, &mut vals, &mut found);
            for i in 0..n {
                let k = &keys[ci * batch + i];
                match t.lookup(k) {
                    Some(v) => {
                        assert!(found[i]);
                        assert_eq!(&vals[i * 16..(i + 1) * 16], &v[..]);
                    }
                    None => assert!(!found[i]),
                }
            }
        }
    }
}

/// Under churn at high load the overflow counts stay close to exact: counters stuck at their
/// maximum are recounted once keys have left alternates past them often enough (without the
/// recount, 2-4% of the counters of such a table end up stuck after this much churn).
#[test]
fn churn_keeps_overflow_counts_near_exact() {
    let mut t = CuckooTable::new(Params::fast(13, 16, 1 << 13).with_seed(0x5eed)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let target = t.capacity() * 9 / 10;
    let mut present: Vec<[u8; 13]> = Vec::with_capacity(target);
    let mut k = [0u8; 13];
    let mut most_stuck = 0.0f64;
    for round in 0..60 {
        if round > 0 {
            for _ in 0..target / 10 {
                let i = rng.gen_range(0..present.len());
                assert!(t.remove(&present.swap_remove(i)));
            }
        }
        while present.len() < target {
            rng.fill(&mut k[..]);
            if t.insert(&k, &[round as u8; 16]).unwrap() {
                present.push(k);
            }
        }
        t.check_invariants().unwrap();
        let (stuck, all) = t.saturated_counters();
        most_stuck = most_stuck.max(stuck as f64 / all as f64);
    }
    for p in &present {
        assert!(t.contains(p));
    }
    assert!(most_stuck < 0.01, "{most_stuck} of the counters stuck");
}
