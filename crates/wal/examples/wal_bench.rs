//! Group commit throughput of the log on this machine's disk: commits/s and records/s for
//! 1, 16 and 256 records per commit, with fdatasync (and, for comparison, without any flush).
//! Prints one JSON object; every figure is the median of `--runs` runs.
//!
//! ```text
//! cargo run --release -p sb-wal --example wal_bench -- [--dir DIR] [--seconds S] [--runs N] [--record-bytes B]
//! ```
//! The log is written in a temporary directory under `--dir` (default: the current directory,
//! so it lands on the disk and not on a tmpfs).

use sb_wal::{SyncMode, Wal, WalOptions};
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct Args {
    dir: PathBuf,
    seconds: f64,
    runs: usize,
    record_bytes: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        dir: PathBuf::from("."),
        seconds: 1.0,
        runs: 3,
        record_bytes: 64,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => a.dir = PathBuf::from(value()),
            "--seconds" => a.seconds = value().parse().expect("--seconds"),
            "--runs" => a.runs = value().parse().expect("--runs"),
            "--record-bytes" => a.record_bytes = value().parse().expect("--record-bytes"),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

struct Run {
    commits_per_s: f64,
    records_per_s: f64,
    commit_p50_us: f64,
    commit_p99_us: f64,
}

fn run(args: &Args, batch: usize, sync: SyncMode) -> Run {
    let tmp = tempfile::tempdir_in(&args.dir).expect("temp dir");
    let opts = WalOptions {
        identity: b"bench".to_vec(),
        sync,
        ..WalOptions::default()
    };
    let (mut wal, _) = Wal::open(tmp.path(), &opts).expect("open");
    let record = vec![0xa5u8; args.record_bytes];
    let mut lat = Vec::new();
    let limit = Duration::from_secs_f64(args.seconds);
    let start = Instant::now();
    let mut commits = 0u64;
    while start.elapsed() < limit {
        let t = Instant::now();
        for _ in 0..batch {
            wal.append(&record).expect("append");
        }
        wal.commit().expect("commit");
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        commits += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    Run {
        commits_per_s: commits as f64 / secs,
        records_per_s: (commits * batch as u64) as f64 / secs,
        commit_p50_us: pct(0.5),
        commit_p99_us: pct(0.99),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = parse_args();
    let mut results = Vec::new();
    for (sync, name) in [(SyncMode::Data, "fdatasync"), (SyncMode::Never, "none")] {
        for batch in [1usize, 16, 256] {
            let runs: Vec<Run> = (0..args.runs).map(|_| run(&args, batch, sync)).collect();
            let m =
                |f: fn(&Run) -> f64| (median(runs.iter().map(f).collect()) * 10.0).round() / 10.0;
            results.push(serde_json::json!({
                "sync": name,
                "records_per_commit": batch,
                "commits_per_s": m(|r| r.commits_per_s),
                "records_per_s": m(|r| r.records_per_s),
                "commit_p50_us": m(|r| r.commit_p50_us),
                "commit_p99_us": m(|r| r.commit_p99_us),
                "runs_records_per_s": runs.iter().map(|r| r.records_per_s.round()).collect::<Vec<_>>(),
            }));
        }
    }
    let out = serde_json::json!({
        "bench": "sb-wal group commit",
        "record_bytes": args.record_bytes,
        "seconds_per_run": args.seconds,
        "runs": args.runs,
        "statistic": "median of runs",
        "results": results,
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
}
