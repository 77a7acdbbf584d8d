//! Any flows or key file: the key CSV parser (flows' first column, tables' key,value) never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = sb_traffic::flows::parse_flows(s);
        let _ = sb_traffic::keys::Reader::new("fuzz", s.as_bytes()).for_each(|_, _| Ok(()));
    }
});
