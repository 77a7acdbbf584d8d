//! The lookup side: [`SetSep`] (owned arrays) and the borrowed [`Tables`] view that every lookup
//! path (owned, zero-copy, mmap'd) runs on.

use crate::layout::{
    choice_of, family, locate, position, CAND, CHOICE_BYTES_PER_BLOCK, GROUPS_PER_BLOCK,
};
use crate::prefetch::prefetch;
use crate::{BuildError, Config, Delta, DeltaError};
use sb_common::{hash128, HugeArray, KeyHash, PageInfo};

/// Bytes of one fallback entry: hash lo (8), hash hi (8), value (2), little endian.
pub(crate) const FB_ENTRY: usize = 18;
/// Readable bytes every groups slice has past its last record (so a record entry can be read
/// with one unaligned 4-byte load).
pub(crate) const SLACK: usize = 8;
/// The fallback table of an owned [`SetSep`]: `(hash lo, hash hi) -> value`, in the order of
/// the image's sorted entries, so that a delta edits it in O(log n) per entry (a sorted byte
/// vector cost a copy of the whole table per delta).
pub(crate) type FbMap = std::collections::BTreeMap<(u64, u64), u16>;

/// The fallback table a lookup view reads: an image's sorted entries or an owned table's map.
#[derive(Clone, Copy)]
pub(crate) enum Fallback<'a> {
    /// Sorted [`FB_ENTRY`]-byte entries (an image, zero-copy).
    Bytes(&'a [u8]),
    /// An owned table's map.
    Map(&'a FbMap),
}

impl Fallback<'_> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            Fallback::Bytes(b) => b.len() / FB_ENTRY,
            Fallback::Map(m) => m.len(),
        }
    }

    /// The value of `h`; 0 for a hash that is not there.
    pub fn get(&self, h: KeyHash) -> u16 {
        match self {
            Fallback::Bytes(b) => match fallback_find(b, h) {
                Ok(i) => u16::from_le_bytes([b[i * FB_ENTRY + 16], b[i * FB_ENTRY + 17]]),
                Err(_) => 0,
            },
            Fallback::Map(m) => m.get(&(h.lo, h.hi)).copied().unwrap_or(0),
        }
    }
}

/// The map of sorted fallback entries (as the loaders checked them).
pub(crate) fn fb_map(fb: &[u8]) -> FbMap {
    (0..fb.len() / FB_ENTRY)
        .map(|i| {
            let e = &fb[i * FB_ENTRY..(i + 1) * FB_ENTRY];
            (fallback_key(fb, i), u16::from_le_bytes([e[16], e[17]]))
        })
        .collect()
}

/// Keys per stage of the batched lookup pipeline.
pub(crate) const WINDOW: usize = 32;
/// Keys between stage 1 (prefetch the choice byte) and stage 2 (read it) of the batched lookup.
const CHOICE_DIST: usize = 4;

/// Calls `$t.$f::<XB, YB>(args)` with the table's config as the const parameters (the one
/// place the run-time config picks a specialized lookup).
macro_rules! by_config {
    ($t:expr, $f:ident($($a:expr),*)) => {
        match ($t.xbits, $t.ymask) {
            (16, 0xff) => $t.$f::<16, 8>($($a),*),
            (8, 0xffff) => $t.$f::<8, 16>($($a),*),
            (16, 0xffff) => $t.$f::<16, 16>($($a),*),
            _ => $t.$f::<8, 8>($($a),*),
        }
    };
}

/// What a table is: the header fields of the binary format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub config: Config,
    pub value_bits: u8,
    pub seed: u64,
    pub n_keys: u64,
    pub n_blocks: u64,
    /// Identity of the build ([`crate::BuildOptions::build_id`]).
    pub build_id: u64,
    /// Sequence number of the last delta applied (0: none since the build).
    pub seq: u64,
    /// Digest of that delta (0 when `seq` is 0), so a duplicate of it is told from another
    /// delta with its number.
    pub last_delta: u64,
}

impl Header {
    /// The table's fingerprint: a digest of its seed, shape and build id.
    pub fn fingerprint(&self) -> u64 {
        fingerprint(
            self.seed,
            self.build_id,
            self.n_blocks,
            self.config,
            self.value_bits,
        )
    }

    pub fn rec_bytes(&self) -> usize {
        self.config.entry_bytes() * self.value_bits as usize
    }
    pub fn choice_bytes(&self) -> usize {
        self.n_blocks as usize * CHOICE_BYTES_PER_BLOCK
    }
    pub fn n_groups(&self) -> u64 {
        self.n_blocks * GROUPS_PER_BLOCK as u64
    }
    pub fn group_bytes(&self) -> usize {
        self.n_groups() as usize * self.rec_bytes()
    }
}

/// The fingerprint ([`SetSep::fingerprint`]) of a table of seed `seed`, build id `build_id`,
/// `n_blocks` blocks and that shape: for a copy of a table in another form (the XDP fast
/// path's mirror of its maps), which must answer to the table's deltas.
pub fn fingerprint(seed: u64, build_id: u64, n_blocks: u64, config: Config, value_bits: u8) -> u64 {
    let mut b = [0u8; 27];
    b[0..8].copy_from_slice(&seed.to_le_bytes());
    b[8..16].copy_from_slice(&build_id.to_le_bytes());
    b[16..24].copy_from_slice(&n_blocks.to_le_bytes());
    b[24] = config.index_bits;
    b[25] = config.array_bits;
    b[26] = value_bits;
    xxhash_rust::xxh3::xxh3_64(&b)
}

/// Statistics of a table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Keys the table was built with (after updates: the current number of keys).
    pub keys: u64,
    /// Bits per value.
    pub value_bits: u8,
    /// Hash index and bit array widths.
    pub config: Config,
    /// Exact space per key: bucket choices + group records + fallback entries, in bits, divided
    /// by `keys` (0 for an empty table).
    pub bits_per_key: f64,
    /// Keys answered from the fallback table.
    pub fallback_keys: u64,
    /// Bytes of the serialized table (header, choices, groups, fallback, checksum).
    pub bytes: u64,
    /// 1024-key blocks.
    pub blocks: u64,
    /// Groups (64 per block).
    pub groups: u64,
    /// Groups whose keys are in the fallback table.
    pub fallback_groups: u64,
    /// What backs the in-memory arrays (2 MB or 4 KB pages).
    pub page_info: PageInfo,
}

/// A SetSep table: maps every key it was built with to its value; keys are not stored.
///
/// Built by [`SetSep::build`], loaded by [`SetSep::from_bytes`], changed only through
/// [`SetSep::apply_delta`] (the deltas an [`crate::Updatable`] produces).
#[derive(Clone)]
pub struct SetSep {
    pub(crate) hdr: Header,
    /// 64 bytes per block: 2 bits per bucket.
    pub(crate) choices: HugeArray<u8>,
    /// `rec_bytes` per group, then [`SLACK`] zero bytes.
    pub(crate) groups: HugeArray<u8>,
    /// The fallback entries, by hash.
    pub(crate) fallback: FbMap,
}

impl std::fmt::Debug for SetSep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetSep")
            .field("keys", &self.hdr.n_keys)
            .field("config", &self.hdr.config)
            .field("value_bits", &self.hdr.value_bits)
            .field("blocks", &self.hdr.n_blocks)
            .field("fallback_keys", &self.fallback.len())
            .finish()
    }
}

/// How a lookup view reads its arrays: plain bytes ([`Plain`]: an owned table, an image) or
/// atomic words under per-block version words ([`crate::live`]). The lookup code ([`Tables`])
/// is written once against this; with [`Plain`] every hook is a plain load or a no-op and
/// compiles to the code of a view over bytes.
pub(crate) trait Mem<'a>: Copy {
    /// The choice and group arrays.
    type Arr: Copy;
    /// The fallback table.
    type Fb: Copy;
    /// The per-block version words (`()` for unversioned arrays).
    type Vers: Copy;
    /// Whether lookups validate against block versions ([`Mem::begin`], [`Mem::still`]).
    const SYNCED: bool;
    /// Byte `i` of an array (0 past its end).
    fn byte(a: Self::Arr, i: usize) -> u8;
    /// The 4 little-endian bytes at byte offset `off` (0 for bytes past the end).
    fn entry(a: Self::Arr, off: usize) -> u32;
    /// Prefetches the cache line holding byte `i`.
    fn prefetch(a: Self::Arr, i: usize);
    /// Entries of the fallback table.
    fn fallback_len(f: Self::Fb) -> usize;
    /// The fallback table's value of `h`; 0 for a hash that is not there.
    fn fallback_get(f: Self::Fb, h: KeyHash) -> u16;
    /// Starts a read of block `blk`: its version (odd while a writer is in it).
    fn begin(v: Self::Vers, blk: usize) -> u32;
    /// Whether block `blk` is still at the even version `tok` (a read since [`Mem::begin`]
    /// saw one consistent block). The caller issues [`Mem::read_fence`] first.
    fn still(v: Self::Vers, blk: usize, tok: u32) -> bool;
    /// Orders the data loads before the version re-reads of [`Mem::still`].
    fn read_fence();
    /// Waits a little before retrying a block a writer holds.
    fn spin();
}

/// Plain byte arrays: an owned [`SetSep`] or an image (nothing changes them while a view
/// exists).
#[derive(Clone, Copy)]
pub(crate) struct Plain;

impl<'a> Mem<'a> for Plain {
    type Arr = &'a [u8];
    type Fb = Fallback<'a>;
    type Vers = ();
    const SYNCED: bool = false;

    #[inline(always)]
    fn byte(a: &'a [u8], i: usize) -> u8 {
        a.get(i).copied().unwrap_or(0)
    }

    #[inline(always)]
    fn entry(a: &'a [u8], off: usize) -> u32 {
        match a.get(off..off + 4) {
            Some(s) => u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
            None => {
                let mut b = [0u8; 4];
                for (i, x) in b.iter_mut().enumerate() {
                    *x = a.get(off + i).copied().unwrap_or(0);
                }
                u32::from_le_bytes(b)
            }
        }
    }

    #[inline(always)]
    fn prefetch(a: &'a [u8], i: usize) {
        prefetch(a, i)
    }

    fn fallback_len(f: Fallback<'a>) -> usize {
        f.len()
    }

    fn fallback_get(f: Fallback<'a>, h: KeyHash) -> u16 {
        f.get(h)
    }

    #[inline(always)]
    fn begin(_: (), _: usize) -> u32 {
        0
    }

    #[inline(always)]
    fn still(_: (), _: usize, _: u32) -> bool {
        true
    }

    #[inline(always)]
    fn read_fence() {}

    #[inline(always)]
    fn spin() {}
}

/// A borrowed view of a table's arrays plus the numbers the lookup needs.
pub(crate) struct Tables<'a, M: Mem<'a> = Plain> {
    pub hdr: Header,
    pub choices: M::Arr,
    pub groups: M::Arr,
    pub fallback: M::Fb,
    vers: M::Vers,
    rec: usize,
    xbits: u32,
    xmask: u32,
    ymask: u32,
    mark: u16,
    vbits: usize,
}

impl<'a, M: Mem<'a>> Clone for Tables<'a, M> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<'a, M: Mem<'a>> Copy for Tables<'a, M> {}

impl<'a> Tables<'a> {
    pub fn new(hdr: Header, choices: &'a [u8], groups: &'a [u8], fallback: Fallback<'a>) -> Self {
        Tables::with_versions(hdr, choices, groups, fallback, ())
    }
}

impl<'a, M: Mem<'a>> Tables<'a, M> {
    /// A view over any arrays: `groups` must have readable (zero) bytes past the last record
    /// for [`Mem::entry`] ([`SLACK`]).
    pub fn with_versions(
        hdr: Header,
        choices: M::Arr,
        groups: M::Arr,
        fallback: M::Fb,
        vers: M::Vers,
    ) -> Self {
        let c = hdr.config;
        Tables {
            hdr,
            choices,
            groups,
            fallback,
            vers,
            rec: hdr.rec_bytes(),
            xbits: c.index_bits as u32,
            xmask: (1u32 << c.index_bits) - 1,
            ymask: ((1u64 << c.array_bits) - 1) as u32,
            mark: c.mark(),
            vbits: hdr.value_bits as usize,
        }
    }

    #[inline(always)]
    pub fn hash(&self, key: &[u8]) -> KeyHash {
        hash128(key, self.hdr.seed)
    }

    /// Global group id of a key hash.
    #[inline(always)]
    pub fn group_of(&self, h: KeyHash) -> usize {
        let (blk, bkt) = locate(h, self.hdr.n_blocks);
        self.group_in(blk as usize, bkt)
    }

    /// Global group id of bucket `bkt` of block `blk` (its choice byte read now).
    #[inline(always)]
    fn group_in(&self, blk: usize, bkt: usize) -> usize {
        let cb = M::byte(self.choices, blk * CHOICE_BYTES_PER_BLOCK + bkt / 4);
        blk * GROUPS_PER_BLOCK + CAND[bkt][choice_of(cb, bkt)] as usize
    }

    #[inline(always)]
    fn entry(&self, off: usize) -> u32 {
        M::entry(self.groups, off)
    }

    /// Value of key hash `h` in global group `gi` (any config, read at run time).
    #[inline(always)]
    pub fn eval_group(&self, gi: usize, h: KeyHash) -> u16 {
        by_config!(self, eval(gi, h))
    }

    /// [`Self::eval_group`] for the config `XB+YB`, whose masks and shifts are then constants.
    #[inline(always)]
    fn eval<const XB: u32, const YB: u32>(&self, gi: usize, h: KeyHash) -> u16 {
        debug_assert_eq!((self.xbits, self.ymask), (XB, ((1u64 << YB) - 1) as u32));
        let eb = ((XB + YB) / 8) as usize;
        let alog = if YB == 8 { 3 } else { 4 };
        let xmask = (1u32 << XB) - 1;
        let ymask = ((1u64 << YB) - 1) as u32;
        let base = gi * self.rec;
        let (a, b) = family(h);
        let w = self.entry(base);
        let idx = (w & xmask) as u16;
        if idx == xmask as u16 {
            return self.fallback_get(h);
        }
        let mut v = (((w >> XB) & ymask) >> position(a, b, idx, alog)) & 1;
        for j in 1..self.vbits {
            let w = self.entry(base + j * eb);
            let idx = (w & xmask) as u16;
            v |= ((((w >> XB) & ymask) >> position(a, b, idx, alog)) & 1) << j;
        }
        v as u16
    }

    /// Whether global group `gi` is answered from the fallback table.
    pub fn is_fallback_group(&self, gi: usize) -> bool {
        (self.entry(gi * self.rec) & self.xmask) as u16 == self.mark
    }

    pub fn fallback_len(&self) -> usize {
        M::fallback_len(self.fallback)
    }

    /// The fallback table's value of `h`; 0 for a hash that is not there.
    pub fn fallback_get(&self, h: KeyHash) -> u16 {
        M::fallback_get(self.fallback, h)
    }

    #[inline(always)]
    pub fn lookup_hash(&self, h: KeyHash) -> u16 {
        if M::SYNCED {
            let (blk, bkt) = locate(h, self.hdr.n_blocks);
            self.lookup_synced(blk as usize, bkt, h)
        } else {
            self.eval_group(self.group_of(h), h)
        }
    }

    /// A lookup under block `blk`'s version: read the version, the choice and the record, and
    /// retry until the version was even and unchanged across the reads (the block was not
    /// written meanwhile: see [`crate::live`]).
    #[inline(never)]
    fn lookup_synced(&self, blk: usize, bkt: usize, h: KeyHash) -> u16 {
        loop {
            let tok = M::begin(self.vers, blk);
            if tok & 1 == 0 {
                let v = self.eval_group(self.group_in(blk, bkt), h);
                M::read_fence();
                if M::still(self.vers, blk, tok) {
                    return v;
                }
            }
            M::spin();
        }
    }

    /// Algorithm 1 on hashes: stage 1 locates the choice byte and prefetches it, stage 2 reads
    /// the choice and prefetches the group record a few keys later, stage 3 evaluates the window
    /// of [`WINDOW`] keys once all its records are on their way.
    pub fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
        assert_eq!(
            hs.len(),
            out.len(),
            "lookup_batch_hashes: hs and out differ in length"
        );
        by_config!(self, batch_hashes(hs, out))
    }

    fn batch_hashes<const XB: u32, const YB: u32>(&self, hs: &[KeyHash], out: &mut [u16]) {
        let mut hw = [KeyHash::default(); WINDOW];
        for (hc, ow) in hs.chunks(WINDOW).zip(out.chunks_mut(WINDOW)) {
            hw[..hc.len()].copy_from_slice(hc);
            self.pipeline::<XB, YB>(hc.len(), ow, |i, hw| hw[i], &mut hw);
        }
    }

    /// Algorithm 1 on keys: the same three stages, stage 1 also hashes; the next window's key
    /// bytes are prefetched while a window runs.
    pub fn lookup_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        assert_eq!(
            keys.len(),
            out.len(),
            "lookup_batch: keys and out differ in length"
        );
        by_config!(self, batch_keys(keys, out))
    }

    fn batch_keys<const XB: u32, const YB: u32>(&self, keys: &[&[u8]], out: &mut [u16]) {
        let mut hs = [KeyHash::default(); WINDOW];
        for (w, (kw, ow)) in keys.chunks(WINDOW).zip(out.chunks_mut(WINDOW)).enumerate() {
            // Start loading the next window's key bytes (keys that are not in cache, e.g.
            // scattered in a large array, would otherwise stall the hashing).
            if let Some(next) = keys.get((w + 1) * WINDOW..) {
                for k in next.iter().take(WINDOW) {
                    prefetch(k, 0);
                }
            }
            self.pipeline::<XB, YB>(kw.len(), ow, |i, _| self.hash(kw[i]), &mut hs);
        }
    }

    /// The three stages over `m <= WINDOW` keys: stage 1 hashes key `i` (through `hash_of`,
    /// storing it in `hs[i]`) and prefetches its choice byte; stage 2 runs [`CHOICE_DIST`] keys
    /// behind it, reading the choice and prefetching the group record; stage 3 evaluates every
    /// key once all records of the window are on their way.
    ///
    /// The choice bytes (64 per block) mostly come from the cache, the records from DRAM, so the
    /// record loads get the longest head start and all of a window's are in flight together. The
    /// rolling pipeline this replaced (all stages 6 keys apart, commit e321413) kept only ~6
    /// record loads in flight and drained at the end of every window: `scalebricks bench gpt
    /// --keys 16000000 --value-bits 2` gave 40.7 Mops batched with it and 69.1 with this
    /// (medians of 3, docs/bench/gpt.md).
    #[inline(always)]
    fn pipeline<const XB: u32, const YB: u32>(
        &self,
        m: usize,
        out: &mut [u16],
        hash_of: impl Fn(usize, &[KeyHash; WINDOW]) -> KeyHash,
        hs: &mut [KeyHash; WINDOW],
    ) {
        let m = m.min(WINDOW).min(out.len());
        // Per key: the choice byte's offset (high bits) and the bucket (low 8 bits), then the
        // global group.
        // With versioned arrays (`M::SYNCED`), also the block's version before the choice is
        // read, checked again after the window's records are evaluated.
        let mut cis = [0usize; WINDOW];
        let mut gis = [0usize; WINDOW];
        let mut toks = [0u32; WINDOW];
        let stage2 = |j: usize,
                      cis: &[usize; WINDOW],
                      gis: &mut [usize; WINDOW],
                      toks: &mut [u32; WINDOW]| {
            let (off, bkt) = (cis[j] >> 8, cis[j] & 0xff);
            let blk = off / CHOICE_BYTES_PER_BLOCK;
            if M::SYNCED {
                toks[j] = M::begin(self.vers, blk);
            }
            let cb = M::byte(self.choices, off);
            let gi = blk * GROUPS_PER_BLOCK + CAND[bkt][choice_of(cb, bkt)] as usize;
            gis[j] = gi;
            let base = gi * self.rec;
            M::prefetch(self.groups, base);
            M::prefetch(self.groups, base + self.rec - 1);
        };
        for i in 0..m {
            let h = hash_of(i, hs);
            hs[i] = h;
            let (blk, bkt) = locate(h, self.hdr.n_blocks);
            let off = blk as usize * CHOICE_BYTES_PER_BLOCK + bkt / 4;
            cis[i] = (off << 8) | bkt;
            M::prefetch(self.choices, off);
            if i >= CHOICE_DIST {
                stage2(i - CHOICE_DIST, &cis, &mut gis, &mut toks);
            }
        }
        for j in m.saturating_sub(CHOICE_DIST)..m {
            stage2(j, &cis, &mut gis, &mut toks);
        }
        for ((o, &gi), &h) in out[..m].iter_mut().zip(&gis[..m]).zip(&hs[..m]) {
            *o = self.eval::<XB, YB>(gi, h);
        }
        if M::SYNCED {
            // A key whose block was being written (odd version) or was written since its
            // version was read is looked up again on its own.
            M::read_fence();
            for j in 0..m {
                let (off, bkt) = (cis[j] >> 8, cis[j] & 0xff);
                let blk = off / CHOICE_BYTES_PER_BLOCK;
                if !M::still(self.vers, blk, toks[j]) {
                    out[j] = self.lookup_synced(blk, bkt, hs[j]);
                }
            }
        }
    }

    pub fn stats(&self, page_info: PageInfo) -> Stats {
        let h = &self.hdr;
        let fallback_groups = (0..h.n_groups() as usize)
            .filter(|&g| self.is_fallback_group(g))
            .count() as u64;
        Stats::of_shape(
            h.config,
            h.value_bits,
            h.n_keys,
            h.n_blocks,
            self.fallback_len() as u64,
            fallback_groups,
            page_info,
        )
    }
}

impl Stats {
    /// The statistics of a table of `n_keys` keys in `n_blocks` blocks of that shape, with
    /// `fallback_keys` keys in its fallback table from `fallback_groups` groups, as
    /// [`SetSep::stats`] counts them: for a copy of a table in another form (the XDP fast
    /// path's mirror of its maps).
    pub fn of_shape(
        config: Config,
        value_bits: u8,
        n_keys: u64,
        n_blocks: u64,
        fallback_keys: u64,
        fallback_groups: u64,
        page_info: PageInfo,
    ) -> Stats {
        let h = Header {
            config,
            value_bits,
            seed: 0,
            n_keys,
            n_blocks,
            build_id: 0,
            seq: 0,
            last_delta: 0,
        };
        let bits = h.n_blocks * 256 * 2
            + h.n_groups() * h.value_bits as u64 * h.config.bits_per_group_bit() as u64
            + fallback_keys * (FB_ENTRY as u64 * 8);
        Stats {
            keys: n_keys,
            value_bits,
            config,
            bits_per_key: if n_keys == 0 {
                0.0
            } else {
                bits as f64 / n_keys as f64
            },
            fallback_keys,
            bytes: crate::format::serialized_len(&h, fallback_keys as usize) as u64,
            blocks: n_blocks,
            groups: h.n_groups(),
            fallback_groups,
            page_info,
        }
    }
}

/// Position of `h` in a sorted fallback byte table (`Ok`) or where it would go (`Err`).
pub(crate) fn fallback_find(fb: &[u8], h: KeyHash) -> Result<usize, usize> {
    let key = (h.lo, h.hi);
    let n = fb.len() / FB_ENTRY;
    let (mut lo, mut hi) = (0usize, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let e = fallback_key(fb, mid);
        match e.cmp(&key) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return Ok(mid),
        }
    }
    Err(lo)
}

/// The `(lo, hi)` hash of fallback entry `i`.
pub(crate) fn fallback_key(fb: &[u8], i: usize) -> (u64, u64) {
    let e = &fb[i * FB_ENTRY..(i + 1) * FB_ENTRY];
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&e[0..8]);
    hi.copy_from_slice(&e[8..16]);
    (u64::from_le_bytes(lo), u64::from_le_bytes(hi))
}

/// Encodes one fallback entry.
pub(crate) fn fallback_entry(h: KeyHash, v: u16) -> [u8; FB_ENTRY] {
    let mut e = [0u8; FB_ENTRY];
    e[0..8].copy_from_slice(&h.lo.to_le_bytes());
    e[8..16].copy_from_slice(&h.hi.to_le_bytes());
    e[16..18].copy_from_slice(&v.to_le_bytes());
    e
}

impl SetSep {
    pub(crate) fn tables(&self) -> Tables<'_> {
        Tables::new(
            self.hdr,
            &self.choices,
            &self.groups,
            Fallback::Map(&self.fallback),
        )
    }

    /// The value of `key` (arbitrary for a key the table was not built with).
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> u16 {
        let t = self.tables();
        t.lookup_hash(t.hash(key))
    }

    /// Looks up every key of `keys` into `out` through the three-stage prefetch pipeline of the
    /// paper's Algorithm 1 (32 keys per stage). Any batch size; results equal [`SetSep::lookup`].
    ///
    /// # Panics
    /// If `keys` and `out` differ in length.
    pub fn lookup_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        self.tables().lookup_batch(keys, out)
    }

    /// The table's hash of `key` (what [`SetSep::lookup_hash`] takes; the FIB can reuse it).
    #[inline]
    pub fn hash_key(&self, key: &[u8]) -> KeyHash {
        hash128(key, self.hdr.seed)
    }

    /// The value of the key whose hash is `h` (from [`SetSep::hash_key`]).
    #[inline]
    pub fn lookup_hash(&self, h: KeyHash) -> u16 {
        self.tables().lookup_hash(h)
    }

    /// Batched [`SetSep::lookup_hash`] (Algorithm 1 without the hashing).
    ///
    /// # Panics
    /// If `hs` and `out` differ in length.
    pub fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
        self.tables().lookup_batch_hashes(hs, out)
    }

    /// Size, space per key and fallback use.
    pub fn stats(&self) -> Stats {
        let pi = self.choices.page_info().merge(self.groups.page_info());
        self.tables().stats(pi)
    }

    /// Bytes of the table, as [`Stats::bytes`] counts them, without the statistics' walk
    /// over every group.
    pub fn bytes(&self) -> usize {
        crate::format::serialized_len(&self.hdr, self.tables().fallback_len())
    }

    /// Hash seed of the table.
    pub fn seed(&self) -> u64 {
        self.hdr.seed
    }

    /// Build id of the table ([`crate::BuildOptions::build_id`]).
    pub fn build_id(&self) -> u64 {
        self.hdr.build_id
    }

    /// The table's fingerprint: a digest of its seed, shape (config, value bits, blocks) and
    /// build id. Every [`Delta`] carries its table's; [`SetSep::apply_delta`] refuses others.
    pub fn fingerprint(&self) -> u64 {
        self.hdr.fingerprint()
    }

    /// Sequence number of the last delta applied to this table (its owner's count of changes;
    /// 0 after the build). The next delta it accepts is `seq() + 1`.
    pub fn seq(&self) -> u64 {
        self.hdr.seq
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.hdr.n_keys
    }

    /// Whether the table has no keys.
    pub fn is_empty(&self) -> bool {
        self.hdr.n_keys == 0
    }

    /// Bits per value.
    pub fn value_bits(&self) -> u8 {
        self.hdr.value_bits
    }

    /// The table's config.
    pub fn config(&self) -> Config {
        self.hdr.config
    }

    /// Number of 1024-key blocks.
    pub fn num_blocks(&self) -> u64 {
        self.hdr.n_blocks
    }

    /// Applies a delta produced by [`crate::Updatable`] on an identical table: copies the group
    /// record and edits the fallback table. Deltas apply in their owner's order: the table
    /// takes delta `seq() + 1`, takes a duplicate of the last one it applied as a no-op, and
    /// refuses a delta of another table ([`DeltaError::ForeignTable`]), an older one
    /// ([`DeltaError::Stale`]), a different one with the last number
    /// ([`DeltaError::Conflict`]) and one past a gap ([`DeltaError::Gap`]: resync from a
    /// snapshot). On error the table is unchanged.
    pub fn apply_delta(&mut self, d: &Delta) -> Result<(), DeltaError> {
        crate::update::apply(self, d, true)
    }

    /// Applies a delta of one of several owners, each of which owns a range of the table's
    /// blocks and runs its own [`crate::Updatable`] (built with the same seed, build id and
    /// block count: [`crate::BuildOptions::capacity`]): the checks of
    /// [`SetSep::apply_delta`] (shape, fingerprint, fallback edits) except the sequence
    /// number, which the caller keeps per owner (each owner numbers its own deltas 1, 2, ...;
    /// `sb-control` refuses gaps and replays before calling this). The table's own
    /// [`SetSep::seq`] and key count are left as they are. On error the table is unchanged.
    ///
    /// Owners touch disjoint groups and disjoint fallback entries, so replicas that apply each
    /// owner's deltas in that owner's order end byte-identical whatever the interleaving of
    /// owners ([`SetSep::content_digest`]).
    pub fn apply_owner_delta(&mut self, d: &Delta) -> Result<(), DeltaError> {
        crate::update::apply(self, d, false)
    }

    /// A digest of what lookups read: fingerprint, bucket choices, group records and fallback
    /// entries (not the key count or the sequence number, which differ between a single-owner
    /// table and the replicas of a table with several owners). Two tables with one digest
    /// answer every lookup alike.
    pub fn content_digest(&self) -> u64 {
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&self.hdr.fingerprint().to_le_bytes());
        h.update(&self.choices[..self.hdr.choice_bytes()]);
        h.update(&self.groups[..self.hdr.group_bytes()]);
        for (&(lo, hi), &v) in &self.fallback {
            h.update(&fallback_entry(KeyHash { lo, hi }, v));
        }
        h.digest()
    }

    /// Replaces blocks `piece.range()` (their bucket choices, records and fallback entries)
    /// with the piece's: how a replica resyncs one owner's range, or joins the pieces of a
    /// distributed build one at a time. The piece must be of this table (config, value bits,
    /// seed, build id, block count); on error the table is unchanged.
    pub fn install_piece(&mut self, p: &crate::Piece) -> Result<(), BuildError> {
        let incoming = check_piece(&self.hdr, p)?;
        let n_blocks = self.hdr.n_blocks;
        self.fallback
            .retain(|&(lo, hi), _| !p.range.contains(&locate(KeyHash { lo, hi }, n_blocks).0));
        self.fallback.extend(incoming);
        let (c0, g0) = piece_offsets(&self.hdr, p);
        self.choices[c0..c0 + p.choices.len()].copy_from_slice(&p.choices);
        self.groups[g0..g0 + p.groups.len()].copy_from_slice(&p.groups);
        Ok(())
    }

    /// Blocks `range` of this table as a [`crate::Piece`] counting `keys` keys (a replica's
    /// copy of one owner's blocks, which [`SetSep::install_piece`] installs elsewhere as the
    /// owner's [`crate::Updatable::piece`] would: the inverse of `install_piece`; the table
    /// keeps no key count per range, so the caller gives it).
    pub fn piece(
        &self,
        range: std::ops::Range<u64>,
        keys: u64,
    ) -> Result<crate::Piece, BuildError> {
        let h = &self.hdr;
        if range.start >= range.end || range.end > h.n_blocks {
            return Err(BuildError::BadRange {
                start: range.start,
                end: range.end,
                total: h.n_blocks,
            });
        }
        let (start, end) = (range.start as usize, range.end as usize);
        let rec = h.rec_bytes();
        let mut fb: Vec<(&(u64, u64), &u16)> = (self.fallback.iter())
            .filter(|(&(lo, hi), _)| range.contains(&locate(KeyHash { lo, hi }, h.n_blocks).0))
            .collect();
        fb.sort_unstable();
        let mut fallback = Vec::with_capacity(fb.len() * FB_ENTRY);
        for (&(lo, hi), &v) in fb {
            fallback.extend_from_slice(&fallback_entry(KeyHash { lo, hi }, v));
        }
        Ok(crate::Piece {
            config: h.config,
            value_bits: h.value_bits,
            seed: h.seed,
            build_id: h.build_id,
            total_blocks: h.n_blocks,
            range,
            keys,
            choices: self.choices[start * CHOICE_BYTES_PER_BLOCK..end * CHOICE_BYTES_PER_BLOCK]
                .to_vec(),
            groups: self.groups[start * GROUPS_PER_BLOCK * rec..end * GROUPS_PER_BLOCK * rec]
                .to_vec(),
            fallback,
        })
    }
}

/// Checks that piece `p` fits a table with header `hdr` (config, value bits, seed, build id,
/// block count, array sizes, fallback entries inside its blocks) and returns its fallback
/// entries.
pub(crate) fn check_piece(hdr: &Header, p: &crate::Piece) -> Result<FbMap, BuildError> {
    let h = hdr;
    if (p.config, p.value_bits, p.seed, p.build_id, p.total_blocks)
        != (h.config, h.value_bits, h.seed, h.build_id, h.n_blocks)
    {
        return Err(BuildError::PieceMismatch(
            "piece differs from the table in config, value bits, seed, build id or blocks",
        ));
    }
    let (start, end) = (p.range.start as usize, p.range.end as usize);
    let rec = h.rec_bytes();
    if start > end
        || end as u64 > h.n_blocks
        || p.choices.len() != (end - start) * CHOICE_BYTES_PER_BLOCK
        || p.groups.len() != (end - start) * GROUPS_PER_BLOCK * rec
        || p.fallback.len() % FB_ENTRY != 0
    {
        return Err(BuildError::PieceMismatch(
            "piece arrays have the wrong size",
        ));
    }
    let incoming = fb_map(&p.fallback);
    if incoming
        .keys()
        .any(|&(lo, hi)| !p.range.contains(&locate(KeyHash { lo, hi }, h.n_blocks).0))
    {
        return Err(BuildError::PieceMismatch(
            "piece holds a fallback entry outside its blocks",
        ));
    }
    Ok(incoming)
}

/// Byte offsets of piece `p`'s first choice byte and first record in a table with header
/// `hdr` (a piece [`check_piece`] accepted).
pub(crate) fn piece_offsets(hdr: &Header, p: &crate::Piece) -> (usize, usize) {
    let start = p.range.start as usize;
    (
        start * CHOICE_BYTES_PER_BLOCK,
        start * GROUPS_PER_BLOCK * hdr.rec_bytes(),
    )
}
