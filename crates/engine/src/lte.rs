//! The LTE packet forwarding engine (the S/PGW user plane, or a 5G UPF's N3/N6 path) as an
//! [`App`].
//!
//! - **Key**: the UE's IP address as 16 bytes ([`ue_key`]): an IPv6 UE by its /64 prefix
//!   (the interface identifier zeroed: a 5G or LTE PDU session is given a /64 and the UE picks
//!   its addresses in it, TS 23.501 5.8.2.2.3), an IPv4 address IPv4-mapped
//!   (`::ffff:a.b.c.d`), so both families share one FIB. (An IPv6 prefix inside
//!   `::ffff:0:0/96` would alias IPv4 ones; such prefixes are not UE prefixes.)
//! - **FIB value** ([`Tunnel::value`], 32 bytes): TEID (4, big endian), eNodeB IPv4 address
//!   (4), egress node (2, big endian: the node whose `ran` port serves the eNodeB), QoS class
//!   identifier (1), the uplink TEID (4, big endian; 0: the same as the downlink TEID, as in
//!   `flows.csv`), the QoS flow byte (1): 0 for an LTE bearer (no PDU Session Container),
//!   else `0x80 | RQI << 6 | QFI` for a 5G QoS flow (QFI 1..=63, [`Tunnel::qfi`],
//!   [`Tunnel::rqi`]). The QCI is carried and reported, not yet applied (no scheduler here).
//!   Bytes 16..25: the session's [`Policy`] (downlink MBR kbit/s, uplink MBR kbit/s, both u32
//!   big endian, 0 unlimited; a flags byte: [`Policy::flags`]); bytes 25..28
//!   ([`LOCAL_SLOT`]): 0 on the wire and in every owner's RIB, the 24-bit policy slot id
//!   (index + 1) the handling node writes into its own FIB only ([`crate::policy`]); byte 28
//!   ([`OWNER_BYTE`]): the session's owning PFCP endpoint (opaque here); 29..32
//!   ([`AMBR_BYTES`]): 0, but in a policy's shared form ([`Policy::SHARED`], a flow of a
//!   session whose AMBR its flows share), the AMBRs ([`Policy::write_ambr`]).
//!   A value without a policy has an all-zero tail and forwards exactly as before.
//! - **Policies** (at the handling node, [`Lte::with_policies`]): downstream, a closed gate
//!   ([`Drop::Gate`]), a FAR that drops ([`Drop::FarDrop`]) or buffers (the packet goes into
//!   the session's buffer, [`Drop::Buffered`], or [`Drop::BufferFull`]), then, after the
//!   checks below, the MBR ([`Drop::Mbr`]) and the usage count; upstream, after the checks,
//!   the gate, the MBR and the count. Bytes counted: the inner IP packet.
//!   An entry whose eNodeB address is 0.0.0.0 has no downlink tunnel (a PFCP session before
//!   the gNB's tunnel is known, or idle): its uplink forwards, its downlink is dropped
//!   ([`Drop::NoTunnel`]; buffering for paging is not done).
//! - **Downstream** (`inet` -> `ran`): the IP packet is encapsulated in IPv4/UDP/GTP-U (TS
//!   29.281, UDP port 2152, a G-PDU with the tunnel's TEID) from the egress node's `ran`
//!   address to the eNodeB; outer TTL 64, DF set (but see the MTU below), UDP checksum 0
//!   (allowed over IPv4). A 5G
//!   flow's G-PDUs carry a PDU Session Container (TS 29.281 sec. 5.2.2.7, TS 38.415 sec.
//!   5.5.2.1: E flag, the optional word with next type 0x85, one 4-byte DL PDU SESSION
//!   INFORMATION header with the flow's RQI and QFI): 44 bytes of outer headers instead of 36.
//!   The inner TTL (hop limit) is decremented; a packet that arrives with TTL 1 or 0 is dropped
//!   ([`Drop::Ttl`]) and answered with ICMP Time Exceeded (ICMPv6 Time Exceeded) out of
//!   `inet`. A packet that would exceed the `ran` MTU after the outer headers: an IPv4 packet
//!   without DF is encapsulated with the outer DF clear and an outer identification (a counter
//!   per worker) and leaves as outer IPv4 fragments that each fit `ran_mtu` ([`Lte::split`],
//!   [`sb_wire::Fragmenter`]: 8-byte offsets, MF on all but the last, each header checksum
//!   its own; TS 29.281 sec. 4.2.1 leaves fragmenting the outer packet to IP; counted in
//!   [`crate::Counters::fragmented`] / `fragments`). The node that applies the tunnel cuts
//!   it: fragments cross the fabric as frames of their own (full duplication, hash
//!   partitioning) and policies (MBR, usage, buffering) see the whole packet. An IPv4 packet
//!   with DF, or an IPv6 packet, is dropped ([`Drop::Mtu`]) and answered with ICMP Destination
//!   Unreachable / Fragmentation Needed (ICMPv6 Packet Too Big) carrying `ran_mtu` minus the
//!   outer headers (rate-limited). Broadcast and multicast
//!   destinations are dropped at ingress ([`Drop::Multicast`]): never looked up, never sent
//!   over the fabric.
//! - **Upstream** (`ran` -> `inet`): the engine hands the application a batch at a time
//!   ([`App::access_batch`]): every frame parsed, the G-PDUs' TEIDs looked up in one batched
//!   lookup of the uplink table (its buckets prefetched) and the hits' policy slots prefetched,
//!   as downstream, then each G-PDU checked in order, with the result one by one would give.
//!   A G-PDU's TEID must be one of the tunnels this node's
//!   `ran` port serves ([`Drop::UnknownTeid`], answered with a GTP-U Error Indication, TS
//!   29.281 sec. 7.3.1) and its inner source must be that tunnel's UE (IPv4: the address;
//!   IPv6: its /64 prefix; [`Drop::UplinkMismatch`]). The outer source is not checked (a
//!   gNB's N3 address need not be the one the control plane knows). A PDU Session Container,
//!   when present, must name the tunnel's QFI if the tunnel has one ([`Drop::QfiMismatch`]).
//!   An ICMPv6 Router Solicitation on a known TEID goes to the node's control plane instead
//!   ([`Policies::queue_to_cp`], [`Drop::ToCp`]: the CP function's path, open5gs's SMF
//!   answers it), and the frames the control plane queues for UEs (the SMF's Router
//!   Advertisements in their tunnels, [`Policies::queue_access_frame`]) leave `ran` between
//!   batches. The inner TTL / hop limit is decremented (checksum patched); 1 or 0 is dropped
//!   ([`Drop::Ttl`]) and answered with ICMP Time Exceeded to the UE, sent down its own
//!   tunnel like any downstream packet. Otherwise the inner packet leaves `inet` as it was
//!   tunnelled but for the TTL. Outer fragments are dropped ([`Drop::OuterFragment`]), other
//!   GTP-U messages too ([`Drop::NotGpdu`]).
//! - **Error messages** (ICMP, ICMPv6, Error Indications) go through the engine's rate limit
//!   ([`crate::Engine::set_error_rate`]); ICMP errors quote the packet as RFC 792 / RFC 4443
//!   ask and come from [`LteConfig::icmp_src`] / [`LteConfig::icmp_src6`] (for an uplink
//!   packet: the G-PDU's destination, our `ran` address). None answers an ICMP error, a
//!   non-first fragment or a non-unicast address ([`sb_wire::icmp::error_in_place`]).
//! - **Path management**: a GTP-U Echo Request on `ran` gets an Echo Response (TS 29.281 sec.
//!   7.2.2, Recovery IE restart counter 0) back out of `ran`.

use crate::app::{Access, App, ErrorReply};
use crate::counters::{Drop, PortId};
pub use crate::policy::Policy;
use crate::policy::{downlink_flags, Policies, Usage, Verdict};
use crate::prefetch::AHEAD;
use sb_packet::{Meta, PacketBatch};
use sb_wire::{
    answer_echo_request, end_marker, error_in_place, error_indication, gtpu, parse_frame_with,
    ErrorMessage, Fragmenter, FrameKind, GtpuPacket, GtpuTunnel, Ipv4Packet, Ipv6Packet, OuterIp,
    ParseOptions, PduSession,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::sync::Arc;

/// Bytes of a flow key.
pub const KEY_BYTES: usize = 16;
/// Bytes of a FIB value.
pub const VALUE_BYTES: usize = 32;
/// The FIB value's bytes of the session's [`Policy`].
pub const POLICY_BYTES: Range<usize> = 16..25;
/// Where the FIB value keeps its egress node (a big-endian `u16` at bytes 8..10): the
/// handling node's copy that the control plane rewrites when it moves a flow between handlers
/// (`sb_control::Tuning::handler_field`).
pub const EGRESS_NODE_AT: usize = 8;
/// The FIB value's byte of the policy flags ([`Policy::flags`]).
pub const POLICY_FLAGS_BYTE: usize = 24;
/// The FIB value's bytes of the local policy slot id (24 bits, big endian; 0: none): written
/// by the handling node into its own FIB only, 0 everywhere else. Comparisons of values
/// between nodes leave them out ([`without_local_slot`]).
pub const LOCAL_SLOT: Range<usize> = 25..28;
/// The FIB value's byte of the session's owning PFCP endpoint.
pub const OWNER_BYTE: usize = 28;
/// The FIB value's bytes of the session's AMBRs in a policy's shared form
/// ([`Policy::write_ambr`]; 0 otherwise).
pub const AMBR_BYTES: Range<usize> = 29..32;
/// Bytes of an uplink table value: the UE key, the eNodeB address, the QoS flow byte (as in
/// the FIB value) and the local policy slot id ([`UPLINK_SLOT`]).
pub const UPLINK_VALUE_BYTES: usize = KEY_BYTES + 8;
/// The uplink value's bytes of the local policy slot id (as [`LOCAL_SLOT`]).
pub const UPLINK_SLOT: Range<usize> = KEY_BYTES + 5..KEY_BYTES + 8;

/// The 24-bit slot id at `r` of `v` (0 if `v` is shorter).
#[inline]
fn read_slot(v: &[u8], r: Range<usize>) -> u32 {
    match v.get(r) {
        Some(&[a, b, c]) => u32::from_be_bytes([0, a, b, c]),
        _ => 0,
    }
}

/// The local policy slot id of a FIB value ([`LOCAL_SLOT`]; 0: none).
#[inline]
pub fn local_slot(value: &[u8]) -> u32 {
    read_slot(value, LOCAL_SLOT)
}

/// Writes slot id `id` (below 2^24) into a FIB value's [`LOCAL_SLOT`].
pub fn set_local_slot(value: &mut [u8], id: u32) {
    value[LOCAL_SLOT].copy_from_slice(&id.to_be_bytes()[1..]);
}

/// The local policy slot id of an uplink value ([`UPLINK_SLOT`]; 0: none).
#[inline]
pub fn uplink_slot(value: &[u8]) -> u32 {
    read_slot(value, UPLINK_SLOT)
}

/// Writes slot id `id` into an uplink value's [`UPLINK_SLOT`].
pub fn set_uplink_slot(value: &mut [u8], id: u32) {
    value[UPLINK_SLOT].copy_from_slice(&id.to_be_bytes()[1..]);
}

/// A FIB value as every node has it: the local slot bytes zeroed (to compare one node's
/// values with another's, or with an owner's RIB).
pub fn without_local_slot(value: &[u8]) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    let n = value.len().min(VALUE_BYTES);
    v[..n].copy_from_slice(&value[..n]);
    v[LOCAL_SLOT].fill(0);
    v
}
/// Outer header bytes a tunnel adds to the IP packet (IPv4 20 + UDP 8 + GTP-U 8).
pub const TUNNEL_OVERHEAD: usize = 36;
/// Outer header bytes of a 5G flow's tunnel: [`TUNNEL_OVERHEAD`] + the optional word (4) + the
/// PDU Session Container (4).
pub const TUNNEL_OVERHEAD_QFI: usize = 44;
/// The FIB value's byte of the QoS flow (byte 15).
pub const QOS_FLOW_BYTE: usize = 15;

/// The QoS flow byte of a FIB value: 0 without a QFI, else `0x80 | RQI << 6 | QFI`.
pub fn qos_flow_byte(qfi: u8, rqi: bool) -> u8 {
    if qfi == 0 {
        0
    } else {
        0x80 | (u8::from(rqi) << 6) | (qfi & 0x3f)
    }
}

/// The QFI and RQI of a QoS flow byte (`(0, false)`: none).
pub fn decode_qos_flow(b: u8) -> (u8, bool) {
    if b & 0x80 == 0 {
        (0, false)
    } else {
        (b & 0x3f, b & 0x40 != 0)
    }
}

/// The first 12 bytes of every IPv4 UE address's key (IPv4-mapped IPv6, `::ffff:a.b.c.d`).
pub const IPV4_KEY_PREFIX: [u8; 12] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

/// The FIB key of a UE address: an IPv4 address IPv4-mapped, an IPv6 address's /64 prefix
/// ([`sb_common::ue_key`], which the PFCP endpoint's UE index keys by too).
pub use sb_common::ue_key;

/// The UE address of a FIB key (an IPv6 UE's: its /64 prefix, interface identifier 0).
pub fn key_addr(key: &[u8; KEY_BYTES]) -> IpAddr {
    let a = Ipv6Addr::from(*key);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// One UE's tunnel: a line of `flows.csv` (`ue,teid,enb,node`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunnel {
    /// The UE's address (the downstream key).
    pub ue: IpAddr,
    /// The tunnel endpoint id of downstream G-PDUs (the eNodeB's), and of upstream ones too
    /// when `ul_teid` is 0.
    pub teid: u32,
    /// The eNodeB's address.
    pub enb: Ipv4Addr,
    /// The node whose `ran` port serves the eNodeB (the handling node under ScaleBricks).
    pub node: u16,
    /// QoS class identifier.
    pub qci: u8,
    /// The TEID upstream G-PDUs carry (ours: PFCP allocates it apart from the eNodeB's), or 0
    /// for the same as `teid`.
    pub ul_teid: u32,
    /// The 5G QoS flow identifier (1..=63; PFCP's QER QFI), or 0 for an LTE bearer: downlink
    /// G-PDUs then carry no PDU Session Container and uplink ones are not checked for one.
    pub qfi: u8,
    /// Reflective QoS indication, sent in the downlink container (meaningful with a QFI).
    pub rqi: bool,
    /// The session's QoS, usage and buffering rules ([`Policy::default`]: none, the entry
    /// forwards as one from `flows.csv`).
    pub policy: Policy,
    /// The session's owning PFCP endpoint (an allocator id, opaque to the data plane; 0 when
    /// none).
    pub owner: u8,
}

impl Tunnel {
    /// The FIB key.
    pub fn key(&self) -> [u8; KEY_BYTES] {
        ue_key(self.ue)
    }

    /// The FIB value.
    pub fn value(&self) -> [u8; VALUE_BYTES] {
        let mut v = [0u8; VALUE_BYTES];
        v[..4].copy_from_slice(&self.teid.to_be_bytes());
        v[4..8].copy_from_slice(&self.enb.octets());
        v[8..10].copy_from_slice(&self.node.to_be_bytes());
        v[10] = self.qci;
        v[11..15].copy_from_slice(&self.ul_teid.to_be_bytes());
        v[QOS_FLOW_BYTE] = qos_flow_byte(self.qfi, self.rqi);
        let mut p = [0u8; Policy::BYTES];
        self.policy.write(&mut p);
        v[POLICY_BYTES].copy_from_slice(&p);
        v[OWNER_BYTE] = self.owner;
        v[AMBR_BYTES].copy_from_slice(&self.policy.write_ambr());
        v
    }

    /// The TEID upstream G-PDUs carry: `ul_teid`, or `teid` when that is 0.
    pub fn uplink_teid(&self) -> u32 {
        if self.ul_teid == 0 {
            self.teid
        } else {
            self.ul_teid
        }
    }

    /// The uplink table's key (the uplink TEID, [`Tunnel::uplink_teid`]) and value (UE key,
    /// eNodeB address, QoS flow byte; the local slot 0: the handling node writes it,
    /// [`set_uplink_slot`]).
    pub fn uplink_entry(&self) -> ([u8; 4], [u8; UPLINK_VALUE_BYTES]) {
        let mut v = [0u8; UPLINK_VALUE_BYTES];
        v[..KEY_BYTES].copy_from_slice(&self.key());
        v[KEY_BYTES..KEY_BYTES + 4].copy_from_slice(&self.enb.octets());
        v[KEY_BYTES + 4] = qos_flow_byte(self.qfi, self.rqi);
        (self.uplink_teid().to_be_bytes(), v)
    }

    /// The tunnel of a FIB entry (the local slot bytes are not part of it; bytes a shorter
    /// value lacks read as 0).
    pub fn from_entry(key: &[u8; KEY_BYTES], value: &[u8]) -> Tunnel {
        let (teid, enb, node, qci) = decode_value(value);
        let ul_teid = match value.get(11..15) {
            Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            None => 0,
        };
        let (qfi, rqi) = decode_qos_flow(value.get(QOS_FLOW_BYTE).copied().unwrap_or(0));
        Tunnel {
            ue: key_addr(key),
            teid,
            enb,
            node,
            qci,
            ul_teid,
            qfi,
            rqi,
            policy: value.get(POLICY_BYTES).map_or_else(Policy::default, |p| {
                Policy::read(p, value.get(AMBR_BYTES).unwrap_or(&[]))
            }),
            owner: value.get(OWNER_BYTE).copied().unwrap_or(0),
        }
    }
}

#[inline]
fn decode_value(v: &[u8]) -> (u32, Ipv4Addr, u16, u8) {
    (
        u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
        Ipv4Addr::new(v[4], v[5], v[6], v[7]),
        u16::from_be_bytes([v[8], v[9]]),
        v[10],
    )
}

/// What the handling node writes for a FIB entry ([`local_entry`]): its FIB value and uplink
/// entry, with the local policy slot id in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalEntry {
    /// The FIB value, [`LOCAL_SLOT`] set.
    pub value: [u8; VALUE_BYTES],
    /// The uplink table's key (the uplink TEID).
    pub uplink_key: [u8; 4],
    /// The uplink table's value, [`UPLINK_SLOT`] set.
    pub uplink_value: [u8; UPLINK_VALUE_BYTES],
    /// The slot id (0: the entry has no policy).
    pub slot: u32,
}

/// The handling node's form of the FIB entry `key` -> `value` (a value as the control plane
/// sends it, its local slot bytes ignored): with a policy, the session's slot in `policies`
/// is acquired (given, or shared with the session's other UE entry; its rates, gates and
/// buffering set) and written into the value and the uplink entry. Install both, then call
/// [`local_commit`]; if the install fails, [`local_release`] the new value.
pub fn local_entry(
    policies: &Policies,
    key: &[u8; KEY_BYTES],
    value: &[u8],
) -> Result<LocalEntry, crate::policy::PolicyError> {
    let t = Tunnel::from_entry(key, value);
    let slot = if t.policy.is_none() {
        0
    } else {
        policies.acquire(t.uplink_teid(), &t.policy)?
    };
    let mut v = t.value();
    set_local_slot(&mut v, slot);
    let (uplink_key, mut uplink_value) = t.uplink_entry();
    set_uplink_slot(&mut uplink_value, slot);
    Ok(LocalEntry {
        value: v,
        uplink_key,
        uplink_value,
        slot,
    })
}

/// After [`local_entry`]'s entry replaced `old` (the local value that was installed, if
/// any): with the SNDEM flag, an End Marker is queued for the old tunnel when the new one
/// differs (another TEID or gNB; none when the old had no gNB), and the old value's slot
/// reference is released (as [`local_release`]: the usage of a session whose slot that
/// freed, when the uplink TEID changed).
pub fn local_commit(
    policies: &Policies,
    key: &[u8; KEY_BYTES],
    old: Option<&[u8]>,
    new: &LocalEntry,
) -> Option<Usage> {
    let old = old?;
    let t = Tunnel::from_entry(key, &new.value);
    let o = Tunnel::from_entry(key, old);
    if t.policy.end_marker && !o.enb.is_unspecified() && (o.teid, o.enb) != (t.teid, t.enb) {
        policies.queue_end_marker(o.teid, o.enb, o.node);
    }
    local_release(policies, key, old)
}

/// The local value `value` of `key` is no longer installed: its slot reference is released
/// (the slot is freed with the session's last entry; its usage at that moment is returned).
pub fn local_release(policies: &Policies, key: &[u8; KEY_BYTES], value: &[u8]) -> Option<Usage> {
    if local_slot(value) == 0 {
        return None;
    }
    policies.release(Tunnel::from_entry(key, value).uplink_teid())
}

/// The header line of a flows file.
pub const FLOWS_HEADER: &str = "ue,teid,enb,node";

/// Writes tunnels as a flows file: the header line `ue,teid,enb,node`, then one line per
/// tunnel (UE address first, so `scalebricks gen --flows` reads the file as it is).
pub fn write_flows(mut w: impl std::io::Write, tunnels: &[Tunnel]) -> std::io::Result<()> {
    writeln!(w, "{FLOWS_HEADER}")?;
    for t in tunnels {
        writeln!(w, "{},{},{},{}", t.ue, t.teid, t.enb, t.node)?;
    }
    w.flush()
}

/// A line of a flows file that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct FlowsError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub why: String,
}

/// Reads a flows file written by [`write_flows`] (or by hand): an optional header line, then
/// `ue,teid,enb,node[,qci]` per line (QCI 9 when absent); blank lines and `#` comments are
/// skipped. Every node must be below `nodes`; UE addresses and TEIDs must be unique.
pub fn read_flows(text: &str, nodes: usize) -> Result<Vec<Tunnel>, FlowsError> {
    let mut out = Vec::new();
    let mut ues = std::collections::HashSet::new();
    let mut teids = std::collections::HashSet::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let err = |why: String| FlowsError { line: i + 1, why };
        if line.is_empty() || line.starts_with('#') || (i == 0 && line.starts_with("ue")) {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if !(4..=5).contains(&f.len()) {
            return Err(err(format!(
                "expected ue,teid,enb,node[,qci], got {} fields",
                f.len()
            )));
        }
        let ue: IpAddr = f[0]
            .parse()
            .map_err(|_| err(format!("bad UE address {:?}", f[0])))?;
        let teid: u32 = f[1]
            .parse()
            .map_err(|_| err(format!("bad TEID {:?}", f[1])))?;
        let enb: Ipv4Addr = f[2]
            .parse()
            .map_err(|_| err(format!("bad eNodeB IPv4 address {:?}", f[2])))?;
        let node: u16 = f[3]
            .parse()
            .ok()
            .filter(|&n: &u16| usize::from(n) < nodes)
            .ok_or_else(|| err(format!("node {:?} is not one of 0..{nodes}", f[3])))?;
        let qci: u8 = match f.get(4) {
            Some(q) => q.parse().map_err(|_| err(format!("bad QCI {q:?}")))?,
            None => 9,
        };
        if !ues.insert(ue) {
            return Err(err(format!("UE address {ue} appears twice")));
        }
        if !teids.insert(teid) {
            return Err(err(format!("TEID {teid} appears twice")));
        }
        out.push(Tunnel {
            ue,
            teid,
            enb,
            node,
            qci,
            ul_teid: 0,
            qfi: 0,
            rqi: false,
            policy: Policy::default(),
            owner: 0,
        });
    }
    Ok(out)
}

/// What the LTE application needs to know about the cluster.
#[derive(Clone, Debug)]
pub struct LteConfig {
    /// The `ran` (S1-U) address of every node: the outer source of the tunnels it serves.
    pub ran_addrs: Vec<Ipv4Addr>,
    /// The largest IP packet the `ran` link carries (its MTU: 1500 on plain Ethernet, 9000 on
    /// the jumbo N3 links `cluster up` makes, so a 1500-byte packet fits with its tunnel).
    pub ran_mtu: usize,
    /// The source address of the ICMP errors about downstream packets (this node's `inet`
    /// address).
    pub icmp_src: Ipv4Addr,
    /// The source address of ICMPv6 errors ([`default_icmp_src6`] unless configured).
    pub icmp_src6: Ipv6Addr,
}

/// The ICMPv6 source address of node `node` when none is configured: `fd73:6200::{node + 1}`,
/// in a unique local prefix of ours (the topology has no IPv6 addresses).
pub fn default_icmp_src6(node: u16) -> Ipv6Addr {
    Ipv6Addr::new(0xfd73, 0x6200, 0, 0, 0, 0, 0, node.wrapping_add(1))
}

/// The length of the IP packet at the start of `ip` from its header (`None` if its header or
/// that length does not fit).
fn ip_len(ip: &[u8]) -> Option<usize> {
    let n = match ip.first()? >> 4 {
        4 => usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])),
        6 => 40 + usize::from(u16::from_be_bytes([*ip.get(4)?, *ip.get(5)?])),
        _ => return None,
    };
    (n <= ip.len()).then_some(n)
}

/// Gives back the TTL (hop limit) [`Lte::apply`] took from an IP packet (and, IPv4, its
/// header checksum).
fn untouch_ttl(ip: &mut [u8]) {
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            ip[8] = ip[8].wrapping_add(1);
            ip[10..12].fill(0);
            if let Some(h) = ip.get(..ihl) {
                let c = sb_wire::checksum::checksum(h);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
            }
        }
        Some(6) if ip.len() >= 40 => ip[7] = ip[7].wrapping_add(1),
        _ => {}
    }
}

/// Writes an Ethernet header for the IP packet at `buf[s..s + n]` (MACs zero: the engine sets
/// them) and returns the frame's start.
fn ethernet_before(buf: &mut [u8], s: usize) -> Option<usize> {
    let e = s.checked_sub(14)?;
    let et: u16 = if buf.get(s)? >> 4 == 6 {
        0x86DD
    } else {
        0x0800
    };
    buf[e..e + 12].fill(0);
    buf[e + 12..e + 14].copy_from_slice(&et.to_be_bytes());
    Some(e)
}

/// The LTE packet forwarding engine.
pub struct Lte {
    cfg: LteConfig,
    uplink: sb_cuckoo::Reader,
    scratch: [u8; 256],
    /// The node's policy slots and this worker's core index among their counters.
    policies: Option<Arc<Policies>>,
    core: usize,
    /// The driver's clock ([`App::set_clock`]).
    now_ns: u64,
    /// The slot whose buffered packets run through the downstream path now (0: none).
    flushing: u32,
    /// The slot whose flush round ends when the worker comes round its loop.
    finishing: Option<u32>,
    released: Vec<Vec<u8>>,
    /// The outer IPv4 identification of the next packet cut into fragments.
    ident: u16,
    /// Frames from the CP function sent ([`App::take_access_frames`]), not yet counted by the
    /// engine ([`App::take_from_cp`]).
    from_cp: u64,
    /// Per-batch scratch of [`App::access_batch`].
    ul: UplinkScratch,
}

/// An uplink G-PDU as its parse left it, for the TEID lookup and the checks after it.
#[derive(Clone, Copy, Debug)]
struct UplinkPdu {
    teid: u32,
    /// The inner packet's offset in the frame and its length.
    off: usize,
    len: usize,
    /// The inner source's key ([`ue_key`]).
    src_key: [u8; KEY_BYTES],
    ttl: u8,
    v6: bool,
    /// An ICMPv6 Router Solicitation ([`is_router_solicitation`]).
    rs: bool,
    /// The GTP-U header's offset when it has extension headers (a PDU Session Container,
    /// perhaps).
    ext_at: Option<usize>,
}

/// What the parse of an access frame leaves: a G-PDU to look up, or the frame's result.
enum Parsed {
    Pdu(UplinkPdu),
    Done(Result<Access, Drop>),
}

/// The uplink batch's G-PDUs, their keys (TEIDs, big endian, back to back), the lookup's
/// values and hits, and each one's position in the batch's index list.
#[derive(Default)]
struct UplinkScratch {
    pdus: Vec<UplinkPdu>,
    pos: Vec<usize>,
    keys: Vec<u8>,
    values: Vec<u8>,
    found: Vec<bool>,
}

/// Whether an uplink inner packet is an ICMPv6 Router Solicitation (RFC 4861 sec. 4.1: type
/// 133, code 0, hop limit 255, right after the IPv6 header).
fn is_router_solicitation(ip: &sb_wire::IpInfo<'_>) -> bool {
    ip.is_ipv6()
        && ip.packet.get(6) == Some(&58)
        && ip.packet.get(7) == Some(&255)
        && ip.packet.get(40..42) == Some(&[133, 0])
}

/// The least `ran_mtu` whose outer packets are cut into fragments (an IPv4 header and 8
/// bytes); below it every packet that does not fit is answered as one with DF.
pub const MIN_FRAGMENT_MTU: usize = 28;

/// Where worker `core` of the node whose ICMP source is `icmp_src` starts its outer IPv4
/// identifications: apart from the node's other workers (by 2^13 for 8 workers) and from the
/// other nodes (mixed with the address).
fn first_ident(icmp_src: Ipv4Addr, core: usize) -> u16 {
    let a = u32::from(icmp_src);
    let mix = (a ^ (a >> 16)).wrapping_mul(0x9e37_79b9) >> 16;
    (mix as u16).wrapping_add((core as u16).wrapping_mul(0x2000))
}

impl Lte {
    /// The application with `uplink`: this node's tunnels by TEID ([`Lte::uplink_table`]).
    pub fn new(cfg: LteConfig, uplink: sb_cuckoo::Reader) -> Lte {
        Lte {
            uplink,
            scratch: [0; 256],
            policies: None,
            core: 0,
            now_ns: 0,
            flushing: 0,
            finishing: None,
            released: Vec::new(),
            ident: first_ident(cfg.icmp_src, 0),
            from_cp: 0,
            ul: UplinkScratch::default(),
            cfg,
        }
    }

    /// The first half of an access frame ([`App::access`]): parsed; an echo request answered
    /// in place, a frame that is not a G-PDU dropped; a G-PDU left to look up.
    #[inline]
    fn uplink_parse(&mut self, batch: &mut PacketBatch, i: usize) -> Parsed {
        let frame = batch.get(i);
        let p = match parse_frame_with(frame, &ParseOptions::default()) {
            Ok(p) => p,
            Err(e) => return Parsed::Done(Err(Drop::Malformed(e))),
        };
        let g = match p.kind {
            FrameKind::Gtpu(g) => g,
            FrameKind::Ip(ip) if ip.fragment.is_some() => {
                return Parsed::Done(Err(Drop::OuterFragment))
            }
            FrameKind::Ip(_) => return Parsed::Done(Err(Drop::NotGpdu)),
            FrameKind::Arp(_) | FrameKind::Other(_) => return Parsed::Done(Err(Drop::NotIp)),
        };
        match g.msg_type {
            gtpu::msg_type::ECHO_REQUEST => {
                let Some(n) = answer_echo_request(frame, &mut self.scratch).ok().flatten() else {
                    return Parsed::Done(Err(Drop::NotGpdu));
                };
                let (buf, start) = batch.buffer_mut(i);
                let Some(dst) = buf.get_mut(start..start + n) else {
                    return Parsed::Done(Err(Drop::NoRoom));
                };
                dst.copy_from_slice(&self.scratch[..n]);
                batch.set_range(i, start, n);
                Parsed::Done(Ok(Access::Reply))
            }
            gtpu::msg_type::G_PDU => {
                let Some(inner) = g.inner else {
                    return Parsed::Done(Err(Drop::NotGpdu));
                };
                Parsed::Pdu(UplinkPdu {
                    teid: g.teid,
                    off: inner.offset,
                    len: inner.packet.len(),
                    src_key: ue_key(inner.src_addr),
                    ttl: inner.ttl,
                    v6: inner.is_ipv6(),
                    rs: is_router_solicitation(&inner),
                    ext_at: g.first_ext_type.map(|_| g.gtpu_offset),
                })
            }
            _ => Parsed::Done(Err(Drop::NotGpdu)),
        }
    }

    /// Hints the processor to load the policy slot of the uplink batch's G-PDU `k`, if its
    /// TEID was found and has one.
    #[inline]
    fn prefetch_uplink(&self, s: &UplinkScratch, k: usize) {
        if let Some(p) = self.policies.as_deref().filter(|_| s.found[k]) {
            let id = uplink_slot(&s.values[k * UPLINK_VALUE_BYTES..(k + 1) * UPLINK_VALUE_BYTES]);
            if id != 0 {
                p.prefetch(id, true);
            }
        }
    }

    /// The second half of an access frame: the G-PDU `u` of frame `i`, whose TEID the uplink
    /// table maps to `v` (`None`: unknown), checked (inner source, QFI, TTL), policed and
    /// decapsulated; a Router Solicitation goes to the control plane.
    #[inline]
    fn uplink_finish(
        &mut self,
        batch: &mut PacketBatch,
        i: usize,
        u: &UplinkPdu,
        v: Option<&[u8]>,
    ) -> Result<Access, Drop> {
        let v = v.ok_or(Drop::UnknownTeid)?;
        // A Router Solicitation (from the UE's link-local or unspecified address): for the CP
        // function, through the control plane (open5gs's SMF answers it).
        if let Some(p) = self.policies.as_deref().filter(|_| u.rs) {
            let packet = batch
                .get(i)
                .get(u.off..u.off + u.len)
                .ok_or(Drop::NotGpdu)?;
            if !p.queue_to_cp(u.teid, packet) {
                return Err(Drop::NoRoom);
            }
            return Err(Drop::ToCp);
        }
        // IPv4: the UE's address; IPv6: its /64 prefix (the UE picks the rest).
        if v[..KEY_BYTES] != u.src_key {
            return Err(Drop::UplinkMismatch);
        }
        let (qfi, _) = decode_qos_flow(v[KEY_BYTES + 4]);
        if qfi != 0 {
            if let Some(at) = u.ext_at {
                let c = batch
                    .get(i)
                    .get(at..)
                    .and_then(|b| GtpuPacket::new_checked(b).ok())
                    .and_then(|p| p.pdu_session());
                if c.is_some_and(|c| c.qfi != qfi) {
                    return Err(Drop::QfiMismatch);
                }
            }
        }
        if u.ttl <= 1 {
            return Err(Drop::Ttl);
        }
        let id = uplink_slot(v);
        if id != 0 {
            if let Some(p) = &self.policies {
                if let Verdict::Drop(d) = p.uplink(self.core, id, u.len, self.now_ns) {
                    return Err(d);
                }
            }
        }
        let (off, len, v6) = (u.off, u.len, u.v6);
        let ethertype: u16 = if v6 { 0x86DD } else { 0x0800 };
        let (buf, start) = batch.buffer_mut(i);
        let ip = &mut buf[start + off..start + off + len];
        if v6 {
            ip[7] -= 1;
        } else {
            Ipv4Packet::new_unchecked(ip).decrement_ttl();
        }
        let s = start + off - 14;
        buf[s + 12..s + 14].copy_from_slice(&ethertype.to_be_bytes());
        batch.set_range(i, s, 14 + len);
        Ok(Access::ToExternal)
    }

    /// The next outer IPv4 identification of a packet cut into fragments (a counter per
    /// worker, RFC 6864: unique for its addresses and protocol while fragments may live, up to
    /// 65536 cut packets; the workers of a node start apart, [`first_ident`]).
    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }

    /// The application applying the node's `policies` (shared by its workers and its control
    /// thread) as worker `core` (below `policies.cores()`; each worker its own). Without this,
    /// values with a policy slot forward as if they had none.
    pub fn with_policies(mut self, policies: Arc<Policies>, core: usize) -> Lte {
        self.set_policies(policies, core);
        self
    }

    /// [`Lte::with_policies`] in place.
    pub fn set_policies(&mut self, policies: Arc<Policies>, core: usize) {
        self.policies = Some(policies);
        self.core = core;
        self.ident = first_ident(self.cfg.icmp_src, core);
    }

    /// Changes the largest IP packet the `ran` link carries ([`LteConfig::ran_mtu`]).
    pub fn set_ran_mtu(&mut self, mtu: usize) {
        self.cfg.ran_mtu = mtu;
    }

    /// The policies this worker applies, if any.
    pub fn policies(&self) -> Option<&Arc<Policies>> {
        self.policies.as_ref()
    }

    /// The uplink table of the tunnels a node serves (key TEID, value UE key + eNodeB).
    pub fn uplink_table<'a>(
        tunnels: impl IntoIterator<Item = &'a Tunnel>,
        seed: u64,
    ) -> Result<sb_cuckoo::Reader, crate::FibError> {
        let entries: Vec<([u8; 4], [u8; UPLINK_VALUE_BYTES])> =
            tunnels.into_iter().map(Tunnel::uplink_entry).collect();
        let t = crate::fib::cuckoo_table(
            4,
            UPLINK_VALUE_BYTES,
            seed,
            entries.iter().map(|(k, v)| (&k[..], &v[..])),
        )?;
        Ok(t.into_concurrent().1)
    }

    /// Another instance sharing the uplink table and the policies (for another worker: give
    /// it its own core with [`Lte::with_policies`]).
    pub fn handle(&self) -> Lte {
        let l = Lte::new(self.cfg.clone(), self.uplink.clone());
        match &self.policies {
            Some(p) => l.with_policies(p.clone(), self.core),
            None => l,
        }
    }

    /// Bytes of the uplink table.
    pub fn uplink_bytes(&self) -> usize {
        self.uplink.memory_bytes()
    }
}

const DOWNSTREAM: ParseOptions = ParseOptions {
    verify_ipv4_checksum: true,
    verify_l4_checksum: false,
    gtpu_port: sb_wire::GTPU_PORT,
    // From the Internet, GTP-U is just UDP to a UE.
    parse_gtpu: false,
};

impl App for Lte {
    fn key_bytes(&self) -> usize {
        KEY_BYTES
    }

    fn value_bytes(&self) -> usize {
        VALUE_BYTES
    }

    #[inline]
    fn downstream_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop> {
        let p = parse_frame_with(frame, &DOWNSTREAM).map_err(Drop::Malformed)?;
        let FrameKind::Ip(ip) = p.kind else {
            return Err(Drop::NotIp);
        };
        let group = match ip.dst_addr {
            IpAddr::V4(a) => a.is_multicast() || a.is_broadcast(),
            IpAddr::V6(a) => a.is_multicast(),
        };
        if group {
            return Err(Drop::Multicast);
        }
        meta.user = ip.offset as u32 | (ip.packet.len() as u32) << 16;
        if ip.ttl <= 1 {
            return Err(Drop::Ttl);
        }
        key.copy_from_slice(&ue_key(ip.dst_addr));
        Ok(())
    }

    /// The ingress node validated the packet: read the destination address at its fixed
    /// offset (no VLAN tag on the fabric, no IPv4 options read), checking only the lengths.
    #[inline]
    fn fabric_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop> {
        let et = frame.get(12..14).ok_or(Drop::InvalidFabric)?;
        let (dst, ttl, len) = match (et, frame.get(14).map(|b| b >> 4)) {
            ([0x08, 0x00], Some(4)) => {
                let h = frame.get(14..34).ok_or(Drop::InvalidFabric)?;
                let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
                let a = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
                (IpAddr::V4(a), h[8], len)
            }
            ([0x86, 0xdd], Some(6)) => {
                let h = frame.get(14..54).ok_or(Drop::InvalidFabric)?;
                let len = 40 + usize::from(u16::from_be_bytes([h[4], h[5]]));
                let mut a = [0u8; 16];
                a.copy_from_slice(&h[24..40]);
                (IpAddr::V6(Ipv6Addr::from(a)), h[7], len)
            }
            ([0x81, 0x00], _) => return self.downstream_key(frame, key, meta),
            _ => return Err(Drop::InvalidFabric),
        };
        if len < 20 || 14 + len > frame.len() {
            return Err(Drop::InvalidFabric);
        }
        meta.user = 14 | (len as u32) << 16;
        if ttl <= 1 {
            return Err(Drop::Ttl);
        }
        key.copy_from_slice(&ue_key(dst));
        meta.user = 14 | (len as u32) << 16;
        Ok(())
    }

    #[inline]
    fn egress_node(&self, value: &[u8]) -> u16 {
        u16::from_be_bytes([value[EGRESS_NODE_AT], value[EGRESS_NODE_AT + 1]])
    }

    #[inline]
    fn prefetch(&self, value: &[u8]) {
        if let Some(p) = &self.policies {
            let id = local_slot(value);
            if id != 0 {
                p.prefetch(id, false);
            }
        }
    }

    fn apply(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop> {
        let (teid, enb, node, _qci) = decode_value(value);
        let user = batch.meta(i).user;
        let (off, ip_len) = ((user & 0xffff) as usize, (user >> 16) as usize);
        let id = local_slot(value);
        let policies = if id == 0 {
            None
        } else {
            self.policies.as_deref()
        };
        if let Some(p) = policies {
            // The value's flags: no memory touched (the slot's half comes in `admit`).
            match downlink_flags(value[POLICY_FLAGS_BYTE], id == self.flushing) {
                Verdict::Pass => {}
                Verdict::Drop(d) => return Err(d),
                Verdict::Buffer => {
                    let packet = batch.get(i).get(off..off + ip_len).ok_or(Drop::NotIp)?;
                    p.buffer(id, packet)?;
                    return Err(Drop::Buffered);
                }
            }
        }
        if enb.is_unspecified() {
            // An uplink whose downlink tunnel is not known yet (or idle).
            return Err(Drop::NoTunnel);
        }
        let (qfi, rqi) = decode_qos_flow(value[QOS_FLOW_BYTE]);
        let overhead = if qfi == 0 {
            TUNNEL_OVERHEAD
        } else {
            TUNNEL_OVERHEAD_QFI
        };
        let cut = ip_len + overhead > self.cfg.ran_mtu;
        if cut {
            // An IPv4 packet without DF: the outer packet is cut into fragments (`split`). An
            // MTU too small for 8 bytes after the outer header cannot carry a fragment.
            let no_df = batch
                .get(i)
                .get(off..off + 7)
                .is_some_and(|h| h[0] >> 4 == 4 && h[6] & 0x40 == 0);
            if !no_df || self.cfg.ran_mtu < MIN_FRAGMENT_MTU {
                // For the error reply: the largest packet that fits, where the length was.
                let mtu = self.cfg.ran_mtu.saturating_sub(overhead).min(0xffff) as u32;
                batch.meta_mut(i).user = user & 0xffff | mtu << 16;
                return Err(Drop::Mtu);
            }
        }
        let src = *self
            .cfg
            .ran_addrs
            .get(usize::from(node))
            .ok_or(Drop::UnknownFlow)?;
        let (buf, start) = batch.buffer_mut(i);
        let ip_start = start + off;
        let ip = buf
            .get_mut(ip_start..ip_start + ip_len)
            .ok_or(Drop::NotIp)?;
        match ip[0] >> 4 {
            4 => {
                let mut p = Ipv4Packet::new_checked(ip).map_err(|_| Drop::NotIp)?;
                p.decrement_ttl().ok_or(Drop::Ttl)?;
            }
            _ => {
                let mut p = Ipv6Packet::new_checked(ip).map_err(|_| Drop::NotIp)?;
                let h = p.hop_limit();
                if h <= 1 {
                    return Err(Drop::Ttl);
                }
                p.set_hop_limit(h - 1);
            }
        }
        let ident = if cut { self.next_ident() } else { 0 };
        let t = GtpuTunnel {
            pdu_session: (qfi != 0).then(|| PduSession::downlink(qfi, rqi)),
            // A packet to be cut: DF clear, an identification to reassemble it by.
            dont_frag: !cut,
            ident,
            ..GtpuTunnel::new(
                sb_wire::EthernetAddress([0; 6]),
                sb_wire::EthernetAddress([0; 6]),
                OuterIp::V4 { src, dst: enb },
                teid,
            )
        };
        let s = t
            .encap_in_place(buf, ip_start, ip_len)
            .map_err(|_| Drop::NoRoom)?;
        batch.set_range(i, s, ip_start + ip_len - s);
        // Where the inner packet now is, for `admit`.
        batch.meta_mut(i).user = (ip_start - s) as u32 | (ip_len as u32) << 16;
        Ok(())
    }

    /// The slot's half of the policy ([`Policies::downlink_admit`]), after the whole batch
    /// was applied: the slot's lines, prefetched before, have arrived. A packet the slot
    /// buffers after all (it started flushing after the value was read) is buffered as it
    /// arrived: its TTL restored.
    fn admit(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop> {
        let id = local_slot(value);
        if id == 0 {
            return Ok(());
        }
        let Some(p) = self.policies.as_deref() else {
            return Ok(());
        };
        let user = batch.meta(i).user;
        let (off, ip_len) = ((user & 0xffff) as usize, (user >> 16) as usize);
        match p.downlink_admit(self.core, id, ip_len, self.now_ns, id == self.flushing) {
            Verdict::Pass => Ok(()),
            Verdict::Drop(d) => Err(d),
            Verdict::Buffer => {
                let mut ip = batch
                    .get(i)
                    .get(off..off + ip_len)
                    .ok_or(Drop::NotIp)?
                    .to_vec();
                untouch_ttl(&mut ip);
                p.buffer(id, &ip)?;
                Err(Drop::Buffered)
            }
        }
    }

    /// A downlink frame larger than `ran_mtu` (an outer IPv4 packet [`Lte::apply`] left
    /// without DF: its inner IPv4 packet had none) is cut into outer IPv4 fragments that fit
    /// ([`Fragmenter`]); one with DF (made by a node whose `ran_mtu` is larger) is dropped
    /// ([`Drop::Mtu`]).
    #[inline]
    fn split(
        &mut self,
        batch: &mut PacketBatch,
        i: usize,
        pieces: &mut PacketBatch,
    ) -> Result<usize, Drop> {
        let f = batch.get(i);
        if f.len() <= 14 + self.cfg.ran_mtu {
            return Ok(0);
        }
        let ip = &f[14..];
        if f[12..14] != [0x08, 0x00] || ip.get(6).is_none_or(|b| b & 0x40 != 0) {
            return Err(Drop::Mtu);
        }
        let cut = Fragmenter::new(ip, self.cfg.ran_mtu).map_err(|_| Drop::Mtu)?;
        let n = cut.count();
        for k in 1..n {
            let Some(o) = pieces.alloc(14 + cut.fragment_len(k)) else {
                pieces.clear();
                return Err(Drop::NoRoom);
            };
            o[..14].copy_from_slice(&f[..14]);
            cut.write(ip, k, &mut o[14..]).map_err(|_| Drop::NoRoom)?;
        }
        let len = f.len();
        let (buf, start) = batch.buffer_mut(i);
        let m = cut
            .cut_first(&mut buf[start + 14..start + len])
            .map_err(|_| Drop::NoRoom)?;
        batch.set_range(i, start, 14 + m);
        Ok(n - 1)
    }

    /// One frame: its parse, a single lookup of its TEID, the checks
    /// ([`Lte::access_batch`] does the same for a batch, its lookups batched).
    fn access(&mut self, batch: &mut PacketBatch, i: usize) -> Result<Access, Drop> {
        let u = match self.uplink_parse(batch, i) {
            Parsed::Pdu(u) => u,
            Parsed::Done(r) => return r,
        };
        let mut v = [0u8; UPLINK_VALUE_BYTES];
        let found = self.uplink.lookup_into(&u.teid.to_be_bytes(), &mut v);
        self.uplink_finish(batch, i, &u, found.then_some(&v[..]))
    }

    /// The batch as [`access`](Self::access) would do it frame by frame, with the same
    /// result for each: every frame parsed (echo requests answered, frames that are not
    /// G-PDUs dropped), the G-PDUs' TEIDs looked up in one batched lookup of the uplink table
    /// (its buckets prefetched, as the FIB's downstream), the policy slots of the hits
    /// prefetched, then each G-PDU's checks, policy and decapsulation in order.
    fn access_batch(
        &mut self,
        batch: &mut PacketBatch,
        idx: &[usize],
        out: &mut [Result<Access, Drop>],
    ) {
        let mut s = std::mem::take(&mut self.ul);
        s.pdus.clear();
        s.pos.clear();
        s.keys.clear();
        for (j, &i) in idx.iter().enumerate() {
            match self.uplink_parse(batch, i) {
                Parsed::Pdu(u) => {
                    s.keys.extend_from_slice(&u.teid.to_be_bytes());
                    s.pdus.push(u);
                    s.pos.push(j);
                }
                Parsed::Done(r) => out[j] = r,
            }
        }
        let m = s.pdus.len();
        if m > 0 {
            s.values.resize(m * UPLINK_VALUE_BYTES, 0);
            s.found.resize(m, false);
            let (values, found) = (&mut s.values[..m * UPLINK_VALUE_BYTES], &mut s.found[..m]);
            self.uplink.lookup_batch(&s.keys, values, found);
            // The hits' policy slots, `AHEAD` G-PDUs ahead of their checks.
            for k in 0..m.min(AHEAD) {
                self.prefetch_uplink(&s, k);
            }
            for (k, u) in s.pdus.iter().enumerate() {
                if k + AHEAD < m {
                    self.prefetch_uplink(&s, k + AHEAD);
                }
                let j = s.pos[k];
                let v = &s.values[k * UPLINK_VALUE_BYTES..(k + 1) * UPLINK_VALUE_BYTES];
                out[j] = self.uplink_finish(batch, idx[j], u, s.found[k].then_some(v));
            }
        }
        self.ul = s;
    }

    fn set_clock(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    fn poll(&mut self) {
        if let Some(p) = &self.policies {
            if let Some(id) = self.finishing.take() {
                p.finish_flush(id);
            }
            p.quiescent(self.core);
        }
    }

    /// The CP function's frames to UEs ([`Policies::queue_access_frame`]), then queued End
    /// Markers that may go ([`Policies::queue_end_marker`]), from the old tunnel's node's
    /// `ran` address.
    fn take_access_frames(&mut self, out: &mut PacketBatch) -> usize {
        let Some(p) = &self.policies else {
            return 0;
        };
        let mut n = 0;
        while out.room() > 0 {
            let Some(f) = p.take_access_frame() else {
                break;
            };
            if out.push(&f) {
                n += 1;
                self.from_cp += 1;
            }
        }
        while out.room() > 0 {
            let Some(m) = p.take_end_marker(self.now_ns) else {
                break;
            };
            let Some(&src) = self.cfg.ran_addrs.get(usize::from(m.node)) else {
                continue;
            };
            let zero = sb_wire::EthernetAddress([0; 6]);
            let outer = OuterIp::V4 { src, dst: m.gnb };
            let Ok(len) = end_marker(zero, zero, outer, m.teid, &mut self.scratch) else {
                continue;
            };
            if out.push(&self.scratch[..len]) {
                n += 1;
            }
        }
        n
    }

    /// A session's buffered packets, oldest first, as Ethernet frames (MACs zero) to run
    /// through the downstream path: they pass its policy's buffering check.
    fn take_released(&mut self, rx: &mut PacketBatch) -> usize {
        let Some(p) = &self.policies else {
            return 0;
        };
        if self.finishing.is_some() {
            // One flush round per loop: the round ends when the worker comes round.
            return 0;
        }
        self.released.clear();
        let Some(id) = p.take_flush(rx.room(), &mut self.released) else {
            return 0;
        };
        let mut n = 0;
        for ip in &self.released {
            let Some(f) = rx.alloc(14 + ip.len()) else {
                break;
            };
            f[14..].copy_from_slice(ip);
            if ethernet_before(f, 14).is_some() {
                n += 1;
            }
        }
        self.flushing = id;
        self.finishing = Some(id);
        n
    }

    fn take_from_cp(&mut self) -> u64 {
        std::mem::take(&mut self.from_cp)
    }

    fn released_done(&mut self) {
        self.flushing = 0;
    }

    fn answers(&self, why: Drop) -> bool {
        matches!(why, Drop::Ttl | Drop::Mtu | Drop::UnknownTeid)
    }

    fn error_reply(
        &mut self,
        batch: &mut PacketBatch,
        i: usize,
        port: PortId,
        why: Drop,
    ) -> Option<ErrorReply> {
        let frame_len = batch.get(i).len();
        if port == PortId::Ran {
            let (off, len, src) = {
                let frame = batch.get(i);
                let p = parse_frame_with(frame, &ParseOptions::default()).ok()?;
                let FrameKind::Gtpu(g) = p.kind else {
                    return None;
                };
                if why == Drop::UnknownTeid {
                    let n = error_indication(frame, &mut self.scratch).ok().flatten()?;
                    let (buf, start) = batch.buffer_mut(i);
                    buf.get_mut(start..start + n)?
                        .copy_from_slice(&self.scratch[..n]);
                    batch.set_range(i, start, n);
                    return Some(ErrorReply::Access);
                }
                if why != Drop::Ttl {
                    return None;
                }
                let inner = g.inner?;
                let src = match g.outer.dst_addr {
                    IpAddr::V4(a) => a,
                    IpAddr::V6(_) => self.cfg.icmp_src,
                };
                (inner.offset, inner.packet.len(), src)
            };
            let (buf, start) = batch.buffer_mut(i);
            let (s, n) = error_in_place(
                buf,
                start + off,
                len,
                src,
                self.cfg.icmp_src6,
                ErrorMessage::TimeExceeded,
            )
            .ok()?;
            let e = ethernet_before(buf, s)?;
            batch.set_range(i, e, 14 + n);
            return Some(ErrorReply::Downstream);
        }
        let user = batch.meta(i).user;
        let off = (user & 0xffff) as usize;
        let msg = match why {
            Drop::Ttl => ErrorMessage::TimeExceeded,
            Drop::Mtu => ErrorMessage::TooBig {
                mtu: (user >> 16) as u16,
            },
            _ => return None,
        };
        let (buf, start) = batch.buffer_mut(i);
        let ip_start = start + off;
        let len = ip_len(buf.get(ip_start..start + frame_len)?)?;
        let (s, n) = error_in_place(
            buf,
            ip_start,
            len,
            self.cfg.icmp_src,
            self.cfg.icmp_src6,
            msg,
        )
        .ok()?;
        let e = ethernet_before(buf, s)?;
        batch.set_range(i, e, 14 + n);
        Some(ErrorReply::External)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        // (An IPv6 UE's key is its /64: given as its prefix, it reads back as it was.)
        for ue in [
            IpAddr::V4(Ipv4Addr::new(100, 64, 0, 7)),
            IpAddr::V6("2001:db8:0:7::".parse().unwrap()),
        ] {
            let t = Tunnel {
                ue,
                teid: 0xdead_beef,
                enb: Ipv4Addr::new(192, 0, 2, 9),
                node: 3,
                qci: 9,
                ul_teid: 0,
                qfi: 0,
                rqi: false,
                policy: Policy::default(),
                owner: 0,
            };
            assert_eq!(key_addr(&t.key()), ue);
            // The owners' RIBs leave this prefix out of IPv4 keys, and only those.
            assert_eq!(t.key().starts_with(&IPV4_KEY_PREFIX), ue.is_ipv4());
            assert_eq!(Tunnel::from_entry(&t.key(), &t.value()), t);
            // Without an uplink TEID the uplink table is keyed by the TEID.
            assert_eq!(t.uplink_entry().0, 0xdead_beef_u32.to_be_bytes());
            let u = Tunnel {
                ul_teid: 0x0300_0001,
                ..t
            };
            assert_eq!(Tunnel::from_entry(&u.key(), &u.value()), u);
            assert_eq!(u.uplink_teid(), 0x0300_0001);
            assert_eq!(u.uplink_entry().0, 0x0300_0001_u32.to_be_bytes());
            assert_eq!(u.uplink_entry().1, t.uplink_entry().1);
            assert_eq!(u.value()[..11], t.value()[..11]);
            // No policy: the tail is all zero.
            assert_eq!(t.value()[16..], [0u8; 16]);
        }
    }

    proptest::proptest! {
        /// Every field of a tunnel survives its FIB entry; the local slot bytes are not part
        /// of it, and are 0 in the value it makes.
        #[test]
        fn tunnels_round_trip_with_their_policy(
            v4 in proptest::prelude::any::<u32>(),
            v6 in proptest::prelude::any::<u64>(),
            six in proptest::prelude::any::<bool>(),
            teid in proptest::prelude::any::<u32>(),
            enb in proptest::prelude::any::<u32>(),
            node in proptest::prelude::any::<u16>(),
            qci in proptest::prelude::any::<u8>(),
            ul_teid in proptest::prelude::any::<u32>(),
            qfi in 0u8..64,
            rqi in proptest::prelude::any::<bool>(),
            dl in proptest::prelude::any::<u32>(),
            ul in proptest::prelude::any::<u32>(),
            flags in 0u8..0x80,
            owner in proptest::prelude::any::<u8>(),
            slot in 1u32..(1 << 24),
        ) {
            let ue = if six {
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) << 64 | 0x2001_0db8 << 96))
            } else {
                IpAddr::V4(Ipv4Addr::from(v4))
            };
            let t = Tunnel {
                ue, teid, enb: Ipv4Addr::from(enb), node, qci, ul_teid, qfi,
                rqi: rqi && qfi != 0,
                policy: Policy::from_parts(dl, ul, flags),
                owner,
            };
            let mut v = t.value();
            proptest::prop_assert_eq!(local_slot(&v), 0);
            proptest::prop_assert_eq!(Tunnel::from_entry(&t.key(), &v), t);
            set_local_slot(&mut v, slot);
            proptest::prop_assert_eq!(local_slot(&v), slot);
            proptest::prop_assert_eq!(Tunnel::from_entry(&t.key(), &v), t);
            proptest::prop_assert_eq!(without_local_slot(&v), t.value());
            let (_, mut up) = t.uplink_entry();
            proptest::prop_assert_eq!(uplink_slot(&up), 0);
            set_uplink_slot(&mut up, slot);
            proptest::prop_assert_eq!(uplink_slot(&up), slot);
            proptest::prop_assert_eq!(&up[..KEY_BYTES], &t.key()[..]);
        }
    }

    #[test]
    fn an_ipv6_ue_is_keyed_by_its_slash_64() {
        let a: Ipv6Addr = "2001:db8:1:2:aaaa:bbbb:cccc:dddd".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        let other: Ipv6Addr = "2001:db8:1:3:aaaa:bbbb:cccc:dddd".parse().unwrap();
        assert_eq!(ue_key(a.into()), ue_key(b.into()));
        assert_ne!(ue_key(a.into()), ue_key(other.into()));
        assert_eq!(
            key_addr(&ue_key(a.into())),
            IpAddr::V6("2001:db8:1:2::".parse().unwrap())
        );
        // IPv4 keys are whole addresses.
        let v4 = |d| IpAddr::V4(Ipv4Addr::new(100, 64, 0, d));
        assert_ne!(ue_key(v4(1)), ue_key(v4(2)));
    }

    #[test]
    fn flows_file_round_trips_and_names_bad_lines() {
        let ts = crate::cluster::generate_tunnels(100, 4, 1, 7);
        let mut buf = Vec::new();
        write_flows(&mut buf, &ts).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.starts_with("ue,teid,enb,node\n"));
        let back = read_flows(&text, 4).unwrap();
        // QCI is not in the file: 9 on reading.
        let want: Vec<Tunnel> = ts.iter().map(|t| Tunnel { qci: 9, ..*t }).collect();
        assert_eq!(back, want);
        let e = read_flows(
            "ue,teid,enb,node\n100.64.0.1,1,192.0.2.1,0\n100.64.0.2,2,192.0.2.1,4\n",
            4,
        )
        .unwrap_err();
        assert_eq!(e.line, 3);
        let e = read_flows("100.64.0.1,1,192.0.2.1,0\n100.64.0.1,2,192.0.2.1,1\n", 4).unwrap_err();
        assert!(e.why.contains("twice"), "{e}");
        assert!(read_flows("100.64.0.1,x,192.0.2.1,0", 4).is_err());
        assert!(read_flows("100.64.0.1,1,2001:db8::1,0", 4).is_err());
    }
}
