//! Helpers shared by the namespace end-to-end tests (`cluster_e2e`, `engine_e2e`): the root/CI
//! policy, one lock that runs them serially, time-bounded process runs, and [`Cluster`], a
//! cluster under test with a unique prefix and state directory that a Drop guard takes down.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_scalebricks");

pub static SERIAL: Mutex<()> = Mutex::new(());
pub static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Whether `prog` is an executable on PATH (never runs it: `tshark -V` would start capturing).
pub fn have(prog: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|d| {
            std::fs::metadata(d.join(prog))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Runs another program, killing it after `limit`.
pub fn run_prog(prog: &str, args: &[&str], limit: Duration) -> Output {
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
pub fn can_run(test: &str) -> bool {
    sb_io::netns::root_or_skip(test) && have_or_skip(test, "ip")
}

/// True if `prog` is on PATH; panics under `CI=true` when it is not, prints a notice otherwise
/// (the caller then skips the part of `test` that needs it).
pub fn have_or_skip(test: &str, prog: &str) -> bool {
    have(prog)
        || sb_io::netns::skip_or_fail(
            test,
            &format!("needs {prog} (scripts/apt-install.sh installs it)"),
        )
}

/// Runs the binary, killing it after `limit`.
pub fn run(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
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

pub fn wait_limit(mut child: Child, limit: Duration) -> Output {
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

pub fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn netns_list() -> Vec<String> {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Removes what a `scalebricks demo --netns` run may have left when a test fails or is killed:
/// the namespaces whose names start with its prefix (`sbd{pid % 100000}-`) and the processes in
/// them (tests/demo_netns.rs, tests/demo_netns_xdp.rs).
pub struct Leftovers(pub String);

impl Leftovers {
    pub fn namespaces(&self) -> Vec<String> {
        netns_list()
            .into_iter()
            .filter(|n| n.starts_with(&self.0))
            .collect()
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for ns in self.namespaces() {
            let o = Command::new("ip")
                .args(["netns", "pids", &ns])
                .output()
                .unwrap();
            for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

pub fn pid_alive(pid: i64) -> bool {
    // A zombie (state Z) is gone for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().to_string()))
        .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
}

pub fn journal_pids(dir: &Path) -> Vec<i64> {
    std::fs::read_to_string(dir.join("journal"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("pid "))
        .filter_map(|r| r.split_whitespace().next()?.parse().ok())
        .collect()
}

/// How a cluster's nodes forward: the engine alone (AF_PACKET sockets), or the XDP fast path
/// in front of it (`cluster up --io xdp-fast`, feature `fastpath`: the programs finish what
/// their maps answer and pass the rest to the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    Engine,
    XdpFast,
}

impl Io {
    /// `cluster up` arguments for this I/O.
    pub fn up_args(self) -> &'static [&'static str] {
        match self {
            Io::Engine => &[],
            Io::XdpFast => &["--io", "xdp-fast"],
        }
    }
}

/// Node status `n` (`cluster status --json`'s `node_status` row) with what its XDP programs
/// finished folded into `engine`, as if the engine had done it: frames seen at `inet`, `ran`
/// and `fabric` (every frame passes the programs first), frames sent out of `ran` (encapsulated
/// at the ingress node, after one or two fabric crossings, echo answers), out of `inet`
/// (decapsulated uplink) and over the fabric, the crossings, upstream packets and echo
/// replies, `inet` frames sent on over the fabric. Without the fast path, `n` unchanged.
pub fn fold_xdp(n: &Value) -> Value {
    let mut n = n.clone();
    let Some(x) = n["xdp"]["counters"].as_object().cloned() else {
        return n;
    };
    let c = |k: &str| x.get(k).and_then(Value::as_u64).unwrap_or(0);
    let e = &mut n["engine"];
    let add = |v: &mut Value, by: u64| *v = (v.as_u64().unwrap_or(0) + by).into();
    e["ports"]["inet"]["rx"] = c("rx_inet").into();
    e["ports"]["ran"]["rx"] = c("rx_ran").into();
    e["ports"]["fabric"]["rx"] = c("rx_fabric").into();
    add(
        &mut e["ports"]["ran"]["tx"],
        c("to_ran") + c("fabric_to_ran") + c("fabric_to_ran_2") + c("echo"),
    );
    add(&mut e["ports"]["inet"]["tx"], c("up_to_inet"));
    add(&mut e["ports"]["fabric"]["tx"], c("to_fabric"));
    // (Under hash partitioning the programs' `to_fabric` also counts the indirection node's
    // frames on to their egress node, which arrived at `fabric`, not `inet`.)
    add(&mut e["ports"]["inet"]["to_fabric"], c("to_fabric"));
    add(&mut e["crossings"][0], c("to_ran"));
    add(&mut e["crossings"][1], c("fabric_to_ran"));
    add(&mut e["crossings"][2], c("fabric_to_ran_2"));
    add(&mut e["upstream"], c("up_to_inet"));
    add(&mut e["echo_replies"], c("echo"));
    n
}

/// A cluster under test: unique prefix and state directory; `down` on drop.
pub struct Cluster {
    pub prefix: String,
    pub dir: PathBuf,
    pub _tmp: tempfile::TempDir,
}

impl Cluster {
    pub fn new() -> Cluster {
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

    pub fn dir(&self) -> &str {
        self.dir.to_str().unwrap()
    }

    pub fn up_args(&self, nodes: usize, forwarding: &str) -> Vec<String> {
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

    pub fn up(&self, nodes: usize, forwarding: &str) -> Output {
        let a = self.up_args(nodes, forwarding);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&a, &[], Duration::from_secs(60))
    }

    /// `cluster up` with `extra` arguments after `--forwarding`.
    pub fn up_with(&self, nodes: usize, forwarding: &str, extra: &[&str]) -> Output {
        let mut a = self.up_args(nodes, forwarding);
        a.extend(extra.iter().map(|s| s.to_string()));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run(&a, &[], Duration::from_secs(60))
    }

    /// `cluster status --json` (`cluster`, `nodes`, `node_status`).
    pub fn status(&self) -> Value {
        let o = run(
            &["cluster", "status", "--json", "--dir", self.dir()],
            &[],
            Duration::from_secs(30),
        );
        serde_json::from_str(&ok(&o, "cluster status")).unwrap()
    }

    /// The cluster's tunnels (`flows.csv` in its state directory).
    pub fn flows(&self) -> Vec<Flow> {
        read_flows(&self.dir.join("flows.csv"))
    }

    pub fn down(&self) -> Output {
        run(
            &["cluster", "down", "--dir", self.dir()],
            &[],
            Duration::from_secs(60),
        )
    }

    pub fn namespaces(&self) -> Vec<String> {
        let p = format!("{}-", self.prefix);
        netns_list()
            .into_iter()
            .filter(|n| n.starts_with(&p))
            .collect()
    }

    pub fn description(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join("cluster.json")).unwrap())
            .unwrap()
    }

    /// Starts a sink and waits until it listens.
    pub fn sink(&self, node: usize, duration: u32, expect: u64) -> Child {
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

pub fn finish_sink(mut c: Child, limit: Duration) -> Value {
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

pub fn gen(c: &Cluster, flows: &Path, extra: &[&str]) -> Value {
    let mut a = vec!["gen", "--dir", c.dir(), "--flows", flows.to_str().unwrap()];
    a.extend_from_slice(extra);
    let o = run(&a, &[], Duration::from_secs(60));
    serde_json::from_str(ok(&o, "gen").trim()).unwrap()
}

pub fn assert_all_gone(c: &Cluster, macs: &[String], pids: &[i64]) {
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

pub fn all_macs(desc: &Value) -> Vec<String> {
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

/// One line of a cluster's `flows.csv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    pub ue: String,
    pub teid: u32,
    pub enb: String,
    pub node: usize,
}

/// Reads a flows file (`ue,teid,enb,node` after a header line).
pub fn read_flows(path: &Path) -> Vec<Flow> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("ue,teid,enb,node"), "{}", path.display());
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Flow {
                ue: f[0].to_string(),
                teid: f[1].parse().unwrap(),
                enb: f[2].to_string(),
                node: f[3].parse().unwrap(),
            }
        })
        .collect()
}

/// Writes the flows of `flows` that `keep` selects as a flows file.
pub fn write_flows_file(path: &Path, flows: &[Flow], keep: impl Fn(&Flow) -> bool) -> usize {
    let mut s = String::from("ue,teid,enb,node\n");
    let mut n = 0;
    for f in flows.iter().filter(|f| keep(f)) {
        s.push_str(&format!("{},{},{},{}\n", f.ue, f.teid, f.enb, f.node));
        n += 1;
    }
    std::fs::write(path, s).unwrap();
    n
}

/// The frames of a pcap file (classic format, microsecond or nanosecond, either byte order).
pub fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(b.len() >= 24, "{}: no pcap header", path.display());
    let magic = u32::from_le_bytes(b[..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("{}: not a pcap file (magic {m:#x})", path.display()),
    };
    let u32_at = |i: usize| {
        let a: [u8; 4] = b[i..i + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    assert_eq!(u32_at(20), 1, "{}: link type not Ethernet", path.display());
    let mut out = Vec::new();
    let mut i = 24;
    while i + 16 <= b.len() {
        let (incl, orig) = (u32_at(i + 8) as usize, u32_at(i + 12) as usize);
        assert_eq!(
            incl,
            orig,
            "{}: frame {} truncated",
            path.display(),
            out.len()
        );
        assert!(i + 16 + incl <= b.len(), "{}: cut short", path.display());
        out.push(b[i + 16..i + 16 + incl].to_vec());
        i += 16 + incl;
    }
    assert_eq!(i, b.len(), "{}: trailing bytes", path.display());
    out
}

/// A `tcpdump` capturing the frames that arrive on (`-Q in`) or leave (`-Q out`) an interface
/// in a namespace, into a pcap file.
pub struct Capture {
    child: Option<Child>,
    pub path: PathBuf,
}

impl Capture {
    /// Starts the capture and waits until tcpdump listens.
    pub fn start(netns: &str, ifname: &str, direction: &str, path: PathBuf) -> Capture {
        let mut child = Command::new("ip")
            .args([
                "netns", "exec", netns, "tcpdump", "-i", ifname, "-Q", direction,
            ])
            .args(["-U", "-n", "-s", "0", "-w"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tcpdump");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(
            line.contains("listening on"),
            "tcpdump in {netns} did not start: {line}"
        );
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
        });
        Capture {
            child: Some(child),
            path,
        }
    }

    /// Stops tcpdump (SIGINT: it flushes the file) and returns the captured frames.
    pub fn stop(mut self) -> Vec<Vec<u8>> {
        let mut child = self.child.take().unwrap();
        // `ip netns exec` execs tcpdump: the child's pid is tcpdump's.
        let o = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .output()
            .expect("run kill");
        assert!(o.status.success(), "kill -INT tcpdump: {o:?}");
        let t0 = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tcpdump did not stop");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        read_pcap(&self.path)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `tshark -r FILE -T fields` with every checksum check on and `extra` options: one row per
/// frame, one column per field (several occurrences comma-separated).
pub fn tshark_fields(path: &Path, fields: &[&str], extra: &[&str]) -> Vec<Vec<String>> {
    let mut a: Vec<&str> = vec![
        "-r",
        path.to_str().unwrap(),
        "-o",
        "ip.check_checksum:TRUE",
        "-o",
        "udp.check_checksum:TRUE",
        "-o",
        "tcp.check_checksum:TRUE",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ];
    a.extend_from_slice(extra);
    for f in fields {
        a.extend(["-e", f]);
    }
    let o = run_prog("tshark", &a, Duration::from_secs(60));
    let text = ok(&o, "tshark");
    text.lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect()
}

/// The Internet checksum of `h` (0 over a header whose checksum is right).
pub fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in h.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// `aa:bb:...` as bytes.
pub fn mac_bytes(s: &str) -> Vec<u8> {
    s.split(':')
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// Links of the cluster that are not ready: any interface without carrier in any of its
/// namespaces, and bridge ports of PREFIX-sw not forwarding.
pub fn links_not_ready(c: &Cluster) -> Vec<String> {
    let mut bad = Vec::new();
    for ns in c.namespaces() {
        let o = Command::new("ip")
            .args(["-n", &ns, "-o", "link", "show"])
            .output()
            .unwrap();
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            if l.contains("NO-CARRIER") {
                bad.push(format!("{ns}: {l}"));
            }
        }
    }
    let sw = format!("{}-sw", c.prefix);
    let o = Command::new("bridge")
        .args(["-n", &sw, "link", "show"])
        .output()
        .unwrap();
    for l in String::from_utf8_lossy(&o.stdout).lines() {
        if !l.contains("state forwarding") {
            bad.push(format!("{sw}: {l}"));
        }
    }
    bad
}

/// Waits until every link of the cluster has carrier and every bridge port forwards (veth
/// carrier reaches the bridge through linkwatch, up to a second after the link is set up);
/// returns how long that took.
pub fn wait_links_up(c: &Cluster) -> Duration {
    let t0 = Instant::now();
    loop {
        let bad = links_not_ready(c);
        if bad.is_empty() {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "links not up: {bad:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
