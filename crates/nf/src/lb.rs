//! An L4 load balancer: clients reach a service at a virtual address and port (VIP); each flow
//! is sent to one backend for its whole life.
//!
//! - **Translation: the destination is rewritten** (DNAT), not encapsulated: the paper's value
//!   is a backend's ⟨address, port⟩, the packet keeps its length (no MTU question, no
//!   headroom), and the backend needs no decapsulation. The cost is that answers must come
//!   back through the load balancer: the access path rewrites a backend's source back to the
//!   VIP ([`Lb::add_service`] gives the map, kept by every instance). Encapsulation
//!   (IP-in-IP, direct server return) would avoid that return path; not done.
//! - **Inbound** (`inet` -> `ran`, [`App::apply`]): the FIB is keyed by the client's 5-tuple to
//!   the VIP; its value ([`Backend::value`]) names the backend address, port and the node whose
//!   access port leads to it. Destination address and port are rewritten, the IPv4 and TCP/UDP
//!   checksums updated incrementally.
//! - **Return** (`ran` -> `inet`, [`App::access`]): a packet from a backend address and port of
//!   a service leaves with the VIP and its port as source; from anything else it is dropped
//!   ([`Drop::UnknownFlow`], [`LbStats::unknown_backend`]).
//! - **Choosing backends** ([`FlowTable`], the control plane's side): a new flow gets the
//!   backend Maglev's lookup table names for it ([`Maglev`], Eisenbud et al., NSDI 2016: each
//!   backend fills the table's slots in its own permutation, round robin, so the slots are
//!   shared evenly and a change of the backend set moves few of them). An established flow
//!   keeps the backend recorded in the table, whatever the backend set becomes, as long as
//!   that backend stays: adding a backend moves no established flow; removing one moves only
//!   its flows (removed from the table, picked again when they next arrive).
//!
//! The engine has no hook for a FIB miss: a new flow's first packets are dropped
//! ([`Drop::UnknownFlow`]) until the control plane inserts [`FlowTable::flow`]'s pick.

use crate::flow::{self, FlowKey, Location, KEY_BYTES};
use crate::{node_of, rewriter, Update};
use sb_engine::{Access, App, Drop};
use sb_io::{Meta, PacketBatch};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// Bytes of a FIB value ([`Backend::value`]).
pub const VALUE_BYTES: usize = 8;

/// A backend, as a FIB value names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Backend {
    /// Its address.
    pub addr: Ipv4Addr,
    /// Its port.
    pub port: u16,
    /// The node whose access port leads to it.
    pub node: u16,
}

impl Backend {
    /// The value: address (4), port (2, big endian), node (2, big endian).
    pub fn value(&self) -> [u8; VALUE_BYTES] {
        let mut v = [0u8; VALUE_BYTES];
        v[..4].copy_from_slice(&self.addr.octets());
        v[4..6].copy_from_slice(&self.port.to_be_bytes());
        v[6..8].copy_from_slice(&self.node.to_be_bytes());
        v
    }

    /// A value's backend (`None` unless [`VALUE_BYTES`] long).
    pub fn from_value(v: &[u8]) -> Option<Backend> {
        let v: &[u8; VALUE_BYTES] = v.try_into().ok()?;
        Some(Backend {
            addr: Ipv4Addr::new(v[0], v[1], v[2], v[3]),
            port: u16::from_be_bytes([v[4], v[5]]),
            node: u16::from_be_bytes([v[6], v[7]]),
        })
    }

    /// The bytes Maglev hashes a backend by (address and port: not the node).
    fn name(&self) -> [u8; 6] {
        let mut n = [0u8; 6];
        n[..4].copy_from_slice(&self.addr.octets());
        n[4..].copy_from_slice(&self.port.to_be_bytes());
        n
    }
}

/// 64-bit FNV-1a with a seed, then a finalizer (splitmix64's): deterministic across runs and
/// machines, as the table's slots must be for every node of the cluster.
fn hash(seed: u64, data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Why a Maglev table could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MaglevError {
    /// The table size is not a prime (each backend's permutation needs a prime size).
    #[error("table size {0} is not a prime")]
    NotPrime(usize),
    /// More backends than slots.
    #[error("{backends} backends for a table of {size} slots")]
    TooManyBackends {
        /// Backends.
        backends: usize,
        /// Slots.
        size: usize,
    },
}

fn is_prime(n: usize) -> bool {
    n >= 2 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0)
}

/// A Maglev lookup table: `size` slots (a prime), each naming a backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Maglev {
    backends: Vec<Backend>,
    slots: Vec<u32>,
}

impl Maglev {
    /// The paper's default table size (65537, a prime).
    pub const DEFAULT_SIZE: usize = 65537;

    /// Fills a table of `size` slots for `backends` (none: every lookup answers `None`).
    pub fn new(backends: &[Backend], size: usize) -> Result<Maglev, MaglevError> {
        if !is_prime(size) {
            return Err(MaglevError::NotPrime(size));
        }
        if backends.len() > size {
            return Err(MaglevError::TooManyBackends {
                backends: backends.len(),
                size,
            });
        }
        let mut slots = vec![u32::MAX; size];
        if !backends.is_empty() {
            let m = size as u64;
            let perm: Vec<(u64, u64)> = backends
                .iter()
                .map(|b| {
                    let offset = hash(1, &b.name()) % m;
                    let skip = hash(2, &b.name()) % (m - 1).max(1) + 1;
                    (offset, skip)
                })
                .collect();
            let mut next = vec![0u64; backends.len()];
            let mut filled = 0;
            'fill: loop {
                for (i, &(offset, skip)) in perm.iter().enumerate() {
                    // A permutation of 0..m (m prime, skip in 1..m): a free slot comes.
                    let mut c = ((offset + next[i] * skip) % m) as usize;
                    while slots[c] != u32::MAX {
                        next[i] += 1;
                        c = ((offset + next[i] * skip) % m) as usize;
                    }
                    slots[c] = i as u32;
                    next[i] += 1;
                    filled += 1;
                    if filled == size {
                        break 'fill;
                    }
                }
            }
        }
        Ok(Maglev {
            backends: backends.to_vec(),
            slots,
        })
    }

    /// The backend of a new flow with `key`.
    pub fn pick(&self, key: &FlowKey) -> Option<Backend> {
        let s = self.slots[(hash(0, &key.0) % self.slots.len() as u64) as usize];
        self.backends.get(s as usize).copied()
    }

    /// The backends.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// How many slots each backend has (in [`backends`](Self::backends) order).
    pub fn shares(&self) -> Vec<usize> {
        let mut n = vec![0; self.backends.len()];
        for &s in &self.slots {
            if let Some(c) = n.get_mut(s as usize) {
                *c += 1;
            }
        }
        n
    }
}

/// The control plane's per-flow table of one service: established flows and their backends,
/// new flows by [`Maglev`].
#[derive(Clone, Debug)]
pub struct FlowTable {
    maglev: Maglev,
    size: usize,
    flows: HashMap<FlowKey, Backend>,
    pending: Vec<Update<FlowKey, [u8; VALUE_BYTES]>>,
}

impl FlowTable {
    /// A table with no flows for `backends`, Maglev of `size` slots.
    pub fn new(backends: &[Backend], size: usize) -> Result<FlowTable, MaglevError> {
        Ok(FlowTable {
            maglev: Maglev::new(backends, size)?,
            size,
            flows: HashMap::new(),
            pending: Vec::new(),
        })
    }

    /// The backend of flow `key`: the recorded one, or for a new flow Maglev's pick, recorded
    /// and queued as an [`Update::Insert`]. `None` without backends.
    pub fn flow(&mut self, key: &FlowKey) -> Option<Backend> {
        if let Some(b) = self.flows.get(key) {
            return Some(*b);
        }
        let b = self.maglev.pick(key)?;
        self.flows.insert(*key, b);
        self.pending.push(Update::Insert(*key, b.value()));
        Some(b)
    }

    /// The recorded backend of `key`, if any.
    pub fn get(&self, key: &FlowKey) -> Option<Backend> {
        self.flows.get(key).copied()
    }

    /// Replaces the backend set: new flows pick among `backends`; established flows keep their
    /// backend if it is still in the set, and the flows of a removed backend are forgotten
    /// (queued as [`Update::Remove`]; picked again when they next arrive).
    pub fn set_backends(&mut self, backends: &[Backend]) -> Result<(), MaglevError> {
        self.maglev = Maglev::new(backends, self.size)?;
        let mut gone: Vec<FlowKey> = self
            .flows
            .iter()
            .filter(|(_, b)| !backends.contains(b))
            .map(|(k, _)| *k)
            .collect();
        gone.sort();
        for k in gone {
            self.flows.remove(&k);
            self.pending.push(Update::Remove(k));
        }
        Ok(())
    }

    /// The Maglev table new flows pick by.
    pub fn maglev(&self) -> &Maglev {
        &self.maglev
    }

    /// Number of established flows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// True without flows.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The updates queued since the last call, in order.
    pub fn take_updates(&mut self) -> Vec<Update<FlowKey, [u8; VALUE_BYTES]>> {
        std::mem::take(&mut self.pending)
    }
}

/// What a load balancer did, per instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbStats {
    /// Client packets sent to their backend.
    pub inbound: u64,
    /// Backend packets sent back to clients as from the VIP.
    pub returned: u64,
    /// Packets on the access port not from a known backend, dropped.
    pub unknown_backend: u64,
    /// Frames dropped by the parser.
    pub unparsed: u64,
}

/// A virtual service: protocol, VIP, port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Vip {
    /// IP protocol (TCP 6 or UDP 17).
    pub protocol: u8,
    /// The virtual address.
    pub addr: Ipv4Addr,
    /// The virtual port.
    pub port: u16,
}

/// The load balancer as an engine application (the data plane: the choice of backends is
/// [`FlowTable`]'s).
#[derive(Clone, Debug, Default)]
pub struct Lb {
    /// (protocol, backend address, backend port) -> the service's VIP.
    backends: HashMap<(u8, Ipv4Addr, u16), Vip>,
    stats: LbStats,
}

impl Lb {
    /// A load balancer with no services.
    pub fn new() -> Lb {
        Lb::default()
    }

    /// Adds a service and its backends (for the return path; a backend serves one service).
    pub fn add_service(&mut self, vip: Vip, backends: &[Backend]) {
        for b in backends {
            self.backends.insert((vip.protocol, b.addr, b.port), vip);
        }
    }

    /// Forgets a backend of the return path.
    pub fn remove_backend(&mut self, protocol: u8, b: &Backend) {
        self.backends.remove(&(protocol, b.addr, b.port));
    }

    /// The counters.
    pub fn stats(&self) -> LbStats {
        self.stats
    }
}

impl App for Lb {
    fn key_bytes(&self) -> usize {
        KEY_BYTES
    }

    fn value_bytes(&self) -> usize {
        VALUE_BYTES
    }

    fn downstream_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop> {
        flow::downstream_key(frame, key, meta)
    }

    fn egress_node(&self, value: &[u8]) -> u16 {
        node_of(value)
    }

    fn apply(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop> {
        let b = Backend::from_value(value).ok_or(Drop::UnknownFlow)?;
        let at = Location::from_meta_user(batch.meta(i).user);
        let mut r = rewriter(batch, i, at)?;
        r.set_dst(b.addr);
        r.set_dst_port(b.port);
        self.stats.inbound += 1;
        Ok(())
    }

    fn access(&mut self, batch: &mut PacketBatch, i: usize) -> Result<Access, Drop> {
        let p = flow::parse(batch.get(i)).map_err(|e| {
            self.stats.unparsed += 1;
            e.drop_reason()
        })?;
        let Some(vip) = self
            .backends
            .get(&(p.proto.number(), p.src, p.src_port))
            .copied()
        else {
            self.stats.unknown_backend += 1;
            return Err(Drop::UnknownFlow);
        };
        let mut r = rewriter(batch, i, Location::from(&p))?;
        r.set_src(vip.addr);
        r.set_src_port(vip.port);
        self.stats.returned += 1;
        Ok(Access::ToExternal)
    }
}
