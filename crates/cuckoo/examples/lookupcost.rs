//! Instruction-count harness for `valgrind --tool=callgrind`: `lookupcost MODE ROUNDS` runs
//! ROUNDS x 1024 lookups of 13-byte keys (16-byte values) in a small table, MODE one of
//! `batch-hit`, `batch-miss`, `single-hit`, `single-miss`.
use sb_cuckoo::{CuckooTable, Params};

fn key(i: u32) -> [u8; 13] {
    let mut k = [7u8; 13];
    k[..4].copy_from_slice(&i.wrapping_mul(2654435761).to_le_bytes());
    k
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "batch-miss".into());
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(100);
    let mut tb = CuckooTable::new(Params::fast(13, 16, 4096).with_seed(0)).unwrap();
    for i in 0..3500u32 {
        tb.insert(&key(i), &[1u8; 16]).unwrap();
    }
    let base = if mode.ends_with("hit") { 0 } else { 1 << 20 };
    let keys: Vec<[u8; 13]> = (0..1024u32).map(|i| key(base + i)).collect();
    let flat = keys.concat();
    let mut vals = vec![0u8; 1024 * 16];
    let mut found = vec![false; 1024];
    let mut out = [0u8; 16];
    let mut hits = 0usize;
    for _ in 0..rounds {
        if mode.starts_with("batch") {
            for c in 0..32 {
                hits += tb.lookup_batch(
                    &flat[c * 32 * 13..(c + 1) * 32 * 13],
                    &mut vals[c * 32 * 16..(c + 1) * 32 * 16],
                    &mut found[c * 32..(c + 1) * 32],
                );
            }
        } else {
            for k in &keys {
                hits += tb.lookup_into(std::hint::black_box(k), &mut out) as usize;
            }
        }
    }
    println!("{mode}: {hits} hits");
}
