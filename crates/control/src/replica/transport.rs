//! The network adapter: a Raft message of a range's group travels as one or more
//! [`Body::Raft`] chunks of the control protocol, so it carries the protocol's authentication
//! (the pair key of sender and receiver, cluster id, epochs): a node outside the group, a
//! client, or anyone without the pair key cannot inject a vote or an append. The message's own
//! `from` and `to` must be the authenticated sender and receiver ([`accept`]).
//!
//! A message is its protobuf encoding cut into chunks of at most [`CHUNK`] bytes (a snapshot
//! or a large append spans several datagrams). The receiver keeps one message in assembly per
//! (sender, group): a chunk of a newer message replaces it, a chunk of an older one is dropped.
//! A message with a lost chunk is lost as a whole; Raft sends again (appends on the next
//! heartbeat's probe, a snapshot once the leader learns the follower still lacks it).

use crate::wire::{self, Body};
use crate::NodeId;
use protobuf::Message as _;
use raft::prelude::Message;
use std::collections::BTreeMap;

/// Bytes of a chunk's data at most.
pub const CHUNK: usize = wire::MAX_DATAGRAM - wire::OVERHEAD - 16;

/// Chunks of a message at most (about 3.8 GB: more than a range's snapshot needs; a claim
/// above it is dropped before anything is allocated).
pub const MAX_CHUNKS: u16 = u16::MAX;

/// A node's Raft id: its node id plus one (Raft's 0 means "none").
pub fn raft_id(n: NodeId) -> u64 {
    n as u64 + 1
}

/// The node of a Raft id (None for 0 or beyond the node ids).
pub fn node_of(id: u64) -> Option<NodeId> {
    id.checked_sub(1).and_then(|n| NodeId::try_from(n).ok())
}

/// The chunks of message `m` of group `group`, numbered `msg`.
pub fn chunks(group: u32, msg: u64, m: &Message, chunk: usize) -> Vec<Body> {
    let bytes = m.write_to_bytes().expect("a raft message encodes");
    let chunk = chunk.clamp(64, CHUNK);
    let count = bytes.len().div_ceil(chunk).max(1);
    let count = u16::try_from(count).expect("a raft message under 3.8 GB");
    (0..count)
        .map(|i| {
            let a = i as usize * chunk;
            let b = (a + chunk).min(bytes.len());
            Body::Raft {
                group,
                msg,
                index: i,
                count,
                data: bytes[a..b].to_vec(),
            }
        })
        .collect()
}

struct Partial {
    msg: u64,
    chunks: Vec<Option<Vec<u8>>>,
    have: usize,
}

/// Messages being assembled, per (sender, group).
#[derive(Default)]
pub struct Reassembly {
    partial: BTreeMap<(NodeId, u32), Partial>,
}

impl Reassembly {
    /// Takes chunk `index` of `count` of `from`'s message `msg` for `group`: the message, once
    /// whole and parsed.
    pub fn take(
        &mut self,
        from: NodeId,
        group: u32,
        msg: u64,
        index: u16,
        count: u16,
        data: Vec<u8>,
    ) -> Result<Option<Message>, &'static str> {
        if count == 0 || index >= count || data.len() > CHUNK {
            return Err("bad raft chunk");
        }
        if count == 1 {
            return Message::parse_from_bytes(&data)
                .map(Some)
                .map_err(|_| "bad raft message");
        }
        let p = self
            .partial
            .entry((from, group))
            .or_insert_with(|| Partial {
                msg,
                chunks: Vec::new(),
                have: 0,
            });
        if msg < p.msg {
            return Err("stale raft chunk");
        }
        if msg > p.msg || p.chunks.len() != count as usize {
            *p = Partial {
                msg,
                chunks: vec![None; count as usize],
                have: 0,
            };
        }
        let slot = &mut p.chunks[index as usize];
        if slot.is_none() {
            *slot = Some(data);
            p.have += 1;
        }
        if p.have < p.chunks.len() {
            return Ok(None);
        }
        let p = self.partial.remove(&(from, group)).expect("present");
        let bytes: Vec<u8> = p.chunks.into_iter().flatten().flatten().collect();
        Message::parse_from_bytes(&bytes)
            .map(Some)
            .map_err(|_| "bad raft message")
    }

    /// Forgets what `from` was sending (it restarted).
    pub fn forget(&mut self, from: NodeId) {
        self.partial.retain(|(f, _), _| *f != from);
    }

    /// Bytes held in partial messages.
    pub fn bytes(&self) -> usize {
        (self.partial.values())
            .flat_map(|p| p.chunks.iter().flatten())
            .map(|c| c.len())
            .sum()
    }
}

/// Whether message `m` of `group`, authenticated as from node `from` to node `me`, may be
/// stepped: its Raft ids are the authenticated ends and both are voters of the group.
pub fn accept(m: &Message, from: NodeId, me: NodeId, voters: &[NodeId]) -> bool {
    m.from == raft_id(from)
        && m.to == raft_id(me)
        && voters.contains(&from)
        && voters.contains(&me)
        && !raft::raw_node::is_local_msg(m.get_msg_type())
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::prelude::{Entry, MessageType};

    fn msg(bytes: usize) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        m.from = 1;
        m.to = 2;
        let mut e = Entry::default();
        e.set_data(vec![7u8; bytes].into());
        m.set_entries(vec![e].into());
        m
    }

    #[test]
    fn a_message_goes_in_chunks_and_comes_back_whole_in_any_order() {
        let m = msg(1000);
        let mut cs = chunks(4, 9, &m, 100);
        assert!(cs.len() > 5);
        cs.reverse();
        let mut r = Reassembly::default();
        let mut got = None;
        for c in cs {
            let Body::Raft {
                group,
                msg,
                index,
                count,
                data,
            } = c
            else {
                unreachable!()
            };
            // A duplicate of a chunk held changes nothing.
            if let Some(x) = r.take(0, group, msg, index, count, data.clone()).unwrap() {
                got = Some(x);
                continue;
            }
            assert!(r.take(0, group, msg, index, count, data).unwrap().is_none());
        }
        assert_eq!(got, Some(m));
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn a_newer_message_replaces_a_partial_one_and_an_older_chunk_is_refused() {
        let (a, b) = (chunks(1, 5, &msg(300), 100), chunks(1, 6, &msg(300), 100));
        let mut r = Reassembly::default();
        let take = |r: &mut Reassembly, c: &Body| match c.clone() {
            Body::Raft {
                group,
                msg,
                index,
                count,
                data,
            } => r.take(2, group, msg, index, count, data),
            _ => unreachable!(),
        };
        assert!(take(&mut r, &a[0]).unwrap().is_none());
        assert!(take(&mut r, &b[0]).unwrap().is_none());
        assert!(take(&mut r, &a[1]).is_err());
        let mut last = None;
        for c in &b[1..] {
            last = take(&mut r, c).unwrap();
        }
        assert!(last.is_some());
        assert!(r.take(2, 1, 1, 3, 2, vec![]).is_err());
    }

    #[test]
    fn accept_binds_raft_ids_to_the_authenticated_ends() {
        let m = msg(1);
        assert!(accept(&m, 0, 1, &[0, 1, 2]));
        assert!(!accept(&m, 2, 1, &[0, 1, 2]), "another sender's id");
        assert!(!accept(&m, 0, 1, &[1, 2, 3]), "a sender outside the group");
        assert!(!accept(&m, 0, 2, &[0, 1, 2]), "another receiver");
        let mut hup = m.clone();
        hup.set_msg_type(MessageType::MsgHup);
        assert!(!accept(&hup, 0, 1, &[0, 1, 2]), "a local message");
    }
}
