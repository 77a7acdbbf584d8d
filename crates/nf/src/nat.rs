//! NAT (network address and port translation, RFC 3022's NAPT): private hosts behind the
//! access port share one public address.
//!
//! - **Outbound** (`ran` -> `inet`, [`App::access`]): the packet's private (protocol, address,
//!   port) is given a public port from this instance's range ([`NatConfig::ports`]) the first
//!   time it is seen, and keeps it for every remote endpoint (endpoint-independent mapping,
//!   RFC 4787 REQ-1); the source address and port become the public ones. Each new (mapping,
//!   remote endpoint) pair queues an [`Update::Insert`] of the inbound entry for the cluster's
//!   table. No public port free: the packet is dropped ([`Drop::NoRoom`], counted in
//!   [`NatStats::no_port`]).
//! - **Inbound** (`inet` -> `ran`, [`App::apply`]): the FIB is keyed by the inbound 5-tuple
//!   (remote address and port, public address and port), so only remote endpoints the host
//!   sent to get in (address- and port-dependent filtering, RFC 4787 REQ-8's strictest); its
//!   value ([`Translation`]) names the private address and port, which become the destination.
//! - **ICMP echo**: the identifier stands in for the port, both ways (RFC 5508 REQ-1).
//! - **Checksums**: the IPv4 header checksum and the TCP/UDP checksum (whose pseudo-header holds
//!   the addresses) or the ICMP checksum are updated incrementally (RFC 1624,
//!   [`crate::checksum`]); a UDP checksum of 0 stays 0.
//!
//! Mappings do not expire by themselves (no timers): [`NatTable::release`] removes one and
//! queues the removal of its inbound entries. Each worker of a node owns a disjoint port range
//! (an instance per worker), so no state is shared between workers.

use crate::checksum::Rewriter;
use crate::flow::{self, FlowKey, Location, Packet, KEY_BYTES};
use crate::{node_of, rewriter, Update};
use sb_engine::{Access, App, Drop};
use sb_io::{Meta, PacketBatch};
use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

/// Bytes of a FIB value ([`Translation::value`]).
pub const VALUE_BYTES: usize = 8;

/// A NAT's inbound FIB value: where an inbound packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Translation {
    /// The private address.
    pub addr: Ipv4Addr,
    /// The private port (ICMP echo: identifier).
    pub port: u16,
    /// The node whose access port leads to the private host.
    pub node: u16,
}

impl Translation {
    /// The value: address (4), port (2, big endian), node (2, big endian).
    pub fn value(&self) -> [u8; VALUE_BYTES] {
        let mut v = [0u8; VALUE_BYTES];
        v[..4].copy_from_slice(&self.addr.octets());
        v[4..6].copy_from_slice(&self.port.to_be_bytes());
        v[6..8].copy_from_slice(&self.node.to_be_bytes());
        v
    }

    /// A value's translation (`None` unless [`VALUE_BYTES`] long).
    pub fn from_value(v: &[u8]) -> Option<Translation> {
        let v: &[u8; VALUE_BYTES] = v.try_into().ok()?;
        Some(Translation {
            addr: Ipv4Addr::new(v[0], v[1], v[2], v[3]),
            port: u16::from_be_bytes([v[4], v[5]]),
            node: u16::from_be_bytes([v[6], v[7]]),
        })
    }
}

/// A NAT instance's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatConfig {
    /// The public address.
    pub public: Ipv4Addr,
    /// The public ports this instance hands out (disjoint from every other instance's with the
    /// same public address). Port 0 is never handed out.
    pub ports: RangeInclusive<u16>,
    /// This node (the egress node of the entries it creates).
    pub node: u16,
}

/// Why a NAT could not be made or could not map a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NatError {
    /// The port range is empty (or only port 0).
    #[error("the public port range is empty")]
    NoPorts,
    /// Every public port of the range is mapped for this protocol.
    #[error("every public port is in use")]
    PortsExhausted,
}

/// A private endpoint: (protocol, address, port).
type Private = (u8, Ipv4Addr, u16);

/// The NAT's mapping state (the outbound direction's table) and the inbound entries it made.
#[derive(Clone, Debug)]
pub struct NatTable {
    cfg: NatConfig,
    /// The next port to try, per protocol (an index into the range).
    cursor: HashMap<u8, u32>,
    by_private: HashMap<Private, u16>,
    by_public: HashMap<(u8, u16), Private>,
    /// The inbound keys published, with their translation.
    inbound: HashMap<FlowKey, Translation>,
    /// Per mapping, the inbound keys it published (for release).
    remotes: HashMap<Private, BTreeSet<FlowKey>>,
    pending: Vec<Update<FlowKey, [u8; VALUE_BYTES]>>,
}

impl NatTable {
    /// An empty table.
    pub fn new(cfg: NatConfig) -> Result<NatTable, NatError> {
        if cfg.ports.is_empty() || cfg.ports == (0..=0) {
            return Err(NatError::NoPorts);
        }
        Ok(NatTable {
            cfg,
            cursor: HashMap::new(),
            by_private: HashMap::new(),
            by_public: HashMap::new(),
            inbound: HashMap::new(),
            remotes: HashMap::new(),
            pending: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &NatConfig {
        &self.cfg
    }

    /// The public port of an outbound flow (`key`: protocol, private address and port, remote
    /// address and port), mapped now if it was not; queues the inbound entry if new.
    pub fn outbound(&mut self, key: &FlowKey) -> Result<u16, NatError> {
        let private = (key.protocol(), key.src(), key.src_port());
        let port = match self.by_private.get(&private) {
            Some(&p) => p,
            None => {
                let p = self.allocate(key.protocol())?;
                self.by_private.insert(private, p);
                self.by_public.insert((key.protocol(), p), private);
                p
            }
        };
        let inbound = FlowKey::new(
            key.protocol(),
            key.dst(),
            remote_port(key, key.dst_port(), port),
            self.cfg.public,
            port,
        );
        if !self.inbound.contains_key(&inbound) {
            let t = Translation {
                addr: key.src(),
                port: key.src_port(),
                node: self.cfg.node,
            };
            self.inbound.insert(inbound, t);
            self.remotes.entry(private).or_default().insert(inbound);
            self.pending.push(Update::Insert(inbound, t.value()));
        }
        Ok(port)
    }

    fn allocate(&mut self, protocol: u8) -> Result<u16, NatError> {
        let lo = u32::from(*self.cfg.ports.start()).max(1);
        let hi = u32::from(*self.cfg.ports.end());
        let n = hi + 1 - lo;
        let c = self.cursor.entry(protocol).or_insert(0);
        for _ in 0..n {
            let p = (lo + *c % n) as u16;
            *c = (*c + 1) % n;
            if !self.by_public.contains_key(&(protocol, p)) {
                return Ok(p);
            }
        }
        Err(NatError::PortsExhausted)
    }

    /// The inbound entry for `key` this table published, if any (what the cluster's table
    /// holds for it once the updates are written).
    pub fn inbound(&self, key: &FlowKey) -> Option<Translation> {
        self.inbound.get(key).copied()
    }

    /// The public port of a private endpoint, if mapped.
    pub fn mapping(&self, protocol: u8, addr: Ipv4Addr, port: u16) -> Option<u16> {
        self.by_private.get(&(protocol, addr, port)).copied()
    }

    /// Number of mappings.
    pub fn len(&self) -> usize {
        self.by_private.len()
    }

    /// True without mappings.
    pub fn is_empty(&self) -> bool {
        self.by_private.is_empty()
    }

    /// Removes a private endpoint's mapping (its public port is free again) and queues the
    /// removal of its inbound entries. False if it had none.
    pub fn release(&mut self, protocol: u8, addr: Ipv4Addr, port: u16) -> bool {
        let private = (protocol, addr, port);
        let Some(p) = self.by_private.remove(&private) else {
            return false;
        };
        self.by_public.remove(&(protocol, p));
        for k in self.remotes.remove(&private).unwrap_or_default() {
            self.inbound.remove(&k);
            self.pending.push(Update::Remove(k));
        }
        true
    }

    /// The updates queued since the last call, in order.
    pub fn take_updates(&mut self) -> Vec<Update<FlowKey, [u8; VALUE_BYTES]>> {
        std::mem::take(&mut self.pending)
    }
}

/// The remote port of the inbound key: for ICMP echo the identifier (both "ports" of an echo
/// key are its identifier, which the NAT rewrites to the public one).
fn remote_port(key: &FlowKey, dst_port: u16, public: u16) -> u16 {
    if key.protocol() == flow::ip_proto::ICMP {
        public
    } else {
        dst_port
    }
}

/// What a NAT did, per instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatStats {
    /// Outbound packets translated.
    pub outbound: u64,
    /// Inbound packets translated.
    pub inbound: u64,
    /// Mappings created.
    pub new_mappings: u64,
    /// Outbound packets dropped: no public port free.
    pub no_port: u64,
    /// Frames dropped by the parser (malformed, not IPv4, fragments, other protocols).
    pub unparsed: u64,
}

/// The NAT as an engine application.
#[derive(Clone, Debug)]
pub struct Nat {
    table: NatTable,
    stats: NatStats,
}

impl Nat {
    /// A NAT with no mappings.
    pub fn new(cfg: NatConfig) -> Result<Nat, NatError> {
        Ok(Nat {
            table: NatTable::new(cfg)?,
            stats: NatStats::default(),
        })
    }

    /// The mapping table.
    pub fn table(&self) -> &NatTable {
        &self.table
    }

    /// The mapping table, to release mappings.
    pub fn table_mut(&mut self) -> &mut NatTable {
        &mut self.table
    }

    /// The counters.
    pub fn stats(&self) -> NatStats {
        self.stats
    }

    /// The inbound entries made or removed since the last call ([`NatTable::take_updates`]).
    pub fn take_updates(&mut self) -> Vec<Update<FlowKey, [u8; VALUE_BYTES]>> {
        self.table.take_updates()
    }

    fn parse(&mut self, frame: &[u8]) -> Result<Packet, Drop> {
        flow::parse(frame).map_err(|e| {
            self.stats.unparsed += 1;
            e.drop_reason()
        })
    }
}

/// Rewrites the destination of an inbound packet.
pub fn translate_inbound(r: &mut Rewriter<'_>, t: &Translation) {
    r.set_dst(t.addr);
    r.set_dst_port(t.port);
}

impl App for Nat {
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
        let t = Translation::from_value(value).ok_or(Drop::UnknownFlow)?;
        let at = Location::from_meta_user(batch.meta(i).user);
        let mut r = rewriter(batch, i, at)?;
        translate_inbound(&mut r, &t);
        self.stats.inbound += 1;
        Ok(())
    }

    fn access(&mut self, batch: &mut PacketBatch, i: usize) -> Result<Access, Drop> {
        let p = self.parse(batch.get(i))?;
        let before = self.table.len();
        let port = match self.table.outbound(&p.key()) {
            Ok(port) => port,
            Err(_) => {
                self.stats.no_port += 1;
                return Err(Drop::NoRoom);
            }
        };
        if self.table.len() > before {
            self.stats.new_mappings += 1;
        }
        let public = self.table.cfg.public;
        let mut r = rewriter(batch, i, Location::from(&p))?;
        r.set_src(public);
        r.set_src_port(port);
        self.stats.outbound += 1;
        Ok(Access::ToExternal)
    }
}
