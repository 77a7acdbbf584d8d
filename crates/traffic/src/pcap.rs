//! A minimal pcap writer (classic format, microsecond timestamps, Ethernet link type), enough
//! for tcpreplay, tshark and scapy to read what the generator sends.

use std::io::Write;

/// Writes frames to a classic pcap stream.
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header (magic 0xa1b2c3d4 in native order, v2.4, snaplen 65535,
    /// LINKTYPE_ETHERNET).
    pub fn new(mut out: W) -> std::io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // thiszone
        h.extend_from_slice(&0u32.to_le_bytes()); // sigfigs
        h.extend_from_slice(&65535u32.to_le_bytes()); // snaplen
        h.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Appends one frame with timestamp `ts_ns` (ns since the Unix epoch).
    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> std::io::Result<()> {
        let len = frame.len().min(65535) as u32;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(((ts_ns % 1_000_000_000) / 1000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&len.to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..len as usize])
    }

    /// Flushes and returns the inner writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_frame(1_500_000_123_000, &[1, 2, 3]).unwrap();
        let b = w.finish().unwrap();
        assert_eq!(b.len(), 24 + 16 + 3);
        assert_eq!(&b[0..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(u32::from_le_bytes(b[24..28].try_into().unwrap()), 1500);
        assert_eq!(u32::from_le_bytes(b[28..32].try_into().unwrap()), 123);
        assert_eq!(&b[40..], &[1, 2, 3]);
    }
}
