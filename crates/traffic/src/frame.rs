//! Building the generator's frames: Ethernet / IPv4 / UDP or TCP / stamp / zero padding, with
//! correct lengths and checksums (built with sb-wire).

use std::net::{IpAddr, Ipv4Addr};

use sb_wire::{
    EtherType, EthernetAddress, EthernetRepr, Ipv4Repr, TcpFlags, TcpRepr, UdpChecksum, UdpRepr,
};

use crate::dist::{MIN_TCP_FRAME, MIN_UDP_FRAME};
use crate::stamp::{Stamp, STAMP_LEN};
use crate::TrafficError;

/// Transport protocol of generated packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// UDP (default).
    Udp,
    /// TCP segments (ACK|PSH, no connection): for engines keyed on the 5-tuple.
    Tcp,
}

impl std::str::FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Proto::Udp),
            "tcp" => Ok(Proto::Tcp),
            _ => Err(format!("unknown protocol {s:?} (udp|tcp)")),
        }
    }
}

impl Proto {
    /// Smallest frame that carries a stamp.
    pub fn min_frame(self) -> usize {
        match self {
            Proto::Udp => MIN_UDP_FRAME,
            Proto::Tcp => MIN_TCP_FRAME,
        }
    }
}

/// The fixed part of every frame towards one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameTemplate {
    /// Source MAC (the Internet-side namespace's port).
    pub src_mac: [u8; 6],
    /// Destination MAC (the node's `inet` port).
    pub dst_mac: [u8; 6],
    /// Source address (the "Internet server").
    pub src_ip: Ipv4Addr,
    /// Protocol.
    pub proto: Proto,
    /// Destination port; the source port is `10000 + flow % 50000`.
    pub dst_port: u16,
}

/// Source port used for flow `flow`.
pub fn src_port(flow: u32) -> u16 {
    10000 + (flow % 50000) as u16
}

/// Writes a complete frame of exactly `buf.len()` bytes (at least [`Proto::min_frame`]) to UE
/// address `ue`, carrying `stamp`.
pub fn build_frame(
    t: &FrameTemplate,
    buf: &mut [u8],
    ue: Ipv4Addr,
    stamp: &Stamp,
) -> Result<(), TrafficError> {
    let len = buf.len();
    if len < t.proto.min_frame() {
        return Err(TrafficError::Build(format!(
            "frame of {len} bytes is below the minimum {}",
            t.proto.min_frame()
        )));
    }
    let emit = |e: sb_wire::EmitError| TrafficError::Build(format!("{e:?}"));
    EthernetRepr {
        src_addr: EthernetAddress(t.src_mac),
        dst_addr: EthernetAddress(t.dst_mac),
        vlan: None,
        ethertype: EtherType::IPV4,
    }
    .emit(buf)
    .map_err(emit)?;
    let (proto, l4_hdr) = match t.proto {
        Proto::Udp => (17u8, 8usize),
        Proto::Tcp => (6u8, 20usize),
    };
    let l4 = &mut buf[14 + 20..];
    let payload = &mut l4[l4_hdr..];
    payload.fill(0);
    stamp.write(&mut payload[..STAMP_LEN]);
    let (src, dst): (IpAddr, IpAddr) = (t.src_ip.into(), ue.into());
    match t.proto {
        Proto::Udp => UdpRepr {
            src_port: src_port(stamp.flow),
            dst_port: t.dst_port,
        }
        .emit(l4, src, dst, UdpChecksum::Compute)
        .map_err(emit)?,
        Proto::Tcp => TcpRepr {
            src_port: src_port(stamp.flow),
            dst_port: t.dst_port,
            seq_number: stamp.seq as u32,
            ack_number: 1,
            flags: TcpFlags(TcpFlags::ACK.0 | TcpFlags::PSH.0),
            window: 65535,
            urgent: 0,
        }
        .emit(l4, src, dst)
        .map_err(emit)?,
    }
    let l4_len = len - 14 - 20;
    let mut ip = Ipv4Repr::new(t.src_ip, ue, proto, l4_len);
    ip.ident = stamp.seq as u16;
    ip.emit(&mut buf[14..]).map_err(emit)?;
    Ok(())
}

/// Finds the stamp in a received frame: `Ok(Some)` for one of ours, `Ok(None)` for a well-formed
/// frame that is not (ARP, foreign traffic, a fragment), `Err` for a malformed frame.
pub fn parse_stamp(frame: &[u8]) -> Result<Option<Stamp>, sb_wire::WireError> {
    let p = sb_wire::parse_frame(frame)?;
    let Some(ip) = p.ip() else { return Ok(None) };
    if ip.fragment.is_some() {
        return Ok(None);
    }
    let end = ip.offset + ip.packet.len();
    let start = match ip.l4 {
        sb_wire::L4::Udp { .. } => ip.l4_offset + 8,
        sb_wire::L4::Tcp { .. } => {
            let off = frame
                .get(ip.l4_offset + 12)
                .map(|b| usize::from(b >> 4) * 4);
            match off {
                Some(o) => ip.l4_offset + o,
                None => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    Ok(frame.get(start..end).and_then(Stamp::read))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn template(proto: Proto) -> FrameTemplate {
        FrameTemplate {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(10, 1, 0, 2),
            proto,
            dst_port: 5000,
        }
    }

    #[test]
    fn udp_and_tcp_round_trip() {
        for proto in [Proto::Udp, Proto::Tcp] {
            for len in [proto.min_frame(), 128, 1514] {
                let st = Stamp {
                    stream: 7,
                    seq: 99,
                    send_ns: 123,
                    flow: 4,
                    total: 1000,
                };
                let mut buf = vec![0u8; len];
                build_frame(
                    &template(proto),
                    &mut buf,
                    Ipv4Addr::new(100, 64, 0, 9),
                    &st,
                )
                .unwrap();
                let opts = sb_wire::ParseOptions {
                    verify_l4_checksum: true,
                    ..Default::default()
                };
                let p = sb_wire::parse_frame_with(&buf, &opts).unwrap();
                assert_eq!(p.dst_addr(), Some(IpAddr::V4(Ipv4Addr::new(100, 64, 0, 9))));
                let t = p.five_tuple().unwrap();
                assert_eq!((t.src_port, t.dst_port), (src_port(4), 5000));
                assert_eq!(parse_stamp(&buf).unwrap(), Some(st));
            }
        }
        let mut small = vec![0u8; 73];
        let st = Stamp {
            stream: 0,
            seq: 0,
            send_ns: 0,
            flow: 0,
            total: 0,
        };
        assert!(build_frame(&template(Proto::Udp), &mut small, Ipv4Addr::LOCALHOST, &st).is_err());
    }

    proptest! {
        #[test]
        fn parse_stamp_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_stamp(&b);
        }

        #[test]
        fn truncations_are_never_ours(cut in 0usize..128) {
            let st = Stamp { stream: 1, seq: 2, send_ns: 3, flow: 4, total: 5 };
            let mut buf = vec![0u8; 128];
            build_frame(&template(Proto::Udp), &mut buf, Ipv4Addr::new(100, 64, 0, 1), &st).unwrap();
            prop_assert!(!matches!(parse_stamp(&buf[..cut]), Ok(Some(_))));
        }
    }
}
