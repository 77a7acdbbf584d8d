//! The read protocol's wire format: a RoCE-like one-sided read over UDP, carrying the original
//! packet along so the switch keeps no packet buffer (paper Figure 5b), and the memory server's
//! side of it ([`serve_read`]), which copies bytes and runs no network-function logic (the
//! stand-in for an RDMA NIC).
//!
//! All integers big-endian; UDP payloads, port [`UDP_PORT`].
//!
//! ```text
//! read request (36-byte header)             read response (16-byte header)
//!  0  2  magic "TE"                           0  2  magic "TE"
//!  2  1  version 2                            2  1  version 2
//!  3  1  opcode 1 (read request)              3  1  opcode 2 (read response)
//!  4  4  request id                           4  4  request id (the request's)
//!  8  4  region                               8  1  status (0 ok, see Status)
//! 12  8  offset in the region                 9  1  reserved, 0
//! 20  4  length to read (<= MAX_READ)        10  2  packet length P
//! 24  2  packet length P (<= MAX_PACKET)     12  4  data length L (= request's length if ok, else 0)
//! 26  2  reserved, 0                         16  L  the bytes read
//! 28  8  the region's access key           16+L P  the original packet, as the request carried it
//! 36  P  the original packet
//! ```
//!
//! # Access keys
//! As an RDMA NIC checks a request's R_Key against the memory region it names, a memory server
//! serves a read or a write only when the request carries the access key of its copy of the
//! region: 64 random bits drawn when the table is made (`TeaTable::access_key`), one per copy
//! (a server knows the keys of its own copies only), given to the switch and to that server
//! alone. A request with another key is answered [`Status::AccessDenied`], with no data and
//! nothing written ([`refuse_read`], [`ack_write`]), so that a host on the fabric without
//! the keys can neither read a table nor write one. Like an R_Key, the key is not a MAC: it
//! keeps out whoever does not see the fabric's traffic between the switch and the servers.
//!
//! A datagram must be exactly its header plus the lengths it declares; parsers return a
//! [`WireError`] for anything else and never panic.
//!
//! # Writes (the control plane's updates)
//! A one-sided write, as an RDMA WRITE: the switch's control plane sends the new image of one
//! bucket to each copy of its region and waits for both acknowledgements before it writes the
//! next bucket ([`crate::table`] says why that order matters).
//!
//! ```text
//! write request (32-byte header)            write ack (12 bytes)
//!  0  2  magic "TE"                           0  2  magic "TE"
//!  2  1  version 2                            2  1  version 2
//!  3  1  opcode 3 (write request)             3  1  opcode 4 (write ack)
//!  4  4  request id                           4  4  request id (the request's)
//!  8  4  region                               8  1  status (0 ok, see Status)
//! 12  8  offset in the region                 9  3  reserved, 0
//! 20  4  data length L (<= MAX_WRITE)
//! 24  8  the region's access key
//! 32  L  the bytes to write
//! ```
//!
//! The server ([`serve_write`]) takes whole 8-byte words at an 8-aligned offset, at least two
//! (a bucket's header), and stores them in the order a reader's check relies on
//! ([`Region::write_words`](crate::region::Region::write_words)): the first word's low 32 bits
//! (a bucket's version) made odd first, then the words from the third on, the second (a
//! bucket's checksum), and the first word last. A reader's copy that overlaps the write has an
//! odd version or a checksum that does not match, and is read again: no reader ever uses a
//! half-written entry. Anything else is refused with [`Status::Unaligned`]; a write out of the
//! region with [`Status::OutOfBounds`].
//!
//! # Bytes on the fabric per packet
//! With Ethernet (14) + IPv4 (20) + UDP (8) = 42 bytes of outer headers, a read of one `B`-byte
//! bucket for a `P`-byte packet costs a request of `78 + P` bytes and a response of
//! `58 + B + P` bytes: `136 + B + 2P` in all, where forwarding the packet alone costs `P`. For
//! the NAT layout (13-byte keys, 8-byte values, 4 slots: `B` = 104): 64-byte packet: 142 + 226
//! = 368 bytes (5.75x); 1500-byte packet: 1578 + 1662 = 3240 bytes (2.2x). A key in its second
//! bucket costs a second round, a miss a third. RoCEv2 itself would cost 74 + P (Eth, IPv4,
//! UDP, BTH 12, RETH 16 with its 4-byte R_Key, ICRC 4) and 62 + B + P (BTH, AETH 4, ICRC): our
//! request is 4 bytes longer (a 64-bit key), our response 4 bytes shorter. The response is
//! `58 + B` bytes longer than the packet, so the fabric's MTU must exceed the largest packet by
//! that much (jumbo frames, or a larger veth MTU).

use crate::region::{MemoryRegion, Region, WriteError};

/// The two magic bytes, "TE".
pub const MAGIC: [u8; 2] = *b"TE";
/// The protocol version (2: requests carry an access key).
pub const VERSION: u8 = 2;
/// UDP port of memory servers (next to RoCEv2's 4791, which tshark would dissect as
/// InfiniBand).
pub const UDP_PORT: u16 = 4792;
/// Request header bytes.
pub const REQUEST_HEADER: usize = 36;
/// Response header bytes.
pub const RESPONSE_HEADER: usize = 16;
/// Longest read (the largest bucket, 16 slots of 128-byte keys and 256-byte values, is 6160).
pub const MAX_READ: u32 = 8192;
/// Longest write (a bucket, as [`MAX_READ`]).
pub const MAX_WRITE: u32 = MAX_READ;
/// Write request header bytes.
pub const WRITE_HEADER: usize = 32;
/// Write acknowledgement bytes.
pub const WRITE_ACK: usize = 12;
/// Longest carried packet (a 9000-byte jumbo frame with its Ethernet header, and some).
pub const MAX_PACKET: usize = 9216;

const OP_READ_REQUEST: u8 = 1;
const OP_READ_RESPONSE: u8 = 2;
const OP_WRITE_REQUEST: u8 = 3;
const OP_WRITE_ACK: u8 = 4;

/// Why bytes are not a read request or response, or a message cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the header.
    #[error("{got} bytes, a header needs {need}")]
    Truncated {
        /// Header size.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// Not "TE".
    #[error("bad magic")]
    Magic,
    /// A version this code does not speak.
    #[error("unknown version {0}")]
    Version(u8),
    /// Not the opcode of the message parsed (or none at all).
    #[error("unexpected opcode {0}")]
    Opcode(u8),
    /// A reserved byte is not zero.
    #[error("reserved bytes not zero")]
    Reserved,
    /// The datagram is not exactly as long as its header says.
    #[error("datagram is {actual} bytes, its header says {declared}")]
    Length {
        /// Header plus declared lengths.
        declared: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A read longer than [`MAX_READ`].
    #[error("read of {0} bytes is more than {MAX_READ}")]
    ReadTooLong(u32),
    /// A carried packet longer than [`MAX_PACKET`].
    #[error("packet of {0} bytes is more than {MAX_PACKET}")]
    PacketTooLong(usize),
    /// An unknown status code.
    #[error("unknown status {0}")]
    Status(u8),
    /// A response's data length does not fit its status (ok: anything; others: 0).
    #[error("status {0:?} with data")]
    DataWithError(Status),
}

/// What the memory server did with a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The bytes were read.
    Ok = 0,
    /// The server has no region of that number.
    UnknownRegion = 1,
    /// The bytes are not all inside the region.
    OutOfBounds = 2,
    /// A write that is not whole 8-byte words at an 8-aligned offset, or shorter than 16
    /// bytes (nothing written).
    Unaligned = 3,
    /// The request's access key is not the one of the server's copy of the region (nothing
    /// read or written: an RDMA NIC's remote access error).
    AccessDenied = 4,
}

impl Status {
    fn from_u8(b: u8) -> Result<Status, WireError> {
        match b {
            0 => Ok(Status::Ok),
            1 => Ok(Status::UnknownRegion),
            2 => Ok(Status::OutOfBounds),
            3 => Ok(Status::Unaligned),
            4 => Ok(Status::AccessDenied),
            b => Err(WireError::Status(b)),
        }
    }
}

fn check_common(b: &[u8], need: usize, op: u8) -> Result<(), WireError> {
    if b.len() < need {
        return Err(WireError::Truncated { need, got: b.len() });
    }
    if b[0..2] != MAGIC {
        return Err(WireError::Magic);
    }
    if b[2] != VERSION {
        return Err(WireError::Version(b[2]));
    }
    if b[3] != op {
        return Err(WireError::Opcode(b[3]));
    }
    Ok(())
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// The kind of a datagram that starts like ours (a dispatcher's first look; the parsers check
/// the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// [`ReadRequest`].
    ReadRequest,
    /// [`ReadResponse`].
    ReadResponse,
    /// [`WriteRequest`].
    WriteRequest,
    /// [`WriteAck`].
    WriteAck,
}

/// The opcode of a datagram that starts with our magic and version; `None` otherwise.
pub fn opcode(b: &[u8]) -> Option<Opcode> {
    if b.len() < 4 || b[0..2] != MAGIC || b[2] != VERSION {
        return None;
    }
    match b[3] {
        OP_READ_REQUEST => Some(Opcode::ReadRequest),
        OP_READ_RESPONSE => Some(Opcode::ReadResponse),
        OP_WRITE_REQUEST => Some(Opcode::WriteRequest),
        OP_WRITE_ACK => Some(Opcode::WriteAck),
        _ => None,
    }
}

/// The opcode of a read datagram: `Some(true)` for a read request, `Some(false)` for a read
/// response, `None` otherwise (writes included).
pub fn is_request(b: &[u8]) -> Option<bool> {
    match opcode(b)? {
        Opcode::ReadRequest => Some(true),
        Opcode::ReadResponse => Some(false),
        _ => None,
    }
}

/// A read request: read `length` bytes at `offset` of `region`, and send `packet` back with
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest<'a> {
    /// Chosen by the switch; the response carries it back.
    pub request_id: u32,
    /// Region number.
    pub region: u32,
    /// First byte to read.
    pub offset: u64,
    /// Bytes to read.
    pub length: u32,
    /// The access key of the server's copy of the region.
    pub key: u64,
    /// The original packet, carried along.
    pub packet: &'a [u8],
}

impl<'a> ReadRequest<'a> {
    /// Parses a request datagram.
    pub fn parse(b: &'a [u8]) -> Result<ReadRequest<'a>, WireError> {
        check_common(b, REQUEST_HEADER, OP_READ_REQUEST)?;
        if b[26] != 0 || b[27] != 0 {
            return Err(WireError::Reserved);
        }
        let length = be32(b, 20);
        if length > MAX_READ {
            return Err(WireError::ReadTooLong(length));
        }
        let plen = be16(b, 24) as usize;
        if plen > MAX_PACKET {
            return Err(WireError::PacketTooLong(plen));
        }
        if b.len() != REQUEST_HEADER + plen {
            return Err(WireError::Length {
                declared: REQUEST_HEADER + plen,
                actual: b.len(),
            });
        }
        Ok(ReadRequest {
            request_id: be32(b, 4),
            region: be32(b, 8),
            offset: u64::from_be_bytes(b[12..20].try_into().expect("8 bytes")),
            length,
            key: u64::from_be_bytes(b[28..36].try_into().expect("8 bytes")),
            packet: &b[REQUEST_HEADER..],
        })
    }

    /// Bytes of the encoded request.
    pub fn encoded_len(&self) -> usize {
        REQUEST_HEADER + self.packet.len()
    }

    /// Appends the encoded request to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        if self.length > MAX_READ {
            return Err(WireError::ReadTooLong(self.length));
        }
        if self.packet.len() > MAX_PACKET {
            return Err(WireError::PacketTooLong(self.packet.len()));
        }
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, OP_READ_REQUEST]);
        out.extend_from_slice(&self.request_id.to_be_bytes());
        out.extend_from_slice(&self.region.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.length.to_be_bytes());
        out.extend_from_slice(&(self.packet.len() as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.key.to_be_bytes());
        out.extend_from_slice(self.packet);
        Ok(())
    }
}

/// A read response: the bytes read and the packet the request carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadResponse<'a> {
    /// The request's id.
    pub request_id: u32,
    /// What the server did.
    pub status: Status,
    /// The bytes read (empty unless `status` is [`Status::Ok`]).
    pub data: &'a [u8],
    /// The original packet.
    pub packet: &'a [u8],
}

impl<'a> ReadResponse<'a> {
    /// Parses a response datagram.
    pub fn parse(b: &'a [u8]) -> Result<ReadResponse<'a>, WireError> {
        check_common(b, RESPONSE_HEADER, OP_READ_RESPONSE)?;
        let status = Status::from_u8(b[8])?;
        if b[9] != 0 {
            return Err(WireError::Reserved);
        }
        let plen = be16(b, 10) as usize;
        if plen > MAX_PACKET {
            return Err(WireError::PacketTooLong(plen));
        }
        let dlen = be32(b, 12);
        if dlen > MAX_READ {
            return Err(WireError::ReadTooLong(dlen));
        }
        if status != Status::Ok && dlen != 0 {
            return Err(WireError::DataWithError(status));
        }
        let declared = RESPONSE_HEADER + dlen as usize + plen;
        if b.len() != declared {
            return Err(WireError::Length {
                declared,
                actual: b.len(),
            });
        }
        let (data, packet) = b[RESPONSE_HEADER..].split_at(dlen as usize);
        Ok(ReadResponse {
            request_id: be32(b, 4),
            status,
            data,
            packet,
        })
    }

    /// Bytes of the encoded response.
    pub fn encoded_len(&self) -> usize {
        RESPONSE_HEADER + self.data.len() + self.packet.len()
    }

    /// Appends the encoded response to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        if self.data.len() > MAX_READ as usize {
            return Err(WireError::ReadTooLong(
                self.data.len().min(u32::MAX as usize) as u32,
            ));
        }
        if self.packet.len() > MAX_PACKET {
            return Err(WireError::PacketTooLong(self.packet.len()));
        }
        if self.status != Status::Ok && !self.data.is_empty() {
            return Err(WireError::DataWithError(self.status));
        }
        emit_response_header(
            out,
            self.request_id,
            self.status,
            self.data.len(),
            self.packet.len(),
        );
        out.extend_from_slice(self.data);
        out.extend_from_slice(self.packet);
        Ok(())
    }
}

fn emit_response_header(out: &mut Vec<u8>, id: u32, status: Status, dlen: usize, plen: usize) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, OP_READ_RESPONSE]);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[status as u8, 0]);
    out.extend_from_slice(&(plen as u16).to_be_bytes());
    out.extend_from_slice(&(dlen as u32).to_be_bytes());
}

/// The memory server's whole job for one read: copies `req.length` bytes at `req.offset` of
/// `region` (the region `req.region` names; `None` if the server has none of that number)
/// into a response appended to `out`, with the request's packet after them. Out of bounds or
/// unknown region: a response of that status with no data (the packet still comes back, so the
/// switch can count and drop it). Never panics; returns the status sent.
pub fn serve_read<R: MemoryRegion + ?Sized>(
    region: Option<&R>,
    req: &ReadRequest<'_>,
    out: &mut Vec<u8>,
) -> Status {
    let start = out.len();
    let Some(region) = region else {
        return refuse_read(req, Status::UnknownRegion, out);
    };
    let len = req.length as usize;
    emit_response_header(out, req.request_id, Status::Ok, len, req.packet.len());
    let data_at = out.len();
    out.resize(data_at + len, 0);
    if region.read_at(req.offset, &mut out[data_at..]).is_err() {
        out.truncate(start);
        return refuse_read(req, Status::OutOfBounds, out);
    }
    out.extend_from_slice(req.packet);
    Status::Ok
}

/// A write request: store `data` at `offset` of `region` (one bucket's new image).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteRequest<'a> {
    /// Chosen by the writer; the acknowledgement carries it back.
    pub request_id: u32,
    /// Region number.
    pub region: u32,
    /// First byte to write.
    pub offset: u64,
    /// The access key of the server's copy of the region.
    pub key: u64,
    /// The bytes.
    pub data: &'a [u8],
}

impl<'a> WriteRequest<'a> {
    /// Parses a write request datagram.
    pub fn parse(b: &'a [u8]) -> Result<WriteRequest<'a>, WireError> {
        check_common(b, WRITE_HEADER, OP_WRITE_REQUEST)?;
        let length = be32(b, 20);
        if length > MAX_WRITE {
            return Err(WireError::ReadTooLong(length));
        }
        let declared = WRITE_HEADER + length as usize;
        if b.len() != declared {
            return Err(WireError::Length {
                declared,
                actual: b.len(),
            });
        }
        Ok(WriteRequest {
            request_id: be32(b, 4),
            region: be32(b, 8),
            offset: u64::from_be_bytes(b[12..20].try_into().expect("8 bytes")),
            key: u64::from_be_bytes(b[24..32].try_into().expect("8 bytes")),
            data: &b[WRITE_HEADER..],
        })
    }

    /// Bytes of the encoded request.
    pub fn encoded_len(&self) -> usize {
        WRITE_HEADER + self.data.len()
    }

    /// Appends the encoded request to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), WireError> {
        if self.data.len() > MAX_WRITE as usize {
            return Err(WireError::ReadTooLong(
                self.data.len().min(u32::MAX as usize) as u32,
            ));
        }
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, OP_WRITE_REQUEST]);
        out.extend_from_slice(&self.request_id.to_be_bytes());
        out.extend_from_slice(&self.region.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&(self.data.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.key.to_be_bytes());
        out.extend_from_slice(self.data);
        Ok(())
    }
}

/// A write's acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteAck {
    /// The request's id.
    pub request_id: u32,
    /// What the server did ([`Status::Ok`]: every byte written).
    pub status: Status,
}

impl WriteAck {
    /// Parses an acknowledgement datagram.
    pub fn parse(b: &[u8]) -> Result<WriteAck, WireError> {
        check_common(b, WRITE_ACK, OP_WRITE_ACK)?;
        if b.len() != WRITE_ACK {
            return Err(WireError::Length {
                declared: WRITE_ACK,
                actual: b.len(),
            });
        }
        let status = Status::from_u8(b[8])?;
        if b[9..12] != [0, 0, 0] {
            return Err(WireError::Reserved);
        }
        Ok(WriteAck {
            request_id: be32(b, 4),
            status,
        })
    }

    /// Appends the encoded acknowledgement to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&[VERSION, OP_WRITE_ACK]);
        out.extend_from_slice(&self.request_id.to_be_bytes());
        out.extend_from_slice(&[self.status as u8, 0, 0, 0]);
    }
}

/// A read refused with `status` (no data; the packet comes back, so the switch can count and
/// drop it): appends the response to `out` and returns `status`.
pub fn refuse_read(req: &ReadRequest<'_>, status: Status, out: &mut Vec<u8>) -> Status {
    emit_response_header(out, req.request_id, status, 0, req.packet.len());
    out.extend_from_slice(req.packet);
    status
}

/// Appends `req`'s acknowledgement with `status` to `out` (a refusal, such as
/// [`Status::AccessDenied`], when nothing was written) and returns `status`.
pub fn ack_write(req: &WriteRequest<'_>, status: Status, out: &mut Vec<u8>) -> Status {
    WriteAck {
        request_id: req.request_id,
        status,
    }
    .emit(out);
    status
}

/// Whether a request's access key is a region's, compared in constant time (the time taken
/// says nothing of how many leading bits of a guess were right).
pub fn key_matches(given: u64, region: u64) -> bool {
    std::hint::black_box(given ^ region) == 0
}

/// The memory server's whole job for one write: stores `req.data` at `req.offset` of `region`
/// (`None`: the server has no region of that number) with [`Region::write_words`]'s order,
/// and appends the acknowledgement to `out`. Never panics; returns the status sent.
pub fn serve_write(region: Option<&Region>, req: &WriteRequest<'_>, out: &mut Vec<u8>) -> Status {
    let status = match region {
        None => Status::UnknownRegion,
        Some(r) => match r.write_words(req.offset, req.data) {
            Ok(()) => Status::Ok,
            Err(WriteError::OutOfBounds(_)) => Status::OutOfBounds,
            Err(WriteError::Unaligned) => Status::Unaligned,
        },
    };
    ack_write(req, status, out)
}

/// A read request's receive path without access keys (tests and benchmarks that serve a table
/// in-process): parses a request datagram and serves it from `regions(number)`. A datagram
/// that is not a valid request gets no answer (`Err`), as a NIC drops it. The memory servers
/// of a cluster (`sb_tea_net::server::MemoryServer`) check each copy's key first.
pub fn serve_datagram<'r, R, F>(
    regions: F,
    datagram: &[u8],
    out: &mut Vec<u8>,
) -> Result<Status, WireError>
where
    R: MemoryRegion + ?Sized + 'r,
    F: FnOnce(u32) -> Option<&'r R>,
{
    let req = ReadRequest::parse(datagram)?;
    Ok(serve_read(regions(req.region), &req, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Version 2's requests carry the access key after the fields version 1 had; a version 1
    /// request (no key) is refused as a version this code does not speak, never read as if it
    /// had one.
    #[test]
    fn keys_round_trip_and_version_1_is_refused() {
        let w = WriteRequest {
            request_id: 3,
            region: 1,
            offset: 8,
            key: u64::MAX - 5,
            data: &[7; 16],
        };
        let mut b = Vec::new();
        w.emit(&mut b).unwrap();
        assert_eq!(b.len(), WRITE_HEADER + 16);
        assert_eq!(WriteRequest::parse(&b), Ok(w));
        let mut v1 = b.clone();
        v1[2] = 1;
        assert_eq!(WriteRequest::parse(&v1), Err(WireError::Version(1)));
        assert_eq!(opcode(&v1), None);
        let r = ReadRequest {
            request_id: 4,
            region: 1,
            offset: 0,
            length: 8,
            key: 1,
            packet: &[],
        };
        b.clear();
        r.emit(&mut b).unwrap();
        assert_eq!(ReadRequest::parse(&b).map(|r| r.key), Ok(1));
        b[2] = 1;
        assert_eq!(ReadRequest::parse(&b), Err(WireError::Version(1)));
        assert!(key_matches(5, 5) && !key_matches(5, 4) && !key_matches(0, 1 << 63));
        let mut out = Vec::new();
        assert_eq!(
            refuse_read(&r, Status::AccessDenied, &mut out),
            Status::AccessDenied
        );
        let resp = ReadResponse::parse(&out).unwrap();
        assert_eq!((resp.status, resp.data), (Status::AccessDenied, &[][..]));
        out.clear();
        ack_write(&w, Status::AccessDenied, &mut out);
        assert_eq!(WriteAck::parse(&out).unwrap().status, Status::AccessDenied);
    }

    #[test]
    fn request_and_response_round_trip() {
        let req = ReadRequest {
            request_id: 7,
            region: 2,
            offset: 96,
            length: 32,
            key: 0xfeed_0000_beef_0001,
            packet: b"pkt!",
        };
        let mut b = Vec::new();
        req.emit(&mut b).unwrap();
        assert_eq!(b.len(), req.encoded_len());
        assert_eq!(b.len(), 40);
        assert_eq!(b[28..36], 0xfeed_0000_beef_0001u64.to_be_bytes());
        assert_eq!(ReadRequest::parse(&b), Ok(req));
        assert_eq!(is_request(&b), Some(true));
        let region: Vec<u8> = (0..200u8).collect();
        let mut out = Vec::new();
        assert_eq!(
            serve_datagram(|r| (r == 2).then_some(&region[..]), &b, &mut out),
            Ok(Status::Ok)
        );
        let resp = ReadResponse::parse(&out).unwrap();
        assert_eq!(is_request(&out), Some(false));
        assert_eq!(
            (resp.request_id, resp.status, resp.packet),
            (7, Status::Ok, &b"pkt!"[..])
        );
        assert_eq!(resp.data, &region[96..128]);
        assert_eq!(out.len(), resp.encoded_len());
        let mut again = Vec::new();
        resp.emit(&mut again).unwrap();
        assert_eq!(again, out);
    }

    #[test]
    fn server_bounds_and_unknown_regions() {
        let region = [1u8; 64];
        let mut out = Vec::new();
        for (offset, length, want) in [
            (0, 64, Status::Ok),
            (63, 1, Status::Ok),
            (64, 0, Status::Ok),
            (63, 2, Status::OutOfBounds),
            (u64::MAX, 8, Status::OutOfBounds),
            (65, 0, Status::OutOfBounds),
        ] {
            out.clear();
            let req = ReadRequest {
                request_id: 1,
                region: 0,
                offset,
                length,
                key: 0,
                packet: b"x",
            };
            assert_eq!(
                serve_read(Some(&region[..]), &req, &mut out),
                want,
                "{offset} {length}"
            );
            let resp = ReadResponse::parse(&out).unwrap();
            assert_eq!(
                (resp.status, resp.packet, resp.data.len()),
                (
                    want,
                    &b"x"[..],
                    if want == Status::Ok {
                        length as usize
                    } else {
                        0
                    }
                )
            );
        }
        out.clear();
        let req = ReadRequest {
            request_id: 9,
            region: 5,
            offset: 0,
            length: 4,
            key: 0,
            packet: b"",
        };
        assert_eq!(
            serve_read(None::<&[u8]>, &req, &mut out),
            Status::UnknownRegion
        );
        assert_eq!(
            ReadResponse::parse(&out).unwrap().status,
            Status::UnknownRegion
        );
    }

    #[test]
    fn writes_round_trip_and_are_checked() {
        let region = Region::from_image(&[0u8; 64]);
        let data: Vec<u8> = (1..=24).collect();
        let req = WriteRequest {
            request_id: 5,
            region: 3,
            offset: 8,
            key: 0,
            data: &data,
        };
        let mut b = Vec::new();
        req.emit(&mut b).unwrap();
        assert_eq!(b.len(), req.encoded_len());
        assert_eq!(WriteRequest::parse(&b), Ok(req));
        assert_eq!(opcode(&b), Some(Opcode::WriteRequest));
        assert_eq!(is_request(&b), None);
        assert_eq!(ReadRequest::parse(&b), Err(WireError::Opcode(3)));
        let mut out = Vec::new();
        assert_eq!(serve_write(Some(&region), &req, &mut out), Status::Ok);
        assert_eq!(opcode(&out), Some(Opcode::WriteAck));
        assert_eq!(
            WriteAck::parse(&out),
            Ok(WriteAck {
                request_id: 5,
                status: Status::Ok
            })
        );
        let snap = region.snapshot();
        assert_eq!(&snap[8..32], &data[..]);
        assert!(snap[..8].iter().chain(&snap[32..]).all(|&x| x == 0));
        for (offset, len, want) in [
            (4, 16, Status::Unaligned),
            (8, 12, Status::Unaligned),
            (8, 8, Status::Unaligned),
            (56, 16, Status::OutOfBounds),
            (u64::MAX - 7, 16, Status::OutOfBounds),
        ] {
            let d = vec![9u8; len];
            let r = WriteRequest {
                request_id: 1,
                region: 0,
                offset,
                key: 0,
                data: &d,
            };
            out.clear();
            assert_eq!(serve_write(Some(&region), &r, &mut out), want, "{offset}");
            assert_eq!(WriteAck::parse(&out).unwrap().status, want);
            assert_eq!(region.snapshot(), snap, "a refused write changed bytes");
        }
        out.clear();
        assert_eq!(serve_write(None, &req, &mut out), Status::UnknownRegion);
        assert_eq!(
            WriteRequest::parse(&b[..b.len() - 1]),
            Err(WireError::Length {
                declared: 56,
                actual: 55
            })
        );
        let mut m = out.clone();
        m[11] = 1;
        assert_eq!(WriteAck::parse(&m), Err(WireError::Reserved));
        m.push(0);
        assert!(WriteAck::parse(&m).is_err());
    }

    #[test]
    fn parser_errors() {
        let mut b = Vec::new();
        ReadRequest {
            request_id: 1,
            region: 0,
            offset: 0,
            length: 8,
            key: 0,
            packet: b"ab",
        }
        .emit(&mut b)
        .unwrap();
        assert_eq!(
            ReadRequest::parse(&b[..35]),
            Err(WireError::Truncated { need: 36, got: 35 })
        );
        assert_eq!(
            ReadRequest::parse(&b[..37]),
            Err(WireError::Length {
                declared: 38,
                actual: 37
            })
        );
        let mut m = b.clone();
        m[0] = b'X';
        assert_eq!(ReadRequest::parse(&m), Err(WireError::Magic));
        let mut m = b.clone();
        m[2] = 3;
        assert_eq!(ReadRequest::parse(&m), Err(WireError::Version(3)));
        let mut m = b.clone();
        m[3] = 2;
        assert_eq!(ReadRequest::parse(&m), Err(WireError::Opcode(2)));
        let mut m = b.clone();
        m[27] = 1;
        assert_eq!(ReadRequest::parse(&m), Err(WireError::Reserved));
        let mut m = b.clone();
        m[20..24].copy_from_slice(&(MAX_READ + 1).to_be_bytes());
        assert_eq!(
            ReadRequest::parse(&m),
            Err(WireError::ReadTooLong(MAX_READ + 1))
        );
        let big = vec![0u8; MAX_PACKET + 1];
        let r = ReadRequest {
            request_id: 1,
            region: 0,
            offset: 0,
            length: 8,
            key: 0,
            packet: &big,
        };
        assert_eq!(
            r.emit(&mut Vec::new()),
            Err(WireError::PacketTooLong(MAX_PACKET + 1))
        );
        let mut resp = Vec::new();
        ReadResponse {
            request_id: 1,
            status: Status::OutOfBounds,
            data: b"",
            packet: b"p",
        }
        .emit(&mut resp)
        .unwrap();
        let mut m = resp.clone();
        m[8] = 9;
        assert_eq!(ReadResponse::parse(&m), Err(WireError::Status(9)));
        let mut m = resp.clone();
        m[12..16].copy_from_slice(&1u32.to_be_bytes());
        m.push(0);
        assert_eq!(
            ReadResponse::parse(&m),
            Err(WireError::DataWithError(Status::OutOfBounds))
        );
        assert_eq!(is_request(b"TE\x01\x03"), None);
    }
}
