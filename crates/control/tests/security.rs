//! What a captured or forged datagram can no longer do, and admission control: an update
//! whose FIB install is refused is rejected before any GPT points at the handler.

use sb_control::client::{self, Stamp};
use sb_control::wire::{self, Body, Header, Kind};
use sb_control::{Bytes, ClusterSpec, Event, GptSpec, Node, NodeId, Op, Outcome, Peer, Update};
use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;

fn spec() -> ClusterSpec {
    ClusterSpec {
        cluster_id: 11,
        nodes: 3,
        key: [0x33; 32],
        gpt: GptSpec {
            index_bits: 16,
            array_bits: 8,
            value_bits: 2,
            seed: 5,
            build_id: 6,
            total_blocks: 3,
            build_threads: 1,
        },
        ranges: vec![0..1, 1..2, 2..3],
        key_bytes: 4,
        value_bytes: 2,
    }
}

/// Three nodes on a perfect network, every datagram kept.
struct Mini {
    spec: ClusterSpec,
    nodes: Vec<Node>,
    logs: Vec<Vec<Vec<u8>>>,
    now: u64,
    /// (from, to, bytes) of every datagram between nodes.
    seen: Vec<(NodeId, NodeId, Vec<u8>)>,
    replies: Vec<Vec<u8>>,
    /// Nodes whose FIB refuses every new key.
    full: HashSet<NodeId>,
    fibs: Vec<HashSet<Bytes>>,
}

/// A node without failure detection: this harness runs until no timer is left, and
/// heartbeats never stop.
fn start(spec: &ClusterSpec, i: NodeId, log: Vec<Vec<u8>>, now: u64, seed: u64) -> Node {
    let tuning = sb_control::Tuning {
        lease: 0,
        ..sb_control::Tuning::default()
    };
    Node::with_tuning(spec.clone(), i, Vec::new(), log, now, seed, tuning).unwrap()
}

const CLIENT: &str = "10.0.0.9:7000";

impl Mini {
    fn new() -> Mini {
        let spec = spec();
        let nodes = (0..3)
            .map(|i| start(&spec, i, Vec::new(), 0, i as u64))
            .collect();
        let mut m = Mini {
            spec,
            nodes,
            logs: vec![Vec::new(); 3],
            now: 1,
            seen: Vec::new(),
            replies: Vec::new(),
            full: HashSet::new(),
            fibs: vec![HashSet::new(); 3],
        };
        m.run();
        assert!(m.nodes.iter().all(|n| n.ready() && n.serving()));
        m
    }

    fn deliver(&mut self, to: NodeId, from: Peer, bytes: &[u8]) {
        self.now += 1000;
        self.nodes[to as usize].handle(self.now, from, bytes);
    }

    /// Runs until nothing is left to deliver.
    fn run(&mut self) {
        for _ in 0..10_000 {
            let mut q: VecDeque<(NodeId, Peer, Vec<u8>)> = VecDeque::new();
            for i in 0..3u16 {
                let n = &mut self.nodes[i as usize];
                for _pass in 0..2 {
                    if _pass == 1 {
                        n.persisted(self.now);
                    }
                    while let Some(ev) = n.poll_event() {
                        match ev {
                            Event::Persist { records } => self.logs[i as usize].extend(records),
                            Event::FibInsert { key, .. } => {
                                let f = &mut self.fibs[i as usize];
                                if self.full.contains(&i) && !f.contains(&key) {
                                    n.install_failed(&key);
                                } else {
                                    f.insert(key);
                                }
                            }
                            Event::FibRemove { key } => {
                                self.fibs[i as usize].remove(&key);
                            }
                            _ => {}
                        }
                    }
                }
                while let Some((to, d)) = n.poll_transmit() {
                    q.push_back((i, to, d));
                }
            }
            if q.is_empty() {
                self.now += 50_000_000;
                let mut any = false;
                for n in &mut self.nodes {
                    if n.poll_timeout().is_some_and(|t| t <= self.now) {
                        n.handle_timeout(self.now);
                        any = true;
                    }
                }
                if !any && self.nodes.iter().all(|n| n.idle()) {
                    return;
                }
                continue;
            }
            for (from, to, d) in q {
                match to {
                    Peer::Node(j) => {
                        self.seen.push((from, j, d.clone()));
                        self.deliver(j, Peer::Node(from), &d);
                    }
                    Peer::Client(_) => self.replies.push(d),
                }
            }
        }
        panic!("no quiescence");
    }

    fn request(&mut self, to: NodeId, stamp: Stamp, updates: &[Update]) -> Vec<u8> {
        client::encode_request(&self.spec.client_key(), 11, to, stamp, updates).unwrap()
    }

    /// Sends `bytes` to node `to` from the client and returns the reply's outcomes.
    fn ask(&mut self, to: NodeId, bytes: &[u8]) -> Vec<Outcome> {
        self.replies.clear();
        let from = Peer::Client(CLIENT.parse::<SocketAddr>().unwrap());
        self.deliver(to, from, bytes);
        self.run();
        let r = self.replies.pop().expect("a reply");
        client::decode_reply(&self.spec.client_key(), 11, &r)
            .unwrap()
            .results
    }

    fn digests(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|n| n.gpt().unwrap().content_digest())
            .collect()
    }
}

/// A key of owner `o`'s range.
fn key_of(s: &ClusterSpec, o: NodeId, skip: usize) -> Bytes {
    (0u32..)
        .map(|i| Bytes::from_slice(&i.to_le_bytes()))
        .filter(|k| s.owner_of(k) == o)
        .nth(skip)
        .unwrap()
}

fn upd(op: Op, key: &Bytes, node: NodeId, v: u8) -> Update {
    Update {
        op,
        key: key.clone(),
        node,
        value: Bytes::from_slice(&[v, v]),
    }
}

fn stamp(seq: u64, now: u64) -> Stamp {
    Stamp {
        client: 0xabc,
        seq,
        time: now,
    }
}

#[test]
fn a_datagram_captured_on_its_way_to_one_node_is_refused_by_another() {
    let mut m = Mini::new();
    // Node 0 installs a flow at node 1: a FIB datagram from 0 to 1.
    let k = key_of(&m.spec, 0, 0);
    let t = m.now;
    let r = m.request(0, stamp(1, t), &[upd(Op::Insert, &k, 1, 7)]);
    assert_eq!(m.ask(0, &r), vec![Outcome::Applied]);
    let fib = (m.seen.iter())
        .filter(|(f, to, d)| {
            *f == 0
                && *to == 1
                && matches!(
                    wire::peek(11, d),
                    Ok((_, Body::Fib { items, .. })) if !items.is_empty()
                )
        })
        .map(|x| x.2.clone())
        .next_back()
        .expect("a FIB datagram to node 1");
    let before = m.nodes[2].status();
    m.deliver(2, Peer::Node(0), &fib);
    m.run();
    let after = m.nodes[2].status();
    assert_eq!(
        after.dropped.get("misdirected"),
        Some(&1),
        "{:?}",
        after.dropped
    );
    assert!(!m.fibs[2].contains(&k), "node 2 installed nothing");
    assert_eq!(after.fib_entries, before.fib_entries);
    // Every captured datagram, to every other node: refused, nothing installed or acked.
    let caps: Vec<_> = m.seen.clone();
    for (f, to, d) in caps {
        for j in 0..3u16 {
            if j != to && j != f {
                m.deliver(j, Peer::Node(f), &d);
            }
        }
    }
    for j in 0..3u16 {
        while m.nodes[j as usize].poll_event().is_some() {}
        assert!(
            m.nodes[j as usize].poll_transmit().is_none(),
            "node {j} answered a replay"
        );
    }
}

#[test]
fn a_replayed_client_change_is_refused() {
    let mut m = Mini::new();
    let k = key_of(&m.spec, 1, 0);
    let t = m.now;
    let ins = m.request(0, stamp(1, t), &[upd(Op::Insert, &k, 1, 1)]);
    assert_eq!(m.ask(0, &ins), vec![Outcome::Applied]);
    let to2 = m.request(0, stamp(2, t), &[upd(Op::Change, &k, 2, 2)]);
    assert_eq!(m.ask(0, &to2), vec![Outcome::Applied]);
    let back = m.request(0, stamp(3, t), &[upd(Op::Change, &k, 1, 3)]);
    assert_eq!(m.ask(0, &back), vec![Outcome::Applied]);
    assert_eq!(m.nodes[1].rib_get(&k).map(|(n, _)| n), Some(1));
    // The old change again (from another address: a capture): answered from memory, not
    // applied again.
    let from = Peer::Client("10.6.6.6:1".parse().unwrap());
    m.deliver(0, from, &to2);
    m.run();
    assert_eq!(m.nodes[1].rib_get(&k).map(|(n, _)| n), Some(1));
    // Sent to another node than the one it named: refused.
    assert!(m.ask_none(1, &to2));
    assert_eq!(m.nodes[1].status().dropped.get("misdirected"), Some(&1));
    // After node 0 restarts (it remembers nothing): refused as made before its start.
    let log = m.logs[0].clone();
    m.now += 1_000_000_000;
    m.nodes[0] = start(&m.spec, 0, log, m.now, 9);
    m.run();
    assert_eq!(m.ask(0, &to2), vec![Outcome::Stale]);
    assert_eq!(
        m.nodes[0].status().dropped.get("request_before_start"),
        Some(&1)
    );
    assert_eq!(
        m.nodes[1].rib_get(&k).map(|(n, _)| n),
        Some(1),
        "not reverted"
    );
    // A fresh request is taken; its replay once forgotten is refused.
    let t = m.now;
    let again = m.request(0, stamp(4, t), &[upd(Op::Change, &k, 2, 4)]);
    assert_eq!(m.ask(0, &again), vec![Outcome::Applied]);
}

#[test]
fn a_forgotten_request_replayed_is_refused() {
    let spec = spec();
    let mut m = Mini::new();
    let tuning = sb_control::Tuning {
        remembered: 1,
        lease: 0,
        ..sb_control::Tuning::default()
    };
    let log = m.logs[0].clone();
    m.nodes[0] = Node::with_tuning(spec, 0, Vec::new(), log, m.now, 9, tuning).unwrap();
    m.run();
    let k = key_of(&m.spec, 0, 1);
    let t = m.now;
    let a = m.request(0, stamp(1, t), &[upd(Op::Insert, &k, 0, 1)]);
    assert_eq!(m.ask(0, &a), vec![Outcome::Applied]);
    let b = m.request(0, stamp(2, t), &[upd(Op::Delete, &k, 0, 0)]);
    assert_eq!(m.ask(0, &b), vec![Outcome::Applied]);
    // `a` is forgotten (one request remembered): its replay would insert the key again.
    assert_eq!(m.ask(0, &a), vec![Outcome::Stale]);
    assert_eq!(m.nodes[0].rib_get(&k), None);
    assert_eq!(
        m.nodes[0].status().dropped.get("request_replayed"),
        Some(&1)
    );
}

#[test]
fn a_client_key_cannot_sign_a_node_message() {
    let mut m = Mini::new();
    let before = m.digests();
    let ck = m.spec.client_key();
    // A delta, an ack and a FIB install "from node 0", made with the client key.
    let bodies = [
        Body::Deltas {
            first_seq: 1,
            deltas: vec![vec![0u8; 40].into()],
        },
        Body::DeltaAck { applied: 99 },
        Body::Fib {
            first_seq: 1,
            acked: 0,
            items: vec![wire::FibItem::Install {
                key: key_of(&m.spec, 0, 0),
                value: Bytes::from_slice(&[1, 1]),
            }],
        },
    ];
    let mut refused = 0;
    for b in bodies {
        for sender in [0, wire::CLIENT_SENDER] {
            let h = Header {
                kind: b.kind(),
                sender,
                receiver: 1,
                cluster_id: 11,
                sender_epoch: m.nodes[0].epoch(),
                receiver_epoch: m.nodes[1].epoch(),
                msg_id: 1,
                counter: 1,
            };
            let d = wire::encode(&ck, &h, &b);
            let from = if sender == 0 {
                Peer::Node(0)
            } else {
                Peer::Client(CLIENT.parse().unwrap())
            };
            m.deliver(1, from, &d);
            refused += 1;
        }
    }
    m.run();
    let st = m.nodes[1].status();
    let n = st.dropped.get("kind_not_allowed").copied().unwrap_or(0)
        + st.dropped.get("bad_tag").copied().unwrap_or(0);
    assert_eq!(n, refused, "{:?}", st.dropped);
    assert!(st.dropped.contains_key("kind_not_allowed"));
    assert_eq!(m.digests(), before);
    assert!(m.fibs[1].is_empty());
    // And a node's message is not a client's request: a request made with a pair key.
    let h = Header {
        kind: Kind::ClientRequest,
        sender: wire::CLIENT_SENDER,
        receiver: 1,
        cluster_id: 11,
        sender_epoch: 0,
        receiver_epoch: 0,
        msg_id: 1,
        counter: 0,
    };
    let body = Body::ClientRequest {
        client: 1,
        time: m.now,
        updates: vec![upd(Op::Insert, &key_of(&m.spec, 1, 0), 1, 1)],
    };
    let d = wire::encode(&wire::pair_key(&m.spec.key, 11, 0, 1), &h, &body);
    assert!(m.ask_none(1, &d));
}

#[test]
fn a_full_fib_rejects_the_update_with_its_reason_and_no_gpt_changes() {
    let mut m = Mini::new();
    // Node 2's FIB is full: an insert or a move to it is rejected, at a remote and at the
    // owner's own handler alike.
    m.full.insert(2);
    let before = m.digests();
    let remote = key_of(&m.spec, 0, 0);
    let local = key_of(&m.spec, 2, 0);
    let t = m.now;
    let r = m.request(
        1,
        stamp(1, t),
        &[
            upd(Op::Insert, &remote, 2, 1),
            upd(Op::Insert, &local, 2, 1),
        ],
    );
    assert_eq!(m.ask(1, &r), vec![Outcome::FibFull, Outcome::FibFull]);
    assert_eq!(m.digests(), before, "no GPT changed");
    assert_eq!(m.nodes[0].rib_get(&remote), None);
    assert_eq!(m.nodes[2].rib_get(&local), None);
    assert!(m.fibs[2].is_empty());
    assert_eq!(m.nodes[0].status().rejected.get("fib_full"), Some(&1));
    // A flow at node 1 moved to node 2: refused, it stays at node 1 (entry and GPT).
    let k = key_of(&m.spec, 0, 1);
    let ins = m.request(1, stamp(2, t), &[upd(Op::Insert, &k, 1, 1)]);
    assert_eq!(m.ask(1, &ins), vec![Outcome::Applied]);
    let before = m.digests();
    let mv = m.request(1, stamp(3, t), &[upd(Op::Change, &k, 2, 2)]);
    assert_eq!(m.ask(1, &mv), vec![Outcome::FibFull]);
    assert_eq!(m.digests(), before);
    assert!(m.fibs[1].contains(&k));
    for n in &m.nodes {
        assert_eq!(n.gpt().unwrap().lookup(&k), 1);
    }
    assert_eq!(
        m.nodes[0].rib_get(&k).map(|(n, v)| (n, v.to_vec())),
        Some((1, vec![1, 1]))
    );
    // Room again: the same update goes through.
    m.full.clear();
    let mv = m.request(1, stamp(4, t), &[upd(Op::Change, &k, 2, 2)]);
    assert_eq!(m.ask(1, &mv), vec![Outcome::Applied]);
    for n in &m.nodes {
        assert_eq!(n.gpt().unwrap().lookup(&k), 2);
    }
}

impl Mini {
    /// Sends `bytes` to node `to`; true if nothing answers.
    fn ask_none(&mut self, to: NodeId, bytes: &[u8]) -> bool {
        self.replies.clear();
        let from = Peer::Client(CLIENT.parse::<SocketAddr>().unwrap());
        self.deliver(to, from, bytes);
        self.run();
        self.replies.is_empty()
    }
}

/// Every datagram a node received, sent to it again (a capture replayed in the same
/// incarnations of both ends): refused by the receiver's replay window, nothing answered,
/// nothing done. Before protocol version 3 a replayed hello was answered and a replayed
/// piece request made the owner send its whole piece again.
#[test]
fn a_datagram_replayed_to_its_receiver_is_refused_by_the_replay_window() {
    let mut m = Mini::new();
    let k = key_of(&m.spec, 0, 0);
    let t = m.now;
    let r = m.request(0, stamp(1, t), &[upd(Op::Insert, &k, 1, 7)]);
    assert_eq!(m.ask(0, &r), vec![Outcome::Applied]);
    let before: Vec<_> = m.nodes.iter().map(|n| n.status()).collect();
    let digests = m.digests();
    let caps: Vec<_> = m.seen.clone();
    for (f, to, d) in &caps {
        m.deliver(*to, Peer::Node(*f), d);
    }
    let mut refused = 0;
    for (j, n) in m.nodes.iter_mut().enumerate() {
        assert!(n.poll_event().is_none(), "node {j} acted on a replay");
        assert!(n.poll_transmit().is_none(), "node {j} answered a replay");
        let st = n.status();
        let got = |s: &sb_control::Status, why| s.dropped.get(why).copied().unwrap_or(0);
        for why in ["replayed", "replay_too_old"] {
            refused += got(&st, why) - got(&before[j], why);
        }
    }
    assert_eq!(refused, caps.len() as u64);
    assert_eq!(m.digests(), digests);
}

/// A node whose log was wiped comes back in its old epoch (1): a datagram captured on its
/// way to its earlier incarnation is refused by the tag (it binds the receiver's per-boot
/// nonce), where the epoch compare alone took it; and its hello, of an epoch its peers
/// know with another nonce, is refused (`epoch_reused`) and answered with the epoch it
/// knows (`EpochTaken`, bound to that hello's nonce): another incarnation refuses the answer
/// by its tag; the one it answers restarts one epoch above.
#[test]
fn a_datagram_of_an_earlier_incarnation_is_refused_even_with_its_epoch_reused() {
    let mut m = Mini::new();
    let k = key_of(&m.spec, 0, 0);
    let t = m.now;
    let r = m.request(0, stamp(1, t), &[upd(Op::Insert, &k, 1, 7)]);
    assert_eq!(m.ask(0, &r), vec![Outcome::Applied]);
    let fib = (m.seen.iter())
        .filter(|(f, to, d)| {
            *f == 0
                && *to == 1
                && matches!(wire::peek(11, d), Ok((_, Body::Fib { items, .. })) if !items.is_empty())
        })
        .map(|x| x.2.clone())
        .next_back()
        .expect("a FIB datagram to node 1");
    // Node 1 restarts with an empty log: epoch 1 again.
    let old_epoch = m.nodes[1].epoch();
    m.now += 1_000_000_000;
    let mut n1 = start(&m.spec, 1, Vec::new(), m.now, 77);
    assert_eq!(n1.epoch(), old_epoch);
    while n1.poll_event().is_some() {}
    n1.persisted(m.now);
    while n1.poll_event().is_some() {}
    m.nodes[1] = n1;
    m.fibs[1].clear();
    m.deliver(1, Peer::Node(0), &fib);
    let st = m.nodes[1].status();
    assert_eq!(st.dropped.get("bad_tag"), Some(&1), "{:?}", st.dropped);
    let mut installed = false;
    while let Some(ev) = m.nodes[1].poll_event() {
        installed |= matches!(ev, Event::FibInsert { .. });
    }
    assert!(!installed, "the new incarnation installed a replayed item");
    // Its hello reaches node 0, which knows epoch 1 of node 1 with another nonce.
    let hellos: Vec<_> = std::iter::from_fn(|| m.nodes[1].poll_transmit())
        .filter(|(to, d)| {
            *to == Peer::Node(0) && matches!(wire::peek(11, d), Ok((_, Body::Hello { .. })))
        })
        .collect();
    assert!(!hellos.is_empty());
    m.deliver(0, Peer::Node(1), &hellos[0].1);
    assert_eq!(m.nodes[0].status().dropped.get("epoch_reused"), Some(&1));
    // Node 0 answers with the epoch it knows (the rejoin), bound to that hello's nonce.
    let taken: Vec<_> = std::iter::from_fn(|| m.nodes[0].poll_transmit())
        .filter(|(to, d)| {
            *to == Peer::Node(1)
                && matches!(wire::peek(11, d), Ok((_, Body::EpochTaken { known })) if known == old_epoch)
        })
        .map(|x| x.1)
        .collect();
    assert_eq!(taken.len(), 1, "one EpochTaken for the refused hello");
    // Another incarnation of node 1 (say, one the answer was captured for) refuses it by its
    // tag, and is not stopped by it.
    let mut other = start(&m.spec, 1, Vec::new(), m.now, 78);
    while other.poll_event().is_some() {}
    other.persisted(m.now);
    other.handle(m.now + 1, Peer::Node(0), &taken[0]);
    assert_eq!(other.status().dropped.get("bad_tag"), Some(&1));
    assert!(!other.fenced() && other.rejoin_records().is_none());
    // The incarnation whose hello it answers stops and rejoins above the epoch node 0 knows.
    m.deliver(1, Peer::Node(0), &taken[0]);
    assert!(m.nodes[1].fenced());
    let log = m.nodes[1].rejoin_records().expect("rejoin records");
    let n1 = start(&m.spec, 1, log, m.now, 79);
    assert_eq!(n1.epoch(), old_epoch + 1);
}

/// `cluster rotate-key`: the nodes take a new master secret (not all at once) without
/// losing anything: the state stays, updates go on during and after the switch with no
/// datagram refused, a request made with the old client key is refused at once, and after
/// the grace period a datagram made with an old pair key too.
#[test]
fn a_rotated_key_keeps_the_state_and_refuses_the_old_keys() {
    let mut m = Mini::new();
    let k = key_of(&m.spec, 1, 0);
    let t = m.now;
    let ins = m.request(0, stamp(1, t), &[upd(Op::Insert, &k, 2, 1)]);
    assert_eq!(m.ask(0, &ins), vec![Outcome::Applied]);
    let digests = m.digests();
    let old = m.spec.clone();
    let new = [0x44; 32];
    let bad_tags = |m: &Mini| -> u64 {
        (m.nodes.iter())
            .map(|n| n.status().dropped.get("bad_tag").copied().unwrap_or(0))
            .sum()
    };
    // Nodes 0 and 1 read the new secret first, node 2 half a second later.
    for j in [0, 1] {
        m.nodes[j].rotate_key(m.now, new);
    }
    m.spec.key = new;
    assert_eq!(m.digests(), digests, "the GPTs stay");
    assert_eq!(m.nodes[1].rib_get(&k).map(|(n, _)| n), Some(2));
    // The old client key: refused at once by a node that rotated, nothing applied.
    let t = m.now;
    let stale = client::encode_request(
        &old.client_key(),
        11,
        0,
        stamp(2, t),
        &[upd(Op::Change, &k, 0, 2)],
    )
    .unwrap();
    assert!(m.ask_none(0, &stale));
    assert_eq!(m.nodes[0].status().dropped.get("bad_tag"), Some(&1));
    assert_eq!(m.nodes[1].rib_get(&k).map(|(n, _)| n), Some(2));
    // With the new one, updates go on across nodes that have and have not rotated.
    let mv = m.request(0, stamp(3, t), &[upd(Op::Change, &k, 0, 3)]);
    assert_eq!(m.ask(0, &mv), vec![Outcome::Applied]);
    m.now += 500_000_000;
    m.nodes[2].rotate_key(m.now, new);
    let t = m.now;
    let mv = m.request(2, stamp(4, t), &[upd(Op::Change, &k, 1, 4)]);
    assert_eq!(m.ask(2, &mv), vec![Outcome::Applied]);
    // Past the switch: nodes 0 and 1 seal with the new keys, node 2 still with the old.
    m.now += wire::KEY_SWITCH - 100_000_000;
    let t = m.now;
    let mv = m.request(1, stamp(5, t), &[upd(Op::Change, &k, 2, 5)]);
    assert_eq!(m.ask(1, &mv), vec![Outcome::Applied]);
    // And past the grace period.
    m.now += wire::KEY_GRACE;
    let t = m.now;
    let mv = m.request(2, stamp(6, t), &[upd(Op::Change, &k, 0, 6)]);
    assert_eq!(m.ask(2, &mv), vec![Outcome::Applied]);
    assert_eq!(bad_tags(&m), 1, "only the old client's request was refused");
    assert!(m.nodes.iter().all(|n| !n.keys().rotating()));
    for n in &m.nodes {
        assert_eq!(n.gpt().unwrap().lookup(&k), 0);
    }
    // A node's datagram made with an old pair key: refused now.
    let h = Header {
        kind: Kind::Hello,
        sender: 0,
        receiver: 1,
        cluster_id: 11,
        sender_epoch: m.nodes[0].epoch(),
        receiver_epoch: m.nodes[1].epoch(),
        msg_id: 1,
        counter: 1 << 40,
    };
    let b = Body::Hello {
        nonce: m.nodes[0].keys().nonce(),
    };
    let d = wire::encode(&wire::pair_key(&old.key, 11, 0, 1), &h, &b);
    m.deliver(1, Peer::Node(0), &d);
    assert_eq!(m.nodes[1].status().dropped.get("bad_tag"), Some(&1));
    let d = wire::encode(&wire::pair_key(&new, 11, 0, 1), &h, &b);
    m.deliver(1, Peer::Node(0), &d);
    assert_eq!(m.nodes[1].status().dropped.get("bad_tag"), Some(&1));
}
