//! The files a node reads: table entry files, the flows CSV and the node configuration never
//! make it panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use sb_node::tables::{parse_entries, EntryKind};

fuzz_target!(|data: &[u8]| {
    for kind in [EntryKind::Fib, EntryKind::Uplink] {
        let _ = parse_entries(data, 0, 0, kind);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = sb_engine::lte::read_flows(s, 4);
        if let Ok(c) = serde_json::from_str::<sb_node::NodeFile>(s) {
            let _ = c.check();
        }
    }
});
