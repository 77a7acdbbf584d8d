//! The replication layer alone under a deterministic simulation: one range's group of 3 or 5
//! replicas over a network that drops, duplicates, delays and partitions (symmetric and
//! asymmetric), replicas that crash (losing what was not durable: a random prefix of it stays)
//! and restart from their records, overlapping failures and log compaction behind snapshots.
//! Checked in every schedule: replicas never apply different entries at one index, and every
//! entry acknowledged (committed as its leader saw it) is applied at every replica at the end
//! (a majority always survives: crashes lose only what was not durable).

use super::group::{Collected, Group, GroupTiming};
use super::storage::{self, RaftStore};
use super::transport::{self, raft_id};
use crate::wire::Body;
use crate::NodeId;
use raft::prelude::Message;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

fn rnd(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const TICK: u64 = 10_000_000;

struct Replica {
    group: Group,
    /// Applied entries' data by index.
    applied: BTreeMap<u64, Vec<u8>>,
    applied_to: u64,
    /// Records durable / not yet.
    durable: Vec<Vec<u8>>,
    pending: Vec<Vec<u8>>,
    persist_made: u64,
    persist_done: u64,
    fsync_at: Option<u64>,
    msg_no: u64,
    reasm: transport::Reassembly,
}

struct Net {
    at: u64,
    seq: u64,
    to: NodeId,
    from: NodeId,
    body: Body,
}
impl PartialEq for Net {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Net {}
impl PartialOrd for Net {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Net {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

struct World {
    rng: u64,
    n: u16,
    now: u64,
    reps: Vec<Option<Replica>>,
    /// Durable records of a crashed replica.
    disks: Vec<Vec<Vec<u8>>>,
    net: BinaryHeap<Net>,
    net_seq: u64,
    /// (from, to) pairs cut.
    cut: BTreeSet<(NodeId, NodeId)>,
    drop_permille: u64,
    /// Proposals in flight: (proposer, index, term, data).
    proposed: Vec<(NodeId, u64, u64, Vec<u8>)>,
    acked: BTreeMap<u64, Vec<u8>>,
    next_data: u64,
    compact_every: u64,
    proposing: bool,
}

fn timing() -> GroupTiming {
    GroupTiming {
        election_ticks: 10,
        heartbeat_ticks: 2,
        max_msg_bytes: 4096,
    }
}

impl World {
    fn new(seed: u64, n: u16) -> World {
        let mut w = World {
            rng: seed,
            n,
            now: 0,
            reps: (0..n).map(|_| None).collect(),
            disks: vec![Vec::new(); n as usize],
            net: BinaryHeap::new(),
            net_seq: 0,
            cut: BTreeSet::new(),
            drop_permille: [0, 50, 200][(seed % 3) as usize],
            proposed: Vec::new(),
            acked: BTreeMap::new(),
            next_data: 0,
            compact_every: [0, 5, 20][(seed / 3 % 3) as usize],
            proposing: true,
        };
        for i in 0..n {
            w.start(i);
        }
        w
    }

    fn voters(&self) -> Vec<NodeId> {
        (0..self.n).collect()
    }

    fn start(&mut self, i: NodeId) {
        let ii = i as usize;
        let recs: Vec<_> = self.disks[ii]
            .iter()
            .map(|r| storage::decode(r).expect("own record").1)
            .collect();
        let ids = self.voters().iter().map(|&v| raft_id(v)).collect();
        let store = RaftStore::replay(ids, recs).expect("replay");
        let snap_index = store.snapshot_index();
        let mut applied = BTreeMap::new();
        if snap_index > 0 {
            applied = decode_state(store.latest_snapshot().get_data());
        }
        let salt = rnd(&mut self.rng);
        let group = Group::new(0, self.voters(), i, store, timing(), salt).expect("group");
        self.reps[ii] = Some(Replica {
            group,
            applied,
            applied_to: snap_index,
            durable: self.disks[ii].clone(),
            pending: Vec::new(),
            persist_made: 0,
            persist_done: 0,
            fsync_at: None,
            msg_no: 0,
            reasm: Default::default(),
        });
    }

    fn crash(&mut self, i: NodeId) {
        let ii = i as usize;
        if let Some(r) = self.reps[ii].take() {
            let keep = (rnd(&mut self.rng) % (r.pending.len() as u64 + 1)) as usize;
            let mut d = r.durable;
            d.extend(r.pending.into_iter().take(keep));
            self.disks[ii] = d;
        }
    }

    fn send(&mut self, from: NodeId, m: Message) {
        let to = transport::node_of(m.to).expect("a node");
        let Some(r) = self.reps[from as usize].as_mut() else {
            return;
        };
        r.msg_no += 1;
        let no = r.msg_no;
        for c in transport::chunks(0, no, &m, 1500) {
            if self.cut.contains(&(from, to)) {
                continue;
            }
            let copies = if rnd(&mut self.rng) % 1000 < self.drop_permille {
                0
            } else if rnd(&mut self.rng) % 20 == 0 {
                2
            } else {
                1
            };
            for _ in 0..copies {
                self.net_seq += 1;
                let at = self.now + rnd(&mut self.rng) % 5_000_000;
                self.net.push(Net {
                    at,
                    seq: self.net_seq,
                    to,
                    from,
                    body: c.clone(),
                });
            }
        }
    }

    /// Drives replica `i`'s group: readies, persistence, applying, messages.
    fn pump(&mut self, i: NodeId) {
        let ii = i as usize;
        loop {
            let Some(r) = self.reps[ii].as_mut() else {
                return;
            };
            let Collected {
                records,
                send,
                snapshot,
                committed,
            } = r.group.collect();
            let mut n = 0;
            if !records.is_empty() {
                r.pending.extend(records);
                r.persist_made += 1;
                n = r.persist_made;
                if r.fsync_at.is_none() {
                    r.fsync_at = Some(self.now + 1_000_000);
                }
            }
            r.group.assign(n);
            if let Some(s) = snapshot {
                r.applied = decode_state(s.get_data());
                r.applied_to = s.get_metadata().index;
            }
            for e in committed {
                assert!(e.index == r.applied_to + 1, "applied in order");
                if !e.data.is_empty() {
                    r.applied.insert(e.index, e.data.to_vec());
                }
                r.applied_to = e.index;
            }
            let at = r.applied_to;
            r.group.applied_to(at);
            if self.compact_every > 0 && at >= r.group.store().first() + self.compact_every {
                let data = encode_state(&r.applied, at);
                if let Some(rec) = r.group.compact(at, data) {
                    r.pending.push(rec);
                    r.persist_made += 1;
                    r.fsync_at.get_or_insert(self.now + 1_000_000);
                }
            }
            let released = r.group.release(r.persist_done);
            let again = !released.is_empty() || !send.is_empty();
            for m in send.into_iter().chain(released) {
                let snap = m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot;
                let to = transport::node_of(m.to).expect("node");
                self.send(i, m);
                if snap {
                    if let Some(r) = self.reps[ii].as_mut() {
                        r.group.snapshot_sent(to);
                    }
                }
            }
            if !again {
                return;
            }
        }
    }

    fn step(&mut self) {
        // The next event: a delivery, a tick or an fsync.
        let next_tick = (self.now / TICK + 1) * TICK;
        let mut t = next_tick;
        if let Some(m) = self.net.peek() {
            t = t.min(m.at);
        }
        for r in self.reps.iter().flatten() {
            if let Some(f) = r.fsync_at {
                t = t.min(f);
            }
        }
        self.now = t;
        while self.net.peek().is_some_and(|m| m.at <= t) {
            let m = self.net.pop().expect("peeked");
            let voters = self.voters();
            if let Some(r) = self.reps[m.to as usize].as_mut() {
                if let Body::Raft {
                    group,
                    msg,
                    index,
                    count,
                    data,
                } = m.body
                {
                    if let Ok(Some(rm)) = r.reasm.take(m.from, group, msg, index, count, data) {
                        assert!(transport::accept(&rm, m.from, m.to, &voters));
                        r.group.step(rm);
                    }
                }
                self.pump(m.to);
            }
        }
        for i in 0..self.n {
            let ii = i as usize;
            let Some(r) = self.reps[ii].as_mut() else {
                continue;
            };
            if r.fsync_at.is_some_and(|f| f <= t) {
                r.fsync_at = None;
                r.durable.append(&mut r.pending);
                r.persist_done = r.persist_made;
                self.disks[ii] = r.durable.clone();
            }
            if t == next_tick {
                r.group.tick(false);
            }
            self.pump(i);
        }
        self.client();
        self.check();
    }

    fn leader(&self) -> Option<NodeId> {
        (0..self.n).find(|&i| {
            self.reps[i as usize]
                .as_ref()
                .is_some_and(|r| r.group.is_leader())
        })
    }

    fn client(&mut self) {
        // Acknowledge proposals their proposer sees committed in their term.
        let mut keep = Vec::new();
        for (p, idx, term, data) in std::mem::take(&mut self.proposed) {
            match self.reps[p as usize].as_ref() {
                Some(r) if r.group.committed() >= idx && r.group.term_at(idx) == Some(term) => {
                    self.acked.insert(idx, data);
                }
                Some(r) if r.group.committed() >= idx => {}
                Some(r) if r.group.term() == term => keep.push((p, idx, term, data)),
                _ => {}
            }
        }
        self.proposed = keep;
        if !self.proposing || self.now % (3 * TICK) != 0 || self.proposed.len() > 8 {
            return;
        }
        if let Some(l) = self.leader() {
            self.next_data += 1;
            let data = self.next_data.to_le_bytes().to_vec();
            let r = self.reps[l as usize].as_mut().expect("leader");
            if let Some(idx) = r.group.propose(Vec::new(), data.clone()) {
                let term = r.group.term();
                self.proposed.push((l, idx, term, data));
                self.pump(l);
            }
        }
    }

    /// No two replicas applied different data at one index; nothing acknowledged is applied
    /// differently anywhere.
    fn check(&self) {
        let mut seen: BTreeMap<u64, &Vec<u8>> = BTreeMap::new();
        for r in self.reps.iter().flatten() {
            for (i, d) in &r.applied {
                if let Some(x) = seen.insert(*i, d) {
                    assert_eq!(x, d, "two replicas applied different entries at {i}");
                }
            }
        }
        for (i, d) in &self.acked {
            if let Some(x) = seen.get(i) {
                assert_eq!(*x, d, "an acknowledged entry at {i} was replaced");
            }
        }
    }

    fn run_until(&mut self, t: u64) {
        while self.now < t {
            self.step();
        }
    }
}

fn encode_state(applied: &BTreeMap<u64, Vec<u8>>, at: u64) -> Vec<u8> {
    let mut b = at.to_le_bytes().to_vec();
    for (i, d) in applied {
        b.extend_from_slice(&i.to_le_bytes());
        b.extend_from_slice(&(d.len() as u32).to_le_bytes());
        b.extend_from_slice(d);
    }
    b
}

fn decode_state(mut b: &[u8]) -> BTreeMap<u64, Vec<u8>> {
    let mut m = BTreeMap::new();
    b = &b[8..];
    while !b.is_empty() {
        let i = u64::from_le_bytes(b[..8].try_into().unwrap());
        let l = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        m.insert(i, b[12..12 + l].to_vec());
        b = &b[12 + l..];
    }
    m
}

fn schedules(default: u64) -> u64 {
    std::env::var("SB_RAFT_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Crashes of leaders and followers (overlapping: two down at once in a group of five),
/// partitions (symmetric, asymmetric, the leader cut off), heals, and at the end every
/// acknowledged entry is applied at every replica.
#[test]
fn a_group_loses_nothing_acknowledged_under_crashes_and_partitions() {
    let mut total_acked = 0;
    for seed in 0..schedules(60) {
        let n = if seed % 2 == 0 { 3 } else { 5 };
        let mut w = World::new(seed, n);
        let mut x = seed ^ 0xabcdef;
        w.run_until(500_000_000);
        for round in 0..4 {
            let f = (n as u64 - 1) / 2;
            match rnd(&mut x) % 4 {
                0 => {
                    // The leader crashes (and, with five, a follower overlaps).
                    let l = w.leader().unwrap_or(0);
                    w.crash(l);
                    let mut down = vec![l];
                    if f > 1 {
                        let o = (l + 1) % n;
                        w.run_until(w.now + 50_000_000);
                        w.crash(o);
                        down.push(o);
                    }
                    w.run_until(w.now + 600_000_000);
                    for d in down {
                        w.start(d);
                    }
                }
                1 => {
                    // A symmetric partition: the leader alone.
                    let l = w.leader().unwrap_or(0);
                    for j in 0..n {
                        if j != l {
                            w.cut.insert((l, j));
                            w.cut.insert((j, l));
                        }
                    }
                    w.run_until(w.now + 700_000_000);
                    w.cut.clear();
                }
                2 => {
                    // Asymmetric: the leader hears everyone, nobody hears it.
                    let l = w.leader().unwrap_or(0);
                    for j in 0..n {
                        if j != l {
                            w.cut.insert((l, j));
                        }
                    }
                    w.run_until(w.now + 700_000_000);
                    w.cut.clear();
                }
                _ => {
                    // A follower crashes during the restart of another (restart during
                    // boot).
                    let a = (round as u16 + seed as u16) % n;
                    w.crash(a);
                    w.run_until(w.now + 30_000_000);
                    w.start(a);
                    w.run_until(w.now + 5_000_000);
                    w.crash(a);
                    w.run_until(w.now + 300_000_000);
                    w.start(a);
                }
            }
            w.run_until(w.now + 400_000_000);
        }
        // Heal, stop proposing, let everything apply.
        w.drop_permille = 0;
        w.proposing = false;
        w.run_until(w.now + 3_000_000_000);
        let last = w.acked.keys().last().copied().unwrap_or(0);
        for (i, r) in w.reps.iter().enumerate() {
            let r = r.as_ref().expect("up");
            assert!(
                r.applied_to >= last,
                "seed {seed}: replica {i} applied to {} < {last}",
                r.applied_to
            );
            for (idx, d) in &w.acked {
                assert_eq!(
                    r.applied.get(idx),
                    Some(d),
                    "seed {seed}: replica {i} lost acknowledged entry {idx}"
                );
            }
        }
        total_acked += w.acked.len();
    }
    assert!(total_acked > 100, "only {total_acked} entries acknowledged");
}

/// A leader that crashes is replaced within the detection bound: pre-vote and election with
/// ticks of 10 ms and election timeouts of 10 to 20 ticks take under 500 ms.
#[test]
fn a_new_leader_is_elected_within_half_a_second() {
    for seed in 0..20 {
        let mut w = World::new(1000 + seed, 3);
        w.drop_permille = 0;
        w.run_until(1_000_000_000);
        let l = w.leader().expect("a leader");
        w.crash(l);
        let t0 = w.now;
        while w.leader().is_none() {
            w.step();
            assert!(
                w.now - t0 < 500_000_000,
                "seed {seed}: no leader after 500 ms"
            );
        }
    }
}

/// Every message a lone replica `g` hands out (at once, and once its records are durable).
fn outbox(g: &mut Group) -> Vec<Message> {
    let c = g.collect();
    g.assign(if c.records.is_empty() { 0 } else { 1 });
    let mut out = c.send;
    out.extend(g.release(u64::MAX));
    out
}

/// A replica whose log was lost ([`Group::withhold_votes`]) grants no vote and does not
/// campaign until it has followed a leader; then it votes again. The same replica without
/// the withholding votes at once and campaigns on its own (so this test fails if the
/// withholding does nothing).
#[test]
fn a_replica_that_lost_its_log_withholds_its_votes_until_it_follows_a_leader() {
    use raft::prelude::MessageType as T;
    let voters = vec![0u16, 1, 2];
    let ids: Vec<u64> = voters.iter().map(|&v| raft_id(v)).collect();
    let new = |withhold: bool| {
        let store = RaftStore::replay(ids.clone(), Vec::new()).expect("store");
        let mut g = Group::new(0, voters.clone(), 1, store, timing(), 3).expect("group");
        if withhold {
            g.withhold_votes();
        }
        g
    };
    let msg = |t: T, from: u16, term: u64, commit: u64| {
        let mut m = Message::default();
        m.set_msg_type(t);
        m.from = raft_id(from);
        m.to = raft_id(1);
        m.term = term;
        m.commit = commit;
        m
    };
    let kinds = |ms: &[Message]| ms.iter().map(|m| m.get_msg_type()).collect::<Vec<_>>();
    let vote = |g: &mut Group, term: u64| {
        g.step(msg(T::MsgRequestVote, 2, term, 0));
        kinds(&outbox(g))
    };
    let campaigns = |g: &mut Group| {
        let mut out = Vec::new();
        for _ in 0..100 {
            g.tick(false);
            out.extend(kinds(&outbox(g)));
        }
        out.iter()
            .any(|k| matches!(k, T::MsgRequestPreVote | T::MsgRequestVote))
    };
    // Without the withholding: it votes, and campaigns when no leader is heard.
    let mut plain = new(false);
    assert!(vote(&mut plain, 5).contains(&T::MsgRequestVoteResponse));
    assert!(campaigns(&mut new(false)));
    // Withholding: no vote, no campaign, the requests counted.
    let mut g = new(true);
    assert!(g.withholding());
    assert!(!vote(&mut g, 5).contains(&T::MsgRequestVoteResponse));
    let mut g2 = new(true);
    g2.step(msg(T::MsgRequestPreVote, 2, 6, 0));
    assert!(!kinds(&outbox(&mut g2)).contains(&T::MsgRequestPreVoteResponse));
    assert!(!campaigns(&mut g2));
    assert_eq!(g.withheld() + g2.withheld(), 2);
    // A heartbeat of node 0, leader in term 7, with nothing committed it lacks: it follows
    // and stops withholding at its next tick.
    g.step(msg(T::MsgHeartbeat, 0, 7, 0));
    let _ = outbox(&mut g);
    g.tick(false);
    assert!(!g.withholding());
    assert_eq!(g.leader(), Some(0));
    // Then, once that leader's lease ran out, a vote in a later term is granted as by any
    // replica.
    for _ in 0..40 {
        g.tick(false);
        let _ = outbox(&mut g);
    }
    let before = g.withheld();
    assert!(vote(&mut g, 20).contains(&T::MsgRequestVoteResponse));
    assert_eq!(g.withheld(), before);
}
