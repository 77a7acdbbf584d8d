//! Profiling target for the update and batched lookup paths: builds a table of N random 13-byte
//! keys with 2-bit values, then times value changes and batched lookups (run under `perf record`
//! or `valgrind --tool=callgrind`); `update` also compares one `insert` per update with
//! `insert_batch` in interleaved rounds.
//!
//! `cargo run --release -p sb-setsep --example updatecost -- [N] [UPDATES] [what: update|lookup|both]`
use sb_setsep::{BuildOptions, SetSep, Updatable};
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4_000_000);
    let nu: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let what = args.next().unwrap_or_else(|| "both".into());
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let arena: Vec<u8> = (0..n * 13).map(|_| rnd() as u8).collect();
    let keys: Vec<&[u8]> = arena.chunks_exact(13).collect();
    let values: Vec<u16> = (0..n).map(|_| (rnd() & 3) as u16).collect();
    let opts = BuildOptions {
        value_bits: 2,
        threads: 1,
        seed: 0x5eed_5e75_e900_0001,
        build_id: 1,
        ..BuildOptions::default()
    };
    if what != "lookup" {
        let mut u = Updatable::build(&keys, &values, &opts).expect("build");
        let ups: Vec<(usize, u16)> = (0..nu)
            .map(|_| {
                let i = (rnd() % n as u64) as usize;
                (i, (values[i] ^ (1 + (rnd() % 3) as u16)) & 3)
            })
            .collect();
        // The update keys contiguous in update order (as `bench gpt` stores them).
        let ukeys: Vec<u8> = ups.iter().flat_map(|&(i, _)| keys[i].to_vec()).collect();
        let t = Instant::now();
        for (k, &(_, v)) in ukeys.chunks_exact(13).zip(&ups) {
            std::hint::black_box(u.insert(k, v).expect("insert"));
        }
        let el = t.elapsed().as_secs_f64();
        println!("updates: {:.1} K/s", nu as f64 / el / 1e3);
        if what == "update" {
            // One `insert` per update against `insert_batch` of 32, interleaved in rounds on the
            // same table: one-by-one rounds set the new values, batched rounds the original
            // ones back, so every update is a change (except in the first round, dropped).
            let mut rates = [Vec::new(), Vec::new()];
            for _ in 0..6 {
                for (mode, r) in rates.iter_mut().enumerate() {
                    let batch: Vec<(&[u8], u16)> = ups
                        .iter()
                        .zip(ukeys.chunks_exact(13))
                        .map(|(&(i, v), k)| (k, if mode == 1 { values[i] } else { v }))
                        .collect();
                    let t = Instant::now();
                    if mode == 0 {
                        for &(k, v) in &batch {
                            std::hint::black_box(u.insert(k, v).expect("insert"));
                        }
                    } else {
                        for c in batch.chunks(32) {
                            u.insert_batch(c, |d| {
                                std::hint::black_box(d);
                            })
                            .expect("batch");
                        }
                    }
                    r.push(nu as f64 / t.elapsed().as_secs_f64() / 1e3);
                }
            }
            rates[0].remove(0);
            rates[1].remove(0);
            for (name, r) in ["one by one", "insert_batch(32)"]
                .iter()
                .zip(rates.iter_mut())
            {
                r.sort_by(f64::total_cmp);
                println!(
                    "{name}: median {:.1} K/s {:?}",
                    r[r.len() / 2],
                    r.iter().map(|x| *x as u32).collect::<Vec<_>>()
                );
            }
        }
    }
    if what != "update" {
        let t = SetSep::build(&keys, &values, &opts).expect("build");
        let order: Vec<u8> = (0..n)
            .flat_map(|_| keys[(rnd() % n as u64) as usize].to_vec())
            .collect();
        let ks: Vec<&[u8]> = order.chunks_exact(13).collect();
        let mut out = [0u16; 32];
        let mut acc = 0u64;
        let mut rates = Vec::new();
        // Many short passes; the best and the median pass are reported (the machine is shared).
        for _ in 0..15 {
            let start = Instant::now();
            for c in ks.chunks(32) {
                t.lookup_batch(c, &mut out[..c.len()]);
                acc += out[0] as u64;
            }
            rates.push(n as f64 / start.elapsed().as_secs_f64() / 1e6);
        }
        rates.sort_by(f64::total_cmp);
        let (best, med) = (rates[rates.len() - 1], rates[rates.len() / 2]);
        let mut single = Vec::new();
        for _ in 0..7 {
            let start = Instant::now();
            for k in &ks {
                acc += t.lookup(k) as u64;
            }
            single.push(n as f64 / start.elapsed().as_secs_f64() / 1e6);
        }
        single.sort_by(f64::total_cmp);
        println!(
            "single best {:.1} median {:.1} Mops",
            single[single.len() - 1],
            single[single.len() / 2]
        );
        println!("batched best {best:.1} median {med:.1} Mops ({acc})");
    }
}
