//! The load balancer: the destination rewrite and the return path with checksums recomputed
//! from scratch; Maglev's spread and its small disruption; a property test of the flow table
//! against an oracle (established flows keep their backend across backend changes).

mod common;
use common::*;
use proptest::prelude::*;
use sb_engine::Drop;
use sb_nf::flow::{parse, FlowKey};
use sb_nf::lb::{Backend, FlowTable, Lb, Maglev, MaglevError, Vip};
use sb_nf::Update;
use std::collections::HashMap;

const VIP: Vip = Vip {
    protocol: TCP,
    addr: std::net::Ipv4Addr::new(192, 0, 2, 80),
    port: 80,
};

fn backends(n: u8) -> Vec<Backend> {
    (0..n)
        .map(|i| Backend {
            addr: ip(10, 1, 0, 1 + i),
            port: 8080,
            node: u16::from(i % 3),
        })
        .collect()
}

#[test]
fn rewrite_and_return() {
    let bs = backends(4);
    let mut lb = Lb::new();
    lb.add_service(VIP, &bs);
    let mut ft = FlowTable::new(&bs, 251).unwrap();
    let c = ip(203, 0, 113, 7);
    let f = tcp(c, 51000, VIP.addr, 80, SYN, b"GET /");
    let key = parse(&f).unwrap().key();
    let b = ft.flow(&key).unwrap();
    assert_eq!(ft.take_updates(), vec![Update::Insert(key, b.value())]);
    let (_, r) = outside(&mut lb, &f, &b.value());
    let o = r.unwrap();
    assert_checksums(&o);
    let p = parse(&o).unwrap();
    assert_eq!(
        (p.src, p.src_port, p.dst, p.dst_port),
        (c, 51000, b.addr, b.port)
    );
    // The backend's answer leaves as from the VIP.
    let ans = tcp(b.addr, b.port, c, 51000, SYN | ACK, b"");
    let back = inside(&mut lb, &ans).unwrap();
    assert_checksums(&back);
    let p = parse(&back).unwrap();
    assert_eq!(
        (p.src, p.src_port, p.dst, p.dst_port),
        (VIP.addr, 80, c, 51000)
    );
    // Not from a backend: dropped and counted.
    assert_eq!(
        inside(&mut lb, &tcp(ip(10, 9, 9, 9), 8080, c, 1, ACK, b"")),
        Err(Drop::UnknownFlow)
    );
    let s = lb.stats();
    assert_eq!((s.inbound, s.returned, s.unknown_backend), (1, 1, 1));
    // UDP with a zero checksum keeps it zero.
    let mut lb = Lb::new();
    let uvip = Vip {
        protocol: UDP,
        ..VIP
    };
    lb.add_service(uvip, &bs);
    let (_, r) = outside(
        &mut lb,
        &udp(c, 5, VIP.addr, 80, b"x", false),
        &bs[1].value(),
    );
    let o = r.unwrap();
    assert_eq!(o[40..42], [0, 0]);
    assert_eq!(parse(&o).unwrap().dst, bs[1].addr);
}

#[test]
fn maglev_spreads_evenly_and_moves_little() {
    assert_eq!(
        Maglev::new(&backends(3), 100),
        Err(MaglevError::NotPrime(100))
    );
    let m = Maglev::new(&backends(5), 65537).unwrap();
    let shares = m.shares();
    let (lo, hi) = (*shares.iter().min().unwrap(), *shares.iter().max().unwrap());
    assert_eq!(shares.iter().sum::<usize>(), 65537);
    assert!(
        hi - lo <= 65537 / 5 / 100,
        "slots per backend within 1%: {shares:?}"
    );
    // Adding a sixth backend: new flows move only to it, about 1/6 of them, and few others.
    let m6 = Maglev::new(&backends(6), 65537).unwrap();
    let keys: Vec<FlowKey> = (0..20000u32)
        .map(|i| {
            FlowKey::new(
                6,
                ip(203, 0, (i >> 8) as u8, i as u8),
                1024 + (i % 7) as u16,
                VIP.addr,
                80,
            )
        })
        .collect();
    let moved = keys.iter().filter(|k| m.pick(k) != m6.pick(k)).count();
    let to_new = keys
        .iter()
        .filter(|k| m.pick(k) != m6.pick(k) && m6.pick(k) == Some(backends(6)[5]))
        .count();
    let frac = moved as f64 / keys.len() as f64;
    assert!((0.12..0.25).contains(&frac), "moved {frac}");
    assert!(
        to_new as f64 >= 0.85 * moved as f64,
        "most moves go to the new backend: {to_new}/{moved}"
    );
}

#[test]
fn established_flows_stay_when_backends_are_added() {
    let mut ft = FlowTable::new(&backends(3), 251).unwrap();
    let keys: Vec<FlowKey> = (0..500u16)
        .map(|i| FlowKey::new(6, ip(203, 0, 113, (i % 200) as u8), 1000 + i, VIP.addr, 80))
        .collect();
    let before: Vec<Backend> = keys.iter().map(|k| ft.flow(k).unwrap()).collect();
    ft.take_updates();
    ft.set_backends(&backends(6)).unwrap();
    assert!(
        ft.take_updates().is_empty(),
        "adding backends changes no entry"
    );
    let after: Vec<Backend> = keys.iter().map(|k| ft.flow(k).unwrap()).collect();
    assert_eq!(before, after);
    // A new flow may go to a new backend.
    let new: Vec<Backend> = (0..300u16)
        .map(|i| {
            ft.flow(&FlowKey::new(17, ip(198, 18, 0, 1), i, VIP.addr, 80))
                .unwrap()
        })
        .collect();
    assert!(new.iter().any(|b| backends(6)[3..].contains(b)));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// The flow table against an oracle: a flow's backend never changes while that backend is
    /// in the set; every backend handed out is in the set; the updates keep a copy of the
    /// table (the cluster's FIB) equal to the oracle.
    #[test]
    fn flow_table_matches_oracle(ops in prop::collection::vec((0u16..60, prop::option::weighted(0.1, prop::collection::btree_set(0u8..8, 1..6))), 1..150)) {
        let all = backends(8);
        let mut set: Vec<Backend> = all[..3].to_vec();
        let mut ft = FlowTable::new(&set, 13).unwrap();
        let mut oracle: HashMap<FlowKey, Backend> = HashMap::new();
        let mut fib: HashMap<FlowKey, [u8; 8]> = HashMap::new();
        for (flow, change) in ops {
            if let Some(idx) = change {
                set = idx.iter().map(|&i| all[usize::from(i)]).collect();
                ft.set_backends(&set).unwrap();
                oracle.retain(|_, b| set.contains(b));
            } else {
                let k = FlowKey::new(6, ip(203, 0, 113, (flow % 7) as u8), 1000 + flow, VIP.addr, 80);
                let b = ft.flow(&k).unwrap();
                prop_assert!(set.contains(&b));
                if let Some(o) = oracle.get(&k) {
                    prop_assert_eq!(*o, b);
                }
                oracle.insert(k, b);
            }
            for u in ft.take_updates() {
                match u {
                    Update::Insert(k, v) => { fib.insert(k, v); }
                    Update::Remove(k) => { prop_assert!(fib.remove(&k).is_some()); }
                }
            }
            prop_assert_eq!(fib.len(), oracle.len());
            for (k, b) in &oracle {
                prop_assert_eq!(fib.get(k).and_then(|v| Backend::from_value(v)), Some(*b));
            }
        }
    }
}
