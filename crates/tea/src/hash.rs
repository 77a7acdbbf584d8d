//! The hash functions every party must agree on: the key hash (which two buckets a key may live
//! in, and the count-min sketch's and Bloom filter's indexes) and the bucket checksum.
//!
//! Both are defined on little-endian 8-byte words, so the result does not depend on the host: a
//! reader that knows only the seed computes the same bucket address as the writer.

/// Odd 64-bit constants (digits of pi and e), used as multipliers and whiteners.
const P0: u64 = 0x243f_6a88_85a3_08d3;
const P1: u64 = 0x1319_8a2e_0370_7345;
const P2: u64 = 0xa409_3822_299f_31d1;
const P3: u64 = 0xb7e1_5162_8aed_2a6b;

/// The 128-bit product of `a` and `b`, its halves xor-ed together.
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// MurmurHash3's 64-bit finalizer: every input bit flips each output bit with probability ~1/2.
#[inline]
pub fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The little-endian word at `chunk` (at most 8 bytes; a short tail is zero-padded).
#[inline]
fn word(chunk: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..chunk.len()].copy_from_slice(chunk);
    u64::from_le_bytes(w)
}

/// A seeded 64-bit hash of `bytes`: a multiply-fold over 8-byte words, the length mixed in
/// first, MurmurHash3's finalizer last. Not a cryptographic hash; its seed is what keeps an
/// outsider from aiming keys at one bucket.
#[inline]
pub fn hash64(seed: u64, bytes: &[u8]) -> u64 {
    let mut a = fold_mul(seed ^ P0, (bytes.len() as u64) ^ P1);
    for (i, c) in bytes.chunks(8).enumerate() {
        let w = word(c);
        a = fold_mul(
            a ^ w ^ P2,
            (i as u64).wrapping_mul(P3) ^ P1 ^ w.rotate_left(32),
        )
        .wrapping_add(w);
    }
    fmix64(a ^ P3)
}

/// `h` reduced to `0..n` by a multiply-shift (Lemire), which needs no division and keeps the
/// high bits' uniformity. `n` must be non-zero.
#[inline]
pub fn reduce(h: u64, n: u64) -> u64 {
    ((h as u128 * n as u128) >> 64) as u64
}

/// The `i`-th derived hash of a key hash (independent-looking for different `i`): used for the
/// second candidate bucket and the sketch rows.
#[inline]
pub fn derive(h: u64, i: u64) -> u64 {
    fmix64(h ^ (i.wrapping_add(1)).wrapping_mul(P2))
}

/// The checksum of a bucket image: [`hash64`] with a fixed seed over the bucket's bytes, the
/// checksum field (bytes 8..16) counted as zero.
pub fn bucket_checksum(bucket: &[u8]) -> u64 {
    debug_assert!(bucket.len() >= 16);
    let mut a = fold_mul(P3, (bucket.len() as u64) ^ P1);
    for (i, c) in bucket.chunks(8).enumerate() {
        let w = if i == 1 { 0 } else { word(c) };
        a = fold_mul(
            a ^ w ^ P2,
            (i as u64).wrapping_mul(P3) ^ P1 ^ w.rotate_left(32),
        )
        .wrapping_add(w);
    }
    fmix64(a ^ P0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_depends_on_seed_length_and_every_byte() {
        let k = [7u8; 13];
        let h = hash64(1, &k);
        assert_ne!(h, hash64(2, &k));
        assert_ne!(h, hash64(1, &k[..12]));
        assert_ne!(hash64(1, &[0u8; 8]), hash64(1, &[0u8; 9]));
        for i in 0..13 {
            let mut m = k;
            m[i] ^= 1;
            assert_ne!(h, hash64(1, &m), "byte {i}");
        }
    }

    #[test]
    fn reduce_spreads_evenly() {
        let mut counts = [0u32; 10];
        for i in 0..100_000u64 {
            counts[reduce(hash64(9, &i.to_le_bytes()), 10) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn checksum_ignores_its_own_field_only() {
        let mut b = vec![0u8; 48];
        let c = bucket_checksum(&b);
        b[8..16].copy_from_slice(&[0xff; 8]);
        assert_eq!(c, bucket_checksum(&b));
        for i in (0..8).chain(16..48) {
            let mut m = b.clone();
            m[i] ^= 0x10;
            assert_ne!(c, bucket_checksum(&m), "byte {i}");
        }
    }
}
