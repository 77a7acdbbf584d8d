//! The control plane's log, written on a thread of its own.
//!
//! The state machine hands out records to persist ([`sb_control::Event::Persist`]) and holds
//! back whatever needs them durable (acknowledgements, Raft messages) until its driver says
//! they are ([`sb_control::Node::persisted_through`]). The control thread therefore never has
//! to wait for the disk: it passes each event's records to this thread, which appends
//! everything that has arrived, commits it with one `fdatasync` (group commit) and publishes
//! how many events are durable, waking the control thread through a socket it polls.
//!
//! Why not on the control thread: an `fdatasync` of a loaded disk can take hundreds of
//! milliseconds, during which that thread sent no heartbeat and ticked no Raft group, so its
//! peers took it for dead, another replica took its range, and it fenced itself and restarted
//! from its log with updates in flight answered "system failure" (issue 29's false fencing).
//! On its own thread the sync delays only what waits for durability.
//!
//! Checkpoints: once the log's segments hold more than [`LogWriter::start`]'s `checkpoint_bytes`
//! and more than the last snapshot (or `sb_wal`'s record bound), the writer says one is due;
//! the control thread takes the state machine's checkpoint records
//! ([`sb_control::Node::checkpoint`]) and queues them behind the records handed out before,
//! and the writer replaces the log with them, atomically. It commits what came before and
//! starts a new segment (`sb_wal::Wal::begin_checkpoint`: a few milliseconds), writes and
//! flushes the snapshot on a thread of its own while it goes on committing the appends after
//! it into the new segment, then installs it (`sb_wal::Wal::finish_checkpoint`: a rename and
//! the old segments removed). So a checkpoint never holds the appends behind it (and the
//! acknowledgements and Raft messages that wait for them) for the snapshot's write and
//! `fsync`, tens of milliseconds per MiB on a loaded disk; none is due while one is written.
//! A restart replays the snapshot's records, then the log after it ([`replay_records`]): what
//! it replays stays within about twice the state's size.
//!
//! Counters for `cluster status` (see [`LogWriter::commit_max_ms`] and the like): the longest
//! commit, the commits of [`SLOW_COMMIT`] or more, the longest a checkpoint held the log's
//! thread.

use std::cell::Cell;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

enum Cmd {
    /// The records of persist events up to number `through` (counted by the state machine).
    Append { records: Vec<Vec<u8>>, through: u64 },
    /// Commit, close and open the log again; answer what it holds.
    Reopen(Sender<Result<sb_wal::Recovery, sb_wal::WalError>>),
    /// Replace the log so far (every record queued before) by a snapshot of these records,
    /// which stand for the persist events up to number `through`.
    Checkpoint { records: Vec<Vec<u8>>, through: u64 },
}

/// What the writer thread shares with its owner.
#[derive(Default)]
struct Shared {
    /// Persist events durable (the `through` of the last committed append).
    durable: AtomicU64,
    /// The log's bytes after the last commit.
    log_bytes: AtomicU64,
    /// The first error: the log is poisoned and the node must stop.
    error: Mutex<Option<sb_wal::WalError>>,
    /// A checkpoint is due (see the module documentation).
    due: AtomicBool,
    /// Checkpoints written.
    checkpoints: AtomicU64,
    /// The longest a checkpoint held up the log's thread, in milliseconds.
    checkpoint_write_max_ms: AtomicU64,
    /// The longest commit, in milliseconds.
    commit_max_ms: AtomicU64,
    /// Commits that took [`SLOW_COMMIT`] or more.
    slow_commits: AtomicU64,
}

/// A commit this long is counted as slow ([`LogWriter::slow_commits`]): about what makes a
/// follower's acknowledgements (held until its log is durable) late for a Raft leader at the
/// default detection.
pub const SLOW_COMMIT: Duration = Duration::from_millis(100);

/// A log written and synced on its own thread.
pub struct LogWriter {
    tx: Option<Sender<Cmd>>,
    shared: Arc<Shared>,
    wake: UnixDatagram,
    thread: Option<JoinHandle<()>>,
    dir: PathBuf,
}

impl LogWriter {
    /// Takes over `wal` (opened in `dir` with `opts`, which a reopen uses again).
    /// A checkpoint is due once the segments hold `checkpoint_bytes` and more than the last
    /// snapshot (0: never by size).
    pub fn start(
        wal: sb_wal::Wal,
        dir: &Path,
        opts: sb_wal::WalOptions,
        checkpoint_bytes: u64,
    ) -> std::io::Result<LogWriter> {
        let (wake, signal) = UnixDatagram::pair()?;
        wake.set_nonblocking(true)?;
        signal.set_nonblocking(true)?;
        let shared = Arc::new(Shared::default());
        shared.log_bytes.store(wal.log_bytes(), Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let thread = {
            let shared = shared.clone();
            let dir = dir.to_path_buf();
            std::thread::Builder::new()
                .name("sb-log".into())
                .spawn(move || {
                    let ctx = Ctx {
                        dir: &dir,
                        opts: &opts,
                        shared: &shared,
                        signal: &signal,
                        checkpoint_bytes,
                        checkpointing: Cell::new(false),
                    };
                    writer(wal, &ctx, &rx)
                })?
        };
        Ok(LogWriter {
            tx: Some(tx),
            shared,
            wake,
            thread: Some(thread),
            dir: dir.to_path_buf(),
        })
    }

    /// Queues the records of the persist events up to number `through`.
    pub fn append(&self, records: Vec<Vec<u8>>, through: u64) {
        if let Some(tx) = &self.tx {
            // A closed channel means the thread stopped on an error: `error` reports it.
            let _ = tx.send(Cmd::Append { records, through });
        }
    }

    /// Whether a checkpoint is due (until one is queued).
    pub fn checkpoint_due(&self) -> bool {
        self.shared.due.load(Ordering::Relaxed)
    }

    /// Queues a checkpoint: `records` replace the log so far (everything queued before);
    /// they stand for the persist events up to number `through`.
    pub fn checkpoint(&self, records: Vec<Vec<u8>>, through: u64) {
        self.shared.due.store(false, Ordering::Relaxed);
        if let Some(tx) = &self.tx {
            let _ = tx.send(Cmd::Checkpoint { records, through });
        }
    }

    /// Checkpoints written.
    pub fn checkpoints(&self) -> u64 {
        self.shared.checkpoints.load(Ordering::Relaxed)
    }

    /// The longest a checkpoint held up the log's thread (the appends behind it), in ms.
    pub fn checkpoint_write_max_ms(&self) -> u64 {
        self.shared.checkpoint_write_max_ms.load(Ordering::Relaxed)
    }

    /// The longest commit so far (its write and `fdatasync`), in milliseconds.
    pub fn commit_max_ms(&self) -> u64 {
        self.shared.commit_max_ms.load(Ordering::Relaxed)
    }

    /// Commits that took [`SLOW_COMMIT`] or more.
    pub fn slow_commits(&self) -> u64 {
        self.shared.slow_commits.load(Ordering::Relaxed)
    }

    /// Persist events durable so far.
    pub fn durable(&self) -> u64 {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// The log's size on disk after its last commit.
    pub fn log_bytes(&self) -> u64 {
        self.shared.log_bytes.load(Ordering::Relaxed)
    }

    /// The socket that becomes readable after each commit (poll it with the others).
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Empties the wake socket.
    pub fn drain_wakes(&self) {
        let mut b = [0u8; 64];
        while self.wake.recv(&mut b).is_ok() {}
    }

    /// The error that stopped the log, once (the node must stop: what it acknowledged next
    /// would not be durable).
    pub fn take_error(&self) -> Option<sb_wal::WalError> {
        self.shared
            .error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Commits everything queued, then opens the log again and returns what it holds (a
    /// restart of the state machine replays it).
    pub fn reopen(&self) -> Result<sb_wal::Recovery, sb_wal::WalError> {
        let stopped = || {
            self.take_error().unwrap_or_else(|| sb_wal::WalError::Io {
                op: "write",
                path: self.dir.clone(),
                source: std::io::Error::other("the log's thread stopped"),
            })
        };
        let (tx, rx) = mpsc::channel();
        let Some(cmd) = &self.tx else {
            return Err(stopped());
        };
        cmd.send(Cmd::Reopen(tx)).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
    }
}

impl Drop for LogWriter {
    /// Commits what is queued and stops the thread.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the writer thread works with besides the log.
struct Ctx<'a> {
    dir: &'a Path,
    opts: &'a sb_wal::WalOptions,
    shared: &'a Shared,
    signal: &'a UnixDatagram,
    checkpoint_bytes: u64,
    /// A checkpoint is being written.
    checkpointing: Cell<bool>,
}

impl Ctx<'_> {
    /// A commit (its write and `fdatasync`) took `d`.
    fn committed(&self, d: Duration) {
        let ms = d.as_millis() as u64;
        self.shared.commit_max_ms.fetch_max(ms, Ordering::Relaxed);
        if d >= SLOW_COMMIT {
            self.shared.slow_commits.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A checkpoint held the log's thread (the appends behind it) this long.
    fn held(&self, d: Duration) {
        self.shared
            .checkpoint_write_max_ms
            .fetch_max(d.as_millis() as u64, Ordering::Relaxed);
    }

    fn fail(&self, e: sb_wal::WalError) {
        let mut slot = self.shared.error.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(e);
        let _ = self.signal.send(&[1]);
    }

    /// After a commit: durable through `through`; whether a checkpoint is due.
    fn publish(&self, wal: &sb_wal::Wal, through: u64) {
        let by_size = self.checkpoint_bytes > 0
            && wal.log_bytes() >= self.checkpoint_bytes.max(wal.snapshot_bytes());
        // None is due while one is being written (the log's bytes still count the segments
        // it will replace).
        if !self.checkpointing.get() && (by_size || wal.checkpoint_due()) {
            self.shared.due.store(true, Ordering::Relaxed);
        }
        self.shared
            .log_bytes
            .store(wal.log_bytes(), Ordering::Relaxed);
        self.shared.durable.fetch_max(through, Ordering::AcqRel);
        // Full (the control thread has not drained it yet): it is readable already.
        let _ = self.signal.send(&[1]);
    }
}

/// A checkpoint being written on a thread of its own (see [`writer`]).
struct InFlight {
    done: Receiver<Result<sb_wal::WrittenCheckpoint, sb_wal::WalError>>,
    thread: JoinHandle<()>,
    records: usize,
    started: Instant,
}

/// How often the writer looks whether a checkpoint's thread is done, while one is.
const FLIGHT_POLL: Duration = Duration::from_millis(5);

fn writer(mut wal: sb_wal::Wal, cx: &Ctx, rx: &Receiver<Cmd>) {
    let mut flight: Option<InFlight> = None;
    loop {
        // Blocks for the first command (while a checkpoint is written, for at most
        // FLIGHT_POLL: its end is looked for in between), then takes every one already
        // queued: one commit for all.
        let first = if flight.is_some() {
            match rx.recv_timeout(FLIGHT_POLL) {
                Ok(c) => Some(c),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.recv() {
                Ok(c) => Some(c),
                Err(_) => break,
            }
        };
        if let Err(e) = land(&mut wal, cx, &mut flight, false) {
            return cx.fail(e);
        }
        let mut through = None;
        let mut next = first;
        while let Some(cmd) = next.take() {
            match cmd {
                Cmd::Append {
                    records,
                    through: t,
                } => {
                    if let Err(e) = append_all(&mut wal, &records) {
                        return cx.fail(e);
                    }
                    through = Some(t);
                    next = rx.try_recv().ok();
                }
                Cmd::Checkpoint {
                    records,
                    through: t,
                } => {
                    // One at a time (none is due while one is written: `publish`).
                    if let Err(e) = land(&mut wal, cx, &mut flight, true) {
                        return cx.fail(e);
                    }
                    // Commits everything appended so far and starts a new segment: the
                    // snapshot stands for the records before it, and the appends after it
                    // are committed into the new segment while its thread writes it.
                    let t0 = Instant::now();
                    let w = match wal.begin_checkpoint() {
                        Ok(w) => w,
                        Err(e) => return cx.fail(e),
                    };
                    cx.held(t0.elapsed());
                    let (done_tx, done) = mpsc::channel();
                    let n = records.len();
                    // Tests' delay, read here, in the order of the log's commands: a thread
                    // that reads it once it runs may run after the test reset it.
                    #[cfg(test)]
                    let slow =
                        Duration::from_millis(tests::SLOW_CHECKPOINT_MS.load(Ordering::Relaxed));
                    let spawned = std::thread::Builder::new()
                        .name("sb-checkpoint".into())
                        .spawn(move || {
                            // In the background: below the control threads of this machine's
                            // nodes, whose priority the log thread shares (an encoding and
                            // write of a GB of state at that priority starved them on two
                            // cores: their heartbeats came late, docs/bench/pfcp.md). Lowering
                            // needs no privilege.
                            let _ = sb_io::set_thread_nice(CHECKPOINT_NICE);
                            #[cfg(test)]
                            std::thread::sleep(slow);
                            let len = checkpoint_len(&records);
                            let written =
                                w.write_with(len, |sink| write_checkpoint(&records, sink));
                            drop(records);
                            let _ = done_tx.send(written);
                        });
                    let thread = match spawned {
                        Ok(h) => h,
                        Err(e) => {
                            return cx.fail(sb_wal::WalError::Io {
                                op: "start the checkpoint's thread for",
                                path: cx.dir.to_path_buf(),
                                source: e,
                            })
                        }
                    };
                    flight = Some(InFlight {
                        done,
                        thread,
                        records: n,
                        started: t0,
                    });
                    cx.checkpointing.set(true);
                    through = None;
                    cx.publish(&wal, t);
                    next = rx.try_recv().ok();
                }
                Cmd::Reopen(reply) => {
                    let r = land(&mut wal, cx, &mut flight, true).and_then(|()| wal.commit());
                    if let Err(e) = r {
                        let _ = reply.send(Err(sb_wal::WalError::Poisoned));
                        return cx.fail(e);
                    }
                    if let Some(t) = through.take() {
                        cx.publish(&wal, t);
                    }
                    drop(wal);
                    match sb_wal::Wal::open(cx.dir, cx.opts) {
                        Ok((w, recovery)) => {
                            wal = w;
                            let _ = reply.send(Ok(recovery));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(sb_wal::WalError::Poisoned));
                            return cx.fail(e);
                        }
                    }
                }
            }
        }
        if let Some(t) = through {
            let t0 = Instant::now();
            if let Err(e) = wal.commit() {
                return cx.fail(e);
            }
            cx.committed(t0.elapsed());
            cx.publish(&wal, t);
        }
    }
    // The channel closed (the node stops): what was queued is committed above; a checkpoint
    // being written is installed.
    if let Err(e) = land(&mut wal, cx, &mut flight, true) {
        cx.fail(e);
    }
}

/// Installs the checkpoint in flight once its thread wrote it (`wait`: waits for that).
fn land(
    wal: &mut sb_wal::Wal,
    cx: &Ctx,
    flight: &mut Option<InFlight>,
    wait: bool,
) -> Result<(), sb_wal::WalError> {
    let Some(f) = flight.as_ref() else {
        return Ok(());
    };
    let r = if wait {
        f.done.recv().ok()
    } else {
        match f.done.try_recv() {
            Ok(r) => Some(r),
            Err(mpsc::TryRecvError::Empty) => return Ok(()),
            Err(mpsc::TryRecvError::Disconnected) => None,
        }
    };
    let f = flight.take().expect("a checkpoint in flight");
    let _ = f.thread.join();
    let written = r.ok_or_else(|| sb_wal::WalError::Io {
        op: "write a checkpoint in",
        path: cx.dir.to_path_buf(),
        source: std::io::Error::other("the checkpoint's thread stopped"),
    })??;
    let t0 = Instant::now();
    wal.finish_checkpoint(written)?;
    cx.held(t0.elapsed());
    cx.shared.checkpoints.fetch_add(1, Ordering::Relaxed);
    cx.checkpointing.set(false);
    eprintln!(
        "log: a checkpoint of {} records was written in {} ms beside the appends",
        f.records,
        f.started.elapsed().as_millis()
    );
    cx.publish(wal, cx.shared.durable.load(Ordering::Acquire));
    Ok(())
}

/// The nice value of the thread that encodes and writes a checkpoint.
const CHECKPOINT_NICE: i32 = 10;

/// The length of [`write_checkpoint`]'s bytes.
pub fn checkpoint_len(records: &[Vec<u8>]) -> u64 {
    4 + records.iter().map(|r| 4 + r.len() as u64).sum::<u64>()
}

/// Writes a checkpoint's records as the snapshot's bytes to `out`: count u32, then per record
/// its length u32 and its bytes (little-endian). The checkpoint's thread streams them into the
/// snapshot file: no copy of the state beside the records.
pub fn write_checkpoint(records: &[Vec<u8>], out: &mut impl std::io::Write) -> std::io::Result<()> {
    out.write_all(&(records.len() as u32).to_le_bytes())?;
    for r in records {
        out.write_all(&(r.len() as u32).to_le_bytes())?;
        out.write_all(r)?;
    }
    Ok(())
}

/// Bytes of a checkpoint's data that [`decode_checkpoint`] copies out before it gives them
/// back.
const GIVE_BACK_BYTES: usize = 64 << 20;

/// The records of a checkpoint's data (`write_checkpoint`'s format: a count, then each
/// record's length and bytes), taking the data: the records are copied out from the last one
/// back, and the data behind them given back every 64 MiB (a shrink of a large
/// allocation returns its tail to the system without a copy), so a checkpoint of gigabytes is
/// held about once, not twice, while it is decoded. Damage (a count or length past the end,
/// bytes after the last record) is an error, never a panic.
pub fn decode_checkpoint(b: Vec<u8>) -> Result<Vec<Vec<u8>>, &'static str> {
    decode_checkpoint_giving_back(b, GIVE_BACK_BYTES)
}

/// [`decode_checkpoint`], the data given back every `every` bytes copied out.
fn decode_checkpoint_giving_back(
    mut b: Vec<u8>,
    every: usize,
) -> Result<Vec<Vec<u8>>, &'static str> {
    // Where each record is.
    let mut spans = Vec::new();
    {
        let mut at = 0usize;
        let u32_at = |at: &mut usize| -> Result<usize, &'static str> {
            let h = b.get(*at..*at + 4).ok_or("truncated checkpoint")?;
            *at += 4;
            Ok(u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize)
        };
        let n = u32_at(&mut at)?;
        spans.reserve(n.min(b.len() / 4));
        for _ in 0..n {
            let len = u32_at(&mut at)?;
            if b.len() - at < len {
                return Err("truncated checkpoint record");
            }
            spans.push((at, len));
            at += len;
        }
        if at != b.len() {
            return Err("trailing bytes after the checkpoint's records");
        }
    }
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(spans.len());
    out.resize_with(spans.len(), Vec::new);
    let mut copied = 0usize;
    for (i, &(at, len)) in spans.iter().enumerate().rev() {
        out[i] = b[at..at + len].to_vec();
        copied += len;
        if copied >= every {
            b.truncate(at);
            b.shrink_to_fit();
            copied = 0;
        }
    }
    Ok(out)
}

/// What a restart replays: the snapshot's records (a checkpoint), then the log's records
/// after it. The snapshot's data is given back as its records are decoded
/// ([`decode_checkpoint`]).
pub fn replay_records(recovery: sb_wal::Recovery) -> Result<Vec<Vec<u8>>, &'static str> {
    let mut out = match recovery.snapshot {
        Some(s) => decode_checkpoint(s.data)?,
        None => Vec::new(),
    };
    out.extend(recovery.records);
    Ok(out)
}

fn append_all(wal: &mut sb_wal::Wal, records: &[Vec<u8>]) -> Result<(), sb_wal::WalError> {
    for r in records {
        match wal.append(r) {
            // More than one commit holds (a first start persists every initial flow of the
            // range): commit what is pending, go on.
            Err(sb_wal::WalError::BatchFull { .. }) => {
                wal.commit()?;
                wal.append(r)?;
            }
            other => {
                other?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Milliseconds a checkpoint's thread sleeps before it writes (tests of what goes on
    /// meanwhile).
    pub(super) static SLOW_CHECKPOINT_MS: AtomicU64 = AtomicU64::new(0);

    fn opts() -> sb_wal::WalOptions {
        sb_wal::WalOptions {
            identity: b"logwriter-test".to_vec(),
            ..sb_wal::WalOptions::default()
        }
    }

    fn wait_durable(w: &LogWriter, n: u64) {
        let t0 = std::time::Instant::now();
        while w.durable() < n {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(10),
                "durable {} < {n}",
                w.durable()
            );
            sb_io::wait_readable(&[w.wake_fd()], std::time::Duration::from_millis(50))
                .expect("poll");
            w.drain_wakes();
        }
    }

    #[test]
    fn appends_become_durable_in_order_and_survive_reopen_and_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (wal, rec) = sb_wal::Wal::open(dir.path(), &opts()).expect("open");
        assert!(rec.records.is_empty());
        let w = LogWriter::start(wal, dir.path(), opts(), 0).expect("start");
        let mut expect = Vec::new();
        for i in 0..200u64 {
            let recs: Vec<Vec<u8>> = (0..(i % 3)).map(|j| format!("{i}.{j}").into()).collect();
            expect.extend(recs.iter().cloned());
            w.append(recs, i + 1);
        }
        wait_durable(&w, 200);
        assert!(w.log_bytes() > 0);
        // A reopen commits and returns everything, in order.
        let rec = w.reopen().expect("reopen");
        assert_eq!(rec.records, expect);
        // Appends after the reopen go to the reopened log.
        w.append(vec![b"after".to_vec()], 201);
        wait_durable(&w, 201);
        expect.push(b"after".to_vec());
        drop(w);
        let (_, rec) = sb_wal::Wal::open(dir.path(), &opts()).expect("open again");
        assert_eq!(rec.records, expect);
    }

    #[test]
    fn records_larger_than_a_batch_are_committed_in_several() {
        let dir = tempfile::tempdir().expect("tempdir");
        let o = sb_wal::WalOptions {
            max_batch_bytes: 4096,
            ..opts()
        };
        let (wal, _) = sb_wal::Wal::open(dir.path(), &o).expect("open");
        let w = LogWriter::start(wal, dir.path(), o.clone(), 0).expect("start");
        let recs: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 1000]).collect();
        w.append(recs.clone(), 1);
        wait_durable(&w, 1);
        drop(w);
        let (_, rec) = sb_wal::Wal::open(dir.path(), &o).expect("open again");
        assert_eq!(rec.records, recs);
    }

    #[test]
    fn a_checkpoint_replaces_the_log_so_far_and_is_due_by_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (wal, _) = sb_wal::Wal::open(dir.path(), &opts()).expect("open");
        let w = LogWriter::start(wal, dir.path(), opts(), 4096).expect("start");
        assert!(!w.checkpoint_due());
        for i in 0..10u64 {
            w.append(vec![vec![i as u8; 1000]], i + 1);
        }
        wait_durable(&w, 10);
        assert!(w.checkpoint_due(), "{} log bytes", w.log_bytes());
        // The state after those ten records, as two records; then more appended after it.
        let state = vec![b"state".to_vec(), Vec::new()];
        w.checkpoint(state.clone(), 10);
        assert!(!w.checkpoint_due());
        w.append(vec![b"after".to_vec()], 11);
        wait_durable(&w, 11);
        // Written on a thread of its own, installed by the log's thread once written.
        let t0 = std::time::Instant::now();
        while w.checkpoints() < 1 {
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(w.log_bytes() < 4096, "{}", w.log_bytes());
        assert!(!w.checkpoint_due());
        let mut want = state.clone();
        want.push(b"after".to_vec());
        assert_eq!(replay_records(w.reopen().expect("reopen")).unwrap(), want);
        drop(w);
        let (_, rec) = sb_wal::Wal::open(dir.path(), &opts()).expect("open again");
        assert_eq!(replay_records(rec).unwrap(), want);
    }

    #[test]
    fn appends_are_committed_while_a_checkpoint_is_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (wal, _) = sb_wal::Wal::open(dir.path(), &opts()).expect("open");
        let w = LogWriter::start(wal, dir.path(), opts(), 4096).expect("start");
        for i in 0..10u64 {
            w.append(vec![vec![i as u8; 1000]], i + 1);
        }
        wait_durable(&w, 10);
        assert!(w.checkpoint_due());
        // A large checkpoint whose write takes at least 2 s (its thread sleeps first).
        SLOW_CHECKPOINT_MS.store(2000, Ordering::Relaxed);
        let state: Vec<Vec<u8>> = (0..64u8).map(|i| vec![i; 1 << 20]).collect();
        let t0 = std::time::Instant::now();
        w.checkpoint(state.clone(), 10);
        // Appends queued behind it are durable long before it is written (before, the log's
        // thread wrote it first: each of these waited 2 s and more).
        let mut want = state;
        for i in 11..=15u64 {
            let t = std::time::Instant::now();
            w.append(vec![format!("after {i}").into()], i);
            want.push(format!("after {i}").into());
            wait_durable(&w, i);
            assert!(
                t.elapsed() < std::time::Duration::from_millis(1000),
                "append {i} durable after {:?}",
                t.elapsed()
            );
            // None is due while one is written, however big the log.
            assert!(!w.checkpoint_due());
        }
        assert_eq!(w.checkpoints(), 0, "written in {:?}", t0.elapsed());
        SLOW_CHECKPOINT_MS.store(0, Ordering::Relaxed);
        // A reopen installs it first: the snapshot, then the appends after it.
        assert_eq!(replay_records(w.reopen().expect("reopen")).unwrap(), want);
        assert_eq!(w.checkpoints(), 1);
        assert!(t0.elapsed() >= std::time::Duration::from_millis(2000));
        assert!(w.checkpoint_write_max_ms() < 1000);
        drop(w);
        let (_, rec) = sb_wal::Wal::open(dir.path(), &opts()).expect("open again");
        assert_eq!(replay_records(rec).unwrap(), want);
    }

    /// [`write_checkpoint`]'s bytes in a vector.
    fn encode_checkpoint(records: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::with_capacity(checkpoint_len(records) as usize);
        write_checkpoint(records, &mut out).expect("writing to a vector does not fail");
        out
    }

    proptest::proptest! {
        #[test]
        fn checkpoint_bytes_round_trip(
            recs in proptest::collection::vec(proptest::collection::vec(0u8..=255, 0..40), 0..20),
            every in 1usize..100,
        ) {
            // Given back every few bytes, as a checkpoint of gigabytes is every 64 MiB.
            let got = decode_checkpoint_giving_back(encode_checkpoint(&recs), every).unwrap();
            proptest::prop_assert_eq!(got, recs);
        }

        #[test]
        fn decoding_any_bytes_never_panics(
            b in proptest::collection::vec(0u8..=255, 0..200),
            every in 1usize..100,
        ) {
            if let Ok(recs) = decode_checkpoint_giving_back(b.clone(), every) {
                // What decodes is exactly what encodes back to it.
                proptest::prop_assert_eq!(encode_checkpoint(&recs), b);
            }
        }
    }

    #[test]
    fn a_failed_log_reports_its_error_and_stops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (wal, _) = sb_wal::Wal::open(dir.path(), &opts()).expect("open");
        let w = LogWriter::start(wal, dir.path(), opts(), 0).expect("start");
        // A record no batch can hold: the commit before it succeeds, the append fails.
        let huge = vec![0u8; sb_wal::WalOptions::default().max_batch_bytes + 1];
        w.append(vec![huge], 1);
        let t0 = std::time::Instant::now();
        let e = loop {
            if let Some(e) = w.take_error() {
                break e;
            }
            assert!(t0.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert!(matches!(e, sb_wal::WalError::BatchFull { .. }), "{e}");
        assert_eq!(w.durable(), 0);
        // Nothing more is taken.
        assert!(w.reopen().is_err());
    }
}
