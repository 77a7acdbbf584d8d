//! The fuzz targets' entry points (`crates/pfcp/fuzz`), also run by the property tests.

use crate::message::Message;

/// Parses `data` as a datagram; whatever parses must build, and parse again to itself.
pub fn pfcp_message(data: &[u8]) {
    if let Ok(msg) = Message::parse(data) {
        let bytes = msg
            .to_bytes()
            .expect("a parsed message can be written again");
        assert_eq!(Message::parse(&bytes).as_ref(), Ok(&msg));
    }
}
