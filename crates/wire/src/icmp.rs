//! ICMP for IPv4 (RFC 792) and ICMPv6 (RFC 4443): type, code, checksum, and echo
//! identifier/sequence.
//!
//! Both views need the 8-byte header (type, code, checksum, 4 bytes of message body: for echo the
//! identifier and sequence number). ICMPv4's checksum covers the message; ICMPv6's adds the IPv6
//! pseudo-header.

use core::net::IpAddr;

use crate::checksum;
use crate::field::{be16, set_be16};
use crate::ipv4::protocol;
use crate::EmitError;

/// Length of the ICMP header including the 4-byte rest-of-header.
pub const HEADER_LEN: usize = 8;

/// ICMPv4 echo reply type.
pub const V4_ECHO_REPLY: u8 = 0;
/// ICMPv4 echo request type.
pub const V4_ECHO_REQUEST: u8 = 8;
/// ICMPv6 echo request type.
pub const V6_ECHO_REQUEST: u8 = 128;
/// ICMPv6 echo reply type.
pub const V6_ECHO_REPLY: u8 = 129;

/// Why a buffer is not a well-formed ICMP message.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum IcmpError {
    /// Shorter than the 8-byte header.
    #[error("ICMP message shorter than 8 bytes")]
    Truncated,
    /// The checksum does not verify.
    #[error("ICMP checksum mismatch")]
    BadChecksum,
}

/// Which ICMP: the checksum rules and echo type numbers differ.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum IcmpVersion {
    /// ICMP over IPv4 (protocol 1).
    V4,
    /// ICMPv6 (next header 58).
    V6,
}

/// A checked view of an ICMP or ICMPv6 message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wraps a buffer without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking the 8-byte header fits; afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, IcmpError> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(IcmpError::Truncated);
        }
        Ok(Self { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Echo identifier (bytes 4-5; meaningful for echo messages).
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }
    /// Echo sequence number (bytes 6-7; meaningful for echo messages).
    pub fn echo_seq(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }
    /// Bytes after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }
    /// True when the checksum verifies. `addrs` is needed for ICMPv6 (pseudo-header) and ignored
    /// for ICMPv4.
    pub fn verify_checksum(&self, version: IcmpVersion, addrs: Option<(IpAddr, IpAddr)>) -> bool {
        let b = self.buffer.as_ref();
        match version {
            IcmpVersion::V4 => checksum::fold(checksum::accumulate(0, b)) == 0xffff,
            IcmpVersion::V6 => match addrs {
                Some((s, d)) => checksum::upper_layer(s, d, protocol::ICMPV6, b) == Some(0),
                None => false,
            },
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Computes and stores the checksum (`addrs` required for ICMPv6).
    pub fn fill_checksum(
        &mut self,
        version: IcmpVersion,
        addrs: Option<(IpAddr, IpAddr)>,
    ) -> Result<(), EmitError> {
        let b = self.buffer.as_mut();
        set_be16(b, 2, 0);
        let c = match version {
            IcmpVersion::V4 => checksum::checksum(b),
            IcmpVersion::V6 => {
                let (s, d) = addrs.ok_or(EmitError::AddressFamilyMismatch)?;
                checksum::upper_layer(s, d, protocol::ICMPV6, b)
                    .ok_or(EmitError::AddressFamilyMismatch)?
            }
        };
        set_be16(b, 2, c);
        Ok(())
    }
}

/// The fields of an ICMP header.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum IcmpRepr {
    /// Echo request (v4 type 8, v6 type 128).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
    },
    /// Echo reply (v4 type 0, v6 type 129).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
    },
    /// Any other message.
    Other {
        /// Message type.
        msg_type: u8,
        /// Code.
        code: u8,
        /// The 4 bytes after the checksum.
        rest: [u8; 4],
    },
}

impl IcmpRepr {
    /// Reads a checked message. Echo requires code 0; otherwise it reads as `Other`.
    pub fn parse<T: AsRef<[u8]>>(p: &IcmpPacket<T>, version: IcmpVersion) -> Self {
        let (req, rep) = match version {
            IcmpVersion::V4 => (V4_ECHO_REQUEST, V4_ECHO_REPLY),
            IcmpVersion::V6 => (V6_ECHO_REQUEST, V6_ECHO_REPLY),
        };
        let (t, c) = (p.msg_type(), p.code());
        if c == 0 && t == req {
            Self::EchoRequest {
                ident: p.echo_ident(),
                seq: p.echo_seq(),
            }
        } else if c == 0 && t == rep {
            Self::EchoReply {
                ident: p.echo_ident(),
                seq: p.echo_seq(),
            }
        } else {
            let b = p.buffer.as_ref();
            Self::Other {
                msg_type: t,
                code: c,
                rest: [b[4], b[5], b[6], b[7]],
            }
        }
    }

    /// Writes the 8-byte header into `message` (header + data, data in place) with checksum.
    pub fn emit(
        &self,
        message: &mut [u8],
        version: IcmpVersion,
        addrs: Option<(IpAddr, IpAddr)>,
    ) -> Result<(), EmitError> {
        if message.len() < HEADER_LEN {
            return Err(EmitError::BufferTooSmall {
                needed: HEADER_LEN,
                got: message.len(),
            });
        }
        let (req, rep) = match version {
            IcmpVersion::V4 => (V4_ECHO_REQUEST, V4_ECHO_REPLY),
            IcmpVersion::V6 => (V6_ECHO_REQUEST, V6_ECHO_REPLY),
        };
        match *self {
            Self::EchoRequest { ident, seq } | Self::EchoReply { ident, seq } => {
                message[0] = if matches!(self, Self::EchoRequest { .. }) {
                    req
                } else {
                    rep
                };
                message[1] = 0;
                set_be16(message, 4, ident);
                set_be16(message, 6, seq);
            }
            Self::Other {
                msg_type,
                code,
                rest,
            } => {
                message[0] = msg_type;
                message[1] = code;
                message[4..8].copy_from_slice(&rest);
            }
        }
        IcmpPacket::new_unchecked(message).fill_checksum(version, addrs)
    }
}

/// ICMPv4 destination unreachable type (code 4: fragmentation needed and DF set).
pub const V4_DEST_UNREACHABLE: u8 = 3;
/// ICMPv4 code of "fragmentation needed and DF set" (RFC 792, RFC 1191).
pub const V4_CODE_FRAG_NEEDED: u8 = 4;
/// ICMPv4 time exceeded type (code 0: TTL exceeded in transit).
pub const V4_TIME_EXCEEDED: u8 = 11;
/// ICMPv6 packet too big type (RFC 4443 sec. 3.2).
pub const V6_PACKET_TOO_BIG: u8 = 2;
/// ICMPv6 time exceeded type (code 0: hop limit exceeded in transit).
pub const V6_TIME_EXCEEDED: u8 = 3;
/// The smallest IPv6 MTU: an ICMPv6 error is at most this long (RFC 4443 sec. 2.4 (c)).
pub const IPV6_MIN_MTU: usize = 1280;
/// Bytes an ICMPv4 error puts in front of its quote (IPv4 20 + ICMP 8).
pub const V4_ERROR_OVERHEAD: usize = crate::ipv4::HEADER_LEN + HEADER_LEN;
/// Bytes an ICMPv6 error puts in front of its quote (IPv6 40 + ICMPv6 8).
pub const V6_ERROR_OVERHEAD: usize = crate::ipv6::HEADER_LEN + HEADER_LEN;
/// TTL / hop limit of the errors [`error_in_place`] writes.
pub const ERROR_TTL: u8 = 64;

/// An error a router sends back about a packet it did not forward.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum ErrorMessage {
    /// The TTL / hop limit ran out: ICMPv4 type 11 code 0, ICMPv6 type 3 code 0.
    TimeExceeded,
    /// The packet does not fit the next link: ICMPv4 destination unreachable, fragmentation
    /// needed (type 3 code 4, RFC 1191: the next-hop MTU in bytes 6-7), ICMPv6 packet too big
    /// (type 2, the MTU in bytes 4-7).
    TooBig {
        /// The largest packet that fits (the next-hop MTU the sender should use).
        mtu: u16,
    },
}

/// Why [`error_in_place`] wrote no error (RFC 1122 sec. 3.2.2, RFC 1812 sec. 4.3.2.7, RFC 4443
/// sec. 2.4 (e)).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum Refused {
    /// The bytes are not a well-formed IPv4 or IPv6 packet.
    #[error("not a well-formed IP packet")]
    Malformed,
    /// The packet is itself an ICMP error (never answered with another).
    #[error("the packet is an ICMP error")]
    AboutIcmpError,
    /// A fragment other than the first.
    #[error("a non-first fragment")]
    Fragment,
    /// Its source is not a unicast address (unspecified, loopback, multicast, broadcast) or its
    /// destination is multicast or broadcast.
    #[error("not between unicast addresses")]
    NotUnicast,
    /// Fewer bytes before the packet than the new headers need.
    #[error("no headroom for the error's headers")]
    NoHeadroom,
}

/// True for an ICMPv4 type that is an error message (RFC 792, RFC 1812 sec. 4.3.2.7).
pub fn is_v4_error_type(t: u8) -> bool {
    matches!(t, 3 | 4 | 5 | 11 | 12)
}

/// Turns the IP packet `buf[ip_start..ip_start + ip_len]` into an ICMP error about it, sent by
/// `src_v4` / `src_v6` (the family of the packet picks one) back to the packet's source, in
/// place: the new IP and ICMP headers are written into the bytes just before the packet, which
/// stays where it is and becomes the quote: IPv4 its header and the first 8 bytes of its
/// payload (RFC 792), IPv6 as much as keeps the error within 1280 bytes (RFC 4443 sec. 2.4
/// (c)). Returns the error's `(start, len)` in `buf`. Checksums are computed; TTL / hop limit
/// [`ERROR_TTL`], IPv4 DF clear, TOS 0xc0 (internetwork control).
///
/// Refuses what the RFCs say must not be answered: ICMP errors, non-first fragments, packets
/// from non-unicast sources or to multicast / broadcast destinations.
pub fn error_in_place(
    buf: &mut [u8],
    ip_start: usize,
    ip_len: usize,
    src_v4: core::net::Ipv4Addr,
    src_v6: core::net::Ipv6Addr,
    msg: ErrorMessage,
) -> Result<(usize, usize), Refused> {
    let end = ip_start.checked_add(ip_len).ok_or(Refused::Malformed)?;
    let ip = buf.get(ip_start..end).ok_or(Refused::Malformed)?;
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let p = crate::ipv4::Ipv4Packet::new_checked(ip).map_err(|_| Refused::Malformed)?;
            let (src, dst) = (p.src_addr(), p.dst_addr());
            if p.frag_offset() != 0 {
                return Err(Refused::Fragment);
            }
            let hl = p.header_len();
            if p.protocol() == protocol::ICMP && ip.get(hl).is_some_and(|&t| is_v4_error_type(t)) {
                return Err(Refused::AboutIcmpError);
            }
            let bad_src = src.is_unspecified()
                || src.is_loopback()
                || src.is_multicast()
                || src.is_broadcast();
            if bad_src || dst.is_multicast() || dst.is_broadcast() {
                return Err(Refused::NotUnicast);
            }
            let quote = (hl + 8).min(ip_len);
            let start = ip_start
                .checked_sub(V4_ERROR_OVERHEAD)
                .ok_or(Refused::NoHeadroom)?;
            let icmp_len = HEADER_LEN + quote;
            let out = &mut buf[start..ip_start + quote];
            let repr = match msg {
                ErrorMessage::TimeExceeded => IcmpRepr::Other {
                    msg_type: V4_TIME_EXCEEDED,
                    code: 0,
                    rest: [0; 4],
                },
                ErrorMessage::TooBig { mtu } => {
                    let m = mtu.to_be_bytes();
                    IcmpRepr::Other {
                        msg_type: V4_DEST_UNREACHABLE,
                        code: V4_CODE_FRAG_NEEDED,
                        rest: [0, 0, m[0], m[1]],
                    }
                }
            };
            let (h, icmp) = out.split_at_mut(crate::ipv4::HEADER_LEN);
            repr.emit(icmp, IcmpVersion::V4, None)
                .map_err(|_| Refused::NoHeadroom)?;
            crate::ipv4::Ipv4Repr {
                ttl: ERROR_TTL,
                tos: 0xc0,
                dont_frag: false,
                ..crate::ipv4::Ipv4Repr::new(src_v4, src, protocol::ICMP, icmp_len)
            }
            .emit(h)
            .map_err(|_| Refused::NoHeadroom)?;
            Ok((start, V4_ERROR_OVERHEAD + quote))
        }
        Some(6) => {
            let p = crate::ipv6::Ipv6Packet::new_checked(ip).map_err(|_| Refused::Malformed)?;
            let (src, dst) = (p.src_addr(), p.dst_addr());
            let ul = p.upper_layer().map_err(|_| Refused::Malformed)?;
            if ul.fragment.is_some_and(|f| !f.is_first()) {
                return Err(Refused::Fragment);
            }
            if ul.protocol == protocol::ICMPV6
                && p.payload().get(ul.offset).is_some_and(|&t| t < 128)
            {
                return Err(Refused::AboutIcmpError);
            }
            if src.is_unspecified() || src.is_loopback() || src.is_multicast() || dst.is_multicast()
            {
                return Err(Refused::NotUnicast);
            }
            let quote = ip_len.min(IPV6_MIN_MTU - V6_ERROR_OVERHEAD);
            let start = ip_start
                .checked_sub(V6_ERROR_OVERHEAD)
                .ok_or(Refused::NoHeadroom)?;
            let icmp_len = HEADER_LEN + quote;
            let out = &mut buf[start..ip_start + quote];
            let repr = match msg {
                ErrorMessage::TimeExceeded => IcmpRepr::Other {
                    msg_type: V6_TIME_EXCEEDED,
                    code: 0,
                    rest: [0; 4],
                },
                ErrorMessage::TooBig { mtu } => IcmpRepr::Other {
                    msg_type: V6_PACKET_TOO_BIG,
                    code: 0,
                    rest: u32::from(mtu).to_be_bytes(),
                },
            };
            let (h, icmp) = out.split_at_mut(crate::ipv6::HEADER_LEN);
            crate::ipv6::Ipv6Repr {
                hop_limit: ERROR_TTL,
                ..crate::ipv6::Ipv6Repr::new(src_v6, src, protocol::ICMPV6, icmp_len)
            }
            .emit(h)
            .map_err(|_| Refused::NoHeadroom)?;
            repr.emit(icmp, IcmpVersion::V6, Some((src_v6.into(), src.into())))
                .map_err(|_| Refused::NoHeadroom)?;
            Ok((start, V6_ERROR_OVERHEAD + quote))
        }
        _ => Err(Refused::Malformed),
    }
}
