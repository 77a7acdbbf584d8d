//! Information elements (TS 29.244 clause 8): their type numbers, the typed values we read and
//! write, and the TLV reader and writer the messages are made of.
//!
//! Every IE is `type (2) | length (2) | value`; a grouped IE's value is a sequence of IEs. An IE
//! whose type has the top bit set is enterprise-specific (its value starts with the 2-byte
//! enterprise id) and, like every IE type a group does not define, is skipped. A group repeats
//! an IE only where the specification allows it (several Create PDRs, URR IDs); where it does
//! not, the first one counts and later ones are skipped (clause 7.6 leaves that to the
//! receiver). Fixed-size fields longer than we read (later releases add octets) are accepted:
//! the octets past what we read are ignored, as clause 8.1.1 asks.

use std::net::{Ipv4Addr, Ipv6Addr};

/// IE type numbers (TS 29.244 table 8.1.2-1) this crate reads or writes.
pub mod ie_type {
    #![allow(missing_docs)]
    pub const CREATE_PDR: u16 = 1;
    pub const PDI: u16 = 2;
    pub const CREATE_FAR: u16 = 3;
    pub const FORWARDING_PARAMETERS: u16 = 4;
    pub const CREATE_URR: u16 = 6;
    pub const CREATE_QER: u16 = 7;
    pub const CREATED_PDR: u16 = 8;
    pub const UPDATE_PDR: u16 = 9;
    pub const UPDATE_FAR: u16 = 10;
    pub const UPDATE_FORWARDING_PARAMETERS: u16 = 11;
    pub const UPDATE_URR: u16 = 13;
    pub const UPDATE_QER: u16 = 14;
    pub const REMOVE_PDR: u16 = 15;
    pub const REMOVE_FAR: u16 = 16;
    pub const REMOVE_URR: u16 = 17;
    pub const REMOVE_QER: u16 = 18;
    pub const CAUSE: u16 = 19;
    pub const SOURCE_INTERFACE: u16 = 20;
    pub const F_TEID: u16 = 21;
    pub const NETWORK_INSTANCE: u16 = 22;
    pub const SDF_FILTER: u16 = 23;
    pub const GATE_STATUS: u16 = 25;
    pub const MBR: u16 = 26;
    pub const GBR: u16 = 27;
    pub const QER_CORRELATION_ID: u16 = 28;
    pub const PRECEDENCE: u16 = 29;
    pub const REPORTING_TRIGGERS: u16 = 37;
    pub const OFFENDING_IE: u16 = 40;
    pub const DESTINATION_INTERFACE: u16 = 42;
    pub const UP_FUNCTION_FEATURES: u16 = 43;
    pub const APPLY_ACTION: u16 = 44;
    pub const PDR_ID: u16 = 56;
    pub const F_SEID: u16 = 57;
    pub const NODE_ID: u16 = 60;
    pub const MEASUREMENT_METHOD: u16 = 62;
    pub const URR_ID: u16 = 81;
    pub const OUTER_HEADER_CREATION: u16 = 84;
    pub const CP_FUNCTION_FEATURES: u16 = 89;
    pub const UE_IP_ADDRESS: u16 = 93;
    pub const OUTER_HEADER_REMOVAL: u16 = 95;
    pub const RECOVERY_TIME_STAMP: u16 = 96;
    pub const FAR_ID: u16 = 108;
    pub const QER_ID: u16 = 109;
    pub const FAILED_RULE_ID: u16 = 114;
    pub const QFI: u16 = 124;
    /// 3GPP Interface Type (8.2.118).
    pub const TGPP_INTERFACE_TYPE: u16 = 160;
    pub const UPDATE_BAR_SRR: u16 = 12;
    pub const VOLUME_THRESHOLD: u16 = 31;
    pub const TIME_THRESHOLD: u16 = 32;
    pub const REPORT_TYPE: u16 = 39;
    pub const DL_DATA_NOTIFICATION_DELAY: u16 = 46;
    pub const PFCPSMREQ_FLAGS: u16 = 49;
    pub const USAGE_REPORT_TRIGGER: u16 = 63;
    pub const MEASUREMENT_PERIOD: u16 = 64;
    pub const VOLUME_MEASUREMENT: u16 = 66;
    pub const DURATION_MEASUREMENT: u16 = 67;
    pub const VOLUME_QUOTA: u16 = 73;
    pub const TIME_QUOTA: u16 = 74;
    pub const START_TIME: u16 = 75;
    pub const END_TIME: u16 = 76;
    pub const QUERY_URR: u16 = 77;
    pub const USAGE_REPORT_SMR: u16 = 78;
    pub const USAGE_REPORT_SDR: u16 = 79;
    pub const USAGE_REPORT_SRR: u16 = 80;
    pub const DOWNLINK_DATA_REPORT: u16 = 83;
    pub const CREATE_BAR: u16 = 85;
    pub const UPDATE_BAR_SMR: u16 = 86;
    pub const REMOVE_BAR: u16 = 87;
    pub const BAR_ID: u16 = 88;
    pub const UR_SEQN: u16 = 104;
    pub const SUGGESTED_BUFFERING_PACKETS_COUNT: u16 = 140;
}

/// What went wrong reading a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the header needs.
    #[error("{0} bytes are shorter than a PFCP header")]
    Truncated(usize),
    /// The version field is not 1.
    #[error("PFCP version {0} is not supported")]
    Version(u8),
    /// The header's length field disagrees with the bytes there are.
    #[error("length field {field} does not fit {available} bytes after the first 4")]
    Length {
        /// The length field.
        field: u16,
        /// Bytes after the first 4.
        available: usize,
    },
    /// The S flag does not match the message type (node messages have no SEID, session
    /// messages have one).
    #[error("message type {0} with the wrong S flag")]
    SeidFlag(u8),
    /// A message type we do not handle.
    #[error("message type {0} is not handled")]
    UnknownMessage(u8),
    /// An IE's length runs past its message or group (cause Invalid Length).
    #[error("IE {0} overruns its message or group")]
    IeLength(u16),
    /// A mandatory IE is absent (cause Mandatory IE missing).
    #[error("mandatory IE {0} missing")]
    MissingIe(u16),
    /// An IE's content is malformed (cause Mandatory IE incorrect; we are strict about
    /// optional IEs we read too).
    #[error("IE {0} is malformed")]
    InvalidIe(u16),
}

/// What stops a message from being written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The sequence number does not fit 24 bits.
    #[error("sequence number {0} does not fit 24 bits")]
    Sequence(u32),
    /// The message priority does not fit 4 bits, or is set on a message without SEID.
    #[error("message priority {0} is out of range or without SEID")]
    Priority(u8),
    /// A session message without SEID, or a node message with one.
    #[error("message type {0} with the wrong SEID presence")]
    Seid(u8),
    /// An IE or the message is longer than a 16-bit length field can say.
    #[error("IE {0} longer than 65535 bytes")]
    TooLong(u16),
    /// A value outside its field (a 40-bit bit rate, a 6-bit QFI, a 4-bit interface, an FQDN
    /// label that is empty, longer than 63 bytes or not printable ASCII).
    #[error("IE {0} has a value its field cannot hold")]
    Value(u16),
}

/// Reads the IEs of a message body or group: `(type, value)`, or [`DecodeError::IeLength`].
#[derive(Clone)]
pub(crate) struct Ies<'a> {
    buf: &'a [u8],
}

impl<'a> Ies<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Ies { buf }
    }
}

impl<'a> Iterator for Ies<'a> {
    type Item = Result<(u16, &'a [u8]), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        if self.buf.len() < 4 {
            let ty = if self.buf.len() >= 2 {
                u16::from_be_bytes([self.buf[0], self.buf[1]])
            } else {
                0
            };
            self.buf = &[];
            return Some(Err(DecodeError::IeLength(ty)));
        }
        let ty = u16::from_be_bytes([self.buf[0], self.buf[1]]);
        let len = usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]]));
        let Some(value) = self.buf.get(4..4 + len) else {
            self.buf = &[];
            return Some(Err(DecodeError::IeLength(ty)));
        };
        self.buf = &self.buf[4 + len..];
        Some(Ok((ty, value)))
    }
}

/// Appends IEs to a buffer.
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn new(buf: Vec<u8>) -> Self {
        Writer { buf }
    }

    /// Writes one IE of type `ty` whose value `f` appends.
    pub(crate) fn ie(
        &mut self,
        ty: u16,
        f: impl FnOnce(&mut Writer) -> Result<(), BuildError>,
    ) -> Result<(), BuildError> {
        self.buf.extend_from_slice(&ty.to_be_bytes());
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        f(self)?;
        let len = self.buf.len() - at - 2;
        let len = u16::try_from(len).map_err(|_| BuildError::TooLong(ty))?;
        self.buf[at..at + 2].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }

    /// Writes an IE whose value is `bytes`.
    pub(crate) fn bytes(&mut self, ty: u16, bytes: &[u8]) -> Result<(), BuildError> {
        self.ie(ty, |w| {
            w.buf.extend_from_slice(bytes);
            Ok(())
        })
    }

    pub(crate) fn put(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }
}

/// A typed IE value: how it reads from and writes to its value octets.
pub(crate) trait Value: Sized {
    /// The IE type.
    const TYPE: u16;
    /// Reads the value octets (the caller maps `None` to [`DecodeError::InvalidIe`]).
    fn read(v: &[u8]) -> Option<Self>;
    /// Appends the value octets.
    fn write(&self, w: &mut Writer) -> Result<(), BuildError>;
}

/// Reads a value of `T` or says which IE was malformed.
pub(crate) fn read<T: Value>(v: &[u8]) -> Result<T, DecodeError> {
    T::read(v).ok_or(DecodeError::InvalidIe(T::TYPE))
}

/// Writes `value` as an IE of its type.
pub(crate) fn write<T: Value>(w: &mut Writer, value: &T) -> Result<(), BuildError> {
    w.ie(T::TYPE, |w| value.write(w))
}

/// Writes `value` if present.
pub(crate) fn write_opt<T: Value>(w: &mut Writer, value: &Option<T>) -> Result<(), BuildError> {
    match value {
        Some(v) => write(w, v),
        None => Ok(()),
    }
}

/// Keeps the first occurrence of a single-valued IE.
pub(crate) fn first<T: Value>(slot: &mut Option<T>, v: &[u8]) -> Result<(), DecodeError> {
    if slot.is_none() {
        *slot = Some(read(v)?);
    }
    Ok(())
}

/// A mandatory IE, or [`DecodeError::MissingIe`].
pub(crate) fn need<T>(slot: Option<T>, ty: u16) -> Result<T, DecodeError> {
    slot.ok_or(DecodeError::MissingIe(ty))
}

fn be_u16(v: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(v.get(..2)?.try_into().ok()?))
}

fn be_u32(v: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?))
}

fn v4(v: &[u8]) -> Option<Ipv4Addr> {
    Some(Ipv4Addr::from(<[u8; 4]>::try_from(v.get(..4)?).ok()?))
}

fn v6(v: &[u8]) -> Option<Ipv6Addr> {
    Some(Ipv6Addr::from(<[u8; 16]>::try_from(v.get(..16)?).ok()?))
}

/// An IE kept as its type and value octets: the content of a PDI, QER or URR we do not
/// interpret, kept so that the endpoint can refuse it precisely instead of ignoring it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawIe {
    /// The IE type.
    pub ie_type: u16,
    /// The value octets.
    pub value: Vec<u8>,
}

impl RawIe {
    pub(crate) fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.bytes(self.ie_type, &self.value)
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for RawIe {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        // Types 1000..=1999 are defined by no release: never read as anything else.
        Ok(RawIe {
            ie_type: u.int_in_range(1000..=1999)?,
            value: u.arbitrary()?,
        })
    }
}

macro_rules! int_value {
    ($(#[$doc:meta])* $name:ident, $int:ty, $ty:expr, $n:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
        pub struct $name(pub $int);

        impl Value for $name {
            const TYPE: u16 = $ty;
            fn read(v: &[u8]) -> Option<Self> {
                Some($name(<$int>::from_be_bytes(v.get(..$n)?.try_into().ok()?)))
            }
            fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
                w.put(&self.0.to_be_bytes());
                Ok(())
            }
        }
    };
}

int_value!(
    /// PDR ID (8.2.36): the rule id, unique within a session.
    PdrId, u16, ie_type::PDR_ID, 2
);
int_value!(
    /// FAR ID (8.2.74).
    FarId, u32, ie_type::FAR_ID, 4
);
int_value!(
    /// QER ID (8.2.75).
    QerId, u32, ie_type::QER_ID, 4
);
int_value!(
    /// URR ID (8.2.54).
    UrrId, u32, ie_type::URR_ID, 4
);
int_value!(
    /// Precedence (8.2.11): a lower value wins among PDRs that match a packet.
    Precedence, u32, ie_type::PRECEDENCE, 4
);
int_value!(
    /// Recovery Time Stamp (8.2.65): when the sender last started, seconds since 1900 (NTP).
    RecoveryTimeStamp, u32, ie_type::RECOVERY_TIME_STAMP, 4
);
int_value!(
    /// Offending IE (8.2.22): the type of the IE a rejection is about.
    OffendingIe, u16, ie_type::OFFENDING_IE, 2
);
int_value!(
    /// QER Correlation ID (8.2.10).
    QerCorrelationId, u32, ie_type::QER_CORRELATION_ID, 4
);

/// Cause (8.2.1): the outcome of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Cause(pub u8);

#[allow(missing_docs)]
impl Cause {
    pub const REQUEST_ACCEPTED: Cause = Cause(1);
    pub const REQUEST_REJECTED: Cause = Cause(64);
    pub const SESSION_CONTEXT_NOT_FOUND: Cause = Cause(65);
    pub const MANDATORY_IE_MISSING: Cause = Cause(66);
    pub const CONDITIONAL_IE_MISSING: Cause = Cause(67);
    pub const INVALID_LENGTH: Cause = Cause(68);
    pub const MANDATORY_IE_INCORRECT: Cause = Cause(69);
    pub const INVALID_F_TEID_ALLOCATION_OPTION: Cause = Cause(71);
    pub const NO_ESTABLISHED_PFCP_ASSOCIATION: Cause = Cause(72);
    pub const RULE_CREATION_MODIFICATION_FAILURE: Cause = Cause(73);
    pub const PFCP_ENTITY_IN_CONGESTION: Cause = Cause(74);
    pub const NO_RESOURCES_AVAILABLE: Cause = Cause(75);
    pub const SERVICE_NOT_SUPPORTED: Cause = Cause(76);
    pub const SYSTEM_FAILURE: Cause = Cause(77);
    pub const ALL_DYNAMIC_ADDRESSES_ARE_OCCUPIED: Cause = Cause(79);
}

impl Value for Cause {
    const TYPE: u16 = ie_type::CAUSE;
    fn read(v: &[u8]) -> Option<Self> {
        v.first().map(|&c| Cause(c))
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.put(&[self.0]);
        Ok(())
    }
}

/// Node ID (8.2.38): how a PFCP entity names itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NodeId {
    /// An IPv4 address.
    Ipv4(Ipv4Addr),
    /// An IPv6 address.
    Ipv6(Ipv6Addr),
    /// A fully qualified domain name, dotted (`smf.example`); on the wire as DNS labels. Labels
    /// are 1 to 63 printable ASCII bytes other than `.`.
    Fqdn(String),
}

impl Value for NodeId {
    const TYPE: u16 = ie_type::NODE_ID;
    fn read(v: &[u8]) -> Option<Self> {
        let (&kind, rest) = v.split_first()?;
        match kind & 0x0f {
            0 => Some(NodeId::Ipv4(v4(rest)?)),
            1 => Some(NodeId::Ipv6(v6(rest)?)),
            2 => {
                let mut name = String::new();
                let mut rest = rest;
                if rest.is_empty() {
                    return None;
                }
                while let Some((&len, tail)) = rest.split_first() {
                    let label = tail.get(..usize::from(len))?;
                    if !label_ok(label) {
                        return None;
                    }
                    if !name.is_empty() {
                        name.push('.');
                    }
                    name.extend(label.iter().map(|&b| char::from(b)));
                    rest = &tail[usize::from(len)..];
                }
                Some(NodeId::Fqdn(name))
            }
            _ => None,
        }
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        match self {
            NodeId::Ipv4(a) => {
                w.put(&[0]);
                w.put(&a.octets());
            }
            NodeId::Ipv6(a) => {
                w.put(&[1]);
                w.put(&a.octets());
            }
            NodeId::Fqdn(name) => {
                w.put(&[2]);
                for label in name.split('.') {
                    if !label_ok(label.as_bytes()) {
                        return Err(BuildError::Value(Self::TYPE));
                    }
                    w.put(&[label.len() as u8]);
                    w.put(label.as_bytes());
                }
            }
        }
        Ok(())
    }
}

fn label_ok(label: &[u8]) -> bool {
    (1..=63).contains(&label.len()) && label.iter().all(|&b| b.is_ascii_graphic() && b != b'.')
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for NodeId {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0..=2)? {
            0 => NodeId::Ipv4(u.arbitrary()?),
            1 => NodeId::Ipv6(u.arbitrary()?),
            _ => {
                let labels = u.int_in_range(1..=4)?;
                let mut parts = Vec::new();
                for _ in 0..labels {
                    let n = u.int_in_range(1..=12)?;
                    let mut s = String::new();
                    for _ in 0..n {
                        s.push(char::from(
                            *u.choose(b"abcdefghijklmnopqrstuvwxyz0123456789-")?,
                        ));
                    }
                    parts.push(s);
                }
                NodeId::Fqdn(parts.join("."))
            }
        })
    }
}

/// F-SEID (8.2.37): a session endpoint id and the address of the entity that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct FSeid {
    /// The SEID.
    pub seid: u64,
    /// The IPv4 address, if any.
    pub ipv4: Option<Ipv4Addr>,
    /// The IPv6 address, if any.
    pub ipv6: Option<Ipv6Addr>,
}

impl Value for FSeid {
    const TYPE: u16 = ie_type::F_SEID;
    fn read(v: &[u8]) -> Option<Self> {
        let (&flags, rest) = v.split_first()?;
        let seid = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
        let mut rest = &rest[8..];
        let ipv4 = if flags & 0x02 != 0 {
            let a = v4(rest)?;
            rest = &rest[4..];
            Some(a)
        } else {
            None
        };
        let ipv6 = if flags & 0x01 != 0 {
            Some(v6(rest)?)
        } else {
            None
        };
        Some(FSeid { seid, ipv4, ipv6 })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.put(&[u8::from(self.ipv4.is_some()) << 1 | u8::from(self.ipv6.is_some())]);
        w.put(&self.seid.to_be_bytes());
        if let Some(a) = self.ipv4 {
            w.put(&a.octets());
        }
        if let Some(a) = self.ipv6 {
            w.put(&a.octets());
        }
        Ok(())
    }
}

/// F-TEID (8.2.3): a GTP-U tunnel endpoint, or a request that the user plane choose one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum FTeid {
    /// A TEID and the addresses it is reached at.
    Assigned {
        /// The TEID.
        teid: u32,
        /// The IPv4 address, if any.
        ipv4: Option<Ipv4Addr>,
        /// The IPv6 address, if any.
        ipv6: Option<Ipv6Addr>,
    },
    /// CHOOSE: the user plane allocates the TEID (and address) of the families asked for.
    Choose {
        /// An IPv4 address is asked for.
        ipv4: bool,
        /// An IPv6 address is asked for.
        ipv6: bool,
        /// CHOOSE ID: PDRs of one request with the same id share one allocated F-TEID.
        choose_id: Option<u8>,
    },
}

impl Value for FTeid {
    const TYPE: u16 = ie_type::F_TEID;
    fn read(v: &[u8]) -> Option<Self> {
        let (&flags, rest) = v.split_first()?;
        let (has4, has6, ch, chid) = (
            flags & 1 != 0,
            flags & 2 != 0,
            flags & 4 != 0,
            flags & 8 != 0,
        );
        if ch {
            let choose_id = if chid { Some(*rest.first()?) } else { None };
            return Some(FTeid::Choose {
                ipv4: has4,
                ipv6: has6,
                choose_id,
            });
        }
        if chid {
            return None;
        }
        let teid = be_u32(rest)?;
        let mut rest = &rest[4..];
        let ipv4 = if has4 {
            let a = v4(rest)?;
            rest = &rest[4..];
            Some(a)
        } else {
            None
        };
        let ipv6 = if has6 { Some(v6(rest)?) } else { None };
        Some(FTeid::Assigned { teid, ipv4, ipv6 })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        match *self {
            FTeid::Assigned { teid, ipv4, ipv6 } => {
                w.put(&[u8::from(ipv4.is_some()) | u8::from(ipv6.is_some()) << 1]);
                w.put(&teid.to_be_bytes());
                if let Some(a) = ipv4 {
                    w.put(&a.octets());
                }
                if let Some(a) = ipv6 {
                    w.put(&a.octets());
                }
            }
            FTeid::Choose {
                ipv4,
                ipv6,
                choose_id,
            } => {
                w.put(&[u8::from(ipv4)
                    | u8::from(ipv6) << 1
                    | 4
                    | u8::from(choose_id.is_some()) << 3]);
                if let Some(id) = choose_id {
                    w.put(&[id]);
                }
            }
        }
        Ok(())
    }
}

/// An interface value (4 bits) of Source Interface (8.2.2) or Destination Interface (8.2.24).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Interface(pub u8);

#[allow(missing_docs)]
impl Interface {
    pub const ACCESS: Interface = Interface(0);
    pub const CORE: Interface = Interface(1);
    pub const SGI_LAN: Interface = Interface(2);
    pub const CP_FUNCTION: Interface = Interface(3);
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for Interface {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Interface(u.int_in_range(0..=15)?))
    }
}

impl Interface {
    fn read(v: &[u8]) -> Option<Self> {
        v.first().map(|&b| Interface(b & 0x0f))
    }
    fn write(&self, w: &mut Writer, ty: u16) -> Result<(), BuildError> {
        if self.0 > 15 {
            return Err(BuildError::Value(ty));
        }
        w.put(&[self.0]);
        Ok(())
    }
}

/// Source Interface (8.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SourceInterface(pub Interface);

impl Value for SourceInterface {
    const TYPE: u16 = ie_type::SOURCE_INTERFACE;
    fn read(v: &[u8]) -> Option<Self> {
        Interface::read(v).map(SourceInterface)
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        self.0.write(w, Self::TYPE)
    }
}

/// Destination Interface (8.2.24).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct DestinationInterface(pub Interface);

impl Value for DestinationInterface {
    const TYPE: u16 = ie_type::DESTINATION_INTERFACE;
    fn read(v: &[u8]) -> Option<Self> {
        Interface::read(v).map(DestinationInterface)
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        self.0.write(w, Self::TYPE)
    }
}

macro_rules! bytes_value {
    ($(#[$doc:meta])* $name:ident, $ty:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
        pub struct $name(pub Vec<u8>);

        impl Value for $name {
            const TYPE: u16 = $ty;
            fn read(v: &[u8]) -> Option<Self> {
                Some($name(v.to_vec()))
            }
            fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
                w.put(&self.0);
                Ok(())
            }
        }
    };
}

bytes_value!(
    /// Network Instance (8.2.4): opaque to us (an APN/DNN or a VRF name), kept as octets.
    NetworkInstance, ie_type::NETWORK_INSTANCE
);
bytes_value!(
    /// UP Function Features (8.2.25): the feature bit octets as sent.
    UpFunctionFeatures, ie_type::UP_FUNCTION_FEATURES
);
bytes_value!(
    /// CP Function Features (8.2.58): the feature bit octets as sent.
    CpFunctionFeatures, ie_type::CP_FUNCTION_FEATURES
);

impl UpFunctionFeatures {
    /// FTUP (octet 5 bit 5): the user plane allocates F-TEIDs (CHOOSE).
    pub const FTUP: (usize, u8) = (0, 0x10);
    /// BUCP (octet 5 bit 1): downlink data buffering in the CP function (forwarding to it).
    pub const BUCP: (usize, u8) = (0, 0x01);
    /// DDND (octet 5 bit 2): the BAR's Downlink Data Notification Delay is applied.
    pub const DDND: (usize, u8) = (0, 0x02);
    /// QUOAC (octet 6 bit 4): the Quota Action IE of a URR is supported.
    pub const QUOAC: (usize, u8) = (1, 0x08);
    /// UEIP (octet 7 bit 3): the user plane allocates UE IP addresses (CHV4/CHV6).
    pub const UEIP: (usize, u8) = (2, 0x04);
    /// MNOP (octet 7 bit 5): packets counted when a URR's Measurement Information asks.
    pub const MNOP: (usize, u8) = (2, 0x10);

    /// Whether feature `(octet index, bit mask)` is set.
    pub fn has(&self, (octet, mask): (usize, u8)) -> bool {
        self.0.get(octet).is_some_and(|b| b & mask != 0)
    }
}

/// Apply Action (8.2.26): the flag octets (DROP, FORW, BUFF, NOCP, DUPL in the first; a
/// second octet from Release 16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ApplyAction(pub u16);

#[allow(missing_docs)]
impl ApplyAction {
    pub const DROP: u16 = 0x01;
    pub const FORW: u16 = 0x02;
    pub const BUFF: u16 = 0x04;
    pub const NOCP: u16 = 0x08;
    pub const DUPL: u16 = 0x10;

    /// Whether flag `f` is set.
    pub fn has(self, f: u16) -> bool {
        self.0 & f != 0
    }
}

impl Value for ApplyAction {
    const TYPE: u16 = ie_type::APPLY_ACTION;
    fn read(v: &[u8]) -> Option<Self> {
        let lo = *v.first()?;
        let hi = v.get(1).copied().unwrap_or(0);
        Some(ApplyAction(u16::from(hi) << 8 | u16::from(lo)))
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.put(&[self.0 as u8]);
        if self.0 >> 8 != 0 {
            w.put(&[(self.0 >> 8) as u8]);
        }
        Ok(())
    }
}

/// The UE address of a UE IP Address IE: a given one, or CHOOSE (the user plane allocates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum UeAddr<A> {
    /// This address.
    Addr(A),
    /// CHV4 / CHV6: the user plane is asked to allocate one.
    Choose,
}

/// UE IP Address (8.2.62).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct UeIpAddress {
    /// The IPv4 address (or CHV4).
    pub ipv4: Option<UeAddr<Ipv4Addr>>,
    /// The IPv6 address (or CHV6).
    pub ipv6: Option<UeAddr<Ipv6Addr>>,
    /// S/D: set when the address is a destination address (downlink, in a Core PDR).
    pub destination: bool,
    /// IPv6 prefix delegation bits (IPv6D).
    pub ipv6_prefix_delegation: Option<u8>,
    /// IPv6 prefix length (IP6PL).
    pub ipv6_prefix_length: Option<u8>,
}

impl Value for UeIpAddress {
    const TYPE: u16 = ie_type::UE_IP_ADDRESS;
    fn read(v: &[u8]) -> Option<Self> {
        let (&f, mut rest) = v.split_first()?;
        let (has6, has4, sd, v6d, ch4, ch6, pl) = (
            f & 1 != 0,
            f & 2 != 0,
            f & 4 != 0,
            f & 8 != 0,
            f & 16 != 0,
            f & 32 != 0,
            f & 64 != 0,
        );
        let ipv4 = match (has4, ch4) {
            (_, true) => Some(UeAddr::Choose),
            (true, false) => {
                let a = v4(rest)?;
                rest = &rest[4..];
                Some(UeAddr::Addr(a))
            }
            (false, false) => None,
        };
        let ipv6 = match (has6, ch6) {
            (_, true) => Some(UeAddr::Choose),
            (true, false) => {
                let a = v6(rest)?;
                rest = &rest[16..];
                Some(UeAddr::Addr(a))
            }
            (false, false) => None,
        };
        let mut octet = || -> Option<u8> {
            let (&b, tail) = rest.split_first()?;
            rest = tail;
            Some(b)
        };
        let ipv6_prefix_delegation = if v6d { Some(octet()?) } else { None };
        let ipv6_prefix_length = if pl { Some(octet()?) } else { None };
        Some(UeIpAddress {
            ipv4,
            ipv6,
            destination: sd,
            ipv6_prefix_delegation,
            ipv6_prefix_length,
        })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        let ch4 = matches!(self.ipv4, Some(UeAddr::Choose));
        let ch6 = matches!(self.ipv6, Some(UeAddr::Choose));
        w.put(&[u8::from(self.ipv6.is_some())
            | u8::from(self.ipv4.is_some()) << 1
            | u8::from(self.destination) << 2
            | u8::from(self.ipv6_prefix_delegation.is_some()) << 3
            | u8::from(ch4) << 4
            | u8::from(ch6) << 5
            | u8::from(self.ipv6_prefix_length.is_some()) << 6]);
        if let Some(UeAddr::Addr(a)) = self.ipv4 {
            w.put(&a.octets());
        }
        if let Some(UeAddr::Addr(a)) = self.ipv6 {
            w.put(&a.octets());
        }
        if let Some(b) = self.ipv6_prefix_delegation {
            w.put(&[b]);
        }
        if let Some(b) = self.ipv6_prefix_length {
            w.put(&[b]);
        }
        Ok(())
    }
}

/// Outer Header Creation (8.2.56).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OuterHeaderCreation {
    /// GTP-U/UDP/IPv4 to `addr` with `teid` (description 0x0100): the downlink tunnel.
    GtpuIpv4 {
        /// The peer's TEID.
        teid: u32,
        /// The peer (eNodeB/gNB) address.
        addr: Ipv4Addr,
    },
    /// GTP-U/UDP/IPv6 to `addr` with `teid` (description 0x0200).
    GtpuIpv6 {
        /// The peer's TEID.
        teid: u32,
        /// The peer address.
        addr: Ipv6Addr,
    },
    /// Any other description (UDP/IP, IP, VLAN tags, both GTP-U families, N19/N6 marks), with
    /// the octets after it as sent.
    Other {
        /// The two description octets.
        description: u16,
        /// The rest of the value.
        rest: Vec<u8>,
    },
}

const OHC_GTPU_V4: u16 = 0x0100;
const OHC_GTPU_V6: u16 = 0x0200;

impl Value for OuterHeaderCreation {
    const TYPE: u16 = ie_type::OUTER_HEADER_CREATION;
    fn read(v: &[u8]) -> Option<Self> {
        let description = be_u16(v)?;
        let rest = &v[2..];
        Some(match description {
            OHC_GTPU_V4 => OuterHeaderCreation::GtpuIpv4 {
                teid: be_u32(rest)?,
                addr: v4(rest.get(4..)?)?,
            },
            OHC_GTPU_V6 => OuterHeaderCreation::GtpuIpv6 {
                teid: be_u32(rest)?,
                addr: v6(rest.get(4..)?)?,
            },
            _ => OuterHeaderCreation::Other {
                description,
                rest: rest.to_vec(),
            },
        })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        match self {
            OuterHeaderCreation::GtpuIpv4 { teid, addr } => {
                w.put(&OHC_GTPU_V4.to_be_bytes());
                w.put(&teid.to_be_bytes());
                w.put(&addr.octets());
            }
            OuterHeaderCreation::GtpuIpv6 { teid, addr } => {
                w.put(&OHC_GTPU_V6.to_be_bytes());
                w.put(&teid.to_be_bytes());
                w.put(&addr.octets());
            }
            OuterHeaderCreation::Other { description, rest } => {
                if matches!(*description, OHC_GTPU_V4 | OHC_GTPU_V6) {
                    return Err(BuildError::Value(Self::TYPE));
                }
                w.put(&description.to_be_bytes());
                w.put(rest);
            }
        }
        Ok(())
    }
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for OuterHeaderCreation {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(match u.int_in_range(0..=2)? {
            0 => OuterHeaderCreation::GtpuIpv4 {
                teid: u.arbitrary()?,
                addr: u.arbitrary()?,
            },
            1 => OuterHeaderCreation::GtpuIpv6 {
                teid: u.arbitrary()?,
                addr: u.arbitrary()?,
            },
            _ => {
                let mut description: u16 = u.arbitrary()?;
                if matches!(description, OHC_GTPU_V4 | OHC_GTPU_V6) {
                    description |= 0x0400;
                }
                OuterHeaderCreation::Other {
                    description,
                    rest: u.arbitrary()?,
                }
            }
        })
    }
}

/// Outer Header Removal (8.2.64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct OuterHeaderRemoval {
    /// The description: 0 GTP-U/UDP/IPv4, 1 GTP-U/UDP/IPv6, 2 UDP/IPv4, 3 UDP/IPv6, 4 IPv4,
    /// 5 IPv6, 6 GTP-U/UDP/IP, 7 VLAN S-TAG, 8 S-TAG and C-TAG.
    pub description: u8,
    /// The GTP-U extension header deletion octet, if sent.
    pub extension_header_deletion: Option<u8>,
}

#[allow(missing_docs)]
impl OuterHeaderRemoval {
    pub const GTPU_UDP_IPV4: u8 = 0;
    pub const GTPU_UDP_IPV6: u8 = 1;
    pub const GTPU_UDP_IP: u8 = 6;
}

impl Value for OuterHeaderRemoval {
    const TYPE: u16 = ie_type::OUTER_HEADER_REMOVAL;
    fn read(v: &[u8]) -> Option<Self> {
        Some(OuterHeaderRemoval {
            description: *v.first()?,
            extension_header_deletion: v.get(1).copied(),
        })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.put(&[self.description]);
        if let Some(b) = self.extension_header_deletion {
            w.put(&[b]);
        }
        Ok(())
    }
}

/// Failed Rule ID (8.2.80): the rule a Rule creation/modification failure is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum FailedRuleId {
    /// A PDR.
    Pdr(u16),
    /// A FAR.
    Far(u32),
    /// A QER.
    Qer(u32),
    /// A URR.
    Urr(u32),
    /// A BAR.
    Bar(u8),
}

impl Value for FailedRuleId {
    const TYPE: u16 = ie_type::FAILED_RULE_ID;
    fn read(v: &[u8]) -> Option<Self> {
        let (&kind, rest) = v.split_first()?;
        Some(match kind & 0x1f {
            0 => FailedRuleId::Pdr(be_u16(rest)?),
            1 => FailedRuleId::Far(be_u32(rest)?),
            2 => FailedRuleId::Qer(be_u32(rest)?),
            3 => FailedRuleId::Urr(be_u32(rest)?),
            4 => FailedRuleId::Bar(*rest.first()?),
            _ => return None,
        })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        match *self {
            FailedRuleId::Pdr(id) => {
                w.put(&[0]);
                w.put(&id.to_be_bytes());
            }
            FailedRuleId::Far(id) => {
                w.put(&[1]);
                w.put(&id.to_be_bytes());
            }
            FailedRuleId::Qer(id) => {
                w.put(&[2]);
                w.put(&id.to_be_bytes());
            }
            FailedRuleId::Urr(id) => {
                w.put(&[3]);
                w.put(&id.to_be_bytes());
            }
            FailedRuleId::Bar(id) => w.put(&[4, id]),
        }
        Ok(())
    }
}

/// Gate Status (8.2.7): per direction 0 OPEN, 1 CLOSED (2 bits each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GateStatus {
    /// The uplink gate.
    pub ul: u8,
    /// The downlink gate.
    pub dl: u8,
}

impl GateStatus {
    /// Both gates open.
    pub const OPEN: GateStatus = GateStatus { ul: 0, dl: 0 };
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for GateStatus {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(GateStatus {
            ul: u.int_in_range(0..=3)?,
            dl: u.int_in_range(0..=3)?,
        })
    }
}

impl Value for GateStatus {
    const TYPE: u16 = ie_type::GATE_STATUS;
    fn read(v: &[u8]) -> Option<Self> {
        let b = *v.first()?;
        Some(GateStatus {
            ul: (b >> 2) & 3,
            dl: b & 3,
        })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        if self.ul > 3 || self.dl > 3 {
            return Err(BuildError::Value(Self::TYPE));
        }
        w.put(&[self.ul << 2 | self.dl]);
        Ok(())
    }
}

/// A bit rate pair (MBR 8.2.8, GBR 8.2.9): uplink and downlink in kbps, 40 bits each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bitrate {
    /// Uplink kbps.
    pub ul: u64,
    /// Downlink kbps.
    pub dl: u64,
}

const MAX_40: u64 = (1 << 40) - 1;

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for Bitrate {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Bitrate {
            ul: u.int_in_range(0..=MAX_40)?,
            dl: u.int_in_range(0..=MAX_40)?,
        })
    }
}

impl Bitrate {
    fn read(v: &[u8]) -> Option<Self> {
        let v = v.get(..10)?;
        let be40 = |b: &[u8]| b.iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
        Some(Bitrate {
            ul: be40(&v[..5]),
            dl: be40(&v[5..10]),
        })
    }
    fn write(&self, w: &mut Writer, ty: u16) -> Result<(), BuildError> {
        if self.ul > MAX_40 || self.dl > MAX_40 {
            return Err(BuildError::Value(ty));
        }
        w.put(&self.ul.to_be_bytes()[3..]);
        w.put(&self.dl.to_be_bytes()[3..]);
        Ok(())
    }
}

/// MBR (8.2.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Mbr(pub Bitrate);

impl Value for Mbr {
    const TYPE: u16 = ie_type::MBR;
    fn read(v: &[u8]) -> Option<Self> {
        Bitrate::read(v).map(Mbr)
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        self.0.write(w, Self::TYPE)
    }
}

/// GBR (8.2.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Gbr(pub Bitrate);

impl Value for Gbr {
    const TYPE: u16 = ie_type::GBR;
    fn read(v: &[u8]) -> Option<Self> {
        Bitrate::read(v).map(Gbr)
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        self.0.write(w, Self::TYPE)
    }
}

/// QFI (8.2.89): the 5G QoS flow id, 6 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Qfi(pub u8);

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for Qfi {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(Qfi(u.int_in_range(0..=63)?))
    }
}

impl Value for Qfi {
    const TYPE: u16 = ie_type::QFI;
    fn read(v: &[u8]) -> Option<Self> {
        v.first().map(|&b| Qfi(b & 0x3f))
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        if self.0 > 63 {
            return Err(BuildError::Value(Self::TYPE));
        }
        w.put(&[self.0]);
        Ok(())
    }
}

/// Measurement Method (8.2.40): DURAT, VOLUM, EVENT flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct MeasurementMethod(pub u8);

impl Value for MeasurementMethod {
    const TYPE: u16 = ie_type::MEASUREMENT_METHOD;
    fn read(v: &[u8]) -> Option<Self> {
        v.first().map(|&b| MeasurementMethod(b))
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.put(&[self.0]);
        Ok(())
    }
}

bytes_value!(
    /// Reporting Triggers (8.2.19): the trigger bit octets as sent.
    ReportingTriggers, ie_type::REPORTING_TRIGGERS
);

int_value!(
    /// BAR ID (8.2.88).
    BarId, u8, ie_type::BAR_ID, 1
);
int_value!(
    /// UR-SEQN (8.2.77): the sequence number of a URR's usage reports, from 0.
    UrSeqn, u32, ie_type::UR_SEQN, 4
);
int_value!(
    /// Time Threshold (8.2.14): seconds of measured time after which to report.
    TimeThreshold, u32, ie_type::TIME_THRESHOLD, 4
);
int_value!(
    /// Time Quota (8.2.51): seconds of measured time the traffic may take.
    TimeQuota, u32, ie_type::TIME_QUOTA, 4
);
int_value!(
    /// Measurement Period (8.2.42): seconds between periodic usage reports.
    MeasurementPeriod, u32, ie_type::MEASUREMENT_PERIOD, 4
);
int_value!(
    /// Duration Measurement (8.2.45): seconds measured.
    DurationMeasurement, u32, ie_type::DURATION_MEASUREMENT, 4
);
int_value!(
    /// Start Time (8.2.46): seconds since 1900 (NTP) when the reported measurement began.
    StartTime, u32, ie_type::START_TIME, 4
);
int_value!(
    /// End Time (8.2.47): seconds since 1900 (NTP) when the reported measurement ended.
    EndTime, u32, ie_type::END_TIME, 4
);
int_value!(
    /// Downlink Data Notification Delay (8.2.28): in units of 50 ms.
    DlDataNotificationDelay, u8, ie_type::DL_DATA_NOTIFICATION_DELAY, 1
);
int_value!(
    /// Suggested Buffering Packets Count (8.2.112).
    SuggestedBufferingPacketsCount, u8, ie_type::SUGGESTED_BUFFERING_PACKETS_COUNT, 1
);
int_value!(
    /// Report Type (8.2.21): DLDR, USAR, ERIR, UPIR, ... flags.
    ReportType, u8, ie_type::REPORT_TYPE, 1
);
int_value!(
    /// PFCPSMReq-Flags (8.2.31): DROBU, SNDEM, QAURR flags.
    PfcpSmReqFlags, u8, ie_type::PFCPSMREQ_FLAGS, 1
);

#[allow(missing_docs)]
impl ReportType {
    pub const DLDR: u8 = 0x01;
    pub const USAR: u8 = 0x02;
}

#[allow(missing_docs)]
impl PfcpSmReqFlags {
    pub const DROBU: u8 = 0x01;
    pub const SNDEM: u8 = 0x02;
    pub const QAURR: u8 = 0x04;
}

#[allow(missing_docs)]
impl MeasurementMethod {
    pub const DURAT: u8 = 0x01;
    pub const VOLUM: u8 = 0x02;
    pub const EVENT: u8 = 0x04;
}

#[allow(missing_docs)]
impl ReportingTriggers {
    pub const PERIO: (usize, u8) = (0, 0x01);
    pub const VOLTH: (usize, u8) = (0, 0x02);
    pub const TIMTH: (usize, u8) = (0, 0x04);
    pub const QUHTI: (usize, u8) = (0, 0x08);
    pub const START: (usize, u8) = (0, 0x10);
    pub const STOPT: (usize, u8) = (0, 0x20);
    pub const DROTH: (usize, u8) = (0, 0x40);
    pub const LIUSA: (usize, u8) = (0, 0x80);
    pub const VOLQU: (usize, u8) = (1, 0x01);
    pub const TIMQU: (usize, u8) = (1, 0x02);
    pub const ENVCL: (usize, u8) = (1, 0x04);
    pub const MACAR: (usize, u8) = (1, 0x08);
    pub const EVETH: (usize, u8) = (1, 0x10);
    pub const EVEQU: (usize, u8) = (1, 0x20);
    pub const IPMJL: (usize, u8) = (1, 0x40);
    pub const QUVTI: (usize, u8) = (1, 0x80);
    pub const REEMR: (usize, u8) = (2, 0x01);
    pub const UPINT: (usize, u8) = (2, 0x02);

    /// Whether trigger `(octet index, bit mask)` is set.
    pub fn has(&self, (octet, mask): (usize, u8)) -> bool {
        self.0.get(octet).is_some_and(|b| b & mask != 0)
    }
}

/// Usage Report Trigger (8.2.41): why a usage report is sent, three octets as one number
/// (octet 5 in the low bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct UsageReportTrigger(pub u32);

#[allow(missing_docs)]
impl UsageReportTrigger {
    pub const PERIO: u32 = 1 << 0;
    pub const VOLTH: u32 = 1 << 1;
    pub const TIMTH: u32 = 1 << 2;
    pub const QUHTI: u32 = 1 << 3;
    pub const START: u32 = 1 << 4;
    pub const STOPT: u32 = 1 << 5;
    pub const DROTH: u32 = 1 << 6;
    /// Immediate report: the answer to a Query URR.
    pub const IMMER: u32 = 1 << 7;
    pub const VOLQU: u32 = 1 << 8;
    pub const TIMQU: u32 = 1 << 9;
    pub const LIUSA: u32 = 1 << 10;
    /// Termination report: the URR or its session is removed.
    pub const TERMR: u32 = 1 << 11;
    pub const MONIT: u32 = 1 << 12;
    pub const ENVCL: u32 = 1 << 13;
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for UsageReportTrigger {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(UsageReportTrigger(u.int_in_range(0..=0xff_ffff)?))
    }
}

impl Value for UsageReportTrigger {
    const TYPE: u16 = ie_type::USAGE_REPORT_TRIGGER;
    fn read(v: &[u8]) -> Option<Self> {
        // Two octets before Release 14, three since.
        let (a, b) = (*v.first()?, *v.get(1)?);
        let c = v.get(2).copied().unwrap_or(0);
        Some(UsageReportTrigger(u32::from_le_bytes([a, b, c, 0])))
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        if self.0 > 0xff_ffff {
            return Err(BuildError::Value(Self::TYPE));
        }
        w.put(&self.0.to_le_bytes()[..3]);
        Ok(())
    }
}

/// The volumes of a Volume Threshold (8.2.13) or Volume Quota (8.2.50), in bytes: each present
/// one (TOVOL, ULVOL, DLVOL) applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Volume {
    /// Both directions together.
    pub total: Option<u64>,
    /// Uplink.
    pub ul: Option<u64>,
    /// Downlink.
    pub dl: Option<u64>,
}

impl Volume {
    fn read(v: &[u8]) -> Option<Self> {
        let flags = *v.first()?;
        let mut at = 1;
        let mut next = |bit: u8| -> Option<Option<u64>> {
            if flags & bit == 0 {
                return Some(None);
            }
            let x = u64::from_be_bytes(v.get(at..at + 8)?.try_into().ok()?);
            at += 8;
            Some(Some(x))
        };
        Some(Volume {
            total: next(0x01)?,
            ul: next(0x02)?,
            dl: next(0x04)?,
        })
    }
    fn write(&self, w: &mut Writer) {
        let vals = [self.total, self.ul, self.dl];
        let flags = vals
            .iter()
            .enumerate()
            .fold(0u8, |f, (i, x)| f | u8::from(x.is_some()) << i);
        w.put(&[flags]);
        for x in vals.into_iter().flatten() {
            w.put(&x.to_be_bytes());
        }
    }
}

/// Volume Threshold (8.2.13): the volumes after which to report (VOLTH).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct VolumeThreshold(pub Volume);

impl Value for VolumeThreshold {
    const TYPE: u16 = ie_type::VOLUME_THRESHOLD;
    fn read(v: &[u8]) -> Option<Self> {
        Volume::read(v).map(VolumeThreshold)
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        self.0.write(w);
        Ok(())
    }
}

/// Volume Quota (8.2.50): the volumes the traffic may take (VOLQU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct VolumeQuota(pub Volume);

impl Value for VolumeQuota {
    const TYPE: u16 = ie_type::VOLUME_QUOTA;
    fn read(v: &[u8]) -> Option<Self> {
        Volume::read(v).map(VolumeQuota)
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        self.0.write(w);
        Ok(())
    }
}

/// Volume Measurement (8.2.44): bytes (TOVOL, ULVOL, DLVOL) and packets (TONOP, ULNOP,
/// DLNOP) measured, each when present.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct VolumeMeasurement {
    /// Bytes, both directions.
    pub total: Option<u64>,
    /// Bytes uplink.
    pub ul: Option<u64>,
    /// Bytes downlink.
    pub dl: Option<u64>,
    /// Packets, both directions.
    pub total_packets: Option<u64>,
    /// Packets uplink.
    pub ul_packets: Option<u64>,
    /// Packets downlink.
    pub dl_packets: Option<u64>,
}

impl Value for VolumeMeasurement {
    const TYPE: u16 = ie_type::VOLUME_MEASUREMENT;
    fn read(v: &[u8]) -> Option<Self> {
        let flags = *v.first()?;
        let mut at = 1;
        let mut next = |bit: u8| -> Option<Option<u64>> {
            if flags & bit == 0 {
                return Some(None);
            }
            let x = u64::from_be_bytes(v.get(at..at + 8)?.try_into().ok()?);
            at += 8;
            Some(Some(x))
        };
        Some(VolumeMeasurement {
            total: next(0x01)?,
            ul: next(0x02)?,
            dl: next(0x04)?,
            total_packets: next(0x08)?,
            ul_packets: next(0x10)?,
            dl_packets: next(0x20)?,
        })
    }
    fn write(&self, w: &mut Writer) -> Result<(), BuildError> {
        let vals = [
            self.total,
            self.ul,
            self.dl,
            self.total_packets,
            self.ul_packets,
            self.dl_packets,
        ];
        let flags = vals
            .iter()
            .enumerate()
            .fold(0u8, |f, (i, x)| f | u8::from(x.is_some()) << i);
        w.put(&[flags]);
        for x in vals.into_iter().flatten() {
            w.put(&x.to_be_bytes());
        }
        Ok(())
    }
}
