//! The one key hash of the project.
//!
//! Every table hashes a key once with [`hash128`] and derives everything it needs (block, bucket,
//! tag, the two base hashes of SetSep's hash family) from the 128 bits. The GPT lookup and the FIB
//! lookup use the same function, so a node that has looked a key up in the GPT can hand the hash
//! to the FIB without hashing again.
//!
//! The function is a multiply-fold hash in the style of wyhash: keys of up to 16 bytes (IPv4 and
//! IPv6 addresses, 5-tuples) are read as two overlapping 64-bit words and finished with three
//! 64x64->128-bit multiplies, two of them independent, about 20 instructions and no loop or
//! call; longer keys first absorb 16 bytes per multiply. The lookups of both tables hash every
//! key, so this is a large share of their instructions (XXH3-128, used before, took about
//! twice as many on 13-byte keys). Its statistical quality is checked by the avalanche and
//! distribution tests below; it is not a cryptographic hash, and an attacker who learns the seed
//! can make keys collide (every table takes the seed as a parameter).

/// 128 bits of hash of one key: `lo` and `hi` are independent 64-bit halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct KeyHash {
    pub lo: u64,
    pub hi: u64,
}

const fn splitmix(i: u64) -> u64 {
    let mut z = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

/// Odd 64-bit constants with about half their bits set (splitmix64 outputs of 1..=6).
const K: [u64; 6] = [
    splitmix(1),
    splitmix(2),
    splitmix(3),
    splitmix(4),
    splitmix(5),
    splitmix(6),
];

/// The full 128-bit product of `a` and `b`, as (low, high) words.
#[inline(always)]
fn mul128(a: u64, b: u64) -> (u64, u64) {
    let r = a as u128 * b as u128;
    (r as u64, (r >> 64) as u64)
}

/// Folds the 128-bit product of `a` and `b` into 64 bits.
#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let (l, h) = mul128(a, b);
    l ^ h
}

#[inline(always)]
fn r64(k: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&k[i..i + 8]);
    u64::from_le_bytes(w)
}

#[inline(always)]
fn r32(k: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&k[i..i + 4]);
    u32::from_le_bytes(w) as u64
}

/// Hashes `key` with `seed`. Keys of any length, 0 bytes included; different seeds give
/// unrelated hash functions.
///
/// Keys of up to 16 bytes take an inlined path with no loop; longer ones call [`hash_long`].
#[inline(always)]
pub fn hash128(key: &[u8], seed: u64) -> KeyHash {
    let n = key.len();
    if n > 16 {
        return hash_long(key, seed);
    }
    let (a, b) = if n >= 8 {
        (r64(key, 0), r64(key, n - 8))
    } else if n >= 4 {
        (r32(key, 0) << 32 | r32(key, n - 4), 0)
    } else if n > 0 {
        let x = (key[0] as u64) << 16 | (key[n / 2] as u64) << 8 | key[n - 1] as u64;
        (x, 0)
    } else {
        (0, 0)
    };
    finish(a, b, seed_s(seed, n), seed_t(seed))
}

/// The seed words: `s` and `t` enter the two multiplicands, so no fixed word value zeroes a
/// product for every seed; the length enters `s`.
#[inline(always)]
fn seed_s(seed: u64, n: usize) -> u64 {
    seed ^ K[0] ^ (n as u64)
}

#[inline(always)]
fn seed_t(seed: u64) -> u64 {
    seed.rotate_left(32) ^ K[1]
}

#[inline(always)]
fn finish(a: u64, b: u64, s: u64, t: u64) -> KeyHash {
    let (x, y) = mul128(a ^ t, b ^ s);
    KeyHash {
        lo: fold(x ^ K[2], y ^ K[3]),
        hi: fold(x ^ K[4], y ^ K[5]),
    }
}

/// [`hash128`] of a key longer than 16 bytes: 16 bytes per multiply, then the last 16 bytes
/// (overlapping) as in the short path.
#[inline(never)]
pub fn hash_long(key: &[u8], seed: u64) -> KeyHash {
    let n = key.len();
    let t = seed_t(seed);
    let mut s = seed_s(seed, n);
    let mut i = 0;
    while n - i > 16 {
        s = fold(r64(key, i) ^ t, r64(key, i + 8) ^ s);
        i += 16;
    }
    finish(r64(key, n - 16), r64(key, n - 8), s, t)
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

    /// A small deterministic generator for the tests.
    fn rng(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    fn bits(h: KeyHash) -> u128 {
        (h.hi as u128) << 64 | h.lo as u128
    }

    /// Flipping any one input bit (key or seed) flips each of the 128 output bits with
    /// probability close to 1/2, for every key length the tables take and a few they do not.
    #[test]
    fn avalanche() {
        const N: u32 = 600;
        let mut r = rng(7);
        for len in [
            0usize, 1, 3, 4, 5, 7, 8, 9, 13, 16, 17, 24, 31, 32, 33, 40, 64,
        ] {
            let in_bits = len * 8 + 64;
            let mut flips = vec![[0u32; 128]; in_bits];
            for _ in 0..N {
                let mut key: Vec<u8> = (0..len).map(|_| r() as u8).collect();
                let seed = r();
                let base = bits(hash128(&key, seed));
                for (i, f) in flips.iter_mut().enumerate() {
                    let d = if i < len * 8 {
                        key[i / 8] ^= 1 << (i % 8);
                        let d = bits(hash128(&key, seed)) ^ base;
                        key[i / 8] ^= 1 << (i % 8);
                        d
                    } else {
                        bits(hash128(&key, seed ^ 1 << (i - len * 8))) ^ base
                    };
                    for (o, c) in f.iter_mut().enumerate() {
                        *c += (d >> o) as u32 & 1;
                    }
                }
            }
            // 600 trials: sd 12.2 around 300; 0.38..0.62 is about 6 sd.
            for (i, f) in flips.iter().enumerate() {
                for (o, &c) in f.iter().enumerate() {
                    let p = c as f64 / N as f64;
                    assert!(
                        (0.38..=0.62).contains(&p),
                        "len {len}: input bit {i} flips output bit {o} with p = {p}"
                    );
                }
            }
        }
    }

    /// Chi-square of 1024 cells over keys that differ little (sequential integers, addresses
    /// of one /8, 5-tuples differing in one port), for the bits the tables use: the top of
    /// `lo` (block, bucket), the low 16 bits of `hi` and the next 16 (SetSep's family).
    #[test]
    fn structured_keys_spread_evenly() {
        let n = 1u32 << 18;
        let sets: Vec<(&str, Vec<Vec<u8>>)> = vec![
            ("u32", (0..n).map(|i| i.to_le_bytes().to_vec()).collect()),
            (
                "u64 be",
                (0..n).map(|i| (i as u64).to_be_bytes().to_vec()).collect(),
            ),
            (
                "ipv4 /8",
                (0..n)
                    .map(|i| [10, (i >> 16) as u8, (i >> 8) as u8, i as u8].to_vec())
                    .collect(),
            ),
            (
                "ipv6",
                (0..n)
                    .map(|i| {
                        let mut k = [0u8; 16];
                        k[0] = 0x20;
                        k[1] = 0x01;
                        k[12..].copy_from_slice(&i.to_be_bytes());
                        k.to_vec()
                    })
                    .collect(),
            ),
            (
                "5-tuple ports",
                (0..n)
                    .map(|i| {
                        let mut k = [6u8, 10, 0, 0, 1, 0, 0, 10, 0, 0, 2, 0, 80];
                        k[5..7].copy_from_slice(&(i as u16).to_be_bytes());
                        k[9] = (i >> 16) as u8;
                        k.to_vec()
                    })
                    .collect(),
            ),
            (
                "40-byte",
                (0..n)
                    .map(|i| {
                        let mut k = [0u8; 40];
                        k[36..].copy_from_slice(&i.to_le_bytes());
                        k.to_vec()
                    })
                    .collect(),
            ),
        ];
        for (name, keys) in &sets {
            let mut seen = std::collections::HashSet::new();
            let mut cells = [[0u32; 1024]; 3];
            for k in keys {
                let h = hash128(k, 0x5eed);
                assert!(seen.insert(h), "{name}: two keys share a 128-bit hash");
                cells[0][(h.lo >> 54) as usize] += 1;
                cells[1][(h.hi & 1023) as usize] += 1;
                cells[2][((h.hi >> 16) & 1023) as usize] += 1;
            }
            for (which, c) in cells.iter().enumerate() {
                let e = n as f64 / 1024.0;
                let chi: f64 = c.iter().map(|&x| (x as f64 - e).powi(2) / e).sum();
                // 1023 degrees of freedom: mean 1023, sd 45; 1300 is about 6 sd.
                assert!(chi < 1300.0, "{name}: cells {which}: chi-square {chi}");
            }
        }
    }
}
