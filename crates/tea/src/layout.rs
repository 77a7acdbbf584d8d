//! The bucket layout: how one bucket of the TEA table looks in a server's memory region, and the
//! checked lookup over a bucket's bytes that a reader runs after a one-sided read.
//!
//! ```text
//! offset  size  field
//!  0      4     version, u32 little-endian: odd while the writer is rewriting the bucket
//!  4      2     occupancy, u16 little-endian: bit i set = slot i holds a key
//!  6      1     slots per bucket (a reader's check that it uses the writer's layout)
//!  7      1     reserved, 0
//!  8      8     checksum, u64 little-endian: hash::bucket_checksum of the whole bucket
//! 16      S*(K+V) slots: key (K bytes) then value (V bytes); empty slots are all zero
//!  ..     pad   zero bytes up to a multiple of 8
//! ```
//!
//! A one-sided read copies the bucket's bytes in no particular order while the writer may be
//! rewriting it, so the version alone cannot prove a copy whole (as a seqlock's two version reads
//! do for a local reader): the checksum does. A copy that mixes two states of the bucket fails
//! it (the chance that a torn copy passes is about 2^-64), and so does a copy taken while the
//! version is odd. [`Layout::lookup_in_bucket`] returns [`BucketError::Torn`] for both; the
//! reader reads the bucket again.

use crate::hash::bucket_checksum;

/// Size of the bucket header in bytes.
pub const HEADER_BYTES: usize = 16;
/// Most slots a bucket can have (the occupancy field has 16 bits).
pub const MAX_SLOTS: usize = 16;
/// Longest key, in bytes (an IPv6 5-tuple is 37).
pub const MAX_KEY_BYTES: usize = 128;
/// Longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 256;

/// Why a [`Layout`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Keys must be 1..=[`MAX_KEY_BYTES`] bytes.
    #[error("key length {0} is not in 1..={MAX_KEY_BYTES}")]
    KeyLength(usize),
    /// Values must be 0..=[`MAX_VALUE_BYTES`] bytes.
    #[error("value length {0} is more than {MAX_VALUE_BYTES}")]
    ValueLength(usize),
    /// A bucket holds 1..=[`MAX_SLOTS`] slots.
    #[error("slots per bucket {0} is not in 1..={MAX_SLOTS}")]
    Slots(usize),
}

/// Why the bytes of a bucket cannot be looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BucketError {
    /// The bytes are not one bucket of this layout long.
    #[error("bucket is {got} bytes, the layout's are {expected}")]
    Length {
        /// The layout's bucket size.
        expected: usize,
        /// The size given.
        got: usize,
    },
    /// The key is not the layout's key length.
    #[error("key is {got} bytes, the layout's keys are {expected}")]
    KeyLength {
        /// The layout's key size.
        expected: usize,
        /// The size given.
        got: usize,
    },
    /// The copy was taken while the writer rewrote the bucket (odd version) or mixes two
    /// versions of it (checksum mismatch): read it again.
    #[error("bucket copy is torn (written meanwhile): read it again")]
    Torn,
    /// The header names another slot count, sets occupancy bits past the last slot or a
    /// reserved byte: these bytes are not a bucket of this layout.
    #[error("bucket header does not match the layout")]
    Header,
}

/// Key size, value size and slots per bucket: chosen per network function when the table is
/// built, and known to every reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    key_len: usize,
    value_len: usize,
    slots: usize,
}

/// A checked bucket: its header read, its length and checksum verified.
#[derive(Debug, Clone, Copy)]
pub struct BucketView<'b> {
    layout: Layout,
    bytes: &'b [u8],
    version: u32,
    occupied: u16,
}

impl<'b> BucketView<'b> {
    /// The bucket's version (even: a reader compares two reads' versions to learn whether the
    /// bucket changed between them).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Occupancy bits, bit i for slot i.
    pub fn occupied(&self) -> u16 {
        self.occupied
    }

    /// The value stored for `key`, if a slot of this bucket holds it. `key` must have the
    /// layout's key length (the caller checked it).
    pub fn find(&self, key: &[u8]) -> Option<&'b [u8]> {
        (0..self.layout.slots)
            .filter(|i| self.occupied & (1 << i) != 0)
            .find(|&i| self.layout.slot_key(self.bytes, i) == key)
            .map(|i| self.layout.slot_value(self.bytes, i))
    }

    /// Every (key, value) the bucket holds.
    pub fn entries(&self) -> impl Iterator<Item = (&'b [u8], &'b [u8])> + '_ {
        let (layout, bytes) = (self.layout, self.bytes);
        (0..layout.slots)
            .filter(move |i| self.occupied & (1 << i) != 0)
            .map(move |i| (layout.slot_key(bytes, i), layout.slot_value(bytes, i)))
    }
}

impl Layout {
    /// A layout for `key_len`-byte keys, `value_len`-byte values and `slots` slots per bucket.
    pub fn new(key_len: usize, value_len: usize, slots: usize) -> Result<Layout, LayoutError> {
        if !(1..=MAX_KEY_BYTES).contains(&key_len) {
            return Err(LayoutError::KeyLength(key_len));
        }
        if value_len > MAX_VALUE_BYTES {
            return Err(LayoutError::ValueLength(value_len));
        }
        if !(1..=MAX_SLOTS).contains(&slots) {
            return Err(LayoutError::Slots(slots));
        }
        Ok(Layout {
            key_len,
            value_len,
            slots,
        })
    }

    /// Key size in bytes.
    pub fn key_len(&self) -> usize {
        self.key_len
    }

    /// Value size in bytes.
    pub fn value_len(&self) -> usize {
        self.value_len
    }

    /// Slots per bucket.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Bytes of one slot (key then value).
    pub fn slot_bytes(&self) -> usize {
        self.key_len + self.value_len
    }

    /// Bytes of one bucket: the header, the slots, padded to a multiple of 8 (one read's length).
    pub fn bucket_bytes(&self) -> usize {
        (HEADER_BYTES + self.slots * self.slot_bytes()).div_ceil(8) * 8
    }

    fn slot_at(&self, i: usize) -> usize {
        HEADER_BYTES + i * self.slot_bytes()
    }

    pub(crate) fn slot_key<'a>(&self, bucket: &'a [u8], i: usize) -> &'a [u8] {
        let at = self.slot_at(i);
        &bucket[at..at + self.key_len]
    }

    pub(crate) fn slot_value<'a>(&self, bucket: &'a [u8], i: usize) -> &'a [u8] {
        let at = self.slot_at(i) + self.key_len;
        &bucket[at..at + self.value_len]
    }

    /// Checks a bucket copy: length, header, version even, checksum.
    pub fn check<'b>(&self, bytes: &'b [u8]) -> Result<BucketView<'b>, BucketError> {
        if bytes.len() != self.bucket_bytes() {
            return Err(BucketError::Length {
                expected: self.bucket_bytes(),
                got: bytes.len(),
            });
        }
        let version = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let occupied = u16::from_le_bytes(bytes[4..6].try_into().expect("2 bytes"));
        let checksum = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        if version & 1 == 1 || checksum != bucket_checksum(bytes) {
            return Err(BucketError::Torn);
        }
        if bytes[6] as usize != self.slots
            || bytes[7] != 0
            || (self.slots < 16 && occupied >> self.slots != 0)
        {
            return Err(BucketError::Header);
        }
        Ok(BucketView {
            layout: *self,
            bytes,
            version,
            occupied,
        })
    }

    /// The lookup a reader runs over the bytes a one-sided read fetched: `Ok(Some(value))` if
    /// the bucket holds `key`, `Ok(None)` if it does not, an error if the bytes are not a whole
    /// bucket of this layout (a torn copy included: read again). Never panics.
    pub fn lookup_in_bucket<'b>(
        &self,
        bytes: &'b [u8],
        key: &[u8],
    ) -> Result<Option<&'b [u8]>, BucketError> {
        if key.len() != self.key_len {
            return Err(BucketError::KeyLength {
                expected: self.key_len,
                got: key.len(),
            });
        }
        Ok(self.check(bytes)?.find(key))
    }

    /// An empty bucket at version 0, sealed.
    pub fn empty_bucket(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.bucket_bytes()];
        b[6] = self.slots as u8;
        self.seal(&mut b, 0);
        b
    }

    /// Writes `key` and `value` into slot `i` of a bucket image and marks it occupied.
    pub(crate) fn set_slot(&self, bucket: &mut [u8], i: usize, key: &[u8], value: &[u8]) {
        let at = self.slot_at(i);
        bucket[at..at + self.key_len].copy_from_slice(key);
        bucket[at + self.key_len..at + self.slot_bytes()].copy_from_slice(value);
        let occ = occupancy(bucket) | (1 << i);
        bucket[4..6].copy_from_slice(&occ.to_le_bytes());
    }

    /// Zeroes slot `i` of a bucket image and marks it free.
    pub(crate) fn clear_slot(&self, bucket: &mut [u8], i: usize) {
        let at = self.slot_at(i);
        bucket[at..at + self.slot_bytes()].fill(0);
        let occ = occupancy(bucket) & !(1 << i);
        bucket[4..6].copy_from_slice(&occ.to_le_bytes());
    }

    /// Sets the version of a bucket image and its checksum.
    pub(crate) fn seal(&self, bucket: &mut [u8], version: u32) {
        bucket[0..4].copy_from_slice(&version.to_le_bytes());
        let c = bucket_checksum(bucket);
        bucket[8..16].copy_from_slice(&c.to_le_bytes());
    }
}

/// The occupancy bits of a bucket image (unchecked: the writer's own images).
pub(crate) fn occupancy(bucket: &[u8]) -> u16 {
    u16::from_le_bytes([bucket[4], bucket[5]])
}

/// The version of a bucket image (unchecked: the writer's own images).
pub(crate) fn version(bucket: &[u8]) -> u32 {
    u32::from_le_bytes(bucket[0..4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        // NAT over IPv4: 13-byte 5-tuple -> 6-byte (address, port), 4 slots: 16 + 76 -> 96.
        assert_eq!(Layout::new(13, 6, 4).unwrap().bucket_bytes(), 96);
        assert_eq!(Layout::new(8, 8, 1).unwrap().bucket_bytes(), 32);
        assert_eq!(Layout::new(0, 1, 1), Err(LayoutError::KeyLength(0)));
        assert_eq!(Layout::new(1, 257, 1), Err(LayoutError::ValueLength(257)));
        assert_eq!(Layout::new(1, 1, 17), Err(LayoutError::Slots(17)));
    }

    #[test]
    fn set_find_clear_and_torn_copies() {
        let l = Layout::new(5, 3, 4).unwrap();
        let mut b = l.empty_bucket();
        assert_eq!(l.lookup_in_bucket(&b, b"abcde"), Ok(None));
        l.set_slot(&mut b, 2, b"abcde", b"xyz");
        l.seal(&mut b, 2);
        assert_eq!(l.lookup_in_bucket(&b, b"abcde"), Ok(Some(&b"xyz"[..])));
        assert_eq!(l.lookup_in_bucket(&b, b"abcdf"), Ok(None));
        assert_eq!(
            l.lookup_in_bucket(&b, b"abcd"),
            Err(BucketError::KeyLength {
                expected: 5,
                got: 4
            })
        );
        assert_eq!(l.check(&b).unwrap().entries().count(), 1);
        // A flipped byte anywhere (but the checksum field's own) is a torn copy.
        for i in 0..b.len() {
            let mut m = b.clone();
            m[i] ^= 4;
            assert_eq!(
                l.lookup_in_bucket(&m, b"abcde"),
                Err(BucketError::Torn),
                "byte {i}"
            );
        }
        // An odd version is a write in progress even with a matching checksum.
        let mut odd = b.clone();
        l.seal(&mut odd, 3);
        assert_eq!(l.check(&odd).unwrap_err(), BucketError::Torn);
        // A sealed bucket with a wrong slot count is not this layout's.
        let mut other = b.clone();
        other[6] = 8;
        l.seal(&mut other, 2);
        assert_eq!(l.check(&other).unwrap_err(), BucketError::Header);
        l.clear_slot(&mut b, 2);
        l.seal(&mut b, 4);
        assert_eq!(l.lookup_in_bucket(&b, b"abcde"), Ok(None));
        assert_eq!(b[HEADER_BYTES..], vec![0u8; b.len() - HEADER_BYTES][..]);
        assert_eq!(
            l.lookup_in_bucket(&b[1..], b"abcde"),
            Err(BucketError::Length {
                expected: 48,
                got: 47
            })
        );
    }
}
