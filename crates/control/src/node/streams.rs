//! The transport pieces of the fast-path protocol: the round-trip estimator, the ordered
//! cumulatively acknowledged streams an owner keeps per peer, and the bounded memory of
//! completed requests.

use super::Map;
use crate::Nanos;
use std::collections::VecDeque;

/// A smoothed round-trip time and its variation (RFC 6298's estimator): the retransmission
/// timeout of a stream or of forwards follows what acknowledgments really take, so a loaded
/// cluster (acks late by a few control-loop iterations) does not resend what is on its way.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Rtt {
    /// 0: no sample yet.
    pub(super) srtt: Nanos,
    pub(super) rttvar: Nanos,
}

impl Rtt {
    pub(super) fn sample(&mut self, r: Nanos) {
        if self.srtt == 0 {
            self.srtt = r.max(1);
            self.rttvar = r / 2;
        } else {
            self.rttvar = (3 * self.rttvar + self.srtt.abs_diff(r)) / 4;
            self.srtt = ((7 * self.srtt + r) / 8).max(1);
        }
    }

    /// A timeout of `rto` with no sample to explain it: the estimate becomes at least that
    /// long (later sends start from `3 rto`; samples bring it down again).
    pub(super) fn timed_out(&mut self, rto: Nanos) {
        if self.srtt < rto {
            self.srtt = rto;
            self.rttvar = self.rttvar.max(rto / 2);
        }
    }

    /// `srtt + 4 rttvar`, within the tuning's bounds (`min` until a sample exists).
    pub(super) fn rto(&self, min: Nanos, max: Nanos) -> Nanos {
        (self.srtt + 4 * self.rttvar).clamp(min, max.max(min))
    }
}

/// What an item of a stream costs to hold, beside its slot in the queue: its bytes on the wire
/// (a delta's bytes are shared by every peer's stream, and held by the last one to drop it).
pub(super) trait Weigh {
    fn weight(&self) -> usize;
}

impl Weigh for crate::wire::FibItem {
    fn weight(&self) -> usize {
        crate::wire::fib_item_len(self)
    }
}

impl Weigh for std::sync::Arc<[u8]> {
    fn weight(&self) -> usize {
        self.len()
    }
}

/// An ordered, cumulatively acknowledged stream of items to one peer (go-back-N with a window).
pub(super) struct OutStream<T> {
    /// Read it only: [`OutStream::push`], [`OutStream::pop_through`] and
    /// [`OutStream::drop_all`] keep `weight` with it.
    pub(super) items: VecDeque<(u64, T)>,
    /// The items' [`Weigh::weight`]s together.
    weight: usize,
    /// Items up to this one were dropped unacknowledged ([`OutStream::drop_all`]): the window
    /// counts from here too.
    pub(super) base: u64,
    pub(super) next: u64,
    pub(super) acked: u64,
    pub(super) sent_upto: u64,
    pub(super) retry_at: Option<Nanos>,
    pub(super) rto: Nanos,
    /// One item being timed: its sequence number and when it was first sent (Karn: never an
    /// item that was sent again).
    pub(super) timed: Option<(u64, Nanos)>,
    /// The highest sequence number ever sent.
    pub(super) max_sent: u64,
    pub(super) rtt: Rtt,
}

impl<T: Weigh> OutStream<T> {
    pub(super) fn new(rto: Nanos) -> Self {
        OutStream {
            items: VecDeque::new(),
            weight: 0,
            base: 0,
            next: 1,
            acked: 0,
            sent_upto: 0,
            retry_at: None,
            rto,
            timed: None,
            max_sent: 0,
            rtt: Rtt::default(),
        }
    }

    pub(super) fn push(&mut self, seq: u64, t: T) {
        self.weight += t.weight();
        self.items.push_back((seq, t));
        self.next = seq + 1;
    }

    /// The items not acknowledged yet, in order.
    pub(super) fn items(&self) -> &VecDeque<(u64, T)> {
        &self.items
    }

    /// Forgets the items up to `seq` (acknowledged, or covered by a piece).
    pub(super) fn pop_through(&mut self, seq: u64) {
        while let Some((s, _)) = self.items.front() {
            if *s > seq {
                break;
            }
            let (_, t) = self.items.pop_front().expect("front");
            self.weight -= t.weight();
        }
    }

    /// Drops every item (their memory too), numbers and acknowledgement kept: nothing is
    /// sent or waited for until new items come.
    pub(super) fn drop_all(&mut self) {
        self.items = VecDeque::new();
        self.weight = 0;
        self.retry_at = None;
        self.timed = None;
        self.sent_upto = self.sent_upto.max(self.next.saturating_sub(1));
        self.base = self.next.saturating_sub(1);
    }

    /// The highest sequence number that may go now: `window` past the acknowledgement (or
    /// past the last item dropped).
    pub(super) fn limit(&self, window: usize) -> u64 {
        self.acked.max(self.base) + window as u64
    }

    /// Bytes held: the queue's slots (its capacity) and the items' weights.
    pub(super) fn bytes(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<(u64, T)>() + self.weight
    }

    /// Cumulative ack of `a`; the timeout goes back to the estimate within `[min, max]`.
    pub(super) fn ack(&mut self, a: u64, now: Nanos, min: Nanos, max: Nanos) {
        if a <= self.acked {
            return;
        }
        if let Some((seq, at)) = self.timed {
            if a >= seq {
                self.rtt.sample(now.saturating_sub(at));
                self.timed = None;
            }
        }
        let rto = self.rtt.rto(min, max);
        self.acked = a;
        self.pop_through(a);
        self.sent_upto = self.sent_upto.max(a);
        self.rto = rto;
        self.retry_at = (!self.items.is_empty()).then_some(now + rto);
    }

    /// Items up to `sent_upto` went out at `now`: time the last one if it went out for the
    /// first time and no other is timed, and arm the timeout if anything is unacknowledged.
    pub(super) fn sent_through(&mut self, now: Nanos) {
        if self.sent_upto > self.max_sent {
            if self.timed.is_none() {
                self.timed = Some((self.sent_upto, now));
            }
            self.max_sent = self.sent_upto;
        }
        if !self.items.is_empty() && self.retry_at.is_none() {
            self.retry_at = Some(now + self.rto);
        }
    }

    /// A timeout: everything unacknowledged goes again, with the timeout doubled.
    pub(super) fn retransmit(&mut self, floor: u64, max: Nanos) {
        self.sent_upto = self.acked.max(floor);
        self.rto = (self.rto * 2).min(max);
        self.retry_at = None;
        self.timed = None;
    }

    /// Index in `items` of the first item not sent yet.
    pub(super) fn first_unsent(&self) -> usize {
        match self.items.front() {
            Some(&(s, _)) => (self.sent_upto + 1).saturating_sub(s) as usize,
            None => 0,
        }
    }
}

/// A bounded memory of completed requests: key -> reply (None while in progress).
pub(super) struct Remembered<K> {
    pub(super) map: Map<K, Option<Vec<u8>>>,
    pub(super) order: VecDeque<K>,
    pub(super) cap: usize,
    /// Bytes of the replies held (their vectors' capacities).
    pub(super) reply_bytes: usize,
}

impl<K: std::hash::Hash + Eq + Clone> Remembered<K> {
    pub(super) fn new(cap: usize) -> Self {
        Remembered {
            map: Map::default(),
            order: VecDeque::new(),
            cap,
            reply_bytes: 0,
        }
    }

    /// Remembers request `k` (in progress); returns the request forgotten for it.
    pub(super) fn start(&mut self, k: K) -> Option<K> {
        let mut forgot = None;
        if self.order.len() >= self.cap {
            if let Some(old) = self.order.pop_front() {
                if let Some(Some(r)) = self.map.remove(&old) {
                    self.reply_bytes -= r.capacity();
                }
                forgot = Some(old);
            }
        }
        if let Some(Some(r)) = self.map.insert(k.clone(), None) {
            self.reply_bytes -= r.capacity();
        }
        self.order.push_back(k);
        forgot
    }

    /// Keeps `reply` as the answer to request `k`, if `k` is still remembered.
    pub(super) fn finish(&mut self, k: &K, reply: Vec<u8>) {
        if let Some(slot) = self.map.get_mut(k) {
            self.reply_bytes += reply.capacity();
            if let Some(old) = slot.replace(reply) {
                self.reply_bytes -= old.capacity();
            }
        }
    }

    /// Bytes held: the map's table (from its capacity), the queue's and the replies'.
    pub(super) fn bytes(&self) -> usize {
        sb_common::hash_table_bytes(
            self.map.capacity(),
            std::mem::size_of::<(K, Option<Vec<u8>>)>(),
        ) + self.order.capacity() * std::mem::size_of::<K>()
            + self.reply_bytes
    }
}

#[cfg(test)]
mod remembered_tests {
    use super::Remembered;

    #[test]
    fn replies_are_counted_and_forgotten_with_their_requests() {
        let mut r: Remembered<u64> = Remembered::new(4);
        assert_eq!(r.reply_bytes, 0);
        for k in 0..4u64 {
            r.start(k);
        }
        r.finish(&1, vec![0; 10]);
        r.finish(&2, vec![0; 20]);
        assert_eq!(r.reply_bytes, 30);
        // A second reply to one request replaces the first.
        r.finish(&2, vec![0; 5]);
        assert_eq!(r.reply_bytes, 15);
        // A reply to a request not remembered is dropped.
        r.finish(&99, vec![0; 100]);
        assert_eq!(r.reply_bytes, 15);
        // The fifth request forgets the first (no reply), the sixth the second (10 bytes).
        r.start(4);
        assert_eq!(r.reply_bytes, 15);
        r.start(5);
        assert_eq!(r.reply_bytes, 5);
        assert!(!r.map.contains_key(&1) && r.map.get(&2) == Some(&Some(vec![0; 5])));
        let before = r.bytes();
        for k in 6..1000u64 {
            r.start(k);
            r.finish(&k, vec![0; 8]);
        }
        assert_eq!(r.reply_bytes, 4 * 8, "bounded by the count remembered");
        assert!(
            r.bytes() <= before + 4 * 8 + 1024,
            "{} after {before}",
            r.bytes()
        );
    }
}

#[cfg(test)]
mod out_stream_tests {
    use super::OutStream;
    use std::sync::Arc;

    #[test]
    fn bytes_follow_the_items_and_a_drop_frees_them() {
        let mut s: OutStream<Arc<[u8]>> = OutStream::new(1);
        assert_eq!(s.bytes(), 0);
        for seq in 1..=100u64 {
            s.push(seq, Arc::from(vec![0u8; 10]));
        }
        let slot = std::mem::size_of::<(u64, Arc<[u8]>)>();
        assert!(s.bytes() >= 100 * (10 + slot), "{}", s.bytes());
        s.pop_through(40);
        assert_eq!(s.items().len(), 60);
        assert_eq!(s.weight, 600);
        // An acknowledgement pops as well.
        s.ack(50, 10, 1, 100);
        assert_eq!(s.weight, 500);
        s.drop_all();
        assert_eq!(s.bytes(), 0, "no items, no queue");
        assert_eq!((s.acked, s.next, s.base), (50, 101, 100));
        // The window counts from the last item dropped.
        assert_eq!(s.limit(8), 108);
        s.push(101, Arc::from(vec![0u8; 3]));
        assert_eq!((s.first_unsent(), s.weight), (0, 3));
    }
}
