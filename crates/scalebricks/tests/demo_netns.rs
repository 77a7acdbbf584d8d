//! The README's real-ports variant of the main job, `scalebricks demo --netns`, run from outside
//! as a new user would, at small sizes: every architecture brought up as node processes in
//! network namespaces (AF_PACKET, the default I/O), traffic from `gen`, a sink on every node's
//! RAN side, and `cluster down`. Needs root (CI runs as root): without it the test fails under
//! `CI=true` and is skipped with a notice otherwise. Bounded in time; a guard removes the
//! demo's namespaces and processes if it is killed or the test fails.

mod common;
use common::*;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

#[test]
fn demo_netns_runs_three_architectures_on_node_processes() {
    if !can_run("demo_netns_runs_three_architectures_on_node_processes") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let child = Command::new(BIN)
        .args([
            "demo",
            "--netns",
            "--nodes",
            "3",
            "--flows",
            "2000",
            "--packets",
            "2000",
            "--json",
        ])
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn scalebricks demo --netns");
    let guard = Leftovers(format!("sbd{}-", child.id() % 100_000));
    let out = wait_limit(child, Duration::from_secs(240));
    let stdout = ok(&out, "demo --netns");
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["mode"], "netns");
    let rows = v["results"].as_array().unwrap();
    let archs: Vec<&str> = rows.iter().map(|r| r["arch"].as_str().unwrap()).collect();
    assert_eq!(archs, ["scalebricks", "full-dup", "hash-part"]);
    for r in rows {
        // Every packet sent reached its handling node's RAN side once, stamp intact.
        assert_eq!(r["sent"], 2000, "{r}");
        assert_eq!(r["received"], 2000, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["misrouted"], 0, "{r}");
        assert!(r["mpps_per_core"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["node_cpu_seconds"].as_f64().unwrap() > 0.0, "{r}");
        // Every packet was counted by the nodes' crossing histogram (0, 1 or 2 crossings).
        let crossings: u64 = r["crossings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(crossings, 2000, "{r}");
    }
    let mean = |i: usize| rows[i]["mean_fabric_crossings"].as_f64().unwrap();
    // gen sends round robin over 3 nodes: 2/3 of the packets enter another node than their
    // handling node and cross once; hash partitioning crosses up to twice (4/3 on average).
    assert!((mean(0) - 2.0 / 3.0).abs() < 0.05, "{}", mean(0));
    assert!((mean(1) - 2.0 / 3.0).abs() < 0.05, "{}", mean(1));
    assert!((mean(2) - 4.0 / 3.0).abs() < 0.08, "{}", mean(2));
    // ScaleBricks and hash partitioning hold a third of full duplication's FIB entries.
    let fib = |i: usize| rows[i]["fib_entries_per_node"].as_f64().unwrap();
    assert!((fib(1) - 2000.0).abs() < 1.0, "{}", fib(1));
    assert!(fib(0) < fib(1) / 2.5 && fib(2) < fib(1) / 2.5);
    assert!(rows[0]["gpt_bytes"].as_u64().unwrap() > 0);
    // `cluster down` after each architecture: nothing of the demo's is left.
    assert!(guard.namespaces().is_empty(), "{:?}", guard.namespaces());
}
