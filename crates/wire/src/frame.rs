//! [`parse_frame`]: one call that classifies a whole Ethernet frame and extracts what the data
//! plane needs (flow keys, TEID, offsets), or says exactly why the frame is malformed.

use core::net::IpAddr;

use crate::arp::{ArpError, ArpPacket, ArpRepr};
use crate::ethernet::{EthError, EtherType, EthernetFrame, EthernetRepr};
use crate::flow::FiveTuple;
use crate::gtpu::{msg_type, GtpuError, GtpuPacket};
use crate::icmp::{IcmpError, IcmpPacket, IcmpRepr, IcmpVersion};
use crate::ipv4::{protocol, Fragment, Ipv4Error, Ipv4Packet};
use crate::ipv6::{Ipv6Error, Ipv6Packet};
use crate::tcp::{TcpError, TcpFlags, TcpPacket};
use crate::udp::{UdpError, UdpPacket, GTPU_PORT};

/// What [`parse_frame_with`] checks beyond lengths.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ParseOptions {
    /// Verify IPv4 header checksums (outer and inner). Cheap: 20-60 bytes. Default on.
    pub verify_ipv4_checksum: bool,
    /// Verify UDP/TCP/ICMP checksums (outer and inner). One pass over the payload. Default off.
    pub verify_l4_checksum: bool,
    /// UDP destination port recognised as GTP-U. Default 2152.
    pub gtpu_port: u16,
    /// Parse GTP-U inside UDP to the GTP-U port (and the inner IP packet of a G-PDU). Default on;
    /// off, such datagrams read as plain UDP.
    pub parse_gtpu: bool,
}

impl Default for ParseOptions {
    fn default() -> Self {
        Self {
            verify_ipv4_checksum: true,
            verify_l4_checksum: false,
            gtpu_port: GTPU_PORT,
            parse_gtpu: true,
        }
    }
}

/// Why [`parse_frame`] rejected a frame. `Copy`, with a stable [`label`](Self::label) and
/// [`index`](Self::index) so it can key a drop-counter array.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum WireError {
    /// Bad Ethernet header.
    #[error("ethernet: {0}")]
    Ethernet(EthError),
    /// Bad ARP packet.
    #[error("arp: {0}")]
    Arp(ArpError),
    /// Bad IPv4 packet (outer or inner).
    #[error("ipv4: {0}")]
    Ipv4(Ipv4Error),
    /// Bad IPv6 packet (outer or inner).
    #[error("ipv6: {0}")]
    Ipv6(Ipv6Error),
    /// Bad UDP datagram (outer or inner).
    #[error("udp: {0}")]
    Udp(UdpError),
    /// Bad TCP segment.
    #[error("tcp: {0}")]
    Tcp(TcpError),
    /// Bad ICMP/ICMPv6 message.
    #[error("icmp: {0}")]
    Icmp(IcmpError),
    /// Bad GTP-U message.
    #[error("gtpu: {0}")]
    Gtpu(GtpuError),
    /// A G-PDU whose payload is not an IPv4 or IPv6 packet (empty, or version nibble not 4/6).
    #[error("gtpu: G-PDU payload is not IPv4 or IPv6")]
    InnerNotIp,
}

impl From<EthError> for WireError {
    fn from(e: EthError) -> Self {
        Self::Ethernet(e)
    }
}
impl From<ArpError> for WireError {
    fn from(e: ArpError) -> Self {
        Self::Arp(e)
    }
}
impl From<Ipv4Error> for WireError {
    fn from(e: Ipv4Error) -> Self {
        Self::Ipv4(e)
    }
}
impl From<Ipv6Error> for WireError {
    fn from(e: Ipv6Error) -> Self {
        Self::Ipv6(e)
    }
}
impl From<UdpError> for WireError {
    fn from(e: UdpError) -> Self {
        Self::Udp(e)
    }
}
impl From<TcpError> for WireError {
    fn from(e: TcpError) -> Self {
        Self::Tcp(e)
    }
}
impl From<IcmpError> for WireError {
    fn from(e: IcmpError) -> Self {
        Self::Icmp(e)
    }
}
impl From<GtpuError> for WireError {
    fn from(e: GtpuError) -> Self {
        Self::Gtpu(e)
    }
}

impl WireError {
    /// Number of distinct errors (the length of [`ALL`](Self::ALL)).
    pub const COUNT: usize = 29;

    /// Every error, in [`index`](Self::index) order.
    pub const ALL: [WireError; Self::COUNT] = [
        Self::Ethernet(EthError::Truncated),
        Self::Ethernet(EthError::VlanTruncated),
        Self::Arp(ArpError::Truncated),
        Self::Arp(ArpError::Unsupported),
        Self::Ipv4(Ipv4Error::Truncated),
        Self::Ipv4(Ipv4Error::BadVersion),
        Self::Ipv4(Ipv4Error::BadHeaderLen),
        Self::Ipv4(Ipv4Error::BadTotalLen),
        Self::Ipv4(Ipv4Error::BadChecksum),
        Self::Ipv6(Ipv6Error::Truncated),
        Self::Ipv6(Ipv6Error::BadVersion),
        Self::Ipv6(Ipv6Error::BadPayloadLen),
        Self::Ipv6(Ipv6Error::ExtTruncated),
        Self::Ipv6(Ipv6Error::HopByHopNotFirst),
        Self::Ipv6(Ipv6Error::TooManyExtHeaders),
        Self::Udp(UdpError::Truncated),
        Self::Udp(UdpError::BadLength),
        Self::Udp(UdpError::BadChecksum),
        Self::Tcp(TcpError::Truncated),
        Self::Tcp(TcpError::BadDataOffset),
        Self::Tcp(TcpError::BadChecksum),
        Self::Icmp(IcmpError::Truncated),
        Self::Icmp(IcmpError::BadChecksum),
        Self::Gtpu(GtpuError::Truncated),
        Self::Gtpu(GtpuError::BadVersion),
        Self::Gtpu(GtpuError::BadProtocolType),
        Self::Gtpu(GtpuError::BadLength),
        Self::Gtpu(GtpuError::BadExtension),
        Self::InnerNotIp,
    ];

    /// A short snake_case name, stable, for metrics labels (`"ipv4_bad_checksum"`).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Ethernet(EthError::Truncated) => "eth_truncated",
            Self::Ethernet(EthError::VlanTruncated) => "eth_vlan_truncated",
            Self::Arp(ArpError::Truncated) => "arp_truncated",
            Self::Arp(ArpError::Unsupported) => "arp_unsupported",
            Self::Ipv4(Ipv4Error::Truncated) => "ipv4_truncated",
            Self::Ipv4(Ipv4Error::BadVersion) => "ipv4_bad_version",
            Self::Ipv4(Ipv4Error::BadHeaderLen) => "ipv4_bad_header_len",
            Self::Ipv4(Ipv4Error::BadTotalLen) => "ipv4_bad_total_len",
            Self::Ipv4(Ipv4Error::BadChecksum) => "ipv4_bad_checksum",
            Self::Ipv6(Ipv6Error::Truncated) => "ipv6_truncated",
            Self::Ipv6(Ipv6Error::BadVersion) => "ipv6_bad_version",
            Self::Ipv6(Ipv6Error::BadPayloadLen) => "ipv6_bad_payload_len",
            Self::Ipv6(Ipv6Error::ExtTruncated) => "ipv6_ext_truncated",
            Self::Ipv6(Ipv6Error::HopByHopNotFirst) => "ipv6_hop_by_hop_not_first",
            Self::Ipv6(Ipv6Error::TooManyExtHeaders) => "ipv6_too_many_ext_headers",
            Self::Udp(UdpError::Truncated) => "udp_truncated",
            Self::Udp(UdpError::BadLength) => "udp_bad_length",
            Self::Udp(UdpError::BadChecksum) => "udp_bad_checksum",
            Self::Tcp(TcpError::Truncated) => "tcp_truncated",
            Self::Tcp(TcpError::BadDataOffset) => "tcp_bad_data_offset",
            Self::Tcp(TcpError::BadChecksum) => "tcp_bad_checksum",
            Self::Icmp(IcmpError::Truncated) => "icmp_truncated",
            Self::Icmp(IcmpError::BadChecksum) => "icmp_bad_checksum",
            Self::Gtpu(GtpuError::Truncated) => "gtpu_truncated",
            Self::Gtpu(GtpuError::BadVersion) => "gtpu_bad_version",
            Self::Gtpu(GtpuError::BadProtocolType) => "gtpu_bad_protocol_type",
            Self::Gtpu(GtpuError::BadLength) => "gtpu_bad_length",
            Self::Gtpu(GtpuError::BadExtension) => "gtpu_bad_extension",
            Self::InnerNotIp => "gtpu_inner_not_ip",
        }
    }

    /// Position in [`ALL`](Self::ALL): `0..COUNT`, for an array of counters.
    pub fn index(&self) -> usize {
        match self {
            Self::Ethernet(EthError::Truncated) => 0,
            Self::Ethernet(EthError::VlanTruncated) => 1,
            Self::Arp(ArpError::Truncated) => 2,
            Self::Arp(ArpError::Unsupported) => 3,
            Self::Ipv4(Ipv4Error::Truncated) => 4,
            Self::Ipv4(Ipv4Error::BadVersion) => 5,
            Self::Ipv4(Ipv4Error::BadHeaderLen) => 6,
            Self::Ipv4(Ipv4Error::BadTotalLen) => 7,
            Self::Ipv4(Ipv4Error::BadChecksum) => 8,
            Self::Ipv6(Ipv6Error::Truncated) => 9,
            Self::Ipv6(Ipv6Error::BadVersion) => 10,
            Self::Ipv6(Ipv6Error::BadPayloadLen) => 11,
            Self::Ipv6(Ipv6Error::ExtTruncated) => 12,
            Self::Ipv6(Ipv6Error::HopByHopNotFirst) => 13,
            Self::Ipv6(Ipv6Error::TooManyExtHeaders) => 14,
            Self::Udp(UdpError::Truncated) => 15,
            Self::Udp(UdpError::BadLength) => 16,
            Self::Udp(UdpError::BadChecksum) => 17,
            Self::Tcp(TcpError::Truncated) => 18,
            Self::Tcp(TcpError::BadDataOffset) => 19,
            Self::Tcp(TcpError::BadChecksum) => 20,
            Self::Icmp(IcmpError::Truncated) => 21,
            Self::Icmp(IcmpError::BadChecksum) => 22,
            Self::Gtpu(GtpuError::Truncated) => 23,
            Self::Gtpu(GtpuError::BadVersion) => 24,
            Self::Gtpu(GtpuError::BadProtocolType) => 25,
            Self::Gtpu(GtpuError::BadLength) => 26,
            Self::Gtpu(GtpuError::BadExtension) => 27,
            Self::InnerNotIp => 28,
        }
    }
}

/// The upper-layer header, as far as the data plane cares.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum L4 {
    /// UDP.
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Length field (header + payload).
        len: u16,
    },
    /// TCP.
    Tcp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Flags.
        flags: TcpFlags,
    },
    /// ICMP (over IPv4) or ICMPv6.
    Icmp {
        /// Which ICMP.
        version: IcmpVersion,
        /// Type, code and echo fields.
        repr: IcmpRepr,
    },
    /// A protocol not parsed here (ESP, GRE, SCTP, ...), or a fragment (its upper-layer header
    /// is not parsed: only the first fragment has one, and it is usually incomplete).
    Unparsed,
}

/// An IP packet (outer, plain, or the inner packet of a G-PDU).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IpInfo<'a> {
    /// Source address.
    pub src_addr: IpAddr,
    /// Destination address.
    pub dst_addr: IpAddr,
    /// Upper-layer protocol (after any IPv6 extension headers).
    pub protocol: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// Set when the packet is a fragment (IPv4 MF/offset, or an IPv6 fragment header).
    pub fragment: Option<Fragment>,
    /// Offset of the IP header in the frame.
    pub offset: usize,
    /// Offset of the upper-layer header in the frame.
    pub l4_offset: usize,
    /// The IP packet itself, header to its length field (no Ethernet padding).
    pub packet: &'a [u8],
    /// The upper-layer header.
    pub l4: L4,
}

impl<'a> IpInfo<'a> {
    /// The upper-layer payload: after the UDP header (up to the UDP length), the TCP header
    /// (including options), or the 8-byte ICMP header; for an unparsed protocol or a fragment,
    /// everything after the IP headers.
    pub fn l4_payload(&self) -> &'a [u8] {
        let packet: &'a [u8] = self.packet;
        let rel = self.l4_offset - self.offset;
        let range = match self.l4 {
            L4::Udp { len, .. } => rel + crate::udp::HEADER_LEN..rel + usize::from(len),
            L4::Tcp { .. } => {
                let doff = packet.get(rel + 12).map_or(0, |b| usize::from(b >> 4) * 4);
                rel + doff..packet.len()
            }
            L4::Icmp { .. } => rel + crate::icmp::HEADER_LEN..packet.len(),
            L4::Unparsed => rel..packet.len(),
        };
        packet.get(range).unwrap_or(&[])
    }

    /// True for IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.dst_addr.is_ipv6()
    }

    /// The 5-tuple; `None` for a fragment. Protocols without ports have ports 0.
    pub fn five_tuple(&self) -> Option<FiveTuple> {
        if self.fragment.is_some() {
            return None;
        }
        let (src_port, dst_port) = match self.l4 {
            L4::Udp {
                src_port, dst_port, ..
            }
            | L4::Tcp {
                src_port, dst_port, ..
            } => (src_port, dst_port),
            _ => (0, 0),
        };
        Some(FiveTuple {
            protocol: self.protocol,
            src_addr: self.src_addr,
            src_port,
            dst_addr: self.dst_addr,
            dst_port,
        })
    }
}

/// A GTP-U message inside UDP.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GtpuInfo<'a> {
    /// The outer IP packet (its `l4` is the UDP header).
    pub outer: IpInfo<'a>,
    /// Offset of the GTP-U header in the frame.
    pub gtpu_offset: usize,
    /// Message type (255 = G-PDU, 1/2 = echo request/response, ...).
    pub msg_type: u8,
    /// Tunnel endpoint identifier.
    pub teid: u32,
    /// Sequence number, if the S flag is set.
    pub seq_number: Option<u16>,
    /// N-PDU number, if the PN flag is set.
    pub npdu_number: Option<u8>,
    /// Type of the first extension header, if any.
    pub first_ext_type: Option<u8>,
    /// For a G-PDU: the user packet.
    pub inner: Option<IpInfo<'a>>,
}

/// What the frame is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FrameKind<'a> {
    /// An Ethernet/IPv4 ARP packet.
    Arp(ArpRepr),
    /// An IP packet that is not GTP-U.
    Ip(IpInfo<'a>),
    /// GTP-U over UDP (any message type; `inner` set for a G-PDU).
    Gtpu(GtpuInfo<'a>),
    /// Another EtherType (LLDP, ...): well-formed Ethernet, nothing we handle.
    Other(EtherType),
}

/// A classified frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ParsedFrame<'a> {
    /// The Ethernet header.
    pub eth: EthernetRepr,
    /// Offset of the Ethernet payload (14 or 18).
    pub l3_offset: usize,
    /// What it carries.
    pub kind: FrameKind<'a>,
}

impl<'a> ParsedFrame<'a> {
    /// The innermost IP packet: a G-PDU's user packet, or the plain IP packet. `None` for ARP,
    /// other EtherTypes, and GTP-U messages other than G-PDU.
    pub fn ip(&self) -> Option<&IpInfo<'a>> {
        match &self.kind {
            FrameKind::Ip(ip) => Some(ip),
            FrameKind::Gtpu(g) => g.inner.as_ref(),
            _ => None,
        }
    }

    /// The outermost IP packet (the tunnel's outer header for GTP-U).
    pub fn outer_ip(&self) -> Option<&IpInfo<'a>> {
        match &self.kind {
            FrameKind::Ip(ip) => Some(ip),
            FrameKind::Gtpu(g) => Some(&g.outer),
            _ => None,
        }
    }

    /// Destination address of the innermost IP packet (the LTE downstream key: the UE's address).
    pub fn dst_addr(&self) -> Option<IpAddr> {
        self.ip().map(|i| i.dst_addr)
    }

    /// Source address of the innermost IP packet (the upstream key: the UE's address).
    pub fn src_addr(&self) -> Option<IpAddr> {
        self.ip().map(|i| i.src_addr)
    }

    /// Upper-layer payload of the innermost IP packet (see [`IpInfo::l4_payload`]).
    pub fn l4_payload(&self) -> Option<&'a [u8]> {
        self.ip().map(IpInfo::l4_payload)
    }

    /// 5-tuple of the innermost IP packet; `None` without one or for a fragment.
    pub fn five_tuple(&self) -> Option<FiveTuple> {
        self.ip().and_then(IpInfo::five_tuple)
    }

    /// TEID, for GTP-U.
    pub fn teid(&self) -> Option<u32> {
        match &self.kind {
            FrameKind::Gtpu(g) => Some(g.teid),
            _ => None,
        }
    }

    /// True when the outer or inner IP packet is a fragment.
    pub fn is_fragment(&self) -> bool {
        self.outer_ip().is_some_and(|i| i.fragment.is_some())
            || self.ip().is_some_and(|i| i.fragment.is_some())
    }
}

/// [`parse_frame_with`] with [`ParseOptions::default`].
pub fn parse_frame(frame: &[u8]) -> Result<ParsedFrame<'_>, WireError> {
    parse_frame_with(frame, &ParseOptions::default())
}

/// Classifies an Ethernet frame: ARP, IP (with its upper-layer header), GTP-U (with the inner
/// packet of a G-PDU), or another EtherType; or the reason it is malformed. Never panics, never
/// allocates; cost is proportional to the headers (plus one pass over the payload per verified
/// L4 checksum).
pub fn parse_frame_with<'a>(
    frame: &'a [u8],
    opts: &ParseOptions,
) -> Result<ParsedFrame<'a>, WireError> {
    let eth = EthernetFrame::new_checked(frame)?;
    let repr = EthernetRepr::parse(&eth);
    let l3 = eth.header_len();
    let kind = match repr.ethertype {
        EtherType::ARP => FrameKind::Arp(ArpRepr::parse(&ArpPacket::new_checked(eth.payload())?)),
        EtherType::IPV4 | EtherType::IPV6 => {
            let ip = parse_ip(frame, l3, repr.ethertype == EtherType::IPV6, opts)?;
            match gtpu_offset(&ip, opts) {
                Some(goff) => FrameKind::Gtpu(parse_gtpu(frame, ip, goff, opts)?),
                None => FrameKind::Ip(ip),
            }
        }
        other => FrameKind::Other(other),
    };
    Ok(ParsedFrame {
        eth: repr,
        l3_offset: l3,
        kind,
    })
}

/// Parses the IP packet that starts at `frame[off..]` and its upper-layer header.
fn parse_ip<'a>(
    frame: &'a [u8],
    off: usize,
    v6: bool,
    opts: &ParseOptions,
) -> Result<IpInfo<'a>, WireError> {
    let buf = frame.get(off..).unwrap_or(&[]);
    let (src, dst, proto, ttl, fragment, l4_rel, packet, csum_dst) = if v6 {
        let p = Ipv6Packet::new_checked(buf)?;
        let up = p.upper_layer()?;
        let s = IpAddr::V6(p.src_addr());
        let d = IpAddr::V6(p.dst_addr());
        (
            s,
            d,
            up.protocol,
            p.hop_limit(),
            up.fragment,
            crate::ipv6::HEADER_LEN + up.offset,
            &buf[..crate::ipv6::HEADER_LEN + usize::from(p.payload_len())],
            up.final_dst.map_or(d, IpAddr::V6),
        )
    } else {
        let p = Ipv4Packet::new_checked(buf)?;
        if opts.verify_ipv4_checksum && !p.verify_checksum() {
            return Err(Ipv4Error::BadChecksum.into());
        }
        let s = IpAddr::V4(p.src_addr());
        let d = IpAddr::V4(p.dst_addr());
        (
            s,
            d,
            p.protocol(),
            p.ttl(),
            p.fragment(),
            p.header_len(),
            &buf[..usize::from(p.total_len())],
            d,
        )
    };
    let mut info = IpInfo {
        src_addr: src,
        dst_addr: dst,
        protocol: proto,
        ttl,
        fragment,
        offset: off,
        l4_offset: off + l4_rel,
        packet,
        l4: L4::Unparsed,
    };
    if fragment.is_some() {
        return Ok(info);
    }
    let seg = packet.get(l4_rel..).unwrap_or(&[]);
    // Upper-layer checksums use the final destination (RFC 8200 sec. 8.1).
    let (src, dst) = (src, csum_dst);
    let addrs = (src, dst);
    info.l4 = match proto {
        protocol::UDP => {
            let u = UdpPacket::new_checked(seg)?;
            if opts.verify_l4_checksum && !u.verify_checksum(src, dst) {
                return Err(UdpError::BadChecksum.into());
            }
            L4::Udp {
                src_port: u.src_port(),
                dst_port: u.dst_port(),
                len: u.len(),
            }
        }
        protocol::TCP => {
            let t = TcpPacket::new_checked(seg)?;
            if opts.verify_l4_checksum && !t.verify_checksum(src, dst) {
                return Err(TcpError::BadChecksum.into());
            }
            L4::Tcp {
                src_port: t.src_port(),
                dst_port: t.dst_port(),
                flags: t.flags(),
            }
        }
        protocol::ICMP if !v6 => icmp(seg, IcmpVersion::V4, addrs, opts)?,
        protocol::ICMPV6 if v6 => icmp(seg, IcmpVersion::V6, addrs, opts)?,
        _ => L4::Unparsed,
    };
    Ok(info)
}

fn icmp(
    seg: &[u8],
    version: IcmpVersion,
    addrs: (IpAddr, IpAddr),
    opts: &ParseOptions,
) -> Result<L4, WireError> {
    let p = IcmpPacket::new_checked(seg)?;
    if opts.verify_l4_checksum && !p.verify_checksum(version, Some(addrs)) {
        return Err(IcmpError::BadChecksum.into());
    }
    Ok(L4::Icmp {
        version,
        repr: IcmpRepr::parse(&p, version),
    })
}

/// Where GTP-U starts in the frame, if this packet is UDP to the GTP-U port.
fn gtpu_offset(ip: &IpInfo<'_>, opts: &ParseOptions) -> Option<usize> {
    match ip.l4 {
        L4::Udp { dst_port, .. } if opts.parse_gtpu && dst_port == opts.gtpu_port => {
            Some(ip.l4_offset + crate::udp::HEADER_LEN)
        }
        _ => None,
    }
}

fn parse_gtpu<'a>(
    frame: &'a [u8],
    outer: IpInfo<'a>,
    goff: usize,
    opts: &ParseOptions,
) -> Result<GtpuInfo<'a>, WireError> {
    // The UDP datagram ends at its length field, which new_checked bounded by the IP packet.
    let L4::Udp { len, .. } = outer.l4 else {
        return Err(UdpError::Truncated.into());
    };
    let udp_end = outer.l4_offset + usize::from(len);
    let msg = frame.get(goff..udp_end).unwrap_or(&[]);
    let g = GtpuPacket::new_checked(msg)?;
    let mut info = GtpuInfo {
        outer,
        gtpu_offset: goff,
        msg_type: g.msg_type(),
        teid: g.teid(),
        seq_number: g.seq_number(),
        npdu_number: g.npdu_number(),
        first_ext_type: g.first_ext_type(),
        inner: None,
    };
    if info.msg_type == msg_type::G_PDU {
        let inner_off = goff + g.header_len();
        let inner_end = goff + crate::gtpu::HEADER_LEN + usize::from(g.length());
        let inner = frame.get(inner_off..inner_end).unwrap_or(&[]);
        let v6 = match inner.first().map(|b| b >> 4) {
            Some(4) => false,
            Some(6) => true,
            _ => return Err(WireError::InnerNotIp),
        };
        // Parse the inner packet on its own slice so its lengths are bounded by the G-PDU, then
        // shift offsets to frame coordinates.
        let mut ip = parse_ip(inner, 0, v6, opts)?;
        ip.offset += inner_off;
        ip.l4_offset += inner_off;
        info.inner = Some(ip);
    }
    Ok(info)
}
