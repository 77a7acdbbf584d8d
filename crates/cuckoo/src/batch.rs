//! Batched lookups with software prefetching: a chunk of keys goes through stages, each
//! touching one kind of memory for the whole chunk before the next stage needs it -- bucket
//! addresses (prefetch the primary buckets' metadata), tags (read versions and tags, prefetch the
//! key and value of the first tag match, or the alternate bucket when the key may live there:
//! only when the primary bucket's overflow count for the key's class is non-zero), the
//! validation of the misses decided by the primary bucket alone (most misses: no key or value is
//! touched; done before the next stage so the alternates have time to arrive), alternate tags,
//! then keys and values (compare, copy out), each key validated right
//! after its own reads as in the single-key protocol. A key whose buckets changed meanwhile is
//! looked up again with the single-key path, so results are identical to single lookups.

use crate::sync::{fence, Ordering::Acquire};
use crate::table::{count_bits, key_words, Hot, HotFn, Shared, ALT_FLAG, MAX_KEY_WORDS};
use sb_common::{hash128, KeyHash};

/// Keys in flight per prefetch round.
pub const CHUNK: usize = 32;

impl Shared {
    /// Looks up `keys.len() / key_bytes` keys stored back to back in `keys`. For key `i`,
    /// `found[i]` says whether it is present and, if so, its value is copied into
    /// `values[i * value_bytes..][..value_bytes]` (on a miss those bytes are unspecified).
    /// Returns the number of hits. Any batch size works; keys are processed [`CHUNK`] at a time.
    ///
    /// # Panics
    /// If `keys.len()` is not a multiple of `key_bytes`, or `values`/`found` have the wrong length.
    pub fn lookup_batch(&self, keys: &[u8], values: &mut [u8], found: &mut [bool]) -> usize {
        self.batch(keys, None, values, found)
    }

    /// [`Self::lookup_batch`] with the keys' hashes already computed (`hashes[i]` is
    /// `hash128(key_i, params.seed)`, e.g. from the GPT lookup).
    ///
    /// # Panics
    /// As [`Self::lookup_batch`], and if `hashes.len()` is not the number of keys.
    pub fn lookup_batch_hashes(
        &self,
        keys: &[u8],
        hashes: &[KeyHash],
        values: &mut [u8],
        found: &mut [bool],
    ) -> usize {
        self.batch(keys, Some(hashes), values, found)
    }

    fn batch(
        &self,
        keys: &[u8],
        hashes: Option<&[KeyHash]>,
        values: &mut [u8],
        found: &mut [bool],
    ) -> usize {
        let kb = self.key_bytes();
        let vb = self.value_bytes();
        assert_eq!(keys.len() % kb, 0, "keys must be whole keys");
        let n = keys.len() / kb;
        assert_eq!(values.len(), n * vb, "values buffer size");
        assert_eq!(found.len(), n, "found buffer size");
        if let Some(h) = hashes {
            assert_eq!(h.len(), n, "one hash per key");
        }
        self.with_hot(Run {
            keys,
            hashes,
            values,
            found,
            kb,
            vb,
            seed: self.params().seed,
        })
    }
}

/// One batched lookup, run on a [`Hot`] view specialized for the table's geometry.
struct Run<'a> {
    keys: &'a [u8],
    hashes: Option<&'a [KeyHash]>,
    values: &'a mut [u8],
    found: &'a mut [bool],
    kb: usize,
    vb: usize,
    seed: u64,
}

impl HotFn<usize> for Run<'_> {
    #[inline(always)]
    fn call<const S: usize, const KW: usize>(self, t: Hot<'_, S, KW>) -> usize {
        let mut hits = 0;
        let s = t.s();
        let (keys, hashes, values, found) = (self.keys, self.hashes, self.values, self.found);
        let (kb, vb, seed) = (self.kb, self.vb, self.seed);
        // Per key of a chunk: primary bucket, tag, version and tag mask of each bucket
        // (the alternate's only where the key may sit there: listed in `two`).
        let mut b1 = [0usize; CHUNK];
        let mut tag = [0u16; CHUNK];
        let mut v1 = [0u64; CHUNK];
        let mut m1 = [0u32; CHUNK];
        let mut b2 = [0usize; CHUNK];
        let mut v2 = [0u64; CHUNK];
        let mut m2 = [0u32; CHUNK];
        // The keys of a chunk by what is left to do after stage 2: `miss`, only the validation
        // of the primary bucket (no tag matched there and no key of the class overflowed);
        // `work`, key compares (a tag matched in the primary bucket, or the alternate is read:
        // those are also in `two`); `retry`, the single-key path (a bucket changed meanwhile).
        let mut miss = [0u8; CHUNK];
        let mut work = [0u8; CHUNK];
        let mut two = [0u8; CHUNK];
        let mut retry = [0u8; CHUNK];
        let mut q = [0u64; MAX_KEY_WORDS];
        for (ci, ((kc, vc), fc)) in keys
            .chunks(CHUNK * kb)
            .zip(values.chunks_mut(CHUNK * vb))
            .zip(found.chunks_mut(CHUNK))
            .enumerate()
        {
            let start = ci * CHUNK;
            // (`min` and the masks below tell the compiler what holds, `i < CHUNK`, so the
            // per-key arrays are indexed without bounds checks.)
            let m = fc.len().min(CHUNK);
            // 1: bucket addresses (primary buckets only).
            for (i, key) in kc.chunks_exact(kb).enumerate() {
                let i = i % CHUNK;
                let hi = match hashes {
                    Some(hs) => hs[start + i],
                    None => hash128(key, seed),
                };
                let (b, tg) = t.primary(hi);
                b1[i] = b;
                tag[i] = tg;
                t.prefetch_bucket(b);
            }
            // 2: primary versions and tags: prefetch the key and value of the first tag match,
            // or the alternate bucket when the key is not here and some key of its class
            // overflowed; sort the keys into the lists.
            let (mut nm, mut nw, mut nt, mut nr) = (0, 0, 0, 0);
            // (Bucket and tag are read before the acquire load, which the compiler does not
            // move loads across.)
            for i in 0..m {
                let (b, tg) = (b1[i], tag[i]);
                let v = t.version(b);
                let mk = t.tag_mask(b, tg);
                v1[i] = v;
                m1[i] = mk;
                if mk != 0 {
                    let sl = b * s + mk.trailing_zeros() as usize;
                    t.prefetch_key(sl);
                    t.prefetch_value(sl);
                    work[nw] = i as u8;
                    nw += 1;
                } else if v & (count_bits(tg) | 1) == 0 {
                    // Even version, count 0: a miss if the primary bucket validates.
                    fc[i] = false;
                    miss[nm] = i as u8;
                    nm += 1;
                } else if v & 1 == 0 {
                    let a = t.alt(b, tg);
                    b2[i] = a;
                    t.prefetch_bucket(a);
                    two[nt] = i as u8;
                    nt += 1;
                    work[nw] = i as u8;
                    nw += 1;
                } else {
                    retry[nr] = i as u8;
                    nr += 1;
                }
            }
            // 3: the misses' validation (the single-key protocol of `table`: their reads were
            // in stage 2; the acquire fence costs no instruction on x86). It runs before stage
            // 2b so the alternate buckets prefetched in stage 2 have this work's time to arrive.
            fence(Acquire);
            for &i in &miss[..nm] {
                let i = i as usize % CHUNK;
                if t.version_relaxed(b1[i]) != v1[i] {
                    retry[nr] = i as u8;
                    nr += 1;
                }
            }
            // 2b: alternate versions and tags, where needed.
            for &i in &two[..nt] {
                let i = i as usize % CHUNK;
                v2[i] = t.version(b2[i]);
                let mk = t.tag_mask(b2[i], tag[i] | ALT_FLAG);
                m2[i] = mk;
                if mk != 0 {
                    let sl = b2[i] * s + mk.trailing_zeros() as usize;
                    t.prefetch_key(sl);
                    t.prefetch_value(sl);
                }
            }
            // 4: keys (prefetched in stage 2 for the first tag match, which is the key's slot
            // unless tags collide) and, on a match, the value, then the validation of the
            // bucket(s) read. (Key and value slices are made only where needed.)
            for &i in &work[..nw] {
                let i = i as usize % CHUNK;
                let (v, mk1) = (v1[i], m1[i]);
                key_words(&kc[i * kb..(i + 1) * kb], &mut q);
                let hit = if mk1 != 0 {
                    t.find_in_mask(b1[i], mk1, &q)
                } else {
                    t.find_in_mask(b2[i], m2[i], &q)
                };
                if let Some(sl) = hit {
                    t.read_value_bytes(sl, &mut vc[i * vb..(i + 1) * vb]);
                }
                fence(Acquire);
                let ok = v & 1 == 0
                    && t.version_relaxed(b1[i]) == v
                    && if mk1 != 0 {
                        // A tag matched in the primary bucket but not the key, and the
                        // alternate was not read: it decides only if no key could be there.
                        hit.is_some() || v & count_bits(tag[i]) == 0
                    } else {
                        v2[i] & 1 == 0 && t.version_relaxed(b2[i]) == v2[i]
                    };
                if ok {
                    fc[i] = hit.is_some();
                    hits += hit.is_some() as usize;
                } else {
                    retry[nr] = i as u8;
                    nr += 1;
                }
            }
            // 5: keys whose buckets changed meanwhile, looked up again with the single-key
            // path, so results are identical to single lookups.
            for &i in &retry[..nr] {
                let i = i as usize % CHUNK;
                let key = &kc[i * kb..(i + 1) * kb];
                let hi = match hashes {
                    Some(hs) => hs[start + i],
                    None => hash128(key, seed),
                };
                key_words(key, &mut q);
                let r = t.lookup_q(&q, hi, &mut vc[i * vb..(i + 1) * vb]);
                fc[i] = r;
                hits += r as usize;
            }
        }
        hits
    }
}
