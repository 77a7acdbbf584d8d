//! SetSep, the Global Partition Table: a few bits per key, no keys stored, maps every flow to its
//! handling node.
//!
//! A [`SetSep`] maps each key of a fixed set (byte strings of 4 to 64 bytes) to a value of 1 to 16
//! bits without storing the keys (ScaleBricks, SIGCOMM 2015, sections 4.3-5.1). A key that was not
//! in the set gets an arbitrary value: the handling node's FIB catches it.
//!
//! How it works, in one paragraph: a key is hashed once ([`sb_common::hash128`] with the table
//! seed). The hash picks a bucket (about 4 keys); 256 buckets form a 1024-key block with 64 groups;
//! each bucket chose one of 4 pre-assigned candidate groups (2 bits per bucket, chosen by a greedy
//! balancer over several randomized runs per block). For each group (about 16 keys) and each value
//! bit, a brute-force search found a hash index `i` (x bits) and a bit array (y bits) such that
//! bit `((a << 16) + i*b) mod 2^32 >> (32 - log2 y)` of the array is that value bit for every key
//! of the group (`a`, 16 bits, and `b`, an odd 20-bit slope times 2^12, are base hashes of the
//! key: bits of its 128-bit hash; see `layout::position`). With 16-bit indexes a block in which a
//! group's search fails is balanced again (other randomized runs, up to 3 more times); groups
//! whose search still fails keep their keys' hashes in a small sorted fallback table.
//!
//! ```
//! use sb_setsep::{BuildOptions, SetSep};
//!
//! let keys: Vec<Vec<u8>> = (0u32..5000).map(|i| i.to_be_bytes().to_vec()).collect();
//! let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
//! let values: Vec<u16> = (0..5000).map(|i| (i % 4) as u16).collect();
//! let opts = BuildOptions { value_bits: 2, ..BuildOptions::default() };
//! let table = SetSep::build(&keys, &values, &opts)?;
//! assert_eq!(table.lookup(&7u32.to_be_bytes()), 3);
//!
//! let mut out = vec![0u16; keys.len()];
//! table.lookup_batch(&keys, &mut out);
//! assert_eq!(out, values);
//!
//! // Save, load (validated), compare.
//! let bytes = table.to_bytes();
//! let loaded = SetSep::from_bytes(&bytes)?;
//! assert_eq!(loaded.lookup(&4999u32.to_be_bytes()), 3);
//! println!("{:.3} bits/key", table.stats().bits_per_key);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Cost model
//!
//! Space (exact, as [`Stats::bits_per_key`] reports it): 0.5 bits per key for the bucket choices,
//! plus `(x + y) / 16` bits per key per value bit for the group records, plus 144 bits per
//! fallback key (its 128-bit hash and a 16-bit value), with the key count rounded up to whole
//! 1024-key blocks. A group whose search fails puts all its keys in the fallback table.
//!
//! | preset | [`Config`] | bits/key, 1-bit values | bits/key, 2-bit values | fallback keys | build, 2-bit values, one core |
//! |---|---|---|---|---|---|
//! | default, compact | [`Config::C16_8`] `16+8` | 2.000 | 3.500 | 0 (see below) | about 6-7 M keys/s |
//! | fast build | [`Config::C8_16`] `8+16` | 3.6 (1.1% fallback) | 6.5 (2.1% fallback) | 1-2% | about 10 M keys/s |
//! | no fallback | [`Config::C16_16`] `16+16` | 2.5 | 4.5 | 0 in practice | about 10 M keys/s |
//!
//! (Measured at 1M and 16M random 13-byte keys on one core of an AMD EPYC (Zen 3) shared with
//! other jobs; build rates are per CPU-second. `cargo bench -p sb-setsep --bench setsep -- N V
//! CONFIG BATCH all` prints them. The 8+16 fallback shares were measured with the 16-bit hash
//! family of format version 4; with version 6's, one build at 1M keys gave 1.09% and 2.07%.)
//!
//! 16+8 fallback: with the hash family above (format version 6) and the re-balance of a block
//! with a failed group, 0 fallback keys in 59 of 60 builds (10 seeds each at 1M, 4M and 16M random
//! 13-byte keys with 1- and 2-bit values; one 4M 1-bit build had 16, `tests/no_fallback.rs`); the
//! 16-bit family `a + i*b (mod 2^16)` of version 4 left 15 to 250 keys per build at 1M and 4M
//! keys, 3% of 20-key groups finding no index among 65,535. Version 5's family (any odd 32-bit
//! slope) had none either but a slower AVX2 search; version 6 searches as fast as version 4
//! (`docs/bench/gpt.md`).
//!
//! Lookup: one hash of the key ([`sb_common::hash128`]), then two dependent memory reads: the block's choice
//! byte, then the group record (`3 * value_bits` bytes for 16+8). [`SetSep::lookup_batch`] runs
//! the three-stage prefetch pipeline of the paper's Algorithm 1 over windows of 32 keys, so the
//! record reads of a window are in flight together. With 2-bit values, one core (medians of
//! `scalebricks bench gpt` on a shared 2-core VM): at 4M keys (1.8 MB) about 26 ns per single
//! lookup and 14 ns per key batched (about 38 and 73 M lookups/s); at 16M keys (7 MB, beyond
//! the cache) about 14 ns per key batched (about 69 M lookups/s), 4x single lookups
//! (`scalebricks bench gpt --keys N --value-bits 2`, docs/bench/gpt.md).
//!
//! Construction: about 40-60 candidate hash indexes per key (2-bit values), tested 64 at a time
//! (four 16-lane vectors) by an AVX2 kernel picked at run time (about 1 ns per candidate for a
//! 16-key group), with a scalar reference kernel that gives identical tables ([`Kernel`]).
//! Blocks are built in parallel on a local rayon pool of [`BuildOptions::threads`] threads;
//! the result does not depend on the thread count. Memory during the build: about 24 bytes per
//! key. [`Updatable`] keeps every group's keys in one huge-page slab (about 27 bytes per 13-byte
//! key) and re-searches only the changed key's group, only for the value bits whose hash index
//! stopped working (a deletion searches only a group that sat in the fallback table): about
//! 1.5-2 us per value change at 16M keys, 0.5-0.7 M updates/s per core;
//! [`Updatable::insert_batch`] starts the next updates' memory loads while one is solved (about
//! 1.3x at 16M). The [`Delta`] it returns
//! is about 30 bytes; replicas apply it with [`SetSep::apply_delta`] (a record copy) and stay
//! byte-identical.
//!
//! Deltas know their table and their place. Every table has a fingerprint
//! ([`SetSep::fingerprint`]: a digest of its seed, shape and [`BuildOptions::build_id`]) and a
//! sequence number ([`SetSep::seq`]: the deltas applied since the build, kept in the image
//! with a digest of the last one). Every delta carries the fingerprint and its owner's next
//! number, one count per table; every [`Piece`] carries the seed and build id. A replica
//! takes delta `seq() + 1` only, takes a duplicate of its last delta as a no-op, and refuses
//! a foreign, stale, conflicting or gapped delta with a [`DeltaError`] that says which,
//! leaving the table unchanged; after a [`DeltaError::Gap`] it resyncs from a snapshot of the
//! owner's table (whose image carries the number to go on from).
//!
//! A delta that moves a group into or out of the fallback table also edits the owned table's
//! fallback map, O(log n) per entry: on a replica at 1M keys with 8+16 and 2-bit values (22,441
//! fallback keys) such a delta took 80 us when the fallback table was a sorted vector cloned and
//! spliced per delta, and 3.6 us now; other deltas about 0.03-0.05 us
//! (`cargo run --release -p sb-setsep --example applycost`, medians of 3 on the shared 2-core AMD
//! EPYC VM, measured before the last change of the key hash; on the final code one run gave
//! 22,535 fallback keys, 3.62 us per fallback delta and 0.055 us per other delta).
//!
//! A node's workers share a [`LiveSetSep`]: the same table and lookups (through `&self`),
//! with deltas and pieces applied in place, through `&self` too, while they read it. A
//! seqlock per block (a version word per 1024-key block, the arrays held as atomic words)
//! makes every block switch from its old content to its new at once for readers; the `live`
//! module documents the protocol, and a loom model checks it.
//!
//! A table has the blocks for its keys, or for [`BuildOptions::capacity`] keys (headroom for
//! inserts). An [`Updatable`] with a [`Growth`] policy grows as inserts fill it: past the
//! policy's load it rebuilds itself from its RIB with more blocks, and replicas load the grown
//! table's image; when an insert would send a group to the fallback table it re-balances the
//! group's block instead (one block delta). From 1M to 8M keys by inserts alone (16+8, 2-bit
//! values) that kept fallback at most 0.0031% of the keys and bits/key at most 3.933, at about
//! 0.6x the insert rate of a table that does not grow; [`Growth`] has the measurements and the
//! cost to replicas.
//!
//! Invariant: this crate never does I/O except [`SetSep::write_to`] and [`MappedSetSep::open`].

mod build;
mod format;
mod kernel;
#[cfg(target_arch = "x86_64")]
mod kernel_avx2;
mod layout;
mod live;
mod lookup;
mod prefetch;
mod sync;
mod table;
mod update;

pub use build::Piece;
pub use format::{MappedSetSep, SetSepView};
#[doc(hidden)]
pub use kernel::bench_search;
pub use layout::{num_blocks, MAX_KEY_LEN, MIN_KEY_LEN};
pub use live::LiveSetSep;
pub use lookup::GptLookup;
pub use table::{fingerprint, SetSep, Stats};
pub use update::{Delta, Growth, RibBytes, RibKey, Updatable, MAX_RIB_PAYLOAD};

use std::fmt;
use std::str::FromStr;

/// Bits of one group's hash function per value bit: `index_bits` (x) of hash index and
/// `array_bits` (y) of bit array. Each must be 8 or 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Bits of the hash index (x): the search tries up to `2^x - 1` hash functions.
    pub index_bits: u8,
    /// Bits of the bit array (y).
    pub array_bits: u8,
}

impl Config {
    /// 16-bit index, 8-bit array: the paper's default, 2.0 bits/key for 1-bit values.
    pub const C16_8: Config = Config {
        index_bits: 16,
        array_bits: 8,
    };
    /// 8-bit index, 16-bit array: fast construction, some fallback.
    pub const C8_16: Config = Config {
        index_bits: 8,
        array_bits: 16,
    };
    /// 16-bit index, 16-bit array: more space, practically no fallback.
    pub const C16_16: Config = Config {
        index_bits: 16,
        array_bits: 16,
    };

    /// Checks that both fields are 8 or 16.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ok = |b: u8| b == 8 || b == 16;
        if ok(self.index_bits) && ok(self.array_bits) {
            Ok(())
        } else {
            Err(ConfigError::Unsupported {
                index_bits: self.index_bits,
                array_bits: self.array_bits,
            })
        }
    }

    /// Bits stored per group per value bit.
    pub fn bits_per_group_bit(&self) -> u32 {
        self.index_bits as u32 + self.array_bits as u32
    }

    /// Bytes of one (index, array) entry.
    pub(crate) fn entry_bytes(&self) -> usize {
        (self.index_bits as usize + self.array_bits as usize) / 8
    }

    /// log2 of the bit array size (3 or 4).
    pub(crate) fn array_log(&self) -> u32 {
        if self.array_bits == 8 {
            3
        } else {
            4
        }
    }

    /// The reserved index that marks a group whose keys are in the fallback table; the search
    /// tries indexes `0..mark()`.
    pub(crate) fn mark(&self) -> u16 {
        ((1u32 << self.index_bits) - 1) as u16
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::C16_8
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.index_bits, self.array_bits)
    }
}

impl FromStr for Config {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ConfigError::Parse(s.to_string());
        let (x, y) = s.trim().split_once('+').ok_or_else(bad)?;
        let c = Config {
            index_bits: x.trim().parse().map_err(|_| bad())?,
            array_bits: y.trim().parse().map_err(|_| bad())?,
        };
        c.validate()?;
        Ok(c)
    }
}

/// Which group-search kernel the build uses. Both give identical tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Kernel {
    /// AVX2 when the CPU has it, else scalar.
    #[default]
    Auto,
    /// The portable scalar reference kernel.
    Scalar,
    /// The AVX2 kernel; the build fails with [`BuildError::KernelUnavailable`] without AVX2.
    Avx2,
}

impl Kernel {
    /// Whether this CPU can run the AVX2 kernel.
    pub fn avx2_available() -> bool {
        kernel::avx2_available()
    }
}

/// Everything a build needs besides the keys and values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildOptions {
    /// Hash index and bit array widths.
    pub config: Config,
    /// Bits per value, 1..=16; every value must be below `2^value_bits`.
    pub value_bits: u8,
    /// Build threads; 0 means all cores.
    pub threads: usize,
    /// Seed of the key hash (stored in the table). [`BuildOptions::default`] draws it from the
    /// OS ([`sb_common::random_seed`]), so nobody outside the process can craft keys that
    /// collide or crowd one block; set it for a reproducible build, and give every node that
    /// builds pieces of one table ([`SetSep::build_blocks`]) the same seed.
    pub seed: u64,
    /// Identity of this build (stored in the table, in its pieces and, through the table's
    /// fingerprint, in every delta): two tables with one seed and shape but different builds
    /// refuse each other's deltas. [`BuildOptions::default`] draws it from the OS; every node
    /// that builds pieces of one table uses the same one; set it for a reproducible image.
    pub build_id: u64,
    /// Keys the table is sized for (headroom for inserts): it gets
    /// [`num_blocks`]`(max(keys, capacity))` blocks. 0: the number of keys given. Bits per key
    /// grow with the headroom (3.5 / load for 16+8 and 2-bit values); see [`Growth`].
    pub capacity: u64,
    /// Randomized greedy balancing runs per block (at least 1); the best is kept.
    pub runs: u32,
    /// Which search kernel to use.
    pub kernel: Kernel,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            config: Config::C16_8,
            value_bits: 1,
            threads: 0,
            seed: sb_common::random_seed(),
            build_id: sb_common::random_seed(),
            capacity: 0,
            runs: 4,
            kernel: Kernel::Auto,
        }
    }
}

/// A [`Config`] that is not supported or does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Index and array bits must each be 8 or 16.
    #[error(
        "unsupported config {index_bits}+{array_bits}: index and array bits must each be 8 or 16"
    )]
    Unsupported {
        /// The index bits asked for.
        index_bits: u8,
        /// The array bits asked for.
        array_bits: u8,
    },
    /// The text is not of the form `X+Y`.
    #[error("cannot parse config {0:?}: expected X+Y such as 16+8")]
    Parse(String),
}

/// Why a build failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// `keys` and `values` differ in length.
    #[error("{keys} keys but {values} values")]
    LengthMismatch {
        /// Number of keys.
        keys: usize,
        /// Number of values.
        values: usize,
    },
    /// A key is shorter than 4 or longer than 64 bytes.
    #[error("key {index} is {len} bytes long; keys must be 4 to 64 bytes")]
    BadKeyLength {
        /// Position of the key in the input.
        index: usize,
        /// Its length.
        len: usize,
    },
    /// The same key appears twice.
    #[error("key {index} is a duplicate of key {first}")]
    DuplicateKey {
        /// Position of the later occurrence.
        index: usize,
        /// Position of the earlier occurrence.
        first: usize,
    },
    /// A value does not fit in `value_bits` bits.
    #[error("value {value} of key {index} does not fit in {value_bits} bits")]
    ValueTooWide {
        /// Position of the key in the input.
        index: usize,
        /// The value.
        value: u16,
        /// The value width of the build.
        value_bits: u8,
    },
    /// More than `u32::MAX` keys.
    #[error("{0} keys is more than a table takes (4294967295)")]
    TooManyKeys(usize),
    /// `value_bits` is not in 1..=16.
    #[error("value_bits must be 1 to 16, got {0}")]
    BadValueBits(u8),
    /// The config is not supported.
    #[error(transparent)]
    BadConfig(#[from] ConfigError),
    /// Two different keys have the same 128-bit hash; build again with another seed.
    #[error("keys {a} and {b} have the same 128-bit hash; build again with another seed")]
    HashCollision {
        /// Position of one key.
        a: usize,
        /// Position of the other.
        b: usize,
    },
    /// A block range is empty or not inside `0..total_blocks`.
    #[error("block range {start}..{end} is not a non-empty part of 0..{total}")]
    BadRange {
        /// Range start.
        start: u64,
        /// Range end.
        end: u64,
        /// Total blocks.
        total: u64,
    },
    /// Pieces given to [`SetSep::assemble`] do not form one table.
    #[error("pieces do not form one table: {0}")]
    PieceMismatch(&'static str),
    /// [`Kernel::Avx2`] was asked for on a CPU without AVX2.
    #[error("the AVX2 kernel was requested but this CPU has no AVX2")]
    KernelUnavailable,
    /// The build thread pool could not start.
    #[error("cannot start build threads: {0}")]
    ThreadPool(String),
}

/// Why a saved table was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The bytes end before the table does.
    #[error("truncated: need {needed} bytes, have {got}")]
    Truncated {
        /// Bytes the header says the table has (or the header size).
        needed: u64,
        /// Bytes given.
        got: u64,
    },
    /// The bytes do not start with the SetSep magic.
    #[error("not a SetSep table (bad magic)")]
    BadMagic,
    /// A format version this build does not read.
    #[error("unsupported format version {0} (this build reads version {v})", v = format::VERSION)]
    UnsupportedVersion(u32),
    /// A header field is out of range.
    #[error("bad header: {0}")]
    BadHeader(&'static str),
    /// More bytes than the header accounts for.
    #[error("size mismatch: header says {expected} bytes, have {got}")]
    TrailingBytes {
        /// Bytes the header accounts for.
        expected: u64,
        /// Bytes given.
        got: u64,
    },
    /// The checksum does not match: the bytes were corrupted.
    #[error("checksum mismatch: the table is corrupted")]
    Checksum,
    /// The fallback table is not sorted or has a value too wide.
    #[error("bad fallback table: {0}")]
    BadFallback(&'static str),
    /// Reading or mapping the file failed.
    #[error("cannot read table file: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a [`Delta`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// The bytes end early or have trailing garbage.
    #[error("malformed delta: {0}")]
    Malformed(&'static str),
    /// The checksum does not match.
    #[error("delta checksum mismatch")]
    Checksum,
    /// The delta is for a table of another shape (config, value bits or size).
    #[error("delta does not fit this table: {0}")]
    Mismatch(&'static str),
    /// The delta's fallback edits do not match this table's fallback table.
    #[error("delta fallback edits do not match this table: {0}")]
    FallbackMismatch(&'static str),
    /// The delta was made for another table: same shape, but another seed or build id (its
    /// fingerprint differs from [`SetSep::fingerprint`]).
    #[error("delta is for another table (fingerprint {got:#018x}, this table's {expected:#018x})")]
    ForeignTable {
        /// This table's fingerprint.
        expected: u64,
        /// The delta's.
        got: u64,
    },
    /// Deltas were missed: this one's sequence number is past the next one the table takes.
    /// Resync from a snapshot of the owner's table.
    #[error("missed deltas: expected sequence number {expected}, got {got}")]
    Gap {
        /// The number the table takes next ([`SetSep::seq`] + 1).
        expected: u64,
        /// The delta's number.
        got: u64,
    },
    /// The delta is older than the last one applied (a replay, or deltas out of order).
    #[error("stale delta: sequence number {seq}, the table has applied up to {applied}")]
    Stale {
        /// The delta's number.
        seq: u64,
        /// [`SetSep::seq`].
        applied: u64,
    },
    /// The delta has the number of the last one applied but is a different delta (two owners
    /// of one table?); a duplicate of the last delta is accepted as a no-op.
    #[error("conflicting delta: another delta with sequence number {seq} was applied")]
    Conflict {
        /// The sequence number.
        seq: u64,
    },
}

/// Why an update was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// A key is shorter than 4 or longer than 64 bytes.
    #[error("key is {0} bytes long; keys must be 4 to 64 bytes")]
    BadKeyLength(usize),
    /// A value does not fit in the table's value bits.
    #[error("value {value} does not fit in {value_bits} bits")]
    ValueTooWide {
        /// The value.
        value: u16,
        /// The table's value width.
        value_bits: u8,
    },
    /// Two different keys have the same 128-bit hash.
    #[error("the key has the same 128-bit hash as another key of the table")]
    HashCollision,
    /// The key went in, but growing the table afterwards ([`Growth`]) failed; the table is
    /// the one before the growth, with the key.
    #[error("the key went in but the table could not grow: {0}")]
    Grow(BuildError),
}

/// Entry points for the cargo-fuzz targets (and the proptests that run the same code).
#[doc(hidden)]
pub mod fuzzing {
    use crate::{BuildOptions, Delta, SetSep, SetSepView};
    use std::sync::OnceLock;

    const PROBES: [&[u8]; 4] = [b"abcd", b"0123456789abc", &[0xff; 64], &[0; 16]];

    /// Loads arbitrary bytes as a table (and as a [`crate::Piece`]); whatever is accepted must
    /// answer lookups without
    /// panicking and serialize back to the same bytes. Also tries the bytes with a correct
    /// checksum appended in place of the last 8, so the checks behind the checksum are reached.
    pub fn load_table(data: &[u8]) {
        load_table_once(data);
        if data.len() >= 8 {
            let mut fixed = data.to_vec();
            let n = fixed.len() - 8;
            let sum = xxhash_rust::xxh3::xxh3_64(&fixed[..n]);
            fixed[n..].copy_from_slice(&sum.to_le_bytes());
            load_table_once(&fixed);
        }
    }

    fn load_table_once(data: &[u8]) {
        if let Ok(p) = crate::Piece::from_bytes(data) {
            assert_eq!(p.to_bytes(), data);
            if let Ok(t) = SetSep::assemble(vec![p]) {
                let mut out = [0u16; PROBES.len()];
                t.lookup_batch(&PROBES, &mut out);
            }
        }
        if let Ok(t) = SetSep::from_bytes(data) {
            let mut out = [0u16; PROBES.len()];
            t.lookup_batch(&PROBES, &mut out);
            for (k, &v) in PROBES.iter().zip(&out) {
                assert_eq!(t.lookup(k), v);
            }
            let _ = t.stats();
            assert_eq!(t.to_bytes(), data);
        }
        if let Ok(v) = SetSepView::from_bytes(data) {
            let mut out = [0u16; PROBES.len()];
            v.lookup_batch(&PROBES, &mut out);
            for (k, &x) in PROBES.iter().zip(&out) {
                assert_eq!(v.lookup(k), x);
            }
        }
    }

    /// Parses arbitrary bytes as a delta; whatever is accepted must round-trip and apply (or be
    /// refused) on a small 16+8, 2-bit, one-block table without panicking. Also tries the bytes
    /// with a correct checksum in place of the last 4.
    pub fn load_delta(data: &[u8]) {
        load_delta_once(data);
        if data.len() >= 4 {
            let mut fixed = data.to_vec();
            let n = fixed.len() - 4;
            let sum = xxhash_rust::xxh3::xxh3_64(&fixed[..n]) as u32;
            fixed[n..].copy_from_slice(&sum.to_le_bytes());
            load_delta_once(&fixed);
        }
    }

    fn load_delta_once(data: &[u8]) {
        static TABLE: OnceLock<SetSep> = OnceLock::new();
        if let Ok(d) = Delta::from_bytes(data) {
            assert_eq!(Delta::from_bytes(&d.to_bytes()).as_ref(), Ok(&d));
            let base = TABLE.get_or_init(|| {
                let keys: Vec<[u8; 4]> = (0u32..500).map(|i| i.to_le_bytes()).collect();
                let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
                let values: Vec<u16> = (0..500).map(|i| (i % 4) as u16).collect();
                let opts = BuildOptions {
                    value_bits: 2,
                    threads: 1,
                    seed: 0x5eed_5e75_e900_0001,
                    build_id: 1,
                    ..BuildOptions::default()
                };
                SetSep::build(&refs, &values, &opts).expect("fixed table builds")
            });
            let mut t = base.clone();
            if t.apply_delta(&d).is_ok() {
                let mut out = [0u16; PROBES.len()];
                t.lookup_batch(&PROBES, &mut out);
                let _ = SetSep::from_bytes(&t.to_bytes()).expect("an applied delta saves");
            } else {
                assert_eq!(
                    t.to_bytes(),
                    base.to_bytes(),
                    "a refused delta changed the table"
                );
            }
        }
    }
}

/// Block of a key in a table of `total_blocks` blocks built with `seed` (for distributed builds:
/// a node builds the blocks of a range with [`SetSep::build_blocks`] from the keys whose block is
/// in its range).
pub fn block_of_key(key: &[u8], seed: u64, total_blocks: u64) -> u64 {
    layout::locate(sb_common::hash128(key, seed), total_blocks.max(1)).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parses_and_prints() {
        for c in [Config::C16_8, Config::C8_16, Config::C16_16] {
            assert_eq!(c.to_string().parse::<Config>().unwrap(), c);
        }
        assert_eq!(" 16 + 8 ".parse::<Config>().unwrap(), Config::C16_8);
        assert!("16+7".parse::<Config>().is_err());
        assert!("16".parse::<Config>().is_err());
        assert!("a+b".parse::<Config>().is_err());
        assert_eq!(Config::default(), Config::C16_8);
    }
}
