//! Deltas know their table and their place: replicas fed replayed, reordered, dropped and
//! duplicated delta streams are byte-identical to the owner at the last delta they took, or
//! refuse with the reason (the gap, the stale number, the foreign table) and stay unchanged.

mod common;

use common::{random_set, refs};
use proptest::prelude::*;
use sb_setsep::{BuildOptions, Config, Delta, DeltaError, SetSep, Updatable};
use std::sync::OnceLock;

const DELTAS: usize = 40;

fn opts(build_id: u64) -> BuildOptions {
    BuildOptions {
        config: Config::C8_16,
        value_bits: 2,
        threads: 1,
        seed: 0x5eed_5e75_e900_0001,
        build_id,
        ..BuildOptions::default()
    }
}

/// An owner's history: the image after each of its deltas (`images[i]` has applied deltas
/// `1..=i`) and the deltas, some of which move groups into or out of the fallback table
/// (config 8+16 keeps 1-2% of the keys there).
struct History {
    images: Vec<Vec<u8>>,
    deltas: Vec<Delta>,
}

fn history(build_id: u64, salt: u64) -> History {
    let (keys, values) = random_set(3000 + DELTAS, 13, 2, 31);
    let kr = refs(&keys);
    let mut owner = Updatable::build(&kr[..3000], &values[..3000], &opts(build_id)).unwrap();
    let mut images = vec![owner.table().to_bytes()];
    let mut deltas = Vec::new();
    let mut x = salt;
    for i in 0..DELTAS {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = (x >> 33) as usize;
        let d = match i % 3 {
            0 => owner.insert(kr[3000 + i], (r % 4) as u16).unwrap(),
            1 => owner.insert(kr[r % 3000], (r % 4) as u16).unwrap(),
            _ => match owner.remove(kr[r % 3000]).unwrap() {
                Some(d) => d,
                None => owner.insert(kr[r % 3000], 1).unwrap(),
            },
        };
        assert_eq!(d.seq(), i as u64 + 1);
        // Deltas travel as bytes.
        deltas.push(Delta::from_bytes(&d.to_bytes()).unwrap());
        images.push(owner.table().to_bytes());
    }
    History { images, deltas }
}

fn owner_history() -> &'static History {
    static H: OnceLock<History> = OnceLock::new();
    H.get_or_init(|| history(1, 7))
}

/// What a replica that has applied up to `applied` must answer to delta number `seq`.
fn expected(seq: u64, applied: u64) -> Result<(), DeltaError> {
    if seq == applied + 1 || (seq == applied && applied > 0) {
        Ok(())
    } else if seq < applied {
        Err(DeltaError::Stale { seq, applied })
    } else {
        Err(DeltaError::Gap {
            expected: applied + 1,
            got: seq,
        })
    }
}

/// A stream of delta indexes: the owner's order with `edits` applied (0 drop, 1 duplicate,
/// 2 swap with the next, 3 replay an earlier delta here).
fn perturbed(edits: &[(u8, prop::sample::Index, prop::sample::Index)]) -> Vec<usize> {
    let mut s: Vec<usize> = (0..DELTAS).collect();
    for (op, at, from) in edits {
        if s.is_empty() {
            break;
        }
        let i = at.index(s.len());
        match op {
            0 => {
                s.remove(i);
            }
            1 => s.insert(i, s[i]),
            2 if i + 1 < s.len() => s.swap(i, i + 1),
            2 => {}
            _ => {
                let earlier = s[from.index(i + 1)];
                s.insert(i, earlier);
            }
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Replayed, reordered, dropped and duplicated streams: after every delta the replica is
    /// byte-identical to the owner's table at the last delta it took, every refusal names the
    /// gap or the stale number and leaves the replica unchanged.
    #[test]
    fn replicas_follow_perturbed_streams_or_name_the_gap(
        edits in proptest::collection::vec(
            (0u8..4, any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..10),
    ) {
        let h = owner_history();
        let mut replica = SetSep::from_bytes(&h.images[0]).unwrap();
        let mut applied = 0u64;
        for i in perturbed(&edits) {
            let d = &h.deltas[i];
            let want = expected(d.seq(), applied);
            let before = replica.to_bytes();
            let got = replica.apply_delta(d);
            prop_assert_eq!(&got, &want, "delta {} after {}", d.seq(), applied);
            if got.is_err() {
                prop_assert_eq!(&replica.to_bytes(), &before);
            } else if d.seq() == applied + 1 {
                applied += 1;
            }
            prop_assert_eq!(replica.seq(), applied);
            prop_assert!(replica.to_bytes() == h.images[applied as usize]);
        }
    }
}

/// The whole stream in order makes the replica byte-identical to the owner, and some of its
/// deltas edited the fallback table.
#[test]
fn in_order_stream_reaches_the_owner() {
    let h = owner_history();
    let mut replica = SetSep::from_bytes(&h.images[0]).unwrap();
    for d in &h.deltas {
        replica.apply_delta(d).unwrap();
        // A duplicate of the last delta is a no-op.
        replica.apply_delta(d).unwrap();
    }
    assert_eq!(replica.to_bytes(), h.images[DELTAS]);
    assert_eq!(replica.seq(), DELTAS as u64);
    assert!(h.deltas.iter().any(|d| d.touches_fallback()));
    // A snapshot carries the sequence: a replica loaded mid-stream goes on from there.
    let mut late = SetSep::from_bytes(&h.images[10]).unwrap();
    assert_eq!(late.seq(), 10);
    for d in &h.deltas[10..] {
        late.apply_delta(d).unwrap();
    }
    assert_eq!(late.to_bytes(), h.images[DELTAS]);
}

/// Regression: a replica accepted every delta made for another table of the same shape (and
/// seed); now each is refused as foreign and leaves the replica unchanged.
#[test]
fn deltas_of_another_table_are_refused() {
    let h = owner_history();
    let other = history(2, 7); // same keys, seed and shape; another build
    let mut replica = SetSep::from_bytes(&h.images[0]).unwrap();
    let before = replica.to_bytes();
    for d in &other.deltas {
        assert_eq!(
            replica.apply_delta(d),
            Err(DeltaError::ForeignTable {
                expected: replica.fingerprint(),
                got: d.table_fingerprint(),
            })
        );
    }
    assert_eq!(replica.to_bytes(), before);
}

/// Regression: two different deltas with one number (two owners of one build, or a lost
/// update) both returned `Ok` and the replica then disagreed with the owner; now the second
/// is a conflict.
#[test]
fn a_different_delta_with_the_same_number_conflicts() {
    let h = owner_history();
    let twin = history(1, 99); // same build, other changes
    assert_eq!(twin.images[0], h.images[0]);
    let mut replica = SetSep::from_bytes(&h.images[0]).unwrap();
    replica.apply_delta(&h.deltas[0]).unwrap();
    let before = replica.to_bytes();
    assert_ne!(twin.deltas[0], h.deltas[0]);
    assert_eq!(
        replica.apply_delta(&twin.deltas[0]),
        Err(DeltaError::Conflict { seq: 1 })
    );
    assert_eq!(replica.to_bytes(), before);
}

/// Regression: two deltas for one key applied in the wrong order both returned `Ok` and left
/// the replica disagreeing with the owner; now the older one is stale.
#[test]
fn two_deltas_for_one_key_out_of_order_are_refused() {
    let (keys, values) = random_set(2000, 13, 2, 5);
    let kr = refs(&keys);
    let mut owner = Updatable::build(&kr, &values, &opts(3)).unwrap();
    let mut replica = SetSep::from_bytes(&owner.table().to_bytes()).unwrap();
    let first = owner.insert(kr[0], (values[0] + 1) & 3).unwrap();
    let second = owner.insert(kr[0], (values[0] + 2) & 3).unwrap();
    assert_eq!(
        replica.apply_delta(&second),
        Err(DeltaError::Gap {
            expected: 1,
            got: 2
        })
    );
    replica.apply_delta(&first).unwrap();
    replica.apply_delta(&second).unwrap();
    assert_eq!(
        replica.apply_delta(&first),
        Err(DeltaError::Stale { seq: 1, applied: 2 })
    );
    assert_eq!(replica.to_bytes(), owner.table().to_bytes());
    assert_eq!(replica.lookup(kr[0]), (values[0] + 2) & 3);
}
