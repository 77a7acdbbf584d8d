//! The AVX2 group-search kernel: 16 candidate hash indexes at once, one per 16-bit lane.
//!
//! Candidate `i` puts key `k` at the top bits of `(a_k << 16) + i * b_k (mod 2^32)` (see
//! `layout::position`). Only the upper 16 bits of that sum matter, and with `a_k`'s low half
//! zero they are `h = a_k + i * bh_k + mulhi(i, bl_k) (mod 2^16)` exactly, where `bh_k`, `bl_k`
//! are the halves of `b_k` and `mulhi` the upper half of a 16x16-bit product. The slope is
//! `b_k = s_k * 2^12` (`layout::slope`), so `16 * bl_k` is a multiple of 2^16 and moving a lane
//! 16 candidates on adds exactly `16 * bh_k + (s_k mod 16) = s_k (mod 2^16)`: lane `l` starts at
//! candidate `l` (one `vpmullw` and one `vpmulhuw` per key and search) and each chunk of 16
//! candidates costs one add per key. The bit-array position is the top 3 (or 4) bits of `h`,
//! turned into a one-hot mask with `vpshufb` and OR-ed into the key's value class. A value bit is
//! separated in a lane when the OR of the classes with that bit 0 and the OR of the classes with
//! that bit 1 share no position. Returns exactly what the scalar kernel returns.
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::*;
#[cfg(target_arch = "x86_64")]
use core::mem::MaybeUninit;

#[cfg(target_arch = "x86_64")]
use crate::kernel::Classes;

/// AVX2 search; see `kernel::search_scalar` for the contract.
///
/// # Safety
/// The CPU must support AVX2; `g.a.len() == g.b.len() <= 64`; `g.end` is increasing, ends at
/// `g.a.len()` and has as many entries as `g.val`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn search(
    alog: u32,
    limit: u32,
    g: &Classes,
    want: u16,
    out: &mut [u16; 16],
) -> u16 {
    if alog == 3 {
        run::<false>(limit, g, want, out)
    } else {
        run::<true>(limit, g, want, out)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn run<const Y16: bool>(limit: u32, g: &Classes, want: u16, out: &mut [u16; 16]) -> u16 {
    let Classes {
        a,
        b,
        end: cls_end,
        val: cls_val,
    } = *g;
    const MAXK: usize = crate::kernel::AVX2_MAX_KEYS;
    let n = a.len().min(b.len()).min(MAXK);
    let ncls = cls_end.len().min(cls_val.len()).min(MAXK);
    let zero = _mm256_setzero_si256();
    let lane = _mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    // Only the first n entries are ever written and read (no 2 KB zeroing per call).
    let mut hs = [const { MaybeUninit::<__m256i>::uninit() }; MAXK];
    let mut st = [const { MaybeUninit::<__m256i>::uninit() }; MAXK];
    for k in 0..n {
        debug_assert_eq!(b[k] & 0xfff, 0, "not a slope of layout::slope");
        let bh = _mm256_set1_epi16((b[k] >> 16) as u16 as i16);
        let bl = _mm256_set1_epi16(b[k] as u16 as i16);
        let h = _mm256_add_epi16(_mm256_mullo_epi16(lane, bh), _mm256_mulhi_epu16(lane, bl));
        hs[k].write(_mm256_add_epi16(_mm256_set1_epi16(a[k] as i16), h));
        st[k].write(_mm256_set1_epi16((b[k] >> 12) as u16 as i16));
    }
    // One-hot tables for vpshufb: position p (low 4 bits of each byte) -> 1 << p.
    #[rustfmt::skip]
    let t_lo = _mm256_setr_epi8(
        1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0,
        1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0,
    );
    #[rustfmt::skip]
    let t_hi = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, -128,
        0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, -128,
    );
    let low_bytes = _mm256_set1_epi16(0x00ff);
    let nchunks = limit.div_ceil(16);
    // Lanes of the last chunk at or past `limit` are not candidates.
    let tail = limit - (nchunks - 1) * 16;
    let tail_mask: u32 = if tail >= 16 {
        u32::MAX
    } else {
        (1u32 << (2 * tail)) - 1
    };
    // UNROLL chunks (16 candidates each) per pass: each key's hash vector is loaded and stored
    // once per pass.
    const UNROLL: usize = 4;
    let mut accs = [[const { MaybeUninit::<__m256i>::uninit() }; MAXK]; UNROLL];
    let onehot = |acc: __m256i, acc_hi: __m256i, h: __m256i| -> (__m256i, __m256i) {
        if Y16 {
            let p = _mm256_srli_epi16::<12>(h);
            (
                _mm256_or_si256(acc, _mm256_shuffle_epi8(t_lo, p)),
                _mm256_or_si256(acc_hi, _mm256_shuffle_epi8(t_hi, p)),
            )
        } else {
            let p = _mm256_srli_epi16::<13>(h);
            (_mm256_or_si256(acc, _mm256_shuffle_epi8(t_lo, p)), acc_hi)
        }
    };
    // Low byte of acc: positions 0-7; low byte of acc_hi: positions 8-15.
    let merge = |acc: __m256i, acc_hi: __m256i| -> __m256i {
        if Y16 {
            _mm256_or_si256(
                _mm256_and_si256(acc, low_bytes),
                _mm256_slli_epi16::<8>(acc_hi),
            )
        } else {
            acc
        }
    };
    let ok_of = |z: __m256i, o: __m256i, chunk: u32| -> u32 {
        if chunk >= nchunks {
            return 0;
        }
        let conf = _mm256_and_si256(z, o);
        let mm = _mm256_movemask_epi8(_mm256_cmpeq_epi8(conf, zero)) as u32;
        // Y8: only the low byte of a lane is meaningful; Y16: both bytes must be zero.
        let ok = if Y16 { mm & (mm >> 1) } else { mm } & 0x5555_5555;
        if chunk == nchunks - 1 {
            ok & tail_mask
        } else {
            ok
        }
    };
    let mut found = 0u16;
    let mut c = 0u32;
    while c < nchunks {
        let mut s = 0usize;
        for ci in 0..ncls {
            let e = cls_end[ci].min(n);
            let mut acc = [zero; UNROLL];
            let mut acc_hi = [zero; UNROLL];
            for k in s..e {
                // SAFETY: k < e <= n, and entries 0..n of `hs` and `st` were written in the setup
                // loop above.
                let (mut h, step) = unsafe { (hs[k].assume_init(), st[k].assume_init()) };
                for u in 0..UNROLL {
                    (acc[u], acc_hi[u]) = onehot(acc[u], acc_hi[u], h);
                    h = _mm256_add_epi16(h, step);
                }
                hs[k].write(h);
            }
            for u in 0..UNROLL {
                accs[u][ci].write(merge(acc[u], acc_hi[u]));
            }
            s = e;
        }
        let mut todo = want & !found;
        while todo != 0 {
            let j = todo.trailing_zeros();
            todo &= todo - 1;
            let mut z = [zero; UNROLL];
            let mut o = [zero; UNROLL];
            for ci in 0..ncls {
                let one = (cls_val[ci] >> j) & 1 == 1;
                for u in 0..UNROLL {
                    // SAFETY: every class below ncls was written in this pass's class loop.
                    let x = unsafe { accs[u][ci].assume_init() };
                    if one {
                        o[u] = _mm256_or_si256(o[u], x);
                    } else {
                        z[u] = _mm256_or_si256(z[u], x);
                    }
                }
            }
            for u in 0..UNROLL {
                let chunk = c + u as u32;
                let ok = ok_of(z[u], o[u], chunk);
                if ok != 0 {
                    out[j as usize] = (chunk * 16 + ok.trailing_zeros() / 2) as u16;
                    found |= 1 << j;
                    break;
                }
            }
        }
        if found == want {
            break;
        }
        c += UNROLL as u32;
    }
    found
}
