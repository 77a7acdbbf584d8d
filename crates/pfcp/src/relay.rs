//! One UPF, many endpoints: what the endpoints of one cluster tell each other so that any of
//! them may receive any message of a control-plane peer.
//!
//! Every node of a cluster runs an [`Upf`](crate::Upf) endpoint with the same Node ID and
//! Recovery Time Stamp; an SMF may send each message to any of them. Two kinds of state are
//! per endpoint and would otherwise make that fail:
//! - **Associations.** An Association Setup, Update or Release Request that an endpoint takes
//!   from a peer is replicated to every other endpoint ([`RelayKind::Association`]), which
//!   applies it as if the peer had sent it there, without answering (the peer got its answer
//!   from the endpoint it asked). A release (or a setup replacing an association) removes the
//!   sessions of that peer on every endpoint; the response waits only for the receiving
//!   endpoint's own sessions.
//! - **Sessions.** A session lives on the endpoint that took its Establishment; its UP SEID's top
//!   16 bits are that endpoint's allocator id. A Session Modification or Deletion Request for a
//!   SEID another endpoint allocated is relayed to that endpoint ([`RelayKind::Session`]), which
//!   handles it as if the peer had sent it there (its response cache, retransmission and
//!   in-flight rules included) and sends the response back ([`RelayKind::Response`]); the
//!   receiving endpoint sends it to the peer, from the address the peer sent to.
//!
//! What this does not do: an endpoint that is down cannot answer for its sessions (the peer's
//! request times out: its retransmissions are relayed again), and its sessions are lost if its
//! node restarts (they are in memory; their forwarding entries stay).
//!
//! # Wire format
//! A relay travels in one UDP datagram between the endpoints' PFCP sockets (on the cluster's
//! control network), told apart from PFCP by its first four bytes:
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `SBPX` |
//! | 1 | version (1) |
//! | 1 | kind: 1 association, 2 session, 3 response |
//! | 1 | the sender's allocator id |
//! | 1 | the receiver's allocator id (0: every endpoint) |
//! | 16 | the peer's IP address (IPv4 as IPv4-mapped IPv6) |
//! | 2 | the peer's UDP port (big endian) |
//! | n | one PFCP message |
//! | 16 | HMAC-SHA256 of everything before, truncated to 16 bytes, with the cluster's key |
//!
//! [`Relay::to_bytes`] writes it; [`Relay::parse`] checks the length, magic, version, kind and
//! tag (in constant time) and never panics (fuzzed with the PFCP target).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// The first bytes of every relay datagram.
pub const MAGIC: [u8; 4] = *b"SBPX";
/// The relay format's version.
pub const VERSION: u8 = 1;
/// Bytes before the PFCP message.
pub const HEADER_LEN: usize = 26;
/// Bytes of the authentication tag.
pub const TAG_LEN: usize = 16;

/// What a relay carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum RelayKind {
    /// An association request a peer sent another endpoint: apply it, answer nothing.
    Association,
    /// A session request for a session the receiver holds: handle it, send the response back.
    Session,
    /// The response to a relayed session request: send it to the peer.
    Response,
}

impl RelayKind {
    fn code(self) -> u8 {
        match self {
            RelayKind::Association => 1,
            RelayKind::Session => 2,
            RelayKind::Response => 3,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(RelayKind::Association),
            2 => Some(RelayKind::Session),
            3 => Some(RelayKind::Response),
            _ => None,
        }
    }
}

/// A message for other endpoints of the cluster (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Relay {
    /// The allocator id of the endpoint it is for; 0 for every endpoint but the sender.
    pub to: u8,
    /// What it carries.
    pub kind: RelayKind,
    /// The control-plane peer the message came from or goes to.
    pub peer: SocketAddr,
    /// One PFCP message.
    pub bytes: Vec<u8>,
}

/// Why a datagram is not a relay we accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelayError {
    /// Shorter than a header and a tag.
    #[error("datagram too short for a relay")]
    Short,
    /// Not `SBPX`.
    #[error("not a relay (magic)")]
    Magic,
    /// A version we do not speak.
    #[error("relay version {0} unsupported")]
    Version(u8),
    /// An unknown kind.
    #[error("unknown relay kind {0}")]
    Kind(u8),
    /// The tag does not match: not from an endpoint of this cluster.
    #[error("relay tag does not verify")]
    Tag,
}

type HmacSha256 = Hmac<Sha256>;

fn tag(key: &[u8], bytes: &[u8]) -> [u8; TAG_LEN] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(bytes);
    let full = mac.finalize().into_bytes();
    let mut t = [0; TAG_LEN];
    t.copy_from_slice(&full[..TAG_LEN]);
    t
}

/// Whether `bytes` starts like a relay (its magic), so a PFCP socket tells the two apart.
pub fn is_relay(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

impl Relay {
    /// The datagram of this relay from endpoint `from`, authenticated with `key`.
    pub fn to_bytes(&self, from: u8, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.bytes.len() + TAG_LEN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, self.kind.code(), from, self.to]);
        let ip = match self.peer.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        out.extend_from_slice(&ip.octets());
        out.extend_from_slice(&self.peer.port().to_be_bytes());
        out.extend_from_slice(&self.bytes);
        let t = tag(key, &out);
        out.extend_from_slice(&t);
        out
    }

    /// The sender's allocator id and the relay in `bytes`, if its tag verifies with `key`.
    pub fn parse(bytes: &[u8], key: &[u8]) -> Result<(u8, Relay), RelayError> {
        if bytes.len() < HEADER_LEN + TAG_LEN {
            return Err(RelayError::Short);
        }
        if !is_relay(bytes) {
            return Err(RelayError::Magic);
        }
        if bytes[4] != VERSION {
            return Err(RelayError::Version(bytes[4]));
        }
        let (body, t) = bytes.split_at(bytes.len() - TAG_LEN);
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
        mac.update(body);
        mac.verify_truncated_left(t).map_err(|_| RelayError::Tag)?;
        let kind = RelayKind::from_code(bytes[5]).ok_or(RelayError::Kind(bytes[5]))?;
        let (from, to) = (bytes[6], bytes[7]);
        let mut ip = [0; 16];
        ip.copy_from_slice(&bytes[8..24]);
        let ip = Ipv6Addr::from(ip);
        let ip = match ip.to_ipv4_mapped() {
            Some(a) => IpAddr::V4(a),
            None => IpAddr::V6(ip),
        };
        let port = u16::from_be_bytes([bytes[24], bytes[25]]);
        Ok((
            from,
            Relay {
                to,
                kind,
                peer: SocketAddr::new(ip, port),
                bytes: body[HEADER_LEN..].to_vec(),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: &[u8] = b"a cluster key of some length....";

    #[test]
    fn round_trip_and_tamper() {
        let r = Relay {
            to: 3,
            kind: RelayKind::Session,
            peer: "10.3.0.254:8805".parse().unwrap(),
            bytes: vec![0x21, 52, 0, 4, 1, 2, 3, 4],
        };
        let b = r.to_bytes(2, KEY);
        assert_eq!(b.len(), HEADER_LEN + r.bytes.len() + TAG_LEN);
        assert_eq!(Relay::parse(&b, KEY), Ok((2, r.clone())));
        let v6 = Relay {
            peer: "[fd00::1]:40000".parse().unwrap(),
            ..r.clone()
        };
        assert_eq!(Relay::parse(&v6.to_bytes(1, KEY), KEY), Ok((1, v6)));
        // Every flipped bit is refused; so is another key.
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 1;
            assert!(Relay::parse(&c, KEY).is_err(), "byte {i}");
        }
        assert_eq!(Relay::parse(&b, b"another key"), Err(RelayError::Tag));
        assert_eq!(Relay::parse(&b[..20], KEY), Err(RelayError::Short));
        assert!(!is_relay(&[0x21, 1, 0, 0]));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Relay::parse(&b, KEY);
            let mut m = MAGIC.to_vec();
            m.extend_from_slice(&b);
            let _ = Relay::parse(&m, KEY);
        }
    }
}
