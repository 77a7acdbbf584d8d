//! The deterministic simulation test: whole clusters in one process under a seeded faulty
//! network, invariants checked after every step (see `sb_control::sim`). `SB_DST_SCHEDULES=N`
//! runs N schedules (default a few hundred); `SB_DST_SEED=S` runs only schedule S.

use sb_control::sim::{Sim, SimConfig};

fn config(seed: u64) -> SimConfig {
    let mut x = seed;
    let mut r = |n: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let small = r(2) == 0;
    let cfg = SimConfig {
        seed,
        nodes: 3 + r(3) as u16,
        flows: 20 + r(120) as usize,
        blocks_per_node: 1 + r(2),
        drop_permille: [0, 20, 100, 250][r(4) as usize],
        dup_permille: [0, 30, 100][r(3) as usize],
        max_delay: [200_000, 5_000_000, 40_000_000][r(3) as usize],
        fsync_delay: [0, 1_000_000, 10_000_000][r(3) as usize],
        inflight: [1, 3, 6, 16][r(4) as usize],
        max_updates: [1, 4, 8, 30][r(4) as usize],
        request_every: 2_000_000 + r(10_000_000),
        ..SimConfig::default()
    };
    if small {
        cfg.small_datagrams()
    } else {
        cfg
    }
}

fn schedules() -> Vec<u64> {
    if let Ok(s) = std::env::var("SB_DST_SEED") {
        return vec![s.parse().expect("SB_DST_SEED is a number")];
    }
    let n = std::env::var("SB_DST_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    (0..n).collect()
}

#[test]
fn random_schedules_keep_every_invariant() {
    let mut acked = 0;
    for seed in schedules() {
        let mut sim = Sim::new(config(seed));
        sim.run_until(1_500_000_000);
        sim.quiesce(300_000_000_000);
        sim.check_quiescent();
        acked += sim.acked_updates;
        if std::env::var("SB_DST_VERBOSE").is_ok() {
            eprintln!(
                "seed {seed}: {} steps, {} datagrams, {} replies, {} updates acked, {} uncertain",
                sim.steps,
                sim.delivered,
                sim.replies,
                sim.acked_updates,
                sim.uncertain_keys()
            );
        }
    }
    assert!(acked > 0, "no update was acknowledged");
}
