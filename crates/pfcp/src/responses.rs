//! The endpoint's cache of recent responses: a retransmitted request (the same message, with
//! the same sequence number, from the same address) is answered with the response it got, not
//! applied again (TS 29.244 6.4).
//!
//! A request is known by (peer address, sequence number, digest of its bytes): a peer that
//! restarted and numbers its requests from 1 again sends other messages under old sequence
//! numbers, and those must be handled, not answered with what its previous process was told.
//! The endpoint also forgets a peer's responses when it associates anew ([`Responses::forget`]).
//!
//! It keeps the newest `max` responses sent within `ttl` (and 256 MiB of them at most). Their
//! bytes live in one ring and their records (address, sequence number, time, place in the
//! ring) in a second; the index holds only each record's number (8 bytes a bucket), hashed and
//! compared through its record. By the structures' sizes, a cached response costs its bytes
//! and about 80 more (a 64-byte record and the index's bucket), and caching it allocates
//! nothing once the rings have grown. Before, each response was a `Vec` in a map keyed by
//! (address, sequence number), with a queue of the same keys beside it; the node counted the
//! map and the bytes alone at 9.2 bytes per session at 10M sessions (`bench pfcp`), 23 MB per
//! node for the 65,536 responses kept by default.

use hashbrown::HashTable;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::net::SocketAddr;
use std::time::Duration;

/// The most bytes of responses kept, whatever the count: the oldest go first beyond it (and
/// the ring's 32-bit offsets stay unambiguous).
const MAX_BYTES: usize = 256 << 20;

/// One cached response.
#[derive(Debug)]
struct Rec {
    /// When it was sent, in nanoseconds of the endpoint's clock.
    at: u64,
    peer: SocketAddr,
    seq: u32,
    /// The digest of the request's bytes ([`Responses::digest`]).
    digest: u64,
    len: u32,
    /// Its first byte's number in the byte ring, modulo 2^32 (the ring holds less).
    off: u32,
    /// Still in the index (false once a newer response to the same request replaced it).
    live: bool,
}

fn nanos(t: Duration) -> u64 {
    t.as_nanos().min(u64::MAX as u128) as u64
}

/// Recent responses by (peer, sequence number). See the module docs.
pub(crate) struct Responses {
    ttl: Duration,
    max: usize,
    hasher: foldhash::fast::RandomState,
    /// Numbers of the live records.
    index: HashTable<u64>,
    recs: VecDeque<Rec>,
    /// The number of `recs[0]`.
    first: u64,
    bytes: VecDeque<u8>,
    /// The number of `bytes[0]`, modulo 2^32.
    first_byte: u32,
}

impl Responses {
    /// A cache of the newest `max` responses sent within `ttl`.
    pub(crate) fn new(ttl: Duration, max: usize) -> Responses {
        Responses {
            ttl,
            max,
            hasher: Default::default(),
            index: HashTable::new(),
            recs: VecDeque::new(),
            first: 0,
            bytes: VecDeque::new(),
            first_byte: 0,
        }
    }

    fn hash(hasher: &foldhash::fast::RandomState, peer: &SocketAddr, seq: u32) -> u64 {
        hasher.hash_one((peer, seq))
    }

    /// The digest of a request's bytes (the whole message, header included), seeded per
    /// process: what tells a retransmission from another request under the same sequence
    /// number.
    pub(crate) fn digest(&self, request: &[u8]) -> u64 {
        self.hasher.hash_one(request)
    }

    /// The number of the live record of (`peer`, `seq`), whose hash is `h`.
    fn find(&self, h: u64, peer: SocketAddr, seq: u32) -> Option<u64> {
        let (recs, first) = (&self.recs, self.first);
        let found = self.index.find(h, |&n| {
            let r = &recs[(n - first) as usize];
            r.peer == peer && r.seq == seq
        });
        found.copied()
    }

    /// The response sent to request `seq` of `peer` whose digest is `digest`, if it is still
    /// cached. A cached response to another request under the same sequence number is no
    /// answer: `None`.
    pub(crate) fn get(&self, peer: SocketAddr, seq: u32, digest: u64) -> Option<Vec<u8>> {
        let h = Self::hash(&self.hasher, &peer, seq);
        let r = &self.recs[(self.find(h, peer, seq)? - self.first) as usize];
        if r.digest != digest {
            return None;
        }
        let start = r.off.wrapping_sub(self.first_byte) as usize;
        Some(
            self.bytes
                .range(start..start + r.len as usize)
                .copied()
                .collect(),
        )
    }

    /// Caches `bytes` as the response to request `seq` of `peer` whose digest is `digest`
    /// (replacing one cached under that sequence number before), then drops what is too old
    /// or too many at `now`.
    pub(crate) fn insert(
        &mut self,
        now: Duration,
        peer: SocketAddr,
        seq: u32,
        digest: u64,
        bytes: &[u8],
    ) {
        let h = Self::hash(&self.hasher, &peer, seq);
        if let Some(n) = self.find(h, peer, seq) {
            self.unindex(h, n);
        }
        let n = self.first + self.recs.len() as u64;
        // The records grow by doubling up to the count kept, then no more.
        let (len, cap) = (self.recs.len(), self.recs.capacity());
        if len == cap && cap <= self.max {
            self.recs.reserve_exact(cap.max(16).min(self.max + 1 - len));
        }
        self.recs.push_back(Rec {
            at: nanos(now),
            peer,
            seq,
            digest,
            len: bytes.len() as u32,
            off: self.first_byte.wrapping_add(self.bytes.len() as u32),
            live: true,
        });
        self.bytes.extend(bytes);
        let (recs, first, hasher) = (&self.recs, self.first, &self.hasher);
        self.index.insert_unique(h, n, |&m| {
            let r = &recs[(m - first) as usize];
            Self::hash(hasher, &r.peer, r.seq)
        });
        self.expire(now);
    }

    /// Takes record `n` (whose hash is `h`) out of the index.
    fn unindex(&mut self, h: u64, n: u64) {
        if let Ok(e) = self.index.find_entry(h, |&m| m == n) {
            e.remove();
        }
        self.recs[(n - self.first) as usize].live = false;
    }

    /// Forgets every response cached for a peer at address `ip` (any port): it associated anew,
    /// and its new process's requests are no retransmissions of the old one's. A walk over the
    /// records: an association's setup is rare. Returns how many were forgotten.
    pub(crate) fn forget(&mut self, ip: std::net::IpAddr) -> usize {
        let mut gone = 0;
        for i in 0..self.recs.len() {
            let r = &self.recs[i];
            if r.live && r.peer.ip() == ip {
                let h = Self::hash(&self.hasher, &r.peer, r.seq);
                self.unindex(h, self.first + i as u64);
                gone += 1;
            }
        }
        gone
    }

    /// Drops the responses older than the time to live at `now`, and the oldest beyond the
    /// count kept (or beyond [`MAX_BYTES`]).
    pub(crate) fn expire(&mut self, now: Duration) {
        while let Some(r) = self.recs.front() {
            if nanos(now).saturating_sub(r.at) <= nanos(self.ttl)
                && self.recs.len() <= self.max
                && self.bytes.len() <= MAX_BYTES
            {
                break;
            }
            if r.live {
                let h = Self::hash(&self.hasher, &r.peer, r.seq);
                self.unindex(h, self.first);
            }
            let len = self.recs.pop_front().map_or(0, |r| r.len as usize);
            self.first += 1;
            self.bytes.drain(..len);
            self.first_byte = self.first_byte.wrapping_add(len as u32);
        }
    }

    /// Responses cached (live ones).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.index.len()
    }

    /// Bytes it holds: the index, the records and the byte ring, as allocated.
    pub(crate) fn memory(&self) -> usize {
        sb_common::hash_table_bytes(self.index.capacity(), 8)
            + self.recs.capacity() * std::mem::size_of::<Rec>()
            + self.bytes.capacity()
    }

    /// The records' bytes, counted from the records: what the byte ring holds.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.recs.iter().map(|r| r.len as usize).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn addr(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 3, 0, i], 8805))
    }

    proptest! {
        /// Against a map of (peer, sequence) -> (digest, bytes) that expires by the same rule:
        /// every response cached is answered byte for byte to the request it answered (same
        /// digest), and nothing else; forgetting a peer forgets its responses only.
        #[test]
        fn answers_what_a_map_answers(
            ops in proptest::collection::vec(
                (0u8..3, 0u32..20, 0usize..300, 0u64..3, 0u64..2, 0u8..40), 1..300),
            max in 0usize..40,
        ) {
            let ttl = Duration::from_millis(50);
            let mut c = Responses::new(ttl, max);
            // The oracle: (peer, seq) -> (id, digest, bytes), and the order of insertion
            // (with replaced entries still counting until they leave, as the ring's records
            // do).
            let mut map: HashMap<(SocketAddr, u32), (u64, u64, Vec<u8>)> = HashMap::new();
            let mut order: VecDeque<(Duration, SocketAddr, u32, u64)> = VecDeque::new();
            let mut now = Duration::ZERO;
            for (id, (p, seq, len, dt, digest, forget)) in ops.into_iter().enumerate() {
                now += Duration::from_millis(dt * 10);
                if forget == 0 {
                    // A peer associates anew: its responses go, whatever its port.
                    let ip = addr(p).ip();
                    let want = map.keys().filter(|(a, _)| a.ip() == ip).count();
                    prop_assert_eq!(c.forget(ip), want);
                    map.retain(|(a, _), _| a.ip() != ip);
                }
                let bytes: Vec<u8> = (0..len).map(|i| (i + id) as u8).collect();
                c.insert(now, addr(p), seq, digest, &bytes);
                map.insert((addr(p), seq), (id as u64, digest, bytes));
                order.push_back((now, addr(p), seq, id as u64));
                while let Some(&(at, a, s, i)) = order.front() {
                    if now.saturating_sub(at) <= ttl && order.len() <= max {
                        break;
                    }
                    order.pop_front();
                    if map.get(&(a, s)).is_some_and(|e| e.0 == i) {
                        map.remove(&(a, s));
                    }
                }
                prop_assert_eq!(c.len(), map.len());
                for p in 0..3 {
                    for s in 0..20 {
                        for d in 0..2 {
                            let want = map
                                .get(&(addr(p), s))
                                .filter(|e| e.1 == d)
                                .map(|e| e.2.clone());
                            prop_assert_eq!(c.get(addr(p), s, d), want);
                        }
                    }
                }
                prop_assert_eq!(c.held(), c.bytes.len());
                prop_assert!(c.held() <= c.memory());
            }
        }
    }

    #[test]
    fn another_request_under_a_cached_sequence_number_is_no_retransmission() {
        let mut c = Responses::new(Duration::from_secs(30), 16);
        let (old, new) = (c.digest(b"establishment A"), c.digest(b"establishment B"));
        assert_ne!(old, new);
        c.insert(Duration::ZERO, addr(1), 7, old, b"response A");
        assert_eq!(c.get(addr(1), 7, old).as_deref(), Some(&b"response A"[..]));
        assert_eq!(c.get(addr(1), 7, new), None);
        // Another port of the same address is another peer; forgetting the address forgets
        // both.
        let other_port = SocketAddr::from(([10, 3, 0, 1], 2152));
        c.insert(Duration::ZERO, other_port, 7, old, b"response C");
        assert_eq!(c.forget(addr(1).ip()), 2);
        assert_eq!(c.get(addr(1), 7, old), None);
        assert_eq!(c.get(other_port, 7, old), None);
    }

    #[test]
    fn nothing_is_kept_with_a_count_of_zero() {
        let mut c = Responses::new(Duration::from_secs(30), 0);
        c.insert(Duration::ZERO, addr(1), 7, 0, b"response");
        assert_eq!(c.get(addr(1), 7, 0), None);
        assert_eq!(c.held(), 0);
    }
}
