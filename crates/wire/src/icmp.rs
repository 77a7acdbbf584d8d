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
