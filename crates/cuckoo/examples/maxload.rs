//! Prints the load factor at the first failed insert for random 13-byte keys.
use rand::{Rng, SeedableRng};
use sb_cuckoo::{CuckooTable, Params};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 20);
    let slots: usize = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let mut p = Params::new(13, 16, n).with_seed(0x5eed);
    p.slots_per_bucket = slots;
    let mut t = CuckooTable::new(p).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let start = std::time::Instant::now();
    let mut k = [0u8; 13];
    loop {
        rng.fill(&mut k[..]);
        if t.insert(&k, &[1u8; 16]).is_err() {
            break;
        }
    }
    println!(
        "n={} slots={} max_load={:.4} ({:.2} s, {:.1} Minserts/s)",
        t.capacity(),
        slots,
        t.load_factor(),
        start.elapsed().as_secs_f64(),
        t.len() as f64 / start.elapsed().as_secs_f64() / 1e6
    );
}
