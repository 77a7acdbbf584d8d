//! SetSep against a HashMap oracle: every config, value width, size and key shape.

mod common;

use common::{check_all, random_set, refs};
use proptest::prelude::*;
use sb_setsep::{BuildError, BuildOptions, Config, Kernel, SetSep, SetSepView};
use std::collections::HashMap;

const CONFIGS: [Config; 3] = [Config::C16_8, Config::C8_16, Config::C16_16];
const WIDTHS: [u8; 6] = [1, 2, 3, 5, 8, 16];

fn opts(config: Config, value_bits: u8) -> BuildOptions {
    BuildOptions {
        config,
        value_bits,
        threads: 2,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    }
}

fn build_and_check(keys: &[&[u8]], values: &[u16], o: &BuildOptions) -> SetSep {
    let t = SetSep::build(keys, values, o).expect("build");
    check_all(&t, keys, values);
    let st = t.stats();
    assert_eq!(st.keys, keys.len() as u64);
    assert_eq!(st.value_bits, o.value_bits);
    assert_eq!(st.config, o.config);
    // The validated zero-copy view answers the same.
    let bytes = t.to_bytes();
    assert_eq!(bytes.len() as u64, st.bytes);
    let v = SetSepView::from_bytes(&bytes).expect("view");
    for (k, &val) in keys.iter().zip(values) {
        assert_eq!(v.lookup(k), val);
    }
    let mut out = vec![0; keys.len()];
    v.lookup_batch(keys, &mut out);
    assert_eq!(out, values);
    t
}

#[test]
fn empty_and_single_key_every_config_and_width() {
    for c in CONFIGS {
        for w in WIDTHS {
            let t = build_and_check(&[], &[], &opts(c, w));
            assert_eq!(t.stats().bits_per_key, 0.0);
            assert_eq!(t.num_blocks(), 1);
            let v = ((1u32 << w) - 1) as u16;
            build_and_check(&[b"only"], &[v], &opts(c, w));
        }
    }
}

#[test]
fn every_key_length() {
    for len in 4..=64 {
        let (keys, values) = random_set(300, len, 3, len as u64);
        build_and_check(&refs(&keys), &values, &opts(Config::C16_8, 3));
    }
}

#[test]
fn every_config_and_width_mixed_lengths() {
    for c in CONFIGS {
        for w in WIDTHS {
            let (keys, values) = random_set(3000, 0, w, 1000 + w as u64);
            let t = build_and_check(&refs(&keys), &values, &opts(c, w));
            let st = t.stats();
            // A group's record plus choices: never more than (0.5 + 1.5*w)-ish per key plus
            // fallback; loose bound that catches accounting mistakes.
            let bound = 0.5 + w as f64 * c.bits_per_group_bit() as f64 / 16.0;
            assert!(
                st.bits_per_key >= bound * 0.9,
                "{c} w{w}: {} < {bound}",
                st.bits_per_key
            );
            if c != Config::C8_16 {
                assert!(
                    st.fallback_keys * 100 <= keys.len() as u64,
                    "{c} w{w}: fallback {}",
                    st.fallback_keys
                );
            }
        }
    }
}

#[test]
fn adversarial_sequential_integers() {
    for (w, n) in [(1u8, 20_000u32), (2, 20_000)] {
        let be: Vec<[u8; 4]> = (0..n).map(|i| i.to_be_bytes()).collect();
        let le: Vec<[u8; 8]> = (0..n as u64).map(|i| i.to_le_bytes()).collect();
        let values: Vec<u16> = (0..n).map(|i| (i % (1 << w)) as u16).collect();
        let kb: Vec<&[u8]> = be.iter().map(|k| k.as_slice()).collect();
        let kl: Vec<&[u8]> = le.iter().map(|k| k.as_slice()).collect();
        let t = build_and_check(&kb, &values, &opts(Config::C16_8, w));
        assert!(t.stats().fallback_keys <= 64);
        build_and_check(&kl, &values, &opts(Config::C16_8, w));
    }
}

#[test]
fn adversarial_ipv4_sharing_a_24() {
    // 64 /24 networks, all 256 hosts of each.
    let keys: Vec<[u8; 4]> = (0..64u32 * 256)
        .map(|i| (0x0a00_0000 | (i >> 8) << 8 | (i & 0xff)).to_be_bytes())
        .collect();
    let kr: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let values: Vec<u16> = (0..kr.len()).map(|i| (i % 5) as u16).collect();
    build_and_check(&kr, &values, &opts(Config::C16_8, 3));
}

#[test]
fn adversarial_five_tuples_differing_in_one_port() {
    // proto, src ip, src port, dst ip, dst port: only the source port changes.
    let keys: Vec<[u8; 13]> = (0..30_000u16)
        .map(|p| {
            let mut k = [0u8; 13];
            k[0] = 6;
            k[1..5].copy_from_slice(&[192, 168, 1, 7]);
            k[5..7].copy_from_slice(&p.to_be_bytes());
            k[7..11].copy_from_slice(&[10, 0, 0, 1]);
            k[11..13].copy_from_slice(&443u16.to_be_bytes());
            k
        })
        .collect();
    let kr: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let values: Vec<u16> = (0..kr.len()).map(|i| (i * 7 % 4) as u16).collect();
    build_and_check(&kr, &values, &opts(Config::C16_8, 2));
}

#[test]
fn scalar_and_avx2_kernels_build_identical_tables() {
    for c in CONFIGS {
        for w in [1u8, 2, 3] {
            let (keys, values) = random_set(12_000, 13, w, 77 + w as u64);
            let kr = refs(&keys);
            let mut o = opts(c, w);
            o.kernel = Kernel::Scalar;
            let scalar = SetSep::build(&kr, &values, &o).expect("scalar build");
            o.kernel = Kernel::Auto;
            let auto = SetSep::build(&kr, &values, &o).expect("auto build");
            assert_eq!(scalar.to_bytes(), auto.to_bytes(), "{c} w{w}");
            if Kernel::avx2_available() {
                o.kernel = Kernel::Avx2;
                let avx2 = SetSep::build(&kr, &values, &o).expect("avx2 build");
                assert_eq!(scalar.to_bytes(), avx2.to_bytes(), "{c} w{w}");
            }
        }
    }
}

#[test]
fn result_does_not_depend_on_threads_or_input_order() {
    let (keys, values) = random_set(20_000, 0, 2, 5);
    let kr = refs(&keys);
    let mut o = opts(Config::C16_8, 2);
    o.threads = 1;
    let a = SetSep::build(&kr, &values, &o).unwrap().to_bytes();
    o.threads = 2;
    let b = SetSep::build(&kr, &values, &o).unwrap().to_bytes();
    assert_eq!(a, b);
    let mut perm: Vec<usize> = (0..kr.len()).collect();
    perm.reverse();
    perm.swap(3, 9000);
    let k2: Vec<&[u8]> = perm.iter().map(|&i| kr[i]).collect();
    let v2: Vec<u16> = perm.iter().map(|&i| values[i]).collect();
    let c = SetSep::build(&k2, &v2, &o).unwrap().to_bytes();
    assert_eq!(a, c);
    // Another seed gives another table that is just as right.
    o.seed ^= 1;
    let d = SetSep::build(&kr, &values, &o).unwrap();
    assert_ne!(d.to_bytes(), a);
    check_all(&d, &kr, &values);
}

#[test]
fn build_errors_name_the_key() {
    let o = opts(Config::C16_8, 2);
    let keys: Vec<&[u8]> = vec![b"abcd", b"efgh", b"abcd"];
    assert_eq!(
        SetSep::build(&keys, &[0, 1, 2], &o).unwrap_err(),
        BuildError::DuplicateKey { index: 2, first: 0 }
    );
    let keys: Vec<&[u8]> = vec![b"abcd", b"abc"];
    assert_eq!(
        SetSep::build(&keys, &[0, 1], &o).unwrap_err(),
        BuildError::BadKeyLength { index: 1, len: 3 }
    );
    let long = [7u8; 65];
    let keys: Vec<&[u8]> = vec![b"abcd", &long];
    assert_eq!(
        SetSep::build(&keys, &[0, 1], &o).unwrap_err(),
        BuildError::BadKeyLength { index: 1, len: 65 }
    );
    let keys: Vec<&[u8]> = vec![b"abcd", b"abce"];
    assert_eq!(
        SetSep::build(&keys, &[0, 4], &o).unwrap_err(),
        BuildError::ValueTooWide {
            index: 1,
            value: 4,
            value_bits: 2
        }
    );
    assert!(matches!(
        SetSep::build(&keys, &[0], &o).unwrap_err(),
        BuildError::LengthMismatch { .. }
    ));
    let mut bad = o.clone();
    bad.value_bits = 0;
    assert_eq!(
        SetSep::build(&keys, &[0, 1], &bad).unwrap_err(),
        BuildError::BadValueBits(0)
    );
    bad.value_bits = 17;
    assert!(SetSep::build(&keys, &[0, 1], &bad).is_err());
    let mut bad = o.clone();
    bad.config = Config {
        index_bits: 12,
        array_bits: 8,
    };
    assert!(matches!(
        SetSep::build(&keys, &[0, 1], &bad).unwrap_err(),
        BuildError::BadConfig(_)
    ));
    // The first bad key in input order is reported, also across parallel chunks.
    let (mut many, values) = random_set(5000, 8, 2, 9);
    many[4000] = many[1234].clone();
    many[4500] = many[10].clone();
    let kr = refs(&many);
    assert!(matches!(
        SetSep::build(&kr, &values, &o).unwrap_err(),
        BuildError::DuplicateKey { .. }
    ));
}

#[test]
fn progress_reports_every_block() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (keys, values) = random_set(50_000, 13, 1, 3);
    let done = AtomicU64::new(0);
    let t = SetSep::build_with_progress(&refs(&keys), &values, &opts(Config::C16_8, 1), &|n| {
        done.fetch_add(n, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(done.load(Ordering::Relaxed), t.num_blocks());
    assert_eq!(t.num_blocks(), sb_setsep::num_blocks(50_000));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn matches_hashmap_oracle(
        entries in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 4..=64), any::<u16>()), 0..700),
        ci in 0usize..3,
        wi in 0usize..6,
        seed in any::<u64>(),
    ) {
        let w = WIDTHS[wi];
        let mask = ((1u32 << w) - 1) as u16;
        let oracle: HashMap<Vec<u8>, u16> =
            entries.into_iter().map(|(k, v)| (k, v & mask)).collect();
        let keys: Vec<&[u8]> = oracle.keys().map(|k| k.as_slice()).collect();
        let values: Vec<u16> = keys.iter().map(|k| oracle[*k]).collect();
        let mut o = opts(CONFIGS[ci], w);
        o.seed = seed;
        build_and_check(&keys, &values, &o);
    }
}
