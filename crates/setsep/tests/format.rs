//! The binary format: round trips, zero-copy views, mmap, and refusal of every corruption.
#![allow(unsafe_code)]

mod common;

use common::{check_all, random_set, refs};
use proptest::prelude::*;
use sb_setsep::{BuildOptions, Config, LoadError, MappedSetSep, SetSep, SetSepView};

fn small_table(w: u8, n: usize, config: Config) -> (SetSep, Vec<Vec<u8>>, Vec<u16>) {
    let (keys, values) = random_set(n, 0, w, 42);
    let opts = BuildOptions {
        config,
        value_bits: w,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    (
        SetSep::build(&refs(&keys), &values, &opts).unwrap(),
        keys,
        values,
    )
}

#[test]
fn round_trip_owned_view_and_mmap() {
    for config in [Config::C16_8, Config::C8_16, Config::C16_16] {
        let (t, keys, values) = small_table(3, 5000, config);
        let kr = refs(&keys);
        let bytes = t.to_bytes();
        let mut w = Vec::new();
        t.write_to(&mut w).unwrap();
        assert_eq!(w, bytes);
        let back = SetSep::from_bytes(&bytes).unwrap();
        assert_eq!(back.to_bytes(), bytes);
        check_all(&back, &kr, &values);
        assert_eq!(back.stats().bits_per_key, t.stats().bits_per_key);
        // The cheap size is the serialized size the statistics report.
        assert_eq!(t.bytes() as u64, t.stats().bytes);
        assert_eq!(t.bytes(), bytes.len());
        // SAFETY: the bytes come from to_bytes.
        let v = unsafe { SetSepView::from_bytes_unchecked(&bytes) };
        assert_eq!(v.stats().fallback_keys, t.stats().fallback_keys);
        for (k, &val) in kr.iter().zip(&values) {
            assert_eq!(v.lookup(k), val);
            assert_eq!(v.lookup_hash(v.hash_key(k)), val);
        }
        assert_eq!(v.to_owned().to_bytes(), bytes);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.gpt");
        t.write_to(std::fs::File::create(&path).unwrap()).unwrap();
        // SAFETY: nobody modifies the temporary file while it is mapped.
        for m in unsafe {
            [
                MappedSetSep::open(&path).unwrap(),
                MappedSetSep::open_trusted(&path).unwrap(),
            ]
        } {
            let view = m.view();
            let mut out = vec![0; kr.len()];
            view.lookup_batch(&kr, &mut out);
            assert_eq!(out, values);
            let hs: Vec<_> = kr.iter().map(|k| view.hash_key(k)).collect();
            view.lookup_batch_hashes(&hs, &mut out);
            assert_eq!(out, values);
        }
    }
}

#[test]
fn every_flipped_byte_and_every_truncation_is_refused() {
    for (w, n) in [(1u8, 0usize), (2, 1), (2, 1500)] {
        let (t, _, _) = small_table(w, n, Config::C16_8);
        let bytes = t.to_bytes();
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[i] ^= flip;
                assert!(
                    SetSep::from_bytes(&b).is_err(),
                    "flip {flip:#x} at {i} of {}",
                    b.len()
                );
                assert!(SetSepView::from_bytes(&b).is_err());
            }
        }
        for len in 0..bytes.len() {
            let e = SetSep::from_bytes(&bytes[..len]).unwrap_err();
            assert!(
                matches!(e, LoadError::Truncated { .. } | LoadError::BadMagic),
                "truncated to {len}: {e}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            SetSep::from_bytes(&longer).unwrap_err(),
            LoadError::TrailingBytes { .. }
        ));
    }
}

#[test]
fn a_table_with_fallback_entries_round_trips() {
    // 8+16 with 8-bit values leaves groups in the fallback table.
    let (t, keys, values) = small_table(8, 20_000, Config::C8_16);
    assert!(t.stats().fallback_keys > 0);
    assert_eq!(t.bytes(), t.to_bytes().len());
    let back = SetSep::from_bytes(&t.to_bytes()).unwrap();
    check_all(&back, &refs(&keys), &values);
}

#[test]
fn version_and_header_errors_are_named() {
    let (t, _, _) = small_table(2, 100, Config::C16_8);
    let mut b = t.to_bytes();
    b[8] = 9;
    assert!(matches!(
        SetSep::from_bytes(&b).unwrap_err(),
        LoadError::UnsupportedVersion(9)
    ));
    assert!(matches!(
        SetSep::from_bytes(b"not a table at all, really not").unwrap_err(),
        LoadError::BadMagic
    ));
}

proptest! {
    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        sb_setsep::fuzzing::load_table(&data);
        sb_setsep::fuzzing::load_delta(&data);
    }

    #[test]
    fn valid_header_random_body_never_panics(body in proptest::collection::vec(any::<u8>(), 0..300), cut in 0usize..100) {
        let (t, _, _) = small_table(2, 10, Config::C16_8);
        let mut b = t.to_bytes();
        let n = b.len();
        b.truncate(48.min(n));
        b.extend_from_slice(&body);
        b.truncate(b.len().saturating_sub(cut));
        sb_setsep::fuzzing::load_table(&b);
    }
}

/// Fuzzer crashers, kept as regression tests.
#[test]
fn fuzz_regressions() {
    // A delta that empties the key count of a table with fallback entries used to apply and
    // leave a table that could not be loaded back.
    let hex = "534401100802010000007d0000110000015403002e002853440110080212710100000000000028";
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    sb_setsep::fuzzing::load_delta(&bytes);
}

#[test]
fn images_pieces_and_deltas_of_earlier_hash_families_are_refused() {
    // Format versions 4 and 5, `SBPIECE4`/`SBPIECE5` pieces and version-4/5 deltas index the
    // 16-bit hash family `a + i*b (mod 2^16)` and the family with any odd 32-bit slope: read
    // under today's 20-bit slopes they would answer wrong.
    let (t, keys, values) = small_table(2, 3000, Config::C16_8);
    let b = t.to_bytes();
    assert_eq!(u32::from_le_bytes(b[8..12].try_into().unwrap()), 6);
    let kr = refs(&keys);
    let opts = BuildOptions {
        value_bits: 2,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    let total = sb_setsep::num_blocks(kr.len() as u64);
    let p = SetSep::build_blocks(&kr, &values, 0..total, total, &opts)
        .unwrap()
        .to_bytes();
    assert_eq!(&p[..8], b"SBPIECE6");
    let mut up = sb_setsep::Updatable::build(&kr, &values, &opts).unwrap();
    let d = up.insert(kr[0], values[0] ^ 1).unwrap().to_bytes();
    assert_eq!(&d[..3], b"SD\x06");
    for old in [4u8, 5] {
        let mut b = b.clone();
        b[8] = old;
        assert!(matches!(
            SetSep::from_bytes(&b).unwrap_err(),
            LoadError::UnsupportedVersion(v) if v == old as u32
        ));
        let mut p = p.clone();
        p[7] = b'0' + old;
        assert!(matches!(
            sb_setsep::Piece::from_bytes(&p).unwrap_err(),
            LoadError::BadMagic
        ));
        let mut d = d.clone();
        d[2] = old;
        // With its checksum fixed up, as a sender of the old version would have made it.
        let n = d.len() - 4;
        let sum = xxhash_rust::xxh3::xxh3_64(&d[..n]).max(1) as u32;
        d[n..].copy_from_slice(&sum.to_le_bytes());
        assert!(matches!(
            sb_setsep::Delta::from_bytes(&d).unwrap_err(),
            sb_setsep::DeltaError::Malformed("unsupported version")
        ));
    }
}
