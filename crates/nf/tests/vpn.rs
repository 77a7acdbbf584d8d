//! The VPN gateway: VXLAN to VXLAN both ways, outer addresses and VNI rewritten in place, the
//! inner frame untouched, checksums recomputed from scratch (outer UDP checksum 0 and not).

mod common;
use common::*;
use proptest::prelude::*;
use sb_engine::Drop;
use sb_nf::vpn::{decode_value, parse_vxlan, tunnel_key, Tunnel, Vpn, VpnConfig, VxlanError};
use sb_nf::Update;
use std::collections::HashMap;

const CFG: VpnConfig = VpnConfig {
    external: std::net::Ipv4Addr::new(198, 51, 100, 2),
    internal: std::net::Ipv4Addr::new(10, 255, 0, 1),
};

fn tunnel(i: u8) -> Tunnel {
    Tunnel {
        customer_vni: 5000 + u32::from(i),
        customer_peer: ip(203, 0, 113, 1 + i),
        vm: ip(172, 16, 0, 10 + i),
        server: ip(10, 1, 0, 1 + i % 3),
        internal_vni: 0x00ab_0000 + u32::from(i),
        node: u16::from(i % 2),
    }
}

/// The inner frame: a customer host to the VM (or back).
fn inner(src: std::net::Ipv4Addr, dst: std::net::Ipv4Addr) -> Vec<u8> {
    udp(src, 1234, dst, 80, b"inner payload", true)
}

#[test]
fn both_ways() {
    for csum in [false, true] {
        let t = tunnel(1);
        let mut g = Vpn::new(CFG);
        g.add_tunnel(&t);
        let Update::Insert(k, v) = t.update() else {
            unreachable!()
        };
        let host = ip(192, 168, 1, 20);
        let inn = inner(host, t.vm);
        let f = vxlan(
            t.customer_peer,
            CFG.external,
            41000,
            t.customer_vni,
            &inn,
            csum,
        );
        assert_checksums(&f);
        let (key, r) = outside(&mut g, &f, &v);
        assert_eq!(key, k.to_vec());
        let o = r.unwrap();
        assert_checksums(&o);
        let x = parse_vxlan(&o).unwrap();
        assert_eq!(
            (x.outer.src, x.outer.dst, x.vni, x.outer.src_port),
            (CFG.internal, t.server, t.internal_vni, 41000)
        );
        assert_eq!(
            (&o[42..46], &o[50..]),
            (&f[42..46], &f[50..]),
            "the VXLAN flags, the inner frame untouched"
        );
        assert_eq!(
            &o[46..50],
            &[
                (t.internal_vni >> 16) as u8,
                (t.internal_vni >> 8) as u8,
                t.internal_vni as u8,
                0x5a
            ],
            "reserved byte kept"
        );
        assert_eq!(o[40..42] == [0, 0], !csum);
        // The VM answers through its server.
        let back = vxlan(
            t.server,
            CFG.internal,
            42000,
            t.internal_vni,
            &inner(t.vm, host),
            csum,
        );
        let b = inside(&mut g, &back).unwrap();
        assert_checksums(&b);
        let x = parse_vxlan(&b).unwrap();
        assert_eq!(
            (x.outer.src, x.outer.dst, x.vni, x.inner_src),
            (CFG.external, t.customer_peer, t.customer_vni, t.vm)
        );
        let s = g.stats();
        assert_eq!((s.to_vm, s.to_customer), (1, 1));
    }
}

#[test]
fn unknown_and_not_vxlan() {
    let t = tunnel(2);
    let mut g = Vpn::new(CFG);
    g.add_tunnel(&t);
    // A VM the table does not know, and a VNI it does not know.
    let f = vxlan(
        t.server,
        CFG.internal,
        1,
        t.internal_vni,
        &inner(ip(172, 16, 9, 9), ip(1, 1, 1, 1)),
        false,
    );
    assert_eq!(inside(&mut g, &f), Err(Drop::UnknownFlow));
    let f = vxlan(
        t.server,
        CFG.internal,
        1,
        7,
        &inner(t.vm, ip(1, 1, 1, 1)),
        false,
    );
    assert_eq!(inside(&mut g, &f), Err(Drop::UnknownFlow));
    assert_eq!(g.stats().unknown_tunnel, 2);
    // Plain UDP, a clear I flag, a truncated inner frame.
    let plain = udp(t.server, 1, CFG.internal, 53, b"x", true);
    assert_eq!(parse_vxlan(&plain), Err(VxlanError::NotVxlan));
    let mut noi = vxlan(t.server, CFG.internal, 1, 1, &inner(t.vm, t.vm), false);
    noi[42] = 0;
    assert_eq!(parse_vxlan(&noi), Err(VxlanError::NoVni));
    let short = vxlan(t.server, CFG.internal, 1, 1, &[0u8; 10], false);
    assert_eq!(parse_vxlan(&short), Err(VxlanError::Truncated));
    assert_eq!(inside(&mut g, &short), Err(Drop::UnknownFlow));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Many tunnels: each VM's packets go to its server with its internal VNI and back to its
    /// customer with the customer's VNI; keys of distinct tunnels are distinct (oracle: the
    /// tunnel list in a HashMap by key).
    #[test]
    fn tunnels_translate_both_ways(ids in prop::collection::btree_set(0u8..200, 1..20), pick in prop::collection::vec(any::<prop::sample::Index>(), 1..20), csum in any::<bool>()) {
        let ts: Vec<Tunnel> = ids.iter().map(|&i| tunnel(i)).collect();
        let mut g = Vpn::new(CFG);
        let mut fib = HashMap::new();
        for t in &ts {
            g.add_tunnel(t);
            prop_assert!(fib.insert(t.key(), t.value()).is_none());
        }
        for p in pick {
            let t = &ts[p.index(ts.len())];
            let f = vxlan(t.customer_peer, CFG.external, 9, t.customer_vni, &inner(ip(192, 168, 0, 1), t.vm), csum);
            let key = tunnel_key(t.customer_vni, t.vm);
            let v = fib[&key];
            prop_assert_eq!(decode_value(&v), Some((t.server, t.internal_vni, t.node)));
            let (k, r) = outside(&mut g, &f, &v);
            prop_assert_eq!(k, key.to_vec());
            let o = r.unwrap();
            assert_checksums(&o);
            let x = parse_vxlan(&o).unwrap();
            prop_assert_eq!((x.outer.dst, x.vni), (t.server, t.internal_vni));
            let back = vxlan(t.server, CFG.internal, 9, t.internal_vni, &inner(t.vm, ip(192, 168, 0, 1)), csum);
            let b = inside(&mut g, &back).unwrap();
            assert_checksums(&b);
            let x = parse_vxlan(&b).unwrap();
            prop_assert_eq!((x.outer.dst, x.vni), (t.customer_peer, t.customer_vni));
        }
    }
}
