//! TCP headers (RFC 9293): ports, sequence numbers, flags, data offset.
//!
//! `new_checked` validates that the 20-byte header fits, data offset >= 5, and the header it
//! announces fits the buffer. The segment is the whole buffer (the IP payload).

use core::net::IpAddr;

use crate::checksum;
use crate::field::{be16, be32, set_be16, set_be32};
use crate::ipv4::protocol;
use crate::EmitError;

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// Why a buffer is not a well-formed TCP segment.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum TcpError {
    /// Shorter than the 20-byte header.
    #[error("TCP segment shorter than 20 bytes")]
    Truncated,
    /// Data offset below 5 or past the buffer.
    #[error("TCP data offset below 5 or past the buffer")]
    BadDataOffset,
    /// The checksum does not verify.
    #[error("TCP checksum mismatch")]
    BadChecksum,
}

/// TCP flags (the 9 bits after the data offset).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, Default)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// FIN.
    pub const FIN: Self = Self(0x001);
    /// SYN.
    pub const SYN: Self = Self(0x002);
    /// RST.
    pub const RST: Self = Self(0x004);
    /// PSH.
    pub const PSH: Self = Self(0x008);
    /// ACK.
    pub const ACK: Self = Self(0x010);
    /// URG.
    pub const URG: Self = Self(0x020);
    /// ECE.
    pub const ECE: Self = Self(0x040);
    /// CWR.
    pub const CWR: Self = Self(0x080);
    /// NS (historic, RFC 3540).
    pub const NS: Self = Self(0x100);

    /// True when every flag of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

/// A checked view of a TCP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps a buffer without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, TcpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the header and the data offset against the buffer.
    pub fn check_len(&self) -> Result<(), TcpError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(TcpError::Truncated);
        }
        let h = usize::from(b[12] >> 4) * 4;
        if h < HEADER_LEN || h > b.len() {
            return Err(TcpError::BadDataOffset);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Sequence number.
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }
    /// Acknowledgment number.
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }
    /// Header length in bytes (data offset * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[12] >> 4) * 4
    }
    /// Flags.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(be16(self.buffer.as_ref(), 12) & 0x01ff)
    }
    /// Window.
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), 14)
    }
    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 16)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), 18)
    }
    /// Options bytes.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    /// Payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// True when the checksum verifies under the pseudo-header of `src`/`dst`.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        checksum::upper_layer(src, dst, protocol::TCP, self.buffer.as_ref()) == Some(0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) -> Result<(), EmitError> {
        let b = self.buffer.as_mut();
        set_be16(b, 16, 0);
        let c = checksum::upper_layer(src, dst, protocol::TCP, b)
            .ok_or(EmitError::AddressFamilyMismatch)?;
        set_be16(b, 16, c);
        Ok(())
    }
}

/// The fields of a TCP header (options are skipped on parse and not emitted).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: u32,
    /// Acknowledgment number.
    pub ack_number: u32,
    /// Flags.
    pub flags: TcpFlags,
    /// Window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
}

impl TcpRepr {
    /// Reads a checked segment; with `verify` = `Some((src, dst))` the checksum must verify.
    pub fn parse<T: AsRef<[u8]>>(
        p: &TcpPacket<T>,
        verify: Option<(IpAddr, IpAddr)>,
    ) -> Result<Self, TcpError> {
        if let Some((s, d)) = verify {
            if !p.verify_checksum(s, d) {
                return Err(TcpError::BadChecksum);
            }
        }
        Ok(Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq_number: p.seq_number(),
            ack_number: p.ack_number(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
        })
    }

    /// Writes a 20-byte header into `segment` (header + payload, payload already in place) and
    /// computes the checksum.
    pub fn emit(&self, segment: &mut [u8], src: IpAddr, dst: IpAddr) -> Result<(), EmitError> {
        if segment.len() < HEADER_LEN {
            return Err(EmitError::BufferTooSmall {
                needed: HEADER_LEN,
                got: segment.len(),
            });
        }
        if self.flags.0 > 0x1ff {
            return Err(EmitError::BadField);
        }
        set_be16(segment, 0, self.src_port);
        set_be16(segment, 2, self.dst_port);
        set_be32(segment, 4, self.seq_number);
        set_be32(segment, 8, self.ack_number);
        set_be16(segment, 12, (5 << 12) | self.flags.0);
        set_be16(segment, 14, self.window);
        set_be16(segment, 18, self.urgent);
        TcpPacket::new_unchecked(segment).fill_checksum(src, dst)
    }
}
