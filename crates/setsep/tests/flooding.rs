//! Hash flooding: keys crafted against the seed words of the key hash build into a normal
//! table, and a default build draws its seed from the OS and keeps it in the image.

use sb_common::hash::seed_words;
use sb_setsep::{BuildOptions, Config, SetSep, Updatable};

/// `n` distinct 5-tuple keys of `len` bytes (13 or 37) whose first word is the seed word `t`:
/// under version 1 of the hash they all had one 128-bit hash.
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

/// Regression: the build refused these keys with `HashCollision` (all shared one hash); now
/// they build, answer, and leave no more fallback than random keys do.
#[test]
fn crafted_keys_build_a_normal_table() {
    let seed = 0x5eed_5e75_e900_0001;
    for len in [13usize, 37] {
        let keys = crafted(seed, len, 20_000);
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let values: Vec<u16> = (0..keys.len()).map(|i| (i % 4) as u16).collect();
        let opts = BuildOptions {
            config: Config::C16_8,
            value_bits: 2,
            threads: 1,
            seed,
            build_id: 1,
            ..BuildOptions::default()
        };
        let t = match SetSep::build(&refs, &values, &opts) {
            Ok(t) => t,
            Err(e) => panic!("{len}-byte crafted keys: {e}"),
        };
        let mut out = vec![0u16; keys.len()];
        t.lookup_batch(&refs, &mut out);
        assert_eq!(out, values);
        let st = t.stats();
        assert!(
            st.fallback_keys * 100 < keys.len() as u64,
            "{len}-byte: {} fallback keys",
            st.fallback_keys
        );
    }
}

/// Default options draw a new seed per build; the seed is in the image, and a reloaded
/// table (and a replica of an updatable table) hashes with it.
#[test]
fn default_seeds_are_random_and_travel_with_the_image() {
    let keys: Vec<[u8; 4]> = (0u32..3000).map(|i| i.to_le_bytes()).collect();
    let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let values: Vec<u16> = (0..3000).map(|i| (i % 2) as u16).collect();
    let a = BuildOptions::default();
    let b = BuildOptions::default();
    assert_ne!(a.seed, b.seed, "two default builds, two seeds");
    let mut u = Updatable::build(&refs, &values, &a).unwrap();
    assert_eq!(u.table().seed(), a.seed);
    let mut replica = SetSep::from_bytes(&u.table().to_bytes()).unwrap();
    assert_eq!(replica.seed(), a.seed);
    let d = u.insert(b"new!", 1).unwrap();
    replica.apply_delta(&d).unwrap();
    assert_eq!(replica.lookup(b"new!"), 1);
    assert_eq!(replica.to_bytes(), u.table().to_bytes());
}
