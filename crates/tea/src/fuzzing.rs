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

/// Any bytes as a write request and as a write acknowledgement: no panic; whatever parses
/// re-encodes to the same bytes; a request is served to a 4 KiB region and the
/// acknowledgement parses and echoes the id; an accepted write changed exactly the bytes it
/// names, a refused one nothing, and the status says which (aligned, in bounds, known region).
/// The same bytes are also taken as a request's fields (id, region, offset, then the data),
/// encoded and checked likewise, so that a short run from an empty corpus reaches the
/// server's paths, not only the parser's first checks.
pub fn write(data: &[u8]) {
    use crate::wire::WriteRequest;
    write_bytes(data);
    if data.len() >= 4 {
        let req = WriteRequest {
            request_id: u32::from(data[0]),
            region: u32::from(data[1] & 1),
            offset: u64::from(u16::from_le_bytes([data[2], data[3]])) % 4200,
            key: 0,
            data: &data[4..],
        };
        let mut b = Vec::new();
        if req.emit(&mut b).is_ok() {
            write_bytes(&b);
        }
    }
}

fn write_bytes(data: &[u8]) {
    use crate::wire::{serve_write, WriteAck, WriteRequest};
    if let Ok(req) = WriteRequest::parse(data) {
        let mut again = Vec::new();
        req.emit(&mut again).expect("a parsed write encodes");
        assert_eq!(again, data);
        let image: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let region = Region::from_image(&image);
        let mut out = Vec::new();
        let status = serve_write((req.region == 0).then_some(&region), &req, &mut out);
        let ack = WriteAck::parse(&out).expect("the server's ack parses");
        assert_eq!((ack.request_id, ack.status), (req.request_id, status));
        let aligned = req.offset % 8 == 0 && req.data.len() % 8 == 0 && req.data.len() >= 16;
        let end = req
            .offset
            .checked_add(req.data.len() as u64)
            .filter(|&e| e <= 4096);
        let want = match (req.region, aligned, end) {
            (0, true, Some(_)) => Status::Ok,
            (0, false, _) => Status::Unaligned,
            (0, true, None) => Status::OutOfBounds,
            _ => Status::UnknownRegion,
        };
        assert_eq!(status, want);
        let mut expect = image.clone();
        if status == Status::Ok {
            let at = req.offset as usize;
            expect[at..at + req.data.len()].copy_from_slice(req.data);
        }
        assert_eq!(region.snapshot(), expect);
    }
    if let Ok(ack) = WriteAck::parse(data) {
        let mut again = Vec::new();
        ack.emit(&mut again);
        assert_eq!(again, data);
    }
}
