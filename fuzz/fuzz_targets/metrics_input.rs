//! What the metrics endpoint takes from outside: HTTP request heads, `Accept` headers and the
//! control status JSON never make it panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sb_node::metrics::fuzz_input(data);
});
