//! The node's control plane: the `sb-control` state machine wired to a UDP socket on the node's
//! control-network address, its log (`sb-wal`) and the data plane (the live GPT, the FIB and the
//! uplink table that the workers read while the control thread changes them).
//!
//! One thread runs the loop: receive a datagram (or time out), hand it to the state machine,
//! then apply every event it emits in order (log records go to the log's own thread, which
//! commits whatever has arrived with one sync: group commit, [`crate::logwriter`]; FIB
//! entries are installed; GPT deltas and pieces are applied to the live table), and only then
//! send what it has to send. The state machine holds back every message that needs its
//! records durable until the log's thread says they are, and applies the events before
//! sending: so an acknowledgment means "durable and installed", and the loop never waits for
//! the disk (a slow sync delays acknowledgements, not heartbeats or Raft ticks).

use crate::config::NodeFile;
use crate::mirror::{MirrorSlot, TableMirror};
use sb_control::{Bytes, ClusterSpec, Event, Flow, Peer};
use sb_engine::lte::{Tunnel, KEY_BYTES};
use sb_engine::policy::{Policies, Usage};
use sb_setsep::LiveSetSep;
use serde::{Deserialize, Serialize};
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The UDP port of the control protocol on every node's control-network address (the fabric
/// address in clusters made before the control network existed).
pub const CONTROL_PORT: u16 = 7400;

/// Control datagrams the loop takes before it applies their events and commits the log.
const MAX_DATAGRAMS_PER_ITERATION: usize = 512;

/// What a node needs for its control plane (`control` in `node{i}.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ControlFile {
    /// The cluster's control spec (`control.json`: ranges, GPT shape, the key).
    pub spec: PathBuf,
    /// The initial flows (`flows.csv`): this node's range of them is its RIB at the first start.
    pub flows: PathBuf,
    /// This node's log directory.
    pub wal: PathBuf,
    /// Every node's control address by index (this node binds its own).
    pub peers: Vec<SocketAddr>,
    /// Entries this node's FIB and uplink table have room for (they take inserts while the
    /// workers read them, and a shared table does not grow).
    pub fib_room: usize,
    /// This node's PFCP address (its `pfcp_addr`): with one, the node is a PFCP endpoint
    /// ([`crate::pfcp`]).
    #[serde(default)]
    pub pfcp: Option<SocketAddr>,
    /// Replicas of each GPT range (`cluster up --replicas`; `sb_control::Tuning::replicas`):
    /// range `i` is a Raft group on nodes `i, i+1, ...`. 1 (the default of files written
    /// before the field): no replication.
    #[serde(default = "one")]
    pub replicas: usize,
    /// The cluster's PFCP Node ID (an IP address or an FQDN), the same on every node.
    #[serde(default)]
    pub pfcp_node_id: Option<String>,
    /// The cluster's PFCP Recovery Time Stamp (seconds since 1900), the same on every node.
    #[serde(default)]
    pub pfcp_recovery_time_stamp: Option<u32>,
    /// Every node's PFCP address by index: the endpoints relay to each other
    /// ([`sb_pfcp::relay`]) so that any of them takes any message. Empty: no relaying.
    #[serde(default)]
    pub pfcp_peers: Vec<SocketAddr>,
    /// The addresses PFCP peers (SMFs) may come from: IP addresses or `ADDR/LEN` prefixes
    /// (`sb_pfcp::Config::allowed_peers`). Empty: any address.
    #[serde(default)]
    pub pfcp_allowed_peers: Vec<String>,
    /// This node's share of the cluster's IPv4 UE pool (`ADDR/LEN` prefixes): its endpoint
    /// gives CHV4 addresses from these only (`sb_pfcp::Config::ue_pool_v4`). The shares of a
    /// cluster's nodes are disjoint (`sb_pfcp::prefix::split`).
    #[serde(default)]
    pub pfcp_ue_pool_v4: Vec<String>,
    /// This node's share of the cluster's IPv6 UE pool (prefixes of length at most 64; CHV6
    /// gives a /64 of them).
    #[serde(default)]
    pub pfcp_ue_pool_v6: Vec<String>,
    /// The PFCP endpoint keeps its sessions in memory only (`cluster up --pfcp-volatile`):
    /// nothing of them in the node's records, a restart loses them (and announces a new
    /// Recovery Time Stamp), nobody serves them while the node is down. For comparison
    /// (`bench pfcp --pfcp-state`); by default they are the range's records.
    #[serde(default)]
    pub pfcp_volatile: bool,
    /// Failure detection in milliseconds (`cluster up --detect-ms`; [`DEFAULT_DETECT_MS`] when
    /// absent): a peer not heard for this long by a majority is no longer waited for
    /// (`sb_control::Tuning::lease`), heartbeats go every tenth of it, and a range's Raft
    /// followers campaign after half of it to all of it without their leader.
    #[serde(default)]
    pub detect_ms: Option<u64>,
    /// Log bytes (segments) past which a checkpoint is due, if they are also more than the
    /// last snapshot's (`cluster up --checkpoint-kb`; [`DEFAULT_CHECKPOINT_KB`] KiB when
    /// absent; 0: only `sb_wal`'s bound of records).
    #[serde(default)]
    pub checkpoint_kb: Option<u64>,
}

/// The log size past which a node checkpoints by default, in KiB (64 MiB).
pub const DEFAULT_CHECKPOINT_KB: u64 = 64 << 10;

/// Failure detection's default: 500 ms.
pub const DEFAULT_DETECT_MS: u64 = 500;
/// The range `--detect-ms` takes: below 100 ms a loaded machine's scheduling alone would
/// take nodes for dead; above a minute a dead node would stop its ranges' updates as long.
pub const DETECT_MS_RANGE: std::ops::RangeInclusive<u64> = 100..=60_000;

fn one() -> usize {
    1
}

impl ControlFile {
    /// Log bytes past which a checkpoint is due ([`ControlFile::checkpoint_kb`]).
    pub fn checkpoint_bytes(&self) -> u64 {
        self.checkpoint_kb.unwrap_or(DEFAULT_CHECKPOINT_KB) << 10
    }

    /// Failure detection's timers, in the state machine's terms: (lease, heartbeat, Raft
    /// election ticks of [`sb_control::Tuning::raft_tick`]'s default 10 ms).
    pub fn detection(&self) -> Result<(u64, u64, usize), ControlError> {
        let ms = self.detect_ms.unwrap_or(DEFAULT_DETECT_MS);
        if !DETECT_MS_RANGE.contains(&ms) {
            return Err(ControlError::Invalid(format!(
                "detect_ms {ms}: failure detection takes {} to {} ms",
                DETECT_MS_RANGE.start(),
                DETECT_MS_RANGE.end()
            )));
        }
        // Followers' timeouts lie in [e, 2e) ticks of 10 ms: from half the detection time.
        Ok((ms * 1_000_000, ms * 100_000, (ms / 20) as usize))
    }

    /// The keys (and sessions) this node is expected to hold: its share of the cluster's
    /// capacity, 2/3 of its FIB room (which holds 50% more, for imbalance). The control
    /// plane's and the PFCP endpoint's per-key maps are allocated for that many at start, so
    /// that they do not all double together under load.
    pub fn share(&self) -> usize {
        self.fib_room * 2 / 3
    }
}

/// Why the control plane stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file's content is wrong.
    #[error("{0}")]
    Invalid(String),
    /// The state machine refused to start.
    #[error(transparent)]
    Control(#[from] sb_control::ControlError),
    /// The log failed.
    #[error(transparent)]
    Wal(#[from] sb_wal::WalError),
    /// The GPT was not assembled in time.
    #[error(
        "not ready after {0:?}: the GPT or FIB slices from other nodes are missing (are they up?)"
    )]
    NotReady(Duration),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The control spec of a new cluster: `nodes` owners of equal block ranges of a GPT sized for
/// `capacity` flows (16+8, value bits for `nodes`), hashing with `seed`, with a fresh random
/// build id and authentication key.
pub fn new_spec(cluster_id: u64, nodes: u16, seed: u64, capacity: u64) -> ClusterSpec {
    let total_blocks = sb_setsep::num_blocks(capacity.max(1)).max(u64::from(nodes.max(1)));
    let n = u64::from(nodes.max(1));
    ClusterSpec {
        cluster_id,
        nodes,
        key: new_master(),
        gpt: sb_control::GptSpec {
            index_bits: 16,
            array_bits: 8,
            value_bits: sb_engine::cluster::value_bits(nodes.into()),
            seed,
            build_id: sb_common::random_seed(),
            total_blocks,
            build_threads: 0,
        },
        ranges: (0..n)
            .map(|i| i * total_blocks / n..(i + 1) * total_blocks / n)
            .collect(),
        key_bytes: KEY_BYTES,
        value_bytes: sb_engine::lte::VALUE_BYTES,
    }
}

/// A fresh random master secret (`cluster up`, `cluster rotate-key`).
pub fn new_master() -> [u8; 32] {
    let mut key = [0u8; 32];
    for c in key.chunks_mut(8) {
        c.copy_from_slice(&sb_common::random_seed().to_le_bytes());
    }
    key
}

/// Reads the cluster's control spec.
pub fn read_spec(path: &Path) -> Result<ClusterSpec, ControlError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    serde_json::from_str(&text)
        .map_err(|e| ControlError::Invalid(format!("{}: {e}", path.display())))
}

/// How often a node looks at `control.json` for a new master secret (`cluster rotate-key`):
/// well within [`sb_control::wire::KEY_SWITCH`], so that every node has the new key before
/// any node seals with it.
pub const SPEC_POLL: Duration = Duration::from_millis(250);

/// The modification time of the spec (None when it cannot be read).
fn spec_mtime(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Writes the spec readable by its owner only (it holds the cluster's master secret).
pub fn write_spec(path: &Path, spec: &ClusterSpec) -> Result<(), ControlError> {
    write_private(
        path,
        &serde_json::to_vec_pretty(spec).expect("serializable"),
    )
}

/// What a client of the control plane (`scalebricks update`) holds (`client.json`): the
/// client key, which signs requests and checks replies and can make no node's message, and
/// the widths of the updates. Not the master secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientFile {
    /// The cluster's id.
    pub cluster_id: u64,
    /// Nodes of the cluster.
    pub nodes: u16,
    /// The client key ([`ClusterSpec::client_key`]).
    pub key: [u8; 32],
    /// Bytes of a key.
    pub key_bytes: usize,
    /// Bytes of a FIB value.
    pub value_bytes: usize,
}

impl ClientFile {
    /// The client's file of a cluster.
    pub fn of(spec: &ClusterSpec) -> ClientFile {
        ClientFile {
            cluster_id: spec.cluster_id,
            nodes: spec.nodes,
            key: spec.client_key(),
            key_bytes: spec.key_bytes,
            value_bytes: spec.value_bytes,
        }
    }

    /// Writes it readable by its owner only.
    pub fn write(&self, path: &Path) -> Result<(), ControlError> {
        write_private(
            path,
            &serde_json::to_vec_pretty(self).expect("serializable"),
        )
    }

    /// Reads it.
    pub fn read(path: &Path) -> Result<ClientFile, ControlError> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        serde_json::from_str(&text)
            .map_err(|e| ControlError::Invalid(format!("{}: {e}", path.display())))
    }
}

/// Writes `json` to `path` readable by its owner only, atomically and synced (a node
/// re-reading the spec never sees half of it): [`replace_file`].
fn write_private(path: &Path, json: &[u8]) -> Result<(), ControlError> {
    replace_file(path, json, 0o600, true).map_err(io_err(path))
}

/// Replaces `path` with `bytes` atomically: a new file `PATH.tmp` of mode `mode` (less the
/// umask; a stale one is removed first), synced to disk when `sync`, renamed over `path`. A
/// reader opening `path` meanwhile gets the old bytes or the new ones, whole.
pub fn replace_file(path: &Path, bytes: &[u8], mode: u32, sync: bool) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)?;
    std::io::Write::write_all(&mut f, bytes)?;
    if sync {
        f.sync_all()?;
    }
    drop(f);
    std::fs::rename(&tmp, path)
}

/// The flows of `flows.csv` whose GPT block node `me` owns.
pub fn my_flows(path: &Path, spec: &ClusterSpec, me: u16) -> Result<Vec<Flow>, ControlError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    let tunnels = sb_engine::lte::read_flows(&text, spec.nodes as usize)
        .map_err(|e| ControlError::Invalid(format!("{}: {e}", path.display())))?;
    let range = spec.ranges[me as usize].clone();
    Ok(tunnels
        .iter()
        .filter(|t| {
            range.contains(&sb_setsep::block_of_key(
                &t.key(),
                spec.gpt.seed,
                spec.gpt.total_blocks,
            ))
        })
        .map(flow_of)
        .collect())
}

/// The RIB entry of a tunnel.
pub fn flow_of(t: &Tunnel) -> Flow {
    Flow {
        key: Bytes::from_slice(&t.key()),
        node: t.node,
        value: Bytes::from_slice(&t.value()),
    }
}

/// The data plane the control thread changes.
pub struct DataPlane {
    /// The GPT the workers read (None until it is assembled).
    pub gpt: Arc<Mutex<Option<Arc<LiveSetSep>>>>,
    /// The FIB's writer.
    pub fib: sb_cuckoo::Writer,
    /// The uplink table's writer (TEID -> UE key, eNodeB, policy slot).
    pub uplink: sb_cuckoo::Writer,
    /// The policy slots the workers apply ([`sb_engine::policy`]): given to a session when
    /// its first FIB entry with a policy is installed here, freed with its last.
    pub policies: Arc<Policies>,
    /// Inserts the tables refused (full).
    pub failed: u64,
    /// Removals waiting for their grace period: key -> when.
    pub removals: std::collections::HashMap<Bytes, Instant>,
    /// The same, in deadline order.
    pub removal_queue: std::collections::VecDeque<(Instant, Bytes)>,
    /// The last usage of the sessions whose slot was freed (their last entry removed), by
    /// uplink TEID, oldest first, until taken ([`DataPlane::take_final_usage`]; at most
    /// [`FINAL_USAGE_KEPT`]).
    pub final_usage: std::collections::VecDeque<(u32, Usage)>,
    /// A copy of the tables kept in step ([`crate::mirror`]: the XDP fast path's maps): every
    /// FIB, uplink and GPT change is written to it too, under its lock, in the same event.
    pub mirror: MirrorSlot,
}

/// Final usages [`DataPlane`] keeps for the taking.
pub const FINAL_USAGE_KEPT: usize = 1 << 16;

impl DataPlane {
    /// The data plane over the writers of a node's FIB and uplink table (no GPT yet), with
    /// policy slots of its own for one worker ([`DataPlane::with_policies`] shares the
    /// workers').
    pub fn new(fib: sb_cuckoo::Writer, uplink: sb_cuckoo::Writer) -> DataPlane {
        let room = fib.capacity();
        Self::with_policies(fib, uplink, Arc::new(Policies::new(1, room)))
    }

    /// The data plane with the policy slots the node's workers apply.
    pub fn with_policies(
        fib: sb_cuckoo::Writer,
        uplink: sb_cuckoo::Writer,
        policies: Arc<Policies>,
    ) -> DataPlane {
        DataPlane {
            gpt: Arc::new(Mutex::new(None)),
            fib,
            uplink,
            policies,
            failed: 0,
            removals: Default::default(),
            removal_queue: Default::default(),
            final_usage: Default::default(),
            mirror: crate::mirror::empty_slot(),
        }
    }

    /// The usage of the session of uplink TEID `ul_teid` (inner IP bytes and packets per
    /// direction, summed over the workers) since its first entry with a policy was installed
    /// here; `None` when it has no slot here (no policy, not handled by this node, or its
    /// last entry removed: then [`DataPlane::take_final_usage`] has it).
    pub fn usage(&self, ul_teid: u32) -> Option<Usage> {
        self.policies.usage(ul_teid)
    }

    /// The usage of every session counted here (its policy says count), by uplink TEID, into
    /// `out` ([`Policies::counted_usages`]).
    pub fn counted_usages(&self, out: &mut Vec<(u32, Usage)>) {
        self.policies.counted_usages(out)
    }

    /// The last usage of each session whose last entry was removed since the last call, by
    /// uplink TEID.
    pub fn take_final_usage(&mut self) -> Vec<(u32, Usage)> {
        self.final_usage.drain(..).collect()
    }

    /// The uplink TEIDs of the sessions whose first downlink packet was buffered (with the
    /// notify flag) since the last call: one Downlink Data Report each.
    pub fn take_notifications(&self) -> Vec<u32> {
        self.policies.take_notifications()
    }

    fn released(&mut self, key: &[u8; KEY_BYTES], value: &[u8]) {
        if let Some(u) = sb_engine::lte::local_release(&self.policies, key, value) {
            self.final_usage_push(Tunnel::from_entry(key, value), u);
        }
    }

    fn final_usage_push(&mut self, t: Tunnel, u: Usage) {
        if self.final_usage.len() >= FINAL_USAGE_KEPT {
            self.final_usage.pop_front();
        }
        self.final_usage.push_back((t.uplink_teid(), u));
    }
}

/// How long a removed FIB entry stays: longer than a packet waits in the fabric and in a
/// node's rings (microseconds to milliseconds here), far shorter than a flow's life.
pub const REMOVAL_GRACE: Duration = Duration::from_millis(500);

impl DataPlane {
    /// Installs `key`'s entry and its uplink entry, or neither: a full table refuses the
    /// install (counted: status `fib_insert_failed`) and what was there stays, so that the
    /// control plane rejects the update ([`sb_control::Node::install_failed`]) before any GPT
    /// sends the key here.
    ///
    /// A value with a [`sb_engine::lte::Policy`] gets its session's policy slot (given or
    /// shared, its rates, gates and buffering set: a change from buffering to forwarding
    /// flushes the session's buffer through the workers), written into the local copy of the
    /// value and into the uplink entry ([`sb_engine::lte::local_entry`]); with the SNDEM
    /// flag, a change of tunnel queues an End Marker on the old one. The replaced value's
    /// slot reference goes.
    fn fib_insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        let Ok(k) = <[u8; KEY_BYTES]>::try_from(key) else {
            return Err(format!("a key of {} bytes", key.len()));
        };
        let slot = self.mirror.clone();
        let mut m = crate::mirror::lock(&slot);
        // The TEIDs whose uplink entries the install may change: the old tunnel's, the new's.
        let mut teids = vec![Tunnel::from_entry(&k, value).uplink_entry().0];
        if let Some(o) = self.fib.lookup(key) {
            teids.push(Tunnel::from_entry(&k, &o).uplink_entry().0);
        }
        let r = self.fib_insert_tables(&k, value);
        if let Some(m) = m.as_deref_mut() {
            self.sync_mirror(m, key, &teids);
        }
        r
    }

    /// Writes the entries of `key` and the TEIDs `teids` as the tables now have them into
    /// the mirror: removals first, then the FIB entry, then the uplink entries.
    fn sync_mirror(&self, m: &mut dyn TableMirror, key: &[u8], teids: &[[u8; 4]]) {
        for t in teids {
            if !self.uplink.contains(t) {
                m.uplink_remove(t);
            }
        }
        match self.fib.lookup(key) {
            Some(v) => m.fib_insert(key, &v),
            None => m.fib_remove(key),
        }
        for t in teids {
            if let Some(v) = self.uplink.lookup(t) {
                m.uplink_insert(t, &v);
            }
        }
    }

    /// [`DataPlane::fib_insert`] on the tables alone.
    fn fib_insert_tables(&mut self, k: &[u8; KEY_BYTES], value: &[u8]) -> Result<(), String> {
        let key = &k[..];
        let k = *k;
        let old = self.fib.lookup(key);
        let new = sb_engine::lte::local_entry(&self.policies, &k, value).map_err(|e| {
            self.failed += 1;
            e.to_string()
        })?;
        // The old tunnel's uplink entry goes with it (kept as it was, slot and all, to put
        // back if the install fails).
        let old_up = old.as_ref().and_then(|o| {
            let (teid, _) = Tunnel::from_entry(&k, o).uplink_entry();
            let v = self.uplink.lookup(&teid)?;
            self.uplink.remove(&teid);
            Some((teid, v))
        });
        let undo = |dp: &mut DataPlane| {
            let _ = sb_engine::lte::local_release(&dp.policies, &k, &new.value);
            if let Some((teid, up)) = &old_up {
                let _ = dp.uplink.insert(teid, up);
            }
        };
        if let Err(e) = self.fib.insert(key, &new.value) {
            self.failed += 1;
            undo(self);
            return Err(format!("FIB: {e}"));
        }
        if let Err(e) = self.uplink.insert(&new.uplink_key, &new.uplink_value) {
            self.failed += 1;
            // Back to what was there.
            match &old {
                Some(o) => {
                    let _ = self.fib.insert(key, o);
                }
                None => {
                    self.fib.remove(key);
                }
            }
            undo(self);
            return Err(format!("uplink table: {e}"));
        }
        if let Some(u) = sb_engine::lte::local_commit(&self.policies, &k, old.as_deref(), &new) {
            self.final_usage_push(Tunnel::from_entry(&k, old.as_deref().unwrap_or(&[])), u);
        }
        // A pending removal of this key is cancelled: the flow is ours again.
        self.removals.remove(key);
        Ok(())
    }

    /// Removes `key`'s entry once [`REMOVAL_GRACE`] has passed (unless it is inserted again
    /// before): the control plane removes an old handler's entry once every node's GPT points
    /// elsewhere, but packets that a node's old GPT sent here may still be in the fabric or in
    /// this node's receive ring.
    fn fib_remove_later(&mut self, key: Bytes, now: Instant) {
        self.removals.insert(key.clone(), now + REMOVAL_GRACE);
        self.removal_queue.push_back((now + REMOVAL_GRACE, key));
    }

    /// Carries out the removals whose grace has passed.
    fn remove_due(&mut self, now: Instant) {
        while let Some((at, _)) = self.removal_queue.front() {
            if *at > now {
                break;
            }
            let (at, key) = self.removal_queue.pop_front().expect("checked");
            // Still pending with this deadline (not re-inserted, not re-queued later)?
            if self.removals.get(&key) == Some(&at) {
                self.removals.remove(&key);
                self.fib_remove(&key);
            }
        }
    }

    /// Owner `owner` restarted and sent this node its slice again (`keep`): the FIB entries of
    /// its range that it did not send go, after the grace as any removal.
    fn prune(&mut self, spec: &ClusterSpec, owner: u16, keep: &sb_control::KeySet, now: Instant) {
        let mut stale = Vec::new();
        self.fib.for_each(|k, _| {
            if spec.pruned(owner, keep, k) {
                stale.push(Bytes::from_slice(k));
            }
        });
        for k in stale {
            self.fib_remove_later(k, now);
        }
    }

    /// FIB entries the control plane installed and has not removed (those waiting for the
    /// grace are removed already for it).
    fn installed(&self) -> usize {
        let leaving = self
            .removals
            .keys()
            .filter(|k| self.fib.contains(k))
            .count();
        self.fib.len() - leaving
    }

    fn fib_remove(&mut self, key: &[u8]) {
        let Ok(k) = <[u8; KEY_BYTES]>::try_from(key) else {
            return;
        };
        let slot = self.mirror.clone();
        let mut m = crate::mirror::lock(&slot);
        let old = self.fib.lookup(key);
        let mut teids = Vec::new();
        if let Some(old) = &old {
            let (teid, _) = Tunnel::from_entry(&k, old).uplink_entry();
            self.uplink.remove(&teid);
            teids.push(teid);
        }
        self.fib.remove(key);
        if let Some(m) = m.as_deref_mut() {
            self.sync_mirror(m, key, &teids);
        }
        drop(m);
        if let Some(old) = &old {
            self.released(&k, old);
        }
    }
}

fn tracing_warn(msg: &str) {
    // UTC time of day, to the millisecond: the nodes' lines side by side.
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (s, ms) = (t.as_secs() % 86_400, t.subsec_millis());
    eprintln!(
        "{:02}:{:02}:{:02}.{ms:03} control: {msg}",
        s / 3600,
        s / 60 % 60,
        s % 60
    );
}

/// What the control thread publishes for the counters file.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Published {
    /// The state machine's status.
    pub status: serde_json::Value,
    /// Bytes of the log.
    pub log_bytes: u64,
    /// The GPT is assembled and every owner's FIB slice for this node is installed.
    pub ready: bool,
    /// FIB or uplink inserts refused because the table was full.
    pub fib_insert_failed: u64,
    /// The PFCP endpoint's message counts (None without one).
    #[serde(skip)]
    pub pfcp: Option<std::collections::BTreeMap<crate::metrics::PfcpKey, u64>>,
    /// The PFCP sessions the endpoint holds (None without one).
    #[serde(skip)]
    pub pfcp_sessions: Option<u64>,
}

/// Sends every datagram the state machine has queued: to a PFCP peer through the PFCP
/// endpoint, to a node or a client through the control socket. The PFCP responses of the
/// replies may change the endpoint's state: handed to the state machine
/// ([`crate::pfcp::Endpoint::save`]), whose log records and Raft messages then go too.
fn transmit(
    node: &mut sb_control::Node,
    pfcp: &mut Option<crate::pfcp::Endpoint>,
    ctl: &ControlFile,
    sock: &UdpSocket,
) {
    loop {
        let mut any = false;
        while let Some((peer, bytes)) = node.poll_transmit() {
            any = true;
            if let Some(p) = pfcp
                .as_mut()
                .filter(|_| crate::pfcp::Endpoint::is_mine(&peer))
            {
                p.reply(&bytes);
                continue;
            }
            let to = match peer {
                Peer::Node(j) => match ctl.peers.get(j as usize) {
                    Some(a) => *a,
                    None => continue,
                },
                Peer::Client(a) => a,
            };
            if let Err(e) = sock.send_to(&bytes, to) {
                // A peer that is down: the state machine retransmits on its timeouts.
                if e.kind() != std::io::ErrorKind::ConnectionRefused {
                    tracing_warn(&format!("send to {to}: {e}"));
                }
            }
        }
        match pfcp {
            Some(p) if any => p.save(node),
            _ => return,
        }
    }
}

/// The control loop: runs until `stop` is set. The GPT slot in `dp` is filled once the state
/// machine has assembled it.
pub fn run(
    cfg: &NodeFile,
    ctl: &ControlFile,
    spec: ClusterSpec,
    mut dp: DataPlane,
    stop: &AtomicBool,
    published: &Mutex<Published>,
) -> Result<(), ControlError> {
    let me = cfg.node;
    raise_priority();
    let listen = *ctl
        .peers
        .get(me as usize)
        .ok_or_else(|| ControlError::Invalid(format!("no control address for node {me}")))?;
    let sock = match &cfg.netns {
        Some(ns) => sb_io::netns::in_netns(ns, || UdpSocket::bind(listen))
            .map_err(|e| ControlError::Invalid(format!("entering {ns}: {e}")))?,
        None => UdpSocket::bind(listen),
    }
    .map_err(|e| ControlError::Invalid(format!("binding {listen}: {e}")))?;
    // Pieces, deltas and acks of every node arrive in bursts while the loop commits: room for
    // them (a dropped datagram costs a retransmission timeout).
    if let Err(e) = sb_io::set_socket_buffers(std::os::fd::AsRawFd::as_raw_fd(&sock), 16 << 20) {
        eprintln!("control: socket buffers on {listen}: {e}");
    }
    std::fs::create_dir_all(&ctl.wal).map_err(io_err(&ctl.wal))?;
    // The log's identity: this cluster and node (a node never replays another's log).
    let mut identity = spec.cluster_id.to_le_bytes().to_vec();
    identity.extend_from_slice(&me.to_le_bytes());
    let opts = sb_wal::WalOptions {
        identity,
        ..sb_wal::WalOptions::default()
    };
    let (wal, recovery, repaired) = open_log(&ctl.wal, &opts, ctl.replicas > 1)?;
    if let Some(how) = &repaired {
        tracing_warn(&format!("log: {how}"));
    }
    if recovery.torn_tail_bytes > 0 {
        tracing_warn(&format!(
            "log: dropped a torn last commit of {} bytes (never acknowledged)",
            recovery.torn_tail_bytes
        ));
    }
    // An empty log where `cluster up` left no first-start mark: the log was lost (a wiped or
    // replaced disk), and the node rejoins (`sb_control`'s `rejoin`).
    let first_mark = first_start_mark(&ctl.wal);
    let mut first_start = first_mark.exists();
    let log_lost = (recovery.created && !first_start) || repaired.is_some();
    let recovered = crate::logwriter::replay_records(recovery)
        .map_err(|e| ControlError::Invalid(format!("{}: {e}", ctl.wal.display())))?;
    let flows = if recovered.is_empty() {
        my_flows(&ctl.flows, &spec, me)?
    } else {
        Vec::new()
    };
    let start = Instant::now();
    // The state machine's clock: nanoseconds since the control thread started.
    let clock = || start.elapsed().as_nanos() as u64;
    // The sockets are waited on with poll, then drained.
    sock.set_nonblocking(true)
        .map_err(|e| ControlError::Invalid(format!("{listen}: {e}")))?;
    let (lease, heartbeat, election_ticks) = ctl.detection()?;
    let tuning = sb_control::Tuning {
        expected_keys: ctl.share(),
        // The cuckoo FIB holds the slice: no second copy of it in the state machine.
        fib_map: false,
        // The owner's RIB keeps IPv4 UE keys without their 12 common bytes.
        rib_key_prefix: sb_engine::lte::IPV4_KEY_PREFIX.to_vec(),
        // Each range on this many nodes (a Raft group per range; 1: no replication).
        replicas: ctl.replicas.max(1),
        // Failure detection (500 ms by default). A range's followers campaign after half
        // of it to all of it without their leader (the state machine's default, 100 to 200
        // ms, suits its simulations): a dead owner is replaced within the detection time,
        // and an owner whose thread waited for the CPU or the disk for 200 ms keeps its
        // range instead of fencing itself.
        lease,
        heartbeat,
        election_ticks,
        // A flow moved off a gone handler leaves from its new handler's `ran`.
        handler_field: Some(sb_engine::lte::EGRESS_NODE_AT),
        ..sb_control::Tuning::default()
    };
    // The master secret as last read from `control.json` (`cluster rotate-key` writes a new
    // one): a state machine restarted after a fence takes the current one.
    let master = std::cell::Cell::new(spec.key);
    let new_node = |flows: Vec<Flow>, recovered: Vec<Vec<u8>>| {
        let mut node = sb_control::Node::with_tuning(
            ClusterSpec {
                key: master.get(),
                ..spec.clone()
            },
            me,
            flows,
            recovered,
            clock(),
            rand::random(),
            tuning.clone(),
        )?;
        // Client requests are stamped with the Unix time: the node judges them by its own.
        node.set_wall_offset(sb_control::client::unix_nanos().saturating_sub(clock()));
        Ok::<_, ControlError>(node)
    };
    let mut node = new_node(flows, recovered)?;
    if log_lost {
        if ctl.replicas > 1 {
            tracing_warn("the log is lost (empty, and not the cluster's first start): rejoining; this node's votes are withheld until each of its ranges' groups has a leader again, and its epoch comes from its peers");
        } else {
            tracing_warn("the log is lost (empty, and not the cluster's first start) and ranges have one replica: this node's range starts again from the cluster-up flows; every change since is lost");
        }
        node.mark_log_lost();
    }
    // The PFCP endpoint's incarnation is the node's epoch (1 at the first start, one more at
    // each restart: the log says it): new SEIDs carry it. Its sessions and associations are
    // the node's range's PFCP state records (`Endpoint::restore`, once the node is ready):
    // a restart keeps them, and so does a lost log with replication (the range's other
    // replicas hold them). Only a lost log without replication loses them: then the
    // endpoint announces a new Recovery Time Stamp.
    // A node whose log was lost opens its PFCP endpoint once it is ready, in the epoch its
    // peers told it (at least 2: it ran before), so that its SEIDs carry that epoch, not the
    // first start's.
    let pfcp_state_lost = log_lost && ctl.replicas <= 1;
    // (Volatile sessions: any restart loses them.)
    let volatile_lost = ctl.pfcp_volatile && node.epoch() > 1;
    let mut pfcp_after_rejoin = log_lost && ctl.pfcp.is_some();
    let mut pfcp = if pfcp_after_rejoin {
        None
    } else {
        crate::pfcp::Endpoint::open(cfg, ctl, &spec, node.epoch(), volatile_lost)?
    };
    // The log is written on a thread of its own (crate::logwriter): the control thread never
    // waits for the disk. Persist events are numbered across restarts of the state machine:
    // `base` events were handed out by earlier incarnations.
    let wal =
        crate::logwriter::LogWriter::start(wal, &ctl.wal, opts.clone(), ctl.checkpoint_bytes())
            .map_err(io_err(&ctl.wal))?;
    let mut base = 0u64;
    // Persist events of this incarnation the state machine was told are durable.
    let mut told = 0u64;
    let peer_of = |a: SocketAddr| match ctl.peers.iter().position(|p| *p == a) {
        Some(j) => Peer::Node(j as u16),
        None => Peer::Client(a),
    };
    let mut buf = vec![0u8; 65536];
    let mut last_pub = Instant::now() - Duration::from_secs(1);
    let mut was_ready = false;
    // Restarts of the state machine after it was fenced.
    let mut restarts = 0u64;
    // Time the control thread spent in `Node::checkpoint` (for `cluster status`).
    let mut cp_build = CheckpointBuild::default();
    // The longest iteration of the loop below (without its wait), and those that took
    // SLOW_ITERATION or more.
    let mut slow_iter = Slow::default();
    // The latest wake-up after a wait's end, and those SLOW_ITERATION late or more.
    let mut late_wake = Slow::default();
    let mut spec_check = (Instant::now(), spec_mtime(&ctl.spec));
    while !stop.load(Ordering::Relaxed) {
        if spec_check.0.elapsed() >= SPEC_POLL {
            // A new master secret (`cluster rotate-key`): the state machine and the PFCP
            // endpoint take it at once; nothing else in the file may change under a node.
            let mtime = spec_mtime(&ctl.spec);
            if mtime != spec_check.1 {
                match read_spec(&ctl.spec) {
                    Ok(new) if new.key != master.get() => {
                        master.set(new.key);
                        node.rotate_key(clock(), new.key);
                        if let Some(p) = &mut pfcp {
                            p.rotate_key(&new);
                        }
                        eprintln!("control: took the cluster's new key (control.json)");
                    }
                    Ok(_) => {}
                    Err(e) => tracing_warn(&format!("re-reading the control spec: {e}")),
                }
            }
            spec_check = (Instant::now(), mtime);
        }
        let now = clock();
        let wait = node
            .poll_timeout()
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
            .unwrap_or(Duration::from_millis(50))
            .clamp(Duration::from_micros(100), Duration::from_millis(50));
        let wake_by = Instant::now() + wait;
        match &pfcp {
            Some(p) => p.wait(
                &[std::os::fd::AsRawFd::as_raw_fd(&sock), wal.wake_fd()],
                wait,
            ),
            None => {
                let fds = [std::os::fd::AsRawFd::as_raw_fd(&sock), wal.wake_fd()];
                if let Err(e) = sb_io::wait_readable(&fds, wait) {
                    tracing_warn(&format!("poll: {e}"));
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        let iter_start = Instant::now();
        // A wait that ended this late: the thread was runnable and not run (a starved CPU),
        // time no iteration's own line shows, in which no heartbeat goes.
        let late = iter_start.saturating_duration_since(wake_by);
        if let Some(n) = late_wake.note(late) {
            tracing_warn(&format!(
                "the control thread woke {} ms after its wait's end ({n} of {} ms or more so far)",
                late.as_millis(),
                SLOW_ITERATION.as_millis()
            ));
        }
        wal.drain_wakes();
        if let Some(e) = wal.take_error() {
            return Err(e.into());
        }
        // Everything that waits, up to a bound: the iteration's one log commit covers all of
        // it (group commit), where one datagram per iteration paid a commit each.
        // Where a slow iteration's time went (its line says): the datagrams, the slowest one
        // (its message type and size), the PFCP endpoint, the timers, the events.
        let mut slowest = (Duration::ZERO, 0u8, 0usize);
        for _ in 0..MAX_DATAGRAMS_PER_ITERATION {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let t = Instant::now();
                    node.handle(clock(), peer_of(from), &buf[..n]);
                    let took = t.elapsed();
                    if took > slowest.0 {
                        slowest = (took, buf.get(5).copied().unwrap_or(0), n);
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(e) => {
                    tracing_warn(&format!("recv: {e}"));
                    break;
                }
            }
        }
        let t_datagrams = iter_start.elapsed();
        if let Some(p) = &mut pfcp {
            p.receive(&mut node, &dp, clock());
            p.meter(&mut dp);
        }
        let t_pfcp = iter_start.elapsed();
        let now = clock();
        if node.poll_timeout().is_some_and(|t| t <= now) {
            node.handle_timeout(now);
        }
        let t_timers = iter_start.elapsed();
        dp.remove_due(Instant::now());
        // Events until none is left: what became durable may release more (acks after
        // persistence).
        // The events' time, split: log appends, the data plane's tables, sends, the state
        // machine's work once records are durable (Raft's applies among it).
        let mut ev_t = [Duration::ZERO; 4];
        loop {
            let mut t = Instant::now();
            while let Some(ev) = node.poll_event() {
                let slot = usize::from(!matches!(ev, Event::Persist { .. }));
                match ev {
                    Event::Persist { records } => {
                        wal.append(records, base + node.persists_handed());
                    }
                    Event::FibInsert { key, value } => {
                        if let Err(e) = dp.fib_insert(&key, &value) {
                            tracing_warn(&format!("install refused ({e}): the update is rejected"));
                            node.install_failed(&key);
                        }
                    }
                    Event::FibRemove { key } => dp.fib_remove_later(key, Instant::now()),
                    Event::FibPrune { owner, keep } => {
                        dp.prune(&spec, owner, &keep, Instant::now())
                    }
                    // The mirror's lock is held across the table's change and the mirror's
                    // (crate::mirror).
                    Event::GptDelta(d) => {
                        let mut m = crate::mirror::lock(&dp.mirror);
                        if let Some(g) = dp.gpt.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                            match g.apply_owner_delta(&d) {
                                Ok(()) => {
                                    if let Some(m) = m.as_deref_mut() {
                                        m.gpt_delta(&d);
                                    }
                                }
                                Err(e) => {
                                    // Not acknowledged: the owner's piece comes again.
                                    tracing_warn(&format!("GPT delta refused: {e}"));
                                    node.gpt_refused(spec.owner_of_block(d.group() / 64));
                                }
                            }
                        }
                    }
                    // Gone nodes' stand-ins (with replication): the workers' lookups that
                    // find a gone node go to its stand-in, and so do the XDP fast path's.
                    // A PFCP state change is durable: its responses go out.
                    Event::StateDurable(t) => {
                        if let Some(p) = &mut pfcp {
                            p.durable(t);
                        }
                    }
                    Event::StateDropped(t) => {
                        if let Some(p) = &mut pfcp {
                            p.dropped(t);
                        }
                    }
                    Event::StandIns(t) => {
                        // The PFCP endpoint serves the sessions of the gone nodes this one
                        // stands in for, and relays others' to their stand-ins.
                        if let Some(p) = &mut pfcp {
                            p.set_stand_ins(&t);
                        }
                        let mut m = crate::mirror::lock(&dp.mirror);
                        if let Some(g) = dp.gpt.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                            g.set_redirects(&t);
                        }
                        if let Some(m) = m.as_deref_mut() {
                            m.stand_ins(&t);
                        }
                    }
                    Event::GptInstall(g) => {
                        let mut m = crate::mirror::lock(&dp.mirror);
                        if let Some(m) = m.as_deref_mut() {
                            m.gpt_replace(&g);
                        }
                        *dp.gpt.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(Arc::new(LiveSetSep::new(*g)));
                    }
                    Event::GptPiece(p) => {
                        let mut m = crate::mirror::lock(&dp.mirror);
                        if let Some(g) = dp.gpt.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                            match g.install_piece(&p) {
                                Ok(()) => {
                                    // Rare (assembly, a resync): the whole table, copied.
                                    if let Some(m) = m.as_deref_mut() {
                                        m.gpt_replace(&g.snapshot());
                                    }
                                }
                                Err(e) => {
                                    tracing_warn(&format!("GPT piece refused: {e}"));
                                    node.gpt_refused(spec.owner_of_block(p.range().start));
                                }
                            }
                        }
                    }
                }
                ev_t[slot] += t.elapsed();
                t = Instant::now();
            }
            // What is queued never waits for the log (the state machine holds back whatever
            // needs it until `persisted_through`): peers' acks, deltas and installs go out
            // while the log syncs instead of after it.
            let durable = wal.durable().saturating_sub(base);
            if durable <= told {
                break;
            }
            told = durable;
            if first_start {
                // The first start's epoch is durable: a later empty log is a lost one.
                let _ = std::fs::remove_file(&first_mark);
                first_start = false;
            }
            let t0 = Instant::now();
            transmit(&mut node, &mut pfcp, ctl, &sock);
            let t1 = Instant::now();
            node.persisted_through(clock(), durable);
            ev_t[2] += t1 - t0;
            ev_t[3] += t1.elapsed();
        }
        let t0 = Instant::now();
        transmit(&mut node, &mut pfcp, ctl, &sock);
        ev_t[2] += t0.elapsed();
        let t_events = iter_start.elapsed();
        // The log replaced by the state machine's checkpoint, when one is due and the state
        // machine is at a point where it can give one (else it is tried again next time).
        // A checkpoint holds this thread as long as the state takes to encode (seconds at
        // millions of sessions), longer than failure detection's lease: the node announces
        // the pause to its peers first and takes the checkpoint once they hold it
        // (`Node::announce_pause`), so that no one takes it for dead meanwhile and it keeps
        // its own lease.
        let pause = (cp_build.last * 2 + Duration::from_secs(1)).min(Duration::from_secs(30));
        let pause_ns = pause.as_nanos() as u64;
        // A snapshot raft wants to send to a replica behind, whose data the store dropped
        // once it was in the log (`sb_control::Node::serve_snapshots`), is made anew the
        // same way: its encoding holds this thread as long.
        let cp_due = wal.checkpoint_due();
        let due = cp_due || node.snapshot_wanted();
        if due && !node.pause_held(pause_ns) {
            if !node.pausing() {
                node.announce_pause(pause_ns + 1_000_000_000);
                cp_build.pauses += 1;
                transmit(&mut node, &mut pfcp, ctl, &sock);
            }
        } else if due && !cp_due {
            let t0 = Instant::now();
            let made = node.serve_snapshots();
            let took = t0.elapsed();
            if made > 0 {
                cp_build.last = cp_build.last.max(took);
            }
            if took >= SLOW_CHECKPOINT {
                tracing_warn(&format!(
                    "making {made} snapshot(s) for a replica behind held the control thread {} ms",
                    took.as_millis()
                ));
            }
        } else if due {
            let t0 = Instant::now();
            let records = node.checkpoint();
            let took = t0.elapsed();
            cp_build.attempts += 1;
            cp_build.total += took;
            cp_build.max = cp_build.max.max(took);
            if records.is_some() {
                cp_build.last = took;
            }
            if took >= SLOW_CHECKPOINT {
                tracing_warn(&format!(
                    "taking the state machine's checkpoint ({}) held the control thread {} ms",
                    if records.is_some() {
                        "taken"
                    } else {
                        "not ready"
                    },
                    took.as_millis()
                ));
            }
            if let Some(records) = records {
                wal.checkpoint(records, base + node.persists_handed());
            }
        }
        if node.fenced() {
            // Another replica leads this node's range now (it was cut off or slow): the state
            // machine stops and starts again from its log, as at a process start. The log is
            // committed (the events loop above ends with a commit) and opened again; the data
            // plane keeps its FIB (the owners' slices come again and the restarted owner
            // prunes what its range no longer holds) and its GPT, into which the restarted
            // node writes the pieces it assembles (`keep_live_gpt`): the workers go on.
            if let Some(records) = node.rejoin_records() {
                // A peer knows a newer epoch of this node: its log was lost. The log becomes
                // that epoch and the mark of a lost log, and the node starts again above it.
                tracing_warn("a peer knows a newer epoch of this node (its log was lost): restarting the control state machine in the epoch after it");
                wal.checkpoint(records, base + node.persists_handed());
            } else {
                let reason = node.fence_reason().unwrap_or("unknown");
                tracing_warn(&format!(
                "this node's control state machine is fenced ({reason}): restarting it from its log ({} log bytes, {} checkpoints so far){}",
                wal.log_bytes(),
                wal.checkpoints(),
                if reason == "lease_lost" || reason == "declared_gone" {
                    format!("; leases: {}", node.lease_report())
                } else {
                    String::new()
                }
            ));
            }
            base += node.persists_handed();
            told = 0;
            // The fenced state machine goes before the log is read: a restart holds the
            // records and the state rebuilt from them, not the old state as well.
            drop(node);
            let t0 = Instant::now();
            let recovered = crate::logwriter::replay_records(wal.reopen()?)
                .map_err(|e| ControlError::Invalid(format!("{}: {e}", ctl.wal.display())))?;
            let (n, read) = (recovered.len(), t0.elapsed());
            node = new_node(Vec::new(), recovered)?;
            // The old state machine's memory and the replayed records are free now, but
            // scattered through the heap, which would keep them.
            sb_common::huge::give_back_free_heap();
            if let Some(p) = &mut pfcp {
                p.state_machine_restarted();
            }
            // What a restart holds the control thread for (no heartbeat goes meanwhile).
            tracing_warn(&format!(
                "restart: log read in {} ms ({n} records), state machine rebuilt in {} ms",
                read.as_millis(),
                (t0.elapsed() - read).as_millis()
            ));
            // (A node that rejoins before it was ever ready has no GPT in its data plane yet:
            // it gets the assembled table, as at a first start.)
            if dp.gpt.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                node.keep_live_gpt();
            }
            restarts += 1;
        }
        let took = iter_start.elapsed();
        if let Some(n) = slow_iter.note(took) {
            let ms = |d: Duration| d.as_millis();
            tracing_warn(&format!(
                "an iteration held the control thread {} ms ({n} of {} ms or more so far): datagrams {} ms (the slowest {} ms, type {}, {} bytes), PFCP {} ms, timers {} ms, events {} ms (log appends {} ms, tables {} ms, sends {} ms, the state machine after durability {} ms), then checkpoint or restart {} ms",
                took.as_millis(),
                SLOW_ITERATION.as_millis(),
                ms(t_datagrams),
                ms(slowest.0),
                slowest.1,
                slowest.2,
                ms(t_pfcp - t_datagrams),
                ms(t_timers - t_pfcp),
                ms(t_events - t_timers),
                ms(ev_t[0]),
                ms(ev_t[1]),
                ms(ev_t[2]),
                ms(ev_t[3]),
                ms(took.saturating_sub(t_events)),
            ));
        }
        let ready = node.ready();
        if pfcp_after_rejoin && ready {
            pfcp = crate::pfcp::Endpoint::open(
                cfg,
                ctl,
                &spec,
                node.epoch().max(2),
                pfcp_state_lost || ctl.pfcp_volatile,
            )?;
            pfcp_after_rejoin = false;
        }
        if last_pub.elapsed() >= Duration::from_millis(200) || ready != was_ready {
            was_ready = ready;
            let mut p = published.lock().unwrap_or_else(|e| e.into_inner());
            p.ready = ready;
            p.status = serde_json::to_value(node.status()).unwrap_or_default();
            // The state machine keeps no FIB map here (Tuning::fib_map): the FIB is the count.
            p.status["fib_entries"] = dp.installed().into();
            // Which master secret this node seals with (`cluster rotate-key` waits for it).
            p.status["key_fingerprint"] = sb_control::wire::key_fingerprint(&master.get()).into();
            if let (Some(e), Some(mem)) = (
                &pfcp,
                p.status.get_mut("memory").and_then(|v| v.as_object_mut()),
            ) {
                let m = e.upf().memory();
                mem.insert(
                    "pfcp".into(),
                    serde_json::json!({
                        "sessions": m.sessions,
                        "packed": m.packed,
                        "packed_chunks": m.packed_chunks,
                        "ue_index": m.ue_index,
                        "teids": m.teids,
                        "responses": m.responses,
                        "shapes": m.shapes,
                    }),
                );
            }
            p.status["restarts"] = restarts.into();
            if let Some(e) = &pfcp {
                // The PFCP sessions the endpoint holds, and its state changes handed to the
                // state machine and made durable (`cluster status`).
                p.status["pfcp_sessions"] = (e.upf().session_count() as u64).into();
                p.status["pfcp_state"] = e.state_counts();
            }
            p.log_bytes = wal.log_bytes();
            p.status["checkpoints"] = wal.checkpoints().into();
            p.status["checkpoint_build"] = serde_json::json!({
                "attempts": cp_build.attempts,
                "total_ms": cp_build.total.as_millis() as u64,
                "max_ms": cp_build.max.as_millis() as u64,
                "pauses_announced": cp_build.pauses,
            });
            p.status["checkpoint_write_max_ms"] = wal.checkpoint_write_max_ms().into();
            p.status["log_commit_max_ms"] = wal.commit_max_ms().into();
            p.status["log_slow_commits"] = wal.slow_commits().into();
            p.status["control_iteration_max_ms"] = (slow_iter.max.as_millis() as u64).into();
            p.status["control_slow_iterations"] = slow_iter.count.into();
            p.status["control_late_wake_max_ms"] = (late_wake.max.as_millis() as u64).into();
            p.status["control_late_wakes"] = late_wake.count.into();
            p.fib_insert_failed = dp.failed;
            p.pfcp = pfcp.as_ref().map(|e| e.counts());
            p.pfcp_sessions = pfcp.as_ref().map(|e| e.upf().session_count() as u64);
            last_pub = Instant::now();
        }
    }
    Ok(())
}

/// Opens the node's log `dir`. With replication (`replicated`), a damaged log is repaired
/// from the other replicas instead of refused: a damaged acknowledged commit
/// (`sb_wal::WalError::Damaged`) and everything after it are removed
/// (`sb_wal::Wal::discard_after`), and a log damaged elsewhere (its snapshot, a segment
/// header, a gap) is moved aside to `NAME.damaged-SECONDS` and replaced by an empty one; the
/// node then rejoins as after a lost log (its votes withheld until its groups follow a leader,
/// its epoch from its peers), and the Raft groups bring back what was removed. The third
/// value says what was done. Without replication the damage is an error: nothing else holds
/// the range's state.
fn open_log(
    dir: &std::path::Path,
    opts: &sb_wal::WalOptions,
    replicated: bool,
) -> Result<(sb_wal::Wal, sb_wal::Recovery, Option<String>), ControlError> {
    use sb_wal::WalError;
    let e = match sb_wal::Wal::open(dir, opts) {
        Ok((w, r)) => return Ok((w, r, None)),
        Err(e) if !replicated => return Err(e.into()),
        Err(e) => e,
    };
    if let WalError::Damaged { last_good_lsn, .. } = &e {
        if let Ok(bytes) = sb_wal::Wal::discard_after(dir, opts, *last_good_lsn) {
            let (w, r) = sb_wal::Wal::open(dir, opts)?;
            return Ok((w, r, Some(format!("{e}: removed the damaged commit and what followed it ({bytes} bytes); rejoining to get them back from the replicas"))));
        }
    }
    if !matches!(
        e,
        WalError::Damaged { .. } | WalError::Corrupt { .. } | WalError::Gap { .. }
    ) {
        return Err(e.into());
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".damaged-{secs}"));
    let aside = dir.with_file_name(name);
    std::fs::rename(dir, &aside).map_err(io_err(dir))?;
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let (w, r) = sb_wal::Wal::open(dir, opts)?;
    Ok((
        w,
        r,
        Some(format!(
            "{e}: moved the log aside to {} and started an empty one; rejoining to get the ranges back from the replicas",
            aside.display()
        )),
    ))
}

/// The mark `cluster up` leaves beside a node's log directory `wal` before the node's first
/// start (removed once the node's first epoch is durable): an empty log without it is a lost
/// one.
pub fn first_start_mark(wal: &std::path::Path) -> PathBuf {
    let mut name = wal.file_name().unwrap_or_default().to_os_string();
    name.push(".first-start");
    wal.with_file_name(name)
}

/// A call of `Node::checkpoint` this long is reported on stderr.
const SLOW_CHECKPOINT: Duration = Duration::from_millis(20);

/// An iteration of the control loop this long (without its wait) is reported on stderr.
const SLOW_ITERATION: Duration = Duration::from_millis(100);

/// Durations of one kind the control thread watches (its iterations, its late wake-ups):
/// the longest, and those of [`SLOW_ITERATION`] or more, reported at most once a second (a
/// loaded machine may make many of them).
struct Slow {
    max: Duration,
    count: u64,
    said: Instant,
}

impl Default for Slow {
    fn default() -> Slow {
        Slow {
            max: Duration::ZERO,
            count: 0,
            said: Instant::now() - Duration::from_secs(1),
        }
    }
}

impl Slow {
    /// Takes `d`; the count so far when a line is due for it.
    fn note(&mut self, d: Duration) -> Option<u64> {
        self.max = self.max.max(d);
        if d < SLOW_ITERATION {
            return None;
        }
        self.count += 1;
        if self.said.elapsed() < Duration::from_secs(1) {
            return None;
        }
        self.said = Instant::now();
        Some(self.count)
    }
}

/// The control thread's time in `Node::checkpoint`.
#[derive(Default)]
struct CheckpointBuild {
    attempts: u64,
    total: Duration,
    max: Duration,
    /// The last checkpoint taken: how long it held the thread.
    last: Duration,
    /// Pauses announced before one.
    pauses: u64,
}

/// The control thread's nice value (and its log thread's, which inherits it).
const CONTROL_NICE: i32 = -10;

/// Raises the calling thread's scheduling priority to [`CONTROL_NICE`] where the process may
/// (root, or `CAP_SYS_NICE`). Where the data plane's workers, the other processes of a small
/// machine and the control thread share cores, a control thread that waits for CPU a few
/// hundred milliseconds misses its heartbeats and Raft ticks: its peers take it for dead and
/// it fences itself ([`sb_control::Node::fenced`]). A deployment gives it a core of its own;
/// this is the fallback where it has none. Without the privilege it runs at the default
/// priority, with a warning.
fn raise_priority() {
    if let Err(e) = sb_io::set_thread_nice(CONTROL_NICE) {
        tracing_warn(&format!(
            "control thread: nice {CONTROL_NICE} refused ({e}): it runs at the default priority"
        ));
    }
}

/// Waits until the control thread has put the GPT into `slot` and the node is ready (every
/// owner's FIB slice installed), or `timeout` passes.
pub fn wait_ready(
    slot: &Mutex<Option<Arc<LiveSetSep>>>,
    published: &Mutex<Published>,
    timeout: Duration,
    failed: &AtomicBool,
) -> Result<Arc<LiveSetSep>, ControlError> {
    let t0 = Instant::now();
    loop {
        let ready = published.lock().unwrap_or_else(|e| e.into_inner()).ready;
        if ready {
            if let Some(g) = slot.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                return Ok(g.clone());
            }
        }
        if t0.elapsed() > timeout || failed.load(Ordering::Relaxed) {
            return Err(ControlError::NotReady(timeout));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The header of an update file.
pub const UPDATES_HEADER: &str = "op,ue,teid,enb,node";

/// One line of an update file, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateLine {
    /// 1-based line number.
    pub line: usize,
    /// `insert`, `change` or `delete`.
    pub op: sb_control::Op,
    /// The tunnel (for a delete only its UE address counts).
    pub tunnel: Tunnel,
}

impl UpdateLine {
    /// The update the control protocol carries.
    pub fn update(&self) -> sb_control::Update {
        let delete = matches!(self.op, sb_control::Op::Delete);
        sb_control::Update {
            op: self.op,
            key: Bytes::from_slice(&self.tunnel.key()),
            node: self.tunnel.node,
            value: if delete {
                Bytes::new()
            } else {
                Bytes::from_slice(&self.tunnel.value())
            },
        }
    }
}

/// Parses an update file (`op,ue,teid,enb,node[,qci]` per line, the header line optional,
/// blank lines and `#` comments skipped): the valid lines, and each invalid line's number with
/// the reason. A delete needs only `op,ue` (the other fields may be empty).
pub fn read_updates(text: &str, nodes: usize) -> (Vec<UpdateLine>, Vec<(usize, String)>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || (i == 0 && line.starts_with("op")) {
            continue;
        }
        match parse_update(line, nodes) {
            Ok((op, tunnel)) => ok.push(UpdateLine {
                line: i + 1,
                op,
                tunnel,
            }),
            Err(why) => bad.push((i + 1, why)),
        }
    }
    (ok, bad)
}

fn parse_update(line: &str, nodes: usize) -> Result<(sb_control::Op, Tunnel), String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    let op = match f[0] {
        "insert" => sb_control::Op::Insert,
        "change" => sb_control::Op::Change,
        "delete" => sb_control::Op::Delete,
        o => return Err(format!("op must be insert, change or delete, not {o:?}")),
    };
    let delete = matches!(op, sb_control::Op::Delete);
    if f.len() < 2 || (!delete && !(5..=6).contains(&f.len())) || f.len() > 6 {
        return Err(format!(
            "expected op,ue,teid,enb,node[,qci], got {} fields",
            f.len()
        ));
    }
    let ue: std::net::IpAddr = f[1]
        .parse()
        .map_err(|_| format!("bad UE address {:?}", f[1]))?;
    if delete {
        return Ok((
            op,
            Tunnel {
                ue,
                teid: 0,
                enb: std::net::Ipv4Addr::UNSPECIFIED,
                node: 0,
                qci: 0,
                ul_teid: 0,
                qfi: 0,
                rqi: false,
                policy: Default::default(),
                owner: 0,
            },
        ));
    }
    let teid: u32 = f[2].parse().map_err(|_| format!("bad TEID {:?}", f[2]))?;
    let enb: std::net::Ipv4Addr = f[3]
        .parse()
        .map_err(|_| format!("bad eNodeB IPv4 address {:?}", f[3]))?;
    let node: u16 = f[4]
        .parse()
        .ok()
        .filter(|&n: &u16| usize::from(n) < nodes)
        .ok_or_else(|| format!("node {:?} is not one of 0..{nodes}", f[4]))?;
    let qci: u8 = match f.get(5) {
        Some(q) => q.parse().map_err(|_| format!("bad QCI {q:?}"))?,
        None => 9,
    };
    Ok((
        op,
        Tunnel {
            ue,
            teid,
            enb,
            node,
            qci,
            ul_teid: 0,
            qfi: 0,
            rqi: false,
            policy: Default::default(),
            owner: 0,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sb_engine::lte::{Tunnel, UPLINK_VALUE_BYTES, VALUE_BYTES};
    use std::net::{IpAddr, Ipv4Addr};

    fn empty(key_bytes: usize, value_bytes: usize) -> sb_cuckoo::Writer {
        let none: [(&[u8], &[u8]); 0] = [];
        sb_engine::fib::cuckoo_table_with_room(key_bytes, value_bytes, 7, 1000, none.into_iter())
            .unwrap()
            .into_concurrent()
            .0
    }

    fn tunnel(i: u32) -> Tunnel {
        Tunnel {
            ue: IpAddr::V4(Ipv4Addr::from(0x0a2d_0000 + i)),
            teid: 100 + i,
            enb: Ipv4Addr::new(10, 2, 0, 1),
            node: 1,
            qci: 9,
            ul_teid: 5000 + i,
            qfi: 0,
            rqi: false,
            policy: Default::default(),
            owner: 0,
        }
    }

    /// A mirror that keeps the tables it is told as maps.
    #[derive(Default)]
    struct Maps {
        fib: std::collections::HashMap<Vec<u8>, Vec<u8>>,
        uplink: std::collections::HashMap<Vec<u8>, Vec<u8>>,
    }

    struct Recorder(Arc<Mutex<Maps>>);

    impl TableMirror for Recorder {
        fn fib_insert(&mut self, key: &[u8], value: &[u8]) {
            self.0
                .lock()
                .unwrap()
                .fib
                .insert(key.to_vec(), value.to_vec());
        }
        fn fib_remove(&mut self, key: &[u8]) {
            self.0.lock().unwrap().fib.remove(key);
        }
        fn uplink_insert(&mut self, teid: &[u8], value: &[u8]) {
            self.0
                .lock()
                .unwrap()
                .uplink
                .insert(teid.to_vec(), value.to_vec());
        }
        fn uplink_remove(&mut self, teid: &[u8]) {
            self.0.lock().unwrap().uplink.remove(teid);
        }
        fn gpt_delta(&mut self, _: &sb_setsep::Delta) {}
        fn gpt_replace(&mut self, _: &sb_setsep::SetSep) {}
        fn stand_ins(&mut self, _: &[Option<u16>]) {}
        fn report(&self) -> crate::mirror::XdpReport {
            Default::default()
        }
    }

    fn as_map(t: &sb_cuckoo::Writer) -> std::collections::HashMap<Vec<u8>, Vec<u8>> {
        let mut m = std::collections::HashMap::new();
        t.for_each(|k, v| {
            m.insert(k.to_vec(), v.to_vec());
        });
        m
    }

    /// Random installs (new tunnels, changed TEIDs, policies with their local slots, uplink
    /// TEIDs shared between UEs), removals and their grace: after every step the mirror holds
    /// exactly the FIB and uplink entries of the tables.
    #[test]
    fn the_mirror_follows_every_table_change() {
        let mut dp = DataPlane::new(empty(KEY_BYTES, VALUE_BYTES), empty(4, UPLINK_VALUE_BYTES));
        let maps = Arc::new(Mutex::new(Maps::default()));
        *crate::mirror::lock(&dp.mirror) = Some(Box::new(Recorder(maps.clone())));
        let mut rng = 0x6d69_7272_6f72u64;
        let mut now = Instant::now();
        let (mut inserts, mut removals, mut slots) = (0, 0, 0);
        for step in 0..4000 {
            let r = sb_common::splitmix64(&mut rng);
            let mut t = tunnel((r % 64) as u32);
            t.teid ^= (r >> 8) as u32 & 3;
            t.ul_teid = 5000 + ((r >> 16) % 80) as u32;
            if (r >> 40) & 1 == 1 {
                t.policy = sb_engine::lte::Policy {
                    dl_mbr_kbps: 1000,
                    count: true,
                    ..Default::default()
                };
            }
            match (r >> 32) % 5 {
                0..=2 => {
                    dp.fib_insert(&t.key(), &t.value()).unwrap();
                    inserts += 1;
                    let v = dp.fib.lookup(&t.key()).unwrap();
                    slots += u64::from(sb_engine::lte::local_slot(&v) != 0);
                }
                3 => dp.fib_remove_later(Bytes::from_slice(&t.key()), now),
                _ => {
                    now += REMOVAL_GRACE / 2;
                    let before = dp.fib.len();
                    dp.remove_due(now);
                    removals += before - dp.fib.len();
                }
            }
            let m = maps.lock().unwrap();
            assert_eq!(m.fib, as_map(&dp.fib), "FIB after step {step}");
            assert_eq!(m.uplink, as_map(&dp.uplink), "uplink after step {step}");
        }
        assert!(
            inserts > 1000 && removals > 20 && slots > 200,
            "{inserts} {removals} {slots}"
        );
    }

    /// An owner's restart prunes the keys of its range it did not send again, after the grace,
    /// and leaves the other owners' keys; the count of installed entries leaves them out at
    /// once.
    #[test]
    fn a_prune_removes_the_owners_other_keys_after_the_grace() {
        let spec = new_spec(7, 3, 1, 1000);
        let mut dp = DataPlane::new(empty(KEY_BYTES, VALUE_BYTES), empty(4, UPLINK_VALUE_BYTES));
        let ts: Vec<Tunnel> = (0..200).map(tunnel).collect();
        for t in &ts {
            dp.fib_insert(&t.key(), &t.value()).unwrap();
        }
        assert_eq!(dp.installed(), 200);
        let owner = spec.owner_of(&ts[0].key());
        // The owner sent every other key of its range again.
        let mine: Vec<&Tunnel> = ts
            .iter()
            .filter(|t| spec.owner_of(&t.key()) == owner)
            .collect();
        assert!(mine.len() > 10 && mine.len() < 200, "{}", mine.len());
        let keep: sb_control::KeySet = mine
            .iter()
            .step_by(2)
            .map(|t| Bytes::from_slice(&t.key()))
            .collect();
        let t0 = Instant::now();
        dp.prune(&spec, owner, &keep, t0);
        let stale = mine.len() - keep.len();
        assert_eq!(dp.installed(), 200 - stale);
        // Still forwarding during the grace.
        assert_eq!(dp.fib.len(), 200);
        dp.remove_due(t0 + REMOVAL_GRACE + Duration::from_millis(1));
        assert_eq!(dp.fib.len(), 200 - stale);
        for t in &ts {
            let held = dp.fib.contains(&t.key());
            let want = spec.owner_of(&t.key()) != owner || keep.contains(&t.key()[..]);
            assert_eq!(held, want, "{t:?}");
            // The uplink entry goes with its tunnel.
            assert_eq!(dp.uplink.contains(&t.uplink_teid().to_be_bytes()), want);
        }
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;
    use sb_engine::lte::{local_slot, uplink_slot, Policy, UPLINK_VALUE_BYTES, VALUE_BYTES};
    use std::net::{IpAddr, Ipv4Addr};

    fn empty(key_bytes: usize, value_bytes: usize, room: usize) -> sb_cuckoo::Writer {
        let none: [(&[u8], &[u8]); 0] = [];
        sb_engine::fib::cuckoo_table_with_room(key_bytes, value_bytes, 7, room, none.into_iter())
            .unwrap()
            .into_concurrent()
            .0
    }

    fn session(ue: IpAddr, policy: Policy) -> Tunnel {
        Tunnel {
            ue,
            teid: 0x100,
            enb: Ipv4Addr::new(10, 2, 0, 9),
            node: 1,
            qci: 9,
            ul_teid: 0x0100_0007,
            qfi: 5,
            rqi: false,
            policy,
            owner: 3,
        }
    }

    /// A FIB entry with a policy gets its session's slot in the local FIB value and its uplink
    /// entry (a dual-stack session's two entries share it); usage is readable by uplink TEID
    /// until the last entry goes after the grace, then its final usage is kept for the taking.
    #[test]
    fn entries_with_a_policy_get_their_sessions_slot() {
        let mut dp = DataPlane::new(
            empty(KEY_BYTES, VALUE_BYTES, 100),
            empty(4, UPLINK_VALUE_BYTES, 100),
        );
        let p = Policy {
            dl_mbr_kbps: 10_000,
            count: true,
            ..Policy::default()
        };
        let v4 = session(IpAddr::V4(Ipv4Addr::new(100, 64, 1, 1)), p);
        let v6 = session(IpAddr::V6("2001:db8:9::".parse().unwrap()), p);
        let plain = Tunnel {
            ue: IpAddr::V4(Ipv4Addr::new(100, 64, 1, 2)),
            ul_teid: 0x0100_0008,
            policy: Policy::default(),
            ..v4
        };
        for t in [&v4, &v6, &plain] {
            dp.fib_insert(&t.key(), &t.value()).unwrap();
        }
        let slot = local_slot(&dp.fib.lookup(&v4.key()).unwrap());
        assert_ne!(slot, 0);
        assert_eq!(local_slot(&dp.fib.lookup(&v6.key()).unwrap()), slot);
        assert_eq!(dp.fib.lookup(&plain.key()).unwrap(), plain.value().to_vec());
        let up = dp.uplink.lookup(&v4.ul_teid.to_be_bytes()).unwrap();
        assert_eq!(uplink_slot(&up), slot);
        // Everything but the slot is the value the control plane sent.
        assert_eq!(
            sb_engine::lte::without_local_slot(&dp.fib.lookup(&v4.key()).unwrap()),
            v4.value()
        );
        assert_eq!(dp.usage(v4.ul_teid), Some(Usage::default()));
        assert_eq!(dp.usage(plain.ul_teid), None);
        // A modification keeps the slot (and its counts).
        let faster = session(
            v4.ue,
            Policy {
                dl_mbr_kbps: 20_000,
                ..p
            },
        );
        dp.fib_insert(&faster.key(), &faster.value()).unwrap();
        assert_eq!(local_slot(&dp.fib.lookup(&v4.key()).unwrap()), slot);
        assert_eq!(dp.policies.stats().slots, 1);
        // Removal: the slot stays until the session's last entry is gone.
        let t0 = Instant::now();
        dp.fib_remove_later(Bytes::from_slice(&v4.key()), t0);
        dp.remove_due(t0 + REMOVAL_GRACE + Duration::from_millis(1));
        assert!(dp.usage(v4.ul_teid).is_some());
        dp.fib_remove_later(Bytes::from_slice(&v6.key()), t0);
        dp.remove_due(t0 + REMOVAL_GRACE + Duration::from_millis(1));
        assert_eq!(dp.usage(v4.ul_teid), None);
        assert_eq!(dp.take_final_usage(), vec![(v4.ul_teid, Usage::default())]);
        assert_eq!(dp.policies.stats().slots, 0);
    }

    /// A change of tunnel with SNDEM queues an End Marker on the old tunnel; one without, or
    /// one that keeps the tunnel, does not.
    #[test]
    fn a_tunnel_change_with_sndem_queues_an_end_marker() {
        let mut dp = DataPlane::new(
            empty(KEY_BYTES, VALUE_BYTES, 100),
            empty(4, UPLINK_VALUE_BYTES, 100),
        );
        let count = Policy {
            count: true,
            ..Policy::default()
        };
        let a = session(IpAddr::V4(Ipv4Addr::new(100, 64, 1, 1)), count);
        dp.fib_insert(&a.key(), &a.value()).unwrap();
        let b = Tunnel {
            teid: 0x200,
            enb: Ipv4Addr::new(10, 2, 0, 10),
            policy: Policy {
                end_marker: true,
                ..count
            },
            ..a
        };
        dp.fib_insert(&b.key(), &b.value()).unwrap();
        assert_eq!(dp.policies.stats().end_markers_queued, 1);
        // Sent once the (one) worker has come round its loop.
        assert_eq!(dp.policies.take_end_marker(1), None);
        dp.policies.quiescent(0);
        let m = dp.policies.take_end_marker(2).unwrap();
        assert_eq!((m.teid, m.gnb, m.node), (0x100, a.enb, 1));
        dp.fib_insert(&b.key(), &b.value()).unwrap();
        let c = Tunnel {
            teid: 0x300,
            policy: count,
            ..b
        };
        dp.fib_insert(&c.key(), &c.value()).unwrap();
        assert_eq!(dp.policies.stats().end_markers_queued, 0);
    }

    /// A full table refuses the install and leaves what was there, slot references included.
    #[test]
    fn a_refused_install_gives_its_slot_back() {
        let mut dp = DataPlane::new(
            empty(KEY_BYTES, VALUE_BYTES, 100),
            empty(4, UPLINK_VALUE_BYTES, 100),
        );
        let count = Policy {
            count: true,
            ..Policy::default()
        };
        let mut refused = 0;
        for i in 0..400u32 {
            let t = Tunnel {
                ue: IpAddr::V4(Ipv4Addr::from(0x6440_0000 + i)),
                ul_teid: 0x0100_0000 + i,
                ..session(IpAddr::V4(Ipv4Addr::LOCALHOST), count)
            };
            if dp.fib_insert(&t.key(), &t.value()).is_err() {
                refused += 1;
                assert_eq!(dp.usage(t.ul_teid), None, "no slot kept for {t:?}");
            }
        }
        assert!(refused > 0);
        assert_eq!(dp.policies.stats().slots, dp.fib.len());
    }
}
