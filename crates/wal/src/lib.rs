//! The write-ahead log of a GPT-range owner: every update is written here, and made durable,
//! before it is acknowledged; a node that was killed recovers its RIB from it.
//!
//! A log is a directory. It holds segment files (`{base_lsn:020}.wal`) of length-prefixed
//! records framed per commit and checksummed, an optional `snapshot` (the caller's state up to
//! some LSN, written atomically by [`Wal::checkpoint`]), and a `LOCK` file that keeps a second
//! process out. Records are opaque bytes; each gets a log sequence number ([`Lsn`]), 1, 2, 3, ...
//! with no gaps, across segments and snapshots.
//!
//! ```
//! use sb_wal::{Wal, WalOptions};
//!
//! let dir = tempfile::tempdir()?;
//! let opts = WalOptions { identity: b"cluster 7 node 2".to_vec(), ..WalOptions::default() };
//! let (mut wal, recovery) = Wal::open(dir.path(), &opts)?;
//! assert!(recovery.records.is_empty() && recovery.snapshot.is_none());
//!
//! // Group commit: append a batch, then one write and one fdatasync for all of it.
//! assert_eq!(wal.append(b"insert a")?, 1);
//! assert_eq!(wal.append(b"insert b")?, 2);
//! assert_eq!(wal.durable_lsn(), 0);
//! assert_eq!(wal.commit()?, 2); // now 1 and 2 may be acknowledged
//!
//! // A checkpoint replaces everything so far by the caller's snapshot; the log starts afresh.
//! wal.checkpoint(b"state after 2")?;
//! wal.append(b"delete a")?;
//! wal.commit()?;
//! drop(wal);
//!
//! let (wal, recovery) = Wal::open(dir.path(), &opts)?;
//! let snap = recovery.snapshot.as_ref().unwrap();
//! assert_eq!((snap.lsn, snap.data.as_slice()), (2, &b"state after 2"[..]));
//! let replay: Vec<(u64, &[u8])> = recovery.iter().collect();
//! assert_eq!(replay, vec![(3, &b"delete a"[..])]);
//! assert_eq!(wal.last_lsn(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Durability and recovery
//!
//! [`Wal::append`] only buffers. [`Wal::commit`] writes everything appended since the last
//! commit as one *frame* with one `pwrite`, then calls `fdatasync` ([`SyncMode::Data`]); when it
//! returns, every record up to the returned LSN survives a process kill (tests/crash.rs kills a
//! writer with SIGKILL at random moments) and a power loss (as far as the disk honours
//! flushes; argued from the write order, not tested). A frame is all or nothing, however large
//! (up to [`MAX_BATCH_BYTES`], the default batch limit): a node's first start commits its whole
//! initial state at once, so a crash during it leaves nothing of it rather than half.
//!
//! ## A torn tail or damage: which is which
//! Every frame is checksummed twice (header, body) and ends with a *trailer*, a commit marker
//! that repeats the body length and the header's checksum under its own checksum (the layout
//! is in `format.rs`). The trailer is written with the frame, in the same `pwrite` and the same
//! `fdatasync`. The next commit's frame is written only after this commit's `fdatasync`
//! returned. So:
//! - A frame with an intact frame after it was acknowledged; if it does not check, that is
//!   damage.
//! - The last frame is *torn* (its commit never returned, nothing of it was acknowledged) when
//!   its bytes are not all there: the file ends before the end its header names, or fewer than
//!   a header's bytes remain, or the pages that hold its header or its trailer read as zeros
//!   (the file was extended, the data never written). [`Wal::open`] drops it, truncates the
//!   file to the last intact frame and reports the bytes in [`Recovery::torn_tail_bytes`].
//! - The last frame is *damaged* when it is all there by length, its trailer written (not all
//!   zeros), and a checksum fails; or when its header fails and an intact trailer after it
//!   points back to it. A bit flipped anywhere in an acknowledged frame is one of these
//!   (tests: every bit position of every byte of every frame). [`Wal::open`] then refuses with
//!   [`WalError::Damaged`], naming the segment, the frame's offset and the last good LSN,
//!   and changes nothing on disk.
//!
//! Why not a separate fsynced high-water mark: it would cost a second `fdatasync` per commit
//! (or leave the last commits between two marks undecided, the very case here). The trailer
//! costs 24 bytes in the same write. What it cannot tell: a crash that left a frame's first
//! and last pages written and a page between them never written (writeback out of file order)
//! is reported as damage, an error the replication layer repairs, never a silent loss; and a
//! device that returns zeros for the header or trailer page of an acknowledged frame is taken
//! for a tear (a zeroed page is a page never written, to this format).
//!
//! Damage elsewhere (a bad snapshot, a segment header that does not check, LSNs that skip) is
//! [`WalError::Corrupt`] or [`WalError::Gap`]. Nothing is ever skipped or truncated but a torn
//! tail. The repair of [`WalError::Damaged`] is explicit: [`Wal::discard_after`] with its
//! `last_good_lsn` removes the damaged commit and everything after it, for a caller that gets
//! those records again from a replica.
//!
//! ## A lost log
//! A directory with neither segment nor snapshot opens as an empty log with
//! [`Recovery::created`] set (or, with [`WalOptions::create`] off, [`WalError::NotFound`]).
//! A caller that acknowledged records before must read `created` as "my log is lost" and
//! rejoin as a new replica; the log cannot know what a wiped directory held.
//!
//! Every frame checksum (xxh3-64) is seeded with a random salt of its segment, so a frame
//! copied from another segment or log does not check. After an I/O error in a commit (the
//! write or the `fdatasync`) or a checkpoint the `Wal` is poisoned (every call returns
//! [`WalError::Poisoned`]) and the commit's records are not durable: whether the data reached
//! the disk is unknown after a failed fsync, so the caller stops acknowledging and reopens
//! (that is PostgreSQL's lesson of 2018). The failed frame is truncated away on a best-effort
//! basis; its records, never acknowledged, may still come back at the next open.
//!
//! # Compaction: bounded restart
//! [`Wal::checkpoint`] saves the caller's state as an atomic snapshot and starts a new
//! segment; the older segments are deleted. [`WalOptions::checkpoint_records`] (K, default
//! 1 048 576) sets when [`Wal::checkpoint_due`] says a checkpoint is due. A caller that checks
//! it after each commit and checkpoints when it is due replays at most K - 1 records at a
//! restart (K - 1 plus the records of one commit if it crashed between that commit and the
//! checkpoint), on top of loading one snapshot (tests/faults.rs checks the bound against a
//! `HashMap` oracle over random operations, crashes and restarts). The log's bytes on disk are
//! bounded the same way.
//!
//! A large snapshot takes a while to write and flush. [`Wal::begin_checkpoint`],
//! [`CheckpointWriter::write`] and [`Wal::finish_checkpoint`] split [`Wal::checkpoint`] so that
//! appends and commits go on meanwhile: the first commits what is pending and starts a new
//! segment, the second writes and flushes the snapshot to a temporary file (on any thread),
//! the third renames it into place and removes the segments it covers. The records it stands
//! for stay committed in the old segments until then, so a crash at any step loses nothing
//! acknowledged (tests/recovery.rs opens the log as a crash at each step leaves it).

//! # Group commit in a driver
//!
//! The control plane is a sans-IO state machine; it does not call the log. When it accepts
//! updates it emits "persist these records" and holds their acknowledgements. The node's driver
//! loop, once per iteration: feeds every message that arrived to the state machine, appends
//! every record it asked to persist ([`Wal::append`]), calls [`Wal::commit`] once, and tells
//! the state machine the returned LSN is durable, which releases the acknowledgements up to
//! it. Many concurrent requests thus share one fdatasync: the batch is whatever arrived while
//! the previous fsync ran, so the batch grows with the load and the fsync rate stays bounded
//! (the numbers below).
//!
//! # Cost model
//!
//! Per record: its payload plus 4 bytes; per commit: a 40-byte frame header and a 24-byte
//! trailer, one `pwrite` and one `fdatasync`. Measured on the project's 2-core shared VM (ext4 on a virtio disk; a commit
//! of one record takes 0.18 ms at the median, which suggests the host's cache answers the
//! flush: expect fewer commits/s on a disk that really writes), 64-byte records, 1-second runs, medians of 3, with
//! `cargo run --release -p sb-wal --example wal_bench`:
//!
//! | records per commit | commits/s | records/s | commit p50 / p99 |
//! |---|---|---|---|
//! | 1 | 3 449 | 3 449 | 183 / 599 us |
//! | 16 | 3 534 | 56 538 | 147 / 3 312 us |
//! | 256 | 2 246 | 575 087 | 297 / 4 380 us |
//!
//! (Without any flush, [`SyncMode::Never`]: 0.94 M commits/s of 1 record, 10.3 M records/s in
//! commits of 256.) So the fsync rate, a few thousand per second, bounds an owner that
//! commits each update alone; group commit of a few hundred updates per fsync gives several
//! hundred thousand durable updates per second. The runs were noisy (records/s of the three
//! runs at 256: 459 K, 718 K, 575 K).
//!
//! [`Wal::open`] reads every segment whole into memory (the log is bounded by checkpoints) and
//! checks each frame once; a frame that does not check costs a scan of the rest of its segment
//! for an intact frame or trailer (to tell a torn tail from damage).

mod format;
mod lock;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use format::{
    FormatError, SegmentHeader, FRAME_HEADER, FRAME_TRAILER, MAX_IDENTITY, RECORD_PREFIX,
};

/// A log sequence number: records are numbered 1, 2, 3, ...; 0 means "none yet".
pub type Lsn = u64;

/// The largest frame body (one commit's records with their prefixes) the format can hold.
pub const MAX_BATCH_BYTES: usize = u32::MAX as usize - FRAME_HEADER - FRAME_TRAILER;

const SNAPSHOT_FILE: &str = "snapshot";
/// The pending buffer's capacity kept after a commit (bytes).
const PENDING_KEEP: usize = 8 << 20;
const LOCK_FILE: &str = "LOCK";
const SEGMENT_EXT: &str = "wal";
const TMP_EXT: &str = "tmp";

/// When data is flushed to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `fdatasync` on every commit, and `fsync` of the directory after a file is created,
    /// renamed or removed. Survives power loss.
    #[default]
    Data,
    /// No flushing at all: a commit survives the process being killed (the data is in the
    /// kernel's page cache) but not a power loss. For tests and as a benchmark baseline.
    Never,
}

/// How [`Wal::open`] opens a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// Opaque bytes written into every segment and snapshot header (at most 4096), for
    /// example a cluster id and node number; opening a log written with other bytes fails with
    /// [`WalError::IdentityMismatch`], so a node never replays another node's log.
    pub identity: Vec<u8>,
    /// Flushing; default [`SyncMode::Data`].
    pub sync: SyncMode,
    /// Create the directory and an empty log if there is none (default `true`).
    pub create: bool,
    /// The most bytes one commit may hold (records plus 4 bytes each); [`Wal::append`] refuses a
    /// record that would take the pending batch past it. Default and at most
    /// [`MAX_BATCH_BYTES`] (4 GiB less 64 bytes): a commit is all or nothing, so a caller that
    /// must make a batch durable atomically (a first start's initial state) appends it whole
    /// and commits once; a caller that commits early on [`WalError::BatchFull`] gives up that
    /// atomicity.
    pub max_batch_bytes: usize,
    /// The records after the last snapshot past which [`Wal::checkpoint_due`] says a
    /// checkpoint is due (default 1 048 576; 0: never). A caller that checkpoints when it is
    /// due bounds what a restart replays: see the crate documentation.
    pub checkpoint_records: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            identity: Vec::new(),
            sync: SyncMode::Data,
            create: true,
            max_batch_bytes: MAX_BATCH_BYTES,
            checkpoint_records: 1 << 20,
        }
    }
}

/// The caller's state as of some LSN, saved by [`Wal::checkpoint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The snapshot holds the effect of every record up to this LSN.
    pub lsn: Lsn,
    /// The bytes given to [`Wal::checkpoint`].
    pub data: Vec<u8>,
}

/// A checkpoint begun by [`Wal::begin_checkpoint`], to be written with
/// [`CheckpointWriter::write`]: it holds no reference to the log, so it may go to another
/// thread while the log takes appends.
#[derive(Debug)]
pub struct CheckpointWriter {
    dir: PathBuf,
    identity: Vec<u8>,
    sync: SyncMode,
    lsn: Lsn,
}

impl CheckpointWriter {
    /// The snapshot stands for every record up to this LSN.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Writes `snapshot` (the caller's state after every record up to [`Self::lsn`]) to a
    /// temporary file in the log's directory and flushes it; [`Wal::finish_checkpoint`]
    /// installs it. A crash before that leaves a temporary file that [`Wal::open`] removes.
    ///
    /// # Errors
    /// [`WalError::Io`]: the log is unchanged (the temporary file is removed, best effort).
    pub fn write(self, snapshot: &[u8]) -> Result<WrittenCheckpoint, WalError> {
        self.write_with(snapshot.len() as u64, |sink| sink.write_all(snapshot))
    }

    /// [`write`](Self::write) with the snapshot's `data_len` bytes written by `fill` into the
    /// file as they are made, so that a caller whose state is in pieces holds no second copy
    /// of it: each byte is checksummed on its way, and with [`SyncMode::Data`] every
    /// [`SNAPSHOT_SYNC_BYTES`] are flushed to the disk as they go (a large snapshot does not
    /// pile up in the page cache for one flush at the end, which the log's own commits, on
    /// the same disk, would wait behind). The file is the same as `write`'s of the same bytes.
    ///
    /// # Errors
    /// [`WalError::Io`] when writing fails, `fill` fails, or it wrote other than `data_len`
    /// bytes: the log is unchanged (the temporary file is removed, best effort).
    pub fn write_with(
        self,
        data_len: u64,
        fill: impl FnOnce(&mut SnapshotSink) -> io::Result<()>,
    ) -> Result<WrittenCheckpoint, WalError> {
        let tmp = self.dir.join(format!("{SNAPSHOT_FILE}.{TMP_EXT}"));
        let header = format::snapshot_header(&self.identity, self.lsn, data_len);
        let r = (|| {
            let f = File::create(&tmp).map_err(io_err("create", &tmp))?;
            let mut sink = SnapshotSink {
                out: io::BufWriter::with_capacity(1 << 20, f),
                hash: xxhash_rust::xxh3::Xxh3::new(),
                written: 0,
                unsynced: 0,
                sync: self.sync,
            };
            sink.write_all(&header).map_err(io_err("write", &tmp))?;
            fill(&mut sink).map_err(io_err("write", &tmp))?;
            let data = sink.written - header.len() as u64;
            if data != data_len {
                return Err(WalError::Io {
                    op: "write",
                    path: tmp.clone(),
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "the snapshot's data was {data} bytes, not the {data_len} announced"
                        ),
                    ),
                });
            }
            let sum = sink.hash.digest();
            let mut out = sink.out;
            out.write_all(&sum.to_le_bytes())
                .map_err(io_err("write", &tmp))?;
            let f = out
                .into_inner()
                .map_err(|e| e.into_error())
                .map_err(io_err("write", &tmp))?;
            if self.sync == SyncMode::Data {
                f.sync_all().map_err(io_err("fsync", &tmp))?;
            }
            Ok(header.len() as u64 + data_len + 8)
        })();
        match r {
            Ok(bytes) => Ok(WrittenCheckpoint {
                dir: self.dir,
                tmp,
                lsn: self.lsn,
                bytes,
            }),
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }
}

/// Bytes of a snapshot written between two flushes to the disk while
/// [`CheckpointWriter::write_with`] writes it ([`SyncMode::Data`]).
pub const SNAPSHOT_SYNC_BYTES: u64 = 32 << 20;

/// Where [`CheckpointWriter::write_with`]'s caller writes a snapshot's data (buffered; each
/// byte checksummed on its way to the file).
pub struct SnapshotSink {
    out: io::BufWriter<File>,
    hash: xxhash_rust::xxh3::Xxh3,
    written: u64,
    unsynced: u64,
    sync: SyncMode,
}

impl std::fmt::Debug for SnapshotSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotSink")
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl Write for SnapshotSink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = self.out.write(b)?;
        self.hash.update(&b[..n]);
        self.written += n as u64;
        self.unsynced += n as u64;
        if self.unsynced >= SNAPSHOT_SYNC_BYTES && self.sync == SyncMode::Data {
            self.out.flush()?;
            self.out.get_ref().sync_data()?;
            self.unsynced = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// A snapshot written and flushed by [`CheckpointWriter::write`], not installed yet.
#[derive(Debug)]
pub struct WrittenCheckpoint {
    dir: PathBuf,
    tmp: PathBuf,
    lsn: Lsn,
    bytes: u64,
}

impl WrittenCheckpoint {
    /// The snapshot stands for every record up to this LSN.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }
}

/// What [`Wal::open`] found: the state to rebuild, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Recovery {
    /// The last snapshot, if a checkpoint was ever taken.
    pub snapshot: Option<Snapshot>,
    /// The LSN of `records[0]`: the snapshot's LSN plus one, or 1.
    pub first_lsn: Lsn,
    /// Every intact record after the snapshot, in order (LSNs `first_lsn`, `first_lsn + 1`, ...).
    pub records: Vec<Vec<u8>>,
    /// The LSN of the last record recovered (or of the snapshot); 0 for an empty log. The next
    /// append gets `last_lsn + 1`.
    pub last_lsn: Lsn,
    /// Bytes of a torn last commit that were dropped (and truncated away); 0 if none. Its
    /// records were never acknowledged, since their commit did not return.
    pub torn_tail_bytes: u64,
    /// Segment files read.
    pub segments: usize,
    /// The directory held no log (no segment and no snapshot) and an empty one was created.
    /// A caller that expected a log here (it had acknowledged records before) has lost it: it
    /// must not take the empty log for its state, but rejoin as a new replica.
    pub created: bool,
}

impl Recovery {
    /// The records with their LSNs.
    pub fn iter(&self) -> impl Iterator<Item = (Lsn, &[u8])> + '_ {
        self.records
            .iter()
            .enumerate()
            .map(|(i, r)| (self.first_lsn + i as u64, r.as_slice()))
    }
}

/// Sizes and counters, for `cluster status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalStats {
    /// Bytes of the segment files (headers and frames).
    pub log_bytes: u64,
    /// Bytes of the snapshot file (0 if none).
    pub snapshot_bytes: u64,
    /// The last LSN appended.
    pub last_lsn: Lsn,
    /// The last LSN made durable.
    pub durable_lsn: Lsn,
    /// Records appended and not committed.
    pub pending_records: u64,
    /// Commits that wrote a frame since open.
    pub commits: u64,
    /// Checkpoints since open.
    pub checkpoints: u64,
}

/// Why the log refused.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A file is damaged somewhere other than a torn last commit: acknowledged records may be
    /// lost, so nothing is opened.
    #[error("{path} is damaged at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damage.
        offset: u64,
        /// What was wrong.
        reason: &'static str,
    },
    /// Records are missing between the snapshot and the segments, or between two segments.
    #[error(
        "log {dir} misses records: expected LSN {expected}, the next segment starts at {found}"
    )]
    Gap {
        /// The log directory.
        dir: PathBuf,
        /// The LSN that should come next.
        expected: Lsn,
        /// The LSN found instead.
        found: Lsn,
    },
    /// A file was written by a version of this format that this code does not read.
    #[error("{path}: format version {version} is not supported")]
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u16,
    },
    /// The log was written with other identity bytes (another node's or cluster's log).
    #[error("{path} belongs to another identity")]
    IdentityMismatch {
        /// The file.
        path: PathBuf,
    },
    /// Another process (or another `Wal` in this one) has the log open.
    #[error("log {0} is locked by another process")]
    Locked(PathBuf),
    /// The directory does not exist and [`WalOptions::create`] is false.
    #[error("no log at {0}")]
    NotFound(PathBuf),
    /// Options out of range.
    #[error("bad options: {0}")]
    BadOptions(&'static str),
    /// The record would take the pending batch past [`WalOptions::max_batch_bytes`]; commit
    /// first (or the record alone is too big).
    #[error(
        "a record of {len} bytes does not fit the pending batch (limit {max} bytes): commit first"
    )]
    BatchFull {
        /// The record's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An earlier commit or checkpoint failed; the log's state on disk is unknown. Reopen.
    #[error("an earlier write or sync failed; reopen the log")]
    Poisoned,
    /// A commit that was written whole, hence acknowledged, is damaged (a flipped bit, a bad
    /// sector): its records cannot be read. Nothing is opened and nothing is truncated; the
    /// records up to `last_good_lsn` are intact. Repair: get the records after it from a
    /// replica (see [`Wal::discard_after`]).
    #[error(
        "{path} is damaged at byte {offset}: {reason}; acknowledged records after LSN {last_good_lsn} cannot be read"
    )]
    Damaged {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the damaged frame.
        offset: u64,
        /// The last LSN before the damage (0: none).
        last_good_lsn: Lsn,
        /// What was wrong.
        reason: &'static str,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> WalError + 'a {
    move |source| WalError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn format_err(path: &Path, e: FormatError) -> WalError {
    match e {
        FormatError::Corrupt { offset, reason } => WalError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason,
        },
        FormatError::Version(version) => WalError::Version {
            path: path.to_path_buf(),
            version,
        },
        FormatError::Damaged {
            offset,
            last_good_lsn,
            reason,
        } => WalError::Damaged {
            path: path.to_path_buf(),
            offset,
            last_good_lsn,
            reason,
        },
    }
}

/// An open log; see the crate documentation.
#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    _lock: File,
    /// The segment appended to, its path, salt and length.
    active: File,
    active_path: PathBuf,
    salt: u64,
    active_len: u64,
    /// Bytes of the other segments still needed (none, unless the files were put together by
    /// hand: a checkpoint leaves one segment).
    other_bytes: u64,
    snapshot_bytes: u64,
    /// The pending frame: a 40-byte header slot, then the records.
    pending: Vec<u8>,
    pending_count: u32,
    last_lsn: Lsn,
    durable_lsn: Lsn,
    /// The LSN of the last snapshot (0: none).
    snapshot_lsn: Lsn,
    commits: u64,
    checkpoints: u64,
    poisoned: bool,
    /// Tests: the next fdatasync of the active segment fails.
    #[cfg(test)]
    fail_sync: bool,
}

fn segment_name(base: Lsn) -> String {
    format!("{base:020}.{SEGMENT_EXT}")
}

/// The base LSN in a segment file name, if it is one.
fn parse_segment_name(name: &str) -> Option<Lsn> {
    let stem = name.strip_suffix(&format!(".{SEGMENT_EXT}"))?;
    if stem.len() != 20 || !stem.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

fn sync_dir(dir: &Path, sync: SyncMode) -> Result<(), WalError> {
    if sync == SyncMode::Never {
        return Ok(());
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync directory", dir))
}

/// Writes `bytes` to `dir/name` atomically: a temporary file, flushed, renamed over the name,
/// and the directory flushed.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8], sync: SyncMode) -> Result<(), WalError> {
    let tmp = dir.join(format!("{name}.{TMP_EXT}"));
    let path = dir.join(name);
    let mut f = File::create(&tmp).map_err(io_err("create", &tmp))?;
    f.write_all(bytes).map_err(io_err("write", &tmp))?;
    if sync == SyncMode::Data {
        f.sync_all().map_err(io_err("fsync", &tmp))?;
    }
    drop(f);
    fs::rename(&tmp, &path).map_err(io_err("rename", &tmp))?;
    sync_dir(dir, sync)
}

/// A segment read at open.
struct ReadSegment {
    path: PathBuf,
    base: Lsn,
    salt: u64,
    records: Vec<Vec<u8>>,
    valid_len: u64,
    torn: u64,
}

impl ReadSegment {
    /// The LSN after its last record.
    fn end(&self) -> Lsn {
        self.base + self.records.len() as u64
    }
}

fn read_segment(path: &Path, base: Lsn, identity: &[u8]) -> Result<ReadSegment, WalError> {
    let bytes = fs::read(path).map_err(io_err("read", path))?;
    let (h, hl) = SegmentHeader::parse(&bytes).map_err(|e| format_err(path, e))?;
    if h.identity != identity {
        return Err(WalError::IdentityMismatch {
            path: path.to_path_buf(),
        });
    }
    if h.base_lsn != base {
        return Err(WalError::Corrupt {
            path: path.to_path_buf(),
            offset: 24,
            reason: "base LSN differs from the file name",
        });
    }
    let scan = format::scan_segment(&bytes, hl, h.salt, base).map_err(|e| format_err(path, e))?;
    Ok(ReadSegment {
        path: path.to_path_buf(),
        base,
        salt: h.salt,
        records: scan.records.iter().map(|r| r.to_vec()).collect(),
        valid_len: scan.valid_len as u64,
        torn: scan.torn_bytes as u64,
    })
}

impl Wal {
    /// Opens (or, with [`WalOptions::create`], creates) the log in directory `dir`, and returns
    /// it with everything to replay: the snapshot and the intact records after it.
    ///
    /// A torn last commit is dropped and truncated away ([`Recovery::torn_tail_bytes`]); a
    /// damaged one is an error (see the crate documentation for which is which).
    /// Segments wholly covered by the snapshot (left by a checkpoint that was interrupted) are
    /// removed. Leftover temporary files (`*.tmp`) are removed. The active segment is flushed,
    /// so what is returned is durable even if the previous process died before its fsync.
    /// Files with other names are left alone.
    ///
    /// # Errors
    /// [`WalError::Damaged`] for a damaged commit, [`WalError::Corrupt`] or [`WalError::Gap`]
    /// for other damage, [`WalError::IdentityMismatch`], [`WalError::Version`], [`WalError::Locked`],
    /// [`WalError::NotFound`], [`WalError::BadOptions`], [`WalError::Io`].
    pub fn open(dir: impl AsRef<Path>, opts: &WalOptions) -> Result<(Wal, Recovery), WalError> {
        let dir = dir.as_ref().to_path_buf();
        if opts.identity.len() > MAX_IDENTITY {
            return Err(WalError::BadOptions("identity longer than 4096 bytes"));
        }
        if opts.max_batch_bytes == 0 || opts.max_batch_bytes > MAX_BATCH_BYTES {
            return Err(WalError::BadOptions(
                "max_batch_bytes must be 1..=MAX_BATCH_BYTES",
            ));
        }
        if !dir.is_dir() {
            if !opts.create {
                return Err(WalError::NotFound(dir));
            }
            fs::create_dir_all(&dir).map_err(io_err("create directory", &dir))?;
            if let Some(parent) = dir.parent() {
                if !parent.as_os_str().is_empty() {
                    sync_dir(parent, opts.sync)?;
                }
            }
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err("open", &lock_path))?;
        if !lock::try_lock(&lock).map_err(io_err("lock", &lock_path))? {
            return Err(WalError::Locked(dir));
        }

        // What is there.
        let mut segments = Vec::new();
        let mut tmps = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err("list", &dir))? {
            let entry = entry.map_err(io_err("list", &dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(base) = parse_segment_name(name) {
                segments.push(base);
            } else if name.ends_with(&format!(".{TMP_EXT}")) {
                tmps.push(entry.path());
            }
        }
        segments.sort_unstable();
        for t in &tmps {
            fs::remove_file(t).map_err(io_err("remove", t))?;
        }

        // The snapshot.
        let snap_path = dir.join(SNAPSHOT_FILE);
        let (snapshot, snapshot_bytes) = match fs::read(&snap_path) {
            Ok(mut bytes) => {
                let file_len = bytes.len() as u64;
                let (id, lsn, data) =
                    format::parse_snapshot(&bytes).map_err(|e| format_err(&snap_path, e))?;
                if id != opts.identity.as_slice() {
                    return Err(WalError::IdentityMismatch { path: snap_path });
                }
                // The data where it was read, its header and checksum cut off: no second copy
                // of a snapshot of gigabytes.
                let (at, len) = (data.as_ptr() as usize - bytes.as_ptr() as usize, data.len());
                bytes.truncate(at + len);
                bytes.drain(..at);
                (Some(Snapshot { lsn, data: bytes }), file_len)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, 0),
            Err(e) => return Err(io_err("read", &snap_path)(e)),
        };
        let snap_lsn = snapshot.as_ref().map_or(0, |s| s.lsn);

        // The segments, in order. One that a later segment starting at or before the
        // snapshot's next LSN follows is wholly covered by the snapshot (an interrupted
        // checkpoint left it): removed below without being read, so damage in it does not
        // matter.
        let mut read = Vec::with_capacity(segments.len());
        let mut obsolete = Vec::new();
        for (i, &base) in segments.iter().enumerate() {
            let path = dir.join(segment_name(base));
            if segments.get(i + 1).is_some_and(|&b| b <= snap_lsn + 1) {
                obsolete.push(path);
                continue;
            }
            read.push(read_segment(&path, base, &opts.identity)?);
        }
        let created = segments.is_empty() && snapshot.is_none();

        // Chain them from the snapshot: skip what it covers, refuse gaps.
        let mut next = snap_lsn + 1;
        let mut records = Vec::new();
        let mut torn_tail_bytes = 0;
        let mut other_bytes = 0;
        let n_read = read.len();
        let mut active = None;
        for (i, seg) in read.into_iter().enumerate() {
            let is_last = i + 1 == n_read;
            let end = seg.end();
            if end <= next && !(is_last && end == next) {
                // Wholly covered by the snapshot: left by an interrupted checkpoint.
                obsolete.push(seg.path);
                continue;
            }
            if seg.base > next {
                return Err(WalError::Gap {
                    dir,
                    expected: next,
                    found: seg.base,
                });
            }
            if seg.torn > 0 && !is_last {
                // Only the last commit can be torn, and that is in the last segment: a later
                // segment was created after this one's last commit returned.
                return Err(WalError::Damaged {
                    path: seg.path,
                    offset: seg.valid_len,
                    last_good_lsn: end - 1,
                    reason: "damaged frame in a segment that is not the last",
                });
            }
            let skip = (next - seg.base) as usize;
            next = end;
            torn_tail_bytes = seg.torn;
            records.extend(seg.records.into_iter().skip(skip));
            if is_last {
                active = Some((seg.path, seg.salt, seg.valid_len, seg.torn));
            } else {
                // Not the last and not covered: it stays until the next checkpoint.
                other_bytes += seg.valid_len;
            }
        }
        let last_lsn = next - 1;

        // The active segment: the last one if the log ends in it, else a new one.
        let (active_file, active_path, salt, active_len) = match active {
            Some((path, salt, valid_len, torn)) => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(io_err("open", &path))?;
                if torn > 0 {
                    f.set_len(valid_len).map_err(io_err("truncate", &path))?;
                }
                if opts.sync == SyncMode::Data {
                    f.sync_all().map_err(io_err("fsync", &path))?;
                }
                (f, path, salt, valid_len)
            }
            None => Self::create_segment(&dir, next, &opts.identity, opts.sync)?,
        };
        for p in &obsolete {
            fs::remove_file(p).map_err(io_err("remove", p))?;
        }
        if !obsolete.is_empty() || !tmps.is_empty() {
            sync_dir(&dir, opts.sync)?;
        }

        let wal = Wal {
            dir,
            opts: opts.clone(),
            _lock: lock,
            active: active_file,
            active_path,
            salt,
            active_len,
            other_bytes,
            snapshot_bytes,
            pending: vec![0; FRAME_HEADER],
            pending_count: 0,
            last_lsn,
            durable_lsn: last_lsn,
            snapshot_lsn: snap_lsn,
            commits: 0,
            checkpoints: 0,
            poisoned: false,
            #[cfg(test)]
            fail_sync: false,
        };
        let recovery = Recovery {
            snapshot,
            first_lsn: snap_lsn + 1,
            records,
            last_lsn,
            torn_tail_bytes,
            segments: n_read,
            created,
        };
        Ok((wal, recovery))
    }

    /// Creates an empty segment starting at `base` (atomically) and opens it.
    fn create_segment(
        dir: &Path,
        base: Lsn,
        identity: &[u8],
        sync: SyncMode,
    ) -> Result<(File, PathBuf, u64, u64), WalError> {
        let salt = sb_common::random_seed();
        let header = SegmentHeader {
            salt,
            base_lsn: base,
            identity: identity.to_vec(),
        }
        .encode();
        let name = segment_name(base);
        write_atomic(dir, &name, &header, sync)?;
        let path = dir.join(name);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io_err("open", &path))?;
        Ok((f, path, salt, header.len() as u64))
    }

    /// Buffers a record and returns its LSN. Not durable until [`Wal::commit`] returns an LSN at
    /// least this one.
    ///
    /// # Errors
    /// [`WalError::BatchFull`] if the record does not fit the pending batch
    /// ([`WalOptions::max_batch_bytes`]): commit, then append it again; [`WalError::Poisoned`].
    pub fn append(&mut self, payload: &[u8]) -> Result<Lsn, WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        let body = self.pending.len() - FRAME_HEADER;
        let max = self.opts.max_batch_bytes;
        if payload.len() > max.saturating_sub(RECORD_PREFIX).saturating_sub(body)
            || self.pending_count == u32::MAX
        {
            return Err(WalError::BatchFull {
                len: payload.len(),
                max,
            });
        }
        self.pending
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.pending.extend_from_slice(payload);
        self.pending_count += 1;
        self.last_lsn += 1;
        Ok(self.last_lsn)
    }

    /// Makes every appended record durable: one write of one frame and one `fdatasync` (with
    /// [`SyncMode::Data`]). Returns the durable LSN (unchanged, with no I/O, if nothing was
    /// pending).
    ///
    /// # Errors
    /// [`WalError::Io`] (and the log is poisoned), [`WalError::Poisoned`].
    pub fn commit(&mut self) -> Result<Lsn, WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        if self.pending_count == 0 {
            return Ok(self.durable_lsn);
        }
        let first = self.durable_lsn + 1;
        format::seal_frame(&mut self.pending, first, self.pending_count, self.salt);
        let result = self
            .active
            .write_all_at(&self.pending, self.active_len)
            .map_err(io_err("append to", &self.active_path))
            .and_then(|()| match self.opts.sync {
                SyncMode::Data => self.sync_active(),
                SyncMode::Never => Ok(()),
            });
        if let Err(e) = result {
            self.poisoned = true;
            // Best effort: take the frame back out, so that records never acknowledged are
            // less likely to come back at the next open (they may all the same: after a
            // failed fdatasync what the disk holds is unknown).
            let _ = self.active.set_len(self.active_len);
            return Err(e);
        }
        self.active_len += self.pending.len() as u64;
        self.pending.truncate(FRAME_HEADER);
        if self.pending.capacity() > PENDING_KEEP {
            // A first start's huge batch: do not hold its buffer for the log's lifetime.
            self.pending.shrink_to(PENDING_KEEP);
        }
        self.pending_count = 0;
        self.durable_lsn = self.last_lsn;
        self.commits += 1;
        Ok(self.durable_lsn)
    }

    fn sync_active(&mut self) -> Result<(), WalError> {
        #[cfg(test)]
        if self.fail_sync {
            return Err(io_err("fdatasync", &self.active_path)(io::Error::other(
                "injected fdatasync failure",
            )));
        }
        self.active
            .sync_data()
            .map_err(io_err("fdatasync", &self.active_path))
    }

    /// Replaces the log so far by `snapshot`: the caller's state including every record
    /// appended (committed or not; pending ones become durable through the snapshot). Writes
    /// the snapshot file atomically (temporary file, fsync, rename, fsync of the directory),
    /// starts a new segment and removes the old ones. A crash at any step leaves a log that
    /// opens to the same state. Returns the snapshot's LSN.
    ///
    /// # Errors
    /// [`WalError::Io`] (and the log is poisoned), [`WalError::Poisoned`].
    pub fn checkpoint(&mut self, snapshot: &[u8]) -> Result<Lsn, WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        let r = self.checkpoint_inner(snapshot);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    fn checkpoint_inner(&mut self, snapshot: &[u8]) -> Result<Lsn, WalError> {
        let lsn = self.last_lsn;
        let written = self.writer(lsn).write(snapshot)?;
        self.install_snapshot(&written)?;
        // From here the snapshot is the truth up to `lsn`.
        self.pending.truncate(FRAME_HEADER);
        self.pending_count = 0;
        self.durable_lsn = lsn;
        let old = self.active_path.clone();
        let (f, path, salt, len) =
            Self::create_segment(&self.dir, lsn + 1, &self.opts.identity, self.opts.sync)?;
        self.active = f;
        self.salt = salt;
        self.active_len = len;
        self.active_path = path;
        self.other_bytes = 0;
        // Remove every other segment (older ones too, if an earlier removal was interrupted).
        let mut removed = false;
        for entry in fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))? {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let p = entry.path();
            let is_segment = entry
                .file_name()
                .to_str()
                .and_then(parse_segment_name)
                .is_some();
            if is_segment && p != self.active_path {
                fs::remove_file(&p).map_err(io_err("remove", &p))?;
                removed = true;
            }
        }
        if removed || old != self.active_path {
            sync_dir(&self.dir, self.opts.sync)?;
        }
        self.checkpoints += 1;
        Ok(lsn)
    }

    /// Begins a checkpoint that is written while the log goes on: the other half of
    /// [`Wal::checkpoint`], for a caller whose appends must not wait for a large snapshot's
    /// write and flush. Commits what is pending, then starts a new segment (unless the
    /// active one holds no record yet), so the returned [`CheckpointWriter`] stands for every
    /// record up to [`CheckpointWriter::lsn`], the last one appended. The caller writes the
    /// snapshot with [`CheckpointWriter::write`] (on any thread; this log takes appends and
    /// commits meanwhile, into the new segment), then installs it with
    /// [`Wal::finish_checkpoint`]. Nothing acknowledged depends on the snapshot: the records
    /// it stands for are committed in the old segments, which stay until it is installed. A
    /// crash at any step opens to the same state (the old snapshot and the old segments, or
    /// the new snapshot; then the new segment). One checkpoint at a time: a second
    /// `begin_checkpoint` before the first is finished or dropped is the caller's error (the
    /// later one to finish would be installed over a newer snapshot: refused, see
    /// [`Wal::finish_checkpoint`]).
    ///
    /// # Errors
    /// [`WalError::Io`] (and the log is poisoned), [`WalError::Poisoned`].
    pub fn begin_checkpoint(&mut self) -> Result<CheckpointWriter, WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        self.commit()?;
        let lsn = self.last_lsn;
        let r = self.roll_segment(lsn + 1);
        if r.is_err() {
            self.poisoned = true;
        }
        r?;
        Ok(self.writer(lsn))
    }

    /// The writer of a snapshot standing for every record up to `lsn`.
    fn writer(&self, lsn: Lsn) -> CheckpointWriter {
        CheckpointWriter {
            dir: self.dir.clone(),
            identity: self.opts.identity.clone(),
            sync: self.opts.sync,
            lsn,
        }
    }

    /// Makes a segment starting at `base` the active one (keeping the active segment if it
    /// starts there already: it holds no record); the old one counts in `other_bytes`.
    fn roll_segment(&mut self, base: Lsn) -> Result<(), WalError> {
        let active_base = self
            .active_path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_segment_name);
        if active_base == Some(base) {
            return Ok(());
        }
        let (f, path, salt, len) =
            Self::create_segment(&self.dir, base, &self.opts.identity, self.opts.sync)?;
        self.other_bytes += self.active_len;
        self.active = f;
        self.salt = salt;
        self.active_len = len;
        self.active_path = path;
        Ok(())
    }

    /// Installs a snapshot written by [`CheckpointWriter::write`]: renames it over the last
    /// one, flushes the directory and removes the segments it covers (those before the
    /// segment [`Wal::begin_checkpoint`] started). Returns its LSN. Takes a few file-system
    /// operations, not the snapshot's write.
    ///
    /// # Errors
    /// [`WalError::BadOptions`] for a snapshot of another log or one older than the last
    /// installed (nothing changes); [`WalError::Io`] (and the log is poisoned),
    /// [`WalError::Poisoned`].
    pub fn finish_checkpoint(&mut self, written: WrittenCheckpoint) -> Result<Lsn, WalError> {
        if self.poisoned {
            return Err(WalError::Poisoned);
        }
        if written.dir != self.dir {
            return Err(WalError::BadOptions("a checkpoint written for another log"));
        }
        if written.lsn < self.snapshot_lsn || written.lsn > self.last_lsn {
            return Err(WalError::BadOptions(
                "a checkpoint older than the last installed",
            ));
        }
        let r = self.finish_inner(&written);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Puts a written snapshot in place of the last (renamed over it, the directory synced)
    /// and counts it as the log's snapshot.
    fn install_snapshot(&mut self, w: &WrittenCheckpoint) -> Result<(), WalError> {
        fs::rename(&w.tmp, self.dir.join(SNAPSHOT_FILE)).map_err(io_err("rename", &w.tmp))?;
        sync_dir(&self.dir, self.opts.sync)?;
        self.snapshot_bytes = w.bytes;
        self.snapshot_lsn = w.lsn;
        Ok(())
    }

    fn finish_inner(&mut self, w: &WrittenCheckpoint) -> Result<Lsn, WalError> {
        self.install_snapshot(w)?;
        // From here the snapshot is the truth up to `w.lsn`: the segments before the one that
        // starts after it go (a crash before they are gone leaves them covered: `open` removes
        // them).
        let mut other = 0;
        let mut removed = false;
        for entry in fs::read_dir(&self.dir).map_err(io_err("list", &self.dir))? {
            let entry = entry.map_err(io_err("list", &self.dir))?;
            let p = entry.path();
            let Some(base) = entry.file_name().to_str().and_then(parse_segment_name) else {
                continue;
            };
            if p == self.active_path {
                continue;
            }
            if base <= w.lsn {
                fs::remove_file(&p).map_err(io_err("remove", &p))?;
                removed = true;
            } else {
                other += entry.metadata().map_err(io_err("stat", &p))?.len();
            }
        }
        if removed {
            sync_dir(&self.dir, self.opts.sync)?;
        }
        self.other_bytes = other;
        self.checkpoints += 1;
        Ok(w.lsn)
    }

    /// Records appended since the last snapshot (or since the log began): what a restart
    /// would replay once they are committed.
    pub fn records_since_checkpoint(&self) -> u64 {
        self.last_lsn - self.snapshot_lsn
    }

    /// Whether [`WalOptions::checkpoint_records`] records or more were appended since the last
    /// snapshot: the caller should [`Wal::checkpoint`] its state now.
    pub fn checkpoint_due(&self) -> bool {
        self.opts.checkpoint_records > 0
            && self.records_since_checkpoint() >= self.opts.checkpoint_records
    }

    /// The LSN of the last snapshot (0: none).
    pub fn snapshot_lsn(&self) -> Lsn {
        self.snapshot_lsn
    }

    /// Removes every record after `lsn` from the log in `dir` (not open; it is locked while
    /// this runs), cutting at the commit boundary after `lsn`, and returns the bytes removed.
    /// This is the explicit repair of [`WalError::Damaged`] (with its `last_good_lsn`), for a
    /// caller that will get the records after `lsn` again from a replica; or the truncation of
    /// a replica's log whose tail a new leader overrules. Nothing else ever removes a
    /// committed record.
    ///
    /// # Errors
    /// [`WalError::BadOptions`] if `lsn` is not the last LSN of a commit, or is older than the
    /// snapshot; [`WalError::Damaged`] or [`WalError::Corrupt`] for damage at or before
    /// `lsn`; [`WalError::NotFound`], [`WalError::Locked`], [`WalError::IdentityMismatch`],
    /// [`WalError::Version`], [`WalError::Io`].
    pub fn discard_after(
        dir: impl AsRef<Path>,
        opts: &WalOptions,
        lsn: Lsn,
    ) -> Result<u64, WalError> {
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(WalError::NotFound(dir));
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err("open", &lock_path))?;
        if !lock::try_lock(&lock).map_err(io_err("lock", &lock_path))? {
            return Err(WalError::Locked(dir));
        }
        let snap_path = dir.join(SNAPSHOT_FILE);
        match fs::read(&snap_path) {
            Ok(bytes) => {
                let (_, snap_lsn, _) =
                    format::parse_snapshot(&bytes).map_err(|e| format_err(&snap_path, e))?;
                if snap_lsn > lsn {
                    return Err(WalError::BadOptions(
                        "cannot discard records a snapshot already holds",
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("read", &snap_path)(e)),
        }
        let mut segments = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err("list", &dir))? {
            let entry = entry.map_err(io_err("list", &dir))?;
            if let Some(base) = entry.file_name().to_str().and_then(parse_segment_name) {
                segments.push(base);
            }
        }
        segments.sort_unstable();
        let mut removed = 0u64;
        for base in segments {
            let path = dir.join(segment_name(base));
            let bytes = fs::read(&path).map_err(io_err("read", &path))?;
            if base > lsn {
                removed += bytes.len() as u64;
                fs::remove_file(&path).map_err(io_err("remove", &path))?;
                continue;
            }
            let (h, hl) = SegmentHeader::parse(&bytes).map_err(|e| format_err(&path, e))?;
            if h.identity != opts.identity {
                return Err(WalError::IdentityMismatch { path });
            }
            let (mut at, mut next) = (hl, base);
            while at < bytes.len() && next <= lsn {
                let Some(f) = format::parse_frame(&bytes[at..], h.salt) else {
                    return Err(WalError::Damaged {
                        path,
                        offset: at as u64,
                        last_good_lsn: next - 1,
                        reason: "damaged frame at or before the LSN to keep",
                    });
                };
                next += f.records.len() as u64;
                at += f.len;
            }
            if next > lsn + 1 {
                return Err(WalError::BadOptions("the LSN is not the end of a commit"));
            }
            if at == bytes.len() {
                continue; // Nothing after `lsn` in this segment.
            }
            let f = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(io_err("open", &path))?;
            removed += bytes.len() as u64 - at as u64;
            f.set_len(at as u64).map_err(io_err("truncate", &path))?;
            if opts.sync == SyncMode::Data {
                f.sync_all().map_err(io_err("fsync", &path))?;
            }
        }
        sync_dir(&dir, opts.sync)?;
        Ok(removed)
    }

    /// The last LSN appended (0 if none ever).
    pub fn last_lsn(&self) -> Lsn {
        self.last_lsn
    }

    /// The last LSN made durable: records up to it may be acknowledged.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// Records appended and not yet committed.
    pub fn pending_records(&self) -> u64 {
        u64::from(self.pending_count)
    }

    /// Bytes of the log's segment files (what `cluster status` shows as the log size).
    pub fn log_bytes(&self) -> u64 {
        self.active_len + self.other_bytes
    }

    /// Bytes of the snapshot file (0 if none).
    pub fn snapshot_bytes(&self) -> u64 {
        self.snapshot_bytes
    }

    /// Sizes and counters.
    pub fn stats(&self) -> WalStats {
        WalStats {
            log_bytes: self.log_bytes(),
            snapshot_bytes: self.snapshot_bytes,
            last_lsn: self.last_lsn,
            durable_lsn: self.durable_lsn,
            pending_records: self.pending_records(),
            commits: self.commits,
            checkpoints: self.checkpoints,
        }
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Entry points for the cargo-fuzz target (and the proptests that run the same code).
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Writes `data` into the empty directory `dir` as a log (three ways: as a segment file;
    /// after a valid segment header; as a snapshot next to an empty segment) and opens it each
    /// time. Must never panic; whatever opens must reopen to the same recovery and accept an
    /// append.
    pub fn open_bytes(dir: &Path, data: &[u8]) {
        fn clear(dir: &Path) {
            for e in fs::read_dir(dir).expect("list").flatten() {
                fs::remove_file(e.path()).expect("remove");
            }
        }
        let opts = WalOptions {
            identity: b"fuzz".to_vec(),
            sync: SyncMode::Never,
            ..WalOptions::default()
        };
        let seg = dir.join(segment_name(1));
        let snap = dir.join(SNAPSHOT_FILE);
        let header = SegmentHeader {
            salt: 0x5a17,
            base_lsn: 1,
            identity: opts.identity.clone(),
        }
        .encode();
        let mut with_header = header.clone();
        with_header.extend_from_slice(data);
        // A frame with the data as records' bytes and correct checksums, so the record parser is
        // reached.
        let mut framed = header.clone();
        if data.len() > FRAME_HEADER {
            let mut f = data.to_vec();
            let count = u32::from_le_bytes([data[16], data[17], data[18], data[19]]);
            format::seal_frame(&mut f, 1, count, 0x5a17);
            framed.extend_from_slice(&f);
        }
        let cases: [(&[u8], Option<&[u8]>); 4] = [
            (data, None),
            (&with_header, None),
            (&framed, None),
            (&header, Some(data)),
        ];
        for (seg_bytes, snap_bytes) in cases {
            clear(dir);
            fs::write(&seg, seg_bytes).expect("write segment");
            if let Some(s) = snap_bytes {
                fs::write(&snap, s).expect("write snapshot");
            }
            let Ok((wal, rec)) = Wal::open(dir, &opts) else {
                continue;
            };
            drop(wal);
            let (mut wal, rec2) = Wal::open(dir, &opts).expect("reopen");
            assert_eq!(rec2.records, rec.records);
            assert_eq!(rec2.last_lsn, rec.last_lsn);
            assert_eq!(rec2.torn_tail_bytes, 0);
            assert_eq!(wal.append(b"x").expect("append"), rec.last_lsn + 1);
            wal.commit().expect("commit");
            drop(wal);
            let (_, rec3) = Wal::open(dir, &opts).expect("reopen after append");
            assert_eq!(rec3.last_lsn, rec.last_lsn + 1);
            assert_eq!(rec3.records.last().map(Vec::as_slice), Some(&b"x"[..]));
        }
        clear(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_fdatasync_is_returned_never_acknowledged_and_poisons() {
        let dir = tempfile::tempdir().unwrap();
        let opts = WalOptions::default(); // SyncMode::Data
        let (mut wal, _) = Wal::open(dir.path(), &opts).unwrap();
        wal.append(b"a").unwrap();
        assert_eq!(wal.commit().unwrap(), 1);
        let len = wal.log_bytes();
        wal.fail_sync = true;
        wal.append(b"b").unwrap();
        match wal.commit() {
            Err(WalError::Io {
                op: "fdatasync", ..
            }) => {}
            other => panic!("{other:?}"),
        }
        // Not durable, not acknowledged; the frame was taken back out.
        assert_eq!(wal.durable_lsn(), 1);
        assert_eq!(wal.log_bytes(), len);
        assert!(matches!(wal.commit(), Err(WalError::Poisoned)));
        assert!(matches!(wal.append(b"c"), Err(WalError::Poisoned)));
        drop(wal);
        let (mut wal, rec) = Wal::open(dir.path(), &opts).unwrap();
        assert_eq!(rec.records, vec![b"a".to_vec()]);
        assert_eq!(wal.append(b"b").unwrap(), 2);
        assert_eq!(wal.commit().unwrap(), 2);
    }

    #[test]
    fn a_failed_commit_poisons_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let opts = WalOptions {
            sync: SyncMode::Never,
            ..WalOptions::default()
        };
        let (mut wal, _) = Wal::open(dir.path(), &opts).unwrap();
        wal.append(b"a").unwrap();
        assert_eq!(wal.commit().unwrap(), 1);
        // A descriptor that cannot write: the next pwrite fails (EBADF).
        wal.active = File::open(&wal.active_path).unwrap();
        wal.append(b"b").unwrap();
        assert!(matches!(
            wal.commit(),
            Err(WalError::Io {
                op: "append to",
                ..
            })
        ));
        assert_eq!(wal.durable_lsn(), 1);
        assert!(matches!(wal.append(b"c"), Err(WalError::Poisoned)));
        assert!(matches!(wal.commit(), Err(WalError::Poisoned)));
        assert!(matches!(wal.checkpoint(b"s"), Err(WalError::Poisoned)));
        drop(wal);
        let (_, rec) = Wal::open(dir.path(), &opts).unwrap();
        assert_eq!(rec.records, vec![b"a".to_vec()]);
    }
}
