//! The stamp every generated packet carries at the start of its L4 payload, so a receiver can
//! measure loss, duplicates, reordering and latency without any state shared with the sender.
//!
//! Layout (32 bytes, big-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `SBG1` (0x53424731) |
//! | 4 | 4 | stream id (random per generator run, low byte = target node) |
//! | 8 | 8 | sequence number within the stream, from 0 |
//! | 16 | 8 | send time, CLOCK_MONOTONIC ns (all namespaces share that clock) |
//! | 24 | 4 | flow index (line of the flows file, data lines only, from 0) |
//! | 28 | 4 | packets the stream will carry in total (`u32::MAX`: unknown) |

/// The magic at offset 0.
pub const MAGIC: u32 = 0x5342_4731;
/// Bytes of a stamp.
pub const STAMP_LEN: usize = 32;
/// Total value meaning "not known in advance".
pub const TOTAL_UNKNOWN: u32 = u32::MAX;

/// The fields of a stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// Stream id.
    pub stream: u32,
    /// Sequence number within the stream.
    pub seq: u64,
    /// Send time (CLOCK_MONOTONIC ns).
    pub send_ns: u64,
    /// Flow index.
    pub flow: u32,
    /// Packets in the stream ([`TOTAL_UNKNOWN`] if not known).
    pub total: u32,
}

impl Stamp {
    /// Writes the stamp into the first [`STAMP_LEN`] bytes of `buf`; false if it is shorter.
    pub fn write(&self, buf: &mut [u8]) -> bool {
        let Some(b) = buf.get_mut(..STAMP_LEN) else {
            return false;
        };
        b[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&self.stream.to_be_bytes());
        b[8..16].copy_from_slice(&self.seq.to_be_bytes());
        b[16..24].copy_from_slice(&self.send_ns.to_be_bytes());
        b[24..28].copy_from_slice(&self.flow.to_be_bytes());
        b[28..32].copy_from_slice(&self.total.to_be_bytes());
        true
    }

    /// Reads a stamp from the start of `buf`: `None` if it is too short or the magic is wrong.
    pub fn read(buf: &[u8]) -> Option<Stamp> {
        let b = buf.get(..STAMP_LEN)?;
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| (u64::from(u32_at(o)) << 32) | u64::from(u32_at(o + 4));
        if u32_at(0) != MAGIC {
            return None;
        }
        Some(Stamp {
            stream: u32_at(4),
            seq: u64_at(8),
            send_ns: u64_at(16),
            flow: u32_at(24),
            total: u32_at(28),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(stream: u32, seq: u64, send_ns: u64, flow: u32, total: u32) {
            let s = Stamp { stream, seq, send_ns, flow, total };
            let mut b = [0u8; 40];
            prop_assert!(s.write(&mut b));
            prop_assert_eq!(Stamp::read(&b), Some(s));
            prop_assert_eq!(Stamp::read(&b[..31]), None);
        }

        #[test]
        fn read_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Stamp::read(&b);
        }
    }

    #[test]
    fn wrong_magic() {
        let mut b = [0u8; 32];
        Stamp {
            stream: 1,
            seq: 2,
            send_ns: 3,
            flow: 4,
            total: 5,
        }
        .write(&mut b);
        b[0] ^= 1;
        assert_eq!(Stamp::read(&b), None);
    }
}
