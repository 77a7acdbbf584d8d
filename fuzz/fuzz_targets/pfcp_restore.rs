#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sb_pfcp::fuzzing::pfcp_restore(data));
