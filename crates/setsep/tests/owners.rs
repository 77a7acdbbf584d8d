//! A table with several owners, one per block range (how `sb-control` runs the GPT): each owner
//! builds an `Updatable` from its keys alone with the cluster's block count, replicas assemble
//! the owners' pieces, apply each owner's deltas in that owner's order (owners interleaved at
//! random) and end byte-identical to each other and right for every key.

use proptest::prelude::*;
use sb_setsep::{block_of_key, BuildOptions, Config, SetSep, Updatable};
use std::collections::HashMap;

const OWNERS: u64 = 3;
const CAPACITY: u64 = 8192;

fn opts() -> BuildOptions {
    BuildOptions {
        config: Config::C16_8,
        value_bits: 2,
        threads: 1,
        seed: 7,
        build_id: 11,
        capacity: CAPACITY,
        ..BuildOptions::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    let mut k = b"ue-key-".to_vec();
    k.extend_from_slice(&i.to_le_bytes());
    k
}

fn ranges(total: u64) -> Vec<std::ops::Range<u64>> {
    (0..OWNERS)
        .map(|o| o * total / OWNERS..(o + 1) * total / OWNERS)
        .collect()
}

fn owner_of(k: &[u8], total: u64) -> usize {
    let b = block_of_key(k, 7, total);
    ranges(total).iter().position(|r| r.contains(&b)).unwrap()
}

/// Owners built from their keys, and the replica the pieces assemble.
fn setup(n: u32) -> (Vec<Updatable>, SetSep, HashMap<Vec<u8>, u16>) {
    let total = sb_setsep::num_blocks(CAPACITY);
    let oracle: HashMap<Vec<u8>, u16> = (0..n).map(|i| (key(i), (i % 4) as u16)).collect();
    let mut owners = Vec::new();
    for o in 0..OWNERS as usize {
        let mine: Vec<(&Vec<u8>, &u16)> = oracle
            .iter()
            .filter(|(k, _)| owner_of(k, total) == o)
            .collect();
        let keys: Vec<&[u8]> = mine.iter().map(|(k, _)| k.as_slice()).collect();
        let values: Vec<u16> = mine.iter().map(|(_, v)| **v).collect();
        let u = Updatable::build(&keys, &values, &opts()).unwrap();
        assert_eq!(u.table().num_blocks(), total);
        owners.push(u);
    }
    let pieces = ranges(total)
        .into_iter()
        .zip(&owners)
        .map(|(r, u)| u.piece(r).unwrap())
        .collect();
    let replica = SetSep::assemble(pieces).unwrap();
    (owners, replica, oracle)
}

#[test]
fn assembled_pieces_answer_every_key() {
    let (owners, replica, oracle) = setup(3000);
    for (k, v) in &oracle {
        assert_eq!(replica.lookup(k), *v);
    }
    assert_eq!(replica.len(), 3000);
    assert_eq!(owners.iter().map(|u| u.len()).sum::<usize>(), oracle.len());
}

/// A replica's copy of an owner's blocks (`SetSep::piece`) is the owner's piece, byte for byte
/// (fallback entries included, if any), after deltas too.
#[test]
fn a_replicas_piece_is_the_owners() {
    let (mut owners, mut replica, _) = setup(3000);
    let total = replica.num_blocks();
    for (o, r) in ranges(total).into_iter().enumerate() {
        let theirs = owners[o].piece(r.clone()).unwrap();
        let ours = replica.piece(r.clone(), theirs.keys()).unwrap();
        assert_eq!(ours.to_bytes(), theirs.to_bytes(), "owner {o}");
    }
    // After changes (some keys moved to other values, new keys) applied as deltas.
    for i in 0..400u32 {
        let k = key(10_000 + i);
        let o = owner_of(&k, total);
        let d = owners[o].insert(&k, (i % 3) as u16).unwrap();
        replica.apply_owner_delta(&d).unwrap();
    }
    for (o, r) in ranges(total).into_iter().enumerate() {
        let theirs = owners[o].piece(r.clone()).unwrap();
        let ours = replica.piece(r, theirs.keys()).unwrap();
        assert_eq!(ours.to_bytes(), theirs.to_bytes(), "owner {o} after deltas");
    }
    assert!(replica.piece(0..0, 0).is_err());
    assert!(replica.piece(0..total + 1, 0).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn replicas_of_owner_deltas_agree(
        ops in prop::collection::vec((0u32..4000, 0u16..5), 1..300),
        order_seed in any::<u64>(),
    ) {
        let (mut owners, replica, mut oracle) = setup(2000);
        let total = replica.num_blocks();
        let mut per_owner: Vec<Vec<sb_setsep::Delta>> = vec![Vec::new(); OWNERS as usize];
        for (i, v) in ops {
            let k = key(i);
            let o = owner_of(&k, total);
            if v == 4 {
                if let Some(d) = owners[o].remove(&k).unwrap() {
                    per_owner[o].push(d);
                }
                oracle.remove(&k);
            } else {
                per_owner[o].push(owners[o].insert(&k, v).unwrap());
                oracle.insert(k, v);
            }
        }
        // Two replicas, owners' streams interleaved differently, each stream in order.
        let mut a = replica.clone();
        let mut b = replica;
        let mut rng = order_seed;
        for r in [&mut a, &mut b] {
            let mut next = vec![0usize; OWNERS as usize];
            loop {
                let open: Vec<usize> =
                    (0..OWNERS as usize).filter(|&o| next[o] < per_owner[o].len()).collect();
                if open.is_empty() {
                    break;
                }
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let o = open[(rng >> 33) as usize % open.len()];
                r.apply_owner_delta(&per_owner[o][next[o]]).unwrap();
                next[o] += 1;
            }
        }
        prop_assert_eq!(a.content_digest(), b.content_digest());
        for (k, v) in &oracle {
            prop_assert_eq!(a.lookup(k), *v);
        }
        // A replica that missed everything resyncs each range from its owner's piece.
        let (_, mut stale, _) = setup(2000);
        for (r, u) in ranges(total).into_iter().zip(&owners) {
            stale.install_piece(&u.piece(r).unwrap()).unwrap();
        }
        prop_assert_eq!(stale.content_digest(), a.content_digest());
    }
}

#[test]
fn a_piece_of_another_table_is_refused_and_changes_nothing() {
    let (owners, mut replica, _) = setup(500);
    let before = replica.content_digest();
    let other = Updatable::build(
        &[b"abcd".as_slice()],
        &[1],
        &BuildOptions {
            build_id: 12,
            ..opts()
        },
    )
    .unwrap();
    assert!(replica.install_piece(&other.piece(0..2).unwrap()).is_err());
    assert_eq!(replica.content_digest(), before);
    assert!(owners[0].piece(2..2).is_err());
    assert!(owners[0].piece(0..u64::MAX).is_err());
}
