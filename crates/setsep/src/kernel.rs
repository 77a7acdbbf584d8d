//! The group search: for each wanted value bit, the smallest hash index `i < 2^x - 1` such that
//! no two keys of the group with different bits land on the same position of the bit array.
//!
//! The one SIMD switch of the crate: [`Searcher`] picks the AVX2 kernel (16 candidates at a time
//! in 16-bit lanes, see `kernel_avx2`) when the CPU has it and the scalar kernel otherwise. The
//! scalar kernel is the reference: both return the same indexes, so both build the same table.
//!
//! Both kernels test every wanted value bit against a candidate before moving to the next
//! candidate (the paper's trick), so a 2-bit search costs about the longer of the two searches,
//! not their sum. Keys are grouped by value first, so per candidate each key costs one position
//! computation and one OR into its value class; a bit is then checked by OR-ing the classes.
#![allow(unsafe_code)]

use crate::layout::position;
use crate::{Config, Kernel};

/// Largest group the AVX2 kernel takes; larger ones (only possible with adversarial or
/// duplicate-heavy inputs) go through the scalar kernel, which gives the same result.
pub(crate) const AVX2_MAX_KEYS: usize = 64;

/// One key of a group: its two base hashes and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct GKey {
    pub a: u16,
    pub b: u32,
    pub v: u16,
}

pub(crate) fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A group's keys grouped by value, as the kernels take them: the base hashes `a`, `b` of the
/// keys class by class, each class's end in those arrays (increasing, the last is `a.len()`)
/// and its value.
#[derive(Clone, Copy)]
pub(crate) struct Classes<'a> {
    pub a: &'a [u16],
    pub b: &'a [u32],
    pub end: &'a [usize],
    pub val: &'a [u16],
}

/// A search kernel with its scratch space (one per build thread).
pub(crate) struct Searcher {
    avx2: bool,
    a: Vec<u16>,
    b: Vec<u32>,
    cls_end: Vec<usize>,
    cls_val: Vec<u16>,
    cls_of: Vec<u32>,
    counts: Vec<usize>,
}

impl Searcher {
    /// `kernel` must be available (see [`Kernel::avx2_available`]); `Avx2` without it falls back
    /// to scalar.
    pub fn new(kernel: Kernel) -> Self {
        let avx2 = match kernel {
            Kernel::Scalar => false,
            Kernel::Auto | Kernel::Avx2 => avx2_available(),
        };
        Searcher {
            avx2,
            a: Vec::new(),
            b: Vec::new(),
            cls_end: Vec::new(),
            cls_val: Vec::new(),
            cls_of: Vec::new(),
            counts: Vec::new(),
        }
    }

    /// Searches the value bits in `want` (bit j = value bit j) for `keys`; for each bit found,
    /// writes its index into `out[j]`. Returns the mask of bits found.
    pub fn search(&mut self, cfg: Config, keys: &[GKey], want: u16, out: &mut [u16; 16]) -> u16 {
        if want == 0 {
            return 0;
        }
        if want.count_ones() == 1 {
            self.partition_one(keys, want);
        } else if want < 16 {
            self.partition_small(keys, want);
        } else {
            self.partition(keys, want);
        }
        let g = Classes {
            a: &self.a,
            b: &self.b,
            end: &self.cls_end,
            val: &self.cls_val,
        };
        let (alog, limit) = (cfg.array_log(), cfg.mark() as u32);
        #[cfg(target_arch = "x86_64")]
        if self.avx2 && keys.len() <= AVX2_MAX_KEYS {
            // SAFETY: `self.avx2` is only true when the CPU has AVX2; the group has at most
            // AVX2_MAX_KEYS keys and at most as many classes, as the kernel requires.
            return unsafe { crate::kernel_avx2::search(alog, limit, &g, want, out) };
        }
        search_scalar(alog, limit, &g, want, out)
    }

    /// Groups keys by value (neither the order of classes nor the order inside a class changes
    /// the result): finds each key's class, counts, then places.
    fn partition(&mut self, keys: &[GKey], want: u16) {
        self.cls_val.clear();
        self.cls_of.clear();
        self.counts.clear();
        // Only the wanted bits matter: keys that agree on them share a class.
        for k in keys {
            let v = k.v & want;
            let c = match self.cls_val.iter().position(|&x| x == v) {
                Some(c) => c,
                None => {
                    self.cls_val.push(v);
                    self.counts.push(0);
                    self.cls_val.len() - 1
                }
            };
            self.cls_of.push(c as u32);
            self.counts[c] += 1;
        }
        self.cls_end.clear();
        let mut end = 0usize;
        for c in self.counts.iter_mut() {
            let n = *c;
            *c = end; // becomes the next free slot of the class
            end += n;
            self.cls_end.push(end);
        }
        self.a.clear();
        self.a.resize(keys.len(), 0);
        self.b.clear();
        self.b.resize(keys.len(), 0);
        for (k, &c) in keys.iter().zip(&self.cls_of) {
            let slot = &mut self.counts[c as usize];
            self.a[*slot] = k.a;
            self.b[*slot] = k.b;
            *slot += 1;
        }
    }

    /// [`Self::partition`] for wanted bits below 16 (values of up to 4 bits, the common case): a
    /// counting sort by the wanted bits, classes in value order, empty ones left out.
    fn partition_small(&mut self, keys: &[GKey], want: u16) {
        let n = keys.len();
        let mut next = [0usize; 16];
        for k in keys {
            next[(k.v & want) as usize] += 1;
        }
        self.cls_end.clear();
        self.cls_val.clear();
        let mut end = 0;
        for (v, c) in next.iter_mut().enumerate() {
            if *c > 0 {
                let len = *c;
                *c = end;
                end += len;
                self.cls_end.push(end);
                self.cls_val.push(v as u16);
            }
        }
        self.a.resize(n, 0);
        self.b.resize(n, 0);
        for k in keys {
            let slot = &mut next[(k.v & want) as usize];
            self.a[*slot] = k.a;
            self.b[*slot] = k.b;
            *slot += 1;
        }
    }

    /// [`Self::partition`] for one wanted bit (an update of one value bit): one branch-free
    /// pass that fills the keys with the bit clear from the front and those with it set from
    /// the back; empty classes are left out.
    fn partition_one(&mut self, keys: &[GKey], want: u16) {
        let n = keys.len();
        self.a.resize(n, 0);
        self.b.resize(n, 0);
        let (a, b) = (&mut self.a[..n], &mut self.b[..n]);
        let (mut lo, mut hi) = (0usize, n);
        for k in keys {
            let one = (k.v & want != 0) as usize;
            let at = if one == 1 { hi - 1 } else { lo };
            a[at] = k.a;
            b[at] = k.b;
            lo += 1 - one;
            hi -= one;
        }
        self.cls_end.clear();
        self.cls_val.clear();
        if lo > 0 {
            self.cls_end.push(lo);
            self.cls_val.push(0);
        }
        if lo < n {
            self.cls_end.push(n);
            self.cls_val.push(want);
        }
    }
}

/// The reference kernel: candidates one at a time.
fn search_scalar(alog: u32, limit: u32, g: &Classes, want: u16, out: &mut [u16; 16]) -> u16 {
    let Classes {
        a,
        b,
        end: cls_end,
        val: cls_val,
    } = *g;
    let mut found = 0u16;
    let mut accs = vec![0u32; cls_end.len()];
    for i in 0..limit {
        let idx = i as u16;
        let mut s = 0;
        for (c, &e) in cls_end.iter().enumerate() {
            let mut acc = 0u32;
            for k in s..e {
                acc |= 1 << position(a[k], b[k], idx, alog);
            }
            accs[c] = acc;
            s = e;
        }
        let mut todo = want & !found;
        while todo != 0 {
            let j = todo.trailing_zeros();
            todo &= todo - 1;
            let (mut z, mut o) = (0u32, 0u32);
            for (c, &v) in cls_val.iter().enumerate() {
                if (v >> j) & 1 == 1 {
                    o |= accs[c];
                } else {
                    z |= accs[c];
                }
            }
            if z & o == 0 {
                out[j as usize] = idx;
                found |= 1 << j;
            }
        }
        if found == want {
            break;
        }
    }
    found
}

/// Whether index `idx` separates value bit `j` of `keys`.
pub(crate) fn separates(cfg: Config, keys: &[GKey], j: u32, idx: u16) -> bool {
    let alog = cfg.array_log();
    let (mut z, mut o) = (0u32, 0u32);
    for k in keys {
        let m = 1u32 << position(k.a, k.b, idx, alog);
        if (k.v >> j) & 1 == 1 {
            o |= m;
        } else {
            z |= m;
        }
    }
    z & o == 0
}

/// The bit array of value bit `j` under index `idx`: ones exactly where keys with bit 1 land.
pub(crate) fn array_for(cfg: Config, keys: &[GKey], j: u32, idx: u16) -> u32 {
    let alog = cfg.array_log();
    let mut o = 0u32;
    for k in keys {
        o |= (((k.v >> j) & 1) as u32) << position(k.a, k.b, idx, alog);
    }
    o
}

/// Micro-benchmark hook (not API): searches `groups` random groups of `n` keys with `vbits`-bit
/// values under `cfg`, returns the total number of candidates examined (sum of the largest index
/// found per group, plus one).
#[doc(hidden)]
pub fn bench_search(cfg: Config, kernel: Kernel, n: usize, vbits: u32, groups: u64) -> u64 {
    let mut s = 7u64;
    let mut sr = Searcher::new(kernel);
    let mut total = 0u64;
    let mut keys = Vec::with_capacity(n);
    for _ in 0..groups {
        keys.clear();
        for _ in 0..n {
            let r = crate::build::mix(s);
            let w = crate::build::mix(r);
            s = w;
            keys.push(GKey {
                a: r as u16,
                b: crate::layout::slope((r >> 32) as u32),
                v: (w as u16) & ((1u32 << vbits) - 1) as u16,
            });
        }
        let mut out = [0u16; 16];
        let want = ((1u32 << vbits) - 1) as u16;
        let f = sr.search(cfg, &keys, want, &mut out);
        let mut m = 0u64;
        for j in 0..vbits {
            if f >> j & 1 == 1 {
                m = m.max(out[j as usize] as u64 + 1);
            } else {
                m = m.max(cfg.mark() as u64);
            }
        }
        total += m;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rand_keys(n: usize, vbits: u32, seed: u64) -> Vec<GKey> {
        let mut s = seed;
        let mut next = || sb_common::splitmix64(&mut s);
        (0..n)
            .map(|_| {
                let r = next();
                GKey {
                    a: r as u16,
                    b: crate::layout::slope((r >> 32) as u32),
                    v: (next() as u16) & ((1u32 << vbits) - 1) as u16,
                }
            })
            .collect()
    }

    /// One value bit of `groups` random 20-key groups, 16+8 (65,535 indexes, 8 positions): how
    /// many groups no index separates, searched with the crate's family and with the 16-bit
    /// family `a + i*b (mod 2^16)` (b odd, top 3 bits) of format version 4. Fresh random
    /// positions per index fail for about 0.05% of such groups (the simulation).
    #[test]
    fn one_bit_search_fails_rarely_for_20_key_groups() {
        let cfg = Config::C16_8;
        let groups = 1000;
        let mut s = 0x5eed_0020u64;
        let mut sr = Searcher::new(Kernel::Auto);
        let (mut fails, mut old_fails) = (0u32, 0u32);
        for _ in 0..groups {
            let mut keys = Vec::with_capacity(20);
            let mut old = Vec::with_capacity(20);
            for _ in 0..20 {
                let hi = sb_common::splitmix64(&mut s);
                let v = (sb_common::splitmix64(&mut s) & 1) as u16;
                let (a, b) = crate::layout::family(sb_common::KeyHash { lo: 0, hi });
                keys.push(GKey { a, b, v });
                old.push((hi as u16, (hi >> 16) as u16 | 1, v));
            }
            let mut out = [0u16; 16];
            if sr.search(cfg, &keys, 1, &mut out) == 0 {
                fails += 1;
            } else {
                assert!(separates(cfg, &keys, 0, out[0]));
            }
            let old_ok = (0..cfg.mark()).any(|i| {
                let (mut z, mut o) = (0u32, 0u32);
                for &(a, b, v) in &old {
                    let m = 1u32 << (a.wrapping_add(i.wrapping_mul(b)) >> 13);
                    if v == 1 {
                        o |= m;
                    } else {
                        z |= m;
                    }
                }
                z & o == 0
            });
            old_fails += !old_ok as u32;
        }
        eprintln!("{groups} groups of 20 keys: {fails} fail, {old_fails} with the 16-bit family");
        // About 1 in 1000 expected; the old family fails about 3%.
        assert!(fails <= 5, "{fails} of {groups} groups found no index");
        assert!(
            old_fails >= 15,
            "the 16-bit family failed only {old_fails} groups"
        );
    }

    #[test]
    fn scalar_and_avx2_agree() {
        let mut sc = Searcher::new(Kernel::Scalar);
        let mut av = Searcher::new(Kernel::Auto);
        for cfg in [Config::C16_8, Config::C8_16, Config::C16_16] {
            for n in [0usize, 1, 2, 5, 16, 19, 23, 40, 64, 70] {
                for vbits in [1u32, 2, 3, 8] {
                    let keys = rand_keys(n, vbits, (n as u64) << 8 | vbits as u64);
                    let all = ((1u32 << vbits) - 1) as u16;
                    // All bits, and each single bit (what updates search).
                    for want in std::iter::once(all).chain((0..vbits).map(|j| 1u16 << j)) {
                        let (mut o1, mut o2) = ([0u16; 16], [0u16; 16]);
                        let f1 = sc.search(cfg, &keys, want, &mut o1);
                        let f2 = av.search(cfg, &keys, want, &mut o2);
                        assert_eq!(f1, f2, "cfg {cfg} n {n} vbits {vbits}");
                        assert_eq!(f1 & !want, 0);
                        for j in 0..vbits {
                            if f1 >> j & 1 == 1 {
                                assert_eq!(o1[j as usize], o2[j as usize]);
                                assert!(separates(cfg, &keys, j, o1[j as usize]));
                                // Nothing smaller separates.
                                for i in 0..o1[j as usize] {
                                    assert!(!separates(cfg, &keys, j, i));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
