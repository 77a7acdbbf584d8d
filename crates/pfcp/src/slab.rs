//! The endpoint's sessions by UP SEID, in a slab.
//!
//! The endpoint chooses its sessions' SEIDs, so a SEID can name where its session is kept: its
//! low 32 bits are a slot of an array and the 16 above them the slot's generation, which moves
//! on each time the slot is freed (a SEID of a deleted session then names nothing, until the
//! slot has been reused 65,535 times). The top 16 bits are the endpoint's incarnation and its
//! allocator id ([`crate::upf::Config::incarnation`], [`crate::upf::Config::allocator_id`]):
//! a SEID of a session lost in a restart names nothing in the next 255 incarnations. A slot is one `u64`: generation, length and where
//! the kept bytes are. Kept sessions of up to [`POOLED`] bytes sit in pools, one per length,
//! of 64 KiB chunks holding records back to back (a freed record is reused by the next session
//! of its length); longer ones get an allocation of their own.
//!
//! A hash map from SEID to a boxed slice took 25 bytes per entry at hashbrown's load (41.9
//! bytes per session at 10M sessions on 4 nodes) and glibc's chunk for each kept session, 32
//! bytes for the usual 19-25: here a session costs its slot (8 bytes) and its kept bytes.

use std::collections::VecDeque;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Kept sessions of at most this many bytes go to the pools.
pub(crate) const POOLED: usize = 255;
/// Bytes of a pool's chunk.
const CHUNK: usize = 64 * 1024;
/// A slot's length field for a session kept in an allocation of its own.
const BIG: u64 = 0xffff;
/// A free slot's and a reserved slot's `at` field (their length is 0).
const FREE: u64 = 0;
const RESERVED: u64 = 1;

/// Records of one length, in chunks.
#[derive(Debug, Default)]
struct Pool {
    chunks: Vec<Box<[u8]>>,
    /// Records handed out so far (freed ones included).
    next: u32,
    free: Vec<u32>,
}

/// The sessions an endpoint holds, by UP SEID.
#[derive(Debug)]
pub(crate) struct Slab {
    /// The allocator id, in the SEIDs' top 16 bits.
    prefix: u64,
    /// Per slot: generation (16 bits), length (16: 0 for a free or reserved slot, [`BIG`] for
    /// an allocation of its own), then the record's index in its pool ([`FREE`] or
    /// [`RESERVED`] when the length is 0).
    slots: Vec<u64>,
    /// Free slots, the longest free first (a freed slot waits for every other before reuse).
    free: VecDeque<u32>,
    /// Pool `l - 1` holds the records of length `l`.
    pools: Vec<Pool>,
    big: HashMap<u32, Box<[u8]>>,
    /// The generation of a slot new to this slab (1; after a restore, one of the
    /// incarnation's: [`Slab::restore`]).
    first_gen: u64,
    /// Kept sessions and their bytes.
    len: usize,
    held: usize,
}

fn slot(gen: u64, len: u64, at: u64) -> u64 {
    gen << 48 | len << 32 | at
}

fn parts(s: u64) -> (u64, u64, u64) {
    (s >> 48, (s >> 32) & 0xffff, s & 0xffff_ffff)
}

fn per_chunk(len: usize) -> usize {
    (CHUNK / len).max(1)
}

/// Where record `at` of the pool of length `len` is: its chunk and its byte range there.
fn locate(len: usize, at: usize) -> (usize, std::ops::Range<usize>) {
    let per = per_chunk(len);
    let r = at % per;
    (at / per, r * len..(r + 1) * len)
}

impl Slab {
    /// An empty slab whose SEIDs' top 16 bits are `prefix` (the endpoint's incarnation and
    /// allocator id), with room for `capacity` slots before its array grows.
    pub(crate) fn new(prefix: u16, capacity: usize) -> Slab {
        Slab {
            prefix: u64::from(prefix),
            slots: Vec::with_capacity(capacity),
            free: VecDeque::new(),
            pools: Vec::new(),
            big: HashMap::default(),
            first_gen: 1,
            len: 0,
            held: 0,
        }
    }

    /// Kept sessions.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the kept sessions.
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Bytes of the slot array and the free list (the array's reserved, untouched end is not
    /// counted).
    pub(crate) fn slot_bytes(&self) -> usize {
        self.slots.len() * 8 + self.free.capacity() * 4
    }

    /// Bytes of the pools' chunks and of the allocations of sessions kept on their own (as
    /// glibc's malloc sizes them: [`crate::malloc_chunk`]).
    pub(crate) fn record_bytes(&self) -> usize {
        let pools: usize = self.pools.iter().map(|p| p.chunks.len() * CHUNK).sum();
        let big: usize = self
            .big
            .values()
            .map(|b| crate::malloc_chunk(b.len()))
            .sum();
        pools + big
    }

    /// The slot `seid` names, if it is one of ours (whatever its state).
    fn index(&self, seid: u64) -> Option<usize> {
        let i = (seid & 0xffff_ffff) as usize;
        let gen = (seid >> 32) & 0xffff;
        (seid >> 48 == self.prefix && gen != 0 && i < self.slots.len())
            .then_some(i)
            .filter(|&i| parts(self.slots[i]).0 == gen)
    }

    /// The slot `seid` names (whether or not it is one of ours).
    pub(crate) fn slot_of(seid: u64) -> u32 {
        seid as u32
    }

    /// The SEID of slot `i` when it is reserved or kept.
    pub(crate) fn seid_at(&self, i: u32) -> Option<u64> {
        let (gen, len, at) = parts(*self.slots.get(i as usize)?);
        (len != 0 || at == RESERVED).then_some(self.prefix << 48 | gen << 32 | u64::from(i))
    }

    /// A new SEID, its slot reserved (not kept: [`Slab::get`] does not find it) until
    /// [`Slab::keep`] or [`Slab::unreserve`].
    pub(crate) fn reserve(&mut self) -> u64 {
        let i = match self.free.pop_front() {
            Some(i) => i as usize,
            None => {
                assert!(
                    self.slots.len() < u32::MAX as usize,
                    "at most 2^32 - 1 slots"
                );
                self.slots.push(slot(self.first_gen, 0, FREE));
                self.slots.len() - 1
            }
        };
        let gen = parts(self.slots[i]).0;
        debug_assert_eq!(self.slots[i], slot(gen, 0, FREE));
        self.slots[i] = slot(gen, 0, RESERVED);
        self.prefix << 48 | gen << 32 | i as u64
    }

    /// Frees the reserved slot of `seid`; nothing when it is not reserved.
    pub(crate) fn unreserve(&mut self, seid: u64) {
        if let Some(i) = self.index(seid) {
            if parts(self.slots[i]).1 == 0 && parts(self.slots[i]).2 == RESERVED {
                self.free_slot(i);
            }
        }
    }

    fn free_slot(&mut self, i: usize) {
        let gen = match parts(self.slots[i]).0 {
            0xffff => 1,
            g => g + 1,
        };
        self.slots[i] = slot(gen, 0, FREE);
        self.free.push_back(i as u32);
    }

    /// Whether `seid` names a kept session.
    pub(crate) fn contains(&self, seid: u64) -> bool {
        self.get(seid).is_some()
    }

    /// The kept bytes of session `seid`.
    pub(crate) fn get(&self, seid: u64) -> Option<&[u8]> {
        let i = self.index(seid)?;
        self.bytes_of(i)
    }

    fn bytes_of(&self, i: usize) -> Option<&[u8]> {
        let (_, len, at) = parts(self.slots[i]);
        match len {
            0 => None,
            BIG => Some(&self.big[&(i as u32)]),
            len => {
                let (c, range) = locate(len as usize, at as usize);
                Some(&self.pools[len as usize - 1].chunks[c][range])
            }
        }
    }

    /// Keeps `bytes` (not empty) as session `seid`, whose slot is reserved or kept (what it
    /// kept is replaced). Panics when `seid` names neither: the endpoint keeps only SEIDs it
    /// reserved.
    pub(crate) fn keep(&mut self, seid: u64, bytes: &[u8]) {
        assert!(!bytes.is_empty(), "a kept session has bytes");
        let i = self.index(seid).expect("a reserved or kept SEID");
        let (gen, len, at) = parts(self.slots[i]);
        assert!(len != 0 || at == RESERVED, "a reserved or kept SEID");
        if len as usize == bytes.len() && bytes.len() <= POOLED {
            // The same length: in place.
            let (c, range) = locate(bytes.len(), at as usize);
            self.pools[bytes.len() - 1].chunks[c][range].copy_from_slice(bytes);
            return;
        }
        if len != 0 {
            self.release(i);
        }
        self.slots[i] = if bytes.len() <= POOLED {
            slot(gen, bytes.len() as u64, u64::from(self.put(bytes)))
        } else {
            self.big.insert(i as u32, bytes.into());
            slot(gen, BIG, 0)
        };
        self.len += 1;
        self.held += bytes.len();
    }

    /// Frees what slot `i` keeps (it keeps something), leaving the slot as it is.
    fn release(&mut self, i: usize) {
        let (_, len, at) = parts(self.slots[i]);
        let n = if len == BIG {
            self.big
                .remove(&(i as u32))
                .expect("a big slot's bytes")
                .len()
        } else {
            self.pools[len as usize - 1].free.push(at as u32);
            len as usize
        };
        self.len -= 1;
        self.held -= n;
    }

    /// A record of `bytes.len()` bytes holding `bytes`: its index in its pool.
    fn put(&mut self, bytes: &[u8]) -> u32 {
        let l = bytes.len();
        if self.pools.len() < l {
            self.pools.resize_with(l, Pool::default);
        }
        let per = per_chunk(l);
        let p = &mut self.pools[l - 1];
        let r = match p.free.pop() {
            Some(r) => r,
            None => {
                let r = p.next;
                if r as usize / per == p.chunks.len() {
                    p.chunks.push(vec![0u8; per * l].into_boxed_slice());
                }
                p.next += 1;
                r
            }
        };
        let (c, range) = locate(l, r as usize);
        p.chunks[c][range].copy_from_slice(bytes);
        r
    }

    /// Removes session `seid`; returns whether it was kept. Its SEID names nothing after.
    pub(crate) fn remove(&mut self, seid: u64) -> bool {
        let Some(i) = self.index(seid).filter(|&i| parts(self.slots[i]).1 != 0) else {
            return false;
        };
        self.release(i);
        self.free_slot(i);
        true
    }

    /// The SEIDs' top 16 bits (incarnation and allocator id).
    pub(crate) fn prefix(&self) -> u16 {
        self.prefix as u16
    }

    /// Whether `seid` could be one a [`Slab`] gives out: a generation (bits 32 to 47) not 0.
    pub(crate) fn well_formed(seid: u64) -> bool {
        (seid >> 32) & 0xffff != 0
    }

    /// Starts the slots new to this slab (those [`Slab::restore`] finds free, and those added
    /// later) at generation `incarnation << 8 | 1` instead of 1. After a restore the slab
    /// gives SEIDs of the restored ones' prefix (an earlier incarnation's), and which
    /// generations the free slots had is not known: starting them in a region of the
    /// current incarnation's, a SEID given before the restart is not given again unless its
    /// slot was reused 256 times (the TEIDs' counter starts at the incarnation's too).
    pub(crate) fn start_generations(&mut self, incarnation: u8) {
        self.first_gen = u64::from(incarnation) << 8 | 1;
    }

    /// Keeps `bytes` (not empty) as session `seid` of this slab's prefix, which a slab before
    /// gave out (a restart: the session is restored with its SEID). The slots below its slot
    /// that are not in use become free. Panics where `seid` is not [`Slab::well_formed`], not
    /// of this prefix, or its slot is in use: the caller checks.
    pub(crate) fn restore(&mut self, seid: u64, bytes: &[u8]) {
        assert!(
            Slab::well_formed(seid) && seid >> 48 == self.prefix,
            "a SEID of this slab"
        );
        let i = Slab::slot_of(seid) as usize;
        let gen = (seid >> 32) & 0xffff;
        if i >= self.slots.len() {
            for j in self.slots.len()..i {
                self.slots.push(slot(self.first_gen, 0, FREE));
                self.free.push_back(j as u32);
            }
            self.slots.push(slot(gen, 0, RESERVED));
        } else {
            let (_, len, at) = parts(self.slots[i]);
            assert!(len == 0 && at == FREE, "a free slot");
            self.free.retain(|&f| f as usize != i);
            self.slots[i] = slot(gen, 0, RESERVED);
        }
        self.keep(seid, bytes);
    }

    /// Every kept session (SEID, bytes), by slot.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        (0..self.slots.len()).filter_map(move |i| self.at(i))
    }

    /// The slots so far (a walk over [`Slab::at`] goes up to here).
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// The session kept in slot `i` (SEID, bytes), if any.
    pub(crate) fn at(&self, i: usize) -> Option<(u64, &[u8])> {
        if i >= self.slots.len() {
            return None;
        }
        let b = self.bytes_of(i)?;
        let gen = parts(self.slots[i]).0;
        Some((self.prefix << 48 | gen << 32 | i as u64, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Restored sessions keep their SEIDs; the slots around them start at the incarnation's
    /// generation, so none of the SEIDs given before is given again (a slot reused fewer
    /// than 256 times).
    #[test]
    fn restore_keeps_seids_and_new_slots_start_at_the_incarnations_generation() {
        let prefix = 1 << 8 | 3;
        let mut old = Slab::new(prefix, 4);
        let seids: Vec<u64> = (0..6).map(|_| old.reserve()).collect();
        for (i, &s) in seids.iter().enumerate() {
            old.keep(s, &[i as u8 + 1; 3]);
        }
        // Slots 1 and 4 freed once: their SEIDs of generation 1 and 2 were given.
        for &s in &[seids[1], seids[4]] {
            old.remove(s);
        }
        let again = [old.reserve(), old.reserve()];
        for s in again {
            old.unreserve(s);
        }
        let mut new = Slab::new(prefix, 4);
        new.start_generations(2);
        for &s in &[seids[5], seids[0], seids[2], seids[3]] {
            new.restore(s, old.get(s).unwrap());
        }
        for &s in &[seids[0], seids[2], seids[3], seids[5]] {
            assert_eq!(new.get(s), old.get(s));
        }
        assert_eq!(new.len(), 4);
        let given: Vec<u64> = seids.iter().chain(&again).copied().collect();
        for _ in 0..3 {
            let s = new.reserve();
            assert!(!given.contains(&s), "{s:#x} given again");
            assert_eq!(s >> 48, u64::from(prefix));
            assert_eq!((s >> 32) & 0xffff, 2 << 8 | 1);
        }
        assert!(new.remove(seids[3]));
        assert!(new.get(seids[3]).is_none());
    }
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        Reserve,
        /// Keep (the reserved or kept SEID of this index among those handed out) with bytes
        /// of this length and fill.
        Keep(usize, usize, u8),
        Unreserve(usize),
        Remove(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Reserve),
            4 => (any::<usize>(), prop_oneof![1usize..8, 250usize..260], any::<u8>())
                .prop_map(|(i, l, f)| Op::Keep(i, l, f)),
            1 => any::<usize>().prop_map(Op::Unreserve),
            2 => any::<usize>().prop_map(Op::Remove),
        ]
    }

    proptest! {
        /// The slab agrees with a `HashMap` oracle of kept sessions and a set of reserved
        /// SEIDs: lookups of every SEID ever handed out (a removed one names nothing, even
        /// once its slot is reused), the counts, the bytes held and the iteration. Lengths
        /// around [`POOLED`] exercise the pools and the allocations of their own.
        #[test]
        fn agrees_with_a_hashmap(ops in proptest::collection::vec(op(), 1..300), prefix in proptest::sample::select(vec![0u16, 1, 3, 0x0102, 0xff04])) {
            let mut s = Slab::new(prefix, 2);
            let mut kept: HashMap<u64, Vec<u8>> = HashMap::new();
            let mut reserved: Vec<u64> = Vec::new();
            let mut seen: Vec<u64> = Vec::new();
            for op in ops {
                match op {
                    Op::Reserve => {
                        let seid = s.reserve();
                        prop_assert!(Slab::well_formed(seid));
                        prop_assert_eq!(seid >> 48, u64::from(prefix));
                        prop_assert!(!seen.contains(&seid), "a SEID is handed out once");
                        seen.push(seid);
                        reserved.push(seid);
                    }
                    Op::Keep(i, l, f) => {
                        let live: Vec<u64> = reserved.iter().chain(kept.keys()).copied().collect();
                        if live.is_empty() { continue; }
                        let seid = live[i % live.len()];
                        let b = vec![f; l];
                        s.keep(seid, &b);
                        reserved.retain(|&x| x != seid);
                        kept.insert(seid, b);
                    }
                    Op::Unreserve(i) => {
                        if seen.is_empty() { continue; }
                        let seid = seen[i % seen.len()];
                        s.unreserve(seid);
                        reserved.retain(|&x| x != seid);
                    }
                    Op::Remove(i) => {
                        if seen.is_empty() { continue; }
                        let seid = seen[i % seen.len()];
                        prop_assert_eq!(s.remove(seid), kept.remove(&seid).is_some());
                    }
                }
                prop_assert_eq!(s.len(), kept.len());
                prop_assert_eq!(s.held(), kept.values().map(Vec::len).sum::<usize>());
                for &seid in &seen {
                    prop_assert_eq!(s.get(seid), kept.get(&seid).map(Vec::as_slice));
                    prop_assert_eq!(s.contains(seid), kept.contains_key(&seid));
                }
                let mut all: Vec<(u64, Vec<u8>)> = s.iter().map(|(k, v)| (k, v.to_vec())).collect();
                all.sort();
                let mut want: Vec<(u64, Vec<u8>)> = kept.clone().into_iter().collect();
                want.sort();
                prop_assert_eq!(all, want);
                prop_assert!(s.record_bytes() >= s.held());
            }
        }
    }

    #[test]
    fn seids_of_others_and_of_freed_slots_name_nothing() {
        let mut s = Slab::new(3, 0);
        let a = s.reserve();
        s.keep(a, &[1, 2, 3]);
        assert_eq!(s.get(a), Some(&[1u8, 2, 3][..]));
        // Another allocator's prefix, a generation 0, a slot out of range.
        assert_eq!(s.get(a ^ 1 << 48), None);
        assert_eq!(s.get(a & !(0xffff << 32)), None);
        assert_eq!(s.get(a + 1), None);
        assert!(s.remove(a));
        let b = s.reserve();
        assert_eq!(b & 0xffff_ffff, a & 0xffff_ffff, "the slot is reused");
        assert_ne!(a, b);
        s.keep(b, &[4]);
        assert_eq!(s.get(a), None);
        assert!(!s.remove(a));
        assert_eq!(s.get(b), Some(&[4u8][..]));
    }

    #[test]
    fn a_slot_reused_65535_times_skips_generation_0() {
        let mut s = Slab::new(1, 0);
        let first = s.reserve();
        s.unreserve(first);
        let mut last = first;
        for _ in 0..70_000 {
            last = s.reserve();
            assert!(Slab::well_formed(last));
            assert_ne!((last >> 32) & 0xffff, 0);
            s.unreserve(last);
        }
        assert_eq!(last & 0xffff_ffff, 0);
    }

    #[test]
    fn a_slot_gives_the_seid_of_its_reserved_or_kept_session() {
        let mut s = Slab::new(2, 0);
        let (a, b) = (s.reserve(), s.reserve());
        s.keep(b, &[1]);
        assert_eq!(s.seid_at(Slab::slot_of(a)), Some(a));
        assert_eq!(s.seid_at(Slab::slot_of(b)), Some(b));
        s.unreserve(a);
        s.remove(b);
        assert_eq!(s.seid_at(Slab::slot_of(a)), None);
        assert_eq!(s.seid_at(Slab::slot_of(b)), None);
        assert_eq!(s.seid_at(7), None);
    }

    #[test]
    fn a_reserved_seid_is_not_kept_and_a_kept_one_is_not_unreserved() {
        let mut s = Slab::new(0, 0);
        let a = s.reserve();
        assert!(!s.contains(a));
        assert_eq!(s.len(), 0);
        s.keep(a, &[9; 300]);
        s.unreserve(a);
        assert_eq!(s.get(a), Some(&[9u8; 300][..]));
        assert!(s.record_bytes() >= 300);
    }
}
