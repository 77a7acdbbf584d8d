//! IPv4 headers (RFC 791).
//!
//! `new_checked` validates version, IHL (>= 5, within the buffer), and total length (>= header,
//! <= buffer). Options are skipped via IHL; bytes after the total length (Ethernet padding) are
//! not part of [`Ipv4Packet::payload`].

use core::net::Ipv4Addr;

use crate::checksum;
use crate::field::{arr4, be16, set_be16};
use crate::EmitError;

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

/// IP protocol numbers used here (IANA "Assigned Internet Protocol Numbers").
pub mod protocol {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP for IPv4.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment header.
    pub const IPV6_FRAG: u8 = 44;
    /// Encapsulating security payload.
    pub const ESP: u8 = 50;
    /// Authentication header.
    pub const AH: u8 = 51;
    /// ICMP for IPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NONXT: u8 = 59;
    /// IPv6 destination options.
    pub const IPV6_OPTS: u8 = 60;
}

/// Why a buffer is not a well-formed IPv4 packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum Ipv4Error {
    /// Shorter than the 20-byte fixed header.
    #[error("IPv4 packet shorter than 20 bytes")]
    Truncated,
    /// The version field is not 4.
    #[error("IP version is not 4")]
    BadVersion,
    /// IHL below 5, or the header it announces does not fit in the buffer.
    #[error("IPv4 header length (IHL) below 5 or past the buffer")]
    BadHeaderLen,
    /// Total length below the header length or past the buffer.
    #[error("IPv4 total length below the header length or past the buffer")]
    BadTotalLen,
    /// The header checksum does not verify.
    #[error("IPv4 header checksum mismatch")]
    BadChecksum,
}

/// Fragmentation fields of a packet that is a fragment (MF set or offset non-zero).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct Fragment {
    /// Offset of this fragment's data in the original payload, in bytes.
    pub offset: u16,
    /// More fragments follow.
    pub more: bool,
    /// Identification (IPv4: 16 bits; IPv6: 32 bits).
    pub ident: u32,
}

impl Fragment {
    /// True for the first fragment (offset 0), which carries the upper-layer header.
    pub fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// A checked view of an IPv4 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps a buffer without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); afterwards no accessor panics.
    /// Does not verify the checksum (see [`verify_checksum`](Self::verify_checksum)).
    pub fn new_checked(buffer: T) -> Result<Self, Ipv4Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks version, IHL and total length against the buffer.
    pub fn check_len(&self) -> Result<(), Ipv4Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Ipv4Error::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(Ipv4Error::BadVersion);
        }
        let hl = usize::from(b[0] & 0x0f) * 4;
        if hl < HEADER_LEN || hl > b.len() {
            return Err(Ipv4Error::BadHeaderLen);
        }
        let tl = usize::from(be16(b, 2));
        if tl < hl || tl > b.len() {
            return Err(Ipv4Error::BadTotalLen);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version (4 after a successful check).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// Header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0x0f) * 4
    }
    /// DSCP (6 bits).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[1] >> 2
    }
    /// ECN (2 bits).
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[1] & 3
    }
    /// Total length (header + payload).
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }
    /// Don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.buffer.as_ref()[6] & 0x40 != 0
    }
    /// More-fragments flag.
    pub fn more_frags(&self) -> bool {
        self.buffer.as_ref()[6] & 0x20 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), 6) & 0x1fff) << 3
    }
    /// `Some` when this packet is a fragment (MF set or offset non-zero).
    pub fn fragment(&self) -> Option<Fragment> {
        (self.more_frags() || self.frag_offset() != 0).then(|| Fragment {
            offset: self.frag_offset(),
            more: self.more_frags(),
            ident: u32::from(self.ident()),
        })
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }
    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 10)
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr4(self.buffer.as_ref(), 12))
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr4(self.buffer.as_ref(), 16))
    }
    /// Options bytes (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }
    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        checksum::fold(checksum::accumulate(
            0,
            &self.buffer.as_ref()[..self.header_len()],
        )) == 0xffff
    }
    /// The payload: from the end of the header to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }
    /// Header and payload, without trailing padding.
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..usize::from(self.total_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the TTL (the checksum is not updated; see [`decrement_ttl`](Self::decrement_ttl)).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[8] = ttl;
    }
    /// Sets the source address (checksum not updated).
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[12..16].copy_from_slice(&a.octets());
    }
    /// Sets the destination address (checksum not updated).
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[16..20].copy_from_slice(&a.octets());
    }
    /// Recomputes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        set_be16(b, 10, 0);
        let c = checksum::checksum(&b[..hl]);
        set_be16(b, 10, c);
    }
    /// Decrements the TTL and patches the checksum incrementally (RFC 1624). Returns the new TTL,
    /// or `None` (packet unchanged) when the TTL is already 0 or 1 and the packet must not be
    /// forwarded.
    pub fn decrement_ttl(&mut self) -> Option<u8> {
        let b = self.buffer.as_mut();
        if b[8] <= 1 {
            return None;
        }
        let old = be16(b, 8);
        b[8] -= 1;
        let new = be16(b, 8);
        // HC' = ~(~HC + ~m + m')
        let hc = be16(b, 10);
        let sum = u64::from(!hc) + u64::from(!old) + u64::from(new);
        set_be16(b, 10, !checksum::fold(sum));
        Some(b[8])
    }
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (h, t) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[h..t]
    }
}

/// The fields of an IPv4 header (options are skipped on parse and not emitted).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Payload protocol.
    pub protocol: u8,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: usize,
    /// Time to live.
    pub ttl: u8,
    /// DSCP (6 bits) and ECN (2 bits) as the second header byte.
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
    /// More-fragments flag.
    pub more_frags: bool,
    /// Fragment offset in bytes (a multiple of 8).
    pub frag_offset: u16,
}

impl Ipv4Repr {
    /// Reads a checked packet; with `verify_checksum` the header checksum must verify.
    pub fn parse<T: AsRef<[u8]>>(
        p: &Ipv4Packet<T>,
        verify_checksum: bool,
    ) -> Result<Self, Ipv4Error> {
        if verify_checksum && !p.verify_checksum() {
            return Err(Ipv4Error::BadChecksum);
        }
        Ok(Self {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            protocol: p.protocol(),
            payload_len: p.payload().len(),
            ttl: p.ttl(),
            tos: p.buffer.as_ref()[1],
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            more_frags: p.more_frags(),
            frag_offset: p.frag_offset(),
        })
    }

    /// A plain unfragmented header with TTL 64, ident 0, DF clear.
    pub fn new(src_addr: Ipv4Addr, dst_addr: Ipv4Addr, protocol: u8, payload_len: usize) -> Self {
        Self {
            src_addr,
            dst_addr,
            protocol,
            payload_len,
            ttl: 64,
            tos: 0,
            ident: 0,
            dont_frag: false,
            more_frags: false,
            frag_offset: 0,
        }
    }

    /// Header length this repr emits (20).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 20-byte header (with checksum) at the start of `buf`. The payload is not
    /// touched.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), EmitError> {
        let total = HEADER_LEN + self.payload_len;
        let total = u16::try_from(total).map_err(|_| EmitError::TooLong)?;
        if self.frag_offset & 7 != 0 {
            return Err(EmitError::BadField);
        }
        let b = crate::prefix_mut(buf, HEADER_LEN)?;
        b[0] = 0x45;
        b[1] = self.tos;
        set_be16(b, 2, total);
        set_be16(b, 4, self.ident);
        let flags = (u16::from(self.dont_frag) << 14) | (u16::from(self.more_frags) << 13);
        set_be16(b, 6, flags | (self.frag_offset >> 3));
        b[8] = self.ttl;
        b[9] = self.protocol;
        set_be16(b, 10, 0);
        b[12..16].copy_from_slice(&self.src_addr.octets());
        b[16..20].copy_from_slice(&self.dst_addr.octets());
        let c = checksum::checksum(b);
        set_be16(b, 10, c);
        Ok(())
    }
}
