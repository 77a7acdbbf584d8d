//! The NAT: each translation (TCP, UDP with and without checksum, ICMP echo) checked field by
//! field and by recomputing the checksums from scratch; running out of ports; a property test
//! of the mapping table and the translations against a HashMap oracle.

mod common;
use common::*;
use proptest::prelude::*;
use sb_engine::Drop;
use sb_nf::flow::{parse, FlowKey};
use sb_nf::nat::{Nat, NatConfig, Translation};
use sb_nf::Update;
use std::collections::HashMap;
use std::net::Ipv4Addr;

const PUBLIC: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);

fn nat(ports: std::ops::RangeInclusive<u16>) -> Nat {
    Nat::new(NatConfig {
        public: PUBLIC,
        ports,
        node: 3,
    })
    .unwrap()
}

/// Outbound then the answer inbound, for one frame pair; returns (outbound out, inbound out).
fn round_trip(
    n: &mut Nat,
    out_frame: &[u8],
    answer: impl Fn(u16) -> Vec<u8>,
) -> (Vec<u8>, Vec<u8>) {
    assert_checksums(out_frame);
    let o = inside(n, out_frame).expect("outbound translated");
    assert_checksums(&o);
    let p = parse(&o).unwrap();
    assert_eq!(p.src, PUBLIC);
    let ups = n.take_updates();
    assert_eq!(ups.len(), 1);
    let Update::Insert(k, v) = ups[0] else {
        panic!("an insert")
    };
    assert_eq!(
        k,
        p.key().reversed(),
        "the entry is keyed by the answer's 5-tuple"
    );
    assert_eq!(Translation::from_value(&v).unwrap().node, 3);
    let a = answer(p.src_port);
    assert_checksums(&a);
    let (key, r) = outside(n, &a, &v);
    assert_eq!(key, k.0.to_vec());
    let i = r.expect("inbound translated");
    assert_checksums(&i);
    (o, i)
}

#[test]
fn tcp_both_ways() {
    let mut n = nat(40000..=40009);
    let (h, s) = (ip(10, 0, 0, 5), ip(203, 0, 113, 9));
    let (o, i) = round_trip(&mut n, &tcp(h, 33333, s, 443, SYN, b""), |pp| {
        tcp(s, 443, PUBLIC, pp, SYN | ACK, b"hi")
    });
    let (po, pi) = (parse(&o).unwrap(), parse(&i).unwrap());
    assert_eq!(
        (po.src, po.src_port, po.dst, po.dst_port),
        (PUBLIC, 40000, s, 443)
    );
    assert_eq!(
        (pi.src, pi.src_port, pi.dst, pi.dst_port),
        (s, 443, h, 33333)
    );
    // Everything but addresses, ports and checksums is untouched.
    let orig = tcp(h, 33333, s, 443, SYN, b"");
    let mask = |f: &[u8]| {
        let mut f = f.to_vec();
        for r in [24..26, 26..30, 34..36, 50..52] {
            f[r].fill(0);
        }
        f
    };
    assert_eq!(mask(&o), mask(&orig));
    let s2 = n.stats();
    assert_eq!((s2.outbound, s2.inbound, s2.new_mappings), (1, 1, 1));
}

#[test]
fn udp_with_and_without_checksum() {
    for with in [true, false] {
        let mut n = nat(40000..=40009);
        let (h, s) = (ip(10, 0, 0, 6), ip(203, 0, 113, 53));
        let (o, i) = round_trip(&mut n, &udp(h, 5353, s, 53, b"query", with), |pp| {
            udp(s, 53, PUBLIC, pp, b"answer!", with)
        });
        // A UDP checksum of 0 (none) stays 0.
        assert_eq!(o[40..42] == [0, 0], !with);
        assert_eq!(i[40..42] == [0, 0], !with);
        let pi = parse(&i).unwrap();
        assert_eq!((pi.dst, pi.dst_port), (h, 5353));
    }
}

#[test]
fn icmp_echo_identifier() {
    let mut n = nat(40000..=40009);
    let (h, s) = (ip(10, 0, 0, 7), ip(8, 8, 8, 8));
    let (o, i) = round_trip(&mut n, &echo(h, s, true, 77, 1), |pid| {
        echo(s, PUBLIC, false, pid, 1)
    });
    assert_eq!(
        o[38..40],
        40000u16.to_be_bytes(),
        "the request's identifier is the public one"
    );
    assert_eq!(
        i[38..40],
        77u16.to_be_bytes(),
        "the reply's is the host's again"
    );
    assert_eq!(parse(&i).unwrap().dst, h);
}

#[test]
fn one_mapping_per_private_endpoint() {
    let mut n = nat(40000..=40009);
    let h = ip(10, 0, 0, 5);
    for s in 1..=3 {
        let o = inside(&mut n, &udp(h, 1000, ip(203, 0, 113, s), 53, b"x", true)).unwrap();
        assert_eq!(
            parse(&o).unwrap().src_port,
            40000,
            "the same public port for every remote"
        );
    }
    assert_eq!(n.table().len(), 1);
    // One inbound entry per remote endpoint.
    assert_eq!(n.take_updates().len(), 3);
}

#[test]
fn running_out_of_ports_and_release() {
    let mut n = nat(40000..=40001);
    let s = ip(203, 0, 113, 9);
    for k in 0..2 {
        inside(&mut n, &udp(ip(10, 0, 0, 1 + k), 1000, s, 53, b"x", true)).unwrap();
    }
    assert_eq!(
        inside(&mut n, &udp(ip(10, 0, 0, 9), 1000, s, 53, b"x", true)),
        Err(Drop::NoRoom)
    );
    assert_eq!(n.stats().no_port, 1);
    // Another protocol has its own ports.
    inside(&mut n, &tcp(ip(10, 0, 0, 9), 1000, s, 80, SYN, b"")).unwrap();
    n.take_updates();
    assert!(n.table_mut().release(17, ip(10, 0, 0, 1), 1000));
    let ups = n.take_updates();
    assert_eq!(
        ups,
        vec![Update::Remove(FlowKey::new(17, s, 53, PUBLIC, 40000))]
    );
    let o = inside(&mut n, &udp(ip(10, 0, 0, 9), 1000, s, 53, b"x", true)).unwrap();
    assert_eq!(parse(&o).unwrap().src_port, 40000);
}

#[test]
fn what_it_does_not_translate() {
    let mut n = nat(40000..=40009);
    // An ICMP message other than echo, an IPv4 fragment, a bad IPv4 header checksum.
    let mut unreach = echo(ip(10, 0, 0, 1), ip(8, 8, 8, 8), true, 1, 1);
    unreach[34] = 3;
    assert_eq!(inside(&mut n, &unreach), Err(Drop::UnknownFlow));
    let mut frag = udp(ip(10, 0, 0, 1), 1, ip(8, 8, 8, 8), 2, b"x", true);
    frag[20] |= 0x20; // MF
    frag[24..26].fill(0);
    let c = sb_wire::checksum::checksum(&frag[14..34]);
    frag[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(inside(&mut n, &frag), Err(Drop::OuterFragment));
    let mut bad = udp(ip(10, 0, 0, 1), 1, ip(8, 8, 8, 8), 2, b"x", true);
    bad[24] ^= 1;
    assert!(matches!(inside(&mut n, &bad), Err(Drop::Malformed(_))));
    assert_eq!(n.stats().unparsed, 3);
    assert!(n.table().is_empty());
}

#[derive(Clone, Debug)]
enum Op {
    /// Outbound from private endpoint `p` to remote `r` with protocol index `proto`.
    Out { p: u8, r: u8, proto: u8 },
    /// Release private endpoint `p`'s mapping.
    Release { p: u8, proto: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, 0u8..4, 0u8..3).prop_map(|(p, r, proto)| Op::Out { p, r, proto }),
        1 => (0u8..12, 0u8..3).prop_map(|(p, proto)| Op::Release { p, proto }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The NAT against a HashMap oracle: a private endpoint keeps its public port until
    /// released; no two mapped endpoints of a protocol share one; ports stay in the range;
    /// every published inbound entry translates the answer back to the endpoint, with right
    /// checksums; a release removes exactly its entries.
    #[test]
    fn nat_matches_oracle(ops in prop::collection::vec(op(), 1..80), lo in 1000u16..2000, n_ports in 1u16..10) {
        let mut n = nat(lo..=lo + n_ports - 1);
        let mut oracle: HashMap<(u8, Ipv4Addr, u16), u16> = HashMap::new();
        let mut table: HashMap<FlowKey, [u8; 8]> = HashMap::new();
        for op in ops {
            match op {
                Op::Out { p, r, proto } => {
                    let (h, hp) = (ip(10, 0, 0, 1 + p % 4), 1000 + u16::from(p / 4));
                    let s = ip(203, 0, 113, 1 + r);
                    let (num, f) = match proto {
                        0 => (UDP, udp(h, hp, s, 53, b"q", true)),
                        1 => (TCP, tcp(h, hp, s, 80, SYN, b"")),
                        _ => (ICMP, echo(h, s, true, hp, 9)),
                    };
                    let used = oracle.iter().filter(|((pr, _, _), _)| *pr == num).count();
                    let known = oracle.get(&(num, h, hp)).copied();
                    match inside(&mut n, &f) {
                        Ok(o) => {
                            assert_checksums(&o);
                            let po = parse(&o).unwrap();
                            prop_assert_eq!(po.src, PUBLIC);
                            if let Some(k) = known {
                                prop_assert_eq!(po.src_port, k);
                            } else {
                                prop_assert!(oracle.iter().all(|((pr, _, _), &pp)| *pr != num || pp != po.src_port));
                                oracle.insert((num, h, hp), po.src_port);
                            }
                            prop_assert!((lo..lo + n_ports).contains(&po.src_port));
                            // The answer goes back to the endpoint.
                            let a = match proto {
                                0 => udp(s, 53, PUBLIC, po.src_port, b"a", true),
                                1 => tcp(s, 80, PUBLIC, po.src_port, SYN | ACK, b""),
                                _ => echo(s, PUBLIC, false, po.src_port, 9),
                            };
                            for u in n.take_updates() {
                                match u {
                                    Update::Insert(k, v) => { table.insert(k, v); }
                                    Update::Remove(k) => { table.remove(&k); }
                                }
                            }
                            let ka = parse(&a).unwrap().key();
                            let v = table.get(&ka).copied();
                            prop_assert!(v.is_some(), "no entry for the answer");
                            let (_, r) = outside(&mut n, &a, &v.unwrap());
                            let i = r.unwrap();
                            assert_checksums(&i);
                            let pi = parse(&i).unwrap();
                            prop_assert_eq!((pi.dst, pi.dst_port), (h, hp));
                        }
                        Err(d) => {
                            prop_assert_eq!(d, Drop::NoRoom);
                            prop_assert!(known.is_none() && used == usize::from(n_ports));
                        }
                    }
                }
                Op::Release { p, proto } => {
                    let (h, hp) = (ip(10, 0, 0, 1 + p % 4), 1000 + u16::from(p / 4));
                    let num = [UDP, TCP, ICMP][usize::from(proto)];
                    let had = oracle.remove(&(num, h, hp));
                    prop_assert_eq!(n.table_mut().release(num, h, hp), had.is_some());
                    for u in n.take_updates() {
                        let Update::Remove(k) = u else { panic!("a release only removes") };
                        prop_assert_eq!((k.protocol(), k.dst(), Some(k.dst_port())), (num, PUBLIC, had));
                        prop_assert!(table.remove(&k).is_some());
                    }
                }
            }
            // Every entry in the table belongs to a mapped endpoint.
            for (k, v) in &table {
                let t = Translation::from_value(v).unwrap();
                prop_assert_eq!(oracle.get(&(k.protocol(), t.addr, t.port)), Some(&k.dst_port()));
                prop_assert_eq!(n.table().inbound(k), Some(t));
            }
            prop_assert_eq!(n.table().len(), oracle.len());
        }
    }
}
