//! The table itself: geometry, the lock-free read path and the single-writer write path.
//!
//! # Layout
//! - `meta`: per bucket `mw` words, `[version, tags 0-3, (tags 4-7, pad)]`: 16 bytes for 4-slot
//!   buckets, 32 bytes for 8-slot ones, so a bucket's metadata never straddles a cache line
//!   (arrays are page aligned). A tag is 16 bits of the key's hash, never 0; 0 marks an empty slot.
//! - `keys`: per slot `kw = ceil(key_bytes / 8)` little-endian words, zero padded.
//! - `vals`: per slot `vw = ceil(value_bytes / 8)` words: the value array indexed by slot number.
//!
//! A key's primary bucket is `reduce64(hash.lo, n)`, its tag the top 16 bits of `hash.hi`, and its
//! alternate bucket `alt(b, tag) = (T(tag) - b) mod n` with `T(tag) = reduce64(mix(tag), n)`.
//! `alt` is an involution (`alt(alt(b)) = b`) for any `n`, so a displaced key finds its other
//! bucket from its tag alone, and `n` need not be a power of two (the table is sized to the
//! requested capacity, not rounded up).
//!
//! # The reader/writer protocol (one writer, lock-free readers)
//! Every bucket is its own lock stripe with a version counter in its metadata line (so checking
//! the version costs no extra cache miss). Everything a reader touches is an atomic word, so a
//! reader racing the writer is never a data race; the ordering argument is the seqlock one
//! (H.-J. Boehm, "Can seqlocks get along with programming language memory models?", 2012):
//!
//! Writer, for every change of bucket `b` (`begin`/`end` below):
//! `v = ver[b]; ver[b] = v+1 (Relaxed); fence(Release); data stores (Relaxed); ver[b] = v+2 (Release)`.
//!
//! Reader: `v = ver[b] (Acquire)`, retry while odd; data loads (Relaxed); `fence(Acquire)`;
//! `ver[b] (Relaxed) == v`, else retry.
//!
//! 1. *No torn reads.* If any data load of the reader read a store of a section that began after
//!    `v`, the writer's release fence synchronizes with the reader's acquire fence (fence-fence
//!    synchronization through that relaxed store), so the writer's `ver = v+1` happens before the
//!    reader's re-check, which then cannot read `v` (coherence): the reader retries. If the check
//!    passes, the reader's acquire load of `v` (the `end` store of the last section before) made
//!    every write of the sections up to `v` visible, and it saw none of later ones: the bucket as
//!    read is exactly the bucket at version `v`. Keys, tags and values of a slot are only written
//!    under the version of the slot's bucket, so key and value come from the same committed state.
//! 2. *No missed key during a displacement.* A displacement runs along the BFS path from its
//!    empty end: each step first copies a key (with its value and tag) into its new slot (a section
//!    of the destination bucket) and only then overwrites the old slot (a later section of the
//!    source bucket). So at every point of the writer's program order the key is in at least one
//!    of its two buckets. A reader that misses in both buckets loads `ver[b1]` then `ver[b2]` (both
//!    Acquire), reads both buckets, then after one acquire fence re-checks both. Suppose it saw
//!    `b1` at version `v1` and `b2` at `v2` but these two states never coexisted in the writer's
//!    order. Then either the section that ended `v1`'s state on `b1` precedes in program order the
//!    section that produced `v2` on `b2` -- the reader's acquire load of `v2` then makes the later
//!    `ver[b1]` odd store visible to its re-check of `b1` (it happens before), contradiction -- or
//!    symmetrically with `b1` and `b2` swapped, where the acquire load of `v1` (made first) makes
//!    the store ending `v2`'s state visible to the later load of `ver[b2]`, contradiction. So the
//!    two buckets were read in states that coexisted, and a key present throughout is found.
//! 3. A hit needs only its own bucket validated: a consistent bucket holding key `k` with value
//!    `x` means `k -> x` was committed at that point.
//!
//! `tests/loom.rs` checks a displacement racing a lookup and an update racing a lookup under loom.

use crate::prefetch::prefetch;
use crate::storage::Words;
use crate::sync::{fence, spin, AtomicU64, AtomicUsize, Ordering::*};
use crate::{InsertError, Params, ParamsError};
use sb_common::hash::reduce64;
use sb_common::{hash128, KeyHash, PageInfo};

/// Largest key in words.
pub(crate) const MAX_KEY_WORDS: usize = 8;
/// Largest value in words.
pub(crate) const MAX_VALUE_WORDS: usize = 32;
/// Largest BFS path (in moves) a caller may ask for.
pub(crate) const MAX_PATH: usize = 8;

const LANES: u64 = 0x0001_0001_0001_0001;
const LOW15: u64 = 0x7FFF_7FFF_7FFF_7FFF;

/// High bit of each 16-bit lane of `word` set exactly where the lane equals `tag`.
#[inline(always)]
pub(crate) fn tag_matches(word: u64, tag: u16) -> u64 {
    let x = word ^ (tag as u64).wrapping_mul(LANES);
    !(((x & LOW15).wrapping_add(LOW15)) | x | LOW15)
}

#[inline(always)]
fn tag_of(h: KeyHash) -> u16 {
    let t = (h.hi >> 48) as u16;
    t | (t == 0) as u16
}

#[inline(always)]
fn mix(tag: u16) -> u64 {
    let mut x = (tag as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Packs `key` into zero-padded little-endian words.
#[inline(always)]
pub(crate) fn key_words(key: &[u8], q: &mut [u64; MAX_KEY_WORDS]) {
    for (i, c) in key.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        q[i] = u64::from_le_bytes(b);
    }
}

#[inline(always)]
pub(crate) fn words_to_bytes(w: &[u64], out: &mut [u8]) {
    for (i, c) in out.chunks_mut(8).enumerate() {
        let n = c.len();
        c.copy_from_slice(&w[i].to_le_bytes()[..n]);
    }
}

/// Where a key lives: its two candidate buckets and its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidates {
    /// Primary bucket.
    pub b1: usize,
    /// Alternate bucket (may equal `b1` in rare cases).
    pub b2: usize,
    /// 16-bit tag, never 0.
    pub tag: u16,
}

/// The candidates of a key with hash `h` in a table of `n` buckets.
#[inline(always)]
pub(crate) fn candidates(n: usize, h: KeyHash) -> Candidates {
    let b1 = reduce64(h.lo, n as u64) as usize;
    let tag = tag_of(h);
    Candidates {
        b1,
        b2: alt(n, b1, tag),
        tag,
    }
}

/// The other bucket of a key with tag `tag` in bucket `b` (an involution).
#[inline(always)]
fn alt(n: usize, b: usize, tag: u16) -> usize {
    let t = reduce64(mix(tag), n as u64) as usize;
    if t >= b {
        t - b
    } else {
        t + n - b
    }
}

/// A node of the BFS for a displacement path.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    bucket: usize,
    parent: u32,
    slot: u8,
    depth: u8,
}

/// The read side of a table; every handle ([`crate::CuckooTable`], [`crate::Writer`],
/// [`crate::Reader`]) dereferences to it. All methods here are lock-free and may run on any number
/// of threads while the one writer changes the table.
pub struct Shared {
    params: Params,
    n: usize,
    s: usize,
    mw: usize,
    kw: usize,
    vw: usize,
    meta: Words,
    keys: Words,
    vals: Words,
    len: AtomicUsize,
    moves: AtomicUsize,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("params", &self.params)
            .field("buckets", &self.n)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(params: Params) -> Result<Self, ParamsError> {
        params.validate()?;
        let s = params.slots_per_bucket;
        let n = params.capacity.div_ceil(s).max(1);
        let mw = if s == 4 { 2 } else { 4 };
        let kw = params.key_bytes.div_ceil(8);
        let vw = params.value_bytes.div_ceil(8);
        let slots = n
            .checked_mul(s)
            .ok_or(ParamsError::Capacity(params.capacity))?;
        Ok(Shared {
            params,
            n,
            s,
            mw,
            kw,
            vw,
            meta: Words::zeroed(n * mw),
            keys: Words::zeroed(
                slots
                    .checked_mul(kw)
                    .ok_or(ParamsError::Capacity(params.capacity))?,
            ),
            vals: Words::zeroed(
                slots
                    .checked_mul(vw)
                    .ok_or(ParamsError::Capacity(params.capacity))?,
            ),
            len: AtomicUsize::new(0),
            moves: AtomicUsize::new(0),
        })
    }

    /// The parameters the table was created with (`capacity` as requested).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Key size in bytes.
    pub fn key_bytes(&self) -> usize {
        self.params.key_bytes
    }

    /// Value size in bytes.
    pub fn value_bytes(&self) -> usize {
        self.params.value_bytes
    }

    /// Number of keys (exact for the writer; a recent value for readers).
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// Keys moved by displacements since the table was created (a recent value for readers).
    pub fn displacements(&self) -> usize {
        self.moves.load(Relaxed)
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of slots (`buckets * slots_per_bucket`, at least the requested capacity).
    pub fn capacity(&self) -> usize {
        self.n * self.s
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.n
    }

    /// `len / capacity`.
    pub fn load_factor(&self) -> f64 {
        self.len() as f64 / self.capacity() as f64
    }

    /// Bytes of the bucket, key and value arrays.
    pub fn memory_bytes(&self) -> usize {
        self.meta.bytes() + self.keys.bytes() + self.vals.bytes()
    }

    /// How much of the arrays the kernel backs with 2 MB pages.
    pub fn page_info(&self) -> PageInfo {
        self.meta
            .page_info()
            .merge(self.keys.page_info())
            .merge(self.vals.page_info())
    }

    /// The hash this table uses for `key`: `hash128(key, params.seed)`. Callers that already
    /// hashed the key with the same seed (the GPT lookup) pass it to [`Self::lookup_with_hash`].
    #[inline]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        hash128(key, self.params.seed)
    }

    /// The two candidate buckets and the tag of a key with hash `h`.
    #[inline(always)]
    pub fn candidates(&self, h: KeyHash) -> Candidates {
        candidates(self.n, h)
    }

    #[inline(always)]
    fn alt(&self, b: usize, tag: u16) -> usize {
        alt(self.n, b, tag)
    }

    #[inline(always)]
    fn ver(&self, b: usize) -> &AtomicU64 {
        self.meta.w(b * self.mw)
    }

    #[inline(always)]
    fn tag_word(&self, b: usize, t: usize) -> &AtomicU64 {
        self.meta.w(b * self.mw + 1 + t)
    }

    #[inline(always)]
    pub(crate) fn prefetch_bucket(&self, b: usize) {
        prefetch(self.meta.addr(b * self.mw));
    }

    #[inline(always)]
    pub(crate) fn prefetch_key(&self, slot: usize) {
        prefetch(self.keys.addr(slot * self.kw));
    }

    #[inline(always)]
    pub(crate) fn prefetch_value(&self, slot: usize) {
        prefetch(self.vals.addr(slot * self.vw));
        if self.vw > 8 {
            prefetch(self.vals.addr(slot * self.vw + self.vw - 1));
        }
    }

    #[inline(always)]
    fn key_eq(&self, slot: usize, q: &[u64; MAX_KEY_WORDS]) -> bool {
        let base = slot * self.kw;
        (0..self.kw).all(|i| self.keys.w(base + i).load(Relaxed) == q[i])
    }

    /// The first slot of `b` whose tag is `tag` (unvalidated), for a key prefetch.
    #[inline(always)]
    pub(crate) fn first_tag_slot(&self, b: usize, tag: u16) -> Option<usize> {
        for t in 0..self.s / 4 {
            let m = tag_matches(self.tag_word(b, t).load(Relaxed), tag);
            if m != 0 {
                return Some(b * self.s + t * 4 + (m.trailing_zeros() >> 4) as usize);
            }
        }
        None
    }

    /// The slot of `q` in bucket `b`, if there (unvalidated: the caller checks the version).
    #[inline(always)]
    pub(crate) fn find_in(&self, b: usize, tag: u16, q: &[u64; MAX_KEY_WORDS]) -> Option<usize> {
        for t in 0..self.s / 4 {
            let mut m = tag_matches(self.tag_word(b, t).load(Relaxed), tag);
            while m != 0 {
                let slot = b * self.s + t * 4 + (m.trailing_zeros() >> 4) as usize;
                if self.key_eq(slot, q) {
                    return Some(slot);
                }
                m &= m - 1;
            }
        }
        None
    }

    #[inline(always)]
    pub(crate) fn read_value(&self, slot: usize, buf: &mut [u64; MAX_VALUE_WORDS]) {
        let base = slot * self.vw;
        for (i, w) in buf.iter_mut().enumerate().take(self.vw) {
            *w = self.vals.w(base + i).load(Relaxed);
        }
    }

    #[inline(always)]
    pub(crate) fn version(&self, b: usize) -> u64 {
        self.ver(b).load(Acquire)
    }

    #[inline(always)]
    pub(crate) fn version_relaxed(&self, b: usize) -> u64 {
        self.ver(b).load(Relaxed)
    }

    /// The lock-free lookup: copies the value into `out` (`value_bytes` long) on a hit and leaves
    /// `out` untouched on a miss.
    #[inline]
    pub(crate) fn lookup_q(&self, q: &[u64; MAX_KEY_WORDS], h: KeyHash, out: &mut [u8]) -> bool {
        let c = self.candidates(h);
        self.prefetch_bucket(c.b2);
        let mut buf = [0u64; MAX_VALUE_WORDS];
        loop {
            let v1 = self.ver(c.b1).load(Acquire);
            if v1 & 1 == 1 {
                spin();
                continue;
            }
            if let Some(slot) = self.find_in(c.b1, c.tag, q) {
                self.read_value(slot, &mut buf);
                fence(Acquire);
                if self.ver(c.b1).load(Relaxed) == v1 {
                    words_to_bytes(&buf, out);
                    return true;
                }
                continue;
            }
            let v2 = self.ver(c.b2).load(Acquire);
            if v2 & 1 == 1 {
                spin();
                continue;
            }
            let hit = self.find_in(c.b2, c.tag, q);
            if let Some(slot) = hit {
                self.read_value(slot, &mut buf);
            }
            fence(Acquire);
            if self.ver(c.b1).load(Relaxed) == v1 && self.ver(c.b2).load(Relaxed) == v2 {
                if hit.is_some() {
                    words_to_bytes(&buf, out);
                }
                return hit.is_some();
            }
        }
    }

    /// Copies the value of `key` into `out` (`value_bytes` long) and returns true, or returns false
    /// (leaving `out` untouched) when the key is absent or has the wrong length.
    ///
    /// # Panics
    /// If `out.len() != value_bytes`.
    #[inline]
    pub fn lookup_into(&self, key: &[u8], out: &mut [u8]) -> bool {
        self.lookup_with_hash(key, self.hash(key), out)
    }

    /// [`Self::lookup_into`] with the key's hash already computed (`hash128(key, params.seed)`).
    ///
    /// # Panics
    /// If `out.len() != value_bytes`.
    #[inline]
    pub fn lookup_with_hash(&self, key: &[u8], h: KeyHash, out: &mut [u8]) -> bool {
        assert_eq!(out.len(), self.params.value_bytes, "value buffer size");
        if key.len() != self.params.key_bytes {
            return false;
        }
        let mut q = [0u64; MAX_KEY_WORDS];
        key_words(key, &mut q);
        self.lookup_q(&q, h, out)
    }

    /// The value of `key`, copied out.
    pub fn lookup(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut v = vec![0u8; self.params.value_bytes];
        self.lookup_into(key, &mut v).then_some(v)
    }

    /// Whether `key` is present.
    pub fn contains(&self, key: &[u8]) -> bool {
        let mut v = [0u8; 256];
        self.lookup_into(key, &mut v[..self.params.value_bytes])
    }

    /// Reads bucket `b` consistently, calling `f(key, value)` for each key after validation.
    fn bucket_snapshot(&self, b: usize, buf: &mut Vec<u8>, f: &mut dyn FnMut(&[u8], &[u8])) {
        let (kb, vb) = (self.params.key_bytes, self.params.value_bytes);
        let mut kwb = [0u64; MAX_KEY_WORDS];
        let mut vwb = [0u64; MAX_VALUE_WORDS];
        loop {
            let v = self.ver(b).load(Acquire);
            if v & 1 == 1 {
                spin();
                continue;
            }
            buf.clear();
            for j in 0..self.s {
                let w = self.tag_word(b, j / 4).load(Relaxed);
                if (w >> ((j % 4) * 16)) & 0xFFFF == 0 {
                    continue;
                }
                let slot = b * self.s + j;
                for (i, x) in kwb.iter_mut().enumerate().take(self.kw) {
                    *x = self.keys.w(slot * self.kw + i).load(Relaxed);
                }
                self.read_value(slot, &mut vwb);
                let at = buf.len();
                buf.resize(at + kb + vb, 0);
                words_to_bytes(&kwb, &mut buf[at..at + kb]);
                words_to_bytes(&vwb, &mut buf[at + kb..at + kb + vb]);
            }
            fence(Acquire);
            if self.ver(b).load(Relaxed) == v {
                break;
            }
        }
        for e in buf.chunks_exact(kb + vb) {
            f(&e[..kb], &e[kb..]);
        }
    }

    /// Calls `f(key, value)` for every key. Each bucket is read consistently; while the writer
    /// runs concurrently, a key moved during the walk may be seen twice or not at all (a walk by
    /// the writer itself, or with no writer, sees every key exactly once).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) {
        let mut buf = Vec::new();
        for b in 0..self.n {
            self.bucket_snapshot(b, &mut buf, &mut f);
        }
    }

    /// All `(key, value)` pairs, with the guarantees of [`Self::for_each`].
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            t: self,
            b: 0,
            buf: Vec::new(),
            pos: 0,
        }
    }

    // ---------------------------------------------------------------------------------------
    // The write path. Only the one writer calls these (through `&mut` handles).

    #[inline(always)]
    fn begin(&self, b: usize) -> u64 {
        let ver = self.ver(b);
        let v = ver.load(Relaxed);
        ver.store(v + 1, Relaxed);
        fence(Release);
        v
    }

    #[inline(always)]
    fn end(&self, b: usize, v: u64) {
        self.ver(b).store(v + 2, Release);
    }

    fn tag_at(&self, b: usize, j: usize) -> u16 {
        (self.tag_word(b, j / 4).load(Relaxed) >> ((j % 4) * 16)) as u16
    }

    fn set_tag(&self, b: usize, j: usize, tag: u16) {
        let w = self.tag_word(b, j / 4);
        let sh = (j % 4) * 16;
        let old = w.load(Relaxed);
        w.store((old & !(0xFFFF << sh)) | ((tag as u64) << sh), Relaxed);
    }

    fn empty_slot(&self, b: usize) -> Option<usize> {
        for t in 0..self.s / 4 {
            let m = tag_matches(self.tag_word(b, t).load(Relaxed), 0);
            if m != 0 {
                return Some(t * 4 + (m.trailing_zeros() >> 4) as usize);
            }
        }
        None
    }

    fn write_value(&self, slot: usize, value: &[u8]) {
        let base = slot * self.vw;
        for (i, c) in value.chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            self.vals.w(base + i).store(u64::from_le_bytes(b), Relaxed);
        }
    }

    fn check_sizes(&self, key: &[u8], value: &[u8]) -> Result<(), InsertError> {
        if key.len() != self.params.key_bytes {
            return Err(InsertError::KeyLength {
                expected: self.params.key_bytes,
                got: key.len(),
            });
        }
        if value.len() != self.params.value_bytes {
            return Err(InsertError::ValueLength {
                expected: self.params.value_bytes,
                got: value.len(),
            });
        }
        Ok(())
    }

    /// Writer: the slot of a present key.
    fn writer_find(&self, key: &[u8], q: &mut [u64; MAX_KEY_WORDS]) -> (Candidates, Option<usize>) {
        key_words(key, q);
        let c = self.candidates(self.hash(key));
        let s = self
            .find_in(c.b1, c.tag, q)
            .or_else(|| self.find_in(c.b2, c.tag, q));
        (c, s)
    }

    /// Writer: inserts `key -> value` or overwrites the value of a present key. Ok(true) when the
    /// key is new.
    pub(crate) fn insert(
        &self,
        key: &[u8],
        value: &[u8],
        nodes: &mut Vec<Node>,
    ) -> Result<bool, InsertError> {
        self.check_sizes(key, value)?;
        let mut q = [0u64; MAX_KEY_WORDS];
        let (c, found) = self.writer_find(key, &mut q);
        if let Some(slot) = found {
            let b = slot / self.s;
            let v = self.begin(b);
            self.write_value(slot, value);
            self.end(b, v);
            return Ok(false);
        }
        let target = if let Some(j) = self.empty_slot(c.b1) {
            c.b1 * self.s + j
        } else if let Some(j) = self.empty_slot(c.b2) {
            c.b2 * self.s + j
        } else {
            match self.make_room(c.b1, c.b2, nodes) {
                Some(slot) => slot,
                None => {
                    return Err(InsertError::Full {
                        len: self.len(),
                        capacity: self.capacity(),
                    })
                }
            }
        };
        let b = target / self.s;
        let v = self.begin(b);
        for (i, &w) in q.iter().enumerate().take(self.kw) {
            self.keys.w(target * self.kw + i).store(w, Relaxed);
        }
        self.write_value(target, value);
        self.set_tag(b, target % self.s, c.tag);
        self.end(b, v);
        self.len.store(self.len.load(Relaxed) + 1, Relaxed);
        Ok(true)
    }

    /// Writer: overwrites the value of a present key in place. Ok(false) when absent.
    pub(crate) fn update(&self, key: &[u8], value: &[u8]) -> Result<bool, InsertError> {
        self.check_sizes(key, value)?;
        let mut q = [0u64; MAX_KEY_WORDS];
        match self.writer_find(key, &mut q).1 {
            Some(slot) => {
                let b = slot / self.s;
                let v = self.begin(b);
                self.write_value(slot, value);
                self.end(b, v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Writer: removes `key`; false when absent (or of the wrong length).
    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        if key.len() != self.params.key_bytes {
            return false;
        }
        let mut q = [0u64; MAX_KEY_WORDS];
        match self.writer_find(key, &mut q).1 {
            Some(slot) => {
                let b = slot / self.s;
                let v = self.begin(b);
                self.set_tag(b, slot % self.s, 0);
                self.end(b, v);
                self.len.store(self.len.load(Relaxed) - 1, Relaxed);
                true
            }
            None => false,
        }
    }

    /// Writer: moves the key in slot `from` (with value and tag) into slot `to`, leaving `from`
    /// as it was (the caller overwrites it in a later section of its own bucket).
    fn copy_slot(&self, from: usize, to: usize) {
        let b = to / self.s;
        let tag = self.tag_at(from / self.s, from % self.s);
        let v = self.begin(b);
        for i in 0..self.kw {
            let x = self.keys.w(from * self.kw + i).load(Relaxed);
            self.keys.w(to * self.kw + i).store(x, Relaxed);
        }
        for i in 0..self.vw {
            let x = self.vals.w(from * self.vw + i).load(Relaxed);
            self.vals.w(to * self.vw + i).store(x, Relaxed);
        }
        self.set_tag(b, to % self.s, tag);
        self.end(b, v);
    }

    /// Writer: BFS from the two full buckets for the shortest path to an empty slot, then moves
    /// keys along it from its empty end. Returns the slot (in `b1` or `b2`) now free to overwrite.
    fn make_room(&self, b1: usize, b2: usize, nodes: &mut Vec<Node>) -> Option<usize> {
        let max_nodes = self.params.max_bfs_buckets.max(2);
        let max_depth = self.params.max_path;
        nodes.clear();
        nodes.push(Node {
            bucket: b1,
            parent: u32::MAX,
            slot: 0,
            depth: 0,
        });
        if b2 != b1 {
            nodes.push(Node {
                bucket: b2,
                parent: u32::MAX,
                slot: 0,
                depth: 0,
            });
        }
        let mut head = 0;
        while head < nodes.len() {
            let n = nodes[head];
            if (n.depth as usize) < max_depth {
                for j in 0..self.s {
                    if nodes.len() >= max_nodes {
                        return None;
                    }
                    let alt = self.alt(n.bucket, self.tag_at(n.bucket, j));
                    if alt == n.bucket {
                        continue;
                    }
                    nodes.push(Node {
                        bucket: alt,
                        parent: head as u32,
                        slot: j as u8,
                        depth: n.depth + 1,
                    });
                    if let Some(e) = self.empty_slot(alt) {
                        if let Some(root) = self.run_path(nodes, nodes.len() - 1, e) {
                            return Some(root);
                        }
                    }
                }
            }
            head += 1;
        }
        None
    }

    /// Executes the path ending at node `last`, whose bucket has the empty slot `e`.
    fn run_path(&self, nodes: &[Node], last: usize, e: usize) -> Option<usize> {
        // path[0] is the empty slot, path[i + 1] the slot whose key moves into path[i].
        let mut path = [0usize; MAX_PATH + 2];
        let mut len = 1;
        path[0] = nodes[last].bucket * self.s + e;
        let mut cur = last;
        while nodes[cur].parent != u32::MAX {
            let p = nodes[cur].parent as usize;
            path[len] = nodes[p].bucket * self.s + nodes[cur].slot as usize;
            len += 1;
            cur = p;
        }
        let path = &path[..len];
        // A path through the same slot twice would move one key twice: refuse it (the BFS
        // goes on looking).
        for i in 0..len {
            if path[i + 1..].contains(&path[i]) {
                return None;
            }
        }
        for i in 1..len {
            self.copy_slot(path[i], path[i - 1]);
        }
        self.moves
            .store(self.moves.load(Relaxed) + len - 1, Relaxed);
        Some(path[len - 1])
    }
}

/// Iterator over `(key, value)` pairs, see [`Shared::iter`].
pub struct Iter<'a> {
    t: &'a Shared,
    b: usize,
    buf: Vec<u8>,
    pos: usize,
}

impl Iterator for Iter<'_> {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        let (kb, vb) = (self.t.params.key_bytes, self.t.params.value_bytes);
        while self.pos >= self.buf.len() {
            if self.b >= self.t.n {
                return None;
            }
            let mut tmp = std::mem::take(&mut self.buf);
            self.t.bucket_snapshot(self.b, &mut tmp, &mut |_, _| {});
            self.buf = tmp;
            self.b += 1;
            self.pos = 0;
        }
        let e = &self.buf[self.pos..self.pos + kb + vb];
        self.pos += kb + vb;
        Some((e[..kb].to_vec(), e[kb..].to_vec()))
    }
}
