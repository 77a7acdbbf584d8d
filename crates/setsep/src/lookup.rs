//! [`GptLookup`]: the one lookup surface of the Global Partition Table, served by the fixed
//! table ([`SetSep`]), the live one ([`LiveSetSep`]) and the XDP fast path's mirror of its
//! maps (`sb_xdp::GptImage`), so a caller (the engine, a bench) is generic over which table it
//! reads: each call monomorphized, or one virtual call per batch through a `dyn GptLookup`
//! (the engine's `Gpt`).

use std::sync::Arc;

use sb_common::KeyHash;

use crate::{LiveSetSep, SetSep, Stats};

/// What a reader of the GPT asks of it: the key's hash, single and batched lookups (the batch
/// through Algorithm 1's prefetch pipeline), and the table's shape. Every implementation
/// answers as [`SetSep`] does for the same keys, values and seed.
pub trait GptLookup {
    /// The table's hash of `key` (what [`GptLookup::lookup_hash`] takes; the FIB can reuse it).
    fn hash_key(&self, key: &[u8]) -> KeyHash;
    /// The value of the key whose hash is `h`.
    fn lookup_hash(&self, h: KeyHash) -> u16;
    /// Batched [`GptLookup::lookup_hash`].
    ///
    /// # Panics
    /// If `hs` and `out` differ in length.
    fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]);
    /// Bits per value.
    fn value_bits(&self) -> u8;
    /// Number of keys.
    fn len(&self) -> u64;
    /// Size, space per key and fallback use.
    fn stats(&self) -> Stats;
    /// Hash seed of the table.
    fn seed(&self) -> u64;
    /// The table's fingerprint (see [`SetSep::fingerprint`]).
    fn fingerprint(&self) -> u64;
    /// A copy of the table as a fixed [`SetSep`] now, where the implementation holds one (the
    /// fixed and the live table): what the XDP fast path's maps are loaded from. `None` for a
    /// mirror of those maps.
    fn to_fixed(&self) -> Option<SetSep>;

    /// The value of `key` (arbitrary for a key the table was not built with).
    #[inline]
    fn lookup(&self, key: &[u8]) -> u16 {
        self.lookup_hash(self.hash_key(key))
    }
    /// Whether the table has no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

macro_rules! forward_inherent {
    ($t:ty, $fixed:expr) => {
        impl GptLookup for $t {
            #[inline]
            fn hash_key(&self, key: &[u8]) -> KeyHash {
                <$t>::hash_key(self, key)
            }
            #[inline]
            fn lookup_hash(&self, h: KeyHash) -> u16 {
                <$t>::lookup_hash(self, h)
            }
            #[inline]
            fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
                <$t>::lookup_batch_hashes(self, hs, out)
            }
            fn value_bits(&self) -> u8 {
                <$t>::value_bits(self)
            }
            fn len(&self) -> u64 {
                <$t>::len(self)
            }
            fn stats(&self) -> Stats {
                <$t>::stats(self)
            }
            fn seed(&self) -> u64 {
                <$t>::seed(self)
            }
            fn fingerprint(&self) -> u64 {
                <$t>::fingerprint(self)
            }
            fn to_fixed(&self) -> Option<SetSep> {
                let f: fn(&$t) -> SetSep = $fixed;
                Some(f(self))
            }
            #[inline]
            fn lookup(&self, key: &[u8]) -> u16 {
                <$t>::lookup(self, key)
            }
        }
    };
}

forward_inherent!(SetSep, |t| t.clone());
forward_inherent!(LiveSetSep, |t| t.snapshot());

macro_rules! forward_pointer {
    ($($p:tt)*) => {
        impl<T: GptLookup + ?Sized> GptLookup for $($p)* {
            #[inline]
            fn hash_key(&self, key: &[u8]) -> KeyHash {
                (**self).hash_key(key)
            }
            #[inline]
            fn lookup_hash(&self, h: KeyHash) -> u16 {
                (**self).lookup_hash(h)
            }
            #[inline]
            fn lookup_batch_hashes(&self, hs: &[KeyHash], out: &mut [u16]) {
                (**self).lookup_batch_hashes(hs, out)
            }
            fn value_bits(&self) -> u8 {
                (**self).value_bits()
            }
            fn len(&self) -> u64 {
                (**self).len()
            }
            fn stats(&self) -> Stats {
                (**self).stats()
            }
            fn seed(&self) -> u64 {
                (**self).seed()
            }
            fn fingerprint(&self) -> u64 {
                (**self).fingerprint()
            }
            fn to_fixed(&self) -> Option<SetSep> {
                (**self).to_fixed()
            }
            #[inline]
            fn lookup(&self, key: &[u8]) -> u16 {
                (**self).lookup(key)
            }
        }
    };
}

forward_pointer!(&T);
forward_pointer!(Arc<T>);
forward_pointer!(Box<T>);
