//! Each NF on the engine, on each architecture (ScaleBricks, full duplication, hash
//! partitioning), two nodes joined by an ideal fabric: frames from outside enter node 1's
//! `inet`, are looked up where the architecture keeps the entry, translated, and leave the
//! `ran` port of the node the value names, with right checksums; a frame of no entry is
//! dropped and counted (`unknown_flow`, or `fib_miss_after_gpt` under ScaleBricks).

mod common;
use common::*;
use sb_engine::{App, Arch, CuckooFib, Drop, Engine, Gpt, NodeConfig, Outputs, PortAddr, PortId};
use sb_io::PacketBatch;
use sb_nf::flow::{parse, FlowKey};
use sb_nf::{firewall, lb, nat, vpn, Update};

const SEED: u64 = 11;
const NODES: u16 = 2;

fn mac(port: u8, node: u16) -> [u8; 6] {
    [2, 0, 0, port, node as u8, 0]
}

/// Two engines of `arch` holding `entries` as the architecture places them.
fn cluster<A: App>(
    arch: Arch,
    entries: &[(Vec<u8>, Vec<u8>)],
    app: impl Fn() -> A,
) -> Vec<Engine<A>> {
    let a = app();
    let (kb, vb) = (a.key_bytes(), a.value_bytes());
    let egress: Vec<u16> = entries.iter().map(|(_, v)| a.egress_node(v)).collect();
    let gpt = (arch == Arch::ScaleBricks).then(|| {
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| &k[..]).collect();
        let opts = sb_setsep::BuildOptions {
            value_bits: 1,
            seed: SEED,
            ..Default::default()
        };
        Gpt::from(sb_setsep::SetSep::build(&keys, &egress, &opts).unwrap())
    });
    (0..NODES)
        .map(|n| {
            let mine: Vec<&(Vec<u8>, Vec<u8>)> = entries
                .iter()
                .zip(&egress)
                .filter(|((k, _), e)| {
                    arch.fib_holder(sb_common::hash128(k, SEED), **e, NODES)
                        .is_none_or(|h| h == n)
                })
                .map(|(e, _)| e)
                .collect();
            let (_w, fib) =
                CuckooFib::build(kb, vb, SEED, mine.iter().map(|(k, v)| (&k[..], &v[..]))).unwrap();
            let port = |p| PortAddr {
                mac: mac(p, n),
                peer_mac: mac(p, 99),
                ip: None,
            };
            let cfg = NodeConfig {
                arch,
                node: n,
                fabric_macs: (0..NODES).map(|m| mac(9, m)).collect(),
                inet: port(1),
                ran: port(2),
                seed: SEED,
            };
            Engine::new(cfg, gpt.clone(), Box::new(fib), app(), 32).unwrap()
        })
        .collect()
}

/// Injects `frames` on node 1's `inet`, carries fabric frames to the other node until none is
/// left; returns what left each node's `ran`.
fn run<A: App>(c: &mut [Engine<A>], frames: &[Vec<u8>]) -> Vec<Vec<Vec<u8>>> {
    let mut ran = vec![Vec::new(); c.len()];
    let mut queue: Vec<(usize, PortId, Vec<u8>)> = frames
        .iter()
        .map(|f| (1, PortId::Inet, f.clone()))
        .collect();
    while !queue.is_empty() {
        let mut next = Vec::new();
        for (n, port, f) in queue.drain(..) {
            let mut rx = PacketBatch::new(32);
            assert!(rx.push(&f));
            let mut out = Outputs::new(32, rx.buf_size());
            c[n].process(port, &mut rx, &mut out);
            ran[n].extend(out.ran.iter().map(|f| f.to_vec()));
            assert!(out.inet.is_empty());
            for f in out.fabric.iter() {
                let to = (0..c.len())
                    .find(|&m| f[..6] == mac(9, m as u16))
                    .expect("a node's fabric MAC");
                next.push((to, PortId::Fabric, f.to_vec()));
            }
        }
        queue = next;
    }
    ran
}

fn unknown_drops<A: App>(c: &[Engine<A>]) -> u64 {
    c.iter()
        .map(|e| {
            let r = e.counters();
            [Drop::UnknownFlow, Drop::FibMissAfterGpt]
                .iter()
                .map(|d| {
                    r.drops
                        .iter()
                        .map(|p| p[Drop::OTHERS.iter().position(|x| x == d).unwrap()])
                        .sum::<u64>()
                })
                .sum::<u64>()
        })
        .sum()
}

fn entries<K: AsRef<[u8]>, V: AsRef<[u8]>>(u: Vec<Update<K, V>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    u.into_iter()
        .filter_map(|u| match u {
            Update::Insert(k, v) => Some((k.as_ref().to_vec(), v.as_ref().to_vec())),
            Update::Remove(_) => None,
        })
        .collect()
}

impl AsRef<[u8]> for W {
    fn as_ref(&self) -> &[u8] {
        &self.0 .0
    }
}
struct W(FlowKey);

fn keyed<V>(u: Vec<Update<FlowKey, V>>) -> Vec<Update<W, V>> {
    u.into_iter()
        .map(|u| match u {
            Update::Insert(k, v) => Update::Insert(W(k), v),
            Update::Remove(k) => Update::Remove(W(k)),
        })
        .collect()
}

#[test]
fn nat_on_every_architecture() {
    let public = ip(198, 51, 100, 1);
    // The mappings, made by each node's NAT from outbound packets (hosts behind node 0 and 1).
    let mut ups = Vec::new();
    for n in 0..NODES {
        let mut t = nat::Nat::new(nat::NatConfig {
            public,
            ports: 20000 + n * 1000..=20999 + n * 1000,
            node: n,
        })
        .unwrap();
        for h in 1..=4 {
            inside(
                &mut t,
                &udp(
                    ip(10, n as u8, 0, h),
                    5000,
                    ip(203, 0, 113, 9),
                    53,
                    b"q",
                    true,
                ),
            )
            .unwrap();
        }
        ups.extend(keyed(t.take_updates()));
    }
    let es = entries(ups);
    for arch in Arch::ALL {
        let mut c = cluster(arch, &es, || {
            nat::Nat::new(nat::NatConfig {
                public,
                ports: 1..=1,
                node: 0,
            })
            .unwrap()
        });
        let frames: Vec<Vec<u8>> = es
            .iter()
            .map(|(k, _)| {
                let k = FlowKey::from_bytes(k).unwrap();
                udp(
                    k.src(),
                    k.src_port(),
                    k.dst(),
                    k.dst_port(),
                    b"answer",
                    true,
                )
            })
            .chain([udp(ip(203, 0, 113, 9), 53, public, 29999, b"nobody", true)])
            .collect();
        let ran = run(&mut c, &frames);
        for (n, out) in ran.iter().enumerate() {
            assert_eq!(out.len(), 4, "{arch}: node {n}");
            for f in out {
                assert_checksums(f);
                let p = parse(f).unwrap();
                assert_eq!((p.dst.octets()[1], p.dst_port), (n as u8, 5000), "{arch}");
            }
        }
        assert_eq!(unknown_drops(&c), 1, "{arch}");
    }
}

#[test]
fn firewall_on_every_architecture() {
    let mut ups = Vec::new();
    for n in 0..NODES {
        let mut f = firewall::Firewall::new(n);
        for h in 1..=3 {
            inside(
                &mut f,
                &tcp(
                    ip(10, n as u8, 0, h),
                    40000,
                    ip(203, 0, 113, 9),
                    443,
                    SYN,
                    b"",
                ),
            )
            .unwrap();
        }
        ups.extend(keyed(f.take_updates()));
    }
    let es = entries(ups);
    for arch in Arch::ALL {
        let mut c = cluster(arch, &es, || firewall::Firewall::new(0));
        let answers: Vec<Vec<u8>> = (0..NODES)
            .flat_map(|n| {
                (1..=3).map(move |h| {
                    tcp(
                        ip(203, 0, 113, 9),
                        443,
                        ip(10, n as u8, 0, h),
                        40000,
                        SYN | ACK,
                        b"",
                    )
                })
            })
            .collect();
        let mut frames = answers.clone();
        frames.push(tcp(
            ip(203, 0, 113, 9),
            443,
            ip(10, 0, 0, 1),
            40001,
            SYN,
            b"",
        )); // unknown inbound
        let ran = run(&mut c, &frames);
        for (n, out) in ran.iter().enumerate() {
            assert_eq!(out.len(), 3, "{arch}: node {n}");
            for f in out {
                assert!(
                    answers.iter().any(|a| a[14..] == f[14..]),
                    "passed unchanged"
                );
            }
        }
        assert_eq!(unknown_drops(&c), 1, "{arch}");
    }
}

#[test]
fn lb_on_every_architecture() {
    let vip = lb::Vip {
        protocol: TCP,
        addr: ip(192, 0, 2, 80),
        port: 80,
    };
    let bs: Vec<lb::Backend> = (0..4)
        .map(|i| lb::Backend {
            addr: ip(10, 1, 0, 1 + i),
            port: 8080,
            node: u16::from(i % 2),
        })
        .collect();
    let mut ft = lb::FlowTable::new(&bs, 251).unwrap();
    let flows: Vec<Vec<u8>> = (0..20u16)
        .map(|i| {
            tcp(
                ip(203, 0, 113, 1 + (i % 5) as u8),
                30000 + i,
                vip.addr,
                80,
                SYN,
                b"",
            )
        })
        .collect();
    for f in &flows {
        ft.flow(&parse(f).unwrap().key()).unwrap();
    }
    let es = entries(keyed(ft.take_updates()));
    for arch in Arch::ALL {
        let mut c = cluster(arch, &es, || {
            let mut l = lb::Lb::new();
            l.add_service(vip, &bs);
            l
        });
        let ran = run(&mut c, &flows);
        assert_eq!(ran.iter().map(Vec::len).sum::<usize>(), 20, "{arch}");
        for (n, out) in ran.iter().enumerate() {
            for f in out {
                assert_checksums(f);
                let p = parse(f).unwrap();
                let key = FlowKey::new(TCP, p.src, p.src_port, vip.addr, 80);
                let b = ft.get(&key).unwrap();
                assert_eq!(
                    (p.dst, p.dst_port, b.node),
                    (b.addr, b.port, n as u16),
                    "{arch}"
                );
            }
        }
        // A new flow: no entry yet (the control plane has not inserted its pick).
        run(
            &mut c,
            &[tcp(ip(203, 0, 113, 99), 1, vip.addr, 80, SYN, b"")],
        );
        assert_eq!(unknown_drops(&c), 1, "{arch}");
    }
}

#[test]
fn vpn_on_every_architecture() {
    let cfg = vpn::VpnConfig {
        external: ip(198, 51, 100, 2),
        internal: ip(10, 255, 0, 1),
    };
    let ts: Vec<vpn::Tunnel> = (0..8u8)
        .map(|i| vpn::Tunnel {
            customer_vni: 100 + u32::from(i / 2),
            customer_peer: ip(203, 0, 113, 1 + i / 2),
            vm: ip(172, 16, 0, 1 + i),
            server: ip(10, 1, 0, 1 + i % 3),
            internal_vni: 7000 + u32::from(i),
            node: u16::from(i % 2),
        })
        .collect();
    let es = entries(ts.iter().map(vpn::Tunnel::update).collect());
    for arch in Arch::ALL {
        let mut c = cluster(arch, &es, || vpn::Vpn::new(cfg));
        let mut frames: Vec<Vec<u8>> = ts
            .iter()
            .map(|t| {
                vxlan(
                    t.customer_peer,
                    cfg.external,
                    777,
                    t.customer_vni,
                    &udp(ip(192, 168, 0, 1), 1, t.vm, 2, b"x", true),
                    false,
                )
            })
            .collect();
        frames.push(vxlan(
            ip(203, 0, 113, 1),
            cfg.external,
            777,
            100,
            &udp(ip(192, 168, 0, 1), 1, ip(172, 16, 9, 9), 2, b"x", false),
            false,
        ));
        let ran = run(&mut c, &frames);
        for (n, out) in ran.iter().enumerate() {
            assert_eq!(out.len(), 4, "{arch}: node {n}");
            for f in out {
                assert_checksums(f);
                let x = vpn::parse_vxlan(f).unwrap();
                let t = ts.iter().find(|t| t.vm == x.inner_dst).unwrap();
                assert_eq!(
                    (x.outer.src, x.outer.dst, x.vni, t.node),
                    (cfg.internal, t.server, t.internal_vni, n as u16),
                    "{arch}"
                );
            }
        }
        assert_eq!(unknown_drops(&c), 1, "{arch}");
    }
}
