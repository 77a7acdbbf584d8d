//! The sans-IO user-plane endpoint: [`Upf::handle`] takes a datagram (and the time), answers
//! it, and turns sessions' rules into forwarding-table changes that a [`Sessions`]
//! implementation (the cluster) makes durable and installs; the answer to a request that
//! changes forwarding can wait for that ([`Applied::Pending`], then [`Upf::complete`]).
//!
//! What a session's rules become (the only forwarding this user plane does):
//! - **Downlink**: a PDR with source interface Core matching a UE IP address, whose FAR is
//!   FORW with Outer Header Creation GTP-U/UDP/IPv4 (TEID, eNodeB/gNB address) gives
//!   [`FibChange::SetDownlink`] for each UE address (IPv4 and IPv6). Among Core PDRs of one
//!   UE address the lowest precedence value wins (then the lowest PDR ID). A FORW FAR without
//!   Outer Header Creation (free5GC, before the gNB's tunnel is known) forwards nothing yet.
//! - **Uplink**: a PDR with source interface Access and a local F-TEID with Outer Header
//!   Removal GTP-U, whose FAR is FORW (no outer header creation) gives
//!   [`FibChange::SetUplink`]: from the establishment on, before any downlink tunnel. The
//!   F-TEID is CHOOSE (we allocate the TEID and answer with the handling node's `ran` IPv4
//!   address in Created PDR; PDRs with one CHOOSE ID share it) or allocated by the SMF (CH
//!   not set: honoured when no session of this endpoint holds it and its prefix is no other
//!   endpoint's allocator's; the session is placed on the node whose `ran` address it names,
//!   [`Sessions::placement_at`]; else refused by the PDR's id).
//! - **DROP** (and BUFF, NOCP: we do not buffer or notify yet; such a FAR drops, which the
//!   response does not hide: it is documented here) removes the direction's forwarding, as a
//!   closed gate of a QER does.
//! - **The PDI** may also carry QFI and 3GPP Interface Type (accepted; not matched on here),
//!   Network Instance (one instance: ignored) and SDF Filters ([`crate::sdf`]: read and
//!   checked). A PDR whose SDF filters match every packet (`permit out ip from any to
//!   assigned`) is as one without. A PDR from the CP function, or one with a narrower SDF
//!   filter whose FAR forwards to the CP function (open5gs's router solicitation path), is
//!   kept and its F-TEID allocated, but forwards nothing in the data plane yet.
//! - **QERs**: gates are applied (closed = drop); MBR, GBR and QFI are accepted and kept, not
//!   yet enforced or marked. **URRs** are accepted and kept (create, update, remove; a PDR
//!   must name existing ones), not yet measured: no usage report is sent.
//!
//! Refused with Rule creation/modification failure and the Failed Rule ID (the request changes
//! nothing): a PDR whose PDI carries any other IE (Application ID, Ethernet filters, ...), a
//! malformed SDF filter, or a narrower SDF filter that forwards anywhere but the CP function
//! (the data plane forwards a UE's packets one way per direction); a Core PDR without UE
//! address or with a local F-TEID or Outer Header Removal; an Access PDR without local F-TEID
//! or without GTP-U Outer Header Removal; a PDR without FAR, or naming a FAR, QER or URR the
//! session lacks; a UE address another session holds (an IPv4 address and its IPv4-mapped
//! IPv6 form are one address, as they are one FIB key); CHOOSE of an IPv6-only F-TEID or of a
//! UE address; a FAR whose Apply Action is not exactly one of DROP, FORW, BUFF (with NOCP), or
//! DUPL; a FORW FAR of a Core PDR with an Outer Header Creation other than GTP-U/UDP/IPv4, or
//! of an Access PDR with any; a QER with any IE but gate status, MBR, GBR, QFI and
//! correlation id, or a QFI above 63; two rules of one kind with one id.
//!
//! Other causes: a session request from an address without association: Establishment is
//! answered No established PFCP Association, Modification and Deletion are dropped; both are
//! counted. A session the sender does not hold: Session context not found. A malformed
//! request: Mandatory IE missing / Mandatory IE incorrect / Invalid length with the Offending
//! IE. More than [`Config::max_sessions`] sessions, or a [`Failure::NoResources`] from the
//! cluster: No resources available. A request for a session whose previous change is still
//! being installed: PFCP entity in congestion. A retransmitted request (the same message,
//! byte for byte, under the same sequence number from the same address within
//! [`Config::response_ttl`]) is answered from the cache and not applied twice; one still being
//! installed is dropped (the answer follows). Another request under a cached sequence number
//! (a restarted peer numbers from 1 again) is handled as new, and a peer's cached responses
//! are forgotten when it sets up an association.

use crate::ie::*;
use crate::message::*;
use crate::relay::{Relay, RelayKind};
use crate::responses::Responses;
use crate::shapes::Shapes;
use crate::slab::Slab;
use crate::teid_set::TeidSet;
use crate::ue_index::UeIndex;
use crate::vecmap::VecMap;
use smallvec::SmallVec;
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The endpoint's maps: foldhash, seeded per process (keys come from associated peers).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The endpoint's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster's Node ID (one for the whole user plane).
    pub node_id: NodeId,
    /// When the user plane started (seconds since 1900).
    pub recovery_time_stamp: RecoveryTimeStamp,
    /// The address in UP F-SEIDs (this endpoint's PFCP address).
    pub pfcp_addr: Ipv4Addr,
    /// The most sessions this endpoint holds; more get No resources available.
    pub max_sessions: usize,
    /// The top byte of every TEID and the top 16 bits of every SEID we allocate, so that the
    /// endpoints of one cluster never allocate the same (2^24 - 1 TEIDs each). A SEID's low 48
    /// bits name the slot of the endpoint's session slab its session is kept in, and the
    /// slot's generation: a deleted session's SEID names nothing after.
    pub allocator_id: u8,
    /// How long a response is kept to answer retransmissions (TS 29.244: at least N1 * T1).
    pub response_ttl: Duration,
    /// At most this many responses are kept (the oldest go first), and 256 MiB of them.
    pub response_cache_entries: usize,
    /// Whether this endpoint is one of several of one cluster: association requests are
    /// replicated to the others and session requests for SEIDs another endpoint allocated
    /// are relayed to it ([`Upf::poll_relay`], [`Upf::handle_relay`]; see [`crate::relay`]).
    pub relay: bool,
    /// Sessions this endpoint is expected to hold: its session maps and slab are allocated for that
    /// many at start and do not grow (and stall) until it holds more. 0: they grow as
    /// sessions come.
    pub expected_sessions: usize,
    /// With [`Config::relay`]: the cluster's endpoints have allocator ids `1..=endpoints` (0:
    /// not said). A session request whose SEID names none of them is answered here (Session
    /// context not found) instead of being relayed nowhere.
    pub endpoints: u8,
    /// How often the endpoint sends a Heartbeat Request to each peer that set up its
    /// association here ([`Upf::poll`]; TS 29.244 6.2.2), and how long it waits for the
    /// answer before sending again. Zero: never.
    pub heartbeat_interval: Duration,
    /// Heartbeats unanswered in a row after which a peer is counted dead
    /// ([`Stats::peers_dead`]; TS 29.244 N1).
    pub heartbeat_misses: u8,
}

impl Config {
    /// Settings with 1M sessions, allocator 0, responses kept 30 s, 65536 of them.
    pub fn new(
        node_id: NodeId,
        recovery_time_stamp: RecoveryTimeStamp,
        pfcp_addr: Ipv4Addr,
    ) -> Self {
        Config {
            node_id,
            recovery_time_stamp,
            pfcp_addr,
            max_sessions: 1 << 20,
            allocator_id: 0,
            response_ttl: Duration::from_secs(30),
            response_cache_entries: 1 << 16,
            relay: false,
            endpoints: 0,
            expected_sessions: 0,
            heartbeat_interval: Duration::from_secs(10),
            heartbeat_misses: 3,
        }
    }
}

/// Where the cluster puts a session: the handling node and its `ran` address (the address
/// uplink tunnels are sent to).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The handling node.
    pub node: u16,
    /// Its `ran` address.
    pub ran: Ipv4Addr,
}

/// One change to the cluster's forwarding tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FibChange {
    /// Packets to `ue` are tunnelled (GTP-U, `teid`) to `peer` by `node`.
    SetDownlink {
        /// The UE address (the FIB key).
        ue: IpAddr,
        /// The peer's TEID.
        teid: u32,
        /// The eNodeB/gNB.
        peer: Ipv4Addr,
        /// The handling node.
        node: u16,
    },
    /// Packets to `ue` are no longer forwarded.
    RemoveDownlink {
        /// The UE address.
        ue: IpAddr,
        /// The handling node.
        node: u16,
    },
    /// G-PDUs with `teid` arriving at `node`'s `ran` port are decapsulated; the inner source
    /// must be `ue` (and the outer source `peer`, when known).
    SetUplink {
        /// Our TEID.
        teid: u32,
        /// The UE address the inner packets come from.
        ue: IpAddr,
        /// The eNodeB/gNB, when the session has a downlink tunnel.
        peer: Option<Ipv4Addr>,
        /// The handling node.
        node: u16,
    },
    /// G-PDUs with `teid` are no longer accepted.
    RemoveUplink {
        /// Our TEID.
        teid: u32,
        /// The UE address it was for (as its [`FibChange::SetUplink`] said).
        ue: IpAddr,
        /// The handling node.
        node: u16,
    },
}

/// A UE address's forwarding in the session that holds it: the parts of its FIB entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UeFib {
    /// Downlink: the peer's TEID and the eNodeB/gNB (the entry exists only with one).
    pub down: Option<(u32, Ipv4Addr)>,
    /// Uplink: our TEID (the lowest, when several uplink PDRs name the UE address).
    pub up: Option<u32>,
    /// The session's QoS flow (its QERs' QFI, 1..=63), 0 for none (an LTE session): marked
    /// in the PDU Session Container of downlink G-PDUs, checked in uplink ones.
    pub qfi: u8,
}

impl UeFib {
    /// Whether the UE address has no forwarding at all.
    pub fn is_empty(&self) -> bool {
        self.down.is_none() && self.up.is_none()
    }
}

/// A UE address whose forwarding the changes given with it turn from `before` into `after`:
/// one per UE address they touch, so that a cluster can write each UE's whole FIB entry
/// without keeping its own copy of every session's state. A UE address belongs to one session
/// at a time, so `before` is what the cluster installed for it (or nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UeChange {
    /// The UE address (the FIB key).
    pub ue: IpAddr,
    /// The handling node.
    pub node: u16,
    /// Its forwarding before the changes.
    pub before: UeFib,
    /// And after them.
    pub after: UeFib,
}

/// Why the cluster could not apply changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The cluster is full (cause No resources available).
    #[error("no resources available")]
    NoResources,
    /// Anything else (cause System failure).
    #[error("system failure")]
    System,
}

impl Failure {
    fn cause(self) -> Cause {
        match self {
            Failure::NoResources => Cause::NO_RESOURCES_AVAILABLE,
            Failure::System => Cause::SYSTEM_FAILURE,
        }
    }
}

/// Identifies a change whose outcome the cluster reports later through [`Upf::complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub u64);

/// What [`Sessions::apply`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The changes are durable and installed: answer now.
    Done,
    /// They will be; [`Upf::complete`] with this call's token gives the answer.
    Pending,
}

/// The cluster, as the endpoint sees it.
pub trait Sessions {
    /// Chooses the handling node of a new session whose UE addresses are `ues` (never empty).
    fn place(&mut self, ues: &[IpAddr]) -> Result<Placement, Failure>;
    /// The placement whose `ran` address is `ran`, if the cluster has one: a session whose
    /// F-TEID the SMF allocated (CH not set) is placed where the gNB will send its uplink.
    /// Without it such sessions are refused.
    fn placement_at(&self, ran: Ipv4Addr) -> Option<Placement> {
        let _ = ran;
        None
    }
    /// Applies `changes` all or nothing (removals listed before additions); `ues` says what
    /// they do to each UE address they touch, whole (use either). On `Err` nothing may have
    /// changed; with [`Applied::Pending`] the same holds for an `Err` given later to
    /// [`Upf::complete`].
    fn apply(
        &mut self,
        token: Token,
        changes: &[FibChange],
        ues: &[UeChange],
    ) -> Result<Applied, Failure>;
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The destination.
    pub to: SocketAddr,
    /// The PFCP message.
    pub bytes: Vec<u8>,
}

/// Counters (plain integers; read them with [`Upf::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests received, by message type.
    pub rx: BTreeMap<u8, u64>,
    /// Responses sent, by message type and cause (0 when the message has no cause).
    pub tx: BTreeMap<(u8, u8), u64>,
    /// Datagrams whose header did not parse (dropped).
    pub malformed: u64,
    /// Messages of a type we do not handle, or responses (we send no requests): dropped.
    pub ignored: u64,
    /// Retransmitted requests answered from the cache (the same message from the same peer
    /// under the same sequence number).
    pub retransmissions: u64,
    /// Cached responses forgotten because their peer associated anew.
    pub responses_forgotten: u64,
    /// Retransmitted requests dropped while their change was still being installed.
    pub retransmissions_in_flight: u64,
    /// Session Modification/Deletion requests from addresses without association (dropped).
    pub dropped_no_association: u64,
    /// Requests rejected with No established PFCP Association.
    pub rejected_no_association: u64,
    /// Heartbeats or setups showing that a peer restarted (its Recovery Time Stamp changed).
    pub peer_restarts: u64,
    /// Heartbeat Requests we sent to peers.
    pub heartbeats_sent: u64,
    /// Peers that left [`Config::heartbeat_misses`] heartbeats in a row unanswered (each time
    /// one does).
    pub peers_dead: u64,
    /// Requests relayed to the endpoint that holds their session, and association requests
    /// replicated to the other endpoints.
    pub relayed_out: u64,
    /// Relays handled from other endpoints (requests, replicated associations, responses).
    pub relayed_in: u64,
}

/// A control-plane peer with an association.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Association {
    addr: IpAddr,
    recovery_time_stamp: RecoveryTimeStamp,
    /// Our heartbeats to it, when it set the association up with this endpoint (not one
    /// replicated from another endpoint of the cluster, which heartbeats it itself).
    heartbeat: Option<Heartbeats>,
}

/// Our heartbeats to a peer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Heartbeats {
    /// Its PFCP address (where the setup came from).
    to: SocketAddr,
    /// When the next is due.
    next: Duration,
    /// The sequence number of the one unanswered, if any.
    waiting: Option<u32>,
    /// Unanswered in a row.
    misses: u8,
    /// Counted dead (until it answers again).
    dead: bool,
}

/// A session's rules as installed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rules {
    pdrs: VecMap<u16, (CreatePdr, Option<u32>)>,
    fars: VecMap<u32, CreateFar>,
    qers: VecMap<u32, Qer>,
    urrs: VecMap<u32, Urr>,
}

/// A session being set up or changed: its rules decoded, and what they forward.
#[derive(Clone, Debug)]
struct Session {
    node_id: NodeId,
    cp_f_seid: FSeid,
    placement: Placement,
    rules: Rules,
    fwd: Forwarding,
}

impl Session {
    /// The session packed for keeping ([`pack_session`]); a rule too long to pack (a PDR whose
    /// updates made it longer than one IE holds) is refused with its id.
    fn pack(&self) -> Result<Box<[u8]>, Reject> {
        let (r, node, fseid) = (&self.rules, &self.node_id, &self.cp_f_seid);
        let pdrs = r.pdrs.values().map(|(p, t)| (p, *t));
        let (fars, qers, urrs) = (r.fars.values(), r.qers.values(), r.urrs.values());
        pack_session(node, fseid, pdrs, fars, qers, urrs).map_err(|_| {
            let alone = |p: &CreatePdr| pack_session(node, fseid, [(p, None)], [], [], []).is_err();
            let far_alone = |f: &CreateFar| pack_session(node, fseid, [], [f], [], []).is_err();
            let failed = if let Some((id, _)) = r.pdrs.iter().find(|(_, (p, _))| alone(p)) {
                FailedRuleId::Pdr(*id)
            } else if let Some((id, _)) = r.fars.iter().find(|(_, f)| far_alone(f)) {
                FailedRuleId::Far(*id)
            } else {
                FailedRuleId::Qer(r.qers.keys().next().copied().unwrap_or(0))
            };
            Reject::rule(failed)
        })
    }
}

/// An installed session as kept: its placement, the rest packed ([`Session::pack`]: the CP's
/// Node ID and F-SEID and the rules, less than the bytes of the request that made them) and
/// kept as its differences from the first packed session of its length ([`Shapes`]: an SMF's
/// sessions differ in a few fields), in the endpoint's [`Slab`] under its SEID; decoded again
/// ([`Stored::unpack`]) only when a request changes or removes it; its placement is the kept
/// bytes' first byte (one of the few placements the endpoint has seen:
/// [`Shapes::encode_with_head`]). Its forwarding follows from its rules. 8 bytes of slot and
/// the kept ones, where the decoded session took 190 and 700.
#[derive(Clone, Copy, Debug)]
struct Stored<'a> {
    /// The placement and the packed session as [`Shapes::encode_with_head`] keeps them.
    kept: &'a [u8],
}

/// A placement as a head of [`Shapes::encode_with_head`]: the node (little-endian), the
/// `ran` address.
fn placement_head(p: Placement) -> [u8; crate::shapes::HEAD] {
    let [a, b] = p.node.to_le_bytes();
    let [c, d, e, f] = p.ran.octets();
    [a, b, c, d, e, f]
}

/// The placement [`placement_head`] made `head` of.
fn placement_of_head([a, b, c, d, e, f]: [u8; crate::shapes::HEAD]) -> Placement {
    Placement {
        node: u16::from_le_bytes([a, b]),
        ran: Ipv4Addr::new(c, d, e, f),
    }
}

impl Stored<'_> {
    /// The bytes to keep of `session`, packed as `packed` (in `shapes`' scratch buffer).
    fn encode<'s>(shapes: &'s mut Shapes, session: &Session, packed: &[u8]) -> &'s [u8] {
        shapes.encode_with_head_in(placement_head(session.placement), packed)
    }

    /// The placement and the packed session.
    fn packed(&self, shapes: &Shapes) -> (Placement, Vec<u8>) {
        let mut out = Vec::with_capacity(256);
        let head = shapes
            .decode_with_head(self.kept, &mut out)
            .expect("kept sessions decode");
        (placement_of_head(head), out)
    }

    /// Whether the session is `node`'s.
    fn is_of(&self, shapes: &Shapes, node: &NodeId) -> bool {
        packed_node_id(&self.packed(shapes).1).is_ok_and(|n| n == *node)
    }

    /// The session, decoded.
    fn unpack(&self, shapes: &Shapes) -> Session {
        let (placement, packed) = self.packed(shapes);
        Self::session(placement, &packed)
    }

    /// The session of placement `placement` whose packed bytes are `packed`.
    fn session(placement: Placement, packed: &[u8]) -> Session {
        let p = unpack_session(packed).expect("packed sessions read back");
        let rules = Rules {
            pdrs: p
                .pdrs
                .into_iter()
                .map(|(r, t)| (r.pdr_id.0, (r, t)))
                .collect(),
            fars: p.fars.into_iter().map(|f| (f.far_id.0, f)).collect(),
            qers: p.qers.into_iter().map(|q| (q.qer_id.0, q)).collect(),
            urrs: p.urrs.into_iter().map(|u| (u.urr_id.0, u)).collect(),
        };
        let fwd = forwarding(&rules).expect("kept rules forward as they did when kept");
        Session {
            node_id: p.node_id,
            cp_f_seid: p.cp_f_seid,
            placement,
            rules,
            fwd,
        }
    }
}

/// A session's forwarding: what its rules become.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Forwarding {
    /// UE address -> (TEID, peer).
    pub downlink: VecMap<IpAddr, (u32, Ipv4Addr)>,
    /// Our TEID -> (UE address, peer).
    pub uplink: VecMap<u32, (IpAddr, Option<Ipv4Addr>)>,
    /// The QFI of the QERs of the session's forwarding PDRs (the first, by PDR id, whose
    /// QERs name one), 0 for none.
    pub qfi: u8,
}

impl Forwarding {
    /// The changes that turn `self` into `new` at `node`: removals first.
    pub fn diff(&self, new: &Forwarding, node: u16) -> Vec<FibChange> {
        let mut out = Vec::new();
        for ue in self
            .downlink
            .keys()
            .filter(|k| !new.downlink.contains_key(k))
        {
            out.push(FibChange::RemoveDownlink { ue: *ue, node });
        }
        for (teid, &(ue, _)) in self
            .uplink
            .iter()
            .filter(|(k, _)| !new.uplink.contains_key(k))
        {
            out.push(FibChange::RemoveUplink {
                teid: *teid,
                ue,
                node,
            });
        }
        for (ue, &(teid, peer)) in &new.downlink {
            if self.downlink.get(ue) != Some(&(teid, peer)) {
                out.push(FibChange::SetDownlink {
                    ue: *ue,
                    teid,
                    peer,
                    node,
                });
            }
        }
        for (teid, &(ue, peer)) in &new.uplink {
            if self.uplink.get(teid) != Some(&(ue, peer)) {
                out.push(FibChange::SetUplink {
                    teid: *teid,
                    ue,
                    peer,
                    node,
                });
            }
        }
        out
    }

    /// A UE address's forwarding here.
    pub fn ue(&self, ue: &IpAddr) -> UeFib {
        UeFib {
            down: self.downlink.get(ue).copied(),
            up: self
                .uplink
                .iter()
                .find(|(_, (u, _))| u == ue)
                .map(|(teid, _)| *teid),
            qfi: self.qfi,
        }
    }

    /// What turning `self` into `new` at `node` does to each UE address ([`UeChange`]), in
    /// address order; addresses whose forwarding stays are left out.
    pub fn ue_diff(&self, new: &Forwarding, node: u16) -> Vec<UeChange> {
        let mut ues: Vec<IpAddr> = [self, new]
            .iter()
            .flat_map(|f| f.downlink.keys().chain(f.uplink.values().map(|(u, _)| u)))
            .copied()
            .collect();
        ues.sort_unstable();
        ues.dedup();
        ues.into_iter()
            .map(|ue| UeChange {
                ue,
                node,
                before: self.ue(&ue),
                after: new.ue(&ue),
            })
            .filter(|c| c.before != c.after)
            .collect()
    }

    /// [`Forwarding::diff`] and [`Forwarding::ue_diff`].
    fn changes(&self, new: &Forwarding, node: u16) -> Changes {
        (self.diff(new, node), self.ue_diff(new, node))
    }
}

/// Changes for [`Sessions::apply`].
type Changes = (Vec<FibChange>, Vec<UeChange>);

/// A refusal: the cause and what it is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reject {
    cause: Cause,
    offending_ie: Option<u16>,
    failed_rule: Option<FailedRuleId>,
}

impl Reject {
    fn cause(cause: Cause) -> Self {
        Reject {
            cause,
            offending_ie: None,
            failed_rule: None,
        }
    }
    fn rule(rule: FailedRuleId) -> Self {
        Reject {
            cause: Cause::RULE_CREATION_MODIFICATION_FAILURE,
            offending_ie: None,
            failed_rule: Some(rule),
        }
    }
    fn ie(cause: Cause, ie: u16) -> Self {
        Reject {
            cause,
            offending_ie: Some(ie),
            failed_rule: None,
        }
    }
}

/// What an accepted change commits when the cluster confirms it.
#[derive(Debug)]
enum Commit {
    Establish {
        seid: u64,
        session: Box<Session>,
        packed: Box<[u8]>,
        created: Vec<CreatedPdr>,
    },
    Modify {
        seid: u64,
        session: Box<Session>,
        packed: Box<[u8]>,
        created: Vec<CreatedPdr>,
        /// The UE addresses and TEIDs the session held before.
        old_ues: Few<[u8; 16]>,
        old_teids: Few<u32>,
    },
    Delete {
        seid: u64,
    },
    /// Removes every session of `node`; then the association is gone (release) or set up anew.
    Release {
        node: NodeId,
        setup: Option<Box<(Association, Message)>>,
    },
}

#[derive(Debug)]
struct Pending {
    to: SocketAddr,
    sequence: u32,
    /// The digest of the request's bytes (with `to` and `sequence`, what names the request).
    digest: u64,
    /// The SEID of the response header.
    reply_seid: Option<u64>,
    /// The message type of the request.
    request: u8,
    commit: Commit,
}

/// What [`Upf::memory`] counts: each map's hash table from its capacity (every bucket and
/// hashbrown's control byte; a table presized for the node's share is touched as sessions
/// land in it at random), and what the entries point to as held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// The session slab's slots (UP SEID -> where the session is kept: 8 bytes per slot
    /// used) and its list of free slots.
    pub sessions: usize,
    /// The sessions' kept rules (their bytes): each packed session's differences from the
    /// first one of its length.
    pub packed: usize,
    /// What holds them: the slab's pools, 64 KiB chunks of records of one length each, and
    /// the allocations of the few kept sessions longer than 255 bytes as glibc's malloc sizes
    /// them ([`malloc_chunk`]).
    pub packed_chunks: usize,
    /// The UE address index.
    pub ue_index: usize,
    /// The set of uplink TEIDs given out.
    pub teids: usize,
    /// The response cache (its map and the responses' bytes).
    pub responses: usize,
    /// The templates the kept sessions are differences from.
    pub shapes: usize,
}

/// The bytes glibc's malloc takes for an allocation of `n` bytes on 64-bit Linux: `n` plus
/// its 8-byte size field, rounded up to 16, at least 32.
pub fn malloc_chunk(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).next_multiple_of(16).max(32)
    }
}

/// The PFCP endpoint of the user plane. See the module docs for what it accepts.
pub struct Upf<S> {
    config: Config,
    sessions_impl: S,
    associations: HashMap<NodeId, Association>,
    by_addr: HashMap<IpAddr, NodeId>,
    /// The installed sessions by UP SEID (and the SEIDs of those being established).
    sessions: Slab,
    /// Which session holds each UE address (installed or being installed), by [`ue_slot`].
    ue_index: UeIndex,
    teids: TeidSet,
    next_teid: u32,
    /// Sessions (and associations, by node) with a change being installed.
    busy: HashSet<u64>,
    busy_nodes: HashSet<NodeId>,
    /// Establishments being installed (they count against `max_sessions`).
    establishing: usize,
    pending: HashMap<Token, Pending>,
    /// Requests being installed: (peer, sequence number, digest of the request's bytes).
    in_flight: HashSet<(SocketAddr, u32, u64)>,
    /// The digest of the request being handled ([`Responses::digest`]).
    digest: u64,
    /// Responses to recent requests, for their retransmissions.
    cache: Responses,
    /// The templates of kept sessions.
    shapes: Shapes,
    next_token: u64,
    /// The sequence number of our next request (heartbeats), 24 bits, never 0.
    next_seq: u32,
    stats: Stats,
    /// Relays for other endpoints, drained by [`Upf::poll_relay`].
    relays: VecDeque<Relay>,
    /// Relayed requests (peer, sequence) whose response goes back to this endpoint.
    via: HashMap<(SocketAddr, u32), u8>,
    /// Replicated requests (peer, sequence) whose response nobody is sent.
    silent: HashSet<(SocketAddr, u32)>,
    /// Handling a relay: nothing is relayed on.
    replaying: bool,
}

impl<S: Sessions> Upf<S> {
    /// An endpoint with no association.
    pub fn new(config: Config, sessions: S) -> Self {
        let n = config.expected_sessions;
        let teids = TeidSet::new(config.allocator_id);
        let slab = Slab::new(config.allocator_id, n);
        let cache = Responses::new(config.response_ttl, config.response_cache_entries);
        Upf {
            config,
            sessions_impl: sessions,
            associations: HashMap::default(),
            by_addr: HashMap::default(),
            sessions: slab,
            ue_index: UeIndex::with_capacity(n),
            teids,
            next_teid: 1,
            busy: HashSet::default(),
            busy_nodes: HashSet::default(),
            establishing: 0,
            pending: HashMap::default(),
            in_flight: HashSet::default(),
            digest: 0,
            cache,
            shapes: Shapes::default(),
            next_token: 1,
            next_seq: 1,
            stats: Stats::default(),
            relays: VecDeque::new(),
            via: HashMap::default(),
            silent: HashSet::default(),
            replaying: false,
        }
    }

    /// The cluster side.
    pub fn sessions_impl(&self) -> &S {
        &self.sessions_impl
    }

    /// The cluster side, mutable.
    pub fn sessions_impl_mut(&mut self) -> &mut S {
        &mut self.sessions_impl
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Installed sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// [`Upf::memory`] with the kept bytes counted again by walking every session (what the
    /// running count must equal; for tests and audits: it takes time in the sessions).
    pub fn recount_memory(&self) -> Memory {
        let packed = self.sessions.iter().map(|(_, kept)| kept.len()).sum();
        Memory {
            packed,
            ..self.memory()
        }
    }

    /// Bytes the endpoint holds for its sessions, by structure.
    pub fn memory(&self) -> Memory {
        Memory {
            sessions: self.sessions.slot_bytes(),
            packed: self.sessions.held(),
            packed_chunks: self.sessions.record_bytes(),
            ue_index: self.ue_index.bytes(),
            teids: self.teids.bytes(),
            responses: self.cache.memory(),
            shapes: self.shapes.bytes(),
        }
    }

    /// Peers with an association.
    pub fn association_count(&self) -> usize {
        self.associations.len()
    }

    /// Whether `node` has an association.
    pub fn is_associated(&self, node: &NodeId) -> bool {
        self.associations.contains_key(node)
    }

    /// The forwarding and placement of installed session `up_seid`.
    pub fn session(&self, up_seid: u64) -> Option<(Forwarding, Placement)> {
        self.sessions.get(up_seid).map(|kept| {
            let session = Stored { kept }.unpack(&self.shapes);
            (session.fwd, session.placement)
        })
    }

    /// The UP SEIDs of the installed sessions.
    pub fn session_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.sessions.iter().map(|(seid, _)| seid)
    }

    /// Handles one datagram from `from` at time `now` (any fixed epoch): the datagrams to
    /// send back. A datagram may hold several messages (the FO flag).
    pub fn handle(&mut self, now: Duration, from: SocketAddr, bytes: &[u8]) -> Vec<Transmit> {
        self.cache.expire(now);
        let mut out = Vec::new();
        let mut rest = bytes;
        loop {
            let (header, body, after) = match Header::parse(rest) {
                Ok(x) => x,
                Err(DecodeError::Version(_)) => {
                    if let Some(sequence) = Header::peek_sequence(rest) {
                        let msg = Message {
                            seid: None,
                            sequence,
                            priority: None,
                            body: Body::VersionNotSupportedResponse,
                        };
                        self.send(&mut out, now, from, None, msg);
                    }
                    return out;
                }
                Err(_) => {
                    self.stats.malformed += 1;
                    return out;
                }
            };
            let whole = &rest[..rest.len() - after.len()];
            self.message(now, from, header, body, whole, &mut out);
            if !header.follow_on || after.is_empty() {
                return out;
            }
            rest = after;
        }
    }

    /// Reports the outcome of a change [`Sessions::apply`] left pending: the response to send.
    /// An unknown token gives nothing.
    pub fn complete(
        &mut self,
        now: Duration,
        token: Token,
        result: Result<(), Failure>,
    ) -> Vec<Transmit> {
        self.cache.expire(now);
        let mut out = Vec::new();
        if let Some(p) = self.pending.remove(&token) {
            self.in_flight.remove(&(p.to, p.sequence, p.digest));
            let msg = self.finish(p.request, p.reply_seid, p.sequence, p.commit, result);
            self.send(&mut out, now, p.to, Some((p.sequence, p.digest)), msg);
        }
        out
    }

    /// Sends `msg` to `to`, caching it as the answer to request `cache` (its sequence number
    /// and digest).
    fn send(
        &mut self,
        out: &mut Vec<Transmit>,
        now: Duration,
        to: SocketAddr,
        cache: Option<(u32, u64)>,
        msg: Message,
    ) {
        let t = msg.body.message_type();
        let cause = match &msg.body {
            Body::AssociationSetupResponse(b) => b.cause.0,
            Body::AssociationUpdateResponse(b) => b.cause.0,
            Body::AssociationReleaseResponse(b) => b.cause.0,
            Body::SessionEstablishmentResponse(b) => b.cause.0,
            Body::SessionModificationResponse(b) => b.cause.0,
            Body::SessionDeletionResponse(b) => b.cause.0,
            _ => 0,
        };
        *self.stats.tx.entry((t, cause)).or_default() += 1;
        // Our messages are always buildable: sequence numbers come from 24-bit fields, and
        // every value from a parsed message or from us fits its field.
        let Ok(bytes) = msg.to_bytes() else {
            return;
        };
        if let Some((seq, digest)) = cache {
            self.cache.insert(now, to, seq, digest, &bytes);
        }
        self.emit(out, to, cache.map(|c| c.0), bytes);
    }

    /// Sends the response `bytes` to request `seq` of `to`: to the peer, back to the endpoint
    /// that relayed the request, or nowhere for a replicated request.
    fn emit(&mut self, out: &mut Vec<Transmit>, to: SocketAddr, seq: Option<u32>, bytes: Vec<u8>) {
        if let Some(seq) = seq {
            if let Some(endpoint) = self.via.remove(&(to, seq)) {
                self.relays.push_back(Relay {
                    to: endpoint,
                    kind: RelayKind::Response,
                    peer: to,
                    bytes,
                });
                return;
            }
            if self.silent.remove(&(to, seq)) {
                return;
            }
        }
        out.push(Transmit { to, bytes });
    }

    /// The allocator id of the endpoint holding the session a session request from an
    /// associated peer is about, when that is another endpoint.
    fn home_elsewhere(&self, from: SocketAddr, t: u8, seid: Option<u64>) -> Option<u8> {
        let seid = seid?;
        let home = (seid >> 48) as u8;
        let relayed = matches!(
            t,
            msg_type::SESSION_MODIFICATION_REQUEST | msg_type::SESSION_DELETION_REQUEST
        ) && seid >> 56 == 0
            && home != 0
            && (self.config.endpoints == 0 || home <= self.config.endpoints)
            && home != self.config.allocator_id
            && !self.sessions.contains(seid)
            && self.by_addr.contains_key(&from.ip());
        relayed.then_some(home)
    }

    /// The next relay for other endpoints of the cluster (with [`Config::relay`]): send each
    /// to the endpoint it names (`to`), or to every other endpoint when `to` is 0.
    pub fn poll_relay(&mut self) -> Option<Relay> {
        self.relays.pop_front()
    }

    /// Handles a relay from endpoint `from` (its allocator id; authenticated by the caller,
    /// e.g. with [`Relay::parse`]): the datagrams to send to peers. Afterwards drain
    /// [`Upf::poll_relay`] (a relayed request's response goes back as a relay).
    pub fn handle_relay(&mut self, now: Duration, from: u8, relay: Relay) -> Vec<Transmit> {
        self.stats.relayed_in += 1;
        let peer = relay.peer;
        let key = Header::peek_sequence(&relay.bytes).map(|seq| (peer, seq));
        // A relay holds one request, whole: its digest is the one `message` computes.
        let digest = self.cache.digest(&relay.bytes);
        match relay.kind {
            RelayKind::Response => {
                return vec![Transmit {
                    to: peer,
                    bytes: relay.bytes,
                }];
            }
            RelayKind::Association => {
                if let Some(k) = key {
                    self.silent.insert(k);
                }
            }
            RelayKind::Session => {
                if let Some(k) = key {
                    self.via.insert(k, from);
                }
            }
        }
        self.replaying = true;
        let out = self.handle(now, peer, &relay.bytes);
        self.replaying = false;
        // A request answered at once, or never, leaves no route behind.
        if let Some(k) = key {
            if !self.in_flight.contains(&(k.0, k.1, digest)) {
                self.via.remove(&k);
                self.silent.remove(&k);
            }
        }
        out
    }

    fn message(
        &mut self,
        now: Duration,
        from: SocketAddr,
        header: Header,
        body: &[u8],
        whole: &[u8],
        out: &mut Vec<Transmit>,
    ) {
        let t = header.message_type;
        if t == msg_type::HEARTBEAT_RESPONSE {
            self.heartbeat_answered(from, header.sequence, body);
            return;
        }
        if !msg_type::is_request(t) {
            self.stats.ignored += 1;
            return;
        }
        let digest = self.cache.digest(whole);
        let key = (from, header.sequence, digest);
        if let Some(bytes) = self.cache.get(from, header.sequence, digest) {
            self.stats.retransmissions += 1;
            self.emit(out, from, Some(header.sequence), bytes);
            return;
        }
        if self.in_flight.contains(&key) {
            self.stats.retransmissions_in_flight += 1;
            return;
        }
        if self.config.relay && !self.replaying {
            if let Some(home) = self.home_elsewhere(from, t, header.seid) {
                self.stats.relayed_out += 1;
                self.relays.push_back(Relay {
                    to: home,
                    kind: RelayKind::Session,
                    peer: from,
                    bytes: whole.to_vec(),
                });
                return;
            }
            if matches!(
                t,
                msg_type::ASSOCIATION_SETUP_REQUEST
                    | msg_type::ASSOCIATION_UPDATE_REQUEST
                    | msg_type::ASSOCIATION_RELEASE_REQUEST
            ) {
                self.stats.relayed_out += 1;
                self.relays.push_back(Relay {
                    to: 0,
                    kind: RelayKind::Association,
                    peer: from,
                    bytes: whole.to_vec(),
                });
            }
        }
        self.digest = digest;
        let decoded = Body::decode(t, body);
        if matches!(decoded, Err(DecodeError::UnknownMessage(_))) {
            self.stats.ignored += 1;
            return;
        }
        *self.stats.rx.entry(t).or_default() += 1;
        let seq = header.sequence;
        let reply = match decoded {
            Err(e) => {
                let (cause, ie) = match e {
                    DecodeError::MissingIe(ie) => (Cause::MANDATORY_IE_MISSING, ie),
                    DecodeError::InvalidIe(ie) => (Cause::MANDATORY_IE_INCORRECT, ie),
                    DecodeError::IeLength(ie) => (Cause::INVALID_LENGTH, ie),
                    _ => (Cause::REQUEST_REJECTED, 0),
                };
                // A session request is answered with the SEID the peer knows us by when the
                // session is its, else 0 (the CP F-SEID of a malformed request is unknown).
                let reply_seid = header.seid.map(|s| self.reply_seid(from, s));
                if t == msg_type::HEARTBEAT_REQUEST
                    || (msg_type::is_session(t) && !self.by_addr.contains_key(&from.ip()))
                {
                    // Heartbeat Response has no cause; session requests from strangers are
                    // dropped as below.
                    if msg_type::is_session(t) {
                        self.stats.dropped_no_association += 1;
                    } else {
                        self.stats.malformed += 1;
                    }
                    return;
                }
                Some(self.reject(t, reply_seid, seq, Reject::ie(cause, ie)))
            }
            Ok(Body::HeartbeatRequest(h)) => {
                if let Some(node) = self.by_addr.get(&from.ip()) {
                    let a = self
                        .associations
                        .get_mut(node)
                        .expect("by_addr names associations");
                    if a.recovery_time_stamp != h.recovery_time_stamp {
                        a.recovery_time_stamp = h.recovery_time_stamp;
                        self.stats.peer_restarts += 1;
                    }
                }
                Some(Message {
                    seid: None,
                    sequence: seq,
                    priority: None,
                    body: Body::HeartbeatResponse(Heartbeat {
                        recovery_time_stamp: self.config.recovery_time_stamp,
                    }),
                })
            }
            Ok(Body::AssociationSetupRequest(r)) => self.association_setup(now, from, seq, r),
            Ok(Body::AssociationUpdateRequest(r)) => Some(self.association_update(from, seq, r)),
            Ok(Body::AssociationReleaseRequest(r)) => self.association_release(from, seq, r),
            Ok(Body::SessionEstablishmentRequest(r)) => self.establish(from, seq, r),
            Ok(Body::SessionModificationRequest(r)) => {
                self.modify(from, seq, header.seid.unwrap_or(0), r)
            }
            Ok(Body::SessionDeletionRequest) => self.delete(from, seq, header.seid.unwrap_or(0)),
            Ok(_) => {
                self.stats.ignored += 1;
                None
            }
        };
        if let Some(msg) = reply {
            self.send(out, now, from, Some((seq, digest)), msg);
        }
    }

    /// Sends the heartbeats due at `now` (TS 29.244 6.2.2) to the peers that set up their
    /// association with this endpoint, every [`Config::heartbeat_interval`]; a peer that
    /// leaves [`Config::heartbeat_misses`] in a row unanswered is counted dead
    /// ([`Stats::peers_dead`]) and heartbeated on. Its association and sessions stay: a peer
    /// that comes back with a new Recovery Time Stamp sets up its association again, which
    /// removes them (TS 29.244 6.2.6.2.2; we offer no session retention). Call it every
    /// second or so.
    pub fn poll(&mut self, now: Duration) -> Vec<Transmit> {
        let mut out = Vec::new();
        let interval = self.config.heartbeat_interval;
        if interval.is_zero() {
            return out;
        }
        let recovery_time_stamp = self.config.recovery_time_stamp;
        for a in self.associations.values_mut() {
            let Some(h) = &mut a.heartbeat else { continue };
            if now < h.next {
                continue;
            }
            if h.waiting.is_some() {
                h.misses = h.misses.saturating_add(1);
                if h.misses >= self.config.heartbeat_misses && !h.dead {
                    h.dead = true;
                    self.stats.peers_dead += 1;
                }
            }
            let seq = self.next_seq;
            self.next_seq = self.next_seq % 0xff_ffff + 1;
            h.waiting = Some(seq);
            h.next = now + interval;
            let msg = Message {
                seid: None,
                sequence: seq,
                priority: None,
                body: Body::HeartbeatRequest(Heartbeat {
                    recovery_time_stamp,
                }),
            };
            if let Ok(bytes) = msg.to_bytes() {
                self.stats.heartbeats_sent += 1;
                out.push(Transmit { to: h.to, bytes });
            }
        }
        out
    }

    /// A Heartbeat Response from `from` to our request `seq`: the peer lives; a changed
    /// Recovery Time Stamp counts a restart.
    fn heartbeat_answered(&mut self, from: SocketAddr, seq: u32, body: &[u8]) {
        let Ok(Body::HeartbeatResponse(r)) = Body::decode(msg_type::HEARTBEAT_RESPONSE, body)
        else {
            self.stats.malformed += 1;
            return;
        };
        let a = (self.by_addr.get(&from.ip())).and_then(|n| self.associations.get_mut(n));
        let Some(a) = a else {
            self.stats.ignored += 1;
            return;
        };
        match &mut a.heartbeat {
            Some(h) if h.waiting == Some(seq) => {
                h.waiting = None;
                h.misses = 0;
                h.dead = false;
            }
            _ => {
                self.stats.ignored += 1;
                return;
            }
        }
        if a.recovery_time_stamp != r.recovery_time_stamp {
            a.recovery_time_stamp = r.recovery_time_stamp;
            self.stats.peer_restarts += 1;
        }
    }

    /// Whether the peer of `node`'s association is counted dead (its heartbeats unanswered).
    pub fn is_peer_dead(&self, node: &NodeId) -> bool {
        (self.associations.get(node))
            .and_then(|a| a.heartbeat.as_ref())
            .is_some_and(|h| h.dead)
    }

    /// The response header SEID for a request about `up_seid` from `from`.
    fn reply_seid(&self, from: SocketAddr, up_seid: u64) -> u64 {
        self.owned(from, up_seid)
            .and_then(|(_, packed)| packed_cp_seid(&packed).ok())
            .unwrap_or(0)
    }

    fn our_node(&self) -> NodeId {
        self.config.node_id.clone()
    }

    fn up_features() -> UpFunctionFeatures {
        UpFunctionFeatures(vec![0x10, 0x00]) // FTUP
    }

    /// The rejection response to a request of type `t`.
    fn reject(&self, t: u8, reply_seid: Option<u64>, sequence: u32, r: Reject) -> Message {
        let node_id = self.our_node();
        let offending_ie = r.offending_ie.map(OffendingIe);
        let body = match t {
            msg_type::ASSOCIATION_SETUP_REQUEST => {
                Body::AssociationSetupResponse(AssociationSetupResponse {
                    node_id,
                    cause: r.cause,
                    recovery_time_stamp: self.config.recovery_time_stamp,
                    up_function_features: None,
                    cp_function_features: None,
                })
            }
            msg_type::ASSOCIATION_UPDATE_REQUEST => {
                Body::AssociationUpdateResponse(AssociationUpdateResponse {
                    node_id,
                    cause: r.cause,
                    up_function_features: None,
                    cp_function_features: None,
                })
            }
            msg_type::ASSOCIATION_RELEASE_REQUEST => {
                Body::AssociationReleaseResponse(AssociationReleaseResponse {
                    node_id,
                    cause: r.cause,
                })
            }
            msg_type::SESSION_ESTABLISHMENT_REQUEST => {
                Body::SessionEstablishmentResponse(SessionEstablishmentResponse {
                    node_id,
                    cause: r.cause,
                    offending_ie,
                    up_f_seid: None,
                    created_pdr: vec![],
                    failed_rule_id: r.failed_rule,
                })
            }
            msg_type::SESSION_MODIFICATION_REQUEST => {
                Body::SessionModificationResponse(SessionModificationResponse {
                    cause: r.cause,
                    offending_ie,
                    created_pdr: vec![],
                    failed_rule_id: r.failed_rule,
                })
            }
            _ => Body::SessionDeletionResponse(SessionDeletionResponse {
                cause: r.cause,
                offending_ie,
            }),
        };
        Message {
            seid: reply_seid,
            sequence,
            priority: None,
            body,
        }
    }

    fn association_setup(
        &mut self,
        now: Duration,
        from: SocketAddr,
        seq: u32,
        r: AssociationSetupRequest,
    ) -> Option<Message> {
        let t = msg_type::ASSOCIATION_SETUP_REQUEST;
        if self.busy_nodes.contains(&r.node_id) {
            return Some(self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        // The peer associates anew: what its previous process was answered answers nothing
        // of the new one's (which numbers its requests from 1 again).
        self.stats.responses_forgotten += self.cache.forget(from.ip()) as u64;
        let interval = self.config.heartbeat_interval;
        let association = Association {
            addr: from.ip(),
            recovery_time_stamp: r.recovery_time_stamp,
            heartbeat: (!self.replaying && !interval.is_zero()).then_some(Heartbeats {
                to: from,
                next: now + interval,
                waiting: None,
                misses: 0,
                dead: false,
            }),
        };
        let accepted = Message {
            seid: None,
            sequence: seq,
            priority: None,
            body: Body::AssociationSetupResponse(AssociationSetupResponse {
                node_id: self.our_node(),
                cause: Cause::REQUEST_ACCEPTED,
                recovery_time_stamp: self.config.recovery_time_stamp,
                up_function_features: Some(Self::up_features()),
                cp_function_features: None,
            }),
        };
        if let Some(old) = self.associations.get(&r.node_id) {
            if old.recovery_time_stamp != r.recovery_time_stamp {
                self.stats.peer_restarts += 1;
            }
            // TS 29.244 6.2.6.2.2: a new setup from an associated peer replaces the
            // association, and its sessions go (we do not offer session retention).
            if self.sessions_of(&r.node_id).next().is_some() {
                let commit = Commit::Release {
                    node: r.node_id.clone(),
                    setup: Some(Box::new((association, accepted))),
                };
                return self.apply_release(from, seq, t, r.node_id, commit);
            }
        }
        self.install_association(r.node_id, association);
        Some(accepted)
    }

    fn install_association(&mut self, node: NodeId, association: Association) {
        if let Some(old) = self.associations.remove(&node) {
            self.by_addr.remove(&old.addr);
        }
        // An address names one association: a new node at an old address replaces it (its
        // sessions stay until that node is released).
        if let Some(prev) = self.by_addr.insert(association.addr, node.clone()) {
            if prev != node {
                if let Some(a) = self.associations.get_mut(&prev) {
                    a.addr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
                }
            }
        }
        self.associations.insert(node, association);
    }

    /// The sessions of `node`'s association: a walk over every session (an association's
    /// setup and release are rare; an index per association cost 14 bytes per session).
    fn sessions_of<'a>(&'a self, node: &'a NodeId) -> impl Iterator<Item = u64> + 'a {
        (self.sessions.iter())
            .filter(move |(_, kept)| Stored { kept }.is_of(&self.shapes, node))
            .map(|(seid, _)| seid)
    }

    fn association_update(
        &mut self,
        from: SocketAddr,
        seq: u32,
        r: AssociationUpdateRequest,
    ) -> Message {
        let t = msg_type::ASSOCIATION_UPDATE_REQUEST;
        if self.by_addr.get(&from.ip()) != Some(&r.node_id) {
            self.stats.rejected_no_association += 1;
            return self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::NO_ESTABLISHED_PFCP_ASSOCIATION),
            );
        }
        Message {
            seid: None,
            sequence: seq,
            priority: None,
            body: Body::AssociationUpdateResponse(AssociationUpdateResponse {
                node_id: self.our_node(),
                cause: Cause::REQUEST_ACCEPTED,
                up_function_features: Some(Self::up_features()),
                cp_function_features: None,
            }),
        }
    }

    fn association_release(
        &mut self,
        from: SocketAddr,
        seq: u32,
        r: AssociationReleaseRequest,
    ) -> Option<Message> {
        let t = msg_type::ASSOCIATION_RELEASE_REQUEST;
        if self.by_addr.get(&from.ip()) != Some(&r.node_id) {
            self.stats.rejected_no_association += 1;
            return Some(self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::NO_ESTABLISHED_PFCP_ASSOCIATION),
            ));
        }
        if self.busy_nodes.contains(&r.node_id)
            || self.sessions_of(&r.node_id).any(|s| self.busy.contains(&s))
        {
            return Some(self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        let commit = Commit::Release {
            node: r.node_id.clone(),
            setup: None,
        };
        self.apply_release(from, seq, t, r.node_id, commit)
    }

    /// Removes every session of `node` through the cluster, then `commit`s.
    fn apply_release(
        &mut self,
        from: SocketAddr,
        seq: u32,
        t: u8,
        node: NodeId,
        commit: Commit,
    ) -> Option<Message> {
        if self.sessions_of(&node).any(|s| self.busy.contains(&s)) {
            return Some(self.reject(
                t,
                None,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        let mut seids: Vec<u64> = self.sessions_of(&node).collect();
        seids.sort_unstable();
        let mut changes: Changes = Default::default();
        for s in &seids {
            let kept = self
                .sessions
                .get(*s)
                .expect("sessions_of gives kept sessions");
            let sess = Stored { kept }.unpack(&self.shapes);
            let (fib, ues) = sess
                .fwd
                .changes(&Forwarding::default(), sess.placement.node);
            changes.0.extend(fib);
            changes.1.extend(ues);
        }
        self.busy_nodes.insert(node);
        self.busy.extend(seids);
        self.apply(from, seq, t, None, changes, commit)
    }

    /// Hands `changes` to the cluster; commits now, later, or answers the failure.
    fn apply(
        &mut self,
        from: SocketAddr,
        seq: u32,
        t: u8,
        reply_seid: Option<u64>,
        changes: Changes,
        commit: Commit,
    ) -> Option<Message> {
        let token = Token(self.next_token);
        self.next_token += 1;
        let result = if changes.0.is_empty() && changes.1.is_empty() {
            Ok(Applied::Done)
        } else {
            self.sessions_impl.apply(token, &changes.0, &changes.1)
        };
        match result {
            Ok(Applied::Pending) => {
                self.in_flight.insert((from, seq, self.digest));
                self.pending.insert(
                    token,
                    Pending {
                        to: from,
                        sequence: seq,
                        digest: self.digest,
                        reply_seid,
                        request: t,
                        commit,
                    },
                );
                None
            }
            Ok(Applied::Done) => Some(self.finish(t, reply_seid, seq, commit, Ok(()))),
            Err(f) => Some(self.finish(t, reply_seid, seq, commit, Err(f))),
        }
    }

    /// Commits (or abandons) a change and gives the response.
    fn finish(
        &mut self,
        t: u8,
        reply_seid: Option<u64>,
        seq: u32,
        commit: Commit,
        result: Result<(), Failure>,
    ) -> Message {
        match commit {
            Commit::Establish {
                seid,
                session,
                packed,
                created,
            } => {
                self.busy.remove(&seid);
                self.establishing -= 1;
                if let Err(f) = result {
                    self.forget(&session, seid);
                    self.sessions.unreserve(seid);
                    return self.reject(t, reply_seid, seq, Reject::cause(f.cause()));
                }
                let up_f_seid = FSeid {
                    seid,
                    ipv4: Some(self.config.pfcp_addr),
                    ipv6: None,
                };
                let kept = Stored::encode(&mut self.shapes, &session, &packed);
                self.sessions.keep(seid, kept);
                Message {
                    seid: reply_seid,
                    sequence: seq,
                    priority: None,
                    body: Body::SessionEstablishmentResponse(SessionEstablishmentResponse {
                        node_id: self.our_node(),
                        cause: Cause::REQUEST_ACCEPTED,
                        offending_ie: None,
                        up_f_seid: Some(up_f_seid),
                        created_pdr: created,
                        failed_rule_id: None,
                    }),
                }
            }
            Commit::Modify {
                seid,
                session,
                packed,
                created,
                old_ues,
                old_teids,
            } => {
                self.busy.remove(&seid);
                if let Err(f) = result {
                    // Free what the new rules reserved and the old ones do not hold.
                    for ue in ue_slots(&session.rules)
                        .iter()
                        .filter(|u| !old_ues.contains(u))
                    {
                        self.ue_index.remove(ue);
                    }
                    for teid in teids_of(&session.rules)
                        .iter()
                        .filter(|t| !old_teids.contains(t))
                    {
                        self.teids.remove(*teid);
                    }
                    return self.reject(t, reply_seid, seq, Reject::cause(f.cause()));
                }
                let (new_ues, new_teids) = (ue_slots(&session.rules), teids_of(&session.rules));
                let kept = Stored::encode(&mut self.shapes, &session, &packed);
                self.sessions.keep(seid, kept);
                for ue in old_ues.iter().filter(|u| !new_ues.contains(u)) {
                    self.ue_index.remove(ue);
                }
                for teid in old_teids.iter().filter(|t| !new_teids.contains(t)) {
                    self.teids.remove(*teid);
                }
                Message {
                    seid: reply_seid,
                    sequence: seq,
                    priority: None,
                    body: Body::SessionModificationResponse(SessionModificationResponse {
                        cause: Cause::REQUEST_ACCEPTED,
                        offending_ie: None,
                        created_pdr: created,
                        failed_rule_id: None,
                    }),
                }
            }
            Commit::Delete { seid } => {
                self.busy.remove(&seid);
                if let Err(f) = result {
                    return self.reject(t, reply_seid, seq, Reject::cause(f.cause()));
                }
                self.remove_session(seid);
                Message {
                    seid: reply_seid,
                    sequence: seq,
                    priority: None,
                    body: Body::SessionDeletionResponse(SessionDeletionResponse {
                        cause: Cause::REQUEST_ACCEPTED,
                        offending_ie: None,
                    }),
                }
            }
            Commit::Release { node, setup } => {
                self.busy_nodes.remove(&node);
                let seids: Vec<u64> = self.sessions_of(&node).collect();
                for s in &seids {
                    self.busy.remove(s);
                }
                if let Err(f) = result {
                    return self.reject(t, None, seq, Reject::cause(f.cause()));
                }
                for s in seids {
                    self.remove_session(s);
                }
                match setup.map(|b| *b) {
                    Some((association, accepted)) => {
                        self.install_association(node, association);
                        accepted
                    }
                    None => {
                        if let Some(a) = self.associations.remove(&node) {
                            if self.by_addr.get(&a.addr) == Some(&node) {
                                self.by_addr.remove(&a.addr);
                            }
                        }
                        Message {
                            seid: None,
                            sequence: seq,
                            priority: None,
                            body: Body::AssociationReleaseResponse(AssociationReleaseResponse {
                                node_id: self.our_node(),
                                cause: Cause::REQUEST_ACCEPTED,
                            }),
                        }
                    }
                }
            }
        }
    }

    fn remove_session(&mut self, seid: u64) {
        if let Some(kept) = self.sessions.get(seid) {
            let session = Stored { kept }.unpack(&self.shapes);
            // While its slot still names it (the UE index holds slots).
            self.forget(&session, seid);
            self.sessions.remove(seid);
        }
    }

    /// The session (reserved or kept) holding UE address `ue` ([`ue_slot`]).
    fn ue_holder(&self, ue: &[u8; 16]) -> Option<u64> {
        self.sessions.seid_at(self.ue_index.get(ue)?)
    }

    /// Frees the UE addresses and TEIDs `s` holds (call while its SEID is reserved or kept).
    fn forget(&mut self, s: &Session, seid: u64) {
        for ue in ue_slots(&s.rules) {
            if self.ue_holder(&ue) == Some(seid) {
                self.ue_index.remove(&ue);
            }
        }
        for teid in teids_of(&s.rules) {
            self.teids.remove(teid);
        }
    }

    /// The association of `from`, if any.
    fn association_of(&self, from: SocketAddr) -> Option<NodeId> {
        self.by_addr.get(&from.ip()).cloned()
    }

    fn establish(
        &mut self,
        from: SocketAddr,
        seq: u32,
        r: SessionEstablishmentRequest,
    ) -> Option<Message> {
        let t = msg_type::SESSION_ESTABLISHMENT_REQUEST;
        let reply_seid = Some(r.cp_f_seid.seid);
        let Some(node) = self.association_of(from) else {
            self.stats.rejected_no_association += 1;
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::NO_ESTABLISHED_PFCP_ASSOCIATION),
            ));
        };
        if self.busy_nodes.contains(&node) {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        if self.sessions.len() + self.establishing >= self.config.max_sessions {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::NO_RESOURCES_AVAILABLE),
            ));
        }
        if r.cp_f_seid.ipv4.is_none() && r.cp_f_seid.ipv6.is_none() {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::ie(Cause::MANDATORY_IE_INCORRECT, ie_type::F_SEID),
            ));
        }
        let mut rules = Rules {
            pdrs: VecMap::new(),
            fars: VecMap::new(),
            qers: VecMap::new(),
            urrs: VecMap::new(),
        };
        let mut created_ids = Vec::new();
        let built = (|| {
            for u in r.create_urr {
                let id = u.urr_id.0;
                if rules.urrs.insert(id, u).is_some() {
                    return Err(Reject::rule(FailedRuleId::Urr(id)));
                }
            }
            for q in r.create_qer {
                check_qer(&q)?;
                let id = q.qer_id.0;
                if rules.qers.insert(id, q).is_some() {
                    return Err(Reject::rule(FailedRuleId::Qer(id)));
                }
            }
            for f in r.create_far {
                let id = f.far_id.0;
                if rules.fars.insert(id, f).is_some() {
                    return Err(Reject::rule(FailedRuleId::Far(id)));
                }
            }
            for p in r.create_pdr {
                let id = p.pdr_id.0;
                created_ids.push(id);
                if rules.pdrs.insert(id, (p, None)).is_some() {
                    return Err(Reject::rule(FailedRuleId::Pdr(id)));
                }
            }
            Ok(())
        })();
        if let Err(rej) = built {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        let ues = ues_of(&rules);
        if ues.is_empty() {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::ie(Cause::CONDITIONAL_IE_MISSING, ie_type::UE_IP_ADDRESS),
            ));
        }
        if let Err(rej) = self.check_ues(&rules, None) {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        let created = match self.allocate_teids(&mut rules, &VecMap::new(), &created_ids) {
            Ok(c) => c,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let placed = match Self::smf_teid_addr(&rules) {
            Err(rej) => Err(rej),
            Ok(None) => (self.sessions_impl.place(&ues)).map_err(|f| Reject::cause(f.cause())),
            Ok(Some((a, id))) => {
                (self.sessions_impl.placement_at(a)).ok_or(Reject::rule(FailedRuleId::Pdr(id)))
            }
        };
        let placement = match placed {
            Ok(p) => p,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let fwd = match forwarding(&rules) {
            Ok(f) => f,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let created = created
            .into_iter()
            .map(|(id, teid)| CreatedPdr {
                pdr_id: PdrId(id),
                local_f_teid: Some(FTeid::Assigned {
                    teid,
                    ipv4: Some(placement.ran),
                    ipv6: None,
                }),
            })
            .collect();
        let changes = Forwarding::default().changes(&fwd, placement.node);
        let session = Session {
            node_id: node,
            cp_f_seid: r.cp_f_seid,
            placement,
            rules,
            fwd,
        };
        let packed = match session.pack() {
            Ok(p) => p,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let seid = self.sessions.reserve();
        self.reserve(&session, seid);
        self.busy.insert(seid);
        self.establishing += 1;
        self.apply(
            from,
            seq,
            t,
            reply_seid,
            changes,
            Commit::Establish {
                seid,
                session: Box::new(session),
                packed,
                created,
            },
        )
    }

    /// Marks the UE addresses and TEIDs of `s` as taken by `seid`.
    fn reserve(&mut self, s: &Session, seid: u64) {
        for ue in ue_slots(&s.rules) {
            self.ue_index.insert(ue, Slab::slot_of(seid));
        }
        for t in teids_of(&s.rules) {
            self.teids.insert(t);
        }
    }

    /// Every UE address of `rules` is free or already `seid`'s (`None`: a new session's).
    fn check_ues(&self, rules: &Rules, seid: Option<u64>) -> Result<(), Reject> {
        for (id, (p, _)) in &rules.pdrs {
            for ue in pdr_ues(p) {
                if self
                    .ue_holder(&ue_slot(&ue))
                    .is_some_and(|s| Some(s) != seid)
                {
                    return Err(Reject::rule(FailedRuleId::Pdr(*id)));
                }
            }
        }
        Ok(())
    }

    /// Gives each PDR of `ids` (created or updated by this request) that asks CHOOSE a TEID;
    /// PDRs with one CHOOSE ID share one. A PDR that already held a TEID (`old`) keeps it, and
    /// an explicit F-TEID of such a PDR must be the one it holds. A new PDR's explicit F-TEID
    /// (allocated by the SMF, CH not set: free5GC) is honoured when no session of this
    /// endpoint holds it and no other endpoint of the cluster allocates TEIDs of its prefix
    /// (this endpoint's allocator skips the TEIDs it holds); several PDRs of one request may
    /// name it. Returns the PDRs given a new TEID by us.
    fn allocate_teids(
        &mut self,
        rules: &mut Rules,
        old: &VecMap<u16, (CreatePdr, Option<u32>)>,
        ids: &[u16],
    ) -> Result<Vec<(u16, u32)>, Reject> {
        let mut by_choose_id: HashMap<u8, u32> = HashMap::default();
        let mut taken: Vec<u32> = Vec::new();
        let mut given_here: Vec<u32> = Vec::new();
        let mut created = Vec::new();
        for id in ids {
            let held = old.get(id).and_then(|(_, t)| *t);
            let Some((p, _)) = rules.pdrs.get(id) else {
                continue;
            };
            let teid = match p.pdi.local_f_teid {
                None => None,
                Some(FTeid::Assigned { teid: given, .. }) if held == Some(given) => held,
                Some(FTeid::Assigned { .. }) if held.is_some() => {
                    // A PDR's TEID does not change under it.
                    return Err(Reject::ie(
                        Cause::INVALID_F_TEID_ALLOCATION_OPTION,
                        ie_type::F_TEID,
                    ));
                }
                Some(FTeid::Assigned {
                    teid: given, ipv4, ..
                }) => {
                    let top = (given >> 24) as u8;
                    let others_prefix =
                        top != self.config.allocator_id && top != 0 && top <= self.config.endpoints;
                    let fresh = !self.teids.contains(given) && !taken.contains(&given);
                    if given == 0
                        || ipv4.is_none()
                        || others_prefix
                        || !(fresh || given_here.contains(&given))
                    {
                        return Err(Reject::rule(FailedRuleId::Pdr(*id)));
                    }
                    given_here.push(given);
                    Some(given)
                }
                Some(FTeid::Choose {
                    ipv4, choose_id, ..
                }) => {
                    if !ipv4 {
                        return Err(Reject::rule(FailedRuleId::Pdr(*id)));
                    }
                    match held {
                        Some(h) => Some(h),
                        None => {
                            let shared = choose_id.and_then(|c| by_choose_id.get(&c).copied());
                            let t = match shared {
                                Some(t) => t,
                                None => {
                                    let mut not = taken.clone();
                                    not.extend_from_slice(&given_here);
                                    let t = self
                                        .pick_teid(&not)
                                        .ok_or(Reject::cause(Cause::NO_RESOURCES_AVAILABLE))?;
                                    taken.push(t);
                                    if let Some(c) = choose_id {
                                        by_choose_id.insert(c, t);
                                    }
                                    t
                                }
                            };
                            created.push((*id, t));
                            Some(t)
                        }
                    }
                }
            };
            if let Some((_, t)) = rules.pdrs.get_mut(id) {
                *t = teid;
            }
        }
        Ok(created)
    }

    /// The address the SMF gave in the F-TEIDs it allocated (CH not set) among `rules`, if
    /// any, with the first PDR naming it: where the gNB will send that session's uplink, so
    /// the node the session is placed on. Several different addresses: the PDR naming the
    /// second is refused.
    fn smf_teid_addr(rules: &Rules) -> Result<Option<(Ipv4Addr, u16)>, Reject> {
        let mut found: Option<(Ipv4Addr, u16)> = None;
        for (id, (p, _)) in &rules.pdrs {
            if let Some(FTeid::Assigned { ipv4: Some(a), .. }) = p.pdi.local_f_teid {
                match found {
                    Some((b, _)) if b != a => return Err(Reject::rule(FailedRuleId::Pdr(*id))),
                    Some(_) => {}
                    None => found = Some((a, *id)),
                }
            }
        }
        Ok(found)
    }

    fn pick_teid(&mut self, taken: &[u32]) -> Option<u32> {
        let prefix = u32::from(self.config.allocator_id) << 24;
        for _ in 0..(1u32 << 24) {
            let t = prefix | (self.next_teid & 0xff_ffff);
            self.next_teid = self.next_teid.wrapping_add(1);
            if t & 0xff_ffff != 0 && !self.teids.contains(t) && !taken.contains(&t) {
                return Some(t);
            }
        }
        None
    }

    /// The session `seid` if `from`'s association holds it: its placement and packed bytes
    /// (decoded from what is kept once, for the check, the response's SEID and the rules).
    fn owned(&self, from: SocketAddr, seid: u64) -> Option<(Placement, Vec<u8>)> {
        let node = self.by_addr.get(&from.ip())?;
        let kept = self.sessions.get(seid)?;
        let (placement, packed) = Stored { kept }.packed(&self.shapes);
        packed_node_id(&packed)
            .is_ok_and(|n| n == *node)
            .then_some((placement, packed))
    }

    fn modify(
        &mut self,
        from: SocketAddr,
        seq: u32,
        seid: u64,
        r: SessionModificationRequest,
    ) -> Option<Message> {
        let t = msg_type::SESSION_MODIFICATION_REQUEST;
        if !self.by_addr.contains_key(&from.ip()) {
            self.stats.dropped_no_association += 1;
            return None;
        }
        let Some((placement, packed)) = self.owned(from, seid) else {
            return Some(self.reject(
                t,
                Some(0),
                seq,
                Reject::cause(Cause::SESSION_CONTEXT_NOT_FOUND),
            ));
        };
        let reply_seid = Some(packed_cp_seid(&packed).expect("packed sessions read back"));
        if self.busy.contains(&seid) {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        let mut session = Stored::session(placement, &packed);
        if let Some(f) = r.cp_f_seid {
            session.cp_f_seid = f;
        }
        let old_pdrs = session.rules.pdrs.clone();
        let old_fwd = session.fwd.clone();
        let (old_ues, old_teids) = (ue_slots(&session.rules), teids_of(&session.rules));
        let mut touched = Vec::new();
        let edited = (|| {
            let rules = &mut session.rules;
            for id in &r.remove_urr {
                rules
                    .urrs
                    .remove(&id.0)
                    .ok_or(Reject::rule(FailedRuleId::Urr(id.0)))?;
            }
            for u in r.create_urr {
                let id = u.urr_id.0;
                if rules.urrs.insert(id, u).is_some() {
                    return Err(Reject::rule(FailedRuleId::Urr(id)));
                }
            }
            for u in r.update_urr {
                let id = u.urr_id.0;
                let old = rules
                    .urrs
                    .get_mut(&id)
                    .ok_or(Reject::rule(FailedRuleId::Urr(id)))?;
                update_urr(old, u);
            }
            for id in &r.remove_pdr {
                rules
                    .pdrs
                    .remove(&id.0)
                    .ok_or(Reject::rule(FailedRuleId::Pdr(id.0)))?;
            }
            for id in &r.remove_far {
                rules
                    .fars
                    .remove(&id.0)
                    .ok_or(Reject::rule(FailedRuleId::Far(id.0)))?;
            }
            for id in &r.remove_qer {
                rules
                    .qers
                    .remove(&id.0)
                    .ok_or(Reject::rule(FailedRuleId::Qer(id.0)))?;
            }
            for q in r.create_qer {
                check_qer(&q)?;
                let id = q.qer_id.0;
                if rules.qers.insert(id, q).is_some() {
                    return Err(Reject::rule(FailedRuleId::Qer(id)));
                }
            }
            for u in r.update_qer {
                let id = u.qer_id.0;
                let q = rules
                    .qers
                    .get_mut(&id)
                    .ok_or(Reject::rule(FailedRuleId::Qer(id)))?;
                let gate = u.gate_status.or(q.gate_status);
                *q = Qer {
                    gate_status: gate,
                    ..u
                };
                check_qer(q)?;
            }
            for f in r.create_far {
                let id = f.far_id.0;
                if rules.fars.insert(id, f).is_some() {
                    return Err(Reject::rule(FailedRuleId::Far(id)));
                }
            }
            for u in r.update_far {
                let id = u.far_id.0;
                let f = rules
                    .fars
                    .get_mut(&id)
                    .ok_or(Reject::rule(FailedRuleId::Far(id)))?;
                if let Some(a) = u.apply_action {
                    f.apply_action = a;
                }
                if let Some(up) = u.update_forwarding_parameters {
                    let p = f.forwarding_parameters.get_or_insert(ForwardingParameters {
                        destination_interface: None,
                        network_instance: None,
                        outer_header_creation: None,
                    });
                    if up.destination_interface.is_some() {
                        p.destination_interface = up.destination_interface;
                    }
                    if up.network_instance.is_some() {
                        p.network_instance = up.network_instance;
                    }
                    if up.outer_header_creation.is_some() {
                        p.outer_header_creation = up.outer_header_creation;
                    }
                }
            }
            for p in r.create_pdr {
                let id = p.pdr_id.0;
                touched.push(id);
                if rules.pdrs.insert(id, (p, None)).is_some() {
                    return Err(Reject::rule(FailedRuleId::Pdr(id)));
                }
            }
            for u in r.update_pdr {
                let id = u.pdr_id.0;
                let (p, _) = rules
                    .pdrs
                    .get_mut(&id)
                    .ok_or(Reject::rule(FailedRuleId::Pdr(id)))?;
                touched.push(id);
                if let Some(x) = u.outer_header_removal {
                    p.outer_header_removal = Some(x);
                }
                if let Some(x) = u.precedence {
                    p.precedence = x;
                }
                if let Some(x) = u.pdi {
                    p.pdi = x;
                }
                if let Some(x) = u.far_id {
                    p.far_id = Some(x);
                }
                if !u.urr_ids.is_empty() {
                    p.urr_ids = u.urr_ids;
                }
                if !u.qer_ids.is_empty() {
                    p.qer_ids = u.qer_ids;
                }
            }
            Ok(())
        })();
        if let Err(rej) = edited {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        if ues_of(&session.rules).is_empty() {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::ie(Cause::CONDITIONAL_IE_MISSING, ie_type::UE_IP_ADDRESS),
            ));
        }
        if let Err(rej) = self.check_ues(&session.rules, Some(seid)) {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        let created = match self.allocate_teids(&mut session.rules, &old_pdrs, &touched) {
            Ok(c) => c,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        // An F-TEID the SMF allocated names the session's node, which does not change.
        let moved = match Self::smf_teid_addr(&session.rules) {
            Ok(Some((a, id))) if a != session.placement.ran => {
                Err(Reject::rule(FailedRuleId::Pdr(id)))
            }
            other => other.map(|_| ()),
        };
        if let Err(rej) = moved {
            return Some(self.reject(t, reply_seid, seq, rej));
        }
        let fwd = match forwarding(&session.rules) {
            Ok(f) => f,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let ran = session.placement.ran;
        let created = created
            .into_iter()
            .map(|(id, teid)| CreatedPdr {
                pdr_id: PdrId(id),
                local_f_teid: Some(FTeid::Assigned {
                    teid,
                    ipv4: Some(ran),
                    ipv6: None,
                }),
            })
            .collect();
        let packed = match session.pack() {
            Ok(p) => p,
            Err(rej) => return Some(self.reject(t, reply_seid, seq, rej)),
        };
        let changes = old_fwd.changes(&fwd, session.placement.node);
        session.fwd = fwd;
        self.reserve(&session, seid);
        self.busy.insert(seid);
        self.apply(
            from,
            seq,
            t,
            reply_seid,
            changes,
            Commit::Modify {
                seid,
                session: Box::new(session),
                packed,
                created,
                old_ues,
                old_teids,
            },
        )
    }

    fn delete(&mut self, from: SocketAddr, seq: u32, seid: u64) -> Option<Message> {
        let t = msg_type::SESSION_DELETION_REQUEST;
        if !self.by_addr.contains_key(&from.ip()) {
            self.stats.dropped_no_association += 1;
            return None;
        }
        let Some((placement, packed)) = self.owned(from, seid) else {
            return Some(self.reject(
                t,
                Some(0),
                seq,
                Reject::cause(Cause::SESSION_CONTEXT_NOT_FOUND),
            ));
        };
        let reply_seid = Some(packed_cp_seid(&packed).expect("packed sessions read back"));
        if self.busy.contains(&seid) {
            return Some(self.reject(
                t,
                reply_seid,
                seq,
                Reject::cause(Cause::PFCP_ENTITY_IN_CONGESTION),
            ));
        }
        let changes = Stored::session(placement, &packed)
            .fwd
            .changes(&Forwarding::default(), placement.node);
        self.busy.insert(seid);
        self.apply(from, seq, t, reply_seid, changes, Commit::Delete { seid })
    }
}

/// A UE address as the cluster's FIB keys it: IPv4 as IPv4-mapped IPv6 (`::ffff:a.b.c.d`), so
/// that an IPv4 address and its mapped IPv6 form are one UE to the endpoint as they are one key
/// to the FIB (two sessions cannot claim one FIB entry); 16 bytes where an `IpAddr` takes 17.
fn ue_slot(ue: &IpAddr) -> [u8; 16] {
    // The FIB keys an IPv6 UE by its /64: one session holds a /64.
    sb_common::ue_key(*ue)
}

/// The UE addresses a PDR names.
fn pdr_ues(p: &CreatePdr) -> impl Iterator<Item = IpAddr> + '_ {
    p.pdi.ue_ip_address.iter().flat_map(|ue| {
        let v4 = match ue.ipv4 {
            Some(UeAddr::Addr(a)) => Some(IpAddr::V4(a)),
            _ => None,
        };
        let v6 = match ue.ipv6 {
            Some(UeAddr::Addr(a)) => Some(IpAddr::V6(a)),
            _ => None,
        };
        v4.into_iter().chain(v6)
    })
}

/// A session's few UE addresses or TEIDs, sorted, each once (inline up to 4: no allocation).
type Few<T> = SmallVec<[T; 4]>;

fn sorted_once<T: Ord>(mut v: Few<T>) -> Few<T> {
    v.sort_unstable();
    v.dedup();
    v
}

/// Every UE address of a session's PDRs.
fn ues_of(rules: &Rules) -> Few<IpAddr> {
    sorted_once(rules.pdrs.values().flat_map(|(p, _)| pdr_ues(p)).collect())
}

/// The UE addresses of `rules` as the UE index keys them ([`ue_slot`]), each once.
fn ue_slots(rules: &Rules) -> Few<[u8; 16]> {
    sorted_once(
        rules
            .pdrs
            .values()
            .flat_map(|(p, _)| pdr_ues(p))
            .map(|u| ue_slot(&u))
            .collect(),
    )
}

/// Every TEID a session's PDRs hold.
fn teids_of(rules: &Rules) -> Few<u32> {
    sorted_once(rules.pdrs.values().filter_map(|(_, t)| *t).collect())
}

/// A QER we accept: gates (applied), MBR and GBR (kept, not yet enforced), a QFI of 6 bits
/// (kept). Any other QER IE (Packet Rate, DL Flow Level Marking, ...) is refused by the QER's
/// id.
fn check_qer(q: &Qer) -> Result<(), Reject> {
    let gates_ok = q.gate_status.is_none_or(|g| g.ul <= 1 && g.dl <= 1);
    let qfi_ok = q.qfi.is_none_or(|Qfi(f)| f <= 63);
    if !gates_ok || !qfi_ok || !q.other.is_empty() {
        return Err(Reject::rule(FailedRuleId::Qer(q.qer_id.0)));
    }
    Ok(())
}

/// An Update URR's fields replace the URR's (its other IEs replace those of the same type).
fn update_urr(old: &mut Urr, new: Urr) {
    if new.measurement_method.is_some() {
        old.measurement_method = new.measurement_method;
    }
    if new.reporting_triggers.is_some() {
        old.reporting_triggers = new.reporting_triggers;
    }
    for ie in new.other {
        old.other.retain(|o| o.ie_type != ie.ie_type);
        old.other.push(ie);
    }
}

/// What a PDR's PDI filters on beyond its interface, F-TEID and UE address.
enum Filter {
    /// Every packet of the UE (no SDF filter, or one that matches all).
    All,
    /// Some of them (an SDF filter that does not match all).
    Some,
}

/// The PDI's other IEs: QFI and 3GPP Interface Type are accepted (the QFI of uplink G-PDUs
/// is the data plane's to check, the interface type names what we already know), SDF
/// Filters are read; any other refuses the PDR.
fn pdi_filter(p: &CreatePdr) -> Result<Filter, Reject> {
    let fail = Reject::rule(FailedRuleId::Pdr(p.pdr_id.0));
    // Several SDF filters match their union: all when one of them does.
    let (mut filtered, mut all) = (false, false);
    for ie in &p.pdi.other {
        match ie.ie_type {
            ie_type::QFI | ie_type::TGPP_INTERFACE_TYPE => {}
            ie_type::SDF_FILTER => {
                let f = crate::sdf::SdfFilter::read(&ie.value).map_err(|_| fail)?;
                filtered = true;
                all |= f.matches_all();
            }
            _ => return Err(fail),
        }
    }
    Ok(if filtered && !all {
        Filter::Some
    } else {
        Filter::All
    })
}

/// What a FAR does.
enum Action {
    Forward,
    Drop,
}

fn far_action(f: &CreateFar) -> Result<Action, Reject> {
    let a = f.apply_action;
    let fail = Reject::rule(FailedRuleId::Far(f.far_id.0));
    let main = a.0 & (ApplyAction::DROP | ApplyAction::FORW | ApplyAction::BUFF);
    if a.has(ApplyAction::DUPL)
        || a.0 & !(ApplyAction::DROP | ApplyAction::FORW | ApplyAction::BUFF | ApplyAction::NOCP)
            != 0
    {
        return Err(fail);
    }
    match main {
        ApplyAction::FORW => Ok(Action::Forward),
        ApplyAction::DROP | ApplyAction::BUFF => Ok(Action::Drop),
        _ => Err(fail),
    }
}

/// A candidate target and the (precedence, PDR id) of the PDR giving it: the lowest wins.
type Ranked<T> = ((u32, u16), Option<T>);

/// Keeps in `list` the candidate of lowest rank per key.
fn rank_in<K: PartialEq, T>(list: &mut Few<(K, Ranked<T>)>, key: K, candidate: Ranked<T>) {
    match list.iter_mut().find(|(k, _)| *k == key) {
        Some((_, e)) if candidate.0 < e.0 => *e = candidate,
        Some(_) => {}
        None => list.push((key, candidate)),
    }
}

/// A session's forwarding from its rules, or the rule that cannot be applied.
fn forwarding(rules: &Rules) -> Result<Forwarding, Reject> {
    for f in rules.fars.values() {
        far_action(f)?;
    }
    for q in rules.qers.values() {
        check_qer(q)?;
    }
    // (precedence, PDR id) of the winner per key.
    let mut down: Few<(IpAddr, Ranked<(u32, Ipv4Addr)>)> = Few::new();
    let mut up: Few<(u32, Ranked<IpAddr>)> = Few::new();
    let all_ues = ues_of(rules);
    let mut qfi = 0;
    for (&id, (p, teid)) in &rules.pdrs {
        let fail = Reject::rule(FailedRuleId::Pdr(id));
        let filter = pdi_filter(p)?;
        if p.urr_ids.iter().any(|u| !rules.urrs.contains_key(&u.0)) {
            return Err(fail);
        }
        if let Some(ue) = &p.pdi.ue_ip_address {
            if matches!(ue.ipv4, Some(UeAddr::Choose)) || matches!(ue.ipv6, Some(UeAddr::Choose)) {
                return Err(fail);
            }
        }
        let far = p.far_id.and_then(|f| rules.fars.get(&f.0)).ok_or(fail)?;
        let mut gate_open = (true, true);
        for q in &p.qer_ids {
            let q = rules.qers.get(&q.0).ok_or(fail)?;
            if qfi == 0 && p.pdi.source_interface != Interface::CP_FUNCTION {
                qfi = q.qfi.map_or(0, |Qfi(f)| f);
            }
            if let Some(g) = q.gate_status {
                gate_open.0 &= g.ul == 0;
                gate_open.1 &= g.dl == 0;
            }
        }
        let action = far_action(far)?;
        let params = far.forwarding_parameters.as_ref();
        let ohc = params.and_then(|f| f.outer_header_creation.clone());
        let to_cp = params.and_then(|f| f.destination_interface) == Some(Interface::CP_FUNCTION);
        let rank = (p.precedence.0, id);
        // The paths between the UE and the SMF (open5gs's IPv6 router solicitations and
        // advertisements): a PDR from the CP function, or one whose FAR forwards to it, is
        // kept and answered (its F-TEID allocated) but forwards nothing in the data plane
        // yet; nor may it be what a direction's FIB entry follows.
        if p.pdi.source_interface == Interface::CP_FUNCTION
            || (to_cp && matches!(filter, Filter::Some))
        {
            continue;
        }
        // The data plane forwards a UE's packets one way per direction: a PDR that matches
        // only some of them cannot be told apart there.
        if matches!(filter, Filter::Some) {
            return Err(fail);
        }
        match p.pdi.source_interface {
            Interface::CORE => {
                if pdr_ues(p).next().is_none()
                    || p.pdi.local_f_teid.is_some()
                    || p.outer_header_removal.is_some()
                {
                    return Err(fail);
                }
                let target = match (action, &ohc) {
                    (Action::Forward, Some(OuterHeaderCreation::GtpuIpv4 { teid, addr })) => {
                        Some((*teid, *addr))
                    }
                    // FORW before the gNB's tunnel is known (free5GC): nowhere to send yet.
                    (Action::Forward, None) => None,
                    (Action::Forward, _) => {
                        return Err(Reject::rule(FailedRuleId::Far(far.far_id.0)))
                    }
                    (Action::Drop, _) => None,
                };
                let target = target.filter(|_| gate_open.1);
                for ue in pdr_ues(p) {
                    rank_in(&mut down, ue, (rank, target));
                }
            }
            Interface::ACCESS => {
                let ohr_ok = p.outer_header_removal.is_some_and(|o| {
                    matches!(
                        o.description,
                        OuterHeaderRemoval::GTPU_UDP_IPV4
                            | OuterHeaderRemoval::GTPU_UDP_IPV6
                            | OuterHeaderRemoval::GTPU_UDP_IP
                    )
                });
                let Some(teid) = *teid else { return Err(fail) };
                if !ohr_ok {
                    return Err(fail);
                }
                let forward = match (action, &ohc) {
                    (Action::Forward, None) => true,
                    (Action::Forward, Some(_)) => {
                        return Err(Reject::rule(FailedRuleId::Far(far.far_id.0)))
                    }
                    (Action::Drop, _) => false,
                };
                let ue = pdr_ues(p).next().or(all_ues.first().copied());
                let target = ue.filter(|_| forward && gate_open.0);
                rank_in(&mut up, teid, (rank, target));
            }
            _ => return Err(fail),
        }
    }
    let downlink: VecMap<IpAddr, (u32, Ipv4Addr)> = down
        .into_iter()
        .filter_map(|(ue, (_, t))| t.map(|t| (ue, t)))
        .collect();
    let peer = downlink.values().next().map(|&(_, p)| p);
    let uplink = up
        .into_iter()
        .filter_map(|(teid, (_, ue))| ue.map(|ue| (teid, (ue, peer))))
        .collect();
    Ok(Forwarding {
        downlink,
        uplink,
        qfi,
    })
}
