//! The PFCP header (TS 29.244 clause 7.2.2), the grouped IEs of session rules and the messages
//! we read and write: checked parsing ([`Message::parse`], [`Header::parse`] then
//! [`Body::decode`]) and building ([`Message::to_bytes`]).

use crate::ie::{
    first, ie_type, need, read, write, write_opt, ApplyAction, BuildError, Cause,
    CpFunctionFeatures, DecodeError, DestinationInterface, FSeid, FTeid, FailedRuleId, FarId,
    GateStatus, Gbr, Ies, Interface, Mbr, MeasurementMethod, NetworkInstance, NodeId, OffendingIe,
    OuterHeaderCreation, OuterHeaderRemoval, PdrId, Precedence, QerCorrelationId, QerId, Qfi,
    RawIe, RecoveryTimeStamp, ReportingTriggers, SourceInterface, UeIpAddress, UpFunctionFeatures,
    UrrId, Value, Writer,
};
use crate::ie::{
    BarId, DlDataNotificationDelay, DurationMeasurement, EndTime, PfcpSmReqFlags, ReportType,
    StartTime, SuggestedBufferingPacketsCount, UrSeqn, UsageReportTrigger, VolumeMeasurement,
};

/// The only PFCP version there is.
pub const VERSION: u8 = 1;
/// The PFCP UDP port.
pub const PORT: u16 = 8805;

/// Message type numbers (TS 29.244 table 7.3-1) this crate reads or writes.
pub mod msg_type {
    #![allow(missing_docs)]
    pub const HEARTBEAT_REQUEST: u8 = 1;
    pub const HEARTBEAT_RESPONSE: u8 = 2;
    pub const ASSOCIATION_SETUP_REQUEST: u8 = 5;
    pub const ASSOCIATION_SETUP_RESPONSE: u8 = 6;
    pub const ASSOCIATION_UPDATE_REQUEST: u8 = 7;
    pub const ASSOCIATION_UPDATE_RESPONSE: u8 = 8;
    pub const ASSOCIATION_RELEASE_REQUEST: u8 = 9;
    pub const ASSOCIATION_RELEASE_RESPONSE: u8 = 10;
    pub const VERSION_NOT_SUPPORTED_RESPONSE: u8 = 11;
    pub const SESSION_ESTABLISHMENT_REQUEST: u8 = 50;
    pub const SESSION_ESTABLISHMENT_RESPONSE: u8 = 51;
    pub const SESSION_MODIFICATION_REQUEST: u8 = 52;
    pub const SESSION_MODIFICATION_RESPONSE: u8 = 53;
    pub const SESSION_DELETION_REQUEST: u8 = 54;
    pub const SESSION_DELETION_RESPONSE: u8 = 55;
    pub const SESSION_REPORT_REQUEST: u8 = 56;
    pub const SESSION_REPORT_RESPONSE: u8 = 57;

    /// Whether messages of type `t` carry a SEID (session messages, 50 and up).
    pub fn is_session(t: u8) -> bool {
        t >= 50
    }

    /// Whether `t` is a request: odd node message types (except Version Not Supported
    /// Response), even session message types.
    pub fn is_request(t: u8) -> bool {
        if is_session(t) {
            t % 2 == 0
        } else {
            t % 2 == 1 && t != VERSION_NOT_SUPPORTED_RESPONSE
        }
    }
}

/// A message header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The message type.
    pub message_type: u8,
    /// The SEID (session messages only).
    pub seid: Option<u64>,
    /// The sequence number (24 bits).
    pub sequence: u32,
    /// The message priority (4 bits; session messages with the MP flag only).
    pub priority: Option<u8>,
    /// FO: another message follows in the same datagram.
    pub follow_on: bool,
}

impl Header {
    /// Reads the header of the first message in `bytes`: the header, the message body (the
    /// IEs), and the bytes after this message. The version must be 1, the length field fit,
    /// and the S flag agree with the message type (whether the type is known or not).
    pub fn parse(bytes: &[u8]) -> Result<(Header, &[u8], &[u8]), DecodeError> {
        if bytes.len() < 8 {
            return Err(DecodeError::Truncated(bytes.len()));
        }
        let flags = bytes[0];
        let version = flags >> 5;
        if version != VERSION {
            return Err(DecodeError::Version(version));
        }
        let (follow_on, mp, s) = (flags & 4 != 0, flags & 2 != 0, flags & 1 != 0);
        let message_type = bytes[1];
        let field = u16::from_be_bytes([bytes[2], bytes[3]]);
        let end = 4 + usize::from(field);
        let header_len = if s { 16 } else { 8 };
        if end > bytes.len() || end < header_len {
            return Err(DecodeError::Length {
                field,
                available: bytes.len() - 4,
            });
        }
        if s != msg_type::is_session(message_type) {
            return Err(DecodeError::SeidFlag(message_type));
        }
        let (seid, sequence, priority) = if s {
            let seid = u64::from_be_bytes(bytes[4..12].try_into().expect("8 bytes"));
            let sequence = u32::from_be_bytes([0, bytes[12], bytes[13], bytes[14]]);
            (Some(seid), sequence, mp.then_some(bytes[15] >> 4))
        } else {
            (
                None,
                u32::from_be_bytes([0, bytes[4], bytes[5], bytes[6]]),
                None,
            )
        };
        let header = Header {
            message_type,
            seid,
            sequence,
            priority,
            follow_on,
        };
        Ok((header, &bytes[header_len..end], &bytes[end..]))
    }

    /// The SEID of a session message (its S flag set), if its first 12 bytes are there.
    pub fn peek_seid(bytes: &[u8]) -> Option<u64> {
        if bytes.first()? & 1 == 0 {
            return None;
        }
        Some(u64::from_be_bytes(bytes.get(4..12)?.try_into().ok()?))
    }

    /// The sequence number and message type of a message whose version we do not speak (to
    /// answer it with Version Not Supported Response), if its first 8 bytes are there.
    pub fn peek_sequence(bytes: &[u8]) -> Option<u32> {
        let at = if bytes.first()? & 1 != 0 { 12 } else { 4 };
        let b = bytes.get(at..at + 3)?;
        Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }
}

/// A message: header fields and the typed body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The SEID: `Some` exactly for session messages.
    pub seid: Option<u64>,
    /// The sequence number (24 bits).
    pub sequence: u32,
    /// The message priority (4 bits, session messages only).
    pub priority: Option<u8>,
    /// The body.
    pub body: Body,
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for Message {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let body: Body = u.arbitrary()?;
        let session = msg_type::is_session(body.message_type());
        let seid = if session { Some(u.arbitrary()?) } else { None };
        let priority = if session && u.arbitrary()? {
            Some(u.int_in_range(0..=15)?)
        } else {
            None
        };
        Ok(Message {
            seid,
            sequence: u.int_in_range(0..=0xff_ffff)?,
            priority,
            body,
        })
    }
}

impl Message {
    /// Parses one whole datagram holding one message (FO clear, no bytes after it).
    pub fn parse(bytes: &[u8]) -> Result<Message, DecodeError> {
        let (header, body, rest) = Header::parse(bytes)?;
        if !rest.is_empty() && !header.follow_on {
            return Err(DecodeError::Length {
                field: u16::from_be_bytes([bytes[2], bytes[3]]),
                available: bytes.len() - 4,
            });
        }
        Ok(Message {
            seid: header.seid,
            sequence: header.sequence,
            priority: header.priority,
            body: Body::decode(header.message_type, body)?,
        })
    }

    /// The message as bytes (FO clear).
    pub fn to_bytes(&self) -> Result<Vec<u8>, BuildError> {
        let t = self.body.message_type();
        if self.seid.is_some() != msg_type::is_session(t) {
            return Err(BuildError::Seid(t));
        }
        if self.sequence > 0xff_ffff {
            return Err(BuildError::Sequence(self.sequence));
        }
        let seq = self.sequence.to_be_bytes();
        let mut buf = Vec::with_capacity(64);
        match self.seid {
            Some(seid) => {
                let (mp, prio) = match self.priority {
                    Some(p) if p <= 15 => (2, p << 4),
                    Some(p) => return Err(BuildError::Priority(p)),
                    None => (0, 0),
                };
                buf.extend_from_slice(&[VERSION << 5 | mp | 1, t, 0, 0]);
                buf.extend_from_slice(&seid.to_be_bytes());
                buf.extend_from_slice(&[seq[1], seq[2], seq[3], prio]);
            }
            None => {
                if let Some(p) = self.priority {
                    return Err(BuildError::Priority(p));
                }
                buf.extend_from_slice(&[VERSION << 5, t, 0, 0]);
                buf.extend_from_slice(&[seq[1], seq[2], seq[3], 0]);
            }
        }
        let mut w = Writer::new(buf);
        self.body.encode(&mut w)?;
        let mut buf = w.buf;
        let len = u16::try_from(buf.len() - 4).map_err(|_| BuildError::TooLong(0))?;
        buf[2..4].copy_from_slice(&len.to_be_bytes());
        Ok(buf)
    }
}

/// The body of a message we handle.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[allow(missing_docs)]
pub enum Body {
    HeartbeatRequest(Heartbeat),
    HeartbeatResponse(Heartbeat),
    AssociationSetupRequest(AssociationSetupRequest),
    AssociationSetupResponse(AssociationSetupResponse),
    AssociationUpdateRequest(AssociationUpdateRequest),
    AssociationUpdateResponse(AssociationUpdateResponse),
    AssociationReleaseRequest(AssociationReleaseRequest),
    AssociationReleaseResponse(AssociationReleaseResponse),
    /// Header only.
    VersionNotSupportedResponse,
    SessionEstablishmentRequest(SessionEstablishmentRequest),
    SessionEstablishmentResponse(SessionEstablishmentResponse),
    SessionModificationRequest(SessionModificationRequest),
    SessionModificationResponse(SessionModificationResponse),
    /// No IEs we read (all are conditional on features we do not announce).
    SessionDeletionRequest,
    SessionDeletionResponse(SessionDeletionResponse),
    SessionReportRequest(SessionReportRequest),
    SessionReportResponse(SessionReportResponse),
}

impl Body {
    /// The message type.
    pub fn message_type(&self) -> u8 {
        use msg_type::*;
        match self {
            Body::HeartbeatRequest(_) => HEARTBEAT_REQUEST,
            Body::HeartbeatResponse(_) => HEARTBEAT_RESPONSE,
            Body::AssociationSetupRequest(_) => ASSOCIATION_SETUP_REQUEST,
            Body::AssociationSetupResponse(_) => ASSOCIATION_SETUP_RESPONSE,
            Body::AssociationUpdateRequest(_) => ASSOCIATION_UPDATE_REQUEST,
            Body::AssociationUpdateResponse(_) => ASSOCIATION_UPDATE_RESPONSE,
            Body::AssociationReleaseRequest(_) => ASSOCIATION_RELEASE_REQUEST,
            Body::AssociationReleaseResponse(_) => ASSOCIATION_RELEASE_RESPONSE,
            Body::VersionNotSupportedResponse => VERSION_NOT_SUPPORTED_RESPONSE,
            Body::SessionEstablishmentRequest(_) => SESSION_ESTABLISHMENT_REQUEST,
            Body::SessionEstablishmentResponse(_) => SESSION_ESTABLISHMENT_RESPONSE,
            Body::SessionModificationRequest(_) => SESSION_MODIFICATION_REQUEST,
            Body::SessionModificationResponse(_) => SESSION_MODIFICATION_RESPONSE,
            Body::SessionDeletionRequest => SESSION_DELETION_REQUEST,
            Body::SessionDeletionResponse(_) => SESSION_DELETION_RESPONSE,
            Body::SessionReportRequest(_) => SESSION_REPORT_REQUEST,
            Body::SessionReportResponse(_) => SESSION_REPORT_RESPONSE,
        }
    }

    /// Reads the IEs of a message of type `t`.
    pub fn decode(t: u8, v: &[u8]) -> Result<Body, DecodeError> {
        use msg_type::*;
        Ok(match t {
            HEARTBEAT_REQUEST => Body::HeartbeatRequest(Heartbeat::decode(v)?),
            HEARTBEAT_RESPONSE => Body::HeartbeatResponse(Heartbeat::decode(v)?),
            ASSOCIATION_SETUP_REQUEST => {
                Body::AssociationSetupRequest(AssociationSetupRequest::decode(v)?)
            }
            ASSOCIATION_SETUP_RESPONSE => {
                Body::AssociationSetupResponse(AssociationSetupResponse::decode(v)?)
            }
            ASSOCIATION_UPDATE_REQUEST => {
                Body::AssociationUpdateRequest(AssociationUpdateRequest::decode(v)?)
            }
            ASSOCIATION_UPDATE_RESPONSE => {
                Body::AssociationUpdateResponse(AssociationUpdateResponse::decode(v)?)
            }
            ASSOCIATION_RELEASE_REQUEST => {
                Body::AssociationReleaseRequest(AssociationReleaseRequest::decode(v)?)
            }
            ASSOCIATION_RELEASE_RESPONSE => {
                Body::AssociationReleaseResponse(AssociationReleaseResponse::decode(v)?)
            }
            VERSION_NOT_SUPPORTED_RESPONSE => {
                check_ies(v)?;
                Body::VersionNotSupportedResponse
            }
            SESSION_ESTABLISHMENT_REQUEST => {
                Body::SessionEstablishmentRequest(SessionEstablishmentRequest::decode(v)?)
            }
            SESSION_ESTABLISHMENT_RESPONSE => {
                Body::SessionEstablishmentResponse(SessionEstablishmentResponse::decode(v)?)
            }
            SESSION_MODIFICATION_REQUEST => {
                Body::SessionModificationRequest(SessionModificationRequest::decode(v)?)
            }
            SESSION_MODIFICATION_RESPONSE => {
                Body::SessionModificationResponse(SessionModificationResponse::decode(v)?)
            }
            SESSION_DELETION_REQUEST => {
                check_ies(v)?;
                Body::SessionDeletionRequest
            }
            SESSION_DELETION_RESPONSE => {
                Body::SessionDeletionResponse(SessionDeletionResponse::decode(v)?)
            }
            SESSION_REPORT_REQUEST => Body::SessionReportRequest(SessionReportRequest::decode(v)?),
            SESSION_REPORT_RESPONSE => {
                Body::SessionReportResponse(SessionReportResponse::decode(v)?)
            }
            _ => return Err(DecodeError::UnknownMessage(t)),
        })
    }

    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        match self {
            Body::HeartbeatRequest(m) | Body::HeartbeatResponse(m) => m.encode(w),
            Body::AssociationSetupRequest(m) => m.encode(w),
            Body::AssociationSetupResponse(m) => m.encode(w),
            Body::AssociationUpdateRequest(m) => m.encode(w),
            Body::AssociationUpdateResponse(m) => m.encode(w),
            Body::AssociationReleaseRequest(m) => m.encode(w),
            Body::AssociationReleaseResponse(m) => m.encode(w),
            Body::VersionNotSupportedResponse | Body::SessionDeletionRequest => Ok(()),
            Body::SessionEstablishmentRequest(m) => m.encode(w),
            Body::SessionEstablishmentResponse(m) => m.encode(w),
            Body::SessionModificationRequest(m) => m.encode(w),
            Body::SessionModificationResponse(m) => m.encode(w),
            Body::SessionDeletionResponse(m) => m.encode(w),
            Body::SessionReportRequest(m) => m.encode(w),
            Body::SessionReportResponse(m) => m.encode(w),
        }
    }
}

/// Checks that `v` is a well-formed sequence of IEs (whose content we do not read).
fn check_ies(v: &[u8]) -> Result<(), DecodeError> {
    Ies::new(v).try_for_each(|ie| ie.map(|_| ()))
}

/// Runs `f` on each IE of `v`.
fn each<'a>(
    v: &'a [u8],
    mut f: impl FnMut(u16, &'a [u8]) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    for ie in Ies::new(v) {
        let (ty, value) = ie?;
        f(ty, value)?;
    }
    Ok(())
}

/// Heartbeat Request and Response (7.4.2): the sender's Recovery Time Stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Heartbeat {
    /// When the sender started.
    pub recovery_time_stamp: RecoveryTimeStamp,
}

impl Heartbeat {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let mut rts = None;
        each(v, |ty, v| match ty {
            ie_type::RECOVERY_TIME_STAMP => first(&mut rts, v),
            _ => Ok(()),
        })?;
        Ok(Heartbeat {
            recovery_time_stamp: need(rts, ie_type::RECOVERY_TIME_STAMP)?,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.recovery_time_stamp)
    }
}

/// Association Setup Request (7.4.4.1).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct AssociationSetupRequest {
    /// The sender.
    pub node_id: NodeId,
    /// When the sender started.
    pub recovery_time_stamp: RecoveryTimeStamp,
    /// A user plane's features.
    pub up_function_features: Option<UpFunctionFeatures>,
    /// A control plane's features.
    pub cp_function_features: Option<CpFunctionFeatures>,
}

impl AssociationSetupRequest {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut node, mut rts, mut up, mut cp) = (None, None, None, None);
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            ie_type::RECOVERY_TIME_STAMP => first(&mut rts, v),
            ie_type::UP_FUNCTION_FEATURES => first(&mut up, v),
            ie_type::CP_FUNCTION_FEATURES => first(&mut cp, v),
            _ => Ok(()),
        })?;
        Ok(AssociationSetupRequest {
            node_id: need(node, ie_type::NODE_ID)?,
            recovery_time_stamp: need(rts, ie_type::RECOVERY_TIME_STAMP)?,
            up_function_features: up,
            cp_function_features: cp,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)?;
        write(w, &self.recovery_time_stamp)?;
        write_opt(w, &self.up_function_features)?;
        write_opt(w, &self.cp_function_features)
    }
}

/// Association Setup Response (7.4.4.2).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct AssociationSetupResponse {
    /// The responder.
    pub node_id: NodeId,
    /// The outcome.
    pub cause: Cause,
    /// When the responder started.
    pub recovery_time_stamp: RecoveryTimeStamp,
    /// A user plane's features.
    pub up_function_features: Option<UpFunctionFeatures>,
    /// A control plane's features.
    pub cp_function_features: Option<CpFunctionFeatures>,
}

impl AssociationSetupResponse {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut node, mut cause, mut rts, mut up, mut cp) = (None, None, None, None, None);
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            ie_type::CAUSE => first(&mut cause, v),
            ie_type::RECOVERY_TIME_STAMP => first(&mut rts, v),
            ie_type::UP_FUNCTION_FEATURES => first(&mut up, v),
            ie_type::CP_FUNCTION_FEATURES => first(&mut cp, v),
            _ => Ok(()),
        })?;
        Ok(AssociationSetupResponse {
            node_id: need(node, ie_type::NODE_ID)?,
            cause: need(cause, ie_type::CAUSE)?,
            recovery_time_stamp: need(rts, ie_type::RECOVERY_TIME_STAMP)?,
            up_function_features: up,
            cp_function_features: cp,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)?;
        write(w, &self.cause)?;
        write(w, &self.recovery_time_stamp)?;
        write_opt(w, &self.up_function_features)?;
        write_opt(w, &self.cp_function_features)
    }
}

/// Association Update Request (7.4.4.3), the IEs we read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct AssociationUpdateRequest {
    /// The sender.
    pub node_id: NodeId,
    /// A user plane's features.
    pub up_function_features: Option<UpFunctionFeatures>,
    /// A control plane's features.
    pub cp_function_features: Option<CpFunctionFeatures>,
}

impl AssociationUpdateRequest {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut node, mut up, mut cp) = (None, None, None);
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            ie_type::UP_FUNCTION_FEATURES => first(&mut up, v),
            ie_type::CP_FUNCTION_FEATURES => first(&mut cp, v),
            _ => Ok(()),
        })?;
        Ok(AssociationUpdateRequest {
            node_id: need(node, ie_type::NODE_ID)?,
            up_function_features: up,
            cp_function_features: cp,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)?;
        write_opt(w, &self.up_function_features)?;
        write_opt(w, &self.cp_function_features)
    }
}

/// Association Update Response (7.4.4.4).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct AssociationUpdateResponse {
    /// The responder.
    pub node_id: NodeId,
    /// The outcome.
    pub cause: Cause,
    /// A user plane's features.
    pub up_function_features: Option<UpFunctionFeatures>,
    /// A control plane's features.
    pub cp_function_features: Option<CpFunctionFeatures>,
}

impl AssociationUpdateResponse {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut node, mut cause, mut up, mut cp) = (None, None, None, None);
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            ie_type::CAUSE => first(&mut cause, v),
            ie_type::UP_FUNCTION_FEATURES => first(&mut up, v),
            ie_type::CP_FUNCTION_FEATURES => first(&mut cp, v),
            _ => Ok(()),
        })?;
        Ok(AssociationUpdateResponse {
            node_id: need(node, ie_type::NODE_ID)?,
            cause: need(cause, ie_type::CAUSE)?,
            up_function_features: up,
            cp_function_features: cp,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)?;
        write(w, &self.cause)?;
        write_opt(w, &self.up_function_features)?;
        write_opt(w, &self.cp_function_features)
    }
}

/// Association Release Request (7.4.4.5).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct AssociationReleaseRequest {
    /// The sender.
    pub node_id: NodeId,
}

impl AssociationReleaseRequest {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let mut node = None;
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            _ => Ok(()),
        })?;
        Ok(AssociationReleaseRequest {
            node_id: need(node, ie_type::NODE_ID)?,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)
    }
}

/// Association Release Response (7.4.4.6).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct AssociationReleaseResponse {
    /// The responder.
    pub node_id: NodeId,
    /// The outcome.
    pub cause: Cause,
}

impl AssociationReleaseResponse {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut node, mut cause) = (None, None);
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            ie_type::CAUSE => first(&mut cause, v),
            _ => Ok(()),
        })?;
        Ok(AssociationReleaseResponse {
            node_id: need(node, ie_type::NODE_ID)?,
            cause: need(cause, ie_type::CAUSE)?,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)?;
        write(w, &self.cause)
    }
}

/// PDI (8.2 table 7.5.2.2-2): what a PDR matches.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Pdi {
    /// Where the packets come from (Access: uplink from the RAN; Core: downlink).
    pub source_interface: Interface,
    /// The local tunnel endpoint uplink packets arrive on (or CHOOSE).
    pub local_f_teid: Option<FTeid>,
    /// The network instance.
    pub network_instance: Option<NetworkInstance>,
    /// The UE's address.
    pub ue_ip_address: Option<UeIpAddress>,
    /// Every other IE of the PDI (SDF Filter, Application ID, QFI, Ethernet filters, ...):
    /// kept, not interpreted, so that a PDR that matches on more than we can is refused.
    pub other: Vec<RawIe>,
}

impl Pdi {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut si, mut fteid, mut ni, mut ue) = (None, None, None, None);
        let mut other = Vec::new();
        each(v, |ty, v| match ty {
            ie_type::SOURCE_INTERFACE => first(&mut si, v),
            ie_type::F_TEID => first(&mut fteid, v),
            ie_type::NETWORK_INSTANCE => first(&mut ni, v),
            ie_type::UE_IP_ADDRESS => first(&mut ue, v),
            _ => {
                other.push(RawIe {
                    ie_type: ty,
                    value: v.to_vec(),
                });
                Ok(())
            }
        })?;
        Ok(Pdi {
            source_interface: need::<SourceInterface>(si, ie_type::SOURCE_INTERFACE)?.0,
            local_f_teid: fteid,
            network_instance: ni,
            ue_ip_address: ue,
            other,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.ie(ie_type::PDI, |w| {
            write(w, &SourceInterface(self.source_interface))?;
            write_opt(w, &self.local_f_teid)?;
            write_opt(w, &self.network_instance)?;
            write_opt(w, &self.ue_ip_address)?;
            self.other.iter().try_for_each(|ie| ie.write(w))
        })
    }
}

/// Collects every occurrence of a repeatable IE.
fn push<T: Value>(list: &mut Vec<T>, v: &[u8]) -> Result<(), DecodeError> {
    list.push(read(v)?);
    Ok(())
}

/// Collects every occurrence of a repeatable grouped IE.
fn push_group<T>(
    list: &mut Vec<T>,
    v: &[u8],
    decode: fn(&[u8]) -> Result<T, DecodeError>,
) -> Result<(), DecodeError> {
    list.push(decode(v)?);
    Ok(())
}

/// Keeps the first occurrence of a grouped IE.
fn first_group<T>(
    slot: &mut Option<T>,
    v: &[u8],
    decode: fn(&[u8]) -> Result<T, DecodeError>,
) -> Result<(), DecodeError> {
    if slot.is_none() {
        *slot = Some(decode(v)?);
    }
    Ok(())
}

/// Create PDR (7.5.2.2).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct CreatePdr {
    /// The rule id.
    pub pdr_id: PdrId,
    /// Lower wins.
    pub precedence: Precedence,
    /// What it matches.
    pub pdi: Pdi,
    /// The tunnel header to strip (uplink).
    pub outer_header_removal: Option<OuterHeaderRemoval>,
    /// The FAR that says what to do with matched packets.
    pub far_id: Option<FarId>,
    /// URRs measuring matched packets.
    pub urr_ids: Vec<UrrId>,
    /// QERs enforced on matched packets.
    pub qer_ids: Vec<QerId>,
}

impl CreatePdr {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut prec, mut pdi, mut ohr, mut far) = (None, None, None, None, None);
        let (mut urr_ids, mut qer_ids) = (Vec::new(), Vec::new());
        each(v, |ty, v| match ty {
            ie_type::PDR_ID => first(&mut id, v),
            ie_type::PRECEDENCE => first(&mut prec, v),
            ie_type::PDI => first_group(&mut pdi, v, Pdi::decode),
            ie_type::OUTER_HEADER_REMOVAL => first(&mut ohr, v),
            ie_type::FAR_ID => first(&mut far, v),
            ie_type::URR_ID => push(&mut urr_ids, v),
            ie_type::QER_ID => push(&mut qer_ids, v),
            _ => Ok(()),
        })?;
        Ok(CreatePdr {
            pdr_id: need(id, ie_type::PDR_ID)?,
            precedence: need(prec, ie_type::PRECEDENCE)?,
            pdi: need(pdi, ie_type::PDI)?,
            outer_header_removal: ohr,
            far_id: far,
            urr_ids,
            qer_ids,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.ie(ie_type::CREATE_PDR, |w| {
            write(w, &self.pdr_id)?;
            write(w, &self.precedence)?;
            self.pdi.encode(w)?;
            write_opt(w, &self.outer_header_removal)?;
            write_opt(w, &self.far_id)?;
            self.urr_ids.iter().try_for_each(|x| write(w, x))?;
            self.qer_ids.iter().try_for_each(|x| write(w, x))
        })
    }
}

/// Update PDR (7.5.4.2): the fields present replace the PDR's.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct UpdatePdr {
    /// The rule id.
    pub pdr_id: PdrId,
    /// New outer header removal.
    pub outer_header_removal: Option<OuterHeaderRemoval>,
    /// New precedence.
    pub precedence: Option<Precedence>,
    /// New PDI (replaces the whole PDI).
    pub pdi: Option<Pdi>,
    /// New FAR.
    pub far_id: Option<FarId>,
    /// New URR list (when not empty).
    pub urr_ids: Vec<UrrId>,
    /// New QER list (when not empty).
    pub qer_ids: Vec<QerId>,
}

impl UpdatePdr {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut prec, mut pdi, mut ohr, mut far) = (None, None, None, None, None);
        let (mut urr_ids, mut qer_ids) = (Vec::new(), Vec::new());
        each(v, |ty, v| match ty {
            ie_type::PDR_ID => first(&mut id, v),
            ie_type::PRECEDENCE => first(&mut prec, v),
            ie_type::PDI => first_group(&mut pdi, v, Pdi::decode),
            ie_type::OUTER_HEADER_REMOVAL => first(&mut ohr, v),
            ie_type::FAR_ID => first(&mut far, v),
            ie_type::URR_ID => push(&mut urr_ids, v),
            ie_type::QER_ID => push(&mut qer_ids, v),
            _ => Ok(()),
        })?;
        Ok(UpdatePdr {
            pdr_id: need(id, ie_type::PDR_ID)?,
            outer_header_removal: ohr,
            precedence: prec,
            pdi,
            far_id: far,
            urr_ids,
            qer_ids,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.ie(ie_type::UPDATE_PDR, |w| {
            write(w, &self.pdr_id)?;
            write_opt(w, &self.outer_header_removal)?;
            write_opt(w, &self.precedence)?;
            if let Some(pdi) = &self.pdi {
                pdi.encode(w)?;
            }
            write_opt(w, &self.far_id)?;
            self.urr_ids.iter().try_for_each(|x| write(w, x))?;
            self.qer_ids.iter().try_for_each(|x| write(w, x))
        })
    }
}

/// Forwarding Parameters (7.5.2.3-2) and Update Forwarding Parameters (7.5.4.3-2): in Create
/// FAR the destination interface is mandatory; in Update FAR every field is optional.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ForwardingParameters {
    /// Where the packets go (Access: to the RAN; Core: to the data network).
    pub destination_interface: Option<Interface>,
    /// The network instance.
    pub network_instance: Option<NetworkInstance>,
    /// The tunnel header to add (downlink).
    pub outer_header_creation: Option<OuterHeaderCreation>,
}

impl ForwardingParameters {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut di, mut ni, mut ohc) = (None, None, None);
        each(v, |ty, v| match ty {
            ie_type::DESTINATION_INTERFACE => first(&mut di, v),
            ie_type::NETWORK_INSTANCE => first(&mut ni, v),
            ie_type::OUTER_HEADER_CREATION => first(&mut ohc, v),
            _ => Ok(()),
        })?;
        Ok(ForwardingParameters {
            destination_interface: di.map(|d: DestinationInterface| d.0),
            network_instance: ni,
            outer_header_creation: ohc,
        })
    }
    fn decode_create(v: &[u8]) -> Result<Self, DecodeError> {
        let p = Self::decode(v)?;
        need(p.destination_interface, ie_type::DESTINATION_INTERFACE)?;
        Ok(p)
    }
    fn encode(&self, w: &mut Writer, ty: u16) -> Result<(), BuildError> {
        w.ie(ty, |w| self.encode_fields(w))
    }
    fn encode_fields(&self, w: &mut Writer) -> Result<(), BuildError> {
        write_opt(w, &self.destination_interface.map(DestinationInterface))?;
        write_opt(w, &self.network_instance)?;
        write_opt(w, &self.outer_header_creation)
    }
}

/// Create FAR (7.5.2.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateFar {
    /// The rule id.
    pub far_id: FarId,
    /// DROP, FORW, ...
    pub apply_action: ApplyAction,
    /// Where and how to forward (its destination interface is `Some`).
    pub forwarding_parameters: Option<ForwardingParameters>,
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for CreateFar {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut forwarding_parameters: Option<ForwardingParameters> = u.arbitrary()?;
        if let Some(p) = &mut forwarding_parameters {
            p.destination_interface
                .get_or_insert(Interface(u.int_in_range(0..=15)?));
        }
        Ok(CreateFar {
            far_id: u.arbitrary()?,
            apply_action: u.arbitrary()?,
            forwarding_parameters,
        })
    }
}

impl CreateFar {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut aa, mut fp) = (None, None, None);
        each(v, |ty, v| match ty {
            ie_type::FAR_ID => first(&mut id, v),
            ie_type::APPLY_ACTION => first(&mut aa, v),
            ie_type::FORWARDING_PARAMETERS => {
                first_group(&mut fp, v, ForwardingParameters::decode_create)
            }
            _ => Ok(()),
        })?;
        Ok(CreateFar {
            far_id: need(id, ie_type::FAR_ID)?,
            apply_action: need(aa, ie_type::APPLY_ACTION)?,
            forwarding_parameters: fp,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.ie(ie_type::CREATE_FAR, |w| {
            write(w, &self.far_id)?;
            write(w, &self.apply_action)?;
            match &self.forwarding_parameters {
                Some(p) if p.destination_interface.is_none() => {
                    Err(BuildError::Value(ie_type::FORWARDING_PARAMETERS))
                }
                Some(p) => p.encode(w, ie_type::FORWARDING_PARAMETERS),
                None => Ok(()),
            }
        })
    }
}

/// Update FAR (7.5.4.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateFar {
    /// The rule id.
    pub far_id: FarId,
    /// New apply action.
    pub apply_action: Option<ApplyAction>,
    /// Changed forwarding parameters (fields present replace the FAR's).
    pub update_forwarding_parameters: Option<ForwardingParameters>,
    /// The PFCPSMReq-Flags inside the Update Forwarding Parameters (SNDEM: send an End Marker
    /// on the old tunnel); only with `update_forwarding_parameters`.
    pub pfcpsmreq_flags: Option<PfcpSmReqFlags>,
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for UpdateFar {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let update_forwarding_parameters: Option<ForwardingParameters> = u.arbitrary()?;
        let pfcpsmreq_flags = match update_forwarding_parameters {
            Some(_) => u.arbitrary()?,
            None => None,
        };
        Ok(UpdateFar {
            far_id: u.arbitrary()?,
            apply_action: u.arbitrary()?,
            update_forwarding_parameters,
            pfcpsmreq_flags,
        })
    }
}

impl UpdateFar {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut aa, mut fp, mut flags) = (None, None, None, None);
        each(v, |ty, v| match ty {
            ie_type::FAR_ID => first(&mut id, v),
            ie_type::APPLY_ACTION => first(&mut aa, v),
            ie_type::UPDATE_FORWARDING_PARAMETERS if fp.is_none() => {
                fp = Some(ForwardingParameters::decode(v)?);
                each(v, |ty, v| match ty {
                    ie_type::PFCPSMREQ_FLAGS => first(&mut flags, v),
                    _ => Ok(()),
                })
            }
            _ => Ok(()),
        })?;
        Ok(UpdateFar {
            far_id: need(id, ie_type::FAR_ID)?,
            apply_action: aa,
            update_forwarding_parameters: fp,
            pfcpsmreq_flags: flags,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.ie(ie_type::UPDATE_FAR, |w| {
            write(w, &self.far_id)?;
            write_opt(w, &self.apply_action)?;
            match (&self.update_forwarding_parameters, self.pfcpsmreq_flags) {
                (Some(p), flags) => w.ie(ie_type::UPDATE_FORWARDING_PARAMETERS, |w| {
                    p.encode_fields(w)?;
                    write_opt(w, &flags)
                }),
                (None, None) => Ok(()),
                (None, Some(_)) => Err(BuildError::Value(ie_type::PFCPSMREQ_FLAGS)),
            }
        })
    }
}

/// Create QER (7.5.2.5) and Update QER (7.5.4.5): the QoS enforcement rule. In Create QER the
/// gate status is mandatory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Qer {
    /// The rule id.
    pub qer_id: QerId,
    /// The QER correlation id.
    pub correlation_id: Option<QerCorrelationId>,
    /// Open or closed gates.
    pub gate_status: Option<GateStatus>,
    /// Maximum bit rate.
    pub mbr: Option<Mbr>,
    /// Guaranteed bit rate.
    pub gbr: Option<Gbr>,
    /// The QoS flow id to mark.
    pub qfi: Option<Qfi>,
    /// Every other IE (Packet Rate, DL Flow Level Marking, RQI, Paging Policy Indicator, ...).
    pub other: Vec<RawIe>,
}

impl Qer {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut corr, mut gate, mut mbr, mut gbr, mut qfi) =
            (None, None, None, None, None, None);
        let mut other = Vec::new();
        each(v, |ty, v| match ty {
            ie_type::QER_ID => first(&mut id, v),
            ie_type::QER_CORRELATION_ID => first(&mut corr, v),
            ie_type::GATE_STATUS => first(&mut gate, v),
            ie_type::MBR => first(&mut mbr, v),
            ie_type::GBR => first(&mut gbr, v),
            ie_type::QFI => first(&mut qfi, v),
            _ => {
                other.push(RawIe {
                    ie_type: ty,
                    value: v.to_vec(),
                });
                Ok(())
            }
        })?;
        Ok(Qer {
            qer_id: need(id, ie_type::QER_ID)?,
            correlation_id: corr,
            gate_status: gate,
            mbr,
            gbr,
            qfi,
            other,
        })
    }
    fn decode_create(v: &[u8]) -> Result<Self, DecodeError> {
        let q = Self::decode(v)?;
        need(q.gate_status, ie_type::GATE_STATUS)?;
        Ok(q)
    }
    fn encode(&self, w: &mut Writer, ty: u16) -> Result<(), BuildError> {
        w.ie(ty, |w| {
            write(w, &self.qer_id)?;
            write_opt(w, &self.correlation_id)?;
            write_opt(w, &self.gate_status)?;
            write_opt(w, &self.mbr)?;
            write_opt(w, &self.gbr)?;
            write_opt(w, &self.qfi)?;
            self.other.iter().try_for_each(|ie| ie.write(w))
        })
    }
}

/// Create URR (7.5.2.4) and Update URR (7.5.4.4): the usage reporting rule. In Create URR
/// the measurement method and reporting triggers are mandatory.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Urr {
    /// The rule id.
    pub urr_id: UrrId,
    /// What to measure.
    pub measurement_method: Option<MeasurementMethod>,
    /// When to report.
    pub reporting_triggers: Option<ReportingTriggers>,
    /// Every other IE (thresholds, quotas, periods, ...).
    pub other: Vec<RawIe>,
}

impl Urr {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut mm, mut rt) = (None, None, None);
        let mut other = Vec::new();
        each(v, |ty, v| match ty {
            ie_type::URR_ID => first(&mut id, v),
            ie_type::MEASUREMENT_METHOD => first(&mut mm, v),
            ie_type::REPORTING_TRIGGERS => first(&mut rt, v),
            _ => {
                other.push(RawIe {
                    ie_type: ty,
                    value: v.to_vec(),
                });
                Ok(())
            }
        })?;
        Ok(Urr {
            urr_id: need(id, ie_type::URR_ID)?,
            measurement_method: mm,
            reporting_triggers: rt,
            other,
        })
    }
    fn decode_create(v: &[u8]) -> Result<Self, DecodeError> {
        let u = Self::decode(v)?;
        need(u.measurement_method, ie_type::MEASUREMENT_METHOD)?;
        need(u.reporting_triggers.as_ref(), ie_type::REPORTING_TRIGGERS)?;
        Ok(u)
    }
    fn encode(&self, w: &mut Writer, ty: u16) -> Result<(), BuildError> {
        w.ie(ty, |w| {
            write(w, &self.urr_id)?;
            write_opt(w, &self.measurement_method)?;
            write_opt(w, &self.reporting_triggers)?;
            self.other.iter().try_for_each(|ie| ie.write(w))
        })
    }
}

/// Created PDR (7.5.3.2): the F-TEID the user plane allocated for a PDR.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct CreatedPdr {
    /// The rule id.
    pub pdr_id: PdrId,
    /// The allocated tunnel endpoint.
    pub local_f_teid: Option<FTeid>,
    /// The UE address the user plane allocated (for CHV4/CHV6).
    pub ue_ip_address: Option<UeIpAddress>,
}

impl CreatedPdr {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut fteid, mut ue) = (None, None, None);
        each(v, |ty, v| match ty {
            ie_type::PDR_ID => first(&mut id, v),
            ie_type::F_TEID => first(&mut fteid, v),
            ie_type::UE_IP_ADDRESS => first(&mut ue, v),
            _ => Ok(()),
        })?;
        Ok(CreatedPdr {
            pdr_id: need(id, ie_type::PDR_ID)?,
            local_f_teid: fteid,
            ue_ip_address: ue,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        w.ie(ie_type::CREATED_PDR, |w| {
            write(w, &self.pdr_id)?;
            write_opt(w, &self.local_f_teid)?;
            write_opt(w, &self.ue_ip_address)
        })
    }
}

/// A Remove PDR/FAR/QER/URR group: just the rule id.
fn decode_remove<T: Value>(v: &[u8]) -> Result<T, DecodeError> {
    let mut id = None;
    each(v, |ty, v| {
        if ty == T::TYPE {
            first(&mut id, v)
        } else {
            Ok(())
        }
    })?;
    need(id, T::TYPE)
}

fn encode_remove<T: Value>(w: &mut Writer, group: u16, id: &T) -> Result<(), BuildError> {
    w.ie(group, |w| write(w, id))
}

/// Session Establishment Request (7.5.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionEstablishmentRequest {
    /// The control plane.
    pub node_id: NodeId,
    /// The control plane's end of the session.
    pub cp_f_seid: FSeid,
    /// At least one.
    pub create_pdr: Vec<CreatePdr>,
    /// At least one.
    pub create_far: Vec<CreateFar>,
    /// Usage reporting rules.
    pub create_urr: Vec<Urr>,
    /// QoS enforcement rules.
    pub create_qer: Vec<Qer>,
    /// The buffering action rule.
    pub create_bar: Option<Bar>,
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for SessionEstablishmentRequest {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut create_qer: Vec<Qer> = u.arbitrary()?;
        for q in &mut create_qer {
            q.gate_status.get_or_insert(GateStatus::OPEN);
        }
        let mut create_urr: Vec<Urr> = u.arbitrary()?;
        for x in &mut create_urr {
            x.measurement_method.get_or_insert(MeasurementMethod(2));
            x.reporting_triggers
                .get_or_insert(ReportingTriggers(vec![0, 0]));
        }
        Ok(SessionEstablishmentRequest {
            node_id: u.arbitrary()?,
            cp_f_seid: u.arbitrary()?,
            create_pdr: vec_at_least_one(u)?,
            create_far: vec_at_least_one(u)?,
            create_urr,
            create_qer,
            create_bar: u.arbitrary()?,
        })
    }
}

#[cfg(feature = "arbitrary")]
fn vec_at_least_one<'a, T: arbitrary::Arbitrary<'a>>(
    u: &mut arbitrary::Unstructured<'a>,
) -> arbitrary::Result<Vec<T>> {
    let mut v: Vec<T> = u.arbitrary()?;
    if v.is_empty() {
        v.push(u.arbitrary()?);
    }
    Ok(v)
}

impl SessionEstablishmentRequest {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut node, mut fseid, mut bar) = (None, None, None);
        let (mut pdrs, mut fars, mut urrs, mut qers) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            ie_type::F_SEID => first(&mut fseid, v),
            ie_type::CREATE_BAR => first_group(&mut bar, v, Bar::decode),
            ie_type::CREATE_PDR => push_group(&mut pdrs, v, CreatePdr::decode),
            ie_type::CREATE_FAR => push_group(&mut fars, v, CreateFar::decode),
            ie_type::CREATE_URR => push_group(&mut urrs, v, Urr::decode_create),
            ie_type::CREATE_QER => push_group(&mut qers, v, Qer::decode_create),
            _ => Ok(()),
        })?;
        let node_id = need(node, ie_type::NODE_ID)?;
        let cp_f_seid = need(fseid, ie_type::F_SEID)?;
        if pdrs.is_empty() {
            return Err(DecodeError::MissingIe(ie_type::CREATE_PDR));
        }
        if fars.is_empty() {
            return Err(DecodeError::MissingIe(ie_type::CREATE_FAR));
        }
        Ok(SessionEstablishmentRequest {
            node_id,
            cp_f_seid,
            create_pdr: pdrs,
            create_far: fars,
            create_urr: urrs,
            create_qer: qers,
            create_bar: bar,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)?;
        write(w, &self.cp_f_seid)?;
        self.create_pdr.iter().try_for_each(|x| x.encode(w))?;
        self.create_far.iter().try_for_each(|x| x.encode(w))?;
        self.create_urr
            .iter()
            .try_for_each(|x| x.encode(w, ie_type::CREATE_URR))?;
        self.create_qer
            .iter()
            .try_for_each(|x| x.encode(w, ie_type::CREATE_QER))?;
        match &self.create_bar {
            Some(b) => b.encode(w, ie_type::CREATE_BAR),
            None => Ok(()),
        }
    }
}

/// Session Establishment Response (7.5.3).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SessionEstablishmentResponse {
    /// The user plane.
    pub node_id: NodeId,
    /// The outcome.
    pub cause: Cause,
    /// The IE a rejection is about.
    pub offending_ie: Option<OffendingIe>,
    /// The user plane's end of the session (when accepted).
    pub up_f_seid: Option<FSeid>,
    /// The F-TEIDs allocated for CHOOSE.
    pub created_pdr: Vec<CreatedPdr>,
    /// The rule a Rule creation/modification failure is about.
    pub failed_rule_id: Option<FailedRuleId>,
}

impl SessionEstablishmentResponse {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut node, mut cause, mut off, mut fseid, mut failed) = (None, None, None, None, None);
        let mut created = Vec::new();
        each(v, |ty, v| match ty {
            ie_type::NODE_ID => first(&mut node, v),
            ie_type::CAUSE => first(&mut cause, v),
            ie_type::OFFENDING_IE => first(&mut off, v),
            ie_type::F_SEID => first(&mut fseid, v),
            ie_type::CREATED_PDR => push_group(&mut created, v, CreatedPdr::decode),
            ie_type::FAILED_RULE_ID => first(&mut failed, v),
            _ => Ok(()),
        })?;
        Ok(SessionEstablishmentResponse {
            node_id: need(node, ie_type::NODE_ID)?,
            cause: need(cause, ie_type::CAUSE)?,
            offending_ie: off,
            up_f_seid: fseid,
            created_pdr: created,
            failed_rule_id: failed,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.node_id)?;
        write(w, &self.cause)?;
        write_opt(w, &self.offending_ie)?;
        write_opt(w, &self.up_f_seid)?;
        self.created_pdr.iter().try_for_each(|x| x.encode(w))?;
        write_opt(w, &self.failed_rule_id)
    }
}

/// Session Modification Request (7.5.4), the IEs we read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionModificationRequest {
    /// A new control-plane F-SEID.
    pub cp_f_seid: Option<FSeid>,
    /// PDRs to remove.
    pub remove_pdr: Vec<PdrId>,
    /// FARs to remove.
    pub remove_far: Vec<FarId>,
    /// URRs to remove.
    pub remove_urr: Vec<UrrId>,
    /// QERs to remove.
    pub remove_qer: Vec<QerId>,
    /// PDRs to create.
    pub create_pdr: Vec<CreatePdr>,
    /// FARs to create.
    pub create_far: Vec<CreateFar>,
    /// URRs to create.
    pub create_urr: Vec<Urr>,
    /// QERs to create.
    pub create_qer: Vec<Qer>,
    /// PDRs to change.
    pub update_pdr: Vec<UpdatePdr>,
    /// FARs to change.
    pub update_far: Vec<UpdateFar>,
    /// URRs to change.
    pub update_urr: Vec<Urr>,
    /// QERs to change.
    pub update_qer: Vec<Qer>,
    /// URRs whose usage to report in the response now (Query URR).
    pub query_urr: Vec<UrrId>,
    /// PFCPSMReq-Flags (QAURR: report every URR's usage in the response).
    pub pfcpsmreq_flags: Option<PfcpSmReqFlags>,
    /// A BAR to create.
    pub create_bar: Option<Bar>,
    /// The BAR to change.
    pub update_bar: Option<Bar>,
    /// The BAR to remove.
    pub remove_bar: Option<BarId>,
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for SessionModificationRequest {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let mut create_qer: Vec<Qer> = u.arbitrary()?;
        for q in &mut create_qer {
            q.gate_status.get_or_insert(GateStatus::OPEN);
        }
        let mut create_urr: Vec<Urr> = u.arbitrary()?;
        for x in &mut create_urr {
            x.measurement_method.get_or_insert(MeasurementMethod(2));
            x.reporting_triggers
                .get_or_insert(ReportingTriggers(vec![0, 0]));
        }
        Ok(SessionModificationRequest {
            cp_f_seid: u.arbitrary()?,
            remove_pdr: u.arbitrary()?,
            remove_far: u.arbitrary()?,
            remove_urr: u.arbitrary()?,
            remove_qer: u.arbitrary()?,
            create_pdr: u.arbitrary()?,
            create_far: u.arbitrary()?,
            create_urr,
            create_qer,
            update_pdr: u.arbitrary()?,
            update_far: u.arbitrary()?,
            update_urr: u.arbitrary()?,
            update_qer: u.arbitrary()?,
            query_urr: u.arbitrary()?,
            pfcpsmreq_flags: u.arbitrary()?,
            create_bar: u.arbitrary()?,
            update_bar: u.arbitrary()?,
            remove_bar: u.arbitrary()?,
        })
    }
}

impl SessionModificationRequest {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let mut m = SessionModificationRequest::default();
        each(v, |ty, v| match ty {
            ie_type::F_SEID => first(&mut m.cp_f_seid, v),
            ie_type::REMOVE_PDR => push_group(&mut m.remove_pdr, v, decode_remove),
            ie_type::REMOVE_FAR => push_group(&mut m.remove_far, v, decode_remove),
            ie_type::REMOVE_URR => push_group(&mut m.remove_urr, v, decode_remove),
            ie_type::REMOVE_QER => push_group(&mut m.remove_qer, v, decode_remove),
            ie_type::CREATE_PDR => push_group(&mut m.create_pdr, v, CreatePdr::decode),
            ie_type::CREATE_FAR => push_group(&mut m.create_far, v, CreateFar::decode),
            ie_type::CREATE_URR => push_group(&mut m.create_urr, v, Urr::decode_create),
            ie_type::CREATE_QER => push_group(&mut m.create_qer, v, Qer::decode_create),
            ie_type::UPDATE_PDR => push_group(&mut m.update_pdr, v, UpdatePdr::decode),
            ie_type::UPDATE_FAR => push_group(&mut m.update_far, v, UpdateFar::decode),
            ie_type::UPDATE_URR => push_group(&mut m.update_urr, v, Urr::decode),
            ie_type::UPDATE_QER => push_group(&mut m.update_qer, v, Qer::decode),
            ie_type::QUERY_URR => push_group(&mut m.query_urr, v, decode_remove),
            ie_type::PFCPSMREQ_FLAGS => first(&mut m.pfcpsmreq_flags, v),
            ie_type::CREATE_BAR => first_group(&mut m.create_bar, v, Bar::decode),
            ie_type::UPDATE_BAR_SMR => first_group(&mut m.update_bar, v, Bar::decode),
            ie_type::REMOVE_BAR => first_group(&mut m.remove_bar, v, decode_remove),
            _ => Ok(()),
        })?;
        Ok(m)
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write_opt(w, &self.cp_f_seid)?;
        for x in &self.remove_pdr {
            encode_remove(w, ie_type::REMOVE_PDR, x)?;
        }
        for x in &self.remove_far {
            encode_remove(w, ie_type::REMOVE_FAR, x)?;
        }
        for x in &self.remove_urr {
            encode_remove(w, ie_type::REMOVE_URR, x)?;
        }
        for x in &self.remove_qer {
            encode_remove(w, ie_type::REMOVE_QER, x)?;
        }
        self.create_pdr.iter().try_for_each(|x| x.encode(w))?;
        self.create_far.iter().try_for_each(|x| x.encode(w))?;
        for x in &self.create_urr {
            if x.measurement_method.is_none() || x.reporting_triggers.is_none() {
                return Err(BuildError::Value(ie_type::CREATE_URR));
            }
            x.encode(w, ie_type::CREATE_URR)?;
        }
        for x in &self.create_qer {
            if x.gate_status.is_none() {
                return Err(BuildError::Value(ie_type::CREATE_QER));
            }
            x.encode(w, ie_type::CREATE_QER)?;
        }
        self.update_pdr.iter().try_for_each(|x| x.encode(w))?;
        self.update_far.iter().try_for_each(|x| x.encode(w))?;
        self.update_urr
            .iter()
            .try_for_each(|x| x.encode(w, ie_type::UPDATE_URR))?;
        self.update_qer
            .iter()
            .try_for_each(|x| x.encode(w, ie_type::UPDATE_QER))?;
        for x in &self.query_urr {
            encode_remove(w, ie_type::QUERY_URR, x)?;
        }
        write_opt(w, &self.pfcpsmreq_flags)?;
        if let Some(b) = &self.create_bar {
            b.encode(w, ie_type::CREATE_BAR)?;
        }
        if let Some(b) = &self.update_bar {
            b.encode(w, ie_type::UPDATE_BAR_SMR)?;
        }
        if let Some(x) = &self.remove_bar {
            encode_remove(w, ie_type::REMOVE_BAR, x)?;
        }
        Ok(())
    }
}

/// Session Modification Response (7.5.5).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SessionModificationResponse {
    /// The outcome.
    pub cause: Cause,
    /// The IE a rejection is about.
    pub offending_ie: Option<OffendingIe>,
    /// The F-TEIDs allocated for CHOOSE in Create PDRs, and the UE addresses given for
    /// CHV4/CHV6.
    pub created_pdr: Vec<CreatedPdr>,
    /// The rule a Rule creation/modification failure is about.
    pub failed_rule_id: Option<FailedRuleId>,
    /// Usage reports: of queried URRs (IMMER) and of removed ones (TERMR).
    pub usage_report: Vec<UsageReport>,
}

impl SessionModificationResponse {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut cause, mut off, mut failed) = (None, None, None);
        let (mut created, mut usage) = (Vec::new(), Vec::new());
        each(v, |ty, v| match ty {
            ie_type::CAUSE => first(&mut cause, v),
            ie_type::OFFENDING_IE => first(&mut off, v),
            ie_type::CREATED_PDR => push_group(&mut created, v, CreatedPdr::decode),
            ie_type::FAILED_RULE_ID => first(&mut failed, v),
            ie_type::USAGE_REPORT_SMR => push_group(&mut usage, v, UsageReport::decode),
            _ => Ok(()),
        })?;
        Ok(SessionModificationResponse {
            cause: need(cause, ie_type::CAUSE)?,
            offending_ie: off,
            created_pdr: created,
            failed_rule_id: failed,
            usage_report: usage,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.cause)?;
        write_opt(w, &self.offending_ie)?;
        self.created_pdr.iter().try_for_each(|x| x.encode(w))?;
        write_opt(w, &self.failed_rule_id)?;
        self.usage_report
            .iter()
            .try_for_each(|x| x.encode(w, ie_type::USAGE_REPORT_SMR))
    }
}

/// Session Deletion Response (7.5.7).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SessionDeletionResponse {
    /// The outcome.
    pub cause: Cause,
    /// The IE a rejection is about.
    pub offending_ie: Option<OffendingIe>,
    /// The final usage of each URR of the session (TERMR).
    pub usage_report: Vec<UsageReport>,
}

impl SessionDeletionResponse {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut cause, mut off, mut usage) = (None, None, Vec::new());
        each(v, |ty, v| match ty {
            ie_type::CAUSE => first(&mut cause, v),
            ie_type::OFFENDING_IE => first(&mut off, v),
            ie_type::USAGE_REPORT_SDR => push_group(&mut usage, v, UsageReport::decode),
            _ => Ok(()),
        })?;
        Ok(SessionDeletionResponse {
            cause: need(cause, ie_type::CAUSE)?,
            offending_ie: off,
            usage_report: usage,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.cause)?;
        write_opt(w, &self.offending_ie)?;
        self.usage_report
            .iter()
            .try_for_each(|x| x.encode(w, ie_type::USAGE_REPORT_SDR))
    }
}

/// Create BAR (7.5.2.6) and Update BAR (7.5.4.11): the buffering action rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Bar {
    /// The rule id.
    pub bar_id: BarId,
    /// How long to wait before reporting buffered downlink data (DDND).
    pub dl_data_notification_delay: Option<DlDataNotificationDelay>,
    /// How many packets to buffer.
    pub suggested_buffering_packets_count: Option<SuggestedBufferingPacketsCount>,
}

impl Bar {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut delay, mut count) = (None, None, None);
        each(v, |ty, v| match ty {
            ie_type::BAR_ID => first(&mut id, v),
            ie_type::DL_DATA_NOTIFICATION_DELAY => first(&mut delay, v),
            ie_type::SUGGESTED_BUFFERING_PACKETS_COUNT => first(&mut count, v),
            _ => Ok(()),
        })?;
        Ok(Bar {
            bar_id: need(id, ie_type::BAR_ID)?,
            dl_data_notification_delay: delay,
            suggested_buffering_packets_count: count,
        })
    }
    pub(crate) fn encode(&self, w: &mut Writer, ty: u16) -> Result<(), BuildError> {
        w.ie(ty, |w| {
            write(w, &self.bar_id)?;
            write_opt(w, &self.dl_data_notification_delay)?;
            write_opt(w, &self.suggested_buffering_packets_count)
        })
    }
}

/// Usage Report (7.5.5.2, 7.5.7.2, 7.5.8.3): one URR's usage and why it is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct UsageReport {
    /// The rule id.
    pub urr_id: UrrId,
    /// The URR's report number (from 0).
    pub ur_seqn: UrSeqn,
    /// Why it is reported.
    pub trigger: UsageReportTrigger,
    /// When the measurement began.
    pub start_time: Option<StartTime>,
    /// When it ended.
    pub end_time: Option<EndTime>,
    /// The volume measured.
    pub volume_measurement: Option<VolumeMeasurement>,
    /// The time measured.
    pub duration_measurement: Option<DurationMeasurement>,
}

impl UsageReport {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut id, mut seqn, mut trigger, mut start, mut end, mut vol, mut dur) =
            (None, None, None, None, None, None, None);
        each(v, |ty, v| match ty {
            ie_type::URR_ID => first(&mut id, v),
            ie_type::UR_SEQN => first(&mut seqn, v),
            ie_type::USAGE_REPORT_TRIGGER => first(&mut trigger, v),
            ie_type::START_TIME => first(&mut start, v),
            ie_type::END_TIME => first(&mut end, v),
            ie_type::VOLUME_MEASUREMENT => first(&mut vol, v),
            ie_type::DURATION_MEASUREMENT => first(&mut dur, v),
            _ => Ok(()),
        })?;
        Ok(UsageReport {
            urr_id: need(id, ie_type::URR_ID)?,
            ur_seqn: need(seqn, ie_type::UR_SEQN)?,
            trigger: need(trigger, ie_type::USAGE_REPORT_TRIGGER)?,
            start_time: start,
            end_time: end,
            volume_measurement: vol,
            duration_measurement: dur,
        })
    }
    fn encode(&self, w: &mut Writer, ty: u16) -> Result<(), BuildError> {
        w.ie(ty, |w| {
            write(w, &self.urr_id)?;
            write(w, &self.ur_seqn)?;
            write(w, &self.trigger)?;
            write_opt(w, &self.start_time)?;
            write_opt(w, &self.end_time)?;
            write_opt(w, &self.volume_measurement)?;
            write_opt(w, &self.duration_measurement)
        })
    }
}

/// Downlink Data Report (7.5.8.2): the PDRs that buffered downlink data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownlinkDataReport {
    /// At least one.
    pub pdr_id: Vec<PdrId>,
}

#[cfg(feature = "arbitrary")]
impl<'a> arbitrary::Arbitrary<'a> for DownlinkDataReport {
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(DownlinkDataReport {
            pdr_id: vec_at_least_one(u)?,
        })
    }
}

impl DownlinkDataReport {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let mut ids = Vec::new();
        each(v, |ty, v| match ty {
            ie_type::PDR_ID => {
                ids.push(read(v)?);
                Ok(())
            }
            _ => Ok(()),
        })?;
        if ids.is_empty() {
            return Err(DecodeError::MissingIe(ie_type::PDR_ID));
        }
        Ok(DownlinkDataReport { pdr_id: ids })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        if self.pdr_id.is_empty() {
            return Err(BuildError::Value(ie_type::DOWNLINK_DATA_REPORT));
        }
        w.ie(ie_type::DOWNLINK_DATA_REPORT, |w| {
            self.pdr_id.iter().try_for_each(|p| write(w, p))
        })
    }
}

/// Session Report Request (7.5.8): the user plane tells the control plane of buffered
/// downlink data (DLDR) or usage (USAR).
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SessionReportRequest {
    /// What is reported.
    pub report_type: ReportType,
    /// With DLDR.
    pub downlink_data_report: Option<DownlinkDataReport>,
    /// With USAR.
    pub usage_report: Vec<UsageReport>,
}

impl SessionReportRequest {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut rt, mut ddr, mut usage) = (None, None, Vec::new());
        each(v, |ty, v| match ty {
            ie_type::REPORT_TYPE => first(&mut rt, v),
            ie_type::DOWNLINK_DATA_REPORT => first_group(&mut ddr, v, DownlinkDataReport::decode),
            ie_type::USAGE_REPORT_SRR => push_group(&mut usage, v, UsageReport::decode),
            _ => Ok(()),
        })?;
        Ok(SessionReportRequest {
            report_type: need(rt, ie_type::REPORT_TYPE)?,
            downlink_data_report: ddr,
            usage_report: usage,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.report_type)?;
        if let Some(d) = &self.downlink_data_report {
            d.encode(w)?;
        }
        self.usage_report
            .iter()
            .try_for_each(|x| x.encode(w, ie_type::USAGE_REPORT_SRR))
    }
}

/// Session Report Response (7.5.9), the IEs we read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SessionReportResponse {
    /// The outcome.
    pub cause: Cause,
    /// The IE a rejection is about.
    pub offending_ie: Option<OffendingIe>,
}

impl SessionReportResponse {
    fn decode(v: &[u8]) -> Result<Self, DecodeError> {
        let (mut cause, mut off) = (None, None);
        each(v, |ty, v| match ty {
            ie_type::CAUSE => first(&mut cause, v),
            ie_type::OFFENDING_IE => first(&mut off, v),
            _ => Ok(()),
        })?;
        Ok(SessionReportResponse {
            cause: need(cause, ie_type::CAUSE)?,
            offending_ie: off,
        })
    }
    fn encode(&self, w: &mut Writer) -> Result<(), BuildError> {
        write(w, &self.cause)?;
        write_opt(w, &self.offending_ie)
    }
}

/// The IE type that follows a stored Create PDR with the TEID the user plane gave it (4 bytes).
/// Only [`pack_session`] writes it and only [`unpack_session`] reads it: it is never sent.
const STORED_TEID: u16 = 0xffff;

/// A session packed for keeping: the CP's Node ID and F-SEID as their IEs, then each PDR as its
/// Create PDR IE (followed by the TEID the user plane gave it, if any), each FAR as its Create
/// FAR IE and each QER as its Create QER IE, every IE with a short header ([`compact`]). One
/// allocation of less than the request that made them, where the decoded rules take several
/// and three times the bytes; [`unpack_session`] reads it back, [`packed_node_id`] its Node ID
/// alone and [`packed_cp_seid`] the CP's SEID alone.
pub(crate) fn pack_session<'a>(
    node_id: &NodeId,
    cp_f_seid: &FSeid,
    pdrs: impl IntoIterator<Item = (&'a CreatePdr, Option<u32>)>,
    fars: impl IntoIterator<Item = &'a CreateFar>,
    qers: impl IntoIterator<Item = &'a Qer>,
    urrs: impl IntoIterator<Item = &'a Urr>,
    bar: Option<&Bar>,
) -> Result<Box<[u8]>, BuildError> {
    let mut w = Writer::new(Vec::with_capacity(160));
    write(&mut w, node_id)?;
    write(&mut w, cp_f_seid)?;
    for (p, teid) in pdrs {
        p.encode(&mut w)?;
        if let Some(t) = teid {
            w.bytes(STORED_TEID, &t.to_be_bytes())?;
        }
    }
    fars.into_iter().try_for_each(|f| f.encode(&mut w))?;
    qers.into_iter()
        .try_for_each(|q| q.encode(&mut w, ie_type::CREATE_QER))?;
    urrs.into_iter()
        .try_for_each(|u| u.encode(&mut w, ie_type::CREATE_URR))?;
    if let Some(b) = bar {
        b.encode(&mut w, ie_type::CREATE_BAR)?;
    }
    let mut out = Vec::with_capacity(w.buf.len());
    compact(&w.buf, &mut out)?;
    Ok(out.into_boxed_slice())
}

/// Whether a packed IE of type `ty` is a group whose members [`compact`] shortens too.
fn packed_group(ty: u16) -> bool {
    matches!(
        ty,
        ie_type::CREATE_PDR
            | ie_type::PDI
            | ie_type::CREATE_FAR
            | ie_type::FORWARDING_PARAMETERS
            | ie_type::CREATE_QER
            | ie_type::CREATE_URR
    )
}

/// Rewrites well-formed IEs with short headers, for keeping (a session's ~30 IEs have 4-byte
/// headers, a quarter of its bytes). A header is a tag, then the length in one byte when below
/// 0xff (else 0xff and the two bytes). The tag is the type when below 0x80, with the value as
/// it is, or 0xfc and the type's two bytes; for a group of [`packed_group`] whose value is
/// itself rewritten, 0x80 + the type when below 0x7c, or 0xff and its two bytes (a value of a
/// group's type that is not IEs stays as it is). [`expand`] undoes it.
fn compact(ies: &[u8], out: &mut Vec<u8>) -> Result<(), BuildError> {
    for ie in Ies::new(ies) {
        // Our own encoding: its IEs are well-formed.
        let (ty, value) = ie.map_err(|_| BuildError::Value(0))?;
        let at = out.len();
        if packed_group(ty) {
            // Rewritten in place after a provisional tag and 1-byte length (no buffer of its
            // own): a long type or value widens the header afterwards.
            out.extend_from_slice(&[0, 0]);
            if compact(value, out).is_ok() {
                let n = out.len() - at - 2;
                let mut head = [0u8; 6];
                let mut h = 0;
                if ty < 0x7c {
                    head[0] = 0x80 + ty as u8;
                    h = 1;
                } else {
                    head[0] = 0xff;
                    head[1..3].copy_from_slice(&ty.to_be_bytes());
                    h += 3;
                }
                match u8::try_from(n) {
                    Ok(l) if l < 0xff => {
                        head[h] = l;
                        h += 1;
                    }
                    _ => {
                        let len = u16::try_from(n).map_err(|_| BuildError::TooLong(ty))?;
                        head[h] = 0xff;
                        head[h + 1..h + 3].copy_from_slice(&len.to_be_bytes());
                        h += 3;
                    }
                }
                out.splice(at..at + 2, head[..h].iter().copied());
                continue;
            }
            out.truncate(at);
        }
        if ty < 0x80 {
            out.push(ty as u8);
        } else {
            out.push(0xfc);
            out.extend_from_slice(&ty.to_be_bytes());
        }
        match u8::try_from(value.len()) {
            Ok(l) if l < 0xff => out.push(l),
            _ => {
                out.push(0xff);
                let len = u16::try_from(value.len()).map_err(|_| BuildError::TooLong(ty))?;
                out.extend_from_slice(&len.to_be_bytes());
            }
        }
        out.extend_from_slice(value);
    }
    Ok(())
}

/// The next IE [`compact`] wrote: `(type, value, whether the value is a rewritten group)`.
fn next_compact<'a>(b: &mut &'a [u8]) -> Result<(u16, &'a [u8], bool), DecodeError> {
    fn take<'a>(b: &mut &'a [u8], n: usize, ty: u16) -> Result<&'a [u8], DecodeError> {
        if b.len() < n {
            return Err(DecodeError::IeLength(ty));
        }
        let (a, rest) = b.split_at(n);
        *b = rest;
        Ok(a)
    }
    let u16_at = |v: &[u8]| u16::from_be_bytes([v[0], v[1]]);
    let (ty, group) = match take(b, 1, 0)?[0] {
        t @ 0..0x80 => (u16::from(t), false),
        t @ 0x80..0xfc => (u16::from(t - 0x80), true),
        0xfc => (u16_at(take(b, 2, 0)?), false),
        0xff => (u16_at(take(b, 2, 0)?), true),
        t => return Err(DecodeError::InvalidIe(u16::from(t))),
    };
    let len = match take(b, 1, ty)?[0] {
        0xff => usize::from(u16_at(take(b, 2, ty)?)),
        l => usize::from(l),
    };
    Ok((ty, take(b, len, ty)?, group))
}

/// The IEs [`compact`] wrote, with their 4-byte headers again (never panics).
fn expand(mut b: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    while !b.is_empty() {
        let (ty, value, group) = next_compact(&mut b)?;
        out.extend_from_slice(&ty.to_be_bytes());
        let at = out.len();
        out.extend_from_slice(&[0, 0]);
        if group {
            expand(value, out)?;
        } else {
            out.extend_from_slice(value);
        }
        let n = u16::try_from(out.len() - at - 2).map_err(|_| DecodeError::IeLength(ty))?;
        out[at..at + 2].copy_from_slice(&n.to_be_bytes());
    }
    Ok(())
}

/// What [`pack_session`] packed: the CP's Node ID and F-SEID, the PDRs with their TEIDs, the
/// FARs, the QERs and the URRs, each in the order packed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PackedSession {
    pub(crate) node_id: NodeId,
    pub(crate) cp_f_seid: FSeid,
    pub(crate) pdrs: Vec<(CreatePdr, Option<u32>)>,
    pub(crate) fars: Vec<CreateFar>,
    pub(crate) qers: Vec<Qer>,
    pub(crate) urrs: Vec<Urr>,
    pub(crate) bar: Option<Bar>,
}

/// Reads back what [`pack_session`] wrote.
pub(crate) fn unpack_session(packed: &[u8]) -> Result<PackedSession, DecodeError> {
    let mut ies = Vec::with_capacity(packed.len() * 3 / 2);
    expand(packed, &mut ies)?;
    let v = &ies[..];
    let (mut node, mut fseid) = (None, None);
    let (mut pdrs, mut fars, mut qers, mut urrs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut bar = None;
    each(v, |ty, v| {
        match ty {
            ie_type::NODE_ID => first(&mut node, v)?,
            ie_type::F_SEID => first(&mut fseid, v)?,
            ie_type::CREATE_PDR => pdrs.push((CreatePdr::decode(v)?, None)),
            STORED_TEID => {
                let t = u32::from_be_bytes(
                    v.try_into()
                        .map_err(|_| DecodeError::InvalidIe(STORED_TEID))?,
                );
                let last = pdrs.last_mut().ok_or(DecodeError::InvalidIe(STORED_TEID))?;
                last.1 = Some(t);
            }
            ie_type::CREATE_FAR => fars.push(CreateFar::decode(v)?),
            ie_type::CREATE_QER => qers.push(Qer::decode_create(v)?),
            ie_type::CREATE_URR => urrs.push(Urr::decode_create(v)?),
            ie_type::CREATE_BAR => bar = Some(Bar::decode(v)?),
            _ => return Err(DecodeError::InvalidIe(ty)),
        }
        Ok(())
    })?;
    Ok(PackedSession {
        node_id: need(node, ie_type::NODE_ID)?,
        cp_f_seid: need(fseid, ie_type::F_SEID)?,
        pdrs,
        fars,
        qers,
        urrs,
        bar,
    })
}

/// The CP's Node ID of a session [`pack_session`] packed (its first IE).
/// The CP's SEID of a session [`pack_session`] packed (in its second IE, the F-SEID).
pub(crate) fn packed_cp_seid(mut packed: &[u8]) -> Result<u64, DecodeError> {
    next_compact(&mut packed)?;
    match next_compact(&mut packed) {
        Ok((ie_type::F_SEID, value, false)) => read::<FSeid>(value).map(|f| f.seid),
        Ok(_) => Err(DecodeError::MissingIe(ie_type::F_SEID)),
        Err(e) => Err(e),
    }
}

pub(crate) fn packed_node_id(mut packed: &[u8]) -> Result<NodeId, DecodeError> {
    match next_compact(&mut packed) {
        Ok((ie_type::NODE_ID, value, false)) => read(value),
        Ok(_) => Err(DecodeError::MissingIe(ie_type::NODE_ID)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Session Establishment Request's session packed as the endpoint keeps it, every PDR's
    /// F-TEID `teid`; with the request.
    fn pack_request(m: Message, teid: u32) -> (SessionEstablishmentRequest, Box<[u8]>) {
        let Body::SessionEstablishmentRequest(r) = m.body else {
            unreachable!()
        };
        let pdrs: Vec<_> = r.create_pdr.iter().map(|p| (p, Some(teid))).collect();
        let packed = pack_session(
            &r.node_id,
            &r.cp_f_seid,
            pdrs,
            &r.create_far,
            &r.create_qer,
            &r.create_urr,
            None,
        )
        .unwrap();
        (r, packed)
    }

    /// How the endpoint keeps an smf-sim session ([`crate::shapes`]).
    #[test]
    fn an_smf_sim_session_is_kept_in_a_fifth_of_its_packed_bytes() {
        use crate::shapes::Shapes;
        use std::net::{IpAddr, Ipv4Addr};
        let packed = |i: u32| {
            let m = crate::smf::establishment(
                i + 2,
                Ipv4Addr::new(10, 3, 0, 254),
                u64::from(i),
                IpAddr::V4(Ipv4Addr::from(0x6440_0000 + i)),
                0x100 + i,
                Ipv4Addr::new(10, 2, 0, 2),
            );
            pack_request(m, 0x0100_0000 + i).1
        };
        let mut s = Shapes::default();
        s.encode(&packed(0));
        let p = packed(12_345);
        let k = s.encode(&p);
        let mut back = Vec::new();
        s.decode(&k, &mut back).expect("decodes");
        assert_eq!(&back[..], &p[..]);
        let n = k.len();
        eprintln!("{} packed bytes kept in {n}", p.len());
        assert!(n * 5 <= p.len(), "{n} of {}", p.len());
    }
    use proptest::prelude::*;

    /// An IE list: leaves of any type and length (some past one length byte), and groups
    /// (of the types [`packed_group`] names) of such lists, a few levels deep.
    fn ies() -> impl Strategy<Value = Vec<u8>> {
        let leaf = (
            prop_oneof![1u16..0xff, Just(0xff), 0x100u16..=0xffff],
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(|(ty, v)| ie(ty, &v));
        let list = proptest::collection::vec(leaf, 0..6).prop_map(|l| l.concat());
        list.prop_recursive(3, 64, 6, |inner| {
            proptest::collection::vec(
                (
                    prop_oneof![
                        Just(ie_type::CREATE_PDR),
                        Just(ie_type::PDI),
                        Just(ie_type::CREATE_FAR),
                        Just(ie_type::FORWARDING_PARAMETERS),
                        Just(ie_type::CREATE_QER),
                    ],
                    inner,
                )
                    .prop_map(|(ty, v)| ie(ty, &v)),
                0..4,
            )
            .prop_map(|l| l.concat())
        })
    }

    fn ie(ty: u16, value: &[u8]) -> Vec<u8> {
        let mut w = Writer::new(Vec::new());
        w.bytes(ty, value).unwrap();
        w.buf
    }

    proptest! {
        /// Short headers give back the IEs byte for byte.
        #[test]
        fn compact_ies_expand_to_themselves(b in ies()) {
            let mut c = Vec::new();
            compact(&b, &mut c).unwrap();
            let mut e = Vec::new();
            expand(&c, &mut e).unwrap();
            prop_assert_eq!(e, b);
        }

        /// Any bytes: an error or IEs, never a panic; what expands compacts back to itself.
        #[test]
        fn any_bytes_expand_or_fail(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut e = Vec::new();
            if expand(&b, &mut e).is_ok() {
                let mut c = Vec::new();
                if compact(&e, &mut c).is_ok() {
                    let mut again = Vec::new();
                    expand(&c, &mut again).unwrap();
                    prop_assert_eq!(again, e);
                }
            }
        }
    }

    #[test]
    fn a_session_of_two_pdrs_and_fars_is_a_quarter_smaller() {
        // smf-sim's session: the packed form against the IEs it came from.
        let m = crate::smf::establishment(
            1,
            std::net::Ipv4Addr::new(10, 3, 0, 254),
            7,
            std::net::IpAddr::V4(std::net::Ipv4Addr::new(100, 64, 0, 1)),
            0x100,
            std::net::Ipv4Addr::new(10, 2, 0, 2),
        );
        let (r, packed) = pack_request(m, 5);
        let mut ies = Vec::new();
        expand(&packed, &mut ies).unwrap();
        eprintln!("{} bytes packed, {} as IEs", packed.len(), ies.len());
        assert!(
            packed.len() * 4 <= ies.len() * 3,
            "{} of {}",
            packed.len(),
            ies.len()
        );
        assert_eq!(packed_node_id(&packed), Ok(r.node_id.clone()));
        assert_eq!(packed_cp_seid(&packed), Ok(7));
        let back = unpack_session(&packed).unwrap();
        assert_eq!((back.pdrs.len(), back.fars.len()), (2, 2));
    }
}
