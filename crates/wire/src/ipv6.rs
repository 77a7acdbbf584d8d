//! IPv6 headers (RFC 8200) and the extension-header walk.
//!
//! `new_checked` validates version and that the payload length fits the buffer. [`walk`] follows
//! hop-by-hop (0, first only), routing (43), fragment (44), destination options (60) and
//! authentication (51, RFC 4302) headers to the upper-layer protocol, with a bound on the number
//! of headers. Jumbograms (payload length 0 with a Jumbo option) are not supported: their payload
//! reads as empty.

use core::net::Ipv6Addr;

use crate::field::{arr16, be16, be32, set_be16, set_be32};
use crate::ipv4::{protocol, Fragment};
use crate::EmitError;

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

/// Most extension headers [`walk`] follows before giving up.
pub const MAX_EXT_HEADERS: usize = 8;

/// Why a buffer is not a well-formed IPv6 packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum Ipv6Error {
    /// Shorter than the 40-byte fixed header.
    #[error("IPv6 packet shorter than 40 bytes")]
    Truncated,
    /// The version field is not 6.
    #[error("IP version is not 6")]
    BadVersion,
    /// The payload length runs past the buffer.
    #[error("IPv6 payload length past the buffer")]
    BadPayloadLen,
    /// An extension header runs past the payload.
    #[error("IPv6 extension header past the payload")]
    ExtTruncated,
    /// A hop-by-hop options header somewhere other than right after the fixed header.
    #[error("IPv6 hop-by-hop header not first")]
    HopByHopNotFirst,
    /// More than [`MAX_EXT_HEADERS`] extension headers.
    #[error("too many IPv6 extension headers")]
    TooManyExtHeaders,
}

/// A checked view of an IPv6 packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps a buffer without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, Ipv6Error> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the version and that header + payload length fit the buffer.
    pub fn check_len(&self) -> Result<(), Ipv6Error> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Ipv6Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Ipv6Error::BadVersion);
        }
        if HEADER_LEN + usize::from(be16(b, 4)) > b.len() {
            return Err(Ipv6Error::BadPayloadLen);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Version (6 after a successful check).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// Traffic class.
    pub fn traffic_class(&self) -> u8 {
        (be16(self.buffer.as_ref(), 0) >> 4) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        be32(self.buffer.as_ref(), 0) & 0x000f_ffff
    }
    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }
    /// Next header of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[6]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }
    /// Source address.
    pub fn src_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(arr16(self.buffer.as_ref(), 8))
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(arr16(self.buffer.as_ref(), 24))
    }
    /// The payload (extension headers and upper layer), without trailing padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }
    /// Header and payload, without trailing padding.
    pub fn packet(&self) -> &[u8] {
        &self.buffer.as_ref()[..HEADER_LEN + usize::from(self.payload_len())]
    }
    /// Walks the extension headers; see [`walk`].
    pub fn upper_layer(&self) -> Result<UpperLayer, Ipv6Error> {
        walk(self.next_header(), self.payload())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[7] = h;
    }
    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[8..24].copy_from_slice(&a.octets());
    }
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[24..40].copy_from_slice(&a.octets());
    }
}

/// Where the extension headers end.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct UpperLayer {
    /// The upper-layer protocol (TCP, UDP, ICMPv6, ...; or ESP 50 / no-next-header 59, beyond
    /// which nothing can be read).
    pub protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 payload (the end of the last
    /// extension header).
    pub offset: usize,
    /// The fragment header's fields, when there is one.
    pub fragment: Option<Fragment>,
    /// How many extension headers were skipped.
    pub ext_headers: u8,
    /// The final destination named by a routing header with segments left (type 0 or 2: its
    /// last address; type 4, SRv6: segment list[0]). Upper-layer checksums use it in the
    /// pseudo-header instead of the header's destination (RFC 8200 sec. 8.1).
    pub final_dst: Option<Ipv6Addr>,
}

/// True for the extension headers [`walk`] follows.
pub fn is_extension_header(nh: u8) -> bool {
    matches!(
        nh,
        protocol::HOPOPT
            | protocol::IPV6_ROUTE
            | protocol::IPV6_FRAG
            | protocol::IPV6_OPTS
            | protocol::AH
    )
}

/// Follows the extension-header chain starting with next-header value `first` over `payload`
/// (the IPv6 payload). Stops at the first protocol that is not an extension header, or after a
/// fragment header whose offset is non-zero (the rest is not this packet's upper-layer header).
pub fn walk(first: u8, payload: &[u8]) -> Result<UpperLayer, Ipv6Error> {
    let mut nh = first;
    let mut off = 0usize;
    let mut fragment = None;
    let mut count = 0u8;
    let mut final_dst = None;
    while is_extension_header(nh) {
        if usize::from(count) >= MAX_EXT_HEADERS {
            return Err(Ipv6Error::TooManyExtHeaders);
        }
        if nh == protocol::HOPOPT && count != 0 {
            return Err(Ipv6Error::HopByHopNotFirst);
        }
        let h = payload.get(off..off + 2).ok_or(Ipv6Error::ExtTruncated)?;
        let (next, len_field) = (h[0], usize::from(h[1]));
        let len = match nh {
            protocol::IPV6_FRAG => 8,
            protocol::AH => (len_field + 2) * 4,
            _ => (len_field + 1) * 8,
        };
        let ext = payload.get(off..off + len).ok_or(Ipv6Error::ExtTruncated)?;
        count += 1;
        off += len;
        if nh == protocol::IPV6_ROUTE && ext[3] > 0 && len >= 24 {
            match ext[2] {
                0 | 2 => final_dst = Some(Ipv6Addr::from(arr16(ext, len - 16))),
                4 => final_dst = Some(Ipv6Addr::from(arr16(ext, 8))),
                _ => {}
            }
        }
        if nh == protocol::IPV6_FRAG {
            let fo = be16(ext, 2);
            let f = Fragment {
                offset: fo & 0xfff8,
                more: fo & 1 != 0,
                ident: be32(ext, 4),
            };
            fragment = Some(f);
            if f.offset != 0 {
                return Ok(UpperLayer {
                    protocol: next,
                    offset: off,
                    fragment,
                    ext_headers: count,
                    final_dst,
                });
            }
        }
        nh = next;
    }
    Ok(UpperLayer {
        protocol: nh,
        offset: off,
        fragment,
        ext_headers: count,
        final_dst,
    })
}

/// The fields of the IPv6 fixed header.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header (first extension header or upper-layer protocol).
    pub next_header: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Ipv6Repr {
    /// Reads a checked packet's fixed header.
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Self {
        Self {
            src_addr: p.src_addr(),
            dst_addr: p.dst_addr(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
        }
    }

    /// A header with hop limit 64, traffic class 0 and flow label 0.
    pub fn new(
        src_addr: Ipv6Addr,
        dst_addr: Ipv6Addr,
        next_header: u8,
        payload_len: usize,
    ) -> Self {
        Self {
            src_addr,
            dst_addr,
            next_header,
            payload_len,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }

    /// Header length this repr emits (40).
    pub const fn header_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 40-byte fixed header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), EmitError> {
        let plen = u16::try_from(self.payload_len).map_err(|_| EmitError::TooLong)?;
        if self.flow_label > 0x000f_ffff {
            return Err(EmitError::BadField);
        }
        let b = crate::prefix_mut(buf, HEADER_LEN)?;
        set_be32(
            b,
            0,
            (6 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label,
        );
        set_be16(b, 4, plen);
        b[6] = self.next_header;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.src_addr.octets());
        b[24..40].copy_from_slice(&self.dst_addr.octets());
        Ok(())
    }
}
