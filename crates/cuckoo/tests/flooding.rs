//! Hash flooding: keys crafted against the key hash's seed words do not fill a table, growth
//! stops with a typed error instead of doubling for ever, and tables get random seeds unless
//! given one.

use sb_common::hash::seed_words;
use sb_cuckoo::{CuckooTable, InsertError, Params, MIN_GROW_LOAD};

/// `n` distinct keys of `len` bytes (13: an IPv4 5-tuple, 37: an IPv6 one) built against
/// version 1 of the hash, whose product `(a ^ t) * (b ^ s)` was 0 when a 16-byte block's first
/// word equalled the seed word `t`: every one of them hashed alike under that seed.
fn crafted(seed: u64, len: usize, n: u32) -> Vec<Vec<u8>> {
    let t = seed_words(seed, len).1.to_le_bytes();
    (0..n)
        .map(|i| {
            let mut k = vec![0u8; len];
            k[..8].copy_from_slice(&t);
            k[9..13].copy_from_slice(&i.to_le_bytes());
            k
        })
        .collect()
}

/// Regression: a 1M-slot table reported `Full` after 16 crafted 13-byte keys under the old
/// hash; now 20,000 of them (13- and 37-byte) go in, at the seed the keys were crafted for.
#[test]
fn crafted_keys_do_not_fill_the_table() {
    for seed in [0u64, 0x5eed] {
        for len in [13usize, 37] {
            let mut t = CuckooTable::new(Params::new(len, 8, 1 << 20).with_seed(seed)).unwrap();
            let keys = crafted(seed, len, 20_000);
            for (i, k) in keys.iter().enumerate() {
                if let Err(e) = t.insert(k, &(i as u64).to_le_bytes()) {
                    panic!("seed {seed:#x}, {len}-byte keys: insert {i} failed: {e}");
                }
            }
            assert_eq!(t.len(), keys.len());
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(t.lookup(k), Some((i as u64).to_le_bytes().to_vec()));
            }
        }
    }
}

/// Keys whose two candidate buckets are both among buckets 0 and 1 of a table with these
/// parameters (found by trying ids: about one in 4,000 qualifies).
fn crowding_keys(p: &Params, n: usize) -> Vec<[u8; 8]> {
    (0u64..)
        .map(|i| i.to_le_bytes())
        .filter(|k| {
            let c = p.candidates(k);
            c.b1 < 2 && c.b2 < 2
        })
        .take(n)
        .collect()
}

/// A growing table that runs out of room while less than half full does not double: it says
/// `Crowded` and keeps what it had (before, it doubled until the keys happened to spread).
#[test]
fn crowded_keys_stop_growth_with_a_typed_error() {
    let mut p = Params::new(8, 4, 1024).with_seed(7);
    p.grow = true;
    let mut t = CuckooTable::new(p).unwrap();
    let keys = crowding_keys(&p, 17);
    let mut refused = None;
    for (i, k) in keys.iter().enumerate() {
        match t.insert(k, b"abcd") {
            Ok(true) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
            Ok(false) => unreachable!("distinct keys"),
        }
    }
    // Two 8-slot buckets hold 16 keys; the 17th finds no room at load 16/1024.
    let (i, e) = refused.expect("the 17th crowding key is refused");
    assert_eq!(i, 16);
    assert_eq!(
        e,
        InsertError::Crowded {
            len: 16,
            capacity: 1024
        }
    );
    assert!(t.load_factor() < MIN_GROW_LOAD);
    assert_eq!(t.capacity(), 1024, "the table did not grow");
    for k in &keys[..16] {
        assert!(t.contains(k));
    }
    assert_eq!(
        t.grow(),
        Err(InsertError::Crowded {
            len: 16,
            capacity: 1024
        })
    );
}

/// Growth stops at `max_capacity` with `GrowthLimit`; below it, the table grows.
#[test]
fn growth_stops_at_max_capacity() {
    let mut p = Params::new(8, 8, 256).with_seed(9);
    p.grow = true;
    p.max_capacity = 2048;
    let mut t = CuckooTable::new(p).unwrap();
    let mut i = 0u64;
    let err = loop {
        match t.insert(&i.to_le_bytes(), &i.to_le_bytes()) {
            Ok(new) => assert!(new),
            Err(e) => break e,
        }
        i += 1;
    };
    assert_eq!(
        err,
        InsertError::GrowthLimit {
            capacity: 2048,
            max_capacity: 2048
        }
    );
    assert_eq!(t.capacity(), 2048);
    assert_eq!(t.len() as u64, i);
    assert!(t.load_factor() > 0.9, "load {}", t.load_factor());
    for j in 0..i {
        assert_eq!(t.lookup(&j.to_le_bytes()), Some(j.to_le_bytes().to_vec()));
    }
}

/// `Params::new` draws a fresh seed; `with_seed` pins it.
#[test]
fn seeds_are_random_unless_given() {
    let seeds: std::collections::HashSet<u64> =
        (0..8).map(|_| Params::new(8, 8, 64).seed).collect();
    assert_eq!(seeds.len(), 8, "eight tables, eight seeds");
    assert_eq!(Params::new(8, 8, 64).with_seed(42).seed, 42);
}
