//! The state machine of one node: owner, replica and handler (see the crate documentation).

use crate::fixed::{FixedMap, Rib};
use crate::record::{self, Record};
use crate::replica::group::{Group, GroupTiming};
use crate::replica::state::RangeState;
use crate::replica::storage::{self as rstore, RaftStore};
use crate::replica::{replicas_of, transport};

mod checkpoint;
mod failover;
mod guest;
mod liveness;
mod rejoin;
mod relay;
mod replication;
mod standin;
mod state;
mod streams;
use crate::wire::{self, Body, FibItem, Header, Kind};
use crate::{
    Bytes, ClusterSpec, ControlError, Event, Flow, Nanos, NodeId, Op, Outcome, OwnerStatus, Peer,
    Status, Update, CHUNK_BYTES, MAX_PIECE_BYTES,
};
pub use failover::Move;
use sb_setsep::{Delta, Piece, RibKey, SetSep, Updatable};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use streams::{OutStream, Remembered, Rtt};

/// Deterministic maps (a fixed hasher: the same inputs give the same iteration order, so a
/// simulated run is reproducible from its seed; the keys come from authenticated peers).
/// foldhash with its fixed seed: SipHash (`DefaultHasher`) was 2% of all CPU samples of an
/// update burst (`docs/bench/control.md`).
type Map<K, V> = HashMap<K, V, foldhash::fast::FixedState>;
type Set<K> = HashSet<K, foldhash::fast::FixedState>;

/// Timers and bounds of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// First retransmission timeout (doubles per retry).
    pub rto: Nanos,
    /// Largest retransmission timeout.
    pub rto_max: Nanos,
    /// A gap in an owner's deltas that has not filled after this long makes the replica ask
    /// for the owner's piece.
    pub gap_timeout: Nanos,
    /// A piece whose chunks stopped arriving for this long: the replica asks for the missing
    /// ones.
    pub chunk_timeout: Nanos,
    /// Updates per owner batch at most.
    pub max_batch: usize,
    /// Updates waiting at an owner at most (beyond: [`Outcome::Busy`]).
    pub max_queue: usize,
    /// Tries of a forward before its updates get [`Outcome::Timeout`].
    pub forward_tries: u32,
    /// Unacknowledged items (deltas, FIB operations) in flight per peer at most.
    pub window: usize,
    /// Out-of-order items buffered per stream at most.
    pub reorder_buffer: usize,
    /// Completed client requests (and forwards) remembered, to answer retransmissions.
    pub remembered: usize,
    /// Body bytes of a deltas or FIB datagram at most (at most the default, which fills a
    /// datagram).
    pub pack_bytes: usize,
    /// Bytes of a piece chunk at most (at most [`CHUNK_BYTES`]).
    pub chunk_bytes: usize,
    /// Keep every delta this owner makes for [`Node::take_own_deltas`] (tests).
    pub keep_own_deltas: bool,
    /// Keep the handler's FIB map: the FIB slice as this state machine installed it, which
    /// [`Node::fib_entries`] and [`Node::fib_get`] read and an owner's restart prunes. A node
    /// whose data plane holds the same entries turns it off (the node process: its cuckoo FIB
    /// has every key and value) and saves a key and value per flow; [`Event::FibRemove`] then
    /// comes for every removal, held or not, and a prune comes as [`Event::FibPrune`].
    pub fib_map: bool,
    /// Keys this node is expected to handle (its share of the cluster's capacity): the FIB
    /// map and the RIB of each range it replicates are allocated for that many at start, so that it never grows (a map of millions of
    /// keys that doubles stalls the node for a fraction of a second; all nodes reach that size
    /// together). 0: it grows as keys come. (The owner's RIB is its table's, whose groups the
    /// table's capacity sets.)
    pub expected_keys: usize,
    /// Entries a Raft group's in-memory log holds past its snapshot before it is compacted
    /// behind what is applied here and every replica has (`replica::Group::trim`; the
    /// node's log keeps them until its next checkpoint). Without it the in-memory logs held
    /// everything since the last checkpoint: 0.5-1 GB per node at 2.2M sessions per node.
    pub raft_trim_entries: usize,
    /// The key prefix the owner's RIB leaves out of the keys that start with it
    /// ([`Updatable::build_with_key_prefix`]; a memory layout, so nodes may differ): the node
    /// process passes the 12 bytes every IPv4 UE address's key starts with (IPv4-mapped IPv6),
    /// so each such key takes 12 bytes less in the RIB. Empty: none. At most 64 bytes.
    pub rib_key_prefix: Vec<u8>,
    /// A client request made longer than this before the node's wall clock is refused
    /// ([`Outcome::Stale`]); so is one made before the node started (a restart does not
    /// reopen the replay of requests it no longer remembers).
    pub request_max_age: Nanos,
    /// A client request stamped further than this ahead of the node's wall clock is refused.
    pub request_max_ahead: Nanos,
    /// Clients whose request windows a node keeps at most (beyond, the one heard from least
    /// recently is forgotten: requests stamped before its newest are refused from any client
    /// the node does not know).
    pub clients: usize,
    /// Replicas of each GPT range (capped at the node count; every node of a cluster must
    /// use the same): 1 keeps a range's log on its owner alone; above 1, each range is a Raft
    /// group on nodes `i, i+1, ...` ([`crate::replica`]) whose leader is the owner, and an
    /// update's changes are durable once a majority of them has them.
    pub replicas: usize,
    /// The Raft groups' tick.
    pub raft_tick: Nanos,
    /// Ticks without a leader before a replica campaigns (each replica's timeout is fixed in
    /// `[election_ticks, 2 election_ticks)`, spread by its seed): with the default 10 ms tick,
    /// 100 to 200 ms, so a dead leader is replaced well within 500 ms.
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// Failure detection (0: none, every owner waits for every node): a peer not heard from
    /// for this long, and not heard by a majority, is no longer waited for; a node holds its
    /// lease for 3/5 of it after a peer echoed its heartbeat and is fenced once too few of
    /// them are left for safety ([`crate::Node::safe_lease`]: 1 of 3 peers on 4 nodes, 2 of 4
    /// on 5). Default 500 ms.
    pub lease: Nanos,
    /// Between a node's heartbeats to each peer (default 50 ms).
    pub heartbeat: Nanos,
    /// Bytes an owner holds for one peer that failure detection declared gone at most: its
    /// unacknowledged deltas and FIB stream items (their wire bytes and queue slots). Beyond,
    /// they are dropped, and the peer is resynced when it is heard again, as after its
    /// restart: its whole FIB slice (in the same epoch behind a [`wire::FibItem::Reset`],
    /// then a prune) and this owner's piece. A peer that is not gone is waited for and never
    /// dropped (the owner's batches wait for its acknowledgements). Default 16 MiB.
    pub peer_backlog_bytes: usize,
    /// An owner moves the flows of its range that a gone node handled to live nodes, by
    /// updates of its own (make-before-break as any update), and gives them back once the
    /// node returns (`failover` in this module's sources). Default on.
    pub evacuate: bool,
    /// Flows an owner gives back to a returned node per second at most (0: none are given
    /// back). Default 20,000.
    pub give_back_rate: u64,
    /// Where the FIB value keeps a copy of its handling node, if it does: the offset of a
    /// big-endian `u16` that a move between handlers rewrites (the LTE application's egress
    /// node, bytes 8..10). None (the default): values are moved unchanged.
    pub handler_field: Option<usize>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            rto: 20_000_000,
            rto_max: 1_000_000_000,
            gap_timeout: 100_000_000,
            chunk_timeout: 100_000_000,
            max_batch: 1024,
            max_queue: 1 << 20,
            forward_tries: 12,
            window: 8192,
            reorder_buffer: 1 << 16,
            remembered: 1 << 16,
            pack_bytes: BODY_MAX - 16,
            chunk_bytes: CHUNK_BYTES,
            keep_own_deltas: false,
            fib_map: true,
            expected_keys: 0,
            raft_trim_entries: 1024,
            rib_key_prefix: Vec::new(),
            request_max_age: 300_000_000_000,
            request_max_ahead: 5_000_000_000,
            clients: 4096,
            replicas: 1,
            raft_tick: 10_000_000,
            election_ticks: 10,
            heartbeat_ticks: 2,
            lease: 500_000_000,
            heartbeat: 50_000_000,
            peer_backlog_bytes: 16 << 20,
            evacuate: true,
            give_back_rate: 20_000,
            handler_field: None,
        }
    }
}

/// The owner's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// Waiting for the epoch record to be durable.
    Boot,
    /// With replication: waiting to lead the range's group with every committed entry
    /// applied (and, on a first start, the initial flows committed).
    Elect,
    /// Sending every handler its FIB slice.
    SyncFib,
    /// Sending every replica the piece.
    Pieces,
    /// Taking updates.
    Serving,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Boot => "boot",
            Phase::Elect => "elect",
            Phase::SyncFib => "sync_fib",
            Phase::Pieces => "pieces",
            Phase::Serving => "serving",
        }
    }
}

struct PieceOut {
    seq: u64,
    retry_at: Nanos,
    rto: Nanos,
}

/// What this node, as an owner, sends one peer.
struct PeerOut {
    fib: OutStream<FibItem>,
    deltas: OutStream<Arc<[u8]>>,
    piece: Option<PieceOut>,
    /// The streams' items were dropped while the peer was gone ([`Tuning::peer_backlog_bytes`]):
    /// it gets its slice and our piece again once it is heard.
    resync: bool,
}

/// What this node knows of a peer.
struct PeerInfo {
    /// The peer's epoch (0: not heard from yet).
    epoch: u32,
    /// The peer sent us something addressed to our epoch.
    knows_me: bool,
    hello_at: Nanos,
    hello_rto: Nanos,
    /// Forwards to this peer as owner: from the first send to the reply (queueing at the owner
    /// included), never a forward sent twice.
    fwd_rtt: Rtt,
}

struct Assembly {
    epoch: u32,
    seq: u64,
    total: usize,
    chunks: Vec<Option<Vec<u8>>>,
    have: usize,
    progress_at: Nanos,
}

/// This node's replica of one owner's range.
struct Rep {
    epoch: u32,
    applied: u64,
    /// A piece of `epoch` was installed (or waits for the first assembly in `initial`).
    have: bool,
    pending: BTreeMap<u64, Arc<[u8]>>,
    max_seen: u64,
    gap_since: Option<Nanos>,
    want_piece_at: Option<Nanos>,
    assembly: Option<Assembly>,
    initial: Option<Piece>,
    resyncs: u64,
    /// Keys of the owner's range: its last piece's or applied delta's count.
    keys: u64,
    /// An acknowledgement is owed (sent once the events are applied).
    ack_due: bool,
    /// The data plane refused a delta or piece of this owner: no acknowledgement until a
    /// piece is installed again.
    refused: bool,
}

impl Rep {
    /// Forgets a piece being assembled that is not newer than what is applied.
    fn drop_stale_assembly(&mut self) {
        if self.have
            && self
                .assembly
                .as_ref()
                .is_some_and(|a| (a.epoch, a.seq) <= (self.epoch, self.applied))
        {
            self.assembly = None;
        }
    }
}

/// This node's FIB stream from one owner.
struct FibIn {
    epoch: u32,
    applied: u64,
    pending: BTreeMap<u64, FibItem>,
    /// Keys installed since the owner's new epoch began (the owner restarted): a prune removes
    /// the owner's other keys.
    sync: Option<Set<Bytes>>,
    slice_done: bool,
    /// Installs of the stream this node's FIB refused (full), above the owner's
    /// acknowledgement as it last told: every acknowledgement names them.
    refused: std::collections::BTreeSet<u64>,
    /// An acknowledgement is owed (sent once the events are applied: [`Node::poll_event`]).
    ack_due: bool,
}

/// Where an install handed out as [`Event::FibInsert`] came from (to report its refusal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Item `seq` of owner `o`'s stream.
    Stream(NodeId, u64),
    /// This node's own batch.
    Batch,
    /// This node's own slice at its start.
    Slice,
}

/// An install handed out and not yet known to be applied.
struct Unconfirmed {
    key: Bytes,
    from: Source,
    failed: bool,
}

/// A client's request window: what a node refuses of it.
struct ClientWin {
    /// Sequence numbers up to this one are answered and forgotten: refused.
    floor: u64,
    /// Requests stamped at or before this are refused (the node's floor for unknown clients
    /// when this one became known).
    since: u64,
    /// The newest stamp seen.
    newest: u64,
}

enum OriginKind {
    Client {
        addr: SocketAddr,
        client: u64,
        id: u64,
    },
    Forward {
        node: NodeId,
        epoch: u32,
        id: u64,
    },
    /// This owner's own moves of flows between handlers ([`failover`]).
    Internal,
}

struct Origin {
    kind: OriginKind,
    results: Vec<u8>,
    remaining: usize,
}

struct FwdOut {
    owner: NodeId,
    token: u64,
    indices: Vec<u32>,
    updates: Vec<Update>,
    /// First send.
    sent_at: Nanos,
    tries: u32,
    retry_at: Nanos,
    rto: Nanos,
}

struct Queued {
    origin: u64,
    index: u32,
    u: Update,
    /// A move between handlers ([`failover`]): applied only while the key's handler is this.
    expect: Option<NodeId>,
}

struct Item {
    origin: u64,
    index: u32,
    u: Update,
    outcome: Outcome,
    old: Option<(NodeId, Bytes)>,
    /// Its FIB install: at which handler, with which stream number (0: this node).
    install: Option<(NodeId, u64)>,
    /// The handler refused the install (its FIB is full), or is gone (`down`).
    refused: bool,
    /// The handler is gone (failure detection): the install was given up.
    down: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Persisting,
    Installing,
    Propagating,
}

struct Batch {
    items: Vec<Item>,
    stage: Stage,
    /// Without replication: the persist number of its record; with: its entry's index.
    persist_n: u64,
    /// With replication: its entry's term (the batch goes on once the entry is committed in
    /// it).
    term: u64,
    /// With replication: the entry undoing its refused updates (index, term).
    undo: Option<(u64, u64)>,
    fib_wait: Vec<u64>,
    delta_wait: u64,
    /// Installs at this node wait for the driver to apply them.
    local_wait: bool,
}

/// One node's control plane: a sans-IO state machine (see the crate documentation).
pub struct Node {
    spec: ClusterSpec,
    keys: wire::Keys,
    me: NodeId,
    tuning: Tuning,
    epoch: u32,
    rng: u64,
    next_id: u64,
    now: Nanos,
    phase: Phase,
    // Owner: its RIB is its table's (each key with its handling node as the table's value and
    // its FIB value as the entry's payload), and `pending` holds the batch in flight's changes,
    // validated and logged but not yet in the table (`None`: a deletion).
    table: Updatable,
    pending: Map<Bytes, Option<(NodeId, Bytes)>>,
    change_seq: u64,
    queue: VecDeque<Queued>,
    batch: Option<Batch>,
    out: Vec<PeerOut>,
    snapshot: Option<(u64, Arc<Vec<u8>>)>,
    boot_persist: u64,
    // Persistence.
    persists_made: u64,
    persists_handed: u64,
    durable: u64,
    // Replica.
    gpt: Option<SetSep>,
    reps: Vec<Rep>,
    // Handler.
    fib: FixedMap,
    fin: Vec<FibIn>,
    // Peers and requests.
    peers: Vec<PeerInfo>,
    origins: Map<u64, Origin>,
    clients: Remembered<(u64, u64)>,
    forwards_in: Remembered<(NodeId, u32, u64)>,
    /// Per client id, its window ([`Tuning::clients`] at most).
    client_wins: Map<u64, ClientWin>,
    /// Requests of clients not in `client_wins` stamped at or before this are refused.
    client_floor: u64,
    /// The `now` the node started at, and the wall clock's offset from `now`.
    started: Nanos,
    wall_offset: Nanos,
    /// Per peer: (its epoch, the highest forward id forgotten): refused if seen again.
    forward_floor: Vec<(u32, u64)>,
    /// Installs handed out, not yet known to be applied ([`Node::install_failed`]).
    unconfirmed: Vec<Unconfirmed>,
    /// Acknowledgements or confirmations wait for the events to be applied.
    unsettled: bool,
    /// Installs this node's FIB refused that were no update's (a slice: the node is sized
    /// below its share), and those that were (the updates were rejected).
    fib_refused: u64,
    forwards_out: BTreeMap<u64, FwdOut>,
    // Output.
    events: VecDeque<Event>,
    transmits: VecDeque<(Peer, Vec<u8>)>,
    // Counters.
    dropped: BTreeMap<&'static str, u64>,
    rejected: BTreeMap<&'static str, u64>,
    applied_updates: u64,
    retransmits: u64,
    /// Backlogs dropped for gone peers ([`Tuning::peer_backlog_bytes`]).
    backlogs_dropped: u64,
    own_deltas: Vec<Delta>,
    // Replication ([`Tuning::replicas`] above 1): by range, the groups this node is a replica
    // of, and their state machines (a follower's RIB; the home's until its table is built).
    groups: Vec<Option<Group>>,
    gstates: Vec<Option<RangeState>>,
    reasm: transport::Reassembly,
    raft_msgs: u64,
    next_tick: Nanos,
    /// The home's initial flows, proposed if the range's group has none.
    initial: Option<Vec<Flow>>,
    /// The term the initial flows were proposed in (0: not yet).
    base_term: u64,
    /// This owner lost its range's leadership: it takes nothing more and must be restarted
    /// from its log ([`Node::fenced`]).
    fenced: bool,
    /// The driver's data plane holds this cluster's GPT already ([`Node::keep_live_gpt`]):
    /// the assembled table reaches it as pieces.
    live_gpt: bool,
    /// Failure detection ([`liveness`]).
    live: liveness::Liveness,
    /// Per owner: standing in for it while it is gone ([`relay`]).
    relay: Vec<relay::RelayIn>,
    /// Moving the flows of gone handlers ([`failover`]).
    fo: failover::Failover,
    /// Standing in for gone nodes' own flows ([`standin`]).
    si: standin::StandIns,
    /// Gone nodes' range updates this node applies as their stand-in ([`guest`]).
    guests: guest::Guests,
    /// This node's log was lost once ([`rejoin`]); by range, its group followed a leader since.
    lost: bool,
    caught: Vec<bool>,
    /// A peer knows this epoch of this node, not below ours: the log is replaced and the node
    /// restarted ([`Node::rejoin_records`]).
    rejoin_epoch: Option<u32>,
    /// This node's range's PFCP state records ([`state`]), the changes handed out and not yet
    /// durable, and the last ticket given.
    own_state: crate::replica::records::StateRecords,
    state_wait: VecDeque<state::StateWait>,
    next_state_ticket: u64,
    /// This owner led its range's group at the last look (past its election), and the
    /// times it stopped leading without another replica leading (raft's check-quorum
    /// stepped it down; it waited to lead again instead of restarting).
    led: bool,
    step_downs: u64,
    /// Why this incarnation was fenced ([`Node::fence_reason`]).
    fence_reason: Option<&'static str>,
}

/// FIB refusals an acknowledgement names at most (beyond, it acknowledges less).
const MAX_REFUSED: usize = 1024;

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("me", &self.me)
            .field("epoch", &self.epoch)
            .field("phase", &self.phase)
            .finish()
    }
}

/// Outcome of an update that can be judged without the RIB (sizes, node).
fn precheck(spec: &ClusterSpec, u: &Update) -> Option<Outcome> {
    if u.key.len() != spec.key_bytes {
        return Some(Outcome::BadKeyLength);
    }
    if u.op != Op::Delete {
        if u.value.len() != spec.value_bytes {
            return Some(Outcome::BadValueLength);
        }
        if u.node >= spec.nodes {
            return Some(Outcome::NodeOutOfRange);
        }
    }
    None
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Body bytes of a datagram at most.
const BODY_MAX: usize = wire::MAX_DATAGRAM - wire::OVERHEAD;

impl Node {
    /// A node `me` of the cluster `spec`, with the default [`Tuning`]. `flows`: the initial RIB
    /// entries of this node's range, used when the log is empty; `recovered`: the records of its
    /// log, in order, after a restart. `now`: the current time; `seed`: the node's randomness
    /// (retransmission jitter).
    pub fn new(
        spec: ClusterSpec,
        me: NodeId,
        flows: Vec<Flow>,
        recovered: Vec<Vec<u8>>,
        now: Nanos,
        seed: u64,
    ) -> Result<Node, ControlError> {
        Node::with_tuning(spec, me, flows, recovered, now, seed, Tuning::default())
    }

    /// [`Node::new`] with the given timers and bounds.
    pub fn with_tuning(
        spec: ClusterSpec,
        me: NodeId,
        flows: Vec<Flow>,
        recovered: Vec<Vec<u8>>,
        now: Nanos,
        seed: u64,
        tuning: Tuning,
    ) -> Result<Node, ControlError> {
        spec.validate()?;
        if me >= spec.nodes {
            return Err(ControlError::NoSuchNode(me));
        }
        if tuning.rib_key_prefix.len() > sb_setsep::MAX_KEY_LEN {
            return Err(ControlError::BadTuning(
                "the RIB's key prefix is over 64 bytes",
            ));
        }
        let replicated = tuning.replicas.min(spec.nodes as usize) > 1;
        // Raft's records, by group (with replication).
        let mut raft_recs: BTreeMap<u32, Vec<rstore::StoreRecord>> = BTreeMap::new();
        let mut plain = Vec::with_capacity(recovered.len());
        for (index, r) in recovered.into_iter().enumerate() {
            let bad = |reason| ControlError::BadRecord { index, reason };
            if rstore::is_store_record(&r) {
                if !replicated {
                    return Err(bad("a replicated range's record without replication"));
                }
                let (g, rec) = rstore::decode(&r).map_err(bad)?;
                if g >= spec.nodes as u32 {
                    return Err(bad("a record of a range the cluster does not have"));
                }
                raft_recs.entry(g).or_default().push(rec);
            } else {
                if replicated && !record::is_node_record(&r) {
                    return Err(bad("an unreplicated range's record with replication"));
                }
                plain.push(r);
            }
        }
        let recovered = plain;
        // Recovery: the last epoch, the initial flows and the changes of the log.
        let mut last_epoch = 0u32;
        let mut base: Vec<Flow> = Vec::new();
        let mut base_done = false;
        let mut changes: Vec<Update> = Vec::new();
        let mut change_seq = 0u64;
        // The log was lost once (a rejoin): the groups that have not followed a leader since.
        let mut lost = false;
        let mut caught = std::collections::BTreeSet::new();
        // Without replication: the range's PFCP state records.
        let mut own_state = crate::replica::records::StateRecords::new();
        for (index, r) in recovered.iter().enumerate() {
            let bad = |reason| ControlError::BadRecord { index, reason };
            match record::decode(r).map_err(bad)? {
                Record::Epoch(e) => last_epoch = last_epoch.max(e),
                Record::Lost => {
                    lost = true;
                    caught.clear();
                }
                Record::Caught(g) => {
                    caught.insert(g);
                }
                Record::State { puts, dels } => {
                    crate::replica::state::apply_state(&mut own_state, puts, &dels)
                }
                Record::Base(f) if !base_done => base.extend(f),
                Record::Base(_) => return Err(bad("initial flows after their end")),
                Record::BaseEnd => base_done = true,
                Record::Changes { first, updates } => {
                    if !base_done {
                        return Err(bad("changes before the initial flows"));
                    }
                    // The log was written by this cluster's nodes: a change of another width
                    // or node count is not ours.
                    if updates.iter().any(|u| precheck(&spec, u).is_some()) {
                        return Err(bad("a change that does not fit the cluster"));
                    }
                    change_seq = first + updates.len() as u64 - 1;
                    changes.extend(updates);
                }
            }
        }
        let epoch = last_epoch.checked_add(1).ok_or(ControlError::BadRecord {
            index: 0,
            reason: "epoch overflows",
        })?;
        let mut records = vec![record::epoch(epoch)];
        let initial = if base_done { base } else { flows };
        // The RIB from the log, then the table built from it.
        let mut rib = Rib::with_capacity(spec.key_bytes, spec.value_bytes, initial.len());
        for (index, f) in initial.into_iter().enumerate() {
            let bad = |reason| ControlError::BadFlow { index, reason };
            if f.key.len() != spec.key_bytes {
                return Err(bad("key length differs from the cluster's"));
            }
            if f.value.len() != spec.value_bytes {
                return Err(bad("value length differs from the cluster's"));
            }
            if f.node >= spec.nodes {
                return Err(bad("handling node out of range"));
            }
            if spec.owner_of(&f.key) != me {
                return Err(bad("key is not in this node's range"));
            }
            if rib.insert(&f.key, f.node, &f.value) {
                return Err(bad("key given twice"));
            }
        }
        let mut initial_flows = None;
        if replicated {
            // The range's flows are its group's: the initial ones go to it if it has none.
            initial_flows = Some(
                rib.iter()
                    .map(|(k, n, v)| Flow {
                        key: Bytes::from_slice(k),
                        node: n,
                        value: Bytes::from_slice(v),
                    })
                    .collect(),
            );
            rib = Rib::with_capacity(spec.key_bytes, spec.value_bytes, 0);
        } else if !base_done {
            let flows: Vec<(&[u8], NodeId, &[u8])> = rib.iter().collect();
            for c in flows.chunks(record::BASE_PER_RECORD) {
                records.push(record::base(c));
            }
            records.push(record::base_end());
        }
        for u in changes {
            match u.op {
                Op::Insert | Op::Change => {
                    rib.insert(&u.key, u.node, &u.value);
                }
                Op::Delete => {
                    rib.remove(&u.key);
                }
            }
        }
        let (mut keys, mut nodes, mut values) = (Vec::new(), Vec::new(), Vec::new());
        for (k, n, v) in rib.iter() {
            keys.push(k);
            nodes.push(n);
            values.extend_from_slice(v);
        }
        let table = Updatable::build_with_key_prefix(
            &keys,
            &nodes,
            &values,
            spec.value_bytes,
            &tuning.rib_key_prefix,
            &spec.gpt.build_options(),
        )?;
        drop((keys, nodes, values));
        drop(rib);
        let n = spec.nodes as usize;
        let mut groups: Vec<Option<Group>> = (0..n).map(|_| None).collect();
        let mut gstates: Vec<Option<RangeState>> = (0..n).map(|_| None).collect();
        if replicated {
            let timing = GroupTiming {
                election_ticks: tuning.election_ticks.max(2),
                heartbeat_ticks: tuning.heartbeat_ticks.max(1),
                max_msg_bytes: (CHUNK_BYTES / 2) as u64,
            };
            let mut salt = seed ^ 0x7261_6674;
            for g in 0..spec.nodes {
                let voters = replicas_of(g, spec.nodes, tuning.replicas);
                if !voters.contains(&me) {
                    if raft_recs.contains_key(&(g as u32)) {
                        return Err(ControlError::BadRecord {
                            index: 0,
                            reason: "a record of a range this node does not replicate",
                        });
                    }
                    continue;
                }
                let ids = voters.iter().map(|&v| transport::raft_id(v)).collect();
                let recs = raft_recs.remove(&(g as u32)).unwrap_or_default();
                let mut store = RaftStore::replay(ids, recs)
                    .map_err(|reason| ControlError::BadRecord { index: 0, reason })?;
                let mut st =
                    RangeState::new(spec.key_bytes, spec.value_bytes, tuning.expected_keys);
                if store.snapshot_index() > 0 {
                    let snap = crate::replica::state::RangeSnapshot::decode(
                        store.latest_snapshot().get_data(),
                    )
                    .and_then(|x| st.restore(&x, store.snapshot_index()))
                    .map_err(|reason| ControlError::BadRecord { index: 0, reason });
                    snap?;
                    // In the range's state now, and in the log: made anew if raft wants it.
                    store.drop_snapshot_data();
                }
                let mut grp = Group::new(g as u32, voters, me, store, timing, splitmix(&mut salt))
                    .map_err(|_| {
                        ControlError::BadTuning("raft refuses the group's configuration")
                    })?;
                if lost && !caught.contains(&(g as u32)) {
                    grp.withhold_votes();
                }
                groups[g as usize] = Some(grp);
                gstates[g as usize] = Some(st);
            }
        }
        let rto = tuning.rto;
        let mut node = Node {
            keys: {
                // The per-boot nonce: the driver's seed is random per process start.
                let mut k = spec.node_keys(me);
                let mut x = seed ^ (u64::from(epoch) << 32) ^ now;
                k.set_nonce(splitmix(&mut x).max(1));
                k
            },
            me,
            epoch,
            rng: seed,
            next_id: 1,
            now,
            phase: Phase::Boot,
            table,
            pending: Map::default(),
            change_seq,
            queue: VecDeque::new(),
            batch: None,
            out: (0..n)
                .map(|_| PeerOut {
                    fib: OutStream::new(rto),
                    deltas: OutStream::new(rto),
                    piece: None,
                    resync: false,
                })
                .collect(),
            snapshot: None,
            boot_persist: 0,
            persists_made: 0,
            persists_handed: 0,
            durable: 0,
            gpt: None,
            reps: (0..n)
                .map(|_| Rep {
                    epoch: 0,
                    applied: 0,
                    have: false,
                    pending: BTreeMap::new(),
                    max_seen: 0,
                    gap_since: None,
                    want_piece_at: None,
                    assembly: None,
                    initial: None,
                    resyncs: 0,
                    keys: 0,
                    ack_due: false,
                    refused: false,
                })
                .collect(),
            fib: FixedMap::with_capacity(
                spec.key_bytes,
                spec.value_bytes,
                if tuning.fib_map {
                    tuning.expected_keys
                } else {
                    0
                },
            ),
            fin: (0..n)
                .map(|_| FibIn {
                    epoch: 0,
                    applied: 0,
                    pending: BTreeMap::new(),
                    sync: None,
                    slice_done: false,
                    refused: Default::default(),
                    ack_due: false,
                })
                .collect(),
            peers: (0..n)
                .map(|_| PeerInfo {
                    epoch: 0,
                    knows_me: false,
                    hello_at: now,
                    hello_rto: rto,
                    fwd_rtt: Rtt::default(),
                })
                .collect(),
            origins: Map::default(),
            clients: Remembered::new(tuning.remembered),
            forwards_in: Remembered::new(tuning.remembered),
            client_wins: Map::default(),
            client_floor: 0,
            started: now,
            wall_offset: 0,
            forward_floor: vec![(0, 0); n],
            unconfirmed: Vec::new(),
            unsettled: false,
            fib_refused: 0,
            forwards_out: BTreeMap::new(),
            events: VecDeque::new(),
            transmits: VecDeque::new(),
            dropped: BTreeMap::new(),
            rejected: BTreeMap::new(),
            applied_updates: 0,
            retransmits: 0,
            backlogs_dropped: 0,
            own_deltas: Vec::new(),
            groups,
            gstates,
            reasm: Default::default(),
            raft_msgs: 0,
            next_tick: now,
            initial: initial_flows,
            base_term: 0,
            fenced: false,
            live_gpt: false,
            live: liveness::Liveness::new(spec.nodes, now),
            relay: (0..n).map(|_| Default::default()).collect(),
            fo: Default::default(),
            si: Default::default(),
            guests: Default::default(),
            led: true,
            fence_reason: None,
            step_downs: 0,
            lost,
            caught: (0..n as u32).map(|g| caught.contains(&g)).collect(),
            rejoin_epoch: None,
            own_state,
            state_wait: VecDeque::new(),
            next_state_ticket: 0,
            spec,
            tuning,
        };
        node.peers[me as usize].knows_me = true;
        node.peers[me as usize].epoch = epoch;
        node.boot_persist = node.persist(records);
        Ok(node)
    }

    // ----- driver interface -------------------------------------------------------------------

    /// Takes a datagram from `from`. Anything malformed, unauthenticated, of another cluster or
    /// of a past epoch changes nothing and is counted ([`Status::dropped`]).
    pub fn handle(&mut self, now: Nanos, from: Peer, datagram: &[u8]) {
        self.tick(now);
        if self.fenced {
            return self.drop_msg("fenced");
        }
        let (h, body) = match self.keys.open(datagram) {
            Ok(x) => x,
            Err(e) => return self.drop_msg(e.name()),
        };
        if self.phase == Phase::Boot {
            // Nothing leaves before the epoch is durable.
            return self.drop_msg("booting");
        }
        match from {
            Peer::Client(addr) => match body {
                Body::ClientRequest {
                    client,
                    time,
                    updates,
                } if h.sender == wire::CLIENT_SENDER => {
                    self.on_client_request(addr, client, h.msg_id, time, updates)
                }
                _ => self.drop_msg("unexpected"),
            },
            Peer::Node(p) => {
                if h.sender != p || p >= self.spec.nodes || p == self.me {
                    return self.drop_msg("wrong_peer");
                }
                let pi = p as usize;
                if let Body::EpochTaken { known } = body {
                    // Bound to this incarnation's nonce (checked by the tag): a peer refused
                    // our hello ([`rejoin`]).
                    return self.on_epoch_taken(p, known);
                }
                if h.sender_epoch == 0 || h.sender_epoch < self.peers[pi].epoch {
                    if let Body::Hello { nonce } = body {
                        // An incarnation older than one we know: a lost or rolled back log.
                        self.refuse_hello(p, nonce);
                    }
                    return self.drop_msg("stale_epoch");
                }
                if let Body::Hello { nonce } | Body::HelloAck { nonce } = body {
                    // A peer's incarnation is its epoch and nonce, learnt from its hello or
                    // hello ack: the tags of its other datagrams bind its nonce (and ours).
                    let known = self.keys.peer_nonce(p);
                    if h.sender_epoch == self.peers[pi].epoch && known != 0 && nonce != known {
                        // Its epoch again with another nonce: a log lost or rolled back, or
                        // the hello of an incarnation before it.
                        if h.kind == Kind::Hello {
                            self.refuse_hello(p, nonce);
                        }
                        return self.drop_msg("epoch_reused");
                    }
                    if h.sender_epoch > self.peers[pi].epoch || known == 0 {
                        self.keys.set_peer_nonce(p, nonce);
                    }
                }
                if h.sender_epoch > self.peers[pi].epoch {
                    self.on_peer_epoch(p, h.sender_epoch);
                }
                let newest = self.keys.newest_counter(p);
                if let Err(e) = self.keys.accept_counter(p, h.counter) {
                    return self.drop_msg(e.name());
                }
                // Only the newest datagram yet says the peer lives: an older one may have
                // been delayed or held back by an attacker (one the network lost, replayed
                // after the peer died kept it alive for failure detection).
                if h.counter > newest {
                    self.heard(p);
                }
                if h.receiver_epoch == self.epoch {
                    self.peers[pi].knows_me = true;
                } else if h.kind != Kind::Hello {
                    return self.drop_msg("stale_epoch");
                }
                self.on_peer_message(p, &h, body);
            }
        }
        self.progress();
    }

    /// Runs the timers due at `now` (retransmissions, gap and chunk timeouts).
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.tick(now);
        if self.phase == Phase::Boot || self.fenced {
            return;
        }
        self.liveness_timers();
        if self.fenced {
            return;
        }
        let now = self.now;
        if self.replicated() && self.next_tick <= now {
            // Per node: failure detection hears it (a follower holds its election clock for
            // a live home: `Group::tick`; a node heard within the lease is not gone).
            let alive: Vec<bool> = (0..self.spec.nodes).map(|p| self.hears(p)).collect();
            let over = self.tuning.raft_trim_entries;
            for g in self.groups.iter_mut().flatten() {
                let home = g.home() as usize;
                g.tick(alive.get(home).copied().unwrap_or(false));
                g.trim(over);
            }
            self.note_caught_up();
            let t = self.tuning.raft_tick.max(1);
            self.next_tick = if now - self.next_tick > 8 * t {
                now + t
            } else {
                self.next_tick + t
            };
        }
        let n = self.spec.nodes;
        for p in 0..n {
            if p == self.me {
                continue;
            }
            let pi = p as usize;
            if !self.peers[pi].knows_me && self.peers[pi].hello_at <= now {
                self.send_hello(p);
            }
            self.bound_backlog(p);
            if self.out[pi].fib.retry_at.is_some_and(|t| t <= now) {
                self.out[pi].fib.retransmit(0, self.tuning.rto_max);
                self.retransmits += 1;
                self.flush_fib(p);
            }
            if self.out[pi].deltas.retry_at.is_some_and(|t| t <= now) {
                let piece_seq = self.out[pi].piece.as_ref().map_or(0, |p| p.seq);
                self.out[pi]
                    .deltas
                    .retransmit(piece_seq, self.tuning.rto_max);
                self.retransmits += 1;
                self.flush_deltas(p);
            }
            if self.out[pi]
                .piece
                .as_ref()
                .is_some_and(|ps| ps.retry_at <= now)
            {
                let rto = self.out[pi].piece.as_ref().map_or(0, |ps| ps.rto);
                self.retransmits += 1;
                self.send_piece(p, (rto * 2).min(self.tuning.rto_max));
            }
        }
        // Forwards.
        let due: Vec<u64> = self
            .forwards_out
            .iter()
            .filter(|(_, f)| f.retry_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let owner_gone = self.gone(self.forwards_out[&id].owner);
            let f = self.forwards_out.get_mut(&id).expect("due forward");
            if f.tries >= self.tuning.forward_tries || owner_gone {
                let f = self.forwards_out.remove(&id).expect("due forward");
                for i in f.indices {
                    self.set_result(f.token, i, Outcome::Timeout);
                }
                continue;
            }
            let waited = f.rto;
            f.tries += 1;
            f.rto = (f.rto * 2).min(self.tuning.rto_max);
            f.retry_at = now + f.rto;
            let (owner, updates) = (f.owner, f.updates.clone());
            self.peers[owner as usize].fwd_rtt.timed_out(waited);
            self.retransmits += 1;
            self.send(owner, id, Body::Forward(updates));
        }
        self.relay_timers();
        // Replica timers.
        for o in 0..n {
            let oi = o as usize;
            let r = &mut self.reps[oi];
            let mut want = false;
            if r.gap_since
                .is_some_and(|t| t + self.tuning.gap_timeout <= now)
            {
                r.gap_since = Some(now);
                want = true;
            }
            if r.want_piece_at.is_some_and(|t| t <= now) {
                want = true;
            }
            let mut ask_chunks = None;
            r.drop_stale_assembly();
            if let Some(a) = &mut r.assembly {
                if a.progress_at + self.tuning.chunk_timeout <= now {
                    a.progress_at = now;
                    let missing: Vec<u32> = (0..a.chunks.len() as u32)
                        .filter(|&i| a.chunks[i as usize].is_none())
                        .take(4096)
                        .collect();
                    ask_chunks = Some((a.seq, missing));
                }
            }
            if o == self.me {
                continue;
            }
            if want {
                self.request_piece(o);
            } else if let Some((seq, missing)) = ask_chunks {
                self.send(o, 0, Body::PieceRequest { seq, missing });
            }
        }
        self.progress();
    }

    /// When [`Node::handle_timeout`] wants to run next (None: nothing pending).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.phase == Phase::Boot || self.fenced {
            return None;
        }
        let mut t: Option<Nanos> = None;
        let mut at = |x: Nanos| t = Some(t.map_or(x, |t: Nanos| t.min(x)));
        if self.replicated() {
            at(self.next_tick);
        }
        if let Some(x) = self.liveness_timeout() {
            at(x);
        }
        if let Some(x) = self.relay_timeout() {
            at(x);
        }
        if let Some(x) = self.failover_timeout() {
            at(x);
        }
        for (pi, p) in self.peers.iter().enumerate() {
            if pi == self.me as usize {
                continue;
            }
            if !p.knows_me {
                at(p.hello_at);
            }
            let o = &self.out[pi];
            if let Some(x) = o.fib.retry_at {
                at(x);
            }
            if let Some(x) = o.deltas.retry_at {
                at(x);
            }
            if let Some(ps) = &o.piece {
                at(ps.retry_at);
            }
        }
        for f in self.forwards_out.values() {
            at(f.retry_at);
        }
        for (oi, r) in self.reps.iter().enumerate() {
            if oi == self.me as usize {
                continue;
            }
            if let Some(g) = r.gap_since {
                at(g + self.tuning.gap_timeout);
            }
            if let Some(w) = r.want_piece_at {
                at(w);
            }
            if let Some(a) = &r.assembly {
                at(a.progress_at + self.tuning.chunk_timeout);
            }
        }
        t
    }

    /// The next effect for the local data plane. Apply each before polling the next, and
    /// drain them all before [`Node::poll_transmit`]: once none is left, the node takes the
    /// events handed out as applied (but for what [`Node::install_failed`] and
    /// [`Node::gpt_refused`] reported) and only then makes the acknowledgements that say so
    /// (which may release more events: polled here too).
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.events.is_empty() && self.unsettled {
            self.settle();
        }
        let e = self.events.pop_front();
        if let Some(Event::Persist { .. }) = e {
            self.persists_handed += 1;
        }
        e
    }

    /// The wall clock is `now + offset` (nanoseconds since the Unix epoch in a node process;
    /// 0, the default, where clients stamp requests with the driver's clock): client requests'
    /// stamps are judged by it ([`Tuning::request_max_age`]).
    pub fn set_wall_offset(&mut self, offset: Nanos) {
        self.wall_offset = offset;
    }

    /// The data plane could not install the last [`Event::FibInsert`] of `key` handed out
    /// (its table is full); call it before polling the next event. Nothing of it may stay
    /// installed. The update it was for is rejected ([`Outcome::FibFull`]) before any GPT
    /// sends the key here.
    pub fn install_failed(&mut self, key: &[u8]) {
        if let Some(u) = self.unconfirmed.iter_mut().rev().find(|u| *u.key == *key) {
            u.failed = true;
        }
    }

    /// The data plane refused an [`Event::GptDelta`] or [`Event::GptPiece`] of owner `owner`
    /// (`ClusterSpec::owner_of_block` of its group's block or range start): this node
    /// acknowledges nothing more of it until the owner's piece is installed again, and asks
    /// for it.
    pub fn gpt_refused(&mut self, owner: NodeId) {
        if let Some(r) = self.reps.get_mut(owner as usize) {
            r.refused = true;
            r.ack_due = false;
            self.drop_msg("gpt_refused");
            self.unsettled = true;
        }
    }

    /// The events handed out are applied: confirms installs, sends the acknowledgements
    /// owed, and moves on what waited for them.
    fn settle(&mut self) {
        self.unsettled = false;
        let mut local_refused: Vec<Bytes> = Vec::new();
        for u in std::mem::take(&mut self.unconfirmed) {
            if !u.failed {
                continue;
            }
            if self.tuning.fib_map {
                self.fib.remove(&u.key);
            }
            match u.from {
                Source::Stream(o, seq) => {
                    self.fin[o as usize].refused.insert(seq);
                }
                Source::Batch => local_refused.push(u.key),
                Source::Slice => self.fib_refused += 1,
            }
        }
        let me = self.me;
        if let Some(b) = &mut self.batch {
            if b.stage == Stage::Installing && b.local_wait {
                b.local_wait = false;
                for k in &local_refused {
                    if let Some(it) = b
                        .items
                        .iter_mut()
                        .find(|it| it.u.key == *k && it.install.is_some_and(|(h, _)| h == me))
                    {
                        it.refused = true;
                    }
                }
            }
        }
        for o in 0..self.spec.nodes {
            let oi = o as usize;
            if std::mem::take(&mut self.fin[oi].ack_due) {
                let f = &self.fin[oi];
                let mut applied = f.applied;
                let mut refused: Vec<u64> = f.refused.range(..=applied).copied().collect();
                if refused.len() > MAX_REFUSED {
                    // Acknowledge only up to the last refusal named.
                    refused.truncate(MAX_REFUSED + 1);
                    applied = refused.pop().expect("over the bound") - 1;
                }
                let id = self.new_id();
                self.send(o, id, Body::FibAck { applied, refused });
            }
            if std::mem::take(&mut self.reps[oi].ack_due) {
                self.send_delta_ack(o);
            }
        }
        for o in 0..self.spec.nodes {
            let r = &mut self.reps[o as usize];
            if r.refused && r.want_piece_at.is_none() {
                if o == self.me {
                    self.install_own_piece();
                } else if self.gpt.is_some() {
                    self.request_piece(o);
                }
            }
        }
        self.progress();
    }

    /// The next datagram to send (at most [`wire::MAX_DATAGRAM`] bytes).
    pub fn poll_transmit(&mut self) -> Option<(Peer, Vec<u8>)> {
        self.transmits.pop_front()
    }

    /// Everything handed out in [`Event::Persist`] events so far is durable.
    pub fn persisted(&mut self, now: Nanos) {
        self.persisted_through(now, self.persists_handed);
    }

    /// The first `n` [`Event::Persist`] events handed out (by [`Node::poll_event`]) are
    /// durable: for a driver whose log is written on another thread, which commits while
    /// more events are handed out ([`Node::persists_handed`] counts them).
    pub fn persisted_through(&mut self, now: Nanos, n: u64) {
        self.tick(now);
        self.durable = self.durable.max(n.min(self.persists_handed));
        self.progress();
    }

    /// [`Event::Persist`] events handed out so far.
    pub fn persists_handed(&self) -> u64 {
        self.persists_handed
    }

    // ----- inspection -------------------------------------------------------------------------

    /// This node's FIB slice as the control plane installed it (none without the map:
    /// [`Tuning::fib_map`]).
    pub fn fib_entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fib.iter()
    }

    /// This node's FIB value of `key` (`None` without the map: [`Tuning::fib_map`]).
    pub fn fib_get(&self, key: &[u8]) -> Option<&[u8]> {
        self.fib.get(key)
    }

    /// The replica GPT (None until every owner's piece arrived).
    pub fn gpt(&self) -> Option<&SetSep> {
        self.gpt.as_ref()
    }

    /// This owner's RIB entry of `key` (handling node, value), if the key is in its range and
    /// present (including changes accepted but not yet acknowledged).
    pub fn rib_get(&self, key: &[u8]) -> Option<(NodeId, &[u8])> {
        match self.pending.get(key) {
            Some(Some((n, v))) => Some((*n, v.as_slice())),
            Some(None) => None,
            None => self.table.entry(key),
        }
    }

    /// This owner's RIB (including changes accepted but not yet acknowledged): its table's
    /// entries, then the changes of the batch in flight.
    pub fn rib_entries(&self) -> impl Iterator<Item = (RibKey, NodeId, &[u8])> {
        let pending = &self.pending;
        let table = (self.table.entries()).filter(move |(k, _, _)| !pending.contains_key(&**k));
        let changed = (pending.iter())
            .filter_map(|(k, e)| e.as_ref().map(|(n, v)| (RibKey::new(k), *n, v.as_slice())));
        table.chain(changed)
    }

    /// Keys in this owner's RIB ([`Node::rib_entries`]).
    fn rib_len(&self) -> usize {
        let mut n = self.table.len();
        for (k, e) in &self.pending {
            match (self.table.entry(k).is_some(), e.is_some()) {
                (false, true) => n += 1,
                (true, false) => n -= 1,
                _ => {}
            }
        }
        n
    }

    /// This owner's table (its range's keys only).
    pub fn owner_table(&self) -> &Updatable {
        &self.table
    }

    /// The deltas this owner made since the last call, in order (kept only with
    /// [`Tuning::keep_own_deltas`]).
    pub fn take_own_deltas(&mut self) -> Vec<Delta> {
        std::mem::take(&mut self.own_deltas)
    }

    /// This node's epoch.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// This node's keys, its per-boot nonce and what it knows of its peers' ([`wire::Keys`]):
    /// for tests and diagnostics.
    pub fn keys(&self) -> &wire::Keys {
        &self.keys
    }

    /// Takes the cluster's new master secret (`cluster rotate-key`; [`wire::Keys::rotate`]):
    /// client requests made with the previous client key are refused from now on (`bad_tag`);
    /// datagrams to nodes are sealed with the previous pair keys for [`wire::KEY_SWITCH`]
    /// more and theirs accepted with them for [`wire::KEY_GRACE`]. Nothing else changes: the
    /// RIB, FIB, GPT, log, epoch and what the node knows of its peers stay.
    pub fn rotate_key(&mut self, now: Nanos, master: [u8; 32]) {
        self.tick(now);
        self.spec.key = master;
        self.keys.rotate(&master, self.now);
    }

    /// The node's id.
    pub fn id(&self) -> NodeId {
        self.me
    }

    /// Per owner, the (epoch, sequence number) this node's replica has applied; None before
    /// the owner's first piece.
    pub fn applied(&self, owner: NodeId) -> Option<(u32, u64)> {
        let r = self.reps.get(owner as usize)?;
        (r.have && self.gpt.is_some()).then_some((r.epoch, r.applied))
    }

    /// Whether the owner takes updates (its pieces are everywhere).
    pub fn serving(&self) -> bool {
        self.phase == Phase::Serving
    }

    /// Whether the node has its GPT and every owner's FIB slice.
    pub fn ready(&self) -> bool {
        self.gpt.is_some() && self.fin.iter().all(|f| f.slice_done)
    }

    /// Whether nothing is in flight: no queued or batched update, no unacknowledged stream item,
    /// piece or forward, no buffered delta.
    pub fn idle(&self) -> bool {
        self.queue.is_empty()
            && self.batch.is_none()
            && self.guests.idle()
            && self.forwards_out.is_empty()
            && self.state_wait.is_empty()
            && self.out.iter().all(|o| {
                o.fib.items().is_empty() && o.deltas.items().is_empty() && o.piece.is_none()
            })
            && self
                .reps
                .iter()
                .all(|r| r.pending.is_empty() && r.assembly.is_none())
    }

    /// What keeps [`Node::idle`] false (for test failure messages).
    #[doc(hidden)]
    pub fn busy(&self) -> String {
        let mut b = Vec::new();
        if !self.queue.is_empty() || self.batch.is_some() {
            b.push(format!(
                "queue {} batch {:?}",
                self.queue.len(),
                self.batch
                    .as_ref()
                    .map(|x| (x.stage, x.fib_wait.clone(), x.delta_wait))
            ));
        }
        if let Some(g) = self.guests.describe() {
            b.push(g);
        }
        if !self.state_wait.is_empty() {
            b.push(format!(
                "{} state changes not durable",
                self.state_wait.len()
            ));
        }
        if !self.forwards_out.is_empty() {
            let owners: BTreeMap<NodeId, bool> = (self.forwards_out.values())
                .map(|f| (f.owner, self.gone(f.owner)))
                .collect();
            b.push(format!(
                "{} forwards (to owner: gone {owners:?}; lease majority {})",
                self.forwards_out.len(),
                self.lease_majority()
            ));
        }
        if !self.origins.is_empty() {
            b.push(format!(
                "{} origins open ({:?})",
                self.origins.len(),
                (self.origins.values())
                    .map(|o| (o.remaining, o.results.len()))
                    .take(4)
                    .collect::<Vec<_>>()
            ));
        }
        for (p, o) in self.out.iter().enumerate() {
            if !o.fib.items().is_empty() || !o.deltas.items().is_empty() || o.piece.is_some() {
                b.push(format!(
                    "to {p} (epoch {} knows me {}): fib {} items acked {} sent {} retry {:?}; deltas {} acked {} sent {} retry {:?}; piece {:?}",
                    self.peers[p].epoch,
                    self.peers[p].knows_me,
                    o.fib.items().len(),
                    o.fib.acked,
                    o.fib.sent_upto,
                    o.fib.retry_at,
                    o.deltas.items().len(),
                    o.deltas.acked,
                    o.deltas.sent_upto,
                    o.deltas.retry_at,
                    o.piece.as_ref().map(|x| (x.seq, x.retry_at))
                ));
            }
        }
        for (o, r) in self.reps.iter().enumerate() {
            if !r.pending.is_empty() || r.assembly.is_some() {
                b.push(format!(
                    "rep {o}: pending {:?} applied {} assembly {:?}",
                    r.pending.keys().take(5).collect::<Vec<_>>(),
                    r.applied,
                    r.assembly
                        .as_ref()
                        .map(|a| (a.epoch, a.seq, a.have, a.chunks.len()))
                ));
            }
        }
        b.join("; ")
    }

    /// The node's state for `cluster status`.
    pub fn status(&self) -> Status {
        let owners = (0..self.spec.nodes)
            .map(|o| {
                let r = &self.reps[o as usize];
                OwnerStatus {
                    owner: o,
                    epoch: r.epoch,
                    applied_seq: r.applied,
                    lag: r.max_seen.saturating_sub(r.applied),
                    resyncs: r.resyncs,
                    slice_done: self.fin[o as usize].slice_done,
                    keys: if o == self.me {
                        self.table.len() as u64
                    } else {
                        r.keys
                    },
                }
            })
            .collect::<Vec<_>>();
        Status {
            node: self.me,
            epoch: self.epoch,
            ready: self.ready(),
            phase: self.phase.name().to_string(),
            gpt_digest: self
                .gpt
                .as_ref()
                .map(|g| format!("{:016x}", g.content_digest())),
            gpt_keys: self
                .gpt
                .as_ref()
                .map_or(0, |_| owners.iter().map(|o| o.keys).sum()),
            owners,
            own_seq: self.table.table().seq(),
            rib_keys: self.rib_len(),
            fib_entries: self.fib.len(),
            queued: self.queue.len() + self.batch.as_ref().map_or(0, |b| b.items.len()),
            applied: self.applied_updates,
            rejected: self
                .rejected
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            dropped: self
                .dropped
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            retransmits: self.retransmits,
            backlogs_dropped: self.backlogs_dropped,
            fib_refused: self.fib_refused,
            flows_moved: self.fo.moved_total,
            flows_given_back: self.fo.given_back,
            moves_pending: self.fo.pending(),
            stand_in_flows: self.si.installed,
            stand_in_updates: self.guests.applied,
            step_downs: self.step_downs,
            lease_losses: self.live.losses,
            lease_recoveries: self.live.recoveries,
            guest_items_stale: self.guests.stale_items,
            rejoining: self.rejoining(),
            votes_withheld: self.groups.iter().flatten().map(|g| g.withheld()).sum(),
            election_ticks_held: self.groups.iter().flatten().map(|g| g.held_ticks()).sum(),
            moved_away: self.fo.moved.len(),
            memory: {
                let tr = self.table.rib_bytes();
                crate::Memory {
                    rib: sb_common::hash_table_bytes(
                        self.pending.capacity(),
                        std::mem::size_of::<(Bytes, Option<(NodeId, Bytes)>)>(),
                    ),
                    fib_map: self.fib.bytes(),
                    table_rib: tr.touched,
                    table_rib_entries: tr.entries,
                    table: self.table.table().bytes(),
                    remembered: self.clients.bytes() + self.forwards_in.bytes(),
                    peer_streams: (0..self.spec.nodes)
                        .map(|p| self.peer_stream_bytes(p))
                        .sum(),
                    state_records: self.own_state.kept_bytes()
                        + (self.gstates.iter().flatten())
                            .map(|s| s.state.kept_bytes())
                            .sum::<usize>(),
                    raft_logs: (self.groups.iter().flatten())
                        .map(|g| g.store().held_bytes())
                        .sum(),
                }
            },
        }
    }

    // ----- plumbing ---------------------------------------------------------------------------

    fn tick(&mut self, now: Nanos) {
        self.now = self.now.max(now);
        self.keys.expire(self.now);
    }

    /// Fences this incarnation ([`Node::fenced`]), the first reason kept.
    fn fence(&mut self, why: &'static str) {
        if !self.fenced {
            self.fence_reason = Some(why);
        }
        self.fenced = true;
    }

    /// Why this incarnation is fenced (None: it is not): `another_leader` (another replica
    /// leads its range), `lease_lost` (it lost the majority of its peers' leases),
    /// `foreign_entry`, `batch_entry_replaced`, `newer_epoch_known` (its log was lost), ...
    pub fn fence_reason(&self) -> Option<&'static str> {
        self.fence_reason.filter(|_| self.fenced)
    }

    fn drop_msg(&mut self, why: &'static str) {
        *self.dropped.entry(why).or_insert(0) += 1;
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn jitter(&mut self, t: Nanos) -> Nanos {
        // Up to +1/8, so peers' retransmissions do not stay in step.
        t + splitmix(&mut self.rng) % (t / 8 + 1)
    }

    fn persist(&mut self, records: Vec<Vec<u8>>) -> u64 {
        self.events.push_back(Event::Persist { records });
        self.persists_made += 1;
        self.persists_made
    }

    fn send(&mut self, to: NodeId, msg_id: u64, body: Body) {
        let h = self.peer_header(to, msg_id, &body);
        let bytes = self.keys.seal(&h, &body);
        self.transmits.push_back((Peer::Node(to), bytes));
    }

    /// [`Node::send`] of a datagram whose tag binds `nonce` as the receiver's (an answer to
    /// that incarnation's hello, [`Body::EpochTaken`]).
    fn send_to_nonce(&mut self, to: NodeId, msg_id: u64, body: Body, nonce: u64) {
        let h = self.peer_header(to, msg_id, &body);
        let bytes = self.keys.seal_to_nonce(&h, &body, nonce);
        self.transmits.push_back((Peer::Node(to), bytes));
    }

    /// The header of a datagram to peer `to` (its counter taken).
    fn peer_header(&mut self, to: NodeId, msg_id: u64, body: &Body) -> Header {
        Header {
            kind: body.kind(),
            sender: self.me,
            receiver: to,
            cluster_id: self.spec.cluster_id,
            sender_epoch: self.epoch,
            receiver_epoch: self.peers[to as usize].epoch,
            msg_id,
            counter: self.keys.next_counter(to),
        }
    }

    fn send_client(&mut self, addr: SocketAddr, msg_id: u64, body: Body) -> Vec<u8> {
        let h = Header {
            kind: body.kind(),
            sender: self.me,
            receiver: wire::CLIENT_SENDER,
            cluster_id: self.spec.cluster_id,
            sender_epoch: self.epoch,
            receiver_epoch: 0,
            msg_id,
            counter: 0,
        };
        let bytes = self.keys.seal(&h, &body);
        self.transmits
            .push_back((Peer::Client(addr), bytes.clone()));
        bytes
    }

    fn send_hello(&mut self, p: NodeId) {
        let pi = p as usize;
        let rto = self.peers[pi].hello_rto;
        self.peers[pi].hello_rto = (rto * 2).min(self.tuning.rto_max);
        let next = self.now + self.jitter(rto);
        self.peers[pi].hello_at = next;
        let id = self.new_id();
        let nonce = self.keys.nonce();
        self.send(p, id, Body::Hello { nonce });
    }

    /// A peer started epoch `e` (a restart, or the first we hear of it).
    fn on_peer_epoch(&mut self, p: NodeId, e: u32) {
        let pi = p as usize;
        self.reasm.forget(p);
        for g in self.groups.iter_mut().flatten() {
            g.peer_restarted(p);
        }
        self.peers[pi].epoch = e;
        self.peers[pi].knows_me = false;
        self.peers[pi].hello_rto = self.tuning.rto;
        self.peers[pi].hello_at = self.now;
        if self.phase >= Phase::SyncFib {
            self.reset_peer_streams(p);
        }
    }

    /// New streams to a peer in a new epoch: its whole FIB slice, then our piece.
    fn reset_peer_streams(&mut self, p: NodeId) {
        self.restart_peer_streams(p, false);
    }

    /// Bytes this owner holds for peer `p`: its streams' unacknowledged items (deltas, FIB
    /// items) and their queues ([`Tuning::peer_backlog_bytes`] bounds them once `p` is gone).
    pub fn peer_stream_bytes(&self, p: NodeId) -> usize {
        self.out
            .get(p as usize)
            .map_or(0, |o| o.fib.bytes() + o.deltas.bytes())
    }

    /// Drops what this owner holds for peer `p` once it is more than
    /// [`Tuning::peer_backlog_bytes`] and `p` is gone; `p` is resynced when heard again
    /// ([`Node::resync_returned`]).
    fn bound_backlog(&mut self, p: NodeId) {
        let pi = p as usize;
        if p == self.me
            || self.peer_stream_bytes(p) <= self.tuning.peer_backlog_bytes
            || !self.gone(p)
        {
            return;
        }
        let o = &mut self.out[pi];
        o.fib.drop_all();
        o.deltas.drop_all();
        o.piece = None;
        o.resync = true;
        self.backlogs_dropped += 1;
    }

    /// Resyncs the peers whose backlog was dropped and that are no longer gone (heard again
    /// in the epoch they were in: in a new one, [`Node::on_peer_epoch`] did).
    fn resync_returned(&mut self) {
        if self.phase < Phase::SyncFib {
            return;
        }
        for p in 0..self.spec.nodes {
            let pi = p as usize;
            if self.out[pi].resync && self.peers[pi].epoch != 0 && !self.gone(p) {
                self.restart_peer_streams(p, true);
            }
        }
    }

    /// New streams to peer `p`: its whole FIB slice, then our piece. `resync`: `p` is in the
    /// epoch it was in when its backlog was dropped, so the FIB stream goes on from its
    /// number with a [`FibItem::Reset`] (the handler skips what it lacks) and the slice is
    /// followed by a prune (the removals dropped with the backlog).
    fn restart_peer_streams(&mut self, p: NodeId, resync: bool) {
        let pi = p as usize;
        let rto = self.tuning.rto;
        if resync {
            let o = &mut self.out[pi];
            o.fib.drop_all();
            o.deltas.drop_all();
            let seq = o.fib.next;
            o.fib.push(seq, FibItem::Reset);
        } else {
            self.out[pi].fib = OutStream::new(rto);
            self.out[pi].deltas = OutStream::new(rto);
        }
        self.out[pi].resync = false;
        self.out[pi].piece = None;
        // The batch's updates whose install was refused (a full FIB, a handler gone) are
        // undone when it propagates: the RIB holds their pending change until then, but the
        // slice holds their old entries. (The removal that undid a refused install at a gone
        // `p` was in the stream this one replaces: a value refused must not come back here.)
        let refused: Set<&[u8]> = (self.batch.iter())
            .flat_map(|b| &b.items)
            .filter(|it| it.refused && it.outcome == Outcome::Applied)
            .map(|it| it.u.key.as_slice())
            .collect();
        let mut slice: Vec<FibItem> = self
            .rib_entries()
            .filter(|(k, n, _)| *n == p && !refused.contains(&**k))
            .map(|(k, _, v)| FibItem::Install {
                key: (&*k).into(),
                value: v.into(),
            })
            .collect();
        // Flows the batch in flight moves away from `p` (or deletes), and those whose change
        // was refused: replicas may still send them to `p` until the batch's deltas are
        // everywhere, and the batch removes the moved ones from `p` afterwards (through this
        // stream, after the slice).
        if let Some(b) = &self.batch {
            for it in &b.items {
                if let (Outcome::Applied, Some((n0, v0))) = (it.outcome, &it.old) {
                    let moved = it.u.op == Op::Delete || it.u.node != p;
                    if *n0 == p && (moved || it.refused) {
                        slice.push(FibItem::Install {
                            key: it.u.key.clone(),
                            value: v0.clone(),
                        });
                    }
                }
            }
        }
        // The batch's installs at `p` in flight are in the slice: their refusals come by
        // their numbers in it.
        let mut moved: Map<Bytes, usize> = Map::default();
        if let Some(b) = self.batch.as_ref().filter(|b| b.stage == Stage::Installing) {
            for (i, it) in b.items.iter().enumerate() {
                if it.install.is_some_and(|(h, _)| h == p) {
                    moved.insert(it.u.key.clone(), i);
                }
            }
        }
        let s = &mut self.out[pi].fib;
        for it in slice {
            let seq = s.next;
            if let (false, FibItem::Install { key, .. }) = (moved.is_empty(), &it) {
                if let Some(&i) = moved.get(key) {
                    if let Some(b) = &mut self.batch {
                        b.items[i].install = Some((p, seq));
                    }
                }
            }
            s.push(seq, it);
        }
        let s = &mut self.out[pi].fib;
        let end = s.next;
        s.push(end, FibItem::SliceEnd);
        if resync && self.phase == Phase::Serving {
            // (Before serving, the prune comes with every peer's once the pieces are out.)
            s.push(end + 1, FibItem::Prune);
        }
        if let Some(b) = &mut self.batch {
            // The batch's installs for this peer are in the slice.
            b.fib_wait[pi] = end;
        }
        self.guest_stream_restarted(p);
        if self.phase >= Phase::Pieces {
            let rto = self.tuning.rto;
            self.send_piece(p, rto);
        }
        self.flush_fib(p);
    }

    fn flush_fib(&mut self, p: NodeId) {
        let pi = p as usize;
        if self.peers[pi].epoch == 0 {
            return;
        }
        let limit = self.out[pi].fib.limit(self.tuning.window);
        let pack = self.tuning.pack_bytes.clamp(400, BODY_MAX - 16);
        let mut msgs: Vec<(u64, Vec<FibItem>)> = Vec::new();
        {
            let s = &mut self.out[pi].fib;
            let mut bytes = 0;
            for (seq, item) in s.items.iter().skip(s.first_unsent()) {
                if *seq > limit {
                    break;
                }
                let l = wire::fib_item_len(item);
                let full = msgs
                    .last()
                    .is_none_or(|m| bytes + l > pack || m.1.len() == u16::MAX as usize);
                if full {
                    msgs.push((*seq, Vec::new()));
                    bytes = 0;
                }
                msgs.last_mut().expect("pushed").1.push(item.clone());
                bytes += l;
                s.sent_upto = *seq;
            }
            s.sent_through(self.now);
        }
        let acked = self.out[pi].fib.acked;
        for (first_seq, items) in msgs {
            let id = self.new_id();
            self.send(
                p,
                id,
                Body::Fib {
                    first_seq,
                    acked,
                    items,
                },
            );
        }
    }

    fn flush_deltas(&mut self, p: NodeId) {
        let pi = p as usize;
        if self.peers[pi].epoch == 0 {
            return;
        }
        let limit = self.out[pi].deltas.limit(self.tuning.window);
        let pack = self.tuning.pack_bytes.clamp(400, BODY_MAX - 16);
        let mut msgs: Vec<(u64, Vec<Arc<[u8]>>)> = Vec::new();
        {
            let s = &mut self.out[pi].deltas;
            let mut bytes = 0;
            for (seq, d) in s.items.iter().skip(s.first_unsent()) {
                if *seq > limit {
                    break;
                }
                let l = 2 + d.len();
                let full = msgs
                    .last()
                    .is_none_or(|m| bytes + l > pack || m.1.len() == u16::MAX as usize);
                if full {
                    msgs.push((*seq, Vec::new()));
                    bytes = 0;
                }
                msgs.last_mut().expect("pushed").1.push(d.clone());
                bytes += l;
                s.sent_upto = *seq;
            }
            s.sent_through(self.now);
        }
        for (first_seq, deltas) in msgs {
            let id = self.new_id();
            self.send(p, id, Body::Deltas { first_seq, deltas });
        }
    }

    /// The serialized piece of this owner's range at its current sequence number.
    fn snapshot(&mut self) -> (u64, Arc<Vec<u8>>) {
        let seq = self.table.table().seq();
        if let Some((s, b)) = &self.snapshot {
            if *s == seq {
                return (seq, b.clone());
            }
        }
        let range = self.spec.ranges[self.me as usize].clone();
        let piece = self
            .table
            .piece(range)
            .expect("the spec's range is valid for the owner's table");
        let b = Arc::new(piece.to_bytes());
        self.snapshot = Some((seq, b.clone()));
        (seq, b)
    }

    fn send_chunks(&mut self, p: NodeId, seq: u64, bytes: &[u8], which: Option<&[u32]>) {
        let chunk = self.tuning.chunk_bytes.clamp(256, CHUNK_BYTES);
        let count = bytes.len().div_ceil(chunk).max(1) as u32;
        let chunk = bytes.len().div_ceil(count as usize).max(1);
        let send_one = |node: &mut Node, i: u32| {
            let start = i as usize * chunk;
            let end = (start + chunk).min(bytes.len());
            let id = node.new_id();
            node.send(
                p,
                id,
                Body::PieceChunk {
                    seq,
                    total_len: bytes.len() as u32,
                    index: i,
                    count,
                    data: bytes[start..end].to_vec(),
                },
            );
        };
        match which {
            None => (0..count).for_each(|i| send_one(self, i)),
            Some(list) => list
                .iter()
                .filter(|&&i| i < count)
                .for_each(|&i| send_one(self, i)),
        }
    }

    /// Sends the current piece to `p` (retransmitted until `p` acknowledges its sequence number).
    fn send_piece(&mut self, p: NodeId, rto: Nanos) {
        let pi = p as usize;
        let (seq, bytes) = self.snapshot();
        if self.peers[pi].epoch != 0 {
            self.send_chunks(p, seq, &bytes, None);
        }
        let retry_at = self.now + self.jitter(rto);
        self.out[pi].piece = Some(PieceOut { seq, retry_at, rto });
        // The piece covers every delta up to `seq`.
        let s = &mut self.out[pi].deltas;
        s.pop_through(seq);
        s.sent_upto = s.sent_upto.max(seq);
    }

    fn request_piece(&mut self, o: NodeId) {
        let oi = o as usize;
        self.reps[oi].want_piece_at = Some(self.now + self.tuning.gap_timeout);
        self.send(
            o,
            0,
            Body::PieceRequest {
                seq: 0,
                missing: Vec::new(),
            },
        );
    }

    // ----- messages ---------------------------------------------------------------------------

    fn on_peer_message(&mut self, p: NodeId, h: &Header, body: Body) {
        let pi = p as usize;
        match body {
            Body::Hello { .. } => {
                let id = self.new_id();
                let nonce = self.keys.nonce();
                self.send(p, id, Body::HelloAck { nonce });
            }
            Body::HelloAck { .. } => {}
            Body::Heartbeat {
                stamp,
                echo,
                hears,
                hold_ms,
                declared_you,
            } => self.on_heartbeat(p, stamp, echo, hears, hold_ms, declared_you),
            Body::Forward(us) => self.on_forward(p, h.sender_epoch, h.msg_id, us),
            Body::ForwardReply(codes) => {
                let ok = self
                    .forwards_out
                    .get(&h.msg_id)
                    .is_some_and(|f| f.owner == p && f.indices.len() == codes.len());
                let outcomes: Option<Vec<Outcome>> =
                    codes.iter().map(|&c| Outcome::from_code(c)).collect();
                match (ok, outcomes) {
                    (true, Some(outcomes)) => {
                        let f = self.forwards_out.remove(&h.msg_id).expect("checked");
                        if f.tries == 1 {
                            let took = self.now.saturating_sub(f.sent_at);
                            self.peers[pi].fwd_rtt.sample(took);
                        }
                        for (i, o) in f.indices.into_iter().zip(outcomes) {
                            self.set_result(f.token, i, o);
                        }
                    }
                    _ => self.drop_msg("unexpected"),
                }
            }
            Body::Deltas { first_seq, deltas } => {
                self.take_deltas(p, h.sender_epoch, first_seq, deltas)
            }
            Body::DeltaAck { applied } => {
                if self.phase < Phase::Pieces {
                    return self.drop_msg("unexpected");
                }
                let applied = applied.min(self.table.table().seq());
                let (now, min, max) = (self.now, self.tuning.rto, self.tuning.rto_max);
                self.out[pi].deltas.ack(applied, now, min, max);
                if self.out[pi]
                    .piece
                    .as_ref()
                    .is_some_and(|ps| applied >= ps.seq)
                {
                    self.out[pi].piece = None;
                }
                self.flush_deltas(p);
            }
            Body::PieceChunk {
                seq,
                total_len,
                index,
                count,
                data,
            } => self.on_chunk(p, h.sender_epoch, seq, total_len, index, count, data),
            Body::PieceRequest { seq, missing } => {
                if self.phase < Phase::Pieces {
                    return self.drop_msg("unexpected");
                }
                match &self.snapshot {
                    Some((s, b)) if *s == seq && !missing.is_empty() => {
                        let b = b.clone();
                        self.send_chunks(p, seq, &b, Some(&missing));
                    }
                    _ => {
                        let rto = self.tuning.rto;
                        self.send_piece(p, rto);
                    }
                }
            }
            Body::Fib {
                first_seq,
                acked,
                items,
            } => self.on_fib(p, h.sender_epoch, first_seq, acked, items),
            Body::FibAck { applied, refused } => {
                let s = &mut self.out[pi].fib;
                let applied = applied.min(s.next.saturating_sub(1));
                let before = s.acked;
                for seq in refused {
                    if seq <= before || seq > applied {
                        continue; // told before, or not yet acknowledged
                    }
                    let of_batch = self.batch.as_mut().and_then(|b| {
                        (b.stage == Stage::Installing)
                            .then(|| b.items.iter_mut().find(|it| it.install == Some((p, seq))))
                            .flatten()
                    });
                    match of_batch {
                        Some(it) => it.refused = true,
                        // A slice's install: the handler is sized below its share.
                        None => self.fib_refused += 1,
                    }
                }
                let s = &mut self.out[pi].fib;
                let (now, min, max) = (self.now, self.tuning.rto, self.tuning.rto_max);
                s.ack(applied, now, min, max);
                self.flush_fib(p);
            }
            Body::Raft {
                group,
                msg,
                index,
                count,
                data,
            } => self.on_raft(p, group, msg, index, count, data),
            Body::RelayRequest { owner } => self.on_relay_request(p, owner),
            Body::Relay {
                owner,
                epoch,
                seq,
                total_len,
                index,
                count,
                data,
            } => self.on_relay(p, owner, epoch, seq, total_len, index, count, data),
            Body::ClientRequest { .. } | Body::ClientReply(_) | Body::EpochTaken { .. } => {
                self.drop_msg("unexpected")
            }
        }
    }

    /// Outcome of an update that can be judged without the RIB ([`precheck`]).
    fn precheck(&self, u: &Update) -> Option<Outcome> {
        precheck(&self.spec, u)
    }

    /// Whether client `client`'s request `seq` stamped `time`, not remembered, is fresh:
    /// Err with the reason it is not.
    fn fresh(&mut self, client: u64, seq: u64, time: u64) -> Result<(), &'static str> {
        let wall = self.now.saturating_add(self.wall_offset);
        if time < self.started.saturating_add(self.wall_offset) {
            return Err("request_before_start");
        }
        if time.saturating_add(self.tuning.request_max_age) < wall {
            return Err("request_too_old");
        }
        if time > wall.saturating_add(self.tuning.request_max_ahead) {
            return Err("request_ahead");
        }
        if let Some(w) = self.client_wins.get_mut(&client) {
            if seq <= w.floor || (w.since > 0 && time <= w.since) {
                return Err("request_replayed");
            }
            w.newest = w.newest.max(time);
            return Ok(());
        }
        if self.client_floor > 0 && time <= self.client_floor {
            return Err("request_replayed");
        }
        if self.client_wins.len() >= self.tuning.clients.max(1) {
            // Forget the client heard from least recently: its requests are refused from
            // now on as any unknown client's stamped before its newest.
            let (&c, w) = (self.client_wins.iter())
                .min_by_key(|(_, w)| w.newest)
                .expect("full");
            self.client_floor = self.client_floor.max(w.newest);
            self.client_wins.remove(&c);
        }
        self.client_wins.insert(
            client,
            ClientWin {
                floor: 0,
                since: self.client_floor,
                newest: time,
            },
        );
        Ok(())
    }

    fn on_client_request(
        &mut self,
        addr: SocketAddr,
        client: u64,
        id: u64,
        time: u64,
        us: Vec<Update>,
    ) {
        let key = (client, id);
        if let Some(st) = self.clients.map.get(&key) {
            if let Some(reply) = st.clone() {
                self.transmits.push_back((Peer::Client(addr), reply));
            }
            return;
        }
        if let Err(why) = self.fresh(client, id, time) {
            // Refused, and said so (the client learns its request was not applied here; a
            // replay's reply goes where the replay came from and says nothing new).
            self.drop_msg(why);
            let codes = vec![Outcome::Stale.code(); us.len()];
            self.send_client(addr, id, Body::ClientReply(codes));
            return;
        }
        if let Some((c, s)) = self.clients.start(key) {
            if let Some(w) = self.client_wins.get_mut(&c) {
                w.floor = w.floor.max(s);
            }
        }
        let token = self.new_id();
        self.origins.insert(
            token,
            Origin {
                kind: OriginKind::Client { addr, client, id },
                results: vec![u8::MAX; us.len()],
                remaining: us.len(),
            },
        );
        let mut by_owner: BTreeMap<NodeId, Vec<(u32, Update)>> = BTreeMap::new();
        let mut done = Vec::new();
        for (i, u) in us.into_iter().enumerate() {
            match self.precheck(&u) {
                Some(o) => done.push((i as u32, o)),
                None => by_owner
                    .entry(self.spec.owner_of(&u.key))
                    .or_default()
                    .push((i as u32, u)),
            }
        }
        for (o, list) in by_owner {
            if o == self.me {
                self.enqueue(token, list);
            } else {
                self.forward(o, token, list);
            }
        }
        for (i, o) in done {
            self.set_result(token, i, o);
        }
        if self.origins.get(&token).is_some_and(|o| o.remaining == 0) {
            self.complete(token);
        }
    }

    fn enqueue(&mut self, token: u64, list: Vec<(u32, Update)>) {
        if self.queue.len() + list.len() > self.tuning.max_queue {
            for (i, _) in list {
                self.set_result(token, i, Outcome::Busy);
            }
            return;
        }
        for (index, u) in list {
            self.queue.push_back(Queued {
                origin: token,
                index,
                u,
                expect: None,
            });
        }
    }

    fn forward(&mut self, owner: NodeId, token: u64, list: Vec<(u32, Update)>) {
        let mut to = owner;
        if self.gone(owner) {
            // The owner is down (failure detection): its stand-in takes the updates that need
            // no GPT change ([`guest`]); without one, not waited for.
            if self.guest_range(owner) {
                return self.guest_enqueue(owner, token, list);
            }
            match self.stand_in_of(owner).filter(|_| self.replicated()) {
                Some(s) if s != self.me => to = s,
                _ => {
                    for (i, _) in list {
                        self.set_result(token, i, Outcome::Timeout);
                    }
                    return;
                }
            }
        }
        let owner = to;
        let id = self.new_id();
        let (indices, updates): (Vec<u32>, Vec<Update>) = list.into_iter().unzip();
        let rto = self.peers[owner as usize]
            .fwd_rtt
            .rto(self.tuning.rto, self.tuning.rto_max);
        let retry_at = self.now + self.jitter(rto);
        self.send(owner, id, Body::Forward(updates.clone()));
        self.forwards_out.insert(
            id,
            FwdOut {
                owner,
                token,
                indices,
                updates,
                sent_at: self.now,
                tries: 1,
                retry_at,
                rto,
            },
        );
    }

    fn on_forward(&mut self, p: NodeId, epoch: u32, id: u64, us: Vec<Update>) {
        let key = (p, epoch, id);
        if let Some(st) = self.forwards_in.map.get(&key) {
            if let Some(codes) = st.clone() {
                // Sealed again: a new counter, past the peer's replay window.
                self.send(p, id, Body::ForwardReply(codes));
            }
            return;
        }
        let pi = p as usize;
        if self.forward_floor[pi].0 == epoch && id <= self.forward_floor[pi].1 {
            // Answered and forgotten: a replay.
            return self.drop_msg("forward_replayed");
        }
        if let Some((n, e, i)) = self.forwards_in.start(key) {
            let f = &mut self.forward_floor[n as usize];
            if f.0 != e {
                *f = (e, 0);
            }
            f.1 = f.1.max(i);
        }
        let token = self.new_id();
        self.origins.insert(
            token,
            Origin {
                kind: OriginKind::Forward { node: p, epoch, id },
                results: vec![u8::MAX; us.len()],
                remaining: us.len(),
            },
        );
        let mut mine = Vec::new();
        let mut guest: BTreeMap<NodeId, Vec<(u32, Update)>> = BTreeMap::new();
        let mut done = Vec::new();
        for (i, u) in us.into_iter().enumerate() {
            let o = self.spec.owner_of(&u.key);
            match self.precheck(&u) {
                Some(x) => done.push((i as u32, x)),
                None if o == self.me => mine.push((i as u32, u)),
                // Of a gone node's range, sent to this node as its stand-in ([`guest`]).
                None if self.guest_range(o) => guest.entry(o).or_default().push((i as u32, u)),
                // The sender took this node for a stand-in it is not (views of who is gone
                // differ for a moment): not applied here.
                None => done.push((i as u32, Outcome::Timeout)),
            }
        }
        self.enqueue(token, mine);
        for (o, list) in guest {
            self.guest_enqueue(o, token, list);
        }
        for (i, o) in done {
            self.set_result(token, i, o);
        }
        if self.origins.get(&token).is_some_and(|o| o.remaining == 0) {
            self.complete(token);
        }
    }

    fn set_result(&mut self, token: u64, index: u32, o: Outcome) {
        let Some(org) = self.origins.get_mut(&token) else {
            return;
        };
        let Some(slot) = org.results.get_mut(index as usize) else {
            return;
        };
        if *slot != u8::MAX {
            return;
        }
        *slot = o.code();
        org.remaining -= 1;
        if org.remaining == 0 {
            self.complete(token);
        }
    }

    fn complete(&mut self, token: u64) {
        let Some(org) = self.origins.remove(&token) else {
            return;
        };
        match org.kind {
            OriginKind::Client { addr, client, id } => {
                let bytes = self.send_client(addr, id, Body::ClientReply(org.results));
                self.clients.finish(&(client, id), bytes);
            }
            OriginKind::Internal => self.moves_done(token, &org.results),
            OriginKind::Forward { node, epoch, id } => {
                if self.peers[node as usize].epoch != epoch {
                    return; // that incarnation is gone
                }
                let codes = org.results.clone();
                self.send(node, id, Body::ForwardReply(org.results));
                self.forwards_in.finish(&(node, epoch, id), codes);
            }
        }
    }

    // ----- replica ----------------------------------------------------------------------------

    fn take_deltas(&mut self, o: NodeId, e: u32, first: u64, deltas: Vec<Arc<[u8]>>) {
        let oi = o as usize;
        let cap = self.tuning.reorder_buffer;
        let r = &mut self.reps[oi];
        if r.epoch != e || !r.have {
            // The owner's piece of this epoch has not arrived: it is on its way.
            return self.drop_msg("before_piece");
        }
        if !deltas.is_empty() {
            r.max_seen = r.max_seen.max(first + deltas.len() as u64 - 1);
        }
        let assembled = self.gpt.is_some();
        for (i, d) in deltas.into_iter().enumerate() {
            let seq = first + i as u64;
            let r = &mut self.reps[oi];
            if assembled && seq == r.applied + 1 && r.pending.is_empty() {
                // In order, nothing waiting (the usual case): applied at once.
                if !self.apply_delta(o, &d) {
                    return self.ack_owner(o);
                }
            } else if seq > r.applied && r.pending.len() < cap {
                r.pending.entry(seq).or_insert(d);
            }
        }
        self.drain(o);
        self.ack_owner(o);
    }

    /// Applies `bytes` as the next delta of `o`; on a bad one, drops what is buffered and asks
    /// the owner for its piece. Whether it applied.
    fn apply_delta(&mut self, o: NodeId, bytes: &[u8]) -> bool {
        let oi = o as usize;
        let Some(gpt) = &mut self.gpt else {
            return false;
        };
        let range = &self.spec.ranges[oi];
        let r = &mut self.reps[oi];
        let next = r.applied + 1;
        let ok = match Delta::from_bytes(bytes) {
            Ok(d) if d.seq() == next && range.contains(&(d.group() / 64)) => {
                gpt.apply_owner_delta(&d).is_ok().then_some(d)
            }
            _ => None,
        };
        match ok {
            Some(d) => {
                r.applied = next;
                r.keys = d.keys();
                self.events.push_back(Event::GptDelta(d));
                true
            }
            None => {
                r.pending.clear();
                r.gap_since = None;
                self.drop_msg("bad_delta");
                if o != self.me {
                    self.request_piece(o);
                }
                false
            }
        }
    }

    /// Applies an owner's buffered deltas that are next in order.
    fn drain(&mut self, o: NodeId) {
        let oi = o as usize;
        if self.gpt.is_none() {
            return;
        }
        let r = &mut self.reps[oi];
        let applied = r.applied;
        r.pending.retain(|&s, _| s > applied);
        loop {
            let r = &mut self.reps[oi];
            let Some(bytes) = r.pending.remove(&(r.applied + 1)) else {
                break;
            };
            if !self.apply_delta(o, &bytes) {
                return;
            }
        }
        let now = self.now;
        let r = &mut self.reps[oi];
        r.gap_since = if r.pending.is_empty() {
            None
        } else {
            Some(r.gap_since.unwrap_or(now))
        };
    }

    /// Owes owner `o` an acknowledgement of its deltas: sent once the events are applied
    /// ([`Node::settle`]).
    fn ack_owner(&mut self, o: NodeId) {
        if o != self.me {
            self.reps[o as usize].ack_due = true;
            self.unsettled = true;
        }
    }

    fn send_delta_ack(&mut self, o: NodeId) {
        if o == self.me || self.gpt.is_none() {
            return;
        }
        let r = &self.reps[o as usize];
        if !r.have || r.refused || r.epoch != self.peers[o as usize].epoch {
            return;
        }
        let applied = r.applied;
        let id = self.new_id();
        self.send(o, id, Body::DeltaAck { applied });
    }

    #[allow(clippy::too_many_arguments)]
    fn on_chunk(
        &mut self,
        o: NodeId,
        e: u32,
        seq: u64,
        total_len: u32,
        index: u32,
        count: u32,
        data: Vec<u8>,
    ) {
        let oi = o as usize;
        let now = self.now;
        let total = total_len as usize;
        // Chunks of ceil(total / count) bytes, the last one shorter, none empty.
        // The sizes come from a peer: bounded before anything is allocated for them (a piece of
        // a GPT of a billion keys is under 1 GiB), and the index within the count.
        if total == 0 || total > MAX_PIECE_BYTES || count == 0 || index >= count {
            return self.drop_msg("bad_chunk");
        }
        let chunk = total.div_ceil(count as usize);
        if chunk > CHUNK_BYTES || total.div_ceil(chunk) != count as usize {
            return self.drop_msg("bad_chunk");
        }
        let start = index as usize * chunk;
        if data.len() != (start + chunk).min(total).saturating_sub(start) {
            return self.drop_msg("bad_chunk");
        }
        let r = &mut self.reps[oi];
        if r.have && r.epoch == e && r.applied >= seq {
            // Already there (a retransmission): say so again.
            r.drop_stale_assembly();
            return self.ack_owner(o);
        }
        let fresh = match &r.assembly {
            None => true,
            Some(a) => (a.epoch, a.seq) < (e, seq),
        };
        if fresh {
            r.assembly = Some(Assembly {
                epoch: e,
                seq,
                total,
                chunks: vec![None; count as usize],
                have: 0,
                progress_at: now,
            });
        }
        let a = r.assembly.as_mut().expect("made above");
        if (a.epoch, a.seq) != (e, seq) || a.total != total {
            return self.drop_msg("stale_chunk");
        }
        let slot = &mut a.chunks[index as usize];
        if slot.is_none() {
            *slot = Some(data);
            a.have += 1;
            a.progress_at = now;
        }
        if a.have < a.chunks.len() {
            return;
        }
        let a = r.assembly.take().expect("complete");
        let mut bytes = Vec::with_capacity(a.total);
        for c in a.chunks {
            bytes.extend_from_slice(&c.expect("complete"));
        }
        match Piece::from_bytes(&bytes) {
            Ok(piece) => self.install(o, e, seq, piece),
            Err(_) => self.drop_msg("bad_piece"),
        }
    }

    /// Installs owner `o`'s piece of epoch `e`, a snapshot at `seq`.
    fn install(&mut self, o: NodeId, e: u32, seq: u64, piece: Piece) {
        let oi = o as usize;
        let g = &self.spec.gpt;
        if piece.range() != self.spec.ranges[oi]
            || piece.seed() != g.seed
            || piece.build_id() != g.build_id
            || piece.total_blocks() != g.total_blocks
        {
            return self.drop_msg("bad_piece");
        }
        let r = &mut self.reps[oi];
        if r.have && (r.epoch, r.applied) >= (e, seq) && !r.refused {
            return;
        }
        r.refused = false;
        let keys = piece.keys();
        match &mut self.gpt {
            Some(gpt) => {
                if gpt.install_piece(&piece).is_err() {
                    return self.drop_msg("bad_piece");
                }
                r.resyncs += 1;
                self.events.push_back(Event::GptPiece(piece));
            }
            None => r.initial = Some(piece),
        }
        if r.epoch != e {
            r.pending.clear();
            r.max_seen = 0;
        }
        r.epoch = e;
        r.applied = seq;
        r.keys = keys;
        r.max_seen = r.max_seen.max(seq);
        r.have = true;
        r.want_piece_at = None;
        if r.assembly
            .as_ref()
            .is_some_and(|a| (a.epoch, a.seq) <= (e, seq))
        {
            r.assembly = None;
        }
        if self.gpt.is_none() {
            self.try_assemble();
        } else {
            self.drain(o);
            self.ack_owner(o);
        }
    }

    fn try_assemble(&mut self) {
        if self.reps.iter().any(|r| r.initial.is_none()) {
            return;
        }
        let pieces: Vec<Piece> = self
            .reps
            .iter_mut()
            .map(|r| r.initial.take().expect("checked"))
            .collect();
        let kept = self.live_gpt.then(|| pieces.clone());
        match SetSep::assemble(pieces) {
            Ok(t) => {
                match kept {
                    // Written in place under the readers, range by range.
                    Some(ps) => self.events.extend(ps.into_iter().map(Event::GptPiece)),
                    None => {
                        self.events
                            .push_back(Event::GptInstall(Box::new(t.clone())));
                        // The new table has no redirects yet.
                        self.si.gpt_replaced();
                    }
                }
                self.gpt = Some(t);
                for o in 0..self.spec.nodes {
                    self.drain(o);
                    self.ack_owner(o);
                }
            }
            Err(_) => {
                // Pieces that do not fit together: start over.
                self.drop_msg("bad_piece");
                for o in 0..self.spec.nodes {
                    self.reps[o as usize].have = false;
                    if o != self.me {
                        self.request_piece(o);
                    }
                }
                if self.phase >= Phase::Pieces {
                    self.install_own_piece();
                }
            }
        }
    }

    fn install_own_piece(&mut self) {
        let range = self.spec.ranges[self.me as usize].clone();
        let piece = self.table.piece(range).expect("valid range");
        let seq = self.table.table().seq();
        let (me, e) = (self.me, self.epoch);
        self.install(me, e, seq, piece);
    }

    // ----- handler ----------------------------------------------------------------------------

    fn on_fib(&mut self, o: NodeId, e: u32, first: u64, acked: u64, items: Vec<FibItem>) {
        let oi = o as usize;
        let cap = self.tuning.reorder_buffer;
        // Stand-in entries for `o` are pruned by its next slice, even a first one.
        let stood_in = self.fin[oi].epoch != e && self.si.take_unpruned(o);
        let f = &mut self.fin[oi];
        if f.epoch != e {
            let restarted = f.epoch != 0 || stood_in;
            *f = FibIn {
                epoch: e,
                applied: 0,
                pending: BTreeMap::new(),
                sync: restarted.then(Set::default),
                slice_done: false,
                refused: Default::default(),
                ack_due: false,
            };
        }
        // The owner has heard of the refusals up to its acknowledgement.
        while f.refused.first().is_some_and(|&s| s <= acked) {
            f.refused.pop_first();
        }
        // A reset: the owner dropped the items before it (they never come again).
        if let Some(i) = items.iter().rposition(|it| *it == FibItem::Reset) {
            let seq = first + i as u64;
            if seq > f.applied {
                f.applied = seq - 1;
                f.pending = f.pending.split_off(&seq);
            }
        }
        for (i, it) in items.into_iter().enumerate() {
            let seq = first + i as u64;
            if seq > f.applied && f.pending.len() < cap {
                f.pending.entry(seq).or_insert(it);
            }
        }
        loop {
            let next = self.fin[oi].applied + 1;
            let Some(it) = self.fin[oi].pending.remove(&next) else {
                break;
            };
            self.fin[oi].applied += 1;
            // A stand-in's item ([`guest`]) is an install or removal once it is not stale
            // (it is no key of the sender's range: not in the sender's sync set).
            let (it, guest) = match it {
                FibItem::GuestInstall {
                    home_epoch,
                    key,
                    value,
                } => (FibItem::Install { key, value }, Some(home_epoch)),
                FibItem::GuestRemove { home_epoch, key } => {
                    (FibItem::Remove { key }, Some(home_epoch))
                }
                it => (it, None),
            };
            let stale = |n: &Self, key: &[u8]| guest.is_some_and(|e| n.guest_stale(o, key, e));
            match it {
                FibItem::Install { key, value } => {
                    // An owner of this cluster sends its widths; an item of others is counted
                    // and skipped (the stream goes on: its sequence number is used).
                    if key.len() != self.spec.key_bytes || value.len() != self.spec.value_bytes {
                        self.drop_msg("fib_item_width");
                        continue;
                    }
                    if stale(self, &key) {
                        self.guests.stale_items += 1;
                        continue;
                    }
                    if let (None, Some(s)) = (guest, &mut self.fin[oi].sync) {
                        s.insert(key.clone());
                    }
                    self.fib_insert(key, value, Source::Stream(o, next));
                }
                FibItem::Remove { key } => {
                    if stale(self, &key) {
                        self.guests.stale_items += 1;
                        continue;
                    }
                    self.fib_remove(&key)
                }
                // (Made installs and removals above.)
                FibItem::GuestInstall { .. } | FibItem::GuestRemove { .. } => {}
                FibItem::SliceEnd => self.fin[oi].slice_done = true,
                FibItem::Reset => {
                    // The owner's slice follows, then a prune of what is not in it.
                    let f = &mut self.fin[oi];
                    f.sync = Some(Set::default());
                    f.slice_done = false;
                }
                FibItem::Prune => {
                    if let Some(sync) = self.fin[oi].sync.take() {
                        if !self.tuning.fib_map {
                            self.events.push_back(Event::FibPrune {
                                owner: o,
                                keep: sync,
                            });
                            continue;
                        }
                        let stale: Vec<Bytes> = self
                            .fib
                            .iter()
                            .map(|(k, _)| k)
                            .filter(|k| self.spec.pruned(o, &sync, k))
                            .map(Bytes::from_slice)
                            .collect();
                        for k in stale {
                            self.fib_remove(&k);
                        }
                    }
                }
            }
        }
        // Acknowledged once the events are applied, with the installs refused.
        self.fin[oi].ack_due = true;
        self.unsettled = true;
    }

    fn fib_insert(&mut self, key: Bytes, value: Bytes, from: Source) {
        if self.tuning.fib_map {
            self.fib.insert(&key, &[&value]);
        }
        self.unconfirmed.push(Unconfirmed {
            key: key.clone(),
            from,
            failed: false,
        });
        self.unsettled = true;
        self.events.push_back(Event::FibInsert { key, value });
    }

    fn fib_remove(&mut self, key: &[u8]) {
        if !self.tuning.fib_map || self.fib.remove(key) {
            self.events.push_back(Event::FibRemove { key: key.into() });
        }
    }

    /// A FIB operation of this owner at handler `h`: local, or the next item of `h`'s stream
    /// (whose number it returns).
    fn fib_op(&mut self, h: NodeId, item: FibItem) -> u64 {
        if h == self.me {
            match item {
                FibItem::Install { key, value } => self.fib_insert(key, value, Source::Batch),
                FibItem::Remove { key } | FibItem::GuestRemove { key, .. } => self.fib_remove(&key),
                // A stand-in's own handling of a gone range's key: a refusal is counted, as a
                // slice's (it is no install of this owner's batch).
                FibItem::GuestInstall { key, value, .. } => {
                    self.fib_insert(key, value, Source::Slice)
                }
                FibItem::SliceEnd | FibItem::Prune | FibItem::Reset => {}
            }
            return 0;
        }
        let s = &mut self.out[h as usize].fib;
        let seq = s.next;
        s.push(seq, item);
        self.bound_backlog(h);
        seq
    }

    // ----- owner ------------------------------------------------------------------------------

    /// Moves the owner's phases and batches along as far as they go now.
    fn progress(&mut self) {
        if !self.fenced {
            self.resync_returned();
        }
        loop {
            if self.fenced {
                return;
            }
            let drove = self.drive_groups();
            self.settle_state();
            let before = (self.phase, self.batch.as_ref().map(|b| b.stage));
            match self.phase {
                Phase::Boot => {
                    if self.durable >= self.boot_persist {
                        // Without replication the election passes at once.
                        self.phase = Phase::Elect;
                    }
                }
                Phase::Elect => {
                    if self.elect() {
                        self.phase = Phase::SyncFib;
                        // Our own slice, then every known peer's.
                        let mine: Vec<(Bytes, Bytes)> = self
                            .rib_entries()
                            .filter(|(_, n, _)| *n == self.me)
                            .map(|(k, _, v)| ((&*k).into(), v.into()))
                            .collect();
                        for (k, v) in mine {
                            self.fib_insert(k, v, Source::Slice);
                        }
                        let me = self.me as usize;
                        self.fin[me].epoch = self.epoch;
                        self.fin[me].slice_done = true;
                        for p in 0..self.spec.nodes {
                            if p != self.me && self.peers[p as usize].epoch != 0 {
                                self.reset_peer_streams(p);
                            }
                        }
                    }
                }
                Phase::SyncFib => {
                    let done = (0..self.spec.nodes).all(|p| {
                        let pi = p as usize;
                        p == self.me
                            || self.gone(p)
                            || (self.peers[pi].epoch != 0 && self.out[pi].fib.items().is_empty())
                    });
                    if done {
                        self.phase = Phase::Pieces;
                        for p in 0..self.spec.nodes {
                            if p != self.me {
                                let rto = self.tuning.rto;
                                self.send_piece(p, rto);
                            }
                        }
                        self.install_own_piece();
                    }
                }
                Phase::Pieces => {
                    let done = (0..self.spec.nodes).all(|p| {
                        p == self.me || self.gone(p) || self.out[p as usize].piece.is_none()
                    });
                    if done {
                        self.phase = Phase::Serving;
                        for p in 0..self.spec.nodes {
                            if p != self.me {
                                self.fib_op(p, FibItem::Prune);
                                self.flush_fib(p);
                            }
                        }
                    }
                }
                Phase::Serving => {
                    self.failover_step();
                    self.advance_batch();
                }
            }
            let guests = self.guest_step();
            if !drove && !guests && before == (self.phase, self.batch.as_ref().map(|b| b.stage)) {
                break;
            }
        }
        self.stand_in_step();
        // Say hello to the peers that do not know this epoch yet.
        if self.phase != Phase::Boot {
            for p in 0..self.spec.nodes {
                let pi = p as usize;
                if p != self.me && !self.peers[pi].knows_me && self.peers[pi].hello_at <= self.now {
                    self.send_hello(p);
                }
            }
        }
    }

    /// Validates `u` against the RIB; if accepted, applies it to the RIB and returns the old
    /// entry.
    fn validate(&mut self, u: &Update) -> (Outcome, Option<(NodeId, Bytes)>) {
        if let Some(o) = self.precheck(u) {
            return (o, None);
        }
        if self.spec.owner_of(&u.key) != self.me {
            return (Outcome::Internal, None);
        }
        let old = self.rib_get(&u.key).map(|(n, v)| (n, Bytes::from_slice(v)));
        match (u.op, &old) {
            (Op::Insert, Some(_)) => return (Outcome::Exists, None),
            (Op::Change | Op::Delete, None) => return (Outcome::Missing, None),
            (Op::Insert | Op::Change, _) if self.gone(u.node) => {
                return (Outcome::HandlerDown, None)
            }
            (Op::Insert | Op::Change, _) => {
                self.pending
                    .insert(u.key.clone(), Some((u.node, u.value.clone())));
            }
            (Op::Delete, Some(_)) => {
                self.pending.insert(u.key.clone(), None);
            }
        }
        (Outcome::Applied, old)
    }

    fn advance_batch(&mut self) {
        let Some(stage) = self.batch.as_ref().map(|b| b.stage) else {
            return self.start_batch();
        };
        match stage {
            Stage::Persisting => {
                let b = self.batch.as_ref().expect("batch");
                let durable = match &self.groups[self.me as usize] {
                    // Committed in its term: a majority of the range's replicas has it.
                    Some(g) if g.committed() >= b.persist_n => {
                        if g.term_at(b.persist_n) != Some(b.term) {
                            self.fence("batch_entry_replaced");
                            return;
                        }
                        true
                    }
                    Some(_) => false,
                    None => self.durable >= b.persist_n,
                };
                if !durable {
                    return;
                }
                let mut b = self.batch.take().expect("batch");
                let mut fib_wait = std::mem::take(&mut b.fib_wait);
                let mut local_wait = false;
                for it in b.items.iter_mut().filter(|i| i.outcome == Outcome::Applied) {
                    let u = &it.u;
                    let install = match (u.op, &it.old) {
                        (Op::Insert, _) => true,
                        (Op::Change, Some((n, v))) => (*n, v) != (u.node, &u.value),
                        _ => false,
                    };
                    if install {
                        let seq = self.fib_op(
                            u.node,
                            FibItem::Install {
                                key: u.key.clone(),
                                value: u.value.clone(),
                            },
                        );
                        if u.node != self.me {
                            fib_wait[u.node as usize] = seq;
                        } else {
                            local_wait = true;
                        }
                        it.install = Some((u.node, seq));
                    }
                }
                self.batch = Some(Batch {
                    stage: Stage::Installing,
                    fib_wait,
                    local_wait,
                    ..b
                });
                for p in 0..self.spec.nodes {
                    if p != self.me {
                        self.flush_fib(p);
                    }
                }
            }
            Stage::Installing => {
                self.refuse_installs_at_gone();
                let b = self.batch.as_ref().expect("batch");
                let installed = !b.local_wait
                    && (0..self.spec.nodes as usize)
                        .all(|p| self.out[p].fib.acked >= b.fib_wait[p]);
                if installed {
                    self.propagate();
                }
            }
            Stage::Propagating => {
                let b = self.batch.as_ref().expect("batch");
                // Every node but those gone (failure detection: they are fenced).
                let everywhere = (0..self.spec.nodes).all(|p| {
                    p == self.me
                        || self.out[p as usize].deltas.acked >= b.delta_wait
                        || self.gone(p)
                });
                // With replication, the undoing of its refused updates is committed before
                // they are answered (a refused update must not come back with a new leader).
                let undone = match (b.undo, &self.groups[self.me as usize]) {
                    (Some((i, t)), Some(g)) if g.committed() >= i => {
                        if g.term_at(i) != Some(t) {
                            self.fence("undo_entry_replaced");
                            return;
                        }
                        true
                    }
                    (Some(_), _) => false,
                    (None, _) => true,
                };
                if everywhere && undone {
                    self.finish_batch();
                }
            }
        }
    }

    /// Gives up the batch's installs at handlers that are gone (failure detection): refused
    /// with [`Outcome::HandlerDown`] as a full FIB's, and undone in their streams (should the
    /// handler come back in the same epoch): removed, or, for a change of value at the same
    /// handler, the old value installed again.
    fn refuse_installs_at_gone(&mut self) {
        let Some(b) = self.batch.as_ref() else {
            return;
        };
        let gone: Vec<NodeId> = (0..self.spec.nodes)
            .filter(|&p| {
                p != self.me
                    && self.out[p as usize].fib.acked < b.fib_wait[p as usize]
                    && self.gone(p)
            })
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut b = self.batch.take().expect("batch");
        let mut undo = Vec::new();
        for &p in &gone {
            b.fib_wait[p as usize] = 0;
            let acked = self.out[p as usize].fib.acked;
            for it in b.items.iter_mut() {
                if matches!(it.install, Some((h, seq)) if h == p && seq > acked) {
                    it.refused = true;
                    it.down = true;
                    let key = it.u.key.clone();
                    undo.push(match &it.old {
                        Some((n0, v0)) if *n0 == p => (
                            p,
                            FibItem::Install {
                                key,
                                value: v0.clone(),
                            },
                        ),
                        _ => (p, FibItem::Remove { key }),
                    });
                }
            }
        }
        self.batch = Some(b);
        for (p, item) in undo {
            self.fib_op(p, item);
        }
    }

    fn start_batch(&mut self) {
        if !self.leads_own_group() {
            // Stepped down by check-quorum: the queue waits for the leadership
            // (`drive_groups`).
            return;
        }
        while self.batch.is_none() && !self.queue.is_empty() {
            let mut keys: Set<Bytes> = Set::default();
            let mut items = Vec::new();
            while let Some(q) = self.queue.front() {
                if items.len() >= self.tuning.max_batch || keys.contains(&q.u.key) {
                    break;
                }
                let mut q = self.queue.pop_front().expect("front");
                keys.insert(q.u.key.clone());
                if q.expect.is_none() {
                    self.to_survivor(&mut q.u);
                }
                let (outcome, old) = match q.expect {
                    // A move whose key a client's update took meanwhile: not applied.
                    Some(h) if self.rib_get(&q.u.key).map(|(n, _)| n) != Some(h) => {
                        (Outcome::Missing, None)
                    }
                    _ => self.validate(&q.u),
                };
                items.push(Item {
                    origin: q.origin,
                    index: q.index,
                    u: q.u,
                    outcome,
                    old,
                    install: None,
                    refused: false,
                    down: false,
                });
            }
            let accepted: Vec<&Update> = items
                .iter()
                .filter(|i| i.outcome == Outcome::Applied)
                .map(|i| &i.u)
                .collect();
            if accepted.is_empty() {
                for it in items {
                    self.count_outcome(it.outcome);
                    self.set_result(it.origin, it.index, it.outcome);
                }
                continue;
            }
            let rec = record::changes(self.change_seq + 1, accepted.iter().copied());
            self.change_seq += accepted.len() as u64;
            let ctx = self.own_ctx();
            let (persist_n, term) = match self.groups[self.me as usize].as_mut() {
                Some(g) => match g.propose(ctx, rec) {
                    Some(i) => (i, g.term()),
                    None => {
                        // No longer the leader: nothing of it is taken.
                        self.fence("batch_not_proposed");
                        self.pending.clear();
                        for it in items {
                            self.set_result(it.origin, it.index, Outcome::Timeout);
                        }
                        return;
                    }
                },
                None => (self.persist(vec![rec]), 0),
            };
            self.batch = Some(Batch {
                items,
                stage: Stage::Persisting,
                persist_n,
                term,
                fib_wait: vec![0; self.spec.nodes as usize],
                delta_wait: 0,
                undo: None,
                local_wait: false,
            });
        }
    }

    fn count_outcome(&mut self, o: Outcome) {
        if o == Outcome::Applied {
            self.applied_updates += 1;
        } else {
            *self.rejected.entry(o.name()).or_insert(0) += 1;
        }
    }

    /// Changes the owner's table for the batch and sends the deltas.
    fn propagate(&mut self) {
        let mut b = self.batch.take().expect("batch");
        // Installs a handler refused (its FIB is full): rejected before any GPT changes for
        // them, undone below as the table's refusals are.
        let mut failed: Vec<(usize, Outcome)> = Vec::new();
        for (i, it) in b.items.iter().enumerate() {
            if it.refused && it.outcome == Outcome::Applied {
                let why = if it.down {
                    Outcome::HandlerDown
                } else {
                    Outcome::FibFull
                };
                failed.push((i, why));
            }
        }
        for &(i, o) in &failed {
            b.items[i].outcome = o;
        }
        // The GPT operations in order: runs of inserts go through insert_batch.
        enum G {
            Ins(usize),
            Rem(usize),
        }
        let mut ops = Vec::new();
        for (i, it) in b.items.iter().enumerate() {
            if it.outcome != Outcome::Applied {
                continue;
            }
            match (it.u.op, &it.old) {
                (Op::Insert, _) => ops.push(G::Ins(i)),
                (Op::Change, Some((n, _))) if *n != it.u.node => ops.push(G::Ins(i)),
                (Op::Delete, _) => ops.push(G::Rem(i)),
                _ => {}
            }
        }
        let mut deltas: Vec<Delta> = Vec::new();
        let mut k = 0;
        while k < ops.len() {
            match ops[k] {
                G::Rem(i) => {
                    match self.table.remove(&b.items[i].u.key) {
                        Ok(Some(d)) => deltas.push(d),
                        Ok(None) => {}
                        Err(_) => failed.push((i, Outcome::Internal)),
                    }
                    k += 1;
                }
                G::Ins(_) => {
                    let run_end = ops[k..]
                        .iter()
                        .position(|g| matches!(g, G::Rem(_)))
                        .map_or(ops.len(), |x| k + x);
                    let idx: Vec<usize> = ops[k..run_end]
                        .iter()
                        .map(|g| match g {
                            G::Ins(i) | G::Rem(i) => *i,
                        })
                        .collect();
                    let mut from = 0;
                    while from < idx.len() {
                        // Each key with its handling node and, in the RIB, its FIB value.
                        let run: Vec<(&[u8], u16, &[u8])> = idx[from..]
                            .iter()
                            .map(|&i| {
                                let u = &b.items[i].u;
                                (u.key.as_slice(), u.node, u.value.as_slice())
                            })
                            .collect();
                        let mut made = 0;
                        let res = self.table.insert_batch_with_payloads(&run, |d| {
                            deltas.push(d);
                            made += 1;
                        });
                        match res {
                            Ok(()) => break,
                            Err(_) => {
                                failed.push((idx[from + made], Outcome::Internal));
                                from += made + 1;
                            }
                        }
                    }
                    k = run_end;
                }
            }
        }
        // Failed keys (two keys with one 128-bit hash): the table did not change for them,
        // so the RIB is as it was once their pending change goes; undo them in the log.
        let mut undo = Vec::new();
        for (i, o) in failed {
            let it = &mut b.items[i];
            it.outcome = o;
            self.pending.remove(&it.u.key);
            match it.old.clone() {
                Some((n, v)) => {
                    undo.push(Update {
                        op: Op::Change,
                        key: it.u.key.clone(),
                        node: n,
                        value: v,
                    });
                }
                None => {
                    undo.push(Update {
                        op: Op::Delete,
                        key: it.u.key.clone(),
                        node: 0,
                        value: Bytes::new(),
                    });
                }
            }
        }
        // A change of FIB value alone changes no GPT group: its value goes into the table's
        // RIB here (the inserts above carried theirs). The RIB is the table's again.
        for it in b.items.iter().filter(|i| i.outcome == Outcome::Applied) {
            if matches!((it.u.op, &it.old), (Op::Change, Some((n, _))) if *n == it.u.node) {
                let present = self.table.set_payload(&it.u.key, &it.u.value);
                debug_assert!(present, "a changed key is in the table");
            }
        }
        self.pending.clear();
        if !undo.is_empty() {
            let rec = record::changes(self.change_seq + 1, undo.iter());
            self.change_seq += undo.len() as u64;
            let ctx = self.own_ctx();
            match self.groups[self.me as usize].as_mut() {
                Some(g) => match g.propose(ctx, rec) {
                    Some(i) => b.undo = Some((i, g.term())),
                    None => self.fence("undo_not_proposed"),
                },
                None => {
                    self.persist(vec![rec]);
                }
            }
        }
        if self.tuning.keep_own_deltas {
            self.own_deltas.extend(deltas.iter().cloned());
        }
        if let (Some(first), Some(last)) = (deltas.first(), deltas.last()) {
            let (first_seq, last_seq) = (first.seq(), last.seq());
            let mut buf = Vec::new();
            let bytes: Vec<Arc<[u8]>> = (deltas.iter())
                .map(|d| {
                    buf.clear();
                    d.write_to(&mut buf);
                    Arc::from(&buf[..])
                })
                .collect();
            for p in 0..self.spec.nodes {
                if p == self.me {
                    continue;
                }
                let s = &mut self.out[p as usize].deltas;
                for (j, by) in bytes.iter().enumerate() {
                    s.push(first_seq + j as u64, by.clone());
                }
                self.bound_backlog(p);
            }
            b.delta_wait = last_seq;
            let (me, e) = (self.me, self.epoch);
            self.take_deltas(me, e, first_seq, bytes);
        }
        b.stage = Stage::Propagating;
        self.batch = Some(b);
        for p in 0..self.spec.nodes {
            if p != self.me {
                self.flush_deltas(p);
            }
        }
    }

    fn finish_batch(&mut self) {
        let b = self.batch.take().expect("batch");
        for it in &b.items {
            if it.outcome != Outcome::Applied {
                continue;
            }
            let remove_at = match (it.u.op, &it.old) {
                (Op::Change, Some((n, _))) if *n != it.u.node => Some(*n),
                (Op::Delete, Some((n, _))) => Some(*n),
                _ => None,
            };
            if let Some(h) = remove_at {
                self.fib_op(
                    h,
                    FibItem::Remove {
                        key: it.u.key.clone(),
                    },
                );
            }
        }
        for p in 0..self.spec.nodes {
            if p != self.me {
                self.flush_fib(p);
            }
        }
        for it in b.items {
            self.count_outcome(it.outcome);
            self.set_result(it.origin, it.index, it.outcome);
        }
    }
}
