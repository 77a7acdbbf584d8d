//! The control protocol's datagrams: header, bodies, authentication tag (the format is specified
//! in the crate documentation). [`Keys::open`] checks a datagram once (length, magic, version,
//! cluster id, receiver, tag with the sender's key, the type against that key, then the body)
//! and never panics; [`Keys::seal`] writes one.
//!
//! # Keys and threat model (protocol version 5)
//! `cluster up` makes a random 32-byte **master secret** per cluster (`control.json`, mode
//! 0600, read by the node processes only). Every node derives from it, and stores nothing
//! else: the **pair key** of nodes `i` and `j`, `HMAC-SHA256(master, "sbcp-v2 node pair" ||
//! cluster id || min(i,j) || max(i,j))` ([`pair_key`]), and the **client key**,
//! `HMAC-SHA256(master, "sbcp-v2 client" || cluster id)` ([`client_key`]), which `cluster up`
//! also writes to `client.json` (mode 0600): the one thing `scalebricks update` reads (the
//! derivation labels are those of version 2; version 3 changed the datagram, not the keys;
//! version 4 added two FIB items; version 5 a pause in the heartbeat).
//! A node's PFCP endpoint hands its requests to its own control plane in-process, as a
//! client, with the client key. Every datagram carries its sender and receiver (a node id,
//! or `0xffff` for a client), the cluster id, both ends' epochs and, between nodes, a
//! **counter** in its header, all under the tag: HMAC-SHA256 with the key of the (sender,
//! receiver) pair over two **per-boot nonces** and the datagram, truncated to 16 bytes.
//!
//! **Incarnations.** Each node process draws a random 64-bit nonce when it starts
//! ([`Keys::set_nonce`]) and sends it in its hellos and hello acks; a node learns a peer's
//! from those (authenticated) and binds both nonces, the sender's and the receiver's, into
//! the tag of every other datagram between them (a hello binds none, a hello ack its
//! receiver's: it answers that incarnation's hello; client datagrams none). So a datagram
//! captured in an earlier incarnation of either end fails the tag (`bad_tag`) even where the
//! epochs match, as they do after a node lost its log (its epoch starts at 1 again); a hello
//! of an epoch the receiver knows with another nonce is refused (`epoch_reused`).
//! **Replay window.** A node numbers its datagrams to each peer 1, 2, ... from its start
//! ([`Keys::next_counter`]); the receiver keeps, per peer incarnation, the newest counter
//! and which of the [`WINDOW`] (1024) before it it has seen ([`Window`]), and refuses a
//! datagram seen before (`replayed`: a replay, or the network's duplicate) or older than the
//! window (`replay_too_old`). The streams' own sequence numbers stay (they order and
//! acknowledge); the window makes every kind single-use, heartbeats, piece and relay
//! requests and Raft messages included. A retransmission is sealed anew with a new counter.
//!
//! **Key rotation** (`scalebricks cluster rotate-key`): a new master secret in `control.json`
//! and the client key derived from it in `client.json`, each replaced atomically. Every node
//! process looks at `control.json` every 250 ms and, on a new master, takes it without a
//! restart ([`Keys::rotate`], `Node::rotate_key`; its PFCP endpoint with it): the previous
//! client key is refused at once; the previous pair keys are still sealed with for
//! [`KEY_SWITCH`] (2 s: every node has read the new master by then, so none receives a
//! datagram made with a key it lacks) and still accepted for [`KEY_GRACE`] (30 s:
//! retransmissions of datagrams made before the switch). Epochs, nonces, counters, windows
//! and all state stay. A node down during the rotation reads the new master when it starts.
//! The old master is of no use to anyone afterwards; a node's host that held it could
//! still read it from its disk's old copy, so rotate after removing a compromised node.
//!
//! What someone on the control network can do with a captured datagram: send it again to its
//! receiver (refused: `replayed`, `replay_too_old`; after either end restarted, `bad_tag`;
//! anything of an older epoch of the sender is `stale_epoch`); send it to another node, which
//! refuses it (`misdirected`; with its receiver rewritten, `bad_tag`); send a client request
//! again: its id is answered from memory, or, once forgotten, refused (`request_replayed`),
//! after the node restarted it is refused as stamped before the node's start
//! (`request_before_start`), much later as `request_too_old`. A client request's reply is
//! authenticated and goes to the address the request came from. What a holder of the client
//! key can do: any update (it is the update interface), but no node's message: the client
//! key authenticates only client requests and replies (`kind_not_allowed`), and the master
//! and pair keys do not follow from it.
//! What it cannot protect against: a node's host (every node holds the master secret, so one
//! compromised node is the cluster's), reading the traffic (nothing is encrypted), and
//! dropping or delaying it.
//! Drops are counted by these names in [`crate::Status::dropped`] (`dropped` of `cluster
//! status`, the metrics' drops by reason).

use crate::{Op, Update};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Magic of every datagram.
pub const MAGIC: &[u8; 4] = b"SBCP";
/// Protocol version.
pub const VERSION: u8 = 5;
/// Bytes of the header.
pub const HEADER_LEN: usize = 42;
/// Counters a receiver's replay window ([`Window`]) spans: a datagram more than this many
/// behind the newest of its sender is refused (`replay_too_old`), one seen before within it
/// (`replayed`).
pub const WINDOW: u64 = 1024;
/// Bytes of the authentication tag (HMAC-SHA256 truncated).
pub const TAG_LEN: usize = 16;
/// The largest datagram this crate sends or accepts (a UDP payload of 60 KiB).
pub const MAX_DATAGRAM: usize = 60 * 1024;
/// The `sender` of a client's datagrams (and the `receiver` of a node's replies to one).
pub const CLIENT_SENDER: u16 = 0xffff;

/// Message types (the header's type byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A node announces its epoch.
    Hello = 1,
    /// The answer to a hello.
    HelloAck = 2,
    /// A client's updates.
    ClientRequest = 3,
    /// The node's answer to a client.
    ClientReply = 4,
    /// Updates forwarded by the node a client asked to their owner.
    Forward = 5,
    /// The owner's answer to a forward.
    ForwardReply = 6,
    /// An owner's GPT deltas.
    Deltas = 7,
    /// A replica's cumulative acknowledgement of an owner's deltas.
    DeltaAck = 8,
    /// A chunk of an owner's GPT piece.
    PieceChunk = 9,
    /// A replica asks an owner for a piece or for chunks of it.
    PieceRequest = 10,
    /// FIB operations from an owner to a handling node.
    Fib = 11,
    /// A handling node's cumulative acknowledgement of FIB operations.
    FibAck = 12,
    /// A chunk of a Raft message of one range's group ([`crate::replica`]).
    Raft = 13,
    /// A node's heartbeat: failure detection and leases ([`crate::Tuning::lease`]).
    Heartbeat = 14,
    /// A node without a gone owner's piece or FIB slice asks a replica of the owner's range
    /// for them ([`Body::RelayRequest`]).
    RelayRequest = 15,
    /// A chunk of a replica's answer for a gone owner ([`Body::Relay`]).
    Relay = 16,
    /// A node refused a hello whose epoch is not above the one it knows of its sender (a
    /// lost log): the epoch it knows ([`Body::EpochTaken`]).
    EpochTaken = 17,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            1 => Hello,
            2 => HelloAck,
            3 => ClientRequest,
            4 => ClientReply,
            5 => Forward,
            6 => ForwardReply,
            7 => Deltas,
            8 => DeltaAck,
            9 => PieceChunk,
            10 => PieceRequest,
            11 => Fib,
            12 => FibAck,
            13 => Raft,
            14 => Heartbeat,
            15 => RelayRequest,
            16 => Relay,
            17 => EpochTaken,
            _ => return None,
        })
    }
}

/// The fixed header of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message type.
    pub kind: Kind,
    /// Sending node, or [`CLIENT_SENDER`].
    pub sender: u16,
    /// The node it is for, or [`CLIENT_SENDER`] (a reply to a client). Authenticated: a
    /// datagram captured on its way to one node is refused by every other.
    pub receiver: u16,
    /// The cluster's id.
    pub cluster_id: u64,
    /// The sender's epoch (incarnation); 0 for a client.
    pub sender_epoch: u32,
    /// The receiver's epoch as the sender knows it; 0 when unknown (hello, client).
    pub receiver_epoch: u32,
    /// Message id: a client's request sequence number, a forward's id; otherwise informative.
    pub msg_id: u64,
    /// Between nodes: the datagram's number, 1, 2, ... per (sender incarnation, receiver)
    /// ([`Keys::next_counter`]), checked against the receiver's replay window
    /// ([`Keys::accept_counter`]); 0 between a client and a node (a client request's
    /// freshness is its time and sequence number).
    pub counter: u64,
}

/// One FIB operation of an owner's stream to a handling node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FibItem {
    /// Install (or overwrite) the entry.
    Install {
        /// The key.
        key: crate::Bytes,
        /// The FIB value.
        value: crate::Bytes,
    },
    /// Remove the entry.
    Remove {
        /// The key.
        key: crate::Bytes,
    },
    /// The owner's full slice for this node has been sent (the node is in sync with the owner).
    SliceEnd,
    /// Remove every entry of the owner's range not installed since the owner's epoch began
    /// (or since its last [`FibItem::Reset`]).
    Prune,
    /// The owner dropped this stream's items before this one unacknowledged (it held more
    /// than [`crate::Tuning::peer_backlog_bytes`] for this node while it was gone): the
    /// handler skips those it lacks, and the owner's whole slice for it follows, then
    /// [`FibItem::SliceEnd`] and [`FibItem::Prune`].
    Reset,
    /// Install (or overwrite) an entry of a gone node's range, sent by the node standing in
    /// for it (`node::guest`): applied only while the handler has heard of no epoch of the
    /// range's home newer than `home_epoch` (the one that went), else dropped (the home's
    /// own slice, which follows its return, has the entry).
    GuestInstall {
        /// The epoch of the range's home that went.
        home_epoch: u32,
        /// The key.
        key: crate::Bytes,
        /// The FIB value.
        value: crate::Bytes,
    },
    /// Remove an entry of a gone node's range, as [`FibItem::GuestInstall`].
    GuestRemove {
        /// The epoch of the range's home that went.
        home_epoch: u32,
        /// The key.
        key: crate::Bytes,
    },
}

/// A message body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// [`Kind::Hello`]: the sender's per-boot nonce ([`Keys::nonce`]).
    Hello {
        /// The sender's nonce: random per process start, bound into the tag of every later
        /// datagram between the two nodes.
        nonce: u64,
    },
    /// [`Kind::HelloAck`]: the sender's per-boot nonce (the ack's tag binds the receiver's,
    /// learnt from its hello).
    HelloAck {
        /// The sender's nonce.
        nonce: u64,
    },
    /// [`Kind::ClientRequest`]: the header's `msg_id` is the client's sequence number.
    ClientRequest {
        /// The client's id (random per client run): its sequence numbers count from any
        /// start, increasing.
        client: u64,
        /// When the client made the request (nanoseconds since the Unix epoch, or the
        /// driver's clock in a simulation): a node refuses requests older than it started,
        /// or older than [`crate::Tuning::request_max_age`].
        time: u64,
        /// The updates.
        updates: Vec<Update>,
    },
    /// [`Kind::ClientReply`]: one result code per update.
    ClientReply(Vec<u8>),
    /// [`Kind::Forward`].
    Forward(Vec<Update>),
    /// [`Kind::ForwardReply`]: one result code per forwarded update.
    ForwardReply(Vec<u8>),
    /// [`Kind::Deltas`]: serialized `sb_setsep::Delta`s numbered `first_seq`, `first_seq + 1`, ...
    Deltas {
        /// Sequence number of the first.
        first_seq: u64,
        /// The serialized deltas (shared: an owner sends each to every replica, and again on a
        /// retransmission, without copying it).
        deltas: Vec<std::sync::Arc<[u8]>>,
    },
    /// [`Kind::DeltaAck`]: the replica applied the owner's deltas up to `applied` (of the
    /// owner's epoch in the header's `receiver_epoch`).
    DeltaAck {
        /// Last sequence number applied.
        applied: u64,
    },
    /// [`Kind::PieceChunk`].
    PieceChunk {
        /// The owner's sequence number the piece is a snapshot of.
        seq: u64,
        /// Bytes of the whole serialized piece.
        total_len: u32,
        /// This chunk's index.
        index: u32,
        /// Number of chunks.
        count: u32,
        /// The chunk's bytes.
        data: Vec<u8>,
    },
    /// [`Kind::PieceRequest`]: `missing` chunks of the snapshot at `seq`; no chunks (or a
    /// snapshot the owner no longer has) means a fresh piece.
    PieceRequest {
        /// The snapshot's sequence number.
        seq: u64,
        /// Indexes of the missing chunks.
        missing: Vec<u32>,
    },
    /// [`Kind::Fib`]: items numbered `first_seq`, `first_seq + 1`, ...
    Fib {
        /// Stream number of the first item.
        first_seq: u64,
        /// The owner's cumulative acknowledgement of the stream so far: the handler may
        /// forget its refusals up to it.
        acked: u64,
        /// The items.
        items: Vec<FibItem>,
    },
    /// [`Kind::FibAck`]: the handler applied the stream up to `applied`, but for the
    /// installs in `refused` (its FIB was full): not installed, so the owner rejects their
    /// updates before any GPT points at the handler for them.
    FibAck {
        /// Last stream number applied.
        applied: u64,
        /// Stream numbers of installs the handler refused, each above the owner's last
        /// acknowledgement it knows of and at most `applied` (increasing).
        refused: Vec<u64>,
    },
    /// [`Kind::Heartbeat`]: sent to every known peer every [`crate::Tuning::heartbeat`].
    Heartbeat {
        /// The sender's clock when it sent this.
        stamp: u64,
        /// The last `stamp` the sender received from the receiver (0: none): the receiver's
        /// lease from the sender runs from it.
        echo: u64,
        /// Bit `j` (byte `j / 8`, bit `j % 8`): the sender heard from node `j` within
        /// [`crate::Tuning::lease`] (at most [`HEARS_BYTES`] bytes).
        hears: Vec<u8>,
        /// A pause the sender announces ([`crate::Node::announce_pause`]), in milliseconds
        /// (0: none): the receiver takes it as heard for this long from this datagram's
        /// arrival, as if it had heard it until then (it declares it gone a lease later).
        hold_ms: u32,
        /// The sender declared the receiver gone in the receiver's current epoch (failure
        /// detection): the receiver's GPT may lag, and it is fenced.
        declared_you: bool,
    },
    /// [`Kind::Raft`]: chunk `index` of `count` of the sender's Raft message number `msg`
    /// (protobuf `eraftpb.Message`) for the group of range `group`.
    Raft {
        /// The range (its group).
        group: u32,
        /// The sender's message number (increasing per sender incarnation).
        msg: u64,
        /// This chunk's index.
        index: u16,
        /// Chunks of the message (at least 1).
        count: u16,
        /// The chunk's bytes.
        data: Vec<u8>,
    },
    /// [`Kind::RelayRequest`]: the sender restarted while `owner` is gone (failure detection)
    /// and lacks its piece or its FIB slice: a replica of the owner's range answers with
    /// [`Body::Relay`] chunks.
    /// [`Kind::EpochTaken`]: the epoch of the receiver that the sender knows, not below the
    /// one of the receiver's hello it answers. Its tag binds that hello's nonce as the
    /// receiver's (as a hello ack does), so only the incarnation that sent it takes it.
    EpochTaken {
        /// The receiver's epoch the sender knows.
        known: u32,
    },
    RelayRequest {
        /// The gone owner.
        owner: u16,
    },
    /// [`Kind::Relay`]: chunk `index` of `count` of a replica's answer for gone `owner`: the
    /// owner's piece as the replica's GPT holds it at the owner's `epoch` and `seq`, and, from
    /// the range's group leader, the receiver's FIB slice of the range.
    Relay {
        /// The gone owner.
        owner: u16,
        /// The owner's epoch the piece is of.
        epoch: u32,
        /// The owner's last delta in the piece.
        seq: u64,
        /// Bytes of the whole answer.
        total_len: u32,
        /// This chunk's index.
        index: u32,
        /// Number of chunks.
        count: u32,
        /// The chunk's bytes.
        data: Vec<u8>,
    },
}

/// Bytes of a heartbeat's bitmap of the nodes its sender hears at most (250 nodes).
pub const HEARS_BYTES: usize = 32;

impl Body {
    /// The message type of the body.
    pub fn kind(&self) -> Kind {
        match self {
            Body::Hello { .. } => Kind::Hello,
            Body::HelloAck { .. } => Kind::HelloAck,
            Body::ClientRequest { .. } => Kind::ClientRequest,
            Body::ClientReply(_) => Kind::ClientReply,
            Body::Forward(_) => Kind::Forward,
            Body::ForwardReply(_) => Kind::ForwardReply,
            Body::Deltas { .. } => Kind::Deltas,
            Body::DeltaAck { .. } => Kind::DeltaAck,
            Body::PieceChunk { .. } => Kind::PieceChunk,
            Body::PieceRequest { .. } => Kind::PieceRequest,
            Body::Fib { .. } => Kind::Fib,
            Body::FibAck { .. } => Kind::FibAck,
            Body::Raft { .. } => Kind::Raft,
            Body::Heartbeat { .. } => Kind::Heartbeat,
            Body::RelayRequest { .. } => Kind::RelayRequest,
            Body::EpochTaken { .. } => Kind::EpochTaken,
            Body::Relay { .. } => Kind::Relay,
        }
    }
}

/// Why a datagram was refused (each is a drop counter of [`crate::Status`]: [`WireError::name`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// Shorter than a header and a tag, or longer than [`MAX_DATAGRAM`].
    #[error("datagram too short or too long")]
    Length,
    /// Not our magic.
    #[error("bad magic")]
    Magic,
    /// Another protocol version.
    #[error("unsupported protocol version")]
    Version,
    /// Another cluster's id.
    #[error("datagram of another cluster")]
    ForeignCluster,
    /// The authentication tag does not match (no key, wrong key, or altered bytes).
    #[error("bad authentication tag")]
    BadTag,
    /// An unknown message type.
    #[error("unknown message type")]
    UnknownKind,
    /// The body does not parse.
    #[error("malformed body: {0}")]
    Malformed(&'static str),
    /// Addressed to another node (or to a client): a datagram captured on its way to one
    /// node and replayed to another.
    #[error("datagram for another receiver")]
    Misdirected,
    /// The sender is no node of the cluster, is the receiver itself, or is a client
    /// talking to a client.
    #[error("unknown sender")]
    UnknownSender,
    /// A message type the key it is authenticated with may not carry (a client key only
    /// signs client requests and replies; a node key never signs those).
    #[error("message type not allowed for its key")]
    KindNotAllowed,
    /// A node's datagram whose counter the receiver has seen from the sender's incarnation
    /// (a replay, or the network's duplicate).
    #[error("datagram seen before")]
    Replayed,
    /// A node's datagram whose counter is [`WINDOW`] or more behind the newest seen from the
    /// sender's incarnation (or 0): it cannot be told from a replay.
    #[error("datagram older than the replay window")]
    ReplayTooOld,
}

impl WireError {
    /// A short stable name (the key of the drop counters).
    pub fn name(&self) -> &'static str {
        match self {
            WireError::Length => "length",
            WireError::Magic => "magic",
            WireError::Version => "version",
            WireError::ForeignCluster => "foreign_cluster",
            WireError::BadTag => "bad_tag",
            WireError::UnknownKind => "unknown_kind",
            WireError::Malformed(_) => "malformed",
            WireError::Misdirected => "misdirected",
            WireError::UnknownSender => "unknown_sender",
            WireError::KindNotAllowed => "kind_not_allowed",
            WireError::Replayed => "replayed",
            WireError::ReplayTooOld => "replay_too_old",
        }
    }
}

type HmacSha256 = Hmac<Sha256>;

fn keyed(key: &[u8; 32]) -> HmacSha256 {
    HmacSha256::new_from_slice(key).expect("HMAC takes any key length")
}

/// The per-boot nonces a datagram's tag binds besides its bytes: (the sender's, the
/// receiver's), 0 where none is bound ([`Keys`]: which, by message type).
pub type Nonces = (u64, u64);

fn tag_with(mut mac: HmacSha256, nonces: Nonces, bytes: &[u8]) -> [u8; TAG_LEN] {
    mac.update(&nonces.0.to_le_bytes());
    mac.update(&nonces.1.to_le_bytes());
    mac.update(bytes);
    let full = mac.finalize().into_bytes();
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&full[..TAG_LEN]);
    t
}

fn tag_ok_with(mut mac: HmacSha256, nonces: Nonces, bytes: &[u8], t: &[u8]) -> bool {
    mac.update(&nonces.0.to_le_bytes());
    mac.update(&nonces.1.to_le_bytes());
    mac.update(bytes);
    // Constant time.
    mac.verify_truncated_left(t).is_ok()
}

/// A key derived from the cluster's master secret: HMAC-SHA256(master, label, cluster id,
/// the parts).
fn derive(master: &[u8; 32], label: &[u8], cluster_id: u64, parts: &[u16]) -> [u8; 32] {
    let mut mac = keyed(master);
    mac.update(b"sbcp-v2 ");
    mac.update(label);
    mac.update(&cluster_id.to_le_bytes());
    for p in parts {
        mac.update(&p.to_le_bytes());
    }
    mac.finalize().into_bytes().into()
}

/// The key nodes `a` and `b` authenticate their datagrams to each other with (the same for
/// both directions): derived from the master secret, so a node holds no table of keys.
pub fn pair_key(master: &[u8; 32], cluster_id: u64, a: u16, b: u16) -> [u8; 32] {
    derive(master, b"node pair", cluster_id, &[a.min(b), a.max(b)])
}

/// The client key: what `scalebricks update` (and a node's PFCP endpoint) signs requests
/// with and checks replies with. It signs nothing else, and the master does not follow from
/// it (HMAC is one-way).
pub fn client_key(master: &[u8; 32], cluster_id: u64) -> [u8; 32] {
    derive(master, b"client", cluster_id, &[])
}

/// A name of the master secret that says nothing of it (HMAC is one-way): 16 hex digits,
/// which each node publishes (`key_fingerprint` in its status) so that `cluster rotate-key`
/// can see which nodes took a new secret.
pub fn key_fingerprint(master: &[u8; 32]) -> String {
    let d = derive(master, b"fingerprint", 0, &[]);
    d[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The keys of one end of the protocol: a node's (a pair key per peer, derived from the
/// master secret, and the client key) or a client's (the client key alone), with what binds
/// a node's datagrams to the two ends' incarnations: its per-boot nonce, each peer's as
/// learnt from its hello or hello ack, the counters it numbers its datagrams with and a
/// replay window per peer. [`Keys::seal`] picks the key by the receiver, [`Keys::open`] by
/// the sender.
///
/// Which nonces a tag binds (sender's, receiver's): a hello none (it carries its sender's
/// nonce in its body, and is answered whatever the receiver's incarnation); a hello ack the
/// receiver's (it answers that incarnation's hello; its body carries the sender's); every
/// other node message both; a client's request or reply none.
#[derive(Clone)]
pub struct Keys {
    cluster_id: u64,
    /// This end: a node's id or [`CLIENT_SENDER`].
    me: u16,
    /// A node's: index `j`, the pair key with node `j` (keyed HMAC state; `me`'s unused).
    pair: Vec<HmacSha256>,
    client: HmacSha256,
    /// This end's per-boot nonce (0: a client's, or not set).
    nonce: u64,
    /// A node's: per peer, its nonce, counters and window.
    peers: Vec<PeerAuth>,
    /// During a key rotation ([`Keys::rotate`]): the pair keys of the master before, still
    /// taken until `forget_at`, and sealed with until `switch_at`.
    previous: Option<Previous>,
}

/// The pair keys of the master secret before a rotation.
#[derive(Clone)]
struct Previous {
    pair: Vec<HmacSha256>,
    /// Still sealed with (before `switch_at`).
    sealing: bool,
    switch_at: u64,
    forget_at: u64,
}

/// How long after a node takes a new master secret ([`Keys::rotate`]) it still seals its
/// datagrams to nodes with the previous one: 2 s, so that every node of the cluster has the
/// new one before any sends with it (`cluster rotate-key` writes it; each node reads it
/// within half a second).
pub const KEY_SWITCH: u64 = 2_000_000_000;
/// How long after a node takes a new master secret it still accepts nodes' datagrams made
/// with the previous one: 30 s (its peers switch within [`KEY_SWITCH`]; a datagram made
/// before the switch may still be retransmitted).
pub const KEY_GRACE: u64 = 30_000_000_000;

/// What a node knows of a peer's incarnation, and the counters between them.
#[derive(Clone, Debug, Default)]
struct PeerAuth {
    /// The peer's nonce (0: not learnt yet).
    nonce: u64,
    /// The last counter this end sent the peer.
    sent: u64,
    /// The counters seen from the peer's incarnation of `nonce`.
    window: Window,
}

/// A sliding replay window over a sender's counters: the newest seen and which of the
/// [`WINDOW`] before it were seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    top: u64,
    bits: [u64; (WINDOW / 64) as usize],
}

impl Default for Window {
    fn default() -> Self {
        Window {
            top: 0,
            bits: [0; (WINDOW / 64) as usize],
        }
    }
}

impl Window {
    fn bit(c: u64) -> (usize, u64) {
        let i = c % WINDOW;
        ((i / 64) as usize, 1u64 << (i % 64))
    }

    /// Takes counter `c`: Ok the first time it is seen within the window; refused when seen
    /// before, or when [`WINDOW`] or more behind the newest (or 0).
    pub fn accept(&mut self, c: u64) -> Result<(), WireError> {
        if c == 0 || c.saturating_add(WINDOW) <= self.top {
            return Err(WireError::ReplayTooOld);
        }
        if c > self.top {
            if c - self.top >= WINDOW {
                self.bits = [0; (WINDOW / 64) as usize];
            } else {
                for x in self.top + 1..c {
                    let (w, m) = Window::bit(x);
                    self.bits[w] &= !m;
                }
            }
            self.top = c;
        } else {
            let (w, m) = Window::bit(c);
            if self.bits[w] & m != 0 {
                return Err(WireError::Replayed);
            }
        }
        let (w, m) = Window::bit(c);
        self.bits[w] |= m;
        Ok(())
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("cluster_id", &self.cluster_id)
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl Keys {
    /// Node `me`'s keys in a cluster of `nodes` nodes with this master secret (its nonce
    /// not set: [`Keys::set_nonce`]).
    pub fn node(master: &[u8; 32], cluster_id: u64, nodes: u16, me: u16) -> Keys {
        Keys {
            cluster_id,
            me,
            pair: (0..nodes)
                .map(|j| keyed(&pair_key(master, cluster_id, me, j)))
                .collect(),
            client: keyed(&client_key(master, cluster_id)),
            nonce: 0,
            peers: vec![PeerAuth::default(); nodes as usize],
            previous: None,
        }
    }

    /// A client's keys: the client key alone.
    pub fn client(client_key: &[u8; 32], cluster_id: u64) -> Keys {
        Keys {
            cluster_id,
            me: CLIENT_SENDER,
            pair: Vec::new(),
            client: keyed(client_key),
            nonce: 0,
            peers: Vec::new(),
            previous: None,
        }
    }

    /// A node takes a new master secret at `now` (`cluster rotate-key`): new pair keys and a
    /// new client key. The previous client key is refused from now on; the previous pair
    /// keys are still sealed with for [`KEY_SWITCH`] (every node has read the new master by
    /// then) and still accepted for [`KEY_GRACE`] ([`Keys::expire`]). Nonces, counters and
    /// replay windows are kept: the node and its peers stay in the incarnations they are in.
    pub fn rotate(&mut self, master: &[u8; 32], now: u64) {
        if self.me == CLIENT_SENDER {
            self.client = keyed(&client_key(master, self.cluster_id));
            return;
        }
        let n = self.pair.len() as u16;
        let pair = (0..n)
            .map(|j| keyed(&pair_key(master, self.cluster_id, self.me, j)))
            .collect();
        let old = std::mem::replace(&mut self.pair, pair);
        self.client = keyed(&client_key(master, self.cluster_id));
        self.previous = Some(Previous {
            pair: old,
            sealing: true,
            switch_at: now.saturating_add(KEY_SWITCH),
            forget_at: now.saturating_add(KEY_GRACE),
        });
    }

    /// Ends what a rotation's times say are over at `now`: sealing with the previous pair
    /// keys after [`KEY_SWITCH`], accepting them after [`KEY_GRACE`].
    pub fn expire(&mut self, now: u64) {
        if let Some(p) = &mut self.previous {
            p.sealing &= now < p.switch_at;
            if now >= p.forget_at {
                self.previous = None;
            }
        }
    }

    /// Whether the previous master's pair keys are still accepted (a rotation is under way).
    pub fn rotating(&self) -> bool {
        self.previous.is_some()
    }

    /// Sets this node's per-boot nonce (random per process start; not 0).
    pub fn set_nonce(&mut self, nonce: u64) {
        self.nonce = nonce;
    }

    /// This end's per-boot nonce.
    pub fn nonce(&self) -> u64 {
        self.nonce
    }

    /// Node `p`'s nonce as this node knows it (0: none yet).
    pub fn peer_nonce(&self, p: u16) -> u64 {
        self.peers.get(p as usize).map_or(0, |a| a.nonce)
    }

    /// Node `p` is in an incarnation of nonce `nonce` (learnt from its authenticated hello or
    /// hello ack): its datagrams' tags bind it from now on, and a new nonce starts a new
    /// replay window.
    pub fn set_peer_nonce(&mut self, p: u16, nonce: u64) {
        if let Some(a) = self.peers.get_mut(p as usize) {
            if a.nonce != nonce {
                a.nonce = nonce;
                a.window = Window::default();
            }
        }
    }

    /// The counter of the next datagram to node `p` (1, 2, ... from this end's start).
    pub fn next_counter(&mut self, p: u16) -> u64 {
        match self.peers.get_mut(p as usize) {
            Some(a) => {
                a.sent += 1;
                a.sent
            }
            None => 0,
        }
    }

    /// Checks an opened datagram's counter against node `p`'s replay window (of its
    /// incarnation this node knows) and records it.
    pub fn accept_counter(&mut self, p: u16, counter: u64) -> Result<(), WireError> {
        match self.peers.get_mut(p as usize) {
            Some(a) => a.window.accept(counter),
            None => Err(WireError::UnknownSender),
        }
    }

    /// The newest counter accepted from peer `p`'s incarnation (0: none).
    pub fn newest_counter(&self, p: u16) -> u64 {
        self.peers.get(p as usize).map_or(0, |a| a.window.top)
    }

    /// The key of a datagram between this end and `peer`, and whether it is the client key.
    fn with(&self, peer: u16) -> Option<(&HmacSha256, bool)> {
        if self.me == CLIENT_SENDER {
            return (peer != CLIENT_SENDER).then_some((&self.client, true));
        }
        if peer == CLIENT_SENDER {
            return Some((&self.client, true));
        }
        if peer == self.me {
            return None;
        }
        self.pair.get(peer as usize).map(|k| (k, false))
    }

    /// The nonces (sender's, receiver's) the tag of a datagram of type `kind` between this
    /// end and `peer` binds, sent (`out`) or received.
    fn nonces(&self, kind: u8, peer: u16, client: bool, out: bool) -> Nonces {
        if client {
            return (0, 0);
        }
        let theirs = self.peer_nonce(peer);
        let (sender, receiver) = if out {
            (self.nonce, theirs)
        } else {
            (theirs, self.nonce)
        };
        match Kind::from_u8(kind) {
            Some(Kind::Hello) => (0, 0),
            Some(Kind::HelloAck | Kind::EpochTaken) => (0, receiver),
            _ => (sender, receiver),
        }
    }

    /// Encodes `body` for `h.receiver` with the key this end shares with it (`h.sender`
    /// must be this end) and the nonces its type binds; to a node, within [`KEY_SWITCH`] of a
    /// rotation (as [`Keys::expire`] last saw the time), with the previous master's pair key. Panics if there is none, or if the
    /// client key would sign a type it may not carry: the callers are this crate's.
    pub fn seal(&self, h: &Header, body: &Body) -> Vec<u8> {
        self.seal_binding(h, body, None)
    }

    fn seal_binding(&self, h: &Header, body: &Body, receiver_nonce: Option<u64>) -> Vec<u8> {
        let (mut key, client) = self.with(h.receiver).expect("a key for the receiver");
        if let Some(p) = self.previous.as_ref().filter(|p| !client && p.sealing) {
            key = &p.pair[h.receiver as usize];
        }
        assert!(
            h.sender == self.me && kind_allowed(h, client),
            "{:?} from {} to {} is not for this key",
            h.kind,
            h.sender,
            h.receiver
        );
        let (sender, receiver) = self.nonces(body.kind() as u8, h.receiver, client, true);
        encode_with(
            key.clone(),
            (sender, receiver_nonce.unwrap_or(receiver)),
            h,
            body,
        )
    }

    /// [`Keys::seal`] of a datagram whose tag binds `nonce` as the receiver's instead of the
    /// one this end knows of it (an answer to a hello this end refused: [`Body::EpochTaken`]).
    pub fn seal_to_nonce(&self, h: &Header, body: &Body, nonce: u64) -> Vec<u8> {
        self.seal_binding(h, body, Some(nonce))
    }

    /// Checks and decodes a datagram for this end: length, magic, version, cluster id,
    /// receiver (this end), the tag with the key of the sender and the nonces its type binds
    /// (a datagram of another incarnation of either end fails here), the message type against
    /// that key, then the body. Never panics. The counter is checked apart
    /// ([`Keys::accept_counter`]): a node learns a peer's new incarnation from a hello first.
    pub fn open(&self, b: &[u8]) -> Result<(Header, Body), WireError> {
        let (kind_byte, sender, receiver) = check_frame(self.cluster_id, b)?;
        if receiver != self.me {
            return Err(WireError::Misdirected);
        }
        let (key, client) = self.with(sender).ok_or(WireError::UnknownSender)?;
        let nonces = self.nonces(kind_byte, sender, client, false);
        let (signed, t) = b.split_at(b.len() - TAG_LEN);
        let previous = || {
            let p = self.previous.as_ref().filter(|_| !client)?;
            Some(tag_ok_with(
                p.pair[sender as usize].clone(),
                nonces,
                signed,
                t,
            ))
        };
        if !tag_ok_with(key.clone(), nonces, signed, t) && previous() != Some(true) {
            return Err(WireError::BadTag);
        }
        let kind = Kind::from_u8(kind_byte).ok_or(WireError::UnknownKind)?;
        let hb = Header {
            kind,
            sender,
            receiver,
            cluster_id: self.cluster_id,
            sender_epoch: 0,
            receiver_epoch: 0,
            msg_id: 0,
            counter: 0,
        };
        if !kind_allowed(&hb, client) {
            return Err(WireError::KindNotAllowed);
        }
        parse(signed)
    }
}

/// Whether a datagram of `h`'s type, sender and receiver may be authenticated with the
/// client key (`client`) or with a node pair key (not `client`).
fn kind_allowed(h: &Header, client: bool) -> bool {
    match h.kind {
        Kind::ClientRequest => client && h.sender == CLIENT_SENDER,
        Kind::ClientReply => client && h.receiver == CLIENT_SENDER,
        _ => !client,
    }
}

/// Encodes an update: op (1 insert, 2 change, 3 delete), node u16, key length u8, key, value
/// length u8, value.
pub(crate) fn put_update(out: &mut Vec<u8>, u: &Update) {
    out.push(match u.op {
        Op::Insert => 1,
        Op::Change => 2,
        Op::Delete => 3,
    });
    out.extend_from_slice(&u.node.to_le_bytes());
    out.push(u.key.len() as u8);
    out.extend_from_slice(&u.key);
    out.push(u.value.len() as u8);
    out.extend_from_slice(&u.value);
}

/// Bytes [`put_update`] writes.
pub(crate) fn update_len(u: &Update) -> usize {
    5 + u.key.len() + u.value.len()
}

/// Bytes [`put_fib_item`] writes.
pub(crate) fn fib_item_len(i: &FibItem) -> usize {
    match i {
        FibItem::Install { key, value } => 3 + key.len() + value.len(),
        FibItem::Remove { key } => 2 + key.len(),
        FibItem::SliceEnd | FibItem::Prune | FibItem::Reset => 1,
        FibItem::GuestInstall { key, value, .. } => 7 + key.len() + value.len(),
        FibItem::GuestRemove { key, .. } => 6 + key.len(),
    }
}

fn put_fib_item(out: &mut Vec<u8>, i: &FibItem) {
    match i {
        FibItem::Install { key, value } => {
            out.push(1);
            out.push(key.len() as u8);
            out.extend_from_slice(key);
            out.push(value.len() as u8);
            out.extend_from_slice(value);
        }
        FibItem::Remove { key } => {
            out.push(2);
            out.push(key.len() as u8);
            out.extend_from_slice(key);
        }
        FibItem::SliceEnd => out.push(3),
        FibItem::Prune => out.push(4),
        FibItem::Reset => out.push(5),
        FibItem::GuestInstall {
            home_epoch,
            key,
            value,
        } => {
            out.push(6);
            out.extend_from_slice(&home_epoch.to_le_bytes());
            out.push(key.len() as u8);
            out.extend_from_slice(key);
            out.push(value.len() as u8);
            out.extend_from_slice(value);
        }
        FibItem::GuestRemove { home_epoch, key } => {
            out.push(7);
            out.extend_from_slice(&home_epoch.to_le_bytes());
            out.push(key.len() as u8);
            out.extend_from_slice(key);
        }
    }
}

/// Encodes and authenticates a datagram. Keys and values longer than 255 bytes and lists
/// longer than 65535 entries do not fit the format: callers keep within them (the node checks
/// updates' sizes against the cluster's before sending, and packs lists to [`MAX_DATAGRAM`]).
/// The tag binds no nonce (a hello's, or a client's request or reply): others need
/// [`encode_bound`].
pub fn encode(key: &[u8; 32], h: &Header, body: &Body) -> Vec<u8> {
    encode_with(keyed(key), (0, 0), h, body)
}

/// [`encode`] with a tag that binds `nonces` (sender's, receiver's; [`Keys`] says which).
pub fn encode_bound(key: &[u8; 32], nonces: Nonces, h: &Header, body: &Body) -> Vec<u8> {
    encode_with(keyed(key), nonces, h, body)
}

fn encode_with(mac: HmacSha256, nonces: Nonces, h: &Header, body: &Body) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(body.kind() as u8);
    out.extend_from_slice(&h.sender.to_le_bytes());
    out.extend_from_slice(&h.receiver.to_le_bytes());
    out.extend_from_slice(&h.cluster_id.to_le_bytes());
    out.extend_from_slice(&h.sender_epoch.to_le_bytes());
    out.extend_from_slice(&h.receiver_epoch.to_le_bytes());
    out.extend_from_slice(&h.msg_id.to_le_bytes());
    out.extend_from_slice(&h.counter.to_le_bytes());
    match body {
        Body::Hello { nonce } | Body::HelloAck { nonce } => {
            out.extend_from_slice(&nonce.to_le_bytes())
        }
        Body::Heartbeat {
            stamp,
            echo,
            hears,
            hold_ms,
            declared_you,
        } => {
            out.extend_from_slice(&stamp.to_le_bytes());
            out.extend_from_slice(&echo.to_le_bytes());
            out.push(hears.len() as u8);
            out.extend_from_slice(hears);
            out.extend_from_slice(&hold_ms.to_le_bytes());
            out.push(*declared_you as u8);
        }
        Body::ClientRequest {
            client,
            time,
            updates,
        } => {
            out.extend_from_slice(&client.to_le_bytes());
            out.extend_from_slice(&time.to_le_bytes());
            out.extend_from_slice(&(updates.len() as u16).to_le_bytes());
            for u in updates {
                put_update(&mut out, u);
            }
        }
        Body::Forward(us) => {
            out.extend_from_slice(&(us.len() as u16).to_le_bytes());
            for u in us {
                put_update(&mut out, u);
            }
        }
        Body::ClientReply(codes) | Body::ForwardReply(codes) => {
            out.extend_from_slice(&(codes.len() as u16).to_le_bytes());
            out.extend_from_slice(codes);
        }
        Body::Deltas { first_seq, deltas } => {
            out.extend_from_slice(&first_seq.to_le_bytes());
            out.extend_from_slice(&(deltas.len() as u16).to_le_bytes());
            for d in deltas {
                out.extend_from_slice(&(d.len() as u16).to_le_bytes());
                out.extend_from_slice(d);
            }
        }
        Body::DeltaAck { applied } => {
            out.extend_from_slice(&applied.to_le_bytes());
        }
        Body::FibAck { applied, refused } => {
            out.extend_from_slice(&applied.to_le_bytes());
            out.extend_from_slice(&(refused.len() as u16).to_le_bytes());
            for r in refused {
                out.extend_from_slice(&r.to_le_bytes());
            }
        }
        Body::PieceChunk {
            seq,
            total_len,
            index,
            count,
            data,
        } => {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&total_len.to_le_bytes());
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(data);
        }
        Body::Raft {
            group,
            msg,
            index,
            count,
            data,
        } => {
            out.extend_from_slice(&group.to_le_bytes());
            out.extend_from_slice(&msg.to_le_bytes());
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(data);
        }
        Body::RelayRequest { owner } => out.extend_from_slice(&owner.to_le_bytes()),
        Body::EpochTaken { known } => out.extend_from_slice(&known.to_le_bytes()),
        Body::Relay {
            owner,
            epoch,
            seq,
            total_len,
            index,
            count,
            data,
        } => {
            out.extend_from_slice(&owner.to_le_bytes());
            out.extend_from_slice(&epoch.to_le_bytes());
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&total_len.to_le_bytes());
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(data);
        }
        Body::PieceRequest { seq, missing } => {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&(missing.len() as u16).to_le_bytes());
            for m in missing {
                out.extend_from_slice(&m.to_le_bytes());
            }
        }
        Body::Fib {
            first_seq,
            acked,
            items,
        } => {
            out.extend_from_slice(&first_seq.to_le_bytes());
            out.extend_from_slice(&acked.to_le_bytes());
            out.extend_from_slice(&(items.len() as u16).to_le_bytes());
            for i in items {
                put_fib_item(&mut out, i);
            }
        }
    }
    let t = tag_with(mac, nonces, &out);
    out.extend_from_slice(&t);
    out
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.b.len() {
            return Err(WireError::Malformed("truncated"));
        }
        let (s, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes8(&mut self) -> Result<crate::Bytes, WireError> {
        let n = self.u8()? as usize;
        Ok(crate::Bytes::from_slice(self.take(n)?))
    }
    fn end(&self) -> Result<(), WireError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(WireError::Malformed("trailing bytes"))
        }
    }
}

/// The tail of a chunked body (a piece's or a relayed piece's): total length u32, index u32,
/// count u32 and the rest as this chunk's bytes, checked (`why` names the body when not).
fn chunk(r: &mut Reader, why: &'static str) -> Result<(u32, u32, u32, Vec<u8>), WireError> {
    let total_len = r.u32()?;
    let index = r.u32()?;
    let count = r.u32()?;
    let data = r.take(r.b.len())?.to_vec();
    if count == 0 || index >= count || data.len() > total_len as usize {
        return Err(WireError::Malformed(why));
    }
    Ok((total_len, index, count, data))
}

fn get_updates(r: &mut Reader) -> Result<Vec<Update>, WireError> {
    let n = r.u16()? as usize;
    // Each update takes at least 5 bytes: bound the allocation by what is there.
    let mut us = Vec::with_capacity(n.min(r.b.len() / 5));
    for _ in 0..n {
        let op = match r.u8()? {
            1 => Op::Insert,
            2 => Op::Change,
            3 => Op::Delete,
            _ => return Err(WireError::Malformed("bad op")),
        };
        let node = r.u16()?;
        let key = r.bytes8()?;
        let value = r.bytes8()?;
        us.push(Update {
            op,
            key,
            node,
            value,
        });
    }
    Ok(us)
}

fn get_codes(r: &mut Reader) -> Result<Vec<u8>, WireError> {
    let n = r.u16()? as usize;
    Ok(r.take(n)?.to_vec())
}

/// Checks length, magic, version and cluster id: the type byte, sender and receiver.
fn check_frame(cluster_id: u64, b: &[u8]) -> Result<(u8, u16, u16), WireError> {
    if b.len() < HEADER_LEN + TAG_LEN || b.len() > MAX_DATAGRAM {
        return Err(WireError::Length);
    }
    if &b[..4] != MAGIC {
        return Err(WireError::Magic);
    }
    if b[4] != VERSION {
        return Err(WireError::Version);
    }
    let mut r = Reader { b: &b[5..] };
    let kind_byte = r.u8()?;
    let sender = r.u16()?;
    let receiver = r.u16()?;
    if r.u64()? != cluster_id {
        return Err(WireError::ForeignCluster);
    }
    Ok((kind_byte, sender, receiver))
}

/// Checks and decodes a datagram authenticated with `key` and no nonce (a hello, a client's
/// request or reply): length, magic, version, cluster id, tag, type, body. Never panics;
/// whatever it accepts re-encodes to the same bytes. It does not check who it is for or
/// whether `key` may carry its type: a node and a client use [`Keys::open`], which does.
pub fn decode(key: &[u8; 32], cluster_id: u64, b: &[u8]) -> Result<(Header, Body), WireError> {
    decode_bound(key, (0, 0), cluster_id, b)
}

/// [`decode`] of a datagram whose tag binds `nonces` (sender's, receiver's).
pub fn decode_bound(
    key: &[u8; 32],
    nonces: Nonces,
    cluster_id: u64,
    b: &[u8],
) -> Result<(Header, Body), WireError> {
    check_frame(cluster_id, b)?;
    let (signed, t) = b.split_at(b.len() - TAG_LEN);
    if !tag_ok_with(keyed(key), nonces, signed, t) {
        return Err(WireError::BadTag);
    }
    parse(signed)
}

/// Decodes a datagram WITHOUT authenticating it (its tag is not checked): for tests and
/// diagnostics that look at captured traffic, never for acting on a datagram.
pub fn peek(cluster_id: u64, b: &[u8]) -> Result<(Header, Body), WireError> {
    check_frame(cluster_id, b)?;
    parse(&b[..b.len() - TAG_LEN])
}

/// Parses the authenticated bytes of a datagram (its frame checked).
fn parse(signed: &[u8]) -> Result<(Header, Body), WireError> {
    let mut r = Reader { b: &signed[5..] };
    let kind_byte = r.u8()?;
    let kind = Kind::from_u8(kind_byte).ok_or(WireError::UnknownKind)?;
    let h = Header {
        kind,
        sender: r.u16()?,
        receiver: r.u16()?,
        cluster_id: r.u64()?,
        sender_epoch: r.u32()?,
        receiver_epoch: r.u32()?,
        msg_id: r.u64()?,
        counter: r.u64()?,
    };
    let body = match kind {
        Kind::Hello => Body::Hello { nonce: r.u64()? },
        Kind::HelloAck => Body::HelloAck { nonce: r.u64()? },
        Kind::ClientRequest => Body::ClientRequest {
            client: r.u64()?,
            time: r.u64()?,
            updates: get_updates(&mut r)?,
        },
        Kind::Forward => Body::Forward(get_updates(&mut r)?),
        Kind::ClientReply => Body::ClientReply(get_codes(&mut r)?),
        Kind::ForwardReply => Body::ForwardReply(get_codes(&mut r)?),
        Kind::Deltas => {
            let first_seq = r.u64()?;
            let n = r.u16()? as usize;
            let mut deltas = Vec::with_capacity(n.min(r.b.len() / 2));
            for _ in 0..n {
                let l = r.u16()? as usize;
                deltas.push(std::sync::Arc::from(r.take(l)?));
            }
            if first_seq == 0 || first_seq.checked_add(n as u64).is_none() {
                return Err(WireError::Malformed("bad delta sequence number"));
            }
            Body::Deltas { first_seq, deltas }
        }
        Kind::DeltaAck => Body::DeltaAck { applied: r.u64()? },
        Kind::Heartbeat => {
            let stamp = r.u64()?;
            let echo = r.u64()?;
            let n = r.u8()? as usize;
            if n > HEARS_BYTES {
                return Err(WireError::Malformed("heartbeat bitmap too long"));
            }
            let hears = r.take(n)?.to_vec();
            let hold_ms = r.u32()?;
            let declared_you = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(WireError::Malformed("heartbeat flag not 0 or 1")),
            };
            Body::Heartbeat {
                stamp,
                echo,
                hears,
                hold_ms,
                declared_you,
            }
        }
        Kind::FibAck => {
            let applied = r.u64()?;
            let n = r.u16()? as usize;
            let mut refused = Vec::with_capacity(n.min(r.b.len() / 8));
            for _ in 0..n {
                refused.push(r.u64()?);
            }
            Body::FibAck { applied, refused }
        }
        Kind::PieceChunk => {
            let seq = r.u64()?;
            let (total_len, index, count, data) = chunk(&mut r, "bad chunk numbers")?;
            Body::PieceChunk {
                seq,
                total_len,
                index,
                count,
                data,
            }
        }
        Kind::Raft => {
            let group = r.u32()?;
            let msg = r.u64()?;
            let index = r.u16()?;
            let count = r.u16()?;
            let data = r.take(r.b.len())?.to_vec();
            if count == 0 || index >= count {
                return Err(WireError::Malformed("bad raft chunk numbers"));
            }
            Body::Raft {
                group,
                msg,
                index,
                count,
                data,
            }
        }
        Kind::RelayRequest => Body::RelayRequest { owner: r.u16()? },
        Kind::EpochTaken => Body::EpochTaken { known: r.u32()? },
        Kind::Relay => {
            let owner = r.u16()?;
            let epoch = r.u32()?;
            let seq = r.u64()?;
            let (total_len, index, count, data) = chunk(&mut r, "bad relay chunk numbers")?;
            Body::Relay {
                owner,
                epoch,
                seq,
                total_len,
                index,
                count,
                data,
            }
        }
        Kind::PieceRequest => {
            let seq = r.u64()?;
            let n = r.u16()? as usize;
            let mut missing = Vec::with_capacity(n.min(r.b.len() / 4));
            for _ in 0..n {
                missing.push(r.u32()?);
            }
            Body::PieceRequest { seq, missing }
        }
        Kind::Fib => {
            let first_seq = r.u64()?;
            let acked = r.u64()?;
            let n = r.u16()? as usize;
            let mut items = Vec::with_capacity(n.min(r.b.len()));
            for _ in 0..n {
                items.push(match r.u8()? {
                    1 => FibItem::Install {
                        key: r.bytes8()?,
                        value: r.bytes8()?,
                    },
                    2 => FibItem::Remove { key: r.bytes8()? },
                    3 => FibItem::SliceEnd,
                    4 => FibItem::Prune,
                    5 => FibItem::Reset,
                    6 => FibItem::GuestInstall {
                        home_epoch: r.u32()?,
                        key: r.bytes8()?,
                        value: r.bytes8()?,
                    },
                    7 => FibItem::GuestRemove {
                        home_epoch: r.u32()?,
                        key: r.bytes8()?,
                    },
                    _ => return Err(WireError::Malformed("bad FIB item")),
                });
            }
            if first_seq == 0 || first_seq.checked_add(n as u64).is_none() {
                return Err(WireError::Malformed("bad FIB sequence number"));
            }
            Body::Fib {
                first_seq,
                acked,
                items,
            }
        }
    };
    r.end()?;
    Ok((h, body))
}

/// Bytes of a datagram around its body: header and tag.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn a_key_fingerprint_names_the_master_and_no_derived_key() {
        let (a, b) = (key_fingerprint(&KEY), key_fingerprint(&[8; 32]));
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a, key_fingerprint(&KEY));
        assert_ne!(a, b);
        // Not a prefix of a key the master gives: its label is its own.
        let hex = |k: [u8; 32]| {
            k[..8]
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
        };
        assert_ne!(a, hex(client_key(&KEY, 0)));
        assert_ne!(a, hex(pair_key(&KEY, 0, 0, 1)));
    }

    fn hdr(kind: Kind) -> Header {
        Header {
            kind,
            sender: 2,
            receiver: 1,
            cluster_id: 99,
            sender_epoch: 3,
            receiver_epoch: 4,
            msg_id: 5,
            counter: 6,
        }
    }

    fn bodies() -> Vec<Body> {
        let u = Update {
            op: Op::Change,
            key: crate::Bytes::from_elem(1, 16),
            node: 3,
            value: crate::Bytes::from_elem(2, 16),
        };
        vec![
            Body::Hello { nonce: 0x77 },
            Body::HelloAck { nonce: 1 },
            Body::ClientRequest {
                client: 0x1234,
                time: 77,
                updates: vec![u.clone(), u.clone()],
            },
            Body::ClientReply(vec![0, 1, 2]),
            Body::Forward(vec![u]),
            Body::ForwardReply(vec![]),
            Body::Deltas {
                first_seq: 9,
                deltas: vec![vec![1, 2, 3].into(), vec![].into()],
            },
            Body::DeltaAck { applied: 77 },
            Body::PieceChunk {
                seq: 1,
                total_len: 10,
                index: 0,
                count: 2,
                data: vec![5; 5],
            },
            Body::PieceRequest {
                seq: 4,
                missing: vec![1, 3],
            },
            Body::Fib {
                first_seq: 1,
                acked: 0,
                items: vec![
                    FibItem::Install {
                        key: crate::Bytes::from_elem(1, 4),
                        value: crate::Bytes::new(),
                    },
                    FibItem::Remove {
                        key: crate::Bytes::from_elem(3, 5),
                    },
                    FibItem::SliceEnd,
                    FibItem::Prune,
                    FibItem::Reset,
                    FibItem::GuestInstall {
                        home_epoch: 7,
                        key: crate::Bytes::from_elem(2, 8),
                        value: crate::Bytes::from_elem(9, 4),
                    },
                    FibItem::GuestRemove {
                        home_epoch: u32::MAX,
                        key: crate::Bytes::from_elem(4, 8),
                    },
                ],
            },
            Body::FibAck {
                applied: 0,
                refused: vec![],
            },
            Body::FibAck {
                applied: 9,
                refused: vec![3, 9],
            },
            Body::Raft {
                group: 3,
                msg: 77,
                index: 1,
                count: 2,
                data: vec![1, 2, 3],
            },
            Body::Heartbeat {
                stamp: 5,
                echo: 3,
                hears: vec![0b1011],
                hold_ms: 1500,
                declared_you: true,
            },
            Body::RelayRequest { owner: 4 },
            Body::EpochTaken { known: 9 },
            Body::Relay {
                owner: 4,
                epoch: 2,
                seq: 9,
                total_len: 10,
                index: 1,
                count: 2,
                data: vec![6; 5],
            },
        ]
    }

    #[test]
    fn every_body_round_trips_and_any_flipped_bit_is_refused() {
        for b in bodies() {
            let h = hdr(b.kind());
            let bytes = encode(&KEY, &h, &b);
            assert_eq!(decode(&KEY, 99, &bytes), Ok((h, b.clone())));
            assert_eq!(peek(99, &bytes), Ok((h, b.clone())));
            assert_eq!(decode(&KEY, 98, &bytes), Err(WireError::ForeignCluster));
            assert_eq!(decode(&[8; 32], 99, &bytes), Err(WireError::BadTag));
            // The nonces are under the tag: another one on either side is refused.
            let bound = encode_bound(&KEY, (3, 4), &h, &b);
            assert_eq!(decode_bound(&KEY, (3, 4), 99, &bound), Ok((h, b.clone())));
            for n in [(0, 4), (3, 0), (4, 3), (3, 5)] {
                assert_eq!(decode_bound(&KEY, n, 99, &bound), Err(WireError::BadTag));
            }
            for i in 0..bytes.len() * 8 {
                let mut x = bytes.clone();
                x[i / 8] ^= 1 << (i % 8);
                assert!(decode(&KEY, 99, &x).is_err(), "bit {i} of {:?}", b.kind());
            }
        }
    }

    /// A datagram is accepted by its receiver alone, with the key of its sender, and a
    /// client key signs client requests and replies only.
    #[test]
    fn keys_bind_sender_receiver_and_kind() {
        let master = [5u8; 32];
        let k = |me| Keys::node(&master, 99, 3, me);
        let client = Keys::client(&client_key(&master, 99), 99);
        let h = Header {
            kind: Kind::DeltaAck,
            sender: 0,
            receiver: 1,
            cluster_id: 99,
            sender_epoch: 1,
            receiver_epoch: 1,
            msg_id: 1,
            counter: 1,
        };
        let b = Body::DeltaAck { applied: 3 };
        let d = k(0).seal(&h, &b);
        assert_eq!(k(1).open(&d), Ok((h, b.clone())));
        // Captured on its way to node 1, replayed to node 2: refused there.
        assert_eq!(k(2).open(&d), Err(WireError::Misdirected));
        // Its receiver rewritten to node 2: the tag no longer matches.
        let mut x = d.clone();
        x[8..10].copy_from_slice(&2u16.to_le_bytes());
        assert_eq!(k(2).open(&x), Err(WireError::BadTag));
        // Node 2 cannot make a datagram node 1 takes as node 0's: pair keys differ.
        assert_ne!(pair_key(&master, 99, 0, 1), pair_key(&master, 99, 2, 1));
        assert_eq!(pair_key(&master, 99, 0, 1), pair_key(&master, 99, 1, 0));
        let forged = encode(&pair_key(&master, 99, 2, 1), &h, &b);
        assert_eq!(k(1).open(&forged), Err(WireError::BadTag));
        // The client key signs no node message, whatever the sender says.
        let ck = client_key(&master, 99);
        for sender in [0, CLIENT_SENDER] {
            let forged = encode(&ck, &Header { sender, ..h }, &b);
            assert!(
                matches!(
                    k(1).open(&forged),
                    Err(WireError::KindNotAllowed | WireError::BadTag)
                ),
                "sender {sender}"
            );
        }
        let forged = encode(
            &ck,
            &Header {
                sender: CLIENT_SENDER,
                ..h
            },
            &b,
        );
        assert_eq!(k(1).open(&forged), Err(WireError::KindNotAllowed));
        // A client's request reaches the node it names; the reply the client.
        let rh = Header {
            kind: Kind::ClientRequest,
            sender: CLIENT_SENDER,
            receiver: 2,
            cluster_id: 99,
            sender_epoch: 0,
            receiver_epoch: 0,
            msg_id: 4,
            counter: 0,
        };
        let rb = Body::ClientRequest {
            client: 1,
            time: 2,
            updates: vec![],
        };
        let r = client.seal(&rh, &rb);
        assert_eq!(k(2).open(&r), Ok((rh, rb)));
        assert_eq!(k(1).open(&r), Err(WireError::Misdirected));
        let ah = Header {
            kind: Kind::ClientReply,
            sender: 2,
            receiver: CLIENT_SENDER,
            ..rh
        };
        let a = k(2).seal(&ah, &Body::ClientReply(vec![0]));
        assert!(client.open(&a).is_ok());
        // A node's pair key does not make a client request.
        let forged = encode(
            &pair_key(&master, 99, 0, 2),
            &rh,
            &Body::ClientReply(vec![]),
        );
        assert_eq!(k(2).open(&forged), Err(WireError::BadTag));
    }

    /// A node's datagrams bind both ends' nonces: once either end has another (a restart,
    /// even with its epoch reused), a datagram of the earlier incarnation fails the tag. A
    /// hello binds none (it carries its sender's), a hello ack its receiver's.
    #[test]
    fn tags_bind_both_incarnations() {
        let master = [5u8; 32];
        let boot = |me, nonce: u64, peer, peer_nonce| {
            let mut k = Keys::node(&master, 99, 3, me);
            k.set_nonce(nonce);
            k.set_peer_nonce(peer, peer_nonce);
            k
        };
        let h = Header {
            kind: Kind::DeltaAck,
            sender: 0,
            receiver: 1,
            cluster_id: 99,
            sender_epoch: 1,
            receiver_epoch: 1,
            msg_id: 1,
            counter: 1,
        };
        let b = Body::DeltaAck { applied: 3 };
        let d = boot(0, 10, 1, 20).seal(&h, &b);
        assert_eq!(boot(1, 20, 0, 10).open(&d), Ok((h, b.clone())));
        // The receiver restarted (nonce 21), or the sender (11): refused by the tag.
        assert_eq!(boot(1, 21, 0, 10).open(&d), Err(WireError::BadTag));
        assert_eq!(boot(1, 20, 0, 11).open(&d), Err(WireError::BadTag));
        // A hello is taken whatever the receiver knows; its ack by the hello's sender only.
        let hh = Header {
            kind: Kind::Hello,
            ..h
        };
        let hello = boot(0, 10, 1, 20).seal(&hh, &Body::Hello { nonce: 10 });
        assert!(boot(1, 99, 0, 0).open(&hello).is_ok());
        let ah = Header {
            kind: Kind::HelloAck,
            sender: 1,
            receiver: 0,
            ..h
        };
        let ack = boot(1, 20, 0, 10).seal(&ah, &Body::HelloAck { nonce: 20 });
        assert!(boot(0, 10, 1, 0).open(&ack).is_ok());
        assert_eq!(boot(0, 12, 1, 0).open(&ack), Err(WireError::BadTag));
    }

    #[test]
    fn the_window_takes_each_counter_once_and_refuses_those_behind_it() {
        let mut w = Window::default();
        assert_eq!(w.accept(0), Err(WireError::ReplayTooOld));
        assert_eq!(w.accept(5), Ok(()));
        assert_eq!(w.accept(5), Err(WireError::Replayed));
        assert_eq!(w.accept(3), Ok(()));
        assert_eq!(w.accept(3), Err(WireError::Replayed));
        assert_eq!(w.accept(5 + WINDOW), Ok(()));
        assert_eq!(w.accept(5), Err(WireError::ReplayTooOld));
        assert_eq!(w.accept(6), Ok(()));
        assert_eq!(w.accept(6 + 3 * WINDOW), Ok(()));
        assert_eq!(w.accept(6 + 2 * WINDOW), Err(WireError::ReplayTooOld));
        assert_eq!(w.accept(7 + 2 * WINDOW), Ok(()));
        assert_eq!(w.accept(7 + 2 * WINDOW), Err(WireError::Replayed));
    }
}
