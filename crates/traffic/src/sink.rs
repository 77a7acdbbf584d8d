//! The sink loop: receive batches on one port until the duration ends or everything expected has
//! arrived, feeding a [`Checker`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sb_io::{PacketBatch, Port};

use crate::check::{Checker, SinkReport};
use crate::clock::monotonic_ns;

/// Receives on `port` for at most `duration`; stops early once `expect` distinct frames arrived
/// and every stream is complete (only when `expect` is given), or when `stop` is set.
pub fn run_sink(
    port: &mut dyn Port,
    duration: Duration,
    expect: Option<u64>,
    stop: &AtomicBool,
) -> SinkReport {
    let mut checker = Checker::new();
    let mut batch = PacketBatch::new(64);
    let t0 = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let left = duration.saturating_sub(t0.elapsed());
        if left.is_zero() {
            break;
        }
        if let Some(e) = expect {
            if checker.complete(e) {
                break;
            }
        }
        let _ = port.wait_rx(left.min(Duration::from_millis(20)));
        loop {
            batch.clear();
            let n = port.rx_batch(&mut batch);
            if n == 0 {
                break;
            }
            let now = monotonic_ns();
            for f in batch.iter() {
                checker.observe(f, now);
            }
        }
    }
    checker.report(expect)
}
