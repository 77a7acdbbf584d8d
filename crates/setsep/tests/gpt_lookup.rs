//! `GptLookup`: the fixed table, the live table and every pointer to them answer the same
//! through the one trait, for the build's keys and for random ones.

use proptest::prelude::*;
use sb_setsep::{BuildOptions, GptLookup, LiveSetSep, SetSep};
use std::sync::Arc;

/// Every answer of `g` through the trait, for `keys`: single, by hash, batched.
fn answers<G: GptLookup + ?Sized>(g: &G, keys: &[Vec<u8>]) -> (Vec<u16>, Vec<u16>) {
    let hs: Vec<_> = keys.iter().map(|k| g.hash_key(k)).collect();
    let mut batch = vec![u16::MAX; keys.len()];
    g.lookup_batch_hashes(&hs, &mut batch);
    let single: Vec<u16> = keys.iter().map(|k| g.lookup(k)).collect();
    let by_hash: Vec<u16> = hs.iter().map(|&h| g.lookup_hash(h)).collect();
    assert_eq!(single, by_hash);
    (single, batch)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn every_table_answers_as_setsep(
        n in 1usize..3000,
        seed in any::<u64>(),
        probes in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..40), 1..200),
    ) {
        let keys: Vec<Vec<u8>> = (0..n as u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed).to_le_bytes().to_vec())
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let values: Vec<u16> = (0..n).map(|i| (i % 4) as u16).collect();
        let opts = BuildOptions { value_bits: 2, threads: 1, seed, build_id: 1, ..BuildOptions::default() };
        let fixed = SetSep::build(&refs, &values, &opts).expect("builds");
        let live = LiveSetSep::new(fixed.clone());
        let mut all = keys.clone();
        all.extend(probes);
        let want = answers(&fixed, &all);
        prop_assert_eq!(&want.0, &want.1);
        prop_assert_eq!(&want.0[..n], &values[..]);
        let arc_fixed: Arc<SetSep> = Arc::new(fixed.clone());
        let arc_live: Arc<LiveSetSep> = Arc::new(live);
        let dynamic: Box<dyn GptLookup> = Box::new(fixed.clone());
        for (name, got) in [
            ("live", answers(&*arc_live, &all)),
            ("&live", answers(&&*arc_live, &all)),
            ("Arc<SetSep>", answers(&arc_fixed, &all)),
            ("Arc<LiveSetSep>", answers(&arc_live, &all)),
            ("Box<dyn>", answers(&dynamic, &all)),
        ] {
            prop_assert_eq!(&got, &want, "{}", name);
        }
        for g in [&fixed as &dyn GptLookup, &*arc_live, &dynamic] {
            prop_assert_eq!(g.len(), n as u64);
            prop_assert_eq!(g.value_bits(), 2);
            prop_assert_eq!(g.seed(), seed);
            prop_assert_eq!(g.fingerprint(), fixed.fingerprint());
            prop_assert_eq!(g.stats().keys, fixed.stats().keys);
            prop_assert_eq!(g.to_fixed().map(|t| t.to_bytes()), Some(fixed.to_bytes()));
        }
    }
}
