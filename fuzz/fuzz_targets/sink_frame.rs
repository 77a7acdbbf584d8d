//! Any received frame: the sink's stamp extraction and bookkeeping never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sb_traffic::check::fuzz_observe(data);
});
