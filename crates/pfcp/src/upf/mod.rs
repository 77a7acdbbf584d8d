//! The sans-IO user-plane endpoint: [`Upf::handle`] takes a datagram (and the time), answers
//! it, and turns sessions' rules into forwarding-table changes that a [`Sessions`]
//! implementation (the cluster) makes durable and installs; the answer to a request that
//! changes forwarding can wait for that ([`Applied::Pending`], then [`Upf::complete`]).
//!
//! Its sessions and associations live in memory; with [`Upf::track_state`] on, every change
//! of them comes out as a record to keep ([`Upf::take_state_changes`]), and the next
//! incarnation takes them back ([`Upf::restore_state`]):
//! - **What is recorded**: a session's establishment, modification, deletion, and its removal
//!   with its peer's association (released, restarted, dead), once the cluster installed it
//!   (a refused or failed change records nothing); an association's setup, update and
//!   release, those replicated from another endpoint of the cluster too (this endpoint
//!   needs them after its restart as well). Keys: a session's UP SEID; an association's
//!   [`association_key`] (allocator byte, bits 48 to 55, 0: never a SEID, whose allocator id
//!   is never 0; [`is_association_key`]). Records start with a version byte (1).
//! - **What a restore gives back**: every session with its SEID, rules, placement, UE
//!   addresses and TEIDs (reserved again: never given to another session), its CP-function
//!   paths and its usage state, measured afresh (counts since the last report before the
//!   restart are lost; quotas, thresholds and timers are armed again from the rules); every
//!   association, our heartbeats to the peers we heartbeat starting again. The restored
//!   SEIDs keep their prefix (the incarnation they were given in) and the slab takes that
//!   prefix for new sessions too, which get free slots at a generation of the current
//!   incarnation's (`incarnation << 8 | 1`) and TEIDs of its counter: no restored SEID or
//!   TEID is given again, nor one given before the restart (unless its slot was reused 256
//!   times, or the TEID counter wrapped). Records that do not restore (damaged, another allocator's) are an error
//!   ([`RestoreError`]), never a panic, and nothing is restored then.
//! - [`Upf::drop_state`] forgets sessions and associations without any change (another
//!   endpoint took them back).
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
//! - **DROP** removes the direction's forwarding ([`UePolicy::dl_drop`] says so downlink).
//!   **BUFF** removes the downlink tunnel and sets [`UePolicy::buffer`]: the handling node
//!   buffers; with **NOCP** also [`UePolicy::notify`]: the node reports the first buffered
//!   packet ([`Upf::downlink_data`]) and the SMF gets one Downlink Data Report per buffering
//!   episode, after the BAR's Downlink Data Notification Delay. An Update
//!   FAR to FORW with the gNB's tunnel ends the episode; the node delivers the buffer in order.
//!   An Update FAR whose Update Forwarding Parameters carry SNDEM sets
//!   [`UePolicy::end_marker`] in that change's `after`.
//! - **The PDI** may also carry QFI and 3GPP Interface Type (accepted; not matched on here),
//!   Network Instance (one instance: ignored) and SDF Filters ([`crate::sdf`]: read and
//!   checked). A PDR whose SDF filters match every packet (`permit out ip from any to
//!   assigned`) is as one without. A PDR from the CP function, or one with a narrower SDF
//!   filter whose FAR forwards to the CP function (open5gs's router solicitation path), is
//!   kept and its F-TEID allocated (a CP-function PDR's at the endpoint's PFCP address);
//!   their packets go through the node's control plane, not the FIB ([`Upf::uplink_to_cp`],
//!   [`Upf::downlink_from_cp`]; see `cp.rs`).
//! - **QERs** become the UE's [`UePolicy`]: a closed gate keeps the entry and sets
//!   `dl_gate_closed`/`ul_gate_closed` (the handling node drops; its counters and buffer
//!   stay), the least MBR of the QERs of the UE's downlink (uplink) PDR is its
//!   `dl_mbr_kbps` (`ul_mbr_kbps`), but in a session of several flows (uplink TEIDs) a QER
//!   linked to more than one flow is the session's AMBR, policed over its flows together
//!   ([`UePolicy::dl_ambr_kbps`], [`UePolicy::session`]); the QFI is marked ([`UeFib::qfi`]); GBR is kept, not
//!   enforced. **URRs** (a PDR must name existing ones) set [`UePolicy::count`] and are
//!   measured from the handling node's counts: volume and duration, volume/time thresholds
//!   and quotas, periods, Query URR, reports at deletion; a used-up
//!   quota closes the gates of the URR's PDRs until a new one.
//! - **UE IP Address CHV4/CHV6**: an address from the endpoint's pools ([`Config::ue_pool_v4`],
//!   [`Config::ue_pool_v6`]), in the Created PDR; none free or no pool: All dynamic addresses
//!   are occupied. In a Session Modification the same, but a session already holding an
//!   address of that family is given that one.
//!
//! Refused with Rule creation/modification failure and the Failed Rule ID (the request changes
//! nothing): a PDR whose PDI carries any other IE (Application ID, Ethernet filters, ...), a
//! malformed SDF filter, or a narrower SDF filter that forwards anywhere but the CP function
//! (the data plane forwards a UE's packets one way per direction); a Core PDR without UE
//! address or with a local F-TEID or Outer Header Removal; an Access PDR without local F-TEID
//! or without GTP-U Outer Header Removal; a PDR without FAR, or naming a FAR, QER or URR the
//! session lacks; a UE address another session holds (an IPv4 address and its IPv4-mapped
//! IPv6 form are one address, as they are one FIB key); CHOOSE of an IPv6-only F-TEID, or of a
//! UE address in a modification; a URR whose threshold, quota or period IE does not read; a
//! FAR whose Apply Action is not exactly one of DROP, FORW, BUFF (with NOCP), or
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

mod association;
mod bar;
mod commit;
mod cp;
mod durable;
mod far;
mod fib;
mod memory;
mod pdr;
mod pool;
mod qer;
mod reject;
mod relays;
mod report;
mod session;
mod teid;
mod urr;

pub use cp::{FromCp, GTPU_PORT};
pub use durable::{association_key, is_association_key, RestoreError};
pub use fib::{FibChange, Forwarding, UeChange, UeFib, UePolicy, Usage, UsageRead};
pub use memory::{malloc_chunk, Memory};

use crate::ie::*;
use crate::message::*;
use crate::relay::{Relay, RelayKind};
use crate::responses::Responses;
use crate::shapes::Shapes;
use crate::slab::Slab;
use crate::teid_set::TeidSet;
use crate::ue_index::UeIndex;
use crate::vecmap::VecMap;
use association::Association;
use commit::{Commit, Pending};
use far::{far_action, Action};
use fib::Changes;
use pdr::{forwarding, pdr_ues, ues_of, Live};
use qer::check_qer;
use reject::Reject;
use report::{report_addr, OutReport, Read, ReadKind};
use session::{sorted_once, teids_of, ue_slot, ue_slots, Few, Rules, Session, Stored};
use smallvec::SmallVec;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use urr::{metering, Ddr, MeterEdit, Metering};

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
    /// The endpoint's incarnation (a count of its restarts, mod 256: a node gives its control
    /// plane's epoch), the top byte of every SEID: a request about a session lost in a restart
    /// finds no session in the next 255 incarnations (Session context not found), instead of
    /// a new session that got its SEID again. Its TEIDs also start at `incarnation << 16`.
    /// Default 0.
    pub incarnation: u8,
    /// How long a response is kept to answer retransmissions (TS 29.244: at least N1 * T1).
    pub response_ttl: Duration,
    /// At most this many responses are kept (the oldest go first), and 256 MiB of them.
    pub response_cache_entries: usize,
    /// Whether this endpoint is one of several of one cluster: association requests are
    /// replicated to the others and session requests for SEIDs another endpoint allocated
    /// are relayed to it ([`Upf::poll_relay`], [`Upf::handle_relay`]; see [`crate::relay`]).
    pub relay: bool,
    /// Sessions this endpoint is expected to hold: its session maps (the slab, the UE
    /// index, the meters and their TEIDs) are allocated for that many at start and do not grow (and stall) until it holds more. 0: they grow as
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
    /// IPv4 prefixes (address, length) the endpoint gives UE addresses from when a PDR asks
    /// CHV4 (their first and last addresses are not given out). Empty: CHV4 is answered All
    /// dynamic addresses are occupied. The endpoints of one cluster need disjoint pools.
    pub ue_pool_v4: Vec<(Ipv4Addr, u8)>,
    /// IPv6 prefixes (length at most 64) the endpoint gives UE /64s from for CHV6.
    pub ue_pool_v6: Vec<(std::net::Ipv6Addr, u8)>,
    /// How long a Session Report Request waits for its response before it is sent again
    /// (TS 29.244 T1).
    pub report_t1: Duration,
    /// How many times it is sent before it is given up ([`Stats::reports_unanswered`]; N1).
    pub report_n1: u8,
    /// How long a response with usage reports waits for the handling node's counts
    /// ([`Sessions::read_usage`]) before it is sent with what the endpoint has
    /// ([`Stats::usage_read_timeouts`]).
    pub usage_read_timeout: Duration,
    /// The NTP time (seconds since 1900) of `now` zero, for the Start and End Times of usage
    /// reports. [`Config::new`] takes the Recovery Time Stamp: `now` counted from the start.
    pub ntp_at_zero: u32,
    /// The addresses PFCP peers may come from (IPv4 or IPv6 prefixes, [`crate::prefix`]): a
    /// message from any other is not handled ([`Stats::peers_refused`]): an Association
    /// Setup Request is answered Request rejected, anything else is dropped. Empty: any
    /// address (TS 29.244 leaves who may associate to configuration).
    pub allowed_peers: Vec<(IpAddr, u8)>,
    /// How long a peer counted dead by our heartbeats ([`Upf::is_peer_dead`]) keeps its
    /// association and sessions: after that they are released (their forwarding removed
    /// through [`Sessions::apply`], [`Stats::peers_released`]). None: never.
    pub dead_peer_grace: Option<Duration>,
    /// The most sessions one step of an association's release (or of a restarted peer's
    /// purge) removes: a release of more goes a part at a time, one part through the cluster
    /// at once, the next at the [`Upf::poll`] after it is installed, so that no call carries
    /// all of an SMF's sessions (half a million of them held a node's control thread for
    /// seconds). At least 1.
    pub release_part: usize,
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
            incarnation: 0,
            response_ttl: Duration::from_secs(30),
            response_cache_entries: 1 << 16,
            relay: false,
            endpoints: 0,
            expected_sessions: 0,
            heartbeat_interval: Duration::from_secs(10),
            heartbeat_misses: 3,
            ue_pool_v4: Vec::new(),
            ue_pool_v6: Vec::new(),
            report_t1: Duration::from_secs(3),
            report_n1: 3,
            usage_read_timeout: Duration::from_secs(2),
            ntp_at_zero: recovery_time_stamp.0,
            allowed_peers: Vec::new(),
            dead_peer_grace: Some(Duration::from_secs(60)),
            release_part: 4096,
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
    /// Reads the cumulative counts of the handling-node slots `ul_teids` (as
    /// [`Upf::usage`] takes them), for the usage reports of a deletion (asked after its
    /// removal was applied: the slots keep their last counts until read) or of a Query URR:
    /// now, or later through [`Upf::complete_usage`] with `token`. The default: nothing beyond
    /// what [`Upf::usage`] was given.
    fn read_usage(&mut self, token: Token, ul_teids: &[u32]) -> UsageRead {
        let _ = (token, ul_teids);
        UsageRead::Now(Vec::new())
    }
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
    /// Uplink packets tunnelled to the CP function ([`Upf::uplink_to_cp`]).
    pub cp_uplink: u64,
    /// Packets from the CP function sent down a session's tunnel
    /// ([`Upf::downlink_from_cp`]).
    pub cp_downlink: u64,
    /// Packets to or from the CP function that no session's CP-function path took (no such
    /// path, no filter matched, or no downlink tunnel now).
    pub cp_unmatched: u64,
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
    /// Session Report Requests sent (first sendings), their retransmissions, those answered
    /// Request accepted, answered with another cause, and given up unanswered.
    pub reports_sent: u64,
    pub report_retransmissions: u64,
    pub reports_accepted: u64,
    pub reports_refused: u64,
    pub reports_unanswered: u64,
    /// Usage Reports sent in Session Report Requests, and Downlink Data Reports.
    pub usage_reports: u64,
    pub downlink_data_reports: u64,
    /// Counts or buffered-data notices for a TEID no metered session holds.
    pub usage_unknown: u64,
    /// Responses sent without the handling node's counts ([`Config::usage_read_timeout`]).
    pub usage_read_timeouts: u64,
    /// Gate changes for used-up or new quotas the cluster refused.
    pub quota_stops_failed: u64,
    /// Messages from addresses outside [`Config::allowed_peers`] (not handled).
    pub peers_refused: u64,
    /// Association Setup Requests refused (Request rejected) because another address holds
    /// an association with their Node ID.
    pub takeovers_refused: u64,
    /// Sessions deleted because their peer restarted (a new Recovery Time Stamp in a
    /// heartbeat) or was released after [`Config::dead_peer_grace`].
    pub peer_sessions_deleted: u64,
    /// Association setups replicated from another endpoint that repeat the association held
    /// (same peer address and Recovery Time Stamp): kept as it is, sessions and all.
    pub setup_copies_kept: u64,
    /// Associations released because their peer stayed dead for [`Config::dead_peer_grace`].
    pub peers_released: u64,
    /// Parts of releases handed to the cluster ([`Config::release_part`]), retries counted.
    pub release_parts: u64,
    /// Parts the cluster refused: a peer's purge or release tries the part again a second
    /// later; a peer's own request is answered with the failure, its sessions removed so far
    /// staying removed.
    pub release_parts_refused: u64,
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
    /// Releases under way, by the node released ([`Config::release_part`]).
    releases: HashMap<NodeId, association::Releasing>,
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
    /// The time of the call being handled.
    now: Duration,
    /// The usage state of sessions with URRs or a BUFF|NOCP FAR, by UP SEID; their uplink
    /// TEIDs; when [`Upf::poll`] looks at them next.
    metering: HashMap<u64, Box<Metering>>,
    by_teid: HashMap<u32, u64>,
    timers: BTreeSet<(Duration, u64)>,
    /// Our Session Report Requests awaiting their response, by sequence number.
    reports: BTreeMap<u32, OutReport>,
    /// Responses waiting for the handling nodes' counts.
    reads: HashMap<Token, Read>,
    /// The heap bytes of the meters of `metering` ([`Metering::heap`]).
    meter_heap: usize,
    /// Where the UE address pools' searches go on.
    next_ue_v4: u64,
    next_ue_v6: u64,
    /// The sessions' paths between UEs and the CP function.
    cp: cp::CpIndex,
    /// State changes are recorded ([`Upf::track_state`]): the sessions changed since the last
    /// [`Upf::take_state_changes`], and the association records handed out.
    track: bool,
    changed_sessions: Vec<u64>,
    saved_associations: HashMap<u64, Vec<u8>>,
}

impl<S: Sessions> Upf<S> {
    /// An endpoint with no association.
    pub fn new(config: Config, sessions: S) -> Self {
        let n = config.expected_sessions;
        let teids = TeidSet::new(config.allocator_id);
        let slab = Slab::new(
            u16::from(config.incarnation) << 8 | u16::from(config.allocator_id),
            n,
        );
        let cache = Responses::new(config.response_ttl, config.response_cache_entries);
        // Each incarnation starts in its own 1/256 of the TEID space: TEIDs still installed
        // for sessions a restart lost are not the first ones given out again.
        let next_teid = u32::from(config.incarnation) << 16 | 1;
        Upf {
            config,
            sessions_impl: sessions,
            associations: HashMap::default(),
            by_addr: HashMap::default(),
            sessions: slab,
            ue_index: UeIndex::with_capacity(n),
            teids,
            next_teid,
            busy: HashSet::default(),
            busy_nodes: HashSet::default(),
            releases: HashMap::default(),
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
            now: Duration::ZERO,
            // Every session of the open5gs and free5GC shapes has a URR: as many meters as
            // sessions, allocated with them (the maps of a million sessions that double hold
            // the control thread for a fraction of a second, at every node together).
            metering: HashMap::with_capacity_and_hasher(n, Default::default()),
            by_teid: HashMap::with_capacity_and_hasher(n, Default::default()),
            timers: BTreeSet::new(),
            reports: BTreeMap::new(),
            reads: HashMap::default(),
            meter_heap: 0,
            next_ue_v4: 0,
            next_ue_v6: 0,
            cp: cp::CpIndex::with_expected(n),
            track: false,
            changed_sessions: Vec::new(),
            saved_associations: HashMap::default(),
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
            let session = Stored { kept }.unpack(&self.shapes, &self.stopped_of(up_seid));
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
        self.now = now;
        self.cache.expire(now);
        let mut out = Vec::new();
        let mut rest = bytes;
        loop {
            let (header, body, after) = match Header::parse(rest) {
                Ok(x) => x,
                Err(DecodeError::Version(_)) => {
                    if !self.allowed(from.ip()) {
                        self.stats.peers_refused += 1;
                        return out;
                    }
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
        self.now = now;
        self.cache.expire(now);
        let mut out = Vec::new();
        if let Some(p) = self.pending.remove(&token) {
            self.in_flight.remove(&(p.to, p.sequence, p.digest));
            let key = (p.to, p.digest);
            let msg = self.finish(key, p.request, p.reply_seid, p.sequence, p.commit, result);
            if let Some(msg) = msg {
                self.send(&mut out, now, p.to, Some((p.sequence, p.digest)), msg);
            }
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
        if !self.allowed(from.ip()) {
            // Not a configured SMF: nothing it sends is handled. An Association Setup is
            // answered Request rejected (TS 29.244 7.4.4.2: the peer learns why it has no
            // association); anything else is dropped unanswered (no answer to spoofers).
            self.stats.peers_refused += 1;
            if t == msg_type::ASSOCIATION_SETUP_REQUEST && !self.replaying {
                let r = Reject::cause(Cause::REQUEST_REJECTED);
                let msg = self.reject(t, None, header.sequence, r);
                self.send(out, now, from, None, msg);
            }
            return;
        }
        if t == msg_type::HEARTBEAT_RESPONSE {
            self.heartbeat_answered(from, header.sequence, body);
            return;
        }
        if t == msg_type::SESSION_REPORT_RESPONSE {
            self.report_answered(from, header.sequence, body);
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
            Ok(Body::HeartbeatRequest(h)) => Some(self.heartbeat(from, seq, h)),
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
    /// ([`Stats::peers_dead`]) and heartbeated on; after [`Config::dead_peer_grace`] dead its
    /// association and sessions are released. A peer whose heartbeats show a new Recovery
    /// Time Stamp (restarted, without session restoration) keeps its association and loses
    /// its sessions (TS 29.244 6.2.2, TS 23.527; we offer no session retention). Also what is due
    /// of reports: URR timers (time thresholds and quotas,
    /// periods), delayed Downlink Data Reports, retransmissions of Session Report Requests,
    /// and responses whose usage counts did not come in time; and the next part of a release
    /// under way whose part before is installed ([`Config::release_part`]). Call it every
    /// second or so, and soon again while [`Upf::release_part_ready`].
    pub fn poll(&mut self, now: Duration) -> Vec<Transmit> {
        self.now = now;
        let mut out = Vec::new();
        self.heartbeats_due(now, &mut out);
        self.peers_due(now);
        out.extend(self.poll_reports(now));
        out
    }

    /// What [`Upf::poll`] does for reports alone (URR timers, delayed Downlink Data Reports,
    /// retransmissions of Session Report Requests, responses whose counts did not come in
    /// time), without heartbeats or the peers' liveness: for an endpoint serving another's
    /// sessions for a while (a node's stand-in), whose associations' heartbeats are the
    /// associated endpoint's. The next parts of releases under way go on here too (a release
    /// replicated from the associated endpoint).
    pub fn poll_reports(&mut self, now: Duration) -> Vec<Transmit> {
        self.now = now;
        let mut out = Vec::new();
        self.releases_due(now, &mut out);
        self.reports_due(now, &mut out);
        out
    }

    /// Whether a release under way has its next part ready for [`Upf::poll`] (its part
    /// before installed; a refused part counts once its second is over, as of the last call).
    pub fn release_part_ready(&self) -> bool {
        (self.releases.values()).any(|r| r.ready(self.now))
    }

    /// The sequence number of this endpoint's next request (heartbeats, Session Report
    /// Requests).
    pub fn next_sequence(&self) -> u32 {
        self.next_seq
    }

    /// Numbers this endpoint's requests from `seq` on (taken into 1..=0xff_ffff): an endpoint
    /// sending from another's socket (a stand-in's guest) keeps its requests' numbers apart
    /// from the other's, so that a peer does not take one for a retransmission of the other.
    pub fn sequences_from(&mut self, seq: u32) {
        self.next_seq = seq.wrapping_sub(1) % 0xff_ffff + 1;
    }

    /// Whether this endpoint's Session Report Request `seq` waits for its answer.
    pub fn awaits_report(&self, seq: u32) -> bool {
        self.reports.contains_key(&seq)
    }

    /// Whether a session of this endpoint holds uplink TEID `ul_teid` (its counts are
    /// wanted: [`Upf::usage`]).
    pub fn meters(&self, ul_teid: u32) -> bool {
        self.by_teid.contains_key(&ul_teid)
    }

    /// Sets the Recovery Time Stamp the endpoint sends from now on: change it whenever the
    /// user plane lost its session state (TS 29.244 6.2.6.2.2 tells peers by it).
    pub fn set_recovery_time_stamp(&mut self, ts: RecoveryTimeStamp) {
        self.config.recovery_time_stamp = ts;
    }

    /// The response header SEID for a request about `up_seid` from `from`.
    fn reply_seid(&self, from: SocketAddr, up_seid: u64) -> u64 {
        self.owned(from, up_seid)
            .and_then(|(_, packed)| packed_cp_seid(&packed).ok())
            .unwrap_or(0)
    }

    /// Whether `ip` may be a peer ([`Config::allowed_peers`]).
    fn allowed(&self, ip: IpAddr) -> bool {
        let peers = &self.config.allowed_peers;
        peers.is_empty() || peers.iter().any(|p| crate::prefix::contains(*p, ip))
    }

    fn our_node(&self) -> NodeId {
        self.config.node_id.clone()
    }
}
