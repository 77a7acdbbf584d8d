//! The update side: [`Updatable`] keeps each group's keys (the RIB), re-searches only the group
//! of a changed key and emits a [`Delta`] that any replica applies with a memory copy.

use crate::build::BlockBuilder;
use crate::build::{write_mark, write_record};
use crate::kernel::{array_for, separates, GKey, Searcher};
use crate::layout::{
    choice_of, family, locate, CAND, CHOICE_BYTES_PER_BLOCK, GROUPS_PER_BLOCK, MAX_KEY_LEN,
    MIN_KEY_LEN,
};
use crate::prefetch::prefetch;
use crate::table::{fallback_entry, FbMap, FB_ENTRY};
use crate::{BuildError, BuildOptions, Config, DeltaError, SetSep, UpdateError};
use sb_common::{hash128, HugeArray, KeyHash};

/// A delta's record bytes: a group's (at most 16 bytes for the shapes in use, 6 for 16+8 with
/// 2-bit values) without an allocation.
type Record = smallvec::SmallVec<[u8; 16]>;

/// One change of a table: the new record of one group, and the fallback entries that leave and
/// join the fallback table. Produced by [`Updatable`], applied by [`SetSep::apply_delta`].
///
/// A delta knows its table and its place: it carries the table's fingerprint
/// ([`SetSep::fingerprint`]: seed, shape, build id) and its owner's sequence number
/// ([`Delta::seq`], one count per table, 1 for the first delta after the build).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    config: Config,
    value_bits: u8,
    /// Fingerprint of the table the delta was made for.
    table: u64,
    n_blocks: u64,
    n_keys: u64,
    seq: u64,
    /// XXH3-64 of the serialized body (never 0): what the table remembers of its last delta.
    digest: u64,
    /// The group rewritten, or the first group of the block a block delta rewrites.
    group: u64,
    /// Its record, or the block's 64 records (a group's, a few bytes, inline: a replica
    /// parses one delta per update, and this was its one allocation).
    record: Record,
    /// A block delta's bucket choices (64 bytes): a growing owner re-balances a block when an
    /// insert would send one of its groups to the fallback table.
    choices: Option<Vec<u8>>,
    fb_remove: Vec<KeyHash>,
    fb_insert: Vec<(KeyHash, u16)>,
}

const DELTA_MAGIC: &[u8; 2] = b"SD";
/// 6: group records index the hash family of `layout::position` with the 20-bit slopes of
/// `layout::slope` (5: any odd 32-bit slope; 4: the 16-bit family).
const DELTA_VERSION: u8 = 6;

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    loop {
        let b = (x & 0x7f) as u8;
        x >>= 7;
        if x == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DeltaError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(DeltaError::Malformed("truncated"))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DeltaError> {
        Ok(self.take(1)?[0])
    }
    fn varint(&mut self) -> Result<u64, DeltaError> {
        let mut x = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            let part = (b & 0x7f) as u64;
            if shift == 63 && part > 1 {
                return Err(DeltaError::Malformed("varint overflows"));
            }
            x |= part << shift;
            if b & 0x80 == 0 {
                // One encoding per value (what `to_bytes` writes): no trailing zero groups, so
                // an accepted delta re-encodes to the same bytes (and digest).
                if shift > 0 && b == 0 {
                    return Err(DeltaError::Malformed("varint not in its shortest form"));
                }
                return Ok(x);
            }
        }
        Err(DeltaError::Malformed("varint too long"))
    }
    fn u64(&mut self) -> Result<u64, DeltaError> {
        let s = self.take(8)?;
        Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }
    fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }
}

impl Delta {
    /// Global group id (block * 64 + group in block) the delta rewrites (for a block delta,
    /// the block's first group).
    pub fn group(&self) -> u64 {
        self.group
    }

    /// Whether the delta rewrites a whole block (bucket choices and 64 group records): what a
    /// growing owner sends when it re-balances a block.
    pub fn is_block(&self) -> bool {
        self.choices.is_some()
    }

    /// Whether the delta moves keys into or out of the fallback table.
    pub fn touches_fallback(&self) -> bool {
        !self.fb_remove.is_empty() || !self.fb_insert.is_empty()
    }

    /// The owner's sequence number of this delta: the table's [`SetSep::seq`] after it.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Keys of the owner's table after the delta (an owner of a block range: the keys of its
    /// range).
    pub fn keys(&self) -> u64 {
        self.n_keys
    }

    /// Fingerprint of the table the delta was made for ([`SetSep::fingerprint`]).
    pub fn table_fingerprint(&self) -> u64 {
        self.table
    }

    /// The serialized delta: header, table fingerprint, sequence number, group id, kind (0: one
    /// group's record; 1: a block's 64 choice bytes and 64 records), fallback edits, checksum.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(44 + self.record.len());
        self.write_to(&mut out);
        out
    }

    /// [`Delta::to_bytes`] appended to `out` (no allocation when it has room).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        self.body_into(out);
        let sum = self.digest as u32;
        out.extend_from_slice(&sum.to_le_bytes());
    }

    /// Sets the digest from the body, serialized into `scratch` (cleared first).
    fn seal(&mut self, scratch: &mut Vec<u8>) {
        scratch.clear();
        self.body_into(scratch);
        self.digest = Self::digest_of(scratch);
    }

    fn body_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(DELTA_MAGIC);
        out.push(DELTA_VERSION);
        out.push(self.config.index_bits);
        out.push(self.config.array_bits);
        out.push(self.value_bits);
        out.extend_from_slice(&self.table.to_le_bytes());
        put_varint(out, self.n_blocks);
        put_varint(out, self.n_keys);
        put_varint(out, self.seq);
        put_varint(out, self.group);
        match &self.choices {
            None => out.push(0),
            Some(c) => {
                out.push(1);
                out.extend_from_slice(c);
            }
        }
        out.extend_from_slice(&self.record);
        put_varint(out, self.fb_remove.len() as u64);
        for h in &self.fb_remove {
            out.extend_from_slice(&h.lo.to_le_bytes());
            out.extend_from_slice(&h.hi.to_le_bytes());
        }
        put_varint(out, self.fb_insert.len() as u64);
        for &(h, v) in &self.fb_insert {
            out.extend_from_slice(&fallback_entry(h, v));
        }
    }

    /// The digest of a serialized body (the checksum is its low 32 bits); never 0, which the
    /// table header keeps for "no delta yet".
    fn digest_of(body: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64(body).max(1)
    }

    /// Parses and validates a serialized delta (never panics).
    pub fn from_bytes(b: &[u8]) -> Result<Delta, DeltaError> {
        if b.len() < 4 + 6 {
            return Err(DeltaError::Malformed("truncated"));
        }
        let (body, sum) = b.split_at(b.len() - 4);
        if !body.starts_with(DELTA_MAGIC) {
            return Err(DeltaError::Malformed("bad magic"));
        }
        let digest = Self::digest_of(body);
        if digest as u32 != u32::from_le_bytes(sum.try_into().expect("4 bytes")) {
            return Err(DeltaError::Checksum);
        }
        let mut r = Reader { b: body, pos: 2 };
        if r.u8()? != DELTA_VERSION {
            return Err(DeltaError::Malformed("unsupported version"));
        }
        let config = Config {
            index_bits: r.u8()?,
            array_bits: r.u8()?,
        };
        config
            .validate()
            .map_err(|_| DeltaError::Malformed("bad config"))?;
        let value_bits = r.u8()?;
        if !(1..=16).contains(&value_bits) {
            return Err(DeltaError::Malformed("bad value bits"));
        }
        let table = r.u64()?;
        let n_blocks = r.varint()?;
        let n_keys = r.varint()?;
        let seq = r.varint()?;
        if seq == 0 {
            return Err(DeltaError::Malformed("sequence number 0"));
        }
        let group = r.varint()?;
        if n_blocks == 0 || group / 64 >= n_blocks {
            return Err(DeltaError::Malformed("group out of range"));
        }
        let rec = config.entry_bytes() * value_bits as usize;
        let (choices, record) = match r.u8()? {
            0 => (None, Record::from_slice(r.take(rec)?)),
            1 => {
                if group % GROUPS_PER_BLOCK as u64 != 0 {
                    return Err(DeltaError::Malformed("block delta not at a block"));
                }
                let c = r.take(CHOICE_BYTES_PER_BLOCK)?.to_vec();
                (Some(c), Record::from_slice(r.take(rec * GROUPS_PER_BLOCK)?))
            }
            _ => return Err(DeltaError::Malformed("bad delta kind")),
        };
        let nrem = r.varint()?;
        if nrem > (r.remaining() / 16) as u64 {
            return Err(DeltaError::Malformed("truncated fallback removals"));
        }
        let mut fb_remove = Vec::with_capacity(nrem as usize);
        for _ in 0..nrem {
            fb_remove.push(KeyHash {
                lo: r.u64()?,
                hi: r.u64()?,
            });
        }
        let nins = r.varint()?;
        if nins > (r.remaining() / FB_ENTRY) as u64 {
            return Err(DeltaError::Malformed("truncated fallback insertions"));
        }
        let mut fb_insert = Vec::with_capacity(nins as usize);
        for _ in 0..nins {
            let h = KeyHash {
                lo: r.u64()?,
                hi: r.u64()?,
            };
            let v = u16::from_le_bytes(r.take(2)?.try_into().expect("2 bytes"));
            if value_bits < 16 && v >> value_bits != 0 {
                return Err(DeltaError::Malformed("fallback value too wide"));
            }
            fb_insert.push((h, v));
        }
        if r.remaining() != 0 {
            return Err(DeltaError::Malformed("trailing bytes"));
        }
        Ok(Delta {
            config,
            value_bits,
            table,
            n_blocks,
            n_keys,
            seq,
            digest,
            group,
            record,
            choices,
            fb_remove,
            fb_insert,
        })
    }
}

/// What [`check`] found a delta to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The next delta (or, for a table with several owners, any delta that fits): apply it.
    Apply,
    /// The last delta applied, again: nothing to do.
    Duplicate,
}

/// Checks `d` against a table with header `hdr` and fallback table `fb` without changing
/// either: shape, fingerprint, sequence number (`sequenced`: against the table's own number,
/// one owner; otherwise the caller orders each owner's deltas, [`SetSep::apply_owner_delta`]),
/// and the fallback edits.
pub(crate) fn check(
    hdr: &crate::table::Header,
    fb: &FbMap,
    d: &Delta,
    sequenced: bool,
) -> Result<Verdict, DeltaError> {
    if d.config != hdr.config || d.value_bits != hdr.value_bits {
        return Err(DeltaError::Mismatch("config or value bits differ"));
    }
    if d.n_blocks != hdr.n_blocks || d.group >= hdr.n_groups() {
        return Err(DeltaError::Mismatch("number of blocks differs"));
    }
    let rec = hdr.rec_bytes();
    let groups = if d.choices.is_some() {
        GROUPS_PER_BLOCK
    } else {
        1
    };
    if d.record.len() != rec * groups {
        return Err(DeltaError::Mismatch("record size differs"));
    }
    let expected = hdr.fingerprint();
    if d.table != expected {
        return Err(DeltaError::ForeignTable {
            expected,
            got: d.table,
        });
    }
    if !sequenced {
        // Several owners, one per block range: their key counts are not this table's.
        check_fallback_edits(fb, d, u64::MAX)?;
        return Ok(Verdict::Apply);
    }
    let applied = hdr.seq;
    if d.seq <= applied {
        return if d.seq < applied {
            Err(DeltaError::Stale {
                seq: d.seq,
                applied,
            })
        } else if d.digest == hdr.last_delta {
            Ok(Verdict::Duplicate) // the last delta again: already applied
        } else {
            Err(DeltaError::Conflict { seq: d.seq })
        };
    }
    if d.seq != applied + 1 {
        return Err(DeltaError::Gap {
            expected: applied + 1,
            got: d.seq,
        });
    }
    check_fallback_edits(fb, d, d.n_keys)?;
    Ok(Verdict::Apply)
}

/// Applies `d` to `t`; on error `t` is unchanged. `sequenced`: as for [`check`]; the table's
/// number and key count change only then.
pub(crate) fn apply(t: &mut SetSep, d: &Delta, sequenced: bool) -> Result<(), DeltaError> {
    if check(&t.hdr, &t.fallback, d, sequenced)? == Verdict::Duplicate {
        return Ok(());
    }
    edit_fallback(&mut t.fallback, d);
    let off = d.group as usize * t.hdr.rec_bytes();
    t.groups[off..off + d.record.len()].copy_from_slice(&d.record);
    if let Some(c) = &d.choices {
        let at = d.block() as usize * CHOICE_BYTES_PER_BLOCK;
        t.choices[at..at + CHOICE_BYTES_PER_BLOCK].copy_from_slice(c);
    }
    if sequenced {
        d.advance(&mut t.hdr);
    }
    Ok(())
}

/// Checks the delta's fallback edits against `fb`, in O(edits * log n): removals present and
/// distinct, insertions absent once the removals are made and distinct, at most `max_keys`
/// entries after them.
fn check_fallback_edits(fb: &FbMap, d: &Delta, max_keys: u64) -> Result<(), DeltaError> {
    if d.touches_fallback() {
        let key = |h: &KeyHash| (h.lo, h.hi);
        let mut removed = std::collections::BTreeSet::new();
        for h in &d.fb_remove {
            if !fb.contains_key(&key(h)) || !removed.insert(key(h)) {
                return Err(DeltaError::FallbackMismatch("removed entry is absent"));
            }
        }
        let mut inserted = std::collections::BTreeSet::new();
        for (h, _) in &d.fb_insert {
            let present = fb.contains_key(&key(h)) && !removed.contains(&key(h));
            if present || !inserted.insert(key(h)) {
                return Err(DeltaError::FallbackMismatch("inserted entry is present"));
            }
        }
        let n_fb = fb.len() - d.fb_remove.len() + d.fb_insert.len();
        if n_fb as u64 > max_keys {
            return Err(DeltaError::FallbackMismatch(
                "more fallback entries than keys",
            ));
        }
    } else if fb.len() as u64 > max_keys {
        return Err(DeltaError::FallbackMismatch(
            "more fallback entries than keys",
        ));
    }
    Ok(())
}

/// Makes the fallback edits of a delta [`check`] accepted.
pub(crate) fn edit_fallback(fb: &mut FbMap, d: &Delta) {
    for h in &d.fb_remove {
        fb.remove(&(h.lo, h.hi));
    }
    for (h, v) in &d.fb_insert {
        fb.insert((h.lo, h.hi), *v);
    }
}

impl Delta {
    /// The block the delta writes (every group and fallback entry it touches is in it).
    pub(crate) fn block(&self) -> u64 {
        self.group / GROUPS_PER_BLOCK as u64
    }

    /// The bytes it writes into the groups array, from byte `group * rec_bytes`.
    pub(crate) fn record_bytes(&self) -> &[u8] {
        &self.record
    }

    /// The fallback entries it removes and inserts.
    pub(crate) fn fallback_edits(&self) -> (&[KeyHash], &[(KeyHash, u16)]) {
        (&self.fb_remove, &self.fb_insert)
    }

    /// A block delta's 64 choice bytes.
    pub(crate) fn choice_bytes(&self) -> Option<&[u8]> {
        self.choices.as_deref()
    }

    /// The header of a single-owner table after the delta: its key count and number.
    pub(crate) fn advance(&self, hdr: &mut crate::table::Header) {
        hdr.n_keys = self.n_keys;
        hdr.seq = self.seq;
        hdr.last_delta = self.digest;
    }
}

/// When an [`Updatable`] grows ([`Updatable::with_growth`]): once an insert brings its keys past
/// `max_load_pct`% of 1024 per block, it rebuilds its table from its RIB with
/// `ceil(keys / (target_load_pct% of 1024))` blocks (same seed and build id, so a new
/// fingerprint through the block count, sequence number 0).
///
/// Growth keeps the load (keys per 1024-key block) between the two bounds, and each growth
/// rebuilds every key (the build rate, [`BuildOptions::threads`] threads) once per
/// `max / target` growth of the key count: about `build time per key / (1 - target / max)`
/// per insert, amortized. Replicas follow by loading the grown table's image (or pieces of
/// it): the owner's deltas after a growth carry the new block count, which a replica of the
/// old table refuses ([`crate::DeltaError::Mismatch`]), and the image carries the sequence
/// number to go on from. A replica pays one image load per growth (the whole table, about
/// 3.5-4 bits per key) and serves lookups from its old table until then.
///
/// Inserts do not re-balance bucket choices, so between growths a block's groups fill
/// unevenly; when an insert would send a group to the fallback table, a growing owner rebuilds
/// that block instead (new bucket choices, all 64 groups searched again, about one 1024-key
/// block build) and sends one block delta (64 choice bytes and 64 records, about 480 bytes for
/// 16+8 and 2-bit values). Measured with
/// `cargo run --release -p sb-setsep --example growcost -- 1048576 8388608 1048576 grow`
/// (16+8, 2-bit values, the default bounds, one thread, shared 2-core AMD EPYC VM): from 1M to
/// 8M keys by inserts alone, fallback at most 0.0031% of the keys and bits/key at most 3.933
/// (sampled every 4096 inserts; the same in all 3 runs), inserts 390 K/s over the 7M (median
/// of 3 runs: 386, 390, 404; growth rebuilds and re-balances included) against 683 K/s (median
/// of 3: 585, 683, 1025) for the first 16K inserts into a 1M table without growth
/// (`growcost -- 1048576 1064960 16384`), 0.57x. Without the block re-balance, fallback
/// reached 0.65% and bits/key 4.43.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Growth {
    /// Grow once the keys pass this percentage of 1024 per block.
    pub max_load_pct: u32,
    /// The load, in percent, a growth leaves.
    pub target_load_pct: u32,
}

impl Default for Growth {
    /// Grow past load 1.0 (the load of a build without headroom) to 0.89: a rebuild every 12%
    /// more keys; 3.5-3.93 bits/key for 16+8 and 2-bit values from the records alone (plus
    /// the fallback table, see above).
    fn default() -> Self {
        Growth {
            max_load_pct: 100,
            target_load_pct: 89,
        }
    }
}

/// The update side of a table: the lookup table plus every group's keys and values (the RIB).
///
/// Each change re-searches only the key's group, keeping the hash indexes that still separate
/// its keys: a deletion from a group outside the fallback table searches nothing (the remaining
/// keys are still separated; only the arrays are recomputed), while a deletion from a fallback
/// group searches every value bit again, which may take the group out of the fallback table. It
/// returns the [`Delta`] it applied to its own table; replicas apply the same deltas in the same
/// order and stay byte-identical.
pub struct Updatable {
    table: SetSep,
    /// Per global group: entries `[key len u8][key][value u16 LE][payload]`
    /// (bit 7 of the length byte: the key is kept without `prefix`).
    rib: Rib,
    /// Bytes of each entry's payload.
    payload_len: usize,
    /// The key prefix the RIB leaves out of the keys that start with it.
    prefix: Box<[u8]>,
    len: usize,
    searcher: Searcher,
    gkeys: Vec<GKey>,
    /// The hashes of the changed group's keys, in its RIB order ([`Updatable::hash_group`]):
    /// the RIB keeps none, and an update hashes its group's keys once.
    ghashes: Vec<KeyHash>,
    /// The options of the build, for growth rebuilds.
    opts: BuildOptions,
    growth: Option<Growth>,
    growths: u64,
    rebalances: u64,
    /// For block re-balances (made on first use).
    builder: Option<Box<BlockBuilder>>,
    /// A delta's body while its digest is computed.
    scratch: Vec<u8>,
}

impl std::fmt::Debug for Updatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Updatable")
            .field("table", &self.table)
            .field("len", &self.len)
            .finish()
    }
}

/// Updates between the start of a key's memory loads and its solving in
/// [`Updatable::insert_batch`].
const UPDATE_AHEAD: usize = 3;

/// What [`Updatable::rib_bytes`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RibBytes {
    /// The entries: each key (without the RIB's prefix where it can be) with its length byte,
    /// value and payload.
    pub entries: usize,
    /// Touched: the headers in use and the handed-out extents (what is resident).
    pub touched: usize,
    /// Reserved: headers and the whole slab (its untouched end costs no memory).
    pub allocated: usize,
}

/// The RIB: every group's entries in one huge-page-backed slab, each group in its own extent
/// with room to grow (so an update touches one header and one extent, no pointer chasing).
#[derive(Clone)]
struct Rib {
    /// Per group: offset in `data`, bytes used, bytes reserved.
    head: HugeArray<[u64; 2]>,
    data: HugeArray<u8>,
    /// Bytes of `data` handed out.
    used: usize,
    /// Bytes of the entries themselves.
    live: usize,
    /// Headers that are not zero (those of groups given an extent): the others are never
    /// written, so never resident.
    held: usize,
}

impl Rib {
    fn unpack(h: [u64; 2]) -> (usize, usize, usize) {
        (
            h[0] as usize,
            (h[1] & 0xffff_ffff) as usize,
            (h[1] >> 32) as usize,
        )
    }

    /// Lays out groups of the given sizes with some slack each.
    fn with_sizes(sizes: &[u32]) -> Rib {
        let mut head = HugeArray::<[u64; 2]>::zeroed(sizes.len());
        let (mut off, mut held) = (0usize, 0usize);
        for (h, &sz) in head.iter_mut().zip(sizes) {
            let cap = Self::cap_for(sz as usize);
            held += usize::from(cap > 0);
            // An empty group's header stays zero, unwritten: an owner's table has every group
            // of the cluster's and keys in its own range only, so the others' headers (16
            // bytes each) are never made resident: 7-9 MB less RSS per node at a capacity of
            // 12.5M keys on 4 nodes (`bench pfcp --sessions 10000000`).
            if cap > 0 {
                *h = [off as u64, (cap as u64) << 32];
            }
            off += cap;
        }
        Rib {
            head,
            data: HugeArray::zeroed(off + off / 8 + 4096),
            used: off,
            live: 0,
            held,
        }
    }

    /// The room a group of `len` bytes gets: a quarter more and 24 bytes, none when it is
    /// empty (an owner's table has every group of the cluster's table and keys in its range's
    /// only: room for the others was counted at 5.5 bytes per key at 10M PFCP sessions on 4
    /// nodes, though never written, so never resident).
    fn cap_for(len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        (len + len / 4 + 24).next_multiple_of(8)
    }

    fn group(&self, g: usize) -> &[u8] {
        let (off, len, _) = Self::unpack(self.head[g]);
        &self.data[off..off + len]
    }

    fn group_mut(&mut self, g: usize) -> &mut [u8] {
        let (off, len, _) = Self::unpack(self.head[g]);
        &mut self.data[off..off + len]
    }

    /// Appends `bytes` to group `g`, moving the group to a larger extent when full.
    fn append(&mut self, g: usize, bytes: &[u8]) {
        let (mut off, len, mut cap) = Self::unpack(self.head[g]);
        if len + bytes.len() > cap {
            let new_cap = Self::cap_for((len + bytes.len()) * 3 / 2);
            if self.used + new_cap > self.data.len() {
                self.grow(new_cap);
                (off, _, _) = Self::unpack(self.head[g]);
            }
            let new_off = self.used;
            self.data.copy_within(off..off + len, new_off);
            self.used += new_cap;
            off = new_off;
            cap = new_cap;
        }
        self.data[off + len..off + len + bytes.len()].copy_from_slice(bytes);
        let new = [off as u64, (len + bytes.len()) as u64 | (cap as u64) << 32];
        if self.head[g] == [0, 0] && new != [0, 0] {
            self.held += 1;
        }
        self.head[g] = new;
        self.live += bytes.len();
    }

    /// Removes bytes `range` (relative to the group) from group `g`.
    fn remove(&mut self, g: usize, range: std::ops::Range<usize>) {
        let (off, len, cap) = Self::unpack(self.head[g]);
        self.data
            .copy_within(off + range.end..off + len, off + range.start);
        let len = len - range.len();
        self.head[g] = [off as u64, len as u64 | (cap as u64) << 32];
        self.live -= range.len();
    }

    /// Makes room for `extra` more bytes: compacts into a new slab, dropping the abandoned
    /// extents and trimming every group's room to [`Rib::cap_for`] its length, with a quarter
    /// more than that for what comes next (a slab twice the live size kept as much again
    /// untouched in room and holes: 63.5 bytes per 25-byte entry, at 1M PFCP sessions).
    fn grow(&mut self, extra: usize) {
        let need: usize = self
            .head
            .iter()
            .map(|&h| Self::cap_for(Self::unpack(h).1))
            .sum::<usize>()
            + extra;
        let mut data = HugeArray::<u8>::zeroed(need + need / 4 + 4096);
        let (mut at, mut held) = (0usize, 0usize);
        for h in self.head.iter_mut() {
            let (off, len, _) = Self::unpack(*h);
            let cap = Self::cap_for(len);
            data[at..at + len].copy_from_slice(&self.data[off..off + len]);
            let new = if cap == 0 {
                [0, 0]
            } else {
                [at as u64, len as u64 | (cap as u64) << 32]
            };
            // Unwritten when it does not change (see `with_sizes`).
            if *h != new {
                *h = new;
            }
            held += usize::from(new != [0, 0]);
            at += cap;
        }
        self.data = data;
        self.used = at;
        self.held = held;
    }
}

/// Bytes of a RIB entry after its key and before its payload: the value, u16 LE. The key's
/// hash is not kept: re-searching a group hashes its keys again (a few ns a key of up to 16
/// bytes, [`hash128`]), which costs less than the 6 bytes per entry its base hashes took.
const TAIL: usize = 2;

/// The most payload bytes an entry may carry ([`Updatable::build_with_payloads`]).
pub const MAX_RIB_PAYLOAD: usize = 255;

/// The most bytes an encoded entry takes.
const ENTRY_MAX: usize = 1 + 64 + TAIL + MAX_RIB_PAYLOAD;

/// A buffer for one encoded entry.
type EntryBuf = [u8; ENTRY_MAX];

/// Bit 7 of an entry's length byte: the key is kept without the RIB's prefix (the low bits
/// count the bytes kept; keys are at most [`MAX_KEY_LEN`], 64, bytes).
const ELIDED: u8 = 0x80;

/// How the RIB keeps `key`: its length byte and the bytes it keeps (without `prefix` when the
/// key starts with it).
fn stored<'k>(key: &'k [u8], prefix: &[u8]) -> (u8, &'k [u8]) {
    if !prefix.is_empty() && key.starts_with(prefix) {
        let rest = &key[prefix.len()..];
        (ELIDED | rest.len() as u8, rest)
    } else {
        (key.len() as u8, key)
    }
}

/// Finds the key kept as `stored` in a group arena whose entries carry `pl` payload bytes:
/// (offset of the entry, offset of its value).
fn find(arena: &[u8], pl: usize, stored: (u8, &[u8])) -> Option<(usize, usize)> {
    let (lb, kept) = stored;
    let mut p = 0;
    while p < arena.len() {
        let vo = p + 1 + (arena[p] & !ELIDED) as usize;
        if arena[p] == lb && &arena[p + 1..vo] == kept {
            return Some((p, vo));
        }
        p = vo + TAIL + pl;
    }
    None
}

/// A key read back from the RIB (which keeps it without its prefix where it can, see
/// [`Updatable::build_with_key_prefix`]): up to [`MAX_KEY_LEN`] bytes, to which it
/// dereferences.
#[derive(Clone, Copy)]
pub struct RibKey {
    len: u8,
    bytes: [u8; MAX_KEY_LEN],
}

impl RibKey {
    fn join(prefix: &[u8], rest: &[u8]) -> RibKey {
        let mut k = RibKey {
            len: (prefix.len() + rest.len()) as u8,
            bytes: [0; MAX_KEY_LEN],
        };
        k.bytes[..prefix.len()].copy_from_slice(prefix);
        k.bytes[prefix.len()..k.len as usize].copy_from_slice(rest);
        k
    }

    /// A copy of `key`; panics if it is longer than [`MAX_KEY_LEN`].
    pub fn new(key: &[u8]) -> RibKey {
        assert!(key.len() <= MAX_KEY_LEN, "key over {MAX_KEY_LEN} bytes");
        Self::join(&[], key)
    }
}

impl std::ops::Deref for RibKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl AsRef<[u8]> for RibKey {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for RibKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for RibKey {
    fn eq(&self, other: &RibKey) -> bool {
        **self == **other
    }
}

impl Eq for RibKey {}

impl std::hash::Hash for RibKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

/// An entry of a group arena.
struct Entry<'a> {
    /// The RIB's prefix when the entry's key was kept without it, else empty.
    prefix: &'a [u8],
    /// The key's bytes kept.
    kept: &'a [u8],
    v: u16,
    payload: &'a [u8],
    /// The whole encoded entry.
    raw: &'a [u8],
}

impl Entry<'_> {
    fn key(&self) -> RibKey {
        RibKey::join(self.prefix, self.kept)
    }

    /// The key's hash ([`hash128`]): of the kept bytes as they lie in the arena when the key
    /// was kept whole, else joined on a 16-byte buffer when it fits (the RIB keeps no hashes: a
    /// group's re-search hashes each of its keys). Hashing in place matters: joining every key
    /// through the buffer (variable-length copies, then the hash's 8-byte reads of what they
    /// wrote) took a quarter of a single update's time at 4M 13-byte keys (`perf` of
    /// `examples/updatecost`).
    #[inline]
    fn hash(&self, seed: u64) -> KeyHash {
        if self.prefix.is_empty() {
            return hash128(self.kept, seed);
        }
        let (p, n) = (self.prefix.len(), self.prefix.len() + self.kept.len());
        if n <= 16 {
            let mut b = [0u8; 16];
            b[..p].copy_from_slice(self.prefix);
            b[p..n].copy_from_slice(self.kept);
            hash128(&b[..n], seed)
        } else {
            hash128(&self.key(), seed)
        }
    }
}

/// The entries of a group arena whose entries carry `pl` payload bytes and whose keys may be
/// kept without `prefix`.
fn entries<'a>(arena: &'a [u8], pl: usize, prefix: &'a [u8]) -> impl Iterator<Item = Entry<'a>> {
    let mut p = 0;
    std::iter::from_fn(move || {
        if p >= arena.len() {
            return None;
        }
        let lb = arena[p];
        let l = (lb & !ELIDED) as usize;
        let k = &arena[p + 1..p + 1 + l];
        let t = &arena[p + 1 + l..p + 1 + l + TAIL + pl];
        let raw = &arena[p..p + 1 + l + TAIL + pl];
        p += 1 + l + TAIL + pl;
        Some(Entry {
            prefix: if lb & ELIDED != 0 { prefix } else { &[] },
            kept: k,
            v: u16::from_le_bytes([t[0], t[1]]),
            payload: &t[TAIL..],
            raw,
        })
    })
}

/// Encodes a RIB entry into `buf` (its key kept without `prefix` when it starts with it) and
/// returns its length.
fn encode_entry(buf: &mut EntryBuf, key: &[u8], prefix: &[u8], v: u16, payload: &[u8]) -> usize {
    let (lb, key) = stored(key, prefix);
    let l = key.len();
    buf[0] = lb;
    buf[1..1 + l].copy_from_slice(key);
    buf[1 + l..3 + l].copy_from_slice(&v.to_le_bytes());
    buf[3 + l..3 + l + payload.len()].copy_from_slice(payload);
    1 + l + TAIL + payload.len()
}

impl Updatable {
    /// Builds the table (like [`SetSep::build`]) and the RIB.
    pub fn build(
        keys: &[&[u8]],
        values: &[u16],
        opts: &BuildOptions,
    ) -> Result<Updatable, BuildError> {
        Self::build_with_payloads(keys, values, &[], 0, opts)
    }

    /// [`Updatable::build`] whose RIB keeps beside each key `payload_len` bytes of the
    /// caller's (at most [`MAX_RIB_PAYLOAD`]), key `i`'s at `payloads[i * payload_len..]`: an owner
    /// keeps its FIB values there instead of in a second map of the same keys. A key
    /// [`Updatable::insert`] adds has a payload of zeros until [`Updatable::set_payload`].
    ///
    /// Panics if `payloads` is not `keys.len() * payload_len` bytes or `payload_len` is over
    /// [`MAX_RIB_PAYLOAD`].
    pub fn build_with_payloads(
        keys: &[&[u8]],
        values: &[u16],
        payloads: &[u8],
        payload_len: usize,
        opts: &BuildOptions,
    ) -> Result<Updatable, BuildError> {
        Self::build_with_key_prefix(keys, values, payloads, payload_len, &[], opts)
    }

    /// [`Updatable::build_with_payloads`] whose RIB keeps the keys that start with `prefix`
    /// without it (the table is the same; only the RIB is smaller). A cluster of IPv4 UE
    /// addresses as IPv4-mapped IPv6 keys passes their common 12 bytes: each RIB entry then
    /// takes 12 bytes less.
    ///
    /// Panics as [`Updatable::build_with_payloads`] does, and if `prefix` is longer than
    /// [`MAX_KEY_LEN`].
    ///
    /// ```
    /// use sb_setsep::{BuildOptions, Updatable};
    /// let prefix = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    /// let keys: Vec<Vec<u8>> = (0u32..1000)
    ///     .map(|i| [&prefix[..], &i.to_be_bytes()[..]].concat())
    ///     .collect();
    /// let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    /// let opts = BuildOptions { value_bits: 2, ..BuildOptions::default() };
    /// let plain = Updatable::build_with_payloads(&refs, &vec![1; 1000], &[], 0, &opts).unwrap();
    /// let mut u =
    ///     Updatable::build_with_key_prefix(&refs, &vec![1; 1000], &[], 0, &prefix, &opts).unwrap();
    /// assert_eq!(u.rib_bytes().entries + 12 * 1000, plain.rib_bytes().entries);
    /// u.insert(&[9u8; 16], 2).unwrap(); // a key without the prefix is kept whole
    /// assert_eq!(u.get(&keys[7]), Some(1));
    /// assert_eq!(u.get(&[9u8; 16]), Some(2));
    /// assert!(u.iter().any(|(k, v)| *k == keys[7][..] && v == 1));
    /// ```
    pub fn build_with_key_prefix(
        keys: &[&[u8]],
        values: &[u16],
        payloads: &[u8],
        payload_len: usize,
        prefix: &[u8],
        opts: &BuildOptions,
    ) -> Result<Updatable, BuildError> {
        assert!(
            payload_len <= MAX_RIB_PAYLOAD,
            "payload over {MAX_RIB_PAYLOAD} bytes"
        );
        assert!(
            prefix.len() <= MAX_KEY_LEN,
            "prefix over {MAX_KEY_LEN} bytes"
        );
        assert_eq!(payloads.len(), keys.len() * payload_len, "payload bytes");
        let table = SetSep::build(keys, values, opts)?;
        let rib = {
            let t = table.tables();
            let ng = table.hdr.n_groups() as usize;
            // Two passes: sizes, then entries (each group in one extent).
            let groups: Vec<u32> = keys.iter().map(|k| t.group_of(t.hash(k)) as u32).collect();
            let mut sizes = vec![0u32; ng];
            for (k, &g) in keys.iter().zip(&groups) {
                sizes[g as usize] += (1 + stored(k, prefix).1.len() + TAIL + payload_len) as u32;
            }
            let mut rib = Rib::with_sizes(&sizes);
            let mut buf: EntryBuf = [0; ENTRY_MAX];
            for (i, ((k, &v), &g)) in keys.iter().zip(values).zip(&groups).enumerate() {
                let payload = &payloads[i * payload_len..(i + 1) * payload_len];
                let n = encode_entry(&mut buf, k, prefix, v, payload);
                rib.append(g as usize, &buf[..n]);
            }
            rib
        };
        Ok(Updatable {
            table,
            rib,
            payload_len,
            prefix: prefix.into(),
            len: keys.len(),
            searcher: Searcher::new(opts.kernel),
            gkeys: Vec::new(),
            ghashes: Vec::new(),
            opts: opts.clone(),
            growth: None,
            growths: 0,
            rebalances: 0,
            builder: None,
            scratch: Vec::new(),
        })
    }

    /// The same table, growing by `growth` as inserts fill it (see [`Growth`]).
    pub fn with_growth(mut self, growth: Growth) -> Self {
        self.growth = Some(growth);
        self
    }

    /// How many times the table grew (a replica that saw fewer needs the new image).
    pub fn growths(&self) -> u64 {
        self.growths
    }

    /// How many blocks a growing owner re-balanced instead of sending a group to the fallback
    /// table (each was one block delta).
    pub fn rebalances(&self) -> u64 {
        self.rebalances
    }

    /// Rebuilds the table from the RIB with `blocks` blocks (at least enough for its keys),
    /// keeping the seed and build id; the sequence number starts again at 0. On error the
    /// table is unchanged.
    pub fn grow_to(&mut self, blocks: u64) -> Result<(), BuildError> {
        let grown = {
            let (mut keys, mut values, mut payloads) = (Vec::new(), Vec::new(), Vec::new());
            for (k, v, p) in self.entries() {
                keys.push(k);
                values.push(v);
                payloads.extend_from_slice(p);
            }
            let keys: Vec<&[u8]> = keys.iter().map(|k| &**k).collect();
            let opts = BuildOptions {
                capacity: blocks.saturating_mul(crate::layout::KEYS_PER_BLOCK),
                ..self.opts.clone()
            };
            let (pl, prefix) = (self.payload_len, &self.prefix);
            Updatable::build_with_key_prefix(&keys, &values, &payloads, pl, prefix, &opts)?
        };
        let (growth, growths, rebalances) = (self.growth, self.growths + 1, self.rebalances);
        *self = grown;
        self.growth = growth;
        self.growths = growths;
        self.rebalances = rebalances;
        Ok(())
    }

    /// Grows when [`Growth`] says so.
    fn maybe_grow(&mut self) -> Result<(), UpdateError> {
        let Some(g) = self.growth else {
            return Ok(());
        };
        let per_block = crate::layout::KEYS_PER_BLOCK as u128;
        let blocks = self.table.hdr.n_blocks as u128;
        if (self.len as u128) * 100 <= g.max_load_pct as u128 * per_block * blocks {
            return Ok(());
        }
        let want = ((self.len as u128) * 100)
            .div_ceil(g.target_load_pct.max(1) as u128 * per_block)
            .max(blocks + 1);
        self.grow_to(want as u64).map_err(UpdateError::Grow)
    }

    /// Blocks `range` of the table as a [`crate::Piece`] (bucket choices, records, fallback
    /// entries, key count), for replicas to [`SetSep::install_piece`] or
    /// [`SetSep::assemble`]: how the owner of a block range distributes its part of a table
    /// built from its keys alone (`BuildOptions::capacity` giving every owner the same block
    /// count), and how it resyncs a replica that missed deltas.
    pub fn piece(&self, range: std::ops::Range<u64>) -> Result<crate::Piece, BuildError> {
        let h = &self.table.hdr;
        if range.start >= range.end || range.end > h.n_blocks {
            return Err(BuildError::BadRange {
                start: range.start,
                end: range.end,
                total: h.n_blocks,
            });
        }
        let (start, end) = (range.start as usize, range.end as usize);
        let rec = h.rec_bytes();
        let groups = start * GROUPS_PER_BLOCK..end * GROUPS_PER_BLOCK;
        let keys = groups
            .clone()
            .map(|g| entries(self.rib.group(g), self.payload_len, &self.prefix).count() as u64)
            .sum();
        let mut fallback = Vec::new();
        for (&(lo, hi), &v) in &self.table.fallback {
            let kh = KeyHash { lo, hi };
            if range.contains(&locate(kh, h.n_blocks).0) {
                fallback.extend_from_slice(&fallback_entry(kh, v));
            }
        }
        Ok(crate::Piece {
            config: h.config,
            value_bits: h.value_bits,
            seed: h.seed,
            build_id: h.build_id,
            total_blocks: h.n_blocks,
            range,
            keys,
            choices: self.table.choices
                [start * CHOICE_BYTES_PER_BLOCK..end * CHOICE_BYTES_PER_BLOCK]
                .to_vec(),
            groups: self.table.groups[groups.start * rec..groups.end * rec].to_vec(),
            fallback,
        })
    }

    /// The lookup table (what replicas hold).
    pub fn table(&self) -> &SetSep {
        &self.table
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The RIB's memory: its entries' bytes, and the bytes it has touched (the headers of
    /// the groups it has given an extent, and the extents its slab has handed out: the
    /// entries, their room to grow and the extents abandoned by groups that outgrew them, until
    /// the slab is next compacted). An owner's table has every group of the cluster and keys
    /// in its own range only: the other groups' headers are never written.
    pub fn rib_bytes(&self) -> RibBytes {
        let h = std::mem::size_of::<[u64; 2]>();
        RibBytes {
            entries: self.rib.live,
            touched: self.rib.held * h + self.rib.used,
            allocated: self.rib.head.len() * h + self.rib.data.len(),
        }
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value of `key`, if it is in the table.
    pub fn get(&self, key: &[u8]) -> Option<u16> {
        self.entry(key).map(|(v, _)| v)
    }

    /// The value and payload of `key`, if it is in the table.
    pub fn entry(&self, key: &[u8]) -> Option<(u16, &[u8])> {
        let t = self.table.tables();
        let h = t.hash(key);
        let g = t.group_of(h);
        let (a, pl) = (self.rib.group(g), self.payload_len);
        self.find_key(g, key).map(|(_, vo)| {
            let v = u16::from_le_bytes([a[vo], a[vo + 1]]);
            (v, &a[vo + TAIL..vo + TAIL + pl])
        })
    }

    /// Sets the payload of `key` (of [`Updatable::payload_len`] bytes); returns whether the key
    /// is in the table (when it is not, nothing changes). The table itself does not change.
    pub fn set_payload(&mut self, key: &[u8], payload: &[u8]) -> bool {
        assert_eq!(payload.len(), self.payload_len, "payload bytes");
        let t = self.table.tables();
        let h = t.hash(key);
        let g = t.group_of(h);
        let Some((_, vo)) = self.find_key(g, key) else {
            return false;
        };
        self.rib.group_mut(g)[vo + TAIL..vo + TAIL + payload.len()].copy_from_slice(payload);
        true
    }

    /// Bytes of each key's payload.
    pub fn payload_len(&self) -> usize {
        self.payload_len
    }

    /// The key prefix the RIB leaves out ([`Updatable::build_with_key_prefix`]; empty when
    /// none).
    pub fn key_prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// Finds `key` in group `g`'s RIB extent: (offset of its entry, offset of its value).
    fn find_key(&self, g: usize, key: &[u8]) -> Option<(usize, usize)> {
        find(
            self.rib.group(g),
            self.payload_len,
            stored(key, &self.prefix),
        )
    }

    /// Every key and value (in group order).
    pub fn iter(&self) -> impl Iterator<Item = (RibKey, u16)> + '_ {
        self.entries().map(|(k, v, _)| (k, v))
    }

    /// Every key, value and payload (in group order).
    pub fn entries(&self) -> impl Iterator<Item = (RibKey, u16, &[u8])> {
        let (pl, prefix) = (self.payload_len, &*self.prefix);
        (0..self.rib.head.len()).flat_map(move |g| {
            entries(self.rib.group(g), pl, prefix).map(|e| (e.key(), e.v, e.payload))
        })
    }

    fn check(&self, key: &[u8], value: u16) -> Result<(), UpdateError> {
        if !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&key.len()) {
            return Err(UpdateError::BadKeyLength(key.len()));
        }
        let vb = self.table.hdr.value_bits;
        if vb < 16 && value >> vb != 0 {
            return Err(UpdateError::ValueTooWide {
                value,
                value_bits: vb,
            });
        }
        Ok(())
    }

    /// Inserts `key` or changes its value; returns the delta applied.
    pub fn insert(&mut self, key: &[u8], value: u16) -> Result<Delta, UpdateError> {
        self.check(key, value)?;
        let h = hash128(key, self.table.hdr.seed);
        self.prefetch_candidates(h);
        let d = self.insert_hashed(key, value, h, None)?;
        self.maybe_grow()?;
        Ok(d)
    }

    /// [`Updatable::insert`] of every `(key, value)` of `updates`, in order, passing each delta
    /// to `sink`; the result is the same as inserting them one by one. While one update is
    /// solved, the memory of the next ones is already on its way (a key's bucket choice and
    /// candidate groups three updates ahead, its group's RIB extent one ahead), so
    /// at sizes beyond the cache the updates do not wait on DRAM one after another.
    ///
    /// On an error, the updates before the failing one are applied (their deltas went to
    /// `sink`) and the rest are not.
    ///
    /// ```
    /// use sb_setsep::{BuildOptions, Updatable};
    /// let keys: Vec<Vec<u8>> = (0u32..1000).map(|i| i.to_be_bytes().to_vec()).collect();
    /// let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    /// let values = vec![0u16; keys.len()];
    /// let opts = BuildOptions { value_bits: 1, ..BuildOptions::default() };
    /// let mut u = Updatable::build(&refs, &values, &opts).unwrap();
    /// let changes: Vec<(&[u8], u16)> = refs.iter().take(10).map(|k| (*k, 1)).collect();
    /// let mut deltas = Vec::new();
    /// u.insert_batch(&changes, |d| deltas.push(d)).unwrap();
    /// assert_eq!(deltas.len(), 10);
    /// assert_eq!(u.table().lookup(refs[3]), 1);
    /// ```
    pub fn insert_batch(
        &mut self,
        updates: &[(&[u8], u16)],
        sink: impl FnMut(Delta),
    ) -> Result<(), UpdateError> {
        self.insert_batch_of(updates.len(), |i| (updates[i].0, updates[i].1, None), sink)
    }

    /// [`Updatable::insert_batch`] that also sets each key's payload (of
    /// [`Updatable::payload_len`] bytes; panics otherwise), as [`Updatable::set_payload`]
    /// after it would, without finding the key again.
    pub fn insert_batch_with_payloads(
        &mut self,
        updates: &[(&[u8], u16, &[u8])],
        sink: impl FnMut(Delta),
    ) -> Result<(), UpdateError> {
        for u in updates {
            assert_eq!(u.2.len(), self.payload_len, "payload bytes");
        }
        self.insert_batch_of(
            updates.len(),
            |i| (updates[i].0, updates[i].1, Some(updates[i].2)),
            sink,
        )
    }

    fn insert_batch_of<'a>(
        &mut self,
        n: usize,
        update: impl Fn(usize) -> (&'a [u8], u16, Option<&'a [u8]>),
        mut sink: impl FnMut(Delta),
    ) -> Result<(), UpdateError> {
        let seed = self.table.hdr.seed;
        let mut hs = [KeyHash::default(); UPDATE_AHEAD + 1];
        let ahead = |u: &Self, i: usize, hs: &mut [KeyHash; UPDATE_AHEAD + 1]| {
            if i < n {
                let h = hash128(update(i).0, seed);
                hs[i % (UPDATE_AHEAD + 1)] = h;
                u.prefetch_candidates(h);
            }
        };
        for i in 0..UPDATE_AHEAD {
            ahead(self, i, &mut hs);
        }
        for i in 0..n {
            let (key, value, payload) = update(i);
            ahead(self, i + UPDATE_AHEAD, &mut hs);
            if i + 1 < n {
                // The next key's choice arrived meanwhile: start its RIB extent.
                let g = self
                    .table
                    .tables()
                    .group_of(hs[(i + 1) % (UPDATE_AHEAD + 1)]);
                self.prefetch_group(g);
            }
            self.check(key, value)?;
            sink(self.insert_hashed(key, value, hs[i % (UPDATE_AHEAD + 1)], payload)?);
            self.maybe_grow()?;
        }
        Ok(())
    }

    /// [`Updatable::insert`] of a checked key whose hash is `h`, setting its payload when one is
    /// given (a new key's is zeros otherwise).
    fn insert_hashed(
        &mut self,
        key: &[u8],
        value: u16,
        h: KeyHash,
        payload: Option<&[u8]>,
    ) -> Result<Delta, UpdateError> {
        let g = self.table.tables().group_of(h);
        self.prefetch_group(g);
        // The group's keys do not change but for a new one, added last: hashed once here for
        // the collision check, the fallback entries and the re-search.
        self.hash_group(g);
        let old_hashes = if self.table.tables().is_fallback_group(g) {
            self.ghashes.clone()
        } else {
            Vec::new()
        };
        let pl = self.payload_len;
        match self.find_key(g, key) {
            Some((_, vo)) => {
                let e = &mut self.rib.group_mut(g)[vo..vo + TAIL + pl];
                e[..2].copy_from_slice(&value.to_le_bytes());
                if let Some(p) = payload {
                    e[TAIL..].copy_from_slice(p);
                }
            }
            None => {
                if self.ghashes.contains(&h) {
                    return Err(UpdateError::HashCollision);
                }
                let mut buf: EntryBuf = [0; ENTRY_MAX];
                let payload = payload.unwrap_or(&[0; MAX_RIB_PAYLOAD][..pl]);
                let n = encode_entry(&mut buf, key, &self.prefix, value, payload);
                self.rib.append(g, &buf[..n]);
                self.ghashes.push(h);
                self.len += 1;
            }
        }
        Ok(self.resolve(g, old_hashes))
    }

    /// Removes `key`; returns the delta applied, or `None` if the key was not there.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<Delta>, UpdateError> {
        if !(MIN_KEY_LEN..=MAX_KEY_LEN).contains(&key.len()) {
            return Err(UpdateError::BadKeyLength(key.len()));
        }
        let h = hash128(key, self.table.hdr.seed);
        self.prefetch_candidates(h);
        let g = self.table.tables().group_of(h);
        self.prefetch_group(g);
        let Some((p, vo)) = self.find_key(g, key) else {
            return Ok(None);
        };
        let old_hashes = if self.table.tables().is_fallback_group(g) {
            self.hash_group(g);
            self.ghashes.clone()
        } else {
            Vec::new()
        };
        self.rib.remove(g, p..vo + TAIL + self.payload_len);
        self.hash_group(g);
        self.len -= 1;
        Ok(Some(self.resolve(g, old_hashes)))
    }

    /// Starts loading the RIB headers and records of the key's four candidate groups while its
    /// bucket choice is being read (the choice picks one of them).
    fn prefetch_candidates(&self, h: KeyHash) {
        let (blk, bkt) = crate::layout::locate(h, self.table.hdr.n_blocks);
        let base = blk as usize * crate::layout::GROUPS_PER_BLOCK;
        let rec = self.table.hdr.rec_bytes();
        for &c in &crate::layout::CAND[bkt] {
            let g = base + c as usize;
            prefetch(&self.rib.head, g);
            prefetch(&self.table.groups, g * rec);
        }
    }

    /// Starts loading group `g`'s record, RIB header and RIB extent, so the three cache misses
    /// overlap instead of following each other.
    fn prefetch_group(&self, g: usize) {
        let rec = self.table.hdr.rec_bytes();
        prefetch(&self.table.groups, g * rec);
        let (off, len, _) = Rib::unpack(self.rib.head[g]);
        for o in (off..off + len).step_by(64) {
            prefetch(&self.rib.data, o);
        }
    }

    /// Hashes group `g`'s keys into `ghashes`, in its RIB order.
    fn hash_group(&mut self, g: usize) {
        let seed = self.table.hdr.seed;
        self.ghashes.clear();
        let es = entries(self.rib.group(g), self.payload_len, &self.prefix);
        self.ghashes.extend(es.map(|e| e.hash(seed)));
    }

    /// Rebuilds block `blk` from its RIB (new bucket choices, all 64 groups searched again),
    /// moves its keys to their new groups, applies and returns the block delta. A growing
    /// owner does this instead of sending a group to the fallback table: inserts do not
    /// re-balance buckets, so a block's groups fill unevenly between growths.
    fn rebalance_block(&mut self, blk: usize) -> Delta {
        let seed = self.table.hdr.seed;
        let n_blocks = self.table.hdr.n_blocks;
        let first = blk * GROUPS_PER_BLOCK;
        let mut fb_remove = Vec::new();
        let mut keys: Vec<(KeyHash, u16)> = Vec::new();
        // Each key's hash and its entry as encoded (moved as it is).
        let mut raw: Vec<(KeyHash, Vec<u8>)> = Vec::new();
        let pl = self.payload_len;
        {
            let t = self.table.tables();
            for g in first..first + GROUPS_PER_BLOCK {
                // A fallback group's RIB keys are the ones in the fallback table: only the
                // group being changed differs, and it was not a fallback group.
                let in_fb = t.is_fallback_group(g);
                for e in entries(self.rib.group(g), pl, &self.prefix) {
                    let h = e.hash(seed);
                    if in_fb {
                        fb_remove.push(h);
                    }
                    keys.push((h, e.v));
                    raw.push((h, e.raw.to_vec()));
                }
            }
        }
        let opts = &self.opts;
        let builder = self
            .builder
            .get_or_insert_with(|| Box::new(BlockBuilder::new(opts)));
        let (choices, record, fb) = builder.rebuild_block(&keys, blk as u64, n_blocks);
        // Move every key of the block to its new group.
        for g in first..first + GROUPS_PER_BLOCK {
            let len = self.rib.group(g).len();
            self.rib.remove(g, 0..len);
        }
        for (h, entry) in &raw {
            let bkt = locate(*h, n_blocks).1;
            let g = first + CAND[bkt][choice_of(choices[bkt / 4], bkt)] as usize;
            self.rib.append(g, entry);
        }
        let fb_insert = (0..fb.len() / FB_ENTRY)
            .map(|i| {
                let (lo, hi) = crate::table::fallback_key(&fb, i);
                let v = u16::from_le_bytes([fb[i * FB_ENTRY + 16], fb[i * FB_ENTRY + 17]]);
                (KeyHash { lo, hi }, v)
            })
            .collect();
        let mut d = Delta {
            config: self.table.hdr.config,
            value_bits: self.table.hdr.value_bits,
            table: self.table.hdr.fingerprint(),
            n_blocks,
            n_keys: self.len as u64,
            seq: self.table.hdr.seq + 1,
            digest: 0,
            group: first as u64,
            record: Record::from_vec(record),
            choices: Some(choices),
            fb_remove,
            fb_insert,
        };
        d.seal(&mut self.scratch);
        apply(&mut self.table, &d, true).expect("a delta made from this table applies to it");
        self.rebalances += 1;
        d
    }

    /// Re-solves group `g` from its RIB and `ghashes` (its keys' hashes, in its RIB order, after
    /// the change), applies and returns the delta. `old_hashes` are the group's fallback
    /// entries before the change (empty unless it was a fallback group).
    fn resolve(&mut self, g: usize, old_hashes: Vec<KeyHash>) -> Delta {
        let cfg = self.table.hdr.config;
        let vbits = self.table.hdr.value_bits as u32;
        let rec = self.table.hdr.rec_bytes();
        self.gkeys.clear();
        let es = entries(self.rib.group(g), self.payload_len, &self.prefix);
        for (e, &h) in es.zip(&self.ghashes) {
            let (a, b) = family(h);
            self.gkeys.push(GKey { a, b, v: e.v });
        }
        let t = self.table.tables();
        let was_fb = t.is_fallback_group(g);
        let mut record = Record::from_elem(0, rec);
        // Current indexes; keep those that still separate.
        let eb = cfg.entry_bytes();
        let mut idx = [0u16; 16];
        let mut want = 0u16;
        for j in 0..vbits {
            let off = g * rec + j as usize * eb;
            let mut w = [0u8; 8];
            w[..eb].copy_from_slice(&self.table.groups[off..off + eb]);
            let cur = (u64::from_le_bytes(w) & ((1u64 << cfg.index_bits) - 1)) as u16;
            idx[j as usize] = cur;
            if was_fb || !separates(cfg, &self.gkeys, j, cur) {
                want |= 1 << j;
            }
        }
        let found = self.searcher.search(cfg, &self.gkeys, want, &mut idx);
        let now_fb = found != want;
        if now_fb && !was_fb && self.growth.is_some() {
            return self.rebalance_block(g / GROUPS_PER_BLOCK);
        }
        if now_fb {
            write_mark(cfg, &mut record);
        } else {
            let mut ents = [(0u16, 0u32); 16];
            for (j, e) in ents.iter_mut().enumerate().take(vbits as usize) {
                *e = (idx[j], array_for(cfg, &self.gkeys, j as u32, idx[j]));
            }
            write_record(cfg, &ents[..vbits as usize], &mut record);
        }
        let fb_remove = old_hashes;
        let fb_insert = if now_fb {
            entries(self.rib.group(g), self.payload_len, &self.prefix)
                .zip(&self.ghashes)
                .map(|(e, &h)| (h, e.v))
                .collect()
        } else {
            Vec::new()
        };
        let mut d = Delta {
            config: cfg,
            value_bits: vbits as u8,
            table: self.table.hdr.fingerprint(),
            n_blocks: self.table.hdr.n_blocks,
            n_keys: self.len as u64,
            seq: self.table.hdr.seq + 1,
            digest: 0,
            group: g as u64,
            record,
            choices: None,
            fb_remove,
            fb_insert,
        };
        d.seal(&mut self.scratch);
        apply(&mut self.table, &d, true).expect("a delta made from this table applies to it");
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_groups_take_no_room() {
        let mut rib = Rib::with_sizes(&[0; 1000]);
        assert_eq!(rib.used, 0);
        rib.append(500, &[7; 10]);
        assert_eq!(rib.used, Rib::cap_for(15));
        assert_eq!(rib.group(500), &[7; 10]);
        assert!(rib.group(499).is_empty() && rib.group(501).is_empty());
        // The other groups' headers stay zero, also through a compaction that empties 500.
        assert!((rib.head.iter().enumerate()).all(|(g, h)| g == 500 || *h == [0, 0]));
        assert_eq!(rib.held, 1);
        rib.remove(500, 0..10);
        assert_eq!(
            rib.held, 1,
            "an emptied group keeps its extent until a compaction"
        );
        rib.grow(0);
        assert!(rib.head.iter().all(|h| *h == [0, 0]));
        assert_eq!(rib.used, 0);
        assert_eq!(rib.held, 0);
    }

    #[test]
    fn rib_slab_grows_moves_and_compacts() {
        let mut rib = Rib::with_sizes(&[0, 10, 0]);
        let mut model: Vec<Vec<u8>> = vec![Vec::new(); 3];
        for i in 0..5000usize {
            let g = i % 3;
            let bytes: Vec<u8> = (0..(i % 17 + 1)).map(|j| (i + j) as u8).collect();
            rib.append(g, &bytes);
            model[g].extend_from_slice(&bytes);
            if i % 7 == 0 && model[g].len() > 5 {
                rib.remove(g, 1..4);
                model[g].drain(1..4);
            }
            if i % 11 == 0 {
                rib.group_mut(g)[0] ^= 0xff;
                model[g][0] ^= 0xff;
            }
        }
        for (g, m) in model.iter().enumerate() {
            assert_eq!(rib.group(g), &m[..]);
        }
        assert_eq!(rib.held, 3);
        // The slab grew from its initial few KB (moves and compaction happened).
        assert!(rib.data.len() > 40_000);
        // Groups emptied get no room at the next compaction.
        for g in [0, 2] {
            let n = rib.group(g).len();
            rib.remove(g, 0..n);
            model[g].clear();
        }
        rib.grow(0);
        assert_eq!(rib.used, Rib::cap_for(model[1].len()));
        for (g, m) in model.iter().enumerate() {
            assert_eq!(rib.group(g), &m[..]);
        }
        // The entries' bytes are counted as they come and go, and the headers in use.
        assert_eq!(rib.live, model.iter().map(Vec::len).sum::<usize>());
        assert_eq!(rib.held, 1);
        assert!(rib.used >= rib.live);
    }
}
