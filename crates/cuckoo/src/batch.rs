//! Batched lookups with software prefetching: a chunk of keys goes through four stages, each
//! touching one kind of memory for the whole chunk before the next stage needs it -- bucket
//! addresses (prefetch both candidate buckets' metadata), tags (read versions and tags, prefetch
//! the key of the first tag match), keys (compare, prefetch the value of the match), values (copy
//! out). One acquire fence then validates the whole chunk; a key whose buckets changed meanwhile
//! is looked up again with the single-key path, so results are identical to single lookups.

use crate::sync::{fence, Ordering::Acquire};
use crate::table::{key_words, words_to_bytes, Candidates, Shared, MAX_KEY_WORDS, MAX_VALUE_WORDS};
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
        let mut h = [KeyHash::default(); CHUNK];
        let mut c = [Candidates {
            b1: 0,
            b2: 0,
            tag: 0,
        }; CHUNK];
        let mut ver = [(0u64, 0u64); CHUNK];
        let mut slot = [usize::MAX; CHUNK];
        let mut q = [0u64; MAX_KEY_WORDS];
        let mut buf = [0u64; MAX_VALUE_WORDS];
        while start < n {
            let m = CHUNK.min(n - start);
            let key = |i: usize| &keys[(start + i) * kb..(start + i + 1) * kb];
            // 1: bucket addresses.
            for i in 0..m {
                h[i] = match hashes {
                    Some(hs) => hs[start + i],
                    None => self.hash(key(i)),
                };
                c[i] = self.candidates(h[i]);
                self.prefetch_bucket(c[i].b1);
                self.prefetch_bucket(c[i].b2);
            }
            // 2: versions and tags.
            for i in 0..m {
                ver[i] = (self.version(c[i].b1), self.version(c[i].b2));
                if let Some(s) = self
                    .first_tag_slot(c[i].b1, c[i].tag)
                    .or_else(|| self.first_tag_slot(c[i].b2, c[i].tag))
                {
                    self.prefetch_key(s);
                }
            }
            // 3: keys.
            for i in 0..m {
                key_words(key(i), &mut q);
                slot[i] = match self
                    .find_in(c[i].b1, c[i].tag, &q)
                    .or_else(|| self.find_in(c[i].b2, c[i].tag, &q))
                {
                    Some(s) => {
                        self.prefetch_value(s);
                        s
                    }
                    None => usize::MAX,
                };
            }
            // 4: values.
            for i in 0..m {
                if slot[i] != usize::MAX {
                    self.read_value(slot[i], &mut buf);
                    words_to_bytes(&buf, &mut values[(start + i) * vb..(start + i + 1) * vb]);
                }
            }
            // Validation: one fence for the chunk (see the protocol in `table`).
            fence(Acquire);
            for i in 0..m {
                let (v1, v2) = ver[i];
                let stable = (v1 | v2) & 1 == 0
                    && self.version_relaxed(c[i].b1) == v1
                    && self.version_relaxed(c[i].b2) == v2;
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
