//! The forwarding engine of a scalebricks node, sans-IO: given a batch of frames that arrived
//! on a port (`inet`, `ran` or `fabric`), it produces batches for the ports and counts what it
//! did. No sockets, threads or clocks: the node process (`sb-node`), the demo and the
//! benchmarks drive it over whatever `sb-io` ports they have (AF_PACKET, AF_XDP, in-memory).
//!
//! # The architectures, on identical code ([`Arch`])
//! - **ScaleBricks**: at ingress (`inet`) the key is hashed once and looked up in the GPT
//!   (SetSep, batched); frames whose handling node is this node go straight to the FIB stage,
//!   which reuses the hash; the others leave on `fabric` to the handling node's fabric MAC. On
//!   `fabric`, the batched FIB lookup, the action, out of `ran`. One fabric crossing at most.
//! - **Full duplication**: every node holds the whole FIB; the ingress node looks up, applies
//!   the action and sends the result over the fabric to the node whose `ran` port serves the
//!   tunnel, which transmits it without a lookup.
//! - **Hash partitioning**: the ingress node hashes the key to the indirection node that holds
//!   its entry ([`indirection_node`]), which looks up and sends the result on to the egress
//!   node: up to two crossings.
//!
//! Between nodes a frame carries a six-byte shim ([`fabric`]: EtherType 0x88B5, whether it
//! still needs a lookup, its hop count, its ingress node). A fabric frame that is not valid
//! for the architecture (no shim, a kind it never sends, too many hops) is dropped and counted.
//!
//! # Batches
//! Dynamic batching as in the paper: whatever a port returned is run to completion in one
//! [`Engine::process`] call. Per-frame state (key, hash, next hop) sits in arrays indexed by
//! the frame's position, and the frame's [`sb_packet::Meta`]; frames leave for the output batches
//! through [`sb_packet::PacketBatch::transfer`] (buffers change owner, bytes are not copied).
//!
//! # Pieces
//! - [`App`]: what a key, a value and the action are; [`lte::Lte`], the LTE packet forwarding
//!   engine (GTP-U encapsulation downstream, decapsulation and checks upstream, echo).
//! - [`Fib`]: the FIB backend, a run-time choice: [`CuckooFib`] (ours) or `RteHashFib` (DPDK
//!   `rte_hash`, feature `dpdk`).
//! - [`Counters`]: per port received / transmitted / to fabric / dropped by reason, and the
//!   fabric-crossing histogram of the packets that left on `ran`.
//!
//! # Example: one node of a two-node ScaleBricks cluster
//! ```
//! use sb_engine::{lte, Arch, CuckooFib, Engine, NodeConfig, Outputs, PortAddr, PortId};
//! use sb_packet::PacketBatch;
//! use std::net::{IpAddr, Ipv4Addr};
//! use std::sync::Arc;
//!
//! let seed = 7;
//! // Two tunnels: UE .1 is served by node 0, UE .2 by node 1.
//! let tunnels: Vec<lte::Tunnel> = (1..=2u8)
//!     .map(|i| lte::Tunnel {
//!         ue: IpAddr::V4(Ipv4Addr::new(100, 64, 0, i)),
//!         teid: 1000 + u32::from(i),
//!         enb: Ipv4Addr::new(192, 0, 2, i),
//!         node: u16::from(i - 1),
//!         qci: 9,
//!         ul_teid: 0,
//!         qfi: 0, // a 5G QoS flow: 1..=63 (downlink G-PDUs then carry a PDU Session Container)
//!         rqi: false,
//!         policy: lte::Policy::default(), // no QoS, usage or buffering rules
//!         owner: 0,
//!     })
//!     .collect();
//! // The GPT maps every UE key to its handling node.
//! let keys: Vec<[u8; 16]> = tunnels.iter().map(|t| t.key()).collect();
//! let key_refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
//! let nodes: Vec<u16> = tunnels.iter().map(|t| t.node).collect();
//! let opts = sb_setsep::BuildOptions { value_bits: 1, seed, ..Default::default() };
//! // Shared by the workers (`Gpt::from(Arc<LiveSetSep>)` for one the control plane changes
//! // while they forward; any `GptLookup` table through `Gpt::new`).
//! let gpt = sb_engine::Gpt::from(sb_setsep::SetSep::build(&key_refs, &nodes, &opts)?);
//! // Node 0's FIB: its own tunnels only.
//! let mine: Vec<([u8; 16], [u8; lte::VALUE_BYTES])> =
//!     tunnels.iter().filter(|t| t.node == 0).map(|t| (t.key(), t.value())).collect();
//! let (_writer, fib) = CuckooFib::build(16, lte::VALUE_BYTES, seed,
//!     mine.iter().map(|(k, v)| (&k[..], &v[..])))?;
//! let uplink = lte::Lte::uplink_table(tunnels.iter().filter(|t| t.node == 0), seed)?;
//! let app = lte::Lte::new(
//!     lte::LteConfig {
//!         ran_addrs: vec![[10, 1, 0, 1].into(), [10, 1, 1, 1].into()],
//!         ran_mtu: 1500,
//!         icmp_src: [10, 0, 0, 1].into(),
//!         icmp_src6: lte::default_icmp_src6(0),
//!     },
//!     uplink,
//! );
//! let port = |m: u8| PortAddr { mac: [2, 0, 0, 0, m, 0], peer_mac: [2, 0, 0, 0, m, 1], ip: None };
//! let cfg = NodeConfig {
//!     arch: Arch::ScaleBricks,
//!     node: 0,
//!     fabric_macs: vec![[2, 0, 0, 0, 9, 0], [2, 0, 0, 0, 9, 1]],
//!     inet: port(1),
//!     ran: port(2),
//!     seed,
//! };
//! let mut engine = Engine::new(cfg, Some(gpt), Box::new(fib), app, 32)?;
//!
//! // Two downstream packets enter node 0's inet port.
//! let mut rx = PacketBatch::new(32);
//! for i in 1..=2u8 {
//!     let b = sb_wire::PacketBuilder::udp(
//!         sb_wire::EthernetAddress([2; 6]), sb_wire::EthernetAddress([2, 0, 0, 0, 1, 0]),
//!         Ipv4Addr::new(203, 0, 113, 1).into(), Ipv4Addr::new(100, 64, 0, i).into(), 53, 4000);
//!     let f = rx.alloc(b.header_len() + 5).unwrap();
//!     b.build(b"hello", f)?;
//! }
//! let mut out = Outputs::new(32, rx.buf_size());
//! engine.process(PortId::Inet, &mut rx, &mut out);
//! // UE .1 is ours: GTP-U out of ran. UE .2 is node 1's: over the fabric.
//! assert_eq!((out.ran.len(), out.fabric.len()), (1, 1));
//! assert_eq!(sb_wire::parse_frame(out.ran.get(0))?.teid(), Some(1001));
//! assert_eq!(engine.counters().ports[PortId::Inet as usize].to_fabric, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Cost model
//! Per packet: one parse of the headers, one 128-bit hash, one GPT lookup (ScaleBricks, in
//! batches with prefetching) and one FIB lookup (batched) on the node that holds the entry, the
//! action (GTP-U encapsulation: 50 header bytes written, no payload pass), 12 MAC bytes, and
//! 18 shim bytes per fabric crossing. `scalebricks bench node` measures it per architecture
//! and FIB backend.

#![warn(missing_docs)]

pub mod app;
pub mod cluster;
pub mod counters;
mod engine;
pub mod fabric;
pub mod fib;
pub mod fuzzing;
pub mod lte;
pub mod policy;
mod prefetch;

pub use app::{Access, App};
pub use counters::{Counters, Drop, PortCounters, PortId, Report};
pub use engine::{
    indirection_node, Arch, Engine, EngineError, Gpt, NodeConfig, Outputs, PortAddr, ERROR_BURST,
    ERROR_RATE,
};
#[cfg(feature = "dpdk")]
pub use fib::RteHashFib;
pub use fib::{CuckooFib, Fib, FibError};
