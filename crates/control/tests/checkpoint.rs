//! Checkpoints (`Node::checkpoint`) under the deterministic simulation: logs are replaced by
//! their node's checkpoint now and then, nodes are killed and restarted from them (with and
//! without replication), and every invariant of `sb_control::sim` holds after every step and
//! at quiescence (no acknowledged update lost, every FIB its owners' slice, every GPT sending
//! each key to a node that has it). A snapshot's data is dropped once in the log, and made
//! anew when a restarted replica needs it. `SB_DST_CKPT_SCHEDULES=N` runs N schedules (default 60).

use sb_control::sim::{Sim, SimConfig};
use sb_control::Tuning;

fn config(seed: u64) -> SimConfig {
    let replicated = seed % 2 == 1;
    SimConfig {
        seed: 5_000_000 + seed,
        nodes: 3 + (seed % 3) as u16,
        flows: 40 + (seed % 7) as usize * 10,
        drop_permille: [0, 20, 100][(seed % 3) as usize],
        max_delay: [200_000, 5_000_000][(seed / 3 % 2) as usize],
        inflight: 6,
        max_updates: 8,
        // Often, so that most restarts replay a checkpoint and what followed it.
        checkpoint_permille: 300,
        tuning: Tuning {
            max_batch: [3, 1024][(seed / 2 % 2) as usize],
            // In-memory Raft logs compacted often: replicas behind get snapshots made anew.
            raft_trim_entries: [4, 1024][(seed / 4 % 2) as usize],
            replicas: if replicated { 3 } else { 1 },
            rib_key_prefix: if seed % 4 < 2 {
                vec![0x5a, 0x5a]
            } else {
                Vec::new()
            },
            ..SimConfig::default().tuning
        },
        ..SimConfig::default()
    }
}

#[test]
fn restarts_from_checkpointed_logs_keep_every_invariant() {
    let n = std::env::var("SB_DST_CKPT_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60u64);
    let (mut checkpoints, mut acked, mut replicated_checkpoints) = (0, 0, 0);
    let mut served = 0;
    for seed in 0..n {
        if std::env::var("SB_DST_VERBOSE").is_ok() {
            eprintln!("schedule {seed}");
        }
        let cfg = config(seed);
        let nodes = cfg.nodes;
        let replicated = cfg.tuning.replicas > 1;
        let mut sim = Sim::new(cfg);
        sim.run_until(700_000_000);
        // Two victims in turn, each restarted from its (checkpointed) log while updates go on.
        for (k, (down, up)) in [(700, 1_000), (1_300, 1_500)].into_iter().enumerate() {
            let victim = ((seed + k as u64) % nodes as u64) as u16;
            sim.run_until(down * 1_000_000);
            sim.kill(victim);
            sim.run_until(up * 1_000_000);
            sim.restart(victim);
        }
        sim.run_until(2_200_000_000);
        sim.quiesce(300_000_000_000);
        sim.check_quiescent();
        checkpoints += sim.checkpoints;
        acked += sim.acked_updates;
        if replicated {
            replicated_checkpoints += sim.checkpoints;
        }
        served += sim.snapshots_served;
    }
    eprintln!("{checkpoints} checkpoints ({replicated_checkpoints} replicated), {served} snapshots made anew for a replica behind, {acked} updates acknowledged");
    // The test exercises what it claims: logs were checkpointed, with and without replication,
    // and a restarted replica behind its leader's compacted log got a snapshot whose data the
    // leader had dropped (RaftStore keeps a snapshot's data only while needed).
    assert!(checkpoints > 0 && replicated_checkpoints > 0 && acked > 0);
    assert!(served > 0, "no snapshot was made anew");
}
