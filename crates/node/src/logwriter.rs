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

use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

enum Cmd {
    /// The records of persist events up to number `through` (counted by the state machine).
    Append { records: Vec<Vec<u8>>, through: u64 },
    /// Commit, close and open the log again; answer what it holds.
    Reopen(Sender<Result<sb_wal::Recovery, sb_wal::WalError>>),
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
}

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
    pub fn start(
        wal: sb_wal::Wal,
        dir: &Path,
        opts: sb_wal::WalOptions,
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
                .spawn(move || writer(wal, &dir, &opts, &rx, &shared, &signal))?
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

fn writer(
    mut wal: sb_wal::Wal,
    dir: &Path,
    opts: &sb_wal::WalOptions,
    rx: &Receiver<Cmd>,
    shared: &Shared,
    signal: &UnixDatagram,
) {
    let fail = |e: sb_wal::WalError| {
        let mut slot = shared.error.lock().unwrap_or_else(|e| e.into_inner());
        slot.get_or_insert(e);
        let _ = signal.send(&[1]);
    };
    // Blocks for the first command, then takes every one already queued: one commit for all.
    while let Ok(first) = rx.recv() {
        let mut through = None;
        let mut next = Some(first);
        while let Some(cmd) = next.take() {
            match cmd {
                Cmd::Append {
                    records,
                    through: t,
                } => {
                    if let Err(e) = append_all(&mut wal, &records) {
                        return fail(e);
                    }
                    through = Some(t);
                    next = rx.try_recv().ok();
                }
                Cmd::Reopen(reply) => {
                    if let Err(e) = wal.commit() {
                        let _ = reply.send(Err(sb_wal::WalError::Poisoned));
                        return fail(e);
                    }
                    if let Some(t) = through.take() {
                        publish(&wal, shared, signal, t);
                    }
                    drop(wal);
                    match sb_wal::Wal::open(dir, opts) {
                        Ok((w, recovery)) => {
                            wal = w;
                            let _ = reply.send(Ok(recovery));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(sb_wal::WalError::Poisoned));
                            return fail(e);
                        }
                    }
                }
            }
        }
        if let Some(t) = through {
            if let Err(e) = wal.commit() {
                return fail(e);
            }
            publish(&wal, shared, signal, t);
        }
    }
    // The channel closed (the node stops): what was queued is committed above.
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

fn publish(wal: &sb_wal::Wal, shared: &Shared, signal: &UnixDatagram, through: u64) {
    shared.log_bytes.store(wal.log_bytes(), Ordering::Relaxed);
    shared.durable.fetch_max(through, Ordering::AcqRel);
    // Full (the control thread has not drained it yet): it is readable already.
    let _ = signal.send(&[1]);
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let w = LogWriter::start(wal, dir.path(), opts()).expect("start");
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
        let w = LogWriter::start(wal, dir.path(), o.clone()).expect("start");
        let recs: Vec<Vec<u8>> = (0..100u8).map(|i| vec![i; 1000]).collect();
        w.append(recs.clone(), 1);
        wait_durable(&w, 1);
        drop(w);
        let (_, rec) = sb_wal::Wal::open(dir.path(), &o).expect("open again");
        assert_eq!(rec.records, recs);
    }

    #[test]
    fn a_failed_log_reports_its_error_and_stops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (wal, _) = sb_wal::Wal::open(dir.path(), &opts()).expect("open");
        let w = LogWriter::start(wal, dir.path(), opts()).expect("start");
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
