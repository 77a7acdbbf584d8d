//! Incremental updates of the Internet checksum (RFC 1624) and in-place rewrites of IPv4
//! addresses, TCP/UDP ports and ICMP echo identifiers that keep every checksum right without a
//! pass over the payload.
//!
//! RFC 1624 eqn. 3: when a 16-bit word `m` of the covered data becomes `m'`, the checksum field
//! `HC` becomes `HC' = ~(~HC + ~m + m')` (ones' complement sums). An IPv4 address appears in the
//! IPv4 header and in the TCP/UDP pseudo-header, so changing it updates both checksums; a port
//! is covered by its L4 checksum only; an ICMP echo identifier by the ICMP checksum (no
//! pseudo-header). A UDP checksum of 0 means "none" (RFC 768) and stays 0; a UDP checksum that
//! the update makes 0 is sent as 0xffff, its other representation.
//!
//! The update keeps a checksum that was wrong wrong (it does not verify): what a NAT on the
//! path of a corrupted packet should do, so that the receiver still drops it.

use crate::flow::Proto;
use std::net::Ipv4Addr;

/// Folds a sum of 16-bit words to 16 bits (end-around carries), not inverted.
#[inline]
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// RFC 1624 eqn. 3: checksum field `check` after a covered 16-bit word changed from `old` to
/// `new`.
#[inline]
pub fn update16(check: u16, old: u16, new: u16) -> u16 {
    !fold(u32::from(!check) + u32::from(!old) + u32::from(new))
}

/// [`update16`] for a 32-bit field (two words), e.g. an IPv4 address.
#[inline]
pub fn update32(check: u16, old: u32, new: u32) -> u16 {
    let c = update16(check, (old >> 16) as u16, (new >> 16) as u16);
    update16(c, old as u16, new as u16)
}

/// Offset of the IPv4 header checksum in the header.
const IP_CHECKSUM: usize = 10;

/// An IPv4 packet whose header and upper-layer header were checked long enough for every
/// rewrite below: made only by [`Rewriter::new`], after which no method can index out of
/// bounds.
#[derive(Debug)]
pub struct Rewriter<'a> {
    ip: &'a mut [u8],
    l4: usize,
    proto: Proto,
}

impl<'a> Rewriter<'a> {
    /// A rewriter of the IPv4 packet `ip` (from its header to its end) whose upper-layer header
    /// starts at `l4` (the IPv4 header length) and is `proto`. `None` if `ip` is too short for
    /// the IPv4 header or that upper-layer header (TCP 20 bytes, UDP and ICMP 8).
    pub fn new(ip: &'a mut [u8], l4: usize, proto: Proto) -> Option<Rewriter<'a>> {
        let need = match proto {
            Proto::Tcp => 20,
            Proto::Udp | Proto::IcmpEchoRequest | Proto::IcmpEchoReply => 8,
        };
        if l4 < 20 || ip.len() < l4.checked_add(need)? {
            return None;
        }
        Some(Rewriter { ip, l4, proto })
    }

    fn word(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.ip[at], self.ip[at + 1]])
    }

    fn set_word(&mut self, at: usize, v: u16) {
        self.ip[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Offset of the upper-layer checksum in the packet.
    fn l4_checksum_at(&self) -> usize {
        self.l4
            + match self.proto {
                Proto::Tcp => 16,
                Proto::Udp => 6,
                Proto::IcmpEchoRequest | Proto::IcmpEchoReply => 2,
            }
    }

    /// Applies a change of a covered 32-bit value to the upper-layer checksum (`pseudo`: the
    /// value is in the pseudo-header, which ICMP does not have).
    fn l4_update(&mut self, old: u32, new: u32, pseudo: bool, word: bool) {
        let icmp = matches!(self.proto, Proto::IcmpEchoRequest | Proto::IcmpEchoReply);
        if pseudo && icmp {
            return;
        }
        let at = self.l4_checksum_at();
        let c = self.word(at);
        if self.proto == Proto::Udp && c == 0 {
            return; // No checksum (RFC 768): none to keep.
        }
        let mut n = if word {
            update16(c, old as u16, new as u16)
        } else {
            update32(c, old, new)
        };
        if self.proto == Proto::Udp && n == 0 {
            n = 0xffff;
        }
        self.set_word(at, n);
    }

    fn set_addr(&mut self, at: usize, new: Ipv4Addr) {
        let old = u32::from_be_bytes([
            self.ip[at],
            self.ip[at + 1],
            self.ip[at + 2],
            self.ip[at + 3],
        ]);
        let new = u32::from(new);
        self.ip[at..at + 4].copy_from_slice(&new.to_be_bytes());
        let c = update32(self.word(IP_CHECKSUM), old, new);
        self.set_word(IP_CHECKSUM, c);
        self.l4_update(old, new, true, false);
    }

    /// Sets the source address (IPv4 header checksum and TCP/UDP pseudo-header updated).
    pub fn set_src(&mut self, addr: Ipv4Addr) {
        self.set_addr(12, addr);
    }

    /// Sets the destination address (as [`set_src`](Self::set_src)).
    pub fn set_dst(&mut self, addr: Ipv4Addr) {
        self.set_addr(16, addr);
    }

    fn set_l4_word(&mut self, rel: usize, new: u16) {
        let at = self.l4 + rel;
        let old = self.word(at);
        self.set_word(at, new);
        self.l4_update(u32::from(old), u32::from(new), false, true);
    }

    /// Sets the 32-bit word at `rel` bytes into the upper-layer header (`rel` even; for UDP,
    /// `rel` 8 onwards is the payload: a VXLAN header's VNI word is at 12), updating the
    /// upper-layer checksum. False (nothing changed) if the word is not inside the packet or
    /// `rel` is odd.
    pub fn set_l4_u32(&mut self, rel: usize, new: u32) -> bool {
        let Some(at) = self
            .l4
            .checked_add(rel)
            .filter(|&a| rel % 2 == 0 && a + 4 <= self.ip.len())
        else {
            return false;
        };
        let old = u32::from_be_bytes([
            self.ip[at],
            self.ip[at + 1],
            self.ip[at + 2],
            self.ip[at + 3],
        ]);
        self.ip[at..at + 4].copy_from_slice(&new.to_be_bytes());
        self.l4_update(old, new, false, false);
        true
    }

    /// Sets the TCP/UDP source port (for ICMP echo: the identifier).
    pub fn set_src_port(&mut self, port: u16) {
        match self.proto {
            Proto::Tcp | Proto::Udp => self.set_l4_word(0, port),
            Proto::IcmpEchoRequest | Proto::IcmpEchoReply => self.set_l4_word(4, port),
        }
    }

    /// Sets the TCP/UDP destination port (for ICMP echo: the identifier).
    pub fn set_dst_port(&mut self, port: u16) {
        match self.proto {
            Proto::Tcp | Proto::Udp => self.set_l4_word(2, port),
            Proto::IcmpEchoRequest | Proto::IcmpEchoReply => self.set_l4_word(4, port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1624_example() {
        // RFC 1624 sec. 4: HC = 0xdd2f, m = 0x5555 -> m' = 0x3285 gives HC' = 0x0000.
        assert_eq!(update16(0xdd2f, 0x5555, 0x3285), 0x0000);
    }

    proptest::proptest! {
        /// An update equals recomputing from scratch (up to the two representations of zero,
        /// which verify the same).
        #[test]
        fn update_matches_recompute(
            data in proptest::collection::vec(proptest::num::u16::ANY, 1..40),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            new in proptest::num::u16::ANY,
        ) {
            let bytes = |d: &[u16]| d.iter().flat_map(|w| w.to_be_bytes()).collect::<Vec<u8>>();
            let before = sb_wire::checksum::checksum(&bytes(&data));
            let i = at.index(data.len());
            let old = data[i];
            let mut d2 = data.clone();
            d2[i] = new;
            let after = sb_wire::checksum::checksum(&bytes(&d2));
            let inc = update16(before, old, new);
            let same = inc == after || (inc == 0 && after == 0xffff) || (inc == 0xffff && after == 0);
            proptest::prop_assert!(same, "{inc:#x} vs {after:#x}");
        }
    }
}
