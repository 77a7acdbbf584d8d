//! Release-mode tests at 16M keys, `#[ignore]`d: run them with
//! `cargo test -p sb-setsep --release --test large -- --ignored` (scripts/test.sh does).

mod common;

use common::splitmix;
use sb_setsep::{BuildOptions, Config, SetSep, Updatable};
use std::time::Instant;

/// `n` random 13-byte keys (5-tuple sized) and `vbits`-bit values.
fn keys(n: usize, vbits: u8, seed: u64) -> (Vec<[u8; 13]>, Vec<u16>) {
    let mut s = seed;
    let raw = (0..n)
        .map(|_| {
            let a = splitmix(&mut s).to_le_bytes();
            let b = splitmix(&mut s).to_le_bytes();
            let mut k = [0u8; 13];
            k[..8].copy_from_slice(&a);
            k[8..].copy_from_slice(&b[..5]);
            k
        })
        .collect();
    let mask = ((1u32 << vbits) - 1) as u16;
    let values = (0..n).map(|_| splitmix(&mut s) as u16 & mask).collect();
    (raw, values)
}

fn build_and_check(n: usize, vbits: u8, max_bits_per_key: f64) {
    let (raw, values) = keys(n, vbits, 1234 + vbits as u64);
    let kr: Vec<&[u8]> = raw.iter().map(|k| k.as_slice()).collect();
    let opts = BuildOptions {
        config: Config::C16_8,
        value_bits: vbits,
        threads: 0,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    let t0 = Instant::now();
    let t = SetSep::build(&kr, &values, &opts).expect("build");
    let secs = t0.elapsed().as_secs_f64();
    let st = t.stats();
    eprintln!(
        "{n} keys, {vbits}-bit values: build {secs:.2} s ({:.2} M keys/s), {:.4} bits/key, {} fallback keys ({:.5}%), {} bytes on {}",
        n as f64 / secs / 1e6,
        st.bits_per_key,
        st.fallback_keys,
        st.fallback_keys as f64 * 100.0 / n as f64,
        st.bytes,
        st.page_info.label()
    );
    let mut out = vec![0u16; n];
    t.lookup_batch(&kr, &mut out);
    let wrong = out.iter().zip(&values).filter(|(a, b)| a != b).count();
    assert_eq!(wrong, 0, "{wrong} wrong values");
    for i in (0..n).step_by(997) {
        assert_eq!(t.lookup(kr[i]), values[i]);
    }
    assert!(
        st.bits_per_key <= max_bits_per_key,
        "{} bits/key > {max_bits_per_key}",
        st.bits_per_key
    );
    assert!(
        st.fallback_keys * 10_000 <= n as u64,
        "fallback {} keys > 0.01%",
        st.fallback_keys
    );
    // The saved table loads back identical.
    let bytes = t.to_bytes();
    assert_eq!(SetSep::from_bytes(&bytes).expect("load").to_bytes(), bytes);
}

#[test]
#[ignore = "large: 1M-16M keys, release mode; run with --ignored"]
fn large_16m_keys_2bit_values() {
    build_and_check(16 << 20, 2, 3.55);
}

#[test]
#[ignore = "large: 1M-16M keys, release mode; run with --ignored"]
fn large_16m_keys_1bit_values() {
    build_and_check(16 << 20, 1, 2.05);
}

#[test]
#[ignore = "large: 1M-16M keys, release mode; run with --ignored"]
fn large_1m_keys_both_widths() {
    build_and_check(1 << 20, 1, 2.05);
    build_and_check(1 << 20, 2, 3.55);
}

#[test]
#[ignore = "large: 1M-16M keys, release mode; run with --ignored"]
fn large_updates_at_1m_keys() {
    let n = 1 << 20;
    let (raw, mut values) = keys(n, 2, 99);
    let kr: Vec<&[u8]> = raw.iter().map(|k| k.as_slice()).collect();
    let opts = BuildOptions {
        value_bits: 2,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    let mut up = Updatable::build(&kr, &values, &opts).expect("build");
    let mut replica = SetSep::from_bytes(&up.table().to_bytes()).unwrap();
    let mut s = 5u64;
    for i in 0..100_000u32 {
        let j = (splitmix(&mut s) % n as u64) as usize;
        let v = (i % 4) as u16;
        let d = up.insert(kr[j], v).expect("update");
        values[j] = v;
        replica
            .apply_delta(&sb_setsep::Delta::from_bytes(&d.to_bytes()).unwrap())
            .unwrap();
    }
    assert!(replica.to_bytes() == up.table().to_bytes());
    let mut out = vec![0u16; n];
    replica.lookup_batch(&kr, &mut out);
    assert!(
        out == values,
        "replica answers differ from the updated values"
    );
}
