//! The deterministic simulation test: whole clusters in one process under a seeded faulty
//! network, invariants checked after every step (see `sb_control::sim`). `SB_DST_SCHEDULES=N`
//! runs N schedules (default 1000); `SB_DST_SEED=S` runs only schedule S.

use sb_control::sim::{Sim, SimConfig};
use sb_control::Tuning;

/// The schedule count an environment variable asks for (`default` when it is not set or not
/// a number).
fn schedule_count(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn config(seed: u64) -> SimConfig {
    let mut x = seed;
    let mut r = |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
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
        // Small batches too: a key that waits for the batch in flight, many deltas per request.
        tuning: Tuning {
            max_batch: [1, 3, 1024][r(3) as usize],
            // Every other schedule without the handler's FIB map: its FIB is what the events
            // (prunes included) made of it.
            fib_map: seed % 2 == 0,
            // Every other schedule (crossing the one above) with a RIB that keeps half the
            // keys without their first two bytes.
            rib_key_prefix: if seed % 4 < 2 {
                vec![0x5a, 0x5a]
            } else {
                Vec::new()
            },
            // Every third schedule replicates each range on three nodes (Raft groups).
            replicas: if seed % 3 == 1 { 3 } else { 1 },
            // Two schedules in five compact the Raft groups' in-memory logs after 4 entries
            // (replicas behind get snapshots made anew), the others after 1024.
            raft_trim_entries: if seed % 5 < 2 { 4 } else { 1024 },
            ..SimConfig::default().tuning
        },
        // Half the schedules with an attacker replaying captured datagrams (across restarts
        // in the kill schedules): refused, they change nothing.
        replay_permille: [0, 0, 20, 100][r(4) as usize],
        ..SimConfig::default()
    };
    if small {
        cfg.small_datagrams()
    } else {
        cfg
    }
}

/// [`config`] of schedule `seed` on five nodes with drops of at most 2%: with more, a survivor
/// may lose its lease majority for a moment.
fn five_nodes(seed: u64) -> SimConfig {
    let mut cfg = config(seed);
    cfg.nodes = 5;
    cfg.drop_permille = cfg.drop_permille.min(20);
    cfg
}

/// [`config`] of schedule `seed` on `nodes` nodes without network faults (no drop, duplicate
/// or replay; delays up to `max_delay`): the faults a test makes are the only ones.
fn without_faults(seed: u64, nodes: u16, max_delay: u64) -> SimConfig {
    let mut cfg = config(seed);
    cfg.nodes = nodes;
    cfg.drop_permille = 0;
    cfg.dup_permille = 0;
    cfg.replay_permille = 0;
    cfg.max_delay = cfg.max_delay.min(max_delay);
    cfg
}

fn schedules() -> Vec<u64> {
    if let Ok(s) = std::env::var("SB_DST_SEED") {
        return vec![s.parse().expect("SB_DST_SEED is a number")];
    }
    let n = schedule_count("SB_DST_SCHEDULES", 1000);
    (0..n).collect()
}

#[test]
fn random_schedules_keep_every_invariant() {
    let (mut acked, mut replays, mut states) = (0, 0, 0);
    for seed in schedules() {
        let mut sim = Sim::new(config(seed));
        sim.run_until(1_500_000_000);
        sim.quiesce(300_000_000_000);
        sim.check_quiescent();
        acked += sim.acked_updates;
        replays += sim.replays;
        states += sim.state_acked;
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
    assert!(states > 0, "no PFCP state change was acknowledged");
    eprintln!("{acked} updates and {states} state changes acknowledged");
    assert!(
        replays > 0 || schedules().len() < 8,
        "no datagram was replayed"
    );
}

/// A node killed in the middle of an update stream (its unflushed log tail partly lost) and
/// restarted from its log catches up: GPT from its peers' pieces, FIB slice from the owners,
/// its own range from its log; meanwhile the others keep routing every flow to a node that has
/// it (checked after every step), and after quiescence nothing acknowledged is missing.
#[test]
fn killed_nodes_restart_from_their_logs_and_catch_up() {
    let n = schedule_count("SB_DST_KILL_SCHEDULES", 100);
    let mut restarted_with_changes = 0;
    for seed in 0..n {
        let mut cfg = config(1_000_000 + seed);
        cfg.inflight = cfg.inflight.max(3);
        let nodes = cfg.nodes;
        let mut sim = Sim::new(cfg);
        sim.run_until(600_000_000);
        let victim = (seed % nodes as u64) as u16;
        sim.kill(victim);
        sim.run_until(900_000_000);
        sim.restart(victim);
        let e = sim.node(victim).expect("up").epoch();
        assert!(e >= 2, "a restarted node starts a new epoch");
        if sim.node(victim).expect("up").owner_table().table().seq() == 0
            && sim.node(victim).expect("up").rib_entries().count() > 0
        {
            restarted_with_changes += 1;
        }
        sim.run_until(1_500_000_000);
        // A second victim, killed and restarted while the first may still be catching up.
        let second = ((seed + 1) % nodes as u64) as u16;
        sim.kill(second);
        sim.run_until(1_700_000_000);
        sim.restart(second);
        sim.run_until(2_200_000_000);
        sim.quiesce(300_000_000_000);
        sim.check_quiescent();
        assert!(sim.node(victim).expect("up").ready());
    }
    assert!(restarted_with_changes > 0);
}

/// Admission control: with FIBs of a few entries, inserts and moves to a full handler are
/// rejected (`fib_full`) before any GPT changes for them, and every invariant holds after
/// every step (a GPT never sends a key to a node without its entry; after quiescence the
/// FIBs are exactly the owners' RIBs, which hold every acknowledged update and none
/// rejected).
#[test]
fn full_fibs_reject_updates_and_keep_every_invariant() {
    let n = schedule_count("SB_DST_FULL_SCHEDULES", 60);
    let (mut full, mut acked) = (0, 0);
    for seed in 0..n {
        let mut cfg = config(2_000_000 + seed);
        cfg.flows = 12;
        // Room for every initial flow at one node, and a few more.
        cfg.fib_capacity = Some(12 + (seed % 4) as usize);
        let mut sim = Sim::new(cfg);
        sim.run_until(1_500_000_000);
        sim.quiesce(300_000_000_000);
        sim.check_quiescent();
        full += sim.fib_full;
        acked += sim.acked_updates;
    }
    assert!(full > 0, "no update met a full FIB");
    assert!(acked > 0, "no update was acknowledged");
}

/// Replication factor 3: each range is a Raft group on three nodes whose leader is the
/// owner. Owners are killed (their unflushed tail partly lost) and come back, a node is cut off
/// (symmetric or asymmetric) and healed, a node crashes again during its restart while another
/// is down: the nodes catch up from their groups' leaders, and every acknowledged update is
/// there (checked after every step as before, and after quiescence with every follower's RIB
/// equal to its owner's). `SB_DST_REPL_SCHEDULES=N` runs seeds 0..N (default 40),
/// `SB_DST_REPL_SEED=S` only seed S.
#[test]
fn replicated_ranges_survive_kills_partitions_and_crashes_during_restart() {
    let one = std::env::var("SB_DST_REPL_SEED").ok();
    let seeds: Vec<u64> = match &one {
        Some(s) => vec![s.parse().expect("SB_DST_REPL_SEED is a number")],
        None => {
            let n = schedule_count("SB_DST_REPL_SCHEDULES", 100);
            (0..n).collect()
        }
    };
    let (mut acked, mut fenced) = (0, 0);
    for seed in seeds {
        let sim = replicated_schedule(seed);
        acked += sim.acked_updates;
        fenced += sim.fenced_restarts;
    }
    // One schedule alone may acknowledge nothing (seed 196: with 25% loss the cluster serves
    // from 1.9 s on, after a kill during its start and an owner's lost lease), and still
    // checks every invariant.
    assert!(acked > 0 || one.is_some(), "no update was acknowledged");
    eprintln!("{acked} updates acknowledged, {fenced} fenced owners restarted");
}

/// Regression (seed 100 of the test above, when found): a change of a flow's value at its handler, node 0,
/// is installed there while node 0 is down; the owner declares node 0 gone and refuses the
/// change (`HandlerDown`), and node 0 restarts before the owner's batch has undone it. The
/// owner's new FIB stream to node 0 then carried the refused value (its RIB still held the
/// batch's pending change) and nothing took it back: node 0's FIB kept a value its owner's RIB
/// does not have.
#[test]
fn a_refused_install_is_not_in_a_restarted_handlers_slice() {
    // Seed 100 alone took that path until the stand-ins (issue 29) shifted its timing; seeds
    // 100..116 take it several times (101, 102, 104, 105, 112, 114 when written), each
    // schedule checked as above.
    let mut refused = 0;
    for seed in 100..116 {
        let sim = replicated_schedule(seed);
        refused += (0..sim.cfg.nodes)
            .filter_map(|i| sim.node(i))
            .map(|x| {
                x.status()
                    .rejected
                    .get("handler_down")
                    .copied()
                    .unwrap_or(0)
            })
            .sum::<u64>();
    }
    // The schedules still take that path: an owner refused an install at a gone handler.
    assert!(
        refused > 0,
        "seeds 100..116 no longer refuse an install at a gone handler"
    );
}

/// [`replicated_ranges_survive_kills_partitions_and_crashes_during_restart`]'s schedule
/// `seed`, run to quiescence and checked.
fn replicated_schedule(seed: u64) -> Sim {
    let mut cfg = config(3_000_000 + seed);
    cfg.tuning.replicas = 3;
    // Every other schedule with a small bound on what an owner holds for a gone peer: its
    // backlog is dropped and it is resynced when back.
    if seed % 2 == 1 {
        cfg.tuning.peer_backlog_bytes = 4096;
    }
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    sim.run_until(600_000_000);
    let victim = (seed % nodes as u64) as u16;
    match seed % 4 {
        0 => {
            sim.kill(victim);
            sim.run_until(1_200_000_000);
            sim.restart(victim);
        }
        1 => {
            sim.isolate(victim);
            sim.run_until(1_200_000_000);
            sim.heal();
        }
        2 => {
            // Asymmetric: the victim hears everyone, nobody hears it.
            for j in 0..nodes {
                if j != victim {
                    sim.partition(victim, j, false);
                }
            }
            sim.run_until(1_200_000_000);
            sim.heal();
        }
        _ => {
            // A crash during the restart (while the node catches up and campaigns), and
            // another node's crash overlapping it.
            sim.kill(victim);
            sim.run_until(800_000_000);
            sim.restart(victim);
            sim.run_until(830_000_000);
            sim.kill(victim);
            let other = (victim + 1) % nodes;
            sim.kill(other);
            sim.run_until(1_100_000_000);
            sim.restart(victim);
            sim.run_until(1_200_000_000);
            sim.restart(other);
        }
    }
    sim.run_until(2_000_000_000);
    sim.quiesce(300_000_000_000);
    sim.check_quiescent();
    sim
}

/// Update throughput of the simulated cluster with one replica per range and with three, in
/// one run (no network faults, 0.1 ms delivery, 1 ms fsync, invariants checked only at the
/// end): updates acknowledged per simulated second, and the wall time the simulation took.
/// `cargo test -p sb-control --test sim -- --ignored --nocapture update_rate`.
#[test]
#[ignore = "a measurement, not a check: scripts/test.sh runs it after the debug tests"]
fn update_rate_with_one_and_three_replicas() {
    for replicas in [1, 3] {
        let mut cfg = SimConfig {
            seed: 7,
            nodes: 5,
            flows: 1000,
            inflight: 16,
            max_updates: 30,
            request_every: 1_000_000,
            check_every_step: false,
            ..SimConfig::default()
        };
        cfg.tuning.replicas = replicas;
        let mut sim = Sim::new(cfg);
        sim.set_faults(false);
        // Past the start (and the groups' elections).
        sim.run_until(1_000_000_000);
        let (a0, t0) = (sim.acked_updates, std::time::Instant::now());
        let s0 = sim.now;
        sim.run_until(s0 + 1_000_000_000);
        let acked = sim.acked_updates - a0;
        let wall = t0.elapsed().as_secs_f64();
        sim.quiesce(60_000_000_000);
        sim.check_quiescent();
        eprintln!(
            "replicas {replicas}: {acked} updates acknowledged in 1 simulated s; wall {wall:.2} s ({:.0} updates/s of wall time)",
            acked as f64 / wall
        );
    }
}

/// A node killed and left dead (failure detection, `Tuning::lease`): once the others declare it
/// gone (within a lease, 500 ms), the live owners go on applying updates (an insert or change
/// that would install at the dead node is refused with `HandlerDown`) and clients go on being
/// answered, with every invariant checked after every step; on 5 nodes, with one replica per
/// range and with three. Asserted: the live owners apply updates in the 2 s after detection,
/// and the client has updates acknowledged within 8 s of it (a schedule of one-update batches,
/// 30-update requests and 40 ms delays takes seconds per request: seed 103, whose requests in
/// flight at the kill all touched the dead range, so their answers are uncertain).
/// `SB_DST_DEAD_SCHEDULES=N` runs seeds 0..N (default 12, and the regression seeds).
#[test]
fn a_dead_node_is_not_waited_for() {
    let seeds: Vec<u64> = match std::env::var("SB_DST_DEAD_SCHEDULES") {
        Ok(n) => (0..n.parse().expect("a number")).collect(),
        // 5: the client's one request in flight was at the killed node (waited out 60 s);
        // 103: the slow schedule above.
        Err(_) => (0..12).chain([103]).collect(),
    };
    for seed in seeds {
        let (applied, acked) = dead_node_schedule(seed);
        assert!(
            applied > 0,
            "seed {seed}: no update applied by a live owner in the 2 s after the kill was detected"
        );
        assert!(
            acked > 0,
            "seed {seed}: no update acknowledged in the 8 s after the kill was detected"
        );
    }
}

/// [`a_dead_node_is_not_waited_for`]'s schedule `seed`: the live owners' updates applied in the
/// 2 s after detection, and the client's acknowledgements in the 8 s after it.
fn dead_node_schedule(seed: u64) -> (u64, u64) {
    let mut cfg = five_nodes(5_000_000 + seed);
    let replicas = if seed % 2 == 0 { 1 } else { 3 };
    cfg.tuning.replicas = replicas;
    // Every third schedule with a small bound on what an owner holds for the dead node.
    if seed % 3 == 0 {
        cfg.tuning.peer_backlog_bytes = 1024;
    }
    let mut sim = Sim::new(cfg);
    // After the start (and, with replication, the elections and the fenced restarts they
    // may cause).
    sim.run_until(2_000_000_000);
    let victim = (seed % 5) as u16;
    sim.kill(victim);
    let applied = |sim: &Sim| -> u64 {
        (0..5)
            .filter_map(|i| sim.node(i).map(|n| n.status().applied))
            .sum()
    };
    // Detection (within a lease) and the forwards and batches it interrupted.
    sim.run_until(3_000_000_000);
    let (before, applied_before) = (sim.acked_updates, applied(&sim));
    sim.run_until(5_000_000_000);
    let applied_in = applied(&sim) - applied_before;
    sim.run_until(11_000_000_000);
    let acked = sim.acked_updates - before;
    eprintln!(
        "seed {seed}: R={replicas} node {victim} dead: {applied_in} updates applied by live owners in 2 s, {acked} acknowledged in 8 s, {} refused (handler down)",
        sim.handler_down
    );
    (applied_in, acked)
}

/// Issue 29: a dead node's range goes on taking the updates that need no GPT change. Five
/// nodes, three replicas; one node killed: its range's stand-in (the range's group's new
/// leader) applies the changes that keep a key's handler and the deletions of the range
/// (`node/guest.rs`), committed in the range's group and installed at the handlers; the
/// inserts and handler changes of that range are refused with `OwnerDown`. Every invariant
/// checked after every step (a GPT never sends a key to a node lacking it); then the dead
/// node comes back, and after quiescence the checks find every acknowledged update, those
/// its stand-in applied included, in its RIB and its handlers' FIBs exactly the RIBs.
/// Asserted: updates of the dead range acknowledged while it was gone.
/// `SB_DST_GUEST_SCHEDULES=N` (default 8).
#[test]
fn a_dead_nodes_range_takes_changes_and_deletions() {
    let n = schedule_count("SB_DST_GUEST_SCHEDULES", 8);
    for seed in 0..n {
        let mut cfg = five_nodes(7_000_000 + seed);
        cfg.tuning.replicas = 3;
        let nodes = cfg.nodes;
        let mut sim = Sim::new(cfg);
        sim.run_until(2_000_000_000);
        let dead = (seed % nodes as u64) as u16;
        sim.kill(dead);
        // Detection (a lease) and the range's election.
        sim.run_until(3_000_000_000);
        let gone0 = sim.acked_in_gone_ranges;
        sim.run_until(9_000_000_000);
        let acked = sim.acked_in_gone_ranges - gone0;
        let by_stand_in: u64 = (0..nodes)
            .filter_map(|i| sim.node(i).map(|x| x.status().stand_in_updates))
            .sum();
        assert!(
            acked > 0 && by_stand_in > 0,
            "seed {seed}: node {dead} dead for 6 s: {acked} updates of its range acknowledged, {by_stand_in} applied by a stand-in"
        );
        sim.restart(dead);
        sim.run_until(10_000_000_000);
        sim.quiesce(300_000_000_000);
        sim.check_quiescent();
        eprintln!(
            "seed {seed}: node {dead} dead 6 s: {acked} updates of its range acknowledged ({by_stand_in} applied by its stand-in), {} refused (owner down)",
            sim.owner_down
        );
    }
}

/// A node restarting while another is down (killed and left dead) becomes ready and serves,
/// with three replicas per range: the gone owner's piece and the restarted node's FIB slice of
/// its range come from the range's other replicas (`node/relay.rs`); the live owners go on
/// applying updates (they wait for the restarted node's delta acknowledgements, which need its
/// GPT) and clients on being answered; every invariant is checked after every step (a ready
/// node's FIB has every key a GPT sends it). Then the dead node comes back and, after
/// quiescence, everything agrees (its slice replaces the relayed one). With one replica per
/// range nothing can stand in: the range's state is on its owner alone.
/// `SB_DST_RESTART_DEAD_SCHEDULES=N` (default 8).
#[test]
fn a_node_restarting_while_another_is_down_becomes_ready() {
    let n = schedule_count("SB_DST_RESTART_DEAD_SCHEDULES", 8);
    for seed in 0..n {
        restart_while_down_schedule(seed);
    }
}

fn restart_while_down_schedule(seed: u64) {
    let mut cfg = five_nodes(6_000_000 + seed);
    // Five nodes, so that the three others keep their lease majority with two down (on fewer,
    // they are fenced and restart too, and a range whose live replicas all restarted since its
    // owner left has its piece nowhere: they wait for the owner). As in
    // a_dead_node_is_not_waited_for: drops of at most 2% (five_nodes).
    cfg.tuning.replicas = 3;
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    sim.run_until(2_000_000_000);
    let dead = (seed % nodes as u64) as u16;
    // The restarting node: next to the dead one (a replica of its range) or further.
    let b = ((seed / nodes as u64 % (nodes as u64 - 1)) as u16 + dead + 1) % nodes;
    sim.kill(dead);
    sim.run_until(3_000_000_000);
    sim.kill(b);
    sim.run_until(3_200_000_000);
    sim.restart(b);
    let mut t = 3_200_000_000;
    while !sim.node(b).is_some_and(|x| x.ready() && x.serving()) {
        t += 10_000_000;
        assert!(
            t <= 5_200_000_000,
            "seed {seed}: node {b}, restarted while node {dead} is down, is not ready and serving 2 s later: {:?}",
            sim.node(b).map(|x| (x.ready(), x.serving(), x.busy()))
        );
        sim.run_until(t);
    }
    let ready_ms = (t - 3_200_000_000) / 1_000_000;
    let applied = |sim: &Sim| -> u64 {
        (0..nodes)
            .filter_map(|i| sim.node(i).map(|n| n.status().applied))
            .sum()
    };
    let (acked0, applied0) = (sim.acked_updates, applied(&sim));
    sim.run_until(t + 2_000_000_000);
    let applied_in = applied(&sim) - applied0;
    sim.run_until(t + 8_000_000_000);
    let acked = sim.acked_updates - acked0;
    assert!(
        applied_in > 0 && acked > 0,
        "seed {seed}: after node {b} became ready, {applied_in} updates applied in 2 s, {acked} acknowledged in 8 s"
    );
    sim.restart(dead);
    sim.run_until(t + 9_000_000_000);
    sim.quiesce(300_000_000_000);
    sim.check_quiescent();
    eprintln!(
        "seed {seed}: {nodes} nodes, node {dead} down, node {b} restarted: ready in {ready_ms} ms; then {applied_in} updates applied in 2 s, {acked} acknowledged in 8 s"
    );
}

/// Datagrams of a node that the network lost (or an attacker held back) and that arrive after
/// newer ones of it do not make it heard again: once it died, failure detection keeps it gone.
/// Before, each such datagram refreshed it for a lease (a schedule with replays of lost
/// datagrams held a dead node's backlog past its bound so).
#[test]
fn old_datagrams_of_a_dead_node_do_not_keep_it_alive() {
    let mut cfg = five_nodes(42);
    cfg.drop_permille = 0;
    cfg.dup_permille = 0;
    cfg.replay_permille = 0;
    let mut sim = Sim::new(cfg);
    sim.run_until(2_000_000_000);
    // 60 ms of node 3's datagrams to node 2 held back; then 200 ms more pass; node 3 dies.
    sim.hold_back(3, 2, true);
    sim.run_until(2_060_000_000);
    sim.hold_back(3, 2, false);
    sim.run_until(2_260_000_000);
    sim.kill(3);
    sim.run_until(3_300_000_000);
    assert!(
        sim.node(2).unwrap().holds_gone(3),
        "node 2 holds node 3 gone 1.04 s after its death"
    );
    let mut released = 0;
    let mut t = 3_300_000_000;
    while sim.release_held() {
        released += 1;
        t += 20_000_000;
        sim.run_until(t);
        assert!(
            sim.node(2).unwrap().holds_gone(3),
            "node 2 heard the dead node 3 again after {released} old datagrams"
        );
    }
    assert!(released > 0, "nothing was held back");
    eprintln!("{released} old datagrams of the dead node delivered: it stayed gone");
}

/// Issue 29: a node of four that hears only one of its three peers for 3 s (both links to the
/// other two cut) is not fenced, nor declared gone: a declaration needs three of the four
/// nodes, the peer that hears it among them. So it keeps its epoch and its GPT, the owners
/// wait for it, and once the cuts heal everything agrees (every invariant checked after every
/// step, among them that no node's GPT sends a key to a node whose FIB lacks it). Until
/// 2026-11-30 such a node was fenced (it had lost its lease majority, 2 of 3 peers) and
/// restarted from its log again and again while cut; this test fails so (`fenced_restarts`).
/// Half the schedules with three replicas per range. `SB_DST_HALF_CUT_SCHEDULES=N`
/// (default 4).
#[test]
fn a_node_of_four_that_hears_one_peer_is_not_fenced() {
    for seed in 0..schedule_count("SB_DST_HALF_CUT_SCHEDULES", 4) {
        // No fault but the cuts: any fence would be theirs.
        let mut cfg = without_faults(8_000_000 + seed, 4, 5_000_000);
        cfg.tuning.replicas = if seed % 2 == 0 { 1 } else { 3 };
        let mut sim = Sim::new(cfg);
        sim.run_until(2_000_000_000);
        let v = (seed % 4) as u16;
        let (a, b, c) = ((v + 1) % 4, (v + 2) % 4, (v + 3) % 4);
        let fenced_before = sim.fenced_restarts;
        sim.partition(v, a, true);
        sim.partition(v, b, true);
        let mut t = 2_000_000_000;
        while t < 5_000_000_000 {
            t += 10_000_000;
            sim.run_until(t);
            for i in [a, b, c] {
                assert!(
                    !sim.node(i).unwrap().holds_gone(v),
                    "seed {seed}: node {i} declared node {v} gone, which node {c} hears"
                );
            }
        }
        assert_eq!(
            sim.fenced_restarts, fenced_before,
            "seed {seed}: a node was fenced while node {v} was cut off from {a} and {b}"
        );
        sim.heal();
        sim.run_until(t + 1_000_000_000);
        sim.quiesce(300_000_000_000);
        sim.check_quiescent();
        eprintln!(
            "seed {seed} (R={}): node {v} cut off from {a} and {b} for 3 s, no fence; {} updates acknowledged",
            if seed % 2 == 0 { 1 } else { 3 },
            sim.acked_updates
        );
    }
}

/// Issue 29: a node cut off from every peer for 400 ms (longer than its leases, 300 ms, shorter
/// than failure detection's 500 ms) loses its safe lease, and is not fenced: once it holds it
/// again, every peer tells it, in a heartbeat that echoes a stamp of its from then on, that it
/// did not declare it gone (`Node::lease_losses`: one lost, one recovered). Cut off for 1.5 s,
/// the control of this test, it is declared gone and fenced once a peer tells it so. Every
/// invariant checked after every step; both end quiescent with every FIB, GPT and RIB
/// agreeing. Until 2026-11-30 a node was fenced, and restarted from its log, at the loss
/// itself: this test fails so. Four and five nodes, one and three replicas.
/// `SB_DST_LEASE_SCHEDULES=N` (default 4).
#[test]
fn a_node_that_loses_its_lease_briefly_is_not_fenced() {
    for seed in 0..schedule_count("SB_DST_LEASE_SCHEDULES", 4) {
        let (declared, fenced, losses) = cut_schedule(seed, 400_000_000);
        assert!(
            !declared,
            "seed {seed}: the node cut off for 400 ms was declared gone"
        );
        assert_eq!(
            fenced, 0,
            "seed {seed}: a node was fenced after a 400 ms cut"
        );
        assert_eq!(losses, (1, 1), "seed {seed}: (safe leases lost, recovered)");
        let (declared, fenced, _) = cut_schedule(seed, 1_500_000_000);
        assert!(declared, "seed {seed}: cut off for 1.5 s, the node was not declared gone: the schedule tests nothing");
        assert!(
            fenced > 0,
            "seed {seed}: cut off for 1.5 s and declared gone, the node was not fenced"
        );
        eprintln!("seed {seed}: cut off 400 ms: a lease lost and recovered, no fence; 1.5 s: declared gone, {fenced} fences");
    }
}

/// [`a_node_that_loses_its_lease_briefly_is_not_fenced`]'s schedule: whether a node declared
/// the cut-off node gone, the fences from the cut to 2 s after it, and the cut-off node's
/// (safe leases lost, recovered) then (unless it was fenced).
fn cut_schedule(seed: u64, cut: u64) -> (bool, u64, (u64, u64)) {
    let mut cfg = without_faults(10_000_000 + seed, 4 + (seed % 2) as u16, 2_000_000);
    cfg.tuning.replicas = if seed / 2 % 2 == 0 { 1 } else { 3 };
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    let mut t = 2_000_000_000;
    sim.run_until(t);
    let v = (seed % nodes as u64) as u16;
    let fenced_before = sim.fenced_restarts;
    sim.isolate(v);
    let mut declared = false;
    let heal_at = t + cut;
    let end = heal_at + 2_000_000_000;
    while t < end {
        t += 5_000_000;
        if t >= heal_at && t < heal_at + 5_000_000 {
            sim.heal();
        }
        sim.run_until(t);
        declared |= (0..nodes)
            .filter(|&i| i != v)
            .any(|i| sim.node(i).is_some_and(|x| x.holds_gone(v)));
    }
    let fenced = sim.fenced_restarts - fenced_before;
    let losses = sim.node(v).map_or((0, 0), |x| x.lease_losses());
    sim.quiesce(300_000_000_000);
    sim.check_quiescent();
    (declared, fenced, losses)
}

/// Issue 29: a node that announces a pause of 2 s (`Node::announce_pause`, as its driver does
/// before a checkpoint that holds its control thread for seconds) and then stops for 1.5 s
/// (three leases; its timers, log and datagrams wait) is neither declared gone by any node nor
/// fenced, with every invariant checked after every step (the owners wait for it). The same
/// stop unannounced, the control of this test, gets it declared gone and fenced. Both end
/// quiescent with every FIB, GPT and RIB agreeing. Four and five nodes, one and three
/// replicas. `SB_DST_PAUSE_SCHEDULES=N` (default 4).
#[test]
fn an_announced_pause_is_waited_for() {
    for seed in 0..schedule_count("SB_DST_PAUSE_SCHEDULES", 4) {
        let (declared, fenced) = pause_schedule(seed, true);
        assert!(!declared, "seed {seed}: the paused node was declared gone");
        assert_eq!(fenced, 0, "seed {seed}: a node was fenced during the pause");
        let (declared, fenced) = pause_schedule(seed, false);
        assert!(declared, "seed {seed}: unannounced, the stopped node was not declared gone: the schedule tests nothing");
        assert!(
            fenced > 0,
            "seed {seed}: unannounced, the stopped node was not fenced"
        );
        eprintln!("seed {seed}: a 1.5 s stop announced: not declared gone, no fence; unannounced: declared gone, {fenced} fences");
    }
}

/// [`an_announced_pause_is_waited_for`]'s schedule: whether a node declared the stopped node
/// gone, and the fences from the stop to a second after it.
fn pause_schedule(seed: u64, announced: bool) -> (bool, u64) {
    let mut cfg = without_faults(9_000_000 + seed, 4 + (seed % 2) as u16, 5_000_000);
    cfg.tuning.replicas = if seed / 2 % 2 == 0 { 1 } else { 3 };
    // Unannounced, the stopped node's GPT lags the owners that stopped waiting for it, by
    // design: only the end is checked.
    cfg.check_every_step = announced;
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    let mut t = 2_000_000_000;
    sim.run_until(t);
    let v = (seed % nodes as u64) as u16;
    if announced {
        sim.announce_pause(v, 2_000_000_000);
        while !sim.node(v).unwrap().pause_held(1_500_000_000) {
            t += 10_000_000;
            assert!(
                t < 2_500_000_000,
                "seed {seed}: the pause is not held 0.5 s after its announcement"
            );
            sim.run_until(t);
        }
    }
    let fenced_before = sim.fenced_restarts;
    let end = t + 1_500_000_000;
    sim.stall(v, end);
    let mut declared = false;
    while t < end + 1_000_000_000 {
        t += 10_000_000;
        sim.run_until(t);
        declared |= (0..nodes)
            .filter(|&i| i != v)
            .any(|i| sim.node(i).is_some_and(|x| x.holds_gone(v)));
    }
    let fenced = sim.fenced_restarts - fenced_before;
    sim.quiesce(300_000_000_000);
    sim.check_quiescent();
    (declared, fenced)
}

/// Issue 29: what an owner holds for a peer gone too long is bounded
/// (`Tuning::peer_backlog_bytes`, small here): past the bound, its unacknowledged deltas and
/// FIB items are dropped and the peer is resynced when it is back (its FIB slice and the
/// owner's piece), with every invariant checked after every step. Two ways to be gone for
/// 3 s: killed and left dead, then restarted; or cut off from every node (it loses its lease
/// majority, is fenced and restarts in a new epoch while cut off), then healed.
///
/// Each schedule runs twice: with the bound, the most any live owner held for the victim
/// after its detection is at most the bound and some backlog was dropped; without it (the
/// bound `usize::MAX`), the same schedule's backlog passes the small bound (so this test fails
/// without the bound). In both, the victim catches up after it is back and, after
/// quiescence, every FIB, GPT and RIB agrees. `SB_DST_BACKLOG_SCHEDULES=N` (default 8).
#[test]
fn a_gone_peers_backlog_is_bounded_and_it_resyncs_when_back() {
    let n = schedule_count("SB_DST_BACKLOG_SCHEDULES", 8);
    const BOUND: usize = 1024;
    for seed in 0..n {
        let bounded = backlog_schedule(seed, BOUND);
        let unbounded = backlog_schedule(seed, usize::MAX);
        eprintln!(
            "seed {seed} ({}): most held for the victim after detection: {} bytes with a bound of {BOUND} ({} backlogs dropped), {} bytes without",
            if seed % 2 == 0 { "killed" } else { "cut off" },
            bounded.0,
            bounded.1,
            unbounded.0
        );
        assert!(
            bounded.0 <= BOUND,
            "seed {seed}: {} bytes held for a gone peer, bound {BOUND}",
            bounded.0
        );
        assert!(bounded.1 > 0, "seed {seed}: no backlog was dropped");
        assert!(
            unbounded.0 > BOUND,
            "seed {seed}: without the bound the backlog stays at {} bytes: the schedule does not test it",
            unbounded.0
        );
        assert_eq!(unbounded.1, 0);
    }
}

/// [`a_gone_peers_backlog_is_bounded_and_it_resyncs_when_back`]'s schedule `seed` with the
/// bound `bound`: the most a live owner held for the victim from 1 s after it went until it
/// came back, and the backlogs dropped.
fn backlog_schedule(seed: u64, bound: usize) -> (usize, u64) {
    let mut cfg = five_nodes(7_000_000 + seed);
    cfg.max_delay = cfg.max_delay.min(5_000_000);
    // Updates keep coming (one update per batch: a delta each).
    cfg.inflight = cfg.inflight.max(6);
    cfg.max_updates = cfg.max_updates.max(4);
    cfg.request_every = cfg.request_every.min(3_000_000);
    cfg.tuning.max_batch = 1;
    cfg.tuning.replicas = if seed % 4 < 2 { 1 } else { 3 };
    cfg.tuning.peer_backlog_bytes = bound;
    let killed = seed % 2 == 0;
    let victim = (seed / 2 % 5) as u16;
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    sim.run_until(2_000_000_000);
    if killed {
        sim.kill(victim);
    } else {
        sim.isolate(victim);
    }
    let mut most = 0;
    let mut t = 2_000_000_000;
    while t < 5_000_000_000 {
        t += 5_000_000;
        sim.run_until(t);
        if t >= 3_000_000_000 {
            for i in (0..nodes).filter(|&i| i != victim) {
                if let Some(x) = sim.node(i) {
                    most = most.max(x.peer_stream_bytes(victim));
                }
            }
        }
    }
    if killed {
        sim.restart(victim);
    } else {
        sim.heal();
    }
    let dropped: u64 = (0..nodes)
        .filter_map(|i| sim.node(i).map(|x| x.status().backlogs_dropped))
        .sum();
    // Back: it catches up (ready) while updates go on.
    let mut t = 5_000_000_000;
    while !sim.node(victim).is_some_and(|x| x.ready()) {
        t += 10_000_000;
        assert!(
            t <= 8_000_000_000,
            "seed {seed}: node {victim} is not ready 3 s after it came back: {:?}",
            sim.node(victim).map(|x| x.busy())
        );
        sim.run_until(t);
    }
    sim.run_until(t + 1_000_000_000);
    sim.quiesce(300_000_000_000);
    sim.check_quiescent();
    (most, dropped)
}

/// Issue 29, failover of handlers: a node is killed and left down for 4 s. Every live owner
/// moves the flows of its range that the dead node handled to live nodes (make-before-break:
/// every invariant is checked after every step, among them that no ready node's GPT sends a
/// key to a ready node whose FIB lacks it, and that a lookup of a key being moved gives its
/// old or its new handler only); within 2 s of the kill no live owner's range has a flow
/// left at the dead node. Then the node restarts and, once back, gets its flows back,
/// gradually; after quiescence no owner holds a moved flow, and every FIB, GPT and RIB agrees.
/// The dead node's own range's flows that it handled keep their GPT entries (no owner moves
/// them): with replicas, the next replica of its range stands in (every live node redirects to
/// it, and its FIB holds them all 4 s after the kill); the redirects end once the node is back.
/// Half the schedules with three replicas per range. `SB_DST_FAILOVER_SCHEDULES=N` (default
/// 8).
#[test]
fn a_dead_nodes_flows_move_to_live_nodes_and_come_back() {
    let n = schedule_count("SB_DST_FAILOVER_SCHEDULES", 8);
    let first = std::env::var("SB_DST_FAILOVER_FIRST").map_or(0, |s| s.parse().expect("a number"));
    for seed in first..first + n {
        failover_schedule(seed);
    }
}

fn failover_schedule(seed: u64) {
    let mut cfg = five_nodes(7_000_000 + seed);
    cfg.flows = 300;
    let replicas = if seed % 2 == 0 { 1 } else { 3 };
    cfg.tuning.replicas = replicas;
    // Batches of one or three updates, taking turns with the client's, move a few flows a
    // second: the 2 s bound is for batches as a node makes them.
    cfg.tuning.max_batch = cfg.tuning.max_batch.max(64);
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    sim.run_until(2_000_000_000);
    let victim = (seed % nodes as u64) as u16;
    let stranded = |sim: &Sim| -> usize {
        (0..nodes)
            .filter(|&o| o != victim)
            .filter_map(|o| sim.node(o))
            .map(|x| x.rib_entries().filter(|(_, h, _)| *h == victim).count())
            .sum()
    };
    let before = stranded(&sim);
    sim.kill(victim);
    let mut t = 2_000_000_000;
    while stranded(&sim) > 0 {
        t += 10_000_000;
        assert!(
            t <= 4_000_000_000,
            "seed {seed}: 2 s after node {victim} was killed, live owners still hold {} of its {before} flows; owners: {:?}",
            stranded(&sim),
            (0..nodes)
                .filter_map(|o| sim.node(o).map(|x| (o, x.rib_entries().filter(|(_, h, _)| *h == victim).count(), x.status().phase, x.status().moves_pending, x.status().flows_moved, x.busy())))
                .collect::<Vec<_>>()
        );
        sim.run_until(t);
    }
    let moved_ms = (t - 2_000_000_000) / 1_000_000;
    sim.run_until(6_000_000_000);
    // With replicas, the next replica of the victim's range stands in for the victim's own
    // flows: every live node redirects to it, and its FIB has them all.
    let own = sim.own_flows(victim);
    let standby = (victim + 1) % nodes;
    if replicas > 1 {
        for i in (0..nodes).filter(|&i| i != victim) {
            assert_eq!(
                sim.stand_ins(i).get(victim as usize).copied().flatten(),
                Some(standby),
                "seed {seed}: node {i} does not redirect gone node {victim} to {standby}: {:?}",
                sim.stand_ins(i)
            );
        }
        let missing = own.iter().filter(|k| !sim.fib_has(standby, k)).count();
        assert_eq!(
            missing,
            0,
            "seed {seed}: stand-in {standby} lacks {missing} of node {victim}'s {} own flows; its status: {:?}",
            own.len(),
            sim.node(standby).map(|x| x.status())
        );
        // The stand-in leads the victim's range's group (its priority is next to the
        // home's), so it takes the changes of the range's PFCP state records: the victim
        // has them when it is back (checked at quiescence).
        assert!(
            sim.node(standby).is_some_and(|x| x.leads_range(victim)),
            "seed {seed}: stand-in {standby} does not lead node {victim}'s range's group: {:?}",
            sim.node(standby).and_then(|x| x.group_state(victim))
        );
        assert!(
            sim.state_acked_for_gone > 0,
            "seed {seed}: no state change of node {victim}'s range acknowledged while it was gone"
        );
    }
    let moved = sim.flows_moved;
    assert!(
        before == 0 || moved > 0,
        "seed {seed}: nothing moved off node {victim}"
    );
    sim.restart(victim);
    sim.run_until(10_000_000_000);
    sim.quiesce(300_000_000_000);
    sim.check_quiescent();
    // The victim serves its range again: no node redirects it any more.
    for i in 0..nodes {
        assert!(
            sim.stand_ins(i).iter().all(|s| s.is_none()),
            "seed {seed}: node {i} still redirects after node {victim} came back: {:?}",
            sim.stand_ins(i)
        );
    }
    let away: usize = (0..nodes)
        .filter_map(|o| sim.node(o))
        .map(|x| x.moved_away())
        .sum();
    assert_eq!(
        away, 0,
        "seed {seed}: owners still hold flows moved off node {victim} after it came back"
    );
    eprintln!(
        "seed {seed}: node {victim} killed: {before} flows of live owners' ranges at it, all moved in {moved_ms} ms ({moved} moves); given back after its restart: {}; its own flows: {} ({}); its range's state changes acknowledged while it was gone: {} ({} dropped)",
        sim.given_back,
        own.len(),
        if replicas > 1 { "stood in for" } else { "no replica to stand in" },
        sim.state_acked_for_gone,
        sim.state_dropped
    );
}

/// Issue 29: a node whose log was lost (killed, its disk wiped, started again with an empty
/// log; or, every third schedule, the records from a random one on removed, as the repair of
/// a damaged record does) rejoins: its peers tell it the epoch they know of it, it restarts one above it, its
/// groups withhold their votes until they follow a leader again, and it becomes ready and
/// serving with nothing acknowledged lost (every invariant checked after every step, and at
/// quiescence every FIB, GPT and RIB agree). Without the epoch learnt it stays a stranger
/// (its hellos refused as `epoch_reused`) and never becomes ready, so this test fails.
/// `SB_DST_WIPE_SCHEDULES=N` (default 8).
#[test]
fn a_node_whose_log_was_lost_rejoins_and_nothing_is_lost() {
    let n = schedule_count("SB_DST_WIPE_SCHEDULES", 8);
    let mut withheld = 0;
    for seed in 0..n {
        withheld += wipe_schedule(seed);
    }
    // Some group of a wiped node was asked for a vote it withheld, or the schedules no
    // longer exercise that (look at them).
    eprintln!("{withheld} withheld vote requests in all");
}

fn wipe_schedule(seed: u64) -> u64 {
    let mut cfg = five_nodes(7_000_000 + seed);
    cfg.tuning.replicas = 3;
    let nodes = cfg.nodes;
    let mut sim = Sim::new(cfg);
    sim.run_until(2_000_000_000);
    let victim = (seed % nodes as u64) as u16;
    let before = sim.node(victim).map(|x| x.epoch()).expect("running");
    let state_before = sim.node(victim).map_or(0, |x| x.own_state().count());
    sim.kill(victim);
    // Every other schedule wipes it at once; the others after its peers declared it gone.
    let back = if seed % 2 == 0 {
        2_000_000_000
    } else {
        3_000_000_000
    };
    sim.run_until(back);
    // Every third schedule loses only the log's records from a random one on (a damaged
    // acknowledged record removed with what followed), the others all of it.
    if seed % 3 == 2 {
        sim.damage(victim);
    } else {
        sim.wipe(victim);
    }
    let mut t = back;
    while !sim
        .node(victim)
        .is_some_and(|x| x.ready() && x.serving() && !x.rejoining())
    {
        t += 10_000_000;
        assert!(
            t <= back + 5_000_000_000,
            "seed {seed}: node {victim}, its log wiped, is not back 5 s later: {:?}",
            sim.node(victim)
                .map(|x| (x.epoch(), x.ready(), x.serving(), x.rejoining(), x.busy()))
        );
        sim.run_until(t);
    }
    let after = sim.node(victim).map(|x| x.epoch()).expect("running");
    // (A damaged log that kept its epoch record starts above it without being told.)
    assert!(
        (sim.rejoins >= 1 || seed % 3 == 2) && after > before,
        "seed {seed}: epoch {before} before the wipe, {after} after, {} rejoins",
        sim.rejoins
    );
    // Updates go on after it is back.
    let acked0 = sim.acked_updates;
    sim.run_until(t + 3_000_000_000);
    assert!(
        sim.acked_updates > acked0,
        "seed {seed}: nothing acknowledged in 3 s after node {victim} rejoined"
    );
    sim.quiesce(300_000_000_000);
    // (Its range's PFCP state records: every acknowledged one is back, from the range's
    // other replicas.)
    sim.check_quiescent();
    let withheld = sim.node(victim).map_or(0, |x| x.status().votes_withheld);
    let state_after = sim.node(victim).map_or(0, |x| x.own_state().count());
    eprintln!(
        "seed {seed}: node {victim} lost its log at {} ms: epoch {before} -> {after}, back in {} ms, {withheld} votes withheld; its range's state records: {state_before} before, {state_after} after",
        back / 1_000_000,
        (t - back) / 1_000_000
    );
    withheld
}
