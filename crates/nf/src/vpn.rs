//! A VPN gateway between customers' tunnels and the data center's internal tunnels (the
//! paper's, after prior work: a table of ⟨customer's external tunnel ID, VM address⟩ ->
//! ⟨server address, internal tunnel ID⟩).
//!
//! **Both sides are VXLAN** (RFC 7348, UDP port 4789; the tunnel ID is the 24-bit VNI), and
//! the gateway translates one tunnel into the other in place: the outer addresses and the VNI
//! are rewritten, the inner Ethernet frame is not touched. Why VXLAN and not GRE: the two
//! tunnels then have headers of the same length, so a translation moves no byte, needs no
//! headroom and cannot push a packet over the MTU; the outer UDP source port (kept as the
//! customer's side set it, from the inner flow) gives the fabric's ECMP hashing the entropy
//! a GRE header lacks; and VXLAN is what hypervisors speak to VMs. (Real customer VPNs would be
//! IPsec; the encryption is not the table's business and is not done here.)
//!
//! - **Customer -> VM** (`inet` -> `ran`, [`App::apply`]): key ([`tunnel_key`]) = the packet's
//!   VNI and its inner destination (the VM's address); value ([`Tunnel::value`]) = the server
//!   hosting the VM, the internal VNI, the node whose access port leads to that server. The
//!   outer source becomes the gateway's internal address, the outer destination the server,
//!   the VNI the internal one.
//! - **VM -> customer** (`ran` -> `inet`, [`App::access`]): keyed by the internal VNI and the
//!   inner source (the VM), from this instance's own table ([`Vpn::add_tunnel`]): the outer
//!   source becomes the gateway's external address, the outer destination the customer's
//!   tunnel endpoint, the VNI the customer's. Unknown: dropped ([`Drop::UnknownFlow`],
//!   [`VpnStats::unknown_tunnel`]).
//! - The outer IPv4 checksum is updated incrementally; so is the outer UDP checksum when it is
//!   not 0 (RFC 7348 asks senders for 0 over IPv4; a non-zero one is kept right).

use crate::flow::{self, Location, ParseError, Proto};
use crate::{node_of, rewriter, Update};
use sb_engine::{Access, App, Drop};
use sb_io::{Meta, PacketBatch};
use sb_wire::{parse_frame_with, FrameKind};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

/// The VXLAN UDP port (RFC 7348).
pub const VXLAN_PORT: u16 = 4789;
/// Bytes of the VXLAN header.
pub const VXLAN_HEADER: usize = 8;
/// Bytes of a FIB key: VNI (4, big endian, high byte 0), VM address (4).
pub const KEY_BYTES: usize = 8;
/// Bytes of a FIB value ([`Tunnel::value`]).
pub const VALUE_BYTES: usize = 10;
/// The largest VNI (24 bits).
pub const MAX_VNI: u32 = (1 << 24) - 1;

/// The FIB key of a customer VNI and a VM address.
pub fn tunnel_key(vni: u32, vm: Ipv4Addr) -> [u8; KEY_BYTES] {
    let mut k = [0u8; KEY_BYTES];
    k[..4].copy_from_slice(&(vni & MAX_VNI).to_be_bytes());
    k[4..].copy_from_slice(&vm.octets());
    k
}

/// One VM's tunnels: the customer's side and the internal side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tunnel {
    /// The customer's VNI (external tunnel ID).
    pub customer_vni: u32,
    /// The customer's tunnel endpoint (where VM -> customer packets go).
    pub customer_peer: Ipv4Addr,
    /// The VM's address (inside the tunnels).
    pub vm: Ipv4Addr,
    /// The server hosting the VM.
    pub server: Ipv4Addr,
    /// The internal VNI.
    pub internal_vni: u32,
    /// The node whose access port leads to the server.
    pub node: u16,
}

impl Tunnel {
    /// The FIB key ([`tunnel_key`] of the customer VNI and the VM).
    pub fn key(&self) -> [u8; KEY_BYTES] {
        tunnel_key(self.customer_vni, self.vm)
    }

    /// The FIB value: server (4), internal VNI (4, big endian), node (2, big endian).
    pub fn value(&self) -> [u8; VALUE_BYTES] {
        let mut v = [0u8; VALUE_BYTES];
        v[..4].copy_from_slice(&self.server.octets());
        v[4..8].copy_from_slice(&(self.internal_vni & MAX_VNI).to_be_bytes());
        v[8..].copy_from_slice(&self.node.to_be_bytes());
        v
    }

    /// The FIB entry, as an update for the cluster's table.
    pub fn update(&self) -> Update<[u8; KEY_BYTES], [u8; VALUE_BYTES]> {
        Update::Insert(self.key(), self.value())
    }
}

/// A decoded FIB value: (server, internal VNI, node); `None` unless [`VALUE_BYTES`] long.
pub fn decode_value(v: &[u8]) -> Option<(Ipv4Addr, u32, u16)> {
    let v: &[u8; VALUE_BYTES] = v.try_into().ok()?;
    Some((
        Ipv4Addr::new(v[0], v[1], v[2], v[3]),
        u32::from_be_bytes([v[4], v[5], v[6], v[7]]) & MAX_VNI,
        u16::from_be_bytes([v[8], v[9]]),
    ))
}

/// Why a frame is not a VXLAN packet the gateway translates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VxlanError {
    /// The outer packet is not one (see [`ParseError`]).
    #[error("outer packet: {0}")]
    Outer(ParseError),
    /// Not UDP to the VXLAN port.
    #[error("not VXLAN (UDP to port 4789)")]
    NotVxlan,
    /// The UDP payload is shorter than the VXLAN header and an inner Ethernet header.
    #[error("VXLAN packet truncated")]
    Truncated,
    /// The VXLAN header's I flag is clear (no valid VNI).
    #[error("VXLAN header without a VNI")]
    NoVni,
    /// The inner frame is malformed or not IPv4.
    #[error("inner frame: {0}")]
    Inner(ParseError),
}

impl VxlanError {
    /// The engine's drop reason: the outer or inner parser's, [`Drop::UnknownFlow`] for a
    /// frame that is not a VXLAN packet with a VNI (no tunnel key).
    pub fn drop_reason(self) -> Drop {
        match self {
            VxlanError::Outer(e) | VxlanError::Inner(e) => e.drop_reason(),
            VxlanError::NotVxlan | VxlanError::Truncated | VxlanError::NoVni => Drop::UnknownFlow,
        }
    }
}

/// A VXLAN packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vxlan {
    /// The outer IPv4/UDP packet.
    pub outer: flow::Packet,
    /// The VNI.
    pub vni: u32,
    /// The inner IPv4 source.
    pub inner_src: Ipv4Addr,
    /// The inner IPv4 destination.
    pub inner_dst: Ipv4Addr,
}

/// Parses an Ethernet frame as IPv4/UDP/VXLAN carrying an Ethernet/IPv4 frame. Never panics.
pub fn parse_vxlan(frame: &[u8]) -> Result<Vxlan, VxlanError> {
    let outer = flow::parse(frame).map_err(VxlanError::Outer)?;
    if outer.proto != Proto::Udp || outer.dst_port != VXLAN_PORT {
        return Err(VxlanError::NotVxlan);
    }
    let udp = outer.ip_offset + outer.l4_rel;
    let udp_len = frame
        .get(udp + 4..udp + 6)
        .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        .ok_or(VxlanError::Truncated)?;
    let payload = frame
        .get(udp + 8..udp + udp_len.max(8))
        .ok_or(VxlanError::Truncated)?;
    if payload.len() < VXLAN_HEADER + 14 {
        return Err(VxlanError::Truncated);
    }
    if payload[0] & 0x08 == 0 {
        return Err(VxlanError::NoVni);
    }
    let vni = u32::from_be_bytes([0, payload[4], payload[5], payload[6]]);
    let inner = parse_frame_with(&payload[VXLAN_HEADER..], &flow::OPTIONS)
        .map_err(|e| VxlanError::Inner(e.into()))?;
    let FrameKind::Ip(ip) = inner.kind else {
        return Err(VxlanError::Inner(ParseError::NotIpv4));
    };
    let (IpAddr::V4(inner_src), IpAddr::V4(inner_dst)) = (ip.src_addr, ip.dst_addr) else {
        return Err(VxlanError::Inner(ParseError::NotIpv4));
    };
    Ok(Vxlan {
        outer,
        vni,
        inner_src,
        inner_dst,
    })
}

/// The gateway's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VpnConfig {
    /// Towards the customers (the source of VM -> customer packets).
    pub external: Ipv4Addr,
    /// Towards the servers (the source of customer -> VM packets).
    pub internal: Ipv4Addr,
}

/// What a gateway did, per instance.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VpnStats {
    /// Customer -> VM packets translated.
    pub to_vm: u64,
    /// VM -> customer packets translated.
    pub to_customer: u64,
    /// VM -> customer packets of no known tunnel, dropped.
    pub unknown_tunnel: u64,
    /// Frames that are not VXLAN packets the gateway translates.
    pub unparsed: u64,
}

/// The VPN gateway as an engine application.
#[derive(Clone, Debug)]
pub struct Vpn {
    cfg: VpnConfig,
    /// (internal VNI, VM) -> (customer VNI, customer peer).
    reverse: HashMap<(u32, Ipv4Addr), (u32, Ipv4Addr)>,
    stats: VpnStats,
}

/// Rewrites a VXLAN packet's outer addresses and VNI at `at` (the outer packet's location).
fn translate(
    batch: &mut PacketBatch,
    i: usize,
    at: Location,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    vni: u32,
) -> Result<(), Drop> {
    // The VNI word: UDP header (8) + 4: the VNI (3 bytes) and the reserved byte, kept.
    let reserved = *batch
        .get(i)
        .get(at.ip_offset + at.l4_rel + 15)
        .ok_or(Drop::NotIp)?;
    let mut r = rewriter(batch, i, at)?;
    r.set_src(src);
    r.set_dst(dst);
    if !r.set_l4_u32(12, (vni & MAX_VNI) << 8 | u32::from(reserved)) {
        return Err(Drop::NotIp);
    }
    Ok(())
}

impl Vpn {
    /// A gateway with no tunnels.
    pub fn new(cfg: VpnConfig) -> Vpn {
        Vpn {
            cfg,
            reverse: HashMap::new(),
            stats: VpnStats::default(),
        }
    }

    /// Adds a VM's return path (VM -> customer). Its customer -> VM entry is the cluster's
    /// table's ([`Tunnel::update`]).
    pub fn add_tunnel(&mut self, t: &Tunnel) {
        self.reverse.insert(
            (t.internal_vni & MAX_VNI, t.vm),
            (t.customer_vni & MAX_VNI, t.customer_peer),
        );
    }

    /// Removes a VM's return path.
    pub fn remove_tunnel(&mut self, t: &Tunnel) {
        self.reverse.remove(&(t.internal_vni & MAX_VNI, t.vm));
    }

    /// The counters.
    pub fn stats(&self) -> VpnStats {
        self.stats
    }
}

impl App for Vpn {
    fn key_bytes(&self) -> usize {
        KEY_BYTES
    }

    fn value_bytes(&self) -> usize {
        VALUE_BYTES
    }

    fn downstream_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop> {
        let v = parse_vxlan(frame).map_err(|e| e.drop_reason())?;
        key.copy_from_slice(&tunnel_key(v.vni, v.inner_dst));
        meta.user = v.outer.meta_user();
        Ok(())
    }

    fn egress_node(&self, value: &[u8]) -> u16 {
        node_of(value)
    }

    fn apply(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop> {
        let (server, vni, _) = decode_value(value).ok_or(Drop::UnknownFlow)?;
        let at = Location::from_meta_user(batch.meta(i).user);
        translate(batch, i, at, self.cfg.internal, server, vni)?;
        self.stats.to_vm += 1;
        Ok(())
    }

    fn access(&mut self, batch: &mut PacketBatch, i: usize) -> Result<Access, Drop> {
        let v = parse_vxlan(batch.get(i)).map_err(|e| {
            self.stats.unparsed += 1;
            e.drop_reason()
        })?;
        let Some(&(vni, peer)) = self.reverse.get(&(v.vni, v.inner_src)) else {
            self.stats.unknown_tunnel += 1;
            return Err(Drop::UnknownFlow);
        };
        translate(
            batch,
            i,
            Location::from(&v.outer),
            self.cfg.external,
            peer,
            vni,
        )?;
        self.stats.to_customer += 1;
        Ok(Access::ToExternal)
    }
}
