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
//! - **Usage.** A session's packets are counted (and, while its FAR says BUFF, buffered) at its
//!   handling node, which need not be the endpoint that holds the session. The handling node
//!   sends the counts of the sessions it meters, and the first buffered packet of a session
//!   whose FAR says NOCP, to the session's endpoint ([`RelayKind::Usage`]); an endpoint that
//!   needs the counts now (a deletion's or a Query URR's Usage Report) asks the handling node
//!   ([`RelayKind::UsageQuery`]), which answers ([`RelayKind::UsageAnswer`]). Their payload is
//!   a [`Meter`] instead of a PFCP message.
//! - **The CP function's packets.** A UE's Router Solicitation reaches its handling node, which
//!   sends it to the endpoint holding the session ([`RelayKind::ToCp`]: the uplink TEID, 4
//!   bytes big endian, then the IP packet) to tunnel to the SMF; an endpoint that took a G-PDU
//!   from the SMF for a UE sends the G-PDU it made for the UE's tunnel to the handling node
//!   ([`RelayKind::FromCp`]: the Ethernet frame, MACs zero) to send out of its `ran` port.
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
//! | 1 | kind: 1 association, 2 session, 3 response, 4 usage, 5 usage query, 6 usage answer |
//! | 1 | the sender's allocator id |
//! | 1 | the receiver's allocator id (0: every endpoint) |
//! | 16 | the peer's IP address (IPv4 as IPv4-mapped IPv6) |
//! | 2 | the peer's UDP port (big endian) |
//! | n | one PFCP message (kinds 1-3), or a [`Meter`] (kinds 4-6) |
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
    /// A handling node's counts, and first buffered packets, of sessions the receiver holds
    /// (a [`Meter`]).
    Usage,
    /// An endpoint asks the handling node for the counts of some sessions now (a [`Meter`]
    /// with a token and the uplink TEIDs, counts zero).
    UsageQuery,
    /// The answer to a [`RelayKind::UsageQuery`] (a [`Meter`] with its token).
    UsageAnswer,
    /// An uplink packet for the CP function (its uplink TEID, then the packet), to the
    /// endpoint holding its session.
    ToCp,
    /// A frame from the CP function to a UE, to its handling node's `ran` port.
    FromCp,
}

impl RelayKind {
    fn code(self) -> u8 {
        match self {
            RelayKind::Association => 1,
            RelayKind::Session => 2,
            RelayKind::Response => 3,
            RelayKind::Usage => 4,
            RelayKind::UsageQuery => 5,
            RelayKind::UsageAnswer => 6,
            RelayKind::ToCp => 7,
            RelayKind::FromCp => 8,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(RelayKind::Association),
            2 => Some(RelayKind::Session),
            3 => Some(RelayKind::Response),
            4 => Some(RelayKind::Usage),
            5 => Some(RelayKind::UsageQuery),
            6 => Some(RelayKind::UsageAnswer),
            7 => Some(RelayKind::ToCp),
            8 => Some(RelayKind::FromCp),
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

/// One session's line of a [`Meter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct MeterLine {
    /// The session's uplink TEID (the handling node's slot key).
    pub ul_teid: u32,
    /// The session's first buffered downlink packet since its FAR said BUFF|NOCP.
    pub downlink_data: bool,
    /// Whether the handling node holds the slot (a query's answer for a TEID it does not know
    /// says false, counts zero).
    pub known: bool,
    /// Uplink bytes, downlink bytes, uplink packets, downlink packets: cumulative since the
    /// slot was installed.
    pub counts: [u64; 4],
}

/// The payload of the usage relays ([`RelayKind::Usage`], [`RelayKind::UsageQuery`],
/// [`RelayKind::UsageAnswer`]): a token (a query's, echoed by its answer; 0 otherwise) and
/// lines.
///
/// | bytes | field |
/// |---|---|
/// | 8 | token (big endian) |
/// | 2 | lines (big endian) |
/// | 37 per line | uplink TEID (4), flags (1: bit 0 downlink data, bit 1 known), four counts (8 each) |
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Meter {
    /// A query's token, echoed in its answer.
    pub token: u64,
    /// One per session.
    pub lines: Vec<MeterLine>,
}

/// Bytes of one [`MeterLine`].
pub const METER_LINE_LEN: usize = 37;
/// Lines a [`Meter`] holds at most (one datagram: 1500 lines, about 55 KB).
pub const METER_MAX_LINES: usize = 1500;

/// A [`Meter`] that does not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MeterError {
    /// Shorter than its header or than its lines.
    #[error("usage relay truncated")]
    Short,
    /// Bytes after its lines, or more lines than a meter holds.
    #[error("usage relay length does not match its line count")]
    Length,
}

impl Meter {
    /// The payload bytes (at most [`METER_MAX_LINES`] lines: the caller splits).
    pub fn to_bytes(&self) -> Vec<u8> {
        let n = self.lines.len().min(METER_MAX_LINES);
        let mut out = Vec::with_capacity(10 + n * METER_LINE_LEN);
        out.extend_from_slice(&self.token.to_be_bytes());
        out.extend_from_slice(&(n as u16).to_be_bytes());
        for l in &self.lines[..n] {
            out.extend_from_slice(&l.ul_teid.to_be_bytes());
            out.push(u8::from(l.downlink_data) | u8::from(l.known) << 1);
            for c in l.counts {
                out.extend_from_slice(&c.to_be_bytes());
            }
        }
        out
    }

    /// The meter in `bytes`, checked (never panics: the relay's tag was verified, but its
    /// sender may run another version).
    pub fn parse(bytes: &[u8]) -> Result<Meter, MeterError> {
        let head = bytes.get(..10).ok_or(MeterError::Short)?;
        let token = u64::from_be_bytes(head[..8].try_into().map_err(|_| MeterError::Short)?);
        let n = usize::from(u16::from_be_bytes([head[8], head[9]]));
        if n > METER_MAX_LINES {
            return Err(MeterError::Length);
        }
        let body = &bytes[10..];
        if body.len() < n * METER_LINE_LEN {
            return Err(MeterError::Short);
        }
        if body.len() != n * METER_LINE_LEN {
            return Err(MeterError::Length);
        }
        let lines = (body.chunks_exact(METER_LINE_LEN))
            .map(|c| {
                let mut counts = [0u64; 4];
                for (i, v) in counts.iter_mut().enumerate() {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&c[5 + 8 * i..13 + 8 * i]);
                    *v = u64::from_be_bytes(b);
                }
                MeterLine {
                    ul_teid: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                    downlink_data: c[4] & 1 != 0,
                    known: c[4] & 2 != 0,
                    counts,
                }
            })
            .collect();
        Ok(Meter { token, lines })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn meter_round_trip_and_refusals() {
        let m = Meter {
            token: 0x0102_0304_0506_0708,
            lines: vec![
                MeterLine {
                    ul_teid: 0x8000_0001,
                    downlink_data: true,
                    known: true,
                    counts: [1, 2, 3, u64::MAX],
                },
                MeterLine {
                    ul_teid: 7,
                    downlink_data: false,
                    known: false,
                    counts: [0; 4],
                },
            ],
        };
        let b = m.to_bytes();
        assert_eq!(b.len(), 10 + 2 * METER_LINE_LEN);
        assert_eq!(Meter::parse(&b), Ok(m.clone()));
        assert_eq!(Meter::parse(&b[..b.len() - 1]), Err(MeterError::Short));
        let mut long = b.clone();
        long.push(0);
        assert_eq!(Meter::parse(&long), Err(MeterError::Length));
        assert_eq!(Meter::parse(&b[..9]), Err(MeterError::Short));
        // Through a relay, tag and all.
        let r = Relay {
            to: 2,
            kind: RelayKind::Usage,
            peer: "0.0.0.0:0".parse().unwrap(),
            bytes: b,
        };
        let (from, back) = Relay::parse(&r.to_bytes(1, KEY), KEY).unwrap();
        assert_eq!((from, Meter::parse(&back.bytes)), (1, Ok(m)));
        // A meter holds METER_MAX_LINES at most; more are left to the next.
        let big = Meter {
            token: 0,
            lines: vec![MeterLine::default(); METER_MAX_LINES + 5],
        };
        assert_eq!(
            Meter::parse(&big.to_bytes()).unwrap().lines.len(),
            METER_MAX_LINES
        );
    }

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
            let _ = Meter::parse(&b);
            let mut m = MAGIC.to_vec();
            m.extend_from_slice(&b);
            let _ = Relay::parse(&m, KEY);
        }

        #[test]
        fn meters_round_trip(
            token in any::<u64>(),
            lines in proptest::collection::vec(
                (any::<u32>(), any::<bool>(), any::<bool>(), any::<[u64; 4]>()),
                0..40,
            ),
        ) {
            let m = Meter {
                token,
                lines: (lines.into_iter())
                    .map(|(ul_teid, downlink_data, known, counts)| MeterLine {
                        ul_teid,
                        downlink_data,
                        known,
                        counts,
                    })
                    .collect(),
            };
            prop_assert_eq!(Meter::parse(&m.to_bytes()), Ok(m));
        }
    }
}
