//! The application a node runs: what a flow key is, what a FIB value means and what the action
//! does to a packet. The LTE packet forwarding engine ([`crate::lte`]) is the first; a NAT or a
//! load balancer implements the same trait.

use crate::counters::{Drop, PortId};
use sb_packet::{Meta, PacketBatch};

/// What became of a frame that arrived on the access port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Decapsulated: send it out of the external port (MACs are set by the engine).
    ToExternal,
    /// Answered in place (an echo response with its MACs already set): send it back out of the
    /// access port as it is.
    Reply,
}

/// Where an error message about a dropped frame goes ([`App::error_reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorReply {
    /// Out of the external port (an ICMP error to an Internet sender); the engine sets the
    /// MACs.
    External,
    /// Back out of the access port as it is, MACs already set (a GTP-U Error Indication).
    Access,
    /// A packet for a flow key, to be looked up and forwarded like one that arrived on the
    /// external port (an ICMP error to a UE, sent down its tunnel).
    Downstream,
}

/// One network function on the engine. All methods work on one frame; the engine batches the
/// table lookups between them.
pub trait App: Send {
    /// Bytes of a flow key (every key has this size: it is the FIB's key size).
    fn key_bytes(&self) -> usize;

    /// Bytes of a FIB value.
    fn value_bytes(&self) -> usize;

    /// A frame arrived on the external port (or, still to be looked up, over the fabric):
    /// writes its flow key into `key` (`key_bytes()` long). May keep what it parsed (offsets)
    /// in `meta.user` for [`apply`](Self::apply). `Err` drops the frame.
    fn downstream_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop>;

    /// Like [`downstream_key`](Self::downstream_key) for a frame another node of the cluster
    /// already parsed and validated at its ingress (a lookup frame from the fabric): an
    /// application may read the key without validating the packet again, as long as no input
    /// makes it panic or read out of bounds. The default parses in full.
    fn fabric_key(&self, frame: &[u8], key: &mut [u8], meta: &mut Meta) -> Result<(), Drop> {
        self.downstream_key(frame, key, meta)
    }

    /// The node whose access port serves the flow with FIB value `value`.
    fn egress_node(&self, value: &[u8]) -> u16;

    /// Applies the flow's action to frame `i` of `batch` in place (encapsulation, TTL); the
    /// frame's MACs are the engine's business. `Err` drops it.
    fn apply(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop>;

    /// The second half of the action, called for every frame of a batch that
    /// [`apply`](Self::apply) passed, after it was called for the whole batch (so that what
    /// [`prefetch`](Self::prefetch) asked for has arrived): a per-flow check that reads
    /// memory of its own (the LTE application's policy slot: MBR, usage). `Err` drops the
    /// frame. The default passes everything.
    #[inline]
    fn admit(&mut self, batch: &mut PacketBatch, i: usize, value: &[u8]) -> Result<(), Drop> {
        let _ = (batch, i, value);
        Ok(())
    }

    /// Frame `i` of `batch` passed the action and leaves for the access port (out of this
    /// node's, or over the fabric to its egress node's, which sends it on as it is): when it is
    /// larger than that link carries and may be fragmented, the application cuts it. Frame `i`
    /// becomes the first piece and the others are appended to `pieces` in order (whole frames,
    /// the Ethernet header as frame `i`'s: the engine then treats each as frame `i`); returns
    /// how many it appended. `Err` drops the frame. The default cuts nothing.
    #[inline]
    fn split(
        &mut self,
        batch: &mut PacketBatch,
        i: usize,
        pieces: &mut PacketBatch,
    ) -> Result<usize, Drop> {
        let _ = (batch, i, pieces);
        Ok(0)
    }

    /// A frame arrived on the access port (upstream traffic, path management): handles it in
    /// place.
    fn access(&mut self, batch: &mut PacketBatch, i: usize) -> Result<Access, Drop>;

    /// Frames `idx` of `batch` arrived on the access port (in that order): handles each in
    /// place as [`access`](Self::access) would, one after the other, and writes its result
    /// into `out` (as long as `idx`). An application batches its table lookups here (the LTE
    /// application's uplink TEIDs, prefetched as the engine's FIB lookups downstream); the
    /// result of each frame must be the one `access` gives it. The default calls `access`
    /// for each frame.
    fn access_batch(
        &mut self,
        batch: &mut PacketBatch,
        idx: &[usize],
        out: &mut [Result<Access, Drop>],
    ) {
        for (o, &i) in out.iter_mut().zip(idx) {
            *o = self.access(batch, i);
        }
    }

    /// The driver's clock, in nanoseconds from an origin shared by every worker of the node
    /// ([`crate::Engine::set_clock`]). The default ignores it.
    fn set_clock(&mut self, now_ns: u64) {
        let _ = now_ns;
    }

    /// Hints that [`apply`](Self::apply) and [`admit`](Self::admit) are about to be called
    /// with `value` (the engine calls it after a batch's lookup, a few frames ahead of their
    /// `apply`): load what they will read. The default does nothing.
    #[inline]
    fn prefetch(&self, value: &[u8]) {
        let _ = value;
    }

    /// The worker is between batches and holds no frame: everything it processed was
    /// transmitted ([`crate::Engine::poll`], once per loop). The default does nothing.
    fn poll(&mut self) {}

    /// Frames the application sends of its own accord out of the access port (control
    /// messages such as GTP-U End Markers), appended to `out` with zero MACs (the engine sets
    /// them); returns how many. The default has none.
    fn take_access_frames(&mut self, out: &mut PacketBatch) -> usize {
        let _ = out;
        0
    }

    /// How many of the frames [`take_access_frames`](Self::take_access_frames) gave since the
    /// last call were the CP function's (counted apart from End Markers); the default none.
    fn take_from_cp(&mut self) -> u64 {
        0
    }

    /// Frames the application held back (a session's buffered downlink) that are due to go
    /// now, appended to `rx` as Ethernet frames to run through the downstream path like
    /// frames from the external port; returns how many. The engine runs them, then calls
    /// [`released_done`](Self::released_done). The default has none.
    fn take_released(&mut self, rx: &mut PacketBatch) -> usize {
        let _ = rx;
        0
    }

    /// The frames of [`take_released`](Self::take_released) went through the engine.
    fn released_done(&mut self) {}

    /// True if the application answers drops of reason `why` with an error message (the
    /// engine then asks [`error_reply`](Self::error_reply) while its rate limit allows, and
    /// counts the rest as rate limited). The default answers nothing.
    fn answers(&self, why: Drop) -> bool {
        let _ = why;
        false
    }

    /// Turns frame `i`, received on `port` and dropped for `why` (the drop is counted all the
    /// same), into an error message to its sender, in place, and says where it goes; `None`
    /// sends nothing (a packet the RFCs say must not be answered). Called only for reasons
    /// [`answers`](Self::answers) names, after the stage that dropped the frame.
    fn error_reply(
        &mut self,
        batch: &mut PacketBatch,
        i: usize,
        port: PortId,
        why: Drop,
    ) -> Option<ErrorReply> {
        let _ = (batch, i, port, why);
        None
    }
}
