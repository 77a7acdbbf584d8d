//! Frames built by hand (headers and checksums from scratch, not with the code under test) and
//! a checksum check that recomputes every checksum of a frame from scratch.
#![allow(dead_code)]

use sb_wire::checksum::{checksum, upper_layer};
use std::net::Ipv4Addr;

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;

/// An Ethernet/IPv4 frame around upper-layer bytes `l4` (whose checksum field is filled here:
/// TCP at 16, UDP at 6 unless `udp_checksum` is false, ICMP at 2).
pub fn ipv4_frame(
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    mut l4: Vec<u8>,
    udp_checksum: bool,
) -> Vec<u8> {
    let at = match proto {
        TCP => Some(16),
        UDP if udp_checksum => Some(6),
        ICMP => Some(2),
        _ => None,
    };
    if let Some(at) = at {
        l4[at] = 0;
        l4[at + 1] = 0;
        let c = if proto == ICMP {
            checksum(&l4)
        } else {
            let c = upper_layer(src.into(), dst.into(), proto, &l4).unwrap();
            if c == 0 {
                0xffff
            } else {
                c
            }
        };
        l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let total = 20 + l4.len();
    let mut ip = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        0x40,
        0,
        64,
        proto,
        0,
        0,
    ];
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&dst.octets());
    let c = checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&l4);
    f
}

pub fn udp(
    src: Ipv4Addr,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
    payload: &[u8],
    with_checksum: bool,
) -> Vec<u8> {
    let len = 8 + payload.len();
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&(len as u16).to_be_bytes());
    l4.extend_from_slice(&[0, 0]);
    l4.extend_from_slice(payload);
    ipv4_frame(UDP, src, dst, l4, with_checksum)
}

pub fn tcp(
    src: Ipv4Addr,
    sport: u16,
    dst: Ipv4Addr,
    dport: u16,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    let mut l4 = Vec::new();
    l4.extend_from_slice(&sport.to_be_bytes());
    l4.extend_from_slice(&dport.to_be_bytes());
    l4.extend_from_slice(&0x0102_0304u32.to_be_bytes());
    l4.extend_from_slice(&0u32.to_be_bytes());
    l4.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    l4.extend_from_slice(payload);
    ipv4_frame(TCP, src, dst, l4, true)
}

pub const SYN: u8 = 0x02;
pub const ACK: u8 = 0x10;
pub const RST: u8 = 0x04;

/// An ICMP echo request (type 8) or reply (type 0).
pub fn echo(src: Ipv4Addr, dst: Ipv4Addr, request: bool, ident: u16, seq: u16) -> Vec<u8> {
    let mut l4 = vec![if request { 8 } else { 0 }, 0, 0, 0];
    l4.extend_from_slice(&ident.to_be_bytes());
    l4.extend_from_slice(&seq.to_be_bytes());
    l4.extend_from_slice(b"ping data");
    ipv4_frame(ICMP, src, dst, l4, true)
}

/// A VXLAN packet (outer UDP checksum 0 unless `outer_checksum`) carrying `inner` (an Ethernet
/// frame).
pub fn vxlan(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    vni: u32,
    inner: &[u8],
    outer_checksum: bool,
) -> Vec<u8> {
    let mut p = vec![0x08, 0, 0, 0];
    p.extend_from_slice(&(vni << 8 | 0x5a).to_be_bytes());
    p.extend_from_slice(inner);
    udp(src, sport, dst, 4789, &p, outer_checksum)
}

fn word(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn same(stored: u16, computed: u16) -> bool {
    // 0x0000 and 0xffff are the two representations of zero in ones' complement.
    stored == computed || (stored | computed == 0xffff && stored & computed == 0)
}

/// Recomputes the IPv4 header checksum and the TCP/UDP/ICMP checksum of an Ethernet/IPv4 frame
/// (no VLAN tag) from scratch and compares them with the stored ones (a UDP checksum of 0 is
/// "none").
pub fn assert_checksums(frame: &[u8]) {
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(word(ip, 2));
    let ip = &ip[..total];
    let mut h = ip[..ihl].to_vec();
    let stored = word(&h, 10);
    h[10] = 0;
    h[11] = 0;
    assert!(
        same(stored, checksum(&h)),
        "IPv4 header checksum {stored:#06x} vs {:#06x}",
        checksum(&h)
    );
    let proto = ip[9];
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let mut l4 = ip[ihl..].to_vec();
    let at = match proto {
        TCP => 16,
        UDP => 6,
        ICMP => 2,
        _ => return,
    };
    let stored = word(&l4, at);
    if proto == UDP && stored == 0 {
        return;
    }
    l4[at] = 0;
    l4[at + 1] = 0;
    let c = if proto == ICMP {
        checksum(&l4)
    } else {
        upper_layer(src.into(), dst.into(), proto, &l4).unwrap()
    };
    assert!(same(stored, c), "L4 checksum {stored:#06x} vs {c:#06x}");
}

/// The batch of one frame.
pub fn batch(frame: &[u8]) -> sb_io::PacketBatch {
    let mut b = sb_io::PacketBatch::new(4);
    assert!(b.push(frame));
    b
}

pub fn ip(a: u8, b: u8, c: u8, d: u8) -> Ipv4Addr {
    Ipv4Addr::new(a, b, c, d)
}

/// The outside path by hand (what the engine does around a FIB hit): the frame's key, then
/// `apply` with `value`. Returns the key and the frame after `apply`.
pub fn outside<A: sb_engine::App>(
    app: &mut A,
    frame: &[u8],
    value: &[u8],
) -> (Vec<u8>, Result<Vec<u8>, sb_engine::Drop>) {
    let mut b = batch(frame);
    let mut key = vec![0u8; app.key_bytes()];
    if let Err(d) = app.downstream_key(frame, &mut key, b.meta_mut(0)) {
        return (key, Err(d));
    }
    let r = app.apply(&mut b, 0, value).map(|()| b.get(0).to_vec());
    (key, r)
}

/// The inside path: the frame after `access`.
pub fn inside<A: sb_engine::App>(app: &mut A, frame: &[u8]) -> Result<Vec<u8>, sb_engine::Drop> {
    let mut b = batch(frame);
    let a = app.access(&mut b, 0)?;
    assert_eq!(a, sb_engine::Access::ToExternal);
    Ok(b.get(0).to_vec())
}
