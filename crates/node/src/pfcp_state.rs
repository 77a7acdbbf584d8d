//! The PFCP endpoint's state changes on their way to the node's log: held with the datagrams
//! that wait for them until the node says they are durable ([`crate::pfcp::Endpoint`]).
//!
//! A `sb_pfcp::Upf` with state tracking on records each change of a session or an
//! association; [`Keeping::hold`] takes them with the datagrams the same call gave (the PFCP
//! response that reports the change, relays), [`Keeping::save`] hands the changes to the node
//! as one state change of a range ([`sb_control::Node::put_state_for`]: the node's own range
//! for its own endpoint, a gone node's range for the sessions it serves in its place), and
//! [`Keeping::durable`] gives the datagrams back once the node's ticket came back. Nothing of
//! a change leaves before it is durable: an SMF never holds an answer the cluster could lose.

use sb_control::{ControlError, Node, NodeId};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// A datagram the endpoint sends: PFCP to a peer, or a relay to another endpoint.
pub(crate) enum Out {
    Pfcp(sb_pfcp::Transmit),
    Relay(Vec<u8>, SocketAddr),
}

/// Changes handed to the node under `ticket`, with the datagrams that wait for them.
struct Saving {
    ticket: u64,
    changes: Vec<(u64, Option<Vec<u8>>)>,
    outs: Vec<Out>,
}

/// The state changes of one endpoint's `Upf`, for range `range`'s records.
pub(crate) struct Keeping {
    range: NodeId,
    unsaved: Vec<(u64, Option<Vec<u8>>)>,
    unsaved_out: Vec<Out>,
    saving: VecDeque<Saving>,
    /// Changes handed to the node, and those durable.
    pub handed: u64,
    pub durable: u64,
}

impl Keeping {
    pub fn new(range: NodeId) -> Keeping {
        Keeping {
            range,
            unsaved: Vec::new(),
            unsaved_out: Vec::new(),
            saving: VecDeque::new(),
            handed: 0,
            durable: 0,
        }
    }

    /// Takes the changes a call made and the datagrams it gave: the datagrams to send now
    /// (all of them where it changed nothing), the others held.
    pub fn hold(&mut self, changes: Vec<(u64, Option<Vec<u8>>)>, outs: Vec<Out>) -> Vec<Out> {
        if changes.is_empty() {
            return outs;
        }
        self.unsaved.extend(changes);
        self.unsaved_out.extend(outs);
        Vec::new()
    }

    /// Hands the changes not handed yet to `node` (not while it does not serve the range:
    /// they wait). The datagrams to send now: those of changes the node refuses for good (a
    /// record over 64 KiB: the session works until a restart).
    pub fn save(&mut self, node: &mut Node) -> Vec<Out> {
        if self.unsaved.is_empty() || !node.ready() || node.fenced() {
            return Vec::new();
        }
        // The last change of each key (a removal after a keep, a keep after a removal).
        let mut last: BTreeMap<u64, Option<&Vec<u8>>> = BTreeMap::new();
        for (k, v) in &self.unsaved {
            last.insert(*k, v.as_ref());
        }
        let (mut puts, mut dels) = (Vec::new(), Vec::new());
        for (k, v) in last {
            match v {
                Some(v) => puts.push((k, v.clone())),
                None => dels.push(k),
            }
        }
        match node.put_state_for(self.range, puts, dels) {
            Ok(ticket) => {
                self.handed += 1;
                self.saving.push_back(Saving {
                    ticket,
                    changes: std::mem::take(&mut self.unsaved),
                    outs: std::mem::take(&mut self.unsaved_out),
                });
                Vec::new()
            }
            // Not serving the range now: tried again later.
            Err(ControlError::NotServing) => Vec::new(),
            Err(e) => {
                eprintln!(
                    "pfcp: a state change of range {} is not kept: {e}",
                    self.range
                );
                self.unsaved.clear();
                std::mem::take(&mut self.unsaved_out)
            }
        }
    }

    /// Whether `ticket` is one of ours.
    pub fn has(&self, ticket: u64) -> bool {
        self.saving.iter().any(|s| s.ticket == ticket)
    }

    /// The node made change `ticket` durable (and those before it, which come in order): the
    /// datagrams that waited for them.
    pub fn durable(&mut self, ticket: u64) -> Vec<Out> {
        let mut outs = Vec::new();
        if !self.has(ticket) {
            return outs;
        }
        while let Some(s) = self.saving.pop_front() {
            self.durable += 1;
            outs.extend(s.outs);
            if s.ticket == ticket {
                break;
            }
        }
        outs
    }

    /// The node dropped change `ticket` (a new leader of the range's group did not take it),
    /// or every change it was handed (`None`: its state machine restarted): handed again.
    pub fn again(&mut self, ticket: Option<u64>) {
        let from = match ticket {
            Some(t) => match self.saving.iter().position(|s| s.ticket == t) {
                Some(i) => i,
                None => return,
            },
            None => 0,
        };
        let (mut changes, mut outs) = (Vec::new(), Vec::new());
        for s in self.saving.drain(from..) {
            changes.extend(s.changes);
            outs.extend(s.outs);
        }
        changes.append(&mut self.unsaved);
        outs.append(&mut self.unsaved_out);
        self.unsaved = changes;
        self.unsaved_out = outs;
    }

    /// Changes not handed yet, and handed and not durable yet.
    pub fn waiting(&self) -> (usize, usize) {
        (self.unsaved.len(), self.saving.len())
    }
}
