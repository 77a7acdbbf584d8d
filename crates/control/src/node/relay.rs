//! Standing in for a gone owner (with replication): a node that (re)started while an owner is
//! gone (failure detection, [`super::liveness`]) cannot get that owner's piece of the GPT nor
//! its FIB slice from the owner, so it would never be ready, and, without a GPT, it could not
//! acknowledge the other owners' deltas either: every owner's batches would wait for it. It
//! asks the other replicas of the gone owner's range instead ([`Body::RelayRequest`], every
//! [`RELAY_RETRY`] until it has both).
//!
//! A replica that also holds the owner gone and has the owner's piece in its GPT answers with
//! [`Body::Relay`] chunks of: the piece as its GPT holds it (the owner's epoch and last delta
//! applied: what the owner itself sent it) and, if it leads the range's group with every
//! committed entry applied (so its RIB has every acknowledged change of the range), the
//! asker's FIB slice of the range: each key whose RIB entry or GPT lookup names the asker, with
//! its RIB value. An acknowledged change was committed and its delta applied at every live
//! node before its answer, so for every acknowledged key the two agree; a key whose change was
//! in flight when the owner died is installed at both its old and new handler. A node that is
//! itself that leader takes its slice from its own RIB once it has the piece.
//!
//! The asker installs the piece as the owner's (at that epoch and delta) and the slice as the
//! owner's stream of that epoch, complete: when the owner comes back in a new epoch, its
//! slice replaces it (its prune removes what it no longer has). With one replica per range the
//! range's state lives on its owner alone: nothing stands in for it.

use super::{FibIn, Node, Source};
use crate::wire::Body;
use crate::{Bytes, Nanos, NodeId, CHUNK_BYTES, MAX_PIECE_BYTES};
use sb_setsep::Piece;
use std::collections::BTreeMap;

/// Between a node's requests for a gone owner's piece and slice.
pub(super) const RELAY_RETRY: Nanos = 200_000_000;

/// A relayed answer being put together.
pub(super) struct RelayAsm {
    epoch: u32,
    seq: u64,
    total: usize,
    chunks: Vec<Option<Vec<u8>>>,
    have: usize,
}

/// Per owner: when to ask next, and the answers coming in (one per replica asked: their
/// chunks interleave).
#[derive(Default)]
pub(super) struct RelayIn {
    pub ask_at: Nanos,
    pub asm: BTreeMap<NodeId, RelayAsm>,
}

impl Node {
    /// Whether this node lacks gone owner `o`'s piece or slice and may have them relayed.
    pub(super) fn needs_relay(&self, o: NodeId) -> bool {
        o != self.me
            && (o as usize) < self.reps.len()
            && self.replicated()
            && (!self.reps[o as usize].have || !self.fin[o as usize].slice_done)
            && self.gone(o)
    }

    /// Asks the replicas of the gone owners' ranges whose piece or slice this node lacks (or
    /// takes the slice from its own RIB where it leads the range's group).
    pub(super) fn relay_timers(&mut self) {
        for o in 0..self.spec.nodes {
            let oi = o as usize;
            if !self.needs_relay(o) {
                // Answers no longer wanted.
                self.relay[oi].asm.clear();
                continue;
            }
            if self.relay[oi].ask_at > self.now {
                continue;
            }
            self.relay[oi].ask_at = self.now + RELAY_RETRY;
            if self.reps[oi].have && !self.fin[oi].slice_done && self.gpt.is_some() {
                if let Some(entries) = self.relay_slice(o, self.me) {
                    let epoch = self.reps[oi].epoch;
                    self.install_relayed_slice(o, epoch, entries);
                    continue;
                }
            }
            let voters = crate::replica::replicas_of(o, self.spec.nodes, self.tuning.replicas);
            for v in voters {
                if v != o && v != self.me && self.peers[v as usize].epoch != 0 && !self.gone(v) {
                    let id = self.new_id();
                    self.send(v, id, Body::RelayRequest { owner: o });
                }
            }
        }
    }

    /// When [`Node::relay_timers`] wants to run next.
    pub(super) fn relay_timeout(&self) -> Option<Nanos> {
        (0..self.spec.nodes)
            .filter(|&o| self.needs_relay(o))
            .map(|o| self.relay[o as usize].ask_at)
            .min()
    }

    /// The FIB slice of range `o` for handler `p` from this node's replica of the range, if it
    /// leads the range's group with every committed entry applied and has the range's piece.
    fn relay_slice(&self, o: NodeId, p: NodeId) -> Option<Vec<(Bytes, Bytes)>> {
        let oi = o as usize;
        let g = self.groups[oi].as_ref()?;
        let st = self.gstates[oi].as_ref()?;
        let gpt = self.gpt.as_ref()?;
        if !g.leading_with_commit() || st.applied < g.committed() || !st.base_done {
            return None;
        }
        Some(
            (st.rib.iter())
                .filter(|(k, n, _)| *n == p || gpt.lookup(k) == p)
                .map(|(k, _, v)| (Bytes::from_slice(k), Bytes::from_slice(v)))
                .collect(),
        )
    }

    /// Peer `p` asks for gone owner `o`'s piece and its slice.
    pub(super) fn on_relay_request(&mut self, p: NodeId, o: NodeId) {
        let oi = o as usize;
        if o >= self.spec.nodes || o == p || o == self.me {
            return self.drop_msg("bad_relay_request");
        }
        let r = &self.reps[oi];
        let ok = self.groups[oi].is_some() && r.have && !r.refused && self.gone(o);
        let Some(gpt) = self.gpt.as_ref().filter(|_| ok) else {
            return self.drop_msg("relay_refused");
        };
        let Ok(piece) = gpt.piece(self.spec.ranges[oi].clone(), r.keys) else {
            return self.drop_msg("relay_refused");
        };
        let (epoch, seq) = (r.epoch, r.applied);
        let piece = piece.to_bytes();
        let slice = self.relay_slice(o, p);
        let mut blob = Vec::with_capacity(piece.len() + 9);
        blob.push(slice.is_some() as u8);
        blob.extend_from_slice(&(piece.len() as u32).to_le_bytes());
        blob.extend_from_slice(&piece);
        let entries = slice.unwrap_or_default();
        blob.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (k, v) in &entries {
            blob.extend_from_slice(k);
            blob.extend_from_slice(v);
        }
        if blob.len() > MAX_PIECE_BYTES {
            return self.drop_msg("relay_refused");
        }
        let chunk = self.tuning.chunk_bytes.clamp(256, CHUNK_BYTES);
        let count = blob.len().div_ceil(chunk).max(1);
        let chunk = blob.len().div_ceil(count);
        for (i, data) in blob.chunks(chunk).enumerate() {
            let id = self.new_id();
            let body = Body::Relay {
                owner: o,
                epoch,
                seq,
                total_len: blob.len() as u32,
                index: i as u32,
                count: count as u32,
                data: data.to_vec(),
            };
            self.send(p, id, body);
        }
    }

    /// A chunk of peer `p`'s answer for gone owner `o`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_relay(
        &mut self,
        p: NodeId,
        o: NodeId,
        epoch: u32,
        seq: u64,
        total_len: u32,
        index: u32,
        count: u32,
        data: Vec<u8>,
    ) {
        if o >= self.spec.nodes || epoch == 0 || !self.needs_relay(o) {
            return self.drop_msg("relay_unneeded");
        }
        let total = total_len as usize;
        if total == 0 || total > MAX_PIECE_BYTES || count == 0 || index >= count {
            return self.drop_msg("bad_relay");
        }
        let chunk = total.div_ceil(count as usize);
        let start = index as usize * chunk;
        if chunk > CHUNK_BYTES
            || total.div_ceil(chunk) != count as usize
            || data.len() != (start + chunk).min(total).saturating_sub(start)
        {
            return self.drop_msg("bad_relay");
        }
        let asms = &mut self.relay[o as usize].asm;
        let same = asms.get(&p).is_some_and(|a| {
            (a.epoch, a.seq, a.total, a.chunks.len()) == (epoch, seq, total, count as usize)
        });
        if !same {
            let a = RelayAsm {
                epoch,
                seq,
                total,
                chunks: vec![None; count as usize],
                have: 0,
            };
            asms.insert(p, a);
        }
        let a = asms.get_mut(&p).expect("made above");
        if a.chunks[index as usize].is_none() {
            a.chunks[index as usize] = Some(data);
            a.have += 1;
        }
        if a.have < a.chunks.len() {
            return;
        }
        let a = asms.remove(&p).expect("complete");
        let mut blob = Vec::with_capacity(a.total);
        for c in a.chunks {
            blob.extend_from_slice(&c.expect("complete"));
        }
        match self.decode_relay(&blob) {
            Some((piece, slice)) => {
                self.install(o, epoch, seq, piece);
                if let Some(entries) = slice {
                    self.install_relayed_slice(o, epoch, entries);
                }
            }
            None => self.drop_msg("bad_relay"),
        }
    }

    /// A relayed answer: the piece, and the slice if the sender led the range's group.
    #[allow(clippy::type_complexity)]
    fn decode_relay(&self, b: &[u8]) -> Option<(Piece, Option<Vec<(Bytes, Bytes)>>)> {
        let (&flag, rest) = b.split_first()?;
        let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let piece = Piece::from_bytes(rest.get(4..4 + n)?).ok()?;
        let rest = rest.get(4 + n..)?;
        let count = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let rest = &rest[4..];
        let w = self.spec.key_bytes + self.spec.value_bytes;
        if flag > 1 || rest.len() != count.checked_mul(w)? {
            return None;
        }
        let slice = (flag == 1).then(|| {
            rest.chunks(w)
                .map(|e| {
                    let (k, v) = e.split_at(self.spec.key_bytes);
                    (Bytes::from_slice(k), Bytes::from_slice(v))
                })
                .collect()
        });
        Some((piece, slice))
    }

    /// Installs range `o`'s slice for this node as owner `o`'s stream of `epoch`, complete
    /// (unless a newer stream of the owner began meanwhile). Keys outside the range are
    /// skipped.
    fn install_relayed_slice(&mut self, o: NodeId, epoch: u32, entries: Vec<(Bytes, Bytes)>) {
        let oi = o as usize;
        if self.fin[oi].slice_done || self.fin[oi].epoch > epoch {
            return;
        }
        self.fin[oi] = FibIn {
            epoch,
            // Nothing more of that epoch's stream is taken: the owner is gone.
            applied: u64::MAX / 2,
            pending: BTreeMap::new(),
            sync: None,
            slice_done: true,
            refused: Default::default(),
            ack_due: false,
        };
        for (k, v) in entries {
            if self.spec.owner_of(&k) != o {
                self.drop_msg("bad_relay");
                continue;
            }
            self.fib_insert(k, v, Source::Slice);
        }
    }
}
