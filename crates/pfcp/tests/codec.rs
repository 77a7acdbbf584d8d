//! The codec: never panics on any bytes, and build -> parse gives back what was built.

use arbitrary::{Arbitrary, Unstructured};
use proptest::prelude::*;
use sb_pfcp::*;
use std::net::Ipv4Addr;

fn arbitrary_message(seed: &[u8]) -> Option<Message> {
    Message::arbitrary(&mut Unstructured::new(seed)).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        sb_pfcp::fuzzing::pfcp_message(&data);
    }

    /// Random bodies behind a valid header, so that the IE readers see the bytes.
    #[test]
    fn random_bodies_never_panic(t in prop::sample::select(vec![1u8, 2, 5, 6, 7, 8, 9, 10, 11, 50, 51, 52, 53, 54, 55]),
                                 body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut data = if t >= 50 { vec![0x21, t, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 7, 0] } else { vec![0x20, t, 0, 0, 0, 0, 7, 0] };
        data.extend_from_slice(&body);
        let len = (data.len() - 4) as u16;
        data[2..4].copy_from_slice(&len.to_be_bytes());
        sb_pfcp::fuzzing::pfcp_message(&data);
    }

    /// State records (random, and real ones with bytes flipped) restore or are refused,
    /// never a panic.
    #[test]
    fn random_state_records_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        sb_pfcp::fuzzing::pfcp_restore(&data);
    }

    /// Built messages with bytes flipped: near-valid inputs reach every reader.
    #[test]
    fn mutated_messages_never_panic(seed in proptest::collection::vec(any::<u8>(), 0..2000),
                                    flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
        if let Some(bytes) = arbitrary_message(&seed).and_then(|m| m.to_bytes().ok()) {
            let mut bytes = bytes;
            for (at, x) in flips {
                let n = bytes.len();
                bytes[at % n] ^= x;
            }
            sb_pfcp::fuzzing::pfcp_message(&bytes);
        }
    }

    /// The messages and IEs of usage reporting and buffering (Session Report Request and
    /// Response, Usage Reports in the Modification and Deletion Responses, Query URR, BARs,
    /// PFCPSMReq-Flags) build and parse back to themselves.
    #[test]
    fn report_messages_round_trip(seed in proptest::collection::vec(any::<u8>(), 0..1500),
                                  kind in 0u8..5) {
        let mut u = Unstructured::new(&seed);
        let body = match kind {
            0 => SessionReportRequest::arbitrary(&mut u).map(Body::SessionReportRequest),
            1 => SessionReportResponse::arbitrary(&mut u).map(Body::SessionReportResponse),
            2 => SessionDeletionResponse::arbitrary(&mut u).map(Body::SessionDeletionResponse),
            3 => SessionModificationResponse::arbitrary(&mut u)
                .map(Body::SessionModificationResponse),
            _ => SessionModificationRequest::arbitrary(&mut u)
                .map(Body::SessionModificationRequest),
        };
        if let Ok(body) = body {
            let m = Message { seid: Some(1), sequence: 5, priority: None, body };
            let bytes = m.to_bytes().expect("arbitrary messages are buildable");
            prop_assert_eq!(Message::parse(&bytes), Ok(m));
        }
    }

    #[test]
    fn build_then_parse_round_trips(seed in proptest::collection::vec(any::<u8>(), 0..2000)) {
        if let Some(msg) = arbitrary_message(&seed) {
            let bytes = msg.to_bytes().expect("arbitrary messages are buildable");
            prop_assert_eq!(Message::parse(&bytes), Ok(msg));
        }
    }
}

/// The round trip is not vacuous: most seeds make a message, of every type.
#[test]
fn round_trip_covers_every_type() {
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut seen = std::collections::BTreeSet::new();
    let mut made = 0;
    for _ in 0..3000 {
        let seed: Vec<u8> = (0..1500)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        if let Some(m) = arbitrary_message(&seed) {
            let bytes = m.to_bytes().unwrap();
            assert_eq!(Message::parse(&bytes), Ok(m.clone()));
            seen.insert(m.body.message_type());
            made += 1;
        }
    }
    assert!(made > 2500, "{made}");
    assert_eq!(seen.len(), 17, "{seen:?}");
}

fn heartbeat(seq: u32) -> Message {
    Message {
        seid: None,
        sequence: seq,
        priority: None,
        body: Body::HeartbeatRequest(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(0xE000_0000),
        }),
    }
}

#[test]
fn header_bytes_are_as_specified() {
    let b = heartbeat(0x0A0B0C).to_bytes().unwrap();
    assert_eq!(
        b,
        [0x20, 1, 0, 12, 0x0A, 0x0B, 0x0C, 0, 0, 96, 0, 4, 0xE0, 0, 0, 0]
    );
    let m = Message {
        seid: Some(0x0102030405060708),
        sequence: 5,
        priority: Some(3),
        body: Body::SessionDeletionRequest,
    };
    let b = m.to_bytes().unwrap();
    assert_eq!(b, [0x23, 54, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 5, 0x30]);
    assert_eq!(Message::parse(&b), Ok(m));
}

#[test]
fn header_errors() {
    let good = heartbeat(1).to_bytes().unwrap();
    assert_eq!(Message::parse(&good[..7]), Err(DecodeError::Truncated(7)));
    let mut v2 = good.clone();
    v2[0] = 0x40;
    assert_eq!(Message::parse(&v2), Err(DecodeError::Version(2)));
    assert_eq!(Header::peek_sequence(&v2), Some(1));
    let mut long = good.clone();
    long[3] = 40;
    assert!(matches!(
        Message::parse(&long),
        Err(DecodeError::Length { field: 40, .. })
    ));
    let mut trailing = good.clone();
    trailing.push(0);
    assert!(matches!(
        Message::parse(&trailing),
        Err(DecodeError::Length { .. })
    ));
    let mut s = good.clone();
    s[0] |= 1;
    assert!(matches!(
        Message::parse(&s),
        Err(DecodeError::SeidFlag(1)) | Err(DecodeError::Length { .. })
    ));
    let mut unknown = good.clone();
    unknown[1] = 3;
    assert_eq!(
        Message::parse(&unknown),
        Err(DecodeError::UnknownMessage(3))
    );
    // Follow-on: a second message after the first is allowed with FO.
    let mut two = good.clone();
    two[0] |= 4;
    two.extend_from_slice(&good);
    let (h, _, rest) = Header::parse(&two).unwrap();
    assert!(h.follow_on);
    assert_eq!(rest, &good[..]);
}

#[test]
fn ie_errors() {
    // Heartbeat without Recovery Time Stamp, with a short one, with an overrunning IE.
    let none = [0x20, 1, 0, 4, 0, 0, 1, 0];
    assert_eq!(
        Message::parse(&none),
        Err(DecodeError::MissingIe(ie_type::RECOVERY_TIME_STAMP))
    );
    let short = [0x20, 1, 0, 10, 0, 0, 1, 0, 0, 96, 0, 2, 1, 2];
    assert_eq!(
        Message::parse(&short),
        Err(DecodeError::InvalidIe(ie_type::RECOVERY_TIME_STAMP))
    );
    let over = [0x20, 1, 0, 10, 0, 0, 1, 0, 0, 96, 0, 9, 1, 2];
    assert_eq!(
        Message::parse(&over),
        Err(DecodeError::IeLength(ie_type::RECOVERY_TIME_STAMP))
    );
    // Unknown and enterprise IEs are skipped.
    let skip = [
        0x20, 1, 0, 22, 0, 0, 1, 0, 0x80, 1, 0, 2, 0, 9, 0, 200, 0, 0, 0, 96, 0, 4, 1, 2, 3, 4,
    ];
    let m = Message::parse(&skip).unwrap();
    assert_eq!(
        m.body,
        Body::HeartbeatRequest(Heartbeat {
            recovery_time_stamp: RecoveryTimeStamp(0x01020304)
        })
    );
}

#[test]
fn grouped_mandatory_ies_are_reported_by_their_own_type() {
    let far = CreateFar {
        far_id: FarId(1),
        apply_action: ApplyAction(ApplyAction::FORW),
        forwarding_parameters: None,
    };
    let pdr = CreatePdr {
        pdr_id: PdrId(1),
        precedence: Precedence(10),
        pdi: Pdi {
            source_interface: Interface::CORE,
            local_f_teid: None,
            network_instance: None,
            ue_ip_address: None,
            other: vec![],
        },
        outer_header_removal: None,
        far_id: Some(FarId(1)),
        urr_ids: vec![],
        qer_ids: vec![],
    };
    let req = SessionEstablishmentRequest {
        node_id: NodeId::Ipv4(Ipv4Addr::new(10, 0, 0, 1)),
        cp_f_seid: FSeid {
            seid: 7,
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
            ipv6: None,
        },
        create_pdr: vec![pdr],
        create_far: vec![far],
        create_urr: vec![],
        create_qer: vec![],
        create_bar: None,
    };
    let msg = Message {
        seid: Some(0),
        sequence: 1,
        priority: None,
        body: Body::SessionEstablishmentRequest(req),
    };
    let bytes = msg.to_bytes().unwrap();
    assert_eq!(Message::parse(&bytes), Ok(msg));
    // Remove the Precedence IE (type 29, 8 bytes) from inside Create PDR by hand: the error
    // names Precedence, not Create PDR.
    let at = bytes.windows(4).position(|w| w == [0, 29, 0, 4]).unwrap();
    let mut cut = bytes.clone();
    cut.drain(at..at + 8);
    // Fix the Create PDR length (its header precedes PDR ID) and the message length.
    let pdr_at = cut
        .windows(6)
        .position(|w| w[..2] == [0, 1] && w[4..] == [0, 56])
        .unwrap();
    let l = u16::from_be_bytes([cut[pdr_at + 2], cut[pdr_at + 3]]) - 8;
    cut[pdr_at + 2..pdr_at + 4].copy_from_slice(&l.to_be_bytes());
    let l = (cut.len() - 4) as u16;
    cut[2..4].copy_from_slice(&l.to_be_bytes());
    assert_eq!(
        Message::parse(&cut),
        Err(DecodeError::MissingIe(ie_type::PRECEDENCE))
    );
}
