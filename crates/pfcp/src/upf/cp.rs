//! The paths between a UE and the CP function (TS 29.244 5.2.1: source / destination
//! interface CP-function), as open5gs's SMF uses them for IPv6 router discovery
//! (`smf_sess_create_cp_up_data_forwarding`, `npcf-handler.c`):
//! - **UP to CP**: an Access PDR on the session's uplink F-TEID (CHOOSE ID shared with the
//!   uplink PDR) with an SDF filter `permit out 58 from ff02::2/128 to assigned`, whose FAR
//!   forwards to the CP function with Outer Header Creation GTP-U/UDP/IPv4 toward the SMF's
//!   F-TEID. The handling node hands the UE's Router Solicitations to the control plane; the
//!   endpoint holding the session tunnels the ones a filter matches to that F-TEID
//!   ([`Upf::uplink_to_cp`]: a G-PDU to the SMF's address, UDP port 2152).
//! - **CP to UP**: a PDR with source interface CP-function and a local F-TEID (CHOOSE), whose
//!   FAR is the session's downlink FAR. Its F-TEID is answered with the endpoint's own PFCP
//!   address ([`Config::pfcp_addr`]), where the node receives the SMF's G-PDUs (its Router
//!   Advertisements); [`Upf::downlink_from_cp`] names the session's downlink tunnel
//!   (TEID, gNB, QFI, the handling node and its `ran` address) to send the inner packet down.
//!
//! In a filter of the UP-to-CP path `from` is the packet's destination (the filter is written
//! in the downlink direction, TS 29.212 5.4.2) and `to assigned` matches any source: a Router
//! Solicitation comes from the UE's link-local or unspecified address, not from its prefix
//! (the handling node matched the TEID already).

use super::*;
use crate::sdf::{Endpoint, FlowDescription, SdfFilter};

/// The UDP port of GTP-U (TS 29.281 4.4.2.3).
pub const GTPU_PORT: u16 = 2152;

/// A UP-to-CP path: the filters packets must match and the SMF's F-TEID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ToCp {
    filters: Box<[FlowDescription]>,
    teid: u32,
    smf: Ipv4Addr,
}

/// Where a packet from the CP function goes: the session's downlink tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FromCp {
    /// The handling node.
    pub node: u16,
    /// Its `ran` address (the tunnel's outer source).
    pub ran: Ipv4Addr,
    /// The gNB's TEID.
    pub teid: u32,
    /// The gNB's address.
    pub gnb: Ipv4Addr,
    /// The QFI of the session's flow (0: none, no PDU Session Container).
    pub qfi: u8,
}

/// A session's CP-function paths: UP to CP by uplink TEID, CP to UP by the CP-function PDR's
/// TEID (`None`: no downlink tunnel now, the packet is dropped).
pub(super) type CpPaths = (Vec<(u32, ToCp)>, Vec<(u32, Option<FromCp>)>);

/// The CP-function paths of a session's rules (`fwd` and `placement`: its forwarding now).
pub(super) fn cp_paths(rules: &Rules, fwd: &Forwarding, placement: Placement) -> CpPaths {
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for (p, teid) in rules.pdrs.values() {
        let Some(teid) = *teid else { continue };
        let Some(far) = p.far_id.and_then(|f| rules.fars.get(&f.0)) else {
            continue;
        };
        let forw = far.apply_action.has(ApplyAction::FORW);
        let params = far.forwarding_parameters.as_ref();
        let ohc = params.and_then(|f| f.outer_header_creation.clone());
        let to_cp = params.and_then(|f| f.destination_interface) == Some(Interface::CP_FUNCTION);
        match p.pdi.source_interface {
            Interface::ACCESS if to_cp && forw => {
                let Some(OuterHeaderCreation::GtpuIpv4 { teid: t, addr }) = ohc else {
                    continue;
                };
                let filters = (p.pdi.other.iter())
                    .filter(|ie| ie.ie_type == ie_type::SDF_FILTER)
                    .filter_map(|ie| SdfFilter::read(&ie.value).ok()?.flow)
                    .collect();
                let path = ToCp {
                    filters,
                    teid: t,
                    smf: addr,
                };
                up.push((teid, path));
            }
            Interface::CP_FUNCTION => {
                let to = match (forw, ohc) {
                    (true, Some(OuterHeaderCreation::GtpuIpv4 { teid: t, addr })) => Some(FromCp {
                        node: placement.node,
                        ran: placement.ran,
                        teid: t,
                        gnb: addr,
                        qfi: fwd.qfi,
                    }),
                    _ => None,
                };
                down.push((teid, to));
            }
            _ => {}
        }
    }
    (up, down)
}

/// Whether the prefix `net`/`len` holds `a`.
fn in_prefix(net: IpAddr, len: u8, a: IpAddr) -> bool {
    let (n, a, bits) = match (net, a) {
        (IpAddr::V4(n), IpAddr::V4(a)) => (
            u128::from(u32::from(n)) << 96,
            u128::from(u32::from(a)) << 96,
            32,
        ),
        (IpAddr::V6(n), IpAddr::V6(a)) => (u128::from(n), u128::from(a), 128),
        _ => return false,
    };
    let len = u32::from(len).min(bits);
    len == 0 || (n ^ a) >> (128 - len) == 0
}

/// An uplink packet's protocol, source, destination and (TCP/UDP) source and destination ports.
type Tuple = (u8, IpAddr, IpAddr, Option<(u16, u16)>);

/// The [`Tuple`] of an IP packet without options or extension headers (`None`: not such a
/// packet).
fn five_tuple(ip: &[u8]) -> Option<Tuple> {
    let (proto, src, dst, l4) = match ip.first()? >> 4 {
        4 if ip.len() >= 20 && ip[0] & 0x0f == 5 => {
            let a = |o: usize| IpAddr::from(<[u8; 4]>::try_from(&ip[o..o + 4]).ok().unwrap());
            (ip[9], a(12), a(16), 20)
        }
        6 if ip.len() >= 40 => {
            let a = |o: usize| IpAddr::from(<[u8; 16]>::try_from(&ip[o..o + 16]).ok().unwrap());
            (ip[6], a(8), a(24), 40)
        }
        _ => return None,
    };
    let ports = match (proto, ip.get(l4..l4 + 4)) {
        (6 | 17, Some(p)) => Some((
            u16::from_be_bytes([p[0], p[1]]),
            u16::from_be_bytes([p[2], p[3]]),
        )),
        _ => None,
    };
    Some((proto, src, dst, ports))
}

/// Whether the uplink packet `ip` matches flow description `f` (see the module docs).
fn matches_uplink(f: &FlowDescription, ip: &[u8]) -> bool {
    let Some((proto, src, dst, ports)) = five_tuple(ip) else {
        return false;
    };
    let end = |e: &Endpoint, a: IpAddr| match *e {
        Endpoint::Any | Endpoint::Assigned => true,
        Endpoint::Net(n, len) => in_prefix(n, len, a),
    };
    let port_ok = |ranges: &[(u16, u16)], p: Option<u16>| {
        ranges.is_empty() || p.is_some_and(|p| ranges.iter().any(|&(lo, hi)| lo <= p && p <= hi))
    };
    f.protocol.is_none_or(|p| p == proto)
        && end(&f.src, dst)
        && end(&f.dst, src)
        && port_ok(&f.src_ports, ports.map(|p| p.1))
        && port_ok(&f.dst_ports, ports.map(|p| p.0))
}

/// The CP-function paths of every session, by TEID (a session's paths inline in its
/// entries, but for their filters).
#[derive(Debug, Default)]
pub(super) struct CpIndex {
    up: HashMap<u32, (u64, SmallVec<[ToCp; 1]>)>,
    down: HashMap<u32, (u64, Option<FromCp>)>,
    of: HashMap<u64, SmallVec<[u32; 2]>>,
    /// The heap bytes the entries point to, as malloc sizes them ([`up_heap`]).
    heap: usize,
    /// Sessions the endpoint expects ([`Config::expected_sessions`]): the maps are allocated
    /// for that many at their first path (not before: most SMFs give no session a path), so
    /// that they do not double (holding the control thread, at every endpoint together) as
    /// sessions come.
    expected: usize,
}

/// The heap bytes of a UP-to-CP entry's paths: their filters (and their port ranges), and
/// the paths when more than one.
fn up_heap(paths: &SmallVec<[ToCp; 1]>) -> usize {
    let spilled = if paths.spilled() {
        malloc_chunk(paths.capacity() * std::mem::size_of::<ToCp>())
    } else {
        0
    };
    let ports = |v: &Vec<(u16, u16)>| malloc_chunk(v.capacity() * 4);
    spilled
        + (paths.iter())
            .map(|p| {
                malloc_chunk(std::mem::size_of_val(&*p.filters))
                    + (p.filters.iter())
                        .map(|f| ports(&f.src_ports) + ports(&f.dst_ports))
                        .sum::<usize>()
            })
            .sum::<usize>()
}

impl CpIndex {
    /// Allocates the maps for the expected sessions once, at the first path.
    fn allocate(&mut self) {
        if self.of.capacity() == 0 {
            let n = self.expected;
            self.up.reserve(n);
            self.down.reserve(n);
            self.of.reserve(n);
        }
    }

    /// An empty index whose maps take room for `expected` sessions at their first path.
    pub(super) fn with_expected(expected: usize) -> CpIndex {
        CpIndex {
            expected,
            ..CpIndex::default()
        }
    }

    /// Bytes it holds: its tables (as [`Upf::memory`] counts them) and the heap.
    pub(super) fn bytes(&self) -> usize {
        let t = |cap: usize, size: usize| cap * (size + 1);
        t(
            self.up.capacity(),
            std::mem::size_of::<(u32, (u64, SmallVec<[ToCp; 1]>))>(),
        ) + t(
            self.down.capacity(),
            std::mem::size_of::<(u32, (u64, Option<FromCp>))>(),
        ) + t(
            self.of.capacity(),
            std::mem::size_of::<(u64, SmallVec<[u32; 2]>)>(),
        ) + self.heap
    }
}

impl<S: Sessions> Upf<S> {
    /// Keeps `paths` as session `seid`'s CP-function paths (`None`: it has none any more).
    pub(super) fn set_cp_paths(&mut self, seid: u64, paths: Option<CpPaths>) {
        let cp = &mut self.cp;
        for t in cp.of.remove(&seid).unwrap_or_default() {
            if cp.up.get(&t).is_some_and(|(s, _)| *s == seid) {
                if let Some((_, p)) = cp.up.remove(&t) {
                    cp.heap -= up_heap(&p);
                }
            }
            if cp.down.get(&t).is_some_and(|(s, _)| *s == seid) {
                cp.down.remove(&t);
            }
        }
        let Some((up, down)) = paths else { return };
        cp.allocate();
        let mut teids = SmallVec::new();
        for (t, p) in up {
            let (_, paths) = cp.up.entry(t).or_insert_with(|| (seid, SmallVec::new()));
            cp.heap -= up_heap(paths);
            paths.push(p);
            cp.heap += up_heap(paths);
            teids.push(t);
        }
        for (t, d) in down {
            cp.down.insert(t, (seid, d));
            teids.push(t);
        }
        if !teids.is_empty() {
            cp.of.insert(seid, teids);
        }
    }

    /// An uplink packet for the CP function: `packet`, the inner IP packet of a G-PDU that
    /// arrived on uplink TEID `ul_teid` (a Router Solicitation the handling node handed over).
    /// When a UP-to-CP path of the session holding the TEID matches it, the G-PDU to send to
    /// the SMF's F-TEID (UDP port 2152); otherwise nothing (counted:
    /// [`Stats::cp_unmatched`]).
    pub fn uplink_to_cp(&mut self, ul_teid: u32, packet: &[u8]) -> Option<Transmit> {
        let path = self.cp.up.get(&ul_teid).and_then(|(_, paths)| {
            paths.iter().find(|p| {
                p.filters.is_empty() || p.filters.iter().any(|f| matches_uplink(f, packet))
            })
        });
        let Some(p) = path else {
            self.stats.cp_unmatched += 1;
            return None;
        };
        // A G-PDU (TS 29.281 5.1): version 1, protocol type GTP, no optional fields.
        let len = u16::try_from(packet.len()).ok()?;
        let mut bytes = Vec::with_capacity(8 + packet.len());
        bytes.extend_from_slice(&[0x30, 0xff]);
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(&p.teid.to_be_bytes());
        bytes.extend_from_slice(packet);
        self.stats.cp_uplink += 1;
        Some(Transmit {
            to: SocketAddr::new(IpAddr::V4(p.smf), GTPU_PORT),
            bytes,
        })
    }

    /// Where a G-PDU from the CP function to our CP-function F-TEID `teid` goes: the downlink
    /// tunnel of the session holding it. `None` when no session holds it as a CP-to-UP path,
    /// or the session has no downlink tunnel now (counted: [`Stats::cp_unmatched`]).
    pub fn downlink_from_cp(&mut self, teid: u32) -> Option<FromCp> {
        match self.cp.down.get(&teid).and_then(|(_, d)| *d) {
            Some(d) => {
                self.stats.cp_downlink += 1;
                Some(d)
            }
            None => {
                self.stats.cp_unmatched += 1;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The maps take no room before the first path, then room for the expected sessions at
    /// once: they do not double under load.
    #[test]
    fn the_maps_are_allocated_for_the_expected_sessions_at_the_first_path() {
        let mut cp = CpIndex::with_expected(3_000);
        assert_eq!(cp.bytes(), 0);
        cp.allocate();
        let rooms = [cp.up.capacity(), cp.down.capacity(), cp.of.capacity()];
        assert!(rooms.iter().all(|&r| r >= 3_000), "{rooms:?}");
        for t in 0..3_000u32 {
            cp.up.insert(t, (u64::from(t), SmallVec::new()));
            cp.down.insert(t, (u64::from(t), None));
            cp.of.insert(u64::from(t), SmallVec::from_slice(&[t]));
            cp.allocate();
        }
        assert_eq!(
            [cp.up.capacity(), cp.down.capacity(), cp.of.capacity()],
            rooms
        );
    }

    fn rs(src: &str, dst: &str) -> Vec<u8> {
        let (s, d): (std::net::Ipv6Addr, std::net::Ipv6Addr) =
            (src.parse().unwrap(), dst.parse().unwrap());
        let mut ip = vec![0u8; 48];
        ip[0] = 0x60;
        ip[5] = 8;
        ip[6] = 58;
        ip[7] = 255;
        ip[8..24].copy_from_slice(&s.octets());
        ip[24..40].copy_from_slice(&d.octets());
        ip[40] = 133;
        ip
    }

    #[test]
    fn open5gs_router_solicitation_filter_matches_uplink_solicitations_only() {
        let f = FlowDescription::parse("permit out 58 from ff02::2/128 to assigned").unwrap();
        assert!(matches_uplink(&f, &rs("fe80::1", "ff02::2")));
        assert!(matches_uplink(&f, &rs("::", "ff02::2")));
        assert!(!matches_uplink(&f, &rs("fe80::1", "ff02::1")));
        let mut udp = rs("fe80::1", "ff02::2");
        udp[6] = 17;
        assert!(!matches_uplink(&f, &udp));
        assert!(!matches_uplink(&f, &[0x45; 10]));
        let g = FlowDescription::parse("permit out 17 from 10.0.0.0/8 53 to assigned").unwrap();
        let mut v4 = vec![0u8; 28];
        v4[0] = 0x45;
        v4[9] = 17;
        v4[12..16].copy_from_slice(&[10, 45, 0, 2]);
        v4[16..20].copy_from_slice(&[10, 9, 9, 9]);
        v4[20..24].copy_from_slice(&[0x30, 0x39, 0, 53]);
        assert!(matches_uplink(&g, &v4));
        v4[23] = 54;
        assert!(!matches_uplink(&g, &v4));
        assert!(in_prefix(
            "ff02::".parse().unwrap(),
            16,
            "ff02::2".parse().unwrap()
        ));
        assert!(!in_prefix(
            "10.0.0.0".parse().unwrap(),
            8,
            "11.0.0.1".parse().unwrap()
        ));
        assert!(in_prefix(
            "10.0.0.0".parse().unwrap(),
            0,
            "11.0.0.1".parse().unwrap()
        ));
    }
}
