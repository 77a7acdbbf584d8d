//! What the data plane gets: a session's [`Forwarding`] (what its rules become), the
//! [`FibChange`]s that turn one forwarding into another, and per UE address its whole entry
//! before and after them ([`UeChange`], [`UeFib`]).

use super::*;

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
    /// What the handling node enforces for the UE beyond forwarding.
    pub policy: UePolicy,
}

/// What the handling node enforces for a UE address beyond its tunnels (the default:
/// nothing). Its per-session state (token buckets, counters, the buffer) is keyed by the
/// uplink TEID ([`UeFib::up`]): the addresses of a dual-stack session share it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UePolicy {
    /// Downlink maximum bit rate in kbit/s, 0 = unlimited: the least DL MBR of the QERs of the
    /// UE's downlink PDR (the session AMBR QER is one of them when the SMF links it), but the
    /// session's shared ones when it has several flows ([`UePolicy::session`]). The handling
    /// node polices it per flow (per uplink TEID: the UE addresses that share one share it).
    pub dl_mbr_kbps: u32,
    /// Likewise uplink, of the QERs of the UE's uplink PDR.
    pub ul_mbr_kbps: u32,
    /// The session's downlink AMBR in kbit/s, policed over all of its flows together (0:
    /// none): in a session of several flows (uplink TEIDs), the least DL MBR of the QERs
    /// linked to the PDRs of more than one flow. A session of one flow has none (the least of
    /// all its QERs is its flow's MBR, which polices the same packets).
    pub dl_ambr_kbps: u32,
    /// Likewise uplink.
    pub ul_ambr_kbps: u32,
    /// With an AMBR: the key its flows share it by (the session's lowest uplink TEID among
    /// its flows), else 0.
    pub session: u32,
    /// A QER of the downlink PDR has its DL gate closed, or a URR of it has used its quota:
    /// downlink is dropped.
    pub dl_gate_closed: bool,
    /// Likewise uplink.
    pub ul_gate_closed: bool,
    /// A URR is linked to the UE's PDRs: the handling node counts bytes and packets per
    /// direction (cumulative since the entry was installed) and feeds them to
    /// [`Upf::usage`].
    pub count: bool,
    /// The downlink FAR says BUFF: the handling node buffers downlink (bounded), and delivers
    /// the buffer in order once the downlink forwards again.
    pub buffer: bool,
    /// BUFF with NOCP: the handling node reports the first buffered packet
    /// ([`Upf::downlink_data`], which sends the Downlink Data Report).
    pub notify: bool,
    /// This change came with SNDEM (Update Forwarding Parameters): send an End Marker on the
    /// old tunnel (`before`'s) before switching. An instruction of that change alone: set in
    /// its `after`, never in a `before` (keep entries without it).
    pub end_marker: bool,
    /// The downlink FAR says DROP.
    pub dl_drop: bool,
}

/// Cumulative counts of one handling-node slot (an uplink TEID) since its entry was installed
/// ([`Upf::usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Uplink bytes (the inner IP packets).
    pub ul_bytes: u64,
    /// Downlink bytes.
    pub dl_bytes: u64,
    /// Uplink packets.
    pub ul_packets: u64,
    /// Downlink packets.
    pub dl_packets: u64,
}

impl Usage {
    /// What counts grew by from `old` to `self`; a count below its old value started again
    /// (its entry was installed anew), so all of it is new.
    pub fn since(&self, old: &Usage) -> Usage {
        let d = |n: u64, o: u64| if n >= o { n - o } else { n };
        Usage {
            ul_bytes: d(self.ul_bytes, old.ul_bytes),
            dl_bytes: d(self.dl_bytes, old.dl_bytes),
            ul_packets: d(self.ul_packets, old.ul_packets),
            dl_packets: d(self.dl_packets, old.dl_packets),
        }
    }

    /// The sum, saturating.
    pub fn plus(&self, o: &Usage) -> Usage {
        Usage {
            ul_bytes: self.ul_bytes.saturating_add(o.ul_bytes),
            dl_bytes: self.dl_bytes.saturating_add(o.dl_bytes),
            ul_packets: self.ul_packets.saturating_add(o.ul_packets),
            dl_packets: self.dl_packets.saturating_add(o.dl_packets),
        }
    }
}

/// The answer to [`Sessions::read_usage`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UsageRead {
    /// The slots' counters now (a slot left out has nothing beyond what [`Upf::usage`] was
    /// given).
    Now(Vec<(u32, Usage)>),
    /// They follow through [`Upf::complete_usage`] with the call's token.
    Pending,
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
    /// UE address -> what its handling node enforces (addresses with the default left out).
    pub policy: VecMap<IpAddr, UePolicy>,
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
            policy: self.policy.get(ue).copied().unwrap_or_default(),
        }
    }

    /// What turning `self` into `new` at `node` does to each UE address ([`UeChange`]), in
    /// address order; addresses whose forwarding stays are left out.
    pub fn ue_diff(&self, new: &Forwarding, node: u16) -> Vec<UeChange> {
        let mut ues: Vec<IpAddr> = [self, new]
            .iter()
            .flat_map(|f| {
                (f.downlink.keys())
                    .chain(f.uplink.values().map(|(u, _)| u))
                    .chain(f.policy.keys())
            })
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
    pub(super) fn changes(&self, new: &Forwarding, node: u16) -> Changes {
        (self.diff(new, node), self.ue_diff(new, node))
    }
}

/// Changes for [`Sessions::apply`].
pub(super) type Changes = (Vec<FibChange>, Vec<UeChange>);
