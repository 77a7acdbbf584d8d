//! QoS enforcement and usage measurement at the handling node, in the engine's hot path: what a
//! PFCP session's QERs (gate status, maximum bit rate), URRs (volume counting) and FAR (buffer,
//! notify, drop, End Marker) ask of the data plane.
//!
//! # Where it lives
//! A session's rules reach the FIB value ([`crate::lte::Tunnel::policy`], bytes 16..25). The
//! node that installs the entry in its own FIB (the handling node's control thread) gives the
//! session a **slot** here, keyed by its uplink TEID (a dual-stack session's two UE entries
//! share it), and writes the slot's index + 1 into bytes 25..28 of its local copy of the value
//! and into its uplink table entry ([`crate::lte::LOCAL_SLOT`]): no lookup beyond the FIB's.
//! A value whose slot bytes are 0 has no policy, and costs the hot path one branch.
//!
//! [`Policies`] is shared (an `Arc`) by the node's workers, which read it without locks on
//! the forwarding path, and its control thread, which configures slots
//! ([`Policies::acquire`], [`Policies::release`]) and reads usage ([`Policies::usage`]).
//! Slots are indexed directly (no hash lookup), allocated in chunks of 65536 (on 2 MB pages)
//! as they are first needed.
//!
//! # Maximum bit rate: a token bucket per direction, shared by the workers
//! Each direction's bucket is one atomic word, the theoretical arrival time of the GCRA
//! (ITU-T I.371's virtual scheduling), which is a token bucket: with `c` the time a byte costs at
//! the rate and `tau = burst * c`, a packet of `n` bytes arriving at `now` conforms when
//! `max(tat, now) + n * c <= now + tau`, and then `tat` moves to `max(tat, now) + n * c` (one
//! compare-and-swap; a worker that loses the race retries with the value it read). Time is
//! the driver's clock ([`crate::Engine::set_clock`], the same origin on every worker of a
//! node), counted in 1/16 ns; the cost of a byte is kept as a 32.32 fixed-point number of
//! those, so a 64-byte packet at 10 Gbit/s is priced within 0.1%. **Burst**: 100 ms of the
//! rate, at least [`MIN_BURST_BYTES`] (four 1500-byte packets: a packet larger than the bucket
//! would never pass); the bucket starts full. Rate 0: unlimited. A packet that does not conform
//! is dropped ([`Drop::Mbr`]) and takes no tokens.
//!
//! # Session AMBR: a bucket shared by the session's flows
//! A slot is one flow of a session as the data plane tells them apart (its uplink TEID: the
//! UE entries that share it, and the uplink G-PDUs that carry it); its buckets police the
//! flow's own MBR. A session of several flows whose QERs include one linked to more than one
//! of them (the session-AMBR QER open5gs and free5GC link to every PDR) names a **session
//! key** and the AMBR in its policy ([`Policy::session`], [`Policy::dl_ambr_kbps`]): the
//! flows' slots with the same key share one more slot, a *group*, whose buckets police the
//! AMBR over all of them. A packet passes only if its flow's bucket and its group's allow it
//! (the flow's tokens are given back when the group's refuse). A slot without a group costs
//! the hot path one more load of the line it already read, and a branch.
//!
//! # One line per packet
//! A slot's state is two cache lines, one per direction (a *side*), each in its chunk's array
//! of that direction: the side's bucket, the policy's flags and group (the same on both), the
//! counts of the core that owns the side's counters, and the side's round stamp (below). A
//! packet touches its side's line alone (the engine prefetches it, [`Policies::prefetch`]),
//! not a state line and a counter line as separate arrays would make it: the downlink path
//! of a node whose FIB is far larger than the cache waits on memory, and each random line a
//! packet needs costs it (`scalebricks-bench node --arch full-dup`, docs/bench/node.md).
//!
//! # Usage: counters per core
//! `{ul,dl}_{bytes,packets}` per slot and per core, each written by one worker only (a plain
//! load and store of an atomic word: one writer): the first worker to count a side takes it
//! (its index in the side's `owner`, a compare-and-swap once per slot) and counts on the
//! side's line from then on; any other worker counts that side in an array of its own,
//! aligned to cache lines and mapped the first time it needs it (a side's packets come to one
//! worker as long as the NIC steers its flow to one queue, so most nodes never map one).
//! [`Policies::usage`] sums the owners' counts and the arrays'. No counter line is written by
//! two cores; a side's line is written by another core only when that core polices the same
//! side, whose bucket the two share anyway. **Bytes
//! counted are the inner IP packet's length** (header and payload, no GTP-U, UDP, outer IP or
//! Ethernet), what TS 29.244's volume measurement counts; a packet is counted when it is
//! forwarded (after the gate, the FAR's drop, the MBR; a buffered packet when the buffer is
//! flushed and it goes out), so a report never counts a packet twice or one that was dropped.
//! A slot's usage starts at 0 when the slot is given to a session, and stays readable until
//! the last entry of the session is removed ([`Policies::release`]).
//!
//! # Metering rounds: the cost of the slots that counted
//! The control thread hands the sessions' endpoints the counts that changed
//! ([`Policies::begin_usage_round`], then [`Policies::changed_usages`] in bounded batches): it
//! visits the slots that counted since the last round, not every counting slot. Each core
//! keeps a **dirty bitmap** per chunk of slots (a bit per slot and a summary bit per 64
//! slots, in arrays of its own). Which count sets them is told by a **round stamp** on the
//! side's line (the line the policing already read): a worker that counts a packet of a side
//! whose stamp is not the current round (a word of [`Policies`] every count reads, on a line
//! of its own that changes once per round) stamps it and sets its own bit and summary bit
//! (two read-modify-writes, once per side and round, by whichever core counts the side
//! first in it), after its counters; otherwise the count touches no memory beyond the side's
//! line. A round takes the set bits (a swap to 0 of each set word, summaries first), then
//! advances the round: a count that reads the new round sets its bit after the take, for the
//! next round to take. It costs the summary words (one per 4096 slots and core) plus the
//! slots found, whose counts it sums over every core. A count that read the old round just
//! before it advanced, or whose side another core stamped for the round, may have its
//! counters' store reach the control thread after the round that visits the slot read them (a
//! store followed by a load: no order without a fence, which the hot path does not pay): so a
//! slot found dirty is visited again in the next round too, when the store has long arrived
//! (`rounds_lose_no_count_of_working_cores` runs workers against rounds). A slot's
//! counts are pushed only when they differ from those last pushed (kept with the slot), as the
//! full scan [`Policies::counted_usages`] followed by a comparison with the last pushed
//! counts did (the test `changed_usages_push_what_the_full_scan_pushed` checks it against
//! exactly that).
//!
//! # Buffering (BUFF), notification (NOCP), flushing
//! Downlink packets of a session whose policy says buffer are copied (their IP packet) into a
//! bounded FIFO of the session ([`BufferLimits`]: frames per session and bytes per node;
//! overflow is dropped, [`Drop::BufferFull`]); the engine counts them as buffered, not dropped.
//! With notify, the first packet buffered after the session started buffering queues a
//! notification (its uplink TEID, [`Policies::take_notifications`]): the control plane's cue
//! for a Downlink Data Report. When the policy stops buffering, a session with buffered
//! packets goes to *flushing*: a worker ([`crate::Engine::poll`]) takes its packets in order
//! and runs them through the downlink path (FIB lookup, the new tunnel) ahead of any newer
//! packet of the session: while the session is flushing, newer packets join the tail of its
//! buffer, and it forwards directly again only after the worker has handed the last buffered
//! packet to its output and gone round its loop once (so the outputs were transmitted). This
//! slow path takes one node-wide lock; the forwarding path never does.
//!
//! # End Markers (SNDEM)
//! [`Policies::queue_end_marker`] queues one for the old tunnel of a changed entry; a worker
//! sends it out of `ran` once every worker has gone round its loop since (each has then
//! transmitted every packet it held, some of them perhaps on the old tunnel), or after
//! [`END_MARKER_WAIT_NS`] if a worker does not come round.
//!
//! # The CP function's packets
//! The paths between a UE and the CP function (TS 29.244's CP-function interfaces: open5gs
//! sends the UE's IPv6 Router Solicitations to the SMF and the SMF's Router Advertisements to
//! the UE) go through the node's control plane: a worker queues an uplink Router Solicitation
//! with its uplink TEID ([`Policies::queue_to_cp`]) for the control plane to take
//! ([`Policies::take_to_cp`]) and tunnel to the SMF; the control plane queues the G-PDU it made
//! of an advertisement for the UE's tunnel ([`Policies::queue_access_frame`]), which a worker
//! sends out of `ran`. Each queue holds [`CP_QUEUE`] packets; more are dropped and counted
//! ([`PolicyStats::cp_lost`]).

use crate::counters::Drop;
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::{
    AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Mutex, MutexGuard, OnceLock};

use sb_common::huge::{HugeArray, Zeroable};

/// The most slots a node can have (24 bits of slot in the FIB value, 0 meaning none).
pub const MAX_SLOTS: usize = (1 << 24) - 1;
/// The smallest bucket, in bytes (four 1500-byte packets).
pub const MIN_BURST_BYTES: u64 = 6000;
/// The bucket holds this many milliseconds of the rate (when more than [`MIN_BURST_BYTES`]).
pub const BURST_MS: u64 = 100;
/// How long a queued End Marker waits for a worker that does not come round its loop.
pub const END_MARKER_WAIT_NS: u64 = 50_000_000;
/// Notifications waiting for the control plane at most (more are counted and lost).
pub const MAX_NOTIFICATIONS: usize = 1 << 16;

/// Freed slots that wait before one is given again.
const REUSE_AFTER: usize = 1024;
const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Time units per nanosecond of the buckets.
const UNITS_PER_NS: u64 = 16;

/// Downlink (index of the per-direction arrays).
const DL: usize = 0;
/// Uplink.
const UL: usize = 1;

/// Forwarding as usual.
const MODE_FORWARD: u8 = 0;
/// Buffering downlink packets.
const MODE_BUFFER: u8 = 1;
/// Sending the buffered packets; newer ones join the buffer.
const MODE_FLUSHING: u8 = 2;

/// A session's QoS, usage and buffering rules as the data plane applies them (the FIB value's
/// bytes 16..25, [`crate::lte::Tunnel::policy`]). The default is no policy at all: nothing
/// is checked, counted or buffered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Policy {
    /// Downlink maximum bit rate in kbit/s (0: unlimited).
    pub dl_mbr_kbps: u32,
    /// Uplink maximum bit rate in kbit/s (0: unlimited).
    pub ul_mbr_kbps: u32,
    /// The downlink gate is closed: downlink packets are dropped ([`Drop::Gate`]).
    pub dl_gate_closed: bool,
    /// The uplink gate is closed: uplink packets are dropped ([`Drop::Gate`]).
    pub ul_gate_closed: bool,
    /// Count usage ([`Usage`]).
    pub count: bool,
    /// Buffer downlink packets (FAR BUFF).
    pub buffer: bool,
    /// Notify the control plane of the first buffered packet (FAR NOCP).
    pub notify: bool,
    /// Send an End Marker on the old tunnel when this change moves the tunnel (SNDEM).
    pub end_marker: bool,
    /// Drop downlink packets (FAR DROP).
    pub drop_dl: bool,
    /// The session's downlink AMBR in kbit/s, shared by its flows (0: none), with
    /// [`Policy::session`]; carried rounded up to within 0.8% ([`round_kbps`]).
    pub dl_ambr_kbps: u32,
    /// Likewise uplink.
    pub ul_ambr_kbps: u32,
    /// The session key of the group whose bucket polices the AMBR (the session's lowest
    /// uplink TEID: the same for every flow of the session; 0: no group).
    pub session: u32,
}

/// The rates of the shared form are carried in 12 bits each: below 128 exactly, above as 8
/// significant bits and an exponent.
fn compact_code(kbps: u32) -> u16 {
    if kbps < 128 {
        return kbps as u16;
    }
    let shift = 24 - kbps.leading_zeros(); // significant bits - 8
    let mut m = kbps >> shift;
    let mut e = shift + 1;
    if kbps & ((1u32 << shift) - 1) != 0 {
        m += 1;
        if m == 256 {
            (m, e) = (128, e + 1);
        }
    }
    ((e << 7) | (m - 128)) as u16
}

fn compact_value(code: u16) -> u32 {
    let (e, m) = (u32::from(code >> 7), u64::from(code & 127));
    if e == 0 {
        return m as u32;
    }
    u32::try_from((128 + m) << (e - 1)).unwrap_or(u32::MAX)
}

/// A rate as the shared form carries it: `kbps` rounded up to 8 significant bits (exact below
/// 256; never below `kbps`, at most 1/128 above it).
pub fn round_kbps(kbps: u32) -> u32 {
    compact_value(compact_code(kbps))
}

fn write_pair(a: u32, b: u32, out: &mut [u8]) {
    let (a, b) = (compact_code(a), compact_code(b));
    out[0] = (a >> 4) as u8;
    out[1] = ((a & 15) << 4) as u8 | (b >> 8) as u8;
    out[2] = b as u8;
}

fn read_pair(x: &[u8]) -> (u32, u32) {
    let a = (u16::from(x[0]) << 4) | u16::from(x[1] >> 4);
    let b = (u16::from(x[1] & 15) << 8) | u16::from(x[2]);
    (compact_value(a), compact_value(b))
}

impl Policy {
    /// Flag bit: the downlink gate is closed.
    pub const DL_GATE_CLOSED: u8 = 1 << 0;
    /// Flag bit: the uplink gate is closed.
    pub const UL_GATE_CLOSED: u8 = 1 << 1;
    /// Flag bit: count usage.
    pub const COUNT: u8 = 1 << 2;
    /// Flag bit: buffer downlink.
    pub const BUFFER: u8 = 1 << 3;
    /// Flag bit: notify the first buffered packet.
    pub const NOTIFY: u8 = 1 << 4;
    /// Flag bit: send an End Marker on this change.
    pub const END_MARKER: u8 = 1 << 5;
    /// Flag bit: drop downlink.
    pub const DROP_DL: u8 = 1 << 6;
    /// Flag bit of the encoding alone: the shared form ([`Policy::write`]).
    pub const SHARED: u8 = 1 << 7;

    /// Bytes of the encoding ([`Policy::write`]).
    pub const BYTES: usize = 9;
    /// Bytes of the AMBR's encoding ([`Policy::write_ambr`]).
    pub const AMBR_BYTES: usize = 3;

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        [
            (self.dl_gate_closed, Self::DL_GATE_CLOSED),
            (self.ul_gate_closed, Self::UL_GATE_CLOSED),
            (self.count, Self::COUNT),
            (self.buffer, Self::BUFFER),
            (self.notify, Self::NOTIFY),
            (self.end_marker, Self::END_MARKER),
            (self.drop_dl, Self::DROP_DL),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .fold(0, |f, (_, bit)| f | bit)
    }

    /// The policy of rates and a flags byte (bit 7, the encoding's, is ignored).
    pub fn from_parts(dl_mbr_kbps: u32, ul_mbr_kbps: u32, flags: u8) -> Policy {
        Policy {
            dl_mbr_kbps,
            ul_mbr_kbps,
            dl_gate_closed: flags & Self::DL_GATE_CLOSED != 0,
            ul_gate_closed: flags & Self::UL_GATE_CLOSED != 0,
            count: flags & Self::COUNT != 0,
            buffer: flags & Self::BUFFER != 0,
            notify: flags & Self::NOTIFY != 0,
            end_marker: flags & Self::END_MARKER != 0,
            drop_dl: flags & Self::DROP_DL != 0,
            ..Policy::default()
        }
    }

    /// The policy names a group for its session's AMBR: a session key and an AMBR either
    /// way. Only such a policy is written in the shared form.
    pub fn shared(&self) -> bool {
        self.session != 0 && (self.dl_ambr_kbps != 0 || self.ul_ambr_kbps != 0)
    }

    /// Writes the encoding. Without a group ([`Policy::shared`] false): downlink MBR (u32 big
    /// endian), uplink MBR, flags (the AMBR fields are not written). The shared form: the
    /// flow's downlink and uplink MBRs in 12 bits each ([`round_kbps`]), a zero byte, the
    /// session key (u32 big endian), flags with [`Policy::SHARED`]; the AMBRs go into
    /// [`Policy::write_ambr`]'s bytes.
    pub fn write(&self, out: &mut [u8; Self::BYTES]) {
        if self.shared() {
            write_pair(self.dl_mbr_kbps, self.ul_mbr_kbps, &mut out[..3]);
            out[3] = 0;
            out[4..8].copy_from_slice(&self.session.to_be_bytes());
            out[8] = self.flags() | Self::SHARED;
        } else {
            out[..4].copy_from_slice(&self.dl_mbr_kbps.to_be_bytes());
            out[4..8].copy_from_slice(&self.ul_mbr_kbps.to_be_bytes());
            out[8] = self.flags();
        }
    }

    /// The AMBRs' encoding (downlink and uplink in 12 bits each, [`round_kbps`]); all zero
    /// without a group.
    pub fn write_ambr(&self) -> [u8; Self::AMBR_BYTES] {
        let mut out = [0u8; Self::AMBR_BYTES];
        if self.shared() {
            write_pair(self.dl_ambr_kbps, self.ul_ambr_kbps, &mut out);
        }
        out
    }

    /// Reads the encoding ([`Policy::write`], and `ambr`, [`Policy::write_ambr`]'s bytes, for
    /// the shared form); bytes missing read as 0.
    pub fn read(b: &[u8], ambr: &[u8]) -> Policy {
        let mut x = [0u8; Self::BYTES];
        let n = b.len().min(Self::BYTES);
        x[..n].copy_from_slice(&b[..n]);
        if x[8] & Self::SHARED == 0 {
            return Policy::from_parts(
                u32::from_be_bytes([x[0], x[1], x[2], x[3]]),
                u32::from_be_bytes([x[4], x[5], x[6], x[7]]),
                x[8],
            );
        }
        let mut y = [0u8; Self::AMBR_BYTES];
        let n = ambr.len().min(Self::AMBR_BYTES);
        y[..n].copy_from_slice(&ambr[..n]);
        let (dl, ul) = read_pair(&x[..3]);
        let (dl_ambr, ul_ambr) = read_pair(&y);
        Policy {
            dl_ambr_kbps: dl_ambr,
            ul_ambr_kbps: ul_ambr,
            session: u32::from_be_bytes([x[4], x[5], x[6], x[7]]),
            ..Policy::from_parts(dl, ul, x[8])
        }
    }

    /// The policy as its encoding carries it: in the shared form, the rates rounded up
    /// ([`round_kbps`]); without a group, the AMBR fields cleared.
    pub fn as_carried(&self) -> Policy {
        if self.shared() {
            Policy {
                dl_mbr_kbps: round_kbps(self.dl_mbr_kbps),
                ul_mbr_kbps: round_kbps(self.ul_mbr_kbps),
                dl_ambr_kbps: round_kbps(self.dl_ambr_kbps),
                ul_ambr_kbps: round_kbps(self.ul_ambr_kbps),
                ..*self
            }
        } else {
            Policy {
                dl_ambr_kbps: 0,
                ul_ambr_kbps: 0,
                session: 0,
                ..*self
            }
        }
    }

    /// True for the default: nothing to apply (no slot is needed).
    pub fn is_none(&self) -> bool {
        *self == Policy::default()
    }
}

/// A session's usage: inner IP packet bytes and packets, per direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Usage {
    /// Uplink bytes (inner IP packets).
    pub ul_bytes: u64,
    /// Uplink packets.
    pub ul_packets: u64,
    /// Downlink bytes (inner IP packets).
    pub dl_bytes: u64,
    /// Downlink packets.
    pub dl_packets: u64,
}

impl Usage {
    fn minus(self, b: Usage) -> Usage {
        Usage {
            ul_bytes: self.ul_bytes.wrapping_sub(b.ul_bytes),
            ul_packets: self.ul_packets.wrapping_sub(b.ul_packets),
            dl_bytes: self.dl_bytes.wrapping_sub(b.dl_bytes),
            dl_packets: self.dl_packets.wrapping_sub(b.dl_packets),
        }
    }

    /// Bytes both ways.
    pub fn total_bytes(&self) -> u64 {
        self.ul_bytes + self.dl_bytes
    }
}

/// Bounds of the downlink buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferLimits {
    /// Packets one session holds at most.
    pub frames_per_session: usize,
    /// Bytes (of IP packets) all sessions of the node hold at most.
    pub bytes_per_node: usize,
}

impl Default for BufferLimits {
    /// 64 packets per session, 64 MiB per node.
    fn default() -> BufferLimits {
        BufferLimits {
            frames_per_session: 64,
            bytes_per_node: 64 << 20,
        }
    }
}

/// Why a slot could not be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Every slot is taken.
    #[error("all {0} policy slots are taken")]
    Full(usize),
}

/// An End Marker a worker is to send ([`Policies::queue_end_marker`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndMarker {
    /// The old tunnel's TEID (the peer's).
    pub teid: u32,
    /// The old tunnel's peer (gNB) address.
    pub gnb: Ipv4Addr,
    /// The node whose `ran` address the old tunnel came from (its egress node).
    pub node: u16,
}

struct MarkerJob {
    m: EndMarker,
    /// Each core's loop count when it was queued.
    snap: Box<[u64]>,
    /// The worker clock when a worker first saw it (0: not yet).
    first_seen: u64,
}

/// One direction of a slot: all that a packet of that direction reads and writes, on one cache
/// line (the bucket, the policy's flags and group, and the counts of the core that owns the
/// line's counters). Read by every worker; the bucket written by them, the counts by their
/// owner alone, the rest by the control thread.
#[repr(C, align(64))]
#[derive(Default)]
struct Side {
    /// The GCRA's theoretical arrival time (time units).
    tat: AtomicU64,
    /// Time units per byte, 32.32 fixed point (0: unlimited).
    cost: AtomicU64,
    /// The bucket's depth in time units.
    tau: AtomicU64,
    /// The owner's count of bytes of this direction (see [`Side::owner`]).
    bytes: AtomicU64,
    /// The owner's count of packets.
    packets: AtomicU64,
    /// The slot id of the flow's group (its session's AMBR buckets), 0 for none (the same on
    /// both sides).
    group: AtomicU32,
    /// The session's uplink TEID, for notifications (the downlink side's only).
    ul_teid: AtomicU32,
    /// The worker (core index + 1) whose counts of this direction are kept on this line, 0
    /// while none counted: the first worker to count the direction takes it, for the slot's
    /// life, and counts here; any other counts in its own array.
    owner: AtomicU16,
    /// [`Policy::flags`] (the same on both sides).
    flags: AtomicU8,
    /// `MODE_*` (the downlink side's only).
    mode: AtomicU8,
    /// A notification was queued in this buffering period (the downlink side's only).
    notified: AtomicBool,
    /// The metering round in which a count of this side last marked the slot dirty (the low
    /// 32 bits of [`Policies`]' round; see the module docs).
    round: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Side>() == 64, "a side is one line");

/// One slot's state: a line per direction ([`DL`], [`UL`]), each in its chunk's array of that
/// direction, so that a packet touches one line, and a direction's lines are as dense as
/// they can be.
#[derive(Clone, Copy)]
struct SlotState<'a> {
    side: [&'a Side; 2],
}

impl<'a> SlotState<'a> {
    /// The downlink side, which also holds what is one per slot (mode, notification, TEID).
    #[inline]
    fn dl(self) -> &'a Side {
        self.side[DL]
    }

    /// [`Policy::flags`] on both sides (`Release`: after the rates it goes with).
    fn set_flags(self, flags: u8) {
        for s in self.side {
            s.flags.store(flags, Ordering::Release);
        }
    }

    /// The flow's group on both sides.
    fn set_group(self, group: u32) {
        for s in self.side {
            s.group.store(group, Ordering::Relaxed);
        }
    }
}

/// One slot's counters on one core.
#[derive(Default)]
struct Cell([AtomicU64; 4]);

const UL_BYTES: usize = 0;
const UL_PACKETS: usize = 1;
const DL_BYTES: usize = 2;
const DL_PACKETS: usize = 3;

/// Two slots' counters of one core: a cache line.
#[repr(align(64))]
#[derive(Default)]
struct Line([Cell; 2]);

// SAFETY: every field is an atomic integer or an array of them, valid when all zero (the
// `Default` value).
#[allow(unsafe_code)]
unsafe impl Zeroable for Side {}
// SAFETY: as above: atomic integers only.
#[allow(unsafe_code)]
unsafe impl Zeroable for Line {}

/// 65536 slots: their states (8 MiB: a line per slot and direction, the owners' counts in
/// them) and the counters of the cores that do not own a slot's side (2 MiB per core, mapped
/// the first time that core counts a slot of the chunk that another owns), in arrays of their
/// own, on 2 MB pages (a slot's line is a TLB hit; the engine touches one per packet at
/// random).
struct Chunk {
    /// Per direction: the sides of the chunk's slots.
    sides: [HugeArray<Side>; 2],
    /// Per core: its counters of the chunk's slots whose side another core owns (each core's
    /// array its own mapping of whole cache lines), made when first needed.
    usage: Box<[OnceLock<HugeArray<Line>>]>,
    /// Per core: its dirty bits of the chunk's slots ([`DIRTY_WORDS`] words, a bit per slot),
    /// then their summary ([`SUMMARY_WORDS`] words, a bit per dirty word).
    dirty: Box<[HugeArray<AtomicU64>]>,
}

/// Words of a core's dirty bits of a chunk.
const DIRTY_WORDS: usize = CHUNK / 64;
/// Words of their summary.
const SUMMARY_WORDS: usize = DIRTY_WORDS / 64;

impl Chunk {
    /// Slot `j`'s side of direction `d` (what the packet path touches: one line, one bounds
    /// check).
    #[inline]
    fn side(&self, d: usize, j: usize) -> &Side {
        &self.sides[d][j]
    }

    /// Slot `j`'s two sides.
    #[inline]
    fn slot(&self, j: usize) -> SlotState<'_> {
        SlotState {
            side: [&self.sides[DL][j], &self.sides[UL][j]],
        }
    }

    /// A chunk with every page touched, so that no worker takes a page fault on it.
    fn new(cores: usize) -> Box<Chunk> {
        let c = Chunk {
            sides: [HugeArray::zeroed(CHUNK), HugeArray::zeroed(CHUNK)],
            usage: (0..cores).map(|_| OnceLock::new()).collect(),
            dirty: (0..cores)
                .map(|_| HugeArray::zeroed(DIRTY_WORDS + SUMMARY_WORDS))
                .collect(),
        };
        // One store per 4 KiB: 64 sides.
        for s in c.sides.iter().flat_map(|a| a.iter().step_by(64)) {
            s.mode.store(MODE_FORWARD, Ordering::Relaxed);
        }
        for d in c.dirty.iter() {
            for w in d.iter().step_by(512) {
                w.store(0, Ordering::Relaxed);
            }
        }
        Box::new(c)
    }
}

/// A core's loop count on a line of its own.
#[repr(align(64))]
#[derive(Default)]
struct Padded(AtomicU64);

struct Entry {
    slot: u32,
    /// FIB entries referring to the slot.
    refs: u32,
    /// The counters' sums when the slot was given (usage is counted from there).
    base: Usage,
    /// The counts last handed out by [`Policies::changed_usages`] (from `base`).
    reported: Usage,
    /// The session key of the group the slot holds a reference to.
    group: Option<u32>,
}

/// The metering rounds' state ([`Policies::begin_usage_round`]).
#[derive(Default)]
struct Rounds {
    /// The slot ids of the round in progress, ascending, and how many were visited.
    pending: Vec<u32>,
    done: usize,
    /// The slots found dirty for the round in progress: visited again in the next.
    linger: Vec<u32>,
    /// Slots the next round visits whatever their bits: counting started again, or a TEID
    /// given a slot anew whose last pushed counts were not zero.
    recheck: Vec<u32>,
    /// Slots whose counting stopped: if they still do not count at the next round, their
    /// pushed counts are forgotten (the full scan no longer listed them).
    count_off: Vec<u32>,
    /// The pushed counts of TEIDs released since the last round (a TEID given a slot again
    /// before it compares its counts with them).
    released: HashMap<u32, Usage>,
    /// Slots visited by rounds in all (their cost).
    visited: u64,
}

/// The union of two ascending lists without duplicates, ascending.
fn merge_sorted(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let x = if a[i] < b[j] {
            i += 1;
            a[i - 1]
        } else if b[j] < a[i] {
            j += 1;
            b[j - 1]
        } else {
            i += 1;
            j += 1;
            a[i - 1]
        };
        out.push(x);
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// A session's group: the slot whose buckets police its AMBR.
struct Group {
    slot: u32,
    /// Flow slots referring to it.
    refs: u32,
}

#[derive(Default)]
struct Alloc {
    by_teid: HashMap<u32, Entry>,
    /// Groups by session key.
    groups: HashMap<u32, Group>,
    /// Freed slots, oldest first: one is reused once [`REUSE_AFTER`] more were freed after it
    /// (or no slot was never used), so that a packet still in flight with an old value finds
    /// its slot unused rather than another session's.
    free: VecDeque<u32>,
    /// Slots never given yet start here.
    next: u32,
    rounds: Rounds,
}

#[derive(Default)]
struct Buffers {
    by_slot: HashMap<u32, VecDeque<Vec<u8>>>,
    bytes: usize,
}

/// Counts of the slow paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PolicyStats {
    /// Slots given to sessions.
    pub slots: usize,
    /// Packets held in downlink buffers now.
    pub buffered_frames: usize,
    /// Bytes held in downlink buffers now.
    pub buffered_bytes: usize,
    /// Notifications lost because the queue was full.
    pub notifications_lost: u64,
    /// End Markers waiting for a worker.
    pub end_markers_queued: usize,
    /// Packets between UEs and the CP function dropped because their queue was full.
    pub cp_lost: u64,
}

/// What the forwarding path makes of a packet ([`Policies::downlink`], [`Policies::uplink`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Forward it (counted if the policy counts).
    Pass,
    /// Drop it for this reason.
    Drop(Drop),
    /// Buffer it ([`Policies::buffer`]).
    Buffer,
}

/// The first half of a downlink packet's policy, from the flags of the FIB value it was
/// looked up with (no memory touched): a closed gate, the FAR's drop, buffering (unless the
/// packet is being flushed: `flushing`).
#[inline]
pub fn downlink_flags(flags: u8, flushing: bool) -> Verdict {
    if flags & Policy::DL_GATE_CLOSED != 0 {
        Verdict::Drop(Drop::Gate)
    } else if flags & Policy::DROP_DL != 0 {
        Verdict::Drop(Drop::FarDrop)
    } else if flags & Policy::BUFFER != 0 && !flushing {
        Verdict::Buffer
    } else {
        Verdict::Pass
    }
}

/// The policy slots of a node, shared by its workers and its control thread.
pub struct Policies {
    cores: usize,
    max_slots: usize,
    chunks: Box<[OnceLock<Box<Chunk>>]>,
    loops: Box<[Padded]>,
    /// The metering round (advanced by [`Policies::begin_usage_round`] after it took the
    /// dirty bits), read by every count.
    round: Padded,
    limits: BufferLimits,
    alloc: Mutex<Alloc>,
    buffers: Mutex<Buffers>,
    flush: Mutex<VecDeque<u32>>,
    flush_pending: AtomicUsize,
    notify: Mutex<VecDeque<u32>>,
    notify_lost: AtomicU64,
    markers: Mutex<VecDeque<MarkerJob>>,
    markers_pending: AtomicUsize,
    to_cp: Mutex<VecDeque<(u32, Vec<u8>)>>,
    to_cp_pending: AtomicUsize,
    access_frames: Mutex<VecDeque<Vec<u8>>>,
    access_pending: AtomicUsize,
    cp_lost: AtomicU64,
}

/// The packets each of the CP function's queues holds (see the module docs).
pub const CP_QUEUE: usize = 64;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Time units a byte costs at `kbps` (32.32 fixed point; 0 for unlimited).
fn cost_per_byte(kbps: u32) -> u64 {
    if kbps == 0 {
        return 0;
    }
    // 8 bits / (kbps * 1000 bit/s) = 8e6 / kbps ns = 1.28e8 / kbps units.
    ((8_000_000u128 * u128::from(UNITS_PER_NS)) << 32).div_ceil(u128::from(kbps)) as u64
}

/// The bucket's depth in bytes at `kbps`: [`BURST_MS`] of the rate, at least
/// [`MIN_BURST_BYTES`].
pub fn burst_bytes(kbps: u32) -> u64 {
    (u64::from(kbps) * 1000 / 8 * BURST_MS / 1000).max(MIN_BURST_BYTES)
}

#[inline]
fn price(bytes: u64, cost: u64) -> u64 {
    ((u128::from(bytes) * u128::from(cost)) >> 32) as u64
}

impl Policies {
    /// Slots for up to `max_slots` sessions (at most [`MAX_SLOTS`]) whose packets `cores`
    /// workers forward (each with its own core index, below `cores`), with the default
    /// [`BufferLimits`]. Memory is mapped 65536 slots at a time as sessions come: 8 MiB of
    /// state (128 bytes a slot), plus 2 MiB for each core that counts a side another core
    /// owns (the kernel backs what is touched).
    pub fn new(cores: usize, max_slots: usize) -> Policies {
        Self::with_limits(cores, max_slots, BufferLimits::default())
    }

    /// [`Policies::new`] with buffer bounds.
    pub fn with_limits(cores: usize, max_slots: usize, limits: BufferLimits) -> Policies {
        // A side's owner is a core index + 1 in 16 bits.
        let cores = cores.clamp(1, usize::from(u16::MAX) - 1);
        let max_slots = max_slots.clamp(1, MAX_SLOTS);
        Policies {
            cores,
            max_slots,
            chunks: (0..max_slots.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
            loops: (0..cores).map(|_| Padded::default()).collect(),
            round: Padded::default(),
            limits,
            alloc: Mutex::default(),
            buffers: Mutex::default(),
            flush: Mutex::default(),
            flush_pending: AtomicUsize::new(0),
            notify: Mutex::default(),
            notify_lost: AtomicU64::new(0),
            markers: Mutex::default(),
            markers_pending: AtomicUsize::new(0),
            to_cp: Mutex::default(),
            to_cp_pending: AtomicUsize::new(0),
            access_frames: Mutex::default(),
            access_pending: AtomicUsize::new(0),
            cp_lost: AtomicU64::new(0),
        }
    }

    /// Allocates the maps of the sessions given slots for `sessions` of them now, so that
    /// they do not grow until more come: a map of a million sessions that doubles holds the
    /// control thread for a fraction of a second, and every node of a cluster reaches that
    /// size together. The slots' own memory is mapped as sessions come
    /// ([`Policies::new`]).
    pub fn reserve(&self, sessions: usize) {
        let a = &mut *lock(&self.alloc);
        let n = sessions.min(self.max_slots);
        a.by_teid.reserve(n.saturating_sub(a.by_teid.len()));
        a.groups.reserve(n.saturating_sub(a.groups.len()));
    }

    /// Sessions the slot maps hold before they grow ([`Policies::reserve`]).
    pub fn reserved(&self) -> usize {
        let a = lock(&self.alloc);
        a.by_teid.capacity().min(a.groups.capacity())
    }

    /// The cores (workers) counted separately.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// The slot state of a slot id (index + 1, as in the FIB value); `None` for 0 or one never
    /// given.
    #[inline]
    fn state(&self, id: u32) -> Option<(&Chunk, usize)> {
        let i = (id as usize).checked_sub(1)?;
        let c = self.chunks.get(i >> CHUNK_BITS)?.get()?;
        Some((c, i & (CHUNK - 1)))
    }

    /// Hints the processor to load the line of a slot's downlink (`uplink` false) or uplink
    /// side: all that a packet of that direction touches when its core owns the side's
    /// counters (the engine calls it for a batch before applying the policies). The counters
    /// of a core that does not are not fetched: a side is counted by one core as long as its
    /// packets come to one.
    #[inline]
    pub fn prefetch(&self, id: u32, uplink: bool) {
        if let Some((c, i)) = self.state(id) {
            crate::prefetch::read(c.side(usize::from(uplink), i));
        }
    }

    /// Gives the session of uplink TEID `ul_teid` its slot (a new one, or the one it has: a
    /// second UE entry of a dual-stack session, or a modification) and sets the slot to
    /// `policy`. Returns the slot id (index + 1) to write into the FIB value. Each call is
    /// matched by a [`release`](Self::release) when the entry goes.
    pub fn acquire(&self, ul_teid: u32, policy: &Policy) -> Result<u32, PolicyError> {
        let mut a = lock(&self.alloc);
        let want = policy.shared().then_some(policy.session);
        let old = a.by_teid.get(&ul_teid).map(|e| e.group);
        // Check the room first: a fresh flow slot, a fresh group, or both.
        let need = usize::from(old.is_none())
            + usize::from(want.is_some_and(|k| old != Some(Some(k)) && !a.groups.contains_key(&k)));
        let room = (self.max_slots - a.next as usize) + a.free.len();
        if need > room {
            return Err(PolicyError::Full(self.max_slots));
        }
        let id = match a.by_teid.get_mut(&ul_teid) {
            Some(e) => {
                e.refs += 1;
                e.slot
            }
            None => {
                let id = self.take_slot(&mut a);
                let (c, j) = self.state(id).expect("allocated");
                let s = c.slot(j);
                s.dl().notified.store(false, Ordering::Relaxed);
                s.dl().ul_teid.store(ul_teid, Ordering::Relaxed);
                let base = self.sum(id);
                // A TEID given a slot again before the next round compares its counts with
                // those pushed before (from 0 here), and forgets them if it does not count.
                let reported = a.rounds.released.remove(&ul_teid).unwrap_or_default();
                if reported != Usage::default() {
                    a.rounds.recheck.push(id);
                    a.rounds.count_off.push(id);
                }
                a.by_teid.insert(
                    ul_teid,
                    Entry {
                        slot: id,
                        refs: 1,
                        base,
                        reported,
                        group: None,
                    },
                );
                id
            }
        };
        let fresh = old.is_none();
        let old = old.flatten();
        let gid = match want {
            Some(k) => {
                let gid = if old == Some(k) {
                    a.groups[&k].slot
                } else {
                    let gid = match a.groups.get_mut(&k) {
                        Some(g) => {
                            g.refs += 1;
                            g.slot
                        }
                        None => {
                            let slot = self.take_slot(&mut a);
                            a.groups.insert(k, Group { slot, refs: 1 });
                            slot
                        }
                    };
                    if let Some(o) = old {
                        self.unref_group(&mut a, o);
                    }
                    gid
                };
                if let Some((c, j)) = self.state(gid) {
                    Self::set_rates(c.slot(j), policy.dl_ambr_kbps, policy.ul_ambr_kbps);
                }
                gid
            }
            None => {
                if let Some(o) = old {
                    self.unref_group(&mut a, o);
                }
                0
            }
        };
        a.by_teid.get_mut(&ul_teid).expect("present").group = want;
        if let Some((c, j)) = self.state(id) {
            let s = c.slot(j);
            s.set_group(gid);
            // Counting starts (again: a fresh slot's counts are zero, as pushed) or stops: the
            // metering rounds look at the slot.
            let was = s.dl().flags.load(Ordering::Relaxed) & Policy::COUNT != 0;
            match (was, policy.count) {
                (false, true) if !fresh => a.rounds.recheck.push(id),
                (true, false) => a.rounds.count_off.push(id),
                _ => {}
            }
        }
        drop(a);
        self.configure(id, policy);
        Ok(id)
    }

    /// A slot for a new flow or group (the caller checked there is room): a fresh one, or
    /// the oldest freed one once [`REUSE_AFTER`] more were freed (or none is fresh); its
    /// buckets full, no group.
    fn take_slot(&self, a: &mut Alloc) -> u32 {
        let fresh = (a.next as usize) < self.max_slots;
        let id = if a.free.len() > REUSE_AFTER || !fresh {
            a.free.pop_front().expect("room checked")
        } else {
            a.next += 1;
            a.next
        };
        let i = id as usize - 1;
        self.chunks[i >> CHUNK_BITS].get_or_init(|| Chunk::new(self.cores));
        let (c, j) = self.state(id).expect("allocated");
        let s = c.slot(j);
        // Not the current round: the slot's first count marks it dirty.
        let stale = (self.round.0.load(Ordering::Relaxed) as u32).wrapping_sub(1);
        for side in s.side {
            side.tat.store(0, Ordering::Relaxed);
            side.round.store(stale, Ordering::Relaxed);
        }
        s.set_group(0);
        id
    }

    /// One flow slot less refers to the group of session key `k`; with the last, its slot is
    /// freed.
    fn unref_group(&self, a: &mut Alloc, k: u32) {
        let Some(g) = a.groups.get_mut(&k) else {
            return;
        };
        g.refs -= 1;
        if g.refs > 0 {
            return;
        }
        let slot = g.slot;
        a.groups.remove(&k);
        if let Some((c, j)) = self.state(slot) {
            Self::set_rates(c.slot(j), 0, 0);
        }
        a.free.push_back(slot);
    }

    /// A slot's buckets' rates (their fill is kept).
    fn set_rates(s: SlotState<'_>, dl_kbps: u32, ul_kbps: u32) {
        for (d, kbps) in [(DL, dl_kbps), (UL, ul_kbps)] {
            let cost = cost_per_byte(kbps);
            s.side[d].cost.store(cost, Ordering::Relaxed);
            s.side[d]
                .tau
                .store(price(burst_bytes(kbps), cost), Ordering::Relaxed);
        }
    }

    /// Sets a slot's rates and flags and moves its buffer: buffering starts (a new buffering
    /// period: the next buffered packet notifies), or stops (a non-empty buffer goes to the
    /// workers to flush).
    fn configure(&self, id: u32, p: &Policy) {
        let Some((c, j)) = self.state(id) else {
            return;
        };
        let s = c.slot(j);
        Self::set_rates(s, p.dl_mbr_kbps, p.ul_mbr_kbps);
        let b = lock(&self.buffers);
        let dl = s.dl();
        let mode = dl.mode.load(Ordering::Relaxed);
        if p.buffer {
            if mode != MODE_BUFFER {
                dl.notified.store(false, Ordering::Relaxed);
            }
            dl.mode.store(MODE_BUFFER, Ordering::Release);
        } else if mode == MODE_BUFFER {
            if b.by_slot.get(&id).is_some_and(|q| !q.is_empty()) {
                dl.mode.store(MODE_FLUSHING, Ordering::Release);
                self.queue_flush(id);
            } else {
                dl.mode.store(MODE_FORWARD, Ordering::Release);
            }
        }
        s.set_flags(p.flags());
    }

    fn queue_flush(&self, id: u32) {
        lock(&self.flush).push_back(id);
        self.flush_pending.fetch_add(1, Ordering::Release);
    }

    /// The session's entry went (one [`acquire`](Self::acquire) undone); with its last, the
    /// slot is freed: its buffered packets are dropped, its usage is no longer readable.
    /// Returns the usage at that moment when the slot was freed.
    pub fn release(&self, ul_teid: u32) -> Option<Usage> {
        let mut a = lock(&self.alloc);
        let e = a.by_teid.get_mut(&ul_teid)?;
        e.refs -= 1;
        if e.refs > 0 {
            return None;
        }
        let e = a.by_teid.remove(&ul_teid).expect("present");
        if let Some(k) = e.group {
            self.unref_group(&mut a, k);
        }
        let last = self.sum(e.slot).minus(e.base);
        if e.reported != Usage::default() {
            a.rounds.released.insert(ul_teid, e.reported);
        }
        if let Some((c, j)) = self.state(e.slot) {
            let s = c.slot(j);
            let mut b = lock(&self.buffers);
            if let Some(q) = b.by_slot.remove(&e.slot) {
                b.bytes -= q.iter().map(Vec::len).sum::<usize>();
            }
            s.dl().mode.store(MODE_FORWARD, Ordering::Release);
            s.set_flags(0);
            s.set_group(0);
            for side in &s.side {
                side.cost.store(0, Ordering::Relaxed);
            }
        }
        a.free.push_back(e.slot);
        Some(last)
    }

    /// The counters of slot `id` summed over the cores (from the slot's first use).
    fn sum(&self, id: u32) -> Usage {
        let Some((c, j)) = self.state(id) else {
            return Usage::default();
        };
        let mut u = [0u64; 4];
        // The owners' counts, on the slot's lines.
        let (dl, ul) = (c.side(DL, j), c.side(UL, j));
        u[DL_BYTES] = dl.bytes.load(Ordering::Relaxed);
        u[DL_PACKETS] = dl.packets.load(Ordering::Relaxed);
        u[UL_BYTES] = ul.bytes.load(Ordering::Relaxed);
        u[UL_PACKETS] = ul.packets.load(Ordering::Relaxed);
        // The other cores'.
        for core in c.usage.iter().filter_map(OnceLock::get) {
            for (k, x) in core[j / 2].0[j % 2].0.iter().enumerate() {
                u[k] = u[k].wrapping_add(x.load(Ordering::Relaxed));
            }
        }
        Usage {
            ul_bytes: u[UL_BYTES],
            ul_packets: u[UL_PACKETS],
            dl_bytes: u[DL_BYTES],
            dl_packets: u[DL_PACKETS],
        }
    }

    /// The usage of the session of uplink TEID `ul_teid` since it was given its slot, summed
    /// over the cores; `None` if it has none (no policy, or released).
    pub fn usage(&self, ul_teid: u32) -> Option<Usage> {
        let a = lock(&self.alloc);
        let e = a.by_teid.get(&ul_teid)?;
        Some(self.sum(e.slot).minus(e.base))
    }

    /// The usage of every session with a slot here whose policy counts ([`Policy::count`]), by
    /// uplink TEID, into `out` (cleared first): what the node's control thread hands the
    /// sessions' PFCP endpoints. Holds the allocator's lock (not the workers') while it sums.
    pub fn counted_usages(&self, out: &mut Vec<(u32, Usage)>) {
        out.clear();
        let a = lock(&self.alloc);
        for (&teid, e) in &a.by_teid {
            let Some((c, j)) = self.state(e.slot) else {
                continue;
            };
            if c.side(DL, j).flags.load(Ordering::Relaxed) & Policy::COUNT != 0 {
                out.push((teid, self.sum(e.slot).minus(e.base)));
            }
        }
    }

    /// Starts a metering round: the slots that counted since the last round (their dirty
    /// bits, taken), those found so in the last round, those whose counting started, and those
    /// the previous round left unvisited, to be visited by [`changed_usages`]; slots whose
    /// counting stopped forget their pushed counts. Costs the dirty bits' summary words and
    /// the slots found, not the slots that did not count (see the module docs).
    ///
    /// [`changed_usages`]: Self::changed_usages
    pub fn begin_usage_round(&self) {
        let dirty = self.take_dirty();
        // After the take: a count that reads the new round sets its bit after the take, so
        // the next round takes it (see the module docs).
        self.round.0.fetch_add(1, Ordering::Release);
        let mut a = lock(&self.alloc);
        let Alloc {
            by_teid, rounds: r, ..
        } = &mut *a;
        for id in std::mem::take(&mut r.count_off) {
            let Some((c, j)) = self.state(id) else {
                continue;
            };
            let s = c.side(DL, j);
            if s.flags.load(Ordering::Relaxed) & Policy::COUNT != 0 {
                continue;
            }
            if let Some(e) = by_teid.get_mut(&s.ul_teid.load(Ordering::Relaxed)) {
                if e.slot == id {
                    e.reported = Usage::default();
                }
            }
        }
        r.released.clear();
        let mut recheck = std::mem::take(&mut r.recheck);
        recheck.sort_unstable();
        recheck.dedup();
        let linger = std::mem::replace(&mut r.linger, dirty);
        let left = &r.pending[r.done..];
        let mut next = merge_sorted(&merge_sorted(&r.linger, &linger), left);
        if !recheck.is_empty() {
            next = merge_sorted(&next, &recheck);
        }
        r.pending = next;
        r.done = 0;
    }

    /// Takes every core's dirty bits: the slot ids that counted, ascending, each once.
    fn take_dirty(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for (ci, chunk) in self.chunks.iter().enumerate() {
            let Some(c) = chunk.get() else {
                continue;
            };
            for si in 0..SUMMARY_WORDS {
                let mut summary = 0;
                for d in c.dirty.iter() {
                    let w = &d[DIRTY_WORDS + si];
                    if w.load(Ordering::Relaxed) != 0 {
                        summary |= w.swap(0, Ordering::AcqRel);
                    }
                }
                while summary != 0 {
                    let wi = si * 64 + summary.trailing_zeros() as usize;
                    summary &= summary - 1;
                    let mut bits = 0;
                    for d in c.dirty.iter() {
                        if d[wi].load(Ordering::Relaxed) != 0 {
                            bits |= d[wi].swap(0, Ordering::AcqRel);
                        }
                    }
                    while bits != 0 {
                        let j = wi * 64 + bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        out.push((ci * CHUNK + j + 1) as u32);
                    }
                }
            }
        }
        out
    }

    /// The next up to `max` slots of the round [`begin_usage_round`] started: the sessions
    /// among them that count ([`Policy::count`]) and whose usage changed since it was last
    /// handed out here, by uplink TEID, into `out` (cleared first). Returns the slots the round
    /// has left (0: done; a new round carries them over). What a series of rounds hands out
    /// is what [`counted_usages`] each round compared with the counts it last handed out
    /// would (the counts of every counting session whose counts changed).
    ///
    /// [`begin_usage_round`]: Self::begin_usage_round
    /// [`counted_usages`]: Self::counted_usages
    pub fn changed_usages(&self, out: &mut Vec<(u32, Usage)>, max: usize) -> usize {
        out.clear();
        let mut a = lock(&self.alloc);
        let Alloc {
            by_teid, rounds: r, ..
        } = &mut *a;
        let end = r.pending.len().min(r.done.saturating_add(max));
        for &id in &r.pending[r.done..end] {
            let Some((c, j)) = self.state(id) else {
                continue;
            };
            let s = c.side(DL, j);
            if s.flags.load(Ordering::Relaxed) & Policy::COUNT == 0 {
                continue;
            }
            let teid = s.ul_teid.load(Ordering::Relaxed);
            let Some(e) = by_teid.get_mut(&teid) else {
                continue;
            };
            if e.slot != id {
                continue;
            }
            let u = self.sum(id).minus(e.base);
            if u != e.reported {
                e.reported = u;
                out.push((teid, u));
            }
        }
        r.visited += (end - r.done) as u64;
        r.done = end;
        if r.done == r.pending.len() {
            r.pending.clear();
            r.done = 0;
        }
        r.pending.len() - r.done
    }

    /// Slots the metering rounds visited in all ([`changed_usages`]).
    ///
    /// [`changed_usages`]: Self::changed_usages
    pub fn usage_visits(&self) -> u64 {
        lock(&self.alloc).rounds.visited
    }

    /// The slot id (index + 1) of the session of uplink TEID `ul_teid`.
    pub fn slot_of(&self, ul_teid: u32) -> Option<u32> {
        lock(&self.alloc).by_teid.get(&ul_teid).map(|e| e.slot)
    }

    /// Packets the session of uplink TEID `ul_teid` holds in its downlink buffer.
    pub fn buffered(&self, ul_teid: u32) -> usize {
        let Some(id) = self.slot_of(ul_teid) else {
            return 0;
        };
        lock(&self.buffers)
            .by_slot
            .get(&id)
            .map_or(0, VecDeque::len)
    }

    /// The uplink TEIDs of the sessions whose first buffered packet (with notify) arrived
    /// since the last call, in order: a Downlink Data Report each.
    pub fn take_notifications(&self) -> Vec<u32> {
        lock(&self.notify).drain(..).collect()
    }

    /// Queues an End Marker for the old tunnel `teid` to `gnb`, sent from node `node`'s `ran`
    /// address by a worker once every worker has transmitted what it held (see the module
    /// docs); one already queued for the same tunnel is not queued twice.
    pub fn queue_end_marker(&self, teid: u32, gnb: Ipv4Addr, node: u16) {
        let m = EndMarker { teid, gnb, node };
        let mut q = lock(&self.markers);
        if q.iter().any(|j| j.m == m) {
            // The session's other UE entry moved the same tunnel.
            return;
        }
        let snap = self
            .loops
            .iter()
            .map(|l| l.0.load(Ordering::Acquire))
            .collect();
        q.push_back(MarkerJob {
            m,
            snap,
            first_seen: 0,
        });
        self.markers_pending.fetch_add(1, Ordering::Release);
    }

    /// Queues a frame for a worker to send out of `ran` as it is (MACs zero: the engine sets
    /// them): a G-PDU from the CP function to a UE. False (dropped, counted) when
    /// [`CP_QUEUE`] frames wait already.
    pub fn queue_access_frame(&self, frame: Vec<u8>) -> bool {
        let mut q = lock(&self.access_frames);
        if q.len() >= CP_QUEUE {
            self.cp_lost.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        q.push_back(frame);
        self.access_pending.fetch_add(1, Ordering::Release);
        true
    }

    /// The oldest uplink packet for the CP function a worker queued ([`queue_to_cp`]): its
    /// uplink TEID and its inner IP packet.
    ///
    /// [`queue_to_cp`]: Self::queue_to_cp
    pub fn take_to_cp(&self) -> Option<(u32, Vec<u8>)> {
        if self.to_cp_pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let p = lock(&self.to_cp).pop_front()?;
        self.to_cp_pending.fetch_sub(1, Ordering::Release);
        Some(p)
    }

    /// The slow paths' counts.
    pub fn stats(&self) -> PolicyStats {
        let slots = lock(&self.alloc).by_teid.len();
        let (frames, bytes) = {
            let b = lock(&self.buffers);
            (b.by_slot.values().map(VecDeque::len).sum(), b.bytes)
        };
        PolicyStats {
            slots,
            buffered_frames: frames,
            buffered_bytes: bytes,
            notifications_lost: self.notify_lost.load(Ordering::Relaxed),
            end_markers_queued: self.markers_pending.load(Ordering::Relaxed),
            cp_lost: self.cp_lost.load(Ordering::Relaxed),
        }
    }

    // ---- The workers' side ----

    /// Worker `core` is between batches: it holds no packet (called once per loop).
    #[inline]
    pub fn quiescent(&self, core: usize) {
        if let Some(l) = self.loops.get(core) {
            l.0.store(l.0.load(Ordering::Relaxed) + 1, Ordering::Release);
        }
    }

    /// Queues the inner IP packet of an uplink G-PDU with TEID `ul_teid` for the control
    /// plane (a Router Solicitation for the CP function). False (dropped, counted) when
    /// [`CP_QUEUE`] packets wait already.
    pub fn queue_to_cp(&self, ul_teid: u32, packet: &[u8]) -> bool {
        let mut q = lock(&self.to_cp);
        if q.len() >= CP_QUEUE {
            self.cp_lost.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        q.push_back((ul_teid, packet.to_vec()));
        self.to_cp_pending.fetch_add(1, Ordering::Release);
        true
    }

    /// A frame the control plane queued to go out of `ran` ([`queue_access_frame`]).
    ///
    /// [`queue_access_frame`]: Self::queue_access_frame
    pub fn take_access_frame(&self) -> Option<Vec<u8>> {
        if self.access_pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let f = lock(&self.access_frames).pop_front()?;
        self.access_pending.fetch_sub(1, Ordering::Release);
        Some(f)
    }

    /// A queued End Marker that may go now (worker clock `now_ns`).
    pub fn take_end_marker(&self, now_ns: u64) -> Option<EndMarker> {
        if self.markers_pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = lock(&self.markers);
        let job = q.front_mut()?;
        let all_came_round = job
            .snap
            .iter()
            .zip(self.loops.iter())
            .all(|(s, l)| l.0.load(Ordering::Acquire) > *s);
        if job.first_seen == 0 {
            job.first_seen = now_ns.max(1);
        }
        let waited = now_ns.saturating_sub(job.first_seen) >= END_MARKER_WAIT_NS;
        if !(all_came_round || waited) {
            return None;
        }
        let m = q.pop_front().map(|j| j.m);
        self.markers_pending.fetch_sub(1, Ordering::Release);
        m
    }

    /// A session to flush and up to `max` of its buffered packets, oldest first, moved into
    /// `out`; the caller runs them through the downlink path and calls
    /// [`finish_flush`](Self::finish_flush) with the slot on its next loop.
    pub fn take_flush(&self, max: usize, out: &mut Vec<Vec<u8>>) -> Option<u32> {
        if self.flush_pending.load(Ordering::Acquire) == 0 {
            return None;
        }
        let id = lock(&self.flush).pop_front()?;
        self.flush_pending.fetch_sub(1, Ordering::Release);
        let (c, j) = self.state(id)?;
        let mut b = lock(&self.buffers);
        if c.side(DL, j).mode.load(Ordering::Relaxed) != MODE_FLUSHING {
            // Buffering again, or freed.
            return None;
        }
        let Some(q) = b.by_slot.get_mut(&id) else {
            c.side(DL, j).mode.store(MODE_FORWARD, Ordering::Release);
            return None;
        };
        let n = q.len().min(max);
        let mut freed = 0;
        for p in q.drain(..n) {
            freed += p.len();
            out.push(p);
        }
        b.bytes -= freed;
        Some(id)
    }

    /// The packets [`take_flush`](Self::take_flush) gave were transmitted: the session goes
    /// back to forwarding if its buffer is empty, else it waits for the next round.
    pub fn finish_flush(&self, id: u32) {
        let Some((c, j)) = self.state(id) else {
            return;
        };
        let s = c.side(DL, j);
        let b = lock(&self.buffers);
        if s.mode.load(Ordering::Relaxed) != MODE_FLUSHING {
            return;
        }
        if b.by_slot.get(&id).is_some_and(|q| !q.is_empty()) {
            drop(b);
            self.queue_flush(id);
        } else {
            s.mode.store(MODE_FORWARD, Ordering::Release);
        }
    }

    /// Does the GCRA bucket of side `s` let `bytes` pass at `now` (time units)?
    #[inline]
    fn conform(s: &Side, bytes: u64, now: u64) -> bool {
        let cost = s.cost.load(Ordering::Relaxed);
        if cost == 0 {
            return true;
        }
        let c = price(bytes, cost);
        let limit = now.saturating_add(s.tau.load(Ordering::Relaxed));
        let mut tat = s.tat.load(Ordering::Relaxed);
        loop {
            let end = tat.max(now).saturating_add(c);
            if end > limit {
                return false;
            }
            match s
                .tat
                .compare_exchange_weak(tat, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }

    /// Gives back the tokens [`conform`](Self::conform) took for a packet that another
    /// bucket refused.
    #[inline]
    fn refund(s: &Side, bytes: u64) {
        let cost = s.cost.load(Ordering::Relaxed);
        if cost != 0 {
            s.tat.fetch_sub(price(bytes, cost), Ordering::Relaxed);
        }
    }

    /// The flow's bucket of direction `d`, then its group's (the session's AMBR): true if
    /// both let the packet pass (the flow's tokens are given back when the group refuses).
    #[inline]
    fn police(&self, s: &Side, d: usize, bytes: u64, now: u64) -> bool {
        if !Self::conform(s, bytes, now) {
            return false;
        }
        let g = s.group.load(Ordering::Relaxed);
        if g == 0 {
            return true;
        }
        let Some((gc, gj)) = self.state(g) else {
            return true;
        };
        if Self::conform(gc.side(d, gj), bytes, now) {
            return true;
        }
        Self::refund(s, bytes);
        false
    }

    /// Counts a packet of `bytes` of direction `d` of the chunk's slot `j` on worker `core`:
    /// on the side's line if the core owns it (or is the first to count it: it takes it),
    /// else in the core's own array.
    #[inline]
    fn count(&self, c: &Chunk, core: usize, j: usize, d: usize, bytes: u64) {
        let Some(own) = c.usage.get(core) else {
            return;
        };
        let side = c.side(d, j);
        let me = core as u16 + 1;
        let owner = side.owner.load(Ordering::Relaxed);
        let (b, p) = if owner == me
            || owner == 0
                && side
                    .owner
                    .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
        {
            (&side.bytes, &side.packets)
        } else {
            let cell = &own.get_or_init(|| HugeArray::zeroed(CHUNK / 2))[j / 2].0[j % 2].0;
            if d == DL {
                (&cell[DL_BYTES], &cell[DL_PACKETS])
            } else {
                (&cell[UL_BYTES], &cell[UL_PACKETS])
            }
        };
        // One writer per counter: a load and a store, no read-modify-write instruction.
        b.store(
            b.load(Ordering::Relaxed).wrapping_add(bytes),
            Ordering::Relaxed,
        );
        p.store(p.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        // The slot's dirty bit (this core's word): set by the side's first count of a round
        // (its stamp, on the line the policing read, is not the round's), released after the
        // counters so that the round that takes it reads them.
        let r = self.round.0.load(Ordering::Acquire) as u32;
        if side.round.load(Ordering::Relaxed) != r {
            side.round.store(r, Ordering::Relaxed);
            if let Some(d) = c.dirty.get(core) {
                d[j / 64].fetch_or(1u64 << (j % 64), Ordering::AcqRel);
                d[DIRTY_WORDS + j / 4096].fetch_or(1u64 << ((j / 64) % 64), Ordering::AcqRel);
            }
        }
    }

    /// A downlink packet of `bytes` (its IP packet) of slot `id` on worker `core` at
    /// `now_ns`, looked up with a FIB value whose policy flags are `value_flags`:
    /// [`downlink_flags`] on the value, then [`downlink_admit`](Self::downlink_admit) on the
    /// slot (the engine runs the first before its own checks and the second after them).
    pub fn downlink(
        &self,
        core: usize,
        id: u32,
        bytes: usize,
        now_ns: u64,
        value_flags: u8,
        flushing: bool,
    ) -> Verdict {
        match downlink_flags(value_flags, flushing) {
            Verdict::Pass => self.downlink_admit(core, id, bytes, now_ns, flushing),
            v => v,
        }
    }

    /// The slot's half of a downlink packet's policy (the engine calls it after the packet
    /// passed every other check, so that the slot's lines, prefetched, have arrived): the
    /// slot's gate and FAR drop (a value read just before they changed), buffering while the
    /// slot buffers or flushes (unless this packet is being flushed: `flushing`), the MBR,
    /// the count.
    #[inline]
    pub fn downlink_admit(
        &self,
        core: usize,
        id: u32,
        bytes: usize,
        now_ns: u64,
        flushing: bool,
    ) -> Verdict {
        let Some((c, j)) = self.state(id) else {
            return Verdict::Pass;
        };
        let s = c.side(DL, j);
        let flags = s.flags.load(Ordering::Acquire);
        if flags & (Policy::DL_GATE_CLOSED | Policy::DROP_DL | Policy::BUFFER) != 0
            || s.mode.load(Ordering::Acquire) != MODE_FORWARD
        {
            match downlink_flags(flags, flushing) {
                Verdict::Pass if flushing => {}
                Verdict::Pass => return Verdict::Buffer,
                v => return v,
            }
        }
        let bytes = bytes as u64;
        if !self.police(s, DL, bytes, now_ns.saturating_mul(UNITS_PER_NS)) {
            return Verdict::Drop(Drop::Mbr);
        }
        if flags & Policy::COUNT != 0 {
            self.count(c, core, j, DL, bytes);
        }
        Verdict::Pass
    }

    /// An uplink packet of `bytes` (the inner IP packet) of slot `id` on worker `core` at
    /// `now_ns`: gate, MBR, count.
    #[inline]
    pub fn uplink(&self, core: usize, id: u32, bytes: usize, now_ns: u64) -> Verdict {
        let Some((c, j)) = self.state(id) else {
            return Verdict::Pass;
        };
        let s = c.side(UL, j);
        let flags = s.flags.load(Ordering::Acquire);
        if flags & Policy::UL_GATE_CLOSED != 0 {
            return Verdict::Drop(Drop::Gate);
        }
        let bytes = bytes as u64;
        if !self.police(s, UL, bytes, now_ns.saturating_mul(UNITS_PER_NS)) {
            return Verdict::Drop(Drop::Mbr);
        }
        if flags & Policy::COUNT != 0 {
            self.count(c, core, j, UL, bytes);
        }
        Verdict::Pass
    }

    /// Buffers the IP packet `packet` of slot `id` (after [`Verdict::Buffer`]): at the tail of
    /// the session's FIFO, or [`Drop::BufferFull`] past the bounds. The first packet of a
    /// buffering period of a session that notifies queues its notification.
    pub fn buffer(&self, id: u32, packet: &[u8]) -> Result<(), Drop> {
        let Some((c, j)) = self.state(id) else {
            return Err(Drop::BufferFull);
        };
        let s = c.side(DL, j);
        let mut b = lock(&self.buffers);
        let len = b.by_slot.get(&id).map_or(0, VecDeque::len);
        if len >= self.limits.frames_per_session
            || b.bytes + packet.len() > self.limits.bytes_per_node
        {
            return Err(Drop::BufferFull);
        }
        match s.mode.load(Ordering::Relaxed) {
            MODE_BUFFER => {
                if s.flags.load(Ordering::Relaxed) & Policy::NOTIFY != 0
                    && !s.notified.swap(true, Ordering::Relaxed)
                {
                    let mut n = lock(&self.notify);
                    if n.len() < MAX_NOTIFICATIONS {
                        n.push_back(s.ul_teid.load(Ordering::Relaxed));
                    } else {
                        self.notify_lost.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            MODE_FLUSHING => {}
            _ => {
                // Looked up with a value from before the buffering stopped, after the flush:
                // it goes out through a flush of its own, behind nothing newer.
                s.mode.store(MODE_FLUSHING, Ordering::Release);
                self.queue_flush(id);
            }
        }
        b.by_slot.entry(id).or_default().push_back(packet.to_vec());
        b.bytes += packet.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn counting(dl: u32, ul: u32) -> Policy {
        Policy {
            dl_mbr_kbps: dl,
            ul_mbr_kbps: ul,
            count: true,
            ..Policy::default()
        }
    }

    proptest! {
        #[test]
        fn policy_encoding_round_trips(dl in any::<u32>(), ul in any::<u32>(), flags in 0u8..0x80) {
            let p = Policy::from_parts(dl, ul, flags);
            prop_assert_eq!(p.flags(), flags);
            let mut b = [0u8; Policy::BYTES];
            p.write(&mut b);
            prop_assert_eq!(Policy::read(&b, &[]), p);
            prop_assert_eq!(p.is_none(), dl == 0 && ul == 0 && flags == 0);
        }

        /// The shared form carries the flow's rates and the AMBRs rounded up by less than
        /// 1/128, the session key and the flags exactly.
        #[test]
        fn the_shared_form_round_trips(
            dl in any::<u32>(), ul in any::<u32>(), flags in 0u8..0x80,
            dl_ambr in any::<u32>(), ul_ambr in 1u32.., session in 1u32..,
        ) {
            let p = Policy {
                dl_ambr_kbps: dl_ambr,
                ul_ambr_kbps: ul_ambr,
                session,
                ..Policy::from_parts(dl, ul, flags)
            };
            let mut b = [0u8; Policy::BYTES];
            p.write(&mut b);
            prop_assert_eq!(b[8], flags | Policy::SHARED);
            let got = Policy::read(&b, &p.write_ambr());
            prop_assert_eq!(got, p.as_carried());
            for (x, y) in [(dl, got.dl_mbr_kbps), (ul, got.ul_mbr_kbps),
                           (dl_ambr, got.dl_ambr_kbps), (ul_ambr, got.ul_ambr_kbps)] {
                prop_assert!(y >= x, "{x} -> {y}");
                prop_assert!(u64::from(y - x) * 128 <= u64::from(x), "{x} -> {y}");
                prop_assert!(x >= 256 || y == x, "{x} -> {y}");
            }
        }

        /// The shared bucket against a model token bucket in exact rational arithmetic, over
        /// simulated time: the same packets pass, but where the fixed-point pricing rounds a
        /// boundary (at most a few per run).
        #[test]
        fn the_bucket_is_a_token_bucket(
            kbps in 64u32..10_000_000,
            gaps in proptest::collection::vec((0u64..2_000_000, 40usize..1500), 1..400),
        ) {
            let p = Policies::new(1, 4);
            let id = p.acquire(7, &counting(kbps, 0)).unwrap();
            // Model: tokens in bytes * 1e9 * 8 (bit-nanoseconds), exact.
            let rate = u128::from(kbps) * 1000; // bit/s
            let depth = u128::from(burst_bytes(kbps)) * 8 * 1_000_000_000;
            let (mut tokens, mut last, mut now) = (depth, 0u64, 0u64);
            let mut disagree = 0;
            let (mut passed, mut model_passed) = (0u64, 0u64);
            for (gap, bytes) in gaps {
                now += gap;
                tokens = (tokens + u128::from(now - last) * rate).min(depth);
                last = now;
                let need = bytes as u128 * 8 * 1_000_000_000;
                let model = tokens >= need;
                if model {
                    tokens -= need;
                    model_passed += bytes as u64;
                }
                let got = p.downlink(0, id, bytes, now, 0, false) == Verdict::Pass;
                if got {
                    passed += bytes as u64;
                }
                if got != model {
                    disagree += 1;
                    // Re-align the model on the bucket (a rounding at the boundary).
                    if got {
                        tokens = tokens.saturating_sub(need);
                    } else {
                        tokens += need.min(depth - tokens.min(depth));
                        tokens = tokens.min(depth);
                    }
                }
            }
            prop_assert!(disagree <= 2, "{disagree} disagreements");
            // Within one packet of the model's bytes.
            prop_assert!(passed.abs_diff(model_passed) <= 1500 * disagree as u64);
        }

        /// Counters written by several cores sum to an oracle, per session.
        #[test]
        fn usage_sums_the_cores(
            ops in proptest::collection::vec((0usize..4, 0u32..6, any::<bool>(), 20usize..1500), 0..300),
        ) {
            let p = Policies::new(4, 64);
            let mut ids = Vec::new();
            for teid in 0..6u32 {
                ids.push(p.acquire(100 + teid, &counting(0, 0)).unwrap());
            }
            let mut oracle = [Usage::default(); 6];
            for (core, s, down, bytes) in ops {
                let id = ids[s as usize];
                let u = &mut oracle[s as usize];
                if down {
                    prop_assert_eq!(p.downlink(core, id, bytes, 0, 0, false), Verdict::Pass);
                    u.dl_bytes += bytes as u64;
                    u.dl_packets += 1;
                } else {
                    prop_assert_eq!(p.uplink(core, id, bytes, 0), Verdict::Pass);
                    u.ul_bytes += bytes as u64;
                    u.ul_packets += 1;
                }
            }
            for (teid, u) in oracle.iter().enumerate() {
                prop_assert_eq!(p.usage(100 + teid as u32), Some(*u));
            }
        }
    }

    /// Two flows of one session (two slots, one session key), each offered 8 Mbit/s under
    /// its 10 Mbit/s MBR, share a 10 Mbit/s AMBR: together they get the AMBR (plus the
    /// buckets' bursts), each at most its MBR; a third session's flow is not held by it.
    #[test]
    fn a_sessions_flows_share_its_ambr() {
        let p = Policies::new(2, 8);
        let flow = |s: u32| Policy {
            dl_mbr_kbps: 10_000,
            ul_mbr_kbps: 10_000,
            dl_ambr_kbps: 10_000,
            ul_ambr_kbps: 10_000,
            session: s,
            count: true,
            ..Policy::default()
        };
        let a = p.acquire(100, &flow(100)).unwrap();
        let b = p.acquire(101, &flow(100)).unwrap();
        let other = p.acquire(200, &flow(200)).unwrap();
        assert_eq!(p.stats().slots, 3, "groups are not flows");
        let gap = 1000 * 8 * 1_000_000_000 / 8_000_000; // 1000-byte packets at 8 Mbit/s
        let (mut t, mut passed) = (0u64, [0u64; 3]);
        while t < 5_000_000_000 {
            for (k, id) in [a, b, other].into_iter().enumerate() {
                if p.downlink(k % 2, id, 1000, t, 0, false) == Verdict::Pass {
                    passed[k] += 1000;
                }
                // Counted in the usage (below).
                p.uplink(k % 2, id, 1000, t);
            }
            t += gap;
        }
        let mbps = |b: u64| b as f64 * 8.0 / 5.0 / 1e6;
        let together = mbps(passed[0] + passed[1]);
        // The AMBR plus its burst (100 ms) over 5 s: 10.2, and a flow's burst.
        assert!((9.9..=10.45).contains(&together), "{together} Mbit/s");
        assert!(
            mbps(passed[2]) > 7.9,
            "the other session: {}",
            mbps(passed[2])
        );
        // The uplink was held to the AMBR too.
        let up = p.usage(100).unwrap().ul_bytes + p.usage(101).unwrap().ul_bytes;
        assert!((9.9..=10.45).contains(&mbps(up)), "{} Mbit/s up", mbps(up));
        // A dropped packet took no flow tokens: a flow alone under its MBR passes all of it
        // once the other flow stops (the group's bucket refills at the AMBR).
        let (mut alone, start) = (0u64, t);
        while t < start + 2_000_000_000 {
            if p.downlink(0, a, 1000, t, 0, false) == Verdict::Pass {
                alone += 1000;
            }
            t += gap;
        }
        assert!(
            mbps(alone) * 5.0 / 2.0 >= 7.99,
            "{} Mbit/s alone",
            mbps(alone) * 2.5
        );
        // Without the group (one flow left, no AMBR), and freed with its last flow.
        let plain = Policy {
            session: 0,
            dl_ambr_kbps: 0,
            ul_ambr_kbps: 0,
            ..flow(100)
        };
        assert_eq!(p.acquire(101, &plain).unwrap(), b);
        p.release(101);
        p.release(101);
        assert_eq!(p.alloc.lock().unwrap().groups.len(), 2);
        p.release(100);
        assert_eq!(p.alloc.lock().unwrap().groups.len(), 1);
        // Room: 8 slots; the other session's flow and group held, the rest freed.
        for teid in 300..306 {
            p.acquire(teid, &counting(0, 0)).unwrap();
        }
        assert_eq!(
            p.acquire(400, &counting(0, 0)),
            Err(PolicyError::Full(8)),
            "{:?}",
            p.stats()
        );
    }

    /// A flow that fills its own (smaller) MBR is held by it, not by the session's AMBR; a
    /// packet its flow bucket refuses takes nothing from the group.
    #[test]
    fn a_flow_mbr_below_the_ambr_holds_its_flow() {
        let p = Policies::new(1, 4);
        let pol = |mbr| Policy {
            dl_mbr_kbps: mbr,
            dl_ambr_kbps: 10_000,
            session: 7,
            ..Policy::default()
        };
        let a = p.acquire(7, &pol(2_000)).unwrap();
        let b = p.acquire(8, &pol(0)).unwrap();
        let gap = 1000 * 8 * 1_000_000_000 / 20_000_000; // 20 Mbit/s each
        let (mut t, mut passed) = (0u64, [0u64; 2]);
        while t < 5_000_000_000 {
            for (k, id) in [a, b].into_iter().enumerate() {
                if p.downlink(0, id, 1000, t, 0, false) == Verdict::Pass {
                    passed[k] += 1000;
                }
            }
            t += gap;
        }
        let mbps = |b: u64| b as f64 * 8.0 / 5.0 / 1e6;
        assert!(
            (1.9..=2.1).contains(&mbps(passed[0])),
            "{}",
            mbps(passed[0])
        );
        assert!(
            (9.9..=10.3).contains(&mbps(passed[0] + passed[1])),
            "{}",
            mbps(passed[0] + passed[1])
        );
    }

    #[test]
    fn the_bucket_delivers_the_rate_over_time() {
        // 10 Mbit/s offered 50 Mbit/s of 1000-byte packets for 5 simulated seconds.
        let p = Policies::new(1, 1);
        let id = p.acquire(1, &counting(10_000, 0)).unwrap();
        let (mut passed, mut t) = (0u64, 0u64);
        let gap = 1000 * 8 * 1_000_000_000 / 50_000_000; // ns between packets
        while t < 5_000_000_000 {
            if p.downlink(0, id, 1000, t, 0, false) == Verdict::Pass {
                passed += 1000;
            }
            t += gap;
        }
        let mbps = passed as f64 * 8.0 / 5.0 / 1e6;
        // The rate plus one burst (100 ms) over 5 s: 10.2.
        assert!((9.9..=10.25).contains(&mbps), "{mbps} Mbit/s");
        assert_eq!(p.usage(1).unwrap().dl_bytes, passed);
        // Unlimited: everything passes.
        let q = Policies::new(1, 1);
        let id = q.acquire(1, &counting(0, 0)).unwrap();
        assert!((0..10_000).all(|i| q.uplink(0, id, 1500, i) == Verdict::Pass));
    }

    #[test]
    fn gates_and_far_drop() {
        let p = Policies::new(1, 4);
        let closed = Policy {
            dl_gate_closed: true,
            ul_gate_closed: true,
            count: true,
            ..Policy::default()
        };
        let id = p.acquire(5, &closed).unwrap();
        assert_eq!(
            p.downlink(0, id, 100, 0, 0, false),
            Verdict::Drop(Drop::Gate)
        );
        assert_eq!(p.uplink(0, id, 100, 0), Verdict::Drop(Drop::Gate));
        assert_eq!(
            p.usage(5),
            Some(Usage::default()),
            "a dropped packet is not counted"
        );
        let id2 = p
            .acquire(
                5,
                &Policy {
                    drop_dl: true,
                    ..Policy::default()
                },
            )
            .unwrap();
        assert_eq!(id, id2, "the session keeps its slot");
        assert_eq!(
            p.downlink(0, id, 100, 0, 0, false),
            Verdict::Drop(Drop::FarDrop)
        );
        assert_eq!(p.uplink(0, id, 100, 0), Verdict::Pass);
    }

    #[test]
    fn slots_are_reused_oldest_first_and_counters_start_at_zero() {
        let p = Policies::new(2, 3);
        let a = p.acquire(1, &counting(0, 0)).unwrap();
        let b = p.acquire(2, &counting(0, 0)).unwrap();
        assert_ne!(a, b);
        // Dual stack: a second entry of session 1 shares its slot.
        assert_eq!(p.acquire(1, &counting(0, 0)).unwrap(), a);
        p.downlink(1, a, 100, 0, 0, false);
        assert_eq!(p.release(1), None, "one entry left");
        assert_eq!(p.usage(1).unwrap().dl_bytes, 100);
        let last = p.release(1).unwrap();
        assert_eq!(last.dl_bytes, 100);
        assert_eq!(p.usage(1), None);
        let c = p.acquire(3, &counting(0, 0)).unwrap();
        assert_ne!(c, a, "a never-used slot before a freed one");
        assert!(matches!(p.acquire(4, &counting(0, 0)), Ok(x) if x == a));
        assert_eq!(
            p.usage(4),
            Some(Usage::default()),
            "a reused slot counts from 0"
        );
        assert_eq!(p.acquire(5, &counting(0, 0)), Err(PolicyError::Full(3)));
        assert_eq!(p.stats().slots, 3);
    }

    /// A side's counts are kept on the slot's line by the first core that counts it and in
    /// its own array by any other core; the sum is exact either way, a core that owns every
    /// side it counts maps no array, and a core index out of range counts nothing.
    #[test]
    fn the_first_core_counts_on_the_slots_line_the_others_in_their_arrays() {
        let p = Policies::new(4, 2);
        let a = p.acquire(1, &counting(0, 0)).unwrap();
        let b = p.acquire(2, &counting(0, 0)).unwrap();
        // Core 2 takes slot a's downlink side, core 1 its uplink side.
        p.downlink(2, a, 100, 0, 0, false);
        p.uplink(1, a, 40, 0);
        // Then the others count the same sides, in their own arrays.
        p.downlink(0, a, 7, 0, 0, false);
        p.downlink(2, a, 100, 0, 0, false);
        p.uplink(3, a, 5, 0);
        p.uplink(1, a, 40, 0);
        // Core 1 owns slot b's downlink: it still maps no array.
        p.downlink(1, b, 9, 0, 0, false);
        // No such core.
        p.downlink(4, b, 1000, 0, 0, false);
        let (c, j) = p.state(a).unwrap();
        assert_eq!(c.side(DL, j).owner.load(Ordering::Relaxed), 3);
        assert_eq!(c.side(UL, j).owner.load(Ordering::Relaxed), 2);
        let mapped: Vec<bool> = c.usage.iter().map(|u| u.get().is_some()).collect();
        assert_eq!(mapped, [true, false, false, true]);
        assert_eq!(
            p.usage(1),
            Some(Usage {
                ul_bytes: 85,
                ul_packets: 3,
                dl_bytes: 207,
                dl_packets: 3,
            })
        );
        assert_eq!(
            p.usage(2),
            Some(Usage {
                dl_bytes: 9,
                dl_packets: 1,
                ..Usage::default()
            })
        );
        // A freed slot given again keeps its owners and counts from 0.
        assert!(p.release(2).is_some());
        let again = p.acquire(3, &counting(0, 0)).unwrap();
        assert_eq!(again, b);
        p.downlink(0, b, 11, 0, 0, false);
        assert_eq!(p.usage(3).unwrap().dl_bytes, 11);
    }
    #[test]
    fn counted_usages_lists_the_counting_slots_alone() {
        let p = Policies::new(2, 4);
        let a = p.acquire(7, &counting(0, 0)).unwrap();
        let gate = Policy {
            dl_mbr_kbps: 1000,
            ..Policy::default()
        };
        let b = p.acquire(8, &gate).unwrap();
        p.downlink(0, a, 100, 0, 0, false);
        p.downlink(1, a, 50, 0, 0, false);
        p.downlink(0, b, 100, 0, 0, false);
        let mut out = vec![(99, Usage::default())];
        p.counted_usages(&mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].0, 7);
        assert_eq!((out[0].1.dl_bytes, out[0].1.dl_packets), (150, 2));
        p.release(7);
        p.counted_usages(&mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn buffers_are_bounded_ordered_and_notify_once() {
        let limits = BufferLimits {
            frames_per_session: 4,
            bytes_per_node: 1000,
        };
        let p = Policies::with_limits(1, 8, limits);
        let buff = Policy {
            buffer: true,
            notify: true,
            count: true,
            ..Policy::default()
        };
        let a = p.acquire(10, &buff).unwrap();
        let b = p.acquire(11, &buff).unwrap();
        for i in 0..6u8 {
            assert_eq!(p.downlink(0, a, 10, 0, 0, false), Verdict::Buffer);
            let r = p.buffer(a, &[i; 10]);
            assert_eq!(r.is_ok(), i < 4, "{i}");
        }
        assert_eq!(p.take_notifications(), vec![10], "one notification");
        assert_eq!(p.take_notifications(), Vec::<u32>::new());
        // The node-wide bound.
        assert!(p.buffer(b, &[0; 900]).is_ok());
        assert_eq!(p.buffer(b, &[0; 100]), Err(Drop::BufferFull));
        assert_eq!(p.take_notifications(), vec![11]);
        // Stop buffering: the session flushes in order, newer packets join the tail.
        p.acquire(10, &counting(0, 0)).unwrap();
        assert_eq!(
            p.downlink(0, a, 10, 0, 0, false),
            Verdict::Buffer,
            "behind the flush"
        );
        let mut out = Vec::new();
        assert_eq!(p.take_flush(3, &mut out), Some(a));
        p.buffer(a, &[9; 10]).unwrap();
        p.finish_flush(a);
        assert_eq!(p.take_flush(64, &mut out), Some(a));
        let firsts: Vec<u8> = out.iter().map(|f| f[0]).collect();
        assert_eq!(firsts, vec![0, 1, 2, 3, 9]);
        assert_eq!(
            p.downlink(0, a, 10, 0, 0, false),
            Verdict::Buffer,
            "until the round ends"
        );
        p.finish_flush(a);
        assert_eq!(p.downlink(0, a, 10, 0, 0, false), Verdict::Pass);
        assert_eq!(
            p.usage(10).unwrap().dl_packets,
            1,
            "buffering counted nothing"
        );
        // A new buffering period notifies again.
        p.acquire(10, &buff).unwrap();
        p.buffer(a, &[1; 10]).unwrap();
        assert_eq!(p.take_notifications(), vec![10]);
        // Freeing a slot drops its buffer.
        assert_eq!(p.stats().buffered_bytes, 900 + 10);
        p.release(11);
        assert_eq!(p.stats().buffered_bytes, 10);
    }

    #[test]
    fn end_markers_wait_for_every_core() {
        let p = Policies::new(2, 1);
        p.quiescent(0);
        p.quiescent(1);
        p.queue_end_marker(77, Ipv4Addr::new(10, 2, 0, 9), 1);
        assert_eq!(p.take_end_marker(1), None);
        p.quiescent(0);
        assert_eq!(p.take_end_marker(2), None, "core 1 has not come round");
        p.quiescent(1);
        let m = p.take_end_marker(3).unwrap();
        assert_eq!((m.teid, m.gnb, m.node), (77, Ipv4Addr::new(10, 2, 0, 9), 1));
        assert_eq!(p.take_end_marker(4), None);
        // A core that never comes round holds it back at most END_MARKER_WAIT_NS.
        p.queue_end_marker(78, Ipv4Addr::new(10, 2, 0, 9), 1);
        p.quiescent(0);
        assert_eq!(p.take_end_marker(1_000), None);
        assert!(p.take_end_marker(1_000 + END_MARKER_WAIT_NS).is_some());
    }

    /// Workers on real threads share one bucket: together they never pass more than the rate
    /// over the time plus one burst, and they pass at least the rate less one packet per
    /// thread (the GCRA's compare-and-swap loses nothing).
    #[test]
    fn the_shared_bucket_holds_under_contention() {
        let p = std::sync::Arc::new(Policies::new(4, 1));
        let kbps = 8_000; // 1 MB/s
        let id = p.acquire(1, &counting(kbps, 0)).unwrap();
        let clock = std::sync::Arc::new(AtomicU64::new(0));
        let end = 2_000_000_000u64; // 2 simulated seconds
        let handles: Vec<_> = (0..4)
            .map(|core| {
                let (p, clock) = (p.clone(), clock.clone());
                std::thread::spawn(move || {
                    let mut passed = 0u64;
                    loop {
                        // Simulated time moves as the threads go: 1 µs per attempt.
                        let now = clock.fetch_add(1000, Ordering::Relaxed);
                        if now >= end {
                            return passed;
                        }
                        if p.downlink(core, id, 500, now, 0, false) == Verdict::Pass {
                            passed += 500;
                        }
                    }
                })
            })
            .collect();
        let passed: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let rate_bytes = 1_000_000u64 * 2; // 2 s at 1 MB/s
        let burst = burst_bytes(kbps);
        assert!(
            passed <= rate_bytes + burst,
            "{passed} > {}",
            rate_bytes + burst
        );
        assert!(passed + 4 * 500 >= rate_bytes, "{passed} < {rate_bytes}");
        assert_eq!(p.usage(1).unwrap().dl_bytes, passed);
    }

    /// Runs a metering round to its end in batches of `batch`: what it hands out.
    fn round(p: &Policies, batch: usize) -> Vec<(u32, Usage)> {
        p.begin_usage_round();
        let (mut all, mut out) = (Vec::new(), Vec::new());
        loop {
            let left = p.changed_usages(&mut out, batch);
            all.extend_from_slice(&out);
            if left == 0 {
                break;
            }
        }
        all.sort_unstable_by_key(|(t, _)| *t);
        all
    }

    /// The old metering: every counting slot's counts ([`Policies::counted_usages`]), handed
    /// out when they differ from those last handed out; a TEID not listed forgets them.
    #[derive(Default)]
    struct FullScan {
        pushed: HashMap<u32, Usage>,
    }

    impl FullScan {
        fn round(&mut self, p: &Policies) -> Vec<(u32, Usage)> {
            let mut counted = Vec::new();
            p.counted_usages(&mut counted);
            let mut next = HashMap::new();
            let mut out = Vec::new();
            for (teid, u) in counted {
                if self.pushed.get(&teid).copied().unwrap_or_default() != u {
                    out.push((teid, u));
                }
                next.insert(teid, u);
            }
            self.pushed = next;
            out.sort_unstable_by_key(|(t, _)| *t);
            out
        }
    }

    proptest! {
        /// Rounds that visit the slots that counted hand out exactly what the full scan of
        /// every counting slot did, round after round, over random traffic on random cores,
        /// sessions given, changed (counting on and off), released and given again (a TEID
        /// may get another slot, a slot another TEID), packets with a freed slot's id, and
        /// rounds run in batches of any size.
        #[test]
        fn changed_usages_push_what_the_full_scan_pushed(
            ops in proptest::collection::vec(
                (0u8..10, 1u32..10, 0usize..3, 20usize..1500, any::<bool>(), 1usize..5),
                0..400,
            ),
        ) {
            let p = Policies::new(3, 8);
            let mut ids: HashMap<u32, u32> = HashMap::new();
            let mut old = FullScan::default();
            for (kind, teid, core, bytes, flag, batch) in ops {
                match kind {
                    0 => {
                        if let Ok(id) = p.acquire(teid, &Policy { count: flag, ..counting(0, 0) }) {
                            ids.insert(teid, id);
                        }
                    }
                    1 => {
                        p.release(teid);
                    }
                    2..=7 => {
                        let Some(&id) = ids.get(&teid) else { continue };
                        if flag {
                            p.downlink(core, id, bytes, 0, 0, false);
                        } else {
                            p.uplink(core, id, bytes, 0);
                        }
                    }
                    _ => {
                        let batch = if batch == 4 { usize::MAX } else { batch };
                        prop_assert_eq!(round(&p, batch), old.round(&p));
                    }
                }
            }
            prop_assert_eq!(round(&p, 2), old.round(&p));
            prop_assert_eq!(round(&p, usize::MAX), old.round(&p));
        }
    }

    /// A round costs the slots that counted (and, once more, those of the round before), not
    /// every counting slot: 10 of 100,010 sessions with traffic (across words, summary words
    /// and chunks of the dirty bits) make rounds of 10 visits, then 10, then none; the full
    /// scan lists all 100,010.
    #[test]
    fn a_round_visits_the_slots_that_counted_alone() {
        let n = 100_010u32;
        let p = Policies::new(2, 200_000);
        for t in 1..=n {
            p.acquire(t, &counting(0, 0)).unwrap();
        }
        let mut all = Vec::new();
        p.counted_usages(&mut all);
        assert_eq!(all.len(), n as usize, "the old round's cost");
        assert!(round(&p, usize::MAX).is_empty());
        assert_eq!(p.usage_visits(), 0, "sessions given cost no visit");
        let active = [1u32, 64, 65, 4096, 4097, 65_536, 65_537, 70_000, 99_999, n];
        for (k, &t) in active.iter().enumerate() {
            let id = p.slot_of(t).unwrap();
            p.uplink(k % 2, id, 100 + k, 0);
            p.downlink((k + 1) % 2, id, 40, 0, 0, false);
        }
        let v0 = p.usage_visits();
        let got = round(&p, 3);
        assert_eq!(p.usage_visits() - v0, 10);
        let want: Vec<(u32, Usage)> = (active.iter().enumerate())
            .map(|(k, &t)| {
                let u = Usage {
                    ul_bytes: 100 + k as u64,
                    ul_packets: 1,
                    dl_bytes: 40,
                    dl_packets: 1,
                };
                (t, u)
            })
            .collect();
        assert_eq!(got, want);
        // The round after visits them again (a store late to arrive), and hands out nothing.
        let v1 = p.usage_visits();
        assert!(round(&p, usize::MAX).is_empty());
        assert_eq!(p.usage_visits() - v1, 10);
        let v2 = p.usage_visits();
        assert!(round(&p, usize::MAX).is_empty());
        assert_eq!(p.usage_visits() - v2, 0, "idle sessions cost nothing");
        // One more packet: one visit, one count handed out.
        p.downlink(1, p.slot_of(70_000).unwrap(), 10, 0, 0, false);
        let v3 = p.usage_visits();
        let got = round(&p, usize::MAX);
        assert_eq!(p.usage_visits() - v3, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].0, got[0].1.dl_bytes, got[0].1.dl_packets),
            (70_000, 50, 2)
        );
    }

    /// A round left unfinished (batches) carries its slots over to the next: nothing is lost.
    #[test]
    fn an_unfinished_round_carries_its_slots_over() {
        let p = Policies::new(1, 64);
        for t in 1..=20u32 {
            let id = p.acquire(t, &counting(0, 0)).unwrap();
            p.uplink(0, id, 100, 0);
        }
        p.begin_usage_round();
        let mut out = Vec::new();
        assert_eq!(p.changed_usages(&mut out, 5), 15);
        assert_eq!(out.len(), 5);
        p.uplink(0, p.slot_of(1).unwrap(), 1, 0);
        let got = round(&p, 4);
        let teids: Vec<u32> = got.iter().map(|(t, _)| *t).collect();
        assert_eq!(
            teids,
            (1..=20).filter(|t| *t == 1 || *t > 5).collect::<Vec<_>>()
        );
        assert_eq!(got[0].1.ul_bytes, 101);
    }

    /// Workers on real threads count while the control thread runs rounds: once they stop,
    /// two more rounds have handed out every session's final counts (none lost to a dirty
    /// bit cleared while a worker counted).
    #[test]
    fn rounds_lose_no_count_of_working_cores() {
        rounds_lose_no_count(4);
    }

    /// As above with one worker: it owns every side it counts.
    #[test]
    fn rounds_lose_no_count_of_one_working_core() {
        rounds_lose_no_count(1);
    }

    /// Workers count random slots (taking their sides, or counting in their own arrays) while
    /// rounds run: what the rounds hand out ends equal to the sums.
    fn rounds_lose_no_count(cores: usize) {
        let p = std::sync::Arc::new(Policies::new(cores, 5000));
        let n = 4000u32;
        for t in 1..=n {
            p.acquire(t, &counting(0, 0)).unwrap();
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..cores)
            .map(|core| {
                let (p, stop) = (p.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut x = core as u32 + 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            x ^= x << 13;
                            x ^= x >> 17;
                            x ^= x << 5;
                            p.uplink(core, x % n + 1, 64, 0);
                        }
                    }
                })
            })
            .collect();
        let mut last: HashMap<u32, Usage> = HashMap::new();
        for _ in 0..200 {
            last.extend(round(&p, 997));
        }
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            h.join().unwrap();
        }
        last.extend(round(&p, usize::MAX));
        last.extend(round(&p, usize::MAX));
        for t in 1..=n {
            let u = p.usage(t).unwrap();
            assert_eq!(last.get(&t).copied().unwrap_or_default(), u, "teid {t}");
        }
    }
}
