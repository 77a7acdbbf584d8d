//! ARP for Ethernet and IPv4 (RFC 826): enough to answer requests for a node's own addresses.
//!
//! Layout (28 bytes): hardware type (2) = 1, protocol type (2) = 0x0800, hardware length (1) = 6,
//! protocol length (1) = 4, operation (2), sender MAC (6), sender IP (4), target MAC (6),
//! target IP (4).

use core::net::Ipv4Addr;

use crate::ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
use crate::field::{arr4, arr6, be16, set_be16};
use crate::EmitError;

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// Why a buffer is not an ARP packet we understand.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum ArpError {
    /// Shorter than the 28 bytes of an Ethernet/IPv4 ARP packet.
    #[error("ARP packet shorter than 28 bytes")]
    Truncated,
    /// Hardware type other than Ethernet, protocol other than IPv4, or address lengths other
    /// than 6 and 4.
    #[error("ARP packet for a hardware/protocol other than Ethernet/IPv4")]
    Unsupported,
}

/// ARP operation.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum ArpOperation {
    /// Who has target IP? (1)
    Request,
    /// Sender IP is at sender MAC. (2)
    Reply,
    /// Any other operation code.
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> Self {
        match v {
            1 => Self::Request,
            2 => Self::Reply,
            x => Self::Unknown(x),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(v: ArpOperation) -> Self {
        match v {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(x) => x,
        }
    }
}

/// A checked view of an Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps a buffer without checking; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer after checking length and the Ethernet/IPv4 types; afterwards no accessor
    /// panics.
    pub fn new_checked(buffer: T) -> Result<Self, ArpError> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// Checks length and hardware/protocol types and lengths.
    pub fn check(&self) -> Result<(), ArpError> {
        let b = self.buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(ArpError::Truncated);
        }
        if be16(b, 0) != 1 || be16(b, 2) != EtherType::IPV4.0 || b[4] != 6 || b[5] != 4 {
            return Err(ArpError::Unsupported);
        }
        Ok(())
    }

    /// Operation.
    pub fn operation(&self) -> ArpOperation {
        be16(self.buffer.as_ref(), 6).into()
    }
    /// Sender hardware address.
    pub fn sender_hw(&self) -> EthernetAddress {
        EthernetAddress(arr6(self.buffer.as_ref(), 8))
    }
    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr4(self.buffer.as_ref(), 14))
    }
    /// Target hardware address.
    pub fn target_hw(&self) -> EthernetAddress {
        EthernetAddress(arr6(self.buffer.as_ref(), 18))
    }
    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(arr4(self.buffer.as_ref(), 24))
    }
}

/// The fields of an Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct ArpRepr {
    /// Operation.
    pub operation: ArpOperation,
    /// Sender MAC.
    pub sender_hw: EthernetAddress,
    /// Sender IPv4 address.
    pub sender_ip: Ipv4Addr,
    /// Target MAC (zero in requests).
    pub target_hw: EthernetAddress,
    /// Target IPv4 address.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Reads a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Self {
        Self {
            operation: p.operation(),
            sender_hw: p.sender_hw(),
            sender_ip: p.sender_ip(),
            target_hw: p.target_hw(),
            target_ip: p.target_ip(),
        }
    }

    /// Writes the 28-byte packet at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), EmitError> {
        let b = crate::prefix_mut(buf, PACKET_LEN)?;
        set_be16(b, 0, 1);
        set_be16(b, 2, EtherType::IPV4.0);
        b[4] = 6;
        b[5] = 4;
        set_be16(b, 6, self.operation.into());
        b[8..14].copy_from_slice(&self.sender_hw.0);
        b[14..18].copy_from_slice(&self.sender_ip.octets());
        b[18..24].copy_from_slice(&self.target_hw.0);
        b[24..28].copy_from_slice(&self.target_ip.octets());
        Ok(())
    }

    /// If this is a request for one of `own_ips`, the reply that `own_mac` should send.
    pub fn reply_for(&self, own_mac: EthernetAddress, own_ips: &[Ipv4Addr]) -> Option<ArpRepr> {
        if self.operation != ArpOperation::Request || !own_ips.contains(&self.target_ip) {
            return None;
        }
        Some(ArpRepr {
            operation: ArpOperation::Reply,
            sender_hw: own_mac,
            sender_ip: self.target_ip,
            target_hw: self.sender_hw,
            target_ip: self.sender_ip,
        })
    }
}

/// Frame length [`answer_request`] writes: Ethernet header (with the request's VLAN tag, if any)
/// plus the ARP packet, padded to the 60-byte Ethernet minimum.
pub const MIN_FRAME_LEN: usize = 60;

/// Given a whole Ethernet frame, if it is an ARP request for one of `own_ips`, writes the
/// complete reply frame (same VLAN tag, unicast to the asker, padded to 60 bytes) into `out` and
/// returns its length. `Ok(None)` when the frame is well-formed but not a request for us.
pub fn answer_request(
    frame: &[u8],
    own_mac: EthernetAddress,
    own_ips: &[Ipv4Addr],
    out: &mut [u8],
) -> Result<Option<usize>, ArpAnswerError> {
    let eth = EthernetFrame::new_checked(frame).map_err(|_| ArpAnswerError::NotArp)?;
    if eth.ethertype() != EtherType::ARP {
        return Err(ArpAnswerError::NotArp);
    }
    let arp = ArpPacket::new_checked(eth.payload()).map_err(ArpAnswerError::Arp)?;
    let Some(reply) = ArpRepr::parse(&arp).reply_for(own_mac, own_ips) else {
        return Ok(None);
    };
    let eth_out = EthernetRepr {
        src_addr: own_mac,
        dst_addr: reply.target_hw,
        vlan: eth.vlan(),
        ethertype: EtherType::ARP,
    };
    let h = eth_out.header_len();
    let len = (h + PACKET_LEN).max(MIN_FRAME_LEN);
    let out = crate::prefix_mut(out, len).map_err(ArpAnswerError::Emit)?;
    out.fill(0);
    eth_out.emit(out).map_err(ArpAnswerError::Emit)?;
    reply.emit(&mut out[h..]).map_err(ArpAnswerError::Emit)?;
    Ok(Some(len))
}

/// Why [`answer_request`] could not answer.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum ArpAnswerError {
    /// The frame is not an Ethernet frame carrying ARP.
    #[error("not an ARP frame")]
    NotArp,
    /// The ARP packet is malformed or not Ethernet/IPv4.
    #[error("bad ARP packet: {0}")]
    Arp(ArpError),
    /// The output buffer is too small for the reply.
    #[error("cannot write reply: {0}")]
    Emit(EmitError),
}
