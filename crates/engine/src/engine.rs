//! The engine: one node's data path over batches, for any of the three architectures.

use crate::app::{Access, App, ErrorReply};
use crate::counters::{Counters, Drop, PortId};
use crate::fabric::{self, Kind, Shim};
use crate::fib::Fib;
use crate::prefetch::AHEAD;
use sb_common::{hash128, KeyHash};
use sb_packet::PacketBatch;
use sb_setsep::{GptLookup, LiveSetSep, SetSep};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// How the cluster splits its work (the paper's three designs, on identical code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Every node holds the GPT of all keys and the FIB entries of the flows it handles; the
    /// ingress node sends a packet to its handling node (at most one fabric crossing), which
    /// looks it up and transmits it.
    ScaleBricks,
    /// Every node holds the whole FIB; the ingress node looks up, applies the action and sends
    /// the result to the egress node, which transmits it without a lookup.
    FullDup,
    /// Each node holds the FIB entries whose key hashes to it; the ingress node sends the packet
    /// to that indirection node, which looks up and sends it on to the egress node (up to two
    /// crossings).
    HashPart,
}

impl Arch {
    /// The three, in the order reports list them.
    pub const ALL: [Arch; 3] = [Arch::ScaleBricks, Arch::FullDup, Arch::HashPart];

    /// The name on the command line and in reports: `scalebricks`, `full-dup`, `hash-part`.
    pub fn label(self) -> &'static str {
        match self {
            Arch::ScaleBricks => "scalebricks",
            Arch::FullDup => "full-dup",
            Arch::HashPart => "hash-part",
        }
    }

    /// The most fabric crossings a packet may make.
    pub fn max_hops(self) -> u8 {
        match self {
            Arch::ScaleBricks | Arch::FullDup => 1,
            Arch::HashPart => 2,
        }
    }

    /// Which node holds the FIB entry of a key with hash `h` and egress node `egress`:
    /// `None` for full duplication (every node).
    pub fn fib_holder(self, h: KeyHash, egress: u16, nodes: u16) -> Option<u16> {
        match self {
            Arch::ScaleBricks => Some(egress),
            Arch::FullDup => None,
            Arch::HashPart => Some(indirection_node(h, nodes)),
        }
    }
}

impl std::str::FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Arch, String> {
        Arch::ALL
            .into_iter()
            .find(|a| a.label() == s)
            .ok_or_else(|| format!("unknown architecture {s:?} (scalebricks, full-dup, hash-part)"))
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Hash partitioning's indirection node of a key: a multiply-shift of a mix of both hash
/// halves, independent of the bits the FIB's bucket index uses (the top of `lo`).
#[inline]
pub fn indirection_node(h: KeyHash, nodes: u16) -> u16 {
    let x = (h.hi ^ h.lo.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((u128::from(x) * u128::from(nodes)) >> 64) as u16
}

/// A port's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAddr {
    /// This node's MAC on the port.
    pub mac: [u8; 6],
    /// The next hop's MAC (the router on `inet`, the eNodeB side on `ran`).
    pub peer_mac: [u8; 6],
    /// This node's IPv4 address on the port, answered for in ARP.
    pub ip: Option<Ipv4Addr>,
}

/// What one node's engine needs to know about the cluster.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The architecture.
    pub arch: Arch,
    /// This node's index.
    pub node: u16,
    /// Every node's fabric MAC, by index (the cluster size is its length).
    pub fabric_macs: Vec<[u8; 6]>,
    /// The `inet` port.
    pub inet: PortAddr,
    /// The `ran` port.
    pub ran: PortAddr,
    /// The key-hash seed shared by the GPT and the FIB (`hash128(key, seed)` once per packet).
    pub seed: u64,
}

/// The output batches of one [`Engine::process`] call, one per port. The driver transmits and
/// empties them after each call. The `ran` and `fabric` batches hold twice the received
/// batch: a downlink packet cut into outer IPv4 fragments ([`App::split`]) leaves as two
/// frames or more.
pub struct Outputs {
    /// To `inet`.
    pub inet: PacketBatch,
    /// To `ran`.
    pub ran: PacketBatch,
    /// To `fabric`.
    pub fabric: PacketBatch,
}

impl Outputs {
    /// Three batches of buffers of `buf_size` bytes (the size of the receive batches: frames
    /// move between batches of one size) for received batches of `capacity` frames: `capacity`
    /// to `inet`, `2 * capacity` to `ran` and to `fabric` (room for every frame cut in two).
    pub fn new(capacity: usize, buf_size: usize) -> Outputs {
        let b = |n| PacketBatch::with_buf_size(n, buf_size);
        Outputs {
            inet: b(capacity),
            ran: b(2 * capacity),
            fabric: b(2 * capacity),
        }
    }

    /// The batch of `port`.
    pub fn get_mut(&mut self, port: PortId) -> &mut PacketBatch {
        match port {
            PortId::Inet => &mut self.inet,
            PortId::Ran => &mut self.ran,
            PortId::Fabric => &mut self.fabric,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dest {
    Drop(Drop),
    /// Needs the local FIB stage.
    Local,
    /// Out of a port with this node's MACs.
    Out(PortId),
    /// Back out of a port as it is (an answer with its MACs set).
    Reply(PortId),
    Fabric {
        to: u16,
        kind: Kind,
    },
}

/// The GPT an engine reads: any [`GptLookup`] table, shared by the workers. A table that never
/// changes ([`SetSep`]), the live table the control plane changes while the workers read it
/// ([`LiveSetSep`]: per-block versions, about 0.75x the lookup rate of the fixed table in
/// `scalebricks-bench gpt`'s live rows, so a node without a control plane keeps the fixed one),
/// or a mirror of the XDP fast path's maps (`sb_xdp::GptImage`). One virtual call per batch.
#[derive(Clone)]
pub struct Gpt(Arc<dyn GptLookup + Send + Sync>);

impl Gpt {
    /// The engine's view of `table`.
    pub fn new(table: Arc<dyn GptLookup + Send + Sync>) -> Gpt {
        Gpt(table)
    }

    /// The table.
    pub fn table(&self) -> &(dyn GptLookup + Send + Sync) {
        &*self.0
    }

    /// Bits per value (the nodes it can name).
    pub fn value_bits(&self) -> u8 {
        self.0.value_bits()
    }

    /// The batched lookup of precomputed hashes.
    #[inline]
    pub fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
        self.0.lookup_batch_hashes(hs, out)
    }

    /// The value of one key (hashing it; for tools, not the data path).
    pub fn lookup(&self, key: &[u8]) -> u16 {
        self.0.lookup(key)
    }

    /// The table's statistics.
    pub fn stats(&self) -> sb_setsep::Stats {
        self.0.stats()
    }

    /// Keys the table was built with (a live table's count is the build's).
    pub fn len(&self) -> u64 {
        self.0.len()
    }

    /// True when the table holds no keys.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<SetSep> for Gpt {
    fn from(g: SetSep) -> Gpt {
        Gpt(Arc::new(g))
    }
}

impl From<Arc<SetSep>> for Gpt {
    fn from(g: Arc<SetSep>) -> Gpt {
        Gpt(g)
    }
}

impl From<Arc<LiveSetSep>> for Gpt {
    fn from(g: Arc<LiveSetSep>) -> Gpt {
        Gpt(g)
    }
}

/// The error messages an engine sends per second by default ([`Engine::set_error_rate`]).
pub const ERROR_RATE: u32 = 100;
/// The burst of error messages an engine sends at once by default (and before its clock
/// moves).
pub const ERROR_BURST: u32 = 100;

/// A token bucket over the time the driver passes in ([`Engine::set_clock`]), in nanotokens.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    per_sec: u64,
    cap: u64,
    level: u64,
    last_ns: u64,
}

impl Bucket {
    const ONE: u64 = 1_000_000_000;

    fn new(per_sec: u32, burst: u32) -> Bucket {
        let cap = u64::from(burst.max(1)) * Self::ONE;
        Bucket {
            per_sec: u64::from(per_sec),
            cap,
            level: cap,
            last_ns: 0,
        }
    }

    fn advance(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        // dt * per_sec tokens per 1e9 ns, i.e. dt * per_sec nanotokens.
        let add = u128::from(dt) * u128::from(self.per_sec);
        self.level = (u128::from(self.level) + add).min(u128::from(self.cap)) as u64;
    }

    fn take(&mut self) -> bool {
        if self.level >= Self::ONE {
            self.level -= Self::ONE;
            true
        } else {
            false
        }
    }
}

/// One node's engine: given a batch that arrived on a port, it fills the output batches.
/// Sans-IO: no sockets, threads or clocks; the driver passes the time in
/// ([`Engine::set_clock`]) for the rate limit of error messages. One per worker thread.
pub struct Engine<A: App> {
    cfg: NodeConfig,
    nodes: u16,
    gpt: Option<Gpt>,
    fib: Box<dyn Fib>,
    app: A,
    counters: Counters,
    kb: usize,
    vb: usize,
    // Per-frame scratch, indexed by position in the received batch.
    keys: Vec<u8>,
    hashes: Vec<KeyHash>,
    dest: Vec<Dest>,
    hops: Vec<u8>,
    ingress: Vec<u16>,
    // Gathered for one batched lookup.
    idx: Vec<usize>,
    g_keys: Vec<u8>,
    g_hashes: Vec<KeyHash>,
    g_nodes: Vec<u16>,
    g_values: Vec<u8>,
    g_found: Vec<bool>,
    /// The access port's results ([`App::access_batch`]).
    g_access: Vec<Result<Access, Drop>>,
    arp_buf: [u8; 128],
    errors: Bucket,
    /// Frames the application released ([`App::take_released`]), sized like the outputs.
    released: Option<PacketBatch>,
    /// The pieces of the frame being emitted ([`App::split`]), sized like the received batch.
    pieces: Option<PacketBatch>,
}

/// The most pieces a frame is cut into besides itself ([`App::split`]): a 9000-byte frame into
/// 576-byte IPv4 fragments is 17.
const MAX_PIECES: usize = 32;

/// Why an engine could not be made.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// ScaleBricks needs a GPT.
    #[error("the scalebricks architecture needs a GPT")]
    NoGpt,
    /// The FIB's key or value size is not the application's.
    #[error("FIB keys/values of {fib_key}/{fib_value} bytes, the application uses {app_key}/{app_value}")]
    Sizes {
        /// The FIB's key size.
        fib_key: usize,
        /// The FIB's value size.
        fib_value: usize,
        /// The application's key size.
        app_key: usize,
        /// The application's value size.
        app_value: usize,
    },
    /// This node's index is not below the cluster size, or the cluster is empty or too large.
    #[error("node {node} in a cluster of {nodes} nodes")]
    Node {
        /// The index.
        node: u16,
        /// The cluster size.
        nodes: usize,
    },
    /// The GPT stores too few value bits to name every node.
    #[error("the GPT stores {bits} value bits, {nodes} nodes need more")]
    GptBits {
        /// Value bits of the GPT.
        bits: u8,
        /// Nodes.
        nodes: usize,
    },
}

impl<A: App> Engine<A> {
    /// An engine for batches of up to `max_batch` frames.
    pub fn new(
        cfg: NodeConfig,
        gpt: Option<Gpt>,
        fib: Box<dyn Fib>,
        app: A,
        max_batch: usize,
    ) -> Result<Engine<A>, EngineError> {
        let nodes = cfg.fabric_macs.len();
        if nodes == 0 || nodes > usize::from(u16::MAX) || usize::from(cfg.node) >= nodes {
            return Err(EngineError::Node {
                node: cfg.node,
                nodes,
            });
        }
        if cfg.arch == Arch::ScaleBricks {
            let g = gpt.as_ref().ok_or(EngineError::NoGpt)?;
            if (1usize << g.value_bits()) < nodes {
                return Err(EngineError::GptBits {
                    bits: g.value_bits(),
                    nodes,
                });
            }
        }
        let (kb, vb) = (app.key_bytes(), app.value_bytes());
        if fib.key_bytes() != kb || fib.value_bytes() != vb {
            return Err(EngineError::Sizes {
                fib_key: fib.key_bytes(),
                fib_value: fib.value_bytes(),
                app_key: kb,
                app_value: vb,
            });
        }
        let n = max_batch.max(1);
        Ok(Engine {
            nodes: nodes as u16,
            cfg,
            gpt,
            fib,
            app,
            counters: Counters::default(),
            kb,
            vb,
            keys: vec![0; n * kb],
            hashes: vec![KeyHash::default(); n],
            dest: vec![Dest::Local; n],
            hops: vec![0; n],
            ingress: vec![0; n],
            idx: Vec::with_capacity(n),
            g_keys: vec![0; n * kb],
            g_hashes: vec![KeyHash::default(); n],
            g_nodes: vec![0; n],
            g_values: vec![0; n * vb],
            g_found: vec![false; n],
            g_access: vec![Err(Drop::NoRoom); n],
            arp_buf: [0; 128],
            errors: Bucket::new(ERROR_RATE, ERROR_BURST),
            released: None,
            pieces: None,
        })
    }

    /// The time now, in nanoseconds from a fixed origin (monotonic) that every worker of the
    /// node shares: the error messages' token bucket refills with it, and the application's
    /// (the policies' MBR buckets, shared by the workers, [`crate::policy`]). A driver calls
    /// it once per loop; an engine whose clock never moves sends at most its burst of error
    /// messages.
    pub fn set_clock(&mut self, now_ns: u64) {
        self.errors.advance(now_ns);
        self.app.set_clock(now_ns);
    }

    /// What the worker does between batches, once per loop, with the outputs of its previous
    /// batches already transmitted: the application learns that the worker holds no frame
    /// ([`App::poll`]), sends what it sends of its own accord out of the access port (End
    /// Markers, [`App::take_access_frames`]) and runs the frames it released (a session's
    /// buffered downlink, [`App::take_released`]) through the downstream path, ahead of what
    /// the worker receives next. The driver transmits `out` afterwards as after
    /// [`process`](Self::process). Counted: `end_markers` (and `tx` on `ran`), `released`
    /// (not `rx`: they were received before), `from_cp` (the CP function's frames to UEs,
    /// [`crate::policy::Policies::queue_access_frame`]).
    pub fn poll(&mut self, out: &mut Outputs) {
        self.app.poll();
        let ran = &mut out.ran;
        let before = ran.len();
        let n = self.app.take_access_frames(ran);
        for i in before..ran.len() {
            let f = ran.get_mut(i);
            f[..6].copy_from_slice(&self.cfg.ran.peer_mac);
            f[6..12].copy_from_slice(&self.cfg.ran.mac);
        }
        let cp = self.app.take_from_cp();
        self.counters.from_cp += cp;
        self.counters.end_markers += n as u64 - cp;
        self.counters.ports[PortId::Ran as usize].tx += n as u64;
        let buf_size = out.inet.buf_size();
        let mut rx = match self.released.take() {
            Some(b) if b.buf_size() == buf_size => b,
            _ => PacketBatch::with_buf_size(self.dest.len(), buf_size),
        };
        rx.clear();
        let n = self.app.take_released(&mut rx);
        if n > 0 {
            self.counters.released += n as u64;
            self.run_frames(PortId::Inet, &mut rx, out);
            self.app.released_done();
        }
        self.released = Some(rx);
    }

    /// At most `per_sec` error messages (ICMP errors, GTP-U Error Indications) a second,
    /// `burst` at once (default [`ERROR_RATE`], [`ERROR_BURST`]); the bucket starts full.
    pub fn set_error_rate(&mut self, per_sec: u32, burst: u32) {
        let last = self.errors.last_ns;
        self.errors = Bucket::new(per_sec, burst);
        self.errors.last_ns = last;
    }

    /// The configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// The counters so far.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The FIB.
    pub fn fib(&self) -> &dyn Fib {
        &*self.fib
    }

    /// The GPT, if the architecture has one.
    pub fn gpt(&self) -> Option<&Gpt> {
        self.gpt.as_ref()
    }

    /// The application.
    pub fn app(&self) -> &A {
        &self.app
    }

    /// The application, to change (attach its policies, for one).
    pub fn app_mut(&mut self) -> &mut A {
        &mut self.app
    }

    /// Runs every frame of `rx` (received on `port`) to completion: each is moved to one of
    /// `out`'s batches or dropped and counted. `rx` is empty afterwards. A batch larger than
    /// the engine's `max_batch` grows its per-frame arrays once (the only allocation after
    /// `new`).
    pub fn process(&mut self, port: PortId, rx: &mut PacketBatch, out: &mut Outputs) {
        if rx.len() > self.dest.len() {
            self.reserve(rx.len());
        }
        self.run(port, rx, out);
    }

    /// Sizes the per-frame arrays for batches of `n` frames.
    fn reserve(&mut self, n: usize) {
        let (kb, vb) = (self.kb, self.vb);
        self.keys.resize(n * kb, 0);
        self.hashes.resize(n, KeyHash::default());
        self.dest.resize(n, Dest::Local);
        self.hops.resize(n, 0);
        self.ingress.resize(n, 0);
        self.idx.reserve(n.saturating_sub(self.idx.capacity()));
        self.g_keys.resize(n * kb, 0);
        self.g_hashes.resize(n, KeyHash::default());
        self.g_nodes.resize(n, 0);
        self.g_values.resize(n * vb, 0);
        self.g_found.resize(n, false);
        self.g_access.resize(n, Err(Drop::NoRoom));
    }

    fn run(&mut self, port: PortId, rx: &mut PacketBatch, out: &mut Outputs) {
        let n = rx.len();
        if n == 0 {
            return;
        }
        self.counters.ports[port as usize].rx += n as u64;
        self.run_frames(port, rx, out);
    }

    /// [`run`](Self::run) without counting the frames received.
    fn run_frames(&mut self, port: PortId, rx: &mut PacketBatch, out: &mut Outputs) {
        if rx.len() > self.dest.len() {
            self.reserve(rx.len());
        }
        match port {
            PortId::Inet => self.on_inet(rx),
            PortId::Fabric => self.on_fabric(rx),
            PortId::Ran => self.on_ran(rx),
        }
        self.error_replies(port, rx);
        self.emit(port, rx, out);
        rx.clear();
    }

    /// Answers an ARP request for `port`'s address in place; true if it was one.
    fn arp(&mut self, rx: &mut PacketBatch, i: usize, port: PortAddr) -> bool {
        let Some(ip) = port.ip else {
            return false;
        };
        let f = rx.get(i);
        if f.len() < 14 || f[12..14] != [0x08, 0x06] {
            return false;
        }
        let Ok(Some(n)) = sb_wire::answer_request(
            f,
            sb_wire::EthernetAddress(port.mac),
            &[ip],
            &mut self.arp_buf,
        ) else {
            return false;
        };
        let (buf, start) = rx.buffer_mut(i);
        buf[start..start + n].copy_from_slice(&self.arp_buf[..n]);
        rx.set_range(i, start, n);
        self.counters.arp_replies += 1;
        true
    }

    /// Extracts the key of frame `i` (a full parse at ingress, the application's trusted
    /// path for lookup frames from the fabric) and hashes it; `Dest::Local` or a drop.
    #[inline]
    fn key_of(&mut self, rx: &mut PacketBatch, i: usize, from_fabric: bool) -> Dest {
        let kb = self.kb;
        let (frame, meta) = {
            let m = *rx.meta(i);
            (rx.get(i), m)
        };
        let mut meta = meta;
        let key = &mut self.keys[i * kb..(i + 1) * kb];
        let r = if from_fabric {
            self.app.fabric_key(frame, key, &mut meta)
        } else {
            self.app.downstream_key(frame, key, &mut meta)
        };
        // Kept on a drop too: an error reply reads the offsets.
        *rx.meta_mut(i) = meta;
        match r {
            Ok(()) => {
                self.hashes[i] = hash128(key, self.cfg.seed);
                Dest::Local
            }
            Err(d) => Dest::Drop(d),
        }
    }

    fn on_inet(&mut self, rx: &mut PacketBatch) {
        let n = rx.len();
        let me = self.cfg.node;
        for i in 0..n {
            self.hops[i] = 0;
            self.ingress[i] = me;
            self.dest[i] = if self.arp(rx, i, self.cfg.inet) {
                Dest::Reply(PortId::Inet)
            } else if is_group_frame(rx.get(i)) {
                // Broadcast and multicast never reach the GPT: no other node sees them.
                Dest::Drop(Drop::Multicast)
            } else {
                self.key_of(rx, i, false)
            };
        }
        self.route(rx);
    }

    /// The frames marked `Local` from the external port (or made by the application for the
    /// downstream path): which node holds each key's FIB entry, then the FIB stage.
    fn route(&mut self, rx: &mut PacketBatch) {
        let n = rx.len();
        let me = self.cfg.node;
        match self.cfg.arch {
            Arch::FullDup => {}
            Arch::HashPart => {
                for i in 0..n {
                    if self.dest[i] == Dest::Local {
                        let to = indirection_node(self.hashes[i], self.nodes);
                        if to != me {
                            self.dest[i] = Dest::Fabric {
                                to,
                                kind: Kind::Lookup,
                            };
                        }
                    }
                }
            }
            Arch::ScaleBricks => {
                self.idx.clear();
                for i in 0..n {
                    if self.dest[i] == Dest::Local {
                        self.g_hashes[self.idx.len()] = self.hashes[i];
                        self.idx.push(i);
                    }
                }
                let m = self.idx.len();
                let gpt = self.gpt.as_ref().expect("checked in new");
                gpt.lookup_batch_hashes(&self.g_hashes[..m], &mut self.g_nodes[..m]);
                for (j, &i) in self.idx.iter().enumerate() {
                    let to = self.g_nodes[j];
                    self.dest[i] = if to == me {
                        Dest::Local
                    } else if to < self.nodes {
                        Dest::Fabric {
                            to,
                            kind: Kind::Lookup,
                        }
                    } else {
                        Dest::Drop(Drop::UnknownFlow)
                    };
                }
            }
        }
        self.fib_stage(rx);
    }

    fn on_fabric(&mut self, rx: &mut PacketBatch) {
        let arch = self.cfg.arch;
        for i in 0..rx.len() {
            let shim = match fabric::parse(rx.get(i)) {
                Ok(s) => s,
                Err(fabric::ShimError::EtherType(0x0800 | 0x86dd | 0x0806)) => {
                    self.dest[i] = Dest::Drop(Drop::Host);
                    continue;
                }
                Err(_) => {
                    self.dest[i] = Dest::Drop(Drop::InvalidFabric);
                    continue;
                }
            };
            let valid = matches!(
                (arch, shim.kind),
                (Arch::ScaleBricks, Kind::Lookup)
                    | (Arch::FullDup, Kind::Transmit)
                    | (Arch::HashPart, _)
            ) && shim.hops >= 1
                && shim.hops <= arch.max_hops()
                && shim.ingress < self.nodes;
            if !valid {
                self.dest[i] = Dest::Drop(Drop::InvalidFabric);
                continue;
            }
            let len = rx.get(i).len();
            let (buf, start) = rx.buffer_mut(i);
            let s = fabric::pop(buf, start);
            rx.set_range(i, s, len - fabric::SHIM_LEN);
            self.hops[i] = shim.hops;
            self.ingress[i] = shim.ingress;
            self.dest[i] = match shim.kind {
                Kind::Transmit => Dest::Out(PortId::Ran),
                Kind::Lookup => self.key_of(rx, i, true),
            };
        }
        self.fib_stage(rx);
    }

    /// ARP answered here; every other frame goes to the application in one batch
    /// ([`App::access_batch`]: the LTE application's uplink TEID lookups are batched).
    fn on_ran(&mut self, rx: &mut PacketBatch) {
        let me = self.cfg.node;
        self.idx.clear();
        for i in 0..rx.len() {
            self.hops[i] = 0;
            self.ingress[i] = me;
            if self.arp(rx, i, self.cfg.ran) {
                self.dest[i] = Dest::Reply(PortId::Ran);
            } else {
                self.idx.push(i);
            }
        }
        let m = self.idx.len();
        if m == 0 {
            return;
        }
        let results = &mut self.g_access[..m];
        self.app.access_batch(rx, &self.idx, results);
        for (&i, r) in self.idx.iter().zip(results.iter()) {
            self.dest[i] = match *r {
                Ok(Access::ToExternal) => {
                    self.counters.upstream += 1;
                    Dest::Out(PortId::Inet)
                }
                Ok(Access::Reply) => {
                    self.counters.echo_replies += 1;
                    Dest::Reply(PortId::Ran)
                }
                Err(d) => Dest::Drop(d),
            };
        }
    }

    /// The batched FIB lookup of every frame marked `Local`, then the action and the next hop.
    fn fib_stage(&mut self, rx: &mut PacketBatch) {
        let (kb, vb) = (self.kb, self.vb);
        let n = rx.len();
        self.idx.clear();
        self.idx
            .extend((0..n).filter(|&i| self.dest[i] == Dest::Local));
        let m = self.idx.len();
        if m == 0 {
            return;
        }
        if m == n {
            // Every frame is looked up here (full duplication's ingress, a batch of lookup
            // frames from the fabric): the keys and hashes are already contiguous.
            self.fib.lookup_batch(
                &self.keys[..m * kb],
                &self.hashes[..m],
                &mut self.g_values[..m * vb],
                &mut self.g_found[..m],
            );
        } else {
            for (j, &i) in self.idx.iter().enumerate() {
                self.g_keys[j * kb..(j + 1) * kb].copy_from_slice(&self.keys[i * kb..(i + 1) * kb]);
                self.g_hashes[j] = self.hashes[i];
            }
            self.fib.lookup_batch(
                &self.g_keys[..m * kb],
                &self.g_hashes[..m],
                &mut self.g_values[..m * vb],
                &mut self.g_found[..m],
            );
        }
        // The application's prefetches (the policy slots: a line each) go out `AHEAD` frames
        // ahead of the action rather than all at once: a burst of m prefetches waits for free
        // miss buffers (the FIB's own misses hold many) and stalls the core.
        for j in 0..m.min(AHEAD) {
            if self.g_found[j] {
                self.app.prefetch(&self.g_values[j * vb..(j + 1) * vb]);
            }
        }
        let me = self.cfg.node;
        let miss = if self.cfg.arch == Arch::ScaleBricks {
            Drop::FibMissAfterGpt
        } else {
            Drop::UnknownFlow
        };
        for j in 0..m {
            let a = j + AHEAD;
            if a < m && self.g_found[a] {
                self.app.prefetch(&self.g_values[a * vb..(a + 1) * vb]);
            }
            let i = self.idx[j];
            if !self.g_found[j] {
                self.dest[i] = Dest::Drop(miss);
                continue;
            }
            let value = &self.g_values[j * vb..(j + 1) * vb];
            let egress = self.app.egress_node(value);
            if let Err(d) = self.app.apply(rx, i, value) {
                self.dest[i] = Dest::Drop(d);
                continue;
            }
            self.dest[i] = if egress == me {
                Dest::Out(PortId::Ran)
            } else if egress >= self.nodes {
                Dest::Drop(Drop::UnknownFlow)
            } else if self.hops[i] >= self.cfg.arch.max_hops() {
                Dest::Drop(Drop::TooManyHops)
            } else {
                Dest::Fabric {
                    to: egress,
                    kind: Kind::Transmit,
                }
            };
        }
        // The action's second half, once the whole batch was applied.
        for j in 0..m {
            let i = self.idx[j];
            if matches!(self.dest[i], Dest::Out(_) | Dest::Fabric { .. }) {
                let value = &self.g_values[j * vb..(j + 1) * vb];
                if let Err(d) = self.app.admit(rx, i, value) {
                    self.dest[i] = Dest::Drop(d);
                }
            }
        }
    }

    /// Frames dropped for a reason the application answers become error messages, while the
    /// rate limit allows: the drop is counted here, the message goes where the application
    /// says (downstream ones through [`route`](Self::route)).
    fn error_replies(&mut self, port: PortId, rx: &mut PacketBatch) {
        let mut downstream = false;
        for i in 0..rx.len() {
            let Dest::Drop(why) = self.dest[i] else {
                continue;
            };
            if !self.app.answers(why) {
                continue;
            }
            if !self.errors.take() {
                self.counters.errors_rate_limited += 1;
                continue;
            }
            let Some(r) = self.app.error_reply(rx, i, port, why) else {
                continue;
            };
            self.counters.drop(port, why);
            self.dest[i] = match r {
                ErrorReply::External => {
                    self.counters.icmp_errors += 1;
                    Dest::Out(PortId::Inet)
                }
                ErrorReply::Access => {
                    self.counters.error_indications += 1;
                    Dest::Reply(PortId::Ran)
                }
                ErrorReply::Downstream => {
                    self.counters.icmp_errors += 1;
                    self.hops[i] = 0;
                    self.ingress[i] = self.cfg.node;
                    downstream = true;
                    self.key_of(rx, i, false)
                }
            };
        }
        if downstream {
            self.route(rx);
        }
    }

    /// Moves every frame that is not dropped to its output batch (MACs set, or the fabric
    /// shim pushed). A frame for the access port (here or over the fabric, to be transmitted
    /// there) that the application cuts into pieces ([`App::split`]: outer IPv4 fragments)
    /// leaves as those pieces, one after the other, or, when the output batch has no room for
    /// them all, not at all ([`Drop::NoRoom`]).
    fn emit(&mut self, port: PortId, rx: &mut PacketBatch, out: &mut Outputs) {
        let mut pieces = match self.pieces.take() {
            Some(b) if b.buf_size() == rx.buf_size() => b,
            _ => PacketBatch::with_buf_size(MAX_PIECES, rx.buf_size()),
        };
        for i in 0..rx.len() {
            let d = self.dest[i];
            let to_port = match d {
                Dest::Drop(why) => {
                    self.counters.drop(port, why);
                    continue;
                }
                Dest::Local => unreachable!("every local frame went through the FIB stage"),
                Dest::Reply(p) => p,
                Dest::Out(p) => p,
                Dest::Fabric { .. } => PortId::Fabric,
            };
            pieces.clear();
            let cut = matches!(
                d,
                Dest::Out(PortId::Ran)
                    | Dest::Fabric {
                        kind: Kind::Transmit,
                        ..
                    }
            );
            let extra = if cut {
                match self.app.split(rx, i, &mut pieces) {
                    Ok(n) => n,
                    Err(why) => {
                        self.counters.drop(port, why);
                        continue;
                    }
                }
            } else {
                0
            };
            if out.get_mut(to_port).room() < 1 + extra {
                self.counters.drop(port, Drop::NoRoom);
                continue;
            }
            if !self.leave(d, i, rx, i, out.get_mut(to_port)) {
                self.counters.drop(port, Drop::NoRoom);
                continue;
            }
            self.counters.ports[to_port as usize].tx += 1;
            if extra > 0 {
                for k in 0..extra {
                    if self.leave(d, i, &mut pieces, k, out.get_mut(to_port)) {
                        self.counters.ports[to_port as usize].tx += 1;
                    } else {
                        self.counters.drop(port, Drop::NoRoom);
                    }
                }
                self.counters.fragmented += 1;
                self.counters.fragments += 1 + extra as u64;
            }
            match d {
                Dest::Fabric { .. } => self.counters.ports[port as usize].to_fabric += 1,
                Dest::Out(PortId::Ran) => {
                    // Per frame: the fragments of a packet cut here count as those cut at
                    // another node and sent over the fabric do at their egress.
                    self.counters.crossings[usize::from(self.hops[i].min(3))] += 1 + extra as u64
                }
                _ => {}
            }
        }
        pieces.clear();
        self.pieces = Some(pieces);
    }
    /// Frame `k` of `batch` (frame `i` of the received batch, or one of its pieces) leaves for
    /// `dest`: its MACs set (out of a port), the fabric shim pushed (to another node) or as it
    /// is (a reply), then moved to `dst`. False if it could not be (no headroom for the shim,
    /// `dst` full).
    fn leave(
        &self,
        dest: Dest,
        i: usize,
        batch: &mut PacketBatch,
        k: usize,
        dst: &mut PacketBatch,
    ) -> bool {
        match dest {
            Dest::Out(p) => {
                let a = match p {
                    PortId::Inet => self.cfg.inet,
                    _ => self.cfg.ran,
                };
                let f = batch.get_mut(k);
                f[..6].copy_from_slice(&a.peer_mac);
                f[6..12].copy_from_slice(&a.mac);
            }
            Dest::Fabric { to, kind } => {
                let shim = Shim {
                    kind,
                    hops: self.hops[i] + 1,
                    ingress: self.ingress[i],
                };
                let len = batch.get(k).len();
                let (buf, start) = batch.buffer_mut(k);
                let to_mac = self.cfg.fabric_macs[usize::from(to)];
                let from = self.cfg.fabric_macs[usize::from(self.cfg.node)];
                match fabric::push(buf, start, len, to_mac, from, shim) {
                    Some(s) => {
                        batch.set_range(k, s, len + fabric::SHIM_LEN);
                    }
                    None => return false,
                }
            }
            Dest::Reply(_) => {}
            Dest::Drop(_) | Dest::Local => return false,
        }
        batch.transfer(k, dst)
    }
}

/// True for a frame to a group (broadcast or multicast) MAC that is not ARP.
#[inline]
fn is_group_frame(f: &[u8]) -> bool {
    f.len() >= 14 && f[0] & 1 != 0 && f[12..14] != [0x08, 0x06]
}
