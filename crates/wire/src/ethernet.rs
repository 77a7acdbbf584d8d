//! Ethernet II frames with an optional single 802.1Q VLAN tag.
//!
//! Layout: destination MAC (6), source MAC (6), EtherType (2) -- or, when that EtherType is
//! 0x8100, a tag control word (2) followed by the real EtherType (2). The frame check sequence is
//! not part of the buffer (NICs and the kernel strip it).

use core::fmt;

use crate::field::{arr6, be16, set_be16};
use crate::EmitError;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: Self = Self([0xff; 6]);

    /// True for ff:ff:ff:ff:ff:ff.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True when the group bit (least significant bit of the first octet) is set.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 == 1
    }

    /// True for a unicast address.
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An EtherType value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct EtherType(pub u16);

impl EtherType {
    /// IPv4 (0x0800).
    pub const IPV4: Self = Self(0x0800);
    /// ARP (0x0806).
    pub const ARP: Self = Self(0x0806);
    /// IPv6 (0x86dd).
    pub const IPV6: Self = Self(0x86dd);
    /// IEEE 802.1Q VLAN tag (0x8100).
    pub const VLAN: Self = Self(0x8100);
}

/// An 802.1Q tag control information word.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    /// Decodes a TCI word.
    pub fn from_tci(tci: u16) -> Self {
        Self {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    /// Encodes as a TCI word (extra bits of `pcp` and `vid` are masked off).
    pub fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }
}

/// Why a buffer is not an Ethernet frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum EthError {
    /// Shorter than the 14-byte Ethernet II header.
    #[error("frame shorter than the 14-byte Ethernet header")]
    Truncated,
    /// The EtherType says 802.1Q but the frame ends before the 4-byte tag and inner EtherType.
    #[error("frame ends inside the 802.1Q tag")]
    VlanTruncated,
}

/// Length of the untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of the header with one 802.1Q tag.
pub const VLAN_HEADER_LEN: usize = 18;

/// A checked view of an Ethernet II frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps a buffer without checking it; accessors may panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking that the header (and VLAN tag, if any) fits; afterwards no
    /// accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, EthError> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the header fits in the buffer.
    pub fn check_len(&self) -> Result<(), EthError> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(EthError::Truncated);
        }
        if be16(b, 12) == EtherType::VLAN.0 && b.len() < VLAN_HEADER_LEN {
            return Err(EthError::VlanTruncated);
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Destination MAC.
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress(arr6(self.buffer.as_ref(), 0))
    }

    /// Source MAC.
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress(arr6(self.buffer.as_ref(), 6))
    }

    /// The 802.1Q tag, when present.
    pub fn vlan(&self) -> Option<VlanTag> {
        let b = self.buffer.as_ref();
        (be16(b, 12) == EtherType::VLAN.0).then(|| VlanTag::from_tci(be16(b, 14)))
    }

    /// The EtherType of the payload (after the VLAN tag, if any).
    pub fn ethertype(&self) -> EtherType {
        let b = self.buffer.as_ref();
        let t = be16(b, 12);
        if t == EtherType::VLAN.0 {
            EtherType(be16(b, 16))
        } else {
            EtherType(t)
        }
    }

    /// 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        if be16(self.buffer.as_ref(), 12) == EtherType::VLAN.0 {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The bytes after the header (including any trailing padding).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC.
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[0..6].copy_from_slice(&a.0);
    }

    /// Sets the source MAC.
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[6..12].copy_from_slice(&a.0);
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let h = self.header_len();
        &mut self.buffer.as_mut()[h..]
    }
}

/// The fields of an Ethernet II header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct EthernetRepr {
    /// Source MAC.
    pub src_addr: EthernetAddress,
    /// Destination MAC.
    pub dst_addr: EthernetAddress,
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Self {
        Self {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan(),
            ethertype: frame.ethertype(),
        }
    }

    /// Header length this repr emits: 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            VLAN_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), EmitError> {
        let need = self.header_len();
        let b = crate::prefix_mut(buf, need)?;
        b[0..6].copy_from_slice(&self.dst_addr.0);
        b[6..12].copy_from_slice(&self.src_addr.0);
        match self.vlan {
            Some(tag) => {
                set_be16(b, 12, EtherType::VLAN.0);
                set_be16(b, 14, tag.tci());
                set_be16(b, 16, self.ethertype.0);
            }
            None => set_be16(b, 12, self.ethertype.0),
        }
        Ok(())
    }
}
