//! Construction: hash and partition keys by block, then per block (in parallel) balance buckets
//! over groups and search every group's hash functions.

use crate::kernel::{array_for, GKey, Searcher};
use crate::layout::{
    locate, num_blocks, BUCKETS_PER_BLOCK, CAND, CHOICE_BYTES_PER_BLOCK, GROUPS_PER_BLOCK,
    MAX_KEY_LEN, MIN_KEY_LEN,
};
use crate::table::{fallback_entry, Header, FB_ENTRY, SLACK};
use crate::{BuildError, BuildOptions, Config, Kernel, SetSep};
use rayon::prelude::*;
use sb_common::{hash128, HugeArray, KeyHash};
use std::ops::Range;

/// Blocks per parallel task (and per progress report).
const TASK_BLOCKS: usize = 16;

/// Times a block with a failed group search is balanced again (16-bit indexes only; see
/// `BlockBuilder::build`).
const RETRIES: u32 = 3;

/// The blocks `range` of a table, built by one node (paper section 4.5); see
/// [`SetSep::build_blocks`] and [`SetSep::assemble`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub(crate) config: Config,
    pub(crate) value_bits: u8,
    pub(crate) seed: u64,
    pub(crate) build_id: u64,
    pub(crate) total_blocks: u64,
    pub(crate) range: Range<u64>,
    pub(crate) keys: u64,
    pub(crate) choices: Vec<u8>,
    pub(crate) groups: Vec<u8>,
    /// Sorted fallback entries.
    pub(crate) fallback: Vec<u8>,
}

impl Piece {
    /// The blocks this piece holds.
    pub fn range(&self) -> Range<u64> {
        self.range.clone()
    }
    /// Keys in these blocks.
    pub fn keys(&self) -> u64 {
        self.keys
    }
    /// Blocks of the whole table.
    pub fn total_blocks(&self) -> u64 {
        self.total_blocks
    }
    /// Hash seed of the table the piece belongs to.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// Build id of the table the piece belongs to ([`BuildOptions::build_id`]).
    pub fn build_id(&self) -> u64 {
        self.build_id
    }

    /// The piece in a binary form for sending to the other nodes: magic `SBPIECE6` (`SBPIECE5`
    /// and `SBPIECE4` pieces searched the hash families of format versions 5 and 4), index bits, array bits,
    /// value bits, a zero byte, seed, build id, total blocks, range start, range end, keys,
    /// fallback entries (u64 each), choices, groups, fallback entries, XXH3-64 of all before.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            PIECE_HEADER + self.choices.len() + self.groups.len() + self.fallback.len() + 8,
        );
        out.extend_from_slice(PIECE_MAGIC);
        out.extend_from_slice(&[
            self.config.index_bits,
            self.config.array_bits,
            self.value_bits,
            0,
        ]);
        for x in [
            self.seed,
            self.build_id,
            self.total_blocks,
            self.range.start,
            self.range.end,
            self.keys,
            (self.fallback.len() / FB_ENTRY) as u64,
        ] {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out.extend_from_slice(&self.choices);
        out.extend_from_slice(&self.groups);
        out.extend_from_slice(&self.fallback);
        let sum = xxhash_rust::xxh3::xxh3_64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Parses and validates [`Piece::to_bytes`] output (never panics): the checks of
    /// [`SetSep::from_bytes`] (config, sizes, checksum, fallback entries strictly sorted with
    /// values that fit the value bits, no more of them than keys) and a block range inside the
    /// table.
    pub fn from_bytes(b: &[u8]) -> Result<Piece, crate::LoadError> {
        use crate::LoadError;
        if b.len() < PIECE_HEADER + 8 {
            return Err(LoadError::Truncated {
                needed: (PIECE_HEADER + 8) as u64,
                got: b.len() as u64,
            });
        }
        if &b[..8] != PIECE_MAGIC {
            return Err(LoadError::BadMagic);
        }
        let (body, sum) = b.split_at(b.len() - 8);
        if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(sum.try_into().expect("8")) {
            return Err(LoadError::Checksum);
        }
        let config = Config {
            index_bits: b[8],
            array_bits: b[9],
        };
        let value_bits = b[10];
        if config.validate().is_err() || !(1..=16).contains(&value_bits) || b[11] != 0 {
            return Err(LoadError::BadHeader("bad config or value bits"));
        }
        let u = |i: usize| u64::from_le_bytes(b[12 + 8 * i..20 + 8 * i].try_into().expect("8"));
        let (seed, build_id, total_blocks) = (u(0), u(1), u(2));
        let (start, end, keys, nfb) = (u(3), u(4), u(5), u(6));
        if start >= end || end > total_blocks {
            return Err(LoadError::BadHeader("bad block range"));
        }
        if nfb > keys {
            return Err(LoadError::BadHeader("more fallback entries than keys"));
        }
        let rec = (config.entry_bytes() * value_bits as usize) as u64;
        let sizes = (|| {
            let nb = end - start;
            let c = nb.checked_mul(CHOICE_BYTES_PER_BLOCK as u64)?;
            let g = nb.checked_mul(GROUPS_PER_BLOCK as u64)?.checked_mul(rec)?;
            let f = nfb.checked_mul(FB_ENTRY as u64)?;
            let t = c
                .checked_add(g)?
                .checked_add(f)?
                .checked_add(PIECE_HEADER as u64)?;
            Some((c as usize, g as usize, t))
        })();
        let Some((c, g, t)) = sizes else {
            return Err(LoadError::BadHeader("sizes overflow"));
        };
        if t != body.len() as u64 {
            return Err(LoadError::TrailingBytes {
                expected: t + 8,
                got: b.len() as u64,
            });
        }
        let fallback = body[PIECE_HEADER + c + g..].to_vec();
        // The checks `SetSep::from_bytes` makes: a piece that passed none of them assembled
        // into a table that answered values wider than its value bits and did not reload.
        crate::format::check_fallback(&fallback, value_bits)?;
        Ok(Piece {
            config,
            value_bits,
            seed,
            build_id,
            total_blocks,
            range: start..end,
            keys,
            choices: body[PIECE_HEADER..PIECE_HEADER + c].to_vec(),
            groups: body[PIECE_HEADER + c..PIECE_HEADER + c + g].to_vec(),
            fallback,
        })
    }
}

const PIECE_MAGIC: &[u8; 8] = b"SBPIECE6";
const PIECE_HEADER: usize = 8 + 4 + 7 * 8;

/// One input chunk's keys sorted by block, and each block's start offset.
type Part = (Vec<Rec>, Vec<u32>);

/// One key during the build.
#[derive(Clone, Copy, Debug, Default)]
struct Rec {
    lo: u64,
    hi: u64,
    idx: u32,
    val: u16,
    /// Bucket inside the block.
    bkt: u8,
}

impl Rec {
    fn hash(&self) -> KeyHash {
        KeyHash {
            lo: self.lo,
            hi: self.hi,
        }
    }
}

pub(crate) fn check_opts(opts: &BuildOptions) -> Result<(), BuildError> {
    opts.config.validate()?;
    if !(1..=16).contains(&opts.value_bits) {
        return Err(BuildError::BadValueBits(opts.value_bits));
    }
    if opts.kernel == Kernel::Avx2 && !Kernel::avx2_available() {
        return Err(BuildError::KernelUnavailable);
    }
    Ok(())
}

fn check_inputs(keys: &[&[u8]], values: &[u16], opts: &BuildOptions) -> Result<(), BuildError> {
    check_opts(opts)?;
    if keys.len() != values.len() {
        return Err(BuildError::LengthMismatch {
            keys: keys.len(),
            values: values.len(),
        });
    }
    if keys.len() > u32::MAX as usize {
        return Err(BuildError::TooManyKeys(keys.len()));
    }
    Ok(())
}

/// The error for key `i` if its length or value is out of range.
#[inline(always)]
fn check_key(i: usize, k: &[u8], v: u16, vb: u8) -> Result<(), BuildError> {
    if !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&k.len()) {
        return Err(BuildError::BadKeyLength {
            index: i,
            len: k.len(),
        });
    }
    if vb < 16 && v >> vb != 0 {
        return Err(BuildError::ValueTooWide {
            index: i,
            value: v,
            value_bits: vb,
        });
    }
    Ok(())
}

fn pool(threads: usize) -> Result<rayon::ThreadPool, BuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| BuildError::ThreadPool(e.to_string()))
}

/// Builds blocks `range` of a `total`-block table into `choices_out` / `groups_out` (exactly
/// sized for the range) and returns the sorted fallback entries and the number of keys.
#[allow(clippy::too_many_arguments)]
fn build_range(
    keys: &[&[u8]],
    values: &[u16],
    opts: &BuildOptions,
    range: Range<u64>,
    total: u64,
    choices_out: &mut [u8],
    groups_out: &mut [u8],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(Vec<u8>, u64), BuildError> {
    let n = keys.len();
    let nb = (range.end - range.start) as usize;
    let threads = if opts.threads == 0 {
        rayon::current_num_threads()
    } else {
        opts.threads
    };
    let chunk = n
        .div_ceil(threads.max(1) * 4)
        .clamp(1 << 18, 1 << 22)
        .min(n.max(1));
    let nchunks = n.div_ceil(chunk);
    let seed = opts.seed;
    let start = range.start;
    // Phase A: hash and counting-sort each input chunk by block.
    let vb = opts.value_bits;
    let parts: Vec<Result<Part, BuildError>> = (0..nchunks)
        .into_par_iter()
        .map(|ci| {
            let s = ci * chunk;
            let e = (s + chunk).min(n);
            let mut recs = Vec::with_capacity(e - s);
            let mut offs = vec![0u32; nb + 1];
            for i in s..e {
                check_key(i, keys[i], values[i], vb)?;
                let h = hash128(keys[i], seed);
                let (blk, bkt) = locate(h, total);
                if blk >= start && blk < range.end {
                    offs[(blk - start) as usize + 1] += 1;
                    recs.push(Rec {
                        lo: h.lo,
                        hi: h.hi,
                        idx: i as u32,
                        val: values[i],
                        bkt: bkt as u8,
                    });
                }
            }
            for b in 0..nb {
                offs[b + 1] += offs[b];
            }
            let mut pos: Vec<u32> = offs[..nb].to_vec();
            let mut sorted = vec![Rec::default(); recs.len()];
            for r in recs {
                let rel = (locate(r.hash(), total).0 - start) as usize;
                sorted[pos[rel] as usize] = r;
                pos[rel] += 1;
            }
            Ok((sorted, offs))
        })
        .collect();
    // The first bad key in input order.
    let parts = parts.into_iter().collect::<Result<Vec<_>, _>>()?;
    let n_in_range: u64 = parts.iter().map(|p| p.0.len() as u64).sum();

    // Phase B: blocks in parallel.
    let rec_bytes = opts.config.entry_bytes() * opts.value_bits as usize;
    let gbytes = GROUPS_PER_BLOCK * rec_bytes;
    let results: Vec<Result<Vec<u8>, BuildError>> = choices_out
        .par_chunks_mut(TASK_BLOCKS * CHOICE_BYTES_PER_BLOCK)
        .zip(groups_out.par_chunks_mut(TASK_BLOCKS * gbytes))
        .enumerate()
        .map_init(
            || BlockBuilder::new(opts),
            |bb, (ti, (cch, gch))| {
                let mut fb = Vec::new();
                let nblk = cch.len() / CHOICE_BYTES_PER_BLOCK;
                for bi in 0..nblk {
                    let rel = ti * TASK_BLOCKS + bi;
                    bb.recs.clear();
                    for (sorted, offs) in &parts {
                        bb.recs
                            .extend_from_slice(&sorted[offs[rel] as usize..offs[rel + 1] as usize]);
                    }
                    bb.build(
                        keys,
                        start + rel as u64,
                        total,
                        &mut cch[bi * CHOICE_BYTES_PER_BLOCK..(bi + 1) * CHOICE_BYTES_PER_BLOCK],
                        &mut gch[bi * gbytes..(bi + 1) * gbytes],
                        &mut fb,
                    )?;
                }
                progress(nblk as u64);
                Ok(fb)
            },
        )
        .collect();
    drop(parts);
    let mut fb = Vec::new();
    for r in results {
        fb.extend_from_slice(&r?);
    }
    Ok((sort_fallback(&fb), n_in_range))
}

/// Sorts fallback entries by hash.
pub(crate) fn sort_fallback(fb: &[u8]) -> Vec<u8> {
    let mut ents: Vec<(u64, u64, u16)> = fb
        .chunks_exact(FB_ENTRY)
        .map(|e| {
            (
                u64::from_le_bytes(e[0..8].try_into().expect("8 bytes")),
                u64::from_le_bytes(e[8..16].try_into().expect("8 bytes")),
                u16::from_le_bytes([e[16], e[17]]),
            )
        })
        .collect();
    ents.sort_unstable();
    let mut out = Vec::with_capacity(fb.len());
    for (lo, hi, v) in ents {
        out.extend_from_slice(&fallback_entry(KeyHash { lo, hi }, v));
    }
    out
}

/// Per-thread state of the block builder.
pub(crate) struct BlockBuilder {
    cfg: Config,
    vbits: u32,
    seed: u64,
    runs: u32,
    searcher: Searcher,
    weight: [f64; 65],
    recs: Vec<Rec>,
    sorted: Vec<Rec>,
    gkeys: Vec<GKey>,
    grecs: Vec<Rec>,
}

impl BlockBuilder {
    pub(crate) fn new(opts: &BuildOptions) -> Self {
        // Expected search cost grows about 1.9x (8-bit arrays) / 1.6x (16-bit) per extra key.
        let r: f64 = if opts.config.array_bits == 8 {
            1.9
        } else {
            1.6
        };
        let mut weight = [0f64; 65];
        for (i, w) in weight.iter_mut().enumerate() {
            *w = r.powi(i as i32);
        }
        BlockBuilder {
            cfg: opts.config,
            vbits: opts.value_bits as u32,
            seed: opts.seed,
            runs: opts.runs.max(1),
            searcher: Searcher::new(opts.kernel),
            weight,
            recs: Vec::new(),
            sorted: Vec::new(),
            gkeys: Vec::new(),
            grecs: Vec::new(),
        }
    }

    fn build(
        &mut self,
        keys: &[&[u8]],
        block: u64,
        total: u64,
        choices: &mut [u8],
        groups: &mut [u8],
        fb: &mut Vec<u8>,
    ) -> Result<(), BuildError> {
        // Bucket sort. The order of keys inside a bucket or group does not change any result
        // (the search returns the smallest working index, the fallback table is sorted), so
        // pieces and one-shot builds agree whatever the input order.
        let _ = total;
        let mut size = [0u32; BUCKETS_PER_BLOCK];
        for r in &self.recs {
            size[r.bkt as usize] += 1;
        }
        let mut bstart = [0u32; BUCKETS_PER_BLOCK + 1];
        for b in 0..BUCKETS_PER_BLOCK {
            bstart[b + 1] = bstart[b] + size[b];
        }
        self.sorted.clear();
        self.sorted.resize(self.recs.len(), Rec::default());
        let mut pos = bstart;
        for r in &self.recs {
            let b = r.bkt as usize;
            self.sorted[pos[b] as usize] = *r;
            pos[b] += 1;
        }
        // Equal keys have equal hashes, hence share a bucket: check each bucket's pairs.
        for b in 0..BUCKETS_PER_BLOCK {
            let s = &mut self.sorted[bstart[b] as usize..bstart[b + 1] as usize];
            if s.len() > 16 {
                s.sort_unstable_by_key(|r| (r.lo, r.hi));
            }
            let s = &*s;
            for x in 1..s.len() {
                let from = if s.len() > 16 { x - 1 } else { 0 };
                for y in from..x {
                    if s[x].lo == s[y].lo && s[x].hi == s[y].hi {
                        return Err(collision(keys, s[x].idx, s[y].idx));
                    }
                }
            }
        }
        let fb_start = fb.len();
        self.assign(block, &size, &bstart, 0, choices, groups, fb);
        // A group whose search over 65,535 indexes failed (x = 16): balance the block again with
        // other randomized runs (another split of the buckets over the groups) and keep the
        // attempt with the fewest fallback keys. Rare (a few blocks per 10^6 at 16+8), so it
        // costs the build nothing measurable. With 8-bit indexes failures are the configuration's
        // trade-off (1-2% of keys) and are kept.
        let retries = if self.cfg.index_bits >= 16 {
            RETRIES
        } else {
            0
        };
        let mut attempt = 1;
        while fb.len() > fb_start && attempt <= retries {
            let mut c = vec![0u8; choices.len()];
            let mut g = vec![0u8; groups.len()];
            let mut f = Vec::new();
            self.assign(block, &size, &bstart, attempt, &mut c, &mut g, &mut f);
            if f.len() < fb.len() - fb_start {
                choices.copy_from_slice(&c);
                groups.copy_from_slice(&g);
                fb.truncate(fb_start);
                fb.extend_from_slice(&f);
            }
            attempt += 1;
        }
        Ok(())
    }

    /// Balances the block's buckets (randomized runs of `attempt`), writes the choices and
    /// every group's record, appends the keys of the groups whose search fails to `fb`.
    #[allow(clippy::too_many_arguments)]
    fn assign(
        &mut self,
        block: u64,
        size: &[u32; BUCKETS_PER_BLOCK],
        bstart: &[u32; BUCKETS_PER_BLOCK + 1],
        attempt: u32,
        choices: &mut [u8],
        groups: &mut [u8],
        fb: &mut Vec<u8>,
    ) {
        let choice = self.balance(block, size, attempt);
        choices.fill(0);
        for b in 0..BUCKETS_PER_BLOCK {
            choices[b / 4] |= (choice[b] as u8) << ((b % 4) * 2);
        }
        // Keys of each group, in bucket order.
        let mut gsize = [0u32; GROUPS_PER_BLOCK + 1];
        for b in 0..BUCKETS_PER_BLOCK {
            gsize[CAND[b][choice[b]] as usize + 1] += size[b];
        }
        for g in 0..GROUPS_PER_BLOCK {
            gsize[g + 1] += gsize[g];
        }
        let gstart = gsize;
        let mut gpos = gsize;
        self.grecs.clear();
        self.grecs.resize(self.sorted.len(), Rec::default());
        for b in 0..BUCKETS_PER_BLOCK {
            let g = CAND[b][choice[b]] as usize;
            for r in &self.sorted[bstart[b] as usize..bstart[b + 1] as usize] {
                self.grecs[gpos[g] as usize] = *r;
                gpos[g] += 1;
            }
        }
        let rec_bytes = self.cfg.entry_bytes() * self.vbits as usize;
        for g in 0..GROUPS_PER_BLOCK {
            let rs = &self.grecs[gstart[g] as usize..gstart[g + 1] as usize];
            self.gkeys.clear();
            self.gkeys.extend(rs.iter().map(|r| {
                let (a, b) = crate::layout::family(r.hash());
                GKey { a, b, v: r.val }
            }));
            let out = &mut groups[g * rec_bytes..(g + 1) * rec_bytes];
            if !solve_group(&mut self.searcher, self.cfg, self.vbits, &self.gkeys, out) {
                for r in rs {
                    fb.extend_from_slice(&fallback_entry(r.hash(), r.val));
                }
            }
        }
    }

    /// Rebuilds one block of a table of `total` blocks from its keys' hashes and values:
    /// bucket choices (64 bytes), group records (64 records) and the block's fallback entries
    /// (sorted), exactly as a build of these keys would make the block. The hashes must be
    /// distinct.
    pub(crate) fn rebuild_block(
        &mut self,
        keys: &[(KeyHash, u16)],
        block: u64,
        total: u64,
    ) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        self.recs.clear();
        self.recs
            .extend(keys.iter().enumerate().map(|(i, &(h, val))| {
                let (blk, bkt) = locate(h, total);
                debug_assert_eq!(blk, block);
                Rec {
                    lo: h.lo,
                    hi: h.hi,
                    idx: i as u32,
                    val,
                    bkt: bkt as u8,
                }
            }));
        let rec_bytes = self.cfg.entry_bytes() * self.vbits as usize;
        let mut choices = vec![0u8; CHOICE_BYTES_PER_BLOCK];
        let mut groups = vec![0u8; GROUPS_PER_BLOCK * rec_bytes];
        let mut fb = Vec::new();
        self.build(&[], block, total, &mut choices, &mut groups, &mut fb)
            .expect("distinct hashes build");
        (choices, groups, sort_fallback(&fb))
    }

    /// Greedy balancing (largest bucket first, least-loaded candidate, random tie-break),
    /// `runs` randomized runs (those numbered from `attempt * runs`), the cheapest kept. Returns
    /// each bucket's choice.
    fn balance(
        &self,
        block: u64,
        size: &[u32; BUCKETS_PER_BLOCK],
        attempt: u32,
    ) -> [usize; BUCKETS_PER_BLOCK] {
        // Non-empty buckets by size descending, ties by bucket number.
        // Counting sort (sizes above 63 share the top class; their relative order is by number).
        let mut cnt = [0u16; 65];
        for &sz in size.iter() {
            cnt[64 - (sz as usize).min(64)] += 1;
        }
        let mut at = [0u16; 65];
        for c in 1..65 {
            at[c] = at[c - 1] + cnt[c - 1];
        }
        let nonempty = BUCKETS_PER_BLOCK - cnt[64] as usize;
        let mut order = [0u8; BUCKETS_PER_BLOCK];
        for (b, &sz) in size.iter().enumerate() {
            let c = 64 - (sz as usize).min(64);
            order[at[c] as usize] = b as u8;
            at[c] += 1;
        }
        let order = &order[..nonempty];
        let mut best = [0usize; BUCKETS_PER_BLOCK];
        let mut best_cost = f64::INFINITY;
        let mut cur = [0usize; BUCKETS_PER_BLOCK];
        for run in attempt * self.runs..(attempt + 1) * self.runs {
            let mut rng = mix(self.seed ^ mix(block.wrapping_mul(0x9e37_79b9) ^ run as u64));
            let mut load = [0u32; GROUPS_PER_BLOCK];
            for &b in order {
                let b = b as usize;
                let cands = &CAND[b];
                let l = [
                    load[cands[0] as usize],
                    load[cands[1] as usize],
                    load[cands[2] as usize],
                    load[cands[3] as usize],
                ];
                let min = l[0].min(l[1]).min(l[2].min(l[3]));
                let ties = (l[0] == min) as u32
                    | ((l[1] == min) as u32) << 1
                    | ((l[2] == min) as u32) << 2
                    | ((l[3] == min) as u32) << 3;
                let c = if ties & (ties - 1) == 0 {
                    ties.trailing_zeros() as usize
                } else {
                    // The k-th set bit of `ties`, k uniform below its popcount.
                    rng = mix(rng);
                    let k = sb_common::hash::reduce32(rng as u32, ties.count_ones());
                    let mut t = ties;
                    for _ in 0..k {
                        t &= t - 1;
                    }
                    t.trailing_zeros() as usize
                };
                cur[b] = c;
                load[cands[c] as usize] += size[b];
            }
            let cost: f64 = load
                .iter()
                .map(|&l| self.weight[(l as usize).min(64)])
                .sum();
            if cost < best_cost {
                best_cost = cost;
                best = cur;
            }
        }
        best
    }
}

fn collision(keys: &[&[u8]], a: u32, b: u32) -> BuildError {
    let (i, j) = (a.min(b) as usize, a.max(b) as usize);
    if keys[i] == keys[j] {
        BuildError::DuplicateKey { index: j, first: i }
    } else {
        BuildError::HashCollision { a: i, b: j }
    }
}

/// Searches all value bits of a group and writes its record; on failure writes the fallback
/// marker and returns false.
pub(crate) fn solve_group(
    searcher: &mut Searcher,
    cfg: Config,
    vbits: u32,
    keys: &[GKey],
    out: &mut [u8],
) -> bool {
    let want = ((1u32 << vbits) - 1) as u16;
    let mut idx = [0u16; 16];
    let found = searcher.search(cfg, keys, want, &mut idx);
    if found == want {
        let mut entries = [(0u16, 0u32); 16];
        for j in 0..vbits {
            entries[j as usize] = (idx[j as usize], array_for(cfg, keys, j, idx[j as usize]));
        }
        write_record(cfg, &entries[..vbits as usize], out);
        true
    } else {
        write_mark(cfg, out);
        false
    }
}

/// Writes a group record: one (index, array) entry per value bit.
pub(crate) fn write_record(cfg: Config, entries: &[(u16, u32)], out: &mut [u8]) {
    let eb = cfg.entry_bytes();
    for (j, &(idx, arr)) in entries.iter().enumerate() {
        let w = (idx as u64) | ((arr as u64) << cfg.index_bits);
        out[j * eb..(j + 1) * eb].copy_from_slice(&w.to_le_bytes()[..eb]);
    }
}

/// Writes the fallback marker record (bit 0 index = `mark`, everything else zero).
pub(crate) fn write_mark(cfg: Config, out: &mut [u8]) {
    out.fill(0);
    let eb = cfg.entry_bytes();
    let w = cfg.mark() as u64;
    out[..eb].copy_from_slice(&w.to_le_bytes()[..eb]);
}

/// One splitmix64 step from state `z`.
pub(crate) fn mix(mut z: u64) -> u64 {
    sb_common::splitmix64(&mut z)
}

impl SetSep {
    /// Builds a table mapping `keys[i]` to `values[i]`.
    ///
    /// Keys are 4 to 64 bytes, distinct; values fit in `opts.value_bits` bits. Uses
    /// `opts.threads` threads of a local pool. The result does not depend on the thread count or
    /// the kernel.
    pub fn build(
        keys: &[&[u8]],
        values: &[u16],
        opts: &BuildOptions,
    ) -> Result<SetSep, BuildError> {
        Self::build_with_progress(keys, values, opts, &|_| {})
    }

    /// [`SetSep::build`], calling `on_blocks_done(n)` from the build threads each time `n` more
    /// blocks are finished (the total is [`num_blocks`]`(keys.len())`).
    pub fn build_with_progress(
        keys: &[&[u8]],
        values: &[u16],
        opts: &BuildOptions,
        on_blocks_done: &(dyn Fn(u64) + Sync),
    ) -> Result<SetSep, BuildError> {
        let total = num_blocks((keys.len() as u64).max(opts.capacity));
        let pool = pool(opts.threads)?;
        pool.install(|| {
            check_inputs(keys, values, opts)?;
            let hdr = Header {
                config: opts.config,
                value_bits: opts.value_bits,
                seed: opts.seed,
                n_keys: keys.len() as u64,
                n_blocks: total,
                build_id: opts.build_id,
                seq: 0,
                last_delta: 0,
            };
            let mut choices = HugeArray::<u8>::zeroed(hdr.choice_bytes());
            let mut groups = HugeArray::<u8>::zeroed(hdr.group_bytes() + SLACK);
            let gb = hdr.group_bytes();
            let r = build_range(
                keys,
                values,
                opts,
                0..total,
                total,
                &mut choices,
                &mut groups[..gb],
                on_blocks_done,
            )?;
            let (fallback, _) = r;
            Ok(SetSep {
                hdr,
                choices,
                groups,
                fallback: crate::table::fb_map(&fallback),
            })
        })
    }

    /// Builds only blocks `range` of a table of `total_blocks` blocks (paper section 4.5): a
    /// node passes the keys whose [`crate::block_of_key`] is in its range (keys outside the
    /// range are skipped). [`SetSep::assemble`] joins the pieces into the table a one-shot build
    /// of all keys gives, byte for byte, when `total_blocks` is [`num_blocks`] of the total key
    /// count.
    pub fn build_blocks(
        keys: &[&[u8]],
        values: &[u16],
        range: Range<u64>,
        total_blocks: u64,
        opts: &BuildOptions,
    ) -> Result<Piece, BuildError> {
        if range.start >= range.end || range.end > total_blocks {
            return Err(BuildError::BadRange {
                start: range.start,
                end: range.end,
                total: total_blocks,
            });
        }
        let pool = pool(opts.threads)?;
        pool.install(|| {
            check_inputs(keys, values, opts)?;
            let nb = (range.end - range.start) as usize;
            let rec = opts.config.entry_bytes() * opts.value_bits as usize;
            let mut choices = vec![0u8; nb * CHOICE_BYTES_PER_BLOCK];
            let mut groups = vec![0u8; nb * GROUPS_PER_BLOCK * rec];
            let (fallback, n) = build_range(
                keys,
                values,
                opts,
                range.clone(),
                total_blocks,
                &mut choices,
                &mut groups,
                &|_| {},
            )?;
            Ok(Piece {
                config: opts.config,
                value_bits: opts.value_bits,
                seed: opts.seed,
                build_id: opts.build_id,
                total_blocks,
                range,
                keys: n,
                choices,
                groups,
                fallback,
            })
        })
    }

    /// Joins pieces covering blocks `0..total_blocks` (in any order) into one table.
    pub fn assemble(mut pieces: Vec<Piece>) -> Result<SetSep, BuildError> {
        let first = pieces
            .first()
            .ok_or(BuildError::PieceMismatch("no pieces"))?
            .clone();
        pieces.sort_by_key(|p| p.range.start);
        let mut next = 0u64;
        for p in &pieces {
            if (p.config, p.value_bits, p.seed, p.build_id, p.total_blocks)
                != (
                    first.config,
                    first.value_bits,
                    first.seed,
                    first.build_id,
                    first.total_blocks,
                )
            {
                return Err(BuildError::PieceMismatch(
                    "pieces differ in config, value bits, seed, build id or total blocks",
                ));
            }
            if p.range.start != next {
                return Err(BuildError::PieceMismatch(
                    "block ranges overlap or leave a gap",
                ));
            }
            let nb = (p.range.end - p.range.start) as usize;
            let rec = p.config.entry_bytes() * p.value_bits as usize;
            if p.choices.len() != nb * CHOICE_BYTES_PER_BLOCK
                || p.groups.len() != nb * GROUPS_PER_BLOCK * rec
                || p.fallback.len() % FB_ENTRY != 0
            {
                return Err(BuildError::PieceMismatch(
                    "piece arrays have the wrong size",
                ));
            }
            next = p.range.end;
        }
        if next != first.total_blocks {
            return Err(BuildError::PieceMismatch("pieces do not cover all blocks"));
        }
        let hdr = Header {
            config: first.config,
            value_bits: first.value_bits,
            seed: first.seed,
            n_keys: pieces.iter().map(|p| p.keys).sum(),
            n_blocks: first.total_blocks,
            build_id: first.build_id,
            seq: 0,
            last_delta: 0,
        };
        let mut choices = HugeArray::<u8>::zeroed(hdr.choice_bytes());
        let mut groups = HugeArray::<u8>::zeroed(hdr.group_bytes() + SLACK);
        let mut fb = Vec::new();
        let (mut co, mut go) = (0usize, 0usize);
        for p in &pieces {
            choices[co..co + p.choices.len()].copy_from_slice(&p.choices);
            groups[go..go + p.groups.len()].copy_from_slice(&p.groups);
            co += p.choices.len();
            go += p.groups.len();
            fb.extend_from_slice(&p.fallback);
        }
        let fallback = sort_fallback(&fb);
        if crate::format::check_fallback(&fallback, hdr.value_bits).is_err() {
            return Err(BuildError::PieceMismatch(
                "two pieces hold the same fallback entry",
            ));
        }
        Ok(SetSep {
            hdr,
            choices,
            groups,
            fallback: crate::table::fb_map(&fallback),
        })
    }
}
