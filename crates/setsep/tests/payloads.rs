//! An updatable table whose RIB keeps a payload beside each key (an owner's FIB values),
//! against a HashMap oracle of (value, payload): through inserts, changes, payload updates,
//! removals, growth rebuilds and block re-balances, every key keeps its payload. The same
//! with a RIB that keeps keys without a common prefix (`build_with_key_prefix`), half the
//! keys starting with it.

mod common;

use common::{random_set, refs, splitmix};
use proptest::prelude::*;
use sb_setsep::{BuildOptions, Config, Growth, Updatable, MAX_RIB_PAYLOAD};
use std::collections::HashMap;

fn opts(seed: u64) -> BuildOptions {
    BuildOptions {
        config: Config::C16_8,
        value_bits: 2,
        threads: 1,
        seed,
        build_id: 1,
        ..BuildOptions::default()
    }
}

type Oracle = HashMap<Vec<u8>, (u16, Vec<u8>)>;

fn payload(pl: usize, x: u64) -> Vec<u8> {
    (0..pl)
        .map(|i| (x >> (i % 8 * 8)) as u8 ^ i as u8)
        .collect()
}

/// Gives every other key `prefix` (only the first key when the prefix is a whole key, so
/// that the keys stay distinct).
fn with_prefix(keys: &mut [Vec<u8>], prefix: &[u8]) {
    for (i, k) in keys.iter_mut().enumerate() {
        if i % 2 == 0 && (prefix.len() < k.len() || i == 0) {
            k[..prefix.len()].copy_from_slice(prefix);
        }
    }
}

fn check(up: &Updatable, oracle: &Oracle, absent: &[&[u8]]) {
    assert_eq!(up.len(), oracle.len());
    for (k, (v, p)) in oracle {
        assert_eq!(up.entry(k), Some((*v, p.as_slice())));
        assert_eq!(up.table().lookup(k), *v);
    }
    for k in absent {
        assert_eq!(up.entry(k), None);
    }
    let mut all: Vec<(Vec<u8>, u16, Vec<u8>)> = up
        .entries()
        .map(|(k, v, p)| (k.to_vec(), v, p.to_vec()))
        .collect();
    all.sort();
    let mut want: Vec<(Vec<u8>, u16, Vec<u8>)> = oracle
        .iter()
        .map(|(k, (v, p))| (k.clone(), *v, p.clone()))
        .collect();
    want.sort();
    assert_eq!(all, want);
}

#[derive(Clone, Debug)]
enum Op {
    Insert(u16, u64),
    Change(usize, u16),
    SetPayload(usize, u64),
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u16>(), any::<u64>()).prop_map(|(v, p)| Op::Insert(v, p)),
        2 => (any::<usize>(), any::<u16>()).prop_map(|(i, v)| Op::Change(i, v)),
        2 => (any::<usize>(), any::<u64>()).prop_map(|(i, p)| Op::SetPayload(i, p)),
        1 => any::<usize>().prop_map(Op::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, .. ProptestConfig::default() })]

    /// Random operations on a table built with payloads (growing, so that a group going to
    /// the fallback table re-balances its block and moves its keys) agree with the oracle
    /// after every step. A new key's payload is zeros until it is set.
    #[test]
    fn payloads_follow_their_keys(
        ops in proptest::collection::vec(op(), 1..120),
        n0 in 0usize..300,
        pl in prop_oneof![Just(0usize), Just(1), Just(5), Just(16), Just(MAX_RIB_PAYLOAD)],
        plen in prop_oneof![Just(0usize), Just(4), Just(12), Just(16)],
        seed in any::<u64>(),
    ) {
        let (mut pool, values) = random_set(n0 + ops.len(), 16, 2, seed);
        let prefix: Vec<u8> = (0..plen as u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        with_prefix(&mut pool, &prefix);
        let (init, fresh) = pool.split_at(n0);
        let mut s = seed;
        let payloads: Vec<u8> = (0..n0).flat_map(|_| payload(pl, splitmix(&mut s))).collect();
        let mut up = Updatable::build_with_key_prefix(&refs(init), &values[..n0], &payloads, pl, &prefix, &opts(seed))
            .expect("build")
            .with_growth(Growth::default());
        prop_assert_eq!(up.payload_len(), pl);
        prop_assert_eq!(up.key_prefix(), &prefix[..]);
        let mut oracle: Oracle = init
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), (values[i], payloads[i * pl..(i + 1) * pl].to_vec())))
            .collect();
        let mut live: Vec<Vec<u8>> = init.to_vec();
        let mut fresh = fresh.iter();
        let mut gone: Vec<Vec<u8>> = Vec::new();
        for op in &ops {
            match *op {
                Op::Insert(v, p) => {
                    let k = fresh.next().expect("pool").clone();
                    let with = p & 1 == 1;
                    let p = payload(pl, p);
                    if with {
                        up.insert_batch_with_payloads(&[(&k, v & 3, &p)], |_| {}).expect("insert");
                    } else {
                        up.insert(&k, v & 3).expect("insert");
                        prop_assert_eq!(up.entry(&k), Some((v & 3, &vec![0u8; pl][..])));
                        prop_assert!(up.set_payload(&k, &p));
                    }
                    oracle.insert(k.clone(), (v & 3, p));
                    live.push(k);
                }
                Op::Change(i, v) if !live.is_empty() => {
                    let k = &live[i % live.len()];
                    if v & 4 == 4 {
                        // The value and the payload in one.
                        let p = payload(pl, u64::from(v));
                        up.insert_batch_with_payloads(&[(k, v & 3, &p)], |_| {}).expect("change");
                        *oracle.get_mut(k).expect("live") = (v & 3, p);
                    } else {
                        up.insert(k, v & 3).expect("change");
                        oracle.get_mut(k).expect("live").0 = v & 3;
                    }
                }
                Op::SetPayload(i, p) if !live.is_empty() => {
                    let k = &live[i % live.len()];
                    let p = payload(pl, p);
                    prop_assert!(up.set_payload(k, &p));
                    oracle.get_mut(k).expect("live").1 = p;
                }
                Op::Remove(i) if !live.is_empty() => {
                    let k = live.swap_remove(i % live.len());
                    prop_assert!(up.remove(&k).expect("remove").is_some());
                    prop_assert!(!up.set_payload(&k, &payload(pl, 1)), "a removed key has no payload");
                    oracle.remove(&k);
                    gone.push(k);
                }
                _ => {}
            }
            check(&up, &oracle, &refs(&gone));
        }
    }
}

/// 6,000 keys into a table built for 512 with growth: it grows (rebuilds from its RIB) and
/// re-balances blocks, and every payload is still its key's; with a key prefix, half the
/// keys are kept without it through all of that.
#[test]
fn payloads_survive_growth_and_rebalances() {
    for prefix in [&[][..], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]] {
        growth_and_rebalances(prefix);
    }
}

fn growth_and_rebalances(prefix: &[u8]) {
    let pl = 16;
    let (mut keys, values) = random_set(6_000, 16, 2, 77);
    with_prefix(&mut keys, prefix);
    let kr = refs(&keys);
    let p0: Vec<u8> = (0..512).flat_map(|i| payload(pl, i)).collect();
    let mut up =
        Updatable::build_with_key_prefix(&kr[..512], &values[..512], &p0, pl, prefix, &opts(5))
            .unwrap()
            .with_growth(Growth::default());
    let mut oracle: Oracle = (0..512)
        .map(|i| (keys[i].clone(), (values[i], payload(pl, i as u64))))
        .collect();
    for (i, chunk) in (512..kr.len()).collect::<Vec<_>>().chunks(100).enumerate() {
        let ps: Vec<Vec<u8>> = chunk.iter().map(|&j| payload(pl, j as u64)).collect();
        if i % 2 == 0 {
            let batch: Vec<(&[u8], u16, &[u8])> = (chunk.iter().zip(&ps))
                .map(|(&j, p)| (kr[j], values[j], p.as_slice()))
                .collect();
            up.insert_batch_with_payloads(&batch, |_| {}).unwrap();
        } else {
            for (&j, p) in chunk.iter().zip(&ps) {
                up.insert(kr[j], values[j]).unwrap();
                assert!(up.set_payload(kr[j], p));
            }
        }
        for (&j, p) in chunk.iter().zip(ps) {
            oracle.insert(keys[j].clone(), (values[j], p));
        }
    }
    assert!(up.growths() >= 2, "grew {} times", up.growths());
    assert!(up.rebalances() > 0, "re-balanced no block");
    check(&up, &oracle, &[]);
    assert_eq!(up.key_prefix(), prefix);
    let rb = up.rib_bytes();
    let elided = if prefix.is_empty() { 0 } else { 3_000 };
    assert_eq!(
        rb.entries,
        6_000 * (1 + 16 + 2 + pl) - elided * prefix.len()
    );
}

#[test]
#[should_panic(expected = "payload bytes")]
fn a_payload_of_another_width_is_a_bug() {
    let (keys, values) = random_set(10, 16, 2, 1);
    let mut up =
        Updatable::build_with_payloads(&refs(&keys), &values, &[0; 40], 4, &opts(1)).unwrap();
    up.set_payload(&keys[0], &[1, 2, 3]);
}
