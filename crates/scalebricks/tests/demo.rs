//! The main job, run from outside the way the README tells a new user to.

use std::process::Command;

#[test]
fn demo_runs_and_checks_every_answer() {
    let out = Command::new(env!("CARGO_BIN_EXE_scalebricks"))
        .args([
            "demo",
            "--nodes",
            "3",
            "--flows",
            "20000",
            "--packets",
            "30000",
        ])
        .args(["--migrate", "500", "--json"])
        .output()
        .expect("run scalebricks demo");
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["wrong"], 0);
    assert_eq!(v["value_bits"], 2);
    assert_eq!(v["packets"], 30000);
    assert_eq!(v["replicas_identical"], true);
    let hops = v["fabric_hops"].as_u64().unwrap();
    let hash_hops = v["hash_partitioning_fabric_hops"].as_u64().unwrap();
    // With 3 nodes, about 2/3 of the packets cross the fabric once; hash partitioning needs more.
    assert!(hops > 15000 && hops < 25000, "fabric hops {hops}");
    assert!(hash_hops > hops, "hash partitioning {hash_hops} vs {hops}");
}

#[test]
fn demo_rejects_bad_arguments() {
    let out = Command::new(env!("CARGO_BIN_EXE_scalebricks"))
        .args(["demo", "--nodes", "1"])
        .output()
        .expect("run scalebricks demo");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nodes"));
}
