//! IPv4 fragmentation (RFC 791 sec. 2.3 and 3.2, "An Example Fragmentation Procedure"): cutting
//! one IPv4 packet into fragments that each fit an MTU. The LTE engine cuts the outer
//! (GTP-U/UDP/IPv4) packet of a downlink packet this way when its inner IPv4 packet allows
//! fragmentation (DF clear) and the encapsulation exceeds the access link's MTU (TS 29.281 sec.
//! 4.2.1 leaves fragmenting the outer packet to the IP layer).
//!
//! [`Fragmenter::new`] checks the packet and plans the cut; [`Fragmenter::write`] writes
//! fragment `k` (its header and its slice of the payload) into another buffer, and
//! [`Fragmenter::cut_first`] turns the packet itself into fragment 0 in place (write the others
//! first: it changes the header they copy). Every fragment has the packet's header with:
//! - the same identification (the caller gives the packet an identification worth
//!   reassembling by, RFC 6864: a packet with DF set may carry any);
//! - DF clear, MF set on every fragment but the last, which keeps the packet's own MF (a
//!   packet that is itself a fragment is cut further, its offset added: RFC 791);
//! - the fragment offset in 8-byte units, the total length and the header checksum of the
//!   fragment.
//!
//! Every fragment's data but the last's is a multiple of 8 bytes, as large as the MTU allows.
//! A packet with IPv4 options is refused ([`FragmentError::Options`]: which options a fragment
//! keeps depends on each option's copy bit; the headers this crate builds have none).

use crate::checksum;
use crate::field::{be16, set_be16};
use crate::ipv4::{Ipv4Error, Ipv4Packet, HEADER_LEN};
use crate::EmitError;

/// Why a packet cannot be fragmented.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum FragmentError {
    /// The bytes are not a well-formed IPv4 packet.
    #[error("not a well-formed IPv4 packet: {0}")]
    Malformed(Ipv4Error),
    /// The header has options.
    #[error("IPv4 header with options (not fragmented here)")]
    Options,
    /// The MTU leaves less than 8 bytes of data after the header.
    #[error("MTU {mtu} leaves no room for 8 bytes of data after a {header}-byte header")]
    MtuTooSmall {
        /// The MTU asked for.
        mtu: usize,
        /// The header's length.
        header: usize,
    },
    /// A fragment's offset would not fit the 13-bit field (a fragment near 64 KiB cut again).
    #[error("fragment offset past the 13-bit field")]
    OffsetOverflow,
}

/// The plan to cut one IPv4 packet into fragments of at most `mtu` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragmenter {
    /// Header bytes (20: no options).
    header: usize,
    /// Payload bytes of the packet.
    data: usize,
    /// Payload bytes per fragment but the last (a multiple of 8).
    step: usize,
    /// The packet's own fragment offset, in 8-byte units.
    offset: u16,
    /// The packet's own MF flag.
    more: bool,
}

impl Fragmenter {
    /// Plans the cut of `packet` (an IPv4 packet; bytes after its total length are ignored)
    /// into fragments of at most `mtu` bytes. The packet's DF flag is not looked at: whether it
    /// may be fragmented is the caller's decision. A packet that fits is one fragment
    /// ([`count`](Self::count) 1).
    pub fn new(packet: &[u8], mtu: usize) -> Result<Fragmenter, FragmentError> {
        let p = Ipv4Packet::new_checked(packet).map_err(FragmentError::Malformed)?;
        let header = p.header_len();
        if header != HEADER_LEN {
            return Err(FragmentError::Options);
        }
        let data = usize::from(p.total_len()) - header;
        let step = mtu.saturating_sub(header) & !7;
        if step == 0 {
            return Err(FragmentError::MtuTooSmall { mtu, header });
        }
        let f = Fragmenter {
            header,
            data,
            step,
            offset: p.frag_offset() >> 3,
            more: p.more_frags(),
        };
        let last = f.count() - 1;
        if usize::from(f.offset) + last * step / 8 > 0x1fff {
            return Err(FragmentError::OffsetOverflow);
        }
        Ok(f)
    }

    /// How many fragments (at least 1).
    pub fn count(&self) -> usize {
        if self.data == 0 {
            1
        } else {
            self.data.div_ceil(self.step)
        }
    }

    /// The payload bytes fragment `k` carries (a range of the packet's payload).
    pub fn data_range(&self, k: usize) -> core::ops::Range<usize> {
        let s = (k * self.step).min(self.data);
        s..(s + self.step).min(self.data)
    }

    /// Bytes of fragment `k` (header included).
    pub fn fragment_len(&self, k: usize) -> usize {
        self.header + self.data_range(k).len()
    }

    /// Writes the header of fragment `k` over `h` (a copy of the packet's header).
    fn fix_header(&self, k: usize, h: &mut [u8]) {
        let len = self.fragment_len(k) as u16;
        let last = k + 1 >= self.count();
        let more = !last || self.more;
        let off = self.offset + (k * self.step / 8) as u16;
        set_be16(h, 2, len);
        set_be16(h, 6, (u16::from(more) << 13) | off);
        set_be16(h, 10, 0);
        let c = checksum::checksum(&h[..self.header]);
        set_be16(h, 10, c);
    }

    /// Writes fragment `k` (below [`count`](Self::count)) of `packet` (the packet
    /// [`new`](Self::new) planned, unchanged) at the start of `out`; returns its length.
    pub fn write(&self, packet: &[u8], k: usize, out: &mut [u8]) -> Result<usize, EmitError> {
        if k >= self.count() || packet.len() < self.header + self.data {
            return Err(EmitError::BadField);
        }
        let n = self.fragment_len(k);
        let o = crate::prefix_mut(out, n)?;
        let r = self.data_range(k);
        o[..self.header].copy_from_slice(&packet[..self.header]);
        o[self.header..].copy_from_slice(&packet[self.header + r.start..self.header + r.end]);
        self.fix_header(k, o);
        Ok(n)
    }

    /// Turns `packet` (the packet [`new`](Self::new) planned) into its first fragment in place:
    /// its header rewritten, its length cut (the bytes after it are left as they are; the
    /// caller shortens its frame to the length returned).
    pub fn cut_first(&self, packet: &mut [u8]) -> Result<usize, EmitError> {
        if packet.len() < self.header + self.data {
            return Err(EmitError::BadField);
        }
        self.fix_header(0, packet);
        Ok(usize::from(be16(packet, 2)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv4::Ipv4Repr;
    use core::net::Ipv4Addr;
    use std::vec;
    use std::vec::Vec;

    fn packet(payload: usize, ident: u16, dont_frag: bool) -> Vec<u8> {
        let mut r = Ipv4Repr::new(
            Ipv4Addr::new(192, 0, 2, 1),
            Ipv4Addr::new(192, 0, 2, 2),
            17,
            payload,
        );
        r.ident = ident;
        r.dont_frag = dont_frag;
        let mut b = vec![0u8; HEADER_LEN + payload];
        r.emit(&mut b).unwrap();
        for (i, x) in b[HEADER_LEN..].iter_mut().enumerate() {
            *x = (i * 7 + i / 251) as u8;
        }
        b
    }

    /// The reassembly oracle (RFC 815's hole list, simplified to a byte map): the fragments'
    /// headers checked (checksum, identification, DF clear, MF, 8-byte offsets), their data
    /// placed by offset; returns the packet they make, its header as the first fragment's with
    /// the whole length, flags and offset of the original.
    fn reassemble(frags: &[Vec<u8>], mtu: usize) -> Vec<u8> {
        let mut data = Vec::new();
        let mut seen = Vec::new();
        let mut end = None;
        let first = Ipv4Packet::new_checked(&frags[0][..]).unwrap();
        for f in frags {
            assert!(
                f.len() <= mtu,
                "a fragment of {} bytes over MTU {mtu}",
                f.len()
            );
            let p = Ipv4Packet::new_checked(&f[..]).unwrap();
            assert!(p.verify_checksum());
            assert_eq!(p.ident(), first.ident());
            assert!(!p.dont_frag());
            assert_eq!(usize::from(p.total_len()), f.len());
            assert_eq!(p.packet()[12..20], first.packet()[12..20]);
            let off = usize::from(p.frag_offset());
            let pl = p.payload();
            if p.more_frags() {
                assert_eq!(
                    pl.len() % 8,
                    0,
                    "a non-last fragment's data is 8-byte units"
                );
            } else {
                assert!(end.is_none(), "two last fragments");
                end = Some(off + pl.len());
            }
            if data.len() < off + pl.len() {
                data.resize(off + pl.len(), 0);
                seen.resize(off + pl.len(), false);
            }
            for (i, &b) in pl.iter().enumerate() {
                assert!(!seen[off + i], "overlapping fragments");
                seen[off + i] = true;
                data[off + i] = b;
            }
        }
        assert_eq!(end, Some(data.len()));
        assert!(seen.iter().all(|&s| s), "a hole");
        let mut out = first.packet()[..HEADER_LEN].to_vec();
        out.extend_from_slice(&data);
        let n = out.len() as u16;
        set_be16(&mut out, 2, n);
        out
    }

    fn cut(p: &[u8], mtu: usize) -> Vec<Vec<u8>> {
        let f = Fragmenter::new(p, mtu).unwrap();
        let mut frags = Vec::new();
        for k in 1..f.count() {
            let mut o = vec![0u8; mtu + 10];
            let n = f.write(p, k, &mut o).unwrap();
            o.truncate(n);
            frags.push(o);
        }
        let mut first = p.to_vec();
        let n = f.cut_first(&mut first).unwrap();
        first.truncate(n);
        frags.insert(0, first);
        frags
    }

    /// The original's header with DF cleared (the fragments all have it clear) and its
    /// checksum recomputed.
    fn without_df(p: &[u8]) -> Vec<u8> {
        let mut q = p.to_vec();
        q[6] &= !0x40;
        Ipv4Packet::new_unchecked(&mut q[..]).fill_checksum();
        q
    }

    #[test]
    fn a_1536_byte_packet_in_a_1400_mtu_is_two_fragments() {
        let p = packet(1516, 0x1234, false);
        let f = Fragmenter::new(&p, 1400).unwrap();
        assert_eq!(f.count(), 2);
        let frags = cut(&p, 1400);
        assert_eq!(frags[0].len(), 20 + 1376);
        assert_eq!(frags[1].len(), 20 + 140);
        // Offset 1376 / 8 = 172 units, MF clear.
        assert_eq!(be16(&frags[1], 6), 172);
        assert_eq!(be16(&frags[0], 6), 0x2000);
        let mut r = reassemble(&frags, 1400);
        set_be16(&mut r, 6, 0);
        Ipv4Packet::new_unchecked(&mut r[..]).fill_checksum();
        assert_eq!(r, without_df(&p));
    }

    #[test]
    fn bad_packets_and_mtus_are_refused() {
        let p = packet(100, 1, false);
        assert_eq!(
            Fragmenter::new(&p, 27),
            Err(FragmentError::MtuTooSmall {
                mtu: 27,
                header: 20
            })
        );
        assert!(matches!(
            Fragmenter::new(&p[..50], 100),
            Err(FragmentError::Malformed(_))
        ));
        let mut o = p.clone();
        o[0] = 0x46;
        o.insert(20, 1);
        o.insert(20, 1);
        o.insert(20, 1);
        o.insert(20, 1);
        set_be16(&mut o, 2, 124);
        assert_eq!(Fragmenter::new(&o, 60), Err(FragmentError::Options));
        // A fragment near the end of a 64 KiB packet cut again would overflow the field.
        let mut q = packet(600, 1, false);
        set_be16(&mut q, 6, 0x2000 | 0x1fff);
        assert_eq!(Fragmenter::new(&q, 300), Err(FragmentError::OffsetOverflow));
        // Fragment index past the count, or another (shorter) packet.
        let f = Fragmenter::new(&p, 60).unwrap();
        let mut out = [0u8; 100];
        assert!(f.write(&p, f.count(), &mut out).is_err());
        assert!(f.write(&p[..40], 1, &mut out).is_err());
        assert!(f.write(&p, 0, &mut out[..10]).is_err());
    }

    proptest::proptest! {
        /// Every cut reassembles (by the oracle above) into the original packet, DF clear;
        /// every fragment fits the MTU; the count is the least possible with 8-byte units. A
        /// packet that is itself a fragment keeps its offset and its MF on the last piece.
        #[test]
        fn fragments_reassemble_into_the_packet(
            payload in 0usize..3000,
            mtu in 28usize..2000,
            ident in proptest::prelude::any::<u16>(),
            df in proptest::prelude::any::<bool>(),
            offset_units in 0u16..64,
            more in proptest::prelude::any::<bool>(),
        ) {
            let mut p = packet(payload, ident, df);
            let flags = (u16::from(df) << 14) | (u16::from(more) << 13) | offset_units;
            set_be16(&mut p, 6, flags);
            Ipv4Packet::new_unchecked(&mut p[..]).fill_checksum();
            let f = Fragmenter::new(&p, mtu).unwrap();
            let step = (mtu - 20) / 8 * 8;
            proptest::prop_assert_eq!(f.count(), payload.div_ceil(step).max(1));
            let frags = cut(&p, mtu);
            proptest::prop_assert_eq!(frags.len(), f.count());
            // The reassembly oracle works on offsets relative to the packet's own.
            let base = usize::from(offset_units) * 8;
            let mut rel: Vec<Vec<u8>> = frags.clone();
            for (k, g) in rel.iter_mut().enumerate() {
                let p = Ipv4Packet::new_checked(&g[..]).unwrap();
                proptest::prop_assert!(p.verify_checksum());
                let last = k + 1 == frags.len();
                proptest::prop_assert_eq!(p.more_frags(), !last || more);
                let off = usize::from(p.frag_offset()) - base;
                let mf = if last { 0 } else { 0x2000 };
                set_be16(g, 6, mf | (off / 8) as u16);
                Ipv4Packet::new_unchecked(&mut g[..]).fill_checksum();
            }
            let mut r = reassemble(&rel, mtu);
            // The original's flags and offset back, DF clear.
            set_be16(&mut r, 6, (u16::from(more) << 13) | offset_units);
            Ipv4Packet::new_unchecked(&mut r[..]).fill_checksum();
            proptest::prop_assert_eq!(r, without_df(&p));
        }
    }
}
