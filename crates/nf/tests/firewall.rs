//! The stateful firewall: connections opened by the first outbound packet (a SYN for TCP),
//! answers allowed only for known open connections, closed by an outbound RST; a property
//! test against a HashMap oracle of connection states.

mod common;
use common::*;
use proptest::prelude::*;
use sb_engine::Drop;
use sb_nf::firewall::{Conn, ConnState, Firewall};
use sb_nf::flow::{parse, FlowKey};
use sb_nf::Update;
use std::collections::HashMap;

fn open(n: u16) -> [u8; 4] {
    Conn {
        state: ConnState::Open,
        node: n,
    }
    .value()
}

#[test]
fn outbound_opens_inbound_answers() {
    let mut f = Firewall::new(2);
    let (h, s) = (ip(10, 0, 0, 5), ip(203, 0, 113, 9));
    let syn = tcp(h, 40000, s, 443, SYN, b"");
    // Outbound packets leave unchanged.
    assert_eq!(inside(&mut f, &syn).unwrap(), syn);
    let ups = f.take_updates();
    let key = parse(&syn).unwrap().key().reversed();
    assert_eq!(ups, vec![Update::Insert(key, open(2))]);
    // The answer's key is the entry's; an open state lets it in unchanged.
    let ans = tcp(s, 443, h, 40000, SYN | ACK, b"");
    let (k, r) = outside(&mut f, &ans, &open(2));
    assert_eq!(k, key.0.to_vec());
    assert_eq!(r.unwrap(), ans);
    // The same connection again: no new update.
    inside(&mut f, &tcp(h, 40000, s, 443, ACK, b"data")).unwrap();
    assert!(f.take_updates().is_empty());
    let st = f.stats();
    assert_eq!((st.outbound, st.inbound, st.opened), (2, 1, 1));
}

#[test]
fn tcp_needs_a_syn_udp_and_icmp_do_not() {
    let mut f = Firewall::new(0);
    let (h, s) = (ip(10, 0, 0, 5), ip(203, 0, 113, 9));
    assert_eq!(
        inside(&mut f, &tcp(h, 1, s, 80, ACK, b"")),
        Err(Drop::UnknownFlow)
    );
    assert_eq!(
        inside(&mut f, &tcp(h, 1, s, 80, SYN | ACK, b"")),
        Err(Drop::UnknownFlow)
    );
    assert_eq!(f.stats().not_syn, 2);
    assert!(f.take_updates().is_empty());
    inside(&mut f, &udp(h, 5000, s, 53, b"q", true)).unwrap();
    inside(&mut f, &echo(h, s, true, 7, 1)).unwrap();
    let keys: Vec<FlowKey> = f
        .take_updates()
        .into_iter()
        .map(|u| match u {
            Update::Insert(k, _) => k,
            Update::Remove(k) => k,
        })
        .collect();
    assert_eq!(
        keys[0],
        parse(&udp(s, 53, h, 5000, b"", true)).unwrap().key()
    );
    // The echo reply's key (identifier for both ports).
    assert_eq!(keys[1], parse(&echo(s, h, false, 7, 1)).unwrap().key());
}

#[test]
fn rst_closes_syn_reopens() {
    let mut f = Firewall::new(1);
    let (h, s) = (ip(10, 0, 0, 5), ip(203, 0, 113, 9));
    inside(&mut f, &tcp(h, 1, s, 80, SYN, b"")).unwrap();
    inside(&mut f, &tcp(h, 1, s, 80, RST | ACK, b"")).unwrap();
    let ups = f.take_updates();
    let closed = Conn {
        state: ConnState::Closed,
        node: 1,
    }
    .value();
    assert_eq!(
        ups[1],
        Update::Insert(parse(&tcp(s, 80, h, 1, 0, b"")).unwrap().key(), closed)
    );
    let (_, r) = outside(&mut f, &tcp(s, 80, h, 1, ACK, b""), &closed);
    assert_eq!(r, Err(Drop::Gate));
    assert_eq!(f.stats().closed, 1);
    inside(&mut f, &tcp(h, 1, s, 80, SYN, b"")).unwrap();
    assert_eq!(f.take_updates().len(), 1);
    // A corrupt value is dropped, not trusted.
    let (_, r) = outside(&mut f, &tcp(s, 80, h, 1, ACK, b""), &[9, 0, 0, 1]);
    assert_eq!(r, Err(Drop::Gate));
    assert_eq!(f.stats().bad_value, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The firewall against an oracle: a HashMap of connection states driven by the rules
    /// (TCP: SYN opens, RST closes; UDP/ICMP: any packet opens). The table built from its
    /// updates equals the oracle after every step, and an inbound packet passes exactly when
    /// the oracle has its connection open (unknown ones have no entry: the engine drops them).
    #[test]
    fn firewall_matches_oracle(ops in prop::collection::vec((0u8..6, 0u8..3, 0u8..4, any::<bool>()), 1..100)) {
        let mut f = Firewall::new(0);
        let mut oracle: HashMap<FlowKey, ConnState> = HashMap::new();
        let mut table: HashMap<FlowKey, [u8; 4]> = HashMap::new();
        for (c, proto, flags, inbound) in ops {
            let (h, s, hp) = (ip(10, 0, 0, 1 + c % 3), ip(203, 0, 113, 1), 1000 + u16::from(c / 3));
            let fl = [SYN, ACK, RST, SYN | ACK][usize::from(flags)];
            let (out, ans) = match proto {
                0 => (tcp(h, hp, s, 80, fl, b""), tcp(s, 80, h, hp, ACK, b"")),
                1 => (udp(h, hp, s, 53, b"q", true), udp(s, 53, h, hp, b"a", true)),
                _ => (echo(h, s, true, hp, 1), echo(s, h, false, hp, 1)),
            };
            let key = parse(&ans).unwrap().key();
            if inbound {
                let allowed = match table.get(&key) {
                    None => false,
                    Some(v) => outside(&mut f, &ans, v).1.is_ok(),
                };
                prop_assert_eq!(allowed, oracle.get(&key) == Some(&ConnState::Open));
            } else {
                let before = oracle.get(&key).copied();
                let expect = match (proto, before) {
                    (0, None) if fl != SYN => None,
                    (0, Some(ConnState::Open)) if fl & RST != 0 => Some(ConnState::Closed),
                    (0, Some(ConnState::Closed)) if fl == SYN => Some(ConnState::Open),
                    (_, Some(st)) => Some(st),
                    (_, None) => Some(ConnState::Open),
                };
                let r = inside(&mut f, &out);
                prop_assert_eq!(r.is_ok(), expect.is_some());
                if let Some(st) = expect {
                    oracle.insert(key, st);
                }
                for u in f.take_updates() {
                    if let Update::Insert(k, v) = u {
                        table.insert(k, v);
                    }
                }
            }
            prop_assert_eq!(table.len(), oracle.len());
            for (k, st) in &oracle {
                prop_assert_eq!(table.get(k).and_then(|v| Conn::from_value(v)).map(|c| c.state), Some(*st));
            }
        }
    }
}
