//! The XDP fast path in node processes (feature `fastpath`, root): `scalebricks demo --netns
//! --io xdp-fast` at small sizes, under ScaleBricks and under hash partitioning (every packet
//! arrives at its handling node's RAN side, and the nodes' XDP counters show the packets were
//! forwarded in XDP, not passed up), and a
//! cluster on the fast path whose flows all move to other nodes with new TEIDs (`scalebricks
//! update`): the maps follow the control plane, so the moved flows are forwarded in XDP to
//! their new nodes. Beside tests/demo_netns.rs (the same demo on AF_PACKET). Without the
//! feature the test is skipped with a notice (a failure under `CI=true`).

#[cfg(not(feature = "fastpath"))]
#[test]
fn xdp_fast_path_tests_need_the_feature() {
    sb_io::netns::skip_or_fail(
        "demo_netns_xdp",
        "the `fastpath` feature is off (cargo test -p scalebricks --features fastpath; needs clang and libbpf-dev: scripts/install-bpf-tools.sh)",
    );
}

#[cfg(feature = "fastpath")]
mod common;

#[cfg(feature = "fastpath")]
mod xdp {
    use super::common::*;
    use serde_json::Value;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    fn u(v: &Value) -> u64 {
        v.as_u64().unwrap_or(0)
    }

    #[test]
    fn demo_netns_on_the_xdp_fast_path_forwards_every_packet_in_xdp() {
        if !can_run("demo_netns_on_the_xdp_fast_path_forwards_every_packet_in_xdp") {
            return;
        }
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let child = Command::new(BIN)
            .args([
                "demo",
                "--netns",
                "--io",
                "xdp-fast",
                "--arch",
                "scalebricks",
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
            .expect("spawn scalebricks demo --netns --io xdp-fast");
        let guard = Leftovers(format!("sbd{}-", child.id() % 100_000));
        let out = wait_limit(child, Duration::from_secs(240));
        let stdout = ok(&out, "demo --netns --io xdp-fast");
        let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
        assert_eq!(v["ok"], true, "{v}");
        let rows = v["results"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{v}");
        let r = &rows[0];
        assert_eq!(r["arch"], "scalebricks");
        assert_eq!(r["io"], "xdp-fast");
        // Every packet reached its handling node's RAN side once.
        assert_eq!(r["sent"], 2000, "{r}");
        assert_eq!(r["received"], 2000, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        // Forwarded in XDP: encapsulated at the ingress node when it handles the flow, else
        // sent over the fabric (where the handling node's engine finishes it); nothing passed
        // up at inet (static neighbours: no ARP either).
        let c = &r["xdp"]["counters"];
        assert_eq!(u(&c["rx_inet"]), 2000, "{r}");
        assert_eq!(u(&c["to_ran"]) + u(&c["to_fabric"]), 2000, "{r}");
        assert_eq!(u(&c["slow"]), 0, "{r}");
        // gen sends round robin over 3 nodes: a third is handled where it enters.
        let local = u(&c["to_ran"]) as f64 / 2000.0;
        assert!((local - 1.0 / 3.0).abs() < 0.05, "{r}");
        // Every packet counted once in the crossings (XDP's 0-crossing ones included).
        let crossings: u64 = r["crossings"].as_array().unwrap().iter().map(u).sum();
        assert_eq!(crossings, 2000, "{r}");
        // inet on every node natively (veth, MTU 1500); ran (9000-byte MTU, above what a
        // native veth program takes) generically.
        let attached: Vec<&str> = r["xdp"]["attached"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        for n in 0..3 {
            assert!(
                attached.contains(&format!("node{n} inet native").as_str()),
                "{r}"
            );
            assert!(
                attached
                    .iter()
                    .any(|m| m.starts_with(&format!("node{n} ran "))),
                "{r}"
            );
        }
        assert!(guard.namespaces().is_empty(), "{:?}", guard.namespaces());
    }

    /// Hash partitioning on the fast path: every packet is finished in XDP, at its ingress
    /// node, its indirection node or (a second crossing) its egress node.
    #[test]
    fn demo_netns_on_the_xdp_fast_path_under_hash_partitioning() {
        if !can_run("demo_netns_on_the_xdp_fast_path_under_hash_partitioning") {
            return;
        }
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let child = Command::new(BIN)
            .args([
                "demo",
                "--netns",
                "--io",
                "xdp-fast",
                "--arch",
                "hash-part",
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
            .expect("spawn scalebricks demo --netns --io xdp-fast --arch hash-part");
        let guard = Leftovers(format!("sbd{}-", child.id() % 100_000));
        let out = wait_limit(child, Duration::from_secs(240));
        let stdout = ok(&out, "demo --netns --io xdp-fast --arch hash-part");
        let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
        assert_eq!(v["ok"], true, "{v}");
        let r = &v["results"][0];
        assert_eq!(r["arch"], "hash-part");
        assert_eq!(r["io"], "xdp-fast");
        assert_eq!(r["sent"], 2000, "{r}");
        assert_eq!(r["received"], 2000, "{r}");
        assert_eq!(r["lost"], 0, "{r}");
        assert_eq!(r["wrong"], 0, "{r}");
        let c = &r["xdp"]["counters"];
        assert_eq!(u(&c["rx_inet"]), 2000, "{r}");
        assert_eq!(u(&c["slow"]), 0, "{r}");
        // Out of ran after 0, 1 and 2 crossings, each packet once; what went over the
        // fabric arrived there (to indirection nodes, and on to egress nodes).
        let done = u(&c["to_ran"]) + u(&c["fabric_to_ran"]) + u(&c["fabric_to_ran_2"]);
        assert_eq!(done, 2000, "{r}");
        assert!(u(&c["fabric_to_ran_2"]) > 400, "{r}");
        assert_eq!(u(&c["rx_fabric"]), u(&c["to_fabric"]), "{r}");
        let crossings: Vec<u64> = r["crossings"].as_array().unwrap().iter().map(u).collect();
        assert_eq!(crossings.iter().sum::<u64>(), 2000, "{r}");
        assert_eq!(crossings[2], u(&c["fabric_to_ran_2"]), "{r}");
        let attached = r["xdp"]["attached"].to_string();
        for n in 0..3 {
            for port in ["inet", "ran", "fabric"] {
                assert!(attached.contains(&format!("node{n} {port} ")), "{r}");
            }
        }
        assert!(guard.namespaces().is_empty(), "{:?}", guard.namespaces());
    }

    /// The sum over the nodes of an XDP counter.
    fn xdp_sum(status: &Value, counter: &str) -> u64 {
        status["node_status"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| u(&n["xdp"]["counters"][counter]))
            .sum()
    }

    /// Waits until every node is up with the same GPT digest.
    fn converged(c: &Cluster) {
        let t0 = Instant::now();
        loop {
            let st = c.status();
            let rows = st["nodes"].as_array().unwrap().clone();
            let d0 = &rows[0]["gpt_digest"];
            if rows
                .iter()
                .all(|r| r["up"] == true && !d0.is_null() && r["gpt_digest"] == *d0)
            {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no convergence: {rows:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    #[test]
    fn the_fast_path_follows_updates_that_move_every_flow() {
        if !can_run("the_fast_path_follows_updates_that_move_every_flow") {
            return;
        }
        const NODES: usize = 3;
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let c = Cluster::new();
        ok(
            &c.up_with(
                NODES,
                "user",
                &["--io", "xdp-fast", "--flows", "1500", "--seed", "9"],
            ),
            "cluster up --io xdp-fast",
        );
        converged(&c);
        let flows = c.flows();
        // Every flow moves to the next node with a new TEID.
        let moved: Vec<Flow> = flows
            .iter()
            .map(|f| Flow {
                ue: f.ue.clone(),
                teid: f.teid ^ 0x4000_0000,
                enb: f.enb.clone(),
                node: (f.node + 1) % NODES,
            })
            .collect();
        let mut csv = String::from("op,ue,teid,enb,node\n");
        for m in &moved {
            csv.push_str(&format!(
                "change,{},{},{},{}\n",
                m.ue, m.teid, m.enb, m.node
            ));
        }
        let upd = c.dir.join("moves.csv");
        std::fs::write(&upd, csv).unwrap();
        let o = run(
            &[
                "update",
                "--dir",
                c.dir(),
                "--node",
                "0",
                "--input",
                upd.to_str().unwrap(),
            ],
            &[],
            Duration::from_secs(60),
        );
        let up: Value = serde_json::from_str(ok(&o, "update").trim()).unwrap();
        assert_eq!(u(&up["acked"]), moved.len() as u64, "{up}");
        assert_eq!(up["rejected"].as_array().map_or(0, Vec::len), 0, "{up}");
        converged(&c);
        let before = c.status();
        // Each node's new flows, sent on their own, arrive at that node's RAN side.
        let per_node = 300u64;
        let mut sent = 0;
        for k in 0..NODES {
            let path = c.dir.join(format!("moved-node{k}.csv"));
            let n = write_flows_file(&path, &moved, |f| f.node == k);
            assert!(n > 100, "{n} flows moved to node {k}");
            let sink = c.sink(k, 20, per_node);
            let g = gen(
                &c,
                &path,
                &[
                    "--count",
                    &per_node.to_string(),
                    "--rate",
                    "2000",
                    "--seed",
                    "4",
                ],
            );
            assert_eq!(u(&g["sent"]), per_node, "{g}");
            let r = finish_sink(sink, Duration::from_secs(40));
            assert_eq!(u(&r["unique"]), per_node, "node {k}: {r}");
            assert_eq!(u(&r["duplicates"]) + u(&r["malformed"]), 0, "node {k}: {r}");
            sent += per_node;
        }
        // The counters file is rewritten every second.
        std::thread::sleep(Duration::from_millis(1500));
        let after = c.status();
        let d = |k: &str| xdp_sum(&after, k) - xdp_sum(&before, k);
        assert_eq!(d("rx_inet"), sent, "{after}");
        assert_eq!(d("to_ran") + d("to_fabric"), sent, "{after}");
        assert_eq!(d("slow"), 0, "{after}");
        for n in after["node_status"].as_array().unwrap() {
            assert_eq!(n["xdp"]["enabled"], true, "{n}");
            assert_eq!(u(&n["xdp"]["write_errors"]), 0, "{n}");
        }
    }
}
