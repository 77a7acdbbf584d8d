//! The table itself: geometry, the lock-free read path and the single-writer write path.
//!
//! # Layout
//! - `meta`: per bucket `mw` words, `[version, tags 0-3, (tags 4-7, pad)]`: 16 bytes for 4-slot
//!   buckets, 32 bytes for 8-slot ones, so a bucket's metadata never straddles a cache line
//!   (arrays are page aligned). A slot's 16-bit lane holds the key's 15-bit tag (never 0) plus
//!   `ALT_FLAG` when the key sits in its alternate bucket; 0 marks an empty slot. The version
//!   word holds a 48-bit sequence number and, in its top 16 bits, the bucket's *overflow counts*:
//!   per tag class (`tag & 7`), how many keys whose primary bucket this is sit in their alternate
//!   bucket (eight 2-bit counters; 3 sticks until the writer recounts).
//! - `keys`: per slot `kw = ceil(key_bytes / 8)` little-endian words, zero padded.
//! - `vals`: per slot `vw = ceil(value_bytes / 8)` words: the value array indexed by slot number.
//!
//! A key's primary bucket is `reduce64(hash.lo, n)`, its tag the top 15 bits of `hash.hi`, and its
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
//! 4. *Misses that read one bucket.* The writer keeps, at every point of its program order,
//!    `overflow(p, class) >= #keys with primary p and tag class `tag & 7` that are in their
//!    alternate bucket and not in p` (eight 2-bit counters in the version word, 3 sticky until a
//!    recount): it raises the count (a section of `p`) *before* a key goes to its alternate bucket
//!    (insert or displacement), and lowers it only once the key is out of the alternate (after a
//!    delete there) or in the same section that copies it back into `p`, or, between operations,
//!    to the exact count (a recount, in a section of `p`). A reader that finds no key in a
//!    validated snapshot of its primary bucket with count 0 therefore knows the key was absent at
//!    that point, and answers a miss without reading the alternate bucket.
//!
//! `tests/loom.rs` checks a displacement racing a lookup and an update racing a lookup under loom.

use crate::prefetch::prefetch;
use crate::storage::{Words, WordsRef};
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

/// The 4-bit mask (bit `j` for lane `j`) of a [`tag_matches`] result: the lanes' high bits
/// (15, 31, 47, 63), shifted to 0, 16, 32, 48, land on bits 48..=51 by one multiplication whose
/// other partial products fall on distinct bits below 48 (no carries reach bit 48).
#[inline(always)]
pub(crate) fn lane_bits(m: u64) -> u32 {
    (((m >> 15).wrapping_mul((1 << 48) | (1 << 33) | (1 << 18) | (1 << 3)) >> 48) & 0xF) as u32
}

/// Set in a slot's tag lane when the key sits in its alternate bucket.
pub(crate) const ALT_FLAG: u16 = 0x8000;
/// Low bits of a version word: the sequence number (odd while the writer changes the bucket).
const SEQ_MASK: u64 = (1 << 48) - 1;
/// High 16 bits of a version word: the bucket's overflow count.
const COUNT_SHIFT: u32 = 48;
/// Tag classes (`tag & 7`), one overflow counter each. Eight 2-bit counters rather than four
/// 4-bit ones: a miss reads its alternate bucket only when its own class's count is non-zero, so
/// finer classes mean fewer such reads (4-slot buckets at load 0.9: 9.4% of misses after filling,
/// 16.5% after 100 rounds of 10% churn). A counter at 3 cannot count keys leaving past it; the
/// writer recounts exactly once that happened often enough ([`Shared::recount`]), which keeps
/// the share of stuck counters under 0.5% under churn. `examples/altfrac.rs` measures both.
const CLASSES: u16 = 8;
/// Bits of one overflow counter.
const COUNT_BITS: u32 = 2;
/// The sticky maximum of an overflow counter.
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

/// The 15-bit tag of a hash (never 0, bit 15 clear).
#[inline(always)]
fn tag_of(h: KeyHash) -> u16 {
    let t = (h.hi >> 49) as u16;
    t | (t == 0) as u16
}

/// The tag class of `tag`: `tag & 7`.
#[inline(always)]
fn class(tag: u16) -> u32 {
    (tag & (CLASSES - 1)) as u32
}

/// The bit offset in a version word of the overflow counter of `tag`'s class.
#[inline(always)]
fn count_shift(tag: u16) -> u32 {
    COUNT_SHIFT + COUNT_BITS * class(tag)
}

/// The overflow count of tag class `tag & 7` in a version word.
#[inline(always)]
pub(crate) fn overflow(v: u64, tag: u16) -> u64 {
    (v >> count_shift(tag)) & COUNT_MAX
}

/// The bits of `tag`'s overflow counter in a version word: `v & count_bits(tag) != 0` exactly
/// when `overflow(v, tag) != 0` (one test, which the batch combines with the odd check).
#[inline(always)]
pub(crate) fn count_bits(tag: u16) -> u64 {
    // (The constant part of the offset shifted into the mask: one variable shift.)
    (COUNT_MAX << COUNT_SHIFT) << (COUNT_BITS * class(tag))
}

/// `v` with the overflow count of `tag`'s class set to `count` (at most [`COUNT_MAX`]).
#[inline(always)]
fn with_overflow(v: u64, tag: u16, count: u64) -> u64 {
    let sh = count_shift(tag);
    (v & !(COUNT_MAX << sh)) | (count.min(COUNT_MAX) << sh)
}

/// `v` with its sequence number advanced by `by` (the count bits untouched).
#[inline(always)]
fn bump(v: u64, by: u64) -> u64 {
    (v & !SEQ_MASK) | (v.wrapping_add(by) & SEQ_MASK)
}

/// Spreads a tag over 64 bits for [`alt`]: one multiplication by 2^64 / golden ratio, whose
/// high bits (what `reduce64` keeps) are equidistributed over consecutive tags.
#[inline(always)]
fn mix(tag: u16) -> u64 {
    (tag as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Packs `key` (4..=64 bytes) into zero-padded little-endian words, with fixed-size loads only
/// (a partial last word is read as an overlapping 8- or 4-byte load and shifted).
#[inline(always)]
pub(crate) fn key_words(key: &[u8], q: &mut [u64; MAX_KEY_WORDS]) {
    let n = key.len();
    debug_assert!((4..=8 * MAX_KEY_WORDS).contains(&n));
    let full = n / 8;
    for (i, c) in key.chunks_exact(8).enumerate() {
        q[i] = u64::from_le_bytes(c.try_into().expect("8 bytes"));
    }
    let r = n % 8;
    if r != 0 {
        q[full] = if n >= 8 {
            u64::from_le_bytes(key[n - 8..].try_into().expect("8 bytes")) >> (8 * (8 - r))
        } else {
            let lo = u32::from_le_bytes(key[..4].try_into().expect("4 bytes")) as u64;
            let hi = u32::from_le_bytes(key[n - 4..].try_into().expect("4 bytes")) as u64;
            lo | ((hi >> (8 * (8 - n))) << 32)
        };
    }
}

/// Writes the little-endian bytes of `w` into `out` (`out.len() <= 8 * w.len()`).
#[inline(always)]
pub(crate) fn words_to_bytes(w: &[u64], out: &mut [u8]) {
    let mut chunks = out.chunks_exact_mut(8);
    for (i, c) in (&mut chunks).enumerate() {
        c.copy_from_slice(&w[i].to_le_bytes());
    }
    let full = out.len() / 8;
    let rest = &mut out[full * 8..];
    let b = w.get(full).copied().unwrap_or(0).to_le_bytes();
    for (j, x) in rest.iter_mut().enumerate() {
        *x = b[j];
    }
}

/// Where a key lives: its two candidate buckets and its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidates {
    /// Primary bucket.
    pub b1: usize,
    /// Alternate bucket (may equal `b1` in rare cases).
    pub b2: usize,
    /// 15-bit tag, never 0 (a slot's tag lane adds `ALT_FLAG` when the key sits in `b2`).
    pub tag: u16,
}

/// The primary bucket and the tag of a key with hash `h` in a table of `n` buckets (what a
/// lookup needs first; the alternate bucket is computed only when the primary's overflow count
/// says the key may be there).
#[inline(always)]
pub(crate) fn primary(n: usize, h: KeyHash) -> (usize, u16) {
    (reduce64(h.lo, n as u64) as usize, tag_of(h))
}

/// The candidates of a key with hash `h` in a table of `n` buckets.
#[inline(always)]
pub(crate) fn candidates(n: usize, h: KeyHash) -> Candidates {
    let (b1, tag) = primary(n, h);
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
    /// Writer only: keys that left their alternate bucket while their class's count was stuck at
    /// [`COUNT_MAX`] (each leaves the count one too high) since the last [`Shared::recount`].
    stuck: AtomicUsize,
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
            stuck: AtomicUsize::new(0),
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

    /// Slots per bucket (4 or 8).
    pub fn slots_per_bucket(&self) -> usize {
        self.s
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
    pub(crate) fn alt(&self, b: usize, tag: u16) -> usize {
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

    /// Runs `f` on a [`Hot`] view specialized for this table's geometry where it is a common
    /// one (4 or 8 slots, keys of up to 16 bytes), else on the generic view.
    #[inline(always)]
    pub(crate) fn with_hot<R>(&self, f: impl HotFn<R>) -> R {
        let h = self.hot();
        match (self.s, self.kw) {
            (4, 1) => f.call(h.specialize::<4, 1>()),
            (4, 2) => f.call(h.specialize::<4, 2>()),
            (8, 1) => f.call(h.specialize::<8, 1>()),
            (8, 2) => f.call(h.specialize::<8, 2>()),
            _ => f.call(h),
        }
    }

    /// The read paths' view of the table (see [`Hot`]).
    #[inline(always)]
    pub(crate) fn hot(&self) -> Hot<'_> {
        Hot {
            meta: self.meta.view(),
            keys: self.keys.view(),
            vals: self.vals.view(),
            n: self.n,
            s: self.s,
            mw: self.mw,
            kw: self.kw,
            vw: self.vw,
        }
    }

    #[inline(always)]
    pub(crate) fn find_in(&self, b: usize, tag: u16, q: &[u64; MAX_KEY_WORDS]) -> Option<usize> {
        self.hot().find_in(b, tag, q)
    }

    #[inline(always)]
    fn read_value(&self, slot: usize, buf: &mut [u64; MAX_VALUE_WORDS]) {
        self.hot().read_value(slot, buf)
    }

    /// Copies the value of `key` into `out` (`value_bytes` long) and returns true, or returns false
    /// when the key is absent or has the wrong length (`out` is then unspecified).
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
        struct Single<'q> {
            q: &'q [u64; MAX_KEY_WORDS],
            h: KeyHash,
            out: &'q mut [u8],
        }
        impl HotFn<bool> for Single<'_> {
            #[inline(always)]
            fn call<const S: usize, const KW: usize>(self, t: Hot<'_, S, KW>) -> bool {
                t.lookup_q(self.q, self.h, self.out)
            }
        }
        self.with_hot(Single { q: &q, h, out })
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

    /// Checks the writer's invariants (for tests; call with no concurrent writer): every primary
    /// bucket's overflow count is the number of its keys in their alternate bucket (or saturated),
    /// and the sequence numbers are even.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        if let Some(b) = (0..self.n).find(|&b| self.ver(b).load(Acquire) & 1 == 1) {
            return Err(format!("bucket {b}: odd version"));
        }
        for (p, ks) in self.exact_counts().iter().enumerate() {
            for (class, &k) in ks.iter().enumerate() {
                let c = overflow(self.ver(p).load(Acquire), class as u16);
                if c != k.min(COUNT_MAX) && c != COUNT_MAX {
                    return Err(format!(
                        "bucket {p} class {class}: overflow count {c} != {k} keys in alternates"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether a lookup of `key`, absent, reads its alternate bucket: no tag matches in its
    /// primary bucket and the primary's overflow count for its class is non-zero (for
    /// `examples/altfrac.rs`; call with no concurrent writer).
    #[doc(hidden)]
    pub fn miss_reads_alternate(&self, key: &[u8]) -> bool {
        let (b, tag) = primary(self.n, self.hash(key));
        self.hot().tag_mask(b, tag) == 0 && overflow(self.ver(b).load(Acquire), tag) != 0
    }

    /// `(saturated, all)`: the overflow counters (one per bucket and tag class) at their sticky
    /// maximum, and all of them (for `examples/altfrac.rs`).
    #[doc(hidden)]
    pub fn saturated_counters(&self) -> (usize, usize) {
        let saturated = (0..self.n)
            .map(|b| {
                let v = self.ver(b).load(Acquire);
                (0..CLASSES)
                    .filter(|&c| overflow(v, c) == COUNT_MAX)
                    .count()
            })
            .sum();
        (saturated, self.n * CLASSES as usize)
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

    /// The `(key, value)` pairs of bucket `b` (none for `b >=` [`Self::buckets`]), read consistently;
    /// a walk over the buckets in pieces has the guarantees of [`Self::for_each`].
    pub fn bucket_entries(&self, b: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        if b < self.n {
            let mut buf = Vec::new();
            self.bucket_snapshot(b, &mut buf, &mut |k, v| out.push((k.to_vec(), v.to_vec())));
        }
        out
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

    /// Opens a change of bucket `b`: makes its sequence number odd. Returns the version word.
    #[inline(always)]
    fn begin(&self, b: usize) -> u64 {
        let ver = self.ver(b);
        let v = ver.load(Relaxed);
        ver.store(bump(v, 1), Relaxed);
        fence(Release);
        v
    }

    /// Closes the change opened by `begin` (which returned `v`).
    #[inline(always)]
    fn end(&self, b: usize, v: u64) {
        self.ver(b).store(bump(v, 2), Release);
    }

    /// Closes a change, with the overflow counts of `counted` (the word `begin` returned with
    /// its counts changed).
    #[inline(always)]
    fn end_with_counts(&self, b: usize, counted: u64) {
        self.ver(b).store(bump(counted, 2), Release);
    }

    /// One more key of primary bucket `p` with tag `tag` may sit in its alternate bucket (done
    /// *before* it goes there). A counter at the maximum stays there (an over-estimate is safe).
    fn overflow_up(&self, p: usize, tag: u16) {
        let v = self.begin(p);
        let c = overflow(v, tag);
        self.end_with_counts(
            p,
            with_overflow(v, tag, if c == COUNT_MAX { c } else { c + 1 }),
        );
    }

    /// Version word `v` of a primary bucket after one of its keys with tag `tag` left the
    /// alternate bucket. A stuck count stays (and is noted for [`Shared::recount`]).
    fn count_down(&self, v: u64, tag: u16) -> u64 {
        match overflow(v, tag) {
            COUNT_MAX => {
                self.stuck.store(self.stuck.load(Relaxed) + 1, Relaxed);
                v
            }
            c => with_overflow(v, tag, c.saturating_sub(1)),
        }
    }

    /// Writer, between operations: once keys have left their alternates past stuck counts
    /// [`COUNT_MAX`] `n / 16` times, sets every count back to the exact number of keys in
    /// alternates, so a churning table does not drift towards reading both buckets on every
    /// miss. Safe under the protocol: between operations no key is mid-move, so the exact count
    /// satisfies point 4's invariant, and each bucket's new count is written in a section of
    /// that bucket. O(slots), amortized over at least `n / 16` removals.
    fn maybe_recount(&self) {
        if self.stuck.load(Relaxed) > self.n / 16 {
            self.recount();
        }
    }

    /// Per bucket and tag class: how many keys with that primary bucket and class sit in their
    /// alternate bucket (read without the protocol: for the writer, or with no writer).
    fn exact_counts(&self) -> Vec<[u64; CLASSES as usize]> {
        let mut need = vec![[0u64; CLASSES as usize]; self.n];
        for b in 0..self.n {
            for j in 0..self.s {
                let lane = self.tag_at(b, j);
                if lane & ALT_FLAG != 0 {
                    let tag = lane & !ALT_FLAG;
                    need[self.alt(b, tag)][class(tag) as usize] += 1;
                }
            }
        }
        need
    }

    /// Writer, between operations: every bucket's overflow counts set to the exact numbers.
    pub(crate) fn recount(&self) {
        for (p, counts) in self.exact_counts().iter().enumerate() {
            let v = self.ver(p).load(Relaxed);
            let exact = (0..CLASSES).fold(v, |w, c| with_overflow(w, c, counts[c as usize]));
            if exact != v {
                // (`begin` returns `v` again: only the writer changes version words.)
                self.begin(p);
                self.end_with_counts(p, exact);
            }
        }
        self.stuck.store(0, Relaxed);
    }

    /// The lane (tag, with `ALT_FLAG` if in the alternate) of slot `j` of bucket `b`.
    fn tag_at(&self, b: usize, j: usize) -> u16 {
        (self.tag_word(b, j / 4).load(Relaxed) >> ((j % 4) * 16)) as u16
    }

    fn set_tag(&self, b: usize, j: usize, lane: u16) {
        let w = self.tag_word(b, j / 4);
        let sh = (j % 4) * 16;
        let old = w.load(Relaxed);
        w.store((old & !(0xFFFF << sh)) | ((lane as u64) << sh), Relaxed);
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
        // The misses an insert into the primary bucket will take, started together.
        let h = self.hot();
        h.prefetch_bucket(c.b1);
        h.prefetch_bucket_keys(c.b1);
        h.prefetch_bucket_values(c.b1);
        let s = self.find_in(c.b1, c.tag, q).or_else(|| {
            // The writer's counts are never below the truth: with its class's count at 0 no
            // key of the primary bucket sits in the alternate, which is then not read.
            if overflow(self.ver(c.b1).load(Relaxed), c.tag) == 0 {
                None
            } else {
                self.find_in(c.b2, c.tag | ALT_FLAG, q)
            }
        });
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
        let lane = if b == c.b1 {
            c.tag
        } else {
            self.overflow_up(c.b1, c.tag);
            c.tag | ALT_FLAG
        };
        let v = self.begin(b);
        for (i, &w) in q.iter().enumerate().take(self.kw) {
            self.keys.w(target * self.kw + i).store(w, Relaxed);
        }
        self.write_value(target, value);
        self.set_tag(b, target % self.s, lane);
        self.end(b, v);
        self.len.store(self.len.load(Relaxed) + 1, Relaxed);
        self.maybe_recount();
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
                let lane = self.tag_at(b, slot % self.s);
                let v = self.begin(b);
                self.set_tag(b, slot % self.s, 0);
                self.end(b, v);
                if lane & ALT_FLAG != 0 {
                    // Gone from the alternate bucket: its primary's count may go down now.
                    let tag = lane & !ALT_FLAG;
                    let p = self.alt(b, tag);
                    let vp = self.begin(p);
                    self.end_with_counts(p, self.count_down(vp, tag));
                    self.maybe_recount();
                }
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
        let lane = self.tag_at(from / self.s, from % self.s);
        let to_alt = lane & ALT_FLAG == 0;
        if to_alt {
            // Leaving its primary bucket: count it there before it can be missing from it.
            self.overflow_up(from / self.s, lane);
        }
        let v = self.begin(b);
        for i in 0..self.kw {
            let x = self.keys.w(from * self.kw + i).load(Relaxed);
            self.keys.w(to * self.kw + i).store(x, Relaxed);
        }
        for i in 0..self.vw {
            let x = self.vals.w(from * self.vw + i).load(Relaxed);
            self.vals.w(to * self.vw + i).store(x, Relaxed);
        }
        self.set_tag(b, to % self.s, lane ^ ALT_FLAG);
        if to_alt {
            self.end(b, v);
        } else {
            // Back in its primary bucket (and found there from this state on).
            self.end_with_counts(b, self.count_down(v, lane & !ALT_FLAG));
        }
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
                    let alt = self.alt(n.bucket, self.tag_at(n.bucket, j) & !ALT_FLAG);
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

/// A computation generic over the [`Hot`] specializations (a closure cannot be generic).
pub(crate) trait HotFn<R> {
    fn call<const S: usize, const KW: usize>(self, h: Hot<'_, S, KW>) -> R;
}

/// The geometry and arrays of a table copied into a value, which the lookup paths work on: the
/// protocol's acquire loads and fences make the compiler re-read anything behind `&Shared` (it
/// holds atomics), while these copies stay in registers.
///
/// `S` and `KW`, when not 0, are the slots per bucket and key words as constants: the lookup
/// entry points dispatch once per call on the common geometries ([`Shared::with_hot`]) so that the
/// compiler folds them into the address arithmetic.
#[derive(Clone, Copy)]
pub(crate) struct Hot<'a, const S: usize = 0, const KW: usize = 0> {
    meta: WordsRef<'a>,
    keys: WordsRef<'a>,
    vals: WordsRef<'a>,
    n: usize,
    s: usize,
    mw: usize,
    kw: usize,
    vw: usize,
}

impl<'a, const S: usize, const KW: usize> Hot<'a, S, KW> {
    /// Slots per bucket: `S` when the caller specialized it, else the table's.
    #[inline(always)]
    pub(crate) fn s(&self) -> usize {
        if S != 0 {
            S
        } else {
            self.s
        }
    }

    /// Key words per slot: `KW` when the caller specialized it, else the table's.
    #[inline(always)]
    fn kw(&self) -> usize {
        if KW != 0 {
            KW
        } else {
            self.kw
        }
    }

    /// Metadata words per bucket: a constant when `S` is (2 words for 4 slots, else 4).
    #[inline(always)]
    fn mw(&self) -> usize {
        match S {
            0 => self.mw,
            4 => 2,
            _ => 4,
        }
    }

    /// This view with `S` and `KW` set to the table's values as constants (the caller checked).
    #[inline(always)]
    pub(crate) fn specialize<const S2: usize, const KW2: usize>(self) -> Hot<'a, S2, KW2> {
        debug_assert!((S2 == 0 || S2 == self.s) && (KW2 == 0 || KW2 == self.kw));
        Hot {
            meta: self.meta,
            keys: self.keys,
            vals: self.vals,
            n: self.n,
            s: self.s,
            mw: self.mw,
            kw: self.kw,
            vw: self.vw,
        }
    }

    /// The primary bucket and tag of a key with hash `h`.
    #[inline(always)]
    pub(crate) fn primary(&self, h: KeyHash) -> (usize, u16) {
        primary(self.n, h)
    }

    #[inline(always)]
    pub(crate) fn alt(&self, b: usize, tag: u16) -> usize {
        alt(self.n, b, tag)
    }

    #[inline(always)]
    pub(crate) fn ver(&self, b: usize) -> &'a AtomicU64 {
        self.meta.w(b * self.mw())
    }

    #[inline(always)]
    pub(crate) fn tag_word(&self, b: usize, t: usize) -> &'a AtomicU64 {
        self.meta.w(b * self.mw() + 1 + t)
    }

    #[inline(always)]
    pub(crate) fn prefetch_bucket(&self, b: usize) {
        prefetch(self.meta.addr(b * self.mw()));
    }

    #[inline(always)]
    pub(crate) fn prefetch_key(&self, slot: usize) {
        prefetch(self.keys.addr(slot * self.kw()));
    }

    /// Prefetches the first (up to) two cache lines of the keys of bucket `b`: the key a lookup
    /// compares sits there for small keys, and its address does not depend on the tags.
    #[inline(always)]
    pub(crate) fn prefetch_bucket_keys(&self, b: usize) {
        let first = b * self.s() * self.kw();
        prefetch(self.keys.addr(first));
        if self.s() * self.kw() > 8 {
            prefetch(self.keys.addr(first + 8));
        }
    }

    /// Prefetches the first (up to) two cache lines of the values of bucket `b`.
    #[inline(always)]
    pub(crate) fn prefetch_bucket_values(&self, b: usize) {
        let first = b * self.s() * self.vw;
        prefetch(self.vals.addr(first));
        if self.s() * self.vw > 8 {
            prefetch(self.vals.addr(first + 8));
        }
    }

    #[inline(always)]
    pub(crate) fn prefetch_value(&self, slot: usize) {
        prefetch(self.vals.addr(slot * self.vw));
        if self.vw > 8 {
            prefetch(self.vals.addr(slot * self.vw + self.vw - 1));
        }
    }

    #[inline(always)]
    pub(crate) fn key_eq(&self, slot: usize, q: &[u64; MAX_KEY_WORDS]) -> bool {
        let base = slot * self.kw();
        match self.kw() {
            // The common short keys (up to 16 bytes) without a loop.
            1 => self.keys.w(base).load(Relaxed) == q[0],
            2 => {
                (self.keys.w(base).load(Relaxed) ^ q[0])
                    | (self.keys.w(base + 1).load(Relaxed) ^ q[1])
                    == 0
            }
            _ => (0..self.kw()).all(|i| self.keys.w(base + i).load(Relaxed) == q[i]),
        }
    }

    /// Bit `j` set where slot `j` of bucket `b` has tag `tag` (unvalidated).
    #[inline(always)]
    pub(crate) fn tag_mask(&self, b: usize, tag: u16) -> u32 {
        let lanes = |t: usize| lane_bits(tag_matches(self.tag_word(b, t).load(Relaxed), tag));
        if self.s() == 4 {
            lanes(0)
        } else {
            lanes(0) | lanes(1) << 4
        }
    }

    /// The first slot among `mask`'s slots of bucket `b` holding key `q` (unvalidated).
    #[inline(always)]
    pub(crate) fn find_in_mask(
        &self,
        b: usize,
        mut mask: u32,
        q: &[u64; MAX_KEY_WORDS],
    ) -> Option<usize> {
        while mask != 0 {
            let slot = b * self.s() + mask.trailing_zeros() as usize;
            if self.key_eq(slot, q) {
                return Some(slot);
            }
            mask &= mask - 1;
        }
        None
    }

    /// The slot of `q` in bucket `b`, if there (unvalidated: the caller checks the version).
    #[inline(always)]
    pub(crate) fn find_in(&self, b: usize, tag: u16, q: &[u64; MAX_KEY_WORDS]) -> Option<usize> {
        self.find_in_mask(b, self.tag_mask(b, tag), q)
    }

    #[inline(always)]
    pub(crate) fn read_value(&self, slot: usize, buf: &mut [u64; MAX_VALUE_WORDS]) {
        let base = slot * self.vw;
        for (i, w) in buf.iter_mut().enumerate().take(self.vw) {
            *w = self.vals.w(base + i).load(Relaxed);
        }
    }

    /// Copies the value of `slot` into `out` (`value_bytes` long), word by word (unvalidated).
    #[inline(always)]
    pub(crate) fn read_value_bytes(&self, slot: usize, out: &mut [u8]) {
        let base = slot * self.vw;
        let mut chunks = out.chunks_exact_mut(8);
        for (i, c) in (&mut chunks).enumerate() {
            c.copy_from_slice(&self.vals.w(base + i).load(Relaxed).to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let b = self.vals.w(base + self.vw - 1).load(Relaxed).to_le_bytes();
            for (j, x) in rest.iter_mut().enumerate() {
                *x = b[j];
            }
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

    /// The lock-free lookup: copies the value into `out` (`value_bytes` long) on a hit; on a miss
    /// `out` is unspecified (a read the validation rejected may have written it).
    #[inline]
    pub(crate) fn lookup_q(&self, q: &[u64; MAX_KEY_WORDS], h: KeyHash, out: &mut [u8]) -> bool {
        let (b1, tag) = primary(self.n, h);
        // Start the misses this lookup may need at once: metadata, keys and values of both
        // buckets (at load 0.9 about a quarter of the keys sit in their alternate bucket, whose
        // reads would otherwise wait for the primary's).
        let b2 = alt(self.n, b1, tag);
        for b in [b1, b2] {
            self.prefetch_bucket(b);
            self.prefetch_bucket_keys(b);
            self.prefetch_bucket_values(b);
        }
        let c = Candidates { b1, b2: 0, tag };
        loop {
            let v1 = self.ver(c.b1).load(Acquire);
            if v1 & 1 == 1 {
                spin();
                continue;
            }
            if let Some(slot) = self.find_in(c.b1, c.tag, q) {
                self.read_value_bytes(slot, out);
                fence(Acquire);
                if self.ver(c.b1).load(Relaxed) == v1 {
                    return true;
                }
                continue;
            }
            if overflow(v1, c.tag) == 0 {
                // No key of this primary bucket lives in its alternate: a miss.
                fence(Acquire);
                if self.ver(c.b1).load(Relaxed) == v1 {
                    return false;
                }
                continue;
            }
            let v2 = self.ver(b2).load(Acquire);
            if v2 & 1 == 1 {
                spin();
                continue;
            }
            let hit = self.find_in(b2, c.tag | ALT_FLAG, q);
            if let Some(slot) = hit {
                self.read_value_bytes(slot, out);
            }
            fence(Acquire);
            if self.ver(c.b1).load(Relaxed) == v1 && self.ver(b2).load(Relaxed) == v2 {
                return hit.is_some();
            }
        }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn key_words_match_a_plain_packing() {
        for n in 4..=64usize {
            let key: Vec<u8> = (0..n).map(|i| (i * 37 + n) as u8 | 1).collect();
            let mut q = [0u64; MAX_KEY_WORDS];
            key_words(&key, &mut q);
            let mut want = [0u64; MAX_KEY_WORDS];
            for (i, &b) in key.iter().enumerate() {
                want[i / 8] |= (b as u64) << (8 * (i % 8));
            }
            assert_eq!(q[..n.div_ceil(8)], want[..n.div_ceil(8)], "length {n}");
            let mut back = vec![0u8; n];
            words_to_bytes(&q, &mut back);
            assert_eq!(back, key);
        }
    }

    #[test]
    fn tag_lanes_match_exactly() {
        let lanes = [0u16, 1, 0x8001, 0x7FFF];
        let word = lanes
            .iter()
            .enumerate()
            .fold(0u64, |w, (j, &l)| w | (l as u64) << (16 * j));
        for probe in [0u16, 1, 0x8001, 0x7FFF, 2, 0x8000, 0xFFFF] {
            let m = tag_matches(word, probe);
            for (j, &l) in lanes.iter().enumerate() {
                assert_eq!(
                    m >> (16 * j + 15) & 1 == 1,
                    l == probe,
                    "lane {j} probe {probe:#x}"
                );
            }
        }
    }

    #[test]
    fn lane_bits_compress_every_match_pattern() {
        for bits in 0u32..16 {
            let m = (0..4)
                .filter(|j| bits >> j & 1 == 1)
                .fold(0u64, |m, j| m | 1 << (16 * j + 15));
            assert_eq!(lane_bits(m), bits);
        }
    }

    #[test]
    fn alt_is_an_involution_and_versions_keep_counts() {
        for n in [1usize, 2, 3, 7, 1000, 1 << 20] {
            for b in [0, n / 2, n - 1] {
                for tag in [1u16, 2, 0x1234, 0x7FFF] {
                    let a = alt(n, b, tag);
                    assert!(a < n);
                    assert_eq!(alt(n, a, tag), b);
                }
            }
        }
        let v = with_overflow(SEQ_MASK - 1, 3, 2);
        assert_eq!(overflow(v, 11), 2, "tags 3 and 11 share a class");
        assert_eq!(overflow(v, 7), 0);
        assert_eq!(overflow(v, 1), 0);
        assert_eq!(
            overflow(bump(v, 2), 3),
            2,
            "the sequence number wraps without touching the count"
        );
        let all = (0..CLASSES).fold(v, |w, c| with_overflow(w, c, 5));
        for c in 0..CLASSES {
            assert_eq!(overflow(all, c), COUNT_MAX, "class {c} saturates");
        }
        assert_eq!(
            all & SEQ_MASK,
            v & SEQ_MASK,
            "the counts stay out of the sequence number"
        );
        assert_eq!(bump(v, 2) & SEQ_MASK, 0);
    }
}
