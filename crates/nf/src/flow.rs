//! The parser every NF runs on outside bytes: an Ethernet frame to the IPv4 5-tuple view the
//! NFs translate ([`parse`]), and the 13-byte flow key ([`FlowKey`]).
//!
//! The frame is checked by [`sb_wire::parse_frame_with`] (lengths, the IPv4 header checksum;
//! fuzzed there), then this module keeps only what the NFs handle: unfragmented IPv4 TCP, UDP
//! and ICMP echo request/reply. Everything else is a [`ParseError`] naming why, never a panic.
//! IPv6 is not handled by these NFs.

use sb_engine::Drop;
use sb_wire::{parse_frame_with, FrameKind, IcmpRepr, ParseOptions, WireError, L4};
use std::net::{IpAddr, Ipv4Addr};

/// Bytes of a flow key: protocol (1), source address (4), source port (2, big endian),
/// destination address (4), destination port (2), the order of [`sb_wire::FiveTuple::key`].
pub const KEY_BYTES: usize = 13;

/// IP protocol numbers.
pub mod ip_proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
}

/// What upper layer a packet has, as far as the NFs care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// ICMP echo request: its identifier stands in for both ports.
    IcmpEchoRequest,
    /// ICMP echo reply: its identifier stands in for both ports.
    IcmpEchoReply,
}

impl Proto {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Proto::Tcp => ip_proto::TCP,
            Proto::Udp => ip_proto::UDP,
            Proto::IcmpEchoRequest | Proto::IcmpEchoReply => ip_proto::ICMP,
        }
    }
}

/// A 5-tuple as a table key ([`KEY_BYTES`]). For ICMP echo both ports are the identifier, so
/// the key of a request's answer is the request's [`reversed`](Self::reversed) key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowKey(pub [u8; KEY_BYTES]);

impl FlowKey {
    /// The key of a flow.
    pub fn new(protocol: u8, src: Ipv4Addr, src_port: u16, dst: Ipv4Addr, dst_port: u16) -> Self {
        let mut k = [0u8; KEY_BYTES];
        k[0] = protocol;
        k[1..5].copy_from_slice(&src.octets());
        k[5..7].copy_from_slice(&src_port.to_be_bytes());
        k[7..11].copy_from_slice(&dst.octets());
        k[11..13].copy_from_slice(&dst_port.to_be_bytes());
        FlowKey(k)
    }

    /// A key from table bytes (`None` unless [`KEY_BYTES`] long).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        Some(FlowKey(b.try_into().ok()?))
    }

    /// The IP protocol number.
    pub fn protocol(&self) -> u8 {
        self.0[0]
    }

    /// The source address.
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.0[1], self.0[2], self.0[3], self.0[4])
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.0[5], self.0[6]])
    }

    /// The destination address.
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.0[7], self.0[8], self.0[9], self.0[10])
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.0[11], self.0[12]])
    }

    /// The key of the other direction (source and destination swapped).
    pub fn reversed(&self) -> Self {
        FlowKey::new(
            self.protocol(),
            self.dst(),
            self.dst_port(),
            self.src(),
            self.src_port(),
        )
    }
}

/// Why a frame is not one the NFs translate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Malformed: the wire parser says why.
    #[error("malformed frame: {0}")]
    Wire(#[from] WireError),
    /// Well-formed, but not an IPv4 packet (ARP, IPv6, another EtherType).
    #[error("not an IPv4 packet")]
    NotIpv4,
    /// An IPv4 fragment: only the first has ports, so fragments are not translated.
    #[error("an IPv4 fragment")]
    Fragment,
    /// An upper-layer protocol the NFs do not handle (not TCP, UDP or ICMP).
    #[error("protocol {0} not handled")]
    Protocol(u8),
    /// An ICMP message other than an echo request or reply.
    #[error("an ICMP message other than echo")]
    IcmpNotEcho,
}

impl ParseError {
    /// The engine's drop reason: a malformed frame by its wire error, a frame that is not
    /// IPv4 [`Drop::NotIp`], a fragment [`Drop::OuterFragment`], a protocol or ICMP message
    /// without a flow key [`Drop::UnknownFlow`].
    pub fn drop_reason(self) -> Drop {
        match self {
            ParseError::Wire(e) => Drop::Malformed(e),
            ParseError::NotIpv4 => Drop::NotIp,
            ParseError::Fragment => Drop::OuterFragment,
            ParseError::Protocol(_) | ParseError::IcmpNotEcho => Drop::UnknownFlow,
        }
    }
}

/// An IPv4 packet the NFs translate, with where its headers are in the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet {
    /// The upper layer.
    pub proto: Proto,
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port (ICMP echo: the identifier).
    pub src_port: u16,
    /// Destination port (ICMP echo: the identifier).
    pub dst_port: u16,
    /// TCP flags (0 for the others).
    pub tcp_flags: u16,
    /// TTL.
    pub ttl: u8,
    /// Offset of the IPv4 header in the frame.
    pub ip_offset: usize,
    /// Length of the IPv4 packet (its total length field; Ethernet padding excluded).
    pub ip_len: usize,
    /// Offset of the upper-layer header from the IPv4 header (the IPv4 header length).
    pub l4_rel: usize,
}

impl Packet {
    /// The packet's flow key.
    pub fn key(&self) -> FlowKey {
        FlowKey::new(
            self.proto.number(),
            self.src,
            self.src_port,
            self.dst,
            self.dst_port,
        )
    }

    /// True for a TCP packet with `flag` ([`sb_wire::TcpFlags`] bits) set.
    pub fn has_tcp_flag(&self, flag: sb_wire::TcpFlags) -> bool {
        self.proto == Proto::Tcp && self.tcp_flags & flag.0 == flag.0
    }

    /// Encodes where the packet is for [`sb_io::Meta::user`], from [`App::downstream_key`] to
    /// [`App::apply`](sb_engine::App::apply): the IPv4 offset (8 bits), the IPv4 header length
    /// / 4 (4 bits), the upper layer (2 bits), the IPv4 length (16 bits).
    ///
    /// [`App::downstream_key`]: sb_engine::App::downstream_key
    pub fn meta_user(&self) -> u32 {
        let proto = match self.proto {
            Proto::Tcp => 0,
            Proto::Udp => 1,
            Proto::IcmpEchoRequest => 2,
            Proto::IcmpEchoReply => 3,
        };
        (self.ip_offset as u32 & 0xff)
            | ((self.l4_rel as u32 / 4) & 0xf) << 8
            | proto << 12
            | (self.ip_len as u32 & 0xffff) << 16
    }
}

/// Where a packet is in its frame, as [`Packet::meta_user`] encoded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Offset of the IPv4 header in the frame.
    pub ip_offset: usize,
    /// The IPv4 header length.
    pub l4_rel: usize,
    /// The upper layer.
    pub proto: Proto,
    /// The IPv4 packet's length.
    pub ip_len: usize,
}

impl Location {
    /// Decodes [`Packet::meta_user`].
    pub fn from_meta_user(user: u32) -> Location {
        Location {
            ip_offset: (user & 0xff) as usize,
            l4_rel: ((user >> 8) & 0xf) as usize * 4,
            proto: match (user >> 12) & 3 {
                0 => Proto::Tcp,
                1 => Proto::Udp,
                2 => Proto::IcmpEchoRequest,
                _ => Proto::IcmpEchoReply,
            },
            ip_len: (user >> 16) as usize,
        }
    }
}

impl From<&Packet> for Location {
    fn from(p: &Packet) -> Location {
        Location {
            ip_offset: p.ip_offset,
            l4_rel: p.l4_rel,
            proto: p.proto,
            ip_len: p.ip_len,
        }
    }
}

/// What the NFs check: lengths and the IPv4 header checksum, not the L4 checksums (the
/// incremental updates keep a bad one bad). UDP to port 2152 is plain UDP here.
pub const OPTIONS: ParseOptions = ParseOptions {
    verify_ipv4_checksum: true,
    verify_l4_checksum: false,
    gtpu_port: sb_wire::GTPU_PORT,
    parse_gtpu: false,
};

/// The `App::downstream_key` of the 5-tuple NFs (NAT, firewall, load balancer): parses
/// `frame`, writes its 5-tuple key into `key` and the parsed offsets into `meta.user`.
pub fn downstream_key(frame: &[u8], key: &mut [u8], meta: &mut sb_io::Meta) -> Result<(), Drop> {
    let p = parse(frame).map_err(|e| e.drop_reason())?;
    key.copy_from_slice(&p.key().0);
    meta.user = p.meta_user();
    Ok(())
}

/// Parses an Ethernet frame into the NFs' view. Never panics.
pub fn parse(frame: &[u8]) -> Result<Packet, ParseError> {
    let p = parse_frame_with(frame, &OPTIONS)?;
    let FrameKind::Ip(ip) = p.kind else {
        return Err(ParseError::NotIpv4);
    };
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (ip.src_addr, ip.dst_addr) else {
        return Err(ParseError::NotIpv4);
    };
    if ip.fragment.is_some() {
        return Err(ParseError::Fragment);
    }
    let (proto, src_port, dst_port, tcp_flags) = match ip.l4 {
        L4::Tcp {
            src_port,
            dst_port,
            flags,
        } => (Proto::Tcp, src_port, dst_port, flags.0),
        L4::Udp {
            src_port, dst_port, ..
        } => (Proto::Udp, src_port, dst_port, 0),
        L4::Icmp { repr, .. } => match repr {
            IcmpRepr::EchoRequest { ident, .. } => (Proto::IcmpEchoRequest, ident, ident, 0),
            IcmpRepr::EchoReply { ident, .. } => (Proto::IcmpEchoReply, ident, ident, 0),
            IcmpRepr::Other { .. } => return Err(ParseError::IcmpNotEcho),
        },
        L4::Unparsed => return Err(ParseError::Protocol(ip.protocol)),
    };
    let l4_rel = ip.l4_offset.saturating_sub(ip.offset);
    // The offsets must fit the metadata word (an 802.1Q tag at most before the header).
    if ip.offset > 0xff || l4_rel > 60 || ip.packet.len() > 0xffff {
        return Err(ParseError::NotIpv4);
    }
    Ok(Packet {
        proto,
        src,
        dst,
        src_port,
        dst_port,
        tcp_flags,
        ttl: ip.ttl,
        ip_offset: ip.offset,
        ip_len: ip.packet.len(),
        l4_rel,
    })
}
