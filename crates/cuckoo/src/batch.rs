//! Batched lookups with software prefetching: a chunk of keys goes through stages, each
//! touching one kind of memory for the whole chunk before the next stage needs it -- bucket
//! addresses (prefetch the primary buckets' metadata), tags (read versions and tags, prefetch the
//! key of the first tag match, or the alternate bucket when the key may live there: only when the
//! primary bucket's overflow count is non-zero; the value of the first tag match is prefetched
//! with its key), alternate tags, then keys and values (compare, copy out). One acquire fence then validates the whole chunk; a key whose buckets changed meanwhile
//! is looked up again with the single-key path, so results are identical to single lookups.

use crate::sync::{fence, Ordering::Acquire};
use crate::table::{key_words, overflow, Candidates, Shared, ALT_FLAG, MAX_KEY_WORDS};
use sb_common::KeyHash;

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
        let mut hits = 0;
        let mut start = 0;
        let s = self.slots_per_bucket();
        let mut h = [KeyHash::default(); CHUNK];
        let mut c = [Candidates {
            b1: 0,
            b2: 0,
            tag: 0,
        }; CHUNK];
        // Per key: versions of b1 and b2 (b2's only read when needed), tag masks, found slot.
        let mut ver = [(0u64, 0u64); CHUNK];
        let mut mask = [(0u32, 0u32); CHUNK];
        let mut need2 = [false; CHUNK];
        let mut slot = [usize::MAX; CHUNK];
        let mut slow = [false; CHUNK];
        let mut q = [0u64; MAX_KEY_WORDS];
        while start < n {
            let m = CHUNK.min(n - start);
            let key = |i: usize| &keys[(start + i) * kb..(start + i + 1) * kb];
            // 1: bucket addresses (primary buckets only).
            for i in 0..m {
                h[i] = match hashes {
                    Some(hs) => hs[start + i],
                    None => self.hash(key(i)),
                };
                c[i] = self.candidates(h[i]);
                self.prefetch_bucket(c[i].b1);
            }
            // 2: primary versions and tags: prefetch the key of the first tag match, or the
            // alternate bucket when the key is not here and some key of this bucket overflowed.
            for i in 0..m {
                let v1 = self.version(c[i].b1);
                let m1 = self.tag_mask(c[i].b1, c[i].tag);
                ver[i] = (v1, 0);
                mask[i] = (m1, 0);
                need2[i] = m1 == 0 && overflow(v1, c[i].tag) != 0;
                if m1 != 0 {
                    let sl = c[i].b1 * s + m1.trailing_zeros() as usize;
                    self.prefetch_key(sl);
                    self.prefetch_value(sl);
                } else if need2[i] {
                    self.prefetch_bucket(c[i].b2);
                }
            }
            // 2b: alternate versions and tags, where needed.
            for i in 0..m {
                if need2[i] {
                    ver[i].1 = self.version(c[i].b2);
                    let m2 = self.tag_mask(c[i].b2, c[i].tag | ALT_FLAG);
                    mask[i].1 = m2;
                    if m2 != 0 {
                        let sl = c[i].b2 * s + m2.trailing_zeros() as usize;
                        self.prefetch_key(sl);
                        self.prefetch_value(sl);
                    }
                }
            }
            // 3: keys (only where a tag matched) and, on a match, the value (both prefetched in
            // stage 2 for the first tag match, which is the key's slot unless tags collide).
            for i in 0..m {
                let (m1, m2) = mask[i];
                slot[i] = usize::MAX;
                slow[i] = false;
                if m1 | m2 != 0 {
                    key_words(key(i), &mut q);
                    let found = self
                        .find_in_mask(c[i].b1, m1, &q)
                        .or_else(|| self.find_in_mask(c[i].b2, m2, &q));
                    match found {
                        Some(sl) => {
                            slot[i] = sl;
                            self.read_value_bytes(
                                sl,
                                &mut values[(start + i) * vb..(start + i + 1) * vb],
                            );
                        }
                        // A tag matched in b1 but not the key, and b2 was not read: let the
                        // single-key path decide.
                        None => slow[i] = !need2[i] && overflow(ver[i].0, c[i].tag) != 0,
                    }
                }
            }
            // Validation: one fence for the chunk (see the protocol in `table`).
            fence(Acquire);
            for i in 0..m {
                let (v1, v2) = ver[i];
                let stable = !slow[i]
                    && (v1 | v2) & 1 == 0
                    && self.version_relaxed(c[i].b1) == v1
                    && (!need2[i] || self.version_relaxed(c[i].b2) == v2);
                let hit = if stable {
                    slot[i] != usize::MAX
                } else {
                    key_words(key(i), &mut q);
                    self.lookup_q(
                        &q,
                        h[i],
                        &mut values[(start + i) * vb..(start + i + 1) * vb],
                    )
                };
                found[start + i] = hit;
                hits += hit as usize;
            }
            start += m;
        }
        hits
    }
}
