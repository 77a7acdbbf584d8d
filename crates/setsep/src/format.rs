//! The binary format (version 6; version 5 searched the family of `layout::position` with any
//! odd 32-bit slope, version 4 the 16-bit hash family `a + i * b (mod 2^16)`, version 3 had no build id or sequence number, version 2 hashed keys with the first
//! multiply-fold hash, which crafted keys could collapse, version 1 with XXH3-128), its
//! validating and trusted loaders, and the zero-copy view. A group record's indexes mean hash
//! functions of the family of `layout::position`; a table of another version answers wrong under
//! this one, so it is refused.
//!
//! Layout, all integers little endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `SBSETSEP` |
//! | 8 | 4 | format version (5) |
//! | 12 | 1 | index bits (x) |
//! | 13 | 1 | array bits (y) |
//! | 14 | 1 | value bits |
//! | 15 | 1 | reserved, 0 |
//! | 16 | 8 | hash seed |
//! | 24 | 8 | number of keys |
//! | 32 | 8 | number of blocks B |
//! | 40 | 8 | number of fallback entries F |
//! | 48 | 8 | build id |
//! | 56 | 8 | sequence number of the last delta applied (0: none) |
//! | 64 | 8 | digest of that delta (0 when none) |
//! | 72 | 64 B | bucket choices, 2 bits per bucket |
//! | | 64 B (x+y)/8 V | group records: per group, per value bit, `index | array << x` in (x+y)/8 bytes |
//! | | 18 F | fallback entries sorted by (hash lo, hash hi): hash lo, hash hi, value (u16) |
//! | | 8 | XXH3-64 of everything before |
#![allow(unsafe_code)]

use crate::layout::CHOICE_BYTES_PER_BLOCK;
use crate::table::{
    fallback_entry, fallback_key, fb_map, Fallback, Header, Tables, FB_ENTRY, SLACK,
};
use crate::{Config, LoadError, SetSep, Stats};
use sb_common::{HugeArray, KeyHash, PageInfo};
use std::io::Write;
use std::path::Path;

/// The format version this build writes and reads.
pub const VERSION: u32 = 6;
const MAGIC: &[u8; 8] = b"SBSETSEP";
const HEADER: usize = 72;
const CHECKSUM: usize = 8;

pub(crate) fn serialized_len(h: &Header, n_fb: usize) -> usize {
    HEADER + h.choice_bytes() + h.group_bytes() + n_fb * FB_ENTRY + CHECKSUM
}

fn header_bytes(h: &Header, n_fb: usize) -> [u8; HEADER] {
    let mut b = [0u8; HEADER];
    b[0..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    b[12] = h.config.index_bits;
    b[13] = h.config.array_bits;
    b[14] = h.value_bits;
    b[15] = 0;
    b[16..24].copy_from_slice(&h.seed.to_le_bytes());
    b[24..32].copy_from_slice(&h.n_keys.to_le_bytes());
    b[32..40].copy_from_slice(&h.n_blocks.to_le_bytes());
    b[40..48].copy_from_slice(&(n_fb as u64).to_le_bytes());
    b[48..56].copy_from_slice(&h.build_id.to_le_bytes());
    b[56..64].copy_from_slice(&h.seq.to_le_bytes());
    b[64..72].copy_from_slice(&h.last_delta.to_le_bytes());
    b
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(x)
}

/// Where the sections of a well-sized buffer are.
#[derive(Clone, Copy, Debug)]
struct Parsed {
    hdr: Header,
    choices: usize,
    groups: usize,
    fallback: usize,
    checksum: usize,
}

/// Checks the header and that the buffer has exactly the size it announces (O(1)).
fn parse(b: &[u8]) -> Result<Parsed, LoadError> {
    let got = b.len() as u64;
    if b.len() < 8 || &b[0..8] != MAGIC {
        if b.len() < 8 && MAGIC.starts_with(b) {
            return Err(LoadError::Truncated {
                needed: (HEADER + CHECKSUM) as u64,
                got,
            });
        }
        return Err(LoadError::BadMagic);
    }
    if b.len() < HEADER + CHECKSUM {
        return Err(LoadError::Truncated {
            needed: (HEADER + CHECKSUM) as u64,
            got,
        });
    }
    let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    if version != VERSION {
        return Err(LoadError::UnsupportedVersion(version));
    }
    let config = Config {
        index_bits: b[12],
        array_bits: b[13],
    };
    if config.validate().is_err() {
        return Err(LoadError::BadHeader("index/array bits must be 8 or 16"));
    }
    let value_bits = b[14];
    if !(1..=16).contains(&value_bits) {
        return Err(LoadError::BadHeader("value bits must be 1 to 16"));
    }
    if b[15] != 0 {
        return Err(LoadError::BadHeader("reserved byte is not 0"));
    }
    let seed = u64_at(b, 16);
    let n_keys = u64_at(b, 24);
    let n_blocks = u64_at(b, 32);
    let n_fb = u64_at(b, 40);
    let (build_id, seq, last_delta) = (u64_at(b, 48), u64_at(b, 56), u64_at(b, 64));
    if (seq == 0) != (last_delta == 0) {
        return Err(LoadError::BadHeader(
            "a sequence number needs a delta digest and none without",
        ));
    }
    if n_blocks == 0 {
        return Err(LoadError::BadHeader("zero blocks"));
    }
    if n_fb > n_keys {
        return Err(LoadError::BadHeader("more fallback entries than keys"));
    }
    let rec = config.entry_bytes() as u64 * value_bits as u64;
    let size = (|| {
        let c = n_blocks.checked_mul(CHOICE_BYTES_PER_BLOCK as u64)?;
        let g = n_blocks.checked_mul(64)?.checked_mul(rec)?;
        let f = n_fb.checked_mul(FB_ENTRY as u64)?;
        let total = (HEADER as u64 + CHECKSUM as u64)
            .checked_add(c)?
            .checked_add(g)?
            .checked_add(f)?;
        Some((c, g, f, total))
    })();
    let Some((c, g, f, total)) = size else {
        return Err(LoadError::BadHeader("sizes overflow"));
    };
    if got < total {
        return Err(LoadError::Truncated { needed: total, got });
    }
    if got > total {
        return Err(LoadError::TrailingBytes {
            expected: total,
            got,
        });
    }
    let choices = HEADER;
    let groups = choices + c as usize;
    let fallback = groups + g as usize;
    let checksum = fallback + f as usize;
    Ok(Parsed {
        hdr: Header {
            config,
            value_bits,
            seed,
            n_keys,
            n_blocks,
            build_id,
            seq,
            last_delta,
        },
        choices,
        groups,
        fallback,
        checksum,
    })
}

/// The O(n) checks: checksum, then fallback order and values.
fn validate(b: &[u8], p: &Parsed) -> Result<(), LoadError> {
    let sum = xxhash_rust::xxh3::xxh3_64(&b[..p.checksum]);
    if sum != u64_at(b, p.checksum) {
        return Err(LoadError::Checksum);
    }
    check_fallback(&b[p.fallback..p.checksum], p.hdr.value_bits)
}

/// The fallback checks of every loader (tables and pieces): whole entries, strictly sorted by
/// hash (no duplicates), values that fit `value_bits`.
pub(crate) fn check_fallback(fb: &[u8], value_bits: u8) -> Result<(), LoadError> {
    if fb.len() % FB_ENTRY != 0 {
        return Err(LoadError::BadFallback("not a whole number of entries"));
    }
    for i in 0..fb.len() / FB_ENTRY {
        if i > 0 && fallback_key(fb, i - 1) >= fallback_key(fb, i) {
            return Err(LoadError::BadFallback("entries not strictly sorted"));
        }
        let v = u16::from_le_bytes([fb[i * FB_ENTRY + 16], fb[i * FB_ENTRY + 17]]);
        if value_bits < 16 && v >> value_bits != 0 {
            return Err(LoadError::BadFallback("value wider than the value bits"));
        }
    }
    Ok(())
}

fn tables_of<'a>(b: &'a [u8], p: &Parsed) -> Tables<'a> {
    // The groups slice runs SLACK bytes into what follows (at least the checksum).
    Tables::new(
        p.hdr,
        &b[p.choices..p.groups],
        &b[p.groups..p.fallback + SLACK.min(b.len() - p.fallback)],
        Fallback::Bytes(&b[p.fallback..p.checksum]),
    )
}

impl SetSep {
    /// Writes the table in the binary format (see the module docs of `format`).
    pub fn write_to<W: Write>(&self, mut w: W) -> std::io::Result<()> {
        let gb = self.hdr.group_bytes();
        let hdr = header_bytes(&self.hdr, self.fallback.len());
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for part in [&hdr[..], &self.choices[..], &self.groups[..gb]] {
            hasher.update(part);
            w.write_all(part)?;
        }
        // The map iterates in hash order: the image's sorted entries, in chunks.
        let mut buf = Vec::with_capacity(FB_ENTRY * 256);
        let mut it = self.fallback.iter().peekable();
        while it.peek().is_some() {
            buf.clear();
            for (&(lo, hi), &v) in it.by_ref().take(256) {
                buf.extend_from_slice(&fallback_entry(sb_common::KeyHash { lo, hi }, v));
            }
            hasher.update(&buf);
            w.write_all(&buf)?;
        }
        w.write_all(&hasher.digest().to_le_bytes())
    }

    /// The table in the binary format.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(serialized_len(&self.hdr, self.fallback.len()));
        self.write_to(&mut v).expect("writing to a Vec cannot fail");
        v
    }

    /// Loads a table saved by [`SetSep::to_bytes`] / [`SetSep::write_to`], validating the
    /// version, every size, the checksum (over all bytes) and the fallback table. Never panics;
    /// a truncated or corrupted buffer gives an error.
    pub fn from_bytes(b: &[u8]) -> Result<SetSep, LoadError> {
        Ok(SetSepView::from_bytes(b)?.to_owned())
    }
}

/// A zero-copy, read-only table over a byte buffer in the binary format (for example an mmap'd
/// file, see [`MappedSetSep`]). Same lookups as [`SetSep`].
#[derive(Clone, Copy)]
pub struct SetSepView<'a> {
    t: Tables<'a>,
    page_info: PageInfo,
}

impl std::fmt::Debug for SetSepView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetSepView")
            .field("keys", &self.t.hdr.n_keys)
            .field("config", &self.t.hdr.config)
            .field("value_bits", &self.t.hdr.value_bits)
            .finish()
    }
}

impl<'a> SetSepView<'a> {
    /// A validated view (same checks as [`SetSep::from_bytes`]).
    pub fn from_bytes(b: &'a [u8]) -> Result<Self, LoadError> {
        let p = parse(b)?;
        validate(b, &p)?;
        Ok(SetSepView {
            t: tables_of(b, &p),
            page_info: PageInfo::default(),
        })
    }

    /// A view without the O(n) checks (checksum, fallback order): for bytes this process wrote or
    /// validated before. The O(1) header and size checks still run.
    ///
    /// # Safety
    /// `b` must be a table written by [`SetSep::write_to`] (or accepted by
    /// [`SetSepView::from_bytes`]) and unchanged since. Lookups never read out of bounds even if
    /// it is not, but their results are then meaningless.
    ///
    /// # Panics
    /// If the header is malformed or the size does not match it.
    pub unsafe fn from_bytes_unchecked(b: &'a [u8]) -> Self {
        let p = match parse(b) {
            Ok(p) => p,
            Err(e) => panic!("SetSepView::from_bytes_unchecked: {e}"),
        };
        SetSepView {
            t: tables_of(b, &p),
            page_info: PageInfo::default(),
        }
    }

    /// See [`SetSep::lookup`].
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> u16 {
        self.t.lookup_hash(self.t.hash(key))
    }
    /// See [`SetSep::lookup_batch`].
    pub fn lookup_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        self.t.lookup_batch(keys, out)
    }
    /// See [`SetSep::hash_key`].
    #[inline]
    pub fn hash_key(&self, key: &[u8]) -> KeyHash {
        self.t.hash(key)
    }
    /// See [`SetSep::lookup_hash`].
    #[inline]
    pub fn lookup_hash(&self, h: KeyHash) -> u16 {
        self.t.lookup_hash(h)
    }
    /// See [`SetSep::lookup_batch_hashes`].
    pub fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
        self.t.lookup_batch_hashes(hs, out)
    }
    /// See [`SetSep::stats`] (`page_info` describes no owned arrays: all zero).
    pub fn stats(&self) -> Stats {
        self.t.stats(self.page_info)
    }
    /// Copies the view into an owned table (huge-page backed arrays).
    pub fn to_owned(&self) -> SetSep {
        let h = self.t.hdr;
        let mut choices = HugeArray::<u8>::zeroed(h.choice_bytes());
        choices.copy_from_slice(self.t.choices);
        let gb = h.group_bytes();
        let mut groups = HugeArray::<u8>::zeroed(gb + SLACK);
        groups[..gb].copy_from_slice(&self.t.groups[..gb]);
        SetSep {
            hdr: h,
            choices,
            groups,
            fallback: match self.t.fallback {
                Fallback::Bytes(b) => fb_map(b),
                Fallback::Map(m) => m.clone(),
            },
        }
    }
}

/// A table file mapped into memory (memmap2), validated at open; lookups through
/// [`MappedSetSep::view`] read the page cache directly.
pub struct MappedSetSep {
    map: memmap2::Mmap,
    p: Parsed,
}

impl std::fmt::Debug for MappedSetSep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedSetSep")
            .field("bytes", &self.map.len())
            .field("keys", &self.p.hdr.n_keys)
            .finish()
    }
}

impl MappedSetSep {
    /// Maps `path` and validates it like [`SetSep::from_bytes`].
    ///
    /// # Safety
    /// The file must not be modified or truncated while the map lives (the usual contract of a
    /// shared file mapping: a truncation would fault, a change would change answers).
    pub unsafe fn open(path: impl AsRef<Path>) -> Result<MappedSetSep, LoadError> {
        Self::open_inner(path.as_ref(), true)
    }

    /// Maps `path` with only the O(1) header and size checks (the trusted fast path).
    ///
    /// # Safety
    /// As [`MappedSetSep::open`], and the file must be a table written by
    /// [`SetSep::write_to`] (see [`SetSepView::from_bytes_unchecked`]).
    pub unsafe fn open_trusted(path: impl AsRef<Path>) -> Result<MappedSetSep, LoadError> {
        Self::open_inner(path.as_ref(), false)
    }

    fn open_inner(path: &Path, check: bool) -> Result<MappedSetSep, LoadError> {
        let file = std::fs::File::open(path)?;
        // SAFETY: the callers (unsafe fns) promise the file is not modified while mapped.
        let map = unsafe { memmap2::Mmap::map(&file)? };
        let p = parse(&map)?;
        if check {
            validate(&map, &p)?;
        }
        Ok(MappedSetSep { map, p })
    }

    /// The table.
    pub fn view(&self) -> SetSepView<'_> {
        SetSepView {
            t: tables_of(&self.map, &self.p),
            page_info: PageInfo::default(),
        }
    }
}
