//! The metrics endpoint over real TCP: what a scrape returns is checked by tools we did not
//! write (`promtool check metrics` for the text format, the Python Prometheus client's strict
//! OpenMetrics parser for OpenMetrics; under `CI=true` a missing tool is a failure), and
//! garbage, oversized, slow and half-closed requests get an error or a closed connection while
//! the server goes on serving.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use sb_engine::{Counters, Drop, PortId};
use sb_node::metrics::{serve, PfcpKey, Snapshot, IO_TIMEOUT};

fn snapshot(scrapes: &AtomicU64) -> Snapshot {
    let n = scrapes.fetch_add(1, Ordering::Relaxed) + 1;
    let mut c = Counters::default();
    c.ports[PortId::Inet as usize].rx = 1000 * n;
    c.ports[PortId::Ran as usize].tx = 900 * n;
    c.upstream = 5;
    c.crossings = [400, 500, 0, 0];
    c.drop(PortId::Ran, Drop::UnknownTeid);
    c.drop(PortId::Inet, Drop::FibMissAfterGpt);
    let mut pfcp = BTreeMap::new();
    pfcp.insert(
        PfcpKey {
            message: "session_establishment_request".into(),
            cause: String::new(),
        },
        3,
    );
    pfcp.insert(
        PfcpKey {
            message: "session_establishment_response".into(),
            cause: "rule_creation_modification_failure".into(),
        },
        1,
    );
    Snapshot {
        workers: vec![c.clone(), c],
        ports: vec![[sb_io::PortStats::default(); 3]; 2],
        tables: sb_node::run::TableSizes {
            gpt_keys: 10,
            gpt_bytes: 20,
            fib_entries: 5,
            fib_bytes: 100,
            uplink_entries: 5,
            uplink_bytes: 80,
        },
        control: Some(serde_json::json!({
            "gpt_digest": "0123456789abcdef", "ready": true, "epoch": 1, "rib_keys": 5,
            "owners": [{"owner": 0, "lag": 0, "applied_seq": 4, "resyncs": 0},
                       {"owner": 1, "lag": 3, "applied_seq": 9, "resyncs": 2}],
            "rejected": {"stale": 1}, "dropped": {}, "retransmits": 0, "queued": 0, "applied": 4
        })),
        log_bytes: Some(4096),
        pfcp: Some(pfcp),
        pfcp_sessions: Some(3),
        xdp: None,
    }
}

/// A response: status line, headers (lower-case names), body.
struct Response {
    status: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `request` as it is and reads until the server closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> std::io::Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response head");
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().to_string();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').expect("header");
            (k.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let r = Response {
        status,
        headers,
        body: body.to_string(),
    };
    assert_eq!(r.header("connection"), Some("close"));
    if !request.starts_with(b"HEAD") {
        assert_eq!(r.header("content-length"), Some(&*r.body.len().to_string()));
    }
    Ok(r)
}

fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> Response {
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{accept}User-Agent: test\r\n\r\n");
    exchange(addr, req.as_bytes()).unwrap()
}

/// Runs `f` with a server on 127.0.0.1 (an ephemeral port) and stops it after; the server
/// must return within a second of being told to.
fn with_server(f: impl FnOnce(SocketAddr, &AtomicU64)) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = AtomicBool::new(false);
    let scrapes = AtomicU64::new(0);
    /// Stops the server also when the test panics (else the scope would wait for it forever).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl std::ops::Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        let h = s.spawn(|| serve(listener, &stop, || snapshot(&scrapes)));
        {
            let _stop = StopOnDrop(&stop);
            f(addr, &scrapes);
        }
        let t0 = Instant::now();
        h.join().unwrap().unwrap();
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    });
}

/// Pipes `body` into `cmd`, returns (success, stdout + stderr).
fn pipe(cmd: &mut Command, body: &str) -> (bool, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn have(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn scrape_passes_promtool_check_metrics() {
    with_server(|addr, scrapes| {
        let r = get(addr, "/metrics", None);
        assert_eq!(r.status, "HTTP/1.1 200 OK");
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        assert!(r
            .body
            .contains("\nfivegs_ep_n3_gtp_indatapktn3upf_total 10\n"));
        assert!(r
            .body
            .contains("\nscalebricks_packets_total{port=\"inet\",direction=\"rx\"} 2000\n"));
        // Summed at scrape time: the next scrape sees the next snapshot.
        let r2 = get(addr, "/metrics?x", None);
        assert!(r2.body.contains("{port=\"inet\",direction=\"rx\"} 4000\n"));
        assert_eq!(scrapes.load(Ordering::Relaxed), 2);

        if !have("promtool", "--version")
            && !sb_io::netns::skip_or_fail(
                "scrape_passes_promtool_check_metrics",
                "promtool not installed (Debian package prometheus)",
            )
        {
            return;
        }
        let (ok, out) = pipe(Command::new("promtool").args(["check", "metrics"]), &r.body);
        assert!(
            ok,
            "promtool check metrics failed:\n{out}\n--- body:\n{}",
            r.body
        );
        // The check can fail: a counter family named without `_total` is refused.
        let bad = r
            .body
            .replace("scalebricks_arp_replies_total", "scalebricks_arp_replies");
        let (ok, out) = pipe(Command::new("promtool").args(["check", "metrics"]), &bad);
        assert!(!ok, "promtool accepted a broken exposition: {out}");
    });
}

#[test]
fn openmetrics_scrape_passes_a_strict_parser() {
    with_server(|addr, _| {
        let accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
        let r = get(addr, "/metrics", Some(accept));
        assert_eq!(r.status, "HTTP/1.1 200 OK");
        assert_eq!(
            r.header("content-type"),
            Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
        );
        assert!(r.body.ends_with("# EOF\n"));
        let python = "/usr/bin/python3";
        let script = "import sys\n\
            from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
            fams = list(p(sys.stdin.read()))\n\
            print(len(fams), sum(len(f.samples) for f in fams))\n";
        if !Command::new(python)
            .args(["-c", "import prometheus_client.openmetrics.parser"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
            && !sb_io::netns::skip_or_fail(
                "openmetrics_scrape_passes_a_strict_parser",
                "the Python Prometheus client is not installed (Debian package python3-prometheus-client)",
            )
        {
            return;
        }
        let (ok, out) = pipe(Command::new(python).args(["-c", script]), &r.body);
        assert!(
            ok,
            "OpenMetrics parser refused the scrape:\n{out}\n--- body:\n{}",
            r.body
        );
        let families: usize = out.split_whitespace().next().unwrap().parse().unwrap();
        assert_eq!(families, r.body.matches("# TYPE ").count(), "{out}");
        // The parser can fail: a counter sample without `_total` is refused.
        let bad = r.body.replace(
            "scalebricks_arp_replies_total 0",
            "scalebricks_arp_replies 0",
        );
        assert_ne!(bad, r.body);
        let (ok, _) = pipe(Command::new(python).args(["-c", script]), &bad);
        assert!(!ok, "the parser accepted a broken exposition");
    });
}

#[test]
fn other_paths_methods_and_head() {
    with_server(|addr, scrapes| {
        assert_eq!(get(addr, "/", None).status, "HTTP/1.1 404 Not Found");
        assert_eq!(
            get(addr, "/metrics/x", None).status,
            "HTTP/1.1 404 Not Found"
        );
        let r = exchange(addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert_eq!(r.status, "HTTP/1.1 405 Method Not Allowed");
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
        let r = exchange(addr, b"GET /metrics HTTP/9.9\r\n\r\n").unwrap();
        assert_eq!(r.status, "HTTP/1.1 400 Bad Request");
        let r = exchange(addr, b"HEAD /metrics HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(r.status, "HTTP/1.1 200 OK");
        assert!(r.body.is_empty());
        assert!(
            r.header("content-length")
                .unwrap()
                .parse::<usize>()
                .unwrap()
                > 1000
        );
        // Only the two metrics requests took a snapshot.
        assert_eq!(scrapes.load(Ordering::Relaxed), 1);
    });
}

/// What a hostile client gets: an error status or a closed connection, never a hang; and
/// the server answers a normal scrape after each.
#[test]
fn garbage_oversized_slow_and_truncated_requests() {
    with_server(|addr, _| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(12);
        let ok_after = |what: &str| {
            let r = get(addr, "/metrics", None);
            assert_eq!(r.status, "HTTP/1.1 200 OK", "after {what}");
        };
        // Random bytes, with and without the end of a head.
        for i in 0..40 {
            let len = rng.gen_range(0..3000);
            let mut b: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if i % 2 == 0 {
                b.extend_from_slice(b"\r\n\r\n");
            }
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(IO_TIMEOUT * 3)).unwrap();
            let _ = s.write_all(&b);
            if i % 2 == 1 {
                // No end of head: the server gives up after its timeout, or on the size limit.
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            let mut out = Vec::new();
            let t0 = Instant::now();
            let r = s.read_to_end(&mut out);
            assert!(t0.elapsed() < IO_TIMEOUT * 2, "hung on garbage {i}");
            if r.is_ok() && !out.is_empty() {
                let head = String::from_utf8_lossy(&out);
                assert!(
                    head.starts_with("HTTP/1.1 400 ")
                        || head.starts_with("HTTP/1.1 404 ")
                        || head.starts_with("HTTP/1.1 405 ")
                        || head.starts_with("HTTP/1.1 431 "),
                    "garbage {i}: {head}"
                );
            }
        }
        ok_after("random bytes");

        // A huge header: 431 (or a reset once the server stops reading).
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n",
            "a".repeat(100_000)
        );
        match exchange(addr, big.as_bytes()) {
            Ok(r) => assert_eq!(r.status, "HTTP/1.1 431 Request Header Fields Too Large"),
            Err(e) => assert!(
                matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ),
                "{e}"
            ),
        }
        ok_after("a huge header");

        // Many headers within the limit are fine.
        let many: String = (0..100).map(|i| format!("X-{i}: {i}\r\n")).collect();
        let r = exchange(
            addr,
            format!("GET /metrics HTTP/1.1\r\n{many}\r\n").as_bytes(),
        )
        .unwrap();
        assert_eq!(r.status, "HTTP/1.1 200 OK");

        // A client that sends half a request and stalls is dropped after the timeout, and
        // blocks the next scrape at most that long.
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /metr").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let t0 = Instant::now();
        ok_after("a stalled client");
        assert!(t0.elapsed() < IO_TIMEOUT + Duration::from_secs(1));
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let _ = slow.read_to_end(&mut out);
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));

        // A client that trickles a byte every 100 ms, never ending its head, is dropped once
        // the deadline passes (not reset by each byte).
        let mut trickle = TcpStream::connect(addr).unwrap();
        trickle
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let t0 = Instant::now();
        let mut closed_at = None;
        for b in b"GET /metrics HTTP/1.1\r\nX: "
            .iter()
            .chain(std::iter::repeat(&b'a'))
        {
            if trickle.write_all(&[*b]).is_err() {
                closed_at = Some(t0.elapsed());
                break;
            }
            let mut one = [0u8; 1];
            match trickle.read(&mut one) {
                Ok(0) => {
                    closed_at = Some(t0.elapsed());
                    break;
                }
                Ok(_) => panic!("an answer to an unfinished request"),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    closed_at = Some(t0.elapsed());
                    break;
                }
            }
            if t0.elapsed() > IO_TIMEOUT * 3 {
                break;
            }
        }
        let at = closed_at.expect("a trickling client was never dropped");
        assert!(
            at >= IO_TIMEOUT - Duration::from_millis(300) && at < IO_TIMEOUT * 2,
            "dropped after {at:?}"
        );
        ok_after("a trickling client");

        // Connect and close at once.
        for _ in 0..20 {
            drop(TcpStream::connect(addr).unwrap());
        }
        ok_after("empty connections");
    });
}
