//! PFCP (3GPP TS 29.244, the N4/Sxb protocol) for the cluster as one user-plane function: a
//! checked codec of the messages a control plane (SMF, SGW-C/PGW-C) sends a UPF, and the
//! sans-IO endpoint that turns them into forwarding-table changes.
//!
//! - [`message`]: the header (version 1, S flag, SEID, 24-bit sequence number, message
//!   priority, FO) and the messages Heartbeat, Association Setup/Update/Release and Session
//!   Establishment/Modification/Deletion, requests and responses. [`Message::parse`] checks
//!   every length and never panics (fuzzed: `fuzz/`, target `pfcp_message`);
//!   [`Message::to_bytes`] refuses values their fields cannot hold. Unknown IEs are skipped,
//!   except inside a PDI, QER or URR, where they are kept ([`RawIe`]) so that the endpoint can
//!   refuse what it would otherwise ignore.
//! - [`ie`]: the information elements (Node ID, F-SEID, F-TEID with CHOOSE/CHOOSE ID, UE IP
//!   Address, Outer Header Creation/Removal, Apply Action, Failed Rule ID, ...) and the
//!   decode errors that become causes (Mandatory IE missing, Mandatory IE incorrect, Invalid
//!   length, each with the Offending IE).
//! - [`upf`]: [`Upf`], the endpoint: `handle(now, peer, bytes)` answers and hands
//!   [`FibChange`]s (and each UE address's whole forwarding before and after them,
//!   [`UeChange`]) to a [`Sessions`] implementation (the cluster), whose answer may come
//!   later ([`Upf::complete`]). Its module docs list exactly which rules are applied and which
//!   are refused with which cause; in short, downlink PDR (Core, UE address) + FAR (FORW, GTP-U
//!   outer header) and uplink PDR (Access, F-TEID, GTP-U outer header removal) + FAR (FORW)
//!   become FIB entries, and per UE a [`UePolicy`] says what the handling node enforces (QER
//!   gates and MBRs, URR counting, BUFF/NOCP buffering, End Markers). URRs are measured from
//!   the handling node's counts ([`Upf::usage`]) and reported (Session Report Request, Query
//!   URR, deletion); Downlink Data Reports follow [`Upf::downlink_data`].
//!
//! No sockets, threads or clocks: time is an argument, so a test drives a whole exchange.
//!
//! ```
//! use sb_pfcp::*;
//! use std::net::{IpAddr, Ipv4Addr, SocketAddr};
//! use std::time::Duration;
//!
//! /// A one-node cluster that installs at once.
//! #[derive(Default)]
//! struct OneNode(Vec<FibChange>, Vec<UeChange>);
//! impl Sessions for OneNode {
//!     fn place(&mut self, _: &[IpAddr]) -> Result<Placement, Failure> {
//!         Ok(Placement { node: 0, ran: Ipv4Addr::new(10, 1, 0, 1) })
//!     }
//!     fn apply(&mut self, _: Token, changes: &[FibChange], ues: &[UeChange]) -> Result<Applied, Failure> {
//!         self.0.extend_from_slice(changes);
//!         self.1.extend_from_slice(ues);
//!         Ok(Applied::Done)
//!     }
//! }
//!
//! let me = Ipv4Addr::new(10, 0, 0, 100);
//! let mut upf = Upf::new(Config::new(NodeId::Ipv4(me), RecoveryTimeStamp(3_900_000_000), me), OneNode::default());
//! let smf = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), PORT);
//! let setup = Message {
//!     seid: None,
//!     sequence: 1,
//!     priority: None,
//!     body: Body::AssociationSetupRequest(AssociationSetupRequest {
//!         node_id: NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
//!         recovery_time_stamp: RecoveryTimeStamp(3_900_000_001),
//!         up_function_features: None,
//!         cp_function_features: None,
//!     }),
//! };
//! let out = upf.handle(Duration::ZERO, smf, &setup.to_bytes()?);
//! let Body::AssociationSetupResponse(r) = Message::parse(&out[0].bytes)?.body else { panic!() };
//! assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
//!
//! // A downlink rule: packets to UE 10.45.0.7 go through GTP-U TEID 0x1000 to 192.168.1.10.
//! let ue = Ipv4Addr::new(10, 45, 0, 7);
//! let establish = Message {
//!     seid: Some(0),
//!     sequence: 2,
//!     priority: None,
//!     body: Body::SessionEstablishmentRequest(SessionEstablishmentRequest {
//!         node_id: NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
//!         cp_f_seid: FSeid { seid: 7, ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)), ipv6: None },
//!         create_pdr: vec![CreatePdr {
//!             pdr_id: PdrId(1),
//!             precedence: Precedence(100),
//!             pdi: Pdi {
//!                 source_interface: Interface::CORE,
//!                 local_f_teid: None,
//!                 network_instance: None,
//!                 ue_ip_address: Some(UeIpAddress {
//!                     ipv4: Some(UeAddr::Addr(ue)),
//!                     ipv6: None,
//!                     destination: true,
//!                     ipv6_prefix_delegation: None,
//!                     ipv6_prefix_length: None,
//!                 }),
//!                 other: vec![],
//!             },
//!             outer_header_removal: None,
//!             far_id: Some(FarId(1)),
//!             urr_ids: vec![],
//!             qer_ids: vec![],
//!         }],
//!         create_far: vec![CreateFar {
//!             far_id: FarId(1),
//!             apply_action: ApplyAction(ApplyAction::FORW),
//!             forwarding_parameters: Some(ForwardingParameters {
//!                 destination_interface: Some(Interface::ACCESS),
//!                 network_instance: None,
//!                 outer_header_creation: Some(OuterHeaderCreation::GtpuIpv4 {
//!                     teid: 0x1000,
//!                     addr: Ipv4Addr::new(192, 168, 1, 10),
//!                 }),
//!             }),
//!         }],
//!         create_urr: vec![],
//!         create_qer: vec![],
//!         create_bar: None,
//!     }),
//! };
//! let out = upf.handle(Duration::from_millis(5), smf, &establish.to_bytes()?);
//! let reply = Message::parse(&out[0].bytes)?;
//! assert_eq!(reply.seid, Some(7));
//! let Body::SessionEstablishmentResponse(r) = reply.body else { panic!() };
//! assert_eq!(r.cause, Cause::REQUEST_ACCEPTED);
//! assert_eq!(
//!     upf.sessions_impl().0,
//!     [FibChange::SetDownlink { ue: IpAddr::V4(ue), teid: 0x1000, peer: Ipv4Addr::new(192, 168, 1, 10), node: 0 }]
//! );
//! let after = UeFib {
//!     down: Some((0x1000, Ipv4Addr::new(192, 168, 1, 10))),
//!     up: None,
//!     qfi: 0,
//!     policy: UePolicy::default(),
//! };
//! assert_eq!(
//!     upf.sessions_impl().1,
//!     [UeChange { ue: IpAddr::V4(ue), node: 0, before: UeFib::default(), after }]
//! );
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Cost model: parsing allocates the typed message (vectors of rules, IE values copied);
//! the endpoint keeps per session its rules (a few hundred bytes for the usual two PDRs and two
//! FARs; an estimate, not measured) and per request-answer pair the encoded response for
//! [`Config::response_ttl`].

pub mod fuzzing;
pub mod ie;
pub mod message;
pub mod prefix;
pub mod relay;
mod responses;
pub mod sdf;
use sb_common::shapes;
mod slab;
pub mod smf;
mod teid_set;
mod ue_index;
pub mod upf;
pub mod vecmap;

pub use ie::*;
pub use message::*;
pub use relay::{Meter, MeterError, MeterLine, Relay, RelayError, RelayKind};
pub use upf::{
    malloc_chunk, Applied, Config, Failure, FibChange, Forwarding, Memory, Placement, RestoreError,
    Sessions, Stats, Token, Transmit, UeChange, UeFib, UePolicy, Upf, Usage, UsageRead,
};
