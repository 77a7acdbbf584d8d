//! A writer killed with SIGKILL at a random moment loses no acknowledged record.
//!
//! `crash_test_kill_the_writer_at_random_moments` runs this test binary again as a child
//! (`crash_child`, with `SB_WAL_CRASH_DIR` set), which opens the log, checks what it recovered,
//! then appends and commits numbered records (batches of 1 to 64, some records of 256 KB so a
//! kill can land inside a write, a checkpoint now and then) with fdatasync, printing
//! `ACK <lsn>` after each commit returns. The parent kills it after a random delay, reopens the
//! log and checks: every acknowledged LSN is there, every record holds the bytes written for
//! its LSN (so nothing is out of order or after a gap), and the snapshot matches its LSN.
//! Several rounds on the same log, so recovery itself is recovered from. The seed is printed;
//! `SB_WAL_CRASH_SEED=N` replays the parent's choices (the kill moments are still timing).

use rand::{Rng, SeedableRng};
use sb_wal::{Lsn, Recovery, SyncMode, Wal, WalOptions};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DIR_VAR: &str = "SB_WAL_CRASH_DIR";

fn opts() -> WalOptions {
    WalOptions {
        identity: b"crash test".to_vec(),
        sync: SyncMode::Data,
        ..WalOptions::default()
    }
}

/// The bytes of record `lsn`: its number, then a filler whose length and content follow from it.
fn record(lsn: Lsn) -> Vec<u8> {
    let len = if lsn % 97 == 0 {
        256 << 10
    } else {
        (lsn % 41) as usize
    };
    let mut r = lsn.to_le_bytes().to_vec();
    r.extend((0..len).map(|i| (lsn as usize).wrapping_mul(7).wrapping_add(i) as u8));
    r
}

fn snapshot_data(lsn: Lsn) -> Vec<u8> {
    format!("state up to {lsn}").into_bytes()
}

/// Checks a recovery against the writer's rules; returns its last LSN.
fn check(rec: &Recovery) -> Lsn {
    let snap = rec.snapshot.as_ref().map_or(0, |s| s.lsn);
    if let Some(s) = &rec.snapshot {
        assert_eq!(s.data, snapshot_data(s.lsn), "snapshot at {}", s.lsn);
    }
    assert_eq!(rec.first_lsn, snap + 1);
    for (lsn, r) in rec.iter() {
        assert!(
            r == record(lsn).as_slice(),
            "record {lsn} holds other bytes"
        );
    }
    assert_eq!(rec.last_lsn, snap + rec.records.len() as u64);
    rec.last_lsn
}

#[test]
#[ignore = "child process of crash_test_kill_the_writer_at_random_moments (does nothing alone)"]
fn crash_child() {
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        return;
    };
    let (mut wal, rec) = Wal::open(Path::new(&dir), &opts()).unwrap();
    let mut lsn = check(&rec);
    println!("READY {lsn} torn {}", rec.torn_tail_bytes);
    let start = Instant::now();
    // Bounded, in case the parent is gone (printing to a closed pipe panics, too).
    while start.elapsed() < Duration::from_secs(20) {
        let batch = 1 + sb_common::splitmix64_mix(lsn) % 64;
        for _ in 0..batch {
            lsn = wal.append(&record(wal.last_lsn() + 1)).unwrap();
        }
        assert_eq!(wal.commit().unwrap(), lsn);
        println!("ACK {lsn}");
        if lsn % 3000 < batch {
            wal.checkpoint(&snapshot_data(lsn)).unwrap();
            println!("CHECKPOINT {lsn}");
        }
    }
}

#[test]
fn crash_test_kill_the_writer_at_random_moments() {
    let seed = std::env::var("SB_WAL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            t.as_nanos() as u64 ^ u64::from(std::process::id())
        });
    println!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut acked_total = 0;
    let mut torn_seen = 0;
    let mut checkpoints = 0;
    for round in 0..6 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait until it has recovered, then let it write for a random while.
        let mut lines = Vec::new();
        loop {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("child never became ready");
            let ready = line.contains("READY");
            lines.push(line);
            if ready {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..300)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        assert!(
            status.code().is_none(),
            "round {round}: the child exited by itself: {status}; {lines:?}"
        );

        let acked = lines
            .iter()
            .filter_map(|l| l.strip_prefix("ACK "))
            .map(|n| n.parse::<Lsn>().unwrap())
            .max();
        checkpoints += lines.iter().filter(|l| l.starts_with("CHECKPOINT")).count();
        let (wal, rec) = Wal::open(dir.path(), &opts()).unwrap();
        let last = check(&rec);
        let acked = acked.unwrap_or(0);
        assert!(
            last >= acked,
            "round {round}: acknowledged {acked}, recovered only up to {last}"
        );
        assert!(
            acked >= acked_total,
            "round {round}: went back from {acked_total} to {acked}"
        );
        torn_seen += usize::from(rec.torn_tail_bytes > 0);
        println!(
            "round {round}: acked {acked}, recovered {last} ({} records after the snapshot at {:?}), torn tail {} bytes",
            rec.records.len(),
            rec.snapshot.as_ref().map(|s| s.lsn),
            rec.torn_tail_bytes
        );
        acked_total = acked.max(last);
        drop(wal);
    }
    println!(
        "{acked_total} records, {checkpoints} checkpoints, {torn_seen} torn tails over 6 kills"
    );
    assert!(acked_total > 0, "the child never committed");
}
