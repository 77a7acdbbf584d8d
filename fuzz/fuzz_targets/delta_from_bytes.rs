//! Delta::from_bytes on arbitrary bytes: never panics; accepted deltas round-trip and apply (or
//! are refused without changing the table).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sb_setsep::fuzzing::load_delta(data);
});
