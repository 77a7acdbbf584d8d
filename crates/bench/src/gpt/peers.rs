//! The GPT peers behind one small trait: `sux` VFunc, `ptr_hash` + a packed value array,
//! `hashbrown` storing the keys, and (feature `dpdk`) DPDK's EFD.

use mem_dbg::{MemSize, SizeFlags};
use ptr_hash::hash::KeyHasher;
use ptr_hash::{PtrHash, PtrHashParams};
use rayon::prelude::*;

/// What the benchmark needs of a structure: single and batched lookups.
pub trait Lookup {
    /// The value of one key.
    fn get(&self, key: &[u8]) -> u16;
    /// The values of `keys` into `out` (same length), through the structure's batch API if it
    /// has one, else a loop of [`Lookup::get`].
    fn get_batch(&self, keys: &[&[u8]], out: &mut [u16]);
}

// ---------------------------------------------------------------------------------------------
// sux VFunc

/// `sux`'s VFunc static function over byte-string keys, values in a bit-field vector of the
/// values' width.
pub struct SuxVFunc {
    f: sux::func::VFunc<[u8], sux::bits::BitFieldVec<Box<[u16]>>>,
}

impl SuxVFunc {
    /// Builds with at most `threads` threads.
    pub fn build(
        keys: &[&[u8]],
        values: &[u16],
        threads: usize,
        seed: u64,
    ) -> anyhow::Result<Self> {
        let builder = sux::func::VBuilder::default()
            .max_num_threads(threads)
            .seed(seed);
        let f =
            sux::func::VFunc::<[u8], sux::bits::BitFieldVec<Box<[u16]>>>::try_par_new_with_builder(
                keys,
                values,
                builder,
                dsi_progress_logger::no_logging![],
            )?;
        Ok(SuxVFunc { f })
    }

    /// Bytes of the structure.
    pub fn bytes(&self) -> usize {
        self.f.mem_size(SizeFlags::default())
    }
}

impl Lookup for SuxVFunc {
    #[inline]
    fn get(&self, key: &[u8]) -> u16 {
        self.f.get(key)
    }

    fn get_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.f.get(*k);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ptr_hash + packed values

/// `sb_common::hash128` of the key bytes (our multiply-fold 128-bit hash, the one SetSep and the
/// cuckoo table use), seeded with PtrHash's own global seed, as a PtrHash key hasher.
#[derive(Clone, Copy, Default)]
pub struct SbHasher;

impl KeyHasher<[u8]> for SbHasher {
    type H = u128;
    #[inline(always)]
    fn hash(x: &[u8], seed: u64) -> u128 {
        let h = sb_common::hash128(x, seed);
        (h.hi as u128) << 64 | h.lo as u128
    }
}

/// The JSON note of the ptr_hash row: what it is and what it hashes with (ptr_hash 2.1.3's
/// `index` takes the hasher's 128 bits: the high 64 pick the bucket (`Linear` bucket function),
/// the low 64 xor the pilot's hash pick the slot).
pub const PTR_HASH_NOTE: &str = "ptr_hash 2.1.3 minimal perfect hash (PtrHashParams::default, Linear bucket function, single part, u8 pilots, Vec<u32> remap to [0, n)) + packed V-bit value array; key hash = sb_common::hash128 (our multiply-fold 128-bit hash, as SetSep's) seeded by PtrHash's own seed: high 64 bits pick the bucket, low 64 bits xor the pilot hash pick the slot; batched = index_batch of 16";

type Mphf = PtrHash<[u8], ptr_hash::bucket_fn::Linear, Vec<u32>, SbHasher, Vec<u8>, true, true>;

/// A fixed-width packed array of `bits`-bit values (1 to 16), one padding word at the end so a
/// read never needs a bounds branch for the second word.
pub struct Packed {
    words: Vec<u64>,
    bits: u32,
}

impl Packed {
    /// `len` zero values of `bits` bits.
    pub fn new(len: usize, bits: u32) -> Packed {
        assert!((1..=16).contains(&bits));
        Packed {
            words: vec![0; (len * bits as usize).div_ceil(64) + 1],
            bits,
        }
    }

    /// Sets element `i` to `v` (which must fit).
    pub fn set(&mut self, i: usize, v: u16) {
        let bit = i * self.bits as usize;
        let (w, off) = (bit / 64, bit % 64);
        let mask = (1u64 << self.bits) - 1;
        let v = v as u64 & mask;
        self.words[w] = self.words[w] & !(mask << off) | v << off;
        if off + self.bits as usize > 64 {
            let sh = 64 - off;
            self.words[w + 1] = self.words[w + 1] & !(mask >> sh) | v >> sh;
        }
    }

    /// Element `i`.
    #[inline]
    pub fn get(&self, i: usize) -> u16 {
        let bit = i * self.bits as usize;
        let (w, off) = (bit / 64, bit % 64);
        let lo = self.words[w] >> off;
        let hi = if off == 0 {
            0
        } else {
            self.words[w + 1] << (64 - off)
        };
        ((lo | hi) & ((1u64 << self.bits) - 1)) as u16
    }

    /// Bytes of the array.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

/// PtrHash minimal perfect hash (default parameters, single part, remapped to `[0, n)`) and a
/// packed array of the values at the keys' indices.
pub struct PtrHashValues {
    mphf: Mphf,
    values: Packed,
}

impl PtrHashValues {
    /// Builds with the calling rayon pool (hashing is parallel; the pilot search is not in
    /// PtrHash's single-part variant).
    pub fn build(keys: &[&[u8]], values: &[u16], bits: u32) -> PtrHashValues {
        let mphf = Mphf::new_from_par_iter(
            keys.len(),
            keys.par_iter().copied(),
            PtrHashParams::default(),
        );
        let mut packed = Packed::new(keys.len(), bits);
        for (k, v) in keys.iter().zip(values) {
            packed.set(mphf.index(k), *v);
        }
        PtrHashValues {
            mphf,
            values: packed,
        }
    }

    /// The address of the packed value array (every lookup reads it): where to measure pages.
    pub fn values_addr(&self) -> usize {
        self.values.words.as_ptr() as usize
    }

    /// Bytes of the hash function and the value array.
    pub fn bytes(&self) -> usize {
        self.mphf.mem_size(SizeFlags::default()) + self.values.bytes()
    }
}

impl Lookup for PtrHashValues {
    #[inline]
    fn get(&self, key: &[u8]) -> u16 {
        self.values.get(self.mphf.index(key))
    }

    fn get_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        const K: usize = 16;
        let mut kc = keys.chunks_exact(K);
        let mut oc = out.chunks_exact_mut(K);
        for (ks, os) in (&mut kc).zip(&mut oc) {
            let arr: [&[u8]; K] = ks.try_into().expect("chunk of K");
            let idx = self.mphf.index_batch::<K, _>(arr);
            for (o, i) in os.iter_mut().zip(idx) {
                *o = self.values.get(i);
            }
        }
        for (k, o) in kc.remainder().iter().zip(oc.into_remainder()) {
            *o = self.get(k);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// hashbrown

/// The strawman: a hash map storing every key.
pub struct HashbrownMap {
    map: hashbrown::HashMap<Box<[u8]>, u16>,
}

impl HashbrownMap {
    /// Inserts every key one by one.
    pub fn build(keys: &[&[u8]], values: &[u16]) -> HashbrownMap {
        let mut map = hashbrown::HashMap::with_capacity(keys.len());
        for (k, v) in keys.iter().zip(values) {
            map.insert(Box::<[u8]>::from(*k), *v);
        }
        HashbrownMap { map }
    }

    /// Inserts or replaces `key`'s value.
    #[inline]
    pub fn insert(&mut self, key: &[u8], value: u16) {
        self.map.entry_ref(key).insert(value);
    }

    /// Bytes: the table's slots plus each key's heap allocation (rounded to 16 bytes, the
    /// allocator's granule).
    pub fn bytes(&self) -> usize {
        let slot = std::mem::size_of::<(Box<[u8]>, u16)>() + 1;
        let heap: usize = self.map.keys().map(|k| k.len().next_multiple_of(16)).sum();
        self.map.capacity() * slot * 8 / 7 + heap
    }
}

impl Lookup for HashbrownMap {
    #[inline]
    fn get(&self, key: &[u8]) -> u16 {
        self.map.get(key).copied().unwrap_or(u16::MAX)
    }

    fn get_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
        for (k, o) in keys.iter().zip(out.iter_mut()) {
            *o = self.get(k);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// DPDK EFD

#[cfg(feature = "dpdk")]
pub use efd::EfdPeer;

#[cfg(feature = "dpdk")]
mod efd {
    use super::Lookup;
    use sb_peers::dpdk::efd::Efd;

    /// DPDK EFD with values masked to `mask`.
    pub struct EfdPeer {
        pub efd: Efd,
        pub mask: u16,
    }

    impl Lookup for EfdPeer {
        #[inline]
        fn get(&self, key: &[u8]) -> u16 {
            self.efd.lookup(key) as u16 & self.mask
        }

        fn get_batch(&self, keys: &[&[u8]], out: &mut [u16]) {
            self.efd.lookup_bulk(keys, out);
            for o in out.iter_mut() {
                *o &= self.mask;
            }
        }
    }

    /// Bytes of EFD's online (lookup) table for `n` keys, from the formula in `rte_efd.h`:
    /// chunks = 2^ceil(log2(n / (64 groups * 22 keys))), each chunk 256 bins x 2 bits of bin
    /// choice plus 64 groups x RTE_EFD_VALUE_NUM_BITS x (16-bit hash index + 16-bit lookup table).
    pub fn online_bytes(n: usize) -> usize {
        let per_chunk_keys = 64 * 22;
        let chunks = n.div_ceil(per_chunk_keys).max(1).next_power_of_two();
        let chunk_bytes = 256 * 2 / 8 + 64 * Efd::value_bits() as usize * 4;
        chunks * chunk_bytes
    }
}

#[cfg(feature = "dpdk")]
pub use efd::online_bytes as efd_online_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_round_trips_every_width() {
        for bits in 1..=16u32 {
            let n = 1000;
            let mut p = Packed::new(n, bits);
            let val = |i: usize| ((i * 2654435761) >> 7) as u16 & ((1u32 << bits) - 1) as u16;
            for i in 0..n {
                p.set(i, val(i));
            }
            // Overwrite in reverse to check neighbours are kept.
            for i in (0..n).rev().step_by(3) {
                p.set(i, val(i + 1));
            }
            for i in 0..n {
                let want = if (n - 1 - i) % 3 == 0 {
                    val(i + 1)
                } else {
                    val(i)
                };
                assert_eq!(p.get(i), want, "bits {bits} index {i}");
            }
        }
    }

    fn keys(n: usize) -> (Vec<[u8; 13]>, Vec<u16>) {
        let k = (0..n as u64)
            .map(|i| {
                let mut k = [0u8; 13];
                k[..8].copy_from_slice(&i.to_be_bytes());
                k
            })
            .collect();
        let v = (0..n).map(|i| (i % 4) as u16).collect();
        (k, v)
    }

    #[test]
    fn peers_answer_their_keys() {
        let (k, v) = keys(20_000);
        let refs: Vec<&[u8]> = k.iter().map(|k| &k[..]).collect();
        let check = |s: &dyn Lookup| {
            let mut out = vec![0u16; refs.len()];
            s.get_batch(&refs, &mut out);
            assert_eq!(out, v);
            assert!(refs.iter().zip(&v).all(|(k, v)| s.get(k) == *v));
        };
        check(&SuxVFunc::build(&refs, &v, 2, 1).unwrap());
        check(&PtrHashValues::build(&refs, &v, 2));
        let mut h = HashbrownMap::build(&refs, &v);
        check(&h);
        h.insert(refs[0], 3);
        assert_eq!(h.get(refs[0]), 3);
    }
}
