//! Flow keys: the destination address (the LTE downstream key: the UE's IP), the source address,
//! and the 5-tuple, with canonical byte encodings for hashing and table keys.
//!
//! Canonical 5-tuple bytes: protocol (1) + source address (4 or 16) + source port (2, big
//! endian) + destination address (4 or 16) + destination port (2, big endian): 13 bytes for IPv4,
//! 37 for IPv6.

use core::net::IpAddr;
use core::ops::Deref;

/// Longest canonical key: an IPv6 5-tuple.
pub const MAX_KEY_LEN: usize = 37;
/// Length of an IPv4 5-tuple key.
pub const FIVE_TUPLE_V4_LEN: usize = 13;
/// Length of an IPv6 5-tuple key.
pub const FIVE_TUPLE_V6_LEN: usize = 37;

/// A canonical key on the stack (no allocation): derefs to its bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyBytes {
    buf: [u8; MAX_KEY_LEN],
    len: u8,
}

impl KeyBytes {
    fn push(&mut self, b: &[u8]) {
        let l = usize::from(self.len);
        self.buf[l..l + b.len()].copy_from_slice(b);
        self.len += b.len() as u8;
    }
    fn empty() -> Self {
        Self {
            buf: [0; MAX_KEY_LEN],
            len: 0,
        }
    }
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl Deref for KeyBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for KeyBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl core::fmt::Debug for KeyBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// An address as key bytes: 4 bytes for IPv4, 16 for IPv6.
pub fn addr_key(a: IpAddr) -> KeyBytes {
    let mut k = KeyBytes::empty();
    match a {
        IpAddr::V4(a) => k.push(&a.octets()),
        IpAddr::V6(a) => k.push(&a.octets()),
    }
    k
}

/// The 5-tuple of a flow. Protocols without ports (ICMP, ...) have ports 0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct FiveTuple {
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Source address.
    pub src_addr: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination address.
    pub dst_addr: IpAddr,
    /// Destination port.
    pub dst_port: u16,
}

impl FiveTuple {
    /// Canonical bytes (13 for IPv4, 37 for IPv6; a mixed-family tuple, which no packet
    /// yields, encodes each address at its own length).
    pub fn key(&self) -> KeyBytes {
        let mut k = KeyBytes::empty();
        k.push(&[self.protocol]);
        k.push(&addr_key(self.src_addr));
        k.push(&self.src_port.to_be_bytes());
        k.push(&addr_key(self.dst_addr));
        k.push(&self.dst_port.to_be_bytes());
        k
    }

    /// The reverse direction's tuple (addresses and ports swapped).
    pub fn reversed(&self) -> Self {
        Self {
            protocol: self.protocol,
            src_addr: self.dst_addr,
            src_port: self.dst_port,
            dst_addr: self.src_addr,
            dst_port: self.src_port,
        }
    }
}
