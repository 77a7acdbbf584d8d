//! The fixed geometry of a SetSep table: how a key hash picks its block, bucket, candidate groups
//! and the two base hashes of its hash family, and how a group record is laid out in bytes.
//!
//! Everything here is part of the binary format: changing a constant or the candidate table
//! changes every table, so the format version must change with it.

use sb_common::hash::reduce64;
use sb_common::splitmix64 as splitmix;
use sb_common::KeyHash;

/// Buckets per block.
pub const BUCKETS_PER_BLOCK: usize = 256;
/// Groups per block.
pub const GROUPS_PER_BLOCK: usize = 64;
/// Average keys per block the geometry is sized for.
pub const KEYS_PER_BLOCK: u64 = 1024;
/// Candidate groups per bucket.
pub const CHOICES: usize = 4;
/// Bytes of bucket choices per block (2 bits per bucket).
pub const CHOICE_BYTES_PER_BLOCK: usize = BUCKETS_PER_BLOCK / 4;
/// Shortest key accepted.
pub const MIN_KEY_LEN: usize = 4;
/// Longest key accepted.
pub const MAX_KEY_LEN: usize = 64;

/// Number of blocks a table of `n_keys` keys has: `ceil(n_keys / 1024)`, at least 1.
pub fn num_blocks(n_keys: u64) -> u64 {
    n_keys.div_ceil(KEYS_PER_BLOCK).max(1)
}

/// Where a key hash lands: its block and its bucket inside the block.
#[inline(always)]
pub fn locate(h: KeyHash, n_blocks: u64) -> (u64, usize) {
    let gb = reduce64(h.lo, n_blocks * BUCKETS_PER_BLOCK as u64);
    (gb >> 8, (gb & 0xff) as usize)
}

/// The two base hashes `(a, b)` of the key's hash family `h_i = (a << 16) + i * b (mod 2^32)`
/// (see [`position`]): `a` is bits 0-15 of the hash's second word (`KeyHash::hi`; `KeyHash::lo`
/// picks the block and the bucket), `b` is [`slope`] of bits 32-51. No extra hashing: both are
/// bits the key's 128-bit hash already has.
#[inline(always)]
pub fn family(h: KeyHash) -> (u16, u32) {
    (h.hi as u16, slope((h.hi >> 32) as u32))
}

/// The slope of a key's hash family from 20 bits of its hash (the low 20 of `bits`; the rest
/// are ignored): those bits made odd, times `2^12`. 2^19 distinct slopes, and the low 12 bits of
/// every slope are zero, which is what lets the AVX2 kernel step 16 candidates with one 16-bit
/// add (see `kernel_avx2`).
#[inline(always)]
pub fn slope(bits: u32) -> u32 {
    (bits | 1) << 12
}

/// Position (in the bit array of `1 << array_log` bits) that hash function `idx` gives a key
/// with base hashes `(a, b)`: the top `array_log` bits of `(a << 16) + idx * b (mod 2^32)`.
///
/// With `b = s * 2^12` ([`slope`], `s` odd, 20 bits) the top bits are those of
/// `(a << 4) + idx * s (mod 2^20)`: a linear family over 20 bits searched over at most 2^16
/// indexes, so the top bits depend on all 20 bits of `s` through the carries and two keys'
/// positions stay unrelated over the whole search (the Ludo repository's SetSep uses the 32-bit
/// `h1 + i * h2`). The 16-bit family `a + i * b (mod 2^16)` of format version 4 had only 2^15
/// slopes, and pairs of keys whose slopes agree in their low bits move in lockstep: 3% of 20-key
/// groups had no separating index among 65,535 (fresh random positions: 0.05%); the test in
/// `kernel` finds 2 such groups of 1,000 with this family, 26 with that one. Format version 5
/// used a full 32-bit odd `b`, but then the AVX2 kernel needed a 16-bit multiply per key and 16
/// candidates to follow the low half's carries; this one costs one add (`kernel_avx2`).
#[inline(always)]
pub fn position(a: u16, b: u32, idx: u16, array_log: u32) -> u32 {
    ((a as u32) << 16).wrapping_add((idx as u32).wrapping_mul(b)) >> (32 - array_log)
}

/// The pre-assigned candidate groups of each bucket: `CAND[bucket][choice]`.
///
/// Built once at compile time from a fixed seed: four permutations of the 256 buckets, each taken
/// modulo 64, so every group is a candidate of exactly 16 buckets (4 per choice), repaired by
/// swaps so that the four candidates of a bucket are distinct.
pub static CAND: [[u8; CHOICES]; BUCKETS_PER_BLOCK] = make_cand();

const fn conflicts(t: &[[u8; CHOICES]; BUCKETS_PER_BLOCK], b: usize, c: usize, g: u8) -> bool {
    let mut j = 0;
    while j < c {
        if t[b][j] == g {
            return true;
        }
        j += 1;
    }
    false
}

const fn make_cand() -> [[u8; CHOICES]; BUCKETS_PER_BLOCK] {
    let mut t = [[0u8; CHOICES]; BUCKETS_PER_BLOCK];
    let mut rng = 0x5365_7453_6570_0001u64; // "SetSep" + 1
    let mut c = 0;
    while c < CHOICES {
        // A random permutation of 0..256 (Fisher-Yates), reduced modulo 64.
        let mut perm = [0u16; BUCKETS_PER_BLOCK];
        let mut i = 0;
        while i < BUCKETS_PER_BLOCK {
            perm[i] = i as u16;
            i += 1;
        }
        i = BUCKETS_PER_BLOCK - 1;
        while i > 0 {
            let j = (splitmix(&mut rng) % (i as u64 + 1)) as usize;
            let x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
            i -= 1;
        }
        let mut b = 0;
        while b < BUCKETS_PER_BLOCK {
            t[b][c] = (perm[b] % GROUPS_PER_BLOCK as u16) as u8;
            b += 1;
        }
        // Repair: swap column entries until no bucket repeats a group.
        b = 0;
        while b < BUCKETS_PER_BLOCK {
            while conflicts(&t, b, c, t[b][c]) {
                let r = (splitmix(&mut rng) % BUCKETS_PER_BLOCK as u64) as usize;
                let gb = t[b][c];
                let gr = t[r][c];
                if r != b && !conflicts(&t, b, c, gr) && !conflicts(&t, r, c, gb) {
                    t[b][c] = gr;
                    t[r][c] = gb;
                }
            }
            b += 1;
        }
        c += 1;
    }
    t
}

/// Reads the 2-bit choice of `bucket` from a block's 64 choice bytes.
#[inline(always)]
pub fn choice_of(choice_byte: u8, bucket: usize) -> usize {
    ((choice_byte >> ((bucket & 3) * 2)) & 3) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_distinct_and_balanced() {
        let mut per_group = [0u32; GROUPS_PER_BLOCK];
        for row in CAND.iter() {
            for c in 0..CHOICES {
                per_group[row[c] as usize] += 1;
                for d in 0..c {
                    assert_ne!(row[c], row[d]);
                }
            }
        }
        assert!(per_group.iter().all(|&n| n == 16), "{per_group:?}");
    }

    #[test]
    fn locate_is_in_range() {
        for n in [1u64, 2, 977, 16384] {
            for lo in [0u64, 1, u64::MAX / 3, u64::MAX] {
                let (b, k) = locate(KeyHash { lo, hi: 0 }, n);
                assert!(b < n && k < BUCKETS_PER_BLOCK);
            }
        }
    }
}
