//! The sans-IO control plane of a ScaleBricks cluster: distributed GPT construction, live updates
//! that never misroute (make before break), per-owner ordered deltas with resync, and restart
//! recovery from a local log.
//!
//! A [`Node`] is a deterministic state machine in quinn's shape: no sockets, threads or clocks.
//! The driver (the node process, or a test's simulated network) feeds it datagrams
//! ([`Node::handle`]) and the time ([`Node::handle_timeout`], nanoseconds from any fixed origin),
//! applies its [`Event`]s to the local data plane in order, and sends what
//! [`Node::poll_transmit`] gives, **draining every event before polling a transmit**: a node
//! acknowledges an operation only in a datagram polled after the events that carry it out, so
//! "the FIB entry is installed before the ack" holds once the driver has applied the events.
//!
//! ```
//! use sb_control::{Bytes, ClusterSpec, Event, Flow, GptSpec, Node, Peer};
//! // A one-node cluster with two flows.
//! let spec = ClusterSpec {
//!     cluster_id: 1,
//!     nodes: 1,
//!     key: [9; 32],
//!     gpt: GptSpec { index_bits: 16, array_bits: 8, value_bits: 1, seed: 5, build_id: 6,
//!                    total_blocks: 2, build_threads: 1 },
//!     ranges: vec![0..2],
//!     key_bytes: 16,
//!     value_bytes: 16,
//! };
//! let flows: Vec<Flow> = (0u8..2)
//!     .map(|i| Flow { key: Bytes::from_elem(i, 16), node: 0, value: Bytes::from_elem(7, 16) })
//!     .collect();
//! let mut node = Node::new(spec, 0, flows, Vec::new(), 0, 42)?;
//! // The driver's loop: events first (log appends, FIB, GPT), then datagrams.
//! let mut log = Vec::new();
//! while let Some(ev) = node.poll_event() {
//!     if let Event::Persist { records } = ev {
//!         log.extend(records); // append + fsync, then:
//!     }
//! }
//! node.persisted(0);
//! while node.poll_event().is_some() {}
//! assert!(node.status().ready);
//! assert_eq!(node.gpt().unwrap().lookup(&[1; 16]), 0);
//! while let Some((_peer, _datagram)) = node.poll_transmit() {}
//! # Ok::<(), sb_control::ControlError>(())
//! ```
//!
//! # Roles
//! The RIB (every key with its handling node and FIB value) is partitioned by GPT block range:
//! node `i` **owns** blocks [`ClusterSpec::ranges`]`[i]` and keeps an `sb_setsep::Updatable`
//! of its keys alone, built with the cluster's block count so that every owner's table has the
//! same shape and fingerprint. Every node is also a **replica** (a full GPT, `sb_setsep::SetSep`,
//! assembled from every owner's piece and kept current by every owner's deltas) and a
//! **handler** (the FIB entries of the flows it handles, fed by every owner).
//!
//! # Construction and restart
//! A node starts in epoch `e` (1 for an empty log, one more than the log's last epoch after a
//! restart) and first persists the epoch (and, for an empty log, its initial flows). It then
//! learns every peer's epoch (hello), sends each peer the FIB entries of the flows that peer
//! handles in its range (the *slice*, ended by a *slice end*), waits until every peer has
//! acknowledged them, then sends every peer its *piece* of the GPT (chunked, see below), waits
//! until every peer has installed it, and finally tells every handler to *prune* the entries of
//! its range that the slice did not install (entries left over by updates the node's previous
//! epoch did not finish). Only then does it take updates. So a GPT never points at a handler that
//! lacks the entry, also across a restart: until a restarted owner's new piece is installed,
//! replicas keep serving its range from the previous epoch's table.
//!
//! When a node learns that a peer started a new epoch, it sends that peer its slice again and
//! its current piece: a restarted node gets its GPT from its peers' pieces and its FIB from the
//! owners, while the others keep forwarding.
//!
//! # Updates
//! A client sends updates to any node, which forwards each to its key's owner
//! (`sb_setsep::block_of_key`). An owner handles its queue one batch at a time (up to
//! [`Tuning::max_batch`] updates, no key twice in a batch):
//! 1. validate against its RIB (an insert of a present key, a change or delete of a missing one,
//!    wrong key or value sizes, a node out of range: rejected with an [`Outcome`]);
//! 2. persist the accepted changes ([`Event::Persist`]) and wait for [`Node::persisted`];
//! 3. install the FIB entry at the new handler (insert; change of handler or of value) and wait
//!    for its acknowledgement;
//! 4. change the owner's table (`Updatable::insert_batch`, `remove`), apply the deltas locally
//!    and send them to every node; wait until every node acknowledged the last one;
//! 5. remove the entry from the old handler (a change that moved the flow; a delete), and answer.
//!
//! A change that keeps the handler only overwrites the handler's FIB entry (no delta). A client
//! is answered once its updates are durable at their owners and installed everywhere (after
//! step 4 of each). While a node is down, updates that need its acknowledgements wait (they
//! complete when it comes back and resyncs).
//!
//! Replicas apply each owner's deltas in that owner's sequence order (out-of-order ones are
//! buffered, duplicates are no-ops) and acknowledge cumulatively. A gap that does not fill
//! within [`Tuning::gap_timeout`], or a delta that does not apply, makes the replica ask the
//! owner for its range's piece, which it installs with the sequence number it is a snapshot of.
//! Owners retransmit whatever is unacknowledged (deltas, FIB operations, pieces, forwards) on a
//! timeout that doubles from [`Tuning::rto`] up to [`Tuning::rto_max`]; the streams retry for as
//! long as it takes, a forward gives up after [`Tuning::forward_tries`] tries (its updates then
//! get [`Outcome::Timeout`]). The first timeout of a delta or FIB stream, and of a forward, is
//! not fixed: it follows the round trips measured on it (RFC 6298's `srtt + 4 rttvar`, never
//! below [`Tuning::rto`]; Karn's rule: nothing sent twice is timed), and a forward that timed out
//! with no measurement to explain it lengthens the next forwards' timeout. A forward's round
//! trip includes its wait in the owner's queue, which under a burst is tens of milliseconds: with
//! a fixed 20 ms a 4-node cluster resent about 1,500 datagrams per 200,000-insert burst, forwards
//! that each owner decoded and dropped again (`cluster.retransmits` of `bench update
//! --cluster`; `docs/bench/control.md`).
//!
//! # Replication ([`Tuning::replicas`] above 1)
//! Each range is a Raft group (raft-rs's `RawNode`, no consensus of our own; [`replica`]) on
//! the nodes [`replica::replicas_of`] names: range `i` on `i, i+1, ...` mod N, node `i` (its
//! *home*) with the higher election priority. The group's leader is the range's owner: an
//! update's changes are the data of a Raft entry, and step 2 above becomes "propose, and wait
//! until the entry is committed in the owner's term", that is until a majority of the range's
//! replicas has it durable (each replica's entries and hard state are records of its own log,
//! made durable before its acknowledgement leaves); steps 3 to 5 are unchanged. Followers apply
//! committed entries to their RIB of the range. A (re)started home first leads its group with
//! every committed entry applied (proposing its initial flows if the group has none), then
//! builds its table from the range's RIB and syncs as in a restart above; a home that finds
//! its group led by another replica (it was cut off or down) is fenced ([`Node::fenced`]) and
//! restarted from its log by its driver; a leader that is not the home hands the leadership
//! back once the home has caught up. Not yet: a non-home leader does not serve the range's
//! updates (they wait for the home, as without replication). A node whose log was lost
//! rejoins: its peers tell it the epoch they know of it (message type 17) and it starts one
//! above; its groups withhold their votes until they follow a leader again and get the range's
//! state from it (the `rejoin` module of `node`, which says what is left: it keeps its
//! replica id). While a home is gone, the flows of its
//! range that it handled are served by a *stand-in*, the first live replica of the range: it
//! installs them from its replica of the RIB, and every node's data plane sends the GPT's
//! answers naming the gone node there ([`Event::StandIns`]; the `standin` module of `node`).
//!
//! A node restarting while an owner is gone (failure detection, below) gets that owner's GPT
//! piece and its FIB slice of the owner's range from the range's other replicas (message
//! types 15 and 16; the `relay` module of `node`): the piece as a replica's GPT holds it, the
//! slice from the group's leader's RIB once it has applied every committed entry; so it
//! becomes ready and acknowledges the other owners' deltas (without a GPT it could not, and
//! every owner's batches waited for it). This needs a live replica of the range that kept
//! its GPT since the owner left (with five nodes and two down, the three others do; with
//! fewer, the survivors lack the lease majority to declare anyone gone, on three nodes they
//! restart too, and they wait for the owner),
//! and replication: with one replica per range nothing stands in for a gone owner.
//!
//! # Failure detection ([`Tuning::lease`], default 500 ms)
//! Heartbeats between every pair of nodes (message type 14) give each node leases from its
//! peers; an owner stops waiting for a peer (delta acknowledgements, slices, pieces; an install
//! there is refused with [`Outcome::HandlerDown`]; a forward to it answers
//! [`Outcome::Timeout`] at once) once neither it nor a majority of the nodes heard that peer
//! for a lease. A node that may be declared gone within 2/5 of a lease (it lost its safe
//! lease, [`Node::safe_lease`]) is a suspect until every peer said it declared nothing, and
//! it is fenced ([`Node::fenced`]) once a peer says it declared it gone, so that a GPT an
//! owner stopped updating is not used for long (the argument is in the `liveness` module).
//!
//! # Wire format (protocol version 5)
//! Every datagram is at most [`wire::MAX_DATAGRAM`] bytes (60 KiB: UDP over the fabric, whose
//! MTU is 9000; the kernel fragments). All integers are little-endian.
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | magic `SBCP` |
//! | 4 | version (4) |
//! | 5 | message type |
//! | 6..8 | sender: node id, or `0xffff` for a client |
//! | 8..10 | receiver: node id, or `0xffff` for a client |
//! | 10..18 | cluster id |
//! | 18..22 | sender's epoch (0 for a client) |
//! | 22..26 | receiver's epoch as the sender knows it (0: unknown) |
//! | 26..34 | message id (a client's request sequence number, a forward's id) |
//! | 34..42 | counter: between nodes 1, 2, ... per (sender's start, receiver), checked against the receiver's replay window; 0 between a client and a node |
//! | 42..n-16 | body |
//! | n-16..n | tag: HMAC-SHA256 over the sender's nonce u64, the receiver's nonce u64 (each 0 where the type binds none: a hello both, a hello ack the sender's, a client's datagram both) and bytes 0..n-16, with the pair key of the two nodes, or the client key between a client and a node ([`wire`]: keys, nonces and threat model), first 16 bytes |
//!
//! An *update* is: op u8 (1 insert, 2 change, 3 delete), node u16, key length u8, key,
//! value length u8, value. Bodies by type:
//!
//! | type | name | body |
//! |---|---|---|
//! | 1 | hello | the sender's per-boot nonce u64 |
//! | 2 | hello ack | the sender's per-boot nonce u64 |
//! | 3 | client request | client id u64, time u64 (ns since the Unix epoch), count u16, updates |
//! | 4 | client reply | count u16, one [`Outcome`] code u8 per update |
//! | 5 | forward | count u16, updates |
//! | 6 | forward reply | count u16, codes |
//! | 7 | deltas | first sequence number u64 (>= 1), count u16, (length u16, serialized `Delta`) each |
//! | 8 | delta ack | last sequence number applied u64 (of the owner epoch named in the header) |
//! | 9 | piece chunk | snapshot sequence number u64, total length u32, index u32, count u32, bytes |
//! | 10 | piece request | snapshot sequence number u64, count u16, missing chunk indexes u32 (none: a fresh piece) |
//! | 11 | FIB | first stream number u64 (>= 1), the owner's last ack u64, count u16, items: 1 install (key length u8, key, value length u8, value), 2 remove (key length u8, key), 3 slice end, 4 prune, 5 reset, 6 guest install (the epoch u32 of the gone home whose range the key is in, then as 1: sent by the node standing in for it, the `guest` module of `node`), 7 guest remove (that epoch u32, then as 2) |
//! | 12 | FIB ack | last stream number applied u64, count u16, stream numbers u64 of the installs refused (a full FIB) |
//! | 13 | Raft | range (its group) u32, the sender's message number u64, chunk index u16, chunk count u16, bytes of the protobuf `eraftpb.Message` ([`replica::transport`]) |
//! | 14 | heartbeat | the sender's clock u64, the last clock value the receiver sent it u64, length u8 (at most 32), bitmap of the nodes the sender heard within [`Tuning::lease`], a pause the sender announces in ms u32 (0: none; [`Node::announce_pause`]), u8 1 if the sender declared the receiver gone in its current epoch, else 0 (failure detection) |
//! | 15 | relay request | the gone owner u16: the sender lacks its piece or its FIB slice of the owner's range |
//! | 16 | relay | the gone owner u16, the owner's epoch u32, its last delta in the piece u64, total length u32, index u32, count u32, bytes of: slice included u8, piece length u32, piece, count u32, (key, FIB value) at the cluster's widths each |
//! | 17 | epoch taken | the receiver's epoch the sender knows u32: the answer to a hello refused as `stale_epoch` or `epoch_reused` (a lost log); its tag binds that hello's nonce as the receiver's (the `rejoin` module of `node`) |
//!
//! A receiver checks the length, magic, version, cluster id, receiver, tag (with its sender's
//! key and the nonces of both incarnations as it knows them) and the type against that key
//! before it reads anything else, then (from a node) the sender's epoch and the counter
//! against its replay window; a datagram that fails, or whose sender's epoch is older than
//! one it has seen, or (but for a hello) that names another epoch of the receiver, changes nothing and is counted in
//! [`Status::dropped`] by reason. A piece is `sb_setsep::Piece::to_bytes` cut into `count` chunks of
//! `ceil(total / count)` bytes (at most [`CHUNK_BYTES`]), the last one shorter; deltas are `sb_setsep::Delta::to_bytes`, each owner numbering its
//! own 1, 2, ... per epoch; FIB stream numbers count per (owner epoch, handler epoch).
//!
//! # Log records
//! [`Event::Persist`] hands out records of the node's own log, replayed in order by
//! [`Node::new`] after a restart: type u8, then 1 epoch (u32); 2 initial flows (count u32, then
//! key length u8, key, node u16, value length u8, value each); 3 end of the initial flows;
//! 4 changes (first change number u64, count u32, updates). A log without record 3 is treated
//! as empty (its initial flows were not all durable). With replication ([`Tuning::replicas`]
//! above 1) records 2 to 4 are the data of the range's Raft entries instead, and the node's
//! log holds its epoch and, per group it is a replica of, records 5 (entries), 6 (hard state)
//! and 7 (snapshot) ([`replica::storage`]). A node whose log was lost ([`Node::mark_log_lost`],
//! [`Node::rejoin_records`]) also writes record 8 (its log was lost: its groups withhold their
//! votes) and, per group that followed a leader again since, record 9 (the range u32).
//! Record 10 is a change of the range's PFCP state records ([`Node::put_state`]): count u32,
//! then key u64, length u32 (at most 64 KiB), bytes each, kept; count u32, then key u64 each,
//! removed. It is the data of a Raft entry of the range's group with replication, a record
//! of the node's log without; a checkpoint carries the records as one record 10 (or in the
//! range's snapshot: [`replica::state`]).
//!
//! [`Node::checkpoint`] gives, at a quiet moment (serving, no batch in flight, every event
//! taken), the records that replace the log so far: the epoch, then the range's RIB as records
//! 2 and 3, an empty record 4 carrying the change number on and the range's PFCP state
//! records as records 10; with replication, per group a
//! record 7 (the group compacted behind a snapshot of the range's state at the applied index),
//! its entries after it (5) and its hard state (6). Replayed alone, they give the state the
//! whole log gives (`tests/checkpoint.rs`: the simulation replaces logs by them).
//!
//! # Cost
//! The owner's work per update is one key hash, a group re-search (only for value bits whose
//! hash index stopped separating), a log record entry, a FIB operation to the new handler and a
//! delta of about 38 bytes to every node, each datagram authenticated; replicas copy a record.
//! `cargo run --release -p sb-control --example owner_rate -- 1000000 4 100000` (a 4-node
//! cluster in one process, 1M flows, 100K updates owned by node 0: 40% inserts, 40% changes,
//! 20% deletes; the owner's thread CPU time; shared 2-core VM, medians of 3 runs):
//! about 92 K updates/s per core with owner batches of 1, 236 K with 16 and 317 K with 256.
//!

mod client_api;
mod fixed;
mod node;
mod record;
pub mod replica;
pub mod wire;

#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod sim;

pub use node::{Move, Node, Tuning};
pub use replica::records::StateRecords;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A key or a FIB value: up to 16 bytes (an IPv6 UE address; a TEID with an IPv4 eNodeB
/// address) are kept inline, longer ones on the heap. An update passes through a dozen places
/// (decoded at the node a client sent it to and at the owner, the RIB, the batch, the FIB
/// stream, the handler's FIB): with `Vec<u8>` each was an allocation (`scripts/profile-update.sh`
/// and `docs/bench/control.md` count them).
pub type Bytes = smallvec::SmallVec<[u8; 16]>;

/// A set of keys ([`Event::FibPrune`]).
pub type KeySet = std::collections::HashSet<Bytes, foldhash::fast::FixedState>;

/// A node's index in the cluster (0-based).
pub type NodeId = u16;

/// Time as the driver gives it: nanoseconds from any fixed origin (never going backwards).
pub type Nanos = u64;

/// Bytes of a piece chunk's data at most.
pub const CHUNK_BYTES: usize = wire::MAX_DATAGRAM - wire::OVERHEAD - 20;

/// The largest GPT piece a node assembles from chunks (a peer's claim above it is dropped before
/// anything is allocated: a piece of a GPT of a billion keys is under 1 GiB).
pub const MAX_PIECE_BYTES: usize = 1 << 30;

/// Who a datagram comes from or goes to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// A node of the cluster.
    Node(NodeId),
    /// A client (`scalebricks update`) at this address.
    Client(std::net::SocketAddr),
}

/// The GPT's shape: what every owner builds its table with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GptSpec {
    /// Hash index bits (8 or 16).
    pub index_bits: u8,
    /// Bit array bits (8 or 16).
    pub array_bits: u8,
    /// Bits per value: the cluster's nodes must fit.
    pub value_bits: u8,
    /// Seed of the key hash.
    pub seed: u64,
    /// Build id (every owner's table has the same fingerprint).
    pub build_id: u64,
    /// Blocks of the table.
    pub total_blocks: u64,
    /// Threads of an owner's table build (0: all cores).
    #[serde(default)]
    pub build_threads: usize,
}

impl GptSpec {
    /// The build options every owner uses.
    pub fn build_options(&self) -> sb_setsep::BuildOptions {
        sb_setsep::BuildOptions {
            config: sb_setsep::Config {
                index_bits: self.index_bits,
                array_bits: self.array_bits,
            },
            value_bits: self.value_bits,
            threads: self.build_threads,
            seed: self.seed,
            build_id: self.build_id,
            capacity: self.total_blocks.saturating_mul(1024),
            ..sb_setsep::BuildOptions::default()
        }
    }
}

/// What every node of a cluster agrees on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// The cluster's id (in every datagram).
    pub cluster_id: u64,
    /// Number of nodes.
    pub nodes: u16,
    /// The cluster's master secret: every node derives its pair keys and the client key
    /// from it ([`wire::Keys`]); only the nodes hold it (a client holds the client key,
    /// [`ClusterSpec::client_key`]).
    pub key: [u8; 32],
    /// The GPT's shape.
    pub gpt: GptSpec,
    /// `ranges[i]`: the GPT blocks node `i` owns (contiguous, covering `0..total_blocks`).
    pub ranges: Vec<std::ops::Range<u64>>,
    /// Bytes of a key (16: a UE address).
    pub key_bytes: usize,
    /// Bytes of a FIB value (opaque here).
    pub value_bytes: usize,
}

impl ClusterSpec {
    /// Checks the spec's consistency.
    pub fn validate(&self) -> Result<(), ControlError> {
        let bad = |s: &'static str| Err(ControlError::BadSpec(s));
        if self.nodes == 0 || self.nodes == wire::CLIENT_SENDER {
            return bad("node count out of range");
        }
        if self.ranges.len() != self.nodes as usize {
            return bad("one range per node");
        }
        let mut next = 0;
        for r in &self.ranges {
            if r.start != next || r.end <= r.start {
                return bad("ranges must be non-empty, contiguous and in node order");
            }
            next = r.end;
        }
        if next != self.gpt.total_blocks {
            return bad("ranges must cover every block");
        }
        if !(sb_setsep::MIN_KEY_LEN..=sb_setsep::MAX_KEY_LEN).contains(&self.key_bytes) {
            return bad("key bytes out of range (4..=64)");
        }
        if self.value_bytes > 255 {
            return bad("value bytes out of range (0..=255)");
        }
        if !(1..=16).contains(&self.gpt.value_bits)
            || (self.gpt.value_bits < 16 && (self.nodes as u32) > 1u32 << self.gpt.value_bits)
        {
            return bad("value bits cannot name every node");
        }
        sb_setsep::Config {
            index_bits: self.gpt.index_bits,
            array_bits: self.gpt.array_bits,
        }
        .validate()
        .map_err(|_| ControlError::BadSpec("unsupported GPT config"))?;
        if sb_setsep::num_blocks(self.gpt.total_blocks.saturating_mul(1024))
            != self.gpt.total_blocks
        {
            return bad("total blocks too large");
        }
        Ok(())
    }

    /// The client key (`wire::client_key` of the master secret): what a client signs its
    /// requests with. It cannot make a node's message.
    pub fn client_key(&self) -> [u8; 32] {
        wire::client_key(&self.key, self.cluster_id)
    }

    /// Node `me`'s keys: a pair key per peer and the client key.
    pub fn node_keys(&self, me: NodeId) -> wire::Keys {
        wire::Keys::node(&self.key, self.cluster_id, self.nodes, me)
    }

    /// The node owning `key`'s block.
    pub fn owner_of(&self, key: &[u8]) -> NodeId {
        let b = sb_setsep::block_of_key(key, self.gpt.seed, self.gpt.total_blocks);
        self.owner_of_block(b)
    }

    /// Whether a prune of owner `owner` that keeps `keep` ([`Event::FibPrune`]) removes `key`:
    /// a key of `owner`'s range that it did not send again.
    pub fn pruned(&self, owner: NodeId, keep: &KeySet, key: &[u8]) -> bool {
        self.owner_of(key) == owner && !keep.contains(key)
    }

    /// The node owning block `b`.
    pub fn owner_of_block(&self, b: u64) -> NodeId {
        // Ranges are contiguous and in order: binary search on the starts.
        let i = self.ranges.partition_point(|r| r.start <= b);
        i.saturating_sub(1) as NodeId
    }
}

/// A RIB entry: the flow's key, its handling node and its FIB value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    /// The key (a UE address).
    pub key: Bytes,
    /// The handling node.
    pub node: NodeId,
    /// The FIB value (opaque: a tunnel).
    pub value: Bytes,
}

/// An update's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A new key.
    Insert,
    /// A present key's handling node and/or value.
    Change,
    /// Remove a present key.
    Delete,
}

/// One update of the RIB. A delete's `node` and `value` are ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    /// What to do.
    pub op: Op,
    /// The key.
    pub key: Bytes,
    /// The (new) handling node.
    pub node: NodeId,
    /// The (new) FIB value.
    pub value: Bytes,
}

/// What became of an update (its code on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum Outcome {
    /// Durable at its owner and installed.
    Applied = 0,
    /// Insert of a key that is present.
    Exists = 1,
    /// Change or delete of a key that is absent.
    Missing = 2,
    /// The key is not [`ClusterSpec::key_bytes`] long.
    BadKeyLength = 3,
    /// The value is not [`ClusterSpec::value_bytes`] long.
    BadValueLength = 4,
    /// The handling node is not a node of the cluster.
    NodeOutOfRange = 5,
    /// The owner did not answer in time: the update may or may not have been applied.
    Timeout = 6,
    /// The owner's table refused the key (two keys with one 128-bit hash).
    Internal = 7,
    /// The owner's queue is full.
    Busy = 8,
    /// The handling node's FIB is full: nothing was installed, logged as undone, and no GPT
    /// changed.
    FibFull = 9,
    /// The request is older than the node's start, [`Tuning::request_max_age`] or its
    /// client's window, or a replay of one the node no longer remembers: not applied (by
    /// this node's incarnation: a request sent before the node restarted may have been).
    Stale = 10,
    /// The handling node is down (failure detection, [`Tuning::lease`]): nothing was
    /// installed, logged as undone, and no GPT changed.
    HandlerDown = 11,
    /// The key's owner is down (failure detection) and the update needs it: an insert, or a
    /// change of the key's handler, in a gone node's range (its stand-in applies changes
    /// that keep the handler, and deletions: the `guest` module of `node`). Not applied.
    OwnerDown = 12,
}

impl Outcome {
    /// The wire code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The outcome of a wire code.
    pub fn from_code(c: u8) -> Option<Outcome> {
        use Outcome::*;
        Some(match c {
            0 => Applied,
            11 => HandlerDown,
            1 => Exists,
            2 => Missing,
            3 => BadKeyLength,
            4 => BadValueLength,
            5 => NodeOutOfRange,
            6 => Timeout,
            7 => Internal,
            8 => Busy,
            9 => FibFull,
            10 => Stale,
            12 => OwnerDown,
            _ => return None,
        })
    }

    /// A short stable name.
    pub fn name(self) -> &'static str {
        use Outcome::*;
        match self {
            Applied => "applied",
            Exists => "exists",
            Missing => "missing",
            BadKeyLength => "bad_key_length",
            BadValueLength => "bad_value_length",
            NodeOutOfRange => "node_out_of_range",
            Timeout => "timeout",
            Internal => "internal",
            Busy => "busy",
            FibFull => "fib_full",
            Stale => "stale",
            HandlerDown => "handler_down",
            OwnerDown => "owner_down",
        }
    }
}

/// An effect on the local data plane, in order.
#[derive(Debug)]
pub enum Event {
    /// Append to the local log; once committed (fsync), call [`Node::persisted`].
    Persist {
        /// The records, in order.
        records: Vec<Vec<u8>>,
    },
    /// This node handles `key` now (insert or overwrite its FIB entry).
    FibInsert {
        /// The key.
        key: Bytes,
        /// The FIB value.
        value: Bytes,
    },
    /// This node no longer handles `key` (without [`Tuning::fib_map`], also for a key it does
    /// not hold: nothing to remove then).
    FibRemove {
        /// The key.
        key: Bytes,
    },
    /// Only without [`Tuning::fib_map`]: owner `owner` restarted and has sent this node its
    /// slice again; every key [`ClusterSpec::pruned`] names (of `owner`'s range, not in
    /// `keep`) is no longer this node's to handle (remove it as [`Event::FibRemove`] would).
    FibPrune {
        /// The owner.
        owner: NodeId,
        /// The keys it sent since its restart.
        keep: KeySet,
    },
    /// Apply to the live GPT (`SetSep::apply_owner_delta`).
    GptDelta(sb_setsep::Delta),
    /// Replace a range of the live GPT (`SetSep::install_piece`): a resync, or a restarted
    /// owner's new piece.
    GptPiece(sb_setsep::Piece),
    /// The whole GPT, assembled from every owner's piece: the first GPT this node has (later
    /// changes come as [`Event::GptDelta`] and [`Event::GptPiece`]).
    GptInstall(Box<sb_setsep::SetSep>),
    /// With replication: per node, the node standing in for it (`None`: none; always `None`
    /// for a node that is not gone): the data plane's GPT lookups that find node `i` go to
    /// `stand_ins[i]` instead (`LiveSetSep::set_redirects`). Comes when it changes, and again
    /// after a [`Event::GptInstall`] (apply it to the new table).
    StandIns(Vec<Option<NodeId>>),
    /// The PFCP state change of this ticket ([`Node::put_state`]) is durable.
    StateDurable(u64),
    /// The PFCP state change of this ticket, of another range ([`Node::put_state_for`]), was
    /// not made durable: a new leader of that range's group dropped its entry. Hand it again
    /// (to the node that leads the group now).
    StateDropped(u64),
}

/// Per owner, what this node's replica has applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OwnerStatus {
    /// The owner.
    pub owner: NodeId,
    /// The owner's epoch the replica follows (0: none yet).
    pub epoch: u32,
    /// The owner's last delta applied.
    pub applied_seq: u64,
    /// Deltas received but not applied (waiting for a gap).
    pub lag: u64,
    /// Resyncs of this range (pieces installed after the first).
    pub resyncs: u64,
    /// Whether this node has the owner's whole FIB slice for it.
    pub slice_done: bool,
    /// Keys of the owner's range in this node's replica: the count its last piece or delta
    /// applied here carried (this node's own range: its RIB's keys).
    pub keys: u64,
}

/// Bytes a node's control plane holds, by structure: what grows with the keys beside the GPT
/// replica and the FIB slice. Counted by the structures themselves: each map's hash table
/// from its capacity and its entries as held; the owner's table's RIB as the bytes its slab
/// has handed out ([`sb_setsep::RibBytes::touched`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// The owner's changes validated and logged but not yet in its table (the batch in
    /// flight). Its RIB itself is the table's ([`Memory::table_rib`]).
    pub rib: usize,
    /// The handler's FIB map: the keys it handles and their values (what its FIB slice holds).
    pub fib_map: usize,
    /// The owner's RIB, its table's: its range's keys by GPT group (to re-solve a group when
    /// a key comes or goes), each with its handling node (the table's value) and its FIB value.
    pub table_rib: usize,
    /// Of which the entries themselves ([`sb_setsep::RibBytes::entries`]).
    pub table_rib_entries: usize,
    /// The owner's own table (the GPT sized for the cluster, its range's blocks filled).
    pub table: usize,
    /// Completed client requests and forwards remembered to answer their retransmissions
    /// (at most [`crate::Tuning::remembered`] of each, the oldest forgotten first): their
    /// maps, queues and replies. Bounded: it does not grow with the keys beyond that.
    pub remembered: usize,
    /// What the owner holds for its peers: the deltas and FIB stream items they have not
    /// acknowledged, and their queues ([`Node::peer_stream_bytes`]); per peer gone, at most
    /// about [`crate::Tuning::peer_backlog_bytes`].
    pub peer_streams: usize,
    /// The PFCP state records kept (`Node::put_state`): this node's range's and its replicas'
    /// of other ranges, as [`StateRecords::kept_bytes`] counts them (the kept forms and the
    /// templates; not the maps' nodes).
    pub state_records: usize,
    /// The Raft groups' logs in memory ([`replica::storage::RaftStore::held_bytes`]): the
    /// entries since each group's snapshot (compacted by the node's checkpoint, and behind
    /// what every replica has past [`Tuning::raft_trim_entries`]) and the snapshots' data
    /// while it is held (until the checkpoint wrote it, or while raft wants to send it).
    pub raft_logs: usize,
}

/// A node's state for `cluster status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    /// This node.
    pub node: NodeId,
    /// Its epoch.
    pub epoch: u32,
    /// GPT assembled and every owner's FIB slice received.
    pub ready: bool,
    /// The owner's phase: boot, sync_fib, pieces, serving.
    pub phase: String,
    /// `SetSep::content_digest` of the replica, hex (none before assembly).
    pub gpt_digest: Option<String>,
    /// Keys of the replica: the sum of the owners' `keys` (0 before assembly).
    pub gpt_keys: u64,
    /// Per owner.
    pub owners: Vec<OwnerStatus>,
    /// Sequence number of this node's own table (its deltas this epoch).
    pub own_seq: u64,
    /// Keys of this node's RIB (its range).
    pub rib_keys: usize,
    /// Entries of this node's FIB slice.
    pub fib_entries: usize,
    /// Updates waiting in this owner's queue.
    pub queued: usize,
    /// Updates applied by this owner (this process).
    pub applied: u64,
    /// Updates rejected by this owner, by outcome.
    pub rejected: BTreeMap<String, u64>,
    /// Datagrams dropped, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Datagrams sent that were retransmissions.
    pub retransmits: u64,
    /// Backlogs this owner dropped for peers gone too long ([`crate::Tuning::peer_backlog_bytes`]):
    /// each such peer is resynced (FIB slice and piece) when it is heard again.
    pub backlogs_dropped: u64,
    /// FIB installs refused (a full table) that no update could be rejected for: a slice
    /// sent at a start, at this node as a handler or reported to it as an owner (the node is
    /// sized below its share). Updates whose install was refused count in `rejected` as
    /// `fib_full`.
    pub fib_refused: u64,
    /// Flows of this owner's range moved off nodes that failure detection declared gone, to
    /// live ones ([`crate::Tuning::evacuate`]).
    pub flows_moved: u64,
    /// Of those, given back to their node once it returned.
    pub flows_given_back: u64,
    /// Moves waiting or in flight.
    pub moves_pending: usize,
    /// Flows this node installed to stand in for gone nodes (their own range's flows that
    /// they handled; the `standin` module of `node`).
    pub stand_in_flows: u64,
    /// Updates of gone nodes' ranges this node applied as their stand-in (changes that keep
    /// the handler, deletions; the `guest` module of `node`).
    #[serde(default)]
    pub stand_in_updates: u64,
    /// Times this owner stopped leading its range's group with no other replica leading
    /// (raft's check-quorum: its followers did not answer within an election timeout); it
    /// waited to lead again, taking no update meanwhile, instead of restarting.
    #[serde(default)]
    pub step_downs: u64,
    /// Times this incarnation lost its safe lease (failure detection: too few peers' leases
    /// left), and of those, the times every peer then said it had not declared it gone, so
    /// that it went on without a fence.
    #[serde(default)]
    pub lease_losses: u64,
    #[serde(default)]
    pub lease_recoveries: u64,
    /// Stand-ins' FIB items this handler dropped as late: the range's home was back.
    #[serde(default)]
    pub guest_items_stale: u64,
    /// Some range's group at this node withholds its votes: its log was lost and it has not
    /// followed a leader since (the `rejoin` module of `node`).
    pub rejoining: bool,
    /// Vote requests this incarnation's groups ignored while withholding.
    pub votes_withheld: u64,
    /// Ticks this incarnation's followers held their election clocks for their range's live
    /// home (`replica::group::Group::tick`: a slow home is not replaced).
    pub election_ticks_held: u64,
    /// Flows moved off a gone node and not given back (yet).
    pub moved_away: usize,
    /// Bytes by structure.
    pub memory: Memory,
}

/// Why a node cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The cluster spec is inconsistent.
    #[error("bad cluster spec: {0}")]
    BadSpec(&'static str),
    /// `me` is not a node of the cluster.
    #[error("node {0} is not in the cluster")]
    NoSuchNode(NodeId),
    /// An initial flow is malformed or not in this node's range.
    #[error("bad initial flow {index}: {reason}")]
    BadFlow {
        /// Its index.
        index: usize,
        /// Why.
        reason: &'static str,
    },
    /// A log record does not parse.
    #[error("bad log record {index}: {reason}")]
    BadRecord {
        /// Its index in the recovered records.
        index: usize,
        /// Why.
        reason: &'static str,
    },
    /// A [`Tuning`] value is out of range.
    #[error("bad tuning: {0}")]
    BadTuning(&'static str),
    /// Building the owner's table failed.
    #[error("cannot build the owner's table: {0}")]
    Build(#[from] sb_setsep::BuildError),
    /// The node does not serve its range now (booting, or fenced: to be restarted).
    #[error("the node does not serve its range now")]
    NotServing,
    /// A state record is over 64 KiB.
    #[error("a state record is over 64 KiB")]
    StateTooLong,
}

/// The client side of the protocol: what `scalebricks update` sends and reads over UDP.
pub mod client {
    pub use crate::client_api::*;
}
