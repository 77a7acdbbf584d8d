//! What the endpoint holds for its sessions, by structure ([`Upf::memory`]).

use super::*;

/// What [`Upf::memory`] counts: each map's hash table from its capacity (every bucket and
/// hashbrown's control byte; a table presized for the node's share is touched as sessions
/// land in it at random), and what the entries point to as held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// The session slab's slots (UP SEID -> where the session is kept: 8 bytes per slot
    /// used) and its list of free slots.
    pub sessions: usize,
    /// The sessions' kept rules (their bytes): each packed session's differences from the
    /// first one of its length.
    pub packed: usize,
    /// What holds them: the slab's pools, 64 KiB chunks of records of one length each, and
    /// the allocations of the few kept sessions longer than 255 bytes as glibc's malloc sizes
    /// them ([`malloc_chunk`]).
    pub packed_chunks: usize,
    /// The UE address index.
    pub ue_index: usize,
    /// The set of uplink TEIDs given out.
    pub teids: usize,
    /// The response cache (its map and the responses' bytes).
    pub responses: usize,
    /// The templates the kept sessions are differences from.
    pub shapes: usize,
    /// The usage state of sessions with URRs or a BUFF|NOCP FAR: its map, the uplink TEID
    /// index, the timers (a B-tree: 16 bytes per entry and a third more for its nodes, an
    /// estimate) and each session's usage state and meters, each an allocation (as malloc
    /// sizes them).
    pub usage: usize,
    /// The sessions' paths between UEs and the CP function (open5gs's router solicitations
    /// and advertisements): three maps by TEID and session, and the paths' filters.
    pub cp: usize,
}

/// Bytes a hash table of `capacity` entries of `T` takes (buckets and control bytes).
fn table<T>(capacity: usize) -> usize {
    capacity * (std::mem::size_of::<T>() + 1)
}

/// The bytes glibc's malloc takes for an allocation of `n` bytes on 64-bit Linux: `n` plus
/// its 8-byte size field, rounded up to 16, at least 32.
pub fn malloc_chunk(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).next_multiple_of(16).max(32)
    }
}

impl<S: Sessions> Upf<S> {
    /// [`Upf::memory`] with the kept bytes counted again by walking every session (what the
    /// running count must equal; for tests and audits: it takes time in the sessions).
    pub fn recount_memory(&self) -> Memory {
        let packed = self.sessions.iter().map(|(_, kept)| kept.len()).sum();
        Memory {
            packed,
            ..self.memory()
        }
    }

    /// Bytes the endpoint holds for its sessions, by structure.
    pub fn memory(&self) -> Memory {
        Memory {
            sessions: self.sessions.slot_bytes(),
            packed: self.sessions.held(),
            packed_chunks: self.sessions.record_bytes(),
            ue_index: self.ue_index.bytes(),
            teids: self.teids.bytes(),
            responses: self.cache.memory(),
            shapes: self.shapes.bytes(),
            usage: table::<(u64, Box<Metering>)>(self.metering.capacity())
                + table::<(u32, u64)>(self.by_teid.capacity())
                + self.timers.len() * 16 * 4 / 3
                + self.meter_heap,
            cp: self.cp.bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The maps of an endpoint's metered sessions are allocated for the sessions it expects:
    /// none of them doubles (and holds the control thread, at every node together, as the
    /// 10M-session runs of docs/bench/pfcp.md showed) before it holds that many.
    #[test]
    fn the_meter_maps_are_allocated_for_the_expected_sessions() {
        let n = 50_000;
        let c = Config {
            expected_sessions: n,
            ..Config::new(
                NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
                RecoveryTimeStamp(1),
                Ipv4Addr::new(10, 0, 0, 1),
            )
        };
        let upf = Upf::new(c, crate::fuzzing::AcceptAll);
        assert!(upf.metering.capacity() >= n, "{}", upf.metering.capacity());
        assert!(upf.by_teid.capacity() >= n, "{}", upf.by_teid.capacity());
        assert!(upf.memory().usage >= table::<(u64, Box<Metering>)>(n));
    }
}
