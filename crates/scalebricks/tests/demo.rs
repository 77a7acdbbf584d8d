//! The main job, run from outside the way the README tells a new user to.

use std::process::Command;

#[test]
fn demo_runs_three_architectures_and_checks_every_packet() {
    let out = Command::new(env!("CARGO_BIN_EXE_scalebricks"))
        .args([
            "demo",
            "--nodes",
            "3",
            "--flows",
            "20000",
            "--packets",
            "30000",
            "--json",
        ])
        .output()
        .expect("run scalebricks demo");
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["ok"], true);
    let rows = v["results"].as_array().unwrap();
    let archs: Vec<&str> = rows.iter().map(|r| r["arch"].as_str().unwrap()).collect();
    assert_eq!(archs, ["scalebricks", "full-dup", "hash-part"]);
    for r in rows {
        assert_eq!(r["wrong"], 0, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        assert!(r["mpps_per_core"].as_f64().unwrap() > 0.0);
        // 1000 unknown UEs, 100 TTL 1 and 100 malformed frames, each counted by its reason.
        assert_eq!(r["drops"]["ttl"], 100, "{r}");
        assert_eq!(r["drops"]["malformed:ipv4_bad_checksum"], 100, "{r}");
    }
    let crossings = |i: usize| rows[i]["mean_fabric_crossings"].as_f64().unwrap();
    // Uniform ingress over 3 nodes: 2/3 of the packets cross once (ScaleBricks, full
    // duplication); hash partitioning crosses up to twice, 4/3 on average.
    assert!((crossings(0) - 2.0 / 3.0).abs() < 0.03, "{}", crossings(0));
    assert!((crossings(1) - 2.0 / 3.0).abs() < 0.03);
    assert!((crossings(2) - 4.0 / 3.0).abs() < 0.05, "{}", crossings(2));
    assert_eq!(rows[0]["crossings"][2], 0);
    // ScaleBricks: the GPT answers something for an unknown UE: a node whose FIB misses, or
    // (2 value bits, 3 nodes) a value naming no node.
    let sb = &rows[0]["drops"];
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    assert_eq!(
        n(&sb["fib_miss_after_gpt"]) + n(&sb["unknown_flow"]),
        1000,
        "{sb}"
    );
    assert!(n(&sb["fib_miss_after_gpt"]) > 500);
    assert_eq!(rows[1]["drops"]["unknown_flow"], 1000);
    // Memory: ScaleBricks and hash partitioning hold a third of full duplication's FIB.
    let fib = |i: usize| rows[i]["fib_bytes_per_node"].as_f64().unwrap();
    assert!(fib(0) < fib(1) / 2.5, "{} vs {}", fib(0), fib(1));
    assert!(rows[0]["gpt_bytes"].as_u64().unwrap() > 0);
    assert_eq!(rows[1]["gpt_bytes"], 0);
}

#[test]
fn demo_rejects_bad_arguments() {
    for args in [
        &["demo", "--nodes", "1"][..],
        &["demo", "--arch", "ring"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_scalebricks"))
            .args(args)
            .output()
            .expect("run scalebricks demo");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--nodes") || err.contains("ring"), "{err}");
    }
}
