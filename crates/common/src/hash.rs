//! The one key hash of the project.
//!
//! Every table hashes a key once with [`hash128`] and derives everything it needs (block, bucket,
//! tag, the two base hashes of SetSep's hash family) from the 128 bits. The GPT lookup and the FIB
//! lookup use the same function, so a node that has looked a key up in the GPT can hand the hash
//! to the FIB without hashing again.

/// 128 bits of hash of one key: `lo` and `hi` are independent 64-bit halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct KeyHash {
    pub lo: u64,
    pub hi: u64,
}

/// Hashes `key` with `seed` (XXH3-128). Keys of any length, 0 bytes included.
#[inline]
pub fn hash128(key: &[u8], seed: u64) -> KeyHash {
    let h = xxhash_rust::xxh3::xxh3_128_with_seed(key, seed);
    KeyHash {
        lo: h as u64,
        hi: (h >> 64) as u64,
    }
}

/// Maps a 32-bit hash uniformly onto `0..n` without a division (Lemire's multiply-shift).
#[inline]
pub fn reduce32(h: u32, n: u32) -> u32 {
    ((h as u64 * n as u64) >> 32) as u32
}

/// Maps a 64-bit hash uniformly onto `0..n` without a division.
#[inline]
pub fn reduce64(h: u64, n: u64) -> u64 {
    ((h as u128 * n as u128) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_changes_hash() {
        assert_ne!(hash128(b"abcd", 1), hash128(b"abcd", 2));
        assert_eq!(hash128(b"abcd", 1), hash128(b"abcd", 1));
    }

    #[test]
    fn reduce_stays_in_range() {
        for n in [1u32, 2, 3, 1000, u32::MAX] {
            for h in [0u32, 1, 12345, u32::MAX] {
                assert!(reduce32(h, n) < n);
            }
        }
        assert_eq!(reduce64(u64::MAX, 7), 6);
    }
}
