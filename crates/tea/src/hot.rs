//! Hot keys (paper §4.3, §5.1): a count-min sketch counts every lookup's key, a key whose
//! estimate reaches a threshold is reported to the control plane once per epoch (a Bloom filter
//! remembers what was reported, as the Tofino digest does), and the control plane fills a small
//! fixed-capacity exact-match cache with the reported keys, evicting the coldest.
//!
//! All three take the key's 64-bit hash (computed once per packet, [`crate::Resolver::hash`]),
//! not the key; their indexes are hashes derived from it.
//!
//! # Sizes and costs (defaults as the paper's prototype)
//! - Sketch: 4 rows x 65,536 counters of 16 bits, saturating: 512 KiB; 4 counter updates per
//!   lookup. An estimate never undercounts (up to the 65,535 cap) and overcounts by at most
//!   `e * N / width` with probability `1 - e^-rows` for `N` keys counted this epoch.
//! - Bloom filter: 65,536 bits (8 KiB), 3 probes: about 0.05% false positives at 1,000
//!   reported keys. A false positive keeps a hot key unreported for the rest of the epoch.
//! - Cache: 1,024 entries (the paper: about 55 KB of SRAM for an IPv6 NAT).

use std::collections::HashMap;

use crate::hash::{derive, reduce};

/// Why a sketch, filter or cache cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HotError {
    /// A sketch needs 1..=16 rows.
    #[error("sketch rows {0} not in 1..=16")]
    Rows(usize),
    /// Widths, bit counts and capacities must be at least 1.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// A Bloom filter needs 1..=16 probes.
    #[error("bloom probes {0} not in 1..=16")]
    Probes(usize),
}

/// A count-min sketch of 16-bit saturating counters.
#[derive(Debug, Clone)]
pub struct CountMinSketch {
    rows: usize,
    width: usize,
    counters: Vec<u16>,
}

impl CountMinSketch {
    /// `rows` rows of `width` counters, all zero.
    pub fn new(rows: usize, width: usize) -> Result<CountMinSketch, HotError> {
        if !(1..=16).contains(&rows) {
            return Err(HotError::Rows(rows));
        }
        if width == 0 {
            return Err(HotError::Zero("sketch width"));
        }
        Ok(CountMinSketch {
            rows,
            width,
            counters: vec![0; rows * width],
        })
    }

    #[inline]
    fn index(&self, hash: u64, row: usize) -> usize {
        row * self.width + reduce(derive(hash, 16 + row as u64), self.width as u64) as usize
    }

    /// Counts one occurrence of the key; returns its estimate afterwards.
    pub fn add(&mut self, hash: u64) -> u16 {
        let mut est = u16::MAX;
        for r in 0..self.rows {
            let i = self.index(hash, r);
            let c = self.counters[i].saturating_add(1);
            self.counters[i] = c;
            est = est.min(c);
        }
        est
    }

    /// The key's estimate: at least its true count (or 65,535).
    pub fn estimate(&self, hash: u64) -> u16 {
        (0..self.rows)
            .map(|r| self.counters[self.index(hash, r)])
            .min()
            .unwrap_or(0)
    }

    /// Zeroes every counter (a new epoch).
    pub fn clear(&mut self) {
        self.counters.fill(0);
    }

    /// Memory of the counters in bytes.
    pub fn bytes(&self) -> usize {
        self.counters.len() * 2
    }
}

/// A Bloom filter of keys reported this epoch.
#[derive(Debug, Clone)]
pub struct BloomFilter {
    bits: Vec<u64>,
    nbits: u64,
    probes: usize,
}

impl BloomFilter {
    /// `nbits` bits (rounded up to whole words), `probes` probes per key.
    pub fn new(nbits: usize, probes: usize) -> Result<BloomFilter, HotError> {
        if nbits == 0 {
            return Err(HotError::Zero("bloom bits"));
        }
        if !(1..=16).contains(&probes) {
            return Err(HotError::Probes(probes));
        }
        let words = nbits.div_ceil(64);
        Ok(BloomFilter {
            bits: vec![0; words],
            nbits: words as u64 * 64,
            probes,
        })
    }

    /// Adds the key; true if it was (probably) not there before.
    pub fn insert(&mut self, hash: u64) -> bool {
        let mut new = false;
        for p in 0..self.probes {
            let i = reduce(derive(hash, 40 + p as u64), self.nbits);
            let (w, b) = ((i / 64) as usize, 1u64 << (i % 64));
            new |= self.bits[w] & b == 0;
            self.bits[w] |= b;
        }
        new
    }

    /// Whether the key is (probably) in the filter.
    pub fn contains(&self, hash: u64) -> bool {
        (0..self.probes).all(|p| {
            let i = reduce(derive(hash, 40 + p as u64), self.nbits);
            self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
        })
    }

    /// Empties the filter (a new epoch).
    pub fn clear(&mut self) {
        self.bits.fill(0);
    }
}

/// Sizes of a [`HotKeys`] detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HotParams {
    /// Sketch rows (4).
    pub rows: usize,
    /// Counters per row (65,536).
    pub width: usize,
    /// Estimate at which a key is reported.
    pub threshold: u16,
    /// Bloom filter bits (65,536).
    pub bloom_bits: usize,
    /// Bloom filter probes (3).
    pub bloom_probes: usize,
}

impl Default for HotParams {
    /// The paper's sketch (4 x 64K x 16 bits) and a threshold of 64 lookups per epoch.
    fn default() -> HotParams {
        HotParams {
            rows: 4,
            width: 65_536,
            threshold: 64,
            bloom_bits: 65_536,
            bloom_probes: 3,
        }
    }
}

/// The data plane's half: sketch, threshold and Bloom filter.
#[derive(Debug, Clone)]
pub struct HotKeys {
    sketch: CountMinSketch,
    bloom: BloomFilter,
    threshold: u16,
    reports: u64,
}

impl HotKeys {
    /// A detector of these sizes.
    pub fn new(p: HotParams) -> Result<HotKeys, HotError> {
        Ok(HotKeys {
            sketch: CountMinSketch::new(p.rows, p.width)?,
            bloom: BloomFilter::new(p.bloom_bits, p.bloom_probes)?,
            threshold: p.threshold.max(1),
            reports: 0,
        })
    }

    /// Counts one lookup of the key; `Some(estimate)` if this lookup makes it hot and it was
    /// not reported yet this epoch (report the key to the control plane with this heat).
    pub fn observe(&mut self, hash: u64) -> Option<u16> {
        let est = self.sketch.add(hash);
        if est >= self.threshold && !self.bloom.contains(hash) {
            self.bloom.insert(hash);
            self.reports += 1;
            return Some(est);
        }
        None
    }

    /// The sketch.
    pub fn sketch(&self) -> &CountMinSketch {
        &self.sketch
    }

    /// Reports so far.
    pub fn reports(&self) -> u64 {
        self.reports
    }

    /// Starts a new epoch: counts and reported keys forgotten.
    pub fn new_epoch(&mut self) {
        self.sketch.clear();
        self.bloom.clear();
    }
}

#[derive(Debug, Clone)]
struct CacheEntry {
    value: Box<[u8]>,
    hits: u32,
    prev_hits: u32,
    idle_epochs: u32,
}

impl CacheEntry {
    fn score(&self) -> u32 {
        self.hits.max(self.prev_hits)
    }
}

/// What [`HotCache::offer`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// The key was cached; its value replaced.
    Updated,
    /// Cached in a free entry.
    Inserted,
    /// Cached in place of this colder key.
    Replaced(Vec<u8>),
    /// Every cached key is at least as hot: not cached.
    Rejected,
}

/// The switch's exact-match cache, filled by the control plane from the reports.
///
/// Policy: a reported key takes a free entry; when the cache is full it replaces the entry with
/// the lowest score (hits this epoch or last epoch, whichever is higher) if that score is below
/// the report's heat. At each epoch's end ([`HotCache::age`]) entries without a hit for
/// `max_idle` epochs are dropped. The control plane also drops ([`HotCache::remove`]) or
/// updates ([`HotCache::offer`]) an entry whenever the table's entry changes.
#[derive(Debug, Clone)]
pub struct HotCache {
    capacity: usize,
    max_idle: u32,
    map: HashMap<Box<[u8]>, CacheEntry>,
}

impl HotCache {
    /// A cache of `capacity` entries (1,024 in the paper) that drops entries idle for
    /// `max_idle` epochs (at least 1).
    pub fn new(capacity: usize, max_idle: u32) -> Result<HotCache, HotError> {
        if capacity == 0 {
            return Err(HotError::Zero("cache capacity"));
        }
        Ok(HotCache {
            capacity,
            max_idle: max_idle.max(1),
            map: HashMap::with_capacity(capacity),
        })
    }

    /// Cached keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The cached value of `key`, counting a hit.
    pub fn get(&mut self, key: &[u8]) -> Option<&[u8]> {
        let e = self.map.get_mut(key)?;
        e.hits = e.hits.saturating_add(1);
        Some(&e.value)
    }

    /// Whether `key` is cached (no hit counted).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    /// Offers a reported key with its current value and heat (the sketch's estimate).
    pub fn offer(&mut self, key: &[u8], value: &[u8], heat: u16) -> Offer {
        if let Some(e) = self.map.get_mut(key) {
            e.value = value.into();
            return Offer::Updated;
        }
        let entry = CacheEntry {
            value: value.into(),
            hits: 0,
            prev_hits: u32::from(heat),
            idle_epochs: 0,
        };
        if self.map.len() < self.capacity {
            self.map.insert(key.into(), entry);
            return Offer::Inserted;
        }
        let (victim, score) = self
            .map
            .iter()
            .map(|(k, e)| (k, e.score()))
            .min_by_key(|&(_, s)| s)
            .expect("full cache has entries");
        if score >= u32::from(heat) {
            return Offer::Rejected;
        }
        let victim = victim.clone();
        self.map.remove(&victim);
        self.map.insert(key.into(), entry);
        Offer::Replaced(victim.into_vec())
    }

    /// Drops `key` (its table entry changed or went away); true if it was cached.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.map.remove(key).is_some()
    }

    /// Ends an epoch: hit counts move to "last epoch", entries idle for `max_idle` epochs go.
    /// Returns how many went.
    pub fn age(&mut self) -> usize {
        let before = self.map.len();
        let max_idle = self.max_idle;
        self.map.retain(|_, e| {
            e.idle_epochs = if e.hits == 0 { e.idle_epochs + 1 } else { 0 };
            e.prev_hits = e.hits;
            e.hits = 0;
            e.idle_epochs < max_idle
        });
        before - self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors() {
        assert_eq!(CountMinSketch::new(0, 1).unwrap_err(), HotError::Rows(0));
        assert_eq!(
            CountMinSketch::new(4, 0).unwrap_err(),
            HotError::Zero("sketch width")
        );
        assert_eq!(BloomFilter::new(8, 0).unwrap_err(), HotError::Probes(0));
        assert!(HotCache::new(0, 1).is_err());
    }

    #[test]
    fn saturates_and_clears() {
        let mut s = CountMinSketch::new(2, 4).unwrap();
        for _ in 0..70_000 {
            s.add(5);
        }
        assert_eq!(s.estimate(5), u16::MAX);
        s.clear();
        assert_eq!(s.estimate(5), 0);
        assert_eq!(CountMinSketch::new(4, 65_536).unwrap().bytes(), 512 * 1024);
    }

    #[test]
    fn reports_once_per_epoch() {
        let mut h = HotKeys::new(HotParams {
            threshold: 3,
            ..HotParams::default()
        })
        .unwrap();
        let got: Vec<_> = (0..6).map(|_| h.observe(77)).collect();
        assert_eq!(got, [None, None, Some(3), None, None, None]);
        h.new_epoch();
        assert_eq!(h.observe(77), None);
        assert_eq!(h.sketch().estimate(77), 1);
        assert_eq!((0..3).filter_map(|_| h.observe(77)).count(), 1);
        assert_eq!(h.reports(), 2);
    }

    #[test]
    fn cache_fills_replaces_colder_and_ages() {
        let mut c = HotCache::new(2, 2).unwrap();
        assert_eq!(c.offer(b"a", b"1", 10), Offer::Inserted);
        assert_eq!(c.offer(b"b", b"2", 10), Offer::Inserted);
        assert_eq!(c.offer(b"a", b"3", 10), Offer::Updated);
        for _ in 0..20 {
            assert_eq!(c.get(b"a"), Some(&b"3"[..]));
        }
        // b's score is its report heat (10): a key of heat 10 does not replace it, 11 does.
        assert_eq!(c.offer(b"c", b"4", 10), Offer::Rejected);
        assert_eq!(c.offer(b"c", b"4", 11), Offer::Replaced(b"b".to_vec()));
        assert!(c.contains(b"a") && c.contains(b"c") && !c.contains(b"b"));
        // a was hit, c was not: after two idle epochs c goes, a stays while hit.
        assert_eq!(c.age(), 0);
        c.get(b"a");
        assert_eq!(c.age(), 1);
        assert_eq!(c.len(), 1);
        assert!(c.remove(b"a") && c.is_empty());
    }
}
