//! GTP-U version 1 headers (3GPP TS 29.281 sec. 5).
//!
//! Mandatory header (8 bytes): flags (version 3 bits = 1, PT 1 bit = 1, spare, E, S, PN), message
//! type, length (bytes after these 8), TEID. When any of E, S, PN is set, 4 more bytes follow:
//! sequence number (2), N-PDU number (1), next extension header type (1) -- each meaningful only
//! when its own flag is set, and the length counts them. Each extension header is `4 * n` bytes:
//! length `n` (1 byte, non-zero), content, next extension header type (last byte); type 0 ends
//! the chain.
//!
//! `new_checked` validates all of that once (including walking the extension chain) and records
//! where the payload starts, so accessors never panic afterwards.

use crate::field::{be16, be32, set_be16, set_be32};
use crate::EmitError;

/// Length of the mandatory header.
pub const HEADER_LEN: usize = 8;
/// Length of the optional sequence / N-PDU / next-type word.
pub const OPT_LEN: usize = 4;

/// Message types (TS 29.281 table 6.1-1).
pub mod msg_type {
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 1;
    /// Echo response.
    pub const ECHO_RESPONSE: u8 = 2;
    /// Error indication.
    pub const ERROR_INDICATION: u8 = 26;
    /// Supported extension headers notification.
    pub const SUPPORTED_EXT_HEADERS: u8 = 31;
    /// End marker.
    pub const END_MARKER: u8 = 254;
    /// G-PDU: the payload is a user packet (T-PDU).
    pub const G_PDU: u8 = 255;
}

/// Extension header types (TS 29.281 figure 5.2.1-3), for reference.
pub mod ext_type {
    /// No more extension headers.
    pub const NONE: u8 = 0x00;
    /// UDP port (error indication).
    pub const UDP_PORT: u8 = 0x40;
    /// PDU session container (5G, TS 38.415).
    pub const PDU_SESSION_CONTAINER: u8 = 0x85;
    /// PDCP PDU number.
    pub const PDCP_PDU_NUMBER: u8 = 0xc0;
}

const FLAG_E: u8 = 0x04;
const FLAG_S: u8 = 0x02;
const FLAG_PN: u8 = 0x01;

/// Why a buffer is not a well-formed GTP-U message.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, thiserror::Error)]
pub enum GtpuError {
    /// Shorter than the 8-byte mandatory header.
    #[error("GTP-U message shorter than 8 bytes")]
    Truncated,
    /// Version field is not 1.
    #[error("GTP version is not 1")]
    BadVersion,
    /// Protocol type bit is 0 (GTP'), not GTP.
    #[error("GTP protocol type is not 1 (GTP' is not GTP-U)")]
    BadProtocolType,
    /// The length field runs past the buffer, or is too short for the optional word that the
    /// E/S/PN flags announce.
    #[error("GTP-U length field inconsistent with the buffer or the flags")]
    BadLength,
    /// An extension header has length 0 or runs past the message.
    #[error("GTP-U extension header with length 0 or past the message")]
    BadExtension,
}

/// A checked view of a GTP-U message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GtpuPacket<T: AsRef<[u8]>> {
    buffer: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> GtpuPacket<T> {
    /// Validates version, PT, the length field, the optional word and the extension chain;
    /// afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Self, GtpuError> {
        let header_len = check(buffer.as_ref())?;
        Ok(Self { buffer, header_len })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Version (1).
    pub fn version(&self) -> u8 {
        self.flags() >> 5
    }
    /// True when E, S or PN is set (the optional word is present).
    pub fn has_optional_word(&self) -> bool {
        self.flags() & (FLAG_E | FLAG_S | FLAG_PN) != 0
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// Length field: bytes after the mandatory header.
    pub fn length(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Tunnel endpoint identifier.
    pub fn teid(&self) -> u32 {
        be32(self.buffer.as_ref(), 4)
    }
    /// Sequence number, when the S flag is set.
    pub fn seq_number(&self) -> Option<u16> {
        (self.flags() & FLAG_S != 0).then(|| be16(self.buffer.as_ref(), 8))
    }
    /// N-PDU number, when the PN flag is set.
    pub fn npdu_number(&self) -> Option<u8> {
        (self.flags() & FLAG_PN != 0).then(|| self.buffer.as_ref()[10])
    }
    /// Type of the first extension header, when the E flag is set and it is not 0.
    pub fn first_ext_type(&self) -> Option<u8> {
        if self.flags() & FLAG_E == 0 {
            return None;
        }
        // new_checked made sure the optional word is there when E is set.
        let t = self.buffer.as_ref()[11];
        (t != 0).then_some(t)
    }
    /// The extension header chain bytes (empty when there is none).
    pub fn ext_bytes(&self) -> &[u8] {
        let start = if self.has_optional_word() {
            HEADER_LEN + OPT_LEN
        } else {
            HEADER_LEN
        };
        &self.buffer.as_ref()[start..self.header_len]
    }
    /// The extension headers, in order.
    pub fn extensions(&self) -> ExtIter<'_> {
        ExtIter {
            next_type: self.first_ext_type().unwrap_or(0),
            bytes: self.ext_bytes(),
        }
    }
    /// Length of everything before the payload: 8, 12, or 12 plus the extension chain.
    pub fn header_len(&self) -> usize {
        self.header_len
    }
    /// The payload (for a G-PDU: the user packet), up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len..HEADER_LEN + usize::from(self.length())]
    }
}

impl<T: AsRef<[u8]>> GtpuPacket<T> {
    /// The first PDU Session Container extension header's fields (type 0x85, TS 38.415), if
    /// the message has one and it is at least 2 content bytes long.
    pub fn pdu_session(&self) -> Option<PduSession> {
        self.extensions()
            .find(|e| e.ext_type == ext_type::PDU_SESSION_CONTAINER)
            .and_then(|e| PduSession::parse(e.content))
    }
}

/// The PDU Session Container (TS 38.415 sec. 5.5.2; GTP-U extension header type 0x85, TS
/// 29.281 sec. 5.2.2.7): the 5G QoS flow a G-PDU belongs to. Its first two content bytes:
///
/// - DL PDU SESSION INFORMATION (PDU type 0): `type(4) | QMP | SNP | MSNP | spare`, then
///   `PPP | RQI | QFI(6)`;
/// - UL PDU SESSION INFORMATION (PDU type 1): `type(4) | QMP | DL delay | UL delay | SNP`,
///   then `N3/N9 delay | new IE flag | QFI(6)`.
///
/// Optional fields the flags announce follow; [`PduSession::parse`] reads the two bytes and
/// leaves the rest. [`PduSession::ext_header`] writes the 4-byte header a UPF sends downlink
/// (length 1, no optional fields, next type 0).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct PduSession {
    /// PDU type: [`PduSession::DL`] or [`PduSession::UL`] (others are reserved).
    pub pdu_type: u8,
    /// The QoS flow identifier (6 bits).
    pub qfi: u8,
    /// Reflective QoS indication (downlink only; the bit is the new IE flag uplink, read as
    /// false there).
    pub rqi: bool,
}

impl PduSession {
    /// DL PDU SESSION INFORMATION.
    pub const DL: u8 = 0;
    /// UL PDU SESSION INFORMATION.
    pub const UL: u8 = 1;
    /// Bytes of the downlink extension header [`PduSession::ext_header`] writes.
    pub const EXT_LEN: usize = 4;

    /// A downlink container for QoS flow `qfi` (masked to 6 bits).
    pub fn downlink(qfi: u8, rqi: bool) -> PduSession {
        PduSession {
            pdu_type: Self::DL,
            qfi: qfi & 0x3f,
            rqi,
        }
    }

    /// Reads the content of a container extension header (the bytes between its length byte
    /// and its next-type byte); `None` when shorter than 2 bytes.
    pub fn parse(content: &[u8]) -> Option<PduSession> {
        let (a, b) = (*content.first()?, *content.get(1)?);
        let pdu_type = a >> 4;
        Some(PduSession {
            pdu_type,
            qfi: b & 0x3f,
            rqi: pdu_type == Self::DL && b & 0x40 != 0,
        })
    }

    /// The whole extension header: length 1, PDU type in the high nibble (no QMP/SNP/MSNP),
    /// `PPP=0 | RQI | QFI`, next extension type 0.
    pub fn ext_header(&self) -> [u8; Self::EXT_LEN] {
        [
            1,
            self.pdu_type << 4,
            (u8::from(self.rqi) << 6) | (self.qfi & 0x3f),
            ext_type::NONE,
        ]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> GtpuPacket<T> {
    /// Sets the TEID.
    pub fn set_teid(&mut self, teid: u32) {
        set_be32(self.buffer.as_mut(), 4, teid);
    }
}

/// Validates a GTP-U message and returns its header length (where the payload starts).
fn check(b: &[u8]) -> Result<usize, GtpuError> {
    if b.len() < HEADER_LEN {
        return Err(GtpuError::Truncated);
    }
    let flags = b[0];
    if flags >> 5 != 1 {
        return Err(GtpuError::BadVersion);
    }
    if flags & 0x10 == 0 {
        return Err(GtpuError::BadProtocolType);
    }
    let end = HEADER_LEN + usize::from(be16(b, 2));
    if end > b.len() {
        return Err(GtpuError::BadLength);
    }
    if flags & (FLAG_E | FLAG_S | FLAG_PN) == 0 {
        return Ok(HEADER_LEN);
    }
    let mut off = HEADER_LEN + OPT_LEN;
    if off > end {
        return Err(GtpuError::BadLength);
    }
    if flags & FLAG_E == 0 {
        return Ok(off);
    }
    let mut next = b[off - 1];
    while next != 0 {
        let units = usize::from(*b[..end].get(off).ok_or(GtpuError::BadExtension)?);
        if units == 0 {
            return Err(GtpuError::BadExtension);
        }
        let len = units * 4;
        if off + len > end {
            return Err(GtpuError::BadExtension);
        }
        next = b[off + len - 1];
        off += len;
    }
    Ok(off)
}

/// One extension header.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct GtpuExt<'a> {
    /// Its type (from the previous header's next-type byte).
    pub ext_type: u8,
    /// Its content: the bytes between the length byte and the next-type byte (`4n - 2` bytes).
    pub content: &'a [u8],
}

/// Iterator over a validated extension chain.
#[derive(Clone, Debug)]
pub struct ExtIter<'a> {
    next_type: u8,
    bytes: &'a [u8],
}

impl<'a> Iterator for ExtIter<'a> {
    type Item = GtpuExt<'a>;
    fn next(&mut self) -> Option<GtpuExt<'a>> {
        if self.next_type == 0 {
            return None;
        }
        let len = usize::from(*self.bytes.first()?) * 4;
        let (this, rest) = (self.bytes.get(..len)?, self.bytes.get(len..)?);
        if len < 4 {
            return None;
        }
        let e = GtpuExt {
            ext_type: self.next_type,
            content: &this[1..len - 1],
        };
        self.next_type = this[len - 1];
        self.bytes = rest;
        Some(e)
    }
}

/// The fields of a GTP-U header.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct GtpuRepr<'a> {
    /// Message type (255 = G-PDU).
    pub msg_type: u8,
    /// Tunnel endpoint identifier.
    pub teid: u32,
    /// Sequence number (sets S).
    pub seq_number: Option<u16>,
    /// N-PDU number (sets PN).
    pub npdu_number: Option<u8>,
    /// Extension headers (sets E): first type and the raw chain bytes as on the wire (each
    /// header's length byte, content, next type; the last next type 0).
    pub extensions: Option<(u8, &'a [u8])>,
}

impl<'a> GtpuRepr<'a> {
    /// A G-PDU header with just a TEID.
    pub fn g_pdu(teid: u32) -> Self {
        Self {
            msg_type: msg_type::G_PDU,
            teid,
            seq_number: None,
            npdu_number: None,
            extensions: None,
        }
    }

    /// Reads a checked message (the extension chain borrows from the message's buffer).
    pub fn parse(p: &GtpuPacket<&'a [u8]>) -> Self {
        let buf: &'a [u8] = p.buffer;
        let start = if p.has_optional_word() {
            HEADER_LEN + OPT_LEN
        } else {
            HEADER_LEN
        };
        Self {
            msg_type: p.msg_type(),
            teid: p.teid(),
            seq_number: p.seq_number(),
            npdu_number: p.npdu_number(),
            extensions: p.first_ext_type().map(|t| (t, &buf[start..p.header_len])),
        }
    }

    /// Header length this repr emits.
    pub fn header_len(&self) -> usize {
        let opt =
            self.seq_number.is_some() || self.npdu_number.is_some() || self.extensions.is_some();
        let ext = self.extensions.map_or(0, |(_, b)| b.len());
        HEADER_LEN + if opt { OPT_LEN } else { 0 } + ext
    }

    /// Writes the header at the start of `buf`; `payload_len` is the length of what follows the
    /// header (the length field becomes `header_len() - 8 + payload_len`). The extension chain is
    /// validated (`EmitError::BadField` if its lengths do not add up, a length is 0, the first
    /// type is 0, or the last next type is not 0).
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<(), EmitError> {
        let h = self.header_len();
        let length = u16::try_from(h - HEADER_LEN + payload_len).map_err(|_| EmitError::TooLong)?;
        if let Some((first, chain)) = self.extensions {
            if first == 0 || !chain_is_valid(chain) {
                return Err(EmitError::BadField);
            }
        }
        let b = crate::prefix_mut(buf, h)?;
        let mut flags = 0x30u8;
        if self.extensions.is_some() {
            flags |= FLAG_E;
        }
        if self.seq_number.is_some() {
            flags |= FLAG_S;
        }
        if self.npdu_number.is_some() {
            flags |= FLAG_PN;
        }
        b[0] = flags;
        b[1] = self.msg_type;
        set_be16(b, 2, length);
        set_be32(b, 4, self.teid);
        if h > HEADER_LEN {
            set_be16(b, 8, self.seq_number.unwrap_or(0));
            b[10] = self.npdu_number.unwrap_or(0);
            b[11] = self.extensions.map_or(0, |(t, _)| t);
            if let Some((_, chain)) = self.extensions {
                b[12..].copy_from_slice(chain);
            }
        }
        Ok(())
    }
}

fn chain_is_valid(chain: &[u8]) -> bool {
    let mut off = 0;
    loop {
        let Some(&units) = chain.get(off) else {
            return false;
        };
        let len = usize::from(units) * 4;
        if len == 0 || off + len > chain.len() {
            return false;
        }
        let next = chain[off + len - 1];
        off += len;
        if next == 0 {
            return off == chain.len();
        }
    }
}

/// Writes an extension chain for `exts` into `out` and returns `(first type, bytes written)`.
/// Each content must be `4n - 2` bytes long (n >= 1, at most 255) and each type non-zero.
pub fn write_ext_chain(exts: &[GtpuExt<'_>], out: &mut [u8]) -> Result<(u8, usize), EmitError> {
    let Some(first) = exts.first() else {
        return Err(EmitError::BadField);
    };
    let mut off = 0;
    for (i, e) in exts.iter().enumerate() {
        let len = e.content.len() + 2;
        if e.ext_type == 0 || len % 4 != 0 || len / 4 > 255 {
            return Err(EmitError::BadField);
        }
        let got = out.len();
        let dst = out
            .get_mut(off..off + len)
            .ok_or(EmitError::BufferTooSmall {
                needed: off + len,
                got,
            })?;
        dst[0] = (len / 4) as u8;
        dst[1..len - 1].copy_from_slice(e.content);
        dst[len - 1] = exts.get(i + 1).map_or(0, |n| n.ext_type);
        off += len;
    }
    Ok((first.ext_type, off))
}
