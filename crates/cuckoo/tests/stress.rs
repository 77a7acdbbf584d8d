//! One writer inserting, deleting, updating and displacing while readers run single and batched
//! lookups and check every answer against what the writer has committed. Release mode, `#[ignore]`d:
//! `cargo test -p sb-cuckoo --release --test stress -- --ignored large_`.

use rand::{Rng, SeedableRng};
use sb_cuckoo::{CuckooTable, Params};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KB: usize = 13;
const VB: usize = 16;

fn key(id: u32) -> [u8; KB] {
    let mut k = [0x5Au8; KB];
    k[..4].copy_from_slice(&id.to_le_bytes());
    k[9..].copy_from_slice(&id.wrapping_mul(0x9E37_79B9).to_le_bytes());
    k
}

fn mix(id: u32, generation: u32) -> u64 {
    let x = ((generation as u64) << 32 | id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^ (x >> 29)
}

/// A value that names its key and generation, and is detectably wrong when torn.
fn value(id: u32, generation: u32) -> [u8; VB] {
    let mut v = [0u8; VB];
    v[..8].copy_from_slice(&((generation as u64) << 32 | id as u64).to_le_bytes());
    v[8..].copy_from_slice(&mix(id, generation).to_le_bytes());
    v
}

/// Whether `v` is a value of key `id` (any generation).
fn valid(id: u32, v: &[u8]) -> bool {
    let w0 = u64::from_le_bytes(v[..8].try_into().unwrap());
    let w1 = u64::from_le_bytes(v[8..16].try_into().unwrap());
    w0 as u32 == id && w1 == mix(id, (w0 >> 32) as u32)
}

#[test]
#[ignore = "large: threads for seconds, release mode; run with --ignored"]
fn large_one_writer_many_readers() {
    let stable = 300_000u32;
    let churn = 60_000u32;
    let mut p = Params::new(KB, VB, 360_000).with_seed(0x5eed);
    p.slots_per_bucket = 4;
    let mut t = CuckooTable::new(p).unwrap();
    for id in 0..stable {
        t.insert(&key(id), &value(id, 0)).unwrap();
    }
    let (mut w, r) = t.into_concurrent();
    // Oracle of the churn keys: `4 * changes + 2 * present + busy`; a reader that sees the same
    // settled (even) state before and after its lookup must get exactly that answer.
    let state: Arc<Vec<AtomicU64>> = Arc::new((0..churn).map(|_| AtomicU64::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|ti| {
            let (r, state, stop) = (r.clone(), state.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(ti);
                let (mut lookups, mut wrong) = (0u64, 0u64);
                let batch = 32;
                let mut keys = vec![0u8; batch * KB];
                let mut ids = vec![0u32; batch];
                let mut vals = vec![0u8; batch * VB];
                let mut found = vec![false; batch];
                let mut before = vec![0u64; batch];
                while !stop.load(SeqCst) {
                    for i in 0..batch {
                        ids[i] = if rng.gen_bool(0.5) {
                            rng.gen_range(0..stable)
                        } else {
                            stable + rng.gen_range(0..churn)
                        };
                        keys[i * KB..(i + 1) * KB].copy_from_slice(&key(ids[i]));
                        if ids[i] >= stable {
                            before[i] = state[(ids[i] - stable) as usize].load(SeqCst);
                        }
                    }
                    if ti == 0 {
                        r.lookup_batch(&keys, &mut vals, &mut found);
                    } else {
                        for i in 0..batch {
                            found[i] = r.lookup_into(
                                &keys[i * KB..(i + 1) * KB],
                                &mut vals[i * VB..(i + 1) * VB],
                            );
                        }
                    }
                    for i in 0..batch {
                        let id = ids[i];
                        let v = &vals[i * VB..(i + 1) * VB];
                        let ok = if id < stable {
                            found[i] && valid(id, v)
                        } else {
                            let s = before[i];
                            let settled =
                                s & 1 == 0 && state[(id - stable) as usize].load(SeqCst) == s;
                            if found[i] && !valid(id, v) {
                                false
                            } else if settled {
                                found[i] == (s & 2 != 0)
                            } else {
                                true
                            }
                        };
                        wrong += !ok as u64;
                    }
                    lookups += batch as u64;
                }
                (lookups, wrong)
            })
        })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let mut present = vec![false; churn as usize];
    let mut generation = vec![0u32; stable as usize];
    let (mut ops, mut full) = (0u64, 0u64);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        for _ in 0..1000 {
            if rng.gen_bool(0.2) {
                let id = rng.gen_range(0..stable);
                generation[id as usize] += 1;
                assert!(w
                    .update(&key(id), &value(id, generation[id as usize]))
                    .unwrap());
            } else {
                let c = rng.gen_range(0..churn) as usize;
                let id = stable + c as u32;
                let s = state[c].load(SeqCst);
                state[c].store(s | 1, SeqCst);
                if present[c] {
                    assert!(w.remove(&key(id)));
                    present[c] = false;
                } else if w.insert(&key(id), &value(id, 7)).is_ok() {
                    present[c] = true;
                } else {
                    full += 1;
                }
                state[c].store(((s >> 2) + 1) << 2 | (present[c] as u64) << 1, SeqCst);
            }
            ops += 1;
        }
    }
    stop.store(true, SeqCst);
    let results: Vec<_> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    let moves = w.displacements();
    eprintln!(
        "writer: {ops} ops, {moves} displacements, {full} full, load {:.3}; readers (lookups, wrong): {results:?}",
        w.load_factor()
    );
    assert!(moves > 10_000, "the writer must displace keys ({moves})");
    for (lookups, wrong) in results {
        assert!(lookups > 100_000);
        assert_eq!(wrong, 0, "wrong answers");
    }
    // After the run the table matches the writer's view exactly.
    for id in 0..stable {
        assert_eq!(
            w.lookup(&key(id)),
            Some(value(id, generation[id as usize]).to_vec())
        );
    }
    for c in 0..churn {
        assert_eq!(w.contains(&key(stable + c)), present[c as usize]);
    }
}
