//! `scalebricks-bench` checked from outside: the built binary's JSON and its refusals.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scalebricks-bench"))
        .env("RUST_BACKTRACE", "0")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bench_gpt_prints_one_json_object_of_checked_rows() {
    let o = run(&[
        "gpt",
        "--keys",
        "3000",
        "--value-bits",
        "2",
        "--updates",
        "200",
        "--batch",
        "7",
        "--configs",
        "16+8,16+16",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON object");
    assert_eq!(j["params"]["keys"].as_u64(), Some(3000));
    assert_eq!(j["params"]["batch"].as_u64(), Some(7));
    let rows = j["results"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    let mut want = vec![
        "setsep-16+8",
        "setsep-16+8-live",
        "setsep-16+16",
        "setsep-16+16-live",
    ];
    if cfg!(feature = "dpdk") {
        want.push("dpdk-efd");
    }
    want.extend(["sux-vfunc", "ptr_hash", "hashbrown"]);
    assert_eq!(names, want);
    for r in rows {
        let name = r["name"].as_str().unwrap();
        assert_eq!(r["correct"], serde_json::Value::Bool(true), "{r}");
        // The live rows are the row above's table as a LiveSetSep: no build, no updates.
        let live = name.ends_with("-live");
        assert_eq!(r["build_mkeys_per_s"].is_number(), !live, "{r}");
        for f in ["bits_per_key", "lookup_mops_single", "lookup_mops_batched"] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{name}: {f}: {r}");
        }
        assert_eq!(
            r["lookup_mops_batched_hashes"]
                .as_f64()
                .is_some_and(|x| x > 0.0),
            name.starts_with("setsep"),
            "{r}"
        );
        let updatable =
            (name.starts_with("setsep") && !live) || name == "dpdk-efd" || name == "hashbrown";
        assert_eq!(r["update_kops"].is_number(), updatable, "{name}: {r}");
        assert_eq!(
            r["fallback_ratio"].is_number(),
            name.starts_with("setsep"),
            "{r}"
        );
        assert!(r["page_size"].is_string() && r["note"].is_string(), "{r}");
    }
    // Unknown peers and configs are refused.
    let o = run(&[
        "gpt",
        "--keys",
        "10",
        "--value-bits",
        "1",
        "--peers",
        "nope",
    ]);
    assert!(!o.status.success());
    let o = run(&[
        "gpt",
        "--keys",
        "10",
        "--value-bits",
        "1",
        "--configs",
        "3+3",
    ]);
    assert!(!o.status.success());
}

#[test]
fn bench_gpt_grow_prints_a_row_per_doubling() {
    let o = run(&[
        "gpt",
        "--grow",
        "20000:80000",
        "--value-bits",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let j: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON object");
    assert_eq!(j["params"]["grow_from"].as_u64(), Some(20000));
    assert_eq!(j["params"]["grow_to"].as_u64(), Some(80000));
    assert_eq!(j["correct"], serde_json::Value::Bool(true), "{j}");
    let rows = j["results"].as_array().unwrap();
    let keys: Vec<u64> = rows.iter().map(|r| r["keys"].as_u64().unwrap()).collect();
    assert_eq!(keys, [40000, 80000]);
    for r in rows {
        for f in ["bits_per_key", "insert_kops", "delta_bytes_per_key"] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{f}: {r}");
        }
        let fb = r["fallback_ratio"].as_f64().unwrap();
        assert!((0.0..0.01).contains(&fb), "{r}");
        // A delta is at least one group record plus its header: more than 8 bytes per insert.
        assert!(r["delta_bytes_per_key"].as_f64().unwrap() > 8.0, "{r}");
    }
    // 20000 keys fill 20 blocks; 80000 keys need more: the owner grew, and a replica loaded
    // each grown image.
    let last = rows.last().unwrap();
    assert!(last["growths"].as_u64().unwrap() >= 1, "{last}");
    assert!(last["blocks"].as_u64().unwrap() >= 79, "{last}");
    assert!(
        rows.iter()
            .map(|r| r["image_bytes"].as_u64().unwrap())
            .sum::<u64>()
            > 0,
        "{j}"
    );
}

#[test]
fn bench_gpt_grow_refuses_a_bad_range() {
    for range in ["80000:20000", "0:10", "abc"] {
        let o = run(&["gpt", "--grow", range, "--value-bits", "2"]);
        assert!(!o.status.success(), "{range}");
        assert!(stderr(&o).contains("--grow"), "{range}: {}", stderr(&o));
    }
}

/// `bench fib --pages 4k` keeps our table (and libcuckoo's) off 2 MB pages, and every row's
/// `page_size` is a measurement, with its detail.
#[test]
fn bench_fib_pages_are_measured_and_4k_is_a_control() {
    let fib = |pages: &str| {
        let o = run(&[
            "fib",
            "--entries",
            "262144",
            "--lookups",
            "20000",
            "--secs",
            "0.01",
            "--pages",
            pages,
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["params"]["pages"], pages);
        j
    };
    let small = fib("4k");
    let rows = small["results"].as_array().unwrap();
    assert!(rows.len() >= 3, "{small}");
    for r in rows {
        let name = r["name"].as_str().unwrap();
        let page = r["page_size"].as_str().unwrap();
        let detail = r["page_detail"].as_str().unwrap();
        assert!(detail.contains("MiB: "), "{name}: {detail}");
        // Nothing of a 4k run sits on hugetlbfs pages; ours and libcuckoo's are MADV_NOHUGEPAGE.
        assert!(detail.contains(" 0.0% hugetlbfs"), "{name}: {detail}");
        if name == "scalebricks-cuckoo" || name == "libcuckoo" {
            assert_eq!(page, "4K", "{name}: {detail}");
        }
        if name == "dpdk-rte_hash" {
            assert!(detail.contains("EAL --no-huge"), "{detail}");
            assert_eq!(small["params"]["dpdk_eal"]["hugepages"], false);
        }
    }
    let big = fib("2m");
    for r in big["results"].as_array().unwrap() {
        assert_ne!(r["page_size"], "unmeasured", "{r}");
    }
}

#[test]
fn bench_node_per_port_gives_each_core_and_the_node() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let args = [
        "node",
        "--arch",
        "scalebricks,full-dup",
        "--fib-entries",
        "20000",
        "--pool",
        "4096",
        "--secs",
        "0.05",
        "--layout",
        "per-port",
        "--json",
    ];
    let o = run(&args);
    if cpus < 2 {
        assert!(!o.status.success());
        assert!(stderr(&o).contains("needs 2 CPUs"), "{}", stderr(&o));
        return;
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["layout"], "per-port");
    let rows = v["results"].as_array().expect("results");
    // Each architecture without policies and with a QER and a URR on every session.
    assert_eq!(rows.len(), 4);
    for (i, r) in rows.iter().enumerate() {
        let with = i % 2 == 1;
        assert_eq!(r["policy"], if with { "qer-urr" } else { "none" }, "{r}");
        if with {
            assert_eq!(r["arch"], rows[i - 1]["arch"]);
            let vs = r["rate_vs_none"].as_f64().unwrap();
            let want = r["mpps_per_core"].as_f64().unwrap()
                / rows[i - 1]["mpps_per_core"].as_f64().unwrap();
            assert!((vs - want).abs() < 1e-9 && vs > 0.0, "{r}");
            assert!(r["node_rate_vs_none"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["policy_slots"].as_u64().unwrap() > 0, "{r}");
        } else {
            assert!(r.get("rate_vs_none").is_none(), "{r}");
        }
    }
    for r in rows {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"));
        let (node, core) = (f("mpps_per_node"), f("mpps_per_core"));
        let (ext, int) = (f("external_core_mpps"), f("internal_core_mpps"));
        assert!(node > 0.0 && core > 0.0, "{r}");
        // The node's rate is its busier core's; the two cores' time added up is slower.
        assert!((node - ext.min(int)).abs() < 1e-9 * node, "{r}");
        let added = 1.0 / (1.0 / ext + 1.0 / int);
        assert!((core - added).abs() < 1e-6 * core, "{r}");
        assert!(node >= core, "{r}");
        assert!(f("internal_packets") > 0.0, "{r}");
    }
    // A one-core run has no per-port fields.
    let o = run(&args[..args.len() - 3]
        .iter()
        .chain(&["--json"])
        .copied()
        .collect::<Vec<_>>());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["layout"], "one-core");
    assert!(v["results"][0].get("mpps_per_node").is_none());
    // The bubble needs a third core beside the two ports' cores.
    if cpus < 3 {
        let o = run(&[
            "node",
            "--fib-entries",
            "20000",
            "--layout",
            "per-port",
            "--bubble",
        ]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains("needs 3 CPUs"), "{}", stderr(&o));
    }
}
