//! Any frame on any port of any node, raw or behind a fabric shim: no engine panics, and every
//! frame is forwarded once or counted as dropped.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sb_engine::fuzzing::run_frames(data);
});
