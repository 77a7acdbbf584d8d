//! A deterministic simulation of a whole cluster in one process (the test harness of this
//! crate, public for its tests and examples): N [`Node`]s, a seeded network that drops, delays,
//! duplicates and reorders datagrams, a simulated clock and disk (fsync delay; a kill keeps
//! what was committed and a random prefix of what was not), a client sending random updates to
//! random nodes, and the data plane of each node modelled from its events (a FIB map and a
//! GPT). [`Sim::check`] checks the invariants after every step; a failure panics with the seed.

use crate::{
    client, wire, Bytes, ClusterSpec, Event, Flow, GptSpec, Move, Nanos, Node, NodeId, Op, Outcome,
    Peer, Tuning, Update,
};
use sb_setsep::{Delta, Piece, SetSep};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;

/// A simulation's parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The schedule's seed: everything random in the run derives from it.
    pub seed: u64,
    /// Nodes.
    pub nodes: u16,
    /// Initial flows.
    pub flows: usize,
    /// Blocks per node.
    pub blocks_per_node: u64,
    /// Datagrams dropped, per mille (while faults are on).
    pub drop_permille: u64,
    /// Datagrams duplicated, per mille.
    pub dup_permille: u64,
    /// Largest delivery delay (random between 0 and this: reordering).
    pub max_delay: Nanos,
    /// Commit delay of a log append.
    pub fsync_delay: Nanos,
    /// Client requests in flight at most.
    pub inflight: usize,
    /// Updates per request at most.
    pub max_updates: usize,
    /// Mean time between client requests.
    pub request_every: Nanos,
    /// Check the invariants after every step (else only at the end).
    pub check_every_step: bool,
    /// The nodes' tuning.
    pub tuning: Tuning,
    /// Entries each node's modelled FIB holds at most (an install beyond is refused:
    /// [`Node::install_failed`]); None: no bound. The initial flows must fit.
    pub fib_capacity: Option<usize>,
    /// Per mille of log commits after which the node's log is replaced by its checkpoint
    /// ([`Node::checkpoint`], when it gives one): restarts then replay checkpointed logs.
    pub checkpoint_permille: u64,
    /// Per mille of datagrams between nodes after which an attacker on the network sends a
    /// datagram it captured earlier (any since the start, before restarts of either end
    /// included) to its receiver again (while faults are on). Each must change nothing:
    /// the replay window, the nonces in the tags and the epochs refuse it.
    pub replay_permille: u64,
    /// Per mille of client requests beside which a random serving node changes its range's
    /// PFCP state records ([`Node::put_state`]: a few of 16 keys kept or removed); the checks
    /// expect every acknowledged change in the owner's records and its replicas'.
    pub state_permille: u64,
}

impl SimConfig {
    /// Small datagrams (a few deltas or FIB items each, pieces in many chunks), so that
    /// reordering splits batches and pieces.
    pub fn small_datagrams(mut self) -> Self {
        self.tuning.pack_bytes = 400;
        self.tuning.chunk_bytes = 256;
        self
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            nodes: 3,
            flows: 100,
            blocks_per_node: 1,
            drop_permille: 50,
            dup_permille: 30,
            max_delay: 5_000_000,
            fsync_delay: 1_000_000,
            inflight: 4,
            max_updates: 6,
            request_every: 5_000_000,
            check_every_step: true,
            tuning: Tuning {
                keep_own_deltas: true,
                ..Tuning::default()
            },
            fib_capacity: None,
            checkpoint_permille: 0,
            replay_permille: 0,
            state_permille: 300,
        }
    }
}

/// How long a node stands in for a gone one before the checks expect it to hold every flow of
/// the gone node's own range (its replica of the range's log may lack the last commits until
/// the range's group has a new leader, a few election timeouts).
const STAND_IN_SETTLE: Nanos = 2_000_000_000;

/// How long the client goes on resending a request to a node after the node was killed.
const ABANDON_DEAD: Nanos = 1_000_000_000;

/// Bytes of a simulated key and value.
pub const KEY_BYTES: usize = 8;
const VALUE_BYTES: usize = 4;

fn rnd(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn below(x: &mut u64, n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        rnd(x) % n
    }
}

/// Where a datagram goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Dest {
    Node(NodeId),
    Client,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Nanos,
    seq: u64,
    to: Dest,
    from: Peer,
    bytes: Vec<u8>,
}

struct Req {
    node: NodeId,
    bytes: Vec<u8>,
    updates: Vec<Update>,
    expected: Vec<Outcome>,
    /// Old entries of the updates' keys (for changes: the allowed handlers in flight).
    old: Vec<Option<(NodeId, Bytes)>>,
    uncertain: bool,
    retry_at: Nanos,
    give_up_at: Nanos,
}

/// A replica's expected table and the (epoch, seq) per owner it is at.
type Shadow = (SetSep, Vec<Option<(u32, u64)>>);

/// The simulated cluster.
pub struct Sim {
    /// The parameters.
    pub cfg: SimConfig,
    spec: ClusterSpec,
    rng: u64,
    /// Simulated time.
    pub now: Nanos,
    nodes: Vec<Option<Node>>,
    flows: Vec<Vec<Flow>>,
    committed: Vec<Vec<Vec<u8>>>,
    uncommitted: Vec<Vec<Vec<u8>>>,
    fsync_at: Vec<Option<Nanos>>,
    /// Per node: stopped until then ([`Sim::stall`]; 0: not).
    stalled_until: Vec<Nanos>,
    /// Per node: declared gone by a node in this epoch of its, and not fenced yet nor
    /// cleared of its suspicion (`Node::suspect`): its GPT may lag (owners stopped waiting
    /// for it), so make-before-break is not checked at it, as at a node that restarts.
    lagging: Vec<Option<u32>>,
    /// Nodes found declared gone before their fence (their GPT not checked meanwhile).
    pub declared_before_fence: u64,
    /// The data plane of each node: FIB and GPT, from its events.
    fibs: Vec<HashMap<Bytes, Bytes>>,
    gpts: Vec<Option<SetSep>>,
    /// Each node's data plane's stand-ins ([`Event::StandIns`]), and since when each node has
    /// stood in for each other one (by its own table).
    stand_ins: Vec<Vec<Option<NodeId>>>,
    standing_since: Vec<Vec<Option<Nanos>>>,
    net: BinaryHeap<std::cmp::Reverse<InFlight>>,
    net_seq: u64,
    /// Datagrams between nodes captured for replays ([`SimConfig::replay_permille`]).
    captured: Vec<(Peer, Dest, Vec<u8>)>,
    /// Replays sent.
    pub replays: u64,
    /// Links cut: (from, to) node pairs whose datagrams are lost.
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Links whose datagrams an attacker holds back ([`Sim::hold_back`]), and what it holds.
    held_links: BTreeSet<(NodeId, NodeId)>,
    held: VecDeque<(Peer, Dest, Vec<u8>)>,
    /// Restarts of owners that lost their range's leadership ([`Node::fenced`]).
    pub fenced_restarts: u64,
    /// Nodes restarted with their log lost ([`Sim::wipe`]).
    pub wipes: u64,
    /// Restarts of wiped nodes in the epoch their peers told them ([`Node::rejoin_records`]).
    pub rejoins: u64,
    /// Logs replaced by their node's checkpoint ([`SimConfig::checkpoint_permille`]).
    pub checkpoints: u64,
    /// Snapshots made anew for raft to send ([`Node::serve_snapshots`]).
    pub snapshots_served: u64,
    /// Updates rejected because their new handler was declared down.
    pub handler_down: u64,
    /// Updates of a gone owner's range that need it (inserts, handler changes): rejected.
    pub owner_down: u64,
    /// Acknowledged updates of ranges whose owner the client's node held gone when it sent
    /// them (applied by a stand-in: changes keeping the handler, deletions).
    pub acked_in_gone_ranges: u64,
    /// Flows the owners moved off gone handlers, and gave back ([`Node::take_moves`]).
    pub flows_moved: u64,
    pub given_back: u64,
    faults: bool,
    client_addr: SocketAddr,
    reqs: BTreeMap<u64, Req>,
    next_req: u64,
    next_request_at: Nanos,
    clients_on: bool,
    /// Acknowledged state: key -> (node, value).
    oracle: BTreeMap<Bytes, (NodeId, Bytes)>,
    inflight_keys: BTreeSet<Bytes>,
    uncertain: BTreeSet<Bytes>,
    next_key: u64,
    /// Per (owner, epoch): the base piece and the deltas 1, 2, ...
    history: HashMap<(NodeId, u32), (Piece, Vec<Delta>)>,
    /// Per node: the replica applied (epoch, seq) per owner last seen.
    seen: Vec<Vec<Option<(u32, u64)>>>,
    shadows: Vec<Option<Shadow>>,
    /// Updates acknowledged as applied.
    pub acked_updates: u64,
    /// Updates rejected because their handler's FIB was full.
    pub fib_full: u64,
    /// Installs the modelled FIBs refused.
    pub installs_refused: u64,
    /// Requests answered.
    pub replies: u64,
    /// Steps run.
    pub steps: u64,
    /// Datagrams delivered.
    pub delivered: u64,
    /// Something the invariants look at changed in this step.
    dirty: bool,
    checks: u64,
    /// What happened to each key (for failure messages).
    trail: HashMap<Bytes, Vec<String>>,
    /// Per range, its PFCP state records as acknowledged ([`Event::StateDurable`]) and the
    /// keys whose changes were in flight when their proposer stopped (either outcome); per
    /// node, the changes it proposed in flight by ticket, with their range.
    state_oracle: Vec<BTreeMap<u64, Vec<u8>>>,
    state_uncertain: Vec<BTreeSet<u64>>,
    state_pending: Vec<BTreeMap<u64, (NodeId, StateChange)>>,
    /// State changes acknowledged to a node leading a gone home's range in its place
    /// ([`Node::put_state_for`]), and those a new leader dropped.
    pub state_acked_for_gone: u64,
    pub state_dropped: u64,
    /// State changes acknowledged.
    pub state_acked: u64,
}

/// A change of a range's state records: the keys kept with their bytes, the keys removed.
type StateChange = (Vec<(u64, Vec<u8>)>, Vec<u64>);

/// Key number `n` ([`Sim::fresh_key`]).
fn key_of(n: u64) -> Bytes {
    let mut k = Bytes::from_slice(&(n << 16).to_le_bytes());
    k[0] = if n % 2 == 1 { 0x5a } else { 0xa5 };
    k[1] = 0x5a;
    k
}

impl Sim {
    /// A cluster of `cfg.nodes` nodes with `cfg.flows` random initial flows, started.
    pub fn new(cfg: SimConfig) -> Sim {
        let mut rng = cfg.seed ^ 0x5151_5151;
        let n = cfg.nodes;
        let total = n as u64 * cfg.blocks_per_node;
        let spec = ClusterSpec {
            cluster_id: 77,
            nodes: n,
            key: [0xa5; 32],
            gpt: GptSpec {
                index_bits: 16,
                array_bits: 8,
                value_bits: 16 - (n.leading_zeros() as u8).min(15),
                seed: rnd(&mut rng),
                build_id: rnd(&mut rng),
                total_blocks: total,
                build_threads: 1,
            },
            ranges: (0..n as u64)
                .map(|i| i * cfg.blocks_per_node..(i + 1) * cfg.blocks_per_node)
                .collect(),
            key_bytes: KEY_BYTES,
            value_bytes: VALUE_BYTES,
        };
        let mut sim = Sim {
            spec: spec.clone(),
            rng,
            now: 0,
            nodes: (0..n).map(|_| None).collect(),
            flows: vec![Vec::new(); n as usize],
            committed: vec![Vec::new(); n as usize],
            uncommitted: vec![Vec::new(); n as usize],
            fsync_at: vec![None; n as usize],
            stalled_until: vec![0; n as usize],
            lagging: vec![None; n as usize],
            declared_before_fence: 0,
            fibs: vec![HashMap::new(); n as usize],
            gpts: (0..n).map(|_| None).collect(),
            stand_ins: vec![Vec::new(); n as usize],
            standing_since: vec![vec![None; n as usize]; n as usize],
            net: BinaryHeap::new(),
            net_seq: 0,
            captured: Vec::new(),
            replays: 0,
            cut: BTreeSet::new(),
            held_links: BTreeSet::new(),
            held: VecDeque::new(),
            fenced_restarts: 0,
            wipes: 0,
            rejoins: 0,
            checkpoints: 0,
            snapshots_served: 0,
            handler_down: 0,
            owner_down: 0,
            acked_in_gone_ranges: 0,
            flows_moved: 0,
            given_back: 0,
            faults: true,
            client_addr: "10.9.9.9:4000".parse().expect("address"),
            reqs: BTreeMap::new(),
            next_req: 1,
            next_request_at: 0,
            clients_on: true,
            oracle: BTreeMap::new(),
            inflight_keys: BTreeSet::new(),
            uncertain: BTreeSet::new(),
            next_key: 0,
            history: HashMap::new(),
            seen: vec![vec![None; n as usize]; n as usize],
            shadows: (0..n).map(|_| None).collect(),
            acked_updates: 0,
            fib_full: 0,
            installs_refused: 0,
            replies: 0,
            steps: 0,
            delivered: 0,
            dirty: true,
            checks: 0,
            trail: HashMap::new(),
            state_oracle: vec![BTreeMap::new(); n as usize],
            state_uncertain: vec![BTreeSet::new(); n as usize],
            state_pending: vec![BTreeMap::new(); n as usize],
            state_acked: 0,
            state_acked_for_gone: 0,
            state_dropped: 0,
            cfg,
        };
        for _ in 0..sim.cfg.flows {
            let key = sim.fresh_key();
            let node = below(&mut sim.rng, n as u64) as NodeId;
            let value = sim.value();
            let o = spec.owner_of(&key);
            sim.flows[o as usize].push(Flow {
                key: key.clone(),
                node,
                value: value.clone(),
            });
            sim.oracle.insert(key, (node, value));
        }
        for i in 0..n {
            sim.start_node(i);
        }
        sim
    }

    /// A new key: `5a 5a` or `a5 5a` (odd and even counts, so that a RIB key prefix of
    /// `5a 5a` is left out of half the keys), then the count's low 6 bytes.
    fn fresh_key(&mut self) -> Bytes {
        self.next_key += 1;
        key_of(self.next_key)
    }

    fn value(&mut self) -> Bytes {
        Bytes::from_slice(&(rnd(&mut self.rng) as u32).to_le_bytes())
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "seed {} at t={} ns, step {}: {what}",
            self.cfg.seed, self.now, self.steps
        );
    }

    fn start_node(&mut self, i: NodeId) {
        let ii = i as usize;
        let seed = rnd(&mut self.rng);
        let node = Node::with_tuning(
            self.spec.clone(),
            i,
            self.flows[ii].clone(),
            self.committed[ii].clone(),
            self.now,
            seed,
            self.cfg.tuning.clone(),
        )
        .unwrap_or_else(|e| self.fail(format!("node {i} does not start: {e}")));
        if node.table_built() {
            let range = self.spec.ranges[ii].clone();
            let base = node.owner_table().piece(range).expect("range");
            self.history.insert((i, node.epoch()), (base, Vec::new()));
        }
        self.seen[ii] = vec![None; self.spec.nodes as usize];
        self.shadows[ii] = None;
        self.nodes[ii] = Some(node);
        self.pump(i);
    }

    /// A move between handlers that owner `i` applied ([`Node::take_moves`]): the key's
    /// acknowledged state.
    fn on_move(&mut self, i: NodeId, m: Move) {
        self.dirty = true;
        let now = self.now;
        self.trail.entry(m.key.clone()).or_default().push(format!(
            "t={now} owner {i} moved it {} -> {} (back: {})",
            m.from, m.to, m.back
        ));
        if m.back {
            self.given_back += 1;
        } else {
            self.flows_moved += 1;
        }
        if self.inflight_keys.contains(&m.key) {
            self.uncertain.insert(m.key.clone());
        }
        self.oracle.insert(m.key, (m.to, m.value));
    }

    /// The moves between handlers in the live owners' queues and batches: (key, from, to).
    fn moves_in_flight(&self) -> Vec<(Bytes, NodeId, NodeId)> {
        (self.nodes.iter().flatten())
            .flat_map(|n| n.moves_in_flight().map(|(k, f, t)| (k.clone(), f, t)))
            .collect()
    }

    /// Kills node `i`: its state, FIB and GPT are gone; its log keeps what was committed and a
    /// random prefix of what was not.
    pub fn kill(&mut self, i: NodeId) {
        let ii = i as usize;
        // Its moves between handlers may or may not have been made durable.
        if let Some(n) = &self.nodes[ii] {
            let keys: Vec<Bytes> = n.moves_in_flight().map(|(k, _, _)| k.clone()).collect();
            self.uncertain.extend(keys);
        }
        self.nodes[ii] = None;
        for (range, (puts, dels)) in std::mem::take(&mut self.state_pending[ii]).into_values() {
            let keys = puts.iter().map(|(k, _)| *k).chain(dels);
            self.state_uncertain[range as usize].extend(keys);
        }
        self.fibs[ii].clear();
        self.gpts[ii] = None;
        self.stand_ins[ii].clear();
        self.standing_since[ii].fill(None);
        let keep = below(&mut self.rng, self.uncommitted[ii].len() as u64 + 1) as usize;
        let kept: Vec<Vec<u8>> = self.uncommitted[ii].drain(..).take(keep).collect();
        self.committed[ii].extend(kept);
        self.fsync_at[ii] = None;
        self.stalled_until[ii] = 0;
        // Whatever was in flight through or at this node has an unknown outcome now. A
        // request sent to it is abandoned after a while, as a client without an answer moves
        // on (it holds one of the client's few slots in flight: with a single slot, waiting
        // out the whole give-up time stopped every update while the node stayed down).
        let now = self.now;
        for r in self.reqs.values_mut() {
            if r.node == i || r.updates.iter().any(|u| self.spec.owner_of(&u.key) == i) {
                r.uncertain = true;
            }
            if r.node == i {
                r.give_up_at = r.give_up_at.min(now + ABANDON_DEAD);
            }
        }
    }

    /// Stops node `i` until `until` (simulated time), as a control thread held by a long
    /// checkpoint: its timers, log syncs and datagrams wait (none is lost) until then.
    pub fn stall(&mut self, i: NodeId, until: Nanos) {
        self.stalled_until[i as usize] = until;
    }

    fn stalled(&self, i: usize) -> bool {
        self.stalled_until[i] > self.now
    }

    /// Node `i` announces a pause of `d` ([`Node::announce_pause`]).
    pub fn announce_pause(&mut self, i: NodeId, d: Nanos) {
        if let Some(n) = self.nodes[i as usize].as_mut() {
            n.announce_pause(d);
            self.pump(i);
        }
    }

    /// Restarts node `i` from its log.
    pub fn restart(&mut self, i: NodeId) {
        self.start_node(i);
    }

    /// Kills node `i` and restarts it with its log lost (an empty disk): the driver tells the
    /// node ([`Node::mark_log_lost`]).
    pub fn wipe(&mut self, i: NodeId) {
        self.lose_log_from(i, 0);
    }

    /// Kills node `i` and restarts it with the records of its log from a random one on lost:
    /// a damaged acknowledged record, which the driver removes with everything after it
    /// (`sb_wal::Wal::discard_after`) before it tells the node ([`Node::mark_log_lost`]).
    pub fn damage(&mut self, i: NodeId) {
        let ii = i as usize;
        self.kill(i);
        let n = self.committed[ii].len() as u64;
        let keep = below(&mut self.rng, n.max(1)) as usize;
        self.lose_log_from(i, keep);
    }

    fn lose_log_from(&mut self, i: NodeId, keep: usize) {
        let ii = i as usize;
        self.kill(i);
        self.committed[ii].truncate(keep);
        self.uncommitted[ii].clear();
        if self.cfg.tuning.replicas.min(self.spec.nodes as usize) <= 1 {
            // Its range's state records were on its log alone.
            self.state_oracle[ii].clear();
            self.state_uncertain[ii].clear();
        }
        self.wipes += 1;
        self.start_node(i);
        if let Some(n) = self.nodes[ii].as_mut() {
            n.mark_log_lost();
        }
        self.pump(i);
    }

    /// Cuts the link from `a` to `b` (and from `b` to `a` if `symmetric`): datagrams are
    /// lost until [`Sim::heal`].
    pub fn partition(&mut self, a: NodeId, b: NodeId, symmetric: bool) {
        self.cut.insert((a, b));
        if symmetric {
            self.cut.insert((b, a));
        }
    }

    /// Cuts node `a` off from every other node, both ways.
    pub fn isolate(&mut self, a: NodeId) {
        for b in 0..self.spec.nodes {
            if b != a {
                self.partition(a, b, true);
            }
        }
    }

    /// Restores every link.
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// An attacker on the link from `a` to `b` holds back its datagrams (`on`), or lets them
    /// pass again: they are lost to `b` until [`Sim::release_held`].
    pub fn hold_back(&mut self, a: NodeId, b: NodeId, on: bool) {
        if on {
            self.held_links.insert((a, b));
        } else {
            self.held_links.remove(&(a, b));
        }
    }

    /// Delivers the oldest datagram held back, now; whether there was one.
    pub fn release_held(&mut self) -> bool {
        let Some((from, to, bytes)) = self.held.pop_front() else {
            return false;
        };
        self.net_seq += 1;
        self.net.push(std::cmp::Reverse(InFlight {
            at: self.now,
            seq: self.net_seq,
            to,
            from,
            bytes,
        }));
        true
    }

    /// Turns network faults on or off.
    pub fn set_faults(&mut self, on: bool) {
        self.faults = on;
    }

    /// Turns the client on or off.
    pub fn set_client(&mut self, on: bool) {
        self.clients_on = on;
    }

    /// Node `i`'s data plane's stand-ins ([`Event::StandIns`]; empty before any).
    pub fn stand_ins(&self, i: NodeId) -> &[Option<NodeId>] {
        &self.stand_ins[i as usize]
    }

    /// Whether node `i`'s data plane's FIB holds `key`.
    pub fn fib_has(&self, i: NodeId, key: &[u8]) -> bool {
        self.fibs[i as usize].contains_key(key)
    }

    /// The keys of node `h`'s own range that the oracle says it handles (acknowledged, not in
    /// doubt).
    pub fn own_flows(&self, h: NodeId) -> Vec<Bytes> {
        (self.oracle.iter())
            .filter(|(k, (n, _))| {
                *n == h
                    && self.spec.owner_of(k) == h
                    && !self.uncertain.contains(*k)
                    && !self.inflight_keys.contains(*k)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The node `i`, if up.
    pub fn node(&self, i: NodeId) -> Option<&Node> {
        self.nodes[i as usize].as_ref()
    }

    fn send(&mut self, from: Peer, to: Dest, bytes: Vec<u8>) {
        assert!(bytes.len() <= wire::MAX_DATAGRAM, "datagram too large");
        if let (Peer::Node(a), Dest::Node(b)) = (&from, &to) {
            if self.cut.contains(&(*a, *b)) {
                return;
            }
            if self.held_links.contains(&(*a, *b)) {
                self.held.push_back((from, to, bytes));
                return;
            }
        }
        if self.faults && self.cfg.replay_permille > 0 && matches!(to, Dest::Node(_)) {
            // The attacker keeps up to 4096 captures, each new one in a random slot once full.
            const KEEP: usize = 4096;
            let c = (from.clone(), to.clone(), bytes.clone());
            if self.captured.len() < KEEP {
                self.captured.push(c);
            } else {
                let i = below(&mut self.rng, KEEP as u64) as usize;
                self.captured[i] = c;
            }
            if below(&mut self.rng, 1000) < self.cfg.replay_permille {
                let i = below(&mut self.rng, self.captured.len() as u64) as usize;
                let (from, to, bytes) = self.captured[i].clone();
                let delay = below(&mut self.rng, self.cfg.max_delay + 1);
                self.replays += 1;
                self.net_seq += 1;
                self.net.push(std::cmp::Reverse(InFlight {
                    at: self.now + delay,
                    seq: self.net_seq,
                    to,
                    from,
                    bytes,
                }));
            }
        }
        let copies = if self.faults {
            if below(&mut self.rng, 1000) < self.cfg.drop_permille {
                0
            } else if below(&mut self.rng, 1000) < self.cfg.dup_permille {
                2
            } else {
                1
            }
        } else {
            1
        };
        for _ in 0..copies {
            let delay = if self.faults {
                below(&mut self.rng, self.cfg.max_delay + 1)
            } else {
                100_000
            };
            self.net_seq += 1;
            self.net.push(std::cmp::Reverse(InFlight {
                at: self.now + delay,
                seq: self.net_seq,
                to: to.clone(),
                from: from.clone(),
                bytes: bytes.clone(),
            }));
        }
    }

    /// Drains node `i`'s events (applied to its modelled data plane) then its datagrams.
    fn pump(&mut self, i: NodeId) {
        let ii = i as usize;
        let Some(node) = self.nodes[ii].as_mut() else {
            return;
        };
        let mut sends = Vec::new();
        while let Some(ev) = node.poll_event() {
            self.dirty = true;
            match ev {
                Event::Persist { records } => {
                    self.uncommitted[ii].extend(records);
                    if self.fsync_at[ii].is_none() {
                        self.fsync_at[ii] = Some(self.now + self.cfg.fsync_delay);
                    }
                }
                Event::FibInsert { key, value } => {
                    let full = self
                        .cfg
                        .fib_capacity
                        .is_some_and(|c| self.fibs[ii].len() >= c);
                    if full && !self.fibs[ii].contains_key(&key) {
                        // A full table refuses a new key (an overwrite needs no room).
                        self.installs_refused += 1;
                        node.install_failed(&key);
                    } else {
                        self.fibs[ii].insert(key, value);
                    }
                }
                Event::FibRemove { key } => {
                    self.fibs[ii].remove(&key);
                }
                Event::FibPrune { owner, keep } => {
                    let spec = &self.spec;
                    self.fibs[ii].retain(|k, _| !spec.pruned(owner, &keep, k));
                }
                Event::GptDelta(d) => match &mut self.gpts[ii] {
                    Some(g) => {
                        if let Err(e) = g.apply_owner_delta(&d) {
                            panic!(
                                "seed {}: node {i}: a delta event does not apply: {e}",
                                self.cfg.seed
                            );
                        }
                    }
                    None => panic!("seed {}: node {i}: a delta before the GPT", self.cfg.seed),
                },
                Event::GptPiece(p) => match &mut self.gpts[ii] {
                    Some(g) => g.install_piece(&p).expect("a piece event installs"),
                    None => panic!("seed {}: node {i}: a piece before the GPT", self.cfg.seed),
                },
                Event::GptInstall(t) => {
                    self.gpts[ii] = Some(*t);
                    self.stand_ins[ii].clear();
                }
                Event::StateDropped(ticket) => {
                    // Not applied (its entry lost to another leader's): certain again only
                    // once a later change of the same keys is acknowledged.
                    let Some((range, (puts, dels))) = self.state_pending[ii].remove(&ticket) else {
                        panic!(
                            "seed {}: node {i}: ticket {ticket} dropped twice or never given",
                            self.cfg.seed
                        );
                    };
                    let keys = puts.iter().map(|(k, _)| *k).chain(dels);
                    self.state_uncertain[range as usize].extend(keys);
                    self.state_dropped += 1;
                }
                Event::StateDurable(ticket) => {
                    let Some((range, (puts, dels))) = self.state_pending[ii].remove(&ticket) else {
                        panic!(
                            "seed {}: node {i}: ticket {ticket} acknowledged twice or never given",
                            self.cfg.seed
                        );
                    };
                    let r = range as usize;
                    for (k, v) in puts {
                        self.state_uncertain[r].remove(&k);
                        self.state_oracle[r].insert(k, v);
                    }
                    for k in dels {
                        self.state_uncertain[r].remove(&k);
                        self.state_oracle[r].remove(&k);
                    }
                    self.state_acked += 1;
                    self.state_acked_for_gone += u64::from(range != i);
                }
                Event::StandIns(t) => {
                    for (o, by) in t.iter().enumerate() {
                        let mine = *by == Some(i);
                        let since = &mut self.standing_since[ii][o];
                        if !mine {
                            *since = None;
                        } else if since.is_none() {
                            *since = Some(self.now);
                        }
                    }
                    self.stand_ins[ii] = t;
                }
            }
        }
        while let Some((to, bytes)) = node.poll_transmit() {
            sends.push((to, bytes));
        }
        let epoch = node.epoch();
        if node.table_built() && !self.history.contains_key(&(i, epoch)) {
            // With replication the owner's table is built once it leads its range's group:
            // its first piece is the base of this epoch's history.
            let range = self.spec.ranges[ii].clone();
            let base = node.owner_table().piece(range).expect("range");
            self.history.insert((i, epoch), (base, Vec::new()));
        }
        let moves = node.take_moves();
        let moving: Vec<Bytes> = node.moves_in_flight().map(|(k, _, _)| k.clone()).collect();
        let own = node.take_own_deltas();
        if !own.is_empty() {
            let h = &mut self.history.get_mut(&(i, epoch)).expect("history").1;
            for d in own {
                assert_eq!(d.seq(), h.len() as u64 + 1, "owner deltas in order");
                h.push(d);
            }
        }
        for m in moves {
            self.on_move(i, m);
        }
        for k in moving {
            // A client's update of a key being moved: either may come first, so the handlers
            // its lookups may give are not known.
            if self.inflight_keys.contains(&k) {
                self.uncertain.insert(k);
            }
        }
        for (to, bytes) in sends {
            match to {
                Peer::Node(j) => self.send(Peer::Node(i), Dest::Node(j), bytes),
                Peer::Client(_) => self.send(Peer::Node(i), Dest::Client, bytes),
            }
        }
    }

    /// When the next thing happens.
    fn next_time(&self) -> Option<Nanos> {
        let mut t: Option<Nanos> = None;
        let mut at = |x: Nanos| t = Some(t.map_or(x, |t: Nanos| t.min(x)));
        if let Some(std::cmp::Reverse(m)) = self.net.peek() {
            at(m.at);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            let from = self.stalled_until[i];
            if let Some(n) = n {
                if let Some(x) = n.poll_timeout() {
                    at(x.max(from));
                }
            }
            if let Some(x) = self.fsync_at[i] {
                at(x.max(from));
            }
        }
        for r in self.reqs.values() {
            at(r.retry_at.min(r.give_up_at));
        }
        if self.clients_on {
            at(self.next_request_at);
        }
        t
    }

    /// Runs one step (everything due at the next time); false if nothing is left to do.
    pub fn step(&mut self) -> bool {
        let Some(t) = self.next_time() else {
            return false;
        };
        self.now = self.now.max(t);
        self.steps += 1;
        let now = self.now;
        // Deliveries.
        while self.net.peek().is_some_and(|m| m.0.at <= now) {
            let std::cmp::Reverse(mut m) = self.net.pop().expect("peeked");
            if let Dest::Node(j) = m.to {
                if self.stalled(j as usize) {
                    m.at = self.stalled_until[j as usize];
                    self.net.push(std::cmp::Reverse(m));
                    continue;
                }
            }
            self.delivered += 1;
            match m.to {
                Dest::Node(j) => {
                    if let Some(n) = self.nodes[j as usize].as_mut() {
                        n.handle(now, m.from, &m.bytes);
                        self.pump(j);
                    }
                }
                Dest::Client => self.on_reply(&m.bytes),
            }
        }
        for i in 0..self.spec.nodes {
            let ii = i as usize;
            if self.stalled(ii) {
                continue;
            }
            if self.fsync_at[ii].is_some_and(|x| x <= now) {
                self.fsync_at[ii] = None;
                let recs: Vec<Vec<u8>> = self.uncommitted[ii].drain(..).collect();
                self.committed[ii].extend(recs);
                if let Some(n) = self.nodes[ii].as_mut() {
                    n.persisted(now);
                }
                self.pump(i);
                // Now and then the log so far is replaced by the node's checkpoint (what
                // the pump handed out since is part of it: committed with it).
                if self.cfg.checkpoint_permille > 0
                    && below(&mut self.rng, 1000) < self.cfg.checkpoint_permille
                {
                    if let Some(c) = self.nodes[ii].as_mut().and_then(|n| n.checkpoint()) {
                        self.uncommitted[ii].clear();
                        self.committed[ii] = c;
                        self.checkpoints += 1;
                    }
                }
            }
            if let Some(n) = self.nodes[ii].as_mut() {
                if n.poll_timeout().is_some_and(|x| x <= now) {
                    n.handle_timeout(now);
                    self.pump(i);
                }
            }
            // A snapshot raft asked for, whose data the store dropped, is made anew (the
            // node driver does it between iterations, after announcing a pause).
            if let Some(n) = self.nodes[ii].as_mut() {
                if n.snapshot_wanted() && n.serve_snapshots() > 0 {
                    self.snapshots_served += 1;
                    self.pump(i);
                }
            }
        }
        for i in 0..self.spec.nodes {
            if self.nodes[i as usize].as_ref().is_some_and(|n| n.fenced()) {
                let rejoin = self.nodes[i as usize]
                    .as_ref()
                    .and_then(|n| n.rejoin_records());
                // The owner lost its range's leadership: restarted from its log; or a peer
                // knows a newer epoch of it (its log was lost): restarted from the log the
                // node gives.
                self.fenced_restarts += 1;
                self.kill(i);
                if let Some(recs) = rejoin {
                    self.rejoins += 1;
                    self.committed[i as usize] = recs;
                    self.uncommitted[i as usize].clear();
                }
                self.restart(i);
            }
        }
        self.client_step();
        self.note_lagging();
        if self.cfg.check_every_step && std::mem::take(&mut self.dirty) {
            self.check();
        }
        true
    }

    /// Marks the nodes some node declared gone in their current epoch ([`Sim::lagging`]),
    /// until they are in a new epoch or no longer suspects.
    fn note_lagging(&mut self) {
        let n = self.spec.nodes;
        for i in 0..n {
            let ii = i as usize;
            let Some(node) = self.nodes[ii].as_ref() else {
                self.lagging[ii] = None;
                continue;
            };
            let e = node.epoch();
            let declared = (0..n).filter(|&o| o != i).any(|o| {
                self.nodes[o as usize]
                    .as_ref()
                    .is_some_and(|x| x.declared_gone(i))
            });
            if declared {
                if self.lagging[ii] != Some(e) {
                    self.declared_before_fence += 1;
                }
                self.lagging[ii] = Some(e);
            } else if self.lagging[ii].is_some_and(|l| l != e || !node.suspect()) {
                self.lagging[ii] = None;
            }
        }
    }

    /// A few of a random range's 16 state records change: by its home where it serves, else
    /// (the home down) by the live node leading the range's group in its place.
    fn state_step(&mut self) {
        let range = below(&mut self.rng, self.spec.nodes as u64) as NodeId;
        let serving = |n: &Node| n.ready() && !n.fenced();
        let by = if self.nodes[range as usize].as_ref().is_some_and(serving) {
            Some(range)
        } else if self.nodes[range as usize].is_none() {
            (0..self.spec.nodes).find(|&j| {
                self.nodes[j as usize]
                    .as_ref()
                    .is_some_and(|n| serving(n) && n.leads_range(range))
            })
        } else {
            None
        };
        let Some(by) = by.filter(|&b| !self.stalled(b as usize)) else {
            return;
        };
        let i = by as usize;
        let mut puts = Vec::new();
        for _ in 0..below(&mut self.rng, 3) {
            let k = below(&mut self.rng, 16);
            let len = below(&mut self.rng, 40) as usize;
            let v: Vec<u8> = (0..len).map(|_| rnd(&mut self.rng) as u8).collect();
            puts.push((k, v));
        }
        let dels: Vec<u64> = (0..below(&mut self.rng, 2))
            .map(|_| below(&mut self.rng, 16))
            .collect();
        let node = self.nodes[i].as_mut().expect("up");
        match node.put_state_for(range, puts.clone(), dels.clone()) {
            Ok(ticket) => {
                self.state_pending[i].insert(ticket, (range, (puts, dels)));
            }
            // Fenced by the proposal (it lost its leadership): restarted in the next step.
            Err(crate::ControlError::NotServing) => {}
            Err(e) => self.fail(format!("node {i}: put_state: {e}")),
        }
        self.pump(i as NodeId);
    }

    fn client_step(&mut self) {
        let now = self.now;
        // Retries and give-ups.
        let ids: Vec<u64> = self.reqs.keys().copied().collect();
        for id in ids {
            let r = self.reqs.get_mut(&id).expect("id");
            if r.give_up_at <= now {
                let r = self.reqs.remove(&id).expect("id");
                for u in &r.updates {
                    self.inflight_keys.remove(&u.key);
                    self.uncertain.insert(u.key.clone());
                }
                continue;
            }
            if r.retry_at <= now {
                r.retry_at = now + 300_000_000;
                let (node, bytes) = (r.node, r.bytes.clone());
                let from = Peer::Client(self.client_addr);
                self.send(from, Dest::Node(node), bytes);
            }
        }
        if !self.clients_on || self.next_request_at > now {
            return;
        }
        self.next_request_at = now + 1 + below(&mut self.rng, 2 * self.cfg.request_every);
        if below(&mut self.rng, 1000) < self.cfg.state_permille {
            self.state_step();
        }
        if self.reqs.len() >= self.cfg.inflight {
            return;
        }
        let up: Vec<NodeId> = (0..self.spec.nodes)
            .filter(|&i| self.nodes[i as usize].is_some())
            .collect();
        if up.is_empty() {
            return;
        }
        let node = up[below(&mut self.rng, up.len() as u64) as usize];
        let n = 1 + below(&mut self.rng, self.cfg.max_updates as u64) as usize;
        let mut updates = Vec::new();
        let mut expected = Vec::new();
        let mut old = Vec::new();
        let mut used = BTreeSet::new();
        let stable: Vec<Bytes> = self
            .oracle
            .keys()
            .filter(|k| !self.inflight_keys.contains(*k) && !self.uncertain.contains(*k))
            .cloned()
            .collect();
        for _ in 0..n {
            let kind = below(&mut self.rng, 100);
            let nodes = self.spec.nodes as u64;
            let pick = |s: &mut Sim, used: &BTreeSet<Bytes>| -> Option<Bytes> {
                if stable.is_empty() {
                    return None;
                }
                let k = stable[below(&mut s.rng, stable.len() as u64) as usize].clone();
                (!used.contains(&k)).then_some(k)
            };
            let (u, e) = if kind < 35 || stable.is_empty() {
                let key = self.fresh_key();
                let node = below(&mut self.rng, nodes) as NodeId;
                let value = self.value();
                (
                    Update {
                        op: Op::Insert,
                        key,
                        node,
                        value,
                    },
                    Outcome::Applied,
                )
            } else if kind < 75 {
                let Some(key) = pick(self, &used) else {
                    continue;
                };
                let cur = self.oracle[&key].0;
                let node = if below(&mut self.rng, 3) == 0 {
                    cur
                } else {
                    below(&mut self.rng, nodes) as NodeId
                };
                let value = self.value();
                (
                    Update {
                        op: Op::Change,
                        key,
                        node,
                        value,
                    },
                    Outcome::Applied,
                )
            } else if kind < 93 {
                let Some(key) = pick(self, &used) else {
                    continue;
                };
                (
                    Update {
                        op: Op::Delete,
                        key,
                        node: 0,
                        value: Bytes::new(),
                    },
                    Outcome::Applied,
                )
            } else {
                // Refused ones.
                match below(&mut self.rng, 4) {
                    0 => {
                        let Some(key) = pick(self, &used) else {
                            continue;
                        };
                        let value = self.value();
                        (
                            Update {
                                op: Op::Insert,
                                key,
                                node: 0,
                                value,
                            },
                            Outcome::Exists,
                        )
                    }
                    1 => {
                        let key = self.fresh_key();
                        (
                            Update {
                                op: Op::Delete,
                                key,
                                node: 0,
                                value: Bytes::new(),
                            },
                            Outcome::Missing,
                        )
                    }
                    2 => (
                        Update {
                            op: Op::Insert,
                            key: Bytes::from_slice(&[1, 2, 3, 4, 5]),
                            node: 0,
                            value: Bytes::from_elem(0, VALUE_BYTES),
                        },
                        Outcome::BadKeyLength,
                    ),
                    _ => {
                        let key = self.fresh_key();
                        (
                            Update {
                                op: Op::Insert,
                                key,
                                node: self.spec.nodes,
                                value: Bytes::from_elem(0, VALUE_BYTES),
                            },
                            Outcome::NodeOutOfRange,
                        )
                    }
                }
            };
            if u.key.len() == KEY_BYTES {
                if used.contains(&u.key) {
                    continue;
                }
                used.insert(u.key.clone());
            }
            old.push(self.oracle.get(&u.key).cloned());
            updates.push(u);
            expected.push(e);
        }
        if updates.is_empty() {
            return;
        }
        let id = self.next_req;
        for u in &updates {
            if u.key.len() == KEY_BYTES {
                self.inflight_keys.insert(u.key.clone());
                self.trail.entry(u.key.clone()).or_default().push(format!(
                    "t={now} request {id} to node {node}: {:?} -> {}",
                    u.op, u.node
                ));
            }
        }
        self.next_req += 1;
        self.dirty = true;
        let stamp = client::Stamp {
            client: self.cfg.seed ^ 0xc1c1,
            seq: id,
            time: now,
        };
        let bytes = client::encode_request(
            &self.spec.client_key(),
            self.spec.cluster_id,
            node,
            stamp,
            &updates,
        )
        .expect("fits");
        self.send(
            Peer::Client(self.client_addr),
            Dest::Node(node),
            bytes.clone(),
        );
        self.reqs.insert(
            id,
            Req {
                node,
                bytes,
                updates,
                expected,
                old,
                uncertain: false,
                retry_at: now + 300_000_000,
                give_up_at: now + 60_000_000_000,
            },
        );
    }

    fn on_reply(&mut self, bytes: &[u8]) {
        let reply = match client::decode_reply(&self.spec.client_key(), self.spec.cluster_id, bytes)
        {
            Ok(r) => r,
            Err(e) => self.fail(format!("the client cannot decode a reply: {e}")),
        };
        let Some(r) = self.reqs.remove(&reply.id) else {
            return; // a duplicate
        };
        self.replies += 1;
        self.dirty = true;
        if reply.results.len() != r.updates.len() {
            self.fail(format!(
                "reply {} has {} results",
                reply.id,
                reply.results.len()
            ));
        }
        for (((u, want), got), old) in (r.updates.iter().zip(&r.expected))
            .zip(&reply.results)
            .zip(&r.old)
        {
            if u.key.len() == KEY_BYTES {
                self.inflight_keys.remove(&u.key);
                let now = self.now;
                self.trail.entry(u.key.clone()).or_default().push(format!(
                    "t={now} reply {}: {got:?} (uncertain: {})",
                    reply.id, r.uncertain
                ));
            }
            if r.uncertain || *got == Outcome::Timeout {
                if *want == Outcome::Applied {
                    self.uncertain.insert(u.key.clone());
                }
                continue;
            }
            // A full FIB at the new handler: rejected, nothing changed (the oracle stays).
            let installs = match (u.op, old) {
                (Op::Insert, _) => true,
                (Op::Change, Some((n, v))) => (*n, v) != (u.node, &u.value),
                _ => false,
            };
            if *got == Outcome::FibFull
                && *want == Outcome::Applied
                && installs
                && self.cfg.fib_capacity.is_some()
            {
                self.fib_full += 1;
                continue;
            }
            // The new handler was declared down (failure detection): rejected, nothing
            // changed.
            if *got == Outcome::HandlerDown && *want == Outcome::Applied && installs {
                self.handler_down += 1;
                continue;
            }
            // Its range's owner was declared down and the update needs it (an insert, a
            // change of handler): rejected, nothing changed.
            if *got == Outcome::OwnerDown
                && *want == Outcome::Applied
                && (u.op == Op::Insert || old.as_ref().is_some_and(|(n, _)| *n != u.node))
            {
                self.owner_down += 1;
                continue;
            }
            if got != want {
                self.fail(format!(
                    "request {} update {:?} {:02x?}: expected {want:?}, got {got:?}",
                    reply.id, u.op, u.key
                ));
            }
            if *got == Outcome::Applied {
                self.acked_updates += 1;
                let o = self.spec.owner_of(&u.key);
                if self.nodes[r.node as usize]
                    .as_ref()
                    .is_some_and(|x| x.holds_gone(o))
                {
                    self.acked_in_gone_ranges += 1;
                }
                match u.op {
                    Op::Insert | Op::Change => {
                        self.oracle.insert(u.key.clone(), (u.node, u.value.clone()));
                    }
                    Op::Delete => {
                        self.oracle.remove(&u.key);
                    }
                }
            }
        }
    }

    /// Keys to check for make-before-break with the handlers a replica's lookup may give: the
    /// oracle's for keys not in flight, the old and the new for a change in flight (in-flight
    /// inserts and deletes and uncertain keys are not checkable). Every change in flight, and
    /// all stable keys (`full`) or a random run of 48 of them.
    fn allowed(&mut self, full: bool) -> Vec<(Bytes, [NodeId; 2])> {
        let mut a = Vec::new();
        let moving: BTreeMap<Bytes, (NodeId, NodeId)> = (self.moves_in_flight().into_iter())
            .map(|(k, f, t)| (k, (f, t)))
            .collect();
        let ok = |s: &Sim, k: &Bytes| {
            !s.uncertain.contains(k) && !s.inflight_keys.contains(k) && !moving.contains_key(k)
        };
        if full {
            for (k, (n, _)) in &self.oracle {
                if ok(self, k) {
                    a.push((k.clone(), [*n, *n]));
                }
            }
        } else {
            let from = key_of(below(&mut self.rng, self.next_key + 1));
            let run = self.oracle.range(from..).chain(self.oracle.iter()).take(48);
            for (k, (n, _)) in run {
                if ok(self, k) {
                    a.push((k.clone(), [*n, *n]));
                }
            }
        }
        for r in self.reqs.values() {
            if r.uncertain {
                continue;
            }
            for ((u, e), old) in r.updates.iter().zip(&r.expected).zip(&r.old) {
                if moving.contains_key(&u.key) || self.uncertain.contains(&u.key) {
                    continue;
                }
                if *e == Outcome::Applied && u.op == Op::Change {
                    if let Some((n0, _)) = old {
                        a.push((u.key.clone(), [*n0, u.node]));
                    }
                }
            }
        }
        for (k, (f, t)) in moving {
            if !self.uncertain.contains(&k) && !self.inflight_keys.contains(&k) {
                a.push((k, [f, t]));
            }
        }
        a
    }

    /// The invariants that hold after every step (see the module documentation).
    pub fn check(&mut self) {
        let n = self.spec.nodes;
        for i in 0..n {
            let ii = i as usize;
            let Some(node) = self.nodes[ii].as_ref() else {
                continue;
            };
            // The modelled data plane's GPT is the node's.
            match (node.gpt(), &self.gpts[ii]) {
                (None, None) => continue,
                (Some(a), Some(b)) if a.content_digest() == b.content_digest() => {}
                _ => self.fail(format!("node {i}: the events' GPT differs from the node's")),
            }
            // Applied sequence numbers never go back; the content is the owners' history.
            let mut now_seen = Vec::new();
            for o in 0..n {
                let cur = node.applied(o);
                if let (Some(prev), Some(c)) = (self.seen[ii][o as usize], cur) {
                    if c < prev {
                        self.fail(format!(
                            "node {i}: owner {o} went back from {prev:?} to {c:?}"
                        ));
                    }
                }
                if cur.is_none() {
                    self.fail(format!("node {i} has a GPT but nothing of owner {o}"));
                }
                now_seen.push(cur);
            }
            self.seen[ii] = now_seen.clone();
            let shadow = self.shadow(i, &now_seen);
            let got = self.nodes[ii]
                .as_ref()
                .and_then(|x| x.gpt())
                .expect("gpt")
                .content_digest();
            if shadow != got {
                self.fail(format!(
                    "node {i}: the GPT is not the owners' history at {now_seen:?}"
                ));
            }
        }
        // Make before break: a lookup of an existing flow goes to a node that has its entry.
        self.checks += 1;
        let full = self.checks % 16 == 1;
        let allowed = self.allowed(full);
        let ready: Vec<bool> = (0..n)
            .map(|i| self.nodes[i as usize].as_ref().is_some_and(|x| x.ready()))
            .collect();
        for i in 0..n as usize {
            let Some(g) = &self.gpts[i] else {
                continue;
            };
            if self.lagging[i].is_some() {
                continue;
            }
            for (k, hs) in allowed.iter() {
                let h = g.lookup(k);
                if !hs.contains(&h) {
                    self.fail(format!(
                        "node {i}: GPT sends {k:02x?} to {h}, allowed {hs:?}"
                    ));
                }
                if let Some(s) = self.stand_ins[i].get(h as usize).copied().flatten() {
                    // Redirected: the stand-in has the gone node's own flows once it has
                    // stood in for a while (its replica of the range's log may lack the last
                    // commits until the range's group has a new leader).
                    let si = s as usize;
                    let settled = (self.standing_since[si][h as usize])
                        .is_some_and(|t| t + STAND_IN_SETTLE <= self.now);
                    if settled
                        && ready[si]
                        && self.spec.owner_of(k) == h
                        && !self.fibs[si].contains_key(k)
                    {
                        self.fail(format!(
                            "node {i}: GPT sends {k:02x?} to gone node {h}, redirected to its stand-in {s}, whose FIB lacks it (oracle {:?}); status of {s}: {:?}",
                            self.oracle.get(k),
                            self.nodes[si].as_ref().map(|x| x.status())
                        ));
                    }
                    continue;
                }
                if ready[h as usize] && !self.fibs[h as usize].contains_key(k) {
                    let o = self.spec.owner_of(k);
                    self.fail(format!(
                        "node {i}: GPT sends {k:02x?} (owner {o}, oracle {:?}, RIB {:?}) to {h}, whose FIB lacks it; status of {h}: {:?}",
                        self.oracle.get(k),
                        self.nodes[o as usize].as_ref().map(|x| x.rib_get(k).map(|(n, _)| n)),
                        self.nodes[h as usize].as_ref().map(|x| x.status())
                    ) + &format!("; trail {:?}", self.trail.get(k)));
                }
            }
        }
    }

    /// The content digest node `i`'s replica must have at `at` (per owner), from the owners'
    /// base pieces and deltas.
    fn shadow(&mut self, i: NodeId, at: &[Option<(u32, u64)>]) -> u64 {
        let ii = i as usize;
        let n = self.spec.nodes;
        if self.shadows[ii].is_none() {
            let pieces: Vec<Piece> = (0..n)
                .map(|o| {
                    let (e, _) = at[o as usize].expect("checked");
                    self.history[&(o, e)].0.clone()
                })
                .collect();
            let t = SetSep::assemble(pieces).expect("base pieces assemble");
            self.shadows[ii] = Some((
                t,
                (0..n)
                    .map(|o| Some((at[o as usize].expect("c").0, 0)))
                    .collect(),
            ));
        }
        let (mut t, mut cur) = self.shadows[ii].take().expect("made");
        for o in 0..n {
            let oi = o as usize;
            let (e, s) = at[oi].expect("checked");
            let (ce, cs) = cur[oi].expect("set");
            let Some((base, deltas)) = self.history.get(&(o, e)) else {
                self.fail(format!("node {i} follows unknown epoch {e} of owner {o}"));
            };
            if s as usize > deltas.len() {
                self.fail(format!(
                    "node {i} applied owner {o}'s seq {s}, the owner made {}",
                    deltas.len()
                ));
            }
            let from = if ce != e || s < cs {
                t.install_piece(base).expect("base piece");
                0
            } else {
                cs
            };
            for d in &deltas[from as usize..s as usize] {
                t.apply_owner_delta(d).expect("history applies");
            }
            cur[oi] = Some((e, s));
        }
        let dg = t.content_digest();
        self.shadows[ii] = Some((t, cur));
        dg
    }

    /// Runs until `until` (simulated time) or until nothing is left.
    pub fn run_until(&mut self, until: Nanos) {
        while self.next_time().is_some_and(|t| t <= until) {
            self.step();
        }
        self.now = self.now.max(until);
    }

    /// Stops the client and the faults, then runs until every request is answered and every
    /// node is idle (or `limit` of simulated time passes: a failure).
    pub fn quiesce(&mut self, limit: Nanos) {
        self.clients_on = false;
        self.faults = false;
        let end = self.now + limit;
        loop {
            let idle = self.reqs.is_empty()
                && self.nodes.iter().all(|n| {
                    n.as_ref()
                        .is_some_and(|n| n.idle() && n.ready() && n.serving())
                })
                && self.groups_agree()
                && self.state_pending.iter().all(|p| p.is_empty())
                // Heartbeats (and Raft's) never stop: with them, idle nodes are enough.
                && (self.net.is_empty()
                    || self.cfg.tuning.replicas > 1
                    || self.cfg.tuning.lease > 0);
            if idle {
                break;
            }
            if self.now > end || !self.step() {
                let states: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| match n {
                        Some(n) => format!(
                            "node {} ready {} serving {} phase {} group {:?}: {}",
                            n.id(),
                            n.ready(),
                            n.serving(),
                            n.status().phase,
                            (0..self.spec.nodes)
                                .filter_map(|o| n.group_state(o).map(|g| (o, g)))
                                .collect::<Vec<_>>(),
                            n.busy()
                        ),
                        None => "down".into(),
                    })
                    .collect();
                let open: Vec<String> = (self.reqs.iter())
                    .map(|(id, r)| {
                        format!(
                            "{id} to node {} (uncertain {}) owners {:?}",
                            r.node,
                            r.uncertain,
                            r.updates
                                .iter()
                                .map(|u| self.spec.owner_of(&u.key))
                                .collect::<Vec<_>>()
                        )
                    })
                    .collect();
                self.fail(format!(
                    "no quiescence: {} requests open {open:?}, {} datagrams in flight, nodes {states:?}",
                    self.reqs.len(),
                    self.net.len()
                ));
            }
        }
    }

    /// Whether, for every range, its replicas that are up have applied the whole log of its
    /// leader (a follower applies what it learns committed at once).
    fn groups_agree(&self) -> bool {
        (0..self.spec.nodes).all(|o| {
            let states: Vec<_> = (self.nodes.iter().flatten())
                .filter_map(|x| x.group_state(o).map(|g| (x.id(), g)))
                .collect();
            let Some(last) = states
                .iter()
                .find(|(id, g)| g.0 == Some(*id))
                .map(|(_, g)| g.3)
            else {
                return states.is_empty();
            };
            states.iter().all(|(_, g)| g.2 == last)
        })
    }

    /// The checks after quiescence: replicas identical, every key routed to its handler which
    /// has its value, handlers' FIBs exactly the owners' RIBs, acknowledged updates in the
    /// owners' RIBs.
    pub fn check_quiescent(&mut self) {
        self.check();
        let n = self.spec.nodes;
        let nodes: Vec<&Node> = self.nodes.iter().map(|x| x.as_ref().expect("up")).collect();
        let d0 = nodes[0].gpt().expect("gpt").content_digest();
        for (i, x) in nodes.iter().enumerate() {
            if x.gpt().expect("gpt").content_digest() != d0 {
                self.fail(format!(
                    "node {i}'s GPT differs from node 0's after quiescence"
                ));
            }
        }
        // The owners' RIBs: the truth.
        let mut rib: BTreeMap<Bytes, (NodeId, Bytes)> = BTreeMap::new();
        for (o, x) in nodes.iter().enumerate() {
            for (k, h, v) in x.rib_entries() {
                if self.spec.owner_of(&k) as usize != o {
                    self.fail(format!("owner {o} holds a key of another range"));
                }
                rib.insert(Bytes::from_slice(&k), (h, Bytes::from_slice(v)));
            }
        }
        // Every follower of a range's group holds the owner's RIB.
        for (i, x) in nodes.iter().enumerate() {
            for o in 0..n {
                let Some(mut flows) = x.replica_rib(o) else {
                    continue;
                };
                let mut owner: Vec<(Bytes, NodeId, Bytes)> = nodes[o as usize]
                    .rib_entries()
                    .map(|(k, h, v)| (Bytes::from_slice(&k), h, Bytes::from_slice(v)))
                    .collect();
                owner.sort();
                flows.sort_by(|a, b| a.key.cmp(&b.key));
                let flows: Vec<(Bytes, NodeId, Bytes)> = flows
                    .into_iter()
                    .map(|f| (f.key, f.node, f.value))
                    .collect();
                if flows != owner {
                    let diff: Vec<_> = flows
                        .iter()
                        .zip(&owner)
                        .filter(|(a, b)| a != b)
                        .take(3)
                        .collect();
                    let trail = diff.first().map(|(a, _)| {
                        (
                            self.oracle.get(&a.0).cloned(),
                            self.trail.get(&a.0).cloned(),
                        )
                    });
                    self.fail(format!(
                        "node {i}'s replica of range {o} holds {} keys, its owner {}: {diff:02x?}; oracle and trail {trail:02x?}; groups {:?}",
                        flows.len(),
                        owner.len(),
                        nodes.iter().map(|x| (x.epoch(), x.group_state(o))).collect::<Vec<_>>()
                    ));
                }
            }
        }
        // The ranges' state records: every acknowledged change at the owner, and the owner's
        // records at every replica of its range.
        for (o, x) in nodes.iter().enumerate() {
            let own: BTreeMap<u64, Vec<u8>> = x.own_state().collect();
            let keys: BTreeSet<u64> = (own.keys().chain(self.state_oracle[o].keys()))
                .copied()
                .filter(|k| !self.state_uncertain[o].contains(k))
                .collect();
            for k in keys {
                if own.get(&k) != self.state_oracle[o].get(&k) {
                    self.fail(format!(
                        "range {o}'s state record {k}: acknowledged {:?}, the owner holds {:?}",
                        self.state_oracle[o].get(&k),
                        own.get(&k)
                    ));
                }
            }
            for (i, y) in nodes.iter().enumerate() {
                if let Some(r) = y.replica_state(o as NodeId) {
                    if r.to_map() != own {
                        self.fail(format!(
                            "node {i}'s replica of range {o} holds state records {:?}, the owner {:?}",
                            r.keys().collect::<Vec<_>>(),
                            own.keys().collect::<Vec<_>>()
                        ));
                    }
                }
            }
        }
        for (k, want) in &self.oracle {
            if self.uncertain.contains(k) {
                continue;
            }
            if rib.get(k) != Some(want) {
                self.fail(format!(
                    "acknowledged {k:02x?} = {want:?} lost: RIB has {:?}",
                    rib.get(k)
                ));
            }
        }
        for k in rib.keys() {
            if !self.oracle.contains_key(k) && !self.uncertain.contains(k) {
                self.fail(format!("RIB has {k:02x?} that was never acknowledged"));
            }
        }
        for (i, x) in nodes.iter().enumerate() {
            let st = x.status();
            // The owner's table's RIB holds each key of its range once: its length byte, the
            // key (without the tuning's prefix, if it starts with it), the value (2 bytes) and
            // the FIB value.
            let prefix = &self.cfg.tuning.rib_key_prefix;
            let (mut own, mut want) = (0, 0);
            for (k, _, _) in x.rib_entries() {
                let elided = !prefix.is_empty() && k.starts_with(prefix);
                own += 1;
                want += 1 + self.spec.key_bytes + 2 + self.spec.value_bytes;
                want -= if elided { prefix.len() } else { 0 };
            }
            if st.memory.table_rib_entries != want || st.memory.table_rib < want {
                self.fail(format!(
                    "node {i}'s table RIB counts {:?} for {own} keys (entries should be {want})",
                    st.memory
                ));
            }
            if st.gpt_keys != rib.len() as u64 {
                self.fail(format!(
                    "node {i}'s status counts {} GPT keys, the owners' RIBs hold {} (per owner {:?})",
                    st.gpt_keys,
                    rib.len(),
                    st.owners.iter().map(|o| o.keys).collect::<Vec<_>>()
                ));
            }
            let g = x.gpt().expect("gpt");
            for (k, (h, _)) in &rib {
                if g.lookup(k) != *h {
                    self.fail(format!(
                        "node {i} routes {k:02x?} to {}, not {h}",
                        g.lookup(k)
                    ));
                }
            }
        }
        #[allow(clippy::needless_range_loop)]
        for h in 0..n as usize {
            let want: HashMap<Bytes, Bytes> = rib
                .iter()
                .filter(|(_, (x, _))| *x as usize == h)
                .map(|(k, (_, v))| (k.clone(), v.clone()))
                .collect();
            if self.fibs[h] != want {
                let extra = self.fibs[h]
                    .keys()
                    .filter(|k| !want.contains_key(*k))
                    .count();
                let missing = want
                    .keys()
                    .filter(|k| !self.fibs[h].contains_key(*k))
                    .count();
                let wrong: Vec<_> = want
                    .iter()
                    .filter(|(k, v)| self.fibs[h].get(*k).is_some_and(|x| x != *v))
                    .collect();
                // The first key that differs (a wrong value, else a missing key, else an extra
                // one), with what happened to it.
                let first = (wrong.iter().map(|(k, _)| *k))
                    .chain(want.keys().filter(|k| !self.fibs[h].contains_key(*k)))
                    .chain(self.fibs[h].keys().filter(|k| !want.contains_key(*k)))
                    .next()
                    .map(|k| {
                        format!(
                            "; first: {k:02x?} (owner {}): FIB {:02x?}, owners' RIB {:02x?}; trail {:?}",
                            self.spec.owner_of(k),
                            self.fibs[h].get(k),
                            rib.get(k),
                            self.trail.get(k)
                        )
                    });
                self.fail(format!(
                    "node {h}'s FIB is not its slice: {extra} extra, {missing} missing, {} wrong values{}",
                    wrong.len(),
                    first.unwrap_or_default()
                ));
            }
            let node_fib: HashMap<Bytes, Bytes> = nodes[h]
                .fib_entries()
                .map(|(k, v)| (Bytes::from_slice(k), Bytes::from_slice(v)))
                .collect();
            if self.cfg.tuning.fib_map && node_fib != self.fibs[h] {
                self.fail(format!("node {h}'s FIB events differ from its fib_entries"));
            }
        }
    }

    /// Keys whose outcome is unknown (timed out, or in flight at a node that was killed).
    pub fn uncertain_keys(&self) -> usize {
        self.uncertain.len()
    }
}
