//! CLOCK_MONOTONIC in nanoseconds: the send and receive times of the stamps. Network namespaces
//! share this clock, so a generator in one namespace and a sink in another can subtract.
#![allow(unsafe_code)]

/// Nanoseconds of CLOCK_MONOTONIC.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds since the Unix epoch (CLOCK_REALTIME), for pcap timestamps.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_advances() {
        let a = super::monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::monotonic_ns();
        assert!(b >= a + 1_000_000);
    }
}
