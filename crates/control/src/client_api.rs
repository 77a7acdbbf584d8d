//! Encoding a client's request and decoding a node's reply.

use crate::wire::{self, Body, Header, Kind, WireError};
use crate::{Outcome, Update};

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

/// Updates of `key_bytes` + `value_bytes` that fit one request.
pub fn max_updates(key_bytes: usize, value_bytes: usize) -> usize {
    ((wire::MAX_DATAGRAM - wire::OVERHEAD - 2) / (5 + key_bytes + value_bytes))
        .min(u16::MAX as usize)
}

/// A client's request `id` with `updates`, authenticated with the cluster's key. A node answers
/// each request id once per client address (a retransmission of the same id gets the same
/// answer, not a second application), so resend the same bytes when no reply comes.
pub fn encode_request(
    key: &[u8; 32],
    cluster_id: u64,
    id: u64,
    updates: &[Update],
) -> Result<Vec<u8>, RequestError> {
    if updates
        .iter()
        .any(|u| u.key.len() > 255 || u.value.len() > 255)
    {
        return Err(RequestError::FieldTooLong);
    }
    let len: usize = wire::OVERHEAD + 2 + updates.iter().map(wire::update_len).sum::<usize>();
    if len > wire::MAX_DATAGRAM || updates.len() > u16::MAX as usize {
        return Err(RequestError::TooLarge(len));
    }
    let h = Header {
        kind: Kind::ClientRequest,
        sender: wire::CLIENT_SENDER,
        cluster_id,
        sender_epoch: 0,
        receiver_epoch: 0,
        msg_id: id,
    };
    Ok(wire::encode(
        key,
        &h,
        &Body::ClientRequest(updates.to_vec()),
    ))
}

/// A node's answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The request's id.
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

/// Checks and decodes a reply datagram.
pub fn decode_reply(key: &[u8; 32], cluster_id: u64, b: &[u8]) -> Result<Reply, WireError> {
    match wire::decode(key, cluster_id, b)? {
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
