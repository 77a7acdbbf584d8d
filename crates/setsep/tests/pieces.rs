//! Distributed construction: pieces built per block range assemble into the one-shot table.

mod common;

use common::{check_all, random_set, refs};
use sb_setsep::{block_of_key, num_blocks, BuildError, BuildOptions, Config, SetSep};

#[test]
fn pieces_assemble_into_the_one_shot_table() {
    for (config, w, n) in [
        (Config::C16_8, 2u8, 40_000usize),
        (Config::C16_16, 1, 5_000),
        (Config::C8_16, 3, 100),
    ] {
        let (keys, values) = random_set(n, 0, w, 17);
        let kr = refs(&keys);
        let opts = BuildOptions {
            config,
            value_bits: w,
            threads: 2,
            seed: 0x5eed_5e75_e900_0001,
            build_id: 1,
            ..BuildOptions::default()
        };
        let whole = SetSep::build(&kr, &values, &opts).unwrap();
        let total = num_blocks(n as u64);
        assert_eq!(whole.num_blocks(), total);
        // Three nodes; each gets only the keys of its blocks, in its own order.
        let cuts = [0, total / 3, total * 2 / 3, total];
        let mut pieces = Vec::new();
        for r in cuts.windows(2) {
            if r[0] == r[1] {
                continue;
            }
            let mut mine: Vec<(&[u8], u16)> = kr
                .iter()
                .zip(&values)
                .filter(|(k, _)| (r[0]..r[1]).contains(&block_of_key(k, opts.seed, total)))
                .map(|(k, v)| (*k, *v))
                .collect();
            mine.reverse();
            let (mk, mv): (Vec<&[u8]>, Vec<u16>) = mine.into_iter().unzip();
            let p = SetSep::build_blocks(&mk, &mv, r[0]..r[1], total, &opts).unwrap();
            assert_eq!(p.keys(), mk.len() as u64);
            // Passing all keys gives the same piece (keys outside the range are skipped).
            let p2 = SetSep::build_blocks(&kr, &values, r[0]..r[1], total, &opts).unwrap();
            assert_eq!(p, p2);
            pieces.push(p);
        }
        pieces.reverse();
        // Pieces travel as bytes.
        for p in &pieces {
            let b = p.to_bytes();
            assert_eq!(&sb_setsep::Piece::from_bytes(&b).unwrap(), p);
            for i in (0..b.len()).step_by(b.len() / 50 + 1) {
                let mut c = b.clone();
                c[i] ^= 1;
                assert!(sb_setsep::Piece::from_bytes(&c).is_err());
                assert!(sb_setsep::Piece::from_bytes(&b[..i]).is_err());
            }
        }
        let assembled = SetSep::assemble(pieces.clone()).unwrap();
        assert_eq!(assembled.to_bytes(), whole.to_bytes());
        check_all(&assembled, &kr, &values);
        if pieces.len() > 1 {
            // Missing or duplicated pieces are refused.
            let mut missing = pieces.clone();
            missing.pop();
            assert!(matches!(
                SetSep::assemble(missing),
                Err(BuildError::PieceMismatch(_))
            ));
            let mut dup = pieces.clone();
            dup.push(pieces[0].clone());
            assert!(matches!(
                SetSep::assemble(dup),
                Err(BuildError::PieceMismatch(_))
            ));
        }
    }
}

#[test]
fn bad_ranges_are_refused() {
    let opts = BuildOptions {
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    for (r, total) in [(3..3, 10), (5..11, 10), (0..1, 0)] {
        assert!(matches!(
            SetSep::build_blocks(&[], &[], r, total, &opts),
            Err(BuildError::BadRange { .. })
        ));
    }
    assert!(matches!(
        SetSep::assemble(vec![]),
        Err(BuildError::PieceMismatch(_))
    ));
}

/// A piece of a 2-bit, 8+16 table (which has fallback entries) and its bytes.
fn piece_with_fallback() -> (sb_setsep::Piece, Vec<u8>) {
    let (keys, values) = random_set(5000, 0, 2, 23);
    let kr = refs(&keys);
    let opts = BuildOptions {
        config: Config::C8_16,
        value_bits: 2,
        threads: 1,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    let total = num_blocks(kr.len() as u64);
    let p = SetSep::build_blocks(&kr, &values, 0..total, total, &opts).unwrap();
    let b = p.to_bytes();
    (p, b)
}

/// Replaces the checksum (the last 8 bytes) with the right one, as an attacker would.
fn fix_checksum(b: &mut [u8]) {
    let n = b.len() - 8;
    let sum = xxhash_rust::xxh3::xxh3_64(&b[..n]);
    b[n..].copy_from_slice(&sum.to_le_bytes());
}

/// Regression: `Piece::from_bytes` checked only that the fallback entries were sorted, so a
/// crafted piece with a correct checksum assembled into a table that answered 65535 with 2-bit
/// values and could not be reloaded. It now makes the checks `SetSep::from_bytes` makes.
#[test]
fn crafted_pieces_are_refused_like_tables() {
    use sb_setsep::{LoadError, Piece};
    let (p, b) = piece_with_fallback();
    let whole = SetSep::assemble(vec![p.clone()]).unwrap();
    let nfb = whole.stats().fallback_keys as usize;
    assert!(nfb >= 2, "the piece has fallback entries");
    let fb_start = b.len() - 8 - nfb * 18;

    // A value too wide for 2 bits.
    let mut wide = b.clone();
    wide[b.len() - 10..b.len() - 8].copy_from_slice(&0xffffu16.to_le_bytes());
    fix_checksum(&mut wide);
    assert!(matches!(
        Piece::from_bytes(&wide),
        Err(LoadError::BadFallback(_))
    ));

    // A duplicate entry (the second becomes a copy of the first): sorted, not strictly.
    let mut dup = b.clone();
    dup.copy_within(fb_start..fb_start + 18, fb_start + 18);
    fix_checksum(&mut dup);
    assert!(matches!(
        Piece::from_bytes(&dup),
        Err(LoadError::BadFallback(_))
    ));

    // More fallback entries than keys (the key count at header offset 52 set to 1).
    let mut count = b.clone();
    count[52..60].copy_from_slice(&1u64.to_le_bytes());
    fix_checksum(&mut count);
    assert!(matches!(
        Piece::from_bytes(&count),
        Err(LoadError::BadHeader(_))
    ));

    // The untouched piece loads, assembles and the table reloads.
    let ok = Piece::from_bytes(&b).unwrap();
    let t = SetSep::assemble(vec![ok]).unwrap();
    assert_eq!(
        SetSep::from_bytes(&t.to_bytes()).unwrap().to_bytes(),
        t.to_bytes()
    );
}
