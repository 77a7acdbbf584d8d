//! Replication of each GPT range through Raft (raft-rs, a sans-IO `RawNode`): the layers
//! under the fast-path protocol of [`crate::Node`].
//!
//! - [`storage`]: the storage adapter (raft-rs's `Storage` in memory; entries, hard state and
//!   snapshots as records of the node's log, durable before the messages that depend on them
//!   leave).
//! - [`transport`]: the network adapter (Raft messages in authenticated [`crate::wire::Kind::Raft`]
//!   chunks of the control protocol).
//! - [`state`]: the range state machine (the committed update records applied to the range's
//!   RIB; snapshots of the RIB, the GPT piece and the range's PFCP state records).
//! - [`group`]: one range's group at one replica (ticks, proposals, readies).
//! - [`records`]: a range's PFCP state records as a replica keeps them (compact: each as its
//!   differences from a record of its length).
//!
//! Range `i`'s group has [`replicas_of`] as voters: nodes `i, i+1, ...` (mod N), the first of
//! them (node `i`, the range's *home*) with the higher election priority; a leader that is not
//! the home hands the leadership back once the home has caught up.

pub mod group;
pub mod records;
pub mod state;
pub mod storage;
pub mod transport;

use crate::NodeId;

/// The replicas of range `range` in a cluster of `nodes` nodes with replication factor
/// `replicas` (capped at the node count, at least 1): `range, range + 1, ...` mod `nodes`.
pub fn replicas_of(range: NodeId, nodes: u16, replicas: usize) -> Vec<NodeId> {
    let r = replicas.clamp(1, nodes.max(1) as usize);
    (0..r as u64)
        .map(|k| ((range as u64 + k) % nodes as u64) as NodeId)
        .collect()
}

#[cfg(test)]
mod tests;
