//! The engine's counters: plain integers owned by one engine (one core), summed when read.

use sb_wire::WireError;
use serde::Serialize;
use std::collections::BTreeMap;

/// A node's ports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortId {
    /// Towards the Internet (the external port: downstream traffic enters here).
    Inet = 0,
    /// Towards the base stations (the access port: GTP-U leaves and arrives here).
    Ran = 1,
    /// To the switch that joins the nodes.
    Fabric = 2,
}

impl PortId {
    /// The three ports, in index order.
    pub const ALL: [PortId; 3] = [PortId::Inet, PortId::Ran, PortId::Fabric];

    /// The port's name in counters and configuration (`inet`, `ran`, `fabric`).
    pub fn label(self) -> &'static str {
        match self {
            PortId::Inet => "inet",
            PortId::Ran => "ran",
            PortId::Fabric => "fabric",
        }
    }
}

/// Why the engine dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Drop {
    /// The frame is malformed; the parser said why.
    Malformed(WireError),
    /// Well-formed, but not an IP packet (ARP not for us, LLDP, ...).
    NotIp,
    /// No FIB entry for the key where the architecture looks it up without a GPT (full
    /// duplication, hash partitioning), or a GPT answer that names no node.
    UnknownFlow,
    /// The GPT sent the packet to this node (or this node itself), but its FIB has no entry:
    /// an unknown key (the GPT answers something for every key) or a stale GPT.
    FibMissAfterGpt,
    /// IPv4 TTL or IPv6 hop limit of 1 or 0: not forwarded (the LTE application answers
    /// with ICMP Time Exceeded, within the engine's error rate).
    Ttl,
    /// The output batch was full.
    NoRoom,
    /// After the tunnel headers, the packet would exceed the access port's MTU and may not be
    /// fragmented (an inner IPv4 packet with DF, or IPv6): the packet is dropped and the LTE
    /// application answers with ICMP Fragmentation Needed / ICMPv6 Packet Too Big. (An inner
    /// IPv4 packet without DF leaves as outer fragments instead.)
    Mtu,
    /// A fragment of an outer GTP-U packet (not reassembled).
    OuterFragment,
    /// A frame on the fabric without a valid shim, or of a kind this architecture never sends.
    InvalidFabric,
    /// The packet would cross the fabric more often than the architecture allows.
    TooManyHops,
    /// A G-PDU on the access port whose TEID no tunnel of this node has.
    UnknownTeid,
    /// A G-PDU whose TEID is known but whose inner source address is not the tunnel's UE (for
    /// an IPv6 UE: not in its /64).
    UplinkMismatch,
    /// A G-PDU whose PDU Session Container names another QoS flow than its tunnel's QFI.
    QfiMismatch,
    /// A frame to a broadcast or multicast MAC or IP address on the external port: never
    /// looked up, never sent over the fabric.
    Multicast,
    /// The flow's FIB entry has no downlink tunnel: a session whose gNB tunnel the SMF has not
    /// sent yet, or an idle one (buffering is not done: the packet is dropped).
    NoTunnel,
    /// Traffic on the access port that is not a G-PDU or an Echo Request (plain IP, other
    /// GTP-U messages).
    NotGpdu,
    /// An IPv4, IPv6 or ARP frame on the fabric: traffic between the nodes' own kernels (ARP,
    /// or the control plane's UDP in a cluster made before it moved to the control network),
    /// not a fabric frame. The kernel has its
    /// own copy; the engine leaves it alone and counts it in [`PortCounters::host`], not as a
    /// drop.
    Host,
    /// The session's QER gate for the packet's direction is closed
    /// ([`crate::policy::Policy::dl_gate_closed`], `ul_gate_closed`).
    Gate,
    /// The packet exceeds the session's maximum bit rate (its QER's MBR, a token bucket at the
    /// handling node: [`crate::policy`]).
    Mbr,
    /// The session's downlink buffer (or the node's bound on all of them) is full
    /// ([`crate::policy::BufferLimits`]).
    BufferFull,
    /// The session's FAR drops downlink packets ([`crate::policy::Policy::drop_dl`]).
    FarDrop,
    /// Not a drop: the packet went into its session's downlink buffer (FAR BUFF), counted in
    /// [`Counters::buffered`]; it leaves when the buffer is flushed
    /// ([`Counters::released`]).
    Buffered,
    /// Not a drop: an uplink packet for the CP function (an ICMPv6 Router Solicitation) handed
    /// to the node's control plane ([`crate::policy::Policies::take_to_cp`]), counted in
    /// [`Counters::to_cp`].
    ToCp,
}

/// Number of drop reasons other than the malformed ones.
pub const N_DROPS: usize = 20;

impl Drop {
    /// Every reason other than `Malformed`, in index order.
    pub const OTHERS: [Drop; N_DROPS] = [
        Drop::NotIp,
        Drop::UnknownFlow,
        Drop::FibMissAfterGpt,
        Drop::Ttl,
        Drop::NoRoom,
        Drop::Mtu,
        Drop::OuterFragment,
        Drop::InvalidFabric,
        Drop::TooManyHops,
        Drop::UnknownTeid,
        Drop::UplinkMismatch,
        Drop::NotGpdu,
        Drop::Host,
        Drop::QfiMismatch,
        Drop::Multicast,
        Drop::NoTunnel,
        Drop::Gate,
        Drop::Mbr,
        Drop::BufferFull,
        Drop::FarDrop,
    ];

    /// A stable name for counters (`malformed` for every malformed reason; `buffered`, not a
    /// drop, is not in [`Drop::OTHERS`]).
    pub fn label(self) -> &'static str {
        match self {
            Drop::Malformed(_) => "malformed",
            Drop::NotIp => "not_ip",
            Drop::UnknownFlow => "unknown_flow",
            Drop::FibMissAfterGpt => "fib_miss_after_gpt",
            Drop::Ttl => "ttl",
            Drop::NoRoom => "no_room",
            Drop::Mtu => "mtu",
            Drop::OuterFragment => "outer_fragment",
            Drop::InvalidFabric => "invalid_fabric",
            Drop::TooManyHops => "too_many_hops",
            Drop::UnknownTeid => "unknown_teid",
            Drop::UplinkMismatch => "uplink_mismatch",
            Drop::NotGpdu => "not_gpdu",
            Drop::Host => "host",
            Drop::QfiMismatch => "qfi_mismatch",
            Drop::Multicast => "multicast",
            Drop::NoTunnel => "no_tunnel",
            Drop::Gate => "gate",
            Drop::Mbr => "mbr",
            Drop::BufferFull => "buffer_full",
            Drop::FarDrop => "far_drop",
            Drop::Buffered => "buffered",
            Drop::ToCp => "to_cp",
        }
    }

    fn other_index(self) -> Option<usize> {
        Drop::OTHERS.iter().position(|d| *d == self)
    }
}

/// Counters of one port.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    /// Frames the engine was given from this port.
    pub rx: u64,
    /// Frames the engine emitted on this port.
    pub tx: u64,
    /// Frames received here that the engine sent on over the fabric.
    pub to_fabric: u64,
    /// Frames received here and dropped (all reasons).
    pub dropped: u64,
    /// Frames left to the node's own kernel ([`Drop::Host`]: the kernels' own traffic on the
    /// fabric), counted here and not as drops.
    pub host: u64,
}

/// Counters of one engine. Plain integers: each worker has its own, [`Counters::add`] sums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Per port, indexed by [`PortId`].
    pub ports: [PortCounters; 3],
    /// Drops per port and reason ([`Drop::OTHERS`] order).
    pub drops: [[u64; N_DROPS]; 3],
    /// Malformed drops by parser reason ([`WireError::index`]), all ports.
    pub malformed: [u64; WireError::COUNT],
    /// Downstream frames transmitted on the access port, by fabric crossings (0, 1, 2, 3+):
    /// a packet cut into outer fragments counts once per fragment.
    pub crossings: [u64; 4],
    /// GTP-U Echo Responses sent.
    pub echo_replies: u64,
    /// Upstream packets decapsulated and sent to the external port.
    pub upstream: u64,
    /// ARP requests for this node's addresses answered.
    pub arp_replies: u64,
    /// ICMP / ICMPv6 errors sent about dropped packets (TTL expired, too big).
    pub icmp_errors: u64,
    /// GTP-U Error Indications sent (uplink G-PDUs with an unknown TEID).
    pub error_indications: u64,
    /// Error messages not sent because of the engine's rate limit.
    pub errors_rate_limited: u64,
    /// Downlink packets put into their session's buffer ([`Drop::Buffered`]).
    pub buffered: u64,
    /// Buffered packets taken out of a buffer and run through the downlink path again
    /// ([`crate::Engine::poll`]; not counted again in `rx`).
    pub released: u64,
    /// GTP-U End Markers sent out of `ran`.
    pub end_markers: u64,
    /// Downlink packets whose outer IPv4 packet was cut into fragments (larger than the access
    /// link's MTU, the inner IPv4 packet without DF).
    pub fragmented: u64,
    /// The fragments those packets left as (each also counted in `tx`).
    pub fragments: u64,
    /// Uplink packets for the CP function handed to the control plane ([`Drop::ToCp`]).
    pub to_cp: u64,
    /// Frames from the CP function (its router advertisements, tunnelled to the UE by the
    /// control plane, [`crate::policy::Policies::queue_access_frame`]) sent out of `ran`.
    pub from_cp: u64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            ports: [PortCounters::default(); 3],
            drops: [[0; N_DROPS]; 3],
            malformed: [0; WireError::COUNT],
            crossings: [0; 4],
            echo_replies: 0,
            upstream: 0,
            arp_replies: 0,
            icmp_errors: 0,
            error_indications: 0,
            errors_rate_limited: 0,
            buffered: 0,
            released: 0,
            end_markers: 0,
            fragmented: 0,
            fragments: 0,
            to_cp: 0,
            from_cp: 0,
        }
    }
}

impl Counters {
    /// Counts a drop of a frame received on `port`.
    #[inline]
    pub fn drop(&mut self, port: PortId, why: Drop) {
        let p = port as usize;
        if why == Drop::Host {
            self.ports[p].host += 1;
            return;
        }
        if why == Drop::Buffered {
            self.buffered += 1;
            return;
        }
        if why == Drop::ToCp {
            self.to_cp += 1;
            return;
        }
        self.ports[p].dropped += 1;
        match why {
            Drop::Malformed(e) => self.malformed[e.index()] += 1,
            other => {
                if let Some(i) = other.other_index() {
                    self.drops[p][i] += 1;
                }
            }
        }
    }

    /// Drops of reason `why` (any malformed reason for `Malformed`) on every port.
    pub fn dropped(&self, why: Drop) -> u64 {
        match why {
            Drop::Malformed(_) => self.malformed.iter().sum(),
            other => other
                .other_index()
                .map_or(0, |i| self.drops.iter().map(|d| d[i]).sum()),
        }
    }

    /// Adds `other` into `self` (to sum per-worker counters).
    pub fn add(&mut self, other: &Counters) {
        for p in 0..3 {
            let (a, b) = (&mut self.ports[p], &other.ports[p]);
            a.rx += b.rx;
            a.tx += b.tx;
            a.to_fabric += b.to_fabric;
            a.dropped += b.dropped;
            a.host += b.host;
            for i in 0..N_DROPS {
                self.drops[p][i] += other.drops[p][i];
            }
        }
        for (a, b) in self.malformed.iter_mut().zip(&other.malformed) {
            *a += b;
        }
        for (a, b) in self.crossings.iter_mut().zip(&other.crossings) {
            *a += b;
        }
        self.echo_replies += other.echo_replies;
        self.upstream += other.upstream;
        self.arp_replies += other.arp_replies;
        self.icmp_errors += other.icmp_errors;
        self.error_indications += other.error_indications;
        self.errors_rate_limited += other.errors_rate_limited;
        self.buffered += other.buffered;
        self.released += other.released;
        self.end_markers += other.end_markers;
        self.fragmented += other.fragmented;
        self.fragments += other.fragments;
        self.to_cp += other.to_cp;
        self.from_cp += other.from_cp;
    }

    /// Mean fabric crossings of the downstream packets transmitted on the access port.
    pub fn mean_crossings(&self) -> f64 {
        let n: u64 = self.crossings.iter().sum();
        if n == 0 {
            return 0.0;
        }
        let w: u64 = self
            .crossings
            .iter()
            .enumerate()
            .map(|(i, c)| i as u64 * c)
            .sum();
        w as f64 / n as f64
    }

    /// Drops by reason label over every port (malformed ones as `malformed:<reason>`), only the
    /// reasons that occurred.
    pub fn drops_by_reason(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for d in Drop::OTHERS {
            let n = self.dropped(d);
            if n > 0 {
                m.insert(d.label().to_string(), n);
            }
        }
        for e in WireError::ALL {
            let n = self.malformed[e.index()];
            if n > 0 {
                m.insert(format!("malformed:{}", e.label()), n);
            }
        }
        m
    }

    /// A serializable snapshot: per port (with its drops by reason), crossings, totals.
    pub fn report(&self) -> Report {
        let ports = PortId::ALL
            .iter()
            .map(|&p| {
                let i = p as usize;
                let drops = Drop::OTHERS
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| self.drops[i][*j] > 0)
                    .map(|(j, d)| (d.label().to_string(), self.drops[i][j]))
                    .collect();
                (
                    p.label().to_string(),
                    PortReport {
                        counters: self.ports[i],
                        drops,
                    },
                )
            })
            .collect();
        Report {
            ports,
            drops: self.drops_by_reason(),
            crossings: self.crossings,
            mean_crossings: self.mean_crossings(),
            echo_replies: self.echo_replies,
            upstream: self.upstream,
            arp_replies: self.arp_replies,
            icmp_errors: self.icmp_errors,
            error_indications: self.error_indications,
            errors_rate_limited: self.errors_rate_limited,
            buffered: self.buffered,
            released: self.released,
            end_markers: self.end_markers,
            fragmented: self.fragmented,
            fragments: self.fragments,
            to_cp: self.to_cp,
            from_cp: self.from_cp,
        }
    }
}

/// One port in a [`Report`].
#[derive(Clone, Debug, Serialize)]
pub struct PortReport {
    /// The counters.
    #[serde(flatten)]
    pub counters: PortCounters,
    /// Drops of frames received on this port by reason (malformed ones are only in the
    /// report's `drops`).
    pub drops: BTreeMap<String, u64>,
}

/// The counters as JSON sees them (`cluster status`, the node's counters file).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `inet`, `ran`, `fabric`.
    pub ports: BTreeMap<String, PortReport>,
    /// All drops by reason (`malformed:<reason>` for parser errors).
    pub drops: BTreeMap<String, u64>,
    /// Downstream packets transmitted on `ran` by fabric crossings: 0, 1, 2, 3 or more.
    pub crossings: [u64; 4],
    /// Mean of that histogram.
    pub mean_crossings: f64,
    /// GTP-U Echo Responses sent.
    pub echo_replies: u64,
    /// Upstream packets decapsulated.
    pub upstream: u64,
    /// ARP requests answered.
    pub arp_replies: u64,
    /// ICMP / ICMPv6 errors sent.
    pub icmp_errors: u64,
    /// GTP-U Error Indications sent.
    pub error_indications: u64,
    /// Error messages the rate limit held back.
    pub errors_rate_limited: u64,
    /// Downlink packets buffered.
    pub buffered: u64,
    /// Buffered packets sent on.
    pub released: u64,
    /// End Markers sent.
    pub end_markers: u64,
    /// Downlink packets sent as outer IPv4 fragments.
    pub fragmented: u64,
    /// The fragments they were sent as.
    pub fragments: u64,
    /// Uplink packets handed to the control plane for the CP function.
    pub to_cp: u64,
    /// Frames from the CP function sent out of `ran`.
    pub from_cp: u64,
}
