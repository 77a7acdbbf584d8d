//! The four network functions the TEA paper built on its table (SIGCOMM 2020, sec. 5.2): a
//! NAT, a stateful firewall, an L4 load balancer and a VPN gateway, each an [`sb_engine::App`],
//! so each runs on the engine's architectures (ScaleBricks, full duplication, hash
//! partitioning: the paper's server-based baseline) with its per-flow table as the cluster's
//! FIB.
//!
//! # The shape every NF shares
//! The engine looks up frames that arrive on the external port (`inet`) in the FIB, possibly on
//! another node, and calls [`App::apply`](sb_engine::App::apply) with the value where the entry
//! is; frames from the access port (`ran`: the inside, the private hosts, the backends, the
//! servers) are handled in place by [`App::access`](sb_engine::App::access) without a FIB
//! lookup. So each NF keys its FIB by what arrives from outside, and keeps what the inside
//! direction needs in a table of its own, as the LTE gateway keeps its uplink table:
//!
//! | NF | FIB key (`inet`) | FIB value | inside (`ran`) | new entries |
//! |---|---|---|---|---|
//! | [`nat`] | inbound 5-tuple (13 B) | private address, port, node (8 B) | mapping table (private -> public port) | the first outbound packet of a flow |
//! | [`firewall`] | inbound 5-tuple | connection state, node (4 B) | connection table | the first outbound packet (TCP: a SYN) |
//! | [`lb`] | client 5-tuple to the VIP | backend address, port, node (8 B) | backend -> VIP (return traffic) | the control plane: Maglev pick for a new flow |
//! | [`vpn`] | customer VNI + VM address (8 B) | server address, internal VNI, node (10 B) | internal VNI + VM -> customer | the control plane |
//!
//! Every value ends with the egress node (2 bytes, big endian): the node whose access port
//! leads to the inside host ([`App::egress_node`](sb_engine::App::egress_node)). Entries an
//! NF creates from the inside are queued as [`Update`]s for the control plane to write into
//! the cluster's table (`take_updates` on each NF); what writes them is the caller's (a test
//! here writes them into a [`sb_engine::CuckooFib`]'s writer; the TEA switch's control plane
//! later). The engine has no hook for a FIB miss, so a frame from outside whose key no entry
//! has is dropped by the engine and counted as [`Drop::UnknownFlow`] (or
//! [`Drop::FibMissAfterGpt`] under ScaleBricks): the firewall's "unknown inbound" drop, and
//! a load balancer's new flow until the control plane inserts its Maglev pick.
//!
//! Only IPv4 is handled (TCP, UDP, ICMP echo); IP fragments are dropped
//! ([`Drop::OuterFragment`]). No NF changes the TTL (they are bumps in the wire, not routers).
//!
//! # Outside bytes
//! [`flow::parse`] (and [`vpn::parse_vxlan`] for the tunnels) check a frame once, through
//! [`sb_wire`]'s checked views, and never panic; the rewrites go through
//! [`checksum::Rewriter`], whose constructor checks the lengths. The fuzz targets `nf_nat`,
//! `nf_firewall`, `nf_lb` and `nf_vpn` (`fuzz/`) run [`fuzzing`]'s entry points, which the
//! tests also run on random and mutated frames: no panic, and a frame whose checksums were
//! right leaves with right checksums.
//!
//! # Example: a NAT, outbound then the answer inbound
//! ```
//! use sb_engine::App;
//! use sb_io::PacketBatch;
//! use sb_nf::nat::{Nat, NatConfig};
//! use sb_nf::Update;
//! use sb_wire::{EthernetAddress, PacketBuilder};
//! use std::net::Ipv4Addr;
//!
//! let public = Ipv4Addr::new(198, 51, 100, 1);
//! let mut nat = Nat::new(NatConfig { public, ports: 20000..=20999, node: 0 })?;
//! let (host, server) = (Ipv4Addr::new(10, 0, 0, 5), Ipv4Addr::new(203, 0, 113, 9));
//! let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
//!
//! // A private host's packet arrives on the access port: its source becomes public:port.
//! let mut batch = PacketBatch::new(4);
//! let b = PacketBuilder::udp(mac, mac, host.into(), server.into(), 5353, 53);
//! b.build(b"query", batch.alloc(b.header_len() + 5).unwrap())?;
//! nat.access(&mut batch, 0).map_err(|d| d.label())?;
//! let out = sb_nf::flow::parse(batch.get(0))?;
//! assert_eq!((out.src, out.src_port), (public, 20000));
//!
//! // The mapping became an entry for the cluster's table, keyed by the answer's 5-tuple.
//! let updates = nat.take_updates();
//! let Update::Insert(key, value) = updates[0] else { unreachable!() };
//! assert_eq!(key, out.key().reversed());
//!
//! // The answer arrives on the external port: looked up (here by hand), translated back.
//! let b = PacketBuilder::udp(mac, mac, server.into(), public.into(), 53, 20000);
//! b.build(b"answer", batch.alloc(b.header_len() + 6).unwrap())?;
//! let mut k = [0u8; sb_nf::flow::KEY_BYTES];
//! let frame = batch.get(1).to_vec();
//! nat.downstream_key(&frame, &mut k, batch.meta_mut(1)).map_err(|d| d.label())?;
//! assert_eq!(k, key.0);
//! nat.apply(&mut batch, 1, &value).map_err(|d| d.label())?;
//! // Checksums verified from scratch:
//! let back = sb_wire::parse_frame_with(batch.get(1), &sb_wire::ParseOptions {
//!     verify_l4_checksum: true, ..Default::default() })?;
//! let ip = back.ip().unwrap();
//! assert_eq!((ip.dst_addr, ip.five_tuple().unwrap().dst_port), (host.into(), 5353));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Cost model
//! Per packet: one header parse (the IPv4 header checksum checked, no payload pass), one FIB
//! lookup by the engine (inside: one hash-map lookup in the NF's own table), then the
//! translation: NAT and load balancer rewrite an address and a port (6 bytes) and update two
//! checksums incrementally (RFC 1624, a few additions each); the firewall rewrites nothing; the
//! VPN gateway rewrites the outer addresses and the VNI (11 bytes) of a VXLAN packet in place
//! (both sides VXLAN: the headers keep their length). No NF touches the payload.

#![warn(missing_docs)]

pub mod checksum;
pub mod firewall;
pub mod flow;
pub mod fuzzing;
pub mod lb;
pub mod nat;
pub mod vpn;

use checksum::Rewriter;
use flow::Location;
use sb_engine::Drop;
use sb_io::PacketBatch;

/// A change to the cluster's table that an NF made from its inside direction, for the control
/// plane to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Update<K, V> {
    /// Insert the entry, or replace the key's value.
    Insert(K, V),
    /// Remove the key's entry.
    Remove(K),
}

/// The egress node stored in a value's last two bytes (0 for a value shorter than 2 bytes).
#[inline]
pub(crate) fn node_of(value: &[u8]) -> u16 {
    match value {
        [.., a, b] => u16::from_be_bytes([*a, *b]),
        _ => 0,
    }
}

/// A rewriter of the IPv4 packet of frame `i` at `at`, checked against the frame's bounds.
pub(crate) fn rewriter(
    batch: &mut PacketBatch,
    i: usize,
    at: Location,
) -> Result<Rewriter<'_>, Drop> {
    let frame_len = batch.get(i).len();
    let end = at
        .ip_offset
        .checked_add(at.ip_len)
        .filter(|&e| e <= frame_len)
        .ok_or(Drop::NotIp)?;
    let (buf, start) = batch.buffer_mut(i);
    let ip = buf
        .get_mut(start + at.ip_offset..start + end)
        .ok_or(Drop::NotIp)?;
    Rewriter::new(ip, at.l4_rel, at.proto).ok_or(Drop::NotIp)
}
