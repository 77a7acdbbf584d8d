//! The control protocol's datagrams: header, bodies, authentication tag (the format is specified
//! in the crate documentation). [`decode`] checks a datagram once (length, magic, version,
//! cluster id, tag, then the body) and never panics; [`encode`] writes one.

use crate::{Op, Update};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Magic of every datagram.
pub const MAGIC: &[u8; 4] = b"SBCP";
/// Protocol version.
pub const VERSION: u8 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = 32;
/// Bytes of the authentication tag (HMAC-SHA256 truncated).
pub const TAG_LEN: usize = 16;
/// The largest datagram this crate sends or accepts (a UDP payload of 60 KiB).
pub const MAX_DATAGRAM: usize = 60 * 1024;
/// The `sender` of a client's datagrams.
pub const CLIENT_SENDER: u16 = 0xffff;

/// Message types (the header's type byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A node announces its epoch.
    Hello = 1,
    /// The answer to a hello.
    HelloAck = 2,
    /// A client's updates.
    ClientRequest = 3,
    /// The node's answer to a client.
    ClientReply = 4,
    /// Updates forwarded by the node a client asked to their owner.
    Forward = 5,
    /// The owner's answer to a forward.
    ForwardReply = 6,
    /// An owner's GPT deltas.
    Deltas = 7,
    /// A replica's cumulative acknowledgement of an owner's deltas.
    DeltaAck = 8,
    /// A chunk of an owner's GPT piece.
    PieceChunk = 9,
    /// A replica asks an owner for a piece or for chunks of it.
    PieceRequest = 10,
    /// FIB operations from an owner to a handling node.
    Fib = 11,
    /// A handling node's cumulative acknowledgement of FIB operations.
    FibAck = 12,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        use Kind::*;
        Some(match b {
            1 => Hello,
            2 => HelloAck,
            3 => ClientRequest,
            4 => ClientReply,
            5 => Forward,
            6 => ForwardReply,
            7 => Deltas,
            8 => DeltaAck,
            9 => PieceChunk,
            10 => PieceRequest,
            11 => Fib,
            12 => FibAck,
            _ => return None,
        })
    }
}

/// The fixed header of a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Message type.
    pub kind: Kind,
    /// Sending node, or [`CLIENT_SENDER`].
    pub sender: u16,
    /// The cluster's id.
    pub cluster_id: u64,
    /// The sender's epoch (incarnation); 0 for a client.
    pub sender_epoch: u32,
    /// The receiver's epoch as the sender knows it; 0 when unknown (hello, client).
    pub receiver_epoch: u32,
    /// Message id: a client's request id, a forward's id; otherwise informative.
    pub msg_id: u64,
}

/// One FIB operation of an owner's stream to a handling node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FibItem {
    /// Install (or overwrite) the entry.
    Install {
        /// The key.
        key: crate::Bytes,
        /// The FIB value.
        value: crate::Bytes,
    },
    /// Remove the entry.
    Remove {
        /// The key.
        key: crate::Bytes,
    },
    /// The owner's full slice for this node has been sent (the node is in sync with the owner).
    SliceEnd,
    /// Remove every entry of the owner's range not installed since the owner's epoch began.
    Prune,
}

/// A message body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// [`Kind::Hello`].
    Hello,
    /// [`Kind::HelloAck`].
    HelloAck,
    /// [`Kind::ClientRequest`].
    ClientRequest(Vec<Update>),
    /// [`Kind::ClientReply`]: one result code per update.
    ClientReply(Vec<u8>),
    /// [`Kind::Forward`].
    Forward(Vec<Update>),
    /// [`Kind::ForwardReply`]: one result code per forwarded update.
    ForwardReply(Vec<u8>),
    /// [`Kind::Deltas`]: serialized `sb_setsep::Delta`s numbered `first_seq`, `first_seq + 1`, ...
    Deltas {
        /// Sequence number of the first.
        first_seq: u64,
        /// The serialized deltas (shared: an owner sends each to every replica, and again on a
        /// retransmission, without copying it).
        deltas: Vec<std::sync::Arc<[u8]>>,
    },
    /// [`Kind::DeltaAck`]: the replica applied the owner's deltas up to `applied` (of the
    /// owner's epoch in the header's `receiver_epoch`).
    DeltaAck {
        /// Last sequence number applied.
        applied: u64,
    },
    /// [`Kind::PieceChunk`].
    PieceChunk {
        /// The owner's sequence number the piece is a snapshot of.
        seq: u64,
        /// Bytes of the whole serialized piece.
        total_len: u32,
        /// This chunk's index.
        index: u32,
        /// Number of chunks.
        count: u32,
        /// The chunk's bytes.
        data: Vec<u8>,
    },
    /// [`Kind::PieceRequest`]: `missing` chunks of the snapshot at `seq`; no chunks (or a
    /// snapshot the owner no longer has) means a fresh piece.
    PieceRequest {
        /// The snapshot's sequence number.
        seq: u64,
        /// Indexes of the missing chunks.
        missing: Vec<u32>,
    },
    /// [`Kind::Fib`]: items numbered `first_seq`, `first_seq + 1`, ...
    Fib {
        /// Stream number of the first item.
        first_seq: u64,
        /// The items.
        items: Vec<FibItem>,
    },
    /// [`Kind::FibAck`]: the handler applied the stream up to `applied`.
    FibAck {
        /// Last stream number applied.
        applied: u64,
    },
}

impl Body {
    /// The message type of the body.
    pub fn kind(&self) -> Kind {
        match self {
            Body::Hello => Kind::Hello,
            Body::HelloAck => Kind::HelloAck,
            Body::ClientRequest(_) => Kind::ClientRequest,
            Body::ClientReply(_) => Kind::ClientReply,
            Body::Forward(_) => Kind::Forward,
            Body::ForwardReply(_) => Kind::ForwardReply,
            Body::Deltas { .. } => Kind::Deltas,
            Body::DeltaAck { .. } => Kind::DeltaAck,
            Body::PieceChunk { .. } => Kind::PieceChunk,
            Body::PieceRequest { .. } => Kind::PieceRequest,
            Body::Fib { .. } => Kind::Fib,
            Body::FibAck { .. } => Kind::FibAck,
        }
    }
}

/// Why a datagram was refused (each is a drop counter of [`crate::Status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// Shorter than a header and a tag, or longer than [`MAX_DATAGRAM`].
    #[error("datagram too short or too long")]
    Length,
    /// Not our magic.
    #[error("bad magic")]
    Magic,
    /// Another protocol version.
    #[error("unsupported protocol version")]
    Version,
    /// Another cluster's id.
    #[error("datagram of another cluster")]
    ForeignCluster,
    /// The authentication tag does not match (no key, wrong key, or altered bytes).
    #[error("bad authentication tag")]
    BadTag,
    /// An unknown message type.
    #[error("unknown message type")]
    UnknownKind,
    /// The body does not parse.
    #[error("malformed body: {0}")]
    Malformed(&'static str),
}

impl WireError {
    /// A short stable name (the key of the drop counters).
    pub fn name(&self) -> &'static str {
        match self {
            WireError::Length => "length",
            WireError::Magic => "magic",
            WireError::Version => "version",
            WireError::ForeignCluster => "foreign_cluster",
            WireError::BadTag => "bad_tag",
            WireError::UnknownKind => "unknown_kind",
            WireError::Malformed(_) => "malformed",
        }
    }
}

type HmacSha256 = Hmac<Sha256>;

fn tag(key: &[u8; 32], bytes: &[u8]) -> [u8; TAG_LEN] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(bytes);
    let full = mac.finalize().into_bytes();
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&full[..TAG_LEN]);
    t
}

fn tag_ok(key: &[u8; 32], bytes: &[u8], t: &[u8]) -> bool {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(bytes);
    // Constant time.
    mac.verify_truncated_left(t).is_ok()
}

/// Encodes an update: op (1 insert, 2 change, 3 delete), node u16, key length u8, key, value
/// length u8, value.
pub(crate) fn put_update(out: &mut Vec<u8>, u: &Update) {
    out.push(match u.op {
        Op::Insert => 1,
        Op::Change => 2,
        Op::Delete => 3,
    });
    out.extend_from_slice(&u.node.to_le_bytes());
    out.push(u.key.len() as u8);
    out.extend_from_slice(&u.key);
    out.push(u.value.len() as u8);
    out.extend_from_slice(&u.value);
}

/// Bytes [`put_update`] writes.
pub(crate) fn update_len(u: &Update) -> usize {
    5 + u.key.len() + u.value.len()
}

/// Bytes [`put_fib_item`] writes.
pub(crate) fn fib_item_len(i: &FibItem) -> usize {
    match i {
        FibItem::Install { key, value } => 3 + key.len() + value.len(),
        FibItem::Remove { key } => 2 + key.len(),
        FibItem::SliceEnd | FibItem::Prune => 1,
    }
}

fn put_fib_item(out: &mut Vec<u8>, i: &FibItem) {
    match i {
        FibItem::Install { key, value } => {
            out.push(1);
            out.push(key.len() as u8);
            out.extend_from_slice(key);
            out.push(value.len() as u8);
            out.extend_from_slice(value);
        }
        FibItem::Remove { key } => {
            out.push(2);
            out.push(key.len() as u8);
            out.extend_from_slice(key);
        }
        FibItem::SliceEnd => out.push(3),
        FibItem::Prune => out.push(4),
    }
}

/// Encodes and authenticates a datagram. Keys and values longer than 255 bytes and lists
/// longer than 65535 entries do not fit the format: callers keep within them (the node checks
/// updates' sizes against the cluster's before sending, and packs lists to [`MAX_DATAGRAM`]).
pub fn encode(key: &[u8; 32], h: &Header, body: &Body) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.push(body.kind() as u8);
    out.extend_from_slice(&h.sender.to_le_bytes());
    out.extend_from_slice(&h.cluster_id.to_le_bytes());
    out.extend_from_slice(&h.sender_epoch.to_le_bytes());
    out.extend_from_slice(&h.receiver_epoch.to_le_bytes());
    out.extend_from_slice(&h.msg_id.to_le_bytes());
    match body {
        Body::Hello | Body::HelloAck => {}
        Body::ClientRequest(us) | Body::Forward(us) => {
            out.extend_from_slice(&(us.len() as u16).to_le_bytes());
            for u in us {
                put_update(&mut out, u);
            }
        }
        Body::ClientReply(codes) | Body::ForwardReply(codes) => {
            out.extend_from_slice(&(codes.len() as u16).to_le_bytes());
            out.extend_from_slice(codes);
        }
        Body::Deltas { first_seq, deltas } => {
            out.extend_from_slice(&first_seq.to_le_bytes());
            out.extend_from_slice(&(deltas.len() as u16).to_le_bytes());
            for d in deltas {
                out.extend_from_slice(&(d.len() as u16).to_le_bytes());
                out.extend_from_slice(d);
            }
        }
        Body::DeltaAck { applied } | Body::FibAck { applied } => {
            out.extend_from_slice(&applied.to_le_bytes());
        }
        Body::PieceChunk {
            seq,
            total_len,
            index,
            count,
            data,
        } => {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&total_len.to_le_bytes());
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(data);
        }
        Body::PieceRequest { seq, missing } => {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&(missing.len() as u16).to_le_bytes());
            for m in missing {
                out.extend_from_slice(&m.to_le_bytes());
            }
        }
        Body::Fib { first_seq, items } => {
            out.extend_from_slice(&first_seq.to_le_bytes());
            out.extend_from_slice(&(items.len() as u16).to_le_bytes());
            for i in items {
                put_fib_item(&mut out, i);
            }
        }
    }
    let t = tag(key, &out);
    out.extend_from_slice(&t);
    out
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.b.len() {
            return Err(WireError::Malformed("truncated"));
        }
        let (s, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn bytes8(&mut self) -> Result<crate::Bytes, WireError> {
        let n = self.u8()? as usize;
        Ok(crate::Bytes::from_slice(self.take(n)?))
    }
    fn end(&self) -> Result<(), WireError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(WireError::Malformed("trailing bytes"))
        }
    }
}

fn get_updates(r: &mut Reader) -> Result<Vec<Update>, WireError> {
    let n = r.u16()? as usize;
    // Each update takes at least 5 bytes: bound the allocation by what is there.
    let mut us = Vec::with_capacity(n.min(r.b.len() / 5));
    for _ in 0..n {
        let op = match r.u8()? {
            1 => Op::Insert,
            2 => Op::Change,
            3 => Op::Delete,
            _ => return Err(WireError::Malformed("bad op")),
        };
        let node = r.u16()?;
        let key = r.bytes8()?;
        let value = r.bytes8()?;
        us.push(Update {
            op,
            key,
            node,
            value,
        });
    }
    Ok(us)
}

fn get_codes(r: &mut Reader) -> Result<Vec<u8>, WireError> {
    let n = r.u16()? as usize;
    Ok(r.take(n)?.to_vec())
}

/// Checks and decodes a datagram: length, magic, version, cluster id, tag, type, body. Never
/// panics; whatever it accepts re-encodes to the same bytes.
pub fn decode(key: &[u8; 32], cluster_id: u64, b: &[u8]) -> Result<(Header, Body), WireError> {
    if b.len() < HEADER_LEN + TAG_LEN || b.len() > MAX_DATAGRAM {
        return Err(WireError::Length);
    }
    if &b[..4] != MAGIC {
        return Err(WireError::Magic);
    }
    if b[4] != VERSION {
        return Err(WireError::Version);
    }
    let (signed, t) = b.split_at(b.len() - TAG_LEN);
    let mut r = Reader { b: &signed[5..] };
    let kind_byte = r.u8()?;
    let sender = r.u16()?;
    let cid = r.u64()?;
    if cid != cluster_id {
        return Err(WireError::ForeignCluster);
    }
    if !tag_ok(key, signed, t) {
        return Err(WireError::BadTag);
    }
    let kind = Kind::from_u8(kind_byte).ok_or(WireError::UnknownKind)?;
    let h = Header {
        kind,
        sender,
        cluster_id: cid,
        sender_epoch: r.u32()?,
        receiver_epoch: r.u32()?,
        msg_id: r.u64()?,
    };
    let body = match kind {
        Kind::Hello => Body::Hello,
        Kind::HelloAck => Body::HelloAck,
        Kind::ClientRequest => Body::ClientRequest(get_updates(&mut r)?),
        Kind::Forward => Body::Forward(get_updates(&mut r)?),
        Kind::ClientReply => Body::ClientReply(get_codes(&mut r)?),
        Kind::ForwardReply => Body::ForwardReply(get_codes(&mut r)?),
        Kind::Deltas => {
            let first_seq = r.u64()?;
            let n = r.u16()? as usize;
            let mut deltas = Vec::with_capacity(n.min(r.b.len() / 2));
            for _ in 0..n {
                let l = r.u16()? as usize;
                deltas.push(std::sync::Arc::from(r.take(l)?));
            }
            if first_seq == 0 || first_seq.checked_add(n as u64).is_none() {
                return Err(WireError::Malformed("bad delta sequence number"));
            }
            Body::Deltas { first_seq, deltas }
        }
        Kind::DeltaAck => Body::DeltaAck { applied: r.u64()? },
        Kind::FibAck => Body::FibAck { applied: r.u64()? },
        Kind::PieceChunk => {
            let seq = r.u64()?;
            let total_len = r.u32()?;
            let index = r.u32()?;
            let count = r.u32()?;
            let data = r.take(r.b.len())?.to_vec();
            if count == 0 || index >= count || data.len() > total_len as usize {
                return Err(WireError::Malformed("bad chunk numbers"));
            }
            Body::PieceChunk {
                seq,
                total_len,
                index,
                count,
                data,
            }
        }
        Kind::PieceRequest => {
            let seq = r.u64()?;
            let n = r.u16()? as usize;
            let mut missing = Vec::with_capacity(n.min(r.b.len() / 4));
            for _ in 0..n {
                missing.push(r.u32()?);
            }
            Body::PieceRequest { seq, missing }
        }
        Kind::Fib => {
            let first_seq = r.u64()?;
            let n = r.u16()? as usize;
            let mut items = Vec::with_capacity(n.min(r.b.len()));
            for _ in 0..n {
                items.push(match r.u8()? {
                    1 => FibItem::Install {
                        key: r.bytes8()?,
                        value: r.bytes8()?,
                    },
                    2 => FibItem::Remove { key: r.bytes8()? },
                    3 => FibItem::SliceEnd,
                    4 => FibItem::Prune,
                    _ => return Err(WireError::Malformed("bad FIB item")),
                });
            }
            if first_seq == 0 || first_seq.checked_add(n as u64).is_none() {
                return Err(WireError::Malformed("bad FIB sequence number"));
            }
            Body::Fib { first_seq, items }
        }
    };
    r.end()?;
    Ok((h, body))
}

/// Bytes of a datagram around its body: header and tag.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn hdr(kind: Kind) -> Header {
        Header {
            kind,
            sender: 2,
            cluster_id: 99,
            sender_epoch: 3,
            receiver_epoch: 4,
            msg_id: 5,
        }
    }

    fn bodies() -> Vec<Body> {
        let u = Update {
            op: Op::Change,
            key: crate::Bytes::from_elem(1, 16),
            node: 3,
            value: crate::Bytes::from_elem(2, 16),
        };
        vec![
            Body::Hello,
            Body::HelloAck,
            Body::ClientRequest(vec![u.clone(), u.clone()]),
            Body::ClientReply(vec![0, 1, 2]),
            Body::Forward(vec![u]),
            Body::ForwardReply(vec![]),
            Body::Deltas {
                first_seq: 9,
                deltas: vec![vec![1, 2, 3].into(), vec![].into()],
            },
            Body::DeltaAck { applied: 77 },
            Body::PieceChunk {
                seq: 1,
                total_len: 10,
                index: 0,
                count: 2,
                data: vec![5; 5],
            },
            Body::PieceRequest {
                seq: 4,
                missing: vec![1, 3],
            },
            Body::Fib {
                first_seq: 1,
                items: vec![
                    FibItem::Install {
                        key: crate::Bytes::from_elem(1, 4),
                        value: crate::Bytes::new(),
                    },
                    FibItem::Remove {
                        key: crate::Bytes::from_elem(3, 5),
                    },
                    FibItem::SliceEnd,
                    FibItem::Prune,
                ],
            },
            Body::FibAck { applied: 0 },
        ]
    }

    #[test]
    fn every_body_round_trips_and_any_flipped_bit_is_refused() {
        for b in bodies() {
            let h = hdr(b.kind());
            let bytes = encode(&KEY, &h, &b);
            assert_eq!(decode(&KEY, 99, &bytes), Ok((h, b.clone())));
            assert_eq!(decode(&KEY, 98, &bytes), Err(WireError::ForeignCluster));
            assert_eq!(decode(&[8; 32], 99, &bytes), Err(WireError::BadTag));
            for i in 0..bytes.len() * 8 {
                let mut x = bytes.clone();
                x[i / 8] ^= 1 << (i % 8);
                assert!(decode(&KEY, 99, &x).is_err(), "bit {i} of {:?}", b.kind());
            }
        }
    }
}
