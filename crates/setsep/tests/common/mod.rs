//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::HashMap;

pub use sb_common::splitmix64 as splitmix;

/// `n` distinct random keys of length `len` (or random lengths 4..=64 when `len` is 0) with
/// random values of `vbits` bits.
pub fn random_set(n: usize, len: usize, vbits: u8, seed: u64) -> (Vec<Vec<u8>>, Vec<u16>) {
    let mut s = seed;
    let mut seen = HashMap::new();
    let mut keys = Vec::with_capacity(n);
    while keys.len() < n {
        let l = if len == 0 {
            4 + (splitmix(&mut s) % 61) as usize
        } else {
            len
        };
        let k: Vec<u8> = (0..l).map(|_| splitmix(&mut s) as u8).collect();
        if seen.insert(k.clone(), ()).is_none() {
            keys.push(k);
        }
    }
    let mask = ((1u32 << vbits) - 1) as u16;
    let values = (0..n).map(|_| splitmix(&mut s) as u16 & mask).collect();
    (keys, values)
}

pub fn refs(keys: &[Vec<u8>]) -> Vec<&[u8]> {
    keys.iter().map(|k| k.as_slice()).collect()
}

/// Checks every lookup path of `t` against `keys`/`values`.
pub fn check_all(t: &sb_setsep::SetSep, keys: &[&[u8]], values: &[u16]) {
    for (i, (k, &v)) in keys.iter().zip(values).enumerate() {
        assert_eq!(t.lookup(k), v, "single lookup of key {i}");
        assert_eq!(t.lookup_hash(t.hash_key(k)), v, "hash lookup of key {i}");
    }
    for batch in [1usize, 7, 32, 33, 1000] {
        let mut out = vec![u16::MAX; keys.len()];
        for (kc, oc) in keys.chunks(batch).zip(out.chunks_mut(batch)) {
            t.lookup_batch(kc, oc);
        }
        assert_eq!(out, values, "batched lookups, batch {batch}");
    }
    let hs: Vec<_> = keys.iter().map(|k| t.hash_key(k)).collect();
    let mut out = vec![u16::MAX; keys.len()];
    t.lookup_batch_hashes(&hs, &mut out);
    assert_eq!(out, values, "batched hash lookups");
}
