//! End-to-end tests of `scalebricks cluster up --arch tea` (issue 27) in real network
//! namespaces: the TEA switch in the switch namespace, a memory server in each node's
//! namespace, the switch's table reads crossing the fabric (the bridge) to them. Scapy
//! (`tea_traffic.py`, Debian's `/usr/bin/python3`) sends packets of known and unknown flows
//! into the switch's `wan` port and captures what leaves its `lan` port: every known flow's
//! packet comes out translated (NAT: destination address and port; the firewall: byte for
//! byte unchanged, closed connections dropped; the load balancer: the flow's backend address
//! and port; the VPN gateway: outer addresses and VNI of the internal tunnel, inner frame
//! unchanged) with IP and UDP/TCP checksums scapy recomputes to the same values, no unknown flow's packet comes out, and the servers' counters show the reads.
//! `cluster down` leaves no namespace, process or state directory. A memory server killed
//! under traffic: its ranges are read from their secondary, nothing mistranslated.
//!
//! They need root (CI runs as root): without it they fail with a clear message when
//! `CI=true`, and are skipped with a notice otherwise. Each uses its own prefix and state
//! directory, runs serially with the other namespace tests (one lock), is bounded (a few
//! hundred packets, a 10 s capture, 60 s per command), and a Drop guard runs `cluster down`
//! even when an assertion fails.

mod common;
use common::*;

use std::time::Duration;

use serde_json::Value;

const PY: &str = "/usr/bin/python3";
const KNOWN: usize = 200;
const UNKNOWN: usize = 20;

/// Root, iproute2 and scapy (a missing one fails the test under CI).
fn can_run_tea(test: &str) -> bool {
    if !can_run(test) {
        return false;
    }
    let scapy = std::process::Command::new(PY)
        .args(["-c", "import scapy.all"])
        .output()
        .is_ok_and(|o| o.status.success());
    scapy
        || sb_io::netns::skip_or_fail(
            test,
            "needs python3-scapy at /usr/bin/python3 (scripts/apt-install.sh installs it)",
        )
}

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `tea_traffic.py` in the switch namespace: `known` packets of the flows file's entries and
/// `unknown` of keys no entry has; its JSON.
fn traffic(c: &Cluster, sw: &str, nf: &str, known: usize, unknown: usize) -> Value {
    traffic_of(&c.dir.join("tea-flows.csv"), sw, nf, known, unknown)
}

/// [`traffic`] with the entries of another flows file.
fn traffic_of(flows: &std::path::Path, sw: &str, nf: &str, known: usize, unknown: usize) -> Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tea_traffic.py");
    let o = run_prog(
        "ip",
        &[
            "netns",
            "exec",
            sw,
            PY,
            script,
            nf,
            flows.to_str().unwrap(),
            &known.to_string(),
            &unknown.to_string(),
        ],
        Duration::from_secs(60),
    );
    let out = ok(&o, "tea_traffic.py");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out:?}: {e}"))
}

/// `cluster up --arch tea --nf nf` on 2 nodes with the tests' 4000 flows and seed; its output.
fn tea_up(c: &Cluster, nf: &str) -> String {
    let o = c.up_with(
        2,
        "none",
        &[
            "--arch", "tea", "--nf", nf, "--flows", "4000", "--seed", "7",
        ],
    );
    ok(&o, "cluster up --arch tea")
}

/// Brings up a 2-node TEA cluster running `nf`, sends the traffic, checks it and the
/// counters, takes the cluster down.
fn run_nf(test: &str, nf: &str) {
    if !can_run_tea(test) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    let up = tea_up(&c, nf);
    assert!(up.contains("TEA switch running"), "{up}");
    let desc = c.description();
    let sw = desc["switch"]["netns"].as_str().unwrap().to_string();
    let pids = journal_pids(&c.dir);
    assert_eq!(pids.len(), 3, "a switch and two memory servers: {pids:?}");
    for &p in &pids {
        assert!(pid_alive(p), "process {p} not running");
    }

    let r = traffic(&c, &sw, nf, KNOWN, UNKNOWN);
    eprintln!("{test}: traffic {r}");
    // Counters are rewritten every 500 ms.
    std::thread::sleep(Duration::from_millis(1200));
    let s = read_json(&c.dir.join("tea-switch.json"));
    let servers: Vec<Value> = (0..2)
        .map(|i| read_json(&c.dir.join(format!("tea-mem{i}.json"))))
        .collect();
    eprintln!("{test}: switch {s}");
    eprintln!("{test}: servers {servers:?}");

    let expect = r["expect"].as_u64().unwrap();
    assert_eq!(r["sent"].as_u64().unwrap(), (KNOWN + UNKNOWN) as u64);
    assert_eq!(r["n_problems"].as_u64().unwrap(), 0, "{r}");
    assert_eq!(r["got"].as_u64().unwrap(), expect, "missing: {r}");
    assert_eq!(
        s["packets"].as_u64().unwrap(),
        (KNOWN + UNKNOWN) as u64,
        "{s}"
    );
    assert_eq!(s["out"].as_u64().unwrap(), expect, "{s}");
    assert_eq!(s["sent"].as_u64().unwrap(), expect, "{s}");
    assert_eq!(s["drop_miss"].as_u64().unwrap(), UNKNOWN as u64, "{s}");
    // The firewall's closed connections (a tenth of the flows sent); the NAT drops none.
    let closed = KNOWN as u64 - expect;
    if nf == "firewall" {
        assert!(closed >= 10, "no closed connection sent: {r}");
    } else {
        assert_eq!(closed, 0, "{r}");
    }
    assert_eq!(s["drop_nf"].as_u64().unwrap(), closed, "{s}");
    assert_eq!(s["lost"].as_u64().unwrap(), 0, "{s}");
    // Every lookup went over the fabric (no key is hot with a few packets each).
    assert_eq!(
        s["remote_lookups"].as_u64().unwrap() + s["stash_hits"].as_u64().unwrap(),
        (KNOWN + UNKNOWN) as u64,
        "{s}"
    );
    let reads = s["reads"].as_u64().unwrap();
    let served: u64 = servers.iter().map(|v| v["reads"].as_u64().unwrap()).sum();
    for (i, v) in servers.iter().enumerate() {
        assert!(
            v["reads"].as_u64().unwrap() > 0,
            "server {i} read nothing: {v}"
        );
        assert_eq!(v["refused"].as_u64().unwrap(), 0, "{v}");
        let per = s["reads_per_server"][i].as_u64().unwrap();
        assert!(per > 0, "no read to server {i}: {s}");
    }
    assert_eq!(served, reads, "reads sent {reads}, answered {served}");
    if nf == "nat" {
        forged_requests_are_denied(&c, &sw, &servers[0]);
    }

    let o = c.down();
    ok(&o, "cluster down");
    assert!(c.namespaces().is_empty(), "{:?}", c.namespaces());
    for &p in &pids {
        assert!(!pid_alive(p), "process {p} left running");
    }
    assert!(!c.dir.exists(), "state directory left");
}

/// A host on the fabric without the access keys (node 1's namespace, which the fabric
/// reaches) forges a write of region 0's first bucket at memory server 0, and a read of it:
/// both are answered AccessDenied (status 4) and counted `denied`, nothing is written, and the
/// NAT's traffic afterwards is translated as before (a written garbage bucket header would
/// make its keys unreadable). Without the check the write would land (the wire is the same).
fn forged_requests_are_denied(c: &Cluster, sw: &str, server0: &Value) {
    let desc = c.description();
    let node1 = desc["nodes"][1]["netns"].as_str().unwrap();
    let addr = server0["addr"].as_str().unwrap();
    let (host, port) = addr.rsplit_once(':').unwrap();
    let forge = r#"
import socket, struct, sys
host, port = sys.argv[1], int(sys.argv[2])
key = 0x1122334455667788
write = b"TE" + bytes([2, 3]) + struct.pack(">IIQIQ", 1, 0, 0, 16, key) + b"\xff" * 16
read = b"TE" + bytes([2, 1]) + struct.pack(">IIQIHHQ", 2, 0, 0, 8, 0, 0, key)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
got = []
for d in (write, read):
    s.sendto(d, (host, port))
    a, _ = s.recvfrom(65536)
    got.append(str(a[8]))
print(" ".join(got))
"#;
    let o = run_prog(
        "ip",
        &["netns", "exec", node1, "python3", "-c", forge, host, port],
        Duration::from_secs(10),
    );
    let statuses = ok(&o, "forged requests");
    assert_eq!(
        statuses.trim(),
        "4 4",
        "write and read answered AccessDenied"
    );
    std::thread::sleep(Duration::from_millis(1200));
    let m0 = read_json(&c.dir.join("tea-mem0.json"));
    assert_eq!(m0["denied"].as_u64(), Some(2), "{m0}");
    assert_eq!(m0["writes"].as_u64(), Some(0), "{m0}");
    let r = traffic(c, sw, "nat", KNOWN, UNKNOWN);
    assert_eq!(
        r["n_problems"].as_u64().unwrap(),
        0,
        "after the forgeries: {r}"
    );
    assert_eq!(r["got"], r["expect"], "after the forgeries: {r}");
}

#[test]
fn tea_nat_translates_packets_with_reads_over_the_fabric() {
    run_nf(
        "tea_nat_translates_packets_with_reads_over_the_fabric",
        "nat",
    );
}

#[test]
fn tea_firewall_passes_open_connections_only() {
    run_nf("tea_firewall_passes_open_connections_only", "firewall");
}

#[test]
fn tea_lb_sends_each_flow_to_its_backend() {
    run_nf("tea_lb_sends_each_flow_to_its_backend", "lb");
}

#[test]
fn tea_vpn_rewrites_the_tunnel_to_the_server() {
    run_nf("tea_vpn_rewrites_the_tunnel_to_the_server", "vpn");
}

/// Memory server 0 killed (SIGKILL) while the cluster runs: the reads of range 0 go to its
/// secondary, server 1 (which holds a copy), once the switch has marked server 0 dead (3
/// timeouts of 200 ms; with 16 reads in flight to it, the next go to the secondary already).
/// While it does, packets whose read went to server 0 are lost (at most 16), never
/// mistranslated; after it, every packet comes out translated and every read is server 1's.
#[test]
fn tea_nat_serves_a_killed_servers_keys_from_the_secondary() {
    let test = "tea_nat_serves_a_killed_servers_keys_from_the_secondary";
    if !can_run_tea(test) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    tea_up(&c, "nat");
    let sw = c.description()["switch"]["netns"]
        .as_str()
        .unwrap()
        .to_string();
    let journal = std::fs::read_to_string(c.dir.join("journal")).unwrap();
    let victim = journal
        .lines()
        .filter(|l| l.starts_with("pid ") && l.ends_with(" tea-mem0"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .next_back()
        .expect("tea-mem0 in the journal")
        .to_string();
    let o = run_prog("kill", &["-9", &victim], Duration::from_secs(5));
    ok(&o, "kill");

    // While the switch finds out: losses allowed, mistranslations not.
    let r1 = traffic(&c, &sw, "nat", KNOWN, 0);
    eprintln!("{test}: round 1 {r1}");
    assert_eq!(r1["n_problems"].as_u64().unwrap(), 0, "{r1}");
    std::thread::sleep(Duration::from_millis(1200));
    let s1 = read_json(&c.dir.join("tea-switch.json"));
    let m1 = read_json(&c.dir.join("tea-mem1.json"));
    eprintln!("{test}: switch after round 1 {s1}");
    // At most the reads in flight to server 0 before it counted as saturated or dead.
    let lost = s1["lost"].as_u64().unwrap();
    assert!((1..=16).contains(&lost), "lost {lost}: {s1}");
    assert_eq!(
        s1["out"].as_u64().unwrap() + s1["lost"].as_u64().unwrap(),
        KNOWN as u64,
        "{s1}"
    );

    // Server 0 is dead to the switch: everything through server 1, nothing lost.
    let r2 = traffic(&c, &sw, "nat", KNOWN, 0);
    eprintln!("{test}: round 2 {r2}");
    std::thread::sleep(Duration::from_millis(1200));
    let s2 = read_json(&c.dir.join("tea-switch.json"));
    let m2 = read_json(&c.dir.join("tea-mem1.json"));
    eprintln!("{test}: switch after round 2 {s2}");
    assert_eq!(r2["n_problems"].as_u64().unwrap(), 0, "{r2}");
    assert_eq!(r2["got"].as_u64().unwrap(), KNOWN as u64, "{r2}");
    let d = |k: &str, a: &Value, b: &Value| b[k].as_u64().unwrap() - a[k].as_u64().unwrap();
    assert_eq!(d("out", &s1, &s2), KNOWN as u64, "{s2}");
    assert_eq!(d("lost", &s1, &s2), 0, "{s2}");
    assert_eq!(
        d("reads", &m1, &m2),
        d("reads", &s1, &s2),
        "every read of round 2 answered by server 1"
    );
    let per0 = |s: &Value| s["reads_per_server"][0].as_u64().unwrap();
    assert_eq!(per0(&s1), per0(&s2), "a read went to the dead server: {s2}");

    let o = c.down();
    ok(&o, "cluster down");
    assert!(c.namespaces().is_empty(), "{:?}", c.namespaces());
}

/// Entries added to a running NAT cluster, then a memory server killed and restarted.
/// - `tea-insert` writes 500 new entries (the generator's indices 4000..4500, which the
///   cluster does not hold: all 500 are answered as new), then the same 500 four more times
///   (answered as updated), while scapy sends 200 packets of the old entries: every one of
///   those comes out translated (lookups went on during the writes). Then 200 packets of the new entries all come out translated; every bucket write
///   was acknowledged by both copies, and the servers stored as many as the switch sent.
/// - A skewed load: 600 packets of 5 entries, then 200 more: the 5 are cached (the sketch
///   reported them, the control loop filled the cache) and all 200 are served by the cache.
/// - Memory server 0 SIGKILLed: a round loses at most 16 packets, mistranslates none; the
///   switch marks it dead. `cluster restart --node 0` starts it again from its image (which
///   holds the new entries); the switch finds it with a probe, routes its range back to it
///   (reads to server 0 go up again), and every packet of the new entries comes out.
/// - 100 entries written while it is dead: its copies skipped (stale); once restarted it is
///   rewritten (a resync) and all 100 come out translated.
/// - `cluster status` has a row for the switch and each server, all up.
#[test]
fn tea_nat_takes_new_entries_and_a_restarted_server_while_running() {
    let test = "tea_nat_takes_new_entries_and_a_restarted_server_while_running";
    if !can_run_tea(test) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    tea_up(&c, "nat");
    let sw = c.description()["switch"]["netns"]
        .as_str()
        .unwrap()
        .to_string();
    let cfg = c.dir.join("tea.json");
    let new_flows = c._tmp.path().join("new-flows.csv");

    // Old entries' traffic while the new ones are written.
    let (sw2, dir2) = (sw.clone(), c.dir.clone());
    let during =
        std::thread::spawn(move || traffic_of(&dir2.join("tea-flows.csv"), &sw2, "nat", KNOWN, 0));
    // Scapy needs about a second to start sending; it sends for about 1.4 s. The entries are
    // written, then written again 4 times (same values: every bucket rewritten) 250 ms apart,
    // so writes land while the packets' lookups run.
    std::thread::sleep(Duration::from_millis(1000));
    for round in 0..5 {
        let mut args = vec![
            "tea-insert",
            "--config",
            cfg.to_str().unwrap(),
            "--generate",
            "500",
            "--first",
            "4000",
        ];
        if round == 0 {
            args.extend(["--write-flows", new_flows.to_str().unwrap()]);
        }
        let o = run(&args, &[], Duration::from_secs(60));
        let ins: Value = serde_json::from_str(ok(&o, "tea-insert").trim()).unwrap();
        eprintln!("{test}: tea-insert {ins}");
        assert_eq!(ins["entries"], 500, "{ins}");
        let fresh = ins["new"].as_u64().unwrap() + ins["stash"].as_u64().unwrap();
        if round == 0 {
            assert_eq!(fresh, 500, "entries already there: {ins}");
        } else {
            assert_eq!(ins["updated"], 500, "{ins}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let r0 = during.join().unwrap();
    eprintln!("{test}: traffic during the writes {r0}");
    assert_eq!(r0["n_problems"].as_u64().unwrap(), 0, "{r0}");
    assert_eq!(r0["got"].as_u64().unwrap(), KNOWN as u64, "{r0}");

    let r1 = traffic_of(&new_flows, &sw, "nat", KNOWN, 0);
    eprintln!("{test}: new entries {r1}");
    assert_eq!(r1["n_problems"].as_u64().unwrap(), 0, "{r1}");
    assert_eq!(r1["got"].as_u64().unwrap(), KNOWN as u64, "{r1}");
    std::thread::sleep(Duration::from_millis(1200));
    let s1 = read_json(&c.dir.join("tea-switch.json"));
    eprintln!("{test}: switch {s1}");
    assert_eq!(s1["updates"], 2500, "{s1}");
    assert_eq!(s1["entries"], 4500, "{s1}");
    let writes = s1["bucket_writes"].as_u64().unwrap();
    assert!(writes >= 5000, "5 x 500 entries, two copies each: {s1}");
    assert_eq!(s1["write_acks"].as_u64().unwrap(), writes, "{s1}");
    assert_eq!(s1["write_skipped"], 0, "{s1}");
    assert_eq!(s1["write_errors"], 0, "{s1}");
    assert_eq!(s1["lost"], 0, "{s1}");
    let stored: u64 = (0..2)
        .map(|i| {
            read_json(&c.dir.join(format!("tea-mem{i}.json")))["writes"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert!(
        stored >= writes,
        "servers stored {stored}, switch sent {writes}"
    );

    // A skewed load: 600 packets of 5 entries make them hot (the sketch's threshold is 64
    // lookups); the control loop (every 500 ms) puts them in the cache; 200 more packets of
    // them are all served by the cache, translated as before.
    let hot = c._tmp.path().join("hot-flows.csv");
    let all = std::fs::read_to_string(c.dir.join("tea-flows.csv")).unwrap();
    let five: Vec<&str> = all.lines().take(6).collect();
    std::fs::write(&hot, five.join("\n") + "\n").unwrap();
    let h1 = traffic_of(&hot, &sw, "nat", 600, 0);
    assert_eq!(h1["n_problems"].as_u64().unwrap(), 0, "{h1}");
    assert_eq!(h1["got"].as_u64().unwrap(), 600, "{h1}");
    std::thread::sleep(Duration::from_millis(1200));
    let sh1 = read_json(&c.dir.join("tea-switch.json"));
    assert!(sh1["cached"].as_u64().unwrap() >= 5, "{sh1}");
    let h2 = traffic_of(&hot, &sw, "nat", KNOWN, 0);
    assert_eq!(h2["n_problems"].as_u64().unwrap(), 0, "{h2}");
    assert_eq!(h2["got"].as_u64().unwrap(), KNOWN as u64, "{h2}");
    std::thread::sleep(Duration::from_millis(1200));
    let sh2 = read_json(&c.dir.join("tea-switch.json"));
    let d = |k: &str| sh2[k].as_u64().unwrap() - sh1[k].as_u64().unwrap();
    eprintln!(
        "{test}: hot keys: {} cached, {} cache hits of the first 600, {} of the next {KNOWN}",
        sh1["cached"],
        sh1["cache_hits"],
        d("cache_hits")
    );
    assert_eq!(d("cache_hits"), KNOWN as u64, "{sh2}");
    assert_eq!(d("remote_lookups"), 0, "{sh2}");

    // Server 0 killed, then restarted.
    let journal = std::fs::read_to_string(c.dir.join("journal")).unwrap();
    let victim = journal
        .lines()
        .filter(|l| l.starts_with("pid ") && l.ends_with(" tea-mem0"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .next_back()
        .expect("tea-mem0 in the journal")
        .to_string();
    ok(
        &run_prog("kill", &["-9", &victim], Duration::from_secs(5)),
        "kill",
    );
    let r2 = traffic_of(&new_flows, &sw, "nat", KNOWN, 0);
    eprintln!("{test}: server 0 killed {r2}");
    assert_eq!(r2["n_problems"].as_u64().unwrap(), 0, "{r2}");
    std::thread::sleep(Duration::from_millis(1200));
    let s2 = read_json(&c.dir.join("tea-switch.json"));
    assert_eq!(s2["health"][0], "dead", "{s2}");
    assert!(s2["lost"].as_u64().unwrap() <= 16, "{s2}");
    // 100 more entries while server 0 is dead: its copies are skipped (stale), server 1's
    // written; the image files hold them.
    let dead_flows = c._tmp.path().join("dead-flows.csv");
    let o = run(
        &[
            "tea-insert",
            "--config",
            cfg.to_str().unwrap(),
            "--generate",
            "100",
            "--first",
            "4500",
            "--write-flows",
            dead_flows.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    let ins: Value = serde_json::from_str(ok(&o, "tea-insert").trim()).unwrap();
    assert_eq!(
        ins["new"].as_u64().unwrap() + ins["stash"].as_u64().unwrap(),
        100,
        "{ins}"
    );
    std::thread::sleep(Duration::from_millis(1200));
    let sd = read_json(&c.dir.join("tea-switch.json"));
    assert!(sd["write_skipped"].as_u64().unwrap() > 0, "{sd}");
    assert_eq!(sd["stale_servers"][0], 0, "{sd}");
    let o = run(
        &["cluster", "restart", "--dir", c.dir(), "--node", "0"],
        &[],
        Duration::from_secs(60),
    );
    let out = ok(&o, "cluster restart");
    assert!(out.contains("memory server 0 restarted"), "{out}");
    // The switch's probes (every 100 ms) find it.
    let t = std::time::Instant::now();
    loop {
        let s = read_json(&c.dir.join("tea-switch.json"));
        if s["health"][0] == "up" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "server 0 never back: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let r3 = traffic_of(&new_flows, &sw, "nat", KNOWN, 0);
    eprintln!("{test}: server 0 restarted {r3}");
    assert_eq!(r3["n_problems"].as_u64().unwrap(), 0, "{r3}");
    assert_eq!(r3["got"].as_u64().unwrap(), KNOWN as u64, "{r3}");
    std::thread::sleep(Duration::from_millis(1200));
    let s3 = read_json(&c.dir.join("tea-switch.json"));
    let m0 = read_json(&c.dir.join("tea-mem0.json"));
    eprintln!("{test}: switch {s3}; server 0 {m0}");
    let per0 = |s: &Value| s["reads_per_server"][0].as_u64().unwrap();
    assert!(per0(&s3) > per0(&s2), "no read back to server 0: {s3}");
    assert!(m0["reads"].as_u64().unwrap() > 0, "{m0}");
    assert!(s3["recovered"].as_u64().unwrap() >= 1, "{s3}");
    // The server that missed writes was rewritten once it answered, and serves the entries
    // written while it was dead.
    assert_eq!(s3["resyncs"], 1, "{s3}");
    assert_eq!(
        s3["stale_servers"].as_array().map(Vec::len),
        Some(0),
        "{s3}"
    );
    let r4 = traffic_of(&dead_flows, &sw, "nat", 100, 0);
    eprintln!("{test}: entries written while server 0 was dead {r4}");
    assert_eq!(r4["n_problems"].as_u64().unwrap(), 0, "{r4}");
    assert_eq!(r4["got"].as_u64().unwrap(), 100, "{r4}");

    // cluster status: the switch and both servers, up.
    let st = c.status();
    let rows = st["tea"].as_array().expect("tea rows");
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["process"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["tea-switch", "tea-mem0", "tea-mem1"], "{st}");
    assert!(rows.iter().all(|r| r["up"] == true), "{st}");
    assert_eq!(rows[0]["entries"], 4600, "{st}");
    assert_eq!(rows[1]["switch_sees"], "up", "{st}");
    let o = run(
        &["cluster", "status", "--dir", c.dir()],
        &[],
        Duration::from_secs(30),
    );
    let table = ok(&o, "cluster status");
    eprintln!("{table}");
    assert!(table.contains("tea-mem1"), "{table}");

    let o = c.down();
    ok(&o, "cluster down");
    assert!(c.namespaces().is_empty(), "{:?}", c.namespaces());
}
