//! UDP (RFC 768), with the checksum over the IPv4 or IPv6 pseudo-header.
//!
//! `new_checked` validates that the 8-byte header fits and that the length field is at least 8
//! and within the buffer. [`UdpPacket::payload`] ends at the length field.

use core::net::IpAddr;

use crate::checksum;
use crate::field::{be16, set_be16};
use crate::ipv4::protocol;
use crate::EmitError;

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// The GTP-U port (3GPP TS 29.281 sec. 4.4.2).
pub const GTPU_PORT: u16 = 2152;

/// Why a buffer is not a well-formed UDP datagram.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum UdpError {
    /// Shorter than the 8-byte header.
    #[error("UDP datagram shorter than 8 bytes")]
    Truncated,
    /// Length field below 8 or past the buffer.
    #[error("UDP length below 8 or past the buffer")]
    BadLength,
    /// The checksum does not verify (or is zero over IPv6, where it is mandatory).
    #[error("UDP checksum mismatch")]
    BadChecksum,
}

/// A checked view of a UDP datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps a buffer without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, UdpError> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the header fits and the length field is within `8..=buffer length`.
    pub fn check_len(&self) -> Result<(), UdpError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(UdpError::Truncated);
        }
        let l = usize::from(be16(b, 4));
        if l < HEADER_LEN || l > b.len() {
            return Err(UdpError::BadLength);
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
    /// Length field (header + payload).
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }
    /// Never true after a successful check (the length is at least 8).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Checksum field (0 = none, allowed over IPv4 only).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }
    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
    /// True when the checksum verifies under the pseudo-header of `src`/`dst`. A zero checksum
    /// passes over IPv4 (no checksum) and fails over IPv6; mixed address families fail.
    pub fn verify_checksum(&self, src: IpAddr, dst: IpAddr) -> bool {
        if self.checksum() == 0 {
            return src.is_ipv4() && dst.is_ipv4();
        }
        let d = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::upper_layer(src, dst, protocol::UDP, d) == Some(0)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let l = usize::from(self.len());
        &mut self.buffer.as_mut()[HEADER_LEN..l]
    }
    /// Computes and stores the checksum (0 results are sent as 0xffff).
    pub fn fill_checksum(&mut self, src: IpAddr, dst: IpAddr) -> Result<(), EmitError> {
        let l = usize::from(self.len());
        let b = self.buffer.as_mut();
        set_be16(b, 6, 0);
        let c = checksum::upper_layer(src, dst, protocol::UDP, &b[..l])
            .ok_or(EmitError::AddressFamilyMismatch)?;
        set_be16(b, 6, if c == 0 { 0xffff } else { c });
        Ok(())
    }
}

/// Whether [`UdpRepr::emit`] computes the checksum.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum UdpChecksum {
    /// Compute it (one pass over the payload).
    Compute,
    /// Leave it zero: allowed over IPv4 only; over IPv6 `emit` computes it anyway.
    None,
}

/// The fields of a UDP header.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads a checked datagram; with `verify` = `Some((src, dst))` the checksum must verify.
    pub fn parse<T: AsRef<[u8]>>(
        p: &UdpPacket<T>,
        verify: Option<(IpAddr, IpAddr)>,
    ) -> Result<Self, UdpError> {
        if let Some((s, d)) = verify {
            if !p.verify_checksum(s, d) {
                return Err(UdpError::BadChecksum);
            }
        }
        Ok(Self {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        })
    }

    /// Writes the header into `datagram` (header + payload, payload already in place: its length
    /// is `datagram.len() - 8`) and the checksum as asked.
    pub fn emit(
        &self,
        datagram: &mut [u8],
        src: IpAddr,
        dst: IpAddr,
        csum: UdpChecksum,
    ) -> Result<(), EmitError> {
        if datagram.len() < HEADER_LEN {
            return Err(EmitError::BufferTooSmall {
                needed: HEADER_LEN,
                got: datagram.len(),
            });
        }
        let len = u16::try_from(datagram.len()).map_err(|_| EmitError::TooLong)?;
        set_be16(datagram, 0, self.src_port);
        set_be16(datagram, 2, self.dst_port);
        set_be16(datagram, 4, len);
        set_be16(datagram, 6, 0);
        if csum == UdpChecksum::Compute || src.is_ipv6() || dst.is_ipv6() {
            UdpPacket::new_unchecked(datagram).fill_checksum(src, dst)?;
        }
        Ok(())
    }
}
