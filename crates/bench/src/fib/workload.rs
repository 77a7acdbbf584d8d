//! Keys, values and the access sequence every structure of `bench fib` sees.
//!
//! Key `i` (an index below 2^32) starts with a bijective 32-bit mix of `i`, so keys are distinct
//! by construction (4-byte keys included); the rest of a longer key is pseudo-random bytes of `i`.
//! Indices `0..n` are the table's keys, `n..n + misses` keys that are never inserted, and the
//! churn keys of the mixed run come after those. The value of key `i` names `i`, so any answer
//! can be checked.

use rand::{Rng, SeedableRng};
use rand_distr::Distribution;
use sb_common::splitmix64_mix as mix64;

/// A bijection on u32 (odd multiplications and xor-shifts are invertible).
fn perm32(mut x: u32, seed: u32) -> u32 {
    x ^= seed;
    x = x.wrapping_mul(0x9E37_79B1);
    x ^= x >> 15;
    x = x.wrapping_mul(0x85EB_CA77);
    x ^= x >> 13;
    x
}

/// Writes key `i` into `out` (`key_bytes` long).
pub fn key(i: u64, seed: u64, out: &mut [u8]) {
    let head = perm32(i as u32, seed as u32).to_le_bytes();
    let n = out.len().min(4);
    out[..n].copy_from_slice(&head[..n]);
    let mut r = mix64(i ^ seed.rotate_left(17));
    for (j, b) in out[4..].iter_mut().enumerate() {
        if j % 8 == 0 {
            r = mix64(r.wrapping_add(j as u64));
        }
        *b = (r >> ((j % 8) * 8)) as u8;
    }
}

/// Writes the value of key `i` into `out`.
pub fn value(i: u64, out: &mut [u8]) {
    let w = (i ^ 0xA5A5_5A5A_0F0F_F0F0).to_le_bytes();
    for (j, b) in out.iter_mut().enumerate() {
        *b = if j < 8 {
            w[j]
        } else {
            (i as u8).wrapping_mul(31).wrapping_add(j as u8)
        };
    }
}

/// Whether `v` is the value of key `i`.
pub fn value_ok(i: u64, v: &[u8]) -> bool {
    v.iter().enumerate().all(|(j, &b)| {
        b == if j < 8 {
            (i ^ 0xA5A5_5A5A_0F0F_F0F0).to_le_bytes()[j]
        } else {
            (i as u8).wrapping_mul(31).wrapping_add(j as u8)
        }
    })
}

/// A miss in the access sequence.
pub const MISS: u32 = u32::MAX;

pub struct Workload {
    pub n: usize,
    pub kb: usize,
    pub vb: usize,
    pub seed: u64,
    /// The `n` keys of the table, back to back.
    pub keys: Vec<u8>,
    /// The lookups: keys back to back, and for each the index of a table key or [`MISS`].
    pub access: Vec<u8>,
    pub access_idx: Vec<u32>,
    /// First index of the churn keys (mixed runs).
    pub churn_base: u64,
}

impl Workload {
    pub fn new(
        n: usize,
        kb: usize,
        vb: usize,
        lookups: usize,
        hit_ratio: f64,
        zipf: Option<f64>,
        seed: u64,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!((1..(1 << 31)).contains(&n), "entries must be 1..2^31");
        let mut keys = vec![0u8; n * kb];
        for (i, k) in keys.chunks_exact_mut(kb).enumerate() {
            key(i as u64, seed, k);
        }
        let misses = n.min(1 << 22) as u64;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5EED);
        let zipf = match zipf {
            Some(a) => Some(rand_distr::Zipf::new(n as u64, a)?),
            None => None,
        };
        // Zipf ranks land on keys through a permutation, so the hot keys are spread out.
        let stride = {
            let mut p = 2_654_435_761u64 % n as u64;
            while p == 0 || gcd(p, n as u64) != 1 {
                p += 1;
            }
            p
        };
        let mut access = vec![0u8; lookups * kb];
        let mut access_idx = vec![0u32; lookups];
        for (a, k) in access_idx.iter_mut().zip(access.chunks_exact_mut(kb)) {
            if rng.gen_bool(hit_ratio) {
                let i = match &zipf {
                    Some(z) => ((z.sample(&mut rng) as u64 - 1) * stride) % n as u64,
                    None => rng.gen_range(0..n as u64),
                };
                *a = i as u32;
                k.copy_from_slice(&keys[i as usize * kb..(i as usize + 1) * kb]);
            } else {
                *a = MISS;
                key(n as u64 + rng.gen_range(0..misses), seed, k);
            }
        }
        Ok(Workload {
            n,
            kb,
            vb,
            seed,
            keys,
            access,
            access_idx,
            churn_base: n as u64 + misses,
        })
    }

    pub fn key_of(&self, i: usize) -> &[u8] {
        &self.keys[i * self.kb..(i + 1) * self.kb]
    }

    pub fn lookups(&self) -> usize {
        self.access_idx.len()
    }

    /// Wrong answers among lookups `start..start + found.len()` of the access sequence.
    pub fn check(&self, start: usize, found: &[bool], values: &[u8]) -> u64 {
        let mut wrong = 0;
        for (j, &f) in found.iter().enumerate() {
            let idx = self.access_idx[start + j];
            let ok = if idx == MISS {
                !f
            } else {
                f && value_ok(idx as u64, &values[j * self.vb..(j + 1) * self.vb])
            };
            wrong += !ok as u64;
        }
        wrong
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_and_values_check() {
        let w = Workload::new(5000, 4, 16, 2000, 0.5, None, 3).unwrap();
        let set: std::collections::HashSet<_> = w.keys.chunks(4).collect();
        assert_eq!(set.len(), 5000);
        let mut v = [0u8; 16];
        value(77, &mut v);
        assert!(value_ok(77, &v));
        assert!(!value_ok(78, &v));
        let hits = w.access_idx.iter().filter(|&&i| i != MISS).count();
        assert!((800..1200).contains(&hits));
        let z = Workload::new(5000, 13, 8, 2000, 1.0, Some(0.99), 3).unwrap();
        assert!(z.access_idx.iter().all(|&i| (i as usize) < 5000));
    }
}
