//! A stateful firewall: the inside (behind the access port) may open connections; the outside
//! may only answer them.
//!
//! - **Outbound** (`ran` -> `inet`, [`App::access`]): the first packet of a connection creates
//!   its state ([`ConnState::Open`]) under the key its answers will have (the packet's 5-tuple
//!   reversed) and queues an [`Update::Insert`] of it for the cluster's table. For TCP only a
//!   SYN without ACK opens a connection: another outbound TCP segment of an unknown connection
//!   is dropped ([`Drop::UnknownFlow`], [`FirewallStats::not_syn`]). An outbound RST closes the
//!   connection ([`ConnState::Closed`], queued as an update of its value); a SYN on a closed
//!   connection opens it again. Outbound packets are not changed.
//! - **Inbound** (`inet` -> `ran`, [`App::apply`]): the FIB is keyed by the 5-tuple; an open
//!   connection passes unchanged, a closed one is dropped ([`Drop::Gate`],
//!   [`FirewallStats::closed`]). An unknown connection has no FIB entry: the engine drops it
//!   and counts it as [`Drop::UnknownFlow`] on `inet` (ScaleBricks:
//!   [`Drop::FibMissAfterGpt`] or `UnknownFlow`), the counted reason for unknown inbound
//!   traffic.
//!
//! Not done: TCP sequence tracking, closing on FIN or on an inbound RST (the inbound path
//! cannot update the table), timeouts.

use crate::flow::{self, FlowKey, Packet, Proto, KEY_BYTES};
use crate::{node_of, Update};
use sb_engine::{Access, App, Drop};
use sb_io::{Meta, PacketBatch};
use sb_wire::TcpFlags;
use std::collections::HashMap;

/// Bytes of a FIB value ([`Conn::value`]).
pub const VALUE_BYTES: usize = 4;

/// A connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// Answers are allowed in.
    Open = 1,
    /// Closed by the inside (an RST): answers are dropped.
    Closed = 2,
}

/// A firewall's FIB value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conn {
    /// The state.
    pub state: ConnState,
    /// The node whose access port leads to the inside host.
    pub node: u16,
}

impl Conn {
    /// The value: state (1), reserved 0 (1), node (2, big endian).
    pub fn value(&self) -> [u8; VALUE_BYTES] {
        let n = self.node.to_be_bytes();
        [self.state as u8, 0, n[0], n[1]]
    }

    /// A value's connection (`None` unless [`VALUE_BYTES`] long with a known state).
    pub fn from_value(v: &[u8]) -> Option<Conn> {
        let v: &[u8; VALUE_BYTES] = v.try_into().ok()?;
        let state = match v[0] {
            1 => ConnState::Open,
            2 => ConnState::Closed,
            _ => return None,
        };
        Some(Conn {
            state,
            node: u16::from_be_bytes([v[2], v[3]]),
        })
    }
}

/// Why the outbound path dropped a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OutboundError {
    /// A TCP segment other than a SYN for a connection the firewall does not know.
    #[error("TCP segment without SYN for an unknown connection")]
    NotSyn,
}

/// The connection table (the outbound direction's view) and the updates it queued.
#[derive(Clone, Debug, Default)]
pub struct ConnTable {
    node: u16,
    conns: HashMap<FlowKey, ConnState>,
    pending: Vec<Update<FlowKey, [u8; VALUE_BYTES]>>,
}

impl ConnTable {
    /// An empty table for node `node`.
    pub fn new(node: u16) -> ConnTable {
        ConnTable {
            node,
            ..ConnTable::default()
        }
    }

    /// An outbound packet (its 5-tuple `key`, its TCP flags if TCP): creates or updates the
    /// connection's state under the inbound key.
    pub fn outbound(&mut self, key: &FlowKey, tcp: Option<TcpFlags>) -> Result<(), OutboundError> {
        let inbound = key.reversed();
        let syn = tcp.is_some_and(|f| f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::ACK));
        let rst = tcp.is_some_and(|f| f.contains(TcpFlags::RST));
        let next = match (self.conns.get(&inbound).copied(), tcp.is_some()) {
            (None, true) if !syn => return Err(OutboundError::NotSyn),
            (None, _) => ConnState::Open,
            (Some(ConnState::Open), _) if rst => ConnState::Closed,
            (Some(ConnState::Closed), _) if syn => ConnState::Open,
            (Some(s), _) => s,
        };
        if self.conns.insert(inbound, next) != Some(next) {
            let c = Conn {
                state: next,
                node: self.node,
            };
            self.pending.push(Update::Insert(inbound, c.value()));
        }
        Ok(())
    }

    /// The state of the connection inbound packets with `key` belong to.
    pub fn state(&self, inbound: &FlowKey) -> Option<ConnState> {
        self.conns.get(inbound).copied()
    }

    /// Number of connections.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    /// True without connections.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// The updates queued since the last call, in order.
    pub fn take_updates(&mut self) -> Vec<Update<FlowKey, [u8; VALUE_BYTES]>> {
        std::mem::take(&mut self.pending)
    }
}

/// What a firewall did, per instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FirewallStats {
    /// Outbound packets passed.
    pub outbound: u64,
    /// Inbound packets passed.
    pub inbound: u64,
    /// Connections opened (or opened again).
    pub opened: u64,
    /// Outbound TCP segments of unknown connections without SYN, dropped.
    pub not_syn: u64,
    /// Inbound packets of closed connections, dropped.
    pub closed: u64,
    /// Inbound packets whose value is not a connection (a corrupt entry), dropped.
    pub bad_value: u64,
    /// Frames dropped by the parser.
    pub unparsed: u64,
}

/// The firewall as an engine application.
#[derive(Clone, Debug)]
pub struct Firewall {
    table: ConnTable,
    stats: FirewallStats,
}

impl Firewall {
    /// A firewall on node `node` with no connections.
    pub fn new(node: u16) -> Firewall {
        Firewall {
            table: ConnTable::new(node),
            stats: FirewallStats::default(),
        }
    }

    /// The connection table.
    pub fn table(&self) -> &ConnTable {
        &self.table
    }

    /// The counters.
    pub fn stats(&self) -> FirewallStats {
        self.stats
    }

    /// The connection states made since the last call ([`ConnTable::take_updates`]).
    pub fn take_updates(&mut self) -> Vec<Update<FlowKey, [u8; VALUE_BYTES]>> {
        self.table.take_updates()
    }

    fn tcp(p: &Packet) -> Option<TcpFlags> {
        (p.proto == Proto::Tcp).then_some(TcpFlags(p.tcp_flags))
    }
}

impl App for Firewall {
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

    fn apply(&mut self, _batch: &mut PacketBatch, _i: usize, value: &[u8]) -> Result<(), Drop> {
        match Conn::from_value(value).map(|c| c.state) {
            Some(ConnState::Open) => {
                self.stats.inbound += 1;
                Ok(())
            }
            Some(ConnState::Closed) => {
                self.stats.closed += 1;
                Err(Drop::Gate)
            }
            None => {
                self.stats.bad_value += 1;
                Err(Drop::Gate)
            }
        }
    }

    fn access(&mut self, batch: &mut PacketBatch, i: usize) -> Result<Access, Drop> {
        let p = flow::parse(batch.get(i)).map_err(|e| {
            self.stats.unparsed += 1;
            e.drop_reason()
        })?;
        let key = p.key();
        let was_open = self.table.state(&key.reversed()) == Some(ConnState::Open);
        if self.table.outbound(&key, Self::tcp(&p)).is_err() {
            self.stats.not_syn += 1;
            return Err(Drop::UnknownFlow);
        }
        if !was_open && self.table.state(&key.reversed()) == Some(ConnState::Open) {
            self.stats.opened += 1;
        }
        self.stats.outbound += 1;
        Ok(Access::ToExternal)
    }
}
