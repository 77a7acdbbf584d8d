//! The sink's bookkeeping: per stream, which sequence numbers arrived (a bitset), in which order,
//! and how late. Pure: the receive time is passed in.

use std::collections::HashMap;

use serde::Serialize;

use crate::frame::parse_stamp;
use crate::stamp::{Stamp, TOTAL_UNKNOWN};

/// Highest sequence number tracked per stream (a 16 MiB bitset); stamps beyond count as malformed.
pub const MAX_SEQ: u64 = 1 << 27;
/// Latency samples kept (each 8 bytes); beyond this, further samples are not stored.
pub const MAX_SAMPLES: usize = 1 << 24;

#[derive(Default, Debug)]
struct StreamState {
    seen: Vec<u64>,
    unique: u64,
    max_seq: Option<u64>,
    total: u32,
}

/// Accumulates what arrived.
#[derive(Default, Debug)]
pub struct Checker {
    streams: HashMap<u32, StreamState>,
    received: u64,
    duplicates: u64,
    reordered: u64,
    malformed: u64,
    other: u64,
    latencies_ns: Vec<u64>,
    max_latency_ns: u64,
    first_ns: Option<u64>,
    last_ns: u64,
}

/// Latency summary in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

/// What `scalebricks sink` prints.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SinkReport {
    /// Stamped frames received (duplicates included).
    pub received: u64,
    /// Distinct sequence numbers received.
    pub unique: u64,
    /// Frames expected: the streams' announced totals (or the highest sequence seen + 1), or
    /// `--expect` if larger.
    pub expected: u64,
    /// `expected - unique` (never negative).
    pub lost: u64,
    /// Frames whose sequence number had been seen already.
    pub duplicates: u64,
    /// Frames that arrived after a higher sequence number of their stream.
    pub reordered: u64,
    /// Frames that failed to parse (bad lengths, truncated headers, bad checksum, ...).
    pub malformed: u64,
    /// Well-formed frames that are not the generator's (ARP, foreign traffic).
    pub other: u64,
    /// Generator streams seen.
    pub streams: usize,
    /// One-way latency (send stamp to receive), microseconds.
    pub latency_us: Latency,
    /// Time between the first and last stamped frame, seconds.
    pub span_seconds: f64,
}

impl Checker {
    /// An empty checker.
    pub fn new() -> Checker {
        Checker::default()
    }

    /// Accounts one received frame, received at `now_ns` (CLOCK_MONOTONIC).
    pub fn observe(&mut self, frame: &[u8], now_ns: u64) {
        match parse_stamp(frame) {
            Err(_) => self.malformed += 1,
            Ok(None) => self.other += 1,
            Ok(Some(s)) => self.observe_stamp(&s, now_ns),
        }
    }

    /// Accounts one stamp.
    pub fn observe_stamp(&mut self, s: &Stamp, now_ns: u64) {
        if s.seq >= MAX_SEQ {
            self.malformed += 1;
            return;
        }
        self.received += 1;
        self.first_ns.get_or_insert(now_ns);
        self.last_ns = now_ns;
        let st = self.streams.entry(s.stream).or_default();
        st.total = s.total;
        let (w, bit) = ((s.seq / 64) as usize, 1u64 << (s.seq % 64));
        if st.seen.len() <= w {
            st.seen.resize(w + 1, 0);
        }
        if st.seen[w] & bit != 0 {
            self.duplicates += 1;
            return;
        }
        st.seen[w] |= bit;
        st.unique += 1;
        match st.max_seq {
            Some(m) if s.seq < m => self.reordered += 1,
            _ => st.max_seq = Some(s.seq),
        }
        let lat = now_ns.saturating_sub(s.send_ns);
        self.max_latency_ns = self.max_latency_ns.max(lat);
        if self.latencies_ns.len() < MAX_SAMPLES {
            self.latencies_ns.push(lat);
        }
    }

    /// Distinct frames received so far.
    pub fn unique(&self) -> u64 {
        self.streams.values().map(|s| s.unique).sum()
    }

    /// True when at least `expect` distinct frames arrived and every stream with a known total
    /// is complete.
    pub fn complete(&self, expect: u64) -> bool {
        self.unique() >= expect
            && self
                .streams
                .values()
                .all(|s| s.total == TOTAL_UNKNOWN || s.unique >= u64::from(s.total))
    }

    /// The summary; `expect` raises the expected count (catches streams lost entirely).
    pub fn report(&self, expect: Option<u64>) -> SinkReport {
        let from_streams: u64 = self
            .streams
            .values()
            .map(|s| {
                if s.total == TOTAL_UNKNOWN {
                    s.max_seq.map_or(0, |m| m + 1)
                } else {
                    u64::from(s.total)
                }
            })
            .sum();
        let expected = from_streams.max(expect.unwrap_or(0));
        let unique = self.unique();
        let mut lat = self.latencies_ns.clone();
        lat.sort_unstable();
        let pct = |p: f64| -> f64 {
            if lat.is_empty() {
                return 0.0;
            }
            let idx = ((p * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1;
            lat[idx] as f64 / 1000.0
        };
        let mean = if lat.is_empty() {
            0.0
        } else {
            lat.iter().map(|&l| l as f64).sum::<f64>() / lat.len() as f64 / 1000.0
        };
        SinkReport {
            received: self.received,
            unique,
            expected,
            lost: expected.saturating_sub(unique),
            duplicates: self.duplicates,
            reordered: self.reordered,
            malformed: self.malformed,
            other: self.other,
            streams: self.streams.len(),
            latency_us: Latency {
                p50: pct(0.50),
                p99: pct(0.99),
                max: self.max_latency_ns as f64 / 1000.0,
                mean,
            },
            span_seconds: self
                .first_ns
                .map_or(0.0, |f| self.last_ns.saturating_sub(f) as f64 / 1e9),
        }
    }
}

/// The fuzzed logic: feeds `data` to a fresh checker as one frame, then as a stream of frames
/// (split at every 0xFF byte), and builds the report. Must never panic.
pub fn fuzz_observe(data: &[u8]) -> SinkReport {
    let mut c = Checker::new();
    c.observe(data, u64::from_le_bytes([0, 0, 0, 0, 0, 0, 1, 0]));
    for (i, part) in data.split(|&b| b == 0xff).enumerate() {
        c.observe(part, i as u64);
    }
    let _ = c.complete(1);
    c.report(Some(data.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn fuzz_logic_never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let r = fuzz_observe(&data);
            proptest::prop_assert!(r.unique <= r.received);
        }

        #[test]
        fn stamped_frames_with_random_fields_never_panic(stream: u32, seq: u64, send: u64, total: u32, size in 74usize..300) {
            let mut buf = vec![0u8; size];
            let t = crate::frame::FrameTemplate {
                src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2],
                src_ip: std::net::Ipv4Addr::new(10, 1, 0, 2), proto: crate::frame::Proto::Udp, dst_port: 1,
            };
            let s = Stamp { stream, seq, send_ns: send, flow: 0, total };
            crate::frame::build_frame(&t, &mut buf, std::net::Ipv4Addr::new(100, 64, 0, 1), &s).unwrap();
            let mut c = Checker::new();
            c.observe(&buf, 0);
            c.observe(&buf, u64::MAX);
            let r = c.report(None);
            proptest::prop_assert_eq!(r.received + r.malformed, 2);
        }
    }

    fn st(stream: u32, seq: u64, total: u32) -> Stamp {
        Stamp {
            stream,
            seq,
            send_ns: 1000,
            flow: 0,
            total,
        }
    }

    #[test]
    fn counts_loss_dups_reorder_latency() {
        let mut c = Checker::new();
        for seq in [0u64, 1, 3, 2, 3, 5] {
            c.observe_stamp(&st(1, seq, 8), 1000 + 1000 * (seq + 1));
        }
        c.observe_stamp(&st(2, 0, 1), 5000);
        c.observe(&[0u8; 10], 0);
        let r = c.report(None);
        assert_eq!(r.received, 7);
        assert_eq!(r.unique, 6);
        assert_eq!(r.expected, 9);
        assert_eq!(r.lost, 3); // 4, 6, 7 of stream 1
        assert_eq!(r.duplicates, 1);
        assert_eq!(r.reordered, 1);
        assert_eq!(r.malformed, 1);
        assert_eq!(r.streams, 2);
        assert_eq!(r.latency_us.max, 6.0);
        assert!(!c.complete(0));
        assert_eq!(c.report(Some(20)).lost, 14);
    }

    #[test]
    fn complete_when_all_totals_arrive() {
        let mut c = Checker::new();
        assert!(!c.complete(1));
        for seq in 0..4 {
            c.observe_stamp(&st(9, seq, 4), 2000);
        }
        assert!(c.complete(4));
        assert!(!c.complete(5));
        let r = c.report(Some(4));
        assert_eq!((r.lost, r.latency_us.p50, r.latency_us.p99), (0, 1.0, 1.0));
    }
}
