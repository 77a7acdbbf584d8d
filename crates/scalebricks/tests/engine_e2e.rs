//! The engine nodes end to end, per architecture, over real packets in network namespaces:
//! frames built by scapy (`common/traffic.py`), replayed by tcpreplay into several nodes' `inet`
//! ports, captured by tcpdump on every RAN side, dissected by tshark and compared byte for byte
//! with what was sent; upstream G-PDUs and a GTP-U echo sent by scapy from a RAN side; SYNs of
//! a real kernel TCP socket. Same root/CI policy, lock and cleanup as `cluster_e2e` (`common`).
//! With the `fastpath` feature every test repeats on the XDP fast path (`cluster up --io
//! xdp-fast`): the same packets and checks, the counters with the programs' work folded in
//! (`common::fold_xdp`), and the programs' own counters say what they finished (every known
//! packet, the kernel's SYNs, the big packets over the fabric) and what they passed to the
//! engine (unknown UEs, malformed frames, an expired TTL, packets too big for the `ran` MTU).

mod common;
use common::*;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

const PY: &str = "/usr/bin/python3";
const TRAFFIC_PY: &str = include_str!("common/traffic.py");
const NODES: usize = 4;
const FLOWS: usize = 10_000;
/// Downstream packets to known UEs, and to UE addresses of the pool that no tunnel has.
const KNOWN: usize = 2000;
const UNKNOWN: usize = 20;
/// Malformed frames sent into every node (one of each).
const MALFORMED: [&str; 3] = ["ipv4_bad_checksum", "ipv4_truncated", "ipv4_bad_total_len"];
/// Upstream G-PDUs of known tunnels.
const UP_KNOWN: usize = 20;
/// Inner UDP/TCP ports of the test traffic, dissected as plain data (tshark's heuristic
/// dissectors would otherwise take some payloads for other protocols and call them malformed).
const DATA_PORTS: [&str; 6] = [
    "udp.port==5000,data",
    "udp.port==40003,data",
    "tcp.port==40001,data",
    "tcp.port==40002,data",
    "udp.port==40000,gtp",
    "udp.port==2152,gtp",
];

/// True if the test can run: root and iproute2 (`can_run`), plus tcpdump, tcpreplay, tshark
/// and Debian's scapy. Under CI a missing tool fails the test.
fn can_run_engine(test: &str) -> bool {
    if !can_run(test) {
        return false;
    }
    let scapy = std::process::Command::new(PY)
        .args(["-c", "import scapy.all, scapy.contrib.gtp"])
        .output()
        .is_ok_and(|o| o.status.success());
    let missing: Vec<&str> = ["tcpdump", "tcpreplay", "tshark"]
        .into_iter()
        .filter(|p| !have(p))
        .chain((!scapy).then_some("python3-scapy"))
        .collect();
    if missing.is_empty() {
        return true;
    }
    sb_io::netns::skip_or_fail(
        test,
        &format!("needs {missing:?} (scripts/apt-install.sh installs them)"),
    )
}

fn decode_as() -> Vec<&'static str> {
    DATA_PORTS.iter().flat_map(|d| ["-d", d]).collect()
}

/// Runs the traffic script with `args` (in namespace `netns` if given).
fn traffic_py(dir: &Path, netns: Option<&str>, args: &[&str]) {
    let script = dir.join("traffic.py");
    std::fs::write(&script, TRAFFIC_PY).unwrap();
    let mut a: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        a.extend(["netns", "exec", ns, PY]);
    }
    a.push(script.to_str().unwrap());
    a.extend_from_slice(args);
    let (prog, a) = if netns.is_some() { ("ip", a) } else { (PY, a) };
    let o = run_prog(prog, &a, Duration::from_secs(60));
    ok(&o, "traffic.py");
}

/// The id that `traffic.py` wrote at the start of a payload ("SBE2E" and 8 digits).
fn packet_id(ip: &[u8]) -> Option<u64> {
    let i = ip.windows(5).position(|w| w == b"SBE2E")?;
    std::str::from_utf8(ip.get(i + 5..i + 13)?)
        .ok()?
        .parse()
        .ok()
}

/// The IP packet of an Ethernet frame (its total length; the frame may be padded).
fn ip_of(frame: &[u8]) -> &[u8] {
    let ip = &frame[14..];
    let len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    &ip[..len]
}

/// A downstream packet as the RAN side received it.
struct Tunnelled<'a> {
    eth_dst: &'a [u8],
    eth_src: &'a [u8],
    outer_src: [u8; 4],
    outer_dst: [u8; 4],
    teid: u32,
    inner: &'a [u8],
}

/// Parses Ethernet / IPv4 / UDP 2152 / GTP-U G-PDU, checking the outer headers as it goes.
fn parse_tunnelled(f: &[u8]) -> Tunnelled<'_> {
    assert_eq!(&f[12..14], &[0x08, 0x00], "not IPv4: {f:02x?}");
    let ip = ip_of(f);
    assert_eq!(ip[0] >> 4, 4);
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    assert_eq!(ipv4_checksum(&ip[..ihl]), 0, "outer IPv4 checksum");
    assert_eq!(ip[9], 17, "outer protocol not UDP");
    let udp = &ip[ihl..];
    assert_eq!(&udp[2..4], &2152u16.to_be_bytes(), "UDP destination port");
    assert_eq!(usize::from(u16::from_be_bytes([udp[4], udp[5]])), udp.len());
    let g = &udp[8..];
    assert_eq!(g[0] >> 5, 1, "GTP version");
    assert_eq!(g[1], 255, "GTP message type (G-PDU)");
    let hl = if g[0] & 0x07 != 0 { 12 } else { 8 };
    assert_eq!(
        usize::from(u16::from_be_bytes([g[2], g[3]])) + 8,
        g.len(),
        "GTP length"
    );
    Tunnelled {
        eth_dst: &f[..6],
        eth_src: &f[6..12],
        outer_src: ip[12..16].try_into().unwrap(),
        outer_dst: ip[16..20].try_into().unwrap(),
        teid: u32::from_be_bytes(g[4..8].try_into().unwrap()),
        inner: &g[hl..],
    }
}

fn v4(s: &str) -> [u8; 4] {
    s.split('/')
        .next()
        .unwrap()
        .parse::<std::net::Ipv4Addr>()
        .unwrap()
        .octets()
}

/// The node counters once `done` holds for them, (if `balanced`) every frame an engine sent
/// over the fabric was received by another, and they stay the same over another second. On the
/// XDP fast path, with what the programs did folded in (`fold_xdp`).
fn settled(c: &Cluster, what: &str, balanced: bool, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let t0 = Instant::now();
    let status = || -> Vec<Value> {
        c.status()["node_status"]
            .as_array()
            .unwrap()
            .iter()
            .map(fold_xdp)
            .collect()
    };
    loop {
        let ns = status();
        let fabric_tx: u64 = ns
            .iter()
            .map(|n| n["engine"]["ports"]["fabric"]["tx"].as_u64().unwrap_or(0))
            .sum();
        let fabric_rx: u64 = ns
            .iter()
            .map(|n| n["engine"]["ports"]["fabric"]["rx"].as_u64().unwrap_or(0))
            .sum();
        if done(&ns) && (!balanced || fabric_tx == fabric_rx) {
            // Counters are rewritten every second: one more round to see they stay.
            std::thread::sleep(Duration::from_millis(1100));
            let again = status();
            let strip =
                |v: &[Value]| -> Vec<Value> { v.iter().map(|n| n["engine"].clone()).collect() };
            if strip(&again) == strip(&ns) {
                return again;
            }
            continue;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "{what}: counters did not settle: {}",
            serde_json::to_string(&ns).unwrap()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[derive(Debug, Clone)]
struct Sent {
    ingress: usize,
    kind: String,
    ue: String,
}

/// Downstream, upstream and echo through a 4-node cluster running `arch` with I/O `io`.
fn engine_end_to_end(arch: &str, seed: u64, io: Io) {
    let t_start = Instant::now();
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    let seed_s = seed.to_string();
    let flows_s = FLOWS.to_string();
    let mut up = vec!["--arch", arch, "--flows", &flows_s, "--seed", &seed_s];
    up.extend_from_slice(io.up_args());
    ok(&c.up_with(NODES, "user", &up), "cluster up");
    // `cluster up` returns before every bridge port forwards (see
    // cluster_e2e::up_returns_with_every_link_up): wait for it, this test is about the engine.
    wait_links_up(&c);
    let desc = c.description();
    let nodes = desc["nodes"].as_array().unwrap().clone();
    let flows = c.flows();
    assert_eq!(flows.len(), FLOWS);
    let by_ue: HashMap<&str, &Flow> = flows.iter().map(|f| (f.ue.as_str(), f)).collect();
    let work = c._tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let flows_csv = c.dir.join("flows.csv");
    let cluster_json = c.dir.join("cluster.json");

    // 1. Downstream: scapy writes one pcap per ingress node, tcpreplay sends them all at once.
    traffic_py(
        &work,
        None,
        &[
            "down",
            flows_csv.to_str().unwrap(),
            cluster_json.to_str().unwrap(),
            work.to_str().unwrap(),
            &seed_s,
            &KNOWN.to_string(),
            &UNKNOWN.to_string(),
        ],
    );
    let manifest: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(work.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest.len(), KNOWN + UNKNOWN + NODES * MALFORMED.len());
    let sent_meta: HashMap<u64, Sent> = manifest
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().unwrap(),
                Sent {
                    ingress: m["ingress"].as_u64().unwrap() as usize,
                    kind: m["kind"].as_str().unwrap().to_string(),
                    ue: m["ue"].as_str().unwrap().to_string(),
                },
            )
        })
        .collect();
    // The IP packets sent, by id (malformed frames carry none we look for).
    let mut sent_ip: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut per_node_frames = [0u64; NODES];
    for (i, n) in per_node_frames.iter_mut().enumerate() {
        for f in read_pcap(&work.join(format!("in{i}.pcap"))) {
            *n += 1;
            if let Some(id) = packet_id(&f) {
                if sent_meta[&id].kind != "known" && sent_meta[&id].kind != "unknown" {
                    continue;
                }
                assert_eq!(sent_meta[&id].ingress, i);
                sent_ip.insert(id, ip_of(&f).to_vec());
            }
        }
    }
    assert_eq!(sent_ip.len(), KNOWN + UNKNOWN);
    let caps: Vec<Capture> = (0..NODES)
        .map(|i| {
            Capture::start(
                &format!("{}-ran{i}", c.prefix),
                "eth0",
                "in",
                work.join(format!("ran{i}.pcap")),
            )
        })
        .collect();
    let replays: Vec<_> = (0..NODES)
        .map(|i| {
            let ns = format!("{}-inet{i}", c.prefix);
            let pcap = work.join(format!("in{i}.pcap"));
            std::thread::spawn(move || {
                run_prog(
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
                )
            })
        })
        .collect();
    for r in replays {
        let o = r.join().unwrap();
        let text = ok(&o, "tcpreplay");
        assert!(text.contains("Failed packets:            0"), "{text}");
    }
    let known_sent: Vec<(u64, &Sent)> = sent_meta
        .iter()
        .filter(|(_, s)| s.kind == "known")
        .map(|(&id, s)| (id, s))
        .collect();
    let per_egress = |j: usize| {
        known_sent
            .iter()
            .filter(|(_, s)| by_ue[s.ue.as_str()].node == j)
            .count() as u64
    };
    let counters = settled(&c, "downstream", true, |ns| {
        ns.iter().enumerate().all(|(i, n)| {
            u(&n["engine"]["ports"]["inet"]["rx"]) == per_node_frames[i]
                && u(&n["engine"]["ports"]["ran"]["tx"]) == per_egress(i)
        })
    });
    std::thread::sleep(Duration::from_millis(300));
    let captured: Vec<Vec<Vec<u8>>> = caps.into_iter().map(Capture::stop).collect();

    // 2. Every known packet exactly once, at its handling node's RAN side, as sent but its TTL.
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (j, frames) in captured.iter().enumerate() {
        let n = &nodes[j];
        assert_eq!(frames.len() as u64, per_egress(j), "frames at ran{j}");
        for f in frames {
            let t = parse_tunnelled(f);
            assert_eq!(
                t.eth_dst,
                mac_bytes(n["ran"]["peer"]["mac"].as_str().unwrap())
            );
            assert_eq!(
                t.eth_src,
                mac_bytes(n["ran"]["local"]["mac"].as_str().unwrap())
            );
            assert_eq!(t.outer_src, v4(n["ran"]["local"]["addr"].as_str().unwrap()));
            let id = packet_id(t.inner).unwrap_or_else(|| panic!("no id in {f:02x?}"));
            let s = &sent_meta[&id];
            assert_eq!(s.kind, "known", "{id} should not have arrived");
            let flow = by_ue[s.ue.as_str()];
            assert_eq!(
                flow.node, j,
                "packet {id} at ran{j}, its tunnel is node {}'s",
                flow.node
            );
            assert_eq!(t.teid, flow.teid, "TEID of packet {id}");
            assert_eq!(t.outer_dst, v4(&flow.enb), "eNodeB of packet {id}");
            let want = &sent_ip[&id];
            let got = t.inner;
            assert_eq!(got.len(), want.len(), "length of packet {id}");
            assert_eq!(got[8], want[8] - 1, "TTL of packet {id}");
            assert_eq!(
                ipv4_checksum(&got[..20]),
                0,
                "inner checksum of packet {id}"
            );
            assert_eq!(got[..8], want[..8], "packet {id}");
            assert_eq!(got[12..], want[12..], "packet {id}");
            *seen.entry(id).or_default() += 1;
        }
        // tshark agrees, and finds nothing malformed.
        let rows = tshark_fields(
            &work.join(format!("ran{j}.pcap")),
            &[
                "gtp.teid",
                "ip.dst",
                "ip.checksum.status",
                "udp.checksum.status",
                "tcp.checksum.status",
                "_ws.malformed",
                "_ws.expert.severity",
            ],
            &decode_as(),
        );
        assert_eq!(rows.len(), frames.len(), "tshark rows of ran{j}");
        for (r, f) in rows.iter().zip(frames) {
            let t = parse_tunnelled(f);
            let flow = by_ue[sent_meta[&packet_id(t.inner).unwrap()].ue.as_str()];
            assert_eq!(r[0], format!("{:#010x}", flow.teid), "{r:?}");
            assert_eq!(r[1], format!("{},{}", flow.enb, flow.ue), "{r:?}");
            assert_eq!(r[2], "1,1", "IPv4 checksums (outer, inner): {r:?}");
            // The outer UDP checksum is 0 (not present: 3); the inner one is good.
            assert!(
                r[3] == "3,1" || r[3] == "3" && r[4] == "1",
                "L4 checksums: {r:?}"
            );
            assert!(r[5].is_empty(), "tshark: malformed: {r:?}");
        }
    }
    let missing: Vec<&u64> = known_sent
        .iter()
        .map(|(id, _)| id)
        .filter(|id| !seen.contains_key(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} known packets lost: {missing:?}",
        missing.len()
    );
    assert!(seen.values().all(|&n| n == 1), "duplicates");
    assert_eq!(seen.len(), KNOWN);

    // 3. Counters: drops by reason, crossings.
    let mut drops: BTreeMap<String, u64> = BTreeMap::new();
    let mut crossings = [0u64; 4];
    for (i, n) in counters.iter().enumerate() {
        assert_eq!(n["running"], true, "node {i}: {n}");
        assert_eq!(n["arch"], arch, "node {i}");
        assert_eq!(
            n["tables"]["uplink_entries"],
            per_flows(&flows, i),
            "node {i}"
        );
        for (k, v) in n["engine"]["drops"].as_object().unwrap() {
            *drops.entry(k.clone()).or_default() += u(v);
        }
        for (m, reason) in MALFORMED.iter().enumerate() {
            assert_eq!(
                n["engine"]["drops"][format!("malformed:{reason}")],
                1,
                "node {i} ({m}): {}",
                n["engine"]
            );
        }
        for (k, c) in crossings.iter_mut().enumerate() {
            *c += u(&n["engine"]["crossings"][k]);
        }
    }
    let unknown = drops.remove("unknown_flow").unwrap_or(0);
    let fib_miss = drops.remove("fib_miss_after_gpt").unwrap_or(0);
    assert_eq!(
        unknown + fib_miss,
        UNKNOWN as u64,
        "unknown flows: {drops:?}"
    );
    if arch != "scalebricks" {
        assert_eq!(fib_miss, 0, "{arch} has no GPT");
    }
    let want_malformed: BTreeMap<String, u64> = MALFORMED
        .iter()
        .map(|r| (format!("malformed:{r}"), NODES as u64))
        .collect();
    assert_eq!(drops, want_malformed, "drops other than unknown flows");
    let mut want = [0u64; 4];
    for (_, s) in &known_sent {
        let egress = by_ue[s.ue.as_str()].node;
        let hops = match arch {
            "hash-part" => {
                let ue: std::net::IpAddr = s.ue.parse().unwrap();
                let h = sb_common::hash128(&sb_engine::lte::ue_key(ue), seed);
                let ind = usize::from(sb_engine::indirection_node(h, NODES as u16));
                usize::from(s.ingress != ind) + usize::from(ind != egress)
            }
            _ => usize::from(s.ingress != egress),
        };
        want[hops] += 1;
    }
    assert_eq!(crossings, want, "{arch}: fabric crossings");
    assert_eq!(crossings[3], 0);
    if arch != "hash-part" {
        assert_eq!(crossings[2], 0);
    }
    if io == Io::XdpFast {
        // Every known packet finished in XDP (the folded crossings above count those too),
        // the rest (unknown UEs, malformed frames) passed to the engine.
        let x = |k: &str| -> u64 { counters.iter().map(|n| u(&n["xdp"]["counters"][k])).sum() };
        let fast = x("to_ran") + x("fabric_to_ran") + x("fabric_to_ran_2");
        assert_eq!(fast, KNOWN as u64, "{arch}: known packets finished in XDP");
        for (i, n) in counters.iter().enumerate() {
            assert_eq!(n["xdp"]["enabled"], true, "node {i}: {n}");
        }
    }
    eprintln!(
        "{arch} ({io:?}): downstream checked ({KNOWN} known, crossings {crossings:?}) after {:.1}s",
        t_start.elapsed().as_secs_f64()
    );

    // 4. Upstream and echo at one node (a different one per architecture).
    let h = (seed as usize) % NODES;
    let n = &nodes[h];
    let inet_cap = Capture::start(
        &format!("{}-inet{h}", c.prefix),
        "eth0",
        "in",
        work.join("up-inet.pcap"),
    );
    let ran_cap = Capture::start(
        &format!("{}-ran{h}", c.prefix),
        "eth0",
        "in",
        work.join("up-ran.pcap"),
    );
    traffic_py(
        &work,
        Some(&format!("{}-ran{h}", c.prefix)),
        &[
            "up",
            flows_csv.to_str().unwrap(),
            cluster_json.to_str().unwrap(),
            work.to_str().unwrap(),
            &h.to_string(),
            &seed_s,
            &UP_KNOWN.to_string(),
        ],
    );
    let before = &counters[h]["engine"];
    let after = settled(&c, "upstream", true, |ns| {
        let e = &ns[h]["engine"];
        u(&e["ports"]["ran"]["rx"]) >= u(&before["ports"]["ran"]["rx"]) + UP_KNOWN as u64 + 6
    });
    let up_sent: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(work.join("up.json")).unwrap()).unwrap();
    let sent_frames = read_pcap(&work.join("up.pcap"));
    assert_eq!(sent_frames.len(), up_sent.len());
    let inner_sent: HashMap<u64, Vec<u8>> = sent_frames
        .iter()
        .zip(&up_sent)
        .filter(|(_, s)| s["kind"] == "known" || s["kind"] == "other_n3")
        .map(|(f, s)| {
            // What leaves inet: the inner packet with its TTL decremented (checksum patched).
            let mut ip = parse_tunnelled(f).inner.to_vec();
            ip[8] -= 1;
            ip[10..12].fill(0);
            let c = ipv4_checksum(&ip[..20]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            (s["id"].as_u64().unwrap(), ip)
        })
        .collect();
    assert_eq!(inner_sent.len(), UP_KNOWN + 1);
    std::thread::sleep(Duration::from_millis(300));
    let at_inet = inet_cap.stop();
    let at_ran = ran_cap.stop();
    assert_eq!(
        at_inet.len(),
        UP_KNOWN + 1,
        "decapsulated packets at inet{h}"
    );
    let mut up_seen = std::collections::HashSet::new();
    for f in &at_inet {
        assert_eq!(
            &f[..6],
            mac_bytes(n["inet"]["peer"]["mac"].as_str().unwrap())
        );
        assert_eq!(
            &f[6..12],
            mac_bytes(n["inet"]["local"]["mac"].as_str().unwrap())
        );
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let id = packet_id(&f[14..]).expect("an id");
        assert_eq!(&f[14..], &inner_sent[&id][..], "upstream packet {id}");
        assert!(up_seen.insert(id), "upstream packet {id} twice");
    }
    // The Echo Response, back to the request's source port, and an Error Indication per
    // unknown TEID, seen by tshark.
    assert_eq!(at_ran.len(), 4, "frames at ran{h} after the echo request");
    let rows = tshark_fields(
        &work.join("up-ran.pcap"),
        &[
            "gtp.message",
            "gtp.seq_number",
            "udp.dstport",
            "ip.src",
            "ip.dst",
            "_ws.malformed",
            "gtp.teid_data",
        ],
        &decode_as(),
    );
    assert_eq!(rows.len(), 4);
    let mut ei_teids: Vec<String> = rows
        .iter()
        .filter(|r| r[0] == "0x1a")
        .map(|r| {
            assert!(r[5].is_empty(), "{r:?}");
            assert_eq!(r[4], "192.0.2.1", "back to the G-PDU's source: {r:?}");
            r[6].clone()
        })
        .collect();
    ei_teids.sort();
    let mut unknown_teids: Vec<String> = up_sent
        .iter()
        .filter(|s| s["kind"] == "unknown_teid")
        .map(|s| format!("0x{:08x}", s["teid"].as_u64().unwrap()))
        .collect();
    unknown_teids.sort();
    assert_eq!(ei_teids, unknown_teids, "Error Indications name the TEIDs");
    let r = rows
        .iter()
        .find(|r| r[0] == "0x02")
        .expect("an Echo Response");
    assert_eq!(r[0], "0x02", "an Echo Response: {r:?}");
    assert_eq!(r[1], "0x004d", "the request's sequence number: {r:?}");
    assert_eq!(r[2], "40000", "{r:?}");
    assert_eq!(
        r[3],
        n["ran"]["local"]["addr"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
    );
    assert_eq!(
        r[4],
        n["ran"]["peer"]["addr"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap()
    );
    assert!(r[5].is_empty(), "{r:?}");
    let e = &after[h]["engine"];
    let delta = |p: &[&str]| {
        let get = |v: &Value| p.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or(0);
        get(e) - get(before)
    };
    assert_eq!(delta(&["upstream"]), UP_KNOWN as u64 + 1, "{e}");
    assert_eq!(delta(&["echo_replies"]), 1, "{e}");
    assert_eq!(delta(&["drops", "unknown_teid"]), 3, "{e}");
    assert_eq!(delta(&["error_indications"]), 3, "{e}");
    assert_eq!(delta(&["drops", "uplink_mismatch"]), 1, "{e}");
    assert_eq!(delta(&["ports", "ran", "rx"]), UP_KNOWN as u64 + 6, "{e}");
    assert_eq!(delta(&["ports", "ran", "dropped"]), 4, "{e}");
    assert_eq!(delta(&["ports", "inet", "tx"]), UP_KNOWN as u64 + 1, "{e}");
    assert_eq!(delta(&["ports", "ran", "tx"]), 4, "{e}");
    for (i, n) in after.iter().enumerate() {
        assert_eq!(n["running"], true, "node {i}");
    }

    let text = ok(&c.down(), "cluster down");
    assert!(
        text.contains("14 namespaces deleted, 4 processes stopped"),
        "{text}"
    );
    eprintln!("{arch}: done in {:.1}s", t_start.elapsed().as_secs_f64());
}

fn per_flows(flows: &[Flow], node: usize) -> u64 {
    flows.iter().filter(|f| f.node == node).count() as u64
}

#[test]
fn scalebricks_forwards_every_packet_once_with_at_most_one_crossing() {
    if can_run_engine("scalebricks_forwards_every_packet_once_with_at_most_one_crossing") {
        engine_end_to_end("scalebricks", 1, Io::Engine);
    }
}

#[test]
fn full_duplication_forwards_every_packet_once() {
    if can_run_engine("full_duplication_forwards_every_packet_once") {
        engine_end_to_end("full-dup", 2, Io::Engine);
    }
}

#[test]
fn hash_partitioning_forwards_every_packet_once_with_at_most_two_crossings() {
    if can_run_engine("hash_partitioning_forwards_every_packet_once_with_at_most_two_crossings") {
        engine_end_to_end("hash-part", 3, Io::Engine);
    }
}

/// The three architectures again on the XDP fast path (feature `fastpath`): the same packets,
/// captures and tshark checks; the counters with the programs' work folded in, and every known
/// packet finished in XDP.
#[cfg(feature = "fastpath")]
#[test]
fn scalebricks_on_the_xdp_fast_path_forwards_every_packet_once() {
    if can_run_engine("scalebricks_on_the_xdp_fast_path_forwards_every_packet_once") {
        engine_end_to_end("scalebricks", 1, Io::XdpFast);
    }
}

#[cfg(feature = "fastpath")]
#[test]
fn full_duplication_on_the_xdp_fast_path_forwards_every_packet_once() {
    if can_run_engine("full_duplication_on_the_xdp_fast_path_forwards_every_packet_once") {
        engine_end_to_end("full-dup", 2, Io::XdpFast);
    }
}

#[cfg(feature = "fastpath")]
#[test]
fn hash_partitioning_on_the_xdp_fast_path_forwards_every_packet_once() {
    if can_run_engine("hash_partitioning_on_the_xdp_fast_path_forwards_every_packet_once") {
        engine_end_to_end("hash-part", 3, Io::XdpFast);
    }
}

/// SYNs of a real kernel TCP socket in PREFIX-inet0 to a UE that node 0 serves: each one
/// (the kernel retransmits, nobody answers) arrives at ran0 GTP-U encapsulated, below the MTU,
/// with the inner TCP checksum tshark finds good.
#[test]
fn kernel_tcp_syns_arrive_tunnelled_with_a_valid_checksum() {
    kernel_tcp_syns(
        "kernel_tcp_syns_arrive_tunnelled_with_a_valid_checksum",
        Io::Engine,
    );
}

/// The same on the XDP fast path (what the programs pass to the engine, and what they finish).
#[cfg(feature = "fastpath")]
#[test]
fn kernel_tcp_syns_arrive_tunnelled_on_the_xdp_fast_path() {
    kernel_tcp_syns(
        "kernel_tcp_syns_arrive_tunnelled_on_the_xdp_fast_path",
        Io::XdpFast,
    );
}

fn kernel_tcp_syns(test: &str, io: Io) {
    if !can_run_engine(test) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    let mut up = vec!["--flows", "1000", "--seed", "4"];
    up.extend_from_slice(io.up_args());
    ok(&c.up_with(NODES, "user", &up), "cluster up");
    wait_links_up(&c);
    let flow = c.flows().into_iter().find(|f| f.node == 0).unwrap();
    let work = c._tmp.path();
    let inet0 = format!("{}-inet0", c.prefix);
    let out = Capture::start(&inet0, "eth0", "out", work.join("syn-out.pcap"));
    let ran = Capture::start(
        &format!("{}-ran0", c.prefix),
        "eth0",
        "in",
        work.join("syn-ran.pcap"),
    );
    let client = format!(
        "import socket\ntry:\n    socket.create_connection(('{}', 80), timeout=3.5)\nexcept OSError as e:\n    print(e)\n",
        flow.ue
    );
    let o = run_prog(
        "ip",
        &["netns", "exec", &inet0, PY, "-c", &client],
        Duration::from_secs(20),
    );
    ok(&o, "TCP client");
    std::thread::sleep(Duration::from_millis(500));
    let sent = out.stop();
    let got = ran.stop();
    // SYN at 0 s, retransmissions at 1 s and 3 s.
    assert!(sent.len() >= 2, "SYNs sent: {}", sent.len());
    assert_eq!(got.len(), sent.len(), "SYNs tunnelled");
    if io == Io::XdpFast {
        // Encapsulated in XDP at node 0, nothing passed to its engine.
        let st = settled(&c, "SYNs", false, |ns| {
            u(&ns[0]["xdp"]["counters"]["to_ran"]) >= got.len() as u64
        });
        assert_eq!(u(&st[0]["xdp"]["counters"]["slow"]), 0, "{}", st[0]);
    }
    for (s, g) in sent.iter().zip(&got) {
        let t = parse_tunnelled(g);
        assert_eq!(t.teid, flow.teid);
        assert_eq!(t.outer_dst, v4(&flow.enb));
        assert!(g.len() <= 1514, "{} bytes", g.len());
        let want = ip_of(s);
        assert_eq!(t.inner.len(), want.len());
        assert_eq!(t.inner[8], want[8] - 1, "TTL");
        assert_eq!(t.inner[12..], want[12..], "inner packet");
    }
    let rows = tshark_fields(
        &work.join("syn-ran.pcap"),
        &[
            "tcp.flags.syn",
            "tcp.dstport",
            "tcp.checksum.status",
            "ip.checksum.status",
            "_ws.malformed",
        ],
        &[],
    );
    assert_eq!(rows.len(), got.len());
    for r in &rows {
        assert_eq!(r[0], "1", "{r:?}");
        assert_eq!(r[1], "80", "{r:?}");
        assert_eq!(
            r[2], "1",
            "inner TCP checksum (1 = good; 0 = bad, e.g. left partial by veth tx checksum offload): {r:?}"
        );
        assert_eq!(r[3], "1,1", "{r:?}");
        assert!(r[4].is_empty(), "{r:?}");
    }
    ok(&c.down(), "cluster down");
}

/// A full-size Internet packet (1500 bytes of IP, the `inet` MTU) reaches the gNB whole over
/// the jumbo `ran` link (1536 bytes of outer IP), however many fabric crossings it makes, and
/// nothing is dropped for its size; a packet whose TTL runs out at the ingress node is answered
/// with an ICMP Time Exceeded back at its sender, which tshark finds well formed (checksum
/// good, quoting the packet). Per architecture, into the node that does not serve the UE.
#[test]
fn full_size_packets_reach_the_gnb_and_expired_ones_get_time_exceeded() {
    full_size_and_expired(
        "full_size_packets_reach_the_gnb_and_expired_ones_get_time_exceeded",
        Io::Engine,
    );
}

/// The same on the XDP fast path (what the programs pass to the engine, and what they finish).
#[cfg(feature = "fastpath")]
#[test]
fn full_size_packets_and_time_exceeded_on_the_xdp_fast_path() {
    full_size_and_expired(
        "full_size_packets_and_time_exceeded_on_the_xdp_fast_path",
        Io::XdpFast,
    );
}

fn full_size_and_expired(test: &str, io: Io) {
    if !can_run_engine(test) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut failures = Vec::new();
    for arch in ["scalebricks", "full-dup", "hash-part"] {
        let c = Cluster::new();
        let mut up = vec!["--arch", arch, "--flows", "100", "--seed", "4"];
        up.extend_from_slice(io.up_args());
        ok(&c.up_with(2, "user", &up), "cluster up");
        wait_links_up(&c);
        let desc = c.description();
        assert_eq!(
            desc["nodes"][1]["ran"]["local"]["mtu"], 9000,
            "a jumbo N3 link"
        );
        let flow = c.flows().into_iter().find(|f| f.node == 1).unwrap();
        let cap = Capture::start(
            &format!("{}-ran1", c.prefix),
            "eth0",
            "in",
            c._tmp.path().join("big.pcap"),
        );
        let back = Capture::start(
            &format!("{}-inet0", c.prefix),
            "eth0",
            "in",
            c._tmp.path().join("icmp.pcap"),
        );
        let n0 = &desc["nodes"][0]["inet"];
        let script = format!(
            "from scapy.all import *\nl2 = Ether(dst='{}', src='{}')\nfor n in (1400, 1500):\n    sendp(l2 / IP(src='198.51.100.1', dst='{ue}', flags='DF') / UDP(sport=41000, dport=5000) / Raw(bytes([n % 251]) * (n - 28)), iface='eth0', verbose=False)\nsendp(l2 / IP(src='198.51.100.1', dst='{ue}', ttl=1) / UDP(sport=41001, dport=5000) / Raw(b'ttl' * 10), iface='eth0', verbose=False)\n",
            n0["local"]["mac"].as_str().unwrap(),
            n0["peer"]["mac"].as_str().unwrap(),
            ue = flow.ue
        );
        let o = run_prog(
            "ip",
            &[
                "netns",
                "exec",
                &format!("{}-inet0", c.prefix),
                PY,
                "-c",
                &script,
            ],
            Duration::from_secs(30),
        );
        ok(&o, "scapy");
        // Not `balanced`: a frame the kernel refuses on the fabric never arrives.
        let st = settled(&c, arch, false, |ns| {
            u(&ns[0]["engine"]["ports"]["inet"]["rx"]) == 3
        });
        std::thread::sleep(Duration::from_millis(300));
        let frames = cap.stop();
        let got: Vec<usize> = frames
            .iter()
            .map(|f| parse_tunnelled(f).inner.len())
            .collect();
        // Intact: the payload bytes the sender wrote, after the inner IP and UDP headers.
        let intact = frames.iter().all(|f| {
            let inner = parse_tunnelled(f).inner;
            inner[28..]
                .iter()
                .all(|&b| usize::from(b) == inner.len() % 251)
        });
        // On the fast path: both big packets sent over the fabric and finished at node 1 in
        // XDP, the expired one passed to node 0's engine (`slow_ttl`).
        let x = |i: usize, k: &str| u(&st[i]["xdp"]["counters"][k]);
        let xdp_ok = io == Io::Engine
            || (
                x(0, "to_fabric"),
                x(0, "slow_ttl"),
                x(0, "slow"),
                x(1, "fabric_to_ran"),
            ) == (2, 1, 1, 2);
        let mtu: u64 = st.iter().map(|n| u(&n["engine"]["drops"]["mtu"])).sum();
        let icmp: u64 = st.iter().map(|n| u(&n["engine"]["icmp_errors"])).sum();
        let fabric_errors: u64 = st
            .iter()
            .map(|n| u(&n["ports"]["fabric"]["tx_errors"]) + u(&n["ports"]["fabric"]["tx_dropped"]))
            .sum();
        back.stop();
        let rows = tshark_fields(
            &c._tmp.path().join("icmp.pcap"),
            &[
                "icmp.type",
                "icmp.code",
                "icmp.checksum.status",
                "ip.src",
                "ip.dst",
                "udp.srcport",
                "_ws.malformed",
            ],
            &[],
        );
        // The error from node 0's inet address to the sender, quoting the packet (its
        // addresses and UDP port are the second occurrences).
        let want_row: Vec<String> = [
            "11".to_string(),
            "0".into(),
            "1".into(),
            "10.1.0.1,198.51.100.1".into(),
            format!("198.51.100.1,{}", flow.ue),
            "41001".into(),
            "".into(),
        ]
        .to_vec();
        eprintln!("{arch}: ran1 got inner lengths {got:?} (intact {intact}), mtu drops {mtu}, icmp errors {icmp}, fabric tx errors+drops {fabric_errors}, at inet0: {rows:?}");
        if got != [1400, 1500]
            || !intact
            || mtu != 0
            || icmp != 1
            || fabric_errors != 0
            || rows != [want_row.clone()]
            || !xdp_ok
        {
            failures.push(format!(
                "{arch}: ran1 got inner lengths {got:?} (want [1400, 1500]), intact {intact}, mtu drops {mtu} (want 0), icmp errors {icmp} (want 1), fabric tx errors+drops {fabric_errors} (want 0), tshark at inet0 {rows:?} (want [{want_row:?}]), XDP as expected {xdp_ok} (node 0 {}, node 1 {})",
                st[0]["xdp"],
                st[1]["xdp"]
            ));
        }
        ok(&c.down(), "cluster down");
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// With the engines' `ran_mtu` below the link's (`cluster up --ran-mtu 1400`), the largest
/// packet that fits (1364 bytes of IP: 1400 with the 36 tunnel bytes) arrives; one byte more
/// with DF is dropped (`mtu`) and answered with ICMP Fragmentation Needed naming MTU 1364, back
/// at the sender, which tshark finds well formed; one byte more without DF arrives as two outer
/// IPv4 fragments (1396 + 25 bytes) that tshark reassembles into the G-PDU of the 1365-byte
/// packet. ScaleBricks, into the UE's own node (whose inet sends the error).
#[test]
fn oversize_packets_get_frag_needed_back_at_the_sender() {
    oversize_and_frag_needed(
        "oversize_packets_get_frag_needed_back_at_the_sender",
        Io::Engine,
    );
}

/// The same on the XDP fast path (what the programs pass to the engine, and what they finish).
#[cfg(feature = "fastpath")]
#[test]
fn oversize_packets_and_frag_needed_on_the_xdp_fast_path() {
    oversize_and_frag_needed(
        "oversize_packets_and_frag_needed_on_the_xdp_fast_path",
        Io::XdpFast,
    );
}

fn oversize_and_frag_needed(test: &str, io: Io) {
    if !can_run_engine(test) {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::new();
    let mut up = vec!["--flows", "100", "--seed", "5", "--ran-mtu", "1400"];
    up.extend_from_slice(io.up_args());
    ok(&c.up_with(2, "user", &up), "cluster up");
    wait_links_up(&c);
    let desc = c.description();
    let flow = c.flows().into_iter().find(|f| f.node == 1).unwrap();
    let cap = Capture::start(
        &format!("{}-ran1", c.prefix),
        "eth0",
        "in",
        c._tmp.path().join("fits.pcap"),
    );
    let back = Capture::start(
        &format!("{}-inet1", c.prefix),
        "eth0",
        "in",
        c._tmp.path().join("frag.pcap"),
    );
    let n1 = &desc["nodes"][1]["inet"];
    let script = format!(
        "from scapy.all import *\nl2 = Ether(dst='{}', src='{}')\nfor n, f in ((1364, 'DF'), (1365, 'DF'), (1365, 0)):\n    sendp(l2 / IP(src='198.51.100.7', dst='{}', flags=f) / UDP(sport=42000 + n % 2 + (f == 0), dport=5000) / Raw(b'y' * (n - 28)), iface='eth0', verbose=False)\n",
        n1["local"]["mac"].as_str().unwrap(),
        n1["peer"]["mac"].as_str().unwrap(),
        flow.ue
    );
    let o = run_prog(
        "ip",
        &[
            "netns",
            "exec",
            &format!("{}-inet1", c.prefix),
            PY,
            "-c",
            &script,
        ],
        Duration::from_secs(30),
    );
    ok(&o, "scapy");
    let st = settled(&c, "frag", false, |ns| {
        u(&ns[1]["engine"]["ports"]["inet"]["rx"]) == 3
    });
    std::thread::sleep(Duration::from_millis(300));
    let frames = cap.stop();
    back.stop();
    // The whole packet, then the two fragments (outer IP lengths).
    let lens: Vec<usize> = frames
        .iter()
        .map(|f| usize::from(u16::from_be_bytes([f[16], f[17]])))
        .collect();
    assert_eq!(lens, [1400, 1396, 25], "what reached ran1");
    if io == Io::XdpFast {
        // The packet that fits encapsulated in XDP, both too big for it passed to the engine.
        let x = |k: &str| u(&st[1]["xdp"]["counters"][k]);
        assert_eq!(
            (x("to_ran"), x("slow_mtu"), x("slow")),
            (1, 2, 2),
            "{}",
            st[1]
        );
    }
    assert_eq!(parse_tunnelled(&frames[0]).inner.len(), 1364);
    assert_eq!(u(&st[1]["engine"]["drops"]["mtu"]), 1, "{}", st[1]);
    assert_eq!(u(&st[1]["engine"]["icmp_errors"]), 1, "{}", st[1]);
    assert_eq!(u(&st[1]["engine"]["fragmented"]), 1, "{}", st[1]);
    assert_eq!(u(&st[1]["engine"]["fragments"]), 2, "{}", st[1]);
    // tshark: every outer header checksum right, the fragments (DF clear, MF then not, one
    // identification) reassembled into a G-PDU of the flow's TEID around the 1365-byte packet.
    let per_frame = tshark_fields(
        &c._tmp.path().join("fits.pcap"),
        &[
            "ip.checksum.status",
            "ip.flags.df",
            "ip.flags.mf",
            "ip.frag_offset",
        ],
        &["-o", "ip.defragment:FALSE"],
    );
    let outer: Vec<Vec<&str>> = per_frame
        .iter()
        .map(|r| r.iter().map(|f| f.split(',').next().unwrap()).collect())
        .collect();
    assert_eq!(
        outer,
        [
            ["1", "1", "0", "0"],
            ["1", "0", "1", "0"],
            ["1", "0", "0", "172"]
        ],
        "outer headers at ran1: {per_frame:?}"
    );
    let gtp = tshark_fields(
        &c._tmp.path().join("fits.pcap"),
        &[
            "ip.reassembled.length",
            "gtp.teid",
            "ip.len",
            "udp.srcport",
            "_ws.malformed",
        ],
        &["-d", "udp.port==2152,gtp", "-Y", "gtp"],
    );
    let teid = format!("0x{:08x}", flow.teid);
    let row = |re: &str, lens: &str, ports: &str| -> Vec<String> {
        [re, &teid, lens, ports, ""].map(str::to_string).to_vec()
    };
    assert_eq!(
        gtp,
        [
            row("", "1400,1364", "2152,42000"),
            row("1381", "25,1365", "2152,42002")
        ],
        "tshark at ran1"
    );
    let rows = tshark_fields(
        &c._tmp.path().join("frag.pcap"),
        &[
            "icmp.type",
            "icmp.code",
            "icmp.mtu",
            "icmp.checksum.status",
            "ip.src",
            "ip.dst",
            "udp.srcport",
            "_ws.malformed",
        ],
        &[],
    );
    let want = |port: u16| -> Vec<String> {
        vec![
            "3".into(),
            "4".into(),
            "1364".into(),
            "1".into(),
            "10.1.1.1,198.51.100.7".into(),
            format!("198.51.100.7,{}", flow.ue),
            port.to_string(),
            String::new(),
        ]
    };
    assert_eq!(rows, [want(42001)], "tshark at inet1");
    ok(&c.down(), "cluster down");
}
