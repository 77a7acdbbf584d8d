//! [`LiveSetSep`]: a table that data-plane threads read while one writer at a time applies
//! deltas and pieces to it, in place.
//!
//! # The protocol: a seqlock per block
//!
//! Every 1024-key block has a 32-bit version word in a separate array (4 bytes per block: 64 KB
//! at 16M keys, so it stays in the cache). A block is the unit of every change: a delta writes
//! one group record of one block (or, re-balanced, the block's 64 choice bytes and 64 records),
//! its fallback entries are keys of that block, and a piece writes whole blocks. The choice
//! bytes and group records live in arrays of `AtomicU64` words (the image's byte layout,
//! little endian, read and written only through atomic loads and stores, so a racing read is
//! never a data race; on x86-64 a `Relaxed` load is a plain `mov`).
//!
//! - Writer (serialized by a mutex only writers take), per block `b` it changes:
//!   `v = ver[b]; ver[b] = v + 1 (Relaxed); fence(Release)`; the stores of the block's words
//!   (`Relaxed`) and the fallback edits of its keys (under the fallback table's write lock);
//!   `ver[b] = v + 2 (Release)`. A delta whose edits span several blocks makes them all odd
//!   first and all even last; a piece goes block by block.
//! - Reader, per key: `t = ver[b] (Acquire)`, then the choice byte and the record words
//!   (`Relaxed`; for a key of a fallback group the fallback table under its read lock), then
//!   `fence(Acquire)` and `ver[b] (Relaxed)`: the answer stands if `t` was even and the version
//!   is still `t`; otherwise the key is read again (spinning while the version is odd).
//!   [`LiveSetSep::lookup_batch_hashes`] reads the versions at the pipeline's stage 2 (before
//!   the choice byte) and re-checks them all after stage 3 behind one fence: per key two loads
//!   of a cache-resident word and a compare.
//!
//! Why a reader never returns a mix: if any of its `Relaxed` loads read a word a writer stored
//! after making the block odd, the writer's release fence synchronizes with the reader's
//! acquire fence, so the odd store happens before the reader's second version load, which
//! therefore reads the odd version or a later one, not `t`. If it read the fallback table
//! after the writer's edit, the lock's release/acquire gives the same order. If its first load
//! read the even version `v + 2` the writer published, everything the writer did happens before
//! the reader's loads, which therefore see the new content. So an accepted answer is computed
//! from the block as it was between two writes of it: the old content or the new, never part
//! of each; keys of the same group that a delta does not change keep their value in both.
//!
//! Why not the alternatives: per-group version words do not suffice, since a block delta
//! changes which group a bucket reads (the choice bytes) and a piece rewrites whole blocks;
//! versions per block cover both with one word per 64 groups. An RCU/epoch swap of the touched
//! lines needs an indirection on every record read (or a copy of the table per change) and
//! reader-side epoch announcements (writes to shared lines) plus deferred reclamation; the
//! seqlock keeps the table in place, readers write nothing shared, and a writer's cost is the
//! bytes it changes. A reader that races a write of its block retries that key only; a
//! writer never waits for readers except for the fallback table's lock, which readers hold
//! only to read one entry of a key of a fallback group (about 0.003% of keys with 16+8).
//!
//! Cost, measured with `scalebricks-bench gpt --keys 1000000 --value-bits 2 --peers setsep
//! --updates 0` (16+8, 3 runs on the shared 2-core VM, medians): `lookup_batch_hashes` 51.8 M
//! lookups/s against `SetSep`'s 69.1 on the same keys in the same process (0.75x), batched
//! key lookups 48.0 against 64.7, single lookups 32.7 against 47.2. The extra work is
//! instructions (two aligned word loads per 4-byte record entry, the version loads and
//! checks), not memory traffic; at 16M keys the same runs gave 0.57x, 0.96x and 0.69x (too
//! noisy to say more).
//!
//! Checked by the loom model in `tests/loom.rs` (`RUSTFLAGS="--cfg loom" cargo test -p sb-setsep
//! --test loom --release`) and the stress test in `tests/live.rs` (reader threads against an
//! oracle of every key's values over time while a writer applies deltas and pieces).

use crate::layout::{locate, CHOICE_BYTES_PER_BLOCK, GROUPS_PER_BLOCK};
use crate::sync::{fence, AtomicU32, AtomicU64, Mutex, MutexGuard, Ordering::*, RwLock};
use crate::table::{check_piece, fallback_entry, piece_offsets, FbMap, Header, Mem, Tables, SLACK};
use crate::update::{check, edit_fallback, Verdict};
use crate::{BuildError, Config, Delta, DeltaError, Piece, SetSep, Stats};
use sb_common::{hash128, HugeArray, KeyHash, PageInfo};
// The redirects are not part of the modelled protocol (a value read is either one): std's.
use std::sync::atomic::{AtomicBool, AtomicU16};

/// What [`Words`] holds: `AtomicU64` and `AtomicU32` (std's are all-zero bytes when zero;
/// loom's are made one by one).
trait Elem: Sized + ElemBound {
    #[cfg_attr(not(loom), allow(dead_code))]
    fn zero() -> Self;
}
#[cfg(not(loom))]
use sb_common::huge::Zeroable as ElemBound;
#[cfg(loom)]
trait ElemBound {}
#[cfg(loom)]
impl<T> ElemBound for T {}

impl Elem for AtomicU64 {
    fn zero() -> Self {
        AtomicU64::new(0)
    }
}
impl Elem for AtomicU32 {
    fn zero() -> Self {
        AtomicU32::new(0)
    }
}

/// An array of atomic words: 2 MB-page backed normally, a vector of loom atomics under loom.
struct Words<T: Elem> {
    #[cfg(not(loom))]
    a: HugeArray<T>,
    #[cfg(loom)]
    a: Vec<T>,
}

impl<T: Elem> Words<T> {
    fn zeroed(len: usize) -> Self {
        #[cfg(not(loom))]
        let a = HugeArray::zeroed(len);
        #[cfg(loom)]
        let a = (0..len).map(|_| T::zero()).collect();
        Words { a }
    }

    fn page_info(&self) -> PageInfo {
        #[cfg(not(loom))]
        return self.a.page_info();
        #[cfg(loom)]
        return PageInfo::default();
    }
}

impl<T: Elem> std::ops::Deref for Words<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.a
    }
}

/// The reads of [`Tables`] over atomic words and block versions.
#[derive(Clone, Copy)]
pub(crate) struct Versioned;

impl<'a> Mem<'a> for Versioned {
    type Arr = &'a [AtomicU64];
    type Fb = &'a RwLock<FbMap>;
    type Vers = &'a [AtomicU32];
    const SYNCED: bool = true;

    #[inline(always)]
    fn byte(a: &'a [AtomicU64], i: usize) -> u8 {
        a.get(i >> 3)
            .map_or(0, |w| (w.load(Relaxed) >> ((i & 7) * 8)) as u8)
    }

    #[inline(always)]
    fn entry(a: &'a [AtomicU64], off: usize) -> u32 {
        // The two aligned words that cover bytes off..off + 4.
        let (i, s) = (off >> 3, (off & 7) * 8);
        let w0 = a.get(i).map_or(0, |w| w.load(Relaxed));
        let w1 = a.get(i + 1).map_or(0, |w| w.load(Relaxed));
        // (w1:w0) >> s without a 64-bit shift when s == 0.
        ((w0 >> s) | ((w1 << 1) << (63 - s))) as u32
    }

    #[inline(always)]
    fn prefetch(a: &'a [AtomicU64], i: usize) {
        crate::prefetch::prefetch(a, i >> 3)
    }

    fn fallback_len(f: &'a RwLock<FbMap>) -> usize {
        read(f).len()
    }

    fn fallback_get(f: &'a RwLock<FbMap>, h: KeyHash) -> u16 {
        read(f).get(&(h.lo, h.hi)).copied().unwrap_or(0)
    }

    #[inline(always)]
    fn begin(v: &'a [AtomicU32], blk: usize) -> u32 {
        v.get(blk).map_or(0, |x| x.load(Acquire))
    }

    #[inline(always)]
    fn still(v: &'a [AtomicU32], blk: usize, tok: u32) -> bool {
        tok & 1 == 0 && v.get(blk).map_or(0, |x| x.load(Relaxed)) == tok
    }

    #[inline(always)]
    fn read_fence() {
        fence(Acquire)
    }

    #[inline]
    fn spin() {
        crate::sync::spin()
    }
}

/// The fallback table, read-locked (a poisoned lock still holds a whole map: every edit is
/// made by infallible map operations).
fn read(f: &RwLock<FbMap>) -> crate::sync::RwLockReadGuard<'_, FbMap> {
    f.read().unwrap_or_else(|e| e.into_inner())
}

/// A [`SetSep`] that lookups read through `&self` while deltas and pieces are applied to it
/// through `&self` as well: the Global Partition Table of a node whose control plane applies
/// its owners' deltas while the data-plane workers forward (share it as `Arc<LiveSetSep>`).
///
/// Lookups give what [`SetSep`]'s give on the table as it was before or after each change
/// (never a mix within a block: see the module docs for the protocol); writers are serialized.
///
/// ```
/// use sb_setsep::{BuildOptions, LiveSetSep, Updatable};
/// use std::sync::Arc;
///
/// let keys: Vec<[u8; 4]> = (0u32..3000).map(|i| i.to_le_bytes()).collect();
/// let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
/// let values: Vec<u16> = (0..3000).map(|i| (i % 4) as u16).collect();
/// let opts = BuildOptions { value_bits: 2, ..BuildOptions::default() };
/// let mut owner = Updatable::build(&refs, &values, &opts)?;
/// let live = Arc::new(LiveSetSep::new(owner.table().clone()));
///
/// let reader = {
///     let live = Arc::clone(&live);
///     std::thread::spawn(move || live.lookup(&7u32.to_le_bytes()))
/// };
/// let d = owner.insert(&7u32.to_le_bytes(), 1)?; // a value change
/// live.apply_delta(&d)?;
/// assert!([3, 1].contains(&reader.join().unwrap()));
/// assert_eq!(live.lookup(&7u32.to_le_bytes()), 1);
/// assert_eq!(live.content_digest(), owner.table().content_digest());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LiveSetSep {
    /// The table's shape and seed as built (what lookups use; never changes).
    shape: Header,
    /// Bucket choices, 8 bytes per word.
    choices: Words<AtomicU64>,
    /// Group records, 8 bytes per word, then at least [`SLACK`] zero bytes and one more word.
    groups: Words<AtomicU64>,
    /// One version per block: odd while a writer is in it.
    versions: Words<AtomicU32>,
    /// The fallback entries.
    fallback: RwLock<FbMap>,
    /// The current header (key count, sequence number, last delta): held by writers.
    writer: Mutex<Header>,
    /// Per value: the value lookups return for it ([`LiveSetSep::set_redirects`]; itself
    /// unless redirected), and whether any is redirected.
    redirect: Box<[AtomicU16]>,
    redirecting: AtomicBool,
}

/// Values below `1 << REDIRECT_BITS` can be redirected ([`LiveSetSep::set_redirects`]).
pub const REDIRECT_BITS: u8 = 12;

impl std::fmt::Debug for LiveSetSep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSetSep")
            .field("config", &self.shape.config)
            .field("value_bits", &self.shape.value_bits)
            .field("blocks", &self.shape.n_blocks)
            .finish_non_exhaustive()
    }
}

/// The aligned 8 bytes of word `i` of `bytes` (zero past the end).
fn word_of(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    for (j, b) in w.iter_mut().enumerate() {
        *b = bytes.get(i * 8 + j).copied().unwrap_or(0);
    }
    u64::from_le_bytes(w)
}

/// Stores `bytes` at byte offset `off` of `words` (`Relaxed`; partly covered words are read and
/// merged: only the one writer stores into them). Bytes past the end are dropped.
fn store_bytes(words: &[AtomicU64], off: usize, bytes: &[u8]) {
    let (first, last) = (off / 8, (off + bytes.len()).div_ceil(8));
    for i in first..last {
        let Some(w) = words.get(i) else { return };
        let (lo, hi) = ((i * 8).max(off), ((i + 1) * 8).min(off + bytes.len()));
        let new = if hi - lo == 8 {
            word_of(&bytes[lo - off..], 0)
        } else {
            let mut b = w.load(Relaxed).to_le_bytes();
            b[lo - i * 8..hi - i * 8].copy_from_slice(&bytes[lo - off..hi - off]);
            u64::from_le_bytes(b)
        };
        w.store(new, Relaxed);
    }
}

/// Copies `len` bytes of `words` from byte `off` into `out` (an `off` and `len` of whole words).
fn load_bytes(words: &[AtomicU64], off: usize, out: &mut [u8]) {
    debug_assert!(off % 8 == 0);
    for (c, w) in out.chunks_mut(8).zip(&words[off / 8..]) {
        let b = w.load(Relaxed).to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

impl LiveSetSep {
    /// Takes over `t` (copied into atomic words; O(table size)).
    pub fn new(t: SetSep) -> LiveSetSep {
        let h = t.hdr;
        let (cb, gb) = (h.choice_bytes(), h.group_bytes());
        let choices = Words::<AtomicU64>::zeroed(cb.div_ceil(8));
        for (i, w) in choices.iter().enumerate() {
            w.store(word_of(&t.choices[..cb], i), Relaxed);
        }
        // SLACK bytes and one word past the records: what `Versioned::entry` reads.
        let groups = Words::<AtomicU64>::zeroed(gb.div_ceil(8) + SLACK.div_ceil(8) + 1);
        for (i, w) in groups.iter().enumerate().take(gb.div_ceil(8)) {
            w.store(word_of(&t.groups[..gb], i), Relaxed);
        }
        LiveSetSep {
            shape: h,
            choices,
            groups,
            versions: Words::zeroed(h.n_blocks as usize),
            fallback: RwLock::new(t.fallback),
            writer: Mutex::new(h),
            redirect: (0..1u32 << h.value_bits.min(REDIRECT_BITS))
                .map(|v| AtomicU16::new(v as u16))
                .collect(),
            redirecting: AtomicBool::new(false),
        }
    }

    /// Lookups that find value `v` return `to[v]` instead, where it is `Some` (with
    /// ScaleBricks' values, node ids: the node standing in for a gone handler); every other
    /// value (and every value of `1 << REDIRECT_BITS` or more) is returned as it is. Replaces
    /// the previous redirects. The table's content (and [`LiveSetSep::content_digest`]) is
    /// unchanged. A lookup running meanwhile sees each value's old or new redirect.
    pub fn set_redirects(&self, to: &[Option<u16>]) {
        let mut any = false;
        for (v, r) in self.redirect.iter().enumerate() {
            let t = to.get(v).copied().flatten().unwrap_or(v as u16);
            any |= t != v as u16;
            r.store(t, Relaxed);
        }
        self.redirecting.store(any, Release);
    }

    /// The redirects in force ([`LiveSetSep::set_redirects`]): (value, returned instead).
    pub fn redirects(&self) -> Vec<(u16, u16)> {
        (self.redirect.iter().enumerate())
            .map(|(v, r)| (v as u16, r.load(Relaxed)))
            .filter(|(v, r)| v != r)
            .collect()
    }

    /// `v`'s redirect (itself when none is set: one flag load).
    #[inline(always)]
    fn redirected(&self, v: u16) -> u16 {
        if self.redirecting.load(Acquire) {
            self.target(v)
        } else {
            v
        }
    }

    /// [`LiveSetSep::redirected`] over a batch (one flag load for it).
    #[inline(always)]
    fn redirect_all(&self, out: &mut [u16]) {
        if self.redirecting.load(Acquire) {
            for v in out {
                *v = self.target(*v);
            }
        }
    }

    #[inline(always)]
    fn target(&self, v: u16) -> u16 {
        match self.redirect.get(v as usize) {
            Some(r) => r.load(Relaxed),
            None => v,
        }
    }

    #[inline(always)]
    fn tables(&self) -> Tables<'_, Versioned> {
        Tables::with_versions(
            self.shape,
            &self.choices[..],
            &self.groups[..],
            &self.fallback,
            &self.versions[..],
        )
    }

    fn lock(&self) -> MutexGuard<'_, Header> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `key` (see [`SetSep::lookup`]).
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> u16 {
        let t = self.tables();
        self.redirected(t.lookup_hash(t.hash(key)))
    }

    /// Batched [`LiveSetSep::lookup`] (see [`SetSep::lookup_batch`]).
    ///
    /// # Panics
    /// If `keys` and `out` differ in length.
    pub fn lookup_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        self.tables().lookup_batch(keys, out);
        self.redirect_all(out);
    }

    /// The table's hash of `key` (see [`SetSep::hash_key`]).
    #[inline]
    pub fn hash_key(&self, key: &[u8]) -> KeyHash {
        hash128(key, self.shape.seed)
    }

    /// The value of the key whose hash is `h` (see [`SetSep::lookup_hash`]).
    #[inline]
    pub fn lookup_hash(&self, h: KeyHash) -> u16 {
        self.redirected(self.tables().lookup_hash(h))
    }

    /// Batched [`LiveSetSep::lookup_hash`]: Algorithm 1's pipeline (see
    /// [`SetSep::lookup_batch_hashes`]) with each key's block version checked.
    ///
    /// # Panics
    /// If `hs` and `out` differ in length.
    pub fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
        self.tables().lookup_batch_hashes(hs, out);
        self.redirect_all(out);
    }

    /// Hash seed of the table.
    pub fn seed(&self) -> u64 {
        self.shape.seed
    }

    /// The table's fingerprint (see [`SetSep::fingerprint`]).
    pub fn fingerprint(&self) -> u64 {
        self.shape.fingerprint()
    }

    /// Build id of the table.
    pub fn build_id(&self) -> u64 {
        self.shape.build_id
    }

    /// Number of 1024-key blocks.
    pub fn num_blocks(&self) -> u64 {
        self.shape.n_blocks
    }

    /// Bits per value.
    pub fn value_bits(&self) -> u8 {
        self.shape.value_bits
    }

    /// The table's config.
    pub fn config(&self) -> Config {
        self.shape.config
    }

    /// Number of keys: the build's or assembly's count, as a single owner's deltas
    /// ([`LiveSetSep::apply_delta`]) update it; the deltas of several owners
    /// ([`LiveSetSep::apply_owner_delta`]) leave it, and whoever applies them counts each
    /// owner's keys ([`Delta::keys`]). Waits for a writer in progress.
    pub fn len(&self) -> u64 {
        self.lock().n_keys
    }

    /// Whether the table has no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sequence number of the last delta [`LiveSetSep::apply_delta`] applied (see
    /// [`SetSep::seq`]; waits for a writer in progress).
    pub fn seq(&self) -> u64 {
        self.lock().seq
    }

    /// Size, space per key and fallback use (see [`SetSep::stats`]; waits for a writer in
    /// progress).
    pub fn stats(&self) -> Stats {
        let hdr = *self.lock();
        let pi = self.choices.page_info().merge(self.groups.page_info());
        Tables::<Versioned>::with_versions(
            hdr,
            &self.choices[..],
            &self.groups[..],
            &self.fallback,
            &self.versions[..],
        )
        .stats(pi)
    }

    /// Makes `blocks` odd (a writer is in them), then a release fence: a reader that sees any
    /// store made after it sees the odd version on its second version load.
    fn open(&self, blocks: &[u64]) {
        for &b in blocks {
            if let Some(v) = self.versions.get(b as usize) {
                v.store(v.load(Relaxed).wrapping_add(1), Relaxed);
            }
        }
        fence(Release);
    }

    /// Makes `blocks` even again, publishing what was written since [`Self::open`].
    fn close(&self, blocks: &[u64]) {
        for &b in blocks {
            if let Some(v) = self.versions.get(b as usize) {
                v.store(v.load(Relaxed).wrapping_add(1), Release);
            }
        }
    }

    /// Writes an accepted delta: its block (and the block of any fallback entry it edits, all
    /// of which are the same block for the deltas an [`crate::Updatable`] makes) switch at once.
    fn write_delta(&self, d: &Delta) {
        let n_blocks = self.shape.n_blocks;
        let (rm, ins) = d.fallback_edits();
        let block = [d.block()];
        // A delta without fallback edits (nearly all) touches its one block: no allocation.
        let more: Vec<u64>;
        let blocks: &[u64] = if rm.is_empty() && ins.is_empty() {
            &block
        } else {
            let at = |h: &KeyHash| locate(*h, n_blocks).0;
            let mut v = block.to_vec();
            v.extend(rm.iter().map(at).chain(ins.iter().map(|(h, _)| at(h))));
            v.sort_unstable();
            v.dedup();
            more = v;
            &more
        };
        self.open(blocks);
        if d.touches_fallback() {
            let mut fb = self.fallback.write().unwrap_or_else(|e| e.into_inner());
            edit_fallback(&mut fb, d);
        }
        store_bytes(
            &self.groups,
            d.group() as usize * self.shape.rec_bytes(),
            d.record_bytes(),
        );
        if let Some(c) = d.choice_bytes() {
            store_bytes(
                &self.choices,
                d.block() as usize * CHOICE_BYTES_PER_BLOCK,
                c,
            );
        }
        self.close(blocks);
    }

    fn apply(&self, d: &Delta, sequenced: bool) -> Result<(), DeltaError> {
        let mut w = self.lock();
        let verdict = check(&w, &read(&self.fallback), d, sequenced)?;
        if verdict == Verdict::Duplicate {
            return Ok(());
        }
        self.write_delta(d);
        if sequenced {
            d.advance(&mut w);
        }
        Ok(())
    }

    /// Applies a delta of the table's single owner, with [`SetSep::apply_delta`]'s checks and
    /// sequence numbers; readers see its block switch from the old content to the new at once.
    /// On error the table is unchanged.
    pub fn apply_delta(&self, d: &Delta) -> Result<(), DeltaError> {
        self.apply(d, true)
    }

    /// Applies a delta of one of several owners ([`SetSep::apply_owner_delta`]: the caller
    /// keeps each owner's sequence); readers see its block switch at once. On error the table
    /// is unchanged.
    pub fn apply_owner_delta(&self, d: &Delta) -> Result<(), DeltaError> {
        self.apply(d, false)
    }

    /// Replaces blocks `piece.range()` with the piece's (see [`SetSep::install_piece`]), one
    /// block at a time: readers see each block switch from the old content to the new at once
    /// (blocks of the range switch one after the other). On error the table is unchanged.
    pub fn install_piece(&self, p: &Piece) -> Result<(), BuildError> {
        let w = self.lock();
        let incoming = check_piece(&w, p)?;
        let n_blocks = self.shape.n_blocks;
        let block_of = |&(lo, hi): &(u64, u64)| locate(KeyHash { lo, hi }, n_blocks).0;
        // The range's old and new fallback entries by block.
        let mut old: Vec<(u64, (u64, u64))> = read(&self.fallback)
            .keys()
            .map(|k| (block_of(k), *k))
            .filter(|(b, _)| p.range.contains(b))
            .collect();
        old.sort_unstable();
        let mut new: Vec<(u64, (u64, u64), u16)> = incoming
            .into_iter()
            .map(|(k, v)| (block_of(&k), k, v))
            .collect();
        new.sort_unstable();
        let (c0, g0) = piece_offsets(&w, p);
        let (cb, gb) = (
            CHOICE_BYTES_PER_BLOCK,
            GROUPS_PER_BLOCK * self.shape.rec_bytes(),
        );
        let (mut oi, mut ni) = (0, 0);
        for (j, b) in p.range.clone().enumerate() {
            let o_end = oi + old[oi..].iter().take_while(|e| e.0 == b).count();
            let n_end = ni + new[ni..].iter().take_while(|e| e.0 == b).count();
            self.open(&[b]);
            if o_end > oi || n_end > ni {
                let mut fb = self.fallback.write().unwrap_or_else(|e| e.into_inner());
                for (_, k) in &old[oi..o_end] {
                    fb.remove(k);
                }
                for &(_, k, v) in &new[ni..n_end] {
                    fb.insert(k, v);
                }
            }
            store_bytes(&self.choices, c0 + j * cb, &p.choices[j * cb..(j + 1) * cb]);
            store_bytes(&self.groups, g0 + j * gb, &p.groups[j * gb..(j + 1) * gb]);
            self.close(&[b]);
            (oi, ni) = (o_end, n_end);
        }
        Ok(())
    }

    /// [`SetSep::content_digest`] of the table now (waits for a writer in progress, and holds
    /// writers off while it reads).
    pub fn content_digest(&self) -> u64 {
        let _w = self.lock();
        let h = &self.shape;
        let mut d = xxhash_rust::xxh3::Xxh3::new();
        d.update(&h.fingerprint().to_le_bytes());
        let mut buf = vec![0u8; 4096];
        for (words, len) in [
            (&self.choices, h.choice_bytes()),
            (&self.groups, h.group_bytes()),
        ] {
            let mut off = 0;
            while off < len {
                let n = (len - off).min(buf.len());
                load_bytes(words, off, &mut buf[..n]);
                d.update(&buf[..n]);
                off += n;
            }
        }
        for (&(lo, hi), &v) in read(&self.fallback).iter() {
            d.update(&fallback_entry(KeyHash { lo, hi }, v));
        }
        d.digest()
    }

    /// A consistent copy of the table as an owned [`SetSep`] (to save, or to serve a resync):
    /// waits for a writer in progress and holds writers off while it copies.
    pub fn snapshot(&self) -> SetSep {
        let w = self.lock();
        let (cb, gb) = (w.choice_bytes(), w.group_bytes());
        let mut choices = HugeArray::<u8>::zeroed(cb);
        load_bytes(&self.choices, 0, &mut choices);
        let mut groups = HugeArray::<u8>::zeroed(gb + SLACK);
        load_bytes(&self.groups, 0, &mut groups[..gb]);
        SetSep {
            hdr: *w,
            choices,
            groups,
            fallback: read(&self.fallback).clone(),
        }
    }
}
