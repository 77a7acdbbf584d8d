//! Any flows file: the first-column parser never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = sb_traffic::flows::parse_flows(s);
    }
});
