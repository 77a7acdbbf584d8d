//! [`PacketBuilder`]: a whole Ethernet + IPv4/IPv6 + UDP/TCP frame around a payload, for traffic
//! generators and tests. Like encapsulation it is headroom-style: the payload already sits at
//! `buf[header_len()..]` and only the headers are written.

use core::net::IpAddr;

use crate::ethernet::{EtherType, EthernetAddress, EthernetRepr, VlanTag};
use crate::ipv4::{protocol, Ipv4Repr};
use crate::ipv6::Ipv6Repr;
use crate::tcp::{TcpFlags, TcpRepr};
use crate::udp::{UdpChecksum, UdpRepr};
use crate::EmitError;

/// The upper-layer header of a built frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum L4Header {
    /// UDP (8 bytes).
    Udp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
    },
    /// TCP without options (20 bytes).
    Tcp {
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// Sequence number.
        seq_number: u32,
        /// Acknowledgment number.
        ack_number: u32,
        /// Flags.
        flags: TcpFlags,
        /// Window.
        window: u16,
    },
}

impl L4Header {
    fn len(&self) -> usize {
        match self {
            Self::Udp { .. } => crate::udp::HEADER_LEN,
            Self::Tcp { .. } => crate::tcp::HEADER_LEN,
        }
    }
}

/// Everything needed to write the headers of a plain (untunnelled) frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct PacketBuilder {
    /// Source MAC.
    pub src_mac: EthernetAddress,
    /// Destination MAC.
    pub dst_mac: EthernetAddress,
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanTag>,
    /// Source address (IPv4 or IPv6; both addresses of one family).
    pub src_ip: IpAddr,
    /// Destination address.
    pub dst_ip: IpAddr,
    /// TTL / hop limit.
    pub ttl: u8,
    /// IPv4 identification (ignored for IPv6).
    pub ident: u16,
    /// Upper layer.
    pub l4: L4Header,
    /// Compute the UDP checksum over IPv4 (always computed over IPv6, and for TCP).
    pub udp_checksum_v4: bool,
}

impl PacketBuilder {
    /// A UDP frame builder with TTL 64 and the UDP checksum on.
    pub fn udp(
        src_mac: EthernetAddress,
        dst_mac: EthernetAddress,
        src_ip: IpAddr,
        dst_ip: IpAddr,
        src_port: u16,
        dst_port: u16,
    ) -> Self {
        Self {
            src_mac,
            dst_mac,
            vlan: None,
            src_ip,
            dst_ip,
            ttl: 64,
            ident: 0,
            l4: L4Header::Udp { src_port, dst_port },
            udp_checksum_v4: true,
        }
    }

    fn eth(&self) -> EthernetRepr {
        EthernetRepr {
            src_addr: self.src_mac,
            dst_addr: self.dst_mac,
            vlan: self.vlan,
            ethertype: if self.dst_ip.is_ipv6() {
                EtherType::IPV6
            } else {
                EtherType::IPV4
            },
        }
    }

    /// Bytes before the payload: Ethernet 14/18 + IP 20/40 + UDP 8 / TCP 20.
    pub fn header_len(&self) -> usize {
        let ip = if self.dst_ip.is_ipv6() {
            crate::ipv6::HEADER_LEN
        } else {
            crate::ipv4::HEADER_LEN
        };
        self.eth().header_len() + ip + self.l4.len()
    }

    /// Writes the headers in front of the payload `buf[header_len()..header_len() + payload_len]`
    /// and returns the frame length.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<usize, EmitError> {
        let h = self.header_len();
        let total = h.checked_add(payload_len).ok_or(EmitError::TooLong)?;
        let frame = crate::prefix_mut(buf, total)?;
        let eth = self.eth();
        let l3 = eth.header_len();
        eth.emit(frame)?;
        let (proto, l4) = match self.l4 {
            L4Header::Udp { .. } => (protocol::UDP, self.l4.len()),
            L4Header::Tcp { .. } => (protocol::TCP, self.l4.len()),
        };
        let seg_len = l4 + payload_len;
        let l4_off = match (self.src_ip, self.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                Ipv4Repr {
                    ttl: self.ttl,
                    ident: self.ident,
                    ..Ipv4Repr::new(s, d, proto, seg_len)
                }
                .emit(&mut frame[l3..])?;
                l3 + crate::ipv4::HEADER_LEN
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                Ipv6Repr {
                    hop_limit: self.ttl,
                    ..Ipv6Repr::new(s, d, proto, seg_len)
                }
                .emit(&mut frame[l3..])?;
                l3 + crate::ipv6::HEADER_LEN
            }
            _ => return Err(EmitError::AddressFamilyMismatch),
        };
        let seg = &mut frame[l4_off..];
        match self.l4 {
            L4Header::Udp { src_port, dst_port } => {
                let c = if self.udp_checksum_v4 {
                    UdpChecksum::Compute
                } else {
                    UdpChecksum::None
                };
                UdpRepr { src_port, dst_port }.emit(seg, self.src_ip, self.dst_ip, c)?;
            }
            L4Header::Tcp {
                src_port,
                dst_port,
                seq_number,
                ack_number,
                flags,
                window,
            } => {
                TcpRepr {
                    src_port,
                    dst_port,
                    seq_number,
                    ack_number,
                    flags,
                    window,
                    urgent: 0,
                }
                .emit(seg, self.src_ip, self.dst_ip)?;
            }
        }
        Ok(total)
    }

    /// Copies `payload` after the headers in `out` and writes the headers; returns the frame
    /// length.
    pub fn build(&self, payload: &[u8], out: &mut [u8]) -> Result<usize, EmitError> {
        let h = self.header_len();
        let total = h + payload.len();
        crate::prefix_mut(out, total)?[h..].copy_from_slice(payload);
        self.emit(out, payload.len())
    }
}
