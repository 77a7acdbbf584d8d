//! Inputs that once broke a parser or a fuzz invariant (found by cargo-fuzz or proptest), kept
//! so they keep passing.

use sb_wire::fuzzing;

/// cargo-fuzz `ipv4`: a valid header whose checksum is 0xffff (negative zero) re-emits as 0x0000;
/// the invariant "re-emitting a canonical header gives the same bytes" must allow that.
#[test]
fn ipv4_negative_zero_checksum() {
    let data = [
        0x45, 0xb8, 0x00, 0x1d, 0x10, 0xe1, 0x40, 0x00, 0x40, 0x11, 0xff, 0xff, 0xff, 0xf8, 0xc6,
        0x33, 0x64, 0x0a, 0xff, 0x00, 0xff, 0x00, 0x0a, 0x00, 0x0b, 0x00, 0x4f, 0x88, 0x7a,
    ];
    assert!(sb_wire::Ipv4Packet::new_checked(&data[..])
        .unwrap()
        .verify_checksum());
    fuzzing::all(&data);
}

/// proptest `gtpu_round_trip`: an 8-byte GTP-U message (no optional word) made
/// `first_ext_type` read byte 11, past the buffer.
#[test]
fn gtpu_eight_byte_message() {
    let data = [0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00];
    let p = sb_wire::GtpuPacket::new_checked(&data[..]).unwrap();
    assert_eq!(p.first_ext_type(), None);
    assert_eq!(p.extensions().count(), 0);
    fuzzing::all(&data);
}
