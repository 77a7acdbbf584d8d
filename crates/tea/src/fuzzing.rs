//! Entry points of the cargo-fuzz targets (`fuzz/fuzz_targets/tea_*.rs`); the crate's tests
//! run them on random and mutated inputs on stable too.

use crate::layout::Layout;
use crate::region::Region;
use crate::table::{Lookup, Step};
use crate::wire::{serve_datagram, ReadRequest, ReadResponse, Status};
use crate::{RangeTable, Resolver};

/// Any bytes as a read request and as a read response: no panic; whatever parses re-encodes to
/// the same bytes; a request is served from a 4 KiB region and the response parses, echoes
/// the request id and packet, and carries exactly the bytes asked for when in bounds.
pub fn wire(data: &[u8]) {
    if let Ok(req) = ReadRequest::parse(data) {
        let mut again = Vec::new();
        req.emit(&mut again).expect("a parsed request encodes");
        assert_eq!(again, data);
        let image: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let region = Region::from_image(&image);
        let mut out = Vec::new();
        let status = serve_datagram(|r| (r == 0).then_some(&region), data, &mut out)
            .expect("a parsed request is served");
        let resp = ReadResponse::parse(&out).expect("the server's response parses");
        assert_eq!(
            (resp.request_id, resp.status, resp.packet),
            (req.request_id, status, req.packet)
        );
        let end = req
            .offset
            .checked_add(u64::from(req.length))
            .filter(|&e| e <= 4096);
        match (req.region, end) {
            (0, Some(end)) => {
                assert_eq!(status, Status::Ok);
                assert_eq!(resp.data, &image[req.offset as usize..end as usize]);
            }
            (0, None) => assert_eq!(status, Status::OutOfBounds),
            _ => assert_eq!(status, Status::UnknownRegion),
        }
    }
    if let Ok(resp) = ReadResponse::parse(data) {
        let mut again = Vec::new();
        resp.emit(&mut again).expect("a parsed response encodes");
        assert_eq!(again, data);
    }
}

/// Any bytes as a bucket a read returned: the first 4 bytes choose a layout (key length,
/// value length, slots) and a key byte; the rest is the bucket. `lookup_in_bucket` and the
/// `Lookup` protocol never panic, and a value found has the layout's length.
pub fn bucket(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let Ok(layout) = Layout::new(
        1 + data[0] as usize % 40,
        data[1] as usize % 48,
        1 + data[2] as usize % 16,
    ) else {
        return;
    };
    let key = vec![data[3]; layout.key_len()];
    let bytes = &data[4..];
    if let Ok(Some(v)) = layout.lookup_in_bucket(bytes, &key) {
        assert_eq!(v.len(), layout.value_len());
    }
    let resolver = Resolver::new(
        layout,
        1,
        RangeTable::even(8, &[0, 1]).expect("valid ranges"),
    );
    let mut l = Lookup::new(&resolver, resolver.hash(&key), 4);
    for _ in 0..4 {
        match l.on_bucket(&layout, &key, bytes) {
            Ok(Step::Read(b)) => assert!(b < 8),
            Ok(Step::Found(v)) => {
                assert_eq!(v.len(), layout.value_len());
                break;
            }
            Ok(Step::Miss) | Err(_) => break,
        }
    }
}
