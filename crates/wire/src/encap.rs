//! GTP-U encapsulation and decapsulation (TS 29.281 over UDP port 2152, TS 29.060 sec. 7.3 for
//! the outer headers' use).
//!
//! Encapsulation is headroom-style: the user packet already sits in the caller's buffer at
//! `inner_start`, and the Ethernet + IP + UDP + GTP-U headers are written into the bytes just
//! before it, so the payload is never copied. [`GtpuTunnel::encap_into`] is the copying form.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::ethernet::{EtherType, EthernetAddress, EthernetRepr, VlanTag};
use crate::frame::{parse_frame_with, FrameKind, ParseOptions, WireError};
use crate::gtpu::{self, GtpuRepr, PduSession};
use crate::ipv4::{protocol, Ipv4Repr};
use crate::ipv6::Ipv6Repr;
use crate::udp::{self, UdpChecksum, UdpRepr, GTPU_PORT};
use crate::EmitError;

/// Outer IP endpoints of a tunnel.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum OuterIp {
    /// IPv4 outer header.
    V4 {
        /// This node's tunnel address.
        src: Ipv4Addr,
        /// The peer (eNodeB / gNodeB) address.
        dst: Ipv4Addr,
    },
    /// IPv6 outer header.
    V6 {
        /// This node's tunnel address.
        src: Ipv6Addr,
        /// The peer address.
        dst: Ipv6Addr,
    },
}

impl OuterIp {
    fn header_len(&self) -> usize {
        match self {
            Self::V4 { .. } => crate::ipv4::HEADER_LEN,
            Self::V6 { .. } => crate::ipv6::HEADER_LEN,
        }
    }
    fn addrs(&self) -> (IpAddr, IpAddr) {
        match *self {
            Self::V4 { src, dst } => (src.into(), dst.into()),
            Self::V6 { src, dst } => (src.into(), dst.into()),
        }
    }
}

/// Everything needed to wrap a user packet in a GTP-U G-PDU frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct GtpuTunnel {
    /// Source MAC of the egress port.
    pub src_mac: EthernetAddress,
    /// Next-hop MAC.
    pub dst_mac: EthernetAddress,
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanTag>,
    /// Outer addresses.
    pub outer: OuterIp,
    /// Outer TTL / hop limit.
    pub ttl: u8,
    /// Outer IPv4 TOS byte or IPv6 traffic class.
    pub tos: u8,
    /// Outer IPv4 identification (ignored for IPv6).
    pub ident: u16,
    /// Outer IPv4 don't-fragment flag (ignored for IPv6).
    pub dont_frag: bool,
    /// UDP source port (2152, or a per-flow value for ECMP entropy).
    pub udp_src_port: u16,
    /// Compute the UDP checksum over IPv4 (one pass over the user packet). Over IPv6 it is
    /// always computed (RFC 8200 sec. 8.1).
    pub udp_checksum_v4: bool,
    /// The peer's TEID.
    pub teid: u32,
    /// Optional GTP-U sequence number (sets S, adds 4 header bytes).
    pub seq_number: Option<u16>,
    /// Optional PDU Session Container (5G N3: sets E, adds the 4-byte optional word and the
    /// 4-byte extension header [`PduSession::ext_header`], TS 29.281 sec. 5.2.2.7).
    pub pdu_session: Option<PduSession>,
}

impl GtpuTunnel {
    /// A tunnel with TTL 64, TOS 0, ident 0, DF set, source port 2152, no IPv4 UDP checksum and
    /// no sequence number.
    pub fn new(
        src_mac: EthernetAddress,
        dst_mac: EthernetAddress,
        outer: OuterIp,
        teid: u32,
    ) -> Self {
        Self {
            src_mac,
            dst_mac,
            vlan: None,
            outer,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: true,
            udp_src_port: GTPU_PORT,
            udp_checksum_v4: false,
            teid,
            seq_number: None,
            pdu_session: None,
        }
    }

    fn eth(&self) -> EthernetRepr {
        EthernetRepr {
            src_addr: self.src_mac,
            dst_addr: self.dst_mac,
            vlan: self.vlan,
            ethertype: match self.outer {
                OuterIp::V4 { .. } => EtherType::IPV4,
                OuterIp::V6 { .. } => EtherType::IPV6,
            },
        }
    }

    /// The container's extension header bytes (zeros without one).
    fn ext(&self) -> [u8; PduSession::EXT_LEN] {
        self.pdu_session
            .map_or([0; PduSession::EXT_LEN], |p| p.ext_header())
    }

    fn gtpu<'a>(&self, ext: &'a [u8; PduSession::EXT_LEN]) -> GtpuRepr<'a> {
        GtpuRepr {
            seq_number: self.seq_number,
            extensions: self
                .pdu_session
                .map(|_| (gtpu::ext_type::PDU_SESSION_CONTAINER, &ext[..])),
            ..GtpuRepr::g_pdu(self.teid)
        }
    }

    /// Bytes the headers take (the headroom [`encap_in_place`](Self::encap_in_place) needs):
    /// Ethernet 14/18 + IP 20/40 + UDP 8 + GTP-U 8/12 (16 with a PDU Session Container).
    pub fn header_len(&self) -> usize {
        self.eth().header_len()
            + self.outer.header_len()
            + udp::HEADER_LEN
            + self.gtpu(&self.ext()).header_len()
    }

    /// Writes the headers for the user packet `buf[inner_start..inner_start + inner_len]` into
    /// `buf[inner_start - header_len()..inner_start]` and returns the frame's start offset; the
    /// frame is `buf[start..inner_start + inner_len]`. The user packet is read (for the UDP
    /// checksum) but not moved.
    pub fn encap_in_place(
        &self,
        buf: &mut [u8],
        inner_start: usize,
        inner_len: usize,
    ) -> Result<usize, EncapError> {
        let inner_end = inner_start
            .checked_add(inner_len)
            .filter(|&e| e <= buf.len())
            .ok_or(EncapError::InnerOutOfBounds)?;
        let h = self.header_len();
        let start = inner_start.checked_sub(h).ok_or(EncapError::NoHeadroom {
            needed: h,
            available: inner_start,
        })?;
        let eth = self.eth();
        let l3 = start + eth.header_len();
        let l4 = l3 + self.outer.header_len();
        let g = l4 + udp::HEADER_LEN;
        let ext = self.ext();
        let gtpu = self.gtpu(&ext);
        let ip_payload = inner_end - l4;
        if inner_end - l3 > usize::from(u16::MAX)
            || (matches!(self.outer, OuterIp::V6 { .. }) && ip_payload > usize::from(u16::MAX))
        {
            return Err(EncapError::TooLong);
        }
        eth.emit(&mut buf[start..l3])?;
        match self.outer {
            OuterIp::V4 { src, dst } => Ipv4Repr {
                ttl: self.ttl,
                tos: self.tos,
                ident: self.ident,
                dont_frag: self.dont_frag,
                ..Ipv4Repr::new(src, dst, protocol::UDP, ip_payload)
            }
            .emit(&mut buf[l3..l4])?,
            OuterIp::V6 { src, dst } => Ipv6Repr {
                hop_limit: self.ttl,
                traffic_class: self.tos,
                ..Ipv6Repr::new(src, dst, protocol::UDP, ip_payload)
            }
            .emit(&mut buf[l3..l4])?,
        }
        gtpu.emit(&mut buf[g..inner_start], inner_len)?;
        let (s, d) = self.outer.addrs();
        let csum = if self.udp_checksum_v4 {
            UdpChecksum::Compute
        } else {
            UdpChecksum::None
        };
        UdpRepr {
            src_port: self.udp_src_port,
            dst_port: GTPU_PORT,
        }
        .emit(&mut buf[l4..inner_end], s, d, csum)?;
        Ok(start)
    }

    /// Copies `inner` into `out` after the headers and returns the frame length.
    pub fn encap_into(&self, inner: &[u8], out: &mut [u8]) -> Result<usize, EncapError> {
        let h = self.header_len();
        let total = h + inner.len();
        let available = out.len();
        let dst = out.get_mut(h..total).ok_or(EncapError::NoHeadroom {
            needed: total,
            available,
        })?;
        dst.copy_from_slice(inner);
        let start = self.encap_in_place(out, h, inner.len())?;
        debug_assert_eq!(start, 0);
        Ok(total)
    }
}

/// Why encapsulation failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum EncapError {
    /// Fewer than `header_len()` bytes before the user packet (or, for `encap_into`, an output
    /// buffer shorter than headers + packet).
    #[error("need {needed} bytes of headroom, have {available}")]
    NoHeadroom {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        available: usize,
    },
    /// `inner_start + inner_len` is past the buffer.
    #[error("user packet range past the buffer")]
    InnerOutOfBounds,
    /// The outer IP packet would exceed 65535 bytes.
    #[error("encapsulated packet longer than 65535 bytes")]
    TooLong,
    /// A header could not be written.
    #[error("emit: {0}")]
    Emit(#[from] EmitError),
}

/// A decapsulated G-PDU.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Decapsulated<'a> {
    /// TEID of the tunnel.
    pub teid: u32,
    /// Outer source address (the peer).
    pub outer_src: IpAddr,
    /// Outer destination address (this node).
    pub outer_dst: IpAddr,
    /// Offset of the user packet in the frame.
    pub inner_offset: usize,
    /// The user packet (an IPv4 or IPv6 packet, already validated).
    pub inner: &'a [u8],
}

/// Why decapsulation failed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum DecapError {
    /// The frame is malformed.
    #[error("malformed frame: {0}")]
    Malformed(#[from] WireError),
    /// The frame is well-formed but not GTP-U (not UDP to the GTP-U port, or a fragment).
    #[error("not GTP-U")]
    NotGtpu,
    /// GTP-U, but not a G-PDU (echo, error indication, end marker, ...): the message type.
    #[error("GTP-U message type {0} is not a G-PDU")]
    NotGPdu(u8),
}

/// Unwraps a G-PDU frame: returns the TEID and the user packet (which is also validated as an IP
/// packet). Uses [`ParseOptions::default`] (IPv4 header checksums verified, UDP checksums not).
pub fn decapsulate(frame: &[u8]) -> Result<Decapsulated<'_>, DecapError> {
    decapsulate_with(frame, &ParseOptions::default())
}

/// [`decapsulate`] with explicit options.
pub fn decapsulate_with<'a>(
    frame: &'a [u8],
    opts: &ParseOptions,
) -> Result<Decapsulated<'a>, DecapError> {
    let opts = ParseOptions {
        parse_gtpu: true,
        ..*opts
    };
    let p = parse_frame_with(frame, &opts)?;
    let FrameKind::Gtpu(g) = p.kind else {
        return Err(DecapError::NotGtpu);
    };
    let Some(inner) = g.inner else {
        return Err(DecapError::NotGPdu(g.msg_type));
    };
    Ok(Decapsulated {
        teid: g.teid,
        outer_src: g.outer.src_addr,
        outer_dst: g.outer.dst_addr,
        inner_offset: inner.offset,
        inner: inner.packet,
    })
}

/// Header bytes before the user packet of a minimal IPv4 G-PDU frame (14 + 20 + 8 + 8).
pub const V4_OVERHEAD: usize = 14 + 20 + 8 + gtpu::HEADER_LEN;
/// Header bytes before the user packet of a minimal IPv6 G-PDU frame (14 + 40 + 8 + 8).
pub const V6_OVERHEAD: usize = 14 + 40 + 8 + gtpu::HEADER_LEN;

/// GTP-U Recovery information element type (TS 29.281 sec. 8.2).
pub const IE_RECOVERY: u8 = 14;

/// Why [`answer_echo_request`] could not answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum EchoError {
    /// The frame is malformed.
    #[error("malformed frame: {0}")]
    Malformed(#[from] WireError),
    /// The output buffer is too small for the response.
    #[error("cannot write response: {0}")]
    Emit(#[from] EmitError),
}

/// If `frame` is a GTP-U Echo Request, writes the Echo Response into `out` (TS 29.281 sec.
/// 7.2.2: same sequence number, TEID 0, a Recovery IE with restart counter 0; sent back from
/// port 2152 to the request's source address and port, MACs swapped, same VLAN tag) and returns
/// its length. `Ok(None)` for any other well-formed frame.
pub fn answer_echo_request(frame: &[u8], out: &mut [u8]) -> Result<Option<usize>, EchoError> {
    let p = parse_frame_with(frame, &ParseOptions::default())?;
    let FrameKind::Gtpu(g) = p.kind else {
        return Ok(None);
    };
    if g.msg_type != gtpu::msg_type::ECHO_REQUEST {
        return Ok(None);
    }
    let crate::frame::L4::Udp { src_port, .. } = g.outer.l4 else {
        return Ok(None);
    };
    let b = crate::build::PacketBuilder {
        vlan: p.eth.vlan,
        ..crate::build::PacketBuilder::udp(
            p.eth.dst_addr,
            p.eth.src_addr,
            g.outer.dst_addr,
            g.outer.src_addr,
            GTPU_PORT,
            src_port,
        )
    };
    let h = b.header_len();
    let repr = GtpuRepr {
        msg_type: gtpu::msg_type::ECHO_RESPONSE,
        teid: 0,
        seq_number: Some(g.seq_number.unwrap_or(0)),
        npdu_number: None,
        extensions: None,
    };
    let gl = repr.header_len();
    let msg = crate::prefix_mut(out, h + gl + 2)?;
    repr.emit(&mut msg[h..], 2)?;
    msg[h + gl] = IE_RECOVERY;
    msg[h + gl + 1] = 0;
    Ok(Some(b.emit(out, gl + 2)?))
}

/// GTP-U information element types of an Error Indication (TS 29.281 sec. 8.3, 8.4).
pub mod ie {
    /// Tunnel Endpoint Identifier Data I (TV, 4 bytes).
    pub const TEID_DATA_I: u8 = 16;
    /// GTP-U Peer Address (TLV: 2-byte length, 4 or 16 bytes of address).
    pub const GTPU_PEER_ADDRESS: u8 = 133;
}

/// If `frame` is a G-PDU, writes the GTP-U Error Indication a node that has no tunnel for its
/// TEID sends back (TS 29.281 sec. 7.3.1): from the G-PDU's destination address and port 2152
/// to its source address and port 2152 (sec. 4.4.2.3), MACs swapped, same VLAN tag; header
/// TEID 0 with the S flag (sequence number 0) and a UDP Port extension header carrying the
/// G-PDU's UDP source port (sec. 5.2.2.1); IEs TEID Data I (the G-PDU's TEID) and GTP-U Peer
/// Address (the G-PDU's destination address). Returns its length; `Ok(None)` for any other
/// well-formed frame.
pub fn error_indication(frame: &[u8], out: &mut [u8]) -> Result<Option<usize>, EchoError> {
    let p = parse_frame_with(frame, &ParseOptions::default())?;
    let FrameKind::Gtpu(g) = p.kind else {
        return Ok(None);
    };
    if g.msg_type != gtpu::msg_type::G_PDU {
        return Ok(None);
    }
    let crate::frame::L4::Udp { src_port, .. } = g.outer.l4 else {
        return Ok(None);
    };
    let b = crate::build::PacketBuilder {
        vlan: p.eth.vlan,
        ..crate::build::PacketBuilder::udp(
            p.eth.dst_addr,
            p.eth.src_addr,
            g.outer.dst_addr,
            g.outer.src_addr,
            GTPU_PORT,
            GTPU_PORT,
        )
    };
    let h = b.header_len();
    let port = src_port.to_be_bytes();
    let ext = [1, port[0], port[1], gtpu::ext_type::NONE];
    let repr = GtpuRepr {
        msg_type: gtpu::msg_type::ERROR_INDICATION,
        teid: 0,
        seq_number: Some(0),
        npdu_number: None,
        extensions: Some((gtpu::ext_type::UDP_PORT, &ext[..])),
    };
    let gl = repr.header_len();
    let peer_len = match g.outer.dst_addr {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 16,
    };
    let ies = 5 + 3 + peer_len;
    let msg = crate::prefix_mut(out, h + gl + ies)?;
    repr.emit(&mut msg[h..], ies)?;
    let m = &mut msg[h + gl..];
    m[0] = ie::TEID_DATA_I;
    m[1..5].copy_from_slice(&g.teid.to_be_bytes());
    m[5] = ie::GTPU_PEER_ADDRESS;
    m[6..8].copy_from_slice(&(peer_len as u16).to_be_bytes());
    match g.outer.dst_addr {
        IpAddr::V4(a) => m[8..12].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => m[8..24].copy_from_slice(&a.octets()),
    }
    Ok(Some(b.emit(out, gl + ies)?))
}

/// Writes a GTP-U End Marker (TS 29.281 sec. 7.3.2) into `out` and returns its length: the
/// message a user plane sends on a tunnel's old path after the last G-PDU it sends there, when
/// the control plane switches the tunnel to another peer (a handover; PFCP's SNDEM flag), so
/// that the target knows no more packets come the old way. `teid` and `outer.dst` are the
/// OLD tunnel's (the peer's TEID and address), `outer.src` our tunnel address. Header: message
/// type 254, the TEID, length 0, no optional fields (no sequence number: sec. 5.1 asks the S
/// flag only of Echo, Error Indication and Supported Extension Headers Notification), no IEs
/// (the only one allowed is a Private Extension). UDP from and to port 2152, checksum computed
/// (IPv6: mandatory), TTL 64.
pub fn end_marker(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    outer: OuterIp,
    teid: u32,
    out: &mut [u8],
) -> Result<usize, EmitError> {
    let (s, d) = outer.addrs();
    let b = crate::build::PacketBuilder::udp(src_mac, dst_mac, s, d, GTPU_PORT, GTPU_PORT);
    let h = b.header_len();
    let repr = GtpuRepr {
        msg_type: gtpu::msg_type::END_MARKER,
        teid,
        seq_number: None,
        npdu_number: None,
        extensions: None,
    };
    let gl = repr.header_len();
    let msg = crate::prefix_mut(out, h + gl)?;
    repr.emit(&mut msg[h..], 0)?;
    b.emit(out, gl)
}
