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
    pub(super) fn changes(&self, new: &Forwarding, node: u16) -> Changes {
        (self.diff(new, node), self.ue_diff(new, node))
    }
}

/// Changes for [`Sessions::apply`].
pub(super) type Changes = (Vec<FibChange>, Vec<UeChange>);
