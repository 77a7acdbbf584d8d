//! The range's PFCP state records: kept with the range, durable before they are answered.
//!
//! A node's PFCP endpoint (`sb_pfcp::Upf`) holds sessions and associations; to survive a
//! restart, and to be served by another replica when the node is gone, their records live
//! with the node's own GPT range: an opaque map from a `u64` key (a session's SEID, an
//! association's key: `sb_pfcp`'s to choose) to its bytes.
//!
//! - [`Node::put_state`] changes the map and hands back a ticket; once the change is durable
//!   (without replication: in this node's log, fsynced; with replication: committed in the
//!   range's group, a majority of its replicas have it) the ticket comes back as
//!   [`Event::StateDurable`]. The driver answers the SMF only then.
//! - The changes are log records of their own (type 10, [`crate::record`]): replayed at a
//!   restart ([`Node::own_state`] then holds the map as it was), carried by checkpoints (as
//!   state records, or in the range's snapshot), applied by every replica of the range to its
//!   copy ([`Node::replica_state`]), which a node standing in for a gone owner can serve.
//! - A ticket whose change a lost leadership may have dropped never comes back: the node is
//!   fenced ([`Node::fenced`]) and restarted from its log, whose [`Node::own_state`] then
//!   tells what was kept.

use super::{Node, Phase};
use crate::record::{self, MAX_STATE_BYTES};
use crate::replica::records::StateRecords;
use crate::{ControlError, Event, NodeId};

/// A change handed out and not yet durable.
#[derive(Debug)]
pub(super) struct StateWait {
    ticket: u64,
    /// The range whose records it changes.
    range: NodeId,
    /// The log's persist count (without replication) or the group's entry index.
    at: u64,
    /// The group's term at the proposal (0 without replication).
    term: u64,
}

impl Node {
    /// Changes this node's range's PFCP state records: `puts` kept under their keys
    /// (replacing what they held), `dels` removed; the returned ticket comes back as
    /// [`Event::StateDurable`] once the change is durable. Only while the node serves its range
    /// ([`Node::ready`], not [`Node::fenced`]); a record over 64 KiB is refused.
    pub fn put_state(
        &mut self,
        puts: Vec<(u64, Vec<u8>)>,
        dels: Vec<u64>,
    ) -> Result<u64, ControlError> {
        if self.fenced || self.phase < Phase::Serving || !self.leads_own_group() {
            return Err(ControlError::NotServing);
        }
        if puts.iter().any(|(_, v)| v.len() > MAX_STATE_BYTES) {
            return Err(ControlError::StateTooLong);
        }
        let rec = record::state(&puts, &dels);
        crate::replica::state::apply_state(&mut self.own_state, puts, &dels);
        self.next_state_ticket += 1;
        let ticket = self.next_state_ticket;
        let ctx = self.own_ctx();
        let me = self.me;
        let (at, term) = match self.groups[me as usize].as_mut() {
            Some(g) => match g.propose(ctx, rec) {
                Some(i) => (i, g.term()),
                None => {
                    // No longer the leader: the change may be lost; the restart tells.
                    self.fence("state_not_proposed");
                    return Err(ControlError::NotServing);
                }
            },
            None => (self.persist(vec![rec]), 0),
        };
        self.state_wait.push_back(StateWait {
            ticket,
            range: me,
            at,
            term,
        });
        self.settle_state();
        Ok(ticket)
    }

    /// Changes range `range`'s PFCP state records while this node leads its group in the
    /// place of its home (the home gone: the stand-in leads, [`crate::replica::group`]'s
    /// priorities), as [`Node::put_state`] does for this node's own range: the change is
    /// applied to this replica's copy ([`Node::replica_state`]) once committed, and its
    /// ticket comes back as [`Event::StateDurable`]. [`ControlError::NotServing`] where this
    /// node does not lead that group now (the caller tries again later, or another replica
    /// leads). A change whose entry a new leader drops never comes back: the caller gives up
    /// on it after a while ([`Node::state_waiting`] counts them).
    pub fn put_state_for(
        &mut self,
        range: NodeId,
        puts: Vec<(u64, Vec<u8>)>,
        dels: Vec<u64>,
    ) -> Result<u64, ControlError> {
        if range == self.me {
            return self.put_state(puts, dels);
        }
        if self.fenced || self.phase < Phase::Serving {
            return Err(ControlError::NotServing);
        }
        if puts.iter().any(|(_, v)| v.len() > MAX_STATE_BYTES) {
            return Err(ControlError::StateTooLong);
        }
        let ctx = self.own_ctx();
        let Some(g) = self.groups.get_mut(range as usize).and_then(|g| g.as_mut()) else {
            return Err(ControlError::NotServing);
        };
        let Some(at) = g.propose(ctx, record::state(&puts, &dels)) else {
            return Err(ControlError::NotServing);
        };
        let term = g.term();
        self.next_state_ticket += 1;
        let ticket = self.next_state_ticket;
        self.state_wait.push_back(StateWait {
            ticket,
            range,
            at,
            term,
        });
        self.progress();
        Ok(ticket)
    }

    /// Whether this node leads its own range's group now (true without replication): not
    /// while raft's check-quorum has stepped it down (`drive_groups`).
    pub(super) fn leads_own_group(&self) -> bool {
        self.groups[self.me as usize]
            .as_ref()
            .is_none_or(|g| g.is_leader())
    }

    /// Whether this node leads range `range`'s group (its own: whether it serves it).
    pub fn leads_range(&self, range: NodeId) -> bool {
        if range == self.me {
            return !self.fenced && self.phase >= Phase::Serving && self.leads_own_group();
        }
        (self.groups.get(range as usize))
            .and_then(|g| g.as_ref())
            .is_some_and(|g| g.is_leader())
    }

    /// Hands out [`Event::StateDurable`] for the changes now durable, in order.
    pub(super) fn settle_state(&mut self) {
        // The own range's changes come back in order (one not durable holds those after it).
        let mut own_held = false;
        let mut i = 0;
        while let Some(w) = self.state_wait.get(i) {
            let own = w.range == self.me;
            if own && own_held {
                i += 1;
                continue;
            }
            let durable = match &self.groups[w.range as usize] {
                // Committed, and, for another range, applied to this replica's copy.
                Some(g)
                    if g.committed() >= w.at
                        && (own
                            || self.gstates[w.range as usize]
                                .as_ref()
                                .is_some_and(|s| s.applied >= w.at)) =>
                {
                    if g.term_at(w.at) != Some(w.term) {
                        // Another leader's entry took its place: lost.
                        if own {
                            self.fence("state_entry_replaced");
                            return;
                        }
                        let w = self.state_wait.remove(i).expect("at i");
                        self.events.push_back(Event::StateDropped(w.ticket));
                        continue;
                    }
                    true
                }
                Some(_) => false,
                None => own && self.durable >= w.at,
            };
            if !durable {
                own_held |= own;
                i += 1;
                continue;
            }
            let w = self.state_wait.remove(i).expect("at i");
            self.events.push_back(Event::StateDurable(w.ticket));
        }
    }

    /// This node's range's PFCP state records, as its log and its changes since have them
    /// (after a restart: what was durable before it, and whatever was handed out to be
    /// written when the node stopped).
    pub fn own_state(&self) -> impl Iterator<Item = (u64, Vec<u8>)> + '_ {
        self.own_state.iter()
    }

    /// Range `range`'s PFCP state records as this node's replica of its group holds them
    /// (None where this node is no follower of it: not a replica, or the range is its own).
    pub fn replica_state(&self, range: NodeId) -> Option<&StateRecords> {
        self.gstates.get(range as usize)?.as_ref().map(|s| &s.state)
    }

    /// State changes handed out and not yet durable.
    pub fn state_waiting(&self) -> usize {
        self.state_wait.len()
    }
}
