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
