//! A memory region: the bytes a server registers for one-sided reads, written by the control
//! side while readers copy from it.
//!
//! The region is an array of `AtomicU64` words holding the little-endian byte image, so a copy
//! that races with a write is a defined (if torn) copy, not a data race; no `unsafe`. The writer
//! stores with `Release`, a reader loads with `Acquire`: a reader that saw any word of a bucket
//! write also sees everything the writer wrote before it, which the lookup protocol's miss
//! confirmation relies on (see [`crate::table`]).

// Under loom (`RUSTFLAGS="--cfg loom"`, `tests/loom.rs`) the words are loom's atomics, so its
// models explore every interleaving of a bucket write with a reader's copy.
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// A read or write past the end of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("bytes {offset}..{offset}+{len} are outside a {size}-byte region")]
pub struct OutOfBounds {
    /// First byte asked for.
    pub offset: u64,
    /// Bytes asked for.
    pub len: u64,
    /// The region's size.
    pub size: u64,
}

/// Anything a memory server can copy bytes out of: a [`Region`] or plain bytes (`[u8]`).
pub trait MemoryRegion {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Copies `out.len()` bytes starting at `offset` into `out`, or fails without writing if
    /// they are not all inside the region.
    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), OutOfBounds>;
}

fn check(offset: u64, len: usize, size: u64) -> Result<(usize, usize), OutOfBounds> {
    let err = OutOfBounds {
        offset,
        len: len as u64,
        size,
    };
    let end = offset.checked_add(len as u64).ok_or(err)?;
    if end > size {
        return Err(err);
    }
    Ok((offset as usize, end as usize))
}

impl MemoryRegion for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), OutOfBounds> {
        let (start, end) = check(offset, out.len(), self.size())?;
        out.copy_from_slice(&self[start..end]);
        Ok(())
    }
}

/// A registered region: `size` bytes (a multiple of 8), zero at first.
#[derive(Debug)]
pub struct Region {
    words: Box<[AtomicU64]>,
}

impl Region {
    /// A zeroed region of `bytes` bytes rounded up to a multiple of 8.
    pub fn new(bytes: usize) -> Region {
        Region {
            words: (0..bytes.div_ceil(8)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A region holding `image` (its length must be a multiple of 8).
    pub fn from_image(image: &[u8]) -> Region {
        assert!(image.len() % 8 == 0, "a region image is whole 8-byte words");
        Region {
            words: image
                .chunks_exact(8)
                .map(|c| AtomicU64::new(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
                .collect(),
        }
    }

    /// A copy of the whole region.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.words.len() * 8];
        self.read_at(0, &mut v).expect("whole region");
        v
    }

    /// Rewrites the bucket at `offset` (8-aligned, `new.len()` a multiple of 8, at least 16)
    /// from its current image to `new`: [`write_words`](Self::write_words), for the table's
    /// own images (always aligned and in bounds).
    pub(crate) fn write_bucket(&self, offset: usize, new: &[u8]) {
        self.write_words(offset as u64, new)
            .expect("a bucket image is aligned and inside its region");
    }

    /// Stores `new` (whole 8-byte words, at least two) at `offset` (8-aligned) in the order
    /// the readers' checks rely on: the first word's low 32 bits (a bucket's version) made odd
    /// first (a reader that sees it retries), then the words from the third on, the second (a
    /// bucket's checksum), and last the first word with its new value (the new even version
    /// and occupancy). This is what a memory server does with a remote write
    /// ([`crate::wire::serve_write`]). Nothing is written if the words are not aligned or not
    /// all inside the region.
    pub fn write_words(&self, offset: u64, new: &[u8]) -> Result<(), WriteError> {
        if offset % 8 != 0 || new.len() % 8 != 0 || new.len() < 16 {
            return Err(WriteError::Unaligned);
        }
        let (start, _) = check(offset, new.len(), self.size()).map_err(WriteError::OutOfBounds)?;
        let w0 = start / 8;
        let head = &self.words[w0];
        let cur = head.load(Ordering::Relaxed);
        // Version is the low 32 bits of word 0 (little-endian bytes 0..4).
        let busy = (cur & !0xffff_ffff) | u64::from((cur as u32).wrapping_add(1) | 1);
        head.store(busy, Ordering::Release);
        for (i, c) in new.chunks_exact(8).enumerate().skip(2) {
            self.words[w0 + i].store(
                u64::from_le_bytes(c.try_into().expect("8 bytes")),
                Ordering::Release,
            );
        }
        self.words[w0 + 1].store(
            u64::from_le_bytes(new[8..16].try_into().expect("8 bytes")),
            Ordering::Release,
        );
        head.store(
            u64::from_le_bytes(new[0..8].try_into().expect("8 bytes")),
            Ordering::Release,
        );
        Ok(())
    }
}

/// Why a write was refused (nothing written).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The bytes are not all inside the region.
    #[error(transparent)]
    OutOfBounds(OutOfBounds),
    /// Not whole 8-byte words at an 8-aligned offset, or fewer than two words.
    #[error("a write must be at least two whole 8-byte words at an 8-aligned offset")]
    Unaligned,
}

impl MemoryRegion for Region {
    fn size(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    /// Copies with `Acquire` loads, word by word: the copy of a bucket being written may be torn
    /// (the bucket's checksum tells), but it is never undefined.
    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), OutOfBounds> {
        let (start, end) = check(offset, out.len(), self.size())?;
        let mut at = start;
        while at < end {
            let w = self.words[at / 8].load(Ordering::Acquire).to_le_bytes();
            let from = at % 8;
            let n = (8 - from).min(end - at);
            out[at - start..at - start + n].copy_from_slice(&w[from..from + n]);
            at += n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_reads_and_bounds() {
        let image: Vec<u8> = (0..64u8).collect();
        let r = Region::from_image(&image);
        for off in 0..64u64 {
            for len in 0..=(64 - off as usize) {
                let mut out = vec![0u8; len];
                r.read_at(off, &mut out).unwrap();
                assert_eq!(out, image[off as usize..off as usize + len]);
                let mut out2 = vec![0u8; len];
                image[..].read_at(off, &mut out2).unwrap();
                assert_eq!(out2, out);
            }
        }
        let mut out = [0u8; 2];
        assert_eq!(
            r.read_at(63, &mut out),
            Err(OutOfBounds {
                offset: 63,
                len: 2,
                size: 64
            })
        );
        assert!(r.read_at(u64::MAX, &mut out).is_err());
        assert!(image[..].read_at(u64::MAX - 1, &mut out).is_err());
        assert_eq!(Region::new(9).size(), 16);
    }
}
