//! Entry points of the cargo-fuzz targets (and of the proptests that run the same code).

use crate::wire;
use crate::{ClusterSpec, Flow, GptSpec, Node, Peer};

const KEY: [u8; 32] = [0x42; 32];
const CLUSTER: u64 = 7;

/// A small two-node cluster.
pub fn spec() -> ClusterSpec {
    ClusterSpec {
        cluster_id: CLUSTER,
        nodes: 2,
        key: KEY,
        gpt: GptSpec {
            index_bits: 16,
            array_bits: 8,
            value_bits: 1,
            seed: 3,
            build_id: 4,
            total_blocks: 2,
            build_threads: 1,
        },
        ranges: vec![0..1, 1..2],
        key_bytes: 4,
        value_bytes: 2,
    }
}

/// Where [`wrap`] puts a datagram: its ends, their epochs, the nonces its tag binds
/// (sender's, receiver's) and its counter.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    /// Sender and receiver.
    pub ends: (u16, u16),
    /// Sender's and receiver's epochs.
    pub epochs: (u32, u32),
    /// The nonces the tag binds.
    pub nonces: wire::Nonces,
    /// The datagram's counter.
    pub counter: u64,
}

/// `data` with a valid header (type `data[0]`) and tag (with `key`) around the rest, so
/// that the body parser is reached.
pub fn wrap(data: &[u8], key: &[u8; 32], f: Frame) -> Vec<u8> {
    let (sender, receiver) = f.ends;
    let (sender_epoch, receiver_epoch) = f.epochs;
    let mut b = Vec::with_capacity(data.len() + wire::OVERHEAD);
    b.extend_from_slice(wire::MAGIC);
    b.push(wire::VERSION);
    b.push(data.first().copied().unwrap_or(0) % 17);
    b.extend_from_slice(&sender.to_le_bytes());
    b.extend_from_slice(&receiver.to_le_bytes());
    b.extend_from_slice(&CLUSTER.to_le_bytes());
    b.extend_from_slice(&sender_epoch.to_le_bytes());
    b.extend_from_slice(&receiver_epoch.to_le_bytes());
    b.extend_from_slice(&9u64.to_le_bytes());
    b.extend_from_slice(&f.counter.to_le_bytes());
    b.extend_from_slice(data.get(1..).unwrap_or(&[]));
    let t = tag_of(key, f.nonces, &b);
    b.extend_from_slice(&t);
    b
}

fn tag_of(key: &[u8; 32], nonces: wire::Nonces, b: &[u8]) -> [u8; 16] {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(&nonces.0.to_le_bytes());
    mac.update(&nonces.1.to_le_bytes());
    mac.update(b);
    let mut t = [0u8; 16];
    t.copy_from_slice(&mac.finalize().into_bytes()[..16]);
    t
}

/// Parses arbitrary bytes as a datagram, raw and with a valid header and tag; whatever is
/// accepted must encode back to the same bytes.
pub fn parse(data: &[u8]) {
    let mut node0 = wire::Keys::node(&KEY, CLUSTER, 2, 0);
    node0.set_nonce(0x5b);
    node0.set_peer_nonce(1, 0x6c);
    let pair = wire::pair_key(&KEY, CLUSTER, 1, 0);
    let f = |nonces| Frame {
        ends: (1, 0),
        epochs: (1, 1),
        nonces,
        counter: 3,
    };
    for bytes in [data.to_vec(), wrap(data, &KEY, f((0, 0)))] {
        if let Ok((h, b)) = wire::decode(&KEY, CLUSTER, &bytes) {
            assert_eq!(
                wire::encode(&KEY, &h, &b),
                bytes,
                "accepted bytes re-encode"
            );
        }
        if let Ok((h, b)) = wire::peek(CLUSTER, &bytes) {
            assert_eq!(wire::encode(&KEY, &h, &b).len(), bytes.len());
        }
    }
    // Whichever nonces the type binds: a hello none, an ack the receiver's, others both.
    let both = [(0, 0), (0, 0x5b), (0x6c, 0x5b)];
    for bytes in [data.to_vec()]
        .into_iter()
        .chain(both.iter().map(|&n| wrap(data, &pair, f(n))))
    {
        if let Ok((h, b)) = node0.open(&bytes) {
            let key = match h.sender {
                wire::CLIENT_SENDER => spec().client_key(),
                s => wire::pair_key(&KEY, CLUSTER, s, 0),
            };
            assert!(
                both.iter()
                    .any(|&n| wire::encode_bound(&key, n, &h, &b) == bytes),
                "accepted bytes re-encode"
            );
        }
    }
    let _ = crate::client::decode_reply(&spec().client_key(), CLUSTER, data);
    let _ = crate::record::decode(data);
    // A range's snapshot (from a peer or the log) and its state records: whatever parses
    // reads back, and its compact form parses to the same records.
    if let Ok(s) = crate::replica::state::RangeSnapshot::decode(data) {
        let _ = s.state();
    }
    let tagged = [&[crate::replica::records::TAG][..], data].concat();
    for b in [data, &tagged[..]] {
        if let Ok(r) = crate::StateRecords::from_bytes(b) {
            let again = crate::StateRecords::from_bytes(&r.to_bytes()).expect("its own form");
            assert!(again == r, "state records read back alike");
        }
    }
}

/// A started node 0 of [`spec`] (its boot record persisted), with a few flows.
pub fn started_node() -> Node {
    let s = spec();
    let flows: Vec<Flow> = (0u32..200)
        .map(|i| i.to_le_bytes().to_vec())
        .filter(|k| s.owner_of(k) == 0)
        .map(|key| Flow {
            key: key.into(),
            node: 1,
            value: crate::Bytes::from_slice(&[1, 2]),
        })
        .collect();
    let mut n = Node::new(s, 0, flows, Vec::new(), 0, 1).expect("valid spec");
    while n.poll_event().is_some() {}
    n.persisted(0);
    n
}

/// Feeds arbitrary bytes to a node as datagrams from a peer and from a client, raw and with a
/// valid header and tag (several epochs, message types from the first byte), then runs its
/// timers: it must not panic, and what it sends must decode.
pub fn handle(data: &[u8]) {
    let mut n = started_node();
    let client = Peer::Client("127.0.0.1:9".parse().expect("address"));
    let pair = wire::pair_key(&KEY, CLUSTER, 1, 0);
    let ck = spec().client_key();
    let mut now = 1;
    let mut counter = 0;
    for part in data.split(|&b| b == 0xfe).take(32) {
        now += 1_000_000;
        n.handle(now, Peer::Node(1), part);
        n.handle(now, client.clone(), part);
        for epoch in [1, 2] {
            // Bound to the nonces the node knows, as many as the type binds.
            counter += 1;
            let nonces = match part.first().copied().unwrap_or(0) % 17 {
                1 => (0, 0),
                2 => (0, n.keys().nonce()),
                _ => (n.keys().peer_nonce(1), n.keys().nonce()),
            };
            let f = Frame {
                ends: (1, 0),
                epochs: (epoch, 1),
                nonces,
                counter,
            };
            n.handle(now, Peer::Node(1), &wrap(part, &pair, f));
        }
        let f = Frame {
            ends: (wire::CLIENT_SENDER, 0),
            epochs: (0, 0),
            nonces: (0, 0),
            counter: 0,
        };
        n.handle(now, client.clone(), &wrap(part, &ck, f));
        n.handle_timeout(now + 50_000_000);
        while let Some(ev) = n.poll_event() {
            // Now and then the data plane refuses an install or a delta.
            match ev {
                crate::Event::FibInsert { key, .. } if key.first() == Some(&0xfd) => {
                    n.install_failed(&key)
                }
                crate::Event::GptDelta(_) if part.first() == Some(&0xfc) => n.gpt_refused(1),
                _ => {}
            }
        }
        n.persisted(now);
        while let Some((to, d)) = n.poll_transmit() {
            assert!(d.len() <= wire::MAX_DATAGRAM);
            let keys = match to {
                Peer::Node(j) => {
                    // The peer as the node knows it.
                    let mut k = wire::Keys::node(&KEY, CLUSTER, 2, j);
                    k.set_nonce(n.keys().peer_nonce(j));
                    k.set_peer_nonce(0, n.keys().nonce());
                    k
                }
                Peer::Client(_) => wire::Keys::client(&ck, CLUSTER),
            };
            assert!(keys.open(&d).is_ok(), "a node sends what its peer parses");
        }
    }
    let _ = n.status();
}
