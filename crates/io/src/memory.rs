//! In-memory ports: connected pairs ([`pair`]), an L2 switch with one port per MAC address
//! ([`switch()`], see [`mod@switch`]) and a replaying source/sink ([`ReplayPort`]).
//!
//! A pair behaves like a cable with a bounded queue in each direction: what one end transmits,
//! the other receives, in order. When a direction's queue is full, transmitted frames are
//! dropped and counted (`tx_dropped`), like a NIC with a full ring. Each queue is a ring of
//! fixed-size buffers allocated once; one mutex acquisition per batch.
//!
//! A switch connects N ports through the same queues, one receive queue per port: a frame
//! transmitted on one port goes straight into the queue of the port whose MAC is its
//! destination (no switch thread), so N engine nodes run deterministically in one test process.

pub mod switch;

pub use switch::{switch, switch_with_buf_size, Switch, SwitchPort, SwitchPortStats, SwitchStats};

use crate::{batch::DEFAULT_BUF_SIZE, IoError, PacketBatch, Port, PortStats};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A bounded FIFO of frames in fixed-size buffers allocated once.
struct Ring {
    data: Box<[u8]>,
    lens: Box<[u16]>,
    buf_size: usize,
    head: usize,
    len: usize,
    /// Frames ever queued (for the switch's per-port counters).
    enqueued: u64,
    /// Frames refused because the ring was full (for the switch's per-port counters).
    full_drops: u64,
}

/// Why [`Ring::push`] refused a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PushError {
    /// The ring holds `capacity` frames already.
    Full,
    /// The frame is larger than one buffer.
    TooLarge,
}

impl Ring {
    fn new(capacity: usize, buf_size: usize) -> Self {
        Ring {
            data: vec![0u8; capacity * buf_size].into_boxed_slice(),
            lens: vec![0u16; capacity].into_boxed_slice(),
            buf_size,
            head: 0,
            len: 0,
            enqueued: 0,
            full_drops: 0,
        }
    }

    /// Copies `f` to the tail of the ring.
    fn push(&mut self, f: &[u8]) -> Result<(), PushError> {
        let cap = self.lens.len();
        if f.len() > self.buf_size {
            return Err(PushError::TooLarge);
        }
        if self.len == cap {
            self.full_drops += 1;
            return Err(PushError::Full);
        }
        let slot = (self.head + self.len) % cap;
        let off = slot * self.buf_size;
        self.data[off..off + f.len()].copy_from_slice(f);
        self.lens[slot] = f.len() as u16;
        self.len += 1;
        self.enqueued += 1;
        Ok(())
    }

    /// Moves frames from the head of the ring into `batch` until one of them is empty or full,
    /// counting them in `stats` (frames larger than the batch's buffers in `rx_dropped`).
    /// Returns how many were appended.
    fn pop_into(&mut self, batch: &mut PacketBatch, stats: &mut PortStats) -> usize {
        let cap = self.lens.len();
        let mut n = 0;
        while self.len > 0 && !batch.is_full() {
            let h = self.head;
            let len = self.lens[h] as usize;
            let off = h * self.buf_size;
            if batch.push(&self.data[off..off + len]) {
                stats.rx_packets += 1;
                stats.rx_bytes += len as u64;
                n += 1;
            } else {
                stats.rx_dropped += 1; // larger than the caller's buffers
            }
            self.head = (h + 1) % cap;
            self.len -= 1;
        }
        n
    }
}

/// A ring shared between threads, with a condition variable signalled when frames arrive.
struct Queue {
    ring: Mutex<Ring>,
    ready: Condvar,
}

impl Queue {
    fn new(capacity: usize, buf_size: usize) -> Arc<Queue> {
        Arc::new(Queue {
            ring: Mutex::new(Ring::new(capacity, buf_size)),
            ready: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A poisoned lock only means another thread panicked mid-copy; the ring's indices are
        // always consistent between statements, so keep going.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps until the ring holds a frame or `timeout` passes; true if it holds one.
    fn wait(&self, timeout: Duration) -> bool {
        let r = self.lock();
        if r.len > 0 {
            return true;
        }
        let (r, _) = self
            .ready
            .wait_timeout_while(r, timeout, |r| r.len == 0)
            .unwrap_or_else(|e| e.into_inner());
        r.len > 0
    }
}

/// One end of an in-memory cable made by [`pair`].
pub struct MemPort {
    name: String,
    tx: Arc<Queue>,
    rx: Arc<Queue>,
    stats: PortStats,
}

/// Two connected ports named `{name}.0` and `{name}.1`, each direction queueing up to `capacity`
/// frames of at most [`DEFAULT_BUF_SIZE`] bytes.
pub fn pair(name: &str, capacity: usize) -> (MemPort, MemPort) {
    pair_with_buf_size(name, capacity, DEFAULT_BUF_SIZE)
}

/// Like [`pair`] with frames of at most `buf_size` bytes.
pub fn pair_with_buf_size(name: &str, capacity: usize, buf_size: usize) -> (MemPort, MemPort) {
    let capacity = capacity.max(1);
    let buf_size = buf_size.clamp(64, u16::MAX as usize);
    let q = || Queue::new(capacity, buf_size);
    let (ab, ba) = (q(), q());
    (
        MemPort {
            name: format!("{name}.0"),
            tx: ab.clone(),
            rx: ba.clone(),
            stats: PortStats::default(),
        },
        MemPort {
            name: format!("{name}.1"),
            tx: ba,
            rx: ab,
            stats: PortStats::default(),
        },
    )
}

impl MemPort {
    /// Frames waiting to be received on this end.
    pub fn pending(&self) -> usize {
        self.rx.lock().len
    }

    /// Frames sent from this end that the other end has not received yet (a sender's flow
    /// control: a queue of `capacity` frames drops what does not fit).
    pub fn queued_tx(&self) -> usize {
        self.tx.lock().len
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        self.rx.lock().pop_into(batch, &mut self.stats)
    }

    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let mut sent = 0;
        {
            let mut r = self.tx.lock();
            for f in batch.iter() {
                match r.push(f) {
                    Ok(()) => {
                        sent += 1;
                        self.stats.tx_bytes += f.len() as u64;
                    }
                    Err(_) => self.stats.tx_dropped += 1,
                }
            }
        }
        self.stats.tx_packets += sent as u64;
        batch.clear();
        if sent > 0 {
            self.tx.ready.notify_all();
        }
        sent
    }

    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError> {
        Ok(self.rx.wait(timeout))
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// A port that receives a fixed list of frames over and over (optionally up to a total count)
/// and swallows what it is given to transmit. The source and sink for engine benchmarks: no
/// locks, one `memcpy` per received frame.
pub struct ReplayPort {
    name: String,
    frames: Vec<Vec<u8>>,
    next: usize,
    remaining: Option<u64>,
    stats: PortStats,
}

impl ReplayPort {
    /// Replays `frames` cyclically forever (an empty list receives nothing).
    pub fn new(name: &str, frames: Vec<Vec<u8>>) -> Self {
        ReplayPort {
            name: name.to_string(),
            frames,
            next: 0,
            remaining: None,
            stats: PortStats::default(),
        }
    }

    /// Replays `frames` cyclically until `count` frames have been received in total.
    pub fn with_count(name: &str, frames: Vec<Vec<u8>>, count: u64) -> Self {
        let mut p = Self::new(name, frames);
        p.remaining = Some(count);
        p
    }
}

impl Port for ReplayPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        if self.frames.is_empty() {
            return 0;
        }
        let mut want = batch.room();
        if let Some(rem) = self.remaining {
            want = want.min(rem as usize);
        }
        let mut n = 0;
        for _ in 0..want {
            let f = &self.frames[self.next];
            self.next += 1;
            if self.next == self.frames.len() {
                self.next = 0;
            }
            if batch.push(f) {
                n += 1;
                self.stats.rx_bytes += f.len() as u64;
            } else {
                self.stats.rx_dropped += 1;
            }
        }
        if let Some(rem) = &mut self.remaining {
            *rem -= want as u64;
        }
        self.stats.rx_packets += n as u64;
        n
    }

    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let n = batch.len();
        self.stats.tx_packets += n as u64;
        self.stats.tx_bytes += batch.iter().map(|f| f.len() as u64).sum::<u64>();
        batch.clear();
        n
    }

    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError> {
        let ready = !self.frames.is_empty() && self.remaining != Some(0);
        if !ready {
            std::thread::sleep(timeout);
        }
        Ok(ready)
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn full_queue_drops_and_counts() {
        let (mut a, mut b) = pair("t", 4);
        let mut batch = PacketBatch::new(8);
        for i in 0..6u8 {
            batch.push(&[i; 20]);
        }
        assert_eq!(a.tx_batch(&mut batch), 4);
        assert!(batch.is_empty());
        assert_eq!(a.stats().tx_dropped, 2);
        assert_eq!(b.pending(), 4);
        let mut small = PacketBatch::new(3);
        assert_eq!(b.rx_batch(&mut small), 3);
        assert_eq!(b.rx_batch(&mut small), 0); // batch full
        small.clear();
        assert_eq!(b.rx_batch(&mut small), 1);
        assert_eq!(small.get(0), &[3u8; 20]);
        assert_eq!(b.stats().rx_packets, 4);
        // Nothing flows backwards by itself.
        assert_eq!(a.rx_batch(&mut small), 0);
    }

    #[test]
    fn wait_rx_wakes_on_transmit() {
        let (mut a, mut b) = pair("w", 16);
        assert!(!b.wait_rx(Duration::from_millis(1)).unwrap());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let mut batch = PacketBatch::new(1);
            batch.push(&[7; 64]);
            a.tx_batch(&mut batch);
            a
        });
        assert!(b.wait_rx(Duration::from_secs(10)).unwrap());
        t.join().unwrap();
    }

    #[test]
    fn wait_any_reports_the_ready_port() {
        let (a0, mut a1) = pair("a", 8);
        let (mut b0, mut b1) = pair("b", 8);
        let mut ready = Vec::new();
        crate::wait_any(
            &mut [&mut a1, &mut b1],
            Duration::from_millis(2),
            &mut ready,
        )
        .unwrap();
        assert!(ready.is_empty());
        let mut batch = PacketBatch::new(1);
        batch.push(&[1; 60]);
        b0.tx_batch(&mut batch);
        crate::wait_any(&mut [&mut a1, &mut b1], Duration::from_secs(5), &mut ready).unwrap();
        assert_eq!(ready, vec![1]);
        assert_eq!(a0.stats().tx_packets, 0);
    }

    #[test]
    fn replay_counts_and_cycles() {
        let mut p = ReplayPort::with_count("r", vec![vec![1; 60], vec![2; 70]], 5);
        let mut batch = PacketBatch::new(4);
        assert_eq!(p.rx_batch(&mut batch), 4);
        assert_eq!(batch.get(2), &[1u8; 60][..]);
        assert_eq!(p.tx_batch(&mut batch), 4);
        assert_eq!(p.rx_batch(&mut batch), 1);
        assert_eq!(p.rx_batch(&mut batch), 0);
        assert_eq!(p.stats().rx_packets, 5);
        assert_eq!(p.stats().tx_packets, 4);
    }

    proptest! {
        /// The pair is a bounded FIFO: compare against a VecDeque oracle under random
        /// interleavings of sends and receives.
        #[test]
        fn pair_is_a_bounded_fifo(ops in proptest::collection::vec((any::<bool>(), 1usize..10), 1..60)) {
            let cap = 16;
            let (mut a, mut b) = pair("p", cap);
            let mut oracle: VecDeque<Vec<u8>> = VecDeque::new();
            let mut seq = 0u32;
            let mut dropped = 0u64;
            let mut batch = PacketBatch::new(16);
            for (send, n) in ops {
                if send {
                    batch.clear();
                    for _ in 0..n {
                        let f: Vec<u8> = seq.to_le_bytes().iter().cycle().take(14 + (seq as usize % 50)).copied().collect();
                        batch.push(&f);
                        if oracle.len() < cap { oracle.push_back(f); } else { dropped += 1; }
                        seq += 1;
                    }
                    a.tx_batch(&mut batch);
                } else {
                    batch.clear();
                    let mut small = PacketBatch::new(n);
                    let got = b.rx_batch(&mut small);
                    prop_assert_eq!(got, n.min(oracle.len()));
                    for f in small.iter() {
                        prop_assert_eq!(Some(f.to_vec()), oracle.pop_front());
                    }
                }
            }
            prop_assert_eq!(a.stats().tx_dropped, dropped);
            prop_assert_eq!(b.pending(), oracle.len());
        }
    }
}
