//! Test frames for the I/O benchmark and a minimal pcap writer for tcpreplay.

use std::io::Write;

/// An Ethernet II / IPv4 / UDP frame of `len` bytes (no FCS) from `src` to `dst`, with valid
/// IPv4 header checksum and a UDP source port that varies with `flow`.
pub fn udp_frame(dst: [u8; 6], src: [u8; 6], len: usize, flow: u16) -> Vec<u8> {
    udp_frame_to(dst, src, len, flow, [198, 19, 0, 1])
}

/// [`udp_frame`] to the IPv4 address `dst_ip` (a UE address of the engine's tables).
pub fn udp_frame_to(dst: [u8; 6], src: [u8; 6], len: usize, flow: u16, dst_ip: [u8; 4]) -> Vec<u8> {
    udp_frame_between(dst, src, len, flow, [198, 18, 0, 1], dst_ip)
}

/// [`udp_frame`] from the IPv4 address `src_ip` to `dst_ip`.
pub fn udp_frame_between(
    dst: [u8; 6],
    src: [u8; 6],
    len: usize,
    flow: u16,
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
) -> Vec<u8> {
    let len = len.max(60);
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src_ip);
    ip[16..20].copy_from_slice(&dst_ip);
    let mut sum = 0u32;
    for c in ip.chunks(2) {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let udp = &mut f[34..42];
    udp[0..2].copy_from_slice(&1024u16.wrapping_add(flow).to_be_bytes());
    udp[2..4].copy_from_slice(&9u16.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    f
}

/// Writes `frames` as a classic little-endian pcap file (Ethernet link type).
pub fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    w.write_all(&0xa1b2c3d4u32.to_le_bytes())?;
    w.write_all(&2u16.to_le_bytes())?;
    w.write_all(&4u16.to_le_bytes())?;
    w.write_all(&0i32.to_le_bytes())?;
    w.write_all(&0u32.to_le_bytes())?;
    w.write_all(&65535u32.to_le_bytes())?;
    w.write_all(&1u32.to_le_bytes())?;
    for (i, f) in frames.iter().enumerate() {
        w.write_all(&0u32.to_le_bytes())?;
        w.write_all(&(i as u32).to_le_bytes())?;
        w.write_all(&(f.len() as u32).to_le_bytes())?;
        w.write_all(&(f.len() as u32).to_le_bytes())?;
        w.write_all(f)?;
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_has_valid_ip_checksum_and_lengths() {
        let f = udp_frame([2; 6], [4; 6], 60, 3);
        assert_eq!(f.len(), 60);
        let mut sum = 0u32;
        for c in f[14..34].chunks(2) {
            sum += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 46);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]), 26);
    }

    #[test]
    fn frame_to_a_ue_carries_its_address() {
        let f = udp_frame_to([2; 6], [4; 6], 60, 3, [16, 1, 2, 3]);
        assert_eq!(&f[30..34], &[16, 1, 2, 3]);
        assert!(sb_wire::parse_frame(&f).is_ok());
    }

    #[test]
    fn pcap_layout() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pcap");
        write_pcap(&p, &[vec![1; 60], vec![2; 70]]).unwrap();
        let b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 24 + 16 + 60 + 16 + 70);
        assert_eq!(&b[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
    }
}
