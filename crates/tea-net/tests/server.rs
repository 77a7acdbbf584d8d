//! The memory server: reads answered byte for byte over UDP, reads outside a region or of an
//! unknown region refused with their status, reads and writes without the region's access key
//! denied (nothing read or written), datagrams that are not requests not answered, and no
//! input makes the handler panic.

use std::net::UdpSocket;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use sb_tea::wire::{ReadRequest, ReadResponse, Status, WriteAck, WriteRequest};
use sb_tea::{MemoryRegion, Region};
use sb_tea_net::server::{spawn, ImageError, MemoryServer, ServerError};

fn image(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ salt).collect()
}

/// The access keys of the test server's regions 0 and 7.
const K0: u64 = 0x0123_4567_89ab_cdef;
const K7: u64 = 0x7777_0000_1234_5678;

/// The key a request for `region` carries: its registered key (0 for an unknown region).
fn key_of(region: u32) -> u64 {
    match region {
        0 => K0,
        7 => K7,
        _ => 0,
    }
}

/// A read request's datagram.
fn read_bytes(r: ReadRequest<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    r.emit(&mut b).unwrap();
    b
}

/// A write request's datagram.
fn write_bytes(w: WriteRequest<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    w.emit(&mut b).unwrap();
    b
}

fn server() -> (MemoryServer, Vec<u8>, Vec<u8>) {
    let (a, b) = (image(4096, 1), image(1024, 2));
    let mut s = MemoryServer::new();
    s.register(0, Arc::new(Region::from_image(&a)), K0).unwrap();
    s.register(7, Arc::new(Region::from_image(&b)), K7).unwrap();
    (s, a, b)
}

/// A server's image loads into a server with the same regions, byte for byte; cut or padded
/// images are refused.
#[test]
fn image_round_trip_and_refusals() {
    let (s, a, b) = server();
    let img = s.image();
    let t = MemoryServer::from_image(&img).unwrap();
    assert_eq!(t.region_numbers(), [0, 7]);
    for (number, want) in [(0u32, &a), (7, &b)] {
        let mut req = Vec::new();
        ReadRequest {
            request_id: 1,
            region: number,
            offset: 0,
            length: want.len() as u32,
            key: key_of(number),
            packet: b"",
        }
        .emit(&mut req)
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(t.handle(&req, &mut out), Ok(Status::Ok));
        assert_eq!(ReadResponse::parse(&out).unwrap().data, &want[..]);
    }
    assert_eq!(
        MemoryServer::from_image(&img[..img.len() - 1]).err(),
        Some(ImageError::Truncated)
    );
    let mut long = img.clone();
    long.push(0);
    assert_eq!(
        MemoryServer::from_image(&long).err(),
        Some(ImageError::Trailing(1))
    );
    assert_eq!(
        MemoryServer::from_image(b"SBTEAIMG").err(),
        Some(ImageError::Magic)
    );
    assert!(MemoryServer::from_image(&MemoryServer::new().image())
        .unwrap()
        .region_numbers()
        .is_empty());
}

#[test]
fn registration() {
    let (mut s, _, _) = server();
    assert_eq!(
        s.register(7, Arc::new(Region::new(8)), 1),
        Err(ServerError::Duplicate(7))
    );
    assert_eq!(s.region_numbers(), [0, 7]);
}

#[test]
fn reads_over_udp_byte_for_byte_and_refusals() {
    let (s, a, b) = server();
    let h = spawn(s, "127.0.0.1:0".parse().unwrap()).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = vec![0u8; 65_536];
    let mut req_bytes = Vec::new();
    type Case<'a> = (u32, u64, u32, Status, Option<&'a [u8]>);
    let cases: Vec<Case> = vec![
        (0, 0, 96, Status::Ok, Some(&a[0..96])),
        (0, 4000, 96, Status::Ok, Some(&a[4000..4096])),
        (0, 13, 5, Status::Ok, Some(&a[13..18])),
        (7, 1000, 24, Status::Ok, Some(&b[1000..1024])),
        (7, 1000, 25, Status::OutOfBounds, None),
        (0, 4096, 1, Status::OutOfBounds, None),
        (0, u64::MAX, 8, Status::OutOfBounds, None),
        (3, 0, 8, Status::UnknownRegion, None),
    ];
    for (id, (region, offset, length, status, want)) in cases.into_iter().enumerate() {
        let packet: Vec<u8> = (0..(id * 37 + 1)).map(|i| i as u8).collect();
        req_bytes.clear();
        ReadRequest {
            request_id: id as u32,
            region,
            offset,
            length,
            key: key_of(region),
            packet: &packet,
        }
        .emit(&mut req_bytes)
        .unwrap();
        client.send_to(&req_bytes, h.addr).unwrap();
        let (n, from) = client.recv_from(&mut buf).unwrap();
        assert_eq!(from, h.addr);
        let r = ReadResponse::parse(&buf[..n]).unwrap();
        assert_eq!((r.request_id, r.status), (id as u32, status));
        assert_eq!(r.packet, &packet[..], "the packet comes back as sent");
        assert_eq!(r.data, want.unwrap_or(&[]));
    }
    // Not requests: no answer.
    for junk in [&b"hello"[..], &[0u8; 40][..], b"TE\x01\x02xxxxxxxxxxxx"] {
        client.send_to(junk, h.addr).unwrap();
    }
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    assert!(client.recv_from(&mut buf).is_err(), "junk is not answered");
    let c = &h.control.counters;
    assert_eq!(c.reads.load(Ordering::Relaxed), 4);
    assert_eq!(c.bytes.load(Ordering::Relaxed), 96 + 96 + 5 + 24);
    assert_eq!(c.refused.load(Ordering::Relaxed), 4);
    assert_eq!(c.invalid.load(Ordering::Relaxed), 3);

    // Down: received, not answered; up again: answered.
    h.control.set_down(true);
    req_bytes.clear();
    ReadRequest {
        request_id: 99,
        region: 0,
        offset: 0,
        length: 8,
        key: K0,
        packet: b"",
    }
    .emit(&mut req_bytes)
    .unwrap();
    client.send_to(&req_bytes, h.addr).unwrap();
    assert!(client.recv_from(&mut buf).is_err());
    h.control.set_down(false);
    client.send_to(&req_bytes, h.addr).unwrap();
    let (n, _) = client.recv_from(&mut buf).unwrap();
    assert_eq!(ReadResponse::parse(&buf[..n]).unwrap().data, &a[..8]);
    assert_eq!(h.control.counters.ignored.load(Ordering::Relaxed), 1);
    h.join();
}

/// A host on the fabric without a region's access key (an RDMA R_Key's job) can neither read
/// nor write it: a wrong key, another region's key, a key with one bit changed and no key at
/// all are each answered AccessDenied, with no data and nothing written; with the key the same
/// requests are served. Over UDP, as the switch and the memory servers talk.
#[test]
fn reads_and_writes_without_the_access_key_are_denied_over_udp() {
    let a = image(4096, 1);
    let region0 = Arc::new(Region::from_image(&a));
    let mut s = MemoryServer::new();
    s.register(0, Arc::clone(&region0), K0).unwrap();
    s.register(7, Arc::new(Region::from_image(&image(1024, 2))), K7)
        .unwrap();
    let h = spawn(s, "127.0.0.1:0".parse().unwrap()).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = vec![0u8; 65_536];
    let new_words: Vec<u8> = (0..32u8).map(|i| i ^ 0xa5).collect();
    let ask = |bytes: &[u8], buf: &mut [u8]| {
        client.send_to(bytes, h.addr).unwrap();
        let (n, _) = client.recv_from(buf).unwrap();
        n
    };
    for (id, key) in [
        (1u32, 0u64),
        (2, K7),
        (3, K0 ^ 1),
        (4, K0 ^ (1 << 63)),
        (5, !K0),
    ] {
        let req = read_bytes(ReadRequest {
            request_id: id,
            region: 0,
            offset: 0,
            length: 64,
            key,
            packet: b"p",
        });
        let n = ask(&req, &mut buf);
        let r = ReadResponse::parse(&buf[..n]).unwrap();
        assert_eq!(
            (r.request_id, r.status),
            (id, Status::AccessDenied),
            "read, key {key:#x}"
        );
        assert!(
            r.data.is_empty(),
            "no byte of the region leaves without the key"
        );
        assert_eq!(r.packet, b"p");
        let req = write_bytes(WriteRequest {
            request_id: id,
            region: 0,
            offset: 64,
            key,
            data: &new_words,
        });
        let n = ask(&req, &mut buf);
        let ack = WriteAck::parse(&buf[..n]).unwrap();
        assert_eq!(
            (ack.request_id, ack.status),
            (id, Status::AccessDenied),
            "write, key {key:#x}"
        );
        assert_eq!(region0.snapshot(), a, "nothing written without the key");
    }
    let c = &h.control.counters;
    assert_eq!(c.denied.load(Ordering::Relaxed), 10);
    assert_eq!(
        c.reads.load(Ordering::Relaxed) + c.writes.load(Ordering::Relaxed),
        0
    );
    assert_eq!(c.refused.load(Ordering::Relaxed), 0);

    // With the key: served.
    let req = write_bytes(WriteRequest {
        request_id: 9,
        region: 0,
        offset: 64,
        key: K0,
        data: &new_words,
    });
    let n = ask(&req, &mut buf);
    assert_eq!(WriteAck::parse(&buf[..n]).unwrap().status, Status::Ok);
    let req = read_bytes(ReadRequest {
        request_id: 10,
        region: 0,
        offset: 64,
        length: 32,
        key: K0,
        packet: b"",
    });
    let n = ask(&req, &mut buf);
    let r = ReadResponse::parse(&buf[..n]).unwrap();
    assert_eq!((r.status, r.data), (Status::Ok, &new_words[..]));
    assert_eq!(c.denied.load(Ordering::Relaxed), 10);
    h.join();
}

/// The image keeps each region's access key: a server loaded from it denies the wrong key and
/// serves the right one.
#[test]
fn the_image_keeps_the_access_keys() {
    let t = MemoryServer::from_image(&server().0.image()).unwrap();
    for (region, key) in [(0u32, K0), (7, K7)] {
        for (k, want) in [(key, Status::Ok), (key ^ 4, Status::AccessDenied)] {
            let req = read_bytes(ReadRequest {
                request_id: 1,
                region,
                offset: 0,
                length: 8,
                key: k,
                packet: b"",
            });
            let mut out = Vec::new();
            assert_eq!(
                t.handle(&req, &mut out),
                Ok(want),
                "region {region}, key {k:#x}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes: no panic; an answer only for a valid request, and then exactly the region's
    /// bytes or a refusal.
    #[test]
    fn handler_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let (s, a, _) = server();
        let mut out = Vec::new();
        match s.handle(&data, &mut out) {
            Err(_) => prop_assert!(out.is_empty()),
            Ok(st) if WriteRequest::parse(&data).is_ok() => {
                prop_assert!(WriteAck::parse(&out).unwrap().status == st);
            }
            Ok(st) => {
                let req = ReadRequest::parse(&data).unwrap();
                let r = ReadResponse::parse(&out).unwrap();
                prop_assert_eq!(r.status, st);
                prop_assert_eq!(r.packet, req.packet);
                if st == Status::Ok && req.region == 0 {
                    prop_assert_eq!(r.data, &a[req.offset as usize..][..req.length as usize]);
                }
            }
        }
    }

    /// Any bytes, and valid images with bytes changed: loading never panics; what loads writes
    /// an image that loads back to the same regions.
    #[test]
    fn image_loader_never_panics(
        data in proptest::collection::vec(any::<u8>(), 0..200),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in any::<usize>(),
    ) {
        if let Ok(t) = MemoryServer::from_image(&data) {
            let again = t.image();
            prop_assert_eq!(MemoryServer::from_image(&again).unwrap().image(), again);
        }
        let mut img = server().0.image();
        for (at, x) in flips {
            let n = img.len();
            img[at % n] ^= x;
        }
        img.truncate(img.len() - cut % 32);
        if let Ok(t) = MemoryServer::from_image(&img) {
            let again = t.image();
            prop_assert_eq!(MemoryServer::from_image(&again).unwrap().image(), again);
        }
    }

    /// Valid requests at random places: in bounds answered byte for byte, out of bounds refused.
    #[test]
    fn requests_in_and_out_of_bounds(region in 0u32..9, offset in 0u64..5000, length in 0u32..600) {
        let (s, a, b) = server();
        let mut req = Vec::new();
        ReadRequest { request_id: 5, region, offset, length, key: key_of(region), packet: b"pk" }
            .emit(&mut req)
            .unwrap();
        let mut out = Vec::new();
        let st = s.handle(&req, &mut out).unwrap();
        let r = ReadResponse::parse(&out).unwrap();
        let img = match region { 0 => Some(&a), 7 => Some(&b), _ => None };
        match img {
            None => prop_assert_eq!(st, Status::UnknownRegion),
            Some(img) if offset + u64::from(length) <= img.len() as u64 => {
                prop_assert_eq!(st, Status::Ok);
                let mut want = vec![0u8; length as usize];
                img[..].read_at(offset, &mut want).unwrap();
                prop_assert_eq!(r.data, &want[..]);
            }
            Some(_) => {
                prop_assert_eq!(st, Status::OutOfBounds);
                prop_assert!(r.data.is_empty());
            }
        }
    }
}
