//! Any bytes as a control datagram (raw, and behind a valid header and tag so the body parser
//! and the node's handlers are reached), as a client reply, a log record, a range's snapshot
//! and its state records: nothing panics, whatever parses re-encodes to the same bytes, and a
//! node only sends what parses.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sb_control::fuzzing::parse(data);
    sb_control::fuzzing::handle(data);
});
