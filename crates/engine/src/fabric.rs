//! The fabric shim: what a frame carries between two nodes of a cluster.
//!
//! A frame sent over the fabric is the frame as the engine holds it, with its destination MAC
//! set to the receiving node's fabric MAC, its source MAC to the sender's, and six bytes inserted
//! after the MACs:
//!
//! ```text
//!  0      6      12       14                15     16           18        20
//!  | dst  | src  | 0x88B5 | version | kind | hops | ingress node | orig. EtherType | payload
//! ```
//!
//! - EtherType `0x88B5` (IEEE 802 "local experimental"), so no switch or capture mistakes a
//!   fabric frame for plain IP; tshark shows it as an unknown EtherType.
//! - `version` (high nibble, 1) and `kind` (low nibble): [`Kind::Lookup`] (the frame is the
//!   packet as it arrived on the ingress node's external port and still needs a FIB lookup)
//!   or [`Kind::Transmit`] (the action was applied: the receiving node transmits it on its
//!   access port with its own MACs, without another lookup).
//! - `hops`: fabric crossings so far, this one included (the crossing histogram counts it).
//! - `ingress node`: the node whose external port received the packet (big endian).
//!
//! The original EtherType stays where it was, so pushing the shim writes 20 bytes in front of
//! the frame's old EtherType and popping it moves the start 6 bytes on; neither copies the
//! payload. The hash of the key is not carried: the receiving node recomputes it (one
//! multiply-fold hash, a few ns) rather than spend 16 bytes per frame on the fabric.

/// The shim's EtherType (IEEE 802 local experimental EtherType 1).
pub const ETHERTYPE: u16 = 0x88B5;
/// Bytes a frame grows by on the fabric.
pub const SHIM_LEN: usize = 6;
/// The shim version this code writes and accepts.
pub const VERSION: u8 = 1;

/// What the receiving node does with a fabric frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Look the key up in the local FIB and apply the action (ScaleBricks: ingress to handling
    /// node; hash partitioning: ingress to indirection node).
    Lookup = 1,
    /// Transmit on the access port as it is (full duplication and hash partitioning: to the
    /// egress node after the lookup).
    Transmit = 2,
}

/// The shim's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shim {
    /// What to do with the frame.
    pub kind: Kind,
    /// Fabric crossings so far, this one included.
    pub hops: u8,
    /// The node whose external port received the packet.
    pub ingress: u16,
}

/// Why a frame from the fabric was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShimError {
    /// Shorter than the MACs, the shim and the original EtherType.
    #[error("frame too short for the fabric shim")]
    Short,
    /// Not EtherType 0x88B5.
    #[error("not a fabric frame (EtherType 0x{0:04x})")]
    EtherType(u16),
    /// Another shim version.
    #[error("fabric shim version {0}")]
    Version(u8),
    /// An unknown kind.
    #[error("fabric shim kind {0}")]
    Kind(u8),
}

/// Inserts the shim in front of the frame `buf[start..start + len]` and sets its MACs; returns
/// the new start (`start - SHIM_LEN`), or `None` if `start < SHIM_LEN` or the frame is shorter
/// than an Ethernet header.
pub fn push(
    buf: &mut [u8],
    start: usize,
    len: usize,
    dst: [u8; 6],
    src: [u8; 6],
    shim: Shim,
) -> Option<usize> {
    if start < SHIM_LEN || len < 14 || start + len > buf.len() {
        return None;
    }
    let s = start - SHIM_LEN;
    let h = &mut buf[s..s + 18];
    h[..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
    h[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    h[14] = (VERSION << 4) | shim.kind as u8;
    h[15] = shim.hops;
    h[16..18].copy_from_slice(&shim.ingress.to_be_bytes());
    Some(s)
}

/// Reads the shim of a fabric frame.
pub fn parse(frame: &[u8]) -> Result<Shim, ShimError> {
    if frame.len() < 14 + SHIM_LEN {
        return Err(ShimError::Short);
    }
    let et = u16::from_be_bytes([frame[12], frame[13]]);
    if et != ETHERTYPE {
        return Err(ShimError::EtherType(et));
    }
    let v = frame[14] >> 4;
    if v != VERSION {
        return Err(ShimError::Version(v));
    }
    let kind = match frame[14] & 0xf {
        1 => Kind::Lookup,
        2 => Kind::Transmit,
        k => return Err(ShimError::Kind(k)),
    };
    Ok(Shim {
        kind,
        hops: frame[15],
        ingress: u16::from_be_bytes([frame[16], frame[17]]),
    })
}

/// Removes the shim of the frame `buf[start..start + len]` (already checked with [`parse`]):
/// the frame becomes `buf[start + SHIM_LEN..start + len]`, an Ethernet frame with the same MACs
/// and its original EtherType. Returns the new start.
pub fn pop(buf: &mut [u8], start: usize) -> usize {
    buf.copy_within(start..start + 12, start + SHIM_LEN);
    start + SHIM_LEN
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn push_parse_pop_round_trip(payload in proptest::collection::vec(any::<u8>(), 14..200),
                                     hops in any::<u8>(), ingress in any::<u16>(), lookup in any::<bool>()) {
            let mut buf = vec![0u8; 64 + payload.len()];
            buf[64..].copy_from_slice(&payload);
            let kind = if lookup { Kind::Lookup } else { Kind::Transmit };
            let shim = Shim { kind, hops, ingress };
            let s = push(&mut buf, 64, payload.len(), [1; 6], [2; 6], shim).unwrap();
            let frame = &buf[s..];
            prop_assert_eq!(parse(frame), Ok(shim));
            prop_assert_eq!(&frame[..6], &[1u8; 6]);
            let s2 = pop(&mut buf, s);
            prop_assert_eq!(s2, 64);
            // MACs are the fabric's, the rest is the original frame.
            prop_assert_eq!(&buf[64..76], &[[1u8; 6], [2u8; 6]].concat()[..]);
            prop_assert_eq!(&buf[76..], &payload[12..]);
        }

        #[test]
        fn parse_never_panics(frame in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = parse(&frame);
        }
    }

    #[test]
    fn refuses_what_is_not_a_shim() {
        let mut f = [0u8; 30];
        assert_eq!(parse(&f[..19]), Err(ShimError::Short));
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(parse(&f), Err(ShimError::EtherType(0x0800)));
        f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        f[14] = 0x21;
        assert_eq!(parse(&f), Err(ShimError::Version(2)));
        f[14] = 0x13;
        assert_eq!(parse(&f), Err(ShimError::Kind(3)));
        assert!(push(
            &mut f,
            5,
            14,
            [0; 6],
            [0; 6],
            Shim {
                kind: Kind::Lookup,
                hops: 1,
                ingress: 0
            }
        )
        .is_none());
    }
}
