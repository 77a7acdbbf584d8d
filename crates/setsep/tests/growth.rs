//! Headroom and growth: a table built with `capacity` has the blocks for it; an updatable table
//! with `Growth` grows as inserts fill it, answers every key, and replicas follow it through
//! deltas and, after each growth, the grown table's image.

mod common;

use common::{random_set, refs};
use sb_setsep::{num_blocks, BuildOptions, Config, Delta, DeltaError, Growth, SetSep, Updatable};
use std::collections::HashMap;

fn opts() -> BuildOptions {
    BuildOptions {
        config: Config::C16_8,
        value_bits: 2,
        threads: 1,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    }
}

#[test]
fn capacity_gives_headroom() {
    let (keys, values) = random_set(1000, 13, 2, 3);
    let kr = refs(&keys);
    let t = SetSep::build(
        &kr,
        &values,
        &BuildOptions {
            capacity: 5000,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(t.num_blocks(), num_blocks(5000));
    common::check_all(&t, &kr, &values);
    // Fewer than the keys given: the keys decide.
    let t = SetSep::build(
        &kr,
        &values,
        &BuildOptions {
            capacity: 10,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(t.num_blocks(), num_blocks(1000));
}

#[test]
fn growing_owner_answers_every_key_and_replicas_follow() {
    let (keys, values) = random_set(12_000, 13, 2, 9);
    let kr = refs(&keys);
    let mut owner = Updatable::build(&kr[..2048], &values[..2048], &opts())
        .unwrap()
        .with_growth(Growth::default());
    let mut oracle: HashMap<&[u8], u16> = kr[..2048]
        .iter()
        .copied()
        .zip(values[..2048].iter().copied())
        .collect();
    let mut replica = SetSep::from_bytes(&owner.table().to_bytes()).unwrap();
    // A replica that missed the last growth's image.
    let mut stale: Option<SetSep> = None;
    let (mut seen_growths, mut refused, mut block_deltas) = (0, 0, 0u64);
    let mut worst_fb = 0f64;
    for i in 2048..kr.len() {
        // Deltas travel as bytes (block deltas included).
        let d = Delta::from_bytes(&owner.insert(kr[i], values[i]).unwrap().to_bytes()).unwrap();
        block_deltas += d.is_block() as u64;
        oracle.insert(kr[i], values[i]);
        if let Some(mut old) = stale.take() {
            // A delta of the grown table does not fit the table before the growth.
            let before = old.to_bytes();
            assert!(matches!(old.apply_delta(&d), Err(DeltaError::Mismatch(_))));
            assert_eq!(old.to_bytes(), before);
            refused += 1;
        }
        // The delta was made on the table before any growth this insert caused.
        replica.apply_delta(&d).unwrap();
        if owner.growths() != seen_growths {
            seen_growths = owner.growths();
            let grown = owner.table();
            assert!(grown.num_blocks() > replica.num_blocks());
            assert_eq!(grown.seq(), 0);
            stale = Some(replica);
            // The replica follows by loading the grown table's image.
            replica = SetSep::from_bytes(&grown.to_bytes()).unwrap();
        }
        assert_eq!(replica.to_bytes(), owner.table().to_bytes());
        if i % 128 == 0 {
            worst_fb = worst_fb.max(t_fallback(&owner) as f64 / owner.len() as f64);
        }
    }
    assert!(owner.growths() >= 3, "{} growths", owner.growths());
    // Groups that would have gone to the fallback table re-balanced their blocks instead:
    // fallback stays under 0.1% of the keys all along (without the re-balance it does not).
    assert!(worst_fb <= 0.001, "fallback reached {worst_fb} of the keys");
    assert_eq!(block_deltas, owner.rebalances());
    assert!(owner.rebalances() > 0);
    assert!(refused >= owner.growths() - 1);
    let t = owner.table();
    assert_eq!(t.len() as usize, oracle.len());
    // The load stays between the growth bounds (keys per 1024-key block).
    let load = t.len() as f64 / (t.num_blocks() * 1024) as f64;
    assert!((0.85..=1.0).contains(&load), "load {load}");
    for (k, v) in &oracle {
        assert_eq!(t.lookup(k), *v);
        assert_eq!(owner.get(k), Some(*v));
    }
}

fn t_fallback(u: &Updatable) -> u64 {
    u.table().stats().fallback_keys
}
