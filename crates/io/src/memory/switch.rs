//! An in-memory L2 switch: one [`SwitchPort`] per MAC address, static forwarding by
//! destination MAC, so that N engine nodes (one thread each, or all on one thread) run
//! deterministically in one test process.
//!
//! There is no switch thread. Each port owns a bounded receive queue (the same ring of
//! fixed-size buffers as [`pair`](super::pair)); [`Port::tx_batch`] on port `k` copies every
//! frame straight into the receive queue of its destination:
//! - a unicast destination (bit 0 of byte 0 clear) that is another port's MAC: that port's
//!   queue ([`SwitchStats::forwarded`]);
//! - a broadcast or multicast destination (bit 0 of byte 0 set): every other port's queue,
//!   never back to the sender ([`SwitchStats::flooded`]);
//! - any other unicast destination (unknown, the sender's own MAC) or a frame shorter than 6
//!   bytes: dropped ([`SwitchStats::unknown_dst`]).
//!
//! A full receive queue drops the frame ([`SwitchStats::queue_full`], and per receiver in
//! [`SwitchPortStats::queue_full`]). The sender's [`PortStats`] count what left the port as a
//! NIC would: `tx_packets` for frames the switch took (delivered, flooded to at least one
//! queue, or dropped for an unknown destination), `tx_dropped` for frames no queue could take
//! (the destination's queue was full, every flooded-to queue was full, or the frame is larger
//! than a queue buffer). Frames keep their order per (sender, receiver) pair.
//!
//! Cost: per frame one MAC lookup (a `HashMap`) and one `memcpy` into the receiver's queue; a
//! sender holds one receiver's lock across consecutive frames for the same receiver, so a
//! batch to one destination takes one lock. The switch's counters are per sender, added once
//! per batch.
//!
//! ```
//! use sb_io::{memory, PacketBatch, Port};
//!
//! let macs = [[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 3]];
//! let (switch, mut ports) = memory::switch("sw", &macs, 64);
//! let mut batch = PacketBatch::new(8);
//! let mut frame = [0u8; 60];
//! frame[..6].copy_from_slice(&macs[2]); // to port 2
//! frame[6..12].copy_from_slice(&macs[0]);
//! batch.push(&frame);
//! frame[..6].copy_from_slice(&[0xff; 6]); // broadcast: ports 1 and 2
//! batch.push(&frame);
//! assert_eq!(ports[0].tx_batch(&mut batch), 2);
//!
//! assert_eq!(ports[2].rx_batch(&mut batch), 2);
//! assert_eq!(ports[1].rx_batch(&mut batch), 1);
//! let s = switch.stats();
//! assert_eq!((s.forwarded, s.flooded, s.unknown_dst, s.queue_full), (1, 1, 0, 0));
//! ```

use super::{Queue, Ring};
use crate::{batch::DEFAULT_BUF_SIZE, IoError, PacketBatch, Port, PortStats};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

/// The switch's counters for frames sent by one port; each port writes only its own, once per
/// batch (aligned so that ports on different cores do not share a cache line).
#[derive(Default)]
#[repr(align(64))]
struct SenderCounters {
    forwarded: AtomicU64,
    flooded: AtomicU64,
    unknown_dst: AtomicU64,
}

struct Shared {
    name: String,
    macs: Vec<[u8; 6]>,
    index: HashMap<[u8; 6], usize>,
    queues: Vec<Arc<Queue>>,
    counters: Vec<SenderCounters>,
    buf_size: usize,
}

/// The switch made by [`switch()`]: reads its counters. The ports work without it (dropping
/// it changes nothing).
#[derive(Clone)]
pub struct Switch {
    shared: Arc<Shared>,
}

/// One port of a [`Switch`], with the MAC address it was made for. `Send`: move each port to
/// the thread of the node that uses it.
pub struct SwitchPort {
    name: String,
    index: usize,
    shared: Arc<Shared>,
    /// Receivers that got frames during the current `tx_batch` (to wake them afterwards).
    touched: Box<[bool]>,
    stats: PortStats,
}

/// Counters of one port as seen by the switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchPortStats {
    /// The port's MAC address.
    pub mac: [u8; 6],
    /// Frames queued for this port (forwarded to it or flooded to it).
    pub delivered: u64,
    /// Frames for this port dropped because its receive queue was full.
    pub queue_full: u64,
    /// Frames waiting in its receive queue now.
    pub pending: u64,
}

/// The switch's counters ([`Switch::stats`]), summed over the ports when read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Unicast frames queued at their destination port.
    pub forwarded: u64,
    /// Broadcast and multicast frames flooded to the other ports (one per frame, whatever
    /// number of queues took it).
    pub flooded: u64,
    /// Frames dropped because no other port has their destination MAC (unknown unicast, the
    /// sender's own MAC, or a frame shorter than a MAC address).
    pub unknown_dst: u64,
    /// Deliveries dropped because the receiver's queue was full (a flooded frame counts once
    /// per full receiver). The sum of [`SwitchPortStats::queue_full`].
    pub queue_full: u64,
    /// Per port, in the order of the MACs given to [`switch()`].
    pub ports: Vec<SwitchPortStats>,
}

/// A switch with one port per MAC address given (static forwarding by destination MAC); each
/// port's receive queue holds up to `capacity` frames of at most [`DEFAULT_BUF_SIZE`] bytes.
/// Port `k` is named `{name}.{k}` and has MAC `macs[k]`. See the [module docs](self).
///
/// # Panics
/// If two MACs are equal or one is a multicast address (bit 0 of byte 0 set).
pub fn switch(name: &str, macs: &[[u8; 6]], capacity: usize) -> (Switch, Vec<SwitchPort>) {
    switch_with_buf_size(name, macs, capacity, DEFAULT_BUF_SIZE)
}

/// Like [`switch()`] with frames of at most `buf_size` bytes (clamped to `64..=65535`), e.g.
/// for jumbo frames on a simulated fabric.
///
/// # Panics
/// If two MACs are equal or one is a multicast address (bit 0 of byte 0 set).
pub fn switch_with_buf_size(
    name: &str,
    macs: &[[u8; 6]],
    capacity: usize,
    buf_size: usize,
) -> (Switch, Vec<SwitchPort>) {
    let capacity = capacity.max(1);
    let buf_size = buf_size.clamp(64, u16::MAX as usize);
    let mut index = HashMap::with_capacity(macs.len());
    for (k, m) in macs.iter().enumerate() {
        assert!(
            m[0] & 1 == 0,
            "switch {name}: port {k} has multicast MAC {m:02x?}"
        );
        assert!(
            index.insert(*m, k).is_none(),
            "switch {name}: MAC {m:02x?} given twice"
        );
    }
    let shared = Arc::new(Shared {
        name: name.to_string(),
        macs: macs.to_vec(),
        index,
        queues: macs
            .iter()
            .map(|_| Queue::new(capacity, buf_size))
            .collect(),
        counters: macs.iter().map(|_| SenderCounters::default()).collect(),
        buf_size,
    });
    let ports = (0..macs.len())
        .map(|k| SwitchPort {
            name: format!("{name}.{k}"),
            index: k,
            shared: shared.clone(),
            touched: vec![false; macs.len()].into_boxed_slice(),
            stats: PortStats::default(),
        })
        .collect();
    (Switch { shared }, ports)
}

impl Switch {
    /// The name given to [`switch()`].
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The ports' MAC addresses, in port order.
    pub fn macs(&self) -> &[[u8; 6]] {
        &self.shared.macs
    }

    /// Number of ports.
    pub fn port_count(&self) -> usize {
        self.shared.macs.len()
    }

    /// The counters, summed over the ports now (takes each receive queue's lock once).
    pub fn stats(&self) -> SwitchStats {
        let sh = &*self.shared;
        let mut s = SwitchStats::default();
        for c in &sh.counters {
            s.forwarded += c.forwarded.load(Ordering::Relaxed);
            s.flooded += c.flooded.load(Ordering::Relaxed);
            s.unknown_dst += c.unknown_dst.load(Ordering::Relaxed);
        }
        for (q, mac) in sh.queues.iter().zip(&sh.macs) {
            let r = q.lock();
            s.queue_full += r.full_drops;
            s.ports.push(SwitchPortStats {
                mac: *mac,
                delivered: r.enqueued,
                queue_full: r.full_drops,
                pending: r.len as u64,
            });
        }
        s
    }
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switch")
            .field("name", &self.shared.name)
            .field("ports", &self.shared.macs.len())
            .finish()
    }
}

impl SwitchPort {
    /// The port's MAC address (frames with this destination are delivered to it).
    pub fn mac(&self) -> [u8; 6] {
        self.shared.macs[self.index]
    }

    /// The port's index in the switch (the position of its MAC in the list given).
    pub fn index(&self) -> usize {
        self.index
    }

    /// Frames waiting to be received on this port.
    pub fn pending(&self) -> usize {
        self.shared.queues[self.index].lock().len
    }
}

impl std::fmt::Debug for SwitchPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwitchPort")
            .field("name", &self.name)
            .field("mac", &self.mac())
            .finish()
    }
}

impl Port for SwitchPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn rx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        self.shared.queues[self.index]
            .lock()
            .pop_into(batch, &mut self.stats)
    }

    fn tx_batch(&mut self, batch: &mut PacketBatch) -> usize {
        let sh = &*self.shared;
        let me = self.index;
        let (mut forwarded, mut flooded, mut unknown) = (0u64, 0u64, 0u64);
        let mut sent = 0usize;
        // The receiver whose lock we hold, kept across consecutive frames for it.
        let mut held: Option<(usize, MutexGuard<'_, Ring>)> = None;
        for f in batch.iter() {
            if f.len() > sh.buf_size {
                self.stats.tx_dropped += 1;
                continue;
            }
            let took = if f.len() < 6 {
                unknown += 1;
                true
            } else if f[0] & 1 != 0 {
                held = None;
                flooded += 1;
                let mut any = sh.queues.len() == 1;
                for (k, q) in sh.queues.iter().enumerate() {
                    if k != me && q.lock().push(f).is_ok() {
                        self.touched[k] = true;
                        any = true;
                    }
                }
                any
            } else {
                let mut dst = [0u8; 6];
                dst.copy_from_slice(&f[..6]);
                match sh.index.get(&dst) {
                    Some(&k) if k != me => {
                        if held.as_ref().map(|h| h.0) != Some(k) {
                            // Release the previous receiver first: one lock at a time, so
                            // senders never wait on each other in a cycle.
                            drop(held.take());
                            held = Some((k, sh.queues[k].lock()));
                        }
                        let ring = &mut held.as_mut().expect("held just above").1;
                        if ring.push(f).is_ok() {
                            self.touched[k] = true;
                            forwarded += 1;
                            true
                        } else {
                            false
                        }
                    }
                    _ => {
                        unknown += 1;
                        true
                    }
                }
            };
            if took {
                sent += 1;
                self.stats.tx_bytes += f.len() as u64;
            } else {
                self.stats.tx_dropped += 1;
            }
        }
        drop(held);
        for (k, t) in self.touched.iter_mut().enumerate() {
            if std::mem::take(t) {
                sh.queues[k].ready.notify_all();
            }
        }
        let c = &sh.counters[me];
        for (counter, n) in [
            (&c.forwarded, forwarded),
            (&c.flooded, flooded),
            (&c.unknown_dst, unknown),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
        self.stats.tx_packets += sent as u64;
        batch.clear();
        sent
    }

    fn wait_rx(&mut self, timeout: Duration) -> Result<bool, IoError> {
        Ok(self.shared.queues[self.index].wait(timeout))
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

    fn mac(i: u8) -> [u8; 6] {
        [0x02, 0, 0, 0, 0x5b, i]
    }

    /// A frame from `src` to `dst` carrying `seq`, `len` bytes long (at least 16).
    fn frame(dst: [u8; 6], src: [u8; 6], seq: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len.max(16)];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..16].copy_from_slice(&seq.to_be_bytes());
        f
    }

    fn recv_all(p: &mut SwitchPort) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut b = PacketBatch::new(16);
        loop {
            b.clear();
            if p.rx_batch(&mut b) == 0 {
                return out;
            }
            out.extend(b.iter().map(|f| f.to_vec()));
        }
    }

    #[test]
    fn forwards_by_destination_mac() {
        let macs = [mac(1), mac(2), mac(3)];
        let (sw, mut ports) = switch("s", &macs, 16);
        assert_eq!(ports[1].name(), "s.1");
        assert_eq!(ports[2].mac(), mac(3));
        let mut b = PacketBatch::new(8);
        b.push(&frame(mac(3), mac(1), 1, 60));
        b.push(&frame(mac(2), mac(1), 2, 70));
        b.push(&frame(mac(3), mac(1), 3, 80));
        assert_eq!(ports[0].tx_batch(&mut b), 3);
        assert!(b.is_empty());
        assert_eq!(
            recv_all(&mut ports[2]),
            vec![frame(mac(3), mac(1), 1, 60), frame(mac(3), mac(1), 3, 80)]
        );
        assert_eq!(recv_all(&mut ports[1]), vec![frame(mac(2), mac(1), 2, 70)]);
        assert!(recv_all(&mut ports[0]).is_empty());
        let s = sw.stats();
        assert_eq!(s.forwarded, 3);
        assert_eq!((s.flooded, s.unknown_dst, s.queue_full), (0, 0, 0));
        assert_eq!(
            s.ports.iter().map(|p| p.delivered).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert_eq!(ports[0].stats().tx_packets, 3);
        assert_eq!(ports[0].stats().tx_bytes, 210);
        assert_eq!(ports[2].stats().rx_packets, 2);
        assert_eq!(ports[2].stats().rx_bytes, 140);
    }

    #[test]
    fn floods_broadcast_and_multicast_to_every_other_port() {
        let macs = [mac(1), mac(2), mac(3), mac(4)];
        let (sw, mut ports) = switch("f", &macs, 16);
        let mut b = PacketBatch::new(8);
        b.push(&frame([0xff; 6], mac(2), 1, 60));
        b.push(&frame([0x01, 0, 0x5e, 0, 0, 1], mac(2), 2, 60));
        assert_eq!(ports[1].tx_batch(&mut b), 2);
        for k in [0, 2, 3] {
            assert_eq!(
                recv_all(&mut ports[k]),
                vec![
                    frame([0xff; 6], mac(2), 1, 60),
                    frame([0x01, 0, 0x5e, 0, 0, 1], mac(2), 2, 60)
                ],
                "port {k}"
            );
        }
        assert!(recv_all(&mut ports[1]).is_empty(), "no echo to the sender");
        let s = sw.stats();
        assert_eq!((s.forwarded, s.flooded, s.unknown_dst), (0, 2, 0));
        assert_eq!(s.ports[1].delivered, 0);
        assert_eq!(s.ports[3].delivered, 2);
    }

    #[test]
    fn unknown_destination_is_dropped_and_counted() {
        let macs = [mac(1), mac(2)];
        let (sw, mut ports) = switch("u", &macs, 16);
        let mut b = PacketBatch::new(8);
        b.push(&frame(mac(9), mac(1), 1, 60)); // nobody
        b.push(&frame(mac(1), mac(1), 2, 60)); // the sender itself
        b.push(&[0x02, 0, 0]); // runt
        b.push(&frame(mac(2), mac(1), 3, 60));
        assert_eq!(ports[0].tx_batch(&mut b), 4);
        assert_eq!(recv_all(&mut ports[1]), vec![frame(mac(2), mac(1), 3, 60)]);
        assert!(recv_all(&mut ports[0]).is_empty());
        let s = sw.stats();
        assert_eq!((s.forwarded, s.unknown_dst, s.queue_full), (1, 3, 0));
        assert_eq!(ports[0].stats().tx_dropped, 0);
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let macs = [mac(1), mac(2), mac(3)];
        let (sw, mut ports) = switch("q", &macs, 3);
        let mut b = PacketBatch::new(8);
        for i in 0..5 {
            b.push(&frame(mac(2), mac(1), i, 60));
        }
        assert_eq!(ports[0].tx_batch(&mut b), 3);
        assert_eq!(ports[0].stats().tx_dropped, 2);
        // A broadcast reaches port 3 (room) but not port 2 (full): sent, one queue_full.
        b.push(&frame([0xff; 6], mac(1), 9, 60));
        assert_eq!(ports[0].tx_batch(&mut b), 1);
        // Another sender to the full port: dropped at that sender.
        b.push(&frame(mac(2), mac(3), 10, 60));
        assert_eq!(ports[2].tx_batch(&mut b), 0);
        assert_eq!(ports[2].stats().tx_dropped, 1);
        // Frames larger than a queue buffer never enter.
        let mut big = PacketBatch::with_buf_size(1, 2 * DEFAULT_BUF_SIZE);
        assert!(big.push(&frame(mac(3), mac(1), 11, DEFAULT_BUF_SIZE + 1)));
        assert_eq!(ports[0].tx_batch(&mut big), 0);
        let s = sw.stats();
        assert_eq!(s.queue_full, 4);
        assert_eq!(s.ports[1].queue_full, 4);
        assert_eq!(s.ports[1].pending, 3);
        assert_eq!(s.ports[2].delivered, 1);
        assert_eq!((s.forwarded, s.flooded), (3, 1));
        assert_eq!(ports[0].stats().tx_dropped, 3);
        assert_eq!(
            recv_all(&mut ports[1]),
            (0..3)
                .map(|i| frame(mac(2), mac(1), i, 60))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn order_is_kept_per_sender_and_receiver_across_threads() {
        const N: u32 = 20_000;
        let macs = [mac(1), mac(2), mac(3)];
        let (sw, ports) = switch("o", &macs, 64);
        let mut it = ports.into_iter();
        let (a, b, mut c) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        // a and b each send N frames to c, alternating batch sizes; c checks that each sender's
        // sequence arrives in order without gaps (a full queue makes the sender retry).
        let sender = |mut p: SwitchPort, me: [u8; 6]| {
            std::thread::spawn(move || {
                let mut batch = PacketBatch::new(32);
                let mut seq = 0u32;
                while seq < N {
                    let n = (1 + seq % 31).min(N - seq);
                    for i in 0..n {
                        batch.push(&frame(mac(3), me, seq + i, 60 + (i as usize % 7)));
                    }
                    // Every frame goes to c, whose lock the sender holds for the whole batch, so
                    // the dropped frames are a suffix of it: resend from the first of them.
                    let sent = p.tx_batch(&mut batch) as u32;
                    seq += sent;
                    if sent < n {
                        std::thread::yield_now();
                    }
                }
                p
            })
        };
        let ta = sender(a, mac(1));
        let tb = sender(b, mac(2));
        let mut next = [0u32; 2];
        let mut batch = PacketBatch::new(64);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while next != [N, N] {
            assert!(std::time::Instant::now() < deadline, "stuck at {next:?}");
            c.wait_rx(Duration::from_millis(10)).unwrap();
            batch.clear();
            c.rx_batch(&mut batch);
            for f in batch.iter() {
                let s = (f[11] - 1) as usize;
                let seq = u32::from_be_bytes(f[12..16].try_into().unwrap());
                assert_eq!(seq, next[s], "sender {s}");
                next[s] += 1;
            }
        }
        let (a, b) = (ta.join().unwrap(), tb.join().unwrap());
        assert_eq!(a.stats().tx_packets, N as u64);
        assert_eq!(b.stats().tx_packets, N as u64);
        assert_eq!(c.stats().rx_packets, 2 * N as u64);
        assert_eq!(sw.stats().forwarded, 2 * N as u64);
    }

    #[test]
    fn wait_rx_wakes_on_transmit() {
        let (_sw, ports) = switch("w", &[mac(1), mac(2)], 4);
        let mut it = ports.into_iter();
        let (mut a, mut b) = (it.next().unwrap(), it.next().unwrap());
        assert!(!b.wait_rx(Duration::from_millis(1)).unwrap());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let mut batch = PacketBatch::new(1);
            batch.push(&frame(mac(2), mac(1), 0, 60));
            a.tx_batch(&mut batch);
        });
        assert!(b.wait_rx(Duration::from_secs(10)).unwrap());
        t.join().unwrap();
    }

    #[test]
    #[should_panic(expected = "given twice")]
    fn duplicate_macs_are_refused() {
        let _ = switch("d", &[mac(1), mac(1)], 4);
    }

    #[test]
    #[should_panic(expected = "multicast")]
    fn multicast_port_macs_are_refused() {
        let _ = switch("m", &[[0x01, 0, 0, 0, 0, 1]], 4);
    }

    /// One step of the model test: port `from` sends frames to destinations picked from
    /// `dsts` (indices into [port MACs..., unknown, broadcast, multicast]), or port `from`
    /// receives up to `n` frames.
    #[derive(Clone, Debug)]
    enum Op {
        Send { from: usize, dsts: Vec<usize> },
        Recv { at: usize, n: usize },
    }

    fn op(ports: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..ports, proptest::collection::vec(0..ports + 3, 0..12))
                .prop_map(|(from, dsts)| Op::Send { from, dsts }),
            (0..ports, 1usize..12).prop_map(|(at, n)| Op::Recv { at, n }),
        ]
    }

    proptest! {
        /// Every frame ends up exactly in the queues a plain model says (per-port bounded
        /// FIFOs fed by destination MAC), and every counter matches the model's.
        #[test]
        fn matches_a_model(
            (nports, cap, ops) in (1usize..5, 1usize..6).prop_flat_map(|(p, c)| {
                (Just(p), Just(c), proptest::collection::vec(op(p), 1..60))
            })
        ) {
            let macs: Vec<[u8; 6]> = (0..nports as u8).map(|i| mac(i + 1)).collect();
            let (sw, mut ports) = switch("p", &macs, cap);
            let mut model: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); nports];
            let mut want = SwitchStats::default();
            let mut tx_dropped = vec![0u64; nports];
            let mut seq = 0u32;
            let mut batch = PacketBatch::new(12);
            for o in ops {
                match o {
                    Op::Send { from, dsts } => {
                        batch.clear();
                        for d in dsts {
                            let dst = match d.checked_sub(nports) {
                                None => macs[d],
                                Some(0) => mac(0xee),
                                Some(1) => [0xff; 6],
                                Some(_) => [0x33, 0x33, 0, 0, 0, 1],
                            };
                            let f = frame(dst, macs[from], seq, 16 + seq as usize % 50);
                            seq += 1;
                            batch.push(&f);
                            if dst[0] & 1 != 0 {
                                want.flooded += 1;
                                let mut any = nports == 1;
                                for (k, q) in model.iter_mut().enumerate() {
                                    if k == from { continue; }
                                    if q.len() < cap { q.push_back(f.clone()); any = true; }
                                    else { want.queue_full += 1; }
                                }
                                if !any { tx_dropped[from] += 1; }
                            } else if let Some(k) = macs.iter().position(|m| *m == dst).filter(|&k| k != from) {
                                if model[k].len() < cap {
                                    model[k].push_back(f);
                                    want.forwarded += 1;
                                } else {
                                    want.queue_full += 1;
                                    tx_dropped[from] += 1;
                                }
                            } else {
                                want.unknown_dst += 1;
                            }
                        }
                        ports[from].tx_batch(&mut batch);
                    }
                    Op::Recv { at, n } => {
                        let mut small = PacketBatch::new(n);
                        let got = ports[at].rx_batch(&mut small);
                        prop_assert_eq!(got, n.min(model[at].len()));
                        for f in small.iter() {
                            prop_assert_eq!(Some(f.to_vec()), model[at].pop_front());
                        }
                    }
                }
            }
            for (k, p) in ports.iter_mut().enumerate() {
                prop_assert_eq!(p.pending(), model[k].len());
                prop_assert_eq!(recv_all(p), Vec::from(model[k].clone()));
                prop_assert_eq!(p.stats().tx_dropped, tx_dropped[k]);
            }
            let got = sw.stats();
            prop_assert_eq!(
                (got.forwarded, got.flooded, got.unknown_dst, got.queue_full),
                (want.forwarded, want.flooded, want.unknown_dst, want.queue_full)
            );
        }
    }
}
