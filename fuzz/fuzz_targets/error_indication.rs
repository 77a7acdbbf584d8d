#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sb_wire::fuzzing::error_indication(data));
