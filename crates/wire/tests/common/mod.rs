//! Frame builders for the integration tests, written on top of the crate's own `emit` functions
//! (the scapy and tshark tests check those against tools we did not write).
#![allow(dead_code)]

use std::net::IpAddr;
use std::vec::Vec;

use sb_wire::ipv4::protocol;
use sb_wire::{
    EtherType, EthernetAddress, EthernetRepr, GtpuRepr, IcmpRepr, IcmpVersion, Ipv4Repr, Ipv6Repr,
    TcpFlags, TcpRepr, UdpChecksum, UdpRepr, VlanTag,
};

/// Upper layer of a built packet.
#[derive(Clone, Copy, Debug)]
pub enum L4Spec {
    /// UDP with ports.
    Udp(u16, u16),
    /// TCP with ports and flags.
    Tcp(u16, u16, TcpFlags),
    /// ICMP / ICMPv6 (by address family).
    Icmp(IcmpRepr),
    /// Another protocol, payload as is.
    Raw(u8),
}

/// IPv6 extension headers to insert (kind, total length in bytes for variable ones).
#[derive(Clone, Copy, Debug)]
pub enum Ext6 {
    /// Hop-by-hop, 8*(n+1) bytes.
    HopByHop(u8),
    /// Routing, 8*(n+1) bytes.
    Routing(u8),
    /// Destination options, 8*(n+1) bytes.
    DestOpts(u8),
    /// Authentication header, 4*(n+2) bytes.
    Auth(u8),
    /// Fragment header with offset (bytes, multiple of 8), more flag and ident.
    Fragment(u16, bool, u32),
}

/// Builds the upper-layer segment for `l4` with `payload`.
pub fn l4_segment(src: IpAddr, dst: IpAddr, l4: L4Spec, payload: &[u8]) -> (u8, Vec<u8>) {
    match l4 {
        L4Spec::Udp(s, d) => {
            let mut v = vec![0u8; 8 + payload.len()];
            v[8..].copy_from_slice(payload);
            UdpRepr {
                src_port: s,
                dst_port: d,
            }
            .emit(&mut v, src, dst, UdpChecksum::Compute)
            .unwrap();
            (protocol::UDP, v)
        }
        L4Spec::Tcp(s, d, flags) => {
            let mut v = vec![0u8; 20 + payload.len()];
            v[20..].copy_from_slice(payload);
            TcpRepr {
                src_port: s,
                dst_port: d,
                seq_number: 1000,
                ack_number: 2000,
                flags,
                window: 8192,
                urgent: 0,
            }
            .emit(&mut v, src, dst)
            .unwrap();
            (protocol::TCP, v)
        }
        L4Spec::Icmp(r) => {
            let mut v = vec![0u8; 8 + payload.len()];
            v[8..].copy_from_slice(payload);
            let (ver, p) = if src.is_ipv6() {
                (IcmpVersion::V6, protocol::ICMPV6)
            } else {
                (IcmpVersion::V4, protocol::ICMP)
            };
            r.emit(&mut v, ver, Some((src, dst))).unwrap();
            (p, v)
        }
        L4Spec::Raw(p) => (p, payload.to_vec()),
    }
}

/// Builds an IP packet (v4 or v6 by address family) around an upper-layer segment.
pub fn ip_packet(src: IpAddr, dst: IpAddr, proto: u8, seg: &[u8], exts: &[Ext6]) -> Vec<u8> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut v = vec![0u8; 20 + seg.len()];
            v[20..].copy_from_slice(seg);
            Ipv4Repr::new(s, d, proto, seg.len()).emit(&mut v).unwrap();
            v
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut ext = Vec::new();
            let codes: Vec<u8> = exts
                .iter()
                .map(|e| match e {
                    Ext6::HopByHop(_) => 0,
                    Ext6::Routing(_) => 43,
                    Ext6::DestOpts(_) => 60,
                    Ext6::Auth(_) => 51,
                    Ext6::Fragment(..) => 44,
                })
                .collect();
            for (i, e) in exts.iter().enumerate() {
                let next = codes.get(i + 1).copied().unwrap_or(proto);
                match *e {
                    Ext6::HopByHop(n) | Ext6::Routing(n) | Ext6::DestOpts(n) => {
                        let len = 8 * (usize::from(n) + 1);
                        let mut h = vec![0u8; len];
                        h[0] = next;
                        h[1] = n;
                        if matches!(e, Ext6::HopByHop(_) | Ext6::DestOpts(_)) {
                            // PadN option filling the rest.
                            h[2] = 1;
                            h[3] = (len - 4) as u8;
                        } else {
                            h[2] = 4; // routing type (deprecated RH0 style is fine for parsing)
                            h[3] = 0; // segments left
                        }
                        ext.extend_from_slice(&h);
                    }
                    Ext6::Auth(n) => {
                        let len = 4 * (usize::from(n) + 2);
                        let mut h = vec![0u8; len];
                        h[0] = next;
                        h[1] = n;
                        h[4..8].copy_from_slice(&0x1234u32.to_be_bytes()); // SPI
                        ext.extend_from_slice(&h);
                    }
                    Ext6::Fragment(off, more, id) => {
                        let mut h = [0u8; 8];
                        h[0] = next;
                        h[2..4].copy_from_slice(&(off | u16::from(more)).to_be_bytes());
                        h[4..8].copy_from_slice(&id.to_be_bytes());
                        ext.extend_from_slice(&h);
                    }
                }
            }
            let first = codes.first().copied().unwrap_or(proto);
            let mut v = vec![0u8; 40 + ext.len() + seg.len()];
            v[40..40 + ext.len()].copy_from_slice(&ext);
            v[40 + ext.len()..].copy_from_slice(seg);
            Ipv6Repr::new(s, d, first, ext.len() + seg.len())
                .emit(&mut v)
                .unwrap();
            v
        }
        _ => panic!("mixed families"),
    }
}

/// Prepends an Ethernet header.
pub fn eth_frame(vlan: Option<VlanTag>, ethertype: EtherType, l3: &[u8]) -> Vec<u8> {
    let e = EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 0xaa]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 0xbb]),
        vlan,
        ethertype,
    };
    let mut v = vec![0u8; e.header_len() + l3.len()];
    e.emit(&mut v).unwrap();
    v[e.header_len()..].copy_from_slice(l3);
    v
}

/// Ethernet frame around an IP packet (EtherType from the version nibble).
pub fn ip_frame(vlan: Option<VlanTag>, ip: &[u8]) -> Vec<u8> {
    let et = if ip[0] >> 4 == 6 {
        EtherType::IPV6
    } else {
        EtherType::IPV4
    };
    eth_frame(vlan, et, ip)
}

/// A GTP-U message with `repr`'s header and `payload`.
pub fn gtpu_message(repr: &GtpuRepr<'_>, payload: &[u8]) -> Vec<u8> {
    let h = repr.header_len();
    let mut v = vec![0u8; h + payload.len()];
    repr.emit(&mut v, payload.len()).unwrap();
    v[h..].copy_from_slice(payload);
    v
}
