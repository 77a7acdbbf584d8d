//! The fuzz targets' entry points on random and mutated inputs (on stable), and the read path
//! end to end: table regions served by `serve_datagram`, answers checked by the `Lookup`
//! protocol.

use proptest::prelude::*;
use sb_tea::fuzzing;
use sb_tea::wire::{serve_datagram, ReadRequest, ReadResponse, Status};
use sb_tea::{Layout, Lookup, RangeTable, Step, TableParams, TeaTable};

fn valid_request(id: u32, region: u32, offset: u64, length: u32, packet: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    ReadRequest {
        request_id: id,
        region,
        offset,
        length: length % 9000,
        key: 0,
        packet,
    }
    .emit(&mut b)
    .unwrap_or(());
    b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn wire_random_bytes(data in prop::collection::vec(any::<u8>(), 0..200)) {
        fuzzing::wire(&data);
    }

    /// Valid requests with a few bytes flipped, and their served responses likewise.
    #[test]
    fn wire_mutated(
        id in any::<u32>(), region in 0u32..2, offset in 0u64..5000, length in 0u32..600,
        packet in prop::collection::vec(any::<u8>(), 0..64),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
    ) {
        let mut b = valid_request(id, region, offset, length, &packet);
        fuzzing::wire(&b);
        let region_bytes = vec![5u8; 4096];
        let mut resp = Vec::new();
        if serve_datagram(|_| Some(&region_bytes[..]), &b, &mut resp).is_ok() {
            fuzzing::wire(&resp);
            for (i, x) in &flips {
                let n = resp.len();
                resp[i.index(n)] ^= x;
            }
            fuzzing::wire(&resp);
        }
        for (i, x) in &flips {
            let n = b.len();
            b[i.index(n)] ^= x;
        }
        fuzzing::wire(&b);
    }

    #[test]
    fn write_random_bytes(data in prop::collection::vec(any::<u8>(), 0..200)) {
        fuzzing::write(&data);
    }

    /// Valid write requests (aligned or not, in bounds or not) with a few bytes flipped, and
    /// their acknowledgements likewise.
    #[test]
    fn write_mutated(
        id in any::<u32>(), region in 0u32..2, offset in 0u64..4200,
        data in prop::collection::vec(any::<u8>(), 0..120),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
    ) {
        use sb_tea::wire::{serve_write, WriteRequest};
        let req = WriteRequest { request_id: id, region, offset, key: 0, data: &data };
        let mut b = Vec::new();
        req.emit(&mut b).unwrap();
        fuzzing::write(&b);
        let r = sb_tea::Region::new(4096);
        let mut ack = Vec::new();
        serve_write(Some(&r), &req, &mut ack);
        fuzzing::write(&ack);
        for (i, x) in &flips {
            let n = ack.len();
            ack[i.index(n)] ^= x;
            let n = b.len();
            b[i.index(n)] ^= x;
        }
        fuzzing::write(&ack);
        fuzzing::write(&b);
    }

    #[test]
    fn bucket_random_bytes(data in prop::collection::vec(any::<u8>(), 0..300)) {
        fuzzing::bucket(&data);
    }
}

/// The read path over the wire: every key's value comes back through request datagrams served
/// from the table's regions (primary copy, then secondary), and a bit flipped in a response's
/// bucket is caught as torn, never returned.
#[test]
fn lookups_over_the_wire() {
    let layout = Layout::new(13, 6, 4).unwrap();
    let mut t = TeaTable::new(TableParams::new(
        layout,
        RangeTable::even(64, &[0, 1, 2]).unwrap(),
        42,
    ));
    let keys: Vec<[u8; 13]> = (0..200u32)
        .map(|i| {
            let mut k = [0u8; 13];
            k[..4].copy_from_slice(&i.to_be_bytes());
            k
        })
        .collect();
    for (i, k) in keys.iter().enumerate() {
        t.insert(k, &[i as u8; 6]).unwrap();
    }
    let packet = [0xabu8; 64];
    let mut id = 0u32;
    for copy in 0..2 {
        for (i, k) in keys.iter().enumerate() {
            if t.stash_entries().iter().any(|(s, _)| s == k) {
                continue;
            }
            let r = t.resolver().clone();
            let mut l = Lookup::new(&r, r.hash(k), 16);
            let mut bucket = l.first();
            let value = loop {
                let a = r.address(bucket);
                id += 1;
                let req = {
                    let mut b = Vec::new();
                    ReadRequest {
                        request_id: id,
                        region: a.region,
                        offset: a.offset,
                        length: a.len,
                        key: 0,
                        packet: &packet,
                    }
                    .emit(&mut b)
                    .unwrap();
                    b
                };
                assert_eq!(req.len(), sb_tea::wire::REQUEST_HEADER + 64);
                let mut out = Vec::new();
                let status =
                    serve_datagram(|n| t.region(n).get(copy).map(|c| &**c), &req, &mut out)
                        .unwrap();
                assert_eq!(status, Status::Ok);
                let resp = ReadResponse::parse(&out).unwrap();
                assert_eq!((resp.request_id, resp.packet), (id, &packet[..]));
                assert_eq!(out.len(), 16 + 96 + 64);
                // A corrupted copy of the same bucket is never taken for an answer.
                let mut bad = resp.data.to_vec();
                bad[20 + i % 70] ^= 1;
                assert_eq!(
                    layout.lookup_in_bucket(&bad, k),
                    Err(sb_tea::BucketError::Torn)
                );
                match l.on_bucket(&layout, k, resp.data).unwrap() {
                    Step::Read(b) => bucket = b,
                    Step::Found(v) => break v.to_vec(),
                    Step::Miss => panic!("key {i} missed"),
                }
            };
            assert_eq!(value, [i as u8; 6]);
        }
    }
}
