//! Random bytes never panic the parser or a node, and a node refuses what it cannot
//! authenticate (the same code as the cargo-fuzz target `control_message`).

use proptest::prelude::*;
use sb_control::fuzzing;
use sb_control::wire::{self, Body, Header, Kind};
use sb_control::{Node, Peer};

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_parser(data in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::parse(&data);
    }

    #[test]
    fn random_bytes_never_panic_a_node(data in prop::collection::vec(any::<u8>(), 0..400)) {
        fuzzing::handle(&data);
    }

    /// The replay window against an oracle that remembers every counter: each is taken
    /// once, and none [`wire::WINDOW`] or more behind the newest.
    #[test]
    fn the_replay_window_is_the_oracle(cs in prop::collection::vec(
        prop_oneof![0u64..40, 0u64..3000, Just(0u64)], 0..400)
    ) {
        let mut w = wire::Window::default();
        let mut seen = std::collections::HashSet::new();
        let mut top = 0u64;
        for c in cs {
            let want = if c == 0 || c + wire::WINDOW <= top {
                Err(wire::WireError::ReplayTooOld)
            } else if seen.contains(&c) {
                Err(wire::WireError::Replayed)
            } else {
                seen.insert(c);
                top = top.max(c);
                Ok(())
            };
            prop_assert_eq!(w.accept(c), want, "counter {}", c);
        }
    }
}

#[test]
fn a_datagram_without_the_key_or_of_another_cluster_changes_nothing_and_is_counted() {
    let mut n = fuzzing::started_node();
    let mut before = n.status();
    let spec = fuzzing::spec();
    let h = Header {
        kind: Kind::Hello,
        sender: 1,
        receiver: 0,
        cluster_id: spec.cluster_id,
        sender_epoch: 1,
        receiver_epoch: 1,
        msg_id: 1,
        counter: 1,
    };
    let pair = wire::pair_key(&spec.key, spec.cluster_id, 0, 1);
    let hello = Body::Hello { nonce: 0x99 };
    let forged = wire::encode(&[0; 32], &h, &hello);
    n.handle(1, Peer::Node(1), &forged);
    let foreign = wire::encode(
        &pair,
        &Header {
            cluster_id: spec.cluster_id + 1,
            ..h
        },
        &hello,
    );
    n.handle(2, Peer::Node(1), &foreign);
    let mut s = n.status();
    assert_eq!(s.dropped.get("bad_tag"), Some(&1));
    assert_eq!(s.dropped.get("foreign_cluster"), Some(&1));
    // Nothing but the counters moved.
    s.dropped.clear();
    before.dropped.clear();
    assert_eq!(s, before);
    // The authentic hello is answered.
    let real = wire::encode(&pair, &h, &hello);
    while n.poll_transmit().is_some() {}
    n.handle(3, Peer::Node(1), &real);
    let mut acks = 0;
    while let Some((to, d)) = n.poll_transmit() {
        let nonces = (0, 0x99);
        if let Ok((_, Body::HelloAck { .. })) =
            wire::decode_bound(&pair, nonces, spec.cluster_id, &d)
        {
            assert_eq!(to, Peer::Node(1));
            acks += 1;
        }
    }
    assert_eq!(acks, 1);
}

#[test]
fn a_bad_spec_or_flow_is_refused() {
    let mut s = fuzzing::spec();
    s.ranges = vec![0..1, 2..2];
    assert!(Node::new(s, 0, Vec::new(), Vec::new(), 0, 1).is_err());
    assert!(Node::new(fuzzing::spec(), 2, Vec::new(), Vec::new(), 0, 1).is_err());
    let bad = sb_control::Flow {
        key: sb_control::Bytes::from_slice(&[1, 2, 3]),
        node: 0,
        value: sb_control::Bytes::from_slice(&[0, 0]),
    };
    assert!(Node::new(fuzzing::spec(), 0, vec![bad], Vec::new(), 0, 1).is_err());
    assert!(Node::new(fuzzing::spec(), 0, Vec::new(), vec![vec![99]], 0, 1).is_err());
}

/// A fuzzer find: an authenticated piece chunk claiming a huge piece (and so billions of
/// chunks) made the node allocate for all of them and run out of memory; an index past the
/// count would have indexed out of bounds. Both are dropped now, before any allocation.
#[test]
fn a_chunk_claiming_a_huge_piece_is_dropped() {
    let artifact = [
        72u8, 169, 169, 169, 169, 169, 169, 169, 254, 163, 254, 254, 135, 135, 135, 254, 135, 135,
        255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 58, 255, 255, 255, 255, 255,
        255, 48, 254, 254,
    ];
    fuzzing::handle(&artifact);
}
