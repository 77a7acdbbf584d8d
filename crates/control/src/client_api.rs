//! Encoding a client's request and decoding a node's reply, with the client key
//! ([`crate::ClusterSpec::client_key`]).

use crate::wire::{self, Body, Header, Kind, WireError};
use crate::{NodeId, Outcome, Update};

/// Why a request cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The updates do not fit one datagram: send fewer per request ([`max_updates`]).
    #[error("request of {0} bytes does not fit one datagram")]
    TooLarge(usize),
    /// A key or value is longer than 255 bytes.
    #[error("a key or value is longer than 255 bytes")]
    FieldTooLong,
}

/// Bytes of a request around its updates: header, tag, client id, time, count.
const REQUEST_OVERHEAD: usize = wire::OVERHEAD + 8 + 8 + 2;

/// Updates of `key_bytes` + `value_bytes` that fit one request.
pub fn max_updates(key_bytes: usize, value_bytes: usize) -> usize {
    ((wire::MAX_DATAGRAM - REQUEST_OVERHEAD) / (5 + key_bytes + value_bytes)).min(u16::MAX as usize)
}

/// What makes a request fresh: who sends it, its number and when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The client's id: random per client run (`rand`, 64 bits), so that two runs never
    /// share sequence numbers.
    pub client: u64,
    /// The request's sequence number: increasing over the client's requests (a node refuses
    /// a number far below the ones it has seen from the client, and one it has answered and
    /// forgotten).
    pub seq: u64,
    /// When the request was made: nanoseconds since the Unix epoch (the node's clock is the
    /// judge: a request older than the node's start or than `Tuning::request_max_age`, or
    /// ahead of it by more than `Tuning::request_max_ahead`, is refused as
    /// [`Outcome::Stale`]).
    pub time: u64,
}

/// Nanoseconds since the Unix epoch now (for [`Stamp::time`]).
pub fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A client's request to node `to` with `updates`, authenticated with the client key.
/// A node answers each (client, sequence number) once (a retransmission of the same bytes
/// gets the same answer, not a second application), so resend the same bytes when no reply
/// comes; a copy of them sent again later, or to another node, is refused.
pub fn encode_request(
    key: &[u8; 32],
    cluster_id: u64,
    to: NodeId,
    stamp: Stamp,
    updates: &[Update],
) -> Result<Vec<u8>, RequestError> {
    if updates
        .iter()
        .any(|u| u.key.len() > 255 || u.value.len() > 255)
    {
        return Err(RequestError::FieldTooLong);
    }
    let len: usize = REQUEST_OVERHEAD + updates.iter().map(wire::update_len).sum::<usize>();
    if len > wire::MAX_DATAGRAM || updates.len() > u16::MAX as usize {
        return Err(RequestError::TooLarge(len));
    }
    let h = Header {
        kind: Kind::ClientRequest,
        sender: wire::CLIENT_SENDER,
        receiver: to,
        cluster_id,
        sender_epoch: 0,
        receiver_epoch: 0,
        msg_id: stamp.seq,
        counter: 0,
    };
    let body = Body::ClientRequest {
        client: stamp.client,
        time: stamp.time,
        updates: updates.to_vec(),
    };
    Ok(wire::Keys::client(key, cluster_id).seal(&h, &body))
}

/// A node's answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request's sequence number ([`Stamp::seq`]).
    pub id: u64,
    /// One outcome per update, in the request's order.
    pub results: Vec<Outcome>,
}

impl Reply {
    /// Updates applied.
    pub fn acked(&self) -> usize {
        self.results
            .iter()
            .filter(|r| **r == Outcome::Applied)
            .count()
    }
}

/// Checks and decodes a reply datagram (authenticated with the client key, for a client).
pub fn decode_reply(key: &[u8; 32], cluster_id: u64, b: &[u8]) -> Result<Reply, WireError> {
    match wire::Keys::client(key, cluster_id).open(b)? {
        (h, Body::ClientReply(codes)) => {
            let results = codes
                .iter()
                .map(|&c| Outcome::from_code(c).ok_or(WireError::Malformed("bad outcome code")))
                .collect::<Result<_, _>>()?;
            Ok(Reply {
                id: h.msg_id,
                results,
            })
        }
        _ => Err(WireError::Malformed("not a client reply")),
    }
}
