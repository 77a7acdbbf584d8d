//! Tests of `up`/`down` against the real kernel (root and iproute2 needed: without them the tests
//! fail with a clear message under `CI=true` and are skipped with a notice otherwise). Each test
//! has its own prefix and directory, runs serially, and cleans up in a Drop guard.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use sb_io::afpacket::{AfPacketConfig, AfPacketPort};
use sb_io::{PacketBatch, Port};
use sb_topology::{down, up, Description, Forwarding, TopoError, UpOptions};

static SERIAL: Mutex<()> = Mutex::new(());

fn can_run(test: &str) -> bool {
    sb_io::netns::root_or_skip(test)
}

struct Guard {
    dir: PathBuf,
    _tmp: tempfile::TempDir,
    prefix: String,
}

impl Guard {
    fn new(tag: &str) -> Guard {
        let tmp = tempfile::tempdir().unwrap();
        Guard {
            dir: tmp.path().join("state"),
            _tmp: tmp,
            prefix: format!("sbtt{}{tag}", std::process::id() % 100_000),
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.dir.join("journal").exists() {
            if let Err(e) = down(&self.dir) {
                eprintln!("cleanup failed: {e}");
            }
        }
    }
}

fn sh(args: &[&str]) -> String {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn sysctl(ns: &str, key: &str) -> String {
    sh(&["ip", "netns", "exec", ns, "sysctl", "-n", key])
        .trim()
        .to_string()
}

fn ifaces(d: &Description) -> Vec<sb_topology::Iface> {
    d.nodes
        .iter()
        .flat_map(|n| [&n.inet, &n.ran, &n.fabric, n.control.as_ref().unwrap()])
        .flat_map(|l| [l.local.clone(), l.peer.clone()])
        .collect()
}

#[test]
fn up_builds_the_planned_topology_and_down_removes_it() {
    if !can_run("up_builds_the_planned_topology_and_down_removes_it") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = Guard::new("a");
    let d = up(&UpOptions::new(&g.prefix, 3, g.dir.clone())).unwrap();
    assert_eq!(sb_topology::load(&g.dir).unwrap(), d);

    // Every interface exists where the plan says, with its MAC, address, up, IPv6 off.
    for i in ifaces(&d) {
        let out = sh(&["ip", "-n", &i.netns, "-j", "addr", "show", "dev", &i.name]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let v = &v[0];
        assert_eq!(v["address"], i.mac.to_string(), "{i:?}");
        assert!(
            v["flags"].as_array().unwrap().iter().any(|f| f == "UP"),
            "{i:?} {v}"
        );
        let addrs: Vec<String> = v["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect();
        assert!(
            addrs.iter().all(|a| !a.contains(':')),
            "IPv6 address on {i:?}: {addrs:?}"
        );
        assert_eq!(addrs, i.addr.iter().cloned().collect::<Vec<_>>(), "{i:?}");
        assert_eq!(
            sysctl(&i.netns, &format!("net.ipv6.conf.{}.disable_ipv6", i.name)),
            "1"
        );
    }
    // Kernel forwarding on in nodes only; UE pool routed to the RAN side.
    for n in &d.nodes {
        assert_eq!(sysctl(&n.netns, "net.ipv4.ip_forward"), "1");
        assert_eq!(sysctl(&n.inet_netns, "net.ipv4.ip_forward"), "0");
        let r = sh(&["ip", "-n", &n.netns, "route", "get", "100.64.9.9"]);
        assert!(
            r.contains(&format!("via 10.2.{}.2 dev ran", n.index)),
            "{r}"
        );
    }
    // The bridge: static entries for every fabric MAC, no learning or unknown-unicast flooding.
    let sw = &d.switch.netns;
    let fdb = sh(&["bridge", "-n", sw, "fdb", "show"]);
    for n in &d.nodes {
        let want = format!(
            "{} dev {} master br0 static",
            n.fabric.local.mac, n.fabric.peer.name
        );
        assert!(fdb.contains(&want), "{want} not in {fdb}");
        let l = sh(&[
            "bridge",
            "-n",
            sw,
            "-d",
            "link",
            "show",
            "dev",
            &n.fabric.peer.name,
        ]);
        assert!(l.contains("learning off") && l.contains("flood off"), "{l}");
    }
    // A frame from node 0's fabric port to node 1's fabric MAC crosses the bridge to node 1 and
    // to no one else.
    let open = |ns: &str, cfg: &AfPacketConfig| {
        sb_io::netns::in_netns(ns, || AfPacketPort::open("fabric", cfg))
            .unwrap()
            .unwrap()
    };
    let cfg = AfPacketConfig::default();
    let mut p0 = open(&d.nodes[0].netns, &cfg);
    let mut p1 = open(&d.nodes[1].netns, &cfg);
    let mut p2 = open(&d.nodes[2].netns, &cfg);
    let mut b = PacketBatch::new(8);
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&d.nodes[1].fabric.local.mac.0);
    f[6..12].copy_from_slice(&d.nodes[0].fabric.local.mac.0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]); // local experimental EtherType
    f[14..18].copy_from_slice(b"sbx1");
    for _ in 0..3 {
        b.push(&f);
    }
    assert_eq!(p0.tx_batch(&mut b), 3);
    let mut got = 0;
    let t0 = std::time::Instant::now();
    while got < 3 && t0.elapsed() < Duration::from_secs(5) {
        let _ = p1.wait_rx(Duration::from_millis(50));
        b.clear();
        p1.rx_batch(&mut b);
        got += b.iter().filter(|x| x.get(14..18) == Some(b"sbx1")).count();
    }
    assert_eq!(got, 3);
    std::thread::sleep(Duration::from_millis(100));
    b.clear();
    p2.rx_batch(&mut b);
    assert_eq!(
        b.iter().filter(|x| x.get(14..18) == Some(b"sbx1")).count(),
        0
    );
    drop((p0, p1, p2));

    // The control network: the control namespace reaches every node's control address over
    // `cpbr0` (by ARP, the bridge learns), and through it nodes reach each other; the
    // addresses are the description's.
    let cp = d.control.as_ref().unwrap();
    let br = sh(&[
        "ip", "-n", &cp.netns, "-j", "addr", "show", "dev", &cp.bridge,
    ]);
    let br: serde_json::Value = serde_json::from_str(&br).unwrap();
    assert_eq!(br[0]["address"], cp.mac.to_string());
    assert_eq!(br[0]["addr_info"][0]["local"], "10.3.0.254");
    let connect = |from: &str, to: &sb_topology::NodeDesc| -> std::net::SocketAddr {
        let ip = to.control_addr.unwrap();
        let l = sb_io::netns::in_netns(&to.netns, || std::net::TcpListener::bind((ip, 0)))
            .unwrap()
            .unwrap();
        let addr = l.local_addr().unwrap();
        let c = sb_io::netns::in_netns(from, || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        })
        .unwrap()
        .unwrap_or_else(|e| panic!("{from} -> {addr}: {e}"));
        let (_, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        peer
    };
    for n in &d.nodes {
        assert_eq!(n.pfcp_addr.unwrap().ip(), n.control_addr.unwrap());
        let port = &n.control.as_ref().unwrap().peer.name;
        let l = sh(&["bridge", "-n", &cp.netns, "link", "show", "dev", port]);
        assert!(
            l.contains("master cpbr0") && l.contains("state forwarding"),
            "{l}"
        );
        let peer = connect(&cp.netns, n);
        assert_eq!(peer.ip().to_string(), "10.3.0.254");
    }
    let peer = connect(&d.nodes[2].netns, &d.nodes[0]);
    assert_eq!(peer.ip(), d.nodes[2].control_addr.unwrap());

    let r = down(&g.dir).unwrap();
    assert_eq!(r.namespaces.len(), 11);
    for ns in d.namespaces() {
        assert!(!sb_topology::sys::netns_exists(&ns), "{ns} left");
    }
    assert!(!g.dir.exists());
}

#[test]
fn a_forwarder_that_does_not_start_rolls_up_back() {
    if !can_run("a_forwarder_that_does_not_start_rolls_up_back") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = Guard::new("b");
    let spawn = |_: &Description, _: usize| Command::new("false");
    let mut opts = UpOptions::new(&g.prefix, 2, g.dir.clone());
    opts.forwarding = Forwarding::User;
    opts.spawn = Some(&spawn);
    opts.ready_timeout = Duration::from_secs(3);
    let e = up(&opts).unwrap_err();
    // Which node fails is a race: node 0's `false` may still be running when `up` checks it
    // and then node 1's has exited before its own check. Either way nothing may be left.
    assert!(matches!(e, TopoError::Forwarder { node: 0 | 1, .. }), "{e}");
    let left: Vec<String> = sb_topology::sys::netns_list()
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(&format!("{}-", g.prefix)))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!g.dir.exists());
}

#[test]
fn a_pre_existing_empty_dir_is_kept_and_foreign_files_refused() {
    if !can_run("a_pre_existing_empty_dir_is_kept_and_foreign_files_refused") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let g = Guard::new("c");
    std::fs::create_dir_all(&g.dir).unwrap();
    std::fs::write(g.dir.join("mine.txt"), "x").unwrap();
    let opts = UpOptions::new(&g.prefix, 1, g.dir.clone());
    assert!(matches!(up(&opts), Err(TopoError::DirNotEmpty(_))));
    std::fs::remove_file(g.dir.join("mine.txt")).unwrap();
    up(&opts).unwrap();
    down(&g.dir).unwrap();
    assert!(g.dir.exists(), "a directory up did not create stays");
    assert_eq!(std::fs::read_dir(&g.dir).unwrap().count(), 0);
}

/// Every veth end has its offloads off and the planned MTU; a jumbo frame crosses the fabric;
/// a kernel TCP connection over `inet` reaches a packet socket as MTU-sized, checksummed frames
/// (and, as a control, does not once the offloads are back on).
#[test]
fn links_have_offloads_off_and_planned_mtus() {
    use sb_io::netns::{in_netns, mtu, offloads, set_offloads, Offloads};
    use sb_topology::plan::{EDGE_MTU, FABRIC_MTU, RAN_MTU};
    if !can_run("links_have_offloads_off_and_planned_mtus") {
        return;
    }
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut g = Guard::new("o");
    g.prefix = format!("tio{}o", std::process::id() % 100_000);
    let mut opts = UpOptions::new(&g.prefix, 2, g.dir.clone());
    opts.forwarding = Forwarding::None;
    let d = up(&opts).unwrap();

    let has_ethtool = Command::new("ethtool").arg("--version").output().is_ok();
    for i in ifaces(&d) {
        let got = in_netns(&i.netns, || offloads(&i.name)).unwrap().unwrap();
        assert_eq!(got, Offloads::OFF, "{i:?}");
        assert_eq!(in_netns(&i.netns, || mtu(&i.name)).unwrap().unwrap(), i.mtu);
        let want = if i.name == "fabric" || i.netns == d.switch.netns {
            FABRIC_MTU
        } else if i.name == "ran" || i.netns.contains("-ran") {
            RAN_MTU
        } else {
            EDGE_MTU
        };
        assert_eq!(i.mtu, want, "{i:?}");
        if has_ethtool {
            let k = sh(&["ip", "netns", "exec", &i.netns, "ethtool", "-k", &i.name]);
            for f in [
                "tx-checksumming: off",
                "tcp-segmentation-offload: off",
                "generic-segmentation-offload: off",
                "generic-receive-offload: off",
            ] {
                assert!(k.contains(f), "{i:?}: no {f:?} in {k}");
            }
        }
    }
    let br = in_netns(&d.switch.netns, || mtu(&d.switch.bridge));
    assert_eq!(br.unwrap().unwrap(), FABRIC_MTU);
    assert_eq!(d.switch.mtu, FABRIC_MTU);

    // A frame 100 bytes over the edge MTU (a full packet plus a tunnel header) crosses the
    // fabric from node 0 to node 1.
    let cfg = AfPacketConfig::default();
    let open = |ns: &str, dev: &str| {
        in_netns(ns, || AfPacketPort::open(dev, &cfg))
            .unwrap()
            .unwrap()
    };
    let mut p0 = open(&d.nodes[0].netns, "fabric");
    let mut p1 = open(&d.nodes[1].netns, "fabric");
    let mut f = vec![0x5au8; 1514 + 100];
    f[0..6].copy_from_slice(&d.nodes[1].fabric.local.mac.0);
    f[6..12].copy_from_slice(&d.nodes[0].fabric.local.mac.0);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    let mut b = PacketBatch::new(8);
    b.push(&f);
    assert_eq!(p0.tx_batch(&mut b), 1);
    let t0 = std::time::Instant::now();
    let mut seen = false;
    while !seen && t0.elapsed() < Duration::from_secs(5) {
        let _ = p1.wait_rx(Duration::from_millis(50));
        b.clear();
        p1.rx_batch(&mut b);
        seen = b.iter().any(|x| x == f.as_slice());
    }
    assert!(seen, "a {}-byte frame did not cross the fabric", f.len());
    drop((p0, p1));

    // TCP from the Internet side to the node, 200 KB, watched on the node's `inet`.
    let n = &d.nodes[0];
    let watch = |label: &str| -> (Vec<usize>, usize, sb_io::PortStats) {
        let mut port = open(&n.netns, "inet");
        let node_ip = n.inet.local.ip().unwrap();
        let listener = in_netns(&n.netns, || std::net::TcpListener::bind((node_ip, 0)))
            .unwrap()
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut sink = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut sink).unwrap();
            sink.len()
        });
        let mut c = in_netns(&n.inet_netns, || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        })
        .unwrap()
        .unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 31) as u8).collect();
        std::io::Write::write_all(&mut c, &data).unwrap();
        drop(c);
        assert_eq!(server.join().unwrap(), data.len(), "{label}");
        // Everything is in the ring by now (4 MB of blocks); drain it.
        std::thread::sleep(Duration::from_millis(20));
        let opts = sb_wire::ParseOptions {
            verify_l4_checksum: true,
            ..sb_wire::ParseOptions::default()
        };
        let (mut lens, mut payload) = (Vec::new(), 0usize);
        let mut rx = PacketBatch::with_buf_size(64, 65535);
        while port.rx_batch(&mut rx) > 0 {
            for fr in rx.iter() {
                let Ok(p) = sb_wire::parse_frame_with(fr, &sb_wire::ParseOptions::default()) else {
                    continue;
                };
                if p.five_tuple().is_some_and(|t| t.protocol == 6) {
                    lens.push(fr.len());
                    assert!(
                        sb_wire::parse_frame_with(fr, &opts).is_ok(),
                        "{label}: TCP segment with a bad checksum"
                    );
                    payload += p.l4_payload().map_or(0, |x| x.len());
                }
            }
            rx.clear();
        }
        (lens, payload, port.stats())
    };
    let (lens, payload, st) = watch("offloads off");
    assert!(payload >= 200_000, "saw {payload} TCP payload bytes");
    assert!(
        lens.iter().all(|&l| l <= 1514),
        "frames over 1514 bytes: {:?}",
        lens.iter().filter(|&&l| l > 1514).collect::<Vec<_>>()
    );
    assert_eq!(
        (st.rx_csum_completed, st.rx_truncated, st.rx_dropped),
        (0, 0, 0),
        "{st:?}"
    );

    // Control: with the offloads back on at the sender, the same transfer shows super-frames or
    // partial checksums, so the checks above can fail.
    let on = Offloads {
        tx_checksum: true,
        tso: true,
        gso: true,
        gro: true,
    };
    in_netns(&n.inet_netns, || set_offloads("eth0", &on))
        .unwrap()
        .unwrap();
    let (lens, _, st) = watch("offloads on");
    assert!(
        lens.iter().any(|&l| l > 1514) || st.rx_csum_completed > 0,
        "offloads on changed nothing: {st:?}"
    );

    down(&g.dir).unwrap();
}
