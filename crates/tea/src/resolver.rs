//! The memory address resolver (paper §4.2, §5.1): key -> hash -> two candidate buckets ->
//! for each, the range that holds it (primary and secondary server, region), the offset in that
//! region and the read length. A reader needs only a [`Resolver`] (layout, seed, range table)
//! to compute which bytes to fetch; the switch of the paper does it with a CRC-64 and a
//! range-match table.

use crate::hash::{derive, hash64, reduce};
use crate::layout::Layout;

/// A memory server's identity (its index in the cluster).
pub type ServerId = u16;

/// One range of buckets: `first_bucket` up to the next range's first bucket, stored in region
/// number = the range's index on its primary, and copied on its secondary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeEntry {
    /// First global bucket index of the range.
    pub first_bucket: u64,
    /// The server reads go to normally.
    pub primary: ServerId,
    /// The server holding a copy, read when the primary is saturated, overloaded or dead.
    pub secondary: Option<ServerId>,
}

/// Why a range table cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// A table needs at least one bucket.
    #[error("a table needs at least one bucket")]
    NoBuckets,
    /// A table needs at least one range, the first starting at bucket 0.
    #[error("the first range must start at bucket 0")]
    FirstRange,
    /// Ranges must start at strictly increasing buckets below the bucket count.
    #[error("range {0} does not start after the one before it, below the bucket count")]
    Order(usize),
    /// A range's secondary is its primary.
    #[error("range {0} names the same server as primary and secondary")]
    SameServer(usize),
    /// More ranges than region numbers (u32).
    #[error("too many ranges")]
    TooMany,
}

/// The range-match table: which server (and region) holds each bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTable {
    buckets: u64,
    entries: Vec<RangeEntry>,
}

impl RangeTable {
    /// A table of `buckets` buckets split into the given ranges (sorted, the first at 0).
    pub fn new(buckets: u64, entries: Vec<RangeEntry>) -> Result<RangeTable, RangeError> {
        if buckets == 0 {
            return Err(RangeError::NoBuckets);
        }
        if entries.first().map(|e| e.first_bucket) != Some(0) {
            return Err(RangeError::FirstRange);
        }
        if u32::try_from(entries.len()).is_err() {
            return Err(RangeError::TooMany);
        }
        for (i, e) in entries.iter().enumerate() {
            if i > 0 && (e.first_bucket <= entries[i - 1].first_bucket || e.first_bucket >= buckets)
            {
                return Err(RangeError::Order(i));
            }
            if e.secondary == Some(e.primary) {
                return Err(RangeError::SameServer(i));
            }
        }
        Ok(RangeTable { buckets, entries })
    }

    /// `buckets` buckets in one range per server, as equal as integers allow; range i is
    /// primary on `servers[i]` and, with two or more servers, secondary on `servers[i + 1]`
    /// (wrapping), so each server holds two ranges' worth of buckets.
    pub fn even(buckets: u64, servers: &[ServerId]) -> Result<RangeTable, RangeError> {
        let n = servers.len() as u64;
        if n == 0 || n > buckets {
            return Err(if buckets == 0 {
                RangeError::NoBuckets
            } else {
                RangeError::FirstRange
            });
        }
        let entries = (0..n)
            .map(|i| RangeEntry {
                first_bucket: i * buckets / n,
                primary: servers[i as usize],
                secondary: (n > 1).then(|| servers[((i + 1) % n) as usize]),
            })
            .collect();
        RangeTable::new(buckets, entries)
    }

    /// Buckets in the whole table.
    pub fn buckets(&self) -> u64 {
        self.buckets
    }

    /// The ranges, in bucket order; a range's index is its region number.
    pub fn entries(&self) -> &[RangeEntry] {
        &self.entries
    }

    /// The range holding `bucket` (which must be below [`buckets`](Self::buckets)).
    pub fn range_of(&self, bucket: u64) -> usize {
        debug_assert!(bucket < self.buckets);
        self.entries.partition_point(|e| e.first_bucket <= bucket) - 1
    }

    /// Buckets `first..end` of range `r`.
    pub fn bounds(&self, r: usize) -> (u64, u64) {
        let end = self
            .entries
            .get(r + 1)
            .map_or(self.buckets, |e| e.first_bucket);
        (self.entries[r].first_bucket, end)
    }
}

/// Where one bucket lives: what a read request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Address {
    /// Global bucket index.
    pub bucket: u64,
    /// Region number (= range index; the same on the primary and the secondary).
    pub region: u32,
    /// Byte offset of the bucket in the region.
    pub offset: u64,
    /// Bytes to read: one bucket.
    pub len: u32,
    /// Server to read from normally.
    pub primary: ServerId,
    /// Server holding a copy.
    pub secondary: Option<ServerId>,
}

/// Layout, hash seed and range table: everything a reader needs to turn a key into the
/// addresses of its two candidate buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolver {
    layout: Layout,
    seed: u64,
    ranges: RangeTable,
}

impl Resolver {
    /// A resolver for a table of this layout, hash seed and range table.
    pub fn new(layout: Layout, seed: u64, ranges: RangeTable) -> Resolver {
        Resolver {
            layout,
            seed,
            ranges,
        }
    }

    /// The table's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The hash seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The range table.
    pub fn ranges(&self) -> &RangeTable {
        &self.ranges
    }

    /// The key's hash (computed once per packet, carried with it).
    pub fn hash(&self, key: &[u8]) -> u64 {
        hash64(self.seed, key)
    }

    /// The two candidate buckets of a key hash, always different when the table has two or
    /// more buckets: the first from the hash, the second from a derived hash.
    pub fn buckets(&self, hash: u64) -> [u64; 2] {
        let n = self.ranges.buckets;
        let b1 = reduce(hash, n);
        if n == 1 {
            return [0, 0];
        }
        let mut b2 = reduce(derive(hash, 0), n - 1);
        if b2 >= b1 {
            b2 += 1;
        }
        [b1, b2]
    }

    /// The other candidate of a key hash that lives in `bucket`.
    pub(crate) fn alternate(&self, hash: u64, bucket: u64) -> u64 {
        let [b1, b2] = self.buckets(hash);
        if bucket == b1 {
            b2
        } else {
            b1
        }
    }

    /// Where `bucket` lives.
    pub fn address(&self, bucket: u64) -> Address {
        let r = self.ranges.range_of(bucket);
        let e = self.ranges.entries[r];
        let bytes = self.layout.bucket_bytes() as u64;
        Address {
            bucket,
            region: r as u32,
            offset: (bucket - e.first_bucket) * bytes,
            len: bytes as u32,
            primary: e.primary,
            secondary: e.secondary,
        }
    }

    /// The addresses of a key's two candidate buckets, in the order a reader reads them.
    pub fn addresses(&self, key: &[u8]) -> [Address; 2] {
        self.buckets(self.hash(key)).map(|b| self.address(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_addresses() {
        let t = RangeTable::even(10, &[4, 5, 6]).unwrap();
        assert_eq!(
            t.entries()
                .iter()
                .map(|e| e.first_bucket)
                .collect::<Vec<_>>(),
            [0, 3, 6]
        );
        assert_eq!(t.entries()[2].secondary, Some(4));
        assert_eq!(
            (t.range_of(0), t.range_of(2), t.range_of(3), t.range_of(9)),
            (0, 0, 1, 2)
        );
        assert_eq!(t.bounds(2), (6, 10));
        let r = Resolver::new(Layout::new(13, 6, 4).unwrap(), 7, t);
        let a = r.address(7);
        assert_eq!(
            (a.region, a.offset, a.len, a.primary, a.secondary),
            (2, 96, 96, 6, Some(4))
        );
        for i in 0..1000u64 {
            let [b1, b2] = r.buckets(r.hash(&i.to_le_bytes()));
            assert!(b1 < 10 && b2 < 10 && b1 != b2);
            assert_eq!(r.alternate(r.hash(&i.to_le_bytes()), b2), b1);
        }
        assert_eq!(RangeTable::even(0, &[1]), Err(RangeError::NoBuckets));
        assert!(RangeTable::even(2, &[1, 2, 3]).is_err());
        let e = |first_bucket, primary, secondary| RangeEntry {
            first_bucket,
            primary,
            secondary,
        };
        assert_eq!(
            RangeTable::new(4, vec![e(1, 0, None)]),
            Err(RangeError::FirstRange)
        );
        assert_eq!(
            RangeTable::new(4, vec![e(0, 0, None), e(0, 1, None)]),
            Err(RangeError::Order(1))
        );
        assert_eq!(
            RangeTable::new(4, vec![e(0, 0, None), e(4, 1, None)]),
            Err(RangeError::Order(1))
        );
        assert_eq!(
            RangeTable::new(4, vec![e(0, 0, Some(0))]),
            Err(RangeError::SameServer(0))
        );
        assert_eq!(
            RangeTable::new(1, vec![e(0, 3, None)]).unwrap().range_of(0),
            0
        );
    }
}
