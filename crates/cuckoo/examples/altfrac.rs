//! How often a miss reads the alternate bucket: fills a `Params::fast(13, 16, N)` table to load
//! 0.9 with random 13-byte keys, counts the absent random keys whose primary bucket has no tag
//! match and a non-zero overflow count for their class, then repeats after churn (rounds of
//! removing 10% of the keys and inserting as many new ones), with the share of saturated
//! (sticky) overflow counters. `altfrac [LOG2_N] [ROUNDS]` (defaults 20, 10); deterministic.
use rand::{Rng, SeedableRng};
use sb_cuckoo::{CuckooTable, Params};

const PROBES: usize = 1 << 20;

fn report(t: &CuckooTable, rng: &mut impl Rng, when: &str) {
    let mut k = [0u8; 13];
    let mut alt = 0usize;
    for _ in 0..PROBES {
        // A random 13-byte key is absent with overwhelming probability; make sure.
        rng.fill(&mut k[..]);
        if !t.contains(&k) && t.miss_reads_alternate(&k) {
            alt += 1;
        }
    }
    let (sat, all) = t.saturated_counters();
    println!(
        "{when}: load {:.4}, misses reading the alternate {:.4}, saturated counters {:.5} ({sat} of {all})",
        t.load_factor(),
        alt as f64 / PROBES as f64,
        sat as f64 / all as f64,
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let log2: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut t = CuckooTable::new(Params::fast(13, 16, 1 << log2).with_seed(0x5eed)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let target = (t.capacity() as f64 * 0.9) as usize;
    let mut present: Vec<[u8; 13]> = Vec::with_capacity(target);
    let mut k = [0u8; 13];
    while present.len() < target {
        rng.fill(&mut k[..]);
        if t.insert(&k, &[1u8; 16]).unwrap() {
            present.push(k);
        }
    }
    report(&t, &mut rng, "filled");
    for round in 1..=rounds {
        for _ in 0..target / 10 {
            let i = rng.gen_range(0..present.len());
            assert!(t.remove(&present.swap_remove(i)));
        }
        while present.len() < target {
            rng.fill(&mut k[..]);
            if t.insert(&k, &[1u8; 16]).unwrap() {
                present.push(k);
            }
        }
        if round == rounds {
            report(&t, &mut rng, &format!("after {rounds} churn rounds"));
        }
    }
    t.check_invariants().unwrap();
}
