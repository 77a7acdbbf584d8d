#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sb_tea::fuzzing::write(data));
