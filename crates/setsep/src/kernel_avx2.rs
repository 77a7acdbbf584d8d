//! The AVX2 group-search kernel: 8 candidate hash indexes at once, one per 32-bit lane.
//!
//! For key `k` lane `l` of chunk `c` holds `h = a_k + (8c + l) * b_k (mod 2^32)`; stepping to
//! the next chunk adds `8 * b_k`. The bit-array position is the top 3 (or 4) bits of `h`, turned
//! into a one-hot mask with a variable shift (`vpsllvd`) and OR-ed into the key's value class. A
//! value bit is separated in a lane when the OR of the classes with that bit 0 and the OR of the
//! classes with that bit 1 share no position. Returns exactly what the scalar kernel returns.
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
        run::<29>(limit, g, want, out)
    } else {
        run::<28>(limit, g, want, out)
    }
}

/// Lanes (candidates) per vector.
#[cfg(target_arch = "x86_64")]
const LANES: u32 = 8;

/// `SHIFT` is `32 - array_log`: the position is `h >> SHIFT`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn run<const SHIFT: i32>(limit: u32, g: &Classes, want: u16, out: &mut [u16; 16]) -> u16 {
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
    let one = _mm256_set1_epi32(1);
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // Only the first n entries are ever written and read (no 2 KB zeroing per call).
    let mut hs = [const { MaybeUninit::<__m256i>::uninit() }; MAXK];
    let mut st = [const { MaybeUninit::<__m256i>::uninit() }; MAXK];
    for k in 0..n {
        let bv = _mm256_set1_epi32(b[k] as i32);
        hs[k].write(_mm256_add_epi32(
            _mm256_set1_epi32(a[k] as i32),
            _mm256_mullo_epi32(lane, bv),
        ));
        st[k].write(_mm256_set1_epi32(b[k].wrapping_mul(LANES) as i32));
    }
    let nchunks = limit.div_ceil(LANES);
    // Lanes of the last chunk at or past `limit` are not candidates.
    let tail = limit - (nchunks - 1) * LANES;
    let tail_mask: u32 = (1u32 << tail) - 1;
    // UNROLL chunks (8 candidates each) per pass: each key's hash vector is loaded and stored
    // once per pass.
    const UNROLL: usize = 8;
    let mut accs = [[const { MaybeUninit::<__m256i>::uninit() }; MAXK]; UNROLL];
    // Lanes with no position in both `z` and `o`, one bit per lane.
    let ok_of = |z: __m256i, o: __m256i, chunk: u32| -> u32 {
        if chunk >= nchunks {
            return 0;
        }
        let conf = _mm256_cmpeq_epi32(_mm256_and_si256(z, o), zero);
        let ok = _mm256_movemask_ps(_mm256_castsi256_ps(conf)) as u32;
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
            for k in s..e {
                // SAFETY: k < e <= n and entries 0..n were written above.
                let (mut h, step) = unsafe { (hs[k].assume_init(), st[k].assume_init()) };
                for x in acc.iter_mut() {
                    let p = _mm256_srli_epi32::<SHIFT>(h);
                    *x = _mm256_or_si256(*x, _mm256_sllv_epi32(one, p));
                    h = _mm256_add_epi32(h, step);
                }
                hs[k].write(h);
            }
            for u in 0..UNROLL {
                accs[u][ci].write(acc[u]);
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
                    out[j as usize] = (chunk * LANES + ok.trailing_zeros()) as u16;
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
