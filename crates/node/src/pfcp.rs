//! The node's PFCP endpoint (TS 29.244, N4/Sxb): every node of a cluster answers PFCP on its
//! `pfcp_addr` (control network, port 8805) and the cluster is one UPF: every node's endpoint
//! has the cluster's Node ID and Recovery Time Stamp (both chosen by `cluster up`, in the
//! node's [`ControlFile`]), and allocates UP F-SEIDs and uplink TEIDs whose top bits are the
//! node's index plus one (`sb_pfcp::Config::allocator_id`), so they are unique cluster-wide.
//!
//! The datagrams go to an [`sb_pfcp::Upf`]; its [`Sessions`] implementation ([`Cluster`])
//! places a new session on a node (round robin over the nodes: balanced) with that node's
//! `ran` address, and turns the session's [`FibChange`]s into control-plane updates of the
//! UE's FIB entry ([`Tunnel`]: downlink TEID and eNodeB from the FAR, uplink TEID from the
//! F-TEID we allocated). The updates are one client request to this node's `sb_control::Node`
//! from [`LOCAL_CLIENT`] (an address no datagram comes from); the control loop hands the
//! reply back here ([`Endpoint::reply`]) once every update is durable at its owner and
//! installed everywhere, and only then is the PFCP response sent.
//!
//! Any node takes any message: the endpoints relay to each other over the control network
//! ([`sb_pfcp::relay`], authenticated with the cluster's key, on UDP [`RELAY_PORT`] of the
//! PFCP addresses, not PFCP's 8805; `pfcp_peers` in the
//! [`ControlFile`] lists them). An association set up, updated or released at one node is
//! replicated to the others; a Session Modification or Deletion for a session another node
//! holds (its SEID's top bits name the node) is relayed there and its answer comes back
//! through the node the SMF asked; a SEID whose top bits name no node of the cluster is
//! answered Session context not found by the node asked.
//!
//! Session state (SEID -> rules) and associations live on the node the Establishment came to,
//! as records of its GPT range (`crate::pfcp_state`): every change is handed to the node's
//! control plane ([`sb_control::Node::put_state`]) and its PFCP response (and relays) leave
//! only once the change is durable (committed in the range's Raft group with replication). A
//! restarted node takes them back before it answers any datagram (`Endpoint::restore`), so
//! its Recovery Time Stamp stays; so does a node whose log was wiped, from its range's other
//! replicas. While a node is down, the node standing in for it (the first live replica of its
//! range, which then leads the range's group) opens a *guest* endpoint of the gone node's
//! sessions from its replica of the records and serves the session requests relayed to the
//! gone node; their changes go into the gone node's range's records, so the node has them
//! when it is back (and the guest closes).
//!
//! What this does not do (stated, not hidden):
//! - A guest reports usage as the gone node would have: the handling nodes send its
//!   sessions' counts and first buffered packets to the stand-in instead of the gone node,
//!   its URRs fire Session Report Requests from the stand-in's address (numbered apart from
//!   the stand-in's own), and its deletions' and Query URRs' counts are asked of the live
//!   nodes alone (so are every endpoint's while a node is gone). The counts of the slots the
//!   gone node itself handled died with it, and what the guest measured but had not
//!   reported when the node comes back is not reported. A modification or deletion of a UE
//!   address whose FIB entry belongs to the gone node's own range is applied by that range's
//!   stand-in (`sb_control`'s `node/guest.rs`: a change that keeps the handling node, or a
//!   deletion); a new UE address in that range (an establishment) is refused until the node
//!   is back (`Outcome::OwnerDown`, the request's cause 77). A modification of a session whose
//!   handling node died goes to the survivor its flow was moved to. A new Recovery Time
//!   Stamp is announced only where state was lost: a lost log
//!   without replication, or records that do not restore.
//! - The FIB holds one entry per UE address, both directions: an uplink without a downlink
//!   tunnel (at establishment, or idle) is an entry whose downlink TEID and gNB are 0, which
//!   the engine does not tunnel to. A session without an uplink PDR accepts uplink G-PDUs on
//!   the downlink TEID (as `flows.csv`'s tunnels do).
//! - The updates of one request are applied each on its own: a session with an IPv4 and an
//!   IPv6 UE address whose second update fails keeps the first (the response says failure).
//!   A dual-stack session's two entries share one uplink TEID, so only the last one installed
//!   accepts uplink G-PDUs.
//! - A deleted session's (or removed downlink's) FIB entry stays for
//!   [`crate::control::REMOVAL_GRACE`] after the response, as every removal of the control
//!   plane does (for packets already in the fabric); a modified tunnel takes effect at once.
//! - An Insert of a UE address the FIB already holds (from `flows.csv`, `scalebricks update`
//!   or another node's PFCP session) is refused by the control plane: System failure.

use crate::config::NodeFile;
use crate::control::{ControlError, ControlFile};
use crate::metrics::PfcpKey;
use crate::pfcp_state::{Keeping, Out};
use sb_control::{ClusterSpec, Op, Outcome, Peer, Update};
use sb_engine::lte::Tunnel;
use sb_engine::policy::Policy;
use sb_pfcp::{
    Applied, Failure, FibChange, Meter, MeterLine, NodeId, Placement, RecoveryTimeStamp, Relay,
    RelayKind, Sessions, Token, UeChange, UeFib, Upf, Usage, UsageRead,
};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The endpoint's maps: foldhash, seeded per process.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// The client address of the PFCP endpoint's requests to its own node (0.0.0.0:0: no datagram
/// comes from there).
pub const LOCAL_CLIENT: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// A local request not answered after this long is handed to the node again (it drops
/// requests while it boots; a retransmission of the same id is answered once).
const RESEND: Duration = Duration::from_secs(1);

/// The UDP port of the relays between a cluster's PFCP endpoints, on their PFCP addresses.
pub const RELAY_PORT: u16 = 8806;

/// Seconds from 1900 (PFCP's epoch) to 1970.
pub const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// The PFCP Node ID of a name from the control file: an IP address, else an FQDN.
pub fn node_id(name: &str) -> NodeId {
    match name.parse::<IpAddr>() {
        Ok(IpAddr::V4(a)) => NodeId::Ipv4(a),
        Ok(IpAddr::V6(a)) => NodeId::Ipv6(a),
        Err(_) => NodeId::Fqdn(name.to_string()),
    }
}

/// The snake_case name of a PFCP message type (`type_N` for one we do not know).
pub fn message_name(t: u8) -> String {
    use sb_pfcp::msg_type::*;
    match t {
        HEARTBEAT_REQUEST => "heartbeat_request",
        HEARTBEAT_RESPONSE => "heartbeat_response",
        ASSOCIATION_SETUP_REQUEST => "association_setup_request",
        ASSOCIATION_SETUP_RESPONSE => "association_setup_response",
        ASSOCIATION_UPDATE_REQUEST => "association_update_request",
        ASSOCIATION_UPDATE_RESPONSE => "association_update_response",
        ASSOCIATION_RELEASE_REQUEST => "association_release_request",
        ASSOCIATION_RELEASE_RESPONSE => "association_release_response",
        VERSION_NOT_SUPPORTED_RESPONSE => "version_not_supported_response",
        SESSION_ESTABLISHMENT_REQUEST => "session_establishment_request",
        SESSION_ESTABLISHMENT_RESPONSE => "session_establishment_response",
        SESSION_MODIFICATION_REQUEST => "session_modification_request",
        SESSION_MODIFICATION_RESPONSE => "session_modification_response",
        SESSION_DELETION_REQUEST => "session_deletion_request",
        SESSION_DELETION_RESPONSE => "session_deletion_response",
        _ => return format!("type_{t}"),
    }
    .to_string()
}

/// The snake_case name of a PFCP cause (`cause_N` for one we do not send).
pub fn cause_name(c: u8) -> String {
    match c {
        1 => "request_accepted",
        64 => "request_rejected",
        65 => "session_context_not_found",
        66 => "mandatory_ie_missing",
        67 => "conditional_ie_missing",
        68 => "invalid_length",
        69 => "mandatory_ie_incorrect",
        71 => "invalid_f_teid_allocation_option",
        72 => "no_established_pfcp_association",
        73 => "rule_creation_modification_failure",
        74 => "pfcp_entity_in_congestion",
        75 => "no_resources_available",
        76 => "service_not_supported",
        77 => "system_failure",
        _ => return format!("cause_{c}"),
    }
    .to_string()
}

/// The data plane's policy of a UE's [`sb_pfcp::UePolicy`] (the same fields; DROP is
/// `drop_dl`).
fn policy(p: &sb_pfcp::UePolicy) -> Policy {
    Policy {
        dl_mbr_kbps: p.dl_mbr_kbps,
        ul_mbr_kbps: p.ul_mbr_kbps,
        dl_gate_closed: p.dl_gate_closed,
        ul_gate_closed: p.ul_gate_closed,
        count: p.count,
        buffer: p.buffer,
        notify: p.notify,
        end_marker: p.end_marker,
        drop_dl: p.dl_drop,
        dl_ambr_kbps: p.dl_ambr_kbps,
        ul_ambr_kbps: p.ul_ambr_kbps,
        session: p.session,
    }
}

/// The FIB entry of a UE address's forwarding at `node` for the endpoint `owner` (its
/// allocator id), when it has a tunnel either way.
fn tunnel(ue: IpAddr, node: u16, f: &UeFib, owner: u8) -> Option<Tunnel> {
    if f.is_empty() {
        return None;
    }
    // An uplink before the gNB's tunnel is known (an establishment, or a session whose
    // downlink is idle): the entry's downlink TEID and gNB are 0, which the engine drops
    // ([`sb_engine::Drop::NoTunnel`]) while the uplink forwards.
    let (teid, enb) = f.down.unwrap_or((0, Ipv4Addr::UNSPECIFIED));
    Some(Tunnel {
        ue,
        teid,
        enb,
        node,
        qci: 9,
        ul_teid: f.up.unwrap_or(0),
        qfi: f.qfi,
        rqi: false,
        policy: policy(&f.policy),
        owner,
    })
}

/// A change handed to the control plane, waiting for its reply.
struct Pending {
    /// Its updates, for the request(s) that carry them.
    updates: Vec<Update>,
    /// Requests carrying a part of its updates not answered yet (a change of more updates
    /// than one request holds, such as the release of an association with many sessions,
    /// spans several).
    parts_left: usize,
    /// The outcomes of its answered parts that were not Applied (the first of each kind).
    not_applied: Vec<Outcome>,
}

/// One client request to the control plane: the updates of several changes, in order.
struct Batch {
    /// The changes (pending ids) and how many updates each has.
    parts: Vec<(u64, usize)>,
    /// The request, for a resend.
    request: Vec<u8>,
    /// When it was last handed over.
    sent: Instant,
}

/// The cluster as the PFCP endpoint sees it: placement and control-plane updates. It keeps no
/// copy of the sessions' forwarding: the endpoint gives each change's UE addresses whole,
/// before and after ([`UeChange`]), and the update follows from the two.
pub struct Cluster {
    /// The client key (the node's control plane takes this endpoint's requests as a client's).
    key: [u8; 32],
    cluster_id: u64,
    /// The node whose control plane takes the requests.
    to: u16,
    ran_addrs: Vec<Ipv4Addr>,
    next_node: usize,
    id_base: u64,
    pending: HashMap<u64, Pending>,
    /// Changes not yet in a request ([`Cluster::flush`] packs them).
    queued: Vec<u64>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    /// Updates per request at most.
    max_batch: usize,
    outbox: Vec<Vec<u8>>,
    /// This endpoint's allocator id: the owner written into its sessions' FIB values.
    owner: u8,
    /// Counts the endpoint asked for ([`Sessions::read_usage`]), for [`Endpoint::meter`].
    usage_reads: Vec<(Token, Vec<u32>)>,
}

impl Cluster {
    /// The cluster of `spec` whose nodes' `ran` addresses are `ran_addrs`; the first new
    /// session goes to node `first`.
    pub fn new(spec: &ClusterSpec, ran_addrs: Vec<Ipv4Addr>, first: u16) -> Cluster {
        Cluster {
            key: spec.client_key(),
            cluster_id: spec.cluster_id,
            to: first,
            next_node: first as usize,
            ran_addrs,
            id_base: rand::random::<u64>() & !0xffff_ffff,
            pending: HashMap::default(),
            queued: Vec::new(),
            batches: HashMap::default(),
            next_batch: 0,
            max_batch: sb_control::client::max_updates(spec.key_bytes, spec.value_bytes).max(1),
            outbox: Vec::new(),
            owner: first as u8 + 1,
            usage_reads: Vec::new(),
        }
    }

    /// The cluster as the endpoint of gone node `owner` sees it, served by node `to` in its
    /// place (its requests go to `to`'s control plane; its sessions' FIB values name
    /// `owner`'s endpoint).
    pub fn for_owner(spec: &ClusterSpec, ran_addrs: Vec<Ipv4Addr>, to: u16, owner: u16) -> Cluster {
        let mut c = Cluster::new(spec, ran_addrs, to);
        c.owner = owner as u8 + 1;
        c
    }

    /// The requests to hand to the node's control plane: the changes applied since the
    /// last call, packed ([`Cluster::flush`]), and those unanswered for a second.
    pub fn requests(&mut self) -> Vec<Vec<u8>> {
        self.flush();
        let mut requests = std::mem::take(&mut self.outbox);
        for b in self.batches.values_mut() {
            if b.sent.elapsed() >= RESEND {
                b.sent = Instant::now();
                requests.push(b.request.clone());
            }
        }
        requests
    }

    /// Packs the changes applied since the last call into as few client requests as fit
    /// (in order; a change's updates stay in one request unless they are more than one
    /// holds), ready in `outbox`. Sessions that
    /// arrive together cost one request, one log commit and one delta per owner, instead of
    /// one each.
    pub fn flush(&mut self) {
        let queued = std::mem::take(&mut self.queued);
        let mut parts: Vec<(u64, usize)> = Vec::new();
        let mut updates: Vec<Update> = Vec::new();
        for id in queued {
            let Some(p) = self.pending.get_mut(&id) else {
                continue;
            };
            // A change larger than a request is cut into requests of at most max_batch.
            let chunks: Vec<Vec<Update>> = p
                .updates
                .chunks(self.max_batch)
                .map(|c| c.to_vec())
                .collect();
            p.parts_left = chunks.len();
            for chunk in chunks {
                if !updates.is_empty() && updates.len() + chunk.len() > self.max_batch {
                    self.send_batch(std::mem::take(&mut parts), std::mem::take(&mut updates));
                }
                parts.push((id, chunk.len()));
                updates.extend(chunk);
            }
        }
        if !updates.is_empty() {
            self.send_batch(parts, updates);
        }
    }

    fn send_batch(&mut self, parts: Vec<(u64, usize)>, updates: Vec<Update>) {
        // Batch ids differ from change ids in bit 32 (change ids are `id_base + token`).
        let id = (self.id_base ^ (1 << 32)).wrapping_add(self.next_batch);
        self.next_batch += 1;
        // The batch ids increase: the request's sequence numbers under this run's client id.
        let stamp = sb_control::client::Stamp {
            client: self.id_base,
            seq: id,
            time: sb_control::client::unix_nanos(),
        };
        match sb_control::client::encode_request(
            &self.key,
            self.cluster_id,
            self.to,
            stamp,
            &updates,
        ) {
            Ok(request) => {
                self.outbox.push(request.clone());
                self.batches.insert(
                    id,
                    Batch {
                        parts,
                        request,
                        sent: Instant::now(),
                    },
                );
            }
            Err(e) => {
                // Cannot happen: `apply` builds updates of the spec's sizes, no more than a
                // request holds. Were it to, the changes stay pending and their PFCP requests
                // unanswered (the SMF times out); say so.
                eprintln!(
                    "pfcp: a request of {} updates cannot be encoded: {e}",
                    updates.len()
                );
            }
        }
    }

    /// The outcomes of the request `id` (a batch): each change's result, in order. Nothing
    /// for an unknown id (a duplicate reply).
    fn finish_batch(&mut self, id: u64, results: &[Outcome]) -> Vec<(Token, Result<(), Failure>)> {
        let Some(b) = self.batches.remove(&id) else {
            return Vec::new();
        };
        let total: usize = b.parts.iter().map(|p| p.1).sum();
        let mut out = Vec::new();
        let mut off = 0;
        for (pid, n) in b.parts {
            let r = if results.len() == total {
                &results[off..off + n]
            } else {
                // A reply that does not match the request: fail every change of it.
                &[Outcome::Missing][..]
            };
            off += n;
            if let Some(x) = self.finish_part(pid, r) {
                out.push(x);
            }
        }
        out
    }

    /// One request's outcomes for a part of change `id`: the change's result once every part
    /// is answered.
    fn finish_part(
        &mut self,
        id: u64,
        results: &[Outcome],
    ) -> Option<(Token, Result<(), Failure>)> {
        let p = self.pending.get_mut(&id)?;
        for o in results {
            if *o != Outcome::Applied && !p.not_applied.contains(o) {
                p.not_applied.push(*o);
            }
        }
        p.parts_left = p.parts_left.saturating_sub(1);
        if p.parts_left > 0 {
            return None;
        }
        let results = std::mem::take(&mut p.not_applied);
        self.finish(id, &results)
    }

    /// The outcome of the request of `token`. None when no such request waits.
    fn finish(&mut self, id: u64, results: &[Outcome]) -> Option<(Token, Result<(), Failure>)> {
        self.pending.remove(&id)?;
        let token = Token(id.wrapping_sub(self.id_base));
        if results.iter().all(|o| *o == Outcome::Applied) {
            return Some((token, Ok(())));
        }
        let busy = results.contains(&Outcome::Busy);
        Some((
            token,
            Err(if busy {
                Failure::NoResources
            } else {
                Failure::System
            }),
        ))
    }
}

impl Sessions for Cluster {
    fn place(&mut self, _ues: &[IpAddr]) -> Result<Placement, Failure> {
        let n = self.ran_addrs.len();
        if n == 0 {
            return Err(Failure::System);
        }
        let node = self.next_node % n;
        self.next_node = (node + 1) % n;
        Ok(Placement {
            node: node as u16,
            ran: self.ran_addrs[node],
        })
    }

    fn placement_at(&self, ran: Ipv4Addr) -> Option<Placement> {
        let node = self.ran_addrs.iter().position(|a| *a == ran)?;
        Some(Placement {
            node: node as u16,
            ran,
        })
    }

    fn apply(
        &mut self,
        token: Token,
        _: &[FibChange],
        ues: &[UeChange],
    ) -> Result<Applied, Failure> {
        let mut updates = Vec::new();
        for c in ues {
            let old = tunnel(c.ue, c.node, &c.before, self.owner);
            let new = tunnel(c.ue, c.node, &c.after, self.owner);
            let op = match (&old, &new) {
                (None, Some(_)) => Op::Insert,
                (Some(a), Some(b)) if a != b => Op::Change,
                (Some(_), None) => Op::Delete,
                // No downlink before or after (an uplink waiting for its downlink), or the
                // same entry: nothing the FIB holds changes.
                _ => continue,
            };
            let t = new.or(old).expect("one of them");
            updates.push(Update {
                value: if op == Op::Delete {
                    sb_control::Bytes::new()
                } else {
                    sb_control::Bytes::from_slice(&t.value())
                },
                op,
                key: sb_control::Bytes::from_slice(&t.key()),
                node: t.node,
            });
        }
        if updates.is_empty() {
            // Nothing the FIB holds changes (an uplink waiting for its downlink, say).
            return Ok(Applied::Done);
        }
        let id = self.id_base.wrapping_add(token.0);
        let pending = Pending {
            updates,
            parts_left: 0,
            not_applied: Vec::new(),
        };
        self.pending.insert(id, pending);
        self.queued.push(id);
        Ok(Applied::Pending)
    }

    fn read_usage(&mut self, token: Token, ul_teids: &[u32]) -> UsageRead {
        // The handling nodes hold the counts: the endpoint's next meter asks them.
        self.usage_reads.push((token, ul_teids.to_vec()));
        UsageRead::Pending
    }
}

/// The node's PFCP endpoint: its socket and the [`Upf`].
pub struct Endpoint {
    sock: UdpSocket,
    /// The socket of the relays between the endpoints ([`RELAY_PORT`] on the PFCP address:
    /// off PFCP's port, so PFCP tools do not take them for malformed PFCP), with relaying.
    relay_sock: Option<UdpSocket>,
    /// The CP function's GTP-U socket (UDP 2152 on the PFCP address): the SMF's G-PDUs to its
    /// CP-to-UP F-TEIDs arrive here, and the UEs' Router Solicitations leave here
    /// ([`Endpoint::cp_packets`]). None when it could not be bound.
    gtpu_sock: Option<UdpSocket>,
    upf: Upf<Cluster>,
    start: Instant,
    buf: Vec<u8>,
    /// Every endpoint's PFCP address by node index (relaying), and our allocator id.
    peers: Vec<SocketAddr>,
    me: u8,
    /// The cluster's key: relays are authenticated with it.
    key: Vec<u8>,
    /// Relay datagrams refused (tag, format).
    relays_refused: u64,
    /// During a key rotation ([`Endpoint::rotate_key`]): the cluster's key before it, relays
    /// sealed with it until the first instant and accepted with it until the second.
    previous_key: Option<(Vec<u8>, Instant, Instant)>,
    /// The deletions' and Query URRs' counts asked of the other nodes, by token.
    queries: HashMap<u64, UsageQuery>,
    /// The next query's token on the wire (never 0).
    next_query: u64,
    /// Lines for a guest not open yet, with when they came ([`Endpoint::route_lines`]).
    held_lines: VecDeque<(Instant, MeterLine)>,
    /// The last counts of sessions whose slot this node freed (their last entry removed), by
    /// uplink TEID, with when: a deletion's Usage Report reads them after the removal.
    finals: HashMap<u32, (Usage, Instant)>,
    /// The same TEIDs in the order kept (expired from the front).
    finals_order: VecDeque<(Instant, u32)>,
    /// When the counts of the sessions this node handles are next sent ([`METER_INTERVAL`]).
    next_meter: Instant,
    /// Slots the metering round in progress has left to visit ([`METER_BATCH`] per loop).
    meter_left: usize,
    /// The data plane's changed counts of a batch (kept for its allocation).
    counted: Vec<(u32, sb_engine::policy::Usage)>,
    /// Durable state ([`Endpoint::restore`]): whether the sessions and associations of the
    /// node's records are in the endpoint (it takes no datagram before), and its state changes
    /// on their way to the node's log.
    restored: bool,
    keep: Keeping,
    /// Whether the node's records could not be restored (then the sessions were lost).
    state_lost: bool,
    /// The Recovery Time Stamp the endpoint announces.
    recovery: RecoveryTimeStamp,
    /// What a guest endpoint is made of: the configuration, the cluster, the `ran` addresses.
    config: sb_pfcp::Config,
    spec: ClusterSpec,
    ran_addrs: Vec<Ipv4Addr>,
    /// The stand-ins as the node last gave them (`sb_control::Event::StandIns`), and the
    /// endpoints of gone nodes this one stands in for ([`Endpoint::guests_step`]).
    stand_ins: Vec<Option<u16>>,
    guests: BTreeMap<u16, Guest>,
    /// Guests whose sessions are being restored on a thread of their own (a gone node's
    /// hundreds of thousands of sessions take seconds: on the control thread they would cost
    /// it its leases, and the cluster its stand-in): taken as guests when done.
    pending_guests: BTreeMap<u16, std::thread::JoinHandle<Restored>>,
    /// Relays for a guest's sessions dropped while the guest was being restored (its SMF
    /// sends them again).
    dropped_before_guest: u64,
    /// Relays between this endpoint and its guests (from, relay).
    local: VecDeque<(u8, Relay)>,
    /// Datagrams dropped because the endpoint was not restored yet.
    dropped_before_restore: u64,
    /// Its state is the node's records (not `ControlFile::pfcp_volatile`).
    upf_tracks: bool,
}

/// The endpoint of a gone node whose range this node's control plane leads in its place (the
/// stand-in): the gone node's sessions and associations from this node's replica of its
/// range's records, serving the session requests relayed to the gone node; its changes go
/// into that range's records ([`sb_control::Node::put_state_for`]), so the node has them
/// when it is back. It reports usage as the gone node's endpoint would: the handling nodes'
/// counts of its sessions come to it ([`Endpoint::counts_to`]), its URRs fire Session Report
/// Requests, and its deletions and Query URRs answer with Usage Reports; its associations'
/// heartbeats are the associated endpoint's ([`sb_pfcp::Upf::poll_reports`]).
struct Guest {
    upf: Upf<Cluster>,
    keep: Keeping,
}

/// A guest's endpoint with its sessions restored and the records restored, or why not.
type Restored = Result<(Upf<Cluster>, usize), String>;

/// Slots a metering round visits per loop iteration at most (about a millisecond of work):
/// a round of more sessions with traffic goes on over the next iterations, between the
/// control plane's messages.
pub const METER_BATCH: usize = 4096;

/// How often a node sends the changed counts of the sessions it handles to their endpoints'
/// URRs: a threshold or quota crossed is reported within about this long plus a round trip.
pub const METER_INTERVAL: Duration = Duration::from_millis(250);

/// How long a freed slot's last counts are kept for a deletion's Usage Report.
const FINAL_KEPT: Duration = Duration::from_secs(30);

/// Counts asked of the other nodes for a response that waits for them.
struct UsageQuery {
    /// The endpoint's (`None`) or guest `o`'s response, and its token there.
    whose: Option<u16>,
    token: Token,
    teids: Vec<u32>,
    got: Vec<(u32, Usage)>,
    /// Answers still to come (one per node per datagram of the query).
    answers_left: usize,
    /// When it was asked (the endpoint answers without the counts after
    /// `sb_pfcp::Config::usage_read_timeout`; the query is forgotten after [`FINAL_KEPT`]).
    asked: Instant,
}

/// Where the counts of an uplink TEID go ([`Endpoint::counts_to`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CountsTo {
    /// This endpoint's sessions.
    Own,
    /// The sessions of gone node `o`, which this node serves ([`Guest`]).
    Guest(u16),
    /// Another endpoint (its allocator id; 0: every other one).
    Relay(u8),
    /// A gone node's session that this node stands in for, whose guest is not open yet.
    NotYet,
}

/// Where the counts (and first buffered packet) of uplink TEID `teid` go, at the endpoint of
/// allocator id `me` (`nodes`: the cluster's node count when relaying, `None` without): to the
/// endpoint that allocated it (its top byte) or, while that node is gone (`stand_ins` names
/// its stand-in), to the guest serving its sessions at its stand-in (`guest(o)`: this
/// endpoint has gone node `o`'s guest); a TEID the SMF chose, to whoever here holds its
/// session (`holder(teid)`: `Some(None)` this endpoint, `Some(Some(o))` guest `o`), or else to
/// every other endpoint.
fn counts_to(
    teid: u32,
    me: u8,
    nodes: Option<usize>,
    stand_ins: &[Option<u16>],
    holder: impl Fn(u32) -> Option<Option<u16>>,
    guest: impl Fn(u16) -> bool,
) -> CountsTo {
    let owner = (teid >> 24) as u8;
    let Some(nodes) = nodes else {
        return CountsTo::Own;
    };
    if owner == me {
        return CountsTo::Own;
    }
    if owner == 0 || usize::from(owner) > nodes {
        return match holder(teid) {
            Some(None) => CountsTo::Own,
            Some(Some(o)) => CountsTo::Guest(o),
            None => CountsTo::Relay(0),
        };
    }
    let o = u16::from(owner) - 1;
    if guest(o) {
        return CountsTo::Guest(o);
    }
    match stand_ins.get(usize::from(o)).copied().flatten() {
        Some(s) if s + 1 == u16::from(me) => CountsTo::NotYet,
        Some(s) => CountsTo::Relay(s as u8 + 1),
        None => CountsTo::Relay(owner),
    }
}

/// How long lines for a guest not open yet are held ([`Endpoint::route_lines`]).
const HELD_KEPT: Duration = Duration::from_secs(10);

/// Lines held for guests not open yet at most.
const HELD_MAX: usize = 1 << 16;

/// A usage relay's line of `ul_teid`'s counts `u`.
fn usage_line(ul_teid: u32, u: Usage) -> MeterLine {
    MeterLine {
        ul_teid,
        downlink_data: false,
        known: true,
        counts: [u.ul_bytes, u.dl_bytes, u.ul_packets, u.dl_packets],
    }
}

/// The counts of a usage relay's line.
fn line_usage(l: &MeterLine) -> Usage {
    let [ul_bytes, dl_bytes, ul_packets, dl_packets] = l.counts;
    Usage {
        ul_bytes,
        dl_bytes,
        ul_packets,
        dl_packets,
    }
}

/// The PFCP usage of the data plane's.
fn pfcp_usage(u: sb_engine::policy::Usage) -> Usage {
    Usage {
        ul_bytes: u.ul_bytes,
        dl_bytes: u.dl_bytes,
        ul_packets: u.ul_packets,
        dl_packets: u.dl_packets,
    }
}

/// The control file's allowed PFCP peers and UE pool share into `config`
/// (`sb_pfcp::Config::allowed_peers`, `ue_pool_v4`, `ue_pool_v6`).
fn peers_and_pools(ctl: &ControlFile, config: &mut sb_pfcp::Config) -> Result<(), ControlError> {
    let prefixes = |what: &str, list: &[String]| {
        (list.iter())
            .map(|p| sb_pfcp::prefix::parse(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ControlError::Invalid(format!("{what}: {e}")))
    };
    config.allowed_peers = prefixes("pfcp_allowed_peers", &ctl.pfcp_allowed_peers)?;
    config.ue_pool_v4.clear();
    config.ue_pool_v6.clear();
    for (ip, len) in prefixes("pfcp_ue_pool_v4", &ctl.pfcp_ue_pool_v4)? {
        match ip {
            IpAddr::V4(a) => config.ue_pool_v4.push((a, len)),
            IpAddr::V6(_) => {
                return Err(ControlError::Invalid(format!(
                    "pfcp_ue_pool_v4: {ip}/{len} is not IPv4"
                )))
            }
        }
    }
    for (ip, len) in prefixes("pfcp_ue_pool_v6", &ctl.pfcp_ue_pool_v6)? {
        match ip {
            IpAddr::V6(a) if len <= 64 => config.ue_pool_v6.push((a, len)),
            _ => {
                return Err(ControlError::Invalid(format!(
                    "pfcp_ue_pool_v6: {ip}/{len} is not an IPv6 prefix of at most 64 bits"
                )))
            }
        }
    }
    Ok(())
}

impl Endpoint {
    /// The endpoint of the node, bound to `ctl.pfcp` in the node's namespace; None when the
    /// control file names no PFCP address. `epoch`: the node's control epoch, 1 at its first
    /// start. Above 1 the node ran before, so the sessions its endpoint held are lost: it
    /// announces a Recovery Time Stamp of now instead of the cluster's (TS 29.244 19A: the
    /// SMF learns that this UPF lost state and sets its sessions up again), and its SEIDs
    /// carry the epoch (`sb_pfcp::Config::incarnation`, mod 256), so that none of the lost
    /// sessions' SEIDs names a new session.
    pub fn open(
        cfg: &NodeFile,
        ctl: &ControlFile,
        spec: &ClusterSpec,
        epoch: u32,
        state_lost: bool,
    ) -> Result<Option<Endpoint>, ControlError> {
        let Some(addr) = ctl.pfcp else {
            return Ok(None);
        };
        let IpAddr::V4(ip) = addr.ip() else {
            return Err(ControlError::Invalid(format!(
                "pfcp address {addr} is not IPv4"
            )));
        };
        let sock = match &cfg.netns {
            Some(ns) => sb_io::netns::in_netns(ns, || UdpSocket::bind(addr))
                .map_err(|e| ControlError::Invalid(format!("entering {ns}: {e}")))?,
            None => UdpSocket::bind(addr),
        }
        .map_err(|e| ControlError::Invalid(format!("binding {addr}: {e}")))?;
        sock.set_nonblocking(true)
            .map_err(|e| ControlError::Invalid(format!("{addr}: {e}")))?;
        // Bursts of a whole SMF window (and the other endpoints' relays) while the control
        // loop commits: 16 MiB each way, so none is dropped in the kernel.
        if let Err(e) = sb_io::set_socket_buffers(sock.as_raw_fd(), 16 << 20) {
            eprintln!("pfcp: socket buffers on {addr}: {e}");
        }
        let now_ntp = {
            let unix = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            (unix + NTP_UNIX_OFFSET) as u32
        };
        let recovery = match ctl.pfcp_recovery_time_stamp {
            // Never earlier than the cluster's (a clock set back would repeat an old one).
            Some(t) if state_lost => now_ntp.max(t.wrapping_add(1)),
            Some(t) => t,
            None => now_ntp,
        };
        let name = ctl
            .pfcp_node_id
            .clone()
            .unwrap_or_else(|| format!("upf{:016x}.scalebricks", spec.cluster_id));
        let mut config = sb_pfcp::Config::new(node_id(&name), RecoveryTimeStamp(recovery), ip);
        // The endpoint's clock starts now ([`Endpoint::start`]): the usage reports' times count
        // from here, not from the cluster's Recovery Time Stamp.
        config.ntp_at_zero = now_ntp;
        if cfg.node >= 255 {
            return Err(ControlError::Invalid(format!(
                "PFCP allocates per node with 8 bits: node {} is too many",
                cfg.node
            )));
        }
        config.allocator_id = cfg.node as u8 + 1;
        config.incarnation = epoch as u8;
        config.relay = ctl.pfcp_peers.len() > 1;
        config.endpoints = ctl.pfcp_peers.len().min(255) as u8;
        // Sessions live on the endpoint that took them: one endpoint may hold the cluster's
        // whole capacity (the FIB refuses past it: No resources available).
        config.max_sessions = (ctl.fib_room * ctl.peers.len().max(1)).max(1 << 20);
        // An SMF that spreads its requests over the nodes gives each endpoint its share.
        config.expected_sessions = ctl.share();
        peers_and_pools(ctl, &mut config)?;
        if config.relay && ctl.pfcp_peers.get(cfg.node as usize) != Some(&addr) {
            return Err(ControlError::Invalid(format!(
                "pfcp_peers names {:?} for node {}, not its pfcp address {addr}",
                ctl.pfcp_peers.get(cfg.node as usize),
                cfg.node
            )));
        }
        let relay_sock = if config.relay {
            let at = SocketAddr::new(addr.ip(), RELAY_PORT);
            let s = match &cfg.netns {
                Some(ns) => sb_io::netns::in_netns(ns, || UdpSocket::bind(at))
                    .map_err(|e| ControlError::Invalid(format!("entering {ns}: {e}")))?,
                None => UdpSocket::bind(at),
            }
            .map_err(|e| ControlError::Invalid(format!("binding {at}: {e}")))?;
            s.set_nonblocking(true)
                .map_err(|e| ControlError::Invalid(format!("{at}: {e}")))?;
            if let Err(e) = sb_io::set_socket_buffers(s.as_raw_fd(), 16 << 20) {
                eprintln!("pfcp: socket buffers on {at}: {e}");
            }
            Some(s)
        } else {
            None
        };
        let peers = (ctl.pfcp_peers.iter())
            .map(|p| SocketAddr::new(p.ip(), RELAY_PORT))
            .collect();
        let gtpu_at = SocketAddr::new(addr.ip(), sb_pfcp::upf::GTPU_PORT);
        let gtpu_sock = match &cfg.netns {
            Some(ns) => sb_io::netns::in_netns(ns, || UdpSocket::bind(gtpu_at)).ok(),
            None => Some(UdpSocket::bind(gtpu_at)),
        }
        .and_then(|s| match s {
            Ok(s) if s.set_nonblocking(true).is_ok() => Some(s),
            Ok(_) => None,
            Err(e) => {
                eprintln!("pfcp: binding {gtpu_at} (the CP function's GTP-U): {e}");
                None
            }
        });
        let cluster = Cluster::new(spec, cfg.ran_addrs.clone(), cfg.node);
        let guest_config = config.clone();
        Ok(Some(Endpoint {
            sock,
            relay_sock,
            gtpu_sock,
            upf: Upf::new(config, cluster),
            start: Instant::now(),
            buf: vec![0u8; 65536],
            peers,
            me: cfg.node as u8 + 1,
            key: spec.key.to_vec(),
            relays_refused: 0,
            previous_key: None,
            queries: HashMap::default(),
            next_query: 1,
            held_lines: VecDeque::new(),
            finals: HashMap::default(),
            finals_order: VecDeque::new(),
            next_meter: Instant::now(),
            meter_left: 0,
            counted: Vec::new(),
            // Volatile: nothing to restore, nothing tracked.
            restored: ctl.pfcp_volatile,
            keep: Keeping::new(cfg.node),
            state_lost,
            recovery: RecoveryTimeStamp(recovery),
            config: guest_config,
            spec: spec.clone(),
            ran_addrs: cfg.ran_addrs.clone(),
            stand_ins: Vec::new(),
            guests: BTreeMap::new(),
            pending_guests: BTreeMap::new(),
            dropped_before_guest: 0,
            local: VecDeque::new(),
            dropped_before_restore: 0,
            upf_tracks: !ctl.pfcp_volatile,
        }))
    }

    /// The endpoint's state (sessions, counters).
    pub fn upf(&self) -> &Upf<Cluster> {
        &self.upf
    }

    /// Sleeps until one of `others` (the control socket, the log's wake socket) or one of the
    /// endpoint's sockets is readable, or `timeout` passes (at most a millisecond while a
    /// metering round has slots left, or a release has its next part ready).
    pub fn wait(&self, others: &[std::os::fd::RawFd], timeout: Duration) {
        let releasing = self.upf.release_part_ready()
            || (self.guests.values()).any(|g| g.upf.release_part_ready());
        let timeout = if self.meter_left > 0 || releasing {
            timeout.min(Duration::from_millis(1))
        } else {
            timeout
        };
        let mut fds = others.to_vec();
        fds.push(self.sock.as_raw_fd());
        fds.extend(self.relay_sock.as_ref().map(|s| s.as_raw_fd()));
        fds.extend(self.gtpu_sock.as_ref().map(|s| s.as_raw_fd()));
        if let Err(e) = sb_io::wait_readable(&fds, timeout) {
            eprintln!("pfcp: poll: {e}");
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
    }

    /// The endpoint's message counts for `/metrics`: requests received by type (no cause) and
    /// responses sent by type and cause (see [`crate::metrics`]).
    pub fn counts(&self) -> BTreeMap<PfcpKey, u64> {
        let st = self.upf.stats();
        let mut out = BTreeMap::new();
        for (&t, &n) in &st.rx {
            *out.entry(PfcpKey {
                message: message_name(t),
                cause: String::new(),
            })
            .or_default() += n;
        }
        for (&(t, c), &n) in &st.tx {
            *out.entry(PfcpKey {
                message: message_name(t),
                cause: if c == 0 { String::new() } else { cause_name(c) },
            })
            .or_default() += n;
        }
        for (name, n) in [
            ("answered_from_cache", st.retransmissions),
            ("retransmission_in_flight", st.retransmissions_in_flight),
            ("cache_forgotten", st.responses_forgotten),
            ("heartbeat_sent", st.heartbeats_sent),
            ("peer_dead", st.peers_dead),
            ("peer_restart", st.peer_restarts),
            ("peer_refused", st.peers_refused),
            ("takeover_refused", st.takeovers_refused),
            ("peer_sessions_deleted", st.peer_sessions_deleted),
            ("peer_released", st.peers_released),
            ("release_part", st.release_parts),
            ("release_part_refused", st.release_parts_refused),
            ("cp_uplink", st.cp_uplink),
            ("cp_downlink", st.cp_downlink),
            ("cp_unmatched", st.cp_unmatched),
        ] {
            out.insert(
                PfcpKey {
                    message: name.into(),
                    cause: String::new(),
                },
                n,
            );
        }
        if self.peers.len() > 1 {
            for (name, n) in [
                ("relay_out", st.relayed_out),
                ("relay_in", st.relayed_in),
                ("relay_refused", self.relays_refused),
            ] {
                out.insert(
                    PfcpKey {
                        message: name.into(),
                        cause: String::new(),
                    },
                    n,
                );
            }
        }
        out
    }

    /// Whether a control-plane datagram to `peer` is a reply to this endpoint.
    pub fn is_mine(peer: &Peer) -> bool {
        *peer == Peer::Client(LOCAL_CLIENT)
    }

    /// Handles the PFCP datagrams waiting on the socket (at most 256) and hands the requests
    /// they cause to `node` (and again those unanswered for a second).
    pub fn receive(
        &mut self,
        node: &mut sb_control::Node,
        dp: &crate::control::DataPlane,
        now_nanos: u64,
    ) {
        if !self.restored {
            // No datagram before the node's records are in: a request taken before would
            // be answered without the sessions, and could be given their SEIDs and TEIDs.
            // They are read and dropped (the SMF retransmits), so the loop does not spin on a
            // readable socket.
            if !node.ready() || node.fenced() {
                self.drop_waiting();
                return;
            }
            self.restore(node);
        }
        // Our heartbeats to the SMFs that associated here, when due.
        let out = self.upf.poll(self.start.elapsed());
        self.send(out);
        for _ in 0..256 {
            match self.sock.recv_from(&mut self.buf) {
                Ok((n, from)) => {
                    let at = self.start.elapsed();
                    // The answer to a guest's Session Report Request goes to the guest: the
                    // one waiting for that sequence number (numbered apart from ours).
                    let bytes = &self.buf[..n];
                    let guest = (bytes.get(1) == Some(&sb_pfcp::msg_type::SESSION_REPORT_RESPONSE))
                        .then(|| sb_pfcp::Header::peek_sequence(bytes))
                        .flatten()
                        .filter(|&seq| !self.upf.awaits_report(seq))
                        .and_then(|seq| {
                            (self.guests.iter())
                                .find(|(_, g)| g.upf.awaits_report(seq))
                                .map(|(&o, _)| o)
                        });
                    match guest {
                        Some(o) => {
                            let g = self.guests.get_mut(&o).expect("a guest");
                            let out = g.upf.handle(at, from, &self.buf[..n]);
                            self.guest_send(o, out);
                        }
                        None => {
                            let out = self.upf.handle(at, from, &self.buf[..n]);
                            self.send(out);
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    eprintln!("pfcp: recv: {e}");
                    break;
                }
            }
        }
        for _ in 0..256 {
            let Some(rs) = &self.relay_sock else { break };
            match rs.recv_from(&mut self.buf) {
                Ok((n, _)) => {
                    let parsed = sb_pfcp::Relay::parse(&self.buf[..n], &self.key).or_else(|e| {
                        match &self.previous_key {
                            Some((k, _, until)) if Instant::now() < *until => {
                                sb_pfcp::Relay::parse(&self.buf[..n], k)
                            }
                            _ => Err(e),
                        }
                    });
                    let out = match parsed {
                        Ok((sender, relay))
                            if matches!(
                                relay.kind,
                                RelayKind::Usage | RelayKind::UsageQuery | RelayKind::UsageAnswer
                            ) =>
                        {
                            self.usage_relay(dp, sender, relay)
                        }
                        Ok((_, relay))
                            if matches!(relay.kind, RelayKind::ToCp | RelayKind::FromCp) =>
                        {
                            self.cp_relay(dp, relay);
                            Vec::new()
                        }
                        Ok((sender, relay)) => {
                            self.take_relay(sender, relay);
                            Vec::new()
                        }
                        Err(_) => {
                            self.relays_refused += 1;
                            Vec::new()
                        }
                    };
                    self.send(out);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    eprintln!("pfcp: recv relay: {e}");
                    break;
                }
            }
        }
        // Relays between this endpoint and its guests.
        while let Some((from, relay)) = self.local.pop_front() {
            self.take_relay(from, relay);
        }
        self.cp_packets(dp);
        self.guests_step(node);
        // A guest's reports that are due (it heartbeats nobody: the SMFs' associations are
        // the endpoints', and a guest counting an SMF dead would release its sessions).
        let at = self.start.elapsed();
        let guests: Vec<u16> = self.guests.keys().copied().collect();
        for o in guests {
            let out = (self.guests.get_mut(&o)).map_or_else(Vec::new, |g| g.upf.poll_reports(at));
            self.guest_send(o, out);
        }
        let mut requests = self.upf.sessions_impl_mut().requests();
        for g in self.guests.values_mut() {
            requests.extend(g.upf.sessions_impl_mut().requests());
        }
        for r in requests {
            node.handle(now_nanos, Peer::Client(LOCAL_CLIENT), &r);
        }
        self.save(node);
    }

    /// Reads and drops the datagrams waiting on the PFCP and relay sockets (before the
    /// endpoint is restored).
    fn drop_waiting(&mut self) {
        for _ in 0..256 {
            if self.sock.recv_from(&mut self.buf).is_err() {
                break;
            }
            self.dropped_before_restore += 1;
        }
        if let Some(rs) = &self.relay_sock {
            for _ in 0..256 {
                if rs.recv_from(&mut self.buf).is_err() {
                    break;
                }
                self.dropped_before_restore += 1;
            }
        }
    }

    /// Takes the sessions and associations of the node's records (its range's PFCP state
    /// records, [`sb_control::Node::own_state`]: what the endpoint held before the node
    /// restarted, or, for a node whose log was lost, what its range's other replicas held)
    /// and from then on hands every change of them to the node, answering only once they
    /// are durable. Records that do not restore (not ours: a bug, or a disk whose damage the
    /// log did not see) are reported and the endpoint starts without them, with a new
    /// Recovery Time Stamp: its SMFs learn that the sessions are gone.
    fn restore(&mut self, node: &sb_control::Node) {
        self.restored = true;
        match self.upf.restore_state(node.own_state()) {
            Ok(0) => {}
            Ok(n) => {
                eprintln!("pfcp: restored {n} sessions and associations from the node's records")
            }
            Err(e) => {
                eprintln!("pfcp: the node's PFCP state records do not all restore ({e}): the endpoint announces a new Recovery Time Stamp (its SMFs establish their sessions again)");
                self.state_lost = true;
                let now_ntp = (std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
                    + NTP_UNIX_OFFSET) as u32;
                let old = self.recovery.0;
                self.recovery = RecoveryTimeStamp(now_ntp.max(old.wrapping_add(1)));
                self.upf.set_recovery_time_stamp(self.recovery);
            }
        }
        self.upf.track_state(true);
    }

    /// Hands the state changes not yet handed to the node, the endpoint's and its guests'
    /// (none while it does not serve their range: they wait, and so do their datagrams).
    pub fn save(&mut self, node: &mut sb_control::Node) {
        let mut outs = self.keep.save(node);
        for g in self.guests.values_mut() {
            outs.extend(g.keep.save(node));
        }
        self.send_outs(outs);
    }

    /// The node's state change `ticket` is durable ([`sb_control::Event::StateDurable`]):
    /// the datagrams that waited for it (and for those before it) go out.
    pub fn durable(&mut self, ticket: u64) {
        let mut outs = self.keep.durable(ticket);
        for g in self.guests.values_mut() {
            outs.extend(g.keep.durable(ticket));
        }
        self.send_outs(outs);
    }

    /// The node's state change `ticket` was dropped (a new leader of its range's group did
    /// not take it): handed to the node again.
    pub fn dropped(&mut self, ticket: u64) {
        self.keep.again(Some(ticket));
        for g in self.guests.values_mut() {
            g.keep.again(Some(ticket));
        }
    }

    /// The node's state machine was restarted (fenced): the changes it was handed and did
    /// not make durable may be lost; they are handed to the new one again, in order.
    pub fn state_machine_restarted(&mut self) {
        self.keep.again(None);
        for g in self.guests.values_mut() {
            g.keep.again(None);
        }
    }

    /// Whether the sessions this endpoint held before its restart were lost.
    pub fn state_lost(&self) -> bool {
        self.state_lost
    }

    /// The durable state's counts for `cluster status`: whether the endpoint was restored,
    /// whether its earlier sessions were lost, changes handed to the node, made durable, and
    /// waiting (not handed yet, or not durable yet); the guests' sessions by gone node.
    pub fn state_counts(&self) -> serde_json::Value {
        let (unsaved, saving) = self.keep.waiting();
        let guests: BTreeMap<String, serde_json::Value> = (self.guests.iter())
            .map(|(o, g)| {
                let (u, s) = g.keep.waiting();
                (
                    o.to_string(),
                    serde_json::json!({
                        "sessions": g.upf.session_count(),
                        "changes": g.keep.handed,
                        "durable": g.keep.durable,
                        "unsaved": u,
                        "saving": s,
                        "reports_sent": g.upf.stats().reports_sent,
                        "usage_read_timeouts": g.upf.stats().usage_read_timeouts,
                    }),
                )
            })
            .collect();
        serde_json::json!({
            "restored": self.restored,
            "dropped_before_restore": self.dropped_before_restore,
            "guests_restoring": self.pending_guests.len(),
            "dropped_before_guest": self.dropped_before_guest,
            "lost": self.state_lost,
            "changes": self.keep.handed,
            "durable": self.keep.durable,
            "unsaved": unsaved,
            "saving": saving,
            "guests": guests,
        })
    }

    /// The stand-ins the node gave (`sb_control::Event::StandIns`): per node, the node
    /// standing in for it.
    pub fn set_stand_ins(&mut self, t: &[Option<u16>]) {
        self.stand_ins = t.to_vec();
    }

    /// Opens an endpoint for each gone node this one stands in for whose range's group this
    /// node leads (its sessions from this node's replica of the range's records), and closes
    /// those of nodes that serve again (their own endpoint has the records, with every
    /// change made here).
    fn guests_step(&mut self, node: &sb_control::Node) {
        let me = self.me as u16 - 1;
        if !self.upf_tracks {
            return;
        }
        let mine = |o: u16| self.stand_ins.get(o as usize).copied().flatten() == Some(me);
        let gone: Vec<u16> = (self.guests.keys().copied())
            .filter(|&o| !mine(o))
            .collect();
        for o in gone {
            if let Some(g) = self.guests.remove(&o) {
                eprintln!(
                    "pfcp: node {o} serves again: its {} sessions are its endpoint's again",
                    g.upf.session_count()
                );
            }
        }
        // Restores no longer wanted: their threads end on their own, their results unread.
        self.pending_guests.retain(|&o, _| mine(o));
        for o in 0..self.stand_ins.len() as u16 {
            if o == me
                || !mine(o)
                || self.guests.contains_key(&o)
                || self.pending_guests.contains_key(&o)
                || !node.leads_range(o)
            {
                continue;
            }
            let Some(records) = node.replica_state(o) else {
                continue;
            };
            // The records out of the node (their compact forms decoded), the rest on a
            // thread of its own.
            let records: Vec<(u64, Vec<u8>)> = records.iter().collect();
            let mut config = self.config.clone();
            config.allocator_id = o as u8 + 1;
            let cluster = Cluster::for_owner(&self.spec, self.ran_addrs.clone(), me, o);
            let restore = move || {
                let mut upf = Upf::new(config, cluster);
                let n = upf.restore_state(records).map_err(|e| e.to_string())?;
                Ok((upf, n))
            };
            match std::thread::Builder::new()
                .name(format!("guest-{o}"))
                .spawn(restore)
            {
                Ok(h) => {
                    self.pending_guests.insert(o, h);
                }
                Err(e) => eprintln!("pfcp: node {o} is gone, but no thread restores it: {e}"),
            }
        }
        let done: Vec<u16> = (self.pending_guests.iter())
            .filter(|(_, h)| h.is_finished())
            .map(|(&o, _)| o)
            .collect();
        for o in done {
            let h = self.pending_guests.remove(&o).expect("pending");
            let mut upf = match h.join() {
                Ok(Ok((upf, n))) => {
                    eprintln!(
                        "pfcp: node {o} is gone: serving its {} sessions ({n} records) in its place",
                        upf.session_count()
                    );
                    upf
                }
                Ok(Err(e)) => {
                    eprintln!("pfcp: node {o} is gone, but its records do not restore here: {e}");
                    continue;
                }
                Err(_) => {
                    eprintln!("pfcp: node {o} is gone, and its restore's thread panicked");
                    continue;
                }
            };
            if !node.leads_range(o) {
                // Another replica leads the range now: it serves the sessions (with the
                // changes made since these records).
                continue;
            }
            upf.track_state(true);
            // Its requests (Session Report Requests) leave from this endpoint's socket:
            // numbered half the space away from this endpoint's own.
            upf.sequences_from(self.upf.next_sequence().wrapping_add(0x7f_ffff));
            self.guests.insert(
                o,
                Guest {
                    upf,
                    keep: Keeping::new(o),
                },
            );
        }
    }

    /// Handles a relay from endpoint `from` (its allocator id): a session request for a
    /// guest's session goes to the guest, the rest to this endpoint's `Upf`.
    fn take_relay(&mut self, from: u8, relay: Relay) {
        let now = self.start.elapsed();
        // The node whose endpoint gave the session's SEID, if another's.
        let owner = match relay.kind {
            RelayKind::Session => sb_pfcp::Header::peek_seid(&relay.bytes)
                .map(|seid| (seid >> 48) as u8)
                .filter(|&a| a != 0 && a != self.me)
                .map(|a| a as u16 - 1),
            _ => None,
        };
        if owner.is_some_and(|o| self.pending_guests.contains_key(&o)) {
            self.dropped_before_guest += 1;
            return;
        }
        let guest = owner.filter(|o| self.guests.contains_key(o));
        match guest {
            Some(o) => {
                let g = self.guests.get_mut(&o).expect("a guest");
                let out = g.upf.handle_relay(now, from, relay);
                self.guest_send(o, out);
            }
            None => {
                let out = self.upf.handle_relay(now, from, relay);
                self.send(out);
            }
        }
    }

    /// Sends or holds what guest `o` gave (see [`Endpoint::send`]).
    fn guest_send(&mut self, o: u16, out: Vec<sb_pfcp::Transmit>) {
        let Some(g) = self.guests.get_mut(&o) else {
            return;
        };
        let changes = g.upf.take_state_changes();
        let mut relays = Vec::new();
        while let Some(r) = g.upf.poll_relay() {
            relays.push(r);
        }
        let mut outs: Vec<Out> = out.into_iter().map(Out::Pfcp).collect();
        let from = o as u8 + 1;
        for r in relays {
            outs.extend(self.route(from, r));
        }
        let g = self.guests.get_mut(&o).expect("a guest");
        let now = g.keep.hold(changes, outs);
        self.send_outs(now);
    }

    /// Takes the cluster's new master secret (`cluster rotate-key`; the node's control plane
    /// takes it at the same time, [`sb_control::Node::rotate_key`]): this endpoint's requests
    /// are signed with the new client key from now on; its relays to the other endpoints
    /// are sealed with the previous key for [`sb_control::wire::KEY_SWITCH`] more and theirs
    /// accepted with it for [`sb_control::wire::KEY_GRACE`].
    pub fn rotate_key(&mut self, spec: &ClusterSpec) {
        let c = self.upf.sessions_impl_mut();
        c.key = spec.client_key();
        let now = Instant::now();
        let old = std::mem::replace(&mut self.key, spec.key.to_vec());
        self.previous_key = Some((
            old,
            now + Duration::from_nanos(sb_control::wire::KEY_SWITCH),
            now + Duration::from_nanos(sb_control::wire::KEY_GRACE),
        ));
    }

    /// The key relays are sealed with: the previous one within the switch time of a rotation.
    fn relay_key(&self) -> &[u8] {
        match &self.previous_key {
            Some((k, switch, _)) if Instant::now() < *switch => k,
            _ => &self.key,
        }
    }

    /// Takes the node's reply to one of this endpoint's requests: the PFCP response it
    /// completes is sent.
    pub fn reply(&mut self, bytes: &[u8]) {
        let c = self.upf.sessions_impl_mut();
        let reply = match sb_control::client::decode_reply(&c.key, c.cluster_id, bytes) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("pfcp: bad reply from the control plane: {e}");
                return;
            }
        };
        if !c.batches.contains_key(&reply.id) {
            // A guest's request.
            let now = self.start.elapsed();
            let o = (self.guests.iter())
                .find(|(_, g)| g.upf.sessions_impl().batches.contains_key(&reply.id))
                .map(|(o, _)| *o);
            if let Some(o) = o {
                let g = self.guests.get_mut(&o).expect("a guest");
                let done = g
                    .upf
                    .sessions_impl_mut()
                    .finish_batch(reply.id, &reply.results);
                let mut out = Vec::new();
                for (token, result) in done {
                    out.extend(g.upf.complete(now, token, result));
                }
                self.guest_send(o, out);
            }
            return;
        }
        for (token, result) in c.finish_batch(reply.id, &reply.results) {
            let out = self.upf.complete(self.start.elapsed(), token, result);
            self.send(out);
        }
    }

    /// This node's counts of the session of `ul_teid`: its live slot's, or the last of a slot
    /// freed here.
    fn local_usage(&self, dp: &crate::control::DataPlane, ul_teid: u32) -> Option<Usage> {
        (dp.usage(ul_teid).map(pfcp_usage)).or_else(|| self.finals.get(&ul_teid).map(|f| f.0))
    }

    /// Sends `meter` as relays of `kind` to endpoint `to` (0: every other endpoint that is
    /// not gone: the stand-ins name those), as many datagrams as its lines need; returns how
    /// many each receiver gets, and how many receivers there are.
    fn send_meter(&mut self, kind: RelayKind, to: u8, meter: Meter) -> (usize, usize) {
        let chunks: Vec<&[MeterLine]> = if meter.lines.is_empty() {
            vec![&[][..]]
        } else {
            meter
                .lines
                .chunks(sb_pfcp::relay::METER_MAX_LINES)
                .collect()
        };
        let n = chunks.len();
        let me = usize::from(self.me) - 1;
        let targets: Vec<SocketAddr> = match to {
            0 => (0..self.peers.len())
                .filter(|&i| i != me && !self.is_gone(i))
                .map(|i| self.peers[i])
                .collect(),
            t => self
                .peers
                .get(usize::from(t) - 1)
                .copied()
                .into_iter()
                .collect(),
        };
        let Some(rs) = &self.relay_sock else {
            return (0, 0);
        };
        for c in chunks {
            let r = Relay {
                to,
                kind,
                peer: LOCAL_CLIENT,
                bytes: Meter {
                    token: meter.token,
                    lines: c.to_vec(),
                }
                .to_bytes(),
            };
            let bytes = r.to_bytes(self.me, self.relay_key());
            for t in &targets {
                if let Err(e) = rs.send_to(&bytes, t) {
                    eprintln!("pfcp: usage relay to {t}: {e}");
                }
            }
        }
        (n, targets.len())
    }

    /// Whether node `i` is gone (the node's control plane named a stand-in for it).
    fn is_gone(&self, i: usize) -> bool {
        self.stand_ins.get(i).copied().flatten().is_some()
    }

    /// Where the counts (and first buffered packet) of uplink TEID `teid` go
    /// ([`counts_to`]).
    fn counts_to(&self, teid: u32) -> CountsTo {
        counts_to(
            teid,
            self.me,
            self.relay_sock.is_some().then_some(self.peers.len()),
            &self.stand_ins,
            |t| {
                if self.upf.meters(t) {
                    return Some(None);
                }
                (self.guests.iter())
                    .find(|(_, g)| g.upf.meters(t))
                    .map(|(&o, _)| Some(o))
            },
            |o| self.guests.contains_key(&o),
        )
    }

    /// Hands line `l` (counts, or a first buffered packet) to this endpoint's `Upf` or to
    /// guest `o`'s; what this endpoint's gives is returned, a guest's is sent.
    fn take_line(
        &mut self,
        at: Duration,
        guest: Option<u16>,
        l: &MeterLine,
    ) -> Vec<sb_pfcp::Transmit> {
        let Some(o) = guest else {
            return if l.downlink_data {
                self.upf.downlink_data(at, l.ul_teid)
            } else {
                self.upf.usage(at, l.ul_teid, line_usage(l))
            };
        };
        if let Some(g) = self.guests.get_mut(&o) {
            let out = if l.downlink_data {
                g.upf.downlink_data(at, l.ul_teid)
            } else {
                g.upf.usage(at, l.ul_teid, line_usage(l))
            };
            self.guest_send(o, out);
        }
        Vec::new()
    }

    /// Routes lines of this node's data plane ([`Endpoint::counts_to`]): to this endpoint, a
    /// guest, or as usage relays; those of a gone node this one stands in for whose guest is
    /// not open yet are held for [`HELD_KEPT`] (a first buffered packet is told once).
    fn route_lines(&mut self, at: Duration, lines: Vec<MeterLine>) {
        let now = Instant::now();
        let mut remote: HashMap<u8, Vec<MeterLine>> = HashMap::default();
        for l in lines {
            match self.counts_to(l.ul_teid) {
                CountsTo::Own => {
                    let out = self.take_line(at, None, &l);
                    self.send(out);
                }
                CountsTo::Guest(o) => {
                    self.take_line(at, Some(o), &l);
                }
                CountsTo::Relay(to) => remote.entry(to).or_default().push(l),
                CountsTo::NotYet => {
                    if self.held_lines.len() < HELD_MAX {
                        self.held_lines.push_back((now, l));
                    }
                }
            }
        }
        for (to, lines) in remote {
            self.send_meter(RelayKind::Usage, to, Meter { token: 0, lines });
        }
    }

    /// Hands `got`, the counts a response of this endpoint (`None`) or of guest `o` waits
    /// for, to its `Upf`.
    fn complete_read(
        &mut self,
        whose: Option<u16>,
        at: Duration,
        token: Token,
        got: &[(u32, Usage)],
    ) {
        match whose {
            None => {
                let out = self.upf.complete_usage(at, token, got);
                self.send(out);
            }
            Some(o) => {
                if let Some(g) = self.guests.get_mut(&o) {
                    let out = g.upf.complete_usage(at, token, got);
                    self.guest_send(o, out);
                }
            }
        }
    }

    /// The usage work of one loop iteration: keeps the slots freed here, tells the sessions'
    /// endpoints of their first buffered packets (Downlink Data Reports), answers the counts
    /// the responses of the endpoint and its guests wait for (from this node, or asked of the
    /// others), and every [`METER_INTERVAL`] sends the changed counts of the sessions this
    /// node handles to their endpoints: a round of the data plane's slots that counted since
    /// the last ([`sb_engine::policy::Policies::begin_usage_round`]), at most [`METER_BATCH`]
    /// of them per call, so that its cost follows the sessions with traffic, not all, and no
    /// call holds the control thread for long. A gone node's sessions' counts go to the guest
    /// serving them (`counts_to`).
    pub fn meter(&mut self, dp: &mut crate::control::DataPlane) {
        let now = Instant::now();
        let at = self.start.elapsed();
        for (teid, u) in dp.take_final_usage() {
            self.finals.insert(teid, (pfcp_usage(u), now));
            self.finals_order.push_back((now, teid));
        }
        while let Some(&(when, teid)) = self.finals_order.front() {
            if now.duration_since(when) < FINAL_KEPT {
                break;
            }
            self.finals_order.pop_front();
            if self.finals.get(&teid).is_some_and(|f| f.1 == when) {
                self.finals.remove(&teid);
            }
        }
        self.queries
            .retain(|_, q| now.duration_since(q.asked) < FINAL_KEPT);
        // Lines held for a guest not open yet: routed again (in order), or given up.
        let held: Vec<MeterLine> = std::mem::take(&mut self.held_lines)
            .into_iter()
            .filter(|(when, _)| now.duration_since(*when) < HELD_KEPT)
            .map(|(_, l)| l)
            .collect();
        if !held.is_empty() {
            self.route_lines(at, held);
        }
        // First buffered packets: to the endpoint that allocated the TEID (its top byte), or
        // to every endpoint for a TEID the SMF chose.
        let notified: Vec<MeterLine> = (dp.take_notifications().into_iter())
            .map(|ul_teid| MeterLine {
                ul_teid,
                downlink_data: true,
                known: true,
                counts: [0; 4],
            })
            .collect();
        if !notified.is_empty() {
            self.route_lines(at, notified);
        }
        // Counts a response waits for: the endpoint's, then its guests'.
        let relaying = self.relay_sock.is_some();
        let mut reads: Vec<(Option<u16>, Token, Vec<u32>)> =
            (std::mem::take(&mut self.upf.sessions_impl_mut().usage_reads).into_iter())
                .map(|(t, teids)| (None, t, teids))
                .collect();
        for (&o, g) in self.guests.iter_mut() {
            let r = std::mem::take(&mut g.upf.sessions_impl_mut().usage_reads);
            reads.extend(r.into_iter().map(|(t, teids)| (Some(o), t, teids)));
        }
        for (whose, token, teids) in reads {
            let got: Vec<(u32, Usage)> = (teids.iter())
                .filter_map(|&t| Some((t, self.local_usage(dp, t)?)))
                .collect();
            if got.len() == teids.len() || !relaying {
                self.complete_read(whose, at, token, &got);
                continue;
            }
            let lines = (teids.iter())
                .filter(|t| !got.iter().any(|(g, _)| g == *t))
                .map(|&ul_teid| MeterLine {
                    ul_teid,
                    ..MeterLine::default()
                })
                .collect();
            // On the wire a query's token is never 0 (0: a relay nothing waits for).
            let wire = self.next_query;
            self.next_query = self.next_query.wrapping_add(1).max(1);
            let (per, receivers) =
                self.send_meter(RelayKind::UsageQuery, 0, Meter { token: wire, lines });
            if receivers == 0 {
                self.complete_read(whose, at, token, &got);
                continue;
            }
            self.queries.insert(
                wire,
                UsageQuery {
                    whose,
                    token,
                    teids,
                    got,
                    answers_left: per * receivers,
                    asked: now,
                },
            );
        }
        if now >= self.next_meter {
            self.next_meter = now + METER_INTERVAL;
            dp.policies.begin_usage_round();
            self.meter_left = 1;
        }
        if self.meter_left == 0 {
            return;
        }
        // The counts of the sessions this node handles that changed since the last round go to
        // their endpoints: this one's to its URRs, the others' as usage relays (to the
        // endpoint that allocated the TEID, its top byte; to every endpoint for a TEID the SMF
        // chose). A session without traffic costs nothing.
        let mut counted = std::mem::take(&mut self.counted);
        self.meter_left = dp.policies.changed_usages(&mut counted, METER_BATCH);
        let lines: Vec<MeterLine> = (counted.iter())
            .map(|&(teid, u)| usage_line(teid, pfcp_usage(u)))
            .collect();
        self.counted = counted;
        self.route_lines(at, lines);
    }

    /// A usage relay from endpoint `from`.
    fn usage_relay(
        &mut self,
        dp: &crate::control::DataPlane,
        from: u8,
        relay: Relay,
    ) -> Vec<sb_pfcp::Transmit> {
        let at = self.start.elapsed();
        let Ok(m) = Meter::parse(&relay.bytes) else {
            self.relays_refused += 1;
            return Vec::new();
        };
        let mut out = Vec::new();
        match relay.kind {
            RelayKind::Usage => {
                for l in m.lines.iter().filter(|l| l.downlink_data || l.known) {
                    match self.counts_to(l.ul_teid) {
                        CountsTo::Guest(o) => {
                            self.take_line(at, Some(o), l);
                        }
                        CountsTo::NotYet => {
                            if self.held_lines.len() < HELD_MAX {
                                self.held_lines.push_back((Instant::now(), *l));
                            }
                        }
                        // Ours, or sent here by a node that sees the stand-ins otherwise.
                        CountsTo::Own | CountsTo::Relay(_) => {
                            out.extend(self.take_line(at, None, l));
                        }
                    }
                }
            }
            RelayKind::UsageQuery => {
                // Only what this node holds: the asker merges every node's answer.
                let lines: Vec<MeterLine> = (m.lines.iter())
                    .filter_map(|l| Some(usage_line(l.ul_teid, self.local_usage(dp, l.ul_teid)?)))
                    .collect();
                self.send_meter(
                    RelayKind::UsageAnswer,
                    from,
                    Meter {
                        token: m.token,
                        lines,
                    },
                );
            }
            RelayKind::UsageAnswer => {
                let known = (m.lines.iter())
                    .filter(|l| l.known)
                    .map(|l| (l.ul_teid, line_usage(l)));
                if let Some(q) = self.queries.get_mut(&m.token) {
                    q.got.extend(known);
                    q.answers_left = q.answers_left.saturating_sub(1);
                    let all = q.teids.iter().all(|t| q.got.iter().any(|(g, _)| g == t));
                    if all || q.answers_left == 0 {
                        let q = self.queries.remove(&m.token).expect("present");
                        self.complete_read(q.whose, at, q.token, &q.got);
                    }
                }
            }
            _ => {}
        }
        out
    }

    /// The packets between UEs and the CP function (see [`sb_pfcp::upf`]'s CP-function
    /// paths): the Router Solicitations this node's workers handed over go to the SMF through
    /// the endpoint holding their session (this one: [`Upf::uplink_to_cp`] and the GTP-U
    /// socket; another: [`RelayKind::ToCp`]), and the SMF's G-PDUs on the GTP-U socket go down
    /// their session's tunnel from its handling node's `ran` port (this node: the workers'
    /// queue; another: [`RelayKind::FromCp`]). At most 64 of each per call.
    fn cp_packets(&mut self, dp: &crate::control::DataPlane) {
        let relaying = self.relay_sock.is_some();
        for _ in 0..64 {
            let Some((teid, packet)) = dp.policies.take_to_cp() else {
                break;
            };
            let owner = (teid >> 24) as u8;
            if owner == self.me || !relaying || usize::from(owner) > self.peers.len() {
                self.cp_uplink(teid, &packet);
            } else {
                let mut bytes = teid.to_be_bytes().to_vec();
                bytes.extend_from_slice(&packet);
                self.cp_relay_to(owner, RelayKind::ToCp, bytes);
            }
        }
        for _ in 0..64 {
            let Some(s) = &self.gtpu_sock else { break };
            let n = match s.recv_from(&mut self.buf) {
                Ok((n, _)) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    eprintln!("pfcp: recv gtp-u: {e}");
                    break;
                }
            };
            let Ok(g) = sb_wire::GtpuPacket::new_checked(&self.buf[..n]) else {
                continue;
            };
            if g.msg_type() != sb_wire::gtpu::msg_type::G_PDU {
                continue;
            }
            let (teid, inner) = (g.teid(), g.payload().to_vec());
            let Some(d) = self.upf.downlink_from_cp(teid) else {
                continue;
            };
            let t = sb_wire::GtpuTunnel {
                pdu_session: (d.qfi != 0).then(|| sb_wire::PduSession::downlink(d.qfi, false)),
                ..sb_wire::GtpuTunnel::new(
                    sb_wire::EthernetAddress([0; 6]),
                    sb_wire::EthernetAddress([0; 6]),
                    sb_wire::OuterIp::V4 {
                        src: d.ran,
                        dst: d.gnb,
                    },
                    d.teid,
                )
            };
            let mut frame = vec![0u8; t.header_len() + inner.len()];
            let Ok(len) = t.encap_into(&inner, &mut frame) else {
                continue;
            };
            frame.truncate(len);
            let handler = (d.node as u8).wrapping_add(1);
            if handler == self.me || !relaying {
                dp.policies.queue_access_frame(frame);
            } else {
                self.cp_relay_to(handler, RelayKind::FromCp, frame);
            }
        }
    }

    /// Tunnels the uplink packet `packet` of `ul_teid` to the SMF when a CP-function path of
    /// its session takes it.
    fn cp_uplink(&mut self, ul_teid: u32, packet: &[u8]) {
        // (Without the socket nothing is counted as sent.)
        let Some(s) = &self.gtpu_sock else { return };
        let Some(t) = self.upf.uplink_to_cp(ul_teid, packet) else {
            return;
        };
        if let Err(e) = s.send_to(&t.bytes, t.to) {
            eprintln!("pfcp: gtp-u to {}: {e}", t.to);
        }
    }

    /// A relay of the CP function's packets from another endpoint.
    fn cp_relay(&mut self, dp: &crate::control::DataPlane, relay: Relay) {
        match relay.kind {
            RelayKind::ToCp if relay.bytes.len() > 4 => {
                let b = &relay.bytes;
                let teid = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                self.cp_uplink(teid, &relay.bytes[4..]);
            }
            RelayKind::FromCp => {
                dp.policies.queue_access_frame(relay.bytes);
            }
            _ => self.relays_refused += 1,
        }
    }

    /// Sends `bytes` as a relay of `kind` to endpoint `to` (an allocator id).
    fn cp_relay_to(&mut self, to: u8, kind: RelayKind, bytes: Vec<u8>) {
        let (Some(rs), Some(at)) = (&self.relay_sock, self.peers.get(usize::from(to) - 1)) else {
            return;
        };
        let r = Relay {
            to,
            kind,
            peer: *at,
            bytes,
        };
        if let Err(e) = rs.send_to(&r.to_bytes(self.me, self.relay_key()), at) {
            eprintln!("pfcp: relay to {at}: {e}");
        }
    }

    /// Sends `out` to the peers, then the relays the endpoint has for the others.
    /// Sends what the endpoint gave, or holds it until the state changes it made with it are
    /// durable ([`Endpoint::save`], [`Endpoint::durable`]).
    fn send(&mut self, out: Vec<sb_pfcp::Transmit>) {
        let changes = self.upf.take_state_changes();
        let mut outs: Vec<Out> = out.into_iter().map(Out::Pfcp).collect();
        outs.extend(self.relays());
        let now = self.keep.hold(changes, outs);
        self.send_outs(now);
    }

    fn send_outs(&mut self, outs: Vec<Out>) {
        for o in outs {
            match o {
                Out::Pfcp(t) => {
                    if let Err(e) = self.sock.send_to(&t.bytes, t.to) {
                        eprintln!("pfcp: send to {}: {e}", t.to);
                    }
                }
                Out::Relay(bytes, to) => {
                    let Some(rs) = &self.relay_sock else { continue };
                    if let Err(e) = rs.send_to(&bytes, to) {
                        eprintln!("pfcp: relay to {to}: {e}");
                    }
                }
            }
        }
    }

    /// The relays the endpoint queued, sealed, per destination.
    fn relays(&mut self) -> Vec<Out> {
        let mut outs = Vec::new();
        while let Some(r) = self.upf.poll_relay() {
            outs.extend(self.route(self.me, r));
        }
        outs
    }

    /// Where relay `r` from endpoint `from` (this one, or a guest) goes: sealed to the
    /// endpoints it names (every other one for 0), a gone node's to its stand-in, and to this
    /// endpoint or its guests through the local queue.
    fn route(&mut self, from: u8, r: Relay) -> Vec<Out> {
        let me = self.me as usize - 1;
        let targets: Vec<usize> = match r.to {
            0 => (0..self.peers.len()).filter(|&i| i != me).collect(),
            t => {
                let t = t as usize - 1;
                // A gone node's: its stand-in serves its sessions.
                let t = match self.stand_ins.get(t).copied().flatten() {
                    Some(s) if r.kind == RelayKind::Session => s as usize,
                    _ => t,
                };
                vec![t]
            }
        };
        let mut outs = Vec::new();
        for t in targets {
            if t == me {
                self.local.push_back((from, r.clone()));
                continue;
            }
            if let Some(at) = self.peers.get(t) {
                outs.push(Out::Relay(r.to_bytes(self.me, self.relay_key()), *at));
            }
        }
        outs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control file of before the PFCP peer and pool fields still loads (nothing
    /// restricted, no pool); the fields reach the endpoint's configuration, checked.
    #[test]
    fn allowed_peers_and_pools_from_the_control_file() {
        let old = r#"{"spec":"c.json","flows":"f.csv","wal":"w","peers":[],"fib_room":10}"#;
        let ctl: ControlFile = serde_json::from_str(old).unwrap();
        let ip = Ipv4Addr::new(10, 3, 0, 1);
        let mut config = sb_pfcp::Config::new(node_id("upf"), RecoveryTimeStamp(1), ip);
        peers_and_pools(&ctl, &mut config).unwrap();
        assert!(config.allowed_peers.is_empty() && config.ue_pool_v4.is_empty());
        let mut ctl = ctl;
        ctl.pfcp_allowed_peers = vec!["10.3.0.0/24".into(), "10.9.9.9".into()];
        ctl.pfcp_ue_pool_v4 = vec!["10.45.0.0/18".into(), "10.45.192.0/18".into()];
        ctl.pfcp_ue_pool_v6 = vec!["2001:db8:cafe::/50".into()];
        peers_and_pools(&ctl, &mut config).unwrap();
        assert_eq!(
            config.allowed_peers,
            [
                ("10.3.0.0".parse().unwrap(), 24),
                ("10.9.9.9".parse().unwrap(), 32)
            ]
        );
        assert_eq!(config.ue_pool_v4[1], (Ipv4Addr::new(10, 45, 192, 0), 18));
        assert_eq!(
            config.ue_pool_v6,
            [("2001:db8:cafe::".parse().unwrap(), 50)]
        );
        for (field, bad) in [(0, "10.3.0/24"), (1, "2001:db8::/48"), (2, "2001:db8::/96")] {
            let mut c = ctl.clone();
            [
                &mut c.pfcp_allowed_peers,
                &mut c.pfcp_ue_pool_v4,
                &mut c.pfcp_ue_pool_v6,
            ][field]
                .push(bad.into());
            let e = peers_and_pools(&c, &mut config).unwrap_err();
            assert!(matches!(e, ControlError::Invalid(_)), "{e}");
        }
    }

    fn spec() -> ClusterSpec {
        crate::control::new_spec(7, 4, 1, 1000)
    }

    fn ran() -> Vec<Ipv4Addr> {
        (0..4).map(|i| Ipv4Addr::new(10, 2, i, 1)).collect()
    }

    fn decode(c: &Cluster, b: &[u8]) -> Vec<Update> {
        match sb_control::wire::decode(&c.key, c.cluster_id, b).unwrap().1 {
            sb_control::wire::Body::ClientRequest { updates, .. } => updates,
            _ => panic!("not a request"),
        }
    }

    /// A UE address's change at node 1.
    fn change(ue: IpAddr, before: UeFib, after: UeFib) -> [UeChange; 1] {
        [UeChange {
            ue,
            node: 1,
            before,
            after,
        }]
    }

    /// Forwarding with downlink TEID `teid` to `enb` and uplink TEID `ul` (0: none).
    fn fwd(teid: u32, enb: Ipv4Addr, ul: u32) -> UeFib {
        UeFib {
            down: Some((teid, enb)),
            up: (ul != 0).then_some(ul),
            qfi: 0,
            policy: Default::default(),
        }
    }

    /// The one update of the request `c` has ready, and its tunnel.
    fn sent(c: &mut Cluster) -> (Op, Tunnel) {
        c.flush();
        let req = c.outbox.pop().expect("a request");
        assert!(c.outbox.is_empty());
        let us = decode(c, &req);
        assert_eq!(us.len(), 1);
        let key = <[u8; 16]>::try_from(&us[0].key[..]).unwrap();
        let t = if us[0].op == Op::Delete {
            Tunnel::from_entry(&key, &[0; 16])
        } else {
            Tunnel::from_entry(&key, &us[0].value)
        };
        assert_eq!(us[0].node, 1);
        (us[0].op, t)
    }

    #[test]
    fn placement_is_round_robin_with_the_nodes_ran_address() {
        let mut c = Cluster::new(&spec(), ran(), 2);
        let ue = [IpAddr::V4(Ipv4Addr::new(100, 64, 0, 1))];
        let nodes: Vec<u16> = (0..8).map(|_| c.place(&ue).unwrap().node).collect();
        assert_eq!(nodes, [2, 3, 0, 1, 2, 3, 0, 1]);
        assert_eq!(c.place(&ue).unwrap().ran, Ipv4Addr::new(10, 2, 2, 1));
    }

    #[test]
    fn an_smf_allocated_f_teid_places_the_session_on_its_node() {
        let c = Cluster::new(&spec(), ran(), 2);
        let at = c.placement_at(Ipv4Addr::new(10, 2, 2, 1)).unwrap();
        assert_eq!(at.ran, Ipv4Addr::new(10, 2, 2, 1));
        assert_eq!(c.ran_addrs[usize::from(at.node)], at.ran);
        assert_eq!(c.placement_at(Ipv4Addr::new(192, 0, 2, 1)), None);
    }

    #[test]
    fn a_sessions_policy_and_endpoint_reach_its_fib_value() {
        let mut c = Cluster::new(&spec(), ran(), 2);
        let ue = IpAddr::V4(Ipv4Addr::new(100, 64, 9, 10));
        let enb = Ipv4Addr::new(10, 2, 1, 2);
        let p = sb_pfcp::UePolicy {
            dl_mbr_kbps: 10_000,
            ul_mbr_kbps: 2_000,
            dl_gate_closed: false,
            ul_gate_closed: true,
            count: true,
            buffer: true,
            notify: true,
            end_marker: false,
            dl_drop: true,
            ..Default::default()
        };
        let f = UeFib {
            policy: p,
            ..fwd(0x100, enb, 0x0300_0001)
        };
        let est = change(ue, UeFib::default(), f);
        assert_eq!(c.apply(Token(1), &[], &est), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(op, Op::Insert);
        assert_eq!(t.owner, 3, "node 2's endpoint: allocator id 3");
        assert_eq!(
            t.policy,
            Policy {
                dl_mbr_kbps: 10_000,
                ul_mbr_kbps: 2_000,
                dl_gate_closed: false,
                ul_gate_closed: true,
                count: true,
                buffer: true,
                notify: true,
                end_marker: false,
                drop_dl: true,
                ..Default::default()
            }
        );
        // A change of the policy alone is a change of the entry.
        let m = change(
            ue,
            f,
            UeFib {
                policy: sb_pfcp::UePolicy { buffer: false, ..p },
                ..f
            },
        );
        assert_eq!(c.apply(Token(2), &[], &m), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(
            (op, t.policy.buffer, t.policy.count),
            (Op::Change, false, true)
        );
        // Counts are the handling nodes': a read waits for the endpoint's meter.
        assert!(matches!(
            c.read_usage(Token(3), &[0x0300_0001]),
            UsageRead::Pending
        ));
        assert_eq!(c.usage_reads, vec![(Token(3), vec![0x0300_0001])]);
    }

    #[test]
    fn a_session_becomes_insert_change_delete_of_one_tunnel() {
        let mut c = Cluster::new(&spec(), ran(), 0);
        let ue = IpAddr::V4(Ipv4Addr::new(100, 64, 9, 9));
        let enb = Ipv4Addr::new(10, 2, 1, 2);
        let none = UeFib::default();
        let est = change(ue, none, fwd(0x100, enb, 0x0200_0001));
        assert_eq!(c.apply(Token(1), &[], &est), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(op, Op::Insert);
        assert_eq!(
            (t.ue, t.teid, t.enb, t.ul_teid),
            (ue, 0x100, enb, 0x0200_0001)
        );
        let id = c.id_base.wrapping_add(1);
        assert_eq!(c.finish(id, &[Outcome::Applied]), Some((Token(1), Ok(()))));
        assert_eq!(c.finish(id, &[Outcome::Applied]), None);

        // A new downlink TEID: a change, the uplink TEID kept.
        let m = change(
            ue,
            fwd(0x100, enb, 0x0200_0001),
            fwd(0x101, enb, 0x0200_0001),
        );
        assert_eq!(c.apply(Token(2), &[], &m), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(op, Op::Change);
        assert_eq!((t.teid, t.ul_teid), (0x101, 0x0200_0001));
        assert_eq!(
            c.finish(c.id_base.wrapping_add(2), &[Outcome::Missing]),
            Some((Token(2), Err(Failure::System)))
        );

        // Deletion: one delete.
        let d = change(ue, fwd(0x100, enb, 0x0200_0001), none);
        assert_eq!(c.apply(Token(3), &[], &d), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!((op, t.ue), (Op::Delete, ue));
        assert_eq!(
            c.finish(c.id_base.wrapping_add(3), &[Outcome::Busy]),
            Some((Token(3), Err(Failure::NoResources)))
        );
        assert!(c.pending.is_empty());
    }

    #[test]
    fn removing_the_uplink_alone_keeps_the_downlink() {
        let mut c = Cluster::new(&spec(), ran(), 0);
        let ue = IpAddr::V4(Ipv4Addr::new(100, 64, 9, 10));
        let enb = Ipv4Addr::new(10, 2, 1, 2);
        let up = change(ue, fwd(0x100, enb, 0x0200_0002), fwd(0x100, enb, 0));
        assert_eq!(c.apply(Token(3), &[], &up), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(op, Op::Change);
        assert_eq!((t.teid, t.ul_teid), (0x100, 0));
        // The downlink alone goes (idle): the entry stays for the uplink, without a tunnel.
        let idle = UeFib {
            down: None,
            up: Some(0x0200_0002),
            qfi: 0,
            policy: Default::default(),
        };
        let down = change(ue, fwd(0x100, enb, 0x0200_0002), idle);
        assert_eq!(c.apply(Token(4), &[], &down), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(op, Op::Change);
        assert_eq!((t.teid, t.enb), (0, Ipv4Addr::UNSPECIFIED));
        assert_eq!(t.uplink_teid(), 0x0200_0002);
        // Both go: the entry goes.
        let gone = change(ue, idle, UeFib::default());
        assert_eq!(c.apply(Token(5), &[], &gone), Ok(Applied::Pending));
        assert_eq!(sent(&mut c).0, Op::Delete);
        // A QoS flow is the entry's too.
        let flow = UeFib {
            qfi: 9,
            ..fwd(0x100, enb, 0x0200_0002)
        };
        let marked = change(ue, UeFib::default(), flow);
        assert_eq!(c.apply(Token(6), &[], &marked), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!((op, t.qfi), (Op::Insert, 9));
    }

    #[test]
    fn changes_that_arrive_together_share_one_request() {
        let mut c = Cluster::new(&spec(), ran(), 0);
        let ue = |i: u8| IpAddr::V4(Ipv4Addr::new(100, 64, 8, i));
        let est = |i: u8| {
            change(
                ue(i),
                UeFib::default(),
                fwd(0x100 + u32::from(i), Ipv4Addr::new(10, 2, 1, 2), 0),
            )
        };
        for i in 1..=3u8 {
            assert_eq!(
                c.apply(Token(u64::from(i)), &[], &est(i)),
                Ok(Applied::Pending)
            );
        }
        c.flush();
        assert_eq!(c.outbox.len(), 1);
        let r = c.outbox.pop().unwrap();
        let us = decode(&c, &r);
        assert_eq!(us.len(), 3);
        let id = sb_control::wire::decode(&c.key, c.cluster_id, &r)
            .unwrap()
            .0
            .msg_id;
        // Each change gets its own outcome; a reply that does not fit fails them all.
        let got = c.finish_batch(id, &[Outcome::Applied, Outcome::Missing, Outcome::Applied]);
        assert_eq!(
            got,
            vec![
                (Token(1), Ok(())),
                (Token(2), Err(Failure::System)),
                (Token(3), Ok(()))
            ]
        );
        assert!(
            c.finish_batch(id, &[Outcome::Applied; 3]).is_empty(),
            "a duplicate reply"
        );
        assert_eq!(c.apply(Token(4), &[], &est(4)), Ok(Applied::Pending));
        c.flush();
        let r = c.outbox.pop().unwrap();
        let id = sb_control::wire::decode(&c.key, c.cluster_id, &r)
            .unwrap()
            .0
            .msg_id;
        assert_eq!(
            c.finish_batch(id, &[]),
            vec![(Token(4), Err(Failure::System))]
        );
        // More updates than one request holds: several requests.
        c.max_batch = 2;
        for i in 10..15u8 {
            c.apply(Token(u64::from(i)), &[], &est(i)).unwrap();
        }
        c.flush();
        assert_eq!(c.outbox.len(), 3);
    }

    #[test]
    fn a_change_larger_than_a_request_spans_several() {
        // The release of an association with more sessions than one request holds was refused
        // (System failure) before; now its updates go in several requests, answered when all are.
        let mut c = Cluster::new(&spec(), ran(), 0);
        c.max_batch = 2;
        let ue = |i: u8| IpAddr::V4(Ipv4Addr::new(100, 64, 7, i));
        let enb = Ipv4Addr::new(10, 2, 1, 2);
        let est: Vec<UeChange> = (1..=5u8)
            .flat_map(|i| change(ue(i), UeFib::default(), fwd(0x200 + u32::from(i), enb, 0)))
            .collect();
        let one = change(ue(9), UeFib::default(), fwd(0x209, enb, 0));
        assert_eq!(c.apply(Token(1), &[], &est), Ok(Applied::Pending));
        assert_eq!(c.apply(Token(2), &[], &one), Ok(Applied::Pending));
        c.flush();
        // 5 updates in parts of 2, 2, 1; the next change's one update shares the last request.
        let reqs = std::mem::take(&mut c.outbox);
        let sizes: Vec<usize> = reqs.iter().map(|r| decode(&c, r).len()).collect();
        assert_eq!(sizes, [2, 2, 2]);
        let ids: Vec<u64> = reqs
            .iter()
            .map(|r| {
                sb_control::wire::decode(&c.key, c.cluster_id, r)
                    .unwrap()
                    .0
                    .msg_id
            })
            .collect();
        let mut ues: Vec<IpAddr> = Vec::new();
        for r in &reqs {
            for u in decode(&c, r) {
                let t = Tunnel::from_entry(&<[u8; 16]>::try_from(&u.key[..]).unwrap(), &u.value);
                ues.push(t.ue);
            }
        }
        let want: Vec<IpAddr> = [1, 2, 3, 4, 5, 9].into_iter().map(ue).collect();
        assert_eq!(ues, want, "every update once, in order");
        // Parts answered out of order: the change completes with its last part.
        assert!(c.finish_batch(ids[1], &[Outcome::Applied; 2]).is_empty());
        assert!(c.finish_batch(ids[0], &[Outcome::Applied; 2]).is_empty());
        assert_eq!(
            c.finish_batch(ids[2], &[Outcome::Applied; 2]),
            vec![(Token(1), Ok(())), (Token(2), Ok(()))]
        );

        // One part refused: the change fails, whatever the others say.
        let del: Vec<UeChange> = (1..=5u8)
            .flat_map(|i| change(ue(i), fwd(0x200 + u32::from(i), enb, 0), UeFib::default()))
            .collect();
        assert_eq!(c.apply(Token(3), &[], &del), Ok(Applied::Pending));
        c.flush();
        let reqs = std::mem::take(&mut c.outbox);
        assert_eq!(reqs.len(), 3);
        let ids: Vec<u64> = reqs
            .iter()
            .map(|r| {
                sb_control::wire::decode(&c.key, c.cluster_id, r)
                    .unwrap()
                    .0
                    .msg_id
            })
            .collect();
        assert!(c.finish_batch(ids[0], &[Outcome::Applied; 2]).is_empty());
        assert!(c
            .finish_batch(ids[1], &[Outcome::Applied, Outcome::Busy])
            .is_empty());
        assert_eq!(
            c.finish_batch(ids[2], &[Outcome::Applied]),
            vec![(Token(3), Err(Failure::NoResources))]
        );
        assert!(c.pending.is_empty());
    }

    /// Uplink forwards from the establishment on: the SMF sends the gNB's tunnel later.
    #[test]
    fn an_uplink_alone_is_installed_before_its_downlink() {
        let mut c = Cluster::new(&spec(), ran(), 0);
        let ue = IpAddr::V4(Ipv4Addr::new(100, 64, 9, 10));
        let up = UeFib {
            down: None,
            up: Some(0x0100_0005),
            qfi: 0,
            policy: Default::default(),
        };
        let alone = change(ue, UeFib::default(), up);
        assert_eq!(c.apply(Token(1), &[], &alone), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(op, Op::Insert);
        assert_eq!((t.teid, t.enb), (0, Ipv4Addr::UNSPECIFIED));
        assert_eq!(t.uplink_teid(), 0x0100_0005);
        let both = change(ue, up, fwd(9, Ipv4Addr::new(10, 2, 0, 2), 0x0100_0005));
        assert_eq!(c.apply(Token(2), &[], &both), Ok(Applied::Pending));
        let (op, t) = sent(&mut c);
        assert_eq!(op, Op::Change);
        assert_eq!((t.teid, t.uplink_teid()), (9, 0x0100_0005));
    }

    /// The counts of a session go to its endpoint: the one that allocated its TEID, or the
    /// guest serving a gone node's sessions at its stand-in (here, or through a relay to the
    /// stand-in; held while the guest is not open yet); a TEID the SMF chose, to whoever here
    /// holds it, or else to every endpoint.
    #[test]
    fn counts_go_to_the_endpoint_serving_the_session() {
        let teid = |node: u8| (u32::from(node) << 24) | 0x42;
        let none = |_: u32| None;
        let no_guest = |_: u16| false;
        // Endpoint 2 (node 1) of 4, nobody gone.
        let all = vec![None; 4];
        let to = |t, stand_ins: &[Option<u16>], guest: &dyn Fn(u16) -> bool| {
            counts_to(t, 2, Some(4), stand_ins, none, guest)
        };
        assert_eq!(to(teid(2), &all, &no_guest), CountsTo::Own);
        assert_eq!(to(teid(1), &all, &no_guest), CountsTo::Relay(1));
        assert_eq!(to(teid(4), &all, &no_guest), CountsTo::Relay(4));
        // Without relaying everything is this endpoint's.
        assert_eq!(
            counts_to(teid(3), 2, None, &all, none, no_guest),
            CountsTo::Own
        );
        // Node 2 (endpoint 3) gone, node 3 stands in: its sessions' counts go to node 3.
        let gone = vec![None, None, Some(3), None];
        assert_eq!(to(teid(3), &gone, &no_guest), CountsTo::Relay(4));
        assert_eq!(to(teid(4), &gone, &no_guest), CountsTo::Relay(4));
        // Node 0 gone, this node (1) stands in: held until its guest opens, then the guest's.
        let mine = vec![Some(1), None, None, None];
        assert_eq!(to(teid(1), &mine, &no_guest), CountsTo::NotYet);
        assert_eq!(to(teid(1), &mine, &|o| o == 0), CountsTo::Guest(0));
        assert_eq!(to(teid(2), &mine, &|o| o == 0), CountsTo::Own);
        // A TEID the SMF chose (top byte 0, or beyond the nodes).
        for t in [0x0000_0042, teid(9)] {
            assert_eq!(to(t, &all, &no_guest), CountsTo::Relay(0));
            let here = |_: u32| Some(None);
            assert_eq!(
                counts_to(t, 2, Some(4), &all, here, no_guest),
                CountsTo::Own
            );
            let guests = |_: u32| Some(Some(0));
            assert_eq!(
                counts_to(t, 2, Some(4), &mine, guests, no_guest),
                CountsTo::Guest(0)
            );
        }
    }

    #[test]
    fn names_of_messages_and_causes() {
        assert_eq!(message_name(50), "session_establishment_request");
        assert_eq!(message_name(200), "type_200");
        assert_eq!(
            cause_name(sb_pfcp::Cause::MANDATORY_IE_MISSING.0),
            "mandatory_ie_missing"
        );
        assert_eq!(
            cause_name(sb_pfcp::Cause::SYSTEM_FAILURE.0),
            "system_failure"
        );
        assert_eq!(cause_name(2), "cause_2");
    }

    #[test]
    fn node_ids_of_names() {
        assert_eq!(
            node_id("10.3.0.254"),
            NodeId::Ipv4(Ipv4Addr::new(10, 3, 0, 254))
        );
        assert_eq!(node_id("upf.sb"), NodeId::Fqdn("upf.sb".into()));
    }
}
