//! In-memory ports: connected pairs ([`pair`]) and a replaying source/sink ([`ReplayPort`]).
//!
//! A pair behaves like a cable with a bounded queue in each direction: what one end transmits,
//! the other receives, in order. When a direction's queue is full, transmitted frames are
//! dropped and counted (`tx_dropped`), like a NIC with a full ring. Each queue is a ring of
//! fixed-size buffers allocated once; one mutex acquisition per batch.

use crate::{batch::DEFAULT_BUF_SIZE, IoError, PacketBatch, Port, PortStats};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

struct Ring {
    data: Box<[u8]>,
    lens: Box<[u16]>,
    buf_size: usize,
    head: usize,
    len: usize,
}

impl Ring {
    fn new(capacity: usize, buf_size: usize) -> Self {
        Ring {
            data: vec![0u8; capacity * buf_size].into_boxed_slice(),
            lens: vec![0u16; capacity].into_boxed_slice(),
            buf_size,
            head: 0,
            len: 0,
        }
    }
}

struct Queue {
    ring: Mutex<Ring>,
    ready: Condvar,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Ring> {
        // A poisoned lock only means another thread panicked mid-copy; the ring's indices are
        // always consistent between statements, so keep going.
        self.ring.lock().unwrap_or_else(|e| e.into_inner())
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
    let q = || {
        Arc::new(Queue {
            ring: Mutex::new(Ring::new(capacity, buf_size)),
            ready: Condvar::new(),
        })
    };
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
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let mut r = self.rx.lock();
        let cap = r.lens.len();
        let mut n = 0;
        while r.len > 0 && !batch.is_full() {
            let h = r.head;
            let len = r.lens[h] as usize;
            let off = h * r.buf_size;
            if batch.push(&r.data[off..off + len]) {
                self.stats.rx_packets += 1;
                self.stats.rx_bytes += len as u64;
                n += 1;
            } else {
                self.stats.rx_dropped += 1; // larger than the caller's buffers
            }
            r.head = (h + 1) % cap;
            r.len -= 1;
        }
        n
    }

    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let mut sent = 0;
        {
            let mut r = self.tx.lock();
            let cap = r.lens.len();
            for f in batch.iter() {
                if r.len == cap || f.len() > r.buf_size {
                    self.stats.tx_dropped += 1;
                    continue;
                }
                let slot = (r.head + r.len) % cap;
                let off = slot * r.buf_size;
                r.data[off..off + f.len()].copy_from_slice(f);
                r.lens[slot] = f.len() as u16;
                r.len += 1;
                sent += 1;
                self.stats.tx_bytes += f.len() as u64;
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
        let r = self.rx.lock();
        if r.len > 0 {
            return Ok(true);
        }
        let (r, _) = self
            .rx
            .ready
            .wait_timeout_while(r, timeout, |r| r.len == 0)
            .unwrap_or_else(|e| e.into_inner());
        Ok(r.len > 0)
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
