//! The on-disk formats, as pure functions on bytes: the segment header, the frames (one per
//! commit) and the snapshot file. Everything little-endian.
//!
//! Segment file `{base_lsn:020}.wal`:
//! ```text
//!  0  8  magic "SBWALSEG"
//!  8  2  version (2)
//! 10  2  flags (0)
//! 12  4  identity length n (at most MAX_IDENTITY)
//! 16  8  salt: random per segment, seeds every checksum of its frames
//! 24  8  base LSN: the LSN of the segment's first record (>= 1)
//! 32  n  identity (opaque bytes of the caller: cluster id, node)
//! 32+n 8 xxh3-64 of the bytes before
//! then frames, back to back
//! ```
//! Frame (one per [`crate::Wal::commit`]: a commit group is all or nothing), written with one
//! `pwrite` and made durable by one `fdatasync`:
//! ```text
//!  0  4  magic "SBWF"
//!  4  4  body length
//!  8  8  first LSN (the frame's records are first, first+1, ...)
//! 16  4  record count (>= 1)
//! 20  4  reserved (0)
//! 24  8  xxh3-64 of the body, seeded with the salt
//! 32  8  xxh3-64 of bytes 0..32, seeded with the salt (the header checksum)
//! 40     body: count records, each a u32 length and its payload, filling the body exactly
//!        trailer, the commit marker (24 bytes):
//!  0  4  magic "SBWC"
//!  4  4  body length (again)
//!  8  8  the header checksum (binds the trailer to its header, hence to the body's checksum)
//! 16  8  xxh3-64 of trailer bytes 0..16, seeded with the salt
//! ```
//! The header says where the frame ends, the trailer where it began: a frame whose bytes are
//! all present by length is told from one whose write never completed (see [`classify_tail`]).
//! Snapshot file `snapshot`:
//! ```text
//!  0  8  magic "SBWALSNP"
//!  8  2  version (2)
//! 10  2  flags (0)
//! 12  4  identity length n
//! 16  8  LSN: the snapshot holds the effect of every record up to this one
//! 24  8  data length d
//! 32  n  identity
//!     d  data (opaque bytes of the caller)
//!     8  xxh3-64 of everything before
//! ```

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The format version written and read (1, without commit trailers, is refused).
pub const VERSION: u16 = 2;
/// Segment file magic.
pub const SEGMENT_MAGIC: [u8; 8] = *b"SBWALSEG";
/// Snapshot file magic.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"SBWALSNP";
/// Frame magic.
pub const FRAME_MAGIC: [u8; 4] = *b"SBWF";
/// Frame trailer (commit marker) magic.
pub const TRAILER_MAGIC: [u8; 4] = *b"SBWC";
/// Bytes of a frame header.
pub const FRAME_HEADER: usize = 40;
/// Bytes of a frame trailer.
pub const FRAME_TRAILER: usize = 24;
/// Bytes of a record's length prefix.
pub const RECORD_PREFIX: usize = 4;
/// LSNs above this are refused as damage (so LSN arithmetic never overflows).
pub const MAX_LSN: u64 = 1 << 62;
/// The longest identity accepted (bytes).
pub const MAX_IDENTITY: usize = 4096;
/// Fixed bytes of a segment header (without identity and checksum).
const SEGMENT_FIXED: usize = 32;
/// Fixed bytes of a snapshot header (without identity, data and checksum).
const SNAPSHOT_FIXED: usize = 32;

/// Why bytes were refused; the caller adds the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FormatError {
    /// Damaged at this byte offset.
    Corrupt {
        /// Offset in the file.
        offset: u64,
        /// What was wrong.
        reason: &'static str,
    },
    /// A version this code does not read.
    Version(u16),
    /// A frame that was written whole (so its commit returned and was acknowledged) fails its
    /// checks: the records from `last_good_lsn + 1` on are damaged.
    Damaged {
        /// Offset of the frame in the file.
        offset: u64,
        /// The last LSN before the damaged frame.
        last_good_lsn: u64,
        /// What was wrong.
        reason: &'static str,
    },
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn corrupt(offset: usize, reason: &'static str) -> FormatError {
    FormatError::Corrupt {
        offset: offset as u64,
        reason,
    }
}

/// A parsed segment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Seeds the frame checksums.
    pub salt: u64,
    /// LSN of the first record.
    pub base_lsn: u64,
    /// The caller's identity bytes.
    pub identity: Vec<u8>,
}

impl SegmentHeader {
    /// Bytes of the encoded header.
    pub fn encoded_len(&self) -> usize {
        SEGMENT_FIXED + self.identity.len() + 8
    }

    /// Encodes the header.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.encoded_len());
        b.extend_from_slice(&SEGMENT_MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(self.identity.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.salt.to_le_bytes());
        b.extend_from_slice(&self.base_lsn.to_le_bytes());
        b.extend_from_slice(&self.identity);
        let sum = xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses the header at the start of `b`; returns it and its length.
    pub fn parse(b: &[u8]) -> Result<(SegmentHeader, usize), FormatError> {
        if b.len() < SEGMENT_FIXED {
            return Err(corrupt(0, "segment shorter than its header"));
        }
        if b[..8] != SEGMENT_MAGIC {
            return Err(corrupt(0, "not a segment (bad magic)"));
        }
        let version = u16_at(b, 8);
        if version != VERSION {
            return Err(FormatError::Version(version));
        }
        if u16_at(b, 10) != 0 {
            return Err(corrupt(10, "unknown segment flags"));
        }
        let n = u32_at(b, 12) as usize;
        if n > MAX_IDENTITY {
            return Err(corrupt(12, "identity too long"));
        }
        let end = SEGMENT_FIXED + n;
        if b.len() < end + 8 {
            return Err(corrupt(0, "segment shorter than its header"));
        }
        if xxh3_64(&b[..end]) != u64_at(b, end) {
            return Err(corrupt(end, "segment header checksum mismatch"));
        }
        let base_lsn = u64_at(b, 24);
        if base_lsn == 0 || base_lsn > MAX_LSN {
            return Err(corrupt(24, "base LSN out of range"));
        }
        let h = SegmentHeader {
            salt: u64_at(b, 16),
            base_lsn,
            identity: b[SEGMENT_FIXED..end].to_vec(),
        };
        Ok((h, end + 8))
    }
}

/// Fills the 40-byte header at the start of `frame` (whose body follows it) for `count`
/// records starting at `first_lsn`, and appends the 24-byte trailer.
pub fn seal_frame(frame: &mut Vec<u8>, first_lsn: u64, count: u32, salt: u64) {
    let body_len = (frame.len() - FRAME_HEADER) as u32;
    let body_sum = xxh3_64_with_seed(&frame[FRAME_HEADER..], salt);
    let h = &mut frame[..FRAME_HEADER];
    h[0..4].copy_from_slice(&FRAME_MAGIC);
    h[4..8].copy_from_slice(&body_len.to_le_bytes());
    h[8..16].copy_from_slice(&first_lsn.to_le_bytes());
    h[16..20].copy_from_slice(&count.to_le_bytes());
    h[20..24].copy_from_slice(&0u32.to_le_bytes());
    h[24..32].copy_from_slice(&body_sum.to_le_bytes());
    let header_sum = xxh3_64_with_seed(&h[..32], salt);
    h[32..40].copy_from_slice(&header_sum.to_le_bytes());
    frame.extend_from_slice(&trailer(body_len, header_sum, salt));
}

/// The trailer of a frame with this body length and header checksum.
fn trailer(body_len: u32, header_sum: u64, salt: u64) -> [u8; FRAME_TRAILER] {
    let mut t = [0u8; FRAME_TRAILER];
    t[0..4].copy_from_slice(&TRAILER_MAGIC);
    t[4..8].copy_from_slice(&body_len.to_le_bytes());
    t[8..16].copy_from_slice(&header_sum.to_le_bytes());
    let sum = xxh3_64_with_seed(&t[..16], salt);
    t[16..24].copy_from_slice(&sum.to_le_bytes());
    t
}

/// The body length of an intact trailer at the start of `t` (magic and checksum hold).
fn parse_trailer(t: &[u8], salt: u64) -> Option<(usize, u64)> {
    if t.len() < FRAME_TRAILER || t[..4] != TRAILER_MAGIC {
        return None;
    }
    if xxh3_64_with_seed(&t[..16], salt) != u64_at(t, 16) {
        return None;
    }
    Some((u32_at(t, 4) as usize, u64_at(t, 8)))
}

/// The body length of an intact frame header at the start of `b` (magic, checksum and
/// reserved bits hold, at least one record).
fn parse_header(b: &[u8], salt: u64) -> Option<usize> {
    if b.len() < FRAME_HEADER || b[..4] != FRAME_MAGIC {
        return None;
    }
    if xxh3_64_with_seed(&b[..32], salt) != u64_at(b, 32) {
        return None;
    }
    if u32_at(b, 16) == 0 || u32_at(b, 20) != 0 {
        return None;
    }
    Some(u32_at(b, 4) as usize)
}

/// An intact frame.
#[derive(Debug)]
pub struct Frame<'a> {
    /// LSN of its first record.
    pub first_lsn: u64,
    /// The payloads.
    pub records: Vec<&'a [u8]>,
    /// Bytes of the whole frame, header included.
    pub len: usize,
}

/// Parses the frame at the start of `b`, or `None` if the bytes there are not an intact frame
/// (short, bad magic or checksum, no matching trailer, records not filling the body exactly).
pub fn parse_frame(b: &[u8], salt: u64) -> Option<Frame<'_>> {
    let body_len = parse_header(b, salt)?;
    let count = u32_at(b, 16) as usize;
    if (b.len() - FRAME_HEADER) < body_len + FRAME_TRAILER {
        return None;
    }
    let body = &b[FRAME_HEADER..FRAME_HEADER + body_len];
    if xxh3_64_with_seed(body, salt) != u64_at(b, 24) {
        return None;
    }
    let (t_len, t_sum) = parse_trailer(&b[FRAME_HEADER + body_len..], salt)?;
    if t_len != body_len || t_sum != u64_at(b, 32) {
        return None;
    }
    // Each record takes at least its prefix: bound the allocation by the body's size.
    if count > body_len / RECORD_PREFIX {
        return None;
    }
    let mut records = Vec::with_capacity(count);
    let mut at = 0usize;
    for _ in 0..count {
        if body.len() - at < RECORD_PREFIX {
            return None;
        }
        let n = u32_at(body, at) as usize;
        at += RECORD_PREFIX;
        if body.len() - at < n {
            return None;
        }
        records.push(&body[at..at + n]);
        at += n;
    }
    if at != body.len() {
        return None;
    }
    Some(Frame {
        first_lsn: u64_at(b, 8),
        records,
        len: FRAME_HEADER + body_len + FRAME_TRAILER,
    })
}

/// What the bytes after the last intact frame of a log are, when no intact frame follows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// A write that never completed: its commit never returned, nothing of it was
    /// acknowledged; it may be dropped.
    Torn,
    /// A frame that was written whole, hence committed and acknowledged, and is damaged since.
    Damaged(&'static str),
}

/// Classifies the bytes `b[at..]`, which do not begin an intact frame and hold no intact frame
/// after `at`.
///
/// A commit writes its frame (header, body, trailer) with one `pwrite` and returns after
/// `fdatasync`; the next commit writes only after that. A crash before the `fdatasync` returns
/// leaves the frame's bytes partly on disk: the file ends before the frame does (the size was
/// not extended that far), or whole pages of it read as zeros (the size was extended, the data
/// never written). A frame that was acknowledged is whole; later damage (a flipped bit, a bad
/// sector's garbage) leaves it whole by length but failing a checksum. So:
/// - fewer bytes than a header, a header that checks but claims more bytes than the file has,
///   or a header that checks whose trailer is all zeros: **torn**;
/// - a header that checks, every byte present and a trailer that is not all zeros (so
///   written), with the body or the trailer failing: **damaged**;
/// - a header that does not check: **damaged** if an intact trailer after it points back to
///   it (the frame's end was written: the header was damaged since), else **torn** (an
///   all-zero header is a page never written; a damaged header of a frame whose trailer is
///   lost too takes two faults).
///
/// The rule errs towards "damaged": a crash that left a frame's header and trailer pages
/// written and a page in between unwritten (writeback in another order than the file's) is
/// reported as damage, an error that needs a repair from a replica, never a silent loss.
pub fn classify_tail(b: &[u8], at: usize, salt: u64) -> Tail {
    let rest = &b[at..];
    if rest.len() < FRAME_HEADER {
        return Tail::Torn;
    }
    if let Some(body_len) = parse_header(rest, salt) {
        let len = FRAME_HEADER + body_len + FRAME_TRAILER;
        if rest.len() < len {
            return Tail::Torn;
        }
        let t = &rest[len - FRAME_TRAILER..len];
        if t.iter().all(|&x| x == 0) {
            return Tail::Torn;
        }
        return Tail::Damaged("a frame written whole fails its checksum");
    }
    if rest[..FRAME_HEADER].iter().all(|&x| x == 0) {
        return Tail::Torn;
    }
    // An intact trailer whose frame starts at `at`.
    let mut from = FRAME_HEADER;
    while from + FRAME_TRAILER <= rest.len() {
        let Some(pos) = rest[from..]
            .windows(TRAILER_MAGIC.len())
            .position(|w| w == TRAILER_MAGIC)
        else {
            break;
        };
        let p = from + pos;
        if let Some((body_len, _)) = parse_trailer(&rest[p..], salt) {
            if p == FRAME_HEADER + body_len {
                return Tail::Damaged("a frame written whole has a damaged header");
            }
        }
        from = p + 1;
    }
    Tail::Torn
}

/// What a segment's frame area holds.
#[derive(Debug)]
pub struct SegmentScan<'a> {
    /// The records of its intact frames, in order; the first has the segment's base LSN.
    pub records: Vec<&'a [u8]>,
    /// Bytes of the segment up to the end of its last intact frame.
    pub valid_len: usize,
    /// Bytes after that: a torn last commit (nothing intact follows it).
    pub torn_bytes: usize,
}

/// Reads the frames of a segment whose header (`header_len` bytes, `salt`, `base_lsn`) was
/// parsed. The intact frames must carry consecutive LSNs from `base_lsn`. The first bytes that
/// are not an intact frame are [`FormatError::Damaged`] if an intact frame follows them
/// anywhere (a later commit was written, so this one had returned) or if [`classify_tail`]
/// finds them damaged; else they are the torn tail.
pub fn scan_segment(
    b: &[u8],
    header_len: usize,
    salt: u64,
    base_lsn: u64,
) -> Result<SegmentScan<'_>, FormatError> {
    let mut records = Vec::new();
    let mut at = header_len;
    let mut next = base_lsn;
    while at < b.len() {
        let damaged = |reason| FormatError::Damaged {
            offset: at as u64,
            last_good_lsn: next - 1,
            reason,
        };
        let Some(frame) = parse_frame(&b[at..], salt) else {
            if find_frame_after(b, at + 1, salt).is_some() {
                return Err(damaged("damaged frame followed by intact ones"));
            }
            if let Tail::Damaged(reason) = classify_tail(b, at, salt) {
                return Err(damaged(reason));
            }
            return Ok(SegmentScan {
                records,
                valid_len: at,
                torn_bytes: b.len() - at,
            });
        };
        if frame.first_lsn != next {
            return Err(damaged("frame LSN out of sequence"));
        }
        next = next.saturating_add(frame.records.len() as u64);
        records.extend(frame.records);
        at += frame.len;
    }
    Ok(SegmentScan {
        records,
        valid_len: at,
        torn_bytes: 0,
    })
}

/// The offset of the first intact frame starting at or after `from`, if any.
fn find_frame_after(b: &[u8], from: usize, salt: u64) -> Option<usize> {
    let mut at = from;
    while at + FRAME_HEADER <= b.len() {
        // Jump to the next magic candidate.
        let rest = &b[at..];
        let pos = rest.windows(4).position(|w| w == FRAME_MAGIC)?;
        at += pos;
        if parse_frame(&b[at..], salt).is_some() {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// Encodes a snapshot file at once (the format's tests; the log streams it,
/// `CheckpointWriter::write_with`).
#[cfg(test)]
pub fn encode_snapshot(identity: &[u8], lsn: u64, data: &[u8]) -> Vec<u8> {
    let mut b = snapshot_header(identity, lsn, data.len() as u64);
    b.reserve(data.len() + 8);
    b.extend_from_slice(data);
    let sum = xxh3_64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    b
}

/// A snapshot file's bytes before its data (of `data_len` bytes): what a writer that streams
/// the data writes first; the file ends with the xxh3-64 of the header and the data.
pub fn snapshot_header(identity: &[u8], lsn: u64, data_len: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(SNAPSHOT_FIXED + identity.len());
    b.extend_from_slice(&SNAPSHOT_MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(identity.len() as u32).to_le_bytes());
    b.extend_from_slice(&lsn.to_le_bytes());
    b.extend_from_slice(&data_len.to_le_bytes());
    b.extend_from_slice(identity);
    b
}

/// A parsed snapshot file: identity, LSN, data.
pub type ParsedSnapshot<'a> = (&'a [u8], u64, &'a [u8]);

/// Parses a whole snapshot file. A snapshot is written to a temporary name and renamed, so
/// any damage is an error (there is no torn tail to drop).
pub fn parse_snapshot(b: &[u8]) -> Result<ParsedSnapshot<'_>, FormatError> {
    if b.len() < SNAPSHOT_FIXED + 8 {
        return Err(corrupt(0, "snapshot shorter than its header"));
    }
    if b[..8] != SNAPSHOT_MAGIC {
        return Err(corrupt(0, "not a snapshot (bad magic)"));
    }
    let version = u16_at(b, 8);
    if version != VERSION {
        return Err(FormatError::Version(version));
    }
    if u16_at(b, 10) != 0 {
        return Err(corrupt(10, "unknown snapshot flags"));
    }
    let n = u32_at(b, 12) as usize;
    if n > MAX_IDENTITY {
        return Err(corrupt(12, "identity too long"));
    }
    let lsn = u64_at(b, 16);
    if lsn >= MAX_LSN {
        return Err(corrupt(16, "snapshot LSN out of range"));
    }
    let d = u64_at(b, 24);
    let want = (SNAPSHOT_FIXED as u64)
        .checked_add(n as u64)
        .and_then(|x| x.checked_add(d))
        .and_then(|x| x.checked_add(8));
    if want != Some(b.len() as u64) {
        return Err(corrupt(24, "snapshot length does not match its file"));
    }
    let end = b.len() - 8;
    if xxh3_64(&b[..end]) != u64_at(b, end) {
        return Err(corrupt(end, "snapshot checksum mismatch"));
    }
    let id_end = SNAPSHOT_FIXED + n;
    Ok((&b[SNAPSHOT_FIXED..id_end], lsn, &b[id_end..end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(first: u64, payloads: &[&[u8]], salt: u64) -> Vec<u8> {
        let mut f = vec![0u8; FRAME_HEADER];
        for p in payloads {
            f.extend_from_slice(&(p.len() as u32).to_le_bytes());
            f.extend_from_slice(p);
        }
        seal_frame(&mut f, first, payloads.len() as u32, salt);
        f
    }

    #[test]
    fn frame_round_trip_and_salt_matters() {
        let f = frame(7, &[b"a", b"", b"xyz"], 99);
        let p = parse_frame(&f, 99).unwrap();
        assert_eq!(p.first_lsn, 7);
        assert_eq!(p.records, vec![&b"a"[..], b"", b"xyz"]);
        assert_eq!(p.len, f.len());
        assert!(parse_frame(&f, 98).is_none());
        assert!(parse_frame(&f[..f.len() - 1], 99).is_none());
    }

    #[test]
    fn damage_in_the_middle_is_an_error_at_the_end_a_torn_tail() {
        let h = SegmentHeader {
            salt: 5,
            base_lsn: 1,
            identity: b"id".to_vec(),
        };
        let mut seg = h.encode();
        let hl = seg.len();
        let f1 = frame(1, &[b"one"], 5);
        let f2 = frame(2, &[b"two", b"three"], 5);
        seg.extend_from_slice(&f1);
        seg.extend_from_slice(&f2);
        let s = scan_segment(&seg, hl, 5, 1).unwrap();
        assert_eq!(s.records.len(), 3);
        assert_eq!(s.torn_bytes, 0);

        let mut mid = seg.clone();
        mid[hl + FRAME_HEADER + 1] ^= 1;
        assert_eq!(
            scan_segment(&mid, hl, 5, 1).unwrap_err(),
            FormatError::Damaged {
                offset: hl as u64,
                last_good_lsn: 0,
                reason: "damaged frame followed by intact ones"
            }
        );

        // The last frame, whole by length, with a flipped bit: damaged, not torn.
        let mut tail = seg.clone();
        let last = tail.len() - 1;
        tail[last] ^= 1;
        assert!(matches!(
            scan_segment(&tail, hl, 5, 1).unwrap_err(),
            FormatError::Damaged {
                last_good_lsn: 1,
                ..
            }
        ));
        // Cut short: torn.
        let s = scan_segment(&seg[..seg.len() - 1], hl, 5, 1).unwrap();
        assert_eq!(s.records, vec![&b"one"[..]]);
        assert_eq!(s.torn_bytes, f2.len() - 1);
        assert_eq!(s.valid_len, hl + f1.len());
        // Whole by length with its trailer never written (zeros): torn.
        let mut zeroed = seg.clone();
        let n = zeroed.len();
        zeroed[n - FRAME_TRAILER..].fill(0);
        assert_eq!(
            scan_segment(&zeroed, hl, 5, 1).unwrap().torn_bytes,
            f2.len()
        );
        // Its header never written: torn; its header damaged with the trailer intact: damaged.
        let mut zeroed = seg.clone();
        zeroed[hl + f1.len()..hl + f1.len() + FRAME_HEADER].fill(0);
        assert_eq!(
            scan_segment(&zeroed, hl, 5, 1).unwrap().torn_bytes,
            f2.len()
        );
        let mut flipped = seg.clone();
        flipped[hl + f1.len() + 5] ^= 0x40;
        assert!(matches!(
            scan_segment(&flipped, hl, 5, 1).unwrap_err(),
            FormatError::Damaged {
                reason: "a frame written whole has a damaged header",
                ..
            }
        ));
    }

    #[test]
    fn snapshot_round_trip() {
        let b = encode_snapshot(b"me", 42, b"state");
        assert_eq!(parse_snapshot(&b).unwrap(), (&b"me"[..], 42, &b"state"[..]));
        for cut in 0..b.len() {
            assert!(parse_snapshot(&b[..cut]).is_err());
        }
    }
}
