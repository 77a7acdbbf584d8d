//! End-to-end tests of `scalebricks cluster up/down`, `gen`, `sink` and the plain forwarder, in
//! real network namespaces. They need root (CI runs as root): without it they fail with a clear
//! message when `CI=true`, and are skipped with a notice otherwise. Each test uses its own name
//! prefix and state directory, runs serially with the others (one lock), is bounded in time, and
//! a Drop guard runs `cluster down` even when an assertion fails.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_scalebricks");

static SERIAL: Mutex<()> = Mutex::new(());
static COUNTER: AtomicUsize = AtomicUsize::new(0);

use sb_io::netns::is_root;

/// Whether `prog` is an executable on PATH (never runs it: `tshark -V` would start capturing).
fn have(prog: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| {
            std::fs::metadata(d.join(prog))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Runs another program, killing it after `limit`.
fn run_prog(prog: &str, args: &[&str], limit: Duration) -> Output {
    let child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {prog}: {e}"));
    wait_limit(child, limit)
}

/// True if the test can run; panics under CI without root, prints a notice otherwise.
fn can_run(test: &str) -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let why = if !is_root() {
        Some("needs root (network namespaces)")
    } else if !have("ip") {
        Some("needs iproute2 (`ip`)")
    } else {
        None
    };
    match why {
        None => true,
        Some(w) if ci => panic!("{test}: {w}; CI must run the tests as root with iproute2"),
        Some(w) => {
            eprintln!("NOTICE: skipping {test}: {w}");
            false
        }
    }
}

/// Runs the binary, killing it after `limit`.
fn run(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut c = Command::new(BIN);
    c.args(args)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let child = c.spawn().expect("spawn scalebricks");
    wait_limit(child, limit)
}

fn wait_limit(mut child: Child, limit: Duration) -> Output {
    // Drain the pipes in threads so a chatty child never blocks.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let s = child.wait().unwrap();
            panic!("command ran past {limit:?}: {s:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn netns_list() -> Vec<String> {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

fn pid_alive(pid: i64) -> bool {
    // A zombie (state Z) is gone for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

fn journal_pids(dir: &Path) -> Vec<i64> {
    std::fs::read_to_string(dir.join("journal"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("pid "))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect()
}

/// A cluster under test: unique prefix and state directory; `down` on drop.
struct Cluster {
    prefix: String,
    dir: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Cluster {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("sbt{}x{n}", std::process::id() % 100_000);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        Cluster {
            prefix,
            dir,
            _tmp: tmp,
        }
    }

    fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    fn up_args(&self, nodes: usize, forwarding: &str) -> Vec<String> {
        [
            "cluster",
            "up",
            "--nodes",
            &nodes.to_string(),
            "--name",
            &self.prefix,
            "--dir",
            self.dir(),
            "--forwarding",
            forwarding,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn up(&self, nodes: usize, forwarding: &str) -> Output {
        let a = self.up_args(nodes, forwarding);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&a, &[], Duration::from_secs(60))
    }

    fn down(&self) -> Output {
        run(
            &["cluster", "down", "--dir", self.dir()],
            &[],
            Duration::from_secs(60),
        )
    }

    fn namespaces(&self) -> Vec<String> {
        let p = format!("{}-", self.prefix);
        netns_list()
            .into_iter()
            .filter(|n| n.starts_with(&p))
            .collect()
    }

    fn description(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join("cluster.json")).unwrap())
            .unwrap()
    }

    /// Starts a sink and waits until it listens.
    fn sink(&self, node: usize, duration: u32, expect: u64) -> Child {
        let mut c = Command::new(BIN)
            .args([
                "sink",
                "--dir",
                self.dir(),
                "--node",
                &node.to_string(),
                "--side",
                "ran",
                "--duration",
                &duration.to_string(),
                "--json",
                "--expect",
                &expect.to_string(),
            ])
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(c.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.contains("sink ready"), "sink did not start: {line}");
        // Keep draining stderr so the sink never blocks on it.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
        });
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.dir.join("journal").exists() {
            let o = self.down();
            if !o.status.success() {
                eprintln!(
                    "cleanup of {} failed: {}",
                    self.prefix,
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
    }
}

fn finish_sink(mut c: Child, limit: Duration) -> Value {
    let mut out = c.stdout.take().unwrap();
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("sink ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let s = t.join().unwrap();
    assert!(status.success(), "sink failed: {status:?} {s}");
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("sink output {s:?}: {e}"))
}

fn write_flows(dir: &Path, n: usize) -> PathBuf {
    let p = dir.join("flows.csv");
    let mut s = String::from("# test flows\nue,teid\n");
    for i in 0..n {
        s.push_str(&format!("100.64.{}.{},{}\n", i / 250, 1 + i % 250, i));
    }
    std::fs::write(&p, s).unwrap();
    p
}

fn gen(c: &Cluster, flows: &Path, extra: &[&str]) -> Value {
    let mut a = vec!["gen", "--dir", c.dir(), "--flows", flows.to_str().unwrap()];
    a.extend_from_slice(extra);
    let o = run(&a, &[], Duration::from_secs(60));
    serde_json::from_str(ok(&o, "gen").trim()).unwrap()
}

fn assert_all_gone(c: &Cluster, macs: &[String], pids: &[i64]) {
    assert!(
        c.namespaces().is_empty(),
        "namespaces left: {:?}",
        c.namespaces()
    );
    let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    for m in macs {
        assert!(
            !links.contains(m.as_str()),
            "link with MAC {m} left in the root namespace"
        );
    }
    for &p in pids {
        assert!(!pid_alive(p), "process {p} left running");
    }
    assert!(!c.dir.exists(), "state directory left: {}", c.dir.display());
}

fn all_macs(desc: &Value) -> Vec<String> {
    let mut v = Vec::new();
    for n in desc["nodes"].as_array().unwrap() {
        for l in ["inet", "ran", "fabric"] {
            for e in ["local", "peer"] {
                v.push(n[l][e]["mac"].as_str().unwrap().to_string());
            }
        }
    }
    v
}

#[test]
fn two_nodes_carry_traffic_without_loss_and_leave_nothing_behind() {
    if !can_run("two_nodes_carry_traffic_without_loss_and_leave_nothing_behind") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    ok(&c.up(2, "user"), "cluster up");
    let desc = c.description();
    assert_eq!(c.namespaces().len(), 7, "{:?}", c.namespaces());
    let pids = journal_pids(&c.dir);
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&p| pid_alive(p)));
    // The ports the plan promises exist with the planned MACs.
    let o = Command::new("ip")
        .args(["-n", &format!("{}-node1", c.prefix), "-o", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&o.stdout);
    for (name, mac) in [
        ("inet", &desc["nodes"][1]["inet"]["local"]["mac"]),
        ("ran", &desc["nodes"][1]["ran"]["local"]["mac"]),
        ("fabric", &desc["nodes"][1]["fabric"]["local"]["mac"]),
    ] {
        let line = links
            .lines()
            .find(|l| l.contains(&format!(": {name}@")))
            .unwrap_or_else(|| panic!("no {name} in {links}"));
        assert!(line.contains(mac.as_str().unwrap()), "{line}");
    }

    let flows = write_flows(c._tmp.path(), 300);
    let s0 = c.sink(0, 30, 2500);
    let s1 = c.sink(1, 30, 2500);
    let g = gen(
        &c,
        &flows,
        &[
            "--rate", "2000", "--count", "5000", "--to", "all", "--zipf", "0.99",
        ],
    );
    assert_eq!(g["sent"], 5000, "{g}");
    assert_eq!(g["tx_dropped"], 0, "{g}");
    // 5000 packets at 2000 pps take about 2.5 s.
    let secs = g["seconds"].as_f64().unwrap();
    assert!((2.0..10.0).contains(&secs), "{g}");
    for s in [
        finish_sink(s0, Duration::from_secs(40)),
        finish_sink(s1, Duration::from_secs(40)),
    ] {
        assert_eq!(s["unique"], 2500, "{s}");
        assert_eq!(s["lost"], 0, "{s}");
        assert_eq!(s["duplicates"], 0, "{s}");
        assert_eq!(s["malformed"], 0, "{s}");
        assert_eq!(s["streams"], 1, "{s}");
        assert!(s["latency_us"]["p50"].as_f64().unwrap() > 0.0, "{s}");
        assert!(
            s["latency_us"]["max"].as_f64().unwrap() >= s["latency_us"]["p99"].as_f64().unwrap()
        );
    }

    // `cluster status`: the description plus each forwarder's counters (rewritten every second).
    let t0 = Instant::now();
    loop {
        let o = run(
            &["cluster", "status", "--dir", c.dir()],
            &[],
            Duration::from_secs(30),
        );
        let st: Value = serde_json::from_str(&ok(&o, "cluster status")).unwrap();
        assert_eq!(st["nodes"][1]["netns"], format!("{}-node1", c.prefix));
        let fw = &st["forwarders"];
        if fw[0]["forwarded"] == 2500 && fw[1]["forwarded"] == 2500 {
            assert_eq!(fw[0]["malformed"], 0, "{fw}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "forwarder counters: {fw}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let o = c.down();
    let text = ok(&o, "cluster down");
    assert!(
        text.contains("7 namespaces deleted, 2 processes stopped"),
        "{text}"
    );
    assert_all_gone(&c, &all_macs(&desc), &pids);
}

#[test]
fn kernel_forwarding_carries_traffic_too() {
    if !can_run("kernel_forwarding_carries_traffic_too") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    ok(&c.up(1, "kernel"), "cluster up");
    assert!(journal_pids(&c.dir).is_empty());
    let flows = write_flows(c._tmp.path(), 10);
    let s = c.sink(0, 20, 1000);
    let g = gen(
        &c,
        &flows,
        &[
            "--rate", "2000", "--count", "1000", "--proto", "tcp", "--size", "imix",
        ],
    );
    assert_eq!(g["sent"], 1000, "{g}");
    let s = finish_sink(s, Duration::from_secs(30));
    assert_eq!(
        (s["unique"].as_u64(), s["lost"].as_u64()),
        (Some(1000), Some(0)),
        "{s}"
    );
    ok(&c.down(), "cluster down");
    assert!(c.namespaces().is_empty());
}

#[test]
fn up_twice_is_an_error_and_leaves_the_cluster_intact() {
    if !can_run("up_twice_is_an_error_and_leaves_the_cluster_intact") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    ok(&c.up(1, "kernel"), "cluster up");
    let before = c.namespaces();
    assert_eq!(before.len(), 4);
    let o = c.up(1, "kernel");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cluster already up"), "{err}");
    assert!(err.contains("cluster down"), "{err}");
    let mut after = c.namespaces();
    after.sort();
    let mut before = before;
    before.sort();
    assert_eq!(before, after);
    // Same prefix, other directory: refused because the namespaces exist.
    let other = c._tmp.path().join("other");
    let o = run(
        &[
            "cluster",
            "up",
            "--nodes",
            "1",
            "--name",
            &c.prefix,
            "--dir",
            other.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(30),
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    assert!(!other.exists());
    ok(&c.down(), "cluster down");
    assert!(c.namespaces().is_empty());
    // down twice: a clear error, nothing else.
    let o = c.down();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no cluster is up"));
}

#[test]
fn down_after_a_crashed_up_removes_everything() {
    if !can_run("down_after_a_crashed_up_removes_everything") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    let a = c.up_args(3, "user");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = run(
        &a,
        &[("SB_CLUSTER_ABORT_AFTER_NODE", "1")],
        Duration::from_secs(60),
    );
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("aborted on purpose after node 1"));
    // Half a cluster: switch + nodes 0 and 1, and their forwarders.
    let mut ns = c.namespaces();
    ns.sort();
    let p = &c.prefix;
    let mut want: Vec<String> = ["sw", "node0", "inet0", "ran0", "node1", "inet1", "ran1"]
        .iter()
        .map(|s| format!("{p}-{s}"))
        .collect();
    want.sort();
    assert_eq!(ns, want);
    let pids = journal_pids(&c.dir);
    assert_eq!(pids.len(), 2);
    assert!(
        pids.iter().all(|&p| pid_alive(p)),
        "forwarders should still run"
    );
    let desc = c.description();
    let text = ok(&c.down(), "cluster down");
    assert!(
        text.contains("7 namespaces deleted, 2 processes stopped"),
        "{text}"
    );
    assert_all_gone(&c, &all_macs(&desc), &pids);
}

fn frame_to_node(desc: &Value, l3: &[u8]) -> Vec<u8> {
    let mac = |s: &str| -> Vec<u8> {
        s.split(':')
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    };
    let mut f = mac(desc["nodes"][0]["inet"]["local"]["mac"].as_str().unwrap());
    f.extend(mac(desc["nodes"][0]["inet"]["peer"]["mac"]
        .as_str()
        .unwrap()));
    f.extend([0x08, 0x00]);
    f.extend_from_slice(l3);
    f
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in h.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// IPv4/UDP to 100.64.0.1 with `payload`; `fix` may spoil the header before the checksum.
fn udp_packet(dst_port: u16, payload: &[u8], fix: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let total = 20 + 8 + payload.len();
    let mut p = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0,
        0,
        64,
        17,
        0,
        0,
    ];
    p.extend([10, 1, 0, 2, 100, 64, 0, 1]);
    let ulen = 8 + payload.len();
    p.extend([0x30, 0x39, (dst_port >> 8) as u8, dst_port as u8]);
    p.extend([(ulen >> 8) as u8, ulen as u8, 0, 0]);
    p.extend_from_slice(payload);
    fix(&mut p);
    let c = ipv4_checksum(&p[..20]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn malformed_frames_are_counted_and_dropped_and_valid_traffic_still_passes() {
    if !can_run("malformed_frames_are_counted_and_dropped_and_valid_traffic_still_passes") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    ok(&c.up(1, "user"), "cluster up");
    let desc = c.description();
    let pids = journal_pids(&c.dir);
    let gtpu = |flags: u8| {
        let mut g = vec![flags, 0xff, 0, 32, 0, 0, 0, 7];
        g.extend(udp_packet(5000, &[0; 4], |_| {}));
        g
    };
    let frames: Vec<(Vec<u8>, &str)> = vec![
        // Truncated IPv4 header (6 bytes after Ethernet).
        (
            frame_to_node(&desc, &[0x45, 0, 0, 40, 0, 0]),
            "ipv4_truncated",
        ),
        // IPv4 total length beyond the frame.
        (
            frame_to_node(
                &desc,
                &udp_packet(5000, &[1; 20], |p| {
                    p[2..4].copy_from_slice(&400u16.to_be_bytes())
                }),
            ),
            "ipv4_bad_total_len",
        ),
        // IPv4 header length below 20.
        (
            frame_to_node(&desc, &udp_packet(5000, &[1; 20], |p| p[0] = 0x44)),
            "ipv4_bad_header_len",
        ),
        // UDP length beyond the IP payload.
        (
            frame_to_node(
                &desc,
                &udp_packet(5000, &[1; 20], |p| {
                    p[24..26].copy_from_slice(&300u16.to_be_bytes())
                }),
            ),
            "udp_bad_length",
        ),
        // Bad IPv4 header checksum.
        (
            {
                let mut f = frame_to_node(&desc, &udp_packet(5000, &[1; 20], |_| {}));
                f[14 + 10] ^= 0xff;
                f
            },
            "ipv4_bad_checksum",
        ),
        // GTP-U version 2 in the flags.
        (
            frame_to_node(&desc, &udp_packet(2152, &gtpu(0x50), |_| {})),
            "gtpu_bad_version",
        ),
        // GTP-U with PT = 0 (GTP').
        (
            frame_to_node(&desc, &udp_packet(2152, &gtpu(0x20), |_| {})),
            "gtpu_bad_protocol_type",
        ),
        // GTP-U length beyond the datagram.
        (
            frame_to_node(
                &desc,
                &udp_packet(
                    2152,
                    &{
                        let mut g = gtpu(0x30);
                        g[2..4].copy_from_slice(&900u16.to_be_bytes());
                        g
                    },
                    |_| {},
                ),
            ),
            "gtpu_bad_length",
        ),
    ];
    let sink = c.sink(0, 30, 300);
    {
        use sb_io::afpacket::{AfPacketConfig, AfPacketPort};
        use sb_io::{PacketBatch, Port};
        let ns = format!("{}-inet0", c.prefix);
        let cfg = AfPacketConfig {
            tx_only: true,
            ..AfPacketConfig::default()
        };
        let mut port = sb_io::netns::in_netns(&ns, || AfPacketPort::open("eth0", &cfg))
            .unwrap()
            .unwrap();
        let mut b = PacketBatch::new(64);
        for _ in 0..3 {
            for (f, _) in &frames {
                assert!(b.push(f));
            }
        }
        assert_eq!(port.tx_batch(&mut b), 3 * frames.len());
    }
    // The forwarder counts them (stats rewritten every second) and keeps running.
    let stats_path = c.dir.join("forward-node0.json");
    let t0 = Instant::now();
    let stats = loop {
        let s: Value = std::fs::read_to_string(&stats_path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        if s["malformed"].as_u64() == Some(3 * frames.len() as u64) {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "forwarder stats: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for (_, label) in &frames {
        assert_eq!(stats["malformed_by_reason"][label], 3, "{label}: {stats}");
    }
    assert_eq!(stats["forwarded"], 0, "{stats}");
    assert!(pids.iter().all(|&p| pid_alive(p)));

    // Valid traffic still passes, and nothing malformed reached the RAN side.
    let flows = write_flows(c._tmp.path(), 5);
    let g = gen(
        &c,
        &flows,
        &["--rate", "1000", "--count", "300", "--to", "0"],
    );
    assert_eq!(g["sent"], 300);
    let s = finish_sink(sink, Duration::from_secs(40));
    assert_eq!(
        (s["unique"].as_u64(), s["lost"].as_u64()),
        (Some(300), Some(0)),
        "{s}"
    );
    assert_eq!(s["malformed"], 0, "{s}");
    ok(&c.down(), "cluster down");
    // The forwarder wrote its final counters on SIGTERM before exiting... into a directory that
    // is now gone with everything else.
    assert!(!c.dir.exists());
}

#[test]
fn gen_writes_a_pcap_that_tcpreplay_replays_into_the_cluster() {
    if !can_run("gen_writes_a_pcap_that_tcpreplay_replays_into_the_cluster") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    let flows = write_flows(c._tmp.path(), 50);
    let pcap = c._tmp.path().join("t.pcap");
    // No cluster in this directory: gen only writes the file (frames addressed to node 0 of the
    // deterministic plan).
    let nowhere = c._tmp.path().join("nowhere");
    let o = run(
        &[
            "gen",
            "--dir",
            nowhere.to_str().unwrap(),
            "--flows",
            flows.to_str().unwrap(),
            "--count",
            "400",
            "--rate",
            "0",
            "--size",
            "200",
            "--pcap",
            pcap.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(30),
    );
    let g: Value = serde_json::from_str(ok(&o, "gen --pcap").trim()).unwrap();
    assert_eq!(
        (g["sent"].as_u64(), g["live"].as_bool()),
        (Some(400), Some(false))
    );
    assert_eq!(
        std::fs::metadata(&pcap).unwrap().len(),
        24 + 400 * (16 + 200)
    );
    if have("tshark") {
        let o = run_prog(
            "tshark",
            &[
                "-r",
                pcap.to_str().unwrap(),
                "-T",
                "fields",
                "-e",
                "ip.dst",
                "-e",
                "udp.dstport",
            ],
            Duration::from_secs(60),
        );
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(text.lines().count(), 400, "{text}");
        assert!(
            text.lines()
                .all(|l| l.starts_with("100.64.0.") && l.ends_with("5000")),
            "{text}"
        );
    }
    if !have("tcpreplay") {
        eprintln!("NOTICE: tcpreplay not installed; replay part skipped");
        return;
    }
    ok(&c.up(1, "user"), "cluster up");
    let sink = c.sink(0, 30, 400);
    let ns = format!("{}-inet0", c.prefix);
    let o = run_prog(
        "ip",
        &[
            "netns",
            "exec",
            &ns,
            "tcpreplay",
            "-q",
            "-i",
            "eth0",
            "--pps",
            "2000",
            pcap.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(
        o.status.success(),
        "tcpreplay: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let s = finish_sink(sink, Duration::from_secs(40));
    assert_eq!(
        (s["unique"].as_u64(), s["lost"].as_u64()),
        (Some(400), Some(0)),
        "{s}"
    );
    ok(&c.down(), "cluster down");
}
